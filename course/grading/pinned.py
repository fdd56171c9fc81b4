"""A grading run grades with the course as it was when the run started, never the checkout.

``make grade`` and ``make progress`` start in the instructor's checkout, whose ``course/`` an
instructor may edit at any time (a course is meant to be adapted). :func:`run_pinned` copies
the code grading trusts (``course/`` and the bundled ``data/samples``) into a read-only folder
of the run's own, then runs the command again in a child interpreter that imports only that
copy (``python -P``: no working directory on ``sys.path``; the copy first on ``PYTHONPATH``).

So an edit or a new file in the checkout's ``course/`` while grading runs changes neither that
run nor its rows, and grading never writes, restores or deletes anything in the checkout: the
tree guard of :mod:`~course.grading.kernel` watches the copy. The run names the copy's digest
(:func:`version`), so a later regrade with an edited course is visible in its output.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from course.grading import kernel
from course.grading.kernel import PINNED_ENV

CHECKOUT = Path(__file__).resolve().parents[2]
# What a grading run imports or reads from the checkout, relative to it.
COPIED = ("course", "data/samples")


def active() -> Path | None:
    """The copy this process grades from, if it runs from one (the child of :func:`run_pinned`)."""
    return kernel.pinned_root()


def version() -> str:
    """The digest of the course package this process imported (sha256 of its files), short."""
    return kernel.digest(kernel.TreeGuard().files)[:16]


def _ignore(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__" or n.endswith(".pyc")]


def pin(checkout: Path = CHECKOUT, parent: Path | None = None) -> Path:
    """A read-only copy of what grading trusts in ``checkout``; returns its root."""
    root = Path(tempfile.mkdtemp(prefix="course-pinned-", dir=parent))  # mode 700: ours alone
    for relative in COPIED:
        source = checkout / relative
        if source.is_dir():
            shutil.copytree(source, root / relative, ignore=_ignore, symlinks=False)
    for folder, dirs, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o555)
    return root


def unpin(root: Path) -> None:
    """Remove a copy made by :func:`pin` (its folders made writable again first)."""
    for folder, dirs, _ in os.walk(root):
        for name in dirs:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IRWXU)
    shutil.rmtree(root, ignore_errors=True)


def run_pinned(argv: list[str]) -> int:
    """Run ``python -m course.classroom ARGV`` from a fresh pinned copy; its exit status.

    The child finds prepared data in the checkout (``COURSE_DATA_DIR``, unless set) and reads
    every path of ``argv`` as given: they must be absolute (the child runs in the copy).
    """
    try:
        root = pin()
    except OSError as error:  # the grader's setup: nobody was graded
        print(
            f"error: the course could not be copied to a folder of this run ({error}); "
            f"set TMPDIR to a writable folder (now {tempfile.gettempdir()})",
            file=sys.stderr,
        )
        return 3
    env = dict(os.environ)
    env[PINNED_ENV] = str(root)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    env.setdefault("COURSE_DATA_DIR", str(CHECKOUT / "data"))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the copy
    command = [sys.executable, "-P", "-m", "course.classroom", *argv]
    try:
        child = subprocess.Popen(command, env=env, cwd=root)
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:  # the terminal sent it to the child too: wait for it
                child.send_signal(signal.SIGINT)
        edited = changed_since(root)
        if edited:  # said, never undone: the instructor's edit (or, unfenced, a hand-in's)
            print(
                f"note: course/ in {CHECKOUT} changed while this run graded "
                f"({', '.join(edited[:5])}{', ...' if len(edited) > 5 else ''}): the run graded "
                "with the course as it started; the next run uses the files as they are now",
                file=sys.stderr,
            )
        return code
    finally:
        unpin(root)


def changed_since(root: Path, checkout: Path = CHECKOUT) -> list[str]:
    """The files of ``checkout/course`` that differ from the pinned copy at ``root`` (sorted)."""
    now, pinned = kernel._files(checkout / "course"), kernel._files(root / "course")
    return sorted(f"course/{n}" for n in set(now) | set(pinned) if now.get(n) != pinned.get(n))


def require_active() -> Path:
    """The copy this process runs from; a :class:`RuntimeError` if ``course`` came from elsewhere
    (a meta-path hook of an editable install winning over ``PYTHONPATH``, say)."""
    import course

    root = active()
    here = Path(course.__file__).resolve().parents[1]
    if root is None or here != root:
        raise RuntimeError(
            f"grading imported the course from {here}, not from its pinned copy "
            f"({os.environ.get(PINNED_ENV)}): nothing was graded"
        )
    return root
