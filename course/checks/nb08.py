"""Checks for notebook 08, intent classification with out-of-scope detection.

No check holds an implementation of an answer. The expected values come from library
functions or from the way the inputs are built:

* 8.1 ``masked_mean_pool``: ``torch.nn.functional.embedding_bag(mode="mean")``, which averages
  arbitrary sets of rows and gives an empty set a zero vector; its gradient too.
* 8.2 ``apply_threshold``: logits built backwards from a chosen label and a chosen confidence
  per row (the softmax of the logits gives that row exactly those probabilities), so the
  expected decision is known by construction.
* 8.3 ``oos_metrics``: ``sklearn.metrics`` (accuracy, recall, precision).
* 8.4 ``choose_threshold``: validation sets built from chosen confidences and right/wrong
  rows, whose in-scope accuracy at any threshold is a count over that data.
* 8.6 ``fit_gaussians``: ``sklearn``'s linear discriminant analysis (its ``covariance_`` is the
  shared covariance, divided by N) and ``EmpiricalCovariance`` for a single class.
* 8.7 ``mahalanobis_scores``: ``scipy.spatial.distance.cdist(metric="mahalanobis")``.

Every call goes through :func:`course.properties.call` (inputs untouched, global state
unchanged); the cases are tables; inputs come from :func:`course.properties.generator`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from course.check import CheckFailure, exercise_check, expect, expect_close, expect_shape
from course.observe import NotPlainData, to_plain
from course.properties import call, generator, gradients, meta_device, observe

F64 = torch.float64
METRIC_KEYS = ("in_scope_accuracy", "oos_recall", "oos_precision")
CLASSES = 4  # in-scope classes of the synthetic validation sets of 8.4; their oos_id is 4


# ----------------------------------------------------------------------------------------
# Shared: what came back, and the device property
# ----------------------------------------------------------------------------------------


def _as_data(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` whose result comes back as ``{"value": ...}`` when it is plain data, or
    ``{"type": name}`` when it is not (an estimator, a generator): the check can say so."""

    def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
        result = function(*args, **kwargs)
        try:
            to_plain(result)
        except NotPlainData:
            name = type(result).__name__
            items = result.values() if isinstance(result, dict) else result
            if isinstance(result, tuple | list | dict):
                name += " of (" + ", ".join(type(item).__name__ for item in items) + ")"
            return {"type": name}
        return {"value": result}

    return run


def _value(observed: dict[str, Any], what: str, expected: str) -> Any:
    if "type" in observed:
        raise CheckFailure(f"{what} returned a {observed['type']}; expected {expected}.")
    return observed["value"]


def _tensor(value: Any, what: str, expected: str) -> torch.Tensor:
    """A tensor (NumPy arrays arrive as tensors) or a failure naming what came back."""
    if not isinstance(value, torch.Tensor):
        raise CheckFailure(f"{what} returned a {type(value).__name__}; expected {expected}.")
    return value


def _expect_device(function: Callable[..., Any], what: str, *args: Any) -> None:
    """The device property: inputs on another device (meta) give a result on that device."""
    device = meta_device(f"{what}, inputs on the meta device", function, *args)
    if device is None:
        return  # the code reads values (a loop over .tolist(), NumPy): meta cannot run it
    expect(
        device == "meta",
        f"{what} with every input on another device (the meta device): your code made or "
        f"returned a tensor on {device}. The property violated: the function works on the "
        "inputs' device (a GPU in training).",
        "A tensor created without `device=` lives on the CPU: create new tensors from the inputs "
        "(`torch.zeros_like`, `x.new_zeros`, `device=x.device`) or avoid creating any.",
    )


# ----------------------------------------------------------------------------------------
# Exercise 8.1: masked mean pooling
# ----------------------------------------------------------------------------------------


class PoolCase(NamedTuple):
    what: str
    hidden: torch.Tensor
    mask: torch.Tensor
    expected: torch.Tensor
    hint: str | None = None


