"""The trusted verdict: replaying each check on its recorded data, and the rows of results.

Runs only in the grader's process, after every process of the student's run has ended:

* :func:`trusted_checks` imports every ``course.checks.nbNN`` module *before* any student
  process starts (and snapshots the grader's course tree, :class:`~course.grading.kernel.TreeGuard`);
* :func:`verdicts` reads each probe record (bytes, size-capped) and calls
  :func:`course.framework.check.replay` with the *trusted* check and the argument layout of the
  *template's* check call. A missing or unreadable record gives an honest row (error, timeout,
  not run) with its reason: nothing the student's process writes can produce a pass;
* :func:`forbidden` flags answer cells that import the course's check or reference code
  (:data:`course.framework.contract.FORBIDDEN_IN_ANSWERS`) or use the notebook's ``check`` module: such an
  exercise scores 0, decided by static analysis here;
* :func:`write_results_json` writes Gradescope's ``results.json`` from trusted results only.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import sys
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType

from course.framework.contract import (
    ERROR,
    FAILED,
    FORBIDDEN_IN_ANSWERS,
    NOT_IMPLEMENTED,
    PASSED,
    TIMEOUT,
)
from course.grading.instrument import record_path
from course.grading.kernel import Run, TreeGuard
from course.grading.merging import CheckCall, cell_code


@dataclass
class ExerciseResult:
    """The grade of one exercise: ``exercise`` is its id (``"0.1"``)."""

    notebook: str
    exercise: str
    check: str
    status: str
    message: str = ""
    seconds: float = 0.0  # wall-clock time of the whole notebook this exercise belongs to
    flags: list[str] = field(default_factory=list)  # for the instructor: forbidden import, ...
    # Of a failed exercise, as the trusted replay decided them (never the student's process):
    # the known mistake the answer matched, by its spec's name, and the property violated.
    mistake: str | None = None
    prop: str | None = None
    # Claims the student's process reported that the replay saw and did not grade (side effects,
    # flags, identities: course.framework.observe.claim), each in the check's words: in the message for
    # the student, and as data here for the instructor's report, who may dock them by hand.
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == PASSED


# --- trusted modules -------------------------------------------------------------------------

_lock = threading.Lock()
_trusted: dict[str, ModuleType] = {}
_replay_lock = threading.Lock()
_broken: dict[str, str] = {}  # a checks module that failed to import -> why
_guard: list[TreeGuard] = []


def snapshot() -> dict[str, bytes]:
    """The grader's course tree, file by file: take it in the main process before any student
    process starts, and hand it to :func:`trusted_checks` in each worker process."""
    return dict(tree_guard().files)


def trusted_checks(snapshot: dict[str, bytes] | None = None) -> dict[str, ModuleType]:
    """Every ``course.checks`` module, imported once, before any student process starts.

    A worker process started while students' code already runs elsewhere passes the main
    process's :func:`snapshot`: the tree on disk must match it before anything is imported (it is
    restored when :func:`~course.grading.kernel.restoring`, else grading stops with an error).
    A module that fails to import is left out (:func:`broken_checks` says why): its notebook is
    graded *error* throughout, the others normally.
    """
    with _lock:
        if not _guard:
            guard = TreeGuard(files=snapshot)
            if snapshot is not None:
                changed = guard.restore()
                if changed and guard.restore():
                    raise RuntimeError(
                        "the course tree differs from the grader's snapshot before the checks "
                        f"were imported ({', '.join(changed[:5])}); set COURSE_GRADING_RESTORE=1 "
                        "or grade from an untouched copy"
                    )
            import course.checks

            for info in pkgutil.iter_modules(course.checks.__path__):
                if info.name.startswith("nb"):
                    name = f"course.checks.{info.name}"
                    try:
                        _trusted[name] = importlib.import_module(name)
                    except Exception as error:  # noqa: BLE001 - reported on its notebook's rows
                        _broken[name] = f"{type(error).__name__}: {error}"
            _import_course()
            _one_thread()
            _guard.append(guard)
        return _trusted


def _one_thread() -> None:
    """The grader's torch computes with one thread, as each student's process does.

    The replay works on tensors of a few hundred numbers, where a second OpenMP thread only
    spins: notebook 05's replay took 2.0 s with one thread and 15.7 s with two (a load of 5 on a
    2-core machine). One thread also leaves no thread pool for a forked worker to inherit
    (:func:`course.classroom._run_calls`)."""
    import torch

    torch.set_num_threads(1)


# Command-line tools no check or replay uses (and that import matplotlib and the like); the
# grader's deadline reads tooling.budgets, which is imported.
_NOT_FOR_GRADING = (
    "tooling.bench",
    "tooling.nbtools",
    "tooling.refresh",
    "tooling.release",
    "classroom",
    "viz",
)


def _import_course() -> None:
    """Every other module of the course package, now, before any student process: a check body
    that imports one lazily during the replay finds it in ``sys.modules`` and never reads source
    or bytecode from a disk that student code has run beside."""
    import course

    for info in pkgutil.walk_packages(course.__path__, "course."):
        name = info.name.removeprefix("course.")
        if name in _NOT_FOR_GRADING or info.name in sys.modules:
            continue
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001, S112 - a module nothing imports may be broken: not ours
            continue


def broken_checks() -> dict[str, str]:
    trusted_checks()
    return _broken


def tree_guard() -> TreeGuard:
    trusted_checks()
    return _guard[0]


# --- static analysis of the student's cells ---------------------------------------------------


def _forbidden_name(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IN_ANSWERS)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _own_import(node: ast.ImportFrom, own: str | None) -> bool:
    """``from course.checks import nbNN as check`` for the graded notebook's own ``nbNN``: the
    template's own line (a student who copies the imports cell gains nothing by it)."""
    return (
        own is not None
        and node.module == "course.checks"
        and [(a.name, a.asname) for a in node.names] == [(own.rsplit(".", 1)[-1], "check")]
    )


