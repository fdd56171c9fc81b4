"""One class of notebook-00 hand-ins, graded once per test session, that every hostile test reads.

An honest control (``ada``: 0.1 right) and a wrong one (``wrong``: 0.1 wrong, the overflowing
formula) beside every hostile hand-in the collected test modules add with :func:`add`
(tests/test_grading_limits.py, tests/test_grading_outputs.py, tests/test_grading_forgeries.py),
beside hand-ins others add in their own names:
one :func:`course.classroom.grade_class` run, the way an instructor grades, instead of one run
per module each with its own controls. A module run alone grades the controls and its own part.

The run gets :data:`MEMORY_GB` for each notebook's run and :data:`JOBS` workers: the
many-cells hand-in sleeps until the notebook's bound (:func:`course.grading.engine.deadline_s`,
209 s for notebook 00) and its folder name sorts first, so it starts first and its wait overlaps
the rest of the class, graded meanwhile by the other workers.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
WELCOME = "00_welcome.ipynb"
HONEST = ROOT / "tests" / "fixtures" / "submissions" / "ada" / WELCOME
WRONG = (
    "def softmax(x, dim=-1):\n"
    "    return x.exp() / x.exp().sum(dim=dim, keepdim=True)  # overflows for large scores\n"
)
CONTROL, WRONG_ONE = "ada", "wrong"  # the controls' folders (and rows)
MEMORY_GB = 3.0  # each run's memory: enough for an honest notebook 00 (about 0.5 GB)
# One worker waits out the many-cells hand-in (asleep, no CPU) while two grade the others.
JOBS = 3


# What each test module adds: a function that writes its hand-ins into the class folder and
# returns the variables to set in the grader's environment while the class is graded.
Build = Callable[[Path], "dict[str, str] | None"]
PARTS: dict[str, Build] = {}


def add(name: str, build: Build) -> None:
    """Add a module's hand-ins to the session's class (call it when the module is imported)."""
    PARTS[name] = build


def notebook(answer: str | None = None) -> nbformat.NotebookNode:
    """The honest control's notebook 00, its softmax cell replaced by ``answer`` when given."""
    notebook = nbformat.read(HONEST, as_version=4)
    if answer is not None:
        cell = next(c for c in notebook.cells if "def softmax" in c.source)
        cell.source = answer
    return notebook


def aimed(forgery: Path, targets: dict[str, str], into: Path) -> Path:
    """``forgery`` (a notebook of tests/fixtures/forgeries) written to ``into`` with each
    ``os.environ.get("COURSE_...")`` of its code replaced by its target (``targets``: variable ->
    value). The student's environment is an allow-list that never holds those variables: an
    attack that read them would strike nothing; this one strikes where an attacker who guessed
    or searched the path would."""
    notebook = nbformat.read(forgery, as_version=4)
    for cell in notebook.cells:
        for name, value in targets.items():
            for spelled in (f'os.environ.get("{name}", "")', f'os.environ.get("{name}")'):
                cell.source = cell.source.replace(spelled, repr(value))
    into.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, into)
    return into


@dataclass
class Graded:
    """The class as graded: every trusted result and every output the run wrote or said."""

    results: dict[str, list]  # student key -> its ExerciseResult rows (grade_class's return)
    rows: dict[str, dict[str, str]]  # grades.csv, by its student cell
    raw: str  # grades.csv as written
    said: list[str]  # what the run printed on the terminal, line by line
    out: Path
    klass: Path  # the class folder
    feedback: dict[str, str]  # feedback file name -> text
    texts: list[str]  # every file OUT holds
    keys: dict[str, str]  # folder name -> the student's key (its name as every output shows it)
    written: str  # written/Question_0.2.md
    seconds: float


def grade(base: Path) -> Graded:
    """Write the controls and every part's hand-ins into one class; grade it once."""
    from course import classroom, handins
    from course.grading import kernel

    templates = base / "templates"
    templates.mkdir()
    (templates / WELCOME).write_bytes((ROOT / "notebooks" / WELCOME).read_bytes())
    klass = base / "class"
    for folder, answer in ((CONTROL, None), (WRONG_ONE, WRONG)):
        (klass / folder).mkdir(parents=True)
        nbformat.write(notebook(answer), klass / folder / WELCOME)
    env = {}
    for build in PARTS.values():
        env.update(build(klass) or {})
    said: list[str] = []
    out = base / "out"
    start = time.time()
    with pytest.MonkeyPatch.context() as patch:
        # A changed course tree is reported, never written back (this is the repository).
        patch.setenv(kernel.RESTORE_ENV, "0")
        for key, value in env.items():
            patch.setenv(key, value)
        results = classroom.grade_class(
            klass, out, templates, jobs=JOBS, memory_gb=MEMORY_GB, log=said.append
        )
    seconds = time.time() - start
    raw = (out / "grades.csv").read_bytes().decode("utf-8")  # its CRLF line ends kept
    return Graded(
        results=results,
        rows={row["student"]: row for row in csv.DictReader(io.StringIO(raw))},
        raw=raw,
        said=said,
        out=out,
        klass=klass,
        feedback={p.name: p.read_text(encoding="utf-8") for p in (out / "feedback").iterdir()},
        texts=[p.read_text(encoding="utf-8") for p in out.rglob("*") if p.is_file()],
        keys={paths[0].name: key for key, paths in handins.students(klass).items()},
        written=(out / "written" / "Question_0.2.md").read_text(encoding="utf-8"),
        seconds=seconds,
    )
