"""Notebook 10's checks: right variants pass (the course's solution, peft's own layer behind a thin
adapter to the stub's names, einsum, a fused F.linear, a Gaussian A), the stubs are "not
implemented", and each family of wrong answers fails with the mistake named."""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course.checks import nb10

# --- 10.1 ---------------------------------------------------------------------------------------


class LoRALinear(nn.Module):
    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__()
        self.base = base
        base.requires_grad_(False)
        self.r, self.alpha, self.scale = r, alpha, alpha / r
        like = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, **like))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, **like))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.base(x) + self.scale * (self.dropout(x) @ self.lora_A.T @ self.lora_B.T)


class PeftAdapter(nn.Module):
    """peft's own layer; its A and B registered under the stub's names (the same tensors)."""

    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__()
        from peft import LoraConfig
        from peft.tuners.lora import Linear

        config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout)
        inner = Linear(base, "default", config, r=r, lora_alpha=alpha, lora_dropout=dropout)
        base.requires_grad_(False)  # what peft's get_peft_model does for the layers it wraps
        self.lora_A = inner.lora_A["default"].weight
        self.lora_B = inner.lora_B["default"].weight
        self.inner, self.base, self.r, self.alpha, self.scale = inner, base, r, alpha, alpha / r

    def forward(self, x):
        return self.inner(x)


class Einsum(LoRALinear):
    def forward(self, x):
        update = torch.einsum("...k,rk,dr->...d", self.dropout(x), self.lora_A, self.lora_B)
        return self.base(x) + self.scale * update


class FusedLinear(LoRALinear):
    def forward(self, x):
        if self.dropout.p == 0 or not self.training:  # one matrix: W + scale B A
            weight = self.base.weight + self.scale * self.lora_B @ self.lora_A
            return F.linear(x, weight, self.base.bias)
        return self.base(x) + self.scale * F.linear(F.linear(self.dropout(x), self.lora_A), self.lora_B)


class GaussianA(LoRALinear):
    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(base, r, alpha, dropout)
        nn.init.normal_(self.lora_A, std=1 / r)  # the paper's Gaussian (peft's "gaussian")


class RandomB(LoRALinear):
    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(base, r, alpha, dropout)
        nn.init.kaiming_uniform_(self.lora_B, a=math.sqrt(5))


class ZeroA(LoRALinear):
    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(base, r, alpha, dropout)
        nn.init.zeros_(self.lora_A)


class ScaleAlpha(LoRALinear):
    def forward(self, x):
        return self.base(x) + self.alpha * (self.dropout(x) @ self.lora_A.T @ self.lora_B.T)


class NoScale(LoRALinear):
    def forward(self, x):
        return self.base(x) + self.dropout(x) @ self.lora_A.T @ self.lora_B.T


class BaseTrainable(LoRALinear):
    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(base, r, alpha, dropout)
        base.requires_grad_(True)


class BiasTrainable(LoRALinear):
    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(base, r, alpha, dropout)
        if base.bias is not None:
            base.bias.requires_grad_(True)


class DropoutOnOutput(LoRALinear):
    def forward(self, x):
        return self.dropout(self.base(x) + self.scale * (x @ self.lora_A.T @ self.lora_B.T))


class DropoutAfterB(LoRALinear):
    def forward(self, x):
        return self.base(x) + self.scale * self.dropout(x @ self.lora_A.T @ self.lora_B.T)


class NoDropout(LoRALinear):
    def forward(self, x):
        return self.base(x) + self.scale * (x @ self.lora_A.T @ self.lora_B.T)


class Transposed(LoRALinear):
    """A stored (in, r) and B (r, out): shapes other than the text's."""

    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(base, r, alpha, dropout)
        self.lora_A = nn.Parameter(self.lora_A.detach().T.clone())
        self.lora_B = nn.Parameter(self.lora_B.detach().T.clone())

    def forward(self, x):
        return self.base(x) + self.scale * (self.dropout(x) @ self.lora_A @ self.lora_B)


class DeepCopiedBase(LoRALinear):
    """A copy of the caller's layer wrapped and frozen; the caller's own stays trainable."""

    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(copy.deepcopy(base).requires_grad_(True), r, alpha, dropout)


