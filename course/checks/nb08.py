"""Checks for notebook 08, intent classification: six declared contracts (see :mod:`course.framework.spec`).

No check holds an implementation of an answer, and every reference runs on the trusted side
only: a library function where there is one (torch's ``embedding_bag``, scikit-learn's metrics,
its linear discriminant analysis, whose ``covariance_`` is the shared covariance divided by N,
scipy's Mahalanobis ``cdist``), the exercise's definition in float64 where not (8.2, 8.4). The
synthetic sets keep a margin from every threshold and budget edge (confidences halfway between
multiples of 0.01), so no answer depends on rounding.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import torch
import torch.nn.functional as F
from scipy.spatial.distance import cdist
from sklearn.covariance import EmpiricalCovariance
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.metrics import accuracy_score, precision_score, recall_score

from course.framework import properties as prop
from course.framework.domains import Tensors
from course.framework.properties import OneOf, generator
from course.framework.spec import Case, Mistake, Property, Spec, cases, check

F64 = torch.float64
CLASSES = 4  # in-scope classes of the synthetic validation sets of 8.4; their oos_id is 4


# --- 8.1 masked mean pooling ------------------------------------------------------------------


def _pool_cases() -> list[Case]:
    g = generator(81)
    lengths = torch.randint(1, 8, (5,), generator=g)
    lengths[0] = 7  # one row without padding
    scattered = torch.rand(4, 9, generator=g) < 0.6
    scattered[:, 4] = True
    rows = [
        ("a right-padded batch: hidden (5, 7, 6), token_mask (5, 7)",
         torch.randn(5, 7, 6, generator=g) * 3 + 1, torch.arange(7).expand(5, 7) < lengths[:, None],
         "Padded positions count neither in the sum nor in the number you divide by."),
        ("padding at arbitrary positions (4, 9, 3)", torch.randn(4, 9, 3, generator=g), scattered,
         "Only the mask says which positions are real tokens, wherever they are."),
        ("a left-padded float64 batch (3, 6, 16)", torch.randn(3, 6, 16, generator=g, dtype=F64),
         torch.arange(6).expand(3, 6) >= torch.tensor([[0], [2], [5]]), None),
        ("a batch of one in float64 (1, 5, 4)", torch.randn(1, 5, 4, generator=g, dtype=F64),
         torch.tensor([[True, True, True, False, False]]), None),
        ("a row that has no real token (2, 3, 4)", torch.randn(2, 3, 4, generator=g),
         torch.tensor([[True, False, True], [False, False, False]]),
         "The exercise asks for a zero vector for a row with no real token: its sum is zero, so "
         "only the number you divide by needs care."),
        ("one-token sentences (3, 1, 2)", torch.randn(3, 1, 2, generator=g),
         torch.tensor([[True], [False], [True]]), None),
        ("a bfloat16 batch (2, 5, 4), as under autocast", torch.randn(2, 5, 4, generator=g).bfloat16(),
         torch.tensor([[True, True, True, False, False], [True, True, True, True, True]]),
         "Keep the input's dtype: a float32 mask multiplied in or divided by turns a bfloat16 "
         "batch into float32; convert the mask to hidden's dtype."),
    ]  # fmt: skip
    return cases(("hidden", "token_mask"), rows, first_grad=True)


def _bag_mean(hidden: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
    """torch's embedding_bag averages each row's selected vectors; an empty bag gives zeros."""
    counts = token_mask.sum(dim=1)
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]])
    rows = token_mask.flatten().nonzero().flatten()
    return F.embedding_bag(rows, hidden.reshape(-1, hidden.shape[-1]), offsets, mode="mean")


masked_mean_pool = check(
    Spec(
        exercise="Exercise 8.1",
        title="masked mean pooling",
        name="masked_mean_pool",
        params=("hidden", "token_mask"),
        reference=_bag_mean,
        cases=_pool_cases,
        gradients=("hidden",),
        hint="The average over a row's real tokens: padded positions count neither in the sum "
        "nor in the number you divide by; the mask decides which positions are real.",
    )
)


# --- 8.2 thresholding the softmax confidence --------------------------------------------------


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
    return torch.randint(int(low * 100), int(high * 100), (n,), generator=g).double() / 100 + 0.005


def _threshold_cases() -> list[Case]:
    g = generator(82)
    label = torch.randint(0, 6, (40,), generator=g)
    logits = _logits_with(
        _halfway(40, 0.27, 0.99, g), label, 6, g, torch.rand(40, generator=g) * 8 - 2
    )
    rows: list[tuple] = [
        (f"logits (40, 6), threshold={t}, oos_id=6", logits, t, 6) for t in (0.5, 0.3, 0.8)
    ]
    rows += [
        ("threshold 0.0 (nothing may be flagged: every probability is >= 0)", logits, 0.0, 6),
        ("threshold 1.01 (everything must be flagged out of scope)", logits, 1.01, 6),
        ("oos_id=17", logits, 0.5, 17),
        ("oos_id=5, the last column (a model trained with an out-of-scope class)", logits, 0.5, 5),
        ("threshold 1.0 with two rows of probability exactly 1.0",
         torch.tensor([[50.0, 0.0, 0.0], [0.0, 0.0, 50.0], [1.0, 2.0, 0.0]]), 1.0, 3),
        ("a batch of one row, float64 logits (1, 9)",
         _logits_with(_halfway(1, 0.2, 0.6, g), torch.randint(0, 9, (1,), generator=g), 9, g,
                      torch.tensor([1.5]), F64), 0.4, 9),
    ]  # fmt: skip
    wide = _logits_with(torch.tensor([0.035, 0.015, 0.07], dtype=F64),
                        torch.randint(0, 150, (3,), generator=g), 150, g,
                        torch.tensor([3.0, -1.0, 0.5]))  # fmt: skip
    rows += [(f"logits (3, 150), threshold={t}, oos_id=150", wide, t, 150) for t in (0.02, 0.05)]
    rows.append(
        ("a model with a single class: logits (5, 1)", torch.randn(5, 1, generator=g) * 4, 0.5, 1)
    )
    label = torch.randint(0, 5, (30,), generator=g)
    offset = torch.where(torch.arange(30) % 2 == 0, 1000.0, -1000.0)
    huge = _logits_with(
        _halfway(30, 0.35, 0.99, g), label, 5, g, offset + torch.randn(30, generator=g) * 100
    )
    rows.append(("logits in the thousands (30, 5; their exp overflows), threshold=0.6", huge, 0.6,
                 5))  # fmt: skip
    return cases(("logits", "threshold", "oos_id"), rows)


def _thresholded(logits: torch.Tensor, threshold: float, oos_id: int) -> torch.Tensor:
    confidence, prediction = logits.double().softmax(dim=-1).max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


apply_threshold = check(
    Spec(
        exercise="Exercise 8.2",
        title="confidence threshold",
        name="apply_threshold",
        params=("logits", "threshold", "oos_id"),
        reference=_thresholded,
        cases=_threshold_cases,
        domains={"logits": Tensors(layouts=(), shifts=(-3e4, 3e4))},  # "of any size"; a constant
        properties=(
            Property("numeric range", **prop.overflow("apply_threshold", "logits")),
            *(
                Property(**m)
                for m in prop.meanings(
                    (
                        "the labels",
                        lambda r: r,
                        "the labels",
                        "a row gets oos_id exactly when its "
                        "largest softmax probability, over the classes, is below the threshold; a "
                        "probability equal to it is kept",
                    ),
                )
            ),
        ),
        hint="The confidence of a row is its largest softmax probability over the classes; "
        "compare that probability (not a logit) with the threshold.",
    )
)


# --- 8.3 in-scope accuracy, out-of-scope recall and precision --------------------------------


def _metrics_cases() -> list[Case]:
    oos, g = 9, generator(83)
    target = torch.tensor([0, 1, 2, oos, oos, 1, oos])
    random_target = torch.randint(0, 6, (300,), generator=g)  # 5 is "oos" here
    random_pred = torch.where(
        torch.rand(300, generator=g) < 0.7, random_target, torch.randint(0, 6, (300,), generator=g)
    )
    zero_target = torch.randint(0, 4, (50,), generator=g)  # 0 is "oos" here
    zero_pred = torch.where(
        torch.rand(50, generator=g) < 0.6, zero_target, torch.randint(0, 4, (50,), generator=g)
    )
    rows = [
        ("a 7-row example (in-scope accuracy 0.75, recall 0.333, precision 0.5)",
         torch.tensor([0, oos, 2, oos, 1, 1, 2]), target, oos),
        ("predictions that flag nothing (precision 0.0, as the exercise says)",
         torch.tensor([0, 1, 2, 4, 1, 1, 2]), target, oos),
        ("predictions that flag everything", torch.full((7,), oos), target, oos),
        ("two rows: one in scope and right, one out of scope and flagged", torch.tensor([3, 7]),
         torch.tensor([3, 7]), 7),
        ("300 random rows with oos_id=5", random_pred, random_target, 5),
        ("50 random rows with oos_id=0", zero_pred, zero_target, 0),
    ]  # fmt: skip
    return cases(("pred", "target", "oos_id"), rows)


def _sklearn_metrics(pred: torch.Tensor, target: torch.Tensor, oos_id: int) -> dict[str, float]:
    p, t = pred.numpy(), target.numpy()
    inside = t != oos_id
    return {
        "in_scope_accuracy": float(accuracy_score(t[inside], p[inside])),
        "oos_recall": float(recall_score(t == oos_id, p == oos_id, zero_division=0)),
        "oos_precision": float(precision_score(t == oos_id, p == oos_id, zero_division=0)),
    }


oos_metrics = check(
    Spec(
        exercise="Exercise 8.3",
        title="out-of-scope metrics",
        name="oos_metrics",
        params=("pred", "target", "oos_id"),
        reference=_sklearn_metrics,
        cases=_metrics_cases,
        device=False,  # the text asks for Python floats, and says nothing of a device
        hint="Each figure is a fraction over its own set of rows: in-scope accuracy over the rows "
        "whose true label is in scope, recall over the rows whose true label is out of scope, "
        "precision over the rows flagged out of scope (0.0 when nothing is flagged).",
    )
)


# --- 8.4 choosing the threshold on the validation split ---------------------------------------

DEFAULT_CANDIDATES = [i / 100 for i in range(101)]
GRID_005 = [i / 20 for i in range(21)]
RULE_CANDIDATES = [i / 10 for i in range(10, -1, -1)]  # 1.0, 0.9, ..., 0.0: not ascending
RULE_MAX_DROP = 0.0625


def _validation_set(
    confidence: torch.Tensor, label: torch.Tensor, target: torch.Tensor, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    offset = torch.rand(len(target), generator=g, dtype=F64) * 6 + 2
    return _logits_with(confidence, label, CLASSES, g, offset), target


def _random_validation(offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """310 in-scope rows, mostly confident and right, 62 out of scope: 3% and 8% of 310 are 9.3
    and 24.8 rows, so no accuracy sits on a budget's edge; confidences halfway between 0.01s."""
    g = generator(offset)
    n_in, n_oos = 310, 62
    target = torch.randint(0, CLASSES, (n_in,), generator=g)
    right = torch.rand(n_in, generator=g) < 0.9
    wrong = (target + torch.randint(1, CLASSES, (n_in,), generator=g)) % CLASSES
    label = torch.cat(
        [torch.where(right, target, wrong), torch.randint(0, CLASSES, (n_oos,), generator=g)]
    )
    confident = 0.97 - 0.6 * torch.rand(n_in, generator=g) ** 2
    unsure = 0.35 + 0.4 * torch.rand(n_in, generator=g)
    confidence = torch.cat(
        [torch.where(right, confident, unsure), 0.35 + 0.55 * torch.rand(n_oos, generator=g) ** 1.5]
    )
    confidence = torch.floor(confidence.double() * 100) / 100 + 0.005
    return _validation_set(confidence, label, torch.cat([target, torch.full((n_oos,), CLASSES)]), g)


