"""course.measure: timings are positive minima, the memory tracker sees the tensors a call makes."""

from __future__ import annotations

import torch

from course.measure import best_time, peak_memory

CPU = torch.device("cpu")


def test_best_time_is_the_minimum_of_positive_timings():
    calls = []
    assert best_time(lambda: calls.append(1), repeats=3, device=CPU) > 0
    assert len(calls) == 4  # one warm-up call, then three timed


def test_peak_memory_counts_the_tensors_a_call_creates():
    x = torch.zeros(1000)
    assert peak_memory(lambda: torch.ones(1024, 1024), CPU) >= 4 * 1024 * 1024
    assert peak_memory(lambda: x, CPU) == 0  # nothing created
