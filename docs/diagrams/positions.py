"""Notebook 04: where position enters. Sinusoidal (and learned) encodings are added to the
embeddings once; rotary embeddings (RoPE, Su et al., 2021) rotate queries and keys inside
every attention layer."""

from __future__ import annotations

import math

from style import ACCENT, INK, SHAPE, Canvas


def rotation(c: Canvas, cx: float, cy: float, r: float = 6.0) -> None:
    """One pair (x_2i, x_2i+1) turned by the angle m θ_i."""
    c.arrow([(cx - r - 1, cy), (cx + r + 1.5, cy)], colour="#999999", head=False)
    c.arrow([(cx, cy - 1), (cx, cy + r + 1.5)], colour="#999999", head=False)
    a0, a1 = math.radians(20), math.radians(70)
    c.arrow([(cx, cy), (cx + r * math.cos(a0), cy + r * math.sin(a0))])
    c.arrow([(cx, cy), (cx + r * math.cos(a1), cy + r * math.sin(a1))], colour=ACCENT)
    arc = [(cx + 3.2 * math.cos(a0 + (a1 - a0) * t / 12), cy + 3.2 * math.sin(a0 + (a1 - a0) * t / 12))
           for t in range(13)]
    c.arrow(arc, colour=ACCENT)
    c.text(cx + 4.0 * math.cos(0.8), cy + 3.6 * math.sin(0.8) + 0.3, r"$m\theta_i$", size=8.5,
           colour=ACCENT, ha="left")
    c.text(cx + r + 0.5, cy + r * math.sin(a0) + 0.3, r"$(x_{2i}, x_{2i+1})$", size=8,
           ha="left")
    c.text(cx + r * math.cos(a1) + 0.6, cy + r * math.sin(a1) + 0.4,
           r"$(x'_{2i}, x'_{2i+1})$", size=8, ha="left", colour=ACCENT)


def draw() -> Canvas:
    c = Canvas(118, 60)
    # Left: added to the input, once.
    x = 24
    c.text(x, 57, "Sinusoidal (or learned): added to the input", size=10, fontweight="bold")
    c.box(x, 4, 22, 4, "token ids (B, L)")
    c.arrow([(x, 6), (x, 10)])
    c.box(x, 12.5, 22, 5, "TokenEmbedding", "embed")
    c.arrow([(x, 15), (x, 22.8)], "(B, L, d_model)")
    c.add(x, 24.5, 1.6)
    c.box(x - 16, 33, 16, 7, "pe = sinusoidal_table\n(max_len, d_model)\nrow pos = $PE_{pos}$",
          "norm", size=8)
    c.arrow([(x - 16, 29.5), (x - 16, 24.5), (x - 1.6, 24.5)], "table[:L]  (L, d_model)",
            side="below", at=0.4)
    c.arrow([(x, 26.1), (x, 30)])
    c.box(x, 32.5, 12, 5, "dropout", "data", size=9)
    c.arrow([(x, 35), (x, 42.5)], "(B, L, d_model)")
    c.box(x, 45, 26, 5, "attention layers (notebook 05)", "attn", size=9)
    c.text(x, 51.5, "SinusoidalPositionalEncoding:  dropout(x + table[:L])\n"
           "LearnedPositionalEmbedding:  x + nn.Embedding(max_len, d_model)[0 … L-1]",
           size=8, colour=SHAPE, va="bottom")
    # Right: inside attention, on queries and keys only.
    x = 76
    c.ax.plot([50, 50], [3, 55], color="#bbbbbb", lw=0.8)
    c.text(x, 57, "Rotary (RoPE): queries and keys rotated", size=10, fontweight="bold")
    c.box(x, 4, 26, 4, "x  (…, L, d)")
    c.arrow([(x, 6), (x, 10)])
    c.box(x, 12.5, 30, 5, "w_q, w_k, w_v", "linear")
    for dx, name in ((-10, "q"), (0, "k")):
        c.arrow([(x + dx, 15), (x + dx, 20)], name, side="left")
        c.box(x + dx, 22.5, 9, 5, "apply_rope", "attn", size=8)
        c.arrow([(x + dx, 25), (x + dx, 40)])
    c.arrow([(x + 10, 15), (x + 10, 40)], "v (not rotated)")
    c.box(x, 42.5, 30, 5, "scaled_dot_product_attention", "attn", size=8.5)
    c.text(x, 50, r"score $(R_m q)^\top (R_n k) = q^\top R_{n-m}\, k$:"
           "\n depends on the offset $n - m$ only", size=8.5, colour=INK, va="bottom")
    rotation(c, 98, 24)
    c.text(104, 35, "apply_rope turns pair $i$ of the\ntoken at position $m$ by $m\\theta_i$,\n"
           r"$\theta_i = \mathrm{base}^{-2i/d}$", size=7.5)
    c.arrow([(93, 22.5), (x + 4.6, 22.5)], dashed=True, colour="#999999")
    return c


NOTEBOOK = "04_positional_encoding"  # the solution notebook that shows it
DIAGRAMS = {"positions.png": draw}
