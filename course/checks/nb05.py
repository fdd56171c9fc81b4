"""Checks for notebook 05, encoder/decoder.

The references are PyTorch's own layers (``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer``, ``nn.TransformerEncoder``/``Decoder``, ``nn.Transformer``, all
with ``norm_first=True``, ``batch_first=True``, dropout 0 and ReLU), loaded with the student's
randomised weights, plus two properties: causality (a future target token never changes an
earlier output) and padding invariance (padding plus its mask never changes the real outputs).

Masks follow the course convention: boolean, True = "may attend", shape (batch, 1 or L_q, L_k).
PyTorch's layers use the opposite convention (True = "blocked"), so the checks invert them.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from course.check import CheckFailure, exercise_check, expect, expect_close, expect_shape
from course.checks.reference import attribute as _attr
from course.checks.reference import load_attention, norm_parameters, sinusoid_table
from course.checks.reference import load_linear as _load_linear
from course.checks.reference import load_norm as _load_norm

D_MODEL, HEADS, D_FF, LAYERS, VOCAB = 16, 4, 32, 2, 11
TOLERANCE = {
    torch.float64: {"atol": 1e-9, "rtol": 1e-7},
    torch.float32: {"atol": 2e-5, "rtol": 1e-4},
}
# Whole stacks add a positional-encoding table that is usually computed in float32 even when
# the module is later cast to float64, so float64 comparisons of stacks allow float32 rounding.
STACK_TOLERANCE = {
    torch.float64: {"atol": 2e-6, "rtol": 1e-6},
    torch.float32: {"atol": 3e-5, "rtol": 1e-4},
}

# --- helpers --------------------------------------------------------------------------------


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randomize_(module: nn.Module, seed: int) -> None:
    """Give every parameter random values (LayerNorm gains and biases included), so that a
    swapped or missing piece cannot hide behind PyTorch's default initialisation."""
    generator = _generator(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float64)
            if param.dim() >= 2:
                value = noise / math.sqrt(param.shape[-1])
            elif name.endswith("weight"):  # a LayerNorm gain: keep it around 1
                value = 1.0 + 0.3 * noise
            else:
                value = 0.3 * noise
            param.copy_(value.to(param.dtype))


def _load_attention(
    target: nn.MultiheadAttention, student: nn.Module, path: str, owner: str
) -> None:
    """Copy ``student.<path>`` (a MultiHeadAttention) into PyTorch's attention layer."""
    load_attention(target, _attr(student, path, owner), f"{owner}.{path}")


def _expect_layer_norm(module: Any, path: str, owner: str) -> None:
    """``module.<path>`` must compute what nn.LayerNorm computes; name it when it does not."""
    norm = _attr(module, path, owner)
    if isinstance(norm, nn.LayerNorm) or not callable(norm):
        return
    weight, bias, eps = norm_parameters(norm)
    if not isinstance(weight, torch.Tensor) or not isinstance(bias, torch.Tensor):
        return  # copying the weights names what is missing
    h = 2.0 * torch.randn(3, 5, weight.shape[0], generator=_generator(7), dtype=weight.dtype) + 0.5
    with torch.no_grad():
        got = norm(h)
        expected = nn.functional.layer_norm(
            h, (weight.shape[0],), weight, bias, 1e-5 if eps is None else eps
        )
    if isinstance(got, torch.Tensor) and got.shape == expected.shape:
        error = (got - expected).abs().max().item()
        if error > 1e-4:
            raise CheckFailure(
                f"`{owner}.{path}` does not compute what nn.LayerNorm computes (largest "
                f"difference {error:.2g} on a random input): the normalisation differs. "
                "LayerNorm divides x - mean by sqrt(variance + eps), with the biased variance; "
                "(x - mean) / (std + eps) with the unbiased std, as in the Annotated "
                "Transformer, is another function.",
                "Use nn.LayerNorm(d_model) for every norm.",
            )


def _expect_norms(module: Any, paths: tuple[str, ...], owner: str) -> None:
    for path in paths:
        _expect_layer_norm(module, path, owner)


ENCODER_NORMS = ("attn_residual.norm", "ffn_residual.norm")
DECODER_NORMS = ("self_attn_residual.norm", "cross_attn_residual.norm", "ffn_residual.norm")


def _load_encoder_layer(target: nn.TransformerEncoderLayer, block: nn.Module, owner: str) -> None:
    _load_attention(target.self_attn, block, "self_attn", owner)
    _load_linear(target.linear1, block, "ffn.linear1", owner)
    _load_linear(target.linear2, block, "ffn.linear2", owner)
    _load_norm(target.norm1, block, "attn_residual.norm", owner)
    _load_norm(target.norm2, block, "ffn_residual.norm", owner)


def _load_decoder_layer(target: nn.TransformerDecoderLayer, block: nn.Module, owner: str) -> None:
    _load_attention(target.self_attn, block, "self_attn", owner)
    _load_attention(target.multihead_attn, block, "cross_attn", owner)
    _load_linear(target.linear1, block, "ffn.linear1", owner)
    _load_linear(target.linear2, block, "ffn.linear2", owner)
    _load_norm(target.norm1, block, "self_attn_residual.norm", owner)
    _load_norm(target.norm2, block, "cross_attn_residual.norm", owner)
    _load_norm(target.norm3, block, "ffn_residual.norm", owner)


