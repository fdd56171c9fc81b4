"""Checks for notebook 09, generating text: four declared contracts (see :mod:`course.framework.spec`).

Every reference is independent of the course's solution and computed on the trusted side only:
torch's ``cross_entropy`` (9.1), the filters' definitions in float64 (9.2, and the distribution
9.3 draws from), a small causal model of the check's own, decoded greedily where one token
survives the filter and drawn from many times where several do (9.3), attention written out
with the check's own weights over a cache of its own (9.4).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course.framework import properties as prop
from course.framework.domains import Numbers
from course.framework.properties import CheckFailure, OneOf, a_type, expect, generator, large_scores
from course.framework.spec import KEYWORD, Case, Property, Spec, cases, check
from course.nn import MultiHeadAttention

# --- 9.1 language-model loss ------------------------------------------------------------------


def _ids(g: torch.Generator, batch: int, length: int, vocab: int, low: int = 1) -> torch.Tensor:
    return torch.randint(low, vocab, (batch, length), generator=g)


def _loss_cases() -> list[Case]:
    g = generator(91)
    right = _ids(g, 3, 7, 13)
    right[1, 5:] = 0
    right[2, 3:] = 0
    left = _ids(g, 2, 6, 9)
    left[0, :2] = 0
    pad5 = _ids(g, 1, 8, 10, low=0)
    pad5[pad5 == 5] = 4
    pad5[0, 6:] = 5
    rows = [  # what, logits, token_ids, pad_id, [grad]
        ("(2, 6, 11) logits, no padding", torch.randn(2, 6, 11, generator=g), _ids(g, 2, 6, 11), 0),
        ("(3, 7, 13) logits, rows right-padded with pad_id=0 after 7, 5 and 3 tokens",
         torch.randn(3, 7, 13, generator=g), right, 0, True),
        ("(2, 6, 9) logits, the first row left-padded with pad_id=0",
         torch.randn(2, 6, 9, generator=g), left, 0),
        ("a batch of one with pad_id=5 (not 0)", torch.randn(1, 8, 10, generator=g), pad5, 5),
        ("logits in the hundreds (their exp overflows)",
         large_scores(2, 5, 9, scale=100.0, offset=92), _ids(g, 2, 5, 9), 0),
        ("float64 logits", torch.randn(2, 4, 7, generator=g, dtype=torch.float64),
         _ids(g, 2, 4, 7), 0),
    ]  # fmt: skip
    return cases(("logits", "token_ids", "pad_id"), rows, fields=("grad",))


def _loss(logits: torch.Tensor, token_ids: torch.Tensor, pad_id: int) -> tuple[OneOf, OneOf]:
    vocab = logits.size(-1)
    loss = F.cross_entropy(
        logits[:, :-1].double().reshape(-1, vocab),
        token_ids[:, 1:].reshape(-1),
        ignore_index=pad_id,
    )
    # the text states no dtype: a loss computed in float32 from float64 logits is right too
    return OneOf(loss.to(logits.dtype), ("torch.Tensor",), any_dtype=True), OneOf(
        loss.exp(), any_dtype=True
    )


lm_loss = check(
    Spec(
        exercise="Exercise 9.1",
        title="language-model loss and perplexity",
        name="lm_loss",
        params=("logits", "token_ids", "pad_id"),
        reference=_loss,
        cases=_loss_cases,
        gradients=("logits",),
        properties=tuple(
            Property(**m)
            for m in prop.meanings(
                (
                    "the loss",
                    lambda r: r[0],
                    "the loss",
                    "the mean over every target that is not "
                    "padding, in the whole batch: position t predicts token t + 1, padding ignored",
                ),
                ("the perplexity", lambda r: r[1], "the perplexity", "perplexity = exp(loss)"),
            )
        ),
        hint="The exercise text: position t predicts token t + 1, so the last position predicts "
        "nothing and the first token is never a target; a target equal to pad_id does not count, "
        "and the mean runs over the targets that do.",
    )
)


# --- 9.2 filtering logits ---------------------------------------------------------------------


def _filter_cases() -> list[Case]:
    g = generator(92)
    ties = torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0, 2.0], [0.3, 2.5, -1.0, 2.5, 0.7, 0.1]])
    rows = [
        ("(4, 10) logits", torch.randn(4, 10, generator=g), {"temperature": 0.5}),
        ("1-D logits (10,)", torch.randn(10, generator=g), {"temperature": 2.0}),
        ("(3, 10) logits", torch.randn(3, 10, generator=g), {"top_k": 3}),
        ("logits with ties at the 2nd largest value (all tied values are kept)", ties,
         {"top_k": 2}),
        ("(2, 3, 8) logits", torch.randn(2, 3, 8, generator=g), {"top_k": 1}),
        ("(2, 10) logits: top_k=15 is more than the 10 tokens", torch.randn(2, 10, generator=g),
         {"top_k": 15}),
        ("(2, 10) logits: top_k=10 is all the tokens", torch.randn(2, 10, generator=g),
         {"top_k": 10}),
        ("(3, 12) logits", torch.randn(3, 12, generator=g) * 2, {"top_p": 0.9}),
        ("(4, 12) logits (temperature first, at 0.7)", torch.randn(4, 12, generator=g) * 2,
         {"temperature": 0.7, "top_p": 0.6}),
        ("(2, 9) logits (only the most probable token crosses 0.02)",
         torch.randn(2, 9, generator=g), {"top_p": 0.02}),
        ("1000 tokens (top_p=1.0 keeps every token)", torch.randn(3, 1000, generator=g) * 3,
         {"top_p": 1.0}),
        ("logits whose probabilities underflow to 0, top_p=1.0",
         torch.tensor([[0.0, -200.0, 5.0, -150.0, 1.0], [3.0, 2.0, -300.0, 0.0, 1.0]]),
         {"top_p": 1.0}),
        ("(3, 14) logits: top-k, then top-p of what is left", torch.randn(3, 14, generator=g) * 2,
         {"temperature": 1.5, "top_k": 6, "top_p": 0.7}),
        ("logits in the hundreds (their exp overflows)",
         large_scores(3, 8, scale=150.0, offset=93), {"top_p": 0.9}),
        ("float64 logits (2, 3, 9)", torch.randn(2, 3, 9, generator=g, dtype=torch.float64) * 2,
         {"top_k": 4, "top_p": 0.8}),
        ("a batch of one (1, 7)", torch.randn(1, 7, generator=g) * 2, {"top_p": 0.5}),
        ("(2, 6) logits, no filter arguments (nothing changes)", torch.randn(2, 6, generator=g),
         {}),
    ]  # fmt: skip
    return cases(("logits",), rows, keywords=True, compare=False)  # what, logits, filters


def _kept(logits: torch.Tensor, filters: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
    """The kept set of temperature -> top-k -> top-p by the definitions, in float64, and the
    tokens whose mass before them is within rounding of p (either answer is right there)."""
    scaled = logits.double() / filters.get("temperature", 1.0)
    keep = torch.ones_like(scaled, dtype=torch.bool)
    top_k, top_p = filters.get("top_k"), filters.get("top_p")
    if top_k is not None and top_k < scaled.size(-1):
        keep = scaled >= scaled.topk(top_k, dim=-1).values[..., -1:]
    undecided = torch.zeros_like(keep)
    if top_p is not None and top_p >= 1:  # p = 1 keeps every token top-k kept; but a token whose
        # probability is 0 in the logits' dtype adds nothing, so the smallest set that reaches p
        # leaves it out (Hugging Face's filter does): either answer is right there
        shown = scaled.to(logits.dtype).masked_fill(~keep, -math.inf)
        undecided = keep & (torch.softmax(shown, dim=-1) == 0)
    if top_p is not None and top_p < 1:
        probs = torch.softmax(scaled.masked_fill(~keep, -math.inf), dim=-1)
        before = ((probs.unsqueeze(-2) > probs.unsqueeze(-1)) * probs.unsqueeze(-2)).sum(-1)
        keep = keep & (before < top_p)
        undecided = (before - top_p).abs() < 1e-5
    return keep, undecided, scaled


def _filtered(logits: torch.Tensor, **filters: Any) -> torch.Tensor:
    keep, _, scaled = _kept(logits, filters)
    return scaled.to(logits.dtype).masked_fill(~keep, -math.inf)


def _kept_set(case: Case, got: torch.Tensor, expected: Any, observed: Any) -> None:
    """No NaN or +inf; the kept set is the definition's (ties at the k-th value kept, the token
    that crosses p kept); every removed logit is -inf and every kept one logit / temperature."""
    logits = case.inputs["logits"]
    filters = {k: v for k, v in case.inputs.items() if k != "logits"}
    what = f"filter_logits(logits{''.join(f', {k}={v}' for k, v in filters.items())})"
    what += f" on {case.what}"
    expect(
        tuple(got.shape) == tuple(logits.shape),
        f"{what} has shape {tuple(got.shape)}, expected the input's {tuple(logits.shape)}.",
        "Return logits of the input's shape.",
    )
    expect(
        not bool(torch.isnan(got).any()) and not bool(torch.isposinf(got).any()),
        f"{what} contains NaN or +inf",
        "Probabilities from large logits need a stable softmax (torch.softmax), not exp.",
        "numeric range",
    )
    keep, undecided, scaled = _kept(logits, filters)
    mine = ~torch.isneginf(got)
    if not torch.equal(mine & ~undecided, keep & ~undecided):
        story, rule = _kept_story(mine, keep, scaled, filters)
        raise CheckFailure(f"{what}: {story}", prop=rule)
    try:
        prop.expect_result(
            got[mine],
            scaled[mine].to(logits.dtype),
            f"the kept logits of {what}",
            "Divide by the temperature once, before filtering; leave kept logits otherwise as "
            "they are (no renormalising, no softmax).",
        )
    except CheckFailure as failure:
        if failure.prop is not None:  # a dtype: the stated one
            raise
        rule = "a kept logit is logit / temperature"
        raise CheckFailure(failure.message, failure.hint, prop=rule) from None


def _kept_story(
    mine: torch.Tensor, keep: torch.Tensor, scaled: torch.Tensor, filters: dict
) -> tuple[str, str]:
    """What the first wrong row keeps, and the part of the definition it breaks, in words."""
    mine, keep = mine.reshape(-1, mine.size(-1)), keep.reshape(-1, keep.size(-1))
    row = int((mine != keep).any(-1).nonzero()[0])
    g, logits = mine[row], scaled.reshape(-1, scaled.size(-1))[row]
    top_k, top_p = filters.get("top_k"), filters.get("top_p")
    story = f"row {row} keeps {int(g.sum())} tokens, the definition keeps {int(keep[row].sum())}"
    cut = top_k is not None and top_k < logits.numel()
    if top_p is None and not cut:
        return f"{story}: with no top-k smaller than the vocabulary every token stays", (
            "the kept set"
        )
    rule = "top-k keeps every logit at least as large as the k-th largest, ties with it included"
    if top_p is not None:
        allowed = logits >= logits.topk(top_k).values[-1] if cut else torch.ones_like(g)
        probs = torch.softmax(logits.masked_fill(~allowed, -math.inf), dim=-1)
        mass = float(probs[g].sum())
        rest = mass - float(probs[g].min()) if bool(g.any()) else 0.0
        rule = (
            "top-p keeps the most probable tokens of the distribution left after temperature "
            "and top-k, until their mass reaches p"
        )
        if mass < top_p - 1e-5:
            story += f": the kept tokens hold probability {mass:.4f} < top_p={top_p}"
            rule = "the kept mass reaches p; the token that crosses p is kept"
        elif rest >= top_p + 1e-5:
            story += f": without its least probable token the kept set still holds {rest:.4f}"
            story += f" >= top_p={top_p}"
            rule = "the smallest set of most probable tokens"
    return story, rule


filter_logits = check(
    Spec(
        exercise="Exercise 9.2",
        title="temperature, top-k and top-p filtering",
        name="filter_logits",
        params=("logits", "temperature", "top_k", "top_p"),
        defaults={"temperature": 1.0, "top_k": None, "top_p": None},
        forms=(KEYWORD,),  # as sample() calls it: filter_logits(logits, **filter_args)
        reference=_filtered,
        cases=_filter_cases,
        domains={  # temperature > 0; 1 <= top_k (more than the tokens allowed); 0 < top_p <= 1
            "temperature": Numbers(0.0, 4.0, open_low=True, interior=1),
            "top_k": Numbers(1, lambda i: i["logits"].shape[-1] + 3, integer=True, interior=1),
            "top_p": Numbers(0.0, 1.0, open_low=True, ties=(1e-6,), interior=1),
        },
        properties=(
            Property("numeric range", **prop.overflow("filter_logits", "logits", torch.isfinite)),
            Property("the kept set", _kept_set),
        ),
        hint="Follow the exercise text in its order: divide by the temperature; top-k keeps every "
        "logit at least as large as the k-th largest; top-p then keeps the most probable tokens "
        "until their probability (of what is left) reaches p, the token that crosses p included.",
    )
)


# --- 9.3 sampling -----------------------------------------------------------------------------

# --- 9.3 sampling -----------------------------------------------------------------------------

VOCAB, PAD, EOS = 10, 0, 1
FILTERS = ("temperature", "top_k", "top_p")


class _ToyLM(nn.Module):
    """The check's causal language model: the logits at position t depend on the token at t, on
    t itself and on the mean of the tokens 0..t; ``PAD`` is never predicted and ``EOS`` becomes
    likely from position ``eos_from`` on."""

    def __init__(self, eos_from: int, seed: int):
        super().__init__()
        g = generator(seed)
        self.token = nn.Parameter(torch.randn(VOCAB, VOCAB, generator=g), False)
        self.context = nn.Parameter(torch.randn(VOCAB, VOCAB, generator=g), False)
        position = torch.randn(64, VOCAB, generator=g) * 0.5
        position[:, PAD] = -1e4
        position[:eos_from, EOS] = -1e4
        position[eos_from:, EOS] = 2.5
        self.position = nn.Parameter(position, requires_grad=False)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        ids = token_ids.long().to(self.token.device)
        counts = F.one_hot(ids, VOCAB).float().cumsum(1)
        steps = torch.arange(1, ids.size(1) + 1, device=ids.device).view(1, -1, 1)
        return self.token[ids] + self.position[: ids.size(1)] + (counts / steps) @ self.context


def _sample_cases() -> list[Case]:
    greedy = [
        ("three prompts of lengths 2, 5 and 3, top_k=1", [[3, 4], [5, 2, 7, 3, 6], [8, 2, 4]], 9,
         {"top_k": 1}, 8),
        ("a batch of one, prompt of length 4, top_k=1, no eos in reach", [[2, 6, 3, 7]], 6,
         {"top_k": 1}, 60),
        ("four prompts of lengths 1, 3, 6 and 2, top_p=0.001",
         [[5], [4, 4, 2], [7, 3, 2, 8, 6, 5], [6, 3]], 8, {"top_p": 0.001}, 7),
        ("two prompts of the same length 3, top_k=1 at temperature 0.5", [[2, 3, 4], [8, 7, 6]], 5,
         {"top_k": 1, "temperature": 0.5}, 6),
    ]  # fmt: skip
    draws = [
        ("800 copies of one prompt at temperature 0.5", 800, 3, 1, {"temperature": 0.5}),
        ("800 copies of one prompt with top_p=0.7", 800, 5, 1, {"top_p": 0.7}),
        ("400 copies of one prompt with top_k=3, 3 new tokens, eos likely", 400, 4, 3,
         {"top_k": 3}),
    ]  # fmt: skip

    table = [  # what, model, prompts, max_new_tokens, eos_id, pad_id, generator, filters, device
        (
            f"{what} (max_new_tokens={new})",
            _ToyLM(eos, 931),
            p,
            new,
            EOS,
            PAD,
            generator(95),
            f,
            i == 0,
        )
        for i, (what, p, new, f, eos) in enumerate(greedy)
    ]
    model = _ToyLM(1, 932)
    table += [
        (what, model, [[first] for _ in range(rows)], new, EOS, PAD, generator(96), f, False)
        for what, rows, first, new, f in draws
    ]
    params = ("model", "prompts", "max_new_tokens", "eos_id", "pad_id", "generator")
    return cases(params, table, fields=("device",), keywords=True)


def _continuations(
    model: nn.Module, prompts: list, max_new_tokens: int, eos_id: int, **rest: Any
) -> list[list[int]] | None:
    """The greedy continuation of every row where only one token survives; None for draws."""
    if len(prompts) > 10:
        return None
    out = []
    for prompt in prompts:
        seq, new = list(prompt), []
        while len(new) < max_new_tokens and (not new or new[-1] != eos_id):
            with torch.no_grad():
                new.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
            seq.append(new[-1])
        out.append(new)
    return out


def _continued(case: Case, got: list, expected: list, observed: Any) -> None:
    """Where only one token survives the filter, each row's continuation is fixed."""
    if expected is None:  # many draws: judged by their frequencies
        return
    for r, (mine, want) in enumerate(zip(got, expected, strict=True)):
        expect(
            mine == want,
            f"sample on {case.what}: row {r} (prompt {case.inputs['prompts'][r]}) gave {mine}, "
            f"expected {want}: only the most probable token survives the filter, so the result "
            "is fixed",
            "Look at which position's logits you read for each row, whether padding reaches "
            "the model, and whether the filter arguments reach filter_logits.",
            "each row continues its own prompt, with its own positions and no padding seen, "
            "stops after its eos, and only new tokens are returned",
        )


