"""A second device that computes real values: the device property decides on every machine.

On a GPU a tensor made with ``torch.zeros(n)`` lands on the CPU and the next operation fails. The
``meta`` device cannot show it: it has no values, so code that reads one (``.item()``, NumPy)
stops and the test is undecided. :class:`VirtualDevice` tags tensors as living on another device
while their storage stays on the CPU, so every value is real and every path runs, and refuses
what a GPU refuses: mixing a tagged tensor with an untagged one of one or more dimensions (a GPU
takes 0-dim CPU tensors as scalars, and CPU index tensors in ``x[index]``), and ``.numpy()``. A
tagged tensor's ``.device`` is :data:`VIRTUAL` (``meta``, which every build of torch knows), so
``device=x.device``, ``x.new_zeros``, ``zeros_like`` and ``.to(x.device)`` tag, ``.cpu()`` does
not; tags live in the mode object only. For code fed by a loader, :func:`unmoved` gives a batch
that acts as if a GPU loader had made it on another device than the model's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

VIRTUAL = torch.device("meta")
_DEVICE_GETTER = torch.Tensor.device
_DATA = torch.Tensor.data  # ``p.data = t``: nn.Module.to and _apply swap a parameter's data so
_TYPE_QUERIES = {"_has_compatible_shallow_copy_type"}  # asks, computes nothing: never mixing
_INDEXING = {"__getitem__", "__setitem__", "index_put_", "index_put"}
_MOVES = {"to", "cpu", "cuda", "type", "type_as"}


class DeviceMixed(RuntimeError):
    """What a GPU raises when tensors of two devices meet in one operation."""


def _walk(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _walk(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)


def _swap_device(value: Any) -> tuple[Any, bool]:
    """``value`` with the virtual device replaced by the CPU; whether it named the virtual one."""
    try:
        virtual = isinstance(value, str | torch.device) and torch.device(value) == VIRTUAL
    except (RuntimeError, TypeError):  # a string that names no device
        virtual = False
    return (torch.device("cpu"), True) if virtual else (value, False)


class VirtualDevice(TorchFunctionMode):
    """Tensors tagged as on another device, computed on the CPU; mixing refused as on a GPU."""

    def __init__(self) -> None:
        super().__init__()
        self._tagged: WeakIdKeyDictionary = WeakIdKeyDictionary()

    # --- tags -----------------------------------------------------------------------------
    def tag(self, value: Any) -> Any:
        """Put ``value`` (a tensor, a module's parameters and buffers, containers) on the device."""
        module = isinstance(value, nn.Module)
        for tensor in (*value.parameters(), *value.buffers()) if module else _walk(value):
            self._tagged[tensor] = True
        return value

    def on_device(self, tensor: torch.Tensor) -> bool:
        return tensor in self._tagged

    # nn.Parameter(t) is made by ``Tensor._make_subclass``, which no mode sees: while the mode is
    # on, a parameter made from a tagged tensor is tagged too (as a GPU keeps it on its device)
    def __enter__(self) -> VirtualDevice:
        made, mode = nn.Parameter.__new__, self

        def new(cls: type, data: torch.Tensor | None = None, requires_grad: bool = True) -> Any:
            parameter = made(cls, data, requires_grad)
            if data is not None and mode.on_device(data):
                mode.tag(parameter)
            return parameter

        self._made = made
        nn.Parameter.__new__ = new  # type: ignore[method-assign]
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        nn.Parameter.__new__ = self._made  # type: ignore[method-assign]
        super().__exit__(*exc)

    # --- dispatch -------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        kwargs = dict(kwargs or {})
        if getattr(func, "__self__", None) is _DEVICE_GETTER:
            return VIRTUAL if self.on_device(args[0]) else func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name == "__set__" and getattr(func, "__self__", None) is _DATA:
            func(*args, **kwargs)  # the tensor takes the new data's device
            if self.on_device(args[1]):
                self.tag(args[0])
            else:
                self._tagged.pop(args[0], None)
            return None
        if name in _TYPE_QUERIES:
            return func(*args, **kwargs)
        inputs = list(_walk((args, kwargs)))
        tagged = [t for t in inputs if self.on_device(t)]
        if name == "numpy" and tagged:
            raise TypeError(
                "can't convert meta device type tensor to numpy. Use Tensor.cpu() to copy the "
                "tensor to host memory first."
            )
        if name in _MOVES and inputs and inputs[0] is args[0]:
            return self._move(func, name, args, kwargs)
        target = False
        if "device" in kwargs:
            kwargs["device"], target = _swap_device(kwargs["device"])
        if tagged:
            # a GPU takes CPU index tensors in x[index] (and x[index] = v), never CPU values
            checked = inputs if name not in _INDEXING else _indexed_values(name, args, kwargs)
            strays = [t for t in checked if t.dim() > 0 and not self.on_device(t)]
            if strays:
                raise DeviceMixed(
                    "Expected all tensors to be on the same device, but found at least two "
                    f"devices, {VIRTUAL.type} and cpu! (in {name or func})"
                )
        result = func(*args, **kwargs)
        if target or (tagged and not (name in _INDEXING and not self.on_device(args[0]))):
            self.tag(result)
        return result

    def _move(self, func, name: str, args: tuple, kwargs: dict) -> Any:  # noqa: ANN001
        """``.to`` / ``.cpu()``: a fresh alias on the target, so the source keeps its own tag."""
        source = args[0]
        rest = list(args[1:])
        if name == "cpu":
            to_virtual = False
        elif name == "type_as":  # .type(other.type()): other's device and dtype
            to_virtual, rest = self.on_device(rest[0]), [rest[0].dtype]
            func = torch.Tensor.to
        elif name == "cuda":
            return func(*args, **kwargs)  # as on a machine without that device
        else:
            to_virtual = None
            for i, item in enumerate(rest):
                if isinstance(item, torch.Tensor):  # .to(other): its device and dtype
                    to_virtual = self.on_device(item)
                    rest[i] = item.dtype
                else:
                    rest[i], named = _swap_device(item)
                    to_virtual = True if named else to_virtual
            if "device" in kwargs:
                kwargs["device"], named = _swap_device(kwargs["device"])
                to_virtual = named
            if to_virtual is None:  # a dtype change only: stays where it is
                to_virtual = self.on_device(source)
        result = func(source, *rest, **kwargs)
        if result is source:
            result = source.view_as(source)
        if to_virtual:
            self.tag(result)
        return result


def _indexed_values(name: str, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors of an indexing call that must share the indexed tensor's device: the
    indexed tensor and the values written, not the indices."""
    if name == "__getitem__":
        return [args[0]] if isinstance(args[0], torch.Tensor) else []
    if name == "__setitem__" and not list(_walk(args[1])):
        return []  # x[0, :n] = v is a copy, which crosses devices
    values = args[2] if len(args) > 2 else kwargs.get("values", kwargs.get("value"))
    return [t for t in (args[0], values) if isinstance(t, torch.Tensor)]


def run_on_virtual(
    function: Any, args: tuple = (), kwargs: dict | None = None, modules: tuple = ()
) -> tuple[Any, list[str]]:
    """``function(*args, **kwargs)`` with its tensors, and the ``modules`` it uses (passed in or
    closed over), on the virtual device. Returns the result and where each tensor of it lives
    (``"virtual"`` when right)."""
    kwargs = kwargs or {}
    mode = VirtualDevice()
    with mode:
        mode.tag((args, kwargs))
        for value in (*args, *kwargs.values(), *modules):
            if isinstance(value, nn.Module):
                mode.tag(value)
        result = function(*args, **kwargs)
        where = ["virtual" if mode.on_device(t) else "cpu" for t in _walk(result)]
    return result, where


class BatchNotMoved(RuntimeError):
    """Raised when a tensor of a batch "on another device" is used before being moved."""


NOT_MOVED = (  # the device property's failure where a BatchNotMoved was raised
    "a tensor of the batch was used where it came from, not moved to the model's device: the "
    "check hands over batches that act as if they lived on another device, and on a GPU this "
    "fails with 'Expected all tensors to be on the same device'"
)
NOT_MOVED_HINT = "Move every tensor of a batch to the model's device before the forward pass."


class _OnAnotherDevice(torch.Tensor):
    """A CPU tensor that behaves as if it lived on another device (a GPU data loader's): its
    shape, dtype and device can be read and ``.to(device)`` gives an ordinary tensor, but any
    computation with it fails, as mixing devices does, also in code that reads values."""

    _READ_ONLY = {"__get__", "size", "dim", "numel", "__len__", "__repr__", "__format__"}

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        name = getattr(func, "__name__", "")
        if name in ("to", "cuda", "cpu") or name in cls._READ_ONLY:
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **(kwargs or {}))
            if name in cls._READ_ONLY or not isinstance(out, torch.Tensor):
                return out
            return out.as_subclass(torch.Tensor).clone()
        raise BatchNotMoved(f"`{name}` on a batch tensor that was not moved to a device")


def unmoved(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``batch`` as a GPU loader would give it: every tensor must be moved before use."""
    return {key: value.clone().as_subclass(_OnAnotherDevice) for key, value in batch.items()}
