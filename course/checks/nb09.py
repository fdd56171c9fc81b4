"""Checks for notebook 09, generating text.

References are independent of the course's solution:

* 9.1 ``F.cross_entropy(..., ignore_index=pad_id)`` on the shifted targets, and its gradient;
* 9.2 the definitions, tested as properties: every kept logit equals ``logit / temperature``,
  every removed one is ``-inf``, the top-k set is every logit at least the k-th largest (ties
  included), the top-p set is the smallest set of most probable tokens whose mass reaches p;
* 9.3 a small causal model of the check's own (logits depend on the token, its position and
  the mean of the tokens so far), decoded greedily row by row for the exact cases, and the
  frequencies of many samples against the model's filtered distribution;
* 9.4 ``nn.MultiheadAttention`` carrying the module's weights (read from its state dict),
  run on the whole sequence with a causal mask: a full recompute.

Every call of the student's code goes through :func:`course.properties.call` (inputs untouched,
global state unchanged, so sampling may draw only from the generator it is given); the cases
are tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course.check import CheckFailure, exercise_check, expect, expect_close, expect_shape
from course.checks.reference import tensor, torch_attention
from course.observe import StudentError
from course.properties import (
    call,
    construct,
    generator,
    gradients,
    large_scores,
    meta_device,
    observe_gradients,
)


def _named(what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """:func:`course.properties.call`, with an error of the student's code told with the case."""
    try:
        return call(what, function, *args, **kwargs)
    except StudentError as error:
        raise CheckFailure(f"on {what}, {error.message}") from None


def _device_ok(what: str, device: str | None, hint: str) -> None:
    expect(
        device in (None, "meta"),
        f"{what} returned or mixed in a tensor on the {device} (the property violated: device).",
        hint,
    )


# --- 9.1 language-model loss ------------------------------------------------------------------

LOSS_HINT = (
    "The exercise text: position t predicts token t + 1, so the last position predicts nothing "
    "and the first token is never a target; a target equal to pad_id does not count, and the "
    "mean runs over the targets that do."
)


class LossCase(NamedTuple):
    what: str
    logits: torch.Tensor
    token_ids: torch.Tensor
    pad_id: int


def _ids(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.long)


def _loss_cases() -> list[LossCase]:
    g = generator(91)

    def ids(batch: int, length: int, vocab: int, low: int = 1) -> torch.Tensor:
        return torch.randint(low, vocab, (batch, length), generator=g)

    right = ids(3, 7, 13)
    right[1, 5:] = 0
    right[2, 3:] = 0
    left = ids(2, 6, 9)
    left[0, :2] = 0
    pad5 = ids(1, 8, 10, low=0)
    pad5[pad5 == 5] = 4
    pad5[0, 6:] = 5
    return [
        LossCase(
            "(2, 6, 11) logits, no padding", torch.randn(2, 6, 11, generator=g), ids(2, 6, 11), 0
        ),
        LossCase(
            "(3, 7, 13) logits, rows right-padded with pad_id=0 after 7, 5 and 3 tokens",
            torch.randn(3, 7, 13, generator=g),
            right,
            0,
        ),
        LossCase(
            "(2, 6, 9) logits, the first row left-padded with pad_id=0",
            torch.randn(2, 6, 9, generator=g),
            left,
            0,
        ),
        LossCase(
            "a batch of one with pad_id=5 (not 0)", torch.randn(1, 8, 10, generator=g), pad5, 5
        ),
        LossCase(
            "logits in the hundreds (numeric range)",
            large_scores(2, 5, 9, scale=100.0, offset=92),
            ids(2, 5, 9),
            0,
        ),
        LossCase(
            "float64 logits",
            torch.randn(2, 4, 7, generator=g, dtype=torch.float64),
            ids(2, 4, 7),
            0,
        ),
    ]


