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

Sampling can miss a peak shorter than the interval; the CPU time is exact. Linux only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

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


def measure(command: list[str], every: float = 0.2, cwd: str | None = None) -> dict:
    """Run ``command``; its tree's CPU seconds, peak memory (MiB) and wall time."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    before = os.times()
    start = time.time()
    child = subprocess.Popen(command, cwd=cwd)
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
    return {
        "cpu_s": round(cpu, 1),
        "peak_pss_mib": round(peak_pss / 1024),
        "peak_rss_mib": round(peak_rss / 1024),
        "wall_s": round(time.time() - start, 1),
        "returncode": child.returncode,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.grading.cost", description=__doc__)
    parser.add_argument("--every", type=float, default=0.2, help="sampling interval, seconds")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --")
    print(json.dumps(measure(command, args.every)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
