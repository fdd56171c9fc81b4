"""Checks for notebook 10, LoRA, against ``peft``'s own LoRA layer holding the check's A and B
(forward, gradients, merge); ``LoRALinear``'s dropout is recovered through square A and B."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from peft import LoraConfig  # imported with the module (about 2 s), not in the first check cell
from peft.tuners.lora import Linear
from torch import nn

from course.checks.nb06 import _tiny_batch, _tiny_bert, _Word
from course.framework import properties as prop
from course.framework import spec
from course.framework.check import exercise_check, expect
from course.framework.observe import claim
from course.framework.properties import generator, observe, seeded, statistics
from course.framework.spec import Build, Case, Property, judging, weights_for
from course.framework.virtual import VirtualDevice

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
    """peft's forward, A and B as leaves, on a base of its own (loralib's eval() changes one)."""
    layer = _peft(*(build.inputs[k] for k in ("pristine", "r", "alpha")))
    weights = {f"lora_{k}.default.weight": w[f"lora_{k}"] for k in "AB"}
    return torch.func.functional_call(layer, weights, (x,))


# in, out, bias, r, alpha, dropout, the shapes of x before in; the third (square A and B,
# dropout 0.5) is the one whose dropout is recovered
BUILDS = (
    (6, 5, True, 2, 4.0, 0.0, ((3,), (2, 4))),
    (8, 3, False, 4, 1.0, 0.0, ((5,), (1, 7))),
    (4, 4, True, 4, 8.0, 0.5, ((512,),)),
)


def _xs(k: int, i: int, shapes: tuple, grad: bool) -> list[Case]:
    g = generator(k)
    return [
        Case(f"x of shape {(*s, i)}", {"x": torch.randn(*s, i, generator=g)}, grad=grad and not n)
        for n, s in enumerate(shapes)
    ]


def _builds() -> list[Build]:
    return [
        Build(
            f"Linear({i}, {o}, bias={b}), r={r}, alpha={a}, dropout={p}",
            {
                "base": _linear(i, o, b, 700 + k),
                "pristine": _linear(i, o, b, 700 + k),  # the reference's, whatever the module does
                "r": r,
                "alpha": a,
                "dropout": p,
            },
            # gradients where training takes them, in train() mode: with dropout, whose masks
            # differ from the reference's, not at all (loralib's eval() merges A and B away)
            functools.partial(_xs, k, i, s, not p),
            deterministic=not p,
        )
        for k, (i, o, b, r, a, p, s) in enumerate(BUILDS)
    ]


def _shapes(build: Build) -> dict[str, tuple[int, ...]]:
    base, r = build.inputs["base"], build.inputs["r"]
    return {"lora_A": (r, base.in_features), "lora_B": (base.out_features, r)}


def _scaled_by(
    build: Build, w: dict, buffers: Any, x: torch.Tensor, *, scale: Callable[[dict], float]
) -> torch.Tensor:
    """base(x) + scale * x A^T B^T: the text's formula with another scale (a mistake's). The
    base is the build's pristine copy where the runner keeps one."""
    inputs = build.inputs
    base = inputs.get("pristine", inputs["base"])
    return base(x) + scale(inputs) * x @ w["lora_A"].T @ w["lora_B"].T


LORA_MISTAKES = tuple(
    spec.Mistake(name, "the scale alpha/r", functools.partial(_scaled_by, scale=scale), HINT)
    for name, scale in (
        ("the update scaled by alpha instead of alpha/r", lambda inputs: inputs["alpha"]),
        ("the update not scaled (alpha/r missing)", lambda inputs: 1.0),
    )
)