def _reference_loss(logits: torch.Tensor, token_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    vocab = logits.size(-1)
    return F.cross_entropy(
        logits[:, :-1].double().reshape(-1, vocab),
        token_ids[:, 1:].reshape(-1),
        ignore_index=pad_id,
    )


def _as_float(value: Any, what: str) -> float:
    if isinstance(value, torch.Tensor):
        expect(
            value.numel() == 1,
            f"{what} should be one number, got a tensor of shape {tuple(value.shape)}.",
            "Average over the targets that count: one number for the whole batch.",
        )
        return float(value.detach().double().reshape(()))
    expect(
        isinstance(value, int | float),
        f"{what} should be a number, got {type(value).__name__}.",
    )
    return float(value)


def _close(got: float, want: float, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    if math.isinf(want) or math.isinf(got):
        return got == want
    return abs(got - want) <= atol + rtol * abs(want)


@exercise_check("Exercise 9.1", "language-model loss and perplexity", hint=LOSS_HINT)
def lm_loss(student_lm_loss: Callable[..., Any]) -> None:
    """Loss and perplexity against ``F.cross_entropy(ignore_index=pad_id)`` on the shifted
    targets; several shapes, padding on either side, any pad id, large logits, float64; the
    gradient; the device."""
    for case in _loss_cases():
        what = f"lm_loss on {case.what}"
        got = _named(
            what,
            student_lm_loss,
            case.logits,
            case.token_ids,
            case.pad_id,
            names=("logits", "token_ids", "pad_id"),
        )
        expect(
            isinstance(got, tuple | list) and len(got) == 2,
            f"{what} should return (loss, perplexity), got {type(got).__name__}.",
        )
        loss, perplexity = got
        expect(
            isinstance(loss, torch.Tensor),
            f"{what}: the loss should be a tensor (you train with it), got {type(loss).__name__}.",
        )
        want = float(_reference_loss(case.logits, case.token_ids, case.pad_id))
        mine = _as_float(loss, f"the loss of {what}")
        expect(
            math.isfinite(mine),
            f"the loss of {what} is {mine}: the property violated is the numeric range.",
            "Log-probabilities from large logits need a stable log-softmax, not log(softmax).",
        )
        real = int((case.token_ids[:, 1:] != case.pad_id).sum())
        expect(
            _close(mine, want),
            f"the loss of {what} is {mine:.6g}, expected {want:.6g}, the mean over the {real} "
            "targets that are not padding (the property: position t predicts token t + 1, "
            "padding ignored).",
        )
        ppl = _as_float(perplexity, f"the perplexity of {what}")
        expected_ppl = math.exp(want) if want < 700 else math.inf
        expect(
            _close(ppl, expected_ppl) or (ppl == math.inf and want > 88),
            f"the perplexity of {what} is {ppl:.6g}, expected exp(loss) = {expected_ppl:.6g}.",
            "Perplexity is the exponential of the mean loss per real target.",
        )

    case = _loss_cases()[1]
    what = f"the gradient of the loss with respect to the logits ({case.what})"
    got = observe_gradients(
        what,
        lambda logits: student_lm_loss(logits, case.token_ids, case.pad_id)[0],
        [case.logits],
    )
    expected = gradients(
        lambda logits: _reference_loss(logits, case.token_ids, case.pad_id).float(),
        [case.logits],
    )["inputs"][0]
    mine = got["inputs"][0]
    expect(
        isinstance(mine, torch.Tensor),
        f"{what}: no gradient reaches the logits (the property violated: gradients).",
        "Compute the loss with tensor operations on the logits; no .item(), .detach() or "
        "torch.no_grad() on the way.",
    )
    expect_close(mine, expected, what, atol=1e-6, rtol=1e-4)

    what = "lm_loss with the logits and token ids on another device (meta)"
    device = meta_device(what, lambda *a: student_lm_loss(*a)[0], case.logits, case.token_ids, 0)
    _device_ok(what, device, "Any tensor you create must be on the device of the logits.")


# --- 9.2 filtering logits ---------------------------------------------------------------------

FILTER_HINT = (
    "Follow the exercise text in its order: divide by the temperature; top-k keeps every logit "
    "at least as large as the k-th largest; top-p then keeps the most probable tokens until "
    "their probability (of what is left) reaches p, the token that crosses p included."
)


class FilterCase(NamedTuple):
    what: str
    logits: torch.Tensor
    kwargs: dict[str, Any]


def _filter_cases() -> list[FilterCase]:
    g = generator(92)
    ties = torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0, 2.0], [0.3, 2.5, -1.0, 2.5, 0.7, 0.1]])
    return [
        FilterCase(
            "temperature 0.5 alone on (4, 10) logits",
            torch.randn(4, 10, generator=g),
            {"temperature": 0.5},
        ),
        FilterCase(
            "temperature 2.0 on 1-D logits (10,)",
            torch.randn(10, generator=g),
            {"temperature": 2.0},
        ),
        FilterCase("top_k=3 on (3, 10) logits", torch.randn(3, 10, generator=g), {"top_k": 3}),
        FilterCase(
            "top_k=2 with ties at the 2nd largest value (all tied values are kept)",
            ties,
            {"top_k": 2},
        ),
        FilterCase("top_k=1 on (2, 3, 8) logits", torch.randn(2, 3, 8, generator=g), {"top_k": 1}),
        FilterCase(
            "top_k=15, more than the 10 tokens", torch.randn(2, 10, generator=g), {"top_k": 15}
        ),
        FilterCase("top_k=10, all 10 tokens", torch.randn(2, 10, generator=g), {"top_k": 10}),
        FilterCase(
            "top_p=0.9 on (3, 12) logits", torch.randn(3, 12, generator=g) * 2, {"top_p": 0.9}
        ),
        FilterCase(
            "top_p=0.6 at temperature 0.7 (temperature first)",
            torch.randn(4, 12, generator=g) * 2,
            {"temperature": 0.7, "top_p": 0.6},
        ),
        FilterCase(
            "top_p=0.02 (only the most probable token crosses it)",
            torch.randn(2, 9, generator=g),
            {"top_p": 0.02},
        ),
        FilterCase(
            "top_p=1.0 on 1000 tokens (keeps every token)",
            torch.randn(3, 1000, generator=g) * 3,
            {"top_p": 1.0},
        ),
        FilterCase(
            "top_k=6, then top_p=0.7 of what is left, at temperature 1.5",
            torch.randn(3, 14, generator=g) * 2,
            {"temperature": 1.5, "top_k": 6, "top_p": 0.7},
        ),
        FilterCase(
            "top_p=0.9 on logits in the hundreds (numeric range)",
            large_scores(3, 8, scale=150.0, offset=93),
            {"top_p": 0.9},
        ),
        FilterCase(
            "top_k=4, top_p=0.8 on float64 logits (2, 3, 9)",
            torch.randn(2, 3, 9, generator=g, dtype=torch.float64) * 2,
            {"top_k": 4, "top_p": 0.8},
        ),
        FilterCase(
            "a batch of one (1, 7), top_p=0.5", torch.randn(1, 7, generator=g) * 2, {"top_p": 0.5}
        ),
        FilterCase("no arguments (nothing changes)", torch.randn(2, 6, generator=g), {}),
    ]


