"""Checks for notebook 10, LoRA, against ``peft``'s own LoRA layer holding the check's A and B
(forward, gradients, merge); ``LoRALinear``'s dropout is recovered through square A and B."""

from __future__ import annotations

import copy
import functools
from types import SimpleNamespace
from typing import Any

import torch
from peft import LoraConfig  # imported with the module (about 2 s), not in the first check cell
from peft.tuners.lora import Linear
from torch import nn

from course import properties as prop
from course import spec
from course.check import exercise_check, expect
from course.checks.nb06 import _tiny_batch, _tiny_bert
from course.properties import generator, observe, statistics
from course.spec import Build, Case, Property, judging, weights_for

HINT = (
    "base(x) + (alpha / r) * dropout(x) @ lora_A.T @ lora_B.T, with lora_A (r, in_features) "
    "random, lora_B (out_features, r) zero, and the base layer's weight and bias frozen."
)


def _linear(inputs: int, outputs: int, bias: bool, offset: int) -> nn.Linear:
    """A base layer with seeded weights, the same in every process."""
    layer, w = nn.Linear(inputs, outputs, bias=bias), weights_for({"w": (outputs, inputs)}, offset)
    layer.load_state_dict({"weight": w["w"], "bias": w["w"][:, 0]} if bias else {"weight": w["w"]})
    return layer


def _peft(base: nn.Linear, r: int, alpha: float, w: dict | None = None) -> nn.Module:
    """peft's LoRA layer on a copy of ``base``, in eval mode, with A and B from ``w``."""
    config = LoraConfig(r=r, lora_alpha=alpha)
    layer = Linear(copy.deepcopy(base), "default", config, r=r, lora_alpha=alpha).eval()
    for name in ("A", "B") if w else ():
        getattr(layer, f"lora_{name}")["default"].weight.data.copy_(w[name])
    return layer


def _reference(build: Build, w: dict, buffers: Any, x: torch.Tensor) -> torch.Tensor:
    """peft's forward with the check's A and B as leaves (so gradients reach them)."""
    layer = _peft(*(build.inputs[k] for k in ("base", "r", "alpha")))
    weights = {f"lora_{k}.default.weight": w[f"lora_{k}"] for k in "AB"}
    return torch.func.functional_call(layer, weights, (x,))


# in, out, bias, r, alpha, dropout, the shapes of x before in; the third (square A and B,
# dropout 0.5) is the one whose dropout is recovered
BUILDS = (
    (6, 5, True, 2, 4.0, 0.0, ((3,), (2, 4))),
    (8, 3, False, 4, 1.0, 0.0, ((5,), (1, 7))),
    (4, 4, True, 4, 8.0, 0.5, ((512,),)),
)


def _xs(k: int, i: int, shapes: tuple) -> list[Case]:
    g = generator(k)
    return [
        Case(f"x of shape {(*s, i)}", {"x": torch.randn(*s, i, generator=g)}, grad=not n)
        for n, s in enumerate(shapes)
    ]


def _builds() -> list[Build]:
    return [
        Build(
            f"Linear({i}, {o}, bias={b}), r={r}, alpha={a}, dropout={p}",
            {"base": _linear(i, o, b, 700 + k), "r": r, "alpha": a, "dropout": p},
            functools.partial(_xs, k, i, s),
            deterministic=not p,
        )
        for k, (i, o, b, r, a, p, s) in enumerate(BUILDS)
    ]


def _shapes(build: Build) -> dict[str, tuple[int, ...]]:
    base, r = build.inputs["base"], build.inputs["r"]
    return {"lora_A": (r, base.in_features), "lora_B": (base.out_features, r)}


def _scale_mistakes(case: Case, state: dict) -> dict[str, torch.Tensor]:
    """Known wrong formulas with the module's own A and B, on the first build (alpha/r = 2)."""
    x = case.inputs["x"]
    if x.shape[-1] != 6:
        return {}
    base, update = _linear(6, 5, True, 700)(x), x @ state["lora_A"].T @ state["lora_B"].T
    return {
        "the update is scaled by alpha instead of alpha/r": base + 4.0 * update,
        "the update is not scaled (alpha/r is missing)": base + update,
    }


