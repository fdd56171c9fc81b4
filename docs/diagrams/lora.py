"""Notebook 10: LoRA's low-rank path beside a frozen linear layer (Hu et al., 2021), in the
notebook's notation, h = W_0 x + (alpha / r) B A x, and with the names of ``LoRALinear``:
base(x) + scale * dropout(x) @ lora_A.T @ lora_B.T."""

from __future__ import annotations

from style import ACCENT, SHAPE, Canvas


def draw() -> Canvas:
    c = Canvas(88, 66)
    x_base, x_lora, x_in = 22, 60, 40
    c.text(x_in, 63.5, r"$h = W_0\, x + \frac{\alpha}{r}\, B A x$", size=12, va="top")
    c.box(x_in, 4, 30, 4, "x  (…, k),  k = in_features")
    c.dot(x_in, 9)
    c.arrow([(x_in, 6), (x_in, 9)], head=False)
    c.arrow([(x_in, 9), (x_base, 9), (x_base, 17.5)])
    c.arrow([(x_in, 9), (x_lora, 9), (x_lora, 12.9)])
    c.box(x_base, 28, 30, 21, "base: the pretrained nn.Linear\n"
          r"$W_0 \in \mathbb{R}^{d \times k}$ and its bias" "\n\nfrozen\n(requires_grad=False)",
          "frozen", size=8.5)
    c.box(x_lora, 15.5, 14, 5, "dropout", "data", size=8.5)
    c.arrow([(x_lora, 18), (x_lora, 21.4)])
    c.box(x_lora, 24, 32, 5, r"lora_A $= A$  (r, k): random", "linear", size=8.5, edge=ACCENT)
    c.arrow([(x_lora, 26.5), (x_lora, 31.4)], r"(…, r),  $r \ll \min(d, k)$", size=8)
    c.box(x_lora, 34, 32, 5, r"lora_B $= B$  (d, r): zeros", "linear", size=8.5, edge=ACCENT)
    c.arrow([(x_lora, 36.5), (x_lora, 40.4)], "(…, d)", size=8)
    c.box(x_lora, 43, 20, 5, r"× scale $= \alpha / r$", "data", size=8.5)
    c.arrow([(x_base, 38.5), (x_base, 50), (x_in - 1.4, 50)], r"base(x) $= W_0 x + b$",
            side="left", at=0.35)
    c.arrow([(x_lora, 45.5), (x_lora, 50), (x_in + 1.4, 50)], colour=ACCENT)
    c.add(x_in, 50, 1.4)
    c.arrow([(x_in, 51.4), (x_in, 57.0)], "h  (…, d),  d = out_features")
    c.text(x_lora + 17, 29, "trained:\nlora_A and\nlora_B only", size=8, colour=ACCENT,
           ha="left")
    c.text(x_lora + 3, 57.5, "merge for inference:\n"
           r"$W_0 \leftarrow W_0 + \alpha/r \cdot BA$", size=8, colour=SHAPE, ha="left")
    return c


NOTEBOOK = "10_lora"  # the solution notebook that shows it
DIAGRAMS = {"lora.png": draw}
