"""Observations: how a check touches the student's code, so that its verdict can run elsewhere.

A check body calls the student's objects only inside :func:`observe`, which returns the result
as *plain data* (tensors, numbers, strings and containers of them); the rest of the body
(inputs, reference, comparison) is the check's own code. So one body runs in three modes:
``local`` (a notebook, the tests) calls the student's code; ``probe`` (the student's process
while grading) does too and records every observation, which :func:`encode` writes as JSON and
safetensors (never a pickle); ``replay`` (the grader's trusted process) calls nothing, returns
the recorded observations in turn, with the student's objects :class:`Absent`, and judges them
against references it computes itself: whatever the student's process forges, only data equal to
the right answers passes. Inputs come from :func:`generator`, seeded from the session's seed, so
probe and replay draw the same. What only the student's process can see, a side effect of its
code (global state, the global generator, an input overwritten in place) or a claim about
its objects (the same object kept, a flag such as ``training`` or ``requires_grad``, grad mode at
a call), goes through :func:`claim`: a failure in the notebook, a note that decides no point
while grading.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from course.framework import sealed
from course.framework.failure import CheckFailure, students_words, summarise_exception

LOCAL, PROBE, REPLAY = "local", "probe", "replay"
# What a claim the student's process reports (a side effect of its code, a flag or an identity
# of its objects) does to the verdict: a failure (the notebook, the tests), or a note beside it
# (the grader's replay: that process could as well have forged it, so it decides no point
# either way; docs/grading.md, "What is not protected").
JUDGED, REPORTED = "judged", "reported"
MAX_RECORD_BYTES = 64 * 1024**2  # a probe record larger than this is refused on reading


class NotPlainData(TypeError):
    """A check observed a value that cannot cross a process boundary as plain data."""


class ReplayMismatch(RuntimeError):
    """The recorded observations do not follow the check's own sequence (missing or forged)."""


class TouchedOutsideObserve(RuntimeError):
    """A check body used a student object outside ``observe`` (a bug in the check)."""


class StudentError(Exception):
    """The student's code raised ``error_type`` (its classes, comma-separated); ``message`` is the
    summary shown to them."""

    def __init__(self, message: str, error_type: str = "Exception"):
        super().__init__(message)
        self.message = message
        self.error_type = error_type


_KINDS = ("value", "not_implemented", "error", "failure")
_LIMITS = {"what": None, "kind": 20, "message": 4000, "error_type": 400, "ran": 64}


@dataclass
class Observation:
    """``kind``: value, not_implemented, error (the student's code raised) or failure (a check
    helper inside the observed call failed with ``message`` and ``hint``)."""

    what: str
    kind: str
    value: Any = None
    message: str = ""
    hint: str | None = None
    error_type: str = ""  # the class name of what the student's code raised
    side_effects: list[str] = field(default_factory=list)  # global state the call changed
    ran: str = ""  # course.framework.sealed.fingerprint() of what the probe called


@dataclass
class Session:
    """The mode a check body runs in, its seed and its observations."""

    mode: str = LOCAL
    seed: int = 0
    record: list[Observation] = field(default_factory=list)
    cursor: int = 0
    effects: str = JUDGED
    notes: list[str] = field(default_factory=list)  # claims reported, not judged


_session = Session()


def current() -> Session:
    return _session


@contextlib.contextmanager
def session(
    mode: str, seed: int = 0, record: list[Observation] | None = None, effects: str = JUDGED
) -> Iterator[Session]:
    """Run a check body in ``mode``; ``record``: the observations to replay; ``effects``: what
    a claim the student's process reports does in a replay (:func:`claim`)."""
    global _session
    previous, _session = _session, Session(mode, seed, list(record or []), effects=effects)
    try:
        yield _session
    finally:
        _session = previous


