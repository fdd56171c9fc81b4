"""Notebook 01: from text to the vectors a Transformer reads (the BERT tokenizer's steps, on
the notebook's own example, then ``TokenEmbedding``)."""

from __future__ import annotations

from style import SHAPE, Canvas

ROWS = [  # (the step that produced the row, its items, colour)
    ("", ["an unwatchable mess"], "data"),
    ("lower-case, split into words", ["an", "unwatchable", "mess"], "data"),
    ("WordPiece: the longest vocabulary piece from the left, again and again",
     ["an", "un", "##watch", "##able", "mess"], "embed"),
    ("add [CLS] first and [SEP] last, pad with [PAD] to the batch's length",
     ["[CLS]", "an", "un", "##watch", "##able", "mess", "[SEP]", "[PAD]", "[PAD]"], "embed"),
]
CENTRE, STEP = 46, 10


def row(c: Canvas, y: float, items: list[str], kind: str) -> None:
    width = 8.2 if len(items) > 3 else 14
    x0 = CENTRE - width * len(items) / 2
    for i, item in enumerate(items):
        box_w = width - 0.8 if len(items) > 1 else 30
        c.box(x0 + width * (i + 0.5), y, box_w, 3.6, item, kind, size=8.5,
              dashed=item == "[PAD]")


def draw() -> Canvas:
    c = Canvas(92, 58)
    y = 55
    for number, (label, items, kind) in enumerate(ROWS):
        if number:
            c.arrow([(CENTRE, y + STEP - 2.0), (CENTRE, y + 2.0)])
            c.text(CENTRE + 1.2, y + STEP / 2, label, size=8, ha="left", colour="#555555",
                   style="italic")
        row(c, y, items, kind)
        y -= STEP
    y += STEP  # the last row
    c.text(CENTRE, y - 6.5,
           "input_ids (B, L): each token's row number in the vocabulary (30,522 entries)\n"
           "attention_mask (B, L): 1 on real tokens, 0 on [PAD]\n"
           "word_ids(): None 0 1 1 1 2 None None None  (the word each token came from)",
           size=8, colour=SHAPE)
    c.arrow([(CENTRE, y - 2.0), (CENTRE, y - 3.4)], head=False)
    c.arrow([(CENTRE, y - 10.0), (CENTRE, y - 14.5)], "input_ids (B, L)")
    c.box(CENTRE, y - 17, 60, 5,
          r"TokenEmbedding: rows of nn.Embedding(vocab_size, d_model),  $\times\sqrt{d_\mathrm{model}}$",
          "embed", size=9)
    c.arrow([(CENTRE, y - 19.5), (CENTRE, y - 24.0)], "(B, L, d_model): one vector per token")
    return c


NOTEBOOK = "01_tokens"  # the solution notebook that shows it
DIAGRAMS = {"tokens.png": draw}
