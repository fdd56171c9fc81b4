"""Grading proves its own setup before it grades anyone.

:func:`require` grades one known-right tiny notebook (exercise 0.1's check on a right softmax)
through exactly what a student's notebook gets: the same sandbox, student uid, environment,
paths, limits and engine. If that notebook does not pass, the fault is the grader's setup, not a
student's: :class:`SetupError` says what failed and how to fix it, and nobody is graded.
``make grade``, ``make progress`` and the Gradescope autograder call it first (once per
process: 8.9 s of CPU for the whole command, the grader's own start included).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

import nbformat

from course.framework.contract import PASSED
from course.grading import sandbox

NAME = "00_setup_check.ipynb"
FIX = (
    "grade as a non-root user (the sandbox then runs as you), or set COURSE_SANDBOX=0 to grade "
    "without the sandbox (unprotected)"
)
# The check's own stub and a right answer: the formula the exercise's hint spells out.
STUB_CELL = (
    "def softmax(x, dim=-1):\n"
    "    # TODO: subtract the max along `dim` (keepdim=True), exponentiate, normalise\n"
    "    raise NotImplementedError"
)
RIGHT_CELL = (
    "def softmax(x, dim=-1):\n"
    "    e = (x - x.amax(dim=dim, keepdim=True)).exp()\n"
    "    return e / e.sum(dim=dim, keepdim=True)"
)


class SetupError(RuntimeError):
    """The grader's setup cannot grade fairly here; ``str`` says what failed and the fix."""


@dataclass(frozen=True)
class Report:
    """What the setup check saw: the boundary used and how long the known-right notebook took."""

    kind: str
    uid: int | None
    seconds: float
    limits: str

    def line(self) -> str:
        who = f"student uid {self.uid}" if self.uid is not None else "the grader's own uid"
        return (
            f"setup check: a known-right notebook passed in {self.seconds:.1f} s "
            f"(isolation: {self.kind}, {who}; limits per run: {self.limits})"
        )


def notebooks() -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    """The probe's template (the stub) and its known-right submission (same cell ids)."""

    def build(answer: str) -> nbformat.NotebookNode:
        cells = [
            nbformat.v4.new_code_cell("import torch\nfrom course.checks import nb00 as check"),
            nbformat.v4.new_code_cell(answer),
            nbformat.v4.new_code_cell("check.softmax(softmax)"),
        ]
        for number, cell in enumerate(cells):
            cell["id"] = f"setup-check-{number}"
        return nbformat.v4.new_notebook(cells=cells)

    return build(STUB_CELL), build(RIGHT_CELL)


@lru_cache(maxsize=4)
def require(timeout_s: float = 60.0, memory_gb: float | None = None) -> Report:
    """Grade the known-right notebook as a student's; :class:`SetupError` unless it passes."""
    from course.grading import engine, kernel

    choice = sandbox.choose()
    problems = sandbox.unreachable(choice)
    if problems:  # known before running anything: say it exactly
        raise SetupError(f"{problems[0]} (isolation: {choice.kind}: {choice.why}); {FIX}")
    template, submission = notebooks()
    start = time.time()
    results = engine.grade_notebook(
        template,
        submission,
        NAME,
        timeout_s=timeout_s,
        memory_gb=memory_gb or kernel.DEFAULT_MEMORY_GB,
        seed=0,
    )
    seconds = time.time() - start
    if [r.status for r in results] != [PASSED]:
        said = "; ".join(f"{r.status}: {r.message.strip()[:300]}" for r in results)
        raise SetupError(
            f"the setup check failed: a known-right answer graded through the sandbox "
            f"({choice.kind}: {choice.why}) did not pass ({said}). Nothing was graded. "
            f"Run `make sandbox` to see how student code is fenced in here; {FIX}"
        )
    return Report(choice.kind, choice.uid, seconds, kernel.limits_text())
