"""The grading engine behind ``make progress``, ``make grade`` and the Gradescope autograder.

The verdict is reached where student code never runs. One job per module:

* :mod:`~course.grading.merging`     the submission's answer cells and added cells, merged into
  the template (matched by cell id, else by the names a cell defines, else by its first line);
* :mod:`~course.grading.selection`   which cells run: the setup cell, the answers, the checks,
  and what they depend on (the cells the student added included);
* :mod:`~course.grading.instrument`  each check call becomes a probe that writes its record
  (plain data) to a file; it runs in the student's kernel and is not trusted;
* :mod:`~course.grading.pinned`      the run's own read-only copy of the course, which the
  grader imports (an instructor's checkout is never written to while it grades);
* :mod:`~course.grading.kernel`      the student's process: a private copy of the course, limits,
  a time limit per cell, a hard deadline, every process killed at the end, the grader's own
  (pinned) course tree hashed and restored;
* :mod:`~course.grading.stripped`    the check modules of that copy, without any reference,
  known mistake or judgement (the probe needs none);
* :mod:`~course.grading.sandbox`     the operating-system boundary around it (bubblewrap, an
  unprivileged uid when the grader is root), or the one line saying there is none;
* :mod:`~course.grading.output`      OUT written once, atomically, never through a link, with a
  manifest of digests (``python -m course.classroom verify OUT``);
* :mod:`~course.grading.verdict`     the trusted side: checks imported before any student process,
  each record replayed by the trusted check, honest rows for what is missing, forbidden imports
  scored 0, ``results.json``;
* :mod:`~course.grading.engine`      the pipeline: :func:`grade_notebook`, :func:`grade_file`;
* :mod:`~course.grading.report`      the class report (``make report``): ``records.json``, which
  grading writes beside the grades, read back into ``report.html`` and ``report.csv``.

Statuses per exercise (:mod:`course.framework.contract`): passed, failed, not implemented (the checks'
own), error (the check could not run: the answer cell broke, the kernel died, the file is not a
notebook), timeout, and missing (no such notebook in the submission).

What this protects, and what it does not, is in the README ("What grading protects").
"""

from __future__ import annotations

import importlib
from typing import Any

from course.framework.contract import (
    ALL_STATUSES,
    ANSWER_PLACEHOLDER,
    ERROR,
    FAILED,
    MISSING,
    NOT_IMPLEMENTED,
    PASSED,
    STUB,
    TIMEOUT,
)

# Imported on first use (PEP 562): the student's kernel imports course.grading.instrument, which
# must not pull in the engine (nbformat, jupyter) before the notebook's own first cell.
_LAZY = {
    "DEFAULT_TIMEOUT_S": "engine",
    "grade_file": "engine",
    "grade_notebook": "engine",
    "unreadable": "engine",
    "instrument_notebook": ("instrument", "instrument"),
    "probe_source": "instrument",
    "DEFAULT_MEMORY_GB": "kernel",
    "OFFLINE_ENV": "kernel",
    "TreeGuard": "kernel",
    "nn_before": "kernel",
    "CHECK_CALL": "merging",
    "NOTEBOOK_NAME": "merging",
    "CheckCall": "merging",
    "Merged": "merging",
    "cell_code": "merging",
    "check_calls": "merging",
    "check_module": "merging",
    "check_names": "merging",
    "exercise_id": "merging",
    "exercises": "merging",
    "is_answer_cell": "merging",
    "merge": "merging",
    "read_notebook": "merging",
    "Dependencies": "selection",
    "cell_names": "selection",
    "needed_cells": "selection",
    "ExerciseResult": "verdict",
    "as_dicts": "verdict",
    "forbidden": "verdict",
    "gradescope_report": "verdict",
    "trusted_checks": "verdict",
    "snapshot": "verdict",
    "write_results_json": "verdict",
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'course.grading' has no attribute {name!r}")
    module, attribute = where if isinstance(where, tuple) else (where, name)
    value = getattr(importlib.import_module(f"course.grading.{module}"), attribute)
    globals()[name] = value
    return value


__all__ = [
    "ALL_STATUSES",
    "ANSWER_PLACEHOLDER",
    "CHECK_CALL",
    "DEFAULT_MEMORY_GB",
    "DEFAULT_TIMEOUT_S",
    "ERROR",
    "FAILED",
    "MISSING",
    "NOTEBOOK_NAME",
    "NOT_IMPLEMENTED",
    "OFFLINE_ENV",
    "PASSED",
    "STUB",
    "TIMEOUT",
    "CheckCall",
    "Dependencies",
    "ExerciseResult",
    "Merged",
    "TreeGuard",
    "as_dicts",
    "cell_code",
    "cell_names",
    "check_calls",
    "check_module",
    "check_names",
    "exercise_id",
    "exercises",
    "forbidden",
    "grade_file",
    "grade_notebook",
    "gradescope_report",
    "instrument_notebook",
    "is_answer_cell",
    "merge",
    "needed_cells",
    "nn_before",
    "probe_source",
    "read_notebook",
    "snapshot",
    "trusted_checks",
    "unreadable",
    "write_results_json",
]
