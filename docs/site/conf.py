"""Sphinx configuration of the course website (``make site``; sources staged by build.py).

Offline by design: notebooks are never executed (their stored outputs are shown), MathJax is
served from the site (the copy bundled by the ``sphinx-mathjax-offline`` package), and no
page loads a script, font or image from another address.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util.fileutil import copy_asset

project = "Transformers, hands-on"
author = "The Transformers, hands-on authors"
copyright = "2026, " + author  # noqa: A001 (Sphinx's name)
root_doc = "index"

extensions = ["myst_nb", "sphinx.ext.githubpages"]  # githubpages: .nojekyll
exclude_patterns = ["_extra", "_static"]
suppress_warnings = ["myst.header"]  # notebook headers jump from # to **bold** sections

# MyST: $...$ and $$...$$ math as in Jupyter; headings get anchors for in-page links.
myst_enable_extensions = ["dollarmath", "amsmath"]
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

html_theme = "furo"
html_title = project
html_static_path = ["_static"]
html_css_files = ["course.css"]
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


def setup(app: Sphinx) -> dict:
    _mathjax_source()  # fail before building when the package is missing
    app.connect("config-inited", _add_downloads)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True}
