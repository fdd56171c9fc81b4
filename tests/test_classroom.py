"""make progress / make grade / written answers / MANUAL and POINTS / release / Gradescope.

Fast tests replace the engine (``grading.grade_file``) by a stand-in that reads a marker in the
submitted file, so they test what this layer decides (which file, which columns, which points)
in milliseconds. The ``slow`` tests grade the class scenarios with the real engine, each a
hand-in built here from notebooks/ and solutions/ with its expected grade, and check that
``progress`` gives the same verdicts on the same folders.
"""

from __future__ import annotations

import copy
import csv
import io
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

from course import classroom, grading
from course.framework.contract import ERROR, FAILED, MISSING, NOT_IMPLEMENTED, PASSED, TIMEOUT
from course.grading import ExerciseResult
from course.tooling import nbtools, release

ROOT = Path(__file__).resolve().parents[1]
WELCOME, TOKENS, ATTENTION = "00_welcome.ipynb", "01_tokens.ipynb", "02_attention.ipynb"


def _template(name: str = WELCOME) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / name, as_version=4)


def _solution_code(name: str, cell_id: str) -> str:
    solution = nbformat.read(ROOT / "solutions" / name, as_version=4)
    return nbtools.strip_markers(next(c for c in solution.cells if c.id == cell_id).source)


def _answer_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [
        c
        for c in notebook.cells
        if c.cell_type == "code" and "raise NotImplementedError" in c.source
    ]


def _solved(name: str) -> nbformat.NotebookNode:
    """The exercise notebook with every answer cell taken from the solution."""
    notebook = _template(name)
    for cell in _answer_cells(notebook):
        cell.source = _solution_code(name, cell.id)
    return notebook


def _question(notebook: nbformat.NotebookNode, qid: str) -> nbformat.NotebookNode:
    return next(c for c in notebook.cells if f"Question {qid}" in c.source)