class OnTheCPU(LoRALinear):
    """A and B made with torch.empty / torch.zeros: on the CPU and in float32 whatever the base."""

    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(base, r, alpha, dropout)
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))


class FollowsDtypeOnly(LoRALinear):
    """A and B in the base's dtype, but on the CPU."""

    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(base, r, alpha, dropout)
        dtype = base.weight.dtype
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, dtype=dtype))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, dtype=dtype))


class LoralibLinear(nn.Linear):
    """microsoft/LoRA's ``loralib.layers.Linear`` (MIT licence, commit c4593f0), the parts the
    exercise uses, unchanged: its own weight, dropout only when p > 0, A and B merged into the
    weight by ``eval()`` and taken out again by ``train()``, which returns None."""

    def __init__(self, in_features, out_features, r=0, lora_alpha=1, lora_dropout=0.0,
                 merge_weights=True, **kwargs):
        nn.Linear.__init__(self, in_features, out_features, **kwargs)
        self.r, self.lora_alpha = r, lora_alpha
        self.lora_dropout = nn.Dropout(p=lora_dropout) if lora_dropout > 0.0 else (lambda x: x)
        self.merged, self.merge_weights = False, merge_weights
        self.lora_A = nn.Parameter(self.weight.new_zeros((r, in_features)))
        self.lora_B = nn.Parameter(self.weight.new_zeros((out_features, r)))
        self.scaling = self.lora_alpha / self.r
        self.weight.requires_grad = False
        nn.Linear.reset_parameters(self)
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B)

    def train(self, mode=True):
        nn.Linear.train(self, mode)
        if mode:
            if self.merge_weights and self.merged:
                self.weight.data -= (self.lora_B @ self.lora_A) * self.scaling
                self.merged = False
        elif self.merge_weights and not self.merged:
            self.weight.data += (self.lora_B @ self.lora_A) * self.scaling
            self.merged = True

    def forward(self, x):
        if self.r > 0 and not self.merged:
            result = F.linear(x, self.weight, bias=self.bias)
            result += (self.lora_dropout(x) @ self.lora_A.transpose(0, 1)
                       @ self.lora_B.transpose(0, 1)) * self.scaling
            return result
        return F.linear(x, self.weight, bias=self.bias)


class Loralib(LoralibLinear):
    """loralib's layer glued to the exercise's interface only, as loralib is used: the
    pretrained weights loaded into it, ``mark_only_lora_as_trainable``'s freezing, ``base``
    kept (frozen), the scale under the text's name. Its ``train()`` still returns None."""

    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__(base.in_features, base.out_features, r=r, lora_alpha=alpha,
                         lora_dropout=dropout, bias=base.bias is not None,
                         device=base.weight.device, dtype=base.weight.dtype)
        self.load_state_dict(base.state_dict(), strict=False)
        for name, parameter in self.named_parameters():
            parameter.requires_grad_("lora_" in name)
        self.base = base.requires_grad_(False)
        self.alpha, self.scale = alpha, alpha / r


class Stub(nn.Module):
    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__()
        raise NotImplementedError

    def forward(self, x):
        raise NotImplementedError


LORA_RIGHT = {
    "the course's solution": LoRALinear,
    "peft's layer behind a thin adapter": PeftAdapter,
    "einsum": Einsum,
    "a fused F.linear": FusedLinear,
    "A from a Gaussian (the paper)": GaussianA,
    "microsoft/LoRA's loralib layer, glued at the interface": Loralib,
}
LORA_WRONG = {
    "B initialised at random": (RandomB, "B initialised at random"),
    "A zero": (ZeroA, "lora_A is not drawn at random"),
    "scale alpha instead of alpha/r": (ScaleAlpha, "scaled by alpha instead of alpha/r"),
    "no scale": (NoScale, "not scaled"),
    "the base weight left trainable": (BaseTrainable, "base weight left trainable"),
    "the base bias left trainable": (
        BiasTrainable, "`base.bias` is still trainable: the base bias left trainable"),
    "a deep copy of the base wrapped": (DeepCopiedBase, "is not the nn.Linear passed in"),
    "A and B made on the CPU in float32": (OnTheCPU, "lora_A and lora_B not float64"),
    "A and B in the base's dtype, on the CPU": (FollowsDtypeOnly, "stayed on the CPU"),
    "dropout on the whole output": (DropoutOnOutput, "dropout is applied to the whole output"),
    "dropout after B": (DropoutAfterB, "after B"),
    "no dropout": (NoDropout, "nothing was dropped"),
    "A and B transposed": (Transposed, "has shape"),
}


