"""CI: an honest class graded right in five machine layouts.

Run as root from the checkout, with its venv: ``.venv/bin/python .ci/layouts.py [a b ...]``.
``.ci/layouts.py --prepare`` (any python3.11, no venv needed) only builds layout c's checkout
and venv, which a later run at the same commit then uses.
In each layout, one complete submission (every notebook, 06 included; an accented name) and a
half-done one (only 0.1 written; a name with a space and an accent) are graded with
``make grade JOBS=2`` under ``LC_ALL=C`` with ``TMPDIR`` set, and the half-done one again with
``make progress``; layout a grades a second complete submission in the same run (several
students in one run, once: what a layout adds is its paths, uids and sandbox, not more hand-ins):

  a  root grader, the checkout outside /tmp, the interpreter under a mode-700 folder; bwrap
  b  root grader, the checkout (its venv inside) and TMPDIR under /tmp; bwrap
  c  a non-root grader (a user made here) with a venv it built from Debian's python3.11; bwrap
  d  that user without bubblewrap: no sandbox, graded fully, with its one-line notice
  e  root without bubblewrap: the uid fallback; graded fully with (c)'s venv, which any uid
     can run, and refused (exit non-zero, nobody graded) with (a)'s, under a mode-700 folder

In each: every complete submission gets full marks (each asserted on its own), the half-done
one gets 0.1 and "not started" on every other exercise, ``make progress`` agrees with ``make
grade`` for it, and the setup check's line names the isolation really used. (That progress
agrees on a complete submission is tested by ``make check-grading``, on the solutions.) A layout that cannot be
built fails the run: none is skipped. Each layout's time is printed.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORK = Path(os.environ.get("COURSE_LAYOUTS_DIR", "/var/tmp/course-layouts"))
UNDER_TMP = Path("/tmp/course-layouts-b")
USER = "courseci"
COMPLETE = ["chloé", "ann"]  # ann only in layout a: several complete hand-ins in one run
HALF = "dan Ðoré"


@functools.cache
def exercises() -> list[str]:
    """The course's exercises, in order (imported here: ``--prepare`` runs before the venv)."""
    from course.classroom import all_exercises, notebook_paths

    return [e for _, e in all_exercises(notebook_paths(ROOT / "notebooks"))]


RIGHT_SOFTMAX = (
    "def softmax(x, dim=-1):\n"
    "    e = (x - x.amax(dim=dim, keepdim=True)).exp()\n"
    "    return e / e.sum(dim=dim, keepdim=True)"
)
SETUP_LINE = re.compile(r"setup check: a known-right notebook passed .*\(isolation: (\w+)")


def say(text: str) -> None:
    print(f"[layouts] {text}", flush=True)


def run(command: list[str], user: str | None = None, env: dict | None = None, **kw):
    """Run ``command`` (as ``user`` when given) with exactly ``env``; its CompletedProcess."""
    env = dict(env or os.environ)
    if user is not None:
        home = pwd.getpwnam(user).pw_dir
        env.update(HOME=home, USER=user, LOGNAME=user)
        command = ["setpriv", *_ids(user), "--init-groups", "--", *command]
    return subprocess.run(command, env=env, capture_output=True, text=True, **kw)


def _ids(user: str) -> list[str]:
    entry = pwd.getpwnam(user)
    return [f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}"]


