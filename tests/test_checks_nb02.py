"""The checks of notebook 02 accept a correct solution and reject stubs and typical mistakes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course.checks import nb02 as check
from course.framework.check import FAILED, NOT_IMPLEMENTED, PASSED

# --- scaled dot-product attention: a reference and its typical mistakes ------------------


def attention(
    q,
    k,
    v,
    mask=None,
    *,
    scale=None,
    softmax_dim=-1,
    mask_mode="bool",
    dead_rows="zero",
    transpose="none",
):
    """A correct attention, with switches that reproduce each typical mistake."""
    d_k = q.size(-1)
    if transpose == "kq":  # key @ query^T: the scores come out transposed, (Lk, Lq)
        scores = k @ q.transpose(-2, -1)
    elif transpose == "axis12":  # transpose(1, 2) instead of (-2, -1): only right for 3-D
        scores = q @ k.transpose(1, 2)
    else:
        scores = q @ k.transpose(-2, -1)
    scores = scores / (math.sqrt(d_k) if scale is None else scale(q, k, v))
    fill = -1e9 if dead_rows == "large_negative" else float("-inf")
    if mask is None or mask_mode in ("ignore", "after_softmax"):
        pass
    elif mask_mode == "zero_means_blocked":  # right for bool masks, wrong for additive ones
        scores = scores.masked_fill(mask == 0, fill)
    elif mask.dtype == torch.bool:
        scores = scores.masked_fill(mask if mask_mode == "inverted" else ~mask, fill)
    else:
        scores = scores + mask
    if dead_rows == "zero":
        dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
        weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=softmax_dim)
        weights = weights.masked_fill(dead, 0.0)
    else:
        weights = torch.softmax(scores, dim=softmax_dim)
    if mask_mode == "after_softmax" and mask is not None:
        weights = weights * mask  # zeroed but not renormalised
    if transpose == "weights":
        weights = weights.transpose(-2, -1)
    return weights @ v, weights


def correct_attention(q, k, v, mask=None):
    return attention(q, k, v, mask)


def wrong_attention(**options):
    return lambda q, k, v, mask=None: attention(q, k, v, mask, **options)


def attention_stub(q, k, v, mask=None):
    raise NotImplementedError


def output_only(q, k, v, mask=None):
    return attention(q, k, v, mask)[0]


WRONG_ATTENTION = {
    "no_scaling": wrong_attention(scale=lambda q, k, v: 1.0),
    "scale_by_d_k": wrong_attention(scale=lambda q, k, v: q.size(-1)),
    "scale_by_sqrt_d_v": wrong_attention(scale=lambda q, k, v: math.sqrt(v.size(-1))),
    "scale_by_sqrt_len": wrong_attention(scale=lambda q, k, v: math.sqrt(k.size(-2))),
    "softmax_over_queries": wrong_attention(softmax_dim=-2),
    "mask_ignored": wrong_attention(mask_mode="ignore"),
    "mask_inverted": wrong_attention(mask_mode="inverted"),
    "mask_after_softmax": wrong_attention(mask_mode="after_softmax"),
    "float_mask_read_as_bool": wrong_attention(mask_mode="zero_means_blocked"),
    "nan_on_fully_masked_row": wrong_attention(dead_rows="softmax"),
    "minus_1e9_uniform_on_fully_masked_row": wrong_attention(dead_rows="large_negative"),
    "scores_transposed_k_qT": wrong_attention(transpose="kq"),
    "weights_transposed": wrong_attention(transpose="weights"),
    "transpose_1_2_not_last_axes": wrong_attention(transpose="axis12"),
    "returns_output_only": output_only,
}


def test_attention_correct_passes():
    result = check.scaled_dot_product_attention(correct_attention, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_attention_torch_builtin_wrapper_passes():
    """A solution built on torch's fused kernel (weights via the identity trick) also passes."""

    def fused(q, k, v, mask=None):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        lk = k.size(-2)
        eye = torch.eye(lk, dtype=v.dtype, device=v.device).expand(*k.shape[:-2], lk, lk)
        return out, torch.nn.functional.scaled_dot_product_attention(q, k, eye, attn_mask=mask)

    assert check.scaled_dot_product_attention(fused, raise_on_failure=False).passed


