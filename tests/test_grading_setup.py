"""Grading proves its own setup before anyone is graded: the mount plan, the environment, "not started".

* the sandbox's mount plan is right by construction: for several layouts of the interpreter,
  the venv and ``TMPDIR`` (under ``/tmp``, behind a mode-700 folder, reached through a link), a
  venv is built there and the student uid runs it inside the sandbox;
* where the student uid cannot run the interpreter, grading stops before anyone is graded, with
  one message that says why and how to fix it, and a non-zero exit;
* the student's environment is an allow-list: a variable planted in the grader's environment,
  or set by the grader at run time (torch's inductor cache), never reaches it;
* an exercise left as handed out is "not implemented" (not started), whatever else happened in
  its run: a kernel that could not start, a deadline;
* a grader whose umask is 077 grades an honest class, and a package installed under it, that
  the student uid cannot read, is named before anyone is graded.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from course.framework.contract import ERROR, NOT_IMPLEMENTED, PASSED, TIMEOUT
from course.grading import engine, kernel, sandbox, setup

ROOT = Path(__file__).resolve().parents[1]
BASE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
needs_bwrap = pytest.mark.skipif(sandbox.bwrap() is None, reason="bubblewrap is not installed")

# What the sandboxed interpreter reports: who it runs as and which venv it is.
REPORT = "import json, os, sys; print(json.dumps([os.getuid(), os.path.realpath(sys.prefix)]))"
CHOOSE = """
import json, sys, tempfile
from pathlib import Path
from course.grading import sandbox
choice = sandbox.choose()
out = {"kind": choice.kind, "why": choice.why, "problems": sandbox.unreachable(choice)}
with tempfile.TemporaryDirectory() as scratch:
    sandbox.prepare(choice, Path(scratch), [])
    import subprocess
    done = subprocess.run(
        [*sandbox.prefix(choice, Path(scratch)), str(sandbox.interpreter()), "-c", sys.argv[1]],
        capture_output=True, text=True, timeout=60,
    )
    out["ran"] = done.stdout.strip()
    out["stderr"] = done.stderr[-500:]