def _dropout(case: Case, got: Any, expected: Any, out: Any) -> None:
    """(out - base(x)) / scale through the inverses of B and A is dropout(x) if the text was
    followed; otherwise the message names where the dropout went."""
    build = _builds()[2]
    w = {k: v.double() for k, v in weights_for(_shapes(build), 2).items()}
    x, what = case.inputs["x"].double(), f"LoRALinear({build.what}) in train() mode on {case.what}"
    expect(isinstance(out, torch.Tensor) and out.shape == x.shape, f"{what}: wrong output shape.")
    clean = copy.deepcopy(build.inputs["base"]).double()(x).detach()
    update, full = (out - clean) / 2, clean + 2 * x @ w["lora_A"].T @ w["lora_B"].T
    inner = update @ torch.linalg.inv(w["lora_B"].T) @ torch.linalg.inv(w["lora_A"].T)
    if statistics.is_dropout_of(inner, x, 0.5):
        return statistics.dropout_rate(inner.abs() < 1e-9, 0.5, what, HINT)
    mistake = "the output is not base(x) + (alpha/r) B A dropout(x) for any dropout mask"
    if torch.allclose(out, full, atol=1e-6):
        mistake = "nothing was dropped: dropout acts in train() mode"
    elif statistics.is_dropout_of(out, full, 0.5):
        mistake = "dropout is applied to the whole output; the base layer's path is never dropped"
    elif statistics.is_dropout_of(update * 2, full - clean, 0.5):
        mistake = "dropout is applied to the update after B; the text puts it on the input of A"
    raise prop.CheckFailure(f"{what}: {mistake} (the property violated: dropout).", HINT)


def _in_train(module: Any, case: Case, call: Any) -> Any:
    what = f"the module in train() mode, in float64, on {case.what}"
    x = case.inputs["x"].double()
    return observe(what, lambda: copy.deepcopy(module).double().train()(x), random=True)


LORA = spec.ModuleSpec(
    exercise="Exercise 10.1",
    title="LoRALinear",
    name="LoRALinear",
    init=("base", "r", "alpha", "dropout"),
    init_defaults={"dropout": 0.0},
    forward=("x",),
    builds=_builds,
    parameters=_shapes,
    reference=_reference,
    gradients=("x",),
    hint=HINT,
    properties=(
        Property(
            "the scale", **prop.not_a_known_mistake(_scale_mistakes, "the scale alpha/r", HINT)
        ),
        Property(
            "dropout on the input of A",
            _dropout,
            _in_train,
            applies=lambda case: len(case.inputs["x"]) == 512,
        ),
    ),
)


def _initial(cls: Any) -> dict[str, Any]:
    module = cls(_linear(64, 48, True, 9), 8, 16.0)
    return {
        "A": module.lora_A.detach().clone(),
        "B": module.lora_B.detach().clone(),
        "trainable": [n for n, p in module.named_parameters() if p.requires_grad],
    }


@exercise_check(LORA.exercise, LORA.title, hint=HINT)
def lora_linear(student_class: Any) -> None:
    """The state after ``__init__`` (base frozen, B zero, A random), then the declared contract."""
    made = "LoRALinear(Linear(64, 48), r=8, alpha=16.0) after __init__"
    seen = observe(made, lambda: _initial(student_class), random=True)
    if judging():
        leaked, A = [f"`{n}`" for n in seen["trainable"] if n[:5] != "lora_"], seen["A"]
        for right, symptom, violated in (
            (
                not leaked,
                f"{', '.join(leaked)} still train: the base weight left trainable",
                "LoRA freezes the base layer, weight and bias; only lora_A and lora_B train",
            ),
            (
                bool((seen["B"] == 0).all()),
                "lora_B is not zero: B initialised at random",
                "B starts at zero, so the layer starts equal to its base",
            ),
            (
                A.unique().numel() > A.numel() // 2 and bool((A != 0).any(dim=1).all()),
                "lora_A is not drawn at random with every row non-zero",
                "A random; with A and B both zero no gradient reaches either",
            ),
        ):
            expect(right, f"{made}: {symptom} (the property violated: {violated}).", HINT)
    spec.run_module(LORA, student_class)


