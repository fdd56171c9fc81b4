"""Every solution notebook follows the course conventions (CONTRIBUTING.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from course.tooling.nbtools import BEGIN_SOLUTION, solution_paths

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


# What Colab provides without requirements-colab.txt: its preinstalled torch, numpy, matplotlib,
# scikit-learn (with scipy) and tqdm, and tokenizers, which comes with the pinned transformers.
COLAB_PROVIDED = {"torch", "numpy", "matplotlib", "scikit-learn", "scipy", "tqdm", "tokenizers"}


def _pins(name: str) -> set[str]:
    """The distributions pinned (``name==version``) in a requirements or environment file."""
    found = re.findall(r"^[\s-]*([A-Za-z0-9_.-]+)==", (ROOT / name).read_text(), re.MULTILINE)
    return {pin.lower() for pin in found}


def _imported_distributions(path: Path) -> set[str]:
    """The installed distributions that solution ``path`` and its checks module import."""
    import ast
    import importlib.metadata
    import sys

    sources = [c.source for c in _read(path).cells if c.cell_type == "code"]
    sources.append((ROOT / "course" / "checks" / f"nb{path.name[:2]}.py").read_text())
    modules = set()
    for source in sources:
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    owners = importlib.metadata.packages_distributions()
    return {
        dist.lower()
        for module in modules - set(sys.stdlib_module_names) - {"course"}
        for dist in owners.get(module, [module])
    }


def _check_samples_list() -> set[str]:
    """The notebooks ``make check-samples`` runs (the Makefile's list of solutions/NN_*)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ncheck-samples:", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"solutions/(\d\d)_\*\.ipynb", recipe))


def _missing_from(path: Path) -> list[str]:
    """The files of CONTRIBUTING's checklist "Every place a new notebook touches" that lack
    solution ``path``'s notebook."""
    from course.tooling import budgets

    nn, missing = path.name[:2], []
    for needed in (f"course/checks/nb{nn}.py", f"tests/test_checks_nb{nn}.py"):
        if not (ROOT / needed).exists():
            missing.append(needed)
    tables = {
        "NOTEBOOK_BUDGET_S": budgets.NOTEBOOK_BUDGET_S,
        "STUDENT_MINUTES": budgets.STUDENT_MINUTES,
        'RUN_TIMES["seconds"]': budgets.RUN_TIMES["seconds"],
        'GRADING_COSTS["cpu_s"]': budgets.GRADING_COSTS["cpu_s"],
        'GRADING_COSTS["peak_mib"]': budgets.GRADING_COSTS["peak_mib"],
        'GRADING_COSTS["limited"]["runs"]': budgets.GRADING_COSTS["limited"]["runs"],
    }
    missing += [f"course/tooling/budgets.py {name}" for name, table in tables.items() if nn not in table]
    if f"](notebooks/{path.name})" not in (ROOT / "README.md").read_text():
        missing.append("README.md (a row of the notebook table)")
    if not re.search(rf"^\| {nn} \|", (ROOT / "docs" / "DESIGN.md").read_text(), re.MULTILINE):
        missing.append("docs/DESIGN.md (a row of 'The notebooks')")
    drawn = [
        source
        for source in (ROOT / "docs" / "diagrams").glob("*.py")
        if f'NOTEBOOK = "{path.stem}"' in source.read_text()
    ]
    if nn != "00" and not drawn:
        missing.append(f'docs/diagrams/<topic>.py with NOTEBOOK = "{path.stem}"')
    for dist in sorted(_imported_distributions(path)):
        files = ["requirements.txt", "environment.yml"]
        files += [] if dist in COLAB_PROVIDED else ["requirements-colab.txt"]
        missing += [f"{name} (a pin of {dist})" for name in files if dist not in _pins(name)]
    if int(nn) >= 6:  # the applied notebooks: each reads a dataset and has a samples run
        assert "data.load_" in "".join(c.source for c in _read(path).cells), path.name
        if nn not in _check_samples_list():
            missing.append("Makefile (the check-samples list)")
        ci = (ROOT / ".ci" / "run").read_text()
        first, last = re.search(r"second pass of (\d\d)-(\d\d)", ci).groups()
        if not int(first) <= int(nn) <= int(last):
            missing.append(".ci/run (the check-samples comment)")
    return missing


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_every_notebook_is_in_every_file_a_notebook_needs(path):
    missing = _missing_from(path)
    assert not missing, f"{path.name} is missing from: " + "; ".join(missing)


def test_a_notebook_left_out_of_a_file_is_named(monkeypatch):
    from course.tooling import budgets

    path = SOLUTIONS[-1]
    shorter = {nn: m for nn, m in budgets.STUDENT_MINUTES.items() if nn != path.name[:2]}
    monkeypatch.setattr(budgets, "STUDENT_MINUTES", shorter)
    monkeypatch.setattr(
        "importlib.metadata.packages_distributions", lambda: {"torch": ["not-pinned-anywhere"]}
    )
    missing = _missing_from(path)
    assert "course/tooling/budgets.py STUDENT_MINUTES" in missing
    assert "requirements.txt (a pin of not-pinned-anywhere)" in missing


def test_no_third_party_dataset_file_is_tracked():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    pattern = re.compile(
        r"(data_full\.json|en_ewt-ud-.*\.conllu|sst2?/(train|dev)\.tsv|\.safetensors)$"
    )
    offenders = [
        line for line in tracked.splitlines() if pattern.search(line) and "samples/" not in line
    ]
    assert offenders == []
