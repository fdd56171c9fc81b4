"""The course's diagrams (docs/diagrams): every one drawn, embedded where its notebook
shows it (a data: URI in the Markdown, which Colab shows too), with alt text, in the solution
and in the exercise notebook alike."""

from __future__ import annotations

import base64
import importlib.util
import io
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
MIN_ALT_WORDS = 12  # a description of the figure, not a title


def _render_module():
    spec = importlib.util.spec_from_file_location("diagrams_render", ROOT / "docs/diagrams/render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _render_module()
SOURCES = render.sources()
sys.path.insert(0, str(ROOT / "docs" / "diagrams"))
import style  # noqa: E402 (docs/diagrams is not a package)

SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)


def _shown(path: Path) -> list[tuple[str, str, str, bytes]]:
    """(cell id, alt text, image name, PNG bytes) of every diagram a notebook shows."""
    notebook = nbformat.read(path, as_version=4)
    shown = []
    for index, alt, name, uri in render.references(notebook):
        cell = notebook.cells[index]
        assert uri.startswith(render.DATA_URI), (
            f"{path.name}, cell {cell.id}: {name} is not embedded (run make diagrams)")
        shown.append((cell.id, alt, name, base64.b64decode(uri.removeprefix(render.DATA_URI))))
    return shown


def test_every_diagram_has_a_source_and_a_notebook():
    assert len(SOURCES) >= 10
    stems = {p.stem for p in SOLUTIONS}
    for name, (_, notebook) in SOURCES.items():
        if notebook in stems:  # a diagram drawn ahead of its notebook waits for it
            shown = [n for _, _, n, _ in _shown(ROOT / "solutions" / f"{notebook}.ipynb")]
            assert name in shown, f"{name} is drawn for {notebook}, which does not show it"


@pytest.mark.parametrize("path", SOLUTIONS[1:], ids=lambda p: p.stem)
def test_notebooks_01_on_show_a_diagram_with_alt_text(path):
    shown = _shown(path)
    assert shown, f"{path.name} shows no diagram of its own"
    for cell_id, alt, name, data in shown:
        assert name in SOURCES, f"{path.name}: no docs/diagrams module draws {name}"
        assert len(alt.split()) >= MIN_ALT_WORDS, f"{path.name}, cell {cell_id}: alt text of {name}"
        # Markup in alt text is dropped or rendered by Markdown (<bos> vanishes, *x* turns italic).
        assert not set(alt) & set("<>*`"), f"{path.name}, cell {cell_id}: markup in the alt text"
        pixels = _pixels(data)
        assert min(pixels.shape[:2]) > 200 and pixels.std() > 10, f"{name} is blank or tiny"
        # An opaque light panel: readable on a dark page as on a light one.
        image = Image.open(io.BytesIO(data))
        assert "transparency" not in image.info and image.mode in ("P", "RGB", "L")
        corners = pixels[[0, 0, -1, -1], [0, -1, 0, -1]]
        assert (corners > 240).all(), f"{name}: its background is not light"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_the_exercise_notebook_carries_the_same_diagrams(path):
    assert _shown(ROOT / "notebooks" / path.name) == _shown(path)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_embedded_diagram_is_what_its_source_draws(name):
    """Rendering again gives the picture the notebook holds: else run make diagrams. A few
    pixels may differ (a font's anti-aliasing on another machine); a changed drawing moves
    far more (two characters of a label changed: 963 pixels of 537,240 by more than 40 levels)."""
    draw, notebook = SOURCES[name]
    fresh = _pixels(style.png(draw()))
    path = ROOT / "solutions" / f"{notebook}.ipynb"
    if not path.exists():
        pytest.skip(f"{notebook} is not in solutions/ yet")
    stored = next((data for _, _, n, data in _shown(path) if n == name), None)
    assert stored is not None, f"{notebook} does not show {name}"
    stored_pixels = _pixels(stored)
    assert stored_pixels.shape == fresh.shape, f"{name}: run make diagrams (its size changed)"
    changed = (np.abs(stored_pixels - fresh).max(axis=-1) > 40).mean()
    assert changed < 1e-4, f"{name}: {changed:.3%} of its pixels differ, run make diagrams"


def test_references_allow_brackets_in_alt_text():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "<!-- diagram: x.png -->\n![tokens [CLS] and table[:L] described]()\n\n"
        "<!-- diagram: y.png -->\n![](data:image/png;base64,AAAA)")])
    assert render.references(notebook) == [
        (0, "tokens [CLS] and table[:L] described", "x.png", ""),
        (0, "", "y.png", "data:image/png;base64,AAAA")]


def test_embedding_fills_the_uri_and_keeps_the_rest(tmp_path):
    cell = nbformat.v4.new_markdown_cell("Text.\n\n<!-- diagram: x.png -->\n![a [CLS] b]()\n")
    notebook = nbformat.v4.new_notebook(cells=[cell])
    assert render.embed(notebook, {"x.png": b"\x89PNG"}, "test")
    assert cell.source == ("Text.\n\n<!-- diagram: x.png -->\n"
                           "![a [CLS] b](data:image/png;base64,iVBORw==)\n")
    assert not render.embed(notebook, {"x.png": b"\x89PNG"}, "test")  # nothing left to do
    with pytest.raises(SystemExit, match="no diagram draws x.png"):
        render.embed(notebook, {}, "test")
