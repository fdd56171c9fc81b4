"""Root pytest configuration: a per-notebook timing table at the end of every run.

nbval reports one test per cell; instructors care about whole notebooks and their budgets
(course/tooling/budgets.py, explained in docs/DESIGN.md), so we add the cell times up per notebook
and print them.

Notebooks may also run several at a time (pytest-xdist, ``make check-notebooks NB_JOBS=3``),
each whole notebook in one worker (``--dist loadfile``), the longest budgets first. Their times
then share the machine and are not compared with the budgets, which are idle, one-at-a-time times.
"""

from __future__ import annotations

import os
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


def _notebook(nodeid: str) -> str:
    return nodeid.split("::")[0]


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if _is_notebook_cell(item):
            item.output_timeout = OUTPUT_TIMEOUT_S
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers:
        order = _start_order(sorted({_notebook(item.nodeid) for item in items}), workers)
        items.sort(key=lambda item: order.index(_notebook(item.nodeid)))


def _start_order(notebooks: list[str], workers: int) -> list[str]:
    """The order that several workers take ``notebooks`` in: the ``workers`` longest budgets
    first, then as many of the shortest, then the rest, longest first.

    xdist hands each worker its first two notebooks at once (and keeps this order with
    --no-loadscope-reorder), so the second of each must be short: a long one queued behind
    another long one would run last, alone, while the other workers idle."""
    longest = sorted(notebooks, key=lambda path: -NOTEBOOK_BUDGET_S.get(Path(path).name[:2], 0))
    first = longest[:workers]
    second = longest[workers:][::-1][:workers]
    return first + second + [path for path in longest if path not in first + second]


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
        _on_samples.add(_notebook(item.nodeid))
        # Carried on the teardown's report, which reaches the controller of an xdist run.
        item.user_properties.append(("on_samples", True))


def pytest_runtest_logreport(report) -> None:
    path = _notebook(report.nodeid)
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration
        if report.failed:
            _failed.add(path)
        if dict(report.user_properties).get("on_samples"):
            _on_samples.add(path)


def pytest_terminal_summary(terminalreporter, config) -> None:
    if not _seconds:
        return
    write = terminalreporter.write_line
    # xdist has turned "auto" into a number of workers by now.
    workers = getattr(config.option, "numprocesses", None)
    shared = isinstance(workers, int) and workers > 1
    terminalreporter.section(
        "notebook times (nbval, this machine"
        + (f", {workers} at a time: not comparable with the budgets)" if shared else ")")
    )
    total = 0.0
    for path in sorted(_seconds):
        seconds = _seconds[path]
        total += seconds
        budget = NOTEBOOK_BUDGET_S.get(Path(path).name[:2])
        verdict = (
            ""
            if budget is None or shared
            else ("within" if seconds <= budget else "OVER") + f" {budget} s budget"
        )
        status = "FAILED" if path in _failed else "ok"
        write(f"{path:<45} {seconds:7.1f} s  {status:<6} {verdict}")
    write(f"{'all notebooks':<45} {total:7.1f} s")
    if len(_seconds) > 1 and not _failed and not _on_samples and not shared:
        # Ready to paste after an idle run: RUN_TIMES in course/tooling/budgets.py, then `make exercises`.
        measured = {Path(path).name[:2]: round(s, 1) for path, s in sorted(_seconds.items())}
        write(f'course/tooling/budgets.py RUN_TIMES["seconds"] of this run: {measured}')
    if _on_samples:
        write(
            "ran on the bundled samples (data-dependent outputs not compared): "
            + ", ".join(sorted(_on_samples))
        )
