"""Render every course diagram and embed it in the solution notebooks that show it.

    .venv/bin/python docs/diagrams/render.py      (or: make diagrams, which also runs
                                                    make exercises)

Each module ``docs/diagrams/<topic>.py`` (not this one, not ``style.py``) defines ``DIAGRAMS``,
a dict from an image name (``attention.png``) to a function returning a ``style.Canvas``, and
``NOTEBOOK``, the stem of the solution notebook that shows them (``02_attention``).

A notebook shows a diagram in a markdown cell, as a Markdown image under a comment naming it:

    <!-- diagram: attention.png -->
    ![alt text: what the figure shows](data:image/png;base64,...)

The alt text and the place live in the notebook, the drawing lives here. This script renders
each diagram, writes it to ``build/diagrams/`` to look at, and writes it into the image's
``data:`` URI (write the two lines with ``()`` for a new one). The picture so travels inside
the Markdown itself, which every reader shows from a notebook opened alone, offline:
JupyterLab, Colab (which ignores nbformat's cell attachments), GitHub and the website (MyST
accepts ``data:image/png`` URIs); and ``make exercises`` copies it with the cell.
"""

from __future__ import annotations

import base64
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "build" / "diagrams"
NOT_DIAGRAMS = {"render.py", "style.py"}
# The comment naming the diagram, then its image: the alt text may hold balanced brackets
# ([CLS], table[:L]), as CommonMark allows; the URI is empty or a data: URI.
REFERENCE = re.compile(
    r"<!-- diagram: (?P<name>[\w.-]+\.png) -->\n"
    r"!\[(?P<alt>(?:[^\[\]]|\[[^\[\]]*\])*)\]\((?P<uri>[^)\s]*)\)"
)
DATA_URI = "data:image/png;base64,"


def sources() -> dict[str, tuple[Callable, str]]:
    """Every diagram's draw function and notebook stem, keyed by its image name."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # the modules import style as a sibling
    found: dict[str, tuple[Callable, str]] = {}
    for path in sorted(HERE.glob("*.py")):
        if path.name in NOT_DIAGRAMS:
            continue
        spec = importlib.util.spec_from_file_location(f"diagram_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, draw in module.DIAGRAMS.items():
            if name in found:
                raise SystemExit(f"{path.name}: the image name {name} is drawn twice")
            found[name] = (draw, module.NOTEBOOK)
    return found


def references(notebook: nbformat.NotebookNode) -> list[tuple[int, str, str, str]]:
    """(cell index, alt text, image name, URI) of every diagram the notebook shows."""
    return [
        (index, match["alt"], match["name"], match["uri"])
        for index, cell in enumerate(notebook.cells) if cell.cell_type == "markdown"
        for match in REFERENCE.finditer(cell.source)
    ]


def embed(notebook: nbformat.NotebookNode, images: dict[str, bytes], where: str) -> bool:
    """Write each diagram into its image's data: URI; return whether anything changed."""
    changed = False
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "markdown":
            continue

        def fill(match: re.Match, index: int = index) -> str:
            name = match["name"]
            if name not in images:
                raise SystemExit(f"{where}, cell {index}: no diagram draws {name} "
                                 "(docs/diagrams/*.py name their images in DIAGRAMS)")
            uri = DATA_URI + base64.b64encode(images[name]).decode("ascii")
            return f"<!-- diagram: {name} -->\n![{match['alt']}]({uri})"

        source = REFERENCE.sub(fill, cell.source)
        if source != cell.source:
            cell.source, changed = source, True
    return changed


def main() -> int:
    from style import png  # after sources() put this folder on the path

    draws = sources()
    OUT.mkdir(parents=True, exist_ok=True)
    images = {name: png(draw()) for name, (draw, _) in draws.items()}
    for name, data in images.items():
        (OUT / name).write_bytes(data)
    print(f"rendered {len(images)} diagrams into {OUT.relative_to(ROOT)}/, "
          f"{sum(map(len, images.values())):,} bytes of PNG")
    used: set[str] = set()
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        used |= {name for _, _, name, _ in references(notebook)}
        if embed(notebook, images, path.name):
            path.write_text(nbformat.writes(notebook) + "\n", encoding="utf-8")
            print(f"embedded diagrams in solutions/{path.name}")
    for name in sorted(set(images) - used):
        print(f"note: {name} is drawn for {draws[name][1]}, which does not show it (yet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
