"""Checks for notebook 06, BERT fine-tuning.

* ``mask_tokens``: BERT's masked-language-model corruption, measured on large synthetic
  batches (the selection rate, the 80/10/10 split, for two values of ``mlm_probability``),
  its invariants on every case (special and padding tokens never selected, labels -100
  elsewhere, inputs untouched), small batches, and the device of its outputs (meta inputs).
* ``train_step``: steps of a tiny BERT (built from a config and seeded, milliseconds to run)
  compared parameter by parameter with the update the text describes, written as a formula
  (SGD: ``p - lr_k * min(1, max_norm / |g|) * g``); training mode of every sub-module at the
  forward pass, a batch that acts as if it lived on another device, the caller's batch dict
  untouched, the scheduler's step count, sequence and token classification.
* ``evaluate_accuracy``: compared with counts of correct predictions fixed by construction, on
  uneven batches, a batch of one and token labels with -100; eval mode of every sub-module and
  no gradient recording at every forward pass, batches on "another device", the model's
  weights untouched and eval mode left behind.

Every model a check hands to the student's code is built inside the observed call, and the
trusted reference is built again from the same seeds (:func:`_tiny_bert`), so the verdict
never rests on an object the student's code could have changed.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import nn

from course.check import CheckFailure, exercise_check, expect
from course.observe import StudentError
from course.properties import call, generator, modes, observe, seeded

IGNORE_INDEX = -100  # the label value that PyTorch's cross-entropy (and BERT's heads) skip


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


def _first_off(flags: dict[str, bool], wanted: bool) -> str | None:
    """The first sub-module whose training flag is not ``wanted``, or None."""
    return next((name for name, flag in flags.items() if flag != wanted), None)


# ----------------------------------------------------------------------------------------
# Exercise 6.1: MLM masking
# ----------------------------------------------------------------------------------------

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4  # a toy vocabulary with BERT-like special ids
VOCAB = 1000
_NAMES = {PAD: "[PAD]", CLS: "[CLS]", SEP: "[SEP]"}


class MaskingCase(NamedTuple):
    what: str
    batch: int
    length: int
    probability: float
    statistics: bool  # measure the selection rate and the 80/10/10 split


MASKING_CASES = (
    MaskingCase("512 rows of up to 96 tokens, mlm_probability=0.15", 512, 96, 0.15, True),
    MaskingCase("512 rows of up to 96 tokens, mlm_probability=0.3", 512, 96, 0.3, True),
    MaskingCase("a batch of one row of 7 tokens", 1, 7, 0.15, False),
    MaskingCase("3 rows of up to 33 tokens, mlm_probability=0.5", 3, 33, 0.5, False),
)


def _synthetic_batch(batch: int, length: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[CLS] w1 .. wn [SEP] [PAD] ..`` rows of random lengths and their special-token mask."""
    g = generator(offset)
    ids = torch.randint(5, VOCAB, (batch, length), generator=g)
    lengths = torch.randint(3, length + 1, (batch,), generator=g)  # incl. CLS and SEP
    positions = torch.arange(length).expand(batch, length)
    ids[:, 0] = CLS
    ids[positions == (lengths - 1).unsqueeze(1)] = SEP
    ids[positions >= lengths.unsqueeze(1)] = PAD
    special = (ids == CLS) | (ids == SEP) | (ids == PAD)
    return ids, special


def _first_violation(bad: torch.Tensor, describe: Callable[[int, int], str], hint: str) -> None:
    """Fail, describing the first (row, position) where ``bad`` is True, if there is one."""
    if bad.any():
        row, col = (int(i) for i in bad.nonzero()[0])
        raise CheckFailure(describe(row, col), hint)


def _within(value: float, target: float, tolerance: float) -> bool:
    return abs(value - target) <= tolerance


