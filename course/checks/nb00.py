"""Checks for notebook 00, welcome: the declared contract of the softmax exercise, whose
reference is ``torch.softmax`` (CONTRIBUTING's worked example)."""

from __future__ import annotations

import math

import torch

from course.framework.domains import Numbers, Tensors
from course.framework.properties import generator, large_scores
from course.framework.spec import Case, Mistake, Spec, cases, check

_DIM_HINT = "Use the `dim` argument everywhere (max, sum) instead of a fixed axis."
_RANGE_HINT = "exp(1000) overflows float32: think about what exp does to large inputs."
_ANY_AXIS = "Write `softmax(x, dim)` that works along any axis"
_DEFINITION = "softmax(z)_i = e^{z_i} / sum_j e^{z_j}"


def _normalised(e: torch.Tensor, dim: int) -> torch.Tensor:
    return e / e.sum(dim, keepdim=True)


MISTAKES = (  # each a wrong softmax, in the reference's form
    Mistake("exp without the max shift", "in float32, e^89 is already `inf`, and `inf / inf` is "
            "`NaN`", lambda x, dim=-1: _normalised(x.exp(), dim), _RANGE_HINT),
    Mistake("the minimum subtracted", "subtract c = max_j z_j first: every exponent is then <= 0",
            lambda x, dim=-1: _normalised((x - x.amin(dim, True)).exp(), dim), _RANGE_HINT),
    Mistake("the last axis whatever `dim` says", _ANY_AXIS,
            lambda x, dim=-1: torch.softmax(x, -1), _DIM_HINT),
    Mistake("a sum over the whole tensor", _ANY_AXIS,
            lambda x, dim=-1: (x - x.max()).exp() / (x - x.max()).exp().sum(), _DIM_HINT),
    Mistake("no division by the sum", _DEFINITION, lambda x, dim=-1: (x - x.amax(dim, True)).exp()),
)  # fmt: skip


def _cases() -> list[Case]:
    g = generator()
    x = torch.randn(4, 7, generator=g)
    thousands = torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]])
    return cases(("x", "dim"), (  # what, x, dim, [hint, strict]
        ("a random (4, 7) tensor along dim=-1", x, -1),
        ("a random (4, 7) tensor along dim=0", x, 0, _DIM_HINT),
        ("a 1-D tensor", x[0].clone(), -1),
        ("a (2, 3, 5) tensor along dim=1", torch.randn(2, 3, 5, generator=g), 1, _DIM_HINT),
        ("logits in the thousands (1000, 1001, 1002, ...)", thousands, -1, _RANGE_HINT),
        ("random scores of size ~1000", large_scores(3, 6), -1, _RANGE_HINT),
        ("a -inf entry (a masked position)", torch.tensor([[0.5, -math.inf, 2.0]]), -1,
         "exp(-inf) = 0, so a -inf entry must get probability exactly 0."),
        ("a float64 tensor", torch.randn(3, 5, dtype=torch.float64, generator=g), 1, None, True),
    ))  # fmt: skip


softmax = check(
    Spec(
        exercise="Exercise 0.1",
        title="numerically stable softmax",
        name="softmax",
        params=("x", "dim"),
        defaults={"dim": -1},
        reference=lambda x, dim=-1: torch.softmax(x, dim=dim),
        cases=_cases,
        device=False,  # 0.1's text states no device (a NumPy softmax meets the text)
        mutable=("x",),  # nor that x stays untouched (the caller's copy is the check's own)
        mistakes=MISTAKES,
        forbidden=("torch.softmax", "torch.nn.Softmax"),  # "not `torch.softmax`"
        domains={  # "along any axis": every axis of x, by either sign, and the default
            "x": Tensors(scales=(1e3,), shifts=(-3e4, 3e4)),  # "for any constant c"
            "dim": Numbers(
                lambda i: -i["x"].dim(), lambda i: i["x"].dim() - 1, integer=True, hint=_DIM_HINT
            ),
        },
        hint="The exercise text says what softmax is: exponentiate, divide by the sum along `dim`; "
        "think about what exp does to large inputs.",
    )
)
