"""Checks for notebook 02, scaled dot-product attention.

The reference is PyTorch's own ``torch.nn.functional.scaled_dot_product_attention``. It returns
only the output, so the reference *weights* come from the same function with the identity
matrix as values: ``softmax(...) @ I = softmax(...)``. The masks of 2.2 and 2.3 are compared with
values written out as data and with ``nn.Transformer.generate_square_subsequent_mask``; 2.4 with
``nn.Linear`` layers carrying the student's own weights (read from its state dict).

Every call of the student's code goes through :func:`course.properties.call` (inputs untouched,
global state unchanged); the cases are tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course.check import CheckFailure, exercise_check, expect, expect_close, expect_shape
from course.checks.reference import load_linear
from course.observe import StudentError
from course.properties import (
    call,
    construct,
    generator,
    gradients,
    large_scores,
    meta_device,
    observe,
    observe_gradients,
)

ATTENTION_HINT = (
    "Follow the formula of the exercise text step by step: scores from the queries and keys, "
    "scaled by sqrt(d_k); the mask; a softmax over the keys; then the values."
)
NAMES = ("query", "key", "value", "mask")


def _reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, weights) from torch's attention; weights via identity values; a query whose keys
    are all masked gets zeros (recent torch does so itself, older versions give NaN)."""
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    lk = key.size(-2)
    eye = torch.eye(lk, dtype=value.dtype).expand(*key.shape[:-2], lk, lk)
    weights = F.scaled_dot_product_attention(query, key, eye, attn_mask=mask)
    return output.nan_to_num(0.0), weights.nan_to_num(0.0)


def _pair(result: Any, what: str) -> tuple[Any, Any]:
    """Unpack ``(output, weights)`` with a clear message when the return value is not a pair."""
    expect(
        isinstance(result, tuple | list) and len(result) == 2,
        f"{what} should return a pair (output, weights), got {type(result).__name__}.",
        "The exercise text says what to return: the output and the weights, in that order.",
    )
    return result[0], result[1]


