"""Checks for notebook 04, positional encoding.

References are independent of the course's solution: the sinusoidal table is the formula of
Vaswani et al. (2017, section 3.5) evaluated element by element in float64 with Python's
``math``; rotary embeddings are checked by their properties (norms kept, position 0 left
alone, scores that depend only on the offset m - n) and against the complex-number form of
Su et al. (2021, section 3.2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from course.check import (
    CheckFailure,
    exercise_check,
    expect,
    expect_close,
    expect_shape,
    expect_tensor,
)
from course.checks.reference import is_dropout_of, sinusoid_table

TableFn = Callable[[int, int], torch.Tensor]
RopeFn = Callable[..., torch.Tensor]


def _paper_table(max_len: int, d_model: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), in float64, one by one."""
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for column in range(d_model):
            two_i = column - column % 2  # the even index of the (sin, cos) pair
            angle = pos / 10000.0 ** (two_i / d_model)
            table[pos, column] = math.sin(angle) if column % 2 == 0 else math.cos(angle)
    return table


def _row0_diagnosis(row0: torch.Tensor, d_model: int) -> str:
    """Name the usual mistake from the first row of a wrong table."""
    row0 = row0.double()
    expected = _paper_table(1, d_model)[0]
    if torch.allclose(row0, 1.0 - expected, atol=1e-4):
        return (
            "PE[0] is (1, 0, 1, 0, ...) but the paper's PE[0] is (sin 0, cos 0, ...) = "
            "(0, 1, 0, 1, ...): sin and cos are swapped (sin goes to the even columns)."
        )
    if torch.allclose(row0, _paper_table(2, d_model)[1], atol=1e-4):
        return "PE[0] equals the paper's PE[1]: positions must start at 0, not 1."
    half = d_model // 2
    if torch.allclose(row0, torch.zeros_like(row0), atol=1e-4):
        return (
            "PE[0] is all zeros, but cos 0 = 1 belongs in every odd column: the cosines are "
            "missing (or nothing was written into the table)."
        )
    if torch.allclose(row0[:half], torch.zeros(half, dtype=torch.float64), atol=1e-4) and (
        torch.allclose(row0[half:], torch.ones_like(row0[half:]), atol=1e-4)
    ):
        return (
            "PE[0] starts with zeros and ends with ones: the sines and cosines are in two "
            "halves, but the paper interleaves them (sin in column 2i, cos in column 2i + 1)."
        )
    return (
        "PE[0] should be (sin 0, cos 0, sin 0, cos 0, ...) = (0, 1, 0, 1, ...): sin in the "
        "even columns, cos in the odd ones, positions counted from 0."
    )


@exercise_check(
    "Exercise 4.1",
    "sinusoidal table",
    hint="Columns 2i and 2i + 1 share the angle pos / 10000^(2i / d_model) (the exponent uses "
    "the even column index 2i, not i); sin goes to column 2i, cos to column 2i + 1; pos starts at 0.",
)
def sinusoidal_table(student_table: TableFn) -> None:
    """Compare with the paper's formula on several sizes, including odd lengths and length 1."""
    for max_len, d_model in [(50, 16), (7, 6), (1, 4), (101, 64), (12, 7)]:
        what = f"sinusoidal_table({max_len}, {d_model})"
        table = expect_tensor(student_table(max_len, d_model), what)
        expect_shape(
            table, (max_len, d_model), what, "One row per position, one column per dimension."
        )
        expect(
            table.dtype == torch.float32,
            f"{what} has dtype {table.dtype}, expected torch.float32.",
            "Return float32 (compute in float64 if you like, then call .float()).",
        )
        expect(
            torch.allclose(table[0].double(), _paper_table(1, d_model)[0], atol=1e-4),
            f"{what}: {_row0_diagnosis(table[0], d_model)}",
        )
        # float32 sin(pos * w) for pos ~ 100 is only accurate to ~1e-5, hence atol 2e-4.
        expect_close(table.double(), _paper_table(max_len, d_model), what=what, atol=2e-4, rtol=0.0)

    # A long table: angles computed in float32 lose about 1e-3 at position 10000 (the spacing
    # of float32 numbers there), which the paper's formula in float64 does not.
    max_len, d_model = 10000, 16
    table = expect_tensor(student_table(max_len, d_model), f"sinusoidal_table({max_len}, 16)")
    expect_shape(table, (max_len, d_model), f"sinusoidal_table({max_len}, 16)")
    error = (table.double() - sinusoid_table(max_len, d_model)).abs()
    if error.max() > 1e-5:
        pos, column = (int(i) for i in torch.unravel_index(error.argmax(), error.shape))
        raise CheckFailure(
            f"sinusoidal_table({max_len}, 16) is off by {error.max().item():.2g} at position "
            f"{pos}, column {column}: the angles lose precision at large positions when "
            "computed in float32 (near 10000 float32 numbers are 0.001 apart).",
            "Compute positions and angles in float64 (torch.arange(..., dtype=torch.float64)) "
            "and convert the finished table with .float().",
        )


