"""The source of one code cell, analysed: as plain Python, the names it binds and uses.

One job, shared by :mod:`course.grading.merging` (which cell is an answer) and
:mod:`course.grading.selection` (which cells a check needs); neither imports the other's
analysis through a circle.
"""

from __future__ import annotations

import ast
import builtins
import re

_BUILTINS = frozenset(dir(builtins))


def cell_code(source: str) -> str:
    """A code cell as plain Python (IPython magics and ``!`` lines turned into calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - a broken cell is analysed as written
        return source


class _Names(ast.NodeVisitor):
    """Top-level names a cell binds, and the global names it (or its functions) reads."""

    def __init__(self) -> None:
        self.defines: set[str] = set()
        self.uses: set[str] = set()
        self.scopes: list[set[str]] = []  # names bound in each enclosing function/class

    def _bind(self, name: str) -> None:
        (self.scopes[-1] if self.scopes else self.defines).add(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._bind(node.id)
        elif not any(node.id in scope for scope in self.scopes):
            self.uses.add(node.id)

    def _target_base(self, target: ast.expr) -> None:
        """``x[k] = v`` and ``x.a = v`` at top level change ``x``: it is defined here too."""
        while isinstance(target, ast.Subscript | ast.Attribute):
            target = target.value
        if isinstance(target, ast.Name) and not self.scopes:
            self.defines.add(target.id)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target_base(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target_base(node.target)
        if isinstance(node.target, ast.Name):
            self.uses.add(node.target.id)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            self._bind((alias.asname or alias.name).split(".")[0])

    visit_ImportFrom = visit_Import

    def _scope(self, node: ast.AST, name: str | None, arguments: ast.arguments | None) -> None:
        if name:
            self._bind(name)
        for decorator in getattr(node, "decorator_list", []):
            self.visit(decorator)
        local: set[str] = set()
        if arguments is not None:
            for default in arguments.defaults + [d for d in arguments.kw_defaults if d]:
                self.visit(default)
            every = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
            every += [a for a in (arguments.vararg, arguments.kwarg) if a]
            local |= {a.arg for a in every}
            for annotation in [a.annotation for a in every] + [getattr(node, "returns", None)]:
                if annotation is not None:  # evaluated where the function is defined
                    self.visit(annotation)
        # Names bound anywhere in the body are local to it (Python's own rule, minus `global`).
        body = node.body if isinstance(node.body, list) else [node.body]
        for statement in body:
            for sub in ast.walk(statement):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    local.add(sub.id)
                elif isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    local.add(sub.name)
                elif isinstance(sub, ast.alias):
                    local.add((sub.asname or sub.name).split(".")[0])
                elif isinstance(sub, ast.Global):
                    local -= set(sub.names)
        for base in getattr(node, "bases", []):
            self.visit(base)
        self.scopes.append(local)
        for statement in body:
            self.visit(statement)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._scope(node, node.name, node.args)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._scope(node, None, node.args)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scope(node, node.name, None)


# A cell that does not parse still says, line by line, what it means to define: its answer is
# found (and reported as the SyntaxError it is) and what depends on it runs after it.
_TOP_LEVEL = re.compile(
    r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*=[^=]", re.M
)


def cell_names(source: str) -> tuple[set[str], set[str]]:
    """``(defines, uses)`` of a code cell. A cell that does not parse (or is too deeply nested
    to walk) uses nothing and defines the names its top-level ``def``/``class``/``x =`` lines
    name."""
    try:
        tree = ast.parse(cell_code(source))
        names = _Names()
        names.visit(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {a or b for a, b in _TOP_LEVEL.findall(source)}, set()
    return names.defines, names.uses - _BUILTINS


def syntax_error(source: str) -> str | None:
    """``"SyntaxError at line N: ..."`` when a code cell does not parse, else None."""
    try:
        ast.parse(cell_code(source))
    except SyntaxError as error:
        return f"{type(error).__name__} at line {error.lineno}: {error.msg}"
    except (ValueError, RecursionError, MemoryError) as error:
        return f"{type(error).__name__}: the cell cannot be parsed"
    return None


def every_name(source: str) -> set[str] | None:
    """Every identifier a cell mentions, in any scope (None when it does not parse): a generous
    bound on what it may use, for :func:`used_imports_only`."""
    try:
        tree = ast.parse(cell_code(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def used_imports_only(source: str, used: set[str]) -> str | None:
    """A cell of nothing but imports, keeping only the names ``used`` (and ``__future__``).

    None when the cell does anything but import (or does not parse): it then runs as written.
    The template's imports cell binds ``plt``, ``viz``, ``models`` and more that no check or
    answer needs; importing them (matplotlib, transformers) in every graded notebook was pure
    cost."""
    try:
        tree = ast.parse(cell_code(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body = [n for n in tree.body if not _is_docstring(n)]
    if not body or not all(isinstance(n, ast.Import | ast.ImportFrom) for n in body):
        return None
    kept = []
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            kept.append(node)
            continue
        names = [a for a in node.names if (a.asname or a.name).split(".")[0] in used]
        if names:
            node.names = names
            kept.append(node)
    return "\n".join(ast.unparse(n) for n in kept) + ("\n" if kept else "pass\n")


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
