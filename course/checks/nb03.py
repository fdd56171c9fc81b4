"""Checks for notebook 03, multi-head attention: each exercise's contract, declared.

The references are written from the exercise text, not from the course's solution: 3.2 is
:func:`course.checks.reference.multi_head` with the check's own weights loaded into w_q, w_k,
w_v, w_o; 3.3 counts the parameters of ``torch.nn.MultiheadAttention``.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from course.checks import reference as ref
from course.framework import properties as prop
from course.framework.check import exercise_check
from course.framework.domains import Tensors, causal_case
from course.framework.properties import attention, generator
from course.framework.properties.statistics import SHARED, independent, is_dropout_of
from course.framework.spec import (
    DEFAULTS,
    GLOBAL,
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
    run_function,
)

# --- 3.1 split and merge ----------------------------------------------------------------------

SPLIT_HINT = (
    "The exercise text says which features head h holds, and that the head axis comes before "
    "the length axis; merge_heads must undo split_heads exactly, whatever the memory layout."
)
SIZES = [((2, 5, 12), 3), ((1, 7, 8), 2), ((3, 1, 6), 3), ((2, 4, 10), 1), ((2, 3, 6), 6)]


def _head_cases(merge: bool) -> list[Case]:
    """split_heads' cases, or merge_heads' on the heads' shape (contiguous (B, H, L, d) as
    attention returns it: transpose-then-view fails); the last one in float64."""
    g, rows = generator(int(merge)), []  # what, x, [num_heads]
    for i, ((b, n, d), h) in enumerate([*SIZES, ((2, 3, 8), 4)]):
        wide = i == len(SIZES)
        shape = (b, h, n, d // h) if merge else (b, n, d)
        x = torch.randn(shape, generator=g, dtype=torch.float64 if wide else torch.float32)
        what = f"{'a float64 ' if wide else ''}x {shape}{'' if merge else f', {h} heads'}"
        rows.append((what, x) if merge else (what, x, h))
    return cases(("x",) if merge else ("x", "num_heads"), rows, first_grad=True)


SPLIT = Spec(
    exercise="Exercise 3.1",
    title="split heads",
    name="split_heads",
    params=("x", "num_heads"),
    reference=lambda x, num_heads: x.unflatten(-1, (num_heads, -1)).transpose(1, 2),
    cases=lambda: _head_cases(merge=False),
    gradients=("x",),
    hint=SPLIT_HINT,
    properties=(
        Property(
            "a ValueError for indivisible sizes",
            applies=lambda c: c.grad,
            **prop.refusal(
                ValueError,
                lambda split: split(torch.zeros(2, 5, 10), 3),
                "split_heads(x of shape (2, 5, 10), 3)",
                "10 features cannot be split into 3 equal heads, so features would be "
                "silently dropped.",
                "Check the divisibility first, as the text asks.",
                says_so=True,  # "raise a `ValueError` that says so"
            ),
        ),
    ),
)
MERGE = replace(  # the same exercise, hint and gradients; no refusal: every shape merges
    SPLIT,
    title="merge heads",
    name="merge_heads",
    params=("x",),
    reference=lambda x: x.transpose(1, 2).flatten(2),
    cases=lambda: _head_cases(merge=True),
    properties=(),
)


@exercise_check("Exercise 3.1", "split and merge heads", hint=SPLIT_HINT)
def split_merge_heads(student_split: Any, student_merge: Any) -> None:
    """The declared contracts of split_heads and of merge_heads, applied by course.framework.spec."""
    run_function(SPLIT, student_split)
    run_function(MERGE, student_merge)


split_merge_heads.spec = (SPLIT, MERGE)  # type: ignore[attr-defined]


# --- 3.2 MultiHeadAttention -------------------------------------------------------------------

MHA_HINT = (
    "Follow the exercise text: project with w_q, w_k, w_v; split into num_heads heads of "
    "d_model / num_heads features; attend with one mask shared by every head (scaled by the "
    "size of one head); return the per-head weights (batch, heads, Lq, Lk); merge; w_o."
)
DROPOUT_HINT = (
    "The exercise text says where dropout acts (on the attention weights, before they multiply "
    "the values, in training mode only) and which weights forward returns."
)


def _mha(
    b: Build,
    w: dict,
    buffers: Any,
    query: Any,
    key: Any,
    value: Any,
    mask: Any = None,
    *,
    wrong: str = "",
) -> Any:
    """3.2's reference (the text's formula in the inputs' dtype), or with ``wrong`` one of
    :data:`MHA_MISTAKES` (the scores scaled by sqrt(d_model): w_q scaled by 1/sqrt(heads))."""
    heads = b.inputs["num_heads"]
    heads = b.inputs["d_model"] // heads if wrong == "swapped" else heads
    w = {n: t * heads**-0.5 if n[:3] == "w_q" and wrong == "d_model" else t for n, t in w.items()}
    if mask is not None and wrong in ("mask", "inverted"):
        mask = None if wrong == "mask" else ~mask
    value = key if wrong == "key" else value
    out, weights = ref.multi_head(w, "", query, key, value, mask, heads, exact=False)
    return out, weights.mean(1) if wrong == "averaged" else weights


MHA_MISTAKES = tuple(  # (name, the text's words it breaks, _mha's wrong)
    Mistake(name, breaks, functools.partial(_mha, wrong=kind)) for name, breaks, kind in (
        ("scores scaled by sqrt(d_model), not by the size of one head",
         "heads of d_model / num_heads features", "d_model"),
        ("heads of num_heads features (the number of heads and their size swapped)",
         "num_heads heads of d_model / num_heads features each", "swapped"),
        ("the weights averaged over the heads", "the per-head weights `(batch, heads, Lq, Lk)`",
         "averaged"),
        ("the mask ignored", "a blocked key gets weight exactly 0 in every head", "mask"),
        ("the mask inverted (True taken as blocked)", "boolean, True = \"may attend\"", "inverted"),
        ("the key used as the value", "keys and values on the other", "key"),
    )
)  # fmt: skip


def _in_train(module: Any, case: Case, call: Any) -> dict[str, Any]:
    """Eval and train outputs of a float64 copy of the module (so the solve that recovers the
    weights is exact), with the projections the solve undoes."""
    inputs = prop.widened(dict(case.inputs))

    def run() -> dict[str, Any]:
        twin = copy.deepcopy(module).double().eval()
        return {
            "eval": twin(**inputs),
            "train": in_train(twin, (), inputs)["result"],
            "value": inputs["value"],
            "state": {k: p.detach() for k, p in twin.named_parameters() if k[:3] in ("w_o", "w_v")},
        }

    return prop.observe(f"the module in train() mode on {case.what}", run, random=True)


def _dropout_judge(case: Case, got: Any, expected: Any, seen: dict[str, Any]) -> None:
    """Multi-head attention's dropout (0.3, 2 heads), in training mode: it acts on the attention
    weights before they multiply V (recovered from the output: undo ``w_o``, split the heads,
    solve against each head's values), and the weights returned are those before."""
    # a judge, not mistakes: a dropout result is random, so no value comparison says where it acted
    if got[1].shape != expected[1].shape or got[0].shape != expected[0].shape:
        return  # the shape speaks for itself
    (out_e, w_e), (out_t, w_t) = seen["eval"], seen["train"]
    what = f"in train() mode with dropout=0.3, on {case.what}"
    if not torch.allclose(w_t, w_e, atol=1e-10):
        state = (
            "are the ones after dropout (zeros and 1/(1-p)-scaled values)"
            if is_dropout_of(w_t, w_e, 0.3)
            else "differ from those in eval mode"
        )
        raise prop.CheckFailure(
            f"{what}, the returned attention weights {state}; return the weights before "
            "dropout, the pattern the model computed",
            DROPOUT_HINT,
        )
    prop.expect(
        not torch.allclose(out_t, out_e, atol=1e-10),
        f"{what}, the output equals the eval-mode output: dropout is never applied",
        DROPOUT_HINT,
    )
    w = seen["state"]
    w_o, w_v = w["w_o.weight"], w["w_v.weight"]
    b_o, b_v = (w.get(f"{n}.bias", torch.zeros(len(w_o), dtype=w_o.dtype)) for n in ("w_o", "w_v"))
    # undo w_o: (B, H, Lq, d_k)
    heads_t, heads_e = (
        torch.linalg.solve(w_o.T, out - b_o, left=False).unflatten(-1, (2, -1)).transpose(1, 2)
        for out in (out_t, out_e)
    )
    v = (seen["value"] @ w_v.T + b_v).unflatten(-1, (2, -1)).transpose(1, 2)
    used = heads_t @ torch.linalg.pinv(v)  # the weights that multiplied V
    if torch.allclose(used @ v, heads_t, atol=1e-8) and is_dropout_of(used, w_e, 0.3):
        mistake = None if independent(used.abs() < 1e-9, 2) else SHARED
    elif is_dropout_of(out_t, out_e, 0.3):
        mistake = "dropout acts on the module's output (after w_o)"
    elif is_dropout_of(heads_t, heads_e, 0.3):
        mistake = "dropout acts on the heads' outputs (weights @ V, before w_o)"
    else:
        mistake = (
            "the output is not the values weighted by the attention weights after one dropout(p)"
        )
    prop.expect(
        mistake is None,
        f"{what}, {mistake}; dropout belongs on the attention weights: each weight zeroed with "
        "probability p (the others scaled by 1/(1-p)) before they multiply V",
        DROPOUT_HINT,
    )


def _mha_cases(made: dict, pick: tuple[int, ...]) -> list[Case]:
    d = made["d_model"]
    g = generator(100 + d)
    x, q, k, v, x4, x1 = (
        torch.randn(*s, d, generator=g) for s in ((2, 5), (2, 3), (2, 7), (2, 7), (4, 6), (1, 1))
    )
    pad4, causal, dead = ref.key_mask([6, 2, 5, 3], 6), ref.causal(6), ref.key_mask([6, 0, 5, 3], 6)
    table = cases(("query", "key", "value", "mask"), (  # what, query, key, value, mask, [grad]
        ("self-attention, x (2, 5, d_model), no mask", x, x, x, None, True),
        ("cross-attention, 3 queries over 7 keys with other values", q, k, v, None),
        ("cross-attention with a (2, 1, 7) padding mask", q, k, v, ref.key_mask([7, 4], 7), True),
        ("self-attention, 4 sequences of different lengths, (4, 1, 6) mask", x4, x4, x4, pad4),
        ("self-attention with a (1, 6, 6) causal mask", x4, x4, x4, causal),
        ("self-attention with a causal and padding mask (4, 6, 6)", x4, x4, x4, causal & pad4),
        ("cross-attention with a (2, 1, 1, 7) mask that already has a head axis", q, k, v,
         ref.key_mask([3, 6], 7).unsqueeze(1)),
        ("a batch of one, a single token", x1, x1, x1, None),
        ("cross-attention, 3 queries over 4 keys (where dropout acts, in train mode)", q,
         k[:, :4], v[:, :4], None),
        ("self-attention where sequence 1 is all padding (fully masked rows: compared only on "
         "the other device, in train and eval mode)", x4, x4, x4, dead, False, False),
    ), fields=("grad", "compare"))  # fmt: skip
    return [table[i] for i in pick]


MHA_BUILDS = [  # what, the constructor's arguments, the cases of _mha_cases it runs
    ("24 features, 4 heads", dict(d_model=24, num_heads=4, dropout=0.0, bias=True), (*range(8), 9)),
    ("the defaults", dict(d_model=24, num_heads=4), (0, 2)),
    ("no biases", dict(d_model=18, num_heads=3, dropout=0.0, bias=False), (1, 2, 5)),
    ("one head", dict(d_model=12, num_heads=1, dropout=0.0, bias=True), (1, 4)),
    ("one feature per head", dict(d_model=8, num_heads=8, dropout=0.0, bias=True), (2,)),
    ("dropout 0.3", dict(d_model=16, num_heads=2, dropout=0.3, bias=True), (0, 2, 8, 9)),
]


def _keeps_num_heads(case: Case, got: Any, expected: Any, seen: Any) -> None:
    """The stub keeps ``num_heads`` on the module; notebook 09's cached attention reads
    ``attention.num_heads`` (the heads are the reference weights' second axis)."""
    heads = int(expected[1].shape[1])
    prop.expect(
        type(seen) is int and seen == heads,
        f"MultiHeadAttention on {case.what}: `self.num_heads` is {seen!r}, expected {heads}",
        "Keep the constructor's num_heads in `self.num_heads`, as the stub says.",
    )


def _mask_given(case: Case) -> bool:
    mask = case.inputs.get("mask")  # and no fully masked row, whose weights the text leaves open
    return mask is not None and bool(mask.any(-1).all())


multi_head_attention = check(
    ModuleSpec(
        exercise="Exercise 3.2",
        title="multi-head attention",
        name="MultiHeadAttention",
        init=("d_model", "num_heads", "dropout", "bias"),
        init_defaults={"dropout": 0.0, "bias": True},
        forward=("query", "key", "value", "mask"),
        defaults={"mask": None},
        forms=(POSITIONAL, KEYWORD, DEFAULTS),
        builds=lambda: [  # with dropout, train() differs from eval()
            Build(what, made, functools.partial(_mha_cases, made, pick), not made.get("dropout"))
            for what, made, pick in MHA_BUILDS
        ],
        domains={"query": Tensors(layouts=(), scales=(1e4, -1e4), base=causal_case)},  # as 2.1
        parameters=lambda b: ref.projections(
            "", b.inputs["d_model"], b.inputs["d_model"], b.inputs.get("bias", True)
        ),
        reference=_mha,
        mistakes=MHA_MISTAKES,
        gradients=("query", "key", "value"),
        output=lambda r: r[0],
        hint=MHA_HINT,
        properties=(
            Property(
                "the attributes the stub keeps (`self.num_heads`, which notebook 09 reads)",
                _keeps_num_heads,
                lambda m, case, call: prop.observe(
                    f"{case.what}: self.num_heads", lambda: getattr(m, "num_heads", None)
                ),
            ),
            Property(
                "blocked keys get exactly 0",
                applies=_mask_given,
                **attention.blocked_get_zero("MultiHeadAttention", heads=True),
            ),
            Property(
                "training mode: dropout on the attention weights before they multiply V, the "
                "weights returned before it",
                _dropout_judge,
                _in_train,
                applies=lambda c: "dropout acts" in c.what,
            ),
            Property(
                "a ValueError for indivisible sizes",
                applies=lambda c: c.what.startswith("self-attention, x"),
                **prop.refusal(
                    ValueError,
                    lambda m: type(m)(10, 3),  # "`__init__` raises a `ValueError`"
                    "MultiHeadAttention(d_model=10, num_heads=3), built without any forward call,",
                    "10 features cannot be split into 3 equal heads, and the text says __init__ "
                    "raises, before any forward.",
                    "Check the divisibility in __init__, as the text asks.",
                ),
            ),
        ),
    )
)


# --- 3.3 parameter count ----------------------------------------------------------------------


def _torch_count(d_model: int, num_heads: int, bias: bool = True) -> int:
    module = nn.MultiheadAttention(d_model, num_heads, bias=bias, device="meta")
    return sum(p.numel() for p in module.parameters())


COUNTS = [
    (512, 8, True),
    (384, 12, True),
    (64, 4, False),
    (8, 1, True),
    (512, 1, True),
    (768, 12, False),
    (6, 6, True),
]

parameter_count = check(
    Spec(
        exercise="Exercise 3.3",
        title="parameter count",
        name="mha_parameter_count",
        params=("d_model", "num_heads", "bias"),
        defaults={"bias": True},
        forms=(POSITIONAL, KEYWORD, DEFAULTS),
        reference=_torch_count,
        random=GLOBAL,
        cases=lambda: cases(
            ("d_model", "num_heads", "bias"),
            [(f"d_model={d}, {h} heads", d, h, b) for d, h, b in COUNTS],
            device=False,
        ),
        hint="Add up the weight matrices and bias vectors of the projections of 3.2, and ask which "
        "of their sizes depend on the number of heads.",
    )
)
