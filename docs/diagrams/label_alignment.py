"""Notebook 07: one tag per word, one label per subword token. The tag goes on a word's
first piece; every other token gets -100, which the loss skips."""

from __future__ import annotations

from style import ACCENT, SHAPE, Canvas

WORDS = [("an", "DET"), ("unwatchable", "ADJ"), ("mess", "NOUN")]
TOKENS = ["[CLS]", "an", "un", "##watch", "##able", "mess", "[SEP]", "[PAD]"]
WORD_IDS = [None, 0, 1, 1, 1, 2, None, None]
STEP, X0 = 9.0, 20.0


def draw() -> Canvas:
    c = Canvas(96, 50)
    xs = [X0 + STEP * i for i in range(len(TOKENS))]
    # The words and their tags, centred over their pieces.
    word_x = {}
    for k, (word, tag) in enumerate(WORDS):
        pieces = [x for x, w in zip(xs, WORD_IDS, strict=True) if w == k]
        word_x[k] = sum(pieces) / len(pieces)
        width = STEP * len(pieces) - 1.0
        c.box(word_x[k], 44, width, 3.6, word, "data", size=8.5)
        c.box(word_x[k], 39.5, width, 3.4, tag, "softmax", size=8.5)
    c.text(X0 - 5, 44, "words", size=8.5, ha="right", colour=SHAPE)
    c.text(X0 - 5, 39.5, "tags", size=8.5, ha="right", colour=SHAPE)
    # The tokens, their word ids and their labels.
    rows = {"tokens": 27.0, "word_ids()": 21.0, "labels": 10.0}
    for x, token, word in zip(xs, TOKENS, WORD_IDS, strict=True):
        c.box(x, rows["tokens"], STEP - 1.0, 3.6, token, "embed", size=8, dashed=token == "[PAD]")
        c.text(x, rows["word_ids()"], "None" if word is None else str(word), size=8.5,
               colour=SHAPE)
        first = word is not None and (x == xs[0] or WORD_IDS[xs.index(x) - 1] != word)
        label = WORDS[word][1] if first else "-100"
        c.box(x, rows["labels"], STEP - 1.0, 3.4, label, "softmax" if first else "mask",
              size=8)
        if first:  # the word's tag goes down to its first piece, and on to the labels
            c.arrow([(x, 37.8), (x, 28.8)], colour=ACCENT)
            c.arrow([(x, 19.5), (x, 11.7)], colour=ACCENT)
    for name, y in rows.items():
        c.text(X0 - 5, y, name, size=8.5, ha="right", colour=SHAPE)
    c.text(xs[0] - 4.6, 33.2, "tokenizer(words, is_split_into_words=True)", size=8,
           ha="left", colour="#555555", style="italic")
    c.text(X0 - 9, 4.0, "the tag on a word's first piece; -100 (skipped by cross-entropy) on "
           "continuation pieces, [CLS], [SEP] and [PAD].\nword_predictions reads the "
           "predictions back at the same first pieces: one tag per word.", size=7.5,
           ha="left", va="center", colour="#555555", style="italic")
    return c


NOTEBOOK = "07_pos_tagging"  # the solution notebook that shows it
DIAGRAMS = {"label_alignment.png": draw}
