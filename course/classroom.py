"""Running the course as a class: progress, grading, feedback and Gradescope.

Commands (``python -m course.classroom <command>``; the Makefile wraps them):

* ``progress [--dir notebooks]``  a student's own table notebook x exercise, last line
  ``passed: N of M exercises``. Each notebook is its own template: nothing else is read.
* ``grade --submissions DIR --out DIR [-j N] [--points FILE]``  one folder per student;
  writes ``OUT/grades.csv`` and ``OUT/feedback/<student>.md``. Templates: ``notebooks/``.
* ``gradescope --out dist/autograder.zip [--only 03,04]``  the Gradescope autograder archive.
* ``autograde [--root /autograder]``  what the archive's ``run_autograder`` calls: grade
  ``ROOT/submission`` and write ``ROOT/results/results.json`` (root also from
  ``$COURSE_AUTOGRADER_ROOT``).

The engine is :mod:`course.grading`; the statuses and limits are described there.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import stat
import sys
import time
import zipfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from course import grading
from course.grading import NOTEBOOK_NAME, PASSED, ExerciseResult

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "notebooks"
ICONS = {grading.PASSED: "✅", grading.NOT_IMPLEMENTED: "⏳"}


def notebook_paths(folder: Path) -> list[Path]:
    """The course notebooks (``NN_name.ipynb``) in a folder, in order."""
    return sorted(p for p in folder.glob("*.ipynb") if NOTEBOOK_NAME.match(p.name))


def _threads(jobs: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, jobs))


def _parallel(
    tasks: list[Callable[[], list[ExerciseResult]]], jobs: int
) -> list[list[ExerciseResult]]:
    if jobs <= 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda task: task(), tasks))


def one_line(result: ExerciseResult) -> str:
    """A result's message on one line, without the check's icon and title."""
    text = result.message.strip().split("\n")[0]
    if ": " in text and text[:2].strip() in ("✅", "⏳", "❌"):
        text = text.split(": ", 1)[1]
    return text[:140]


# --- progress ------------------------------------------------------------------------------


def progress(folder: Path, jobs: int = 1, timeout_s: float = 300) -> tuple[int, int, str]:
    """``(passed, total, table)`` for the notebooks in ``folder``, each its own template."""
    paths = notebook_paths(folder)
    tasks = [
        (lambda p=p: grading.grade_file(p, p, timeout_s=timeout_s, threads=_threads(jobs)))
        for p in paths
    ]
    lines = [f"{'notebook':<32} {'exercise':<8} status", "-" * 72]
    passed = total = 0
    for results in _parallel(tasks, jobs):
        for r in results:
            total += 1
            passed += r.passed
            if r.status == PASSED:
                status = "✅ passed"
            elif r.status == grading.NOT_IMPLEMENTED:
                status = "⏳ not started"
            else:
                status = f"❌ {r.status}: {one_line(r)}"
            lines.append(f"{Path(r.notebook).stem:<32} {r.exercise:<8} {status}")
    lines.append(f"passed: {passed} of {total} exercises")
    return passed, total, "\n".join(lines)


# --- grading a class -----------------------------------------------------------------------


def all_exercises(templates: Iterable[Path]) -> list[tuple[str, str]]:
    """``(notebook name, exercise id)`` for every check cell of the templates."""
    return [
        (path.name, exercise)
        for path in templates
        for exercise, _ in grading.exercises(nbformat.read(path, as_version=4))
    ]


def load_points(path: Path | None) -> dict[str, float]:
    """Points per exercise id from a JSON object ``{"5.3": 2}``; the others are worth 1."""
    if path is None:
        return {}
    return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def find_submission(folder: Path, name: str) -> Path | None:
    """``folder/name``, or the first file of that name below it (uploads keep sub-folders)."""
    if (folder / name).exists():
        return folder / name
    found = sorted(p for p in folder.rglob(name) if "__MACOSX" not in p.parts)
    return found[0] if found else None


def grade_student(
    folder: Path,
    templates: list[Path],
    jobs: int = 1,
    timeout_s: float = grading.DEFAULT_TIMEOUT_S,
    memory_gb: float = grading.DEFAULT_MEMORY_GB,
) -> list[ExerciseResult]:
    """Every exercise of every template, graded from one student's folder."""
    if not folder.is_dir():
        message = f"the submission {folder.name!r} is not a folder of notebooks"
        return [
            result
            for path in templates
            for result in grading.unreadable(
                nbformat.read(path, as_version=4), path.name, grading.ERROR, message
            )
        ]
    tasks = [
        (
            lambda t=t: grading.grade_file(
                t, find_submission(folder, t.name), timeout_s, memory_gb, _threads(jobs)
            )
        )
        for t in templates
    ]
    return [r for results in _parallel(tasks, jobs) for r in results]


