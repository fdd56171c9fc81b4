"""Every named mistake of every spec (``course.spec.Mistake``), run as a student's answer, is
rejected by its check and reported by its own name, as data (``result.mistake``) and in words."""

from __future__ import annotations

import pytest

from course.check import FAILED
from tests.mistakes import answers, every_mistake, mistake_id

MISTAKES = list(every_mistake())


def test_the_specs_declare_mistakes():
    assert len(MISTAKES) >= 5, [mistake_id(m) for m in MISTAKES]


@pytest.mark.parametrize("item", MISTAKES, ids=[mistake_id(m) for m in MISTAKES])
def test_each_named_mistake_is_rejected_by_its_own_name(item):
    check, spec, mistake = item
    result = check(*answers(check, spec, mistake), raise_on_failure=False)
    assert result.status == FAILED, f"{mistake.name} was accepted"
    assert result.mistake == mistake.name, result.message
    assert f"what {mistake.name} gives" in result.message, result.message
    assert result.prop == mistake.breaks, result.prop
