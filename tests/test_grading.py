"""The grading engine (course.grading): merging, cell selection, probes, the kernel, the verdict.

Fast tests build graded notebooks without running them, and replay records in this process.
Kernel tests run a few small notebooks (a synthetic checks module, ``nb99``, installed from
tests/fixtures/forgeries/nb99_checks.py). The ``slow`` ones grade Colab-saved answers (``make
check-grading``; every solution and every blank notebook is graded once, by ``make progress``,
in tests/test_classroom.py). Forgeries: tests/test_grading_forgeries.py. Hand-ins, classes,
feedback and Gradescope archives: tests/test_classroom.py and tests/test_handins.py.

In-process runs grade from this checkout, whose course tree is flagged when it changes but never
restored (only a run's own pinned copy is, :mod:`course.grading.pinned`); they also set
``COURSE_GRADING_RESTORE=0``. The restore itself is tested on copies.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course import grading
from course.grading import kernel, merging, sandbox, selection, verdict
from course.grading.kernel import Run
from course.tooling import nbtools

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
WELCOME = "00_welcome.ipynb"


@pytest.fixture(autouse=True)
def _no_restore(monkeypatch):
    monkeypatch.setenv(kernel.RESTORE_ENV, "0")


def _template(name: str = WELCOME) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / name, as_version=4)


def _answer(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(c for c in notebook.cells if grading.is_answer_cell(c) and c.cell_type == "code")


def _check(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(c for c in notebook.cells if grading.check_names(c))


def _solved_source(name: str = WELCOME) -> str:
    solution = nbformat.read(ROOT / "solutions" / name, as_version=4)
    cell = next(c for c in solution.cells if c.id == _answer(_template(name)).id)
    return nbtools.strip_markers(cell.source)


def _code(*sources: str, ids: bool = True) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    if not ids:
        for cell in notebook.cells:
            cell.pop("id", None)
        notebook.nbformat_minor = 4
    return notebook


# --- merging ---------------------------------------------------------------------------------


def test_exercises_are_derived_from_every_notebook():
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    ids = [ex for p in paths for ex, _ in grading.exercises(nbformat.read(p, as_version=4))]
    assert len(ids) == len(set(ids)) > 0
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        checks = [n for c in notebook.cells for n in grading.check_names(c)]
        found = grading.exercises(notebook)
        assert [name for _, name in found] == checks
        assert all(ex.split(".")[0] == str(int(path.name[:2])) for ex, _ in found), path.name


def test_check_calls_take_the_argument_layout_from_the_template():
    template = _template()
    (call,) = grading.check_calls(template)
    assert (call.exercise, call.check, call.positional, call.keywords) == ("0.1", "softmax", 1, ())
    assert template.cells[call.cell] is _check(template)
    two = _code(
        "from course.checks import nb00 as check",
        "check.softmax(f, g, dim=1, raise_on_failure=False)",
    )
    (call,) = grading.check_calls(two)
    assert (call.positional, call.keywords) == (2, ("dim",))


def test_merge_takes_answers_from_the_submission_and_checks_from_the_template():
    template = _template()
    submission = nbformat.from_dict(json.loads(json.dumps(template)))
    _answer(submission).source = "def softmax(x, dim=-1):\n    return 'mine'"
    _check(submission).source = "print('passed')"
    submission.cells.insert(0, nbformat.v4.new_code_cell("import os; os.system('echo hacked')"))
    submission.cells.reverse()  # moved cells keep their ids
    merged = grading.merge(template, submission)
    graded = merged.notebook
    assert graded.cells[merged.answers[0]].source.endswith("return 'mine'")
    assert _check(graded).source == _check(template).source
    (added,) = merged.added
    assert "hacked" in graded.cells[added].source
    assert added not in grading.needed_cells(graded, merged.answers)  # nothing depends on it
    assert [c.id for c in graded.cells if c.metadata["course_origin"] != "added"] == [
        c.id for c in template.cells
    ]


def test_a_colab_notebook_without_ids_with_a_helper_first_is_matched_by_names():
    template = _template()
    body = _solved_source()
    helper_first = "def _shift(x, dim):\n    return x - x.amax(dim=dim, keepdim=True)\n\n" + body
    cells = [c for c in json.loads(json.dumps(template))["cells"]]
    submission = nbformat.from_dict({**json.loads(json.dumps(template)), "cells": cells})
    _answer(submission).source = helper_first
    for cell in submission.cells:
        cell.pop("id", None)
    submission.nbformat_minor = 4
    merged = grading.merge(template, submission)
    assert merged.notebook.cells[merged.answers[0]].source == helper_first
    assert merged.matched[merged.answers[0]] == "names"
    assert merged.added == []  # every other cell is recognised as the template's own
    empty = _code("x = 1")
    assert _answer(grading.merge(template, empty).notebook).source == _answer(template).source


IMPORT_LINE = re.compile(r"^(import|from)\s")


def colab_without_imports(name: str) -> dict:
    """An honest Colab hand-in built from the solution: no cell ids, nbformat 4.0, every answer
    the solution's with its (redundant) import lines and ``#|`` markers dropped."""
    template = _template(name)
    solved = nbformat.read(ROOT / "solutions" / name, 4)
    solution = {c.id: nbtools.strip_markers(c.source) for c in solved.cells}
    answers = {c.id for c in template.cells if c.cell_type == "code" and grading.is_answer_cell(c)}
    data = json.loads(nbformat.writes(template))
    for cell in data["cells"]:
        if cell.get("id") in answers:
            lines = solution[cell["id"]].splitlines()
            kept = [x for x in lines if not IMPORT_LINE.match(x) and not x.startswith("#|")]
            cell["source"] = "\n".join(kept).strip() + "\n"
        cell.pop("id", None)
    data["nbformat_minor"] = 0
    return data


