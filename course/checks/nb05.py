"""Checks for notebook 05, encoder/decoder: each exercise's contract declared once, as a spec.

The reference is the paper's pre-LN Transformer written as functions of *the check's own*
weights, which the runner loads into the student's module by the names the text gives, so a
copied or all-zero twin cannot pass. Masks follow the course convention: boolean, True = "may
attend", (B, 1 or L_q, L_k). A LayerNorm written by hand (two vectors, gain first, as the
Annotated Transformer's ``a_2``/``b_2``) is read as ``weight``/``bias``; the paper's weight
tying (section 3.4) of the output projection with the target embedding is accepted.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course.checks import reference as ref
from course.framework import properties as prop
from course.framework.check import exercise_check
from course.framework.domains import Numbers
from course.framework.properties import attention, decoding, generator, statistics
from course.framework.spec import (
    DEFAULTS,
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
    run_module,
)

D, H, FF = 16, 4, 32
FORMS = (POSITIONAL, KEYWORD, DEFAULTS)
# The defaults first: train(), gradients and the device run on the first construction only,
# so a wrong default (a dropout that is not 0) meets them.
INIT_FORMS = (DEFAULTS, POSITIONAL, KEYWORD)
TIED = "output_projection.weight"  # may be the target embedding (the paper's weight tying)
TIE_MARK = "check_tied_output_projection"
EPS = "check_eps"  # a buffer the check adds: the eps a norm module uses


@dataclass(frozen=True)
class Probe(Case):
    """Every case of a module check here: what its properties need, the inputs ``alone``
    (without ``added``), the padding id."""

    alone: Mapping[str, Any] = field(default_factory=dict)
    added: str = ""
    pad: int = 0
    dropped: bool = False  # a dropout=1.0 build's: the train() output is stated


# --- the reference: the paper's pre-LN layers as functions of the weights -------------------


def _ln(w: Mapping, p: str, x: torch.Tensor) -> torch.Tensor:
    eps = w.get(f"{p}.{EPS}")  # the student's eps, where the module has one
    eps = 1e-5 if eps is None else float(eps)
    return F.layer_norm(x, x.shape[-1:], w[f"{p}.weight"], w[f"{p}.bias"], eps)


def _linear(w: Mapping, p: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w[f"{p}.weight"], w[f"{p}.bias"])


def _ffn(w: Mapping, p: str, x: torch.Tensor) -> torch.Tensor:
    return _linear(w, f"{p}linear2", torch.relu(_linear(w, f"{p}linear1", x)))


def _block(w: Mapping, p: str, x: torch.Tensor, heads: int, mask: Any, *memory: Any) -> Any:
    """An encoder block, or with ``memory`` (the memory and its mask) a decoder block: each
    sub-layer (self-attention, cross-attention, the FFN) as x + sublayer(LayerNorm(x))."""
    steps = [("self_attn_residual" if memory else "attn_residual", "self_attn", None, mask)]
    steps += [("cross_attn_residual", "cross_attn", *memory)] if memory else []
    for residual, name, keys, m in steps:
        h = _ln(w, f"{p}{residual}.norm", x)
        kv = h if keys is None else keys
        x = x + ref.multi_head(w, f"{p}{name}.", h, kv, kv, m, heads)[0]
    return x + _ffn(w, f"{p}ffn.", _ln(w, f"{p}ffn_residual.norm", x))


def _stack(
    w: Mapping, p: str, b: Mapping, ids: torch.Tensor, mask: Any, *memory: Any, shared: bool = False
) -> Any:
    """The encoder, or with ``memory`` (the memory and its mask) the decoder: embeddings (the pad
    row gets no gradient), the blocks (``shared``: layer 0's weights in every one), the final
    norm. Without a mask: the padding mask of ``ids``, causal in a decoder."""
    if mask is None:
        mask = (ids != b["pad_id"])[:, None, :] & (ref.causal(ids.shape[1]) if memory else True)
    table = w[f"{p}embed.embedding.weight"]  # E[ids] * sqrt(d_model) + PE (sections 3.4-3.5)
    x = F.embedding(ids, table, padding_idx=b["pad_id"]) * math.sqrt(table.shape[1])
    x = x + ref.sinusoid_table(ids.shape[1], table.shape[1], table.dtype)
    for i in range(b["num_layers"]):
        x = _block(w, f"{p}layers.{0 if shared else i}.", x, b["num_heads"], mask, *memory)
    return _ln(w, f"{p}norm", x)


# --- the parameters the text names ----------------------------------------------------------


def _weight_bias(p: str, *shape: int) -> dict[str, tuple[int, ...]]:
    """A linear layer's (``shape`` = (outputs, inputs)) or a norm's (``shape`` = (d,))."""
    return {f"{p}.weight": shape, f"{p}.bias": shape[:1]}


def _ffn_params(d: int, ff: int, p: str = "") -> dict[str, tuple[int, ...]]:
    return _weight_bias(f"{p}linear1", ff, d) | _weight_bias(f"{p}linear2", d, ff)


def _block_params(d: int, ff: int, decoder: bool, p: str = "") -> dict[str, tuple[int, ...]]:
    attentions = ("self_attn", "cross_attn") if decoder else ("self_attn",)
    out: dict[str, tuple[int, ...]] = {}
    for a in attentions:
        out |= ref.projections(f"{p}{a}.", d, d)
    out |= _ffn_params(d, ff, f"{p}ffn.")
    norms = ("self_attn_residual", "cross_attn_residual") if decoder else ("attn_residual",)
    for n in (*norms, "ffn_residual"):
        out |= _weight_bias(f"{p}{n}.norm", d)
    return out


def _stack_params(b: Mapping, vocab: int, decoder: bool, p: str = "", shared: bool = False) -> dict:
    d = b["d_model"]
    out = {f"{p}embed.embedding.weight": (vocab, d)}
    for i in range(1 if shared else b["num_layers"]):
        out |= _block_params(d, b["d_ff"], decoder, f"{p}layers.{i}.")
    return out | _weight_bias(f"{p}norm", d)


# --- reading the student's module by the text's names -----------------------------------------


def _named_norms(module: nn.Module) -> None:
    """A hand-written LayerNorm (no sub-modules, exactly two vectors, not named weight and
    bias) is read as ``weight`` (the first) and ``bias``; its own names still work."""
    for sub in module.modules():
        own = sub._parameters
        if set(own) == {"weight", "bias"} or len(own) != 2 or list(sub.children()):
            continue
        if not all(isinstance(v, nn.Parameter) and v.dim() == 1 for v in own.values()):
            continue
        (first, gain), (second, bias) = own.items()
        own.clear()
        own.update(weight=gain, bias=bias)
        sub.__dict__[first], sub.__dict__[second] = gain, bias


def _shows_tie(module: nn.Module) -> None:
    """The paper's tying (one tensor for the target embedding and the output projection):
    both names listed, and a mark the reference reads."""
    named = dict(module.named_parameters(remove_duplicate=False))
    table = named.get("decoder.embed.embedding.weight")
    if table is None or named.get(TIED) is not table:
        return
    module.register_buffer(TIE_MARK, torch.ones(()), persistent=False)
    listing = functools.partial(type(module).named_parameters, module, remove_duplicate=False)
    object.__setattr__(module, "named_parameters", listing)


def _read_by_name(cls: Any, *args: Any, **kwargs: Any) -> Any:
    """The student's module built, then read by the text's names (above)."""
    module = cls(*args, **kwargs)
    if isinstance(module, nn.Module):
        _named_norms(module)
        _shows_tie(module)
        for sub in module.modules():  # the reference normalises with the same eps
            if isinstance(getattr(sub, "eps", None), float):
                sub.register_buffer(EPS, torch.tensor(sub.eps), persistent=False)
    return module


# --- one check per module: builds from a table, the properties every module shares ----------

PAD_WORDS = "padding invariance: a masked position never influences a real one"
CAUSAL_WORDS = "causality: position t never sees a later position"
PAD_HINT = "The mask says which keys are real; it must reach every attention that reads them."
CAUSAL_HINT = "The self-attention's mask hides later positions."


def _module_check(
    rows: tuple, cases: Callable, dropped: tuple, *extra: Property, **fields: Any
) -> Callable[..., Any]:
    """The check of a module: one build per row of constructor values (``cases(inputs)`` its
    forward cases), its class read by the text's names (above). Its properties: padding
    invariance and causality on the cases that append padding or later positions, ``extra``,
    then where dropout acts (``dropped``: what the output is when everything is dropped, that
    in words, the property, the hint; see :func:`statistics.dropped_in_training`)."""
    owner = fields["name"]
    pad = attention.prefix_unchanged(owner, PAD_WORDS, PAD_HINT)
    later = attention.prefix_unchanged(owner, CAUSAL_WORDS, CAUSAL_HINT)
    where = statistics.dropped_in_training(owner, *dropped)
    properties = (
        Property("padding invariance", applies=lambda case: "pad" in case.added, **pad),
        Property("causality", applies=lambda case: "later" in case.added, **later),
        *extra,
        Property("dropout's place", applies=lambda case: case.dropped, **where),
    )

    def listed(made: dict) -> list[Case]:
        if made["dropout"] != 1.0:
            return cases(made)
        # every dropout drops everything: the first plain case alone, its train() output stated
        return [replace(next(c for c in cases(made) if not c.added), dropped=True, grad=False)]

    builds = []  # train() computes what eval() does where dropout is 0
    for values in rows:
        made = dict(zip(fields["init"], values, strict=True))
        what = ", ".join(f"{k} {v}" for k, v in made.items())
        builds.append(Build(what, made, functools.partial(listed, made), made["dropout"] == 0.0))
    fields = {"init_defaults": {"dropout": 0.0}, **fields}  # the stacks' specs state more
    spec = ModuleSpec(builds=lambda: builds, init_forms=INIT_FORMS, properties=properties, **fields)

    def body(student: Any) -> None:
        run_module(spec, functools.partial(_read_by_name, student))

    body.__name__ = spec.name
    checked = exercise_check(spec.exercise, spec.title, hint=spec.hint, seed=spec.seed)(body)
    checked.spec = spec  # type: ignore[attr-defined]
    return checked


# --- inputs ---------------------------------------------------------------------------------


def _ids(lengths: list[int], width: int, pad: int, vocab: int, g: torch.Generator) -> Any:
    """Token ids that avoid ``pad`` in the first ``lengths[b]`` positions, ``pad`` after."""
    ids = torch.randint(0, vocab - 1, (len(lengths), width), generator=g)
    ids = ids + (ids >= pad).long()
    for row, length in enumerate(lengths):
        ids[row, length:] = pad
    return ids


def _x(*shape: int, g: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


# Rows ``(what, *inputs, grad)``, then ``alone, added`` for a probe that appends what the text
# says cannot reach the first positions; the first ordinary case compares gradients.
_probes = functools.partial(cases, fields=("grad", "alone", "added"), kind=Probe)


# --- Exercise 5.1 ---------------------------------------------------------------------------


def _ffn_cases(b: Mapping) -> list[Case]:
    d = b["d_model"]
    g = generator(10 + d)
    shapes = ((3, 5, d), (1, 7, d), (4, d), (2, 2, 3, d))
    return _probes(
        ("x",), [(f"an input of shape {s}", _x(*s, g=g)) for s in shapes], first_grad=True
    )


feed_forward = _module_check(
    ((D, FF, 0.0), (8, 12, 0.3), (D, FF, 1.0)),
    _ffn_cases,
    (
        lambda case, state: state["linear2.bias"].expand_as(case.inputs["x"]),
        "linear2's bias alone (every hidden activation is dropped)",
        "dropout in its place, on the hidden activations only",
        "The text says where dropout acts: on the hidden activations, between the layers.",
    ),
    exercise="Exercise 5.1",
    title="position-wise feed-forward network",
    name="FeedForward",
    init=("d_model", "d_ff", "dropout"),
    forward=("x",),
    parameters=lambda b: _ffn_params(b.inputs["d_model"], b.inputs["d_ff"]),
    reference=lambda b, w, buffers, x: _ffn(w, "", x),
    gradients=("x",),
    hint="The text gives the formula: expand to d_ff, ReLU, project back to d_model; dropout "
    "acts on the hidden activations only.",
)


# --- Exercise 5.2 ---------------------------------------------------------------------------


def _sublayer(d: int) -> nn.Module:
    """A fixed FFN as the wrapped sub-layer, with the check's own weights."""
    with prop.seeded(40 + d):
        return nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))


