"""Supervising the student's process: a private course copy, limits, and an end that is sure.

Each graded notebook runs in a scratch folder holding a fresh **private copy of the course
package** (from the grader's in-memory snapshot, not from disk), whose ``course/nn.py`` holds
only the exports of the notebooks *before* the graded one: a notebook-03 answer cannot import
notebook 03's own answer; and whose check modules hold no reference, mistake or judgement
(:mod:`~course.grading.stripped`): the probe needs none of them. The student's process imports that copy (it is first on
``PYTHONPATH``; the editable install of the repository comes after it).

The process tree: grader (trusted) -> the sandbox (bubblewrap, whose init is the student's
parent, or ``setpriv`` to a uid of its own) -> the student's process, which runs the cells in an
IPython shell (:func:`_execute`: magics work, no Jupyter kernel, no ports, about a second to
start). Nothing that waits for it is in its reach: the grader is another uid or outside its PID
namespace (only without any sandbox does a bare parent interpreter stand between them). The run
gets a cgroup of its own where the machine allows (:mod:`~course.grading.runlimits`: processes,
memory of the whole run, CPU), an address-space limit per process (``RLIMIT_AS``), an
environment that is an allow-list (:func:`student_env`), a time limit *per cell* (the cell is
interrupted and the next one runs: an infinite loop costs its own exercise and those that call
it) and a hard deadline for the whole notebook (:func:`course.grading.engine.deadline_s`). Both run inside the operating-system boundary of
:mod:`~course.grading.sandbox` (bubblewrap: only the scratch folder writable, no network, a PID
namespace; an unprivileged uid when the grader is root): when the run ends, or the deadline
passes, its namespace dies and the grader waits until no process is left in it. Without a
sandbox, every process carries a random token in its environment and the grader kills every
process carrying it. What the student's process logs (which cells failed, timed out) only
explains a missing record; it never makes a pass. What it leaves in the scratch folder is read
back with :func:`read_back`: never through a link, never blocking, regular files of bounded size.

The grader's own ``course`` tree is hashed before and after each notebook (:class:`TreeGuard`):
a change is flagged on that notebook's results, and restored from the snapshot when the tree
is the run's own pinned copy (:mod:`~course.grading.pinned`), never in an instructor's checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from course.grading import runlimits, sandbox

COURSE = Path(__file__).resolve().parents[1]  # the grader's own course package
ROOT = COURSE.parent
DEFAULT_MEMORY_GB = 8.0
STARTUP_S = 90  # the kernel's start and the prelude, on a busy 2-core machine
TOKEN_ENV = "COURSE_GRADING_TOKEN"
# "1": a changed course tree is restored even outside a pinned copy; "0": never (only flagged).
RESTORE_ENV = "COURSE_GRADING_RESTORE"
PINNED_ENV = "COURSE_GRADING_PINNED"  # the pinned copy's root (course.grading.pinned sets it)
OFFLINE_ENV = {
    "COURSE_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MPLBACKEND": "Agg",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# Variables passed on from the grader's environment when set, one by one (every other variable
# of the student's process is set here): which model and device the notebooks use, and the
# read-only data mirror. Nothing else of the grader's environment reaches a student.
PASSED_ON = ("COURSE_DATA_MIRROR", "COURSE_MODEL", "COURSE_DEVICE", "COURSE_BF16")
# Per-run writable caches, inside the student's scratch: variable -> folder name.
CACHES = {
    "XDG_CACHE_HOME": "cache",
    "TORCHINDUCTOR_CACHE_DIR": "cache/torchinductor",
    "TRITON_CACHE_DIR": "cache/triton",
    "MPLCONFIGDIR": "cache/matplotlib",
    "TORCH_HOME": "cache/torch",
    "HF_DATASETS_CACHE": "cache/hf-datasets",
    "HF_ASSETS_CACHE": "cache/hf-assets",
}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
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


def restoring() -> bool:
    """Whether a changed course tree is restored (else only flagged).

    Only the grader's own pinned copy (:mod:`~course.grading.pinned`) is restored, or a tree
    whose owner asks for it with ``COURSE_GRADING_RESTORE=1``: an instructor's checkout is
    never written to (their edit is theirs, and it grades nobody in a run already started)."""
    wanted = os.environ.get(RESTORE_ENV, "").strip()
    if wanted in ("0", "1"):
        return wanted == "1"
    return pinned_root() is not None


def pinned_root() -> Path | None:
    """The pinned copy this grader imported its course from, if it runs from one."""
    raw = os.environ.get(PINNED_ENV, "").strip()
    return ROOT if raw and Path(raw).resolve() == ROOT else None


class TreeGuard:
    """The grader's ``course`` tree as it was when the trusted modules were imported."""

    def __init__(self, root: Path = COURSE, files: dict[str, bytes] | None = None):
        self.root = root
        self.files = _files(root) if files is None else dict(files)
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
            if not restoring():
                return changed
            for name in changed:
                path = self.root / name
                _writable(self.root, path)  # a pinned copy is read-only
                if name in self.files:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    if path.is_symlink() or path.is_dir():
                        _remove(path)
                    path.write_bytes(self.files[name])
                else:
                    _remove(path)
            return changed


