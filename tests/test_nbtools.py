"""The generator: solutions/ -> notebooks/ and course/nn.py, and its out-of-date detection."""

from __future__ import annotations

import nbformat
import pytest

from course.tooling import nbtools
from course.tooling.nbtools import MarkerError, exercise_notebook, stub_code, stub_markdown

REAL_ROOT = nbtools.ROOT

SOLVED = '''def double(x):
    """Twice x."""
    ### BEGIN SOLUTION multiply by two
    y = 2 * x
    return y
    ### END SOLUTION'''


def test_solution_block_becomes_todo_and_raise_at_its_indentation():
    assert stub_code(SOLVED) == (
        'def double(x):\n    """Twice x."""\n'
        "    # TODO: multiply by two\n    raise NotImplementedError"
    )


def test_default_hint_and_several_blocks_in_one_cell():
    source = "### BEGIN SOLUTION\na = 1\n### END SOLUTION\nb = 2\n### BEGIN SOLUTION\nc = 3\n### END SOLUTION"
    assert stub_code(source) == (
        "# TODO: your code here\nraise NotImplementedError\nb = 2\n"
        "# TODO: your code here\nraise NotImplementedError"
    )


def test_stubbed_function_still_defines_and_raises_not_implemented():
    namespace: dict = {}
    exec(stub_code(SOLVED), namespace)
    with pytest.raises(NotImplementedError):
        namespace["double"](3)


def test_markdown_answer_is_replaced_with_placeholder():
    text = "Question?\n\n<!-- BEGIN ANSWER -->\nThe secret answer.\n<!-- END ANSWER -->\nAfter."
    out = stub_markdown(text)
    assert "secret" not in out
    assert out == f"Question?\n\n{nbtools.ANSWER_PLACEHOLDER}\nAfter."


@pytest.mark.parametrize(
    "source, message",
    [
        ("### BEGIN SOLUTION\nx = 1", "never closed"),
        ("x = 1\n### END SOLUTION", "without a"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "inside another block"),
    ],
    ids=["unclosed", "end-without-begin", "nested"],
)
def test_malformed_markers_give_a_clear_error(source, message):
    with pytest.raises(MarkerError, match=message) as error:
        stub_code(source, where="demo.ipynb, cell 3")
    assert "demo.ipynb, cell 3, line" in str(error.value)


def _setup_cell_source() -> str:
    """The real setup cell of the course (it holds the repository URL Colab clones)."""
    welcome = nbformat.read(REAL_ROOT / "solutions" / "00_welcome.ipynb", as_version=4)
    return next(c.source for c in welcome.cells if c.source.startswith("# Setup"))


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "# Demo\n[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            "(https://colab.research.google.com/github/o/r/blob/main/solutions/09_demo.ipynb)"
        ),
        nbformat.v4.new_code_cell("import math\nprint(math.pi)"),
        nbformat.v4.new_code_cell(
            "#| export\nimport torch\nfrom course.nn import helper\n\n" + SOLVED
        ),
        nbformat.v4.new_code_cell("check.double(double)"),
        nbformat.v4.new_markdown_cell("Why?\n<!-- BEGIN ANSWER -->\nBecause.\n<!-- END ANSWER -->"),
        nbformat.v4.new_code_cell(_setup_cell_source()),
    ]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="3.14\n")]
    nb.cells[1].execution_count = 7
    nb.cells[1].metadata["tags"] = ["keep-me"]
    return nb


