"""Choosing the cells to run: only what the checks need.

Seeds: the setup cell (the first code cell), every answer cell and every check cell. Then,
repeatedly, for each global name a needed cell uses, the cell defining it is needed too: the
nearest earlier cell that defines it (by assignment, ``def``, ``class``, ``import``, or
``x[...] =`` / ``x.attr =``), or, when none does, a later one that still runs before the next
check cell (a helper the student put below the answer that calls it). Training, plotting and
evaluation cells that no check depends on are skipped; cells the student added run exactly when
an answer or a check depends on them.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import re
from collections.abc import Iterable

import nbformat

from course.grading.merging import cell_code, check_names, is_answer_cell

_BUILTINS = frozenset(dir(builtins))


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
    cost (issue 31)."""
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


class Dependencies:
    """Which code cell each needed cell depends on, in one notebook.

    Linear in the notebook's names: each name keeps the sorted list of the cells defining it,
    and a look-up is a binary search (a notebook of chained cells costs no more per cell)."""

    def __init__(self, notebook: nbformat.NotebookNode):
        self.notebook = notebook
        self.code = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
        self.names = {i: cell_names(notebook.cells[i].source) for i in self.code}
        self.checks = [i for i in self.code if check_names(notebook.cells[i])]
        self._checks = set(self.checks)
        self._definers: dict[str, list[int]] = {}
        for i in self.code:  # in order: each list is sorted
            for name in self.names[i][0]:
                self._definers.setdefault(name, []).append(i)

    def definer(self, name: str, index: int) -> int | None:
        """The cell that gives ``name`` its value when cell ``index`` (or what it defines) runs."""
        cells = self._definers.get(name, [])
        at = bisect.bisect_left(cells, index)
        if at > 0 or index in self._checks:
            return cells[at - 1] if at > 0 else None
        after = bisect.bisect_right(self.checks, index)
        next_check = self.checks[after] if after < len(self.checks) else len(self.notebook.cells)
        later = bisect.bisect_right(cells, index)
        return cells[later] if later < len(cells) and cells[later] < next_check else None

    def closure(self, seeds: Iterable[int]) -> set[int]:
        """``seeds`` and every cell they depend on, transitively."""
        needed: set[int] = set()
        todo = sorted(set(seeds) & set(self.names))
        while todo:
            index = todo.pop()
            if index in needed:
                continue
            needed.add(index)
            for name in self.names[index][1]:
                found = self.definer(name, index)
                if found is not None and found not in needed:
                    todo.append(found)
        return needed


def needed_cells(notebook: nbformat.NotebookNode, answers: Iterable[int] = ()) -> list[int]:
    """Indices of the code cells the checks need, in notebook order.

    Seeds: the setup cell, every answer cell (a stub, or an index in ``answers``: the template's
    answer cells once a student filled them) and every check cell; then what they depend on.
    """
    graph = Dependencies(notebook)
    if not graph.code:
        return []
    seeds = (
        {graph.code[0]}
        | set(answers)
        | {i for i in graph.code if is_answer_cell(notebook.cells[i])}
        | set(graph.checks)
    )
    return sorted(graph.closure(seeds))
