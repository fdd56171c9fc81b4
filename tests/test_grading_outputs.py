"""Output that carries no attack: hostile names graded in one class.

The session's one class of notebook-00 hand-ins (tests/hostile.py), graded once by
:func:`course.classroom.grade_class`: an honest control (0.1 right) and a wrong one (0.1 wrong)
beside hand-ins whose *names* attack the outputs, and the other hostile modules' hand-ins, whose
outputs are held to the same rules. Each hostile name's notebook is itself right, so each must
earn exactly its point:

* ``z\\victim`` beside ``z_victim``, and ``z?victim`` beside ``z*victim`` (one file name):
  no crash, one feedback file each, the collision named in both rows;
* ``.hidden``: skipped, and said so on the terminal and in ``OUT/skipped.txt``;
* ``=2+5+cmd|x!A1`` and ``@SUM(A1)``: a spreadsheet never evaluates their cells;
* ``evil<ESC>[31m<LF>fake,40`` (a folder) and a zip whose entry's folder holds ``ESC[2J`` and a
  newline: no control character reaches grades.csv, the feedback or the terminal;
* a zip with two entries of one name (wrong first, right second, same time): the feedback says
  which entry was graded and a true reason;
* ``z_victim`` followed by a zero-width space, and ``z_victim`` with a Cyrillic ``i``: told
  apart from ``z_victim`` in every output (no row, file or section shows as another), each
  keeping its point;
* ``ann;=1+1``: no formula where a spreadsheet splits on ``;``; its written answer holds a line
  ``## z_victim``, which opens no section of ``written/Question_0.2.md``;
* a name holding U+2029: escaped in grades.csv, the feedback, the written answers and the log.

A class zip whose entries are refused (a link, ``..``, an absolute path, a drive letter) says so
for each, on the terminal and in ``OUT/skipped.txt``, and each such student gets a row that says
why, beside an honest classmate who keeps the point.
"""

from __future__ import annotations

import csv
import io
import stat
import unicodedata
import zipfile
from pathlib import Path

import nbformat
import pytest

from course import classroom
from course.grading import names
from tests import hostile
from tests.hostile import CONTROL, WELCOME, WRONG, WRONG_ONE

ROOT = Path(__file__).resolve().parents[1]
EVIL = "evil\x1b[31m\nfake,40"
ZIP_FOLDER = "a\x1b[2J\nb"
POSER = "z_victim\u200b"  # shows as z_victim
HOMOGLYPH = "z_v\u0456ctim"  # a Cyrillic i: shows as z_victim, and nothing in it is escaped
SEMICOLON = "ann;=1+1"
PARAGRAPH = "para\u2029graph"
FORGED = "mine, in my own words\n## z_victim\nthe victim's answer, forged"
INVISIBLE = ("Cf", "Zl", "Zp")  # format characters, line and paragraph separators
NAMES = {  # folder -> points its notebook earns (the controls, with a written answer here)
    CONTROL: 1,
    WRONG_ONE: 0,
    "z\\victim": 1,
    "z_victim": 1,
    "z?victim": 1,
    "z*victim": 1,  # its file name is z?victim's
    "=2+5+cmd|x!A1": 1,
    "@SUM(A1)": 1,
    EVIL: 1,
    POSER: 1,
    HOMOGLYPH: 1,
    SEMICOLON: 1,
    PARAGRAPH: 1,
}

pytestmark = pytest.mark.slow


def _notebook(right: bool, answer: str = "") -> bytes:
    notebook = hostile.notebook(None if right else WRONG)
    if answer:  # the written answer to Question 0.2, in the template's cell
        template = nbformat.read(ROOT / "notebooks" / WELCOME, as_version=4)
        cell = next(c for c in template.cells if c.source.startswith("### Question 0.2"))
        cell.source = cell.source.split("**Your answer:**")[0] + f"**Your answer:** {answer}"
        notebook.cells.append(cell)
    return nbformat.writes(notebook).encode()


