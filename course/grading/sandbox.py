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
import stat
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


VIEW = Path("/grading")  # where the student sees its scratch folder inside bubblewrap


def readable_roots() -> list[Path]:
    """What the student's interpreter needs read-only, by resolved real path: the Python
    installation and the venv, ``/usr`` and the prepared data and model files (never the
    grader's checkout as such)."""
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


def interpreter() -> Path:
    """The venv's interpreter under the venv's resolved real path (the path bound in the
    sandbox): the venv's own ``bin/python``, not the base interpreter it links to, so that the
    venv's site-packages stay in use."""
    mine = Path(sys.prefix).resolve() / "bin" / Path(sys.executable).name
    return mine if mine.exists() else Path(sys.executable).resolve()


def hf_home() -> Path | None:
    """The grader's Hugging Face cache folder (models prepared for the notebooks), if any."""
    raw = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    path = Path(raw).resolve()
    return path if path.is_dir() else None


def seen(choice: Choice, scratch: Path, path: Path) -> Path:
    """``path`` (inside ``scratch``) as the student's process sees it: under :data:`VIEW` in
    bubblewrap, where the grader's own temp folder is never named; else the path itself."""
    if choice.kind != "bwrap":
        return Path(path)
    return VIEW / Path(path).resolve().relative_to(Path(scratch).resolve())


@dataclass(frozen=True)
class Mount:
    """One entry of the sandbox's mount plan: ``dest`` as the student sees it."""

    kind: str  # ro, rw, symlink, proc, dev
    dest: Path
    source: Path | str | None = None


def plan(scratch: Path, writable: list[Path] = ()) -> list[Mount]:
    """The sandbox's mounts in the order they are made, derived rather than assumed.

    A mount is made after every mount above it (by path), so that none hides another: the
    private ``/tmp`` comes before a venv that lives under ``/tmp``. The folders above each
    mount point are made, mode 0755, right before it (see :func:`words`), so the student uid can
    pass them whatever bwrap's defaults are. The scratch is seen at :data:`VIEW`.
    """
    scratch = Path(scratch).resolve()
    mounts: list[Mount] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = Path("/") / name
        if top.is_symlink():
            mounts.append(Mount("symlink", top, os.readlink(top)))
        elif top.is_dir():
            mounts.append(Mount("ro", top, top))
    mounts += [Mount("ro", root, root) for root in readable_roots()]
    mounts += [Mount("ro", Path("/etc") / n, Path("/etc") / n) for n in ETC]
    mounts = [m for m in mounts if m.kind == "symlink" or Path(m.source).exists()]
    mounts += [Mount("proc", Path("/proc")), Mount("dev", Path("/dev"))]
    mounts.append(Mount("rw", Path("/tmp"), scratch / "tmp"))  # a private /tmp, in the scratch
    mounts.append(Mount("ro", VIEW, scratch))
    for path in writable:
        path = Path(path).resolve()
        if path != scratch / "tmp":
            mounts.append(Mount("rw", VIEW / path.relative_to(scratch), path))
    mounts.append(Mount("rw", VIEW / "tmp", scratch / "tmp"))
    # Shallower mount points first (a stable sort keeps the order above among equals).
    return sorted(mounts, key=lambda m: len(m.dest.parts))


def words(mounts: list[Mount]) -> list[str]:
    """bwrap's words for a plan: each mount preceded by the folders above it, mode 0755."""
    out: list[str] = []
    for mount in mounts:
        for parent in reversed(mount.dest.parents[:-1]):
            out += ["--perms", "0755", "--dir", str(parent)]
        if mount.kind == "symlink":
            out += ["--symlink", str(mount.source), str(mount.dest)]
        elif mount.kind in ("proc", "dev"):
            out += [f"--{mount.kind}", str(mount.dest)]
        else:
            flag = "--ro-bind" if mount.kind == "ro" else "--bind"
            out += [flag, str(mount.source), str(mount.dest)]
    return out