@pytest.mark.parametrize("name", ["02_attention.ipynb", "04_positional_encoding.ipynb"])
def test_a_cell_that_only_imports_or_is_the_templates_is_never_an_answer(name, tmp_path):
    # 02's imports cell defines math, nn and torch, as 2.1's answer cell does; matched
    # by those names it was taken for 2.1, and its `from course.checks import` line scored every
    # exercise of 02 zero. 04's imports cell and 4.1's answer cell share torch and nn the same way.
    path = tmp_path / name
    path.write_text(json.dumps(colab_without_imports(name)))
    submission = grading.read_notebook(path)
    template = _template(name)
    merged = grading.merge(template, submission)
    graded = merged.notebook
    code_answers = [i for i in merged.answers if graded.cells[i].cell_type == "code"]
    stubs = [c for c in template.cells if grading.is_answer_cell(c) and c.cell_type == "code"]
    assert len(code_answers) == len(stubs)
    for index, stub in zip(code_answers, stubs, strict=True):
        source = graded.cells[index].source
        assert "raise NotImplementedError" not in source and not IMPORT_LINE.match(source)
        assert merging.answer_names(stub.source) <= grading.cell_names(source)[0]
        assert grading.forbidden(source, grading.check_module(template)) == []
    assert merged.added == []


def test_the_templates_own_checks_import_copied_by_a_student_is_not_flagged():
    line = "import torch\nfrom course.checks import nb02 as check"
    assert grading.forbidden(line, "course.checks.nb02") == []
    assert grading.forbidden(line) == ["imports from course.checks"]
    assert grading.forbidden(line, "course.checks.nb03") == ["imports from course.checks"]
    other = "from course.checks import nb02 as check, nb08"
    assert grading.forbidden(other, "course.checks.nb02") == ["imports from course.checks"]


def test_an_answer_that_does_not_parse_is_still_found_and_says_so():
    template = _template()
    broken = "def softmax(x, dim=-1):\n    return (x.exp()\n"
    submission = nbformat.from_dict(json.loads(json.dumps(template)))
    _answer(submission).source = broken
    for cell in submission.cells:
        cell.pop("id", None)
    merged = grading.merge(template, submission)
    assert merged.notebook.cells[merged.answers[0]].source == broken
    assert selection.syntax_error(broken).startswith("SyntaxError at line 2")


