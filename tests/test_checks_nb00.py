"""Notebook 00's softmax check accepts a correct softmax and rejects typical mistakes."""

from __future__ import annotations

import pytest
import torch

from course.checks import nb00


def reference_softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def stub(x, dim=-1):
    raise NotImplementedError


WRONG = {
    "naive-overflows": lambda x, dim=-1: x.exp() / x.exp().sum(dim=dim, keepdim=True),
    "ignores-dim": lambda x, dim=-1: reference_softmax(x, dim=-1),
    "subtracts-min": lambda x, dim=-1: (
        (x - x.amin(dim=dim, keepdim=True)).exp()
        / (x - x.amin(dim=dim, keepdim=True)).exp().sum(dim=dim, keepdim=True)
    ),
    "not-normalised": lambda x, dim=-1: (x - x.amax(dim=dim, keepdim=True)).exp(),
    "normalised-over-everything": lambda x, dim=-1: (x - x.max()).exp() / (x - x.max()).exp().sum(),
    "casts-to-float32": lambda x, dim=-1: reference_softmax(x.float(), dim),
    "max-without-keepdim": lambda x, dim=-1: (
        (x - x.amax(dim=dim)).exp() / (x - x.amax(dim=dim)).exp().sum(dim=dim, keepdim=True)
    ),
}


def test_reference_passes():
    assert nb00.softmax(reference_softmax, raise_on_failure=False).passed


def test_torch_softmax_passes():
    assert nb00.softmax(lambda x, dim=-1: torch.softmax(x, dim=dim), raise_on_failure=False).passed


def test_stub_is_not_implemented():
    assert nb00.softmax(stub, raise_on_failure=False).status == "not implemented"


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_softmax_is_rejected(name):
    result = nb00.softmax(WRONG[name], raise_on_failure=False)
    assert result.status == "failed", f"{name} was accepted"
