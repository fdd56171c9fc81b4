"""Merging a submission into its template: which cells are the student's, and where they go.

The graded notebook is the *template* (the instructor's exercise notebook) with:

* each **answer cell** (an exercise stub, or a written-answer placeholder) replaced by the
  student's version of it. A submission cell matches an answer cell by its ``id``; failing that
  (a Colab-saved notebook has no ids, a copied cell has a new one) a code cell matches by the
  names it defines at top level (``def``, ``class``, assignments), *whatever their order inside
  the cell* (a helper defined before the answer is fine), a markdown cell by its first line. The
  last matching cell wins; an answer with no match keeps the template's stub.
* each **added cell** (a code cell of the submission that is neither a template cell nor an
  answer: a helper, an import) inserted in notebook order, after the template cell that precedes
  it in the submission. Whether it runs is decided by :mod:`course.grading.selection`: only
  when an answer or a check depends on it.

Every other cell, check cells included, comes from the template: a student who edits or deletes
a check cell is graded by the real one. Outputs of the submission are never read.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course.framework.contract import ANSWER_PLACEHOLDER, STUB
from course.grading.cells import cell_code, cell_names

CHECK_CALL = re.compile(r"\bcheck\.([A-Za-z_]\w*)\s*\(")
CHECKS_IMPORT = re.compile(r"from course\.checks import (nb\d\d) as check")
NOTEBOOK_NAME = re.compile(r"^\d\d_\w+\.ipynb$")
ORIGIN = "course_origin"  # cell metadata: "template", "answer" or "added"


@dataclass
class CheckCall:
    """One check call of a template's check cell, as the *template* writes it."""

    exercise: str  # "0.1"
    check: str  # "softmax"
    cell: int  # index of the check cell in the template (and in the graded notebook's order)
    positional: int  # how many positional arguments the template passes
    keywords: tuple[str, ...]  # the keyword names the template passes


def check_names(cell: nbformat.NotebookNode) -> list[str]:
    """Names of the checks a code cell calls (``check.softmax(...)`` -> ``softmax``)."""
    return CHECK_CALL.findall(cell.source) if cell.cell_type == "code" else []


def is_answer_cell(cell: nbformat.NotebookNode) -> bool:
    """An exercise stub (``# TODO:`` + ``raise NotImplementedError``) or a written answer."""
    if cell.cell_type == "code":
        return bool(STUB.search(cell.source))
    return cell.cell_type == "markdown" and ANSWER_PLACEHOLDER in cell.source


def is_written_answer(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "markdown" and ANSWER_PLACEHOLDER in cell.source


def check_module(notebook: nbformat.NotebookNode) -> str:
    """The checks module a notebook imports as ``check`` (``course.checks.nb03``)."""
    for cell in notebook.cells:
        found = CHECKS_IMPORT.search(cell.source)
        if found:
            return f"course.checks.{found.group(1)}"
    raise ValueError("the notebook never imports `from course.checks import nbNN as check`")


def exercise_id(check: str, module: str) -> str:
    """``"0.1"`` for check ``softmax`` of ``course.checks.nb00`` (from the check's label)."""
    try:
        function = getattr(importlib.import_module(module), check, None)
    except Exception:  # noqa: BLE001 - a checks module that does not import: graded as error
        function = None
    if function is None:  # a check cell calling a check that does not exist: it will error
        return f"{module.rsplit('nb', 1)[-1].lstrip('0') or '0'}.{check}"
    return getattr(function, "exercise", check).removeprefix("Exercise").strip()


def _calls(source: str) -> list[tuple[str, int, tuple[str, ...]]]:
    """``(name, positional, keywords)`` of each ``check.name(...)`` call, by the AST."""
    try:
        tree = ast.parse(cell_code(source))
    except SyntaxError:
        return [(name, 1, ()) for name in CHECK_CALL.findall(source)]
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "check"
        ):
            keywords = tuple(k.arg for k in node.keywords if k.arg and k.arg != "raise_on_failure")
            found.append((node.func.attr, len(node.args), keywords, node.lineno, node.col_offset))
    return [(n, p, k) for n, p, k, *_ in sorted(found, key=lambda f: (f[3], f[4]))]


def check_calls(template: nbformat.NotebookNode) -> list[CheckCall]:
    """Every check call of a template, in notebook order, with its exercise id."""
    module = check_module(template)
    return [
        CheckCall(exercise_id(name, module), name, index, positional, keywords)
        for index, cell in enumerate(template.cells)
        if cell.cell_type == "code" and check_names(cell)
        for name, positional, keywords in _calls(cell.source)
    ]


