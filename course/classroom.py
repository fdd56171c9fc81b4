"""Running the course as a class: progress, grade, feedback, written answers and Gradescope.

Commands (``python -m course.classroom <command>``; the Makefile wraps them):

* ``progress [--dir notebooks]``  a student's own table notebook x exercise, last line
  ``passed: N of M exercises``.
* ``grade --submissions DIR --out DIR [-j N] [--points FILE] [--manual FILE] [--timeout S]``
  a class (a folder, or a zip of it: one sub-folder, zip or notebook per student, Canvas and
  Moodle bulk downloads too); writes ``OUT/grades.csv``, ``OUT/feedback/<student>.md``,
  ``OUT/written/Question_<id>.md`` (every student's written answer to one question) and
  ``OUT/course-version.txt`` (the digest of the course that graded).
* ``gradescope --out dist/autograder.zip [--only 03,04]``  the Gradescope autograder archive.
* ``verify OUT``  whether every file of OUT is as ``grade`` wrote it (``OUT/manifest.json``).
* ``autograde [--root /autograder]``  what the archive's ``run_autograder`` calls: grade
  ``ROOT/submission`` and write ``ROOT/results/results.json`` (root also from
  ``$COURSE_AUTOGRADER_ROOT``).

``progress`` and ``grade`` are one code path: both read a hand-in with :mod:`course.handins`
(which file is which notebook) and grade it with :func:`grade_handin` against the same
templates (the pristine exercise notebooks), so they give the same verdicts on the same folder.
The engine is :mod:`course.grading`; the statuses are in :mod:`course.framework.contract`.

``progress`` and ``grade`` run again in a child interpreter that imports a read-only copy of the
course made when the command starts (:mod:`course.grading.pinned`): editing ``course/`` while a
class is graded changes nothing of that run, and the run never writes to the checkout.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import json
import multiprocessing
import os
import re
import secrets
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course import grading, handins
from course.framework.contract import ANSWER_PLACEHOLDER, ERROR, MISSING, NOT_IMPLEMENTED, PASSED
from course.grading import ExerciseResult, names, output, pinned, setup
from course.grading.points import Line, decide, flags_text, total

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# A release ships pristine templates here (students edit notebooks/ in place).
SHIPPED_TEMPLATES = ROOT / "course" / "templates"
TEMPLATES = SHIPPED_TEMPLATES if SHIPPED_TEMPLATES.is_dir() else NOTEBOOKS
NOTEBOOK_NAME = re.compile(r"^\d\d_\w+\.ipynb$")
QUESTION = re.compile(r"^#+\s*Question\s+(\d+\.\d+)\b", re.MULTILINE)
ANSWER_MARK = "**Your answer:**"
VERSION_FILE = "course-version.txt"  # in OUT: which course graded the class


class ConfigError(ValueError):
    """A POINTS or MANUAL file that names an unknown exercise or student, or is malformed."""


def notebook_paths(folder: Path) -> list[Path]:
    """The course notebooks (``NN_name.ipynb``) in a folder, in order."""
    return sorted(p for p in folder.glob("*.ipynb") if NOTEBOOK_NAME.match(p.name))


def _threads(jobs: int) -> int:
    """Threads of each student process: one. A second thread made notebook 05's grading 1.9 times
    the CPU (26.7 s against 14.0 s on a busy 2-core machine: OpenMP's threads spin while they
    wait), and Gradescope gives half a CPU."""
    return 1


def _grade_one(call: tuple) -> list[ExerciseResult]:
    """One notebook of one hand-in (a worker's job): ``(template, path, timeout, memory, threads)``."""
    template, path, timeout_s, memory_gb, threads, seed = call
    return grading.grade_file(
        template, path, timeout_s=timeout_s, memory_gb=memory_gb, threads=threads, seed=seed
    )


def _start_worker() -> None:
    """A forked worker is a grading process of its own: it chooses its own boundary. In the uid
    mode that is a student uid of its own (from its pid): a run's clean-up kills every process
    of its uid, so two notebooks graded at once must never share one."""
    from course.grading import sandbox

    sandbox.choose.cache_clear()


def _run_calls(
    calls: list[tuple], jobs: int, done: Callable[[int, list[ExerciseResult]], None]
) -> None:
    """Run every call, telling ``done(index, results)`` as each ends. With ``jobs > 1`` each
    runs in a worker process: the engine's trusted replay keeps per-process state, so two
    notebooks are never graded in one process at the same time."""
    if jobs <= 1 or len(calls) <= 1:
        for index, call in enumerate(calls):
            done(index, _grade_one(call))
        return
    # The workers are forked from this process once its trusted checks are imported, all at the
    # first submit (before any student process of theirs starts): they inherit those modules and
    # never read the course from disk (a spawned worker would import them anew: 5-10 s of CPU).
    grading.trusted_checks()
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(calls)), mp_context=context, initializer=_start_worker
    ) as pool:
        futures = {pool.submit(_grade_one, call): i for i, call in enumerate(calls)}
        for future in as_completed(futures):
            done(futures[future], future.result())


