"""Checks for notebook 08, intent classification with out-of-scope detection.

* ``masked_mean_pool``: compared with a per-row loop over the real tokens only, on random
  masks, float64, a batch of one, an odd length and a row with no real token (zeros, not NaN).
* ``apply_threshold``: compared with a reference written from the definition (softmax over
  the classes, then "confidence below the threshold -> out of scope") on logits that carry
  per-row offsets, so thresholding the raw logits or a softmax over the wrong axis gives
  different answers; thresholds 0 and above 1, a fully confident row at threshold 1, the
  out-of-scope id as an extra label and as a column, float64 and a batch of one.
* ``oos_metrics``: a hand-computed example whose three wrong readings (accuracy over every
  row, accuracy over the accepted rows only, recall and precision swapped) all give other
  numbers; nothing flagged (precision 0.0) and a random case against a reference.
* ``choose_threshold``: two synthetic validation sets with different answers (a function
  that does not use the data it is given, e.g. the test split, cannot pass both), two
  accuracy budgets, explicit and default candidate grids; the synthetic logits carry offsets
  so that thresholding logits instead of probabilities moves the answer.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch

from course.check import exercise_check, expect, expect_close, expect_equal, expect_shape

METRIC_KEYS = ("in_scope_accuracy", "oos_recall", "oos_precision")

# ----------------------------------------------------------------------------------------
# Exercise 8.1: masked mean pooling
# ----------------------------------------------------------------------------------------


def _reference_pool(hidden: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the real tokens of each row, written as a plain loop (zeros for empty rows)."""
    rows = []
    for states, keep in zip(hidden, token_mask, strict=True):
        real = states[keep]
        rows.append(real.mean(dim=0) if len(real) else torch.zeros_like(states[0]))
    return torch.stack(rows)


