"""The checks of notebook 01: right variants pass, the stubs are "not implemented", and each
wrong implementation fails with the property it violates named in the message."""

from __future__ import annotations

import copy
import math
import random
import re
from collections import Counter
from itertools import pairwise

import pytest
import torch
from torch import nn

from course.checks import nb01 as check
from course.framework.check import FAILED, NOT_IMPLEMENTED, PASSED

END = "</w>"


def stub(*args, **kwargs):
    raise NotImplementedError


def _rejected(check_function, wrong, phrase):
    result = check_function(wrong, raise_on_failure=False)
    assert result.status == FAILED, f"{wrong} was accepted"
    assert phrase in result.message, result.message


# --- correct implementations (for the tests only) -----------------------------------------


def count_pairs(word_freqs):
    pairs = Counter()
    for symbols, freq in word_freqs.items():
        for pair in pairwise(symbols):
            pairs[pair] += freq
    return pairs


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


def learn_with_counts(word_freqs, num_merges):
    """The merges, each with its count and the number of pairs sharing that count."""
    steps = []
    for _ in range(num_merges):
        pairs = count_pairs(word_freqs)
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        steps.append((best, pairs[best], sum(c == pairs[best] for c in pairs.values())))
        word_freqs = {merge_pair(s, best): f for s, f in word_freqs.items()}
    return steps


def spell(word):
    return (*word[:-1], word[-1] + END)


def bpe_encode(word, merges):
    symbols = spell(word)
    for pair in merges:
        symbols = merge_pair(symbols, pair)
    return list(symbols)


# --- the trusted references agree with the correct code; no expected value is stored ------

# Hand-worked merges (symbols, pair) -> result: kept here, never in the check module.
MERGE_CASES = [
    (("l", "o", "w</w>"), ("l", "o"), ("lo", "w</w>")),
    (("l", "o", "w</w>"), ("o", "w</w>"), ("l", "ow</w>")),
    (("a", "a", "a"), ("a", "a"), ("aa", "a")),
    (("a", "a", "a", "a"), ("a", "a"), ("aa", "aa")),
    (("a", "a", "a", "a", "a</w>"), ("a", "a"), ("aa", "aa", "a</w>")),
    (("a", "b", "a", "b", "c"), ("a", "b"), ("ab", "ab", "c")),
    (("xa", "b", "c</w>"), ("a", "b"), ("xa", "b", "c</w>")),
    (("a", "bc", "d</w>"), ("ab", "c"), ("a", "bc", "d</w>")),
    (("ab", "c", "ab", "c</w>"), ("ab", "c"), ("abc", "ab", "c</w>")),
    (("n", "e", "w</w>"), ("x", "y"), ("n", "e", "w</w>")),
    (("q</w>",), ("q", "q"), ("q</w>",)),
]


@pytest.mark.parametrize("what", list(check.CORPORA))
def test_references_agree_with_the_correct_code(what):
    corpus = dict(Counter(spell(w) for w in check.CORPORA[what].split()))
    assert check._freqs(check.CORPORA[what]) == corpus
    assert check._count(corpus) == count_pairs(corpus)
    assert check._steps(corpus, 12) == learn_with_counts(corpus, 12)


def test_stored_encode_merges_are_learned_from_their_corpus():
    corpus = check._freqs("low lower lowest newer newest new low low new abab abc aaaa the cat at")
    assert [pair for pair, _, _ in learn_with_counts(corpus, 25)] == check.ENCODE_MERGES[0]


def test_merge_reference_agrees_with_hand_worked_cases():
    assert [(s, p) for s, p, _ in MERGE_CASES] == check.MERGE_INPUTS
    for symbols, pair, expected in MERGE_CASES:
        assert merge_pair(symbols, pair) == expected
        assert check._merge(symbols, pair) == expected


def test_no_reference_implementation_in_the_check_module():
    for name in ("_brute_force_pairs", "_paper_table", "BPE_CASES", "MERGE_CASES"):
        assert not hasattr(check, name)