def _fixed_validation(right: int, confidence: list[float], seed: int) -> tuple:
    """128 in-scope rows, the first ``right`` of them right, and 20 out of scope."""
    target = torch.cat([torch.arange(128) % CLASSES, torch.full((20,), CLASSES)])
    wrong = (target[right:128] + 1) % CLASSES
    label = torch.cat([target[:right], wrong, torch.arange(20) % CLASSES])
    confidences = torch.tensor(confidence, dtype=F64)
    return _validation_set(confidences, label, target, torch.Generator().manual_seed(seed))


# 64 of 128 in-scope rows right (accuracy 0.5 without threshold). With max_drop 0.0625 (8 rows
# of 128) and the candidates 1.0, 0.9, ..., 0.0, the in-scope accuracy at 0.5, 0.6, 0.7, 0.8 is
# 61, 58, 56, 54 rows: "at least acc0 - max_drop" picks 0.7, a strict ">" 0.6, a relative floor
# 0.5, a scan that stops at the first candidate over budget none.
RULE_CONFIDENCES = [0.45] * 3 + [0.55] * 3 + [0.65] * 2 + [0.75] * 2 + [0.95] * 118 + [0.35] * 20


def _near_edge() -> tuple:
    """400 in-scope rows, 300 right (acc0 0.75; with max_drop 0.03 the floor is 288 rows): 289
    right from threshold 0.45 to 0.55, 287 (0.0025 under the floor) from 0.56 to 0.95."""
    confidence = [0.445] * 11 + [0.555] * 2 + [0.955] * 287 + [0.345] * 100 + [0.345] * 20
    target = torch.cat([torch.arange(400) % CLASSES, torch.full((20,), CLASSES)])
    label = torch.cat([target[:300], (target[300:400] + 1) % CLASSES, torch.arange(20) % CLASSES])
    return _validation_set(torch.tensor(confidence, dtype=F64), label, target, generator(86))


