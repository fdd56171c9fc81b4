"""The references more than one check needs, computed on the trusted side.

The sinusoidal table of Vaswani et al. (2017, section 3.5), in float64: notebook 04's check of
4.1 and notebook 05's encoder (which adds it to its embeddings) both compare with it.
"""

from __future__ import annotations

import torch


def sinusoid_table(length: int, d_model: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), computed in float64."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / 10000.0 ** (two_i / d_model)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle[:, : d_model // 2])
    return table.to(dtype)
