"""Finding the notebooks in a hand-in (course.handins): names, metadata, LMS downloads, zips.

All fast: no kernel runs. The notebooks here are tiny synthetic ones; what the grader does with
them is tested in tests/test_classroom.py.
"""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from course import handins
from course.framework import contract
from course.grading import limits
from course.tooling import nbtools

ROOT = Path(__file__).resolve().parents[1]
STEMS = [p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]


def _notebook(number: str | None = "01", metadata: str | None = None, stubs: int = 0) -> bytes:
    cells = [nbformat.v4.new_code_cell("# Setup\nimport torch")]
    if number is not None:
        cells.append(nbformat.v4.new_code_cell(f"from course.checks import nb{number} as check"))
    for _ in range(stubs):
        cells.append(
            nbformat.v4.new_code_cell("def f():\n    # TODO: x\n    raise NotImplementedError")
        )
    notebook = nbformat.v4.new_notebook(cells=cells)
    if metadata:
        contract.course_metadata(notebook, metadata)
    return nbformat.writes(notebook).encode()


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, stem",
    [
        ("00_welcome.ipynb", "00_welcome"),
        ("Copy of 00_welcome.ipynb", "00_welcome"),
        ("01_tokens (1).ipynb", "01_tokens"),
        ("02_Attention.ipynb", "02_attention"),
        ("01_TOKENS.IPYNB", "01_tokens"),
        ("01_tokens-1.ipynb", "01_tokens"),  # Canvas renames a second upload of the same name
        ("doeada_12345_67890_01_tokens.ipynb", "01_tokens"),  # Canvas bulk download
        ("doeada_LATE_12345_67890_02_attention.ipynb", "02_attention"),
        (
            "Ada Lovelace_1234567_assignsubmission_file_03_multi_head_attention.ipynb",
            "03_multi_head_attention",
        ),
        ("hw01_tokens.ipynb", "01_tokens"),
        ("multi-head attention.ipynb", "03_multi_head_attention"),  # no number: the name
        ("attention.ipynb", "02_attention"),
        ("notes.ipynb", None),
        ("99_extra.ipynb", None),
    ],
)
def test_file_names_are_read_tolerantly(name, stem):
    assert handins.from_file_name(name, STEMS) == stem


def test_the_generator_writes_course_metadata_that_survives_nbformat_round_trips(tmp_path):
    solution = nbformat.read(ROOT / "solutions" / "01_tokens.ipynb", as_version=4)
    exercise = nbtools.exercise_notebook(solution, "01_tokens.ipynb")
    assert exercise.metadata["course"] == {"notebook": "01_tokens"}
    # What a save by Jupyter (nbformat's writer) and an upgrade from an older minor do.
    path = tmp_path / "renamed.ipynb"
    nbformat.write(exercise, path)
    again = nbformat.read(path, as_version=4)
    nbformat.validate(again)
    nbformat.write(nbformat.v4.upgrade(again), path)
    found = handins.recognise(handins.Found("renamed.ipynb", path.read_bytes(), 0), STEMS)
    assert (found.notebook, found.how) == ("01_tokens", handins.METADATA)
    committed = nbformat.read(ROOT / "notebooks" / "01_tokens.ipynb", as_version=4)
    assert committed.metadata.get("course") == {"notebook": "01_tokens"}, "run make exercises"


def test_content_then_name_when_metadata_is_gone():
    # An editor that drops notebook metadata: the imports cell still says which notebook it is.
    found = handins.recognise(handins.Found("Untitled.ipynb", _notebook("02"), 0), STEMS)
    assert (found.notebook, found.how) == ("02_attention", handins.CONTENT)
    found = handins.recognise(handins.Found("01_tokens.ipynb", _notebook(None), 0), STEMS)
    assert (found.notebook, found.how) == ("01_tokens", handins.FILE_NAME)
    broken = handins.recognise(handins.Found("01_tokens.ipynb", b'{"cells": [', 0), STEMS)
    assert broken.notebook == "01_tokens" and not broken.readable


# --- the same notebook twice -----------------------------------------------------------------


def test_two_copies_the_newest_is_graded_and_the_feedback_says_why():
    old = handins.Found("ada/01_tokens.ipynb", _notebook(metadata="01_tokens"), 1_000)
    new = handins.Found("ada/01_tokens (1).ipynb", _notebook(), 2_000)
    handin = handins.choose([old, new], STEMS)
    assert handin.chosen["01_tokens"] is new
    note = handin.notes["01_tokens"]
    assert "2 files are notebook 01_tokens" in note and "`ada/01_tokens.ipynb`" in note
    assert "newest modification" in note


def test_content_beats_a_name_and_a_notebook_beats_a_broken_file():
    named_only = handins.Found("01_tokens_scratch.ipynb", _notebook(None), 9_000)
    real = handins.Found("Untitled.ipynb", _notebook("01"), 1_000)
    broken = handins.Found("01_tokens.ipynb", b"not json", 10_000)
    handin = handins.choose([named_only, real, broken], STEMS)
    assert handin.chosen["01_tokens"] is real
    assert "readable notebook comes before" in handin.notes["01_tokens"]
    handin = handins.choose([named_only, real], STEMS)
    assert "recognised by its content" in handin.notes["01_tokens"]


