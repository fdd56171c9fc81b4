"""Checks for notebook 04, positional encoding.

References hold no implementation of an exercise: the sinusoidal table is
:func:`course.checks.reference.sinusoid_table` (the formula of Vaswani et al., 2017, section
3.5, in float64); rotary embeddings are rotated by the Hugging Face ``transformers`` function
of GPT-J (adjacent pairs, as in Su et al., 2021) on the angles ``m * theta_i`` of the exercise
text. Every call of the student's code is observed (:mod:`course.properties`): inputs
untouched, global state unchanged; modules are tried in train and eval mode, with
non-default constructor arguments, in float64, on the meta device, with gradients.

A float32 table is as right as a float64 one: the tolerance grows with the position (float32
angles near position p are about p * 1e-7 apart), so the canonical float32 constructions of
pytorch/examples, the Annotated Transformer and d2l pass; losing precision at large
positions is a note printed on a pass, not a failure.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from course.check import (
    CheckFailure,
    exercise_check,
    expect,
    expect_close,
    expect_shape,
    summarise_exception,
)
from course.checks.reference import is_dropout_of, sinusoid_table
from course.observe import StudentError
from course.properties import (
    NoDeviceMixing,
    call,
    construct,
    expect_raises,
    generator,
    gradients,
    observe,
)
from course.properties import in_replay as _in_replay

# --- shared helpers --------------------------------------------------------------------------


def _tolerance(length: int) -> torch.Tensor:
    """Per-position tolerance, (length, 1): float32 angles near position p lose ~p * 1e-7."""
    return 2e-5 + 4e-6 * torch.arange(length, dtype=torch.float64)[:, None]


def _expect_rows_close(got: Any, expected: torch.Tensor, what: str, hint: str | None) -> None:
    """``got`` (..., L, d) against ``expected`` with the per-position tolerance."""
    expect_shape(got, expected.shape, what, hint)
    expect(
        got.dtype == expected.dtype,
        f"{what} has dtype {got.dtype}, expected {expected.dtype}.",
        "Keep the input's dtype.",
    )
    diff = (got.double() - expected.double()).abs()
    excess = diff - _tolerance(expected.shape[-2])
    if bool(torch.isfinite(got).all()) and bool((excess <= 0).all()):
        return
    index = tuple(int(i) for i in torch.unravel_index(excess.nan_to_num(1e9).argmax(), diff.shape))
    raise CheckFailure(
        f"{what} differs from the reference: at index {index} yours is "
        f"{got[index].item():.6g}, expected {expected[index].item():.6g}.",
        hint,
    )


def _on_meta(student: Any, *inputs: torch.Tensor, **options: Any) -> dict[str, Any]:
    """``student(*inputs)`` with the tensors (and a copy of a module) on the meta device.

    Returns the output's device, or the error, in the student's terms: a tensor created
    without ``device=`` lives on the CPU and meeting a meta tensor fails, as on a GPU."""
    if isinstance(student, nn.Module):
        student = copy.deepcopy(student).to("meta")
    moved = [t.to("meta") for t in inputs]
    try:
        with NoDeviceMixing():
            out = student(*moved, **options)
    except (NotImplementedError, RuntimeError) as error:  # meta tensors have no data either
        return {"device": None, "error": summarise_exception(error)}
    device = out.device.type if isinstance(out, torch.Tensor) else type(out).__name__
    return {"device": device, "error": None}


def _expect_on_meta(what: str, student: Any, *inputs: torch.Tensor, hint: str) -> None:
    found = observe(what, lambda: _on_meta(student, *inputs))
    if found["device"] == "meta":
        return
    result = found["error"] or f"an output on {found['device']!r}"
    raise CheckFailure(
        f"{what} gave {result}. The property violated: device; code that runs on the CPU "
        "only would fail on a GPU.",
        hint,
    )


def _accepting(what: str, module: Any, x: torch.Tensor, max_len: int, **options: Any) -> Any:
    """``module(x)`` observed; a length up to max_len that raises is named as such."""
    try:
        return call(what, module, x, names=("x",), **options)
    except StudentError as error:
        if x.shape[1] == max_len:
            raise CheckFailure(
                f"{what}: a sequence of exactly max_len={max_len} positions {error.message}; "
                "every length up to and including max_len is allowed.",
                "Raise only for lengths greater than max_len.",
            ) from None
        raise


def _expect_value_error(what: str, module: Any, d_model: int, max_len: int) -> None:
    expect_raises(
        what,
        lambda: module.eval()(torch.zeros(1, max_len + 1, d_model)),
        ValueError,
        f"a sequence longer than max_len={max_len} must raise a ValueError (the exercise "
        "text says so).",
        "Compare the sequence length (the axis after the batch) with max_len at the start of "
        "forward.",
    )


# --- Exercise 4.1 ----------------------------------------------------------------------------


def _row0_diagnosis(row0: torch.Tensor, d_model: int) -> str:
    """Name the usual mistake from the first row of a wrong table."""
    row0 = row0.double()
    table = sinusoid_table(2, d_model)
    half = d_model // 2
    near = lambda a, b: torch.allclose(a, b, atol=1e-4)  # noqa: E731
    if near(row0, 1.0 - table[0]):
        return (
            "PE[0] is (1, 0, 1, 0, ...) but the paper's PE[0] is (sin 0, cos 0, ...) = "
            "(0, 1, 0, 1, ...): sin and cos are swapped (sin goes to the even columns)."
        )
    if near(row0, table[1]):
        return "PE[0] equals the paper's PE[1]: positions must start at 0, not 1."
    if near(row0, torch.zeros_like(row0)):
        return (
            "PE[0] is all zeros, but cos 0 = 1 belongs in every odd column: the cosines are "
            "missing (or nothing was written into the table)."
        )
    if near(row0[:half], torch.zeros(half, dtype=torch.float64)) and near(
        row0[half:], torch.ones_like(row0[half:])
    ):
        return (
            "PE[0] starts with zeros and ends with ones: the sines and cosines are in two "
            "halves, but the paper interleaves them (sin in column 2i, cos in column 2i + 1)."
        )
    return (
        "PE[0] should be (sin 0, cos 0, sin 0, cos 0, ...) = (0, 1, 0, 1, ...): sin in the "
        "even columns, cos in the odd ones, positions counted from 0."
    )


TABLE_SIZES = [(50, 16), (7, 6), (1, 4), (101, 64), (512, 32)]
LONG_TABLE = (10000, 16)  # where float32 angles show: a note, not a failure


@exercise_check(
    "Exercise 4.1",
    "sinusoidal table",
    hint="Columns 2i and 2i + 1 share one angle, whose exponent uses the even column index 2i; "
    "sin goes to the even column, cos to the odd one; positions start at 0.",
)
def sinusoidal_table(student_sinusoidal_table: Callable[[int, int], torch.Tensor]) -> None:
    """Compare with the paper's formula on several sizes, length 1 and a long table included."""
    for max_len, d_model in [*TABLE_SIZES, LONG_TABLE]:
        what = f"sinusoidal_table({max_len}, {d_model})"
        table = call(what, student_sinusoidal_table, max_len, d_model)
        expected = sinusoid_table(max_len, d_model)
        expect_shape(table, (max_len, d_model), what, "One row per position, one column per "
                     "dimension.")  # fmt: skip
        expect(
            table.dtype == torch.float32,
            f"{what} has dtype {table.dtype}; the exercise asks for a float32 table.",
        )
        expect(
            torch.allclose(table[0].double(), expected[0], atol=1e-4),
            f"{what}: {_row0_diagnosis(table[0], d_model)}",
        )
        _expect_rows_close(table.double(), expected, what, None)
    error = (table.double() - expected).abs().max().item()
    if error > 1e-5 and not _in_replay():
        print(
            f"Note: sinusoidal_table{LONG_TABLE} is within {error:.1g} of the formula, as "
            "float32 angles allow (near position 10000 float32 numbers are 0.001 apart). "
            "Computing the angles in float64 and converting the finished table with .float() "
            "makes it exact to float32 precision."
        )


