"""What each argument's text allows, declared once; the runner draws its edges and its interior.

A spec's ``domains`` maps an argument to one of the classes below; :func:`draw` turns them into
cases from the worked example (the spec's first case holding that argument): the same inputs
with one argument moved to a drawn value, named in words for the message. The draws come from
:func:`course.framework.observe.generator`, seeded from the session seed, so the trusted replay draws the
same inputs; nothing here reads the student's results.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from course.framework.observe import generator

Bound = float | int | Callable[[Mapping[str, Any]], float] | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Domain:
    hint: str | None = None  # the drawn cases' hint (else the worked example's)
    base: Callable[[Mapping[str, Any]], bool] | None = None  # which case to move (else the first)


@dataclasses.dataclass(frozen=True)
class Numbers(_Domain):
    """A number in ``[low, high]`` (``None``: unbounded; an end may depend on the other inputs:
    ``dim`` runs from ``-x.dim()`` to ``x.dim() - 1``): both ends unless ``open``, the ``ties``
    where the text's rule turns (mass landing exactly on ``p``), ``interior`` draws between."""

    low: Bound = None
    high: Bound = None
    integer: bool = False
    open_low: bool = False  # the text excludes the low end itself ("p > 0")
    open_high: bool = False
    ties: tuple[Any, ...] | Callable[[Mapping[str, Any]], Sequence[Any]] = ()
    interior: int = 2

    def moves(self, value: Any, inputs: Mapping[str, Any], g: torch.Generator) -> list:
        low, high = (b(inputs) if callable(b) else b for b in (self.low, self.high))
        ends = [(low, "low", self.open_low), (high, "high", self.open_high)]
        out = [
            (end, f"the {side} end of its domain")
            for end, side, shut in ends
            if end is not None and not shut
        ]
        ties = self.ties(inputs) if callable(self.ties) else self.ties
        out += [(t, "a value where the text's rule turns") for t in ties]
        lo = low if low is not None else (high - 10 if high is not None else -10)
        hi = high if high is not None else lo + 10
        for _ in range(self.interior):
            u = float(torch.rand((), generator=g, dtype=torch.float64))
            value = lo + (hi - lo) * (0.05 + 0.9 * u)
            out.append((round(value) if self.integer else value, "drawn from its interior"))
        unique: dict[Any, str] = {}
        for value, why in out:  # each value once, with the first reason it is drawn for
            unique.setdefault(int(value) if self.integer else value, why)
        return list(unique.items())


LAYOUTS = {
    "strided": "a non-contiguous view (every other element of a wider tensor)",
    "transposed": "a transposed view (its last two axes stored the other way)",
    "expanded": "an expanded view (a leading axis of size 1 broadcast, stride 0)",
}


