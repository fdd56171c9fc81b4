"""The package's shape, as issue 30 states it: no import circle in ``course/``; the checks stay
declarations (at most 5,000 lines in ``course/checks/``); every exercise check is a spec or
says why not."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

COURSE = Path(__file__).resolve().parents[1] / "course"
CHECKS_BUDGET = 5_000
# Checks written as a function over several steps, not one spec (each a training step with a
# fresh model, optimiser and loader, observed through hooks): notebook 06's 6.2 and 6.3.
# Notebook 10's 10.2 (a model changed in place, judged by its modules and trainable parameters)
# and 10.3 (two functions, merge and unmerge, applied in turn to one layer).
NOT_SPECS = {("nb06", "train_step"), ("nb06", "evaluate_accuracy"), ("nb10", "add_lora"),
             ("nb10", "merge")}


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


def test_the_checks_stay_within_their_line_budget() -> None:
    lines = sum(
        len(p.read_text(encoding="utf-8").splitlines()) for p in (COURSE / "checks").glob("*.py")
    )
    assert lines <= CHECKS_BUDGET, f"course/checks/ has {lines} lines (budget {CHECKS_BUDGET})"


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
