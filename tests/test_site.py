"""The course website (``make site``, built by docs/site/build.py).

Two kinds of test:

* fast ones, in ``make test`` and ``make check``: how the pages are staged (links, badges, the
  student switch, the hub link) and that CI, the Makefile and the Pages workflow build it;
* a real browser test of built sites, run by ``make check-site`` (which builds them and names
  them in ``COURSE_SITE_DIRS``): every page is opened in headless Chromium from Debian and
  must load without console errors, with its math typeset (no raw ``$$``), every image
  loaded, every internal link resolving and its Colab link pointing at its own notebook. A
  notebook page also has its setup cell folded (and opening on a click), an outline that
  follows the notebook's headings with no section nested under an exercise, a copy button on
  every code cell (one is clicked and the clipboard read), and figures that read in the light
  and the dark scheme (screenshots: enough pixels of contrast 4.5, no glaring background),
  checked also on a probe site of drawings in black on transparent. The search lists each
  notebook once and shows no raw TeX. Without ``COURSE_SITE_DIRS`` these tests are skipped
  and say how to run them.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urljoin, urlsplit
from urllib.request import urlopen

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("site_build", ROOT / "docs" / "site" / "build.py")
site_build = importlib.util.module_from_spec(_spec)
sys.modules["site_build"] = site_build  # dataclasses look their module up there
_spec.loader.exec_module(site_build)

SLUG = "someone/some-course"
HUB = "https://hub.example.edu"


# ----------------------------------------------------------------------------- staging


def test_the_site_points_at_the_repository_the_badges_name():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = {
        m.group(2)
        for m in site_build.nbtools.REPO_URL.finditer(readme)
        if m.group(1).startswith("colab")
    }
    for folder in ("solutions", "notebooks"):  # each header badge, the one a page replaces
        for path in site_build.selected(folder, site_build.Options()):
            header = json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"]
            badge = site_build.HEADER_BADGE.search("".join(header))
            assert badge, f"{path.name}: no Colab badge in the header"
            named |= {m.group(2) for m in site_build.nbtools.REPO_URL.finditer(badge[0])}
    assert named == {site_build.repository_slug()}
    assert site_build.repository_slug(SLUG) == SLUG
    with pytest.raises(SystemExit, match="owner/name"):
        site_build.repository_slug("not a slug")


def test_link_bar_opens_this_notebook_in_colab_and_offers_the_file():
    path = "notebooks/02_attention.ipynb"
    bar = site_build.link_bar(path, site_build.Options(), SLUG)
    assert f'href="https://colab.research.google.com/github/{SLUG}/blob/main/{path}"' in bar
    assert 'href="02_attention.ipynb" download' in bar
    assert 'src="../_static/colab-badge.svg"' in bar  # served with the site
    assert "nb-hub" not in bar


def test_link_bar_with_a_hub_pulls_the_repository_and_opens_the_notebook():
    path = "solutions/05_encoder_decoder.ipynb"
    bar = site_build.link_bar(path, site_build.Options(hub=HUB + "/"), SLUG)
    href = re.search(r'class="nb-hub" href="([^"]+)"', bar)[1].replace("&amp;", "&")
    parts = urlsplit(href)
    assert f"{parts.scheme}://{parts.netloc}" == HUB
    assert parts.path == "/hub/user-redirect/git-pull"
    query = parse_qs(parts.query)
    assert query == {
        "repo": [f"https://github.com/{SLUG}"],
        "urlpath": [f"lab/tree/some-course/{path}"],
        "branch": ["main"],
    }


def _readme(options) -> str:
    shown = {f"notebooks/{p.stem}" for p in site_build.selected("notebooks", options)}
    if options.solutions:
        shown |= {f"solutions/{p.stem}" for p in site_build.selected("solutions", options)}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return site_build.landing_page(readme, options, shown)


def test_landing_page_links_the_table_to_pages_with_local_badges():
    page = _readme(site_build.Options())
    assert "](notebooks/02_attention.ipynb)" in page  # the solutions: in the navigation
    assert site_build.BADGE_IMAGE not in page and site_build.LOCAL_BADGE in page


def test_student_landing_page_has_no_solution_column_and_stops_at_upto():
    page = _readme(site_build.Options(solutions=False, upto=3))
    header = next(line for line in page.splitlines() if line.startswith("| # | notebook |"))
    assert " solution " not in header.split("|")
    assert "solutions/" not in "".join(line for line in page.splitlines() if line.startswith("|"))
    assert "](notebooks/03_multi_head_attention.ipynb)" in page
    assert "| 04 |" not in page
    widths = {line.count("|") for line in page.splitlines() if re.match(r"\| (#|\d\d) \|", line)}
    assert len(widths) == 1, "every row of the table lost the same column"


def test_a_page_shows_its_links_in_place_of_the_header_badge():
    import nbformat

    path = ROOT / "solutions" / "02_attention.ipynb"
    shown = {"solutions/01_tokens"}  # 00 is left out: its link becomes text
    text = site_build.page_notebook(path, "solutions", site_build.Options(hub=HUB), SLUG, shown)
    header = nbformat.reads(text, as_version=4).cells[0].source
    assert header.startswith("# 02 · ") and header.split("\n")[0].endswith(" (solution)")
    assert "[![Open In Colab]" not in header
    assert header.count('class="nb-links"') == 1 and 'class="nb-hub"' in header
    assert f"{SLUG}/blob/main/solutions/02_attention.ipynb" in header
    assert "[01 · tokens](01_tokens.ipynb)" in header
    assert "00_welcome.ipynb" not in header and "00 · welcome" in header


def test_a_page_folds_its_setup_cell_and_only_that_cell():
    import nbformat

    path = ROOT / "solutions" / "02_attention.ipynb"
    text = site_build.page_notebook(path, "solutions", site_build.Options(), SLUG, set())
    staged = [c for c in nbformat.reads(text, as_version=4).cells if c.cell_type == "code"]
    source = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert staged[0].source == source[0].source  # the setup cell, untouched but tagged
    assert {"hide-input", "course-setup"} <= set(staged[0].metadata["tags"])
    assert not any("hide-input" in c.metadata.get("tags", []) for c in staged[1:])
    assert "tags" not in source[0].metadata  # the notebook itself is not edited


def _headings(sources: list[str]) -> list[str]:
    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(s) for s in sources])
    site_build.end_task_sections(notebook)
    return [line for c in notebook.cells for line in c.source.splitlines() if line.strip()]


def test_a_section_after_an_exercise_is_not_nested_under_it():
    assert _headings(
        [
            "# 01 · Title\n## Concept\n### Sub-concept",  # kept: a concept may have sections
            "## Exercise 1.4 · Encode\nText.\n### BPE on the reviews\n#### Detail",
            "```python\n### not a heading: code\n```\n### Question 1.6",
            "## Exercise 1.5 · Again\n## Summary\n### Further reading",
        ]
    ) == [
        "# 01 · Title", "## Concept", "### Sub-concept",
        "## Exercise 1.4 · Encode", "Text.", "## BPE on the reviews", "### Detail",
        "```python", "### not a heading: code", "```", "## Question 1.6",
        "## Exercise 1.5 · Again", "## Summary", "### Further reading",
    ]  # fmt: skip
    # exercises nested under a concept section (08's) stay where they are
    inside = ["## Out-of-scope detection", "### Exercise 8.2 · Apply", "### The threshold at work"]
    assert _headings(["\n".join(inside)]) == inside


def test_the_image_files_of_markdown_cells_are_staged(tmp_path):
    import nbformat

    folder = tmp_path / "solutions"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "a b.svg").write_text("<svg/>")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "c.png").write_bytes(b"png")
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell(
                '![a](figures/a%20b.svg "title") <img src="../docs/c.png" alt="c">\n'
                "![web](https://example.org/x.png) ![att](attachment:d.png) ![gone](e.png)"
            )
        ]
    )
    path = folder / "01_x.ipynb"
    nbformat.write(notebook, path)
    assert site_build.image_files(notebook) == ["figures/a b.svg", "../docs/c.png", "e.png"]
    staging = tmp_path / "staging"
    site_build.stage_image_files(path, staging / "solutions")
    assert (staging / "solutions" / "figures" / "a b.svg").read_text() == "<svg/>"
    assert (staging / "docs" / "c.png").read_bytes() == b"png"
    assert not (staging / "solutions" / "e.png").exists()  # missing: Sphinx will say so


def test_cell_attachments_become_files_the_page_shows(tmp_path):
    import base64

    import nbformat

    cell = nbformat.v4.new_markdown_cell("![one](attachment:a b.png) and ![two](attachment:c.svg)")
    cell["attachments"] = {
        "a b.png": {"image/png": base64.b64encode(b"\x89PNG").decode()},
        "c.svg": {"image/svg+xml": ["<svg>", "</svg>"]},
    }
    text = nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(), cell]))
    staged = nbformat.reads(site_build.stage_attachments(text, tmp_path, "01_x"), as_version=4)
    assert staged.cells[1].source == (
        "![one](_attachments/01_x/1-a_b.png) and ![two](_attachments/01_x/1-c.svg)"
    )
    assert "attachments" not in staged.cells[1]
    assert (tmp_path / "_attachments" / "01_x" / "1-a_b.png").read_bytes() == b"\x89PNG"
    assert (tmp_path / "_attachments" / "01_x" / "1-c.svg").read_text() == "<svg></svg>"


def test_every_page_under_docs_is_in_the_guide():
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    missing = pages - set(site_build.GUIDE_PAGES)
    assert not missing, f"add to GUIDE_PAGES in docs/site/build.py: {sorted(missing)}"
    assert all((ROOT / page).is_file() for page in site_build.GUIDE_PAGES)


def test_the_guide_is_staged_at_its_paths_and_listed_in_the_navigation(tmp_path):
    info = site_build.stage(site_build.Options(solutions=False, upto=1), tmp_path / "source")
    assert info["guide"] == [page.removesuffix(".md") for page in site_build.GUIDE_PAGES]
    index = (tmp_path / "source" / "index.md").read_text(encoding="utf-8")
    guide = index.split(":caption: Guide\n", 1)[1].split("```", 1)[0].split()
    assert guide == info["guide"]
    for page in site_build.GUIDE_PAGES:
        staged = (tmp_path / "source" / page).read_text(encoding="utf-8")
        assert staged.startswith("# ") and site_build.BADGE_IMAGE not in staged
        # links to notebooks this build leaves out (here 02 on) become plain text
        assert "solutions/" not in "".join(re.findall(r"\]\(([^)]*\.ipynb)", staged))


def test_a_build_never_replaces_a_folder_that_is_not_a_site(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not a site built here"):
        site_build.build(tmp_path, site_build.Options())
    assert (tmp_path / "notes.txt").read_text() == "mine"


# ----------------------------------------------------------------------------- wiring


def test_make_site_and_check_site_are_wired_into_ci():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^site: ", makefile, re.M) and re.search(r"^check-site: ", makefile, re.M)
    assert "docs/site/build.py" in makefile and "COURSE_SITE_DIRS" in makefile
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "chromium chromium-driver" in ci and "make check-site" in ci
    check = re.search(r"^check: .*?(?=^\S)", makefile, re.M | re.S)[0]
    assert "check-site" not in check and "test_site" not in check  # the pieces stay separate


def test_pages_workflow_publishes_what_make_site_builds():
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    runs = [step.get("run", "") for step in steps]
    assert "make site" in runs
    upload = next(
        s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact@")
    )
    assert upload["with"]["path"] == "site"
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in steps)


def test_built_site_is_ignored_by_git():
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert "/site/" in ignored and "build/" in ignored  # /site/: not docs/site/


# ----------------------------------------------------------------------------- browser

SITE_DIRS = [Path(p) for p in os.environ.get("COURSE_SITE_DIRS", "").split(os.pathsep) if p]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
NOT_REQUESTED = (
    "the browser test runs under `make check-site` (it builds the sites, then names them in "
    "COURSE_SITE_DIRS); it needs Chromium: apt-get install chromium chromium-driver"
)
# raw TeX left in the text: $$, or a $...$ span holding a TeX command
RAW_TEX = re.compile(r"\$\$|\$[^$\s][^$\n]*\\[A-Za-z]+[^$\n]*\$")


def _pages() -> list[tuple[Path, str]]:
    found = []
    for site in SITE_DIRS:
        for page in sorted((ROOT / site).rglob("*.html")):
            found.append((ROOT / site, page.relative_to(ROOT / site).as_posix()))
    return found


def _info(site: Path) -> dict:
    return json.loads((site / site_build.BUILD_INFO).read_text(encoding="utf-8"))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the test reports failures itself
        pass


@functools.cache
def _server(site: Path) -> str:
    """Serve ``site`` over HTTP on localhost (for the whole session); return its base URL."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


