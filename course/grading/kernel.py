"""Supervising the student's kernel: a private course copy, limits, and an end that is sure.

Each graded notebook runs in a scratch folder holding a fresh **private copy of the course
package** (from the grader's in-memory snapshot, not from disk), whose ``course/nn.py`` holds
only the exports of the notebooks *before* the graded one: a notebook-03 answer cannot import
notebook 03's own answer. The kernel imports that copy (it is first on ``PYTHONPATH``; the
editable install of the repository comes after it).

The process tree: grader (trusted) -> runner (nbclient, untrusted) -> kernel (student code).
The runner and the kernel get an address-space limit (``RLIMIT_AS``), offline environment
variables, a time limit *per cell* (the kernel is interrupted and the next cell runs: an
infinite loop costs its own exercise and those that call it) and a hard deadline for the whole
notebook. Every process they start carries a random token in its environment; when the runner
ends, or the deadline passes, the grader kills every process carrying it. What the runner logs
(which cells failed, timed out) is used only to explain a missing record, never to pass.

The grader's own ``course`` tree is hashed before and after each notebook (:class:`TreeGuard`):
a change is restored from the snapshot and flagged on that notebook's results.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

COURSE = Path(__file__).resolve().parents[1]  # the grader's own course package
ROOT = COURSE.parent
DEFAULT_MEMORY_GB = 8.0
STARTUP_S = 90  # the kernel's start and the prelude, on a busy 2-core machine
TOKEN_ENV = "COURSE_GRADING_TOKEN"
# "0": a changed course tree is flagged but not restored (developing the course while grading).
RESTORE_ENV = "COURSE_GRADING_RESTORE"
OFFLINE_ENV = {
    "COURSE_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MPLBACKEND": "Agg",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# Variables of the grader's own environment that must not reach the student's process.
DROPPED_ENV = ("COURSE_CHECK_REPLAY_EVERYWHERE", "PYTHONPATH", "COURSE_GRADING_RECORDS")
NN_SECTION = "# --- from solutions/"


# --- the grader's course tree ----------------------------------------------------------------


def _files(root: Path) -> dict[str, bytes]:
    files = {}
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or not path.is_file() or path.suffix == ".pyc":
            continue
        files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def digest(files: dict[str, bytes]) -> str:
    hasher = hashlib.sha256()
    for name in sorted(files):
        hasher.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return hasher.hexdigest()


class TreeGuard:
    """The grader's ``course`` tree as it was when the trusted modules were imported."""

    def __init__(self, root: Path = COURSE):
        self.root = root
        self.files = _files(root)
        self.digest = digest(self.files)
        self.lock = threading.Lock()

    def restore(self) -> list[str]:
        """Put the tree back as snapshotted; return the files that had changed (sorted).

        With ``COURSE_GRADING_RESTORE=0`` the changes are only reported (someone is editing the
        course while grading runs, as in development)."""
        with self.lock:
            now = _files(self.root)
            if digest(now) == self.digest:
                return []
            changed = sorted(
                name for name in set(now) | set(self.files) if now.get(name) != self.files.get(name)
            )
            if os.environ.get(RESTORE_ENV, "1") == "0":
                return changed
            for name in changed:
                path = self.root / name
                if name in self.files:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    if path.is_symlink() or path.is_dir():
                        _remove(path)
                    path.write_bytes(self.files[name])
                else:
                    _remove(path)
            return changed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def nn_before(text: str, number: int) -> str:
    """``course/nn.py`` keeping only the sections exported by notebooks before ``number``."""
    head, *sections = text.split(NN_SECTION)
    kept = [s for s in sections if s[:2].isdigit() and int(s[:2]) < number]
    return head + "".join(NN_SECTION + s for s in kept).rstrip("\n") + "\n"


def private_course(scratch: Path, files: dict[str, bytes], number: int) -> Path:
    """Write the course package into ``scratch/course`` with ``nn.py`` cut before ``number``."""
    target = scratch / "course"
    for name, content in files.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "nn.py":
            content = nn_before(content.decode("utf-8"), number).encode("utf-8")
        path.write_bytes(content)
    samples = ROOT / "data" / "samples"
    if samples.is_dir():
        shutil.copytree(samples, scratch / "data" / "samples", dirs_exist_ok=True)
    return target


# --- the runner (an untrusted child process) ------------------------------------------------

TIMED_OUT = "CourseGradingTimeout"