def test_dependency_analysis_is_linear_in_chained_cells():
    # 150,000 chained cells: an analysis that scanned every cell per name
    # run past 7 minutes. Reading refuses such a notebook (tests/test_handins.py); the analysis
    # itself is linear too: 20,000 chained cells, each needing the one before, in seconds.
    n = 20_000
    cells = ["x0 = 1", *(f"x{i} = x{i - 1} + 1" for i in range(1, n)), f"check.f(x{n - 1})"]
    notebook = _code(*cells)
    start = time.process_time()
    graph = grading.Dependencies(notebook)
    assert len(graph.closure({n})) == n + 1
    assert time.process_time() - start < 60  # about 2 s on a busy 2-core machine


def test_added_cells_run_when_an_answer_uses_them_before_or_after_it():
    template = _code(
        "import torch\nfrom course.checks import nb00 as check",
        "def f(x):\n    # TODO: double it\n    raise NotImplementedError",
        "check.f(f)",
        "def g(x):\n    # TODO: triple it\n    raise NotImplementedError",
        "check.g(g)",
    )
    submission = _code(
        "import torch\nfrom course.checks import nb00 as check",
        "import math\nFACTOR = 2",  # added before the answer that uses it
        "def f(x):\n    return x * FACTOR * math.pi / math.pi",
        "check.f(f)",
        "def g(x):\n    return _times(x, 3)",
        "def _times(x, k):\n    return x * k",  # added after the answer, before its check
        "unused = sum(range(10))",  # added, used by nothing
        "check.g(g)",
        ids=False,
    )
    merged = grading.merge(template, submission)
    graded = merged.notebook
    sources = [c.source for c in graded.cells]
    needed = {sources[i] for i in grading.needed_cells(graded, merged.answers)}
    assert "import math\nFACTOR = 2" in needed
    assert "def _times(x, k):\n    return x * k" in needed
    assert "unused = sum(range(10))" not in needed
    assert sources.index("import math\nFACTOR = 2") < sources.index(submission.cells[2].source)


def test_needed_cells_follow_definitions_and_skip_the_rest():
    cells = [
        "# Setup\nimport torch",
        "CONFIG = {'n': 3}",
        "HELPER = 2",
        "slow = sum(range(10**9))  # a training cell no check needs",
        "CONFIG['n'] = 4",
        "def f(x):\n    # TODO: double it\n    raise NotImplementedError",
        "def g(x, HELPER=None):\n    return x * CONFIG['n']",
        "check.f(f, g)",
        "plot(slow)",
    ]
    assert grading.needed_cells(_code(*cells)) == [0, 1, 4, 5, 6, 7]


def test_the_templates_imports_cell_imports_only_what_the_cells_that_run_use():
    source = (
        "from __future__ import annotations\n\nimport math\n\nimport matplotlib.pyplot as plt\n"
        "import torch.nn.functional as F\nfrom torch import nn, optim\n"
        "from course import models, viz\nfrom course.checks import nb05 as check"
    )
    kept = selection.used_imports_only(source, {"nn", "check", "F", "math"})
    assert kept.splitlines() == [
        "from __future__ import annotations",
        "import math",
        "import torch.nn.functional as F",
        "from torch import nn",
        "from course.checks import nb05 as check",
    ]
    assert selection.used_imports_only("import torch\nx = 1", {"torch"}) is None
    assert selection.used_imports_only("import torch", set()) == "pass\n"


def test_needed_cells_of_the_real_notebooks_skip_training():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        needed = grading.needed_cells(notebook)
        code = [i for i, c in enumerate(notebook.cells) if c.cell_type == "code"]
        assert needed[0] == code[0]  # the setup cell
        assert len(needed) < len(code), path.name


def test_unreadable_files_are_refused(tmp_path):
    (tmp_path / "x.ipynb").write_text('{"cells": [')
    with pytest.raises(ValueError, match="not a readable notebook"):
        grading.read_notebook(tmp_path / "x.ipynb")


# --- instrumenting -----------------------------------------------------------------------------