@functools.cache
def _fetch(url: str) -> tuple[int, bytes]:
    try:
        with urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except OSError as error:  # HTTPError included
        return getattr(error, "code", 0), b""


@pytest.fixture(scope="module")
def browser():
    if not SITE_DIRS:
        pytest.skip(NOT_REQUESTED)
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:  # asked for (COURSE_SITE_DIRS is set): a missing browser is a failure
        pytest.fail(f"{', '.join(missing)} not found: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="site-test-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1280,800", f"--user-data-dir={profile}",
    ):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _open(driver, url: str) -> list[dict]:
    """Load ``url``, wait for MathJax to finish, return the console messages of the load."""
    driver.get_log("browser")  # drop what earlier pages left
    driver.get(url)
    driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const mj = window.MathJax && window.MathJax.startup && window.MathJax.startup.promise;"
        "(mj || Promise.resolve()).then(() => done(true), () => done(false));"
    )
    time.sleep(0.1)  # late console messages of the load
    return driver.get_log("browser")


IMAGES_JS = """
const done = arguments[arguments.length - 1];
Promise.all([...document.images].map(img => {
  const probe = new Image();
  probe.src = img.currentSrc || img.src;
  return probe.decode().then(() => [img.src, probe.naturalWidth], () => [img.src, 0]);
})).then(done);
"""
TEXT_JS = """
const clone = document.querySelector('article') ? document.querySelector('article').cloneNode(true)
  : document.body.cloneNode(true);
clone.querySelectorAll('pre, code, script, style, mjx-container').forEach(e => e.remove());
return clone.textContent;
"""