def _pool_cases() -> list[PoolCase]:
    g = generator(81)
    lengths = torch.randint(1, 8, (5,), generator=g)
    lengths[0] = 7  # one row without padding
    right_padded = torch.arange(7).expand(5, 7) < lengths.unsqueeze(1)
    scattered = torch.rand(4, 9, generator=g) < 0.6
    scattered[:, 4] = True
    left_padded = torch.arange(6).expand(3, 6) >= torch.tensor([[0], [2], [5]])
    raw = [
        (
            "masked_mean_pool of a right-padded batch: hidden (5, 7, 6), token_mask (5, 7)",
            torch.randn(5, 7, 6, generator=g) * 3 + 1,
            right_padded,
            "Padded positions count neither in the sum nor in the number you divide by.",
        ),
        (
            "masked_mean_pool with padding at arbitrary positions (4, 9, 3)",
            torch.randn(4, 9, 3, generator=g),
            scattered,
            "Only the mask says which positions are real tokens, wherever they are.",
        ),
        (
            "masked_mean_pool of a left-padded float64 batch (3, 6, 16)",
            torch.randn(3, 6, 16, generator=g, dtype=F64),
            left_padded,
            None,
        ),
        (
            "masked_mean_pool of a batch of one in float64 (1, 5, 4)",
            torch.randn(1, 5, 4, generator=g, dtype=F64),
            torch.tensor([[True, True, True, False, False]]),
            None,
        ),
        (
            "masked_mean_pool with a row that has no real token (2, 3, 4)",
            torch.randn(2, 3, 4, generator=g),
            torch.tensor([[True, False, True], [False, False, False]]),
            "The exercise asks for a zero vector for a row with no real token: its sum is "
            "zero, so only the number you divide by needs care.",
        ),
        (
            "masked_mean_pool of one-token sentences (3, 1, 2)",
            torch.randn(3, 1, 2, generator=g),
            torch.tensor([[True], [False], [True]]),
            None,
        ),
    ]
    cases = []
    for what, hidden, mask, hint in raw:
        # torch's embedding_bag averages each row's selected vectors; an empty bag gives zeros.
        counts = mask.sum(dim=1)
        offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]])
        table = hidden.reshape(-1, hidden.shape[-1])
        expected = F.embedding_bag(mask.flatten().nonzero().flatten(), table, offsets, mode="mean")
        cases.append(PoolCase(what, hidden, mask, expected, hint))
    return cases


NO_GRADIENT = (
    "no gradient reaches `hidden` through masked_mean_pool. The property violated: the model "
    "is trained through the pooling, so the result must stay differentiable.",
    "Compute with tensor operations on `hidden` itself: no .detach(), no torch.no_grad(), no "
    "new tensor built from Python numbers.",
)


def _tracked(student_pool: Callable[..., Any]) -> Callable[..., Any]:
    """``student_pool`` that fails with :data:`NO_GRADIENT` when its result has no graph."""

    def run(hidden: torch.Tensor, mask: torch.Tensor) -> Any:
        out = student_pool(hidden, mask)
        if isinstance(out, torch.Tensor) and not out.requires_grad:
            raise CheckFailure(*NO_GRADIENT)
        return out

    return run


@exercise_check(
    "Exercise 8.1",
    "masked mean pooling",
    hint="The average over a row's real tokens: padded positions count neither in the sum nor "
    "in the number you divide by; the mask decides which positions are real.",
)
def masked_mean_pool(student_pool: Callable[..., torch.Tensor]) -> None:
    """Compare with torch's embedding_bag mean; gradients, device, dtype, several shapes."""
    cases = _pool_cases()
    for case in cases:
        got = call(case.what, student_pool, case.hidden, case.mask, names=("hidden", "token_mask"))
        expect_shape(got, case.expected.shape, case.what, "One vector per sentence: (B, D).")
        expect(
            bool(torch.isfinite(got).all()) if got.is_floating_point() else True,
            f"{case.what} gives NaN or inf (a division 0 / 0?). The property violated: every "
            "row, even one with no real token, has a finite average.",
            case.hint,
        )
        expect(
            got.dtype == case.hidden.dtype,
            f"{case.what} returned {got.dtype} for {case.hidden.dtype} input; the exercise asks "
            "to keep the input's dtype.",
            "Convert the mask to the dtype of `hidden`, not to a fixed float type.",
        )
        expect_close(got, case.expected, case.what, case.hint, atol=1e-6, rtol=1e-5)

    first = cases[0]
    hidden, mask = first.hidden.clone(), first.mask.clone()
    got = observe(
        "the gradient of masked_mean_pool with respect to hidden",
        lambda: gradients(_tracked(student_pool), [hidden, mask], seed=8)["inputs"][0],
    )
    counts = mask.sum(dim=1)
    rows = mask.flatten().nonzero().flatten()
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]])
    expected = gradients(
        lambda h, m: F.embedding_bag(rows, h.reshape(-1, h.shape[-1]), offsets, mode="mean"),
        [hidden, mask],
        seed=8,
    )["inputs"][0]
    expect(got is not None, NO_GRADIENT[0], NO_GRADIENT[1])
    expect_close(
        got,
        expected,
        "the gradient of masked_mean_pool with respect to hidden (each real token receives "
        "1 / its sentence's token count, padding receives nothing)",
        "Padded positions must not influence the result, so they get no gradient.",
        atol=1e-6,
        rtol=1e-5,
    )
    _expect_device(student_pool, "masked_mean_pool", hidden, mask)


# ----------------------------------------------------------------------------------------
# Exercise 8.2: thresholding the softmax confidence
# ----------------------------------------------------------------------------------------


class ThresholdCase(NamedTuple):
    what: str
    logits: torch.Tensor
    threshold: float
    oos_id: int
    expected: torch.Tensor  # the labels, known from how the logits were built
    confidence: torch.Tensor  # each row's largest softmax probability, for messages
    hint: str | None = None
    property: str = ""  # the property a case is about, named in its message


