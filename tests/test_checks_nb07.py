"""The checks of notebook 07 accept a correct solution and reject stubs and typical mistakes."""

from __future__ import annotations

import pytest
import torch

from course.checks import nb07 as check
from course.framework.check import FAILED, NOT_IMPLEMENTED

IGNORE = -100


@pytest.fixture(scope="module")
def tokenizer():
    from course import models

    return models.load_tokenizer()


def stub(*args, **kwargs):
    raise NotImplementedError


# --- Exercise 7.1: align_labels -----------------------------------------------------------


def align_labels(encoding, tags):
    rows = []
    for i, word_tags in enumerate(tags):
        previous, row = None, []
        for word_id in encoding.word_ids(i):
            if word_id is None or word_id == previous:
                row.append(IGNORE)
            else:
                row.append(word_tags[word_id])
            previous = word_id
        rows.append(row)
    return torch.tensor(rows, dtype=torch.long)


def align_every_piece(encoding, tags):
    rows = []
    for i, word_tags in enumerate(tags):
        rows.append([IGNORE if w is None else word_tags[w] for w in encoding.word_ids(i)])
    return torch.tensor(rows)


def align_last_piece(encoding, tags):
    rows = []
    for i, word_tags in enumerate(tags):
        ids = encoding.word_ids(i)
        row = []
        for j, w in enumerate(ids):
            is_last = j + 1 == len(ids) or ids[j + 1] != w
            row.append(word_tags[w] if w is not None and is_last else IGNORE)
        rows.append(row)
    return torch.tensor(rows)


def align_special_tokens_labelled(encoding, tags):
    """[CLS]/[SEP]/[PAD] labelled with the first word's tag instead of -100."""
    rows = []
    for i, word_tags in enumerate(tags):
        previous, row = None, []
        for j, w in enumerate(encoding.word_ids(i)):
            if w is None:
                row.append(word_tags[0] if encoding["attention_mask"][i, j] else IGNORE)
            else:
                row.append(word_tags[w] if w != previous else IGNORE)
            previous = w
        rows.append(row)
    return torch.tensor(rows)


def align_specials_zero(encoding, tags):
    """Every None position gets class 0 (ADJ), a silent and common mistake."""
    labels = align_labels(encoding, tags)
    return labels.masked_fill(labels.eq(IGNORE) & _first_or_none(encoding), 0)


def _first_or_none(encoding):
    mask = torch.zeros_like(encoding["input_ids"], dtype=torch.bool)
    for i in range(mask.shape[0]):
        for j, w in enumerate(encoding.word_ids(i)):
            mask[i, j] = w is None
    return mask


def align_off_by_one_minus(encoding, tags):
    """Word ids treated as 1-based: tags[word_id - 1] (wraps around for the first word)."""
    rows = []
    for i, word_tags in enumerate(tags):
        previous, row = None, []
        for w in encoding.word_ids(i):
            row.append(IGNORE if w is None or w == previous else word_tags[w - 1])
            previous = w
        rows.append(row)
    return torch.tensor(rows)


def align_off_by_one_plus(encoding, tags):
    """tags[word_id + 1] (the next word's tag), guarded at the end of the sentence."""
    rows = []
    for i, word_tags in enumerate(tags):
        previous, row = None, []
        for w in encoding.word_ids(i):
            if w is None or w == previous:
                row.append(IGNORE)
            else:
                row.append(word_tags[min(w + 1, len(word_tags) - 1)])
            previous = w
        rows.append(row)
    return torch.tensor(rows)


def align_by_position(encoding, tags):
    """Assumes one token per word: label of token j is tags[j - 1]."""
    rows = []
    for i, word_tags in enumerate(tags):
        row = []
        for j, w in enumerate(encoding.word_ids(i)):
            row.append(word_tags[j - 1] if w is not None and 0 < j <= len(word_tags) else IGNORE)
        rows.append(row)
    return torch.tensor(rows)


def align_own_counter(encoding, tags):
    """Counts new words with its own counter from the start of the row, so [CLS] shifts it."""
    rows = []
    for i, word_tags in enumerate(tags):
        previous, row, count = "start", [], 0
        for w in encoding.word_ids(i):
            if w is None:
                row.append(IGNORE)
            elif w != previous:
                row.append(word_tags[min(count, len(word_tags) - 1)])
            else:
                row.append(IGNORE)
            if w != previous:
                count += 1
            previous = w
        rows.append(row)
    return torch.tensor(rows)


