"""Checks for notebook 01, tokens: BPE from scratch and the token embedding.

The references hold no implementation of an exercise: pair counts and learned merges of small
corpora are stored expected values (counted by hand-checked code kept in the tests), encodings
come from the Hugging Face ``tokenizers`` BPE model holding the same merges, and the embedding
is ``torch.nn.functional.embedding`` times sqrt(d_model) (Vaswani et al., 2017, 3.4). Every
call of the student's code goes through :func:`course.properties.call` (inputs untouched,
global state unchanged) and the cases are tables.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course.check import CheckFailure, exercise_check, expect, expect_close, expect_shape
from course.observe import StudentError
from course.properties import call, construct, generator, gradients, observe

END = "</w>"
Symbols = tuple[str, ...]
Pair = tuple[str, str]
WordFreqs = dict[Symbols, int]


def _pair(text: str) -> Pair:
    """'lo w</w>' -> ('lo', 'w</w>'): pairs are written as data with a space between symbols."""
    first, second = text.split(" ")
    return first, second


def _freqs(text: str) -> WordFreqs:
    """The notebook's ``word_frequencies`` of one line: each word spelled, '</w>' on its end."""
    freqs: WordFreqs = {}
    for word in text.split():
        symbols = (*word[:-1], word[-1] + END)
        freqs[symbols] = freqs.get(symbols, 0) + 1
    return freqs


class BpeCase(NamedTuple):
    """A corpus, its pair counts and its first 12 merges, each as (pair, its count, how many
    pairs share that top count): stored values, re-derived in tests/test_checks_nb01.py."""

    what: str
    text: str
    counts: dict[str, int]
    merges: list[tuple[str, int, int]]


# Small corpora chosen to expose specific mistakes: frequencies that matter, runs of one
# letter (overlapping pairs), many ties, and insertion orders that differ from sorted order.
BPE_CASES = [
    BpeCase(
        "the toy corpus",
        "low lower lowest newer newest new low low new",
        {"e r</w>": 2, "e s": 2, "e w": 2, "e w</w>": 2, "l o": 5, "n e": 4, "o w": 2,
         "o w</w>": 3, "s t</w>": 2, "w e": 4},
        [("l o", 5, 1), ("n e", 4, 2), ("w e", 4, 1), ("lo w</w>", 3, 1), ("lo we", 2, 6),
         ("ne w</w>", 2, 3), ("ne we", 2, 2), ("s t</w>", 2, 1), ("lowe r</w>", 1, 4),
         ("lowe st</w>", 1, 3), ("newe r</w>", 1, 2), ("newe st</w>", 1, 1)],
    ),
    BpeCase(
        "a corpus with runs of one letter",
        "aaa aaaa aa a aaaaa baaab aaa",
        {"a a": 9, "a a</w>": 5, "a b</w>": 1, "b a": 1},
        [("a a", 9, 1), ("aa a</w>", 3, 1), ("a a</w>", 2, 2), ("a b</w>", 1, 5),
         ("aa aa</w>", 1, 4), ("aa aaa</w>", 1, 3), ("aa ab</w>", 1, 2), ("b aaab</w>", 1, 1)],
    ),
    BpeCase(
        "a corpus where every pair is tied",
        "zy xw vu ts cd ab",
        {"a b</w>": 1, "c d</w>": 1, "t s</w>": 1, "v u</w>": 1, "x w</w>": 1, "z y</w>": 1},
        [("a b</w>", 1, 6), ("c d</w>", 1, 5), ("t s</w>", 1, 4), ("v u</w>", 1, 3),
         ("x w</w>", 1, 2), ("z y</w>", 1, 1)],
    ),
    BpeCase(
        "a corpus where overlapping pairs decide",
        "bc aaaa bc",
        {"a a": 2, "a a</w>": 1, "b c</w>": 2},
        [("a a", 2, 2), ("b c</w>", 2, 1), ("a a</w>", 1, 2), ("aa aa</w>", 1, 1)],
    ),
    BpeCase(
        "a corpus with frequent short words",
        "the cat sat on the mat the end then there thence at at at cats",
        {"a t": 1, "a t</w>": 6, "c a": 2, "c e</w>": 1, "e n": 2, "e n</w>": 1, "e r": 1,
         "h e": 3, "h e</w>": 3, "m a": 1, "n c": 1, "n d</w>": 1, "o n</w>": 1, "r e</w>": 1,
         "s a": 1, "t h": 6, "t s</w>": 1},
        [("a t</w>", 6, 2), ("t h", 6, 1), ("th e", 3, 2), ("th e</w>", 3, 1), ("a t", 1, 15),
         ("at s</w>", 1, 14), ("c at</w>", 1, 13), ("c ats</w>", 1, 12), ("c e</w>", 1, 11),
         ("e n", 1, 10), ("en d</w>", 1, 9), ("m at</w>", 1, 8)],
    ),
]  # fmt: skip

