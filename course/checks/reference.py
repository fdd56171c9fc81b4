"""PyTorch twins of the student's layers, shared by the checks of notebooks 03 to 05.

A check builds PyTorch's own layer (``nn.MultiheadAttention``, ``nn.Linear``, ``nn.LayerNorm``)
and copies the student's weights into it, so that both compute with the same numbers and any
difference comes from the computation itself. Every copy names the student's attribute it
read, so a missing or misshapen sub-module is reported as such. The sinusoidal table of
Vaswani et al. (2017, section 3.5) stands in for the student's positional-encoding module.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from course.check import CheckFailure, expect


def attribute(module: Any, path: str, owner: str) -> Any:
    """``module.<path>`` (dotted) or a CheckFailure that names the missing attribute."""
    obj = module
    for name in path.split("."):
        if not hasattr(obj, name):
            raise CheckFailure(
                f"`{owner}` has no attribute `{path}`; the check copies reference weights into "
                "the sub-modules by name.",
                "Keep the sub-modules and names that `__init__` builds (see the docstring).",
            )
        obj = getattr(obj, name)
    return obj


def copy_into(target: torch.Tensor | None, source: Any, what: str) -> None:
    """Copy the student's tensor ``source`` into ``target``; both absent (no bias) is fine."""
    if target is None:
        expect(
            source is None,
            f"`{what}` exists, but the layer was built without it (bias=False).",
            "Pass bias=bias to every nn.Linear.",
        )
        return
    expect(
        isinstance(source, torch.Tensor),
        f"`{what}` should be a tensor (a parameter), got {type(source).__name__}.",
        "Build the layers with bias=True (the default) and keep the names from `__init__`.",
    )
    expect(
        tuple(source.shape) == tuple(target.shape),
        f"`{what}` has shape {tuple(source.shape)}, expected {tuple(target.shape)}.",
        "Check the sizes you pass to nn.Linear / nn.LayerNorm (d_model, d_ff).",
    )
    with torch.no_grad():
        target.copy_(source.detach().to(target.dtype))


def load_linear(target: nn.Linear, student: Any, path: str, owner: str) -> None:
    """Copy ``student.<path>``'s weight and bias into ``target``."""
    layer = attribute(student, path, owner)
    copy_into(target.weight, getattr(layer, "weight", None), f"{owner}.{path}.weight")
    copy_into(target.bias, getattr(layer, "bias", None), f"{owner}.{path}.bias")


def load_norm(target: nn.LayerNorm, student: Any, path: str, owner: str) -> None:
    """Copy ``student.<path>``'s gain and bias (and eps, which is not what is tested)."""
    norm = attribute(student, path, owner)
    weight, bias, eps = norm_parameters(norm)
    copy_into(target.weight, weight, f"{owner}.{path}.weight")
    copy_into(target.bias, bias, f"{owner}.{path}.bias")
    target.eps = eps if eps is not None else target.eps


def norm_parameters(norm: Any) -> tuple[Any, Any, float | None]:
    """(gain, bias, eps) of a LayerNorm, or of a hand-written one whose only parameters are two
    vectors (gain first, as in ``a_2``/``b_2`` of the Annotated Transformer)."""
    weight, bias = getattr(norm, "weight", None), getattr(norm, "bias", None)
    if weight is None and bias is None and isinstance(norm, nn.Module):
        vectors = [p for p in norm.parameters() if p.dim() == 1]
        if len(vectors) == 2:
            weight, bias = vectors
    eps = getattr(norm, "eps", None)
    return weight, bias, eps if isinstance(eps, float) else None


def load_attention(target: nn.MultiheadAttention, attention: Any, owner: str) -> None:
    """Pack the student's w_q, w_k, w_v into ``in_proj_weight`` (rows q, then k, then v) and
    w_o into ``out_proj``; biases likewise when the target has them."""
    d = target.embed_dim
    for index, name in enumerate(("w_q", "w_k", "w_v")):
        linear = attribute(attention, name, owner)
        rows = slice(index * d, (index + 1) * d)
        weight = getattr(linear, "weight", None)
        copy_into(target.in_proj_weight[rows], weight, f"{owner}.{name}.weight")
        bias = None if target.in_proj_bias is None else target.in_proj_bias[rows]
        copy_into(bias, getattr(linear, "bias", None), f"{owner}.{name}.bias")
    load_linear(target.out_proj, attention, "w_o", owner)


def torch_attention(
    attention: Any, d_model: int, heads: int, bias: bool, dtype: torch.dtype, owner: str
) -> nn.MultiheadAttention:
    """``nn.MultiheadAttention`` (batch first, eval mode) carrying the student's weights."""
    twin = nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True, dtype=dtype)
    load_attention(twin, attention, owner)
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
