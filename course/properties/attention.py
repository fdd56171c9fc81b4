"""Attention and masks: what a mask guarantees (a blocked key gets exactly 0, in every head;
masked padding and later positions change nothing), the weights of every head, where attention's
dropout acts, a mask built on the device it is given. Notebooks 02, 03 and 05."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from course.properties import CheckFailure, expect, observe, on_device, tolerance, widened
from course.properties.statistics import SHARED, independent, is_dropout_of


def blocked_get_zero(name: str, lost: str = "", heads: bool = False) -> dict[str, Callable]:
    """Where a boolean ``case.inputs["mask"]`` is False, the weights (the result's second item)
    are exactly 0, at any number of leading axes. Says so when the mask was read the wrong way
    round; ``lost`` is added when the mask cannot have reached the computation. With ``heads``
    the weights have a head axis (batch, heads, Lq, Lk) that a 3-dim mask lacks: one mask
    serves every head."""

    def judge(case: Any, got: Any, expected: Any, seen: Any) -> None:
        mask, weights = case.inputs.get("mask"), got[1]
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            return
        if heads and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        try:
            blocked = ~mask.expand(weights.shape)
        except (RuntimeError, AttributeError):
            return  # the shape comparison says it better
        leaked = blocked & (weights != 0)
        if not leaked.any():
            return
        index = tuple(int(i) for i in torch.unravel_index(
            (weights.abs() * leaked).flatten().argmax(), weights.shape))  # fmt: skip
        inverted = bool((weights.masked_select(~blocked) == 0).all())
        dead = bool(blocked[index[:-1]].all())
        reason = (
            "the keys the mask allows got weight 0 and the blocked ones did not: the mask is "
            "read the wrong way round"
            if inverted
            else "every key of that query is blocked, and the exercise text says such a query "
            "gets zero weights and a zero output"
            if dead
            else f"a key the mask blocks must get exactly 0. {lost}".strip()
        )
        raise CheckFailure(
            f"{name} on {case.what}: the {'padded' if mask.size(-2) == 1 else 'blocked'} key "
            f"position {index[-1]} received weight {weights[index].item():.3g} from query "
            f"{index[-2]}{f' in head {index[1]}' if heads else ''} (index {index}); {reason} (the "
            "property violated: the mask).",
            "A boolean mask is True where a query may attend (True = may attend), False where "
            "it may not."
            if inverted
            else "softmax of a row of -inf is 0/0; the text says what such a row gets instead."
            if dead
            else ("One mask serves every head. " if heads else "")
            + "The exercise text says what a blocked score becomes, so that its weight is "
            "exactly 0" + (", and forward passes the mask on." if lost else "."),
        )

    return {"judge": judge}


def per_head_weights(pick: Callable[[Any], Any], hint: str | None = None) -> dict:
    """Multi-head attention returns the weights of every head, (batch, num_heads, Lq, Lk):
    names a wrong number of heads (heads of num_heads features) or a missing head axis."""

    def judge(case: Any, got: Any, expected: Any, seen: Any) -> None:
        mine, theirs = pick(got), pick(expected)
        heads = theirs.shape[1]
        expect(
            mine.dim() != 3,
            f"on {case.what}, the attention weights have shape {tuple(mine.shape)}, without a "
            f"head axis; expected {tuple(theirs.shape)}, the weights of every head, not an "
            "average (the property violated: the per-head weights).",
            hint,
        )
        expect(
            mine.dim() != 4 or mine.shape[1] == heads,
            f"on {case.what}, the attention weights have {mine.shape[1]} heads on axis 1, but "
            f"num_heads={heads}: the number of heads is wrong (the property violated: num_heads "
            "heads of d_model / num_heads features each).",
            hint,
        )

    return {"judge": judge}


def device_argument(name: str, first: Callable[[Any], tuple], hint: str) -> dict[str, Callable]:
    """Given a ``device`` argument naming the second device (:mod:`course.virtual`),
    positionally and by name (as a string), every result tensor lives there."""
    from course.virtual import VIRTUAL

    def run(student: Any, case: Any, call: Callable) -> list[dict[str, Any]]:
        args = first(case)
        shown = ", ".join(map(repr, args))
        return [
            on_device(f"{name}({shown}, <another device>)", student, (*args, VIRTUAL)),
            on_device(f"{name}({shown}, device='<another>')", student, args,
                      {"device": VIRTUAL.type}),
        ]  # fmt: skip

    def judge(case: Any, got: Any, expected: Any, seen: list) -> None:
        for form, observed in zip(("positionally", "by name"), seen, strict=True):
            error = observed.get("error")
            expect(
                error is None,
                f"{name} on {case.what}, another device given {form}: your code failed with "
                f"{error} (the property violated: device).",
                hint,
            )
            expect(
                all(d == "virtual" for d in observed.get("devices") or []),
                f"{name} on {case.what}, another device given {form}: the mask came back on "
                "the CPU: the device argument is ignored (the property violated: device). On a "
                "GPU, masking a GPU tensor with it fails.",
                hint,
            )

    return {"observe": run, "judge": judge}


def prefix_unchanged(owner: str, violated: str, hint: str | None = None) -> dict:
    """The outputs of the first positions do not change when the inputs grow by what the text
    says cannot reach them (masked padding: padding invariance; later target positions:
    causality). ``case.alone`` holds the inputs without the addition, ``case.added`` says it in
    words."""

    def watch(student: Any, case: Any, call_: Callable) -> Any:
        return call_(case.alone)  # an observed call

    def judge(case: Any, got: Any, expected: Any, alone: Any) -> None:
        if not (isinstance(got, torch.Tensor) and isinstance(alone, torch.Tensor)):
            return  # the stated type is judged with the result
        n = alone.shape[1]
        mine = got[:, :n]
        close = mine.shape == alone.shape and torch.allclose(mine, alone, **tolerance(got.dtype))
        error = (mine - alone).abs().max().item() if mine.shape == alone.shape else float("nan")
        expect(
            close,
            f"{owner} on {case.what}: {case.added} changed the outputs at "
            f"{'position 0' if n == 1 else f'positions 0-{n - 1}'} (by up to {error:.2g}) (the "
            f"property violated: {violated}).",
            hint,
        )

    return {"observe": watch, "judge": judge}


def dropout_on_attention(p: float, heads: int, hint: str | None = None) -> dict:
    """Multi-head attention's dropout, in training mode: it acts on the attention weights
    before they multiply V, and the weights returned are those before dropout. Observed on a
    float64 copy of the module (so the solve that recovers the weights is exact)."""

    def watch(module: Any, case: Any, call: Callable) -> dict[str, Any]:
        inputs = widened(dict(case.inputs))

        def run() -> dict[str, Any]:
            twin = copy.deepcopy(module).double().eval()
            evaluation = twin(**inputs)
            trained = twin.train()(**inputs)
            named = dict(twin.named_parameters())
            state = {
                f"{n}.{k[0]}": named.get(f"{n}.{k}")
                for n in ("w_o", "w_v")
                for k in ("weight", "bias")
            }
            return {
                "eval": evaluation,
                "train": trained,
                "value": inputs["value"],
                "state": {k: v.detach() if v is not None else None for k, v in state.items()},
            }

        return observe(f"the module in train() mode on {case.what}", run, random=True)

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        if got[1].shape != expected[1].shape or got[0].shape != expected[0].shape:
            return  # the shape speaks for itself
        (out_e, w_e), (out_t, w_t) = seen["eval"], seen["train"]
        what = f"in train() mode with dropout={p}, on {case.what}"
        if not torch.allclose(w_t, w_e, atol=1e-10):
            state = (
                "are the ones after dropout (zeros and 1/(1-p)-scaled values)"
                if is_dropout_of(w_t, w_e, p)
                else "differ from those in eval mode"
            )
            raise CheckFailure(
                f"{what}, the returned attention weights {state}; return the weights before "
                "dropout, the pattern the model computed (the property violated: the stated "
                "result in training mode).",
                hint,
            )
        expect(
            not torch.allclose(out_t, out_e, atol=1e-10),
            f"{what}, the output equals the eval-mode output: dropout is never applied (the "
            "property violated: training mode).",
            hint,
        )
        seen = {**seen, "train": out_t, "eval": out_e, "weights": w_e}
        mistake = _dropout_location(seen, heads, p)
        expect(
            mistake is None,
            f"{what}, {mistake} (the property violated: training mode); dropout belongs on the "
            "attention weights: each weight zeroed with probability p (the others scaled by "
            "1/(1-p)) before they multiply V.",
            hint,
        )

    return {"observe": watch, "judge": judge}


def _dropout_location(observed: dict[str, Any], heads: int, p: float) -> str | None:
    """Where dropout acted in multi-head attention: None when on the attention weights (the
    weights that multiplied V are recovered from the output: undo ``w_o``, split the heads,
    solve against each head's values), else the mistake in words."""
    out_t, out_e, w_e, x = (observed[k] for k in ("train", "eval", "weights", "value"))
    w_o, b_o, w_v, b_v = (observed["state"][k] for k in ("w_o.w", "w_o.b", "w_v.w", "w_v.b"))
    b_o = torch.zeros(w_o.shape[0], dtype=w_o.dtype) if b_o is None else b_o
    b_v = torch.zeros(w_v.shape[0], dtype=w_v.dtype) if b_v is None else b_v

    def merged(out: torch.Tensor) -> torch.Tensor:  # undo w_o: (B, H, Lq, d_k)
        return torch.linalg.solve(w_o.T, out - b_o, left=False).unflatten(-1, (heads, -1))

    heads_t, heads_e = merged(out_t).transpose(1, 2), merged(out_e).transpose(1, 2)
    v = (x @ w_v.T + b_v).unflatten(-1, (heads, -1)).transpose(1, 2)
    used = heads_t @ torch.linalg.pinv(v)  # the weights that multiplied V
    if torch.allclose(used @ v, heads_t, atol=1e-8) and is_dropout_of(used, w_e, p):
        return None if independent(used.abs() < 1e-9, 2) else SHARED
    if is_dropout_of(out_t, out_e, p):
        return "dropout acts on the module's output (after w_o)"
    if is_dropout_of(heads_t, heads_e, p):
        return "dropout acts on the heads' outputs (weights @ V, before w_o)"
    return "the output is not the values weighted by the attention weights after one dropout(p)"
