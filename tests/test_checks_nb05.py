"""The checks of notebook 05 pass correct implementations and reject blank stubs and mistakes.

The correct implementations are the solution notebook's exports in course.nn; each mistake is
a subclass of them (the checks themselves never use course.nn). Besides the typical mistakes
(WRONG), FAMILIES holds, for each property that applies to notebook 05, a wrong
implementation that only that property catches (each was accepted by the checks before they
were rewritten); RIGHT holds right variants (einsum, loops, float64 inside, hand-written
LayerNorm, other mask constructions, the Annotated Transformer's greedy loop) that must pass.
Every check call is probed and replayed (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from course.checks import nb05 as check
from course.framework.check import FAILED, NOT_IMPLEMENTED, PASSED

# --- the correct implementations: the solution notebook's exports ---------------------------
# The checks compare with PyTorch's own layers, never with course.nn; the tests take course.nn
# as the known-good fixture and subclass it for each typical mistake below.
from course.nn import (  # noqa: E402
    Decoder,
    DecoderBlock,
    Encoder,
    EncoderBlock,
    FeedForward,
    PreNormResidual,
    Transformer,
    greedy_decode,
    make_causal_mask,
    make_padding_mask,
)


def with_blocks(stack_class: type, block_class: type) -> type:
    """``stack_class`` (Encoder or Decoder) whose layers are ``block_class`` instances."""

    class Stack(stack_class):
        def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, dropout=0.0,
                     max_len=512, pad_id=0):  # fmt: skip
            super().__init__(vocab_size, d_model, num_heads, d_ff, num_layers, dropout, max_len,
                             pad_id)  # fmt: skip
            self.layers = nn.ModuleList(
                block_class(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)
            )

    Stack.__name__ = f"{stack_class.__name__}Of{block_class.__name__}"
    return Stack


def with_stacks(encoder_class: type = Encoder, decoder_class: type = Decoder) -> type:
    """The Transformer of course.nn built from the given Encoder and Decoder classes."""

    class Model(Transformer):
        def __init__(self, src_vocab_size, tgt_vocab_size, d_model, num_heads, d_ff, num_layers,
                     dropout=0.0, max_len=512, pad_id=0):  # fmt: skip
            super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, d_ff,
                             num_layers, dropout, max_len, pad_id)  # fmt: skip
            sizes = (d_model, num_heads, d_ff, num_layers, dropout, max_len, pad_id)
            self.encoder = encoder_class(src_vocab_size, *sizes)
            self.decoder = decoder_class(tgt_vocab_size, *sizes)

    return Model


class DecoderWithTargetMask(Decoder):
    """course.nn's Decoder with the target mask in a method that the variants replace."""

    def target_mask(self, ids):
        return make_padding_mask(ids, self.pad_id) & make_causal_mask(ids.shape[1], ids.device)

    def forward(self, tgt_ids, memory, memory_mask=None):
        tgt_mask = self.target_mask(tgt_ids)
        x = self.pos(self.embed(tgt_ids))
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.norm(x)


# --- blank stubs ---------------------------------------------------------------------------


class StubModule(nn.Module):
    """What the exercise notebook holds before the student writes anything."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        raise NotImplementedError


class StubForward(EncoderBlock):
    """An exercise whose __init__ is given and whose forward is still the stub."""

    def forward(self, *args, **kwargs):
        raise NotImplementedError


class StubDecoderForward(DecoderBlock):
    def forward(self, *args, **kwargs):
        raise NotImplementedError


class StubResidualForward(PreNormResidual):
    def forward(self, x, sublayer):
        raise NotImplementedError


def stub_greedy(*args, **kwargs):
    raise NotImplementedError


# --- wrong implementations -----------------------------------------------------------------

# 5.1 FeedForward


class FFNNoActivation(FeedForward):
    def forward(self, x):
        return self.linear2(self.linear1(x))


class FFNActivationLast(FeedForward):
    def forward(self, x):
        return torch.relu(self.linear2(self.linear1(x)))


class FFNGelu(FeedForward):
    def forward(self, x):
        return self.linear2(nn.functional.gelu(self.linear1(x)))


class FFNWithResidual(FeedForward):
    def forward(self, x):
        return x + super().forward(x)


class FFNHiddenIsDModel(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_model, dropout)


class FFNNoDropout(FeedForward):
    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class FFNDropoutAfterSecondLinear(FeedForward):
    def forward(self, x):
        return self.dropout(self.linear2(torch.relu(self.linear1(x))))


class FFNMixesPositions(FeedForward):
    def forward(self, x):
        out = super().forward(x)
        return out + out.mean(dim=1, keepdim=True)


# 5.2 PreNormResidual


class PostNorm(PreNormResidual):
    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))


class ResidualAfterNorm(PreNormResidual):
    def forward(self, x, sublayer):
        h = self.norm(x)
        return h + self.dropout(sublayer(h))


class NoResidual(PreNormResidual):
    def forward(self, x, sublayer):
        return self.dropout(sublayer(self.norm(x)))


class NoNorm(PreNormResidual):
    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(x))


class DropoutOnEverything(PreNormResidual):
    def forward(self, x, sublayer):
        return self.dropout(x + sublayer(self.norm(x)))


# 5.3 EncoderBlock


class EncoderPostLN(EncoderBlock):
    def forward(self, x, mask=None):
        x = self.attn_residual.norm(x + self.self_attn(x, x, x, mask)[0])
        return self.ffn_residual.norm(x + self.ffn(x))


class EncoderResidualAfterNorm(EncoderBlock):
    """The residual added after the norm: the skip path carries LayerNorm(x)."""

    def forward(self, x, mask=None):
        h = self.attn_residual.norm(x)
        x = h + self.self_attn(h, h, h, mask)[0]
        h = self.ffn_residual.norm(x)
        return h + self.ffn(h)


class EncoderMaskIgnored(EncoderBlock):
    def forward(self, x, mask=None):
        return super().forward(x, None)


class EncoderMaskInverted(EncoderBlock):
    """Reads True as blocked: the course's mask inverted before attention."""

    def forward(self, x, mask=None):
        return super().forward(x, None if mask is None else ~mask)


