"""Sphinx configuration of the course website (``make site``; sources staged by build.py).

Offline by design: notebooks are never executed (their stored outputs are shown), MathJax is
served from the site (the copy bundled by the ``sphinx-mathjax-offline`` package), and no
page loads a script, font or image from another address.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util.fileutil import copy_asset

project = "Transformers, hands-on"
author = "The Transformers, hands-on authors"
copyright = "2026, " + author  # noqa: A001 (Sphinx's name)
root_doc = "index"

# githubpages: .nojekyll; copybutton: a copy button on every code cell and code block
extensions = ["myst_nb", "sphinx.ext.githubpages", "sphinx_copybutton"]
exclude_patterns = ["_extra", "_static"]
suppress_warnings = ["myst.header"]  # notebook headers jump from # to **bold** sections

# MyST: $...$ and $$...$$ math as in Jupyter; headings get anchors for in-page links.
# html_image: an <img> written in a markdown cell is an image like ![alt](...): Sphinx copies
# its file and it takes the figures' class (below).
myst_enable_extensions = ["dollarmath", "amsmath", "html_image"]
myst_heading_anchors = 3
# Jupyter also typesets $$...$$ written inside a paragraph or list item (05 does): so must we.
myst_dmath_double_inline = True

# MyST-NB: show what is stored, run nothing.
nb_execution_mode = "off"
nb_merge_streams = True
# tqdm's progress bars are widgets; their embedding scripts come from a CDN, so the pages
# show the bars' stored text instead and load no widget script.
nb_ipywidgets_js: dict = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]

# Copy buttons on the code (cells and the code blocks of the prose), not on the outputs; the
# selector has no quotes, as the extension writes it into a JavaScript string. The "$ "
# prompt of a console block is not copied, nor its lines without one (the output).
copybutton_selector = "div[class*=highlight-]:not(.output) > div.highlight > pre"
copybutton_prompt_text = "$ "

html_theme = "furo"
html_title = project
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_js_files = ["search-math.js"]  # search results: formulas as text, not raw TeX
html_favicon = "_static/favicon.svg"
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None

# MathJax 3 from the site itself (copied below), never from a CDN.
mathjax_path = "mathjax/tex-chtml.js"
MATHJAX_PACKAGE = "sphinx-mathjax-offline"


def _mathjax_source() -> Path:
    spec = importlib.util.find_spec(MATHJAX_PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{MATHJAX_PACKAGE} is not installed: run make setup")
    return Path(spec.origin).parent / "static" / "mathjax"


def _add_downloads(app: Sphinx, config: Config) -> None:
    # build.py writes the untouched .ipynb files under <source>/_extra/<folder>/: they are
    # served beside their pages (notebooks/02_attention.ipynb next to .html).
    config.html_extra_path = [*config.html_extra_path, str(Path(app.srcdir) / "_extra")]


# What tex-chtml.js loads, now or on demand: TeX extensions (autoload), its fonts, the
# accessibility and menu components. The bundle's other outputs (SVG, MathML input, the
# node builds) are left out: 8 MB instead of 24 MB, and the browser test sees any 404.
MATHJAX_PARTS = ["tex-chtml.js", "input/tex", "output/chtml", "a11y", "ui", "sre"]


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        source, target = _mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
        for part in MATHJAX_PARTS:
            if (source / part).is_dir():
                copy_asset(source / part, target / part)
            else:
                copy_asset(source / part, target / Path(part).parent)


# The notebook pages (build.py stages them in these folders).
NOTEBOOK_FOLDERS = ("notebooks/", "solutions/")
FIGURE_CLASS = "course-figure"  # course.css puts a panel behind these in the dark theme
SETUP_CELL_CLASS = "tag_course-setup"  # MyST-NB's class for the cell build.py tags so


def _one_search_hit_per_notebook(app: Sphinx, doctree: nodes.document) -> None:
    # A solution page repeats its exercise page's prose, so the search would list every hit
    # twice: it indexes the exercise pages only (Sphinx's file-wide "nosearch" metadata).
    # The setup cell, the same on every page, is left out of the index too.
    docname = app.env.docname
    if docname.startswith("solutions/"):
        app.env.metadata[docname]["nosearch"] = True
    for cell in doctree.findall(nodes.container):
        if SETUP_CELL_CLASS in cell["classes"]:
            cell["classes"].append("no-search")


def _mark_figures(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    # Every image of a notebook page is a figure: the outputs' plots (MyST-NB makes them
    # images when it picks each output's format, after reading) and the images of the
    # markdown cells, a file or a cell attachment. course.css styles the class.
    if docname.startswith(NOTEBOOK_FOLDERS):
        for image in doctree.findall(nodes.image):
            if FIGURE_CLASS not in image["classes"]:
                image["classes"].append(FIGURE_CLASS)


def setup(app: Sphinx) -> dict:
    _mathjax_source()  # fail before building when the package is missing
    app.connect("config-inited", _add_downloads)
    app.connect("doctree-read", _one_search_hit_per_notebook, priority=900)
    app.connect("doctree-resolved", _mark_figures)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True}