def one_line(result: ExerciseResult) -> str:
    """A result's message on one line, without the check's icon and title."""
    text = result.message.strip().split("\n")[0]
    if ": " in text and text[:2].strip() in ("✅", "⏳", "❌"):
        text = text.split(": ", 1)[1]
    return text[:140]


def _id_key(item: str) -> tuple:
    return tuple(int(x) if x.isdigit() else 10**6 for x in item.split("."))


# --- exercises and written questions of the templates ----------------------------------------


@dataclass
class Question:
    """A written answer of a template: ``Question 0.2``, its prompt and its cell."""

    notebook: str  # template file name
    id: str
    prompt: str
    cell_id: str | None
    heading: str


def questions(template: nbformat.NotebookNode, name: str) -> list[Question]:
    """The written questions of a template (markdown cells holding the answer placeholder)."""
    found = []
    for cell in template.cells:
        if cell.cell_type != "markdown" or ANSWER_PLACEHOLDER not in cell.source:
            continue
        label = QUESTION.search(cell.source)
        qid = label.group(1) if label else f"{name[:2].lstrip('0') or '0'}.q{len(found) + 1}"
        prompt = cell.source.split(ANSWER_PLACEHOLDER)[0].strip()
        heading = cell.source.strip().split("\n")[0].strip()
        found.append(Question(name, qid, prompt, cell.get("id"), heading))
    return found


def all_exercises(templates: Iterable[Path]) -> list[tuple[str, str]]:
    """``(notebook name, exercise id)`` for every check cell of the templates."""
    return [
        (path.name, exercise)
        for path in templates
        for exercise, _ in grading.exercises(nbformat.read(path, as_version=4))
    ]


def all_questions(templates: Iterable[Path]) -> list[Question]:
    return [q for p in templates for q in questions(nbformat.read(p, as_version=4), p.name)]


def columns(templates: list[Path]) -> list[str]:
    """grades.csv's columns between ``student`` and ``total``: exercises and questions in order."""
    auto = {e: n for n, e in all_exercises(templates)}
    written = {q.id: q.notebook for q in all_questions(templates)}
    names = [p.name for p in templates]
    every = {**auto, **written}
    return sorted(every, key=lambda i: (names.index(every[i]), _id_key(i)))


def _unknown(kind: str, source: Path, names: Iterable[str], known: list[str]) -> None:
    wrong = [n for n in names if n not in known]
    if wrong:
        hints = [difflib.get_close_matches(n, known, 1) for n in wrong]
        said = ", ".join(
            f"{n!r}" + (f" (did you mean {h[0]!r}?)" if h else "")
            for n, h in zip(wrong, hints, strict=True)
        )
        raise ConfigError(
            f"{source} names {kind} {said}, which no notebook has; known: {', '.join(known)}"
        )


def load_points(path: Path | None, known: list[str] | None = None) -> dict[str, float]:
    """Points per exercise or question from a JSON object ``{"5.3": 2}``; the others are 1.

    With ``known`` (the exercise and question ids), an id not in it is a :class:`ConfigError`
    that names it.
    """
    if path is None:
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        points = {str(k): float(v) for k, v in raw.items()}
    except (OSError, ValueError, AttributeError, TypeError) as error:
        raise ConfigError(f"{path}: not a JSON object of numbers ({error})") from None
    if known is not None:
        _unknown("exercise", path, points, known)
    return points