def _masking_pair(result: Any, ids: torch.Tensor, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    expect(
        isinstance(result, tuple | list) and len(result) == 2,
        f"{what}: mask_tokens should return a pair (masked_ids, labels), got "
        f"{type(result).__name__}.",
        "The docstring gives what the function returns.",
    )
    for name, value in zip(("masked_ids", "labels"), result, strict=True):
        expect(
            isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(ids.shape),
            f"{what}: {name} should be a tensor of shape {tuple(ids.shape)}, got "
            + (
                f"shape {tuple(value.shape)}."
                if isinstance(value, torch.Tensor)
                else f"a {type(value).__name__}."
            ),
            "Both outputs have the shape of `input_ids`.",
        )
        expect(
            value.dtype == torch.long,
            f"{what}: {name} has dtype {value.dtype}, expected torch.long (token ids).",
            "The docstring asks for long tensors, the dtype of token ids.",
        )
    return result[0], result[1]


def _invariants(
    masked: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor, special: torch.Tensor, what: str
) -> None:
    """Special tokens untouched, labels -100 or the original id, nothing else replaced."""
    _first_violation(
        special & ((masked != ids) | (labels != IGNORE_INDEX)),
        lambda r, c: (
            f"{what}: {_NAMES[int(ids[r, c])]} at (row {r}, position {c}) was selected (label "
            f"{int(labels[r, c])}, id after masking {int(masked[r, c])}). The property "
            "violated: special and padding tokens are never selected."
        ),
        "`special_tokens_mask` marks the positions whose selection probability is zero.",
    )
    _first_violation(
        (labels != IGNORE_INDEX) & (labels != ids),
        lambda r, c: (
            f"{what}: label {int(labels[r, c])} at (row {r}, position {c}); every label must be "
            f"-100 (token not selected) or the ORIGINAL id {int(ids[r, c])} (token selected)"
            + (", not the id after masking." if int(labels[r, c]) == int(masked[r, c]) else ".")
        ),
        "The labels are what the model must recover: take them before replacing anything.",
    )
    _first_violation(
        (labels == IGNORE_INDEX) & (masked != ids),
        lambda r, c: (
            f"{what}: the token at (row {r}, position {c}) was replaced but its label is -100: "
            "only selected tokens (label = original id) may be replaced."
        ),
        "The replacements happen inside the selected positions only.",
    )
    replaced = masked[(labels != IGNORE_INDEX) & (masked != MASK) & (masked != ids)]
    if not bool(((replaced >= 0) & (replaced < VOCAB)).all()):
        raise CheckFailure(
            f"{what}: random replacements must be ids in [0, vocab_size={VOCAB}), got values "
            f"from {int(replaced.min())} to {int(replaced.max())}.",
            "Random ids are drawn from the whole vocabulary, 0 to vocab_size - 1.",
        )


def _statistics(
    masked: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor, special: torch.Tensor, case
) -> None:
    """The selection rate and the 80/10/10 split, on tens of thousands of tokens."""
    ordinary = ~special
    selected = labels != IGNORE_INDEX
    n_ordinary, n_selected = int(ordinary.sum()), int(selected.sum())
    rate = n_selected / n_ordinary
    p = case.probability
    expect(
        _within(rate, p, 0.01 if p < 0.2 else 0.015),
        f"{case.what}: {100 * rate:.1f}% of the {n_ordinary} ordinary tokens were selected "
        f"(label not -100), expected about {100 * p:.0f}%.",
        "Each ordinary token is selected independently with probability `mlm_probability`, "
        "the argument; the labels of the tokens not selected are -100.",
    )
    to_mask = (masked == MASK) & selected
    kept = (masked == ids) & selected
    randomised = selected & ~to_mask & ~kept
    shares = [int(t.sum()) / n_selected for t in (to_mask, randomised, kept)]
    expect(
        _within(shares[0], 0.8, 0.03)
        and _within(shares[1], 0.1, 0.025)
        and _within(shares[2], 0.1, 0.025),
        f"{case.what}: of the selected tokens "
        "{:.1f}% became [MASK], {:.1f}% a random token and {:.1f}% stayed unchanged; expected "
        "about 80% / 10% / 10%.".format(*(100 * s for s in shares)),
        "The three shares are of the SELECTED tokens: after the 80% that become [MASK], the "
        "remaining 20% split into two halves.",
    )
    random_ids = masked[randomised]
    expect(
        random_ids.unique().numel() > 0.5 * random_ids.numel(),
        f"{case.what}: the {random_ids.numel()} random replacements use only "
        f"{random_ids.unique().numel()} distinct ids; they should be drawn uniformly from the "
        "vocabulary.",
        "One fresh random id per replaced position.",
    )


def _masking_case(student_mask_tokens: Callable, case: MaskingCase, offset: int) -> None:
    ids, special = _synthetic_batch(case.batch, case.length, offset)
    what = f"mask_tokens on {case.what}"
    result = call(
        what,
        student_mask_tokens,
        ids,
        special,
        MASK,
        VOCAB,
        mlm_probability=case.probability,
        random=True,
        names=("input_ids", "special_tokens_mask"),
    )
    masked, labels = _masking_pair(result, ids, what)
    _invariants(masked, labels, ids, special, what)
    if case.statistics:
        _statistics(masked, labels, ids, special, case)


def _devices_on_meta(function: Callable, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The devices of ``function``'s outputs for tensor arguments on the meta device.

    Boolean indexing needs the number of True entries, which a meta tensor lacks: torch is told
    to assume all of them (the shapes are then fake, the devices real). Code that needs data
    (``.item()``, ``if tensor.any():``) cannot run there: that is no verdict ("unknown").
    """
    import torch.fx.experimental._config as fx_config

    moved = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    try:
        with fx_config.patch(meta_nonzero_assume_all_nonzero=True):
            out = function(*moved, **kwargs)
    except NotImplementedError:
        return {"devices": "unknown"}
    if not isinstance(out, tuple | list):
        return {"devices": [type(out).__name__]}
    return {"devices": [v.device.type if isinstance(v, torch.Tensor) else None for v in out]}


_DATA_NEEDED = ("meta tensor", "meta tensors", "data-dependent", "Cannot access data")


def _masking_device(student_mask_tokens: Callable) -> None:
    ids, special = _synthetic_batch(2, 9, 50)
    what = "mask_tokens on a batch that lives on another device (the meta device)"
    try:
        out = observe(
            what,
            lambda: _devices_on_meta(student_mask_tokens, ids, special, MASK, VOCAB),
            random=True,
        )
    except StudentError as error:
        if any(part in error.message for part in _DATA_NEEDED) and "device" not in error.message:
            return  # the code reads tensor values: the meta device cannot tell
        raise CheckFailure(
            f"{what}: {error.message}. The property violated: the function works wherever "
            "`input_ids` lives (on a GPU, tensors made without a device stay on the CPU).",
            "Every tensor the function creates must be created on the device of `input_ids`.",
        ) from None
    expect(
        out["devices"] == "unknown" or out["devices"] == ["meta", "meta"],
        f"{what}: the outputs came back on {out['devices']}, expected both on the device of "
        "`input_ids`. The property violated: the function works wherever `input_ids` lives.",
        "Every tensor the function creates must be created on the device of `input_ids`.",
    )


@exercise_check(
    "Exercise 6.1",
    "MLM masking",
    hint="Two random decisions: first which ordinary tokens are selected (probability "
    "`mlm_probability`), then, among the selected only, what happens to each (80/10/10).",
)
def mask_tokens(student_mask_tokens: Callable) -> None:
    """The 15% / 80-10-10 rule measured on ~25k tokens, the invariants, shapes and device."""
    with _one_thread():
        for offset, case in enumerate(MASKING_CASES):
            _masking_case(student_mask_tokens, case, offset)
        empty = torch.tensor([[CLS, SEP, PAD, PAD, PAD]])
        masked, labels = _masking_pair(
            call(
                "mask_tokens on a row holding only [CLS] [SEP] [PAD]...",
                student_mask_tokens,
                empty,
                torch.ones_like(empty, dtype=torch.bool),
                MASK,
                VOCAB,
                mlm_probability=0.15,
                random=True,
                names=("input_ids", "special_tokens_mask"),
            ),
            empty,
            "a row holding only [CLS] [SEP] [PAD]...",
        )
        expect(
            torch.equal(masked, empty) and bool((labels == IGNORE_INDEX).all()),
            "a row holding only [CLS] [SEP] [PAD]... must come back unchanged with all labels "
            "-100: nothing in it can be selected.",
            "`special_tokens_mask` marks the positions whose selection probability is zero.",
        )
        _masking_device(student_mask_tokens)


# ----------------------------------------------------------------------------------------
# A tiny BERT from a config, built identically in the student's process and the grader's
# ----------------------------------------------------------------------------------------

TINY_VOCAB = 40
BASE_LR = 0.5  # SGD, which unlike Adam is sensitive to clipping and to accumulated gradients
DROPOUT_SEED = 1000  # seeded() offset of the dropout masks of step k: DROPOUT_SEED + k


def _tiny_bert(task: str, num_labels: int, dropout: float, offset: int) -> nn.Module:
    """A 1-layer, 16-wide BERT (``task``: "sequence" or "token") with weights drawn from
    ``generator(offset)`` in a fixed order, the same in every process and transformers version.
    """
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
    model_class = (
        BertForSequenceClassification if task == "sequence" else BertForTokenClassification
    )
    with seeded(offset):
        model = model_class(config)
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
    if task == "sequence":
        labels = torch.randint(0, num_labels, (size,), generator=g)
    else:
        labels = torch.randint(0, num_labels, (size, length), generator=g)
        labels[attention == 0] = IGNORE_INDEX
        labels[:, 0] = IGNORE_INDEX
    return {"input_ids": ids, "attention_mask": attention, "labels": labels}


class _BatchNotMoved(RuntimeError):
    """Raised when a tensor of a batch "on another device" is used before being moved."""


class _OnAnotherDevice(torch.Tensor):
    """A CPU tensor that behaves as if it lived on another device (a GPU data loader's, say):
    its shape, dtype and device can be read and ``.to(device)`` gives an ordinary tensor, but
    any computation with it fails, as mixing devices does. It makes a batch that is never moved
    to the model's device visible on a machine without a GPU, also for code that the meta
    device cannot run (data-dependent shapes, ``.item()``)."""

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
        raise _BatchNotMoved(f"`{name}` on a batch tensor that was not moved to a device")


def _elsewhere(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value.clone().as_subclass(_OnAnotherDevice) for key, value in batch.items()}


def _not_moved(error: StudentError) -> bool:
    return "_BatchNotMoved" in error.error_type.split(",")


def _parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _record_forwards(model: nn.Module, forwards: list[dict[str, Any]]) -> Any:
    """Record, at each forward call, every sub-module's training flag and the grad mode."""

    def record(module: nn.Module, args: tuple) -> None:
        forwards.append({"modes": modes(module), "grad": torch.is_grad_enabled()})

    return model.register_forward_pre_hook(record)


# ----------------------------------------------------------------------------------------
# Exercise 6.2: the training step
# ----------------------------------------------------------------------------------------

SCHEDULES: dict[str, Callable[[int], float]] = {
    "constant": lambda step: 1.0,
    "decay": lambda step: 1.0 / (1.0 + step),
}
NO_CLIP = 1e6
BATCH_KEYS = ("attention_mask", "input_ids", "labels")  # sorted


class StepCase(NamedTuple):
    what: str
    task: str
    sizes: tuple[int, ...]  # batch size of each step
    length: int
    schedule: str
    max_grad_norm: float
    hint: str  # what a wrong parameter update most likely means in this case


STEP_CASES = (
    StepCase(
        "one step of a model left in eval mode, constant learning rate, no clipping",
        "sequence",
        (6,),
        9,
        "constant",
        NO_CLIP,
        "One step: forward (dropout on), loss, gradients of that loss alone, update.",
    ),
    StepCase(
        "three steps, constant learning rate, no clipping",
        "sequence",
        (6, 6, 6),
        9,
        "constant",
        NO_CLIP,
        "Each update must use the gradient of its own batch only: gradients add up in "
        "`.grad` until something clears them.",
    ),
    StepCase(
        "one step with max_grad_norm=0.01 (the gradient must be rescaled)",
        "sequence",
        (6,),
        9,
        "constant",
        0.01,
        "The update must use the gradient rescaled to global norm `max_grad_norm` (the "
        "argument): rescaling after the update, or with another norm, changes nothing.",
    ),
    StepCase(
        "three steps with a decaying learning rate",
        "sequence",
        (4, 4, 4),
        9,
        "decay",
        NO_CLIP,
        "Step k must use the k-th learning rate of the schedule: the scheduler moves on once per "
        "step, after the update it governs.",
    ),
    StepCase(
        "two steps of a token classifier (labels (batch, length) with -100), batches of 1 and 3, "
        "max_grad_norm=0.5",
        "token",
        (1, 3),
        7,
        "constant",
        0.5,
        "The loss is the model's own (`.loss`), which skips the -100 labels.",
    ),
)


def _step_batches(case: StepCase, offset: int) -> list[dict[str, torch.Tensor]]:
    return [
        _tiny_batch(size, case.length, case.task, 3, 100 * offset + k)
        for k, size in enumerate(case.sizes)
    ]


def _student_steps(student_train_step: Callable, case: StepCase, offset: int) -> dict[str, Any]:
    """(Inside observe) the student's steps on a freshly built model; plain data per step."""
    model = _tiny_bert(case.task, 3, 0.2, offset)
    model.eval()  # as after an evaluation
    optimizer = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, SCHEDULES[case.schedule])
    steps = []
    for k, batch in enumerate(_step_batches(case, offset)):
        given = _elsewhere(batch)
        originals = dict(given)
        forwards: list[dict[str, Any]] = []
        handle = _record_forwards(model, forwards)
        try:
            with seeded(DROPOUT_SEED + k):  # the dropout masks of the reference step
                loss = student_train_step(
                    model, given, optimizer, scheduler, max_grad_norm=case.max_grad_norm
                )
        finally:
            handle.remove()
        steps.append(
            {
                "loss": loss,
                "forwards": forwards,
                "batch": {
                    "keys": sorted(given),
                    "replaced": sorted(
                        key for key in originals if given.get(key) is not originals[key]
                    ),
                },
                "scheduler_steps": scheduler.last_epoch,
                "parameters": _parameters(model),
            }
        )
    return {"steps": steps}


def _reference_steps(case: StepCase, offset: int) -> list[dict[str, Any]]:
    """The update the text describes, as a formula, on a model built from the same seeds."""
    model = _tiny_bert(case.task, 3, 0.2, offset)
    model.train()
    parameters = dict(model.named_parameters())
    out = []
    for k, batch in enumerate(_step_batches(case, offset)):
        with seeded(DROPOUT_SEED + k), torch.enable_grad():
            loss = model(**batch).loss
            grads = torch.autograd.grad(loss, list(parameters.values()), allow_unused=True)
        grads = [
            torch.zeros_like(p) if g is None else g
            for p, g in zip(parameters.values(), grads, strict=True)
        ]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        scale = min(1.0, case.max_grad_norm / (float(norm) + 1e-6))
        lr = BASE_LR * SCHEDULES[case.schedule](k)
        with torch.no_grad():
            for p, g in zip(parameters.values(), grads, strict=True):
                p.sub_(lr * scale * g)
        out.append({"loss": float(loss.detach()), "parameters": _parameters(model)})
    return out


def _largest_difference(
    got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]
) -> tuple[float, str]:
    worst, where = 0.0, ""
    for name, value in expected.items():
        mine = got.get(name)
        if not isinstance(mine, torch.Tensor) or mine.shape != value.shape:
            return float("inf"), name
        diff = float((mine - value).abs().max())
        if not diff <= worst:  # NaN counts as the worst
            worst, where = diff, name
    return worst, where


def _step_case(student_train_step: Callable, case: StepCase, offset: int) -> None:
    what = f"train_step, {case.what}"
    try:
        observed = observe(
            what, lambda: _student_steps(student_train_step, case, offset), random=True
        )
    except StudentError as error:
        if _not_moved(error):
            raise CheckFailure(
                f"{what}: the model was called with the batch where it came from, not moved to "
                "the model's device. The property violated: device (the check hands over a batch "
                "that acts as if it lived on another device; on a GPU this fails with 'Expected "
                "all tensors to be on the same device').",
                "The model's parameters tell where it lives; every tensor of the batch must be "
                "moved there before the forward pass.",
            ) from None
        raise CheckFailure(f"{what}: {error.message}") from None
    reference = _reference_steps(case, offset)
    start = _tiny_bert(case.task, 3, 0.2, offset)
    previous = _parameters(start)
    for k, (mine, ref) in enumerate(zip(observed["steps"], reference, strict=True)):
        at = f"{what}: step {k + 1}"
        expect(bool(mine["forwards"]), f"{at}: train_step never called the model.")
        for forward in mine["forwards"]:
            off = _first_off(forward["modes"], True)
            expect(
                off is None,
                f"{at}: during the forward pass `{off}` was in eval mode (its dropout off). The "
                "property violated: training mode, in every sub-module.",
                "The model arrives in eval mode (as after an evaluation). Each sub-module has its "
                "own `training` flag, which its dropout reads: see what nn.Module.train() does.",
            )
        expect(
            mine["batch"]["keys"] == list(BATCH_KEYS) and not mine["batch"]["replaced"],
            f"{at}: your code changed the caller's `batch` dict (keys now "
            f"{mine['batch']['keys']}, entries replaced: {mine['batch']['replaced']}; expected "
            f"{list(BATCH_KEYS)} unchanged). The property violated: inputs untouched.",
            "Build a new dict for the moved tensors; the caller may reuse its batch.",
        )
        loss = mine["loss"]
        expect(
            isinstance(loss, float),
            f"{at}: train_step returned a {type(loss).__name__}, expected a Python float.",
            "The exercise asks for the loss as a Python number, detached from the graph.",
        )
        expect(
            mine["scheduler_steps"] == k + 1,
            f"{at}: after {k + 1} training step(s) the scheduler has taken "
            f"{mine['scheduler_steps']} step(s), expected {k + 1}.",
            "The scheduler moves on exactly once per training step.",
        )
        unchanged, _ = _largest_difference(mine["parameters"], previous)
        expect(
            unchanged > 0,
            f"{at}: the parameters did not change: no update was applied.",
            "Gradients must be computed and then applied by the optimizer.",
        )
        worst, where = _largest_difference(mine["parameters"], ref["parameters"])
        expect(
            worst <= 1e-5,
            f"{at}: parameter {where} differs from the update the text describes by {worst:.3g}"
            + (" although step 1 matched." if k > 0 else "."),
            case.hint,
        )
        expect(
            abs(loss - ref["loss"]) < 1e-5,
            f"{at}: the loss returned is {loss:.6g}, expected {ref['loss']:.6g} (the batch's loss "
            "before the update).",
            "Return the loss that the gradient was computed from.",
        )
        previous = mine["parameters"]


@exercise_check(
    "Exercise 6.2",
    "training step",
    hint="The text lists the steps in order; each one acts on state left by the previous step "
    "(the mode of the model, `.grad`, the learning rate), so think about what each leaves behind.",
)
def train_step(student_train_step: Callable) -> None:
    """Parameters after every step compared with the formula, in five cases (a table)."""
    with _one_thread():
        for offset, case in enumerate(STEP_CASES):
            _step_case(student_train_step, case, offset)


# ----------------------------------------------------------------------------------------
# Exercise 6.3: evaluation
# ----------------------------------------------------------------------------------------


class EvalCase(NamedTuple):
    what: str
    task: str
    num_labels: int
    sizes: tuple[int, ...]  # batch sizes; only the last may be smaller
    length: int
    right: tuple[int, ...] | None  # sequence task: correct examples per batch (the first ones)


EVAL_CASES = (
    EvalCase(
        "batches of 5, 5 and 3 sentences with 5, 2 and 0 right",
        "sequence",
        2,
        (5, 5, 3),
        9,
        (5, 2, 0),
    ),
    EvalCase("one batch of one sentence, predicted right", "sequence", 3, (1,), 6, (1,)),
    EvalCase(
        "a token classifier: batches of 4 and 3 sentences, labels (batch, length) with -100 on "
        "[CLS] and padding",
        "token",
        3,
        (4, 3),
        9,
        None,
    ),
)


def _eval_batches(case: EvalCase, offset: int) -> tuple[list[dict[str, torch.Tensor]], int, int]:
    """The batches with labels fixed from the reference model's predictions, so that the
    number of correct predictions is known: (batches, correct, labelled positions)."""
    model = _tiny_bert(case.task, case.num_labels, 0.5, offset).eval()
    batches, correct, total = [], 0, 0
    for i, size in enumerate(case.sizes):
        batch = _tiny_batch(size, case.length, case.task, case.num_labels, 100 * offset + i)
        with torch.no_grad():
            predictions = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
            ).logits.argmax(dim=-1)
        if case.right is not None:
            wrong = torch.arange(size) >= case.right[i]
        else:
            wrong = torch.arange(predictions.numel()).reshape(predictions.shape) % (3 + i) == 0
        labels = torch.where(wrong, (predictions + 1) % case.num_labels, predictions)
        valid = batch["labels"] != IGNORE_INDEX
        batch["labels"] = torch.where(valid, labels, torch.full_like(labels, IGNORE_INDEX))
        correct += int((~wrong & valid).sum())
        total += int(valid.sum())
        batches.append(batch)
    return batches, correct, total


