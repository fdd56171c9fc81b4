"""Checks for notebook 06, BERT fine-tuning.

* ``mask_tokens``: BERT's masked-language-model corruption, tested statistically on a large
  synthetic batch (15% of the ordinary tokens selected; 80/10/10 split) and on its invariants
  (special and padding tokens never selected, labels -100 elsewhere, input left untouched).
* ``train_step``: one optimisation step, compared parameter by parameter with a reference step
  written with PyTorch built-ins, on a tiny BERT built from a config (milliseconds to run).
* ``evaluate_accuracy``: compared with a reference count of correct predictions, on uneven
  batches and on token labels that contain the ignore value -100.
"""

from __future__ import annotations

import contextlib
import copy
import numbers
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import torch
from torch import nn

from course.check import CheckFailure, exercise_check, expect, expect_equal, expect_shape

IGNORE_INDEX = -100  # the label value that PyTorch's cross-entropy (and BERT's heads) skip

# ----------------------------------------------------------------------------------------
# Exercise 6.1: MLM masking
# ----------------------------------------------------------------------------------------

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4  # a toy vocabulary with BERT-like special ids
VOCAB = 1000


def _synthetic_batch(
    batch: int, length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[CLS] w1 .. wn [SEP] [PAD] ..`` rows of random lengths and their special-token mask."""
    ids = torch.randint(5, VOCAB, (batch, length), generator=generator)
    lengths = torch.randint(3, length + 1, (batch,), generator=generator)  # incl. CLS and SEP
    positions = torch.arange(length).expand(batch, length)
    ids[:, 0] = CLS
    ids[positions == (lengths - 1).unsqueeze(1)] = SEP
    ids[positions >= lengths.unsqueeze(1)] = PAD
    special = (ids == CLS) | (ids == SEP) | (ids == PAD)
    return ids, special


def _call_masking(
    student_fn: Callable, ids: torch.Tensor, special: torch.Tensor, probability: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the student's function on copies, seeded, and validate the returned pair's form."""
    original = ids.clone()
    with torch.random.fork_rng(devices=[]):  # seeded without disturbing the notebook's RNG
        torch.manual_seed(seed)
        result = student_fn(ids, special.clone(), MASK, VOCAB, mlm_probability=probability)
    expect(
        isinstance(result, tuple) and len(result) == 2,
        f"mask_tokens should return a pair (masked_ids, labels), got {type(result).__name__}.",
    )
    masked, labels = result
    for name, value in (("masked_ids", masked), ("labels", labels)):
        expect_shape(value, ids.shape, f"{name} for input of shape {tuple(ids.shape)}")
        expect(
            value.dtype == torch.long,
            f"{name} has dtype {value.dtype}, expected torch.long (token ids).",
            "Build the outputs from `input_ids.clone()` so they keep its dtype.",
        )
    expect(
        torch.equal(ids, original),
        "mask_tokens changed its input tensor in place.",
        "Work on `input_ids.clone()`: the caller (and your labels) still need the originals.",
    )
    return masked, labels


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run the (tiny) check computations on one thread, then restore the setting: for tensors
    this small, thread start-up costs more than the work, many times so on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


_NAMES = {PAD: "[PAD]", CLS: "[CLS]", SEP: "[SEP]"}


def _first_violation(
    bad: torch.Tensor, describe: Callable[[int, int], str], hint: str | None = None
) -> None:
    """Fail, describing the first (row, position) where ``bad`` is True, if there is one."""
    if bad.any():
        row, col = (int(i) for i in bad.nonzero()[0])
        raise CheckFailure(describe(row, col), hint)


def _within(value: float, target: float, tolerance: float) -> bool:
    return abs(value - target) <= tolerance


def _mask_tokens_body(student_mask_tokens: Callable) -> None:
    generator = torch.Generator().manual_seed(0)
    ids, special = _synthetic_batch(batch=512, length=96, generator=generator)
    masked, labels = _call_masking(student_mask_tokens, ids, special, 0.15, seed=1)

    # Invariants first: they give the most precise messages.
    ordinary = ~special
    _first_violation(
        special & (masked != ids),
        lambda r, c: (
            f"a special/padding token was replaced: {_NAMES[int(ids[r, c])]} at (row {r}, "
            f"position {c}) became id {int(masked[r, c])}; special and padding tokens must never be "
            "selected."
        ),
        "Set the selection probability to 0 where `special_tokens_mask` is True.",
    )
    _first_violation(
        (labels != IGNORE_INDEX) & (labels != ids),
        lambda r, c: (
            f"label {int(labels[r, c])} at (row {r}, position {c}): every label must be "
            f"either -100 (token not selected) or the ORIGINAL id {int(ids[r, c])} (token selected)"
            + (", not the id after masking." if int(labels[r, c]) == int(masked[r, c]) else ".")
        ),
        "labels = input_ids.clone() before replacing anything; then labels[~selected] = -100.",
    )
    unselected = labels == IGNORE_INDEX
    expect(
        bool(unselected[ordinary].any()),
        "no ordinary token has label -100: either every token was selected, or the labels were "
        "not set to -100 on the unselected ones (the loss must only see the ~15% selected).",
        "Select each token with probability `mlm_probability`; labels[~selected] = -100.",
    )
    _first_violation(
        special & ~unselected,
        lambda r, c: (
            f"a special/padding token was selected: {_NAMES[int(ids[r, c])]} at (row {r}, "
            f"position {c}) has label {int(labels[r, c])} instead of -100."
        ),
        "Set the selection probability to 0 where `special_tokens_mask` is True.",
    )
    _first_violation(
        unselected & (masked != ids),
        lambda r, c: (
            f"token at (row {r}, position {c}) was replaced but its label is -100: only "
            "selected tokens (label = original id) may be replaced."
        ),
        "Apply the [MASK] and random replacements only inside the selected positions.",
    )
    selected = ~unselected

    # The 15% selection rate, measured over ~25k ordinary tokens (std about 0.2%).
    n_ordinary = int(ordinary.sum())
    rate = selected.sum().item() / n_ordinary
    expect(
        _within(rate, 0.15, 0.01),
        f"{100 * rate:.1f}% of the {n_ordinary} ordinary tokens were selected, expected about "
        "15% (mlm_probability=0.15).",
        "Select each ordinary token independently with probability `mlm_probability`; do not "
        "select every token.",
    )

    # The 80/10/10 split among the selected tokens (~3.7k of them, std under 1%).
    n_selected = int(selected.sum())
    to_mask = (masked == MASK) & selected
    kept = (masked == ids) & selected
    randomised = selected & ~to_mask & ~kept
    shares = [int(t.sum()) / n_selected for t in (to_mask, randomised, kept)]
    expect(
        _within(shares[0], 0.8, 0.03)
        and _within(shares[1], 0.1, 0.025)
        and _within(shares[2], 0.1, 0.025),
        "of the selected tokens {:.1f}% became [MASK], {:.1f}% a random token and {:.1f}% stayed "
        "unchanged; expected about 80% / 10% / 10%.".format(*(100 * s for s in shares)),
        "Among the selected: [MASK] with probability 0.8; of the remaining 20%, half (probability "
        "0.5, not 0.1) get a random id; the others stay as they are.",
    )
    random_ids = masked[randomised]
    expect(
        bool(((random_ids >= 0) & (random_ids < VOCAB)).all()),
        f"random replacements must be ids in [0, vocab_size={VOCAB}), got values from "
        f"{int(random_ids.min())} to {int(random_ids.max())}.",
        "torch.randint(vocab_size, shape) draws valid ids.",
    )
    expect(
        random_ids.unique().numel() > 0.5 * random_ids.numel(),
        f"the {random_ids.numel()} random replacements use only {random_ids.unique().numel()} "
        "distinct ids: they should be drawn uniformly from the vocabulary.",
        "torch.randint(vocab_size, input_ids.shape) gives one fresh random id per position.",
    )

    # mlm_probability is a parameter, not a constant.
    _, labels_30 = _call_masking(student_mask_tokens, ids, special, 0.3, seed=2)
    rate_30 = (labels_30[ordinary] != IGNORE_INDEX).float().mean().item()
    expect(
        _within(rate_30, 0.3, 0.015),
        f"with mlm_probability=0.3, {100 * rate_30:.1f}% of ordinary tokens were selected.",
        "Use the `mlm_probability` argument instead of a hard-coded 0.15.",
    )

    # Edge cases: a batch of one with an odd length, and a row with nothing to mask.
    one, one_special = _synthetic_batch(batch=1, length=7, generator=generator)
    _call_masking(student_mask_tokens, one, one_special, 0.15, seed=3)
    empty = torch.tensor([[CLS, SEP, PAD, PAD, PAD]])
    masked_e, labels_e = _call_masking(student_mask_tokens, empty, empty >= 0, 0.15, seed=4)
    expect(
        torch.equal(masked_e, empty) and bool((labels_e == IGNORE_INDEX).all()),
        "a row holding only [CLS] [SEP] [PAD]... must come back unchanged with all labels -100.",
    )


@exercise_check(
    "Exercise 6.1",
    "MLM masking",
    hint="Draw `torch.bernoulli` with probability `mlm_probability` on every position, set it to "
    "False where `special_tokens_mask` is True; labels = -100 where not selected; of the selected, "
    "80% become [MASK], half of the rest a random id in [0, vocab_size), the rest stay.",
)
def mask_tokens(student: Callable) -> None:
    """Statistics of the 15% / 80-10-10 rule on ~25k tokens, plus the invariants."""
    with _one_thread():
        _mask_tokens_body(student)


# ----------------------------------------------------------------------------------------
# Shared helpers for the training-step and evaluation checks: a tiny BERT from a config
# ----------------------------------------------------------------------------------------

TINY_VOCAB, TINY_LEN = 40, 9


def _tiny_bert(task: str = "sequence", num_labels: int = 2, dropout: float = 0.2) -> nn.Module:
    """A 1-layer, 16-wide BERT with random weights: behaves like the real one, runs in ms."""
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertForTokenClassification,
    )

    config = BertConfig(
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
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model_class = (
            BertForSequenceClassification if task == "sequence" else BertForTokenClassification
        )
        return model_class(config)


def _tiny_batch(size: int, seed: int, task: str = "sequence") -> dict[str, torch.Tensor]:
    """A padded batch of random ids with an attention mask and labels, like a collator's."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, TINY_VOCAB, (size, TINY_LEN), generator=generator)
    lengths = torch.randint(3, TINY_LEN + 1, (size,), generator=generator)
    attention = (torch.arange(TINY_LEN) < lengths.unsqueeze(1)).long()
    ids = ids * attention  # id 0 = [PAD] after each sequence
    ids[:, 0] = 2  # [CLS]
    if task == "sequence":
        labels = torch.randint(0, 2, (size,), generator=generator)
    else:
        labels = torch.randint(0, 2, (size, TINY_LEN), generator=generator)
        labels[attention == 0] = IGNORE_INDEX
        labels[:, 0] = IGNORE_INDEX
    return {"input_ids": ids, "attention_mask": attention, "labels": labels}


class _ForwardSpy:
    """Records, at each forward call of a model, its training flag and whether grad is on."""

    def __init__(self, model: nn.Module):
        self.training: list[bool] = []
        self.grad_enabled: list[bool] = []
        self.handle = model.register_forward_pre_hook(self._record)

    def _record(self, module: nn.Module, args: tuple) -> None:
        self.training.append(module.training)
        self.grad_enabled.append(torch.is_grad_enabled())

    def remove(self) -> None:
        self.handle.remove()


# ----------------------------------------------------------------------------------------
# Exercise 6.2: the training step
# ----------------------------------------------------------------------------------------


def _reference_step(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    max_grad_norm: float,
) -> float:
    """The textbook step, written independently of the notebook."""
    model.train()
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits,
        batch["labels"],
    )
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    return loss.item()


def _largest_difference(model: nn.Module, reference: nn.Module) -> tuple[float, str]:
    worst, where = 0.0, ""
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        diff = (p.detach() - q.detach()).abs().max().item()
        if diff > worst:
            worst, where = diff, name
    return worst, where


class _Comparison(NamedTuple):
    losses: list[float]
    reference_losses: list[float]
    scheduler: torch.optim.lr_scheduler.LambdaLR
    mismatch_step: int | None  # index of the first step whose parameters differ, None if none
    worst: float
    where: str


def _run_steps(
    student_step: Callable, lr_lambda: Callable[[int], float], max_grad_norm: float, n_steps: int
) -> _Comparison:
    """Run the student's and the reference step side by side with SGD (which, unlike Adam,
    is sensitive to clipping and to accumulated gradients) from identical states and seeds."""
    model = _tiny_bert()
    reference = copy.deepcopy(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, reference)]
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lr_lambda) for o in optimizers]
    losses, reference_losses = [], []
    for step in range(n_steps):
        batch = _tiny_batch(6, seed=10 + step)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(100 + step)  # the same dropout masks for both
            loss = student_step(
                model,
                {k: v.clone() for k, v in batch.items()},
                optimizers[0],
                schedulers[0],
                max_grad_norm=max_grad_norm,
            )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(100 + step)
            reference_losses.append(
                _reference_step(reference, batch, optimizers[1], schedulers[1], max_grad_norm)
            )
        losses.append(loss)
        worst, where = _largest_difference(model, reference)
        if worst > 1e-5:
            return _Comparison(losses, reference_losses, schedulers[0], step, worst, where)
    return _Comparison(losses, reference_losses, schedulers[0], None, 0.0, "")


class _BatchNotMoved(RuntimeError):
    """Raised when a tensor of a batch "on another device" is used before being moved."""


class _OnAnotherDevice(torch.Tensor):
    """A CPU tensor that behaves as if it lived on another device (a GPU data loader's, say):
    its shape, dtype and device can be read and ``.to(device)`` gives an ordinary tensor, but
    any computation with it fails, as mixing devices does. It makes a batch that is never moved
    to the model's device visible on a machine without a GPU."""

    _READ_ONLY = {"__get__", "size", "dim", "numel", "__len__", "__repr__", "__format__"}

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        name = getattr(func, "__name__", "")
        if name in ("to", "cuda", "cpu") or name in cls._READ_ONLY:
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **(kwargs or {}))
            if name in cls._READ_ONLY or not isinstance(out, torch.Tensor):
                return out
            return out.as_subclass(torch.Tensor).clone()
        raise _BatchNotMoved(f"`{name}` on a batch tensor that was not moved to the model's device")


