"""Checks for notebook 04, positional encoding: each exercise's contract, declared.

References hold no implementation of an exercise: the sinusoidal table is
:func:`course.checks.reference.sinusoid_table` (Vaswani et al., 2017, section 3.5, in float64);
rotary embeddings are rotated by the Hugging Face ``transformers`` function of GPT-J (adjacent
pairs, as in Su et al., 2021) on the angles ``m * theta_i`` of the text. A float32 table is as
right as float32 angles allow: long tables and the module's buffer are compared with a tolerance
that grows with the position (:func:`course.properties.expect_rows_close`), so the float32
constructions of pytorch/examples, the Annotated Transformer and d2l pass.
"""

from __future__ import annotations

from typing import Any

import torch

from course import properties as prop
from course.check import exercise_check
from course.checks.reference import sinusoid_table
from course.properties import generator, observe, positions
from course.spec import (
    DEFAULTS,
    KEYWORD,
    POSITIONAL,
    Build,
    Case,
    ModuleSpec,
    Property,
    Spec,
    check,
    run_module,
)

LENGTH_HINT = "Compare the sequence length (the axis after the batch) with max_len in forward."


def _too_long(max_len: int, d_model: int, name: str) -> Property:
    """The text: a sequence longer than max_len raises a ValueError that says so."""
    return Property(
        "a ValueError beyond max_len",
        applies=lambda c: c.grad,
        **prop.refusal(
            ValueError,
            lambda m: m(torch.zeros(1, max_len + 1, d_model)),
            f"{name} on a sequence of length {max_len + 1}",
            f"a sequence longer than max_len={max_len} has no position vector.",
            LENGTH_HINT,
            says_so=True,  # "raises a `ValueError` that says so"
        ),
    )


def _exactly(max_len: int) -> str:
    return (
        f"x of exactly max_len={max_len} positions (every length up to and including "
        "max_len is allowed)"
    )


def _xs(d_model: int, shapes: list, max_len: int, offset: int, mode: str = "") -> list[Case]:
    g = generator(offset)
    return [
        Case(
            (_exactly(max_len) if n == max_len else f"x ({b}, {n}, {d_model})") + mode,
            {"x": torch.randn(b, n, d_model, generator=g)},
            grad=i == 1,
        )
        for i, (b, n) in enumerate(shapes)
    ]


# --- Exercise 4.1 ----------------------------------------------------------------------------