def _dropout(case: Case, got: Any, expected: Any, out: Any) -> None:
    """(out - base(x)) / scale through the inverses of B and A is dropout(x) if the text was
    followed; otherwise the message names where the dropout went."""
    # a judge, not mistakes: a dropout result is random, so no value comparison says where it acted
    build = _builds()[2]
    w = {k: v.double() for k, v in weights_for(_shapes(build), 2).items()}
    x, what = case.inputs["x"].double(), f"LoRALinear({build.what}) in train() mode on {case.what}"
    expect(isinstance(out, torch.Tensor) and out.shape == x.shape, f"{what}: wrong output shape.")
    clean = copy.deepcopy(build.inputs["base"]).double()(x).detach()
    update, full = (out - clean) / 2, clean + 2 * x @ w["lora_A"].T @ w["lora_B"].T
    inner = update @ torch.linalg.inv(w["lora_B"].T) @ torch.linalg.inv(w["lora_A"].T)
    if statistics.is_dropout_of(inner, x, 0.5):
        # zero as is_dropout_of reads it: a layer that merged A and B into its weight in float32
        # and took them out again (loralib's eval() and train()) leaves a residue of about 1e-7
        dropped = inner.abs() <= 1e-6 * x.abs().max()
        return statistics.dropout_rate(dropped, 0.5, what, HINT)
    mistake = "the output is not base(x) + (alpha/r) B A dropout(x) for any dropout mask"
    if torch.allclose(out, full, atol=1e-6):
        mistake = "nothing was dropped: dropout acts in train() mode"
    elif statistics.is_dropout_of(out, full, 0.5):
        mistake = "dropout is applied to the whole output; the base layer's path is never dropped"
    elif statistics.is_dropout_of(update * 2, full - clean, 0.5):
        mistake = "dropout is applied to the update after B; the text puts it on the input of A"
    raise prop.CheckFailure(f"{what}: {mistake}", HINT)


def _in_train(module: Any, case: Case, call: Any) -> Any:
    """The module's output in train() mode, in float64; ``train()`` and the forward pass called
    apart (``loralib``'s ``train()`` returns None)."""
    what = f"the module in train() mode, in float64, on {case.what}"
    x = case.inputs["x"].double()

    def run() -> Any:
        twin = copy.deepcopy(module).double()
        twin.train()
        return twin(x)

    return observe(what, run, random=True)


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
    mistakes=LORA_MISTAKES,
    properties=(
        Property(
            "dropout",  # on the input of A
            _dropout,
            _in_train,
            applies=lambda case: len(case.inputs["x"]) == 512,
        ),
    ),
)


def _initial(cls: Any) -> dict[str, Any]:
    """The state after ``__init__``: A, B, what trains, whether the caller's layer is the one
    kept and frozen; A's and B's dtype and device on a float64 base and on the second device."""
    base = _linear(64, 48, True, 9)
    module = cls(base, 8, 16.0)
    wide = cls(_linear(6, 5, True, 3).double(), 2, 4.0)
    mode = VirtualDevice()
    with mode:
        there = cls(mode.tag(_linear(6, 5, True, 3)), 2, 4.0)
        moved = [n for n in ("lora_A", "lora_B") if not mode.on_device(getattr(there, n))]
    return {
        "A": module.lora_A.detach().clone(),
        "B": module.lora_B.detach().clone(),
        "trainable": [n for n, p in module.named_parameters() if p.requires_grad],
        "kept": getattr(module, "base", None) is base,
        "caller": [f"base.{n}" for n, p in base.named_parameters() if p.requires_grad],
        "float64": [n for n in ("lora_A", "lora_B") if getattr(wide, n).dtype != torch.float64],
        "elsewhere": moved,
    }


def _left_trainable(names: list[str]) -> str:
    """What a trainable parameter outside A and B says, the mistake named."""
    shown = ", ".join(f"`{n}`" for n in names[:3])
    verb = "is" if len(names) == 1 else "are"
    if all(n.endswith("bias") for n in names):
        return f"{shown} {verb} still trainable: the base bias left trainable"
    return f"{shown} {verb} still trainable: the base weight left trainable"


def _claimed_after_init(made: str, seen: dict[str, Any]) -> None:
    """The caller's layer kept as ``self.base`` and frozen: an identity and ``requires_grad``
    flags read in the student's process, claims (course.framework.observe.claim)."""
    leaked = [n for n in seen["trainable"] if n[:5] != "lora_"]
    leaked += [n for n in seen["caller"] if n not in leaked]
    claim(
        seen["kept"],
        f"{made}: self.base is not the nn.Linear passed in (a copy, or a new layer): the "
        "caller's layer is not the one wrapped",
        HINT,
        prop="LoRA wraps the existing layer and keeps it as self.base",
    )
    claim(
        not leaked,
        f"{made}: {_left_trainable(leaked)}",
        HINT,
        prop="LoRA freezes the base layer, weight and bias; only lora_A and lora_B train",
    )


