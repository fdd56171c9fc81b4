"""Checks for notebook 04, positional encoding: each exercise's contract, declared; the
properties of positions each serve one check, so they live here.

References hold no implementation of an exercise: the paper's table in float64
(:func:`course.checks.reference.sinusoid_table`); rotary embeddings by GPT-J's function in
``transformers`` (adjacent pairs, as in Su et al., 2021). A float32 table is as right as float32
angles allow (:func:`_rows_close`), so the float32 constructions of pytorch/examples, the
Annotated Transformer and d2l pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from course.checks.reference import sinusoid_table
from course.framework import properties as prop
from course.framework.check import exercise_check
from course.framework.observe import REPLAY, current
from course.framework.properties import CheckFailure, expect, generator, observe, tolerance
from course.framework.properties.statistics import SHARED, dropout_rate, independent, is_dropout_of
from course.framework.spec import (
    DEFAULTS,
    KEYWORD,
    POSITIONAL,
    Build,
    Case,
    Mistake,
    ModuleSpec,
    Property,
    Spec,
    cases,
    check,
    in_train,
    run_module,
)

LENGTH_HINT = "Compare the sequence length (the axis after the batch) with max_len in forward."


def _too_long(max_len: int, d_model: int, name: str) -> Property:
    """The text: a sequence longer than max_len raises a ValueError that says so."""
    return Property(
        "a ValueError beyond max_len",
        applies=lambda c: c.grad and c.inputs["x"].shape[-1] == d_model,  # this build's cases
        **prop.refusal(
            ValueError,
            lambda m: m(torch.zeros(1, max_len + 1, d_model)),
            f"{name} on a sequence of length {max_len + 1}",
            f"a sequence longer than max_len={max_len} has no position vector.",
            LENGTH_HINT,
            says_so=True,  # "raises a `ValueError` that says so"
        ),
    )


def _builds(rows: list[tuple], offset: int) -> Callable[[], list[Build]]:
    """One build per row (what, the constructor's arguments, x's (batch, length) shapes); with
    dropout, train() differs from eval()."""

    def xs(made: dict, shapes: list, offset: int) -> list[Case]:
        g = generator(offset)
        d, n, p = made["d_model"], made.get("max_len", 512), made.get("dropout", 0.0)
        mode = f"; dropout={p}, which eval mode turns off" if p else ""
        exactly = f"x of exactly max_len={n} positions (every length up to and including max_len"
        rows = [  # what, x, grad
            (
                (f"{exactly} is allowed)" if length == n else f"x ({b}, {length}, {d})") + mode,
                torch.randn(b, length, d, generator=g),
                i == 1,
            )
            for i, (b, length) in enumerate(shapes)
        ]
        return cases(("x",), rows, fields=("grad",))

    return lambda: [
        Build(what, made, functools.partial(xs, made, shapes, offset + i), not made.get("dropout"))
        for i, (what, made, shapes) in enumerate(rows)
    ]


# --- Exercise 4.1 ----------------------------------------------------------------------------

TABLE_HINT = (
    "Columns 2i and 2i + 1 share one angle, whose exponent uses the even column index 2i; sin "
    "goes to the even column, cos to the odd one; positions start at 0."
)


def _table(max_len: int, d_model: int) -> torch.Tensor:
    return sinusoid_table(max_len, d_model, torch.float32)


FORMULA = "PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(...)"
TABLE_MISTAKES = (  # each a wrong table, in the reference's form
    Mistake("sin and cos swapped (sin in the odd columns)", FORMULA,
            lambda max_len, d_model: _table(max_len, d_model).unflatten(-1, (-1, 2)).flip(-1)
            .flatten(-2)),
    Mistake("positions counted from 1, not 0", "positions 0 to max_len - 1",
            lambda max_len, d_model: _table(max_len + 1, d_model)[1:]),
    Mistake("sines and cosines in two halves (the paper interleaves them)", FORMULA,
            lambda max_len, d_model: torch.cat([_table(max_len, d_model)[:, i::2] for i in (0, 1)],
                                               -1)),
    Mistake("a table of all zeros", FORMULA, lambda max_len, d_model: torch.zeros(max_len, d_model)),
)  # fmt: skip


def _rows_close(got: Any, expected: torch.Tensor, what: str, hint: str = TABLE_HINT) -> None:
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


LONG = ((512, 32), (10000, 16))  # (max_len, d_model): long tables, as float32 allows


def _long_judge(case: Any, got: Any, expected: Any, tables: list[Any]) -> None:
    """Long tables within :func:`_rows_close` of the paper's; on a pass, a note where float32
    angles cost precision."""
    error = 0.0
    for (n, d), table in zip(LONG, tables, strict=True):
        what = f"sinusoidal_table({n}, {d})"
        expect(
            isinstance(table, torch.Tensor) and table.dtype == torch.float32,
            f"{what} is {getattr(table, 'dtype', prop.a_type(table))}, expected a float32 tensor",
            prop="the stated dtype",
        )
        truth = sinusoid_table(n, d)
        _rows_close(table, truth, what, "Positions start at 0 and run to max_len - 1.")
        error = (table.double() - truth.double()).abs().max().item()
    if error > 1e-5 and current().mode != REPLAY:
        print(
            f"Note: {what} is within {error:.1g} of the formula, as float32 angles allow. "
            "Computing the angles in float64 and converting the finished table with "
            ".float() makes it exact to float32 precision."
        )


sinusoidal_table = check(
    Spec(
        exercise="Exercise 4.1",
        title="sinusoidal table",
        name="sinusoidal_table",
        params=("max_len", "d_model"),
        forms=(POSITIONAL,),
        hint=TABLE_HINT,
        reference=_table,
        mistakes=TABLE_MISTAKES,
        cases=lambda: cases(
            ("max_len", "d_model"),
            [(f"a ({n}, {d}) table", n, d) for n, d in ((7, 6), (1, 4), (50, 16), (101, 64))],
            device=False,
        ),
        properties=(
            Property(
                "long tables, as float32 allows",
                _long_judge,
                lambda student, case, call: [
                    prop.call(f"sinusoidal_table({n}, {d})", student, n, d) for n, d in LONG
                ],
                applies=lambda c: c.inputs["max_len"] == 7,
            ),
        ),
    )
)


# --- Exercise 4.2 ----------------------------------------------------------------------------

ENCODING_HINT = (
    "The table is computed once in __init__ and registered as a non-persistent buffer; forward "
    "adds its first L rows, L being the length axis (after the batch), then applies dropout to "
    "the sum."
)


def _buffers(module: Any, case: Any, call_: Any) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        return {
            "buffers": [n for n, _ in module.named_buffers()],
            "saved": [k for k, v in module.state_dict().items() if v.numel() > 1],
        }

    return observe("the module's buffers and state_dict", run)


def _buffer_judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
    """The text's fixed table is a non-persistent buffer ``pe``: it follows ``.to(device)``
    and ``.double()``, is not trained and not saved in the ``state_dict``."""
    expect(
        "pe" in seen["buffers"],
        f"the module has no buffer `pe` (buffers: {seen['buffers'] or 'none'}), so "
        ".to(device) and .double() would not move the table",
        ENCODING_HINT,
        "the table is a buffer",
    )
    expect(
        not seen["saved"],
        f"the module saves `{seen['saved'][0] if seen['saved'] else ''}` in its state_dict, "
        "so in every checkpoint; the table is a formula, rebuilt in __init__",
        ENCODING_HINT,
        "a non-persistent buffer",
    )


def _in_train(module: Any, case: Any, call_: Any) -> Any:
    run = lambda: in_train(module, (), case.inputs)["result"]  # noqa: E731
    return observe(f"the module in train mode on {case.what}", run, random=True)


def _dropout_judge(case: Any, got: Any, expected: torch.Tensor, trained: Any) -> None:
    """In training mode the output is ``dropout(0.3)`` of the eval-mode output
    ``x + table[:L]`` (dropout acts on the sum, nothing else)."""
    # a judge, not mistakes: a dropout result is random, so no value comparison says where it acted
    p, what, x = 0.3, f"in train mode with dropout=0.3, on {case.what}", case.inputs["x"]
    if got.shape != expected.shape:
        return  # the shape speaks for itself
    expect(
        isinstance(trained, torch.Tensor) and trained.shape == expected.shape,
        f"{what}: the output has shape {tuple(getattr(trained, 'shape', ()))}, in eval mode "
        f"{tuple(expected.shape)}",
        ENCODING_HINT,
    )
    expect(
        isinstance(trained, torch.Tensor) and not torch.equal(trained, expected),
        f"{what}: nothing was dropped; dropout acts in train mode",
        ENCODING_HINT,
    )
    if is_dropout_of(trained, expected, p):
        expect(independent(trained == 0, 1), f"{what}: {SHARED}.", ENCODING_HINT)
        dropout_rate(trained == 0, p, what, ENCODING_HINT)
        return
    if is_dropout_of(trained - (expected - x), x, p):
        mistake = "dropout is applied to x before the encoding is added"
    elif is_dropout_of(trained - x, expected - x, p):
        mistake = "dropout is applied to the encoding alone"
    else:
        mistake = "the output is not x + table[:L] after one dropout of that probability"
    raise CheckFailure(
        f"{what}: {mistake}; dropout acts on the sum: each entry zeroed with probability p, the "
        "others scaled by 1/(1-p)",
        ENCODING_HINT,
    )


def _encoding(build: Build, w: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
    """x + PE[:L], PE the module's buffer `pe` once it is found to be the paper's table within
    float32's precision (the paper's table itself when there is no such buffer)."""
    d, n = build.inputs["d_model"], build.inputs.get("max_len", 512)
    paper = sinusoid_table(n, d)
    table = buffers.get("pe")
    if isinstance(table, torch.Tensor) and table.numel() == n * d:
        _rows_close(table.reshape(n, d), paper, "the buffer `pe`")
        return x + table.reshape(n, d)[: x.size(1)].to(x.dtype)
    return x + paper[: x.size(1)].to(x.dtype)


NAME = "SinusoidalPositionalEncoding"
ENCODINGS = [  # the defaults are max_len=512, dropout=0.0
    ("max_len 40", dict(d_model=16, max_len=40, dropout=0.0), [(1, 9), (2, 11), (3, 40), (4, 1)]),
    ("dropout 0.3", dict(d_model=6, max_len=7, dropout=0.3), [(2, 5), (1, 7), (400, 7)]),
    ("the defaults (max_len=512, dropout=0.0)", dict(d_model=8), [(1, 5), (2, 3), (1, 512)]),
]

sinusoidal_encoding = check(
    ModuleSpec(
        exercise="Exercise 4.2",
        title="sinusoidal positional encoding module",
        name=NAME,
        init=("d_model", "max_len", "dropout"),
        init_defaults={"max_len": 512, "dropout": 0.0},
        forward=("x",),
        builds=_builds(ENCODINGS, 0),
        parameters=lambda build: {},
        reference=_encoding,
        gradients=("x",),
        hint=ENCODING_HINT,
        properties=(
            Property("a non-persistent buffer `pe`", _buffer_judge, _buffers),
            Property(
                "training mode",  # dropout on the sum, each entry on its own
                _dropout_judge,
                _in_train,
                applies=lambda c: c.inputs["x"].shape[-1] == 6,
            ),
            *(_too_long(m.get("max_len", 512), m["d_model"], NAME) for _, m, _ in ENCODINGS),
        ),
    )
)


# --- Exercise 4.3 ----------------------------------------------------------------------------

LEARNED_BUILDS = [
    ("max_len 20, d_model 8", dict(max_len=20, d_model=8), [(1, 7), (3, 7), (2, 20), (1, 1)]),
    ("max_len 5, d_model 3", dict(max_len=5, d_model=3), [(2, 5), (4, 2)]),
]
LEARNED = ModuleSpec(
    exercise="Exercise 4.3",
    title="learned positional embedding",
    name="LearnedPositionalEmbedding",
    init=("max_len", "d_model"),
    forward=("x",),
    builds=_builds(LEARNED_BUILDS, 10),
    parameters=lambda build: {
        "embedding.weight": (build.inputs["max_len"], build.inputs["d_model"])
    },
    reference=lambda build, w, buffers, x: x + next(iter(w.values()))[: x.size(1)].to(x.dtype),
    gradients=("x",),
    hint="One trainable vector per position; forward adds the vectors of positions 0..L-1, L "
    "being the length axis (after the batch), and raises a ValueError beyond max_len.",
    properties=tuple(_too_long(n, d, "LearnedPositionalEmbedding") for n, d in ((20, 8), (5, 3))),
)


@exercise_check("Exercise 4.3", LEARNED.title, hint=LEARNED.hint)
def learned_embedding(student_class: Any) -> None:
    """The declared contract; the one trainable table is read under the name the module gives
    it (``embedding.weight`` in the text; a bare ``nn.Parameter`` table is as right)."""
    names = observe(
        "LearnedPositionalEmbedding(20, 8): its trainable parameters",
        lambda: [n for n, p in student_class(20, 8).named_parameters() if p.requires_grad],
        random=True,
    )
    name = names[0] if len(names) == 1 else "embedding.weight"
    shapes = lambda b: {name: (b.inputs["max_len"], b.inputs["d_model"])}  # noqa: E731
    run_module(ModuleSpec(**{**LEARNED.__dict__, "parameters": shapes}), student_class)


learned_embedding.spec = LEARNED  # type: ignore[attr-defined]


# --- Exercise 4.4 ----------------------------------------------------------------------------


def _rotated(x: torch.Tensor, positions: Any = None, base: float = 10000.0) -> torch.Tensor:
    """GPT-J's rotary function in ``transformers`` (adjacent pairs) on the angles
    ``positions * theta_i``, theta_i = base^(-2i/d), of the exercise text, in float64."""
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb

    length, dim = x.shape[-2], x.shape[-1]
    positions = torch.arange(length) if positions is None else positions
    theta = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angle = (positions.double().unsqueeze(-1) * theta).expand(*x.shape[:-1], dim // 2)
    flat, angle = x.double().reshape(-1, length, 1, dim), angle.reshape(-1, length, dim // 2)
    return apply_rotary_pos_emb(flat, angle.sin(), angle.cos()).reshape(x.shape).to(x.dtype)


def _rope_cases() -> list[Case]:
    g, t, f32, f64 = generator(0), torch.tensor, torch.float32, torch.float64

    def given(*shape: int, dtype: torch.dtype = f64, **inputs: Any) -> dict[str, Any]:
        """x of ``shape`` and the arguments besides x that the case gives."""
        x = torch.randn(shape, generator=g, dtype=dtype)
        return {"x": x, "positions": None, "base": 10000.0, **inputs}

    return [
        Case("x (2, 3, 10, 16)", given(2, 3, 10, 16, dtype=f32), grad=True),
        Case("a float64 (1, 7, 6) input", given(1, 7, 6), "Keep the input's dtype."),
        Case("a (1, 1, 1, 4) input (one position)", given(1, 1, 1, 4, dtype=f32)),
        Case("a 2-D (12, 32) input", given(12, 32)),
        Case(
            "positions=5..11",
            given(1, 7, 6, positions=torch.arange(7) + 5),
            "Use the `positions` argument when it is given instead of 0..L-1.",
        ),
        Case(
            "positions=[3, 0, 17, 2, 2, 40, 1] as float64 (floating point positions are allowed)",
            given(1, 7, 6, positions=t([3.0, 0.0, 17.0, 2.0, 2.0, 40.0, 1.0], dtype=f64)),
            grad=True,
        ),
        Case(
            "positions=[0.5, 0, 2.25, 7, 1.5, 30.75, 3] in float64 (floating point positions are "
            "allowed: compute the angles from them)",
            given(1, 7, 6, positions=t([0.5, 0.0, 2.25, 7.0, 1.5, 30.75, 3.0], dtype=f64)),
            "The angle is position * theta_i for any real position: do not round it or look it up.",
        ),
        Case(
            "(B, L) positions, one row per sequence, for x (3, 5, 8)",
            given(3, 5, 8, positions=t([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11], [4, 3, 2, 1, 0]])),
            "positions may have the shape of x without its last axis: each sequence its own.",
        ),
        Case(
            "positions (2, 1, 5) for x (2, 2, 5, 8)",
            given(2, 2, 5, 8, dtype=f32, positions=t([[[0, 1, 2, 3, 4]], [[3, 4, 5, 6, 7]]])),
            "positions broadcasts to x's shape without its last axis.",
        ),
        Case(
            "base=100.0",
            given(1, 7, 6, base=100.0),
            "theta_i is computed from the `base` argument.",
        ),
    ]


ROPE_HINT = (
    "Each adjacent pair (x[..., 2i], x[..., 2i+1]) at position m is rotated by the angle "
    "m * theta_i, theta_i = base^(-2i/d), positions counted from 0."
)


def _half_split(x: torch.Tensor, positions: Any = None, base: float = 10000.0) -> torch.Tensor:
    """GPT-NeoX's layout: the pairs (x_i, x_(i + d/2)) rotated, not the text's adjacent pairs."""
    half = x.shape[-1] // 2
    paired = torch.stack((x[..., :half], x[..., half:]), dim=-1).flatten(-2)
    out = _rotated(paired, positions, base).unflatten(-1, (half, 2))
    return torch.cat((out[..., 0], out[..., 1]), dim=-1)


def _rotation(case: Any, got: torch.Tensor, expected: torch.Tensor, seen: Any) -> None:
    """A rotation by position: every vector keeps its norm, position 0 is unchanged."""
    if got.shape != expected.shape:
        return  # the shape speaks for itself
    x = case.inputs["x"].double()
    bound = tolerance(got.dtype)
    norms, before = got.double().norm(dim=-1), x.norm(dim=-1)
    at = tuple(int(i) for i in torch.unravel_index((norms - before).abs().argmax(), norms.shape))
    expect(
        torch.allclose(norms, before, atol=1e-4, rtol=1e-4),
        f"on {case.what}, the vector norms changed: the vector at index {at} has norm "
        f"{norms[at].item():.6g}, the input's {before[at].item():.6g}",
        ROPE_HINT,
        "a rotation keeps every length",
    )
    if case.inputs.get("positions") is None:
        expect(
            torch.allclose(got[..., 0, :].double(), x[..., 0, :], **bound),
            f"on {case.what}, the vectors at position 0 changed",
            ROPE_HINT,
            "angle 0 at position 0, positions count from 0",
        )


def _placed(student: Any, case: Any, call_: Any, length: int = 12, dim: int = 32) -> list:
    """One query and one key placed at every position 0..length-1."""
    q, k = torch.randn(2, dim, generator=generator(99), dtype=torch.float64)
    return [
        prop.call(
            f"apply_rope of one {n} at positions 0..{length - 1}",
            student,
            t.expand(length, dim).clone(),
            names=("x",),
            free=("x",),  # the text does not ask to leave x untouched
        )
        for n, t in (("query", q), ("key", k))
    ]


def _relative(case: Any, got: Any, expected: Any, rotated: list[Any]) -> None:
    """RoPE's defining property: the score ``<R_m q, R_n k>`` depends only on ``m - n``, at
    the tolerance the dtype allows."""
    scores = rotated[0] @ rotated[1].T
    gap = (scores[1:, 1:] - scores[:-1, :-1]).abs()
    m, n = (int(i) for i in torch.unravel_index(gap.argmax(), gap.shape))
    expect(
        torch.allclose(scores[1:, 1:], scores[:-1, :-1], **tolerance(scores.dtype)),
        f"score({m + 1}, {n + 1}) = {scores[m + 1, n + 1].item():.6g} differs from score({m}, "
        f"{n}) = {scores[m, n].item():.6g} for one query and one key placed at every pair of "
        "positions 0..11",
        ROPE_HINT,
    )


rope = check(
    Spec(
        exercise="Exercise 4.4",
        title="rotary position embedding (RoPE)",
        name="apply_rope",
        params=("x", "positions", "base"),
        defaults={"positions": None, "base": 10000.0},
        forms=(POSITIONAL, KEYWORD, DEFAULTS),
        reference=_rotated,
        cases=_rope_cases,
        mutable=("x", "positions"),  # the text asks to keep x's shape, dtype and device, no more
        mistakes=(
            Mistake(
                "the half-split layout, pairs (x_i, x_(i+d/2))",
                "Rotate the adjacent pairs `(x[..., 2i], x[..., 2i+1])`",
                _half_split,
                ROPE_HINT,
            ),
        ),
        gradients=("x",),
        hint=ROPE_HINT,
        properties=(
            Property("a rotation", _rotation),
            Property(
                "the score depends only on m - n",
                _relative,
                _placed,
                applies=lambda c: c.what.startswith("x ("),
            ),
        ),
    )
)
