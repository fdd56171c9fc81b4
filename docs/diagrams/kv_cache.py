"""Notebook 09: the GPT, and one generation step with a KV cache (each step projects only
the new tokens and appends their keys and values to the cache)."""

from __future__ import annotations

from style import ACCENT, Canvas


def draw() -> Canvas:
    c = Canvas(128, 76)
    # Left: the GPT.
    x = 22
    c.text(x, 73, "GPT", size=11, fontweight="bold")
    c.box(x, 4, 22, 4, "token_ids (B, L)")
    c.arrow([(x, 6), (x, 10)])
    c.box(x, 13, 34, 6, "embed(ids, start):\n$\\sqrt{d_{model}}\\,E[x]$ + learned positions $P$", "embed", size=8.5)
    c.arrow([(x, 16), (x, 22)], r"$h_0$ (B, L, d_model)")
    c.frame(x - 19, 21, x + 19, 41, "N×")
    c.box(x, 31, 34, 8, "EncoderBlock with the\ncausal mask (pre-LN:\nattention, feed-forward)",
          "attn", size=8.5)
    c.arrow([(x, 41), (x, 46)], r"$h_n$")
    c.box(x, 48.5, 24, 5, "final LayerNorm", "norm", size=8.5)
    c.arrow([(x, 51), (x, 54.5)])
    c.box(x, 57, 30, 5, r"output layer: $\cdot\, E^\top$ (tied)", "linear", size=8.5)
    c.arrow([(x, 59.5), (x, 65)], "logits (B, L, V)")
    c.text(x, 67, "next token: the logits at the last position", size=7.5, va="bottom",
           style="italic", colour="#555555")
    c.ax.plot([44, 44], [2, 74], color="#bbbbbb", lw=0.8)
    # Right: attend_with_cache, inside one block, one generation step.
    x = 76
    c.text(x + 6, 73, "One step with the cache: attend_with_cache(attention, x, cache)", size=10,
           fontweight="bold")
    c.box(x, 4, 32, 4, "x: the new tokens (B, T_new, d_model)", size=8)
    c.arrow([(x, 6), (x, 10)])
    c.box(x, 12.5, 40, 5, "w_q, w_k, w_v, then split_heads", "linear", size=8.5)
    qx, kx, vx = x - 14, x + 2, x + 14
    c.arrow([(qx, 15), (qx, 40.4)], "q (B, H, T_new, d_k)", side="left", at=0.8)
    for px, name in ((kx, "k"), (vx, "v")):
        c.arrow([(px, 15), (px, 20.4)], f"{name} new", side="right" if px == vx else "left")
        c.box(px, 23, 10, 5, "torch.cat\n(dim=-2)", "data", size=7.5)
        c.arrow([(px, 25.5), (px, 40.4)])
    c.box(x + 35, 23, 24, 8, "cache: (keys, values)\neach (B, H, T_past, d_k)", "frozen",
          size=8, edge=ACCENT)
    c.arrow([(x + 23, 23), (vx + 5.2, 23)], colour=ACCENT)
    c.arrow([(x + 35, 19), (x + 35, 16.5), (kx, 16.5), (kx, 20.4)], colour=ACCENT, head=True)
    c.text(vx + 1, 31.5, "each (B, H, T_past + T_new, d_k)", size=8, colour="#1f5f99", ha="left")
    c.box(x, 43, 40, 5, "scaled_dot_product_attention", "attn", size=8.5)
    c.text(x + 21, 46.6, "new token i (position T_past + i) sees\nevery cached position and "
           "new tokens ≤ i", size=7.5, ha="left", colour="#555555", style="italic")
    c.arrow([(x, 45.5), (x, 50.4)], "(B, H, T_new, d_k)")
    c.box(x, 53, 30, 5, "merge_heads, w_o", "linear", size=8.5)
    c.arrow([(x, 55.5), (x, 61)], "output (B, T_new, d_model)")
    c.dot(kx, 36)
    c.dot(vx, 36)
    c.arrow([(kx, 36), (x + 40, 36), (x + 40, 61)], colour=ACCENT)
    c.text(x + 40, 62, "new cache (keys, values):\nthe next step's T_past", size=8,
           colour=ACCENT, va="bottom")
    c.text(x, 67, "returns (output, (keys, values)); the given cache is left unchanged", size=7.5,
           va="bottom", style="italic", colour="#555555")
    return c


NOTEBOOK = "09_text_generation"  # the solution notebook that shows it
DIAGRAMS = {"kv_cache.png": draw}