@exercise_check(LORA.exercise, LORA.title, hint=HINT)
def lora_linear(student_class: Any) -> None:
    """The state after ``__init__`` (the caller's base kept and frozen, B zero, A random, both
    following the base's dtype and device), then the declared contract."""
    made = "LoRALinear(Linear(64, 48), r=8, alpha=16.0) after __init__"
    seen = observe(made, lambda: _initial(student_class), random=True)
    if judging():
        _claimed_after_init(made, seen)
        A = seen["A"]
        for right, symptom, violated in (
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
            (
                not seen["float64"],
                f"on a float64 base layer, {' and '.join(seen['float64'])} not float64",
                "A and B are created in the base weight's dtype",
            ),
            (
                not seen["elsewhere"],
                f"on a base layer on another device, {' and '.join(seen['elsewhere'])} stayed "
                "on the CPU",
                "A and B are created on the base weight's device",
            ),
        ):
            expect(right, f"{made}: {symptom}", HINT, violated)
    spec.run_module(LORA, student_class)


lora_linear.spec = LORA  # type: ignore[attr-defined]


# --- Exercise 10.2: add_lora --------------------------------------------------------------------


class _Wrapped(nn.Module):
    """10.2's reference layer: 10.1's formula, A and B under the names the text gives them."""

    def __init__(self, base: nn.Linear, r: int, alpha: float, dropout: float) -> None:
        super().__init__()
        like = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.base, self.scale, self.dropout = base, alpha / r, nn.Dropout(dropout)
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features, **like))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, **like))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * self.dropout(x) @ self.lora_A.T @ self.lora_B.T


def _add_lora(
    model: nn.Module, targets: tuple, r: int, alpha: float, dropout: float = 0.0
) -> nn.Module:
    """The text's three steps."""
    model.requires_grad_(False)
    names = [
        n
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and n.split(".")[-1] in targets and n != "classifier"
    ]
    for name in names:
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, child, _Wrapped(getattr(owner, child), r, alpha, dropout))
    model.classifier.requires_grad_(True)
    return model


# targets, dropout, dtype: the head named in targets, targets that are non-final parts of names
# ("self", "output"), a dropout that must reach the layers, a float64 model
ADD_CASES = (
    (("query", "value"), 0.0, torch.float32),
    (("query", "key", "value", "dense"), 0.0, torch.float32),
    (("dense", "classifier"), 0.0, torch.float32),
    (("self", "output", "query"), 0.0, torch.float32),
    (("query", "value"), 0.5, torch.float64),
)


def _add_cases() -> list[Case]:
    return [
        Case(
            f"a 1-layer BERT{' in float64' if dtype == torch.float64 else ''}, targets={t}",
            {"model": _Word("model"), "targets": t, "r": 2, "alpha": 4.0, "dropout": p, "k": k},
            compare=False,
        )
        for k, (t, p, dtype) in enumerate(ADD_CASES)
    ]


@functools.cache
def _bert(k: int) -> nn.Module:
    """Case ``k``'s tiny BERT, built once (about 25 ms); every run gets a copy."""
    return _tiny_bert("sequence", 3, 0.0, 20 + k).to(ADD_CASES[k][2]).eval()


def _fresh_model(inputs: dict) -> list[dict]:  # Spec.calls: one call, on a fresh copy
    return [{**inputs, "model": copy.deepcopy(_bert(inputs["k"]))}]


