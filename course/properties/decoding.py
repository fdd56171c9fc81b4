"""Decoding: the kept set of temperature, top-k and top-p by their definitions, sampling that
follows the filtered distribution and stops at eos, and the encode-then-decode protocol of
greedy decoding. Notebooks 05 and 09."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from course.properties import CheckFailure, a_type, expect, expect_result, observe, tolerance


def filtered_keep(logits: torch.Tensor, filters: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """The kept set of temperature -> top-k -> top-p by the definitions, in float64, and the
    tokens whose mass before them is within rounding of p (either answer is right there)."""
    scaled = logits.double() / filters.get("temperature", 1.0)
    keep = torch.ones_like(scaled, dtype=torch.bool)
    top_k, top_p = filters.get("top_k"), filters.get("top_p")
    if top_k is not None and top_k < scaled.size(-1):
        keep = scaled >= scaled.topk(top_k, dim=-1).values[..., -1:]
    undecided = torch.zeros_like(keep)
    if top_p is not None and top_p < 1:  # p = 1 keeps everything: no rounding decides it
        probs = torch.softmax(scaled.masked_fill(~keep, -float("inf")), dim=-1)
        before = ((probs.unsqueeze(-2) > probs.unsqueeze(-1)) * probs.unsqueeze(-2)).sum(-1)
        keep = keep & (before < top_p)
        undecided = (before - top_p).abs() < 1e-5
    return keep, undecided, scaled


def kept_set(case: Any, got: torch.Tensor, expected: Any, observed: Any) -> None:
    """Filtering logits: no NaN or +inf; the kept set is the top-k set, then the nucleus of what
    is left (ties at the k-th value kept, the token that crosses p kept); every removed logit is
    -inf and every kept one is logit / temperature."""
    logits = case.inputs["logits"]
    filters = {k: v for k, v in case.inputs.items() if k != "logits"}
    shown = "".join(f", {k}={v}" for k, v in filters.items())
    what = f"filter_logits(logits{shown}) on {case.what}"
    expect(
        tuple(got.shape) == tuple(logits.shape),
        f"{what} has shape {tuple(got.shape)}, expected the input's {tuple(logits.shape)}.",
        "Return logits of the input's shape.",
    )
    expect(
        not bool(torch.isnan(got).any()) and not bool(torch.isposinf(got).any()),
        f"{what} contains NaN or +inf (the property violated: numeric range).",
        "Probabilities from large logits need a stable softmax (torch.softmax), not exp.",
    )
    keep, undecided, scaled = filtered_keep(logits, filters)
    mine = ~torch.isneginf(got)
    decided = ~undecided
    if not torch.equal(mine & decided, keep & decided):
        raise CheckFailure(f"{what}: {_kept_story(mine, keep, scaled, filters)}")
    expect_result(
        got[mine],
        scaled[mine].to(logits.dtype),
        f"the kept logits of {what} (the property violated: a kept logit is logit / temperature)",
        "Divide by the temperature once, before filtering; leave kept logits otherwise as they "
        "are (no renormalising, no softmax).",
    )


def _kept_story(mine: torch.Tensor, keep: torch.Tensor, scaled: torch.Tensor, filters: dict) -> str:
    """Which part of the definition a wrong row breaks, in words."""
    mine, keep = mine.reshape(-1, mine.size(-1)), keep.reshape(-1, keep.size(-1))
    row = int((mine != keep).any(-1).nonzero()[0])
    g, logits = mine[row], scaled.reshape(-1, scaled.size(-1))[row]
    top_k, top_p = filters.get("top_k"), filters.get("top_p")
    story = f"row {row} keeps {int(g.sum())} tokens, the definition keeps {int(keep[row].sum())}"
    if top_p is None:
        if top_k is None or top_k >= logits.numel():
            return f"{story}: with no top-k smaller than the vocabulary every token stays."
        return (
            f"{story} (the property violated: top-k keeps every logit at least as large as the "
            "k-th largest, ties with it included)."
        )
    allowed = torch.ones_like(g)
    if top_k is not None and top_k < logits.numel():
        allowed = logits >= logits.topk(top_k).values[-1]
    probs = torch.softmax(logits.masked_fill(~allowed, -float("inf")), dim=-1)
    mass = float(probs[g].sum())
    if mass < top_p - 1e-5:
        return (
            f"{story}: the kept tokens hold probability {mass:.4f} < top_p={top_p} (the property "
            "violated: the kept mass reaches p; the token that crosses p is kept)."
        )
    if bool(g.any()) and mass - float(probs[g].min()) >= top_p + 1e-5:
        return (
            f"{story}: without its least probable token the kept set still holds "
            f"{mass - float(probs[g].min()):.4f} >= top_p={top_p} (the property violated: the "
            "smallest set of most probable tokens)."
        )
    return (
        f"{story} (the property violated: top-p keeps the most probable tokens of the "
        "distribution left after temperature and top-k, until their mass reaches p)."
    )


def continuations(case: Any, got: list, expected: list, observed: Any) -> None:
    """Sampling where only one token survives the filter: each row's continuation is fixed."""
    for r, (mine, want) in enumerate(zip(got, expected, strict=True)):
        expect(
            mine == want,
            f"sample on {case.what}: row {r} (prompt {case.inputs['prompts'][r]}) gave {mine}, "
            f"expected {want}: only the most probable token survives the filter, so the result "
            "is fixed (the property violated: each row continues its own prompt, with its own "
            "positions and no padding seen, stops after its eos, and only new tokens are "
            "returned).",
            "Look at which position's logits you read for each row, whether padding reaches "
            "the model, and whether the filter arguments reach filter_logits.",
        )


