"""Checks for notebook 02, scaled dot-product attention.

The reference is PyTorch's own ``torch.nn.functional.scaled_dot_product_attention``. It returns
only the output, so the reference *weights* come from the same function with the identity
matrix as values: ``softmax(...) @ I = softmax(...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course.check import (
    CheckFailure,
    exercise_check,
    expect,
    expect_close,
    expect_shape,
    expect_tensor,
)

AttentionFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]

ATTENTION_HINT = (
    "scores = query @ key.transpose(-2, -1) / math.sqrt(d_k) with d_k = query.size(-1); "
    "a boolean mask blocks where it is False (masked_fill with -inf), a float mask is added; "
    "softmax over the last axis (the keys); output = weights @ value."
)


def _reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, weights) from torch's fused attention; weights via identity values."""
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    lk = key.size(-2)
    eye = torch.eye(lk, dtype=value.dtype).expand(*key.shape[:-2], lk, lk)
    weights = F.scaled_dot_product_attention(query, key, eye, attn_mask=mask)
    return output, weights


def _pair(result: object, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack ``(output, weights)`` with a clear message when the return value is wrong."""
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise CheckFailure(
            f"{what} should return a pair (output, weights), got {type(result).__name__}.",
            "End with `return weights @ value, weights`.",
        )
    return result[0], result[1]


def _compare(
    student: AttentionFn,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    what: str,
    hint: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    tight = query.dtype == torch.float64
    atol, rtol = (1e-10, 1e-8) if tight else (1e-5, 1e-4)
    out, weights = _pair(student(query, key, value, mask), what)
    ref_out, ref_weights = _reference(query, key, value, mask)
    expect_shape(
        weights,
        ref_weights.shape,
        f"the weight matrix for {what}",
        "weights have shape (..., query_len, key_len).",
    )
    expect_close(
        weights,
        ref_weights,
        f"the weight matrix for {what}",
        hint or ATTENTION_HINT,
        atol=atol,
        rtol=rtol,
    )
    expect_close(
        out, ref_out, f"the output for {what}", hint or ATTENTION_HINT, atol=atol, rtol=rtol
    )
    return out, weights


@exercise_check("Exercise 2.1", "scaled dot-product attention", hint=ATTENTION_HINT)
def scaled_dot_product_attention(student: AttentionFn) -> None:
    """Compare with ``F.scaled_dot_product_attention`` on random and edge-case inputs."""
    g = torch.Generator().manual_seed(2)

    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    # Plain self-attention; scores are spread widely so a missing or wrong scale shows up.
    q, k, v = 2 * randn(2, 5, 16), 2 * randn(2, 5, 16), randn(2, 5, 16)
    _, weights = _compare(student, q, k, v, None, "random (2, 5, 16) inputs, no mask")
    expect(
        torch.allclose(weights.sum(-1), torch.ones(2, 5), atol=1e-5),
        "each query's weights should sum to 1 over the keys (the last axis).",
        "Apply the softmax with dim=-1.",
    )

    # Cross-attention: query length != key length and d_v != d_k.
    q, k, v = randn(2, 3, 8), randn(2, 6, 8), randn(2, 6, 5)
    _compare(
        student,
        q,
        k,
        v,
        None,
        "query length 3, key length 6, d_k 8, d_v 5",
        "The scores are (..., Lq, Lk): query @ key.transpose(-2, -1); scale by the "
        "query/key size d_k = query.size(-1), not by d_v.",
    )

    # Batch of one, with an extra head axis in front: (1, 2, 4, 6).
    q, k, v = randn(1, 2, 4, 6), randn(1, 2, 7, 6), randn(1, 2, 7, 3)
    _compare(
        student,
        q,
        k,
        v,
        None,
        "a batch of one with a head axis, (1, 2, 4, 6)",
        "Use only the last two axes (transpose(-2, -1)), so any leading axes work.",
    )

    # Boolean padding mask (B, 1, Lk): the last keys of the first sequence are padding.
    q, k, v = randn(2, 4, 8), randn(2, 6, 8), randn(2, 6, 8)
    pad = torch.ones(2, 1, 6, dtype=torch.bool)
    pad[0, 0, 4:] = False
    pad[1, 0, 1] = False
    _, weights = _compare(
        student,
        q,
        k,
        v,
        pad,
        "a boolean padding mask of shape (2, 1, 6)",
        "True means 'may attend': fill the scores where the mask is False "
        "with -inf before the softmax.",
    )
    expect(
        bool((weights.masked_select(~pad.expand(2, 4, 6)) == 0).all()),
        "masked keys (mask False) should get exactly zero weight.",
        "masked_fill(~mask, float('-inf')) on the scores, before the softmax.",
    )

    # Boolean causal mask (1, L, L), broadcast over the batch.
    q, k, v = randn(3, 5, 4), randn(3, 5, 4), randn(3, 5, 4)
    causal = torch.ones(5, 5, dtype=torch.bool).tril().unsqueeze(0)
    _compare(student, q, k, v, causal, "a boolean causal mask of shape (1, 5, 5)")

    # Additive float mask: 0 keeps, -inf blocks, and other values bias the scores.
    q, k, v = randn(2, 4, 8), randn(2, 5, 8), randn(2, 5, 8)
    additive = randn(2, 4, 5)
    additive[:, :, 0] = float("-inf")
    _compare(
        student,
        q,
        k,
        v,
        additive,
        "an additive float mask (-inf and real values)",
        "A float mask is not a True/False mask: add it to the scaled scores.",
    )

    # float64 end to end, compared tightly.
    q, k, v = (randn(2, 3, 7, dtype=torch.float64) for _ in range(3))
    _compare(student, q, k, v, causal[:, :3, :3], "float64 inputs with a causal mask")

    # A query that may attend to nothing: zero weights, zero output, no NaN.
    q, k, v = randn(1, 3, 4), randn(1, 3, 4), randn(1, 3, 4)
    mask = torch.tensor([[[True, False, True], [False, False, False], [True, True, True]]])
    out, weights = _pair(student(q, k, v, mask), "a fully masked query row")
    expect(
        not (torch.isnan(out).any() or torch.isnan(weights).any()),
        "a query whose keys are all masked produced NaN (softmax of a row of -inf is 0/0).",
        "Find rows where every score is -inf, softmax finite scores there, then set "
        "those rows' weights to 0 (torch.isneginf(scores).all(-1, keepdim=True)).",
    )
    expect(
        bool((weights[0, 1] == 0).all()) and bool((out[0, 1] == 0).all()),
        "a query whose keys are all masked should get zero weights and a zero output "
        f"(got weights {weights[0, 1].tolist()}).",
        "Set the weights of fully masked rows to 0 after the softmax.",
    )
    _compare(student, q, k, v, mask, "a mask with one fully masked query row")
    additive = torch.zeros(1, 3, 3)
    additive[0, 2] = float("-inf")
    _compare(
        student,
        q,
        k,
        v,
        additive,
        "an additive mask with a row of -inf",
        "A row of -inf must give zero weights and output, as with a boolean mask.",
    )


@exercise_check(
    "Exercise 2.2",
    "padding mask",
    hint="(token_ids != pad_id).unsqueeze(1): True for real tokens, shape (batch, 1, length).",
)
def make_padding_mask(student: Callable[..., torch.Tensor]) -> None:
    """Compare with an element-by-element reference, for several pad ids and a batch of one."""
    g = torch.Generator().manual_seed(22)
    cases = [
        (torch.tensor([[5, 7, 9, 0, 0], [3, 0, 0, 0, 0], [4, 4, 4, 4, 4]]), 0),
        (torch.randint(0, 4, (4, 9), generator=g), 3),  # pad id that is not 0
        (torch.tensor([[1, 2, 1]]), 1),  # batch of one; pad in the middle is still padding
    ]
    for ids, pad_id in cases:
        what = f"make_padding_mask(ids of shape {tuple(ids.shape)}, pad_id={pad_id})"
        mask = student(ids, pad_id)
        expect_shape(
            mask,
            (ids.size(0), 1, ids.size(1)),
            what,
            "Add a query axis of size 1 in the middle: .unsqueeze(1).",
        )
        expect(
            mask.dtype == torch.bool,
            f"{what} has dtype {mask.dtype}, expected torch.bool.",
            "A comparison (!=) already gives a boolean tensor; do not convert it.",
        )
        expected = torch.tensor([[[int(t) != pad_id for t in row]] for row in ids.tolist()])
        expect(
            torch.equal(mask, expected),
            f"{what} is wrong: got {mask.int().tolist()}, expected {expected.int().tolist()} "
            "(True = a real token that may be attended to).",
            "True where the id is NOT the pad id; use the pad_id argument, not a fixed 0.",
        )


@exercise_check(
    "Exercise 2.3",
    "causal mask",
    hint="torch.ones(length, length, dtype=torch.bool, device=device).tril().unsqueeze(0)",
)
def make_causal_mask(student: Callable[..., torch.Tensor]) -> None:
    """Check position i sees exactly positions 0..i, via the definition and torch's is_causal."""
    for length in (1, 4, 7):
        what = f"make_causal_mask({length})"
        mask = student(length)
        expect_shape(
            mask, (1, length, length), what, "Add a leading batch axis of size 1: .unsqueeze(0)."
        )
        expect(mask.dtype == torch.bool, f"{what} has dtype {mask.dtype}, expected torch.bool.")
        i = torch.arange(length)
        expected = (i[:, None] >= i[None, :]).unsqueeze(0)  # key j visible from query i iff j <= i
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
                "Lower triangular, diagonal included: .tril() (not .triu(), not diagonal=-1).",
            )
    mask = student(3, device="cpu")
    expect(
        mask.device.type == "cpu",
        "make_causal_mask(3, device='cpu') is not on the CPU.",
        "Pass device=device to the tensor constructor.",
    )
    # The "meta" device exists on every machine (tensors with a shape but no data), so a
    # device argument that is ignored shows even where there is no GPU.
    mask = student(3, device=torch.device("meta"))
    expect(
        isinstance(mask, torch.Tensor) and mask.device.type == "meta",
        "make_causal_mask(3, device=torch.device('meta')) returned a mask on "
        f"{getattr(mask, 'device', None)}: the device argument is ignored (on a GPU the mask "
        "would stay on the CPU, and masking a GPU tensor with it fails).",
        "Pass device=device to the tensor constructor: torch.ones(..., device=device).",
    )
    mask = student(5, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(23)
    q, k, v = (torch.randn(2, 5, 4, generator=g) for _ in range(3))
    expect_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "torch attention with your mask vs. with is_causal=True",
    )


