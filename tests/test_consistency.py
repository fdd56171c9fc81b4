"""Every solution notebook follows the course conventions (CONTRIBUTING.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from course.nbtools import BEGIN_SOLUTION, solution_paths

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = solution_paths()
SETUP_MARKER = "# Setup (the same cell opens every notebook)"


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _setup_cell(nb: nbformat.NotebookNode) -> str:
    cells = [
        c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith(SETUP_MARKER)
    ]
    assert len(cells) == 1, "exactly one setup cell expected"
    return cells[0]


def test_there_are_solutions():
    assert SOLUTIONS and SOLUTIONS[0].name == "00_welcome.ipynb"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_setup_cell_is_identical_to_the_welcome_notebook(path):
    assert _setup_cell(_read(path)) == _setup_cell(_read(SOLUTIONS[0]))


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_header_has_title_and_colab_badge_for_this_file(path):
    header = _read(path).cells[0]
    assert header.cell_type == "markdown"
    assert header.source.startswith(f"# {path.name[:2]} · ")
    assert f"/blob/main/solutions/{path.name})" in header.source
    for heading in ("What you will learn", "Prerequisites", "Time"):
        assert heading in header.source, f"header lacks '{heading}'"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_each_exercise_is_followed_by_its_check(path):
    cells = [c for c in _read(path).cells if c.cell_type == "code"]
    module = f"from course.checks import nb{path.name[:2]} as check"
    assert any(module in c.source for c in cells), f"missing `{module}`"
    for index, cell in enumerate(cells):
        if BEGIN_SOLUTION in cell.source:
            following = cells[index + 1].source if index + 1 < len(cells) else ""
            assert following.lstrip().startswith("check."), (
                f"code cell {index} holds an exercise but the next code cell is not a check: "
                f"{following[:60]!r}"
            )


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_is_executed_with_small_outputs(path):
    nb = _read(path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "run the notebook before committing"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)
    assert path.stat().st_size < 1_500_000, "stored outputs are too large"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


def test_readme_lists_every_notebook():
    readme = (ROOT / "README.md").read_text()
    for path in SOLUTIONS:
        assert f"notebooks/{path.name}" in readme and f"solutions/{path.name}" in readme


def test_no_third_party_dataset_file_is_tracked():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    pattern = re.compile(
        r"(data_full\.json|en_ewt-ud-.*\.conllu|sst2?/(train|dev)\.tsv|\.safetensors)$"
    )
    offenders = [
        line for line in tracked.splitlines() if pattern.search(line) and "samples/" not in line
    ]
    assert offenders == []