def test_check_calls_become_probes_after_a_prelude():
    template = _template()
    out = grading.instrument_notebook(template, grading.needed_cells(template), seed=7)
    assert out.cells[0].source == "import course.grading.instrument as __course_grading__"
    probed = [c.source for c in out.cells[1:] if "__course_grading__" in c.source]
    assert probed == ["__course_grading__.record('softmax', 7, check.softmax, softmax)"]


# --- the trusted side ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, reason",
    [
        (
            "from course.checks.nb08 import reference_encoder as Encoder",
            "imports from course.checks",
        ),
        ("from course.checks import nb00", "imports from course.checks"),
        ("import course.framework.check", "imports course.framework.check"),
        ("from course.framework import properties as p", "imports from course.framework"),
        ("from course import framework", "imports course.framework"),
        ("import importlib\nm = importlib.import_module('course.checks.nb00')", "dynamically"),
        ("m = __import__('course')", "dynamically"),
        ("def f(x):\n    return check.softmax", "`check` module"),
        ("check = None", "`check` module"),
        ("f = check.softmax.__globals__['expect_close']", "`check` module"),
        ("check._softmax_cases()", "`check` module"),
        ("import course\nf = course.checks.nb00.softmax", "uses course.checks"),
    ],
)
def test_answers_using_the_checks_are_flagged(source, reason):
    assert any(reason in r for r in grading.forbidden(source)), grading.forbidden(source)


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nfrom torch import nn\nfrom course.nn import SelfAttention",
        "from course import nn as mine\nimport course.data",
        "def checked(x):\n    checks = [x]\n    return checks",
        "def softmax(x, dim=-1):\n    return x.softmax(dim)\n\ncheck.softmax(softmax)",
    ],
)
def test_honest_answers_are_not_flagged(source):
    assert grading.forbidden(source) == []


def _run(tmp_path: Path, rows: list[dict], end: str = "complete") -> Run:
    (tmp_path / "records").mkdir(exist_ok=True)
    return Run(tmp_path / "records", {r["cell"]: r for r in rows}, end)


def _softmax_record(function) -> bytes:
    from course.checks import nb00
    from course.framework.check import probe

    return probe(nb00.softmax, function)[1]


def _verdict(tmp_path: Path, run: Run) -> grading.ExerciseResult:
    from course.checks import nb00

    template = _template()
    (call,) = grading.check_calls(template)
    (result,) = verdict.verdicts(WELCOME, [call], run, 0, nb00, {"softmax": [call.cell - 1]}, {})
    return result


def test_the_verdict_is_the_trusted_replay_of_the_record(tmp_path):
    import torch

    run = _run(tmp_path, [])
    right = _softmax_record(lambda x, dim=-1: torch.softmax(x, dim=dim))  # the stub's default
    (run.records / "softmax.rec").write_bytes(right)
    assert _verdict(tmp_path, run).status == grading.PASSED
    naive = _softmax_record(lambda x, dim=-1: x.exp() / x.exp().sum(dim, keepdim=True))
    (run.records / "softmax.rec").write_bytes(naive)
    assert _verdict(tmp_path, run).status == grading.FAILED
    for forged in (b"", b'{"check": "softmax", "status": "passed"}\n', naive + b"{}"):
        (run.records / "softmax.rec").write_bytes(forged)
        assert _verdict(tmp_path, run).status == grading.ERROR


def test_a_missing_record_gives_an_honest_row_with_its_reason(tmp_path):
    template = _template()
    (call,) = grading.check_calls(template)
    answer = call.cell - 1
    cases = [
        ([{"cell": call.cell, "status": "timeout"}], "complete", grading.TIMEOUT, "time limit"),
        ([{"cell": answer, "status": "timeout"}], "complete", grading.TIMEOUT, "before the check"),
        (
            [{"cell": call.cell, "status": "error", "message": "NameError: softmax"}],
            "complete",
            grading.ERROR,
            "NameError",
        ),
        ([{"cell": answer, "status": "started"}], "dead", grading.ERROR, "kernel died"),
        ([], "deadline", grading.TIMEOUT, "notebook's time limit"),
        ([{"cell": call.cell, "status": "ok"}], "complete", grading.ERROR, "left no record"),
        ([], "crash", grading.ERROR, "did not run"),
    ]
    for rows, end, status, phrase in cases:
        result = _verdict(tmp_path, _run(tmp_path, rows, end))
        assert (result.status, phrase in result.message) == (status, True), (rows, end, result)


