"""Every named mistake of every spec (``course.framework.spec.Mistake``), run as a student's answer, is
rejected by its check and reported by its own name, as data (``result.mistake``) and in words."""

from __future__ import annotations

import ast
from math import prod
from pathlib import Path

import pytest

from course.framework.check import FAILED
from tests.mistakes import answers, every_mistake, mistake_id

MISTAKES = list(every_mistake())
CHECKS = Path(__file__).resolve().parent.parent / "course" / "checks"


def _declared(tree: ast.AST) -> int:
    """The ``Mistake(...)`` calls in a module's source; one made in a comprehension over a
    literal table counts once per row of the table."""
    total = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            total += name == "Mistake"
        elif isinstance(node, ast.GeneratorExp | ast.ListComp) and _declared(node.elt):
            tables = [g.iter for g in node.generators]
            assert all(isinstance(t, ast.Tuple | ast.List) for t in tables), ast.unparse(node)
            # the walk counts the call once; each further row of its table makes one more
            total += _declared(node.elt) * (prod(len(t.elts) for t in tables) - 1)
    return total


def test_every_declared_mistake_is_run():
    """However a checks module declares its mistakes, each one reaches the tests below."""
    declared = {
        path.stem: _declared(ast.parse(path.read_text())) for path in sorted(CHECKS.glob("*.py"))
    }
    assert len(MISTAKES) == sum(declared.values()), declared


@pytest.mark.parametrize("item", MISTAKES, ids=[mistake_id(m) for m in MISTAKES])
def test_each_named_mistake_is_rejected_by_its_own_name(item):
    check, spec, mistake = item
    result = check(*answers(check, spec, mistake), raise_on_failure=False)
    assert result.status == FAILED, f"{mistake.name} was accepted"
    assert result.mistake == mistake.name, result.message
    assert f"what {mistake.name} gives" in result.message, result.message
    assert result.prop == mistake.breaks, result.prop