def _layers(stack: nn.Module, num_layers: int, owner: str) -> list[nn.Module]:
    layers = _attr(stack, "layers", owner)
    expect(
        isinstance(layers, (nn.ModuleList, nn.Sequential, list, tuple)),
        f"`{owner}.layers` should be an nn.ModuleList of blocks, got {type(layers).__name__}.",
    )
    expect(
        len(layers) == num_layers,
        f"`{owner}.layers` holds {len(layers)} blocks, expected num_layers = {num_layers}.",
    )
    distinct = len({id(block) for block in layers})
    shared = {id(p) for block in layers[1:] for p in block.parameters()} & {
        id(p) for p in layers[0].parameters()
    }
    expect(
        distinct == num_layers and not shared,
        f"`{owner}.layers` repeats one block ({distinct} distinct of {num_layers}): the layers "
        "share their weights, so the stack has the parameters of a single layer."
        if distinct < num_layers
        else f"`{owner}.layers` blocks share parameters with the first block.",
        "Build a new block for every layer: nn.ModuleList(Block(...) for _ in range(num_layers)), "
        "not [block] * num_layers.",
    )
    return list(layers)


def _token_embedding(stack: nn.Module, owner: str) -> torch.Tensor:
    """The weight of the only nn.Embedding inside ``stack`` (the token embedding)."""
    tables = [m for m in stack.modules() if isinstance(m, nn.Embedding)]
    expect(
        len(tables) == 1,
        f"`{owner}` should contain exactly one nn.Embedding (the token embedding, inside "
        f"TokenEmbedding), found {len(tables)}.",
        "Use TokenEmbedding for the tokens and SinusoidalPositionalEncoding (no parameters) "
        "for the positions.",
    )
    return tables[0].weight


def _embed(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """What the stack should feed its first block: E[ids] * sqrt(d_model) + PE."""
    d_model = weight.shape[1]
    return weight.detach()[ids] * math.sqrt(d_model) + sinusoid_table(
        ids.shape[1], d_model, weight.dtype
    )


def _ids(
    lengths: list[int], width: int, pad_id: int, seed: int, vocab: int = VOCAB
) -> torch.Tensor:
    """Token ids that avoid ``pad_id`` in the first ``lengths[b]`` positions, pad after."""
    generator = _generator(seed)
    ids = torch.randint(0, vocab - 1, (len(lengths), width), generator=generator)
    ids = ids + (ids >= pad_id).long()  # skip pad_id
    for row, length in enumerate(lengths):
        ids[row, length:] = pad_id
    return ids


def _key_mask(lengths: list[int], width: int) -> torch.Tensor:
    """(B, 1, L) course mask: True on the first ``lengths[b]`` keys."""
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None])[:, None, :]


