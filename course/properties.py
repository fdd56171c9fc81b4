"""The properties every right answer has, written once and used by every check they apply to.

Each helper observes the student's code through :func:`course.observe.observe` (so the verdict
can be replayed where the student's code never runs) and fails with a message that names the
property violated:

* **inputs untouched**  :func:`call` compares every argument before and after the call;
* **global state unchanged**  every observation (see :func:`course.observe.observe`);
* **device**  :func:`on_meta` runs code on tensors of the ``meta`` device, which exists on every
  machine: a tensor created without ``device=`` lands on the CPU and mixing it fails;
* **training and eval mode**  :func:`modes` reads every sub-module's ``training`` flag;
* **gradients**  :func:`gradients` backpropagates a fixed random weighting of the output;
* **numeric range**  :func:`large_scores` draws scores in the hundreds and thousands;
* **the exception the contract states**  :func:`expect_raises`.

Inputs come from :func:`generator` (re-exported from :mod:`course.observe`); reference modules
that need torch's global generator are built under :func:`seeded`.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from course.check import CheckFailure, expect
from course.observe import (
    REPLAY,
    Absent,
    Foreign,
    NotPlainData,
    StudentError,
    current,
    generator,
    observe,
    to_plain,
    to_student_plain,
    type_name,
)
from course.virtual import DeviceMixed, run_on_virtual

__all__ = [
    "Absent",
    "call",
    "construct",
    "expect_raises",
    "generator",
    "gradients",
    "large_scores",
    "modes",
    "observe",
    "on_meta",
    "same",
    "seeded",
]

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


@contextlib.contextmanager
def seeded(offset: int = 0) -> Iterator[None]:
    """Torch's global generator forked and seeded from the session: for reference modules."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(current().seed * 1_000_003 + 104_729 + offset)
        yield


def same(a: Any, b: Any) -> bool:
    """Exact equality of plain data (tensors: same dtype, shape and values, NaN equal to NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
        return torch.equal(a, b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, Foreign) and isinstance(b, Foreign):
        return (a.type_name, a.base) == (b.type_name, b.base) and same(a.value, b.value)
    return type(a) is type(b) and a == b


def _snapshot(value: Any) -> Any:
    try:
        return to_plain(value)
    except NotPlainData:
        return None  # a module or a function: not compared


def call(
    what: str,
    function: Any,
    *args: Any,
    random: bool = False,
    names: Sequence[str] = (),
    free: Sequence[str] = (),
    **kwargs: Any,
) -> Any:
    """``function(*args, **kwargs)`` observed: its result as plain data.

    Fails when the call changed one of its arguments (a tensor, list or dict) in place: the
    property "inputs untouched". ``names`` names the positional arguments in messages; the
    arguments named in ``free`` may change (the exercise text allows it).
    """
    before = (
        [None if i < len(names) and names[i] in free else _snapshot(a) for i, a in enumerate(args)],
        {k: None if k in free else _snapshot(v) for k, v in kwargs.items()},
    )

    def run() -> dict[str, Any]:
        result = to_student_plain(function(*args, **kwargs))
        after = [_snapshot(a) for a in args], {k: _snapshot(v) for k, v in kwargs.items()}
        return {"result": result, "after": after}

    observed = observe(what, run, random=random)
    after_args, after_kwargs = observed["after"]
    expect(
        len(after_args) == len(before[0]) and isinstance(after_kwargs, dict),
        f"{what}: the arguments did not come back from the call.",
    )
    for i, (old, new) in enumerate(zip(before[0], after_args, strict=True)):
        label = f"`{names[i]}`" if i < len(names) else f"its {ORDINALS[min(i, 7)]} argument"
        expect(
            old is None or same(old, new),
            f"{what}: your code changed {label} in place. The property violated: inputs "
            "untouched; the caller still needs them.",
            "Compute into new tensors (x - m, not x -= m; torch.cat, not append) and copy a "
            "list or dict before changing it.",
        )
    for key, old in before[1].items():
        expect(
            old is None or same(old, after_kwargs.get(key)),
            f"{what}: your code changed the argument `{key}` in place. The property violated: "
            "inputs untouched.",
            "Compute into new tensors and copy a list or dict before changing it.",
        )
    return observed["result"]


def construct(what: str, cls: Any, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """Build the student's module ``cls(*args, **kwargs)``; return it and its state dict.

    In the trusted replay the module itself is an :class:`Absent` placeholder (it only ever
    appears inside later observed calls) and the state dict is the recorded one.
    """
    built: list[Any] = []

    def build() -> dict[str, Any]:
        module = cls(*args, **kwargs)
        built.append(module)
        return dict(module.state_dict()) if isinstance(module, nn.Module) else {}

    state = observe(what, build, random=True)
    return (built[0] if built else Absent(what)), state


def modes(module: nn.Module) -> dict[str, bool]:
    """``{sub-module name: training flag}`` of every sub-module (call it inside ``observe``)."""
    return {name or "(the module itself)": sub.training for name, sub in module.named_modules()}


def gradients(
    forward: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    parameters: dict[str, torch.Tensor] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Output and gradients of ``(forward(*inputs) * w).sum()`` for a fixed random ``w``.

    Floating inputs get ``requires_grad``; returns ``{"output", "inputs": [grad or None],
    "parameters": {name: grad or None}}``. Call it inside ``observe`` for the student's module
    and directly for the reference, with the same ``seed``.
    """
    leaves = [
        x.detach().clone().requires_grad_(x.is_floating_point())
        if isinstance(x, torch.Tensor)
        else x
        for x in inputs
    ]
    with torch.enable_grad():
        output = forward(*leaves)
        if not isinstance(output, torch.Tensor):
            raise CheckFailure(
                f"the forward pass returned a {type(output).__name__}, not a tensor.",
                "Return the output tensor.",
            )
        weight = torch.randn(
            output.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
        ).to(output.dtype)
        (output * weight).sum().backward()
    params = parameters or {}
    return {
        "output": output.detach(),
        "inputs": [x.grad if isinstance(x, torch.Tensor) else None for x in leaves],
        "parameters": {name: p.grad for name, p in params.items()},
    }


def large_scores(*shape: int, scale: float = 1000.0, offset: int = 0) -> torch.Tensor:
    """Scores in the hundreds and thousands: a softmax without the max shift overflows."""
    return torch.randn(*shape, generator=generator(offset)) * scale


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in nested lists, tuples and dicts (the arguments of one operation)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


class NoDeviceMixing(TorchFunctionMode):
    """Fails an operation that mixes tensors of two devices, as a GPU does (0-dim scalars aside).

    The meta device alone lets some mixes through (``F.embedding`` of CPU indices into a meta
    table), which a GPU refuses.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        kwargs = kwargs or {}
        devices = {t.device.type for t in _tensors((args, kwargs)) if t.dim() > 0}
        if len(devices) > 1:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found {sorted(devices)}"
            )
        return func(*args, **kwargs)


def on_meta(function: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run ``function`` with tensors (and modules) moved to the ``meta`` device.

    Returns ``{"device": ..., "shape": ...}`` of the result (call it inside ``observe``). A
    tensor created without ``device=`` lives on the CPU, and any operation that meets it with a
    meta tensor fails (:class:`NoDeviceMixing`), as it would on a GPU.
    """

    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor | nn.Module):
            return value.to("meta")
        return value

    moved_args = [move(a) for a in args]
    moved_kwargs = {k: move(v) for k, v in kwargs.items()}
    with NoDeviceMixing():
        out = function(*moved_args, **moved_kwargs)
    first = out[0] if isinstance(out, tuple | list) and out else out
    if not isinstance(first, torch.Tensor):
        return {"device": None, "shape": None}
    return {"device": first.device.type, "shape": tuple(first.shape)}


def expect_raises(
    what: str,
    function: Callable[[], Any],
    error: type[BaseException],
    message: str,
    hint: str | None = None,
) -> None:
    """The contract says ``function()`` raises ``error``: fail with ``message`` otherwise."""
    try:
        observe(what, lambda: _returned(function()))
    except StudentError as raised:
        if error.__name__ in raised.error_type.split(","):
            return
        raise CheckFailure(
            f"{what} raised {raised.error_type.split(',')[0]}; {message}", hint
        ) from None
    raise CheckFailure(f"{what} returned without raising {error.__name__}; {message}", hint)


def _returned(value: Any) -> None:
    return None


def in_replay() -> bool:
    """True in the grader's trusted process (student objects are absent there)."""
    return current().mode == REPLAY


# What torch says when a tensor created on the CPU meets the meta inputs. Left out on purpose:
# masked_fill's "Expected `value` to be on same device" (a 0-dim CPU value is fine on a GPU).
_DEVICE_MIX = (
    "is not on the expected device",
    "Expected all tensors to be on the same device",
    "to have the same device type",
)