# --- Exercise 4.2 ----------------------------------------------------------------------------


class EncodingCase(NamedTuple):
    d_model: int
    max_len: int | None  # None: the default, 512
    dropout: float | None  # None: the default, 0.0
    shapes: tuple[tuple[int, int], ...]  # (batch, length) of the inputs


ENCODING_CASES = [
    EncodingCase(16, 40, None, ((1, 9), (2, 11), (3, 40), (4, 1))),
    EncodingCase(6, 7, 0.5, ((2, 5), (1, 7))),
    EncodingCase(8, None, 0.2, ((1, 512),)),
]


def _structure(module: nn.Module) -> dict[str, Any]:
    return {
        "trainable": [name for name, p in module.named_parameters() if p.requires_grad],
        "buffers": [int(b.numel()) for b in module.buffers()],
    }


@exercise_check(
    "Exercise 4.2",
    "sinusoidal positional encoding module",
    hint="The table is computed once in __init__ and registered as a non-persistent buffer; "
    "forward adds its first L rows, L being the length axis (after the batch), then applies "
    "dropout to the sum.",
)
def sinusoidal_encoding(StudentEncoding: type[nn.Module]) -> None:  # noqa: N803 - a class
    """x + PE[:L] against the paper's table: buffer, modes, dropout, dtype, device, max_len."""
    for number, case in enumerate(ENCODING_CASES):
        d_model, max_len = case.d_model, case.max_len or 512
        p = case.dropout or 0.0
        arguments = {k: v for k, v in (("max_len", case.max_len), ("dropout", case.dropout)) if v}
        shown = "".join(f", {k}={v}" for k, v in arguments.items())
        name = f"SinusoidalPositionalEncoding({d_model}{shown})"
        module, state = construct(name, StudentEncoding, d_model, **arguments)
        found = observe(f"the parameters and buffers of {name}", lambda m=module: _structure(m))
        expect(
            not found["trainable"],
            f"{name} has trainable parameters {found['trainable']}; the sinusoidal table is a "
            "fixed formula, nothing in it is learned.",
            "The exercise text says how to store the table: as a buffer, not a parameter.",
        )
        expect(
            any(n >= max_len * d_model for n in found["buffers"]),
            f"{name} has no buffer holding the ({max_len}, {d_model}) table, so .to(device) "
            "and .double() would not move it.",
            "The exercise text says how to store the table: register it as a buffer.",
        )
        saved = [k for k, v in state.items() if isinstance(v, torch.Tensor) and v.numel() > 1]
        expect(
            not saved,
            f"{name} saves the table in its state_dict (key {saved[0] if saved else ''!r}), so "
            "in every checkpoint; it is a formula, rebuilt in __init__.",
            "The exercise text asks for a non-persistent buffer.",
        )
        table = sinusoid_table(max_len, d_model, torch.float32)

        for index, (batch, length) in enumerate(case.shapes):
            x = torch.randn(batch, length, d_model, generator=generator(100 * number + index))
            clean = x + table[:length]
            what = f"{name} in eval mode on x of shape {(batch, length, d_model)}"
            got = _accepting(what, lambda x, m=module: m.eval()(x), x, max_len)
            _expect_rows_close(
                got,
                clean,
                what,
                "With the dropout off the output is x + table[:L] with L = x.size(1) (the batch "
                "axis comes first); the (L, d_model) slice broadcasts over the batch.",
            )
            what = f"{name} in train mode on x of shape {(batch, length, d_model)}"
            trained = _accepting(what, lambda x, m=module: m.train()(x), x, max_len, random=True)
            if p == 0.0:
                _expect_rows_close(
                    trained,
                    clean,
                    f"{what} (dropout=0.0: nothing may be dropped)",
                    "The module's dropout is the only one, with the probability given.",
                )
                continue
            expect(
                isinstance(trained, torch.Tensor) and not torch.equal(trained, got),
                f"{what}: nothing was dropped although dropout={p}. The property violated: "
                "train mode (dropout is active in training).",
                "The dropout must act in train mode and be built with the dropout argument.",
            )
            if not is_dropout_of(trained, got, p):
                if is_dropout_of(trained - table[:length], x, p):
                    mistake = "dropout is applied to x before the encoding is added"
                elif is_dropout_of(trained - x, table[:length], p):
                    mistake = "dropout is applied to the encoding alone"
                else:
                    mistake = "the output is not x + table[:L] after a dropout of that probability"
                raise CheckFailure(
                    f"{what} with dropout={p}: {mistake}; dropout acts on the sum: each entry "
                    "of x + table[:L] is zeroed with probability p, the others scaled by "
                    "1/(1-p).",
                    "The exercise text says where the dropout goes and which probability it has.",
                )

        x = torch.randn(2, 5, d_model, generator=generator(100 * number + 50))
        if number == 0:
            try:
                got = observe(
                    f"the gradient of {name} with respect to x",
                    lambda m=module, x=x: gradients(m.eval(), [x], seed=0)["inputs"],
                )
            except StudentError as error:
                raise CheckFailure(
                    f"no gradient reached x through {name}: backpropagating failed "
                    f"({error.message.split(' (in ')[0]}). The property violated: gradients "
                    "(the token embeddings learn through this addition).",
                    "Keep x in the computation graph: no detach, no torch.no_grad() around it.",
                ) from None
            ref = gradients(lambda x, t=table: x + t[:5], [x], seed=0)["inputs"]
            expect(
                isinstance(got[0], torch.Tensor),
                f"no gradient reached x through {name}. The property violated: gradients (the "
                "token embeddings learn through this addition).",
            )
            expect_close(got[0], ref[0], f"the gradient of {name} with respect to x")
        x64 = x.double()
        got = observe(
            f"{name}.double() on a float64 x of shape (2, 5, {d_model})",
            lambda m=module, x=x64: copy.deepcopy(m).double().eval()(x),
        )
        _expect_rows_close(
            got,
            x64 + sinusoid_table(5, d_model),
            f"{name}.double() on a float64 x",
            "A buffer follows module.double(); a plain tensor attribute does not.",
        )
        _expect_on_meta(
            f"{name} with the module and x on the meta device",
            module,
            x,
            hint="A buffer follows module.to(device); a plain tensor attribute does not.",
        )
        _expect_value_error(f"{name} on a sequence of length {max_len + 1}", module, d_model,
                            max_len)  # fmt: skip