def align_padding_zero(encoding, tags):
    """Starts from zeros and only writes -100 on [CLS]/[SEP]: padding keeps label 0."""
    labels = torch.zeros_like(encoding["input_ids"])
    for i, word_tags in enumerate(tags):
        previous = None
        for j, w in enumerate(encoding.word_ids(i)):
            if encoding["attention_mask"][i, j] == 0:
                continue
            labels[i, j] = IGNORE if w is None or w == previous else word_tags[w]
            previous = w
    return labels


def align_ignores_truncation(encoding, tags):
    """Lays out [CLS] + pieces + [SEP] from per-word piece counts, then cuts/pads to L."""
    length = encoding["input_ids"].shape[1]
    rows = []
    for i, word_tags in enumerate(tags):
        ids = encoding.word_ids(i)
        counts = [ids.count(k) for k in range(len(word_tags))]
        counts = [c if c else 1 for c in counts]  # truncated words assumed to be one piece
        row = [IGNORE]
        for tag, n in zip(word_tags, counts, strict=True):
            row += [tag] + [IGNORE] * (n - 1)
        row.append(IGNORE)
        row = (row + [IGNORE] * length)[:length]
        rows.append(row)
    return torch.tensor(rows)


def align_word_to_tokens(encoding, tags):
    """Loops over words with word_to_tokens(): None for words cut by truncation -> crash."""
    labels = torch.full_like(encoding["input_ids"], IGNORE)
    for i, word_tags in enumerate(tags):
        for k, tag in enumerate(word_tags):
            span = encoding.word_to_tokens(i, k)
            labels[i, span.start] = tag
    return labels


def align_returns_list(encoding, tags):
    return align_labels(encoding, tags).tolist()


def align_returns_float(encoding, tags):
    return align_labels(encoding, tags).float()


def align_unpadded_rows(encoding, tags):
    """Drops the padding: rows of different lengths, stacked by padding with... nothing."""
    labels = align_labels(encoding, tags)
    keep = encoding["attention_mask"].sum(dim=1).max()
    return labels[:, : max(1, int(keep) - 1)]


def align_mutates_tags(encoding, tags):
    labels = align_labels(encoding, tags)
    for word_tags in tags:
        word_tags.append(IGNORE)
    return labels


def align_stores_labels_in_the_encoding(encoding, tags):
    """Adds the labels to the caller's encoding (inputs untouched)."""
    encoding["labels"] = align_labels(encoding, tags)
    return encoding["labels"]


def align_masks_input_ids_in_place(encoding, tags):
    """Reuses encoding['input_ids'] as the label buffer (inputs untouched)."""
    labels = encoding["input_ids"]
    labels.copy_(align_labels(encoding, tags))
    return labels.clone()


def align_int32(encoding, tags):
    return align_labels(encoding, tags).to(torch.int32)


WRONG_ALIGN = [
    align_every_piece,
    align_last_piece,
    align_special_tokens_labelled,
    align_specials_zero,
    align_off_by_one_minus,
    align_off_by_one_plus,
    align_by_position,
    align_own_counter,
    align_padding_zero,
    align_ignores_truncation,
    align_word_to_tokens,
    align_returns_list,
    align_returns_float,
    align_unpadded_rows,
    align_mutates_tags,
    align_stores_labels_in_the_encoding,
    align_masks_input_ids_in_place,
    align_int32,
]


def align_hf_run_ner(encoding, tags):
    """Hugging Face's run_ner.py alignment (label_all_tokens=False), glued at the interface."""
    labels = []
    for i, label in enumerate(tags):
        word_ids = encoding.word_ids(batch_index=i)
        previous_word_idx = None
        label_ids = []
        for word_idx in word_ids:
            if word_idx is None:
                label_ids.append(-100)
            elif word_idx != previous_word_idx:
                label_ids.append(label[word_idx])
            else:
                label_ids.append(-100)
            previous_word_idx = word_idx
        labels.append(label_ids)
    return torch.tensor(labels)


def align_vectorised(encoding, tags):
    """Word ids as a tensor (-1 for None), first pieces found by comparing with a shift."""
    ids = torch.tensor(
        [[-1 if w is None else w for w in encoding.word_ids(i)] for i in range(len(tags))]
    )
    previous = torch.cat([torch.full_like(ids[:, :1], -1), ids[:, :-1]], dim=1)
    first = (ids >= 0) & (ids != previous)
    labels = torch.full_like(ids, IGNORE)
    for i, word_tags in enumerate(tags):
        table = torch.tensor(word_tags)
        labels[i, first[i]] = table[ids[i, first[i]]]
    return labels