class EncoderSharedNorm(EncoderBlock):
    def forward(self, x, mask=None):
        x = self.attn_residual(x, lambda h: self.self_attn(h, h, h, mask)[0])
        return self.attn_residual(x, self.ffn)


class EncoderNoFFNResidual(EncoderBlock):
    def forward(self, x, mask=None):
        x = self.attn_residual(x, lambda h: self.self_attn(h, h, h, mask)[0])
        return self.ffn(self.ffn_residual.norm(x))


class EncoderReturnsTuple(EncoderBlock):
    def forward(self, x, mask=None):
        return super().forward(x, mask), None


# 5.4 Encoder


class EncoderMissingFinalNorm(Encoder):
    def forward(self, ids, mask=None):
        if mask is None:
            mask = make_padding_mask(ids, self.pad_id)
        x = self.pos(self.embed(ids))
        for layer in self.layers:
            x = layer(x, mask)
        return x


class EncoderWithoutNormAttribute(Encoder):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        del self.norm

    def forward(self, ids, mask=None):
        return EncoderMissingFinalNorm.forward(self, ids, mask)


class EncoderNoPositions(Encoder):
    def forward(self, ids, mask=None):
        if mask is None:
            mask = make_padding_mask(ids, self.pad_id)
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class EncoderUnscaledEmbedding(Encoder):
    def forward(self, ids, mask=None):
        if mask is None:
            mask = make_padding_mask(ids, self.pad_id)
        x = self.pos(self.embed.embedding(ids))
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class EncoderNoPaddingMask(Encoder):
    def forward(self, ids, mask=None):
        x = self.pos(self.embed(ids))
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class EncoderPadIdZero(Encoder):
    def forward(self, ids, mask=None):
        return super().forward(ids, make_padding_mask(ids, 0) if mask is None else mask)


class EncoderIgnoresGivenMask(Encoder):
    def forward(self, ids, mask=None):
        return super().forward(ids, None)


class EncoderNormEveryBlock(Encoder):
    def forward(self, ids, mask=None):
        if mask is None:
            mask = make_padding_mask(ids, self.pad_id)
        x = self.pos(self.embed(ids))
        for layer in self.layers:
            x = self.norm(layer(x, mask))
        return x


class EncoderLearnedPositions(Encoder):
    def __init__(self, vocab_size, d_model, *args, max_len=512, **kwargs):
        super().__init__(vocab_size, d_model, *args, max_len=max_len, **kwargs)
        self.pos = nn.Embedding(max_len, d_model)

    def forward(self, ids, mask=None):
        if mask is None:
            mask = make_padding_mask(ids, self.pad_id)
        x = self.embed(ids) + self.pos.weight[: ids.shape[1]]
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


EncoderOfPostLNBlocks = with_blocks(Encoder, EncoderPostLN)


# 5.5 DecoderBlock


class DecoderNoCausalMask(DecoderBlock):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return super().forward(x, memory, None, memory_mask)


class CrossAttentionOnDecoderStates(DecoderBlock):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.self_attn_residual(x, lambda h: self.self_attn(h, h, h, tgt_mask)[0])
        x = self.cross_attn_residual(x, lambda h: self.cross_attn(h, h, h, tgt_mask)[0])
        return self.ffn_residual(x, self.ffn)


class CrossAttentionKeysFromDecoder(DecoderBlock):
    """Decoder states as keys, memory as values (crashes when the lengths differ)."""

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.self_attn_residual(x, lambda h: self.self_attn(h, h, h, tgt_mask)[0])
        x = self.cross_attn_residual(x, lambda h: self.cross_attn(h, h, memory, memory_mask)[0])
        return self.ffn_residual(x, self.ffn)


class CrossAttentionQueriesFromMemory(DecoderBlock):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.self_attn_residual(x, lambda h: self.self_attn(h, h, h, tgt_mask)[0])
        x = self.cross_attn_residual(
            x, lambda h: self.cross_attn(memory, h, h, None)[0][:, : h.shape[1]]
        )
        return self.ffn_residual(x, self.ffn)


class DecoderMemoryMaskIgnored(DecoderBlock):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return super().forward(x, memory, tgt_mask, None)


class DecoderNormedMemory(DecoderBlock):
    """Normalises the memory with the cross-attention's norm (PyTorch does not)."""

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.self_attn_residual(x, lambda h: self.self_attn(h, h, h, tgt_mask)[0])
        m = self.cross_attn_residual.norm(memory)
        x = self.cross_attn_residual(x, lambda h: self.cross_attn(h, m, m, memory_mask)[0])
        return self.ffn_residual(x, self.ffn)


class DecoderCrossBeforeSelf(DecoderBlock):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.cross_attn_residual(
            x, lambda h: self.cross_attn(h, memory, memory, memory_mask)[0]
        )
        x = self.self_attn_residual(x, lambda h: self.self_attn(h, h, h, tgt_mask)[0])
        return self.ffn_residual(x, self.ffn)