PRE_LN = "the pre-LN formula of the text, x + Dropout(sublayer(LayerNorm(x)))"


def _post_ln(b: Build, w: Mapping, buffers: Mapping, x: Any, sublayer: Any) -> Any:
    return _ln(w | buffers, "norm", x + sublayer(x))


def _normed_residual(b: Build, w: Mapping, buffers: Mapping, x: Any, sublayer: Any) -> Any:
    normed = _ln(w | buffers, "norm", x)
    return normed + sublayer(normed)


def _residual_cases(b: Mapping) -> list[Case]:
    d = b["d_model"]
    g, sub = generator(60 + d), _sublayer(d)
    what = "x of shape {} (mean 1, scale 3) and an FFN as the sub-layer"
    rows = [(what.format(s), 3 * _x(*s, d, g=g) + 1, sub) for s in ((2, 5), (1, 3))]
    return _probes(("x", "sublayer"), rows, first_grad=True)


pre_norm_residual = _module_check(
    ((D, 0.0), (8, 0.3), (D, 1.0)),
    _residual_cases,
    (
        lambda case, state: case.inputs["x"],
        "x itself (the sub-layer's output is dropped)",
        "dropout in its place, on the sub-layer's output only; the residual path is never dropped",
        "The text's formula says which term dropout wraps.",
    ),
    exercise="Exercise 5.2",
    title="pre-LN residual connection",
    name="PreNormResidual",
    init=("d_model", "dropout"),
    forward=("x", "sublayer"),
    parameters=lambda b: _weight_bias("norm", b.inputs["d_model"]),
    reference=lambda b, w, buffers, x, sublayer: x + sublayer(_ln(w | buffers, "norm", x)),
    mistakes=(
        Mistake(
            "post-LN, LayerNorm(x + sublayer(x)), the original paper's order", PRE_LN, _post_ln
        ),
        Mistake("LayerNorm(x) on the residual path instead of x", PRE_LN, _normed_residual),
    ),
    gradients=("x",),
    hint="Compare the two rows of the table in the text: in pre-LN, what does the residual "
    "path carry, and what alone goes through the norm and dropout?",
)