TABLE_HINT = (
    "Columns 2i and 2i + 1 share one angle, whose exponent uses the even column index 2i; sin "
    "goes to the even column, cos to the odd one; positions start at 0."
)
sinusoidal_table = check(
    Spec(
        exercise="Exercise 4.1",
        title="sinusoidal table",
        name="sinusoidal_table",
        params=("max_len", "d_model"),
        forms=(POSITIONAL,),
        hint=TABLE_HINT,
        reference=lambda max_len, d_model: sinusoid_table(max_len, d_model, torch.float32),
        cases=lambda: [
            Case(f"a ({n}, {d}) table", {"max_len": n, "d_model": d}, device=False)
            for n, d in ((7, 6), (1, 4), (50, 16), (101, 64))
        ],
        properties=(
            Property("PE[0] = (0, 1, 0, 1, ...)", **positions.sinusoid_first_row(TABLE_HINT)),
            Property(
                "long tables, as float32 allows",
                applies=lambda c: c.inputs["max_len"] == 7,
                **positions.close_by_position(
                    [{"max_len": 512, "d_model": 32}, {"max_len": 10000, "d_model": 16}],
                    lambda max_len, d_model: sinusoid_table(max_len, d_model),
                    "sinusoidal_table",
                ),
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


def _encoding(build: Build, w: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
    """x + PE[:L], PE the module's buffer `pe` once it is found to be the paper's table within
    float32's precision (the paper's table itself when there is no such buffer)."""
    d, n = build.inputs["d_model"], build.inputs.get("max_len", 512)
    paper = sinusoid_table(n, d)
    table = buffers.get("pe")
    if isinstance(table, torch.Tensor) and table.numel() == n * d:
        positions.expect_rows_close(table.reshape(n, d), paper, "the buffer `pe`", TABLE_HINT)
        return x + table.reshape(n, d)[: x.size(1)].to(x.dtype)
    return x + paper[: x.size(1)].to(x.dtype)


def _encoding_builds() -> list[Build]:
    def build(what: str, inputs: dict, shapes: list, offset: int, det: bool = True) -> Build:
        n, d = inputs.get("max_len", 512), inputs["d_model"]
        mode = "" if det else f"; dropout={inputs['dropout']}, which eval mode turns off"
        return Build(what, inputs, lambda: _xs(d, shapes, n, offset, mode), det)

    return [
        build(
            "max_len 40",
            {"d_model": 16, "max_len": 40, "dropout": 0.0},
            [(1, 9), (2, 11), (3, 40), (4, 1)],
            0,
        ),
        build(
            "dropout 0.3",
            {"d_model": 6, "max_len": 7, "dropout": 0.3},
            [(2, 5), (1, 7), (400, 7)],
            1,
            det=False,
        ),
        build(
            "the defaults (max_len=512, dropout=0.0)", {"d_model": 8}, [(1, 5), (2, 3), (1, 512)], 2
        ),
    ]


def _encoding_properties() -> tuple[Property, ...]:
    name = "SinusoidalPositionalEncoding"
    return (
        Property(
            "a non-persistent buffer `pe`", **positions.non_persistent_buffer("pe", ENCODING_HINT)
        ),
        Property(
            "dropout on the sum",
            applies=lambda c: c.inputs["x"].shape[-1] == 6,
            **positions.dropout_on_sum(0.3, ENCODING_HINT),
        ),
        *(
            Property(
                p.name, p.judge, p.observe, lambda c, d=d: c.grad and c.inputs["x"].shape[-1] == d
            )
            for n, d in ((40, 16), (7, 6), (512, 8))
            for p in [_too_long(n, d, name)]
        ),
    )


sinusoidal_encoding = check(
    ModuleSpec(
        exercise="Exercise 4.2",
        title="sinusoidal positional encoding module",
        name="SinusoidalPositionalEncoding",
        init=("d_model", "max_len", "dropout"),
        init_defaults={"max_len": 512, "dropout": 0.0},
        forward=("x",),
        builds=_encoding_builds,
        parameters=lambda build: {},
        reference=_encoding,
        gradients=("x",),
        hint=ENCODING_HINT,
        properties=_encoding_properties(),
    )
)


# --- Exercise 4.3 ----------------------------------------------------------------------------

LEARNED = ModuleSpec(
    exercise="Exercise 4.3",
    title="learned positional embedding",
    name="LearnedPositionalEmbedding",
    init=("max_len", "d_model"),
    forward=("x",),
    builds=lambda: [
        Build(
            "max_len 20, d_model 8",
            {"max_len": 20, "d_model": 8},
            lambda: _xs(8, [(1, 7), (3, 7), (2, 20), (1, 1)], 20, 10),
        ),
        Build(
            "max_len 5, d_model 3",
            {"max_len": 5, "d_model": 3},
            lambda: _xs(3, [(2, 5), (4, 2)], 5, 11),
        ),
    ],
    parameters=lambda build: {
        "embedding.weight": (build.inputs["max_len"], build.inputs["d_model"])
    },
    reference=lambda build, w, buffers, x: x + next(iter(w.values()))[: x.size(1)].to(x.dtype),
    gradients=("x",),
    hint="One trainable vector per position; forward adds the vectors of positions 0..L-1, L "
    "being the length axis (after the batch), and raises a ValueError beyond max_len.",
    properties=tuple(
        Property(p.name, p.judge, p.observe, lambda c, d=d: c.grad and c.inputs["x"].shape[-1] == d)
        for n, d in ((20, 8), (5, 3))
        for p in [_too_long(n, d, "LearnedPositionalEmbedding")]
    ),
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
    f32, f64 = torch.float32, torch.float64
    table = [
        ("x (2, 3, 10, 16)", (2, 3, 10, 16), f32, None, None, None),
        ("a float64 (1, 7, 6) input", (1, 7, 6), f64, None, None, "Keep the input's dtype."),
        ("a (1, 1, 1, 4) input (one position)", (1, 1, 1, 4), f32, None, None, None),
        ("a 2-D (12, 32) input", (12, 32), f64, None, None, None),
        (
            "positions=5..11",
            (1, 7, 6),
            f64,
            torch.arange(7) + 5,
            None,
            "Use the `positions` argument when it is given instead of 0..L-1.",
        ),
        (
            "positions=[3, 0, 17, 2, 2, 40, 1] as float64 (floating point positions are allowed)",
            (1, 7, 6),
            f64,
            torch.tensor([3.0, 0.0, 17.0, 2.0, 2.0, 40.0, 1.0], dtype=f64),
            None,
            None,
        ),
        (
            "positions=[0.5, 0, 2.25, 7, 1.5, 30.75, 3] in float64 (floating point positions are "
            "allowed: compute the angles from them)",
            (1, 7, 6),
            f64,
            torch.tensor([0.5, 0.0, 2.25, 7.0, 1.5, 30.75, 3.0], dtype=f64),
            None,
            "The angle is position * theta_i for any real position: do not round it or look it up.",
        ),
        (
            "(B, L) positions, one row per sequence, for x (3, 5, 8)",
            (3, 5, 8),
            f64,
            torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11], [4, 3, 2, 1, 0]]),
            None,
            "positions may have the shape of x without its last axis: each sequence its own.",
        ),
        (
            "positions (2, 1, 5) for x (2, 2, 5, 8)",
            (2, 2, 5, 8),
            f32,
            torch.tensor([[[0, 1, 2, 3, 4]], [[3, 4, 5, 6, 7]]]),
            None,
            "positions broadcasts to x's shape without its last axis.",
        ),
        (
            "base=100.0",
            (1, 7, 6),
            f64,
            None,
            100.0,
            "theta_i is computed from the `base` argument.",
        ),
    ]
    return [
        Case(
            what,
            {
                "x": torch.randn(shape, generator=generator(i), dtype=dtype),
                "positions": positions,
                "base": 10000.0 if base is None else base,
            },
            hint,
            grad=i in (0, 5),
        )
        for i, (what, shape, dtype, positions, base, hint) in enumerate(table)
    ]


ROPE_HINT = (
    "Each adjacent pair (x[..., 2i], x[..., 2i+1]) at position m is rotated by the angle "
    "m * theta_i, theta_i = base^(-2i/d), positions counted from 0."
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
        gradients=("x",),
        hint=ROPE_HINT,
        properties=(
            Property("a rotation", **positions.rotation(_rotated, ROPE_HINT)),
            Property(
                "the score depends only on m - n",
                applies=lambda c: c.what.startswith("x ("),
                **positions.relative_scores("apply_rope", hint=ROPE_HINT),
            ),
        ),
    )
)
