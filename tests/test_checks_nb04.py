"""The checks of notebook 04: right variants pass (float32 tables of pytorch/examples, the
Annotated Transformer and d2l among them), the stubs are "not implemented", and each wrong
implementation fails with the property it violates named in the message."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course.checks import nb04 as check
from course.framework.check import FAILED, NOT_IMPLEMENTED, PASSED


def _rejected(check_function, wrong, phrase):
    try:
        result = check_function(wrong, raise_on_failure=False)
    finally:
        torch.set_default_dtype(torch.float32)
    assert result.status == FAILED, f"{wrong} was accepted"
    assert phrase in result.message, result.message


# --- 4.1 sinusoidal table --------------------------------------------------------------------


def _table(
    max_len, d_model, *, swap=False, exponent="2i", start=0, layout="interleaved", base=10000.0
):
    """A sinusoidal table in float64, with optional, deliberate mistakes."""
    position = torch.arange(start, start + max_len, dtype=torch.float64).unsqueeze(1)
    pair = torch.arange(0, (d_model + 1) // 2, dtype=torch.float64)  # i = 0, 1, 2, ...
    if exponent == "2i":
        angle = position / base ** (2 * pair / d_model)
    else:  # 2i/d computed as i/d
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


def table_pytorch_examples(max_len, d_model):
    """pytorch/examples word_language_model PositionalEncoding (float32 angles)."""
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def table_annotated_transformer(max_len, d_model):
    """The Annotated Transformer's PositionalEncoding (float32 angles, integer arange)."""
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def table_d2l(max_len, num_hiddens):
    """d2l.ai's PositionalEncoding (float32, a division by torch.pow)."""
    P = torch.zeros((1, max_len, num_hiddens))  # noqa: N806 - d2l's name
    X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(  # noqa: N806
        10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens
    )
    P[:, :, 0::2] = torch.sin(X)
    P[:, :, 1::2] = torch.cos(X)
    return P[0]


def table_loops(max_len, d_model):
    """Element by element with math, as the formula reads."""
    rows = []
    for pos in range(max_len):
        row = []
        for column in range(d_model):
            angle = pos / 10000 ** ((column - column % 2) / d_model)
            row.append(math.sin(angle) if column % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)


def table_global_float64(max_len, d_model):
    """Switches torch's default dtype to float64 for precision and leaves it so."""
    torch.set_default_dtype(torch.float64)
    return _table(max_len, d_model)


RIGHT_TABLE = [
    table_correct,
    table_pytorch_examples,
    table_annotated_transformer,
    table_d2l,
    table_loops,
]

TABLE_WRONG = {
    "all zeros": (lambda n, d: torch.zeros(n, d), "all zeros"),
    "sin and cos swapped": (lambda n, d: _table(n, d, swap=True), "swapped"),
    "exponent i/d": (lambda n, d: _table(n, d, exponent="i"), "differs"),
    "exponent from the column index": (lambda n, d: _table(n, d, layout="column_index"), "differs"),
    "positions start at 1": (lambda n, d: _table(n, d, start=1), "counted from 1"),
    "sines then cosines": (lambda n, d: _table(n, d, layout="halves"), "interleaves"),
    "float64 returned": (lambda n, d: _table(n, d).double(), "float32"),
    "transposed": (lambda n, d: _table(n, d).T.contiguous(), "shape"),
    "base 1000": (lambda n, d: _table(n, d, base=1000.0), "differs"),
    "float16": (lambda n, d: _table(n, d).half().float(), "differs"),
    "default dtype left at float64 (global state)": (table_global_float64, "global state"),
}


