"""Runtime helpers: pick the device and the precision, seed everything, describe the machine.

Every notebook's setup cell calls :func:`setup`, so a notebook behaves the same
locally, in Colab, on a laptop CPU, on Apple silicon (MPS) and on a CUDA GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import platform
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch


def in_colab() -> bool:
    """True when running inside Google Colab."""
    return "google.colab" in sys.modules


def offline() -> bool:
    """True when the user or CI asked that nothing contacts the network
    (``COURSE_OFFLINE`` or ``HF_HUB_OFFLINE`` set to 1/true/yes/on)."""
    flags = (os.environ.get(v, "").strip().lower() for v in ("COURSE_OFFLINE", "HF_HUB_OFFLINE"))
    return any(flag in {"1", "true", "yes", "on"} for flag in flags)


def pick_device(prefer: str | None = None) -> torch.device:
    """Return the best available device: CUDA, then Apple MPS, then CPU.

    ``prefer`` (or the ``COURSE_DEVICE`` environment variable) forces one, e.g. ``"cpu"``
    to reproduce the CPU timings on a GPU machine.
    """
    prefer = prefer or os.environ.get("COURSE_DEVICE")
    if prefer:
        return torch.device(prefer)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (all devices) so runs are repeatable."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA and MPS generators


# CPU flags of native bfloat16 arithmetic (x86: AVX-512 BF16 or AMX; Arm: BF16). Without them
# torch emulates bf16 on the CPU, which is slower than float32.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")

# Whether a CPU with native bf16 trains in bf16 autocast unless COURSE_BF16 says otherwise. The
# default must never be more than 1.2x slower than the other precision, idle or beside busy
# processes: measured (course/tooling/budgets.py, PRECISION_RUNS), bf16 was faster only on an idle machine
# (float32 1.16x slower there); under load it was slower, 1.03x in our course-loop run on a shared
# machine and 3.6x in the Run All of notebook 06 under load (PRECISION_RUNS), so float32 is the
# default and bf16 is opt-in (COURSE_BF16=1).
# tests/test_timings.py fails when this flag and the stored runs disagree.
BF16_BY_DEFAULT = False


@functools.cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # macOS, Windows: no /proc; then no flags, and float32
        return ""


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU does bfloat16 arithmetic in hardware (read from /proc/cpuinfo)."""
    flags: set[str] = set()
    for line in (_cpuinfo() if cpuinfo is None else cpuinfo).splitlines():
        if line.lower().startswith(("flags", "features")):
            flags |= set(line.split(":", 1)[-1].split())
    return any(flag in flags for flag in BF16_CPU_FLAGS)


def bf16_forced() -> bool | None:
    """``COURSE_BF16``: True for 1 (bf16 autocast on the CPU, native or not), False for 0
    (float32), None when unset (the default decides)."""
    forced = os.environ.get("COURSE_BF16", "").strip()
    return {"1": True, "0": False}.get(forced)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype training runs in under autocast: bf16 where chosen on the CPU, else None.

    On the CPU bf16 runs when ``COURSE_BF16=1`` asks for it, or by default where
    :data:`BF16_BY_DEFAULT` says so and the CPU has native bf16. GPUs keep float32 here (the
    notebooks' GPU runs are short and their figures were measured in float32).
    """
    if device.type != "cpu":
        return None
    forced = bf16_forced()
    chosen = BF16_BY_DEFAULT and cpu_has_native_bf16() if forced is None else forced
    return torch.bfloat16 if chosen else None


def precision(device: torch.device) -> str:
    """``"bf16 autocast"`` or ``"float32"``: what :func:`autocast` will run in on ``device``."""
    return "bf16 autocast" if autocast_dtype(device) is not None else "float32"


def precision_reason(device: torch.device) -> str:
    """Why :func:`precision` chose what it did, in a few words (empty on a GPU)."""
    if device.type != "cpu":
        return ""
    forced = bf16_forced()
    if forced is not None:
        return f"COURSE_BF16={int(forced)}"
    if not cpu_has_native_bf16():
        return "no native bf16 on this CPU"
    if BF16_BY_DEFAULT:
        return "native bf16; COURSE_BF16=0 for float32"
    return "bf16 autocast is opt-in: COURSE_BF16=1; measured slower under load"


def runtime_precision(device: torch.device) -> str:
    """The precision field of the setup line: float32, and bf16 only inside :func:`autocast`,
    followed by the reason in brackets.

    Code runs in float32 unless it is inside ``env.autocast`` (the shared ``fit`` loop of
    notebooks 06-08, 09's training loop); a notebook that never enters it (00-05) trains in
    float32 on every machine, so the line must not say "bf16" without saying where.
    """
    inside = autocast_dtype(device) is not None
    field = "float32, bf16 autocast inside env.autocast" if inside else "float32"
    reason = precision_reason(device)
    return f"{field} ({reason})" if reason else field


@contextlib.contextmanager
def autocast(device: torch.device) -> Iterator[None]:
    """bf16 autocast where :func:`autocast_dtype` says it helps; a no-op elsewhere."""
    dtype = autocast_dtype(device)
    if dtype is None:
        yield
        return
    with torch.autocast(device.type, dtype=dtype):
        yield


def describe_runtime(device: torch.device) -> str:
    """One line that says where this notebook runs (printed by :func:`setup`)."""
    if device.type == "cuda":
        hardware = torch.cuda.get_device_name(device)
    elif device.type == "mps":
        hardware = "Apple GPU (MPS)"
    else:
        hardware = f"CPU, {torch.get_num_threads()} threads"
    where = "Colab" if in_colab() else platform.system()
    return (
        f"Python {platform.python_version()} | torch {torch.__version__} | "
        f"device {device.type} ({hardware}) | precision {runtime_precision(device)} | {where}"
    )


def setup(seed: int = 0, device: str | None = None, quiet: bool = False) -> torch.device:
    """Seed everything, pick the device and print one line describing the runtime."""
    seed_everything(seed)
    chosen = pick_device(device)
    if not quiet:
        print(describe_runtime(chosen) + f" | seed {seed}")
    return chosen


def is_gpu(device: torch.device) -> bool:
    """True for CUDA and MPS devices: notebooks use it to scale their CONFIG up."""
    return device.type in ("cuda", "mps")


def show_config(config: object, prefix: str = "") -> None:
    """Print a notebook's CONFIG (a dataclass) as ``name = value`` lines, one per setting;
    a nested dataclass prints its settings as ``outer.name = value``."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            show_config(value, f"{prefix}{field.name}.")
        else:
            print(f"{prefix}{field.name} = {value!r}")