def generator(offset: int = 0, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator seeded from the session seed (+ ``offset`` for an independent stream)."""
    return torch.Generator(device=device).manual_seed(_session.seed * 1_000_003 + offset)


# --- plain data ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Foreign:
    """A value whose type plain data would erase (a NumPy array or scalar, an ``int`` subclass):
    the name of its type and its value as plain data, so the check sees the type it really was."""

    type_name: str
    value: Any
    base: str = ""  # the built-in type it is an instance of (numpy.float64 is a float)

    def __repr__(self) -> str:
        return f"<{self.type_name} {self.value!r}>"


_EXACT = (type(None), bool, int, float, str)


class Named(dict):
    """A mapping whose exact type was not ``dict`` (a ``Counter``): its items as plain data and
    the name of that type, so a check whose text states "a Counter" sees what came back."""

    type_name = "dict"


def type_name(value: Any) -> str:
    """``numpy.ndarray``, ``torch.Tensor``, ``float``: how a message names a value's type."""
    if isinstance(value, Foreign | Named):
        return value.type_name
    kind = type(value)
    if kind.__module__ in ("builtins", "torch"):
        return "torch.Tensor" if isinstance(value, torch.Tensor) else kind.__name__
    return f"{kind.__module__.split('.')[0]}.{kind.__name__}"


def to_student_plain(value: Any) -> Any:
    """:func:`to_plain` for what the student's code returned: an object that is not data (an
    estimator, a module, a generator) becomes ``Foreign(its type, None)``, so the check can say
    what came back instead of failing itself."""
    try:
        return to_plain(value)
    except NotPlainData:
        if type(value) in (tuple, list):
            items = [to_student_plain(v) for v in value]
            return tuple(items) if isinstance(value, tuple) else items
        if type(value) is dict:
            return {to_plain(k): to_student_plain(v) for k, v in value.items()}
        return Foreign(type_name(value), None)


def to_plain(value: Any) -> Any:
    """``value`` as plain data: tensors detached and copied to the CPU, containers rebuilt,
    types kept (a NumPy value or a subclass of a built-in becomes :class:`Foreign`, so a check
    that states "a Python float" sees what came back). :class:`NotPlainData` for anything else:
    a check turns a module or a function into data inside the observed call."""
    if type(value) in _EXACT or isinstance(value, Foreign):
        return value
    if isinstance(value, torch.Tensor):  # read so that no code of a subclass runs
        try:
            plain = sealed.plain_tensor(value)
        except ValueError as error:
            raise NotPlainData(str(error)) from None
        if sealed.exact_type(value):
            return plain
        kind = type(value)
        named = f"{kind.__module__}.{kind.__qualname__}, a subclass of torch.Tensor"
        return Foreign(named, plain, "tensor")
    if isinstance(value, torch.Size):
        return tuple(int(v) for v in value)
    if isinstance(value, torch.dtype | torch.device):
        return str(value)
    if type(value).__module__ == "numpy":
        import numpy as np

        if isinstance(value, np.ndarray):
            array = torch.from_numpy(np.ascontiguousarray(value)).clone()
            return Foreign(type_name(value), array)
        if isinstance(value, np.generic):
            base = next((t for t in (bool, int, float) if isinstance(value, t)), None)
            return Foreign(type_name(value), value.item(), base.__name__ if base else "")
    if isinstance(value, bool | int | float | str):  # a subclass (an enum)
        base = next(t for t in (bool, int, float, str) if isinstance(value, t))
        convert = {int: int.__int__, float: float.__float__, str: str.__str__}[base]
        return Foreign(type_name(value), convert(value), base.__name__)  # not the subclass's
    if type(value) in (tuple, list):
        items = [to_plain(v) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # torch.return_types, NamedTuple
        return tuple(to_plain(v) for v in value)
    if isinstance(value, set | frozenset):
        return {to_plain(v) for v in value}
    if isinstance(value, dict):  # read through dict itself: a subclass's items() never runs
        plain = {to_plain(k): to_plain(v) for k, v in dict.items(value)}
        if type(value) is dict:
            return plain
        named = Named(plain)
        named.type_name = value.type_name if isinstance(value, Named) else type_name(value)
        return named
    raise NotPlainData(f"cannot carry a {type(value).__name__} as plain data")


def _encode_tree(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Foreign):
        return {"foreign": [value.type_name, _encode_tree(value.value, tensors), value.base]}
    if isinstance(value, torch.Tensor):
        key = str(len(tensors))
        tensors[key] = value
        return {"tensor": key}
    if isinstance(value, list | tuple | set | frozenset):
        tag = "list" if isinstance(value, list) else "tuple" if isinstance(value, tuple) else "set"
        return {tag: [_encode_tree(v, tensors) for v in value]}
    if isinstance(value, dict):
        items = [[_encode_tree(k, tensors), _encode_tree(v, tensors)] for k, v in value.items()]
        return {"named": [value.type_name, items]} if isinstance(value, Named) else {"dict": items}
    raise NotPlainData(f"cannot encode a {type(value).__name__}")


_HASHABLE = (type(None), bool, int, float, str, tuple, Foreign)


def _decode_tree(node: Any, tensors: dict[str, torch.Tensor], depth: int = 0) -> Any:
    if depth > 64:
        raise ValueError("observation nested too deeply")
    if node is None or isinstance(node, bool | int | float | str):
        return node
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError("malformed observation")
    ((tag, body),) = node.items()
    if tag == "float" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "foreign" and isinstance(body, list) and len(body) == 3 and isinstance(body[0], str):
        base = body[2] if body[2] in ("", "bool", "int", "float", "str", "tensor") else ""
        return Foreign(body[0][:200], _decode_tree(body[1], tensors, depth + 1), base)
    if tag == "tensor" and isinstance(body, str) and body in tensors:
        return tensors[body]
    if tag in ("list", "tuple", "set") and isinstance(body, list):
        items = [_decode_tree(v, tensors, depth + 1) for v in body]
        if tag == "set":
            if not all(isinstance(v, _HASHABLE) for v in items):
                raise ValueError("unhashable set member")
            return set(items)
        return tuple(items) if tag == "tuple" else items
    if tag == "named" and isinstance(body, list) and len(body) == 2 and isinstance(body[0], str):
        named = Named(_decode_tree({"dict": body[1]}, tensors, depth + 1))
        named.type_name = body[0][:200]
        return named
    if tag == "dict" and isinstance(body, list):
        out = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError("malformed dict entry")
            key = _decode_tree(pair[0], tensors, depth + 1)
            if not isinstance(key, _HASHABLE):
                raise ValueError("unhashable dict key")
            out[key] = _decode_tree(pair[1], tensors, depth + 1)
        return out
    raise ValueError(f"unknown tag {tag!r}")


def encode(record: list[Observation]) -> bytes:
    """The record as bytes: a JSON header line, then a safetensors blob of every tensor."""
    from safetensors.torch import save

    tensors: dict[str, torch.Tensor] = {}
    rows = [{**vars(o), "value": _encode_tree(o.value, tensors)} for o in record]
    header = json.dumps(rows).encode("utf-8")
    blob = save({k: t.contiguous() for k, t in tensors.items()}) if tensors else b""
    return len(header).to_bytes(8, "little") + header + blob


def decode(data: bytes) -> list[Observation]:
    """Inverse of :func:`encode`, for bytes written by an untrusted process: sizes checked,
    only the plain-data tags accepted, tensors read with safetensors (no code runs)."""
    from safetensors.torch import load

    if len(data) > MAX_RECORD_BYTES or len(data) < 8:
        raise ValueError("probe record missing, empty or too large")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise ValueError("probe record truncated")
    rows = json.loads(data[8 : 8 + size].decode("utf-8"))
    tensors = load(data[8 + size :]) if len(data) > 8 + size else {}
    if not isinstance(rows, list):
        raise ValueError("malformed probe record")
    record = []
    for row in rows:
        if not isinstance(row, dict) or row.get("kind") not in _KINDS:
            raise ValueError("malformed observation row")
        hint, effects = row.get("hint"), row.get("side_effects") or []
        if not isinstance(effects, list) or not all(isinstance(e, str) for e in effects):
            raise ValueError("malformed side effects")
        text = {k: str(row.get(k, ""))[:n] for k, n in _LIMITS.items()}  # what a row may say
        value = _decode_tree(row.get("value"), tensors)
        hint = None if hint is None else str(hint)[:4000]
        effects = [e[:100] for e in effects]
        record.append(Observation(**text, value=value, hint=hint, side_effects=effects))
    return record


# --- observing -------------------------------------------------------------------------------


class Absent:
    """Stands for a student object in the trusted replay: touching it is a bug in the check."""

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def _touched(self, *args: Any, **kwargs: Any) -> Any:
        raise TouchedOutsideObserve(
            f"the check used the student's `{object.__getattribute__(self, '_name')}` outside "
            "observe(); every use of a student object must happen inside an observed call"
        )

    __call__ = _touched

    def __getattr__(self, name: str) -> Any:
        self._touched()

    def __repr__(self) -> str:
        return f"<absent {object.__getattribute__(self, '_name')}>"


_STATE_MESSAGES = {
    "grad mode": "switched gradient tracking (torch.set_grad_enabled / no_grad) and left it so",
    "inference mode": "left torch's inference mode switched on",
    "default dtype": "changed torch's default dtype (torch.set_default_dtype)",
    "random state": "drew from or reseeded torch's global random generator",
}


def observe(what: str, call: Callable[[], Any], *, random: bool = False) -> Any:
    """``call()`` (which uses the student's objects), its result as plain data.

    ``what`` names it in words; the replay's must match the record's, so a record cannot be
    shuffled. It runs on a fork of torch's global random state seeded from the session seed and
    its index (the same stream in every mode). Global state it leaves changed (grad mode, default
    dtype; the global random state unless ``random``) is restored and reported as a failure.
    ``NotImplementedError`` propagates; any other exception becomes :class:`StudentError`."""
    state = _session
    index = state.cursor
    state.cursor += 1
    if state.mode == REPLAY:
        if index >= len(state.record):
            raise ReplayMismatch(f"no recorded observation for {what!r}")
        observation = state.record[index]
        if observation.what != what:
            raise ReplayMismatch(f"expected an observation of {what!r}, found {observation.what!r}")
        sealed.verify(observation.ran)  # what ran in the student's process: ours
        return _raise_or_return(observation)
    ran = sealed.fingerprint()
    if state.mode == LOCAL:
        sealed.verify(ran)
    before = sealed.global_state()
    effects: list[str] = []
    with sealed.forked(state.seed * 1_000_003 + 7919 * (index + 1)):
        rng_before = sealed.rng_state()
        try:
            observation = Observation(what, "value", to_plain(call()))
        except NotImplementedError:
            observation = Observation(what, "not_implemented")
        except CheckFailure as failure:
            observation = Observation(what, "failure", message=failure.message, hint=failure.hint)
        except (NotPlainData, TouchedOutsideObserve, ReplayMismatch):
            raise  # a bug in the check, not in the student's code
        except Exception as exc:  # noqa: BLE001 - whatever the student's code raised
            observation = Observation(
                what,
                "error",
                message=summarise_exception(exc, what),
                error_type=",".join(c.__name__ for c in type(exc).__mro__),
            )
        if not random and not sealed.same_rng(sealed.rng_state(), rng_before):
            effects.append("random state")
    after = sealed.global_state()
    effects = [name for name in before if after[name] != before[name]] + effects
    if after != before:
        sealed.restore(before)
    observation.side_effects = effects
    observation.ran = ran
    state.record.append(observation)  # a probe's record; locally, what the tests compare
    return _raise_or_return(observation)


def claim(holds: bool, message: str, hint: str | None = None, *, prop: str | None = None) -> None:
    """What only the student's own process can observe and the grader cannot verify against
    anything it computes itself: a side effect of its code (global state or the global generator
    changed, an input overwritten in place) or a claim about its objects (the same tensor kept,
    a module's ``training`` flag, ``requires_grad``, grad mode at a forward pass). Where it does
    not hold: a failure with ``message``, or, in a session whose claims are ``REPORTED``
    (grading: the probe and the grader's replay alike, so that both make the same observations
    in the same order), a note on the verdict.

    Any observer inside the student's process can be bent (a rebound function, ``gc``,
    ``ctypes``, the record file rewritten): "holds" written there proves nothing, so a claim
    that does not hold must cost no more than one forged. The row says what was seen and not
    graded; what the check computes from values for its own inputs stays judged."""
    if holds:
        return
    failure = CheckFailure(message, hint, prop=prop)  # its words, the property's included
    state = _session
    if state.effects == REPORTED:
        if failure.message not in state.notes:
            state.notes.append(failure.message)
        return
    raise failure


def _raise_or_return(observation: Observation) -> Any:
    if observation.side_effects:
        changed = "; ".join(_STATE_MESSAGES.get(e, e) for e in observation.side_effects)
        claim(
            False,
            f"{observation.what}: your code {changed}. A function must leave global state as it "
            "found it.",
            "Use context managers (`with torch.no_grad():`) rather than global switches, and "
            "draw random numbers only where the exercise asks for randomness.",
            prop="global state unchanged",
        )
    if observation.kind == "not_implemented":
        raise NotImplementedError
    # Both messages are words of the student's process: quoted, they name no property.
    if observation.kind == "failure":
        raise CheckFailure(students_words(observation.message), observation.hint)
    if observation.kind == "error":
        raise StudentError(
            students_words(observation.message), observation.error_type or "Exception"
        )
    return observation.value
