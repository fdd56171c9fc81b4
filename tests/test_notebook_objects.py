"""Where a solution notebook hands a student's function an object of its own (a wrapper, a
stand-in for a model), that object accepts everything the exercise's text allows the function
to do with it: an answer that passed its check must not crash *Run All* a few cells later.

Each case takes the notebook's own object, as stored in the solution, and runs a permitted
variant of the student's function on it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import torch
from torch import nn

from course import nn as course_nn

ROOT = Path(__file__).resolve().parents[1]


def notebook_class(notebook: str, name: str) -> str:
    """The source of class ``name`` as one of ``notebook``'s code cells defines it."""
    cells = json.loads((ROOT / "solutions" / notebook).read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return ast.get_source_segment(source, node)
    raise AssertionError(f"{notebook} defines no class {name}")


def greedy_decode_calling_eval(model, src_ids, max_new_tokens, bos_id=1, eos_id=2, pad_id=0):
    """A 5.8 answer as its text permits: it "may call ``model.eval()``" before decoding."""
    model.eval()
    assert not model.training, "model.eval() left the model in training mode"
    return course_nn.greedy_decode(model, src_ids, max_new_tokens, bos_id, eos_id, pad_id)


def test_notebook_05_neighbour_memory_accepts_a_greedy_decode_that_calls_eval():
    namespace = {"nn": nn, "torch": torch, "Transformer": course_nn.Transformer}
    exec(notebook_class("05_encoder_decoder.ipynb", "NeighbourMemory"), namespace)
    torch.manual_seed(0)
    model = course_nn.Transformer(13, 13, 16, 2, 32, 1, dropout=0.1, pad_id=0).eval()
    src = torch.randint(3, 13, (4, 5))
    wrapper = namespace["NeighbourMemory"](model)

    got = greedy_decode_calling_eval(wrapper, src, 6)

    # The wrapper still does its job: each row decodes from its neighbour's memory.
    assert torch.equal(got, course_nn.greedy_decode(namespace["NeighbourMemory"](model), src, 6))
    assert not model.training  # and the wrapped model is left in eval mode, as 5.8 requires