FREQS = ("word_freqs",)


# --- Exercise 1.1 -----------------------------------------------------------------------


@exercise_check(
    "Exercise 1.1",
    "count adjacent pairs",
    hint="Every adjacent position of a word counts, overlapping ones too, and each counts as "
    "often as the word occurs (its value in the table).",
)
def count_pairs(student_count_pairs: Callable[[WordFreqs], Any]) -> None:
    """Compare with stored counts of corpora with frequencies, runs and single letters."""
    cases = [
        (c.what, _freqs(c.text), {_pair(p): n for p, n in c.counts.items()}) for c in BPE_CASES
    ]
    cases.append(("a corpus of one single-symbol word", {("x</w>",): 5}, {}))
    for what, corpus, expected in cases:
        got = call(f"count_pairs of {what}", student_count_pairs, corpus, names=FREQS)
        expect(
            isinstance(got, dict),
            f"count_pairs of {what} returned a {type(got).__name__}; the exercise asks for a "
            "Counter (a dict of pair -> count).",
        )
        nonzero = {p: c for p, c in got.items() if c}
        if nonzero == expected:
            continue
        diffs = [
            (p, nonzero.get(p, 0), expected.get(p, 0))
            for p in sorted(set(nonzero) | set(expected), key=str)
            if nonzero.get(p, 0) != expected.get(p, 0)
        ]
        pair, mine, ref = diffs[0]
        raise CheckFailure(
            f"on {what}, pair {pair} counted {mine} times, expected {ref} "
            f"({len(diffs)} pair(s) differ).",
            "A word that occurs f times adds f for every position where the pair occurs in it; "
            "('a', 'a', 'a') holds ('a', 'a') twice; a word of one symbol has no pair.",
        )


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
    hint="Scan left to right with an index and decide at each position whether the pair starts "
    "there; a symbol that was fused is not looked at again. Compare whole symbols.",
)
def merge_pair(student_merge_pair: Callable[[Symbols, Pair], Any]) -> None:
    """Compare with hand-worked cases, including overlapping runs and look-alike symbols."""
    for symbols, pair, expected in MERGE_CASES:
        what = f"merge_pair({symbols}, {pair})"
        got = call(what, student_merge_pair, symbols, pair, names=("symbols", "pair"))
        expect(
            isinstance(got, tuple),
            f"{what} returned a {type(got).__name__}; the exercise asks for a tuple (the "
            "result is used as a dictionary key).",
        )
        expect(
            got == expected,
            f"{what}: got {got!r}, expected {expected!r}.",
            "Merge left to right without reusing a symbol (('a','a','a') -> ('aa','a')), "
            "and compare whole symbols, not pieces of the joined text.",
        )


# --- Exercise 1.3 -----------------------------------------------------------------------


