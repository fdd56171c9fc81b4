"""Checks for notebook 00, welcome.

The reference is ``torch.softmax``. Every call goes through :func:`course.properties.call`, so
the inputs must come back untouched and global state unchanged; the cases are a table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from course.check import exercise_check, expect, expect_close
from course.properties import call, generator, large_scores


class SoftmaxCase(NamedTuple):
    what: str
    x: torch.Tensor
    dim: int
    hint: str | None = None


def _softmax_cases() -> list[SoftmaxCase]:
    g = generator()
    x = torch.randn(4, 7, generator=g)
    return [
        SoftmaxCase("softmax of a random (4, 7) tensor along dim=-1", x, -1),
        SoftmaxCase(
            "softmax along dim=0",
            x,
            0,
            "Use the `dim` argument everywhere (max, sum) instead of a fixed axis.",
        ),
        SoftmaxCase("softmax of a 1-D tensor", x[0].clone(), -1),
        SoftmaxCase(
            "softmax along dim=1 of a (2, 3, 5) tensor", torch.randn(2, 3, 5, generator=g), 1
        ),
        SoftmaxCase(
            "softmax of logits in the thousands (1000, 1001, 1002, ...)",
            torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]]),
            -1,
            "exp(1000) overflows float32: subtracting the maximum first keeps every exponent <= 0.",
        ),
        SoftmaxCase("softmax of random scores of size ~1000", large_scores(3, 6), -1),
        SoftmaxCase(
            "softmax with a -inf entry (a masked position)",
            torch.tensor([[0.5, float("-inf"), 2.0]]),
            -1,
            "exp(-inf) = 0, so a -inf entry must get probability exactly 0.",
        ),
        SoftmaxCase(
            "softmax of a float64 tensor",
            torch.randn(3, 5, dtype=torch.float64, generator=g),
            1,
        ),
    ]


@exercise_check(
    "Exercise 0.1",
    "numerically stable softmax",
    hint="The exercise text says what softmax is: exponentiate, divide by the sum along `dim`; "
    "think about what exp does to large inputs.",
)
def softmax(student_softmax: Callable[..., torch.Tensor]) -> None:
    """Compare with ``torch.softmax`` on ordinary, huge, masked and float64 inputs."""
    for case in _softmax_cases():
        got = call(case.what, student_softmax, case.x, dim=case.dim, names=("x",))
        if isinstance(got, torch.Tensor) and got.is_floating_point():
            expect(
                bool(torch.isfinite(got).all()),
                f"{case.what} gives inf or NaN: the property violated is the numeric range.",
                case.hint,
            )
        tolerance = {"atol": 1e-12, "rtol": 1e-10} if case.x.dtype == torch.float64 else {}
        expect_close(
            got, torch.softmax(case.x, dim=case.dim), what=case.what, hint=case.hint, **tolerance
        )
