"""PyTorch twins of the student's layers, built on the trusted side from plain data.

A check never touches the student's module outside :func:`course.observe.observe`. It observes
the module's state dict (``course.properties.construct`` returns it, or
``observe(what, lambda: dict(module.state_dict()))``) and any plain attribute it needs (a
LayerNorm's ``eps``, a dropout ``p``), then builds PyTorch's own layer (``nn.MultiheadAttention``,
``nn.Linear``, ``nn.LayerNorm``) and copies those tensors into it. Both then compute with the
same numbers, so any difference comes from the computation itself.

Every function takes the state dict, the key ``prefix`` of the sub-module in it (``""`` for the
module itself, ``"self_attn"``, ``"ffn.linear1"``) and the ``owner``, the name of the student's
class used in messages: a missing or misshapen sub-module is reported as
``MultiHeadAttention.w_q`` in the student's terms, never as a line of the check's own code.

The sinusoidal table of Vaswani et al. (2017, section 3.5) stands in for the student's
positional-encoding module; :func:`is_dropout_of` recognises dropout's pattern in an output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from course.check import CheckFailure, expect

State = Mapping[str, Any]


def key(prefix: str, name: str) -> str:
    """``prefix.name``, or ``name`` when the prefix is empty."""
    return f"{prefix}.{name}" if prefix else name


def _children(state: State, prefix: str) -> list[str]:
    """The names one level below ``prefix`` in the state dict, in order (for messages)."""
    start = f"{prefix}." if prefix else ""
    names: list[str] = []
    for full in state:
        if isinstance(full, str) and full.startswith(start):
            name = full[len(start) :].split(".")[0]
            if name not in names:
                names.append(name)
    return names


def _missing(state: State, prefix: str, name: str, owner: str) -> CheckFailure:
    """A failure naming the missing ``owner.prefix.name`` and what the module has instead."""
    full = key(prefix, name)
    parts = full.split(".")
    found, parent = [], ""
    for depth in range(len(parts) - 1, -1, -1):  # the deepest part of the path that exists
        parent = ".".join(parts[:depth])
        found = _children(state, parent)
        if found:
            break
    missing = parts[len(parent.split(".")) if parent else 0]
    where = f"`{owner}.{parent}`" if parent else f"`{owner}`"
    listed = ", ".join(f"`{n}`" for n in found[:12]) if found else "none"
    kind = "parameter" if missing == parts[-1] else "sub-module"
    return CheckFailure(
        f"`{owner}` has no parameter `{full}`: {where} has no {kind} `{missing}` (what it has: "
        f"{listed}). The check reads each layer by the name the exercise gives it.",
        "Keep the sub-modules, names and layer types that the exercise describes.",
    )


def tensor(state: State, prefix: str, name: str, owner: str) -> torch.Tensor:
    """``state[prefix.name]``, or a CheckFailure naming ``owner.prefix.name`` as missing."""
    value = state.get(key(prefix, name))
    if not isinstance(value, torch.Tensor):
        raise _missing(state, prefix, name, owner)
    return value


def copy_into(target: torch.Tensor | None, source: Any, what: str) -> None:
    """Copy the student's tensor ``source`` into ``target``; both absent (no bias) is fine.

    ``what`` names the student's parameter (``MultiHeadAttention.w_q.bias``).
    """
    if target is None:
        expect(
            source is None,
            f"`{what}` exists, but the layer should have been built without it (bias=False "
            "was asked for).",
            "Pass the constructor's `bias` argument on to every layer that has a bias.",
        )
        return
    expect(
        isinstance(source, torch.Tensor),
        f"`{what}` is missing, but the layer should have it (bias=True was asked for, or is the "
        "default).",
        "Pass the constructor's `bias` argument on to every layer that has a bias.",
    )
    if tuple(source.shape) != tuple(target.shape):
        if source.dim() == 2 and target.dim() == 2:
            message = (
                f"`{what.removesuffix('.weight')}` maps {source.shape[1]} -> {source.shape[0]} "
                f"features, expected {target.shape[1]} -> {target.shape[0]}."
            )
        else:
            message = f"`{what}` has shape {tuple(source.shape)}, expected {tuple(target.shape)}."
        raise CheckFailure(message, "Check the sizes you pass to each layer's constructor.")
    with torch.no_grad():
        target.copy_(source.detach().to(target.dtype))


def _optional(state: State, prefix: str, name: str) -> Any:
    return state.get(key(prefix, name))


def load_linear(target: nn.Linear, state: State, prefix: str, owner: str) -> None:
    """Copy the student's ``nn.Linear`` at ``prefix`` (weight, and bias if any) into ``target``."""
    weight = tensor(state, prefix, "weight", owner)
    copy_into(target.weight, weight, f"{owner}.{key(prefix, 'weight')}")
    copy_into(target.bias, _optional(state, prefix, "bias"), f"{owner}.{key(prefix, 'bias')}")