def load_manual(
    path: Path | None, known: list[str], students: list[str] | None = None
) -> dict[str, dict[str, float]]:
    """Points given by hand, from a CSV like grades.csv: ``student,0.2,1.6`` then one row each.

    A column that is no exercise or question, a student not in the class, or a value that is no
    number is a :class:`ConfigError` that names it. Empty cells are skipped.
    """
    if path is None:
        return {}
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            rows = list(csv.reader(file))
    except OSError as error:
        raise ConfigError(f"{path}: {error}") from None
    if not rows or not rows[0] or rows[0][0].strip().lower() != "student":
        raise ConfigError(f"{path}: the first row must be `student,<exercise id>,...`")
    header = [h.strip().removeprefix("Question ").strip() for h in rows[0][1:]]
    ids = [h for h in header if h and h.lower() not in ("total", "comment", "flags")]
    _unknown("exercise", path, ids, known)
    manual: dict[str, dict[str, float]] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not row or not row[0].strip():
            continue
        student = row[0].strip()
        if students is not None and student not in students:
            close = difflib.get_close_matches(student, students, 1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{path}, row {number}: no student {student!r}{hint} in the class")
        for item, value in zip(header, row[1:], strict=False):
            if item not in ids or not value.strip():
                continue
            try:
                manual.setdefault(student, {})[item] = float(value)
            except ValueError:
                raise ConfigError(
                    f"{path}, row {number}: {value!r} for {item} is not a number"
                ) from None
    return manual


# --- grading one hand-in ---------------------------------------------------------------------


@dataclass
class Graded:
    """One student's hand-in graded: engine results, the hand-in read, the written answers."""

    student: str
    results: list[ExerciseResult]
    handin: handins.Handin
    written: dict[str, str]  # question id -> the student's answer ("" when none)
    seconds: float = 0.0


def read_handin(student: str, paths: list[Path], base: Path, templates: list[Path]):
    return handins.read_handin(student, paths, base, [p.stem for p in templates])


def _answer_text(source: str, prompt: str) -> str:
    text = source.replace(ANSWER_PLACEHOLDER, "").strip()
    if ANSWER_MARK in text:
        text = text.split(ANSWER_MARK, 1)[1]
    elif prompt and text.startswith(prompt):
        text = text[len(prompt) :]
    text = text.strip()
    return "" if text in ("", "*write it here.*") else text


def written_answers(data: bytes | None, asked: list[Question]) -> dict[str, str]:
    """Each question's answer in a submitted notebook: its answer cell (by id, else by heading),
    plus the markdown cells the student added right after it."""
    if data is None or not asked:
        return {}
    try:
        notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception:  # noqa: BLE001 - an unreadable notebook answers nothing
        return {}
    cells = notebook.cells
    headings = {q.heading for q in asked}
    answers = {}
    for q in asked:
        index = next(
            (i for i, c in enumerate(cells) if q.cell_id and c.get("id") == q.cell_id), None
        )
        if index is None or cells[index].cell_type != "markdown":
            index = next(
                (
                    i
                    for i, c in enumerate(cells)
                    if c.cell_type == "markdown" and c.source.strip().startswith(q.heading)
                ),
                None,
            )
        if index is None:
            answers[q.id] = ""
            continue
        parts = [_answer_text(cells[index].source, q.prompt)]
        for cell in cells[index + 1 :]:  # answers typed into new cells below the question
            if cell.cell_type != "markdown" or cell.source.strip().split("\n")[0] in headings:
                break
            if cell.source.lstrip().startswith("#") or ANSWER_PLACEHOLDER in cell.source:
                break
            parts.append(cell.source.strip())
        answers[q.id] = "\n\n".join(p for p in parts if p)
    return answers


def _plan(
    handin: handins.Handin,
    templates: list[Path],
    scratch: Path,
    timeout_s: float,
    memory_gb: float,
    threads: int,
    seed: int = 0,
) -> list[tuple | list[ExerciseResult]]:
    """Per template: a call for the engine (the chosen file written to ``scratch``), or the
    rows already known (nothing found in a hand-in that had problems)."""
    plan: list[tuple | list[ExerciseResult]] = []
    for template in templates:
        chosen = handin.chosen.get(template.stem)
        if chosen is None and handin.problems:
            message = f"{template.name} not found; " + "; ".join(handin.problems)
            notebook = nbformat.read(template, as_version=4)
            plan.append(grading.unreadable(notebook, template.name, ERROR, message))
            continue
        if chosen is not None and not chosen.readable:  # not JSON, too large: no analysis at all
            notebook = nbformat.read(template, as_version=4)
            plan.append(grading.unreadable(notebook, template.name, ERROR, chosen.problem))
            continue
        path = None
        if chosen is not None:
            # A folder of its own per hand-in, whatever the student's name (never shared).
            path = Path(tempfile.mkdtemp(dir=scratch, prefix="handin-")) / template.name
            path.write_bytes(chosen.data)
        plan.append((template, path, timeout_s, memory_gb, threads, seed))
    return plan


def _written(handin: handins.Handin, templates: list[Path]) -> dict[str, str]:
    written: dict[str, str] = {}
    for template in templates:
        asked = questions(nbformat.read(template, as_version=4), template.name)
        chosen = handin.chosen.get(template.stem)
        readable = chosen is not None and chosen.readable
        written.update(written_answers(chosen.data if readable else None, asked))
        written.update({q.id: written.get(q.id, "") for q in asked})
    return written


def _private_templates(templates: list[Path], folder: Path) -> list[Path]:
    """The templates copied, before any student process starts, into the grader's private
    folder: what grading reads from then on (never ``notebooks/`` again)."""
    folder.mkdir(mode=0o700)
    copies = []
    for template in templates:
        copy = folder / template.name
        copy.write_bytes(template.read_bytes())
        copies.append(copy)
    return copies


SEED_ENV = "COURSE_GRADING_SEED"


def _run_seed(seed: int | None) -> int:
    """The run's seed: given, else ``COURSE_GRADING_SEED``, else drawn; printed, so that a run
    can be repeated exactly."""
    if seed is None:
        fixed = os.environ.get(SEED_ENV, "").strip()
        seed = int(fixed) if fixed.isdigit() else secrets.randbelow(2**31)
    print(  # on stderr: stdout holds the table a script may read
        f"The checks' inputs of this run are drawn with seed {seed} ({SEED_ENV}={seed} repeats them).",
        file=sys.stderr,
        flush=True,
    )
    return seed


def grade_handins(
    everyone: list[handins.Handin],
    templates: list[Path],
    jobs: int = 1,
    timeout_s: float = grading.DEFAULT_TIMEOUT_S,
    memory_gb: float = grading.DEFAULT_MEMORY_GB,
    log: Callable[[Graded], None] = lambda _: None,
    seed: int | None = None,
) -> list[Graded]:
    """Grade the chosen file of every template of every hand-in: the one path of ``progress``
    (one hand-in) and ``grade`` (a class). ``jobs`` notebooks at a time, each in a worker.

    The checks' inputs are drawn from ``seed``, drawn afresh for every run unless given (or set
    in ``COURSE_GRADING_SEED``): answers computed beforehand for known inputs are worth nothing.
    Every hand-in of a run gets the same inputs."""
    # Before anyone is graded: a known-right notebook through the same sandbox, uid, environment
    # and paths. A grader's fault stops the run here, never written as a student's error.
    print(setup.require(timeout_s, memory_gb).line(), file=sys.stderr, flush=True)
    seed = _run_seed(seed)
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="course-handin-") as scratch:
        templates = _private_templates(templates, Path(scratch) / "templates")
        plans = [
            _plan(h, templates, Path(scratch), timeout_s, memory_gb, _threads(jobs), seed)
            for h in everyone
        ]
        calls = [
            (i, j)
            for i, plan in enumerate(plans)
            for j, p in enumerate(plan)
            if isinstance(p, tuple)
        ]
        left = [sum(1 for i2, _ in calls if i2 == i) for i in range(len(everyone))]
        graded: list[Graded | None] = [None] * len(everyone)

        def finish(i: int) -> None:
            results = [r for rs in plans[i] for r in rs]
            written = _written(everyone[i], templates)
            seconds = round(time.time() - start, 1)
            graded[i] = Graded(everyone[i].student, results, everyone[i], written, seconds)
            log(graded[i])

        def done(k: int, results: list[ExerciseResult]) -> None:
            i, j = calls[k]
            plans[i][j] = results
            left[i] -= 1
            if left[i] == 0:
                finish(i)

        for i, n in enumerate(left):
            if n == 0:
                finish(i)
        _run_calls([plans[i][j] for i, j in calls], jobs, done)
    return graded  # type: ignore[return-value]