def _zip(entries: list[tuple[str, bytes]], links: tuple[str, ...] = ()) -> bytes:
    """A zip of ``entries``; those named in ``links`` stored as symbolic links."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2026, 11, 20, 10, 0, 0))
            if name in links:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def _templates(base: Path) -> Path:
    """A templates folder holding notebook 00 alone."""
    templates = base / "templates"
    templates.mkdir()
    (templates / WELCOME).write_bytes((ROOT / "notebooks" / WELCOME).read_bytes())
    return templates


def _build(klass: Path) -> None:
    for folder, points in [*NAMES.items(), (".hidden", 1)]:
        (klass / folder).mkdir(exist_ok=True)  # the controls' folders: hostile.py's, rewritten
        answer = FORGED if folder == SEMICOLON else "the victim's own answer"
        (klass / folder / WELCOME).write_bytes(_notebook(points == 1, answer))
    (klass / "ansi.zip").write_bytes(_zip([(f"{ZIP_FOLDER}/{WELCOME}", _notebook(True))]))
    (klass / "twice.zip").write_bytes(
        _zip([(WELCOME, _notebook(False)), (WELCOME, _notebook(True))])
    )


hostile.add("outputs", _build)


@pytest.fixture(scope="module")
def graded(hostile_class):
    return {
        "results": hostile_class.results,
        "raw": hostile_class.raw,
        "rows": hostile_class.rows,
        "said": hostile_class.said,
        "out": hostile_class.out,
        "class": hostile_class.klass,
        "feedback": hostile_class.feedback,
        "keys": hostile_class.keys,  # folder -> the student's key (its name as every output shows)
        "written": hostile_class.written,
    }


def _controls(text: str, allowed: str = "") -> list[str]:
    return [c for c in text if unicodedata.category(c) == "Cc" and c not in allowed]


def test_the_honest_control_and_the_wrong_one_are_graded_as_alone(graded):
    assert graded["rows"][CONTROL]["0.1"] == "1" and graded["rows"][WRONG_ONE]["0.1"] == "0"


def test_every_hostile_name_earns_exactly_its_point(graded):
    rows = {graded["keys"][k]: v for k, v in NAMES.items()}
    for student, points in rows.items():
        cell = names.csv_cell(student)
        assert graded["rows"][cell]["0.1"] == str(points), (student, graded["rows"][cell])
    assert graded["rows"]["ansi.zip"]["0.1"] == "1" and graded["rows"]["twice.zip"]["0.1"] == "1"
    entries = [p.name for p in graded["class"].iterdir()]  # the other modules' hand-ins too
    assert ".hidden" in entries and ".hidden" not in graded["keys"]
    assert len(graded["rows"]) == len(entries) - 1  # every folder and zip a row, .hidden none


def test_one_feedback_file_per_student_and_collisions_named_in_both_rows(graded):
    assert len(graded["feedback"]) == len(graded["rows"])
    for student in ("z?victim", "z*victim"):
        flags = graded["rows"][student]["flags"]
        assert "file name shared with" in flags and "feedback/" in flags, flags
    assert "file name shared" not in graded["rows"][CONTROL]["flags"]
    files = {graded["rows"][s]["flags"].rsplit("feedback/", 1)[1] for s in ("z?victim", "z*victim")}
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


def test_names_that_show_alike_are_told_apart_in_every_output(graded):
    poser, victim = graded["keys"][POSER], graded["keys"]["z_victim"]
    homoglyph = graded["keys"][HOMOGLYPH]
    assert len({poser, victim, homoglyph}) == 3, (poser, victim, homoglyph)
    assert "z_victim" not in graded["rows"] and HOMOGLYPH not in graded["rows"], graded["rows"]
    for key in (poser, victim, homoglyph):
        assert "shows like another name" in key and graded["rows"][key]["0.1"] == "1", key
        assert graded["written"].count(f"## {key}\n") == 1
        assert any(text.startswith(f"# Feedback for {key}\n") for text in graded["feedback"].values())
    assert "\\u200b" in poser  # the hidden character shown, escaped


def test_no_cell_is_a_formula_where_a_spreadsheet_splits_on_semicolons(graded):
    lines = graded["raw"].splitlines()
    assert all(line.startswith('"') and line.endswith('"') for line in lines), lines[:3]
    for row in csv.reader(io.StringIO(graded["raw"]), delimiter=";"):
        for cell in row:
            assert not cell.startswith(names.FORMULA_START) or names.NUMBER.match(cell), cell
    assert graded["rows"][SEMICOLON]["0.1"] == "1"


def test_an_answer_cannot_open_a_section_of_the_written_answers(graded):
    sections = [line for line in graded["written"].splitlines() if line.startswith("## ")]
    assert len(sections) == len(graded["rows"]), sections  # one per student, none forged
    assert "> \\## z_victim" in graded["written"], graded["written"]
    assert "> the victim's answer, forged" in graded["written"]


def test_no_invisible_or_separator_character_reaches_any_output(graded):
    texts = [graded["raw"], graded["written"], *graded["feedback"].values(), *graded["said"]]
    for text in texts:
        hidden = [c for c in text if unicodedata.category(c) in INVISIBLE]
        assert not hidden, (hidden, text[:200])
    assert names.shown(PARAGRAPH) in graded["rows"] and "\\u2029" in names.shown(PARAGRAPH)


REFUSED = {  # a class zip's entry -> the student it belongs to, whose only notebook it is
    f"bob/{WELCOME}": "bob",  # a link
    f"../carl/{WELCOME}": "carl",
    f"/dave/{WELCOME}": "dave",
    f"C:/erin/{WELCOME}": "erin",
    f"C:\\fred\\{WELCOME}": "fred",
}


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    base = tmp_path_factory.mktemp("refused")
    templates = _templates(base)
    entries = [(name, _notebook(True)) for name in [f"ada/{WELCOME}", *REFUSED]]
    (base / "class.zip").write_bytes(_zip(entries, links=(f"bob/{WELCOME}",)))
    said: list[str] = []
    out = base / "out"
    classroom.grade_class(base / "class.zip", out, templates, log=said.append)
    with open(out / "grades.csv", newline="", encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    feedback = {
        p.stem: p.read_text(encoding="utf-8") for p in (out / "feedback").iterdir()
    }
    skipped = (out / "skipped.txt").read_text(encoding="utf-8")
    return {"said": said, "rows": rows, "skipped": skipped, "feedback": feedback}


def test_every_refused_entry_of_a_class_zip_is_said_and_its_student_has_a_row(refused):
    assert refused["rows"]["ada"]["0.1"] == "1"  # the honest classmate keeps the point
    for entry, student in REFUSED.items():
        shown = names.shown(entry)
        assert any(shown in line and "refused" in line for line in refused["said"]), entry
        assert shown in refused["skipped"], (entry, refused["skipped"])
        row = refused["rows"][student]
        assert row["0.1"] == "0" and row["total"] == "0", row
        why = refused["feedback"][student]  # the row's feedback says which entry, and why
        assert shown in why and "refused" in why, why
