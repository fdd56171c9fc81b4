"""Instrumenting the graded notebook: each check call becomes a probe whose record is data.

In the student's kernel, ``check.softmax(softmax)`` in a check cell is rewritten to::

    __course_grading__.record("softmax", SEED, check.softmax, softmax)

:func:`record` runs :func:`course.framework.check.probe` (the check body on the student's objects, every
observation recorded), prints the student-side report, and writes the encoded record
(:func:`course.framework.observe.encode`: JSON and safetensors, never a pickle) to
``$COURSE_GRADING_RECORDS/softmax.rec``, one file per check, the last call winning.

Nothing here is trusted: the student's process may patch this module, the check or the record.
The grader's trusted process (:mod:`course.grading.verdict`) replays the check's own body on the
recorded *data*, with inputs and references it computes itself; a record passes only if its
observations are the right answers.

This module is imported inside the student's kernel: keep it light (no nbformat, no jupyter).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any

HOOK = "__course_grading__"
RECORDS_ENV = "COURSE_GRADING_RECORDS"
PRELUDE = f"import course.grading.instrument as {HOOK}"
RECORD_SUFFIX = ".rec"
_NAME = re.compile(r"^[A-Za-z_]\w*$")


def record_path(folder: str | os.PathLike, name: str) -> Path:
    """Where the record of check ``name`` lives in the scratch folder ``folder``."""
    if not _NAME.match(name):
        raise ValueError(f"not a check name: {name!r}")
    return Path(folder) / f"{name}{RECORD_SUFFIX}"


def record(name: str, seed: int, check: Any, *args: Any, **kwargs: Any) -> None:
    """(In the student's kernel) probe ``check`` on the student's objects; write its record."""
    from course.framework.check import probe
    from course.framework.observe import REPORTED

    path = record_path(os.environ[RECORDS_ENV], name)
    path.unlink(missing_ok=True)  # the last call wins, even when it fails to produce one
    result, data = probe(check, *args, seed=seed, effects=REPORTED, **kwargs)
    print(result.report())
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


class _ProbeChecks(ast.NodeTransformer):
    """``check.name(a, k=v)`` -> ``__course_grading__.record("name", seed, check.name, a, k=v)``."""

    def __init__(self, seed: int):
        self.seed = seed

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "check"
        ):
            return ast.Call(
                func=ast.Attribute(ast.Name(HOOK, ast.Load()), "record", ast.Load()),
                args=[ast.Constant(func.attr), ast.Constant(self.seed), func, *node.args],
                keywords=[k for k in node.keywords if k.arg != "raise_on_failure"],
            )
        return node


def probe_source(source: str, seed: int = 0) -> str:
    """A check cell's source with every ``check.name(...)`` call rewritten to a probe."""
    tree = ast.fix_missing_locations(_ProbeChecks(seed).visit(ast.parse(source)))
    return ast.unparse(tree)


def instrument(notebook: Any, cells: list[int], seed: int = 0, timeouts: dict | None = None) -> Any:
    """Only ``cells`` of ``notebook``, after a prelude importing this module; checks probed.

    Each cell keeps its index in ``metadata.course_index`` and its time limit (seconds, from
    ``timeouts``) in ``metadata.course_timeout``.
    """
    import json

    import nbformat

    from course.grading.merging import check_names

    out = nbformat.v4.new_notebook(metadata=notebook.metadata)
    prelude = nbformat.v4.new_code_cell(PRELUDE)
    prelude["id"] = "course-grading-prelude"
    prelude.metadata["course_index"] = -1
    out.cells.append(prelude)
    for index in cells:
        cell = nbformat.from_dict(json.loads(json.dumps(notebook.cells[index])))
        if check_names(cell):
            cell.source = probe_source(cell.source, seed)
        cell["id"] = f"course-cell-{index}"  # unique, also for a Colab notebook that had none
        cell.metadata["course_index"] = index
        if timeouts and index in timeouts:
            cell.metadata["course_timeout"] = timeouts[index]
        out.cells.append(cell)
    return out