def _expected_keep(
    logits: torch.Tensor, kwargs: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(keep, undecided): the definitions of the exercise text, in float64. ``undecided`` marks
    tokens whose mass before them is within rounding of p (either answer is right)."""
    scaled = logits.double() / kwargs.get("temperature", 1.0)
    keep = torch.ones_like(scaled, dtype=torch.bool)
    top_k, top_p = kwargs.get("top_k"), kwargs.get("top_p")
    if top_k is not None and top_k < scaled.size(-1):
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]
        keep = scaled >= kth
    undecided = torch.zeros_like(keep)
    if top_p is not None and top_p < 1:  # p = 1 keeps everything: no rounding decides it
        probs = torch.softmax(scaled.masked_fill(~keep, -math.inf), dim=-1)
        # the probability of every token strictly more probable than this one
        before = ((probs.unsqueeze(-2) > probs.unsqueeze(-1)) * probs.unsqueeze(-2)).sum(-1)
        keep = keep & (before < top_p)
        undecided = (before - top_p).abs() < 1e-5
    return keep, undecided


def _row_story(
    got_keep: torch.Tensor, want: torch.Tensor, logits: torch.Tensor, kwargs: dict[str, Any]
) -> str:
    """Which property of the kept set a wrong row violates, in words."""
    flat_got = got_keep.reshape(-1, got_keep.size(-1))
    flat_want = want.reshape(-1, want.size(-1))
    row = int((flat_got != flat_want).any(-1).nonzero()[0])
    g, w = flat_got[row], flat_want[row]
    scaled = logits.double().reshape(-1, logits.size(-1))[row] / kwargs.get("temperature", 1.0)
    top_k, top_p = kwargs.get("top_k"), kwargs.get("top_p")
    story = f"row {row} keeps {int(g.sum())} tokens, the definition keeps {int(w.sum())}"
    if top_p is None:
        if top_k is None or top_k >= scaled.numel():
            return f"{story}: with no top-k smaller than the vocabulary every token stays."
        return (
            f"{story}: top-k keeps every logit at least as large as the k-th largest "
            "(values tied with it included)."
        )
    allowed = torch.ones_like(g)
    if top_k is not None and top_k < scaled.numel():
        allowed = scaled >= scaled.topk(top_k).values[-1]
    probs = torch.softmax(scaled.masked_fill(~allowed, -math.inf), dim=-1)
    mass = float(probs[g].sum())
    if mass < top_p - 1e-5:
        return (
            f"{story}: the kept tokens hold probability {mass:.4f} < top_p={top_p} (the "
            "property: the kept mass reaches p; the token that crosses p is kept)."
        )
    kept = probs[g]
    if bool(g.any()) and mass - float(kept.min()) >= top_p + 1e-5:
        return (
            f"{story}: without its least probable token the kept set still holds "
            f"{mass - float(kept.min()):.4f} >= top_p={top_p} (the property: the smallest set "
            "of most probable tokens)."
        )
    return (
        f"{story}: top-p keeps the most probable tokens of the distribution left after "
        "temperature and top-k, until their mass reaches p."
    )


@exercise_check("Exercise 9.2", "temperature, top-k and top-p filtering", hint=FILTER_HINT)
def filter_logits(student_filter_logits: Callable[..., Any]) -> None:
    """Properties of the result: removed = -inf, kept = logits / temperature, kept set = the
    top-k set then the nucleus of what is left; ties, k beyond the vocabulary, p = 1, leading
    axes, large logits, float64; the device."""
    for case in _filter_cases():
        args = ", ".join(f"{k}={v}" for k, v in case.kwargs.items())
        what = f"filter_logits({args or 'logits'}) on {case.what}"
        got = _named(what, student_filter_logits, case.logits, names=("logits",), **case.kwargs)
        expect_shape(got, case.logits.shape, what, "Return logits of the input's shape.")
        expect(
            got.dtype == case.logits.dtype,
            f"{what} has dtype {got.dtype}, expected the input's {case.logits.dtype}.",
        )
        expect(
            not bool(torch.isnan(got).any()) and not bool(torch.isposinf(got).any()),
            f"{what} contains NaN or +inf: the property violated is the numeric range.",
            "Probabilities from large logits need a stable softmax (torch.softmax), not exp.",
        )
        got_keep = ~torch.isneginf(got)
        want, undecided = _expected_keep(case.logits, case.kwargs)
        decided = ~undecided
        if not torch.equal(got_keep & decided, want & decided):
            raise CheckFailure(f"{what}: {_row_story(got_keep, want, case.logits, case.kwargs)}")
        scaled = case.logits / case.kwargs.get("temperature", 1.0)
        expect_close(
            got[got_keep],
            scaled[got_keep],
            f"the kept logits of {what} (the property: a kept logit is logit / temperature)",
            "Divide by the temperature once, before filtering; leave kept logits otherwise as "
            "they are (no renormalising, no softmax).",
            atol=1e-6,
            rtol=1e-5,
        )

    x = torch.randn(2, 9, generator=generator(94))
    what = "filter_logits(logits, temperature=0.8, top_k=4, top_p=0.9) on the meta device"
    device = meta_device(what, student_filter_logits, x, temperature=0.8, top_k=4, top_p=0.9)
    _device_ok(what, device, "Any tensor you create must be on the device of the logits.")


# --- 9.3 sampling -----------------------------------------------------------------------------

SAMPLE_HINT = (
    "Follow the exercise text: each step feeds every row its own tokens so far, takes the "
    "logits at that row's last real position, filters them with **filter_args, draws with "
    "torch.multinomial(..., generator=generator), and stops a row after its eos."
)


class _ToyLM(nn.Module):
    """The check's causal language model: the logits at position t depend on the token at t,
    on t itself, and on the mean of the tokens 0..t; ``pad_id`` is never predicted and ``eos_id``
    becomes likely from position ``eos_from`` on."""

    def __init__(
        self, vocab: int, pad_id: int, eos_id: int, eos_from: int, scale: float, seed: int
    ):
        super().__init__()
        g = generator(seed)
        self.token = nn.Parameter(torch.randn(vocab, vocab, generator=g) * scale, False)
        self.context = nn.Parameter(torch.randn(vocab, vocab, generator=g) * scale, False)
        position = torch.randn(64, vocab, generator=g) * scale * 0.5
        position[:, pad_id] = -1e4
        position[:eos_from, eos_id] = -1e4
        position[eos_from:, eos_id] = 2.5 * scale
        self.position = nn.Parameter(position, requires_grad=False)
        self.vocab = vocab

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        ids = token_ids.long().to(self.token.device)
        length = ids.size(1)
        counts = F.one_hot(ids, self.vocab).float().cumsum(1)
        mean = counts / torch.arange(1, length + 1, device=ids.device).view(1, -1, 1)
        return self.token[ids] + self.position[:length] + mean @ self.context


def _greedy(model: _ToyLM, prompt: list[int], new: int, eos_id: int) -> list[int]:
    """The exact continuation when only the most probable token survives the filter."""
    seq, out = list(prompt), []
    for _ in range(new):
        with torch.no_grad():
            token = int(model(torch.tensor([seq]))[0, -1].argmax())
        out.append(token)
        seq.append(token)
        if token == eos_id:
            break
    return out


class GreedyCase(NamedTuple):
    what: str
    prompts: list[list[int]]
    max_new_tokens: int
    filter_args: dict[str, Any]
    eos_from: int


GREEDY_CASES = [
    GreedyCase(
        "three prompts of lengths 2, 5 and 3, top_k=1",
        [[3, 4], [5, 2, 7, 3, 6], [8, 2, 4]],
        9,
        {"top_k": 1},
        8,
    ),
    GreedyCase(
        "a batch of one, prompt of length 4, top_k=1, no eos in reach",
        [[2, 6, 3, 7]],
        6,
        {"top_k": 1},
        60,
    ),
    GreedyCase(
        "four prompts of lengths 1, 3, 6 and 2, top_p=0.001",
        [[5], [4, 4, 2], [7, 3, 2, 8, 6, 5], [6, 3]],
        8,
        {"top_p": 0.001},
        7,
    ),
    GreedyCase(
        "two prompts of the same length 3, top_k=1 at temperature 0.5",
        [[2, 3, 4], [8, 7, 6]],
        5,
        {"top_k": 1, "temperature": 0.5},
        6,
    ),
]

VOCAB, PAD, EOS = 10, 0, 1


class DrawCase(NamedTuple):
    what: str
    rows: int
    first: int
    max_new_tokens: int
    filter_args: dict[str, Any]


DRAW_CASES = [
    DrawCase("800 copies of one prompt at temperature 0.5", 800, 3, 1, {"temperature": 0.5}),
    DrawCase("800 copies of one prompt with top_p=0.7", 800, 5, 1, {"top_p": 0.7}),
    DrawCase(
        "400 copies of one prompt with top_k=3, 3 new tokens, eos likely", 400, 4, 3, {"top_k": 3}
    ),
]


def _filtered_probs(logits: torch.Tensor, filter_args: dict[str, Any]) -> torch.Tensor:
    keep, _ = _expected_keep(logits, filter_args)
    scaled = logits.double() / filter_args.get("temperature", 1.0)
    return torch.softmax(scaled.masked_fill(~keep, -math.inf), dim=-1)


def _rows(value: Any, count: int, what: str) -> list[list[int]]:
    expect(
        isinstance(value, list | tuple) and len(value) == count,
        f"{what} should return a list with one list of new tokens per prompt ({count}), got "
        f"{type(value).__name__}{f' of {len(value)}' if isinstance(value, list | tuple) else ''}.",
    )
    rows = []
    for row in value:
        if isinstance(row, torch.Tensor):
            row = row.tolist()
        expect(
            isinstance(row, list | tuple) and all(isinstance(t, int) for t in row),
            f"{what}: each row should be a list of token ids (int), got {type(row).__name__}.",
            "Convert with .tolist() and return only the new tokens of each row.",
        )
        rows.append(list(row))
    return rows


def _check_structure(rows: list[list[int]], max_new: int, what: str) -> None:
    for r, row in enumerate(rows):
        expect(
            len(row) <= max_new,
            f"{what}: row {r} has {len(row)} new tokens, more than max_new_tokens={max_new}.",
        )
        expect(
            EOS not in row[:-1],
            f"{what}: row {r} goes on after its eos (token {EOS}) at step {row.index(EOS) if EOS in row else 0}: "
            "the property violated is that a row stops at its own eos (kept, nothing after).",
            "Keep a per-row flag `finished`; a finished row gets no more tokens in the result.",
        )
        expect(
            len(row) == max_new or (row and row[-1] == EOS),
            f"{what}: row {r} stopped after {len(row)} new tokens without an eos (max_new_tokens"
            f"={max_new}).",
            "A row ends at its eos or after max_new_tokens new tokens, never earlier.",
        )
        expect(
            PAD not in row,
            f"{what}: row {r} contains the padding id {PAD}, which is not a new token.",
        )


@exercise_check("Exercise 9.3", "a seeded sampling loop", hint=SAMPLE_HINT)
def sample(student_sample: Callable[..., Any]) -> None:
    """Exact continuations where only one token survives the filter (prompts of different
    lengths, eos at different steps); seeded draws repeat and depend on the generator only;
    frequencies of many draws against the filtered distribution; rows stop at their eos."""
    for case in GREEDY_CASES:
        model = _ToyLM(VOCAB, PAD, EOS, case.eos_from, 1.0, seed=931)
        args = ", ".join(f"{k}={v}" for k, v in case.filter_args.items())
        what = f"sample on {case.what} (max_new_tokens={case.max_new_tokens})"
        got = _named(
            what,
            student_sample,
            model,
            [list(prompt) for prompt in case.prompts],  # a fresh copy: the record keeps its own
            case.max_new_tokens,
            EOS,
            PAD,
            generator(95),
            names=("model", "prompts", "max_new_tokens", "eos_id", "pad_id", "generator"),
            **case.filter_args,
        )
        rows = _rows(got, len(case.prompts), what)
        for r, prompt in enumerate(case.prompts):
            want = _greedy(model, prompt, case.max_new_tokens, EOS)
            if rows[r] != want:
                raise CheckFailure(
                    f"{what}: row {r} (prompt {prompt}) gave {rows[r]}, expected {want}: with "
                    f"{args} only the most probable token survives, so the result is fixed. The "
                    "property violated: each row continues its own prompt (its own length and "
                    "positions, no padding seen), stops after its eos, and only new tokens are "
                    "returned.",
                    "Look at which position's logits you read for each row, whether padding "
                    "reaches the model, and whether the filter arguments reach filter_logits.",
                )

    model = _ToyLM(VOCAB, PAD, EOS, 1, 1.0, seed=932)
    for case in DRAW_CASES:
        prompts = [[case.first] for _ in range(case.rows)]
        args = ", ".join(f"{k}={v}" for k, v in case.filter_args.items())
        runs = []
        for label, seed in (
            ("", 96),
            (" again with the same seed", 96),
            (" with another seed", 97),
        ):
            what = f"sample on {case.what}{label}"
            got = _named(
                what,
                student_sample,
                model,
                prompts,
                case.max_new_tokens,
                EOS,
                PAD,
                generator(seed),
                names=("model", "prompts", "max_new_tokens", "eos_id", "pad_id", "generator"),
                **case.filter_args,
            )
            rows = _rows(got, case.rows, what)
            _check_structure(rows, case.max_new_tokens, what)
            runs.append(rows)
        expect(
            runs[0] == runs[1],
            f"sample on {case.what}: two runs with generators seeded alike gave different "
            "tokens (the property violated: seeded by the generator argument).",
            "Draw every random number with generator=generator.",
        )
        with torch.no_grad():
            probs = _filtered_probs(model(torch.tensor([[case.first]]))[0, -1], case.filter_args)
        first = torch.tensor([row[0] for row in runs[0]])
        freq = torch.bincount(first, minlength=VOCAB).double() / case.rows
        outside = (freq > 0) & (probs == 0)
        expect(
            not bool(outside.any()),
            f"sample on {case.what}: tokens {outside.nonzero().flatten().tolist()} were drawn, "
            f"but {args} removes them (the property violated: draws come from the filtered "
            "distribution).",
            "Pass **filter_args on to filter_logits before the softmax.",
        )
        sigma = (probs * (1 - probs) / case.rows).sqrt()
        worst = int(((freq - probs).abs() - 5 * sigma).argmax())
        expect(
            float((freq - probs).abs()[worst]) <= 5 * float(sigma[worst]) + 0.01,
            f"sample on {case.what}: token {worst} was drawn in {float(freq[worst]):.1%} of the "
            f"rows, but its probability after {args} is {float(probs[worst]):.1%} (the property "
            "violated: draws follow softmax(filtered logits)).",
            "Sample (torch.multinomial) from the softmax of the filtered logits, at the last "
            "position of each row; do not take the argmax.",
        )

        expect(
            runs[0] != runs[2],
            f"sample on {case.what}: generators with different seeds gave the same tokens: the "
            "draws do not come from the generator you are given.",
            "Pass the `generator` argument to torch.multinomial; do not make your own.",
        )


# --- 9.4 attention with a KV cache ------------------------------------------------------------

OWNER = "MultiHeadAttention"
CACHE_HINT = (
    "Follow the exercise text: project x with w_q, w_k, w_v, split into heads, append this "
    "step's keys and values to the cache along the length axis, and let new token i attend to "
    "every cached key and to new keys 0..i."
)


class CacheConfig(NamedTuple):
    what: str
    batch: int
    d_model: int
    heads: int
    bias: bool
    steps: tuple[int, ...]  # tokens fed per call: the first without a cache


CACHE_CONFIGS = [
    CacheConfig("MultiHeadAttention(16, 4), batch 2", 2, 16, 4, True, (4, 1, 1, 3)),
    CacheConfig("MultiHeadAttention(12, 3, bias=False), batch 1", 1, 12, 3, False, (1, 1, 2, 1)),
    CacheConfig("MultiHeadAttention(8, 1), batch 3", 3, 8, 1, True, (3, 2)),
]


def _mha_class(*args: Any, **kwargs: Any) -> Any:
    """course.nn's MultiHeadAttention (notebook 03), imported only where it is built: inside
    the observed construction, never in the trusted replay."""
    from course.nn import MultiHeadAttention

    return MultiHeadAttention(*args, **kwargs)


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, length, d_model = x.shape
    return x.view(batch, length, heads, d_model // heads).transpose(1, 2)


def _expect_cache(got: Any, want: torch.Tensor, name: str, what: str) -> None:
    expect(
        isinstance(got, torch.Tensor),
        f"{what}: the cached {name} should be a tensor, got {type(got).__name__}.",
    )
    expect(
        tuple(got.shape) == tuple(want.shape),
        f"{what}: the cached {name} have shape {tuple(got.shape)}, expected "
        f"{tuple(want.shape)} = (batch, heads, past + new tokens, d_k) (the property: the cache "
        "grows by the new tokens).",
        "Concatenate the past and this step's keys (values) along the length axis.",
    )
    expect_close(
        got,
        want,
        f"{what}: the cached {name} (the property: past ones unchanged, then this step's)",
        CACHE_HINT,
    )


@exercise_check("Exercise 9.4", "attention with a KV cache", hint=CACHE_HINT)
def attend_with_cache(student_attend_with_cache: Callable[..., Any]) -> None:
    """A prompt, then single tokens and chunks fed with the returned cache: every output
    against ``nn.MultiheadAttention`` with the module's weights on the whole sequence under a
    causal mask; the cache grows by the new tokens and the cache passed in stays as it was."""
    g = generator(98)
    for config in CACHE_CONFIGS:
        module, state = construct(
            config.what, _mha_class, config.d_model, config.heads, bias=config.bias
        )
        twin = torch_attention(state, config.d_model, config.heads, bias=config.bias, owner=OWNER)
        w_k, w_v = tensor(state, "w_k", "weight", OWNER), tensor(state, "w_v", "weight", OWNER)
        b_k = state.get("w_k.bias") if config.bias else None
        b_v = state.get("w_v.bias") if config.bias else None
        total = sum(config.steps)
        x = torch.randn(config.batch, total, config.d_model, generator=g)
        causal = torch.ones(total, total, dtype=torch.bool).triu(1)  # True = may not attend
        with torch.no_grad():
            full = twin(x, x, x, attn_mask=causal, need_weights=False)[0]
            keys = _heads(F.linear(x, w_k, b_k), config.heads)
            values = _heads(F.linear(x, w_v, b_v), config.heads)
        cache, done = None, 0
        for new in config.steps:
            what = (
                f"attend_with_cache on {config.what}, {new} new token{'s' * (new > 1)} after "
                f"{done} cached"
            )
            chunk = x[:, done : done + new]
            got = _named(
                what,
                student_attend_with_cache,
                module,
                chunk,
                cache,
                names=("attention", "x", "cache"),
            )
            expect(
                isinstance(got, tuple | list) and len(got) == 2,
                f"{what} should return (output, (keys, values)), got {type(got).__name__}.",
            )
            output, new_cache = got
            expect(
                isinstance(new_cache, tuple | list) and len(new_cache) == 2,
                f"{what}: the new cache should be a pair (keys, values), got "
                f"{type(new_cache).__name__}.",
            )
            _expect_cache(new_cache[0], keys[:, :, : done + new], "keys", what)
            _expect_cache(new_cache[1], values[:, :, : done + new], "values", what)
            expect_close(
                output,
                full[:, done : done + new],
                f"{what}: the output (the property: equal to attention over the whole sequence "
                "so far under a causal mask, recomputed)",
                CACHE_HINT,
            )
            cache, done = (new_cache[0].clone(), new_cache[1].clone()), done + new

    module, state = construct("MultiHeadAttention(8, 2) for the meta device", _mha_class, 8, 2)
    x = torch.randn(1, 2, 8, generator=g)
    past = (torch.randn(1, 2, 3, 4, generator=g), torch.randn(1, 2, 3, 4, generator=g))
    what = "attend_with_cache with the module, x and the cache on another device (meta)"
    device = meta_device(
        what,
        lambda m, t, k, v: student_attend_with_cache(m, t, (k, v))[0],
        module,
        x,
        *past,
    )
    _device_ok(what, device, "Any tensor you create (a mask, positions) must be on x's device.")
