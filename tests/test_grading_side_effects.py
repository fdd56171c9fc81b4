"""While grading, a side effect the student's process reports decides no point (course.observe.side_effect).

Each forgery below is one a hand-in can do in its own process (the hostile round's four: a
rebound ``course.sealed.global_state``, ``same_rng``, ``plain_tensor``, or ``BOUND`` with a faked
``fingerprint``; and the record itself with every side effect taken out), applied while its
answer is probed beside the same answer probed honestly, as the grader probes (``REPORTED``):
the two records get the same verdict, the honest one telling what was seen and not graded. As
the notebook judges (``JUDGED``), the honest record fails: the side effect would have decided.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
import torch

from course import check as framework
from course import observe, sealed
from course.checks import nb00
from course.spec import Case, Spec, check


def right(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def grad_left_off(x, dim=-1):
    torch.set_grad_enabled(False)
    return right(x, dim)


def draws(x, dim=-1):
    return right(x, dim) + 0 * torch.rand(())  # a draw from the global generator


# A function whose text demands its input untouched (0.1's lets x change in place).
doubled = check(
    Spec(
        exercise="Exercise T",
        title="double",
        name="double",
        params=("x",),
        reference=lambda x: 2 * x,
        cases=lambda: [Case("a (2, 3) tensor", {"x": torch.arange(6.0).reshape(2, 3)})],
        device=False,
    )
)


def in_place(x):
    return x.mul_(2).clone()  # the right values, the caller's tensor overwritten


@contextlib.contextmanager
def rebound(module: object, name: str, value: object) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


@contextlib.contextmanager
def faked_fingerprint() -> Iterator[None]:
    with rebound(sealed, "fingerprint", lambda: sealed.TRUSTED):
        sealed.BOUND["is_grad_enabled"] = lambda: True
        try:
            yield
        finally:
            sealed.BOUND["is_grad_enabled"] = sealed._ORIGINAL["is_grad_enabled"]


CLEAN = {"grad mode": True, "inference mode": False, "default dtype": torch.float32}
FORGERIES: dict[str, tuple[Callable, Callable, Callable, str]] = {
    # name: (check, answer, forgery while probed, the property the honest row names)
    "sealed.global_state": (
        nb00.softmax, grad_left_off, lambda: rebound(sealed, "global_state", lambda: CLEAN),
        "global state unchanged",
    ),
    "sealed.same_rng": (
        nb00.softmax, draws, lambda: rebound(sealed, "same_rng", lambda a, b: True),
        "global state unchanged",
    ),
    "sealed.plain_tensor": (
        doubled, in_place, lambda: rebound(sealed, "plain_tensor", lambda v: v),
        "inputs untouched",
    ),
    "sealed.fingerprint": (nb00.softmax, grad_left_off, faked_fingerprint, "global state"),
}  # fmt: skip


@pytest.fixture(autouse=True)
def _grad_back_on():
    yield
    torch.set_grad_enabled(True)


def _probed(check: Callable, answer: Callable, forgery: Callable | None = None) -> bytes:
    with forgery() if forgery else contextlib.nullcontext():
        _, record = framework.probe(check, answer, seed=3, effects=observe.REPORTED)
    torch.set_grad_enabled(True)  # what the answer left: the grader's process is another
    return record


def _graded(check: Callable, record: bytes) -> framework.CheckResult:
    return framework.replay(check, record, seed=3, effects=observe.REPORTED)


def _cleared(record: bytes, clean: bytes) -> bytes:
    """``record`` with every side effect taken out, as any forgery in that process could: no
    global state changed, and the arguments after each call as ``clean``'s (an answer that
    leaves them alone) recorded them."""
    rows, untouched = observe.decode(record), observe.decode(clean)
    for row, other in zip(rows, untouched, strict=True):
        row.side_effects = []
        if isinstance(row.value, dict) and "after" in row.value:
            row.value["after"] = other.value["after"]
    return observe.encode(rows)


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_probe_gets_no_point_its_honest_control_does_not(name):
    check_, answer, forgery, said = FORGERIES[name]
    honest, forged = _probed(check_, answer), _probed(check_, answer, forgery)
    control, result = _graded(check_, honest), _graded(check_, forged)
    assert (control.status, result.status) == (framework.PASSED, framework.PASSED), (
        control.report(),
        result.report(),
    )
    assert any(said in note for note in control.notes), control.notes
    assert "not graded" in control.report()
    # Judged (as the notebook and the tests judge), the same side effect fails: it would have
    # decided the point, and the forged record passed where the honest one failed.
    _, record = framework.probe(check_, answer, seed=3)
    torch.set_grad_enabled(True)
    judged = framework.replay(check_, record, seed=3)
    assert judged.status == framework.FAILED and said in judged.message, judged.message


@pytest.mark.parametrize(
    "check_, answer, clean",
    [(nb00.softmax, grad_left_off, right), (doubled, in_place, lambda x: 2 * x)],
)
def test_a_record_with_its_side_effects_taken_out_is_graded_as_the_honest_one(
    check_, answer, clean
):
    honest = _probed(check_, answer)
    forged = _cleared(honest, _probed(check_, clean))
    control, result = _graded(check_, honest), _graded(check_, forged)
    assert control.status == result.status == framework.PASSED
    assert control.notes and not result.notes


def test_an_answer_without_side_effects_passes_without_a_note():
    for check_, answer in ((nb00.softmax, right), (doubled, lambda x: 2 * x)):
        result = _graded(check_, _probed(check_, answer))
        assert (result.status, result.notes) == (framework.PASSED, ()), result.report()


def test_the_notebook_still_fails_a_side_effect():
    result = nb00.softmax(grad_left_off, raise_on_failure=False)
    assert result.status == framework.FAILED and "global state" in result.message
    result = doubled(in_place, raise_on_failure=False)
    assert result.status == framework.FAILED and "inputs untouched" in result.message


def test_a_checks_own_observation_of_an_input_changed_is_a_side_effect_too():
    """7.1 observes the caller's encoding after the calls (it is not plain data): a change seen
    there is one of the same family, said and not graded while grading, failed in the notebook."""
    from course.checks import nb07
    from tests.test_checks_nb07 import align_stores_labels_in_the_encoding as in_place_answer

    result = _graded(nb07.align_labels, _probed(nb07.align_labels, in_place_answer))
    assert result.status == framework.PASSED, result.report()
    assert any("inputs untouched" in note for note in result.notes), result.notes
    judged = nb07.align_labels(in_place_answer, raise_on_failure=False)
    assert judged.status == framework.FAILED and "inputs untouched" in judged.message
