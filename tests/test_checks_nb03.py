"""The checks of notebook 03 accept a correct solution and reject the stub and typical mistakes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course.checks import nb03 as check
from course.framework.check import FAILED, NOT_IMPLEMENTED, PASSED

# --- 3.1 split / merge -----------------------------------------------------------------------


def split_correct(x, num_heads):
    batch, length, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return x.reshape(batch, length, num_heads, d_model // num_heads).transpose(1, 2)


def merge_correct(x):
    batch, heads, length, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * d_head)


def split_stub(x, num_heads):
    raise NotImplementedError


def merge_stub(x):
    raise NotImplementedError


def split_wrong_axis(x, num_heads):
    """Reshapes straight to (B, H, L, d): each 'head' gets a mix of tokens."""
    batch, length, d_model = x.shape
    return x.reshape(batch, num_heads, length, d_model // num_heads)


def split_strided(x, num_heads):
    """Head h gets every H-th feature: self-consistent with merge_strided, but not the convention."""
    batch, length, d_model = x.shape
    return x.reshape(batch, length, d_model // num_heads, num_heads).permute(0, 3, 1, 2)


def merge_strided(x):
    batch, heads, length, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, length, heads * d_head)


def merge_no_transpose(x):
    """Flattens (B, H, L, d) directly: tokens and heads interleaved."""
    batch, heads, length, d_head = x.shape
    return x.reshape(batch, length, heads * d_head)


def merge_view(x):
    """.view after transpose fails on non-contiguous tensors."""
    batch, heads, length, d_head = x.shape
    return x.transpose(1, 2).view(batch, length, heads * d_head)


def split_heads_last(x, num_heads):
    """Returns (B, L, H, d): the head axis is not moved before the length."""
    batch, length, d_model = x.shape
    return x.reshape(batch, length, num_heads, d_model // num_heads)


def merge_heads_last(x):
    batch, length, heads, d_head = x.shape
    return x.reshape(batch, length, heads * d_head)


def split_truncates(x, num_heads):
    """Drops the features that do not fill a whole head instead of refusing."""
    batch, length, d_model = x.shape
    d_k = d_model // num_heads
    return split_correct(x[..., : num_heads * d_k], num_heads)


def split_unchecked(x, num_heads):
    """No divisibility check: reshape fails with a RuntimeError about sizes."""
    batch, length, d_model = x.shape
    return x.reshape(batch, length, num_heads, d_model // num_heads).transpose(1, 2)


SPLIT_MERGE_WRONG = {
    "split_silently_truncates": (split_truncates, merge_correct),
    "split_raises_runtime_error_not_value_error": (split_unchecked, merge_correct),
    "split_wrong_axis": (split_wrong_axis, merge_correct),
    "split_and_merge_strided": (split_strided, merge_strided),
    "merge_wrong_order": (split_correct, merge_no_transpose),
    "merge_view_on_non_contiguous": (split_correct, merge_view),
    "merge_strided_order": (split_correct, merge_strided),
    "head_axis_not_moved": (split_heads_last, merge_heads_last),
}


def test_split_merge_correct_passes():
    result = check.split_merge_heads(split_correct, merge_correct, raise_on_failure=False)
    assert result.status == PASSED


@pytest.mark.parametrize(
    "pair",
    [(split_stub, merge_stub), (split_correct, merge_stub), (split_stub, merge_correct)],
    ids=["both", "merge", "split"],
)
def test_split_merge_stub_not_implemented(pair):
    result = check.split_merge_heads(*pair, raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", SPLIT_MERGE_WRONG)
def test_split_merge_wrong_rejected(name):
    result = check.split_merge_heads(*SPLIT_MERGE_WRONG[name], raise_on_failure=False)
    assert result.status == FAILED, name


def test_split_truncation_is_named():
    result = check.split_merge_heads(split_truncates, merge_correct, raise_on_failure=False)
    assert "was accepted and returned shape (2, 3, 5, 3)" in result.message, result.message
    assert "ValueError" in result.message


# --- 3.2 multi-head attention ----------------------------------------------------------------


def attention(q, k, v, mask=None, scale=None, softmax_dim=-1):
    """Reference-style attention used by the test modules (mask: bool, True = attend)."""
    scale = math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) / scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=softmax_dim)
    return weights @ v, weights


class MHACorrect(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads, self.d_model = num_heads, d_model
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def split(self, x):
        return split_correct(x, self.num_heads)

    def merge(self, x):
        return merge_correct(x)

    def prepare_mask(self, mask):
        return mask.unsqueeze(1) if mask is not None and mask.dim() == 3 else mask

    def attend(self, q, k, v, mask):
        return attention(q, k, v, mask)

    def forward(self, query, key, value, mask=None):
        q = self.split(self.w_q(query))
        k = self.split(self.w_k(key))
        v = self.split(self.w_v(value))
        output, weights = self.attend(q, k, v, self.prepare_mask(mask))
        output = self.dropout(weights) @ v if self.training else output
        return self.output(self.merge(output)), weights

    def output(self, merged):
        return self.w_o(merged)


class MHAStub(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        raise NotImplementedError


class MHAForwardStub(MHACorrect):
    def forward(self, query, key, value, mask=None):
        raise NotImplementedError


class MHASplitWrongAxis(MHACorrect):
    def split(self, x):
        return split_wrong_axis(x, self.num_heads)


class MHAMergeWrongOrder(MHACorrect):
    def merge(self, x):
        return merge_no_transpose(x)


class MHANoOutputProjection(MHACorrect):
    def output(self, merged):
        return merged


class MHAScaleDModel(MHACorrect):
    def attend(self, q, k, v, mask):
        return attention(q, k, v, mask, scale=math.sqrt(self.d_model))


class MHAScaleDModelNoSqrt(MHACorrect):
    def attend(self, q, k, v, mask):
        return attention(q, k, v, mask, scale=float(self.d_model))


class MHANoScale(MHACorrect):
    def attend(self, q, k, v, mask):
        return attention(q, k, v, mask, scale=1.0)


class MHAMaskIgnored(MHACorrect):
    def attend(self, q, k, v, mask):
        return attention(q, k, v, None)


class MHAMaskNotUnsqueezed(MHACorrect):
    """Passes the (B, Lq, Lk) mask as is: it broadcasts against the head axis when B == H."""

    def prepare_mask(self, mask):
        return mask


class MHAMaskInverted(MHACorrect):
    def prepare_mask(self, mask):
        mask = super().prepare_mask(mask)
        return (
            None
            if mask is None
            else ~mask | torch.eye(mask.size(-1), dtype=torch.bool)[: mask.size(-2)]
        )


class MHASoftmaxOverQueries(MHACorrect):
    def attend(self, q, k, v, mask):
        return attention(q, k, v, mask, softmax_dim=-2)


class MHAKeyAsValue(MHACorrect):
    def forward(self, query, key, value, mask=None):
        return super().forward(query, key, key, mask)


class MHAAveragedWeights(MHACorrect):
    def forward(self, query, key, value, mask=None):
        output, weights = super().forward(query, key, value, mask)
        return output, weights.mean(dim=1)


class MHAOutputOnly(MHACorrect):
    def forward(self, query, key, value, mask=None):
        return super().forward(query, key, value, mask)[0]


class MHADropoutInEval(MHACorrect):
    def forward(self, query, key, value, mask=None):
        q = self.split(self.w_q(query))
        k = self.split(self.w_k(key))
        v = self.split(self.w_v(value))
        _, weights = self.attend(q, k, v, self.prepare_mask(mask))
        output = nn.functional.dropout(weights, self.dropout.p, training=True) @ v
        return self.w_o(self.merge(output)), weights


class MHAOneBiasFlag(MHACorrect):
    """Ignores bias=False."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__(d_model, num_heads, dropout, bias=True)


