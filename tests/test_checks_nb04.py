"""The checks of notebook 04 accept a correct solution and reject the stub and typical mistakes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course.check import FAILED, NOT_IMPLEMENTED, PASSED
from course.checks import nb04 as check

# --- 4.1 sinusoidal table --------------------------------------------------------------------


def _table(
    max_len, d_model, *, swap=False, exponent="2i", start=0, layout="interleaved", base=10000.0
):
    """A sinusoidal table with optional, deliberate mistakes."""
    position = torch.arange(start, start + max_len, dtype=torch.float64).unsqueeze(1)
    pair = torch.arange(0, (d_model + 1) // 2, dtype=torch.float64)  # i = 0, 1, 2, ...
    if exponent == "2i":
        angle = position / base ** (2 * pair / d_model)
    elif exponent == "i":  # 2i/d computed as i/d
        angle = position / base ** (pair / d_model)
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    if layout == "interleaved":
        table[:, 0::2] = first(angle)
        table[:, 1::2] = second(angle[:, : d_model // 2])
    elif layout == "halves":  # sines then cosines (tensor2tensor's layout, not the paper's)
        half = d_model // 2
        table[:, :half] = first(angle[:, :half])
        table[:, half:] = second(angle[:, :half])
    elif layout == "column_index":  # exponent from the column index j instead of its pair 2i
        column = torch.arange(d_model, dtype=torch.float64)
        angle = position / base ** (column / d_model)
        table = torch.where(column % 2 == 0, first(angle), second(angle))
    return table.float()


def table_correct(max_len, d_model):
    return _table(max_len, d_model)


def table_stub(max_len, d_model):
    raise NotImplementedError


def table_float32_angles(max_len, d_model):
    """The Annotated Transformer's table: angles computed in float32."""
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model)
    )
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)[:, : d_model // 2]
    return table


def table_odd_d_model_crashes(max_len, d_model):
    """Fills the cosine columns with every angle: a shape error when d_model is odd."""
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    angle = position / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


TABLE_WRONG = {
    "angles_in_float32": table_float32_angles,
    "odd_d_model_crashes": table_odd_d_model_crashes,
    "all_zeros": lambda n, d: torch.zeros(n, d),
    "sin_cos_swapped": lambda n, d: _table(n, d, swap=True),
    "exponent_i_over_d": lambda n, d: _table(n, d, exponent="i"),
    "exponent_from_column_index": lambda n, d: _table(n, d, layout="column_index"),
    "positions_start_at_1": lambda n, d: _table(n, d, start=1),
    "sines_then_cosines_halves": lambda n, d: _table(n, d, layout="halves"),
    "float64_returned": lambda n, d: _table(n, d).double(),
    "transposed": lambda n, d: _table(n, d).T.contiguous(),
    "base_1000": lambda n, d: _table(n, d, base=1000.0),
}


def test_table_correct_passes():
    assert check.sinusoidal_table(table_correct, raise_on_failure=False).status == PASSED


def test_table_stub_not_implemented():
    assert check.sinusoidal_table(table_stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", TABLE_WRONG)
def test_table_wrong_rejected(name):
    result = check.sinusoidal_table(TABLE_WRONG[name], raise_on_failure=False)
    assert result.status == FAILED, name


def test_table_messages_name_the_mistake():
    swapped = check.sinusoidal_table(TABLE_WRONG["sin_cos_swapped"], raise_on_failure=False)
    assert "swapped" in swapped.message
    shifted = check.sinusoidal_table(TABLE_WRONG["positions_start_at_1"], raise_on_failure=False)
    assert "start at 0" in shifted.message
    halves = check.sinusoidal_table(
        TABLE_WRONG["sines_then_cosines_halves"], raise_on_failure=False
    )
    assert "interleaves" in halves.message
    zeros = check.sinusoidal_table(TABLE_WRONG["all_zeros"], raise_on_failure=False)
    assert "all zeros" in zeros.message and "halves" not in zeros.message
    float32 = check.sinusoidal_table(TABLE_WRONG["angles_in_float32"], raise_on_failure=False)
    assert "lose precision at large positions" in float32.message


# --- 4.2 sinusoidal module -------------------------------------------------------------------


class SinusoidalCorrect(nn.Module):
    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe", table_correct(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


class SinusoidalStub(nn.Module):
    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        raise NotImplementedError


class SinusoidalSeqFirst(SinusoidalCorrect):
    """The (L, B, D) tutorial version used on batch-first input: slices by x.size(0)."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        self.pe = self.pe.unsqueeze(1)  # (max_len, 1, d)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(0)])


class SinusoidalWholeTable(SinusoidalCorrect):
    """Adds a table row per batch element, broadcasting over the positions."""

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(0)].unsqueeze(1))


class SinusoidalNoLengthCheck(SinusoidalCorrect):
    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class SinusoidalParameter(SinusoidalCorrect):
    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        pe = self.pe
        del self.pe
        self.pe = nn.Parameter(pe)


class SinusoidalPlainAttribute(nn.Module):
    """The table as a plain tensor attribute: does not follow .double() or .to(device)."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.pe = table_correct(max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


class SinusoidalNoDropout(SinusoidalCorrect):
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return x + self.pe[: x.size(1)]


class SinusoidalDropoutAlways(SinusoidalCorrect):
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return nn.functional.dropout(x + self.pe[: x.size(1)], self.dropout.p, training=True)


class SinusoidalSwapped(SinusoidalCorrect):
    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        self.pe = TABLE_WRONG["sin_cos_swapped"](max_len, d_model)


class SinusoidalScaled(SinusoidalCorrect):
    """Multiplies by the encoding instead of adding it."""

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return self.dropout(x * self.pe[: x.size(1)])


class SinusoidalPersistent(SinusoidalCorrect):
    """A persistent buffer: the table is saved in every checkpoint."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        del self.pe
        self.register_buffer("pe", table_correct(max_len, d_model))


class SinusoidalDropoutBeforeAdding(SinusoidalCorrect):
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return self.dropout(x) + self.pe[: x.size(1)]


MODULE_WRONG = {
    "persistent_buffer": SinusoidalPersistent,
    "dropout_before_adding": SinusoidalDropoutBeforeAdding,
    "seq_first_broadcast": SinusoidalSeqFirst,
    "one_row_per_batch_element": SinusoidalWholeTable,
    "no_length_check": SinusoidalNoLengthCheck,
    "table_is_a_parameter": SinusoidalParameter,
    "table_not_a_buffer": SinusoidalPlainAttribute,
    "dropout_ignored": SinusoidalNoDropout,
    "dropout_in_eval_mode": SinusoidalDropoutAlways,
    "sin_cos_swapped": SinusoidalSwapped,
    "multiplied_not_added": SinusoidalScaled,
}


def test_module_correct_passes():
    assert check.sinusoidal_encoding(SinusoidalCorrect, raise_on_failure=False).status == PASSED


def test_module_stub_not_implemented():
    result = check.sinusoidal_encoding(SinusoidalStub, raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", MODULE_WRONG)
def test_module_wrong_rejected(name):
    result = check.sinusoidal_encoding(MODULE_WRONG[name], raise_on_failure=False)
    assert result.status == FAILED, name


def test_module_length_error_message():
    result = check.sinusoidal_encoding(SinusoidalNoLengthCheck, raise_on_failure=False)
    assert "ValueError" in result.message


def test_module_mistakes_are_named():
    persistent = check.sinusoidal_encoding(SinusoidalPersistent, raise_on_failure=False)
    assert "saved in the module's state_dict" in persistent.message
    before = check.sinusoidal_encoding(SinusoidalDropoutBeforeAdding, raise_on_failure=False)
    assert "dropout is applied to x before the encoding is added" in before.message


# --- 4.3 learned embedding -------------------------------------------------------------------


class LearnedCorrect(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return x + self.embedding(torch.arange(x.size(1)))


class LearnedParameter(nn.Module):
    """Also correct: a bare nn.Parameter table."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Parameter(torch.randn(max_len, d_model))

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return x + self.table[: x.size(1)]


class LearnedStub(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        raise NotImplementedError


class LearnedFromOne(LearnedCorrect):
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return x + self.embedding(torch.arange(1, x.size(1) + 1).clamp(max=self.max_len - 1))


class LearnedNoLengthCheck(LearnedCorrect):
    def forward(self, x):
        return x + self.embedding(torch.arange(x.size(1)))


class LearnedBatchBroadcast(LearnedCorrect):
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return x + self.embedding(torch.arange(x.size(0))).unsqueeze(1)


class LearnedReturnsOnlyPositions(LearnedCorrect):
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return self.embedding(torch.arange(x.size(1))).expand_as(x)


class LearnedFrozen(LearnedCorrect):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.embedding.weight.requires_grad_(False)


class LearnedExtraLayer(LearnedCorrect):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.proj(super().forward(x))


LEARNED_WRONG = {
    "positions_start_at_1": LearnedFromOne,
    "no_length_check": LearnedNoLengthCheck,
    "batch_axis_broadcast": LearnedBatchBroadcast,
    "x_not_added": LearnedReturnsOnlyPositions,
    "table_frozen": LearnedFrozen,
    "extra_projection": LearnedExtraLayer,
}


@pytest.mark.parametrize("impl", [LearnedCorrect, LearnedParameter], ids=["embedding", "parameter"])
def test_learned_correct_passes(impl):
    assert check.learned_embedding(impl, raise_on_failure=False).status == PASSED


def test_learned_stub_not_implemented():
    result = check.learned_embedding(LearnedStub, raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", LEARNED_WRONG)
def test_learned_wrong_rejected(name):
    result = check.learned_embedding(LEARNED_WRONG[name], raise_on_failure=False)
    assert result.status == FAILED, name


# --- 4.4 RoPE --------------------------------------------------------------------------------


def _angles(x, positions, base, exponent="2i", start=0):
    dim = x.shape[-1]
    if positions is None:
        positions = torch.arange(start, start + x.shape[-2])
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    i = torch.arange(dim // 2, dtype=dtype)
    if exponent == "2i":
        theta = base ** (-2 * i / dim)
    elif exponent == "i":
        theta = base ** (-i / dim)
    else:  # one frequency for every pair
        theta = torch.ones_like(i)
    return positions.to(dtype).unsqueeze(-1) * theta


def rope_correct(x, positions=None, base=10000.0, *, exponent="2i", start=0, sign=1.0):
    angle = _angles(x, positions, base, exponent, start)
    cos, sin = angle.cos().to(x.dtype), (sign * angle.sin()).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def rope_stub(x, positions=None, base=10000.0):
    raise NotImplementedError


def rope_half_split(x, positions=None, base=10000.0):
    angle = _angles(x, positions, base)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), -1)


def rope_additive(x, positions=None, base=10000.0):
    angle = _angles(x, positions, base)
    pe = torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2).to(x.dtype)
    return x + pe


def rope_ignores_positions(x, positions=None, base=10000.0):
    return rope_correct(x, None, base)


def rope_ignores_base(x, positions=None, base=10000.0):
    return rope_correct(x, positions, 10000.0)


def rope_float32_always(x, positions=None, base=10000.0):
    return rope_correct(x.float(), positions, base)


def rope_keys_rotated_differently(x, positions=None, base=10000.0):
    """Rotates by position squared: not a function of m - n."""
    pos = torch.arange(x.shape[-2]) if positions is None else positions
    return rope_correct(x, pos.double() ** 2 / 7.0, base)


def rope_table_lookup(x, positions=None, base=10000.0):
    """LLaMA-style: precompute cos/sin for positions 0..max-1, then index with the positions."""
    length = x.shape[-2]
    positions = torch.arange(length) if positions is None else positions
    table = _angles(x, torch.arange(64), base)
    angle = table[positions]  # float positions cannot index
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def rope_rounds_positions(x, positions=None, base=10000.0):
    return rope_correct(x, None if positions is None else positions.round(), base)


ROPE_WRONG = {
    "table_lookup_fails_on_float_positions": rope_table_lookup,
    "positions_rounded": rope_rounds_positions,
    "half_split_layout": rope_half_split,
    "added_not_rotated": rope_additive,
    "rotation_sign_flipped": lambda x, positions=None, base=10000.0: rope_correct(
        x, positions, base, sign=-1.0
    ),
    "exponent_i_over_d": lambda x, positions=None, base=10000.0: rope_correct(
        x, positions, base, exponent="i"
    ),
    "one_frequency": lambda x, positions=None, base=10000.0: rope_correct(
        x, positions, base, exponent="one"
    ),
    "positions_start_at_1": lambda x, positions=None, base=10000.0: rope_correct(
        x, positions, base, start=1
    ),
    "positions_argument_ignored": rope_ignores_positions,
    "base_argument_ignored": rope_ignores_base,
    "float64_input_returns_float32": rope_float32_always,
    "angle_not_linear_in_position": rope_keys_rotated_differently,
}


def test_rope_correct_passes():
    assert check.rope(rope_correct, raise_on_failure=False).status == PASSED


def test_rope_stub_not_implemented():
    assert check.rope(rope_stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", ROPE_WRONG)
def test_rope_wrong_rejected(name):
    result = check.rope(ROPE_WRONG[name], raise_on_failure=False)
    assert result.status == FAILED, name


def test_rope_integer_positions_pass():
    def rope_long_positions(x, positions=None, base=10000.0):
        assert positions is None or positions.dtype in (torch.int64, torch.float64)
        return rope_correct(x, positions, base)

    assert check.rope(rope_long_positions, raise_on_failure=False).status == PASSED


def test_rope_table_lookup_message():
    result = check.rope(rope_table_lookup, raise_on_failure=False)
    assert "positions may be floating point" in result.message


def test_rope_half_split_message():
    result = check.rope(rope_half_split, raise_on_failure=False)
    assert "half-split" in result.message


# --- the exported solutions pass too --------------------------------------------------------


def test_course_nn_exports_pass():
    nn_module = pytest.importorskip("course.nn")
    if not hasattr(nn_module, "apply_rope"):
        pytest.skip("course/nn.py not generated yet")
    assert check.sinusoidal_table(nn_module.sinusoidal_table, raise_on_failure=False).passed
    assert check.sinusoidal_encoding(
        nn_module.SinusoidalPositionalEncoding, raise_on_failure=False
    ).passed
    assert check.learned_embedding(
        nn_module.LearnedPositionalEmbedding, raise_on_failure=False
    ).passed
    assert check.rope(nn_module.apply_rope, raise_on_failure=False).passed