# --- Exercises 5.3 and 5.5: the blocks ------------------------------------------------------

BLOCK_INIT = ("d_model", "num_heads", "d_ff", "dropout")
BLOCKS = ((D, H, FF, 0.0), (8, 2, 12, 0.3), (D, H, FF, 1.0))
BLOCK_DROPPED = (
    lambda case, state: case.inputs["x"],
    "x itself (every sub-layer's output is dropped)",
    "dropout wired through every sub-layer, on the sub-layer's output only",
    "Every sub-layer goes through its PreNormResidual wrapper, which owns the dropout.",
)


def _encoder_block_cases(b: Mapping) -> list[Case]:
    d = b["d_model"]
    g = generator(110 + d)
    x, junk = _x(1, 5, d, g=g), 5 * _x(1, 4, d, g=g)
    both = ref.key_mask([6, 3], 6) & ref.causal(6)
    return _probes(("x", "mask"), [
        ("5 positions and 4 masked padding positions appended", torch.cat([x, junk], 1),
         ref.key_mask([5], 9), False, {"x": x, "mask": None}, "the masked padding"),
        ("lengths [7, 4, 1] with a (B, 1, L) padding mask", _x(3, 7, d, g=g),
         ref.key_mask([7, 4, 1], 7), True),
        ("batch 1, mask=None", _x(1, 5, d, g=g), None),
        ("a (1, L, L) causal mask", _x(2, 6, d, g=g), ref.causal(6)),
        ("a (B, L, L) mask: padding and causal", _x(2, 6, d, g=g), both),
    ])  # fmt: skip


