"""A built-in the exercise text forbids, found in the answer's source by its syntax tree.

One reading serves the notebook (:func:`source_of` the function given) and the grader (the
student's cells, :func:`judge_sources`): :func:`uses` finds an attribute of anything
(``F.softmax``, ``x.softmax(...)``), an imported name (``from torch import softmax as s``) and a
string read by ``getattr``. Spellings of a name are endless where code reaches objects by
name or through the interpreter's state, so the grader does not list them: where a text forbids
a function, *any* dynamic reach in the answer (:func:`dynamic`: reflective built-ins under any
name, the modules made for it, dunder attributes, star imports, IPython lines) sends the
exercise to the instructor: no automatic point, the reason told to the student and flagged
(:func:`judge_sources`). Where a text forbids nothing, nothing is read: ``getattr`` by a module's
name (10.2) keeps its points. Decision for 0.1: its text forbids only ``torch.softmax`` and
states a tensor in and out; an answer computing with NumPy's ``exp`` and ``sum`` meets it.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Sequence
from typing import Any

# Dynamic reach, by family: each is a way from a *string* (or from the interpreter's own state)
# to an object, which the syntax tree cannot follow. Any mention of one counts, called or not
# (``g = getattr`` is getattr under another name), read from anything (``builtins.eval``).
# Built-ins that turn names into objects, run text as code, or open the interpreter's tables:
_REFLECTIVE = {
    "getattr", "setattr", "delattr", "hasattr", "vars", "dir", "globals", "locals", "eval",
    "exec", "compile", "__import__", "breakpoint", "get_ipython", "attrgetter", "methodcaller",
    "resolve_name", "import_module", "get_objects", "get_referrers", "get_referents",
    "_getframe", "currentframe", "getmembers", "f_back", "f_globals", "f_locals",
    "f_builtins", "tb_frame", "gi_frame", "cr_frame", "ag_frame", "run_cell", "run_line_magic",
    "run_cell_magic", "user_ns",
}  # fmt: skip
# Modules whose purpose is reaching objects by name or through the interpreter's state (frames,
# the garbage collector, the module table, code objects, pickles that name any global).
_REFLECTIVE_MODULES = {
    "builtins", "importlib", "pkgutil", "gc", "inspect", "sys", "operator", "ctypes", "types",
    "pickle", "_pickle", "marshal", "copyreg", "dill", "cloudpickle", "code", "codeop", "runpy",
    "timeit", "pdb", "bdb", "trace", "traceback", "weakref", "IPython", "subprocess", "os",
    "multiprocessing", "ast", "dis", "imp", "zipimport", "__main__",
}  # fmt: skip
# Those modules read as an attribute of another (``torch.sys.modules``, ``np.os``).
_REFLECTIVE_ATTRIBUTES = {
    "sys", "gc", "inspect", "builtins", "importlib", "pkgutil", "ctypes", "pickle", "marshal",
    "os", "subprocess", "operator",
}  # fmt: skip
# A dunder attribute reaches the object model itself (``__dict__``, ``__subclasses__``,
# ``__globals__``, ``__class__``...); these few only construct or name.
_PLAIN_DUNDERS = {"__init__", "__name__", "__doc__"}
# IPython lines the grader reads as harmless settings, not as code.
_PLAIN_MAGICS = ("%matplotlib", "%config")


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
        # ``torch._softmax``, ``torch.ops.aten._softmax``: the same function, privately named
        if (
            isinstance(node, ast.Attribute)
            and node.attr.strip("_") in leaves
            and not _checks(node.value)
        ):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom):
            found += [
                f"from {node.module} import {a.name}"
                for a in node.names
                if a.name.strip("_") in leaves
            ]
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


def _object_model(name: str) -> bool:
    """A dunder name other than the few that only construct or name (``__init__``)."""
    dunder = len(name) > 4 and name.startswith("__") and name.endswith("__")
    return dunder and name not in _PLAIN_DUNDERS


def _magics(source: str) -> list[str]:
    """IPython magics and shell lines (``%time ...``, ``!python ...``): code the tree never sees."""
    found = []
    for line in source.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")) and not stripped.startswith(_PLAIN_MAGICS):
            found.append(f"the IPython line `{stripped.split()[0][:30]}`")
    return found


def dynamic(source: str) -> list[str]:
    """Every way ``source`` reaches objects the syntax tree cannot follow, by family: a reflective
    built-in or helper named at all (``getattr``, ``eval``, ``attrgetter``, ``resolve_name``,
    ``_getframe``, ``get_objects``...), a module made for it imported in any form (``gc``,
    ``inspect``, ``sys``, ``importlib``, ``builtins``, ``operator``, ``pickle``...), a dunder
    attribute or name (``__dict__``, ``__subclasses__``, ``__builtins__``), a star import, an
    IPython magic or shell line, and a source the grader cannot parse at all."""
    tree = _parse(source)
    if tree is None and source.strip():
        return ["code that does not parse"]
    found: list[str] = _magics(source)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Name) and (node.id in _REFLECTIVE or _object_model(node.id)):
            found.append(f"`{node.id}`")
        elif isinstance(node, ast.Attribute):
            attribute = node.attr
            if attribute in _REFLECTIVE or attribute in _REFLECTIVE_ATTRIBUTES:
                found.append(f"`.{attribute}`")
            elif _object_model(attribute):
                found.append(f"`.{attribute}`")
        elif isinstance(node, ast.Import):
            found += [f"`import {a.name}`" for a in node.names if _reflective_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if _reflective_module(module):
                found.append(f"`from {module} import ...`")
            if any(a.name == "*" for a in node.names):
                found.append(f"`from {module} import *`")
            found += [f"`{a.name}`" for a in node.names if a.name in _REFLECTIVE]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _reflective_module(node.value):  # __import__("gc"), import_module("sys")
                found.append(f"the module name {node.value!r}")
    return sorted(set(found))


def _reflective_module(name: str) -> bool:
    return name.split(".")[0] in _REFLECTIVE_MODULES


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
    # Only where a name is forbidden: elsewhere dynamic reach hides nothing and costs nothing.
    reached = dynamic(text)
    if not reached:
        return
    why = review(reached, names)
    result.flags = [*result.flags, f"to review by hand: {why}"]
    if result.status == "passed":  # no automatic point: the instructor decides (MANUAL)
        result.status = "failed"
        result.message = f"❌ {check.exercise} ({check.title}): {why}"
    else:
        result.message = f"{result.message}\n{why}"


def review(reached: Sequence[str], names: Sequence[str]) -> str:
    """Why an exercise goes to the instructor: what the answer reaches dynamically."""
    return (
        f"your answer reaches objects by name or through the interpreter "
        f"({', '.join(reached[:8])}), and the exercise text says not to use "
        f"{' or '.join(f'`{n}`' for n in names)}: the grader cannot tell what it calls, so this "
        "exercise earns no automatic point and your instructor reviews it by hand."
    )