def rows_end_at_eos(case: Any, got: Any, expected: Any, observed: Any) -> None:
    """One list of ints per prompt; a row ends at its eos (kept) or after max_new_tokens."""
    inputs = case.inputs
    eos, limit = inputs["eos_id"], inputs["max_new_tokens"]
    what = f"sample on {case.what}"
    expect(
        type(got) is list and len(got) == len(inputs["prompts"]),
        f"{what} returned {a_type(got)}, but the exercise text says a list with one list of "
        "new tokens per prompt (the property violated: the stated return type).",
    )
    for r, row in enumerate(got):
        expect(
            type(row) is list and all(type(t) is int for t in row),
            f"{what}: row {r} is {a_type(row)}, not a list of ints (the property violated: "
            "the stated return type).",
            "Convert with .tolist() and return only the new tokens of each row.",
        )
        expect(
            len(row) <= limit and eos not in row[:-1] and inputs["pad_id"] not in row,
            f"{what}: row {r} has {len(row)} tokens and goes on after its eos or holds padding "
            f"(the property violated: a row stops after its eos ({eos}), kept, nothing after; "
            f"at most max_new_tokens={limit}; only new tokens).",
            "Keep a per-row flag `finished`; a finished row gets no more tokens in the result.",
        )
        expect(
            len(row) == limit or (row and row[-1] == eos),
            f"{what}: row {r} stopped after {len(row)} new tokens without an eos (the property "
            f"violated: a row ends at its eos or after max_new_tokens={limit}, never earlier).",
        )


def draws_follow(distribution: Callable[[Any], torch.Tensor]) -> Callable[..., None]:
    """Many rows continue one prompt: the first new tokens' frequencies against the
    distribution the text defines (``distribution(case)``, computed on the trusted side).
    Never a token outside its support; every frequency within 5 standard errors (plus 0.01) of
    its probability: a false alarm has probability below 1e-6 per token (normal
    approximation), and a deviation of about 5 points at 800 draws is caught."""

    def judge(case: Any, got: list, expected: Any, observed: Any) -> None:
        rows_end_at_eos(case, got, expected, observed)
        probs = distribution(case)
        first = torch.tensor([row[0] for row in got])
        freq = torch.bincount(first, minlength=probs.numel()).double() / len(got)
        outside = (freq > 0) & (probs == 0)
        what = f"sample on {case.what}"
        expect(
            not bool(outside.any()),
            f"{what}: tokens {outside.nonzero().flatten().tolist()} were drawn, but the filter "
            "removes them (the property violated: draws follow softmax(filtered logits)).",
            "Pass **filter_args on to filter_logits before the softmax.",
        )
        sigma = (probs * (1 - probs) / len(got)).sqrt()
        worst = int(((freq - probs).abs() - 5 * sigma).argmax())
        expect(
            float((freq - probs).abs()[worst]) <= 5 * float(sigma[worst]) + 0.01,
            f"{what}: token {worst} was drawn in {float(freq[worst]):.1%} of the rows, but its "
            f"probability is {float(probs[worst]):.1%} (the property violated: draws follow "
            "softmax(filtered logits)).",
            "Sample (torch.multinomial) from the softmax of the filtered logits, at the last "
            "position of each row; do not take the argmax.",
        )
        # Two seeds give the same rows by chance with probability (sum of p^2)^rows: judged only
        # where that is below 1e-9 (a distribution with one token near 1 decides nothing).
        if float((probs**2).sum()) ** len(got) < 1e-9:
            expect(
                observed != got,
                f"{what}: generators with different seeds gave the same tokens (the property "
                "violated: randomness only from the given generator).",
                "Pass the `generator` argument to torch.multinomial; do not make your own.",
            )

    return judge