encoder_block = _module_check(
    BLOCKS,
    _encoder_block_cases,
    BLOCK_DROPPED,
    exercise="Exercise 5.3",
    title="encoder block",
    name="EncoderBlock",
    init=BLOCK_INIT,
    forward=("x", "mask"),
    defaults={"mask": None},
    forms=FORMS,
    parameters=lambda b: _block_params(b.inputs["d_model"], b.inputs["d_ff"], False),
    reference=lambda b, w, buffers, x, mask=None: _block(
        w | buffers, "", x, b.inputs["num_heads"], mask
    ),
    mistakes=(
        Mistake(
            "the mask inverted (True taken as blocked)",
            "the course's boolean mask (True = may attend)",
            lambda b, w, buffers, x, mask=None: _block(
                w | buffers, "", x, b.inputs["num_heads"], None if mask is None else ~mask
            ),
            "True in the mask means may attend: block where the mask is False.",
        ),
    ),
    gradients=("x",),
    hint="Each sub-layer goes through its own PreNormResidual wrapper; the mask belongs to the "
    "attention; look at what MultiHeadAttention returns.",
)


def _decoder_block_cases(b: Mapping) -> list[Case]:
    d = b["d_model"]
    g = generator(120 + d)
    x, memory = _x(2, 6, d, g=g), _x(2, 5, d, g=g)
    longer = torch.cat([memory, 4 * _x(2, 3, d, g=g)], 1)
    whole = {"x": x, "memory": memory, "tgt_mask": ref.causal(6), "memory_mask": None}
    return _probes(("x", "memory", "tgt_mask", "memory_mask"), [
        ("a causal mask, target positions 1-5 appended to position 0", x, memory, ref.causal(6),
         None, False, whole | {"x": x[:, :1], "tgt_mask": ref.causal(1)},
         "the later target positions"),
        ("3 masked padding rows appended to the memory", x, longer, ref.causal(6),
         ref.key_mask([5, 5], 8), False, whole, "the masked padding rows"),
        ("target lengths [5, 3], memory lengths [7, 2] (L_t = 5, L_s = 7)", _x(2, 5, d, g=g),
         _x(2, 7, d, g=g), ref.key_mask([5, 3], 5) & ref.causal(5), ref.key_mask([7, 2], 7),
         True),
        ("batch 1, target 4, memory 6, a (1, L_t, L_t) causal mask, memory_mask=None",
         _x(1, 4, d, g=g), _x(1, 6, d, g=g), ref.causal(4), None),
        ("target 6, memory 3 (L_t > L_s)", _x(2, 6, d, g=g), _x(2, 3, d, g=g), ref.causal(6),
         ref.key_mask([3, 1], 3)),
    ])  # fmt: skip


