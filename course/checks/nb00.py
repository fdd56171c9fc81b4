"""Checks for notebook 00, welcome: the declared contract of the softmax exercise, whose
reference is ``torch.softmax`` (CONTRIBUTING's worked example)."""

from __future__ import annotations

import torch

from course.domains import Numbers, Tensors
from course.properties import generator, large_scores
from course.spec import Case, Spec, check

_DIM_HINT = "Use the `dim` argument everywhere (max, sum) instead of a fixed axis."
_RANGE_HINT = "exp(1000) overflows float32: think about what exp does to large inputs."


def _cases() -> list[Case]:
    g = generator()
    x = torch.randn(4, 7, generator=g)
    return [
        Case("a random (4, 7) tensor along dim=-1", {"x": x, "dim": -1}),
        Case("a random (4, 7) tensor along dim=0", {"x": x, "dim": 0}, _DIM_HINT),
        Case("a 1-D tensor", {"x": x[0].clone(), "dim": -1}),
        Case(
            "a (2, 3, 5) tensor along dim=1",
            {"x": torch.randn(2, 3, 5, generator=g), "dim": 1},
            _DIM_HINT,
        ),
        Case(
            "logits in the thousands (1000, 1001, 1002, ...)",
            {"x": torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]]), "dim": -1},
            _RANGE_HINT,
        ),
        Case("random scores of size ~1000", {"x": large_scores(3, 6), "dim": -1}, _RANGE_HINT),
        Case(
            "a -inf entry (a masked position)",
            {"x": torch.tensor([[0.5, float("-inf"), 2.0]]), "dim": -1},
            "exp(-inf) = 0, so a -inf entry must get probability exactly 0.",
        ),
        Case(
            "a float64 tensor",
            {"x": torch.randn(3, 5, dtype=torch.float64, generator=g), "dim": 1},
            strict=True,
        ),
    ]


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
