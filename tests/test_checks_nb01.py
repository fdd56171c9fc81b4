"""The checks of notebook 01 accept a correct solution and reject stubs and typical mistakes."""

from __future__ import annotations

import math
import random
from collections import Counter
from itertools import pairwise

import pytest
import torch
from torch import nn

from course.check import FAILED, NOT_IMPLEMENTED, PASSED
from course.checks import nb01 as check

END = "</w>"


def stub(*args, **kwargs):
    raise NotImplementedError


# --- Exercise 1.1: count_pairs ------------------------------------------------------------


def count_pairs(word_freqs):
    pairs = Counter()
    for symbols, freq in word_freqs.items():
        for pair in pairwise(symbols):
            pairs[pair] += freq
    return pairs


def count_unweighted(word_freqs):
    return Counter(p for symbols in word_freqs for p in pairwise(symbols))


def count_once_per_word(word_freqs):
    pairs = Counter()
    for symbols, freq in word_freqs.items():
        for pair in set(pairwise(symbols)):  # overlapping 'aa' in 'aaa' counted once
            pairs[pair] += freq
    return pairs


def count_misses_last_pair(word_freqs):
    pairs = Counter()
    for symbols, freq in word_freqs.items():
        for i in range(len(symbols) - 2):
            pairs[(symbols[i], symbols[i + 1])] += freq
    return pairs


def count_wraps_around(word_freqs):
    pairs = Counter()
    for symbols, freq in word_freqs.items():
        for pair in pairwise(symbols + symbols[:1]):
            pairs[pair] += freq
    return pairs


def count_characters_of_joined_text(word_freqs):
    pairs = Counter()
    for symbols, freq in word_freqs.items():
        text = "".join(symbols)
        for pair in pairwise(text):
            pairs[pair] += freq
    return pairs


def count_mutates_input(word_freqs):
    pairs = count_pairs(word_freqs)
    word_freqs.clear()
    return pairs


WRONG_COUNT = [
    count_unweighted,
    count_once_per_word,
    count_misses_last_pair,
    count_wraps_around,
    count_characters_of_joined_text,
    count_mutates_input,
]