def _random_mask(batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Right-padded masks (True = real token) of random lengths, at least one real token."""
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    lengths[0] = length  # one row without padding
    return torch.arange(length).expand(batch, length) < lengths.unsqueeze(1)


@exercise_check(
    "Exercise 8.1",
    "masked mean pooling",
    hint="Zero the padded positions (multiply by the mask as a float, with a trailing axis "
    "of size 1), sum over the token axis and divide by the number of real tokens, clamped "
    "to at least 1.",
)
def masked_mean_pool(student_pool: Callable[..., torch.Tensor]) -> None:
    """Compare with a loop over real tokens on random, edge-case and float64 inputs."""
    generator = torch.Generator().manual_seed(8)
    hidden = torch.randn(5, 7, 6, generator=generator) * 3 + 1
    mask = _random_mask(5, 7, generator)
    original = hidden.clone()
    out = student_pool(hidden, mask)
    expect_shape(
        out,
        (5, 6),
        "masked_mean_pool(hidden (5, 7, 6), mask (5, 7))",
        hint="Average over the token axis (dim=1): one vector per sentence.",
    )
    expect(
        torch.equal(hidden, original),
        "masked_mean_pool changed its input tensor in place.",
        hint="Build new tensors (hidden * mask) instead of writing into `hidden`.",
    )
    expect_close(
        out,
        _reference_pool(hidden, mask),
        what="the pooled vectors of a right-padded batch",
        hint="Padded positions must not count: neither in the sum nor in the number you divide by.",
    )

    # Padding placed anywhere (left padding, holes): only the mask decides.
    scattered = torch.rand(4, 9, generator=generator) < 0.6
    scattered[:, 4] = True
    hidden = torch.randn(4, 9, 3, generator=generator)
    expect_close(
        student_pool(hidden, scattered),
        _reference_pool(hidden, scattered),
        what="pooling with padding at arbitrary positions",
        hint="Use the mask itself, not the position of the first padding token.",
    )

    one = torch.randn(1, 5, 4, dtype=torch.float64, generator=generator)
    one_mask = torch.tensor([[True, True, True, False, False]])
    expect_close(
        student_pool(one, one_mask),
        _reference_pool(one, one_mask),
        what="a batch of one in float64",
        atol=1e-12,
        rtol=1e-10,
    )

    empty = torch.randn(2, 3, 4, generator=generator)
    empty_mask = torch.tensor([[True, False, True], [False, False, False]])
    out = student_pool(empty, empty_mask)
    expect(
        bool(torch.isfinite(out).all()),
        "a row with no real token gives NaN or inf (0 / 0).",
        hint="Clamp the token count to at least 1: the sum of such a row is 0, so its "
        "mean becomes a zero vector.",
    )
    expect_close(
        out,
        _reference_pool(empty, empty_mask),
        what="a batch with an all-padding row (expected: a zero vector)",
    )


# ----------------------------------------------------------------------------------------
# Exercise 8.2: thresholding the softmax confidence
# ----------------------------------------------------------------------------------------


def _reference_threshold(logits: torch.Tensor, threshold: float, oos_id: int) -> torch.Tensor:
    """Most probable class, replaced by ``oos_id`` where its softmax probability < threshold."""
    exps = torch.exp(logits.double() - logits.double().amax(dim=-1, keepdim=True))
    probs = exps / exps.sum(dim=-1, keepdim=True)  # softmax written out, in float64
    best = probs.argmax(dim=-1)
    confidence = probs.gather(-1, best.unsqueeze(-1)).squeeze(-1)
    return torch.where(confidence >= threshold, best, torch.full_like(best, oos_id)).long()


def _offset_logits(
    n: int, classes: int, generator: torch.Generator, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Logits of varied sharpness plus a per-row offset (the softmax ignores the offset)."""
    scale = torch.rand(n, 1, generator=generator, dtype=torch.float64) * 4 + 0.5
    logits = torch.randn(n, classes, generator=generator, dtype=torch.float64) * scale
    offset = torch.rand(n, 1, generator=generator, dtype=torch.float64) * 8 - 2
    return (logits + offset).to(dtype)


def _expect_predictions(
    student: torch.Tensor, expected: torch.Tensor, what: str, hint: str | None = None
) -> None:
    expect_shape(
        student, expected.shape, what, hint="Return one label per row: shape (N,), a LongTensor."
    )
    expect(
        student.dtype == torch.long,
        f"{what} has dtype {student.dtype}, expected torch.int64.",
        hint="argmax returns a LongTensor; keep it (torch.where(keep, pred, oos_id)).",
    )
    wrong = (student.cpu() != expected).nonzero().flatten()
    if len(wrong):
        row = int(wrong[0])
        expect(
            False,
            f"{what}: row {row} is labelled {int(student[row])}, expected "
            f"{int(expected[row])} ({len(wrong)} of {len(expected)} rows differ).",
            hint,
        )


@exercise_check(
    "Exercise 8.2",
    "confidence threshold",
    hint="probs = logits.softmax(dim=-1); confidence, prediction = probs.max(dim=-1); rows "
    "whose confidence is below the threshold get `oos_id`.",
)
def apply_threshold(student_fn: Callable[..., torch.Tensor]) -> None:
    """Compare with the definition on offset logits, edge thresholds and edge shapes."""
    generator = torch.Generator().manual_seed(80)
    logits = _offset_logits(40, 6, generator)
    original = logits.clone()
    for threshold in (0.5, 0.3, 0.8):
        _expect_predictions(
            student_fn(logits, threshold, 6),
            _reference_threshold(logits, threshold, 6),
            f"apply_threshold(logits (40, 6), threshold={threshold}, oos_id=6)",
            hint="Compare the largest softmax *probability* (not the largest logit, not a "
            "log-probability) with the threshold; the softmax runs over the classes (dim=-1).",
        )
    expect(
        torch.equal(logits, original),
        "apply_threshold changed the logits in place.",
        hint="Build the prediction in a new tensor.",
    )

    _expect_predictions(
        student_fn(logits, 0.0, 6),
        logits.argmax(dim=-1),
        "threshold 0 (nothing may be flagged: every probability is >= 0)",
    )
    _expect_predictions(
        student_fn(logits, 1.01, 6),
        torch.full((40,), 6),
        "threshold 1.01 (everything must be flagged out of scope)",
        hint="Rows whose confidence is below the threshold get oos_id.",
    )
    sure = torch.tensor([[50.0, 0.0, 0.0], [0.0, 0.0, 50.0], [1.0, 2.0, 0.0]])
    _expect_predictions(
        student_fn(sure, 1.0, 3),
        torch.tensor([0, 2, 3]),
        "threshold 1.0 with two rows of probability exactly 1.0",
        hint="A confidence equal to the threshold is kept (>=); only a "
        "confidence strictly below it is out of scope.",
    )

    _expect_predictions(
        student_fn(logits, 0.5, 17),
        _reference_threshold(logits, 0.5, 17),
        "oos_id=17",
        hint="Use the `oos_id` argument; do not hard-code a label.",
    )
    # A 151-class model has a column for "oos": its argmax may already be oos_id.
    _expect_predictions(
        student_fn(logits, 0.5, 5),
        _reference_threshold(logits, 0.5, 5),
        "oos_id=5, the last column (a model trained with an oos class)",
    )

    one = _offset_logits(1, 9, generator, dtype=torch.float64)
    _expect_predictions(
        student_fn(one, 0.4, 9), _reference_threshold(one, 0.4, 9), "a batch of one, float64 logits"
    )
    wide = _offset_logits(3, 150, generator)  # more classes than rows: axis mix-ups show
    for threshold in (0.02, 0.05):
        _expect_predictions(
            student_fn(wide, threshold, 150),
            _reference_threshold(wide, threshold, 150),
            f"logits (3, 150), threshold={threshold}",
            hint="The softmax and the max run over the classes (dim=-1).",
        )


# ----------------------------------------------------------------------------------------
# Exercise 8.3: in-scope accuracy, out-of-scope recall and precision
# ----------------------------------------------------------------------------------------


def _reference_metrics(pred: Sequence[int], target: Sequence[int], oos_id: int) -> dict[str, float]:
    """The three figures from their definitions, counted in plain Python."""
    pairs = list(zip([int(p) for p in pred], [int(t) for t in target], strict=True))
    in_scope = [(p, t) for p, t in pairs if t != oos_id]
    oos_rows = [(p, t) for p, t in pairs if t == oos_id]
    flagged = [(p, t) for p, t in pairs if p == oos_id]
    return {
        "in_scope_accuracy": sum(p == t for p, t in in_scope) / len(in_scope),
        "oos_recall": sum(p == oos_id for p, _ in oos_rows) / len(oos_rows),
        "oos_precision": (sum(t == oos_id for _, t in flagged) / len(flagged)) if flagged else 0.0,
    }


def _as_float(value: Any, what: str) -> float:
    if isinstance(value, torch.Tensor):
        shape = "a 0-d tensor" if value.dim() == 0 else f"a tensor of shape {tuple(value.shape)}"
        expect(
            False,
            f"{what} should be a Python float, got {shape}.",
            "Turn a one-element tensor into a number with .item() (tensors also keep the "
            "device and, in training, the graph alive).",
        )
    expect(
        isinstance(value, numbers.Real), f"{what} should be a number, got {type(value).__name__}."
    )
    return float(value)


def _expect_metrics(result: Any, expected: dict[str, float], what: str) -> None:
    expect(
        isinstance(result, dict), f"oos_metrics should return a dict, got {type(result).__name__}."
    )
    expect(
        set(METRIC_KEYS) <= set(result),
        f"the dict returned for {what} lacks {sorted(set(METRIC_KEYS) - set(result))}.",
        hint=f"Return a dict with the keys {', '.join(METRIC_KEYS)}.",
    )
    hints = {
        "in_scope_accuracy": "Count only rows whose *target* is in scope; an in-scope row "
        "predicted as out of scope is a mistake, and out-of-scope rows play no part.",
        "oos_recall": "Recall: of the rows whose *target* is out of scope, the fraction "
        "predicted out of scope.",
        "oos_precision": "Precision: of the rows *predicted* out of scope, the fraction that "
        "really are (0.0 when nothing is predicted out of scope).",
    }
    for key in METRIC_KEYS:
        got = _as_float(result[key], f"{key} for {what}")
        expect(math.isfinite(got), f"{key} for {what} is {got}.", hints[key])
        expect(
            0.0 <= got <= 1.0,
            f"{key} for {what} is {got:g}: expected a fraction between 0 and 1.",
            hint="Return fractions, not percentages.",
        )
        expect(
            abs(got - expected[key]) < 1e-6,
            f"{key} for {what}: got {got:.4f}, expected {expected[key]:.4f}.",
            hints[key],
        )


@exercise_check(
    "Exercise 8.3",
    "out-of-scope metrics",
    hint="in_scope = target != oos_id; flagged = pred == oos_id; accuracy over the in-scope "
    "rows, recall over the out-of-scope rows, precision over the flagged rows.",
)
def oos_metrics(student_fn: Callable[..., dict]) -> None:
    """A hand-checked example, the nothing-flagged case and a random case."""
    oos = 9
    target = torch.tensor([0, 1, 2, oos, oos, 1, oos])
    pred = torch.tensor([0, oos, 2, oos, 1, 1, 2])
    # in-scope accuracy 3/4, recall 1/3, precision 1/2 (see the notebook for the reading)
    _expect_metrics(
        student_fn(pred, target, oos),
        _reference_metrics(pred, target, oos),
        "a 7-row example (in-scope accuracy 0.75, recall 0.333, precision 0.5)",
    )

    none_flagged = torch.tensor([0, 1, 2, 4, 1, 1, 2])
    _expect_metrics(
        student_fn(none_flagged, target, oos),
        _reference_metrics(none_flagged, target, oos),
        "predictions that flag nothing (precision 0.0 by convention)",
    )

    generator = torch.Generator().manual_seed(83)
    target = torch.randint(0, 6, (300,), generator=generator)  # 5 is "oos" here
    pred = torch.where(
        torch.rand(300, generator=generator) < 0.7,
        target,
        torch.randint(0, 6, (300,), generator=generator),
    )
    _expect_metrics(
        student_fn(pred, target, 5),
        _reference_metrics(pred, target, 5),
        "300 random rows with oos_id=5",
    )


# ----------------------------------------------------------------------------------------
# Exercise 8.4: choosing the threshold on the validation split
# ----------------------------------------------------------------------------------------

CLASSES = 4  # in-scope classes of the synthetic validation sets; their oos_id is 4


def _logits_for(
    confidence: torch.Tensor, label: torch.Tensor, offset: torch.Tensor
) -> torch.Tensor:
    """Logits whose softmax gives ``confidence`` to ``label`` (the rest shared), plus an offset."""
    rest = (1 - confidence) / (CLASSES - 1)
    probs = rest.unsqueeze(1).repeat(1, CLASSES)
    probs[torch.arange(len(label)), label] = confidence
    return (probs.log() + offset.unsqueeze(1)).float()


def threshold_case(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic validation set: (logits (N, 4), targets (N,)), ``4`` meaning out of scope.

    In-scope rows are mostly confident and right; wrong ones and out-of-scope rows are less
    confident, as with a real classifier. The confidences avoid the 0.01 grid, and logits
    carry offsets in [2, 8] so a threshold on logits behaves very differently.
    """
    generator = torch.Generator().manual_seed(seed)
    n_in, n_oos = 310, 62  # 3% of 310 is 9.3 rows: no accuracy ties at the budget
    target = torch.randint(0, CLASSES, (n_in,), generator=generator)
    right = torch.rand(n_in, generator=generator) < 0.9
    wrong_label = (target + torch.randint(1, CLASSES, (n_in,), generator=generator)) % CLASSES
    label = torch.where(right, target, wrong_label)
    confidence_in = torch.where(
        right,
        0.97 - 0.6 * torch.rand(n_in, generator=generator) ** 2,
        0.30 + 0.45 * torch.rand(n_in, generator=generator),
    )
    oos_label = torch.randint(0, CLASSES, (n_oos,), generator=generator)
    confidence_oos = 0.27 + 0.6 * torch.rand(n_oos, generator=generator) ** 1.5
    confidence = torch.cat([confidence_in, confidence_oos]).double()
    confidence = torch.floor(confidence * 100) / 100 + 0.005  # halfway between grid points
    offset = torch.rand(n_in + n_oos, generator=generator, dtype=torch.float64) * 6 + 2
    logits = _logits_for(confidence, torch.cat([label, oos_label]), offset)
    targets = torch.cat([target, torch.full((n_oos,), CLASSES)])
    return logits, targets


def rule_case() -> tuple[torch.Tensor, torch.Tensor]:
    """A validation set on which the usual misreadings of the budget give different answers.

    128 in-scope rows, 64 of them right (accuracy 0.5 without threshold), and 20 out of scope.
    With max_drop = 0.0625 (8 rows of 128: all values exact in binary) and the candidates
    1.0, 0.9, ..., 0.0 the in-scope accuracy at thresholds 0.5, 0.6, 0.7, 0.8 is 61, 58, 56, 54
    rows of 128: "at least acc0 - max_drop" (56 rows) picks 0.7, a strict ">" 0.6, a relative
    floor acc0 * (1 - max_drop) (60 rows) 0.5, and a scan of the given (descending) candidates
    that stops at the first one over budget picks none of them.
    """
    right = [0.45] * 3 + [0.55] * 3 + [0.65] * 2 + [0.75] * 2 + [0.95] * 54
    confidence = torch.tensor(right + [0.95] * 64 + [0.35] * 20, dtype=torch.float64)
    target = torch.cat([torch.arange(128) % CLASSES, torch.full((20,), CLASSES)])
    label = torch.cat([target[:64], (target[64:128] + 1) % CLASSES, torch.arange(20) % CLASSES])
    offset = torch.linspace(2.0, 8.0, len(target), dtype=torch.float64)
    return _logits_for(confidence, label, offset), target


RULE_CANDIDATES = [i / 10 for i in range(10, -1, -1)]  # 1.0, 0.9, ..., 0.0: not ascending
RULE_MAX_DROP = 0.0625
RULE_MISTAKES = {
    0.6: "you kept only candidates strictly above acc0 - max_drop; the budget allows an "
    "accuracy of *at least* acc0 - max_drop (use >=)",
    0.5: "you applied max_drop as a relative drop, acc0 * (1 - max_drop); the budget is in "
    "absolute points: acc0 - max_drop",
    0.0: "you stopped at the first candidate over budget; the candidates need not be in "
    "ascending order: keep the largest candidate that meets the budget",
}


def all_in_budget_case() -> tuple[torch.Tensor, torch.Tensor]:
    """In-scope accuracy 2/128 without threshold: within max_drop=0.03 of it, every threshold
    is allowed, so the default candidates must reach 1.00."""
    confidence = torch.tensor([0.95] * 148, dtype=torch.float64)
    target = torch.cat([torch.arange(128) % CLASSES, torch.full((20,), CLASSES)])
    label = torch.cat([target[:2], (target[2:128] + 1) % CLASSES, torch.arange(20) % CLASSES])
    offset = torch.linspace(2.0, 8.0, len(target), dtype=torch.float64)
    return _logits_for(confidence, label, offset), target


def reference_choose_threshold(
    val_logits: torch.Tensor,
    val_target: torch.Tensor,
    oos_id: int,
    max_drop: float = 0.03,
    candidates: Sequence[float] | None = None,
) -> float:
    """The largest candidate whose in-scope accuracy is >= the no-threshold one - max_drop."""
    grid = [i / 100 for i in range(101)] if candidates is None else [float(c) for c in candidates]

    def accuracy(threshold: float) -> float:
        pred = _reference_threshold(val_logits, threshold, oos_id)
        return _reference_metrics(pred, val_target, oos_id)["in_scope_accuracy"]

    floor = accuracy(0.0) - max_drop
    return max((t for t in grid if accuracy(t) >= floor), default=0.0)


@exercise_check(
    "Exercise 8.4",
    "threshold chosen on validation",
    hint="Accuracy without threshold = your in-scope accuracy at threshold 0; then keep the "
    "largest candidate whose in-scope accuracy is at least that minus max_drop. Use only the "
    "arguments (the validation split), never the test split.",
)
def choose_threshold(student_fn: Callable[..., Any]) -> None:
    """Two synthetic validation sets, two budgets, explicit and default grids."""
    grid = [i / 20 for i in range(21)]  # 0.00, 0.05, ..., 1.00
    for seed in (0, 1):
        logits, target = threshold_case(seed)
        for max_drop in (0.03, 0.08):
            expected = reference_choose_threshold(logits, target, CLASSES, max_drop, grid)
            got = _as_float(
                student_fn(logits, target, CLASSES, max_drop=max_drop, candidates=grid),
                "the chosen threshold",
            )
            expect(
                abs(got - expected) < 1e-6,
                f"on a synthetic validation set (seed {seed}, max_drop={max_drop}, candidates "
                f"0, 0.05, ..., 1) you chose {got:.3f}, expected {expected:.2f}.",
                hint="Use the validation logits and labels you are given (never the test "
                "split); threshold the softmax probabilities; measure the in-scope accuracy "
                "on in-scope rows only, relative to its value with no threshold; keep the "
                "largest candidate within `max_drop` (a fraction: 0.03 = 3 points).",
            )
    logits, target = rule_case()
    expected = reference_choose_threshold(logits, target, CLASSES, RULE_MAX_DROP, RULE_CANDIDATES)
    got = _as_float(
        student_fn(logits, target, CLASSES, max_drop=RULE_MAX_DROP, candidates=RULE_CANDIDATES),
        "the chosen threshold",
    )
    if abs(got - expected) > 1e-6:
        mistake = next(
            (text for value, text in RULE_MISTAKES.items() if abs(got - value) < 1e-6),
            "keep the largest candidate whose in-scope accuracy is at least acc0 - max_drop",
        )
        expect(
            False,
            f"on a validation set with in-scope accuracy 0.5 without threshold, max_drop="
            f"{RULE_MAX_DROP} and candidates 1.0, 0.9, ..., 0.0, you chose {got:.2f}, expected "
            f"{expected:.2f} (accuracy exactly 0.5 - {RULE_MAX_DROP}): {mistake}.",
        )
    logits, target = all_in_budget_case()
    got = _as_float(student_fn(logits, target, CLASSES), "the chosen threshold")
    expect(
        abs(got - 1.0) < 1e-6,
        f"on a validation set where every threshold stays within max_drop=0.03 (in-scope "
        f"accuracy 2/128 to begin with), the default candidates gave {got:.2f}, expected 1.00"
        + (": your default candidates stop before 1.00." if got >= 0.98 else "."),
        "With candidates=None, try 0.00, 0.01, ..., 1.00, both ends included "
        "([i / 100 for i in range(101)] or torch.linspace(0, 1, 101)).",
    )
    logits, target = threshold_case(2)
    expected = reference_choose_threshold(logits, target, CLASSES, 0.03)
    got = _as_float(student_fn(logits, target, CLASSES), "the chosen threshold")
    expect_equal(
        round(got, 6),
        round(expected, 6),
        "the threshold chosen with the default candidates (0.00, 0.01, ..., 1.00) and "
        "max_drop=0.03",
        hint="With candidates=None, try 0.00, 0.01, ..., 1.00 (e.g. torch.linspace(0, 1, 101)).",
    )


# ----------------------------------------------------------------------------------------
# Exercises 8.6 and 8.7: Mahalanobis distance to the intent means
# ----------------------------------------------------------------------------------------
#
# ``fit_gaussians``: two synthetic training sets (a function that reads other data than it
# is given, e.g. the validation or test vectors, cannot match both), with unequal class
# sizes and unequal class covariances, so that per-class covariances (or their average),
# the covariance around the overall mean, a covariance not inverted and the N - 1 divisor
# all give other numbers; the inputs must stay unchanged.
# ``mahalanobis_scores``: compared with a per-row loop of the definition, the smallest
# *squared* distance: a square root, the Euclidean distance (precision ignored), the
# precision inverted once more, the distance to the overall mean, the largest or the average
# distance over the classes all give other numbers.

GAUSSIAN_SIZES = (30, 70, 45, 120)  # unequal on purpose: per-class averages differ from pooling


def gaussian_case(seed: int, dim: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic sentence vectors (N, dim) float64 and their class labels (N,), classes
    0..3 of unequal sizes, each with its own mean and its own covariance, rows shuffled."""
    generator = torch.Generator().manual_seed(seed)
    rows, labels = [], []
    for c, size in enumerate(GAUSSIAN_SIZES):
        mean = torch.randn(dim, generator=generator, dtype=torch.float64) * 4
        mix = torch.randn(dim, dim, generator=generator, dtype=torch.float64) * (0.4 + 0.5 * c)
        rows.append(mean + torch.randn(size, dim, generator=generator, dtype=torch.float64) @ mix)
        labels.append(torch.full((size,), c))
    order = torch.randperm(sum(GAUSSIAN_SIZES), generator=generator)
    return torch.cat(rows)[order], torch.cat(labels)[order]


def reference_fit_gaussians(features: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Class means (C, D) and the inverse (D, D) of the shared covariance: the average over
    all N rows of (x - mean of its class)(x - mean of its class)^T (divided by N)."""
    x = features.double()
    means = torch.stack([x[labels == c].mean(dim=0) for c in range(int(labels.max()) + 1)])
    centred = x - means[labels]
    return means, torch.linalg.inv(centred.T @ centred / len(x))


def reference_mahalanobis_scores(
    features: torch.Tensor, means: torch.Tensor, precision: torch.Tensor
) -> torch.Tensor:
    """Smallest squared Mahalanobis distance of each row to the means, written as a loop."""
    scores = []
    for x in features.double():
        scores.append(min(float((x - m) @ precision.double() @ (x - m)) for m in means.double()))
    return torch.tensor(scores, dtype=torch.float64)


def _as_tensor(value: Any, what: str) -> torch.Tensor:
    """A tensor (float64) from a tensor or a NumPy array, with a clear failure otherwise."""
    try:
        return torch.as_tensor(value).double()
    except (TypeError, ValueError, RuntimeError):
        expect(False, f"{what} should be a tensor or a NumPy array, got {type(value).__name__}.")
        raise  # not reached: expect(False, ...) raises


@exercise_check(
    "Exercise 8.6",
    "intent means and shared covariance",
    hint="Means: the average vector of each class. Covariance: subtract from every row the "
    "mean of its own class, then average the outer products over all rows (divide by N, as "
    "sklearn.covariance.EmpiricalCovariance(assume_centered=True) does); return its inverse.",
)
def fit_gaussians(student_fn: Callable[..., Any]) -> None:
    """Two synthetic training sets; means and precision compared with the reference."""
    for seed in (0, 1):
        features, labels = gaussian_case(seed)
        before = (features.clone(), labels.clone())
        result = student_fn(features, labels)
        expect(
            isinstance(result, tuple | list) and len(result) == 2,
            f"fit_gaussians should return a pair (means, precision), got {type(result).__name__}.",
        )
        means, precision = (_as_tensor(r, name) for r, name in zip(result, ("means", "precision"), strict=True))
        expected_means, expected_precision = reference_fit_gaussians(features, labels)
        expect(
            torch.equal(features, before[0]) and torch.equal(labels, before[1]),
            "fit_gaussians modified its inputs.",
        )
        expect_shape(means, tuple(expected_means.shape), f"the means (synthetic set {seed}: 4 classes, 5 dims)")
        expect_close(means, expected_means, f"the class means (synthetic set {seed})", atol=1e-6, rtol=1e-6,
                     hint="One mean per class (0 .. labels.max()), over the rows of that class, "
                     "from the features you are given (the training vectors).")
        expect_shape(precision, tuple(expected_precision.shape),
                     f"the precision matrix (synthetic set {seed}): ONE shared (D, D) matrix",
                     hint="Pool all classes into one covariance (each row minus its own class "
                     "mean), not one covariance per class.")
        expect_close(
            precision,
            expected_precision,
            f"the precision matrix (synthetic set {seed}, classes of sizes {GAUSSIAN_SIZES})",
            atol=1e-6,
            rtol=1e-5,
            hint="The inverse of ONE covariance shared by all classes: the average over all N "
            "rows of (x - its class mean)(x - its class mean)^T, divided by N (not N - 1, not "
            "an average of per-class covariances, not around the overall mean). Use only the "
            "training vectors you are given.",
        )


@exercise_check(
    "Exercise 8.7",
    "Mahalanobis scores",
    hint="For every row x and every class mean m: (x - m) @ precision @ (x - m), the squared "
    "distance (no square root); then the minimum over the classes.",
)
def mahalanobis_scores(student_fn: Callable[..., Any]) -> None:
    """Random rows against the means and precision of a synthetic set; a batch of one."""
    features, labels = gaussian_case(2)
    means, precision = reference_fit_gaussians(features, labels)
    generator = torch.Generator().manual_seed(3)
    queries = torch.randn(40, features.shape[1], generator=generator, dtype=torch.float64) * 6
    queries = torch.cat([queries, features[:10]])  # far points and training points
    inputs = (queries.clone(), means.clone(), precision.clone())
    got = _as_tensor(student_fn(queries, means, precision), "the scores")
    expect(
        all(torch.equal(a, b) for a, b in zip(inputs, (queries, means, precision), strict=True)),
        "mahalanobis_scores modified its inputs.",
    )
    expected = reference_mahalanobis_scores(queries, means, precision)
    expect_shape(got, (len(queries),), "the scores: one number per row (the smallest over the classes)")
    expect_close(
        got,
        expected,
        "the smallest squared Mahalanobis distance of each row",
        atol=1e-6,
        rtol=1e-6,
        hint="Use the precision matrix as it is given (it is already the inverse covariance); "
        "distances to every class mean, not to their average; the squared distance, no "
        "square root; the minimum over the classes.",
    )
    one = _as_tensor(student_fn(queries[:1].float(), means.float(), precision.float()), "the scores")
    expect_shape(one, (1,), "the scores of a batch of one row (float32 inputs)")
    expect_close(one, expected[:1], "the score of a batch of one row (float32 inputs)", atol=1e-2, rtol=1e-4)
