"""Issue 39, families 1 and 2: inputs drawn from each argument's declared domain (its ends, its
default in the defaults form, other layouts and magnitudes: course/domains.py). Each wrong answer
below breaks a sentence of its exercise's text only on a drawn input (the hand-written tables let
them through before the domains existed); each right one is another legitimate style."""

from __future__ import annotations

import pytest
import torch

from course.checks import nb00, nb01, nb03, nb05
from course.nn import MultiHeadAttention, TokenEmbedding, greedy_decode


def _softmax_along_last(x):
    shifted = x - x.amax(dim=-1, keepdim=True)
    return shifted.exp() / shifted.exp().sum(dim=-1, keepdim=True)


def softmax_default_first_axis(x, dim=0):
    """Right for every axis it is given; the stub's default (-1) changed."""
    return _softmax_along_last(x.movedim(dim, -1)).movedim(-1, dim)


def softmax_positive_axes_only(x, dim=-1):
    """Negative axes other than -1 read as counted from the front."""
    axis = dim if dim >= -1 else -dim - 1
    return _softmax_along_last(x.movedim(axis, -1)).movedim(-1, axis)


@torch.no_grad()
def greedy_at_least_one_step(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    """A do-while loop: one token before the first test of max_new_tokens."""
    memory, memory_mask = model.encode(src_ids)
    device = src_ids.device
    out = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long, device=device)
    done = torch.zeros(src_ids.shape[0], dtype=torch.bool, device=device)
    while True:
        step = model.decode(out, memory, memory_mask)[:, -1].argmax(dim=-1)
        step = step.masked_fill(done, pad_id)
        out = torch.cat([out, step[:, None]], dim=1)
        done |= step == eos_id
        if done.all() or out.shape[1] > max_new_tokens:
            return out


