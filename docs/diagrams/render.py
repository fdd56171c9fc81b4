"""Render every course diagram and embed it in the solution notebooks that show it.

    .venv/bin/python docs/diagrams/render.py      (or: make diagrams, which also runs
                                                    make exercises)

Each module ``docs/diagrams/<topic>.py`` (not this one, not ``style.py``) defines ``DIAGRAMS``,
a dict from an image name (``attention.png``) to a function returning a ``style.Canvas``, and
``NOTEBOOK``, the stem of the solution notebook that shows them (``02_attention``).
A notebook shows a diagram with a Markdown image in a markdown cell,
``![alt text](attachment:attention.png)``: the alt text and the place live in the notebook,
the drawing lives here. This script renders each diagram, writes it to ``build/diagrams/``
to look at, and stores it as that cell's attachment (nbformat's ``attachments``), so the
picture travels inside the notebook: JupyterLab, Colab and GitHub show it from a notebook
opened alone, offline, and ``make exercises`` copies it into ``notebooks/`` with the cell.
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
# ![alt](attachment:name.png): the alt text may not be empty (tests/test_diagrams.py checks it)
# and may hold balanced brackets ([CLS], table[:L]), as CommonMark allows.
REFERENCE = re.compile(r"!\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(attachment:([\w.-]+\.png)\)")


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


def references(notebook: nbformat.NotebookNode) -> list[tuple[int, str, str]]:
    """(cell index, alt text, image name) of every attachment image in the notebook."""
    return [
        (index, match.group(1), match.group(2))
        for index, cell in enumerate(notebook.cells) if cell.cell_type == "markdown"
        for match in REFERENCE.finditer(cell.source)
    ]


def embed(notebook: nbformat.NotebookNode, images: dict[str, bytes], where: str) -> bool:
    """Store each referenced image as its cell's attachment; return whether anything changed."""
    changed = False
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "markdown":
            continue
        wanted = {name for _, name in
                  ((m.group(1), m.group(2)) for m in REFERENCE.finditer(cell.source))}
        attachments = {}
        for name in sorted(wanted):
            if name not in images:
                raise SystemExit(f"{where}, cell {index}: no diagram draws {name} "
                                 f"(docs/diagrams/*.py name their images in DIAGRAMS)")
            attachments[name] = {"image/png": base64.b64encode(images[name]).decode("ascii")}
        if attachments != cell.get("attachments", {}):
            if attachments:
                cell["attachments"] = attachments
            else:
                cell.pop("attachments", None)
            changed = True
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
        used |= {name for _, _, name in references(notebook)}
        if embed(notebook, images, path.name):
            path.write_text(nbformat.writes(notebook) + "\n", encoding="utf-8")
            print(f"embedded diagrams in solutions/{path.name}")
    for name in sorted(set(images) - used):
        print(f"note: {name} is drawn for {draws[name][1]}, which does not show it (yet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
