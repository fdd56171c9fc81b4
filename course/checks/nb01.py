"""Checks for notebook 01, tokens: BPE from scratch and the token embedding.

References are independent of the student's code: pair counts are recounted by brute force
over the expanded corpus, merges are re-derived from such recounts, encodings are compared
with the Hugging Face ``tokenizers`` BPE model built from the same merges, and the embedding
with ``torch.nn.functional.embedding`` times sqrt(d_model) (Vaswani et al., 2017, 3.4).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from course.check import (
    CheckFailure,
    exercise_check,
    expect,
    expect_close,
    expect_equal,
    expect_shape,
)

END = "</w>"
Symbols = tuple[str, ...]
Pair = tuple[str, str]
WordFreqs = dict[Symbols, int]


def _spell(word: str) -> Symbols:
    return (*word[:-1], word[-1] + END)


def _freqs(text: str) -> WordFreqs:
    return dict(Counter(_spell(w) for w in text.split()))


# Small corpora chosen to expose specific mistakes: frequencies that matter, runs of one
# letter (overlapping pairs), many ties, and insertion orders that differ from sorted order.
CORPORA = {
    "the toy corpus": _freqs("low lower lowest newer newest new low low new"),
    "a corpus with runs of one letter": _freqs("aaa aaaa aa a aaaaa baaab aaa"),
    "a corpus where every pair is tied": _freqs("zy xw vu ts cd ab"),
    "a corpus where overlapping pairs decide": _freqs("bc aaaa bc"),
    "a corpus with frequent short words": _freqs(
        "the cat sat on the mat the end then there thence at at at cats"
    ),
}


def _brute_force_pairs(word_freqs: WordFreqs) -> Counter:
    """Pair counts by expanding the corpus word by word (no frequency arithmetic)."""
    counts: Counter = Counter()
    for symbols, freq in word_freqs.items():
        for _ in range(freq):
            for i in range(len(symbols) - 1):
                counts[(symbols[i], symbols[i + 1])] += 1
    return counts


def _merge(symbols: Symbols, pair: Pair) -> Symbols:
    """Left-to-right, non-overlapping merge, written as a scan over a mutable list."""
    out = list(symbols)
    i = 0
    while i < len(out) - 1:
        if out[i] == pair[0] and out[i + 1] == pair[1]:
            out[i : i + 2] = [pair[0] + pair[1]]
        i += 1
    return tuple(out)


def _best(counts: Counter) -> Pair:
    top = max(counts.values())
    return sorted(p for p, c in counts.items() if c == top)[0]


def _learn(word_freqs: WordFreqs, num_merges: int) -> list[Pair]:
    merges: list[Pair] = []
    for _ in range(num_merges):
        counts = _brute_force_pairs(word_freqs)
        if not counts:
            break
        pair = _best(counts)
        merges.append(pair)
        word_freqs = {_merge(s, pair): f for s, f in word_freqs.items()}
    return merges


def _copy(word_freqs: WordFreqs) -> WordFreqs:
    return dict(word_freqs)


# --- Exercise 1.1 -----------------------------------------------------------------------


@exercise_check(
    "Exercise 1.1",
    "count adjacent pairs",
    hint="Loop over word_freqs.items(); for each adjacent pair (symbols[i], symbols[i + 1]) "
    "add the word's frequency. Every position counts, overlapping ones too.",
)
def count_pairs(student: Callable[[WordFreqs], Counter]) -> None:
    """Compare with a brute-force recount on corpora with frequencies, runs and single letters."""
    for what, corpus in CORPORA.items():
        got = student(_copy(corpus))
        expect(
            isinstance(got, dict),
            f"count_pairs should return a Counter (or dict), got {type(got).__name__}.",
        )
        expected = _brute_force_pairs(corpus)
        got_nonzero = {p: c for p, c in got.items() if c}
        if got_nonzero != dict(expected):
            wrong = sorted(set(got_nonzero) | set(expected), key=str)
            diffs = [
                (p, got_nonzero.get(p, 0), expected.get(p, 0))
                for p in wrong
                if got_nonzero.get(p, 0) != expected.get(p, 0)
            ]
            pair, mine, ref = diffs[0]
            raise CheckFailure(
                f"on {what}, pair {pair} counted {mine} times, expected {ref} "
                f"({len(diffs)} pair(s) differ).",
                "Add the word's frequency (not 1) for every adjacent position; ('a', 'a', 'a') "
                "holds ('a', 'a') twice; a single-symbol word has no pair.",
            )
    expect_equal(
        dict(student({("x</w>",): 5})),
        {},
        "count_pairs of one single-symbol word",
        "A word of one symbol has no adjacent pair.",
    )
    expect(
        corpus_unchanged(student),
        "count_pairs modified its input table.",
        "Only read word_freqs; build a new Counter.",
    )


def corpus_unchanged(student: Callable[[WordFreqs], object]) -> bool:
    corpus = CORPORA["the toy corpus"]
    snapshot = dict(corpus)
    student(corpus)
    return corpus == snapshot


# --- Exercise 1.2 -----------------------------------------------------------------------

MERGE_CASES: list[tuple[Symbols, Pair, Symbols]] = [
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
    ((), ("a", "b"), ()),
]


@exercise_check(
    "Exercise 1.2",
    "merge one pair",
    hint="Scan with an index i; when (symbols[i], symbols[i + 1]) == pair append the fused "
    "symbol and skip 2 positions, otherwise append symbols[i] and move by 1; return a tuple.",
)
def merge_pair(student: Callable[[Symbols, Pair], Symbols]) -> None:
    """Compare with hand-worked cases, including overlapping runs and look-alike symbols."""
    for symbols, pair, expected in MERGE_CASES:
        what = f"merge_pair({symbols}, {pair})"
        got = student(symbols, pair)
        expect(
            isinstance(got, tuple),
            f"{what} returned a {type(got).__name__}, expected a tuple.",
            "Return tuple(merged): the result is used as a dictionary key.",
        )
        expect_equal(
            got,
            expected,
            what,
            "Merge left to right without reusing a symbol (('a','a','a') -> ('aa','a')), "
            "and compare whole symbols, not substrings of the joined text.",
        )


# --- Exercise 1.3 -----------------------------------------------------------------------


@exercise_check(
    "Exercise 1.3",
    "learn BPE merges",
    hint="Each step: pairs = count_pairs(word_freqs); stop if empty; best = min(pairs, "
    "key=lambda p: (-pairs[p], p)); record it; rewrite every word with merge_pair.",
)
def learn_bpe(student: Callable[..., list[Pair]]) -> None:
    """Replay the student's merges and verify each one against a brute-force recount."""
    for what, corpus in CORPORA.items():
        expected = _learn(corpus, 12)
        got = student(_copy(corpus), 12)
        expect(isinstance(got, list), f"learn_bpe should return a list, got {type(got).__name__}.")
        current = dict(corpus)
        for step, pair in enumerate(got):
            counts = _brute_force_pairs(current)
            expect(
                bool(counts),
                f"on {what}, merge {step + 1} ({pair!r}) was learned although no pair was "
                "left: every word is already a single symbol.",
                "Stop (break) as soon as count_pairs returns nothing.",
            )
            best = _best(counts)
            if tuple(pair) != best:
                top = max(counts.values())
                tied = sorted(p for p, c in counts.items() if c == top)
                reason = (
                    f"{len(tied)} pairs are tied at count {top} and the smallest in "
                    f"lexicographic order is {best}"
                    if len(tied) > 1 and tuple(pair) in tied
                    else f"its count is {counts.get(tuple(pair), 0)}, but {best} occurs {top} times"
                )
                raise CheckFailure(
                    f"on {what}, merge {step + 1} should be {best}, got {tuple(pair)}: {reason}.",
                    "Recount after every merge, weight pairs by word frequency, and break "
                    "ties with min(pairs, key=lambda p: (-pairs[p], p)).",
                )
            current = {_merge(s, best): f for s, f in current.items()}
        expect(
            len(got) == len(expected),
            f"on {what}, learn_bpe(..., 12) returned {len(got)} merges, expected "
            f"{len(expected)}"
            + (" (the corpus runs out of pairs earlier)." if len(expected) < 12 else "."),
            "Learn exactly num_merges merges, unless no pair is left.",
        )
    expect_equal(student(_copy(CORPORA["the toy corpus"]), 0), [], "learn_bpe(corpus, 0)")
    expect_equal(
        student({("a", "b</w>"): 3}, 5),
        [("a", "b</w>")],
        "learn_bpe on a corpus of one two-letter word, 5 merges asked",
        "After one merge no pair is left: stop and return what you have.",
    )


