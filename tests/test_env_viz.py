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
    ax = viz.learning_curves({"loss": [3.0, 2.0, 1.0], "acc": [0.1, 0.5, 0.9]}, ylabel="value")
    assert [line.get_label() for line in ax.get_lines()] == ["loss", "acc"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("step", "value")  # both axes say what they show
    with pytest.raises(TypeError, match="ylabel"):
        viz.learning_curves({"loss": [1.0]})  # a curve without a y label is a caller's bug
    ax = viz.confusion_matrix_plot([0, 1, 1, 2], [0, 1, 2, 2], ["a", "b", "c"])
    matrix = ax.images[0].get_array()
    assert np.allclose(matrix.sum(axis=1), 1.0) and matrix[1, 2] == 0.5


# --- precision: bf16 autocast only where the CPU has native bf16 ------------------------

CPUINFO = {
    "x86 with AVX-512 BF16": ("flags\t\t: fpu sse avx2 avx512f avx512_bf16", True),
    "x86 with AMX": ("flags\t\t: fpu avx2 amx_bf16 amx_tile", True),
    "Arm with BF16": ("Features\t: fp asimd bf16 i8mm", True),
    "x86 AVX2 only": ("flags\t\t: fpu sse avx2 fma", False),
    "x86 AVX-512 without BF16": ("flags\t\t: avx512f avx512bw avx512vl", False),
    "no /proc/cpuinfo": ("", False),
}


@pytest.mark.parametrize("name", sorted(CPUINFO))
def test_native_bf16_is_read_from_the_cpu_flags(name, monkeypatch):
    monkeypatch.delenv("COURSE_BF16", raising=False)
    text, expected = CPUINFO[name]
    assert env.cpu_has_native_bf16(text) is expected


@pytest.mark.parametrize("native, expected", [(True, "bf16 autocast"), (False, "float32")])
def test_both_precision_paths(native, expected, monkeypatch):
    monkeypatch.setenv("COURSE_BF16", "1" if native else "0")
    cpu = torch.device("cpu")
    assert env.precision(cpu) == expected
    assert expected in env.describe_runtime(cpu)
    # the setup line says float32 first: code outside env.autocast (notebooks 00-05) runs in it
    assert "| precision float32" in env.describe_runtime(cpu)
    layer = torch.nn.Linear(4, 4)
    with env.autocast(cpu):
        out = layer(torch.randn(2, 4))
    assert out.dtype == (torch.bfloat16 if native else torch.float32)
    assert env.autocast_dtype(torch.device("meta")) is None  # never on another device type


@pytest.mark.parametrize("by_default", [False, True])
@pytest.mark.parametrize("native", [True, False])
def test_the_default_precision_follows_the_flag_and_the_setup_line_says_why(
    native, by_default, monkeypatch
):
    monkeypatch.delenv("COURSE_BF16", raising=False)
    monkeypatch.setattr(env, "cpu_has_native_bf16", lambda cpuinfo=None: native)
    monkeypatch.setattr(env, "BF16_BY_DEFAULT", by_default)
    cpu = torch.device("cpu")
    assert env.precision(cpu) == ("bf16 autocast" if native and by_default else "float32")
    line = env.describe_runtime(cpu)
    assert ("no native bf16 on this CPU" in line) == (not native)
    assert ("bf16 autocast is opt-in: COURSE_BF16=1" in line) == (native and not by_default)
    for forced in ("0", "1"):  # COURSE_BF16 decides whatever the CPU and the default
        monkeypatch.setenv("COURSE_BF16", forced)
        assert env.precision(cpu) == ("bf16 autocast" if forced == "1" else "float32")
        assert f"(COURSE_BF16={forced})" in env.describe_runtime(cpu)


def test_show_config_prints_name_value_lines_and_nested_settings(capsys):
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Inner:
        lr: float = 3e-3

    @dataclasses.dataclass(frozen=True)
    class Config:
        steps: int = 800
        name: str | None = None
        inner: Inner = Inner()

    env.show_config(dataclasses.replace(Config(), steps=10))
    assert capsys.readouterr().out == "steps = 10\nname = None\ninner.lr = 0.003\n"


def test_label_ends_puts_each_label_by_its_own_end_and_none_on_another():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ends = {"long a": (100, 0.860), "long b": (100, 0.861), "short": (50, 0.87)}
    colours = {"long a": "C0", "long b": "C1", "short": "C2"}
    for name, (x, y) in ends.items():
        ax.plot([0, x], [0.8, y], color=colours[name])
    ax.set(xlim=(0, 140), ylim=(0.78, 0.9))
    labels = viz.label_ends(ax, ends, colours, texts={"short": "short 87.0%"})
    renderer = fig.canvas.get_renderer()
    boxes = {label.get_text(): label.get_window_extent(renderer) for label in labels}
    assert set(boxes) == {"long a", "long b", "short 87.0%"}
    assert not boxes["long a"].overlaps(boxes["long b"])  # 0.001 apart: pushed apart
    assert boxes["long a"].y0 < boxes["long b"].y0  # in their order
    for label in labels:
        name = "short" if label.get_text().startswith("short") else label.get_text()
        assert label.get_color() == colours[name]
        point = ax.transData.transform(ends[name])
        box = boxes[label.get_text()]
        if name == "short":  # ends where the long curves go on: up and to the left
            assert box.x1 < point[0] and box.y0 > point[1]
        else:
            assert box.x0 > point[0]
    plt.close(fig)
