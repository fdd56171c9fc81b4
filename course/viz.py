"""Plots shared by several notebooks: heatmaps, attention grids, learning curves, confusion
matrices. Each function draws on a given Axes (or a new figure) and returns what it drew on."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Circle, FancyBboxPatch


def _to_numpy(values) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().float().cpu().numpy()
    return np.asarray(values)


def heatmap(
    matrix,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
    vmin: float | None = None,
    vmax: float | None = None,
) -> plt.Axes:
    """Show a 2-D array; rows are queries (y axis) and columns keys (x axis) by convention."""
    data = _to_numpy(matrix)
    if data.ndim != 2:
        raise ValueError(f"heatmap needs a 2-D array, got shape {data.shape}")
    if ax is None:
        _, ax = plt.subplots(
            figsize=(max(3.0, 0.35 * data.shape[1] + 1.5), max(2.5, 0.35 * data.shape[0] + 1.0))
        )
    # "nearest": one flat square per entry, and far smaller PNGs than smoothed images.
    image = ax.imshow(data, cmap=cmap, aspect="auto", interpolation="nearest", vmin=vmin, vmax=vmax)
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), list(x_labels), rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), list(y_labels))
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def attention_grid(
    weights,
    tokens: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    ncols: int = 4,
    cell_size: float = 2.2,
) -> plt.Figure:
    """One small heatmap per head for ``weights`` of shape (heads, L, L)."""
    data = _to_numpy(weights)
    if data.ndim != 3:
        raise ValueError(f"attention_grid needs (heads, L, L) weights, got shape {data.shape}")
    heads = data.shape[0]
    nrows = -(-heads // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(cell_size * ncols, cell_size * nrows), squeeze=False
    )
    for index, ax in enumerate(axes.flat):
        if index >= heads:
            ax.axis("off")
            continue
        ax.imshow(data[index], cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_title(titles[index] if titles else f"head {index}", fontsize=8)
        show = tokens is not None and len(tokens) <= 16
        ax.set_xticks(
            range(len(tokens)) if show else [],
            list(tokens) if show else [],
            rotation=90,
            fontsize=6,
        )
        ax.set_yticks(range(len(tokens)) if show else [], list(tokens) if show else [], fontsize=6)
    fig.tight_layout()
    return fig


def learning_curves(
    history: dict[str, Sequence[float]],
    xlabel: str = "step",
    ax: plt.Axes | None = None,
    title: str | None = None,
    *,
    ylabel: str,
) -> plt.Axes:
    """Plot each named series (e.g. ``{"train loss": [...], "val accuracy": [...]}``).

    ``ylabel`` is required: the series' names go to the legend, and a reader still needs to
    know what the y axis measures (a loss per token, per word, an accuracy).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for name, values in history.items():
        ax.plot(
            range(1, len(values) + 1),
            list(values),
            label=name,
            marker="." if len(values) < 40 else None,
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return ax


def confusion_matrix_plot(
    y_true,
    y_pred,
    labels: Sequence[str],
    normalize: bool = True,
    ax: plt.Axes | None = None,
    title: str | None = None,
) -> plt.Axes:
    """Confusion matrix (rows = true label, columns = prediction), row-normalised by default."""
    from sklearn.metrics import confusion_matrix

    matrix = confusion_matrix(_to_numpy(y_true), _to_numpy(y_pred), labels=list(range(len(labels))))
    if normalize:
        matrix = matrix / np.clip(matrix.sum(axis=1, keepdims=True), 1, None)
    if ax is None:
        size = max(4.0, 0.4 * len(labels) + 1.5)
        _, ax = plt.subplots(figsize=(size, size))
    heatmap(
        matrix,
        x_labels=labels,
        y_labels=labels,
        ax=ax,
        cmap="Blues",
        title=title or ("confusion matrix (row-normalised)" if normalize else "confusion matrix"),
    )
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    return ax


# --- the architecture diagram of notebook 05 ---------------------------------------------

_COLOURS = {
    "embed": "#f6cfcf",  # embeddings
    "attn": "#fbd9a8",  # attention
    "ffn": "#bfe3f2",  # feed-forward
    "norm": "#f2efa2",  # LayerNorm
    "linear": "#d9cdf0",  # output projection
    "softmax": "#cdeccb",  # softmax
}


def _box(ax: plt.Axes, x: float, y: float, w: float, h: float, text: str, kind: str) -> None:
    """A rounded box centred on (x, y)."""
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=1.2",
            facecolor=_COLOURS[kind], edgecolor="#333333", linewidth=1.1, zorder=3,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9.5, zorder=4)


