"""Checks for notebook 05, encoder/decoder.

The references are PyTorch's own layers (``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer``, ``nn.TransformerEncoder``/``Decoder``, ``nn.Transformer``, all
with ``norm_first=True``, ``batch_first=True``, dropout 0 and ReLU), built on the trusted side
from the observed state dict of the student's module (:mod:`course.checks.reference`). The
student's module gets random weights (LayerNorm gains and biases included) drawn from
:func:`course.properties.generator`, so a swapped or missing piece cannot hide behind the
default initialisation, and the trusted side redraws them to know the weights are those.

Every check applies the properties of issue 22 that fit its exercise, each written once below:
outputs and gradients compared with the reference (several sizes, non-default constructor
arguments, float32 and float64), train and eval mode (no extra dropout, dropout wired through
every constructor: with ``dropout=1.0`` in training mode every dropped branch vanishes),
inputs untouched, the device (the ``meta`` device), padding invariance and causality.

Masks follow the course convention: boolean, True = "may attend", shape (batch, 1 or L_q, L_k).
PyTorch's layers use the opposite convention (True = "blocked"), so the checks invert them.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import nn

from course.check import CheckFailure, exercise_check, expect, expect_close, expect_shape
from course.checks.reference import (
    is_dropout_of,
    key,
    load_attention,
    load_linear,
    load_norm,
    norm_parameters,
    sinusoid_table,
    tensor,
)
from course.observe import StudentError
from course.properties import (
    call,
    construct,
    generator,
    gradients,
    meta_device,
    modes,
    observe,
)

D_MODEL, HEADS, D_FF, LAYERS, VOCAB = 16, 4, 32, 2, 11
TOLERANCE = {
    torch.float64: {"atol": 1e-9, "rtol": 1e-7},
    torch.float32: {"atol": 3e-5, "rtol": 1e-4},
}
# Whole stacks add a positional-encoding table that is usually computed in float32 even when
# the module is later cast to float64, so float64 comparisons of stacks allow float32 rounding.
STACK_TOLERANCE = {
    torch.float64: {"atol": 3e-6, "rtol": 1e-5},
    torch.float32: {"atol": 1e-4, "rtol": 1e-3},
}


class Sizes(NamedTuple):
    """Constructor arguments of one case (the stacks add vocabulary, max_len and pad_id)."""

    d_model: int
    heads: int
    d_ff: int
    dropout: float
    dtype: torch.dtype
    training: bool  # the mode the comparison runs in (dropout is 0 when training)


# Non-default arguments everywhere: eval mode with dropout on (no dropout may act in eval
# mode), training mode with dropout 0 (no extra dropout), float64 and float32.
BLOCK_SIZES = (
    Sizes(D_MODEL, HEADS, D_FF, 0.3, torch.float64, False),
    Sizes(8, 2, 12, 0.0, torch.float32, True),
)


# --- observing the student's module ---------------------------------------------------------


TIED = "output_projection.weight"  # may be the decoder's embedding table (weight tying)


def _may_tie(alias: str, parameter: str) -> bool:
    pair = sorted((alias, parameter))
    return pair[1] == TIED and pair[0].startswith("decoder.embed.")


def _random_values(shapes: dict[str, tuple[int, ...]], offset: int) -> dict[str, torch.Tensor]:
    """Random float64 weights for every parameter: matrices ~ N(0, 1/fan_in), gains around 1,
    other vectors around 0. Drawn in name order from the session's generator."""
    g = generator(offset)
    values = {}
    for name in sorted(shapes):
        shape = shapes[name]
        noise = torch.randn(shape, generator=g, dtype=torch.float64)
        if len(shape) >= 2:
            values[name] = noise / math.sqrt(shape[-1])
        elif name.endswith("weight") or name.endswith("a_2"):
            values[name] = 1.0 + 0.3 * noise
        else:
            values[name] = 0.3 * noise
    return values


class Built(NamedTuple):
    module: Any  # the student's module (an Absent placeholder in the trusted replay)
    state: dict[str, torch.Tensor]  # its state dict after the random weights
    eps: dict[str, float]  # eps of every sub-module that has one
    dropout: dict[str, float]  # p of every nn.Dropout
    tied: dict[str, str]  # a state-dict key that is the same tensor as this parameter


def _build(
    what: str, cls: Any, args: tuple, kwargs: dict, dtype: torch.dtype, offset: int
) -> Built:
    """``cls(*args, **kwargs)`` cast to ``dtype`` with random weights, observed as plain data."""
    module, _ = construct(what, cls, *args, **kwargs)

    def randomise() -> dict[str, Any]:
        if not isinstance(module, nn.Module):
            raise CheckFailure(f"{what} should build an nn.Module, got {type(module).__name__}.")
        module.to(dtype)
        shapes = {name: tuple(p.shape) for name, p in module.named_parameters()}
        values = _random_values(shapes, offset)
        with torch.no_grad():
            for name, p in module.named_parameters():
                p.copy_(values[name].to(p.dtype))
        return {
            "state": dict(module.state_dict()),
            "parameters": sorted(shapes),
            "eps": {
                n: float(m.eps)
                for n, m in module.named_modules()
                if isinstance(getattr(m, "eps", None), float)
            },
            "dropout": {
                n: float(m.p) for n, m in module.named_modules() if isinstance(m, nn.Dropout)
            },
        }

    info = observe(f"{what} with random weights", randomise)
    state, parameters = info["state"], info["parameters"]
    expected = _random_values({n: tuple(state[n].shape) for n in parameters if n in state}, offset)
    expect(
        all(
            n in state and torch.equal(state[n], expected[n].to(state[n].dtype)) for n in parameters
        ),
        f"{what}: the weights the check gave your module did not come back from its state dict.",
    )
    shared = [
        n
        for n, v in state.items()
        if n not in parameters
        and isinstance(v, torch.Tensor)
        and v.is_floating_point()
        and any(n.endswith(s) for s in (".weight", ".bias"))
    ]
    tied = {n: next((p for p in parameters if torch.equal(state[p], state[n])), "") for n in shared}
    # The paper (section 3.4) shares the target embedding with the pre-softmax projection.
    wrong = [n for n, p in tied.items() if not _may_tie(n, p)]
    expect(
        not wrong,
        f"{what}: `{wrong[0] if wrong else ''}` is the very same tensor as "
        f"`{tied.get(wrong[0], '') if wrong else ''}`: some layers share their weights (the "
        "property violated: every layer has its own parameters).",
        "Build a new object for every layer (a list comprehension), not one object repeated.",
    )
    return Built(module, state, info["eps"], info["dropout"], tied)


