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
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from course.check import CheckFailure, expect
from course.observe import (
    REPLAY,
    Absent,
    NotPlainData,
    StudentError,
    current,
    generator,
    observe,
    to_plain,
)

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
    **kwargs: Any,
) -> Any:
    """``function(*args, **kwargs)`` observed: its result as plain data.

    Fails when the call changed one of its arguments (a tensor, list or dict) in place: the
    property "inputs untouched". ``names`` names the positional arguments in messages.
    """
    before = [_snapshot(a) for a in args], {k: _snapshot(v) for k, v in kwargs.items()}

    def run() -> dict[str, Any]:
        result = function(*args, **kwargs)
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

from course.observe import type_name  # noqa: E402 - grouped with the spec properties
from course.virtual import DeviceMixed, run_on_virtual  # noqa: E402


def tolerance(dtype: torch.dtype, strict: bool = False) -> dict[str, float]:
    """What a dtype allows. float64 is held to float64 precision only when the exercise text asks
    for it (``strict``); otherwise a right answer computed in float32 inside passes too."""
    if dtype == torch.float64 and strict:
        return {"atol": 1e-10, "rtol": 1e-8}
    if dtype in (torch.float16, torch.bfloat16):
        return {"atol": 1e-2, "rtol": 1e-2}
    return {"atol": 1e-5, "rtol": 1e-4}


def _leaf_type(value: Any) -> str:
    return "torch.Tensor" if isinstance(value, torch.Tensor) else type_name(value)


def expect_result(
    got: Any,
    expected: Any,
    what: str,
    hint: str | None = None,
    strict: bool = False,
    values: bool = True,
) -> None:
    """The stated result: the same type at every leaf (a Python float is not a NumPy float, a
    list of ints is not a tensor), the same container shape, tensors of the same dtype and shape,
    and (with ``values``) values within :func:`tolerance`, NaN where the reference has NaN."""
    if isinstance(expected, tuple | list):
        expect(
            isinstance(got, tuple | list) and (isinstance(expected, tuple) or type(got) is list),
            f"{what} returned a {_leaf_type(got)}, but the exercise text says a "
            f"{type(expected).__name__} of {len(expected)} (the property violated: the stated "
            "return type).",
            hint,
        )
        expect(
            len(got) == len(expected),
            f"{what} returned {len(got)} values, expected {len(expected)} (the property violated: "
            "the stated result).",
            hint,
        )
        for i, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
            label = what if len(expected) == 1 else f"{what}, item {i}"
            expect_result(mine, theirs, label, hint, strict, values)
        return
    if isinstance(expected, dict):
        expect(
            isinstance(got, dict),
            f"{what} returned a {_leaf_type(got)}, but the exercise text says a dict (the "
            "property violated: the stated return type).",
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
        tuple(got.shape) == tuple(expected.shape),
        f"{what} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}.",
        hint,
    )
    expect(
        got.dtype == expected.dtype,
        f"{what} has dtype {got.dtype}, expected {expected.dtype} (the property violated: the "
        "stated dtype).",
        hint,
    )
    if not values:
        return
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
            f"{what} has {got[first].item()} at index {first} where the reference is "
            f"{expected[first].item():.6g} (the property violated: numeric range).",
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
        f"{error} (the property violated: device; the same inputs on the CPU worked).",
        hint or DEVICE_HINT,
    )
    devices = observed.get("devices") or []
    expect(
        all(d == "virtual" for d in devices),
        f"{what}: given inputs on another device, your code returned a tensor on the CPU (the "
        "property violated: device). On a GPU the next operation would fail.",
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
            f"{what}: no gradient reaches `{name}` (the property violated: gradients); training "
            "could not learn what produces it.",
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