def _write(notebook: nbformat.NotebookNode, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture(scope="module", autouse=True)
def _no_restore():
    """As in test_grading: report a changed course tree, never write it back (other work may be
    editing the repository while these tests run); the restore itself is tested there."""
    from course.grading import kernel

    before = os.environ.get(kernel.RESTORE_ENV)
    os.environ[kernel.RESTORE_ENV] = "0"
    yield
    if before is None:
        os.environ.pop(kernel.RESTORE_ENV, None)
    else:
        os.environ[kernel.RESTORE_ENV] = before


# --- fast: a stand-in engine -----------------------------------------------------------------


@pytest.fixture
def templates(tmp_path):
    folder = tmp_path / "templates"
    folder.mkdir()
    for name in (WELCOME, TOKENS):
        shutil.copy(ROOT / "notebooks" / name, folder / name)
    return folder


@pytest.fixture
def fake_engine(monkeypatch):
    """grade_file stand-in: passed where the file says PASS, else not implemented."""
    calls = []

    def grade_file(template, submission, timeout_s=None, memory_gb=None, threads=1, seed=0):
        calls.append((Path(template).name, submission, timeout_s))
        notebook = nbformat.read(template, as_version=4)
        if submission is None:
            return grading.unreadable(notebook, Path(template).name, MISSING, "not submitted")
        status = PASSED if "PASS" in Path(submission).read_text() else NOT_IMPLEMENTED
        return [
            ExerciseResult(Path(template).name, ex, check, status, f"{status} here")
            for ex, check in grading.exercises(notebook)
        ]

    monkeypatch.setattr(grading, "grade_file", grade_file)
    return calls


def _student_00(folder: Path, passed: bool, answer: str | None = None, name: str = WELCOME):
    notebook = _template()
    if passed:
        _answer_cells(notebook)[0].source += "\n# PASS"
    if answer is not None:
        cell = _question(notebook, "0.2")
        cell.source = cell.source.replace(
            classroom.ANSWER_PLACEHOLDER, f"**Your answer:** {answer}"
        )
    return _write(notebook, folder / name)


def test_points_file_with_a_typo_is_an_error_that_names_it(tmp_path, templates, fake_engine):
    points = tmp_path / "points.json"
    points.write_text(json.dumps({"0.1": 2, "1.11": 3}))
    with pytest.raises(classroom.ConfigError, match=r"'1\.11' \(did you mean '1\.1'\?\)"):
        classroom.grade_class(tmp_path, tmp_path / "out", templates, points_file=points)
    assert fake_engine == []  # refused before anything was graded
    done = subprocess.run(
        [sys.executable, "-m", "course.classroom", "grade", "--submissions", str(tmp_path)]
        + ["--out", str(tmp_path / "out"), "--templates", str(templates), "--points", str(points)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "1.11" in done.stderr and not (tmp_path / "out").exists()


def test_manual_file_naming_an_unknown_exercise_or_student_is_an_error(tmp_path, templates):
    known = classroom.columns(classroom.notebook_paths(templates))
    assert known == ["0.1", "0.2", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6"][: len(known)]
    manual = tmp_path / "manual.csv"
    manual.write_text("student,0.2,Question 1.6\nada,1,0.5\n")
    assert classroom.load_manual(manual, known, ["ada"]) == {"ada": {"0.2": 1.0, "1.6": 0.5}}
    manual.write_text("student,0.3\nada,1\n")
    with pytest.raises(classroom.ConfigError, match=r"'0\.3'"):
        classroom.load_manual(manual, known, ["ada"])
    manual.write_text("student,0.2\nadda,1\n")
    with pytest.raises(classroom.ConfigError, match=r"no student 'adda' \(did you mean 'ada'\?\)"):
        classroom.load_manual(manual, known, ["ada"])
    manual.write_text("student,0.2\nada,good\n")
    with pytest.raises(classroom.ConfigError, match="'good' for 0.2 is not a number"):
        classroom.load_manual(manual, known, ["ada"])


def test_grade_writes_written_answers_and_merges_manual_points(tmp_path, templates, fake_engine):
    subs = tmp_path / "subs"
    _student_00(subs / "ada", passed=True, answer="The softmax saturates; gradients vanish.")
    bob = _template()
    index = bob.cells.index(_question(bob, "0.2"))
    bob.cells.insert(index + 1, nbformat.v4.new_markdown_cell("It becomes one-hot."))
    _write(bob, subs / "bob" / WELCOME)
    _student_00(subs / "cleo", passed=False)
    manual = tmp_path / "manual.csv"
    manual.write_text("student,0.2\nada,1\nbob,0.5\n")
    points = tmp_path / "points.json"
    points.write_text('{"0.1": 2, "0.2": 1}')
    out = tmp_path / "out"
    classroom.grade_class(
        subs, out, templates, points_file=points, manual_file=manual, timeout_s=7, log=lambda _: 0
    )
    assert {timeout for *_, timeout in fake_engine} == {7}  # TIMEOUT reaches the engine
    with open(out / "grades.csv", encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    assert list(rows["ada"])[:3] == ["student", "0.1", "0.2"] and "1.6" in rows["ada"]
    assert (rows["ada"]["0.1"], rows["ada"]["0.2"], rows["ada"]["total"]) == ("2", "1", "3")
    assert (rows["bob"]["0.2"], rows["bob"]["total"]) == ("0.5", "0.5")
    assert (rows["cleo"]["0.2"], rows["cleo"]["1.6"]) == ("", "")  # not graded by hand yet
    question = (out / "written" / "Question_0.2.md").read_text()
    assert "## ada\n\n> The softmax saturates; gradients vanish." in question  # quoted: an
    assert "## bob\n\n> It becomes one-hot." in question  # answer never opens a section
    assert "## cleo\n\n> *(no answer)*" in question
    assert "softmax's output" in question  # the prompt, to grade against
    assert (out / "written" / "Question_1.6.md").exists()
    ada = (out / "feedback" / "ada.md").read_text()
    assert "**Total: 3 of" in ada and "**Question 0.2** (written, 1 of 1)" in ada
    assert "gradients vanish" in ada
    cleo = (out / "feedback" / "cleo.md").read_text()
    assert (
        "still to be graded by hand" in cleo and "**Question 0.2** (written, to be graded)" in cleo
    )


def test_progress_and_grade_read_a_folder_the_same_way(tmp_path, templates, fake_engine):
    subs = tmp_path / "subs"
    _student_00(subs / "ada", passed=True, name="Copy of 00_welcome.ipynb")
    old = _student_00(subs / "ada" / "old", passed=False)
    os.utime(old, (1e9, 1e9))  # older: the copy is graded
    blank = nbformat.writes(_template(TOKENS)).encode()
    (subs / "ada" / "work.zip").write_bytes(_zip({"01_tokens.ipynb": blank}))
    graded = classroom.grade_class(subs, tmp_path / "out", templates, log=lambda _: 0)
    passed, total, table = classroom.progress(subs / "ada", templates_dir=templates)
    by_grade = {(r.exercise, r.status) for r in graded["ada"]}
    shown = {tuple(line.split()[1:3]) for line in table.splitlines()[2:] if line[:2].isdigit()}
    assert {(ex, s.split()[0]) for ex, s in by_grade} == {
        (ex, {"✅": "passed", "⏳": "not", "❌": "error"}[icon]) for ex, icon in shown
    }
    assert passed == 1 and total == len(graded["ada"])
    assert "note: 00_welcome: 2 files are notebook 00_welcome" in table
    feedback = (tmp_path / "out" / "feedback" / "ada.md").read_text()
    assert (
        "graded `ada/Copy of 00_welcome.ipynb`" in feedback and "not graded: `ada/old/" in feedback
    )


def test_a_class_zip_with_canvas_names(tmp_path, templates, fake_engine):
    canvas = _zip(
        {
            "doeada_12345_67890_00_welcome.ipynb": _student_00(tmp_path / "a", True).read_bytes(),
            "roebob_LATE_2222_3333_hw.zip": _zip(
                {"hw/00_welcome.ipynb": _student_00(tmp_path / "b", False).read_bytes()}
            ),
        }
    )
    (tmp_path / "submissions.zip").write_bytes(canvas)
    graded = classroom.grade_class(
        tmp_path / "submissions.zip", tmp_path / "out", templates, log=lambda _: 0
    )
    assert {s: graded[s][0].status for s in graded} == {
        "doeada_12345": PASSED,
        "roebob_2222": NOT_IMPLEMENTED,
    }


def test_an_unreadable_zip_gives_error_rows_that_say_so(tmp_path, templates, fake_engine):
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "gus.zip").write_bytes(b"PK\x03\x04 not a zip")
    graded = classroom.grade_class(tmp_path / "subs", tmp_path / "out", templates, log=print)
    assert {r.status for r in graded["gus.zip"]} == {"error"}
    assert "not a readable zip file" in graded["gus.zip"][0].message


def test_one_rule_gives_the_feedback_grades_csv_and_results_json_the_same_points(
    tmp_path, templates, monkeypatch
):
    # Points come from one rule for every output (classroom and results.json); a flagged pass reads
    # as a plain "passed". Now course.grading.points.decide is the one rule all three follow.
    def grade_file(template, submission, timeout_s=None, memory_gb=None, threads=1, seed=0):
        notebook = nbformat.read(template, as_version=4)
        if submission is None:
            return grading.unreadable(notebook, Path(template).name, MISSING, "not submitted")
        text = Path(submission).read_text()
        status = PASSED if "PASS" in text else FAILED
        flags = (
            ["the grader's course files changed while this notebook ran"] if "FLAG" in text else []
        )
        return [
            ExerciseResult(Path(template).name, ex, check, status, f"{status} here", flags=flags)
            for ex, check in grading.exercises(notebook)
        ]

    monkeypatch.setattr(grading, "grade_file", grade_file)
    subs, out = tmp_path / "subs", tmp_path / "out"
    _student_00(subs / "ada", passed=True)
    flagged = _student_00(subs / "eve", passed=True)
    flagged.write_text(flagged.read_text().replace("# PASS", "# PASS FLAG"))
    _student_00(subs / "bob", passed=False)
    points = tmp_path / "points.json"
    points.write_text('{"0.1": 3}')
    classroom.grade_class(subs, out, templates, points_file=points, log=lambda _: 0)
    with open(out / "grades.csv", encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    assert list(rows["ada"])[-2:] == ["total", "flags"]
    assert rows["eve"]["flags"] == "0.1: the grader's course files changed while this notebook ran"
    assert rows["ada"]["flags"] == rows["bob"]["flags"] == ""
    for student in ("ada", "eve", "bob"):
        results = [r for r in grade_file(templates / WELCOME, next((subs / student).glob("*")))]
        report = grading.gradescope_report(results, {"0.1": 3})
        text = (out / "feedback" / f"{student}.md").read_text()
        total = float(rows[student]["total"])
        assert report["score"] == float(rows[student]["0.1"]) == total - 0  # nothing by hand
        assert f"**Total: {total:g} of" in text
    eve = (out / "feedback" / "eve.md").read_text()
    assert "**Exercise 0.1** (passed, 3 of 3; ⚠️ flagged:" in eve and "Flagged for your" in eve
    (test,) = grading.gradescope_report(grade_file(templates / WELCOME, flagged), {"0.1": 3})[
        "tests"
    ]
    assert test["output"].startswith("⚠️ flagged for the instructor")


def test_a_hostile_notebook_gets_a_too_large_row_in_seconds_and_the_class_is_graded(
    tmp_path, templates, fake_engine
):
    from test_handins import chained  # noqa: PLC0415 - the same hostile notebook

    subs = tmp_path / "subs"
    _student_00(subs / "ada", passed=True)
    (subs / "mallory").mkdir()
    (subs / "mallory" / WELCOME).write_bytes(chained(150_000))
    _student_00(subs / "zoe", passed=True)
    start = time.process_time()
    graded = classroom.grade_class(subs, tmp_path / "out", templates, log=lambda _: 0)
    assert time.process_time() - start < 60  # a few seconds on a busy 2-core machine
    assert [r.status for r in graded["ada"] if r.notebook == WELCOME] == [PASSED]
    assert [r.status for r in graded["zoe"] if r.notebook == WELCOME] == [PASSED]
    (row,) = [r for r in graded["mallory"] if r.notebook == WELCOME]
    assert (row.status, row.message) == (
        ERROR,
        f"{WELCOME} is too large: 150,000 cells (at most 1,000)",
    )
    assert all("mallory" not in str(path) for _, path, _ in fake_engine)  # never analysed
    with open(tmp_path / "out" / "grades.csv", encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    assert (rows["ada"]["0.1"], rows["mallory"]["0.1"], rows["zoe"]["0.1"]) == ("1", "0", "1")
    assert "too large: 150,000 cells" in (tmp_path / "out" / "feedback" / "mallory.md").read_text()


# --- fast: release and Gradescope ------------------------------------------------------------


def test_release_ships_no_exercise_tests_and_runs_lab_as_root(tmp_path):
    dest = tmp_path / "class"
    release.release(dest, 3, "me/fork")
    assert not list((dest / "tests").glob("test_checks_nb*.py"))
    assert sorted(p.name for p in (dest / "course" / "templates").iterdir()) == sorted(
        p.name for p in (dest / "notebooks").iterdir()
    )
    readme = (dest / "README.md").read_text()
    assert "by design" in readme and "course/nn.py" in readme and "course/templates/" in readme
    makefile = (dest / "Makefile").read_text()
    main = (ROOT / "Makefile").read_text()
    assert "--allow-root" in makefile and "TORCH  ?=" in makefile
    for line in ("TORCH_INDEX   := https://download.pytorch.org/whl/$(TORCH)", "--allow-root"):
        assert line in main and line in makefile
    dry = subprocess.run(
        ["make", "-n", "setup", "TORCH=cpu", "PYTHON=python3"],
        cwd=dest,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "--index-url https://download.pytorch.org/whl/cpu torch==" in dry
    # Its own package works without solutions/ or nbtools: the released check tests pass.
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
    assert {"setup.sh", "run_autograder", "requirements.txt", "course/grading/engine.py"} <= names
    assert {"course/handins.py", "course/classroom.py", "course/framework/contract.py"} <= names
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert config["notebooks"] == ["00_welcome.ipynb", "03_multi_head_attention.ipynb"]
    assert not any(n.startswith(("solutions/", "tests/")) for n in names)
    assert {"notebooks/00_welcome.ipynb", "notebooks/03_multi_head_attention.ipynb"} <= names


def _worker_uid(call: tuple) -> list:
    from course.grading import sandbox

    return [(os.getpid(), sandbox.choose().kind, sandbox.choose().uid)]


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid mode is a root grader's")
def test_each_forked_worker_runs_its_students_as_a_uid_of_its_own(monkeypatch):
    # Without bubblewrap a root grader runs students as a uid per grading process, and a run's
    # clean-up kills every process of that uid: two workers must never share one.
    from course.grading import sandbox

    monkeypatch.setattr(sandbox, "bwrap", lambda: None)
    monkeypatch.delenv(sandbox.UID_ENV, raising=False)
    monkeypatch.delenv(sandbox.SANDBOX_ENV, raising=False)
    sandbox.choose.cache_clear()
    parent = sandbox.choose()  # cached here, as the setup check leaves it
    monkeypatch.setattr(classroom, "_grade_one", _worker_uid)
    seen = []
    try:
        classroom._run_calls([()] * 6, 2, lambda i, rows: seen.extend(rows))
    finally:
        sandbox.choose.cache_clear()
    assert parent.kind == "uid" and len(seen) == 6
    for pid, kind, uid in seen:
        assert (kind, uid) == ("uid", 100000 + pid % 100000) and uid != parent.uid, seen


def test_gradescope_setup_updates_apt_first_and_takes_cpu_torch(tmp_path):
    archive = classroom.build_gradescope(tmp_path / "autograder.zip", only=["00"])
    with zipfile.ZipFile(archive) as zipped:
        setup = zipped.read("setup.sh").decode()
        names = set(zipped.namelist())
    lines = [line for line in setup.splitlines() if line and not line.startswith("#")]
    first_install = next(i for i, line in enumerate(lines) if "install" in line)
    assert lines[first_install] == "apt-get update" or "apt-get update" in lines[first_install - 1]
    assert "https://download.pytorch.org/whl/cpu" in setup
    assert setup.index("whl/cpu") < setup.index("-r /autograder/source/requirements.txt")
    assert "course/handins.py" in names and not any("templates/" in n for n in names)
    points = tmp_path / "points.json"
    points.write_text('{"0.11": 1}')
    with pytest.raises(classroom.ConfigError, match="0.11"):
        classroom.build_gradescope(tmp_path / "x.zip", only=["00"], points_file=points)


def _make_args(tmp_path: Path, where: Path, *args: str) -> subprocess.CompletedProcess:
    """``make -C ROOT ARGS`` typed in ``where`` with LC_ALL=C, its interpreter a stand-in that
    prints each argument it gets on a line of its own (setup taken as done)."""
    fake = tmp_path / "fake-bin"
    fake.mkdir(exist_ok=True)
    (fake / "python").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (fake / "python").chmod(0o755)
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), "-o", "setup", f"BIN={fake}", *args],
        cwd=where,
        env=dict(os.environ, LC_ALL="C", PWD=str(where)),
        capture_output=True,
        encoding="utf-8",
        timeout=60,
    )


def test_make_passes_every_path_whole_and_refuses_one_typed_elsewhere(tmp_path):
    odd = str(tmp_path / "Moodle class é" / "Chloé Ðoré's \"work\" (1)")  # ($ is make's own syntax)
    done = _make_args(
        tmp_path, ROOT, "grade", f"SUBMISSIONS={odd}", f"OUT={odd} out", "TIMEOUT=30",
        "MANUAL=m e.csv", "POINTS=p é.json",
    )
    assert done.returncode == 0, done.stderr
    words = done.stdout.splitlines()
    assert words[words.index("--submissions") + 1] == odd
    assert words[words.index("--out") + 1] == f"{odd} out" and words[-1] == f"{odd} out"
    assert words[words.index("--manual") + 1] == "m e.csv"  # relative, typed where make runs
    assert words[words.index("--points") + 1] == "p é.json"
    assert words[words.index("--timeout") + 1] == "30"
    done = _make_args(tmp_path, ROOT, "progress", f"DIR={odd}")
    assert done.stdout.splitlines()[3:5] == ["--dir", odd], done.stdout
    # `make -C` from another directory: a relative path is refused, one line, nothing run.
    for target, variable in (("progress", "DIR"), ("grade", "OUT")):
        done = _make_args(tmp_path, tmp_path, target, "SUBMISSIONS=/s", f"{variable}=my class")
        assert done.returncode != 0 and done.stdout == "", done.stdout
        (line,) = [x for x in done.stderr.splitlines() if not x.startswith("make")]
        assert line.startswith(f"{variable}=my class is a relative path") and str(ROOT) in line


# --- slow: the class scenarios with the real engine -------------------------------------

TIMEOUT_S = 30  # per exercise


def _colab_saved(notebook: nbformat.NotebookNode) -> dict:
    """What Colab's "Download .ipynb" gives: nbformat 4.0 (no cell ids), its own metadata."""
    data = json.loads(nbformat.writes(notebook))
    for cell in data["cells"]:
        cell.pop("id", None)
        cell["metadata"] = {"id": "x" + str(abs(hash(str(cell["source"]))))[:10]}
    data["nbformat_minor"] = 0
    data["metadata"] = {
        "colab": {"provenance": []},
        "kernelspec": {"display_name": "Python 3", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return data


HELPER_FIRST = '''def _shifted(x, dim):
    return x - x.amax(dim=dim, keepdim=True)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of ``x`` along ``dim``."""
    exps = _shifted(x, dim).exp()
    return exps / exps.sum(dim=dim, keepdim=True)
'''


def build_class(subs: Path) -> dict[str, dict[str, str]]:
    """The scenario hand-ins, each with its expected statuses (exercise id -> status)."""
    expected: dict[str, dict[str, str]] = {}
    template = _template()
    answer_id = _answer_cells(template)[0].id
    solved = _solved(WELCOME)

    # Colab-saved, no cell ids, a helper defined before the answer inside the exercise cell.
    colab = copy.deepcopy(template)
    _answer_cells(colab)[0].source = HELPER_FIRST
    (subs / "colab").mkdir(parents=True)
    (subs / "colab" / WELCOME).write_text(json.dumps(_colab_saved(colab)))
    expected["colab"] = {"0.1": PASSED}

    # A helper and an import in cells the student added before the exercise cell.
    added = copy.deepcopy(template)
    index = next(i for i, c in enumerate(added.cells) if c.id == answer_id)
    added.cells[index].source = (
        "def softmax(x, dim=-1):\n    exps = np.exp(shift(x, dim).numpy())\n"
        "    return torch.from_numpy(exps / exps.sum(axis=dim, keepdims=True))"
    )
    added.cells.insert(index, nbformat.v4.new_code_cell("import numpy as np"))
    added.cells.insert(
        index + 1,
        nbformat.v4.new_code_cell(
            "def shift(x, dim):\n    return x - x.amax(dim=dim, keepdim=True)"
        ),
    )
    _write(added, subs / "added" / WELCOME)
    expected["added"] = {"0.1": PASSED}

    # Renamed files: a Colab copy, a browser's second download, another case.
    _write(solved, subs / "renamed" / "Copy of 00_welcome.ipynb")
    _write(_template(TOKENS), subs / "renamed" / "01_tokens (1).ipynb")
    _write(_template(ATTENTION), subs / "renamed" / "02_Attention.ipynb")
    blank = {
        ex: NOT_IMPLEMENTED for _, ex in classroom.all_exercises([ROOT / "notebooks" / TOKENS])
    }
    blank |= {
        ex: NOT_IMPLEMENTED for _, ex in classroom.all_exercises([ROOT / "notebooks" / ATTENTION])
    }
    expected["renamed"] = {"0.1": PASSED, **blank}

    # A zip inside the student's folder, and a zip as the whole hand-in.
    data = nbformat.writes(solved).encode()
    (subs / "zipped").mkdir()
    (subs / "zipped" / "notebooks.zip").write_bytes(_zip({"work/00_welcome.ipynb": data}))
    expected["zipped"] = {"0.1": PASSED}
    (subs / "whole.zip").write_bytes(_zip({"whole/00_welcome.ipynb": data}))
    expected["whole.zip"] = {"0.1": PASSED}

    # An infinite loop in 1.1: it costs 1.1 and 1.3 (learn_bpe calls count_pairs), nothing else.
    loop = _solved(TOKENS)
    cell = next(c for c in loop.cells if c.source.startswith("def count_pairs"))
    cell.source = cell.source.replace(
        "pairs = Counter()", "pairs = Counter()\n    while True:\n        pass"
    )
    _write(loop, subs / "loop" / TOKENS)
    ids = [ex for _, ex in classroom.all_exercises([ROOT / "notebooks" / TOKENS])]
    expected["loop"] = {ex: PASSED for ex in ids} | {"1.1": TIMEOUT, "1.3": TIMEOUT}

    # Written answers: in the placeholder cell, and in a cell added below the question.
    written = copy.deepcopy(solved)
    cell = _question(written, "0.2")
    cell.source = cell.source.replace(
        classroom.ANSWER_PLACEHOLDER, "**Your answer:** It saturates."
    )
    _write(written, subs / "written" / WELCOME)
    expected["written"] = {"0.1": PASSED}
    # The committed examples: ada solved 0.1; bob's 0.1 overflows and his check cell prints a
    # fake "passed", his 01 is not a notebook.
    for name in ("ada", "bob"):
        shutil.copytree(ROOT / "tests" / "fixtures" / "submissions" / name, subs / name)
    tokens = [ex for _, ex in classroom.all_exercises([ROOT / "notebooks" / TOKENS])]
    expected["ada"] = {"0.1": PASSED} | {ex: MISSING for ex in tokens}
    expected["bob"] = {"0.1": FAILED} | {ex: ERROR for ex in tokens}
    return expected


@pytest.fixture(scope="module")
def graded_scenarios(tmp_path_factory):
    subs = tmp_path_factory.mktemp("scenarios") / "subs"
    expected = build_class(subs)
    start = time.time()
    graded = classroom.grade_class(
        subs, subs.parent / "out", jobs=2, timeout_s=TIMEOUT_S, log=print
    )
    print(f"\n{len(graded)} scenario hand-ins graded with -j 2 in {time.time() - start:.0f} s")
    return subs, expected, graded


@pytest.mark.slow
@pytest.mark.parametrize(
    "student", ["colab", "added", "renamed", "zipped", "whole.zip", "loop", "written", "ada", "bob"]
)
def test_scenario_gets_its_expected_grade(graded_scenarios, student):
    subs, expected, graded = graded_scenarios
    statuses = {r.exercise: r.status for r in graded[student]}
    got = {ex: statuses[ex] for ex in expected[student]}
    messages = {
        r.exercise: r.message[:200] for r in graded[student] if r.exercise in expected[student]
    }
    assert got == expected[student], messages
    others = {s for ex, s in statuses.items() if ex not in expected[student]}
    assert others <= {MISSING}


@pytest.mark.slow
def test_written_answers_reach_the_instructor(graded_scenarios):
    subs, _, _ = graded_scenarios
    question = (subs.parent / "out" / "written" / "Question_0.2.md").read_text()
    assert "## written\n\n> It saturates." in question
    assert "It saturates." in (subs.parent / "out" / "feedback" / "written.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("student", ["colab", "renamed"])  # no cell ids; three renamed files
def test_progress_gives_the_same_verdicts_on_the_same_folders(graded_scenarios, student):
    # progress() in this process: what `make progress` prints (its command line, the pinned
    # copy and the setup check are run by test_make_progress_on_every_notebook and the tests
    # after it, and by every layout of .ci/layouts.py).
    subs, _, graded = graded_scenarios
    table = classroom.progress(subs / student)[2]
    rows = {
        line.split()[1]: line.split()[2]
        for line in table.splitlines()
        if line[:2].isdigit() and len(line.split()) > 2
    }
    icons = {PASSED: "✅", NOT_IMPLEMENTED: "⏳"}
    assert rows == {r.exercise: icons.get(r.status, "❌") for r in graded[student]}, table
    passed = sum(r.passed for r in graded[student])
    assert table.strip().endswith(f"passed: {passed} of {len(graded[student])} exercises")


@pytest.mark.slow
def test_bob_reads_the_real_checks_verdict_and_why_01_was_not_graded(graded_scenarios):
    subs, _, graded = graded_scenarios
    bob = {r.exercise: r for r in graded["bob"]}
    assert "NaN" in bob["0.1"].message or "inf" in bob["0.1"].message
    assert "not a readable notebook" in bob["1.1"].message
    feedback = (subs.parent / "out" / "feedback" / "bob.md").read_text()
    assert "**Exercise 0.1** (failed, 0 of 1)" in feedback
    with open(subs.parent / "out" / "grades.csv", encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    assert rows["ada"]["0.1"] == "1" and rows["bob"]["0.1"] == "0"
    assert list(rows["ada"]) == [
        "student",
        *classroom.columns(classroom.notebook_paths(ROOT / "notebooks")),
        "total",
        "flags",
    ]
    assert rows["ada"]["flags"] == rows["bob"]["flags"] == ""  # nobody flagged


@pytest.mark.slow
def test_run_autograder_reads_a_zip_upload_and_writes_results_json(tmp_path):
    archive = classroom.build_gradescope(tmp_path / "autograder.zip", only=["00"])
    root = tmp_path / "autograder"
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    (root / "submission").mkdir(parents=True)
    data = (ROOT / "tests" / "fixtures" / "submissions" / "ada" / WELCOME).read_bytes()
    (root / "submission" / "hw.zip").write_bytes(_zip({"Copy of 00_welcome.ipynb": data}))
    env = dict(
        os.environ, COURSE_AUTOGRADER_ROOT=str(root), COURSE_AUTOGRADER_PYTHON=sys.executable
    )
    done = subprocess.run(
        [str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((root / "results" / "results.json").read_text())
    assert report["score"] == 1
    (test,) = report["tests"]
    assert test["name"].startswith("Exercise 0.1") and test["score"] == test["max_score"] == 1
    assert "graded `hw.zip:Copy of 00_welcome.ipynb`" in report["output"]


@pytest.mark.slow
@pytest.mark.parametrize("folder, expect_all", [("notebooks", False), ("solutions", True)])
def test_make_progress_on_every_notebook(folder, expect_all, tmp_path):
    copy_ = tmp_path / folder
    shutil.copytree(ROOT / folder, copy_)
    done = subprocess.run(
        # What `make progress DIR=... JOBS=2` runs (without make's `setup` prerequisite).
        [sys.executable, "-m", "course.classroom", "progress", "--dir", str(copy_), "-j", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    last = done.stdout.strip().splitlines()[-1]
    every = classroom.all_exercises(classroom.notebook_paths(ROOT / "notebooks"))
    total = len(every)
    assert last == f"passed: {total if expect_all else 0} of {total} exercises", done.stdout[-3000:]
    # Every row: each solved exercise passes, each blank one is "not started" (no error row).
    rows = [line.split(None, 2) for line in done.stdout.splitlines() if line[:2].isdigit()]
    assert [(Path(n).stem, e) for n, e in every] == [(r[0], r[1]) for r in rows]
    wanted = "✅ passed" if expect_all else "⏳ not started"
    assert [r for r in rows if r[2] != wanted] == [], done.stdout[-3000:]


@pytest.mark.slow
def test_progress_in_a_release_grades_against_its_shipped_templates(tmp_path):
    dest = tmp_path / "class"
    release.release(dest, 0)
    notebook = nbformat.read(dest / "notebooks" / WELCOME, as_version=4)
    notebook.cells = [c for c in notebook.cells if "check." not in c.source]  # check cell deleted
    _answer_cells(notebook)[0].source = _solution_code(WELCOME, _answer_cells(notebook)[0].id)
    nbformat.write(notebook, dest / "notebooks" / WELCOME)
    done = subprocess.run(
        [sys.executable, "-m", "course.classroom", "progress"],
        cwd=dest,
        env=dict(os.environ, PYTHONPATH=str(dest)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.stdout.strip().endswith("passed: 1 of 1 exercises"), (
        done.stdout + done.stderr[-2000:]
    )


def test_progress_in_place_reads_the_templates_from_git(tmp_path):
    # A student who edits notebooks/ in place also edits the templates: progress takes them from
    # the last commit. Another folder keeps the templates as they are.
    templates = classroom.notebook_paths(ROOT / "notebooks")
    pristine = classroom.pristine_templates(ROOT / "notebooks", templates, tmp_path)
    committed = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"HEAD:notebooks/{WELCOME}"], capture_output=True
    ).stdout
    assert pristine[0] == tmp_path / WELCOME and pristine[0].read_bytes() == committed
    assert classroom.pristine_templates(tmp_path, templates, tmp_path) == templates


# --- the instructor's checkout: any folder name, never written while it grades ----------------


def _checkout_copy(where: Path, notebooks: list[str]) -> Path:
    """A checkout of this course at ``where`` (its course/, the named templates, the Makefile),
    using this checkout's venv."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "course", where / "course", ignore=ignore)
    shutil.copytree(ROOT / "data" / "samples", where / "data" / "samples")
    (where / "notebooks").mkdir()
    for name in notebooks:
        shutil.copy2(ROOT / "notebooks" / name, where / "notebooks" / name)
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):  # copy2: setup stays done
        shutil.copy2(ROOT / name, where / name)
    (where / ".venv").symlink_to(Path(sys.prefix))  # the venv running these tests
    return where


# The copy's `.venv` is this checkout's venv: make must never run `setup` there, whose
# `pip install -e .` would point that venv's editable install at the copy (its stamp may be
# older than the copy's requirements.txt, as after a fresh clone).
KEEP_VENV = ("-o", ".venv/.installed", "TORCH=")


def _make(checkout: Path, where: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    """``make -C checkout ARGS`` typed in ``where`` (a shell sets PWD there), with LC_ALL=C."""
    env = {k: v for k, v in os.environ.items() if k != "COURSE_GRADING_RESTORE"}
    env.update(LC_ALL="C", PWD=str(where))
    return subprocess.run(
        ["make", "-s", "-C", str(checkout), *KEEP_VENV, *args],
        cwd=where,
        env=env,
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        **kw,
    )


@pytest.mark.slow
def test_an_instructors_edit_while_grading_is_kept_and_changes_no_row(tmp_path):
    # A checkout, a class and a student whose names hold spaces and accents, under LC_ALL=C.
    checkout = _checkout_copy(tmp_path / "Ðoré's course", [WELCOME])
    klass = tmp_path / "class é"
    _write(_solved(WELCOME), klass / "Chloé Ðoré" / WELCOME)
    _write(_template(), klass / "dan half" / WELCOME)  # handed in as handed out
    out = tmp_path / "out é"
    check = checkout / "course" / "checks" / "nb00.py"
    note = checkout / "course" / "instructor_note.py"
    edit = "\n\ndef softmax(*args, **kwargs):  # an edit that fails everyone\n    raise ValueError\n"
    from course.grading import kernel

    started = kernel.digest(kernel._files(checkout / "course"))

    # make progress with a relative path typed in the checkout, spaces and accents in it.
    relative = os.path.relpath(klass / "Chloé Ðoré", checkout)
    shown = _make(checkout, checkout, "progress", f"DIR={relative}", timeout=900)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert shown.stdout.strip().splitlines()[-1] == "passed: 1 of 1 exercises", shown.stdout
    # The same relative path typed elsewhere (make -C): refused in one line, nothing run.
    elsewhere = _make(checkout, tmp_path, "progress", f"DIR={relative}", timeout=60)
    assert elsewhere.returncode != 0 and "is a relative path" in elsewhere.stderr
    assert "DIR=" in elsewhere.stderr.splitlines()[0] and "Traceback" not in elsewhere.stderr

    # make grade; the instructor edits a check and adds a file once the run has started.
    env = {k: v for k, v in os.environ.items() if k != "COURSE_GRADING_RESTORE"}
    env.update(LC_ALL="C", PWD=str(checkout))
    command = ["make", "-s", "-C", str(checkout), *KEEP_VENV, "grade"]
    command += [f"SUBMISSIONS={klass}", f"OUT={out}"]
    with subprocess.Popen(
        command, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        encoding="utf-8", errors="replace",
    ) as grader:
        said = []
        for line in grader.stderr:
            said.append(line)
            if line.startswith("grading with the course"):
                check.write_text(check.read_text(encoding="utf-8") + edit, encoding="utf-8")
                note.write_text("# the instructor's note\n", encoding="utf-8")
        printed = grader.stdout.read()
        assert grader.wait(timeout=900) == 0, "".join(said)[-3000:]
    said = "".join(said)
    assert check.read_text(encoding="utf-8").endswith(edit) and note.exists()  # both kept
    assert "course/checks/nb00.py" in said and "course/instructor_note.py" in said  # and named
    with open(out / "grades.csv", newline="", encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    assert (rows["Chloé Ðoré"]["0.1"], rows["dan half"]["0.1"]) == ("1", "0"), printed
    assert rows["Chloé Ðoré"]["flags"] == rows["dan half"]["flags"] == ""  # nobody flagged
    assert "(not implemented, 0 of" in (out / "feedback" / "dan half.md").read_text("utf-8")
    version = (out / classroom.VERSION_FILE).read_text(encoding="utf-8")
    assert f"course version {started[:16]}:" in version  # the version the run started with
    assert started[:16] in said