# ------------------------------------------------------------ what a notebook page shows


def _notebook(site: Path, page: str) -> dict:
    """The untouched notebook served beside ``page`` (what the page was built from)."""
    return json.loads((site / page.replace(".html", ".ipynb")).read_text(encoding="utf-8"))


def _code_cells(notebook: dict) -> list[str]:
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]


SETUP_JS = """
const cells = [...document.querySelectorAll('article div.cell')];
const seen = (e) => !!e && e.checkVisibility() && e.offsetHeight > 0;
const first = cells[0];
const details = first && first.querySelector('details');
return {
  cells: cells.length,
  code: first ? first.querySelector('.cell_input pre').textContent : null,
  folded: !!details && !details.open && !seen(first.querySelector('.cell_input')),
  summary: !!details && seen(details.querySelector('summary')),
  output: first ? seen(first.querySelector('.cell_output')) : false,
  others: cells.slice(1).filter(c => c.querySelector('details')).length,
};
"""


def _setup_cell_problems(driver, site: Path, page: str) -> list[str]:
    """The setup cell (the notebook's first code cell) is folded, its output shown, and it
    opens on a click; no other cell is folded."""
    notebook = _notebook(site, page)
    first = next(c for c in notebook["cells"] if c["cell_type"] == "code")
    setup, has_output = "".join(first["source"]), bool(first.get("outputs"))
    state = driver.execute_script(SETUP_JS)
    problems = []
    if state["code"] is None or state["code"].strip() != setup.strip():
        problems.append("the first cell on the page is not the notebook's setup cell")
    if not (state["folded"] and state["summary"]):
        problems.append(f"the setup cell is not folded behind a visible toggle: {state}")
    if state["output"] != has_output:
        problems.append(f"the setup cell's output is {'hidden' if has_output else 'invented'}")
    if state["others"]:
        problems.append(f"{state['others']} other cells are folded")
    if not state["summary"]:
        return problems
    driver.execute_script("document.querySelector('article div.cell details summary').click()")
    opened = driver.execute_script(
        "const i = document.querySelector('article div.cell .cell_input');"
        "return i.offsetHeight > 0 && i.checkVisibility()"
    )
    driver.execute_script("document.querySelector('article div.cell details summary').click()")
    if not opened:
        problems.append("a click on the setup cell's toggle does not show its code")
    return problems