@pytest.mark.parametrize("right", RIGHT_TABLE, ids=lambda f: f.__name__)
def test_table_right_passes(right):
    result = check.sinusoidal_table(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_table_float32_angles_pass_with_a_note(capsys):
    assert check.sinusoidal_table(table_pytorch_examples, raise_on_failure=False).passed
    assert "Note:" in capsys.readouterr().out
    assert check.sinusoidal_table(table_correct, raise_on_failure=False).passed
    assert "Note:" not in capsys.readouterr().out


def test_table_stub_not_implemented():
    assert check.sinusoidal_table(table_stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", TABLE_WRONG)
def test_table_wrong_rejected(name):
    _rejected(check.sinusoidal_table, *TABLE_WRONG[name])


# --- 4.2 sinusoidal module -------------------------------------------------------------------


class SinusoidalCorrect(nn.Module):
    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe", table_correct(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def check_length(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")

    def forward(self, x):
        self.check_length(x)
        return self.dropout(x + self.pe[: x.size(1)])


class SinusoidalPytorchExamples(nn.Module):
    """pytorch/examples' module, (1, max_len, d) buffer, made batch-first and non-persistent."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.max_len = max_len
        pe = table_pytorch_examples(max_len, d_model).unsqueeze(0)
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError(f"length {x.size(1)} > max_len {self.max_len}")
        x = x + self.pe[:, : x.size(1), :]
        return self.dropout(x)


class SinusoidalFunctionalDropout(SinusoidalCorrect):
    """Right: F.dropout with training=self.training."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        self.p = dropout

    def forward(self, x):
        self.check_length(x)
        return nn.functional.dropout(x + self.pe[: x.size(1)], self.p, self.training)


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
        self.check_length(x)
        return self.dropout(x + self.pe[: x.size(0)])


class SinusoidalWholeTable(SinusoidalCorrect):
    """Adds a table row per batch element, broadcasting over the positions."""

    def forward(self, x):
        self.check_length(x)
        return self.dropout(x + self.pe[: x.size(0)].unsqueeze(1))


class SinusoidalNoLengthCheck(SinusoidalCorrect):
    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class SinusoidalRejectsMaxLen(SinusoidalCorrect):
    def forward(self, x):
        if x.size(1) >= self.max_len:
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


class SinusoidalParameter(SinusoidalCorrect):
    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        pe = self.pe
        del self.pe
        self.pe = nn.Parameter(pe)


class SinusoidalPlainAttribute(SinusoidalCorrect):
    """The table as a plain tensor attribute: does not follow .double() or .to(device)."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        pe = self.pe
        del self.pe
        self.pe = pe


class SinusoidalNoDropout(SinusoidalCorrect):
    def forward(self, x):
        self.check_length(x)
        return x + self.pe[: x.size(1)]


class SinusoidalDropoutAlways(SinusoidalCorrect):
    def forward(self, x):
        self.check_length(x)
        return nn.functional.dropout(x + self.pe[: x.size(1)], self.dropout.p, training=True)


class SinusoidalDefaultDropoutOfThePaper(SinusoidalCorrect):
    """The default dropout is the paper's 0.1, not the 0.0 the signature states."""

    def __init__(self, d_model, max_len=512, dropout=0.1):
        super().__init__(d_model, max_len, dropout)


class SinusoidalDefaultMaxLen5000(SinusoidalCorrect):
    """pytorch/examples' default max_len=5000, not the 512 the signature states."""

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__(d_model, max_len, dropout)


class SinusoidalSwapped(SinusoidalCorrect):
    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        self.pe = _table(max_len, d_model, swap=True)


class SinusoidalScaled(SinusoidalCorrect):
    """Multiplies by the encoding instead of adding it."""

    def forward(self, x):
        self.check_length(x)
        return self.dropout(x * self.pe[: x.size(1)])


class SinusoidalPersistent(SinusoidalCorrect):
    """A persistent buffer: the table is saved in every checkpoint."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        del self.pe
        self.register_buffer("pe", table_correct(max_len, d_model))


class SinusoidalDropoutBeforeAdding(SinusoidalCorrect):
    def forward(self, x):
        self.check_length(x)
        return self.dropout(x) + self.pe[: x.size(1)]


class SinusoidalIndexedByCpuPositions(SinusoidalCorrect):
    """Indexes the buffer with positions created on the CPU: right, a GPU tensor accepts CPU
    indices in ``pe[index]`` (the old meta-device check refused it; an embedding lookup with
    CPU indices, LearnedCpuPositions below, does fail on a GPU)."""

    def forward(self, x):
        self.check_length(x)
        return self.dropout(x + self.pe[torch.arange(x.size(1))])


class SinusoidalDetachesX(SinusoidalCorrect):
    """Cuts the gradient to the token embeddings."""

    def forward(self, x):
        self.check_length(x)
        return self.dropout(x.detach() + self.pe[: x.size(1)])


class SinusoidalInPlace(SinusoidalCorrect):
    def forward(self, x):
        self.check_length(x)
        x += self.pe[: x.size(1)]
        return self.dropout(x)


MODULE_WRONG = {
    "persistent buffer": (SinusoidalPersistent, "state_dict"),
    "dropout before adding": (SinusoidalDropoutBeforeAdding, "before the encoding is added"),
    "seq-first broadcast": (SinusoidalSeqFirst, ""),
    "one row per batch element": (SinusoidalWholeTable, ""),
    "no length check": (SinusoidalNoLengthCheck, "ValueError"),
    "rejects a length of exactly max_len": (SinusoidalRejectsMaxLen, "up to and including"),
    "table is a parameter": (SinusoidalParameter, "trainable"),
    "table not a buffer": (SinusoidalPlainAttribute, "no buffer"),
    "dropout ignored (train mode)": (SinusoidalNoDropout, "train mode"),
    "dropout in eval mode": (SinusoidalDropoutAlways, "eval mode"),
    "default dropout 0.1 (train mode)": (SinusoidalDefaultDropoutOfThePaper, "training mode"),
    "default max_len 5000 (constructor arguments)": (SinusoidalDefaultMaxLen5000, "max_len=512"),
    "sin and cos swapped": (SinusoidalSwapped, "differs"),
    "multiplied, not added": (SinusoidalScaled, "differs"),
    "x detached (gradients)": (SinusoidalDetachesX, "gradient"),
    "adds in place (inputs untouched)": (SinusoidalInPlace, "inputs untouched"),
}


@pytest.mark.parametrize(
    "right",
    [
        SinusoidalCorrect,
        SinusoidalPytorchExamples,
        SinusoidalFunctionalDropout,
        SinusoidalIndexedByCpuPositions,
    ],
    ids=lambda c: c.__name__,
)
def test_module_right_passes(right):
    result = check.sinusoidal_encoding(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_module_stub_not_implemented():
    result = check.sinusoidal_encoding(SinusoidalStub, raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", MODULE_WRONG)
def test_module_wrong_rejected(name):
    _rejected(check.sinusoidal_encoding, *MODULE_WRONG[name])


# --- 4.3 learned embedding -------------------------------------------------------------------


class LearnedCorrect(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def check_length(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")

    def forward(self, x):
        self.check_length(x)
        return x + self.embedding(torch.arange(x.size(1), device=x.device))


class LearnedParameter(nn.Module):
    """Also right: a bare nn.Parameter table (GPT-2's wpe is an Embedding, nanoGPT too)."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Parameter(torch.randn(max_len, d_model))

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return x + self.table[: x.size(1)]


class LearnedNanoGPT(LearnedCorrect):
    """nanoGPT's lookup: pos = torch.arange(0, t, dtype=torch.long, device=device)."""

    def forward(self, x):
        b, t, _ = x.size()
        if t > self.max_len:
            raise ValueError(f"Cannot forward sequence of length {t}, block size is only "
                             f"{self.max_len}")  # fmt: skip
        pos = torch.arange(0, t, dtype=torch.long, device=x.device)
        return x + self.embedding(pos)


class LearnedStub(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        raise NotImplementedError


class LearnedFromOne(LearnedCorrect):
    def forward(self, x):
        self.check_length(x)
        positions = torch.arange(1, x.size(1) + 1, device=x.device).clamp(max=self.max_len - 1)
        return x + self.embedding(positions)


class LearnedNoLengthCheck(LearnedCorrect):
    def forward(self, x):
        return x + self.embedding(torch.arange(x.size(1), device=x.device))[: x.size(1)]


class LearnedBatchBroadcast(LearnedCorrect):
    def forward(self, x):
        self.check_length(x)
        return x + self.embedding(torch.arange(x.size(0), device=x.device)).unsqueeze(1)


class LearnedReturnsOnlyPositions(LearnedCorrect):
    def forward(self, x):
        self.check_length(x)
        return self.embedding(torch.arange(x.size(1), device=x.device)).expand_as(x)


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


class LearnedCpuPositions(LearnedCorrect):
    """`torch.arange(L)` without a device: runs on the CPU only."""

    def forward(self, x):
        self.check_length(x)
        return x + self.embedding(torch.arange(x.size(1)))


class LearnedDetachesX(LearnedCorrect):
    def forward(self, x):
        self.check_length(x)
        return x.detach() + self.embedding(torch.arange(x.size(1), device=x.device))


class LearnedInPlace(LearnedCorrect):
    def forward(self, x):
        self.check_length(x)
        x += self.embedding(torch.arange(x.size(1), device=x.device))
        return x


class LearnedRejectsMaxLen(LearnedCorrect):
    def forward(self, x):
        if x.size(1) >= self.max_len:
            raise ValueError("too long")
        return super().forward(x)


LEARNED_WRONG = {
    "positions start at 1": (LearnedFromOne, "differs"),
    "no length check": (LearnedNoLengthCheck, "ValueError"),
    "rejects a length of exactly max_len": (LearnedRejectsMaxLen, "up to and including"),
    "batch axis broadcast": (LearnedBatchBroadcast, ""),
    "x not added": (LearnedReturnsOnlyPositions, "differs"),
    "table frozen": (LearnedFrozen, "trainable"),
    "extra projection": (LearnedExtraLayer, "trainable"),
    "torch.arange(L) without a device (device)": (LearnedCpuPositions, "device"),
    "x detached (gradients)": (LearnedDetachesX, "no gradient reaches `x`"),
    "adds in place (inputs untouched)": (LearnedInPlace, "inputs untouched"),
}


@pytest.mark.parametrize(
    "impl", [LearnedCorrect, LearnedParameter, LearnedNanoGPT], ids=lambda c: c.__name__
)
def test_learned_right_passes(impl):
    result = check.learned_embedding(impl, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_learned_stub_not_implemented():
    result = check.learned_embedding(LearnedStub, raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", LEARNED_WRONG)
def test_learned_wrong_rejected(name):
    _rejected(check.learned_embedding, *LEARNED_WRONG[name])


# --- 4.4 RoPE --------------------------------------------------------------------------------


def _angles(x, positions, base, exponent="2i", start=0):
    dim = x.shape[-1]
    if positions is None:
        positions = torch.arange(start, start + x.shape[-2], device=x.device)
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    i = torch.arange(dim // 2, dtype=dtype, device=x.device)
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


def rope_complex(x, positions=None, base=10000.0):
    """Right: Meta's LLaMA reference, x as complex numbers times exp(i m theta)."""
    dim, length = x.shape[-1], x.shape[-2]
    if positions is None:
        positions = torch.arange(length, device=x.device)
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, device=x.device).double() / dim))
    angle = positions.double().unsqueeze(-1) * freqs
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], dim // 2, 2).contiguous())
    out = torch.view_as_real(pairs * torch.polar(torch.ones_like(angle), angle)).flatten(-2)
    return out.to(x.dtype)


def rope_einsum(x, positions=None, base=10000.0):
    """Right: a (..., L, d, d) block-diagonal rotation applied with einsum."""
    angle = _angles(x, positions, base).double()
    cos, sin = angle.cos(), angle.sin()
    dim = x.shape[-1]
    rotation = torch.zeros(*angle.shape[:-1], dim, dim, dtype=torch.float64, device=x.device)
    rotation[..., 0::2, 0::2] = torch.diag_embed(cos)
    rotation[..., 0::2, 1::2] = torch.diag_embed(-sin)
    rotation[..., 1::2, 0::2] = torch.diag_embed(sin)
    rotation[..., 1::2, 1::2] = torch.diag_embed(cos)
    return torch.einsum("...ij,...j->...i", rotation, x.double()).to(x.dtype)


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


def rope_outer(x, positions=None, base=10000.0):
    """torch.outer(positions, theta): right for (L,) positions, fails for (B, L) ones."""
    dim, length = x.shape[-1], x.shape[-2]
    if positions is None:
        positions = torch.arange(length, device=x.device)
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = base ** (-torch.arange(0, dim, 2, dtype=dtype, device=x.device) / dim)
    angle = torch.outer(positions.to(dtype), theta)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def rope_flattened_positions(x, positions=None, base=10000.0):
    """Uses only the first row of (B, L) positions."""
    if positions is not None and positions.dim() > 1:
        positions = positions.reshape(-1, positions.shape[-1])[0]
    return rope_correct(x, positions, base)


def rope_cpu_positions(x, positions=None, base=10000.0):
    """torch.arange(L) without a device for the default positions."""
    if positions is None:
        positions = torch.arange(x.shape[-2])
    return rope_correct(x, positions, base)


def rope_in_place(x, positions=None, base=10000.0):
    """Right values, but written into x: the caller's queries are gone."""
    angle = _angles(x, positions, base)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = even * cos - odd * sin
    x[..., 1::2] = even * sin + odd * cos
    return x


class _Frequencies(nn.Module):
    """The angles' frequencies held as a frozen parameter, as lucidrains' rotary-embedding-torch
    holds them: a module whose parameter must follow the input to its device."""

    def __init__(self, dim, base):
        super().__init__()
        theta = base ** (-torch.arange(0, dim, 2).double() / dim)
        self.freqs = nn.Parameter(theta, requires_grad=False)

    def forward(self, positions):
        return positions.double().unsqueeze(-1) * self.freqs


def _rope_with_module(x, positions, base, move):
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)
    freqs = _Frequencies(x.shape[-1], base)
    angle = (freqs.to(x.device) if move else freqs)(positions)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def rope_module_moved(x, positions=None, base=10000.0):
    """Right: the frequencies' module moved with ``.to(x.device)``, which a GPU accepts."""
    return _rope_with_module(x, positions, base, move=True)


def rope_module_left_behind(x, positions=None, base=10000.0):
    """The frequencies' module left on the CPU: a GPU input fails there."""
    return _rope_with_module(x, positions, base, move=False)


def rope_default_float64(x, positions=None, base=10000.0):
    torch.set_default_dtype(torch.float64)
    return rope_correct(x, positions, base)


ROPE_WRONG = {
    "table lookup fails on float positions": (rope_table_lookup, "floating point"),
    "positions rounded": (
        lambda x, positions=None, base=10000.0: rope_correct(
            x, None if positions is None else positions.round(), base
        ),
        "positions=[0.5",
    ),
    "half-split layout": (rope_half_split, "gives what the half-split layout"),
    "added, not rotated": (rope_additive, "norms"),
    "rotation sign flipped": (
        lambda x, positions=None, base=10000.0: rope_correct(x, positions, base, sign=-1.0),
        "differs",
    ),
    "exponent i/d": (
        lambda x, positions=None, base=10000.0: rope_correct(x, positions, base, exponent="i"),
        "differs",
    ),
    "one frequency": (
        lambda x, positions=None, base=10000.0: rope_correct(x, positions, base, exponent="one"),
        "differs",
    ),
    "positions start at 1": (
        lambda x, positions=None, base=10000.0: rope_correct(x, positions, base, start=1),
        "position 0",
    ),
    "positions argument ignored": (
        lambda x, positions=None, base=10000.0: rope_correct(x, None, base),
        "positions",
    ),
    "base argument ignored": (
        lambda x, positions=None, base=10000.0: rope_correct(x, positions, 10000.0),
        "base",
    ),
    "float64 input returns float32": (
        lambda x, positions=None, base=10000.0: rope_correct(x.float(), positions, base),
        "dtype",
    ),
    "angle not linear in the position": (rope_keys_rotated_differently, ""),
    "torch.outer fails on (B, L) positions (shapes)": (rope_outer, "(B, L) positions"),
    "first row of (B, L) positions only (shapes)": (rope_flattened_positions, "(B, L)"),
    "torch.arange(L) without a device (device)": (rope_cpu_positions, "device"),
    "a module of parameters left on the CPU (device)": (rope_module_left_behind, "device"),
    "default dtype left at float64 (global state)": (rope_default_float64, "global state"),
}


@pytest.mark.parametrize(
    "right",
    # 4.4's text lets x change; a module of parameters moved with .to(x.device) is right
    [rope_correct, rope_complex, rope_einsum, rope_in_place, rope_module_moved],
    ids=lambda f: f.__name__,
)
def test_rope_right_passes(right):
    result = check.rope(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_rope_integer_positions_pass():
    def rope_long_positions(x, positions=None, base=10000.0):
        assert positions is None or positions.dtype in (torch.int64, torch.float64)
        return rope_correct(x, positions, base)

    assert check.rope(rope_long_positions, raise_on_failure=False).status == PASSED


def test_rope_stub_not_implemented():
    assert check.rope(rope_stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", ROPE_WRONG)
def test_rope_wrong_rejected(name):
    _rejected(check.rope, *ROPE_WRONG[name])


# --- the reference helpers and the exported solutions ----------------------------------------


def test_rope_reference_matches_the_complex_form():
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    positions = torch.tensor([0.0, 1.5, 2.0, 7.25, 30.0], dtype=torch.float64)
    assert torch.allclose(check._rotated(x, positions, 500.0), rope_complex(x, positions, 500.0))


def test_no_reference_implementation_in_the_check_module():
    for name in ("_paper_table", "_rope_reference", "_rope_half_split"):
        assert not hasattr(check, name)


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


# --- wrong implementations by family of mistake, written independently of the specs ----------------
# Wrong ones break one sentence of the text each; right ones are canonical code of the field
# glued at the interface (Hugging Face, the Annotated Transformer, GPT-J, GPT-2, BERT). Family
# numbers follow the issue: 1 stated types, 2 the device (values read, training-only paths),
# 3 called as the course calls it, 4 training-only behaviour, 5 statistics.


def table_numpy(max_len, d_model):
    """A NumPy array, not the float32 tensor the text states."""
    return table_correct(max_len, d_model).numpy()


def table_batched(max_len, d_model):
    """(1, max_len, d_model), a batch axis the text does not have."""
    return table_correct(max_len, d_model).unsqueeze(0)


def table_hf_numpy(max_len, d_model):
    """Right: Hugging Face DistilBERT's create_sinusoidal_embeddings (NumPy inside)."""
    import numpy as np

    position_enc = np.array(
        [
            [pos / np.power(10000, 2 * (j // 2) / d_model) for j in range(d_model)]
            for pos in range(max_len)
        ]
    )
    out = torch.zeros(max_len, d_model)
    out[:, 0::2] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
    out[:, 1::2] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
    return out


class SinusoidalDropoutMaskOnTheCpu(SinusoidalCorrect):
    """Its own dropout mask, drawn without a device: only training mode meets it."""

    def forward(self, x):
        self.check_length(x)
        out = x + self.pe[: x.size(1)]
        if self.training and self.dropout.p > 0:
            out = out * (torch.rand(out.shape) >= self.dropout.p) / (1 - self.dropout.p)
        return out


class SinusoidalLengthFromValues(SinusoidalCorrect):
    """Right: reads the length from a tensor's value (.item()); runs on any device."""

    def forward(self, x):
        length = int(torch.tensor(x.shape[1]).item())
        if length > self.max_len:
            raise ValueError("too long")
        return self.dropout(x + self.pe[:length])


def rope_numpy(x, positions=None, base=10000.0):
    """Angles through NumPy: no GPU."""
    import numpy as np

    pos = np.arange(x.shape[-2]) if positions is None else positions.cpu().numpy()
    angle = torch.from_numpy(_angles(x, torch.from_numpy(np.asarray(pos)), base).numpy())
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class SinusoidalDropoutBeforeMaxLen(SinusoidalCorrect):
    """(d_model, dropout=0.0, max_len=512): notebook 05's (d_model, max_len, dropout) breaks."""

    def __init__(self, d_model, dropout=0.0, max_len=512):
        super().__init__(d_model, int(max_len), float(dropout) if dropout < 1 else 0.0)


class SinusoidalZeroMeansDefault(SinusoidalCorrect):
    """nn.Dropout(dropout or 0.1): an explicit 0.0 reads as "the paper's 0.1"."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout or 0.1)


class LearnedSizesSwapped(LearnedCorrect):
    """(d_model, max_len): notebook 09's LearnedPositionalEmbedding(max_len, d_model) breaks."""

    def __init__(self, d_model, max_len):
        super().__init__(max_len, d_model)


def rope_base_keyword_only(x, positions=None, *, base=10000.0):
    return rope_correct(x, positions, base)


class SinusoidalLearnedScale(SinusoidalCorrect):
    """A trainable scale on the encoding, which the text does not name."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, x):
        self.check_length(x)
        return self.dropout(x + self.alpha * self.pe[: x.size(1)])


class SinusoidalExtraDropout(SinusoidalCorrect):
    """A fixed second dropout (0.1) on x, which the text does not describe."""

    def forward(self, x):
        self.check_length(x)
        return self.dropout(nn.functional.dropout(x, 0.1, self.training) + self.pe[: x.size(1)])


class SinusoidalSharedDropoutMask(SinusoidalCorrect):
    """One dropout mask for the whole batch (drawn for (L, d_model) only)."""

    def forward(self, x):
        self.check_length(x)
        out = x + self.pe[: x.size(1)]
        if self.training and self.dropout.p > 0:
            keep = torch.rand(out.shape[1:], device=out.device) >= self.dropout.p
            out = out * keep / (1 - self.dropout.p)
        return out


class SinusoidalHalfRate(SinusoidalCorrect):
    """Drops with half the probability, scaled for p: the rate and the scale disagree."""

    def forward(self, x):
        self.check_length(x)
        out = x + self.pe[: x.size(1)]
        if self.training and self.dropout.p > 0:
            keep = torch.rand(out.shape, device=out.device) >= self.dropout.p / 2
            out = out * keep / (1 - self.dropout.p)
        return out


class SinusoidalAnnotated(nn.Module):
    """Right: the Annotated Transformer's PositionalEncoding (a (1, max_len, d) buffer, float32
    angles, dropout on the sum), glued: non-persistent, the length check of the text."""

    def __init__(self, d_model, max_len=512, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)
        self.max_len = max_len

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("sequence longer than max_len")
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)


class LearnedGPT2(nn.Module):
    """Right: GPT-2's wpe lookup (position_ids = arange(0, L, device).unsqueeze(0)), glued."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError(f"length {x.size(1)} > n_positions {self.max_len}")
        position_ids = torch.arange(0, x.size(1), dtype=torch.long, device=x.device).unsqueeze(0)
        return x + self.embedding(position_ids)


class LearnedBertBuffer(nn.Module):
    """Right: BERT's position_ids buffer (arange(max_len).expand((1, -1)), non-persistent)."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        self.register_buffer(
            "position_ids", torch.arange(max_len).expand((1, -1)), persistent=False
        )

    def forward(self, x):
        if x.size(1) > self.position_ids.size(1):
            raise ValueError("sequence longer than max_position_embeddings")
        return x + self.embedding(self.position_ids[:, : x.size(1)])


def rope_gptj_float32(x, positions=None, base=10000.0):
    """Right: GPT-J's rotary code (float32 inv_freq and sinusoids, rotate_every_two), glued:
    the result cast back to x's dtype, as the text asks."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=x.device).float() / dim))
    pos = torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    sinusoid = pos.float().unsqueeze(-1) * inv_freq
    sin = torch.repeat_interleave(torch.sin(sinusoid), 2, dim=-1).to(x.dtype)
    cos = torch.repeat_interleave(torch.cos(sinusoid), 2, dim=-1).to(x.dtype)
    x1, x2 = x[..., ::2], x[..., 1::2]
    rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return x * cos + rotated * sin


FAMILIES = [  # (family, check, implementation, passes)
    (1, "sinusoidal_table", table_numpy, False),
    (1, "sinusoidal_table", table_batched, False),
    (1, "sinusoidal_table", table_hf_numpy, True),
    (2, "sinusoidal_encoding", SinusoidalDropoutMaskOnTheCpu, False),
    (2, "rope", rope_numpy, False),
    (2, "sinusoidal_encoding", SinusoidalLengthFromValues, True),
    (3, "sinusoidal_encoding", SinusoidalDropoutBeforeMaxLen, False),
    (3, "sinusoidal_encoding", SinusoidalZeroMeansDefault, False),
    (3, "learned_embedding", LearnedSizesSwapped, False),
    (3, "rope", rope_base_keyword_only, False),
    (3, "learned_embedding", LearnedGPT2, True),
    (4, "sinusoidal_encoding", SinusoidalLearnedScale, False),
    (4, "sinusoidal_encoding", SinusoidalExtraDropout, False),
    (4, "sinusoidal_encoding", SinusoidalAnnotated, True),
    (4, "learned_embedding", LearnedBertBuffer, True),
    (5, "sinusoidal_encoding", SinusoidalSharedDropoutMask, False),
    (5, "sinusoidal_encoding", SinusoidalHalfRate, False),
    (5, "rope", rope_gptj_float32, True),
]


def _family_id(case):
    return f"{case[0]}-{'right' if case[3] else 'wrong'}-{case[2].__name__}"


@pytest.mark.parametrize("family, name, impl, passes", FAMILIES, ids=map(_family_id, FAMILIES))
def test_families(family, name, impl, passes):
    try:
        result = getattr(check, name)(impl, raise_on_failure=False)
    finally:
        torch.set_default_dtype(torch.float32)
    assert result.status == (PASSED if passes else FAILED), result.message
