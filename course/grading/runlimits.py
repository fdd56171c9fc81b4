"""Limits of one run as a whole (every process a graded notebook starts): processes, memory,
CPU, with a control group of its own.

Per-process limits (``RLIMIT_AS``) let one hand-in fork without end, hold memory in many
processes or in ``/dev/shm`` and a ``tmpfs``, and take every CPU from a classmate graded beside
it. A control group (cgroup) counts the whole run: :func:`create` makes one per run below the
grader's own, with

* ``pids``: at most :data:`MAX_PROCESSES` processes and threads (a fork bomb stops there);
* ``memory``: the run's memory together, page cache and shared memory included (a ``/dev/shm``
  or ``tmpfs`` file is charged to the run that wrote it), no swap to escape to;
* ``cpu``: a quota of ``cpus`` CPUs (busy processes share it, never a classmate's).

The grader's process joins it in the child between fork and exec (:meth:`RunGroup.join`), so
every process of the run (bwrap, its namespace, whatever the student starts) is in it from the
first instruction and cannot leave (the student owns no cgroup file). :meth:`RunGroup.kill`
ends every process in it: the sure end of a run in every isolation mode.

Both cgroup versions are read: v2 (one hierarchy, ``/sys/fs/cgroup/cgroup.controllers``) and v1
(one hierarchy per controller, as on the course's CI machine). Creating cgroups needs root (or a
delegated v2 subtree); where it is refused, :func:`create` returns None and the setup check says
which limits apply (:func:`describe`): the README claims only those.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")
MAX_PROCESSES = 256  # processes and threads of one run; an honest notebook uses about 20
CONTROLLERS = ("pids", "memory", "cpu")
PERIOD_US = 100_000


def sigkill(pids: list[int]) -> None:
    """SIGKILL each of ``pids``; one already gone, or not ours to kill, is skipped."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class RunGroup:
    """One run's cgroup: ``folders`` maps each controller to its folder (v2: one folder)."""

    version: int
    folders: dict[str, Path] = field(default_factory=dict)

    @property
    def limits(self) -> list[str]:
        return sorted(self.folders) if self.version == 1 else list(CONTROLLERS)

    def _unique(self) -> list[Path]:
        return list(dict.fromkeys(self.folders.values()))

    def join(self) -> None:
        """Move the calling process into the group (the child, between fork and exec)."""
        for folder in self._unique():
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> list[int]:
        found: set[int] = set()
        for folder in self._unique():
            try:
                found |= {int(x) for x in (folder / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                continue
        return sorted(found)

    def kill(self, wait_s: float = 30.0) -> None:
        """SIGKILL every process of the run until none is left (``cgroup.kill`` where v2 has it)."""
        end = time.time() + wait_s
        while time.time() < end:
            left = self.pids()
            if not left:
                return
            killer = next(
                (f / "cgroup.kill" for f in self._unique() if (f / "cgroup.kill").exists()), None
            )
            if killer is not None:
                try:
                    killer.write_text("1")
                except OSError:
                    killer = None
            if killer is None:
                sigkill(left)
            time.sleep(0.05)

    def hit(self) -> str | None:
        """Which limit stopped the run, in words, or None."""
        memory = self.folders.get("memory")
        if memory is not None:
            name = "memory.events" if self.version == 2 else "memory.oom_control"
            if _counter(memory / name, "oom_kill") > 0:
                return "memory"
        pids = self.folders.get("pids")
        if pids is not None and _counter(pids / "pids.events", "max") > 0:
            return "processes"
        return None

    def remove(self) -> None:
        self.kill()
        for folder in self._unique():
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def _counter(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _own() -> dict[str, str]:
    """This process's cgroup per controller (v1) or ``{"": path}`` (v2), from /proc."""
    own: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return own
    for line in lines:
        _, controllers, where = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = where
    return own


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def create(memory_bytes: int, cpus: float, processes: int = MAX_PROCESSES) -> RunGroup | None:
    """A fresh cgroup for one run with its limits written, or None where none can be made."""
    name = f"course-run-{os.getpid()}-{secrets.token_hex(4)}"
    own = _own()
    if (CGROUPS / "cgroup.controllers").exists():  # v2 only
        return _create_v2(
            CGROUPS / own.get("", "/").lstrip("/") / name, memory_bytes, cpus, processes
        )
    group = RunGroup(1)
    for controller in CONTROLLERS:
        if controller not in own:
            continue
        mounts = [m for m in sorted(CGROUPS.iterdir()) if controller in m.name.split(",")]
        if not mounts:
            continue
        base = mounts[0]
        folder = base / own[controller].lstrip("/") / name
        try:
            folder.mkdir()
        except OSError:
            continue
        group.folders[controller] = folder
    if "pids" in group.folders and not _write(group.folders["pids"] / "pids.max", str(processes)):
        group.folders.pop("pids").rmdir()
    if "memory" in group.folders:
        memory = group.folders["memory"]
        if _write(memory / "memory.limit_in_bytes", str(memory_bytes)):
            _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))  # where swap counts
        else:
            group.folders.pop("memory").rmdir()
    if "cpu" in group.folders:
        cpu = group.folders["cpu"]
        ok = _write(cpu / "cpu.cfs_period_us", str(PERIOD_US))
        if not (ok and _write(cpu / "cpu.cfs_quota_us", str(int(cpus * PERIOD_US)))):
            group.folders.pop("cpu").rmdir()
    if not group.folders:
        return None
    return group


def _create_v2(folder: Path, memory_bytes: int, cpus: float, processes: int) -> RunGroup | None:
    parent = folder.parent
    try:
        wanted = set(CONTROLLERS)
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        for controller in sorted(wanted - enabled):
            _write(parent / "cgroup.subtree_control", f"+{controller}")
        folder.mkdir()
    except OSError:
        return None
    group = RunGroup(2, {})
    available = set((folder / "cgroup.controllers").read_text().split())
    if "pids" in available and _write(folder / "pids.max", str(processes)):
        group.folders["pids"] = folder
    if "memory" in available and _write(folder / "memory.max", str(memory_bytes)):
        _write(folder / "memory.swap.max", "0")
        group.folders["memory"] = folder
    if "cpu" in available and _write(folder / "cpu.max", f"{int(cpus * PERIOD_US)} {PERIOD_US}"):
        group.folders["cpu"] = folder
    if not group.folders:
        folder.rmdir()
        return None
    return group


@lru_cache(maxsize=1)
def available() -> tuple[str, ...]:
    """The per-run limits this machine gives (a group made and removed once per process)."""
    group = create(2**30, 1.0)
    if group is None:
        return ()
    found = tuple(sorted(group.folders))
    group.remove()
    return found


def describe(memory_gb: float, cpus: float = 1.0) -> str:
    """The per-run limits in words, as the setup check and the README state them."""
    found = available()
    if not found:
        return "none per run (no cgroup can be made here): each process's address space only"
    words = {
        "pids": f"at most {MAX_PROCESSES} processes",
        "memory": f"{memory_gb:g} GB of memory for the whole run (/dev/shm and tmpfs included)",
        "cpu": f"{cpus:g} CPU",
    }
    return "cgroup per run: " + ", ".join(words[c] for c in ("pids", "memory", "cpu") if c in found)