def _choose_cases() -> list[Case]:
    sets = {"set A": _random_validation(840), "set B": _random_validation(841)}
    rule, third = _fixed_validation(64, RULE_CONFIDENCES, 84), _random_validation(842)
    # in-scope accuracy 2/128 without threshold: within max_drop=0.03 of it every threshold is
    # allowed, so the default candidates must reach 1.00
    all_in_budget = _fixed_validation(2, [0.95] * 148, 85)

    # rows: what, val_logits, val_target, the further arguments (max_drop, candidates) given;
    # the two sets built to tell the rules apart come first, so a rule's mistake is named
    # whatever the seed draws for the random sets
    rules = [
        (f"a validation set with in-scope accuracy 0.5 without threshold, max_drop="
         f"{RULE_MAX_DROP}, candidates 1.0, 0.9, ..., 0.0 (accuracy exactly 0.5 - "
         f"{RULE_MAX_DROP} at the answer)", *rule,
         {"max_drop": RULE_MAX_DROP, "candidates": list(RULE_CANDIDATES)}),
        ("a validation set where every threshold stays within max_drop (in-scope accuracy "
         "2/128 to begin with), default max_drop and candidates", *all_in_budget, {}),
        ("a validation set where thresholds 0.56 to 0.95 fall 0.0025 under the floor (287 "
         "in-scope rows right of 400, the floor 288), default max_drop and candidates",
         *_near_edge(), {}),
    ]  # fmt: skip
    randoms = [
        (
            f"a synthetic validation set ({name}), max_drop={drop}, candidates 0, 0.05, ..., 1",
            *data,
            {"max_drop": drop, "candidates": list(GRID_005)},
        )
        for name, data in sets.items()
        for drop in (0.03, 0.08)
    ]
    rows = rules + randoms + [
        ("a synthetic validation set (set C), default max_drop (0.03) and candidates (0.00, "
         "0.01, ..., 1.00)", *third, {}),
        (f"the validation set with accuracy 0.5 without threshold, max_drop={RULE_MAX_DROP}, "
         "candidates 0.8, 0.5, 0.6, 0.7 (the threshold 0, no threshold, is not among them)",
         *rule, {"max_drop": RULE_MAX_DROP, "candidates": [0.8, 0.5, 0.6, 0.7]}),
        ("set A with max_drop=0.0 (no drop at all allowed)", *sets["set A"],
         {"max_drop": 0.0, "candidates": list(GRID_005)}),
    ]  # fmt: skip
    params = ("val_logits", "val_target", "oos_id")
    return cases(params, [(what, x, y, CLASSES, more) for what, x, y, more in rows], keywords=True)