OUTLINE_JS = """
const walk = (ul, parent, out) => {
  for (const li of ul.children) {
    const a = li.querySelector(':scope > a');
    out.push([a.textContent.trim(), parent]);
    const sub = li.querySelector(':scope > ul');
    if (sub) walk(sub, out.length - 1, out);
  }
  return out;
};
const tree = document.querySelector('.toc-tree > ul');
return tree ? walk(tree, -1, []) : [];
"""
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
FENCE = re.compile(r"^\s*(```|~~~)")
TASK = re.compile(r"(Exercise|Question)\s+\d+\.\d+\b")


def _notebook_outline(notebook: dict) -> list[tuple[int, str]]:
    """(level, text) of every markdown heading of the notebook, in order."""
    found = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        fenced = False
        for line in "".join(cell["source"]).splitlines():
            fenced ^= bool(FENCE.match(line))
            match = None if fenced else HEADING.match(line)
            if match:
                found.append((len(match[1]), match[2]))
    return found


def _outline_problems(driver, site: Path, page: str) -> list[str]:
    """The page outline lists the notebook's headings in order, each under its parent in the
    notebook, except that an exercise or question heading has no children: what the
    notebook writes below one belongs to the task's own parent."""
    headings = _notebook_outline(_notebook(site, page))
    outline = driver.execute_script(OUTLINE_JS)
    if len(outline) != len(headings):
        return [f"the outline has {len(outline)} entries, the notebook {len(headings)} headings"]
    problems = []
    for i, ((level, _), (shown, parent)) in enumerate(zip(headings, outline, strict=True)):
        expected = next((j for j in range(i - 1, -1, -1) if headings[j][0] < level), -1)
        while expected >= 0 and TASK.match(headings[expected][1]):
            expected = next(
                (j for j in range(expected - 1, -1, -1) if headings[j][0] < headings[expected][0]),
                -1,
            )
        if parent != expected:
            under = outline[parent][0] if parent >= 0 else "(top)"
            problems.append(f"outline: {shown!r} sits under {under!r}")
    return problems


def _copy_button_problems(driver) -> list[str]:
    counts = driver.execute_script(
        "const inputs = [...document.querySelectorAll('article .cell_input pre')];"
        "return [inputs.length,"
        " inputs.filter(p => p.parentElement.querySelector('button.copybtn')).length,"
        " document.querySelectorAll('article .cell_output button.copybtn').length]"
    )
    inputs, buttons, on_outputs = counts
    problems = []
    if not inputs or buttons != inputs:
        problems.append(f"copy buttons on {buttons} of {inputs} code cells")
    if on_outputs:
        problems.append(f"{on_outputs} copy buttons on outputs")
    return problems


# The colour schemes a reader can see: furo's switch sets body[data-theme]; "auto" follows
# the system (emulated here), and dark it is when the system is dark.
SCHEMES = {"light": ("light", "light"), "dark": ("dark", "light"), "auto-dark": ("auto", "dark")}


# What scrolls sideways: the page itself, or a scroll container of the article (a table's
# wrapper, a code block) whose content is wider than its box, with its tag, classes and widths.
SIDEWAYS_JS = """
const page = document.scrollingElement;
const found = [];
if (page.scrollWidth > page.clientWidth + 1) {
  found.push(['the page', page.scrollWidth, page.clientWidth]);
}
for (const e of document.querySelectorAll('article *')) {
  const scrolls = ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  if (scrolls && e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0) {
    const name = [e.tagName.toLowerCase(), ...e.classList].join('.');
    found.push([name, e.scrollWidth, e.clientWidth]);
  }
}
return found;
"""
# The window width the landing page is held to: a laptop's browser (its text column is 742 px).
LANDING_WIDTH = 1280


# A table as wide as the landing page's former one, in a scroll container like furo's wrapper:
# the check must see it (then it is removed).
WIDE_PROBE_JS = """
const probe = document.createElement('div');
probe.id = 'sideways-probe'; probe.style.overflowX = 'auto';
probe.innerHTML = '<table style="width: 1046px"><tr><td>wide</td></tr></table>';
document.querySelector('article').appendChild(probe);
"""


def _sideways_scroll_problems(driver) -> list[str]:
    """The landing page at 1280 px in both colour schemes: nothing scrolls sideways."""
    problems = []
    driver.execute_script(WIDE_PROBE_JS)
    seen = [what for what, _, _ in driver.execute_script(SIDEWAYS_JS)]
    driver.execute_script("document.getElementById('sideways-probe').remove()")
    if "div" not in seen:
        problems.append(f"the sideways check missed a 1046 px table in a scroll box: {seen}")
    size = driver.get_window_size()
    driver.set_window_size(LANDING_WIDTH, size["height"])
    try:
        for scheme in ("light", "dark"):
            _show_scheme(driver, scheme)
            problems += [
                f"{scheme} scheme at {LANDING_WIDTH} px: {what} scrolls sideways "
                f"({wide} px of content in {box} px)"
                for what, wide, box in driver.execute_script(SIDEWAYS_JS)
            ]
    finally:
        _show_scheme(driver, "light")
        driver.set_window_size(size["width"], size["height"])
    return problems