def test_results_json_replaces_whatever_the_student_left(tmp_path):
    results = [grading.ExerciseResult(WELCOME, "0.1", "softmax", grading.FAILED, "wrong")]
    report = grading.gradescope_report(results, {"0.1": 2}, execution_time=3.2)
    assert report["score"] == 0 and report["tests"][0]["max_score"] == 2
    target = tmp_path / "results" / "results.json"
    target.parent.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"score": 36}')
    target.symlink_to(elsewhere)  # a forged file, as a link
    grading.write_results_json(target, report)
    assert not target.is_symlink() and json.loads(target.read_text())["score"] == 0
    assert json.loads(elsewhere.read_text()) == {"score": 36}


# --- the course tree and the private copy --------------------------------------------------------


def test_nn_is_cut_before_the_graded_notebook():
    text = (ROOT / "course" / "nn.py").read_text(encoding="utf-8")
    before_03 = grading.nn_before(text, 3)
    assert "class SelfAttention" in before_03 and "class MultiHeadAttention" not in before_03
    assert "solutions/03_" not in before_03
    compile(before_03, "nn.py", "exec")
    assert "from solutions/" not in grading.nn_before(text, 0).split('"""', 2)[2]


def test_the_tree_guard_restores_and_names_every_change(tmp_path, monkeypatch):
    monkeypatch.setenv(kernel.RESTORE_ENV, "1")
    tree = tmp_path / "course"
    (tree / "checks").mkdir(parents=True)
    (tree / "checks" / "nb00.py").write_text("REAL = 1\n")
    (tree / "check.py").write_text("X = 1\n")
    guard = grading.TreeGuard(tree)
    assert guard.restore() == []
    (tree / "checks" / "nb00.py").write_text("REAL = 1\nforged = True\n")
    (tree / "check.py").unlink()
    (tree / "checks" / "nb09.py").write_text("planted = True\n")
    assert guard.restore() == ["check.py", "checks/nb00.py", "checks/nb09.py"]
    assert (tree / "checks" / "nb00.py").read_text() == "REAL = 1\n"
    assert (tree / "check.py").read_text() == "X = 1\n"
    assert not (tree / "checks" / "nb09.py").exists()
    assert kernel.digest(kernel._files(tree)) == guard.digest


def test_the_kernel_imports_its_private_copy_with_only_earlier_exports(tmp_path):
    guard = verdict.tree_guard()
    scratch = kernel.scratch_folder()
    try:
        kernel.private_course(scratch, guard.files, 3)
        probe = (
            "import json, os, course, course.nn\n"
            "json.dump({'file': course.__file__, 'nn': sorted(vars(course.nn)),"
            " 'path': os.environ.get('PYTHONPATH')},"
            " open(os.path.join(os.environ['COURSE_GRADING_RECORDS'], 'seen.json'), 'w'))"
        )
        run = kernel.run(_code(probe), scratch, "x.ipynb", 120, 60)
        seen = json.loads((run.records / "seen.json").read_text())
    finally:
        kernel.remove_scratch(scratch)
    assert run.end == "complete"
    # The copy, as the student's process sees its scratch (at sandbox.VIEW in bubblewrap).
    assert seen["file"] == str(sandbox.seen(sandbox.choose(), scratch, scratch / "course")) + (
        "/__init__.py"
    )
    assert "SelfAttention" in seen["nn"] and "MultiHeadAttention" not in seen["nn"]
    assert not scratch.exists()


# --- kernels: a synthetic notebook with two exercises ---------------------------------------------