def _accuracy_rows(
    logits: torch.Tensor, target: torch.Tensor, oos_id: int, threshold: float
) -> int:
    """In-scope rows right and not flagged at ``threshold`` (float64 softmax)."""
    kept = _thresholded(logits, threshold, oos_id)
    return int(((kept == target) & (target != oos_id)).sum())


def _chosen(
    val_logits: torch.Tensor,
    val_target: torch.Tensor,
    oos_id: int,
    max_drop: float = 0.03,
    candidates: list[float] | None = None,
    *,
    wrong: str = "",
) -> float:
    """The exercise's rule, on counts: the largest candidate whose in-scope accuracy is at least
    the no-threshold one minus ``max_drop``; ``wrong``: one of :data:`CHOOSE_MISTAKES`'."""
    n_in = int((val_target != oos_id).sum())
    rows = functools.partial(_accuracy_rows, val_logits, val_target, oos_id)
    floor = rows(0.0) * (1 - max_drop) if wrong == "relative" else rows(0.0) - max_drop * n_in

    def allowed(t: float) -> bool:
        if wrong == "rounded":
            return round(rows(t) / n_in, 2) >= round(floor / n_in, 2)
        return rows(t) > floor + 1e-9 if wrong == "strict" else rows(t) >= floor - 1e-9

    grid = DEFAULT_CANDIDATES[:-1] if wrong == "no 1.00" else DEFAULT_CANDIDATES
    ordered = candidates if candidates is not None else grid
    if wrong == "scan":  # in the given order, stopping at the first candidate over budget
        ordered = list(itertools.takewhile(allowed, ordered))
    return float(max((t for t in ordered if allowed(t)), default=0.0))


