"""Output that carries no attack (issue 38, family 4): hostile names graded in one class.

One class, graded once by :func:`course.classroom.grade_class` (notebook 00 only, JOBS=2): an
honest control (0.1 right) and a wrong one (0.1 wrong) beside hand-ins whose *names* attack the
outputs. Each hostile hand-in's notebook is itself right, so each must earn exactly its point:

* ``z\\victim`` beside ``z_victim``, and ``z?victim`` (which maps to ``z_victim``'s file name):
  no crash, one feedback file each, the collision named in both rows;
* ``.hidden``: skipped, and said so on the terminal and in ``OUT/skipped.txt``;
* ``=2+5+cmd|x!A1`` and ``@SUM(A1)``: a spreadsheet never evaluates their cells;
* ``evil<ESC>[31m<LF>fake,40`` (a folder) and a zip whose entry's folder holds ``ESC[2J`` and a
  newline: no control character reaches grades.csv, the feedback or the terminal;
* a zip with two entries of one name (wrong first, right second, same time): the feedback says
  which entry was graded and a true reason.
"""

from __future__ import annotations

import csv
import io
import unicodedata
import zipfile
from pathlib import Path

import nbformat
import pytest

from course import classroom
from course.grading import names

ROOT = Path(__file__).resolve().parents[1]
HONEST = ROOT / "tests" / "fixtures" / "submissions" / "ada" / "00_welcome.ipynb"
WELCOME = "00_welcome.ipynb"
WRONG = (
    "def softmax(x, dim=-1):\n"
    "    return x.exp() / x.exp().sum(dim=dim, keepdim=True)  # overflows for large scores"
)
EVIL = "evil\x1b[31m\nfake,40"
ZIP_FOLDER = "a\x1b[2J\nb"
NAMES = {  # folder -> points its notebook earns
    "ada": 1,
    "wrong": 0,
    "z\\victim": 1,
    "z_victim": 1,
    "z?victim": 1,
    "=2+5+cmd|x!A1": 1,
    "@SUM(A1)": 1,
    EVIL: 1,
}

pytestmark = pytest.mark.slow


def _notebook(right: bool) -> bytes:
    notebook = nbformat.read(HONEST, as_version=4)
    if not right:
        cell = next(c for c in notebook.cells if "def softmax" in c.source)
        cell.source = WRONG
    return nbformat.writes(notebook).encode()


def _zip(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2026, 11, 20, 10, 0, 0))
            archive.writestr(info, data)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("outputs")
    templates = base / "templates"
    templates.mkdir()
    (templates / WELCOME).write_bytes((ROOT / "notebooks" / WELCOME).read_bytes())
    klass = base / "class"
    for folder, points in [*NAMES.items(), (".hidden", 1)]:
        (klass / folder).mkdir(parents=True)
        (klass / folder / WELCOME).write_bytes(_notebook(points == 1))
    (klass / "ansi.zip").write_bytes(_zip([(f"{ZIP_FOLDER}/{WELCOME}", _notebook(True))]))
    (klass / "twice.zip").write_bytes(
        _zip([(WELCOME, _notebook(False)), (WELCOME, _notebook(True))])
    )
    said: list[str] = []
    out = base / "out"
    results = classroom.grade_class(klass, out, templates, jobs=2, log=said.append)
    with open(out / "grades.csv", newline="", encoding="utf-8") as file:
        raw = file.read()
    rows = {row["student"]: row for row in csv.DictReader(io.StringIO(raw))}
    feedback = {p.name: p.read_text(encoding="utf-8") for p in (out / "feedback").iterdir()}
    return {
        "results": results,
        "raw": raw,
        "rows": rows,
        "said": said,
        "out": out,
        "feedback": feedback,
    }


def _controls(text: str, allowed: str = "") -> list[str]:
    return [c for c in text if unicodedata.category(c) == "Cc" and c not in allowed]


def test_the_honest_control_and_the_wrong_one_are_graded_as_alone(graded):
    assert graded["rows"]["ada"]["0.1"] == "1" and graded["rows"]["wrong"]["0.1"] == "0"


def test_every_hostile_name_earns_exactly_its_point(graded):
    rows = {names.shown(k): v for k, v in NAMES.items()}
    for student, points in rows.items():
        cell = names.csv_cell(student)
        assert graded["rows"][cell]["0.1"] == str(points), (student, graded["rows"][cell])
    assert graded["rows"]["ansi.zip"]["0.1"] == "1" and graded["rows"]["twice.zip"]["0.1"] == "1"
    assert len(graded["rows"]) == len(NAMES) + 2  # .hidden is no row: it is skipped


def test_one_feedback_file_per_student_and_collisions_named_in_both_rows(graded):
    assert len(graded["feedback"]) == len(graded["rows"])
    for student in ("z?victim", "z_victim"):
        flags = graded["rows"][student]["flags"]
        assert "file name shared with" in flags and "feedback/" in flags, flags
    assert "file name shared" not in graded["rows"]["ada"]["flags"]
    files = {graded["rows"][s]["flags"].rsplit("feedback/", 1)[1] for s in ("z?victim", "z_victim")}
    assert len(files) == 2 and files <= {f"{n}" for n in graded["feedback"]}


def test_a_skipped_folder_is_reported_on_the_terminal_and_in_out(graded):
    assert any(line.startswith("skipped: .hidden") for line in graded["said"]), graded["said"]
    assert ".hidden" in (graded["out"] / "skipped.txt").read_text(encoding="utf-8")


def test_no_cell_of_grades_csv_is_a_formula(graded):
    for row in csv.reader(io.StringIO(graded["raw"])):
        for cell in row:
            assert not cell.startswith(names.FORMULA_START) or names.NUMBER.match(cell), cell
    assert "'=2+5+cmd|x!A1" in graded["rows"] and "'@SUM(A1)" in graded["rows"]


def test_no_control_character_reaches_any_output(graded):
    lines = graded["raw"].split("\r\n")
    assert not [c for line in lines for c in _controls(line)], graded["raw"]
    for name, text in graded["feedback"].items():
        assert not _controls(name) and not _controls(text, "\n"), name
    assert not [line for line in graded["said"] if _controls(line)]
    assert names.shown(EVIL) in graded["rows"]  # escaped, still readable, one row


def test_two_zip_entries_of_one_name_say_which_was_graded_and_why(graded):
    text = next(t for n, t in graded["feedback"].items() if n.startswith("twice"))
    assert "graded `twice.zip:00_welcome.ipynb (entry 2 of 2 so named)`" in text, text
    assert "different content" in text and "same content" not in text, text
