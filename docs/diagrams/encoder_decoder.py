"""Notebook 05: the encoder-decoder Transformer as the notebook builds it (pre-LN), with the
encoder block, the decoder block and its cross-attention, and the shapes between them.

Modelled on Figure 1 of Vaswani et al. (2017), redrawn: the LayerNorm sits in front of each
sub-layer (pre-LN, ``PreNormResidual``) instead of after each addition, and each stack ends
with the final LayerNorm that pre-LN needs. N is the number of blocks (``num_layers``).
(This drawing was ``course.viz.transformer_diagram`` until the diagrams moved here.)
"""

from __future__ import annotations

from style import ACCENT, Canvas

WIDTH, ENC_X, DEC_X = 26.0, 27.0, 75.0


def sublayer(c: Canvas, x: float, y: float, label: str, kind: str, side: int,
             height: float = 6.0) -> tuple[float, float]:
    """One pre-LN sub-layer, x + sublayer(LayerNorm(x)), drawn upwards from height y.

    ``side`` (-1 left, +1 right) is where the residual path runs past the two boxes. Returns
    the height of its top (the residual addition) and of the centre of the sub-layer's box.
    """
    fork, norm_y = y + 1.8, y + 7.0
    body_y = norm_y + 2.0 + 2.5 + height / 2
    add_y = body_y + height / 2 + 3.5
    c.arrow([(x, y), (x, norm_y - 2.0)])
    c.box(x, norm_y, WIDTH * 0.7, 4.0, "LayerNorm", "norm")
    c.arrow([(x, norm_y + 2.0), (x, body_y - height / 2)])
    c.box(x, body_y, WIDTH, height, label, kind)
    c.arrow([(x, body_y + height / 2), (x, add_y - 1.6)])
    c.add(x, add_y, 1.6)
    outer = x + side * (WIDTH / 2 + 3.0)
    c.dot(x, fork)
    c.arrow([(x, fork), (outer, fork), (outer, add_y), (x + side * 1.6, add_y)])
    return add_y + 1.6, body_y


def stack_input(c: Canvas, x: float, title: str, caption: str, shape: str) -> float:
    c.text(x, 1.5, caption, size=9, style="italic")
    c.text(x, -3.0, title, size=13, fontweight="bold")
    c.arrow([(x, 3.5), (x, 6.0)])
    c.box(x, 9.0, WIDTH, 6.0, "TokenEmbedding", "embed")
    c.arrow([(x, 12.0), (x, 16.4)])
    c.add(x, 18.0, 1.6)
    label_x = x - WIDTH / 2 + 1.5
    c.text(label_x, 18.0, "Sinusoidal\nPositional\nEncoding", size=8, ha="right")
    c.arrow([(label_x + 0.6, 18.0), (x - 1.6, 18.0)])
    c.text(x + 2.4, 18.0, shape, size=8, colour="#1f5f99", ha="left")
    return 19.6  # the top of the addition


def repeat_frame(c: Canvas, x: float, bottom: float, top: float, side: int, name: str) -> None:
    left = x - WIDTH / 2 - 5.5
    c.frame(left, bottom, left + WIDTH + 11.0, top)
    label_x = left - 1.2 if side < 0 else left + WIDTH + 11.0 + 1.2
    c.text(label_x, (bottom + top) / 2, "N×", size=13, fontweight="bold",
           ha="right" if side < 0 else "left")
    c.text(left + 1.2, top - 1.4, name, size=8.5, colour="#555555", style="italic", ha="left")


def draw() -> Canvas:
    c = Canvas(92, 118)
    ax = c.ax
    # Encoder (left): residual paths on the left.
    y = stack_input(c, ENC_X, "Encoder", "src_ids  (B, L_src)", "(B, L_src, d_model)")
    frame_bottom = y + 2.4
    y, _ = sublayer(c, ENC_X, y + 2.4, "MultiHeadAttention\n(self-attention)", "attn", -1, 7.0)
    y, _ = sublayer(c, ENC_X, y, "FeedForward", "ffn", -1)
    repeat_frame(c, ENC_X, frame_bottom, y + 3.5, -1, "EncoderBlock")
    c.arrow([(ENC_X, y), (ENC_X, y + 6.0)])
    c.box(ENC_X, y + 8.0, WIDTH * 0.7, 4.0, "final LayerNorm", "norm")
    memory_top = y + 10.0

    # Decoder (right): residual paths on the right.
    y = stack_input(c, DEC_X, "Decoder", "tgt_ids, shifted right (<bos> first)  (B, L_tgt)",
                    "(B, L_tgt, d_model)")
    frame_bottom = y + 2.4
    y, _ = sublayer(c, DEC_X, y + 2.4, "MultiHeadAttention\n(masked self-attention,\ncausal)",
                    "attn", +1, 7.0)
    y, cross_y = sublayer(c, DEC_X, y, "MultiHeadAttention\n(cross-attention)", "attn", +1, 7.0)
    y, _ = sublayer(c, DEC_X, y, "FeedForward", "ffn", +1)
    repeat_frame(c, DEC_X, frame_bottom, y + 3.5, +1, "DecoderBlock")
    c.arrow([(DEC_X, y), (DEC_X, y + 6.0)])
    c.box(DEC_X, y + 8.0, WIDTH * 0.7, 4.0, "final LayerNorm", "norm")
    c.arrow([(DEC_X, y + 10.0), (DEC_X, y + 13.0)])
    c.box(DEC_X, y + 15.5, WIDTH * 0.7, 5.0, "Linear", "linear")
    c.arrow([(DEC_X, y + 18.0), (DEC_X, y + 23.0)], "logits (B, L_tgt, tgt_vocab_size)",
            side="left")
    c.text(DEC_X, y + 24.0, "softmax: in the loss, or greedy_decode's argmax", size=8.5,
           va="bottom", style="italic")

    # The memory: the encoder's output feeds every decoder block's cross-attention.
    gap_x = (ENC_X + WIDTH / 2 + 5.5 + DEC_X - WIDTH / 2 - 5.5) / 2
    c.arrow([(ENC_X, memory_top), (ENC_X, memory_top + 3.0), (gap_x, memory_top + 3.0),
             (gap_x, cross_y), (DEC_X - WIDTH / 2, cross_y)], colour=ACCENT)
    c.text(ENC_X, memory_top + 4.0, "memory (B, L_src, d_model):\nkeys and values of every "
           "cross-attention,\nwith memory_mask (B, 1, L_src)", size=8, va="bottom",
           colour=ACCENT)
    ax.set_xlim(-8, 112)
    ax.set_ylim(-6, max(memory_top + 16.0, y + 28.0))
    ax.set_aspect("equal")
    c.fig.set_size_inches(9.0, 9.0 * (ax.get_ylim()[1] + 6) / 120)
    return c


NOTEBOOK = "05_encoder_decoder"  # the solution notebook that shows it
DIAGRAMS = {"encoder_decoder.png": draw}
