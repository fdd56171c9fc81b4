"""Checks for notebook 07, part-of-speech tagging.

* ``align_labels``: word-level tags spread over subword tokens (the tag on the first piece of
  every word, -100 on the other pieces, on special tokens and on padding). The reference does
  not use ``word_ids()``: it tokenizes every word on its own, lays the pieces out as
  ``[CLS] pieces [SEP] [PAD]...`` and truncates by hand, and it first confirms that this layout
  reproduces the tokenizer's ``input_ids`` exactly. Inputs cover words split into many pieces,
  punctuation inside and outside words, a batch of one, padding and truncation that cuts
  through a word.
* ``word_predictions``: token predictions mapped back to one prediction per word (the first
  piece's), with -1 for words that lost all their pieces to truncation; compared with a
  reference on synthetic ``word_ids`` lists and on real tokenizer output.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from course.check import CheckFailure, exercise_check, expect, expect_equal

IGNORE_INDEX = -100  # the label PyTorch's cross-entropy skips
NUM_TAGS = 17  # UPOS
MISSING = -1  # the prediction of a word that has no token left after truncation

# Sentences (already split into words, as in the treebank) that stress the alignment: long
# rare words that WordPiece cuts into many pieces, punctuation that is a word of its own,
# punctuation inside a word ("U.S.", "e-mail", a URL), numbers, a symbol the vocabulary lacks.
SENTENCES: list[list[str]] = [
    ["Antidisestablishmentarianism", "is", "an", "unbelievably", "long", "word", "."],
    ["Email", "me", "at", "john.doe@example.com", "or", "see", "http://www.example.org/a?b=1", "!"],
    ["The", "U.S.", "economy", "grew", "3.5", "%", "in", "2019", "--", "e-mail", "us", ":-)"],
    ["Hi"],
    ["...", "!!!", "?"],
    [
        "Al",
        "-",
        "Zaman",
        ":",
        "American",
        "forces",
        "killed",
        "Shaikh",
        "Abdullah",
        "al",
        "-",
        "Ani",
        ",",
        "the",
        "preacher",
        "at",
        "the",
        "mosque",
        "in",
        "the",
        "town",
        "of",
        "Qaim",
    ],
    ["I", "'m", "sooo", "tired", "of", "photosynthesizing", "\u263a", "lol"],
]

ALIGN_HINT = (
    "For each row i, walk over `encoding.word_ids(i)`: None (a special or padding token) -> "
    "-100; a word id different from the previous token's -> that word's tag; the same word id "
    "as the previous token (a continuation piece) -> -100. Return a long tensor shaped like "
    "`encoding['input_ids']`."
)


def _tags_for(words: Sequence[str], rng: random.Random) -> list[int]:
    """Random tags where neighbouring words never share a tag (so shifts are visible)."""
    tags = [rng.randrange(NUM_TAGS)]
    for _ in words[1:]:
        tags.append((tags[-1] + rng.randrange(1, NUM_TAGS)) % NUM_TAGS)
    return tags


def _reference_layout(
    tokenizer: Any,
    sentences: Sequence[Sequence[str]],
    tags: Sequence[Sequence[int]],
    max_length: int,
    length: int,
) -> tuple[list[list[int]], list[list[int]], list[list[str]]]:
    """(input ids, labels, a description of every position) built word by word, no word_ids().

    Each word is tokenized on its own (what ``is_split_into_words=True`` does for BERT's
    WordPiece); rows are ``[CLS] pieces [SEP]``, cut to ``max_length`` keeping the final
    ``[SEP]``, then padded to ``length``.
    """
    all_ids, all_labels, all_where = [], [], []
    for words, word_tags in zip(sentences, tags, strict=True):
        ids, labels = [tokenizer.cls_token_id], [IGNORE_INDEX]
        where = ["the [CLS] token"]
        for k, (word, tag) in enumerate(zip(words, word_tags, strict=True)):
            pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
            for p, piece in enumerate(pieces):
                ids.append(piece)
                labels.append(tag if p == 0 else IGNORE_INDEX)
                where.append(f"piece {p + 1} of {len(pieces)} of word {k} {word!r}")
        ids, labels, where = (
            ids[: max_length - 1],
            labels[: max_length - 1],
            where[: max_length - 1],
        )
        ids.append(tokenizer.sep_token_id)
        labels.append(IGNORE_INDEX)
        where.append("the [SEP] token")
        n_pad = length - len(ids)
        ids += [tokenizer.pad_token_id] * n_pad
        labels += [IGNORE_INDEX] * n_pad
        where += ["a padding token"] * n_pad
        all_ids.append(ids)
        all_labels.append(labels)
        all_where.append(where)
    return all_ids, all_labels, all_where


def _diagnose(got: torch.Tensor, expected: torch.Tensor, where: list[list[str]], case: str) -> None:
    """Fail with a message that names the first wrong position and what kind of token it is."""
    wrong = (got != expected).nonzero()
    if len(wrong) == 0:
        return
    row, col = (int(v) for v in wrong[0])
    place, mine, ref = where[row][col], int(got[row, col]), int(expected[row, col])
    if "padding" in place:
        hint = "Padding tokens have word id None: give them -100 so the loss ignores them."
    elif "[CLS]" in place or "[SEP]" in place:
        hint = "Special tokens have word id None: give them -100, they are not words."
        if "truncated" in case:
            hint += (
                " Truncation drops the pieces beyond max_length but keeps the final [SEP]: "
                "read the layout from word_ids() instead of rebuilding it from the words."
            )
    elif ref == IGNORE_INDEX:
        hint = (
            "Only the FIRST piece of a word carries its tag; the other pieces (same word id as "
            "the token before) get -100, so each word is counted once in the loss."
        )
    elif mine == IGNORE_INDEX:
        hint = (
            "The first piece of every word must carry the word's tag. Compare each token's "
            "word id with the previous TOKEN's word id, not with a counter of your own."
        )
    else:
        hint = (
            "Index the tags with the word id itself (word ids start at 0 for the first word "
            "of the sentence); do not shift it, and do not use the token position."
        )
    raise CheckFailure(
        f"{case}: row {row}, token position {col} ({place}) got label {mine}, expected {ref}.",
        hint,
    )


def _check_batch(
    student: Callable,
    tokenizer: Any,
    sentences: list[list[str]],
    rng: random.Random,
    case: str,
    max_length: int = 128,
    padding: bool | str = True,
) -> None:
    tags = [_tags_for(words, rng) for words in sentences]
    encoding = tokenizer(
        sentences,
        is_split_into_words=True,
        truncation=True,
        max_length=max_length,
        padding=padding,
        return_tensors="pt",
    )
    length = encoding["input_ids"].shape[1]
    ref_ids, ref_labels, where = _reference_layout(tokenizer, sentences, tags, max_length, length)
    if encoding["input_ids"].tolist() != ref_ids:  # a tokenizer that is not BERT-like
        raise CheckFailure(  # pragma: no cover - the course's tokenizers are BERT WordPiece
            "this check expects a BERT-style tokenizer ([CLS] words [SEP], right padding); "
            f"got {type(tokenizer).__name__}. Pass the notebook's `tokenizer`."
        )
    tags_copy = [list(t) for t in tags]
    labels = student(encoding, tags_copy)
    expect(
        isinstance(labels, torch.Tensor),
        f"{case}: align_labels should return a torch.Tensor, got {type(labels).__name__}.",
        "Build a list of rows, then `torch.tensor(rows, dtype=torch.long)`.",
    )
    expect(
        tuple(labels.shape) == tuple(encoding["input_ids"].shape),
        f"{case}: labels have shape {tuple(labels.shape)}, expected "
        f"{tuple(encoding['input_ids'].shape)} (the shape of encoding['input_ids']).",
        "One label per token, padding and special tokens included, truncated tokens excluded.",
    )
    expect(
        labels.dtype == torch.long,
        f"{case}: labels have dtype {labels.dtype}, expected torch.int64 (long).",
        "Cross-entropy wants class indices as a long tensor: dtype=torch.long.",
    )
    expect(
        tags_copy == tags,
        f"{case}: align_labels changed the tags it was given.",
        "Read the tags; do not modify the caller's lists.",
    )
    _diagnose(labels.cpu(), torch.tensor(ref_labels), where, case)


@exercise_check("Exercise 7.1", "align word tags to subword tokens", hint=ALIGN_HINT)
def align_labels(student_align: Callable, tokenizer: Any) -> None:
    """Compare with a word-by-word reference on single, padded and truncated batches."""
    expect(
        getattr(tokenizer, "is_fast", False),
        f"the check needs a fast tokenizer (with word_ids()); got {type(tokenizer).__name__}.",
        "Pass the tokenizer from `models.load_tokenizer()`.",
    )
    rng = random.Random(7)
    _check_batch(
        student_align,
        tokenizer,
        [SENTENCES[0]],
        rng,
        "a batch of one sentence with a long word cut into many pieces",
    )
    _check_batch(
        student_align,
        tokenizer,
        [SENTENCES[2]],
        rng,
        "a batch of one sentence with punctuation inside words ('U.S.', 'e-mail', ':-)')",
    )
    _check_batch(
        student_align,
        tokenizer,
        SENTENCES,
        rng,
        "a padded batch of 7 sentences of different lengths",
    )
    _check_batch(
        student_align,
        tokenizer,
        [SENTENCES[3], SENTENCES[4]],
        rng,
        "a batch padded to max_length=16",
        max_length=16,
        padding="max_length",
    )
    # max_length=10 cuts 'unbelievably' (and the URL, and 'photosynthesizing') mid-word.
    _check_batch(
        student_align,
        tokenizer,
        SENTENCES,
        rng,
        "a batch truncated to max_length=10 (some words lose pieces, others vanish)",
        max_length=10,
    )
    _check_batch(
        student_align,
        tokenizer,
        [SENTENCES[5], SENTENCES[3]],
        rng,
        "a batch truncated to max_length=8 with a short sentence padded",
        max_length=8,
    )


# ----------------------------------------------------------------------------------------
# Exercise 7.2: back from tokens to words
# ----------------------------------------------------------------------------------------

WORDS_HINT = (
    "Start from [-1] * num_words; walk over zip(word_ids, token_predictions) and, for a word id "
    "that is not None and seen for the first time, store that token's prediction."
)


def _reference_words(
    word_ids: Sequence[int | None], predictions: Sequence[int], num_words: int
) -> list[int]:
    out = [MISSING] * num_words
    seen = set()
    for word_id, prediction in zip(word_ids, predictions, strict=True):
        if word_id is not None and word_id not in seen:
            seen.add(word_id)
            out[word_id] = prediction
    return out


def _synthetic_word_ids(
    rng: random.Random, num_words: int, keep: int, pad: int
) -> list[int | None]:
    """[None] + word ids with 1-4 pieces per word for the first ``keep`` words + [None] * (1 + pad)."""
    ids: list[int | None] = [None]
    for word in range(keep):
        ids += [word] * rng.choice([1, 1, 2, 3, 4])
    return ids + [None] * (1 + pad)


def _as_int_list(value: Any, what: str) -> list[int]:
    if isinstance(value, torch.Tensor):
        expect(value.dim() == 1, f"{what} should be 1-D, got shape {tuple(value.shape)}.")
        value = value.tolist()
    expect(
        isinstance(value, list | tuple),
        f"{what} should be a list of ints, got {type(value).__name__}.",
        WORDS_HINT,
    )
    expect(
        all(isinstance(v, int) for v in value),
        f"{what} should contain Python ints, got {[type(v).__name__ for v in value][:3]}...",
        "Convert tensors with .tolist() or int(...).",
    )
    return list(value)


def _compare_words(
    student: Callable, word_ids: list[int | None], predictions: Any, num_words: int, case: str
) -> None:
    expected = _reference_words(word_ids, list(map(int, predictions)), num_words)
    got = _as_int_list(student(list(word_ids), predictions, num_words), f"{case}: the result")
    expect_equal(
        len(got),
        num_words,
        f"{case}: number of word predictions",
        "One prediction per word of the sentence, special tokens excluded, and -1 for "
        "words that truncation removed.",
    )
    for k, (mine, ref) in enumerate(zip(got, expected, strict=True)):
        if mine == ref:
            continue
        if ref == MISSING:
            hint = "A word with no token left (cut by truncation) gets -1."
        else:
            first = word_ids.index(k)
            pieces = word_ids.count(k)
            hint = (
                f"Word {k} spans token positions {first}..{first + pieces - 1}; its prediction is "
                f"the one at position {first}, its first piece."
            )
        raise CheckFailure(f"{case}: word {k} got {mine}, expected {ref}.", hint)


@exercise_check("Exercise 7.2", "token predictions back to words", hint=WORDS_HINT)
def word_predictions(student_fn: Callable, tokenizer: Any = None) -> None:
    """Compare with a reference on synthetic word-id layouts and, if given, a real encoding."""
    rng = random.Random(72)
    cases = [
        (5, 5, 0, "a sentence of 5 words, no padding"),
        (1, 1, 3, "a one-word sentence followed by padding"),
        (9, 9, 4, "9 words, several cut into pieces, with padding"),
        (12, 7, 0, "12 words of which truncation kept only the first 7"),
    ]
    for num_words, keep, pad, case in cases:
        word_ids = _synthetic_word_ids(rng, num_words, keep, pad)
        # every token gets a different prediction, so taking the wrong piece is visible
        predictions = rng.sample(range(100, 100 + len(word_ids)), len(word_ids))
        _compare_words(student_fn, word_ids, predictions, num_words, case)
    word_ids = _synthetic_word_ids(rng, 6, 6, 2)
    predictions = torch.tensor(rng.sample(range(50), len(word_ids)))
    _compare_words(student_fn, word_ids, predictions, 6, "predictions given as a 1-D tensor")
    if tokenizer is not None:
        words = SENTENCES[2]
        encoding = tokenizer(words, is_split_into_words=True, truncation=True, max_length=12)
        word_ids = encoding.word_ids()
        predictions = [rng.randrange(NUM_TAGS) for _ in word_ids]
        _compare_words(
            student_fn, word_ids, predictions, len(words), "a real sentence truncated to 12 tokens"
        )


__all__ = ["align_labels", "word_predictions", "IGNORE_INDEX", "CheckFailure"]
