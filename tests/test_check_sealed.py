"""Records the student's objects cannot bend (course/framework/sealed.py).

Each hostile answer below is checked as the notebook checks it, and probed and replayed with
side effects judged (the tests' replay); none passes, and each message names what it did. While
grading, a side effect the student's process reports is said and decides no point
(tests/test_grading_side_effects.py).
"""

from __future__ import annotations

import pytest
import torch

from course.checks import nb00
from course.framework import check as framework
from course.framework import sealed


def right(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


class _Restores(torch.Tensor):
    """Puts the input back when anything reads it (as the probe's copy would)."""

    victim: torch.Tensor | None = None
    saved: torch.Tensor | None = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if cls.victim is not None:
            with torch._C.DisableTorchFunction():
                cls.victim.copy_(cls.saved)
        return super().__torch_function__(func, types, args, kwargs or {})


def restores_its_input(x, dim=-1):
    _Restores.victim, _Restores.saved = x, x.clone()
    x -= x.amax(dim=dim, keepdim=True)  # changes the caller's tensor...
    return (x.exp() / x.exp().sum(dim=dim, keepdim=True)).as_subclass(_Restores)


class _Float32WhenCopied(torch.Tensor):
    def detach(self):  # a Python override: reads through the class would run it
        return torch.Tensor.detach(self).float()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        copying = getattr(func, "__name__", "") in ("to", "clone", "detach")
        if copying and out.dtype == torch.float64:
            return out.float().as_subclass(torch.Tensor)
        return out


def float32_inside(x, dim=-1):
    """Computes in float32 and returns a tensor that claims its copies are float64-correct."""
    result = right(x.float(), dim).to(x.dtype)
    return result.as_subclass(_Float32WhenCopied)


class _GradBack(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        torch.set_grad_enabled(True)  # undo the student's global switch when observed
        return super().__torch_function__(func, types, args, kwargs or {})


def grad_off_then_back(x, dim=-1):
    torch.set_grad_enabled(False)
    return right(x, dim).as_subclass(_GradBack)


def hides_its_draws(x, dim=-1):
    """Draws from the global generator and replaces the function a probe would read it with."""
    frozen = torch.random.get_rng_state()
    torch.random.get_rng_state = lambda: frozen
    torch.get_rng_state = lambda: frozen
    noise = torch.rand(()) * 0  # a draw
    return right(x, dim) + noise


def edits_the_binding(x, dim=-1):
    sealed.BOUND["is_grad_enabled"] = lambda: True
    torch.set_grad_enabled(False)
    return right(x, dim)


@pytest.fixture(autouse=True)
def _restore_torch():
    saved = (torch.random.get_rng_state, torch.get_rng_state, dict(sealed.BOUND))
    yield
    torch.random.get_rng_state, torch.get_rng_state = saved[0], saved[1]
    sealed.BOUND.clear()
    sealed.BOUND.update(saved[2])
    torch.set_grad_enabled(True)
    _Restores.victim = None


HOSTILE = {
    # 0.1's text lets x change in place, so what is left to catch is the subclass that would
    # hide it; test_a_subclass_is_read_without_running_its_code shows the read runs none of it.
    "restores its input when copied": (restores_its_input, "subclass of torch.Tensor"),
    "re-casts to float32 when copied": (float32_inside, "subclass of torch.Tensor"),
    "re-enables grad mode when copied": (grad_off_then_back, "global state"),
    "replaces torch.random.get_rng_state": (hides_its_draws, "random generator"),
    "edits the probe's bound functions": (edits_the_binding, "scores 0"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_answer_fails_in_the_notebook_and_in_the_judged_replay(name):
    answer, phrase = HOSTILE[name]
    local = nb00.softmax(answer, raise_on_failure=False)  # probe + trusted replay (conftest)
    assert local.status == framework.FAILED, local.report()
    assert phrase in local.message, local.message
    _, record = framework.probe(nb00.softmax, answer)
    replayed = framework.replay(nb00.softmax, record)
    assert replayed.status == framework.FAILED and phrase in replayed.message, replayed.message


def test_tampering_is_flagged_for_the_instructor():
    _, record = framework.probe(nb00.softmax, edits_the_binding)
    sealed.BOUND.clear()
    sealed.BOUND.update(sealed._ORIGINAL)  # the trusted process's own bindings
    replayed = framework.replay(nb00.softmax, record)
    assert replayed.status == framework.FAILED
    assert replayed.flags and "replaced" in replayed.message


def test_a_record_without_the_fingerprint_is_tampering():
    from course.framework import observe

    _, record = framework.probe(nb00.softmax, right)
    rows = observe.decode(record)
    for row in rows:
        row.ran = ""
    replayed = framework.replay(nb00.softmax, observe.encode(rows))
    assert replayed.status == framework.FAILED and replayed.flags


def test_the_right_answer_and_a_parameter_pass():
    assert nb00.softmax(right, raise_on_failure=False).passed

    def as_parameter(x, dim=-1):
        return torch.nn.Parameter(right(x, dim), requires_grad=False)

    assert nb00.softmax(as_parameter, raise_on_failure=False).passed


def test_a_subclass_is_read_without_running_its_code():
    calls = []

    class Spy(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    from course.framework.observe import Foreign, to_plain

    value = torch.arange(3.0).as_subclass(Spy)
    calls.clear()
    plain = to_plain(value)
    assert calls == []
    assert isinstance(plain, Foreign) and "subclass of torch.Tensor" in plain.type_name
    assert type(plain.value) is torch.Tensor and plain.value.tolist() == [0.0, 1.0, 2.0]
