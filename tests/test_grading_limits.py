"""Hostile hand-ins bounded, each graded beside an honest control (0.1 right) and a wrong one
(0.1 wrong) in the same run: the session's one class of notebook-00 hand-ins (tests/hostile.py,
JOBS=3), which the other hostile modules share.

Family 2, the supervisor out of reach and limits per run: a fork bomb, a memory bomb in many
processes, a ``/dev/shm`` bomb, ``SIGSTOP`` of its parent and of every process it may signal,
``kill(-1, SIGKILL)``, 999 cells that each sleep, 300 busy processes. Family 3, the grader's
environment: a hand-in that prints every variable it can see into its own error message (its
feedback) while the grader holds a database URL, a ``*_PAT`` token and an ``AWS_SESSION_KEY*``.

Every hostile hand-in's softmax is wrong: any point it earned would be undeserved. For each:
0 points, the honest control 1 and the wrong one 0 (as alone), the run of every notebook ended
within the stated bound (:func:`course.grading.engine.deadline_s`), no grader variable in any
output of the class, and no process of the class left behind.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import nbformat
import pytest

from course.grading import engine, kernel, runlimits, sandbox
from tests import hostile
from tests.hostile import CONTROL, MEMORY_GB, WELCOME, WRONG, WRONG_ONE

SECRET = secrets.token_hex(10)
GRADER_SECRETS = {
    "DATABASE_URL": f"postgres://grader:{SECRET}@db.example/grades",
    "GITHUB_PAT": f"ghp_{SECRET}",
    "AWS_SESSION_KEY_ID": f"ASIA{SECRET}",
}

# Each runs in the answer cell, before a wrong softmax.
ATTACKS = {
    "fork_bomb": (
        "import os\n"
        "for _ in range(100000):\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        pass\n"
    ),
    "memory_bomb": (
        "import os\n"
        "for _ in range(8):\n"
        "    if os.fork() == 0:\n"
        "        hold = [b'x' * 2**28 for _ in range(8)]  # 2 GB each, written\n"
        "        import time; time.sleep(120)\n"
    ),
    "shm_bomb": (
        "import os\n"
        "for folder in ('/dev/shm', '/tmp'):\n"
        "    try:\n"
        "        with open(os.path.join(folder, 'fill'), 'wb') as f:\n"
        "            for _ in range(24):\n"
        "                f.write(b'x' * 2**28)\n"
        "    except OSError:\n"
        "        pass\n"
    ),
    "stop_parent": (
        "import os, signal\n"
        "for target in (os.getppid(), -1):\n"
        "    try:\n"
        "        os.kill(target, signal.SIGSTOP)\n"
        "    except OSError:\n"
        "        pass\n"
    ),
    "kill_everyone": (
        "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n"
    ),
    "busy_processes": (
        "import os\n"
        "for _ in range(300):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            while True:\n"
        "                pass\n"
        "    except OSError:\n"
        "        break\n"
    ),
    "show_environment": (
        "import os\nraise RuntimeError(' '.join(f'{k}={v}' for k, v in os.environ.items()))\n"
    ),
}
MANY_CELLS = 990  # with the hand-in's own cells, just under limits.MAX_CELLS (1000)
MANY = "0_many_cells"  # sorts first: it starts first, and its wait overlaps the class's grading

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        sandbox.choose().kind != "bwrap", reason=f"no sandbox here: {sandbox.choose().why}"
    ),
]


def _notebook(answer: str, extra_cells: int = 0) -> nbformat.NotebookNode:
    notebook = hostile.notebook(answer)
    index = next(i for i, c in enumerate(notebook.cells) if c.source == answer)
    for number in range(extra_cells):  # a chain: each sleeps, the answer needs them all
        previous = f"pad{number - 1}" if number else "0"
        cell = nbformat.v4.new_code_cell(f"import time\ntime.sleep(1)\npad{number} = {previous}")
        notebook.cells.insert(index + number, cell)
    if extra_cells:
        notebook.cells[index + extra_cells].source = WRONG + f"last = pad{extra_cells - 1}\n"
    return notebook


def _build(klass: Path) -> dict[str, str]:
    for name, code in ATTACKS.items():
        (klass / name).mkdir()
        nbformat.write(_notebook(code + WRONG), klass / name / WELCOME)
    (klass / MANY).mkdir()
    nbformat.write(_notebook(WRONG, MANY_CELLS), klass / MANY / WELCOME)
    return GRADER_SECRETS  # held by the grader while the class is graded


hostile.add("limits", _build)


@pytest.fixture(scope="module")
def graded(hostile_class):
    return {
        "results": hostile_class.results,
        "rows": hostile_class.rows,
        "texts": hostile_class.texts,
        "seconds": hostile_class.seconds,
    }


def test_the_honest_control_and_the_wrong_one_grade_as_alone(graded):
    assert graded["rows"][CONTROL]["0.1"] == "1", graded["results"][CONTROL]
    assert graded["rows"][WRONG_ONE]["0.1"] == "0"


@pytest.mark.parametrize("attack", [*ATTACKS, MANY])
def test_no_hostile_hand_in_earns_a_point(graded, attack):
    assert graded["rows"][attack]["0.1"] == "0", graded["results"][attack]


@pytest.mark.parametrize("attack", [*ATTACKS, MANY])
def test_every_run_ended_within_the_stated_bound(graded, attack):
    bound = engine.deadline_s(0) + kernel.STARTUP_S  # the run's bound, and the replay after it
    assert all(r.seconds <= bound for r in graded["results"][attack]), graded["results"][attack]


def test_the_many_cells_hand_in_was_stopped_by_the_notebook_bound(graded):
    (result,) = graded["results"][MANY]
    assert result.status == "timeout" and result.seconds >= engine.deadline_s(0) - 5, result


def test_the_bombs_met_the_runs_own_limits_and_said_so(graded):
    if "memory" in runlimits.available():
        message = graded["results"]["memory_bomb"][0].message
        assert graded["results"]["memory_bomb"][0].status in ("error", "failed"), message


def test_no_grader_variable_reaches_any_output(graded):
    leaked = [t for t in graded["texts"] if SECRET in t]
    assert leaked == []
    shown = graded["results"]["show_environment"][0].message
    assert "RuntimeError" in shown and "PATH=" in shown  # it did print what it saw


def test_no_process_of_the_class_is_left(graded):
    # A graded process carries a grading token and the data folder of the checkout that graded
    # it: one of another checkout's grading (CI's layouts, graded meanwhile from clones) is not
    # of this class.
    data = Path(os.environ.get("COURSE_DATA_DIR") or kernel.ROOT / "data").resolve()
    ours = f"COURSE_DATA_DIR={data}".encode()
    mine = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as file:
                    variables = file.read().split(b"\0")
            except OSError:
                continue
            graded = any(v.startswith(kernel.TOKEN_ENV.encode() + b"=") for v in variables)
            if graded and ours in variables:
                mine.append(int(entry))
    assert mine == []


def test_the_setup_check_reports_the_limits_that_apply():
    line = kernel.limits_text(MEMORY_GB)
    for name in runlimits.available():
        assert {"pids": "processes", "memory": "memory", "cpu": "CPU"}[name] in line
    json.dumps(line)