decoder_block = _module_check(
    BLOCKS,
    _decoder_block_cases,
    BLOCK_DROPPED,
    exercise="Exercise 5.5",
    title="decoder block",
    name="DecoderBlock",
    init=BLOCK_INIT,
    forward=("x", "memory", "tgt_mask", "memory_mask"),
    defaults={"tgt_mask": None, "memory_mask": None},
    forms=FORMS,
    parameters=lambda b: _block_params(b.inputs["d_model"], b.inputs["d_ff"], True),
    reference=lambda b, w, buffers, x, memory, tgt_mask=None, memory_mask=None: _block(
        w | buffers, "", x, b.inputs["num_heads"], tgt_mask, memory, memory_mask
    ),
    gradients=("x", "memory"),
    hint="Three pre-LN sub-layers in the order of the text; in cross-attention the queries come "
    "from the decoder and the keys and values from the memory; each attention gets its mask.",
)


# --- Exercises 5.4 and 5.6: the stacks ------------------------------------------------------

STACK_INIT = ("vocab_size", *BLOCK_INIT[:3], "num_layers", "dropout", "max_len", "pad_id")
STACK_DEFAULTS = {"dropout": 0.0, "max_len": 512, "pad_id": 0}
STACKS = (  # (vocab, d, heads, d_ff, layers, dropout, max_len, pad_id)
    (11, D, H, FF, 2, 0.0, 9, 3),
    (13, 8, 2, 12, 1, 0.0, 512, 0),
    (7, 8, 2, 16, 3, 0.2, 20, 6),
    (11, D, H, FF, 2, 1.0, 9, 3),
)


STACK_DROPPED = (
    lambda case, state: state["norm.bias"].expand(
        *next(v for k, v in case.inputs.items() if k.endswith("ids")).shape, -1
    ),
    "the final norm's bias at every position (the embeddings and every sub-layer's output are "
    "dropped)",
    "dropout wired through every constructor (the positional encoding and every block)",
    "Pass `dropout` on to every module you build that takes it.",
)


