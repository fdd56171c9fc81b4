"""Power of the notebook-08 checks: right answers (written in several ways, canonical code
included) pass, the stub is "not implemented", and wrong ones fail, each with the property it
violates named in the message.

Every check call here is probed and replayed (tests/conftest.py). The correct implementations
live here only: the check module holds none.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.covariance import EmpiricalCovariance

from course.checks import nb08 as check
from course.framework.check import FAILED, NOT_IMPLEMENTED, PASSED


def stub(*args, **kwargs):
    raise NotImplementedError


def verdict(run, implementation):
    return run(implementation, raise_on_failure=False)


# ---------------------------------------------------------------------------------------
# Exercise 8.1: masked mean pooling
# ---------------------------------------------------------------------------------------


def pool(hidden, token_mask):
    """The notebook's solution: zero the padding, sum, divide by the real-token count (>= 1)."""
    weights = token_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


def pool_sentence_transformers(token_embeddings, attention_mask):
    """sentence-transformers' README `mean_pooling`, glued at the interface (mask -> float).
    Right in float32 and float64; a bfloat16 batch comes back in float32, which the text's
    "keep the input's dtype" rules out (POOL_PROPERTIES)."""
    input_mask_expanded = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).float()
    return torch.sum(token_embeddings * input_mask_expanded, 1) / torch.clamp(
        input_mask_expanded.sum(1), min=1e-9
    )


def pool_einsum(hidden, token_mask):
    weights = token_mask.to(hidden.dtype)
    return torch.einsum("bld,bl->bd", hidden, weights) / weights.sum(-1, keepdim=True).clamp(min=1)


def pool_loop(hidden, token_mask):
    """A loop over sentences with boolean indexing (the meta device cannot run it)."""
    rows = []
    for states, keep in zip(hidden, token_mask, strict=True):
        real = states[keep]
        rows.append(real.mean(dim=0) if len(real) else torch.zeros_like(states[0]))
    return torch.stack(rows)


def pool_float64_inside(hidden, token_mask):
    return pool(hidden.double(), token_mask).to(hidden.dtype)


def pool_nan_to_num(hidden, token_mask):
    weights = token_mask.unsqueeze(-1).to(hidden.dtype)
    return torch.nan_to_num((hidden * weights).sum(dim=1) / weights.sum(dim=1), nan=0.0)


def pool_masked_fill(hidden, token_mask):
    kept = hidden.masked_fill(~token_mask.unsqueeze(-1), 0)
    return kept.sum(1) / token_mask.sum(1, keepdim=True).clamp(min=1).to(hidden.dtype)


POOL_RIGHT = [
    pool,
    pool_einsum,
    pool_loop,
    pool_float64_inside,
    pool_nan_to_num,
    pool_masked_fill,
]


def pool_fixes_empty_rows_in_the_mask(hidden, token_mask):
    """Right values, but writes into the caller's mask to dodge 0 / 0."""
    empty = ~token_mask.any(dim=1)
    token_mask[empty] = True
    return pool(hidden, token_mask).masked_fill(empty.unsqueeze(-1), 0.0)


def pool_ones_on_the_cpu(hidden, token_mask):
    weights = token_mask.unsqueeze(-1).to(hidden.dtype)
    count = torch.maximum(weights.sum(dim=1), torch.ones(len(hidden), 1, dtype=hidden.dtype))
    return (hidden * weights).sum(dim=1) / count


def pool_detached(hidden, token_mask):
    return pool(hidden.detach(), token_mask)


def pool_switches_grad_off(hidden, token_mask):
    torch.set_grad_enabled(False)  # "evaluation only": never switched back on
    return pool(hidden, token_mask)


# (implementation, a phrase of the expected message): each caught by one property only.
POOL_PROPERTIES = [
    (pool_fixes_empty_rows_in_the_mask, "inputs untouched"),
    (pool_ones_on_the_cpu, "the inputs' device"),
    (pool_detached, "differentiable"),
    (pool_switches_grad_off, "global state"),
    (pool_sentence_transformers, "the stated dtype"),  # only on the bfloat16 batch
]

POOL_WRONG = [
    lambda hidden, token_mask: hidden.mean(dim=1),  # padding counted
    lambda hidden, token_mask: (hidden * token_mask.unsqueeze(-1)).sum(1) / hidden.shape[1],
    lambda hidden, token_mask: (hidden * token_mask.unsqueeze(-1)).sum(1),
    lambda hidden, token_mask: (
        (hidden * token_mask.unsqueeze(-1)).sum(1) / token_mask.sum(1, keepdim=True)
    ),  # NaN on an empty row
    lambda hidden, token_mask: pool(hidden, ~token_mask),
    lambda hidden, token_mask: hidden[:, 0],
    lambda hidden, token_mask: pool(  # assumes right padding: the first `count` positions
        hidden,
        torch.arange(hidden.shape[1]).unsqueeze(0) < token_mask.sum(1, keepdim=True),
    ),
    lambda hidden, token_mask: pool(hidden.float(), token_mask),  # float64 becomes float32
    lambda hidden, token_mask: pool(hidden, token_mask).squeeze(0),
    lambda hidden, token_mask: (
        hidden.masked_fill_(~token_mask.unsqueeze(-1), 0).sum(1)
        / token_mask.sum(1, keepdim=True).clamp(min=1)
    ),  # zeroes the caller's hidden
    lambda hidden, token_mask: (
        pool(hidden, token_mask).mean(0, keepdim=True).expand(len(hidden), -1)
    ),
]


