"""Notebook 00's softmax check: right variants pass, each family of wrong answers fails with
the property it violates named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course.checks import nb00


def reference_softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def stub(x, dim=-1):
    raise NotImplementedError


def _float64_inside(x, dim=-1):
    return reference_softmax(x.double(), dim).to(x.dtype)


def _logsumexp(x, dim=-1):
    return (x - torch.logsumexp(x, dim=dim, keepdim=True)).exp()


def _loop_over_rows(x, dim=-1):
    moved = x.movedim(dim, -1)
    rows = [reference_softmax(row, -1) for row in moved.reshape(-1, moved.shape[-1])]
    return torch.stack(rows).reshape(moved.shape).movedim(-1, dim)


def _in_place(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)


RIGHT = {
    "shift by the max": reference_softmax,
    "NumPy's exp and sum (0.1's text forbids only torch.softmax)": lambda x, dim=-1: (
        lambda e: torch.from_numpy(e / e.sum(axis=dim, keepdims=True))
    )(np.exp((x - x.amax(dim=dim, keepdim=True)).numpy())),
    "float64 inside": _float64_inside,
    "log-sum-exp": _logsumexp,
    "a loop over rows": _loop_over_rows,
    "shifts its input in place (0.1's text does not ask to leave it untouched)": _in_place,
    "max().values": lambda x, dim=-1: (lambda e: e / e.sum(dim, keepdim=True))(
        (x - x.max(dim=dim, keepdim=True).values).exp()
    ),
}


def _grad_off(x, dim=-1):
    torch.set_grad_enabled(False)
    return reference_softmax(x, dim)


def _default_dtype(x, dim=-1):
    torch.set_default_dtype(torch.float64)
    return reference_softmax(x, dim)


def _reseeds(x, dim=-1):
    torch.manual_seed(0)
    return reference_softmax(x, dim)


def _calls_torch_softmax(x, dim=-1):
    return torch.softmax(x, dim=dim)


def _method_softmax(x, dim=-1):
    return x.softmax(dim)


def _module_softmax(x, dim=-1):
    return torch.nn.Softmax(dim=dim)(x)


# (wrong implementation, a phrase the message must contain); the named wrong softmaxes are the
# spec's own mistakes (nb00.MISTAKES), which tests/test_check_mistakes.py runs.
WRONG = {
    "torch.softmax, which the text forbids": (_calls_torch_softmax, "`torch.softmax`"),
    "the method spelling of torch.softmax": (_method_softmax, "`x.softmax`"),
    "nn.Softmax": (_module_softmax, "`torch.nn.Softmax`"),
    "casts to float32": (lambda x, dim=-1: reference_softmax(x.float(), dim), "dtype"),
    "max without keepdim": (
        lambda x, dim=-1: (
            (x - x.amax(dim=dim)).exp() / (x - x.amax(dim=dim)).exp().sum(dim=dim, keepdim=True)
        ),
        "",
    ),
    "turns gradients off (global state)": (_grad_off, "global state"),
    "changes the default dtype (global state)": (_default_dtype, "default dtype"),
    "reseeds the global generator (global state)": (_reseeds, "random"),
}


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_right_softmax_passes(name):
    result = nb00.softmax(RIGHT[name], raise_on_failure=False)
    assert result.passed, (name, result.message)


def test_stub_is_not_implemented():
    assert nb00.softmax(stub, raise_on_failure=False).status == "not implemented"


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_softmax_is_rejected_naming_the_property(name):
    wrong, phrase = WRONG[name]
    try:
        result = nb00.softmax(wrong, raise_on_failure=False)
    finally:
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)
    assert result.status == "failed", f"{name} was accepted"
    assert phrase in result.message, result.message


def test_the_check_restores_global_state_a_wrong_answer_changed():
    nb00.softmax(_grad_off, raise_on_failure=False)
    assert torch.is_grad_enabled()
    nb00.softmax(_default_dtype, raise_on_failure=False)
    assert torch.get_default_dtype() == torch.float32