@pytest.mark.parametrize(
    "name", ["count_pairs", "merge_pair", "learn_bpe", "bpe_encode", "token_embedding"]
)
def test_probe_computes_no_reference(name):
    """In the student's process (probe) no expected value is computed: a spy sees none."""
    import dataclasses

    from course.framework.check import probe
    from course.framework.spec import check as spec_check

    def spy(*args, **kwargs):
        raise AssertionError("a reference was computed in the student's process")

    right = {"count_pairs": count_pairs, "merge_pair": merge_pair, "learn_bpe": make_learner(),
             "bpe_encode": bpe_encode, "token_embedding": GoodEmbedding}[name]  # fmt: skip
    spied = spec_check(dataclasses.replace(getattr(check, name).spec, reference=spy))
    result, record = probe(spied, right)
    assert result.status == PASSED, result.message
    assert record


# --- Exercise 1.1: count_pairs ------------------------------------------------------------


def count_into_dict(word_freqs):
    pairs: dict = {}
    for symbols, freq in word_freqs.items():
        for pair in zip(symbols, symbols[1:], strict=False):
            pairs[pair] = pairs.get(pair, 0) + freq
    return pairs


def count_with_index_loop(word_freqs):
    pairs = Counter()
    for symbols, freq in word_freqs.items():
        for i in range(len(symbols) - 1):
            pairs[symbols[i], symbols[i + 1]] += freq
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
    return count_pairs({symbols + symbols[:1]: f for symbols, f in word_freqs.items()})


def count_characters_of_joined_text(word_freqs):
    pairs = Counter()
    for symbols, freq in word_freqs.items():
        for pair in pairwise("".join(symbols)):
            pairs[pair] += freq
    return pairs


def count_mutates_input(word_freqs):
    pairs = count_pairs(word_freqs)
    word_freqs.clear()
    return pairs


def count_returns_list(word_freqs):
    return list(count_pairs(word_freqs).items())


# the text never says the table is left untouched: clearing it after counting is not wrong
RIGHT_COUNT = [count_pairs, count_with_index_loop, count_mutates_input]
WRONG_COUNT = {
    # the text says "Return a Counter" and the next cell calls .most_common()
    "a plain dict": (count_into_dict, "the exercise text says a collections.Counter"),
    "unweighted": (count_unweighted, "counted"),
    "overlap counted once": (count_once_per_word, "counted"),
    "misses the last pair": (count_misses_last_pair, "the stated result"),
    "wraps around": (count_wraps_around, "the stated result"),
    "pairs of characters": (count_characters_of_joined_text, "the stated result"),
    "returns a list": (count_returns_list, "the stated return type"),
}