@pytest.mark.parametrize("right", POOL_RIGHT, ids=lambda f: getattr(f, "__name__", str(f)[:20]))
def test_pool_right_variants_pass(right):
    result = verdict(check.masked_mean_pool, right)
    assert result.status == PASSED, result.report()


def test_pool_stub_not_implemented():
    assert verdict(check.masked_mean_pool, stub).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong, words", POOL_PROPERTIES, ids=lambda f: getattr(f, "__name__", str(f)[:20])
)
def test_pool_property_named(wrong, words):
    result = verdict(check.masked_mean_pool, wrong)
    assert result.status == FAILED, result.report()
    assert words in result.message, result.message
    torch.set_grad_enabled(True)


@pytest.mark.parametrize("index", range(len(POOL_WRONG)))
def test_pool_wrong_rejected(index):
    result = verdict(check.masked_mean_pool, POOL_WRONG[index])
    assert result.status == FAILED, result.report()


# ---------------------------------------------------------------------------------------
# Exercise 8.2: confidence threshold
# ---------------------------------------------------------------------------------------


def threshold(logits, threshold, oos_id):
    """The notebook's solution."""
    confidence, prediction = logits.softmax(dim=-1).max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_gather(logits, threshold, oos_id):
    probs = logits.softmax(dim=-1)
    prediction = probs.argmax(dim=-1)
    confidence = probs.gather(-1, prediction.unsqueeze(-1)).squeeze(-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_masked_fill(logits, threshold, oos_id):
    confidence, prediction = F.softmax(logits.double(), dim=1).max(dim=1)
    return prediction.masked_fill(confidence < threshold, oos_id)


def threshold_log_space(logits, threshold, oos_id):
    """Compares log-probabilities with log(threshold): the same decision."""
    import math

    best, prediction = logits.log_softmax(dim=-1).max(dim=-1)
    floor = math.log(threshold) if threshold > 0 else float("-inf")
    return torch.where(best >= floor, prediction, oos_id)


def threshold_loop(logits, threshold, oos_id):
    labels = []
    for row in logits.softmax(dim=-1).tolist():
        best = max(range(len(row)), key=row.__getitem__)
        labels.append(best if row[best] >= threshold else oos_id)
    return torch.tensor(labels, dtype=torch.long)


def threshold_loop_on_device(logits, threshold, oos_id):
    return threshold_loop(logits, threshold, oos_id).to(logits.device)


THRESHOLD_RIGHT = [
    threshold,
    threshold_gather,
    threshold_masked_fill,
    threshold_log_space,
    threshold_loop_on_device,
]


def threshold_naive_softmax(logits, threshold, oos_id):
    probs = logits.exp() / logits.exp().sum(dim=-1, keepdim=True)
    confidence, prediction = probs.max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_full_on_the_cpu(logits, threshold, oos_id):
    confidence, prediction = logits.softmax(dim=-1).max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full(prediction.shape, oos_id))


def threshold_sets_default_dtype(logits, threshold, oos_id):
    torch.set_default_dtype(torch.float64)  # "more precise probabilities"
    return globals()["threshold"](logits.double(), threshold, oos_id)


THRESHOLD_PROPERTIES = [
    # a loop through .tolist() made its labels on the CPU: the old meta-device test could not
    # run it (undecided, so it passed); the text says "keep the result on their device"
    (threshold_loop, "the inputs' device"),
    (threshold_naive_softmax, "numeric range"),
    (threshold_full_on_the_cpu, "the inputs' device"),
    (threshold_sets_default_dtype, "global state"),
]


