"""Notebook 06: BERT's masked-token objective (Devlin et al., 2019, section 3.1) and the
classification head that fine-tuning trains on top of the [CLS] vector."""

from __future__ import annotations

from style import ACCENT, SHAPE, Canvas

TOKENS = ["[CLS]", "a", "gripping", "film", ".", "[SEP]"]
MASKED = ["[CLS]", "a", "[MASK]", "film", ".", "[SEP]"]
LABELS = ["-100", "-100", "gripping", "-100", "-100", "-100"]


def tokens_row(c: Canvas, x0: float, y: float, items: list[str], kind: str = "embed",
               highlight: int | None = None, size: float = 8.0) -> list[float]:
    xs = [x0 + 7.0 * i for i in range(len(items))]
    for i, (x, item) in enumerate(zip(xs, items, strict=True)):
        c.box(x, y, 6.4, 3.4, item, "attn" if i == highlight else kind, size=size)
    return xs


def draw() -> Canvas:
    c = Canvas(128, 62)
    # Left: masked language modelling.
    c.text(32, 59, "Pre-training: masked language modelling", size=10, fontweight="bold")
    xs = tokens_row(c, 14, 4, TOKENS)
    c.text(xs[0] - 3.6, 4, "input_ids", size=8, ha="right", colour=SHAPE)
    for x in xs:
        c.arrow([(x, 5.7), (x, 10.3)], head=True)
    c.text(32, 55.5, "mask_tokens: each ordinary token selected with probability 0.15;\n"
           "selected → [MASK] 80%, random id 10%, unchanged 10%", size=7.5, va="top",
           colour="#555555", style="italic")
    tokens_row(c, 14, 12, MASKED, highlight=2)
    c.text(xs[0] - 3.6, 12, "masked_ids", size=8, ha="right", colour=SHAPE)
    c.arrow([(xs[2], 13.7), (xs[2], 17.9)], head=True)
    c.box((xs[0] + xs[-1]) / 2, 22, 44, 8, "BERT encoder: self-attention blocks,\nno causal mask "
          "(every token sees both sides)", "attn", size=8.5)
    c.arrow([(xs[2], 26), (xs[2], 31.4)], r"$h$ (B, L, d)", side="left")
    c.box(xs[2], 34, 22, 5, "MLM head", "linear", size=8.5)
    c.arrow([(xs[2], 36.5), (xs[2], 41.4)], "logits (B, L, vocab_size)", side="left")
    c.box(xs[2], 44, 22, 5, "cross-entropy", "softmax", size=8.5)
    tokens_row(c, 14, 50, LABELS, kind="data", size=7.5)
    c.arrow([(xs[2], 48.3), (xs[2], 46.6)], colour=ACCENT)
    c.text(xs[0] - 3.6, 50, "labels", size=8, ha="right", colour=SHAPE)
    c.text(xs[3] + 3.6, 47.5, "-100: ignored by the loss", size=7.5, ha="left",
           colour="#555555", style="italic")
    # Right: fine-tuning for classification.
    c.ax.plot([74, 74], [2, 60], color="#bbbbbb", lw=0.8)
    x = 102
    c.text(x, 59, "Fine-tuning: a classifier on [CLS]", size=10, fontweight="bold")
    xs = tokens_row(c, 84.5, 4, TOKENS)
    for x_tok in xs:
        c.arrow([(x_tok, 5.7), (x_tok, 9.9)], head=True)
    c.box(x, 14, 44, 8, "the pretrained BERT encoder", "attn", size=8.5)
    c.arrow([(xs[0], 18), (xs[0], 23.9)], r"$h_{[CLS]}$ (B, d)", side="right")
    c.box(xs[0] + 8, 26.5, 30, 5, r"pooler: $\tanh(W_p\, h_{[CLS]} + b_p)$", "linear",
          size=8.5)
    c.arrow([(xs[0] + 8, 29), (xs[0] + 8, 33.9)], "(B, d)")
    c.box(xs[0] + 8, 36.5, 30, 5, r"classifier: $W_c\,\cdot + b_c$  (new, random)", "linear",
          size=8.5)
    c.arrow([(xs[0] + 8, 39), (xs[0] + 8, 44.9)], "logits (B, 2): negative, positive")
    c.box(xs[0] + 8, 47.5, 30, 5, "cross-entropy with labels (B,)", "softmax", size=8.5)
    c.text(x, 55.5, "BertForSequenceClassification: the encoder and this head", size=7.5,
           colour="#555555", style="italic", va="top")
    return c


NOTEBOOK = "06_bert_finetuning"  # the solution notebook that shows it
DIAGRAMS = {"bert.png": draw}