@pytest.mark.parametrize("right", RIGHT_COUNT, ids=lambda f: f.__name__)
def test_count_pairs_right_passes(right):
    result = check.count_pairs(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_count_pairs_stub_not_implemented():
    assert check.count_pairs(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", WRONG_COUNT)
def test_count_pairs_wrong_rejected(name):
    _rejected(check.count_pairs, *WRONG_COUNT[name])


# --- Exercise 1.2: merge_pair -------------------------------------------------------------


def merge_with_for_and_skip(symbols, pair):
    out, skip = [], False
    for i, symbol in enumerate(symbols):
        if skip:
            skip = False
        elif i + 1 < len(symbols) and (symbol, symbols[i + 1]) == pair:
            out.append(symbol + symbols[i + 1])
            skip = True
        else:
            out.append(symbol)
    return tuple(out)


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


WRONG_MERGE = {
    "reuses symbols": (merge_overlapping, "expected"),
    "right to left": (merge_right_to_left, "expected"),
    "string replace": (merge_by_string_replace, "expected"),
    "first occurrence only": (merge_first_only, "expected"),
    "returns a list": (lambda s, p: list(merge_pair(s, p)), "tuple"),
}


@pytest.mark.parametrize("right", [merge_pair, merge_with_for_and_skip], ids=lambda f: f.__name__)
def test_merge_pair_right_passes(right):
    result = check.merge_pair(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_merge_pair_stub_not_implemented():
    assert check.merge_pair(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", WRONG_MERGE)
def test_merge_pair_wrong_rejected(name):
    _rejected(check.merge_pair, *WRONG_MERGE[name])


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


def learn_sorted_ties(word_freqs, num_merges, progress=False):
    """Right: sorts all pairs by (-count, pair) and takes the first."""
    merges = []
    for _ in range(num_merges):
        pairs = count_pairs(word_freqs)
        if not pairs:
            break
        best = sorted(pairs.items(), key=lambda item: (-item[1], item[0]))[0][0]
        merges.append(best)
        word_freqs = {merge_pair(s, best): f for s, f in word_freqs.items()}
    return merges


def learn_in_place(word_freqs, num_merges, progress=False):
    """Rewrites the caller's table while learning: right merges, corpus destroyed."""
    merges = []
    for _ in range(num_merges):
        pairs = count_pairs(word_freqs)
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        rewritten = {merge_pair(s, best): f for s, f in word_freqs.items()}
        word_freqs.clear()
        word_freqs.update(rewritten)
    return merges


def learn_returns_lists(word_freqs, num_merges, progress=False):
    return [list(pair) for pair in make_learner()(word_freqs, num_merges)]


def random_tie_break(seed):
    def choose(pairs):
        rng = random.Random(f"{seed} {sorted(pairs.items())}")  # arbitrary, the same per call
        top = max(pairs.values())
        return rng.choice([p for p, c in pairs.items() if c == top])

    return choose


WRONG_LEARN = {
    "ties by dict order (max get)": (
        make_learner(choose=lambda pairs: max(pairs, key=pairs.get)),
        "tie rule",
    ),
    "ties by most_common": (
        make_learner(choose=lambda pairs: pairs.most_common(1)[0][0]),
        "tie rule",
    ),
    "ties by the largest pair": (
        make_learner(choose=lambda pairs: max(pairs, key=lambda p: (pairs[p], p))),
        "tie rule",
    ),
    **{
        f"random tie break, seed {s}": (make_learner(choose=random_tie_break(s)), "merge")
        for s in range(5)
    },
    "least frequent pair": (
        make_learner(choose=lambda pairs: min(pairs, key=lambda p: (pairs[p], p))),
        "should be",
    ),
    "unweighted counts": (make_learner(counter=count_unweighted), "should be"),
    "overlap counted once": (make_learner(counter=count_once_per_word), "should be"),
    "no recount after a merge": (make_learner(recount=False), "should be"),
    "overlapping merge": (make_learner(merge=merge_overlapping), "should be"),
    "no stop when no pair is left": (make_learner(stop_when_empty=False), "ValueError"),
    "rewrites the caller's table (inputs untouched)": (learn_in_place, "inputs untouched"),
}


@pytest.mark.parametrize(
    "right",
    [make_learner(), learn_sorted_ties, learn_returns_lists],
    ids=["min", "sorted", "lists"],
)
def test_learn_bpe_right_passes(right):
    result = check.learn_bpe(right, raise_on_failure=False)
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


@pytest.mark.parametrize("name", WRONG_LEARN)
def test_learn_bpe_wrong_rejected(name):
    _rejected(check.learn_bpe, *WRONG_LEARN[name])


def test_learn_bpe_in_place_passed_the_old_check():
    """The old check handed the learner a copy of the corpus, so this mistake was invisible."""
    corpus = check._freqs(check.CORPORA["the toy corpus"])
    kept = dict(corpus)
    learn_in_place(corpus, 3)
    assert corpus != kept


# --- Exercise 1.4: bpe_encode -------------------------------------------------------------


def encode_with_while_loop(word, merges):
    """Right: the same replay, written over a list with an index per merge."""
    symbols = list(word[:-1]) + [word[-1] + END]
    for a, b in merges:
        i = 0
        while i < len(symbols) - 1:
            if symbols[i] == a and symbols[i + 1] == b:
                symbols[i : i + 2] = [a + b]
            i += 1
    return symbols


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


def encode_without_end_marker(word, merges):
    symbols = tuple(word)
    for pair in merges:
        symbols = merge_pair(symbols, pair)
    return list(symbols)


def encode_consumes_merges(word, merges):
    """Pops the merges off the caller's list: the next word is encoded with none."""
    symbols = spell(word)
    while merges:
        symbols = merge_pair(symbols, merges.pop(0))
    return list(symbols)


WRONG_ENCODE = {
    "returns a tuple": (lambda w, m: tuple(bpe_encode(w, m)), "the stated return type"),
    "merges in reverse order": (lambda w, m: bpe_encode(w, list(reversed(m))), "expected"),
    "merges sorted": (lambda w, m: bpe_encode(w, sorted(m)), "expected"),
    "no end marker": (encode_without_end_marker, "expected"),
    "first occurrence only": (encode_first_occurrence_only, "expected"),
    "longest match": (encode_longest_match, "expected"),
    "overlapping merge": (
        lambda w, m: [s for s in _replay(w, m, merge_overlapping)],
        "expected",
    ),
    "consumes the caller's merges (inputs untouched)": (encode_consumes_merges, "inputs untouched"),
}


def _replay(word, merges, merge):
    symbols = spell(word)
    for pair in merges:
        symbols = merge(symbols, pair)
    return list(symbols)


@pytest.mark.parametrize("right", [bpe_encode, encode_with_while_loop], ids=lambda f: f.__name__)
def test_bpe_encode_right_passes(right):
    result = check.bpe_encode(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


def test_bpe_encode_stub_not_implemented():
    assert check.bpe_encode(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", WRONG_ENCODE)
def test_bpe_encode_wrong_rejected(name):
    _rejected(check.bpe_encode, *WRONG_ENCODE[name])


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


class FairseqStyle(nn.Module):
    """Right: fairseq's Embedding() helper, the scale kept as a float attribute."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.d_model = d_model
        self.embed_scale = math.sqrt(d_model)
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        nn.init.normal_(self.embedding.weight, mean=0, std=d_model**-0.5)
        if padding_idx is not None:
            nn.init.constant_(self.embedding.weight[padding_idx], 0)

    def forward(self, token_ids):
        return self.embed_scale * self.embedding(token_ids)


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


class PaddingZeroMeansNone(GoodEmbedding):
    """`padding_idx or None`: BERT's [PAD] id 0 is taken for "no padding"."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__(vocab_size, d_model, padding_idx or None)


class DefaultInit(GoodEmbedding):
    def init_table(self, padding_idx):
        pass  # nn.Embedding's N(0, 1): vectors sqrt(d_model) times too large after scaling


class PaddingRowOverwritten(GoodEmbedding):
    def init_table(self, padding_idx):
        with torch.no_grad():
            nn.init.normal_(self.embedding.weight, std=self.d_model**-0.5)


class PaddingGradientLeaks(GoodEmbedding):
    """Looks rows up with F.embedding without the padding index: the padding row learns."""

    def forward(self, ids):
        return nn.functional.embedding(ids, self.embedding.weight) * self.scale()


class OneHotLinear(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.d_model, self.vocab_size = d_model, vocab_size
        self.proj = nn.Linear(vocab_size, d_model, bias=False)

    def forward(self, ids):
        one_hot = nn.functional.one_hot(ids, self.vocab_size).to(self.proj.weight.dtype)
        return self.proj(one_hot) * math.sqrt(self.d_model)


class IdsMovedToCpu(GoodEmbedding):
    """Moves the ids to the CPU first: fails wherever the table lives on another device."""

    def forward(self, ids):
        return self.embedding(ids.cpu()) * self.scale()


class AlwaysFloat32(GoodEmbedding):
    def forward(self, ids):
        return self.embedding(ids).float() * self.scale()


class StubInit(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        raise NotImplementedError


class StubForward(GoodEmbedding):
    def forward(self, ids):
        raise NotImplementedError


WRONG_EMBEDDING = {
    "no scaling": (NoScaling, "differs"),
    "scaled by d_model": (ScaleByDModel, "differs"),
    "divided by sqrt(d_model)": (DivideBySqrt, "differs"),
    "scaled by sqrt(vocab)": (ScaleByVocab, "differs"),
    "padding ignored": (PaddingIgnored, "constructor arguments honoured"),
    "padding hard-coded to 0": (PaddingHardcodedZero, "constructor arguments honoured"),
    "padding_idx or None (constructor arguments)": (
        PaddingZeroMeansNone,
        "0 is a valid padding_idx",
    ),
    "default N(0, 1) init": (DefaultInit, "std"),
    "padding row overwritten by the init": (PaddingRowOverwritten, "padding row"),
    "padding row gets a gradient (gradients)": (PaddingGradientLeaks, "no gradient where"),
    "one-hot times a linear layer": (OneHotLinear, "`embedding.weight`"),
    "ids moved to the CPU (device)": (IdsMovedToCpu, "device"),
    "always float32": (AlwaysFloat32, "dtype"),
}


@pytest.mark.parametrize("right", [GoodEmbedding, FairseqStyle], ids=lambda c: c.__name__)
def test_token_embedding_right_passes(right):
    result = check.token_embedding(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("stub_class", [StubInit, StubForward], ids=lambda c: c.__name__)
def test_token_embedding_stub_not_implemented(stub_class):
    assert check.token_embedding(stub_class, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("name", WRONG_EMBEDDING)
def test_token_embedding_wrong_rejected(name):
    _rejected(check.token_embedding, *WRONG_EMBEDDING[name])


def test_padding_zero_means_none_passed_the_old_check():
    """The old check used padding_idx 3 and None only: `padding_idx or None` looked right."""
    module = PaddingZeroMeansNone(10, 4, padding_idx=3)
    assert module.embedding.padding_idx == 3
    assert PaddingZeroMeansNone(10, 4, padding_idx=0).embedding.padding_idx is None


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
    assert copy.deepcopy(module)(ids).shape == (2, 3, 6)


# --- wrong answers by family of mistake, and right public code -----------------------------
# Each wrong one breaks a sentence of its exercise's text; OLD_CHECK_PASSED names those the
# checks before the conversion (course/checks/nb01.py at 7c6c524) let through.


def count_numpy_counts(word_freqs):
    """Counts summed as NumPy integers (the frequencies gathered into an array first)."""
    import numpy as np

    freqs, pairs = np.array(list(word_freqs.values())), Counter()
    for symbols, freq in zip(word_freqs, freqs, strict=True):
        for pair in pairwise(symbols):
            pairs[pair] += freq
    return pairs


def merge_numpy_symbols(symbols, pair):
    """Right merge, symbols carried as NumPy strings (np.str_ is not str)."""
    import numpy as np

    return tuple(np.array(merge_pair(symbols, pair), dtype=str))


def encode_numpy_pieces(word, merges):
    import numpy as np

    return list(np.array(bpe_encode(word, merges)))


def learn_without_progress(word_freqs, num_merges):
    """The notebook calls learn_bpe(corpus, n, progress=True): no `progress` parameter."""
    return make_learner()(word_freqs, num_merges)


class LearnedScale(GoodEmbedding):
    """A trainable scale the text does not name (starts at sqrt(d_model): same output)."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__(vocab_size, d_model, padding_idx)
        self.gain = nn.Parameter(torch.tensor(math.sqrt(d_model)))

    def forward(self, ids):
        return self.embedding(ids) * self.gain


class InitSkipsRowZero(GoodEmbedding):
    """Re-initialises rows 1: only ("row 0 is padding"): row 0 keeps nn.Embedding's N(0, 1)."""

    def init_table(self, padding_idx):
        with torch.no_grad():
            nn.init.normal_(self.embedding.weight[1:], std=self.d_model**-0.5)
            if padding_idx is not None:
                self.embedding.weight[padding_idx].zero_()


class UniformInit(GoodEmbedding):
    """Uniform with the right std: the text says normal."""

    def init_table(self, padding_idx):
        with torch.no_grad():
            bound = math.sqrt(3 / self.d_model)
            nn.init.uniform_(self.embedding.weight, -bound, bound)
            if padding_idx is not None:
                self.embedding.weight[padding_idx].zero_()


class OneVectorForAllRows(GoodEmbedding):
    """One random vector broadcast to every row (the vocabulary axis forgotten)."""

    def init_table(self, padding_idx):
        with torch.no_grad():
            self.embedding.weight[:] = torch.randn(self.d_model) * self.d_model**-0.5
            if padding_idx is not None:
                self.embedding.weight[padding_idx].zero_()


class ScaleAsTensor(GoodEmbedding):
    """The scale as a 1-element tensor created on the CPU."""

    def forward(self, ids):
        return self.embedding(ids) * torch.tensor([math.sqrt(self.d_model)])


FAMILY_WRONG = [  # (family, check, wrong, words the message must hold)
    (1, "count_pairs", count_numpy_counts, "the stated return type"),
    (1, "merge_pair", merge_numpy_symbols, "the stated return type"),
    (1, "bpe_encode", encode_numpy_pieces, "the stated return type"),
    (2, "token_embedding", ScaleAsTensor, "property violated: device"),
    (3, "learn_bpe", learn_without_progress, "progress"),
    (4, "token_embedding", LearnedScale, "parameters the text names"),
    (4, "token_embedding", InitSkipsRowZero, "row by row"),
    (5, "token_embedding", UniformInit, "kurtosis"),
    (5, "token_embedding", OneVectorForAllRows, "the initial distribution"),
]
OLD_CHECK_PASSED = {learn_without_progress, LearnedScale, InitSkipsRowZero, UniformInit}


@pytest.mark.parametrize(
    "family, name, wrong, words", FAMILY_WRONG, ids=[w[2].__name__ for w in FAMILY_WRONG]
)
def test_family_wrong_rejected(family, name, wrong, words):
    _rejected(getattr(check, name), wrong, words)


def get_stats_sennrich(vocab):
    """Sennrich et al. (2016), Algorithm 1's get_stats, glued: words are tuples here."""
    import collections

    pairs = collections.defaultdict(int)
    for word, freq in vocab.items():
        symbols = list(word)
        for i in range(len(symbols) - 1):
            pairs[symbols[i], symbols[i + 1]] += freq
    return collections.Counter(pairs)  # the glue: 1.1's text says "Return a Counter"


def merge_sennrich(symbols, pair):
    """Sennrich et al. (2016), Algorithm 1's merge_vocab on one word, glued."""
    bigram = re.escape(" ".join(pair))
    p = re.compile(r"(?<!\S)" + bigram + r"(?!\S)")
    return tuple(p.sub("".join(pair), " ".join(symbols)).split())


def encode_minbpe(word, merges):
    """Karpathy's minbpe encode, glued (symbols for ids): merge the lowest-ranked pair first."""
    ranks = {pair: i for i, pair in enumerate(merges)}
    symbols = list(spell(word))
    while len(symbols) >= 2:
        pair = min(pairwise(symbols), key=lambda p: ranks.get(p, float("inf")))
        if pair not in ranks:
            break
        symbols = list(merge_pair(tuple(symbols), pair))
    return symbols


class AnnotatedEmbeddings(nn.Module):
    """The Annotated Transformer's Embeddings (lut * sqrt(d_model)), glued: the text's names and
    initialisation."""

    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx)
        self.d_model = d_model
        nn.init.normal_(self.embedding.weight, 0.0, d_model**-0.5)
        if padding_idx is not None:
            with torch.no_grad():
                self.embedding.weight[padding_idx].fill_(0)

    def forward(self, x):
        return self.embedding(x) * math.sqrt(self.d_model)


def merge_subword_nmt(symbols, pair):
    """subword-nmt's replace_pair on one word, glued: its split(' ') makes the empty word ('',),
    an input the text never promises."""
    pattern = re.compile(r"(?<!\S)" + re.escape(" ".join(pair)) + r"(?!\S)")
    return tuple(pattern.sub("".join(pair), " ".join(symbols)).split(" "))


def encode_in_order(word, merges):
    """One pass over the merges, each applied to the whole word with str.replace on a spaced
    spelling (another way of the text's algorithm)."""
    text = " " + " ".join(spell(word)) + " "
    for a, b in merges:
        while f" {a} {b} " in text:
            text = text.replace(f" {a} {b} ", f" {a}{b} ", 1)
    return text.split()


FAMILY_RIGHT = [("count_pairs", get_stats_sennrich), ("merge_pair", merge_sennrich),
                ("merge_pair", merge_subword_nmt), ("bpe_encode", encode_in_order),
                ("token_embedding", AnnotatedEmbeddings)]  # fmt: skip


def test_a_rank_based_encoding_is_named_where_the_text_s_order_differs():
    """minbpe (like tokenizers and tiktoken) merges the lowest-ranked pair over and over; the
    text applies each merge once, in order. ('ab', 'c</w>') then ('a', 'b'): in order 'abc' stays
    ['ab', 'c</w>'], by rank it becomes ['abc</w>']."""
    merges = [("ab", "c</w>"), ("a", "b")]
    assert bpe_encode("abc", merges) == ["ab", "c</w>"] != encode_minbpe("abc", merges)
    result = check.bpe_encode(encode_minbpe, raise_on_failure=False)
    assert result.status == FAILED
    assert result.mistake and "lowest-ranked pair" in result.message, result.message


@pytest.mark.parametrize("name, right", FAMILY_RIGHT, ids=[r[1].__name__ for r in FAMILY_RIGHT])
def test_family_right_passes(name, right):
    result = getattr(check, name)(right, raise_on_failure=False)
    assert result.status == PASSED, result.message