# --- Exercise 4.3 ----------------------------------------------------------------------------


class LearnedCase(NamedTuple):
    max_len: int
    d_model: int
    shapes: tuple[tuple[int, int], ...]


LEARNED_CASES = [
    LearnedCase(20, 8, ((1, 7), (3, 7), (2, 20), (1, 1))),
    LearnedCase(5, 3, ((2, 5), (4, 2))),
]


def _trainable(module: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    return [(n, tuple(p.shape)) for n, p in module.named_parameters() if p.requires_grad]


@exercise_check(
    "Exercise 4.3",
    "learned positional embedding",
    hint="One trainable vector per position; forward adds the vectors of positions 0..L-1, L "
    "being the length axis (after the batch), and raises a ValueError beyond max_len.",
)
def learned_embedding(StudentEmbedding: type[nn.Module]) -> None:  # noqa: N803 - a class
    """x + P[:L] with P the module's only trainable table: gradients, dtype, device, max_len."""
    for number, case in enumerate(LEARNED_CASES):
        max_len, d_model = case.max_len, case.d_model
        name = f"LearnedPositionalEmbedding({max_len}, {d_model})"
        module, state = construct(name, StudentEmbedding, max_len, d_model)
        params = observe(f"the trainable parameters of {name}", lambda m=module: _trainable(m))
        expect(
            len(params) == 1 and params[0][1] == (max_len, d_model),
            f"{name} should hold exactly one trainable ({max_len}, {d_model}) table, found "
            f"{params or 'none'}. The property violated: constructor arguments honoured.",
            "One nn.Embedding(max_len, d_model): a trainable vector per position, nothing else.",
        )
        key = params[0][0]
        table = state[key]

        for index, (batch, length) in enumerate(case.shapes):
            x = torch.randn(batch, length, d_model, generator=generator(100 * number + index))
            what = f"{name} on x of shape {(batch, length, d_model)}"
            got = _accepting(what, module, x, max_len)
            expect_close(
                got,
                x + table[:length],
                what,
                "Add the vectors of positions 0, 1, ..., L - 1 with L = x.size(1); the "
                "(L, d_model) lookup broadcasts over the batch.",
            )

        x = torch.randn(3, max_len - 1, d_model, generator=generator(100 * number + 50))
        got = observe(
            f"the gradients of {name}",
            lambda m=module, x=x, k=key, s=number: gradients(m, [x], {k: _param(m, k)}, s),
        )
        leaf = table.clone().requires_grad_(True)
        ref = gradients(lambda x, t=leaf: x + t[: x.shape[1]], [x], {key: leaf}, seed=number)
        grad = got["parameters"][key]
        expect(
            isinstance(grad, torch.Tensor),
            f"no gradient reached the position table of {name}. The property violated: "
            "gradients (the table must be learned).",
        )
        expect_close(
            grad,
            ref["parameters"][key],
            f"the gradient of the position table of {name}",
            "Every position 0..L-1 is used once per sequence; no other row is.",
        )
        expect_close(got["inputs"][0], ref["inputs"][0], f"the gradient of {name} w.r.t. x")

        x64 = torch.randn(2, max_len, d_model, generator=generator(100 * number + 60)).double()
        got = observe(
            f"{name}.double() on a float64 x",
            lambda m=module, x=x64: copy.deepcopy(m).double()(x),
        )
        expect_close(got, x64 + table.double(), f"{name}.double() on a float64 x",
                     atol=1e-12, rtol=1e-10)  # fmt: skip
        _expect_on_meta(
            f"{name} with the module and x on the meta device",
            module,
            x,
            hint="Tensors you create in forward (the positions) must live on x's device.",
        )
        _expect_value_error(f"{name} on a sequence of length {max_len + 1}", module, d_model,
                            max_len)  # fmt: skip


def _param(module: nn.Module, name: str) -> torch.Tensor:
    return dict(module.named_parameters())[name]


# --- Exercise 4.4 ----------------------------------------------------------------------------


def _rotated(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The expected output: GPT-J's rotary function in ``transformers`` (adjacent pairs) on the
    angles ``positions * theta_i``, theta_i = base^(-2i/d), of the exercise text."""
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb

    length, dim = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angle = (positions.double().unsqueeze(-1) * theta).expand(*x.shape[:-1], dim // 2)
    flat = x.double().reshape(-1, length, 1, dim)
    angle = angle.reshape(-1, length, dim // 2)
    return apply_rotary_pos_emb(flat, angle.sin(), angle.cos()).reshape(x.shape).to(x.dtype)


def _rotated_half_split(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The other common layout (GPT-NeoX, Llama in HF): pairs (x_i, x_{i + d/2})."""
    half = x.shape[-1] // 2
    paired = torch.stack((x[..., :half], x[..., half:]), dim=-1).flatten(-2)
    out = _rotated(paired, positions, base).unflatten(-1, (half, 2))
    return torch.cat((out[..., 0], out[..., 1]), dim=-1)


class RopeCase(NamedTuple):
    what: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    positions: torch.Tensor | None  # None: the default, 0..L-1
    base: float | None  # None: the default, 10000.0
    hint: str | None = None


def _rope_cases() -> list[RopeCase]:
    f64 = torch.float64
    return [
        RopeCase("apply_rope(x) for x of shape (2, 3, 10, 16)", (2, 3, 10, 16), torch.float32,
                 None, None),
        RopeCase("apply_rope of a float64 (1, 7, 6) input", (1, 7, 6), f64, None, None,
                 "Keep the input's dtype."),
        RopeCase("apply_rope of a (1, 1, 1, 4) input (one position)", (1, 1, 1, 4),
                 torch.float32, None, None),
        RopeCase("apply_rope of a 2-D (12, 32) input", (12, 32), f64, None, None),
        RopeCase("apply_rope(x, positions=5..11)", (1, 7, 6), f64, torch.arange(7) + 5, None,
                 "Use the `positions` argument when it is given instead of 0..L-1."),
        RopeCase("apply_rope(x, positions=[3, 0, 17, 2, 2, 40, 1] in float64)", (1, 7, 6), f64,
                 torch.tensor([3.0, 0.0, 17.0, 2.0, 2.0, 40.0, 1.0], dtype=f64), None),
        RopeCase("apply_rope(x, positions=[0.5, 0, 2.25, 7, 1.5, 30.75, 3] in float64)",
                 (1, 7, 6), f64,
                 torch.tensor([0.5, 0.0, 2.25, 7.0, 1.5, 30.75, 3.0], dtype=f64), None,
                 "The angle is position * theta_i for any real position: do not round it."),
        RopeCase("apply_rope(x, positions) with (B, L) positions, one row per sequence, for x "
                 "of shape (3, 5, 8)", (3, 5, 8), f64,
                 torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11], [4, 3, 2, 1, 0]]), None,
                 "positions may have the shape of x without its last axis: each sequence "
                 "its own positions."),
        RopeCase("apply_rope(x, positions) with positions of shape (2, 1, 5) for x of shape "
                 "(2, 2, 5, 8)", (2, 2, 5, 8), torch.float32,
                 torch.tensor([[[0, 1, 2, 3, 4]], [[3, 4, 5, 6, 7]]]), None,
                 "positions broadcasts to x's shape without its last axis."),
        RopeCase("apply_rope(x, base=100.0)", (1, 7, 6), f64, None, 100.0,
                 "theta_i is computed from the `base` argument."),
    ]  # fmt: skip


