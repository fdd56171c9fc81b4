"""Notebook 08: the intent classifier and its out-of-scope rule (a confidence threshold on
the softmax, chosen on validation data)."""

from __future__ import annotations

from style import ACCENT, SHAPE, Canvas


def draw() -> Canvas:
    c = Canvas(100, 70)
    x = 34
    c.box(x, 4, 40, 4, '"can you book me a table for two"')
    c.arrow([(x, 6), (x, 10.4)])
    c.box(x, 12.5, 40, 4, "BERT tokenizer ([CLS] … [SEP], padded)", "embed", size=8.5)
    c.arrow([(x, 14.5), (x, 19.4)], "input_ids, attention_mask (B, L)")
    c.box(x, 22, 56, 5, "encoder: Model A (notebook 05's) or Model B (pretrained BERT)",
          "attn", size=8.5)
    c.arrow([(x, 24.5), (x, 29.4)], "hidden (B, L, D)")
    c.box(x, 32, 56, 5, "Model A: masked_mean_pool(hidden, token_mask)\n"
          "Model B: the [CLS] vector through BERT's pooler", "data", size=8.5)
    c.arrow([(x, 34.5), (x, 39.4)], "(B, D)")
    c.box(x, 42, 30, 5, "Linear(D, 150)", "linear", size=9)
    c.arrow([(x, 44.5), (x, 48.4)], "logits (N, C), C = 150 intents")
    c.box(x, 52, 56, 7, "apply_threshold(logits, threshold, oos_id)\n"
          r"$p = \max_c\, \mathrm{softmax}(z)_c$,  $\hat c = \arg\max_c\, z_c$", "softmax",
          size=8.5)
    c.arrow([(x - 12, 55.5), (x - 12, 63.5)], r"$p \geq$ threshold", side="left")
    c.text(x - 12, 65.5, r"intent $\hat c$", size=9.5, va="bottom", fontweight="bold")
    c.arrow([(x + 12, 55.5), (x + 12, 63.5)], r"$p <$ threshold", colour=ACCENT)
    c.text(x + 12, 65.5, "oos_id: out of scope", size=9.5, va="bottom", colour=ACCENT,
           fontweight="bold")
    c.box(84, 52, 26, 9, "choose_threshold\non validation logits:\nlargest threshold within\n"
          "max_drop of the accuracy", "norm", size=7.5)
    c.arrow([(71, 52), (x + 28.2, 52)])
    c.text(84, 44.5, "apply_threshold returns (N,) class ids", size=7.5, colour=SHAPE,
           va="top")
    return c


NOTEBOOK = "08_intent_classification"  # the solution notebook that shows it
DIAGRAMS = {"intent.png": draw}