def prefix(
    choice: Choice, scratch: Path, writable: list[Path] = (), chdir: Path | None = None
) -> list[str]:
    """The words before the student's command: it sees ``scratch`` read-only (at :data:`VIEW`
    in bubblewrap) and may write only the ``writable`` paths in it (``scratch/tmp`` is also its
    ``/tmp``). Empty for ``none``. ``chdir`` is given as the grader names it."""
    if choice.kind == "none":
        return []
    if choice.kind == "uid":
        return _setpriv(choice.uid)
    scratch = Path(scratch).resolve()
    (scratch / "tmp").mkdir(exist_ok=True)
    out = [bwrap() or "bwrap"]
    out += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    out += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if os.geteuid() != 0:
        out.append("--unshare-user")  # the grader's own uid, mapped: namespaces need it
    out += words(plan(scratch, list(writable)))
    out += ["--chdir", str(seen(choice, scratch, chdir or scratch / "tmp"))]
    if choice.uid is not None:
        # The mounts are made as root; then the student's interpreter runs as its own uid.
        out += ["--cap-add", "CAP_SETUID,CAP_SETGID", "--", *_setpriv(choice.uid)]
    else:
        out.append("--")
    return out


def bwrap() -> str | None:
    """The bubblewrap executable on PATH, or None."""
    return shutil.which("bwrap")