def encode_then_decode(hint: str | None = None) -> dict:
    """``encode(src_ids)`` returns the memory and the source padding mask (boolean (B, 1, L),
    True on real tokens); ``decode(tgt_ids, *encode(src_ids))`` gives ``forward``'s logits
    (the student's own: the values are judged against the reference separately).
    ``case.pad`` is the padding id."""

    def watch(module: Any, case: Any, call_: Callable) -> Any:
        def run() -> dict[str, Any]:
            memory, mask = module.encode(case.inputs["src_ids"])
            return {"mask": mask, "logits": module.decode(case.inputs["tgt_ids"], memory, mask)}

        return observe(f"encode(src_ids), then decode(tgt_ids, memory, mask) on {case.what}", run)

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        mask, src = seen["mask"], case.inputs["src_ids"]
        want = (src != case.pad)[:, None, :]
        expect(
            isinstance(mask, torch.Tensor)
            and mask.dtype == torch.bool
            and mask.shape == want.shape
            and torch.equal(mask, want),
            f"on {case.what}: encode(src_ids) should return, second, the source padding mask: "
            f"boolean, shape {tuple(want.shape)}, True on real tokens (the property violated: "
            "what encode returns).",
            hint,
        )
        logits, what = seen["logits"], f"decode(tgt_ids, *encode(src_ids)) on {case.what}"
        expect(
            isinstance(logits, torch.Tensor)
            and isinstance(got, torch.Tensor)
            and logits.shape == got.shape
            and torch.allclose(logits, got, **tolerance(got.dtype)),
            f"{what} differs from forward(src_ids, tgt_ids) (the property violated: forward is "
            "decode(tgt_ids, *encode(src_ids)), so that decoding step by step gives its logits).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def decoding_protocol(hint: str | None = None) -> dict:
    """Greedy decoding as the text describes it, on a model that counts its calls
    (``model.counts()``, ``model.reset()``): the model stays in eval mode, the source is
    encoded once (one row per batch row), and every decode gets the mask encode returned."""

    def watch(student: Any, case: Any, call_: Callable) -> Any:
        model = case.inputs["model"]

        observe(f"{case.what}: the model's counters reset", lambda: model.reset())
        call_(case.inputs)
        return observe(f"{case.what}: the model's counters", lambda: model.counts())

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        what = f"greedy_decode on {case.what}"
        expect(
            not seen["training"] and seen["in_training"] == 0,
            f"{what} switched the model to training mode (the property violated: the model "
            "stays in eval mode, as the text says).",
            hint,
        )
        expect(
            seen["without_mask"] == 0,
            f"{what} called model.decode without the memory_mask that encode returned, so the "
            "decoder reads the source's padding (the property violated: decode gets the memory "
            "and its mask).",
            hint,
        )
        rows = case.inputs["src_ids"].shape[0]
        expect(
            seen["encodes"] == rows,
            f"{what} encoded {seen['encodes']} source rows for a batch of {rows} (the property "
            "violated: the source is encoded once, with model.encode; model.decode runs on the "
            "growing target).",
            hint,
        )

    return {"observe": watch, "judge": judge}
