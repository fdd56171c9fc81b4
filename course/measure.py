"""Measuring code: the fastest of several timed calls and the peak memory of a call.

Notebook 03 times its attention against PyTorch's fused kernel with these; they live here so
that the notebook's cells stay about attention, not about measuring.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def synchronize(device: torch.device) -> None:
    """Wait for a GPU's queued work (a CPU call has finished when it returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_time(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    """Fastest of ``repeats`` timed calls of ``fn()``, in seconds, after one warm-up call.

    The minimum, not the mean: other programs can only slow a call down, never speed it up.
    """
    fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


class TensorMemoryTracker(TorchDispatchMode):
    """Peak bytes of tensors alive during a block, counting every tensor an operation creates."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        result = func(*args, **(kwargs or {}))
        outputs = result if isinstance(result, tuple | list) else (result,)
        for tensor in outputs:
            # Views share their base's storage, which was already counted.
            if isinstance(tensor, torch.Tensor) and tensor._base is None:
                size = tensor.untyped_storage().nbytes()
                self.live += size
                self.peak = max(self.peak, self.live)
                weakref.finalize(tensor, self._release, size)  # runs when the tensor is freed
        return result

    def _release(self, size: int) -> None:
        self.live -= size


def peak_memory(fn: Callable[[], Any], device: torch.device) -> int:
    """Peak extra memory (bytes) while ``fn()`` runs: CUDA's own counter, else the tracker."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with TensorMemoryTracker() as tracker:
        fn()
    return tracker.peak