class MHASelfOnly(MHACorrect):
    """Uses the query for keys and values: only self-attention works."""

    def forward(self, query, key, value, mask=None):
        return super().forward(query, query, query, mask)


class MHAPerHeadLayers(nn.Module):
    """Projects to d_k per head with separate layers and has no w_q/w_k/w_v/w_o."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        self.heads = nn.ModuleList(
            nn.Linear(d_model, d_model // num_heads) for _ in range(num_heads)
        )

    def forward(self, query, key, value, mask=None):
        raise AssertionError("never reached")


class MHANoDivisibilityCheck(MHACorrect):
    """Accepts d_model=10 with 3 heads and truncates the features in split."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__(d_model - d_model % num_heads, num_heads, dropout, bias)
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def split(self, x):
        return split_truncates(x, self.num_heads)

    def merge(self, x):
        merged = merge_correct(x)
        missing = self.w_o.in_features - merged.size(-1)
        return torch.nn.functional.pad(merged, (0, missing))


class MHADropoutOnOutput(MHACorrect):
    """Dropout on the module's output instead of the attention weights."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(w(t)) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value))
        )
        output, weights = self.attend(q, k, v, self.prepare_mask(mask))
        return self.dropout(self.w_o(self.merge(output))), weights


class MHADropoutOnHeads(MHACorrect):
    """Dropout on weights @ V (the heads' outputs), before w_o."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(w(t)) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value))
        )
        output, weights = self.attend(q, k, v, self.prepare_mask(mask))
        return self.w_o(self.merge(self.dropout(output))), weights