def norm_parameters(state: State, prefix: str, owner: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(gain, bias) of the student's LayerNorm at ``prefix``: ``weight`` and ``bias``, or for a
    hand-written one whose only entries are two vectors, those two in order (gain first, as
    ``a_2``/``b_2`` of the Annotated Transformer)."""
    weight, bias = _optional(state, prefix, "weight"), _optional(state, prefix, "bias")
    if isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor):
        return weight, bias
    start = f"{prefix}." if prefix else ""
    vectors = [
        v
        for k, v in state.items()
        if isinstance(k, str)
        and k.startswith(start)
        and "." not in k[len(start) :]
        and isinstance(v, torch.Tensor)
        and v.dim() == 1
    ]
    if len(vectors) == 2:
        return vectors[0], vectors[1]
    raise _missing(state, prefix, "weight" if weight is None else "bias", owner)


def load_norm(
    target: nn.LayerNorm, state: State, prefix: str, owner: str, eps: float | None = None
) -> None:
    """Copy the student's LayerNorm gain and bias into ``target``; ``eps`` (observed by the
    check as a plain number, when the module has one) replaces the target's."""
    weight, bias = norm_parameters(state, prefix, owner)
    copy_into(target.weight, weight, f"{owner}.{key(prefix, 'weight')}")
    copy_into(target.bias, bias, f"{owner}.{key(prefix, 'bias')}")
    if isinstance(eps, float):
        target.eps = eps


ATTENTION_NAMES = ("w_q", "w_k", "w_v", "w_o")


def load_attention(
    target: nn.MultiheadAttention,
    state: State,
    prefix: str,
    owner: str,
    names: Sequence[str] = ATTENTION_NAMES,
) -> None:
    """Pack the student's query, key and value projections (``names[:3]`` under ``prefix``)
    into ``target.in_proj_weight`` (rows q, then k, then v) and the output projection
    (``names[3]``) into ``target.out_proj``; biases likewise."""
    d = target.embed_dim
    for index, name in enumerate(names[:3]):
        rows = slice(index * d, (index + 1) * d)
        layer = key(prefix, name)
        weight = tensor(state, layer, "weight", owner)
        copy_into(target.in_proj_weight[rows], weight, f"{owner}.{layer}.weight")
        bias = None if target.in_proj_bias is None else target.in_proj_bias[rows]
        copy_into(bias, _optional(state, layer, "bias"), f"{owner}.{layer}.bias")
    load_linear(target.out_proj, state, key(prefix, names[3]), owner)


def torch_attention(
    state: State,
    d_model: int,
    heads: int,
    *,
    bias: bool = True,
    dtype: torch.dtype = torch.float32,
    owner: str = "MultiHeadAttention",
    prefix: str = "",
    dropout: float = 0.0,
) -> nn.MultiheadAttention:
    """``nn.MultiheadAttention`` (batch first, eval mode) carrying the student's weights."""
    twin = nn.MultiheadAttention(
        d_model, heads, dropout=dropout, bias=bias, batch_first=True, dtype=dtype
    )
    load_attention(twin, state, prefix, owner)
    return twin.eval()


def sinusoid_table(length: int, d_model: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), computed in float64."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / 10000.0 ** (two_i / d_model)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle[:, : d_model // 2])
    return table.to(dtype)


def is_dropout_of(got: torch.Tensor, clean: torch.Tensor, p: float) -> bool:
    """True when ``got`` looks like ``nn.Dropout(p)`` applied to ``clean`` in training mode:
    every entry is 0 or ``clean / (1 - p)``, and at least one nonzero entry was zeroed."""
    if not isinstance(got, torch.Tensor) or got.shape != clean.shape:
        return False
    got, clean = got.detach().double(), clean.detach().double()
    scale = clean.abs().max().item() + 1e-12
    zero = got.abs() <= 1e-6 * scale
    kept = (got - clean / (1 - p)).abs() <= 1e-5 * scale
    return bool((zero | kept).all()) and bool((zero & (clean.abs() > 1e-4 * scale)).any())
