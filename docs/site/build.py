"""Build the course website from the stored notebooks: ``make site`` runs this script.

    python docs/site/build.py --out site [--no-solutions] [--upto NN] [--hub URL] [--repo O/N]

Nothing is executed and nothing is fetched: the pages show the outputs stored in the
notebooks, and every asset (MathJax included) is served with the site. The script writes a
staging tree in a folder of its own under ``build/`` and runs Sphinx with MyST-NB on it (``conf.py`` beside
this file):

* ``index.md``: the README, whose notebook table links to the pages (without the solution
  column when ``--no-solutions``), with the Colab badge image served locally;
* ``notebooks/NN_name.ipynb`` (and ``solutions/NN_name.ipynb`` unless ``--no-solutions``):
  copies of the notebooks whose header badge is replaced by a link bar: Open in Colab, the
  .ipynb to download (the untouched notebook, served beside its page) and, with ``--hub``,
  an nbgitpuller link that clones the repository into that JupyterHub. In these copies the
  setup cell is folded, a section written below an exercise heading is raised out of it (the
  page outline), and the images of markdown cells are files Sphinx finds (attachments
  written out, image files copied);
* the guide's pages (``GUIDE_PAGES``: the pages under ``docs/``, ``CONTRIBUTING.md``) at
  their own paths, so the links between them and from the README work on GitHub and here
  alike, listed in the navigation under *Guide*;
* ``license.md``: the LICENSE file.

The repository the badges point at is the one the notebooks already name, read from
``pyproject.toml`` with ``course.tooling.nbtools.REPO_URL`` (``make badges REPO=owner/name`` changes
all of them); ``--repo`` rewrites it for this build only, as ``make release REPO=`` does.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlencode, urlsplit

import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # the course package, when run as a script

from course.tooling import nbtools  # noqa: E402

# Each build works in its own folder under build/ (two builds at once do not collide):
# source/ (the staged tree), doctrees/, html/ (moved to --out at the end). MyST-NB puts the
# outputs it extracts in a jupyter_execute/ folder beside html/: inside that folder too.
WORK = ROOT / "build"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
LOCAL_BADGE = "_static/colab-badge.svg"
# The header badge of a notebook: [![Open In Colab](<image>)](<colab url>)
HEADER_BADGE = re.compile(
    r"\[!\[Open In Colab\]\([^)]*\)\]\(https://colab\.research\.google\.com/[^)]*\)"
)
# A Markdown link to a notebook by a relative path: [text](../notebooks/04_x.ipynb#anchor)
NOTEBOOK_LINK = re.compile(r"\[([^\]]+)\]\((?!\w+:)([^)\s]+?)\.ipynb(#[^)\s]*)?\)")
BUILD_INFO = "_site.json"  # what was built, for the browser test and for readers
# An image in Markdown, ![alt](path "title"), or in HTML, <img src="path">
IMAGE_SOURCE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)|<img\b[^>]*?\bsrc=[\"']([^\"']+)")
FOLD_TAG = "hide-input"  # MyST-NB: the cell's code behind a toggle, its output shown
SETUP_TAG = "course-setup"  # conf.py keeps the cell so tagged out of the search index
# Markdown headings (outside code fences), and those of a numbered task: an exercise or a
# written question ("## Exercise 2.1 · ...", "### Question 8.5").
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
FENCE = re.compile(r"^\s*(```|~~~)")
TASK_HEADING = re.compile(r"(Exercise|Question)\s+\d+\.\d+\b")
# The guide: Markdown pages of the repository that the site shows as they are, in this order in
# its navigation (paths relative to the root; each page keeps its path, so relative links hold).
# tests/test_site.py fails when a page under docs/ is missing here.
GUIDE_PAGES = (
    "docs/commands.md",
    "docs/offline-and-gpu.md",
    "docs/results.md",
    "docs/instructors.md",
    "docs/grading.md",
    "CONTRIBUTING.md",
    "docs/DESIGN.md",
)


@dataclass(frozen=True)
class Options:
    """What one build contains and where its links point."""

    solutions: bool = True
    upto: int | None = None
    hub: str | None = None
    repo: str | None = None


def repository_slug(repo: str | None = None) -> str:
    """owner/name of the repository the badges point at (``repo`` wins when given)."""
    if repo:
        nbtools.rewrite_repository("", repo)  # validates it, with nbtools' own message
        return repo
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = nbtools.REPO_URL.search(text)
    if not match:
        raise SystemExit("pyproject.toml names no github.com repository: run make badges REPO=o/n")
    return match.group(2)


def colab_url(slug: str, path: str) -> str:
    """The Colab address that opens ``path`` (e.g. notebooks/02_attention.ipynb) of ``slug``."""
    return f"https://colab.research.google.com/github/{slug}/blob/main/{path}"


def nbgitpuller_url(hub: str, slug: str, path: str) -> str:
    """A link that clones ``slug`` into the user's home on ``hub`` and opens ``path`` in Lab."""
    folder = slug.split("/", 1)[1]  # nbgitpuller clones into a folder named like the repository
    query = urlencode(
        {
            "repo": f"https://github.com/{slug}",
            "urlpath": f"lab/tree/{folder}/{path}",
            "branch": "main",
        },
        quote_via=quote,
    )
    return f"{hub.rstrip('/')}/hub/user-redirect/git-pull?{query}"


