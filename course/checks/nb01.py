"""Checks for notebook 01, tokens: the declared contracts of BPE from scratch and TokenEmbedding.

Expected values are computed on the trusted side, independently of the exercises' loops: pair
counts with ``Counter``; a merge with a regular expression (``re.sub`` scans left to right
without overlap); encodings by the text's own algorithm (each merge once, in
the order learned; the rank-based encoding of Hugging Face ``tokenizers`` is a named mistake); the embedding with ``F.embedding`` times sqrt(d_model) (Vaswani et al., 2017, 3.4).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from course.framework import properties as prop
from course.framework.domains import Texts
from course.framework.observe import type_name
from course.framework.properties import (
    CheckFailure,
    an,
    expect,
    fresh,
    generator,
    gradients,
    observe,
)
from course.framework.spec import (
    DEFAULTS,
    KEYWORD,
    POSITIONAL,
    Build,
    Case,
    Mistake,
    ModuleSpec,
    Property,
    Spec,
    cases,
    check,
)

END = "</w>"
Symbols = tuple[str, ...]
Pair = tuple[str, str]


def _freqs(text: str) -> dict[Symbols, int]:
    """The notebook's ``word_frequencies`` of one line: each word spelled, '</w>' on its end."""
    return dict(Counter((*w[:-1], w[-1] + END) for w in text.split()))


# Small corpora chosen to expose specific mistakes: frequencies that matter, runs of one
# letter (overlapping pairs), many ties, and insertion orders that differ from sorted order.
CORPORA = {
    "the toy corpus": "low lower lowest newer newest new low low new",
    "a corpus with runs of one letter": "aaa aaaa aa a aaaaa baaab aaa",
    "a corpus where every pair is tied": "zy xw vu ts cd ab",
    "a corpus where overlapping pairs decide": "bc aaaa bc",
    "a corpus with frequent short words": "the cat sat on the mat the end then there thence at at at cats",
}  # fmt: skip


# --- trusted references (called by the runner where judging() is true) ----------------------


def _count(word_freqs: dict[Symbols, int]) -> Counter:
    counts: Counter = Counter()
    for symbols, freq in word_freqs.items():
        for pair in zip(symbols, symbols[1:], strict=False):
            counts[pair] += freq
    return counts


def _merge(symbols: Symbols, pair: Pair) -> Symbols:
    if not symbols:
        return ()
    text = "\0" + "\0".join(symbols) + "\0"
    pattern = f"(?<=\0){re.escape(pair[0])}\0{re.escape(pair[1])}(?=\0)"
    return tuple(re.sub(pattern, lambda _: pair[0] + pair[1], text).split("\0")[1:-1])


def _steps(word_freqs: dict[Symbols, int], num_merges: int) -> list[tuple[Pair, int, int]]:
    """Each merge with its count and how many pairs share that count."""
    steps = []
    for _ in range(num_merges):
        counts = _count(word_freqs)
        if not counts:
            break
        top = max(counts.values())
        tied = sorted(p for p, c in counts.items() if c == top)
        steps.append((tied[0], top, len(tied)))
        word_freqs = {_merge(s, tied[0]): f for s, f in word_freqs.items()}
    return steps


def _why(case: Case, step: int) -> str:
    steps = _steps(case.inputs["word_freqs"], case.inputs["num_merges"])
    if step >= len(steps):
        return "no pair is left (every word is a single symbol) and the text says to stop"
    best, count, tied = steps[step]
    if tied > 1:
        return f"{tied} pairs share the top count {count}, and the exercise's tie rule picks {best}"
    return f"{best} is the only pair with the top count {count}"


def _encode(word: str, merges: list[Pair]) -> list[str]:
    """The text's algorithm: the word spelled, each merge applied once, in the order learned,
    to the whole word (``_merge``, the regular expression)."""
    symbols: Symbols = (*word[:-1], word[-1] + END) if word else ()
    for pair in merges:
        symbols = _merge(symbols, pair)
    return list(symbols)


