"""The operating-system boundary around the student's processes: one choice, one command prefix.

:func:`choose` decides once per grading process how the student's code is fenced in, and
:func:`prefix` turns that choice into the words put before the student's command line:

* ``bwrap`` (`bubblewrap <https://github.com/containers/bubblewrap>`_, Debian package
  ``bubblewrap``): new mount, PID, network, IPC and UTS namespaces. The student sees a
  read-only root built from the Python installation, the virtual environment, ``/usr`` and a
  few ``/etc`` files, the prepared data read-only, its private course copy read-only, and one
  writable folder: its own scratch (with a private ``/tmp`` inside it). Other hand-ins, the
  templates, the grader's checkout, the grader's temp folder and OUT are not in its view; there
  is no network; ``--die-with-parent`` and the PID namespace end every process it started when
  its run ends (a ``setsid`` double fork included). When the grader runs as root, ``setpriv``
  inside the sandbox drops to :data:`STUDENT_UID` (no capabilities, no new privileges) before
  the student's interpreter starts, so its processes are not root anywhere.
  bubblewrap is the sandbox Flatpak is built on: small, maintained, in Debian and Ubuntu, and it
  needs no daemon and no setuid bit where user namespaces are allowed (``unshare -U -r true``).
* ``uid`` (the grader is root, bubblewrap is missing or the kernel refuses namespaces, as in
  a Docker container without ``CAP_SYS_ADMIN``): only ``setpriv`` to an unprivileged uid of its
  own; the grader then kills every process of that uid at the end. The student cannot write
  the grader's files or signal the grader, but it can read what any user can read and reach
  the network.
* ``none`` (not root and no namespaces, or ``COURSE_SANDBOX=0``): as before this module: the
  student's code runs as the grading user; :func:`notice` is the one line said before grading.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SANDBOX_ENV = "COURSE_SANDBOX"  # "0": no sandbox (measuring its cost, developing)
UID_ENV = "COURSE_SANDBOX_UID"
STUDENT_UID = 65534  # nobody: owns nothing the grader reads, when the grader is root
ETC = (  # what Python, torch and IPython read from /etc; never shadow or sudoers
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl",
    "mime.types",
    "hosts",
)


@dataclass(frozen=True)
class Choice:
    """How the student's processes are fenced in: ``kind`` is bwrap, uid or none."""

    kind: str
    uid: int | None  # the uid the student's processes run as (None: the grader's own)
    why: str  # for the notice and the README: what made this the choice

    @property
    def isolated(self) -> bool:
        return self.kind == "bwrap"


def _student_uid() -> int:
    return int(os.environ.get(UID_ENV, STUDENT_UID))


def _setpriv(uid: int) -> list[str]:
    return [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]