def _future_blocked(length: int) -> torch.Tensor:
    """PyTorch's boolean causal mask: True = blocked (strictly above the diagonal)."""
    return torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """PyTorch warns about nested tensors and norm_first; irrelevant for a reference."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _change_tokens(ids: torch.Tensor, start: int, pad_id: int, vocab: int) -> torch.Tensor:
    """A copy of ``ids`` whose tokens from ``start`` on are all different and never pad_id."""
    changed = ids.clone()
    tail = changed[:, start:]
    for _ in range(vocab):
        tail = (tail + 1) % vocab
        tail = torch.where(tail == pad_id, (tail + 1) % vocab, tail)
        if bool((tail != ids[:, start:]).all()):
            break
    changed[:, start:] = tail
    return changed


def _torch_encoder_layer(dtype: torch.dtype) -> nn.TransformerEncoderLayer:
    # train() with dropout 0 is deterministic and keeps PyTorch off its fused inference path,
    # which would return zeros at padded positions instead of ordinary outputs.
    return nn.TransformerEncoderLayer(
        D_MODEL,
        HEADS,
        D_FF,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=True,
        dtype=dtype,
    ).train()


def _torch_decoder_layer(dtype: torch.dtype) -> nn.TransformerDecoderLayer:
    return nn.TransformerDecoderLayer(
        D_MODEL,
        HEADS,
        D_FF,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=True,
        dtype=dtype,
    ).train()


def _output(value: Any, what: str) -> torch.Tensor:
    expect(
        isinstance(value, torch.Tensor),
        f"{what} should return a tensor, got {type(value).__name__}.",
        "Return only the hidden states (drop the attention weights MultiHeadAttention returns).",
    )
    return value


# --- Exercise 5.1 ---------------------------------------------------------------------------


@exercise_check(
    "Exercise 5.1",
    "position-wise feed-forward network",
    hint="forward = linear2(dropout(relu(linear1(x)))): expand to d_ff, ReLU, project back; "
    "no residual inside.",
)
def feed_forward(FeedForward: type) -> None:
    """Compare with Linear -> ReLU -> Linear (the paper's eq. 2) on the module's own weights."""
    ffn = FeedForward(D_MODEL, D_FF)
    expect(isinstance(ffn, nn.Module), "FeedForward(...) should build an nn.Module.")
    linear1, linear2 = _attr(ffn, "linear1", "FeedForward"), _attr(ffn, "linear2", "FeedForward")
    count = sum(p.numel() for p in ffn.parameters())
    expected_count = 2 * D_MODEL * D_FF + D_FF + D_MODEL
    expect(
        count == expected_count,
        f"FeedForward({D_MODEL}, {D_FF}) has {count} parameters, expected "
        f"2·d_model·d_ff + d_ff + d_model = {expected_count}.",
        "linear1 maps d_model -> d_ff, linear2 maps d_ff -> d_model, both with a bias.",
    )
    _randomize_(ffn, 1)
    ffn.eval()
    generator = _generator(2)
    for dtype, shape in ((torch.float32, (3, 5, D_MODEL)), (torch.float64, (1, 7, D_MODEL))):
        ffn.to(dtype)
        x = torch.randn(shape, generator=generator, dtype=dtype)
        w1, b1 = linear1.weight.detach(), linear1.bias.detach()
        w2, b2 = linear2.weight.detach(), linear2.bias.detach()
        expected = torch.clamp(x @ w1.T + b1, min=0.0) @ w2.T + b2
        expect_close(
            _output(ffn(x), "FeedForward"),
            expected,
            what=f"FeedForward output for a {dtype} input of shape {shape}",
            **TOLERANCE[dtype],
        )
    ffn.to(torch.float32)
    # Position-wise: the output at one position depends on that position only.
    x = torch.randn(2, 6, D_MODEL, generator=generator)
    changed = x.clone()
    changed[:, 3] += 1.0
    diff = (ffn(changed) - ffn(x)).abs().amax(dim=(0, 2))
    expect(
        bool((diff[torch.arange(6) != 3] < 1e-6).all()),
        "changing the input at position 3 changed the output at other positions; the FFN "
        "must act on each position separately.",
    )
    # Dropout is active in training mode and off in eval mode.
    noisy = FeedForward(D_MODEL, D_FF, dropout=0.5)
    noisy.train()
    expect(
        not torch.equal(noisy(x), noisy(x)),
        "with dropout=0.5 in training mode two calls gave identical outputs: dropout is missing.",
        "Apply nn.Dropout(dropout) to the hidden activations.",
    )
    noisy.eval()
    expect(torch.equal(noisy(x), noisy(x)), "in eval mode the output should be deterministic.")
    # Dropout's place: with p = 1 every hidden activation is dropped, so the output is
    # linear2's bias alone; dropping the output instead gives zeros.
    dropped = FeedForward(D_MODEL, D_FF, dropout=1.0)
    _randomize_(dropped, 6)
    dropped.train()
    out = _output(dropped(x), "FeedForward")
    second = _attr(dropped, "linear2", "FeedForward")
    first = _attr(dropped, "linear1", "FeedForward")
    bias_only = second.bias.detach().expand_as(x)
    if not torch.allclose(out, bias_only, atol=1e-6):
        if torch.allclose(out, torch.zeros_like(out)):
            mistake = "dropout acts after the second linear layer (on the output)"
        elif torch.allclose(out, second(torch.relu(first.bias)).detach().expand_as(x), atol=1e-6):
            mistake = "dropout acts on the input, before the first linear layer"
        else:
            mistake = "dropout does not act on the hidden activations alone"
        raise CheckFailure(
            f"with dropout=1.0 in training mode the output should be linear2's bias alone "
            f"(every hidden activation dropped), but {mistake}.",
            "Dropout belongs between the two layers: linear2(dropout(relu(linear1(x)))).",
        )


# --- Exercise 5.2 ---------------------------------------------------------------------------


@exercise_check(
    "Exercise 5.2",
    "pre-LN residual connection",
    hint="Pre-LN: x + dropout(sublayer(norm(x))). The residual path carries the *un-normalised* "
    "x; only the sub-layer's input is normalised.",
)
def pre_norm_residual(PreNormResidual: type) -> None:
    """Compare with x + sublayer(LayerNorm(x)) using the module's own LayerNorm parameters."""
    wrapper = PreNormResidual(D_MODEL)
    norm = _attr(wrapper, "norm", "PreNormResidual")
    _randomize_(wrapper, 3)
    wrapper.eval()
    _expect_layer_norm(wrapper, "norm", "PreNormResidual")
    gain, shift, eps = norm_parameters(norm)
    eps = 1e-5 if eps is None else eps
    generator = _generator(4)
    sub_linear = nn.Linear(D_MODEL, D_MODEL)
    _randomize_(sub_linear, 5)

    def sublayer(h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(sub_linear.to(h.dtype)(h))

    for dtype, shape in ((torch.float32, (2, 5, D_MODEL)), (torch.float64, (1, 3, D_MODEL))):
        wrapper.to(dtype)
        x = 3.0 * torch.randn(shape, generator=generator, dtype=dtype) + 1.0
        normed = nn.functional.layer_norm(x, (D_MODEL,), gain.detach(), shift.detach(), eps)
        expected = x + sublayer(normed)
        got = _output(wrapper(x, sublayer), "PreNormResidual")
        expect_shape(got, expected.shape, "PreNormResidual output")
        post = nn.functional.layer_norm(
            x + sublayer(x), (D_MODEL,), gain.detach(), shift.detach(), eps
        )
        expect(
            not torch.allclose(got, post, atol=1e-5),
            "this is the post-LN wrapper, LayerNorm(x + sublayer(x)), the original paper's "
            "order; this exercise asks for pre-LN.",
        )
        expect(
            not torch.allclose(got, normed + sublayer(normed), atol=1e-5),
            "the residual path carries LayerNorm(x) instead of x: add the sub-layer's "
            "output to the un-normalised input.",
        )
        expect_close(
            got,
            expected,
            what=f"PreNormResidual output ({dtype}, shape {shape})",
            **TOLERANCE[dtype],
        )
    # Dropout belongs on the sub-layer's output only: with p = 1 that branch vanishes entirely.
    dropped = PreNormResidual(D_MODEL, dropout=1.0).train()
    x = torch.randn(2, 4, D_MODEL, generator=generator)
    expect_close(
        _output(dropped(x, sublayer), "PreNormResidual"),
        x,
        what="PreNormResidual(dropout=1.0) in training mode (should return x unchanged)",
        hint="Apply dropout to sublayer(norm(x)) only, before adding it to x.",
    )


# --- Exercise 5.3 ---------------------------------------------------------------------------


def _expect_encoder_block_masks(block: nn.Module) -> None:
    """Padding plus its mask must not change the real positions: else the mask is lost."""
    generator = _generator(25)
    dtype = next(block.parameters()).dtype
    x = torch.randn(1, 5, D_MODEL, generator=generator, dtype=dtype)
    padded = torch.cat([x, 5.0 * torch.randn(1, 4, D_MODEL, generator=generator, dtype=dtype)], 1)
    with torch.no_grad():
        alone = _output(block(x), "EncoderBlock")
        with_pad = _output(block(padded, _key_mask([5], 9)), "EncoderBlock")
    if with_pad.shape == padded.shape and alone.shape == x.shape:
        error = (with_pad[:, :5] - alone).abs().max().item()
        expect(
            error < 1e-6,
            f"appending 4 masked padding positions changed the outputs of the 5 real tokens "
            f"(by up to {error:.2g}): the mask does not reach the self-attention.",
            "x = self.attn_residual(x, lambda h: self.self_attn(h, h, h, mask)[0])",
        )


@exercise_check(
    "Exercise 5.3",
    "encoder block",
    hint="x = attn_residual(x, lambda h: self_attn(h, h, h, mask)[0]); "
    "then x = ffn_residual(x, ffn). Pass the mask to the attention.",
)
def encoder_block(EncoderBlock: type) -> None:
    """Match nn.TransformerEncoderLayer(norm_first=True) with the same weights; padding invariance."""
    with _quiet():
        for seed, dtype in enumerate((torch.float64, torch.float32)):
            block = EncoderBlock(D_MODEL, HEADS, D_FF).to(dtype)
            _randomize_(block, 10 + seed)
            block.eval()
            _expect_norms(block, ENCODER_NORMS, "EncoderBlock")
            if seed == 0:
                _expect_encoder_block_masks(block)
            reference = _torch_encoder_layer(dtype)
            _load_encoder_layer(reference, block, "EncoderBlock")
            generator = _generator(20 + seed)
            cases = [([7, 4, 1], 7), ([5], 5)]
            for lengths, width in cases:
                x = torch.randn(len(lengths), width, D_MODEL, generator=generator, dtype=dtype)
                mask = _key_mask(lengths, width)
                with torch.no_grad():
                    expected = reference(x, src_key_padding_mask=~mask[:, 0])
                    got = _output(block(x, mask), "EncoderBlock")
                expect_close(
                    got,
                    expected,
                    **TOLERANCE[dtype],
                    what=f"EncoderBlock output ({dtype}, lengths {lengths}) vs "
                    "nn.TransformerEncoderLayer(norm_first=True) with your weights",
                )
            with torch.no_grad():
                expect_close(
                    _output(block(x), "EncoderBlock"),
                    reference(x),
                    **TOLERANCE[dtype],
                    what=f"EncoderBlock output with mask=None ({dtype})",
                )
        # Padding invariance: appending padded positions (masked out) changes nothing real.
        block = block.float()
        x = torch.randn(1, 5, D_MODEL, generator=generator)
        padded = torch.cat([x, 5.0 * torch.randn(1, 4, D_MODEL, generator=generator)], dim=1)
        with torch.no_grad():
            alone = block(x)
            with_pad = _output(block(padded, _key_mask([5], 9)), "EncoderBlock")
        expect_close(
            with_pad[:, :5],
            alone,
            what="outputs of 5 real tokens when 4 masked "
            "padding positions are appended (should not change)",
            hint="Pass the mask to self_attn so no position attends to padding.",
        )
        # Dropout must switch off in eval mode.
        noisy = EncoderBlock(D_MODEL, HEADS, D_FF, dropout=0.3).eval()
        with torch.no_grad():
            expect(
                torch.equal(noisy(x), noisy(x)),
                "EncoderBlock(dropout=0.3).eval() gives different outputs on two calls.",
                "Use nn.Dropout modules (they switch off in eval mode).",
            )


# --- Exercise 5.4 ---------------------------------------------------------------------------


def _torch_encoder(dtype: torch.dtype) -> nn.TransformerEncoder:
    return nn.TransformerEncoder(
        _torch_encoder_layer(dtype),
        LAYERS,
        norm=nn.LayerNorm(D_MODEL, dtype=dtype),
        enable_nested_tensor=False,
    ).train()


def _stack_like_reference(
    Stack: type,
    kind: str,
    reference: nn.Module,
    load_layer: Callable,
    pad_id: int,
    dtype: torch.dtype,
    seed: int,
) -> tuple[nn.Module, torch.Tensor]:
    """Build the student's Encoder/Decoder with random weights and copy them into the
    PyTorch ``reference`` stack (blocks and final norm); return it and its embedding table."""
    model = Stack(VOCAB, D_MODEL, HEADS, D_FF, LAYERS, pad_id=pad_id).to(dtype)
    _randomize_(model, seed)
    model.eval()
    for index, block in enumerate(_layers(model, LAYERS, kind)):
        load_layer(reference.layers[index], block, f"{kind}.layers[{index}]")
    _load_norm(reference.norm, model, "norm", kind)
    return model, _token_embedding(model, kind)


@exercise_check(
    "Exercise 5.4",
    "encoder",
    hint="x = pos(embed(ids)); every block gets the padding mask (built from pad_id when mask "
    "is None); finish with the final LayerNorm self.norm.",
)
def encoder(Encoder: type) -> None:
    """Match embedding*sqrt(d) + sinusoidal PE -> nn.TransformerEncoder(norm=LayerNorm)."""
    with _quiet():
        for seed, (dtype, pad_id) in enumerate(((torch.float64, 0), (torch.float32, 3))):
            reference = _torch_encoder(dtype)
            model, weight = _stack_like_reference(
                Encoder, "Encoder", reference, _load_encoder_layer, pad_id, dtype, 30 + seed
            )
            for lengths, width in (([6, 3, 1], 6), ([9], 9)):
                ids = _ids(lengths, width, pad_id, seed=40 + seed)
                with torch.no_grad():
                    expected = reference(_embed(weight, ids), src_key_padding_mask=ids == pad_id)
                    got = _output(model(ids), "Encoder")
                expect_close(
                    got,
                    expected,
                    **STACK_TOLERANCE[dtype],
                    what=f"Encoder(ids) ({dtype}, pad_id={pad_id}, lengths {lengths}) vs "
                    "E[ids]·sqrt(d) + PE -> nn.TransformerEncoder(norm=LayerNorm)",
                )
            # An explicit mask is used as given (here it also hides real token 1 of row 0).
            ids = _ids([6, 3, 1], 6, pad_id, seed=50 + seed)
            mask = (ids != pad_id)[:, None, :].clone()
            mask[0, 0, 1] = False
            with torch.no_grad():
                expected = reference(_embed(weight, ids), src_key_padding_mask=~mask[:, 0])
                got = _output(model(ids, mask), "Encoder")
            expect_close(
                got,
                expected,
                **STACK_TOLERANCE[dtype],
                what="Encoder(ids, mask) with an explicit mask",
                hint="When a mask is given, pass it to every block unchanged.",
            )
        # Padding invariance end to end (float32 model, pad_id 3).
        ids = _ids([5], 5, 3, seed=60)
        padded = torch.cat([ids, torch.full((1, 3), 3)], dim=1)
        with torch.no_grad():
            expect_close(
                model(padded)[:, :5],
                model(ids),
                what="Encoder outputs of 5 real tokens after appending 3 pad tokens",
                hint="Build the padding mask with pad_id when mask is None.",
            )


# --- Exercise 5.5 ---------------------------------------------------------------------------


def _expect_decoder_block_properties(block: nn.Module) -> None:
    """Causality and the use of the memory, named before any comparison with PyTorch."""
    generator = _generator(85)
    dtype = next(block.parameters()).dtype
    x = torch.randn(2, 6, D_MODEL, generator=generator, dtype=dtype)
    memory = torch.randn(2, 5, D_MODEL, generator=generator, dtype=dtype)
    causal = ~_future_blocked(6)[None]
    changed = x.clone()  # new random values: a constant shift would vanish in LayerNorm
    changed[:, 4:] = torch.randn(2, 2, D_MODEL, generator=generator, dtype=dtype)
    with torch.no_grad():
        base = _output(block(x, memory, causal), "DecoderBlock")
        later = _output(block(changed, memory, causal), "DecoderBlock")
        other_memory = torch.randn(2, 5, D_MODEL, generator=generator, dtype=dtype)
        other = _output(block(x, other_memory, causal), "DecoderBlock")
    if base.shape != x.shape or later.shape != x.shape:
        return  # the comparison with PyTorch names the shape
    error = (later[:, :4] - base[:, :4]).abs().max().item()
    expect(
        error < 1e-6,
        f"changing the target at positions 4-5 changed the outputs at positions 0-3 (by up to "
        f"{error:.2g}): a future token is visible, so the causal mask (tgt_mask) is not applied "
        "in the self-attention.",
        "self.self_attn(h, h, h, tgt_mask)",
    )
    expect(
        other.shape == base.shape and not torch.allclose(other, base, atol=1e-6),
        "changing the encoder memory did not change the output: the cross-attention is not "
        "fed the memory.",
        "Cross-attention: queries from the decoder, keys and values from `memory`: "
        "self.cross_attn(h, memory, memory, memory_mask).",
    )


@exercise_check(
    "Exercise 5.5",
    "decoder block",
    hint="Three pre-LN sub-layers: masked self-attention (q = k = v = h, tgt_mask), "
    "cross-attention (queries h, keys and values = memory, memory_mask), feed-forward.",
)
def decoder_block(DecoderBlock: type) -> None:
    """Match nn.TransformerDecoderLayer(norm_first=True); causality; memory padding invariance."""
    with _quiet():
        for seed, dtype in enumerate((torch.float64, torch.float32)):
            block = DecoderBlock(D_MODEL, HEADS, D_FF).to(dtype)
            _randomize_(block, 70 + seed)
            block.eval()
            _expect_norms(block, DECODER_NORMS, "DecoderBlock")
            if seed == 0:
                _expect_decoder_block_properties(block)
            reference = _torch_decoder_layer(dtype)
            _load_decoder_layer(reference, block, "DecoderBlock")
            generator = _generator(80 + seed)
            # (target lengths, target width, memory lengths, memory width): L_t != L_s on purpose.
            for tgt_lengths, lt, mem_lengths, ls in (([5, 3], 5, [7, 2], 7), ([4], 4, [6], 6)):
                x = torch.randn(len(tgt_lengths), lt, D_MODEL, generator=generator, dtype=dtype)
                memory = torch.randn(
                    len(tgt_lengths), ls, D_MODEL, generator=generator, dtype=dtype
                )
                tgt_mask = _key_mask(tgt_lengths, lt) & ~_future_blocked(lt)[None]
                memory_mask = _key_mask(mem_lengths, ls)
                with torch.no_grad():
                    expected = reference(
                        x,
                        memory,
                        tgt_mask=_future_blocked(lt),
                        tgt_key_padding_mask=~_key_mask(tgt_lengths, lt)[:, 0],
                        memory_key_padding_mask=~memory_mask[:, 0],
                    )
                    got = _output(block(x, memory, tgt_mask, memory_mask), "DecoderBlock")
                expect_close(
                    got,
                    expected,
                    **TOLERANCE[dtype],
                    what=f"DecoderBlock output ({dtype}, target {lt} x memory {ls}) vs "
                    "nn.TransformerDecoderLayer(norm_first=True) with your weights",
                )
        block = block.float()
        x = torch.randn(2, 6, D_MODEL, generator=generator)
        memory = torch.randn(2, 5, D_MODEL, generator=generator)
        causal = ~_future_blocked(6)[None]
        with torch.no_grad():
            base = block(x, memory, causal)
            changed = x.clone()
            changed[:, 4:] += 2.0
            later = block(changed, memory, causal)
            expect_close(
                later[:, :4],
                base[:, :4],
                what="outputs at positions 0-3 after changing target positions 4-5",
                hint="Self-attention must use tgt_mask, so no position sees the future.",
            )
            # Cross-attention reads the memory: a different memory must change the output.
            other = block(x, torch.randn(2, 5, D_MODEL, generator=generator), causal)
            expect(
                not torch.allclose(other, base, atol=1e-4),
                "changing the encoder memory did not change the decoder block's output.",
                "Cross-attention takes its keys and values from `memory`.",
            )
            # Memory padding invariance.
            padded = torch.cat([memory, 4.0 * torch.randn(2, 3, D_MODEL, generator=generator)], 1)
            got = block(x, padded, causal, _key_mask([5, 5], 8))
            expect_close(
                got,
                base,
                what="DecoderBlock output after appending 3 masked padding positions to the memory",
                hint="Pass memory_mask to the cross-attention.",
            )


# --- Exercise 5.6 ---------------------------------------------------------------------------


def _torch_decoder(dtype: torch.dtype) -> nn.TransformerDecoder:
    return nn.TransformerDecoder(
        _torch_decoder_layer(dtype), LAYERS, norm=nn.LayerNorm(D_MODEL, dtype=dtype)
    ).train()


def _expect_decoder_properties(
    model: nn.Module, reference: nn.TransformerDecoder, weight: torch.Tensor, pad_id: int
) -> None:
    """Causality end to end, then a missing final norm, named before the full comparison."""
    ids = _ids([7], 7, pad_id, seed=125)
    later = _change_tokens(ids, 4, pad_id=pad_id, vocab=VOCAB)
    dtype = weight.dtype
    memory = torch.randn(1, 4, D_MODEL, generator=_generator(126), dtype=dtype)
    with torch.no_grad():
        base = _output(model(ids, memory), "Decoder")
        changed = _output(model(later, memory), "Decoder")
        if base.shape != (1, 7, D_MODEL) or changed.shape != base.shape:
            return
        error = (changed[:, :4] - base[:, :4]).abs().max().item()
        expect(
            error < 1e-6,
            f"changing target tokens 4-6 changed the outputs at positions 0-3 (by up to "
            f"{error:.2g}): a future token is visible, so the causal mask is not applied.",
            "tgt_mask = make_padding_mask(tgt_ids, pad_id) & make_causal_mask(L, device), "
            "given to every block.",
        )
        hidden = _embed(weight, ids)
        for layer in reference.layers:
            hidden = layer(hidden, memory, tgt_mask=_future_blocked(7))
        expect(
            not torch.allclose(base, hidden, **STACK_TOLERANCE[dtype]),
            "the output is the last block's output without the final LayerNorm: self.norm is "
            "missing after the blocks.",
            "return self.norm(x) after the loop over the blocks (pre-LN stacks end with a norm).",
        )


@exercise_check(
    "Exercise 5.6",
    "decoder",
    hint="tgt_mask = padding mask of tgt_ids & causal mask; x = pos(embed(tgt_ids)); every "
    "block gets (x, memory, tgt_mask, memory_mask); finish with self.norm.",
)
def decoder(Decoder: type) -> None:
    """Match E[ids]·sqrt(d) + PE -> nn.TransformerDecoder(norm=LayerNorm); causality."""
    with _quiet():
        for seed, (dtype, pad_id) in enumerate(((torch.float64, 0), (torch.float32, 2))):
            reference = _torch_decoder(dtype)
            model, weight = _stack_like_reference(
                Decoder, "Decoder", reference, _load_decoder_layer, pad_id, dtype, 90 + seed
            )
            generator = _generator(100 + seed)
            if seed == 0:
                _expect_decoder_properties(model, reference, weight, pad_id)
            for tgt_lengths, lt, mem_lengths, ls in (([6, 2], 6, [4, 7], 7), ([5], 5, [3], 3)):
                ids = _ids(tgt_lengths, lt, pad_id, seed=110 + seed)
                memory = torch.randn(
                    len(tgt_lengths), ls, D_MODEL, generator=generator, dtype=dtype
                )
                memory_mask = _key_mask(mem_lengths, ls)
                with torch.no_grad():
                    expected = reference(
                        _embed(weight, ids),
                        memory,
                        tgt_mask=_future_blocked(lt),
                        tgt_key_padding_mask=ids == pad_id,
                        memory_key_padding_mask=~memory_mask[:, 0],
                    )
                    got = _output(model(ids, memory, memory_mask), "Decoder")
                expect_shape(got, expected.shape, "Decoder output")
                real = ids != pad_id
                expect_close(
                    got[real],
                    expected[real],
                    **STACK_TOLERANCE[dtype],
                    what=f"Decoder outputs at real target tokens ({dtype}, target "
                    f"lengths {tgt_lengths}, memory lengths {mem_lengths})",
                )
                expect_close(
                    got,
                    expected,
                    **STACK_TOLERANCE[dtype],
                    what=f"Decoder outputs at padded target positions ({dtype})",
                    hint="Combine the target padding mask with the causal mask "
                    "(logical and), as nn.TransformerDecoder does.",
                )
            with torch.no_grad():
                expected = reference(
                    _embed(weight, ids),
                    memory,
                    tgt_mask=_future_blocked(lt),
                    tgt_key_padding_mask=ids == pad_id,
                )
                expect_close(
                    _output(model(ids, memory), "Decoder"),
                    expected,
                    **STACK_TOLERANCE[dtype],
                    what=f"Decoder output with memory_mask=None ({dtype})",
                )
        # Causality: changing a future target token never changes earlier outputs.
        ids = _ids([7], 7, 2, seed=120)
        later = _change_tokens(ids, 4, pad_id=2, vocab=VOCAB)
        memory = torch.randn(1, 4, D_MODEL, generator=generator)
        with torch.no_grad():
            expect_close(
                model(later, memory)[:, :4],
                model(ids, memory)[:, :4],
                what="Decoder outputs at positions 0-3 after changing tokens 4-6",
                hint="Build the causal mask (make_causal_mask) and give it to every block.",
            )


# --- Exercise 5.7 ---------------------------------------------------------------------------


@exercise_check(
    "Exercise 5.7",
    "encoder-decoder Transformer",
    hint="encode: src_mask = padding mask of src_ids, memory = encoder(src_ids, src_mask); "
    "decode: output_projection(decoder(tgt_ids, memory, src_mask)); forward = decode(encode). "
    "Return raw logits (no softmax).",
)
def transformer(Transformer: type) -> None:
    """Match the same pieces assembled around nn.Transformer(norm_first=True)."""
    src_vocab, tgt_vocab, pad_id = VOCAB, VOCAB + 2, 0
    with _quiet():
        model = Transformer(src_vocab, tgt_vocab, D_MODEL, HEADS, D_FF, LAYERS, pad_id=pad_id)
        model = model.double()
        _randomize_(model, 130)
        model.eval()
        reference = nn.Transformer(
            D_MODEL,
            HEADS,
            LAYERS,
            LAYERS,
            D_FF,
            dropout=0.0,
            activation="relu",
            batch_first=True,
            norm_first=True,
            dtype=torch.float64,
        ).train()
        encoder_, decoder_ = (
            _attr(model, "encoder", "Transformer"),
            _attr(model, "decoder", "Transformer"),
        )
        for index, block in enumerate(_layers(encoder_, LAYERS, "Transformer.encoder")):
            _load_encoder_layer(reference.encoder.layers[index], block, f"encoder.layers[{index}]")
        for index, block in enumerate(_layers(decoder_, LAYERS, "Transformer.decoder")):
            _load_decoder_layer(reference.decoder.layers[index], block, f"decoder.layers[{index}]")
        _load_norm(reference.encoder.norm, encoder_, "norm", "Transformer.encoder")
        _load_norm(reference.decoder.norm, decoder_, "norm", "Transformer.decoder")
        projection = _attr(model, "output_projection", "Transformer")
        src_weight = _token_embedding(encoder_, "Transformer.encoder")
        tgt_weight = _token_embedding(decoder_, "Transformer.decoder")
        expect(
            tuple(getattr(projection, "weight", torch.empty(0)).shape) == (tgt_vocab, D_MODEL),
            f"output_projection should map d_model={D_MODEL} to tgt_vocab_size={tgt_vocab}.",
        )

        def expected_logits(src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            hidden = reference(
                _embed(src_weight, src),
                _embed(tgt_weight, tgt),
                tgt_mask=_future_blocked(tgt.shape[1]),
                src_key_padding_mask=src == pad_id,
                tgt_key_padding_mask=tgt == pad_id,
                memory_key_padding_mask=src == pad_id,
            )
            return hidden @ projection.weight.detach().T + projection.bias.detach()

        src = _ids([7, 4, 2], 7, pad_id, seed=140, vocab=src_vocab)
        tgt = _ids([5, 5, 3], 5, pad_id, seed=141, vocab=tgt_vocab)
        with torch.no_grad():
            expected = expected_logits(src, tgt)
            logits = _output(model(src, tgt), "Transformer")
            expect_shape(
                logits,
                (3, 5, tgt_vocab),
                "Transformer(src_ids, tgt_ids) logits",
                "Logits have shape (batch, target length, tgt_vocab_size).",
            )
            real = tgt != pad_id
            expect_close(
                logits[real],
                expected[real],
                **STACK_TOLERANCE[torch.float64],
                what="Transformer logits at real target tokens vs nn.Transformer "
                "(norm_first=True) with your weights",
            )
            expect_close(
                logits,
                expected,
                **STACK_TOLERANCE[torch.float64],
                what="Transformer logits (all positions)",
            )
            # encode/decode are what greedy decoding calls: they must agree with forward.
            encoded = model.encode(src)
            expect(
                isinstance(encoded, tuple) and len(encoded) == 2,
                "encode(src_ids) should return a pair (memory, src_mask).",
            )
            expect_close(
                _output(model.decode(tgt, *encoded), "decode"),
                logits,
                what="decode(tgt_ids, *encode(src_ids)) vs forward(src_ids, tgt_ids)",
            )
            # Source padding invariance; the source matters; causality end to end.
            padded = torch.cat([src, torch.full((3, 4), pad_id)], dim=1)
            expect_close(
                model(padded, tgt),
                logits,
                what="logits after appending 4 pad tokens to the source",
                hint="Give the source padding mask to the encoder and, as memory_mask, "
                "to the decoder.",
            )
            other = _ids([7, 4, 2], 7, pad_id, seed=142, vocab=src_vocab)
            expect(
                not torch.allclose(model(other, tgt), logits, atol=1e-4),
                "changing the source did not change the logits: the decoder ignores the "
                "encoder output.",
                "Pass the encoder's memory to the decoder.",
            )
            later = _change_tokens(tgt[:1], 3, pad_id=pad_id, vocab=tgt_vocab)
            expect_close(
                model(src[:1], later)[0, :3],
                logits[0, :3],
                what="logits at target positions 0-2 after changing tokens 3-4",
            )


# --- Exercise 5.8 ---------------------------------------------------------------------------


class _ReverseOracle(nn.Module):
    """A fake seq2seq model whose greedy output is the reversed source followed by EOS.

    It offers ``encode``/``decode`` like the notebook's Transformer and ``forward`` on top,
    and its logits depend on the whole prefix (so feeding back the wrong tokens shows).
    """

    def __init__(self, vocab: int, bos_id: int, eos_id: int, pad_id: int, noise_seed: int):
        super().__init__()
        self.vocab, self.bos_id, self.eos_id, self.pad_id = vocab, bos_id, eos_id, pad_id
        self.noise = torch.rand(64, vocab, generator=_generator(noise_seed))
        self.calls = 0
        self.calls_in_training = 0

    def encode(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return src_ids.clone(), (src_ids != self.pad_id)[:, None, :]

    def decode(
        self, tgt_ids: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.calls += 1
        self.calls_in_training += int(self.training)
        batch, length = tgt_ids.shape
        logits = self.noise[:length].expand(batch, length, self.vocab).clone()
        for b in range(batch):
            source = [t for t in memory[b].tolist() if t != self.pad_id][::-1]
            for t in range(length):
                # Position t predicts token t of the answer, unless the prefix went wrong
                # (then EOS at once), so a wrong feedback loop cannot reproduce the answer.
                prefix = tgt_ids[b, 1 : t + 1].tolist()
                ok = prefix == source[:t] and tgt_ids[b, 0].item() == self.bos_id
                target = source[t] if ok and t < len(source) else self.eos_id
                logits[b, t, target] += 5.0 + t
        return logits

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt_ids, *self.encode(src_ids))


def _reference_greedy(
    model: Callable, src: torch.Tensor, max_new: int, bos: int, eos: int, pad: int
) -> torch.Tensor:
    out = torch.full((src.shape[0], 1), bos, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_new):
        step = model(src, out)[:, -1].argmax(dim=-1)
        step = torch.where(done, torch.full_like(step, pad), step)
        out = torch.cat([out, step[:, None]], dim=1)
        done |= step == eos
        if bool(done.all()):
            break
    return out


@exercise_check(
    "Exercise 5.8",
    "greedy decoding",
    hint="Start from a column of BOS; repeat: logits of the LAST position, argmax, append; "
    "after a row emits EOS, append pad_id to it; stop when every row is done or after "
    "max_new_tokens steps.",
)
def greedy_decode(student_greedy_decode: Callable) -> None:
    """Compare with a reference greedy loop on fake models whose answers are known."""
    for seed, (bos, eos, pad) in enumerate(((1, 2, 0), (4, 7, 3))):
        oracle = _ReverseOracle(vocab=12, bos_id=bos, eos_id=eos, pad_id=pad, noise_seed=150 + seed)
        words = [[5, 6, 8, 9, 10], [9, 11], [8, 8, 11, 5]]
        src = torch.full((3, 5), pad, dtype=torch.long)
        for row, word in enumerate(words):
            src[row, : len(word)] = torch.tensor(word)
        # Enough room: stops as soon as all three rows have emitted EOS (after 6 steps).
        for max_new in (10, 3):
            oracle.eval()  # as the exercise calls it
            got = student_greedy_decode(oracle, src, max_new, bos_id=bos, eos_id=eos, pad_id=pad)
            expect(
                not oracle.training and oracle.calls_in_training == 0,
                "greedy_decode switched the model to training mode (model.train()): with "
                "dropout on, decoding is random and the model is left in the wrong mode.",
                "The model comes in eval mode; leave it so (calling model.eval() is fine, "
                "model.train() is not).",
            )
            expected = _reference_greedy(oracle, src, max_new, bos, eos, pad)
            expect(
                isinstance(got, torch.Tensor) and got.dtype == torch.long,
                "greedy_decode should return a LongTensor of token ids.",
            )
            expect(
                got.dim() == 2 and got.shape[0] == 3 and bool((got[:, 0] == bos).all()),
                f"the output should be (batch, 1 + steps) and start with bos_id={bos}; got "
                f"shape {tuple(got.shape)}, first column {got[:, 0].tolist() if got.dim() == 2 else '?'}.",
            )
            expect(
                tuple(got.shape) == tuple(expected.shape),
                f"with max_new_tokens={max_new}: output shape {tuple(got.shape)}, expected "
                f"{tuple(expected.shape)}. Expected rows {expected.tolist()}, got {got.tolist()}.",
                "Stop when every row has produced EOS or after max_new_tokens steps, whichever "
                "comes first.",
            )
            expect(
                torch.equal(got, expected),
                f"with max_new_tokens={max_new} (bos={bos}, eos={eos}, pad={pad}) the decoded "
                f"rows are {got.tolist()}, expected {expected.tolist()}.",
                "Take the argmax over the vocabulary of the LAST position's logits, append it, "
                "and fill a row with pad_id once it has produced EOS.",
            )
