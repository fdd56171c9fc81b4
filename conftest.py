"""Root pytest configuration: a per-notebook timing table at the end of every run.

nbval reports one test per cell; instructors care about whole notebooks and their budgets
(course/tooling/budgets.py, explained in docs/DESIGN.md), so we add the cell times up per notebook
and print them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

# nbval budget per notebook on a 2-core CPU, in seconds: written down once, in course/tooling/budgets.py.
from course.tooling.budgets import NOTEBOOK_BUDGET_S

# OpenMP passive waiting (OMP_WAIT_POLICY=PASSIVE) was tried against spinning kernels and
# dropped: on an idle 2-core machine it made a training workload 7% slower (and 06's
# fine-tuning far slower), so the longer output wait below is the whole fix.

# nbval waits only 5 s (hard-coded) for a cell's output messages once the cell has finished;
# a busy machine can take longer to deliver them, and the cell then fails spuriously.
OUTPUT_TIMEOUT_S = 120

from course.data import SAMPLE_DATA_MARKER  # noqa: E402

_seconds: dict[str, float] = defaultdict(float)
_failed: set[str] = set()
_on_samples: set[str] = set()  # notebooks that loaded the bundled samples in this run


def _is_notebook_cell(item) -> bool:
    return item.nodeid.split("::")[0].endswith(".ipynb") and hasattr(item, "output_timeout")


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if _is_notebook_cell(item):
            item.output_timeout = OUTPUT_TIMEOUT_S


def pytest_runtest_setup(item) -> None:
    """On the samples, outputs that depend on the data can't match: compare them only on real data."""
    if _is_notebook_cell(item) and item.nodeid.split("::")[0] in _on_samples:
        item.options["check"] = False


def pytest_runtest_teardown(item) -> None:
    if not _is_notebook_cell(item):
        return
    text = "".join(
        output.get("text", "")
        for output in (item.test_outputs or [])
        if output.get("output_type") == "stream"
    )
    if SAMPLE_DATA_MARKER in text:
        _on_samples.add(item.nodeid.split("::")[0])


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
    if len(_seconds) > 1 and not _failed and not _on_samples:
        # Ready to paste after an idle run: RUN_TIMES in course/tooling/budgets.py, then `make exercises`.
        measured = {Path(path).name[:2]: round(s, 1) for path, s in sorted(_seconds.items())}
        write(f'course/tooling/budgets.py RUN_TIMES["seconds"] of this run: {measured}')
    if _on_samples:
        write(
            "ran on the bundled samples (data-dependent outputs not compared): "
            + ", ".join(sorted(_on_samples))
        )