@exercise_check(
    "Exercise 4.4",
    "rotary position embedding (RoPE)",
    hint="Each adjacent pair (x[..., 2i], x[..., 2i+1]) at position m is rotated by the angle "
    "m * theta_i, theta_i = base^(-2i/d), positions counted from 0.",
)
def rope(student_apply_rope: Callable[..., torch.Tensor]) -> None:
    """Shape, norms, position 0, the relative-offset property, then the exact formula."""
    names = ("x", "positions")
    for number, case in enumerate(_rope_cases()):
        x = torch.randn(case.shape, generator=generator(number), dtype=case.dtype)
        length = case.shape[-2]
        positions = torch.arange(length) if case.positions is None else case.positions
        arguments = [x] if case.positions is None else [x, case.positions]
        options = {} if case.base is None else {"base": case.base}
        floating = case.positions is not None and case.positions.is_floating_point()
        try:
            got = call(case.what, student_apply_rope, *arguments, names=names, **options)
        except StudentError as error:
            if not floating:
                raise CheckFailure(f"{case.what}: {error.message}", case.hint) from None
            raise CheckFailure(
                f"{case.what}: {error.message}; positions may be floating point (float64, "
                "even fractional), not only integer indices.",
                "Compute the angles from the positions themselves instead of looking rows up "
                "in a precomputed table.",
            ) from None
        expect_shape(got, x.shape, case.what, "RoPE returns a tensor of x's shape.")
        expect(
            got.dtype == x.dtype,
            f"{case.what} changed the dtype from {x.dtype} to {got.dtype}; the exercise asks "
            "to keep it.",
        )
        if number == 0:
            expect_close(
                got.norm(dim=-1),
                x.norm(dim=-1),
                what=f"the vector norms after {case.what} (a rotation keeps every length)",
                hint="Each pair is rotated; adding a position vector or scaling changes norms.",
                atol=1e-4,
            )
            expect_close(
                got[..., 0, :],
                x[..., 0, :],
                what=f"the vectors at position 0 after {case.what} (angle 0: unchanged)",
                hint="Positions start at 0 by default.",
                atol=1e-6,
            )
        base = case.base or 10000.0
        expected = _rotated(x, positions, base)
        tolerance = 1e-5 if x.dtype == torch.float64 else 1e-4
        if not torch.allclose(got, expected, atol=tolerance) and torch.allclose(
            got, _rotated_half_split(x, positions, base), atol=tolerance
        ):
            raise CheckFailure(
                f"{case.what} rotates the pairs (x_i, x_(i+d/2)) of the half-split layout; "
                "this exercise rotates the adjacent pairs (x_2i, x_2i+1) of the paper.",
                "Reread which coordinates form a pair in the exercise text.",
            )
        expect_close(got, expected, case.what, case.hint, atol=tolerance)

    # The defining property: <R_m q, R_n k> depends only on m - n.
    q, k = torch.randn(2, 32, generator=generator(99), dtype=torch.float64)
    rq = call("apply_rope of one query at positions 0..11", student_apply_rope,
              q.expand(12, 32).clone(), names=names)  # fmt: skip
    rk = call("apply_rope of one key at positions 0..11", student_apply_rope,
              k.expand(12, 32).clone(), names=names)  # fmt: skip
    scores = rq @ rk.T
    expect_close(
        scores[1:, 1:],
        scores[:-1, :-1],
        what="score(m + 1, n + 1) vs score(m, n) for one query and one key at every pair of "
        "positions (the score must depend only on m - n)",
        hint="Queries and keys are rotated by angles proportional to their position, with the "
        "same frequencies for both.",
        atol=1e-8,
        rtol=1e-8,
    )
    x = torch.randn(2, 2, 6, 8, generator=generator(98))
    _expect_on_meta(
        "apply_rope with x on the meta device",
        student_apply_rope,
        x,
        hint="Tensors you create (default positions, frequencies) must live on x's device.",
    )
