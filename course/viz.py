"""Plots shared by several notebooks: heatmaps, attention grids, learning curves, confusion
matrices. Each function draws on a given Axes (or a new figure) and returns what it drew on."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch


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


def label_ends(
    ax: plt.Axes,
    ends: dict[str, tuple[float, float]],
    colours: dict[str, str],
    texts: dict[str, str] | None = None,
    gap: float = 12.0,
) -> list:
    """Write each curve's label next to its last point, ``ends[name] = (x, y)``, in its colour.

    Direct labels instead of a legend, so that the eye goes from a curve to its name without a
    detour. ``texts[name]`` is the label (the name itself by default). A curve that ends where
    another goes on (a shorter run) gets its label up and to the left of its last point, since
    to the right it would sit on the longer curve (and right above it, on an error bar there);
    the others get theirs to the right. Labels that would overlap in one column are pushed apart
    by ``gap`` points, keeping their order. Call it once the axes' limits and layout are final:
    it places the labels in points.
    """
    last = max(x for x, _ in ends.values())
    columns: dict[tuple[float, bool], list[tuple[float, str]]] = {}
    for name, (x, y) in ends.items():
        columns.setdefault((x, x >= last), []).append((y, name))
    points_per_pixel = 72 / ax.figure.dpi
    labels = []
    for (x, right), entries in columns.items():
        entries.sort()
        heights = [ax.transData.transform((x, y))[1] * points_per_pixel for y, _ in entries]
        spread = heights[:1]
        for height in heights[1:]:
            spread.append(max(height, spread[-1] + gap))
        for (y, name), height, moved in zip(entries, heights, spread, strict=True):
            shift = moved - height
            offset, ha, va = (
                ((8, shift), "left", "center") if right else ((-6, 6 + shift), "right", "bottom")
            )
            text = (texts or {}).get(name, name)
            labels.append(
                ax.annotate(
                    text,
                    (x, y),
                    xytext=offset,
                    textcoords="offset points",
                    ha=ha,
                    va=va,
                    color=colours[name],
                )
            )
    return labels
