"""One measured table of run times (course/tooling/budgets.py); the README, docs/results.md,
docs/instructors.md and every header agree with it."""

from __future__ import annotations

import datetime
import re
import statistics
from pathlib import Path

import nbformat
import pytest

from course.tooling import budgets, nbtools
from course.tooling.budgets import NOTEBOOK_BUDGET_S, RUN_TIMES, STUDENT_MINUTES

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = nbtools.solution_paths()
RESULTS = ROOT / budgets.RESULTS_PAGE
INSTRUCTORS = ROOT / budgets.INSTRUCTORS_PAGE


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
    # each header names the machine and says the time is an idle one
    assert "2-core" in RUN_TIMES["machine"] and "idle" in RUN_TIMES["machine"]
    assert RUN_TIMES["machine"] in budgets.header_time_line("00")
    assert RUN_TIMES["make_check_s"] >= sum(RUN_TIMES["seconds"].values())


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_header_quotes_the_table(path):
    lines = [line for line in _header(path).splitlines() if line.startswith("**Time:**")]
    assert lines == [budgets.header_time_line(path.name[:2])], (
        "the header's Time line differs from course/tooling/budgets.py: run `make exercises`"
    )


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_readme_row_quotes_the_table(path):
    row = _readme_rows((ROOT / "README.md").read_text(encoding="utf-8"))[path.name[:2]]
    assert row[-1] == budgets.readme_time(path.name[:2]), (
        "the README's time column differs from course/tooling/budgets.py: run `make exercises`"
    )


def test_the_results_page_quotes_the_run_time_table():
    table = budgets.run_time_table()
    assert table in RESULTS.read_text(encoding="utf-8")
    for path in SOLUTIONS:
        assert f"| `{path.stem}` | {budgets.readme_time(path.name[:2])} | " in table


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


def test_render_rewrites_only_the_time_cells_and_the_marked_tables():
    row = "| 08 | [Intent](a) | you build | [![Colab](e)](f) | 10 min |"
    text = f"# T\n\n{row}\n| 99 | other | x | 1 min |\n\nNext.\n"
    new = budgets.render_readme(text)
    assert f"| [![Colab](e)](f) | {budgets.readme_time('08')} |" in new
    assert "| 99 | other | x | 1 min |" in new  # a row not in the tables stays as it is
    assert new.endswith("\n\nNext.\n") and budgets.render_readme(new) == new
    page = "# R\n\nbefore\n\n<!-- run times -->\nold\n<!-- /run times -->\n\nafter\n"
    rendered = budgets.render_results(page)
    assert rendered == f"# R\n\nbefore\n\n{budgets.run_time_table()}\n\nafter\n"
    assert budgets.render_results(rendered) == rendered

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
    (tmp_path / "README.md").write_text("| 07 | POS | x | 10 min |\n\n## Next\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results.md").write_text(
        "# R\n\n<!-- run times -->\nstale\n<!-- /run times -->\n", encoding="utf-8"
    )
    monkeypatch.setattr(budgets, "_ROOT", tmp_path)
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
        "README.md quotes other times than course/tooling/budgets.py",
        "docs/results.md quotes other times than course/tooling/budgets.py",
        "solutions/07_pos_tagging.ipynb quotes other times than course/tooling/budgets.py",
        "notebooks/07_pos_tagging.ipynb is missing",
        "course/nn.py is missing",
    ]
    assert nbtools.main(["check"]) == 1
    nbtools.generate()
    assert nbtools.stale() == []
    assert nbtools.generate() == []  # idempotent
    exercise = nbformat.read(project / "notebooks" / "07_pos_tagging.ipynb", as_version=4)
    assert budgets.header_time_line("07") in exercise.cells[0].source  # the copy follows
    results = (project / "docs" / "results.md").read_text(encoding="utf-8")
    assert f"| `07_pos_tagging` | 60 min | {budgets.cpu_time('07')} |" in results


# --- make bench: the stored runs and their table --------------------------------------------------