# --- Exercise 1.4 -----------------------------------------------------------------------


def _hf_encoder(merges: Sequence[Pair], alphabet: set[str]):
    """A Hugging Face BPE model with exactly these merges (our </w> convention)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab: dict[str, int] = {"[UNK]": 0}
    for symbol in sorted(alphabet):
        vocab.setdefault(symbol, len(vocab))
    for a, b in merges:
        for symbol in (a, b, a + b):
            vocab.setdefault(symbol, len(vocab))
    tokenizer = Tokenizer(
        models.BPE(vocab=vocab, merges=list(merges), unk_token="[UNK]", end_of_word_suffix=END)
    )
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return lambda word: tokenizer.encode(word).tokens


ENCODE_WORDS = [
    "low",
    "lowest",
    "slower",
    "newer",
    "renew",
    "wolf",
    "lol",
    "o",
    "ww",
    "lowlowlow",
    "nene",
    "abab",
    "abc",
    "cab",
    "aaaaaaa",
    "thence",
    "cats",
    "at",
]


@exercise_check(
    "Exercise 1.4",
    "encode a word with BPE",
    hint="symbols = word_to_symbols(word); for pair in merges: symbols = merge_pair(symbols, "
    "pair); return list(symbols). Apply the merges in the order they were learned.",
)
def bpe_encode(student: Callable[[str, list[Pair]], list[str]]) -> None:
    """Compare with Hugging Face's BPE model holding the same merges, and check round trips."""
    corpus = _freqs("low lower lowest newer newest new low low new abab abc aaaa the cat at")
    learned = _learn(corpus, 25)
    # Hand-made merge lists where a merge made late would shadow an earlier one: replaying
    # them out of order, or matching the longest known piece, gives a different split.
    handmade = [
        [("b", "c</w>"), ("a", "b")],
        [("a", "b"), ("ab", "ab"), ("b", "a"), ("a", "b</w>"), ("abab", "ab</w>")],
        [("a", "a"), ("aa", "a"), ("aa", "aa"), ("a", "a</w>")],
    ]
    for merges in [learned, *handmade, []]:
        alphabet = {c for w in ENCODE_WORDS for c in w} | {c + END for w in ENCODE_WORDS for c in w}
        reference = _hf_encoder(merges, alphabet)
        for word in ENCODE_WORDS:
            what = f"bpe_encode({word!r}, merges) with merges {merges[:4]}" + (
                "..." if len(merges) > 4 else ""
            )
            got = student(word, list(merges))
            expect(
                isinstance(got, list),
                f"{what} returned a {type(got).__name__}, expected a list of pieces "
                "(the docstring promises list[str]).",
                "End with `return list(symbols)`: merge_pair works on tuples, the encoder "
                "returns a list.",
            )
            expect_equal(
                got,
                reference(word),
                what,
                "Start from word_to_symbols(word) (the last character carries '</w>') "
                "and apply every merge, in the learned order, to the whole word.",
            )
    # A character no merge mentions (and the corpus never saw) stays a single symbol.
    expect_equal(
        list(student("zoé", learned)),
        ["z", "o", "é</w>"],
        "bpe_encode('zoé', merges) with characters never seen in training",
    )
    for word in ["lowest", "thence", "a"]:
        pieces = student(word, learned)
        expect_equal(
            "".join(pieces),
            word + END,
            f"the pieces of {word!r} joined together",
            "Encoding must only regroup the characters, never drop or add any.",
        )