def _dropout_reaches(model: nn.Module, batch: dict) -> bool:
    """With every lora_B non-zero, whether train() mode changes the logits (the model's own
    dropout is 0, so only the LoRA layers' dropout can)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("lora_B"):
                parameter.fill_(1.0)
        model.train()
        trained = model(**batch).logits
        model.eval()
        return not torch.allclose(trained, model(**batch).logits)


def _add_watch(inputs: dict, k: int, code: Callable, *args: Any, **kwargs: Any) -> dict:
    """What add_lora did to the model: the layers replaced (a name whose nn.Linear is now another
    kind of module), the logits right after; and, read in the student's process (claims: see
    ``_claimed_by_add``), the replaced ones that do not hold the layer they replaced, what trains,
    the model returned, whether its dropout acts in train() mode."""
    model = inputs["model"]
    batch = _tiny_batch(4, 8, "sequence", 3, inputs["k"])
    batch.pop("labels")
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    with seeded(k):  # LoRALinear draws A, dropout draws masks: from a fork of the generator
        returned = code(*args, **kwargs)
        now = dict(model.named_modules())
        replaced = sorted(n for n in linears if type(now.get(n)) is not nn.Linear)
        held = sorted(n for n in replaced if not any(s is linears[n] for s in now[n].modules()))
        with torch.no_grad():
            logits = model(**batch).logits
        return {
            "result": None,
            "returned": returned is model,
            "replaced": replaced,
            "copies": held,
            "trainable": sorted(n for n, p in model.named_parameters() if p.requires_grad),
            "logits": logits,
            "dropout": _dropout_reaches(model, batch),
        }


def _listed(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names[:3]) + (" ..." if len(names) > 3 else "")


FROZEN = "every parameter frozen but lora_A, lora_B and the head"


def _claimed_by_add(case: Case, got: Any, expected: Any, seen: Any) -> None:
    """What the text says of the objects and flags, read in the student's process (identities,
    ``requires_grad``, a mode's effect), so claims (course.framework.observe.claim): the layers wrapped
    hold the model's own, what trains, the model returned, the dropout reaching the layers."""
    mine, ours = got[0], expected[0]
    extra_trains = [n for n in mine["trainable"] if n not in ours["trainable"]]
    frozen = [n for n in ours["trainable"] if n not in mine["trainable"]]
    head = [n for n in frozen if n.startswith("classifier.")]
    for holds, message, violated in (
        (
            not mine["copies"],
            f"{_listed(mine['copies'])} was replaced by a module that does not hold the model's "
            "own nn.Linear: LoRALinear wraps the layer it replaces (a copy leaves the "
            "pretrained one behind)",
            "each wrapped layer holds the model's own nn.Linear",
        ),
        (
            not extra_trains,
            f"{_listed(extra_trains)} still train{'s' if len(extra_trains) == 1 else ''}: "
            "every parameter is frozen but lora_A, lora_B and the head",
            FROZEN,
        ),
        (
            not head,
            "the head `classifier` does not train: it is new, so it trains in full",
            FROZEN,
        ),
        (
            not frozen,
            f"{_listed(frozen)} do not train: lora_A and lora_B of each wrapped layer do",
            FROZEN,
        ),
        (mine["returned"], "it did not return the model it changed", "add_lora returns the model"),
        (
            mine["dropout"] == ours["dropout"],
            "the dropout argument did not reach the LoRA layers: in train() mode, with B "
            "non-zero, the outputs equal eval()'s"
            if ours["dropout"]
            else "with dropout=0, train() mode changes the outputs",
            "the dropout argument reaches the LoRA layers",
        ),
    ):
        claim(holds, f"{case.what}: {message}.", prop=violated)


def _judge_add(case: Case, got: Any, expected: Any, seen: Any) -> None:
    """Each way of going wrong in the layers replaced, named; the text's own words for what is
    right; the logits right after."""
    mine, ours, targets = got[0], expected[0], case.inputs["targets"]
    replaced, wanted = mine["replaced"], ours["replaced"]
    extra = [n for n in replaced if n not in wanted]
    inner = [n for n in extra if set(n.split(".")[:-1]) & set(targets)]
    for right, message in (
        (
            "classifier" not in replaced,
            "LoRA on the head: `classifier` was replaced; the task head is new, so it trains "
            "in full and is never wrapped, even when targets name it",
        ),
        (
            not inner,
            f"it replaced {_listed(inner)}, where a target is a non-final part of the name: "
            "only the name's last part is matched against targets",
        ),
        (
            replaced == wanted,
            f"it replaced {_listed(replaced) if replaced else 'no layer'}, expected "
            f"{_listed(wanted)}: every nn.Linear whose name's last part is in targets, and "
            "nothing else",
        ),
    ):
        expect(right, f"{case.what}: {message}.")
    prop.expect_result(
        mine["logits"],
        ours["logits"],
        f"{case.what}: the logits right after it (B is zero, so they equal the model's before)",
    )