def _draws(case: Case, got: Any, expected: Any, again: Any) -> None:
    """Many rows continue one prompt (``again``: with another seed). One list of ints per
    prompt, each ending at its eos (kept) or after max_new_tokens; the first new tokens'
    frequencies against softmax(filtered logits): never a token outside its support, every
    frequency within 5 standard errors (plus 0.01) of its probability: a false alarm has
    probability below 1e-6 per token (normal approximation), and a deviation of about 5 points
    at 800 draws is caught."""
    inputs, what = case.inputs, f"sample on {case.what}"
    eos, limit = inputs["eos_id"], inputs["max_new_tokens"]
    expect(
        type(got) is list and len(got) == len(inputs["prompts"]),
        f"{what} returned {a_type(got)}, but the exercise text says a list with one list of "
        "new tokens per prompt",
        prop="the stated return type",
    )
    for r, row in enumerate(got):
        expect(
            type(row) is list and all(type(t) is int for t in row),
            f"{what}: row {r} is {a_type(row)}, not a list of ints",
            "Convert with .tolist() and return only the new tokens of each row.",
            "the stated return type",
        )
        expect(
            len(row) <= limit and eos not in row[:-1] and inputs["pad_id"] not in row,
            f"{what}: row {r} has {len(row)} tokens and goes on after its eos or holds padding",
            "Keep a per-row flag `finished`; a finished row gets no more tokens in the result.",
            f"a row stops after its eos ({eos}), kept, nothing after; at most "
            f"max_new_tokens={limit}; only new tokens",
        )
        expect(
            len(row) == limit or (row and row[-1] == eos),
            f"{what}: row {r} stopped after {len(row)} new tokens without an eos",
            prop=f"a row ends at its eos or after max_new_tokens={limit}, never earlier",
        )
    with torch.no_grad():
        logits = inputs["model"](torch.tensor([inputs["prompts"][0]]))[0, -1]
    keep, _, scaled = _kept(logits, {k: inputs[k] for k in FILTERS if k in inputs})
    probs = torch.softmax(scaled.masked_fill(~keep, -math.inf), dim=-1)
    freq = torch.bincount(torch.tensor([row[0] for row in got]), minlength=probs.numel())
    freq = freq.double() / len(got)
    outside = (freq > 0) & (probs == 0)
    expect(
        not bool(outside.any()),
        f"{what}: tokens {outside.nonzero().flatten().tolist()} were drawn, but the filter "
        "removes them",
        "Pass **filter_args on to filter_logits before the softmax.",
        "draws follow softmax(filtered logits)",
    )
    sigma = (probs * (1 - probs) / len(got)).sqrt()
    worst = int(((freq - probs).abs() - 5 * sigma).argmax())
    expect(
        float((freq - probs).abs()[worst]) <= 5 * float(sigma[worst]) + 0.01,
        f"{what}: token {worst} was drawn in {float(freq[worst]):.1%} of the rows, but its "
        f"probability is {float(probs[worst]):.1%}",
        "Sample (torch.multinomial) from the softmax of the filtered logits, at the last "
        "position of each row; do not take the argmax.",
        "draws follow softmax(filtered logits)",
    )
    # Two seeds give the same rows by chance with probability (sum of p^2)^rows: judged only
    # where that is below 1e-9 (a distribution with one token near 1 decides nothing).
    expect(
        float((probs**2).sum()) ** len(got) >= 1e-9 or again != got,
        f"{what}: generators with different seeds gave the same tokens",
        "Pass the `generator` argument to torch.multinomial; do not make your own.",
        "randomness only from the given generator",
    )