def link_bar(path: str, options: Options, slug: str, depth: int = 1) -> str:
    """The HTML line that opens a notebook page: Colab, download and (with a hub) JupyterHub."""
    up = "../" * depth
    name = Path(path).name
    links = [
        f'<a class="nb-colab" href="{html.escape(colab_url(slug, path))}">'
        f'<img src="{up}{LOCAL_BADGE}" alt="Open In Colab"></a>',
        f'<a class="nb-download" href="{name}" download>Download {name}</a>',
    ]
    if options.hub:
        url = nbgitpuller_url(options.hub, slug, path)
        links.append(
            f'<a class="nb-hub" href="{html.escape(url)}">Open on JupyterHub '
            f"({html.escape(urlsplit(options.hub).netloc or options.hub)})</a>"
        )
    return '<p class="nb-links">' + " ".join(links) + "</p>"


def selected(folder: str, options: Options) -> list[Path]:
    """The notebooks of ``folder`` that this build shows (up to ``options.upto``)."""
    paths = sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))
    return [p for p in paths if options.upto is None or int(p.name[:2]) <= options.upto]


def page_notebook(path: Path, folder: str, options: Options, slug: str, shown: set[str]) -> str:
    """The staged copy of one notebook: the header badge becomes the link bar, and links to
    notebooks this build leaves out become plain text."""
    notebook = nbformat.read(path, as_version=4)
    # the widgets' saved state only serves scripts this site does not load (see conf.py)
    notebook.metadata.pop("widgets", None)
    bar = link_bar(f"{folder}/{path.name}", options, slug)
    header = notebook.cells[0]
    if folder == "solutions" and header.cell_type == "markdown" and header.source.startswith("# "):
        title, _, rest = header.source.partition("\n")  # tell the two pages of a notebook apart
        header.source = f"{title} (solution)\n{rest}"
    if header.cell_type == "markdown" and HEADER_BADGE.search(header.source):
        header.source = HEADER_BADGE.sub(lambda _: bar, header.source, count=1)
    else:  # a notebook without the course header still gets its links, first
        notebook.cells.insert(0, nbformat.v4.new_markdown_cell(bar))
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace(BADGE_IMAGE, f"../{LOCAL_BADGE}")
            cell.source = unlink_missing(cell.source, folder, shown)
    fold_setup_cell(notebook)
    end_task_sections(notebook)
    return nbformat.writes(notebook)


def fold_setup_cell(notebook: nbformat.NotebookNode) -> None:
    """Fold the setup cell (the first code cell of every notebook): the same 20 lines open
    every notebook, so the page shows them behind a "Show code cell source" toggle (MyST-NB's
    ``hide-input`` tag) and its one-line output below; the search does not index it."""
    for cell in notebook.cells:
        if cell.cell_type == "code":
            tags = cell.metadata.setdefault("tags", [])
            tags += [tag for tag in (FOLD_TAG, SETUP_TAG) if tag not in tags]
            return


def end_task_sections(notebook: nbformat.NotebookNode) -> None:
    """Raise the headings that a notebook writes below (deeper than) an exercise or question
    heading to that heading's level, so that the page outline follows the notebook's own
    sections: an exercise is a leaf, and the concept section after it ("### BPE on the movie
    reviews" after "## Exercise 1.4") is not nested under it. Headings below a concept
    section keep their level; only the staged copy changes."""
    task, shift = None, 0  # the open task heading's level; how far its followers move up
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        lines, fenced = cell.source.split("\n"), False
        for i, line in enumerate(lines):
            if FENCE.match(line):
                fenced = not fenced
            heading = None if fenced else HEADING.match(line)
            if not heading:
                continue
            level = len(heading[1])
            if task is not None and level <= task:
                task = None  # a heading at the task's level or above ends its section
            if task is not None:
                shift = shift or level - task
                lines[i] = "#" * max(task, level - shift) + line[level:]
            elif TASK_HEADING.match(heading[2]):
                task, shift = level, 0
        cell.source = "\n".join(lines)