# --- Exercise 1.5 -----------------------------------------------------------------------


def _the_embedding(module: nn.Module) -> nn.Embedding:
    tables = [m for m in module.modules() if isinstance(m, nn.Embedding)]
    expect(
        len(tables) == 1,
        f"TokenEmbedding should hold exactly one nn.Embedding, found {len(tables)}.",
        "self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)",
    )
    return tables[0]


@exercise_check(
    "Exercise 1.5",
    "TokenEmbedding",
    hint="self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx); "
    "re-initialise with nn.init.normal_(weight, std=d_model ** -0.5) then zero the padding "
    "row; forward returns self.embedding(ids) * math.sqrt(self.d_model).",
    seed=15,
)
def token_embedding(student_class: type[nn.Module]) -> None:
    """Compare with F.embedding(ids, weight) * sqrt(d_model); check init, padding and grads."""
    vocab, d_model, pad = 1000, 64, 3
    module = student_class(vocab, d_model, padding_idx=pad)
    table = _the_embedding(module)
    expect_equal(
        (table.num_embeddings, table.embedding_dim),
        (vocab, d_model),
        "the nn.Embedding's (num_embeddings, embedding_dim)",
    )
    expect_equal(
        table.padding_idx,
        pad,
        "the nn.Embedding's padding_idx",
        "Pass padding_idx=padding_idx to nn.Embedding so its row gets no gradient.",
    )
    expect(
        bool((table.weight[pad] == 0).all()),
        "the padding row of the table should be all zeros after __init__.",
        "nn.init.normal_ overwrites the whole table, the padding row included: zero that row "
        "again afterwards (under torch.no_grad()).",
    )
    rows = torch.cat([table.weight[:pad], table.weight[pad + 1 :]]).detach()
    std = rows.std().item()
    expect(
        abs(std - d_model**-0.5) < 0.1 * d_model**-0.5 and abs(rows.mean().item()) < 0.01,
        f"the table's entries have std {std:.3f}; expected N(0, 1/d_model), std "
        f"{d_model**-0.5:.3f}, so that the scaled vectors have variance 1.",
        "nn.init.normal_(self.embedding.weight, mean=0.0, std=d_model ** -0.5)",
    )

    g = torch.Generator().manual_seed(16)
    ids = torch.randint(0, vocab, (4, 9), generator=g)
    ids[0, -3:] = pad
    ids[2, 0] = pad
    out = module(ids)
    expect_shape(
        out,
        (4, 9, d_model),
        "TokenEmbedding(ids of shape (4, 9))",
        "Return one d_model vector per id: (batch, length, d_model).",
    )
    expected = F.embedding(ids, table.weight) * math.sqrt(d_model)
    expect_close(
        out,
        expected,
        "the output of TokenEmbedding",
        "Multiply the looked-up rows by math.sqrt(d_model): not d_model, not 1/sqrt.",
    )
    expect(bool((out[ids == pad] == 0).all()), "vectors of padding ids should be all zeros.")
    out.pow(2).sum().backward()
    grad = table.weight.grad
    expect(
        grad is not None and bool((grad[pad] == 0).all()),
        "the padding row received a gradient; it must stay zero during training.",
        "nn.Embedding(..., padding_idx=padding_idx) blocks that gradient for you.",
    )
    expect(bool((grad[ids[1, 0]] != 0).any()), "rows that were looked up got no gradient.")

    # No padding index, an odd size, a batch of one, float64.
    module = student_class(17, 9)
    table = _the_embedding(module)
    expect(
        table.padding_idx is None,
        f"with padding_idx=None the nn.Embedding has padding_idx={table.padding_idx}.",
        "Pass the padding_idx argument through; do not hard-code 0.",
    )
    expect(
        bool((table.weight.abs().sum(dim=1) > 0).all()),
        "with padding_idx=None no row of the table should be zero.",
    )
    ids = torch.tensor([[0, 16, 5, 0]])
    expect_close(
        module(ids),
        F.embedding(ids, table.weight) * 3.0,
        "TokenEmbedding(17, 9) on a batch of one (sqrt(9) = 3)",
    )
    module = module.double()
    expect_close(
        module(ids),
        F.embedding(ids, table.weight) * 3.0,
        "TokenEmbedding in float64",
        atol=1e-12,
        rtol=1e-10,
    )
