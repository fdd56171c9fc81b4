"""Checks for notebook 06, BERT fine-tuning.

* ``mask_tokens``, a declared contract (:mod:`course.framework.spec`): the result's stated type (two long
  tensors shaped like ``input_ids``), its invariants on every case, and the 80/10/10 rule as
  exact statistics where randomness allows (course.framework.properties, notebook 06's section): tests
  with a stated false-alarm rate on ~10^5 tokens for two values of ``mlm_probability``,
  independent selection per token (per row, per position, between neighbours) and the full
  range of random ids; the device property on the second device (course.framework.virtual).
* ``train_step`` and ``evaluate_accuracy``, declared contracts whose case is a run (course.framework.spec's
  ``calls``): a tiny BERT, its optimizer and scheduler made afresh for every run, one call per
  batch, each watched (``_watch``: the modes at each forward pass, what the call left; the
  modes and grad mode, read in the student's process, are claims: course.framework.observe.claim). The
  reference is the text's formula (SGD: ``p - lr_k * min(1, max_norm / |g|) * g``) and the
  text's accuracy; the batches act as if on another device (course.framework.virtual.unmoved).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import transformers
from torch import nn

from course.framework.check import CheckFailure, expect
from course.framework.domains import Numbers
from course.framework.observe import claim
from course.framework.properties import generator, modes, seeded
from course.framework.properties.statistics import (
    FALSE_ALARM,
    alarm,
    dispersion_p,
    normal_p,
    proportion_z,
)
from course.framework.spec import (
    DEFAULTS,
    GLOBAL,
    POSITIONAL,
    Case,
    Mistake,
    Property,
    Spec,
    cases,
    check,
)
from course.framework.virtual import unmoved

IGNORE_INDEX = -100  # the label value that PyTorch's cross-entropy (and BERT's heads) skip


# ----------------------------------------------------------------------------------------
# Exercise 6.1: MLM masking
# ----------------------------------------------------------------------------------------

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4  # a toy vocabulary with BERT-like special ids
STATISTICS = 100_000  # tokens from which a case measures the 80/10/10 rule (_expect_mlm_statistics)


# (what, rows, length, (shortest, longest) row with [CLS] and [SEP], vocab_size, mlm_probability)
MASKING_CASES = (
    ("1024 rows of 96 to 128 tokens, mlm_probability=0.15", 1024, 128, (96, 128), 1000, 0.15),
    ("3072 rows of 96 to 128 tokens, mlm_probability=0.3", 3072, 128, (96, 128), 1000, 0.3),
    ("512 rows of 3 to 64 tokens, vocab_size=16, mlm_probability=0.5", 512, 64, (3, 64), 16, 0.5),
    ("a batch of one row of 7 tokens", 1, 7, (7, 7), 1000, 0.15),
    ("3 rows of up to 33 tokens, mlm_probability=0.5", 3, 33, (3, 33), 1000, 0.5),
    ("a row holding only [CLS] [SEP] [PAD]...", 1, 5, (2, 2), 1000, 0.15),
)


def _masking_cases() -> list[Case]:
    """``[CLS] w1 .. wn [SEP] [PAD] ..`` rows of random lengths and their special-token mask."""
    table = []  # what, input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_prob., device
    for offset, (what, rows, length, sizes, vocab, p) in enumerate(MASKING_CASES):
        g = generator(offset)
        ids = torch.randint(5, vocab, (rows, length), generator=g)
        lengths = torch.randint(sizes[0], sizes[1] + 1, (rows, 1), generator=g)  # CLS, SEP too
        positions = torch.arange(length).expand(rows, length)
        ids[:, 0] = CLS
        ids[positions == lengths - 1] = SEP
        ids[positions >= lengths] = PAD
        special = (ids == CLS) | (ids == SEP) | (ids == PAD)
        table.append((what, ids, special, MASK, vocab, p, rows * length < 1000))
    params = ("input_ids", "special_tokens_mask", "mask_token_id", "vocab_size", "mlm_probability")
    return cases(params, table, fields=("device",), compare=False)


def _masking_twin(input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability):
    """Hugging Face's DataCollatorForLanguageModeling rule on a trusted generator: the stated
    type, dtype and shape of the result (its values are random; the properties judge them)."""
    g = torch.Generator().manual_seed(0)
    draw = torch.rand(input_ids.shape, generator=g)
    selected = (torch.rand(input_ids.shape, generator=g) < mlm_probability) & ~special_tokens_mask
    masked = torch.where(selected & (draw < 0.8), mask_token_id, input_ids)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=g)
    masked = torch.where(selected & (draw >= 0.8) & (draw < 0.9), random_ids, masked)
    return masked, torch.where(selected, input_ids, IGNORE_INDEX)


def _masking_parts(case: Any, got: Any) -> tuple:
    """The case in words, its ids and special-token mask, the result, the [MASK] id."""
    i, (masked, labels) = case.inputs, (t.long() for t in got)
    what = f"mask_tokens on {case.what}"
    return what, i["input_ids"], i["special_tokens_mask"], masked, labels, i["mask_token_id"]


def _expect_mlm_invariants(case: Any, got: Any, expected: Any, seen: Any) -> None:
    """What no random draw may break: special and padding tokens never selected, a label is
    -100 or the ORIGINAL id, only selected tokens replaced, replacements inside [0, vocab)."""
    what, ids, special, masked, labels, _ = _masking_parts(case, got)
    vocab = case.inputs["vocab_size"]
    selected, p = labels != IGNORE_INDEX, case.inputs.get("mlm_probability", 0.15)
    selection = "each ordinary token is selected with probability mlm_probability"
    exact = (
        [  # the ends of the probability: no draw decides there
            (
                selected,
                "mlm_probability=0, yet the token at {at} (id {o}) was selected (label {l})",
                f"{selection}, here never",
            )
        ]
        if p == 0
        else [
            (
                ~special & ~selected,
                "mlm_probability=1, yet the ordinary token at {at} (id {o}) was not selected",
                f"{selection}, here always",
            )
        ]
        if p == 1
        else []
    )
    rule = "Select with exactly the probability given; add no rule of your own around it."
    for bad, message, hint, violated in (
        *((bad, message, rule, violated) for bad, message, violated in exact),
        (
            special & (selected | (masked != ids)),
            "a special or padding token (id {o}) at {at} was selected or changed (label {l}, "
            "id after masking {m})",
            "`special_tokens_mask` marks the positions whose selection probability is zero.",
            "special and padding tokens are never selected",
        ),
        (
            selected & (labels != ids),
            "label {l} at {at}; a label is -100 (not selected) or the ORIGINAL id {o} (selected)",
            "The labels are what the model must recover: take them before replacing anything.",
            "labels hold the original ids",
        ),
        (
            ~selected & (masked != ids),
            "the token at {at} was replaced (id {o} -> {m}) but its label is -100",
            "The replacements happen inside the selected positions only.",
            "only selected tokens are replaced",
        ),
        (
            (masked < 0) | (masked >= vocab),
            "id {m} at {at} is outside the vocabulary [0, vocab_size={v})",
            "Random ids are drawn from the whole vocabulary, 0 to vocab_size - 1.",
            "random ids are drawn from [0, vocab_size)",
        ),
    ):
        if bad.any():
            r, c = (int(x) for x in bad.nonzero()[0])
            at = f"(row {r}, position {c})"
            text = message.format(
                o=int(ids[r, c]), at=at, l=int(labels[r, c]), m=int(masked[r, c]), v=vocab
            )
            raise CheckFailure(f"{what}: {text}", hint, prop=violated)


def _expect_mlm_statistics(case: Any, got: Any, expected: Any, seen: Any) -> None:
    """Selection with probability ``mlm_probability``, each ordinary token independently (the
    spread of the counts per row and per position, neighbours uncorrelated), then 80% [MASK] /
    10% a random id / 10% kept among the selected, each token independently too."""
    what, ids, special, masked, labels, mask_id = _masking_parts(case, got)
    p, vocab = case.inputs["mlm_probability"], case.inputs["vocab_size"]
    ordinary, selected = ~special, labels != IGNORE_INDEX
    n, k = int(ordinary.sum()), int(selected.sum())
    z = proportion_z(k, n, p)
    expect(
        not alarm(normal_p(z)),
        f"{what}: {100 * k / n:.2f}% of the {n} ordinary tokens were selected (label not -100), "
        f"expected {100 * p:g}% ({z:+.1f} standard errors; a right implementation is that far "
        f"off with probability < {FALSE_ALARM:g})",
        "Each ordinary token is selected with probability `mlm_probability`, the argument.",
        "selection with probability `mlm_probability`",
    )
    independent = "each ordinary token is selected independently"
    for group, dim in (("row", 1), ("position", 0)):
        p_value, spread = dispersion_p(selected.sum(dim), ordinary.sum(dim))
        expect(
            not alarm(p_value),
            f"{what}: the number of tokens selected per {group} varies {spread} than "
            f"independent draws allow (p = {p_value:.1e}): not a fixed count per row, not the "
            "same positions in every row",
            "One independent draw per token (a tensor of probabilities), nothing shared.",
            independent,
        )
    pairs = ordinary[:, 1:] & ordinary[:, :-1]
    s = selected.double() - p
    z = float(((s[:, 1:] * s[:, :-1])[pairs]).sum()) / (p * (1 - p) * int(pairs.sum()) ** 0.5)
    expect(
        not alarm(normal_p(z)),
        f"{what}: neighbouring tokens are selected together {'more' if z > 0 else 'less'} often "
        f"than independent draws allow ({z:+.1f} standard errors): no spans",
        "One independent draw per token, nothing shared between neighbours.",
        independent,
    )
    to_mask, kept = selected & (masked == mask_id), selected & (masked == ids)
    # a random id equal to [MASK] or to the original is seen as masked or kept: 1 in vocab each
    shares = (
        ("became [MASK]", to_mask, 0.8 + 0.1 / vocab),
        ("became a random id", selected & ~to_mask & ~kept, 0.1 * (1 - 2 / vocab)),
        ("stayed unchanged", kept, 0.1 + 0.1 / vocab),
    )
    for label, chosen, share in shares:
        z = proportion_z(int(chosen.sum()), k, share)
        expect(
            not alarm(normal_p(z)),
            f"{what}: of the {k} selected tokens, "
            + ", ".join(f"{100 * int(c.sum()) / k:.2f}% {w}" for w, c, _ in shares)
            + f"; expected 80% / 10% / 10% ('{label}' is {z:+.1f} standard errors off)",
            "The three shares are of the selected tokens: after the 80% that become [MASK], "
            "the remaining 20% split into two halves.",
            "80% [MASK], 10% a random id, 10% unchanged, of the SELECTED",
        )
    p_value, spread = dispersion_p(to_mask.sum(1), selected.sum(1))
    expect(
        not alarm(p_value),
        f"{what}: the share of selected tokens that became [MASK] varies {spread} from row to "
        f"row than independent draws allow (p = {p_value:.1e})",
        "One independent draw per token for the 80/10/10 decision too.",
        "each selected token's 80/10/10 decision is drawn independently",
    )


def _expect_mlm_id_range(case: Any, got: Any, expected: Any, seen: Any) -> None:
    """Random ids cover the whole vocabulary [0, vocab_size), special ids included: with a small
    vocabulary every id (but [MASK], which cannot be told apart) must appear among the visible
    replacements; each id has dozens of chances, so a right answer misses one with probability
    far below FALSE_ALARM."""
    what, ids, _, masked, labels, mask_id = _masking_parts(case, got)
    visible = (labels != IGNORE_INDEX) & (masked != ids) & (masked != mask_id)
    drawn = set(masked[visible].tolist())
    missing = [v for v in range(case.inputs["vocab_size"]) if v != mask_id and v not in drawn]
    expect(
        not missing,
        f"{what}: among {int(visible.sum())} random replacements, the ids "
        f"{missing[:8]} never appear",
        "Draw random ids from the whole vocabulary, 0 to vocab_size - 1 (torch's upper bound "
        "is exclusive).",
        f"random ids are drawn uniformly from [0, vocab_size={case.inputs['vocab_size']}), "
        "every id, special ones included",
    )


mask_tokens = check(
    Spec(
        exercise="Exercise 6.1",
        title="MLM masking",
        name="mask_tokens",
        params=(
            "input_ids",
            "special_tokens_mask",
            "mask_token_id",
            "vocab_size",
            "mlm_probability",
        ),
        defaults={"mlm_probability": 0.15},
        # keyword with the default left out as notebook 06 calls it (judged first), positional
        forms=(DEFAULTS, POSITIONAL),
        reference=_masking_twin,
        cases=_masking_cases,
        random=GLOBAL,
        properties=(
            Property("invariants", judge=_expect_mlm_invariants),
            Property(
                "80/10/10 statistics",
                judge=_expect_mlm_statistics,
                applies=lambda case: case.inputs["input_ids"].numel() > STATISTICS,
            ),
            Property(
                "the full id range",
                judge=_expect_mlm_id_range,
                applies=lambda case: case.inputs["vocab_size"] <= 64,
            ),
        ),
        domains={  # "with probability mlm_probability": both ends, and the default left out
            "mlm_probability": Numbers(
                0.0,
                1.0,
                interior=0,
                base=lambda i: i["vocab_size"] > 64 and 10 < i["input_ids"].numel() < 1000,
            ),
        },
        hint="Two random decisions: first which ordinary tokens are selected (probability "
        "`mlm_probability`), then, among the selected only, what happens to each (80/10/10).",
    )
)

# ----------------------------------------------------------------------------------------
# 6.2 and 6.3: a tiny BERT from a config, built identically in the student's process and the
# grader's, and batches that act as if they lived on another device
# ----------------------------------------------------------------------------------------

TINY_VOCAB = 40
BASE_LR = 0.5  # SGD, which unlike Adam is sensitive to clipping and to accumulated gradients
DROPOUT_SEED = 1000  # seeded() offset of the dropout masks of step k: DROPOUT_SEED + k


def _tiny_bert(task: str, num_labels: int, dropout: float, offset: int) -> nn.Module:
    """A 1-layer, 16-wide BERT (``task``: "sequence" or "token") with weights drawn from
    ``generator(offset)`` in a fixed order, the same in every process and transformers version.
    """
    config = transformers.BertConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=0.0,
        classifier_dropout=dropout,
        num_labels=num_labels,
    )
    kind = "Sequence" if task == "sequence" else "Token"
    with seeded(offset):
        model = getattr(transformers, f"BertFor{kind}Classification")(config)
    g = generator(offset)
    with torch.no_grad():
        for name, parameter in sorted(model.named_parameters()):
            values = torch.randn(parameter.shape, generator=g) * 0.3
            parameter.copy_(values + 1.0 if name.endswith("LayerNorm.weight") else values)
    return model


def _tiny_batch(size: int, length: int, task: str, num_labels: int, offset: int) -> dict:
    """A padded batch of random ids with an attention mask and labels, like a collator's."""
    g = generator(offset)
    ids = torch.randint(5, TINY_VOCAB, (size, length), generator=g)
    lengths = torch.randint(3, length + 1, (size,), generator=g)
    attention = (torch.arange(length) < lengths.unsqueeze(1)).long()
    ids = ids * attention  # id 0 = [PAD] after each sequence
    ids[:, 0] = 2  # [CLS]
    shape = (size,) if task == "sequence" else (size, length)
    labels = torch.randint(0, num_labels, shape, generator=g)
    if task == "token":
        labels[attention == 0] = IGNORE_INDEX
        labels[:, 0] = IGNORE_INDEX
    return {"input_ids": ids, "attention_mask": attention, "labels": labels}


