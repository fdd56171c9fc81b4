"""Records the student's objects cannot bend: what the probe calls, bound before student code runs.

A probe runs beside objects the student built; three ways they could bend what it records:

* **a tensor subclass** runs code when the probe copies it (restore an input, re-cast float64):
  :func:`plain_tensor` reads through the C base class with torch-function dispatch off, so no
  student code runs; :func:`exact_type` says whether it was a ``torch.Tensor`` at all.
* **replaced functions** (``torch.is_grad_enabled`` in ``sys.modules``): global state is read
  only through :data:`BOUND`, C functions taken when ``course`` is imported, before any student
  cell runs.
* **a replaced binding** (:data:`BOUND` edited at run time): every observation carries the
  :func:`fingerprint` of what it called; the replay's differs: :class:`Tampered`, the exercise
  scores 0, flagged.

All three hold against the student's *objects*. Against code that rewrites this module or
``course.framework.observe`` in memory (``gc``, ``ctypes``) no observer inside the student's process
holds: so while grading, a side effect observed there is said in the row and decides no point
either way (:func:`course.framework.observe.claim`), and every value is re-judged by the trusted
replay (docs/grading.md, "What is not protected").
"""

from __future__ import annotations

import contextlib
import hashlib
import types
from collections.abc import Iterator
from typing import Any

import torch

_BASE = torch._C.TensorBase  # a C type: its methods cannot be replaced from Python
_GENERATOR = torch._C.default_generator
BOUND: dict[str, Any] = {
    "is_grad_enabled": torch._C.is_grad_enabled,
    "is_inference_mode_enabled": torch._C.is_inference_mode_enabled,
    "get_default_dtype": torch._C.get_default_dtype,
    "set_grad_enabled": torch._C._set_grad_enabled,
    "set_default_dtype": torch._C._set_default_dtype,
    "generator": _GENERATOR,
    "equal": _BASE.equal,
    "detach": _BASE.detach,
    "to": _BASE.to,
}
_EXACT_TENSORS = (torch.Tensor, torch.nn.Parameter)


class Tampered(Exception):
    """The probe's own functions were not the ones it was given: ``reason`` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _describe(value: Any) -> str:
    """What a bound object is, in terms the student's code cannot fake: its exact type and,
    for a C function (whose name is read-only), its module and name."""
    kind = type(value)
    if kind in (types.BuiltinFunctionType, types.MethodDescriptorType):
        return f"{kind.__name__}:{value.__qualname__}"
    if kind is torch._C.Generator:
        return "generator:default" if value is _GENERATOR else "generator:other"
    return f"replaced:{kind.__module__}.{kind.__qualname__}"


def fingerprint() -> str:
    """A digest of what :data:`BOUND` holds now; the same in every honest process."""
    text = ";".join(f"{name}={_describe(BOUND.get(name))}" for name in sorted(_ORIGINAL))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def verify(recorded: str) -> None:
    """Raise :class:`Tampered` unless ``recorded`` is this process's :func:`fingerprint`."""
    if recorded != TRUSTED:
        raise Tampered(
            "the functions this check calls to observe your code were replaced while it ran "
            "(torch's global state readers or the check's own bindings); a hand-in that changes "
            "the check scores 0 for this exercise and is flagged for the instructor."
        )


def global_state() -> dict[str, Any]:
    """Grad mode, inference mode and default dtype, read through :data:`BOUND` only."""
    return {
        "grad mode": BOUND["is_grad_enabled"](),
        "inference mode": BOUND["is_inference_mode_enabled"](),
        "default dtype": BOUND["get_default_dtype"](),
    }


def restore(state: dict[str, Any]) -> None:
    BOUND["set_grad_enabled"](state["grad mode"])
    BOUND["set_default_dtype"](state["default dtype"])


def rng_state() -> torch.Tensor:
    return BOUND["generator"].get_state()


def same_rng(a: torch.Tensor, b: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():
        return bool(BOUND["equal"](a, b))


@contextlib.contextmanager
def forked(seed: int) -> Iterator[None]:
    """Torch's global generator seeded with ``seed`` for the block, then put back as it was
    (``torch.random.fork_rng`` without the Python layer a student's cell could replace)."""
    generator = BOUND["generator"]
    saved = generator.get_state()
    generator.manual_seed(seed)
    try:
        yield
    finally:
        generator.set_state(saved)


def exact_type(value: torch.Tensor) -> bool:
    """True for a ``torch.Tensor`` (or an ``nn.Parameter``, a tensor with a flag), false for a
    subclass whose methods may run the student's code."""
    return type(value) in _EXACT_TENSORS


def plain_tensor(value: torch.Tensor) -> torch.Tensor | None:
    """A detached CPU copy of ``value``, read with torch-function dispatch off, so neither a
    subclass nor a mode sees the read. None for a subclass that overrides ``__torch_dispatch__``
    (its data is whatever its Python code says)."""
    if type(value).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
        return None
    with torch._C.DisableTorchFunction():
        if _BASE.device.__get__(value).type == "meta":
            raise ValueError("a tensor on the meta device has no data; observe its .device")
        plain = BOUND["to"](BOUND["detach"](value), "cpu", copy=True)
        return _BASE.contiguous(plain).as_subclass(torch.Tensor)


_ORIGINAL = dict(BOUND)
TRUSTED = fingerprint()