def grade_handin(
    handin: handins.Handin,
    templates: list[Path],
    jobs: int = 1,
    timeout_s: float = grading.DEFAULT_TIMEOUT_S,
    memory_gb: float = grading.DEFAULT_MEMORY_GB,
) -> Graded:
    """One hand-in graded (:func:`grade_handins`)."""
    return grade_handins([handin], templates, jobs, timeout_s, memory_gb)[0]


# --- progress --------------------------------------------------------------------------------


def pristine_templates(folder: Path, templates: list[Path], scratch: Path) -> list[Path]:
    """The templates as released when the student works in the templates' own folder.

    A student who edits ``notebooks/`` in place also edits the templates: then each template is
    read from git's last commit when git has it (a clone), else used as it is.
    """
    if not templates or templates[0].parent.resolve() != folder.resolve():
        return templates
    out = []
    for path in templates:
        try:  # git is asked in the templates' own folder: the grader runs from a pinned copy
            shown = subprocess.run(
                ["git", "-C", str(path.resolve().parent), "show", f"HEAD:./{path.name}"],
                capture_output=True,
                timeout=30,
                check=True,
            ).stdout
            nbformat.reads(shown.decode("utf-8"), as_version=4)
        except (ValueError, OSError, subprocess.SubprocessError, UnicodeDecodeError):
            out.append(path)
            continue
        copy = scratch / path.name
        copy.write_bytes(shown)
        out.append(copy)
    return out


