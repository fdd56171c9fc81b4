"""Checks for notebook 07, part-of-speech tagging: two declared contracts (:mod:`course.framework.spec`).

7.1's batches are encoded by the check with the course's packaged tokenizer (loaded when this
module is imported, in the student's process and the grader's alike; the notebook's tokenizer
is never used), and its reference reads the first-piece rule from the encoding's own
``word_ids()``. 7.2's ``word_ids`` come from that tokenizer or from piece counts.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import torch
import transformers  # noqa: F401 - the tokenizer's library, imported before any student code

from course import models
from course.framework import properties as prop
from course.framework.observe import claim
from course.framework.properties import CheckFailure, generator, same
from course.framework.spec import Case, Property, Spec, cases, check

IGNORE_INDEX = -100  # the label PyTorch's cross-entropy skips
NUM_TAGS = 17  # UPOS

with contextlib.redirect_stdout(io.StringIO()):
    TOKENIZER = models.load_tokenizer(models.PACKAGED_MODEL)

# Sentences (split into words, as in the treebank) that stress the alignment: long rare words
# cut into many pieces, punctuation as words and inside words ("U.S.", "e-mail", a URL).
SENTENCES = tuple(
    s.split(" ")
    for s in (
        "Antidisestablishmentarianism is an unbelievably long word .",
        "Email me at john.doe@example.com or see http://www.example.org/a?b=1 !",
        "The U.S. economy grew 3.5 % in 2019 -- e-mail us :-)",
        "Hi",
        "... !!! ?",
        "Al - Zaman : American forces killed Shaikh Abdullah al - Ani , the preacher at the "
        "mosque in the town of Qaim",
        "I 'm sooo tired of photosynthesizing \u263a lol",
    )
)

# (what, sentences, max_length, padding)
ALIGN_CASES = (
    ("a batch of one sentence with a long word cut into many pieces", (0,), 128, True),
    ("a batch of one sentence with punctuation inside words ('U.S.', 'e-mail')", (2,), 128, True),
    ("a padded batch of 7 sentences of different lengths", tuple(range(7)), 128, True),
    ("a batch padded to max_length=16", (3, 4), 16, "max_length"),
    ("a batch truncated to max_length=10 (words lose pieces or vanish)", tuple(range(7)), 10, True),
    ("a batch truncated to max_length=8 with a short sentence padded", (5, 3), 8, True),
)


_CASE = {what: rest for what, *rest in ALIGN_CASES}


def _token_labels(case: Case, got: Any, expected: torch.Tensor, seen: Any) -> None:
    """Token labels (one per token, -100 where the loss must skip): the first wrong position,
    named by what the token is ("piece 2 of 3 of word 4", "a padding token"), with the principle
    that position breaks."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return  # the stated type and shape are the runner's
    wrong = (got != expected).nonzero()
    if len(wrong) == 0:
        return
    row, col = (int(v) for v in wrong[0])
    encoding, what = case.inputs["encoding"], f"align_labels on {case.what}"
    place = _row_places(encoding.word_ids(row), encoding["attention_mask"][row].tolist())[col]
    mine, ref = int(got[row, col]), int(expected[row, col])
    if "padding" in place or "special" in place:
        hint = "Special and padding tokens belong to no word: the loss must skip them."
        if "truncated" in what:
            hint += " Truncation drops pieces but keeps the final [SEP]: read the layout of the "
            hint += "encoded batch itself rather than rebuilding it from the words."
    elif ref == IGNORE_INDEX:
        hint = (
            "Only the FIRST piece of a word carries its tag; the other pieces of the same word "
            "are skipped by the loss, so each word is counted once."
        )
    elif mine == IGNORE_INDEX:
        hint = "The first piece of every word carries the word's tag."
    else:
        hint = "The tag of a token's word is found through that token's word id (from 0)."
    raise CheckFailure(
        f"{what}: row {row}, token position {col} ({place}) got label {mine}, expected {ref}",
        hint,
    )


