"""Attacks on the grader's operating system, each a hand-in graded beside two honest
classmates, the way an instructor grades: ``python -m course.classroom grade`` in a subprocess,
from a copy of the checkout (``course/``, one template, the samples) that stands for the
grader's. Each attack (tests/fixtures/forgeries/make_forgeries.py, ``ATTACKS``) reads its targets
from ``COURSE_FORGERY_*`` variables, which the student's environment (an allow-list) never holds:
the grader's temp folder, templates, checkout and OUT are written into each attack's notebook
instead (:func:`tests.hostile.aimed`), as an attacker who guessed or searched them would.

For every attack: it scores 0 (or an honest error), the classmates' rows are those they get
alone (0.1 right: 1 point; 0.1 wrong: 0; nothing flagged), every grade is written, the checkout copy and OUT are unchanged afterwards (OUT's
manifest verifies), and no process of the run is left. The Gradescope stand-in runs
``run_autograder`` as this user (root in CI and containers) against the late rewrite and
write-then-kill. Skipped where no sandbox is possible (course/grading/sandbox.py says why).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from course.grading import sandbox
from tests.hostile import aimed

ROOT = Path(__file__).resolve().parents[1]
FORGERIES = ROOT / "tests" / "fixtures" / "forgeries"
HONEST = ROOT / "tests" / "fixtures" / "submissions" / "ada" / "00_welcome.ipynb"
WELCOME = "00_welcome.ipynb"
CLASS_ATTACKS = [
    "read_classmates",
    "rewrite_templates",
    "plant_pyc",
    "detached_rewrite",
    "link_feedback",
    "named_pipe",
]
LATE_S = 3  # how long the tests wait for a detached process to strike after the grader ends

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        sandbox.choose().kind != "bwrap", reason=f"no sandbox here: {sandbox.choose().why}"
    ),
]


def _tree(root: Path) -> dict[str, str]:
    """Every file and link under ``root`` with a digest of its content (or of its target)."""
    seen = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            seen[name] = "link -> " + os.readlink(path)
        elif path.is_file():
            seen[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir() and not any(path.iterdir()):
            seen[name + "/"] = "empty folder"
    return seen


def _checkout(where: Path) -> Path:
    """The grader's checkout for these tests: course/, one template, the samples."""
    shutil.copytree(ROOT / "course", where / "course", ignore=shutil.ignore_patterns("__pycache__"))
    (where / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / WELCOME, where / "notebooks" / WELCOME)
    shutil.copytree(ROOT / "data" / "samples", where / "data" / "samples")
    return where


def _honest_wrong(path: Path) -> Path:
    """An honest classmate with a wrong softmax (the literal formula) and nothing else."""
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("forgeries", FORGERIES / "make_forgeries.py")
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)
    notebook = nbformat.read(HONEST, as_version=4)
    cell = next(c for c in notebook.cells if "def softmax" in c.source)
    cell.source = fixtures.WRONG
    path.parent.mkdir(parents=True)
    nbformat.write(notebook, path)
    return path


def _targets(checkout: Path, out: Path, grader_tmp: Path) -> dict[str, str]:
    """Where the class attacks strike: the grader's temp folder, templates, checkout and OUT."""
    return {
        "COURSE_FORGERY_TMPDIR": str(grader_tmp),
        "COURSE_FORGERY_TEMPLATES": str(checkout / "notebooks"),
        "COURSE_FORGERY_REPO": str(checkout),
        "COURSE_FORGERY_OUT": str(out),
        "COURSE_FORGERY_PIPES": "1",
    }


