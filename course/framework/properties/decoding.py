"""Decoding: the encode-then-decode protocol of greedy decoding (notebook 05). Notebook 09's
filters and sampling, each used by one check, live beside their specs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from course.framework.observe import claim
from course.framework.properties import expect, observe, tolerance


def encode_then_decode(hint: str | None = None) -> dict:
    """``encode(src_ids)`` returns the memory and the source padding mask (boolean (B, 1, L),
    True on real tokens, ``case.pad`` the padding id); ``decode(tgt_ids, *encode(src_ids))``
    gives the student's own ``forward`` logits (the reference judges those)."""

    def watch(module: Any, case: Any, call_: Callable) -> Any:
        def run() -> dict[str, Any]:
            memory, mask = module.encode(case.inputs["src_ids"])
            return {"mask": mask, "logits": module.decode(case.inputs["tgt_ids"], memory, mask)}

        return observe(f"encode(src_ids), then decode(tgt_ids, memory, mask) on {case.what}", run)

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        mask, src = seen["mask"], case.inputs["src_ids"]
        want = (src != case.pad)[:, None, :]
        expect(
            isinstance(mask, torch.Tensor)
            and mask.dtype == torch.bool
            and mask.shape == want.shape
            and torch.equal(mask, want),
            f"on {case.what}: encode(src_ids) should return, second, the source padding mask: "
            f"boolean, shape {tuple(want.shape)}, True on real tokens",
            hint,
            "what encode returns",
        )
        logits, what = seen["logits"], f"decode(tgt_ids, *encode(src_ids)) on {case.what}"
        expect(
            isinstance(logits, torch.Tensor)
            and isinstance(got, torch.Tensor)
            and logits.shape == got.shape
            and torch.allclose(logits, got, **tolerance(got.dtype)),
            f"{what} differs from forward(src_ids, tgt_ids)",
            hint,
            "forward is decode(tgt_ids, *encode(src_ids)), so that decoding step by step gives "
            "its logits",
        )

    return {"observe": watch, "judge": judge}


def decoding_protocol(hint: str | None = None) -> dict:
    """Greedy decoding as the text describes it, on a model that counts its calls
    (``model.counts()``, ``model.reset()``): the model stays in eval mode, the source is
    encoded once (one row per batch row), and every decode gets the mask encode returned."""

    def watch(student: Any, case: Any, call_: Callable) -> Any:
        model = case.inputs["model"]

        observe(f"{case.what}: the model's counters reset", lambda: model.reset())
        call_(case.inputs)
        return observe(f"{case.what}: the model's counters", lambda: model.counts())

    def judge(case: Any, got: Any, expected: Any, seen: dict[str, Any]) -> None:
        what = f"greedy_decode on {case.what}"
        claim(  # the model's flag, read in the student's process: a claim
            not seen["training"] and seen["in_training"] == 0,
            f"{what} switched the model to training mode",
            hint,
            prop="the model stays in eval mode, as the text says",
        )
        expect(
            seen["without_mask"] == 0,
            f"{what} called model.decode without the memory_mask that encode returned, so the "
            "decoder reads the source's padding",
            hint,
            "decode gets the memory and its mask",
        )
        rows = case.inputs["src_ids"].shape[0]
        expect(
            seen["encodes"] == rows,
            f"{what} encoded {seen['encodes']} source rows for a batch of {rows}; model.decode "
            "runs on the growing target",
            hint,
            "the source is encoded once, with model.encode",
        )

    return {"observe": watch, "judge": judge}