def forbidden(source: str, own: str | None = None) -> list[str]:
    """Why a student's cell may not count: imports of check/reference code, use of ``check``.

    ``own`` is the graded notebook's checks module (``course.checks.nb02``): importing it as
    ``check``, as the template does, is allowed."""
    try:
        tree = ast.parse(cell_code(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    reasons = []
    # ``check.softmax(softmax)`` copied into an answer cell is a student running the check, fine.
    calls = {
        id(node.func.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and not node.func.attr.startswith("_")
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            reasons += [f"imports {a.name}" for a in node.names if _forbidden_name(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _own_import(node, own):
                continue
            if _forbidden_name(node.module):
                reasons.append(f"imports from {node.module}")
            else:  # ``from course import checks``: the package is named with the module
                reasons += [
                    f"imports {node.module}.{a.name}"
                    for a in node.names
                    if _forbidden_name(f"{node.module}.{a.name}")
                ]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            target = _dotted(node.func) or ""
            argument = node.args[0].value
            if target.split(".")[-1] in ("__import__", "import_module") and isinstance(
                argument, str
            ):
                if _forbidden_name(argument) or argument == "course":
                    reasons.append(f"imports {argument} dynamically")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted and _forbidden_name(dotted):
                reasons.append(f"uses {dotted}")
        elif isinstance(node, ast.Name) and node.id == "check" and id(node) not in calls:
            reasons.append("uses the notebook's `check` module")
    return sorted(set(reasons))


# --- replaying records ----------------------------------------------------------------------


def read_record(folder: Path, name: str) -> bytes | None:
    """The record's bytes, or None (missing, not a plain file, or too large to be one)."""
    from course.framework.observe import MAX_RECORD_BYTES
    from course.grading.kernel import read_back

    # Never through a link, never blocking on a named pipe, a regular file of bounded size.
    return read_back(record_path(folder, name), MAX_RECORD_BYTES)


def _missing(call: CheckCall, run: Run, student_cells: Iterable[int]) -> tuple[str, str]:
    """Status and message of an exercise whose check left no record: say why, honestly."""
    check_row = run.cells.get(call.cell, {})
    earlier = [
        (index, run.cells[index])
        for index in sorted(student_cells)
        if index in run.cells and run.cells[index].get("status") in ("timeout", "error")
    ]
    if check_row.get("status") == "timeout":
        return TIMEOUT, "time limit reached while the check ran your code"
    timed_out = [i for i, row in earlier if row["status"] == "timeout"]
    if timed_out:
        return TIMEOUT, "time limit reached in your code before the check ran"
    if check_row.get("status") == "error":
        cause = [row.get("message", "") for _, row in earlier if row["status"] == "error"]
        extra = f" (an earlier cell failed first: {cause[-1]})" if cause else ""
        return ERROR, f"the check could not run: {check_row.get('message', '')}{extra}"
    if run.end == "deadline":
        return TIMEOUT, "the notebook's time limit was reached before this check ran"
    if run.end == "crash":
        tail = run.stderr.strip().splitlines()[-1:]
        reason = f"; last words: {tail[0][:200]}" if tail else ""
        return ERROR, (
            "the check did not run: the process that ran your notebook was killed before it "
            f"finished{reason}"
        )
    if run.end in ("dead", "crash") and run.limit == "memory":
        return ERROR, (
            "the kernel died before this check finished: the notebook went over its memory "
            "limit for the whole run (/dev/shm included)"
        )
    if run.end in ("dead", "crash") and run.limit == "processes":
        return ERROR, (
            "the kernel died before this check finished: the notebook started more processes "
            "than its limit for the whole run"
        )
    if run.end == "dead" or check_row.get("status") == "started":
        return ERROR, "the kernel died before this check finished (memory limit or a crash)"
    if run.end == "complete" and check_row.get("status") == "ok":
        return ERROR, "the check ran but left no record (something in the notebook removed it)"
    return ERROR, "the check did not run"


def verdicts(
    name: str,
    calls: list[CheckCall],
    run: Run,
    seed: int,
    module: ModuleType,
    student_cells: dict[str, list[int]],
    flagged: dict[str, list[str]],
) -> list[ExerciseResult]:
    """One trusted result per check call of the template."""
    from course.framework.check import replay
    from course.framework.observe import REPORTED

    results = []
    for call in calls:
        check = getattr(module, call.check, None)
        reasons = flagged.get(call.check, [])
        if check is None or not hasattr(check, "body"):
            results.append(ExerciseResult(name, call.exercise, call.check, ERROR, "no such check"))
            continue
        label = f"{check.exercise} ({check.title})"
        if reasons:
            message = (
                f"❌ {label}: scored 0: your answer {'; '.join(reasons)}. Answers must not use "
                "the course's checks or their reference code."
            )
            results.append(
                ExerciseResult(name, call.exercise, call.check, FAILED, message, flags=reasons)
            )
            continue
        data = read_record(run.records, call.check)
        if data is None:
            status, message = _missing(call, run, student_cells.get(call.check, []))
            results.append(ExerciseResult(name, call.exercise, call.check, status, message))
            continue
        try:
            with (
                _replay_lock
            ):  # course.framework.observe keeps one session per process: one replay at once
                verdict = replay(  # side effects the record reports: said, not graded
                    check,
                    data,
                    seed=seed,
                    positional=call.positional,
                    keywords=call.keywords,
                    effects=REPORTED,
                )
        except Exception as error:  # noqa: BLE001 - the replay must never take the grader down
            results.append(
                ExerciseResult(
                    name,
                    call.exercise,
                    call.check,
                    ERROR,
                    f"the check's record could not be replayed ({type(error).__name__}: {error})",
                )
            )
            continue
        status = verdict.status if verdict.status in (PASSED, FAILED, NOT_IMPLEMENTED) else ERROR
        results.append(  # flags: the record says the hand-in changed the check (scored 0)
            ExerciseResult(
                name,
                call.exercise,
                call.check,
                status,
                verdict.report(),
                flags=[*verdict.flags],
                mistake=verdict.mistake if status == FAILED else None,
                prop=verdict.prop if status == FAILED else None,
                notes=[*verdict.notes],
            )
        )
    return results


# --- Gradescope ------------------------------------------------------------------------------


def gradescope_report(
    results: list[ExerciseResult],
    points: dict[str, float] | None = None,
    execution_time: float | None = None,
) -> dict:
    """Gradescope's results.json content, from trusted results, with the points of
    :func:`course.grading.points.decide` (the rule the feedback and grades.csv follow)."""
    from course.grading.points import decide, gradescope_tests

    tests = gradescope_tests(decide(results, points))
    report = {
        "score": sum(t["score"] for t in tests),
        "output": f"{sum(r.passed for r in results)} of {len(results)} exercises passed.",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    if execution_time is not None:
        report["execution_time"] = round(execution_time)
    return report


def write_results_json(path: Path, report: dict) -> Path:
    """Write ``report`` to ``path`` atomically, replacing whatever is there (a file the student's
    code wrote, a symlink): call it only after every student process has ended."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    partial.write_text(json.dumps(report, indent=2), encoding="utf-8")
    os.replace(partial, path)
    return path


def as_dicts(results: Iterable[ExerciseResult]) -> list[dict]:
    return [asdict(result) for result in results]