@exercise_check(
    "Exercise 1.3",
    "learn BPE merges",
    hint="Follow the exercise's two rules (tie-break, stopping) and count again after every "
    "merge, on the rewritten table.",
)
def learn_bpe(student_learn_bpe: Callable[..., Any]) -> None:
    """Compare the merges with the stored ones, step by step; the corpus must stay as it was."""
    cases = [
        (c.what, _freqs(c.text), 12, [(_pair(p), n, t) for p, n, t in c.merges]) for c in BPE_CASES
    ]
    cases += [
        ("the toy corpus, 0 merges asked", _freqs(BPE_CASES[0].text), 0, []),
        ("a corpus of one two-letter word, 5 merges asked", {("a", "b</w>"): 3}, 5,
         [(("a", "b</w>"), 3, 1)]),
    ]  # fmt: skip
    for what, corpus, num_merges, expected in cases:
        got = call(
            f"learn_bpe on {what}",
            student_learn_bpe,
            corpus,
            num_merges,
            names=("word_freqs", "num_merges"),
        )
        expect(
            isinstance(got, list),
            f"learn_bpe on {what} returned a {type(got).__name__}; the exercise asks for the "
            "list of merges.",
        )
        for step, pair in enumerate(got):
            pair = tuple(pair) if isinstance(pair, list | tuple) else pair
            expect(
                step < len(expected),
                f"on {what}, merge {step + 1} ({pair!r}) was learned although no pair was "
                "left: every word is already a single symbol.",
                "The exercise's stopping rule: stop as soon as no pair is left.",
            )
            best, count, tied = expected[step]
            if pair != best:
                reason = (
                    f"{tied} pairs share the top count {count}, and the exercise's tie rule "
                    f"picks {best}"
                    if tied > 1
                    else f"{best} is the only pair with the top count {count}"
                )
                raise CheckFailure(
                    f"on {what}, merge {step + 1} should be {best}, got {pair}: {reason}.",
                    "Count with each word's frequency, recount on the rewritten table after "
                    "every merge, and break ties as the exercise's rule says.",
                )
        expect(
            len(got) == len(expected),
            f"on {what}, learn_bpe returned {len(got)} merges, expected {len(expected)}"
            + (" (the corpus runs out of pairs earlier)." if len(expected) < num_merges else "."),
            "Learn exactly num_merges merges, unless no pair is left.",
        )


# --- Exercise 1.4 -----------------------------------------------------------------------


def _hf_encoder(merges: Sequence[Pair], alphabet: set[str]) -> Callable[[str], list[str]]:
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
    "low", "lowest", "slower", "newer", "renew", "wolf", "lol", "o", "ww", "lowlowlow", "nene",
    "abab", "abc", "cab", "aaaaaaa", "thence", "cats", "at",
]  # fmt: skip

# The merges learned from "low lower lowest newer newest new low low new abab abc aaaa the cat
# at" (23: the corpus runs out of pairs), then hand-made lists where a merge made late would
# shadow an earlier one: replaying them out of order, or matching the longest known piece,
# gives a different split.
ENCODE_MERGES = [
    [_pair(p) for p in (
        "l o", "n e", "w e", "lo w</w>", "a a", "a b", "a t</w>", "lo we", "ne w</w>", "ne we",
        "s t</w>", "a a</w>", "a b</w>", "aa aa</w>", "ab ab</w>", "ab c</w>", "c at</w>",
        "h e</w>", "lowe r</w>", "lowe st</w>", "newe r</w>", "newe st</w>", "t he</w>",
    )],
    [("b", "c</w>"), ("a", "b")],
    [("a", "b"), ("ab", "ab"), ("b", "a"), ("a", "b</w>"), ("abab", "ab</w>")],
    [("a", "a"), ("aa", "a"), ("aa", "aa"), ("a", "a</w>")],
    [],
]  # fmt: skip


@exercise_check(
    "Exercise 1.4",
    "encode a word with BPE",
    hint="Start from the word's characters, the last one marked with '</w>', and replay every "
    "merge in the order it was learned, each on the whole word.",
)
def bpe_encode(student_bpe_encode: Callable[[str, list[Pair]], Any]) -> None:
    """Compare with Hugging Face's BPE model holding the same merges, and check round trips."""
    alphabet = {c for w in ENCODE_WORDS for c in w} | {c + END for w in ENCODE_WORDS for c in w}
    names = ("word", "merges")
    for merges in ENCODE_MERGES:
        reference = _hf_encoder(merges, alphabet)
        shown = f"{merges[:4]}" + ("..." if len(merges) > 4 else "")
        for word in ENCODE_WORDS:
            what = f"bpe_encode({word!r}, merges) with merges {shown}"
            got = call(what, student_bpe_encode, word, list(merges), names=names)
            expect(
                isinstance(got, list),
                f"{what} returned a {type(got).__name__}; the exercise asks for the list of "
                "pieces.",
            )
            expected = reference(word)
            expect(
                got == expected,
                f"{what}: got {got!r}, expected {expected!r}.",
                "Start from the characters of the word (the last one carries '</w>') and apply "
                "every merge, in the learned order, to the whole word.",
            )
    learned = ENCODE_MERGES[0]
    for word, expected in [("zoé", ["z", "o", "é</w>"]), ("a", ["a</w>"])]:
        what = f"bpe_encode({word!r}, merges) with characters no merge mentions"
        got = call(what, student_bpe_encode, word, list(learned), names=names)
        expect(
            got == expected,
            f"{what}: got {got!r}, expected {expected!r}.",
            "Characters the corpus never contained stay single symbols.",
        )