def relaid(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    """``tensor``'s values in another layout (a view; equal values, other strides)."""
    if layout == "strided":
        return torch.stack([tensor, torch.zeros_like(tensor)], dim=-1)[..., 0]
    if layout == "transposed" and tensor.dim() >= 2:
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "expanded" and tensor.dim() >= 1 and tensor.shape[0] == 1:
        return tensor[:1].clone().expand_as(tensor)
    return tensor


BEYOND = (
    " (entries beyond 1e4 in size, which the text allows: a clamp, or -1e4 in place of -inf "
    "for a blocked score, changes the result)"
)


@dataclasses.dataclass(frozen=True)
class Tensors(_Domain):
    """A tensor: the layouts the text allows (every one, unless it says "contiguous"), the worked
    example scaled by each of ``scales``, and shifted by each of ``shifts`` where the result
    ignores a constant (softmax), in float64, which holds such values to the example's precision.
    """

    layouts: tuple[str, ...] = ("strided", "transposed")
    scales: tuple[float, ...] = ()
    shifts: tuple[float, ...] = ()

    def moves(self, value: Any, inputs: Mapping[str, Any], g: torch.Generator) -> list:
        if not isinstance(value, torch.Tensor):
            return []
        out = [
            (relaid(value, lay), f"as {LAYOUTS[lay]}")
            for lay in self.layouts
            if relaid(value, lay) is not value
        ]
        if value.is_floating_point():
            for s in self.scales:
                beyond = BEYOND if (value * s).abs().max() > 1e4 else ""
                out.append((value * s, f"scaled by {s:g}{beyond}"))
            out += [
                (
                    value.double() + s,
                    f"in float64 with {s:g} added to every entry (values "
                    "beyond 1e4 in size, which the text allows: a clamp there changes the result)",
                )
                for s in self.shifts
            ]
        return out


@dataclasses.dataclass(frozen=True)
class Masks(_Domain):
    """A mask: beside the worked example's boolean one (True = may attend), the kinds the text
    accepts: "additive", the float mask attention adds to its scores (0 allowed, -inf not)."""

    kinds: tuple[str, ...] = ("additive",)

    def moves(self, value: Any, inputs: Mapping[str, Any], g: torch.Generator) -> list:
        boolean = isinstance(value, torch.Tensor) and value.dtype == torch.bool
        why = (
            "as an additive float mask (0 where the boolean mask is True, -inf where it is "
            "False), a kind the text accepts"
        )
        return [(additive(value), why) for kind in self.kinds if kind == "additive" and boolean]


FORMS = {
    "NFC": "precomposed (NFC: an accented letter is one character)",
    "NFD": "decomposed (NFD: an accented letter is two characters, the letter and a "
    "combining accent)",
}


@dataclasses.dataclass(frozen=True)
class Texts(_Domain):
    """A text: its accented characters precomposed (NFC) and decomposed (NFD), two spellings of
    one word in Unicode."""

    forms: tuple[str, ...] = ("NFC", "NFD")

    def moves(self, value: Any, inputs: Mapping[str, Any], g: torch.Generator) -> list:
        if not isinstance(value, str):
            return []
        spelled = [(unicodedata.normalize(f, value), FORMS[f]) for f in self.forms]
        return [(text, why) for text, why in spelled if text != value]


def causal_case(inputs: Mapping[str, Any]) -> bool:
    """A ``base`` for attention: the case whose mask is square and boolean (causal). Its row 0
    allows one key alone, so that a score scaled by a large number of either sign is the lowest
    of its row there, where a finite fill for the blocked keys would win."""
    mask = inputs.get("mask")
    square = isinstance(mask, torch.Tensor) and mask.size(-1) == mask.size(-2)
    return square and mask.dtype == torch.bool


def additive(mask: torch.Tensor) -> torch.Tensor:
    """A boolean mask (True = may attend) as the float mask attention adds to its scores."""
    return torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))


Domain = Numbers | Tensors | Masks | Texts


def draw(
    cases: Sequence[Any],
    domains: Mapping[str, Domain],
    defaults: Mapping[str, Any] | None = None,
    offset: int = 0,
) -> list[Any]:
    """The drawn cases: for each declared argument, the worked example with that argument moved
    across its domain, and to its default (which the runner's defaults form then leaves out)."""
    defaults = defaults or {}
    out = []
    g = generator(700_001 + offset)
    for name, domain in domains.items():
        chosen = domain.base or (lambda inputs: True)
        base = next((c for c in cases if name in c.inputs and chosen(c.inputs)), None)
        if base is None:
            continue
        moved = domain.moves(base.inputs[name], base.inputs, g)
        if isinstance(domain, Numbers):
            if name in defaults and all(v != defaults[name] for v, _ in moved):
                moved.append((defaults[name], "its default"))
            moved = [(v, f"{name}={v!r} ({why})") for v, why in moved]
        else:
            moved = [(v, f"`{name}` {why}") for v, why in moved]
        items = base.inputs.items()
        for new, why in moved:  # tensors copied: code that changes one in place (a mistake
            # the runner names) must not reach a drawn case, whose replay then sees other inputs
            inputs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in items}
            inputs[name] = new
            what, hint = f"{base.what}, but with {why}", domain.hint or base.hint
            out.append(replace(base, what=what, inputs=inputs, hint=hint, grad=False, device=False))
    return out
