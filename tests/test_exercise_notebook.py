"""The generated welcome exercise, run unchanged, reports "not implemented yet" at its check."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def test_unchanged_exercise_notebook_reports_not_implemented():
    nb = nbformat.read(ROOT / "notebooks" / "00_welcome.ipynb", as_version=4)
    NotebookClient(
        nb,
        timeout=120,
        allow_errors=True,
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    ).execute()
    check_cells = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("check.")]
    assert len(check_cells) == 1
    outputs = check_cells[0].outputs
    errors = [o for o in outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "CheckFailed"
    assert errors[0].traceback == [
        "⏳ Exercise 0.1 (numerically stable softmax): not implemented yet. Replace the "
        "`raise NotImplementedError` in the exercise cell with your code, run that cell, "
        "then run this check again."
    ]
    # Nothing before the first exercise fails: the stub cell itself runs.
    first_error = next(
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)
    )
    assert nb.cells[first_error] is check_cells[0]