CHOOSE_MISTAKES = tuple(  # (name, the text's words it breaks, _chosen's wrong)
    Mistake(name, breaks, functools.partial(_chosen, wrong=kind)) for name, breaks, kind in (
        ("a candidate exactly on the floor refused", "accuracy *at least* acc0 - max_drop",
         "strict"),
        ("a relative drop, acc0 * (1 - max_drop)", "the budget is in absolute points: "
         "acc0 - max_drop", "relative"),
        ("the scan stopped at the first candidate over budget", "the largest candidate within "
         "budget, whatever the order of `candidates`", "scan"),
        ("the default candidates without 1.00", "the default candidates go from 0.00 to 1.00, "
         "both ends included", "no 1.00"),
        ("accuracies rounded to two decimals", "accuracy *at least* acc0 - max_drop", "rounded"),
    )
)  # fmt: skip


choose_threshold = check(
    Spec(
        exercise="Exercise 8.4",
        title="threshold chosen on validation",
        name="choose_threshold",
        params=("val_logits", "val_target", "oos_id", "max_drop", "candidates"),
        defaults={"max_drop": 0.03, "candidates": None},
        forms=("positional", "defaults"),  # as the notebook calls it
        mutable=("candidates",),  # the text forbids changing the validation data only
        device=False,  # the text returns a Python float and states no device
        reference=_chosen,
        mistakes=CHOOSE_MISTAKES,
        cases=_choose_cases,
        hint="The rule in the exercise: the in-scope accuracy without threshold, minus max_drop, "
        "is the floor; the answer is the largest candidate whose in-scope accuracy reaches it, "
        "measured on the validation data you are given.",
    )
)


# --- 8.6 and 8.7 Mahalanobis distance to the intent means -------------------------------------

GAUSSIAN_SIZES = (30, 70, 45, 120)  # unequal on purpose: per-class averages differ from pooling