def _logits_with(
    confidence: torch.Tensor,
    label: torch.Tensor,
    classes: int,
    g: torch.Generator,
    offset: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Logits whose softmax gives ``confidence`` to ``label`` and shares the rest unevenly
    (each other class at most 2 (1 - confidence) / classes), plus a per-row ``offset``."""
    rows = torch.arange(len(label))
    weights = torch.rand(len(label), classes, generator=g, dtype=F64) + 1
    weights[rows, label] = 0
    probs = weights / weights.sum(dim=1, keepdim=True) * (1 - confidence.double()).unsqueeze(1)
    probs[rows, label] = confidence.double()
    return (probs.log() + offset.double().unsqueeze(1)).to(dtype)


def _halfway(n: int, low: float, high: float, g: torch.Generator) -> torch.Tensor:
    """``n`` confidences in [low, high], each halfway between two multiples of 0.01."""
    steps = torch.randint(int(low * 100), int(high * 100), (n,), generator=g)
    return steps.double() / 100 + 0.005


def _threshold_cases() -> list[ThresholdCase]:
    g = generator(82)
    cases = []

    def add(what, logits, threshold, oos_id, label, confidence, hint=None, about=""):
        keep = confidence >= threshold
        expected = torch.where(keep, label, torch.full_like(label, oos_id))
        cases.append(
            ThresholdCase(what, logits, threshold, oos_id, expected, confidence, hint, about)
        )

    label = torch.randint(0, 6, (40,), generator=g)
    confidence = _halfway(40, 0.27, 0.99, g)
    logits = _logits_with(confidence, label, 6, g, torch.rand(40, generator=g) * 8 - 2)
    for threshold in (0.5, 0.3, 0.8):
        add(
            f"apply_threshold(logits (40, 6), threshold={threshold}, oos_id=6)",
            logits,
            threshold,
            6,
            label,
            confidence,
        )
    add(
        "threshold 0.0 (nothing may be flagged: every probability is >= 0)",
        logits,
        0.0,
        6,
        label,
        confidence,
    )
    add(
        "threshold 1.01 (everything must be flagged out of scope)",
        logits,
        1.01,
        6,
        label,
        confidence,
    )
    add(
        "oos_id=17",
        logits,
        0.5,
        17,
        label,
        confidence,
        "Use the `oos_id` argument; do not assume a particular label.",
    )
    add(
        "oos_id=5, the last column (a model trained with an out-of-scope class)",
        logits,
        0.5,
        5,
        label,
        confidence,
    )

    sure = torch.tensor([[50.0, 0.0, 0.0], [0.0, 0.0, 50.0], [1.0, 2.0, 0.0]])
    add(
        "threshold 1.0 with two rows of probability exactly 1.0",
        sure,
        1.0,
        3,
        torch.tensor([0, 2, 1]),
        torch.tensor([1.0, 1.0, 0.6652]),
        "The exercise keeps a confidence equal to the threshold.",
    )

    label = torch.randint(0, 9, (1,), generator=g)
    confidence = _halfway(1, 0.2, 0.6, g)
    add(
        "a batch of one row, float64 logits (1, 9)",
        _logits_with(confidence, label, 9, g, torch.tensor([1.5]), F64),
        0.4,
        9,
        label,
        confidence,
    )

    label = torch.randint(0, 150, (3,), generator=g)  # more classes than rows
    confidence = torch.tensor([0.035, 0.015, 0.07], dtype=F64)
    wide = _logits_with(confidence, label, 150, g, torch.tensor([3.0, -1.0, 0.5]))
    for threshold in (0.02, 0.05):
        add(
            f"logits (3, 150), threshold={threshold}, oos_id=150",
            wide,
            threshold,
            150,
            label,
            confidence,
            "The softmax and the largest probability run over the classes.",
        )

    single = torch.randn(5, 1, generator=g) * 4
    add(
        "a model with a single class: logits (5, 1)",
        single,
        0.5,
        1,
        torch.zeros(5, dtype=torch.long),
        torch.ones(5, dtype=F64),
    )

    label = torch.randint(0, 5, (30,), generator=g)
    confidence = _halfway(30, 0.35, 0.99, g)
    offset = torch.where(torch.arange(30) % 2 == 0, 1000.0, -1000.0)
    huge = _logits_with(confidence, label, 5, g, offset + torch.randn(30, generator=g) * 100)
    add(
        "logits in the thousands (30, 5), threshold=0.6",
        huge,
        0.6,
        5,
        label,
        confidence,
        "exp of a logit in the thousands overflows (or underflows to 0): a softmax must not.",
        " The property violated: numeric range (logits of any size give probabilities).",
    )
    return cases


@exercise_check(
    "Exercise 8.2",
    "confidence threshold",
    hint="The confidence of a row is its largest softmax probability over the classes; compare "
    "that probability (not a logit) with the threshold.",
)
def apply_threshold(student_threshold: Callable[..., torch.Tensor]) -> None:
    """Logits built from chosen labels and confidences; edge thresholds, shapes and ranges."""
    cases = _threshold_cases()
    for case in cases:
        got = call(
            case.what,
            student_threshold,
            case.logits,
            case.threshold,
            case.oos_id,
            names=("logits", "threshold", "oos_id"),
        )
        expect_shape(got, case.expected.shape, case.what, "One label per row: shape (N,).")
        expect(
            got.dtype == torch.long,
            f"{case.what} has dtype {got.dtype}; the exercise asks for a LongTensor (int64).",
            "Labels are integers: keep the dtype of the class indices.",
        )
        wrong = (got != case.expected).nonzero().flatten()
        if len(wrong):
            row = int(wrong[0])
            reading = "kept" if case.expected[row] != case.oos_id else "flagged out of scope"
            expect(
                False,
                f"{case.what}: row {row} is labelled {int(got[row])}, expected "
                f"{int(case.expected[row])} ({len(wrong)} of {len(got)} rows differ). That row's "
                f"largest softmax probability is {float(case.confidence[row]):.4g}, so with "
                f"threshold {case.threshold} it is {reading}.{case.property}",
                case.hint
                or "Compare the largest softmax *probability* with the threshold; the softmax "
                "runs over the classes.",
            )
    first = cases[0]
    _expect_device(
        student_threshold, "apply_threshold", first.logits, first.threshold, first.oos_id
    )


# ----------------------------------------------------------------------------------------
# Exercise 8.3: in-scope accuracy, out-of-scope recall and precision
# ----------------------------------------------------------------------------------------


class MetricsCase(NamedTuple):
    what: str
    pred: torch.Tensor
    target: torch.Tensor
    oos_id: int
    expected: dict[str, float]


def _metrics_case(what: str, pred: torch.Tensor, target: torch.Tensor, oos_id: int) -> MetricsCase:
    from sklearn.metrics import accuracy_score, precision_score, recall_score

    p, t = pred.numpy(), target.numpy()
    inside = t != oos_id
    expected = {
        "in_scope_accuracy": float(accuracy_score(t[inside], p[inside])),
        "oos_recall": float(recall_score(t == oos_id, p == oos_id, zero_division=0)),
        "oos_precision": float(precision_score(t == oos_id, p == oos_id, zero_division=0)),
    }
    return MetricsCase(what, pred, target, oos_id, expected)


def _metrics_cases() -> list[MetricsCase]:
    oos = 9
    target = torch.tensor([0, 1, 2, oos, oos, 1, oos])
    g = generator(83)
    random_target = torch.randint(0, 6, (300,), generator=g)  # 5 is "oos" here
    random_pred = torch.where(
        torch.rand(300, generator=g) < 0.7, random_target, torch.randint(0, 6, (300,), generator=g)
    )
    zero_target = torch.randint(0, 4, (50,), generator=g)  # 0 is "oos" here
    zero_pred = torch.where(
        torch.rand(50, generator=g) < 0.6, zero_target, torch.randint(0, 4, (50,), generator=g)
    )
    return [
        _metrics_case(
            "a 7-row example (in-scope accuracy 0.75, recall 0.333, precision 0.5)",
            torch.tensor([0, oos, 2, oos, 1, 1, 2]),
            target,
            oos,
        ),
        _metrics_case(
            "predictions that flag nothing (precision 0.0, as the exercise says)",
            torch.tensor([0, 1, 2, 4, 1, 1, 2]),
            target,
            oos,
        ),
        _metrics_case("predictions that flag everything", torch.full((7,), oos), target, oos),
        _metrics_case(
            "two rows: one in scope and right, one out of scope and flagged",
            torch.tensor([3, 7]),
            torch.tensor([3, 7]),
            7,
        ),
        _metrics_case("300 random rows with oos_id=5", random_pred, random_target, 5),
        _metrics_case("50 random rows with oos_id=0", zero_pred, zero_target, 0),
    ]


METRIC_HINTS = {
    "in_scope_accuracy": "In-scope accuracy: over the rows whose *true* label is in scope "
    "only; such a row predicted out of scope is a mistake.",
    "oos_recall": "Recall: of the rows whose *true* label is out of scope, the fraction "
    "predicted out of scope.",
    "oos_precision": "Precision: of the rows *predicted* out of scope, the fraction that really "
    "are (0.0 when nothing is predicted out of scope).",
}


def _number(value: Any, what: str) -> float:
    if isinstance(value, torch.Tensor):
        shape = "a 0-d tensor" if value.dim() == 0 else f"a tensor of shape {tuple(value.shape)}"
        raise CheckFailure(
            f"{what} should be a Python float (the exercise says so), got {shape}.",
            "A one-element tensor becomes a Python number with .item().",
        )
    expect(
        isinstance(value, int | float) and not isinstance(value, bool),
        f"{what} should be a Python float, got {type(value).__name__}.",
    )
    return float(value)


@exercise_check(
    "Exercise 8.3",
    "out-of-scope metrics",
    hint="Each figure is a fraction over its own set of rows: in-scope accuracy over the rows "
    "whose true label is in scope, recall over the rows whose true label is out of scope, "
    "precision over the rows flagged out of scope.",
)
def oos_metrics(student_metrics: Callable[..., dict]) -> None:
    """Hand-checked and random cases against sklearn.metrics."""
    for case in _metrics_cases():
        result = call(
            case.what,
            _as_data(student_metrics),
            case.pred,
            case.target,
            case.oos_id,
            names=("pred", "target", "oos_id"),
        )
        result = _value(result, "oos_metrics", "a dict of Python floats")
        expect(
            isinstance(result, dict),
            f"oos_metrics should return a dict, got {type(result).__name__}.",
        )
        missing = sorted(set(METRIC_KEYS) - set(result))
        expect(
            not missing,
            f"the dict returned for {case.what} lacks {missing}.",
            f"The exercise asks for the keys {', '.join(METRIC_KEYS)}.",
        )
        for key in METRIC_KEYS:
            got = _number(result[key], f"{key} for {case.what}")
            expect(math.isfinite(got), f"{key} for {case.what} is {got}.", METRIC_HINTS[key])
            expect(
                0.0 <= got <= 1.0,
                f"{key} for {case.what} is {got:g}: the exercise asks for a fraction between "
                "0 and 1.",
            )
            expect(
                abs(got - case.expected[key]) < 1e-6,
                f"{key} for {case.what}: got {got:.4f}, expected {case.expected[key]:.4f}.",
                METRIC_HINTS[key],
            )


# ----------------------------------------------------------------------------------------
# Exercise 8.4: choosing the threshold on the validation split
# ----------------------------------------------------------------------------------------


class ValidationSet(NamedTuple):
    """Logits (N, 4) and targets (N,) (4 = out of scope), built from each row's confidence and
    whether its label is right, so the in-scope accuracy at any threshold is a count."""

    logits: torch.Tensor
    target: torch.Tensor
    confidence: torch.Tensor  # the largest softmax probability of each row
    right: torch.Tensor  # the predicted label is the target (in-scope rows only)

    def accuracy_rows(self, threshold: float) -> int:
        """In-scope rows still right at ``threshold``: right and not flagged."""
        return int((self.right & (self.confidence >= threshold)).sum())

    def expected(self, max_drop: float, candidates: list[float]) -> float:
        """The rule of the exercise, on counts: the largest candidate whose in-scope accuracy is
        at least the no-threshold one minus ``max_drop``."""
        n_in = int((self.target != CLASSES).sum())
        floor = self.accuracy_rows(0.0) - max_drop * n_in
        return max((t for t in candidates if self.accuracy_rows(t) >= floor - 1e-9), default=0.0)


def _validation_set(
    confidence: torch.Tensor, label: torch.Tensor, target: torch.Tensor, g: torch.Generator
) -> ValidationSet:
    offset = torch.rand(len(target), generator=g, dtype=F64) * 6 + 2
    logits = _logits_with(confidence, label, CLASSES, g, offset)
    right = (label == target) & (target != CLASSES)
    return ValidationSet(logits, target, confidence.double(), right)


def _random_validation(offset: int) -> ValidationSet:
    """In-scope rows mostly confident and right; wrong and out-of-scope rows less confident.
    310 in-scope rows: 3% and 8% of 310 are 9.3 and 24.8 rows, so no accuracy sits on the
    budget's edge; confidences lie halfway between multiples of 0.01."""
    g = generator(offset)
    n_in, n_oos = 310, 62
    target = torch.randint(0, CLASSES, (n_in,), generator=g)
    right = torch.rand(n_in, generator=g) < 0.9
    wrong_label = (target + torch.randint(1, CLASSES, (n_in,), generator=g)) % CLASSES
    label = torch.cat(
        [torch.where(right, target, wrong_label), torch.randint(0, CLASSES, (n_oos,), generator=g)]
    )
    confident = 0.97 - 0.6 * torch.rand(n_in, generator=g) ** 2
    unsure = 0.35 + 0.4 * torch.rand(n_in, generator=g)
    confidence = torch.cat(
        [torch.where(right, confident, unsure), 0.35 + 0.55 * torch.rand(n_oos, generator=g) ** 1.5]
    )
    confidence = torch.floor(confidence.double() * 100) / 100 + 0.005
    target = torch.cat([target, torch.full((n_oos,), CLASSES)])
    return _validation_set(confidence, label, target, g)


def _rule_validation() -> ValidationSet:
    """128 in-scope rows, 64 right (accuracy 0.5 without threshold), and 20 out of scope.

    With max_drop = 0.0625 (8 rows of 128, exact in binary) and the candidates 1.0, 0.9, ...,
    0.0, the in-scope accuracy at 0.5, 0.6, 0.7, 0.8 is 61, 58, 56, 54 rows of 128: "at least
    acc0 - max_drop" (56 rows) picks 0.7, a strict ">" 0.6, a relative floor
    acc0 * (1 - max_drop) (60 rows) 0.5, and a scan of the (descending) candidates that stops
    at the first one over budget picks none of them.
    """
    right = [0.45] * 3 + [0.55] * 3 + [0.65] * 2 + [0.75] * 2 + [0.95] * 54
    confidence = torch.tensor(right + [0.95] * 64 + [0.35] * 20, dtype=F64)
    target = torch.cat([torch.arange(128) % CLASSES, torch.full((20,), CLASSES)])
    label = torch.cat([target[:64], (target[64:128] + 1) % CLASSES, torch.arange(20) % CLASSES])
    return _validation_set(confidence, label, target, torch.Generator().manual_seed(84))


def _all_in_budget_validation() -> ValidationSet:
    """In-scope accuracy 2/128 without threshold: within max_drop=0.03 of it, every threshold
    is allowed, so the default candidates must reach 1.00."""
    confidence = torch.full((148,), 0.95, dtype=F64)
    target = torch.cat([torch.arange(128) % CLASSES, torch.full((20,), CLASSES)])
    label = torch.cat([target[:2], (target[2:128] + 1) % CLASSES, torch.arange(20) % CLASSES])
    return _validation_set(confidence, label, target, torch.Generator().manual_seed(85))


DEFAULT_CANDIDATES = [i / 100 for i in range(101)]
GRID_005 = [i / 20 for i in range(21)]
RULE_CANDIDATES = [i / 10 for i in range(10, -1, -1)]  # 1.0, 0.9, ..., 0.0: not ascending
RULE_MAX_DROP = 0.0625
UNORDERED = [0.8, 0.5, 0.6, 0.7]
RULE_MISTAKES = {  # answers that follow another rule than the exercise's, on the rule set
    0.6: "the budget allows an accuracy of *at least* acc0 - max_drop: a candidate exactly on "
    "the floor is allowed",
    0.5: "the budget is in absolute points, acc0 - max_drop, not a relative drop",
    0.0: "the rule asks for the largest candidate within budget, whatever the order of "
    "`candidates`",
}


class ChooseCase(NamedTuple):
    what: str
    data: ValidationSet
    max_drop: float | None  # None: the default
    candidates: list[float] | None  # None: the default
    expected: float
    mistakes: dict[float, str] | None = None


def _choose_cases() -> list[ChooseCase]:
    first, second = _random_validation(840), _random_validation(841)
    rule, everything = _rule_validation(), _all_in_budget_validation()
    third = _random_validation(842)
    cases = [
        ChooseCase(
            f"a synthetic validation set ({name}), max_drop={drop}, candidates 0, 0.05, ..., 1",
            data,
            drop,
            GRID_005,
            data.expected(drop, GRID_005),
        )
        for name, data in (("set A", first), ("set B", second))
        for drop in (0.03, 0.08)
    ]
    cases += [
        ChooseCase(
            f"a validation set with in-scope accuracy 0.5 without threshold, max_drop="
            f"{RULE_MAX_DROP}, candidates 1.0, 0.9, ..., 0.0 (accuracy exactly 0.5 - "
            f"{RULE_MAX_DROP} at the answer)",
            rule,
            RULE_MAX_DROP,
            RULE_CANDIDATES,
            rule.expected(RULE_MAX_DROP, RULE_CANDIDATES),
            RULE_MISTAKES,
        ),
        ChooseCase(
            "a validation set where every threshold stays within max_drop (in-scope accuracy "
            "2/128 to begin with), default max_drop and candidates",
            everything,
            None,
            None,
            1.0,
        ),
        ChooseCase(
            "a synthetic validation set (set C), default max_drop (0.03) and candidates "
            "(0.00, 0.01, ..., 1.00)",
            third,
            None,
            None,
            third.expected(0.03, DEFAULT_CANDIDATES),
        ),
        ChooseCase(
            f"the validation set with accuracy 0.5 without threshold, max_drop={RULE_MAX_DROP}, "
            "candidates 0.8, 0.5, 0.6, 0.7 (the threshold 0, no threshold, is not among them)",
            rule,
            RULE_MAX_DROP,
            UNORDERED,
            rule.expected(RULE_MAX_DROP, UNORDERED),
        ),
        ChooseCase(
            "set A with max_drop=0.0 (no drop at all allowed)",
            first,
            0.0,
            GRID_005,
            first.expected(0.0, GRID_005),
        ),
    ]
    return cases


@exercise_check(
    "Exercise 8.4",
    "threshold chosen on validation",
    hint="The rule in the exercise: the in-scope accuracy without threshold, minus max_drop, "
    "is the floor; the answer is the largest candidate whose in-scope accuracy reaches it, "
    "measured on the validation data you are given.",
)
def choose_threshold(student_choose: Callable[..., Any]) -> None:
    """Synthetic validation sets with known answers, budgets, explicit and default grids."""
    for case in _choose_cases():
        options: dict[str, Any] = {}
        if case.max_drop is not None:
            options["max_drop"] = case.max_drop
        if case.candidates is not None:
            options["candidates"] = list(case.candidates)
        result = call(
            case.what,
            _as_data(student_choose),
            case.data.logits,
            case.data.target,
            CLASSES,
            names=("val_logits", "val_target", "oos_id"),
            **options,
        )
        got = _number(_value(result, "choose_threshold", "a float"), "the chosen threshold")
        if abs(got - case.expected) < 1e-6:
            continue
        reason = next(
            (text for value, text in (case.mistakes or {}).items() if abs(got - value) < 1e-6),
            None,
        )
        if reason is None and case.candidates is None and case.expected == 1.0 and got >= 0.98:
            reason = "the default candidates go from 0.00 to 1.00, both ends included"
        n_in = int((case.data.target != CLASSES).sum())
        accuracy = case.data.accuracy_rows(got) / n_in if 0 <= got <= 1 else float("nan")
        raise CheckFailure(
            f"on {case.what} you chose {got:.3f}, expected {case.expected:.2f} (in-scope "
            f"accuracy without threshold {case.data.accuracy_rows(0.0) / n_in:.4f}; at your "
            f"threshold {accuracy:.4f}; at the expected one "
            f"{case.data.accuracy_rows(case.expected) / n_in:.4f})"
            + (f": {reason}." if reason else "."),
            "Use only the validation logits and labels you are given; threshold the softmax "
            "probabilities; measure the in-scope accuracy on in-scope rows only; keep the "
            "largest candidate within `max_drop` of the accuracy without threshold.",
        )


# ----------------------------------------------------------------------------------------
# Exercises 8.6 and 8.7: Mahalanobis distance to the intent means
# ----------------------------------------------------------------------------------------

GAUSSIAN_SIZES = (30, 70, 45, 120)  # unequal on purpose: per-class averages differ from pooling


def _gaussian_set(
    offset: int, sizes: tuple[int, ...] = GAUSSIAN_SIZES, dim: int = 5
) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic sentence vectors (N, dim) float64 and their labels (N,): classes of unequal
    sizes, each with its own mean and its own covariance, rows shuffled."""
    g = generator(offset)
    rows, labels = [], []
    for c, size in enumerate(sizes):
        mean = torch.randn(dim, generator=g, dtype=F64) * 4
        mix = torch.randn(dim, dim, generator=g, dtype=F64) * (0.4 + 0.5 * c)
        rows.append(mean + torch.randn(size, dim, generator=g, dtype=F64) @ mix)
        labels.append(torch.full((size,), c))
    order = torch.randperm(sum(sizes), generator=g)
    return torch.cat(rows)[order], torch.cat(labels)[order]


class GaussianCase(NamedTuple):
    what: str
    features: torch.Tensor
    labels: torch.Tensor
    means: torch.Tensor
    precision: torch.Tensor
    rtol: float


def _gaussian_cases() -> list[GaussianCase]:
    raw = [
        (
            "synthetic set A (4 classes of sizes 30, 70, 45, 120; 5 dimensions)",
            *_gaussian_set(860),
            1e-6,
        ),
        (
            "synthetic set B (4 classes of sizes 30, 70, 45, 120; 5 dimensions)",
            *_gaussian_set(861),
            1e-6,
        ),
        (
            "synthetic set C (3 classes of sizes 12, 40, 25; 3 dimensions)",
            *_gaussian_set(862, (12, 40, 25), 3),
            1e-6,
        ),
        ("a single class (20 rows, 4 dimensions)", *_gaussian_set(863, (20,), 4), 1e-6),
    ]
    features, labels = _gaussian_set(864, (40, 60), 3)
    raw.append(("float32 vectors (2 classes, 3 dimensions)", features.float(), labels, 1e-3))
    from sklearn.covariance import EmpiricalCovariance
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    cases = []
    for what, features, labels, rtol in raw:
        # scikit-learn's linear discriminant analysis pools the intents' covariances weighted
        # by their sizes (divided by N); with one intent, the empirical covariance.
        x, y = features.double().numpy(), labels.numpy()
        if len(np.unique(y)) == 1:
            fitted = EmpiricalCovariance().fit(x)
            means, covariance = fitted.location_[None], fitted.covariance_
        else:
            lda = LinearDiscriminantAnalysis(solver="lsqr", store_covariance=True).fit(x, y)
            means, covariance = lda.means_, lda.covariance_
        precision = torch.as_tensor(np.linalg.inv(covariance))
        cases.append(GaussianCase(what, features, labels, torch.as_tensor(means), precision, rtol))
    return cases


@exercise_check(
    "Exercise 8.6",
    "intent means and shared covariance",
    hint="One covariance for all intents: every row centred on the mean of its own intent, the "
    "outer products averaged over all N rows (divided by N); precision is its inverse. Use "
    "only the vectors you are given.",
)
def fit_gaussians(student_fit: Callable[..., Any]) -> None:
    """Synthetic training sets; means and precision compared with scikit-learn's."""
    for case in _gaussian_cases():
        result = call(
            case.what,
            _as_data(student_fit),
            case.features,
            case.labels,
            names=("features", "labels"),
        )
        result = _value(result, "fit_gaussians", "a pair (means, precision) of tensors or arrays")
        expect(
            isinstance(result, tuple | list) and len(result) == 2,
            f"fit_gaussians should return a pair (means, precision), got {type(result).__name__}.",
        )
        means = _tensor(result[0], "the means", "a tensor or an array").double()
        precision = _tensor(result[1], "the precision", "a tensor or an array").double()
        c, d = case.means.shape
        expect_shape(
            means,
            (c, d),
            f"the means for {case.what}",
            "One mean per intent (0 .. labels.max()), each of dimension D: (C, D).",
        )
        scale = float(case.means.abs().max())
        expect_close(
            means,
            case.means,
            f"the intent means for {case.what}",
            "The average vector of each intent, over that intent's rows.",
            atol=case.rtol * scale,
            rtol=case.rtol,
        )
        expect_shape(
            precision,
            (d, d),
            f"the precision matrix for {case.what}",
            "ONE matrix shared by all intents: (D, D).",
        )
        scale = float(case.precision.abs().max())
        expect_close(
            precision,
            case.precision,
            f"the precision matrix for {case.what}",
            "The inverse of ONE covariance shared by all intents: the outer products of the "
            "rows centred on their own intent's mean, averaged over all N rows.",
            atol=case.rtol * scale,
            rtol=case.rtol,
        )


class ScoreCase(NamedTuple):
    what: str
    features: torch.Tensor
    means: torch.Tensor
    precision: torch.Tensor
    expected: torch.Tensor
    term: str = ""  # the one term of the expanded square this case exercises


def _score_cases() -> list[ScoreCase]:
    g = generator(870)
    dim = 5
    means = torch.randn(4, dim, generator=g, dtype=F64) * 4
    mix = torch.randn(dim, dim, generator=g, dtype=F64)
    precision = mix @ mix.T + 0.5 * torch.eye(dim, dtype=F64)  # symmetric positive definite
    features = means[torch.arange(10) % 4] + torch.randn(10, dim, generator=g, dtype=F64)
    far = torch.randn(40, dim, generator=g, dtype=F64) * 6
    queries = torch.cat([far, features])  # far points and points near a mean
    zero_means = torch.zeros(3, dim, dtype=F64)
    raw = [
        (
            "rows scored against means all at zero (only the term h^T P h is left)",
            far[:6],
            zero_means,
            precision,
            "h^T P h",
        ),
        (
            "rows at zero (only the term mu^T P mu is left)",
            torch.zeros(4, dim, dtype=F64),
            means,
            precision,
            "mu^T P mu",
        ),
        (
            "50 rows against 4 means and a precision matrix",
            queries,
            means,
            precision,
            "",
        ),
        ("a single class (means of shape (1, D))", queries[:7], means[2:3], precision, ""),
        (
            "a batch of one row, float32 inputs",
            queries[:1].float(),
            means.float(),
            precision.float(),
            "",
        ),
    ]
    from scipy.spatial.distance import cdist

    cases = []
    for what, x, m, p, term in raw:
        # scipy's Mahalanobis distance (with VI, the inverse covariance), squared.
        d = cdist(x.double().numpy(), m.double().numpy(), "mahalanobis", VI=p.double().numpy())
        cases.append(ScoreCase(what, x, m, p, torch.as_tensor(d**2).amin(dim=1), term))
    return cases


@exercise_check(
    "Exercise 8.7",
    "Mahalanobis scores",
    hint="The score of a row h is the smallest over the classes of (h - mu)^T P (h - mu), P "
    "used as given and no square root. If you expanded the square, check each of its three "
    "terms against the direct formula on a few rows.",
)
def mahalanobis_scores(student_scores: Callable[..., Any]) -> None:
    """Cases that isolate each term of the expanded square, then general, one-class, float32."""
    terms_right = []
    for case in _score_cases():
        result = call(
            case.what,
            _as_data(student_scores),
            case.features,
            case.means,
            case.precision,
            names=("features", "means", "precision"),
        )
        got = _tensor(
            _value(result, "mahalanobis_scores", "a tensor"), "mahalanobis_scores", "a tensor (N,)"
        ).double()
        expect_shape(
            got,
            case.expected.shape,
            f"the scores for {case.what}",
            "One number per row: the smallest over the classes, shape (N,).",
        )
        # Float32 arithmetic on an expanded square loses digits to cancellation: the tolerance
        # follows the size of its terms.
        single = case.features.dtype == torch.float32
        terms = float(
            (case.features.double() @ case.precision.double())
            .mul(case.features.double())
            .sum(-1)
            .max()
            + case.expected.max()
        )
        tolerance = (
            {"rtol": 1e-3, "atol": 1e-4 * terms} if single else {"rtol": 1e-6, "atol": 1e-9 * terms}
        )
        close = torch.allclose(got, case.expected, **tolerance)
        if not close and not case.term and len(terms_right) == 2:
            raise CheckFailure(
                f"the scores for {case.what} differ from the smallest squared Mahalanobis "
                f"distance, although they are right when the means are zero (h^T P h) and when "
                "the rows are zero (mu^T P mu). The property violated: your score equals "
                "(h - mu)^T P (h - mu) for every row and mean; a likely cause is the expansion "
                "of the squared distance, whose cross term (between h and mu) is off.",
                "Expand (h - mu)^T P (h - mu) again by hand, term by term, and compare each "
                "term with your code on one row and one mean.",
            )
        expect_close(
            got,
            case.expected,
            f"the scores for {case.what}",
            "The smallest squared distance to any class mean, with the precision "
            "matrix as given: no square root, no inversion, no averaging over classes."
            + (
                f" Only the term {case.term} of the expanded square matters here."
                if case.term
                else ""
            ),
            **tolerance,
        )
        if case.term:
            terms_right.append(case.term)
    case = _score_cases()[2]
    _expect_device(
        student_scores, "mahalanobis_scores", case.features[:5], case.means, case.precision
    )