def test_attention_nan_to_num_after_softmax_passes():
    """Softmax first, then turn the NaN of fully masked rows into zeros: also right."""

    def nan_to_num_attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = (
                scores.masked_fill(~mask, float("-inf"))
                if mask.dtype == torch.bool
                else (scores + mask)
            )
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return weights @ v, weights

    result = check.scaled_dot_product_attention(nan_to_num_attention, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_attention_gradients_through_an_additive_fully_blocked_row_are_not_demanded():
    """2.1's text promises zero weights and output for a row whose keys are all masked, and
    gradients in general, never a gradient through a float mask's row of -inf: code whose query
    gradient is NaN there (softmax of -inf, then the NaN replaced) is right."""

    def where_attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            blocked = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else None
            scores = blocked if blocked is not None else scores + mask
        weights = torch.softmax(scores, dim=-1)
        weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
        return weights @ v, weights

    q = torch.randn(1, 3, 4, requires_grad=True)
    mask = torch.zeros(1, 3, 3)
    mask[0, 2] = float("-inf")
    where_attention(q, q, q, mask)[0].sum().backward()
    assert torch.isnan(q.grad).any()  # the edge is real: NaN reaches the query there
    result = check.scaled_dot_product_attention(where_attention, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_attention_stub_not_implemented():
    result = check.scaled_dot_product_attention(attention_stub, raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", list(WRONG_ATTENTION))
def test_attention_wrong_rejected(name):
    result = check.scaled_dot_product_attention(WRONG_ATTENTION[name], raise_on_failure=False)
    assert result.status == FAILED, f"{name} was not rejected"
    assert result.message


def test_course_nn_attention_passes():
    from course.nn import scaled_dot_product_attention

    assert check.scaled_dot_product_attention(
        scaled_dot_product_attention, raise_on_failure=False
    ).passed


# --- padding mask ------------------------------------------------------------------------


def padding_mask(ids, pad_id):
    return (ids != pad_id).unsqueeze(1)


def padding_stub(ids, pad_id):
    raise NotImplementedError


WRONG_PADDING = {
    "no_query_axis": lambda ids, pad_id: ids != pad_id,
    "axis_at_the_end": lambda ids, pad_id: (ids != pad_id).unsqueeze(-1),
    "inverted": lambda ids, pad_id: (ids == pad_id).unsqueeze(1),
    "pad_id_hardcoded_0": lambda ids, pad_id: (ids != 0).unsqueeze(1),
    "float_dtype": lambda ids, pad_id: (ids != pad_id).unsqueeze(1).float(),
    "square_mask": lambda ids, pad_id: (ids != pad_id).unsqueeze(1).expand(-1, ids.size(1), -1),
    "pads_only_at_the_end": lambda ids, pad_id: (
        (ids != pad_id).int().cumprod(dim=1).bool().unsqueeze(1)
    ),
}


def test_padding_correct_passes():
    assert check.make_padding_mask(padding_mask, raise_on_failure=False).passed


def test_padding_stub_not_implemented():
    result = check.make_padding_mask(padding_stub, raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", list(WRONG_PADDING))
def test_padding_wrong_rejected(name):
    result = check.make_padding_mask(WRONG_PADDING[name], raise_on_failure=False)
    assert result.status == FAILED, f"{name} was not rejected"


def test_course_nn_padding_passes():
    from course.nn import make_padding_mask

    assert check.make_padding_mask(make_padding_mask, raise_on_failure=False).passed


# --- causal mask -------------------------------------------------------------------------


def causal_mask(length, device=None):
    return torch.ones(length, length, dtype=torch.bool, device=device).tril().unsqueeze(0)


def causal_stub(length, device=None):
    raise NotImplementedError


WRONG_CAUSAL = {
    "upper_triangular_future_leaks": lambda n, device=None: (
        torch.ones(n, n, dtype=torch.bool, device=device).triu().unsqueeze(0)
    ),
    "diagonal_excluded": lambda n, device=None: (
        torch.ones(n, n, dtype=torch.bool, device=device).tril(-1).unsqueeze(0)
    ),
    "one_step_ahead_leaks": lambda n, device=None: (
        torch.ones(n, n, dtype=torch.bool, device=device).tril(1).unsqueeze(0)
    ),
    "no_batch_axis": lambda n, device=None: torch.ones(n, n, dtype=torch.bool).tril(),
    "float_dtype": lambda n, device=None: torch.ones(n, n, device=device).tril().unsqueeze(0),
    "additive_float": lambda n, device=None: torch.full((n, n), float("-inf")).triu(1)[None],
    "no_device_argument": lambda n: torch.ones(n, n, dtype=torch.bool).tril().unsqueeze(0),
    "device_argument_ignored": lambda n, device=None: (
        torch.ones(n, n, dtype=torch.bool).tril().unsqueeze(0)
    ),
}


def test_causal_correct_passes():
    assert check.make_causal_mask(causal_mask, raise_on_failure=False).passed


def test_causal_stub_not_implemented():
    assert check.make_causal_mask(causal_stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", list(WRONG_CAUSAL))
def test_causal_wrong_rejected(name):
    result = check.make_causal_mask(WRONG_CAUSAL[name], raise_on_failure=False)
    assert result.status == FAILED, f"{name} was not rejected"


def test_causal_ignored_device_is_named():
    result = check.make_causal_mask(WRONG_CAUSAL["device_argument_ignored"], raise_on_failure=False)
    assert "the device argument is ignored" in result.message
    assert "device" in result.message


def test_course_nn_causal_passes():
    from course.nn import make_causal_mask

    assert check.make_causal_mask(make_causal_mask, raise_on_failure=False).passed


# --- SelfAttention -----------------------------------------------------------------------


class GoodSelfAttention(nn.Module):
    """Reference: separate Q/K/V projections, attention, output projection."""

    # Switches for the typical mistakes (overridden in subclasses below).
    swap_qk = False
    value_from_query = False
    scale_by_d_model = False
    ignore_mask = False
    skip_output = False

    def __init__(self, d_model, d_k=None):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_k) for _ in range(3))
        self.w_o = nn.Linear(d_k, d_model)
        self.d_model = d_model

    def forward(self, x, mask=None):
        q, k = self.w_q(x), self.w_k(x)
        if self.swap_qk:
            q, k = k, q
        v = self.w_q(x) if self.value_from_query else self.w_v(x)
        if self.scale_by_d_model:
            q = q * math.sqrt(q.size(-1)) / math.sqrt(self.d_model)
        out, weights = attention(q, k, v, None if self.ignore_mask else mask)
        return (out if self.skip_output else self.w_o(out)), weights


class SwapQK(GoodSelfAttention):
    swap_qk = True


class ValueFromQuery(GoodSelfAttention):
    value_from_query = True


class ScaleByDModel(GoodSelfAttention):
    scale_by_d_model = True


class IgnoreMask(GoodSelfAttention):
    ignore_mask = True


class NoOutputProjection(GoodSelfAttention):
    skip_output = True


class NoBias(GoodSelfAttention):
    def __init__(self, d_model, d_k=None):
        super().__init__(d_model, d_k)
        d_k = d_model if d_k is None else d_k
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_k, bias=False) for _ in range(3))


class IgnoresDk(GoodSelfAttention):
    def __init__(self, d_model, d_k=None):
        super().__init__(d_model, None)


class FusedQKV(nn.Module):
    """One (d_model, 3 d_k) projection instead of w_q/w_k/w_v: not the requested interface."""

    def __init__(self, d_model, d_k=None):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        self.qkv = nn.Linear(d_model, 3 * d_k)
        self.w_o = nn.Linear(d_k, d_model)

    def forward(self, x, mask=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        out, weights = attention(q, k, v, mask)
        return self.w_o(out), weights


class WeightsTransposed(GoodSelfAttention):
    def forward(self, x, mask=None):
        out, weights = super().forward(x, mask)
        return out, weights.transpose(-2, -1)


class StubSelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None):
        super().__init__()
        raise NotImplementedError


class StubForward(GoodSelfAttention):
    def forward(self, x, mask=None):
        raise NotImplementedError


class OutputOfInput(GoodSelfAttention):
    """Projects the input instead of the attention output: fails inside F.linear."""

    def forward(self, x, mask=None):
        out, weights = attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        return self.w_o(x), weights  # the student's line that fails when d_k != d_model


WRONG_SELF_ATTENTION = [
    OutputOfInput,
    SwapQK,
    ValueFromQuery,
    ScaleByDModel,
    IgnoreMask,
    NoOutputProjection,
    NoBias,
    IgnoresDk,
    FusedQKV,
    WeightsTransposed,
]


def test_self_attention_correct_passes():
    result = check.self_attention(GoodSelfAttention, raise_on_failure=False)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("stub", [StubSelfAttention, StubForward], ids=lambda c: c.__name__)
def test_self_attention_stub_not_implemented(stub):
    assert check.self_attention(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("wrong", WRONG_SELF_ATTENTION, ids=lambda c: c.__name__)
def test_self_attention_wrong_rejected(wrong):
    result = check.self_attention(wrong, raise_on_failure=False)
    assert result.status == FAILED, f"{wrong.__name__} was not rejected"


def test_self_attention_lost_mask_names_the_padded_weight():
    result = check.self_attention(IgnoreMask, raise_on_failure=False)
    assert "the padded key position" in result.message
    assert "does not reach the attention" in result.message


def test_self_attention_error_in_torch_shows_the_students_line():
    result = check.self_attention(OutputOfInput, raise_on_failure=False)
    assert "return self.w_o(x), weights" in result.message, result.message


def test_course_nn_self_attention_passes():
    from course.nn import SelfAttention

    assert check.self_attention(SelfAttention, raise_on_failure=False).passed


# --- one wrong implementation per property -----------------------------------------------
# Each passed the checks before they tested the property; the message must name the property.


def _dead_rows_zeroed(scores, softmax):
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    return softmax(scores.masked_fill(dead, 0.0)).masked_fill(dead, 0.0)


def _masked_scores(q, k, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    return scores + mask


def attention_scales_query_in_place(q, k, v, mask=None):
    """Scales the caller's query in place: right numbers, but the caller's tensor changed."""
    q /= math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = (
            scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        )
    weights = _dead_rows_zeroed(scores, lambda s: torch.softmax(s, dim=-1))
    return weights @ v, weights


def attention_unshifted_softmax(q, k, v, mask=None):
    """Its own softmax, exp(s) / sum exp(s), without subtracting the row maximum."""

    def softmax(s):
        e = torch.exp(s)
        return e / e.sum(dim=-1, keepdim=True)

    weights = _dead_rows_zeroed(_masked_scores(q, k, mask), softmax)
    return weights @ v, weights


def attention_dead_rows_on_axis_2(q, k, v, mask=None):
    """Finds fully masked rows along dim=2: the last axis only for 3-D inputs."""
    scores = _masked_scores(q, k, mask)
    dead = torch.isneginf(scores).all(dim=2, keepdim=True)
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    return weights @ v, weights


def attention_detached_weights(q, k, v, mask=None):
    """Detaches the weights: same numbers, but no gradient reaches the query and key."""
    weights = _dead_rows_zeroed(_masked_scores(q, k, mask), lambda s: torch.softmax(s, -1))
    return weights.detach() @ v, weights


def attention_zeros_on_the_cpu(q, k, v, mask=None):
    """Zeroes fully masked rows with a tensor created without a device."""
    scores = _masked_scores(q, k, mask)
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1)
    weights = torch.where(dead, torch.zeros(weights.shape, dtype=weights.dtype), weights)
    return weights @ v, weights


def attention_fused_eye_on_the_cpu(q, k, v, mask=None):
    """torch's fused attention, the weights via an identity created without a device."""
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    eye = torch.eye(k.size(-2), dtype=v.dtype).expand(*k.shape[:-2], k.size(-2), k.size(-2))
    return out, torch.nn.functional.scaled_dot_product_attention(q, k, eye, attn_mask=mask)


def padding_ids_changed_in_place(ids, pad_id):
    """Turns the caller's ids into 0/1 flags in place."""
    return ids.ne_(pad_id).bool().unsqueeze(1)


def padding_ones_on_the_cpu(ids, pad_id):
    """Starts from a mask created without a device."""
    mask = torch.ones(ids.shape, dtype=torch.bool).masked_fill(ids == pad_id, False)
    return mask.unsqueeze(1)


class DetachedOutput(GoodSelfAttention):
    """Detaches the attention output before w_o: no gradient reaches w_q, w_k, w_v."""

    def forward(self, x, mask=None):
        out, weights = attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        return self.w_o(out.detach()), weights


class DefaultMaskOnTheCpu(GoodSelfAttention):
    """Builds an all-True mask when none is given, without a device."""

    def forward(self, x, mask=None):
        if mask is None:
            mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool)
        return super().forward(x, mask)


PROPERTY_CASES = [
    ("scaled_dot_product_attention", attention_scales_query_in_place, "inputs untouched"),
    ("scaled_dot_product_attention", attention_unshifted_softmax, "numeric range"),
    ("scaled_dot_product_attention", attention_dead_rows_on_axis_2, "no leading axes"),
    ("scaled_dot_product_attention", attention_detached_weights, "no gradient reaches `query`"),
    ("scaled_dot_product_attention", attention_zeros_on_the_cpu, "property violated: device"),
    ("scaled_dot_product_attention", attention_fused_eye_on_the_cpu, "property violated: device"),
    ("make_padding_mask", padding_ids_changed_in_place, "inputs untouched"),
    ("make_padding_mask", padding_ones_on_the_cpu, "property violated: device"),
    ("self_attention", DetachedOutput, "property violated: gradients"),
    ("self_attention", DefaultMaskOnTheCpu, "property violated: device"),
]


@pytest.mark.parametrize(
    "name, wrong, words", PROPERTY_CASES, ids=[case[1].__name__ for case in PROPERTY_CASES]
)
def test_property_violation_is_named(name, wrong, words):
    result = getattr(check, name)(wrong, raise_on_failure=False)
    assert result.status == FAILED, f"{wrong.__name__} was not rejected"
    assert words in result.message, result.message


# --- right variants --------------------------------------------------------------------------


def attention_einsum(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.size(-1) ** 0.5
    if mask is not None:
        scores = (
            scores.masked_fill(mask.logical_not(), float("-inf"))
            if mask.dtype == torch.bool
            else scores + mask
        )
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def attention_float64_inside(q, k, v, mask=None):
    """Computes in float64 and returns the input's dtype; its own shifted softmax."""
    scores = _masked_scores(
        q.double(),
        k.double(),
        mask if mask is None else mask.double() if not mask.dtype == torch.bool else mask,
    )
    shifted = scores - scores.amax(dim=-1, keepdim=True).nan_to_num(0.0, neginf=0.0)
    e = shifted.exp()
    total = e.sum(dim=-1, keepdim=True)
    weights = torch.where(total > 0, e / total.clamp_min(1e-300), torch.zeros_like(e))
    return (weights @ v.double()).to(v.dtype), weights.to(q.dtype)


def attention_loop(q, k, v, mask=None):
    """One query at a time, in a Python loop over the query axis."""
    rows, outs = [], []
    full = _masked_scores(q, k, mask)
    for i in range(q.size(-2)):
        s = full[..., i, :]
        w = torch.softmax(s, dim=-1)
        w = torch.where(torch.isneginf(s).all(-1, keepdim=True), torch.zeros_like(w), w)
        rows.append(w)
        outs.append((w.unsqueeze(-2) @ v).squeeze(-2))
    return torch.stack(outs, dim=-2), torch.stack(rows, dim=-2)


def attention_item_check(q, k, v, mask=None):
    """Right, with Python control flow on values (meta tensors cannot run it: undecided)."""
    scores = _masked_scores(q, k, mask)
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    if dead.any():
        weights = torch.softmax(scores.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    else:
        weights = torch.softmax(scores, -1)
    return weights @ v, weights


@pytest.mark.parametrize(
    "right",
    [attention_einsum, attention_float64_inside, attention_loop, attention_item_check],
    ids=lambda f: f.__name__,
)
def test_attention_right_variants_pass(right):
    result = check.scaled_dot_product_attention(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


def padding_loop(ids, pad_id):
    mask = torch.zeros(ids.size(0), 1, ids.size(1), dtype=torch.bool, device=ids.device)
    for b in range(ids.size(0)):
        mask[b, 0] = ids[b] != pad_id
    return mask


def causal_triu(length, device=None):
    return ~torch.ones(1, length, length, dtype=torch.bool, device=device).triu(1)


def causal_arange(length, device=None):
    i = torch.arange(length, device=device)
    return (i[None, :] <= i[:, None])[None]


@pytest.mark.parametrize("right", [padding_loop], ids=lambda f: f.__name__)
def test_padding_right_variants_pass(right):
    result = check.make_padding_mask(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("right", [causal_triu, causal_arange], ids=lambda f: f.__name__)
def test_causal_right_variants_pass(right):
    result = check.make_causal_mask(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


class SelfAttentionTorchSDPA(nn.Module):
    """Right, glued at the interface: torch's fused attention, weights via identity values."""

    def __init__(self, d_model, d_k=None):
        super().__init__()
        d_k = d_k or d_model
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_k) for _ in range(3))
        self.w_o = nn.Linear(d_k, d_model)

    def forward(self, x, mask=None):
        return self.w_o(attention_einsum(self.w_q(x), self.w_k(x), self.w_v(x), mask)[0]), (
            attention_einsum(self.w_q(x), self.w_k(x), self.w_v(x), mask)[1]
        )


def test_self_attention_right_variant_passes():
    result = check.self_attention(SelfAttentionTorchSDPA, raise_on_failure=False)
    assert result.status == PASSED, result.message


# --- hints point at the principle, never the finished line ----------------------------------

ANSWER_LINES = [
    "masked_fill(~mask",
    "query @ key.transpose",
    "!= pad_id",
    ".unsqueeze(1)",
    ".tril()",
    "device=device",
    "self.w_o(output)",
]


@pytest.mark.parametrize(
    "name, wrong",
    [
        ("scaled_dot_product_attention", wrong_attention(mask_mode="ignore")),
        ("scaled_dot_product_attention", wrong_attention(softmax_dim=-2)),
        ("make_padding_mask", WRONG_PADDING["no_query_axis"]),
        ("make_padding_mask", WRONG_PADDING["pad_id_hardcoded_0"]),
        ("make_causal_mask", WRONG_CAUSAL["upper_triangular_future_leaks"]),
        ("make_causal_mask", WRONG_CAUSAL["device_argument_ignored"]),
        ("self_attention", IgnoreMask),
        ("self_attention", NoOutputProjection),
    ],
)
def test_hints_hold_no_answer(name, wrong):
    result = getattr(check, name)(wrong, raise_on_failure=False)
    assert result.status == FAILED
    for line in ANSWER_LINES:
        assert line not in (result.hint or ""), (line, result.hint)
    assert getattr(check, name).hint and not any(
        line in getattr(check, name).hint for line in ANSWER_LINES
    )


# --- the property helper these checks added to course.framework.properties -------------------------------


def test_observe_gradients_of_a_detached_output_are_none():
    from course.framework.properties import observe_gradients

    got = observe_gradients("f(x)", lambda x: (x * 2).detach(), [torch.ones(3)])
    assert got["inputs"] == [None]
    got = observe_gradients("g(x)", lambda x: x * 2, [torch.ones(3)])
    assert got["inputs"][0].abs().sum() > 0


# --- wrong answers by family of mistake, and right public code -----------------------------
# Each wrong one breaks a sentence of its exercise's text; OLD_CHECK_PASSED names those the
# checks before the conversion (course/checks/nb02.py at 7c6c524) let through.


def padding_as_numpy(ids, pad_id):
    return (ids != pad_id).unsqueeze(1).numpy()


def attention_cpu_zeros_for_dead_rows(q, k, v, mask=None):
    """Zeroes fully masked rows with a CPU tensor, only when there are any."""
    scores = _masked_scores(q, k, mask)
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1)
    if dead.any():
        weights = torch.where(dead, torch.zeros(weights.shape, dtype=weights.dtype), weights)
    return weights @ v, weights


def attention_mask_to_cpu(q, k, v, mask=None):
    """Moves the mask to the CPU "to be safe"."""
    return correct_attention(q, k, v, None if mask is None else mask.cpu())


def padding_through_numpy(ids, pad_id):
    return torch.from_numpy(ids.cpu().numpy() != pad_id).unsqueeze(1)


def causal_keyword_only_device(length, *, device=None):
    return torch.ones(length, length, dtype=torch.bool, device=device).tril().unsqueeze(0)


def attention_mask_required(q, k, v, mask):
    return correct_attention(q, k, v, mask)


def padding_renamed_argument(token_ids, pad_token_id):
    return (token_ids != pad_token_id).unsqueeze(1)


class RenamedDk(GoodSelfAttention):
    def __init__(self, d_model, dk=None):
        super().__init__(d_model, dk)


class LearnedTemperature(GoodSelfAttention):
    """A trainable temperature the text does not name (starts at 1: same output)."""

    def __init__(self, d_model, d_k=None):
        super().__init__(d_model, d_k)
        self.temperature = nn.Parameter(torch.ones(()))

    def forward(self, x, mask=None):
        return super().forward(x * self.temperature, mask)


def attention_in_place_dead_rows(q, k, v, mask=None):
    """Zeroes fully masked rows in place in the softmax output: backward breaks, only on
    batches that have such a row."""
    scores = _masked_scores(q, k, mask)
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1)
    if dead.any():
        weights.masked_fill_(dead, 0.0)
    return weights @ v, weights


class AttentionDropout(GoodSelfAttention):
    """Dropout on the attention weights, which the text does not describe."""

    def __init__(self, d_model, d_k=None):
        super().__init__(d_model, d_k)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, mask=None):
        out, weights = attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        weights = self.dropout(weights)
        return self.w_o(weights @ self.w_v(x)), weights


FAMILY_WRONG = [  # (family, check, wrong, words the message must hold)
    (1, "make_padding_mask", padding_as_numpy, "the stated return type"),
    (2, "scaled_dot_product_attention", attention_cpu_zeros_for_dead_rows, "violated: device"),
    (2, "scaled_dot_product_attention", attention_mask_to_cpu, "violated: device"),
    (2, "make_padding_mask", padding_through_numpy, "violated: device"),
    (3, "make_causal_mask", causal_keyword_only_device, "positional argument"),
    (3, "scaled_dot_product_attention", attention_mask_required, "mask"),
    (3, "make_padding_mask", padding_renamed_argument, "pad_id"),
    (3, "self_attention", RenamedDk, "d_k"),
    (4, "self_attention", LearnedTemperature, "parameters the text names"),
    (4, "scaled_dot_product_attention", attention_in_place_dead_rows, "inplace"),
    (4, "self_attention", AttentionDropout, "training mode"),
]
OLD_CHECK_PASSED = {attention_cpu_zeros_for_dead_rows, attention_mask_to_cpu, padding_through_numpy,
                    causal_keyword_only_device, attention_mask_required, padding_renamed_argument,
                    RenamedDk, LearnedTemperature, attention_in_place_dead_rows}  # fmt: skip


@pytest.mark.parametrize(
    "family, name, wrong, words", FAMILY_WRONG, ids=[w[2].__name__ for w in FAMILY_WRONG]
)
def test_family_wrong_rejected(family, name, wrong, words):
    result = getattr(check, name)(wrong, raise_on_failure=False)
    assert result.status == FAILED, f"{wrong} was accepted"
    assert words in result.message, result.message


def attention_nanogpt(q, k, v, mask=None):
    """nanoGPT's CausalSelfAttention core, glued: any boolean or float mask, dead rows zero."""
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    if mask is not None:
        att = att.masked_fill(mask == 0, float("-inf")) if mask.dtype == torch.bool else att + mask
    att = torch.nn.functional.softmax(att, dim=-1).nan_to_num(0.0)
    return att @ v, att


def attention_hf_bert(q, k, v, mask=None):
    """Hugging Face BERT's eager attention, glued: a boolean mask becomes the extended additive
    mask (1 - mask) * finfo.min; rows with every key blocked are zeroed."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    if mask is not None and mask.dtype == torch.bool:
        dead = ~mask.any(dim=-1, keepdim=True)
        mask = (1.0 - mask.to(q.dtype)) * torch.finfo(q.dtype).min
    else:
        dead = None if mask is None else torch.isneginf(mask).all(dim=-1, keepdim=True)
    if mask is not None:
        scores = scores + mask
    probs = torch.nn.functional.softmax(scores, dim=-1).nan_to_num(0.0)
    if dead is not None:
        probs = probs.masked_fill(dead, 0.0)
    return torch.matmul(probs, v), probs


def causal_annotated(length, device=None):
    """The Annotated Transformer's subsequent_mask, moved to the device asked for."""
    attn_shape = (1, length, length)
    subsequent_mask = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)
    return (subsequent_mask == 0).to(device)


