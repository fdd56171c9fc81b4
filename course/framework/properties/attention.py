"""Attention and masks: what a mask guarantees (a blocked key gets exactly 0, in every head;
masked padding and later positions change nothing). Notebooks 02, 03 and 05."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from course.framework.properties import CheckFailure, tolerance


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
        index = tuple(
            int(i)
            for i in torch.unravel_index((weights.abs() * leaked).flatten().argmax(), weights.shape)
        )
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
            f"{index[-2]}{f' in head {index[1]}' if heads else ''} (index {index}); {reason}",
            "A boolean mask is True where a query may attend (True = may attend), False where "
            "it may not."
            if inverted
            else "softmax of a row of -inf is 0/0; the text says what such a row gets instead."
            if dead
            else ("One mask serves every head. " if heads else "")
            + "The exercise text says what a blocked score becomes, so that its weight is "
            "exactly 0" + (", and forward passes the mask on." if lost else "."),
            prop="the mask",
        )

    return {"judge": judge}


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
        if mine.shape == alone.shape and torch.allclose(mine, alone, **tolerance(got.dtype)):
            return
        where = f"shape {tuple(mine.shape)}, without them {tuple(alone.shape)}"
        if mine.shape == alone.shape:
            gap = (mine - alone).abs()
            at = tuple(int(i) for i in torch.unravel_index(gap.argmax(), gap.shape))
            where = f"index {at}: yours {mine[at].item():.6g}, without them {alone[at].item():.6g}"
        raise CheckFailure(
            f"{owner} on {case.what}: {case.added} changed the outputs at "
            f"{'position 0' if n == 1 else f'positions 0-{n - 1}'} (at {where})",
            hint,
            prop=violated,
        )

    return {"observe": watch, "judge": judge}