@pytest.fixture
def nb99(monkeypatch):
    """``course.checks.nb99`` (two exercises) for the grader and for the student's private copy."""
    source = (FIXTURES / "forgeries" / "nb99_checks.py").read_bytes()
    spec = importlib.util.spec_from_loader("course.checks.nb99", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "nb99.py", "exec"), module.__dict__)  # noqa: S102 - our own fixture
    monkeypatch.setitem(sys.modules, "course.checks.nb99", module)
    monkeypatch.setitem(verdict.trusted_checks(), "course.checks.nb99", module)
    private = kernel.private_course

    def with_nb99(scratch, files, number):
        return private(scratch, {**files, "checks/nb99.py": source}, number)

    monkeypatch.setattr(kernel, "private_course", with_nb99)
    return _code(
        "import torch",
        "from course.checks import nb99 as check",
        "def double(x):\n    # TODO: twice x\n    raise NotImplementedError",
        "check.double(double)",
        "def triple(x):\n    # TODO: three times x\n    raise NotImplementedError",
        "check.triple(triple)",
    )


def test_an_infinite_loop_costs_only_its_exercise_and_added_cells_count(nb99):
    submission = _code(
        "import torch",
        "from course.checks import nb99 as check",
        "def double(x):\n    while True:\n        pass",
        "check.double(double)",
        "def _helper(x):\n    return _times(x, 3)",  # helper first, answer second
        "def triple(x):\n    return _helper(x)",
        "def _times(x, k):\n    return k * x",  # a cell the student added
        "check.triple(triple)",
        ids=False,
    )
    start = time.time()
    results = grading.grade_notebook(nb99, submission, "99_synthetic.ipynb", timeout_s=8)
    elapsed = time.time() - start
    assert [(r.exercise, r.status) for r in results] == [
        ("99.1", grading.TIMEOUT),
        ("99.2", grading.PASSED),
    ], [r.message for r in results]
    assert elapsed < 8 + kernel.STARTUP_S


def test_a_dead_kernel_gives_every_exercise_an_honest_row(nb99):
    submission = nbformat.from_dict(json.loads(json.dumps(nb99)))
    submission.cells[2].source = "def double(x):\n    return 2 * x"
    submission.cells[4].source = "import os\nos._exit(3)"
    results = grading.grade_notebook(nb99, submission, "99_synthetic.ipynb", timeout_s=30)
    assert [(r.exercise, r.status) for r in results] == [
        ("99.1", grading.PASSED),
        ("99.2", grading.ERROR),
    ]
    assert "kernel died" in results[1].message


def test_an_answer_that_does_not_parse_is_an_error_with_its_line_not_not_started(nb99):
    # Colab, no ids: the broken answer is still found by the name its `def` line gives.
    submission = _code(
        "import torch",
        "from course.checks import nb99 as check",
        "def double(x):\n    return (2 * x\n",
        "check.double(double)",
        "def triple(x):\n    return 3 * x",
        "check.triple(triple)",
        ids=False,
    )
    results = grading.grade_notebook(nb99, submission, "99_synthetic.ipynb", timeout_s=30)
    assert [(r.exercise, r.status) for r in results] == [
        ("99.1", grading.ERROR),
        ("99.2", grading.PASSED),
    ], [r.message[-300:] for r in results]
    assert "SyntaxError at line 2" in results[0].message


def test_an_nbformat_3_notebook_is_converted_and_graded(tmp_path):
    solved = nbformat.read(ROOT / "solutions" / WELCOME, as_version=4)
    for cell in solved.cells:
        cell.source = (
            nbtools.strip_markers(cell.source) if cell.cell_type == "code" else cell.source
        )
    path = tmp_path / WELCOME
    path.write_text(nbformat.writes(nbformat.convert(solved, 3), version=3))
    assert json.loads(path.read_text())["nbformat"] == 3
    notebook = grading.read_notebook(path)
    assert notebook.nbformat == 4
    merged = grading.merge(_template(), notebook)
    assert "exp" in merged.notebook.cells[merged.answers[0]].source  # the solution, not the stub


# --- slow --------------------------------------------------------------------------------------
# Every notebook, solved and blank, is graded once by `make progress` (test_classroom:
# test_make_progress_on_every_notebook), which asserts every row.