def progress(
    folder: Path,
    jobs: int = 1,
    timeout_s: float = grading.DEFAULT_TIMEOUT_S,
    templates_dir: Path | None = None,
) -> tuple[int, int, str]:
    """``(passed, total, table)``: ``folder`` graded exactly as ``make grade`` grades a hand-in."""
    with tempfile.TemporaryDirectory(prefix="course-templates-") as scratch:
        templates = pristine_templates(
            folder, notebook_paths(templates_dir or TEMPLATES), Path(scratch)
        )
        base = folder if folder.is_dir() else folder.parent  # a folder, a zip or one notebook
        handin = read_handin("you", [folder], base, templates)
        graded = grade_handin(handin, templates, jobs, timeout_s)
    lines = [f"{'notebook':<32} {'exercise':<8} status", "-" * 72]
    passed = total = 0
    for r, line in zip(graded.results, decide(graded.results), strict=True):
        total += 1
        passed += r.passed
        if r.status == PASSED:
            status = "✅ passed"
        elif r.status == NOT_IMPLEMENTED:
            status = "⏳ not started"
        else:
            status = f"❌ {r.status}: {one_line(r)}"
        if line.flagged:  # never a plain "passed"
            status += f" ⚠️ flagged for your instructor: {'; '.join(line.flags)}"[:200]
        lines.append(f"{Path(r.notebook).stem:<32} {r.exercise:<8} {status}")
    for qid, answer in sorted(graded.written.items(), key=lambda x: _id_key(x[0])):
        state = "answered" if answer else "not answered yet"
        lines.append(f"{'(written)':<32} {qid:<8} ✍ {state} (graded by your instructor)")
    for stem, note in graded.handin.notes.items():
        lines.append(f"note: {stem}: {note}")
    lines += [f"note: `{w}` was not read: a hidden or system entry" for w in graded.handin.skipped]
    lines += [f"note: {p}" for p in graded.handin.problems]
    lines.append(f"passed: {passed} of {total} exercises")
    return passed, total, "\n".join(lines)


# --- grading a class -------------------------------------------------------------------------


def scored(
    graded: Graded,
    points: dict[str, float],
    manual: dict[str, float] | None = None,
    asked: list[Question] | None = None,
) -> list[Line]:
    """A hand-in's exercises and written questions with their points (:func:`decide`, the one
    rule): the feedback, grades.csv and results.json are all written from these lines."""
    return decide(graded.results, points, manual, asked or [])


def feedback(
    graded: Graded,
    points: dict[str, float],
    manual: dict[str, float] | None = None,
    asked: list[Question] | None = None,
) -> str:
    """A student's feedback in Markdown: which files were graded, every check's own message
    and every written answer, grouped by notebook."""
    manual = manual or {}
    results, asked = graded.results, asked or []
    decided = scored(graded, points, manual, asked)
    by_item = {x.item: x for x in decided}
    earned, possible = total(decided)
    lines = [
        f"# Feedback for {graded.student}",
        "",
        f"**Total: {earned:g} of {possible:g} points.**",
    ]
    pending = [q.id for q in asked if q.id not in manual]
    if pending:
        lines.append(f"(Written answers {', '.join(pending)} are still to be graded by hand.)")
    flagged = flags_text(decided)
    if flagged:
        lines.append(f"⚠️ **Flagged for your instructor**, who will review it: {flagged}.")
    handin = graded.handin
    if handin.problems or handin.ignored or handin.skipped:
        lines += ["", "## Your hand-in", ""]
        lines += [f"- {p}" for p in handin.problems]
        lines += [f"- `{w}` was not read: a hidden or system entry" for w in handin.skipped]
        lines += [
            f"- `{w}` was not graded: it is no notebook of this course" for w in handin.ignored
        ]
    for notebook in dict.fromkeys(r.notebook for r in results):
        mine = [r for r in results if r.notebook == notebook]
        lines += ["", f"## {Path(notebook).stem}", ""]
        note = handin.notes.get(Path(notebook).stem)
        if note:
            lines += [f"*File:* {note}", ""]
        same = {(r.status, r.message) for r in mine}
        if len(same) == 1 and mine[0].status in (MISSING, ERROR):
            which = "The exercise" if len(mine) == 1 else f"All {len(mine)} exercises"
            lines.append(f"- {which} ({mine[0].status}): {mine[0].message}")
            if mine[0].status == MISSING:
                continue  # nothing was written either
        else:
            for r in mine:
                lines += _feedback_item(by_item[r.exercise])
        for q in (q for q in asked if q.notebook == notebook):
            lines += _written_item(by_item[q.id], graded.written.get(q.id, ""))
    return "\n".join(lines).rstrip() + "\n"


def _feedback_item(line: Line) -> list[str]:
    """One exercise in the feedback: status, points and the check's own message."""
    by_hand = " set by hand" if line.by_hand else ""
    head = f"- **Exercise {line.item}** ({line.status}, {line.earned or 0:g}{by_hand} of "
    head += f"{line.possible:g}"
    head += f"; ⚠️ flagged: {'; '.join(line.flags)}):" if line.flagged else "):"
    body = [f"  > {x}" for x in line.message.strip().splitlines()]
    return [head, *body, ""]


def _written_item(line: Line, answer: str) -> list[str]:
    graded = line.earned is not None
    score = f"{line.earned:g} of {line.possible:g}" if graded else "to be graded"
    head = f"- **Question {line.item}** (written, {score}):"
    body = [f"  > {x}" for x in (answer or "*(no answer)*").splitlines()]
    return [head, *body, ""]