def exercises(template: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """``(exercise id, check name)`` of every check cell of a template, in notebook order."""
    return [(call.exercise, call.check) for call in check_calls(template)]


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read and validate a notebook; raise ``ValueError`` with a short reason otherwise.

    Within :mod:`course.grading.limits`' bounds (``"... is too large: ..."``), nbformat 3
    converted, outputs dropped.
    """
    from course.grading.limits import MAX_FILE_BYTES, normalise

    path = Path(path)
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ValueError(
            f"{path.name} is not a readable notebook ({type(error).__name__})"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{path.name} is too large: more than {MAX_FILE_BYTES:,} bytes")
    parsed = normalise(data, path.name)  # NotebookRefused is a ValueError
    try:
        notebook = nbformat.reads(json.dumps(parsed), as_version=4)  # sources as one string
        nbformat.validate(notebook)
    except Exception as error:  # noqa: BLE001 - any reason makes it "not a notebook"
        raise ValueError(
            f"{path.name} is not a readable notebook ({type(error).__name__})"
        ) from None
    return notebook


# --- matching --------------------------------------------------------------------------------


def defined_names(source: str) -> set[str]:
    """Top-level names a code cell defines (``def``, ``class``, assignment, import)."""
    return cell_names(source)[0]


def imported_names(source: str) -> set[str]:
    """Top-level names a code cell binds by ``import`` statements (none when it does not parse)."""
    try:
        tree = ast.parse(cell_code(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return {
        (alias.asname or alias.name).split(".")[0]
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


def answer_names(source: str) -> set[str]:
    """The names an answer is recognised by: what a code cell defines other than by importing
    (an exercise cell that also imports ``torch`` is matched by its ``def``, not its imports).
    A cell that only imports has none: it is never taken for an answer."""
    return defined_names(source) - imported_names(source)


def _heading(source: str) -> str:
    return source.strip().split("\n")[0].strip()


def _normal(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


@dataclass
class Merged:
    """The graded notebook and where its cells came from (indices into ``notebook.cells``)."""

    notebook: nbformat.NotebookNode
    answers: list[int] = field(default_factory=list)  # answer cells (the student's version)
    added: list[int] = field(default_factory=list)  # code cells the student added
    template_index: dict[int, int] = field(default_factory=dict)  # graded index -> template
    matched: dict[int, str] = field(default_factory=dict)  # answer index -> "id", "names", ...


def _copy(cell: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return nbformat.from_dict(json.loads(json.dumps(cell)))


def _match_answers(
    template: nbformat.NotebookNode, submission: nbformat.NotebookNode
) -> dict[int, tuple[int, str]]:
    """Template answer index -> (submission cell index, how it matched).

    By id first. Failing that, a code answer is the submission cell sharing the most of its
    :func:`answer_names`, among the cells the student could have written it in: never a cell
    that is one of the template's other cells (same source, or same id), never a cell that only
    imports."""
    by_id = {cell.get("id"): i for i, cell in enumerate(submission.cells) if cell.get("id")}
    theirs = [c for c in template.cells if not is_answer_cell(c)]
    template_ids = {c.get("id") for c in theirs if c.get("id")}
    template_sources = {_normal(c.source) for c in theirs}
    names = {
        i: answer_names(cell.source)
        for i, cell in enumerate(submission.cells)
        if cell.cell_type == "code"
        and cell.get("id") not in template_ids
        and _normal(cell.source) not in template_sources
    }
    found: dict[int, tuple[int, str]] = {}
    for t, cell in enumerate(template.cells):
        if not is_answer_cell(cell):
            continue
        s = by_id.get(cell.get("id"))
        if s is not None and submission.cells[s].cell_type == cell.cell_type:
            found[t] = (s, "id")
            continue
        if cell.cell_type == "code":
            wanted = answer_names(cell.source) or defined_names(cell.source)
            if not wanted:
                continue
            scored = [(len(wanted & n), i) for i, n in names.items() if wanted & n]
            if scored:
                best = max(score for score, _ in scored)
                found[t] = (max(i for score, i in scored if score == best), "names")
        else:
            key = _heading(cell.source)
            same = [
                i
                for i, other in enumerate(submission.cells)
                if other.cell_type == "markdown" and key and _heading(other.source) == key
            ]
            if same:
                found[t] = (same[-1], "heading")
    return found


def merge(template: nbformat.NotebookNode, submission: nbformat.NotebookNode) -> Merged:
    """The graded notebook: the template, the student's answers, and the cells they added."""
    answers = _match_answers(template, submission)
    answer_of = {s: t for t, (s, _) in answers.items()}
    template_ids = {cell.get("id") for cell in template.cells if cell.get("id")}
    template_sources = {_normal(cell.source): t for t, cell in enumerate(template.cells)}
    # Which template cell each submission cell stands for (None: the student added it).
    anchors: list[int | None] = []
    for s, cell in enumerate(submission.cells):
        if s in answer_of:
            anchors.append(answer_of[s])
        elif cell.get("id") in template_ids:
            anchors.append(next(t for t, c in enumerate(template.cells) if c.get("id") == cell.id))
        elif _normal(cell.source) in template_sources:
            anchors.append(template_sources[_normal(cell.source)])
        else:
            anchors.append(None)
    # Added code cells, after the template cell that precedes them in the submission.
    after: dict[int, list[nbformat.NotebookNode]] = {}
    last = -1
    for s, cell in enumerate(submission.cells):
        if anchors[s] is not None:
            last = max(last, anchors[s])
            continue
        if cell.cell_type != "code" or not cell.source.strip() or check_names(cell):
            continue  # prose, empty cells and the student's own check calls are not answers
        after.setdefault(last, []).append(cell)
    merged = Merged(nbformat.v4.new_notebook(metadata=_copy(template.metadata)))
    out = merged.notebook.cells

    def place(cell: nbformat.NotebookNode, origin: str, template_index: int | None) -> None:
        cell = _copy(cell)
        cell.metadata[ORIGIN] = origin
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        index = len(out)
        out.append(cell)
        if template_index is not None:
            merged.template_index[index] = template_index
        if origin == "answer":
            merged.answers.append(index)
        elif origin == "added":
            merged.added.append(index)

    for extra in after.get(-1, []):
        place(extra, "added", None)
    for t, cell in enumerate(template.cells):
        if t in answers:
            s, how = answers[t]
            answer = _copy(cell)
            answer.source = submission.cells[s].source
            place(answer, "answer", t)
            merged.matched[len(out) - 1] = how
        else:
            place(cell, "answer" if is_answer_cell(cell) else "template", t)
        for extra in after.get(t, []):
            place(extra, "added", None)
    return merged