@pytest.mark.slow
@pytest.mark.parametrize("name", ["02_attention.ipynb", "04_positional_encoding.ipynb"])
def test_honest_colab_answers_without_their_imports_pass_every_exercise(name, tmp_path):
    # Such a 02 must not score 0 on every exercise ("your answer imports from course.checks").
    path = tmp_path / name
    path.write_text(json.dumps(colab_without_imports(name)))
    results = grading.grade_file(ROOT / "notebooks" / name, path)
    assert [(r.exercise, r.status, r.message[:300]) for r in results if not r.passed] == []
    assert not [f for r in results for f in r.flags if "import" in f]  # nobody accused


def test_environment_of_the_student_process_is_offline_and_clean(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_CHECK_REPLAY_EVERYWHERE", "1")
    monkeypatch.setenv("PYTHONPATH", "/grader/own/path")
    env = kernel.student_env(sandbox.choose(), tmp_path, "token")
    assert env["HF_HUB_OFFLINE"] == "1" and "COURSE_CHECK_REPLAY_EVERYWHERE" not in env
    assert "/grader/own/path" not in env["PYTHONPATH"]
    assert os.environ.get(kernel.RESTORE_ENV) == "0"  # set for every test of this module


WORKER = """
import sys
from course.grading import kernel, verdict
snapshot = kernel._files(kernel.COURSE)  # as the main process took it
path = kernel.COURSE / "checks" / "nb00.py"
path.write_text(path.read_text() + "\\nFORGED = True\\n")  # a student elsewhere, meanwhile
try:
    verdict.trusted_checks(snapshot)
except RuntimeError as error:
    print("refused:", error)
    sys.exit(0)
import course.checks.nb00 as nb00
print("forged" if hasattr(nb00, "FORGED") else "clean", "FORGED" in path.read_text())
"""


@pytest.mark.parametrize("restore, expected", [("1", "clean False"), ("0", "refused")])
def test_a_worker_imports_the_checks_only_from_the_main_snapshot(tmp_path, restore, expected):
    import shutil
    import subprocess

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "course", copy / "course", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(copy), **{kernel.RESTORE_ENV: restore})
    done = subprocess.run(
        [sys.executable, "-c", WORKER], cwd=copy, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(expected), done.stdout


def test_only_the_graders_own_copy_is_restored_never_a_checkout(monkeypatch, tmp_path):
    from course.grading import pinned

    monkeypatch.delenv(kernel.RESTORE_ENV, raising=False)
    monkeypatch.delenv(pinned.PINNED_ENV, raising=False)
    assert not kernel.restoring()  # grading from a checkout: an edit there is the instructor's
    monkeypatch.setenv(pinned.PINNED_ENV, str(tmp_path))
    assert not kernel.restoring()  # another folder than the one this course was imported from
    monkeypatch.setenv(pinned.PINNED_ENV, str(ROOT))
    assert kernel.restoring()  # the run's own pinned copy puts its files back
    monkeypatch.setenv(kernel.RESTORE_ENV, "0")
    assert not kernel.restoring()


def test_a_pinned_copy_is_read_only_restored_when_changed_and_removed(monkeypatch):
    from course.grading import pinned

    root = pinned.pin(ROOT)
    try:
        course = root / "course"
        check = course / "checks" / "nb00.py"
        assert (check.stat().st_mode & 0o777, course.stat().st_mode & 0o777) == (0o444, 0o555)
        assert not list(root.rglob("__pycache__")) and (root / "data" / "samples").is_dir()
        assert pinned.changed_since(root) == []
        guard = kernel.TreeGuard(course)
        monkeypatch.setenv(kernel.RESTORE_ENV, "1")
        course.chmod(0o755)  # what code running as the grader's uid could do, then write
        (course / "checks").chmod(0o755)
        check.chmod(0o644)
        original = check.read_bytes()
        check.write_bytes(original + b"\nFORGED = True\n")
        (course / "checks").chmod(0o555)
        (course / "forged.py").write_text("x = 1\n")
        course.chmod(0o555)
        assert guard.restore() == ["checks/nb00.py", "forged.py"]
        assert check.read_bytes() == original and not (course / "forged.py").exists()
        assert pinned.changed_since(root) == []
    finally:
        pinned.unpin(root)
    assert not root.exists()
