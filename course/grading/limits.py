"""Bounds on what a submitted notebook may hold, applied when it is read, before any analysis.

Every later step (matching answers, choosing cells, instrumenting) is linear in what is left, so
these bounds are what keep one hostile file from holding up a class: a notebook over them gets
one honest row per exercise, "error: too large ...", in the time it takes to parse its JSON.

The course's largest solution has 87 cells, 3,698 characters in its largest cell and 56,000 in
all; the bounds leave an honest student more than ten times that. Outputs (figures, printed
text) are never graded: :func:`normalise` drops them, so they count toward no bound but the file
size (:data:`MAX_FILE_BYTES`).

:func:`normalise` also reads nbformat 3 (IPython 1-3, old Colab exports) by converting it to
nbformat 4 with ``nbformat.convert``; any other major version is refused with its number.
"""

from __future__ import annotations

import json
from typing import Any

MAX_FILE_BYTES = 100 * 1024**2  # one notebook file, outputs and figures included
MAX_CELLS = 1000  # cells of one notebook
MAX_CELL_CHARS = 100_000  # characters of one cell's source
MAX_SOURCE_CHARS = 1_000_000  # characters of all the cells' sources together


class NotebookRefused(ValueError):
    """A file that is no notebook this grader reads, or one over the bounds; ``str`` says why.

    ``parsed`` is its JSON when it parsed (a notebook over the bounds is still recognised by its
    metadata), else None."""

    def __init__(self, message: str, parsed: dict | None = None):
        super().__init__(message)
        self.parsed = parsed


def source_text(cell: Any) -> str:
    """A cell's source as one string (nbformat writes it as a string or a list of lines)."""
    source = cell.get("source", cell.get("input", "")) if isinstance(cell, dict) else ""
    if isinstance(source, list):
        return "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def _cells(notebook: dict) -> list:
    """The cells of a parsed notebook, nbformat 4 (``cells``) or 3 (``worksheets[*].cells``)."""
    if notebook.get("nbformat") == 3:
        sheets = notebook.get("worksheets")
        if not isinstance(sheets, list):
            return []
        return [c for s in sheets if isinstance(s, dict) for c in (s.get("cells") or [])]
    cells = notebook.get("cells")
    return cells if isinstance(cells, list) else []


def too_large(notebook: dict) -> str | None:
    """Why a parsed notebook is over the bounds (``"too large: ..."``), or None."""
    cells = _cells(notebook)
    if len(cells) > MAX_CELLS:
        return f"too large: {len(cells):,} cells (at most {MAX_CELLS:,})"
    total = 0
    for number, cell in enumerate(cells, start=1):
        size = len(source_text(cell))
        if size > MAX_CELL_CHARS:
            return (
                f"too large: cell {number} holds {size:,} characters (at most {MAX_CELL_CHARS:,})"
            )
        total += size
    if total > MAX_SOURCE_CHARS:
        return f"too large: {total:,} characters in its cells (at most {MAX_SOURCE_CHARS:,})"
    return None


def normalise(data: bytes, name: str) -> dict:
    """The notebook in ``data`` as an nbformat-4 dict without outputs, or :class:`NotebookRefused`.

    The bounds are checked on the parsed JSON, before nbformat builds or validates anything.
    """
    try:
        notebook = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as error:
        raise NotebookRefused(
            f"{name} is not a readable notebook ({type(error).__name__})"
        ) from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("nbformat"), int):
        raise NotebookRefused(f"{name} is not a readable notebook (no nbformat version)")
    version = notebook["nbformat"]
    if version not in (3, 4):
        raise NotebookRefused(
            f"{name} is not a readable notebook (nbformat {version}: this grader reads "
            "nbformat 4, and converts 3)",
            notebook,
        )
    reason = too_large(notebook)
    if reason:
        raise NotebookRefused(f"{name} is {reason}", notebook)
    if version == 3:
        import nbformat

        try:
            notebook = json.loads(json.dumps(nbformat.convert(nbformat.from_dict(notebook), 4)))
        except Exception as error:  # noqa: BLE001 - any reason: a v3 file nbformat cannot convert
            raise NotebookRefused(
                f"{name} is not a readable notebook (nbformat 3 that could not be converted: "
                f"{type(error).__name__})"
            ) from None
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        raise NotebookRefused(f"{name} is not a readable notebook (no list of cells)")
    for cell in cells:
        if not isinstance(cell, dict):
            raise NotebookRefused(f"{name} is not a readable notebook (a cell is no object)")
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cell.pop("attachments", None)
    return notebook