def threshold_on_logits(logits, threshold, oos_id):
    confidence, prediction = logits.max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_on_log_probs(logits, threshold, oos_id):
    confidence, prediction = logits.log_softmax(dim=-1).max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_second_best_margin(logits, threshold, oos_id):
    top = logits.softmax(dim=-1).topk(min(2, logits.shape[-1]), dim=-1)
    margin = top.values[:, 0] - (top.values[:, 1] if logits.shape[-1] > 1 else 0)
    prediction = top.indices[:, 0]
    return torch.where(margin >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_in_place(logits, threshold, oos_id):
    logits.sub_(logits.amax(dim=-1, keepdim=True))  # "stabilises" the caller's tensor
    return globals()["threshold"](logits, threshold, oos_id)


def threshold_sigmoid(logits, threshold, oos_id):
    """Reads "probability" as a per-class sigmoid."""
    confidence, prediction = logits.sigmoid().max(dim=-1)
    return torch.where(confidence >= threshold, prediction, torch.full_like(prediction, oos_id))


def threshold_of_oos_probability(logits, threshold, oos_id):
    """Reads the rule as "flag when 1 - confidence is above the threshold"."""
    confidence, prediction = logits.softmax(dim=-1).max(dim=-1)
    return torch.where(1 - confidence <= threshold, prediction, torch.full_like(prediction, oos_id))


THRESHOLD_WRONG = [
    threshold_on_logits,
    threshold_on_log_probs,
    lambda logits, t, oos_id: threshold(logits.T, t, oos_id) if logits.shape[0] > 1 else 0,
    lambda logits, t, oos_id: torch.where(
        logits.softmax(0).max(-1).values >= t, logits.argmax(-1), oos_id
    ),  # softmax over the rows
    lambda logits, t, oos_id: torch.where(
        logits.softmax(-1).max(-1).values > t, logits.argmax(-1), oos_id
    ),  # strict
    lambda logits, t, oos_id: torch.where(
        logits.softmax(-1).max(-1).values < t, logits.argmax(-1), oos_id
    ),  # inverted
    lambda logits, t, oos_id: threshold(logits, t, 150),
    lambda logits, t, oos_id: logits.softmax(-1).max(-1).values,
    lambda logits, t, oos_id: logits.softmax(-1).max(-1).values < t,
    lambda logits, t, oos_id: threshold(logits, t, oos_id).float(),
    threshold_second_best_margin,
    threshold_in_place,
    threshold_sigmoid,
    threshold_of_oos_probability,
]


@pytest.mark.parametrize(
    "right", THRESHOLD_RIGHT, ids=lambda f: getattr(f, "__name__", str(f)[:20])
)
def test_threshold_right_variants_pass(right):
    result = verdict(check.apply_threshold, right)
    assert result.status == PASSED, result.report()


def test_threshold_stub_not_implemented():
    assert verdict(check.apply_threshold, stub).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong, words", THRESHOLD_PROPERTIES, ids=lambda f: getattr(f, "__name__", str(f)[:20])
)
def test_threshold_property_named(wrong, words):
    result = verdict(check.apply_threshold, wrong)
    assert result.status == FAILED, result.report()
    assert words in result.message, result.message
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("index", range(len(THRESHOLD_WRONG)))
def test_threshold_wrong_rejected(index):
    result = verdict(check.apply_threshold, THRESHOLD_WRONG[index])
    assert result.status == FAILED, result.report()


def test_threshold_cases_mean_what_they_say():
    """The trusted side's float64 reference agrees with the solution on every case."""
    for case in check._threshold_cases():
        assert torch.equal(threshold(**case.inputs), check._thresholded(**case.inputs))


# ---------------------------------------------------------------------------------------
# Exercise 8.3: out-of-scope metrics
# ---------------------------------------------------------------------------------------


def metrics(pred, target, oos_id):
    """The notebook's solution."""
    in_scope, flagged = target != oos_id, pred == oos_id
    caught = (flagged & ~in_scope).sum().item()
    return {
        "in_scope_accuracy": (pred[in_scope] == target[in_scope]).float().mean().item(),
        "oos_recall": caught / max(1, (~in_scope).sum().item()),
        "oos_precision": caught / flagged.sum().item() if flagged.any() else 0.0,
    }


def metrics_python(pred, target, oos_id):
    rows = list(zip(pred.tolist(), target.tolist(), strict=True))
    inside = [(p, t) for p, t in rows if t != oos_id]
    flagged = [(p, t) for p, t in rows if p == oos_id]
    oos = [(p, t) for p, t in rows if t == oos_id]
    return {
        "in_scope_accuracy": sum(p == t for p, t in inside) / len(inside),
        "oos_recall": sum(p == oos_id for p, _ in oos) / len(oos),
        "oos_precision": sum(t == oos_id for _, t in flagged) / len(flagged) if flagged else 0,
    }


def metrics_numpy(pred, target, oos_id):
    p, t = pred.numpy(), target.numpy()
    flagged, oos = p == oos_id, t == oos_id
    return {
        "in_scope_accuracy": np.mean(p[~oos] == t[~oos]),
        "oos_recall": np.mean(flagged[oos]),
        "oos_precision": np.mean(oos[flagged]) if flagged.any() else 0.0,
    }


def metrics_sklearn(pred, target, oos_id):
    from sklearn.metrics import precision_recall_fscore_support

    inside = target != oos_id
    precision, recall, _, _ = precision_recall_fscore_support(
        (target == oos_id).numpy(), (pred == oos_id).numpy(), average="binary", zero_division=0
    )
    return {
        "in_scope_accuracy": float((pred[inside] == target[inside]).double().mean()),
        "oos_recall": float(recall),
        "oos_precision": float(precision),
    }


METRICS_RIGHT = [metrics, metrics_python, metrics_numpy, metrics_sklearn]


def metrics_marks_flags_in_place(pred, target, oos_id):
    """Right figures, but overwrites the caller's predictions to mark the flagged rows."""
    flagged = pred == oos_id
    caught = (flagged & (target == oos_id)).sum().item()
    pred[flagged] = -1  # a flagged in-scope row can never match its target
    inside = target != oos_id
    return {
        "in_scope_accuracy": (pred[inside] == target[inside]).float().mean().item(),
        "oos_recall": caught / (target == oos_id).sum().item(),
        "oos_precision": caught / flagged.sum().item() if flagged.any() else 0.0,
    }


def metrics_grad_off(pred, target, oos_id):
    torch.set_grad_enabled(False)  # "an evaluation needs no gradients"
    return metrics(pred, target, oos_id)


METRICS_PROPERTIES = [
    (metrics_marks_flags_in_place, "inputs untouched"),
    (metrics_grad_off, "global state"),
]


