"""Power of the notebook-08 checks: the reference passes, the stub and typical mistakes fail."""

from __future__ import annotations

import pytest
import torch

from course.check import FAILED, NOT_IMPLEMENTED, PASSED
from course.checks import nb08 as check


def stub(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------------------------------
# Exercise 8.1: masked mean pooling
# ---------------------------------------------------------------------------------------


def pool(hidden, token_mask):
    """Reference: zero the padding, sum, divide by the real-token count (at least 1)."""
    weights = token_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


def pool_clamp_tiny(hidden, token_mask):
    """Right, written differently: the count clamped at 1e-9 instead of 1."""
    weights = token_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


def test_pool_clamp_min_1e9_passes():
    assert check.masked_mean_pool(pool_clamp_tiny, raise_on_failure=False).status == PASSED


def pool_plain_mean(hidden, token_mask):
    return hidden.mean(dim=1)


def pool_divide_by_length(hidden, token_mask):
    weights = token_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / hidden.shape[1]


def pool_sum(hidden, token_mask):
    return (hidden * token_mask.unsqueeze(-1).to(hidden.dtype)).sum(dim=1)


def pool_nan_on_empty(hidden, token_mask):
    weights = token_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1)


def pool_inverted_mask(hidden, token_mask):
    return pool(hidden, ~token_mask)


def pool_first_token(hidden, token_mask):
    return hidden[:, 0]


def pool_count_from_first_pad(hidden, token_mask):
    """Assumes right padding: averages the first `count` positions, whatever the mask says."""
    counts = token_mask.sum(dim=1)
    prefix = torch.arange(hidden.shape[1]).unsqueeze(0) < counts.unsqueeze(1)
    return pool(hidden, prefix)


def pool_float32(hidden, token_mask):
    return pool(hidden.float(), token_mask)


def pool_in_place(hidden, token_mask):
    hidden[~token_mask] = 0
    return hidden.sum(dim=1) / token_mask.sum(dim=1, keepdim=True).clamp(min=1)


def test_pool_reference_passes():
    assert check.masked_mean_pool(pool, raise_on_failure=False).status == PASSED