def _navigation_problems(driver, base: str, info: dict) -> list[str]:
    """Every page of the guide is linked from the navigation (the sidebar) of the landing page."""
    linked = driver.execute_script(
        "return [...document.querySelectorAll('.sidebar-tree a')].map(a => a.href)"
    )
    paths = {urlsplit(link).path.lstrip("/") for link in linked if link.startswith(base)}
    return [
        f"the navigation does not link {page}.html"
        for page in info["guide"]
        if f"{page}.html" not in paths
    ]


def _show_scheme(driver, scheme: str) -> None:
    theme, system = SCHEMES[scheme]
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": system}]},
    )
    driver.execute_script(f"document.body.dataset.theme = {theme!r}")
    time.sleep(0.05)


def _luminance(rgb):
    """WCAG relative luminance of an (..., 3) array of sRGB values 0..255."""
    import numpy as np

    c = np.asarray(rgb, dtype=float) / 255
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return c @ np.array([0.2126, 0.7152, 0.0722])


def legibility(png: bytes) -> tuple[float, float]:
    """(the background's luminance, the share of pixels readable on it) of a screenshot:
    the background is its most common colour, a pixel is readable (ink) when its contrast
    ratio with that colour is at least 4.5, WCAG's minimum for text."""
    import io

    import numpy as np
    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    packed = rgb.astype(np.int64) @ np.array([1 << 16, 1 << 8, 1])  # one int per colour
    colours, counts = np.unique(packed, return_counts=True)  # (faster than unique rows)
    common = int(colours[counts.argmax()])
    background = _luminance([common >> 16, (common >> 8) & 255, common & 255])
    lum = _luminance(rgb)
    contrast = (np.maximum(lum, background) + 0.05) / (np.minimum(lum, background) + 0.05)
    return float(background), float((contrast >= 4.5).mean())


def _shot(driver, element) -> bytes:
    """A PNG of what ``element`` shows: the part of a viewport screenshot it covers, once
    scrolled to the middle (chromedriver's element screenshots time out under load)."""
    import io

    from PIL import Image

    rect = driver.execute_script(
        "arguments[0].scrollIntoView({block: 'center', behavior: 'instant'});"
        "const r = arguments[0].getBoundingClientRect(), s = window.devicePixelRatio;"
        "return [r.left * s, r.top * s, r.right * s, r.bottom * s];",
        element,
    )
    with Image.open(io.BytesIO(driver.get_screenshot_as_png())) as viewport:
        box = [max(0, round(rect[0])), max(0, round(rect[1]))]
        box += [min(viewport.width, round(rect[2])), min(viewport.height, round(rect[3]))]
        assert box[2] > box[0] and box[3] > box[1], f"nothing of the element is shown: {rect}"
        out = io.BytesIO()
        viewport.crop(box).save(out, format="PNG")
    return out.getvalue()


MIN_INK = 0.002  # of a figure's pixels: text and axes; a figure whose ink vanished has none
MAX_DARK_BACKGROUND = 0.75  # luminance: white is 1.0; in the dark scheme a figure must not glare
FIGURES_JS = """
return [...document.querySelectorAll('article img')]
  .filter(img => !img.closest('.nb-links'))
  .map(img => [img, img.classList.contains('course-figure'), img.getAttribute('src')]);
"""


def _figure_problems(driver, schemes=("light", "dark")) -> list[str]:
    """Every image of a notebook page is a figure (class course-figure) and shows ink that
    can be read in each colour scheme; in a dark one it does not glare."""
    problems = []
    figures = driver.execute_script(FIGURES_JS)
    problems += [f"image {src} is not a course-figure" for _, mark, src in figures if not mark]
    for scheme in schemes:
        _show_scheme(driver, scheme)
        for element, _, src in figures:
            background, ink = legibility(_shot(driver, element))
            if ink < MIN_INK:
                problems.append(f"{scheme}: figure {src} has {ink:.2%} readable pixels")
            if scheme != "light" and background > MAX_DARK_BACKGROUND:
                problems.append(f"{scheme}: figure {src} glares (background {background:.2f})")
    _show_scheme(driver, "light")
    return problems


