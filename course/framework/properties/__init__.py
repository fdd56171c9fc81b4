"""The checking library, by concept: each property written once, with its message.

This module is the core: the properties the runner (:mod:`course.framework.spec`) applies to every
exercise, each observed through :func:`course.framework.observe.observe` (so the verdict can be replayed
where the student's code never runs) and failing with a message that names the property
violated. Concepts that several exercises share have a module each (:mod:`.attention`,
:mod:`.statistics`, :mod:`.decoding`); a property used by one check lives beside its spec.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from course.framework.check import CheckFailure, expect
from course.framework.failure import VIOLATED, depends_on_earlier_calls
from course.framework.observe import (
    Absent,
    Foreign,
    NotPlainData,
    StudentError,
    claim,
    current,
    generator,
    observe,
    to_plain,
    to_student_plain,
    type_name,
)
from course.framework.virtual import DeviceMixed, run_on_virtual

__all__ = ["Absent", "CheckFailure", "expect", "generator", "observe"]  # re-exported

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


@contextlib.contextmanager
def seeded(offset: int = 0) -> Iterator[None]:
    """Torch's global generator forked and seeded from the session: for reference modules."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(current().seed * 1_000_003 + 104_729 + offset)
        yield


def same(a: Any, b: Any) -> bool:
    """Exact equality of plain data (tensors and floats: NaN equal to NaN; tensors of the same
    dtype, shape and values)."""
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
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:  # NaN, NaN: alike
        return type(a) is type(b)
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
    """``function(*args, **kwargs)`` observed: its result as plain data. Fails when the call
    changed an argument in place ("inputs untouched"), but those in ``free`` (the text allows
    it); ``names`` names the positional arguments in messages."""
    given = dict(enumerate(args)) | kwargs  # by position, then by name
    named = dict(enumerate(names[: len(args)])) | {k: k for k in kwargs}
    before = {k: None if named.get(k) in free else _snapshot(v) for k, v in given.items()}

    def run() -> dict[str, Any]:
        result = to_student_plain(function(*args, **kwargs))
        return {"result": result, "after": [_snapshot(v) for v in given.values()]}

    observed = observe(what, run, random=random)
    after = observed["after"]
    expect(
        isinstance(after, list) and len(after) == len(before),
        f"{what}: the arguments did not come back from the call.",
    )
    for (key, old), new in zip(before.items(), after, strict=True):
        label = f"`{named[key]}`" if key in named else f"its {ORDINALS[min(key, 7)]} argument"
        claim(  # seen by the student's process alone
            old is None or same(old, new),
            f"{what}: your code changed {label} in place; the caller still needs it",
            "Compute into new tensors (x - m, not x -= m; torch.cat, not append) and copy a "
            "list or dict before changing it.",
            prop="inputs untouched",
        )
    return observed["result"]