def metrics_with(**changes):
    def wrong(pred, target, oos_id):
        result = metrics(pred, target, oos_id)
        for key, change in changes.items():
            result[key] = change(pred, target, oos_id, result)
        return result

    return wrong


METRICS_WRONG = {
    "accuracy_over_all_rows": metrics_with(
        in_scope_accuracy=lambda p, t, o, r: (p == t).float().mean().item()
    ),
    "accuracy_over_accepted_rows": metrics_with(
        in_scope_accuracy=lambda p, t, o, r: (
            (p[(t != o) & (p != o)] == t[(t != o) & (p != o)]).float().mean().item()
        )
    ),
    "flag_counts_as_right": metrics_with(
        in_scope_accuracy=lambda p, t, o, r: ((p == t) | (p == o))[t != o].float().mean().item()
    ),
    "recall_precision_swapped": metrics_with(
        oos_recall=lambda p, t, o, r: r["oos_precision"],
        oos_precision=lambda p, t, o, r: metrics(p, t, o)["oos_recall"],
    ),
    "recall_over_all_rows": metrics_with(
        oos_recall=lambda p, t, o, r: (p == o).float().mean().item()
    ),
    "nan_precision": metrics_with(
        oos_precision=lambda p, t, o, r: (t[p == o] == o).float().mean().item()
    ),
    "hard_coded_oos": lambda p, t, o: metrics(p, t, 150),
    "percentages": lambda p, t, o: {k: 100 * v for k, v in metrics(p, t, o).items()},
    "missing_key": lambda p, t, o: {
        k: v for k, v in metrics(p, t, o).items() if k != "oos_precision"
    },
    "zero_d_tensors": lambda p, t, o: {k: torch.tensor(v) for k, v in metrics(p, t, o).items()},
    "list_not_dict": lambda p, t, o: list(metrics(p, t, o).values()),
    "oos_id_truthiness": lambda p, t, o: metrics(p, t, o or 150),
    "precision_one_when_nothing_flagged": metrics_with(
        oos_precision=lambda p, t, o, r: r["oos_precision"] if (p == o).any() else 1.0
    ),
}


@pytest.mark.parametrize("right", METRICS_RIGHT, ids=lambda f: getattr(f, "__name__", str(f)[:20]))
def test_metrics_right_variants_pass(right):
    result = verdict(check.oos_metrics, right)
    assert result.status == PASSED, result.report()


def test_metrics_stub_not_implemented():
    assert verdict(check.oos_metrics, stub).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong, words", METRICS_PROPERTIES, ids=lambda f: getattr(f, "__name__", str(f)[:20])
)
def test_metrics_property_named(wrong, words):
    result = verdict(check.oos_metrics, wrong)
    assert result.status == FAILED, result.report()
    assert words in result.message, result.message
    torch.set_grad_enabled(True)


@pytest.mark.parametrize("name", sorted(METRICS_WRONG))
def test_metrics_wrong_rejected(name):
    result = verdict(check.oos_metrics, METRICS_WRONG[name])
    assert result.status == FAILED, result.report()


def test_metrics_zero_d_tensors_named():
    result = verdict(check.oos_metrics, METRICS_WRONG["zero_d_tensors"])
    assert "returned a torch.Tensor, but the exercise text says a float" in result.message


def test_metrics_hand_example_is_what_the_text_says():
    case = check._metrics_cases()[0]
    assert check._sklearn_metrics(**case.inputs) == pytest.approx(
        {"in_scope_accuracy": 0.75, "oos_recall": 1 / 3, "oos_precision": 0.5}
    )


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
    base_at: float | None = 0.0,
    rounded: bool = False,
):
    """A correct choose_threshold by default; each argument injects one mistake."""

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
            else score(apply(val_logits, base_at, oos_id), val_target, oos_id)["in_scope_accuracy"]
            if base_at is not None
            else results[min(candidates)]["in_scope_accuracy"]
        )
        floor = base * (1 - drop) if relative else base - drop

        def meets(t):
            accuracy = results[t]["in_scope_accuracy"]
            if rounded:  # within 0.005 of the floor counts as on it
                return round(accuracy, 2) >= round(floor, 2)
            return accuracy > floor if strict else accuracy >= floor

        feasible = [t for t in candidates if meets(t)]
        if pick == "largest_feasible":
            return max(feasible, default=0.0)
        if pick == "smallest_above_zero":
            return min((t for t in feasible if t > 0), default=0.0)
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


def choose_sorted_scan(val_logits, val_target, oos_id, max_drop=0.03, candidates=None):
    """Accuracy never rises with the threshold, so a scan of the *sorted* candidates that stops
    at the first one over budget is right."""
    candidates = sorted(GRID if candidates is None else candidates)
    chooser = choose_factory(pick="first_break")
    return chooser(val_logits, val_target, oos_id, max_drop, candidates)


def choose_vectorised(val_logits, val_target, oos_id, max_drop=0.03, candidates=None):
    grid = torch.linspace(0, 1, 101) if candidates is None else torch.tensor(candidates)
    confidence, prediction = val_logits.double().softmax(-1).max(-1)
    inside = val_target != oos_id
    right = (prediction == val_target) & inside
    kept = confidence.unsqueeze(0) >= grid.double().unsqueeze(1)  # (T, N)
    accuracy = (kept & right).sum(1) / inside.sum()
    ok = accuracy >= right.sum() / inside.sum() - max_drop
    return float(grid[ok].max())