@pytest.mark.parametrize(
    "site, page",
    _pages() or [pytest.param(None, None, marks=pytest.mark.skip(reason=NOT_REQUESTED))],
)
def test_page_loads_cleanly_in_chromium(browser, site, page):
    info = _info(site)
    base = _server(site)
    url = urljoin(base, page)
    problems = []
    messages = _open(browser, url)
    problems += [
        f"console {m['level']}: {m['message']}" for m in messages if m["level"] == "SEVERE"
    ]
    raw = RAW_TEX.findall(browser.execute_script(TEXT_JS))
    problems += [f"raw TeX in the text: {r[:60]!r}" for r in raw]
    if browser.execute_script("return document.querySelectorAll('.math').length"):
        typeset = browser.execute_script("return document.querySelectorAll('mjx-container').length")
        errors = browser.execute_script("return document.querySelectorAll('mjx-merror').length")
        if not typeset or errors:
            problems.append(f"math: {typeset} formulas typeset, {errors} MathJax errors")
    for src, width in browser.execute_async_script(IMAGES_JS):
        if not width:
            problems.append(f"image did not load: {src}")
    links = browser.execute_script("return [...document.links].map(a => a.href)")
    for link in links:
        if not link.startswith(base):
            continue
        target, _, fragment = link.partition("#")
        status, body = _fetch(target)
        if status != 200:
            problems.append(f"link {link} -> HTTP {status}")
        elif fragment and target.endswith(".html"):
            if f'id="{unquote(fragment)}"'.encode() not in body:
                problems.append(f"link {link}: no element with id {fragment!r}")
    colab = [link for link in links if link.startswith("https://colab.research.google.com/")]
    prefix = f"https://colab.research.google.com/github/{info['repository']}/blob/main/"
    if page.startswith(("notebooks/", "solutions/")):
        notebook = page.removesuffix(".html") + ".ipynb"
        if colab != [prefix + notebook]:
            problems.append(f"Colab links {colab}, expected one to {prefix + notebook}")
        download = browser.execute_script(
            "const a = document.querySelector('a.nb-download'); return a ? a.href : null"
        )
        status, body = _fetch(download) if download else (0, b"")
        if download != urljoin(base, notebook) or status != 200 or b'"nbformat"' not in body:
            problems.append(f"download link {download!r} (HTTP {status}) is not {notebook}")
        hubs = browser.execute_script(
            "return [...document.querySelectorAll('a.nb-hub')].map(a => a.href)"
        )
        if info["hub"]:
            expected = site_build.nbgitpuller_url(info["hub"], info["repository"], notebook)
            if hubs != [expected]:
                problems.append(f"hub links {hubs}, expected [{expected}]")
        elif hubs:
            problems.append(f"hub links {hubs} in a site built without HUB")
        problems += _setup_cell_problems(browser, site, page)
        problems += _outline_problems(browser, site, page)
        problems += _copy_button_problems(browser)
        problems += _figure_problems(browser)
    elif page == "index.html":
        pages = {urlsplit(link).path.lstrip("/") for link in links if link.startswith(base)}
        for link in colab:
            notebook = link.removeprefix(prefix)
            if (
                not link.startswith(prefix)
                or notebook.removesuffix(".ipynb") + ".html" not in pages
            ):
                problems.append(f"Colab link {link} has no page for its notebook in this site")
        if not colab:
            problems.append("the landing page has no Colab badge")
        problems += _sideways_scroll_problems(browser)
        problems += _navigation_problems(browser, base, info)
    if not info["solutions"] and any("/solutions/" in link for link in links):
        problems.append("a student site links to solutions")
    screenshots = os.environ.get("COURSE_SITE_SCREENSHOTS")
    if screenshots and site == ROOT / SITE_DIRS[0] and page in SCREENSHOT_PAGES:
        _screenshot(browser, Path(screenshots), page)
    assert not problems, f"{page} of {site}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "site", SITE_DIRS or [pytest.param(None, marks=pytest.mark.skip(reason=NOT_REQUESTED))]
)
def test_every_notebook_has_a_page_and_the_search_box_finds_them(browser, site):
    site = ROOT / site
    info = _info(site)
    folders = ["notebooks"] + (["solutions"] if info["solutions"] else [])
    for folder in folders:
        expected = [
            p.stem for p in site_build.selected(folder, site_build.Options(upto=info["upto"]))
        ]
        assert sorted(p.stem for p in (site / folder).glob("*.html")) == expected
        assert sorted(p.stem for p in (site / folder).glob("*.ipynb")) == expected
    assert info["solutions"] == (site / "solutions").exists()
    assert (site / "license.html").exists()
    assert info["guide"] and all((site / f"{page}.html").exists() for page in info["guide"])
    base = _server(site)
    messages = _open(browser, urljoin(base, "search.html?q=attention"))
    deadline = time.time() + 30
    results = []
    while time.time() < deadline and not results:
        results = browser.execute_script(
            "return [...document.querySelectorAll('#search-results li a')].map(a => a.href)"
        )
        time.sleep(0.2)
    assert results, "the search page found nothing for 'attention'"
    assert any("02_attention.html" in r for r in results)
    assert not [m for m in messages if m["level"] == "SEVERE"]


SEARCH_JS = """
const items = [...document.querySelectorAll('#search-results li')];
const status = document.querySelector('#search-results .search-summary, #search-results p');
return {
  finished: !!status && /finished|did not match/i.test(status.textContent),
  results: items.map(li => {
    const a = li.querySelector(':scope > a'), excerpt = li.querySelector('p.context');
    return [a.href, a.textContent, excerpt ? excerpt.textContent : null];
  }),
};
"""
# What raw TeX looks like in plain text: a command, a \( \[ delimiter, $$, or $...\...$
RAW_TEX_TEXT = re.compile(r"\\[A-Za-z]+|\\[()\[\]]|\$\$|\$[^$]*\\[^$]*\$")


def _search(driver, base: str, query: str) -> list[list[str]]:
    """The results of the site's search page for ``query``, once every excerpt is shown:
    [link, title, excerpt]."""
    _open(driver, urljoin(base, f"search.html?q={quote(query)}"))
    deadline = time.time() + 60
    while time.time() < deadline:
        state = driver.execute_script(SEARCH_JS)
        results = state["results"]
        if state["finished"] and all(excerpt is not None for *_, excerpt in results):
            return results
        time.sleep(0.2)
    raise AssertionError(f"the search for {query!r} did not finish: {state}")