def _batch_elsewhere(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value.clone().as_subclass(_OnAnotherDevice) for key, value in batch.items()}


def _train_step_body(student_train_step: Callable) -> None:
    constant = lambda step: 1.0  # noqa: E731 - a schedule that never changes the lr
    no_clip = 1e6

    # 1. One step, starting from a model left in eval mode: train mode, loss, update.
    model = _tiny_bert()
    model.eval()
    spy = _ForwardSpy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, constant)
    before = copy.deepcopy(model)
    torch.manual_seed(100)
    try:
        loss = student_train_step(
            model,
            _batch_elsewhere(_tiny_batch(6, seed=10)),
            optimizer,
            scheduler,
            max_grad_norm=no_clip,
        )
    except _BatchNotMoved as exc:
        raise CheckFailure(
            f"train_step used the batch where it came from, without moving it to the model's "
            f"device ({exc}); on a GPU this fails with 'Expected all tensors to be on the same "
            "device'. (The check hands over a batch that acts as if it lived on another device.)",
            "device = next(model.parameters()).device; batch = {k: v.to(device) for k, v in "
            "batch.items()} before calling the model.",
        ) from None
    finally:
        spy.remove()
    expect(len(spy.training) > 0, "train_step never called the model.")
    expect(
        all(spy.training),
        "the model was in eval mode during the training step, so dropout was off.",
        "Call model.train() at the start of the step: evaluation switches the model to eval mode.",
    )
    expect(
        isinstance(loss, float),
        f"train_step returned {type(loss).__name__}, expected a Python float.",
        "Return loss.item(): a float, which also lets the graph be freed.",
    )
    worst, _ = _largest_difference(model, before)
    expect(worst > 0, "the parameters did not change: no optimizer.step() (or no backward()).")

    # 2. Three steps, constant lr, no clipping: accumulated gradients show from step 2 on.
    losses, ref_losses, _, step, worst, where = _run_steps(
        student_train_step, constant, no_clip, n_steps=3
    )
    if step == 0:
        raise CheckFailure(
            f"after one step, parameter {where} differs from the reference by {worst:.3g}.",
            "Order: zero_grad, forward, loss.backward(), clip, optimizer.step(), scheduler.step().",
        )
    if step is not None:
        raise CheckFailure(
            f"step {step + 1} differs from the reference (parameter {where}, by {worst:.3g}) "
            "although step 1 matched: gradients are accumulating across steps.",
            "Call optimizer.zero_grad() in every step (before backward).",
        )
    for i, (a, b) in enumerate(zip(losses, ref_losses, strict=True)):
        expect(
            abs(a - b) < 1e-5,
            f"the loss returned at step {i + 1} is {a:.6g}, expected {b:.6g} (the batch's loss "
            "before the update).",
        )

    # 3. Clipping: with max_grad_norm=0.01 the reference rescales the gradient by ~100x.
    _, _, _, step, worst, where = _run_steps(student_train_step, constant, 0.01, n_steps=1)
    expect(
        step is None,
        f"with max_grad_norm=0.01 the update differs from the reference (parameter {where}, by "
        f"{worst:.3g}): the gradient was not clipped to norm max_grad_norm before the step.",
        "Call torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm) after "
        "loss.backward() and before optimizer.step(); use the argument, not a constant.",
    )

    # 4. A decaying schedule over three steps: the scheduler must step once, after the update.
    decay = lambda step: 1.0 / (1.0 + step)  # noqa: E731
    _, _, sched, step, worst, where = _run_steps(student_train_step, decay, no_clip, n_steps=3)
    expect_equal(
        sched.last_epoch,
        3 if step is None else step + 1,
        "scheduler steps taken after the training steps",
        "Call scheduler.step() once per training step, right after optimizer.step().",
    )
    expect(
        step is None,
        f"with a decaying learning rate, step {(step or 0) + 1} differs from the reference "
        f"(parameter {where}, by {worst:.3g}).",
        "Call scheduler.step() after optimizer.step(), so step k uses the k-th learning rate.",
    )


