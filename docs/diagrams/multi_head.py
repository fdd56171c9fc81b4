"""Notebook 03: multi-head attention, the heads split from d_model and merged back
(Vaswani et al., 2017, section 3.2.2, drawn with the shapes of ``MultiHeadAttention``)."""

from __future__ import annotations

from matplotlib.patches import Rectangle
from style import INK, Canvas

HEAD_COLOURS = ["#fbd9a8", "#bfe3f2", "#cdeccb", "#d9cdf0"]


def strip(c: Canvas, x0: float, y0: float, cell: float, heads: int = 4, per: int = 3) -> None:
    """One token's d_model features, coloured by the head that will own them."""
    for h in range(heads):
        for f in range(per):
            c.ax.add_patch(Rectangle((x0 + (h * per + f) * cell, y0), cell, cell, lw=0.5,
                                     facecolor=HEAD_COLOURS[h], edgecolor=INK, zorder=3))


def draw() -> Canvas:
    c = Canvas(84, 74)
    x = 22
    c.box(x - 9, 3, 14, 4, "query")
    c.box(x + 9, 3, 18, 4, "key, value")
    c.box(x, 13, 34, 4.2, "w_q, w_k, w_v:  Linear(d_model, d_model)", "linear", size=9)
    c.arrow([(x - 9, 5), (x - 9, 10.9)], "(B, Lq, d_model)", side="left")
    c.arrow([(x + 9, 5), (x + 9, 10.9)], "(B, Lk, d_model)")
    c.box(x, 25, 34, 6.5, "split_heads\nreshape (B, L, H, d_k), transpose(1, 2)", "data", size=9)
    c.arrow([(x, 15.1), (x, 21.75)], "(B, L, d_model),  d_model = H · d_k")
    c.box(x, 37.5, 34, 6.5, "scaled_dot_product_attention\n(every head at once)", "attn",
          size=9)
    c.arrow([(x, 28.25), (x, 34.25)], "(B, H, L, d_k)  per query, key, value")
    c.box(x, 50, 34, 6.5, "merge_heads\ntranspose(1, 2), reshape (B, Lq, H · d_k)", "data",
          size=9)
    c.arrow([(x, 40.75), (x, 46.75)], "(B, H, Lq, d_k)")
    c.box(x, 61, 34, 4.2, "w_o:  Linear(d_model, d_model)", "linear", size=9)
    c.arrow([(x, 53.25), (x, 58.9)], "(B, Lq, d_model)")
    c.arrow([(x, 63.1), (x, 69.5)], "output (B, Lq, d_model)")
    c.text(x + 1, 71.2, "returns (output, weights (B, H, Lq, Lk))", size=8, va="bottom",
           ha="left", style="italic", colour="#555555")
    # The mask gets a head axis so one mask serves every head.
    c.box(62, 37.5, 27, 6.5, "mask.unsqueeze(1)\n(B, 1, Lq or 1, Lk)", "mask", size=8.5)
    c.arrow([(48.5, 37.5), (x + 17.2, 37.5)])
    c.text(62, 43.2, "mask (B, Lq or 1, Lk), True = may attend", size=7.5, va="bottom")
    # What split_heads does to one token's features.
    cell = 1.5
    c.text(62, 26.5, "one token, d_model = 12 features:", size=8, va="bottom")
    strip(c, 53, 23.5, cell)
    c.arrow([(62, 22.5), (62, 19.8)], "H = 4 heads of d_k = 3", size=7.5)
    for h in range(4):
        strip_y = 16.5 - h * 2.2
        c.ax.add_patch(Rectangle((59.75, strip_y), 3 * cell, cell, lw=0.5,
                                 facecolor=HEAD_COLOURS[h], edgecolor=INK, zorder=3))
        c.text(58.8, strip_y + cell / 2, f"head {h}", size=7, ha="right")
    return c


NOTEBOOK = "03_multi_head_attention"  # the solution notebook that shows it
DIAGRAMS = {"multi_head.png": draw}
