"""The course website (``make site``, built by docs/site/build.py).

Two kinds of test:

* fast ones, in ``make test`` and ``make check``: how the pages are staged (links, badges, the
  student switch, the hub link) and that CI, the Makefile and the Pages workflow build it;
* a real browser test of built sites, run by ``make check-site`` (which builds them and names
  them in ``COURSE_SITE_DIRS``): every page is opened in headless Chromium from Debian and
  must load without console errors, with its math typeset (no raw ``$$``), every image
  loaded, every internal link resolving and its Colab link pointing at its own notebook.
  Without ``COURSE_SITE_DIRS`` these tests are skipped and say how to run them.
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
from urllib.parse import parse_qs, unquote, urljoin, urlsplit
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
    assert "](notebooks/02_attention.ipynb)" in page and "](solutions/02_attention.ipynb)" in page
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
    """Every diagram the notebook shows (docs/diagrams, issue 41) is on its page, with its
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