def test_same_time_fewer_stubs_left_wins():
    blank = handins.Found("a/01_tokens.ipynb", _notebook(stubs=3), 5)
    done = handins.Found("b/01_tokens.ipynb", _notebook(stubs=1), 5)
    handin = handins.choose([blank, done], STEMS)
    assert (
        handin.chosen["01_tokens"] is done and "fewer unanswered stubs" in handin.notes["01_tokens"]
    )


def test_unrecognised_notebooks_are_listed_not_graded():
    handin = handins.choose([handins.Found("scratch.ipynb", _notebook(None), 0)], STEMS)
    assert handin.chosen == {} and handin.ignored == ["scratch.ipynb"]


# --- folders, LMS downloads and zips ---------------------------------------------------------


def test_class_folders_canvas_and_moodle_downloads_are_grouped_per_student(tmp_path):
    (tmp_path / "ada" / "deep" / "er").mkdir(parents=True)
    (tmp_path / "ada" / "deep" / "er" / "01_tokens.ipynb").write_bytes(_notebook())
    for name in (
        "doeada_12345_67890_00_welcome.ipynb",
        "doeada_LATE_12345_67891_01_tokens.ipynb",
        "roebob_222_333_01_tokens.ipynb",
        "Cleo Smith_1234567_assignsubmission_file_01_tokens.ipynb",
        "gus.zip",
    ):
        (tmp_path / name).write_bytes(_notebook(None))  # known by their names only
    (tmp_path / "Dan Brown_7654321_assignsubmission_file_").mkdir()
    (tmp_path / "Dan Brown_7654321_assignsubmission_onlinetext_").mkdir()
    (tmp_path / "__MACOSX").mkdir()
    (tmp_path / ".DS_Store").write_text("")
    groups = handins.students(tmp_path)
    assert sorted(groups) == [
        "Cleo Smith_1234567",
        "Dan Brown_7654321",
        "ada",
        "doeada_12345",
        "gus.zip",
        "roebob_222",
    ]
    assert len(groups["doeada_12345"]) == 2 and len(groups["Dan Brown_7654321"]) == 2
    handin = handins.read_handin("doeada_12345", groups["doeada_12345"], tmp_path, STEMS)
    assert set(handin.chosen) == {"00_welcome", "01_tokens"}
    ada = handins.read_handin("ada", groups["ada"], tmp_path, STEMS)
    assert ada.chosen["01_tokens"].where == "ada/deep/er/01_tokens.ipynb"


def test_checkpoints_and_hidden_folders_are_skipped(tmp_path):
    (tmp_path / "ada" / ".ipynb_checkpoints").mkdir(parents=True)
    (tmp_path / "ada" / ".ipynb_checkpoints" / "01_tokens-checkpoint.ipynb").write_bytes(
        _notebook()
    )
    handin = handins.read_handin("ada", [tmp_path / "ada"], tmp_path, STEMS)
    assert handin.chosen == {} and handin.problems == []


def test_zips_inside_a_folder_as_the_whole_hand_in_and_nested(tmp_path):
    inner = _zip({"hw/02_attention.ipynb": _notebook("02")})
    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / "work.zip").write_bytes(
        _zip({"00_welcome.ipynb": _notebook("00"), "more.zip": inner, "__MACOSX/._x.ipynb": b"x"})
    )
    (tmp_path / "bob.zip").write_bytes(_zip({"bob/01_tokens.ipynb": _notebook("01")}))
    ada = handins.read_handin("ada", [tmp_path / "ada"], tmp_path, STEMS)
    assert sorted(ada.chosen) == ["00_welcome", "02_attention"]
    assert ada.chosen["02_attention"].where == "ada/work.zip:more.zip:hw/02_attention.ipynb"
    bob = handins.read_handin("bob.zip", [tmp_path / "bob.zip"], tmp_path, STEMS)
    assert list(bob.chosen) == ["01_tokens"] and bob.problems == []


def test_zip_entries_with_absolute_paths_or_dot_dot_are_refused(tmp_path):
    data = _zip(
        {
            "/etc/00_welcome.ipynb": _notebook("00"),
            "../../01_tokens.ipynb": _notebook("01"),
            "ok/02_attention.ipynb": _notebook("02"),
        }
    )
    (tmp_path / "eve.zip").write_bytes(data)
    eve = handins.read_handin("eve", [tmp_path / "eve.zip"], tmp_path, STEMS)
    assert list(eve.chosen) == ["02_attention"]
    assert len(eve.problems) == 2 and all("refused" in p for p in eve.problems)
    assert not (tmp_path.parent / "01_tokens.ipynb").exists()