# --- 10.2 ---------------------------------------------------------------------------------------


def _replace(model, names, make):
    for name in names:
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, child, make(getattr(owner, child)))


def _add(layer_class, model, targets, r, alpha, dropout=0.0):
    """The course's add_lora with ``layer_class`` in place of LoRALinear."""
    model.requires_grad_(False)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)
             and n.split(".")[-1] in targets and not n.startswith("classifier")]
    _replace(model, names, lambda layer: layer_class(layer, r, alpha, dropout))
    model.classifier.requires_grad_(True)
    return model


add_lora = functools.partial(_add, LoRALinear)


def add_lora_peft_style(model, targets, r, alpha, dropout=0.0):
    """peft's matching rule (the key ends with ".target"), the head frozen then unfrozen."""
    for parameter in model.parameters():
        parameter.requires_grad = False
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)
             and any(n.endswith(f".{t}") for t in targets) and n != "classifier"]
    _replace(model, names, lambda layer: PeftAdapter(layer, r, alpha, dropout))
    for parameter in model.classifier.parameters():
        parameter.requires_grad = True
    return model


def lora_everywhere(model, targets, r, alpha, dropout=0.0):
    model.requires_grad_(False)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    _replace(model, names, lambda layer: LoRALinear(layer, r, alpha, dropout))
    return model


def head_frozen(model, targets, r, alpha, dropout=0.0):
    add_lora(model, targets, r, alpha, dropout)
    model.classifier.requires_grad_(False)
    return model


def nothing_frozen(model, targets, r, alpha, dropout=0.0):
    add_lora(model, targets, r, alpha, dropout)
    for name, parameter in model.named_parameters():
        if "embeddings" in name or "LayerNorm" in name:
            parameter.requires_grad_(True)
    return model


def returns_nothing(model, targets, r, alpha, dropout=0.0):
    add_lora(model, targets, r, alpha, dropout)


random_b_in_model = functools.partial(_add, RandomB)


def head_not_excluded(model, targets, r, alpha, dropout=0.0):
    """Every targeted layer wrapped, the head too when targets name it."""
    model.requires_grad_(False)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)
             and n.split(".")[-1] in targets]
    _replace(model, names, lambda layer: LoRALinear(layer, r, alpha, dropout))
    model.classifier.requires_grad_(True)
    return model


def any_part(model, targets, r, alpha, dropout=0.0):
    """A target matched against every part of the name, not its last one."""
    model.requires_grad_(False)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)
             and set(n.split(".")) & set(targets) and n != "classifier"]
    _replace(model, names, lambda layer: LoRALinear(layer, r, alpha, dropout))
    model.classifier.requires_grad_(True)
    return model


def substring(model, targets, r, alpha, dropout=0.0):
    """A target matched as a piece of the dotted name."""
    model.requires_grad_(False)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)
             and any(t in n for t in targets) and n != "classifier"]
    _replace(model, names, lambda layer: LoRALinear(layer, r, alpha, dropout))
    model.classifier.requires_grad_(True)
    return model


def dropout_dropped(model, targets, r, alpha, dropout=0.0):
    return add_lora(model, targets, r, alpha)


def lora_frozen(model, targets, r, alpha, dropout=0.0):
    """The head unfrozen, but the LoRA weights frozen with the rest (frozen after wrapping)."""
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)
             and n.split(".")[-1] in targets and n != "classifier"]
    _replace(model, names, lambda layer: LoRALinear(layer, r, alpha, dropout))
    model.requires_grad_(False)
    model.classifier.requires_grad_(True)
    return model


deep_copies = functools.partial(_add, lambda layer, *a: LoRALinear(copy.deepcopy(layer), *a))


