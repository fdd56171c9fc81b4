"""Power of the notebook-06 checks: the reference passes, the stub and typical mistakes fail."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course.check import FAILED, NOT_IMPLEMENTED, PASSED
from course.checks import nb06 as check

# ---------------------------------------------------------------------------------------
# Exercise 6.1: MLM masking
# ---------------------------------------------------------------------------------------


def mask_tokens_factory(
    select_special: bool = False,
    select_all: bool = False,
    p_mask: float = 0.8,
    p_random_of_rest: float = 0.5,
    labels_everywhere: bool = False,
    labels_after_masking: bool = False,
    unselected_label: int = -100,
    random_fixed_id: int | None = None,
    fixed_probability: float | None = None,
    in_place: bool = False,
):
    """A correct masking function by default; each flag injects one typical mistake."""

    def mask_tokens(
        input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
    ):
        ids = input_ids if in_place else input_ids.clone()
        labels = ids.clone()
        probability = fixed_probability if fixed_probability is not None else mlm_probability
        probabilities = torch.full(ids.shape, 1.0 if select_all else probability)
        if not select_special:
            probabilities.masked_fill_(special_tokens_mask, 0.0)
        selected = torch.bernoulli(probabilities).bool()
        if not labels_everywhere:
            labels[~selected] = unselected_label
        to_mask = torch.bernoulli(torch.full(ids.shape, p_mask)).bool() & selected
        ids[to_mask] = mask_token_id
        randomise = (
            torch.bernoulli(torch.full(ids.shape, p_random_of_rest)).bool() & selected & ~to_mask
        )
        if random_fixed_id is None:
            random_ids = torch.randint(vocab_size, ids.shape, dtype=torch.long)
        else:
            random_ids = torch.full(ids.shape, random_fixed_id, dtype=torch.long)
        ids[randomise] = random_ids[randomise]
        if labels_after_masking:
            labels = torch.where(selected, ids, torch.full_like(ids, -100))
        return ids, labels

    return mask_tokens


def mask_tokens_exact_count(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    """Also correct: the original BERT picks round(15%) of each sequence's tokens exactly."""
    ids, labels = input_ids.clone(), input_ids.clone()
    selected = torch.zeros_like(special_tokens_mask)
    for row in range(ids.shape[0]):
        candidates = (~special_tokens_mask[row]).nonzero().flatten()
        count = round(mlm_probability * len(candidates))
        chosen = candidates[torch.randperm(len(candidates))[:count]]
        selected[row, chosen] = True
    labels[~selected] = -100
    draw = torch.rand(ids.shape)
    ids[selected & (draw < 0.8)] = mask_token_id
    randomise = selected & (draw >= 0.8) & (draw < 0.9)
    ids[randomise] = torch.randint(vocab_size, ids.shape)[randomise]
    return ids, labels


def not_implemented(*args, **kwargs):
    raise NotImplementedError


def test_mask_tokens_accepts_correct_implementations():
    assert check.mask_tokens(mask_tokens_factory(), raise_on_failure=False).status == PASSED
    assert check.mask_tokens(mask_tokens_exact_count, raise_on_failure=False).status == PASSED


def test_mask_tokens_stub_is_not_implemented():
    assert check.mask_tokens(not_implemented, raise_on_failure=False).status == NOT_IMPLEMENTED


