"""The drawing kit every course diagram uses: one canvas, boxes, arrows with shapes on them.

Coordinates are in units of 0.1 inch (a canvas 80 units wide is 8 inches), so type sizes
and line widths look the same in every diagram. The figure is opaque white: a light panel
baked into the image, which stays readable on a dark page (JupyterLab's and Colab's dark
themes, the website's dark mode) without any help from the page.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # rendering only: no window, the same on every machine

import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)
from matplotlib.patches import Circle, FancyBboxPatch  # noqa: E402
from PIL import Image  # noqa: E402

# One colour per kind of layer, the same in every diagram (and as notebook 05 drew them).
COLOURS = {
    "embed": "#f6cfcf",  # embeddings and token ids
    "attn": "#fbd9a8",  # attention
    "ffn": "#bfe3f2",  # feed-forward
    "norm": "#f2efa2",  # LayerNorm
    "linear": "#d9cdf0",  # linear maps and heads
    "softmax": "#cdeccb",  # softmax and probabilities
    "data": "#ffffff",  # tensors and text
    "frozen": "#e4e4e4",  # weights that do not train
    "mask": "#d7d7d7",  # masked entries
}
INK = "#222222"
SHAPE = "#1f5f99"  # shapes written on arrows
ACCENT = "#b5562a"  # the one path a diagram is about (memory, cache, low-rank update)
PANEL = "#ffffff"
DPI = 110
COLOURS_IN_PNG = 32  # a palette this size keeps anti-aliased text clean and the files small


class Canvas:
    """A blank figure ``width`` x ``height`` units (0.1 inch each), origin bottom left."""

    def __init__(self, width: float, height: float) -> None:
        self.fig = plt.figure(figsize=(width / 10, height / 10), facecolor=PANEL)
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.axis("off")

    def box(self, x: float, y: float, w: float, h: float, text: str = "", kind: str = "data",
            size: float = 9.5, dashed: bool = False, edge: str = INK, **text_kw) -> None:
        """A rounded box centred on (x, y) with ``text`` in it."""
        self.ax.add_patch(FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.8",
            facecolor=COLOURS[kind], edgecolor=edge, linewidth=1.0, zorder=3,
            linestyle="--" if dashed else "-"))
        if text:
            self.text(x, y, text, size=size, **text_kw)

    def frame(self, x0: float, y0: float, x1: float, y1: float, label: str = "",
              colour: str = "#f3f3f3", edge: str = "#888888") -> None:
        """A light background frame (a block repeated N times, a group of steps)."""
        self.ax.add_patch(FancyBboxPatch(
            (x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=1.5",
            facecolor=colour, edgecolor=edge, linewidth=0.9, zorder=1))
        if label:
            self.text(x0 + 1.0, y1 - 1.2, label, size=8.5, ha="left", va="top",
                      colour="#555555", style="italic")

    def text(self, x: float, y: float, text: str, size: float = 9.5, colour: str = INK,
             ha: str = "center", va: str = "center", **kw) -> None:
        self.ax.text(x, y, text, fontsize=size, color=colour, ha=ha, va=va, zorder=5, **kw)

    def arrow(self, points: Sequence[tuple[float, float]], label: str = "",
              side: str = "right", colour: str = INK, at: float = 0.5, head: bool = True,
              dashed: bool = False, size: float = 8.5) -> None:
        """A polyline through ``points``, an arrow head on the last segment, ``label`` (a
        shape, usually) beside the segment that is longest, ``at`` of the way along it."""
        xs, ys = zip(*points, strict=True)
        style = "--" if dashed else "-"
        if head:
            self.ax.plot(xs[:-1], ys[:-1], color=colour, lw=1.1, zorder=2, ls=style)
            self.ax.annotate("", xy=points[-1], xytext=points[-2], zorder=2, arrowprops={
                "arrowstyle": "-|>,head_length=0.45,head_width=0.22", "color": colour,
                "lw": 1.1, "shrinkA": 0, "shrinkB": 0, "linestyle": style})
        else:
            self.ax.plot(xs, ys, color=colour, lw=1.1, zorder=2, ls=style)
        if label:
            segments = list(zip(points[:-1], points[1:], strict=True))
            (x0, y0), (x1, y1) = max(
                segments, key=lambda s: abs(s[1][0] - s[0][0]) + abs(s[1][1] - s[0][1]))
            mx, my = x0 + (x1 - x0) * at, y0 + (y1 - y0) * at
            if abs(x1 - x0) < abs(y1 - y0):  # vertical: the label to one side
                offset = 0.8 if side == "right" else -0.8
                self.text(mx + offset, my, label, size=size, colour=SHAPE,
                          ha="left" if side == "right" else "right")
            else:  # horizontal: the label above (or below)
                offset = 0.7 if side != "below" else -0.7
                self.text(mx, my + offset, label, size=size, colour=SHAPE,
                          va="bottom" if side != "below" else "top")

    def add(self, x: float, y: float, radius: float = 1.2, sign: str = "+") -> None:
        """A circled operator: the residual addition (+) or an element-wise product (×)."""
        self.ax.add_patch(Circle((x, y), radius, facecolor=PANEL, edgecolor=INK, lw=1.0,
                                 zorder=3))
        self.text(x, y - 0.05, sign, size=11)

    def dot(self, x: float, y: float) -> None:
        """A fork: the same tensor goes two ways."""
        self.ax.plot([x], [y], "o", color=INK, ms=3.2, zorder=4)


def png(canvas: Canvas) -> bytes:
    """The canvas as a compact, reproducible PNG (palette colours, no timestamp)."""
    buffer = io.BytesIO()
    canvas.fig.savefig(buffer, format="png", dpi=DPI, facecolor=PANEL,
                       metadata={"Software": None})
    plt.close(canvas.fig)
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    small = image.quantize(colors=COLOURS_IN_PNG, method=Image.Quantize.MEDIANCUT, dither=0)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return out.getvalue()
