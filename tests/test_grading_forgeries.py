"""Forged records and patched checks, each a fixture submission that must score 0 for its exercise.

tests/fixtures/forgeries/*.ipynb (written by make_forgeries.py there) are notebook 00 with a
wrong softmax (the literal formula, which overflows) plus one forging line: rebinding ``check``,
replacing a function of ``course.checks.nb00``, patching ``CheckResult.__init__``, redefining the
recording hook, appending a passing row to the record file, making ``expect``/``expect_close``
no-ops, writing the record file directly, killing the kernel, killing its parent, writing
``results.json``; ``imports_checks`` is a right answer that imports the checks (scored 0 by static
analysis); ``rewrite_disk`` appends a fake check to the grader's ``course/checks/nb00.py`` and is
graded before a blank notebook, against a copy of the course (so the test never writes to the
repository).

Every forgery but ``rewrite_disk``, and every reach into the check or the probe below, is a
hand-in of the session's one class of notebook-00 hand-ins (tests/hostile.py), graded once
beside its honest control: "held" and "nothing ran" look alike otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course import grading
from course.grading import kernel, sandbox
from tests import hostile
from tests.hostile import WELCOME

ROOT = Path(__file__).resolve().parents[1]
FORGERIES = ROOT / "tests" / "fixtures" / "forgeries"
TEMPLATE = ROOT / "notebooks" / WELCOME
IN_PROCESS = sorted(p.stem for p in FORGERIES.glob("*.ipynb") if p.stem != "rewrite_disk")

pytestmark = pytest.mark.slow


def _forged(klass: Path) -> Path:
    """Where the write_results forgery is told to write (out of a sandboxed student's sight)."""
    return klass.parent / "forged" / "results.json"


def _build_forgeries(klass: Path) -> None:
    _forged(klass).parent.mkdir()
    for name in IN_PROCESS:  # write_results aimed at a results.json the grader may read
        aimed = {"COURSE_FORGERY_RESULTS": str(_forged(klass))}
        hostile.aimed(FORGERIES / f"{name}.ipynb", aimed, klass / name / WELCOME)


hostile.add("forgeries", _build_forgeries)


@pytest.fixture(scope="module")
def graded(hostile_class, tmp_path_factory):
    """Every forgery but rewrite_disk, as the class graded them; then results.json written."""
    forgeries = {name: hostile_class.results[name] for name in IN_PROCESS}
    path = _forged(hostile_class.klass)
    forged = json.loads(path.read_text()) if path.exists() else None
    every = [r for results in forgeries.values() for r in results]
    report = grading.gradescope_report(every)
    written_path = tmp_path_factory.mktemp("results") / "results.json"
    grading.write_results_json(written_path, report)
    written = json.loads(written_path.read_text())
    control = hostile_class.results[hostile.CONTROL]
    return {"results": forgeries, "forged": forged, "written": written, "control": control}


def test_the_honest_control_graded_in_the_same_run_gets_full_marks(graded):
    assert [r.status for r in graded["control"]] == [grading.PASSED], graded["control"]


@pytest.mark.parametrize("name", IN_PROCESS)
def test_forgery_scores_zero(graded, name):
    assert [r.status for r in graded["control"]] == [grading.PASSED]  # the run did run
    (result,) = graded["results"][name]
    assert result.exercise == "0.1"
    assert not result.passed, result.message
    assert result.status in (grading.FAILED, grading.ERROR), result.message


@pytest.mark.parametrize(
    "name, status, phrase",
    [
        # the trusted replay still compares, and names the overflowing answer's mistake
        ("noop_expect", grading.FAILED, "without the max shift"),
        ("patch_checkresult_init", grading.FAILED, "without the max shift"),
        ("imports_checks", grading.FAILED, "imports from course.checks"),
        ("kill_kernel", grading.ERROR, "kernel died"),
        ("write_record", grading.ERROR, "did not come back whole"),
        ("redefine_hook", grading.ERROR, "left no record"),
    ],
)
def test_forgery_row_says_what_happened(graded, name, status, phrase):
    (result,) = graded["results"][name]
    assert (result.status, phrase in result.message) == (status, True), result.message


def test_killing_the_parent_stops_the_run_or_leaves_the_honest_verdict(graded):
    # The student's process may finish the check before the grader reacts to the dead parent.
    (result,) = graded["results"]["kill_parent"]
    assert ("did not run" in result.message and result.status == grading.ERROR) or (
        result.status == grading.FAILED and "without the max shift" in result.message
    ), result.message


def test_results_json_is_the_trusted_one(graded):
    if sandbox.choose().isolated:
        assert graded["forged"] is None  # the student's process could not even write one
    else:
        assert graded["forged"]["score"] == 36  # the student's process did write one...
    assert graded["written"]["score"] == 0  # ...and the trusted side replaced it
    assert {t["status"] for t in graded["written"]["tests"]} == {"failed"}


GRADE_TWO = """
import json, sys
from pathlib import Path
import course
from course import grading
from course.grading import kernel
template, first, second = (Path(p) for p in sys.argv[1:4])
before = kernel.digest(kernel._files(kernel.COURSE))
rows = []
for submission in (first, second):
    (result,) = grading.grade_file(template, submission, timeout_s=60)
    rows.append([result.status, result.message, result.flags])
after = kernel.digest(kernel._files(kernel.COURSE))
print(json.dumps({"course": course.__file__, "rows": rows, "same": before == after}))
"""


def test_a_disk_rewriting_submission_cannot_pass_the_next_one(tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "course", copy / "course", ignore=shutil.ignore_patterns("__pycache__"))
    original = (copy / "course" / "checks" / "nb00.py").read_bytes()
    shutil.copytree(ROOT / "data" / "samples", copy / "data" / "samples")
    env = dict(os.environ, **{kernel.RESTORE_ENV: "1"})  # the copy is ours to restore
    env.update(PYTHONPATH=str(copy))
    forger = hostile.aimed(  # at the grader's course: the copy
        FORGERIES / "rewrite_disk.ipynb",
        {"COURSE_FORGERY_TARGET": str(copy / "course")},
        tmp_path / "rewrite_disk.ipynb",
    )
    done = subprocess.run(
        [sys.executable, "-c", GRADE_TWO, str(TEMPLATE), str(forger)]
        + [str(TEMPLATE)],  # the blank notebook, graded second
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["course"] == str(copy / "course" / "__init__.py")
    (forger, blank) = seen["rows"]
    assert forger[0] == grading.FAILED
    if not sandbox.choose().isolated:  # in a sandbox the grader's course is not even in view
        assert any("checks/nb00.py" in f and "restored" in f for f in forger[2]), forger
    assert blank[0] == grading.NOT_IMPLEMENTED, blank
    assert seen["same"], "the grader's course tree was left changed"
    assert (copy / "course" / "checks" / "nb00.py").read_bytes() == original


# The hostile round's reaches into the check and the probe, on 0.1 (whose text forbids
# torch.softmax), each with the overflowing formula as its fallback: a pass would prove it
# found the answer or bent the record. The check modules of the student's process hold no
# reference (course.grading.stripped); besides, an import of the grading machinery scores 0 on
# any exercise (course.framework.contract), and dynamic reach sends 0.1 to the instructor
# (course.framework.forbidden).
WRONG = (
    "def softmax(x, dim=-1):\n"
    "    e = x.exp()\n"
    "    return e / e.sum(dim=dim, keepdim=True)\n"
)
REACHES = {
    "frames_gc_modules": '''import sys, gc
def softmax(x, dim=-1):
    for spot in [sys._getframe(i) for i in range(1, 12)]:
        spec = spot.f_locals.get("spec")
        if spec is not None and callable(getattr(spec, "reference", None)):
            return spec.reference(x, dim)
    for found in gc.get_objects():
        if callable(getattr(found, "reference", None)):
            return found.reference(x, dim)
    for module in list(sys.modules.values()):
        spec = getattr(getattr(module, "softmax", None), "spec", None)
        if spec is not None:
            return spec.reference(x, dim)
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)
''',
    "sealed_global_state": "import course.framework.sealed as sealed\n"
    "sealed.global_state = lambda: {'grad mode': True}\n" + WRONG,
    "sealed_same_rng": "from course.framework import sealed\nsealed.same_rng = lambda a, b: True\n" + WRONG,
    "sealed_plain_tensor": "import course.framework.sealed\ncourse.framework.sealed.plain_tensor = lambda v: v\n"
    + WRONG,
    "sealed_fingerprint": "import course.framework.sealed as s\ns.BOUND['is_grad_enabled'] = lambda: True\n"
    "s.fingerprint = lambda: s.TRUSTED\n" + WRONG,
    "patch_snapshot": "import sys\n_p = sys.modules['course' + '.framework.properties']\n"
    "_p._snapshot = lambda value: None\n" + WRONG,
}


# Searches every place an answer can look for a check's answer (the frames above it, every
# object the garbage collector tracks, every course module) and uses the first callable of the
# course's checks that returns a softmax (finite, summing to one along ``dim``): a spec's or a
# mistake's reference, a judge, any function of a check module. Its fallback overflows, so the
# trusted replay names that mistake only where the search found nothing that computes.
SEARCH = '''import functools, gc, sys, torch
_found = []
def _callables():
    seen = [v for i in range(1, 40) if i < len(_frames()) for v in _frames()[i].f_locals.values()]
    seen += gc.get_objects()
    seen += [v for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("course")
             for v in list(vars(m).values())]
    out = []
    for obj in seen:
        try:
            out += _answers(obj)
        except Exception:
            continue
    return [f for f in out if callable(f)]
def _answers(obj):
    out = []
    specs = getattr(obj, "spec", obj)
    for spec in specs if isinstance(specs, tuple) else (specs,):
        for name in ("reference", "judge"):
            if callable(getattr(spec, name, None)):
                out.append(getattr(spec, name))
        for mistake in getattr(spec, "mistakes", ()) or ():
            out.append(getattr(mistake, "reference", None))
    function = obj.func if isinstance(obj, functools.partial) else obj
    if callable(obj) and str(getattr(function, "__module__", "")).startswith("course.checks"):
        out.append(obj)
    return out
def _frames():
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames
def softmax(x, dim=-1):
    if not _found:
        _found.extend(_callables() or [None])
    for candidate in _found:
        try:
            y = candidate(x, dim)
            if isinstance(y, torch.Tensor) and y.shape == x.shape and bool(y.isfinite().all()):
                if bool(((y.sum(dim) - 1).abs() < 1e-3).all()):
                    return y
        except Exception:
            continue
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)
'''
SEARCHING = "search_for_the_answer"
# The side effects the sealed_* forgeries above hide, left unhidden beside right values: while
# grading, a side effect the student's process reports decides no point either way (any
# observer in that process can be bent; course.framework.observe.claim), so each keeps its point,
# its row saying what was seen and not graded, and no forgery earns a point its control does
# not. (0.1's text lets x change in place: the in-place controls are in
# tests/test_grading_side_effects.py.)
UNHIDDEN = {
    "leaves_grad_mode_off": ("torch.set_grad_enabled(False)", "sealed_global_state"),
    "draws_from_the_global_generator": ("torch.rand(())", "sealed_same_rng"),
}


def _unhidden(effect: str) -> str:
    return (
        "import torch\n"
        "def softmax(x, dim=-1):\n"
        f"    {effect}\n"
        "    shifted = x - x.amax(dim=dim, keepdim=True)\n"
        "    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)\n"
    )


def _build_reaches(klass: Path) -> None:
    for name, source in [(SEARCHING, SEARCH)] + [(n, _unhidden(e)) for n, (e, _) in UNHIDDEN.items()]:
        (klass / name).mkdir()
        nbformat.write(hostile.notebook(source), klass / name / WELCOME)
    for name, source in REACHES.items():
        (klass / name).mkdir()
        nbformat.write(hostile.notebook(source), klass / name / WELCOME)


hostile.add("reaches", _build_reaches)


@pytest.fixture(scope="module")
def reached(hostile_class):
    control = {"(honest control)": hostile_class.results[hostile.CONTROL]}
    return {name: hostile_class.results[name] for name in REACHES} | control


@pytest.mark.parametrize("name", sorted(REACHES))
def test_a_reach_into_the_check_or_the_probe_earns_nothing(reached, name):
    assert [r.status for r in reached["(honest control)"]] == [grading.PASSED]
    (result,) = reached[name]
    assert result.status in (grading.FAILED, grading.ERROR) and result.flags, result
    # flagged for the import of the probe's module (``from course.framework import sealed`` is
    # named by its package), or sent to the instructor for its dynamic reach
    assert "course.framework" in result.message or "reviews it by hand" in result.message, result


def test_an_answer_searching_the_students_process_for_the_checks_answer_finds_none(hostile_class):
    # The honest control passes in the same run; the searching answer's values are its
    # fallback's (the trusted replay names that mistake): nothing it found computed a softmax.
    # Were a reference reachable, its values would be right and no mistake named.
    assert [r.status for r in hostile_class.results[hostile.CONTROL]] == [grading.PASSED]
    (result,) = hostile_class.results[SEARCHING]
    assert (result.status, result.mistake) == (grading.FAILED, "exp without the max shift"), result


@pytest.mark.parametrize("name", sorted(UNHIDDEN))
def test_a_side_effect_seen_in_the_students_process_is_said_and_decides_no_point(
    hostile_class, name
):
    honest = hostile_class.results[hostile.CONTROL]
    assert [(r.status, "not graded" in r.message) for r in honest] == [(grading.PASSED, False)]
    (control,) = hostile_class.results[name]
    assert control.status == grading.PASSED, control.message
    assert "not graded" in control.message and "global state unchanged" in control.message
    (forgery,) = hostile_class.results[UNHIDDEN[name][1]]  # hides the same side effect
    assert not forgery.passed or control.passed