add_lora = spec.check(
    spec.Spec(
        exercise="Exercise 10.2",
        title="add_lora",
        name="add_lora",
        params=("model", "targets", "r", "alpha", "dropout"),
        defaults={"dropout": 0.0},
        mutable=("model",),  # the text: it changes model in place
        reference=_add_lora,
        cases=_add_cases,
        calls=_fresh_model,
        watch=_add_watch,
        properties=(
            Property("the layers wrapped", _judge_add),
            Property(
                "the model's own layers wrapped, what trains, the model returned", _claimed_by_add
            ),
        ),
        device=False,  # A and B follow the base layer: 10.1's check
        hint="Freeze every parameter; wrap each nn.Linear whose name's last part is in targets, "
        "except the head; unfreeze the head.",
    )
)


# --- Exercise 10.3: merge and unmerge -----------------------------------------------------------

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


def _peft_merge(layer: SimpleNamespace) -> nn.Linear:
    """peft's merge() of the same weights, written into the layer's own weight."""
    merged = _peft(layer.base, layer.r, layer.alpha, {"A": layer.lora_A, "B": layer.lora_B})
    merged.merge()
    with torch.no_grad():
        layer.base.weight.copy_(merged.base_layer.weight)
    return layer.base


@torch.no_grad()
def _unmerge(layer: SimpleNamespace) -> None:
    layer.base.weight -= layer.scale * layer.lora_B @ layer.lora_A


def _merge_cases() -> list[Case]:
    return [
        Case(
            f"a LoRALinear(Linear({i}, {o}), r={r}, alpha={alpha})",
            {"layer": _Word("layer"), "k": k},
        )
        for k, (i, o, _, r, alpha) in enumerate(MERGES)
    ]


def _merge_calls(inputs: dict) -> list[dict]:
    """merge, then unmerge, of one layer."""
    layer, x = _layer(inputs["k"]), torch.randn(3, MERGES[inputs["k"]][0], generator=generator(9))
    return [{**inputs, "layer": layer, "x": x}, {**inputs, "layer": layer, "x": x}]


def _merge_watch(inputs: dict, k: int, code: tuple, layer: Any) -> dict:
    """Call ``k``: merge (``code[0]``), then unmerge (``code[1]``); what each left."""
    x, weight = inputs["x"], layer.base.weight
    out = code[k](layer)
    now = layer.base.weight
    seen = {"result": None, "weight": now.detach().clone(), "in place": now is weight}
    if k == 1:
        return {**seen, "output": _out(layer, x)}
    return {
        **seen,
        "is base": out is layer.base,
        "frozen leaf": now.is_leaf and not now.requires_grad,
        "output": out(x).detach() if isinstance(out, nn.Module) else None,
    }


def _claimed_by_merge(case: Case, got: Any, expected: Any, seen: Any) -> None:
    """What the text says merge and unmerge do to the layer's objects, which no value shows:
    identities and flags read in the student's process, claims (course.framework.observe.claim). Values
    read through the tensor held before merge would be no better: they are the merged weight
    the record already carries, so writing them needs no answer either."""
    merged, unmerged = got[0], got[1]
    for holds, message, violated in (
        (
            merged["is base"],
            "merge did not return layer.base, the same nn.Linear with the update folded in "
            "(no extra layer)",
            "merge returns layer.base",
        ),
        (
            merged["in place"],
            "base.weight is a new tensor: merge adds to base.weight in place, so that whatever "
            "holds the weight (an optimizer built before) still holds it",
            "merge in place",
        ),
        (
            merged["frozen leaf"],
            "base.weight requires grad or is no longer a leaf: merge in place under "
            "torch.no_grad()",
            "merge without recording gradients",
        ),
        (
            unmerged["in place"],
            "unmerge left a new tensor as base.weight: it subtracts in place",
            "unmerge in place",
        ),
    ):
        claim(holds, f"{case.what}: after merge: {message}", prop=violated)


@torch.no_grad()
def _merged_by(layer: SimpleNamespace, factor: str) -> nn.Linear:
    """merge with the update scaled by ``factor``: an attribute of the layer ("scale": the
    text's merge), or "none": not scaled."""
    layer.base.weight += getattr(layer, factor, 1.0) * layer.lora_B @ layer.lora_A
    return layer.base


