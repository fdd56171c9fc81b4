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

import bisect
from collections.abc import Iterable

import nbformat

from course.grading.cells import (  # noqa: F401 - re-exported for the callers of selection
    cell_code,
    cell_names,
    every_name,
    syntax_error,
    used_imports_only,
)
from course.grading.merging import check_names, is_answer_cell


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