@pytest.mark.parametrize(
    "site", SITE_DIRS or [pytest.param(None, marks=pytest.mark.skip(reason=NOT_REQUESTED))]
)
def test_search_lists_each_notebook_once_and_shows_no_raw_tex(browser, site):
    base = _server(ROOT / site)
    shown = {}  # query -> every title and excerpt of its results
    for query in ("attention", "divide", "softmax", "why divide by"):
        results = _search(browser, base, query)
        assert results, f"the search found nothing for {query!r}"
        hits: dict[tuple[str, str], set[str]] = {}
        for link, title, excerpt in results:
            parts = urlsplit(link)
            folder, _, stem = parts.path.lstrip("/").removesuffix(".html").rpartition("/")
            hits.setdefault((stem, parts.fragment), set()).add(folder)
            raw = RAW_TEX_TEXT.findall(title + " " + excerpt)
            assert not raw, f"{query!r}: raw TeX {raw} in the result {title!r}: {excerpt!r}"
        twice = {hit: folders for hit, folders in hits.items() if len(folders) > 1}
        assert not twice, f"{query!r}: the same hit from two pages of one notebook: {twice}"
        shown[query] = " ".join(title + " " + excerpt for _, title, excerpt in results)
    # the formulas were there and became text: in an excerpt ("the scores are divided by
    # √dₖ") and in a section's title ("02 · Scaled dot-product attention > Why divide by √dₖ?")
    assert "√" in shown["divide"], shown["divide"][:500]
    titles = [title for _, title, _ in _search(browser, base, "why divide by")]
    assert any(title.endswith("Why divide by √dₖ?") for title in titles), titles
    # the setup cell, the same on every page, is not indexed: its words would hit them all
    assert not _search(browser, base, "COURSE_REPO_DIR")


@pytest.mark.parametrize(
    "site", SITE_DIRS or [pytest.param(None, marks=pytest.mark.skip(reason=NOT_REQUESTED))]
)
def test_a_copy_button_copies_its_code_cell(browser, site):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    site = ROOT / site
    base = _server(site)
    page = "notebooks/02_attention.html"
    browser.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": base.rstrip("/"), "permissions": ["clipboardReadWrite"]},
    )
    _open(browser, urljoin(base, page))
    read = (
        "const done = arguments[arguments.length - 1];"
        "navigator.clipboard.readText().then(done, e => done('clipboard error: ' + e));"
    )
    browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "navigator.clipboard.writeText('nothing copied yet').then(() => done(true));"
    )
    assert browser.execute_async_script(read) == "nothing copied yet"
    # the second code cell: the first one shown (the setup cell is folded)
    cell = browser.find_elements(By.CSS_SELECTOR, "article div.cell")[1]
    code = cell.find_element(By.CSS_SELECTOR, ".cell_input pre")
    button = cell.find_element(By.CSS_SELECTOR, ".cell_input button.copybtn")
    ActionChains(browser).move_to_element(code).move_to_element(button).click().perform()
    deadline = time.time() + 10
    while (copied := browser.execute_async_script(read)) == "nothing copied yet":
        assert time.time() < deadline, "a click on the copy button copied nothing"
        time.sleep(0.1)
    expected = _code_cells(_notebook(site, page))[1]
    assert copied.strip() == expected.strip()


def _ink_png(size=(240, 120)) -> bytes:
    """A drawing as a diagram tool saves one: black ink on a transparent background."""
    import io

    from PIL import Image, ImageDraw

    image = Image.new("RGBA", size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.rectangle([8, 8, size[0] - 8, size[1] - 8], outline=(0, 0, 0, 255), width=4)
    draw.line([20, size[1] - 20, size[0] - 20, 20], fill=(0, 0, 0, 255), width=4)
    draw.text((24, 20), "query -> key", fill=(0, 0, 0, 255))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


INK_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="240" height="120">'
    '<rect x="8" y="8" width="224" height="104" fill="none" stroke="black" stroke-width="4"/>'
    '<path d="M20 100 L220 20" stroke="black" stroke-width="4"/>'
    '<text x="24" y="40" font-size="16">query → key</text></svg>'
)