def _wrong_in_place(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    ids, labels = mask_tokens_factory()(
        input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability
    )
    input_ids.copy_(ids)  # overwrites the caller's tensor
    return ids, labels


def _wrong_returns_float_labels(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    ids, labels = mask_tokens_factory()(
        input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability
    )
    return ids, labels.float()


WRONG_MASKING = {
    "masks_everything": mask_tokens_factory(select_all=True),
    "masks_special_tokens": mask_tokens_factory(select_special=True),
    "all_selected_become_mask": mask_tokens_factory(p_mask=1.0),
    "80_2_18_split": mask_tokens_factory(p_random_of_rest=0.1),
    "70_15_15_split": mask_tokens_factory(p_mask=0.7),
    "no_unchanged_share": mask_tokens_factory(p_random_of_rest=1.0),
    "labels_not_minus_100": mask_tokens_factory(labels_everywhere=True),
    "unselected_label_zero": mask_tokens_factory(unselected_label=0),
    "labels_hold_masked_ids": mask_tokens_factory(labels_after_masking=True),
    "random_token_always_unk": mask_tokens_factory(random_fixed_id=1),
    "ignores_mlm_probability": mask_tokens_factory(fixed_probability=0.15),
    "modifies_input_in_place": _wrong_in_place,
    "float_labels": _wrong_returns_float_labels,
}


@pytest.mark.parametrize("wrong", WRONG_MASKING.values(), ids=WRONG_MASKING.keys())
def test_mask_tokens_rejects_wrong_implementations(wrong):
    result = check.mask_tokens(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.message


# ---------------------------------------------------------------------------------------
# Exercise 6.2: the training step
# ---------------------------------------------------------------------------------------


def train_step_factory(
    set_train: bool = True,
    zero_grad: bool = True,
    zero_grad_at_end: bool = False,
    clip: str = "before_step",  # "before_step", "none", "after_step", "constant"
    step_optimizer: bool = True,
    scheduler_step: str = "after",  # "after", "before", "none", "twice"
    return_tensor: bool = False,
    move_batch: bool = True,
):
    """A correct training step by default; each flag injects one typical mistake."""

    def train_step(model, batch, optimizer, scheduler, max_grad_norm=1.0):
        if set_train:
            model.train()
        if move_batch:
            device = next(model.parameters()).device
            batch = {k: v.to(device) for k, v in batch.items()}
        if zero_grad and not zero_grad_at_end:
            optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        if clip == "before_step":
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        elif clip == "constant":
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scheduler_step == "before":
            scheduler.step()
        if step_optimizer:
            optimizer.step()
        if clip == "after_step":
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        if scheduler_step in ("after", "twice"):
            scheduler.step()
        if scheduler_step == "twice":
            scheduler.step()
        if zero_grad and zero_grad_at_end:
            optimizer.zero_grad()
        return loss if return_tensor else loss.item()

    return train_step


def test_train_step_accepts_correct_implementations():
    assert check.train_step(train_step_factory(), raise_on_failure=False).status == PASSED
    # zeroing the gradients after the update (the Hugging Face examples' style) is also right
    result = check.train_step(train_step_factory(zero_grad_at_end=True), raise_on_failure=False)
    assert result.status == PASSED


def test_train_step_stub_is_not_implemented():
    assert check.train_step(not_implemented, raise_on_failure=False).status == NOT_IMPLEMENTED


WRONG_TRAIN_STEPS = {
    "forgets_zero_grad": train_step_factory(zero_grad=False),
    "forgets_model_train": train_step_factory(set_train=False),
    "no_gradient_clipping": train_step_factory(clip="none"),
    "clips_after_optimizer_step": train_step_factory(clip="after_step"),
    "ignores_max_grad_norm": train_step_factory(clip="constant"),
    "scheduler_not_stepped": train_step_factory(scheduler_step="none"),
    "scheduler_stepped_before_optimizer": train_step_factory(scheduler_step="before"),
    "scheduler_stepped_twice": train_step_factory(scheduler_step="twice"),
    "no_optimizer_step": train_step_factory(step_optimizer=False),
    "returns_loss_tensor": train_step_factory(return_tensor=True),
    "batch_not_moved_to_the_model_device": train_step_factory(move_batch=False),
}


@pytest.mark.parametrize("wrong", WRONG_TRAIN_STEPS.values(), ids=WRONG_TRAIN_STEPS.keys())
def test_train_step_rejects_wrong_implementations(wrong):
    result = check.train_step(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.message


def test_train_step_unmoved_batch_is_named():
    result = check.train_step(train_step_factory(move_batch=False), raise_on_failure=False)
    assert "without moving it to the model's device" in result.message


# ---------------------------------------------------------------------------------------
# Exercise 6.3: evaluation
# ---------------------------------------------------------------------------------------


def evaluate_factory(
    set_eval: bool = True,
    no_grad: bool = True,
    mean_of_batches: bool = False,
    count_ignored: bool = False,
    first_batch_only: bool = False,
    percentage: bool = False,
    dataset_denominator: bool = False,
    restore_train_mode: bool = False,
):
    """A correct evaluation by default; each flag injects one typical mistake."""

    def evaluate_accuracy(model, loader, device):
        if set_eval:
            model.eval()
        correct = total = 0
        batch_accuracies = []
        with torch.set_grad_enabled(not no_grad):
            for batch in loader:
                batch = {k: v.to(device) for k, v in batch.items()}
                labels = batch.pop("labels")
                predictions = model(**batch).logits.argmax(dim=-1)
                valid = (
                    torch.ones_like(labels, dtype=torch.bool) if count_ignored else labels != -100
                )
                batch_correct = int(((predictions == labels) & valid).sum())
                correct += batch_correct
                total += int(valid.sum())
                batch_accuracies.append(batch_correct / int(valid.sum()))
                if first_batch_only:
                    break
        if restore_train_mode:
            model.train()
        if mean_of_batches:
            accuracy = sum(batch_accuracies) / len(batch_accuracies)
        elif dataset_denominator:
            accuracy = correct / len(loader.dataset)
        else:
            accuracy = correct / total
        return 100 * accuracy if percentage else accuracy

    return evaluate_accuracy


def test_evaluate_accepts_correct_implementation():
    assert check.evaluate_accuracy(evaluate_factory(), raise_on_failure=False).status == PASSED


def test_evaluate_stub_is_not_implemented():
    assert (
        check.evaluate_accuracy(not_implemented, raise_on_failure=False).status == NOT_IMPLEMENTED
    )


WRONG_EVALUATIONS = {
    "evaluates_in_train_mode": evaluate_factory(set_eval=False),
    "records_gradients": evaluate_factory(no_grad=False),
    "mean_of_batch_accuracies": evaluate_factory(mean_of_batches=True),
    "counts_ignored_labels": evaluate_factory(count_ignored=True),
    "first_batch_only": evaluate_factory(first_batch_only=True),
    "returns_percentage": evaluate_factory(percentage=True),
    "divides_by_examples_not_labels": evaluate_factory(dataset_denominator=True),
    "leaves_the_model_in_train_mode": evaluate_factory(restore_train_mode=True),
}


@pytest.mark.parametrize("wrong", WRONG_EVALUATIONS.values(), ids=WRONG_EVALUATIONS.keys())
def test_evaluate_rejects_wrong_implementations(wrong):
    result = check.evaluate_accuracy(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.message


def test_evaluate_train_mode_left_is_named():
    result = check.evaluate_accuracy(
        evaluate_factory(restore_train_mode=True), raise_on_failure=False
    )
    assert "left the model in train mode" in result.message


def test_exported_versions_in_course_nn_pass():
    """The solution notebook's exports (course.nn) satisfy the checks too."""
    nn_module = pytest.importorskip("course.nn")
    if not hasattr(nn_module, "train_step"):
        pytest.skip("course.nn not generated from notebook 06 yet")
    assert check.train_step(nn_module.train_step, raise_on_failure=False).status == PASSED
    assert (
        check.evaluate_accuracy(nn_module.evaluate_accuracy, raise_on_failure=False).status
        == PASSED
    )