def written_files(graded: list[Graded], asked: list[Question]) -> dict[str, str]:
    """``written/Question_<id>.md`` (path in OUT -> text): one question, every student's answer,
    to read and grade."""
    written = {}
    for q in asked:
        lines = [f"# Question {q.id} ({Path(q.notebook).stem})", ""]
        lines += [f"> {x}" if x else ">" for x in q.prompt.splitlines()[1:]] + [""]
        for g in graded:
            answer = g.written.get(q.id, "")
            # quoted: an answer's own "## someone" can never open another student's section
            lines += [f"## {g.student}", "", *names.quoted_answer(answer or "*(no answer)*"), ""]
        written[f"written/Question_{q.id}.md"] = "\n".join(lines).rstrip() + "\n"
    return written


def class_handins(
    submissions: Path, templates: list[Path], refused: list[tuple[str, str]] = ()
) -> list[handins.Handin]:
    """Every student's hand-in in a class folder; ``refused``: the class zip's refused entries,
    each among its student's problems (a student with nothing else gets rows that say why)."""
    found, said = handins.class_students(submissions, refused)
    everyone = []
    for student, paths in found.items():
        handin = read_handin(student, paths, submissions, templates)
        handin.problems = said.get(student, []) + handin.problems
        everyone.append(handin)
    return everyone


def grade_class(
    submissions: Path,
    out: Path,
    templates_dir: Path = TEMPLATES,
    jobs: int = 1,
    points_file: Path | None = None,
    timeout_s: float = grading.DEFAULT_TIMEOUT_S,
    memory_gb: float = grading.DEFAULT_MEMORY_GB,
    log: Callable[[str], None] = print,
    manual_file: Path | None = None,
) -> dict[str, list[ExerciseResult]]:
    """Grade every hand-in in ``submissions``; write grades.csv, feedback/ and written/.

    POINTS and MANUAL are checked first: a file naming an unknown exercise (or, for MANUAL, an
    unknown student) raises :class:`ConfigError` before anything is graded.
    """
    templates = notebook_paths(templates_dir)
    items = columns(templates)
    asked = all_questions(templates)
    points = load_points(points_file, items)
    with tempfile.TemporaryDirectory(prefix="course-class-") as unpacked:
        refused: list[tuple[str, str]] = []
        if submissions.is_file():  # the whole class as one zip (an LMS bulk download)
            submissions = _unpack_class(submissions, Path(unpacked), refused)
        everyone = class_handins(submissions, templates, refused)
        manual = load_manual(manual_file, items, [h.student for h in everyone])

        skipped = [
            f"{name} (a hidden or system entry of the class folder)"
            for name in (handins.skipped_entries(submissions))
        ]
        skipped += [f"{line} (an entry of the class zip)" for _, line in refused]
        for handin in everyone:
            skipped += [f"{handin.student}: {where}" for where in handin.skipped]
        for line in skipped:
            log(names.text(f"skipped: {line}"))

        def say(graded: Graded) -> None:
            score = total(scored(graded, points, manual.get(graded.student, {}), asked))[0]
            log(
                names.text(
                    f"{graded.student}: {score:g} point{'' if score == 1 else 's'}, "
                    f"{sum(r.passed for r in graded.results)} of "
                    f"{len(graded.results)} exercises passed (done at {graded.seconds:.0f} s)"
                )
            )

        graded = grade_handins(everyone, templates, jobs, timeout_s, memory_gb, say)
    # Every student process has ended: OUT is written now, by the grader alone, in one go.
    files: dict[str, str] = {}
    file_names, collided = names.file_names([g.student for g in graded])
    rows: list[list[object]] = [["student", *items, "total", "flags"]]
    for g in graded:
        mine = manual.get(g.student, {})
        decided = scored(g, points, mine, asked)
        by_id = {x.item: x.earned for x in decided}
        cells = ["" if by_id.get(c) is None else f"{by_id[c]:g}" for c in items]
        earned = total(decided)[0]
        flags = flags_text(decided)
        feedback_file = f"feedback/{file_names[g.student]}.md"
        if g.student in collided:  # named in both rows: whose file is whose
            others = ", ".join(collided[g.student])
            note = f"file name shared with {others}: this student's feedback is {feedback_file}"
            flags = f"{flags}; {note}" if flags else note
        rows.append([g.student, *cells, f"{earned:g}", flags])
        files[feedback_file] = names.text(feedback(g, points, mine, asked))
    files["grades.csv"] = names.csv_text(rows)  # every cell quoted: safe under "," and ";"
    # What `make report` counts: the same trusted results as the grades, never a second run.
    from course.grading.report import RECORDS, records_json

    files[RECORDS] = records_json((g.student, g.results) for g in graded)
    if skipped:
        files["skipped.txt"] = names.text("".join(f"{line}\n" for line in skipped))
    files.update({k: names.text(v) for k, v in written_files(graded, asked).items()})
    files[VERSION_FILE] = (
        f"course version {pinned.version()}: the sha256 of the course package that graded this "
        "class, as it was when the run started (a regrade after an edit of course/ shows "
        "another)\n"
    )
    output.write_tree(out, files)
    changed = output.verify(out)
    if changed:
        raise RuntimeError(f"{out} changed while it was written: {'; '.join(changed[:5])}")
    return {g.student: g.results for g in graded}