def test_count_pairs_correct_passes():
    result = check.count_pairs(count_pairs, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_count_pairs_plain_dict_passes():
    def count_into_dict(word_freqs):
        pairs: dict = {}
        for symbols, freq in word_freqs.items():
            for pair in pairwise(symbols):
                pairs[pair] = pairs.get(pair, 0) + freq
        return pairs

    assert check.count_pairs(count_into_dict, raise_on_failure=False).status == PASSED


def test_count_pairs_stub_not_implemented():
    assert check.count_pairs(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("wrong", WRONG_COUNT, ids=lambda f: f.__name__)
def test_count_pairs_wrong_rejected(wrong):
    assert check.count_pairs(wrong, raise_on_failure=False).status == FAILED


# --- Exercise 1.2: merge_pair -------------------------------------------------------------


def merge_pair(symbols, pair):
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return tuple(merged)


def merge_overlapping(symbols, pair):
    """Fuses at every matching position, reusing symbols: ('a','a','a') -> ('aa','aa')."""
    out = []
    for i in range(len(symbols)):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
        elif i > 0 and (symbols[i - 1], symbols[i]) == pair:
            continue
        else:
            out.append(symbols[i])
    return tuple(out)


def merge_right_to_left(symbols, pair):
    return tuple(reversed(merge_pair(tuple(reversed(symbols)), (pair[1], pair[0]))))


def merge_right_to_left_fused_correctly(symbols, pair):
    merged, i = [], len(symbols) - 1
    while i >= 0:
        if i > 0 and (symbols[i - 1], symbols[i]) == pair:
            merged.append(symbols[i - 1] + symbols[i])
            i -= 2
        else:
            merged.append(symbols[i])
            i -= 1
    return tuple(reversed(merged))


def merge_by_string_replace(symbols, pair):
    """The classic shortcut: replace 'a b' in the space-joined text; matches inside symbols."""
    text = " ".join(symbols).replace(" ".join(pair), "".join(pair))
    return tuple(text.split()) if text else ()


def merge_first_only(symbols, pair):
    for i in range(len(symbols) - 1):
        if (symbols[i], symbols[i + 1]) == pair:
            return (*symbols[:i], symbols[i] + symbols[i + 1], *symbols[i + 2 :])
    return tuple(symbols)


def merge_returns_list(symbols, pair):
    return list(merge_pair(symbols, pair))


WRONG_MERGE = [
    merge_overlapping,
    merge_right_to_left,
    merge_right_to_left_fused_correctly,
    merge_by_string_replace,
    merge_first_only,
    merge_returns_list,
]


def test_merge_pair_correct_passes():
    result = check.merge_pair(merge_pair, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_merge_cases_agree_with_reference_merge():
    for symbols, pair, expected in check.MERGE_CASES:
        assert merge_pair(symbols, pair) == expected
        assert check._merge(symbols, pair) == expected


def test_merge_pair_stub_not_implemented():
    assert check.merge_pair(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("wrong", WRONG_MERGE, ids=lambda f: f.__name__)
def test_merge_pair_wrong_rejected(wrong):
    assert check.merge_pair(wrong, raise_on_failure=False).status == FAILED


# --- Exercise 1.3: learn_bpe --------------------------------------------------------------


def make_learner(
    choose=None, counter=count_pairs, merge=merge_pair, recount=True, stop_when_empty=True
):
    """A BPE learner; each argument swaps in one typical mistake."""
    choose = choose or (lambda pairs: min(pairs, key=lambda p: (-pairs[p], p)))

    def learn(word_freqs, num_merges, progress=False):
        merges = []
        pairs = counter(word_freqs)
        ranked = sorted(pairs, key=lambda p: (-pairs[p], p))
        for step in range(num_merges):
            if recount:
                pairs = counter(word_freqs)
                if not pairs and stop_when_empty:
                    break
                best = choose(pairs)
            else:  # counts once, then takes the top pairs in order
                if step >= len(ranked):
                    break
                best = ranked[step]
            merges.append(best)
            word_freqs = {merge(s, best): f for s, f in word_freqs.items()}
        return merges

    return learn


def random_tie_break(seed):
    rng = random.Random(seed)

    def choose(pairs):
        top = max(pairs.values())
        return rng.choice([p for p, c in pairs.items() if c == top])

    choose.__name__ = f"random_tie_break_seed_{seed}"
    return choose


WRONG_LEARN = {
    "ties_by_dict_order_max_get": make_learner(choose=lambda pairs: max(pairs, key=pairs.get)),
    "ties_by_most_common": make_learner(choose=lambda pairs: pairs.most_common(1)[0][0]),
    "ties_by_largest_pair": make_learner(
        choose=lambda pairs: max(pairs, key=lambda p: (pairs[p], p))
    ),
    **{f"random_tie_break_seed_{s}": make_learner(choose=random_tie_break(s)) for s in range(5)},
    "least_frequent_pair": make_learner(
        choose=lambda pairs: min(pairs, key=lambda p: (pairs[p], p))
    ),
    "unweighted_counts": make_learner(counter=count_unweighted),
    "overlap_counted_once": make_learner(counter=count_once_per_word),
    "no_recount_after_merge": make_learner(recount=False),
    "overlapping_merge": make_learner(merge=merge_overlapping),
    "no_stop_when_no_pairs": make_learner(stop_when_empty=False),
}


def test_learn_bpe_correct_passes():
    result = check.learn_bpe(make_learner(), raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_learn_bpe_stub_not_implemented():
    assert check.learn_bpe(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


def test_learn_bpe_stub_inside_loop_not_implemented():
    """The exercise's stub raises inside the merge loop, after setting up `merges`."""

    def loop_stub(word_freqs, num_merges, progress=False):
        merges = []
        for _ in range(num_merges):
            raise NotImplementedError
        return merges

    assert check.learn_bpe(loop_stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", list(WRONG_LEARN))
def test_learn_bpe_wrong_rejected(name):
    assert check.learn_bpe(WRONG_LEARN[name], raise_on_failure=False).status == FAILED


# --- Exercise 1.4: bpe_encode -------------------------------------------------------------


def spell(word):
    return (*word[:-1], word[-1] + END)


def bpe_encode(word, merges):
    symbols = spell(word)
    for pair in merges:
        symbols = merge_pair(symbols, pair)
    return list(symbols)


def encode_reverse_order(word, merges):
    return bpe_encode(word, list(reversed(merges)))


def encode_sorted_merges(word, merges):
    return bpe_encode(word, sorted(merges))


def encode_without_end_marker(word, merges):
    symbols = tuple(word)
    for pair in merges:
        symbols = merge_pair(symbols, pair)
    return list(symbols)


def encode_first_occurrence_only(word, merges):
    symbols = spell(word)
    for pair in merges:
        symbols = merge_first_only(symbols, pair)
    return list(symbols)


def encode_longest_match(word, merges):
    """WordPiece-style greedy longest match against the vocabulary the merges build."""
    vocab = {a + b for a, b in merges} | set(word) | {word[-1] + END}
    text, pieces = word + END, []
    while text:
        for end in range(len(text), 0, -1):
            if text[:end] in vocab or end == 1:
                pieces.append(text[:end])
                text = text[end:]
                break
    return pieces


def encode_overlapping_merge(word, merges):
    symbols = spell(word)
    for pair in merges:
        symbols = merge_overlapping(symbols, pair)
    return list(symbols)


def encode_returns_tuple(word, merges):
    return tuple(bpe_encode(word, merges))


WRONG_ENCODE = [
    encode_returns_tuple,
    encode_reverse_order,
    encode_sorted_merges,
    encode_without_end_marker,
    encode_first_occurrence_only,
    encode_longest_match,
    encode_overlapping_merge,
]


def test_bpe_encode_correct_passes():
    result = check.bpe_encode(bpe_encode, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_bpe_encode_stub_not_implemented():
    assert check.bpe_encode(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("wrong", WRONG_ENCODE, ids=lambda f: f.__name__)
def test_bpe_encode_wrong_rejected(wrong):
    assert check.bpe_encode(wrong, raise_on_failure=False).status == FAILED


def test_bpe_encode_tuple_is_named():
    result = check.bpe_encode(encode_returns_tuple, raise_on_failure=False)
    assert "returned a tuple, expected a list" in result.message


# --- Exercise 1.5: TokenEmbedding ---------------------------------------------------------


class GoodEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.init_table(padding_idx)

    def init_table(self, padding_idx):
        with torch.no_grad():
            nn.init.normal_(self.embedding.weight, std=self.d_model**-0.5)
            if padding_idx is not None:
                self.embedding.weight[padding_idx].zero_()

    def scale(self):
        return math.sqrt(self.d_model)

    def forward(self, ids):
        return self.embedding(ids) * self.scale()


class NoScaling(GoodEmbedding):
    def scale(self):
        return 1.0


class ScaleByDModel(GoodEmbedding):
    def scale(self):
        return self.d_model


class DivideBySqrt(GoodEmbedding):
    def scale(self):
        return 1 / math.sqrt(self.d_model)


class ScaleByVocab(GoodEmbedding):
    def scale(self):
        return math.sqrt(self.embedding.num_embeddings)


class PaddingIgnored(GoodEmbedding):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__(vocab_size, d_model, None)


class PaddingHardcodedZero(GoodEmbedding):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__(vocab_size, d_model, 0)


class DefaultInit(GoodEmbedding):
    def init_table(self, padding_idx):
        pass  # nn.Embedding's N(0, 1): vectors sqrt(d_model) times too large after scaling


class PaddingRowOverwritten(GoodEmbedding):
    def init_table(self, padding_idx):
        with torch.no_grad():
            nn.init.normal_(self.embedding.weight, std=self.d_model**-0.5)


class OneHotLinear(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.d_model, self.vocab_size = d_model, vocab_size
        self.proj = nn.Linear(vocab_size, d_model, bias=False)

    def forward(self, ids):
        one_hot = nn.functional.one_hot(ids, self.vocab_size).to(self.proj.weight.dtype)
        return self.proj(one_hot) * math.sqrt(self.d_model)


class StubInit(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        raise NotImplementedError


class StubForward(GoodEmbedding):
    def forward(self, ids):
        raise NotImplementedError


WRONG_EMBEDDING = [
    NoScaling,
    ScaleByDModel,
    DivideBySqrt,
    ScaleByVocab,
    PaddingIgnored,
    PaddingHardcodedZero,
    DefaultInit,
    PaddingRowOverwritten,
    OneHotLinear,
]


def test_token_embedding_correct_passes():
    result = check.token_embedding(GoodEmbedding, raise_on_failure=False)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("stub_class", [StubInit, StubForward], ids=lambda c: c.__name__)
def test_token_embedding_stub_not_implemented(stub_class):
    assert check.token_embedding(stub_class, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("wrong", WRONG_EMBEDDING, ids=lambda c: c.__name__)
def test_token_embedding_wrong_rejected(wrong):
    result = check.token_embedding(wrong, raise_on_failure=False)
    assert result.status == FAILED, f"{wrong.__name__} was not rejected"


def test_course_nn_token_embedding_passes():
    from course.nn import TokenEmbedding

    assert check.token_embedding(TokenEmbedding, raise_on_failure=False).passed


def test_course_nn_token_embedding_contract():
    """nb05 relies on this: (B, L) long ids -> (B, L, d_model), padding vectors zero."""
    from course.nn import TokenEmbedding

    module = TokenEmbedding(11, 6, padding_idx=0)
    ids = torch.tensor([[3, 4, 0], [1, 0, 0]])
    out = module(ids)
    assert out.shape == (2, 3, 6)
    assert (out[ids == 0] == 0).all()
