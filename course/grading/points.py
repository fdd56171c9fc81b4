"""Points: the one place where a graded exercise becomes points.

:func:`decide` turns a hand-in's trusted results (and the instructor's POINTS and MANUAL files,
and the written questions) into :class:`Line` s; the student's feedback, the instructor's
``grades.csv`` and Gradescope's ``results.json`` are all written from those lines, so they cannot
disagree (as nbgrader derives every report from one gradebook).

The rule: an exercise is worth ``points[id]`` (1 by default); it earns all of it when *passed*,
nothing otherwise; a point given by hand (MANUAL) replaces what the grader decided. A written
question earns only what MANUAL gives it, and is "to be graded" until then. An exercise whose
result carries flags for the instructor (an answer that used the checks, the grader's files
changed while it ran) keeps what the rule gives it, and every report says it is flagged:
``grades.csv`` in its ``flags`` column, the feedback and ``results.json`` beside the exercise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course.framework.contract import PASSED

WRITTEN = "written"  # the status of a written question's line


@dataclass(frozen=True)
class Line:
    """One exercise or written question of one hand-in, with its points decided."""

    item: str  # exercise or question id, "0.1"
    notebook: str  # template file name
    status: str  # an exercise's status (course.framework.contract), or WRITTEN
    earned: float | None  # None: a written answer not graded yet
    possible: float
    message: str = ""
    by_hand: bool = False  # the points come from MANUAL
    flags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    @property
    def passed(self) -> bool:
        return self.status == PASSED


def decide(
    results: Iterable[Any],
    points: Mapping[str, float] | None = None,
    manual: Mapping[str, float] | None = None,
    asked: Iterable[Any] = (),
) -> list[Line]:
    """Every exercise of ``results`` (:class:`~course.grading.verdict.ExerciseResult`), then
    every written question of ``asked`` (``.id``, ``.notebook``), with its points."""
    points, manual = points or {}, manual or {}
    lines = []
    for r in results:
        possible = points.get(r.exercise, 1.0)
        earned = possible if r.status == PASSED else 0.0
        lines.append(
            Line(
                r.exercise,
                r.notebook,
                r.status,
                manual.get(r.exercise, earned),
                possible,
                r.message,
                r.exercise in manual,
                tuple(r.flags),
            )
        )
    for q in asked:
        lines.append(
            Line(
                q.id,
                q.notebook,
                WRITTEN,
                manual.get(q.id),
                points.get(q.id, 1.0),
                "",
                q.id in manual,
            )
        )
    return lines


def total(lines: Iterable[Line]) -> tuple[float, float]:
    """``(earned, possible)`` over ``lines`` (a written answer not graded yet earns 0 so far)."""
    lines = list(lines)
    return sum(x.earned or 0.0 for x in lines), sum(x.possible for x in lines)


def flags_text(lines: Iterable[Line]) -> str:
    """grades.csv's ``flags`` cell: ``"0.1: reason; 0.2: reason"``, empty when nothing is flagged."""
    return "; ".join(f"{x.item}: {', '.join(x.flags)}" for x in lines if x.flags)


def gradescope_tests(lines: Iterable[Line]) -> list[dict]:
    """``results.json``'s tests, one per exercise line (written questions are graded elsewhere)."""
    tests = []
    for x in lines:
        if x.status == WRITTEN:
            continue
        output = f"{x.status}: {x.message}".strip()
        if x.flags:
            output = f"⚠️ flagged for the instructor: {'; '.join(x.flags)}\n{output}"
        tests.append(
            {
                "name": f"Exercise {x.item} ({Path(x.notebook).stem})",
                "score": x.earned or 0.0,
                "max_score": x.possible,
                "status": "passed" if x.passed else "failed",
                "output": output,
                "visibility": "visible",
            }
        )
    return tests