def _expect_value_error(module: nn.Module, x: torch.Tensor, max_len: int) -> None:
    """The module must refuse a sequence longer than max_len with a ValueError."""
    length, hint = x.size(1), "Compare x.size(1) with max_len at the start of forward."
    try:
        module(x)
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001 - any other exception is the wrong kind
        raise CheckFailure(
            f"a sequence of length {length} > max_len={max_len} raised {type(exc).__name__} "
            f"({exc}); raise a ValueError that says the sequence is longer than max_len.",
            hint,
        ) from None
    raise CheckFailure(
        f"a sequence of length {length} > max_len={max_len} was accepted; raise a "
        "ValueError that says the sequence is longer than max_len.",
        hint,
    )


@exercise_check(
    "Exercise 4.2",
    "sinusoidal positional encoding module",
    hint="Register sinusoidal_table(max_len, d_model) with self.register_buffer in __init__; "
    "forward returns dropout(x + table[:L]) for x of shape (batch, L, d_model).",
    seed=0,
)
def sinusoidal_encoding(student_class: type[nn.Module]) -> None:
    """x + PE[:L] against the paper's table, buffers, dtype, dropout and the max_len error."""
    d_model, max_len = 16, 40
    reference = _paper_table(max_len, d_model)
    generator = torch.Generator().manual_seed(0)
    module = student_class(d_model, max_len=max_len).eval()
    trainable = [name for name, p in module.named_parameters() if p.requires_grad]
    expect(
        not trainable,
        f"the module has trainable parameters {trainable}; the sinusoidal "
        "table is a fixed formula, nothing in it is learned.",
        "Store the table with self.register_buffer(...) instead of nn.Parameter.",
    )
    expect(
        any(b.numel() >= max_len * d_model for b in module.buffers()),
        "the module has no buffer holding the table, so .to(device) would not move it.",
        "Create it in __init__ with self.register_buffer('pe', sinusoidal_table(max_len, d_model), "
        "persistent=False).",
    )
    saved = [name for name, value in module.state_dict().items() if value.numel() > 1]
    expect(
        not saved,
        f"the table is saved in the module's state_dict (key {saved[0]!r}) and so in every "
        "checkpoint; it is a formula, rebuilt in __init__, and should not be saved."
        if saved
        else "",
        "Register it with self.register_buffer('pe', table, persistent=False).",
    )

    zeros = torch.zeros(1, 9, d_model)
    expect_close(
        module(zeros),
        reference[:9].float().unsqueeze(0),
        atol=2e-5,
        what="the output for x = 0 of shape (1, 9, 16) (it should be the table's first 9 rows)",
        hint="With x = 0 the output is the encoding alone: table[:L] with L = x.size(1) (the "
        "batch axis comes first), broadcast over the batch.",
    )
    x = torch.randn(2, 11, d_model, generator=generator)
    expect_close(
        module(x),
        x + reference[:11].float(),
        atol=2e-5,
        what="the output for a random batch of shape (2, 11, 16)",
        hint="Add table[:L] (shape (L, d_model)); it broadcasts over the batch axis. The "
        "batch comes first here, so do not slice the table with x.size(0).",
    )
    x = torch.randn(3, max_len, d_model, generator=generator)
    expect_close(
        module(x),
        x + reference.float(),
        atol=2e-5,
        what=f"the output for a batch of shape (3, {max_len}, 16), length == max_len",
    )
    x = torch.randn(4, 1, d_model, generator=generator)
    expect_close(
        module(x), x + reference[:1].float(), atol=2e-5, what="the output for sequences of length 1"
    )

    module64 = student_class(d_model, max_len=max_len).double().eval()
    x64 = torch.randn(2, 5, d_model, dtype=torch.float64, generator=generator)
    expect_close(
        module64(x64),
        x64 + reference[:5],
        atol=1e-6,
        what="the output of module.double() for a float64 batch",
        hint="A buffer follows module.double(); a plain tensor attribute does not.",
    )

    _expect_value_error(module, torch.zeros(1, max_len + 1, d_model), max_len)

    with_dropout = student_class(d_model, max_len=max_len, dropout=0.5)
    x = torch.randn(2, 11, d_model, generator=generator)
    expect_close(
        with_dropout.eval()(x),
        x + reference[:11].float(),
        atol=2e-5,
        what="the output with dropout=0.5 in eval mode (dropout must be off)",
        hint="Use an nn.Dropout sub-module: it is active only in train mode.",
    )
    torch.manual_seed(0)
    trained = with_dropout.train()(x)
    clean = x + reference[:11].float()
    expect_tensor(trained, "the output with dropout=0.5 in train mode")
    expect(
        not torch.allclose(trained, clean),
        "with dropout=0.5 in train mode nothing was dropped: the dropout is not applied.",
        "Return self.dropout(x + table[:L]).",
    )
    if not is_dropout_of(trained, clean, 0.5):
        if is_dropout_of(trained - reference[:11].float(), x, 0.5):
            mistake = "dropout is applied to x before the encoding is added"
        elif is_dropout_of(trained - x, reference[:11].float(), 0.5):
            mistake = "dropout is applied to the encoding alone"
        else:
            mistake = "the output is not x + table[:L] after dropout"
        raise CheckFailure(
            f"with dropout=0.5 in train mode, {mistake}; dropout acts on the sum: each entry "
            "of x + table[:L] is zeroed with probability p, the others scaled by 1/(1-p).",
            "Return self.dropout(x + table[:L]).",
        )


