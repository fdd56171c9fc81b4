"""Issue 38: a built-in the exercise text forbids is named, in the notebook and on the trusted
side alike, from the answer's syntax tree (course/forbidden.py); dynamic access is flagged."""

from __future__ import annotations

import pytest

from course import forbidden
from course.checks import nb00
from course.grading.verdict import ExerciseResult

RIGHT = """
def softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)  # not torch.softmax, as the text says
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)
check.softmax(softmax)
"""

SPELLINGS = {
    "torch.softmax(x, dim)": "torch.softmax",
    "x.softmax(dim)": "x.softmax",
    "F.softmax(x, dim)": "F.softmax",
    "torch.nn.functional.softmax(x, dim)": "torch.nn.functional.softmax",
    "torch.special.softmax(x, dim)": "torch.special.softmax",
    "torch.nn.Softmax(dim)(x)": "torch.nn.Softmax",
    "getattr(torch, 'softmax')(x, dim)": "getattr(torch, 'softmax')",
}


def _result(status: str = "passed") -> ExerciseResult:
    return ExerciseResult("00_welcome.ipynb", "0.1", "softmax", status, "✅ passed")


@pytest.mark.parametrize("call", sorted(SPELLINGS))
def test_every_known_spelling_is_named_on_the_trusted_side(call):
    result = _result()
    source = f"import torch.nn.functional as F\ndef softmax(x, dim=-1):\n    return {call}\n"
    forbidden.judge_sources(result, nb00.softmax, [source])
    assert result.status == "failed" and f"`{SPELLINGS[call]}`" in result.message


def test_an_import_of_the_name_is_named():
    result = _result()
    forbidden.judge_sources(result, nb00.softmax, ["from torch import softmax as s\n"])
    assert result.status == "failed" and "from torch import softmax" in result.message


def test_the_right_answer_and_the_check_call_are_not_named():
    result = _result()
    forbidden.judge_sources(result, nb00.softmax, [RIGHT])
    assert result.status == "passed" and not result.flags


def test_dynamic_access_is_flagged_for_the_instructor():
    result = _result()
    source = RIGHT + "\nf = getattr(torch, 'soft' + 'max')\nexec('g = 1')\n"
    forbidden.judge_sources(result, nb00.softmax, [source])
    assert result.flags and "exec(...)" in result.flags[0] and "getattr(...)" in result.flags[0]


def test_a_check_whose_text_forbids_nothing_reads_nothing():
    result = _result()
    forbidden.judge_sources(result, None, ["exec('torch.softmax')"])
    assert result.status == "passed" and not result.flags