@pytest.mark.parametrize("run", budgets.BENCH_RUNS, ids=lambda run: run["output"])
def test_each_bench_run_says_when_where_how_under_what_load_and_keeps_its_output(run):
    datetime.date.fromisoformat(run["when"])
    assert run["where"] and run["load"]
    assert "make bench" in run["command"] or "python -m course.tooling.bench" in run["command"]
    assert run["output"] in run["command"]  # the file is what that command wrote
    output = budgets.bench_output(run)  # stored: no figure of the table is typed by hand
    loop = output["loop"]
    # both sides of the loop comparison ran in the same precision
    assert loop["course"]["precision"] == loop["trainer"]["precision"]
    assert loop["course"]["precision"] in budgets.PRECISIONS
    assert 0 < loop["course"]["accuracy"] < 1 and 0 < loop["trainer"]["accuracy"] < 1
    assert output["layers"]["course_ms"] > 0 and output["layers"]["torch_ms"] > 0
    # a run of interleaved rounds stores every round's ratio, and its median and range are theirs
    for part in (loop, output["layers"]):
        if "rounds" not in part:
            continue  # a run of one block per side: the table says "one run"
        values = part["ratio"]["values"]
        assert part["rounds"] >= 3 and len(values) == part["rounds"]
        assert part["ratio"]["median"] == statistics.median(values)
        assert (part["ratio"]["min"], part["ratio"]["max"]) == (min(values), max(values))
    if "runs" in loop:
        ratios = [r["trainer"]["seconds"] / r["course"]["seconds"] for r in loop["runs"]]
        assert ratios == loop["ratio"]["values"]


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "values": values}


def test_the_bench_table_reads_every_figure_from_the_stored_output(tmp_path, monkeypatch):
    import json

    side = {"seconds": 20.0, "cpu_seconds": 40.0, "accuracy": 0.8314, "precision": "float32"}
    trainer = {**side, "seconds": 21.5, "accuracy": 0.7993, "optimizer": "adamw_torch_fused",
               "warmup_steps": 9}
    output = {
        "machine": "x86_64, 2 cores",
        "load1_before": 0.42,
        "load1_after": 1.96,
        "loop": {
            "steps": 94,
            "batch_size": 32,
            "rounds": 3,
            "runs": [{"course": side, "trainer": trainer}] * 3,
            "course": side,
            "trainer": trainer,
            "ratio": _spread([1.02, 1.07, 1.11]),
            "cpu_ratio": _spread([0.98, 1.0, 1.04]),
        },
        "layers": {
            "sizes": {"d_model": 64, "heads": 4, "d_ff": 128, "layers": 2, "batch": 64, "length": 14},
            "rounds": 21, "steps_per_round": 5,
            "course_ms": 30.0, "torch_ms": 33.0, "course_cpu_ms": 60.0, "torch_cpu_ms": 66.0,
            "ratio": _spread([1.05, 1.1, 1.2]), "cpu_ratio": _spread([1.08, 1.1, 1.13]),
        },
    }
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "run.json").write_text(json.dumps(output), encoding="utf-8")
    run = {"when": "2026-11-28", "where": "a test machine", "command": "make bench JSON=docs/run.json",
           "load": "idle", "output": "docs/run.json", "printed": "docs/run.txt"}
    monkeypatch.setattr(budgets, "_ROOT", tmp_path)
    monkeypatch.setattr(budgets, "BENCH_RUNS", [run])
    table = " ".join(budgets.bench_table().split())  # the note under the table is wrapped
    for figure in ("20.0 s (40.0 s CPU)", "21.5 s", "83.1%", "79.9%",
                   "Trainer / course: 1.07 (1.02 to 1.11) wall-clock, 1.00 (0.98 to 1.04) CPU",
                   "torch / course: 1.10 (1.05 to 1.20) wall-clock, 1.10 (1.08 to 1.13) CPU",
                   "3 rounds", "21 rounds of 5 steps", "`docs/run.json`", "`docs/run.txt`",
                   "warm-up steps 9", "load average 0.4 before and 2.0 after"):
        assert figure in table, figure
    monkeypatch.setattr(budgets, "BENCH_RUNS", [])
    assert "No run of `make bench` with its output stored yet" in budgets.bench_table()