def choose_sorts_candidates_in_place(
    val_logits, val_target, oos_id, max_drop=0.03, candidates=None
):
    """Sorts the caller's `candidates` list: the text forbids changing the validation data only
    (a right answer the checks must accept)."""
    if candidates is not None:
        candidates.sort(reverse=True)
    return choose_factory()(val_logits, val_target, oos_id, max_drop, candidates)


CHOOSE_RIGHT = [
    choose_factory(),
    choose_sorted_scan,
    choose_vectorised,
    choose_sorts_candidates_in_place,
]

TEST_SPLIT = check._random_validation(123)  # stands for the notebook's test split


def choose_normalises_in_place(val_logits, val_target, oos_id, max_drop=0.03, candidates=None):
    val_logits -= val_logits.logsumexp(dim=-1, keepdim=True)  # log-probabilities, in place
    return choose_factory()(val_logits, val_target, oos_id, max_drop, candidates)


def choose_shuffles(val_logits, val_target, oos_id, max_drop=0.03, candidates=None):
    order = torch.randperm(len(val_target))  # "a random sample is enough": the global RNG
    return choose_factory()(val_logits[order], val_target[order], oos_id, max_drop, candidates)


CHOOSE_PROPERTIES = [
    (choose_normalises_in_place, "inputs untouched"),
    (choose_shuffles, "global state"),
]

WRONG_CHOOSERS = {
    "chosen_on_test_split": choose_factory(data=TEST_SPLIT),
    "thresholds_logits": choose_factory(apply=threshold_on_logits),
    "thresholds_log_probs": choose_factory(apply=threshold_on_log_probs),
    "oos_rows_in_accuracy": choose_factory(score=METRICS_WRONG["accuracy_over_all_rows"]),
    "accuracy_over_accepted_rows": choose_factory(
        score=METRICS_WRONG["accuracy_over_accepted_rows"]
    ),
    "budget_from_perfect_accuracy": choose_factory(floor_from_one=True),
    "budget_hard_coded": choose_factory(fixed_max_drop=0.03),
    "budget_in_points": choose_factory(drop_in_points=True),
    "ignores_candidates": choose_factory(ignore_candidates=True),
    "maximises_accuracy": choose_factory(pick="best_accuracy"),
    "maximises_recall": choose_factory(pick="best_recall"),
    "maximises_accuracy_plus_recall": choose_factory(pick="best_sum"),
    "maximises_f1": choose_factory(pick="best_f1"),
    "smallest_within_budget": choose_factory(pick="smallest_above_zero"),
    "baseline_at_the_smallest_candidate": choose_factory(base_at=None),
    "always_half": lambda *args, **kwargs: 0.5,
    "strict_greater_than": choose_factory(strict=True),
    "relative_floor": choose_factory(relative=True),
    "stops_at_first_break": choose_factory(pick="first_break"),
    "default_candidates_miss_one": choose_factory(grid=[i / 100 for i in range(100)]),
    "accuracies_rounded_to_two_decimals": choose_factory(rounded=True),
    "returns_a_tensor": lambda *args, **kwargs: torch.tensor(choose_factory()(*args, **kwargs)),
}


@pytest.mark.parametrize("right", CHOOSE_RIGHT, ids=lambda f: getattr(f, "__name__", str(f)[:20]))
def test_choose_right_variants_pass(right):
    result = verdict(check.choose_threshold, right)
    assert result.status == PASSED, result.report()


def test_choose_stub_not_implemented():
    assert verdict(check.choose_threshold, stub).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong, words", CHOOSE_PROPERTIES, ids=lambda f: getattr(f, "__name__", str(f)[:20])
)
def test_choose_property_named(wrong, words):
    result = verdict(check.choose_threshold, wrong)
    assert result.status == FAILED, result.report()
    assert words in result.message, result.message


@pytest.mark.parametrize("name", sorted(WRONG_CHOOSERS))
def test_choose_wrong_rejected(name):
    result = verdict(check.choose_threshold, WRONG_CHOOSERS[name])
    assert result.status == FAILED, result.report()


@pytest.mark.parametrize(
    "name, words",
    [
        ("strict_greater_than", "*at least* acc0 - max_drop"),
        ("relative_floor", "absolute points"),
        ("stops_at_first_break", "whatever the order"),
        ("default_candidates_miss_one", "both ends included"),
        ("accuracies_rounded_to_two_decimals", "accuracies rounded to two decimals"),
    ],
)
def test_choose_rule_is_named(name, words):
    result = verdict(check.choose_threshold, WRONG_CHOOSERS[name])
    assert words in result.message, result.message


def test_choose_expected_answers_agree_with_a_right_implementation():
    """The trusted side's rule agrees with a right implementation on every case."""
    for case in check._choose_cases():
        assert choose_factory()(**case.inputs) == pytest.approx(check._chosen(**case.inputs))