sample = check(
    Spec(
        exercise="Exercise 9.3",
        title="a seeded sampling loop",
        name="sample",
        params=("model", "prompts", "max_new_tokens", "eos_id", "pad_id", "generator", *FILTERS),
        keyword_only=FILTERS,
        forms=("positional",),
        reference=_continuations,
        cases=_sample_cases,
        random="generator",
        properties=(
            Property("greedy continuations", _continued),
            Property(
                "draws",
                _draws,
                lambda student, case, call: call({**case.inputs, "generator": generator(97)}),
                applies=lambda case: len(case.inputs["prompts"]) > 10,
            ),
        ),
        hint="Follow the exercise text: each step feeds every row its own tokens so far, takes "
        "the logits at that row's last real position, filters them with **filter_args, draws "
        "with torch.multinomial(..., generator=generator), and stops a row after its eos.",
    )
)


# --- 9.4 attention with a KV cache ------------------------------------------------------------


def _cache_cases() -> list[Case]:
    g = generator(98)
    rows = [  # (d_model, heads, bias, batch, cached, new)
        (16, 4, True, 2, 0, 4), (16, 4, True, 2, 4, 1), (16, 4, True, 2, 5, 3),
        (12, 3, False, 1, 0, 1), (12, 3, False, 1, 2, 2), (8, 1, True, 3, 3, 2),
    ]  # fmt: skip
    table = []  # what, attention, x, cache
    for d_model, heads, bias, batch, cached, new in rows:
        with prop.seeded(d_model):
            attention = MultiHeadAttention(d_model, heads, bias=bias)
        with torch.no_grad():  # the check's own weights, whatever the class initialises
            for parameter in attention.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=g) / math.sqrt(d_model))
        shape = (batch, heads, cached, d_model // heads)
        past = None if not cached else tuple(torch.randn(shape, generator=g) for _ in "kv")
        what = (
            f"MultiHeadAttention({d_model}, {heads}, bias={bias}), batch {batch}, {new} new "
            f"token{'s' * (new > 1)} after {cached} cached"
        )
        table.append((what, attention, torch.randn(batch, new, d_model, generator=g), past))
    return cases(("attention", "x", "cache"), table)


def _cached_attention(attention: nn.Module, x: torch.Tensor, cache: Any) -> tuple:
    """The text's definition written out: new token i at position T_past + i attends to every
    cached position and to new tokens 0..i."""
    batch, new, d_model = x.shape
    heads = attention.num_heads

    def project(layer: nn.Linear) -> torch.Tensor:
        return F.linear(x, layer.weight, layer.bias).view(batch, new, heads, -1).transpose(1, 2)

    with torch.no_grad():
        q, k, v = project(attention.w_q), project(attention.w_k), project(attention.w_v)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        past = k.size(2) - new
        allowed = torch.arange(k.size(2)) <= torch.arange(new).unsqueeze(1) + past
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        out = out.transpose(1, 2).reshape(batch, new, d_model)
        return F.linear(out, attention.w_o.weight, attention.w_o.bias), (k, v)


attend_with_cache = check(
    Spec(
        exercise="Exercise 9.4",
        title="attention with a KV cache",
        name="attend_with_cache",
        params=("attention", "x", "cache"),
        defaults={"cache": None},
        forms=("positional", "defaults"),
        reference=_cached_attention,
        cases=_cache_cases,
        properties=tuple(
            Property(**m)
            for m in prop.meanings(
                (
                    "the cache",
                    lambda r: r[1],
                    "the new cache (keys, values)",
                    "the cache grows by "
                    "the new tokens: the past ones unchanged, then this step's, along the length axis",
                ),
                (
                    "the output",
                    lambda r: r[0],
                    "the output",
                    "equal to attention over the whole "
                    "sequence so far under a causal mask, recomputed",
                ),
            )
        ),
        hint="Follow the exercise text: project x with w_q, w_k, w_v, split into heads, append "
        "this step's keys and values to the cache along the length axis, and let new token i "
        "attend to every cached key and to new keys 0..i.",
    )
)