def _writable(root: Path, path: Path) -> None:
    """Let the grader write ``path`` again: every existing folder from ``root`` down to it."""
    parts = path.relative_to(root).parts
    for depth in range(len(parts)):
        folder = root.joinpath(*parts[:depth])
        if folder.is_dir() and not folder.is_symlink():
            folder.chmod(folder.stat().st_mode | stat.S_IRWXU)
    if path.is_file() and not path.is_symlink():
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


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
    """Write the course package into ``scratch/course`` with ``nn.py`` cut before ``number`` and
    the check modules without their answers (:mod:`~course.grading.stripped`)."""
    from course.grading.stripped import for_students

    target = scratch / "course"
    for name, content in for_students(files).items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "nn.py":
            content = nn_before(content.decode("utf-8"), number).encode("utf-8")
        path.write_bytes(content)
    samples = ROOT / "data" / "samples"
    if samples.is_dir():
        shutil.copytree(samples, scratch / "data" / "samples", dirs_exist_ok=True)
    return target


# --- the student's process ---------------------------------------------------------------------


class CellTimeout(BaseException):  # noqa: N818 - raised like KeyboardInterrupt, not an error
    """The cell ran past its time limit (``except Exception`` in student code does not catch it)."""


def _execute(notebook_path: str, log_path: str, default_timeout: str) -> None:
    """The student's process: run the cells in an IPython shell (no Jupyter kernel, no ports).

    Each cell gets its time limit as an interval timer; when it fires, the cell is interrupted
    with :class:`CellTimeout` and the next cell runs. Logs how each cell ended (untrusted).
    """
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from course.grading.streams import BoundedStream, exception_text

    cells = json.loads(Path(notebook_path).read_text(encoding="utf-8"))["cells"]
    # What the student's code prints and raises, bounded (head and tail kept, the cut said):
    # output size never drives this process's memory.
    streams = sys.stdout, sys.stderr = BoundedStream(sys.stdout), BoundedStream(sys.stderr)

    def log(row: dict) -> None:
        with open(log_path, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")

    def expire(signum, frame) -> None:  # noqa: ANN001 - a signal handler
        raise CellTimeout

    config = Config()
    config.HistoryManager.enabled = False
    # A cell's last value is not displayed: outputs are never graded, and its repr (a 200 MB
    # string's, a student's __repr__) would be built and cached for nothing.
    config.InteractiveShell.ast_node_interactivity = "none"
    shell = InteractiveShell.instance(config=config)

    def traceback(exc_tuple=None, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        error = (exc_tuple or sys.exc_info())[1]  # IPython's own formatter copies the message
        sys.stderr.write(f"{exception_text(error)}\n")  # many times over: one bounded line

    shell.showtraceback = traceback
    signal.signal(signal.SIGALRM, expire)
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        index = cell.get("metadata", {}).get("course_index")
        limit = float(cell.get("metadata", {}).get("course_timeout", default_timeout))
        log({"cell": index, "status": "started", "t": time.time()})
        row = {"cell": index, "status": "ok"}
        try:
            signal.setitimer(signal.ITIMER_REAL, limit)
            result = shell.run_cell(source, store_history=False)
            signal.setitimer(signal.ITIMER_REAL, 0)
            error = result.error_before_exec or result.error_in_exec
        except CellTimeout as timeout:  # fired outside the cell's own code
            error = timeout
        signal.setitimer(signal.ITIMER_REAL, 0)
        if isinstance(error, CellTimeout):
            row["status"] = "timeout"
        elif error is not None:
            row["status"] = "error"
            row["message"] = exception_text(error)[:500]
        row["t"] = time.time()
        log(row)
    log({"end": "complete"})
    for stream in streams:
        stream.close()  # the tail kept, and how much was cut
    os._exit(0)  # the records are written and closed: skip the interpreter's slow teardown


# Its parent: a bare interpreter that only waits for it. A student process that kills its parent
# kills this, not the grader; the grader then ends the run and kills what is left.
PARENT = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
STUDENT = "import sys; from course.grading.kernel import _execute; _execute(*sys.argv[1:])"


# --- supervising -----------------------------------------------------------------------------


@dataclass
class Run:
    """What the grader learns from one run, once every process of it has ended."""

    records: Path  # the folder of probe records (read by the trusted side)
    cells: dict[int, dict] = field(default_factory=dict)  # graded index -> last log row
    end: str = "crash"  # complete; dead (the student's process died); deadline; crash (its parent
    # was killed)
    stderr: str = ""
    seconds: float = 0.0
    limit: str | None = None  # the run's own limit that stopped it: "memory", "processes"


def limits_text(memory_gb: float = DEFAULT_MEMORY_GB) -> str:
    """The limits each run gets here, as the setup check reports them (and no other)."""
    return (
        f"{runlimits.describe(memory_gb)}; {memory_gb:g} GB address space per process; a time "
        "limit per cell and a deadline per notebook"
    )


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
        runlimits.sigkill(pids)
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

    choice = sandbox.choose()
    records = scratch / "records"
    records.mkdir()
    path, log = scratch / name, scratch / "cells.jsonl"
    nbformat.write(notebook, path)
    # What the student's process may write (its uid owns them when the grader is root); the
    # rest of the scratch (its course copy, this notebook) it sees read-only.
    writable = [records, log, scratch / "tmp", scratch / ".ipython", *_caches(scratch).values()]
    sandbox.prepare(choice, scratch, writable)
    token = secrets.token_hex(16)
    env = student_env(choice, scratch, token, threads)
    inside = lambda p: str(sandbox.seen(choice, scratch, p))  # noqa: E731 - as the student sees it
    command = sandbox.prefix(choice, scratch, writable)
    if choice.kind == "none":  # its parent, as the grader's uid: a kill of it is not the grader's
        command += [str(sandbox.interpreter()), "-S", "-c", PARENT]
    # In bwrap and uid modes the student's process is started directly: what waits for it (the
    # sandbox's init, the grader) is out of its reach (another uid, or outside its namespace).
    command += [str(sandbox.interpreter()), "-c", STUDENT]
    command += [inside(path), inside(log), str(int(default_timeout_s))]
    group = runlimits.create(int(memory_gb * 1024**3), float(threads))
    nproc = choice.kind == "uid" and (group is None or "pids" not in group.folders)

    def limit_child() -> None:  # between fork and exec: no threads, nothing to lock
        _limit(memory_gb)
        if nproc:  # a uid of its own per run: the per-uid process count is the run's
            limit = runlimits.MAX_PROCESSES
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        if group is not None:
            group.join()

    info_read, info_write = os.pipe() if choice.isolated else (None, None)
    if info_write is not None:  # bwrap says the sandbox's first pid there: its PID namespace
        command[1:1] = ["--info-fd", str(info_write)]
    start = time.time()
    with open(scratch / "stderr.txt", "wb") as errors:
        runner = subprocess.Popen(
            command,
            cwd=scratch / "tmp",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
            pass_fds=() if info_write is None else (info_write,),
            preexec_fn=limit_child,  # noqa: PLW1509 - no threads forked
        )
    namespace = _Namespace(info_read, info_write)
    deadline = False
    try:
        runner.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        deadline = True
    if group is not None:
        group.kill()  # every process of the run, whatever its uid, session or namespace
    kill_all(token, runner.pid)  # whatever is left: the student's process, its children
    runner.wait()
    namespace.wait_empty()  # every process of the sandbox has ended (its PID namespace died)
    sandbox.kill_uid(choice)
    result = Run(records, seconds=time.time() - start)
    result.stderr = _tail(scratch / "stderr.txt")
    if group is not None:
        result.limit = group.hit()
        group.remove()
    # (none mode) its parent killed: a signal here; the parent passes on the student's own
    # death as 256 - N, which stays "dead".
    killed = choice.kind == "none" and runner.returncode < 0
    result.end = "crash" if killed else "dead"  # until the log says otherwise
    for row in _jsonl(log):
        if isinstance(row.get("cell"), int):
            result.cells[row["cell"]] = row
        elif row.get("end") == "complete":
            result.end = "complete"
    if deadline:
        result.end = "deadline"
    return result


def _caches(scratch: Path) -> dict[str, Path]:
    return {name: scratch / folder for name, folder in CACHES.items()}


def student_env(choice: sandbox.Choice, scratch: Path, token: str, threads: int = 1) -> dict:
    """The student's whole environment: an allow-list, each variable named here.

    PATH (the venv first), a fixed locale, a private HOME and TMPDIR, the thread settings, the
    offline switches, the grading token and records folder, the course copy on PYTHONPATH,
    per-run writable caches in the scratch (torch inductor, triton, matplotlib, the writable
    Hugging Face folders), the prepared model cache read-only (``HF_HOME``), and the few
    course variables of :data:`PASSED_ON`. Whatever the grader's process holds or sets at run
    time (torch writes ``TORCHINDUCTOR_CACHE_DIR`` into it) never reaches a student.
    """
    from course.grading.instrument import RECORDS_ENV

    inside = lambda p: str(sandbox.seen(choice, scratch, p))  # noqa: E731
    bin_folder = sandbox.interpreter().parent
    env = {
        "PATH": f"{bin_folder}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": inside(scratch),
        # Never the grader's temp folder (where the class's hand-ins are unpacked).
        "TMPDIR": "/tmp" if choice.isolated else str(scratch / "tmp"),
        **OFFLINE_ENV,
        **{name: str(threads) for name in THREAD_VARIABLES},
        TOKEN_ENV: token,
        RECORDS_ENV: inside(scratch / "records"),
        "PYTHONPATH": inside(scratch),
        "IPYTHONDIR": inside(scratch / ".ipython"),
        "COURSE_DATA_DIR": str(Path(os.environ.get("COURSE_DATA_DIR") or ROOT / "data").resolve()),
        **{name: inside(path) for name, path in _caches(scratch).items()},
    }
    hub = sandbox.hf_home()
    if hub is not None and sandbox.reachable(choice, hub):  # HOME changed: where the prepared
        env["HF_HOME"] = str(hub)  # models are (read-only); else the notebooks' fallbacks
    for name in PASSED_ON:
        if os.environ.get(name, "").strip():
            env[name] = os.environ[name]
    return env


class _Namespace:
    """The sandbox's PID namespace, learnt from bwrap's ``--info-fd``: the grader waits until no
    process is left in it (the kernel kills them all when its first process ends)."""

    def __init__(self, read: int | None, write: int | None):
        self.inode: int | None = None
        if write is not None:
            os.close(write)
        if read is None:
            return
        data = b""
        with os.fdopen(read, "rb", buffering=0) as info:
            while b"}" not in data:  # bwrap writes it once the sandbox is set up
                chunk = info.read(4096)
                if not chunk:
                    break
                data += chunk
        try:
            child = int(json.loads(data.decode() or "{}")["child-pid"])
            self.inode = os.stat(f"/proc/{child}/ns/pid").st_ino
        except (ValueError, KeyError, OSError):
            self.inode = None  # it ended already (or never started): nothing to wait for

    def wait_empty(self, limit_s: float = 30.0) -> None:
        if self.inode is None:
            return
        end = time.time() + limit_s
        while time.time() < end and self._members():
            time.sleep(0.05)

    def _members(self) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat(f"/proc/{entry}/ns/pid").st_ino != self.inode:
                        continue
                    with open(f"/proc/{entry}/stat", "rb") as file:
                        state = file.read().rsplit(b")", 1)[1].split()[0]
                except (OSError, IndexError):
                    continue
                if state not in (b"Z", b"X"):  # a zombie runs nothing (a subreaper reaps it)
                    found.append(int(entry))
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return found


MAX_READ_BACK = 16 * 1024**2  # the log and stderr the student's process leaves


def read_back(path: Path, limit: int = MAX_READ_BACK, tail: bool = False) -> bytes | None:
    """A file the student's process could have written: opened without following a link and
    without blocking (a named pipe), read only if it is a regular file; at most ``limit``
    bytes (the last ones with ``tail``), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > limit and not tail:
            return None
        if tail:
            file.seek(max(0, info.st_size - limit))
        return file.read(limit)


def _tail(path: Path, size: int = 4000) -> str:
    data = read_back(path, size, tail=True)
    return "" if data is None else data.decode("utf-8", errors="replace")


def _jsonl(path: Path) -> list[dict]:
    data = read_back(path)
    if data is None:
        return []
    rows = []
    for line in data.decode("utf-8", errors="replace").splitlines():
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