def _encoder_cases(b: Mapping) -> list[Case]:
    g, pad, vocab = generator(210 + b["vocab_size"]), b["pad_id"], b["vocab_size"]
    width = min(b["max_len"], 9)
    ids = _ids([6, 3, 1], 6, pad, vocab, g)
    explicit = (ids != pad)[:, None, :].clone()
    explicit[0, 0, 1] = False  # an explicit mask is used as given (it also hides a real token)
    real = _ids([5, 5], 5, pad, vocab, g)
    padded = torch.cat([real, torch.full((2, 3), pad)], 1)
    return _probes(("ids", "mask"), [
        ("5 tokens and 3 pad tokens appended, mask=None", padded, None, False,
         {"ids": real, "mask": None}, "the pad tokens"),
        ("lengths [6, 3, 1], mask=None", ids, None, True),
        (f"lengths [{width}] (max_len = {b['max_len']})", _ids([width], width, pad, vocab, g),
         None),
        ("an explicit mask that also hides a real token", ids, explicit),
    ])  # fmt: skip


encoder = _module_check(
    STACKS,
    _encoder_cases,
    STACK_DROPPED,
    exercise="Exercise 5.4",
    title="encoder",
    name="Encoder",
    init=STACK_INIT,
    init_defaults=STACK_DEFAULTS,
    forward=("ids", "mask"),
    defaults={"mask": None},
    forms=FORMS,
    parameters=lambda b: _stack_params(b.inputs, b.inputs["vocab_size"], False),
    reference=lambda b, w, buffers, ids, mask=None: _stack(w | buffers, "", b.inputs, ids, mask),
    mistakes=(
        Mistake(
            "one block shared by every layer (`[block] * num_layers`)",
            "`self.layers`, an `nn.ModuleList` of `num_layers` `EncoderBlock`s",
            lambda b, w, buffers, ids, mask=None: _stack(
                w | buffers, "", b.inputs, ids, mask, shared=True
            ),
            "Build a new EncoderBlock for each layer (a list comprehension); `[block] * n` "
            "repeats one block, whose weights every layer then shares.",
            lambda b: _stack_params(b.inputs, b.inputs["vocab_size"], False, shared=True),
        ),
    ),
    gradients=("ids",),  # the parameters' gradients (ids have none)
    hint="Follow the text's three steps; the mask built from pad_id when none is given has "
    "to reach every block.",
)


def _decoder_cases(b: Mapping) -> list[Case]:
    g, pad, vocab, d = generator(220 + b["vocab_size"]), b["pad_id"], b["vocab_size"], b["d_model"]
    memory = _x(2, 4, d, g=g)
    ids = _ids([6, 3, 1], 6, pad, vocab, g)
    full = _ids([5, 5], 5, pad, vocab, g)
    longer = torch.cat([memory, 3 * _x(2, 2, d, g=g)], 1)
    whole = {"tgt_ids": full, "memory": memory, "memory_mask": None}
    return _probes(("tgt_ids", "memory", "memory_mask"), [
        ("target positions 1-4 appended to position 0", full, memory, None, False,
         whole | {"tgt_ids": full[:, :1]}, "the later target positions"),
        ("2 masked padding rows appended to the memory", full, longer, ref.key_mask([4, 4], 6),
         False, whole, "the masked padding rows"),
        ("target lengths [6, 3, 1], memory lengths [4, 7, 2]", ids, _x(3, 7, d, g=g),
         ref.key_mask([4, 7, 2], 7), True),
        ("target lengths [5, 5], memory 3 positions, memory_mask=None", full, _x(2, 3, d, g=g),
         None),
    ])  # fmt: skip


decoder = _module_check(
    STACKS,
    _decoder_cases,
    STACK_DROPPED,
    exercise="Exercise 5.6",
    title="decoder",
    name="Decoder",
    init=STACK_INIT,
    init_defaults=STACK_DEFAULTS,
    forward=("tgt_ids", "memory", "memory_mask"),
    defaults={"memory_mask": None},
    forms=FORMS,
    parameters=lambda b: _stack_params(b.inputs, b.inputs["vocab_size"], True),
    reference=lambda b, w, buffers, tgt_ids, memory, memory_mask=None: _stack(
        w | buffers, "", b.inputs, tgt_ids, None, memory, memory_mask
    ),
    gradients=("memory",),
    hint="The self-attention mask combines two masks (the text names both); every block gets "
    "the memory and its mask; the stack ends with its norm.",
)


# --- Exercise 5.7 ---------------------------------------------------------------------------