print(json.dumps(out))
"""


def _venv(where: Path) -> Path:
    """A bare venv (no pip: seconds) from the base interpreter this test suite runs on."""
    subprocess.run([str(BASE_PYTHON), "-m", "venv", "--without-pip", str(where)], check=True)
    return where / "bin" / "python"


def _layout(kind: str, base: Path) -> tuple[Path, dict]:
    """(the python to call, extra environment) for one layout, built under ``base``."""
    if kind == "venv under /tmp, TMPDIR=/tmp":
        return _venv(base / "course" / ".venv"), {"TMPDIR": "/tmp"}
    if kind == "venv under /tmp, TMPDIR deeper under /tmp":
        deep = base / "grader" / "tmp"
        deep.mkdir(parents=True)
        return _venv(base / "course" / ".venv"), {"TMPDIR": str(deep)}
    if kind == "venv behind a mode-700 folder":
        python = _venv(base / "private" / "course" / ".venv")
        (base / "private").chmod(0o700)
        return python, {}
    if kind == "venv reached through a link":
        real = Path(tempfile.mkdtemp(prefix="course-layout-real-", dir="/var/tmp"))
        python = _venv(real / ".venv")
        (base / "link").symlink_to(real)
        return base / "link" / ".venv" / "bin" / "python", {"COURSE_LAYOUT_REAL": str(real)}
    raise ValueError(kind)


LAYOUTS = [
    "venv under /tmp, TMPDIR=/tmp",
    "venv under /tmp, TMPDIR deeper under /tmp",
    "venv behind a mode-700 folder",
    "venv reached through a link",
]


@needs_bwrap
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_student_uid_runs_the_interpreter_in_every_layout(layout):
    base = Path(tempfile.mkdtemp(prefix="course-layout-", dir="/tmp"))
    base.chmod(0o755)
    try:
        python, extra = _layout(layout, base)
        env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", sandbox.SANDBOX_ENV)}
        env.update(extra, PYTHONPATH=str(ROOT))
        done = subprocess.run(
            [str(python), "-c", CHOOSE, REPORT],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd="/",
        )
        assert done.returncode == 0, done.stderr[-2000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["kind"] == "bwrap" and seen["problems"] == [], seen
        uid, prefix = json.loads(seen["ran"])
        assert uid == (sandbox.STUDENT_UID if os.geteuid() == 0 else os.geteuid()), seen
        assert prefix == os.path.realpath(python.parent.parent), seen
    finally:
        shutil.rmtree(base, ignore_errors=True)
        real = locals().get("extra", {}).get("COURSE_LAYOUT_REAL")
        if real:
            shutil.rmtree(real, ignore_errors=True)


def test_the_plan_mounts_a_private_tmp_before_anything_under_it():
    mounts = sandbox.plan(Path(tempfile.gettempdir()) / "scratch-x", [])
    order = [m.dest for m in mounts]
    tmp = order.index(Path("/tmp"))
    assert all(order.index(d) > tmp for d in order if Path("/tmp") in d.parents)
    # Every mount comes after the mounts above it, and the folders above each are made 0755.
    for i, mount in enumerate(mounts):
        assert all(m.dest not in mount.dest.parents for m in mounts[i + 1 :]), mount
    words = sandbox.words(mounts)
    for mount in mounts:
        for parent in mount.dest.parents[:-1]:
            assert ["--perms", "0755", "--dir", str(parent)] in [
                words[j : j + 4] for j in range(len(words))
            ]


def _no_bwrap_path(folder: Path) -> str:
    """A PATH with every program of /usr/bin but bubblewrap (a machine without it)."""
    folder.mkdir()
    for program in Path("/usr/bin").iterdir():
        if program.name != "bwrap":
            (folder / program.name).symlink_to(program)
    return str(folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid fallback is a root grader's")
def test_a_student_uid_that_cannot_run_the_interpreter_stops_grading_before_anyone(tmp_path):
    """Without bubblewrap a root grader runs students as a uid of their own; this suite's
    interpreter lives where that uid cannot reach it (a mode-700 folder), so nobody is graded."""
    real = Path(os.path.realpath(sandbox.interpreter()))
    if not any(p.stat().st_mode & 0o001 == 0 for p in real.parents):
        pytest.skip(f"{real} is reachable by any uid here: nothing to refuse")
    submissions = tmp_path / "class"
    (submissions / "ann").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "00_welcome.ipynb", submissions / "ann")
    env = dict(os.environ, PATH=_no_bwrap_path(tmp_path / "bin"))
    env.pop(sandbox.SANDBOX_ENV, None)
    done = subprocess.run(
        [sys.executable, "-m", "course.classroom", "grade"]
        + ["--submissions", str(submissions), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    assert done.returncode == 3, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "cannot execute the interpreter" in errors[0] and "mode 700" in errors[0]
    assert "COURSE_SANDBOX=0" in errors[0] and "non-root" in errors[0]
    assert not (tmp_path / "out").exists()  # nobody graded, nobody written as "error"


ENV_DUMP = (
    "import json, os\n"
    "with open(os.path.join(os.environ['COURSE_GRADING_RECORDS'], 'env.json'), 'w') as f:\n"
    "    json.dump(dict(os.environ), f)"
)


def test_the_students_environment_is_an_allow_list(monkeypatch):
    planted = f"COURSE_PLANTED_{secrets.token_hex(4).upper()}"
    secret = secrets.token_hex(12)
    monkeypatch.setenv(planted, secret)
    monkeypatch.setenv("DATABASE_URL", f"postgres://grader:{secret}@db/grades")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", f"/tmp/torchinductor_{secret}")  # torch's own
    cell = nbformat.v4.new_code_cell(ENV_DUMP)
    cell.metadata["course_index"] = 0
    scratch = kernel.scratch_folder()
    try:
        kernel.private_course(scratch, kernel.TreeGuard().files, 0)
        run = kernel.run(nbformat.v4.new_notebook(cells=[cell]), scratch, "env.ipynb", 120, 60)
        assert run.end == "complete", run.stderr
        seen = json.loads((scratch / "records" / "env.json").read_text())
        allowed = kernel.student_env(sandbox.choose(), scratch, "token")
    finally:
        kernel.remove_scratch(scratch)
    assert planted not in seen and "DATABASE_URL" not in seen
    assert not [k for k, v in seen.items() if secret in v]
    view = str(sandbox.seen(sandbox.choose(), scratch, scratch))
    assert seen["TORCHINDUCTOR_CACHE_DIR"].startswith(view)
    assert seen["MPLCONFIGDIR"].startswith(view) and seen["HOME"] == view
    # Anything else it holds the grader did not give it (a shell may add PWD, SHLVL, _).
    extra = {k for k in seen if k not in allowed and k in os.environ}
    assert extra <= {"PWD", "SHLVL", "_", "OLDPWD"}, extra


def _template(name: str) -> nbformat.NotebookNode:
    return nbformat.read(next((ROOT / "notebooks").glob(f"{name}_*.ipynb")), as_version=4)


def _with_right_softmax(template: nbformat.NotebookNode) -> nbformat.NotebookNode:
    notebook = nbformat.from_dict(json.loads(json.dumps(template)))
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.source.startswith("def softmax("):
            cell.source = setup.RIGHT_CELL
    return notebook


@pytest.mark.parametrize(
    "fault", [{"memory_gb": 0.05}, {"budget_s": 0.5}], ids=["kernel cannot start", "deadline"]
)
def test_an_untouched_exercise_is_not_started_whatever_happened_in_its_run(fault):
    template = _template("02")
    started = nbformat.from_dict(json.loads(json.dumps(template)))
    first = next(c for c in started.cells if "raise NotImplementedError" in c.source)
    first.source += "\n# started, not finished"  # so the notebook runs, and the fault hits it
    results = engine.grade_notebook(template, started, "02.ipynb", **fault)
    assert len(results) > 2 and results[0].status in (ERROR, TIMEOUT), results[0]
    rest = [r for r in results if r.check != results[0].check]
    assert rest and all(r.status == NOT_IMPLEMENTED for r in rest), rest
    assert all("not started" in r.message for r in rest)
    # The written exercise beside them: the run's fault said honestly, never "not started".
    template = _template("00")
    written = engine.grade_notebook(template, _with_right_softmax(template), "00.ipynb", **fault)
    assert [r.status for r in written] in ([ERROR], [TIMEOUT]), written


def test_a_notebook_left_as_handed_out_is_not_run(monkeypatch):
    def run(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("a notebook left as handed out was run")

    monkeypatch.setattr(engine.kernel, "run", run)
    untouched = _template("02")
    results = engine.grade_notebook(untouched, untouched, "02.ipynb")
    assert len(results) > 1 and all(r.status == NOT_IMPLEMENTED for r in results), results
    assert all("not started" in r.message for r in results)
    written = _with_right_softmax(_template("00"))  # one exercise written: it runs
    with pytest.raises(AssertionError, match="was run"):
        engine.grade_notebook(_template("00"), written, "00.ipynb")


@pytest.mark.slow
def test_the_setup_check_passes_here_and_reports_its_isolation():
    """The honest control of the refusal above: on this machine's setup the known-right
    notebook passes, and the report names the isolation really used."""
    report = setup.require.__wrapped__()
    assert report.kind == sandbox.choose().kind and report.seconds > 0
    assert f"isolation: {report.kind}" in report.line()
    template, right = setup.notebooks()
    results = engine.grade_notebook(template, template, setup.NAME)
    assert [r.status for r in results] == [NOT_IMPLEMENTED]  # the stub itself is not started
    results = engine.grade_notebook(template, right, setup.NAME)
    assert [r.status for r in results] == [PASSED]


def test_a_folder_the_student_uid_cannot_pass_is_never_handed_to_it(tmp_path):
    """(uid mode) the prepared model cache under a mode-700 home is not given to the student,
    whose notebooks then take their fallbacks, rather than failing on a PermissionError."""
    closed = tmp_path / "home"
    (closed / "models").mkdir(parents=True)
    closed.chmod(0o700)
    choice = sandbox.Choice("uid", 123456, "test")
    assert sandbox.reachable(choice, Path("/usr/lib")) is True
    assert sandbox.reachable(choice, closed / "models") is False
    assert sandbox.reachable(sandbox.Choice("bwrap", 65534, "test"), closed / "models") is True


@pytest.fixture
def umask_077():
    """The grader's process as a hardened machine starts it: new files and folders private."""
    before = os.umask(0o077)
    yield
    os.umask(before)