def _encode(sentences: tuple[int, ...], max_length: int, padding: bool | str) -> Any:
    return TOKENIZER(
        [SENTENCES[i] for i in sentences],
        is_split_into_words=True,
        truncation=True,
        max_length=max_length,
        padding=padding,
        return_tensors="pt",
    )


def _tags(n_words: int, g: torch.Generator) -> list[int]:
    """Random tags where neighbouring words never share one (so a shift is visible)."""
    tags = [int(torch.randint(NUM_TAGS, (), generator=g))]
    for _ in range(n_words - 1):
        tags.append((tags[-1] + int(torch.randint(1, NUM_TAGS, (), generator=g))) % NUM_TAGS)
    return tags


def _align_cases() -> list[Case]:
    g = generator()
    table = [
        (what, _encode(rows, length, padding), [_tags(len(SENTENCES[i]), g) for i in rows])
        for what, rows, length, padding in ALIGN_CASES
    ]  # the labels are built from Python lists, as the encoding's are: no second device
    return cases(("encoding", "tags"), table, device=False)


def _first_pieces(word_ids: list[int | None]) -> list[bool]:
    return [w is not None and (j == 0 or word_ids[j - 1] != w) for j, w in enumerate(word_ids)]


def _align(encoding: Any, tags: list[list[int]]) -> torch.Tensor:
    """The first-piece rule (Devlin et al., 2019, section 5.3), read from ``word_ids()``."""
    rows = []
    for i, row_tags in enumerate(tags):
        ids = encoding.word_ids(i)
        first = _first_pieces(ids)
        rows.append([row_tags[w] if f else IGNORE_INDEX for w, f in zip(ids, first, strict=True)])
    return torch.tensor(rows, dtype=torch.long)


def _row_places(ids: list[int | None], mask: list[int] | None = None) -> list[str]:
    """What each token of one row is, in words: "piece 2 of 3 of word 4", "a padding token"
    (``mask``: the attention mask; without it, a token of no word is special or padding)."""
    counts = {w: ids.count(w) for w in ids if w is not None}
    seen: dict[int, int] = {}
    row = []
    for j, w in enumerate(ids):
        if w is None:
            kind = "special ([CLS]/[SEP])" if mask and mask[j] else "padding" if mask else "special"
            row.append(f"a {kind} token" + ("" if mask else " or padding"))
            continue
        seen[w] = seen.get(w, 0) + 1
        row.append(f"piece {seen[w]} of {counts[w]} of word {w}")
    return row


def _encoding_untouched(case: Case, got: Any, expected: Any, after: Any) -> None:
    """The property "inputs untouched" for the encoding, which is not plain data: the same
    entries after the calls."""
    before = dict(_encode(*_CASE[case.what]))
    claim(  # seen by the student's process alone: a note while grading
        same(after, before),
        f"align_labels on {case.what}: your code changed `encoding` in place (entries now "
        f"{sorted(after) if isinstance(after, dict) else type(after).__name__}, before "
        f"{sorted(before)}); the caller still needs it",
        "Build the result in a new list or tensor; read the arguments only.",
        prop="inputs untouched",
    )


align_labels_spec = Spec(
    exercise="Exercise 7.1",
    title="align word tags to subword tokens",
    name="align_labels",
    params=("encoding", "tags"),
    reference=_align,
    cases=_align_cases,
    properties=(
        Property(
            "the encoding untouched",
            _encoding_untouched,
            lambda student, case, call: prop.observe(
                f"align_labels on {case.what}: `encoding` after the calls",
                lambda: dict(case.inputs["encoding"]),
            ),
        ),
        Property("one label per word, on its first piece", _token_labels),
    ),
    hint="The encoding knows which word every token comes from (see the text of the exercise); "
    "a token is labelled only when it is the first piece of its word.",
)


def _layout(counts: tuple[int, ...], max_length: int, pad: int) -> list[int | None]:
    """``word_ids`` of ``[CLS] pieces [SEP]`` cut to ``max_length``, then ``pad`` paddings."""
    pieces = [k for k, n in enumerate(counts) for _ in range(n)]
    return [None, *pieces[: max_length - 2], None] + [None] * pad


