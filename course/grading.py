"""The grading engine behind ``make progress``, ``make grade`` and the Gradescope autograder.

A graded notebook is built from a *template* (the instructor's exercise notebook) and a
*submission*: only the answer cells (exercise stubs and written answers, matched by cell id,
then by their ``def``/``class`` line) come from the submission; every other cell, check cells
included, comes from the template. Outputs of the submission are never read.

Only the cells the checks need run (:func:`needed_cells`): the setup cell, the answer and check
cells, and, transitively, the earlier cells that define a name one of those uses. Training,
plotting and evaluation cells that no check depends on are skipped.

Each notebook runs in its own kernel process (:func:`run_notebook`): a wall-clock limit, an
address-space limit (``RLIMIT_AS``), offline environment variables and a scratch working folder.
Each check cell's call ``check.name(...)`` is rewritten to record its :class:`CheckResult` as a
JSON line instead of raising, so a failing check never stops the later ones.

Statuses per exercise: passed, failed, not implemented (the checks' own), error (the check
could not run: the answer cell broke, the kernel died, the file is not a notebook), timeout,
and missing (no such notebook in the submission).

These limits are a seatbelt against accidents, not a sandbox: student code runs with the
grader's rights and could, if written to, forge results. Grade in a container or a VM.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

PASSED, FAILED, NOT_IMPLEMENTED = "passed", "failed", "not implemented"
ERROR, TIMEOUT, MISSING = "error", "timeout", "missing"

CHECK_CALL = re.compile(r"\bcheck\.([A-Za-z_]\w*)\s*\(")
STUB = re.compile(r"^\s*# TODO:.*\n\s*raise NotImplementedError\s*$", re.MULTILINE)
ANSWER_PLACEHOLDER = "**Your answer:** *write it here.*"  # = nbtools.ANSWER_PLACEHOLDER
SIGNATURE = re.compile(r"^(?:async\s+)?(?:def|class)\s+\w+.*$", re.MULTILINE)
NOTEBOOK_NAME = re.compile(r"^\d\d_\w+\.ipynb$")

DEFAULT_TIMEOUT_S = 600
DEFAULT_MEMORY_GB = 8.0
OFFLINE_ENV = {
    "COURSE_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MPLBACKEND": "Agg",
    "PYTHONDONTWRITEBYTECODE": "1",
}


@dataclass
class ExerciseResult:
    """The grade of one exercise: ``exercise`` is its id (``"0.1"``)."""

    notebook: str
    exercise: str
    check: str
    status: str
    message: str = ""
    seconds: float = 0.0  # wall-clock time of the whole notebook this exercise belongs to

    @property
    def passed(self) -> bool:
        return self.status == PASSED


# --- reading notebooks ---------------------------------------------------------------------


def cell_code(source: str) -> str:
    """A code cell as plain Python (IPython magics and ``!`` lines turned into calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - a broken cell is analysed as written
        return source


def check_names(cell: nbformat.NotebookNode) -> list[str]:
    """Names of the checks a code cell calls (``check.softmax(...)`` -> ``softmax``)."""
    return CHECK_CALL.findall(cell.source) if cell.cell_type == "code" else []


def is_answer_cell(cell: nbformat.NotebookNode) -> bool:
    """An exercise stub (``# TODO:`` + ``raise NotImplementedError``) or a written answer."""
    if cell.cell_type == "code":
        return bool(STUB.search(cell.source))
    return cell.cell_type == "markdown" and ANSWER_PLACEHOLDER in cell.source


def exercise_id(check: str, module: str) -> str:
    """``"0.1"`` for check ``softmax`` of ``course.checks.nb00`` (from the check's label)."""
    import importlib

    function = getattr(importlib.import_module(module), check, None)
    if function is None:  # a check cell calling a check that does not exist: it will error
        return f"{module.rsplit('nb', 1)[-1].lstrip('0') or '0'}.{check}"
    return getattr(function, "exercise", check).removeprefix("Exercise").strip()


def check_module(notebook: nbformat.NotebookNode) -> str:
    """The checks module a notebook imports as ``check`` (``course.checks.nb03``)."""
    for cell in notebook.cells:
        found = re.search(r"from course\.checks import (nb\d\d) as check", cell.source)
        if found:
            return f"course.checks.{found.group(1)}"
    raise ValueError("the notebook never imports `from course.checks import nbNN as check`")


def exercises(template: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """``(exercise id, check name)`` of every check cell of a template, in notebook order."""
    module = check_module(template)
    return [
        (exercise_id(name, module), name) for cell in template.cells for name in check_names(cell)
    ]


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read and validate a notebook; raise ``ValueError`` with a short reason otherwise."""
    try:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
    except Exception as error:  # noqa: BLE001 - any reason makes it "not a notebook"
        raise ValueError(
            f"{path.name} is not a readable notebook ({type(error).__name__})"
        ) from None
    return notebook


# --- building the graded notebook ----------------------------------------------------------


def _signature(source: str) -> str | None:
    found = SIGNATURE.search(source)
    return found.group(0).split("(")[0].split(":")[0].strip() if found else None


def _heading(source: str) -> str:
    return source.strip().split("\n")[0].strip()


def merge(
    template: nbformat.NotebookNode, submission: nbformat.NotebookNode
) -> nbformat.NotebookNode:
    """The template with each answer cell's source taken from the submission.

    A submission cell matches an answer cell by ``id``; failing that (a copied or re-created
    cell), by the same ``def``/``class`` line (code) or first line (markdown), the last such cell
    winning. An answer with no match keeps the template's stub.
    """
    graded = nbformat.from_dict(json.loads(json.dumps(template)))
    by_id = {cell.get("id"): cell for cell in submission.cells if cell.get("id")}
    for cell in graded.cells:
        if not is_answer_cell(cell):
            continue
        match = by_id.get(cell.get("id"))
        if match is None or match.cell_type != cell.cell_type:
            key = _signature(cell.source) if cell.cell_type == "code" else _heading(cell.source)
            same = [
                other
                for other in submission.cells
                if other.cell_type == cell.cell_type
                and key
                and (
                    _signature(other.source) if cell.cell_type == "code" else _heading(other.source)
                )
                == key
            ]
            match = same[-1] if same else None
        if match is not None:
            cell.source = match.source
    for cell in graded.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return graded


# --- which cells run -----------------------------------------------------------------------


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


def cell_names(source: str) -> tuple[set[str], set[str]]:
    """``(defines, uses)`` of a code cell; a cell that does not parse defines and uses nothing."""
    try:
        tree = ast.parse(cell_code(source))
    except SyntaxError:
        return set(), set()
    names = _Names()
    names.visit(tree)
    return names.defines, names.uses - set(dir(builtins))


def needed_cells(notebook: nbformat.NotebookNode, answers: Iterable[int] = ()) -> list[int]:
    """Indices of the code cells the checks need, in notebook order.

    Seeds: the setup cell (the first code cell), every answer cell (a stub, or an index in
    ``answers``: the template's answer cells once a student filled them) and every check cell. Then,
    repeatedly, for each name a needed cell uses, the nearest earlier cell defining it (by
    assignment, ``def``, ``class``, ``import``, or ``x[...] =`` / ``x.attr =``) is needed too.
    """
    code = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    if not code:
        return []
    names = {i: cell_names(notebook.cells[i].source) for i in code}
    seeds = (
        {code[0]}
        | {i for i in answers if i in names}
        | {i for i in code if is_answer_cell(notebook.cells[i]) or check_names(notebook.cells[i])}
    )
    needed, todo = set(), sorted(seeds)
    while todo:
        index = todo.pop()
        if index in needed:
            continue
        needed.add(index)
        for name in names[index][1]:
            earlier = [i for i in code if i < index and name in names[i][0]]
            if earlier and earlier[-1] not in needed:
                todo.append(earlier[-1])
    return sorted(needed)


# --- the recorder injected into the kernel -------------------------------------------------

RECORDER = '''\
def __course_record__(name, check, *args, **kwargs):
    """Run one check without raising and record its result as a JSON line (grading only)."""
    import json as _json, os as _os
    try:
        result = check(*args, raise_on_failure=False, **kwargs)
        row = {"check": name, "status": result.status, "message": result.report()}
    except Exception as error:
        row = {"check": name, "status": "error",
               "message": f"the check itself could not run: {type(error).__name__}: {error}"}
        print(row["message"])
    with open(_os.environ["COURSE_GRADING_RECORD"], "a", encoding="utf-8") as _file:
        _file.write(_json.dumps(row) + "\\n")
'''


class _RecordChecks(ast.NodeTransformer):
    """``check.name(a, b)`` -> ``__course_record__("name", check.name, a, b)``."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "check"
        ):
            return ast.Call(
                func=ast.Name("__course_record__", ast.Load()),
                args=[ast.Constant(func.attr), func, *node.args],
                keywords=node.keywords,
            )
        return node


def instrument(notebook: nbformat.NotebookNode, cells: Iterable[int]) -> nbformat.NotebookNode:
    """Only ``cells``, with the recorder defined first and check calls recorded."""
    out = nbformat.v4.new_notebook(metadata=notebook.metadata)
    recorder = nbformat.v4.new_code_cell(RECORDER)
    recorder["id"] = "course-grading-recorder"
    out.cells.append(recorder)
    for index in cells:
        cell = nbformat.from_dict(json.loads(json.dumps(notebook.cells[index])))
        if check_names(cell):
            tree = ast.fix_missing_locations(_RecordChecks().visit(ast.parse(cell.source)))
            cell.source = ast.unparse(tree)
        cell.metadata["course_index"] = index
        out.cells.append(cell)
    return out


# --- running one notebook ------------------------------------------------------------------


def _execute(notebook_path: str, log_path: str, deadline: float) -> None:
    """Runner process: execute a notebook, logging each failed cell and how it ended."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    notebook = nbformat.read(notebook_path, as_version=4)

    def log(row: dict) -> None:
        with open(log_path, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")

    def executed(cell, cell_index, execute_reply) -> None:  # noqa: ANN001 - nbclient hook
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                message = f"{output.get('ename')}: {output.get('evalue')}"
                log({"cell": cell.metadata.get("course_index"), "error": message})

    client = NotebookClient(
        notebook,
        timeout_func=lambda cell: max(1, int(deadline - time.time())),
        allow_errors=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(Path(notebook_path).parent)}},
        on_cell_executed=executed,
        startup_timeout=120,
    )
    try:
        client.execute()
        log({"end": "complete"})
    except CellTimeoutError:
        log({"end": TIMEOUT})
    except DeadKernelError as error:
        log({"end": "dead", "message": str(error)[:300]})


def _limit_memory(memory_gb: float) -> None:
    limit = int(memory_gb * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kernel_pids(runner_pid: int) -> list[int]:
    """Kernels started by the runner (they run in their own process group)."""
    try:
        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(runner_pid)], capture_output=True, text=True
        ).stdout
    except OSError:
        return []
    return [int(pid) for pid in out.split()]


def run_notebook(
    template: nbformat.NotebookNode,
    submission: nbformat.NotebookNode,
    name: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_gb: float = DEFAULT_MEMORY_GB,
    threads: int = 1,
) -> list[ExerciseResult]:
    """Grade one submitted notebook against its template; one result per check cell."""
    wanted = exercises(template)
    graded = merge(template, submission)
    answers = [i for i, cell in enumerate(template.cells) if is_answer_cell(cell)]
    runnable = instrument(graded, needed_cells(graded, answers))
    check_cells = {i for i, cell in enumerate(graded.cells) if check_names(cell)}
    with tempfile.TemporaryDirectory(prefix="course-grade-") as scratch:
        path, record, log = (Path(scratch) / f for f in (name, "checks.jsonl", "cells.jsonl"))
        nbformat.write(runnable, path)
        env = dict(os.environ, **OFFLINE_ENV, COURSE_GRADING_RECORD=str(record))
        env.setdefault("OMP_NUM_THREADS", str(threads))
        env.setdefault("MKL_NUM_THREADS", str(threads))
        command = [
            sys.executable,
            "-c",
            "import sys; from course.grading import _execute; "
            "_execute(sys.argv[1], sys.argv[2], float(sys.argv[3]))",
            str(path),
            str(log),
            str(time.time() + timeout_s),
        ]
        runner = subprocess.Popen(
            command,
            cwd=scratch,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=lambda: _limit_memory(memory_gb),  # noqa: PLW1509 - no threads forked
        )
        killed = False
        try:
            _, stderr = runner.communicate(timeout=timeout_s + 60)
        except subprocess.TimeoutExpired:
            killed = True
            for pid in _kernel_pids(runner.pid):
                _kill_group(pid)
            _kill_group(runner.pid)
            _, stderr = runner.communicate()
        records = _jsonl(record)
        cells = _jsonl(log)
    return _results(name, wanted, graded, check_cells, records, cells, killed, stderr)


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _results(
    name: str,
    wanted: list[tuple[str, str]],
    graded: nbformat.NotebookNode,
    check_cells: set[int],
    records: list[dict],
    cells: list[dict],
    killed: bool,
    stderr: bytes | None,
) -> list[ExerciseResult]:
    """Turn the recorder's and the runner's logs into one result per exercise."""
    by_check = {row["check"]: row for row in records if "check" in row}  # the last call wins
    errors = {row["cell"]: row["error"] for row in cells if "cell" in row}
    ends = [row for row in cells if "end" in row]
    end = ends[-1]["end"] if ends else (TIMEOUT if killed else "crash")
    check_cell = {n: i for i in sorted(check_cells) for n in check_names(graded.cells[i])}
    results = []
    for exercise, check in wanted:
        row = by_check.get(check)
        if row is not None:
            status = row["status"] if row["status"] in (PASSED, FAILED, NOT_IMPLEMENTED) else ERROR
            results.append(ExerciseResult(name, exercise, check, status, row["message"]))
            continue
        index = check_cell.get(check)
        if index in errors:
            earlier = [errors[i] for i in sorted(errors) if i < index and i not in check_cells]
            cause = f" (an earlier cell failed first: {earlier[-1]})" if earlier else ""
            message = f"the check could not run: {errors[index]}{cause}"
            results.append(ExerciseResult(name, exercise, check, ERROR, message))
        elif end == TIMEOUT:
            results.append(ExerciseResult(name, exercise, check, TIMEOUT, "time limit reached"))
        elif end == "dead":
            message = "the kernel died before this check (memory limit or a crash)"
            results.append(ExerciseResult(name, exercise, check, ERROR, message))
        else:
            tail = (stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
            message = "the check did not run" + (f": {tail[0]}" if tail else "")
            results.append(ExerciseResult(name, exercise, check, ERROR, message))
    return results


def unreadable(
    template: nbformat.NotebookNode, name: str, status: str, message: str
) -> list[ExerciseResult]:
    """The same status and message for every exercise of a notebook that could not be graded."""
    return [ExerciseResult(name, ex, check, status, message) for ex, check in exercises(template)]


def grade_file(
    template_path: Path,
    submission_path: Path | None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_gb: float = DEFAULT_MEMORY_GB,
    threads: int = 1,
) -> list[ExerciseResult]:
    """Grade ``submission_path`` (which may be absent or not a notebook) against a template."""
    template = nbformat.read(template_path, as_version=4)
    name = template_path.name
    if submission_path is None or not submission_path.exists():
        return unreadable(template, name, MISSING, f"{name} was not submitted")
    try:
        submission = read_notebook(submission_path)
    except ValueError as error:
        return unreadable(template, name, ERROR, str(error))
    start = time.time()
    results = run_notebook(template, submission, name, timeout_s, memory_gb, threads)
    for result in results:
        result.seconds = round(time.time() - start, 1)
    return results


def as_dicts(results: Iterable[ExerciseResult]) -> list[dict]:
    return [asdict(result) for result in results]
