"""Randomness judged exactly where randomness allows: tests at a stated false-alarm rate, and
dropout by its structure (which entries are zeroed, the rest scaled by 1/(1-p), independently,
at rate p). Notebooks 03, 04, 05, 06 and 10."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from course.framework.properties import expect, observe, tolerance

# Statistical properties: exact where randomness allows. Each test is two-sided at FALSE_ALARM
# (a right implementation fails it with that probability, over the grader's random seeds), and
# the cases that use them are sized so that a one-point deviation (15% -> 14%, 80/10/10 ->
# 79/11/10) lies beyond 8 standard errors: missed with probability < 1e-3.
FALSE_ALARM = 1e-7


def alarm(p_value: float) -> bool:
    return p_value < FALSE_ALARM


def normal_p(z: float) -> float:
    """Two-sided p-value of a standard normal ``z``."""
    return float(torch.special.erfc(torch.tensor(abs(z) / 2**0.5, dtype=torch.float64)))


def proportion_z(count: int, trials: int, probability: float) -> float:
    """How many standard errors ``count`` successes in ``trials`` lie from ``probability``."""
    return (count - trials * probability) / (trials * probability * (1 - probability)) ** 0.5


def dispersion_p(hits: torch.Tensor, trials: torch.Tensor) -> tuple[float, str]:
    """Is the spread of grouped counts (``hits`` of ``trials`` per row, per position) the
    binomial one at the pooled rate? The two-sided p-value of the dispersion statistic against a
    scaled chi-square with the binomial's exact mean and variance, and "less" or "more"."""
    keep = trials > 0
    k, n = hits[keep].double(), trials[keep].double()
    pi = float(k.sum() / n.sum())
    pq = pi * (1 - pi)
    statistic = float(((k - n * pi) ** 2 / (n * pq)).sum())
    mean, var = float(keep.sum()), float((2 + 1 / (n * pq) - 6 / n).sum())
    scale, dof = var / (2 * mean), 2 * mean**2 / var
    x = torch.tensor(statistic / (2 * scale), dtype=torch.float64)
    half = torch.tensor(dof / 2, dtype=torch.float64)
    upper, lower = float(torch.special.gammaincc(half, x)), float(torch.special.gammainc(half, x))
    return 2 * min(upper, lower), ("more" if upper < lower else "less")


def is_dropout_of(got: torch.Tensor, clean: torch.Tensor, p: float) -> bool:
    """True when ``got`` looks like ``nn.Dropout(p)`` applied to ``clean`` in training mode:
    every entry is 0 or ``clean / (1 - p)``, and at least one nonzero entry was zeroed."""
    if not isinstance(got, torch.Tensor) or got.shape != clean.shape:
        return False
    got, clean = got.detach().double(), clean.detach().double()
    scale = clean.abs().max().item() + 1e-12
    zero = got.abs() <= 1e-6 * scale
    kept = (got - clean / (1 - p)).abs() <= 1e-5 * scale
    return bool((zero | kept).all()) and bool((zero & (clean.abs() > 1e-4 * scale)).any())


SHARED = (
    "every sequence (and head) dropped the same entries: one mask drawn for all of them instead "
    "of one draw per entry"
)


def independent(dropped: torch.Tensor, axes: int) -> bool:
    """False when all slices over the first ``axes`` axes dropped the same entries: by chance
    with probability (p^2 + (1-p)^2)^(n (k-1)) for n entries in each of k slices, below 1e-7 for
    the checks' cases (p = 0.3, n >= 12, k >= 2 with n (k - 1) >= 30)."""
    slices = dropped.flatten(0, axes - 1)
    return not bool((slices == slices[:1]).all()) or slices.shape[0] < 2


def dropout_rate(dropped: torch.Tensor, p: float, what: str, hint: str | None = None) -> None:
    """The share of dropped entries is p: a binomial count outside p*n +- 5 standard deviations
    (a false alarm with probability below 6e-7) fails. On 16,800 entries at p = 0.3 that
    bound is +-1.8 points of rate, so a rate 3 points off fails 19 times in 20."""
    n, count = dropped.numel(), int(dropped.sum())
    bound = 5.0 * (n * p * (1 - p)) ** 0.5
    expect(
        abs(count - n * p) <= bound,
        f"{what}: {count} of {n} entries were dropped ({count / n:.1%}), but dropout={p} drops "
        f"{p:.0%} of them on average",
        hint,
        "the dropout probability",
    )


def dropped_in_training(
    owner: str,
    expected_of: Callable[[Any, dict], torch.Tensor],
    stated: str,
    violated: str,
    hint: str | None,
) -> dict:
    """With ``dropout=1.0`` in ``train()`` mode every dropout the text places drops everything,
    so the output is ``expected_of(case, state dict)``, ``stated`` in words."""

    def watch(module: Any, case: Any, call_: Callable) -> Any:
        observe(f"{case.what}: .train()", lambda: module.train() and None)
        try:
            out = call_(case.inputs)
        finally:
            observe(f"{case.what}: .eval()", lambda: module.eval() and None)
        return {
            "out": out,
            "state": observe(f"{case.what}: the state dict", lambda: dict(module.state_dict())),
        }

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        out, want = seen["out"], expected_of(case, seen["state"])
        right = isinstance(out, torch.Tensor) and out.shape == want.shape
        right = right and torch.allclose(out, want, **tolerance(out.dtype))
        mistake = ""
        if isinstance(out, torch.Tensor) and not right and bool((out == 0).all()):
            mistake = " Your output is all zeros: a dropout acts on the output itself."
        expect(
            right,
            f"{owner} on {case.what} in train() mode: with dropout=1.0 every dropout the text "
            f"places drops everything, so the output should be {stated}.{mistake}",
            hint,
            violated,
        )

    return {"observe": watch, "judge": judge}