def image_files(notebook: nbformat.NotebookNode) -> list[str]:
    """The local files that the notebook's markdown cells show as images, as written: a
    Markdown image ``![alt](figures/x.svg)`` or an HTML ``<img src="...">`` (not a web
    address, nor a cell attachment, which travels inside the notebook)."""
    found = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for match in IMAGE_SOURCE.finditer(cell.source):
                target = unquote(match[1] or match[2]).split("#")[0]
                if target and not re.match(r"^[a-zA-Z][\w+.-]*:|^/", target):
                    found.append(target)
    return found


def stage_image_files(path: Path, target: Path) -> None:
    """Copy the image files the notebook at ``path`` shows into ``target`` (its staged
    folder) at the same relative paths, so Sphinx finds them; a missing file is left to
    Sphinx, which stops the build with its own message."""
    notebook = nbformat.read(path, as_version=4)
    for name in image_files(notebook):
        source, staged = path.parent / name, Path(posixpath.normpath(target / name))
        if source.is_file() and staged.is_relative_to(target.parent):
            staged.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, staged)


def stage_attachments(text: str, target: Path, stem: str) -> str:
    """The staged notebook ``text`` whose markdown cells' attachments (an image pasted or
    dropped into a cell, shown as ``![alt](attachment:name.png)``) are written as files under
    ``target/_attachments/<stem>/`` and shown from there: MyST-NB reads no attachments."""
    notebook = nbformat.reads(text, as_version=4)
    for number, cell in enumerate(notebook.cells):
        attachments = cell.pop("attachments", None) if cell.cell_type == "markdown" else None
        for name, bundle in (attachments or {}).items():
            if not bundle:
                continue
            mime, data = next(iter(bundle.items()))
            if isinstance(data, list):  # a text format stored as lines
                data = "".join(data)
            svg_text = mime == "image/svg+xml" and data.lstrip().startswith("<")
            content = data.encode("utf-8") if svg_text else base64.b64decode(data)
            safe = re.sub(r"[^\w.-]", "_", name)
            relative = f"_attachments/{stem}/{number}-{safe}"
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            (target / relative).write_bytes(content)
            cell.source = re.sub(
                rf"attachment:{re.escape(name)}(?=[)\s\"'>])|attachment:{re.escape(quote(name))}",
                relative,
                cell.source,
            )
    return nbformat.writes(notebook)


def landing_page(readme: str, options: Options, shown: set[str]) -> str:
    """The README as the site's first page: table links go to pages, badges load locally."""
    lines, column = [], None  # column: index of the table's solution column while in the table
    for line in readme.splitlines():
        if line.startswith("| # | notebook |"):
            cells = line.split("|")
            column = cells.index(" solution ") if " solution " in cells else None
        elif not line.startswith("|"):
            column = None
        row = re.match(r"\| (\d\d) \|", line)
        if row and options.upto is not None and int(row[1]) > options.upto:
            continue
        if column is not None and not options.solutions:
            cells = line.split("|")
            del cells[column]
            line = "|".join(cells)
        lines.append(line)
    text = ("\n".join(lines) + "\n").replace(BADGE_IMAGE, LOCAL_BADGE)

    return unlink_missing(text, "", shown)


def unlink_missing(text: str, folder: str, shown: set[str]) -> str:
    """``text`` whose links to notebooks without a page here (left out) become plain text.

    ``folder`` is where ``text`` lives ("" for the landing page); ``shown`` holds the pages
    of this build as "notebooks/02_attention". MyST turns the other links into page links.
    """

    def link(match: re.Match) -> str:
        target = posixpath.normpath(posixpath.join(folder, match[2]))
        return match[0] if target in shown else match[1]

    return NOTEBOOK_LINK.sub(link, text)


def toctree(caption: str, entries: list[str]) -> str:
    """A hidden MyST toctree: the sidebar's section ``caption``."""
    body = "\n".join(entries)
    return f"\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{body}\n```\n"