@exercise_check(
    "Exercise 6.2",
    "training step",
    hint="model.train(); optimizer.zero_grad(); loss = model(**batch).loss; loss.backward(); "
    "clip_grad_norm_(model.parameters(), max_grad_norm); optimizer.step(); scheduler.step(); "
    "return loss.item().",
)
def train_step(student: Callable) -> None:
    """Compare parameters after each step with a reference, in four targeted scenarios."""
    with _one_thread():
        _train_step_body(student)


# ----------------------------------------------------------------------------------------
# Exercise 6.3: evaluation
# ----------------------------------------------------------------------------------------


def _reference_predictions(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        logits = reference(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        ).logits
    return logits.argmax(dim=-1)


def _loader(batches: list[dict[str, torch.Tensor]]) -> Iterable:
    """A real DataLoader (so len(loader.dataset) works) that yields exactly ``batches``."""
    examples = [
        {k: v[i] for k, v in batch.items()}
        for batch in batches
        for i in range(len(batch["input_ids"]))
    ]
    sizes = [len(b["input_ids"]) for b in batches]
    expect(len(set(sizes[:-1])) <= 1, "internal: only the last batch may be smaller")

    def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {k: torch.stack([item[k] for item in items]) for k in items[0]}

    return torch.utils.data.DataLoader(examples, batch_size=sizes[0], collate_fn=collate)


def _call_evaluate(
    student_fn: Callable, model: nn.Module, loader: Iterable
) -> tuple[float, _ForwardSpy]:
    model.train()  # as it is after a training step
    spy = _ForwardSpy(model)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            result = student_fn(model, loader, torch.device("cpu"))
    finally:
        spy.remove()
    ok = isinstance(result, numbers.Real) or (
        isinstance(result, torch.Tensor) and result.numel() == 1
    )
    expect(
        ok,
        f"evaluate_accuracy returned {type(result).__name__}, expected a float.",
        "Return correct / total as a Python float.",
    )
    accuracy = float(result)
    expect(
        0.0 <= accuracy <= 1.0,
        f"accuracy {accuracy:.4g} is outside [0, 1]: return a fraction (correct predictions / "
        "labelled predictions), not a percentage.",
    )
    return accuracy, spy


def _evaluate_accuracy_body(student_evaluate: Callable) -> None:
    model = _tiny_bert(dropout=0.5)  # strong dropout: train mode would change predictions
    batches = [_tiny_batch(size, seed=20 + i) for i, size in enumerate((5, 5, 3))]
    # Labels chosen from the reference predictions so the batches score 5/5, 2/5 and 0/3:
    # accuracy 7/13, whereas averaging per-batch accuracies would give 0.467.
    for batch, n_right in zip(batches, (5, 2, 0), strict=True):
        predictions = _reference_predictions(model, batch)
        flip = torch.arange(len(predictions)) >= n_right
        batch["labels"] = torch.where(flip, 1 - predictions, predictions)
    accuracy, spy = _call_evaluate(student_evaluate, model, _loader(batches))
    expect(len(spy.training) > 0, "evaluate_accuracy never called the model.")
    expect(
        not model.training,
        "evaluate_accuracy left the model in train mode; its docstring promises eval mode "
        "(whoever uses the model next, a prediction or a plot, would get dropout noise).",
        "Call model.eval() before the loop and do not switch back to train mode at the end: "
        "train_step calls model.train() itself.",
    )
    expect(
        not any(spy.training),
        "the model was still in train mode during evaluation: dropout makes predictions random.",
        "Call model.eval() before the loop.",
    )
    expect(
        not any(spy.grad_enabled),
        "gradients were being recorded during evaluation (wasted memory and time).",
        "Wrap the loop in `with torch.no_grad():` (or torch.inference_mode()).",
    )
    expect(
        abs(accuracy - 7 / 13) < 1e-6,
        f"accuracy on batches of 5, 5 and 3 examples with 5, 2 and 0 correct is {accuracy:.4f}, "
        f"expected 7/13 = {7 / 13:.4f}"
        + (" (you averaged per-batch accuracies)" if abs(accuracy - 7 / 15) < 1e-6 else "")
        + ".",
        "Sum the correct predictions and the number of examples over all batches, divide once.",
    )

    # Batch of one.
    single = _tiny_batch(1, seed=30)
    single["labels"] = _reference_predictions(model, single)
    accuracy, _ = _call_evaluate(student_evaluate, model, _loader([single]))
    expect(abs(accuracy - 1.0) < 1e-6, f"a single correctly predicted example gave {accuracy}.")

    # Token classification: labels (batch, length) with -100 on [CLS] and padding.
    tagger = _tiny_bert(task="token", num_labels=3, dropout=0.5)
    batches = [_tiny_batch(size, seed=40 + i, task="token") for i, size in enumerate((4, 3))]
    correct = total = 0
    for i, batch in enumerate(batches):
        predictions = _reference_predictions(tagger, batch)
        valid = batch["labels"] != IGNORE_INDEX
        wrong = (torch.arange(predictions.numel()).reshape(predictions.shape) % (3 + i)) == 0
        labels = torch.where(wrong, (predictions + 1) % 3, predictions)
        batch["labels"] = torch.where(valid, labels, torch.full_like(labels, IGNORE_INDEX))
        correct += int(((labels == predictions) & valid).sum())
        total += int(valid.sum())
    accuracy, _ = _call_evaluate(student_evaluate, tagger, _loader(batches))
    expect(
        abs(accuracy - correct / total) < 1e-6,
        f"on a token-classification batch (labels of shape (batch, length), -100 on [CLS] and "
        f"padding) the accuracy is {accuracy:.4f}, expected {correct}/{total} = "
        f"{correct / total:.4f} counting only positions whose label is not -100.",
        "valid = labels != -100; correct += ((predictions == labels) & valid).sum(); "
        "total += valid.sum().",
    )


@exercise_check(
    "Exercise 6.3",
    "evaluation",
    hint="model.eval(); under torch.no_grad() loop over the loader, move each batch to `device`, "
    "predict logits.argmax(-1), count correct predictions and labelled positions (labels != -100) "
    "over ALL batches; return correct / total.",
)
def evaluate_accuracy(student: Callable) -> None:
    """Uneven batches (mean of batch means is wrong), dropout on, token labels with -100."""
    with _one_thread():
        _evaluate_accuracy_body(student)
