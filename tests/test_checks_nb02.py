"""The checks of notebook 02 accept a correct solution and reject stubs and typical mistakes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course.check import FAILED, NOT_IMPLEMENTED, PASSED
from course.checks import nb02 as check

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
        eye = torch.eye(k.size(-2), dtype=v.dtype).expand(*k.shape[:-2], k.size(-2), k.size(-2))
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
    assert "the padded key position 4 of sequence 1 received weight" in result.message
    assert "does not reach the attention" in result.message


def test_self_attention_error_in_torch_shows_the_students_line():
    result = check.self_attention(OutputOfInput, raise_on_failure=False)
    assert "return self.w_o(x), weights" in result.message, result.message


def test_course_nn_self_attention_passes():
    from course.nn import SelfAttention

    assert check.self_attention(SelfAttention, raise_on_failure=False).passed
