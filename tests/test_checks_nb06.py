"""Power of the notebook-06 checks: the reference passes, the stub and typical mistakes fail."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course.checks import nb06 as check
from course.framework.check import FAILED, NOT_IMPLEMENTED, PASSED

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
        on = {"device": ids.device}  # every new tensor on the device of the inputs
        probability = fixed_probability if fixed_probability is not None else mlm_probability
        probabilities = torch.full(ids.shape, 1.0 if select_all else probability, **on)
        if not select_special:
            probabilities.masked_fill_(special_tokens_mask, 0.0)
        selected = torch.bernoulli(probabilities).bool()
        if not labels_everywhere:
            labels[~selected] = unselected_label
        to_mask = torch.bernoulli(torch.full(ids.shape, p_mask, **on)).bool() & selected
        ids[to_mask] = mask_token_id
        randomise = (
            torch.bernoulli(torch.full(ids.shape, p_random_of_rest, **on)).bool()
            & selected
            & ~to_mask
        )
        if random_fixed_id is None:
            random_ids = torch.randint(vocab_size, ids.shape, dtype=torch.long, **on)
        else:
            random_ids = torch.full(ids.shape, random_fixed_id, dtype=torch.long, **on)
        ids[randomise] = random_ids[randomise]
        if labels_after_masking:
            labels = torch.where(selected, ids, torch.full_like(ids, -100))
        return ids, labels

    return mask_tokens


def mask_tokens_exact_count(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    """The original BERT's create_pretraining_data picks round(15%) of each sequence's tokens
    exactly: right for BERT, wrong for this exercise, whose text selects "each ordinary token
    independently" (state kept between calls)."""
    device = input_ids.device
    ids, labels = input_ids.clone(), input_ids.clone()
    selected = torch.zeros_like(special_tokens_mask)
    for row in range(ids.shape[0]):
        candidates = (~special_tokens_mask[row]).nonzero().flatten()
        count = round(mlm_probability * len(candidates))
        chosen = candidates[torch.randperm(len(candidates), device=device)[:count]]
        selected[row, chosen] = True
    labels[~selected] = -100
    draw = torch.rand(ids.shape, device=device)
    ids[selected & (draw < 0.8)] = mask_token_id
    randomise = selected & (draw >= 0.8) & (draw < 0.9)
    ids[randomise] = torch.randint(vocab_size, ids.shape, device=device)[randomise]
    return ids, labels


