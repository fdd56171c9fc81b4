"""Checks for notebook 03, multi-head attention.

References are independent of the course's solution: head splitting is checked element by
element against its definition, the module against ``torch.nn.MultiheadAttention`` with the
student's weights copied across, the parameter count against that module's ``numel``.
"""

from __future__ import annotations

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
from course.checks.reference import is_dropout_of, torch_attention

OWNER = "MultiHeadAttention"

SplitFn = Callable[[torch.Tensor, int], torch.Tensor]
MergeFn = Callable[[torch.Tensor], torch.Tensor]


@exercise_check(
    "Exercise 3.1",
    "split and merge heads",
    hint="split: reshape (B, L, D) to (B, L, H, D/H), then transpose(1, 2). merge: transpose(1, 2) "
    "back to (B, L, H, d), then reshape (not view: the input may be non-contiguous) to (B, L, H*d).",
)
def split_merge_heads(student_split: SplitFn, student_merge: MergeFn) -> None:
    """Head h must hold features h*d_k ... (h+1)*d_k - 1 of every token; merge must undo split."""
    generator = torch.Generator().manual_seed(0)
    batch, length, d_model, heads = 2, 5, 12, 3
    d_k = d_model // heads
    x = torch.randn(batch, length, d_model, generator=generator)
    split = student_split(x, heads)
    expect_shape(
        split,
        (batch, heads, length, d_k),
        f"split_heads(x of shape {tuple(x.shape)}, {heads})",
        "The result is (batch, heads, length, d_model / heads).",
    )
    for h in range(heads):
        expect(
            torch.equal(split[:, h], x[:, :, h * d_k : (h + 1) * d_k]),
            f"split_heads: head {h} should hold features {h * d_k}..{(h + 1) * d_k - 1} of every "
            "token (a contiguous chunk of the last axis), but it holds other values.",
            "Split the LAST axis into (heads, d_k) with reshape(B, L, H, d_k), then swap the "
            "length and head axes. Reshaping straight to (B, H, L, d_k) mixes tokens.",
        )

    # Contiguous (B, H, L, d), like the output of attention: transpose-then-view fails on it.
    y = torch.randn(batch, heads, length, d_k, generator=generator)
    merged = student_merge(y)
    expect_shape(
        merged,
        (batch, length, d_model),
        f"merge_heads(x of shape {tuple(y.shape)})",
        "The result is (batch, length, heads * d_head).",
    )
    for h in range(heads):
        expect(
            torch.equal(merged[:, :, h * d_k : (h + 1) * d_k], y[:, h]),
            f"merge_heads: features {h * d_k}..{(h + 1) * d_k - 1} of each token should be head "
            f"{h}'s output for that token, but they hold other values.",
            "Swap the head and length axes back (transpose(1, 2)) before flattening the last two "
            "axes; reshaping (B, H, L, d) directly interleaves tokens and heads.",
        )

    cases = [((1, 7, 8), 2), ((3, 1, 6), 3), ((2, 4, 10), 1), ((2, 3, 6), 6)]
    for shape, h in cases:
        x = torch.randn(*shape, generator=generator)
        split = student_split(x, h)
        expect_shape(
            split, (shape[0], h, shape[1], shape[2] // h), f"split_heads(x of shape {shape}, {h})"
        )
        expect_close(
            student_merge(split),
            x,
            atol=0.0,
            rtol=0.0,
            what=f"merge_heads(split_heads(x, {h})) for x of shape {shape}",
            hint="merge_heads must undo split_heads exactly.",
        )
    x64 = torch.randn(2, 3, 8, dtype=torch.float64, generator=generator)
    expect_close(
        student_merge(student_split(x64, 4)),
        x64,
        atol=0.0,
        rtol=0.0,
        what="the float64 round trip merge_heads(split_heads(x, 4))",
    )
    _expect_indivisible_refused(
        lambda: student_split(torch.zeros(2, 5, 10), 3), "split_heads(x of shape (2, 5, 10), 3)"
    )


def _expect_indivisible_refused(call: Callable[[], Any], what: str) -> None:
    """10 features cannot be shared by 3 heads: ``call`` must raise a ValueError."""
    hint = (
        'Check `d_model % num_heads` first and raise ValueError(f"d_model={d_model} is not '
        'divisible by num_heads={num_heads}").'
    )
    try:
        result = call()
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001 - another exception is the wrong kind
        raise CheckFailure(
            f"{what} raised {type(exc).__name__} ({exc}); 10 features cannot be split into 3 "
            "equal heads, so raise a ValueError that says d_model is not divisible by "
            "num_heads.",
            hint,
        ) from None
    shape = tuple(result.shape) if isinstance(result, torch.Tensor) else None
    got = f" and returned shape {shape}" if shape else ""
    raise CheckFailure(
        f"{what} was accepted{got}: 10 features cannot be split into 3 equal heads, so "
        "features would be silently dropped. Raise a ValueError instead.",
        hint,
    )


def _expect_layers(student: nn.Module, d_model: int, bias: bool) -> None:
    for name in ("w_q", "w_k", "w_v", "w_o"):
        layer = getattr(student, name, None)
        expect(
            isinstance(layer, nn.Linear),
            f"the module has no nn.Linear named `{name}`.",
            "Name the four projections w_q, w_k, w_v and w_o (nn.Linear(d_model, d_model)).",
        )
        expect(
            layer.in_features == d_model and layer.out_features == d_model,
            f"`{name}` maps {layer.in_features} -> {layer.out_features} features, expected "
            f"{d_model} -> {d_model}.",
            "Every projection is d_model -> d_model: the heads share it, each using d_model/H "
            "of its outputs.",
        )
        expect(
            (layer.bias is not None) == bias,
            f"`{name}` {'has no' if bias else 'has a'} bias, but bias={bias} was asked for.",
            "Pass bias=bias to every nn.Linear.",
        )


def _compare(
    student: nn.Module,
    reference: nn.MultiheadAttention,
    query,
    key,
    value,
    mask,
    key_padding_mask,
    attn_mask,
    what: str,
    atol: float,
) -> None:
    """Run both modules and compare outputs and per-head weights."""
    with torch.no_grad():
        result = student(query, key, value, mask)
        expected, expected_weights = reference(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            need_weights=True,
            average_attn_weights=False,
        )
    expect(
        isinstance(result, tuple) and len(result) == 2,
        f"forward should return (output, weights), got {type(result).__name__}.",
        "return self.w_o(merge_heads(output)), weights",
    )
    output, weights = result
    expect_tensor(output, f"the output ({what})")
    expect_tensor(weights, f"the attention weights ({what})")
    expect_shape(
        weights,
        expected_weights.shape,
        f"the attention weights ({what})",
        "Return the weights of every head, shape (batch, heads, Lq, Lk), not an average.",
    )
    expect_close(
        weights,
        expected_weights,
        atol=atol,
        what=f"the attention weights ({what})",
        hint="Check how you split the heads, the scaling (sqrt(d_k) with d_k = d_model / "
        "heads, not sqrt(d_model)) and the mask (True = may attend; add the head "
        "axis with mask.unsqueeze(1)).",
    )
    expect_close(
        output,
        expected,
        atol=atol,
        what=f"the output ({what})",
        hint="The weights match torch's, so look after the attention: merge the heads "
        "(transpose back before reshaping) and apply w_o.",
    )


@exercise_check(
    "Exercise 3.2",
    "multi-head attention",
    hint="Project with w_q, w_k, w_v; split_heads; add the head axis to a 3-D mask "
    "(mask.unsqueeze(1)); scaled_dot_product_attention; merge_heads; w_o.",
    seed=0,
)
def multi_head_attention(student_class: type[nn.Module]) -> None:
    """Against torch.nn.MultiheadAttention (weights copied) in self-, cross- and masked
    attention; then the refusal of d_model % num_heads != 0 and dropout's place in training."""
    generator = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=generator, dtype=dtype)

    d_model, heads = 16, 4
    torch.manual_seed(0)
    student = student_class(d_model, heads)
    _expect_layers(student, d_model, bias=True)
    student.eval()
    reference = torch_attention(student, d_model, heads, True, torch.float32, OWNER)

    x = randn(2, 5, d_model)
    _compare(
        student,
        reference,
        x,
        x,
        x,
        None,
        None,
        None,
        "self-attention, x of shape (2, 5, 16), no mask",
        1e-5,
    )

    query, key, value = randn(2, 3, d_model), randn(2, 7, d_model), randn(2, 7, d_model)
    _compare(
        student,
        reference,
        query,
        key,
        value,
        None,
        None,
        None,
        "cross-attention, 3 queries over 7 keys with different values",
        1e-5,
    )

    lengths = torch.tensor([7, 4])
    padding = torch.arange(7)[None, :] >= lengths[:, None]  # True = padding (torch's convention)
    _compare(
        student,
        reference,
        query,
        key,
        value,
        (~padding).unsqueeze(1),
        padding,
        None,
        "cross-attention with a (2, 1, 7) key-padding mask",
        1e-5,
    )

    # Batch size == number of heads: a mask whose head axis is missing broadcasts silently here.
    x4 = randn(4, 6, d_model)
    lengths4 = torch.tensor([6, 2, 5, 3])
    padding4 = torch.arange(6)[None, :] >= lengths4[:, None]
    _compare(
        student,
        reference,
        x4,
        x4,
        x4,
        (~padding4).unsqueeze(1),
        padding4,
        None,
        "self-attention, batch of 4 with different lengths, (4, 1, 6) padding mask",
        1e-5,
    )

    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    _compare(
        student,
        reference,
        x4,
        x4,
        x4,
        causal.unsqueeze(0),
        None,
        ~causal,
        "self-attention with a (1, 6, 6) causal mask",
        1e-5,
    )
    both = causal.unsqueeze(0) & (~padding4).unsqueeze(1)  # (4, 6, 6)
    _compare(
        student,
        reference,
        x4,
        x4,
        x4,
        both,
        padding4,
        ~causal,
        "self-attention with a causal AND padding mask of shape (4, 6, 6)",
        1e-5,
    )

    x1 = randn(1, 1, d_model)
    _compare(
        student, reference, x1, x1, x1, None, None, None, "a batch of one, a single token", 1e-5
    )

    # Another shape, without biases, in float64.
    d_model, heads = 24, 3
    torch.manual_seed(1)
    student = student_class(d_model, heads, bias=False)
    _expect_layers(student, d_model, bias=False)
    student = student.double().eval()
    reference = torch_attention(student, d_model, heads, False, torch.float64, OWNER)
    query, memory = (
        randn(3, 5, d_model, dtype=torch.float64),
        randn(3, 9, d_model, dtype=torch.float64),
    )
    _compare(
        student,
        reference,
        query,
        memory,
        memory,
        None,
        None,
        None,
        "float64, bias=False, d_model=24, 3 heads, cross-attention",
        1e-10,
    )

    # Dropout on: in eval mode it must change nothing.
    torch.manual_seed(2)
    student = student_class(16, 2, dropout=0.5)
    _expect_layers(student, 16, bias=True)
    student.eval()
    reference = torch_attention(student, 16, 2, True, torch.float32, OWNER)
    x = randn(2, 4, 16)
    _compare(
        student,
        reference,
        x,
        x,
        x,
        None,
        None,
        None,
        "dropout=0.5 in eval mode (dropout must be off)",
        1e-5,
    )

    _expect_indivisible_refused(
        lambda: student_class(10, 3)(
            torch.zeros(2, 3, 10), torch.zeros(2, 3, 10), torch.zeros(2, 3, 10)
        ),
        "MultiHeadAttention(d_model=10, num_heads=3)",
    )
    _expect_dropout_on_weights(student_class)


