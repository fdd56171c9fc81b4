"""Checks for notebook 00, welcome."""

from __future__ import annotations

from collections.abc import Callable

import torch

from course.check import exercise_check, expect, expect_close

SoftmaxFn = Callable[..., torch.Tensor]


@exercise_check(
    "Exercise 0.1",
    "numerically stable softmax",
    hint="Subtract the maximum along `dim` (keepdim=True) before `torch.exp`, "
    "then divide by the sum along the same `dim`.",
)
def softmax(student_softmax: SoftmaxFn) -> None:
    """Compare with ``torch.softmax`` on ordinary, huge, masked and float64 inputs."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 7, generator=generator)
    expect_close(
        student_softmax(x, dim=-1),
        torch.softmax(x, dim=-1),
        what="softmax of a random (4, 7) tensor along dim=-1",
    )
    expect_close(
        student_softmax(x, dim=0),
        torch.softmax(x, dim=0),
        what="softmax along dim=0",
        hint="Use the `dim` argument everywhere (max, sum) instead of a fixed axis.",
    )
    expect_close(
        student_softmax(x[0], dim=-1), torch.softmax(x[0], dim=-1), what="softmax of a 1-D tensor"
    )

    huge = torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]])
    out = student_softmax(huge, dim=-1)
    expect(
        bool(torch.isfinite(out).all()),
        "softmax([1000, 1001, 1002]) gives inf or NaN: exp(1000) overflows float32.",
        hint="Subtracting the row maximum first keeps every exponent <= 0.",
    )
    expect_close(out, torch.softmax(huge, dim=-1), what="softmax of very large/small logits")

    masked = torch.tensor([[0.5, float("-inf"), 2.0]])
    expect_close(
        student_softmax(masked, dim=-1),
        torch.softmax(masked, dim=-1),
        what="softmax with a -inf entry (a masked position)",
        hint="exp(-inf) = 0, so a -inf entry must get probability exactly 0.",
    )

    x64 = torch.randn(3, 5, dtype=torch.float64, generator=generator)
    expect_close(
        student_softmax(x64, dim=1),
        torch.softmax(x64, dim=1),
        what="softmax of a float64 tensor",
        atol=1e-12,
        rtol=1e-10,
    )