def _loader(batches: list[dict[str, torch.Tensor]]) -> torch.utils.data.DataLoader:
    """A real DataLoader (``len(loader)``, ``loader.dataset``) yielding exactly ``batches``, as
    tensors "on another device" (only the last batch may be smaller)."""
    examples = [
        {k: v[i] for k, v in batch.items()}
        for batch in batches
        for i in range(len(batch["labels"]))
    ]
    size = len(batches[0]["labels"])

    def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return _elsewhere({k: torch.stack([item[k] for item in items]) for k in items[0]})

    return torch.utils.data.DataLoader(examples, batch_size=size, collate_fn=collate)


def _student_evaluation(student_evaluate: Callable, case: EvalCase, offset: int, batches) -> dict:
    """(Inside observe) the student's evaluation of a freshly built model left in train mode."""
    model = _tiny_bert(case.task, case.num_labels, 0.5, offset)
    model.train()  # as after a training step
    forwards: list[dict[str, Any]] = []
    handle = _record_forwards(model, forwards)
    try:
        result = student_evaluate(model, _loader(batches), torch.device("cpu"))
    finally:
        handle.remove()
    return {
        "result": result,
        "forwards": forwards,
        "modes_after": modes(model),
        "parameters": _parameters(model),
    }


def _eval_case(student_evaluate: Callable, case: EvalCase, offset: int) -> None:
    what = f"evaluate_accuracy on {case.what}"
    batches, correct, total = _eval_batches(case, offset)
    try:
        observed = observe(
            what, lambda: _student_evaluation(student_evaluate, case, offset, batches), random=True
        )
    except StudentError as error:
        if _not_moved(error):
            raise CheckFailure(
                f"{what}: the model was called with a batch where the loader left it, not moved "
                "to `device`. The property violated: device (the check's loader yields batches "
                "that act as if they lived on another device).",
                "The `device` argument says where the model lives; every tensor of a batch must "
                "be moved there before the forward pass.",
            ) from None
        raise CheckFailure(f"{what}: {error.message}") from None
    expect(bool(observed["forwards"]), f"{what}: evaluate_accuracy never called the model.")
    for forward in observed["forwards"]:
        on = _first_off(forward["modes"], False)
        expect(
            on is None,
            f"{what}: during a forward pass `{on}` was in training mode, so dropout made the "
            "predictions random. The property violated: eval mode, in every sub-module.",
            "The model arrives in training mode (as after a training step). Each sub-module has "
            "its own `training` flag: see what nn.Module.eval() does.",
        )
        expect(
            not forward["grad"],
            f"{what}: gradients were being recorded during a forward pass (memory and time "
            "wasted). The property violated: no gradient where the contract says none.",
            "Evaluation never calls backward: torch has a context in which nothing is recorded.",
        )
    left_on = _first_off(observed["modes_after"], False)
    expect(
        left_on is None,
        f"{what}: the model was left with `{left_on}` in training mode; the docstring says "
        "evaluate_accuracy leaves the model in eval mode.",
        "Whoever uses the model next (a prediction, a plot) expects eval mode; train_step "
        "switches back to training mode itself.",
    )
    reference = _parameters(_tiny_bert(case.task, case.num_labels, 0.5, offset))
    worst, where = _largest_difference(observed["parameters"], reference)
    expect(
        worst == 0.0,
        f"{what}: evaluation changed the model's parameter {where}. The property violated: "
        "inputs untouched.",
        "Evaluation reads the model; only training changes its weights.",
    )
    result = observed["result"]
    expect(
        (isinstance(result, numbers.Real) and not isinstance(result, bool))
        or (isinstance(result, torch.Tensor) and result.numel() == 1),
        f"{what}: evaluate_accuracy returned {type(result).__name__}, expected a float.",
        "The docstring gives the type of the result.",
    )
    accuracy, expected = float(result), correct / total
    per_batch = None
    if case.right is not None:
        per_batch = sum(r / s for r, s in zip(case.right, case.sizes, strict=True)) / len(
            case.sizes
        )
    expect(
        abs(accuracy - expected) < 1e-6,
        f"{what}: the accuracy is {accuracy:.4f}, expected {correct}/{total} = {expected:.4f}"
        + (
            " (the mean of per-batch accuracies)"
            if per_batch and abs(accuracy - per_batch) < 1e-6
            else ""
        )
        + (" (a percentage, not a fraction)" if abs(accuracy - 100 * expected) < 1e-4 else "")
        + ".",
        "Count correct predictions and labelled positions (labels other than -100) over the "
        "whole loader, then divide once.",
    )


@exercise_check(
    "Exercise 6.3",
    "evaluation",
    hint="An evaluation observes the model without changing it: think about dropout, about "
    "gradient recording, and about which positions count and how to combine batches.",
)
def evaluate_accuracy(student_evaluate_accuracy: Callable) -> None:
    """Uneven batches (mean of batch means is wrong), a batch of one, token labels with -100."""
    with _one_thread():
        for offset, case in enumerate(EVAL_CASES):
            _eval_case(student_evaluate_accuracy, case, 20 + offset)