def _add_node(ax: plt.Axes, x: float, y: float, radius: float = 1.6) -> None:
    """The residual addition: a circle with a plus sign."""
    ax.add_patch(Circle((x, y), radius, facecolor="white", edgecolor="#333333", lw=1.1, zorder=3))
    ax.plot([x - radius * 0.6, x + radius * 0.6], [y, y], color="#333333", lw=1.1, zorder=4)
    ax.plot([x, x], [y - radius * 0.6, y + radius * 0.6], color="#333333", lw=1.1, zorder=4)


def _line(ax: plt.Axes, points: Sequence[tuple[float, float]], color: str = "#333333") -> None:
    """A polyline through ``points`` with an arrow head on its last segment."""
    xs, ys = zip(*points, strict=True)
    ax.plot(xs[:-1], ys[:-1], color=color, lw=1.2, zorder=2)
    ax.annotate("", xy=points[-1], xytext=points[-2], zorder=2,
                arrowprops={"arrowstyle": "-|>,head_length=0.5,head_width=0.25", "color": color,
                            "lw": 1.2, "shrinkA": 0, "shrinkB": 0})


def _sublayer(ax: plt.Axes, x: float, y: float, w: float, label: str, kind: str, side: int,
              height: float = 6.0) -> tuple[float, float]:
    """Draw one pre-LN sub-layer, x + sublayer(LayerNorm(x)), upwards from height y.

    ``side`` (-1 left, +1 right) is where the residual path runs past the two boxes. Returns
    the height of its top (the residual addition) and of the centre of the sub-layer's box.
    """
    fork, norm_y = y + 1.8, y + 7.0
    body_y = norm_y + 2.0 + 2.5 + height / 2
    add_y = body_y + height / 2 + 3.5
    _line(ax, [(x, y), (x, norm_y - 2.0)])
    _box(ax, x, norm_y, w * 0.7, 4.0, "LayerNorm", "norm")
    _line(ax, [(x, norm_y + 2.0), (x, body_y - height / 2)])
    _box(ax, x, body_y, w, height, label, kind)
    _line(ax, [(x, body_y + height / 2), (x, add_y - 1.6)])
    _add_node(ax, x, add_y)
    outer = x + side * (w / 2 + 3.0)
    ax.plot([x], [fork], "o", color="#333333", ms=3.5, zorder=4)
    _line(ax, [(x, fork), (outer, fork), (outer, add_y), (x + side * 1.6, add_y)])
    return add_y + 1.6, body_y