RIGHT_ALIGN = [align_labels, align_hf_run_ner, align_vectorised]


@pytest.mark.parametrize("right", RIGHT_ALIGN, ids=lambda f: f.__name__)
def test_align_right_variants_pass(right):
    result = check.align_labels(right, None, raise_on_failure=False)
    assert result.passed, result.message


def test_align_does_not_use_the_notebooks_tokenizer():
    """The notebook's tokenizer is not trusted: even a broken one does not change the verdict."""

    class Broken:
        is_fast = False

    assert check.align_labels(align_labels, Broken(), raise_on_failure=False).passed


def test_align_stub_is_not_implemented(tokenizer):
    assert check.align_labels(stub, tokenizer, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize("wrong", WRONG_ALIGN, ids=lambda f: f.__name__)
def test_align_wrong_is_rejected(tokenizer, wrong):
    result = check.align_labels(wrong, tokenizer, raise_on_failure=False)
    assert result.status == FAILED, f"{wrong.__name__} was accepted"


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (align_stores_labels_in_the_encoding, "inputs untouched"),
        (align_masks_input_ids_in_place, "inputs untouched"),
        (align_mutates_tags, "changed `tags` in place"),
        (align_every_piece, "piece 2 of"),
        (align_padding_zero, "padding"),
        (align_int32, "dtype"),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_align_messages_name_the_property(wrong, phrase):
    result = check.align_labels(wrong, None, raise_on_failure=False)
    assert result.status == FAILED and phrase in result.message, result.message


def test_align_hints_point_at_the_principle():
    every = check.align_labels(align_every_piece, None, raise_on_failure=False)
    assert "FIRST piece" in every.hint and "word_ids(" not in (every.hint or "")
    special = check.align_labels(align_special_tokens_labelled, None, raise_on_failure=False)
    assert "[SEP]" in special.message or "[CLS]" in special.message


def test_reference_equals_the_hf_alignment_on_every_case():
    """The trusted reference (the first-piece rule) equals Hugging Face's run_ner alignment."""
    for case in check.align_labels_spec.cases():
        encoding, tags = case.inputs["encoding"], case.inputs["tags"]
        assert torch.equal(check._align(encoding, tags), align_hf_run_ner(encoding, tags))


def test_the_check_module_stores_no_expected_labels():
    """Piece counts and expected labels are computed by the tokenizer on the trusted side."""
    assert not hasattr(check, "_expected_labels")
    assert all(isinstance(word, str) for sentence in check.SENTENCES for word in sentence)


# --- Exercise 7.2: word_predictions -------------------------------------------------------


def word_predictions(word_ids, token_predictions, num_words):
    if isinstance(token_predictions, torch.Tensor):
        token_predictions = token_predictions.tolist()
    out = [-1] * num_words
    previous = None
    for word_id, prediction in zip(word_ids, token_predictions, strict=True):
        if word_id is not None and word_id != previous:
            out[word_id] = int(prediction)
        previous = word_id
    return out


def words_last_piece(word_ids, token_predictions, num_words):
    out = [-1] * num_words
    for word_id, prediction in zip(word_ids, list(token_predictions), strict=True):
        if word_id is not None:
            out[word_id] = int(prediction)
    return out


def words_keep_specials(word_ids, token_predictions, num_words):
    return [int(p) for p in list(token_predictions)]


def words_skip_specials_only(word_ids, token_predictions, num_words):
    """One prediction per non-special TOKEN: continuation pieces counted as words."""
    return [int(p) for w, p in zip(word_ids, list(token_predictions), strict=True) if w is not None]


def words_drop_missing(word_ids, token_predictions, num_words):
    full = word_predictions(word_ids, token_predictions, num_words)
    return [p for p in full if p != -1]


def words_missing_zero(word_ids, token_predictions, num_words):
    return [0 if p == -1 else p for p in word_predictions(word_ids, token_predictions, num_words)]


def words_shifted(word_ids, token_predictions, num_words):
    """Reads the prediction one token too late (index + 1)."""
    preds = [int(p) for p in list(token_predictions)]
    out = [-1] * num_words
    previous = None
    for j, word_id in enumerate(word_ids):
        if word_id is not None and word_id != previous:
            out[word_id] = preds[min(j + 1, len(preds) - 1)]
        previous = word_id
    return out


def words_returns_tensor_of_floats(word_ids, token_predictions, num_words):
    return torch.tensor(word_predictions(word_ids, token_predictions, num_words), dtype=torch.float)


def words_drops_specials_in_place(word_ids, token_predictions, num_words):
    """Removes [CLS] from the caller's word_ids list (inputs untouched)."""
    predictions = [int(p) for p in list(token_predictions)]
    del word_ids[0]
    return word_predictions(word_ids, predictions[1:], num_words)


def words_marks_predictions_in_place(word_ids, token_predictions, num_words):
    """Writes -1 into the caller's predictions at special tokens (inputs untouched)."""
    for j, word_id in enumerate(word_ids):
        if word_id is None:
            token_predictions[j] = -1
    return word_predictions(word_ids, token_predictions, num_words)


def words_numpy_ints(word_ids, token_predictions, num_words):
    import numpy as np

    return list(np.array(word_predictions(word_ids, token_predictions, num_words)))


def words_first_seen_dict(word_ids, token_predictions, num_words):
    """Right: a dict of first positions, filled only when a word id is seen the first time."""
    first = {}
    for j, word_id in enumerate(word_ids):
        if word_id is not None:
            first.setdefault(word_id, j)
    predictions = list(token_predictions)
    return [int(predictions[first[k]]) if k in first else -1 for k in range(num_words)]


WRONG_WORDS = [
    words_drops_specials_in_place,
    words_marks_predictions_in_place,
    words_last_piece,
    words_keep_specials,
    words_skip_specials_only,
    words_drop_missing,
    words_missing_zero,
    words_shifted,
    words_returns_tensor_of_floats,
    words_numpy_ints,  # "a list of num_words Python ints": NumPy ints are not
]


@pytest.mark.parametrize("right", [word_predictions, words_first_seen_dict])
def test_words_right_variants_pass(tokenizer, right):
    result = check.word_predictions(right, tokenizer, raise_on_failure=False)
    assert result.passed, result.message


@pytest.mark.parametrize("wrong", [words_drops_specials_in_place, words_marks_predictions_in_place])
def test_words_inputs_untouched(wrong):
    result = check.word_predictions(wrong, raise_on_failure=False)
    assert result.status == FAILED and "inputs untouched" in result.message, result.message


def test_words_reference_passes_without_tokenizer():
    assert check.word_predictions(word_predictions, raise_on_failure=False).passed


def test_words_stub_is_not_implemented(tokenizer):
    result = check.word_predictions(stub, tokenizer, raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED


@pytest.mark.parametrize("wrong", WRONG_WORDS, ids=lambda f: f.__name__)
def test_words_wrong_is_rejected(tokenizer, wrong):
    result = check.word_predictions(wrong, tokenizer, raise_on_failure=False)
    assert result.status == FAILED, f"{wrong.__name__} was accepted"


def test_round_trip_on_the_treebank(tokenizer):
    """Aligning gold tags and reading them back gives the gold tags (truncated words: -1)."""
    from course import data

    test = data.load_ud_ewt()["test"]
    sentences = test.select(range(min(200, len(test))))  # the bundled samples have 60
    words = [list(w) for w in sentences["tokens"]]
    tags = [list(t) for t in sentences["upos"]]
    encoding = tokenizer(
        words,
        is_split_into_words=True,
        truncation=True,
        max_length=20,
        padding=True,
        return_tensors="pt",
    )
    labels = align_labels(encoding, tags)
    for i, gold in enumerate(tags):
        back = word_predictions(encoding.word_ids(i), labels[i], len(gold))
        kept = [g for g, b in zip(gold, back, strict=True) if b != -1]
        assert back[: len(kept)] == kept and all(b == -1 for b in back[len(kept) :])


def _solution_functions() -> dict:
    """align_labels and word_predictions as written in the solution notebook."""
    import nbformat

    from course.tooling.nbtools import SOLUTIONS, strip_markers

    notebook = nbformat.read(SOLUTIONS / "07_pos_tagging.ipynb", as_version=4)
    namespace = {"torch": torch, "IGNORE_INDEX": IGNORE}
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.source.startswith(
            ("def align_labels", "def word_predictions")
        ):
            exec(strip_markers(cell.source), namespace)
    return namespace


def test_the_solution_notebook_passes_its_checks(tokenizer):
    functions = _solution_functions()
    assert check.align_labels(functions["align_labels"], tokenizer, raise_on_failure=False)
    assert check.word_predictions(functions["word_predictions"], tokenizer, raise_on_failure=False)


# --- wrong implementations by family of mistake, and right
# variants from the field's code (the OLD checks' verdicts are in the report) ---------------


def align_numpy(encoding, tags):
    return align_labels(encoding, tags).numpy()


def align_rows_as_list_of_tensors(encoding, tags):
    return list(align_labels(encoding, tags))


def align_reads_the_global_tokenizer_layout(encoding, tags):
    """Skips the first token of each row instead of reading word ids (one token per word)."""
    labels = torch.full_like(encoding["input_ids"], IGNORE)
    for i, word_tags in enumerate(tags):
        length = int(encoding["attention_mask"][i].sum())
        for j, tag in enumerate(word_tags[: length - 2]):
            labels[i, j + 1] = tag
    return labels


def align_adds_special_tokens_mask(encoding, tags):
    """Adds a key to the caller's encoding on the way (inputs untouched)."""
    encoding["word_ids"] = torch.tensor(
        [[-1 if w is None else w for w in encoding.word_ids(i)] for i in range(len(tags))]
    )
    return align_labels(encoding, tags)


def words_tuple(word_ids, token_predictions, num_words):
    return tuple(word_predictions(word_ids, token_predictions, num_words))


def words_long_tensor(word_ids, token_predictions, num_words):
    return torch.tensor(word_predictions(word_ids, token_predictions, num_words))


def words_through_numpy(word_ids, token_predictions, num_words):
    """Converts tensor predictions with .numpy() (fails for predictions on a GPU)."""
    if isinstance(token_predictions, torch.Tensor):
        token_predictions = token_predictions.numpy().tolist()
    return word_predictions(word_ids, token_predictions, num_words)


def words_missing_is_none(word_ids, token_predictions, num_words):
    return [
        None if p == -1 else p for p in word_predictions(word_ids, token_predictions, num_words)
    ]


ALIGN_FAMILY_WRONG = {
    "1_numpy_array": align_numpy,
    "1_list_of_row_tensors": align_rows_as_list_of_tensors,
    "values_one_token_per_word_layout": align_reads_the_global_tokenizer_layout,
    "inputs_adds_a_key_to_the_encoding": align_adds_special_tokens_mask,
}
WORDS_FAMILY_WRONG = {
    "1_tuple": words_tuple,
    "1_long_tensor": words_long_tensor,
    "1_none_for_missing": words_missing_is_none,
    "2_through_numpy": words_through_numpy,
}


def align_hf_token_classification_notebook(encoding, tags):
    """tokenize_and_align_labels of Hugging Face's token-classification notebook
    (label_all_tokens=False), glued at the interface."""
    labels = []
    for i, label in enumerate(tags):
        word_ids = encoding.word_ids(batch_index=i)
        previous_word_idx = None
        label_ids = []
        for word_idx in word_ids:
            if word_idx is None:
                label_ids.append(-100)
            elif word_idx != previous_word_idx:
                label_ids.append(label[word_idx])
            else:
                label_ids.append(-100)
            previous_word_idx = word_idx
        labels.append(label_ids)
    return torch.tensor(labels, dtype=torch.long)


def words_pipeline_first_strategy(word_ids, token_predictions, num_words):
    """The "first" aggregation of Hugging Face's token-classification pipeline, glued: a
    word's prediction is its first sub-token's."""
    predictions = (
        token_predictions.tolist()
        if isinstance(token_predictions, torch.Tensor)
        else list(token_predictions)
    )
    words, seen = [-1] * num_words, set()
    for word_id, prediction in zip(word_ids, predictions, strict=True):
        if word_id is not None and word_id not in seen:
            seen.add(word_id)
            words[word_id] = int(prediction)
    return words


@pytest.mark.parametrize("wrong", ALIGN_FAMILY_WRONG.values(), ids=ALIGN_FAMILY_WRONG.keys())
def test_align_family_wrong(wrong):
    assert check.align_labels(wrong, None, raise_on_failure=False).status == FAILED


@pytest.mark.parametrize("wrong", WORDS_FAMILY_WRONG.values(), ids=WORDS_FAMILY_WRONG.keys())
def test_words_family_wrong(wrong):
    assert check.word_predictions(wrong, None, raise_on_failure=False).status == FAILED


def test_family_right_variants():
    right = check.align_labels(align_hf_token_classification_notebook, raise_on_failure=False)
    assert right.passed, right.message
    right = check.word_predictions(words_pipeline_first_strategy, raise_on_failure=False)
    assert right.passed, right.message
