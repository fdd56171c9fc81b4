"""course.env (device, seeding, runtime line) and course.viz (the shared plots)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
import torch

from course import env, viz

matplotlib.use("Agg")


def test_setup_seeds_everything_and_prints_one_line(capsys):
    device = env.setup(seed=3)
    first = (torch.rand(2), np.random.rand(2))
    env.setup(seed=3, quiet=True)
    second = (torch.rand(2), np.random.rand(2))
    assert torch.equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and f"device {device.type}" in line and "seed 3" in line


def test_course_device_forces_the_device(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert env.pick_device() == torch.device("cpu")
    assert not env.is_gpu(env.pick_device())


def test_heatmap_and_attention_grid_draw_what_they_are_given():
    ax = viz.heatmap(torch.eye(3), ["a", "b", "c"], ["x", "y", "z"], title="t", vmin=0, vmax=1)
    assert ax.images[0].get_array().shape == (3, 3) and ax.get_title() == "t"
    fig = viz.attention_grid(torch.rand(5, 4, 4), list("abcd"), ncols=4)
    assert sum(a.axison for a in fig.axes) == 5  # the 3 unused cells are hidden
    with pytest.raises(ValueError, match="2-D"):
        viz.heatmap(torch.rand(2, 2, 2))
    with pytest.raises(ValueError, match="heads, L, L"):
        viz.attention_grid(torch.rand(4, 4))


def test_learning_curves_and_confusion_matrix():
    ax = viz.learning_curves({"loss": [3.0, 2.0, 1.0], "acc": [0.1, 0.5, 0.9]})
    assert [line.get_label() for line in ax.get_lines()] == ["loss", "acc"]
    ax = viz.confusion_matrix_plot([0, 1, 1, 2], [0, 1, 2, 2], ["a", "b", "c"])
    matrix = ax.images[0].get_array()
    assert np.allclose(matrix.sum(axis=1), 1.0) and matrix[1, 2] == 0.5