def causal_nanogpt(length, device=None):
    return torch.tril(torch.ones(length, length, device=device)).view(1, length, length).bool()


def padding_hf(ids, pad_id):
    return ids.ne(pad_id).long()[:, None, :].bool()


class SelfAttentionD2l(nn.Module):
    """d2l's DotProductAttention with bmm, in a module with the text's layer names; the mask
    applied as 2.1 takes it, which the text says forward passes it on to (a boolean
    mask by ``~mask``, a float mask added to the scores)."""

    def __init__(self, d_model, d_k=None):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_k) for _ in range(3))
        self.w_o = nn.Linear(d_k, d_model)

    def forward(self, x, mask=None):
        queries, keys, values = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(queries.shape[-1])
        if mask is not None and mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask is not None:
            scores = scores + mask
        weights = torch.nn.functional.softmax(scores, dim=-1)
        return self.w_o(torch.bmm(weights, values)), weights


FAMILY_RIGHT = [
    ("scaled_dot_product_attention", attention_nanogpt),
    ("scaled_dot_product_attention", attention_hf_bert),
    ("make_causal_mask", causal_annotated),
    ("make_causal_mask", causal_nanogpt),
    ("make_padding_mask", padding_hf),
    ("self_attention", SelfAttentionD2l),
]


@pytest.mark.parametrize("name, right", FAMILY_RIGHT, ids=[r[1].__name__ for r in FAMILY_RIGHT])
def test_family_right_passes(name, right):
    result = getattr(check, name)(right, raise_on_failure=False)
    assert result.status == PASSED, result.message
