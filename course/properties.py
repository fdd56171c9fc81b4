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