def must(done: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if done.returncode != 0:
        raise SystemExit(
            f"{what} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


# --- the class -------------------------------------------------------------------------------


def build_class(folder: Path, complete: list[str]) -> Path:
    """Complete hand-ins (the solutions) and a half-done one (0.1 only), readable by all."""
    if folder.exists():
        shutil.rmtree(folder)
    for student in complete:
        shutil.copytree(ROOT / "solutions", folder / student)
    half = folder / HALF
    shutil.copytree(ROOT / "notebooks", half)
    first = next(half.glob("00_*.ipynb"))
    notebook = json.loads(first.read_text(encoding="utf-8"))
    cells = [c for c in notebook["cells"] if "".join(c["source"]).startswith("def softmax(")]
    assert len(cells) == 1, "notebook 00 changed: its softmax stub is not found"
    cells[0]["source"] = RIGHT_SOFTMAX
    first.write_text(json.dumps(notebook), encoding="utf-8")
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


# --- checkouts and venvs ---------------------------------------------------------------------


def clone(dest: Path, owner: str | None = None) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    must(run(["git", "clone", "-q", str(ROOT), str(dest)]), f"git clone into {dest}")
    if owner:
        must(run(["chown", "-R", f"{owner}:{owner}", str(dest)]), "chown")
    return dest


def copy_venv(into: Path) -> None:
    """This checkout's venv copied into ``into`` and pointed at it (its editable install too)."""
    venv = into / ".venv"
    must(run(["cp", "-a", str(ROOT / ".venv"), str(venv)]), "copying the venv")
    old, new = str(ROOT / ".venv"), str(venv)
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if old.encode() in data and b"\0" not in data[:1024]:
                script.write_bytes(data.replace(old.encode(), new.encode()))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "-e", str(into)]
    must(run(pip), "pointing the venv's editable install at the copy")
    for stamp in venv.glob(".installed*"):
        stamp.touch()


def ensure_user() -> None:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        home = WORK / "home"
        must(
            run(["useradd", "--system", "--create-home", "--home-dir", str(home), USER]),
            "useradd",
        )


def user_checkout() -> Path:
    """Layout c's checkout, owned by the non-root user, with a venv it builds itself from
    Debian's python3.11 (pip reads the same configuration and wheel folders as root's)."""
    ensure_user()
    folder = WORK / "c"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.chown(folder, USER, USER)
    checkout = folder / "course"
    prepared = folder / "prepared"  # the HEAD whose checkout and venv --prepare built
    if prepared.exists() and prepared.read_text() == _head(ROOT) == _head(checkout):
        return checkout
    reuse = os.environ.get("COURSE_LAYOUTS_REUSE", "")
    if reuse == "keep" and list(checkout.glob(".venv/.installed*")):
        return checkout  # (developing this script) as it is: another run may be using it
    if reuse == "1" and list(checkout.glob(".venv/.installed*")):
        # (developing this script) the user's venv kept, its checkout moved to this HEAD
        git = ["git", "-c", "safe.directory=*", "-C", str(checkout)]
        must(run([*git, "fetch", "-q", str(ROOT), "HEAD"]), "git fetch")
        must(run([*git, "reset", "-q", "--hard", "FETCH_HEAD"]), "git reset")
        must(run(["chown", "-R", f"{USER}:{USER}", str(checkout)]), "chown")
        return checkout
    checkout = clone(checkout, USER)
    python = shutil.which("python3.11", path="/usr/bin")
    if python is None:
        raise SystemExit(
            "Debian's python3.11 is missing: apt-get install python3.11 python3.11-venv"
        )
    start = time.time()
    must(
        run(["make", "-C", str(checkout), "setup", f"PYTHON={python}"], user=USER),
        "make setup as the non-root user",
    )
    say(
        f"c: the non-root user's make setup (python3.11 from /usr/bin) took {time.time() - start:.0f} s"
    )
    return checkout


def _head(checkout: Path) -> str:
    done = run(["git", "-c", "safe.directory=*", "-C", str(checkout), "rev-parse", "HEAD"])
    return done.stdout.strip() if done.returncode == 0 else ""


def prepare() -> int:
    """Build layout c's checkout and venv only, for a later run of this HEAD to grade with.
    It needs no venv of this checkout (Debian's python3.11 runs it), so CI runs it beside
    ``make setup``: the two installs, each on one core."""
    if os.geteuid() != 0:
        raise SystemExit("run .ci/layouts.py as root: it builds every layout (a user, clones)")
    WORK.mkdir(parents=True, exist_ok=True)
    WORK.chmod(0o755)
    (WORK / "c" / "prepared").unlink(missing_ok=True)
    checkout = user_checkout()
    (WORK / "c" / "prepared").write_text(_head(checkout))
    return 0


def no_bwrap_path(folder: Path) -> str:
    """A PATH holding every program of /usr/bin and /usr/local/bin but bubblewrap."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for top in (Path("/usr/local/bin"), Path("/usr/bin")):
        for program in top.iterdir() if top.is_dir() else []:
            if program.name != "bwrap" and not (folder / program.name).exists():
                (folder / program.name).symlink_to(program)
    folder.chmod(0o755)
    return str(folder)


def _premise_mode_700() -> str:
    """Where the base interpreter lives behind a folder other uids cannot pass (layout a)."""
    real = Path(
        os.path.realpath(
            sys._base_executable if hasattr(sys, "_base_executable") else sys.executable
        )
    )
    closed = [p for p in real.parents if p.stat().st_mode & 0o001 == 0]
    if not closed:
        raise SystemExit(f"layout a needs an interpreter under a mode-700 folder; {real} is not")
    return f"{real} (behind {closed[-1]}, mode {closed[-1].stat().st_mode & 0o777:o})"


# --- grading and asserting -------------------------------------------------------------------


def grade_layout(
    name: str,
    checkout: Path,
    tmpdir: Path,
    isolation: str,
    user: str | None = None,
    path: str | None = None,
    env_extra: dict | None = None,
    complete: list[str] = COMPLETE[:1],
) -> float:
    start = time.time()
    if tmpdir != Path("/tmp"):
        if tmpdir.exists():
            shutil.rmtree(tmpdir)
        tmpdir.mkdir(parents=True)
        if user:
            shutil.chown(tmpdir, user, user)
    out = WORK / f"out-{name}"
    if out.exists():
        shutil.rmtree(out)
    if user:
        out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmpdir), LC_ALL="C", **(env_extra or {}))
    env.pop("COURSE_SANDBOX", None)
    if path:
        env["PATH"] = path
    if user:  # the user writes OUT: a folder it owns, next to the others
        out.mkdir(parents=True)
        shutil.chown(out, user, user)
    klass = build_class(WORK / f"class-{name}", complete)
    done = must(
        run(
            ["make", "-C", str(checkout), "grade", f"SUBMISSIONS={klass}", f"OUT={out}", "JOBS=2"],
            user=user,
            env=env,
        ),
        f"{name}: make grade",
    )
    check_isolation(name, done.stderr, isolation)
    grades = read_grades(out / "grades.csv")
    assert set(grades) == {*complete, HALF}, f"{name}: rows {sorted(grades)}"
    for student in complete:
        row = grades[student]
        wrong = {e: row[e] for e in exercises() if row[e] != "1"}
        assert not wrong, f"{name}: {student} did not get full marks: {wrong}"
        assert float(row["total"]) == len(exercises()), f"{name}: {student} total {row['total']}"
    half = grades[HALF]
    assert half["0.1"] == "1", f"{name}: {HALF}'s 0.1: {half['0.1']}"
    assert all(half[e] == "0" for e in exercises() if e != "0.1"), f"{name}: {HALF}: {half}"
    feedback = (out / "feedback" / f"{HALF}.md").read_text(encoding="utf-8")
    started = feedback.count("(not implemented, 0 of")
    assert started == len(exercises()) - 1, f"{name}: {HALF}'s feedback: {started} not started"
    # make progress agrees with make grade: the same exercises passed, the rest not started.
    shown = must(
        run(
            ["make", "-C", str(checkout), "progress", f"DIR={klass / HALF}", "JOBS=2"],
            user=user,
            env=env,
        ),
        f"{name}: make progress {HALF}",
    )
    check_isolation(name, shown.stderr, isolation)
    rows = progress_rows(shown.stdout)
    assert {e for e, s in rows.items() if s == "passed"} == {"0.1"}, f"{name}: {HALF}: {rows}"
    assert all(s == "not started" for e, s in rows.items() if e != "0.1"), rows
    assert f"passed: 1 of {len(exercises())} exercises" in shown.stdout
    graded = {e for e in exercises() if grades[HALF][e] == "1"}
    assert graded == {"0.1"}, f"{name}: progress and grade disagree for {HALF}"
    seconds = time.time() - start
    say(
        f"{name}: {len(complete)} complete hand-ins full marks, {HALF} 1 passed and "
        f"{len(exercises()) - 1} not started, progress agrees; isolation {isolation}; {seconds:.0f} s"
    )
    return seconds


def check_isolation(name: str, stderr: str, isolation: str) -> None:
    found = SETUP_LINE.findall(stderr)
    assert found and set(found) == {isolation}, (
        f"{name}: isolation {found}, wanted {isolation}:\n{stderr[-2000:]}"
    )
    notices = [line for line in stderr.splitlines() if line.startswith("warning: no sandbox")]
    assert len(notices) == (0 if isolation == "bwrap" else 1), f"{name}: notices {notices}"
    for line in stderr.splitlines():
        if line.startswith("setup check"):
            say(f"{name}: {line}")


def read_grades(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as file:
        return {row["student"]: row for row in csv.DictReader(file)}


def progress_rows(table: str) -> dict[str, str]:
    rows = {}
    for line in table.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1] in exercises() and not line.startswith("(written)"):
            status = parts[2]
            rows[parts[1]] = (
                "passed"
                if status.startswith("✅")
                else "not started"
                if status.startswith("⏳ not started")
                else status
            )
    return rows


def refused(name: str, checkout: Path, path: str) -> float:
    """Layout e with an interpreter the student uid cannot run: nobody graded, one message."""
    start = time.time()
    out = WORK / f"out-{name}"
    if out.exists():
        shutil.rmtree(out)
    env = dict(os.environ, TMPDIR=str(WORK / name / "tmp"), PATH=path)
    env.pop("COURSE_SANDBOX", None)
    (WORK / name / "tmp").mkdir(parents=True, exist_ok=True)
    klass = build_class(WORK / f"class-{name}", [])
    done = run(
        ["make", "-C", str(checkout), "grade", f"SUBMISSIONS={klass}", f"OUT={out}"],
        env=env,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode != 0 and len(errors) == 1, done.stderr[-2000:]
    assert "cannot execute the interpreter" in errors[0] and "COURSE_SANDBOX=0" in errors[0]
    assert not out.exists(), f"{name}: OUT written although nobody could be graded"
    say(f"{name}: refused before grading anyone: {errors[0]}")
    return time.time() - start


def main(wanted: list[str]) -> int:
    if os.geteuid() != 0:
        raise SystemExit("run .ci/layouts.py as root: it builds every layout (a user, clones)")
    if shutil.which("bwrap") is None:
        raise SystemExit("bubblewrap is missing: apt-get install bubblewrap")
    wanted = wanted or ["a", "b", "c", "d", "e"]
    WORK.mkdir(parents=True, exist_ok=True)
    WORK.chmod(0o755)
    times = {}
    total = time.time()
    nobwrap = no_bwrap_path(WORK / "no-bwrap-bin")
    # Clones, each a layout's own paths (and this checkout may be in use meanwhile).
    outside = None
    if "a" in wanted:
        say(f"a: interpreter {_premise_mode_700()}")
        if outside is None:
            outside = clone(WORK / "a" / "course")
            copy_venv(outside)
        times["a"] = grade_layout("a", outside, WORK / "a" / "tmp", "bwrap", complete=COMPLETE)
    if "b" in wanted:
        under = clone(UNDER_TMP / "course")
        copy_venv(under)
        times["b"] = grade_layout("b", under, Path("/tmp"), "bwrap")
    users = user_checkout() if {"c", "d", "e"} & set(wanted) else None
    if "c" in wanted:
        times["c"] = grade_layout("c", users, WORK / "c" / "tmp", "bwrap", user=USER)
    if "d" in wanted:
        times["d"] = grade_layout("d", users, WORK / "d" / "tmp", "none", user=USER, path=nobwrap)
    if "e" in wanted:
        if outside is None:
            outside = clone(WORK / "a" / "course")
            copy_venv(outside)
        times["e (refused)"] = refused("e-refused", outside, nobwrap)
        # HF_HOME: the root grader's model cache lives in its mode-700 home; the uid cannot read
        # it, so this layout grades on the fallbacks, as the non-root user of c does.
        extra = {"HF_HOME": str(WORK / "e" / "no-models")}
        times["e"] = grade_layout(
            "e", users, WORK / "e" / "tmp", "uid", path=nobwrap, env_extra=extra
        )
    say(
        "times: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
        + f"; all layouts {time.time() - total:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(prepare() if sys.argv[1:] == ["--prepare"] else main(sys.argv[1:]))