MODEL_INIT = ("src_vocab_size", "tgt_vocab_size", *STACK_INIT[1:])
MODELS = (
    (11, 13, D, H, FF, 2, 0.0, 12, 0),
    (7, 12, 8, 2, 12, 1, 0.0, 512, 2),
    (11, 13, D, H, FF, 1, 1.0, 512, 0),
)


def _model_params(b: Build) -> dict[str, tuple[int, ...]]:
    i = b.inputs
    out = _stack_params(i, i["src_vocab_size"], False, "encoder.")
    out |= _stack_params(i, i["tgt_vocab_size"], True, "decoder.")
    return out | _weight_bias("output_projection", i["tgt_vocab_size"], i["d_model"])


def _model(b: Build, w: Mapping, buffers: Mapping, src_ids: Any, tgt_ids: Any) -> torch.Tensor:
    w = {**w, **buffers}
    if TIE_MARK in buffers:  # one tensor: the last weights loaded into it, the projection's
        w["decoder.embed.embedding.weight"] = w[TIED]
    mask = (src_ids != b.inputs["pad_id"])[:, None, :]
    memory = _stack(w, "encoder.", b.inputs, src_ids, mask)
    hidden = _stack(w, "decoder.", b.inputs, tgt_ids, None, memory, mask)
    return _linear(w, "output_projection", hidden)


def _model_cases(b: Mapping) -> list[Case]:
    g, pad, sv, tv = generator(310 + b["num_layers"]), b["pad_id"], *MODEL_INIT[:2]
    src, tgt = _ids([7, 4, 2], 7, pad, b[sv], g), _ids([5, 5, 3], 5, pad, b[tv], g)
    real, tgt2 = _ids([6, 6], 6, pad, b[sv], g), _ids([5, 5], 5, pad, b[tv], g)
    longer = torch.cat([real, torch.full((2, 3), pad)], 1)
    whole = {"src_ids": real, "tgt_ids": tgt2}
    return _probes(("src_ids", "tgt_ids"), [
        ("target positions 1-4 appended to position 0", real, tgt2, False,
         {"src_ids": real, "tgt_ids": tgt2[:, :1]}, "the later target positions"),
        ("3 pad tokens appended to the source", longer, tgt2, False, whole, "the pad tokens"),
        ("a batch of 3 (source lengths [7, 4, 2])", src, tgt, True),
    ], pad=pad)  # fmt: skip


def _logits_of_bias(case: Case, state: dict) -> torch.Tensor:
    hidden = state["decoder.norm.bias"].expand(*case.inputs["tgt_ids"].shape, -1)
    return F.linear(hidden, state[TIED], state["output_projection.bias"])


transformer = _module_check(
    MODELS,
    _model_cases,
    (
        _logits_of_bias,
        "output_projection(decoder.norm.bias) at every position",
        "dropout wired through every constructor (encoder and decoder)",
        "Pass `dropout` on to the encoder and the decoder.",
    ),
    Property(
        "encode and decode",
        applies=lambda c: not c.dropped,
        **decoding.encode_then_decode("The text lists what encode and decode return."),
    ),
    exercise="Exercise 5.7",
    title="encoder-decoder Transformer",
    name="Transformer",
    init=MODEL_INIT,
    init_defaults=STACK_DEFAULTS,
    forward=("src_ids", "tgt_ids"),
    parameters=_model_params,
    reference=_model,
    gradients=("src_ids",),  # the parameters' gradients
    hint="The text lists what encode, decode and forward return; the source padding mask is "
    "needed on both sides of the model; the logits are raw scores.",
)


# --- Exercise 5.8 ---------------------------------------------------------------------------