lora_linear.spec = LORA  # type: ignore[attr-defined]


def _inject(add_lora: Any, targets: tuple, k: int) -> dict[str, Any]:
    model = _tiny_bert("sequence", 3, 0.0, 20 + k).eval()
    batch = _tiny_batch(4, 8, "sequence", 3, k)
    batch.pop("labels")
    before = model(**batch).logits
    returned = add_lora(model, targets, 2, 4.0)
    wrapped = [n for n, m in model.named_modules() if isinstance(getattr(m, "base", 0), nn.Linear)]
    return {
        "returned": returned is model,
        "before": before,
        "after": model(**batch).logits,
        "trainable": sorted(n for n, p in model.named_parameters() if p.requires_grad),
        "wrapped": sorted(n for n in wrapped if hasattr(model.get_submodule(n), "lora_A")),
    }


@exercise_check(
    "Exercise 10.2",
    "add_lora",
    hint="Freeze every parameter; wrap each nn.Linear whose last name is in targets, except the "
    "head; unfreeze the head.",
)
def add_lora(student: Any) -> None:
    """On a tiny BERT: the wrapped layers, the trainable parameters, the outputs unchanged."""
    for k, targets in enumerate((("query", "value"), ("query", "key", "value", "dense"))):
        what = f"add_lora(a 1-layer BERT, targets={targets}, r=2, alpha=4.0)"
        seen = observe(what, lambda t=targets, k=k: _inject(student, t, k), random=True)
        if not judging():
            continue
        model = _tiny_bert("sequence", 3, 0.0, 20 + k)
        wanted = [n for n, m in model.named_modules() if n.split(".")[-1] in targets]
        wanted = sorted(n for n in wanted if isinstance(model.get_submodule(n), nn.Linear))
        head = {"classifier.weight", "classifier.bias"}
        expected = {f"{n}.lora_{c}" for n in wanted for c in "AB"} | head
        extra = sorted(set(seen["trainable"]) - expected)
        missing = sorted(expected - set(seen["trainable"]))
        for right, message in (
            (
                "classifier" not in seen["wrapped"],
                "LoRA on the head: the classifier is new, so it trains in full and is never "
                "wrapped",
            ),
            (
                seen["wrapped"] == wanted,
                f"it wrapped {seen['wrapped']}, expected {wanted}: every nn.Linear whose last "
                "name is in targets, and nothing else",
            ),
            (not extra, f"{extra[:3]} still train: all but A, B and the head is frozen"),
            (not missing, f"{missing[:3]} do not train (the head trains in full)"),
            (seen["returned"], "it did not return the model it changed"),
        ):
            expect(right, f"{what}: {message}.")
        prop.expect_result(
            seen["after"],
            seen["before"],
            f"{what}: the logits right after it (B is zero, so they equal the model's before)",
        )


MERGES = ((6, 5, True, 2, 4.0), (8, 3, False, 4, 1.0))  # in, out, bias, r, alpha


def _layer(k: int) -> SimpleNamespace:
    """A stand-in LoRALinear: the attributes the text states, with the check's A and B."""
    i, o, bias, r, alpha = MERGES[k]
    w = weights_for({"A": (r, i), "B": (o, r)}, 60 + k)
    base = _linear(i, o, bias, 40 + k).requires_grad_(False)
    A, B = nn.Parameter(w["A"]), nn.Parameter(w["B"])
    return SimpleNamespace(base=base, r=r, alpha=alpha, scale=alpha / r, lora_A=A, lora_B=B)