def test_choose_sets_have_margins_and_distinct_answers():
    """No accuracy sits on the budget's edge; the four random cases have several answers."""
    cases = check._choose_cases()
    for case in cases:
        logits, target = case.inputs["val_logits"], case.inputs["val_target"]
        n_in = int((target != 4).sum())
        floor = (
            check._accuracy_rows(logits, target, 4, 0.0) - case.inputs.get("max_drop", 0.03) * n_in
        )
        for t in GRID:
            gap = check._accuracy_rows(logits, target, 4, t) - floor
            assert gap == 0 or abs(gap) > 0.19, (case.what, t, gap)
    assert len({check._chosen(**case.inputs) for case in cases[2:6]}) >= 3  # the random sets


def test_rule_set_separates_the_rules():
    logits, target = check._fixed_validation(64, check.RULE_CONFIDENCES, 84)  # the rule set
    args = (logits, target, 4, check.RULE_MAX_DROP, check.RULE_CANDIDATES)
    answers = {
        "right": choose_factory()(*args),
        "strict": choose_factory(strict=True)(*args),
        "relative": choose_factory(relative=True)(*args),
        "first_break": choose_factory(pick="first_break")(*args),
    }
    assert answers == {"right": 0.7, "strict": 0.6, "relative": 0.5, "first_break": 0.0}


# ---------------------------------------------------------------------------------------
# Exercises 8.6 and 8.7: intent means, shared covariance, Mahalanobis scores
# ---------------------------------------------------------------------------------------


def gaussians(features, labels):
    """The notebook's solution: class means, then sklearn's covariance of the centred rows."""
    means = torch.stack([features[labels == c].mean(dim=0) for c in range(int(labels.max()) + 1)])
    centred = (features - means[labels]).numpy()
    precision = EmpiricalCovariance(assume_centered=True).fit(centred).precision_
    return means, torch.as_tensor(precision, dtype=features.dtype)


def gaussians_torch(features, labels):
    x = features.double()
    means = torch.stack([x[labels == c].mean(dim=0) for c in range(int(labels.max()) + 1)])
    return means, torch.linalg.inv(torch.cov((x - means[labels]).T, correction=0))


def gaussians_outer_products(features, labels):
    """A loop over rows, summing outer products; numpy arrays returned."""
    x = features.double().numpy()
    y = labels.numpy()
    means = np.stack([x[y == c].mean(axis=0) for c in range(y.max() + 1)])
    total = np.zeros((x.shape[1], x.shape[1]))
    for row, c in zip(x, y, strict=True):
        total += np.outer(row - means[c], row - means[c])
    return means, np.linalg.inv(total / len(x))


def gaussians_index_add(features, labels):
    count = torch.bincount(labels).to(features.dtype)
    sums = torch.zeros(len(count), features.shape[1], dtype=features.dtype).index_add_(
        0, labels, features
    )
    means = sums / count.unsqueeze(1)
    centred = features - means[labels]
    return means, torch.linalg.pinv(centred.T @ centred / len(features), hermitian=True)


def gaussians_lda(features, labels):
    """scikit-learn's linear discriminant analysis: its covariance_ is the shared one."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    lda = LinearDiscriminantAnalysis(solver="lsqr", store_covariance=True)
    lda.fit(features.numpy(), labels.numpy())
    return torch.as_tensor(lda.means_), torch.linalg.inv(torch.as_tensor(lda.covariance_))


def gaussians_centres_in_place(features, labels):
    means, _ = gaussians(features, labels)
    features -= means[labels]  # centred in place: the caller's vectors are gone
    precision = EmpiricalCovariance(assume_centered=True).fit(features.numpy()).precision_
    return means, torch.as_tensor(precision)


GAUSSIANS_RIGHT = [
    gaussians,
    gaussians_torch,
    gaussians_outer_products,
    gaussians_index_add,
    gaussians_lda,
]


def gaussians_float64_default(features, labels):
    torch.set_default_dtype(torch.float64)  # "a covariance needs float64"
    return gaussians_torch(features, labels)


GAUSSIANS_PROPERTIES = [
    (gaussians_float64_default, "global state"),
    (gaussians_centres_in_place, "inputs untouched"),
]


def gaussians_with_covariance(covariance):
    def wrong(features, labels):
        means, _ = gaussians(features, labels)
        return means, covariance(features.double(), labels, means.double())

    return wrong


def per_class(features, labels, means):
    return [torch.cov(features[labels == c].T, correction=0) for c in range(len(means))]


VALIDATION_SPLIT = check._gaussian_set(321)  # stands for the notebook's validation vectors

GAUSSIANS_WRONG = {
    "per_class_average": gaussians_with_covariance(
        lambda x, y, m: torch.linalg.inv(torch.stack(per_class(x, y, m)).mean(0))
    ),
    "per_class": gaussians_with_covariance(
        lambda x, y, m: torch.linalg.inv(torch.stack(per_class(x, y, m)))
    ),
    "not_inverted": gaussians_with_covariance(
        lambda x, y, m: torch.cov((x - m[y]).T, correction=0)
    ),
    "overall_mean": gaussians_with_covariance(
        lambda x, y, m: torch.linalg.inv(torch.cov(x.T, correction=0))
    ),
    "divides_by_n_minus_1": gaussians_with_covariance(
        lambda x, y, m: torch.linalg.inv(torch.cov((x - m[y]).T))
    ),
    "divides_by_n_minus_c": gaussians_with_covariance(
        lambda x, y, m: torch.linalg.inv((x - m[y]).T @ (x - m[y]) / (len(x) - len(m)))
    ),
    "ledoit_wolf": gaussians_with_covariance(
        lambda x, y, m: torch.as_tensor(
            __import__("sklearn.covariance")
            .covariance.LedoitWolf(assume_centered=True)
            .fit((x - m[y]).numpy())
            .precision_
        )
    ),
    "validation_split": lambda features, labels: gaussians(*VALIDATION_SPLIT),
    "precision_only": lambda features, labels: gaussians(features, labels)[1],
    "scalar_means": lambda features, labels: (
        torch.stack([features[labels == c].mean() for c in range(int(labels.max()) + 1)]),
        gaussians(features, labels)[1],
    ),
    "one_class_short": lambda features, labels: (
        gaussians(features, labels)[0][: max(1, int(labels.max()))],
        gaussians(features, labels)[1],
    ),
    "estimator_returned": lambda features, labels: (
        gaussians(features, labels)[0],
        EmpiricalCovariance(assume_centered=True).fit(features.numpy()),
    ),
}


@pytest.mark.parametrize(
    "right", GAUSSIANS_RIGHT, ids=lambda f: getattr(f, "__name__", str(f)[:20])
)
def test_gaussians_right_variants_pass(right):
    result = verdict(check.fit_gaussians, right)
    assert result.status == PASSED, result.report()


def test_nan_precision_is_judged_by_its_value_not_as_state_between_calls():
    """NaN != NaN: a NaN returned twice is the same result, and the message is the value's."""
    result = verdict(check.oos_metrics, METRICS_WRONG["nan_precision"])
    assert result.status == FAILED
    assert "repeated calls" not in result.message and "oos_precision" in result.message, result.message


