"""What grading costs: CPU time and peak memory of a whole process tree (``make progress``).

``python -m course.grading.cost -- <command ...>`` runs the command and prints, as JSON:

* ``cpu_s``: user + system CPU seconds of the command *and every process it started*. This
  process makes itself the "child subreaper" (Linux ``PR_SET_CHILD_SUBREAPER``), so a process
  orphaned by its parent (a killed notebook runner) is reaped, and counted, here too;
* ``peak_pss_mib``: the largest sum, over the tree, of each process's proportional set size
  (``/proc/PID/smaps_rollup``: shared pages split between the processes sharing them), sampled
  every ``--every`` seconds: the figure to hold against a container's memory limit;
* ``peak_rss_mib``: the same with resident set sizes (counts shared libraries once per process);
* ``wall_s`` and the command's ``returncode``.

Where it may create cgroups (root on cgroup v1, as on the course's CI machine), the command runs
in a cgroup of its own, and ``cpu_s`` is the cgroup's CPU time (``cpuacct.usage``): exact for
every process of the tree, even those of a sandbox's PID namespace whose times never reach a
parent's ``wait``; ``cgroup_peak_mib`` is the cgroup's peak charge (``memory.max_usage_in_bytes``,
page cache included: what a container's memory limit counts). ``--memory-mb`` and ``--cpus``
then also *limit* the cgroup (``--cpus 0.5 --memory-mb 768``: Gradescope's defaults). Without
cgroups, ``cpu_s`` comes from the reaped children's times (``os.times``) and no limit applies.

Sampling can miss a peak shorter than the interval. Linux only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def _descendants(root: int) -> list[int]:
    tree, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += tree.get(pid, [])
    return found


def _memory(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in kB; (0, 0) when it is gone or not readable."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as file:
            for line in file:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1])
    except (OSError, ValueError):
        pass
    return pss, rss


CGROUPS = Path("/sys/fs/cgroup")


def _cgroups(name: str) -> dict[str, Path]:
    """Fresh cgroup-v1 folders (cpuacct, memory, cpu) below this process's own; {} when the
    machine has no cgroup v1 or this process may not create them."""
    made: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        _, controllers, where = line.split(":", 2)
        for controller in controllers.split(","):
            if controller in ("cpuacct", "memory", "cpu") and controller not in made:
                folder = CGROUPS / controller / where.lstrip("/") / name
                try:
                    folder.mkdir()
                except OSError:
                    continue
                made[controller] = folder
    if "cpuacct" not in made:
        for folder in made.values():
            folder.rmdir()
        return {}
    return made


def _join(groups: dict[str, Path]) -> None:
    for folder in groups.values():
        (folder / "cgroup.procs").write_text(str(os.getpid()))


def _read(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def measure(
    command: list[str],
    every: float = 0.2,
    cwd: str | None = None,
    memory_mb: float | None = None,
    cpus: float | None = None,
) -> dict:
    """Run ``command``; its tree's CPU seconds, peak memory (MiB) and wall time."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    groups = _cgroups(f"course-cost-{os.getpid()}")
    if memory_mb and "memory" in groups:
        (groups["memory"] / "memory.limit_in_bytes").write_text(str(int(memory_mb * 1e6)))
    if cpus and "cpu" in groups:
        (groups["cpu"] / "cpu.cfs_period_us").write_text("100000")
        (groups["cpu"] / "cpu.cfs_quota_us").write_text(str(int(cpus * 100000)))
    before = os.times()
    start = time.time()
    child = subprocess.Popen(
        command,
        cwd=cwd,
        preexec_fn=(lambda: _join(groups)) if groups else None,  # noqa: PLW1509
    )
    peak_pss = peak_rss = 0
    while child.poll() is None:
        mine = [p for p in _descendants(os.getpid()) if p != os.getpid()]
        sizes = [_memory(p) for p in mine]
        peak_pss = max(peak_pss, sum(s[0] for s in sizes))
        peak_rss = max(peak_rss, sum(s[1] for s in sizes))
        time.sleep(every)
    while True:  # orphans handed to this process (its subreaper role): reap them all
        try:
            if os.waitpid(-1, 0)[0] == 0:
                break
        except ChildProcessError:
            break
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    result = {
        "cpu_s": round(cpu, 1),
        "peak_pss_mib": round(peak_pss / 1024),
        "peak_rss_mib": round(peak_rss / 1024),
        "wall_s": round(time.time() - start, 1),
        "returncode": child.returncode,
    }
    if groups:
        result["cpu_s"] = round(_read(groups["cpuacct"] / "cpuacct.usage") / 1e9, 1)
        result["reaped_cpu_s"] = round(cpu, 1)
        if "memory" in groups:
            peak = _read(groups["memory"] / "memory.max_usage_in_bytes")
            result["cgroup_peak_mib"] = round(peak / 2**20)
            result["oom_kills"] = _oom_kills(groups["memory"])
        result["limits"] = {"memory_mb": memory_mb, "cpus": cpus}
        for folder in groups.values():
            for _ in range(50):  # empty once the last process is reaped
                try:
                    folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    return result


def _oom_kills(folder: Path) -> int:
    try:
        for line in (folder / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.grading.cost", description=__doc__)
    parser.add_argument("--every", type=float, default=0.2, help="sampling interval, seconds")
    parser.add_argument("--memory-mb", type=float, default=None, help="cgroup memory limit")
    parser.add_argument("--cpus", type=float, default=None, help="cgroup CPU quota (0.5: half)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --")
    result = measure(command, args.every, memory_mb=args.memory_mb, cpus=args.cpus)
    print(json.dumps(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