class DecoderPostLN(DecoderBlock):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.self_attn_residual.norm(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.cross_attn_residual.norm(x + self.cross_attn(x, memory, memory, memory_mask)[0])
        return self.ffn_residual.norm(x + self.ffn(x))


class DecoderResidualAfterNorm(DecoderBlock):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        h = self.self_attn_residual.norm(x)
        x = h + self.self_attn(h, h, h, tgt_mask)[0]
        x = self.cross_attn_residual(
            x, lambda h: self.cross_attn(h, memory, memory, memory_mask)[0]
        )
        return self.ffn_residual(x, self.ffn)


# 5.6 Decoder


class DecoderStackNoCausalMask(DecoderWithTargetMask):
    def target_mask(self, ids):
        return make_padding_mask(ids, self.pad_id)


class DecoderStackOnlyCausal(DecoderWithTargetMask):
    def target_mask(self, ids):
        return make_causal_mask(ids.shape[1])


class DecoderStackMissingFinalNorm(DecoderWithTargetMask):
    def forward(self, tgt_ids, memory, memory_mask=None):
        tgt_mask = self.target_mask(tgt_ids)
        x = self.pos(self.embed(tgt_ids))
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x


class DecoderStackNoPositions(DecoderWithTargetMask):
    def forward(self, tgt_ids, memory, memory_mask=None):
        tgt_mask = self.target_mask(tgt_ids)
        x = self.embed(tgt_ids)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.norm(x)


class DecoderStackDropsMemoryMask(Decoder):
    def forward(self, tgt_ids, memory, memory_mask=None):
        return super().forward(tgt_ids, memory, None)


DecoderStackCrossOnDecoderStates = with_blocks(Decoder, CrossAttentionOnDecoderStates)


DecoderStackOfBlocksWithoutCausalMask = with_blocks(Decoder, DecoderNoCausalMask)


# 5.7 Transformer


class TransformerNoMemoryMask(Transformer):
    def forward(self, src_ids, tgt_ids):
        memory, _ = self.encode(src_ids)
        return self.decode(tgt_ids, memory, None)


class TransformerSoftmax(Transformer):
    def forward(self, src_ids, tgt_ids):
        return torch.softmax(super().forward(src_ids, tgt_ids), dim=-1)


class TransformerEncoderGetsNoMask(Transformer):
    def encode(self, src_ids):
        src_mask = make_padding_mask(src_ids, self.pad_id)
        ones = torch.ones_like(src_mask)
        return self.encoder(src_ids, ones), src_mask


TransformerMissingFinalNorms = with_stacks(EncoderMissingFinalNorm, DecoderStackMissingFinalNorm)


TransformerDecoderWithoutCausalMask = with_stacks(decoder_class=DecoderStackNoCausalMask)


TransformerCrossOnDecoderStates = with_stacks(decoder_class=DecoderStackCrossOnDecoderStates)


class TransformerIgnoresSource(Transformer):
    def decode(self, tgt_ids, memory, memory_mask=None):
        return self.output_projection(self.decoder(tgt_ids, torch.zeros_like(memory), None))


class TransformerEncodeInconsistent(Transformer):
    """forward is right, but encode (what greedy decoding uses) forgets the source mask."""

    def encode(self, src_ids):
        memory, _ = super().encode(src_ids)
        return memory, None

    def forward(self, src_ids, tgt_ids):
        return Transformer.decode(self, tgt_ids, *Transformer.encode(self, src_ids))


# 5.8 greedy_decode


@torch.no_grad()
def greedy_first_position(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    memory, memory_mask = model.encode(src_ids)
    out = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long)
    done = torch.zeros(src_ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        step = model.decode(out, memory, memory_mask)[:, 0].argmax(dim=-1)
        step = step.masked_fill(done, pad_id)
        out = torch.cat([out, step[:, None]], dim=1)
        done |= step == eos_id
        if done.all():
            break
    return out


@torch.no_grad()
def greedy_ignores_eos(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    out = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long)
    for _ in range(max_new_tokens):
        step = model(src_ids, out)[:, -1].argmax(dim=-1)
        out = torch.cat([out, step[:, None]], dim=1)
    return out


@torch.no_grad()
def greedy_no_padding_after_eos(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    out = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long)
    done = torch.zeros(src_ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        step = model(src_ids, out)[:, -1].argmax(dim=-1)
        out = torch.cat([out, step[:, None]], dim=1)
        done |= step == eos_id
        if done.all():
            break
    return out


@torch.no_grad()
def greedy_stops_at_first_eos(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    out = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long)
    for _ in range(max_new_tokens):
        step = model(src_ids, out)[:, -1].argmax(dim=-1)
        out = torch.cat([out, step[:, None]], dim=1)
        if (step == eos_id).any():
            break
    return out


@torch.no_grad()
def greedy_without_bos(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    return greedy_decode(model, src_ids, max_new_tokens, bos_id, eos_id, pad_id)[:, 1:]


@torch.no_grad()
def greedy_hardcoded_ids(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    return greedy_decode(model, src_ids, max_new_tokens)


@torch.no_grad()
def greedy_one_step_too_many(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    return greedy_decode(model, src_ids, max_new_tokens + 1, bos_id, eos_id, pad_id)


# --- more mistakes ---------------------------------------------------------------------------


class EncoderOneBlockRepeated(Encoder):
    """One block object repeated num_layers times: the layers share their weights."""

    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, dropout=0.0,
                 max_len=512, pad_id=0):  # fmt: skip
        super().__init__(vocab_size, d_model, num_heads, d_ff, num_layers, dropout, max_len,
                         pad_id)  # fmt: skip
        self.layers = nn.ModuleList([self.layers[0]] * num_layers)


def greedy_in_train_mode(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    model.train()
    return greedy_decode(model, src_ids, max_new_tokens, bos_id, eos_id, pad_id)


class TransformerDecoderOnSourceVocabulary(Transformer):
    """The decoder built with src_vocab_size: target ids beyond it index past the table."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, num_heads, d_ff, num_layers,
                 dropout=0.0, max_len=512, pad_id=0):  # fmt: skip
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, d_ff, num_layers,
                         dropout, max_len, pad_id)  # fmt: skip
        self.decoder = Decoder(src_vocab_size, d_model, num_heads, d_ff, num_layers, dropout,
                               max_len, pad_id)  # fmt: skip


# --- one property each: wrong implementations only that property catches ----------

# 1. inputs untouched


class ResidualAddsInPlace(PreNormResidual):
    """Adds the sub-layer's output into the caller's x (x += ...)."""

    def forward(self, x, sublayer):
        x += self.dropout(sublayer(self.norm(x)))
        return x


# 2. device


class DecoderCausalMaskOnTheCpu(DecoderWithTargetMask):
    """make_causal_mask(L) without the device: works on the CPU only."""

    def target_mask(self, ids):
        return make_padding_mask(ids, self.pad_id) & make_causal_mask(ids.shape[1])


# 3. training and eval mode: dropout wired through every constructor


class EncoderBlocksWithoutDropout(Encoder):
    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, dropout=0.0,
                 max_len=512, pad_id=0):  # fmt: skip
        super().__init__(vocab_size, d_model, num_heads, d_ff, num_layers, dropout, max_len,
                         pad_id)  # fmt: skip
        self.layers = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff) for _ in range(num_layers)
        )


class DecoderPositionsWithoutDropout(Decoder):
    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, dropout=0.0,
                 max_len=512, pad_id=0):  # fmt: skip
        super().__init__(vocab_size, d_model, num_heads, d_ff, num_layers, dropout, max_len,
                         pad_id)  # fmt: skip
        self.pos = type(self.pos)(d_model, max_len)


class TransformerWithoutDropout(Transformer):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, num_heads, d_ff, num_layers,
                 dropout=0.0, max_len=512, pad_id=0):  # fmt: skip
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, d_ff, num_layers,
                         0.0, max_len, pad_id)  # fmt: skip


# 4. gradients


class DecoderBlockDetachedMemory(DecoderBlock):
    """memory.detach(): the outputs are right, the encoder never learns from the decoder."""

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return super().forward(x, memory.detach(), tgt_mask, memory_mask)


class EncoderEmbeddingWithoutPaddingIdx(Encoder):
    """TokenEmbedding without padding_idx: the pad row is trained."""

    def __init__(self, vocab_size, d_model, *args, **kwargs):
        super().__init__(vocab_size, d_model, *args, **kwargs)
        self.embed = type(self.embed)(vocab_size, d_model)


# 5. constructor arguments honoured


class EncoderFourHeads(Encoder):
    """num_heads hard-coded to 4 (the notebook's value)."""

    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, dropout=0.0,
                 max_len=512, pad_id=0):  # fmt: skip
        super().__init__(vocab_size, d_model, num_heads, d_ff, num_layers, dropout, max_len,
                         pad_id)  # fmt: skip
        self.layers = nn.ModuleList(
            EncoderBlock(d_model, 4, d_ff, dropout) for _ in range(num_layers)
        )


class TransformerDecoderDefaultPad(Transformer):
    """The decoder built without pad_id (so with the default 0)."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, num_heads, d_ff, num_layers,
                 dropout=0.0, max_len=512, pad_id=0):  # fmt: skip
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, d_ff, num_layers,
                         dropout, max_len, pad_id)  # fmt: skip
        self.decoder = Decoder(tgt_vocab_size, d_model, num_heads, d_ff, num_layers, dropout,
                               max_len)  # fmt: skip


# 7. shapes


class FeedForwardThreeAxesOnly(FeedForward):
    """Flattens (B, L, d) by hand: any other number of leading axes fails."""

    def forward(self, x):
        batch, length, d_model = x.shape
        h = x.reshape(batch * length, d_model)
        return super().forward(h).reshape(batch, length, d_model)


# 8. global state


def greedy_switches_grad_off(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    torch.set_grad_enabled(False)
    return greedy_decode(model, src_ids, max_new_tokens, bos_id, eos_id, pad_id)


# 9. behaviour the contract states


@torch.no_grad()
def greedy_without_memory_mask(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    memory, _ = model.encode(src_ids)
    out = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long)
    done = torch.zeros(src_ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        step = model.decode(out, memory)[:, -1].argmax(dim=-1).masked_fill(done, pad_id)
        out = torch.cat([out, step[:, None]], dim=1)
        done |= step == eos_id
        if done.all():
            break
    return out


@torch.no_grad()
def greedy_encodes_every_step(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    """Right tokens, but forward (encoder and decoder) at every step."""
    out = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long)
    done = torch.zeros(src_ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        step = model(src_ids, out)[:, -1].argmax(dim=-1).masked_fill(done, pad_id)
        out = torch.cat([out, step[:, None]], dim=1)
        done |= step == eos_id
        if done.all():
            break
    return out


# (check, family, wrong implementation, a phrase the message must contain)
FAMILIES = [
    ("pre_norm_residual", "inputs untouched", ResidualAddsInPlace, "inputs untouched"),
    ("decoder", "device", DecoderCausalMaskOnTheCpu, "the property violated: device"),
    ("encoder", "dropout", EncoderBlocksWithoutDropout, "dropout wired through every"),
    ("decoder", "dropout", DecoderPositionsWithoutDropout, "dropout wired through every"),
    ("transformer", "dropout", TransformerWithoutDropout, "dropout wired through every"),
    ("decoder_block", "gradients", DecoderBlockDetachedMemory, "no gradient reaches `memory`"),
    (
        "encoder",
        "gradients",
        EncoderEmbeddingWithoutPaddingIdx,
        "the gradient with respect to `embed.embedding.weight`",
    ),
    (
        "encoder",
        "constructor arguments",
        EncoderFourHeads,
        "Encoder(13, d_model=8, num_heads=2, d_ff=12, num_layers=1)",
    ),
    (
        "transformer",
        "constructor arguments",
        TransformerDecoderDefaultPad,
        "pad_id=2",
    ),
    ("feed_forward", "shapes", FeedForwardThreeAxesOnly, "input of shape (4, 16)"),
    ("greedy_decode", "global state", greedy_switches_grad_off, "global state unchanged"),
    ("greedy_decode", "contract", greedy_without_memory_mask, "without the memory_mask"),
    ("greedy_decode", "contract", greedy_encodes_every_step, "source rows for a batch of 3"),
]


# --- right variants ------------------------------------------------------------------------


class FeedForwardEinsum(FeedForward):
    def forward(self, x):
        h = torch.einsum("...d,fd->...f", x, self.linear1.weight) + self.linear1.bias
        h = self.dropout(h.clamp(min=0))
        return torch.einsum("...f,df->...d", h, self.linear2.weight) + self.linear2.bias


class FeedForwardFloat64Inside(FeedForward):
    def forward(self, x):
        h = F.linear(x.double(), self.linear1.weight.double(), self.linear1.bias.double())
        h = self.dropout(F.relu(h))
        out = F.linear(h, self.linear2.weight.double(), self.linear2.bias.double())
        return out.to(x.dtype)


class ResidualFunctionalNorm(PreNormResidual):
    def forward(self, x, sublayer):
        normed = F.layer_norm(x, x.shape[-1:], self.norm.weight, self.norm.bias, self.norm.eps)
        return x + self.dropout(sublayer(normed))


class EncoderInlineMask(Encoder):
    def forward(self, ids, mask=None):
        mask = (ids != self.pad_id).unsqueeze(-2) if mask is None else mask
        h = self.pos(self.embed(ids))
        for block in self.layers:
            h = block(h, mask)
        return self.norm(h)


class DecoderTriuMask(DecoderWithTargetMask):
    def target_mask(self, ids):
        length = ids.shape[1]
        future = torch.triu(torch.ones(length, length, dtype=torch.bool, device=ids.device), 1)
        return (ids != self.pad_id)[:, None, :] & ~future


class TransformerWithoutDecode(Transformer):
    def forward(self, src_ids, tgt_ids):
        src_mask = make_padding_mask(src_ids, self.pad_id)
        memory = self.encoder(src_ids, src_mask)
        return self.output_projection(self.decoder(tgt_ids, memory, src_mask))


class TransformerTiedProjection(Transformer):
    """The paper's weight tying (section 3.4): the projection shares the target embedding."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.output_projection.weight = self.decoder.embed.embedding.weight


def greedy_with_lists(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    with torch.no_grad():
        memory, memory_mask = model.encode(src_ids)
        rows = [[bos_id] for _ in range(src_ids.shape[0])]
        finished = [False] * len(rows)
        for _ in range(max_new_tokens):
            ids = torch.tensor(rows, device=src_ids.device)  # on the model's device
            logits = model.decode(ids, memory, memory_mask=memory_mask)
            for b, token in enumerate(logits[:, -1, :].argmax(-1).tolist()):
                rows[b].append(pad_id if finished[b] else token)
                finished[b] = finished[b] or token == eos_id
            if all(finished):
                break
        return torch.tensor(rows, dtype=torch.long, device=src_ids.device)


def annotated_greedy(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    """The Annotated Transformer's greedy_decode (one sentence at a time, ys grown with
    torch.cat), glued to this interface: a loop over the batch, EOS and padding added."""
    rows = []
    for b in range(src_ids.shape[0]):
        memory, src_mask = model.encode(src_ids[b : b + 1])
        ys = torch.zeros(1, 1).fill_(bos_id).type_as(src_ids)
        for _ in range(max_new_tokens):
            prob = model.decode(ys, memory, src_mask)[:, -1]
            _, next_word = torch.max(prob, dim=1)
            ys = torch.cat([ys, torch.zeros(1, 1).type_as(src_ids).fill_(next_word.item())], dim=1)
            if next_word.item() == eos_id:
                break
        rows.append(ys[0])
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long, device=src_ids.device)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out


class ExactHandWrittenLayerNorm(nn.Module):
    """Right, written by hand: biased variance, eps inside the square root."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        variance = x.var(-1, keepdim=True, unbiased=False)
        return self.a_2 * (x - mean) / torch.sqrt(variance + self.eps) + self.b_2


class AnnotatedLayerNorm(ExactHandWrittenLayerNorm):
    """The Annotated Transformer's norm: unbiased std, eps added to the std (another function)."""

    def forward(self, x):
        mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


def with_norms(cls: type, paths: tuple[str, ...], norm: type) -> type:
    class Variant(cls):
        def __init__(self, d_model, *args, **kwargs):
            super().__init__(d_model, *args, **kwargs)
            for path in paths:
                owner, _, name = path.rpartition(".")
                parent = self.get_submodule(owner) if owner else self
                setattr(parent, name, norm(d_model))

    Variant.__name__ = f"{cls.__name__}With{norm.__name__}"
    return Variant


ENCODER_NORMS = ("attn_residual.norm", "ffn_residual.norm")
DECODER_NORMS = ("self_attn_residual.norm", "cross_attn_residual.norm", "ffn_residual.norm")

RIGHT = [
    ("feed_forward", FeedForwardEinsum),
    ("feed_forward", FeedForwardFloat64Inside),
    ("pre_norm_residual", ResidualFunctionalNorm),
    ("encoder_block", with_norms(EncoderBlock, ENCODER_NORMS, ExactHandWrittenLayerNorm)),
    ("decoder_block", with_norms(DecoderBlock, DECODER_NORMS, ExactHandWrittenLayerNorm)),
    ("encoder", EncoderInlineMask),
    ("decoder", DecoderTriuMask),
    ("transformer", TransformerWithoutDecode),
    ("transformer", TransformerTiedProjection),
    ("greedy_decode", greedy_with_lists),
    ("greedy_decode", annotated_greedy),
]


# --- the tests -----------------------------------------------------------------------------


CASES: dict[str, tuple[Callable, object, dict[str, object]]] = {
    "feed_forward": (
        check.feed_forward,
        FeedForward,
        {
            "no activation": FFNNoActivation,
            "activation after the second linear": FFNActivationLast,
            "GELU instead of ReLU": FFNGelu,
            "residual inside the FFN": FFNWithResidual,
            "hidden size d_model instead of d_ff": FFNHiddenIsDModel,
            "dropout missing": FFNNoDropout,
            "mixes positions": FFNMixesPositions,
            "dropout after the second linear": FFNDropoutAfterSecondLinear,
        },
    ),
    "pre_norm_residual": (
        check.pre_norm_residual,
        PreNormResidual,
        {
            "post-LN": PostNorm,
            "residual added after the norm": ResidualAfterNorm,
            "no residual": NoResidual,
            "no norm": NoNorm,
            "dropout on the residual path too": DropoutOnEverything,
            "Annotated Transformer's norm": with_norms(
                PreNormResidual, ("norm",), AnnotatedLayerNorm
            ),
        },
    ),
    "encoder_block": (
        check.encoder_block,
        EncoderBlock,
        {
            "post-LN block": EncoderPostLN,
            "residual added after the norm": EncoderResidualAfterNorm,
            "padding mask ignored": EncoderMaskIgnored,
            "mask inverted": EncoderMaskInverted,
            "one norm shared by both sub-layers": EncoderSharedNorm,
            "no residual around the FFN": EncoderNoFFNResidual,
            "returns a tuple": EncoderReturnsTuple,
            "Annotated Transformer's norm": with_norms(
                EncoderBlock, ENCODER_NORMS, AnnotatedLayerNorm
            ),
        },
    ),
    "encoder": (
        check.encoder,
        Encoder,
        {
            "missing final norm": EncoderMissingFinalNorm,
            "no final norm attribute": EncoderWithoutNormAttribute,
            "no positional encoding": EncoderNoPositions,
            "embedding not scaled by sqrt(d_model)": EncoderUnscaledEmbedding,
            "padding mask not built": EncoderNoPaddingMask,
            "pad id hard-coded to 0": EncoderPadIdZero,
            "explicit mask ignored": EncoderIgnoresGivenMask,
            "final norm after every block": EncoderNormEveryBlock,
            "learned positions": EncoderLearnedPositions,
            "post-LN blocks": EncoderOfPostLNBlocks,
            "one block repeated": EncoderOneBlockRepeated,
        },
    ),
    "decoder_block": (
        check.decoder_block,
        DecoderBlock,
        {
            "no causal mask": DecoderNoCausalMask,
            "cross-attention fed the decoder states": CrossAttentionOnDecoderStates,
            "cross-attention keys from the decoder": CrossAttentionKeysFromDecoder,
            "cross-attention queries from the memory": CrossAttentionQueriesFromMemory,
            "memory mask ignored": DecoderMemoryMaskIgnored,
            "memory normalised in the block": DecoderNormedMemory,
            "cross-attention before self-attention": DecoderCrossBeforeSelf,
            "post-LN block": DecoderPostLN,
            "residual added after the norm": DecoderResidualAfterNorm,
            "Annotated Transformer's norm": with_norms(
                DecoderBlock, DECODER_NORMS, AnnotatedLayerNorm
            ),
        },
    ),
    "decoder": (
        check.decoder,
        Decoder,
        {
            "no causal mask": DecoderStackNoCausalMask,
            "no target padding mask": DecoderStackOnlyCausal,
            "missing final norm": DecoderStackMissingFinalNorm,
            "no positional encoding": DecoderStackNoPositions,
            "memory mask dropped": DecoderStackDropsMemoryMask,
            "cross-attention fed the decoder states": DecoderStackCrossOnDecoderStates,
            "blocks ignore the causal mask": DecoderStackOfBlocksWithoutCausalMask,
        },
    ),
    "transformer": (
        check.transformer,
        Transformer,
        {
            "source padding mask not given to the decoder": TransformerNoMemoryMask,
            "returns probabilities": TransformerSoftmax,
            "encoder gets no padding mask": TransformerEncoderGetsNoMask,
            "missing final norms": TransformerMissingFinalNorms,
            "decoder without the causal mask": TransformerDecoderWithoutCausalMask,
            "cross-attention fed the decoder states": TransformerCrossOnDecoderStates,
            "source ignored": TransformerIgnoresSource,
            "encode/decode disagree with forward": TransformerEncodeInconsistent,
            "decoder on the source vocabulary": TransformerDecoderOnSourceVocabulary,
        },
    ),
    "greedy_decode": (
        check.greedy_decode,
        greedy_decode,
        {
            "logits of the first position": greedy_first_position,
            "ignores EOS": greedy_ignores_eos,
            "no padding after EOS": greedy_no_padding_after_eos,
            "stops at the first EOS in the batch": greedy_stops_at_first_eos,
            "output without BOS": greedy_without_bos,
            "special ids hard-coded": greedy_hardcoded_ids,
            "one step too many": greedy_one_step_too_many,
            "switches the model to train mode": greedy_in_train_mode,
        },
    ),
}

STUBS = {
    "feed_forward": StubModule,
    "pre_norm_residual": StubResidualForward,
    "encoder_block": StubForward,
    "encoder": StubModule,
    "decoder_block": StubDecoderForward,
    "decoder": StubModule,
    "transformer": StubModule,
    "greedy_decode": stub_greedy,
}

WRONG = [
    pytest.param(name, wrong, id=f"{name}-{label}")
    for name, (_, _, wrongs) in CASES.items()
    for label, wrong in wrongs.items()
]


@pytest.mark.parametrize("name", list(CASES))
def test_correct_implementation_passes(name):
    check_fn, correct, _ = CASES[name]
    result = check_fn(correct, raise_on_failure=False)
    assert result.status == PASSED, result.report()


@pytest.mark.parametrize("name", list(CASES))
def test_blank_stub_is_not_implemented(name):
    check_fn, _, _ = CASES[name]
    result = check_fn(STUBS[name], raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED, result.report()


@pytest.mark.parametrize(("name", "wrong"), WRONG)
def test_wrong_implementation_is_rejected(name, wrong):
    check_fn = CASES[name][0]
    result = check_fn(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.report()
    assert result.message  # says what is wrong


@pytest.mark.parametrize(
    ("name", "wrong", "words"),
    [
        pytest.param(n, w, words, id=f"{n}-{family}-{w.__name__}")
        for n, family, w, words in FAMILIES
    ],
)
def test_each_property_catches_its_family(name, wrong, words):
    result = CASES[name][0](wrong, raise_on_failure=False)
    assert result.status == FAILED, result.report()
    assert words in result.message, result.report()


@pytest.mark.parametrize(
    ("name", "variant"),
    [pytest.param(n, v, id=f"{n}-{v.__name__}", marks=[]) for n, v in RIGHT],
)
def test_right_variant_passes(name, variant):
    result = CASES[name][0](variant, raise_on_failure=False)
    assert result.status == PASSED, result.report()


def test_checks_leave_the_global_random_stream_alone():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    check.encoder_block(EncoderBlock, raise_on_failure=False)
    assert torch.equal(torch.rand(3), before)


@pytest.mark.parametrize(
    ("name", "label", "words"),
    [
        ("feed_forward", "dropout after the second linear", "a dropout acts on the output"),
        (
            "feed_forward",
            "hidden size d_model instead of d_ff",
            "has shape (16, 16), expected (32, 16)",
        ),
        ("pre_norm_residual", "dropout on the residual path too", "dropout in its place"),
        ("pre_norm_residual", "post-LN", "gives what post-LN"),
        ("pre_norm_residual", "residual added after the norm", "LayerNorm(x) on the residual path"),
        ("encoder_block", "padding mask ignored", "padding invariance"),
        ("encoder_block", "returns a tuple", "returned a tuple"),
        ("encoder_block", "mask inverted", "gives what the mask inverted (True taken as blocked)"),
        ("encoder", "one block repeated", "gives what one block shared by every layer"),
        ("encoder", "padding mask not built", "padding invariance"),
        ("encoder", "no final norm attribute", "has no trainable parameter `norm.bias`"),
        ("decoder_block", "no causal mask", "causality"),
        ("decoder_block", "memory mask ignored", "padding invariance"),
        ("decoder", "no causal mask", "causality"),
        ("decoder", "memory mask dropped", "padding invariance"),
        ("transformer", "source padding mask not given to the decoder", "padding invariance"),
        ("transformer", "decoder without the causal mask", "causality"),
        (
            "transformer",
            "decoder on the source vocabulary",
            "`decoder.embed.embedding.weight` has shape (11, 16), expected (13, 16)",
        ),
        ("greedy_decode", "switches the model to train mode", "switched the model to training"),
    ],
)
def test_mistake_is_named(name, label, words):
    check_fn, _, wrongs = CASES[name]
    result = check_fn(wrongs[label], raise_on_failure=False)
    assert words in result.message, result.report()


def test_the_decoder_on_the_source_vocabulary_is_said_in_the_students_terms():
    """No IndexError quoting a line of the check's own reference code."""
    result = check.transformer(TransformerDecoderOnSourceVocabulary, raise_on_failure=False)
    assert "`decoder.embed.embedding.weight` has shape (11, 16)" in result.message, result.report()
    assert "IndexError" not in result.message


@pytest.mark.parametrize("name", list(CASES))
def test_hints_point_at_the_principle_not_the_line(name):
    """No hint holds a finished line of code."""
    hint = CASES[name][0].hint
    for code in ("lambda", "self.", "[0]", "= ", "argmax(", "torch."):
        assert code not in hint, f"{name}: {hint}"


# --- wrong implementations by family of mistake, written independently -------------------
# Each breaks one sentence of its exercise's text; RIGHT_30 are canonical code of the field
# glued at the interface. (Family 5, statistics, has no exercise in notebook 05: nothing here
# draws at random but dropout, whose place the dropout=1.0 property decides exactly.)


def greedy_returns_list(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    return greedy_decode(model, src_ids, max_new_tokens, bos_id, eos_id, pad_id).tolist()


def greedy_returns_int32(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    return greedy_decode(model, src_ids, max_new_tokens, bos_id, eos_id, pad_id).int()


def greedy_returns_numpy(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    return greedy_decode(model, src_ids, max_new_tokens, bos_id, eos_id, pad_id).numpy()


class TransformerFloatMask(Transformer):
    """encode returns the padding mask as 0./1. floats instead of booleans."""

    def encode(self, src_ids):
        memory, mask = super().encode(src_ids)
        return memory, mask.float()

    def forward(self, src_ids, tgt_ids):
        memory, mask = super().encode(src_ids)
        return self.decode(tgt_ids, memory, mask)


class EncoderMaskThroughLists(Encoder):
    """Builds the default mask from Python lists: a CPU tensor whatever the ids' device."""

    def forward(self, ids, mask=None):
        if mask is None:
            mask = torch.tensor((ids != self.pad_id).tolist())[:, None, :]
        return super().forward(ids, mask)


class FFNManualDropoutOnTheCpu(FeedForward):
    """Its own dropout mask in training mode, drawn on the CPU."""

    def forward(self, x):
        h = torch.relu(self.linear1(x))
        p = self.dropout.p
        if self.training and p > 0:
            keep = (torch.rand(h.shape) >= p).to(h.dtype)
            h = h * keep / (1 - p) if p < 1 else h * 0
        return self.linear2(h)


def greedy_done_on_the_cpu(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    memory, memory_mask = model.encode(src_ids)
    out = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long, device=src_ids.device)
    done = torch.zeros(src_ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        step = model.decode(out, memory, memory_mask)[:, -1].argmax(-1)
        step = step.masked_fill(done, pad_id)
        out = torch.cat([out, step[:, None]], dim=1)
        done = done | (step == eos_id)
        if bool(done.all()):
            break
    return out


class DecoderPaddingOnlyWhenPresent(DecoderWithTargetMask):
    """Adds the padding mask only when a pad token is present, through a CPU tensor."""

    def target_mask(self, ids):
        causal = make_causal_mask(ids.shape[1], ids.device)
        if bool((ids == self.pad_id).any()):
            return causal & torch.as_tensor((ids != self.pad_id).cpu().numpy())[:, None, :]
        return causal[None]


class EncoderBlockMaskRequired(EncoderBlock):
    def forward(self, x, mask):
        return super().forward(x, mask)


class EncoderMaxLenBeforeDropout(Encoder):
    """max_len and dropout in the other order: fine by keyword, wrong positionally."""

    def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, max_len=512,
                 dropout=0.0, pad_id=0):  # fmt: skip
        super().__init__(vocab_size, d_model, num_heads, d_ff, num_layers, dropout, max_len,
                         pad_id)  # fmt: skip


class DecoderBlockMasksSwapped(DecoderBlock):
    def forward(self, x, memory, memory_mask=None, tgt_mask=None):
        return super().forward(x, memory, tgt_mask, memory_mask)


def greedy_wrong_default_eos(model, src_ids, max_new_tokens, bos_id=1, eos_id=0, pad_id=0):
    return greedy_decode(model, src_ids, max_new_tokens, bos_id, eos_id, pad_id)


class FFNDefaultDropout(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__(d_model, d_ff, dropout)


class EncoderBlockExtraDropout(EncoderBlock):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.out_dropout = nn.Dropout(0.1)

    def forward(self, x, mask=None):
        return self.out_dropout(super().forward(x, mask))


class FFNLearnedGate(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.gate = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.gate * super().forward(x)


class FFNClampsInPlaceWhenTraining(FeedForward):
    """Clamps the ReLU output in place in training mode: backward then fails."""

    def forward(self, x):
        h = torch.relu(self.linear1(x))
        if self.training:
            h.clamp_(max=1e4)
        return self.linear2(self.dropout(h))


class EncoderScaledPositions(Encoder):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, ids, mask=None):
        if mask is None:
            mask = make_padding_mask(ids, self.pad_id)
        x = self.pos(self.alpha * self.embed(ids))
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class DecoderBlockDropsMemory(DecoderBlock):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        memory = F.dropout(memory, 0.1, self.training)
        return super().forward(x, memory, tgt_mask, memory_mask)


# (check, family, wrong implementation)
FAMILIES_30 = [
    ("greedy_decode", "1 types", greedy_returns_list),
    ("greedy_decode", "1 types", greedy_returns_int32),
    ("greedy_decode", "1 types", greedy_returns_numpy),
    ("transformer", "1 types", TransformerFloatMask),
    ("encoder", "2 device", EncoderMaskThroughLists),
    ("feed_forward", "2 device", FFNManualDropoutOnTheCpu),
    ("greedy_decode", "2 device", greedy_done_on_the_cpu),
    ("decoder", "2 device", DecoderPaddingOnlyWhenPresent),
    ("encoder_block", "3 calls", EncoderBlockMaskRequired),
    ("encoder", "3 calls", EncoderMaxLenBeforeDropout),
    ("decoder_block", "3 calls", DecoderBlockMasksSwapped),
    ("greedy_decode", "3 calls", greedy_wrong_default_eos),
    ("feed_forward", "3 calls", FFNDefaultDropout),
    ("encoder_block", "4 training", EncoderBlockExtraDropout),
    ("feed_forward", "4 training", FFNLearnedGate),
    ("feed_forward", "4 training", FFNClampsInPlaceWhenTraining),
    ("encoder", "4 training", EncoderScaledPositions),
    ("decoder_block", "4 training", DecoderBlockDropsMemory),
]


class AnnotatedPositionwiseFeedForward(nn.Module):
    """The Annotated Transformer's PositionwiseFeedForward, its w_1/w_2 named as the text asks."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(self.linear1(x).relu()))


class FFNInPlaceRelu(FeedForward):
    """nn.ReLU(inplace=True) on a fresh tensor (d2l, torchvision style): right."""

    def forward(self, x):
        return self.linear2(self.dropout(F.relu(self.linear1(x), inplace=True)))


class AnnotatedSublayerConnection(nn.Module):
    """The Annotated Transformer's SublayerConnection (with nn.LayerNorm)."""

    def __init__(self, size, dropout=0.0):
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


class NanoGPTStyleBlock(EncoderBlock):
    """nanoGPT's Block.forward (x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))), glued."""

    def forward(self, x, mask=None):
        h = self.attn_residual.norm(x)
        x = x + self.attn_residual.dropout(self.self_attn(h, h, h, mask)[0])
        return x + self.ffn_residual.dropout(self.ffn(self.ffn_residual.norm(x)))


class DecoderTrilMask(DecoderWithTargetMask):
    def target_mask(self, ids):
        length = ids.shape[1]
        causal = torch.tril(torch.ones(length, length, device=ids.device)).bool()
        return (ids != self.pad_id).unsqueeze(1) & causal


def greedy_where_loop(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    """A Hugging Face style loop: unfinished_sequences, torch.where for the padding."""
    model.eval()
    memory, mask = model.encode(src_ids)
    ids = src_ids.new_full((src_ids.shape[0], 1), bos_id)
    unfinished = torch.ones_like(ids[:, 0], dtype=torch.bool)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            nxt = model.decode(ids, memory, mask)[:, -1, :].argmax(dim=-1)
            nxt = torch.where(unfinished, nxt, torch.full_like(nxt, pad_id))
            ids = torch.cat([ids, nxt.unsqueeze(-1)], dim=-1)
            unfinished = unfinished & (nxt != eos_id)
            if not unfinished.any():
                break
    return ids


class TransformerEncoderBuildsItsMask(Transformer):
    """encode lets the encoder build the padding mask itself (the same mask, from pad_id)."""

    def encode(self, src_ids):
        return self.encoder(src_ids), make_padding_mask(src_ids, self.pad_id)


class ResidualAnnotatedEps(PreNormResidual):
    """nn.LayerNorm with the Annotated Transformer's eps = 1e-6."""

    def __init__(self, d_model, dropout=0.0):
        super().__init__(d_model, dropout)
        self.norm = nn.LayerNorm(d_model, eps=1e-6)


class DecoderBlockSpelledOut(DecoderBlock):
    """Each residual written out, as in nanoGPT's Block, with a third (cross) sub-layer."""

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        h = self.self_attn_residual.norm(x)
        x = x + self.self_attn_residual.dropout(self.self_attn(h, h, h, tgt_mask)[0])
        h = self.cross_attn_residual.norm(x)
        attended = self.cross_attn(h, memory, memory, memory_mask)[0]
        x = x + self.cross_attn_residual.dropout(attended)
        return x + self.ffn_residual.dropout(self.ffn(self.ffn_residual.norm(x)))


RIGHT_30 = [
    ("transformer", TransformerEncoderBuildsItsMask),
    ("pre_norm_residual", ResidualAnnotatedEps),
    ("decoder_block", DecoderBlockSpelledOut),
    ("feed_forward", AnnotatedPositionwiseFeedForward),
    ("feed_forward", FFNInPlaceRelu),
    ("pre_norm_residual", AnnotatedSublayerConnection),
    ("encoder_block", NanoGPTStyleBlock),
    ("decoder", DecoderTrilMask),
    ("greedy_decode", greedy_where_loop),
]


@pytest.mark.parametrize(
    ("name", "wrong"),
    [pytest.param(n, w, id=f"{n}-{f}-{w.__name__}") for n, f, w in FAMILIES_30],
)
def test_issue30_family_is_rejected(name, wrong):
    result = CASES[name][0](wrong, raise_on_failure=False)
    assert result.status == FAILED, result.report()


@pytest.mark.parametrize(
    ("name", "variant"), [pytest.param(n, v, id=f"{n}-{v.__name__}") for n, v in RIGHT_30]
)
def test_issue30_right_variant_passes(name, variant):
    result = CASES[name][0](variant, raise_on_failure=False)
    assert result.status == PASSED, result.report()