def test_a_grader_with_umask_077_grades_an_honest_notebook(umask_077):
    """Its scratch, course copy and notebook are made readable by the student uid whatever the
    umask (sandbox.readable_by_all): 0.1 right passes, 0.1 left as handed out is not started."""
    template = _template("00")
    right = engine.grade_notebook(template, _with_right_softmax(template), "00.ipynb")
    assert [r.status for r in right] == [PASSED], right
    untouched = engine.grade_notebook(template, template, "00.ipynb")
    assert [r.status for r in untouched] == [NOT_IMPLEMENTED], untouched


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_a_package_the_student_uid_cannot_read_is_named_before_grading(monkeypatch, mode):
    """A venv installed under umask 077: the setup check names the file and its mode, rather
    than a kernel dying in every student's run. (Mode 644 is its control: nothing said.)"""
    import importlib.util
    import types

    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        folder.chmod(0o755)
        package = folder / "torch" / "__init__.py"
        package.parent.mkdir()
        package.parent.chmod(0o755)
        package.write_text("")
        package.chmod(mode)
        real = importlib.util.find_spec
        fake = types.SimpleNamespace(origin=str(package))
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: fake if name == "torch" else real(name, *a),
        )
        problems = sandbox.unreachable(sandbox.Choice("uid", 123456, "test"))
        about = [p for p in problems if "read the installed package" in p]
        if mode == 0o600:
            assert about == [
                f"the student uid 123456 cannot read the installed package {package}: it is "
                f"mode 600 (owner uid {os.getuid()})"
            ], problems
        else:
            assert about == [], problems
    finally:
        shutil.rmtree(folder)
