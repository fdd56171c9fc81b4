"""Checks for notebook 02, attention: the declared contracts of 2.1 to 2.4.

The references are torch's own attention (:func:`course.checks.reference.attention`), its
comparisons and ``nn.Transformer.generate_square_subsequent_mask``; 2.4 loads the check's own
weights into the student's four layers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from course.checks import reference as ref
from course.framework import properties as prop
from course.framework.domains import Masks, Tensors, causal_case
from course.framework.properties import attention, generator, large_scores
from course.framework.spec import (
    DEFAULTS,
    KEYWORD,
    POSITIONAL,
    Build,
    Case,
    ModuleSpec,
    Property,
    Spec,
    cases,
    check,
)
from course.framework.virtual import VIRTUAL

# --- 2.1 scaled dot-product attention --------------------------------------------------------

BOOL_HINT = (
    "A boolean mask is True where a query may attend (True = may attend); a blocked key gets "
    "weight exactly 0."
)
AXES_HINT = (
    "Only the last two axes take part in the product; leading axes must be left alone, however "
    "many there are{}."
)
RANGE_HINT = (
    "exp overflows for scores in the {}; softmax does not change when the same number is "
    "subtracted from a whole row."
)


def _attention_cases() -> list[Case]:
    g = generator(2)

    def randn(*shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype) * scale

    def qkv(q: tuple, k: tuple, v: tuple, **kwargs: Any) -> dict[str, torch.Tensor]:
        return {
            "query": randn(*q, **kwargs),
            "key": randn(*k, **kwargs),
            "value": randn(*v, **kwargs),
        }

    pad = torch.ones(2, 1, 6, dtype=torch.bool)
    pad[0, 0, 4:] = pad[1, 0, 1] = False
    causal = ref.causal(5)
    additive = randn(2, 4, 5)
    additive[:, :, 0] = float("-inf")
    dead = torch.tensor([[[True, False, True], [False, False, False], [True, True, True]]])
    dead_additive = torch.zeros(1, 3, 3)
    dead_additive[0, 2] = float("-inf")
    head_pad = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    head_pad[1, ..., 5:] = False
    three = qkv((1, 3, 4), (1, 3, 4), (1, 3, 4))
    scores = {
        "query": large_scores(2, 4, 8, scale=20.0, offset=21),
        "key": large_scores(2, 5, 8, scale=20.0, offset=22),
        "value": randn(2, 5, 8),
    }
    thousands = {
        "query": large_scores(2, 4, 6, scale=50.0, offset=23).double(),
        "key": large_scores(2, 6, 6, scale=50.0, offset=24).double(),
        "value": randn(2, 6, 6, dtype=torch.float64),
        "mask": pad,
    }
    return [  # scores spread widely first, so a missing or wrong scale shows
        Case("random (2, 5, 16) inputs, no mask",
             {**qkv((2, 5, 16), (2, 5, 16), (2, 5, 16), scale=2.0), "mask": None}, grad=True),
        Case("cross-attention: query length 3, key length 6, d_k 8, d_v 5",
             qkv((2, 3, 8), (2, 6, 8), (2, 6, 5)),
             "The scores have one row per query and one column per key; d_k is the size shared "
             "by queries and keys, which need not be the size of the values."),
        Case("a head axis: query (1, 2, 4, 6), key and value (1, 2, 7, 6)",
             qkv((1, 2, 4, 6), (1, 2, 7, 6), (1, 2, 7, 3)), AXES_HINT.format("")),
        Case("no leading axes: query (4, 8), key and value (6, 8)",
             qkv((4, 8), (6, 8), (6, 8)), AXES_HINT.format(" (none here)")),
        Case("a boolean padding mask of shape (2, 1, 6)",
             {**qkv((2, 4, 8), (2, 6, 8), (2, 6, 8)), "mask": pad}, BOOL_HINT, grad=True),
        Case("a boolean causal mask of shape (1, 5, 5) over a batch of 3",
             {**qkv((3, 5, 4), (3, 5, 4), (3, 5, 4)), "mask": causal}, BOOL_HINT),
        Case("a (2, 1, 1, 7) boolean mask with a head axis, query (2, 3, 4, 8)",
             {**qkv((2, 3, 4, 8), (2, 3, 7, 8), (2, 3, 7, 8)), "mask": head_pad}, BOOL_HINT),
        Case("an additive float mask (-inf and real values)",
             {**qkv((2, 4, 8), (2, 5, 8), (2, 5, 8)), "mask": additive},
             "A float mask is not a True/False mask: it is added to the scores."),
        Case("float64 inputs with a causal mask",
             {**qkv((2, 3, 7), (2, 3, 7), (2, 3, 7), dtype=torch.float64), "mask": ref.causal(3)},
             "Keep the inputs' dtype all the way through.", strict=True),
        Case("a boolean mask with one fully masked query row", {**three, "mask": dead},
             "The exercise text says what a query whose keys are all masked gets; softmax of a "
             "row of -inf is 0/0.", grad=True),
        Case("an additive mask with a row of -inf", {**three, "mask": dead_additive},
             "A row of -inf in a float mask blocks every key, as a row of False does."),
        Case("scores in the hundreds (float32)", scores, RANGE_HINT.format("hundreds"),
             {"atol": 1e-4, "rtol": 1e-3}),  # float32 scores of ~500 carry errors of ~3e-5
        Case("scores in the thousands (float64) with a padding mask", thousands,
             RANGE_HINT.format("thousands, even in float64"), strict=True),
    ]  # fmt: skip


scaled_dot_product_attention = check(Spec(
    exercise="Exercise 2.1", title="scaled dot-product attention",
    name="scaled_dot_product_attention", params=("query", "key", "value", "mask"),
    defaults={"mask": None}, forms=(POSITIONAL,), reference=ref.attention, cases=_attention_cases,
    gradients=("query", "key", "value"),
    hint="Follow the formula of the exercise text step by step: scores from the queries and keys, "
    "scaled by sqrt(d_k); the mask; a softmax over the keys; then the values.",
    domains={"query": Tensors(scales=(1e5, -1e5), base=causal_case),  # "of any size"
             "key": Tensors(), "value": Tensors()},  # views too: the text never says contiguous
    by_name=False,  # public code names them q, k, v; the course calls it positionally
    properties=(
        Property("the mask", **attention.blocked_get_zero("scaled_dot_product_attention")),
    ),
))  # fmt: skip


# --- 2.2 and 2.3: the masks ------------------------------------------------------------------

PADDING_IDS = [  # (ids, pad_id): pad ids anywhere, a batch of one, no padding, all padding
    ([[5, 7, 9, 0, 0], [3, 0, 0, 0, 0], [4, 4, 4, 4, 4]], 0),
    ([[3, 1, 3, 0, 2, 3, 3], [0, 0, 1, 2, 3, 3, 3]], 3),
    ([[1, 2, 1]], 1), ([[7, 8], [9, 9]], 2), ([[0], [6]], 0),
]  # fmt: skip

make_padding_mask = check(Spec(
    exercise="Exercise 2.2", title="padding mask", name="make_padding_mask",
    params=("token_ids", "pad_id"), forms=(POSITIONAL, KEYWORD),
    reference=lambda token_ids, pad_id: torch.ne(token_ids, pad_id)[:, None, :],
    cases=lambda: cases(("token_ids", "pad_id"), [
        (f"ids {ids}, pad_id={pad}", torch.tensor(ids), pad) for ids, pad in PADDING_IDS]),
    hint="The exercise text gives the meaning (True where a token is real, i.e. not `pad_id`, "
    "wherever it stands) and the shape (batch, 1, length): the axis of size 1 stands for the "
    "queries.",
))  # fmt: skip

CAUSAL_HINT = (
    "Query i may see keys 0..i, itself included (the exercise text), and the mask must be "
    "created directly on the requested `device`: torch's tensor constructors take a device."
)


def _on_devices(student: Any, case: Case, call: Any) -> list[dict[str, Any]]:
    """Given a ``device`` argument naming the second device (:mod:`course.framework.virtual`),
    positionally and by name (as a string)."""
    n = case.inputs["length"]
    return [
        prop.on_device(f"make_causal_mask({n!r}, <another device>)", student, (n, VIRTUAL)),
        prop.on_device(f"make_causal_mask({n!r}, device='<another>')", student, (n,),
                       {"device": VIRTUAL.type}),
    ]  # fmt: skip


def _device_judge(case: Case, got: Any, expected: Any, seen: list) -> None:
    """Every result tensor lives on the device given, in either form."""
    for form, observed in zip(("positionally", "by name"), seen, strict=True):
        what = f"make_causal_mask on {case.what}, another device given {form}"
        error = observed.get("error")
        prop.expect(
            error is None,
            f"{what}: your code failed with {error}",
            CAUSAL_HINT,
        )
        prop.expect(
            all(d == "virtual" for d in observed.get("devices") or []),
            f"{what}: the mask came back on the CPU: the device argument is ignored; on a GPU, "
            "masking a GPU tensor with it fails",
            CAUSAL_HINT,
        )


make_causal_mask = check(Spec(
    exercise="Exercise 2.3", title="causal mask", name="make_causal_mask",
    params=("length", "device"), defaults={"device": None}, forms=(POSITIONAL, KEYWORD, DEFAULTS),
    reference=lambda length, device=None: (
        nn.Transformer.generate_square_subsequent_mask(length) == 0).unsqueeze(0),
    cases=lambda: cases(("length", "device"), [(f"length {n}", n, d) for n, d in (
        (1, None), (4, None), (7, None), (5, "cpu"))], device=False),
    hint=CAUSAL_HINT,
    properties=(Property("device", _device_judge, _on_devices),),
))  # fmt: skip


# --- 2.4 SelfAttention -----------------------------------------------------------------------

MASK_KINDS = (
    "forward passes the mask on to scaled_dot_product_attention, which takes every mask kind of "
    "2.1: a float mask is added to the scores (0 keeps a key, -inf blocks it)."
)

HUGE_SCORES = (
    "x scaled by 1000 gives scores far beyond 1e4, which 2.1 allows: a blocked key gets -inf "
    "there, as in scaled_dot_product_attention, not a large negative number such as -1e4."
)


def _self_attention(build: Build, w: dict, buffers: dict, x: torch.Tensor, mask: Any = None) -> Any:
    out, weights = ref.multi_head(w, "", x, x, x, mask, heads=1)
    return out, weights[:, 0]


def _module_cases(d_model: int, count: int) -> list[Case]:
    g = generator(25)

    def x(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, d_model, generator=g)

    pad = torch.ones(2, 1, 7, dtype=torch.bool)
    pad[1, 0, 4:] = False
    causal = ref.causal(7)
    return [  # no mask first: a wrong formula shows there before the mask is judged
        Case("x (2, 7, d_model), no mask", {"x": x(2, 7)}),
        Case("a padding mask (2, 1, 7)", {"x": x(2, 7), "mask": pad}, grad=True),
        Case("a batch of one, x (1, 3, d_model)", {"x": x(1, 3)}),
        Case("a causal mask (1, 7, 7)", {"x": x(2, 7), "mask": causal}),
    ][:count]  # fmt: skip


self_attention = check(ModuleSpec(
    exercise="Exercise 2.4", title="single-head SelfAttention", name="SelfAttention", seed=24,
    init=("d_model", "d_k"), init_defaults={"d_k": None}, init_forms=(POSITIONAL, KEYWORD, DEFAULTS),
    forward=("x", "mask"), defaults={"mask": None}, forms=(POSITIONAL,),
    builds=lambda: [
        Build("d_model 12, d_k 5", {"d_model": 12, "d_k": 5}, lambda: _module_cases(12, 4)),
        Build("d_model 8, d_k left out", {"d_model": 8, "d_k": None}, lambda: _module_cases(8, 2)),
    ],
    parameters=lambda b: ref.projections(
        "", b.inputs["d_model"], b.inputs["d_k"] or b.inputs["d_model"]),
    reference=_self_attention, gradients=("x",), output=lambda r: r[0],
    domains={"mask": Masks(hint=MASK_KINDS),  # "passes the mask to your sdp attention": 2.1's
             "x": Tensors(layouts=(), scales=(1e3,), base=causal_case, hint=HUGE_SCORES)},
    hint="The exercise text gives the formula: queries, keys and values are three projections of "
    "x, scaled by sqrt(d_k) of the projections; the output goes through w_o.",
    properties=(
        Property("the mask", **attention.blocked_get_zero(
            "SelfAttention", "The mask does not reach the attention, or it blocks with a finite "
            "number where 2.1 puts -inf.")),
        Property(".double()", **prop.follows_double(
            "SelfAttention", ("x", "mask"), "Keep the parameters' dtype: no hard-coded float32."),
            applies=lambda case: "mask" in case.inputs),
    ),
))  # fmt: skip