def _unpack_class(archive: Path, into: Path, refused: list[tuple[str, str]]) -> Path:
    """A class zip (e.g. Canvas's submissions.zip) written out safely, notebooks and zips only;
    each entry refused (a link, a path out of the folder, too large) added to ``refused``."""
    problems: list[str] = []
    found = handins.read_zip(
        archive.read_bytes(),
        archive.name,
        handins._Budget(),
        problems,
        expand=False,
        refused=refused,
    )
    if problems and not found:
        raise ConfigError("; ".join(problems))
    for f in found:
        inner = f.raw.replace("\x00", "_")  # the entry's own name; shown escaped when read back
        target = into / inner.replace("\\", "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.data)
        os.utime(target, (f.modified, f.modified))
    return into


# --- Gradescope ------------------------------------------------------------------------------

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
# bubblewrap: the sandbox the student's code runs in (course/grading/sandbox.py).
apt-get install -y python3.11 python3.11-venv bubblewrap
python3.11 -m venv /autograder/venv
PIP="/autograder/venv/bin/python -m pip install --quiet"
# CPU-only torch from PyTorch's CPU wheel index (the default wheel pulls GBs of CUDA libraries),
# at the version requirements.txt pins; the next line then finds it already installed.
$PIP --index-url https://download.pytorch.org/whl/cpu \\
  "torch==$(sed -n 's/^torch==//p' /autograder/source/requirements.txt)"
$PIP -r /autograder/source/requirements.txt
$PIP --no-deps -e /autograder/source
# Prepare the datasets now (the image has a network while it is built); the checks themselves
# need none, and without them the notebooks fall back to the bundled samples.
/autograder/venv/bin/python -m course.data prepare || echo "datasets not prepared: samples will be used"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission, in /autograder.
ROOT="${COURSE_AUTOGRADER_ROOT:-/autograder}"
PYTHON="${COURSE_AUTOGRADER_PYTHON:-/autograder/venv/bin/python}"
cd "$ROOT/source" && exec "$PYTHON" -m course.classroom autograde --root "$ROOT"
"""


def build_gradescope(
    out: Path,
    only: list[str] | None = None,
    points_file: Path | None = None,
    timeout_s: float = grading.DEFAULT_TIMEOUT_S,
) -> Path:
    """Write the autograder zip: setup.sh, run_autograder, and the course (no solutions)."""
    templates = [p for p in notebook_paths(TEMPLATES) if not only or p.name[:2] in only]
    config = {
        "notebooks": [p.name for p in templates],
        "points": load_points(points_file, columns(templates)),
        "timeout_s": timeout_s,
        "memory_gb": grading.DEFAULT_MEMORY_GB,
    }
    files: dict[str, Path | str] = {"setup.sh": SETUP_SH, "run_autograder": RUN_AUTOGRADER}
    files["autograder.json"] = json.dumps(config, indent=2) + "\n"
    for name in ("requirements.txt", "pyproject.toml", "LICENSE", "data/README.md"):
        files[name] = ROOT / name
    for path in sorted((ROOT / "course").rglob("*.py")):
        if "templates" not in path.relative_to(ROOT).parts:
            files[str(path.relative_to(ROOT))] = path
    for path in sorted((ROOT / "data" / "samples").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[str(path.relative_to(ROOT))] = path
    for path in templates:
        files[f"notebooks/{path.name}"] = path
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            executable = name in ("setup.sh", "run_autograder")
            info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            data = content if isinstance(content, str) else content.read_bytes()
            archive.writestr(info, data)
    return out


def autograde(root: Path) -> dict:
    """Grade ``root/submission`` with the archive's templates; write results/results.json."""
    source = root / "source"
    config = json.loads((source / "autograder.json").read_text(encoding="utf-8"))
    templates = [source / "notebooks" / name for name in config["notebooks"]]
    points = {str(k): float(v) for k, v in config["points"].items()}
    start = time.time()
    submission = root / "submission"
    handin = read_handin("submission", [submission], submission, templates)
    graded = grade_handin(handin, templates, 1, config["timeout_s"], config["memory_gb"])
    report = grading.gradescope_report(graded.results, points, time.time() - start)
    notes = [*handin.problems, *(f"{k}: {v}" for k, v in handin.notes.items())]
    report["output"] += "".join(f"\n{n}" for n in notes)
    # Written by the trusted side, after every student process has ended.
    grading.write_results_json(root / "results" / "results.json", report)
    return report


# --- command line ----------------------------------------------------------------------------


def _absolute_argv(args: argparse.Namespace) -> list[str]:
    """``progress`` or ``grade`` again, every path made absolute (the pinned run works in its
    copy, not in this directory)."""
    here = Path.cwd()  # joined as typed, not resolved through links
    if args.command == "progress":
        paths = {"--dir": args.dir, "--templates": args.templates}
        rest = ["-j", str(args.jobs)]
    else:
        paths = {
            "--submissions": args.submissions,
            "--out": args.out,
            "--templates": args.templates,
            "--points": args.points,
            "--manual": args.manual,
        }
        rest = ["-j", str(args.jobs), "--timeout", repr(args.timeout)]
        rest += ["--memory-gb", repr(args.memory_gb)]
    given = [[option, str(here / value)] for option, value in paths.items() if value is not None]
    return [args.command, *(word for pair in given for word in pair), *rest]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course.classroom", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("progress", help="a student's progress table")
    p.add_argument("--dir", type=Path, default=NOTEBOOKS)
    p.add_argument("--templates", type=Path, default=TEMPLATES)
    p.add_argument("-j", "--jobs", type=int, default=1)
    g = sub.add_parser("grade", help="grade a folder (or zip) of hand-ins")
    g.add_argument("--submissions", type=Path, required=True)
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--templates", type=Path, default=TEMPLATES)
    g.add_argument("-j", "--jobs", type=int, default=1)
    g.add_argument("--points", type=Path, default=None, help='JSON {"5.3": 2}; default 1 each')
    g.add_argument("--manual", type=Path, default=None, help="CSV student,<id>,...: hand points")
    g.add_argument(
        "--timeout", type=float, default=grading.DEFAULT_TIMEOUT_S, help="seconds per exercise"
    )
    g.add_argument("--memory-gb", type=float, default=grading.DEFAULT_MEMORY_GB)
    s = sub.add_parser("gradescope", help="write the Gradescope autograder archive")
    s.add_argument("--out", type=Path, default=ROOT / "dist" / "autograder.zip")
    s.add_argument("--only", default="", help="notebook numbers to grade, e.g. 03,04")
    s.add_argument("--points", type=Path, default=None)
    s.add_argument("--timeout", type=float, default=grading.DEFAULT_TIMEOUT_S)
    v = sub.add_parser("verify", help="whether OUT is as make grade wrote it (its manifest)")
    v.add_argument("out", type=Path)
    a = sub.add_parser("autograde", help="(inside Gradescope) grade /autograder/submission")
    a.add_argument(
        "--root", type=Path, default=Path(os.environ.get("COURSE_AUTOGRADER_ROOT", "/autograder"))
    )
    args = parser.parse_args(argv)
    if args.command in ("progress", "grade") and pinned.active() is None:
        # Graded from a read-only copy of the course made now, never from the checkout.
        return pinned.run_pinned(_absolute_argv(args))
    if args.command in ("progress", "grade"):
        pinned.require_active()
        print(
            f"grading with the course as this run found it: version {pinned.version()} "
            "(a read-only copy; an edit of course/ from now on applies to the next run)",
            file=sys.stderr,
            flush=True,
        )
    if args.command in ("progress", "grade", "autograde"):
        from course.grading import sandbox

        note = sandbox.notice()  # one line, before grading, where student code runs unfenced
        if note:
            print(note, file=sys.stderr, flush=True)
    try:
        if args.command == "progress":
            if not args.dir.exists():
                print(f"{args.dir} does not exist", file=sys.stderr)
                return 2
            print(names.text(progress(args.dir, args.jobs, templates_dir=args.templates)[2]))
        elif args.command == "grade":
            start = time.time()
            graded = grade_class(
                args.submissions,
                args.out,
                args.templates,
                args.jobs,
                args.points,
                args.timeout,
                args.memory_gb,
                manual_file=args.manual,
            )
            print(
                f"graded {len(graded)} hand-ins in {time.time() - start:.0f} s: "
                f"{args.out / 'grades.csv'}, feedback/, written/"
            )
        elif args.command == "gradescope":
            only = [x.strip().zfill(2) for x in args.only.split(",") if x.strip()]
            print(f"wrote {build_gradescope(args.out, only, args.points, args.timeout)}")
        elif args.command == "verify":
            changed = output.verify(args.out)
            for line in changed:
                print(f"{args.out}: {line}", file=sys.stderr)
            state = "CHANGED since grading" if changed else "as graded (manifest.json)"
            print(f"{args.out}: {state}")
            return 1 if changed else 0
        elif args.command == "autograde":
            report = autograde(args.root)
            print(names.text(report["output"]))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except setup.SetupError as error:  # the grader's setup, not a student: nobody was graded
        print(f"error: {error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