def _call(what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """:func:`course.properties.call`, with an exception of the student's code reported
    together with the call that raised it (the input's shape, the constructor's arguments)."""
    try:
        return call(what, function, *args, **kwargs)
    except StudentError as error:
        raise CheckFailure(f"{what}: {error.message}") from None


def _forward(module: Any, training: bool) -> Callable[..., Any]:
    """The module's forward in the given mode (runs inside an observed call only)."""

    def run(*args: Any) -> Any:
        module.train(training)
        return module(*args)

    return run


def _output(value: Any, what: str) -> torch.Tensor:
    expect(
        isinstance(value, torch.Tensor),
        f"{what} should return a tensor, got {type(value).__name__}.",
        "The exercise text says what forward returns; MultiHeadAttention returns a pair.",
    )
    return value


def _student_gradients(
    what: str, module: Any, training: bool, inputs: list[Any], seed: int, *extra: Any
) -> dict[str, Any]:
    """Output and gradients of the student's module (``extra``: further arguments, no grad)."""

    def run() -> dict[str, Any]:
        module.train(training)
        module.zero_grad(set_to_none=True)
        return gradients(
            lambda *xs: module(*xs, *extra), inputs, dict(module.named_parameters()), seed
        )

    return observe(what, run)


def _expect_gradients(
    what: str,
    got: dict[str, Any],
    expected: dict[str, Any],
    names: dict[str, tuple[str, slice | None]],
    input_names: tuple[str, ...],
    tolerance: dict[str, float],
) -> None:
    """Compare input and parameter gradients (``names``: student key -> reference key, rows)."""
    for i, name in enumerate(input_names):
        if not name:
            continue
        mine, ref = got["inputs"][i], expected["inputs"][i]
        expect(
            mine is not None and bool(mine.abs().sum() > 0),
            f"{what}: no gradient reaches `{name}`, but the output depends on it (the property "
            "violated: gradients flow back to every input the output depends on).",
            "Look for .detach(), torch.no_grad() or a tensor rebuilt from plain numbers on the "
            f"way from `{name}` to the output.",
        )
        expect_close(mine, ref, what=f"{what}: the gradient of `{name}`", **tolerance)
    for student_key, (reference_key, rows) in names.items():
        mine = got["parameters"].get(student_key)
        ref = expected["parameters"][reference_key]
        ref = ref if rows is None else ref[rows]
        expect(
            mine is not None,
            f"{what}: the parameter `{student_key}` gets no gradient (the property violated: "
            "gradients flow to every weight used).",
            "Look for .detach() or torch.no_grad() in forward.",
        )
        expect_close(mine, ref, what=f"{what}: the gradient of `{student_key}`", **tolerance)


def _expect_modes(what: str, module: Any) -> None:
    """``train()`` and ``eval()`` reach every sub-module."""
    flags = observe(
        f"{what}: train() then eval()", lambda: [modes(module.train()), modes(module.eval())]
    )
    wrong = [n for n, f in flags[0].items() if not f] + [n for n, f in flags[1].items() if f]
    expect(
        not wrong,
        f"{what}: `{wrong[0] if wrong else ''}` does not follow train()/eval() (the property "
        "violated: the mode reaches every sub-module).",
        "Register sub-modules as attributes or in nn.ModuleList, so nn.Module sees them.",
    )


class _BuiltWhenMoved(nn.Module):
    """Stands for the student's module until it is moved: ``.to(device)`` (called by
    :func:`course.properties.on_meta` inside the observation) builds it with ``build`` on a fork
    of the global random state (its initialisation is not what is observed) and moves it."""

    def __init__(self, build: Callable[[], Any]):
        super().__init__()
        self.build = build

    def to(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        with torch.random.fork_rng(devices=[]):
            module = self.build()
        return module.to(*args, **kwargs)


def _expect_on_meta(what: str, build: Callable[[], Any], *inputs: Any) -> None:
    """Built and run on the meta device: every tensor the code creates must follow the input."""
    device = meta_device(
        f"{what} on the meta device",
        lambda module, *xs: module(*xs),
        _BuiltWhenMoved(build),
        *inputs,
    )
    expect(
        device in ("meta", None),  # None: undecided (the code reads values, which meta lacks)
        f"{what}, with its weights and inputs on another device (the meta device), mixed in or "
        "returned a tensor on the CPU. The property violated: the code works on any device.",
        "A tensor created inside forward (torch.arange, torch.ones, a mask) must be created on "
        "the input's device (device=x.device).",
    )


def _key_mask(lengths: list[int], width: int) -> torch.Tensor:
    """(B, 1, L) course mask: True on the first ``lengths[b]`` keys."""
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None])[:, None, :]


def _future_blocked(length: int) -> torch.Tensor:
    """PyTorch's boolean causal mask: True = blocked (strictly above the diagonal)."""
    return torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)


