"""A built-in the exercise text forbids, found in the answer's source by its syntax tree.

One reading serves the notebook (:func:`source_of` the function given) and the grader (the
student's cells, :func:`judge_sources`): :func:`uses` finds an attribute of anything
(``F.softmax``, ``x.softmax(...)``), an imported name (``from torch import softmax as s``) and a
string read by ``getattr``. Names the tree cannot follow (``exec``, a computed ``getattr``,
``importlib``, ``vars()``...) are :func:`dynamic`: flagged for the instructor (the README's "not
protected"). Decision for 0.1 (issue 38): its text forbids only ``torch.softmax`` and states a
tensor in and out; an answer computing with NumPy's ``exp`` and ``sum`` meets it.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Sequence
from typing import Any

_DYNAMIC_CALLS = {"exec", "eval", "compile", "__import__", "globals", "vars", "locals"}
_DYNAMIC_ATTRIBUTES = {"__dict__", "__getattribute__", "import_module", "__builtins__"}


def _parse(source: str) -> ast.AST | None:
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _checks(node: ast.AST) -> bool:
    """``check.softmax``: the notebook's check module, which an answer cell may call."""
    return isinstance(node, ast.Name) and node.id == "check"


def uses(source: str, names: Sequence[str]) -> list[str]:
    """Every spelling in ``source`` that reaches one of ``names`` (``"torch.softmax"``: its last
    part is the name looked for, whatever object it is read from)."""
    leaves = {name.rsplit(".", 1)[-1] for name in names}
    tree = _parse(source)
    found: list[str] = []
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Attribute) and node.attr in leaves and not _checks(node.value):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom):
            found += [f"from {node.module} import {a.name}" for a in node.names if a.name in leaves]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in leaves
        ):
            found.append(ast.unparse(node))
    return sorted(set(found))


def dynamic(source: str) -> list[str]:
    """The ways ``source`` reaches names the syntax tree cannot follow (for the instructor)."""
    tree = _parse(source)
    found: list[str] = []
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            computed = node.func.id == "getattr" and not (
                len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
            )
            if node.func.id in _DYNAMIC_CALLS or computed:
                found.append(f"{node.func.id}(...)")
        elif isinstance(node, ast.Attribute) and node.attr in _DYNAMIC_ATTRIBUTES:
            found.append(f".{node.attr}")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if "importlib" in [*modules, getattr(node, "module", None)]:
                found.append("importlib")
    return sorted(set(found))


def message(used: Sequence[str], names: Sequence[str]) -> str:
    spelled = ", ".join(f"`{u}`" for u in used)
    return (
        f"your answer uses {spelled}, and the exercise text says not to use "
        f"{' or '.join(f'`{n}`' for n in names)}: write it from the operations the text lists."
    )


def source_of(function: Any) -> str:
    """The source the student wrote for ``function`` (its class for a module), or ``""``."""
    target = function if inspect.isfunction(function) or inspect.isclass(function) else None
    try:
        return inspect.getsource(target) if target is not None else ""
    except (OSError, TypeError):
        return ""


def judge_sources(result: Any, check: Callable, sources: Sequence[str]) -> None:
    """The grader's side: ``result`` (an ExerciseResult) of ``check`` fails where the student's
    cells ``sources`` use a name its spec forbids, and is flagged where they reach names
    dynamically. Changes ``result`` in place."""
    names = getattr(getattr(check, "spec", None), "forbidden", ())
    if not names:
        return
    text = "\n".join(sources)
    used = uses(text, names)
    if used and result.status == "passed":
        result.status = "failed"
        result.message = f"❌ {check.exercise} ({check.title}): {message(used, names)}"
    reached = dynamic(text)  # only where a name is forbidden: elsewhere there is nothing to hide
    if reached:
        result.flags = [*result.flags, f"reaches names dynamically ({', '.join(reached)})"]
