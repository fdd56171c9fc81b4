"""The package's shape: no import circle in ``course/``; every exercise check is a spec or says
why not; no check types the words of a violated property (``CheckFailure`` composes them from
the property it is given); checking code is counted by one rule (:func:`checking_lines`). No line cap: what is
measured is what a newcomer reads to add one exercise (CONTRIBUTING), not the total."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

COURSE = Path(__file__).resolve().parents[1] / "course"
# All checking code is counted together: every module of course/ but these, each with why it
# is not checking code. A new module counts unless it is added here with a reason.
NOT_CHECKING = {
    "grading": "the grading engine: runs hand-ins and merges verdicts; it judges nothing itself",
    "nn": "the modules the notebooks build, generated from the solutions",
    "data": "the course's data sets",
    "models": "the pretrained BERT the notebooks fine-tune",
    "env": "device, precision and seeding of a notebook",
    "viz": "plots",
    "bench": "the course's loop against transformers' Trainer",
    "budgets": "the notebooks' time budgets",
    "nbtools": "generates the exercise notebooks from the solutions",
    "refresh": "executes the solution notebooks",
    "release": "a student copy of the course",
    "classroom": "progress, grades and feedback for a class",
    "handins": "reads hand-ins",
    "contract": "names shared by the checks, the generator and the grader",
    "measure": "times and memory of a notebook's cells",
}
# Checks written as a function, not one spec, each with why: none (a model changed in place, or
# two functions applied in turn, is a case of several calls: Spec.calls, Spec.watch, Spec.together).
NOT_SPECS: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(COURSE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every course module and the course modules it imports, at any depth of its code."""
    modules: dict[str, set[str]] = {}
    for path in COURSE.rglob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course"):
                found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("course")}
        modules[_module_name(path)] = found
    return {m: {d for d in found if d in modules and d != m} for m, found in modules.items()}


def test_no_import_circle_in_course() -> None:
    graph = _imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dependency in sorted(graph[module]):
            assert state.get(dependency) != 1, " -> ".join([*path, module, dependency])
            if dependency not in state:
                visit(dependency, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_every_exercise_check_is_a_declared_spec() -> None:
    """A check cell's function carries its spec (``check(Spec(...))``), or is listed above."""
    missing = []
    for path in sorted((COURSE / "checks").glob("nb*.py")):
        module = importlib.import_module(f"course.checks.{path.stem}")
        for name, value in vars(module).items():
            if (
                callable(value)
                and hasattr(value, "exercise")
                and (path.stem, name) not in NOT_SPECS
            ):
                if not hasattr(value, "spec"):
                    missing.append(f"{path.stem}.{name}")
    assert not missing, missing


def test_no_check_types_the_words_of_a_violated_property() -> None:
    """The checks and the shared properties pass a failure its property (``expect(..., prop=...)``, ``CheckFailure(...,
    prop=...)``, a ``Property``'s name); the words "the property violated:" are written by
    course.failure alone, so no check's text can drift from the property it records."""
    typed = []
    for path in sorted([*(COURSE / "checks").glob("*.py"), *(COURSE / "properties").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if "violated:" in node.value.lower() or node.value.lower().endswith("violated"):
                    typed.append(f"{path.name}:{node.lineno}: {node.value[:60]!r}")
    assert not typed, typed


def checking_lines() -> dict[str, int]:
    """Lines of every checking module: each ``.py`` file of ``course/`` whose
    top-level module is not in :data:`NOT_CHECKING`."""
    return {
        str(path.relative_to(COURSE.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(COURSE.rglob("*.py"))
        if path.relative_to(COURSE).parts[0].removesuffix(".py") not in NOT_CHECKING
    }


def test_checking_code_is_counted_by_one_rule() -> None:
    """Every excluded name is a module of course/ with a reason; the count covers the rest."""
    top = {p.name.removesuffix(".py") for p in COURSE.iterdir() if p.suffix == ".py" or p.is_dir()}
    assert set(NOT_CHECKING) <= top, sorted(set(NOT_CHECKING) - top)
    assert all(reason.strip() for reason in NOT_CHECKING.values())
    counted = checking_lines()
    assert "course/spec.py" in counted and "course/checks/nb00.py" in counted
    assert not any(name.startswith(("course/grading/", "course/nn.py")) for name in counted)