def _named(what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """:func:`course.properties.call`, with an error of the student's code told with the case."""
    try:
        return call(what, function, *args, **kwargs)
    except StudentError as error:
        raise CheckFailure(f"on {what}, {error.message}") from None


class AttentionCase(NamedTuple):
    what: str
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: torch.Tensor | None = None
    hint: str | None = None
    large: bool = False  # scores in the hundreds or thousands: the numeric range


def _attention_cases() -> list[AttentionCase]:
    g = generator(2)

    def randn(*shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype) * scale

    pad = torch.ones(2, 1, 6, dtype=torch.bool)
    pad[0, 0, 4:] = False
    pad[1, 0, 1] = False
    causal = torch.ones(5, 5, dtype=torch.bool).tril().unsqueeze(0)
    additive = randn(2, 4, 5)
    additive[:, :, 0] = float("-inf")
    dead = torch.tensor([[[True, False, True], [False, False, False], [True, True, True]]])
    dead_additive = torch.zeros(1, 3, 3)
    dead_additive[0, 2] = float("-inf")
    head_pad = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    head_pad[1, ..., 5:] = False
    q3, k3, v3 = randn(1, 3, 4), randn(1, 3, 4), randn(1, 3, 4)
    masked_hint = "The exercise text says what a boolean mask means and what a float mask means."
    return [
        # Scores spread widely, so a missing or wrong scale shows.
        AttentionCase(
            "random (2, 5, 16) inputs, no mask",
            randn(2, 5, 16, scale=2.0),
            randn(2, 5, 16, scale=2.0),
            randn(2, 5, 16),
        ),
        AttentionCase(
            "cross-attention: query length 3, key length 6, d_k 8, d_v 5",
            randn(2, 3, 8),
            randn(2, 6, 8),
            randn(2, 6, 5),
            hint="The scores have one row per query and one column per key; d_k is the size "
            "shared by queries and keys, which need not be the size of the values.",
        ),
        AttentionCase(
            "a batch of one with a head axis: query (1, 2, 4, 6), key and value (1, 2, 7, 6)",
            randn(1, 2, 4, 6),
            randn(1, 2, 7, 6),
            randn(1, 2, 7, 3),
            hint="Only the last two axes take part in the product; leading axes must be left "
            "alone, however many there are.",
        ),
        AttentionCase(
            "no leading axes: query (4, 8), key and value (6, 8)",
            randn(4, 8),
            randn(6, 8),
            randn(6, 8),
            hint="Only the last two axes take part in the product; leading axes must be left "
            "alone, however many there are (none here).",
        ),
        AttentionCase(
            "a boolean padding mask of shape (2, 1, 6)",
            randn(2, 4, 8),
            randn(2, 6, 8),
            randn(2, 6, 8),
            pad,
            masked_hint,
        ),
        AttentionCase(
            "a boolean causal mask of shape (1, 5, 5) over a batch of 3",
            randn(3, 5, 4),
            randn(3, 5, 4),
            randn(3, 5, 4),
            causal,
            masked_hint,
        ),
        AttentionCase(
            "a (2, 1, 1, 7) boolean mask with a head axis, query (2, 3, 4, 8)",
            randn(2, 3, 4, 8),
            randn(2, 3, 7, 8),
            randn(2, 3, 7, 8),
            head_pad,
            masked_hint,
        ),
        AttentionCase(
            "an additive float mask (-inf and real values)",
            randn(2, 4, 8),
            randn(2, 5, 8),
            randn(2, 5, 8),
            additive,
            "A float mask is not a True/False mask: the exercise text says what to do with it.",
        ),
        AttentionCase(
            "float64 inputs with a causal mask",
            randn(2, 3, 7, dtype=torch.float64),
            randn(2, 3, 7, dtype=torch.float64),
            randn(2, 3, 7, dtype=torch.float64),
            causal[:, :3, :3],
            "Keep the input's dtype all the way through.",
        ),
        AttentionCase(
            "a boolean mask with one fully masked query row",
            q3,
            k3,
            v3,
            dead,
            "The exercise text says what a query whose keys are all masked gets; softmax of a "
            "row of -inf is 0/0.",
        ),
        AttentionCase(
            "an additive mask with a row of -inf",
            q3,
            k3,
            v3,
            dead_additive,
            "A row of -inf in a float mask blocks every key, as a row of False does.",
        ),
        AttentionCase(
            "scores in the hundreds (float32)",
            large_scores(2, 4, 8, scale=20.0, offset=21),
            large_scores(2, 5, 8, scale=20.0, offset=22),
            randn(2, 5, 8),
            None,
            "exp overflows for scores in the hundreds; softmax does not change when the same "
            "number is subtracted from a whole row.",
            True,
        ),
        AttentionCase(
            "scores in the thousands (float64) with a padding mask",
            large_scores(2, 4, 6, scale=50.0, offset=23).double(),
            large_scores(2, 6, 6, scale=50.0, offset=24).double(),
            randn(2, 6, 6, dtype=torch.float64),
            pad,
            "exp overflows for scores in the thousands, even in float64; softmax does not "
            "change when the same number is subtracted from a whole row.",
            True,
        ),
    ]


def _tolerance(case: AttentionCase) -> dict[str, float]:
    if case.query.dtype == torch.float64:
        return {"atol": 1e-10, "rtol": 1e-8}
    return {"atol": 1e-4, "rtol": 1e-3} if case.large else {"atol": 1e-5, "rtol": 1e-4}


def _expect_blocked_keys_zero(weights: torch.Tensor, mask: torch.Tensor, what: str) -> None:
    """Blocked (query, key) pairs of a boolean mask must get exactly zero weight."""
    try:
        blocked = ~mask.expand(weights.shape)
    except RuntimeError:
        return  # the shape comparison explains this better
    leaked = blocked & (weights != 0)
    if leaked.any():
        index = tuple(int(i) for i in leaked.nonzero()[0])
        raise CheckFailure(
            f"with {what}, the blocked (query, key) pair at index {index} got weight "
            f"{weights[index].item():.3g}; a key the mask blocks must get exactly 0 (the "
            "property violated: the mask).",
            "The exercise text says how a blocked score is set so that its weight is exactly 0.",
        )


def _expect_on_meta(what: str, device: str | None, hint: str) -> None:
    """The device property, observed with :func:`course.properties.meta_device`."""
    expect(
        device in (None, "meta"),
        f"{what}: given tensors on another device (here `meta`), your code created a tensor on "
        f"the {device} and mixed it in (the property violated: device). On a GPU this fails.",
        hint,
    )


def _expect_attention_gradients(student_attention: Callable[..., Any], case: AttentionCase) -> None:
    """Gradients of the output with respect to query, key and value, against torch's."""
    what = f"gradients through the output for {case.what}"
    inputs = [case.query, case.key, case.value]

    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        return _pair(student_attention(q, k, v, case.mask), what)[0]

    got = observe_gradients(what, forward, inputs)
    ref = gradients(lambda q, k, v: _reference(q, k, v, case.mask)[0], inputs)
    for name, mine, theirs in zip(NAMES, got["inputs"], ref["inputs"], strict=False):
        expect(
            isinstance(mine, torch.Tensor),
            f"{what}: no gradient reaches `{name}` (the property violated: gradients); "
            "training could not learn the projections that produce it.",
            "Compute with differentiable torch operations on the inputs; no .detach(), "
            ".item() or torch.no_grad() on the way to the output.",
        )
        expect_close(
            mine,
            theirs,
            f"the gradient with respect to `{name}` ({what})",
            "Compute with differentiable torch operations on the inputs; no .detach() or "
            "copies through Python numbers on the way to the output.",
        )


@exercise_check("Exercise 2.1", "scaled dot-product attention", hint=ATTENTION_HINT)
def scaled_dot_product_attention(student_attention: Callable[..., Any]) -> None:
    """Compare with ``F.scaled_dot_product_attention`` on a table of shapes and masks, with
    scores in the thousands; then gradients and the device property."""
    cases = _attention_cases()
    for case in cases:
        args = (case.query, case.key, case.value, case.mask)
        result = _named(case.what, student_attention, *args, names=NAMES)
        out, weights = _pair(result, case.what)
        ref_out, ref_weights = _reference(*args)
        hint = case.hint or ATTENTION_HINT
        if case.large:
            for name, got in (("weights", weights), ("output", out)):
                expect(
                    not isinstance(got, torch.Tensor)
                    or not got.is_floating_point()
                    or bool(torch.isfinite(got).all()),
                    f"the {name} for {case.what} contain inf or NaN (the property violated: "
                    "numeric range).",
                    hint,
                )
        expect_shape(
            weights,
            ref_weights.shape,
            f"the weight matrix for {case.what}",
            "The weights have one row per query and one column per key: (..., Lq, Lk).",
        )
        if case.mask is not None and case.mask.dtype == torch.bool:
            _expect_blocked_keys_zero(weights, case.mask, case.what)
        expect_close(
            weights, ref_weights, f"the weight matrix for {case.what}", hint, **_tolerance(case)
        )
        expect_close(out, ref_out, f"the output for {case.what}", hint, **_tolerance(case))

    for index in (0, 4):  # gradients, without and with a mask
        _expect_attention_gradients(student_attention, cases[index])

    case = cases[6]
    what = "attention of tensors on another device (meta) with a mask"
    device = meta_device(what, student_attention, case.query, case.key, case.value, case.mask)
    _expect_on_meta(
        what,
        device,
        "Any tensor your code creates must be on the device of the inputs "
        "(torch.zeros_like, or device=query.device).",
    )


class PaddingCase(NamedTuple):
    ids: list[list[int]]
    pad_id: int
    expected: list[list[int]]  # 1 = a real token, written out as data


PADDING_CASES = [
    PaddingCase([[5, 7, 9, 0, 0], [3, 0, 0, 0, 0], [4, 4, 4, 4, 4]], 0, [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]),
    PaddingCase([[3, 1, 3, 0, 2, 3, 3], [0, 0, 1, 2, 3, 3, 3]], 3, [[0, 1, 0, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0]]),
    PaddingCase([[1, 2, 1]], 1, [[0, 1, 0]]),  # batch of one; padding in the middle too
    PaddingCase([[7, 8], [9, 9]], 2, [[1, 1], [1, 1]]),  # no padding at all
    PaddingCase([[0], [6]], 0, [[0], [1]]),  # length 1, a sequence that is all padding
]  # fmt: skip

PADDING_HINT = (
    "The exercise text gives the meaning (True where a token is real, i.e. not `pad_id`) and the "
    "shape (batch, 1, length): the axis of size 1 stands for the queries."
)


@exercise_check("Exercise 2.2", "padding mask", hint=PADDING_HINT)
def make_padding_mask(student_make_padding_mask: Callable[..., Any]) -> None:
    """Compare with masks written out as data, for several pad ids and shapes; the device."""
    for case in PADDING_CASES:
        ids = torch.tensor(case.ids)
        what = f"make_padding_mask(ids of shape {tuple(ids.shape)}, pad_id={case.pad_id})"
        mask = call(what, student_make_padding_mask, ids, case.pad_id, names=("token_ids",))
        expected = torch.tensor(case.expected, dtype=torch.bool).unsqueeze(1)
        expect_shape(mask, expected.shape, what, PADDING_HINT)
        expect(
            mask.dtype == torch.bool,
            f"{what} has dtype {mask.dtype}, expected torch.bool (a True/False mask).",
            PADDING_HINT,
        )
        expect(
            torch.equal(mask, expected),
            f"{what} is wrong: got {mask.int().tolist()}, expected {expected.int().tolist()} "
            "(1 = a real token that may be attended to, 0 = padding).",
            "True wherever the id is not the `pad_id` you are given, wherever it stands.",
        )
    what = "make_padding_mask(ids on another device (meta), pad_id=0)"
    device = meta_device(what, student_make_padding_mask, torch.tensor(PADDING_CASES[0].ids), 0)
    _expect_on_meta(
        what, device, "Build the mask from the ids themselves, so it lives where they live."
    )


CAUSAL_HINT = (
    "Query i may see keys 0..i, itself included (the exercise text), and the mask must be "
    "created directly on the requested `device`."
)


def _mask_summary(mask: Any) -> dict[str, Any]:
    """What can be said of a mask on the meta device: its device, shape and dtype."""
    if not isinstance(mask, torch.Tensor):
        return {"device": None, "type": type(mask).__name__}
    return {"device": mask.device.type, "shape": tuple(mask.shape), "dtype": str(mask.dtype)}


@exercise_check("Exercise 2.3", "causal mask", hint=CAUSAL_HINT)
def make_causal_mask(student_make_causal_mask: Callable[..., Any]) -> None:
    """Compare with torch's own causal mask for several lengths; the device argument on meta."""
    for length, kwargs in ((1, {}), (4, {}), (7, {}), (5, {"device": "cpu"})):
        shown = ", device='cpu'" if kwargs else ""
        what = f"make_causal_mask({length}{shown})"
        mask = call(what, student_make_causal_mask, length, **kwargs)
        expect_shape(mask, (1, length, length), what, CAUSAL_HINT)
        expect(
            mask.dtype == torch.bool,
            f"{what} has dtype {mask.dtype}, expected torch.bool (a True/False mask).",
            CAUSAL_HINT,
        )
        expected = (nn.Transformer.generate_square_subsequent_mask(length) == 0).unsqueeze(0)
        if not torch.equal(mask, expected):
            leaks = (mask & ~expected).nonzero().tolist()
            blocked = (~mask & expected).nonzero().tolist()
            detail = []
            if leaks:
                detail.append(f"future positions visible (query, key) e.g. {leaks[0][1:]}")
            if blocked:
                detail.append(f"allowed positions blocked e.g. {blocked[0][1:]}")
            raise CheckFailure(
                f"{what} is wrong: " + "; ".join(detail) + ". Query i must see keys 0..i, "
                "itself included.",
                "Lower triangular, diagonal included (the exercise text).",
            )
    for device in ("meta", torch.device("meta")):
        what = f"make_causal_mask(3, device={device!r})"
        got = observe(what, lambda d=device: _mask_summary(student_make_causal_mask(3, device=d)))
        expect(
            got.get("device") == "meta",
            f"{what} returned a mask on {got.get('device')}: the device argument is ignored "
            "(the property violated: device). On a GPU the mask would stay on the CPU, and "
            "masking a GPU tensor with it fails.",
            "Create the mask directly on `device`: torch's tensor constructors take a device.",
        )
        expect(
            got.get("shape") == (1, 3, 3) and got.get("dtype") == "torch.bool",
            f"{what} returned shape {got.get('shape')} and dtype {got.get('dtype')}, expected "
            "(1, 3, 3) and torch.bool.",
            CAUSAL_HINT,
        )


# --- 2.4 SelfAttention ------------------------------------------------------------------------

OWNER = "SelfAttention"
LAYERS = ("w_q", "w_k", "w_v", "w_o")


def _twin(state: dict[str, Any], d_model: int, d_k: int, dtype: torch.dtype) -> nn.ModuleDict:
    """Four nn.Linear layers carrying the student's weights."""
    twin = nn.ModuleDict(
        {name: nn.Linear(d_model, d_k, dtype=dtype) for name in LAYERS[:3]}
        | {"w_o": nn.Linear(d_k, d_model, dtype=dtype)}
    )
    for name in LAYERS:
        load_linear(twin[name], state, name, OWNER)
    return twin


def _twin_forward(twin: nn.ModuleDict, x: torch.Tensor, mask: torch.Tensor | None) -> Any:
    q, k, v = (twin[name](x) for name in LAYERS[:3])
    out, weights = _reference(q, k, v, mask)
    return twin["w_o"](out), weights


def _expect_mask_reaches(weights: Any, mask: torch.Tensor, what: str) -> None:
    """Name the first blocked (query, key) pair that received weight: the mask was lost."""
    if not isinstance(weights, torch.Tensor) or weights.dim() != 3:
        return  # the shape comparison that follows explains this better
    if weights.shape[-1] != mask.shape[-1]:
        return
    leaked = ~mask.expand(weights.shape) & (weights != 0)
    if leaked.any():
        largest = (weights.abs() * leaked).flatten().argmax()
        b, i, j = (int(n) for n in torch.unravel_index(largest, weights.shape))
        kind = "padded" if mask.size(1) == 1 else "future"
        raise CheckFailure(
            f"with {what}, the {kind} key position {j} of sequence {b} received weight "
            f"{weights[b, i, j].item():.2g} from query {i}; blocked keys must get exactly 0. "
            "The mask does not reach the attention (the property violated: the mask).",
            "forward takes a mask: pass it on to the attention function.",
        )


class ModuleCase(NamedTuple):
    what: str
    x: torch.Tensor
    mask: torch.Tensor | None = None


def _module_cases() -> list[ModuleCase]:
    g = generator(25)
    pad = torch.ones(2, 1, 7, dtype=torch.bool)
    pad[1, 0, 4:] = False
    causal = torch.ones(7, 7, dtype=torch.bool).tril().unsqueeze(0)
    return [
        ModuleCase("x of shape (2, 7, 12), no mask", torch.randn(2, 7, 12, generator=g)),
        ModuleCase("a batch of one, x of shape (1, 3, 12)", torch.randn(1, 3, 12, generator=g)),
        ModuleCase("a padding mask (2, 1, 7)", torch.randn(2, 7, 12, generator=g), pad),
        ModuleCase("a causal mask (1, 7, 7)", torch.randn(2, 7, 12, generator=g), causal),
        ModuleCase("float64, x of shape (2, 4, 12)", torch.randn(2, 4, 12, generator=g).double()),
    ]


SELF_ATTENTION_HINT = (
    "The exercise text gives the formula: queries, keys and values are three projections of x, "
    "scaled by sqrt(d_k) of the projections; the output goes through w_o."
)


@exercise_check("Exercise 2.4", "single-head SelfAttention", hint=SELF_ATTENTION_HINT, seed=24)
def self_attention(StudentSelfAttention: type[nn.Module]) -> None:  # noqa: N803 - a class
    """Rebuild the module's computation from its own weights (its state dict) with torch's
    attention: outputs, weights, gradients, d_k given and default, float64, the device."""
    module, state = construct("SelfAttention(12, 5)", StudentSelfAttention, 12, 5)
    twin = _twin(state, 12, 5, torch.float32)
    _, default_state = construct("SelfAttention(8)", StudentSelfAttention, 8)
    _twin(default_state, 8, 8, torch.float32)  # d_k defaults to d_model

    for case in _module_cases():
        what = f"SelfAttention(12, 5) on {case.what}"
        dtype = case.x.dtype
        tolerance = {"atol": 1e-10, "rtol": 1e-8} if dtype == torch.float64 else {}
        if dtype == torch.float64:
            result = _named(what, lambda x: module.double()(x), case.x, names=("x",))
            reference = _twin(state, 12, 5, torch.float64)
        else:
            args = (case.x,) if case.mask is None else (case.x, case.mask)
            result = _named(what, module, *args, names=("x", "mask"))
            reference = twin
        out, weights = _pair(result, what)
        if case.mask is not None:
            _expect_mask_reaches(weights, case.mask, case.what)
        with torch.no_grad():
            ref_out, ref_weights = _twin_forward(reference, case.x, case.mask)
        expect_close(
            weights,
            ref_weights,
            f"the weight matrix on {case.what}",
            "Queries come from w_q, keys from w_k; scale by sqrt(d_k) of the projections, not "
            "of d_model.",
            **tolerance,
        )
        expect_close(
            out,
            ref_out,
            f"the output on {case.what}",
            "Values come from w_v, and the result goes through w_o.",
            **tolerance,
        )

    # Gradients of every weight and of x, against the twin (a fresh module, float32).
    module, state = construct("SelfAttention(12, 5), for gradients", StudentSelfAttention, 12, 5)
    twin = _twin(state, 12, 5, torch.float32)
    case = _module_cases()[2]
    what = f"gradients of SelfAttention(12, 5) on {case.what}"
    got = observe_gradients(
        what,
        lambda x: _pair(module(x, case.mask), what)[0],
        [case.x],
        lambda: dict(module.named_parameters()),
    )
    ref = gradients(
        lambda x: _twin_forward(twin, x, case.mask)[0],
        [case.x],
        {f"{n}.{p}": getattr(twin[n], p) for n in LAYERS for p in ("weight", "bias")},
    )
    for name, expected in [("x", ref["inputs"][0]), *ref["parameters"].items()]:
        mine = got["inputs"][0] if name == "x" else got["parameters"].get(name)
        expect(
            isinstance(mine, torch.Tensor),
            f"{what}: no gradient reaches `{name}` (the property violated: gradients).",
            "Compute with the layers and differentiable torch operations; no .detach() or "
            "torch.no_grad() on the way to the output.",
        )
        expect_close(
            mine,
            expected,
            f"the gradient of `{name}` ({what})",
            "Every layer must take part in the output as the formula says, with nothing "
            "detached on the way.",
        )

    what = "SelfAttention(12, 5) on tensors on another device (meta)"
    device = meta_device(what, lambda m, x: m(x), module, case.x)
    _expect_on_meta(
        what,
        device,
        "Any tensor forward creates must be on the device of x (device=x.device).",
    )
