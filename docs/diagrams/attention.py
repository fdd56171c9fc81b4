"""Notebook 02: scaled dot-product attention with its mask (Vaswani et al., 2017, eq. 1 and
Figure 2, redrawn with the shapes and names of ``scaled_dot_product_attention``)."""

from __future__ import annotations

from matplotlib.patches import Rectangle
from style import COLOURS, INK, SHAPE, Canvas


def causal_grid(canvas: Canvas, x0: float, y0: float, cell: float = 1.3, n: int = 5) -> None:
    """A small causal mask: query rows down, key columns across, True on and below the diagonal."""
    for i in range(n):  # row i is query i, drawn from the top
        for j in range(n):
            allowed = j <= i
            canvas.ax.add_patch(Rectangle(
                (x0 + j * cell, y0 + (n - 1 - i) * cell), cell, cell, zorder=3, lw=0.6,
                facecolor=COLOURS["softmax"] if allowed else COLOURS["mask"], edgecolor=INK))
    canvas.text(x0 + n * cell / 2, y0 - 1.0, "keys $j$ →", size=7.5, va="top")


def draw() -> Canvas:
    c = Canvas(74, 60)
    qx, kx, vx, y_in, mx = 10, 30, 62, 3, 20
    c.box(qx, y_in, 12, 4, "query  $Q$")
    c.box(kx, y_in, 12, 4, "key  $K$")
    c.box(vx, y_in, 12, 4, "value  $V$")
    c.box(mx, 14, 28, 4.2, r"MatMul  $Q K^\top$   (key.transpose(-2, -1))", "attn", size=9)
    c.arrow([(qx, y_in + 2), (qx, 11.9)], r"$(\dots, L_q, d_k)$", side="left")
    c.arrow([(kx, y_in + 2), (kx, 11.9)], r"$(\dots, L_k, d_k)$")
    c.box(mx, 23, 17, 4.2, r"Scale  $\div\sqrt{d_k}$", "attn")
    c.arrow([(mx, 16.1), (mx, 20.9)], r"scores $(\dots, L_q, L_k)$")
    c.box(mx, 32, 17, 4.2, "Mask (optional)", "mask")
    c.arrow([(mx, 25.1), (mx, 29.9)])
    c.box(mx, 41, 17, 4.2, "Softmax  (dim=-1)", "softmax")
    c.arrow([(mx, 34.1), (mx, 38.9)], r"$(\dots, L_q, L_k)$")
    ox = 38
    c.box(ox, 51, 20, 4.2, "MatMul  weights · $V$", "attn")
    c.arrow([(mx, 43.1), (mx, 46.5), (ox - 5, 46.5), (ox - 5, 48.9)],
            r"weights $(\dots, L_q, L_k)$", at=0.45)
    c.arrow([(vx, y_in + 2), (vx, 46.5), (ox + 5, 46.5), (ox + 5, 48.9)],
            r"$(\dots, L_k, d_v)$", at=0.5)
    c.arrow([(ox, 53.1), (ox, 57.5)], r"output $(\dots, L_q, d_v)$")
    c.text(ox - 1.5, 55.3, "returns (output, weights)", size=8, ha="right", style="italic",
           colour="#555555")
    # What the mask does, beside its box: a causal mask as the example.
    causal_grid(c, 40, 28.5)
    c.text(43.3, 36.2, "e.g. causal mask (1, L, L), row $i$ = query $i$", size=7.5, va="bottom")
    c.arrow([(38.5, 32), (mx + 8.6, 32)], "broadcast to", size=7, at=0.5)
    c.text(38, 24.5, "boolean: True = may attend,\nFalse → score $-\\infty$;\n"
           "float $M$: added to the scores", size=7.5, ha="left", va="top", colour=SHAPE)
    c.text(30, 42, "a row with every key masked:\nzero weights, zero output", size=7.5,
           ha="left", colour="#555555", style="italic")
    return c


NOTEBOOK = "02_attention"  # the solution notebook that shows it
DIAGRAMS = {"attention.png": draw}