def _runner(notebook_path: str, log_path: str, default_timeout: str) -> None:
    """Runner process: execute the notebook cell by cell; log how each cell ended."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    notebook = nbformat.read(notebook_path, as_version=4)

    def log(row: dict) -> None:
        with open(log_path, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")

    def started(cell, cell_index) -> None:  # noqa: ANN001 - nbclient hook
        log({"cell": cell.metadata.get("course_index"), "status": "started", "t": time.time()})

    def executed(cell, cell_index, execute_reply) -> None:  # noqa: ANN001 - nbclient hook
        content = (execute_reply or {}).get("content", {})
        row = {"cell": cell.metadata.get("course_index"), "status": "ok", "t": time.time()}
        if content.get("status") == "error":
            if content.get("ename") == TIMED_OUT:
                row["status"] = "timeout"
            else:
                row["status"] = "error"
                row["message"] = f"{content.get('ename')}: {content.get('evalue')}"[:500]
        log(row)

    client = NotebookClient(
        notebook,
        timeout_func=lambda cell: int(cell.metadata.get("course_timeout", default_timeout)),
        interrupt_on_timeout=True,
        error_on_timeout={"ename": TIMED_OUT, "evalue": "time limit reached", "traceback": []},
        allow_errors=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(Path(notebook_path).parent)}},
        on_cell_start=started,
        on_cell_executed=executed,
        startup_timeout=STARTUP_S,
        iopub_timeout=10,
        shutdown_kernel="immediate",
    )
    try:
        client.execute()
        log({"end": "complete"})
    except DeadKernelError as error:
        log({"end": "dead", "message": str(error)[:300]})


# --- supervising -----------------------------------------------------------------------------


@dataclass
class Run:
    """What the grader learns from one run, once every process of it has ended."""

    records: Path  # the folder of probe records (read by the trusted side)
    cells: dict[int, dict] = field(default_factory=dict)  # graded index -> last log row
    end: str = "crash"  # complete, dead, deadline, crash (the runner died without a word)
    stderr: str = ""
    seconds: float = 0.0


def _limit(memory_gb: float) -> None:
    limit = int(memory_gb * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _pids_with(token: str) -> list[int]:
    """Every process whose environment carries ``token`` (the runner, the kernel, their children)."""
    mark = f"{TOKEN_ENV}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as file:
                if mark in file.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_all(token: str, first: int | None = None) -> None:
    """Kill ``first`` and every process carrying ``token``, until none is left."""
    if first is not None:
        for kill in (os.killpg, os.kill):
            try:
                kill(first, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for _ in range(20):
        pids = _pids_with(token)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def run(
    notebook,  # noqa: ANN001 - an nbformat notebook, instrumented
    scratch: Path,
    name: str,
    budget_s: float,
    default_timeout_s: float,
    memory_gb: float = DEFAULT_MEMORY_GB,
    threads: int = 1,
) -> Run:
    """Execute ``notebook`` in ``scratch`` (which holds the private course copy); wait for its end."""
    import nbformat

    from course.grading.instrument import RECORDS_ENV

    records = scratch / "records"
    records.mkdir()
    path, log = scratch / name, scratch / "cells.jsonl"
    nbformat.write(notebook, path)
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update(OFFLINE_ENV)
    env.update(
        {
            TOKEN_ENV: token,
            RECORDS_ENV: str(records),
            "PYTHONPATH": str(scratch),
            "COURSE_DATA_DIR": os.environ.get("COURSE_DATA_DIR") or str(ROOT / "data"),
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "JUPYTER_RUNTIME_DIR": str(scratch / ".runtime"),
        }
    )
    command = [
        sys.executable,
        "-c",
        "import sys; from course.grading.kernel import _runner; _runner(*sys.argv[1:])",
        str(path),
        str(log),
        str(int(default_timeout_s)),
    ]
    start = time.time()
    runner = subprocess.Popen(
        command,
        cwd=scratch,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: _limit(memory_gb),  # noqa: PLW1509 - no threads forked
    )
    deadline = False
    try:
        _, stderr = runner.communicate(timeout=budget_s)
    except subprocess.TimeoutExpired:
        deadline = True
        kill_all(token, runner.pid)
        _, stderr = runner.communicate()
    kill_all(token, runner.pid)  # whatever the kernel left behind
    result = Run(records, seconds=time.time() - start)
    result.stderr = (stderr or b"")[-4000:].decode("utf-8", errors="replace")
    for row in _jsonl(log):
        if isinstance(row.get("cell"), int):
            result.cells[row["cell"]] = row
        elif row.get("end") in ("complete", "dead"):
            result.end = row["end"]
    if deadline:
        result.end = "deadline"
    return result


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file() or path.stat().st_size > 16 * 1024**2:
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def scratch_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="course-grade-"))


def remove_scratch(scratch: Path) -> None:
    """Remove the scratch folder, whatever permissions the student's code left on it."""

    def retry(function, path, _):  # noqa: ANN001 - shutil.rmtree's onerror
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            function(path)
        except OSError:
            pass

    shutil.rmtree(scratch, onerror=retry)