def test_gaussians_stub_not_implemented():
    assert verdict(check.fit_gaussians, stub).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong, words", GAUSSIANS_PROPERTIES, ids=lambda f: getattr(f, "__name__", str(f)[:20])
)
def test_gaussians_property_named(wrong, words):
    result = verdict(check.fit_gaussians, wrong)
    assert result.status == FAILED, result.report()
    assert words in result.message, result.message
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("name", sorted(GAUSSIANS_WRONG))
def test_gaussians_wrong_rejected(name):
    result = verdict(check.fit_gaussians, GAUSSIANS_WRONG[name])
    assert result.status == FAILED, result.report()


# written apart from the spec's Mistake table, each must be reported by its own name
GAUSSIANS_NAMED = {
    "divides_by_n_minus_1": "gives what dividing by N - 1 gives",
    "overall_mean": "gives what centring every row on the mean of all rows gives",
}


@pytest.mark.parametrize("name", sorted(GAUSSIANS_NAMED))
def test_gaussians_known_mistake_named(name):
    result = verdict(check.fit_gaussians, GAUSSIANS_WRONG[name])
    assert result.status == FAILED and GAUSSIANS_NAMED[name] in result.message, result.message


def test_gaussian_sets_differ_between_classes():
    """Per-class covariances are really different and the classes really unbalanced."""
    features, labels = check._gaussian_set(860)
    covs = [torch.cov(features[labels == c].T) for c in range(4)]
    assert (covs[3].trace() / covs[0].trace()) > 4
    assert len(set(torch.bincount(labels).tolist())) == 4


def scores(features, means, precision):
    """The notebook's solution: the square expanded, three matrix products."""
    projected = features @ precision
    squared = (
        (projected * features).sum(dim=-1, keepdim=True)
        - 2 * projected @ means.T
        + ((means @ precision) * means).sum(dim=-1)
    )
    return squared.amin(dim=1)


def scores_einsum(features, means, precision):
    diff = features.unsqueeze(1) - means.unsqueeze(0)  # (N, C, D)
    return torch.einsum("ncd,de,nce->nc", diff, precision, diff).amin(dim=1)


def scores_loop(features, means, precision):
    best = None
    for mean in means:
        diff = features - mean
        d = ((diff @ precision) * diff).sum(-1)
        best = d if best is None else torch.minimum(best, d)
    return best


def scores_cholesky(features, means, precision):
    """(h - mu)^T L L^T (h - mu) = |L^T (h - mu)|^2: a Euclidean distance after L."""
    chol = torch.linalg.cholesky(precision)
    return (torch.cdist(features @ chol, means @ chol) ** 2).amin(dim=1)


def scores_scipy_array(features, means, precision):
    from scipy.spatial.distance import cdist

    d = cdist(features.numpy(), means.numpy(), "mahalanobis", VI=precision.numpy())
    return (d**2).min(axis=1)


def scores_scipy(features, means, precision):
    """scipy glued at the interface: the text asks for a tensor on the inputs' device."""
    scores = scores_scipy_array(features.cpu(), means.cpu(), precision.cpu())
    return torch.as_tensor(scores, device=features.device)


SCORES_RIGHT = [scores, scores_einsum, scores_loop, scores_cholesky, scores_scipy]


def scores_without_the_factor_2(features, means, precision):
    projected = features @ precision
    squared = (
        (projected * features).sum(dim=-1, keepdim=True)
        - projected @ means.T
        + ((means @ precision) * means).sum(dim=-1)
    )
    return squared.amin(dim=1)