def mask_tokens_hf_collator(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    """Hugging Face's DataCollatorForLanguageModeling.torch_mask_tokens, glued at the interface."""
    labels = input_ids.clone()
    inputs = input_ids.clone()
    probability_matrix = torch.full(labels.shape, mlm_probability, device=labels.device)
    probability_matrix.masked_fill_(special_tokens_mask, value=0.0)
    masked_indices = torch.bernoulli(probability_matrix).bool()
    labels[~masked_indices] = -100
    indices_replaced = (
        torch.bernoulli(torch.full(labels.shape, 0.8, device=labels.device)).bool() & masked_indices
    )
    inputs[indices_replaced] = mask_token_id
    indices_random = (
        torch.bernoulli(torch.full(labels.shape, 0.5, device=labels.device)).bool()
        & masked_indices
        & ~indices_replaced
    )
    random_words = torch.randint(vocab_size, labels.shape, dtype=torch.long, device=labels.device)
    inputs[indices_random] = random_words[indices_random]
    return inputs, labels


def mask_tokens_where(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    """Also correct: one uniform draw per decision, written with torch.where (no indexing)."""
    selected = (torch.rand_like(input_ids, dtype=torch.float) < mlm_probability) & ~(
        special_tokens_mask
    )
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    draw = torch.rand_like(input_ids, dtype=torch.float)
    masked = torch.where(
        selected & (draw < 0.8), torch.full_like(input_ids, mask_token_id), input_ids
    )
    random_ids = torch.randint_like(input_ids, vocab_size)
    masked = torch.where(selected & (draw >= 0.8) & (draw < 0.9), random_ids, masked)
    return masked, labels


def not_implemented(*args, **kwargs):
    raise NotImplementedError


def mask_tokens_rows_reading_values(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    """Also right, row by row, reading values (.any(), .item()): the meta device cannot run it,
    which must give no verdict rather than a failure."""
    device = input_ids.device
    ids, labels = input_ids.clone(), torch.full_like(input_ids, -100)
    for row in range(ids.shape[0]):
        ordinary = ~special_tokens_mask[row]
        if not ordinary.any():
            continue
        selected = (torch.rand(ids.shape[1], device=device) < mlm_probability) & ordinary
        labels[row, selected] = input_ids[row, selected]
        draw = torch.rand(ids.shape[1], device=device)
        ids[row, selected & (draw < 0.8)] = mask_token_id
        randomise = selected & (draw >= 0.8) & (draw < 0.9)
        count = int(randomise.sum().item())
        ids[row, randomise] = torch.randint(vocab_size, (count,), device=device)
    return ids, labels


RIGHT_MASKING = {
    "rows_reading_values": mask_tokens_rows_reading_values,
    "factory": mask_tokens_factory(),
    "hf_collator": mask_tokens_hf_collator,
    "torch_where": mask_tokens_where,
}


@pytest.mark.parametrize("right", RIGHT_MASKING.values(), ids=RIGHT_MASKING.keys())
def test_mask_tokens_accepts_correct_implementations(right):
    result = check.mask_tokens(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


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


def _wrong_reuses_the_special_mask(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    """Turns the caller's special-token mask into its 'ordinary' mask in place."""
    ordinary = special_tokens_mask.logical_not_()
    probabilities = ordinary.float() * mlm_probability
    ids, labels = input_ids.clone(), input_ids.clone()
    selected = torch.bernoulli(probabilities).bool()
    labels[~selected] = -100
    draw = torch.rand(ids.shape, device=ids.device)
    ids[selected & (draw < 0.8)] = mask_token_id
    randomise = selected & (draw >= 0.8) & (draw < 0.9)
    ids[randomise] = torch.randint(vocab_size, ids.shape, device=ids.device)[randomise]
    return ids, labels


def _wrong_labels_on_the_cpu(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    """Starts the labels from torch.full without a device: on a GPU they stay on the CPU."""
    device = input_ids.device
    probabilities = torch.full(input_ids.shape, mlm_probability, device=device)
    probabilities[special_tokens_mask] = 0.0
    selected = torch.bernoulli(probabilities).bool()
    labels = torch.full(input_ids.shape, -100)
    labels[selected] = input_ids[selected]
    ids = input_ids.clone()
    draw = torch.rand(ids.shape, device=device)
    ids[selected & (draw < 0.8)] = mask_token_id
    randomise = selected & (draw >= 0.8) & (draw < 0.9)
    ids[randomise] = torch.randint(vocab_size, ids.shape, device=device)[randomise]
    return ids, labels


def _wrong_switches_off_gradients(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    """Turns gradient tracking off for good ("no gradients needed here")."""
    torch.set_grad_enabled(False)
    return mask_tokens_factory()(
        input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability
    )


def _wrong_thresholds_fixed_at_15_percent(
    input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
):
    """One uniform draw cut at 12% / 13.5% (right only for mlm_probability=0.15)."""
    draw = torch.rand(input_ids.shape, device=input_ids.device)
    draw = draw.masked_fill(special_tokens_mask, 1.0)
    selected = draw < mlm_probability
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    ids = torch.where(draw < 0.12, torch.full_like(input_ids, mask_token_id), input_ids)
    random_ids = torch.randint_like(input_ids, vocab_size)
    ids = torch.where((draw >= 0.12) & (draw < 0.135), random_ids, ids)
    return ids, labels


WRONG_MASKING = {
    "exact_count_per_row": mask_tokens_exact_count,
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
    "reuses_the_special_mask_in_place": _wrong_reuses_the_special_mask,
    "labels_created_on_the_cpu": _wrong_labels_on_the_cpu,
    "switches_off_gradients": _wrong_switches_off_gradients,
    "thresholds_fixed_at_15_percent": _wrong_thresholds_fixed_at_15_percent,
}

# One wrong implementation per property family that only that property catches (the old check
# accepted each of them), with a phrase of the expected message.
MASKING_FAMILIES = {
    "inputs untouched": (_wrong_reuses_the_special_mask, "inputs untouched"),
    "device": (_wrong_labels_on_the_cpu, "property violated: device"),
    "global state": (_wrong_switches_off_gradients, "global state unchanged"),
    "several cases (0.3)": (_wrong_thresholds_fixed_at_15_percent, "mlm_probability=0.3"),
}


@pytest.mark.parametrize(
    ("wrong", "phrase"), MASKING_FAMILIES.values(), ids=MASKING_FAMILIES.keys()
)
def test_mask_tokens_names_the_property(wrong, phrase):
    result = check.mask_tokens(wrong, raise_on_failure=False)
    assert result.status == FAILED and phrase in result.message, result.message


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
    move_batch: str = "new_dict",  # "new_dict", "none", "in_place"
    loss: str = "model",  # "model", "cross_entropy_flat", "cross_entropy_sequence_only"
):
    """A correct training step by default; each flag injects one typical mistake."""

    def train_step(model, batch, optimizer, scheduler, max_grad_norm=1.0):
        if set_train == "attribute":
            model.training = True
        elif set_train:
            model.train()
        device = next(model.parameters()).device
        if move_batch == "new_dict":
            batch = {k: v.to(device) for k, v in batch.items()}
        elif move_batch == "in_place":
            for key in batch:
                batch[key] = batch[key].to(device)
        if zero_grad and not zero_grad_at_end:
            optimizer.zero_grad()
        if loss == "model":
            value = model(**batch).loss
        else:
            inputs = dict(batch)
            labels = inputs.pop("labels")
            logits = model(**inputs).logits
            if loss == "cross_entropy_flat":
                value = nn.functional.cross_entropy(
                    logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100
                )
            else:
                value = nn.functional.cross_entropy(logits, labels)
        loss_ = value
        loss_.backward()
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
        return loss_ if return_tensor else loss_.item()

    return train_step


def train_step_hf_no_trainer(model, batch, optimizer, scheduler, max_grad_norm=1.0):
    """The loop body of Hugging Face's run_glue_no_trainer.py (accelerate replaced by plain
    calls), glued at the interface."""
    model.train()
    batch = {k: v.to(next(model.parameters()).device) for k, v in batch.items()}
    outputs = model(**batch)
    loss = outputs.loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss)


RIGHT_TRAIN_STEPS = {
    "reference": train_step_factory(),
    # zeroing the gradients after the update (the Hugging Face examples' style) is also right
    "zero_grad_at_end": train_step_factory(zero_grad_at_end=True),
    "cross_entropy_flattened": train_step_factory(loss="cross_entropy_flat"),
    "hf_no_trainer": train_step_hf_no_trainer,
}


@pytest.mark.parametrize("right", RIGHT_TRAIN_STEPS.values(), ids=RIGHT_TRAIN_STEPS.keys())
def test_train_step_accepts_correct_implementations(right):
    result = check.train_step(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


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
    "batch_not_moved_to_the_model_device": train_step_factory(move_batch="none"),
    "training_flag_of_the_top_module_only": train_step_factory(set_train="attribute"),
    "moves_the_callers_batch_in_place": train_step_factory(move_batch="in_place"),
    "loss_for_sequence_labels_only": train_step_factory(loss="cross_entropy_sequence_only"),
}

# One wrong implementation per property family that only that property catches (the old check
# accepted each of them), with a phrase of the expected message.
TRAIN_STEP_FAMILIES = {
    "training mode in every sub-module": (
        train_step_factory(set_train="attribute"),
        "training mode, in every sub-module",
    ),
    "inputs untouched": (train_step_factory(move_batch="in_place"), "inputs untouched"),
    "shapes (token labels, batch of 1)": (
        train_step_factory(loss="cross_entropy_sequence_only"),
        "token classifier",
    ),
}


@pytest.mark.parametrize(
    ("wrong", "phrase"), TRAIN_STEP_FAMILIES.values(), ids=TRAIN_STEP_FAMILIES.keys()
)
def test_train_step_names_the_property(wrong, phrase):
    result = check.train_step(wrong, raise_on_failure=False)
    assert result.status == FAILED and phrase in result.message, result.message


@pytest.mark.parametrize("wrong", WRONG_TRAIN_STEPS.values(), ids=WRONG_TRAIN_STEPS.keys())
def test_train_step_rejects_wrong_implementations(wrong):
    result = check.train_step(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.message


# Independently written steps, each one of the spec's named mistakes (nb06.STEP_MISTAKES).
NAMED_TRAIN_STEPS = {
    "forgets_zero_grad": "gradients never cleared",
    "no_gradient_clipping": "the gradient not rescaled",
    "clips_after_optimizer_step": "the gradient not rescaled",
    "ignores_max_grad_norm": "clipping to 1.0",
    "scheduler_stepped_before_optimizer": "the scheduler advanced before the update",
    "scheduler_stepped_twice": "the scheduler advanced twice",
}


@pytest.mark.parametrize("name", NAMED_TRAIN_STEPS)
def test_train_step_names_a_known_mistake_in_code_written_independently(name):
    result = check.train_step(WRONG_TRAIN_STEPS[name], raise_on_failure=False)
    assert result.status == FAILED and NAMED_TRAIN_STEPS[name] in (result.mistake or ""), (
        result.message
    )


def test_train_step_unmoved_batch_is_named():
    result = check.train_step(train_step_factory(move_batch="none"), raise_on_failure=False)
    assert "not moved to the model's device" in result.message
    assert "property violated: device" in result.message


def test_train_step_hint_does_not_give_the_answer():
    result = check.train_step(train_step_factory(clip="none"), raise_on_failure=False)
    assert "clip_grad_norm_" not in (result.hint or "") and "max_grad_norm" in result.hint
    assert "zero_grad" not in (check.train_step.hint or "")


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
    move_batch: bool = True,
    grad_switch: bool = False,
):
    """A correct evaluation by default; each flag injects one typical mistake."""

    def evaluate_accuracy(model, loader, device):
        if set_eval == "attribute":
            model.training = False
        elif set_eval:
            model.eval()
        if grad_switch:
            torch.set_grad_enabled(False)  # and never switched back on
        correct = total = 0
        batch_accuracies = []
        with torch.set_grad_enabled(not no_grad and not grad_switch):
            for batch in loader:
                if move_batch:
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


def evaluate_inference_mode_tensors(model, loader, device):
    """Also right: inference mode, labels passed to the model, tensor counts, .item() at the end."""
    model.eval()
    correct = torch.zeros((), dtype=torch.long)
    total = torch.zeros((), dtype=torch.long)
    with torch.inference_mode():
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            mask = batch["labels"].ne(-100)
            correct += (predictions.eq(batch["labels"]) & mask).sum()
            total += mask.sum()
    return (correct / total).item()


RIGHT_EVALUATIONS = {
    "reference": evaluate_factory(),
    "inference_mode_tensors": evaluate_inference_mode_tensors,
}


@pytest.mark.parametrize("right", RIGHT_EVALUATIONS.values(), ids=RIGHT_EVALUATIONS.keys())
def test_evaluate_accepts_correct_implementation(right):
    result = check.evaluate_accuracy(right, raise_on_failure=False)
    assert result.status == PASSED, result.message


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
    "batch_not_moved_to_device": evaluate_factory(move_batch=False),
    "switches_gradients_off_for_good": evaluate_factory(grad_switch=True),
    "eval_flag_of_the_top_module_only": evaluate_factory(set_eval="attribute"),
}

# One wrong implementation per property family that only that property catches (the old check
# accepted the first two), with a phrase of the expected message.
EVALUATION_FAMILIES = {
    "global state": (evaluate_factory(grad_switch=True), "global state unchanged"),
    "device": (evaluate_factory(move_batch=False), "property violated: device"),
    "eval mode in every sub-module": (
        evaluate_factory(set_eval="attribute"),
        "eval mode, in every sub-module",
    ),
    "no gradient recorded": (evaluate_factory(no_grad=False), "no gradient recorded"),
}


@pytest.mark.parametrize(
    ("wrong", "phrase"), EVALUATION_FAMILIES.values(), ids=EVALUATION_FAMILIES.keys()
)
def test_evaluate_names_the_property(wrong, phrase):
    result = check.evaluate_accuracy(wrong, raise_on_failure=False)
    assert result.status == FAILED and phrase in result.message, result.message


@pytest.mark.parametrize("wrong", WRONG_EVALUATIONS.values(), ids=WRONG_EVALUATIONS.keys())
def test_evaluate_rejects_wrong_implementations(wrong):
    result = check.evaluate_accuracy(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.message


def test_evaluate_train_mode_left_is_named():
    result = check.evaluate_accuracy(
        evaluate_factory(restore_train_mode=True), raise_on_failure=False
    )
    assert result.mistake == "the model put back in training mode", result.message


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


# ---------------------------------------------------------------------------------------
# Wrong implementations written independently of the checks, one table per family (each
# breaks a sentence of its exercise's text), and right variants from the field's code.
# tests/README: the OLD checks (git show ab7a046~1:course/checks/nb06.py) passed the ones
# marked "old: passed".
# ---------------------------------------------------------------------------------------


def _masking(select=None, decide=None, draw=None):
    """A masking function from its three decisions (right ones by default): ``select(p, ids,
    special)`` -> bool mask, ``decide(ids)`` -> uniform draws for 80/10/10, ``draw(vocab, ids)``
    -> random ids."""

    def mask_tokens(
        input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15
    ):
        on = {"device": input_ids.device}
        if select is None:
            chosen = torch.rand(input_ids.shape, **on) < mlm_probability
        else:
            chosen = select(mlm_probability, input_ids, special_tokens_mask)
        chosen = chosen & ~special_tokens_mask
        u = torch.rand(input_ids.shape, **on) if decide is None else decide(input_ids)
        random_ids = (
            torch.randint(vocab_size, input_ids.shape, **on)
            if draw is None
            else draw(vocab_size, input_ids)
        )
        masked = torch.where(chosen & (u < 0.8), mask_token_id, input_ids)
        masked = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, masked)
        return masked, torch.where(chosen, input_ids, -100)

    return mask_tokens


def _row_loop_random_ids_on_cpu(input_ids, special_tokens_mask, mask_token_id, vocab_size,
                                mlm_probability=0.15):  # fmt: skip
    """Row by row, reading counts with .item(): the random ids are made without a device."""
    masked, labels = input_ids.clone(), torch.full_like(input_ids, -100)
    for r in range(input_ids.shape[0]):
        chosen = torch.rand(input_ids.shape[1], device=input_ids.device) < mlm_probability
        chosen &= ~special_tokens_mask[r]
        labels[r, chosen] = input_ids[r, chosen]
        u = torch.rand(input_ids.shape[1], device=input_ids.device)
        masked[r, chosen & (u < 0.8)] = mask_token_id
        rand = chosen & (u >= 0.8) & (u < 0.9)
        masked[r, rand] = torch.randint(vocab_size, (int(rand.sum().item()),))
    return masked, labels


def _through_numpy(input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability=0.15):
    """The HF collator's NumPy flavour: draws in NumPy, back with torch.from_numpy."""
    import numpy as np

    shape = tuple(input_ids.shape)
    chosen = torch.from_numpy(np.random.rand(*shape) < mlm_probability) & ~special_tokens_mask
    u = torch.from_numpy(np.random.rand(*shape))
    random_ids = torch.from_numpy(np.random.randint(0, vocab_size, shape))
    masked = torch.where(chosen & (u < 0.8), mask_token_id, input_ids)
    masked = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, masked)
    return masked, torch.where(chosen, input_ids, -100)


def _labels_int32(*args, **kwargs):
    masked, labels = mask_tokens_hf_collator(*args, **kwargs)
    return masked, labels.int()


def _numpy_result(*args, **kwargs):
    masked, labels = mask_tokens_hf_collator(*args, **kwargs)
    return masked.numpy(), labels.numpy()


def _default_probability_0_2(input_ids, special_tokens_mask, mask_token_id, vocab_size,
                             mlm_probability=0.2):  # fmt: skip
    return mask_tokens_hf_collator(
        input_ids, special_tokens_mask, mask_token_id, vocab_size, mlm_probability
    )


def _spans(p, ids, special):
    """Span masking: a token and its right neighbour selected together (same rate)."""
    start = torch.rand(ids.shape, device=ids.device) < p / 2
    return start | torch.roll(start, 1, dims=1)


def _rate_minus_one_point(p, ids, special):
    return torch.rand(ids.shape, device=ids.device) < p - 0.01


def _same_positions_every_row(p, ids, special):
    return (torch.rand(ids.shape[1], device=ids.device) < p).expand(ids.shape)


def _one_decision_per_row(ids):
    return torch.rand(ids.shape[0], 1, device=ids.device).expand(ids.shape)


def _split_79_11_10(ids):
    u = torch.rand(ids.shape, device=ids.device)
    return torch.where(
        u < 0.79, u * 0.8 / 0.79, torch.where(u < 0.9, 0.8 + (u - 0.79) * 0.1 / 0.11, u)
    )


MASKING_FAMILY_WRONG = {
    # 1. stated return types
    "labels_int32": _labels_int32,
    "numpy_arrays": _numpy_result,
    # 2. the device property decides (code that reads values, NumPy on the way)
    "row_loop_random_ids_on_the_cpu": _row_loop_random_ids_on_cpu,
    "drawn_in_numpy": _through_numpy,
    # 3. called as the course calls it (the default left out)
    "default_mlm_probability_0.2": _default_probability_0_2,
    # 5. statistics: the id range, independence, one-point deviations
    "random_ids_exclude_special_ids": _masking(
        draw=lambda v, ids: torch.randint(5, v, ids.shape, device=ids.device)
    ),
    "random_ids_exclude_the_last_id": _masking(
        draw=lambda v, ids: torch.randint(v - 1, ids.shape, device=ids.device)
    ),
    "random_ids_from_the_batch": _masking(
        draw=lambda v, ids: ids.flatten()[torch.randperm(ids.numel(), device=ids.device)].view(
            ids.shape
        )
    ),
    "span_selection": _masking(select=_spans),
    "same_positions_in_every_row": _masking(select=_same_positions_every_row),
    "selection_rate_one_point_low": _masking(select=_rate_minus_one_point),
    "split_79_11_10": _masking(decide=_split_79_11_10),
    "80_10_10_decided_per_row": _masking(decide=_one_decision_per_row),
}


def mask_tokens_keras_nlp_style(input_ids, special_tokens_mask, mask_token_id, vocab_size,
                                mlm_probability=0.15):  # fmt: skip
    """keras-nlp's MaskedLMMaskGenerator, glued: one uniform draw per token against the
    selection rate, then one per selected token for mask / random / unchanged."""
    device = input_ids.device
    selected = (torch.rand(input_ids.shape, device=device) < mlm_probability) & ~special_tokens_mask
    choice = torch.rand(input_ids.shape, device=device)
    mask_now = selected & (choice < 0.8)
    random_now = selected & (choice >= 0.8) & (choice < 0.9)
    out = input_ids.masked_fill(mask_now, mask_token_id)
    out[random_now] = torch.randint(0, vocab_size, (int(random_now.sum()),), device=device)
    return out, input_ids.masked_fill(~selected, -100)


@pytest.mark.parametrize("wrong", MASKING_FAMILY_WRONG.values(), ids=MASKING_FAMILY_WRONG.keys())
def test_mask_tokens_family_wrong(wrong):
    result = check.mask_tokens(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.message


def test_mask_tokens_family_right():
    assert check.mask_tokens(mask_tokens_keras_nlp_style, raise_on_failure=False).passed
    assert check.mask_tokens(_masking(), raise_on_failure=False).passed


def _step_loss_numpy(model, batch, optimizer, scheduler, max_grad_norm=1.0):
    import numpy as np

    return np.float32(train_step_factory()(model, batch, optimizer, scheduler, max_grad_norm))


def _step_loss_shape_1(model, batch, optimizer, scheduler, max_grad_norm=1.0):
    loss = train_step_factory(return_tensor=True)(model, batch, optimizer, scheduler, max_grad_norm)
    return loss.detach().reshape(1)


def _step_default_5(model, batch, optimizer, scheduler, max_grad_norm=5.0):
    return train_step_factory()(model, batch, optimizer, scheduler, max_grad_norm)


def _step_moves_all_but_labels(model, batch, optimizer, scheduler, max_grad_norm=1.0):
    model.train()
    device = next(model.parameters()).device
    batch = {k: (v if k == "labels" else v.to(device)) for k, v in batch.items()}
    optimizer.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    return loss.item()


def _step_freezes_embeddings(model, batch, optimizer, scheduler, max_grad_norm=1.0):
    """Freezes the embeddings "to save time": the text trains every weight."""
    for name, parameter in model.named_parameters():
        if "embeddings" in name:
            parameter.requires_grad_(False)
    return train_step_factory()(model, batch, optimizer, scheduler, max_grad_norm)


def _step_extra_weight_decay(model, batch, optimizer, scheduler, max_grad_norm=1.0):
    """Adds its own weight decay on top of the optimizer's (an update the text does not list)."""
    loss = train_step_factory()(model, batch, optimizer, scheduler, max_grad_norm)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1 - 1e-4)
    return loss


STEP_FAMILY_WRONG = {
    "1_loss_as_numpy_float32": _step_loss_numpy,
    "1_loss_tensor_of_shape_1": _step_loss_shape_1,
    "2_labels_left_where_they_came_from": _step_moves_all_but_labels,
    "3_default_max_grad_norm_5": _step_default_5,
    "4_freezes_the_embeddings": _step_freezes_embeddings,
    "4_extra_weight_decay": _step_extra_weight_decay,
}


def train_step_pytorch_examples_style(model, batch, optimizer, scheduler, max_grad_norm=1.0):
    """pytorch/examples' word_language_model train loop (zero_grad, backward, clip, step),
    with the scheduler step and the batch dict of Hugging Face models glued on."""
    model.train()
    device = next(model.parameters()).device
    inputs = {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}
    model.zero_grad()
    output = model(**inputs)
    output.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    return output.loss.detach().item()


@pytest.mark.parametrize("wrong", STEP_FAMILY_WRONG.values(), ids=STEP_FAMILY_WRONG.keys())
def test_train_step_family_wrong(wrong):
    result = check.train_step(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.message


def test_train_step_family_right():
    assert check.train_step(train_step_pytorch_examples_style, raise_on_failure=False).passed


def _evaluate_returns(convert):
    def evaluate_accuracy(model, loader, device):
        return convert(evaluate_factory()(model, loader, device))

    return evaluate_accuracy


def _evaluate_numpy_mean(model, loader, device):
    """Concatenates correctness flags and returns their NumPy mean (a numpy.float32)."""
    import numpy as np

    model.eval()
    flags = []
    with torch.no_grad():
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            keep = labels != -100
            flags.append((model(**batch).logits.argmax(-1) == labels)[keep].cpu().numpy())
    return np.concatenate(flags).astype(np.float32).mean()


def _evaluate_moves_inputs_only(model, loader, device):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in loader:
            labels = batch.pop("labels")
            batch = {k: v.to(device) for k, v in batch.items()}
            predictions = model(**batch).logits.argmax(-1)
            correct += int(((predictions == labels) & (labels != -100)).sum())
            total += int((labels != -100).sum())
    return correct / total


EVALUATE_FAMILY_WRONG = {
    "1_zero_dim_tensor": _evaluate_returns(lambda a: torch.tensor(a)),
    "1_numpy_float32_mean": _evaluate_numpy_mean,
    "2_labels_compared_where_they_came_from": _evaluate_moves_inputs_only,
}


def evaluate_hf_no_trainer_style(model, loader, device):
    """The evaluation loop of Hugging Face's run_glue_no_trainer.py (accelerate and `evaluate`
    replaced by counts), glued at the interface and extended to the -100 positions."""
    model.eval()
    correct, total = 0, 0
    for batch in loader:
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad():
            outputs = model(**batch)
        predictions = outputs.logits.argmax(dim=-1)
        references = batch["labels"]
        keep = references != -100
        correct += (predictions[keep] == references[keep]).sum().item()
        total += keep.sum().item()
    return correct / total


@pytest.mark.parametrize("wrong", EVALUATE_FAMILY_WRONG.values(), ids=EVALUATE_FAMILY_WRONG.keys())
def test_evaluate_family_wrong(wrong):
    result = check.evaluate_accuracy(wrong, raise_on_failure=False)
    assert result.status == FAILED, result.message


def test_evaluate_family_right():
    assert check.evaluate_accuracy(evaluate_hf_no_trainer_style, raise_on_failure=False).passed
