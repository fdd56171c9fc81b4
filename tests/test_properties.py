"""The property helpers (course.framework.properties) and the plain-data codec (course.framework.observe).

Each helper is tried on a right and a wrong piece of code, inside a tiny check, so that the
test also runs it through the probe and the trusted replay (tests/conftest.py)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course.framework import observe as obs
from course.framework.check import FAILED, PASSED, REPLAY_EVERYWHERE, exercise_check, expect
from course.framework.properties import (
    call,
    construct,
    expect_result,
    generator,
    gradients,
    large_scores,
    modes,
    observe,
    refusal,
    same,
    seeded,
)
from course.framework.spec import Case, Property, Spec, check


@exercise_check("Exercise 9.1", "add one")
def add_one_check(student_add_one):
    x = torch.randn(3, 4, generator=generator())
    items = [1, 2, 3]
    got = call("add_one", student_add_one, x, items, names=("x", "items"))
    expect_result(got, x + 1, "add_one(x)")


def _mutates_tensor(x, items):
    x.add_(1)
    return x.clone()


def _mutates_list(x, items):
    items.append(4)
    return x + 1


@pytest.mark.parametrize(
    "student, status, phrase",
    [
        (lambda x, items: x + 1, PASSED, ""),
        (_mutates_tensor, FAILED, "`x` in place"),
        (_mutates_list, FAILED, "`items` in place"),
    ],
    ids=["right", "mutates a tensor", "mutates a list"],
)
def test_call_checks_inputs_untouched(student, status, phrase):
    result = add_one_check(student, raise_on_failure=False)
    assert result.status == status and phrase in result.message


class Tiny(nn.Module):
    def __init__(self, p: float = 0.0):
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        return self.dropout(self.linear(x))


@exercise_check("Exercise 9.2", "module properties")
def module_check(StudentTiny):
    module, state = construct("Tiny(p=0.5)", StudentTiny, p=0.5)
    expect(set(state) == {"linear.weight", "linear.bias"}, "state dict keys")
    flags = observe("modes after .train()", lambda: modes(module.train()))
    expect(all(flags.values()), "train() must reach every sub-module (training mode)")
    flags = observe("modes after .eval()", lambda: modes(module.eval()))
    expect(not any(flags.values()), "eval() must reach every sub-module")
    x = torch.randn(2, 4, generator=generator())
    with seeded():
        reference = nn.Linear(4, 3)
    reference.load_state_dict({k[len("linear.") :]: v for k, v in state.items()})
    got = observe(
        "gradients in eval mode",
        lambda: gradients(module, [x], dict(module.named_parameters())),
    )
    want = gradients(reference, [x], dict(reference.named_parameters()))
    expect_result(got["output"], want["output"], "output")
    expect_result(got["inputs"][0], want["inputs"][0], "gradient at the input")
    expect_result(
        got["parameters"]["linear.weight"], want["parameters"]["weight"], what="weight gradient"
    )


class DetachedTiny(Tiny):
    def forward(self, x):
        return self.dropout(self.linear(x.detach()))


class StuckInTrain(Tiny):
    def train(self, mode: bool = True):
        self.training = mode  # does not reach the sub-modules
        return self


@pytest.mark.parametrize(
    "cls, status, phrase",
    [
        (Tiny, PASSED, ""),
        (DetachedTiny, FAILED, "gradient at the input"),
        (StuckInTrain, FAILED, "every sub-module"),
    ],
    ids=["right", "detaches its input", "train() not reaching sub-modules"],
)
def test_module_properties(cls, status, phrase):
    result = module_check(cls, raise_on_failure=False)
    assert result.status == status, result.message
    assert phrase in result.message


def _split(x, heads):
    return x.view(*x.shape[:-1], heads, -1)


def _refuses(x, heads):
    if x.shape[-1] % heads:
        raise ValueError("not divisible")
    return _split(x, heads)


class DivisibilityError(ValueError):
    pass


def _refuses_with_subclass(x, heads):
    if x.shape[-1] % heads:
        raise DivisibilityError("not divisible")
    return _split(x, heads)


refuses_check = check(
    Spec(
        exercise="Exercise 9.4", title="refuses bad input", name="split", params=("x", "heads"),
        reference=_split, cases=lambda: [Case("x (2, 12), 3 heads", {"x": torch.ones(2, 12), "heads": 3})],
        properties=(Property("a ValueError", **refusal(
            ValueError, lambda split: split(torch.zeros(2, 10), 3), "split(10 features, 3 heads)",
            "10 features cannot be split into 3 equal heads.")),),
    )
)  # fmt: skip


@pytest.mark.parametrize(
    "student, status, phrase",
    [
        (_refuses, PASSED, ""),
        (_refuses_with_subclass, PASSED, ""),
        (lambda x, h: _split(x[..., : x.shape[-1] // h * h], h), FAILED, "was accepted"),
        (lambda x, heads: x.view(2, heads, x.shape[-1] // heads), FAILED, "raised RuntimeError"),
    ],
    ids=["ValueError", "a subclass", "accepts", "another error"],
)
def test_refusal(student, status, phrase):
    result = refuses_check(student, raise_on_failure=False)
    assert result.status == status and phrase in result.message, result.message


draw_check = check(
    Spec(
        exercise="Exercise 9.9",
        title="a seeded draw",
        name="draw",
        params=("n", "generator"),
        reference=lambda n, generator: None,  # a random result: only its reproducibility is judged
        cases=lambda: [Case("n=5", {"n": 5, "generator": torch.Generator().manual_seed(1)})],
        random="generator",
        device=False,
    )
)


def _own_seed(n, generator):
    own = torch.Generator()
    own.seed()  # a seed from the operating system; the given generator and global state unused
    return torch.rand(n, generator=own)


@pytest.mark.parametrize(
    "student, status",
    [(lambda n, generator: torch.rand(n, generator=generator), PASSED), (_own_seed, FAILED)],
    ids=["the given generator", "a generator of its own"],
)
def test_randomness_only_from_the_given_generator(student, status, monkeypatch):
    result = draw_check(student, raise_on_failure=False)  # probed and replayed (conftest)
    assert result.status == status, result.message
    monkeypatch.delenv(REPLAY_EVERYWHERE)  # the notebook's own run, where the property speaks
    result = draw_check(student, raise_on_failure=False)
    assert result.status == status, result.message
    if status == FAILED:
        assert "seeded alike gave different results" in result.message, result.message
        assert "randomness only from the given generator" in result.message, result.message


add_check = check(
    Spec(
        exercise="Exercise 9.8",
        title="add one",
        name="add_one",
        params=("x",),
        reference=lambda x: x + 1,
        cases=lambda: [Case(f"a (3,) tensor of {v}s", {"x": torch.full((3,), v)}) for v in (1, 2)],
        device=False,
    )
)
CALLS = []


def _counts_calls(x):
    CALLS.append(x)
    return x + len(CALLS) % 2  # right on every other call only: a result that depends on them


def test_a_result_that_depends_on_earlier_calls_is_named(monkeypatch):
    assert add_check(_counts_calls, raise_on_failure=False).status == FAILED  # probe and replay
    monkeypatch.delenv(REPLAY_EVERYWHERE)  # the notebook's own run, where the property speaks
    result = add_check(_counts_calls, raise_on_failure=False)
    assert result.status == FAILED, result.message
    assert "different results on repeated calls" in result.message, result.message
    assert "the second call, after other inputs, against the first" in result.message
    assert "is wrong at index" in result.message, result.message  # not a rounding error
    assert add_check(lambda x: x + 1, raise_on_failure=False).status == PASSED


def test_large_scores_overflow_a_naive_softmax():
    scores = large_scores(4, 8)
    assert scores.abs().max() > 100
    assert not torch.isfinite(scores.exp() / scores.exp().sum(-1, keepdim=True)).all()


def test_same_is_exact_and_nan_aware():
    nan = torch.tensor([1.0, math.nan])
    assert same(nan, nan.clone()) and not same(nan, torch.tensor([1.0, 2.0]))
    assert not same(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    assert same({"a": [1, (2, 3)]}, {"a": [1, (2, 3)]}) and not same([1], (1,))


PLAIN = [
    None,
    True,
    3,
    -2.5,
    math.inf,
    math.nan,
    "text",
    torch.arange(6).view(2, 3),
    torch.tensor([True, False]),
    torch.randn(2, dtype=torch.float64),
    [1, (2, "x")],
    {("a", "b"): 1, 3: [torch.ones(1)]},
    {1, 2, "three"},
]


@pytest.mark.parametrize(
    "value", PLAIN, ids=[type(v).__name__ + str(i) for i, v in enumerate(PLAIN)]
)
def test_plain_data_round_trips(value):
    record = [obs.Observation("v", "value", obs.to_plain(value))]
    back = obs.decode(obs.encode(record))[0].value
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(back)
    else:
        assert same(obs.to_plain(value), back)


@pytest.mark.parametrize(
    "value", [nn.Linear(2, 2), print, object()], ids=["module", "function", "object"]
)
def test_objects_are_not_plain_data(value):
    with pytest.raises(obs.NotPlainData):
        obs.to_plain(value)


HOSTILE = {
    "too short": b"\x01",
    "header longer than the data": (10**6).to_bytes(8, "little") + b"[]",
    "not a list": (2).to_bytes(8, "little") + b"{}",
    "unknown tag": obs.encode([]).replace(b"[]", b"[{") + b"",
    "unknown kind": (len(b'[{"kind": "pass"}]')).to_bytes(8, "little") + b'[{"kind": "pass"}]',
    "too large": b"\x00" * (obs.MAX_RECORD_BYTES + 1),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_records_are_refused(name):
    with pytest.raises(Exception):  # noqa: B017, PT011 - any refusal; replay turns it into an error row
        obs.decode(HOSTILE[name])
