"""One measured table of run times (course/budgets.py); the README and every header agree with it."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import nbformat
import pytest

from course import budgets, nbtools
from course.budgets import NOTEBOOK_BUDGET_S, RUN_TIMES, STUDENT_MINUTES

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = nbtools.solution_paths()


def _header(path: Path) -> str:
    return nbformat.read(path, as_version=4).cells[0].source


def _readme_rows(text: str) -> dict[str, list[str]]:
    """Notebook number -> the cells of its row in the README's notebook table."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\| (\d\d) \|", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in line.strip("|").split(" | ")]
    return rows


def test_the_tables_cover_every_notebook_and_nothing_else():
    numbers = {path.name[:2] for path in SOLUTIONS}
    assert set(STUDENT_MINUTES) == numbers
    assert set(RUN_TIMES["seconds"]) == numbers
    assert set(NOTEBOOK_BUDGET_S) == numbers


def test_the_measurement_says_when_and_where():
    datetime.date.fromisoformat(RUN_TIMES["when"])
    assert "2-core" in RUN_TIMES["where"] and "idle" in RUN_TIMES["where"]
    assert RUN_TIMES["make_check_s"] >= sum(RUN_TIMES["seconds"].values())


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_header_quotes_the_table(path):
    lines = [line for line in _header(path).splitlines() if line.startswith("**Time:**")]
    assert lines == [budgets.header_time_line(path.name[:2])], (
        "the header's Time line differs from course/budgets.py: run `make exercises`"
    )


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_readme_row_quotes_the_table(path):
    row = _readme_rows((ROOT / "README.md").read_text(encoding="utf-8"))[path.name[:2]]
    assert tuple(row[-2:]) == budgets.readme_columns(path.name[:2]), (
        "the README's time columns differ from course/budgets.py: run `make exercises`"
    )


def test_readme_paragraph_under_the_table_quotes_the_table():
    assert budgets.readme_paragraph() in (ROOT / "README.md").read_text(encoding="utf-8")


def test_nothing_is_out_of_date():
    assert budgets.write_times(ROOT, write=False) == []


@pytest.mark.parametrize(
    "seconds, phrase",
    [
        (2.6, "under a minute"),
        (59.9, "under a minute"),
        (60, "about 1 minute"),
        (80.8, "about 1½ minutes"),
        (168.5, "about 3 minutes"),
        (201.0, "about 3½ minutes"),
        (311.3, "about 5 minutes"),
    ],
)
def test_run_all_phrase(seconds, phrase):
    assert budgets.run_all_phrase(seconds) == phrase


def test_render_rewrites_only_the_time_cells_and_the_paragraph():
    row = "| 08 | Intent | you build | [a](b) | [c](d) | [![Colab](e)](f) | 10 min | 192 s |"
    text = f"# T\n\n{row}\n| 99 | other | x | 1 min | 2 s |\n\n*Student time* is old.\nOld line.\n\nNext.\n"
    new = budgets.render_readme(text)
    student, cpu = budgets.readme_columns("08")
    assert f"| [![Colab](e)](f) | {student} | {cpu} |" in new
    assert "| 99 | other | x | 1 min | 2 s |" in new  # a row not in the tables stays as it is
    assert budgets.readme_paragraph() + "\n\nNext.\n" in new and "Old line" not in new
    assert budgets.render_readme(new) == new

    header = "# 08 · T\n\n**Prerequisites:** 05.\n\n**Time:** about 4 to 5 minutes, once."
    assert budgets.render_header(header, "08").endswith(budgets.header_time_line("08"))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A throw-away project: a README with the notebook table, one solution whose header is stale."""
    for folder in ("solutions", "notebooks", "course"):
        (tmp_path / folder).mkdir()
    monkeypatch.setattr(nbtools, "ROOT", tmp_path)
    monkeypatch.setattr(nbtools, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(nbtools, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(nbtools, "NN_MODULE", tmp_path / "course" / "nn.py")
    (tmp_path / "README.md").write_text(
        "| 07 | POS | x | 60 min | 136 s |\n\n*Student time* is stale.\n\n## Next\n",
        encoding="utf-8",
    )
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell(
            "# 07 · POS\n\n**Time:** about 60 minutes; *Run All* ~2½ min."
        ),
        nbformat.v4.new_code_cell("x = 1"),
    ]
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index}"
    nbformat.write(notebook, tmp_path / "solutions" / "07_pos_tagging.ipynb")
    return tmp_path


def test_check_names_stale_times_and_generate_fixes_them(project):
    assert nbtools.stale() == [
        "README.md quotes other times than course/budgets.py",
        "solutions/07_pos_tagging.ipynb quotes other times than course/budgets.py",
        "notebooks/07_pos_tagging.ipynb is missing",
        "course/nn.py is missing",
    ]
    assert nbtools.main(["check"]) == 1
    nbtools.generate()
    assert nbtools.stale() == []
    assert nbtools.generate() == []  # idempotent
    exercise = nbformat.read(project / "notebooks" / "07_pos_tagging.ipynb", as_version=4)
    assert budgets.header_time_line("07") in exercise.cells[0].source  # the copy follows
    assert budgets.readme_columns("07")[1] in (project / "README.md").read_text(encoding="utf-8")


# --- make bench: the stored runs and the README's table ----------------------------------------


@pytest.mark.parametrize("run", budgets.BENCH_RUNS, ids=lambda run: run["when"] + run["precision"])
def test_each_bench_run_says_when_where_how_and_under_what_load(run):
    datetime.date.fromisoformat(run["when"])
    assert run["where"] and run["load"]
    assert "make bench" in run["command"] or "python -m course.bench" in run["command"]
    assert run["precision"] in ("float32", "bf16 autocast")
    loop = run["loop"]
    # both sides of the loop comparison ran in the same precision, the one the run names
    assert loop["course_precision"] == loop["trainer_precision"] == run["precision"]
    assert 0 < loop["course_accuracy"] < 1 and 0 < loop["trainer_accuracy"] < 1


def test_readme_bench_table_quotes_the_runs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert budgets.bench_table() in text, (
        "the README's bench table differs from course/budgets.py: run `make exercises`"
    )


def test_render_bench_rewrites_only_between_the_markers():
    text = "# T\n\nbefore\n\n<!-- bench -->\nold table\n<!-- /bench -->\n\nafter\n"
    new = budgets.render_bench(text)
    assert new.startswith("# T\n\nbefore\n\n<!-- bench -->\n| run |")
    assert new.endswith("<!-- /bench -->\n\nafter\n") and "old table" not in new
    assert budgets.render_bench(new) == new
    assert budgets.render_bench("no markers\n") == "no markers\n"


def test_readme_class_grading_time_quotes_the_grading_costs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert budgets.class_grading_sentence() in text, (
        "the README's class-grading time differs from course/budgets.py: run `make exercises`"
    )
