"""Checks for notebook 07, part-of-speech tagging.

* ``align_labels``: word-level tags spread over subword tokens (the tag on the first piece of
  every word, -100 on the other pieces, on special tokens and on padding). The check encodes
  fixed sentences with the course's packaged tokenizer (through :mod:`course.models`, on the
  trusted side too: the tokenizer the notebook passes is never used), and the expected labels
  come from the number of WordPiece pieces of every word, stored below as data. Cases cover
  words split into many pieces, punctuation inside and outside words, a batch of one, padding
  and truncation that cuts through a word; inputs must come back untouched.
* ``word_predictions``: token predictions mapped back to one prediction per word (the first
  piece's), with -1 for words that lost all their pieces to truncation; the ``word_ids``
  layouts are built from piece counts, so the expected answer is known by construction.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from course.check import CheckFailure, exercise_check, expect
from course.properties import call, generator, observe, same

IGNORE_INDEX = -100  # the label PyTorch's cross-entropy skips
NUM_TAGS = 17  # UPOS
MISSING = -1  # the prediction of a word that has no token left after truncation

# Sentences (already split into words, as in the treebank) that stress the alignment, each word
# with the number of WordPiece pieces the packaged (uncased BERT) tokenizer cuts it into: long
# rare words cut into many pieces, punctuation that is a word of its own, punctuation inside a
# word ("U.S.", "e-mail", a URL), numbers, a symbol. tests/test_checks_nb07.py verifies the
# counts against the tokenizer.
SENTENCES: tuple[tuple[tuple[str, int], ...], ...] = (
    (
        ("Antidisestablishmentarianism", 8),
        ("is", 1),
        ("an", 1),
        ("unbelievably", 5),
        ("long", 1),
        ("word", 1),
        (".", 1),
    ),
    (
        ("Email", 1),
        ("me", 1),
        ("at", 1),
        ("john.doe@example.com", 7),
        ("or", 1),
        ("see", 1),
        ("http://www.example.org/a?b=1", 15),
        ("!", 1),
    ),
    (
        ("The", 1),
        ("U.S.", 4),
        ("economy", 1),
        ("grew", 1),
        ("3.5", 3),
        ("%", 1),
        ("in", 1),
        ("2019", 1),
        ("--", 2),
        ("e-mail", 3),
        ("us", 1),
        (":-)", 3),
    ),
    (("Hi", 1),),
    (("...", 3), ("!!!", 3), ("?", 1)),
    (
        ("Al", 1),
        ("-", 1),
        ("Zaman", 2),
        (":", 1),
        ("American", 1),
        ("forces", 1),
        ("killed", 1),
        ("Shaikh", 2),
        ("Abdullah", 1),
        ("al", 1),
        ("-", 1),
        ("Ani", 2),
        (",", 1),
        ("the", 1),
        ("preacher", 1),
        ("at", 1),
        ("the", 1),
        ("mosque", 1),
        ("in", 1),
        ("the", 1),
        ("town", 1),
        ("of", 1),
        ("Qaim", 3),
    ),
    (
        ("I", 1),
        ("'m", 2),
        ("sooo", 2),
        ("tired", 1),
        ("of", 1),
        ("photosynthesizing", 4),
        ("\u263a", 1),
        ("lol", 2),
    ),
)


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Any:
    """The course's packaged tokenizer (sha256-verified), loaded once, without its print."""
    from course import models

    with contextlib.redirect_stdout(io.StringIO()):
        return models.load_tokenizer(models.PACKAGED_MODEL)


def _words(sentence: Sequence[tuple[str, int]]) -> list[str]:
    return [word for word, _ in sentence]


def _tags(n_words: int, g: torch.Generator) -> list[int]:
    """Random tags where neighbouring words never share a tag (so shifts are visible)."""
    tags = [int(torch.randint(NUM_TAGS, (), generator=g))]
    for _ in range(n_words - 1):
        tags.append((tags[-1] + int(torch.randint(1, NUM_TAGS, (), generator=g))) % NUM_TAGS)
    return tags


def _layout(counts: Sequence[int], max_length: int) -> list[tuple[int, int] | None]:
    """(word, piece) for every token of ``[CLS] pieces [SEP]`` cut to ``max_length`` (None for
    the special tokens): what the counts say the tokenizer lays out."""
    pieces = [(k, p) for k, n in enumerate(counts) for p in range(n)]
    return [None, *pieces[: max_length - 2], None]


# ----------------------------------------------------------------------------------------
# Exercise 7.1: align word tags with subword tokens
# ----------------------------------------------------------------------------------------


class AlignCase(NamedTuple):
    what: str
    sentences: tuple[int, ...]  # indices into SENTENCES
    max_length: int = 128
    padding: bool | str = True