def _out(layer: SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    return (layer.base(x) + layer.scale * x @ layer.lora_A.T @ layer.lora_B.T).detach()


def _merge_run(merge: Any, unmerge: Any, k: int) -> dict[str, Any]:
    layer, x = _layer(k), torch.randn(3, MERGES[k][0])
    out = merge(layer)
    weight = layer.base.weight
    merged = {
        "is_base": out is layer.base,
        "weight": weight.detach().clone(),
        "leaf": weight.is_leaf and not weight.requires_grad,
        "y": out(x).detach() if isinstance(out, nn.Module) else None,
    }
    unmerge(layer)
    weight = layer.base.weight.detach().clone()
    return {"x": x, "merged": merged, "weight": weight, "y": _out(layer, x)}


@exercise_check(
    "Exercise 10.3",
    "merge and unmerge",
    hint="merge: base.weight += scale * lora_B @ lora_A under torch.no_grad(), return "
    "layer.base; unmerge subtracts it.",
)
def merge(merge_fn: Any, unmerge_fn: Any) -> None:
    """peft's merge of the same weights; the merged layer computes the layer's; unmerge undoes."""
    for k, (i, o, _, r, alpha) in enumerate(MERGES):
        what = f"merge, then unmerge, of a LoRALinear(Linear({i}, {o}), r={r}, alpha={alpha})"
        seen = observe(what, lambda k=k: _merge_run(merge_fn, unmerge_fn, k), random=True)
        if not judging():
            continue
        layer, m = _layer(k), seen["merged"]
        expect(
            m["is_base"],
            f"{what}: merge did not return layer.base, the same nn.Linear with the update folded "
            "in (no extra layer).",
        )
        expect(
            m["leaf"],
            f"{what}: after merge, base.weight requires grad or is no longer a leaf: merge in "
            "place under torch.no_grad().",
        )
        for factor, name in (
            (1.0, "merge without the scale alpha/r"),
            (alpha, "merge scaled by alpha instead of alpha/r"),
            (0.0, "merge left base.weight as it was"),
        ):
            wrong = (layer.base.weight + factor * layer.lora_B @ layer.lora_A).detach()
            expect(
                not torch.allclose(m["weight"], wrong, atol=1e-6),
                f"{what}: {name} (the property violated: merge equivalence).",
            )
        ref = _peft(layer.base, r, alpha, {"A": layer.lora_A, "B": layer.lora_B})
        ref.merge()
        before = _out(layer, seen["x"])
        for got, expected, said in (
            (
                m["weight"],
                ref.base_layer.weight,
                "base.weight after merge (peft's merge of the same weights)",
            ),
            (m["y"], before, "the merged layer's output"),
            (seen["weight"], layer.base.weight, "base.weight after unmerge"),
            (seen["y"], before, "the layer's output after unmerge"),
        ):
            prop.expect_result(got, expected.detach(), f"{what}: {said}")


def _optimizer(k: int) -> torch.optim.Optimizer:
    """AdamW, SGD with momentum (one step each), AdamW before any, on a float64 model with a
    frozen layer (no state for it)."""
    model = nn.Sequential(nn.Linear(5, 4), nn.Linear(4, 2).requires_grad_(False)).double()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, 0.1, 0.9) if k == 1 else torch.optim.AdamW(params, lr=0.1)
    model(torch.randn(3, 5, dtype=torch.float64)).sum().backward()
    return opt.step() or opt if k < 2 else opt


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    tensors = [v for s in optimizer.state.values() for v in s.values()]
    return sum(v.numel() * v.element_size() for v in tensors if isinstance(v, torch.Tensor))


optimizer_state_bytes = spec.check(
    spec.Spec(
        exercise="Exercise 10.4",
        title="optimizer state",
        name="optimizer_state_bytes",
        params=("optimizer",),
        device=False,
        reference=_state_bytes,
        cases=lambda: [
            Case(what, {"optimizer": _optimizer(k)})
            for k, what in enumerate(
                ("AdamW after one step", "SGD with momentum after one step", "AdamW before a step")
            )
        ],
        hint="Sum numel() * element_size() over every tensor in every dict of "
        "optimizer.state.values(); return an int.",
    )
)
