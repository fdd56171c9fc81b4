"""The references and masks more than one check needs, computed on the trusted side: the
sinusoidal table (Vaswani et al., 2017, section 3.5: 4.1, and 5.4's embeddings) and attention
(section 3.2, by torch's own ``scaled_dot_product_attention``: 2.1, 2.4, 3.2 and notebook 05).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F


def sinusoid_table(length: int, d_model: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), computed in float64."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / 10000.0 ** (two_i / d_model)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle[:, : d_model // 2])
    return table.to(dtype)


def attention(
    query: Any, key: Any, value: Any, mask: Any = None, exact: bool = True
) -> tuple[Any, Any]:
    """(output, weights) returned in the inputs' dtype; a query whose keys are all masked gets
    zeros (recent torch does so itself, older versions give NaN). ``exact``: torch's attention
    in float64 (weights via identity values, softmax(...) @ I); else the text's formula in the
    inputs' own dtype, whose rounding at scores beyond 1e4 is what a float32 answer's is (3.2's
    query scaled by 1e4: a float64 reference there rejects right float32 answers)."""
    if not exact:
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = (
                scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
            )
        weights = scores.softmax(-1).nan_to_num(0.0)
        return weights @ value, weights
    q, k, v = query.double(), key.double(), value.double()
    mask = mask if mask is None or mask.dtype == torch.bool else mask.double()
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    eye = torch.eye(k.size(-2), dtype=torch.float64).expand(*k.shape[:-2], k.size(-2), k.size(-2))
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)
    return output.nan_to_num(0.0).to(value.dtype), weights.nan_to_num(0.0).to(query.dtype)


def multi_head(
    w: Mapping, p: str, query: Any, key: Any, value: Any, mask: Any, heads: int, exact: bool = True
) -> Any:
    """(output, per-head weights) of multi-head attention (section 3.2.2) with the weights ``w``
    named ``{p}w_q.weight`` ... (a bias may be absent): head h holds features h*d_k ...
    (h+1)*d_k - 1, and one mask (B, 1 or L_q, L_k) serves every head."""

    def project(name: str, t: torch.Tensor) -> torch.Tensor:
        bias = w.get(f"{p}{name}.bias")
        bias = None if bias is None else bias.to(t.dtype)
        return F.linear(t, w[f"{p}{name}.weight"].to(t.dtype), bias)

    q, k, v = (
        project(n, t).unflatten(-1, (heads, -1)).transpose(1, 2)
        for n, t in (("w_q", query), ("w_k", key), ("w_v", value))
    )
    mask = mask.unsqueeze(1) if getattr(mask, "ndim", 0) == 3 else mask
    out, weights = attention(q, k, v, mask, exact)
    return project("w_o", out.transpose(1, 2).flatten(2)), weights


def projections(p: str, d_model: int, d_k: int, bias: bool = True) -> dict[str, tuple]:
    """The parameters :func:`multi_head` reads (name: shape): w_q, w_k, w_v (d_k, d_model) and
    w_o (d_model, d_k), each with a bias unless ``bias`` is false."""
    shapes = {"w_q": (d_k, d_model), "w_k": (d_k, d_model), "w_v": (d_k, d_model)}
    shapes["w_o"] = (d_model, d_k)
    names = ("weight", "bias") if bias else ("weight",)
    return {f"{p}{n}.{k}": s if k == "weight" else s[:1] for n, s in shapes.items() for k in names}


def key_mask(lengths: list[int], width: int) -> torch.Tensor:
    """(B, 1, width) boolean padding mask, True on the first ``lengths[b]`` keys."""
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None])[:, None, :]


def causal(length: int) -> torch.Tensor:
    """(1, length, length) boolean causal mask: query i sees keys 0..i."""
    return torch.ones(length, length, dtype=torch.bool).tril()[None]
