"""Every check a spec: an exercise's contract declared once, as data; one runner applies it.

A spec says what the exercise text says, nothing more (the fields below); its reference *is* the
stated result: its type, dtype, shape and device are what the student's result must have. The
worked example is CONTRIBUTING's "Checks" (``tests/test_spec.py`` runs it). :func:`check` turns
a spec into the notebook's check, whose runner applies every property to every case in one
order, with the messages of :mod:`course.framework.properties`: the call in every form (inputs untouched,
global state unchanged), the stated result's type, the spec's own properties, the values, the
gradients, ``train()`` against ``eval()``, and the device: every case again on a second device
that computes real values (:mod:`course.framework.virtual`), so "undecided" does not exist.

No answer in the student's process: while grading it only observes (``probe``), making the same
observations in the same order; the grader's trusted process replays them, and alone computes
the reference and judges (:func:`judging`). There, the check modules hold no reference, mistake
or judge at all (:mod:`course.grading.stripped`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from course.framework import forbidden as banned
from course.framework import properties as prop
from course.framework.check import exercise_check
from course.framework.domains import Domain, draw
from course.framework.failure import violated
from course.framework.observe import PROBE, StudentError, current, observe
from course.framework.virtual import NOT_MOVED, NOT_MOVED_HINT

POSITIONAL, KEYWORD, DEFAULTS = "positional", "keyword", "defaults"
NONE, GLOBAL = "none", "global"  # randomness; any other value names the generator parameter


def judging() -> bool:
    """True where a verdict is decided (the notebook, the tests, the grader's trusted replay);
    false in the student's process while grading, which must compute no answer."""
    return current().mode != PROBE


@dataclass(frozen=True)
class Case:
    """One row of a case table: the inputs by parameter name, in words for the messages."""

    what: str
    inputs: Mapping[str, Any]
    hint: str | None = None
    strict: bool | dict = False  # True: the text asks for float64 precision; a dict: this
    # case's own bound (course.framework.properties.tolerance)
    grad: bool = False  # compare the gradients of the spec's ``gradients`` on this case
    device: bool = True  # run this case again on the second device
    compare: bool = True  # compare values with the reference's (False: only its type and
    # shape; the spec's properties judge the values). A reference returning None: no comparison.


def cases(
    params: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    fields: Sequence[str] = ("hint", "strict", "grad", "device", "compare"),
    kind: type[Case] = Case,
    first_grad: bool = False,
    given: Mapping[str, Any] | None = None,
    keywords: bool = False,
    **each: Any,
) -> list[Case]:
    """A case table as cases, the one converter: each row is ``(what, a value for each of
    params in order, then a value for each of ``fields`` in order)``; a row may leave the further
    fields out, as a Case does. ``each``: fields every case shares (``device=False``), a row's
    own value before them; ``given``: inputs every case shares; ``keywords``: after its params,
    each row gives a dict of further inputs (the arguments it passes; those it leaves out take
    their defaults); ``first_grad``: the first case compares gradients; ``kind``: a Case with
    further fields of its own, named in ``fields``."""
    n, out = len(params) + keywords, []
    for i, (what, *values) in enumerate(rows):
        if len(values) > n + len(fields):
            raise ValueError(f"the row {what!r} has more values than {(*params, *fields)}")
        named = {**each, **({"grad": True} if first_grad and i == 0 else {})}
        named |= dict(zip(fields, values[n:], strict=False))
        inputs = {**(given or {}), **dict(zip(params, values[: len(params)], strict=True))}
        inputs |= values[n - 1] if keywords else {}
        out.append(kind(what, inputs, **named))
    return out


@dataclass(frozen=True)
class Property:
    """A property of the text that the result alone does not show (a blocked key gets exactly 0).
    ``observe(student, case, call)`` returns plain data (``call(inputs)`` calls the student's
    code as the spec does); ``judge(case, got, expected, observed)`` decides on the trusted side,
    after the result's types and before its values, so its own message is the one read. A
    judge's failure says what happened on the case; the runner adds "(the property violated:
    ``name``)" where it names no property itself, so ``name`` is in the text's words."""

    name: str
    judge: Callable[[Case, Any, Any, Any], None]
    observe: Callable[[Any, Case, Callable[[Mapping[str, Any]], Any]], Any] | None = None
    applies: Callable[[Case], bool] = lambda case: True


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer, declared once, in the form of the spec's reference: ``reference``
    computes what the mistake gives (a function's arguments; a module's ``build, weights,
    buffers, **inputs``). ``breaks``: the property of the text it breaks, in the text's words.
    Where a case fails and the student's result there is the mistake's (and the mistake's is not
    the reference's), the failure names it: "this is what <name> gives". A module mistake whose
    trainable parameters differ from the text's (one block shared by every layer) declares them
    (``parameters(build)``); a module with exactly those is named at construction. The check
    tests run every mistake of every spec as a student's answer (``tests/mistakes.py``)."""

    name: str  # "a mask inverted": what the student did, in a few words
    breaks: str
    reference: Callable[..., Any]
    hint: str | None = None
    parameters: Callable[[Any], Mapping[str, tuple[int, ...]]] | None = None


@dataclass(frozen=True, kw_only=True)
class _Contract:
    """What the contracts of a function and of a module both declare."""

    exercise: str
    title: str
    name: str
    reference: Callable[..., Any]
    hint: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    forms: tuple[str, ...] = (POSITIONAL,)  # add KEYWORD / DEFAULTS where the course calls so
    gradients: tuple[str, ...] = ()
    properties: tuple[Property, ...] = ()
    seed: int = 0
    domains: Mapping[str, Domain] = field(
        default_factory=dict
    )  # course.framework.domains: drawn inputs
    mistakes: tuple[Mistake, ...] = ()  # known wrong answers, named where a result is one


@dataclass(frozen=True, kw_only=True)
class Spec(_Contract):
    """A function's contract. ``reference(**inputs)`` is the stated result."""

    params: tuple[str, ...]
    cases: Callable[[], Sequence[Case]]
    keyword_only: tuple[str, ...] = ()  # parameters always passed by name (``**filter_args``)
    mutable: tuple[str, ...] = ()  # arguments the text allows the code to change in place
    device: bool = True  # the text says the result lives on the inputs' device
    random: str = NONE
    forbidden: tuple[str, ...] = ()  # built-ins the text forbids: course.framework.forbidden
    by_name: bool = True  # drawn inputs also go by name (not where the course never names them)
    # A case as several calls on objects they change (a model trained step by step):
    # ``calls(inputs)`` makes them afresh for every run, so that no run sees what another left;
    # ``watch(inputs, k, code, *args, **kwargs)`` makes call k and returns ``{"result": ...}``
    # with what the call did and left, as plain data. The properties judge every run.
    calls: Callable[[Mapping[str, Any]], Sequence[Mapping[str, Any]]] | None = None
    watch: Callable[..., dict] | None = None
    watched: tuple[str, ...] = ()  # what a call left that the values compare too, after its
    # result, by its key in ``watch``'s dict (the parameters after a training step)
    # The check cell passes several functions (merge and unmerge): the runner gets them as one
    # tuple, which ``watch`` and the reference (a tuple too) index by call.
    together: bool = False


@dataclass(frozen=True)
class Build:
    """One construction of a module: its constructor arguments and the forward cases."""

    what: str
    inputs: Mapping[str, Any]
    cases: Callable[[], Sequence[Case]]
    deterministic: bool = True  # train() computes the same as eval() (no dropout described)


@dataclass(frozen=True, kw_only=True)
class ModuleSpec(_Contract):
    """A module's contract. ``parameters(build)``: ``{name: shape}`` of every trainable parameter
    the text names, into which the runner loads *its own* random weights (all-zero or copied
    weights cannot pass); ``reference(build, weights, buffers, **inputs)`` is the stated result
    with the same weights and the module's buffers."""

    init: tuple[str, ...]
    forward: tuple[str, ...]
    builds: Callable[[], Sequence[Build]]
    parameters: Callable[[Build], Mapping[str, tuple[int, ...]]]
    init_defaults: Mapping[str, Any] = field(default_factory=dict)
    init_forms: tuple[str, ...] = (POSITIONAL,)
    output: Callable[[Any], Any] = lambda result: result  # the tensor gradients flow from
    keyword_only = mutable = ()  # as a Spec's: forward takes every argument as the course calls
    random = NONE

    @property
    def params(self) -> tuple[str, ...]:
        return self.forward


# --- calling as the course calls ------------------------------------------------------------


def arrange(
    params: Sequence[str],
    defaults: Mapping[str, Any],
    inputs: Mapping[str, Any],
    form: str,
    keyword_only: Sequence[str] = (),
) -> tuple[tuple, dict, str]:
    """Positional and keyword arguments of one call form, and the call written out."""
    given = [p for p in params if p in inputs]
    if form == DEFAULTS:
        given = [p for p in given if not (p in defaults and _same_default(inputs[p], defaults[p]))]
    named = [p for p in given if p in keyword_only]
    given = [p for p in given if p not in keyword_only]
    if form == POSITIONAL:  # a parameter left out before a given one: its default, in place
        last = max((params.index(p) for p in given), default=-1)
        spots = [p for p in params[: last + 1] if p not in keyword_only]
        args, kwargs = tuple(inputs[p] if p in inputs else defaults[p] for p in spots), {}
    else:  # the first parameter positionally, the rest by name
        args = (inputs[given[0]],) if given else ()
        kwargs = {p: inputs[p] for p in given[1:]}
    kwargs.update({p: inputs[p] for p in named})
    shown = [_show(a) for a in args] + [f"{k}={_show(v)}" for k, v in kwargs.items()]
    return args, kwargs, ", ".join(shown)


def _same_default(value: Any, default: Any) -> bool:
    if isinstance(value, torch.Tensor) or isinstance(default, torch.Tensor):
        return value is default
    return type(value) is type(default) and value == default


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = "" if value.dtype in (torch.float32, torch.int64) else f" {value.dtype}"
        return f"<{tuple(value.shape)}{dtype}>"
    text = repr(value)
    return text if len(text) <= 30 else f"<{type(value).__name__}>"


def _forms(forms: Sequence[str], show: Callable[[str], str]) -> list[str]:
    """The distinct call forms, by the call written out (a one-argument call has one form)."""
    shown = [show(form) for form in forms]
    return [form for i, form in enumerate(forms) if shown[i] not in shown[:i]]


def _arranged(spec: Spec | ModuleSpec, inputs: Mapping[str, Any], form: str = "") -> tuple:
    """:func:`arrange` of a call of the spec's function or forward (its first form by default)."""
    form = form or spec.forms[0]
    return arrange(spec.params, spec.defaults, inputs, form, spec.keyword_only)


def _call(
    what: str, function: Any, args: tuple, kwargs: dict, spec: Any, random: bool = False
) -> Any:
    """The student's ``function`` called through :func:`course.framework.properties.call` (its arguments
    named by the spec's parameters, those it may change in place left unjudged)."""
    names, free = spec.params, spec.mutable
    run = functools.partial(prop.call, what, function, *args, random=random, names=names, free=free)
    return _told(what, run, **kwargs)


def _told(what: str, run: Callable[..., Any], /, **kwargs: Any) -> Any:
    """``run(**kwargs)``, the student's error told with the case (a batch used where it came
    from, course.framework.virtual.unmoved: the device property's failure)."""
    try:
        return run(**kwargs)
    except StudentError as error:
        moved = "BatchNotMoved" in error.error_type.split(",")
        message, hint = (NOT_MOVED, NOT_MOVED_HINT) if moved else (error.message, None)
        told = message if what in message else f"on {what}, {message}"  # the case named once
        raise prop.CheckFailure(told, hint, prop="device" if moved else None) from None


# --- the runner: functions ------------------------------------------------------------------


def run_function(spec: Spec, student: Callable[..., Any]) -> None:
    if spec.forbidden:  # the answer's own source, read as the grader reads the student's cells
        source = observe(f"the source of {spec.name}", lambda: banned.source_of(student))
        used = banned.uses(source, spec.forbidden) if judging() else []
        if used:
            raise prop.CheckFailure(banned.message(used, spec.forbidden), spec.hint)
    written = list(spec.cases())
    cases = written + draw(written, spec.domains, spec.defaults)
    added = (KEYWORD, DEFAULTS) if spec.by_name else ()  # DEFAULTS names the rest
    drawn = (*spec.forms, *(f for f in added if f not in spec.forms))
    forms = [spec.forms if i < len(written) else drawn for i in range(len(cases))]
    named = (spec.name, student)
    called = _call_all(spec, named, cases, forms, named if spec.random == NONE else None)
    for case, results in zip(cases, called, strict=True):
        if isinstance(results, prop.CheckFailure):
            raise results
        if spec.calls:
            compute = functools.partial(_run_of, spec, case)
        else:
            compute = functools.partial(_apply, inputs=case.inputs)
        _judge_case(spec, case, results, student, compute)
        if case.grad and spec.gradients:
            _gradients(spec, case, student, spec.reference, lambda r: _first_tensor(r))
        if spec.random not in (NONE, GLOBAL):
            _reproducible(spec, student, case)
    if spec.device:
        _on_device(spec, student, spec.name, cases)


def _apply(code: Callable[..., Any], inputs: Mapping[str, Any]) -> Any:
    """``code(**inputs)``: a reference (or a mistake) of a function, on one case."""
    return code(**inputs)


def _run_of(spec: Spec, case: Case, code: Callable[..., Any]) -> list[dict]:
    """A reference's (or a mistake's) run of a case of several calls, in the first form."""
    return _run(spec, code, "", case, spec.forms[0])


def _call_forms(
    spec: Spec | ModuleSpec, student: Any, name: str, case: Case, forms: Sequence[str]
) -> list[tuple[str, Any]]:
    """``(what, result)`` of ``case`` in each distinct call form."""
    results = []
    for form in _forms(forms, lambda f: _arranged(spec, case.inputs, f)[2]):
        args, kwargs, shown = _arranged(spec, case.inputs, form)
        what = f"{name}({shown}) on {case.what}"
        what += _left_out(spec, case, form) if isinstance(spec, Spec) else ""
        if isinstance(spec, Spec) and spec.calls:
            result = _run(spec, student, what, case, form)
        else:  # copies: a change in place reaches no other call
            result = _call(what, student, _fresh(args), _fresh(kwargs), spec, spec.random == GLOBAL)
        results.append((what, result))
    return results


def _run(spec: Spec, code: Callable, what: str, case: Case, form: str) -> list[dict]:
    """What each call of a run (``spec.calls``) returned and left, watched: the student's
    calls observed (``what`` names them), the reference's (``what`` empty) made directly."""
    made = spec.calls(case.inputs)
    out = []
    for k, inputs in enumerate(made):
        args, kwargs, _ = _arranged(spec, inputs, form)
        run = functools.partial(spec.watch, inputs, k, code)
        step = f"{what}, call {k + 1} of {len(made)}" if len(made) > 1 else what
        out.append(_call(step, run, args, kwargs, spec) if what else run(*args, **kwargs))
    return out


def _left_out(spec: Spec, case: Case, form: str) -> str:
    """ ", relying on its default dim=-1": what the defaults form left out, in words."""
    left = [
        f"{p}={d!r}"
        for p, d in spec.defaults.items()
        if p not in case.inputs or (form == DEFAULTS and _same_default(case.inputs[p], d))
    ]
    return f", relying on its default {' and '.join(left)}" if left else ""


def _on_device(
    spec: Spec | ModuleSpec, callee: Any, name: str, cases: Sequence[Case], mode: str = ""
) -> None:
    """Every case (but those that say not) again on the second device, a module's weights too."""
    for case in (c for c in cases if c.device):
        args, kwargs, shown = _arranged(spec, case.inputs)
        what = f"{name}({shown}) on {case.what}, {mode}on another device"
        modules = (callee,) if isinstance(spec, ModuleSpec) else ()
        observed = prop.on_device(what, callee, args, kwargs, modules=modules)
        if judging():
            prop.expect_device(what, observed)


def _call_all(
    spec: Spec | ModuleSpec,
    student: tuple[str, Any],
    cases: Sequence[Case],
    forms: Sequence[Sequence[str]],
    first: tuple[str, Any] | None,
    against: str = "the second call, after other inputs, against the first",
) -> list:
    """Every case in its forms (``student``: its name and the code), a failure kept in its place
    in the table, raised when its case is judged. Before, ``first`` (the same, or a module built
    alike) is given every case once in reverse order: a result that then changed depends on
    earlier calls (a cache, a counter, state on a module), a failure that says so before any
    value is judged, in the notebook and the replay alike."""
    earlier = {}  # by the case's place in the table (two cases may share their words)
    for i in reversed(range(len(cases))) if first else ():
        again = replace(cases[i], what=f"{cases[i].what}, the first time")
        try:
            earlier[i] = _call_forms(spec, first[1], first[0], again, forms[i][:1])[0][1]
        except prop.CheckFailure:  # reported by the calls below, as the smallest failing input
            continue
    called: list[list[tuple[str, Any]] | prop.CheckFailure] = []
    for case, declared in zip(cases, forms, strict=True):
        try:
            called.append(_call_forms(spec, student[1], student[0], case, declared))
        except prop.CheckFailure as failure:
            called.append(failure)
    for i, results in enumerate(called):
        if i in earlier and isinstance(results, list) and judging():
            prop.expect_same_again(results[0][0], results[0][1], earlier[i], against)
    return called


def _fresh(value: Any) -> Any:
    """A copy of the containers and tensors in ``value``; a view stays a view of its own copy
    (``clone()`` would make a drawn layout, course.framework.domains, contiguous)."""
    if isinstance(value, torch.Tensor):
        base = value._base
        if base is None or not base.is_contiguous():
            return value.clone()
        offset = value.storage_offset() - base.storage_offset()
        return base.clone().as_strided(value.size(), value.stride(), offset)
    if isinstance(value, list | tuple):
        return type(value)(_fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _judge_case(
    spec: Spec | ModuleSpec,
    case: Case,
    results: list[tuple[str, Any]],
    student: Any,
    compute: Callable[[Callable[..., Any]], Any],
) -> None:
    """The properties' observations; then, trusted side only, the reference computed (here and
    nowhere else: ``compute(reference)`` on this case), the result's type, the properties'
    judgements, the values. A failure on a result that is a known mistake's names the mistake."""

    def call_for(item: Property) -> Callable[[Mapping[str, Any]], Any]:
        what = f"{spec.name} on {case.what}, for the property: {item.name}"

        def call(inputs: Mapping[str, Any]) -> Any:
            args, kwargs, _ = _arranged(spec, inputs)
            return _call(what, student, args, kwargs, spec, spec.random == GLOBAL)

        return call

    observed = [
        (item, item.observe(student, case, call_for(item)) if item.observe else None)
        for item in spec.properties
        if item.applies(case)
    ]
    if not judging():
        return
    expected = compute(spec.reference)  # None: a random result, which only the properties judge
    hint = case.hint or spec.hint
    pairs = _pairs(spec, results, expected)
    runs = [(case, results[0][1])]  # a run of several calls: every run judged, call by call
    if isinstance(spec, Spec) and spec.calls:
        runs = [(replace(case, what=what), got) for what, got in results]
    try:
        if expected is not None:
            for what, got, want in pairs:
                prop.expect_result(got, want, what, hint, case.strict, values=False)
        for item, seen in observed:
            for judged, got in runs:
                _judged(item, judged, got, expected, seen)
        if expected is not None and case.compare:
            for what, got, want in pairs:
                prop.expect_result(got, want, what, hint, case.strict)
    except prop.CheckFailure:
        if expected is not None:
            _name_mistake(spec, case, results, expected, compute)
        raise


def _judged(item: Property, case: Case, got: Any, expected: Any, seen: Any) -> None:
    """``item.judge`` on one case; its failure, where that names no property, names ``item``."""
    try:
        item.judge(case, got, expected, seen)
    except prop.CheckFailure as failure:
        if failure.prop is not None:
            raise
        named = prop.CheckFailure(failure.message, failure.hint, prop=item.name)
        named.mistake = failure.mistake
        raise named from None


def _pairs(
    spec: Spec | ModuleSpec, results: list[tuple[str, Any]], expected: Any, whole: bool = False
) -> list:
    """``(what, got, want)`` of every result to compare: each call form's, and in a run of
    several calls (``spec.calls``) each call's result and what it left that the spec compares
    (``spec.watched``; ``whole``: all it watched)."""
    if not (isinstance(spec, Spec) and spec.calls):
        return [(what, got, expected) for what, got in results]
    pairs = []
    for what, got in results:
        for k, (mine, ours) in enumerate(zip(got, expected, strict=True)):
            label = f"{what}, call {k + 1}" if len(got) > 1 else what
            if whole:
                pairs.append((label, mine, ours))
                continue
            pairs.append((label, mine["result"], ours["result"]))
            pairs += [(f"{label}, the {key} it left", mine[key], ours[key]) for key in spec.watched]
    return pairs


def _matches(pairs: list, strict: bool | dict) -> bool:
    """Every ``got`` is its ``want`` by the one value comparison (course.framework.properties)."""
    try:
        for what, got, want in pairs:
            prop.expect_result(got, want, what, None, strict)
    except prop.CheckFailure:
        return False
    return True


def _name_mistake(
    spec: Spec | ModuleSpec,
    case: Case,
    results: list[tuple[str, Any]],
    expected: Any,
    compute: Callable[[Callable[..., Any]], Any],
) -> None:
    """Raise the failure that names the first of the spec's mistakes whose result on ``case``
    the student's is (and the reference's is not); return where none is."""
    for mistake in spec.mistakes:
        try:
            gives = compute(mistake.reference)
        except Exception:  # noqa: BLE001 - a mistake undefined on this case names nothing here
            continue
        if _matches(_pairs(spec, [("", gives)], expected, True), case.strict):
            continue  # the mistake changes nothing on this case
        if _matches(_pairs(spec, results, gives, True), case.strict):
            raise _mistake_failure(results[0][0], mistake, spec.hint) from None


def _mistake_failure(what: str, mistake: Mistake, hint: str | None) -> prop.CheckFailure:
    failure = violated(what, f"gives what {mistake.name} gives", mistake.breaks)
    failure.mistake, failure.hint = mistake.name, mistake.hint or hint
    return failure


def _first_tensor(result: Any) -> Any:
    if isinstance(result, prop.OneOf):
        return result.value
    if isinstance(result, tuple | list) and result:
        return _first_tensor(result[0])
    return result


def _gradients(
    spec: Any,
    case: Case,
    forward: Callable,
    reference: Callable,
    pick: Callable[[Any], Any],
    parameters: Callable[[], dict] | None = None,
    reference_parameters: dict | None = None,
) -> None:
    """Gradients of the declared inputs (and ``parameters()``, the student's) against the
    reference's (``reference_parameters`` its leaves)."""
    names = [n for n in spec.gradients if isinstance(case.inputs.get(n), torch.Tensor)]
    others = {k: v for k, v in case.inputs.items() if k not in names}
    what = f"gradients of {spec.name} on {case.what}"

    def run(*tensors: torch.Tensor) -> torch.Tensor:
        args, kwargs, _ = _arranged(spec, {**case.inputs, **dict(zip(names, tensors, strict=True))})
        return pick(forward(*args, **kwargs))

    inputs = [case.inputs[n] for n in names]
    got = prop.observe_gradients(what, run, inputs, parameters)
    if judging():

        def ref(*tensors: torch.Tensor) -> torch.Tensor:
            return pick(reference(**dict(zip(names, tensors, strict=True)), **others))

        expected = prop.gradients(ref, inputs, reference_parameters)
        prop.expect_gradients(what, got, expected, names)


def _reproducible(spec: Spec, student: Callable[..., Any], case: Case) -> None:
    """Randomness only from the given generator: two generators seeded alike, same result."""
    name = spec.random
    results = []
    for attempt in range(2):
        inputs = dict(case.inputs)
        inputs[name] = torch.Generator().manual_seed(1234)
        args, kwargs, shown = _arranged(spec, inputs)
        what = f"{spec.name}({shown}) on {case.what}, generator seeded 1234 (call {attempt + 1})"
        results.append((what, _call(what, student, args, kwargs, spec)))
    if judging():
        prop.expect_reproducible(results[1][0], results[1][1], results[0][1])


# --- the runner: modules --------------------------------------------------------------------


def _state(module: nn.Module) -> dict[str, Any]:
    return {
        "parameters": {n: tuple(p.shape) for n, p in module.named_parameters()},
        "frozen": sorted(n for n, p in module.named_parameters() if not p.requires_grad),
        "buffers": {n: b for n, b in module.named_buffers()},
    }


def weights_for(shapes: Mapping[str, tuple[int, ...]], offset: int = 0) -> dict[str, torch.Tensor]:
    """The check's own weights: seeded, of the declared shapes, scaled like an initialisation."""
    g = prop.generator(50_000 + offset)
    out = {}
    for name, shape in shapes.items():
        fan_in = shape[-1] if len(shape) > 1 else max(shape[0], 1)
        out[name] = torch.randn(*shape, generator=g) / fan_in**0.5
    return out


def run_module(spec: ModuleSpec, student_class: type[nn.Module]) -> None:
    for b, build in enumerate(spec.builds()):
        declared = dict(spec.parameters(build))
        weights = weights_for(declared, b)
        arranged = functools.partial(arrange, spec.init, spec.init_defaults, build.inputs)
        forms = _forms(spec.init_forms, lambda f, a=arranged: a(f)[2])
        for f, form in enumerate(forms):
            args, kwargs, shown = arranged(form)
            made = f"{spec.name}({shown})"
            module = _construct(made, student_class, args, kwargs)
            state = observe(f"{made}: parameters and buffers", lambda m=module: _state(m))
            if judging():
                _name_parameters(spec, build, made, state["parameters"], declared)
                prop.expect_parameters(made, state["parameters"], declared, spec.hint)
                prop.claim_trainable(
                    made, state["parameters"], state["frozen"], declared, spec.hint
                )
            observe(
                f"{made}: load the check's weights",
                lambda m=module, w=weights: _load(m, w) and None,
            )
            twin = None
            if b == f == 0:  # a second module, for the cases in reverse order (_call_all)
                twin = _construct(f"{made}, a second one", student_class, args, kwargs)
                observe(
                    f"{made}, a second one: the check's weights, eval()",
                    lambda m=twin, w=weights: _load(m, w) and m.eval() and None,
                )
            written = list(build.cases())
            cases = written + draw(written, spec.domains, spec.defaults, offset=b)
            _module_cases(spec, build, module, made, cases, weights, state, f == 0, twin)


def _build_apply(
    build: Build, weights: Mapping, buffers: Mapping, inputs: Mapping, code: Callable[..., Any]
) -> Any:
    """``code(build, weights, buffers, **inputs)``: a module's reference (or mistake) on a case."""
    return code(build, weights, buffers, **inputs)


def _name_parameters(
    spec: ModuleSpec, build: Build, made: str, got: Mapping, declared: Mapping
) -> None:
    """A module whose trainable parameters are those a mistake declares: the mistake, named."""
    for mistake in spec.mistakes:
        if mistake.parameters is None:
            continue
        theirs = {n: tuple(s) for n, s in mistake.parameters(build).items()}
        if theirs != {n: tuple(s) for n, s in declared.items()} and theirs == {
            n: tuple(s) for n, s in got.items()
        }:
            raise _mistake_failure(made, mistake, spec.hint)


def _construct(what: str, cls: Any, args: tuple, kwargs: dict) -> Any:
    return _told(what, functools.partial(prop.construct, what, cls, *args), **kwargs)[0]


def _load(module: nn.Module, weights: Mapping[str, torch.Tensor]) -> bool:
    with torch.no_grad():
        named = dict(module.named_parameters())
        for name, value in weights.items():
            named[name].copy_(value.to(named[name].dtype))
    return True


def _module_cases(
    spec: ModuleSpec,
    build: Build,
    module: Any,
    made: str,
    cases: list[Case],
    weights: dict,
    state: dict,
    first: bool,
    twin: Any = None,
) -> None:
    buffers = state["buffers"]

    def reference(params: Mapping[str, torch.Tensor], **inputs: Any) -> Any:
        return spec.reference(build, params, buffers, **inputs)

    observe(f"{made}.eval()", lambda: module.eval() and None)
    forms = [spec.forms] * len(cases)
    against = "this module against a second one built alike, given the cases in reverse order"
    second = None if twin is None else (f"{made} (a second one)", twin)
    called = _call_all(spec, (made, module), cases, forms, second, against)
    for case, results in zip(cases, called, strict=True):
        if isinstance(results, prop.CheckFailure):
            raise results
        compute = functools.partial(_build_apply, build, weights, buffers, case.inputs)
        _judge_case(spec, case, results, module, compute)
    if not first or not cases:
        return
    case = cases[0]
    args, kwargs, shown = _arranged(spec, case.inputs)
    what = f"{made}({shown}) on {case.what}"
    trained = observe(
        f"{what} in train() mode", lambda: in_train(module, args, kwargs), random=True
    )
    if judging():
        prop.claim_modes_reach(what, trained["modes"])
        if build.deterministic:
            prop.expect_same_in_modes(what, trained["result"], reference(weights, **case.inputs))
    for case in (c for c in cases if c.grad and spec.gradients):
        # in train() mode where that changes nothing: training-only paths meet backward too
        mode = "train" if build.deterministic else "eval"
        observe(f"{made}.{mode}()", lambda m=mode: getattr(module, m)() and None)
        # every named parameter too, against the reference with the same weights as leaves
        leaves = {n: w.clone().requires_grad_(True) for n, w in weights.items()}
        ours = functools.partial(reference, leaves)
        _gradients(spec, case, module, ours, spec.output, lambda: _fresh_parameters(module), leaves)
    for mode in ("train", "eval"):
        observe(f"{made}.{mode}()", lambda m=mode: getattr(module, m)() and None)
        _on_device(spec, module, made, cases, f"in {mode}() mode ")


def in_train(module: nn.Module, args: tuple, kwargs: Mapping) -> dict[str, Any]:
    """The result in train() mode and every sub-module's mode there; then eval()."""
    module.train()
    try:
        return {"result": module(*args, **kwargs), "modes": prop.modes(module)}
    finally:
        module.eval()


def _fresh_parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters, no gradient left from an earlier backward."""
    named = dict(module.named_parameters())
    for parameter in named.values():
        parameter.grad = None
    return named


# --- the notebook-facing check --------------------------------------------------------------


def check(spec: Spec | ModuleSpec) -> Callable[..., Any]:
    """The check cell's function for ``spec``: ``check.name(student_object)``."""
    runner = run_module if isinstance(spec, ModuleSpec) else run_function

    def body(student: Any, *context: Any) -> None:  # context: what a check cell passes along
        together = isinstance(spec, Spec) and spec.together
        runner(spec, (student, *context) if together else student)

    body.__name__ = spec.name
    body.__doc__ = f"The declared contract of {spec.exercise} ({spec.title})."
    checked = exercise_check(spec.exercise, spec.title, hint=spec.hint, seed=spec.seed)(body)
    checked.spec = spec  # type: ignore[attr-defined]
    return checked
