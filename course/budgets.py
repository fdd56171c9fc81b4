"""Time budgets of the solution notebooks: the one place they are written down.

``NOTEBOOK_BUDGET_S[NN]`` is the most time, in seconds, that notebook NN may take under
``make check`` (nbval, every cell) on a 2-core laptop CPU with the real datasets. The
root ``conftest.py`` prints each notebook's measured time against it; a notebook's CPU
``CONFIG`` is sized to fit it, and a GPU only makes the run bigger, never the budget.
docs/DESIGN.md explains them. (A student's working time, 30-90 minutes, is another
thing: each notebook's header states it, and the README's table repeats it.)
"""

from __future__ import annotations

NOTEBOOK_BUDGET_S: dict[str, int] = {
    "00": 60,
    "01": 60,
    "02": 60,
    "03": 120,
    "04": 60,
    "05": 180,
    "06": 270,
    "07": 300,
    "08": 330,
}

# The sum is the budget of all notebooks together under `make check`.
TOTAL_BUDGET_S: int = sum(NOTEBOOK_BUDGET_S.values())