def _by_rank(word: str, merges: list[Pair]) -> list[str]:
    """Hugging Face tokenizers', tiktoken's and minbpe's encoding: over and over, the pair of
    lowest rank present merges; a merge enabled by a later one applies after it."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0}
    for symbol in sorted(set(word) | {c + END for c in word}):
        vocab.setdefault(symbol, len(vocab))
    for a, b in merges:
        for symbol in (a, b, a + b):
            vocab.setdefault(symbol, len(vocab))
    model = models.BPE(vocab=vocab, merges=list(merges), unk_token="[UNK]", end_of_word_suffix=END)
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer.encode(word).tokens


# --- properties these checks alone use ----------------------------------------------------


def _a_tuple(case: Any, got: Any, expected: Any, seen: Any) -> None:
    """The result is exactly a tuple, as the text says: it is used as a dictionary key."""
    why = "the result is used as a dictionary key"
    expect(
        type(got) is tuple,
        f"merge_pair on {case.what} returned {an(type_name(got))}; the exercise text says a "
        f"tuple: {why}",
        f"Return a tuple: {why}.",
    )


def _same_counts(case: Any, got: Any, expected: dict, seen: Any) -> None:
    """A table of counts the text defines: name the first entry counted differently."""
    wrong = [k for k in sorted(expected, key=repr) if got.get(k) != expected[k]]
    if wrong:
        raise CheckFailure(
            f"count_pairs on {case.what}: {wrong[0]!r} counted {got[wrong[0]]!r} times, expected "
            f"{expected[wrong[0]]} ({len(wrong)} entries differ)",
            COUNT_HINT,
        )


def _same_steps(case: Any, got: Any, expected: list, seen: Any) -> None:
    """The merges the text defines step by step: the first that differs, and why the text says
    otherwise (:func:`_why`, computed on the trusted side only). A list stands for a tuple."""
    steps = [tuple(s) if isinstance(s, list) else s for s in got]
    for step, mine in enumerate(steps):
        if step >= len(expected) or mine != expected[step]:
            should = f"should be {expected[step]!r}" if step < len(expected) else "is extra"
            raise CheckFailure(
                f"learn_bpe on {case.what}: merge {step + 1} {should}, got {mine!r}: "
                f"{_why(case, step)}",
                LEARN_HINT,
            )


def _initial_table(case: Any, got: Any, expected: Any, table: Any) -> None:
    """The table after ``__init__`` drawn from N(0, 1/d_model), the padding row exactly zero,
    every other row drawn on its own. Structural where the text fixes the structure: where rows
    have 64 entries or more, every row's std within [std/2, 2 std] (for a 1000 x 64 table a false
    alarm has probability 2e-7), so an initialisation applied to part of the table fails however
    small the part. Pooled, on tables of 5,000 entries or more: mean, std, excess kurtosis (a
    uniform draw of the same std) and the correlation of neighbouring rows (one vector broadcast
    to every row), each within 6 standard errors (a false alarm about 2e-9 each by the normal
    approximation, which small tables do not meet)."""
    if not isinstance(table, torch.Tensor) or table.dim() != 2:
        return
    table, sigma, zero = table.double(), case.build["d_model"] ** -0.5, _pad_rows(case)
    made = f"TokenEmbedding({', '.join(map(repr, case.build.values()))})"
    hint = "Re-initialise the whole table with the normal distribution the text gives."
    for row in zero:
        expect(
            bool((table[row] == 0).all()),
            f"{made}: row {row} (the padding row) of the table is not all zeros after __init__",
            "Re-initialising the table overwrites every row, the padding row included.",
            "the padding row is zero",
        )
    keep = [r for r in range(table.size(0)) if r not in zero]
    rows = table[keep]
    spread = rows.std(dim=1) / sigma
    odd = ((spread < 0.5) | (spread > 2) if rows.size(1) >= 64 else spread == 0).nonzero()
    expect(
        len(odd) == 0,
        f"{made}: row {keep[int(odd[0])] if len(odd) else 0} of the table has std "
        f"{spread[int(odd[0]) if len(odd) else 0].item() * sigma:.3g}, expected {sigma:.3g} "
        "like every row",
        hint,
        "the initial distribution, row by row",
    )
    n, mean, pooled = rows.numel(), rows.mean().item(), rows.std().item()
    if n < 5_000:  # the normal approximations below hold for large tables only: a table
        return  # of 44 entries gave a right answer a false alarm in 1.4% of seeds
    kurtosis = ((rows / sigma) ** 4).mean().item() - 3  # E z^8 - (E z^4)^2 = 96
    unit = rows / rows.norm(dim=1, keepdim=True)
    neighbours = (unit[:-1] * unit[1:]).sum(dim=1).mean().item() if len(rows) > 1 else 0.0
    expect(
        abs(mean) <= 6 * sigma / n**0.5
        and abs(pooled / sigma - 1) <= 6 / (2 * n) ** 0.5
        and abs(kurtosis) <= 6 * (96 / n) ** 0.5
        and abs(neighbours) <= 6 / (rows.size(1) * max(len(rows) - 1, 1)) ** 0.5,
        f"{made}: the table's entries have mean {mean:.3g}, std {pooled:.3g}, excess "
        f"kurtosis {kurtosis:.2f} and neighbouring rows correlate {neighbours:.2f}; the "
        f"exercise asks for every entry drawn from N(0, {sigma:.3g}^2) on its own (mean "
        "0, kurtosis 0, no correlation)",
        hint,
        "the initial distribution",
    )


def _padding_gradient(student: Any, case: Any, call: Callable) -> Any:
    """The gradient of the table from a backward of the module's output on the case's ids."""

    def backward() -> Any:
        named = dict(student.named_parameters())
        grads = gradients(lambda ids: student(ids), [case.inputs["token_ids"]], named)
        return grads["parameters"].get("embedding.weight")

    return observe(f"{case.what}: the gradient of `embedding.weight`", backward)


def _no_padding_gradient(case: Any, got: Any, expected: Any, grad: Any) -> None:
    """The padding row, which the text says never learns, gets exactly zero gradient."""
    for row in _pad_rows(case) if isinstance(grad, torch.Tensor) else []:
        expect(
            bool((grad[row] == 0).all()),
            f"TokenEmbedding on {case.what}: row {row} of `embedding.weight` (the padding row) "
            "received a gradient; the exercise says it never does",
            "nn.Embedding knows which row is padding only if it is told.",
        )


# --- Exercises 1.1 to 1.4 --------------------------------------------------------------------

COUNT_HINT = (
    "A word that occurs f times adds f for every position where the pair occurs in it; "
    "('a', 'a', 'a') holds ('a', 'a') twice; a word of one symbol has no pair."
)
count_pairs = check(
    Spec(
        exercise="Exercise 1.1",
        title="count adjacent pairs",
        name="count_pairs",
        params=("word_freqs",),
        forms=(POSITIONAL,),
        reference=_count,
        hint=COUNT_HINT,
        mutable=("word_freqs",),  # the text never says the table is left untouched
        cases=lambda: cases(
            ("word_freqs",),
            [(what, _freqs(text)) for what, text in CORPORA.items()]
            + [("a corpus of one single-symbol word", {("x</w>",): 5})],
        ),
        properties=(Property("the counts the exercise text defines", _same_counts),),
    )
)

MERGE_INPUTS: list[tuple[Symbols, Pair]] = [
    (("l", "o", "w</w>"), ("l", "o")),
    (("l", "o", "w</w>"), ("o", "w</w>")),
    (("a", "a", "a"), ("a", "a")),
    (("a", "a", "a", "a"), ("a", "a")),
    (("a", "a", "a", "a", "a</w>"), ("a", "a")),
    (("a", "b", "a", "b", "c"), ("a", "b")),
    (("xa", "b", "c</w>"), ("a", "b")),
    (("a", "bc", "d</w>"), ("ab", "c")),
    (("ab", "c", "ab", "c</w>"), ("ab", "c")),
    (("n", "e", "w</w>"), ("x", "y")),
    (("q</w>",), ("q", "q")),
]  # fmt: skip  (no empty word: the text never promises one)
merge_pair = check(
    Spec(
        exercise="Exercise 1.2",
        title="merge one pair",
        name="merge_pair",
        params=("symbols", "pair"),
        forms=(POSITIONAL,),
        reference=_merge,
        hint="Scan left to right and decide at each position whether the pair starts there; a symbol "
        "that was fused is not looked at again. Compare whole symbols, not pieces of the text.",
        cases=lambda: cases(
            ("symbols", "pair"), [(f"symbols {s}, pair {p}", s, p) for s, p in MERGE_INPUTS]
        ),
        properties=(Property("the stated return type", _a_tuple),),
    )
)

LEARN_HINT = (
    "Count with each word's frequency, recount on the rewritten table after every merge, "
    "break ties and stop as the exercise's two rules say."
)
learn_bpe = check(Spec(
    exercise="Exercise 1.3", title="learn BPE merges", name="learn_bpe",
    params=("word_freqs", "num_merges", "progress"), defaults={"progress": False},
    forms=(POSITIONAL, KEYWORD, DEFAULTS), hint=LEARN_HINT,
    reference=lambda word_freqs, num_merges, progress=False: [
        s[0] for s in _steps(word_freqs, num_merges)],
    cases=lambda: cases(("word_freqs", "num_merges"), [
        (what, _freqs(text), 12) for what, text in CORPORA.items()
    ] + [
        ("the toy corpus, 0 merges asked", _freqs(CORPORA["the toy corpus"]), 0),
        ("a corpus of one two-letter word, 5 merges asked", {("a", "b</w>"): 3}, 5),
    ], given={"progress": False}),
    properties=(Property("the steps the text defines", _same_steps),),
))  # fmt: skip

ENCODE_WORDS = [
    "low", "lowest", "slower", "newer", "renew", "wolf", "lol", "o", "ww", "lowlowlow", "nene",
    "abab", "abc", "cab", "aaaaaaa", "thence", "cats", "at",
]  # fmt: skip
# Merges learned from "low lower lowest newer newest new low low new abab abc aaaa the cat at"
# (all 23 of them: the corpus runs out of pairs), then hand-made lists where a merge made late
# would shadow an earlier one: replaying them out of order, or matching the longest known
# piece, gives a different split. Inputs, not expected values.
ENCODE_MERGES = [
    [tuple(p.split(" ")) for p in (
        "l o", "n e", "w e", "lo w</w>", "a a", "a b", "a t</w>", "lo we", "ne w</w>", "ne we",
        "s t</w>", "a a</w>", "a b</w>", "aa aa</w>", "ab ab</w>", "ab c</w>", "c at</w>",
        "h e</w>", "lowe r</w>", "lowe st</w>", "newe r</w>", "newe st</w>", "t he</w>",
    )],
    [("b", "c</w>"), ("a", "b")],
    [("a", "b"), ("ab", "ab"), ("b", "a"), ("a", "b</w>"), ("abab", "ab</w>")],
    [("a", "a"), ("aa", "a"), ("aa", "aa"), ("a", "a</w>")],
    # a merge that only a later one makes possible: in order it never applies, by rank it does
    [("ab", "c</w>"), ("l", "ow</w>"), ("a", "b"), ("o", "w</w>"), ("n", "e"), ("ne", "w</w>")],
    [],
]  # fmt: skip


def _encode_cases() -> list[Case]:
    rows = [  # what, word, merges, [hint]
        (f"{word!r} with merges {m[:3]}{'...' if len(m) > 3 else ''}", word, list(m))
        for m in ENCODE_MERGES
        for word in ENCODE_WORDS
    ]
    unseen = "Characters the corpus never contained stay single symbols."
    rows += [
        (f"{word!r}, characters no merge mentions", word, list(ENCODE_MERGES[0]), unseen)
        for word in ("zoé", "a")
    ]
    return cases(("word", "merges"), rows)


ACCENTS = (
    "The text spells a word with word_to_symbols, one symbol per character: a decomposed accented "
    "letter is two characters, and a character the merges never mention stays a symbol of its own."
)
bpe_encode = check(
    Spec(
        exercise="Exercise 1.4",
        title="encode a word with BPE",
        name="bpe_encode",
        params=("word", "merges"),
        forms=(POSITIONAL,),
        reference=_encode,
        cases=_encode_cases,
        hint="Start from the word's characters, the last one marked with '</w>', and replay every "
        "merge in the order it was learned, each on the whole word.",
        domains={"word": Texts(base=lambda i: not i["word"].isascii(), hint=ACCENTS)},
        mistakes=(
            Mistake(
                "merging the lowest-ranked pair present first, over and over (as tokenizers and tiktoken "
                "do)",
                "the merges applied in the order they were learned, each once, to the whole word",
                _by_rank,
                "A merge that only a later merge makes possible never applies: one pass over "
                "the list, in order.",
            ),
        ),
    )
)


# --- Exercise 1.5: TokenEmbedding ------------------------------------------------------------


@dataclass(frozen=True)
class Made(Case):
    """A forward case that also knows its module's constructor arguments (``build``), for the
    properties of what ``__init__`` leaves."""

    build: dict[str, Any] = field(default_factory=dict)


# (vocab_size, d_model, padding_idx, id batch shapes): 0 is a padding index like any other,
# None means none, the last row can be one; 1000 x 64 is large enough for the distribution.
EMBEDDINGS = [(1000, 64, 3, ((4, 9), (1, 1))), (50, 16, 0, ((3, 7),)),
              (17, 9, None, ((1, 4), (2, 5))), (12, 4, 11, ((2, 6),))]  # fmt: skip


def _embedding_build(number: int) -> Build:
    vocab, d_model, pad, shapes = EMBEDDINGS[number]
    made = {"vocab_size": vocab, "d_model": d_model, "padding_idx": pad}
    # what __init__ leaves is read from a module built as the course builds it: no padding
    # left out, so the default of padding_idx (None: no padding row) is judged too
    built = made if pad is not None else {"vocab_size": vocab, "d_model": d_model}

    def ids() -> list[Case]:
        rows = []  # what, token_ids
        for index, shape in enumerate(shapes):
            ids = torch.randint(0, vocab, shape, generator=generator(100 * number + index))
            if pad is not None:
                ids[0, -1] = ids[-1, 0] = pad  # padding at the end and at the start
            rows.append((f"ids of shape {shape}", ids))
        return cases(("token_ids",), rows, kind=Made, first_grad=True, build=built)

    return Build(f"TokenEmbedding({vocab}, {d_model}, padding_idx={pad})", made, ids)


def _attributes(module: Any) -> dict[str, Any]:
    """What the text names: ``self.embedding`` (an nn.Embedding) and ``self.d_model``."""
    table = getattr(module, "embedding", None)
    return {"embedding": type(table).__name__, "padding_idx": getattr(table, "padding_idx", None),
            "d_model": getattr(module, "d_model", None)}  # fmt: skip


def _stated(case: Any) -> dict[str, tuple[Any, str]]:
    pad = case.build.get("padding_idx")
    return {
        "embedding": ("Embedding", "Keep the lookup table as an nn.Embedding in `self.embedding`."),
        "padding_idx": (
            pad,
            "Pass the constructor's padding_idx on to nn.Embedding unchanged; "
            "left out, it is the stub's default, None: no padding row.",
        ),
        "d_model": (case.build["d_model"], "Keep d_model in `self.d_model`, as the text says."),
    }


def _pad_rows(case: Any) -> list[int]:
    return [] if case.build.get("padding_idx") is None else [case.build["padding_idx"]]


token_embedding = check(ModuleSpec(
    exercise="Exercise 1.5", title="TokenEmbedding", name="TokenEmbedding", seed=15,
    init=("vocab_size", "d_model", "padding_idx"), init_defaults={"padding_idx": None},
    init_forms=(POSITIONAL, KEYWORD, DEFAULTS), forward=("token_ids",), forms=(POSITIONAL,),
    builds=lambda: [_embedding_build(n) for n in range(len(EMBEDDINGS))],
    parameters=lambda build: {"embedding.weight": (build.inputs["vocab_size"], build.inputs["d_model"])},
    reference=lambda build, w, buffers, token_ids: math.sqrt(build.inputs["d_model"]) * F.embedding(
        token_ids, w["embedding.weight"], padding_idx=build.inputs["padding_idx"]),
    gradients=("token_ids",),
    hint="Reread the exercise text: the table's initial distribution, the padding row (zero, "
    "no gradient) and the factor sqrt(d_model) in forward.",
    properties=tuple(Property(name, **kwargs, applies=lambda case: case.grad) for name, kwargs in [
        ("constructor arguments", prop.stated_attributes("TokenEmbedding", _attributes, _stated)),
        ("the initial table", {"judge": _initial_table, "observe": fresh(
            lambda m: m.embedding.weight, "the table after __init__")}),
        ("no gradient where the contract says none",
         {"judge": _no_padding_gradient, "observe": _padding_gradient}),
        (".double()", prop.follows_double(
            "TokenEmbedding", ("token_ids",), "Keep the table's dtype: avoid hard-coding float32.")),
    ]),
))  # fmt: skip
