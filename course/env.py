"""Runtime helpers: pick the device, seed everything, describe the machine.

Every notebook's setup cell calls :func:`setup`, so a notebook behaves the same
locally, in Colab, on a laptop CPU, on Apple silicon (MPS) and on a CUDA GPU.
"""

from __future__ import annotations

import os
import platform
import random
import sys

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
        f"device {device.type} ({hardware}) | {where}"
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