class Holder(nn.Module):
    """A right layer that keeps the wrapped nn.Linear under another name than ``base``."""

    def __init__(self, layer, r, alpha, dropout=0.0):
        super().__init__()
        self.inner = LoRALinear(layer, r, alpha, dropout)
        self.lora_A, self.lora_B = self.inner.lora_A, self.inner.lora_B

    def forward(self, x):
        return self.inner(x)


def add_lora_holder(model, targets, r, alpha, dropout=0.0):
    model.requires_grad_(False)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)
             and n.split(".")[-1] in targets and n != "classifier"]
    for name in names:
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent)
        holder = Holder(getattr(owner, child), r, alpha, dropout)
        setattr(owner, child, holder)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith("classifier") or name.endswith(("lora_A", "lora_B")))
    return model


def stub(*args, **kwargs):
    raise NotImplementedError


ADD_RIGHT = {
    "the course's solution": add_lora,
    "peft's rule and layer": add_lora_peft_style,
    "its own layer, the Linear kept under another name": add_lora_holder,
}
ADD_WRONG = {
    "LoRA on the head": (lora_everywhere, "LoRA on the head"),
    "the head frozen": (head_frozen, "the head `classifier` does not train"),
    "the head wrapped when targets name it": (head_not_excluded, "LoRA on the head"),
    "a target matched against every part of the name": (any_part, "non-final part"),
    "a target matched as a piece of the name": (substring, "non-final part"),
    "the dropout argument not passed on": (dropout_dropped, "dropout argument did not reach"),
    "the LoRA weights frozen": (lora_frozen, "do not train: lora_A and lora_B"),
    "a copy of each layer wrapped": (deep_copies, "does not hold the model's own nn.Linear"),
    "embeddings left trainable": (nothing_frozen, "still train"),
    "the model not returned": (returns_nothing, "did not return"),
    "B random: the outputs change": (random_b_in_model, "the logits right after it"),
}


# --- 10.3 ---------------------------------------------------------------------------------------


@torch.no_grad()
def merge(layer):
    layer.base.weight += layer.scale * (layer.lora_B @ layer.lora_A)
    return layer.base


@torch.no_grad()
def unmerge(layer):
    layer.base.weight -= layer.scale * (layer.lora_B @ layer.lora_A)


def merge_data(layer):  # through .data, alpha / r recomputed: as right
    layer.base.weight.data.add_(layer.lora_B.data @ layer.lora_A.data, alpha=layer.alpha / layer.r)
    return layer.base


def unmerge_data(layer):
    layer.base.weight.data.sub_(layer.lora_B.data @ layer.lora_A.data, alpha=layer.alpha / layer.r)


@torch.no_grad()
def merge_unscaled(layer):
    layer.base.weight += layer.lora_B @ layer.lora_A
    return layer.base


@torch.no_grad()
def merge_alpha(layer):
    layer.base.weight += layer.alpha * (layer.lora_B @ layer.lora_A)
    return layer.base


@torch.no_grad()
def merge_copy(layer):
    merged = copy.deepcopy(layer.base)
    merged.weight += layer.scale * (layer.lora_B @ layer.lora_A)
    return merged


def merge_new_parameter(layer):
    layer.base.weight = nn.Parameter(layer.base.weight + layer.scale * layer.lora_B @ layer.lora_A)
    return layer.base


def merge_through_data(layer):
    """A new tensor set as the weight's data: the same Parameter object, so right."""
    layer.base.weight.data = layer.base.weight.data + layer.scale * (layer.lora_B @ layer.lora_A).data
    return layer.base


def unmerge_new_parameter(layer):
    layer.base.weight = nn.Parameter(
        (layer.base.weight - layer.scale * layer.lora_B @ layer.lora_A).detach(), requires_grad=False)


def unmerge_nothing(layer):
    return None


