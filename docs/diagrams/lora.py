"""Notebook 10: LoRA's low-rank path beside a frozen linear layer (Hu et al., 2021):
``LoRALinear``'s forward, base(x) + (alpha / r) * dropout(x) @ lora_A.T @ lora_B.T."""

from __future__ import annotations

from style import ACCENT, SHAPE, Canvas


def draw() -> Canvas:
    c = Canvas(84, 62)
    x_base, x_lora, x_in = 22, 58, 40
    c.box(x_in, 4, 26, 4, "x  (…, in_features)")
    c.dot(x_in, 9)
    c.arrow([(x_in, 6), (x_in, 9)], head=False)
    c.arrow([(x_in, 9), (x_base, 9), (x_base, 18.5)])
    c.arrow([(x_in, 9), (x_lora, 9), (x_lora, 13.4)])
    c.box(x_base, 28, 28, 19, "base: nn.Linear\n$W_0$ (out_features, in_features)\n"
          "and bias\n\nfrozen\n(requires_grad=False)", "frozen", size=8.5)
    c.box(x_lora, 16, 14, 5, "dropout", "data", size=8.5)
    c.arrow([(x_lora, 18.5), (x_lora, 22.4)])
    c.box(x_lora, 25, 30, 5, "lora_A (r, in_features): random", "linear", size=8.5,
          edge=ACCENT)
    c.arrow([(x_lora, 27.5), (x_lora, 31.4)], "(…, r),  r ≪ in_features", size=7.5)
    c.box(x_lora, 34, 30, 5, "lora_B (out_features, r): zeros", "linear", size=8.5,
          edge=ACCENT)
    c.arrow([(x_lora, 36.5), (x_lora, 40.4)])
    c.box(x_lora, 43, 18, 5, r"$\times$ scale = alpha / r", "data", size=8.5)
    c.arrow([(x_base, 37.5), (x_base, 50), (x_in - 1.4, 50)], "base(x)", side="left", at=0.4)
    c.arrow([(x_lora, 45.5), (x_lora, 50), (x_in + 1.4, 50)], colour=ACCENT)
    c.add(x_in, 50, 1.4)
    c.arrow([(x_in, 51.4), (x_in, 56.5)], "(…, out_features)")
    c.text(x_lora + 16, 30, "trains:\nonly lora_A\nand lora_B", size=8, colour=ACCENT,
           ha="left")
    c.text(x_in, 58.2, "merge: base.weight += (alpha / r) * lora_B @ lora_A",
           size=8, colour=SHAPE, va="bottom")
    return c


NOTEBOOK = "10_lora"  # the solution notebook that shows it
DIAGRAMS = {"lora.png": draw}