def test_pool_stub_not_implemented():
    assert check.masked_mean_pool(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong",
    [
        pool_plain_mean,
        pool_divide_by_length,
        pool_sum,
        pool_nan_on_empty,
        pool_inverted_mask,
        pool_first_token,
        pool_count_from_first_pad,
        pool_float32,
        pool_in_place,
    ],
    ids=lambda f: f.__name__,
)
def test_pool_wrong_rejected(wrong):
    result = check.masked_mean_pool(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.report()


# ---------------------------------------------------------------------------------------
# Exercise 8.2: confidence threshold
# ---------------------------------------------------------------------------------------


def threshold(logits, threshold, oos_id):
    """Reference: the argmax intent, unless its softmax probability is below the threshold."""
    confidence, prediction = logits.softmax(dim=-1).max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_gather(logits, threshold, oos_id):
    """Right, written differently: the winner's probability read with gather."""
    probs = logits.softmax(dim=-1)
    prediction = probs.argmax(dim=-1)
    confidence = probs.gather(-1, prediction.unsqueeze(-1)).squeeze(-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_masked_fill(logits, threshold, oos_id):
    """Right, written differently: masked_fill on the argmax."""
    confidence, prediction = logits.softmax(dim=-1).max(dim=-1)
    return prediction.masked_fill(confidence < threshold, oos_id)


@pytest.mark.parametrize("right", [threshold_gather, threshold_masked_fill])
def test_threshold_written_differently_passes(right):
    assert check.apply_threshold(right, raise_on_failure=False).status == PASSED


def threshold_on_logits(logits, threshold, oos_id):
    confidence, prediction = logits.max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_on_log_probs(logits, threshold, oos_id):
    confidence, prediction = logits.log_softmax(dim=-1).max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_softmax_wrong_axis(logits, threshold, oos_id):
    confidence, prediction = logits.softmax(dim=0).max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_strict(logits, threshold, oos_id):
    confidence, prediction = logits.softmax(dim=-1).max(dim=-1)
    return torch.where(confidence > threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_inverted(logits, threshold, oos_id):
    confidence, prediction = logits.softmax(dim=-1).max(dim=-1)
    return torch.where(confidence < threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_hard_coded_oos(logits, threshold, oos_id):
    return globals()["threshold"](logits, threshold, 150)


def threshold_returns_confidence(logits, threshold, oos_id):
    confidence, _ = logits.softmax(dim=-1).max(dim=-1)
    return confidence


def threshold_returns_mask(logits, threshold, oos_id):
    confidence, _ = logits.softmax(dim=-1).max(dim=-1)
    return confidence < threshold


def threshold_second_best_margin(logits, threshold, oos_id):
    """Thresholds the gap between the two best probabilities instead of the best one."""
    top = logits.softmax(dim=-1).topk(2, dim=-1)
    margin = top.values[:, 0] - top.values[:, 1]
    prediction = top.indices[:, 0]
    return torch.where(margin >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_in_place(logits, threshold, oos_id):
    logits.sub_(logits.amax(dim=-1, keepdim=True))  # "stabilises" the caller's tensor
    return globals()["threshold"](logits, threshold, oos_id)


def test_threshold_reference_passes():
    assert check.apply_threshold(threshold, raise_on_failure=False).status == PASSED


def test_threshold_stub_not_implemented():
    assert check.apply_threshold(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong",
    [
        threshold_on_logits,
        threshold_on_log_probs,
        threshold_softmax_wrong_axis,
        threshold_strict,
        threshold_inverted,
        threshold_hard_coded_oos,
        threshold_returns_confidence,
        threshold_returns_mask,
        threshold_second_best_margin,
        threshold_in_place,
    ],
    ids=lambda f: f.__name__,
)
def test_threshold_wrong_rejected(wrong):
    result = check.apply_threshold(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.report()


# ---------------------------------------------------------------------------------------
# Exercise 8.3: out-of-scope metrics
# ---------------------------------------------------------------------------------------


def metrics(pred, target, oos_id):
    """Reference: accuracy over in-scope targets, recall over oos targets, precision over flags."""
    in_scope, flagged = target != oos_id, pred == oos_id
    return {
        "in_scope_accuracy": (pred[in_scope] == target[in_scope]).float().mean().item(),
        "oos_recall": flagged[~in_scope].float().mean().item(),
        "oos_precision": (~in_scope[flagged]).float().mean().item() if flagged.any() else 0.0,
    }


def metrics_accuracy_over_all_rows(pred, target, oos_id):
    result = metrics(pred, target, oos_id)
    result["in_scope_accuracy"] = (pred == target).float().mean().item()
    return result


def metrics_accuracy_over_accepted_rows(pred, target, oos_id):
    result = metrics(pred, target, oos_id)
    accepted = (target != oos_id) & (pred != oos_id)
    result["in_scope_accuracy"] = (pred[accepted] == target[accepted]).float().mean().item()
    return result


def metrics_swapped(pred, target, oos_id):
    result = metrics(pred, target, oos_id)
    result["oos_recall"], result["oos_precision"] = result["oos_precision"], result["oos_recall"]
    return result


def metrics_recall_over_all_rows(pred, target, oos_id):
    result = metrics(pred, target, oos_id)
    result["oos_recall"] = (pred == oos_id).float().mean().item()
    return result


def metrics_nan_precision(pred, target, oos_id):
    result = metrics(pred, target, oos_id)
    flagged = pred == oos_id
    result["oos_precision"] = (target[flagged] == oos_id).float().mean().item()  # nan if empty
    return result


def metrics_hard_coded_oos(pred, target, oos_id):
    return metrics(pred, target, 150)


def metrics_percentages(pred, target, oos_id):
    return {key: 100 * value for key, value in metrics(pred, target, oos_id).items()}


def metrics_oos_counted_as_correct_in_accuracy(pred, target, oos_id):
    """In-scope accuracy where "predicted oos" is never held against an in-scope row."""
    result = metrics(pred, target, oos_id)
    in_scope = target != oos_id
    ok = (pred[in_scope] == target[in_scope]) | (pred[in_scope] == oos_id)
    result["in_scope_accuracy"] = ok.float().mean().item()
    return result


def metrics_missing_key(pred, target, oos_id):
    result = metrics(pred, target, oos_id)
    del result["oos_precision"]
    return result


def test_metrics_reference_passes():
    assert check.oos_metrics(metrics, raise_on_failure=False).status == PASSED


def test_metrics_stub_not_implemented():
    assert check.oos_metrics(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong",
    [
        metrics_accuracy_over_all_rows,
        metrics_accuracy_over_accepted_rows,
        metrics_swapped,
        metrics_recall_over_all_rows,
        metrics_nan_precision,
        metrics_hard_coded_oos,
        metrics_percentages,
        metrics_oos_counted_as_correct_in_accuracy,
        metrics_missing_key,
    ],
    ids=lambda f: f.__name__,
)
def test_metrics_wrong_rejected(wrong):
    result = check.oos_metrics(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.report()


def metrics_zero_d_tensors(pred, target, oos_id):
    """Forgets .item(): every figure is a 0-d tensor."""
    in_scope, flagged = target != oos_id, pred == oos_id
    return {
        "in_scope_accuracy": (pred[in_scope] == target[in_scope]).double().mean(),
        "oos_recall": flagged[~in_scope].double().mean(),
        "oos_precision": (~in_scope[flagged]).double().mean()
        if flagged.any()
        else torch.tensor(0.0),
    }


def test_metrics_zero_d_tensors_rejected():
    result = check.oos_metrics(metrics_zero_d_tensors, raise_on_failure=False)
    assert result.status == FAILED
    assert "should be a Python float, got a 0-d tensor" in result.message


# ---------------------------------------------------------------------------------------
# Exercise 8.4: threshold chosen on the validation split
# ---------------------------------------------------------------------------------------

GRID = [i / 100 for i in range(101)]


def choose_factory(
    apply=threshold,
    score=metrics,
    floor_from_one: bool = False,
    fixed_max_drop: float | None = None,
    drop_in_points: bool = False,
    ignore_candidates: bool = False,
    pick: str = "largest_feasible",
    data: tuple[torch.Tensor, torch.Tensor] | None = None,
    grid: list[float] = GRID,
    strict: bool = False,
    relative: bool = False,
):
    """A correct choose_threshold by default; each argument injects one typical mistake."""

    def choose_threshold(val_logits, val_target, oos_id, max_drop=0.03, candidates=None):
        if data is not None:  # the mistake: reads another split than the one it is given
            val_logits, val_target = data
        candidates = grid if candidates is None or ignore_candidates else list(candidates)
        drop = fixed_max_drop if fixed_max_drop is not None else max_drop
        drop = drop * 100 if drop_in_points else drop
        results = {t: score(apply(val_logits, t, oos_id), val_target, oos_id) for t in candidates}
        base = (
            1.0
            if floor_from_one
            else score(apply(val_logits, 0.0, oos_id), val_target, oos_id)["in_scope_accuracy"]
        )
        floor = base * (1 - drop) if relative else base - drop

        def meets(t):
            accuracy = results[t]["in_scope_accuracy"]
            return accuracy > floor if strict else accuracy >= floor

        feasible = [t for t in candidates if meets(t)]
        if pick == "largest_feasible":
            return max(feasible, default=0.0)
        if pick == "first_break":  # scans in the given order and stops at the first failure
            chosen = 0.0
            for t in candidates:
                if not meets(t):
                    break
                chosen = t
            return chosen
        if pick == "best_accuracy":
            return max(candidates, key=lambda t: (results[t]["in_scope_accuracy"], -t))
        if pick == "best_recall":
            return max(candidates, key=lambda t: (results[t]["oos_recall"], -t))
        if pick == "best_sum":
            return max(
                candidates,
                key=lambda t: results[t]["in_scope_accuracy"] + results[t]["oos_recall"],
            )
        if pick == "best_f1":

            def f1(r):
                p, q = r["oos_precision"], r["oos_recall"]
                return 2 * p * q / (p + q) if p + q else 0.0

            return max(candidates, key=lambda t: f1(results[t]))
        raise ValueError(pick)

    return choose_threshold


def test_threshold_case_has_margins():
    """The synthetic sets are built so that no accuracy sits on the budget's edge."""
    for seed in (0, 1, 2):
        logits, target = check.threshold_case(seed)
        confidence = logits.softmax(dim=-1).amax(dim=-1).double()
        distance_to_grid = (confidence * 100 - (confidence * 100).round()).abs()
        assert distance_to_grid.min() > 0.4  # every confidence is ~halfway between grid points
        in_scope = target != check.CLASSES
        base = metrics(threshold(logits, 0.0, check.CLASSES), target, check.CLASSES)
        for t in GRID:
            acc = metrics(threshold(logits, t, check.CLASSES), target, check.CLASSES)
            for drop in (0.03, 0.08):
                gap = acc["in_scope_accuracy"] - (base["in_scope_accuracy"] - drop)
                assert abs(gap) > 0.2 / int(in_scope.sum())


def test_threshold_cases_have_distinct_answers():
    answers = {
        check.reference_choose_threshold(*check.threshold_case(s), check.CLASSES, d)
        for s in (0, 1)
        for d in (0.03, 0.08)
    }
    assert len(answers) >= 3, answers


def test_choose_reference_passes():
    assert check.choose_threshold(choose_factory(), raise_on_failure=False).status == PASSED


def test_choose_reference_agrees_with_check_reference():
    for seed in (0, 1, 2):
        logits, target = check.threshold_case(seed)
        ours = choose_factory()(logits, target, check.CLASSES)
        assert ours == check.reference_choose_threshold(logits, target, check.CLASSES)


def test_choose_stub_not_implemented():
    assert check.choose_threshold(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


TEST_SPLIT = check.threshold_case(123)  # stands for the notebook's test split

WRONG_CHOOSERS = {
    "chosen_on_test_split": choose_factory(data=TEST_SPLIT),
    "thresholds_logits": choose_factory(apply=threshold_on_logits),
    "thresholds_log_probs": choose_factory(apply=threshold_on_log_probs),
    "oos_rows_in_accuracy": choose_factory(score=metrics_accuracy_over_all_rows),
    "accuracy_over_accepted_rows": choose_factory(score=metrics_accuracy_over_accepted_rows),
    "budget_from_perfect_accuracy": choose_factory(floor_from_one=True),
    "budget_hard_coded": choose_factory(fixed_max_drop=0.03),
    "budget_in_points": choose_factory(drop_in_points=True),
    "ignores_candidates": choose_factory(ignore_candidates=True),
    "maximises_accuracy": choose_factory(pick="best_accuracy"),
    "maximises_recall": choose_factory(pick="best_recall"),
    "maximises_accuracy_plus_recall": choose_factory(pick="best_sum"),
    "maximises_f1": choose_factory(pick="best_f1"),
    "always_half": lambda *args, **kwargs: 0.5,
    "strict_greater_than": choose_factory(strict=True),
    "relative_floor": choose_factory(relative=True),
    "stops_at_first_break": choose_factory(pick="first_break"),
    "default_candidates_miss_one": choose_factory(grid=[i / 100 for i in range(100)]),
    "returns_a_tensor": lambda *args, **kwargs: torch.tensor(choose_factory()(*args, **kwargs)),
}


@pytest.mark.parametrize(
    "name, words",
    [
        ("strict_greater_than", "*at least* acc0 - max_drop (use >=)"),
        ("relative_floor", "as a relative drop"),
        ("stops_at_first_break", "stopped at the first candidate over budget"),
        ("default_candidates_miss_one", "your default candidates stop before 1.00"),
    ],
)
def test_choose_mistake_is_named(name, words):
    result = check.choose_threshold(WRONG_CHOOSERS[name], raise_on_failure=False)
    assert words in result.message, result.message


def test_rule_case_separates_the_rules():
    logits, target = check.rule_case()
    args = (logits, target, check.CLASSES, check.RULE_MAX_DROP, check.RULE_CANDIDATES)
    answers = {
        "right": choose_factory()(*args),
        "strict": choose_factory(strict=True)(*args),
        "relative": choose_factory(relative=True)(*args),
        "first_break": choose_factory(pick="first_break")(*args),
    }
    assert answers == {"right": 0.7, "strict": 0.6, "relative": 0.5, "first_break": 0.0}


def test_sorted_scan_that_stops_at_the_first_break_passes():
    """In-scope accuracy never rises with the threshold, so a scan of the sorted candidates
    that stops at the first one over budget is right."""

    def sorted_scan(val_logits, val_target, oos_id, max_drop=0.03, candidates=None):
        candidates = sorted(GRID if candidates is None else candidates)
        chooser = choose_factory(pick="first_break")
        return chooser(val_logits, val_target, oos_id, max_drop, candidates)

    assert check.choose_threshold(sorted_scan, raise_on_failure=False).status == PASSED


@pytest.mark.parametrize("name", list(WRONG_CHOOSERS))
def test_choose_wrong_rejected(name):
    result = check.choose_threshold(WRONG_CHOOSERS[name], raise_on_failure=False)
    assert result.status == FAILED, result.report()


def test_checks_are_fast():
    """Each check costs well under 2 s unloaded (about 0.1 s single-threaded); the bound is
    loose because on a busy machine PyTorch's idle threads spin and inflate the CPU time."""
    import time

    for run, impl in [
        (check.masked_mean_pool, pool),
        (check.apply_threshold, threshold),
        (check.oos_metrics, metrics),
        (check.choose_threshold, choose_factory()),
    ]:
        start = time.process_time()
        run(impl, raise_on_failure=False)
        assert time.process_time() - start < 5.0, run.__name__


# ---------------------------------------------------------------------------------------
# Exercises 8.6 and 8.7: intent means, shared covariance, Mahalanobis scores
# ---------------------------------------------------------------------------------------

import numpy as np  # noqa: E402 - this section's own imports
from sklearn.covariance import EmpiricalCovariance  # noqa: E402


def gaussians(features, labels):
    """The notebook's solution: class means, then sklearn's covariance of the centred rows."""
    means = torch.stack([features[labels == c].mean(dim=0) for c in range(int(labels.max()) + 1)])
    centred = (features - means[labels]).numpy()
    precision = EmpiricalCovariance(assume_centered=True).fit(centred).precision_
    return means, torch.as_tensor(precision, dtype=features.dtype)


def gaussians_per_class_average(features, labels):
    means, _ = gaussians(features, labels)
    covs = [torch.cov((features[labels == c]).T, correction=0) for c in range(len(means))]
    return means, torch.linalg.inv(torch.stack(covs).mean(dim=0))


def gaussians_per_class(features, labels):
    means, _ = gaussians(features, labels)
    covs = [torch.cov((features[labels == c]).T, correction=0) for c in range(len(means))]
    return means, torch.linalg.inv(torch.stack(covs))  # (C, D, D): one per class


def gaussians_not_inverted(features, labels):
    means, precision = gaussians(features, labels)
    return means, torch.linalg.inv(precision)


def gaussians_overall_mean(features, labels):
    means, _ = gaussians(features, labels)
    return means, torch.linalg.inv(torch.cov(features.T, correction=0))


def gaussians_unbiased(features, labels):
    means = torch.stack([features[labels == c].mean(dim=0) for c in range(int(labels.max()) + 1)])
    return means, torch.linalg.inv(torch.cov((features - means[labels]).T))  # divides by N - 1


def gaussians_ledoit_wolf(features, labels):
    from sklearn.covariance import LedoitWolf

    means, _ = gaussians(features, labels)
    centred = (features - means[labels]).numpy()
    return means, torch.as_tensor(LedoitWolf(assume_centered=True).fit(centred).precision_)


VALIDATION_SPLIT = check.gaussian_case(321)  # stands for the notebook's validation vectors


def gaussians_on_validation(features, labels):
    return gaussians(*VALIDATION_SPLIT)


def gaussians_in_place(features, labels):
    result = gaussians(features, labels)
    features -= features.mean(dim=0)
    return result


def scores(features, means, precision):
    """The notebook's solution: all (row, class) squared distances, the smallest per row."""
    diff = features.unsqueeze(1) - means.unsqueeze(0)  # (N, C, D)
    return torch.einsum("ncd,de,nce->nc", diff, precision, diff).amin(dim=1)


def scores_sqrt(features, means, precision):
    return scores(features, means, precision).sqrt()


def scores_euclidean(features, means, precision):
    return scores(features, means, torch.eye(len(precision), dtype=precision.dtype))


def scores_inverted_again(features, means, precision):
    return scores(features, means, torch.linalg.inv(precision))


def scores_overall_mean(features, means, precision):
    return scores(features, means.mean(dim=0, keepdim=True), precision)


def scores_largest(features, means, precision):
    diff = features.unsqueeze(1) - means.unsqueeze(0)
    return torch.einsum("ncd,de,nce->nc", diff, precision, diff).amax(dim=1)


def scores_average(features, means, precision):
    diff = features.unsqueeze(1) - means.unsqueeze(0)
    return torch.einsum("ncd,de,nce->nc", diff, precision, diff).mean(dim=1)


def scores_all_classes(features, means, precision):
    diff = features.unsqueeze(1) - means.unsqueeze(0)
    return torch.einsum("ncd,de,nce->nc", diff, precision, diff)  # (N, C), no minimum


def scores_nearest_euclidean_mean(features, means, precision):
    nearest = torch.cdist(features, means).argmin(dim=1)  # the class chosen without the precision
    diff = features - means[nearest]
    return torch.einsum("nd,de,ne->n", diff, precision, diff)


def scores_numpy(features, means, precision):
    return scores(features, means, precision).numpy()


def scores_in_place(features, means, precision):
    result = scores(features, means, precision)
    features.mul_(2)
    return result


def test_gaussian_case_classes_differ():
    """Per-class covariances are really different and the classes really unbalanced."""
    features, labels = check.gaussian_case(0)
    covs = [torch.cov(features[labels == c].T) for c in range(4)]
    assert (covs[3].trace() / covs[0].trace()) > 4
    assert len(set(torch.bincount(labels).tolist())) == 4


def test_gaussians_reference_passes():
    assert check.fit_gaussians(gaussians, raise_on_failure=False).status == PASSED


def test_gaussians_torch_only_passes():
    assert check.fit_gaussians(check.reference_fit_gaussians, raise_on_failure=False).status == PASSED


def test_gaussians_stub_not_implemented():
    assert check.fit_gaussians(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong",
    [
        gaussians_per_class_average,
        gaussians_per_class,
        gaussians_not_inverted,
        gaussians_overall_mean,
        gaussians_unbiased,
        gaussians_ledoit_wolf,
        gaussians_on_validation,
        gaussians_in_place,
        lambda features, labels: gaussians(features, labels)[1],
    ],
    ids=lambda f: f.__name__,
)
def test_gaussians_wrong_rejected(wrong):
    result = check.fit_gaussians(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.report()


def test_scores_reference_passes():
    assert check.mahalanobis_scores(scores, raise_on_failure=False).status == PASSED


def test_scores_numpy_passes():
    assert check.mahalanobis_scores(scores_numpy, raise_on_failure=False).status == PASSED


def test_scores_stub_not_implemented():
    assert check.mahalanobis_scores(stub, raise_on_failure=False).status == NOT_IMPLEMENTED


def test_scores_agree_with_notebook_pipeline():
    """Reference scores equal sklearn's own squared Mahalanobis distance to the nearest mean."""
    features, labels = check.gaussian_case(4)
    means, precision = check.reference_fit_gaussians(features, labels)
    centred = (features - means[labels]).numpy()
    estimator = EmpiricalCovariance(assume_centered=True).fit(centred)
    queries = features[:7]
    sklearn_scores = np.min([estimator.mahalanobis((queries - m).numpy()) for m in means], axis=0)
    ours = check.reference_mahalanobis_scores(queries, means, precision)
    assert np.allclose(ours.numpy(), sklearn_scores, rtol=1e-8)


@pytest.mark.parametrize(
    "wrong",
    [
        scores_sqrt,
        scores_euclidean,
        scores_inverted_again,
        scores_overall_mean,
        scores_largest,
        scores_average,
        scores_all_classes,
        scores_nearest_euclidean_mean,
        scores_in_place,
    ],
    ids=lambda f: f.__name__,
)
def test_scores_wrong_rejected(wrong):
    result = check.mahalanobis_scores(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.report()


def test_mahalanobis_checks_are_fast():
    import time

    for run, impl in [(check.fit_gaussians, gaussians), (check.mahalanobis_scores, scores)]:
        start = time.process_time()
        run(impl, raise_on_failure=False)
        assert time.process_time() - start < 5.0, run.__name__