def stage(options: Options, staging: Path) -> dict:
    """Write the Sphinx source tree into ``staging`` (new); return what it holds."""
    slug = repository_slug(options.repo)
    (staging / "_extra").mkdir(parents=True)
    (staging / "_static").mkdir()  # the badge, for Markdown images (Sphinx copies them)
    shutil.copy(HERE / LOCAL_BADGE, staging / LOCAL_BADGE)

    def rewrite(text: str) -> str:
        return nbtools.rewrite_repository(text, slug) if options.repo else text

    folders = ["notebooks"] + (["solutions"] if options.solutions else [])
    notebooks = {folder: selected(folder, options) for folder in folders}
    if not notebooks["notebooks"]:
        raise SystemExit(f"no notebook 00..{options.upto} in notebooks/: nothing to publish")
    pages = {folder: [f"{folder}/{p.stem}" for p in paths] for folder, paths in notebooks.items()}
    shown = {page for entries in pages.values() for page in entries}
    for folder, paths in notebooks.items():
        (staging / folder).mkdir()
        (staging / "_extra" / folder).mkdir()
        for path in paths:
            staged = rewrite(page_notebook(path, folder, options, slug, shown))
            staged = stage_attachments(staged, staging / folder, path.stem)
            (staging / folder / path.name).write_text(staged, encoding="utf-8")
            stage_image_files(path, staging / folder)
            download = rewrite(path.read_text(encoding="utf-8"))
            (staging / "_extra" / folder / path.name).write_text(download, encoding="utf-8")
    readme = rewrite((ROOT / "README.md").read_text(encoding="utf-8"))
    index = landing_page(readme, options, shown)
    index += toctree("Exercises", pages["notebooks"])
    if options.solutions:
        index += toctree("Solutions", pages["solutions"])
    guide = []
    for name in GUIDE_PAGES:
        if not (ROOT / name).is_file():  # a tree that holds no guide (a probe, a bare copy)
            continue
        text = rewrite((ROOT / name).read_text(encoding="utf-8"))
        folder = posixpath.dirname(name)
        badge = "../" * name.count("/") + LOCAL_BADGE  # served with the site
        staged = unlink_missing(text.replace(BADGE_IMAGE, badge), folder, shown)
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_text(staged, encoding="utf-8")
        guide.append(name.removesuffix(".md"))
    if guide:
        index += toctree("Guide", guide)
    index += toctree("About", ["license"])
    (staging / "index.md").write_text(index, encoding="utf-8")
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    (staging / "license.md").write_text(
        f"# License\n\n```text\n{license_text}```\n", encoding="utf-8"
    )
    return {
        "repository": slug,
        "solutions": options.solutions,
        "upto": options.upto,
        "hub": options.hub,
        "pages": sorted(shown),
        "guide": guide,
    }


def build(out: Path, options: Options, quiet: bool = True) -> dict:
    """Stage the sources and run Sphinx into ``out``; return the build description."""
    started = time.perf_counter()
    if out.exists() and any(out.iterdir()) and not (out / BUILD_INFO).exists():
        raise SystemExit(f"{out} holds files that are not a site built here: choose another --out")
    WORK.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="site-", dir=WORK))
    try:
        info = stage(options, work / "source")
        command = [
            sys.executable, "-m", "sphinx", "-b", "html", "-c", str(HERE),
            "-d", str(work / "doctrees"), "-W", "--keep-going", "-j", "auto",
            *(["-q"] if quiet else []), str(work / "source"), str(work / "html"),
        ]  # fmt: skip
        result = subprocess.run(command, cwd=ROOT)
        if result.returncode:
            raise SystemExit(
                f"sphinx-build failed (exit {result.returncode}); see its messages above"
            )
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(work / "html", out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info["seconds"] = round(time.perf_counter() - started, 1)
    (out / BUILD_INFO).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "site", help="output folder (replaced)")
    parser.add_argument(
        "--no-solutions", action="store_true", help="a student site: exercises only"
    )
    parser.add_argument("--upto", type=int, default=None, help="last notebook number to include")
    parser.add_argument("--hub", default=None, help="JupyterHub address for nbgitpuller links")
    parser.add_argument("--repo", default=None, help="owner/name the badges point at")
    parser.add_argument("--verbose", action="store_true", help="show Sphinx's progress")
    args = parser.parse_args(argv)
    options = Options(not args.no_solutions, args.upto, args.hub or None, args.repo or None)
    info = build(args.out.resolve(), options, quiet=not args.verbose)
    what = "with solutions" if options.solutions else "exercises only"
    print(
        f"site: {len(info['pages'])} notebook pages ({what}) in {args.out}/ in "
        f"{info['seconds']} s; open {args.out}/index.html"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