MERGE_RIGHT = {
    "the course's solution": (merge, unmerge),
    "through .data": (merge_data, unmerge_data),
    "new data on the same parameter": (merge_through_data, unmerge),
}
MERGE_WRONG = {
    "merge without the scale": ((merge_unscaled, unmerge), "merge without the scale alpha/r"),
    "merge scaled by alpha": ((merge_alpha, unmerge), "scaled by alpha instead of alpha/r"),
    "a copy returned": ((merge_copy, unmerge), "did not return layer.base"),
    "a new trainable parameter": ((merge_new_parameter, unmerge), "base.weight is a new tensor"),
    "unmerge makes a new parameter": ((merge, unmerge_new_parameter), "unmerge left a new tensor as base.weight"),
    "unmerge does nothing": ((merge, unmerge_nothing), "unmerge leaving the merged weight"),
}


# --- 10.4 ---------------------------------------------------------------------------------------


def state_bytes(optimizer):
    return sum(v.numel() * v.element_size() for s in optimizer.state.values()
               for v in s.values() if torch.is_tensor(v))


def state_bytes_loop(optimizer):
    total = 0
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            for value in optimizer.state.get(parameter, {}).values():
                if isinstance(value, torch.Tensor):
                    total += value.nbytes
    return total


STATE_RIGHT = {"the course's solution": state_bytes, "a loop over param_groups with nbytes": state_bytes_loop}
STATE_WRONG = {  # written apart from the spec's mistakes, which tests/test_check_mistakes.py runs
    "entries, not bytes": (lambda o: sum(v.numel() for s in o.state.values() for v in s.values()),
                           "gives what counting entries, not bytes gives"),
    "the parameters' bytes": (lambda o: sum(p.nbytes for g in o.param_groups for p in g["params"]),
                              "gives what the bytes of the parameters gives"),
    "twice the parameters' bytes": (
        lambda o: 2 * sum(p.numel() * p.element_size() for g in o.param_groups for p in g["params"]),
        "gives what twice the bytes of the trainable parameters gives"),
    "the step counters left out": (
        lambda o: sum(v.nbytes for s in o.state.values() for v in s.values() if v.dim() > 0),
        "gives what leaving out the step counters gives"),
    "a tensor returned": (lambda o: torch.tensor(state_bytes(o)), "stated return type"),
}


# --- every exercise: its right variants pass, its wrong ones fail naming the mistake -------------

# Each check with its right variants and its wrong ones (each with the phrase its message must
# contain); a tuple holds the several functions one check takes (merge and unmerge).
EXERCISES = {
    "10.1": (nb10.lora_linear, LORA_RIGHT, LORA_WRONG),
    "10.2": (nb10.add_lora, ADD_RIGHT, ADD_WRONG),
    "10.3": (nb10.merge, MERGE_RIGHT, MERGE_WRONG),
    "10.4": (nb10.optimizer_state_bytes, STATE_RIGHT, STATE_WRONG),
}


def _judge(check, implementation):
    arguments = implementation if isinstance(implementation, tuple) else (implementation,)
    return check(*arguments, raise_on_failure=False)


@pytest.mark.parametrize(("exercise", "name"), [
    (exercise, name) for exercise, (_, right, _) in EXERCISES.items() for name in sorted(right)])
def test_right_variant_passes(exercise, name):
    check, right, _ = EXERCISES[exercise]
    result = _judge(check, right[name])
    assert result.passed, (exercise, name, result.message)


@pytest.mark.parametrize(("exercise", "name"), [
    (exercise, name) for exercise, (_, _, wrong) in EXERCISES.items() for name in sorted(wrong)])
def test_wrong_variant_is_rejected_naming_the_mistake(exercise, name):
    check, _, wrong = EXERCISES[exercise]
    implementation, phrase = wrong[name]
    result = _judge(check, implementation)
    assert result.status == "failed", f"{exercise}: {name} was accepted"
    assert phrase in result.message, result.message


# --- stubs --------------------------------------------------------------------------------------


def test_stubs_are_not_implemented():
    assert nb10.lora_linear(Stub, raise_on_failure=False).status == "not implemented"
    assert nb10.add_lora(stub, raise_on_failure=False).status == "not implemented"
    assert nb10.merge(stub, stub, raise_on_failure=False).status == "not implemented"
    assert nb10.optimizer_state_bytes(stub, raise_on_failure=False).status == "not implemented"