def _gaussian_set(offset: int, sizes: tuple[int, ...] = GAUSSIAN_SIZES, dim: int = 5) -> tuple:
    """Sentence vectors (N, dim) float64 and labels (N,): classes of unequal sizes, each with its
    own mean and covariance, rows shuffled."""
    g = generator(offset)
    rows, labels = [], []
    for c, size in enumerate(sizes):
        mean = torch.randn(dim, generator=g, dtype=F64) * 4
        mix = torch.randn(dim, dim, generator=g, dtype=F64) * (0.4 + 0.5 * c)
        rows.append(mean + torch.randn(size, dim, generator=g, dtype=F64) @ mix)
        labels.append(torch.full((size,), c))
    order = torch.randperm(sum(sizes), generator=g)
    return torch.cat(rows)[order], torch.cat(labels)[order]


def _gaussian_cases() -> list[Case]:
    rows = [
        ("synthetic set A (4 classes of sizes 30, 70, 45, 120; 5 dimensions)", _gaussian_set(860)),
        ("synthetic set B (4 classes of sizes 30, 70, 45, 120; 5 dimensions)", _gaussian_set(861)),
        ("synthetic set C (3 classes of sizes 12, 40, 25; 3 dimensions)",
         _gaussian_set(862, (12, 40, 25), 3)),
        ("a single class (20 rows, 4 dimensions)", _gaussian_set(863, (20,), 4)),
    ]  # fmt: skip
    x, y = _gaussian_set(864, (40, 60), 3)
    loose = {"atol": 1e-3, "rtol": 1e-3}  # an inverse in float32 loses about three digits
    rows = [(what, *xy) for what, xy in rows]  # what, features, labels, [hint, strict]
    rows.append(("float32 vectors (2 classes, 3 dimensions)", x.float(), y, None, loose))
    return cases(("features", "labels"), rows)


def _sklearn_gaussians(features: torch.Tensor, labels: torch.Tensor) -> tuple[OneOf, OneOf]:
    """scikit-learn's LDA pools the intents' covariances weighted by their sizes (divided by N);
    with one intent, the empirical covariance."""
    x, y = features.double().numpy(), labels.numpy()
    if len(np.unique(y)) == 1:
        fitted = EmpiricalCovariance().fit(x)
        means, covariance = fitted.location_[None], fitted.covariance_
    else:
        lda = LinearDiscriminantAnalysis(solver="lsqr", store_covariance=True).fit(x, y)
        means, covariance = lda.means_, lda.covariance_
    return _either(torch.as_tensor(means), torch.as_tensor(covariance))


def _either(means: torch.Tensor, covariance: torch.Tensor) -> tuple[OneOf, OneOf]:
    """Means and the covariance's inverse, as tensors or NumPy arrays of any float dtype."""
    either = ("torch.Tensor", "numpy.ndarray")
    return (OneOf(means, either, any_dtype=True),
            OneOf(torch.linalg.inv(covariance), either, any_dtype=True))  # fmt: skip


def _centred_on(features: torch.Tensor, labels: torch.Tensor, own: bool, n: int) -> tuple:
    """Means per intent and the inverse covariance of the rows centred on their own intent's mean
    (or on the mean of all rows), divided by ``len(features) - n``: two known mistakes' results,
    float64 tensors (a result in another form fails unnamed)."""
    x = features.double()
    means = torch.stack([x[labels == c].mean(0) for c in range(int(labels.max()) + 1)])
    centred = x - (means[labels] if own else x.mean(0))
    return means, torch.linalg.inv(centred.T @ centred / (len(x) - n))


_SHARED = (
    "one covariance of every row centred on the mean of its own intent, divided by N (the "
    "maximum-likelihood estimate)"
)
GAUSSIAN_MISTAKES = (
    Mistake("dividing by N - 1", _SHARED, lambda features, labels: _centred_on(
        features, labels, True, 1)),
    Mistake("centring every row on the mean of all rows", _SHARED,
            lambda features, labels: _centred_on(features, labels, False, 0)),
)  # fmt: skip