@exercise_check(
    "Exercise 4.3",
    "learned positional embedding",
    hint="Hold an nn.Embedding(max_len, d_model); forward adds embedding(torch.arange(L)) to x "
    "(batch, L, d_model) and raises ValueError when L > max_len.",
)
def learned_embedding(student_class: type[nn.Module]) -> None:
    """x + P[:L] with P the module's only trainable table; gradients reach rows 0..L-1 only."""
    max_len, d_model = 20, 8
    torch.manual_seed(0)
    module = student_class(max_len, d_model)
    params = [p for p in module.parameters() if p.requires_grad]
    expect(
        len(params) == 1 and tuple(params[0].shape) == (max_len, d_model),
        f"expected exactly one trainable ({max_len}, {d_model}) table, found shapes "
        f"{[tuple(p.shape) for p in params]}.",
        "One nn.Embedding(max_len, d_model): a trainable vector per position.",
    )
    table = params[0]
    generator = torch.Generator().manual_seed(1)

    zeros = torch.zeros(1, 7, d_model)
    expect_close(
        module(zeros),
        table[:7].detach().unsqueeze(0),
        what="the output for x = 0 of shape (1, 7, 8) (it should be rows 0..6 of the table)",
        hint="Look up positions 0, 1, ..., L - 1 (torch.arange(L)), not 1..L.",
    )
    x = torch.randn(3, 7, d_model, generator=generator)
    out = module(x)
    expect_close(
        out,
        x + table[:7].detach(),
        what="the output for a random batch of shape (3, 7, 8)",
        hint="Add the (L, d_model) lookup to x; it broadcasts over the batch axis.",
    )
    out.sum().backward()
    grad = table.grad
    expect(
        grad is not None, "no gradient reached the position table: it must be part of the output."
    )
    expected_grad = torch.zeros(max_len, d_model)
    expected_grad[:7] = 3.0  # each of the 3 sequences uses rows 0..6 once
    expect_close(
        grad,
        expected_grad,
        what="the gradient of output.sum() w.r.t. the table",
        hint="Every position 0..L-1 is used once per sequence; no other row is.",
    )

    x = torch.randn(2, max_len, d_model, generator=generator)
    expect_close(
        module(x), x + table.detach(), what=f"the output for length == max_len ({max_len})"
    )
    x = torch.randn(1, 1, d_model, generator=generator)
    expect_close(module(x), x + table[:1].detach(), what="the output for a batch of one, length 1")

    module64 = student_class(max_len, d_model).double()
    table64 = next(p for p in module64.parameters())
    x64 = torch.randn(2, 5, d_model, dtype=torch.float64, generator=generator)
    expect_close(
        module64(x64),
        x64 + table64[:5].detach(),
        atol=1e-12,
        what="the output of module.double() for a float64 batch",
    )

    _expect_value_error(module, torch.zeros(1, max_len + 1, d_model), max_len)