def test_the_results_page_quotes_the_bench_runs():
    assert budgets.bench_table() in RESULTS.read_text(encoding="utf-8"), (
        "docs/results.md's bench table differs from course/tooling/budgets.py: run `make exercises`"
    )


def test_render_bench_rewrites_only_between_the_markers():
    text = "# T\n\nbefore\n\n<!-- bench -->\nold table\n<!-- /bench -->\n\nafter\n"
    new = budgets.render_bench(text)
    assert new.startswith("# T\n\nbefore\n\n" + budgets.bench_table())
    assert new.endswith("<!-- /bench -->\n\nafter\n") and "old table" not in new
    assert budgets.render_bench(new) == new
    assert budgets.render_bench("no markers\n") == "no markers\n"


def test_the_instructors_guide_quotes_the_class_grading_time():
    assert budgets.class_grading_sentence() in INSTRUCTORS.read_text(encoding="utf-8"), (
        "docs/instructors.md's class-grading time differs from course/tooling/budgets.py: "
        "run `make exercises`"
    )


# --- the precision default: its measured runs, the rule, its table -------------------------------


def test_the_precision_runs_say_when_where_how_and_under_what_load():
    runs = budgets.PRECISION_RUNS
    datetime.date.fromisoformat(runs["when"])
    assert runs["where"] and "--loop-only" in runs["measurements"]["course loop"]
    assert {run["what"] for run in runs["runs"]} == set(runs["measurements"])
    # idle and at least one load beside other work, each described
    assert {run["load"] for run in runs["runs"]} == set(runs["loads"]) > {"idle"}
    groups = {(run["what"], run["load"]) for run in runs["runs"]}
    for what, load in groups:
        mine = [r for r in runs["runs"] if (r["what"], r["load"]) == (what, load)]
        # both precisions, as many runs of each
        assert sorted(r["precision"] for r in mine) == sorted(budgets.PRECISIONS * (len(mine) // 2))
        assert all(r["seconds"] > 0 and (r["load1"] is None or r["load1"] >= 0) for r in mine)
    assert set(budgets.precision_medians()) == groups  # every group compares the two


def test_the_default_precision_is_the_one_the_stored_runs_give():
    from course import env

    assert env.BF16_BY_DEFAULT == (budgets.precision_default() == "bf16 autocast"), (
        "course/env.py's BF16_BY_DEFAULT disagrees with PRECISION_RUNS in course/tooling/budgets.py"
    )


def _runs(idle: tuple[float, float], busy: tuple[float, float]) -> list[dict]:
    return [
        {"what": "course loop", "load": load, "precision": precision, "seconds": seconds}
        for load, times in (("idle", idle), ("busy", busy))
        for precision, seconds in zip(budgets.PRECISIONS, times, strict=True)
    ]


@pytest.mark.parametrize(
    "idle, busy, expected",
    [
        ((20.0, 14.0), (65.0, 101.0), "float32"),  # bf16 faster idle, 1.55x slower busy
        ((20.0, 19.0), (30.0, 35.0), "float32"),  # both within 1.2x: the smaller worst case
        ((20.0, 16.0), (30.0, 33.0), "bf16 autocast"),  # float32 1.25x slower idle: bf16
        ((30.0, 20.0), (20.0, 30.0), "float32"),  # neither within 1.2x: float32
    ],
)
def test_precision_default_rule(idle, busy, expected):
    assert budgets.precision_default(_runs(idle, busy)) == expected


def test_the_results_page_quotes_the_precision_runs():
    assert budgets.precision_table() in RESULTS.read_text(encoding="utf-8"), (
        "docs/results.md's precision table differs from course/tooling/budgets.py: run `make exercises`"
    )