def _ids(lengths: list[int], width: int, pad_id: int, offset: int, vocab: int) -> torch.Tensor:
    """Token ids that avoid ``pad_id`` in the first ``lengths[b]`` positions, pad after."""
    ids = torch.randint(0, vocab - 1, (len(lengths), width), generator=generator(offset))
    ids = ids + (ids >= pad_id).long()  # skip pad_id
    for row, length in enumerate(lengths):
        ids[row, length:] = pad_id
    return ids


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


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """PyTorch warns about nested tensors and norm_first; irrelevant for a reference."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# --- the properties written once: padding invariance and causality ---------------------------


def _expect_padding_invariant(what: str, alone: Any, padded: Any, real: int, hint: str) -> None:
    """Outputs of the ``real`` first positions with and without masked padding appended."""
    alone, padded = _output(alone, what), _output(padded, what)
    expect(
        padded.dim() == alone.dim() and padded.shape[0] == alone.shape[0],
        f"{what}: the outputs with and without padding have shapes {tuple(padded.shape)} and "
        f"{tuple(alone.shape)}.",
    )
    error = (padded[:, :real] - alone[:, :real]).abs().max().item()
    expect(
        error < 1e-5 * (1 + alone.abs().max().item()),
        f"{what}: appending masked padding changed the outputs of the real positions (by up to "
        f"{error:.2g}). The property violated: padding invariance, a masked position never "
        "influences a real one.",
        hint,
    )


def _expect_causal(what: str, base: Any, changed: Any, start: int, hint: str) -> None:
    """Changing positions ``start:`` of the target must leave the outputs before it alone."""
    base, changed = _output(base, what), _output(changed, what)
    error = (changed[:, :start] - base[:, :start]).abs().max().item()
    expect(
        error < 1e-5 * (1 + base.abs().max().item()),
        f"{what}: changing the target from position {start} on changed the outputs at positions "
        f"0-{start - 1} (by up to {error:.2g}). The property violated: causality, position t "
        "never sees a later position.",
        hint,
    )


# --- PyTorch twins built from the observed state dict ------------------------------------


ATTENTION_ROWS = (("w_q", 0), ("w_k", 1), ("w_v", 2))
ENCODER_LAYER = (("self_attn", "self_attn"),)
ENCODER_NORMS = (("attn_residual.norm", "norm1"), ("ffn_residual.norm", "norm2"))
DECODER_LAYER = (("self_attn", "self_attn"), ("cross_attn", "multihead_attn"))
DECODER_NORMS = (
    ("self_attn_residual.norm", "norm1"),
    ("cross_attn_residual.norm", "norm2"),
    ("ffn_residual.norm", "norm3"),
)


def _norm_keys(state: dict, prefix: str, owner: str = "the module") -> tuple[str, str]:
    """The state-dict keys of the LayerNorm at ``prefix`` (gain, bias), or a failure naming
    what is missing."""
    if key(prefix, "weight") in state and key(prefix, "bias") in state:
        return key(prefix, "weight"), key(prefix, "bias")
    start = f"{prefix}."
    keys = [
        k
        for k, v in state.items()
        if k.startswith(start) and "." not in k[len(start) :] and v.dim() == 1
    ]
    if len(keys) == 2:
        return keys[0], keys[1]
    norm_parameters(state, prefix, owner)  # raises the failure that names the missing piece
    return key(prefix, "weight"), key(prefix, "bias")


def _layer_names(state: dict, student: str, twin: str, d: int, decoder: bool) -> dict:
    """Student key -> (twin parameter key, rows) for one block."""
    names: dict[str, tuple[str, slice | None]] = {}
    for mine, theirs in DECODER_LAYER if decoder else ENCODER_LAYER:
        for name, index in ATTENTION_ROWS:
            rows = slice(index * d, (index + 1) * d)
            names[key(student, f"{mine}.{name}.weight")] = (
                key(twin, f"{theirs}.in_proj_weight"),
                rows,
            )
            names[key(student, f"{mine}.{name}.bias")] = (key(twin, f"{theirs}.in_proj_bias"), rows)
        for kind in ("weight", "bias"):
            names[key(student, f"{mine}.w_o.{kind}")] = (
                key(twin, f"{theirs}.out_proj.{kind}"),
                None,
            )
    for linear in ("linear1", "linear2"):
        for kind in ("weight", "bias"):
            names[key(student, f"ffn.{linear}.{kind}")] = (key(twin, f"{linear}.{kind}"), None)
    for mine, theirs in DECODER_NORMS if decoder else ENCODER_NORMS:
        gain, bias = _norm_keys(state, key(student, mine))
        names[gain] = (key(twin, f"{theirs}.weight"), None)
        names[bias] = (key(twin, f"{theirs}.bias"), None)
    return {k: v for k, v in names.items() if k in state}


def _torch_layer(sizes: Sizes, decoder: bool) -> nn.Module:
    # train() with dropout 0 is deterministic and keeps PyTorch off its fused inference path,
    # which would return zeros at padded positions instead of ordinary outputs.
    layer = nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer
    return layer(
        sizes.d_model,
        sizes.heads,
        sizes.d_ff,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=True,
        dtype=sizes.dtype,
    ).train()


def _load_layer(twin: nn.Module, built: Built, prefix: str, owner: str, decoder: bool) -> None:
    state = built.state
    for mine, theirs in DECODER_LAYER if decoder else ENCODER_LAYER:
        load_attention(getattr(twin, theirs), state, key(prefix, mine), owner)
    load_linear(twin.linear1, state, key(prefix, "ffn.linear1"), owner)
    load_linear(twin.linear2, state, key(prefix, "ffn.linear2"), owner)
    for mine, theirs in DECODER_NORMS if decoder else ENCODER_NORMS:
        path = key(prefix, mine)
        load_norm(getattr(twin, theirs), state, path, owner, built.eps.get(path))


def _count_layers(built: Built, owner: str, num_layers: int) -> None:
    found = {int(m.group(1)) for k in built.state if (m := re.match(r"layers\.(\d+)\.", k))}
    expect(
        len(found) == num_layers,
        f"`{owner}.layers` holds {len(found)} blocks, but num_layers = {num_layers}.",
        "Build num_layers blocks in an nn.ModuleList named `layers`.",
    )


def _embedding_key(
    built: Built, prefix: str, owner: str, vocab: int, d_model: int, side: str
) -> str:
    """The key of the token-embedding table under ``prefix`` (the only matrix there)."""
    start = f"{prefix}." if prefix else ""
    tables = [k for k, v in built.state.items() if k.startswith(start + "embed.") and v.dim() == 2]
    expect(
        len(tables) == 1,
        f"`{owner}.{start}embed` should hold one table (a TokenEmbedding), found "
        f"{len(tables)} matrices.",
        "Build `embed` as the exercise text says (TokenEmbedding from notebook 01).",
    )
    rows, width = built.state[tables[0]].shape
    expect(
        (rows, width) == (vocab, d_model),
        f"`{owner}.{start}embed` has {rows} rows of size {width}, but the {side} ids go up to "
        f"{vocab - 1}, so it needs {vocab} rows of size d_model = {d_model}.",
        f"Build it with the {side} vocabulary size and d_model.",
    )
    return tables[0]


def _embed(table: torch.Tensor, ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """What a stack feeds its first block: E[ids] * sqrt(d_model) + PE (the pad row gets no
    gradient, as with padding_idx)."""
    d_model = table.shape[1]
    looked_up = nn.functional.embedding(ids, table, padding_idx=pad_id)
    return looked_up * math.sqrt(d_model) + sinusoid_table(ids.shape[1], d_model, table.dtype)


def _reference_gradients(forward: Callable, inputs: list, twin: nn.Module, seed: int) -> dict:
    with _quiet():
        return gradients(forward, inputs, dict(twin.named_parameters()), seed)


# --- Exercise 5.1 ---------------------------------------------------------------------------

FFN_SHAPES = ((3, 5), (1, 7), (4,), (2, 2, 3))  # leading axes: (..., d_model) in the docstring


@exercise_check(
    "Exercise 5.1",
    "position-wise feed-forward network",
    hint="The text gives the formula: expand to d_ff, ReLU, project back to d_model; dropout "
    "acts on the hidden activations only.",
)
def feed_forward(FeedForward: type) -> None:
    """Compare with nn.Linear -> ReLU -> nn.Linear (the paper's eq. 2) carrying the module's
    own weights, in both modes, several shapes; gradients; dropout's place; the device."""
    for case, sizes in enumerate(BLOCK_SIZES):
        d, dff = sizes.d_model, sizes.d_ff
        built = _build(
            f"FeedForward({d}, {dff}, dropout={sizes.dropout})",
            FeedForward,
            (d, dff),
            {"dropout": sizes.dropout},
            sizes.dtype,
            10 + case,
        )
        twin = nn.Sequential(
            nn.Linear(d, dff, dtype=sizes.dtype), nn.ReLU(), nn.Linear(dff, d, dtype=sizes.dtype)
        )
        load_linear(twin[0], built.state, "linear1", "FeedForward")
        load_linear(twin[2], built.state, "linear2", "FeedForward")
        mode = "training" if sizes.training else "eval"
        for index, lead in enumerate(FFN_SHAPES):
            x = torch.randn(
                *lead, d, generator=generator(20 + 10 * case + index), dtype=sizes.dtype
            )
            what = f"FeedForward({d}, {dff}) in {mode} mode on a {sizes.dtype} input of shape {tuple(x.shape)}"
            got = _call(what, _forward(built.module, sizes.training), x, names=("x",))
            with torch.no_grad():
                expect_close(_output(got, what), twin(x), what=what, **TOLERANCE[sizes.dtype])
        names = {
            f"{layer}.{kind}": (f"{i}.{kind}", None)
            for layer, i in (("linear1", 0), ("linear2", 2))
            for kind in ("weight", "bias")
        }
        got = _student_gradients(
            f"gradients of FeedForward({d}, {dff})", built.module, sizes.training, [x], 7
        )
        _expect_gradients(
            f"FeedForward({d}, {dff})",
            got,
            gradients(twin, [x], dict(twin.named_parameters()), 7),
            names,
            ("x",),
            TOLERANCE[sizes.dtype],
        )
    _expect_modes("FeedForward", built.module)
    # Dropout's place: with p = 1 every hidden activation is dropped, so the output is
    # linear2's bias alone (dropping the output instead gives zeros, the input: another vector).
    built = _build(
        "FeedForward(16, 32, dropout=1.0)",
        FeedForward,
        (D_MODEL, D_FF),
        {"dropout": 1.0},
        torch.float32,
        30,
    )
    x = torch.randn(2, 3, D_MODEL, generator=generator(31))
    out = _output(
        _call(
            "FeedForward(dropout=1.0) in training mode",
            _forward(built.module, True),
            x,
            random=True,
        ),
        "FeedForward",
    )
    bias = tensor(built.state, "linear2", "bias", "FeedForward").expand_as(x)
    if not torch.allclose(out, bias, atol=1e-6):
        if torch.allclose(out, torch.zeros_like(out)):
            where = "your output is all zeros: dropout acts on the output, after linear2"
        elif torch.allclose(out, out[:1, :1].expand_as(out), atol=1e-6):
            where = "the output is the same vector everywhere, but not linear2's bias: dropout acts before linear1"
        else:
            where = "the output still depends on x: dropout is missing or does not act on every hidden activation"
        raise CheckFailure(
            "with dropout=1.0 in training mode every hidden activation is dropped, so the output "
            f"should be linear2's bias alone; {where}. The property violated: dropout in its "
            "place, on the hidden activations.",
            "The text says where dropout acts: on the hidden activations, between the layers.",
        )
    _expect_on_meta("FeedForward(16, 32)", lambda: FeedForward(D_MODEL, D_FF), x)


# --- Exercise 5.2 ---------------------------------------------------------------------------


def _residual_twin(built: Built, d: int, dtype: torch.dtype) -> tuple[nn.Module, nn.Module]:
    """PyTorch's pre-LN encoder layer with its attention switched off computes
    x + FFN(norm2(x)): the pre-LN residual around the FFN. Returns it and that FFN (the
    sub-layer handed to the student's module)."""
    layer = _torch_layer(Sizes(d, 1, 2 * d, 0.0, dtype, False), decoder=False)
    sub = nn.Sequential(
        nn.Linear(d, 2 * d, dtype=dtype), nn.ReLU(), nn.Linear(2 * d, d, dtype=dtype)
    )
    g = generator(40 + d)
    with torch.no_grad():
        for layer_index, linear in ((0, layer.linear1), (2, layer.linear2)):
            w = torch.randn(linear.weight.shape, generator=g, dtype=dtype) / math.sqrt(
                linear.weight.shape[1]
            )
            b = 0.5 * torch.randn(linear.bias.shape, generator=g, dtype=dtype)
            linear.weight.copy_(w), linear.bias.copy_(b)
            sub[layer_index].weight.copy_(w), sub[layer_index].bias.copy_(b)
        layer.self_attn.out_proj.weight.zero_(), layer.self_attn.out_proj.bias.zero_()
    load_norm(layer.norm2, built.state, "norm", "PreNormResidual", built.eps.get("norm"))
    return layer, sub


def _name_residual_order(
    got: torch.Tensor, x: torch.Tensor, twin: nn.Module, sub: Any, what: str
) -> None:
    """Name the two classic wrong orders (the reference's own norm, twin.norm2)."""
    if got.shape != x.shape:
        return
    norm = twin.norm2
    wrong = {
        "this is post-LN, LayerNorm(x + sublayer(x)), the original paper's order; the exercise "
        "asks for pre-LN": norm(x + sub(x)),
        "the residual path carries LayerNorm(x) instead of x": norm(x) + sub(norm(x)),
    }
    for mistake, value in wrong.items():
        expect(
            not torch.allclose(got, value, atol=1e-5),
            f"{what}: {mistake}. The property violated: the output the text's pre-LN formula "
            "gives.",
        )


@exercise_check(
    "Exercise 5.2",
    "pre-LN residual connection",
    hint="Compare the two rows of the table in the text: in pre-LN, what does the residual "
    "path carry, and what alone goes through the norm and dropout?",
)
def pre_norm_residual(PreNormResidual: type) -> None:
    """Compare with PyTorch's pre-LN encoder layer (attention off, so x + FFN(norm(x))) on the
    module's own norm, in both modes and several shapes; gradients; dropout's place; device."""
    for case, sizes in enumerate(BLOCK_SIZES):
        d = sizes.d_model
        built = _build(
            f"PreNormResidual({d}, dropout={sizes.dropout})",
            PreNormResidual,
            (d,),
            {"dropout": sizes.dropout},
            sizes.dtype,
            50 + case,
        )
        twin, sub = _residual_twin(built, d, sizes.dtype)
        mode = "training" if sizes.training else "eval"
        for index, shape in enumerate(((2, 5), (1, 3))):
            x = (
                3.0
                * torch.randn(
                    *shape, d, generator=generator(60 + 10 * case + index), dtype=sizes.dtype
                )
                + 1.0
            )
            what = f"PreNormResidual({d}) in {mode} mode on a {sizes.dtype} input of shape {tuple(x.shape)}"
            got = _call(what, _forward(built.module, sizes.training), x, sub, names=("x",))
            with torch.no_grad(), _quiet():
                _name_residual_order(_output(got, what), x, twin, sub, what)
                expect_close(got, twin(x), what=what, **TOLERANCE[sizes.dtype])
        gain, bias = _norm_keys(built.state, "norm")
        names = {gain: ("norm2.weight", None), bias: ("norm2.bias", None)}

        got = _student_gradients(
            f"gradients of PreNormResidual({d})", built.module, sizes.training, [x], 8, sub
        )
        _expect_gradients(
            f"PreNormResidual({d})",
            got,
            _reference_gradients(twin, [x], twin, 8),
            names,
            ("x",),
            TOLERANCE[sizes.dtype],
        )
    _expect_modes("PreNormResidual", built.module)
    x = torch.randn(2, 4, D_MODEL, generator=generator(70))
    for p in (1.0, 0.5):
        built = _build(
            f"PreNormResidual(16, dropout={p})",
            PreNormResidual,
            (D_MODEL,),
            {"dropout": p},
            torch.float32,
            71,
        )
        twin, sub = _residual_twin(built, D_MODEL, torch.float32)
        what = f"PreNormResidual(dropout={p}) in training mode"
        got = _output(
            _call(what, _forward(built.module, True), x, sub, names=("x",), random=True), what
        )
        with torch.no_grad(), _quiet():
            branch = twin(x) - x
        right = torch.allclose(got, x, atol=1e-6) if p == 1.0 else is_dropout_of(got - x, branch, p)
        expect(
            right,
            f"{what}: dropout should act on the sub-layer's output alone, so that "
            + (
                "with p = 1 the output is x itself."
                if p == 1.0
                else "output - x is the sub-layer's output with some entries zeroed and the "
                "rest scaled by 1/(1 - p)."
            )
            + " The property violated: dropout in its place.",
            "The text's formula says which term dropout wraps; the residual path is never dropped.",
        )
    twin, sub = _residual_twin(built, D_MODEL, torch.float32)
    _expect_on_meta("PreNormResidual(16)", lambda: _Wrapped(PreNormResidual(D_MODEL), sub), x)


class _Wrapped(nn.Module):
    """The student's residual wrapper around a fixed sub-layer, as one module (for ``.to``)."""

    def __init__(self, wrapper: nn.Module, sublayer: nn.Module):
        super().__init__()
        self.wrapper, self.sublayer = wrapper, sublayer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wrapper(x, self.sublayer)


# --- Exercises 5.3 and 5.5: the blocks ------------------------------------------------------


def _expect_returns_input(what: str, got: Any, x: torch.Tensor) -> None:
    """With dropout=1.0 in training mode every sub-layer's output is dropped: x comes back."""
    got = _output(got, what)
    expect(
        got.shape == x.shape and torch.allclose(got, x, atol=1e-6),
        f"{what}: with dropout=1.0 in training mode every sub-layer's output is dropped, so the "
        "block should return x itself. The property violated: dropout wired through every "
        "sub-layer, on the sub-layer's output only.",
        "Every sub-layer goes through its PreNormResidual wrapper, which owns the dropout.",
    )


def _block_grads(got: dict, expected: dict, memory_lengths: list[int] | None, what: str) -> None:
    """The memory gets a gradient through cross-attention, its masked rows none."""
    if memory_lengths is None:
        return
    grad = got["inputs"][1]
    expect(
        grad is not None and bool(grad.abs().sum() > 0),
        f"{what}: no gradient reaches the encoder memory. The property violated: the memory "
        "gets a gradient through cross-attention (that is how the encoder learns).",
        "Look for .detach() or torch.no_grad() on the way from `memory` to the output.",
    )
    padded = ~_key_mask(memory_lengths, grad.shape[1])[:, 0]
    expect(
        bool((grad[padded] == 0).all()),
        f"{what}: memory rows hidden by memory_mask got a gradient, so they influenced the "
        "output. The property violated: a padding row gets no gradient.",
        "The cross-attention must receive memory_mask.",
    )


class BlockCase(NamedTuple):
    what: str
    batch: int
    length: int
    key_lengths: list[int] | None  # padding of the block's own sequence (None: no padding)
    causal: bool  # a (B or 1, L, L) causal mask
    memory: int = 0  # memory positions (decoder block)
    memory_lengths: list[int] | None = None  # None: memory_mask=None


ENCODER_BLOCK_CASES = (
    BlockCase("lengths [7, 4, 1] with a (B, 1, L) padding mask", 3, 7, [7, 4, 1], False),
    BlockCase("batch 1, mask=None", 1, 5, None, False),
    BlockCase("a (1, L, L) causal mask", 2, 6, None, True),
    BlockCase("a (B, L, L) mask: padding and causal", 2, 6, [6, 3], True),
)
DECODER_BLOCK_CASES = (
    BlockCase(
        "target lengths [5, 3], memory lengths [7, 2] (L_t = 5, L_s = 7)",
        2,
        5,
        [5, 3],
        True,
        7,
        [7, 2],
    ),
    BlockCase(
        "batch 1, target 4, memory 6, causal (1, L_t, L_t) mask, memory_mask=None",
        1,
        4,
        None,
        True,
        6,
        None,
    ),
    BlockCase("target 6, memory 3 (L_t > L_s)", 2, 6, [6, 6], True, 3, [3, 1]),
)


def _block_inputs(case: BlockCase, d: int, dtype: torch.dtype, offset: int) -> tuple[list, dict]:
    """The student's arguments and PyTorch's masks (True = blocked) for one case."""
    g = generator(offset)
    x = torch.randn(case.batch, case.length, d, generator=g, dtype=dtype)
    mask, torch_masks = None, {}
    if case.key_lengths is not None:
        mask = _key_mask(case.key_lengths, case.length)
        torch_masks["key_padding_mask"] = ~mask[:, 0]
    if case.causal:
        causal = ~_future_blocked(case.length)[None]
        mask = causal if mask is None else mask & causal
        torch_masks["mask"] = _future_blocked(case.length)
    if not case.memory:
        return [x, mask], torch_masks
    memory = torch.randn(case.batch, case.memory, d, generator=g, dtype=dtype)
    memory_mask = None
    if case.memory_lengths is not None:
        memory_mask = _key_mask(case.memory_lengths, case.memory)
        torch_masks["memory_key_padding_mask"] = ~memory_mask[:, 0]
    return [x, memory, mask, memory_mask], torch_masks


def _twin_call(twin: nn.Module, decoder: bool, args: list, masks: dict) -> torch.Tensor:
    with _quiet():
        if decoder:
            return twin(
                args[0],
                args[1],
                tgt_mask=masks.get("mask"),
                tgt_key_padding_mask=masks.get("key_padding_mask"),
                memory_key_padding_mask=masks.get("memory_key_padding_mask"),
            )
        return twin(
            args[0], src_mask=masks.get("mask"), src_key_padding_mask=masks.get("key_padding_mask")
        )


def _twin_forward(twin: nn.Module, decoder: bool, masks: dict, *args: Any) -> torch.Tensor:
    return _twin_call(twin, decoder, list(args), masks)


def _check_block(Block: type, decoder: bool) -> None:
    owner = "DecoderBlock" if decoder else "EncoderBlock"
    cases = DECODER_BLOCK_CASES if decoder else ENCODER_BLOCK_CASES
    # The properties, with the float64 block of the first size in eval mode.
    built = _build(f"{owner}(16, 4, 32)", Block, (D_MODEL, HEADS, D_FF), {}, torch.float64, 130)
    run = _forward(built.module, False)
    g = generator(131)
    x = torch.randn(2, 6, D_MODEL, generator=g, dtype=torch.float64)
    memory = torch.randn(2, 5, D_MODEL, generator=g, dtype=torch.float64)
    if decoder:
        causal = ~_future_blocked(6)[None]
        changed = x.clone()  # new random values: a constant shift would vanish in LayerNorm
        changed[:, 4:] = torch.randn(2, 2, D_MODEL, generator=g, dtype=torch.float64)
        _expect_causal(
            "DecoderBlock with a causal tgt_mask",
            _call("DecoderBlock(x, memory, causal mask)", run, x, memory, causal),
            _call("DecoderBlock(changed x, memory, causal mask)", run, changed, memory, causal),
            4,
            "tgt_mask is the self-attention's mask.",
        )
        padded = torch.cat(
            [memory, 4.0 * torch.randn(2, 3, D_MODEL, generator=g, dtype=torch.float64)], 1
        )
        _expect_padding_invariant(
            "DecoderBlock with 3 masked padding rows appended to the memory",
            _call("DecoderBlock(x, memory, causal mask)", run, x, memory, causal),
            _call(
                "DecoderBlock(x, padded memory, causal mask, memory_mask)",
                run,
                x,
                padded,
                causal,
                _key_mask([5, 5], 8),
            ),
            6,
            "memory_mask says which memory rows are real; which attention reads the memory?",
        )
    else:
        padded = torch.cat(
            [x[:1, :5], 5.0 * torch.randn(1, 4, D_MODEL, generator=g, dtype=torch.float64)], 1
        )
        _expect_padding_invariant(
            "EncoderBlock with 4 masked padding positions appended",
            _call("EncoderBlock(x) on 5 positions", run, x[:1, :5].clone()),
            _call("EncoderBlock(padded x, mask)", run, padded, _key_mask([5], 9)),
            5,
            "The mask says which keys are real: it has to reach the self-attention.",
        )
    built = _build(
        f"{owner}(16, 4, 32, dropout=1.0)",
        Block,
        (D_MODEL, HEADS, D_FF),
        {"dropout": 1.0},
        torch.float64,
        140,
    )
    args = [x, memory] if decoder else [x]
    _expect_returns_input(
        f"{owner}(dropout=1.0) in training mode",
        _call(
            f"{owner}(dropout=1.0) in training mode",
            _forward(built.module, True),
            *args,
            random=True,
        ),
        x,
    )
    meta_args = (
        [x.float(), memory.float(), ~_future_blocked(6)[None], _key_mask([5, 2], 5)]
        if decoder
        else [x.float(), _key_mask([6, 3], 6)]
    )
    _expect_on_meta(f"{owner}(16, 4, 32)", lambda: Block(D_MODEL, HEADS, D_FF), *meta_args)

    for number, sizes in enumerate(BLOCK_SIZES):
        d, h, dff = sizes.d_model, sizes.heads, sizes.d_ff
        name = f"{owner}({d}, {h}, {dff}, dropout={sizes.dropout})"
        built = _build(
            name, Block, (d, h, dff), {"dropout": sizes.dropout}, sizes.dtype, 100 + number
        )
        twin = _torch_layer(sizes, decoder)
        _load_layer(twin, built, "", owner, decoder)
        mode = "training" if sizes.training else "eval"
        for index, case in enumerate(cases):
            args, masks = _block_inputs(case, d, sizes.dtype, 110 + 10 * number + index)
            if args[-1] is None and not decoder:
                args = args[:1]  # the default mask=None
            what = f"{name} in {mode} mode, {case.what}"
            got = _call(
                what,
                _forward(built.module, sizes.training),
                *args,
                names=("x", "memory", "tgt_mask", "memory_mask") if decoder else ("x", "mask"),
            )
            with torch.no_grad():
                expected = _twin_call(twin, decoder, args, masks)
            expect_close(
                _output(got, what),
                expected,
                what=f"{what}: the output vs PyTorch's "
                f"{type(twin).__name__}(norm_first=True) with your weights",
                **TOLERANCE[sizes.dtype],
            )
        args, masks = _block_inputs(cases[0], d, sizes.dtype, 110 + 10 * number)
        got = _student_gradients(f"gradients of {name}", built.module, sizes.training, args, 9)
        expected = _reference_gradients(
            functools.partial(_twin_forward, twin, decoder, masks), args, twin, 9
        )
        _block_grads(got, expected, cases[0].memory_lengths if decoder else None, name)
        _expect_gradients(
            name,
            got,
            expected,
            _layer_names(built.state, "", "", d, decoder),
            ("x", "memory") if decoder else ("x",),
            TOLERANCE[sizes.dtype],
        )
    _expect_modes(owner, built.module)


@exercise_check(
    "Exercise 5.3",
    "encoder block",
    hint="Each sub-layer goes through its own PreNormResidual wrapper; the mask belongs to the "
    "attention; look at what MultiHeadAttention returns.",
)
def encoder_block(EncoderBlock: type) -> None:
    """Match nn.TransformerEncoderLayer(norm_first=True) with the same weights (outputs and
    gradients, both modes, padding and causal masks); padding invariance; dropout; device."""
    _check_block(EncoderBlock, decoder=False)


@exercise_check(
    "Exercise 5.5",
    "decoder block",
    hint="Three pre-LN sub-layers in the order of the text; in cross-attention the queries come "
    "from the decoder and the keys and values from the memory; each attention gets its mask.",
)
def decoder_block(DecoderBlock: type) -> None:
    """Match nn.TransformerDecoderLayer(norm_first=True) (outputs and gradients, L_t != L_s);
    causality; memory padding invariance; the memory's gradient; dropout; device."""
    _check_block(DecoderBlock, decoder=True)


# --- Exercises 5.4 and 5.6: the stacks ------------------------------------------------------


class StackCase(NamedTuple):
    vocab: int
    sizes: Sizes
    layers: int
    max_len: int | None  # None: the default
    pad_id: int


STACK_CASES = (
    StackCase(VOCAB, Sizes(D_MODEL, HEADS, D_FF, 0.2, torch.float64, False), LAYERS, 9, 3),
    StackCase(13, Sizes(8, 2, 12, 0.0, torch.float32, True), 1, None, 0),
    StackCase(7, Sizes(8, 2, 16, 0.0, torch.float64, False), 3, 20, 6),
)


def _stack_args(case: StackCase) -> tuple[tuple, dict]:
    s = case.sizes
    kwargs: dict[str, Any] = {"dropout": s.dropout, "pad_id": case.pad_id}
    if case.max_len is not None:
        kwargs["max_len"] = case.max_len
    return (case.vocab, s.d_model, s.heads, s.d_ff, case.layers), kwargs


def _stack_name(owner: str, case: StackCase) -> str:
    args, kwargs = _stack_args(case)
    extra = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    return f"{owner}({', '.join(map(str, args))}, {extra})"


def _torch_stack(
    case: StackCase, built: Built, owner: str, decoder: bool, prefix: str = ""
) -> nn.Module:
    """nn.TransformerEncoder/Decoder(norm=LayerNorm) carrying the weights under ``prefix``."""
    s = case.sizes
    norm = nn.LayerNorm(s.d_model, dtype=s.dtype)
    with _quiet():
        if decoder:
            twin = nn.TransformerDecoder(_torch_layer(s, True), case.layers, norm=norm)
        else:
            twin = nn.TransformerEncoder(
                _torch_layer(s, False), case.layers, norm=norm, enable_nested_tensor=False
            )
    for index, layer in enumerate(twin.layers):
        _load_layer(layer, built, key(prefix, f"layers.{index}"), owner, decoder)
    path = key(prefix, "norm")
    load_norm(twin.norm, built.state, path, owner, built.eps.get(path))
    return twin.train()


def _stack_names(
    built: Built, case: StackCase, prefix: str, twin_prefix: str, decoder: bool
) -> dict:
    names = {}
    for index in range(case.layers):
        names.update(
            _layer_names(
                built.state,
                key(prefix, f"layers.{index}"),
                key(twin_prefix, f"layers.{index}"),
                case.sizes.d_model,
                decoder,
            )
        )
    gain, bias = _norm_keys(built.state, key(prefix, "norm"))
    names[gain] = (key(twin_prefix, "norm.weight"), None)
    names[bias] = (key(twin_prefix, "norm.bias"), None)
    return names


def _expect_pad_row(what: str, got: dict, table: str, pad_id: int) -> None:
    grad = got["parameters"].get(table)
    expect(
        grad is None or bool((grad[pad_id] == 0).all()),
        f"{what}: the embedding row of pad_id = {pad_id} got a gradient, so training would change "
        "the padding vector. The property violated: a padding row gets no gradient.",
        "The text says how to build the token embedding so that the pad row is never trained.",
    )


def _expect_final_norm_bias(what: str, got: Any, bias: torch.Tensor) -> None:
    got = _output(got, what)
    expect(
        torch.allclose(got, bias.expand_as(got), atol=1e-5),
        f"{what}: with dropout=1.0 in training mode the positional encoding's dropout zeroes the "
        "embeddings and every sub-layer's output is dropped, so every output should be the final "
        "norm's bias. The property violated: dropout wired through every constructor (the "
        "positional encoding and every block).",
        "Pass `dropout` on to every module you build that takes it.",
    )


def _stack_reference(
    twin: nn.Module,
    decoder: bool,
    ids: torch.Tensor,
    pad: int,
    explicit: torch.Tensor | None,
    memory_mask: torch.Tensor | None,
) -> Callable[..., torch.Tensor]:
    """The twin stack as a function of the embedding table (and the memory), for gradients."""

    def forward(table: torch.Tensor, *memory: torch.Tensor) -> torch.Tensor:
        x = _embed(table, ids, pad)
        with _quiet():
            if decoder:
                return twin(
                    x,
                    memory[0],
                    tgt_mask=_future_blocked(ids.shape[1]),
                    tgt_key_padding_mask=ids == pad,
                    memory_key_padding_mask=None if memory_mask is None else ~memory_mask[:, 0],
                )
            padding = ids == pad if explicit is None else ~explicit[:, 0]
            return twin(x, src_key_padding_mask=padding)

    return forward


def _check_stack(Stack: type, decoder: bool) -> None:
    owner = "Decoder" if decoder else "Encoder"
    # The properties, on the first case's sizes in eval mode.
    case = STACK_CASES[0]
    args, kwargs = _stack_args(case)
    built = _build(
        _stack_name(owner, case), Stack, args, {**kwargs, "dropout": 0.0}, torch.float64, 230
    )
    run = _forward(built.module, False)
    pad = case.pad_id
    memory = torch.randn(2, 4, D_MODEL, generator=generator(231), dtype=torch.float64)
    ids = _ids([5, 5], 5, pad, 232, case.vocab)
    padded = torch.cat([ids, torch.full((2, 3), pad)], dim=1)
    if decoder:
        later = _change_tokens(ids, 3, pad, case.vocab)
        _expect_causal(
            "Decoder",
            _call("Decoder(tgt_ids, memory)", run, ids, memory),
            _call("Decoder(changed tgt_ids, memory)", run, later, memory),
            3,
            "The text says which two masks make up the self-attention mask.",
        )
        long_memory = torch.cat(
            [
                memory,
                3.0 * torch.randn(2, 2, D_MODEL, generator=generator(233), dtype=torch.float64),
            ],
            1,
        )
        _expect_padding_invariant(
            "Decoder with 2 masked padding rows appended to the memory",
            _call("Decoder(tgt_ids, memory)", run, ids, memory),
            _call(
                "Decoder(tgt_ids, padded memory, memory_mask)",
                run,
                ids,
                long_memory,
                _key_mask([4, 4], 6),
            ),
            5,
            "memory_mask has to reach every block.",
        )
    else:
        _expect_padding_invariant(
            "Encoder with 3 pad tokens appended (mask=None)",
            _call("Encoder(ids)", run, ids),
            _call("Encoder(ids followed by pad tokens)", run, padded),
            5,
            "Without a mask the encoder builds the padding mask itself, from its own pad_id.",
        )
    built = _build(
        f"{owner}(dropout=1.0)", Stack, args, {**kwargs, "dropout": 1.0}, torch.float64, 240
    )
    _, bias = _norm_keys(built.state, "norm", owner)
    inputs = [ids, memory] if decoder else [ids]
    got = _call(
        f"{owner}(dropout=1.0) in training mode", _forward(built.module, True), *inputs, random=True
    )
    _expect_final_norm_bias(f"{owner}(dropout=1.0) in training mode", got, built.state[bias])
    _expect_on_meta(
        _stack_name(owner, case),
        lambda: Stack(*args, **kwargs),
        *[t.float() if t.is_floating_point() else t for t in inputs],
    )

    for number, case in enumerate(STACK_CASES):
        s, pad = case.sizes, case.pad_id
        name = _stack_name(owner, case)
        args, kwargs = _stack_args(case)
        built = _build(name, Stack, args, kwargs, s.dtype, 200 + number)
        _count_layers(built, owner, case.layers)
        table = _embedding_key(built, "", owner, case.vocab, s.d_model, "token")
        twin = _torch_stack(case, built, owner, decoder)
        weight = built.state[table]
        mode = "training" if s.training else "eval"
        width = case.max_len or 9
        rows = (([6, 3, 1], 6, [4, 7, 2], 7), ([width], width, None, 3), ([5, 5], 5, [3, 1], 3))
        for index, (lengths, length, memory_lengths, memory_length) in enumerate(rows):
            ids = _ids(lengths, length, pad, 210 + 10 * number + index, case.vocab)
            memory = torch.randn(
                len(lengths),
                memory_length,
                s.d_model,
                generator=generator(211 + 10 * number + index),
                dtype=s.dtype,
            )
            explicit = None
            if decoder:
                memory_mask = (
                    None
                    if memory_lengths is None
                    else _key_mask(memory_lengths[: len(lengths)], memory_length)
                )
                inputs = [ids, memory] + ([] if memory_mask is None else [memory_mask])
                shown = (
                    f"target lengths {lengths}, memory {memory_length} positions"
                    + (
                        ""
                        if memory_mask is None
                        else f" (lengths {memory_lengths[: len(lengths)]})"
                    )
                    + ("" if memory_mask is not None else ", memory_mask=None")
                )
            else:
                memory_mask = None
                inputs = [ids]
                if index == 2:  # an explicit mask is used as given (it also hides a real token)
                    explicit = (ids != pad)[:, None, :].clone()
                    explicit[0, 0, 1] = False
                    inputs.append(explicit)
                shown = f"lengths {lengths}" + (
                    ", an explicit mask" if explicit is not None else ""
                )
            what = f"{name} in {mode} mode, {shown}"
            got = _call(
                what,
                _forward(built.module, s.training),
                *inputs,
                names=("tgt_ids", "memory", "memory_mask") if decoder else ("ids", "mask"),
            )

            reference = _stack_reference(twin, decoder, ids, pad, explicit, memory_mask)

            with torch.no_grad():
                expected = reference(weight, memory) if decoder else reference(weight)
            expect_close(
                _output(got, what),
                expected,
                what=f"{what}: the output vs E[ids]·sqrt(d_model) + "
                f"PE -> nn.Transformer{owner}(norm_first=True, norm=LayerNorm) with your weights",
                **STACK_TOLERANCE[s.dtype],
            )
            if index == 0:
                grads = _student_gradients(
                    f"gradients of {what}", built.module, s.training, inputs, 11
                )
                ref = _reference_gradients(
                    reference, [weight, memory] if decoder else [weight], twin, 11
                )
                _expect_pad_row(name, grads, table, pad)
                ref["parameters"][table] = ref["inputs"][0]
                ref["inputs"] = [None, *ref["inputs"][1:], None]
                if decoder:
                    _block_grads(grads, ref, memory_lengths[: len(lengths)], name)
                names = _stack_names(built, case, "", "", decoder) | {table: (table, None)}
                _expect_gradients(
                    name,
                    grads,
                    ref,
                    names,
                    ("", "memory") if decoder else ("",),
                    STACK_TOLERANCE[s.dtype],
                )
    _expect_modes(owner, built.module)


@exercise_check(
    "Exercise 5.4",
    "encoder",
    hint="Follow the text's three steps; the mask built from pad_id when none is given has "
    "to reach every block.",
)
def encoder(Encoder: type) -> None:
    """Match E[ids]·sqrt(d) + sinusoidal PE -> nn.TransformerEncoder(norm=LayerNorm) (outputs,
    gradients, an explicit mask, an input of exactly max_len); padding invariance; dropout."""
    _check_stack(Encoder, decoder=False)


@exercise_check(
    "Exercise 5.6",
    "decoder",
    hint="The self-attention mask combines two masks (the text names both); every block gets "
    "the memory and its mask; the stack ends with its norm.",
)
def decoder(Decoder: type) -> None:
    """Match E[ids]·sqrt(d) + PE -> nn.TransformerDecoder(norm=LayerNorm) (outputs, gradients,
    memory_mask given and None); causality; memory padding invariance; dropout; device."""
    _check_stack(Decoder, decoder=True)


# --- Exercise 5.7 ---------------------------------------------------------------------------


class ModelCase(NamedTuple):
    src_vocab: int
    tgt_vocab: int
    stack: StackCase  # its vocab is unused


MODEL_CASES = (
    ModelCase(
        VOCAB,
        VOCAB + 2,
        StackCase(0, Sizes(D_MODEL, HEADS, D_FF, 0.2, torch.float64, False), 2, 12, 0),
    ),
    ModelCase(7, 12, StackCase(0, Sizes(8, 2, 12, 0.0, torch.float32, True), 1, None, 2)),
)


def _model_args(case: ModelCase) -> tuple[tuple, dict]:
    args, kwargs = _stack_args(case.stack)
    return (case.src_vocab, case.tgt_vocab, *args[1:]), kwargs


def _call_text(owner: str, args: tuple, kwargs: dict) -> str:
    return f"{owner}({', '.join(map(str, (*args, *(f'{k}={v}' for k, v in kwargs.items()))))})"


def _torch_model(case: ModelCase, built: Built) -> tuple[nn.Module, nn.Linear]:
    """nn.Transformer(norm_first=True) and the output projection carrying the weights."""
    s, n = case.stack.sizes, case.stack.layers
    with _quiet():
        twin = nn.Transformer(
            s.d_model,
            s.heads,
            n,
            n,
            s.d_ff,
            dropout=0.0,
            activation="relu",
            batch_first=True,
            norm_first=True,
            dtype=s.dtype,
        ).train()
    for side, stack in (("encoder", twin.encoder), ("decoder", twin.decoder)):
        for index, layer in enumerate(stack.layers):
            _load_layer(layer, built, f"{side}.layers.{index}", "Transformer", side == "decoder")
        path = f"{side}.norm"
        load_norm(stack.norm, built.state, path, "Transformer", built.eps.get(path))
    projection = nn.Linear(s.d_model, case.tgt_vocab, dtype=s.dtype)
    load_linear(projection, built.state, "output_projection", "Transformer")
    return twin, projection


def _model_reference(
    twin: nn.Module, projection: nn.Module, src: torch.Tensor, tgt: torch.Tensor, pad: int
):
    """Logits of the twin as a function of the two embedding tables (for gradients)."""

    def forward(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with _quiet():
            hidden = twin(
                _embed(source, src, pad),
                _embed(target, tgt, pad),
                tgt_mask=_future_blocked(tgt.shape[1]),
                src_key_padding_mask=src == pad,
                tgt_key_padding_mask=tgt == pad,
                memory_key_padding_mask=src == pad,
            )
        return projection(hidden)

    return forward


def _encode_decode(model: Any, training: bool, src: torch.Tensor, tgt: torch.Tensor) -> Callable:
    def run() -> dict[str, Any]:
        model.train(training)
        memory, mask = model.encode(src)
        return {"memory": memory, "mask": mask, "logits": model.decode(tgt, memory, mask)}

    return run


@exercise_check(
    "Exercise 5.7",
    "encoder-decoder Transformer",
    hint="The text lists what encode, decode and forward return; the source padding mask is "
    "needed on both sides of the model; the logits are raw scores.",
)
def transformer(Transformer: type) -> None:
    """Match the same pieces around nn.Transformer(norm_first=True): logits and gradients,
    encode/decode agreeing with forward; source padding invariance; causality; dropout; device."""
    # The properties, on the first case's sizes in eval mode.
    case = MODEL_CASES[0]
    args, kwargs = _model_args(case)
    built = _build("Transformer", Transformer, args, {**kwargs, "dropout": 0.0}, torch.float64, 330)
    s = case.stack.sizes
    _embedding_key(built, "encoder", "Transformer", case.src_vocab, s.d_model, "source")
    _embedding_key(built, "decoder", "Transformer", case.tgt_vocab, s.d_model, "target")
    run, pad = _forward(built.module, False), case.stack.pad_id
    src = _ids([6, 3], 6, pad, 331, case.src_vocab)
    tgt = _ids([5, 5], 5, pad, 332, case.tgt_vocab)
    logits = _call("Transformer(src_ids, tgt_ids)", run, src, tgt)
    longer = torch.cat([src, torch.full((2, 3), pad)], 1)
    _expect_padding_invariant(
        "Transformer with 3 pad tokens appended to the source",
        logits,
        _call("Transformer(src_ids followed by pad tokens, tgt_ids)", run, longer, tgt),
        5,
        "The source padding mask has to reach the encoder and, as memory_mask, the decoder.",
    )
    later = _change_tokens(tgt, 3, pad, case.tgt_vocab)
    _expect_causal(
        "Transformer",
        logits,
        _call("Transformer(src_ids, changed tgt_ids)", run, src, later),
        3,
        "The decoder's self-attention mask must hide later target positions.",
    )
    built = _build(
        "Transformer(dropout=1.0)",
        Transformer,
        args,
        {**kwargs, "dropout": 1.0},
        torch.float64,
        340,
    )
    what = "Transformer(dropout=1.0) in training mode"
    got = _output(_call(what, _forward(built.module, True), src, tgt, random=True), what)
    _, bias = _norm_keys(built.state, "decoder.norm", "Transformer")
    w = tensor(built.state, "output_projection", "weight", "Transformer")
    b = tensor(built.state, "output_projection", "bias", "Transformer")
    expect(
        torch.allclose(got, (built.state[bias] @ w.T + b).expand_as(got), atol=1e-5),
        f"{what}: with every dropout dropping everything, the decoder's output is its final "
        "norm's bias, so every logit vector should be output_projection(decoder.norm.bias). The "
        "property violated: dropout wired through every constructor (encoder and decoder).",
        "Pass `dropout` on to the encoder and the decoder.",
    )
    _expect_on_meta("Transformer", lambda: Transformer(*args, **kwargs), src, tgt)

    for number, case in enumerate(MODEL_CASES):
        s, pad, n = case.stack.sizes, case.stack.pad_id, case.stack.layers
        args, kwargs = _model_args(case)
        name = _call_text("Transformer", args, kwargs)
        built = _build(name, Transformer, args, kwargs, s.dtype, 300 + number)
        source = _embedding_key(
            built, "encoder", "Transformer", case.src_vocab, s.d_model, "source"
        )
        target = _embedding_key(
            built, "decoder", "Transformer", case.tgt_vocab, s.d_model, "target"
        )
        for side in ("encoder", "decoder"):
            start = f"{side}."
            part = {k[len(start) :]: v for k, v in built.state.items() if k.startswith(start)}
            _count_layers(Built(None, part, {}, {}, {}), f"Transformer.{side}", n)
        twin, projection = _torch_model(case, built)
        src = _ids([7, 4, 2], 7, pad, 310 + number, case.src_vocab)
        tgt = _ids([5, 5, 3], 5, pad, 311 + number, case.tgt_vocab)
        reference = _model_reference(twin, projection, src, tgt, pad)
        tables = [built.state[source], built.state[target]]
        mode = "training" if s.training else "eval"
        what = f"{name} in {mode} mode: the logits of a batch of 3 (source lengths [7, 4, 2])"
        run = _forward(built.module, s.training)
        logits = _output(_call(what, run, src, tgt, names=("src_ids", "tgt_ids")), what)
        with torch.no_grad():
            expected = reference(*tables)
        expect_shape(
            logits, expected.shape, what, "The logits have shape (batch, L_tgt, tgt_vocab_size)."
        )
        expect_close(
            logits,
            expected,
            what=f"{what} vs nn.Transformer(norm_first=True) with your weights",
            **STACK_TOLERANCE[s.dtype],
        )
        steps = observe(
            f"{name}: encode(src_ids), then decode(tgt_ids, memory, memory_mask)",
            _encode_decode(built.module, s.training, src, tgt),
        )
        mask = steps["mask"]
        expect(
            isinstance(mask, torch.Tensor)
            and mask.dtype == torch.bool
            and mask.dim() == 3
            and tuple(mask.shape[1:]) == (1, 7)
            and torch.equal(mask.expand(3, 1, 7), (src != pad)[:, None, :]),
            f"{name}: encode(src_ids) should return, as its second element, the source padding "
            "mask: boolean (B, 1, L_src), True on real tokens.",
            "The text says what encode returns.",
        )
        with torch.no_grad(), _quiet():
            memory = twin.encoder(_embed(tables[0], src, pad), src_key_padding_mask=src == pad)
        expect_close(
            _output(steps["memory"], "encode"),
            memory,
            what=f"{name}: the memory encode(src_ids) returns",
            **STACK_TOLERANCE[s.dtype],
        )
        expect_close(
            _output(steps["logits"], "decode"),
            logits,
            what=f"{name}: decode(tgt_ids, *encode(src_ids)) vs forward(src_ids, tgt_ids)",
            **STACK_TOLERANCE[s.dtype],
        )
        grads = _student_gradients(f"gradients of {name}", built.module, s.training, [src, tgt], 12)
        parameters = dict(twin.named_parameters()) | {
            f"output_projection.{k}": v for k, v in projection.named_parameters()
        }
        ref = gradients(reference, tables, parameters, 12)
        ref["parameters"][source], ref["parameters"][target] = ref["inputs"]
        ref["inputs"] = [None, None]
        _expect_pad_row(f"{name}, the source embedding", grads, source, pad)
        names = {k: (k, None) for k in (source, target)} | {
            f"output_projection.{k}": (f"output_projection.{k}", None) for k in ("weight", "bias")
        }
        if built.tied:  # one table for both: its gradient is the sum of the two uses
            ((alias, kept),) = built.tied.items()
            ref["parameters"][kept] = ref["parameters"][target] + ref["parameters"][TIED]
            del names[alias]
        else:
            _expect_pad_row(f"{name}, the target embedding", grads, target, pad)
        names |= _stack_names(built, case.stack, "encoder", "encoder", False)
        names |= _stack_names(built, case.stack, "decoder", "decoder", True)
        names = {k: v for k, v in names.items() if k in built.state}
        _expect_gradients(name, grads, ref, names, ("", ""), STACK_TOLERANCE[s.dtype])
    _expect_modes("Transformer", built.module)


# --- Exercise 5.8 ---------------------------------------------------------------------------


class _ReverseOracle(nn.Module):
    """A fake seq2seq model whose greedy output is the reversed source followed by EOS.

    ``encode`` returns a memory whose padded rows hold a junk token, and the padding mask;
    ``decode`` reads only the rows ``memory_mask`` keeps, so decoding without the mask reads the
    junk too. The logits depend on the whole prefix (feeding back wrong tokens shows) and on the
    position (any position but the last predicts another token).
    """

    def __init__(self, bos_id: int, eos_id: int, pad_id: int, junk: int, offset: int):
        super().__init__()
        self.vocab, self.bos_id, self.eos_id, self.pad_id, self.junk = (
            12,
            bos_id,
            eos_id,
            pad_id,
            junk,
        )
        self.noise = torch.rand(64, self.vocab, generator=generator(offset))
        self.encodes = self.in_training = self.without_mask = 0

    def encode(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.encodes += src_ids.shape[0]  # rows encoded
        mask = (src_ids != self.pad_id)[:, None, :]
        memory = torch.where(mask[:, 0], src_ids, torch.full_like(src_ids, self.junk))
        return memory.double()[..., None], mask

    def decode(
        self, tgt_ids: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.in_training += int(self.training)
        self.without_mask += int(memory_mask is None)
        batch, length = tgt_ids.shape
        logits = self.noise[:length].expand(batch, length, self.vocab).clone()
        for b in range(batch):
            keep = [True] * memory.shape[1] if memory_mask is None else memory_mask[b, 0].tolist()
            tokens = memory[b, :, 0].tolist()
            source = [int(t) for t, k in zip(tokens, keep, strict=True) if k][::-1]
            for t in range(length):
                ok = tgt_ids[b, 1 : t + 1].tolist() == source[:t] and tgt_ids[b, 0] == self.bos_id
                target = source[t] if ok and t < len(source) else self.eos_id
                logits[b, t, target] += 5.0 + t
        return logits

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt_ids, *self.encode(src_ids))


def _expected_tokens(case: GreedyCase) -> list[list[int]]:
    """The oracle's greedy answer: BOS, the reversed word, EOS, then pad_id, for as many steps
    as the longest row needs or max_new_tokens allows."""
    bos, eos, pad = case.special
    answers = [[*word[::-1], eos] for word in case.words]
    steps = min(case.max_new, max(len(a) for a in answers))
    return [[bos, *(a + [pad] * steps)[:steps]] for a in answers]


class GreedyCase(NamedTuple):
    words: list[list[int]]
    width: int
    max_new: int
    special: tuple[int, int, int]  # bos, eos, pad
    offset: int


GREEDY_CASES = (
    GreedyCase([[5, 6, 8, 9, 10], [9, 11], [8, 8, 11, 5]], 5, 10, (1, 2, 0), 400),
    GreedyCase([[5, 6, 8, 9, 10], [9, 11], [8, 8, 11, 5]], 6, 3, (1, 2, 0), 401),
    GreedyCase([[5, 6, 8], [9, 10, 11, 5, 8], [11]], 5, 10, (4, 7, 3), 402),
    GreedyCase([[6, 5, 9]], 4, 10, (4, 7, 3), 403),
    GreedyCase([[6, 5, 9], [10]], 3, 1, (0, 11, 1), 404),
)


def _greedy_run(student_greedy_decode: Any, oracle: _ReverseOracle, case: GreedyCase) -> Callable:
    bos, eos, pad = case.special

    def run(src_ids: torch.Tensor) -> dict[str, Any]:
        oracle.eval()  # as the exercise calls it
        out = student_greedy_decode(
            oracle, src_ids, case.max_new, bos_id=bos, eos_id=eos, pad_id=pad
        )
        return {
            "out": out,
            "training": oracle.training,
            "encodes": oracle.encodes,
            "in_training": oracle.in_training,
            "without_mask": oracle.without_mask,
        }

    return run


@exercise_check(
    "Exercise 5.8",
    "greedy decoding",
    hint="Reread the text: which position's logits predict the next token, what a finished row "
    "receives, when to stop, and what encode hands to decode.",
)
def greedy_decode(student_greedy_decode: Callable) -> None:
    """Run on fake models whose greedy answer is known (the reversed source, then EOS)."""
    for case in GREEDY_CASES:
        bos, eos, pad = case.special
        junk = next(t for t in (10, 5, 6) if t not in case.special)
        oracle = _ReverseOracle(bos, eos, pad, junk, case.offset)
        src = torch.full((len(case.words), case.width), pad, dtype=torch.long)
        for row, word in enumerate(case.words):
            src[row, : len(word)] = torch.tensor(word)
        what = (
            f"greedy_decode(model, src_ids of shape {tuple(src.shape)}, max_new_tokens="
            f"{case.max_new}, bos_id={bos}, eos_id={eos}, pad_id={pad})"
        )
        seen = _call(
            what, _greedy_run(student_greedy_decode, oracle, case), src, names=("src_ids",)
        )
        expect(
            not seen["training"] and seen["in_training"] == 0,
            f"{what} switched the model to training mode. The property violated: the model stays "
            "in eval mode, as the text says.",
            "The text says which mode switch is allowed.",
        )
        expect(
            seen["without_mask"] == 0,
            f"{what} called model.decode without the memory_mask that encode returned, so the "
            "decoder reads the source's padding. The property violated: decode gets the memory "
            "and its mask.",
            "encode returns two things; decode takes both.",
        )
        got, expected = seen["out"], _expected_tokens(case)
        kind = (
            f"{got.dtype} of shape {tuple(got.shape)}"
            if isinstance(got, torch.Tensor)
            else type(got).__name__
        )
        expect(
            isinstance(got, torch.Tensor) and got.dtype == torch.long and got.dim() == 2,
            f"{what} should return a 2-D LongTensor of token ids, got a {kind}.",
        )
        expect(
            got.tolist() == expected,
            f"{what} returned {got.tolist()}; the model's greedy answer is {expected} (BOS, the "
            "most likely token at each step, pad_id after a row's EOS, stopping when every row is "
            "done or after max_new_tokens steps).",
            "Compare your rows with the expected ones: the first column, the last position's "
            "argmax, the tokens after EOS, the length.",
        )
        rows = len(case.words)
        expect(
            seen["encodes"] == rows,
            f"{what} encoded {seen['encodes']} source rows for a batch of {rows}: the text asks to "
            "encode the source once with model.encode and to call model.decode on the growing "
            "target.",
            "Keep what encode returns and reuse it at every step.",
        )