def _parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _watch(inputs: dict, k: int, code: Callable, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call ``k`` of a run (course.framework.spec's ``watch``), dropout seeded as the reference's: what it
    returned, every sub-module's training flag and the grad mode at each forward pass of the
    model, and what it left: the flags, the parameters, the scheduler's step count."""
    model, forwards = inputs["model"], []
    handle = model.register_forward_pre_hook(
        lambda module, _: forwards.append((modes(module), torch.is_grad_enabled()))
    )
    try:
        with seeded(DROPOUT_SEED + k):
            result = code(*args, **kwargs)
    finally:
        handle.remove()
    steps = getattr(inputs.get("scheduler"), "last_epoch", None)
    left = {"modes": modes(model), "parameters": _parameters(model), "scheduler steps": steps}
    return {"result": result, "forwards": forwards, **left}


def _first_off(flags: dict[str, bool], wanted: bool) -> str | None:
    """The first sub-module whose training flag is not ``wanted``, or None."""
    return next((name for name, flag in flags.items() if flag != wanted), None)


class _Word(str):
    """An argument made afresh for every run (course.framework.spec's ``calls``), named in a message."""

    __repr__ = str.__str__


# ----------------------------------------------------------------------------------------
# Exercise 6.2: the training step
# ----------------------------------------------------------------------------------------

SCHEDULES: dict[str, Callable[[int], float]] = {
    "constant": lambda step: 1.0,
    "decay": lambda step: 1.0 / (1.0 + step),
}
NO_CLIP = 1e6
STEP_BOUND = {"atol": 1e-5, "rtol": 0.0}  # an extra weight decay of 1e-4 shows in one step
CLIP_HINT = (
    "The update must use the gradient rescaled to global norm `max_grad_norm` (the argument; "
    "left out, the signature's default 1.0): rescaling after the update, or with another norm, "
    "changes nothing."
)

# (what, the seed of its model and batches, task, batch size of each step, length, schedule,
# max_grad_norm, hint: what a wrong update most likely means in this case): _steps makes a run
# from them. The course calls train_step positionally (fit in notebooks 06 to 08); the drawn
# max_grad_norm runs by keyword and with the default left out.
STEP_CASES = (
    ("one step of a model left in eval mode, constant learning rate, no clipping", 0, "sequence",
     (6,), 9, "constant", NO_CLIP,
     "One step: forward (dropout on), loss, gradients of that loss alone, update."),
    ("three steps, constant learning rate, no clipping", 1, "sequence", (6, 6, 6), 9, "constant",
     NO_CLIP, "Each update must use the gradient of its own batch only: gradients add up in "
     "`.grad` until something clears them."),
    ("one step with max_grad_norm=0.01 (the gradient must be rescaled)", 2, "sequence", (6,), 9,
     "constant", 0.01, CLIP_HINT),
    ("three steps with a decaying learning rate", 3, "sequence", (4, 4, 4), 9, "decay", NO_CLIP,
     "Step k must use the k-th learning rate of the schedule: the scheduler moves on once per "
     "step, after the update it governs."),
    ("two steps of a token classifier (labels (batch, length) with -100), batches of 1 and 3, "
     "max_grad_norm=0.5", 4, "token", (1, 3), 7, "constant", 0.5,
     "The loss is the model's own (`.loss`), which skips the -100 labels."),
)  # fmt: skip
STEP_PARAMS = ("seed", "task", "sizes", "length", "schedule", "max_grad_norm")
CALLED = {p: _Word(p) for p in ("model", "batch", "optimizer", "scheduler")}  # made by _steps


def _steps(inputs: dict) -> list[dict]:
    """A run: a tiny BERT left in eval mode (as after an evaluation), SGD over it and a
    scheduler, made afresh; one call per batch, each batch as a GPU loader gives it."""
    seed, task, length = inputs["seed"], inputs["task"], inputs["length"]
    model = _tiny_bert(task, 3, 0.2, seed).eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, SCHEDULES[inputs["schedule"]])
    made = dict(inputs, model=model, optimizer=optimizer, scheduler=scheduler)
    sizes = enumerate(inputs["sizes"])
    return [
        dict(made, batch=unmoved(_tiny_batch(n, length, task, 3, 100 * seed + k))) for k, n in sizes
    ]


def _formula_step(  # noqa: ANN001
    model, batch, optimizer, scheduler, max_grad_norm=1.0, *, mistake: str = ""
) -> float:
    """The update the text describes, as a formula: ``p - lr_k * min(1, max_norm / |g|) * g``,
    ``g`` the gradient of this batch's loss alone (SGD subtracts ``lr_k`` times ``.grad``);
    ``mistake``: one of :data:`STEP_MISTAKES`' departures from it."""
    if mistake == "top":
        model.training = True
    elif mistake != "eval":
        model.train()
    parameters = list(model.parameters())
    with torch.enable_grad():
        loss = model(**{key: value.to("cpu") for key, value in batch.items()}).loss
        grads = torch.autograd.grad(loss, parameters, allow_unused=True)
    pairs = zip(parameters, grads, strict=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in pairs]
    if mistake == "kept":  # .grad never cleared: this gradient added to the last one
        grads = [g if p.grad is None else g + p.grad for p, g in zip(parameters, grads)]  # noqa: B905
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    bound = {"unclipped": math.inf, "one": 1.0}.get(mistake, max_grad_norm)
    for parameter, grad in zip(parameters, grads, strict=True):
        parameter.grad = min(1.0, bound / (float(norm) + 1e-6)) * grad
    for _ in range(mistake == "early"):  # the scheduler advanced before the update
        scheduler.step()
    if mistake != "frozen":
        optimizer.step()
    for _ in range({"early": 0, "twice": 2, "never": 0}.get(mistake, 1)):
        scheduler.step()
    return float(loss.detach())


ONCE = "The scheduler moves on exactly once per training step."
TRAINING = "training mode, in every sub-module (dropout on)"
EVAL_HINT = (
    "The model arrives in eval mode (as after an evaluation). Each sub-module has its own "
    "`training` flag, which its dropout reads: see what nn.Module.train() does."
)
STEP_MISTAKES = tuple(  # (name, the text's words it breaks, _formula_step's mistake, hint)
    Mistake(name, breaks, functools.partial(_formula_step, mistake=kind), hint)
    for name, breaks, kind, hint in (
        ("gradients never cleared (each update adds the last one's)", "clear the old gradients",
         "kept", "Gradients add up in `.grad` until something clears them."),
        ("the update with the gradient not rescaled (no clipping, or clipping after the update)",
         "clip the gradient norm to `max_grad_norm`, update the weights", "unclipped", CLIP_HINT),
        ("clipping to 1.0 whatever `max_grad_norm` says", "clip the gradient norm to "
         "`max_grad_norm`", "one", CLIP_HINT),
        ("the scheduler advanced before the update", "update the weights, advance the scheduler",
         "early", "Step k uses the k-th learning rate: the scheduler moves on after the update."),
        ("the scheduler advanced twice per step", "advance the scheduler", "twice", ONCE),
        ("the scheduler never advanced", "advance the scheduler", "never", ONCE),
        ("no update (the optimizer never steps)", "update the weights", "frozen",
         "Gradients must be computed and then applied by the optimizer."),
        ("the model left in eval mode", TRAINING, "eval", EVAL_HINT),
        ("the training flag of the top module only", TRAINING, "top", EVAL_HINT),
    )
)  # fmt: skip


train_step = check(
    Spec(
        exercise="Exercise 6.2",
        title="training step",
        name="train_step",
        params=("model", "batch", "optimizer", "scheduler", "max_grad_norm"),
        defaults={"max_grad_norm": 1.0},
        mutable=("model", "optimizer", "scheduler"),
        reference=_formula_step,
        mistakes=STEP_MISTAKES,
        cases=lambda: cases(
            STEP_PARAMS, STEP_CASES, fields=("hint",), strict=STEP_BOUND, given=CALLED
        ),
        calls=_steps,
        watch=_watch,
        watched=("parameters", "scheduler steps"),  # each step's update, then its schedule
        # "rescaled to global norm max_grad_norm": any positive norm, and its default
        domains={"max_grad_norm": Numbers(0.0, None, open_low=True, interior=1, hint=CLIP_HINT)},
        device=False,  # the batches act as if on another device (course.framework.virtual.unmoved)
        hint="The text lists the steps in order; each one acts on state left by the previous "
        "step (the mode of the model, `.grad`, the learning rate), so think about what each "
        "leaves behind.",
    )
)


# ----------------------------------------------------------------------------------------
# Exercise 6.3: evaluation
# ----------------------------------------------------------------------------------------

# (what, task, labels, batch sizes (only the last may be smaller), length, sequence task:
# correct examples per batch, the first ones)
EVAL_CASES = (
    ("batches of 5, 5 and 3 sentences with 5, 2 and 0 right", "sequence", 2, (5, 5, 3), 9,
     (5, 2, 0)),
    ("one batch of one sentence, predicted right", "sequence", 3, (1,), 6, (1,)),
    ("a token classifier: batches of 4 and 3 sentences, labels (batch, length) with -100 on "
     "[CLS] and padding", "token", 3, (4, 3), 9, None),
)  # fmt: skip


def _eval_cases() -> list[Case]:
    """Labels set from the model's own predictions, so that the number of correct ones is
    known (uneven per batch: a mean of batch means is wrong)."""
    table = []  # what, task, labels, seed, batches, right
    for offset, (what, task, num_labels, sizes, length, right) in enumerate(EVAL_CASES, 20):
        model = _tiny_bert(task, num_labels, 0.5, offset).eval()
        batches = []
        for i, size in enumerate(sizes):
            batch = _tiny_batch(size, length, task, num_labels, 100 * offset + i)
            with torch.no_grad():
                inputs = {k: v for k, v in batch.items() if k != "labels"}
                predictions = model(**inputs).logits.argmax(dim=-1)
            if right is not None:
                wrong = torch.arange(size) >= right[i]
            else:
                wrong = torch.arange(predictions.numel()).reshape(predictions.shape) % (3 + i) == 0
            labels = torch.where(wrong, (predictions + 1) % num_labels, predictions)
            batch["labels"] = torch.where(batch["labels"] != IGNORE_INDEX, labels, IGNORE_INDEX)
            batches.append(batch)
        table.append((what, task, num_labels, offset, batches, right))
    words = {"model": _Word("model"), "loader": _Word("loader"), "device": torch.device("cpu")}
    return cases(("task", "labels", "offset", "batches", "right"), table, given=words)


def _evaluation(inputs: dict) -> list[dict]:
    """A run: a tiny BERT left in training mode (as after a training step), made afresh, and a
    real DataLoader (``len(loader)``, ``loader.dataset``) yielding the case's batches as a GPU
    loader gives them (only the last batch may be smaller)."""
    batches = inputs["batches"]
    examples = [{k: v[i] for k, v in b.items()} for b in batches for i in range(len(b["labels"]))]

    def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return unmoved({k: torch.stack([item[k] for item in items]) for k in items[0]})

    size = len(batches[0]["labels"])
    loader = torch.utils.data.DataLoader(examples, batch_size=size, collate_fn=collate)
    model = _tiny_bert(inputs["task"], inputs["labels"], 0.5, inputs["offset"]).train()
    return [dict(inputs, model=model, loader=loader)]


def _accuracy(model, loader, device, *, mistake: str = "") -> float:  # noqa: ANN001
    """The text's accuracy: correct predictions over labelled positions, the whole loader;
    ``mistake``: one of :data:`EVAL_MISTAKES`' departures from it."""
    model.eval()
    counts = []
    with torch.no_grad():
        for batch in loader:
            batch = {key: value.to(device) for key, value in batch.items()}
            labelled = (batch["labels"] != IGNORE_INDEX) | (mistake == "ignored")
            predictions = model(**batch).logits.argmax(dim=-1)
            right = int((predictions == batch["labels"])[labelled].sum())
            counts.append((right, int(labelled.sum())))
    if mistake == "train":
        model.train()
    if mistake == "means":
        return sum(r / n for r, n in counts) / len(counts)
    return sum(r for r, _ in counts) / sum(n for _, n in counts) * (100 if mistake == "%" else 1)


LEAVE = "switch the model to evaluation mode (dropout off) and leave it there"
EVAL_MODE = "eval mode, in every sub-module (dropout off)"
NO_GRAD = "no gradient recorded, as the text says"
EVAL_MISTAKES = tuple(  # (name, the text's words it breaks, _accuracy's mistake)
    Mistake(name, breaks, functools.partial(_accuracy, mistake=kind))
    for name, breaks, kind in (
        ("a percentage, not a fraction", "return the fraction predicted correctly", "%"),
        ("the mean of per-batch accuracies", "count over the whole loader", "means"),
        ("the positions labelled -100 counted", "ignore positions labelled -100", "ignored"),
        ("the model put back in training mode", LEAVE, "train"),
    )
)


def _forwards_in_eval(case: Case, got: list, expected: list, seen: Any) -> None:
    """Dropout off in every sub-module at every forward pass (argmax may hide it), and the model
    left in eval mode: flags read in the student's process, claims (course.framework.observe.claim)."""
    for flags, _ in got[0]["forwards"]:
        on = _first_off(flags, False)
        claim(
            on is None,
            f"{case.what}: during a forward pass `{on}` was in training mode, so dropout made "
            "the predictions random",
            "The model arrives in training mode (as after a training step). Each sub-module has "
            "its own `training` flag: see what nn.Module.eval() does.",
            prop=EVAL_MODE,
        )
    on = _first_off(got[0]["modes"], False)
    claim(
        on is None,
        f"{case.what}: after the call `{on}` was in training mode again",
        "Switch the model to eval mode and do not switch it back: the caller decides when "
        "to train again.",
        prop=LEAVE,
    )


def _forwards_record_nothing(case: Case, got: list, expected: list, seen: Any) -> None:
    """No gradient recorded at any forward pass, which no result shows: grad mode read in the
    student's process, a claim (course.framework.observe.claim)."""
    claim(
        not any(grad for _, grad in got[0]["forwards"]),
        f"{case.what}: gradients were being recorded during a forward pass (memory and time "
        "wasted)",
        "Evaluation never calls backward: torch has a context in which nothing is recorded.",
        prop=NO_GRAD,
    )


evaluate_accuracy = check(
    Spec(
        exercise="Exercise 6.3",
        title="evaluation",
        name="evaluate_accuracy",
        params=("model", "loader", "device"),
        mutable=("model",),  # its mode; its weights are compared as values (watched)
        reference=_accuracy,
        mistakes=EVAL_MISTAKES,
        cases=_eval_cases,
        calls=_evaluation,
        watch=_watch,
        watched=("parameters",),  # the weights untouched (the modes left: a claim, above)
        properties=(
            Property(EVAL_MODE, _forwards_in_eval),
            Property(NO_GRAD, _forwards_record_nothing),
        ),
        device=False,  # the batches act as if on another device (course.framework.virtual.unmoved)
        hint="An evaluation observes the model without changing it: think about dropout, about "
        "gradient recording, and about which positions count and how to combine batches.",
    )
)
