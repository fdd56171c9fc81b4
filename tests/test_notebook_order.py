"""The order in which several pytest-xdist workers take the solution notebooks (root conftest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from course.tooling.budgets import NOTEBOOK_BUDGET_S

# The root conftest.py, loaded by its path ("conftest" names tests/conftest.py here).
_SPEC = importlib.util.spec_from_file_location(
    "root_conftest", Path(__file__).resolve().parents[1] / "conftest.py"
)
conftest = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(conftest)

NOTEBOOKS = [f"solutions/{nn}_notebook.ipynb" for nn in sorted(NOTEBOOK_BUDGET_S)]


def _budget(path: str) -> int:
    return NOTEBOOK_BUDGET_S[Path(path).name[:2]]


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_the_longest_start_first_and_none_waits_behind_another_long_one(workers):
    order = conftest._start_order(NOTEBOOKS, workers)
    assert sorted(order) == NOTEBOOKS  # each notebook once
    first, second, rest = order[:workers], order[workers : 2 * workers], order[2 * workers :]
    # xdist hands each worker its first two at once: the first the longest budgets, the second
    # short ones, so that no long notebook is queued behind another.
    assert min(map(_budget, first)) >= max(map(_budget, second + rest))
    assert max(map(_budget, second)) <= min(map(_budget, rest))
    assert [_budget(p) for p in rest] == sorted(map(_budget, rest), reverse=True)
