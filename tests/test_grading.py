"""Grading, progress, release and the Gradescope archive (issue 17).

Fast tests build graded notebooks without running them. The end-to-end tests run kernels:
``test_class_*`` grade the committed fixture submissions (tests/fixtures/submissions: ada and
bob) plus students generated here from notebooks/ and solutions/, sharing one grading run; the
``slow`` ones grade all nine solution notebooks and all nine blank ones (minutes on 2 cores).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from course import classroom, grading, nbtools, release

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "submissions"
WELCOME = "00_welcome.ipynb"
TIMEOUT_S = 40  # per notebook in the class run; notebook 00 needs about 10 s on a busy CPU


def _template(name: str = WELCOME) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / name, as_version=4)


def _answer(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(c for c in notebook.cells if grading.is_answer_cell(c) and c.cell_type == "code")


def _cell(notebook: nbformat.NotebookNode, cell_id: str) -> nbformat.NotebookNode:
    return next(c for c in notebook.cells if c.id == cell_id)


def _check(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(c for c in notebook.cells if grading.check_names(c))


def _solved_source() -> str:
    solution = nbformat.read(ROOT / "solutions" / WELCOME, as_version=4)
    cell = next(c for c in solution.cells if c.id == _answer(_template()).id)
    return nbtools.strip_markers(cell.source)


# --- fast: reading and building graded notebooks ---------------------------------------------


def test_exercises_are_derived_from_every_notebook():
    ids = [
        ex
        for path in classroom.notebook_paths(ROOT / "notebooks")
        for ex, _ in grading.exercises(nbformat.read(path, as_version=4))
    ]
    assert len(ids) == len(set(ids)) > 0
    for path in classroom.notebook_paths(ROOT / "notebooks"):
        notebook = nbformat.read(path, as_version=4)
        checks = [n for c in notebook.cells for n in grading.check_names(c)]
        found = grading.exercises(notebook)
        assert [name for _, name in found] == checks
        assert all(ex.split(".")[0] == str(int(path.name[:2])) for ex, _ in found), path.name


def test_merge_takes_only_answer_cells_from_the_submission():
    template = _template()
    submission = json.loads(json.dumps(template))
    submission = nbformat.from_dict(submission)
    answer_id = _answer(template).id
    _answer(submission).source = "def softmax(x, dim=-1):\n    return 'mine'"
    _check(submission).source = "print('passed')"
    extra = nbformat.v4.new_code_cell("import os; os.system('echo hacked')")
    submission.cells.insert(0, extra)
    submission.cells.reverse()  # moved cells keep their ids
    graded = grading.merge(template, submission)
    assert [c.id for c in graded.cells] == [c.id for c in template.cells]
    assert _cell(graded, answer_id).source.endswith("return 'mine'")
    assert _check(graded).source == _check(template).source
    assert "hacked" not in json.dumps(graded)


def test_merge_falls_back_to_the_def_line_and_keeps_the_stub_when_nothing_matches():
    template = _template()
    copied = nbformat.v4.new_code_cell(_solved_source())  # a new id, as after copy-paste
    submission = nbformat.v4.new_notebook(cells=[copied])
    assert "amax" in _cell(grading.merge(template, submission), _answer(template).id).source
    empty = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    assert _answer(grading.merge(template, empty)).source == _answer(template).source


def test_needed_cells_follow_definitions_and_skip_the_rest():
    cells = [
        "# Setup\nimport torch",
        "CONFIG = {'n': 3}",
        "HELPER = 2",
        "slow = sum(range(10**9))  # a training cell no check needs",
        "CONFIG['n'] = 4",
        "def f(x):\n    # TODO: double it\n    raise NotImplementedError",
        "def g(x, HELPER=None):\n    return x * CONFIG['n']",
        "check.f(f, g)",
        "plot(slow)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    assert grading.needed_cells(notebook) == [0, 1, 4, 5, 6, 7]


def test_needed_cells_of_the_real_notebooks_skip_training():
    for path in classroom.notebook_paths(ROOT / "notebooks"):
        notebook = nbformat.read(path, as_version=4)
        needed = grading.needed_cells(notebook)
        code = [i for i, c in enumerate(notebook.cells) if c.cell_type == "code"]
        assert needed[0] == code[0]  # the setup cell
        assert len(needed) < len(code), path.name


def test_instrumented_check_cells_record_instead_of_raising():
    template = _template()
    out = grading.instrument(template, grading.needed_cells(template))
    assert out.cells[0].source == grading.RECORDER
    recorded = [c.source for c in out.cells[1:] if "__course_record__(" in c.source]
    assert recorded == ["__course_record__('softmax', check.softmax, softmax)"]


def test_unreadable_files_are_refused(tmp_path):
    (tmp_path / "x.ipynb").write_text('{"cells": [')
    with pytest.raises(ValueError, match="not a readable notebook"):
        grading.read_notebook(tmp_path / "x.ipynb")


# --- release and Gradescope (no kernels) ----------------------------------------------------


def test_release_of_03(tmp_path):
    dest = tmp_path / "class"
    release.release(dest, 3, "me/fork")
    assert not (dest / "solutions").exists()
    assert sorted(p.name[:2] for p in (dest / "notebooks").iterdir()) == ["00", "01", "02", "03"]
    nn = (dest / "course" / "nn.py").read_text()
    assert "class SelfAttention" in nn  # notebook 02's answers, by design
    for later in ("MultiHeadAttention", "split_heads", "SinusoidalPositionalEncoding", "Encoder"):
        assert later not in nn
    assert not (dest / "course" / "checks" / "nb04.py").exists()
    assert not (dest / "tests" / "test_checks_nb03.py").exists()  # it holds 03's answers
    assert not (dest / "course" / "nbtools.py").exists()
    assert (dest / "data" / "README.md").exists() and (dest / "data" / "samples").is_dir()
    readme = (dest / "README.md").read_text()
    assert "make progress" in readme and "by design" in readme
    stored = (dest / "notebooks" / "03_multi_head_attention.ipynb").read_text()
    assert "github.com/me/fork" in stored and "BEGIN SOLUTION" not in stored
    assert "transformers-hands-on/transformers-hands-on" not in stored
    # Its own package works: the released check tests pass against the released course/.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_check.py"],
        cwd=dest,
        env=dict(os.environ, PYTHONPATH=str(dest)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:]


def test_gradescope_archive_layout(tmp_path):
    archive = classroom.build_gradescope(tmp_path / "autograder.zip", only=["00", "03"])
    with zipfile.ZipFile(archive) as zipped:
        names = set(zipped.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in zipped.infolist()}
        config = json.loads(zipped.read("autograder.json"))
    assert {"setup.sh", "run_autograder", "requirements.txt", "course/grading.py"} <= names
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert config["notebooks"] == ["00_welcome.ipynb", "03_multi_head_attention.ipynb"]
    assert not any(n.startswith("solutions/") for n in names)
    assert {"notebooks/00_welcome.ipynb", "notebooks/03_multi_head_attention.ipynb"} <= names


# --- end to end: one shared class run --------------------------------------------------------


def _student(folder: Path, answer: str | None, drop_check: bool = False) -> None:
    """A student folder with notebook 00 whose answer cell holds ``answer``."""
    notebook = _template()
    if answer is not None:
        _answer(notebook).source = answer
    if drop_check:
        notebook.cells = [c for c in notebook.cells if not grading.check_names(c)]
    folder.mkdir(parents=True)
    nbformat.write(notebook, folder / WELCOME)


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """ada and bob (committed), plus: a deleted check cell, a loop, a memory bomb, a crash."""
    base = tmp_path_factory.mktemp("class")
    submissions, out = base / "submissions", base / "out"
    shutil.copytree(FIXTURES, submissions)
    _student(submissions / "cleo", _solved_source(), drop_check=True)
    _student(submissions / "dan", "while True:\n    pass")
    _student(submissions / "eve", "hog = bytearray(8 * 1024**3)")  # over the 6 GB limit
    _student(submissions / "fay", "import os\nos._exit(1)")
    (submissions / "gus.zip").write_bytes(b"PK\x03\x04 not a folder")
    start = time.time()
    graded = classroom.grade_class(submissions, out, jobs=2, timeout_s=TIMEOUT_S, memory_gb=6)
    elapsed = time.time() - start
    print(f"\nclass of {len(graded)} graded in {elapsed:.0f} s")
    with open(out / "grades.csv", encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    results = {s: {r.exercise: r for r in rs} for s, rs in graded.items()}
    return {"rows": rows, "results": results, "out": out, "elapsed": elapsed}


def test_class_grades_csv_has_every_exercise_and_a_total(graded_class):
    rows = graded_class["rows"]
    assert set(rows) == {"ada", "bob", "cleo", "dan", "eve", "fay", "gus.zip"}
    columns = list(next(iter(rows.values())))
    expected = [
        ex for _, ex in classroom.all_exercises(classroom.notebook_paths(ROOT / "notebooks"))
    ]
    assert columns == ["student", *expected, "total"]
    assert rows["ada"]["0.1"] == "1" and rows["ada"]["total"] == "1"


def test_edited_check_cell_is_graded_by_the_real_check(graded_class):
    bob = graded_class["results"]["bob"]
    assert bob["0.1"].status == grading.FAILED
    assert "NaN" in bob["0.1"].message or "differs" in bob["0.1"].message
    assert graded_class["rows"]["bob"]["total"] == "0"
    feedback = (graded_class["out"] / "feedback" / "bob.md").read_text()
    assert "Exercise 0.1" in feedback and "failed" in feedback


def test_deleted_check_cell_is_put_back(graded_class):
    assert graded_class["results"]["cleo"]["0.1"].status == grading.PASSED


def test_non_notebook_gives_an_error_row(graded_class):
    bob = graded_class["results"]["bob"]
    assert bob["1.1"].status == grading.ERROR and "not a readable notebook" in bob["1.1"].message
    gus = graded_class["results"]["gus.zip"]
    assert all(r.status == grading.ERROR for r in gus.values())
    assert graded_class["results"]["ada"]["1.1"].status == grading.MISSING


def test_infinite_loop_times_out_within_the_limit(graded_class):
    dan = graded_class["results"]["dan"]["0.1"]
    assert dan.status == grading.TIMEOUT
    assert dan.seconds < TIMEOUT_S + 30
    assert graded_class["results"]["ada"]["0.1"].status == grading.PASSED  # the rest is graded


def test_memory_bomb_and_crash_give_clear_rows(graded_class):
    eve = graded_class["results"]["eve"]["0.1"]
    assert eve.status == grading.ERROR and "MemoryError" in eve.message
    fay = graded_class["results"]["fay"]["0.1"]
    assert fay.status == grading.ERROR and "kernel died" in fay.message


def test_run_autograder_writes_results_json(tmp_path):
    archive = classroom.build_gradescope(tmp_path / "autograder.zip", only=["00"])
    root = tmp_path / "autograder"
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    shutil.copytree(FIXTURES / "ada", root / "submission" / "upload")  # uploads keep folders
    env = dict(
        os.environ, COURSE_AUTOGRADER_ROOT=str(root), COURSE_AUTOGRADER_PYTHON=sys.executable
    )
    done = subprocess.run(
        [str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((root / "results" / "results.json").read_text())
    assert report["score"] == 1
    (test,) = report["tests"]
    assert test["name"].startswith("Exercise 0.1") and test["score"] == test["max_score"] == 1
    assert "passed" in test["output"]


# --- slow: every notebook (make check runs these; make test skips them) --------------------


@pytest.fixture(scope="module")
def graded_full(tmp_path_factory):
    """The solution notebooks and the blank exercise notebooks, graded as two students."""
    submissions = tmp_path_factory.mktemp("full") / "submissions"
    shutil.copytree(ROOT / "solutions", submissions / "solutions")
    shutil.copytree(ROOT / "notebooks", submissions / "blank")
    start = time.time()
    graded = classroom.grade_class(submissions, submissions.parent / "out", jobs=2, timeout_s=600)
    print(f"\ntwo full submissions graded with -j 2 in {time.time() - start:.0f} s")
    return graded


@pytest.mark.slow
def test_solutions_score_every_exercise(graded_full):
    results = graded_full["solutions"]
    assert [(r.exercise, r.status, r.message) for r in results if not r.passed] == []
    assert len(results) == len(
        classroom.all_exercises(classroom.notebook_paths(ROOT / "notebooks"))
    )


@pytest.mark.slow
def test_blank_notebooks_score_zero_not_implemented(graded_full):
    assert {r.status for r in graded_full["blank"]} == {grading.NOT_IMPLEMENTED}


@pytest.mark.slow
@pytest.mark.parametrize("folder, expect_all", [("notebooks", False), ("solutions", True)])
def test_make_progress(folder, expect_all, tmp_path):
    copy = tmp_path / folder
    shutil.copytree(ROOT / folder, copy)
    done = subprocess.run(
        # What `make progress DIR=... JOBS=2` runs (without make's `setup` prerequisite).
        [sys.executable, "-m", "course.classroom", "progress", "--dir", str(copy), "-j", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = done.stdout.strip().splitlines()[-1]
    total = len(classroom.all_exercises(classroom.notebook_paths(copy)))
    assert last == f"passed: {total if expect_all else 0} of {total} exercises", done.stdout[-3000:]