def _rope_reference(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Su et al.'s complex form: pair (x_2i, x_2i+1) -> (x_2i + i x_2i+1) * exp(i m theta_i)."""
    dim = x.shape[-1]
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], dim // 2, 2).contiguous())
    theta = torch.tensor([base ** (-2.0 * i / dim) for i in range(dim // 2)], dtype=torch.float64)
    angle = positions.double().unsqueeze(-1) * theta
    rotated = pairs * torch.polar(torch.ones_like(angle), angle)
    return torch.view_as_real(rotated).flatten(-2).to(x.dtype)


def _rope_half_split(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The other common layout (GPT-NeoX, Llama in HF): pairs (x_i, x_{i + d/2})."""
    dim = x.shape[-1]
    theta = torch.tensor([base ** (-2.0 * i / dim) for i in range(dim // 2)], dtype=torch.float64)
    angle = positions.double().unsqueeze(-1) * theta
    first, second = x.double()[..., : dim // 2], x.double()[..., dim // 2 :]
    return torch.cat(
        (first * angle.cos() - second * angle.sin(), first * angle.sin() + second * angle.cos()),
        dim=-1,
    ).to(x.dtype)


def _rope_at(student_rope: RopeFn, x: torch.Tensor, positions: torch.Tensor, what: str) -> Any:
    """``student_rope(x, positions)`` with floating-point positions; a crash is named."""
    try:
        return student_rope(x, positions)
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. a table lookup cannot take these positions
        raise CheckFailure(
            f"{what} raised {type(exc).__name__} ({exc}); positions may be floating point "
            "(float64, even fractional), not only integer indices.",
            "Compute the angles from the positions themselves, positions[..., None] * theta, "
            "instead of looking rows up in a precomputed table.",
        ) from None


@exercise_check(
    "Exercise 4.4",
    "rotary position embedding (RoPE)",
    hint="Rotate each adjacent pair (x[..., 2i], x[..., 2i+1]) at position m by the angle "
    "m * base^(-2i/d): (a, b) -> (a cos - b sin, a sin + b cos).",
)
def rope(student_rope: RopeFn) -> None:
    """Shape, norms, position 0, the relative-offset property, then the exact formula."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 10, 16, generator=generator)  # (batch, heads, length, d)
    positions = torch.arange(10)
    out = student_rope(x)
    expect_shape(
        out,
        x.shape,
        "apply_rope(x) for x of shape (2, 3, 10, 16)",
        "RoPE returns a tensor of the same shape as its input.",
    )
    expect(out.dtype == x.dtype, f"apply_rope changed the dtype from {x.dtype} to {out.dtype}.")
    expect_close(
        out.norm(dim=-1),
        x.norm(dim=-1),
        atol=1e-4,
        what="the vector norms after RoPE (a rotation keeps every length)",
        hint="Each pair must be rotated, (a, b) -> (a cos - b sin, a sin + b cos); "
        "adding a position vector or scaling changes the norm.",
    )
    expect_close(
        out[..., 0, :],
        x[..., 0, :],
        atol=1e-6,
        what="the vectors at position 0 (rotated by angle 0, so unchanged)",
        hint="Positions start at 0 by default: torch.arange(L).",
    )

    # The defining property: <R_m q, R_n k> depends only on m - n.
    q, k = torch.randn(2, 32, generator=generator, dtype=torch.float64)
    length = 12
    rq = student_rope(q.expand(length, 32).clone())  # q placed at positions 0..11
    rk = student_rope(k.expand(length, 32).clone())
    expect_shape(rq, (length, 32), "apply_rope of a 2-D (L, d) input")
    scores = rq @ rk.T  # scores[m, n] = <R_m q, R_n k>
    expect_close(
        scores[1:, 1:],
        scores[:-1, :-1],
        atol=1e-4,
        rtol=1e-4,
        what="score(m + 1, n + 1) vs score(m, n) for one query and one key at every pair "
        "of positions (the score must depend only on m - n)",
        hint="Queries and keys must be rotated by angles proportional to their position, "
        "with the same frequencies for both.",
    )

    diagnosis = (
        "matches the half-split layout (pairs x_i, x_{i+d/2}); this exercise uses the "
        "paper's adjacent pairs (x_2i, x_2i+1)."
    )
    expected = _rope_reference(x, positions, 10000.0)
    if not torch.allclose(out, expected, atol=1e-4) and torch.allclose(
        out, _rope_half_split(x, positions, 10000.0), atol=1e-4
    ):
        expect(False, f"apply_rope(x) {diagnosis}")
    expect_close(out, expected, atol=1e-4, what="apply_rope(x) against Su et al.'s formula")

    x64 = torch.randn(1, 7, 6, dtype=torch.float64, generator=generator)
    expect_close(
        student_rope(x64),
        _rope_reference(x64, torch.arange(7), 10000.0),
        atol=1e-5,
        what="apply_rope of a float64 (1, 7, 6) input",
        hint="Keep the input's dtype; compute the angles in float64 for float64 inputs.",
    )
    shifted = torch.arange(7) + 5
    expect_close(
        student_rope(x64, shifted),
        _rope_reference(x64, shifted, 10000.0),
        atol=1e-5,
        what="apply_rope(x, positions=5..11)",
        hint="Use the `positions` argument when it is given instead of 0..L-1.",
    )
    odd = torch.tensor([3.0, 0.0, 17.0, 2.0, 2.0, 40.0, 1.0], dtype=torch.float64)
    fractional = torch.tensor([0.5, 0.0, 2.25, 7.0, 1.5, 30.75, 3.0], dtype=torch.float64)
    for positions, hint in [
        (odd, None),
        (fractional, "The angle is position * theta_i for any real position: do not round it."),
    ]:
        what = f"apply_rope(x, positions={positions.tolist()} in float64)"
        expect_close(
            _rope_at(student_rope, x64, positions, what),
            _rope_reference(x64, positions, 10000.0),
            atol=1e-5,
            what=what,
            hint=hint,
        )
    expect_close(
        student_rope(x64, base=100.0),
        _rope_reference(x64, torch.arange(7), 100.0),
        atol=1e-5,
        what="apply_rope(x, base=100.0)",
        hint="theta_i = base^(-2i/d): use the `base` argument.",
    )
