"""Grading one notebook: merge, choose cells, instrument, run, decide.

:func:`grade_notebook` is the whole pipeline for one submitted notebook; :func:`grade_file` reads
the files first (a missing or unreadable submission gives one honest row per exercise).
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat

from course.framework.contract import ERROR, MISSING, NOT_IMPLEMENTED, STUB
from course.framework.forbidden import judge_sources
from course.grading import instrument as instrumenting
from course.grading import kernel, verdict
from course.grading.merging import (
    ORIGIN,
    _normal,
    check_calls,
    check_module,
    exercises,
    is_answer_cell,
    merge,
    read_notebook,
)
from course.grading.selection import (
    Dependencies,
    every_name,
    syntax_error,
    used_imports_only,
)
from course.grading.verdict import ExerciseResult

DEFAULT_TIMEOUT_S = 60  # per exercise: its answer cell, the cells it added, its check cell
TEMPLATE_CELL_S = 300  # a cell of the template itself (loading a model, building data)
# A hand-in's whole notebook is stopped at DEADLINE_FACTOR times its notebook's measured
# grading cost (course.tooling.budgets.GRADING_COSTS, CPU seconds of the whole command, the setup check
# included) plus DEADLINE_MARGIN_S, whatever it adds (cells, processes): at most 294 s (notebook
# 06); with the setup check's own bound (notebook 00's, 209 s) before it, within Gradescope's
# 10 minutes. An honest notebook needs its cost once (about twice at Gradescope's half CPU).
DEADLINE_FACTOR = 10
DEADLINE_MARGIN_S = (
    120  # with the setup check's bound, the dearest notebook stays within 10 minutes
)


def deadline_s(number: int) -> float:
    """The most a hand-in's notebook ``number`` may run, in seconds (see DEADLINE_FACTOR)."""
    from course.tooling.budgets import GRADING_COSTS

    costs = GRADING_COSTS["cpu_s"]
    cost = costs.get(f"{number:02d}", max(costs.values()))
    return DEADLINE_FACTOR * cost + DEADLINE_MARGIN_S


def unreadable(
    template: nbformat.NotebookNode, name: str, status: str, message: str
) -> list[ExerciseResult]:
    """The same status and message for every exercise of a notebook that could not be graded."""
    return [ExerciseResult(name, ex, check, status, message) for ex, check in exercises(template)]


def _number(name: str, template: nbformat.NotebookNode) -> int:
    """The notebook's number (``03``), from the checks module it imports, else its file name."""
    try:
        return int(check_module(template).rsplit("nb", 1)[1])
    except (ValueError, IndexError):
        return int(name[:2]) if name[:2].isdigit() else 99