def readable_roots() -> list[Path]:
    """What the student's interpreter needs read-only: the Python installation and the venv,
    ``/usr`` and the prepared data and model files (never the grader's checkout as such)."""
    roots = {Path(p).resolve() for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    roots.add(Path("/usr"))
    root = Path(__file__).resolve().parents[2]  # the checkout (kernel.ROOT), without a circle
    data = Path(os.environ.get("COURSE_DATA_DIR") or root / "data").resolve()
    roots.add(data)
    mirror = os.environ.get("COURSE_DATA_MIRROR", "").strip()
    if mirror:
        roots.add(Path(mirror).resolve())
    hub = hf_home()
    if hub is not None:
        roots.add(hub)
    # Never the checkout itself: a venv inside it is bound alone, not its parent.
    return sorted(r for r in roots if r.exists() and r != root)


def hf_home() -> Path | None:
    """The grader's Hugging Face cache folder (models prepared for the notebooks), if any."""
    raw = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    path = Path(raw).resolve()
    return path if path.is_dir() else None


def prefix(
    choice: Choice, scratch: Path, writable: list[Path] = (), chdir: Path | None = None
) -> list[str]:
    """The words before the student's command: it sees ``scratch`` read-only and may write only
    the ``writable`` paths in it (``scratch/tmp`` is also its ``/tmp``). Empty for ``none``."""
    if choice.kind == "none":
        return []
    if choice.kind == "uid":
        return _setpriv(choice.uid)
    scratch = Path(scratch).resolve()
    words = [shutil.which("bwrap") or "bwrap"]
    words += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    words += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if os.geteuid() != 0:
        words.append("--unshare-user")  # the grader's own uid, mapped: namespaces need it
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = Path("/") / name
        if top.is_symlink():
            words += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            words += ["--ro-bind", str(top), str(top)]
    roots = readable_roots()
    made: set[Path] = set()
    for path in roots:  # the folders above each bound path, open to its uid
        words += _folders_above(path, made)
    for root in roots:
        words += ["--ro-bind", str(root), str(root)]
    for name in ETC:
        path = Path("/etc") / name
        if path.exists():
            words += ["--ro-bind", str(path), str(path)]
    words += ["--proc", "/proc", "--dev", "/dev"]
    (scratch / "tmp").mkdir(exist_ok=True)
    words += ["--bind", str(scratch / "tmp"), "/tmp"]  # a private /tmp, inside the scratch
    # After it: a scratch under /tmp (the usual TMPDIR) gets its folders inside the private one.
    words += _folders_above(scratch, made - {Path("/tmp")})
    words += ["--ro-bind", str(scratch), str(scratch)]
    for path in [scratch / "tmp", *writable]:
        path = Path(path).resolve()
        words += ["--bind", str(path), str(path)]
    words += ["--chdir", str(chdir or scratch / "tmp")]
    if choice.uid is not None:
        # The mounts are made as root; then the student's interpreter runs as its own uid.
        words += ["--cap-add", "CAP_SETUID,CAP_SETGID", "--", *_setpriv(choice.uid)]
    else:
        words.append("--")
    return words


def _folders_above(path: Path, made: set[Path]) -> list[str]:
    """bwrap words creating the folders above ``path`` (mode 0755, else bwrap makes them 0700
    and the student's uid could not pass) that ``made`` does not hold yet; adds them to it."""
    words = []
    for parent in reversed(path.parents[:-1]):
        if parent not in made:
            made.add(parent)
            words += ["--perms", "0755", "--dir", str(parent)]
    return words


def _works(words: list[str]) -> bool:
    try:
        done = subprocess.run(
            [*words, sys.executable, "-S", "-c", "pass"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@lru_cache(maxsize=1)
def choose() -> Choice:
    """The strongest boundary this machine allows, tried once per process (a ~50 ms probe)."""
    import tempfile

    if os.environ.get(SANDBOX_ENV, "").strip().lower() in ("0", "off", "no", "false"):
        return Choice("none", None, f"{SANDBOX_ENV}=0")
    root = os.geteuid() == 0
    uid = _student_uid() if root else None
    if shutil.which("bwrap") is None:
        why = "bubblewrap is not installed (apt-get install bubblewrap)"
    else:
        with tempfile.TemporaryDirectory(prefix="course-sandbox-probe-") as scratch:
            choice = Choice("bwrap", uid, "bubblewrap")
            prepare(choice, Path(scratch), [])
            if _works(prefix(choice, Path(scratch))):
                return choice
        why = "bubblewrap cannot create namespaces here (user namespaces or mounts refused)"
    if root:
        # Without a PID namespace the clean-up kills every process of the uid: one uid per
        # grading process, so that two notebooks graded at once never share one.
        uid = int(os.environ.get(UID_ENV) or 100000 + os.getpid() % 100000)
        if _works(_setpriv(uid)):
            return Choice("uid", uid, f"{why}; the student's code runs as uid {uid} only")
    return Choice("none", None, why)


def notice(choice: Choice | None = None) -> str | None:
    """The one line said before grading when the student's code is not sandboxed, else None."""
    choice = choice or choose()
    if choice.kind == "bwrap":
        return None
    if choice.kind == "uid":
        return (
            f"warning: no sandbox ({choice.why}): it can read what any user can read and "
            "reach the network; see README, What grading protects"
        )
    return (
        f"warning: no sandbox ({choice.why}): student code runs as you, with your files and "
        "network; see README, What grading protects"
    )


def prepare(choice: Choice, scratch: Path, writable: list[Path]) -> None:
    """Create the ``writable`` paths of ``scratch`` (folders; a name with a suffix is a file)
    and, when the student has its own uid, give them to it. ``scratch`` itself stays the
    grader's: the student cannot rename or replace what lies in it."""
    for path in [scratch / "tmp", *writable]:
        if path.suffix:
            path.touch()
        else:
            path.mkdir(parents=True, exist_ok=True)
        if choice.uid is not None:
            os.chown(path, choice.uid, choice.uid)
    scratch.chmod(0o755)  # mkdtemp's 0700 would keep another uid out of its own folder


def kill_uid(choice: Choice) -> None:
    """(``uid`` mode) kill every process of the student's uid: its clean-up without a PID
    namespace (``kill -1`` as that uid reaches exactly its processes)."""
    if choice.kind != "uid":
        return
    for _ in range(5):
        done = subprocess.run(
            [*_setpriv(choice.uid), sys.executable, "-S", "-c", KILL_ALL],
            capture_output=True,
            timeout=30,
        )
        if done.returncode == 0:  # nothing was left to kill
            return


# kill(-1) as that uid: every process it may signal but itself; exit 1 while some were found.
KILL_ALL = (
    "import os, signal, sys\n"
    "try:\n    os.kill(-1, signal.SIGKILL)\nexcept ProcessLookupError:\n    sys.exit(0)\n"
    "sys.exit(1)"
)


if __name__ == "__main__":  # make sandbox
    chosen = choose()
    print(f"sandbox: {chosen.kind} ({chosen.why}); student uid: {chosen.uid or os.geteuid()}")
    print(notice(chosen) or "student code runs in the sandbox: see README, What grading protects")