def meta_device(what: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """The device property, observed: run ``function`` with its tensors (and modules) on ``meta``.

    Returns the device type of the (first) tensor result: ``"meta"`` when right, ``"cpu"``
    when the code returned, or mixed in, a tensor it created without ``device=``; ``None`` when
    the run cannot decide, because the code reads values (``.item()``, ``if t.any():``), which
    meta tensors lack but a GPU has, or failed for a reason other checks report. Modules passed
    in are moved to ``meta`` in place: pass a module no later observation uses.
    """

    def run() -> str | None:
        try:
            return on_meta(function, *args, **kwargs)["device"]
        except NotImplementedError as error:
            if "meta" in str(error).lower():  # an operator torch has no meta kernel for
                return None
            raise  # the student's stub
        except CheckFailure:
            return None
        except Exception as error:  # noqa: BLE001 - only a device mix-up is this property's
            return "cpu" if any(text in str(error) for text in _DEVICE_MIX) else None

    return observe(what, run)


def observe_gradients(
    what: str,
    forward: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    parameters: Callable[[], dict[str, torch.Tensor]] | None = None,
) -> dict[str, Any]:
    """:func:`gradients` of the student's ``forward``, observed. An output cut from the graph
    (``.detach()``, ``torch.no_grad()``) gives ``None`` gradients instead of an error, so the
    check can say which input or parameter gets no gradient. ``parameters`` is called inside the
    observation (it reads the student's module)."""

    def run() -> dict[str, Any]:
        params = parameters() if parameters is not None else None
        try:
            return gradients(forward, inputs, params)
        except RuntimeError as error:
            if "does not require grad" not in str(error):
                raise
            return {"output": None, "inputs": [None] * len(inputs), "parameters": {}}

    return observe(what, run)


# --- the properties a spec declares (applied by course.spec's runner) -----------------------


def tolerance(dtype: torch.dtype, strict: bool | dict = False) -> dict[str, float]:
    """What a dtype allows. float64 is held to float64 precision only when the exercise text asks
    for it (``strict``); otherwise a right answer computed in float32 inside passes too. A dict
    is a case's own bound (an expanded square cancels digits: its bound follows its terms)."""
    if isinstance(strict, dict):
        return strict
    if dtype == torch.float64 and strict:
        return {"atol": 1e-10, "rtol": 1e-8}
    if dtype in (torch.float16, torch.bfloat16):
        return {"atol": 1e-2, "rtol": 1e-2}
    return {"atol": 1e-5, "rtol": 1e-4}


def _is_float(value: Any) -> bool:
    """A Python float as typing reads it: a float, a subclass of float (numpy.float64), or an
    int (PEP 484's numeric tower), never a bool, a numpy.float32 or a tensor."""
    if isinstance(value, Foreign):
        return value.base in ("float", "int")
    return type(value) in (float, int)


def _leaf_type(value: Any) -> str:
    return "torch.Tensor" if isinstance(value, torch.Tensor) else type_name(value)


def expect_result(
    got: Any,
    expected: Any,
    what: str,
    hint: str | None = None,
    strict: bool | dict = False,
    values: bool = True,
) -> None:
    """The stated result: the same type at every leaf (a Python float is not a NumPy float, a
    list of ints is not a tensor), the same container shape, tensors of the same dtype and shape,
    and (with ``values``) values within :func:`tolerance`, NaN where the reference has NaN."""
    if isinstance(expected, OneOf):
        expected = _one_of(got, expected, what, hint)
        if isinstance(got, Foreign):  # an accepted foreign type (a NumPy array): its values
            got = got.value
            expected = expected.to(got.dtype) if isinstance(got, torch.Tensor) else expected
    if isinstance(expected, tuple | list):
        expect(
            isinstance(got, tuple | list) and (isinstance(expected, tuple) or type(got) is list),
            f"{what} returned a {_leaf_type(got)}, but the exercise text says a "
            f"{type(expected).__name__} of {len(expected)} (the property violated: the stated "
            "return type).",
            hint,
        )
        if values or isinstance(expected, tuple):  # a list's length is part of its value
            expect(
                len(got) == len(expected),
                f"{what} returned {len(got)} values, expected {len(expected)} (the property "
                "violated: the stated result).",
                hint,
            )
        for i, (mine, theirs) in enumerate(zip(got, expected, strict=False)):
            label = what if len(expected) == 1 else f"{what}, item {i}"
            expect_result(mine, theirs, label, hint, strict, values)
        return
    if isinstance(expected, dict):
        stated = "dict" if type(expected) is dict else type_name(expected)  # "a Counter"
        expect(
            isinstance(got, dict) and stated in ("dict", type_name(got)),
            f"{what} returned a {_leaf_type(got)}, but the exercise text says a {stated} (the "
            "property violated: the stated return type; the code after it uses what a "
            f"{stated} has).",
            hint,
        )
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        expect(
            not missing,
            f"{what} has no entry {missing[0]!r} ({len(missing)} missing), expected "
            f"{expected[missing[0]]!r} there (the property violated: the stated result)."
            if missing
            else "",
            hint,
        )
        expect(
            not extra,
            f"{what} has an entry {extra[0]!r} = {got[extra[0]]!r} that should not be there "
            f"({len(extra)} extra; the property violated: the stated result)."
            if extra
            else "",
            hint,
        )
        for name in expected:
            expect_result(got[name], expected[name], f"{what}[{name!r}]", hint, strict, values)
        return
    if isinstance(expected, float) and _is_float(got):  # PEP 484: an int is a float too
        got = float(got.value if isinstance(got, Foreign) else got)
    expect(
        _leaf_type(got) == _leaf_type(expected),
        f"{what} returned a {_leaf_type(got)}, but the exercise text says a "
        f"{_leaf_type(expected)} (the property violated: the stated return type).",
        hint,
    )
    if isinstance(expected, torch.Tensor):
        _expect_tensor(got, expected, what, hint, strict, values)
    elif not values:
        return
    elif isinstance(expected, float):
        bound = tolerance(torch.float64, strict)
        both_nan = got != got and expected != expected
        expect(
            both_nan
            or got == expected
            or abs(got - expected) <= bound["atol"] + bound["rtol"] * abs(expected),
            f"{what} is {got!r}, expected {expected!r}.",
            hint,
        )
    else:
        expect(got == expected, f"{what} is {got!r}, expected {expected!r}.", hint)


def _expect_tensor(
    got: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    hint: str | None,
    strict: bool,
    values: bool = True,
) -> None:
    expect(
        got.dtype == expected.dtype,
        f"{what} has dtype {got.dtype}, expected {expected.dtype} (the property violated: the "
        "stated dtype).",
        hint,
    )
    if not values:  # a shape is judged with the values, after the exercise's own properties
        return
    expect(
        tuple(got.shape) == tuple(expected.shape),
        f"{what} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}.",
        hint,
    )
    if not (expected.is_floating_point() or expected.is_complex()):
        if not torch.equal(got, expected):
            index = tuple(int(i) for i in (got != expected).nonzero()[0])
            raise CheckFailure(
                f"{what} is wrong at index {index}: yours {got[index].tolist()}, expected "
                f"{expected[index].tolist()}.",
                hint,
            )
        return
    overflow = ~torch.isfinite(got) & torch.isfinite(expected)
    if overflow.any():
        first = tuple(int(i) for i in overflow.nonzero()[0])
        raise CheckFailure(
            f"{what} gives {got[first].item()} (inf or NaN) at index {first} where the reference "
            f"is {expected[first].item():.6g} (the property violated: numeric range).",
            hint,
        )
    nan_mismatch = torch.isnan(got) != torch.isnan(expected)
    if nan_mismatch.any():
        first = tuple(int(i) for i in nan_mismatch.nonzero()[0])
        raise CheckFailure(
            f"{what} has a number where the reference has NaN (first at index {first}).",
            hint,
        )
    bound = tolerance(expected.dtype, strict)
    if torch.allclose(got, expected, equal_nan=True, **bound):
        return
    diff = (got.double() - expected.double()).abs().nan_to_num(float("inf"))
    diff[torch.isnan(expected)] = 0
    index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    raise CheckFailure(
        f"{what} differs from the reference: largest difference {diff.max().item():.3g} at "
        f"index {index} (yours {got[index].item():.6g}, expected {expected[index].item():.6g}).",
        hint,
    )


def on_device(
    what: str,
    function: Callable[..., Any],
    args: tuple = (),
    kwargs: dict | None = None,
    modules: tuple = (),
) -> dict[str, Any]:
    """The device property, observed: ``function`` run with its tensors and ``modules`` on a
    second device that computes real values (:mod:`course.virtual`). Returns where each result
    tensor lives and what the code raised there, if anything."""

    def run() -> dict[str, Any]:
        try:
            _, where = run_on_virtual(function, args, kwargs, modules)
        except NotImplementedError:
            raise
        except (DeviceMixed, TypeError, RuntimeError) as error:
            return {"devices": [], "error": f"{type(error).__name__}: {error}"}
        return {"devices": where, "error": None}

    return observe(what, run, random=True)


DEVICE_HINT = (
    "Every tensor your code creates must live on the device of its inputs: `device=x.device`, "
    "`torch.zeros_like(x)`, `x.new_zeros(...)`; register tables as buffers so `.to(device)` "
    "moves them; never go through NumPy or `.cpu()` on the way to the output."
)


def expect_device(what: str, observed: dict[str, Any], hint: str | None = None) -> None:
    """Fail unless the run on the second device raised nothing and left every result there."""
    error = observed.get("error")
    expect(
        error is None,
        f"{what}: on another device (a GPU, or here a test device) your code failed with "
        f"{error} (the property violated: device, the result must live on the inputs' device; "
        "the same inputs on the CPU worked).",
        hint or DEVICE_HINT,
    )
    devices = observed.get("devices") or []
    expect(
        all(d == "virtual" for d in devices),
        f"{what}: given inputs on another device, your code returned a tensor on the CPU (the "
        "property violated: device, the result must live on the inputs' device). On a GPU the "
        "next operation would fail.",
        hint or DEVICE_HINT,
    )


def expect_gradients(
    what: str,
    got: dict[str, Any],
    expected: dict[str, Any],
    names: Sequence[str],
    hint: str | None = None,
) -> None:
    """Every named gradient (``inputs`` by position, then ``parameters`` by name) reaches and
    equals the reference's: the property "gradients"."""
    pairs = list(zip(names, got["inputs"], expected["inputs"], strict=False))
    pairs += [(n, got["parameters"].get(n), g) for n, g in expected["parameters"].items()]
    for name, mine, theirs in pairs:
        if theirs is None:
            continue
        expect(
            isinstance(mine, torch.Tensor),
            f"{what}: no gradient reaches `{name}` (the property violated: gradients, the result "
            "must stay differentiable); training could not learn what produces it.",
            hint
            or "Compute with differentiable torch operations; no .detach(), .item(), NumPy "
            "or torch.no_grad() on the way to the output.",
        )
        expect_result(mine, theirs, f"the gradient with respect to `{name}` ({what})", hint)


def expect_parameters(
    what: str, got: dict[str, Any], declared: dict[str, tuple[int, ...]], hint: str | None = None
) -> None:
    """The trainable parameters are exactly those the exercise text names, with their shapes:
    none missing, none extra (an extra one would be trained although the text has no such
    weight)."""
    names = set(got)
    missing = sorted(set(declared) - names)
    extra = sorted(names - set(declared))
    expect(
        not missing,
        f"{what} has no trainable parameter {', '.join(f'`{n}`' for n in missing)} (what it has: "
        f"{', '.join(f'`{n}`' for n in sorted(names)) or 'none'}). The check reads each layer "
        "by the name the exercise gives it.",
        hint or "Keep the sub-modules, names and layer types that the exercise describes.",
    )
    expect(
        not extra,
        f"{what} has trainable parameters the exercise does not describe: "
        f"{', '.join(f'`{n}`' for n in extra)} (the property violated: the parameters the text "
        "names; an extra one would be trained too).",
        hint or "Build only the layers the exercise describes; a fixed table is a buffer.",
    )
    for name, shape in declared.items():
        expect(
            tuple(got[name]) == tuple(shape),
            f"{what}: `{name}` has shape {tuple(got[name])}, expected {tuple(shape)}.",
            hint,
        )


def expect_same_in_modes(what: str, train: Any, evaluation: Any, hint: str | None = None) -> None:
    """Where the text says training mode changes nothing (no dropout, or dropout 0), the output
    in ``train()`` equals the output in ``eval()``: the property "training mode"."""
    try:
        expect_result(train, evaluation, f"{what} in train() mode", hint)
    except CheckFailure as failure:
        raise CheckFailure(
            f"{failure.message} Training mode changed the result although the exercise says it "
            "changes nothing here (the property violated: training mode: a dropout or a random "
            "draw the text does not describe).",
            failure.hint,
        ) from None


def expect_modes_reach(what: str, modes_in_train: dict[str, bool]) -> None:
    """``train()`` reaches every sub-module (no sub-module kept in eval mode, no flag forced)."""
    stuck = [name for name, training in modes_in_train.items() if not training]
    expect(
        not stuck,
        f"{what}: after .train(), {', '.join(f'`{n}`' for n in stuck)} stayed in eval mode (the "
        "property violated: training mode, in every sub-module).",
        "Register sub-modules as attributes (or nn.ModuleList), and never set `.training` by "
        "hand: .train() and .eval() must reach all of them.",
    )


def expect_reproducible(what: str, second: Any, first: Any) -> None:
    """Randomness only from the given generator: the same seed gives the same result."""
    try:
        expect_result(second, first, what)
    except CheckFailure as failure:
        raise CheckFailure(
            f"{what}: two generators seeded alike gave different results ({failure.message}) "
            "(the property violated: randomness only from the given generator).",
            "Pass the generator to every random draw (`generator=`); never use torch's global "
            "random functions without it.",
        ) from None


def expect_same_again(what: str, again: Any, first: Any) -> None:
    """No state kept between calls: the same inputs, called again after other calls, give the
    same result (exactly: the same code on the same inputs computes the same bits)."""
    if same(again, first):
        return
    try:
        expect_result(again, first, what)
        detail = "the values differ by a rounding error only"
    except CheckFailure as failure:
        detail = failure.message
    raise CheckFailure(
        f"{what}: your code gives different results on repeated calls with the same inputs (the "
        f"second call, after other inputs, against the first: {detail}). The property violated: "
        "the result depends only on the inputs.",
        "Keep nothing between calls (no cache, counter or mask stored in a global or on the "
        "function); compute everything from the arguments of this call.",
    )


@dataclass(frozen=True)
class OneOf:
    """A result the text allows in several types ("``exp(loss)`` as a 0-dim tensor or a float"):
    ``value`` (a tensor) and the type names accepted, as :func:`expect_result` names types;
    ``any_dtype``: the text states no dtype, so a tensor is compared in its own float dtype."""

    value: torch.Tensor
    types: tuple[str, ...] = ("torch.Tensor", "float")
    any_dtype: bool = False


def _one_of(got: Any, expected: OneOf, what: str, hint: str | None) -> Any:
    expect(
        _leaf_type(got) in expected.types,
        f"{what} returned a {_leaf_type(got)}, but the exercise text says "
        f"{' or '.join(expected.types)} (the property violated: the stated return type).",
        hint,
    )
    if isinstance(got, float):
        return float(expected.value)
    if expected.any_dtype and isinstance(got, torch.Tensor) and got.is_floating_point():
        return expected.value.to(got.dtype)
    return expected.value


def meaning(pick: Callable[[Any], Any], label: str, text: str) -> Callable[..., None]:
    """A judge for :class:`course.spec.Property`: ``pick(result)`` (one item of the result)
    equals the reference's, and a mismatch says what that item means in the exercise text."""

    def judge(case: Any, got: Any, expected: Any, observed: Any) -> None:
        try:
            what = f"{label} on {case.what}"
            expect_result(pick(got), pick(expected), what, case.hint, case.strict)
        except CheckFailure as failure:
            raise CheckFailure(
                f"{failure.message} (the property violated: {text})", failure.hint
            ) from None

    return judge


# --- properties first declared by notebook 03 ---


def is_dropout_of(got: torch.Tensor, clean: torch.Tensor, p: float) -> bool:
    """True when ``got`` looks like ``nn.Dropout(p)`` applied to ``clean`` in training mode:
    every entry is 0 or ``clean / (1 - p)``, and at least one nonzero entry was zeroed."""
    if not isinstance(got, torch.Tensor) or got.shape != clean.shape:
        return False
    got, clean = got.detach().double(), clean.detach().double()
    scale = clean.abs().max().item() + 1e-12
    zero = got.abs() <= 1e-6 * scale
    kept = (got - clean / (1 - p)).abs() <= 1e-5 * scale
    return bool((zero | kept).all()) and bool((zero & (clean.abs() > 1e-4 * scale)).any())


def refusal(
    error: type[BaseException],
    attempt: Callable[[Any], Any],
    what: str,
    message: str,
    hint: str | None = None,
) -> dict[str, Callable]:
    """The text says ``attempt(student)`` raises ``error`` (a ValueError for sizes that do not
    fit): ``observe``/``judge`` of a spec :class:`~course.spec.Property`."""

    def watch(student: Any, case: Any, call: Callable) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            try:
                result = attempt(student)
            except error:
                return {"raised": None}
            first = result[0] if isinstance(result, tuple | list) and result else result
            return {"shape": tuple(first.shape) if isinstance(first, torch.Tensor) else None}

        try:  # random: a constructor may draw its initial weights before it refuses
            return observe(what, run, random=True)
        except StudentError as raised:
            if "NotImplementedError" in raised.error_type:
                raise
            return {"other": raised.error_type.split(",")[0]}

    def judge(case: Any, got: Any, expected: Any, observed: dict[str, Any]) -> None:
        if "raised" in observed:
            return
        if "other" in observed:
            done = f"raised {observed['other']}"
        else:
            shape = observed.get("shape")
            done = "was accepted" + (f" and returned shape {shape}" if shape else "")
        raise CheckFailure(
            f"{what} {done}: {message} The exercise text asks for a {error.__name__} (the "
            "property violated: the error the text states).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def blocked_keys_get_zero(pick: Callable[[Any], Any], mask_of: Callable[[Any], Any]) -> dict:
    """Blocked keys get exactly 0 attention weight in every head: ``pick(result)`` is the
    (B, H, Lq, Lk) weights, ``mask_of(case)`` the case's mask (True = may attend)."""

    def judge(case: Any, got: Any, expected: Any, seen: Any) -> None:
        weights, mask = pick(got), mask_of(case)
        if weights.shape != pick(expected).shape:
            return  # the shape speaks for itself
        full = mask if mask.dim() == 4 else mask.unsqueeze(1)
        leaked = ~full.expand(weights.shape) & (weights != 0)
        if leaked.any():
            b, h, i, j = (int(n) for n in leaked.nonzero()[0])
            raise CheckFailure(
                f"with {case.what}, head {h} of sequence {b} gave weight "
                f"{weights[b, h, i, j].item():.2g} to the blocked key {j} from query {i} (the "
                "property violated: blocked keys get exactly 0, in every head).",
                "One mask serves every head; a blocked score must become -inf before the "
                "softmax, not a large negative number.",
            )

    return {"judge": judge}


def per_head_weights(pick: Callable[[Any], Any], hint: str | None = None) -> dict:
    """Multi-head attention returns the weights of every head, (batch, num_heads, Lq, Lk):
    names a wrong number of heads (heads of num_heads features) or a missing head axis."""

    def judge(case: Any, got: Any, expected: Any, seen: Any) -> None:
        mine, theirs = pick(got), pick(expected)
        heads = theirs.shape[1]
        expect(
            mine.dim() != 3,
            f"on {case.what}, the attention weights have shape {tuple(mine.shape)}, without a "
            f"head axis; expected {tuple(theirs.shape)}, the weights of every head, not an "
            "average (the property violated: the per-head weights).",
            hint,
        )
        expect(
            mine.dim() != 4 or mine.shape[1] == heads,
            f"on {case.what}, the attention weights have {mine.shape[1]} heads on axis 1, but "
            f"num_heads={heads}: the number of heads is wrong (the property violated: num_heads "
            "heads of d_model / num_heads features each).",
            hint,
        )

    return {"judge": judge}


def _dropout_location(observed: dict[str, Any], heads: int, p: float) -> str | None:
    """Where dropout acted in multi-head attention: None when on the attention weights (the
    weights that multiplied V are recovered from the output: undo ``w_o``, split the heads,
    solve against each head's values), else the mistake in words."""
    out_t, out_e, w_e, x = (observed[k] for k in ("train", "eval", "weights", "value"))
    w_o, b_o, w_v, b_v = (observed["state"][k] for k in ("w_o.w", "w_o.b", "w_v.w", "w_v.b"))
    b_o = torch.zeros(w_o.shape[0], dtype=w_o.dtype) if b_o is None else b_o
    b_v = torch.zeros(w_v.shape[0], dtype=w_v.dtype) if b_v is None else b_v

    def merged(out: torch.Tensor) -> torch.Tensor:  # undo w_o: (B, H, Lq, d_k)
        return torch.linalg.solve(w_o.T, out - b_o, left=False).unflatten(-1, (heads, -1))

    heads_t, heads_e = merged(out_t).transpose(1, 2), merged(out_e).transpose(1, 2)
    v = (x @ w_v.T + b_v).unflatten(-1, (heads, -1)).transpose(1, 2)
    used = heads_t @ torch.linalg.pinv(v)  # the weights that multiplied V
    if torch.allclose(used @ v, heads_t, atol=1e-8) and is_dropout_of(used, w_e, p):
        return None if independent(used.abs() < 1e-9, 2) else _SHARED
    if is_dropout_of(out_t, out_e, p):
        return "dropout acts on the module's output (after w_o)"
    if is_dropout_of(heads_t, heads_e, p):
        return "dropout acts on the heads' outputs (weights @ V, before w_o)"
    return "the output is not the values weighted by the attention weights after one dropout(p)"


def is_float(value: Any) -> bool:
    """A floating-point tensor."""
    return isinstance(value, torch.Tensor) and value.is_floating_point()


_SHARED = (
    "every sequence (and head) dropped the same entries: one mask drawn for all of them instead "
    "of one draw per entry"
)


def independent(dropped: torch.Tensor, axes: int) -> bool:
    """False when all slices over the first ``axes`` axes dropped the same entries. For entries
    dropped independently with probability p, n entries per slice and k slices, that happens
    with probability (p^2 + (1-p)^2)^(n (k-1)): below 1e-7 for the checks' cases (p = 0.3, n >=
    12, k >= 2 with n (k - 1) >= 30)."""
    slices = dropped.flatten(0, axes - 1)
    return not bool((slices == slices[:1]).all()) or slices.shape[0] < 2


def dropout_rate(dropped: torch.Tensor, p: float, what: str, hint: str | None = None) -> None:
    """The share of dropped entries is p: a binomial count outside p*n +- 5 standard deviations
    (a false alarm with probability below 6e-7) fails. On 16,800 entries at p = 0.3 that
    bound is +-1.8 points of rate, so a rate 3 points off fails 19 times in 20."""
    n, count = dropped.numel(), int(dropped.sum())
    bound = 5.0 * (n * p * (1 - p)) ** 0.5
    expect(
        abs(count - n * p) <= bound,
        f"{what}: {count} of {n} entries were dropped ({count / n:.1%}), but dropout={p} drops "
        f"{p:.0%} of them on average (the property violated: the dropout probability).",
        hint,
    )


def dropout_on_attention(p: float, heads: int, hint: str | None = None) -> dict:
    """Multi-head attention's dropout, in training mode: it acts on the attention weights
    before they multiply V, and the weights returned are those before dropout. Observed on a
    float64 copy of the module (so the solve that recovers the weights is exact)."""

    def watch(module: Any, case: Any, call: Callable) -> dict[str, Any]:
        inputs = {k: v.double() if is_float(v) else v for k, v in case.inputs.items()}

        def run() -> dict[str, Any]:
            twin = copy.deepcopy(module).double().eval()
            evaluation = twin(**inputs)
            trained = twin.train()(**inputs)
            named = dict(twin.named_parameters())
            state = {
                f"{n}.{k[0]}": named.get(f"{n}.{k}")
                for n in ("w_o", "w_v")
                for k in ("weight", "bias")
            }
            return {
                "eval": evaluation,
                "train": trained,
                "value": inputs["value"],
                "state": {k: v.detach() if v is not None else None for k, v in state.items()},
            }

        return observe(f"the module in train() mode on {case.what}", run, random=True)

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        if got[1].shape != expected[1].shape or got[0].shape != expected[0].shape:
            return  # the shape speaks for itself
        (out_e, w_e), (out_t, w_t) = seen["eval"], seen["train"]
        what = f"in train() mode with dropout={p}, on {case.what}"
        if not torch.allclose(w_t, w_e, atol=1e-10):
            state = (
                "are the ones after dropout (zeros and 1/(1-p)-scaled values)"
                if is_dropout_of(w_t, w_e, p)
                else "differ from those in eval mode"
            )
            raise CheckFailure(
                f"{what}, the returned attention weights {state}; return the weights before "
                "dropout, the pattern the model computed (the property violated: the stated "
                "result in training mode).",
                hint,
            )
        expect(
            not torch.allclose(out_t, out_e, atol=1e-10),
            f"{what}, the output equals the eval-mode output: dropout is never applied (the "
            "property violated: training mode).",
            hint,
        )
        seen = {**seen, "train": out_t, "eval": out_e, "weights": w_e}
        mistake = _dropout_location(seen, heads, p)
        expect(
            mistake is None,
            f"{what}, {mistake} (the property violated: training mode); dropout belongs on the "
            "attention weights: each weight zeroed with probability p (the others scaled by "
            "1/(1-p)) before they multiply V.",
            hint,
        )

    return {"observe": watch, "judge": judge}


# --- properties first declared by notebook 04 ---


def expect_rows_close(got: Any, expected: torch.Tensor, what: str, hint: str | None = None) -> None:
    """``got`` (..., L, d) against ``expected`` with a tolerance that grows with the position:
    float32 angles near position p are about p * 1e-7 apart, so a table built in float32 (as
    pytorch/examples, the Annotated Transformer and d2l do) is as right as float32 allows."""
    expect(
        isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(expected.shape),
        f"{what} has shape {tuple(getattr(got, 'shape', ()))}, expected {tuple(expected.shape)}.",
        hint,
    )
    allowed = 2e-5 + 4e-6 * torch.arange(expected.shape[-2], dtype=torch.float64)[:, None]
    excess = (got.double() - expected.double()).abs() - allowed
    if bool(torch.isfinite(got).all()) and bool((excess <= 0).all()):
        return
    index = tuple(int(i) for i in torch.unravel_index(excess.nan_to_num(1e9).argmax(), got.shape))
    raise CheckFailure(
        f"{what} differs from the formula: at index {index} yours is {got[index].item():.6g}, "
        f"expected {expected[index].item():.6g}.",
        hint,
    )


def close_by_position(
    sizes: Sequence[dict[str, Any]], reference: Callable[..., torch.Tensor], name: str
) -> dict:
    """Long tables (``name(**inputs)`` for each of ``sizes``) within :func:`expect_rows_close`
    of ``reference``; on a pass, a note where float32 angles cost precision."""

    def watch(student: Any, case: Any, call_: Callable) -> list[Any]:
        shown = lambda i: f"{name}({', '.join(map(str, i.values()))})"  # noqa: E731
        return [call(shown(i), student, *i.values()) for i in sizes]  # as the course calls it

    def judge(case: Any, got: Any, expected: Any, tables: list[Any]) -> None:
        error = 0.0
        for inputs, table in zip(sizes, tables, strict=True):
            what = f"{name}({', '.join(map(str, inputs.values()))})"
            expect(
                isinstance(table, torch.Tensor) and table.dtype == torch.float32,
                f"{what} is not a float32 tensor (the property violated: the stated dtype).",
            )
            truth = reference(**inputs)
            expect_rows_close(table, truth, what, "Positions start at 0 and run to max_len - 1.")
            error = (table.double() - truth.double()).abs().max().item()
        if error > 1e-5 and not in_replay():
            print(
                f"Note: {what} is within {error:.1g} of the formula, as float32 angles allow. "
                "Computing the angles in float64 and converting the finished table with "
                ".float() makes it exact to float32 precision."
            )

    return {"observe": watch, "judge": judge}


def non_persistent_buffer(name: str, hint: str | None = None) -> dict:
    """The text's fixed table is a non-persistent buffer ``name``: it follows ``.to(device)``
    and ``.double()``, is not trained and not saved in the ``state_dict``."""

    def watch(module: Any, case: Any, call_: Callable) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            return {
                "buffers": [n for n, _ in module.named_buffers()],
                "saved": [k for k, v in module.state_dict().items() if v.numel() > 1],
            }

        return observe("the module's buffers and state_dict", run)

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        owner = "the module"
        expect(
            name in seen["buffers"],
            f"{owner} has no buffer `{name}` (buffers: {seen['buffers'] or 'none'}), so "
            ".to(device) and .double() would not move the table (the property violated: the "
            "table is a buffer).",
            hint,
        )
        expect(
            not seen["saved"],
            f"{owner} saves `{seen['saved'][0] if seen['saved'] else ''}` in its state_dict, "
            "so in every checkpoint; the table is a formula, rebuilt in __init__ (the property "
            "violated: a non-persistent buffer).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def dropout_on_sum(p: float, hint: str | None = None) -> dict:
    """In training mode the output is ``dropout(p)`` of the eval-mode output ``x + table[:L]``
    (dropout acts on the sum, nothing else)."""

    def watch(module: Any, case: Any, call_: Callable) -> Any:
        def run() -> Any:
            try:
                return module.train()(**case.inputs)
            finally:
                module.eval()

        return observe(f"the module in train mode on {case.what}", run, random=True)

    def judge(case: Any, got: Any, expected: torch.Tensor, trained: Any) -> None:
        what = f"in train mode with dropout={p}, on {case.what}"
        x = case.inputs["x"]
        if got.shape != expected.shape:
            return  # the shape speaks for itself
        expect(
            isinstance(trained, torch.Tensor) and trained.shape == expected.shape,
            f"{what}: the output has another shape than in eval mode.",
            hint,
        )
        expect(
            isinstance(trained, torch.Tensor) and not torch.equal(trained, expected),
            f"{what}: nothing was dropped (the property violated: training mode; dropout acts "
            "in train mode).",
            hint,
        )
        if is_dropout_of(trained, expected, p):
            expect(independent(trained == 0, 1), f"{what}: {_SHARED}.", hint)
            dropout_rate(trained == 0, p, what, hint)
            return
        if is_dropout_of(trained - (expected - x), x, p):
            mistake = "dropout is applied to x before the encoding is added"
        elif is_dropout_of(trained - x, expected - x, p):
            mistake = "dropout is applied to the encoding alone"
        else:
            mistake = "the output is not x + table[:L] after one dropout of that probability"
        raise CheckFailure(
            f"{what}: {mistake} (the property violated: training mode); dropout acts on the "
            "sum: each entry zeroed with probability p, the others scaled by 1/(1-p).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def relative_scores(what: str, length: int = 12, dim: int = 32, hint: str | None = None) -> dict:
    """RoPE's defining property: one query and one key placed at every position, the score
    ``<R_m q, R_n k>`` depends only on ``m - n``, at the tolerance the dtype allows."""

    def watch(student: Any, case: Any, call_: Callable) -> list[Any]:
        q, k = torch.randn(2, dim, generator=generator(99), dtype=torch.float64)
        return [
            call(
                f"{what} of one {n} at positions 0..{length - 1}",
                student,
                t.expand(length, dim).clone(),
                names=("x",),
            )
            for n, t in (("query", q), ("key", k))
        ]

    def judge(case: Any, got: Any, expected: Any, rotated: list[Any]) -> None:
        scores = rotated[0] @ rotated[1].T
        expect(
            torch.allclose(scores[1:, 1:], scores[:-1, :-1], **tolerance(scores.dtype)),
            f"score(m + 1, n + 1) differs from score(m, n) for one query and one key placed at "
            f"every pair of positions 0..{length - 1} (the property violated: the score depends "
            "only on m - n).",
            hint,
        )

    return {"observe": watch, "judge": judge}


# Statistical properties: exact where randomness allows. Each test is two-sided at FALSE_ALARM
# (a right implementation fails it with that probability, over the grader's random seeds), and
# the cases that use them are sized so that a one-point deviation (15% -> 14%, 80/10/10 ->
# 79/11/10) lies beyond 8 standard errors: missed with probability < 1e-3.
FALSE_ALARM = 1e-7


def _alarm(p_value: float) -> bool:
    return p_value < FALSE_ALARM


def _normal_p(z: float) -> float:
    """Two-sided p-value of a standard normal ``z``."""
    return float(torch.special.erfc(torch.tensor(abs(z) / 2**0.5, dtype=torch.float64)))


def proportion_z(count: int, trials: int, probability: float) -> float:
    """How many standard errors ``count`` successes in ``trials`` lie from ``probability``."""
    return (count - trials * probability) / (trials * probability * (1 - probability)) ** 0.5


def dispersion_p(hits: torch.Tensor, trials: torch.Tensor) -> tuple[float, str]:
    """Independent draws, grouped (by row, by position): is the spread of the group counts the
    binomial one? ``hits``/``trials`` are the counts per group, the success probability the
    pooled one. Returns the two-sided p-value (the dispersion statistic against a scaled
    chi-square with the binomial's exact mean and variance) and "less" or "more" spread."""
    keep = trials > 0
    k, n = hits[keep].double(), trials[keep].double()
    pi = float(k.sum() / n.sum())
    pq = pi * (1 - pi)
    statistic = float(((k - n * pi) ** 2 / (n * pq)).sum())
    mean, var = float(keep.sum()), float((2 + 1 / (n * pq) - 6 / n).sum())
    scale, dof = var / (2 * mean), 2 * mean**2 / var
    x = torch.tensor(statistic / (2 * scale), dtype=torch.float64)
    half = torch.tensor(dof / 2, dtype=torch.float64)
    upper, lower = float(torch.special.gammaincc(half, x)), float(torch.special.gammainc(half, x))
    return 2 * min(upper, lower), ("more" if upper < lower else "less")


def _masking_what(case: Any) -> str:
    return f"mask_tokens on {case.what}"


def _masking_parts(case: Any, got: Any) -> tuple:
    i = case.inputs
    masked, labels = (t.long() for t in got)
    return i["input_ids"], i["special_tokens_mask"], masked, labels, i["mask_token_id"]


def expect_mlm_invariants(case: Any, got: Any, expected: Any, seen: Any) -> None:
    """What no random draw may break: special and padding tokens never selected, a label is
    -100 or the ORIGINAL id, only selected tokens replaced, replacements inside [0, vocab)."""
    ids, special, masked, labels, _ = _masking_parts(case, got)
    what, vocab = _masking_what(case), case.inputs["vocab_size"]
    selected = labels != IGNORE_LABEL
    for bad, message, hint in (
        (
            special & (selected | (masked != ids)),
            "a special or padding token (id {o}) at {at} was selected or changed (label {l}, "
            "id after masking {m}). The property violated: special and padding tokens are never "
            "selected.",
            "`special_tokens_mask` marks the positions whose selection probability is zero.",
        ),
        (
            selected & (labels != ids),
            "label {l} at {at}; a label is -100 (not selected) or the ORIGINAL id {o} (selected). "
            "The property violated: labels hold the original ids.",
            "The labels are what the model must recover: take them before replacing anything.",
        ),
        (
            ~selected & (masked != ids),
            "the token at {at} was replaced (id {o} -> {m}) but its label is -100. The property "
            "violated: only selected tokens are replaced.",
            "The replacements happen inside the selected positions only.",
        ),
        (
            (masked < 0) | (masked >= vocab),
            "id {m} at {at} is outside the vocabulary [0, vocab_size={v}). The property "
            "violated: random ids are drawn from [0, vocab_size).",
            "Random ids are drawn from the whole vocabulary, 0 to vocab_size - 1.",
        ),
    ):
        if bad.any():
            r, c = (int(x) for x in bad.nonzero()[0])
            at = f"(row {r}, position {c})"
            text = message.format(
                o=int(ids[r, c]), at=at, l=int(labels[r, c]), m=int(masked[r, c]), v=vocab
            )
            raise CheckFailure(f"{what}: {text}", hint)


def expect_mlm_statistics(case: Any, got: Any, expected: Any, seen: Any) -> None:
    """Selection with probability ``mlm_probability``, each ordinary token independently (the
    spread of the counts per row and per position, neighbours uncorrelated), then 80% [MASK] /
    10% a random id / 10% kept among the selected, each token independently too."""
    ids, special, masked, labels, mask_id = _masking_parts(case, got)
    what, p, vocab = _masking_what(case), case.inputs["mlm_probability"], case.inputs["vocab_size"]
    ordinary, selected = ~special, labels != IGNORE_LABEL
    n, k = int(ordinary.sum()), int(selected.sum())
    z = proportion_z(k, n, p)
    expect(
        not _alarm(_normal_p(z)),
        f"{what}: {100 * k / n:.2f}% of the {n} ordinary tokens were selected (label not -100), "
        f"expected {100 * p:g}% ({z:+.1f} standard errors; a right implementation is that far "
        f"off with probability < {FALSE_ALARM:g}). The property violated: selection with "
        "probability `mlm_probability`.",
        "Each ordinary token is selected with probability `mlm_probability`, the argument.",
    )
    independent = "The property violated: each ordinary token is selected independently"
    for group, dim in (("row", 1), ("position", 0)):
        p_value, spread = dispersion_p(selected.sum(dim), ordinary.sum(dim))
        expect(
            not _alarm(p_value),
            f"{what}: the number of tokens selected per {group} varies {spread} than "
            f"independent draws allow (p = {p_value:.1e}). {independent} (not a fixed count per "
            "row, not the same positions in every row).",
            "One independent draw per token (a tensor of probabilities), nothing shared.",
        )
    pairs = ordinary[:, 1:] & ordinary[:, :-1]
    s = selected.double() - p
    z = float(((s[:, 1:] * s[:, :-1])[pairs]).sum()) / (p * (1 - p) * int(pairs.sum()) ** 0.5)
    expect(
        not _alarm(_normal_p(z)),
        f"{what}: neighbouring tokens are selected together {'more' if z > 0 else 'less'} often "
        f"than independent draws allow ({z:+.1f} standard errors). {independent} (no spans).",
        "One independent draw per token, nothing shared between neighbours.",
    )
    to_mask, kept = selected & (masked == mask_id), selected & (masked == ids)
    # a random id equal to [MASK] or to the original is seen as masked or kept: 1 in vocab each
    shares = (
        ("became [MASK]", to_mask, 0.8 + 0.1 / vocab),
        ("became a random id", selected & ~to_mask & ~kept, 0.1 * (1 - 2 / vocab)),
        ("stayed unchanged", kept, 0.1 + 0.1 / vocab),
    )
    for label, chosen, share in shares:
        z = proportion_z(int(chosen.sum()), k, share)
        expect(
            not _alarm(_normal_p(z)),
            f"{what}: of the {k} selected tokens, "
            + ", ".join(f"{100 * int(c.sum()) / k:.2f}% {w}" for w, c, _ in shares)
            + f"; expected 80% / 10% / 10% ('{label}' is {z:+.1f} standard errors off). The "
            "property violated: 80% [MASK], 10% a random id, 10% unchanged, of the SELECTED.",
            "The three shares are of the selected tokens: after the 80% that become [MASK], "
            "the remaining 20% split into two halves.",
        )
    p_value, spread = dispersion_p(to_mask.sum(1), selected.sum(1))
    expect(
        not _alarm(p_value),
        f"{what}: the share of selected tokens that became [MASK] varies {spread} from row to "
        f"row than independent draws allow (p = {p_value:.1e}). The property violated: each "
        "selected token's 80/10/10 decision is drawn independently.",
        "One independent draw per token for the 80/10/10 decision too.",
    )


def expect_mlm_id_range(case: Any, got: Any, expected: Any, seen: Any) -> None:
    """Random ids cover the whole vocabulary [0, vocab_size), special ids included: with a small
    vocabulary every id (but [MASK], which cannot be told apart) must appear among the visible
    replacements; each id has dozens of chances, so a right answer misses one with probability
    far below FALSE_ALARM."""
    ids, _, masked, labels, mask_id = _masking_parts(case, got)
    visible = (labels != IGNORE_LABEL) & (masked != ids) & (masked != mask_id)
    drawn = set(masked[visible].tolist())
    missing = [v for v in range(case.inputs["vocab_size"]) if v != mask_id and v not in drawn]
    expect(
        not missing,
        f"{_masking_what(case)}: among {int(visible.sum())} random replacements, the ids "
        f"{missing[:8]} never appear. The property violated: random ids are drawn uniformly "
        f"from [0, vocab_size={case.inputs['vocab_size']}), every id, special ones included.",
        "Draw random ids from the whole vocabulary, 0 to vocab_size - 1 (torch's upper bound "
        "is exclusive).",
    )


def sinusoid_first_row(hint: str | None = None) -> dict:
    """Row 0 of a sinusoidal table is (sin 0, cos 0, ...) = (0, 1, 0, 1, ...): the usual slips
    (sin and cos swapped, positions from 1, no cosines, two halves) named from it."""

    def judge(case: Any, got: torch.Tensor, expected: torch.Tensor, seen: Any) -> None:
        if got.shape != expected.shape:
            return  # the shape speaks for itself
        row, truth = got[0].double(), expected[0].double()
        half = row.shape[0] // 2
        near = lambda a, b: torch.allclose(a, b, atol=1e-4)  # noqa: E731
        if near(row, truth):
            return
        if near(row, 1.0 - truth):
            slip = "sin and cos are swapped (sin goes to the even columns)"
        elif expected.shape[0] > 1 and near(row, expected[1].double()):
            slip = "it equals the paper's PE[1]: positions must start at 0, not 1"
        elif near(row, torch.zeros_like(row)):
            slip = "it is all zeros, but cos 0 = 1 belongs in every odd column"
        elif near(row[:half], 0 * row[:half]) and near(row[half:], 1 + 0 * row[half:]):
            slip = "sines and cosines are in two halves, but the paper interleaves them"
        else:
            slip = "sin goes to the even columns, cos to the odd ones, positions from 0"
        raise CheckFailure(
            f"{case.what}: PE[0] should be (sin 0, cos 0, sin 0, ...) = (0, 1, 0, 1, ...); "
            f"{slip} (the property violated: the first row of the formula).",
            hint,
        )

    return {"judge": judge}


def rotation(reference: Callable[..., torch.Tensor], hint: str | None = None) -> dict:
    """A rotation by position: every vector keeps its norm, position 0 is unchanged, and the
    adjacent pairs of the text are rotated (not the pairs (x_i, x_(i + d/2)))."""

    def judge(case: Any, got: torch.Tensor, expected: torch.Tensor, seen: Any) -> None:
        if got.shape != expected.shape:
            return  # the shape speaks for itself
        x = case.inputs["x"].double()
        bound = tolerance(got.dtype)
        expect(
            torch.allclose(got.double().norm(dim=-1), x.norm(dim=-1), atol=1e-4, rtol=1e-4),
            f"on {case.what}, the vector norms changed (the property violated: a rotation keeps "
            "every length).",
            hint,
        )
        if case.inputs.get("positions") is None:
            expect(
                torch.allclose(got[..., 0, :].double(), x[..., 0, :], **bound),
                f"on {case.what}, the vectors at position 0 changed (the property violated: "
                "angle 0 at position 0, positions count from 0).",
                hint,
            )
        half = x.shape[-1] // 2
        x = case.inputs["x"]
        paired = torch.stack((x[..., :half], x[..., half:]), dim=-1).flatten(-2)
        out = reference(**{**case.inputs, "x": paired}).unflatten(-1, (half, 2))
        other = torch.cat((out[..., 0], out[..., 1]), dim=-1)
        expect(
            torch.allclose(got, expected, **bound) or not torch.allclose(got, other, **bound),
            f"on {case.what}, the pairs (x_i, x_(i+d/2)) of the half-split layout were rotated; "
            "this exercise rotates the adjacent pairs (x_2i, x_2i+1) (the property violated: "
            "which coordinates form a pair).",
            hint,
        )

    return {"judge": judge}


# --- properties first declared by notebook 06 ---


def expect_mapping_untouched(what: str, name: str, after: Any, before: dict) -> None:
    """A mapping argument the code must only read (an encoding) has the same entries after the
    calls: the property "inputs untouched", for arguments that are not plain data."""
    expect(
        same(after, before),
        f"{what}: your code changed `{name}` in place (entries now "
        f"{sorted(after) if isinstance(after, dict) else type(after).__name__}, before "
        f"{sorted(before)}). The property violated: inputs untouched; the caller still needs it.",
        "Build the result in a new list or tensor; read the arguments only.",
    )


def expect_token_labels(
    what: str, got: Any, expected: torch.Tensor, places: list[list[str]]
) -> None:
    """Token labels (one per token, -100 where the loss must skip): the first wrong position,
    named by what the token is (``places[row][column]``, "piece 2 of 3 of word 4", "a padding
    token"), with the principle that position breaks."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return  # the stated type and shape are the runner's
    wrong = (got != expected).nonzero()
    if len(wrong) == 0:
        return
    row, col = (int(v) for v in wrong[0])
    place, mine, ref = places[row][col], int(got[row, col]), int(expected[row, col])
    if "padding" in place or "special" in place:
        hint = "Special and padding tokens belong to no word: the loss must skip them."
        if "truncated" in what:
            hint += " Truncation drops pieces but keeps the final [SEP]: read the layout of the "
            hint += "encoded batch itself rather than rebuilding it from the words."
    elif ref == IGNORE_LABEL:
        hint = (
            "Only the FIRST piece of a word carries its tag; the other pieces of the same word "
            "are skipped by the loss, so each word is counted once."
        )
    elif mine == IGNORE_LABEL:
        hint = "The first piece of every word carries the word's tag."
    else:
        hint = "The tag of a token's word is found through that token's word id (from 0)."
    raise CheckFailure(
        f"{what}: row {row}, token position {col} ({place}) got label {mine}, expected {ref} "
        "(the property violated: one label per word, on its first piece).",
        hint,
    )


IGNORE_LABEL = -100  # the target cross-entropy skips (``ignore_index``)


# --- properties first declared by notebook 01 ---
# Each returns the keyword arguments of a course.spec.Property (``observe``, ``judge``). Judges
# return silently on a result of the wrong type or shape: the stated result reports that.


def exact_type(name: str, kind: type, why: str) -> dict[str, Callable]:
    """The result is exactly a ``kind`` where the text says so (a tuple, to be a dict key)."""

    def judge(case: Any, got: Any, expected: Any, seen: Any) -> None:
        expect(
            type(got) is kind,
            f"{name} on {case.what} returned a {type_name(got)}; the exercise text says a "
            f"{kind.__name__}: {why} (the property violated: the stated return type).",
            f"Return a {kind.__name__}: {why}.",
        )

    return {"judge": judge}


def same_counts(name: str, hint: str) -> dict[str, Callable]:
    """A table of counts the text defines: name the first entry counted differently."""

    def judge(case: Any, got: Any, expected: dict, seen: Any) -> None:
        wrong = [k for k in sorted(expected, key=repr) if got.get(k) != expected[k]]
        if wrong:
            raise CheckFailure(
                f"{name} on {case.what}: {wrong[0]!r} counted {got[wrong[0]]!r} times, expected "
                f"{expected[wrong[0]]} ({len(wrong)} entries differ; the property violated: the "
                "counts the exercise text defines).",
                hint,
            )

    return {"judge": judge}


def same_steps(name: str, noun: str, why: Callable[[Any, int], str], hint: str) -> dict:
    """A sequence the text defines step by step: the first step that differs, and why the text
    says otherwise (``why(case, step)``, computed on the trusted side only). A list stands for
    a tuple step."""

    def judge(case: Any, got: Any, expected: list, seen: Any) -> None:
        steps = [tuple(s) if isinstance(s, list) else s for s in got]
        for step, mine in enumerate(steps):
            if step >= len(expected) or mine != expected[step]:
                should = f"should be {expected[step]!r}" if step < len(expected) else "is extra"
                raise CheckFailure(
                    f"{name} on {case.what}: {noun} {step + 1} {should}, got {mine!r}: "
                    f"{why(case, step)} (the property violated: the steps the text defines).",
                    hint,
                )

    return {"judge": judge}


def fresh(read: Callable[[Any], Any], label: str) -> Callable[[Any, Any, Callable], Any]:
    """Observe ``read(module)`` of a module of the student's class freshly built with
    ``case.build`` (positional constructor arguments, as the course builds it): what
    ``__init__`` leaves, before the check loads its own weights."""

    def run(student: Any, case: Any, call: Callable) -> Any:
        args = tuple(case.build.values())
        return observe(f"{case.what}: {label}", lambda: read(type(student)(*args)), random=True)

    return run


def stated_attributes(
    name: str, read: Callable[[Any], dict], stated: Callable[[Any], dict[str, tuple[Any, str]]]
) -> dict[str, Callable]:
    """Attributes the text names hold the constructor's arguments after ``__init__``:
    ``read(module)`` observes them, ``stated(case)`` gives ``{attribute: (value, hint)}``."""

    def judge(case: Any, got: Any, expected: Any, seen: dict) -> None:
        for attribute, (value, hint) in stated(case).items():
            mine = seen.get(attribute)
            zero = f" (0 is a valid {attribute})" if value == 0 and mine is None else ""
            expect(
                type(mine) is type(value) and mine == value,
                f"{name}({', '.join(map(repr, case.build.values()))}): `{attribute}` is "
                f"{mine!r}, expected {value!r}{zero} (the property violated: constructor "
                "arguments honoured).",
                hint,
            )

    return {"observe": fresh(read, "attributes after __init__"), "judge": judge}


def normal_init(
    name: str,
    read: Callable[[Any], torch.Tensor],
    std: Callable[[Any], float],
    zero_rows: Callable[[Any], list[int]],
    hint: str,
) -> dict[str, Callable]:
    """A table (``read(module)`` after ``__init__``) drawn from N(0, std^2), ``zero_rows``
    exactly zero, every other row drawn on its own. Structural where the text fixes the
    structure: where rows have 64 entries or more, every row's std within [std/2, 2 std] (for a
    1000 x 64 table a false alarm has probability 2e-7), so an initialisation applied to part
    of the table fails however small the part. Pooled, on tables of 5,000 entries or more: mean,
    std, excess kurtosis (a uniform draw of the same std) and the correlation of neighbouring
    rows (one vector broadcast to every row), each within 6 standard errors (a false alarm
    about 2e-9 each by the normal approximation, which small tables do not meet)."""

    def judge(case: Any, got: Any, expected: Any, table: Any) -> None:
        if not isinstance(table, torch.Tensor) or table.dim() != 2:
            return
        table, sigma, zero = table.double(), std(case), zero_rows(case)
        made = f"{name}({', '.join(map(repr, case.build.values()))})"
        for row in zero:
            expect(
                bool((table[row] == 0).all()),
                f"{made}: row {row} (the padding row) of the table is not all zeros after "
                "__init__ (the property violated: the padding row is zero).",
                "Re-initialising the table overwrites every row, the padding row included.",
            )
        keep = [r for r in range(table.size(0)) if r not in zero]
        rows = table[keep]
        spread = rows.std(dim=1) / sigma
        odd = ((spread < 0.5) | (spread > 2) if rows.size(1) >= 64 else spread == 0).nonzero()
        expect(
            len(odd) == 0,
            f"{made}: row {keep[int(odd[0])] if len(odd) else 0} of the table has std "
            f"{spread[int(odd[0]) if len(odd) else 0].item() * sigma:.3g}, expected {sigma:.3g} "
            "like every row (the property violated: the initial distribution, row by row).",
            hint,
        )
        n, mean, pooled = rows.numel(), rows.mean().item(), rows.std().item()
        if n < 5_000:  # the normal approximations below hold for large tables only: a table
            return  # of 44 entries gave a right answer a false alarm in 1.4% of seeds
        kurtosis = ((rows / sigma) ** 4).mean().item() - 3  # E z^8 - (E z^4)^2 = 96
        unit = rows / rows.norm(dim=1, keepdim=True)
        neighbours = (unit[:-1] * unit[1:]).sum(dim=1).mean().item() if len(rows) > 1 else 0.0
        expect(
            abs(mean) <= 6 * sigma / n**0.5
            and abs(pooled / sigma - 1) <= 6 / (2 * n) ** 0.5
            and abs(kurtosis) <= 6 * (96 / n) ** 0.5
            and abs(neighbours) <= 6 / (rows.size(1) * max(len(rows) - 1, 1)) ** 0.5,
            f"{made}: the table's entries have mean {mean:.3g}, std {pooled:.3g}, excess "
            f"kurtosis {kurtosis:.2f} and neighbouring rows correlate {neighbours:.2f}; the "
            f"exercise asks for every entry drawn from N(0, {sigma:.3g}^2) on its own (mean "
            "0, kurtosis 0, no correlation; the property violated: the initial distribution).",
            hint,
        )

    return {"observe": fresh(read, "the table after __init__"), "judge": judge}


def zero_gradient_rows(
    name: str, params: Sequence[str], parameter: str, rows: Callable[[Any], list[int]], hint: str
) -> dict[str, Callable]:
    """Rows of ``parameter`` the text says never learn get exactly zero gradient (a backward
    of the module's output on the case's inputs, called positionally in ``params`` order)."""

    def run(student: Any, case: Any, call: Callable) -> Any:
        args = [case.inputs[p] for p in params if p in case.inputs]

        def backward() -> Any:
            named = dict(student.named_parameters())
            grads = gradients(lambda *a: student(*a), args, named)["parameters"]
            return grads.get(parameter)

        return observe(f"{case.what}: the gradient of `{parameter}`", backward)

    def judge(case: Any, got: Any, expected: Any, grad: Any) -> None:
        for row in rows(case) if isinstance(grad, torch.Tensor) else []:
            expect(
                bool((grad[row] == 0).all()),
                f"{name} on {case.what}: row {row} of `{parameter}` (the padding row) received "
                "a gradient; the exercise says it never does (the property violated: no "
                "gradient where the contract says none).",
                hint,
            )

    return {"observe": run, "judge": judge}


def follows_double(name: str, params: Sequence[str], hint: str) -> dict[str, Callable]:
    """After ``.double()`` (on a copy) the module computes in float64 on float64 inputs: float64
    results, the same values as its own in float32 (the reference judges those)."""

    def run(student: Any, case: Any, call: Callable) -> Any:
        args = [case.inputs[p] for p in params if p in case.inputs]
        args = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in args]  # fmt: skip
        return observe(
            f"{case.what}, the module after .double()",
            lambda: __import__("copy").deepcopy(student).double()(*args),
        )

    def wide(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.double()
        return type(value)(map(wide, value)) if isinstance(value, tuple | list) else value

    def judge(case: Any, got: Any, expected: Any, seen: Any) -> None:
        try:
            expect_result(seen, wide(got), f"{name}.double() on {case.what}", hint)
        except CheckFailure as failure:
            raise CheckFailure(
                f"{failure.message.split(' (the property violated')[0]} (the property "
                "violated: the module follows .double(); its parameters decide the dtype).",
                failure.hint,
            ) from None

    return {"observe": run, "judge": judge}


# --- properties first declared by notebook 02 ---


def blocked_get_zero(name: str, lost: str = "") -> dict[str, Callable]:
    """Where a boolean ``case.inputs["mask"]`` is False, the weights (the result's second item)
    are exactly 0, at any number of leading axes. Says so when the mask was read the wrong way
    round; ``lost`` is added when the mask cannot have reached the computation."""

    def judge(case: Any, got: Any, expected: Any, seen: Any) -> None:
        mask, weights = case.inputs.get("mask"), got[1]
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            return
        try:
            blocked = ~mask.expand(weights.shape)
        except (RuntimeError, AttributeError):
            return  # the shape comparison says it better
        leaked = blocked & (weights != 0)
        if not leaked.any():
            return
        index = tuple(int(i) for i in torch.unravel_index(
            (weights.abs() * leaked).flatten().argmax(), weights.shape))  # fmt: skip
        inverted = bool((weights.masked_select(~blocked) == 0).all())
        dead = bool(blocked[index[:-1]].all())
        reason = (
            "the keys the mask allows got weight 0 and the blocked ones did not: the mask is "
            "read the wrong way round"
            if inverted
            else "every key of that query is blocked, and the exercise text says such a query "
            "gets zero weights and a zero output"
            if dead
            else f"a key the mask blocks must get exactly 0. {lost}".strip()
        )
        raise CheckFailure(
            f"{name} on {case.what}: the {'padded' if mask.size(-2) == 1 else 'blocked'} key "
            f"position {index[-1]} received weight {weights[index].item():.3g} from query "
            f"{index[-2]} (index {index}); {reason} (the property violated: the mask).",
            "A boolean mask is True where a query may attend (True = may attend), False where "
            "it may not."
            if inverted
            else "softmax of a row of -inf is 0/0; the text says what such a row gets instead."
            if dead
            else "The exercise text says what a blocked score becomes, so that its weight is "
            "exactly 0" + (", and forward passes the mask on." if lost else "."),
        )

    return {"judge": judge}


def device_argument(name: str, first: Callable[[Any], tuple], hint: str) -> dict[str, Callable]:
    """Given a ``device`` argument naming the second device (:mod:`course.virtual`),
    positionally and by name (as a string), every result tensor lives there."""
    from course.virtual import VIRTUAL

    def run(student: Any, case: Any, call: Callable) -> list[dict[str, Any]]:
        args = first(case)
        shown = ", ".join(map(repr, args))
        return [
            on_device(f"{name}({shown}, <another device>)", student, (*args, VIRTUAL)),
            on_device(f"{name}({shown}, device='<another>')", student, args,
                      {"device": VIRTUAL.type}),
        ]  # fmt: skip

    def judge(case: Any, got: Any, expected: Any, seen: list) -> None:
        for form, observed in zip(("positionally", "by name"), seen, strict=True):
            error = observed.get("error")
            expect(
                error is None,
                f"{name} on {case.what}, another device given {form}: your code failed with "
                f"{error} (the property violated: device).",
                hint,
            )
            expect(
                all(d == "virtual" for d in observed.get("devices") or []),
                f"{name} on {case.what}, another device given {form}: the mask came back on "
                "the CPU: the device argument is ignored (the property violated: device). On a "
                "GPU, masking a GPU tensor with it fails.",
                hint,
            )

    return {"observe": run, "judge": judge}


# --- properties first declared by notebook 07 ---


# --- properties first declared by notebook 08 ---


def choice(mistakes: dict[float, str], rule_candidates: list[float]) -> Callable[..., None]:
    """A judge for a chosen number: a wrong answer that another rule gives is named with that
    rule (``mistakes``: answer -> the sentence of the text it breaks), on the case built to
    separate the rules (the one whose candidates are ``rule_candidates``) or, for 1.0 missed by
    one step, where the default candidates are used."""

    def judge(case: Any, got: Any, expected: Any, observed: Any) -> None:
        if not isinstance(got, float) or abs(got - expected) < 1e-6:
            return
        candidates = case.inputs.get("candidates")
        reason = None
        if candidates == rule_candidates or (candidates is None and expected == 1.0):
            reason = next((text for v, text in mistakes.items() if abs(got - v) < 1e-6), None)
        expect(
            reason is None,
            f"on {case.what} you chose {got:.3f}, expected {expected:.2f}: {reason} (the property "
            "violated: the rule of the exercise).",
            "Use only the validation logits and labels you are given; keep the largest candidate "
            "within `max_drop` of the accuracy without threshold.",
        )

    return judge


# --- properties first declared by notebook 09 ---


def filtered_keep(logits: torch.Tensor, filters: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """The kept set of temperature -> top-k -> top-p by the definitions, in float64, and the
    tokens whose mass before them is within rounding of p (either answer is right there)."""
    scaled = logits.double() / filters.get("temperature", 1.0)
    keep = torch.ones_like(scaled, dtype=torch.bool)
    top_k, top_p = filters.get("top_k"), filters.get("top_p")
    if top_k is not None and top_k < scaled.size(-1):
        keep = scaled >= scaled.topk(top_k, dim=-1).values[..., -1:]
    undecided = torch.zeros_like(keep)
    if top_p is not None and top_p < 1:  # p = 1 keeps everything: no rounding decides it
        probs = torch.softmax(scaled.masked_fill(~keep, -float("inf")), dim=-1)
        before = ((probs.unsqueeze(-2) > probs.unsqueeze(-1)) * probs.unsqueeze(-2)).sum(-1)
        keep = keep & (before < top_p)
        undecided = (before - top_p).abs() < 1e-5
    return keep, undecided, scaled


def kept_set(case: Any, got: torch.Tensor, expected: Any, observed: Any) -> None:
    """Filtering logits: no NaN or +inf; the kept set is the top-k set, then the nucleus of what
    is left (ties at the k-th value kept, the token that crosses p kept); every removed logit is
    -inf and every kept one is logit / temperature."""
    logits = case.inputs["logits"]
    filters = {k: v for k, v in case.inputs.items() if k != "logits"}
    shown = "".join(f", {k}={v}" for k, v in filters.items())
    what = f"filter_logits(logits{shown}) on {case.what}"
    expect(
        tuple(got.shape) == tuple(logits.shape),
        f"{what} has shape {tuple(got.shape)}, expected the input's {tuple(logits.shape)}.",
        "Return logits of the input's shape.",
    )
    expect(
        not bool(torch.isnan(got).any()) and not bool(torch.isposinf(got).any()),
        f"{what} contains NaN or +inf (the property violated: numeric range).",
        "Probabilities from large logits need a stable softmax (torch.softmax), not exp.",
    )
    keep, undecided, scaled = filtered_keep(logits, filters)
    mine = ~torch.isneginf(got)
    decided = ~undecided
    if not torch.equal(mine & decided, keep & decided):
        raise CheckFailure(f"{what}: {_kept_story(mine, keep, scaled, filters)}")
    expect_result(
        got[mine],
        scaled[mine].to(logits.dtype),
        f"the kept logits of {what} (the property violated: a kept logit is logit / temperature)",
        "Divide by the temperature once, before filtering; leave kept logits otherwise as they "
        "are (no renormalising, no softmax).",
    )


def _kept_story(mine: torch.Tensor, keep: torch.Tensor, scaled: torch.Tensor, filters: dict) -> str:
    """Which part of the definition a wrong row breaks, in words."""
    mine, keep = mine.reshape(-1, mine.size(-1)), keep.reshape(-1, keep.size(-1))
    row = int((mine != keep).any(-1).nonzero()[0])
    g, logits = mine[row], scaled.reshape(-1, scaled.size(-1))[row]
    top_k, top_p = filters.get("top_k"), filters.get("top_p")
    story = f"row {row} keeps {int(g.sum())} tokens, the definition keeps {int(keep[row].sum())}"
    if top_p is None:
        if top_k is None or top_k >= logits.numel():
            return f"{story}: with no top-k smaller than the vocabulary every token stays."
        return (
            f"{story} (the property violated: top-k keeps every logit at least as large as the "
            "k-th largest, ties with it included)."
        )
    allowed = torch.ones_like(g)
    if top_k is not None and top_k < logits.numel():
        allowed = logits >= logits.topk(top_k).values[-1]
    probs = torch.softmax(logits.masked_fill(~allowed, -float("inf")), dim=-1)
    mass = float(probs[g].sum())
    if mass < top_p - 1e-5:
        return (
            f"{story}: the kept tokens hold probability {mass:.4f} < top_p={top_p} (the property "
            "violated: the kept mass reaches p; the token that crosses p is kept)."
        )
    if bool(g.any()) and mass - float(probs[g].min()) >= top_p + 1e-5:
        return (
            f"{story}: without its least probable token the kept set still holds "
            f"{mass - float(probs[g].min()):.4f} >= top_p={top_p} (the property violated: the "
            "smallest set of most probable tokens)."
        )
    return (
        f"{story} (the property violated: top-p keeps the most probable tokens of the "
        "distribution left after temperature and top-k, until their mass reaches p)."
    )


def continuations(case: Any, got: list, expected: list, observed: Any) -> None:
    """Sampling where only one token survives the filter: each row's continuation is fixed."""
    for r, (mine, want) in enumerate(zip(got, expected, strict=True)):
        expect(
            mine == want,
            f"sample on {case.what}: row {r} (prompt {case.inputs['prompts'][r]}) gave {mine}, "
            f"expected {want}: only the most probable token survives the filter, so the result "
            "is fixed (the property violated: each row continues its own prompt, with its own "
            "positions and no padding seen, stops after its eos, and only new tokens are "
            "returned).",
            "Look at which position's logits you read for each row, whether padding reaches "
            "the model, and whether the filter arguments reach filter_logits.",
        )


def rows_end_at_eos(case: Any, got: Any, expected: Any, observed: Any) -> None:
    """One list of ints per prompt; a row ends at its eos (kept) or after max_new_tokens."""
    inputs = case.inputs
    eos, limit = inputs["eos_id"], inputs["max_new_tokens"]
    what = f"sample on {case.what}"
    expect(
        type(got) is list and len(got) == len(inputs["prompts"]),
        f"{what} returned a {_leaf_type(got)}, but the exercise text says a list with one list of "
        "new tokens per prompt (the property violated: the stated return type).",
    )
    for r, row in enumerate(got):
        expect(
            type(row) is list and all(type(t) is int for t in row),
            f"{what}: row {r} is a {_leaf_type(row)}, not a list of ints (the property violated: "
            "the stated return type).",
            "Convert with .tolist() and return only the new tokens of each row.",
        )
        expect(
            len(row) <= limit and eos not in row[:-1] and inputs["pad_id"] not in row,
            f"{what}: row {r} has {len(row)} tokens and goes on after its eos or holds padding "
            f"(the property violated: a row stops after its eos ({eos}), kept, nothing after; "
            f"at most max_new_tokens={limit}; only new tokens).",
            "Keep a per-row flag `finished`; a finished row gets no more tokens in the result.",
        )
        expect(
            len(row) == limit or (row and row[-1] == eos),
            f"{what}: row {r} stopped after {len(row)} new tokens without an eos (the property "
            f"violated: a row ends at its eos or after max_new_tokens={limit}, never earlier).",
        )


def draws_follow(distribution: Callable[[Any], torch.Tensor]) -> Callable[..., None]:
    """Many rows continue one prompt: the first new tokens' frequencies against the
    distribution the text defines (``distribution(case)``, computed on the trusted side).
    Never a token outside its support; every frequency within 5 standard errors (plus 0.01) of
    its probability: a false alarm has probability below 1e-6 per token (normal
    approximation), and a deviation of about 5 points at 800 draws is caught."""

    def judge(case: Any, got: list, expected: Any, observed: Any) -> None:
        rows_end_at_eos(case, got, expected, observed)
        probs = distribution(case)
        first = torch.tensor([row[0] for row in got])
        freq = torch.bincount(first, minlength=probs.numel()).double() / len(got)
        outside = (freq > 0) & (probs == 0)
        what = f"sample on {case.what}"
        expect(
            not bool(outside.any()),
            f"{what}: tokens {outside.nonzero().flatten().tolist()} were drawn, but the filter "
            "removes them (the property violated: draws follow softmax(filtered logits)).",
            "Pass **filter_args on to filter_logits before the softmax.",
        )
        sigma = (probs * (1 - probs) / len(got)).sqrt()
        worst = int(((freq - probs).abs() - 5 * sigma).argmax())
        expect(
            float((freq - probs).abs()[worst]) <= 5 * float(sigma[worst]) + 0.01,
            f"{what}: token {worst} was drawn in {float(freq[worst]):.1%} of the rows, but its "
            f"probability is {float(probs[worst]):.1%} (the property violated: draws follow "
            "softmax(filtered logits)).",
            "Sample (torch.multinomial) from the softmax of the filtered logits, at the last "
            "position of each row; do not take the argmax.",
        )
        # Two seeds give the same rows by chance with probability (sum of p^2)^rows: judged only
        # where that is below 1e-9 (a distribution with one token near 1 decides nothing).
        if float((probs**2).sum()) ** len(got) < 1e-9:
            expect(
                observed != got,
                f"{what}: generators with different seeds gave the same tokens (the property "
                "violated: randomness only from the given generator).",
                "Pass the `generator` argument to torch.multinomial; do not make your own.",
            )

    return judge


# --- properties first declared by notebook 05 ---


def prefix_unchanged(owner: str, violated: str, hint: str | None = None) -> dict:
    """The outputs of the first positions do not change when the inputs grow by what the text
    says cannot reach them (masked padding: padding invariance; later target positions:
    causality). ``case.alone`` holds the inputs without the addition, ``case.added`` says it in
    words."""

    def watch(student: Any, case: Any, call_: Callable) -> Any:
        return call_(case.alone)  # an observed call

    def judge(case: Any, got: Any, expected: Any, alone: Any) -> None:
        if not (isinstance(got, torch.Tensor) and isinstance(alone, torch.Tensor)):
            return  # the stated type is judged with the result
        n = alone.shape[1]
        mine = got[:, :n]
        close = mine.shape == alone.shape and torch.allclose(mine, alone, **tolerance(got.dtype))
        error = (mine - alone).abs().max().item() if mine.shape == alone.shape else float("nan")
        expect(
            close,
            f"{owner} on {case.what}: {case.added} changed the outputs at "
            f"{'position 0' if n == 1 else f'positions 0-{n - 1}'} (by up to {error:.2g}) (the "
            f"property violated: {violated}).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def dropped_in_training(
    owner: str,
    expected_of: Callable[[Any, dict], torch.Tensor],
    stated: str,
    violated: str,
    hint: str | None,
) -> dict:
    """With ``dropout=1.0`` in ``train()`` mode every dropout the text places drops everything,
    so the output is ``expected_of(case, state)`` (``state``: the module's state dict, the
    check's weights): ``stated`` says what that is in words."""

    def watch(module: Any, case: Any, call_: Callable) -> Any:
        observe(f"{case.what}: .train()", lambda: module.train() and None)
        try:
            out = call_(case.inputs)
        finally:
            observe(f"{case.what}: .eval()", lambda: module.eval() and None)
        return {
            "out": out,
            "state": observe(f"{case.what}: the state dict", lambda: dict(module.state_dict())),
        }

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        out, want = seen["out"], expected_of(case, seen["state"])
        right = isinstance(out, torch.Tensor) and out.shape == want.shape
        right = right and torch.allclose(out, want, **tolerance(out.dtype))
        mistake = ""
        if isinstance(out, torch.Tensor) and not right and bool((out == 0).all()):
            mistake = " Your output is all zeros: a dropout acts on the output itself."
        expect(
            right,
            f"{owner} on {case.what} in train() mode: with dropout=1.0 every dropout the text "
            f"places drops everything, so the output should be {stated}.{mistake} (The property "
            f"violated: {violated}.)",
            hint,
        )

    return {"observe": watch, "judge": judge}


def encode_then_decode(hint: str | None = None) -> dict:
    """``encode(src_ids)`` returns the memory and the source padding mask (boolean (B, 1, L),
    True on real tokens); ``decode(tgt_ids, *encode(src_ids))`` gives ``forward``'s logits
    (the student's own: the values are judged against the reference separately).
    ``case.pad`` is the padding id."""

    def watch(module: Any, case: Any, call_: Callable) -> Any:
        def run() -> dict[str, Any]:
            memory, mask = module.encode(case.inputs["src_ids"])
            return {"mask": mask, "logits": module.decode(case.inputs["tgt_ids"], memory, mask)}

        return observe(f"encode(src_ids), then decode(tgt_ids, memory, mask) on {case.what}", run)

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        mask, src = seen["mask"], case.inputs["src_ids"]
        want = (src != case.pad)[:, None, :]
        expect(
            isinstance(mask, torch.Tensor)
            and mask.dtype == torch.bool
            and mask.shape == want.shape
            and torch.equal(mask, want),
            f"on {case.what}: encode(src_ids) should return, second, the source padding mask: "
            f"boolean, shape {tuple(want.shape)}, True on real tokens (the property violated: "
            "what encode returns).",
            hint,
        )
        logits, what = seen["logits"], f"decode(tgt_ids, *encode(src_ids)) on {case.what}"
        expect(
            isinstance(logits, torch.Tensor)
            and isinstance(got, torch.Tensor)
            and logits.shape == got.shape
            and torch.allclose(logits, got, **tolerance(got.dtype)),
            f"{what} differs from forward(src_ids, tgt_ids) (the property violated: forward is "
            "decode(tgt_ids, *encode(src_ids)), so that decoding step by step gives its logits).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def decoding_protocol(hint: str | None = None) -> dict:
    """Greedy decoding as the text describes it, on a model that counts its calls
    (``model.counts()``, ``model.reset()``): the model stays in eval mode, the source is
    encoded once (one row per batch row), and every decode gets the mask encode returned."""

    def watch(student: Any, case: Any, call_: Callable) -> Any:
        model = case.inputs["model"]

        observe(f"{case.what}: the model's counters reset", lambda: model.reset())
        call_(case.inputs)
        return observe(f"{case.what}: the model's counters", lambda: model.counts())

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        what = f"greedy_decode on {case.what}"
        expect(
            not seen["training"] and seen["in_training"] == 0,
            f"{what} switched the model to training mode (the property violated: the model "
            "stays in eval mode, as the text says).",
            hint,
        )
        expect(
            seen["without_mask"] == 0,
            f"{what} called model.decode without the memory_mask that encode returned, so the "
            "decoder reads the source's padding (the property violated: decode gets the memory "
            "and its mask).",
            hint,
        )
        rows = case.inputs["src_ids"].shape[0]
        expect(
            seen["encodes"] == rows,
            f"{what} encoded {seen['encodes']} source rows for a batch of {rows} (the property "
            "violated: the source is encoded once, with model.encode; model.decode runs on the "
            "growing target).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def not_a_known_mistake(
    mistakes: Callable[[Any, dict], dict[str, torch.Tensor]], violated: str, hint: str | None
) -> dict:
    """The result is not one of the known wrong formulas ``mistakes(case, state)`` (``{what
    the mistake is: its value}``, computed with the module's state dict), which the message
    then names."""

    def watch(module: Any, case: Any, call_: Callable) -> Any:
        return observe(f"{case.what}: the state dict", lambda: dict(module.state_dict()))

    def judge(case: Any, got: Any, expected: Any, state: dict) -> None:
        if not isinstance(got, torch.Tensor):
            return
        for mistake, value in mistakes(case, state).items():
            expect(
                got.shape != value.shape or not torch.allclose(got, value, **tolerance(got.dtype)),
                f"on {case.what}: {mistake} (the property violated: {violated}).",
                hint,
            )

    return {"observe": watch, "judge": judge}