class MHAReturnsDroppedWeights(MHACorrect):
    """Returns the weights after dropout instead of the pattern the model computed."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(w(t)) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value))
        )
        _, weights = self.attend(q, k, v, self.prepare_mask(mask))
        weights = self.dropout(weights)
        return self.w_o(self.merge(weights @ v)), weights


class MHADropoutNeverApplied(MHACorrect):
    """Holds an nn.Dropout but never calls it."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(w(t)) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value))
        )
        output, weights = self.attend(q, k, v, self.prepare_mask(mask))
        return self.w_o(self.merge(output)), weights


class MHAFunctionalDropout(MHACorrect):
    """Right, written differently: F.dropout(weights, p, training=self.training)."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(w(t)) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value))
        )
        _, weights = self.attend(q, k, v, self.prepare_mask(mask))
        dropped = nn.functional.dropout(weights, self.dropout.p, training=self.training)
        return self.w_o(self.merge(dropped @ v)), weights


class MHAForgetsNumHeads(MHACorrect):
    """Right values; the head count not kept in ``self.num_heads`` (notebook 09 reads it)."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__(d_model, num_heads, dropout, bias)
        self.heads = self.__dict__.pop("num_heads")

    def forward(self, query, key, value, mask=None):
        self.num_heads = self.heads
        try:
            return super().forward(query, key, value, mask)
        finally:
            del self.num_heads


MHA_WRONG = {
    "num_heads_not_kept": MHAForgetsNumHeads,
    "indivisible_d_model_accepted": MHANoDivisibilityCheck,
    "dropout_on_output": MHADropoutOnOutput,
    "dropout_on_heads_before_w_o": MHADropoutOnHeads,
    "returns_weights_after_dropout": MHAReturnsDroppedWeights,
    "dropout_never_applied": MHADropoutNeverApplied,
    "split_wrong_axis": MHASplitWrongAxis,
    "merge_wrong_order": MHAMergeWrongOrder,
    "missing_output_projection": MHANoOutputProjection,
    "scaled_by_sqrt_d_model": MHAScaleDModel,
    "scaled_by_d_model": MHAScaleDModelNoSqrt,
    "not_scaled": MHANoScale,
    "mask_ignored": MHAMaskIgnored,
    "mask_head_axis_missing": MHAMaskNotUnsqueezed,
    "mask_inverted": MHAMaskInverted,
    "softmax_over_queries": MHASoftmaxOverQueries,
    "key_used_as_value": MHAKeyAsValue,
    "weights_averaged_over_heads": MHAAveragedWeights,
    "returns_output_only": MHAOutputOnly,
    "dropout_active_in_eval": MHADropoutInEval,
    "bias_flag_ignored": MHAOneBiasFlag,
    "self_attention_only": MHASelfOnly,
    "layers_misnamed": MHAPerHeadLayers,
}


def test_mha_correct_passes():
    assert check.multi_head_attention(MHACorrect, raise_on_failure=False).status == PASSED