def transformer_diagram() -> plt.Figure:
    """The encoder-decoder Transformer as notebook 05 builds it (pre-LN), drawn with matplotlib.

    Modelled on Figure 1 of Vaswani et al. (2017), redrawn: the LayerNorm sits in front of
    each sub-layer (pre-LN) instead of after each addition, and each stack ends with the final
    LayerNorm that pre-LN needs. N is the number of blocks (``num_layers``).
    """
    fig, ax = plt.subplots(figsize=(8.6, 10.4))
    width, enc_x, dec_x = 26.0, 27.0, 75.0

    def stack_input(x: float, title: str, caption: str) -> float:
        ax.text(x, 1.5, caption, ha="center", va="center", fontsize=9.5, style="italic")
        ax.text(x, -3.0, title, ha="center", va="center", fontsize=13, fontweight="bold")
        _line(ax, [(x, 3.5), (x, 6.0)])
        _box(ax, x, 9.0, width, 6.0, "Token embedding", "embed")
        _line(ax, [(x, 12.0), (x, 16.4)])
        _add_node(ax, x, 18.0)
        label_x = x - width / 2 + 1.5
        ax.text(label_x, 18.0, "positional\nencoding", ha="right", va="center", fontsize=8.5)
        _line(ax, [(label_x + 0.6, 18.0), (x - 1.6, 18.0)])
        return 19.6  # the top of the addition

    def repeat_frame(x: float, bottom: float, top: float, side: int) -> None:
        left = x - width / 2 - 5.5
        ax.add_patch(FancyBboxPatch(
            (left, bottom), width + 11.0, top - bottom, boxstyle="round,pad=0,rounding_size=2",
            facecolor="#f4f4f4", edgecolor="#777777", lw=1.0, zorder=1))
        label_x = left - 1.2 if side < 0 else left + width + 11.0 + 1.2
        ax.text(label_x, (bottom + top) / 2, "N×", ha="right" if side < 0 else "left",
                va="center", fontsize=13, fontweight="bold")

    # Encoder (left): residual paths on the left.
    y = stack_input(enc_x, "Encoder", "source tokens")
    frame_bottom = y + 0.9
    y, _ = _sublayer(ax, enc_x, y, width, "Multi-head\nself-attention", "attn", -1, 7.0)
    y, _ = _sublayer(ax, enc_x, y, width, "Feed-forward", "ffn", -1)
    repeat_frame(enc_x, frame_bottom, y + 1.5, -1)
    _line(ax, [(enc_x, y), (enc_x, y + 4.0)])
    _box(ax, enc_x, y + 6.0, width * 0.7, 4.0, "final LayerNorm", "norm")
    memory_top = y + 8.0

    # Decoder (right): residual paths on the right.
    y = stack_input(dec_x, "Decoder", "target tokens, shifted right (<bos> first)")
    frame_bottom = y + 0.9
    y, _ = _sublayer(ax, dec_x, y, width, "Masked multi-head\nself-attention (causal)",
                     "attn", +1, 7.0)
    y, cross_y = _sublayer(ax, dec_x, y, width, "Multi-head\ncross-attention", "attn", +1, 7.0)
    y, _ = _sublayer(ax, dec_x, y, width, "Feed-forward", "ffn", +1)
    repeat_frame(dec_x, frame_bottom, y + 1.5, +1)
    _line(ax, [(dec_x, y), (dec_x, y + 4.0)])
    _box(ax, dec_x, y + 6.0, width * 0.7, 4.0, "final LayerNorm", "norm")
    _line(ax, [(dec_x, y + 8.0), (dec_x, y + 11.0)])
    _box(ax, dec_x, y + 13.5, width * 0.7, 5.0, "Linear", "linear")
    _line(ax, [(dec_x, y + 16.0), (dec_x, y + 19.0)])
    _box(ax, dec_x, y + 21.5, width * 0.7, 5.0, "Softmax", "softmax")
    _line(ax, [(dec_x, y + 24.0), (dec_x, y + 27.0)])
    ax.text(dec_x, y + 28.5, "next-token probabilities", ha="center", va="bottom",
            fontsize=9.5, style="italic")

    # The memory: the encoder's output feeds every decoder block's cross-attention.
    gap_x = (enc_x + width / 2 + 5.5 + dec_x - width / 2 - 5.5) / 2
    _line(ax, [(enc_x, memory_top), (enc_x, memory_top + 3.0), (gap_x, memory_top + 3.0),
               (gap_x, cross_y), (dec_x - width / 2, cross_y)], color="#b5562a")
    ax.text((enc_x + gap_x) / 2, memory_top + 3.8,
            "memory: keys and values\nfor every cross-attention", ha="center", va="bottom",
            fontsize=8.5, color="#b5562a")

    ax.set_xlim(-6, 108)
    ax.set_ylim(-6, max(memory_top + 12.0, y + 32.0))
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    return fig
