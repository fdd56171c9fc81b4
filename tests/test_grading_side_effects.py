"""While grading, a claim the student's process reports decides no point (course.framework.observe.claim):
a side effect of its code, or an identity, mode or flag of its objects.

Each forgery below is one a hand-in can do in its own process (the hostile round's four: a
rebound ``course.framework.sealed.global_state``, ``same_rng``, ``plain_tensor``, or ``BOUND`` with a faked
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

from course.checks import nb00
from course.framework import check as framework
from course.framework import observe, sealed
from course.framework.spec import Case, Spec, check


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


# --- claims: identities, modes and flags read in the student's process ---------------------------
#
# The same rule for what a check reads of the student's objects that no value shows (the model in
# eval mode at each forward pass, grad mode there, the caller's layer kept, a weight frozen, merged
# in place, train() reaching every sub-module): the forged record below writes each claim as a
# right answer's record holds it, beside the honest violating answer's record. While grading the
# two get the same verdict, the honest one with a note; as the notebook judges, the honest one
# fails with its message; a right answer passes both ways without a note.

CLAIMS = {"forwards", "modes", "kept", "trainable", "caller", "copies", "returned", "dropout",
          "is base", "in place", "frozen leaf", "frozen"}  # fmt: skip


def _claims_of(record: bytes, right: bytes) -> bytes:
    """``record`` with every claim (a key of :data:`CLAIMS`, at any depth) as ``right``'s record
    holds it: the forgery of a process that writes "holds" wherever a flag or identity goes."""

    def forged(value: object, holds: object) -> object:
        if isinstance(value, dict) and isinstance(holds, dict):
            return {k: holds[k] if k in CLAIMS and k in holds else forged(v, holds.get(k))
                    for k, v in value.items()}  # fmt: skip
        if isinstance(value, list | tuple) and isinstance(holds, list | tuple):
            items = [forged(v, h) for v, h in zip(value, holds, strict=False)]
            return type(value)(items + list(value[len(items) :]))
        return value

    rows, theirs = observe.decode(record), observe.decode(right)
    assert [r.what for r in rows] == [r.what for r in theirs]  # the same observations
    for row, other in zip(rows, theirs, strict=True):
        row.value = forged(row.value, other.value)
    return observe.encode(rows)


def _claim_families() -> dict[str, tuple[Callable, tuple, tuple, str]]:
    """name: (check, the honest violating answer, a right answer, a phrase of its message);
    an answer is the tuple of what the check cell passes."""
    from course.checks import nb01, nb06, nb10
    from tests import test_checks_nb01 as t01
    from tests import test_checks_nb06 as t06
    from tests import test_checks_nb10 as t10

    class TrainStopsAtTheTop(t01.GoodEmbedding):
        def train(self, mode: bool = True):  # its sub-module kept in eval mode by hand
            super().train(mode)
            self.embedding.training = False
            return self

    right06, right10 = (t06.evaluate_factory(),), (t10.add_lora,)
    return {
        "6.3 gradients recorded at each forward": (nb06.evaluate_accuracy,
            (t06.evaluate_factory(no_grad=False),), right06, "no gradient recorded"),
        "6.3 the model put back in training mode": (nb06.evaluate_accuracy,
            (t06.evaluate_factory(restore_train_mode=True),), right06, "training mode"),
        "10.1 a copy of the caller's layer kept": (nb10.lora_linear, (t10.DeepCopiedBase,),
            (t10.LoRALinear,), "self.base is not the nn.Linear passed in"),
        "10.1 the base weight left trainable": (nb10.lora_linear, (t10.BaseTrainable,),
            (t10.LoRALinear,), "still trainable"),
        "10.2 a copy of each layer wrapped": (nb10.add_lora, (t10.deep_copies,), right10,
            "does not hold the model's own nn.Linear"),
        "10.2 embeddings left trainable": (nb10.add_lora, (t10.nothing_frozen,), right10,
            "still train"),
        "10.2 the model not returned": (nb10.add_lora, (t10.returns_nothing,), right10,
            "did not return"),
        "10.3 merged into a new parameter": (nb10.merge, (t10.merge_new_parameter, t10.unmerge),
            (t10.merge, t10.unmerge), "base.weight is a new tensor"),
        "train() not reaching the sub-modules": (nb01.token_embedding, (TrainStopsAtTheTop,),
            (t01.GoodEmbedding,), "stayed in eval mode"),
    }  # fmt: skip


CLAIM_FAMILIES = (
    "6.3 gradients recorded at each forward",
    "6.3 the model put back in training mode",
    "10.1 a copy of the caller's layer kept",
    "10.1 the base weight left trainable",
    "10.2 a copy of each layer wrapped",
    "10.2 embeddings left trainable",
    "10.2 the model not returned",
    "10.3 merged into a new parameter",
    "train() not reaching the sub-modules",
)


def _probed_as(check: Callable, answer: tuple, effects: str) -> bytes:
    _, record = framework.probe(check, *answer, seed=3, effects=effects)
    return record


def _replayed_as(check: Callable, answer: tuple, record: bytes, effects: str):
    return framework.replay(check, record, seed=3, positional=len(answer), effects=effects)


@pytest.mark.parametrize("name", CLAIM_FAMILIES)
def test_a_claim_forged_gets_the_verdict_of_its_honest_control(name):
    check_, answer, right, said = _claim_families()[name]
    honest = _probed_as(check_, answer, observe.REPORTED)
    forged = _claims_of(honest, _probed_as(check_, right, observe.REPORTED))
    control = _replayed_as(check_, answer, honest, observe.REPORTED)
    result = _replayed_as(check_, answer, forged, observe.REPORTED)
    assert control.status == result.status == framework.PASSED, (control.report(), result.report())
    assert any(said in note for note in control.notes), control.notes
    assert "not graded" in control.report() and not result.notes, result.notes
    # As the notebook judges, the claim decides: the honest answer fails with its message.
    judged = _replayed_as(
        check_, answer, _probed_as(check_, answer, observe.JUDGED), observe.JUDGED
    )
    assert judged.status == framework.FAILED and said in judged.message, judged.report()


@pytest.mark.parametrize(
    "name", ["6.3 gradients recorded at each forward", "10.1 a copy of the caller's layer kept",
             "10.2 a copy of each layer wrapped", "10.3 merged into a new parameter",
             "train() not reaching the sub-modules"])  # fmt: skip
def test_a_right_answer_makes_no_claim_fail(name):
    check_, _, right, _ = _claim_families()[name]
    for effects in (observe.REPORTED, observe.JUDGED):
        result = _replayed_as(check_, right, _probed_as(check_, right, effects), effects)
        assert (result.status, result.notes) == (framework.PASSED, ()), result.report()