# --- Exercise 1.5 -----------------------------------------------------------------------


class EmbeddingCase(NamedTuple):
    """Constructor arguments (non-default ones included) and the id batches to embed."""

    vocab_size: int
    d_model: int
    padding_idx: int | None
    shapes: tuple[tuple[int, int], ...]  # (batch, length) of the id batches
    statistics: bool = False  # large enough to test the initial distribution


EMBEDDING_CASES = [
    EmbeddingCase(1000, 64, 3, ((4, 9), (1, 1)), statistics=True),
    EmbeddingCase(50, 16, 0, ((3, 7),)),  # 0 is a padding index like any other
    EmbeddingCase(17, 9, None, ((1, 4), (2, 5))),
    EmbeddingCase(12, 4, 11, ((2, 6),)),  # the last row
]


def _table_of(module: nn.Module) -> dict[str, Any]:
    """What the exercise text names: ``self.embedding`` (an nn.Embedding) and ``self.d_model``."""
    table = getattr(module, "embedding", None)
    if not isinstance(table, nn.Embedding):
        raise CheckFailure(
            f"`self.embedding` is a {type(table).__name__}; the exercise asks for an "
            "nn.Embedding there.",
            "Keep the lookup table as an nn.Embedding in `self.embedding`.",
        )
    return {"padding_idx": table.padding_idx, "d_model": getattr(module, "d_model", None)}


def _meta_device(module: nn.Module, ids: torch.Tensor) -> str:
    """The output's device with a copy of the module and the ids on the meta device."""
    try:
        out = copy.deepcopy(module).to("meta")(ids.to("meta"))
    except NotImplementedError as error:  # meta tensors have no data: .cpu(), .item(), ...
        return f"an error ({str(error).splitlines()[0][:120]})"
    return out.device.type if isinstance(out, torch.Tensor) else type(out).__name__


def _ids(case: EmbeddingCase, shape: tuple[int, int], offset: int) -> torch.Tensor:
    ids = torch.randint(0, case.vocab_size, shape, generator=generator(offset))
    if case.padding_idx is not None:
        ids[0, -1] = case.padding_idx  # padding at the end of the first sequence
        ids[-1, 0] = case.padding_idx
    return ids