def construct(what: str, cls: Any, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """The student's module ``cls(*args, **kwargs)`` and its state dict; in the replay the module
    is an :class:`Absent` placeholder (only later observed calls use it)."""
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
    """Output and gradients (``{"output", "inputs": [grad], "parameters": {name: grad}}``, None
    where none reaches) of ``(forward(*inputs) * w).sum()`` for a random ``w`` fixed by ``seed``:
    observed for the student's code, called directly for the reference."""
    leaves = [
        x.detach().clone().requires_grad_(x.is_floating_point())
        if isinstance(x, torch.Tensor)
        else x
        for x in inputs
    ]
    with torch.enable_grad():  # the code gets copies: one that writes into its input (where
        # the text allows it) works as on the output of a layer, not on a leaf
        output = forward(*(x.clone() if _wants_grad(x) else x for x in leaves))
        if not isinstance(output, torch.Tensor):
            raise CheckFailure(
                f"the forward pass returned {a_type(output)}, not a tensor.",
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


def _wants_grad(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad


def observe_gradients(
    what: str,
    forward: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    parameters: Callable[[], dict[str, torch.Tensor]] | None = None,
) -> dict[str, Any]:
    """:func:`gradients` of the student's ``forward``, observed (``parameters()`` read inside). An
    output cut from the graph gives ``None`` gradients, not an error, so the message can say
    which input or parameter gets none."""

    def run() -> dict[str, Any]:
        params = parameters() if parameters is not None else None
        try:
            return gradients(forward, inputs, params)
        except RuntimeError as error:
            if "does not require grad" not in str(error):
                raise
            return {"output": None, "inputs": [None] * len(inputs), "parameters": {}}

    return observe(what, run)


def large_scores(*shape: int, scale: float = 1000.0, offset: int = 0) -> torch.Tensor:
    """Scores in the hundreds and thousands: a softmax without the max shift overflows."""
    return torch.randn(*shape, generator=generator(offset)) * scale


def _typed_float(value: Any) -> bool:
    """A Python float as typing reads it: a float, a subclass of float (numpy.float64), or an
    int (PEP 484's numeric tower), never a bool, a numpy.float32 or a tensor."""
    if isinstance(value, Foreign):
        return value.base in ("float", "int")
    return type(value) in (float, int)


def an(name: str) -> str:
    """``name`` with its article, "an int", "a float": the grammar of every type named."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def a_type(value: Any) -> str:
    """What a message calls ``value``'s type: "None", "an int", "a torch.Tensor"."""
    return "None" if value is None else an(leaf_type(value))


def shown(value: Any, width: int = 70) -> str:
    """``value`` in a message: tensors by shape and dtype, the rest as written, cut to ``width``."""
    if isinstance(value, torch.Tensor):
        dtype = "" if value.dtype in (torch.float32, torch.int64) else f" {value.dtype}"
        return f"<tensor {tuple(value.shape)}{dtype}>"
    if type(value) in (list, tuple):
        inner = ", ".join(shown(v, width) for v in value)
        text = f"[{inner}]" if type(value) is list else f"({inner}{',' if len(value) == 1 else ''})"
    else:
        text = repr(value)
    if len(text) <= width:
        return text
    return text[: width - 5] + (" ...]" if text.startswith("[") else " ...")


def leaf_type(value: Any) -> str:
    return "torch.Tensor" if isinstance(value, torch.Tensor) else type_name(value)


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


def _expect_tensor(
    got: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    hint: str | None = None,
    strict: bool | dict = False,
    values: bool = True,
) -> None:
    """The stated result of a tensor: its dtype, then (with ``values``) its shape and its values
    within :func:`tolerance`, NaN where the reference has NaN; the message names the largest
    difference and where it is."""
    expect(
        got.dtype == expected.dtype,
        f"{what} has dtype {got.dtype}, expected {expected.dtype}",
        hint,
        "the stated dtype",
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
            f"is {expected[first].item():.6g}",
            hint,
            prop="numeric range",
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
        ok = isinstance(got, tuple | list) and (isinstance(expected, tuple) or type(got) is list)
        _stated_type(ok, got, f"a {type(expected).__name__} of {len(expected)}", what, hint)
        if values or isinstance(expected, tuple):  # a list's length is part of its value
            pairs = enumerate(zip(got, expected, strict=False))
            first = next((i for i, (mine, theirs) in pairs if not same(mine, theirs)), None)
            where = (
                f"; the first difference is item {first}: yours {shown(got[first])}, expected "
                f"{shown(expected[first])}"
                if first is not None
                else f"; yours {'stops' if len(got) < len(expected) else 'goes on'} after item "
                f"{min(len(got), len(expected)) - 1}"
            )
            expect(
                len(got) == len(expected),
                f"{what} returned {len(got)} values, expected {len(expected)}: yours "
                f"{shown(got)}, expected {shown(expected)}{where}",
                hint,
                "the stated result",
            )
        for i, (mine, theirs) in enumerate(zip(got, expected, strict=False)):
            label = what if len(expected) == 1 else f"{what}, item {i}"
            expect_result(mine, theirs, label, hint, strict, values)
        return
    if isinstance(expected, dict):
        stated = "dict" if type(expected) is dict else type_name(expected)  # "a Counter"
        ok = isinstance(got, dict) and stated in ("dict", type_name(got))
        after = f"; the code after it uses what {an(stated)} has"
        _stated_type(ok, got, an(stated), what, hint, after)
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing:
            raise CheckFailure(
                f"{what} has no entry {missing[0]!r} ({len(missing)} missing), expected "
                f"{expected[missing[0]]!r} there",
                hint,
                prop="the stated result",
            )
        if extra:
            raise CheckFailure(
                f"{what} has an entry {extra[0]!r} = {got[extra[0]]!r} that should not be there "
                f"({len(extra)} extra)",
                hint,
                prop="the stated result",
            )
        for name in expected:
            expect_result(got[name], expected[name], f"{what}[{name!r}]", hint, strict, values)
        return
    if isinstance(expected, float) and _typed_float(got):  # PEP 484: an int is a float too
        got = float(got.value if isinstance(got, Foreign) else got)
    _stated_type(leaf_type(got) == leaf_type(expected), got, a_type(expected), what, hint)
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


@dataclass(frozen=True)
class OneOf:
    """A result the text allows in several types ("``exp(loss)`` as a 0-dim tensor or a float"):
    ``value`` (a tensor) and the type names accepted, as :func:`expect_result` names types;
    ``any_dtype``: the text states no dtype, so a tensor is compared in its own float dtype."""

    value: torch.Tensor
    types: tuple[str, ...] = ("torch.Tensor", "float")
    any_dtype: bool = False


def _stated_type(
    ok: bool, got: Any, says: str, what: str, hint: str | None, after: str = ""
) -> None:
    """The stated return type: ``says`` is the type the exercise text states, in words."""
    expect(
        ok,
        f"{what} returned {a_type(got)}, but the exercise text says {says}{after}",
        hint,
        "the stated return type",
    )


def _one_of(got: Any, expected: OneOf, what: str, hint: str | None) -> Any:
    says = " or ".join(map(an, expected.types))
    _stated_type(leaf_type(got) in expected.types, got, says, what, hint)
    if isinstance(got, float):
        return float(expected.value)
    if expected.any_dtype and isinstance(got, torch.Tensor) and got.is_floating_point():
        return expected.value.to(got.dtype)
    return expected.value


def on_device(
    what: str,
    function: Callable[..., Any],
    args: tuple = (),
    kwargs: dict | None = None,
    modules: tuple = (),
) -> dict[str, Any]:
    """The device property, observed: ``function`` run on :mod:`course.framework.virtual`'s second device
    (its tensors and ``modules`` moved there): where each result lives, what it raised there."""

    def run() -> dict[str, Any]:
        try:
            _, where = run_on_virtual(function, args, kwargs, modules)
        except NotImplementedError:
            raise
        except (DeviceMixed, TypeError, RuntimeError) as error:
            return {"devices": [], "error": f"{type(error).__name__}: {error}"}
        return {"devices": where, "error": None}

    return observe(what, run, random=True)


def expect_device(what: str, observed: dict[str, Any]) -> None:
    """Fail unless the run on the second device raised nothing and left every result there."""
    error, devices = observed.get("error"), observed.get("devices") or []
    failed = f"on another device (a GPU, or here a test device) your code failed with {error}"
    for right, symptom in (
        (error is None, f"{failed}; the same inputs on the CPU worked"),
        (
            all(d == "virtual" for d in devices),
            "given inputs on another device, your code returned a tensor on the CPU, where on a "
            "GPU the next operation would fail",
        ),
    ):
        expect(
            right,
            f"{what}: {symptom}",
            "Every tensor your code creates must live on the device of its inputs: "
            "`device=x.device`, `torch.zeros_like(x)`, `x.new_zeros(...)`; register tables as "
            "buffers so `.to(device)` moves them; never go through NumPy or `.cpu()` on the way "
            "to the output.",
            "device, the result must live on the inputs' device",
        )


def expect_gradients(
    what: str,
    got: dict[str, Any],
    expected: dict[str, Any],
    names: Sequence[str],
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
            f"{what}: no gradient reaches `{name}`: training could not learn what produces it",
            "Compute with differentiable torch operations; no .detach(), .item(), NumPy or "
            "torch.no_grad() on the way to the output.",
            "gradients, the result must stay differentiable",
        )
        expect_result(mine, theirs, f"the gradient with respect to `{name}` ({what})")


def expect_parameters(
    what: str, got: dict[str, Any], declared: dict[str, tuple[int, ...]], hint: str | None = None
) -> None:
    """Every parameter the exercise text names is there (``got``: every parameter's shape),
    with its shape. Which of them train is read from flags: :func:`claim_trainable`."""
    names = set(got)
    missing = sorted(set(declared) - names)
    expect(
        not missing,
        f"{what} has no trainable parameter {', '.join(f'`{n}`' for n in missing)} (what it has: "
        f"{', '.join(f'`{n}`' for n in sorted(names)) or 'none'}). The check reads each layer "
        "by the name the exercise gives it.",
        hint or "Keep the sub-modules, names and layer types that the exercise describes.",
    )
    for name, shape in declared.items():
        expect(
            tuple(got[name]) == tuple(shape),
            f"{what}: `{name}` has shape {tuple(got[name])}, expected {tuple(shape)}.",
            hint,
        )


def claim_trainable(
    what: str,
    got: dict[str, Any],
    frozen: Sequence[str],
    declared: dict[str, tuple[int, ...]],
    hint: str | None = None,
) -> None:
    """The trainable parameters are exactly those the exercise text names (an extra one would
    be trained although the text has no such weight): ``requires_grad`` flags read in the
    student's process (``frozen``), a claim (:func:`course.framework.observe.claim`)."""
    trainable = set(got) - set(frozen)
    stopped = sorted(set(declared) - trainable)
    claim(
        not stopped,
        f"{what}: {', '.join(f'`{n}`' for n in stopped)} is not trainable (requires_grad=False)",
        hint or "A weight the exercise describes is an nn.Parameter that trains.",
        prop="the parameters the text names",
    )
    extra = sorted(trainable - set(declared))
    claim(
        not extra,
        f"{what} has trainable parameters the exercise does not describe: "
        f"{', '.join(f'`{n}`' for n in extra)}; an extra one would be trained too",
        hint or "Build only the layers the exercise describes; a fixed table is a buffer.",
        prop="the parameters the text names",
    )


def expect_same_in_modes(what: str, train: Any, evaluation: Any, hint: str | None = None) -> None:
    """Where the text says training mode changes nothing (no dropout, or dropout 0), the output
    in ``train()`` equals the output in ``eval()``: the property "training mode"."""
    try:
        expect_result(train, evaluation, f"{what} in train() mode", hint)
    except CheckFailure as failure:
        raise CheckFailure(
            f"{failure.message} Training mode changed the result although the exercise says it "
            "changes nothing here: a dropout or a random draw the text does not describe",
            failure.hint,
            prop="training mode",
        ) from None


def claim_modes_reach(what: str, modes_in_train: dict[str, bool]) -> None:
    """``train()`` reaches every sub-module (no sub-module kept in eval mode, no flag forced):
    flags read in the student's process, a claim (:func:`course.framework.observe.claim`)."""
    stuck = [name for name, training in modes_in_train.items() if not training]
    claim(
        not stuck,
        f"{what}: after .train(), {', '.join(f'`{n}`' for n in stuck)} stayed in eval mode",
        "Register sub-modules as attributes (or nn.ModuleList), and never set `.training` by "
        "hand: .train() and .eval() must reach all of them.",
        prop="training mode, in every sub-module",
    )


def expect_reproducible(what: str, second: Any, first: Any) -> None:
    """Randomness only from the given generator: the same seed gives the same result."""
    try:
        expect_result(second, first, what)
    except CheckFailure as failure:
        raise CheckFailure(
            f"{what}: two generators seeded alike gave different results ({failure.message})",
            "Pass the generator to every random draw (`generator=`); never use torch's global "
            "random functions without it.",
            prop="randomness only from the given generator",
        ) from None


def expect_same_again(
    what: str,
    again: Any,
    first: Any,
    against: str = "the second call, after other inputs, against the first",
) -> None:
    """No state kept between calls: the same inputs, called again after other calls, give the
    same result (exactly: the same code on the same inputs computes the same bits)."""
    if same(again, first):
        return
    try:
        expect_result(again, first, what)
        detail = "the values differ by a rounding error only"
    except CheckFailure as failure:
        detail = failure.message
    raise depends_on_earlier_calls(what, f"{against}: {detail}")


def meanings(*items: tuple) -> list[dict[str, Any]]:
    """What each item of a result means: a :class:`course.framework.spec.Property`'s fields per item ``(name,
    pick, the item in words, what the text says it is[, the cases it applies to])``, which judge
    ``pick(result)`` against the reference's and name what the item means in the text."""

    def judge_of(pick: Callable[[Any], Any], label: str, text: str) -> Callable[..., None]:
        def judge(case: Any, got: Any, expected: Any, observed: Any) -> None:
            try:
                what = f"{label} on {case.what}"
                expect_result(pick(got), pick(expected), what, case.hint, case.strict)
            except CheckFailure as failure:
                if failure.prop is not None:  # it names its own
                    raise
                raise CheckFailure(failure.message, failure.hint, prop=text) from None

        return judge

    return [
        {"name": name, "judge": judge_of(pick, label, text), "applies": (*rest, lambda c: True)[0]}
        for name, pick, label, text, *rest in items
    ]


def overflow(name: str, arg: str, kept: Callable[[Any], Any] = lambda r: r) -> dict[str, Any]:
    """Numeric range, named where it is the mistake: shifting each row of ``arg`` by its maximum
    changes no softmax, so a result (``kept(result)``) wrong on a case with values beyond 80 but
    right on the shifted input overflows."""

    def watch(student: Any, case: Any, call_: Callable) -> Any:
        x = case.inputs[arg]
        return call_({**case.inputs, arg: x - x.amax(-1, keepdim=True)})

    def judge(case: Any, got: Any, expected: Any, shifted: Any) -> None:
        mine, want, moved = kept(got), kept(expected), kept(shifted)
        if not all(isinstance(t, torch.Tensor) for t in (mine, want, moved)):
            return
        if not same(mine, want) and same(moved, want):
            raise CheckFailure(
                f"{name} on {case.what} is wrong, yet right once each row's maximum is subtracted "
                f"from `{arg}`, which changes no softmax: exp of values in the hundreds overflows "
                "(inf / inf is NaN)",
                "Compute probabilities stably: subtract each row's maximum before exp, or use "
                "torch.softmax, which does.",
                prop="numeric range",
            )

    return {"observe": watch, "judge": judge, "applies": lambda c: c.inputs[arg].abs().max() > 80}


def refusal(
    error: type[BaseException],
    attempt: Callable[[Any], Any],
    what: str,
    message: str,
    hint: str | None = None,
    says_so: bool = False,
) -> dict[str, Callable]:
    """The text says ``attempt(student)`` raises ``error`` (a ValueError for sizes that do not
    fit), with ``says_so`` an error "that says so": a message, not an empty one.
    ``observe``/``judge`` of a spec :class:`~course.framework.spec.Property`."""

    def watch(student: Any, case: Any, call: Callable) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            try:
                result = attempt(student)
            except error as raised:
                return {"raised": str(raised)[:300]}
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
            expect(
                not says_so or bool(str(observed["raised"]).strip()),
                f"{what} raised a {error.__name__} with an empty message: the exercise text says "
                "the error says so",
                hint,
                "the error the text states",
            )
            return
        if "other" in observed:
            done = f"raised {observed['other']}"
        else:
            shape = observed.get("shape")
            done = "was accepted" + (f" and returned shape {shape}" if shape else "")
        raise CheckFailure(
            f"{what} {done}: {message} The exercise text asks for a {error.__name__}",
            hint,
            prop="the error the text states",
        )

    return {"observe": watch, "judge": judge}


def fresh(read: Callable[[Any], Any], label: str) -> Callable[[Any, Any, Callable], Any]:
    """Observe ``read(module)`` of a module of the student's class built afresh from
    ``case.build`` (positionally): what ``__init__`` leaves, before the check's own weights."""

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
                f"{mine!r}, expected {value!r}{zero}",
                hint,
                "constructor arguments honoured",
            )

    return {"observe": fresh(read, "attributes after __init__"), "judge": judge}


def widened(value: Any) -> Any:
    """``value`` with every floating tensor in float64 (in lists, tuples and dict values)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    if isinstance(value, dict):
        return {k: widened(v) for k, v in value.items()}
    return type(value)(map(widened, value)) if isinstance(value, tuple | list) else value


def _tensors(value: Any) -> list[torch.Tensor]:
    """The floating tensors in ``value`` (in lists, tuples and dict values)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    items = value.values() if isinstance(value, dict) else value
    return [t for v in items for t in _tensors(v)] if isinstance(value, dict | tuple | list) else []


def follows_double(name: str, params: Sequence[str], hint: str) -> dict[str, Callable]:
    """After ``.double()`` (on a copy) the module computes in float64 on float64 inputs: float64
    results, the same values as its own in float32 (the reference judges those)."""

    def run(student: Any, case: Any, call: Callable) -> Any:
        args = widened([case.inputs[p] for p in params if p in case.inputs])
        return observe(
            f"{case.what}, the module after .double()",
            lambda: copy.deepcopy(student).double()(*args),
        )

    def judge(case: Any, got: Any, expected: Any, seen: Any) -> None:
        # Its own float32 result, rounded at the scale of its largest entry (x scaled by 1000
        # gives entries near 1e3 whose float32 rounding exceeds atol=1e-5 where they cancel).
        scale = max([1.0, *(t.abs().max().item() for t in _tensors(got) if t.numel())])
        bound = {"atol": 1e-5 * scale, "rtol": 1e-4}
        try:
            expect_result(seen, widened(got), f"{name}.double() on {case.what}", hint, bound)
        except CheckFailure as failure:
            said = failure.message.split(VIOLATED)[0].rstrip(".")  # this property, not the value's
            decide = f"{said}; its parameters decide the dtype"
            raise CheckFailure(decide, failure.hint, prop="the module follows .double()") from None

    return {"observe": run, "judge": judge}