def grade_notebook(
    template: nbformat.NotebookNode,
    submission: nbformat.NotebookNode,
    name: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_gb: float = kernel.DEFAULT_MEMORY_GB,
    threads: int = 1,
    seed: int = 0,
    budget_s: float | None = None,
) -> list[ExerciseResult]:
    """Grade one submitted notebook against its template; one trusted result per check call.

    ``timeout_s`` limits each cell the student wrote or added and each check cell (the kernel is
    interrupted, the next cell runs); ``budget_s`` limits the whole notebook (default: the sum of
    the cells' limits, capped by nothing else).
    """
    trusted = verdict.trusted_checks()  # before any student process starts
    guard = verdict.tree_guard()
    module = trusted.get(check_module(template))
    if module is None:
        why = verdict.broken_checks().get(check_module(template), "no such module")
        return unreadable(
            template, name, ERROR, f"the grader could not load {check_module(template)} ({why})"
        )
    calls = check_calls(template)
    merged = merge(template, submission)
    graded = merged.notebook
    graph = Dependencies(graded)
    check_cell = {}  # template check-cell index -> graded index
    for index, t in merged.template_index.items():
        check_cell[t] = index
    for call in calls:
        call.cell = check_cell[call.cell]
    answers = [i for i in merged.answers]
    seeds = (
        {graph.code[0]}
        | set(answers)
        | {i for i in graph.code if is_answer_cell(graded.cells[i])}
        | {call.cell for call in calls}
    )
    needed = sorted(graph.closure(seeds))
    # The instructor's imports cells import only what the cells that run use (no matplotlib,
    # no transformers for a notebook whose checks need neither).
    mentioned = [every_name(graded.cells[i].source) for i in needed]
    used = set().union(*(m for m in mentioned if m is not None))
    for i in needed if None not in mentioned else []:  # a cell that does not parse: keep all
        if graded.cells[i].metadata.get(ORIGIN) == "template":
            lighter = used_imports_only(graded.cells[i].source, used)
            if lighter is not None:
                graded.cells[i].source = lighter
    student = set(merged.answers) | set(merged.added)
    # Per exercise: the student's cells its check depends on (forbidden imports, timeouts).
    student_cells: dict[str, list[int]] = {}
    flagged: dict[str, list[str]] = {}
    broken: dict[str, str] = {}  # check -> "SyntaxError at line N: ..."
    code_answers = [i for i in merged.answers if graded.cells[i].cell_type == "code"]
    untouched = _untouched(template, merged, calls)
    for call in calls:
        mine = sorted(graph.closure({call.cell}) & student)
        answer = max((i for i in code_answers if i < call.cell), default=None)
        if answer is not None:  # the answer cell right before the check counts even when
            mine = sorted(set(mine) | {answer})  # nothing uses it
        student_cells[call.check] = mine
        own_module = check_module(template)
        reasons = sorted(
            {r for i in mine for r in verdict.forbidden(graded.cells[i].source, own_module)}
        )
        if reasons:
            flagged[call.check] = reasons
        unparsed = [(i, syntax_error(graded.cells[i].source)) for i in mine]
        unparsed = [(i, why) for i, why in unparsed if why]
        if unparsed:  # the answer as written cannot run: say where, not "not started"
            index, why = unparsed[-1]
            where = "your answer cell" if index == answer else "an earlier cell your answer uses"
            broken[call.check] = f"{why} ({where} does not parse, so it never ran)"
    if calls and not flagged and {call.check for call in calls} <= untouched:
        # Every exercise as handed out: each row is "not started" whatever a run would do
        # (below), so the notebook is not run at all (a half-done hand-in's blank notebooks).
        results = [ExerciseResult(name, c.exercise, c.check, NOT_IMPLEMENTED) for c in calls]
        return _not_started(results, untouched, flagged)
    timeouts = {
        i: timeout_s
        if i in student or i in {c.cell for c in calls}
        else max(timeout_s, TEMPLATE_CELL_S)
        for i in needed
    }
    if budget_s is None:  # the cells' own limits, never past the notebook's bound
        budget_s = min(
            kernel.STARTUP_S + sum(timeouts.values()), deadline_s(_number(name, template))
        )
    runnable = instrumenting.instrument(graded, needed, seed, timeouts)
    scratch = kernel.scratch_folder()
    try:
        kernel.private_course(scratch, guard.files, _number(name, template))
        run = kernel.run(runnable, scratch, name, budget_s, timeout_s, memory_gb, threads)
        changed = guard.restore()
        results = verdict.verdicts(name, calls, run, seed, module, student_cells, flagged)
        for result in results:  # a built-in the text forbids, read from the cells (checks' hook)
            cells = [graded.cells[i].source for i in student_cells.get(result.check, [])]
            judge_sources(result, getattr(module, result.check, None), cells)
    finally:
        kernel.remove_scratch(scratch)
    _not_started(results, untouched, flagged)
    for result in results:
        why = broken.get(result.check)
        if why and result.check not in flagged and result.check not in untouched:
            result.status = ERROR
            result.message = f"❌ Exercise {result.exercise}: {why}"
    if changed:
        restored = kernel.restoring()
        note = (
            f"the grader's course files changed while this notebook ran ({', '.join(changed[:5])}"
            f"{', ...' if len(changed) > 5 else ''}); "
            + ("they were restored" if restored else "left as they are: not the grader's own copy")
        )
        for result in results:
            result.flags.append(note)
            result.message += f"\n⚠️ Flagged for the instructor: {note}."
    for result in results:
        result.seconds = round(run.seconds, 1)
    return results


def _not_started(
    results: list[ExerciseResult], untouched: set[str], flagged: dict[str, list[str]]
) -> list[ExerciseResult]:
    """Each exercise left as handed out (and not flagged) is "not started": decided from the
    hand-in alone, whatever happened in the run (a dead kernel, a classmate's load, the
    grader's fault)."""
    for result in results:
        if result.check in untouched and result.check not in flagged:
            result.status = NOT_IMPLEMENTED
            result.message = (
                f"⏳ Exercise {result.exercise}: not started (its answer cell is as handed out: "
                "replace the `raise NotImplementedError` with your code)"
            )
    return results


def _untouched(template: nbformat.NotebookNode, merged, calls) -> set[str]:  # noqa: ANN001
    """The checks whose exercise the student left as handed out: every answer cell between the
    previous check cell and its own is the template's stub, unchanged, and the student added no
    code cell there."""
    graded = merged.notebook
    found = set()
    cells = sorted({call.cell for call in calls})
    for previous, cell in zip([-1, *cells], cells, strict=False):
        span = range(previous + 1, cell)
        mine = [i for i in merged.answers if i in span and graded.cells[i].cell_type == "code"]
        if not mine or any(i in span for i in merged.added):
            continue
        if all(
            i in merged.template_index
            and STUB.search(graded.cells[i].source)
            and _normal(graded.cells[i].source)
            == _normal(template.cells[merged.template_index[i]].source)
            for i in mine
        ):
            found |= {call.check for call in calls if call.cell == cell}
    return found


def grade_file(
    template_path: Path,
    submission_path: Path | None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_gb: float = kernel.DEFAULT_MEMORY_GB,
    threads: int = 1,
    seed: int = 0,
    budget_s: float | None = None,
) -> list[ExerciseResult]:
    """Grade ``submission_path`` (which may be absent or not a notebook) against a template."""
    template = nbformat.read(template_path, as_version=4)
    name = Path(template_path).name
    if submission_path is None or not Path(submission_path).exists():
        return unreadable(template, name, MISSING, f"{name} was not submitted")
    try:
        submission = read_notebook(Path(submission_path))
    except ValueError as error:
        return unreadable(template, name, ERROR, str(error))
    start = time.time()
    results = grade_notebook(
        template, submission, name, timeout_s, memory_gb, threads, seed, budget_s
    )
    for result in results:
        result.seconds = round(time.time() - start, 1)
    return results