@exercise_check(
    "Exercise 1.5",
    "TokenEmbedding",
    hint="Reread the exercise text: the table's initial distribution, the padding row (zero, "
    "no gradient) and the factor sqrt(d_model) in forward.",
    seed=15,
)
def token_embedding(StudentTokenEmbedding: type[nn.Module]) -> None:  # noqa: N803 - a class
    """Against F.embedding(ids, weight) * sqrt(d_model): arguments, init, padding, gradients."""
    for number, case in enumerate(EMBEDDING_CASES):
        vocab, d_model, pad = case.vocab_size, case.d_model, case.padding_idx
        name = f"TokenEmbedding({vocab}, {d_model}, padding_idx={pad})"
        arguments = {} if pad is None else {"padding_idx": pad}
        module, state = construct(name, StudentTokenEmbedding, vocab, d_model, **arguments)
        found = observe(f"{name}.embedding", lambda module=module: _table_of(module))
        weight = state.get("embedding.weight")
        expect(
            isinstance(weight, torch.Tensor) and tuple(weight.shape) == (vocab, d_model),
            f"{name}: the table `embedding.weight` has shape "
            f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else None}, expected "
            f"({vocab}, {d_model}). The property violated: constructor arguments honoured.",
        )
        expect(
            found["d_model"] == d_model,
            f"{name}: self.d_model is {found['d_model']!r}, expected {d_model}.",
        )
        expect(
            found["padding_idx"] == pad,
            f"{name}: the nn.Embedding was built with padding_idx={found['padding_idx']}, "
            f"expected {pad}. The property violated: constructor arguments honoured"
            + (" (0 is a valid padding index)." if pad == 0 else "."),
            "Pass the constructor's padding_idx on to nn.Embedding unchanged.",
        )
        if pad is not None:
            expect(
                bool((weight[pad] == 0).all()),
                f"{name}: row {pad} (the padding row) of the table is not all zeros after "
                "__init__.",
                "Re-initialising the table overwrites every row, the padding row included.",
            )
        else:
            expect(
                bool((weight.abs().sum(dim=1) > 0).all()),
                f"{name}: a row of the table is all zeros although there is no padding index.",
            )
        if case.statistics:
            rows = torch.cat([weight[:pad], weight[pad + 1 :]]).double()
            std, mean = rows.std().item(), rows.mean().item()
            expect(
                abs(std - d_model**-0.5) < 0.1 * d_model**-0.5 and abs(mean) < 0.01,
                f"{name}: the table's entries have mean {mean:.3f} and std {std:.3f}; the "
                f"exercise asks for N(0, 1/d_model), std {d_model**-0.5:.3f}, so that the "
                "scaled vectors have variance 1.",
                "Re-initialise the whole table with the normal distribution the text gives.",
            )

        scale = math.sqrt(d_model)
        for index, shape in enumerate(case.shapes):
            ids = _ids(case, shape, 100 * number + index)
            what = f"{name} on ids of shape {shape}"
            out = call(what, module, ids, names=("token_ids",))
            expected = F.embedding(ids, weight) * scale
            expect_shape(out, expected.shape, what, "One d_model vector per id.")
            expect_close(
                out,
                expected,
                what,
                f"The looked-up rows times sqrt(d_model) = {scale:.4g}.",
            )

        # Gradients: the rows looked up get them, scaled; the padding row gets none.
        ids = _ids(case, case.shapes[0], 100 * number + 50)
        got = observe(
            f"the gradients of {name}",
            lambda module=module, ids=ids, seed=number: gradients(
                module, [ids], {"weight": module.embedding.weight}, seed=seed
            ),
        )
        table = weight.clone().requires_grad_(True)
        ref = gradients(
            lambda i, t=table, p=pad, s=scale: F.embedding(i, t, padding_idx=p) * s,
            [ids],
            {"weight": table},
            seed=number,
        )
        grad = got["parameters"]["weight"]
        expect(
            isinstance(grad, torch.Tensor),
            f"{name}: no gradient reached the table. The property violated: gradients.",
        )
        if pad is not None:
            expect(
                bool((grad[pad] == 0).all()),
                f"{name}: the padding row {pad} received a gradient; the exercise says it never "
                "does. The property violated: no gradient where the contract says none.",
                "nn.Embedding knows which row is padding only if it is told.",
            )
        expect_close(
            grad,
            ref["parameters"]["weight"],
            f"the gradient of the table of {name}",
            "Only the rows looked up get a gradient, times sqrt(d_model).",
        )

        if number == 2:  # the module follows .double() and .to(device)
            ids = _ids(case, case.shapes[0], 100 * number + 70)
            out64 = observe(
                f"{name}.double() on ids of shape {tuple(ids.shape)}",
                lambda module=module, ids=ids: copy.deepcopy(module).double()(ids),
            )
            expect_close(
                out64,
                F.embedding(ids, weight.double()) * scale,
                f"{name}.double(): the output",
                "Keep the table's dtype: avoid hard-coding float32 in forward.",
                atol=1e-12,
                rtol=1e-10,
            )
            try:
                device = observe(
                    f"{name} with the module and the ids on the meta device",
                    lambda module=module, ids=ids: _meta_device(module, ids),
                )
            except StudentError as error:
                device = f"an error ({error.message})"
            expect(
                device == "meta",
                f"{name} moved to another device gave {device}, not an output on that device. The "
                "property violated: device (the module must work where its table lives).",
            )