def _grade(checkout: Path, submissions: Path, out: Path, grader_tmp: Path) -> dict:
    grader_tmp.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout),
        "PYTHONDONTWRITEBYTECODE": "1",  # the grader's own bytecode would change the checkout
        "TMPDIR": str(grader_tmp),
        "PWD": str(checkout),
    }
    command = [sys.executable, "-m", "course.classroom", "grade", "--submissions"]
    command += [str(submissions), "--out", str(out), "--templates", str(checkout / "notebooks")]
    command += ["-j", "2", "--timeout", "60"]
    start = time.time()
    done = subprocess.run(
        command, cwd=checkout, env=env, capture_output=True, text=True, timeout=900
    )
    seconds = time.time() - start
    time.sleep(LATE_S)  # a detached process would strike now
    with open(out / "grades.csv", encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    verified = subprocess.run(
        [sys.executable, "-m", "course.classroom", "verify", str(out)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return {"done": done, "rows": rows, "verify": verified, "seconds": seconds}


# The honest pair's rows as they are alone: 0.1 right earns its point, 0.1 wrong none, and
# neither is flagged (grades.csv's columns for notebook 00: 0.1, then written question 0.2).
ALONE = {
    "honest_a": {"student": "honest_a", "0.1": "1", "0.2": "", "total": "1", "flags": ""},
    "honest_b": {"student": "honest_b", "0.1": "0", "0.2": "", "total": "0", "flags": ""},
}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """The honest pair graded with every attacker of the class beside them."""
    base = tmp_path_factory.mktemp("attacks")
    checkout = _checkout(base / "checkout")
    everyone = base / "class"
    _honest_wrong(everyone / "honest_b" / WELCOME)
    (everyone / "honest_a").mkdir()
    shutil.copy(HONEST, everyone / "honest_a" / WELCOME)
    targets = _targets(checkout, base / "out", base / "tmp")
    for name in CLASS_ATTACKS:
        aimed(FORGERIES / f"{name}.ipynb", targets, everyone / name / WELCOME)
    before = _tree(checkout)
    graded = _grade(checkout, everyone, base / "out", base / "tmp")
    graded["checkout before"], graded["checkout after"] = before, _tree(checkout)
    graded["out"] = base / "out"
    return graded


def test_the_grader_finishes_and_writes_every_grade(attacked):
    done = attacked["done"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(attacked["rows"]) == {"honest_a", "honest_b", *CLASS_ATTACKS}


@pytest.mark.parametrize("attack", CLASS_ATTACKS)
def test_the_attack_scores_zero(attacked, attack):
    # "held", not "nothing ran": the honest control of the same run got its point
    assert attacked["rows"]["honest_a"]["0.1"] == "1", attacked["rows"]["honest_a"]
    assert attacked["rows"][attack]["0.1"] == "0", attacked["rows"][attack]


def test_classmates_grades_do_not_move(attacked):
    for student in ("honest_a", "honest_b"):
        assert attacked["rows"][student] == ALONE[student]


def test_the_checkout_is_unchanged(attacked):
    assert attacked["checkout after"] == attacked["checkout before"]
    assert not any("__pycache__" in name for name in attacked["checkout after"])


def test_out_is_as_the_grader_wrote_it(attacked):
    verified = attacked["verify"]
    assert verified.returncode == 0, verified.stdout + verified.stderr
    out = attacked["out"]
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert "passed\n" != (out / "feedback" / "honest_a.md").read_text()
    assert "detached_rewrite,1,1" not in (out / "grades.csv").read_text()


def test_the_named_pipe_is_an_honest_error_row(attacked):
    feedback = (attacked["out"] / "feedback" / "named_pipe.md").read_text()
    assert "error" in feedback and "left no record" in feedback, feedback


def test_a_changed_out_is_reported(attacked, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(attacked["out"], out, symlinks=True)
    with open(out / "grades.csv", "a", encoding="utf-8") as file:
        file.write("mallory,1,1\n")
    (out / "feedback" / "mallory.md").write_text("forged")
    done = subprocess.run(
        [sys.executable, "-m", "course.classroom", "verify", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "grades.csv: changed" in done.stderr and "mallory.md: not written" in done.stderr


# --- Gradescope ------------------------------------------------------------------------------


@pytest.mark.parametrize("attack", ["detached_rewrite", "write_then_kill"])
def test_gradescope_results_json_is_written_by_the_grader_last(tmp_path, attack):
    from course import classroom

    archive = classroom.build_gradescope(tmp_path / "autograder.zip", only=["00"])
    root = tmp_path / "autograder"
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(root / "source")
    runner = root / "source" / "run_autograder"
    runner.chmod(0o755)
    root_aimed = {"COURSE_AUTOGRADER_ROOT": str(root)}
    aimed(FORGERIES / f"{attack}.ipynb", root_aimed, root / "submission" / WELCOME)
    env = dict(
        os.environ,
        COURSE_AUTOGRADER_ROOT=str(root),
        COURSE_AUTOGRADER_PYTHON=sys.executable,
        PYTHONPATH=str(root / "source"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    done = subprocess.run([str(runner)], env=env, capture_output=True, text=True, timeout=600)
    time.sleep(LATE_S)  # the detached process's moment
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((root / "results" / "results.json").read_text())
    assert report["score"] == 0 and len(report["tests"]) == 1, report
    (test,) = report["tests"]
    assert test["name"].startswith("Exercise 0.1") and test["status"] == "failed"
    if os.geteuid() == 0:  # the grader is root: the file is root's, the student was not
        assert (root / "results" / "results.json").stat().st_uid == 0