ALIGN_CASES = (
    AlignCase("a batch of one sentence with a long word cut into many pieces", (0,)),
    AlignCase("a batch of one sentence with punctuation inside words ('U.S.', 'e-mail')", (2,)),
    AlignCase("a padded batch of 7 sentences of different lengths", (0, 1, 2, 3, 4, 5, 6)),
    AlignCase("a batch padded to max_length=16", (3, 4), 16, "max_length"),
    AlignCase(
        "a batch truncated to max_length=10 (some words lose pieces, others vanish)",
        (0, 1, 2, 3, 4, 5, 6),
        10,
    ),
    AlignCase("a batch truncated to max_length=8 with a short sentence padded", (5, 3), 8),
)


def _encode(case: AlignCase) -> Any:
    return _tokenizer()(
        [_words(SENTENCES[i]) for i in case.sentences],
        is_split_into_words=True,
        truncation=True,
        max_length=case.max_length,
        padding=case.padding,
        return_tensors="pt",
    )


def _expected_labels(
    case: AlignCase, tags: list[list[int]]
) -> tuple[torch.Tensor, list[list[str]]]:
    """The labels every position must hold and a description of each position, from the
    stored piece counts."""
    layouts = [_layout([n for _, n in SENTENCES[i]], case.max_length) for i in case.sentences]
    length = case.max_length if case.padding == "max_length" else max(map(len, layouts))
    labels, where = [], []
    for r, (i, layout) in enumerate(zip(case.sentences, layouts, strict=True)):
        row, described = [], []
        for position in layout:
            if position is None:
                row.append(IGNORE_INDEX)
                described.append("the [CLS] token" if not described else "the [SEP] token")
                continue
            k, p = position
            word, n = SENTENCES[i][k]
            row.append(tags[r][k] if p == 0 else IGNORE_INDEX)
            described.append(f"piece {p + 1} of {n} of word {k} {word!r}")
        row += [IGNORE_INDEX] * (length - len(layout))
        described += ["a padding token"] * (length - len(layout))
        labels.append(row)
        where.append(described)
    return torch.tensor(labels, dtype=torch.long), where


def _diagnose(got: torch.Tensor, expected: torch.Tensor, where: list[list[str]], case: str) -> None:
    """Fail with a message that names the first wrong position and what kind of token it is."""
    wrong = (got != expected).nonzero()
    if len(wrong) == 0:
        return
    row, col = (int(v) for v in wrong[0])
    place, mine, ref = where[row][col], int(got[row, col]), int(expected[row, col])
    if "padding" in place:
        hint = "Padding tokens belong to no word: the loss must skip them."
    elif "[CLS]" in place or "[SEP]" in place:
        hint = "Special tokens belong to no word: the loss must skip them."
        if "truncated" in case:
            hint += (
                " Truncation drops pieces but keeps the final [SEP]: read the layout of the "
                "encoded batch itself rather than rebuilding it from the words."
            )
    elif ref == IGNORE_INDEX:
        hint = (
            "Only the FIRST piece of a word carries its tag; the other pieces of the same word "
            "are skipped by the loss, so each word is counted once."
        )
    elif mine == IGNORE_INDEX:
        hint = (
            "The first piece of every word carries the word's tag. A token starts a new word "
            "when its word id differs from the previous token's word id."
        )
    else:
        hint = (
            "The tag of a token's word is found through the word id that the encoding gives "
            "for that token (word ids count the words of the sentence from 0)."
        )
    raise CheckFailure(
        f"{case}: row {row}, token position {col} ({place}) got label {mine}, expected {ref}.",
        hint,
    )


def _align_case(student_align_labels: Callable, case: AlignCase, offset: int) -> None:
    g = generator(offset)
    tags = [_tags(len(SENTENCES[i]), g) for i in case.sentences]
    expected, where = _expected_labels(case, tags)
    encoding = dict(_encode(case))  # the trusted copy; the student gets a fresh one

    def run() -> dict[str, Any]:
        given_encoding, given_tags = _encode(case), [list(t) for t in tags]
        labels = student_align_labels(given_encoding, given_tags)
        return {"labels": labels, "encoding": dict(given_encoding), "tags": given_tags}

    observed = observe(f"align_labels on {case.what}", run)
    labels = observed["labels"]
    shape = tuple(encoding["input_ids"].shape)
    expect(
        isinstance(labels, torch.Tensor),
        f"{case.what}: align_labels returned a {type(labels).__name__}; the exercise asks for "
        "a tensor.",
        "The exercise text gives the type, dtype and shape of the result.",
    )
    expect(
        tuple(labels.shape) == shape,
        f"{case.what}: the labels have shape {tuple(labels.shape)}, expected {shape} (the shape "
        "of encoding['input_ids']).",
        "One label per token: padding and special tokens included, truncated tokens excluded.",
    )
    expect(
        labels.dtype == torch.long,
        f"{case.what}: the labels have dtype {labels.dtype}, expected torch.int64 (long).",
        "Cross-entropy takes class indices as a long tensor.",
    )
    for name, before, after in (
        ("`encoding`", encoding, observed["encoding"]),
        ("`tags`", tags, observed["tags"]),
    ):
        expect(
            same(before, after),
            f"{case.what}: your code changed {name} in place. The property violated: inputs "
            "untouched; the caller still needs them.",
            "Build the labels in a new list or tensor; read the arguments only.",
        )
    _diagnose(labels, expected, where, case.what)


