"""Root pytest configuration: a per-notebook timing table at the end of every run.

nbval reports one test per cell; instructors care about whole notebooks and their budgets
(../shared/DESIGN.md), so we add the cell times up per notebook and print them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

# nbval budget per notebook on a 2-core CPU, in seconds (DESIGN.md, "nbval budget").
NOTEBOOK_BUDGET_S = {
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

_seconds: dict[str, float] = defaultdict(float)
_failed: set[str] = set()


def pytest_runtest_logreport(report) -> None:
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration
        if report.failed:
            _failed.add(path)


def pytest_terminal_summary(terminalreporter) -> None:
    if not _seconds:
        return
    write = terminalreporter.write_line
    terminalreporter.section("notebook times (nbval, this machine)")
    total = 0.0
    for path in sorted(_seconds):
        seconds = _seconds[path]
        total += seconds
        budget = NOTEBOOK_BUDGET_S.get(Path(path).name[:2])
        verdict = (
            ""
            if budget is None
            else ("within" if seconds <= budget else "OVER") + f" {budget} s budget"
        )
        status = "FAILED" if path in _failed else "ok"
        write(f"{path:<45} {seconds:7.1f} s  {status:<6} {verdict}")
    write(f"{'all notebooks':<45} {total:7.1f} s")