def _linear(module: object, name: str, d_in: int, d_out: int) -> nn.Linear:
    layer = getattr(module, name, None)
    expect(
        isinstance(layer, nn.Linear),
        f"SelfAttention should have an nn.Linear attribute `{name}`, got {type(layer).__name__}.",
        "Create self.w_q, self.w_k, self.w_v and self.w_o in __init__.",
    )
    expect(
        (layer.in_features, layer.out_features) == (d_in, d_out),
        f"`{name}` maps {layer.in_features} -> {layer.out_features}, expected {d_in} -> {d_out}.",
        "w_q, w_k, w_v map d_model -> d_k; w_o maps d_k back to d_model.",
    )
    expect(layer.bias is not None, f"`{name}` should have a bias (nn.Linear's default).")
    return layer


def _expect_blocked_keys_unweighted(weights: Any, mask: torch.Tensor, what: str) -> None:
    """Name the first blocked (query, key) pair that received weight: the mask was lost."""
    weights = expect_tensor(weights, f"the weight matrix on {what}")
    if weights.dim() != 3 or weights.shape[-1] != mask.shape[-1]:
        return  # the shape comparison that follows explains this better
    blocked = ~mask.expand(weights.shape)
    leaked = blocked & (weights.detach() != 0)
    if leaked.any():
        largest = (weights.detach().abs() * leaked).flatten().argmax()
        b, i, j = (int(n) for n in torch.unravel_index(largest, weights.shape))
        kind = "padded" if mask.size(1) == 1 else "future"
        raise CheckFailure(
            f"with {what}, the {kind} key position {j} of sequence {b} received weight "
            f"{weights[b, i, j].item():.2g} from query {i}; blocked keys must get exactly 0. "
            "The mask does not reach the attention.",
            "Pass the mask on: scaled_dot_product_attention(q, k, v, mask).",
        )