# (what, word_ids, number of words, predictions as a tensor)
WORDS_CASES = (
    ("a sentence of 5 one-piece words, no padding", _layout((1,) * 5, 512, 0), 5, False),
    ("a one-word sentence followed by padding", _layout((1,), 512, 3), 1, False),
    (
        "9 words, several cut into pieces, padded",
        _layout((1, 3, 1, 2, 4, 1, 1, 2, 1), 512, 4),
        9,
        False,
    ),
    (
        "12 words truncated to 12 tokens (a word cut through, the last words gone)",
        _layout((1, 2, 1, 1, 3, 1, 1, 2, 1, 1, 1, 1), 12, 0),
        12,
        False,
    ),
    ("predictions given as a 1-D tensor", _layout((2, 1, 1, 3, 1, 1), 512, 2), 6, True),
)


def _words_cases() -> list[Case]:
    real = TOKENIZER(SENTENCES[2], is_split_into_words=True, truncation=True, max_length=12)
    table = (
        *WORDS_CASES,
        ("a real sentence ('The U.S. economy grew 3.5 % ...') truncated to 12 tokens",
         real.word_ids(), len(SENTENCES[2]), False),
    )  # fmt: skip
    rows = []  # what, word_ids, token_predictions, num_words, device
    for offset, (what, word_ids, words, as_tensor) in enumerate(table):
        # every token gets its own prediction, so taking the wrong piece is visible
        values = torch.randperm(len(word_ids), generator=generator(100 + offset)) + 100
        predictions = values if as_tensor else values.tolist()
        rows.append((what, list(word_ids), predictions, words, bool(as_tensor)))
    return cases(("word_ids", "token_predictions", "num_words"), rows, fields=("device",))


def _words(word_ids: list[int | None], token_predictions: Any, num_words: int) -> list[int]:
    predictions = [int(p) for p in token_predictions]
    out = [-1] * num_words
    for j, first in enumerate(_first_pieces(word_ids)):
        if first:
            out[word_ids[j]] = predictions[j]
    return out


def _word_story(case: Case, got: Any, expected: list[int], seen: Any) -> None:
    """The first word whose prediction differs, both values, and where each came from: every
    token of a case has its own prediction, so a wrong value names the token it was read from."""
    if type(got) is not list or len(got) != len(expected):
        return  # the stated result says it, with both lists
    wrong = next((w for w, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b), None)
    if wrong is None:
        return
    ids = case.inputs["word_ids"]
    predictions = [int(p) for p in case.inputs["token_predictions"]]
    places = _row_places(ids)
    mine, want = got[wrong], expected[wrong]
    source = (
        f"the prediction of token {predictions.index(mine)}, {places[predictions.index(mine)]}"
        if mine in predictions
        else "no token's prediction"
    )
    should, rule = (
        (
            f"the prediction of its first piece, token {predictions.index(want)}",
            "a word's prediction is that of its first piece",
        )
        if want in predictions
        else ("no token of that word is left after truncation", "a word with no token gets -1")
    )
    raise CheckFailure(
        f"word_predictions on {case.what}: word {wrong} got {mine!r} ({source}), expected "
        f"{want!r} ({should})",
        case.hint,
        prop=rule,
    )


word_predictions_spec = Spec(
    exercise="Exercise 7.2",
    title="token predictions back to words",
    name="word_predictions",
    params=("word_ids", "token_predictions", "num_words"),
    reference=_words,
    cases=_words_cases,
    properties=(Property("where each word's prediction comes from", judge=_word_story),),
    hint="It is the mirror image of 7.1: the word ids say which word each token belongs to, and "
    "only a word's first piece speaks for it; a word with no token left gets -1.",
)


align_labels = check(align_labels_spec)  # the notebook's tokenizer, passed along, is not used
word_predictions = check(word_predictions_spec)
