"""What each argument's text allows, declared once; the runner draws its edges and its interior.

A spec's ``domains`` maps an argument to what the exercise text allows for it:

* :class:`Numbers`: a range with its ends (each included or not, an end may depend on the other
  inputs: ``dim`` runs from ``-x.dim()`` to ``x.dim() - 1``), integers or reals, and the values
  where the text's rule turns (``ties``: a probability mass landing exactly on ``p``, a score
  equal to the threshold). Every end and tie is drawn, then ``interior`` values between them;
* :class:`Tensors`: the layouts a caller may pass (a non-contiguous view, a transposed view, an
  expanded view: the same values, other strides) and the magnitudes the text allows (the worked
  example's tensor scaled, or shifted by a constant beyond 1e4 where the result ignores one);
* :class:`Texts`: a word's accented letters precomposed and decomposed (NFC, NFD);
* :class:`Masks`: the mask kinds the text accepts beside the worked example's boolean mask (an
  additive float mask of 0 and -inf, as attention adds it to the scores).

:func:`draw` turns the declarations into cases from the spec's first case (its worked example):
the same inputs with one argument moved to a drawn value, named in words for the message. The
draws come from :func:`course.observe.generator`, seeded from the session seed, so the trusted
replay draws the same inputs; nothing here reads the student's results.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from course.observe import generator

Bound = float | int | Callable[[Mapping[str, Any]], float] | None


@dataclasses.dataclass(frozen=True)
class Numbers:
    """A number argument: ``[low, high]`` (``None``: unbounded on that side)."""

    low: Bound = None
    high: Bound = None
    integer: bool = False
    open_low: bool = False  # the text excludes the low end itself ("p > 0")
    open_high: bool = False
    ties: tuple[Any, ...] | Callable[[Mapping[str, Any]], Sequence[Any]] = ()
    interior: int = 2
    hint: str | None = None
    base: Callable[[Mapping[str, Any]], bool] | None = None  # which case to move (else the first)

    def values(self, inputs: Mapping[str, Any], g: torch.Generator) -> list[tuple[Any, str]]:
        """``(value, why)`` for every end, every tie, then ``interior`` draws between the ends."""
        low, high = (b(inputs) if callable(b) else b for b in (self.low, self.high))
        out: list[tuple[Any, str]] = []
        if low is not None and not self.open_low:
            out.append((low, "the low end of its domain"))
        if high is not None and not self.open_high:
            out.append((high, "the high end of its domain"))
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


@dataclasses.dataclass(frozen=True)
class Tensors:
    """A tensor argument: the layouts the text allows (every layout, unless it says
    "contiguous") and the magnitudes (``scales`` of the worked example's floating tensor, and
    ``shifts`` added to every entry where the text's result ignores a constant: softmax; in
    float64, which holds such values to the worked example's precision)."""

    layouts: tuple[str, ...] = ("strided", "transposed")
    scales: tuple[float, ...] = ()
    shifts: tuple[float, ...] = ()
    hint: str | None = None
    base: Callable[[Mapping[str, Any]], bool] | None = None  # which case to move (else the first)


@dataclasses.dataclass(frozen=True)
class Masks:
    """A mask argument: the kinds the text accepts besides boolean (True = may attend): the
    worked example's mask as an additive float mask, 0 where allowed and -inf where blocked."""

    kinds: tuple[str, ...] = ("additive",)
    hint: str | None = None


@dataclasses.dataclass(frozen=True)
class Texts:
    """A text argument: its accented characters precomposed (NFC: one character) and
    decomposed (NFD: a letter and a combining accent), two spellings of one word in Unicode."""

    forms: tuple[str, ...] = ("NFC", "NFD")
    hint: str | None = None
    base: Callable[[Mapping[str, Any]], bool] | None = None  # which case to move (else the first)


FORMS = {"NFC": "precomposed (NFC: an accented letter is one character)",
         "NFD": "decomposed (NFD: an accented letter is two characters, the letter and a "
                "combining accent)"}  # fmt: skip


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


def _beyond(tensor: torch.Tensor) -> str:
    """Why a scaled tensor is drawn, where it reaches sizes a clamp or a -1e4 fill changes."""
    if tensor.abs().max() <= 1e4:
        return ""
    return (" (entries beyond 1e4 in size, which the text allows: a clamp, or -1e4 in place of "
            "-inf for a blocked score, changes the result)")  # fmt: skip


def _copied(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The base case's inputs, tensors copied: code that changes one in place (a mistake the
    runner names) must not reach a drawn case, whose replay then sees other inputs."""
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def draw(
    cases: Sequence[Any],
    domains: Mapping[str, Domain],
    defaults: Mapping[str, Any] | None = None,
    offset: int = 0,
) -> list[Any]:
    """The drawn cases: for each declared argument, the worked example (``cases[0]``, or the
    first case that has that argument) with that argument moved across its domain, and to its
    default (which the runner's defaults form then leaves out)."""
    defaults = defaults or {}
    out = []
    g = generator(700_001 + offset)
    for name, domain in domains.items():
        chosen = getattr(domain, "base", None) or (lambda inputs: True)
        base = next((c for c in cases if name in c.inputs and chosen(c.inputs)), None)
        if base is None:
            continue
        value = base.inputs[name]
        if isinstance(domain, Numbers):
            values = domain.values(base.inputs, g)
            if name in defaults and all(v != defaults[name] for v, _ in values):
                values.append((defaults[name], "its default"))
            moved = [(v, f"{name}={v!r} ({why})") for v, why in values]
        elif isinstance(domain, Masks) and isinstance(value, torch.Tensor):
            moved = [
                (additive(value), f"`{name}` as an additive float mask (0 where the boolean "
                 "mask is True, -inf where it is False), a kind the text accepts")
                for kind in domain.kinds
                if kind == "additive" and value.dtype == torch.bool
            ]  # fmt: skip
        elif isinstance(domain, Texts) and isinstance(value, str):
            moved = [
                (unicodedata.normalize(form, value), f"`{name}` {FORMS[form]}")
                for form in domain.forms
                if unicodedata.normalize(form, value) != value
            ]
        elif isinstance(value, torch.Tensor):
            moved = [
                (relaid(value, lay), f"`{name}` as {LAYOUTS[lay]}")
                for lay in domain.layouts
                if relaid(value, lay) is not value
            ]
            if value.is_floating_point():
                moved += [(value * s, f"`{name}` scaled by {s:g}{_beyond(value * s)}")
                          for s in domain.scales]  # fmt: skip
                moved += [
                    (value.double() + s, f"`{name}` in float64 with {s:g} added to every entry "
                     "(values beyond 1e4 in size, which the text allows: a clamp there changes "
                     "the result)")
                    for s in domain.shifts
                ]  # fmt: skip
        else:
            continue
        for new, why in moved:
            out.append(
                dataclasses.replace(
                    base,
                    what=f"{base.what}, but with {why}",
                    inputs={**_copied(base.inputs), name: new},
                    hint=domain.hint or base.hint,
                    grad=False,
                    device=False,
                )
            )
    return out