fit_gaussians = check(
    Spec(
        exercise="Exercise 8.6",
        title="intent means and shared covariance",
        name="fit_gaussians",
        params=("features", "labels"),
        reference=_sklearn_gaussians,
        cases=_gaussian_cases,
        device=False,  # tensors or NumPy arrays: the text states no device
        mistakes=GAUSSIAN_MISTAKES,
        properties=tuple(
            Property(**m)
            for m in prop.meanings(
                (
                    "the means",
                    lambda r: r[0],
                    "the intent means",
                    "the average vector of each intent, over that intent's rows: (C, D)",
                ),
                (
                    "the precision",
                    lambda r: r[1],
                    "the precision matrix",
                    "the inverse of ONE "
                    "covariance shared by all intents, of the rows centred on their own intent's mean, "
                    "averaged over all N rows: (D, D)",
                ),
            )
        ),
        hint="One covariance for all intents: every row centred on the mean of its own intent, "
        "the outer products averaged over all N rows (divided by N); precision is its inverse. "
        "Use only the vectors you are given.",
    )
)


def _score_cases() -> list[Case]:
    g, dim = generator(870), 5
    means = torch.randn(4, dim, generator=g, dtype=F64) * 4
    mix = torch.randn(dim, dim, generator=g, dtype=F64)
    precision = mix @ mix.T + 0.5 * torch.eye(dim, dtype=F64)  # symmetric positive definite
    near = means[torch.arange(10) % 4] + torch.randn(10, dim, generator=g, dtype=F64)
    far = torch.randn(40, dim, generator=g, dtype=F64) * 6
    queries = torch.cat([far, near])
    rows = [
        ("rows scored against means all at zero (only the term h^T P h is left)", far[:6],
         torch.zeros(3, dim, dtype=F64), precision),
        ("rows at zero (only the term mu^T P mu is left)", torch.zeros(4, dim, dtype=F64), means,
         precision),
        ("50 rows against 4 means and a precision matrix", queries, means, precision),
        ("a single class (means of shape (1, D))", queries[:7], means[2:3], precision),
        ("a batch of one row, float32 inputs", queries[:1].float(), means.float(),
         precision.float()),
    ]  # fmt: skip

    def bound(x: torch.Tensor, m: torch.Tensor, p: torch.Tensor) -> dict | bool:
        # float32 on an expanded square cancels digits: the bound follows the size of its terms
        terms = sum(float((v @ p.double() * v).sum(-1).max()) for v in (x.double(), m.double()))
        return {"rtol": 1e-3, "atol": 1e-4 * terms} if x.dtype == torch.float32 else False

    rows = [(*row, bound(*row[1:])) for row in rows]  # what, features, means, precision, strict
    return cases(("features", "means", "precision"), rows, fields=("strict",))


def _scipy_scores(features: torch.Tensor, means: torch.Tensor, precision: torch.Tensor) -> OneOf:
    d = cdist(
        features.double().numpy(),
        means.double().numpy(),
        "mahalanobis",
        VI=precision.double().numpy(),
    )
    return OneOf(torch.as_tensor(d**2).amin(dim=1), ("torch.Tensor",), any_dtype=True)


mahalanobis_scores = check(
    Spec(
        exercise="Exercise 8.7",
        title="Mahalanobis scores",
        name="mahalanobis_scores",
        params=("features", "means", "precision"),
        reference=_scipy_scores,
        cases=_score_cases,
        properties=tuple(
            Property(**m)
            for m in prop.meanings(
                (
                    "the expansion",
                    lambda r: r,
                    "the scores",
                    "your score equals (h - mu)^T P (h - mu) "
                    "for every row and mean; it is right when the means are zero (h^T P h) and when the "
                    "rows are zero (mu^T P mu), so a likely cause is the expansion of the squared "
                    "distance, whose cross term (between h and mu) is off",
                    lambda case: "term" not in case.what,
                ),
            )
        ),
        hint="The score of a row h is the smallest over the classes of (h - mu)^T P (h - mu), P "
        "used as given and no square root. If you expanded the square, check each of its three "
        "terms against the direct formula on a few rows.",
    )
)