MERGED = "merge equivalence: the merged layer computes what the LoRA layer computed"
MERGE_MISTAKES = (  # each a wrong (merge, unmerge) pair, in the reference's form
    spec.Mistake("merge without the scale alpha/r", MERGED,
                 (functools.partial(_merged_by, factor="none"), _unmerge)),  # type: ignore[arg-type]
    spec.Mistake("merge scaled by alpha instead of alpha/r", MERGED,
                 (functools.partial(_merged_by, factor="alpha"), _unmerge)),  # type: ignore[arg-type]
    spec.Mistake("unmerge leaving the merged weight", "unmerge undoes merge",
                 (functools.partial(_merged_by, factor="scale"), lambda layer: None)),
)  # fmt: skip


merge = spec.check(
    spec.Spec(
        exercise="Exercise 10.3",
        title="merge and unmerge",
        name="merge",
        params=("layer",),
        mutable=("layer",),  # the text: both change the layer in place
        reference=(_peft_merge, _unmerge),  # type: ignore[arg-type]
        together=True,  # the check cell passes merge and unmerge
        cases=_merge_cases,
        calls=_merge_calls,
        watch=_merge_watch,
        mistakes=MERGE_MISTAKES,
        watched=("weight", "output"),  # base.weight and the layer's output after each call
        properties=(Property("merge in place, unmerge its inverse", _claimed_by_merge),),
        device=False,
        hint="merge: base.weight += scale * lora_B @ lora_A under torch.no_grad(), return "
        "layer.base; unmerge subtracts it.",
    )
)


# what, the optimizer, whether it steps once: AdamW with amsgrad first, where each known mistake
# gives its own wrong total (on plain AdamW two of them give the same one)
OPTIMIZERS = (
    ("AdamW with amsgrad after one step", lambda p: torch.optim.AdamW(p, 0.1, amsgrad=True), True),
    ("AdamW after one step", lambda p: torch.optim.AdamW(p, lr=0.1), True),
    ("SGD with momentum after one step", lambda p: torch.optim.SGD(p, 0.1, 0.9), True),
    ("AdamW before a step", lambda p: torch.optim.AdamW(p, lr=0.1), False),
)


def _optimizer(k: int) -> torch.optim.Optimizer:
    """``OPTIMIZERS[k]`` on a float64 model with a frozen layer (no state for it)."""
    _, make, step = OPTIMIZERS[k]
    model = nn.Sequential(nn.Linear(5, 4), nn.Linear(4, 2).requires_grad_(False)).double()
    opt = make([p for p in model.parameters() if p.requires_grad])
    model(torch.randn(3, 5, dtype=torch.float64)).sum().backward()
    return opt.step() or opt if step else opt


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
    return [(k, v) for s in optimizer.state.values() for k, v in s.items() if torch.is_tensor(v)]


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(v.numel() * v.element_size() for _, v in _state_tensors(optimizer))


def _parameter_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(p.nbytes for group in optimizer.param_groups for p in group["params"])


_TEXT = "the bytes of every tensor in optimizer.state"
STATE_MISTAKES = (  # in the order they are told apart on the first case (AdamW with amsgrad)
    spec.Mistake(
        "leaving out the step counters",
        f"{_TEXT}, the step counters too",
        lambda optimizer: sum(v.nbytes for k, v in _state_tensors(optimizer) if k != "step"),
    ),
    spec.Mistake(
        "twice the bytes of the trainable parameters",
        f"{_TEXT}, read from the state (AdamW with amsgrad keeps three per parameter, SGD one)",
        lambda optimizer: 2 * _parameter_bytes(optimizer),
    ),
    spec.Mistake(
        "the bytes of the parameters", f"{_TEXT}, not of the parameters", _parameter_bytes
    ),
    spec.Mistake(
        "counting entries, not bytes",
        f"{_TEXT}: numel() * element_size()",
        lambda optimizer: sum(v.numel() for _, v in _state_tensors(optimizer)),
    ),
)


optimizer_state_bytes = spec.check(
    spec.Spec(
        exercise="Exercise 10.4",
        title="optimizer state",
        name="optimizer_state_bytes",
        params=("optimizer",),
        device=False,
        reference=_state_bytes,
        cases=lambda: [
            Case(what, {"optimizer": _optimizer(k)}) for k, (what, *_) in enumerate(OPTIMIZERS)
        ],
        mistakes=STATE_MISTAKES,
        hint="Sum numel() * element_size() over every tensor in every dict of "
        "optimizer.state.values(); return an int.",
    )
)