def test_zip_bombs_and_broken_zips_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(handins, "MAX_BYTES", 2 * 1024**2)
    bomb = _zip({f"{i:02d}_x.ipynb": b"0" * 1024**2 for i in range(5)})  # 5 MB in a few KB
    assert len(bomb) < 50_000
    (tmp_path / "bomb.zip").write_bytes(bomb)
    handin = handins.read_handin("x", [tmp_path / "bomb.zip"], tmp_path, STEMS)
    assert any("inflates to more than the limit" in p for p in handin.problems)
    monkeypatch.setattr(handins, "MAX_ENTRIES", 3)
    (tmp_path / "many.zip").write_bytes(_zip({f"n{i}.ipynb": b"{}" for i in range(4)}))
    handin = handins.read_handin("x", [tmp_path / "many.zip"], tmp_path, STEMS)
    assert any("4 entries" in p for p in handin.problems)
    (tmp_path / "gus.zip").write_bytes(b"PK\x03\x04 not a zip")
    handin = handins.read_handin("gus.zip", [tmp_path / "gus.zip"], tmp_path, STEMS)
    assert handin.problems == ["`gus.zip` is not a readable zip file"]


def test_zips_nested_too_deep_are_refused(tmp_path):
    data = _zip({"01_tokens.ipynb": _notebook("01")})
    for _ in range(handins.MAX_DEPTH):
        data = _zip({"inner.zip": data})
    (tmp_path / "deep.zip").write_bytes(data)
    handin = handins.read_handin("x", [tmp_path / "deep.zip"], tmp_path, STEMS)
    assert handin.chosen == {} and any("nested" in p for p in handin.problems)


def test_links_in_a_hand_in_are_not_followed(tmp_path):
    secret = tmp_path / "secret.ipynb"
    secret.write_bytes(_notebook("00"))
    (tmp_path / "ada").mkdir()
    os.symlink(secret, tmp_path / "ada" / "00_welcome.ipynb")
    handin = handins.read_handin("ada", [tmp_path / "ada"], tmp_path, STEMS)
    assert handin.chosen == {} and any("a link" in p for p in handin.problems)


# --- bounds, nbformat 3 (course.grading.limits) ------------------------------------------------


def chained(cells: int, stem: str | None = "00_welcome") -> bytes:
    """A hostile notebook: ``cells`` code cells, each using the one before."""
    sources = ["x0 = 1", *(f"x{i} = x{i - 1} + 1" for i in range(1, cells))]
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"course": {"notebook": stem}} if stem else {},
        "cells": [
            {"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": s, "outputs": []}
            | {"execution_count": None}
            for i, s in enumerate(sources)
        ],
    }
    return json.dumps(notebook).encode()


def test_a_notebook_over_the_bounds_is_refused_with_its_size_in_seconds(tmp_path):
    (tmp_path / "hw.ipynb").write_bytes(chained(150_000))  # recognised by its metadata still
    start = time.process_time()
    handin = handins.read_handin("mallory", [tmp_path / "hw.ipynb"], tmp_path, STEMS)
    assert time.process_time() - start < 30  # about 1 s on a busy 2-core machine
    found = handin.chosen["00_welcome"]
    assert (
        not found.readable
        and found.problem == "hw.ipynb is too large: 150,000 cells (at most 1,000)"
    )
    assert "too large: 150,000 cells" in handin.notes["00_welcome"]
    big = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1\n" * 20_000)])
    with pytest.raises(limits.NotebookRefused, match="cell 1 holds 120,000 characters"):
        limits.normalise(nbformat.writes(big).encode(), "big.ipynb")
    many = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("y = 2\n" * 16_000) for _ in range(12)]
    )
    with pytest.raises(limits.NotebookRefused, match="1,152,000 characters in its cells"):
        limits.normalise(nbformat.writes(many).encode(), "many.ipynb")


def test_outputs_are_dropped_when_a_notebook_is_read(tmp_path):
    notebook = nbformat.reads(_notebook("01").decode(), as_version=4)
    figure = {"image/png": "iVBORw0KGgo" * 100_000}  # a 1 MB figure
    notebook.cells[0].outputs = [nbformat.v4.new_output("display_data", data=figure)]
    (tmp_path / "01_tokens.ipynb").write_text(nbformat.writes(notebook))
    found = handins.read_handin("ada", [tmp_path], tmp_path, STEMS).chosen["01_tokens"]
    assert found.readable and len(found.data) < 10_000
    assert json.loads(found.data)["cells"][0]["outputs"] == []


def test_an_nbformat_3_notebook_is_converted_and_its_note_says_nothing_false(tmp_path):
    v4 = nbformat.reads(_notebook("01", stubs=1).decode(), as_version=4)
    (tmp_path / "01_tokens.ipynb").write_text(nbformat.writes(nbformat.convert(v4, 3), version=3))
    handin = handins.read_handin("old", [tmp_path], tmp_path, STEMS)
    found = handin.chosen["01_tokens"]
    assert found.readable and found.how == handins.CONTENT and found.stubs_left == 1
    converted = json.loads(found.data)
    assert converted["nbformat"] == 4 and "def f():" in "".join(converted["cells"][2]["source"])
    assert "not a readable" not in handin.notes.get("01_tokens", "")
    (tmp_path / "01_tokens.ipynb").write_text(json.dumps({"nbformat": 2, "cells": []}))
    refused = handins.read_handin("older", [tmp_path], tmp_path, STEMS).chosen["01_tokens"]
    assert not refused.readable and "nbformat 2" in refused.problem