def points_of(result: ExerciseResult, points: dict[str, float]) -> float:
    return points.get(result.exercise, 1.0) if result.passed else 0.0


def feedback(student: str, results: list[ExerciseResult], points: dict[str, float]) -> str:
    """A student's feedback in Markdown: every check's own message, grouped by notebook."""
    earned = sum(points_of(r, points) for r in results)
    possible = sum(points.get(r.exercise, 1.0) for r in results)
    lines = [f"# Feedback for {student}", "", f"**Total: {earned:g} of {possible:g} points.**"]
    for notebook in dict.fromkeys(r.notebook for r in results):
        mine = [r for r in results if r.notebook == notebook]
        lines += ["", f"## {Path(notebook).stem}", ""]
        same = {(r.status, r.message) for r in mine}
        if len(same) == 1 and mine[0].status in (grading.MISSING, grading.ERROR):
            lines.append(f"- All {len(mine)} exercises ({mine[0].status}): {mine[0].message}")
            continue
        for r in mine:
            lines += _feedback_item(r, points)
    return "\n".join(lines).rstrip() + "\n"


def _feedback_item(r: ExerciseResult, points: dict[str, float]) -> list[str]:
    """One exercise in the feedback: status, points and the check's own message."""
    head = f"- **Exercise {r.exercise}** ({r.status}, {points_of(r, points):g} of "
    head += f"{points.get(r.exercise, 1.0):g}):"
    body = [f"  > {x}" for x in r.message.strip().splitlines()]
    return [head, *body, ""]


def grade_class(
    submissions: Path,
    out: Path,
    templates_dir: Path = TEMPLATES,
    jobs: int = 1,
    points_file: Path | None = None,
    timeout_s: float = grading.DEFAULT_TIMEOUT_S,
    memory_gb: float = grading.DEFAULT_MEMORY_GB,
    log: Callable[[str], None] = print,
) -> dict[str, list[ExerciseResult]]:
    """Grade every student folder in ``submissions``; write grades.csv and feedback/."""
    templates = notebook_paths(templates_dir)
    points = load_points(points_file)
    columns = [exercise for _, exercise in all_exercises(templates)]
    students = sorted(p for p in submissions.iterdir() if not p.name.startswith((".", "__")))
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    # Parallelism over students, then over each student's notebooks.
    per_student = max(1, jobs // max(1, len(students))) if len(students) < jobs else 1

    def one(student: Path) -> list[ExerciseResult]:
        start = time.time()
        results = grade_student(student, templates, per_student, timeout_s, memory_gb)
        for name in dict.fromkeys(r.notebook for r in results):
            mine = [r for r in results if r.notebook == name]
            if mine[0].seconds:
                passed = sum(r.passed for r in mine)
                log(f"  {student.name} {name}: {passed} of {len(mine)} ({mine[0].seconds:.0f} s)")
        score = sum(points_of(r, points) for r in results)
        log(
            f"{student.name}: {score:g} of {len(results)} exercises passed ({time.time() - start:.0f} s)"
        )
        return results

    graded = dict(
        zip(students, _parallel([lambda s=s: one(s) for s in students], jobs), strict=True)
    )
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["student", *columns, "total"])
        for student, results in graded.items():
            by_id = {r.exercise: points_of(r, points) for r in results}
            row = [by_id.get(c, 0.0) for c in columns]
            writer.writerow([student.name, *[f"{x:g}" for x in row], f"{sum(row):g}"])
            text = feedback(student.name, results, points)
            (out / "feedback" / f"{student.name}.md").write_text(text, encoding="utf-8")
    return {student.name: results for student, results in graded.items()}