def _expect_dropout_on_weights(student_class: type[nn.Module]) -> None:
    """In training mode dropout zeroes attention weights (the copy that multiplies V); the
    returned weights are those before dropout.

    The weights that multiplied V are recovered from the output itself, whatever the random
    stream: undo w_o (a square, invertible matrix), split the heads, and solve against each
    head's values (4 keys, 8 features per head, so the values have full row rank).
    """
    p, d_model, heads, lq, lk = 0.5, 16, 2, 3, 4
    d_k = d_model // heads
    torch.manual_seed(3)
    student = student_class(d_model, heads, dropout=p)
    _expect_layers(student, d_model, bias=True)
    student = student.double()
    generator = torch.Generator().manual_seed(4)
    query = torch.randn(2, lq, d_model, generator=generator, dtype=torch.float64)
    memory = torch.randn(2, lk, d_model, generator=generator, dtype=torch.float64)
    what = "dropout=0.5 in training mode"
    with torch.no_grad():
        out_eval, w_eval = student.eval()(query, memory, memory)
        torch.manual_seed(5)
        result = student.train()(query, memory, memory)
        student.eval()
        expect(
            isinstance(result, tuple) and len(result) == 2,
            f"forward should return (output, weights), got {type(result).__name__}.",
        )
        out_train, w_train = result
        expect_tensor(out_train, f"the output ({what})")
        expect_tensor(w_train, f"the attention weights ({what})")
        hint = (
            "weights = softmax(...) is what you return; only the copy that multiplies V goes "
            "through dropout: output = self.dropout(weights) @ v, in training mode."
        )
        if not torch.allclose(w_train, w_eval, atol=1e-10):
            dropped = is_dropout_of(w_train, w_eval, p)
            raise CheckFailure(
                f"with {what}, the returned attention weights "
                + (
                    "are the ones after dropout (zeros and 1/(1-p)-scaled values); return "
                    "the weights before dropout, the pattern the model computed."
                    if dropped
                    else "differ from those in eval mode; return the weights before dropout, "
                    "the pattern the model computed."
                ),
                hint,
            )
        expect(
            not torch.allclose(out_train, out_eval, atol=1e-10),
            f"with {what} the output equals the eval-mode output: dropout is never applied.",
            hint,
        )
        w_o = student.w_o
        bias = w_o.bias if w_o.bias is not None else torch.zeros(d_model, dtype=torch.float64)

        def merged_heads(out: torch.Tensor) -> torch.Tensor:  # undo w_o: (B, H, Lq, d_k)
            merged = torch.linalg.solve(w_o.weight.T, out - bias, left=False)
            return merged.reshape(2, lq, heads, d_k).transpose(1, 2)

        heads_train, heads_eval = merged_heads(out_train), merged_heads(out_eval)
        v = student.w_v(memory).reshape(2, lk, heads, d_k).transpose(1, 2)
        used = heads_train @ torch.linalg.pinv(v)  # the weights that multiplied V
        if torch.allclose(used @ v, heads_train, atol=1e-8) and is_dropout_of(used, w_eval, p):
            return
        if is_dropout_of(out_train, out_eval, p):
            mistake = "dropout acts on the module's output (after w_o)"
        elif is_dropout_of(heads_train, heads_eval, p):
            mistake = "dropout acts on the heads' outputs (weights @ V, before w_o)"
        else:
            mistake = "the output is not the values weighted by dropped-out attention weights"
        raise CheckFailure(
            f"with {what}, {mistake}; dropout belongs on the attention weights: each weight "
            "is zeroed with probability p (the others scaled by 1/(1-p)) before they "
            "multiply V.",
            hint,
        )