@pytest.fixture(scope="module")
def probe_site(browser, tmp_path_factory) -> Path:
    """A site built by build.py from one notebook holding figures the way the course can
    hold them, all drawn black on transparent: a cell attachment, an image file shown by
    Markdown and by <img>, and a code cell's stored output."""
    import base64

    import nbformat

    root = tmp_path_factory.mktemp("probe-root")
    ink = base64.b64encode(_ink_png()).decode()
    header = nbformat.v4.new_markdown_cell("# 00 · Probe\n\nFigures drawn in black ink.")
    attached = nbformat.v4.new_markdown_cell("![attached](attachment:ink.png)")
    attached["attachments"] = {"ink.png": {"image/png": ink}}
    output = nbformat.v4.new_code_cell("draw()")
    output.outputs = [nbformat.v4.new_output("display_data", data={"image/png": ink})]
    notebook = nbformat.v4.new_notebook(
        cells=[
            header,
            nbformat.v4.new_code_cell("# Setup (the same cell opens every notebook)"),
            attached,
            nbformat.v4.new_markdown_cell("![a file](figures/ink.svg)"),
            nbformat.v4.new_markdown_cell('<img src="figures/ink.svg" alt="an html image">'),
            output,
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
    )
    (root / "notebooks" / "figures").mkdir(parents=True)
    nbformat.write(notebook, root / "notebooks" / "00_probe.ipynb")
    (root / "notebooks" / "figures" / "ink.svg").write_text(INK_SVG, encoding="utf-8")
    (root / "README.md").write_text("# Probe\n", encoding="utf-8")
    (root / "LICENSE").write_text("MIT\n", encoding="utf-8")
    (root / "pyproject.toml").write_text(
        f'[project.urls]\nHomepage = "https://github.com/{SLUG}"\n', encoding="utf-8"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(site_build, "ROOT", root)
        patch.setattr(site_build, "WORK", root / "build")
        site_build.build(root / "site", site_build.Options(solutions=False))
    return root / "site"


def test_figures_drawn_on_transparent_read_in_every_colour_scheme(browser, probe_site):
    base = _server(probe_site)
    messages = _open(browser, urljoin(base, "notebooks/00_probe.html"))
    assert not [m for m in messages if m["level"] == "SEVERE"], messages
    figures = browser.execute_script(FIGURES_JS)
    assert len(figures) == 4, [src for *_, src in figures]  # attachment, file, <img>, output
    outputs = "return document.querySelectorAll('article .cell_output img').length"
    assert browser.execute_script(outputs) == 1
    assert not _figure_problems(browser, schemes=tuple(SCHEMES))
    # and the measure can fail: without the panel, black ink on the dark page is lost
    _show_scheme(browser, "dark")
    for element, *_ in figures:
        browser.execute_script("arguments[0].classList.remove('course-figure')", element)
        assert legibility(_shot(browser, element))[1] < MIN_INK
    _show_scheme(browser, "light")


SCREENSHOT_PAGES = {
    "index.html": "site-landing.png",
    "solutions/02_attention.html": "site-notebook.png",
}


def _screenshot(driver, folder: Path, page: str) -> None:
    """A small PNG of the page (for the README's docs/): the top of the landing page, the
    first figure of a notebook page with the prose and math above it."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    name = SCREENSHOT_PAGES[page]
    driver.execute_script(
        "const figure = document.querySelector('.cell_output img');"
        "if (figure && !location.pathname.endsWith('index.html')) {"
        "  figure.scrollIntoView({block: 'end', behavior: 'instant'});"
        "  window.scrollBy({top: 40, behavior: 'instant'}); }"
    )
    time.sleep(0.3)
    raw = folder / f".{name}.raw.png"
    driver.save_screenshot(str(raw))
    with Image.open(raw) as image:
        small = image.convert("RGB").quantize(colors=256)
        small.save(folder / name, optimize=True)
    raw.unlink()


# ----------------------------------------------------------------------------- diagrams

_diagram_pages = [
    (site, page) for site, page in _pages() if page.startswith(("notebooks/", "solutions/"))
]
# Each diagram as the page shows it: alt text, width on the page, and its pixels drawn through
# the CSS filter and opacity the theme gives it (what a reader sees), as shares of light
# (> 200) and dark (< 100) pixels. Cheaper and steadier than element screenshots.
DIAGRAMS_JS = """
return [...document.querySelectorAll('article img')]
  .filter(img => img.src.startsWith('data:image/png'))
  .map(img => {
    const style = getComputedStyle(img);
    const canvas = document.createElement('canvas');
    canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
    const ctx = canvas.getContext('2d');
    ctx.filter = style.filter;
    ctx.globalAlpha = parseFloat(style.opacity);
    ctx.drawImage(img, 0, 0);
    const data = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let light = 0, dark = 0;
    for (let i = 0; i < data.length; i += 4) {
      const y = (0.299 * data[i] + 0.587 * data[i + 1] + 0.114 * data[i + 2]) * data[i + 3] / 255;
      if (y > 200) light++; else if (y < 100) dark++;
    }
    const n = Math.max(1, data.length / 4);
    const shown = style.visibility !== 'hidden' && style.display !== 'none';
    return [img.alt, shown ? img.getBoundingClientRect().width : 0, light / n, dark / n];
  });
"""


@pytest.mark.parametrize(
    "site, page",
    _diagram_pages or [pytest.param(None, None, marks=pytest.mark.skip(reason=NOT_REQUESTED))],
)
def test_diagrams_show_with_alt_text_in_light_and_dark(browser, site, page):
    """Every diagram the notebook shows (docs/diagrams) is on its page, with its
    alt text, and shows ink on a panel (not a blank box) in Furo's light and dark schemes."""
    import nbformat

    render_spec = importlib.util.spec_from_file_location(
        "diagrams_render", ROOT / "docs" / "diagrams" / "render.py")
    render = importlib.util.module_from_spec(render_spec)
    render_spec.loader.exec_module(render)
    notebook = nbformat.read(site / page.replace(".html", ".ipynb"), as_version=4)
    expected = [alt for _, alt, _, _ in render.references(notebook)]
    _open(browser, urljoin(_server(site), page))
    problems = []
    for theme in ("light", "dark"):
        browser.execute_script("document.body.dataset.theme = arguments[0];", theme)
        shown = browser.execute_script(DIAGRAMS_JS)
        if [alt for alt, *_ in shown] != expected:
            problems.append(f"{theme}: diagrams {[a[:40] for a, *_ in shown]}, "
                            f"expected {[a[:40] for a in expected]}")
            continue
        for alt, width, light, dark in shown:
            # A panel and its ink, whichever way round a theme may turn them.
            panel, ink = max(light, dark), min(light, dark)
            if width < 200 or panel < 0.5 or ink < 0.005:
                problems.append(f"{theme}: {alt[:40]!r} shows {width:.0f} px wide, "
                                f"{light:.0%} light and {dark:.1%} dark pixels")
    assert not problems, f"{page} of {site}:\n" + "\n".join(problems)
