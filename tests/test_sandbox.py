"""The walls around the student's processes (course/grading/sandbox.py), one assertion each.

One notebook, run through the grader's own :func:`course.grading.kernel.run`, tries every wall
from inside and writes what it saw to a file in its scratch: writing outside its scratch, seeing
a classmate's hand-in in the grader's temp folder, seeing the templates or the grader's
checkout, reaching the network, leaving a ``setsid`` process behind with an empty environment,
running as root. Skipped where this machine allows no sandbox (the notice test still runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from course.grading import kernel, sandbox

ROOT = Path(__file__).resolve().parents[1]
LATE_S = 2  # the detached process writes its mark after this long, if it still lives

PROBE = """
import json, os, socket, subprocess, sys
seen = {"uid": os.getuid(), "euid": os.geteuid(), "secret": os.environ.get("GRADER_API_TOKEN")}

def can_write(path):
    try:
        with open(path, "a") as file:
            file.write("")
        return True
    except OSError:
        return False

for key, path in WRITES.items():
    seen["write " + key] = can_write(path)
for key, path in LOOKS.items():
    seen["see " + key] = os.path.exists(path)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    seen["network"] = True
except OSError:
    seen["network"] = False
seen["interfaces"] = sorted(name for _, name in socket.if_nameindex())
# A detached grandchild with an empty environment: the old clean-up never found those.
subprocess.Popen(
    ["setsid", "sh", "-c", f"sleep {LATE}; echo late > {MARK}"],
    env={}, start_new_session=True, stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
with open(os.path.join(os.environ["COURSE_GRADING_RECORDS"], "seen.json"), "w") as file:
    json.dump(seen, file)
"""


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    """Run the probe notebook in a sandbox as the grader does; what it saw, and the mark path."""
    if sandbox.choose().kind != "bwrap":
        pytest.skip(f"no sandbox here: {sandbox.choose().why}")
    outside = tmp_path_factory.mktemp("grader-side")  # in the grader's own temp folder
    classmate = outside / "classmate" / "00_welcome.ipynb"
    classmate.parent.mkdir()
    classmate.write_text("{}")
    scratch = kernel.scratch_folder()
    try:
        kernel.private_course(scratch, kernel.TreeGuard().files, 0)
        mark = scratch / "tmp" / "late.txt"

        def inside(path: Path) -> Path:  # a scratch path as the student's process sees it
            return sandbox.seen(sandbox.choose(), scratch, path)

        writes = {
            "outside": str(outside / "planted.txt"),
            "classmate": str(classmate),
            "venv": os.path.join(sys.prefix, "planted.txt"),
            "data": str(ROOT / "data" / "planted.txt"),
            "course copy": str(inside(scratch / "course" / "__init__.py")),
            "own notebook": str(inside(scratch / "probe.ipynb")),
            "records": str(inside(scratch / "records" / "x.rec")),
            "tmp": "/tmp/x.txt",
        }
        looks = {
            "classmate": str(classmate),
            "templates": str(ROOT / "notebooks" / "00_welcome.ipynb"),
            "checkout": str(ROOT / "course" / "checks"),
            "solutions": str(ROOT / "solutions"),
            "grader tmp": str(outside),
        }
        source = f"WRITES = {writes!r}\nLOOKS = {looks!r}\nLATE = {LATE_S}\n"
        source += f"MARK = {str(inside(mark))!r}\n"
        cell = nbformat.v4.new_code_cell(source + PROBE)
        cell.metadata["course_index"] = 0
        notebook = nbformat.v4.new_notebook(cells=[cell])
        os.environ["GRADER_API_TOKEN"] = "s3cret"  # the grader's own secret
        try:
            run = kernel.run(notebook, scratch, "probe.ipynb", budget_s=120, default_timeout_s=60)
        finally:
            os.environ.pop("GRADER_API_TOKEN")
        assert run.end == "complete", run.stderr
        data = json.loads((scratch / "records" / "seen.json").read_text())
        time.sleep(LATE_S + 1.5)  # the detached process would have written by now
        data["late mark"] = mark.exists()
        data["host planted"] = [
            p
            for p in (outside / "planted.txt", Path(writes["venv"]), Path(writes["data"]))
            if p.exists()
        ]
        data["host /tmp/x.txt"] = Path("/tmp/x.txt").exists()
        return data
    finally:
        kernel.remove_scratch(scratch)


@pytest.mark.parametrize("where", ["outside", "classmate", "venv", "data", "course copy"])
def test_writing_outside_its_scratch_fails(seen, where):
    assert seen[f"write {where}"] is False, seen


def test_its_notebook_is_read_only_and_its_records_and_tmp_are_writable(seen):
    assert seen["write own notebook"] is False
    assert seen["write records"] is True and seen["write tmp"] is True
    assert seen["host planted"] == [] and seen["host /tmp/x.txt"] is False  # /tmp is private


@pytest.mark.parametrize("what", ["classmate", "templates", "checkout", "solutions", "grader tmp"])
def test_the_grader_side_is_invisible(seen, what):
    assert seen[f"see {what}"] is False, seen


def test_the_graders_secrets_stay_out_of_its_environment(seen):
    assert seen["secret"] is None


def test_no_network(seen):
    assert seen["network"] is False and seen["interfaces"] == ["lo"]


def test_a_detached_setsid_process_dies_with_the_run(seen):
    assert seen["late mark"] is False


@pytest.mark.skipif(os.geteuid() != 0, reason="the grader is not root here")
def test_a_root_grader_runs_the_student_as_an_unprivileged_uid(seen):
    assert seen["uid"] == seen["euid"] == sandbox.STUDENT_UID != 0


@pytest.mark.skipif(sandbox.choose().kind == "none", reason="covered by the notice test")
def test_no_notice_when_sandboxed():
    assert sandbox.notice() is None


def test_the_notice_names_why_and_what_is_unprotected():
    line = sandbox.notice(sandbox.Choice("none", None, "bubblewrap is not installed"))
    assert line.startswith("warning: no sandbox (bubblewrap is not installed)")
    assert "\n" not in line and "docs/grading.md" in line
    line = sandbox.notice(sandbox.Choice("uid", 100123, "no namespaces"))
    assert "network" in line and "\n" not in line


@pytest.mark.slow
def test_without_a_sandbox_progress_says_so_in_one_line_before_grading(tmp_path):
    env = dict(os.environ, **{sandbox.SANDBOX_ENV: "0"})
    done = subprocess.run(
        [sys.executable, "-m", "course.classroom", "progress", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    lines = [line for line in done.stderr.splitlines() if "no sandbox" in line]
    assert len(lines) == 1 and "COURSE_SANDBOX=0" in lines[0], done.stderr[-2000:]