@exercise_check(
    "Exercise 2.4",
    "single-head SelfAttention",
    hint="q, k, v = self.w_q(x), self.w_k(x), self.w_v(x); attend with "
    "scaled_dot_product_attention(q, k, v, mask); return self.w_o(output), weights.",
    seed=24,
)
def self_attention(student_class: type[nn.Module]) -> None:
    """Rebuild the module's computation from its own weights with torch's attention."""
    module = student_class(12, 5)
    layers = {name: _linear(module, name, 12, 5) for name in ("w_q", "w_k", "w_v")}
    layers["w_o"] = _linear(module, "w_o", 5, 12)
    default = student_class(8)
    _linear(default, "w_q", 8, 8)
    _linear(default, "w_o", 8, 8)

    def reference(x: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = (layers[n](x) for n in ("w_q", "w_k", "w_v"))
        out, weights = _reference(q, k, v, mask)
        return layers["w_o"](out), weights

    g = torch.Generator().manual_seed(25)
    pad = torch.ones(2, 1, 7, dtype=torch.bool)
    pad[1, 0, 4:] = False
    causal = torch.ones(7, 7, dtype=torch.bool).tril().unsqueeze(0)
    cases = [
        (torch.randn(2, 7, 12, generator=g), None, "x of shape (2, 7, 12), no mask"),
        (torch.randn(1, 3, 12, generator=g), None, "a batch of one, x of shape (1, 3, 12)"),
        (torch.randn(2, 7, 12, generator=g), pad, "a padding mask (2, 1, 7)"),
        (torch.randn(2, 7, 12, generator=g), causal, "a causal mask (1, 7, 7)"),
    ]
    with torch.no_grad():
        for x, mask, what in cases:
            result = module(x) if mask is None else module(x, mask)
            out, weights = _pair(result, f"SelfAttention on {what}")
            if mask is not None:
                _expect_blocked_keys_unweighted(weights, mask, what)
            ref_out, ref_weights = reference(x, mask)
            expect_close(
                weights,
                ref_weights,
                f"the weight matrix on {what}",
                "Queries come from w_q, keys from w_k; scale by sqrt(d_k) of the "
                "projections, not of d_model; pass the mask on.",
            )
            expect_close(
                out,
                ref_out,
                f"the output on {what}",
                "Values come from w_v, and the result goes through w_o.",
            )
        module64 = module.double()
        x = torch.randn(2, 4, 12, generator=g, dtype=torch.float64)
        out, weights = _pair(module64(x), "SelfAttention in float64")
        ref_out, ref_weights = reference(x, None)
        expect_close(out, ref_out, "the output in float64", atol=1e-10, rtol=1e-8)