@pytest.mark.parametrize("impl", [MHAStub, MHAForwardStub], ids=["init", "forward"])
def test_mha_stub_not_implemented(impl):
    assert check.multi_head_attention(impl, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", MHA_WRONG)
def test_mha_wrong_rejected(name):
    result = check.multi_head_attention(MHA_WRONG[name], raise_on_failure=False)
    assert result.status == FAILED, name


def test_mha_functional_dropout_passes():
    result = check.multi_head_attention(MHAFunctionalDropout, raise_on_failure=False)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize(
    "name, words",
    [
        ("indivisible_d_model_accepted", "10 features cannot be split into 3 equal heads"),
        ("dropout_on_output", "dropout acts on the module's output (after w_o)"),
        ("dropout_on_heads_before_w_o", "dropout acts on the heads' outputs"),
        ("returns_weights_after_dropout", "are the ones after dropout"),
        ("dropout_never_applied", "dropout is never applied"),
        ("num_heads_not_kept", "`self.num_heads` is None, expected 4"),
    ],
)
def test_mha_mistake_is_named(name, words):
    result = check.multi_head_attention(MHA_WRONG[name], raise_on_failure=False)
    assert words in result.message, result.message


def test_mha_check_keeps_the_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check.multi_head_attention(MHACorrect, raise_on_failure=False)
    assert torch.equal(torch.rand(3), expected)


# --- 3.3 parameter count ---------------------------------------------------------------------


def count_correct(d_model, num_heads, bias=True):
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def count_stub(d_model, num_heads, bias=True):
    raise NotImplementedError


COUNT_WRONG = {
    "biases_forgotten": lambda d, h, bias=True: 4 * d * d,
    "three_matrices": lambda d, h, bias=True: 3 * d * d + (3 * d if bias else 0),
    "per_head_d_k_squared": lambda d, h, bias=True: 4 * h * (d // h) ** 2 + (4 * d if bias else 0),
    "times_heads": lambda d, h, bias=True: h * (4 * d * d + (4 * d if bias else 0)),
    "bias_always_counted": lambda d, h, bias=True: 4 * d * d + 4 * d,
    "float_result": lambda d, h, bias=True: float(count_correct(d, h, bias)),
}


def test_count_correct_passes():
    assert check.parameter_count(count_correct, raise_on_failure=False).status == PASSED


def test_count_by_building_a_module_passes():
    """Counting the parameters of a real module is a right answer too."""

    def count_module(d_model, num_heads, bias=True):
        return sum(p.numel() for p in MHACorrect(d_model, num_heads, bias=bias).parameters())

    assert check.parameter_count(count_module, raise_on_failure=False).status == PASSED


def test_count_stub_not_implemented():
    assert check.parameter_count(count_stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", COUNT_WRONG)
def test_count_wrong_rejected(name):
    result = check.parameter_count(COUNT_WRONG[name], raise_on_failure=False)
    assert result.status == FAILED, name


# --- the exported solutions pass too --------------------------------------------------------


def test_course_nn_exports_pass():
    nn_module = pytest.importorskip("course.nn")
    if not hasattr(nn_module, "MultiHeadAttention"):
        pytest.skip("course/nn.py not generated yet")
    assert check.split_merge_heads(
        nn_module.split_heads, nn_module.merge_heads, raise_on_failure=False
    ).passed
    assert check.multi_head_attention(nn_module.MultiHeadAttention, raise_on_failure=False).passed


# --- one wrong implementation per property -----------------------------------------------
# Each passed the checks (or got another message) before they tested the property.


def merge_transposes_in_place(x):
    """transpose_ changes the caller's tensor."""
    batch, heads, length, d_head = x.shape
    return x.transpose_(1, 2).reshape(batch, length, heads * d_head)


def split_detached(x, num_heads):
    """Right values, but cut from the graph: nothing before it can learn."""
    return split_correct(x.detach(), num_heads)


def split_into_zeros_on_the_cpu(x, num_heads):
    """Adds the heads to a tensor of zeros created without a device."""
    batch, length, d_model = x.shape
    heads = split_correct(x, num_heads)
    return torch.zeros(heads.shape, dtype=x.dtype) + heads


class MHAHeadsAndSizeSwapped(MHACorrect):
    """split_heads(x, self.d_k): heads of num_heads features instead of num_heads heads."""

    def split(self, x):
        return split_correct(x, self.d_model // self.num_heads)


class MHADropoutZeroMeansDefault(MHACorrect):
    """nn.Dropout(dropout or 0.1): dropout=0.0 is read as "use the default"."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__(d_model, num_heads, dropout, bias)
        self.dropout = nn.Dropout(dropout or 0.1)


class MHAKeyDetached(MHACorrect):
    """Detaches the keys (as if they were a fixed memory): no gradient reaches `key`."""

    def forward(self, query, key, value, mask=None):
        return super().forward(query, key.detach(), value, mask)


class MHADefaultMaskOnTheCpu(MHACorrect):
    """Builds an all-True mask when none is given, without a device."""

    def forward(self, query, key, value, mask=None):
        if mask is None:
            mask = torch.ones(query.size(1), key.size(1), dtype=torch.bool)
        return super().forward(query, key, value, mask)


class MHAUnsqueezesInPlace(MHACorrect):
    """mask.unsqueeze_(1): right numbers, but the caller's mask has changed shape."""

    def prepare_mask(self, mask):
        if mask is not None and mask.dim() == 3:
            mask.unsqueeze_(1)
        return mask


class MHAAlwaysUnsqueezes(MHACorrect):
    """Adds a head axis to every mask, also to one that already has it (the docstring allows)."""

    def prepare_mask(self, mask):
        return None if mask is None else mask.unsqueeze(1)


PROPERTY_CASES = [
    ("split_merge_heads", (split_correct, merge_transposes_in_place), "inputs untouched"),
    ("split_merge_heads", (split_detached, merge_correct), "property violated: gradients"),
    ("split_merge_heads", (split_into_zeros_on_the_cpu, merge_correct), "violated: device"),
    ("multi_head_attention", (MHAHeadsAndSizeSwapped,), "heads of num_heads features"),
    ("multi_head_attention", (MHADropoutZeroMeansDefault,), "violated: training mode"),
    ("multi_head_attention", (MHAKeyDetached,), "no gradient reaches `key`"),
    ("multi_head_attention", (MHADefaultMaskOnTheCpu,), "property violated: device"),
    ("multi_head_attention", (MHAUnsqueezesInPlace,), "inputs untouched"),
    ("multi_head_attention", (MHAAlwaysUnsqueezes,), "already has a head axis"),
]


def _label(case):
    return "-".join(getattr(f, "__name__", str(f)) for f in case[1])


@pytest.mark.parametrize("name, wrong, words", PROPERTY_CASES, ids=map(_label, PROPERTY_CASES))
def test_property_violation_is_named(name, wrong, words):
    result = getattr(check, name)(*wrong, raise_on_failure=False)
    assert result.status == FAILED, f"{_label((name, wrong))} was not rejected"
    assert words in result.message, result.message


# --- right variants --------------------------------------------------------------------------


def split_unflatten(x, num_heads):
    if x.size(-1) % num_heads:
        raise ValueError("d_model is not divisible by num_heads")
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


def merge_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(2)


def split_loop(x, num_heads):
    d_model = x.size(-1)
    if d_model % num_heads:
        raise ValueError(f"{d_model} features cannot be shared by {num_heads} heads")
    d_k = d_model // num_heads
    return torch.stack([x[..., h * d_k : (h + 1) * d_k] for h in range(num_heads)], dim=1)


def merge_cat(x):
    return torch.cat(list(x.unbind(dim=1)), dim=-1)


@pytest.mark.parametrize(
    "pair", [(split_unflatten, merge_flatten), (split_loop, merge_cat)], ids=["unflatten", "loop"]
)
def test_split_merge_right_variants_pass(pair):
    result = check.split_merge_heads(*pair, raise_on_failure=False)
    assert result.status == PASSED, result.message


class MHAAnnotated(nn.Module):
    """The Annotated Transformer's MultiHeadedAttention (Rush 2018), glued at the interface:
    its four linears renamed w_q, w_k, w_v, w_o; mask == 0 filled with -1e9; dropout on p_attn."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("d_model must be divisible by num_heads")
        self.d_k, self.h = d_model // num_heads, num_heads
        self.num_heads = num_heads  # the glue: the stub keeps it, notebook 09 reads it
        self.w_q, self.w_k, self.w_v, self.w_o = (
            nn.Linear(d_model, d_model, bias=bias) for _ in range(4)
        )
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip((self.w_q, self.w_k, self.w_v), (query, key, value), strict=True)
        ]
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = scores.softmax(dim=-1)
        x = torch.matmul(self.dropout(p_attn), value)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.w_o(x), p_attn


class MHAEinsumFloat64(MHACorrect):
    """einsum, and the softmax computed in float64 internally."""

    def attend(self, q, k, v, mask):
        scores = torch.einsum("bhqd,bhkd->bhqk", q.double(), k.double()) / q.size(-1) ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(-1).to(q.dtype)
        return torch.einsum("bhqk,bhkd->bhqd", weights, v), weights


@pytest.mark.parametrize("right", [MHAAnnotated, MHAEinsumFloat64], ids=lambda c: c.__name__)
def test_mha_right_variants_pass(right):
    result = check.multi_head_attention(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


# --- hints point at the principle, never the finished line ----------------------------------

ANSWER_LINES = ["transpose(1, 2)", "reshape(B", "mask.unsqueeze(1)", "4 * d_model", "Four d_model"]


@pytest.mark.parametrize(
    "name, wrong",
    [
        ("split_merge_heads", (split_wrong_axis, merge_correct)),
        ("split_merge_heads", (split_correct, merge_no_transpose)),
        ("multi_head_attention", (MHAMaskNotUnsqueezed,)),
        ("multi_head_attention", (MHAMergeWrongOrder,)),
        ("parameter_count", (COUNT_WRONG["times_heads"],)),
    ],
)
def test_hints_hold_no_answer(name, wrong):
    result = getattr(check, name)(*wrong, raise_on_failure=False)
    assert result.status == FAILED
    for text in (result.hint or "", getattr(check, name).hint or ""):
        assert not any(line in text for line in ANSWER_LINES), text


# --- wrong implementations by family of mistake, written independently of the specs ----------------
# Wrong ones break one sentence of the text each; right ones are canonical code of the field
# glued at the interface (d2l, nanoGPT, Hugging Face). Family numbers follow the issue: 1 stated
# types, 2 the device (values read, training-only and edge paths), 3 called as the course calls
# it, 4 training-only behaviour, 5 statistics.


def count_numpy(d_model, num_heads, bias=True):
    """A NumPy integer, not the Python int the text states."""
    import numpy as np

    return np.int64(count_correct(d_model, num_heads, bias))


def count_tensor(d_model, num_heads, bias=True):
    return torch.tensor(count_correct(d_model, num_heads, bias))


def count_bool_arithmetic(d_model, num_heads, bias=True):
    """Right: a bool times an int is an int."""
    return 4 * (d_model * d_model + d_model * bias)


def split_reads_values(x, num_heads):
    """Right: reads a value (a NaN guard) before splitting; runs on any device."""
    if bool(torch.isnan(x).any()):
        raise ValueError("NaN in the input")
    return split_correct(x, num_heads)


def split_numpy(x, num_heads):
    """Through NumPy: no gradient, and no GPU."""
    return torch.from_numpy(split_correct(x.detach(), num_heads).numpy().copy())


def split_d2l(x, num_heads):
    """Right: d2l's transpose_qkv without its final flattening of heads into the batch."""
    if x.shape[-1] % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    return x.reshape(x.shape[0], x.shape[1], num_heads, -1).permute(0, 2, 1, 3)


def merge_d2l(x):
    """Right: d2l's transpose_output on (B, H, L, d)."""
    return x.permute(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)


def split_hf(x, num_heads):
    """Right: Hugging Face BERT's transpose_for_scores."""
    if x.size(-1) % num_heads:
        raise ValueError("hidden size is not a multiple of the number of attention heads")
    new_shape = x.size()[:-1] + (num_heads, x.size(-1) // num_heads)
    return x.view(new_shape).permute(0, 2, 1, 3)


def merge_nanogpt(y):
    """Right: nanoGPT's y.transpose(1, 2).contiguous().view(B, T, C)."""
    b, h, t, d = y.size()
    return y.transpose(1, 2).contiguous().view(b, t, h * d)


class MHAKeywordOnlyOptions(MHACorrect):
    """dropout and bias keyword-only: notebook 05's MultiHeadAttention(d, h, dropout) fails."""

    def __init__(self, d_model, num_heads, *, dropout=0.0, bias=True):
        super().__init__(d_model, num_heads, dropout, bias)


class MHAKeywordOnlyMask(MHACorrect):
    """mask keyword-only: notebook 05's attn(h, h, h, mask) fails."""

    def forward(self, query, key, value, *, mask=None):
        return super().forward(query, key, value, mask)


class MHABiasBeforeDropout(MHACorrect):
    """Parameters in another order: (d_model, num_heads, bias, dropout)."""

    def __init__(self, d_model, num_heads, bias=True, dropout=0.0):
        super().__init__(d_model, num_heads, float(dropout), bool(bias))


class MHADefaultDropout(MHACorrect):
    """The default dropout is 0.1 instead of the signature's 0.0."""

    def __init__(self, d_model, num_heads, dropout=0.1, bias=True):
        super().__init__(d_model, num_heads, dropout, bias)


class MHADropoutMaskOnTheCpu(MHACorrect):
    """Draws its own dropout mask without a device: only training mode meets it."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(w(t)) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value))
        )
        output, weights = self.attend(q, k, v, self.prepare_mask(mask))
        if self.training and self.dropout.p > 0:
            keep = (torch.rand(weights.shape) >= self.dropout.p).to(weights.dtype)
            output = (weights * keep / (1 - self.dropout.p)) @ v
        return self.w_o(self.merge(output)), weights


class MHADeadRowsOnTheCpu(MHACorrect):
    """Zeroes fully masked rows with a tensor made on the CPU: only such a row meets it."""

    def attend(self, q, k, v, mask):
        output, weights = attention(q, k, v, mask)
        dead = torch.isnan(weights)
        if bool(dead.any()):
            weights = torch.where(dead, torch.zeros(weights.shape), weights)
            output = weights @ v
        return output, weights


class MHAFullTensorOnTheCpu(MHACorrect):
    """Fills blocked scores from a tensor of -inf made without a device."""

    def attend(self, q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = torch.where(mask, scores, torch.full(scores.shape, float("-inf")))
        weights = scores.softmax(-1)
        return weights @ v, weights


class MHAExtraOutputDropout(MHACorrect):
    """A fixed nn.Dropout(0.1) on the output as well, which the text does not describe."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__(d_model, num_heads, dropout, bias)
        self.out_drop = nn.Dropout(0.1)

    def output(self, merged):
        return self.out_drop(self.w_o(merged))


class MHATemperature(MHACorrect):
    """A learned temperature the text does not name."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__(d_model, num_heads, dropout, bias)
        self.temperature = nn.Parameter(torch.ones(1))

    def attend(self, q, k, v, mask):
        return attention(q * self.temperature, k, v, mask)


class MHAZeroesInPlace(MHACorrect):
    """Writes zeros into softmax's output in place: backward breaks, only where there is a mask."""

    def attend(self, q, k, v, mask):
        output, weights = attention(q, k, v, mask)
        if mask is not None:
            weights.masked_fill_(~mask, 0.0)
            output = weights @ v
        return output, weights


class MHASharedDropoutMask(MHACorrect):
    """One dropout mask for every sequence and head (drawn for (Lq, Lk) only)."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(w(t)) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value))
        )
        output, weights = self.attend(q, k, v, self.prepare_mask(mask))
        if self.training and self.dropout.p > 0:
            keep = torch.rand(weights.shape[-2:], device=weights.device) >= self.dropout.p
            output = (weights * keep / (1 - self.dropout.p)) @ v
        return self.w_o(self.merge(output)), weights


class MHAKeepProbability(MHACorrect):
    """Reads dropout as the probability to keep: drops with 1 - p."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__(d_model, num_heads, dropout, bias)
        self.dropout = nn.Dropout(1.0 - dropout if dropout else 0.0)


class MHAd2l(nn.Module):
    """Right: d2l's MultiHeadAttention (heads folded into the batch, masked_softmax with -1e6,
    dropout on the weights it keeps), glued: boolean masks, w_q... names, the weights returned."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("num_hiddens must be divisible by num_heads")
        self.num_heads = num_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (
            nn.Linear(d_model, d_model, bias=bias) for _ in range(4)
        )
        self.dropout = nn.Dropout(dropout)

    def transpose_qkv(self, x):
        x = x.reshape(x.shape[0], x.shape[1], self.num_heads, -1).permute(0, 2, 1, 3)
        return x.reshape(-1, x.shape[2], x.shape[3])

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.transpose_qkv(self.w_q(query)),
            self.transpose_qkv(self.w_k(key)),
            self.transpose_qkv(self.w_v(value)),
        )
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        if mask is not None:
            mask = mask.unsqueeze(1) if mask.dim() == 3 else mask
            full = mask.expand(query.shape[0], self.num_heads, query.shape[1], key.shape[1])
            scores = scores.masked_fill(~full.reshape(scores.shape), -1e6)
        weights = nn.functional.softmax(scores, dim=-1)
        out = torch.bmm(self.dropout(weights), v)
        out = out.reshape(-1, self.num_heads, out.shape[1], out.shape[2]).permute(0, 2, 1, 3)
        shaped = weights.reshape(query.shape[0], self.num_heads, query.shape[1], key.shape[1])
        return self.w_o(out.reshape(out.shape[0], out.shape[1], -1)), shaped


class MHAFusedOutput(MHACorrect):
    """Right: nanoGPT's path, F.scaled_dot_product_attention (with its own dropout_p in
    training) for the output; the weights computed apart for the caller."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split(w(t)) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value))
        )
        mask = self.prepare_mask(mask)
        _, weights = attention(q, k, v, mask)
        p = self.dropout.p if self.training else 0.0
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.w_o(self.merge(out)), weights


FAMILIES = [  # (family, check, implementation, passes)
    (1, "parameter_count", (count_numpy,), False),
    (1, "parameter_count", (count_tensor,), False),
    (1, "parameter_count", (count_bool_arithmetic,), True),
    (2, "split_merge_heads", (split_numpy, merge_correct), False),
    (2, "split_merge_heads", (split_reads_values, merge_correct), True),
    (2, "multi_head_attention", (MHADropoutMaskOnTheCpu,), False),
    (2, "multi_head_attention", (MHADeadRowsOnTheCpu,), False),
    (2, "multi_head_attention", (MHAFullTensorOnTheCpu,), False),
    (3, "multi_head_attention", (MHAKeywordOnlyOptions,), False),
    (3, "multi_head_attention", (MHAKeywordOnlyMask,), False),
    (3, "multi_head_attention", (MHABiasBeforeDropout,), False),
    (3, "multi_head_attention", (MHADefaultDropout,), False),
    (3, "split_merge_heads", (split_d2l, merge_d2l), True),
    (3, "split_merge_heads", (split_hf, merge_nanogpt), True),
    (4, "multi_head_attention", (MHAExtraOutputDropout,), False),
    (4, "multi_head_attention", (MHATemperature,), False),
    (4, "multi_head_attention", (MHAZeroesInPlace,), False),
    (4, "multi_head_attention", (MHAd2l,), True),
    (5, "multi_head_attention", (MHASharedDropoutMask,), False),
    (5, "multi_head_attention", (MHAKeepProbability,), False),
    (5, "multi_head_attention", (MHAFusedOutput,), True),
]


def _family_id(case):
    return f"{case[0]}-{'right' if case[3] else 'wrong'}-" + "-".join(
        getattr(f, "__name__", "f") for f in case[2]
    )


@pytest.mark.parametrize("family, name, impl, passes", FAMILIES, ids=map(_family_id, FAMILIES))
def test_families(family, name, impl, passes):
    result = getattr(check, name)(*impl, raise_on_failure=False)
    assert result.status == (PASSED if passes else FAILED), result.message