def scores_plus_cross_term(features, means, precision):
    projected = features @ precision
    squared = (
        (projected * features).sum(dim=-1, keepdim=True)
        + 2 * projected @ means.T
        + ((means @ precision) * means).sum(dim=-1)
    )
    return squared.amin(dim=1)


def scores_running_minimum_on_the_cpu(features, means, precision):
    best = torch.full((len(features),), float("inf"), dtype=features.dtype)
    for mean in means:
        diff = features - mean
        best = torch.minimum(best, ((diff @ precision) * diff).sum(-1))
    return best


SCORES_PROPERTIES = [
    (scores_without_the_factor_2, "expansion of the squared distance"),
    (scores_plus_cross_term, "expansion of the squared distance"),
    (scores_running_minimum_on_the_cpu, "the inputs' device"),
    # a NumPy array where the text says "a tensor of shape (N,)" (the old check converted it)
    (scores_scipy_array, "stated return type"),
]

SCORES_WRONG = {
    "sqrt": lambda x, m, p: scores(x, m, p).sqrt(),
    "euclidean": lambda x, m, p: scores(x, m, torch.eye(len(p), dtype=p.dtype)),
    "inverted_again": lambda x, m, p: scores(x, m, torch.linalg.inv(p)),
    "overall_mean": lambda x, m, p: scores(x, m.mean(dim=0, keepdim=True), p),
    "largest": lambda x, m, p: -scores(x, m, -p),
    "average": lambda x, m, p: torch.einsum(
        "ncd,de,nce->nc", x.unsqueeze(1) - m.unsqueeze(0), p, x.unsqueeze(1) - m.unsqueeze(0)
    ).mean(dim=1),
    "all_classes": lambda x, m, p: torch.einsum(
        "ncd,de,nce->nc", x.unsqueeze(1) - m.unsqueeze(0), p, x.unsqueeze(1) - m.unsqueeze(0)
    ),
    "nearest_euclidean_mean": lambda x, m, p: torch.einsum(
        "nd,de,ne->n",
        x - m[torch.cdist(x, m).argmin(1)],
        p,
        x - m[torch.cdist(x, m).argmin(1)],
    ),
    "in_place": lambda x, m, p: (scores(x, m, p), x.mul_(2))[0],
    "half_squared": lambda x, m, p: scores(x, m, p) / 2,
    "mean_term_forgotten": lambda x, m, p: (
        ((x @ p) * x).sum(-1, keepdim=True) - 2 * (x @ p) @ m.T
    ).amin(dim=1),
}


@pytest.mark.parametrize("right", SCORES_RIGHT, ids=lambda f: getattr(f, "__name__", str(f)[:20]))
def test_scores_right_variants_pass(right):
    result = verdict(check.mahalanobis_scores, right)
    assert result.status == PASSED, result.report()


def test_scores_stub_not_implemented():
    assert verdict(check.mahalanobis_scores, stub).status == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "wrong, words", SCORES_PROPERTIES, ids=lambda f: getattr(f, "__name__", str(f)[:20])
)
def test_scores_property_named(wrong, words):
    result = verdict(check.mahalanobis_scores, wrong)
    assert result.status == FAILED, result.report()
    assert words in result.message, result.message


@pytest.mark.parametrize("name", sorted(SCORES_WRONG))
def test_scores_wrong_rejected(name):
    result = verdict(check.mahalanobis_scores, SCORES_WRONG[name])
    assert result.status == FAILED, result.report()


def test_scores_expected_agree_with_sklearn():
    """The check's expected scores equal sklearn's squared Mahalanobis distance."""
    for case in check._score_cases():
        features, means, precision = case.inputs.values()
        estimator = EmpiricalCovariance()
        estimator.precision_ = precision.double().numpy()
        estimator.location_ = np.zeros(precision.shape[0])
        sklearn_scores = np.min(
            [estimator.mahalanobis((features.double() - m).numpy()) for m in means.double()],
            axis=0,
        )
        expected = check._scipy_scores(**case.inputs).value.numpy()
        assert np.allclose(expected, sklearn_scores, rtol=1e-8, atol=1e-8)


# ---------------------------------------------------------------------------------------
# The module itself
# ---------------------------------------------------------------------------------------

CHECKS = [
    (check.masked_mean_pool, pool),
    (check.apply_threshold, threshold),
    (check.oos_metrics, metrics),
    (check.choose_threshold, choose_factory()),
    (check.fit_gaussians, gaussians),
    (check.mahalanobis_scores, scores),
]


def test_the_module_exports_checks_and_data_only():
    """No reference answer to import: every public function of the module is a check."""
    checks = {run.__name__ for run, _ in CHECKS}
    public = {
        name
        for name, value in vars(check).items()
        if callable(value)
        and not name.startswith("_")
        and (getattr(value, "__module__", "") == check.__name__ or hasattr(value, "spec"))
        and not isinstance(value, type)
    }
    assert public == checks
    assert not [name for name in vars(check) if "reference" in name.lower()]


@pytest.mark.parametrize("run, implementation", CHECKS, ids=lambda x: getattr(x, "__name__", ""))
def test_checks_leave_the_global_random_state_alone(run, implementation):
    state = torch.random.get_rng_state()
    verdict(run, implementation)
    assert torch.equal(torch.random.get_rng_state(), state)