class _ReverseOracle(nn.Module):
    """A fake seq2seq model whose greedy output is the reversed source followed by EOS.

    ``encode`` returns a memory whose padded rows hold a junk token, and the padding mask;
    ``decode`` reads only the rows ``memory_mask`` keeps, so decoding without the mask reads the
    junk too. The logits depend on the whole prefix (feeding back wrong tokens shows) and on the
    position (any position but the last predicts another token). It counts its calls.
    """

    def __init__(self, special: tuple[int, int, int], offset: int):
        super().__init__()
        self.bos_id, self.eos_id, self.pad_id = special
        self.junk = next(t for t in (10, 5, 6) if t not in special)
        self.register_buffer("noise", torch.rand(64, 12, generator=generator(offset)))
        self.reset()

    def reset(self) -> None:
        self.encodes = self.in_training = self.without_mask = 0
        self.eval()

    def counts(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("encodes", "in_training", "without_mask", "training")}

    def encode(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.encodes += src_ids.shape[0]  # rows encoded
        mask = (src_ids != self.pad_id)[:, None, :]
        memory = torch.where(mask[:, 0], src_ids, torch.full_like(src_ids, self.junk))
        return memory.double()[..., None], mask

    def decode(self, tgt_ids: torch.Tensor, memory: torch.Tensor, memory_mask: Any = None) -> Any:
        self.in_training += int(self.training)
        self.without_mask += int(memory_mask is None)
        batch, length = tgt_ids.shape
        logits = self.noise[:length].expand(batch, length, 12).clone()
        for b in range(batch):
            keep = [True] * memory.shape[1] if memory_mask is None else memory_mask[b, 0].tolist()
            tokens = memory[b, :, 0].tolist()
            source = [int(t) for t, k in zip(tokens, keep, strict=True) if k][::-1]
            for t in range(length):
                ok = tgt_ids[b, 1 : t + 1].tolist() == source[:t] and tgt_ids[b, 0] == self.bos_id
                logits[b, t, source[t] if ok and t < len(source) else self.eos_id] += 5.0 + t
        return logits

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt_ids, *self.encode(src_ids))


GREEDY_PARAMS = ("model", "src_ids", "max_new_tokens", "bos_id", "eos_id", "pad_id")
GREEDY = (  # source words, width, max_new_tokens, (bos, eos, pad)
    ([[5, 6, 8, 9, 10], [9, 11], [8, 8, 11, 5]], 5, 10, (1, 2, 0)),
    ([[5, 6, 8, 9, 10], [9, 11], [8, 8, 11, 5]], 6, 3, (1, 2, 0)),
    ([[5, 6, 8], [9, 10, 11, 5, 8], [11]], 5, 10, (4, 7, 3)),
    ([[6, 5, 9]], 4, 10, (4, 7, 3)),
    ([[6, 5, 9], [10]], 3, 1, (0, 11, 1)),
)


def _greedy_cases() -> list[Case]:
    rows = []  # what, then a value for each of GREEDY_PARAMS
    for n, (words, width, steps, special) in enumerate(GREEDY):
        src = torch.tensor([word + [special[2]] * (width - len(word)) for word in words])
        what = f"a batch of {len(words)} sources of width {width}, max_new_tokens {steps}"
        what = f"{what}, bos/eos/pad {special}"
        rows.append((what, _ReverseOracle(special, 400 + n), src, steps, *special))
    return cases(GREEDY_PARAMS, rows)


def _greedy_answer(
    model: Any,
    src_ids: torch.Tensor,
    max_new_tokens: int,
    bos_id: int = 1,
    eos_id: int = 2,
    pad_id: int = 0,
) -> torch.Tensor:
    """The oracle's greedy answer: BOS, the reversed source, EOS, then pad_id, for as many
    steps as the longest row needs or max_new_tokens allows."""
    answers = [[*[t for t in row.tolist() if t != pad_id][::-1], eos_id] for row in src_ids]
    steps = min(max_new_tokens, max(len(a) for a in answers))
    return torch.tensor([[bos_id, *(a + [pad_id] * steps)[:steps]] for a in answers])


greedy_decode = check(
    Spec(
        exercise="Exercise 5.8",
        title="greedy decoding",
        name="greedy_decode",
        params=GREEDY_PARAMS,
        defaults={"bos_id": 1, "eos_id": 2, "pad_id": 0},
        forms=FORMS,
        reference=_greedy_answer,
        cases=_greedy_cases,
        domains={  # "at most max_new_tokens": 0 steps included
            "max_new_tokens": Numbers(
                0, lambda i: i["src_ids"].shape[1] + 2, integer=True, interior=1
            ),
        },
        properties=(
            Property(
                "the decoding protocol",
                **decoding.decoding_protocol(
                    "encode returns two things; decode takes both, on the growing target; the text says "
                    "which mode switch is allowed."
                ),
            ),
        ),
        hint="Reread the text: which position's logits predict the next token, what a finished row "
        "receives, when to stop, and what encode hands to decode.",
    )
)
