"""Names shared by the checks, the notebook generator and the grader, written once.

* the statuses an exercise can end with;
* the placeholder a written answer starts as, and the pattern of an exercise stub;
* the metadata a notebook is recognised by, whatever its file is renamed to;
* the modules an answer cell must not import (checks and references hold reference code).

``tests/test_contract.py`` ties every user of these names to this module.
"""

from __future__ import annotations

import re

# Statuses a check reports itself...
PASSED, FAILED, NOT_IMPLEMENTED = "passed", "failed", "not implemented"
# ...and statuses only the grader gives (the check could not report).
ERROR, TIMEOUT, MISSING = "error", "timeout", "missing"
CHECK_STATUSES = (PASSED, FAILED, NOT_IMPLEMENTED)
ALL_STATUSES = (*CHECK_STATUSES, ERROR, TIMEOUT, MISSING)

# The written-answer placeholder (a markdown cell) and the exercise stub (a code cell).
ANSWER_PLACEHOLDER = "**Your answer:** *write it here.*"
STUB_TODO = "# TODO:"
STUB = re.compile(rf"^\s*{STUB_TODO}.*\n\s*raise NotImplementedError\s*$", re.MULTILINE)


def course_metadata(notebook: dict, stem: str) -> dict:
    """``notebook`` with the course metadata the grader reads (``{"notebook": stem}``) set."""
    notebook.setdefault("metadata", {})["course"] = {"notebook": stem}
    return notebook


# An answer cell that imports one of these is flagged and scores 0 for its exercise: the checks,
# their references, the checking framework that observes the answer while grading (an answer that
# imports ``course.framework.sealed`` can only mean to bend what the probe records), the grader.
FORBIDDEN_IN_ANSWERS = ("course.checks", "course.framework", "course.grading")