def test_exercise_notebook_clears_outputs_and_keeps_other_cells_identical():
    solution = _notebook()
    exercise = exercise_notebook(solution, "09_demo.ipynb")
    assert len(exercise.cells) == len(solution.cells)
    for cell in exercise.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert exercise.cells[1].source == solution.cells[1].source
    assert exercise.cells[1].metadata == solution.cells[1].metadata
    assert exercise.cells[3].source == solution.cells[3].source
    assert "raise NotImplementedError" in exercise.cells[2].source
    assert "Because" not in exercise.cells[4].source
    assert "/blob/main/notebooks/09_demo.ipynb" in exercise.cells[0].source
    # The solution itself is untouched.
    assert solution.cells[1].outputs and "2 * x" in solution.cells[2].source


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A throw-away project layout with one solution notebook."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "course").mkdir()
    monkeypatch.setattr(nbtools, "ROOT", tmp_path)
    monkeypatch.setattr(nbtools, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(nbtools, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(nbtools, "NN_MODULE", tmp_path / "course" / "nn.py")
    nbformat.write(_notebook(), tmp_path / "solutions" / "09_demo.ipynb")
    return tmp_path


def test_generate_then_nothing_is_stale(project):
    assert nbtools.stale() == [
        "notebooks/09_demo.ipynb is missing",
        "course/nn.py is missing",
    ]
    written = nbtools.generate()
    assert {p.name for p in written} == {"09_demo.ipynb", "nn.py"}
    assert nbtools.stale() == []
    assert nbtools.generate() == []  # idempotent


def test_changed_solution_makes_exercise_and_export_stale(project):
    nbtools.generate()
    path = project / "solutions" / "09_demo.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].source = nb.cells[2].source.replace("2 * x", "x + x")
    nbformat.write(nb, path)
    assert nbtools.stale() == ["course/nn.py is out of date"]  # the stub hides the change
    nb.cells[1].source = "print('changed')"
    nbformat.write(nb, path)
    assert "notebooks/09_demo.ipynb is out of date" in nbtools.stale()
    assert nbtools.main(["check"]) == 1


def test_orphan_exercise_is_reported(project):
    nbtools.generate()
    (project / "notebooks" / "10_gone.ipynb").write_text("{}")
    assert nbtools.stale() == ["notebooks/10_gone.ipynb has no solution in solutions/"]


def test_export_hoists_imports_and_strips_markers(project):
    nbtools.generate()
    module = (project / "course" / "nn.py").read_text()
    assert "GENERATED" in module
    assert "import torch" in module.split("# --- from")[0]
    assert "from course.nn import" not in module
    assert "BEGIN SOLUTION" not in module and "y = 2 * x" in module
    namespace: dict = {}
    exec(compile(module, "nn.py", "exec"), namespace)
    assert namespace["double"](4) == 8


def test_badges_rewrite_the_repository_slug(project):
    (project / "README.md").write_text(
        "[x](https://colab.research.google.com/github/o/r/blob/main/notebooks/00.ipynb)\n"
        "git clone https://github.com/o/r.git\n"
    )
    (project / "pyproject.toml").write_text('Repository = "https://github.com/o/r"\n')
    nbtools.set_repository("me/course")
    readme = (project / "README.md").read_text()
    assert "colab.research.google.com/github/me/course/blob/main" in readme
    assert "github.com/me/course.git" in readme
    assert "me/course" in (project / "pyproject.toml").read_text()
    stored = (project / "solutions" / "09_demo.ipynb").read_text()
    assert "github/me/course/blob" in stored
    # The setup cell's clone URL, stored in the JSON as REPO = \"https://github.com/...\"
    assert 'REPO = \\"https://github.com/me/course\\"' in stored
    setup = nbformat.reads(stored, as_version=4).cells[-1].source
    assert 'REPO = "https://github.com/me/course"' in setup
    assert "transformers-hands-on/transformers-hands-on" not in stored
    with pytest.raises(SystemExit):
        nbtools.set_repository("not a slug")


def test_exercise_cells_keep_the_solution_ids():
    solution = _notebook()
    exercise = exercise_notebook(solution, "09_demo.ipynb")
    assert [c.id for c in exercise.cells] == [c.id for c in solution.cells]


@pytest.mark.parametrize("problem", ["missing", "duplicate"])
def test_cells_without_unique_ids_are_refused(problem):
    solution = _notebook()
    if problem == "missing":
        del solution.cells[2]["id"]
    else:
        solution.cells[2]["id"] = solution.cells[1]["id"]
    with pytest.raises(MarkerError, match="09_demo.ipynb, cell"):
        exercise_notebook(solution, "09_demo.ipynb")


def test_real_notebooks_share_their_cell_ids_with_the_solutions():
    for path in nbtools.solution_paths():
        solution = nbformat.read(path, as_version=4)
        exercise = nbformat.read(REAL_ROOT / "notebooks" / path.name, as_version=4)
        assert [c.id for c in exercise.cells] == [c.id for c in solution.cells], path.name


def test_repository_generated_files_are_up_to_date():
    """The real project: `make exercises` has been run and committed."""
    assert nbtools.stale() == []