# --- Gradescope ----------------------------------------------------------------------------

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
set -euo pipefail
apt-get install -y python3.11 python3.11-venv
python3.11 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet -r /autograder/source/requirements.txt
/autograder/venv/bin/python -m pip install --quiet --no-deps -e /autograder/source
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
    out: Path, only: list[str] | None = None, points_file: Path | None = None
) -> Path:
    """Write the autograder zip: setup.sh, run_autograder, and the course (no solutions)."""
    templates = [p for p in notebook_paths(TEMPLATES) if not only or p.name[:2] in only]
    config = {
        "notebooks": [p.name for p in templates],
        "points": load_points(points_file),
        "timeout_s": grading.DEFAULT_TIMEOUT_S,
        "memory_gb": grading.DEFAULT_MEMORY_GB,
    }
    files: dict[str, Path | str] = {"setup.sh": SETUP_SH, "run_autograder": RUN_AUTOGRADER}
    files["autograder.json"] = json.dumps(config, indent=2) + "\n"
    for name in ("requirements.txt", "pyproject.toml", "LICENSE", "data/README.md"):
        files[name] = ROOT / name
    for path in sorted((ROOT / "course").rglob("*.py")):
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
    results = grade_student(
        root / "submission", templates, 1, config["timeout_s"], config["memory_gb"]
    )
    tests = [
        {
            "name": f"Exercise {r.exercise} ({Path(r.notebook).stem})",
            "score": points_of(r, points),
            "max_score": points.get(r.exercise, 1.0),
            "status": "passed" if r.passed else "failed",
            "output": f"{r.status}: {r.message}".strip(),
            "visibility": "visible",
        }
        for r in results
    ]
    report = {
        "score": sum(t["score"] for t in tests),
        "execution_time": round(time.time() - start),
        "output": f"{sum(r.passed for r in results)} of {len(results)} exercises passed.",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    (root / "results").mkdir(parents=True, exist_ok=True)
    (root / "results" / "results.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report


# --- command line --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course.classroom", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("progress", help="a student's progress table")
    p.add_argument("--dir", type=Path, default=TEMPLATES)
    p.add_argument("-j", "--jobs", type=int, default=1)
    g = sub.add_parser("grade", help="grade a folder of student folders")
    g.add_argument("--submissions", type=Path, required=True)
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--templates", type=Path, default=TEMPLATES)
    g.add_argument("-j", "--jobs", type=int, default=1)
    g.add_argument("--points", type=Path, default=None, help='JSON {"5.3": 2}; default 1 each')
    g.add_argument(
        "--timeout", type=float, default=grading.DEFAULT_TIMEOUT_S, help="s per notebook"
    )
    g.add_argument("--memory-gb", type=float, default=grading.DEFAULT_MEMORY_GB)
    s = sub.add_parser("gradescope", help="write the Gradescope autograder archive")
    s.add_argument("--out", type=Path, default=ROOT / "dist" / "autograder.zip")
    s.add_argument("--only", default="", help="notebook numbers to grade, e.g. 03,04")
    s.add_argument("--points", type=Path, default=None)
    a = sub.add_parser("autograde", help="(inside Gradescope) grade /autograder/submission")
    a.add_argument(
        "--root", type=Path, default=Path(os.environ.get("COURSE_AUTOGRADER_ROOT", "/autograder"))
    )
    args = parser.parse_args(argv)
    if args.command == "progress":
        if not notebook_paths(args.dir):
            print(f"no course notebooks (NN_name.ipynb) in {args.dir}", file=sys.stderr)
            return 2
        print(progress(args.dir, args.jobs)[2])
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
        )
        print(
            f"graded {len(graded)} submissions in {time.time() - start:.0f} s: {args.out / 'grades.csv'}"
        )
    elif args.command == "gradescope":
        only = [x.strip().zfill(2) for x in args.only.split(",") if x.strip()]
        print(f"wrote {build_gradescope(args.out, only, args.points)}")
    elif args.command == "autograde":
        report = autograde(args.root)
        print(report["output"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
