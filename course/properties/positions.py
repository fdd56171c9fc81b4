"""Positions: a sinusoidal table as float32 allows it, kept as a non-persistent buffer, its
first row, dropout on the sum, and RoPE's rotation whose scores depend only on m - n.
Notebook 04."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from course.observe import REPLAY, current
from course.properties import (
    CheckFailure,
    call,
    expect,
    generator,
    observe,
    tolerance,
)
from course.properties.statistics import SHARED, dropout_rate, independent, is_dropout_of


def expect_rows_close(got: Any, expected: torch.Tensor, what: str, hint: str | None = None) -> None:
    """``got`` (..., L, d) against ``expected`` with a tolerance that grows with the position:
    float32 angles near position p are about p * 1e-7 apart, so a table built in float32 (as
    pytorch/examples, the Annotated Transformer and d2l do) is as right as float32 allows."""
    expect(
        isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(expected.shape),
        f"{what} has shape {tuple(getattr(got, 'shape', ()))}, expected {tuple(expected.shape)}.",
        hint,
    )
    allowed = 2e-5 + 4e-6 * torch.arange(expected.shape[-2], dtype=torch.float64)[:, None]
    excess = (got.double() - expected.double()).abs() - allowed
    if bool(torch.isfinite(got).all()) and bool((excess <= 0).all()):
        return
    index = tuple(int(i) for i in torch.unravel_index(excess.nan_to_num(1e9).argmax(), got.shape))
    raise CheckFailure(
        f"{what} differs from the formula: at index {index} yours is {got[index].item():.6g}, "
        f"expected {expected[index].item():.6g}.",
        hint,
    )


def close_by_position(
    sizes: Sequence[dict[str, Any]], reference: Callable[..., torch.Tensor], name: str
) -> dict:
    """Long tables (``name(**inputs)`` for each of ``sizes``) within :func:`expect_rows_close`
    of ``reference``; on a pass, a note where float32 angles cost precision."""

    def watch(student: Any, case: Any, call_: Callable) -> list[Any]:
        shown = lambda i: f"{name}({', '.join(map(str, i.values()))})"  # noqa: E731
        return [call(shown(i), student, *i.values()) for i in sizes]  # as the course calls it

    def judge(case: Any, got: Any, expected: Any, tables: list[Any]) -> None:
        error = 0.0
        for inputs, table in zip(sizes, tables, strict=True):
            what = f"{name}({', '.join(map(str, inputs.values()))})"
            expect(
                isinstance(table, torch.Tensor) and table.dtype == torch.float32,
                f"{what} is not a float32 tensor (the property violated: the stated dtype).",
            )
            truth = reference(**inputs)
            expect_rows_close(table, truth, what, "Positions start at 0 and run to max_len - 1.")
            error = (table.double() - truth.double()).abs().max().item()
        if error > 1e-5 and current().mode != REPLAY:
            print(
                f"Note: {what} is within {error:.1g} of the formula, as float32 angles allow. "
                "Computing the angles in float64 and converting the finished table with "
                ".float() makes it exact to float32 precision."
            )

    return {"observe": watch, "judge": judge}


def non_persistent_buffer(name: str, hint: str | None = None) -> dict:
    """The text's fixed table is a non-persistent buffer ``name``: it follows ``.to(device)``
    and ``.double()``, is not trained and not saved in the ``state_dict``."""

    def watch(module: Any, case: Any, call_: Callable) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            return {
                "buffers": [n for n, _ in module.named_buffers()],
                "saved": [k for k, v in module.state_dict().items() if v.numel() > 1],
            }

        return observe("the module's buffers and state_dict", run)

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        owner = "the module"
        expect(
            name in seen["buffers"],
            f"{owner} has no buffer `{name}` (buffers: {seen['buffers'] or 'none'}), so "
            ".to(device) and .double() would not move the table (the property violated: the "
            "table is a buffer).",
            hint,
        )
        expect(
            not seen["saved"],
            f"{owner} saves `{seen['saved'][0] if seen['saved'] else ''}` in its state_dict, "
            "so in every checkpoint; the table is a formula, rebuilt in __init__ (the property "
            "violated: a non-persistent buffer).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def dropout_on_sum(p: float, hint: str | None = None) -> dict:
    """In training mode the output is ``dropout(p)`` of the eval-mode output ``x + table[:L]``
    (dropout acts on the sum, nothing else)."""

    def watch(module: Any, case: Any, call_: Callable) -> Any:
        def run() -> Any:
            try:
                return module.train()(**case.inputs)
            finally:
                module.eval()

        return observe(f"the module in train mode on {case.what}", run, random=True)

    def judge(case: Any, got: Any, expected: torch.Tensor, trained: Any) -> None:
        what = f"in train mode with dropout={p}, on {case.what}"
        x = case.inputs["x"]
        if got.shape != expected.shape:
            return  # the shape speaks for itself
        expect(
            isinstance(trained, torch.Tensor) and trained.shape == expected.shape,
            f"{what}: the output has another shape than in eval mode.",
            hint,
        )
        expect(
            isinstance(trained, torch.Tensor) and not torch.equal(trained, expected),
            f"{what}: nothing was dropped (the property violated: training mode; dropout acts "
            "in train mode).",
            hint,
        )
        if is_dropout_of(trained, expected, p):
            expect(independent(trained == 0, 1), f"{what}: {SHARED}.", hint)
            dropout_rate(trained == 0, p, what, hint)
            return
        if is_dropout_of(trained - (expected - x), x, p):
            mistake = "dropout is applied to x before the encoding is added"
        elif is_dropout_of(trained - x, expected - x, p):
            mistake = "dropout is applied to the encoding alone"
        else:
            mistake = "the output is not x + table[:L] after one dropout of that probability"
        raise CheckFailure(
            f"{what}: {mistake} (the property violated: training mode); dropout acts on the "
            "sum: each entry zeroed with probability p, the others scaled by 1/(1-p).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def relative_scores(what: str, length: int = 12, dim: int = 32, hint: str | None = None) -> dict:
    """RoPE's defining property: one query and one key placed at every position, the score
    ``<R_m q, R_n k>`` depends only on ``m - n``, at the tolerance the dtype allows."""

    def watch(student: Any, case: Any, call_: Callable) -> list[Any]:
        q, k = torch.randn(2, dim, generator=generator(99), dtype=torch.float64)
        return [
            call(
                f"{what} of one {n} at positions 0..{length - 1}",
                student,
                t.expand(length, dim).clone(),
                names=("x",),
            )
            for n, t in (("query", q), ("key", k))
        ]

    def judge(case: Any, got: Any, expected: Any, rotated: list[Any]) -> None:
        scores = rotated[0] @ rotated[1].T
        expect(
            torch.allclose(scores[1:, 1:], scores[:-1, :-1], **tolerance(scores.dtype)),
            f"score(m + 1, n + 1) differs from score(m, n) for one query and one key placed at "
            f"every pair of positions 0..{length - 1} (the property violated: the score depends "
            "only on m - n).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def sinusoid_first_row(hint: str | None = None) -> dict:
    """Row 0 of a sinusoidal table is (sin 0, cos 0, ...) = (0, 1, 0, 1, ...): the usual slips
    (sin and cos swapped, positions from 1, no cosines, two halves) named from it."""

    def judge(case: Any, got: torch.Tensor, expected: torch.Tensor, seen: Any) -> None:
        if got.shape != expected.shape:
            return  # the shape speaks for itself
        row, truth = got[0].double(), expected[0].double()
        half = row.shape[0] // 2
        near = lambda a, b: torch.allclose(a, b, atol=1e-4)  # noqa: E731
        if near(row, truth):
            return
        if near(row, 1.0 - truth):
            slip = "sin and cos are swapped (sin goes to the even columns)"
        elif expected.shape[0] > 1 and near(row, expected[1].double()):
            slip = "it equals the paper's PE[1]: positions must start at 0, not 1"
        elif near(row, torch.zeros_like(row)):
            slip = "it is all zeros, but cos 0 = 1 belongs in every odd column"
        elif near(row[:half], 0 * row[:half]) and near(row[half:], 1 + 0 * row[half:]):
            slip = "sines and cosines are in two halves, but the paper interleaves them"
        else:
            slip = "sin goes to the even columns, cos to the odd ones, positions from 0"
        raise CheckFailure(
            f"{case.what}: PE[0] should be (sin 0, cos 0, sin 0, ...) = (0, 1, 0, 1, ...); "
            f"{slip} (the property violated: the first row of the formula).",
            hint,
        )

    return {"judge": judge}


def rotation(reference: Callable[..., torch.Tensor], hint: str | None = None) -> dict:
    """A rotation by position: every vector keeps its norm, position 0 is unchanged, and the
    adjacent pairs of the text are rotated (not the pairs (x_i, x_(i + d/2)))."""

    def judge(case: Any, got: torch.Tensor, expected: torch.Tensor, seen: Any) -> None:
        if got.shape != expected.shape:
            return  # the shape speaks for itself
        x = case.inputs["x"].double()
        bound = tolerance(got.dtype)
        expect(
            torch.allclose(got.double().norm(dim=-1), x.norm(dim=-1), atol=1e-4, rtol=1e-4),
            f"on {case.what}, the vector norms changed (the property violated: a rotation keeps "
            "every length).",
            hint,
        )
        if case.inputs.get("positions") is None:
            expect(
                torch.allclose(got[..., 0, :].double(), x[..., 0, :], **bound),
                f"on {case.what}, the vectors at position 0 changed (the property violated: "
                "angle 0 at position 0, positions count from 0).",
                hint,
            )
        half = x.shape[-1] // 2
        x = case.inputs["x"]
        paired = torch.stack((x[..., :half], x[..., half:]), dim=-1).flatten(-2)
        out = reference(**{**case.inputs, "x": paired}).unflatten(-1, (half, 2))
        other = torch.cat((out[..., 0], out[..., 1]), dim=-1)
        expect(
            torch.allclose(got, expected, **bound) or not torch.allclose(got, other, **bound),
            f"on {case.what}, the pairs (x_i, x_(i+d/2)) of the half-split layout were rotated; "
            "this exercise rotates the adjacent pairs (x_2i, x_2i+1) (the property violated: "
            "which coordinates form a pair).",
            hint,
        )

    return {"judge": judge}