def _works(words: list[str]) -> str | None:
    """None when the interpreter runs behind ``words``, else what went wrong (one line)."""
    try:
        done = subprocess.run(
            [*words, str(interpreter()), "-S", "-c", "pass"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"{type(error).__name__}: {error}"
    if done.returncode == 0:
        return None
    said = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
    return said[-1][:300] if said else f"exit status {done.returncode}"


@lru_cache(maxsize=1)
def choose() -> Choice:
    """The strongest boundary this machine allows, tried once per process (a ~50 ms probe).

    As root it is never ``none`` unless ``COURSE_SANDBOX=0``: without bubblewrap the student's
    code runs as a uid of its own, and where that uid cannot run the interpreter the setup check
    (:mod:`course.grading.setup`) refuses to grade and says why."""
    import tempfile

    if os.environ.get(SANDBOX_ENV, "").strip().lower() in ("0", "off", "no", "false"):
        return Choice("none", None, f"{SANDBOX_ENV}=0")
    root = os.geteuid() == 0
    uid = _student_uid() if root else None
    if bwrap() is None:
        why = "bubblewrap is not installed (apt-get install bubblewrap)"
    else:
        choice = Choice("bwrap", uid, "bubblewrap")
        for _ in range(3):  # a busy machine can fail one start: only a repeated failure counts
            with tempfile.TemporaryDirectory(prefix="course-sandbox-probe-") as scratch:
                prepare(choice, Path(scratch), [])
                failed = _works(prefix(choice, Path(scratch)))
            if failed is None:
                return choice
        problems = unreachable(choice)
        if problems:  # bwrap works, the student uid cannot run the interpreter: say so
            return Choice("bwrap", uid, f"bubblewrap; but {problems[0]}")
        why = f"bubblewrap failed here: {failed}"
    if root:
        # Without a PID namespace the clean-up kills every process of the uid: one uid per
        # grading process, so that two notebooks graded at once never share one.
        uid = int(os.environ.get(UID_ENV) or 100000 + os.getpid() % 100000)
        return Choice("uid", uid, f"{why}; the student's code runs as uid {uid} only")
    return Choice("none", None, why)


def _can(uid: int, info: os.stat_result, bits: int) -> bool:
    """Whether ``uid`` (in no group of the owner's) has ``bits`` (of 0o7) on a file."""
    if uid == 0:
        return True
    if info.st_uid == uid:
        return (info.st_mode >> 6) & bits == bits
    return info.st_mode & bits == bits


def reachable(choice: Choice, path: Path) -> bool:
    """Whether the student uid of ``choice`` can pass every folder down to ``path`` (always in
    bwrap, where the folders above a bound tree are made 0755, and without a uid of its own)."""
    if choice.uid is None or choice.kind == "bwrap":
        return True
    for folder in [*reversed(Path(path).parents), Path(path)]:
        try:
            if not _can(choice.uid, folder.stat(), 0o1):
                return False
        except OSError:
            return False
    return True


def unreachable(choice: Choice) -> list[str]:
    """Why the student uid of ``choice`` cannot run the interpreter or reach its scratch, as
    sentences (empty: it can). In bubblewrap only the real folders inside a bound tree count:
    the folders above each mount point are made 0755 by the plan."""
    import importlib.util
    import tempfile

    if choice.uid is None:
        return []
    roots = readable_roots() if choice.kind == "bwrap" else []
    what = {
        interpreter(): "execute the interpreter",
        Path(os.path.realpath(interpreter())): "execute the interpreter",
    }
    if choice.kind == "uid":  # its scratch folders are made in the grader's temp folder
        what[Path(tempfile.gettempdir()).resolve()] = "reach its scratch folder in"
    # What every student kernel imports: installed under a umask of 077, it is the grader's alone.
    torch = importlib.util.find_spec("torch")
    if torch is not None and torch.origin:
        what[Path(os.path.realpath(torch.origin))] = "read the installed package"
    found = []
    for target, doing in what.items():
        top = next((r for r in roots if target == r or r in target.parents), None)
        chain = [*reversed(target.parents), target] if doing.startswith("reach") else []
        chain = chain or list(reversed(target.parents))
        for folder in chain:
            if top is not None and folder != top and top not in folder.parents:
                continue  # above a mount point: made 0755 by the plan
            try:
                info = folder.stat()
            except OSError:
                continue
            if not _can(choice.uid, info, 0o1):
                mode = f"{stat.S_IMODE(info.st_mode):o}"
                found.append(
                    f"the student uid {choice.uid} cannot {doing} {target}: {folder} is mode "
                    f"{mode} (owner uid {info.st_uid})"
                )
                break
        else:
            bits = 0o5 if doing.startswith("execute") else 0o4 if doing.startswith("read") else 0
            try:
                info = target.stat()
            except OSError:
                continue
            if bits and not _can(choice.uid, info, bits):
                mode = f"{stat.S_IMODE(info.st_mode):o}"
                found.append(
                    f"the student uid {choice.uid} cannot {doing} {target}: it is mode {mode} "
                    f"(owner uid {info.st_uid})"
                )
    return list(dict.fromkeys(found))


def notice(choice: Choice | None = None) -> str | None:
    """The one line said before grading when the student's code is not sandboxed, else None."""
    choice = choice or choose()
    if choice.kind == "bwrap":
        return None
    if choice.kind == "uid":
        return (
            f"warning: no sandbox ({choice.why}): it can read what any user can read and "
            "reach the network; see docs/grading.md"
        )
    return (
        f"warning: no sandbox ({choice.why}): student code runs as you, with your files and "
        "network; see docs/grading.md"
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
    readable_by_all(scratch)


def readable_by_all(scratch: Path) -> None:
    """Every folder of ``scratch`` enterable and every file readable by any uid, whatever the
    grader's umask (077 would leave the student's uid outside its own course copy and notebook,
    and mkdtemp makes 0700): what the student may *write* is decided by ownership, set above."""
    for root, _, files in os.walk(scratch):
        os.chmod(root, 0o755)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):  # chmod would follow it
                os.chmod(path, 0o644)


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
    print(notice(chosen) or "student code runs in the sandbox: see docs/grading.md")
    for problem in unreachable(chosen):
        print(f"but {problem}: grading will refuse to start (see docs/instructors.md)")
    from course.grading import runlimits

    print(f"limits per run: {runlimits.describe(8.0)}")