# (check, wrong answer, a phrase its message must contain)
WRONG = {
    "0.1 default axis changed": (
        nb00.softmax,
        softmax_default_first_axis,
        "relying on its default dim=-1",
    ),
    "0.1 negative axes misread": (nb00.softmax, softmax_positive_axes_only, "dim=-2"),
    "5.8 one step when none is allowed": (
        nb05.greedy_decode,
        greedy_at_least_one_step,
        "max_new_tokens=0",
    ),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_mistake_on_a_drawn_input_fails_naming_that_input(name):
    check, answer, phrase = WRONG[name]
    result = check(answer, raise_on_failure=False)
    assert not result.passed and phrase in result.message, result.message


def softmax_by_logsumexp_any_layout(x, dim=-1):
    return (x - torch.logsumexp(x, dim=dim, keepdim=True)).exp()


def softmax_contiguous_copy_first(x, dim=-1):
    x = x.contiguous()
    flat = x.movedim(dim, -1).reshape(-1, x.shape[dim])
    return _softmax_along_last(flat).reshape(x.movedim(dim, -1).shape).movedim(-1, dim)


@torch.no_grad()
def greedy_for_loop(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    return greedy_decode(model, src_ids, max_new_tokens, bos_id, eos_id, pad_id)


RIGHT = {
    "0.1 log-sum-exp": (nb00.softmax, softmax_by_logsumexp_any_layout),
    "0.1 a contiguous copy, then reshape": (nb00.softmax, softmax_contiguous_copy_first),
    "5.8 the course's greedy_decode": (nb05.greedy_decode, greedy_for_loop),
}


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_right_answers_in_other_styles_pass_on_every_drawn_input(name):
    check, answer = RIGHT[name]
    assert check(answer, raise_on_failure=False).passed


# --- issue 39, family 5: code whose result depends on earlier calls gets a verdict ----------

_CALLS = [0]


def softmax_rounds_after_a_while(x, dim=-1):
    """A counter kept between calls: after eleven calls it starts rounding."""
    _CALLS[0] += 1
    out = (x - torch.logsumexp(x, dim=dim, keepdim=True)).exp()
    return out if _CALLS[0] < 12 else out.round(decimals=3)


_LAST: dict = {}


def softmax_reuses_the_last_shift(x, dim=-1):
    """Caches the stabilising shift of the last call and reuses it for the same shape."""
    key = (tuple(x.shape), dim, x.dtype)
    if _LAST.get("key") != key:
        _LAST.update(key=key, shift=x.amax(dim=dim, keepdim=True))
    shifted = x - _LAST["shift"]
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


STATEFUL = {
    "a counter between calls": softmax_rounds_after_a_while,
    "a cache keyed on the shape": softmax_reuses_the_last_shift,
}


@pytest.mark.parametrize("name", sorted(STATEFUL))
def test_code_that_depends_on_earlier_calls_gets_a_verdict_that_says_so(name):
    _CALLS[0] = 0
    _LAST.clear()
    result = nb00.softmax(STATEFUL[name], raise_on_failure=False)  # local, probe and replay
    assert not result.passed
    assert "different results on repeated calls with the same inputs" in result.message


class EmbeddingCountsCalls(TokenEmbedding):
    """A counter on the class, across every module built: after a while it stops scaling."""

    calls = 0

    def forward(self, token_ids):
        type(self).calls += 1
        out = self.embedding(token_ids)
        return out * self.d_model**0.5 if type(self).calls < 8 else out


class EmbeddingLazyScale(TokenEmbedding):
    """Right: state computed on the first call, from the constructor's arguments only."""

    def forward(self, token_ids):
        if not hasattr(self, "_scale"):
            self._scale = self.d_model**0.5
        return self.embedding(token_ids) * self._scale


class AttentionKeepsItsFirstMask(MultiHeadAttention):
    """Keeps the first mask of each shape on the module and reuses it for later masks."""

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            masks = self.__dict__.setdefault("_masks", {})
            mask = masks.setdefault(tuple(mask.shape), mask)
        return super().forward(query, key, value, mask)


STATEFUL_MODULES = {
    "a call counter on the embedding's class": (nb01.token_embedding, EmbeddingCountsCalls),
    "attention keeping its first mask of each shape": (
        nb03.multi_head_attention,
        AttentionKeepsItsFirstMask,
    ),
}


@pytest.mark.parametrize("name", sorted(STATEFUL_MODULES))
def test_a_module_whose_result_depends_on_earlier_calls_gets_a_verdict_that_says_so(name):
    check, cls = STATEFUL_MODULES[name]
    EmbeddingCountsCalls.calls = 0
    result = check(cls, raise_on_failure=False)  # local, probe and replay: no ReplayDisagrees
    assert not result.passed
    assert "different results on repeated calls with the same inputs" in result.message


@pytest.mark.parametrize("cls", [TokenEmbedding, EmbeddingLazyScale], ids=["course", "lazy"])
def test_a_module_that_keeps_input_free_state_passes(cls):
    assert nb01.token_embedding(cls, raise_on_failure=False).passed


# --- issue 39, family 3: the interface other code uses is part of the contract -------------


def count_pairs_as_a_dict(word_freqs):
    """The right counts in a plain dict: the notebook's next cell calls .most_common()."""
    counts: dict = {}
    for symbols, freq in word_freqs.items():
        for pair in zip(symbols, symbols[1:], strict=False):
            counts[pair] = counts.get(pair, 0) + freq
    return counts


def count_pairs_as_a_counter(word_freqs):
    from collections import Counter

    return Counter(count_pairs_as_a_dict(word_freqs))


def test_a_dict_where_the_text_says_a_counter_fails_naming_the_class():
    from course.checks import nb01

    result = nb01.count_pairs(count_pairs_as_a_dict, raise_on_failure=False)
    assert not result.passed
    assert "returned a dict, but the exercise text says a collections.Counter" in result.message
    assert nb01.count_pairs(count_pairs_as_a_counter, raise_on_failure=False).passed