@exercise_check(
    "Exercise 7.1",
    "align word tags to subword tokens",
    hint="The encoding knows which word every token comes from (see the text of the exercise); "
    "a token is labelled only when it is the first piece of its word.",
)
def align_labels(student_align_labels: Callable, tokenizer: Any = None) -> None:
    """Compare with labels laid out from stored piece counts, on the course's tokenizer.

    ``tokenizer`` (the notebook's) is not used: the check encodes its own batches with the
    packaged tokenizer, in the student's process and in the grader's alike.
    """
    for offset, case in enumerate(ALIGN_CASES):
        _align_case(student_align_labels, case, offset)


# ----------------------------------------------------------------------------------------
# Exercise 7.2: back from tokens to words
# ----------------------------------------------------------------------------------------


class WordsCase(NamedTuple):
    what: str
    counts: tuple[int, ...]  # pieces per word
    max_length: int = 512  # tokens kept, [CLS] and [SEP] included
    pad: int = 0
    as_tensor: bool = False


WORDS_CASES = (
    WordsCase("a sentence of 5 one-piece words, no padding", (1, 1, 1, 1, 1)),
    WordsCase("a one-word sentence followed by padding", (1,), pad=3),
    WordsCase("9 words, several cut into pieces, with padding", (1, 3, 1, 2, 4, 1, 1, 2, 1), pad=4),
    WordsCase(
        "12 words truncated to 12 tokens (a word cut through, the last words gone)",
        (1, 2, 1, 1, 3, 1, 1, 2, 1, 1, 1, 1),
        max_length=12,
    ),
    WordsCase(
        "a real sentence ('The U.S. economy grew 3.5 % ...') truncated to 12 tokens",
        tuple(n for _, n in SENTENCES[2]),
        max_length=12,
    ),
    WordsCase("predictions given as a 1-D tensor", (2, 1, 1, 3, 1, 1), pad=2, as_tensor=True),
)


def _word_ids(case: WordsCase) -> list[int | None]:
    layout = _layout(case.counts, case.max_length)
    return [None if p is None else p[0] for p in layout] + [None] * case.pad


def _words_case(student_word_predictions: Callable, case: WordsCase, offset: int) -> None:
    word_ids = _word_ids(case)
    layout = _layout(case.counts, case.max_length)
    # every token gets its own prediction, so taking the wrong piece is visible
    values = (torch.randperm(len(word_ids), generator=generator(offset)) + 100).tolist()
    first = {p[0]: j for j, p in enumerate(layout) if p is not None and p[1] == 0}
    expected = [values[first[k]] if k in first else MISSING for k in range(len(case.counts))]
    predictions: Any = torch.tensor(values) if case.as_tensor else list(values)
    got = call(
        f"word_predictions on {case.what}",
        student_word_predictions,
        list(word_ids),
        predictions,
        len(case.counts),
        names=("word_ids", "token_predictions", "num_words"),
    )
    if isinstance(got, torch.Tensor) and got.dim() == 1 and not got.is_floating_point():
        got = got.tolist()
    expect(
        isinstance(got, list | tuple) and all(type(v) is int for v in got),
        f"{case.what}: the result should be a list of Python ints, got "
        f"{type(got).__name__}"
        + (
            f" of {sorted({type(v).__name__ for v in got})}"
            if isinstance(got, list | tuple)
            else ""
        )
        + ".",
        "The exercise text gives the type of the result; a tensor element is not a Python int.",
    )
    expect(
        len(got) == len(expected),
        f"{case.what}: {len(got)} word predictions, expected {len(expected)} (num_words).",
        "One prediction per word of the sentence, special tokens excluded, and -1 for words "
        "that truncation removed.",
    )
    for k, (mine, ref) in enumerate(zip(got, expected, strict=True)):
        if mine == ref:
            continue
        if ref == MISSING:
            hint = "A word with no token left (cut by truncation) gets -1."
        else:
            pieces = case.counts[k]
            hint = (
                f"Word {k} starts at token position {first[k]} and has {pieces} piece(s); "
                "its prediction is the one at its first piece."
            )
        raise CheckFailure(f"{case.what}: word {k} got {mine}, expected {ref}.", hint)


@exercise_check(
    "Exercise 7.2",
    "token predictions back to words",
    hint="It is the mirror image of 7.1: the word ids say which word each token belongs to, "
    "and only a word's first piece speaks for it.",
)
def word_predictions(student_word_predictions: Callable, tokenizer: Any = None) -> None:
    """Compare with the answer known by construction on word-id layouts built from piece counts.

    ``tokenizer`` (the notebook's) is not used; the layouts follow the packaged tokenizer.
    """
    for offset, case in enumerate(WORDS_CASES):
        _words_case(student_word_predictions, case, 100 + offset)


__all__ = ["align_labels", "word_predictions", "IGNORE_INDEX", "CheckFailure"]