def _torch_count(d_model: int, heads: int, bias: bool) -> int:
    module = nn.MultiheadAttention(d_model, heads, bias=bias, device="meta")
    return sum(p.numel() for p in module.parameters())


@exercise_check(
    "Exercise 3.3",
    "parameter count",
    hint="Four d_model x d_model weight matrices (W_Q, W_K, W_V, W_O) plus, with bias=True, four "
    "bias vectors of d_model; the number of heads does not change the total.",
)
def parameter_count(student_count: Callable[..., int]) -> None:
    """Against the parameters of torch.nn.MultiheadAttention for several sizes."""
    for d_model, heads, bias in [
        (512, 8, True),
        (384, 12, True),
        (64, 4, False),
        (8, 1, True),
        (512, 1, True),
        (768, 12, False),
    ]:
        got = student_count(d_model, heads, bias=bias)
        expect(
            isinstance(got, int) and not isinstance(got, bool),
            f"mha_parameter_count({d_model}, {heads}, bias={bias}) returned "
            f"{type(got).__name__}, expected an int.",
        )
        expected = _torch_count(d_model, heads, bias)
        if got != expected:
            raise CheckFailure(
                f"mha_parameter_count({d_model}, {heads}, bias={bias}) = {got:,}, but "
                f"torch.nn.MultiheadAttention({d_model}, {heads}, bias={bias}) has {expected:,} "
                "parameters."
            )
