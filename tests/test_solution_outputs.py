"""The stored solutions show what they compute: every drawing cell has its picture, no output
names a path of the machine that ran it, and progress bars show their final state.

`make solutions` (course/tooling/refresh.py) writes them that way; these tests catch a notebook saved
some other way (e.g. executed with MPLBACKEND=Agg, which stores no figures).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course.tooling.refresh import WIDGET_VIEW

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))

# A cell draws when it shows a pyplot figure or calls a plotting function of course.viz.
DRAWS = re.compile(r"plt\.show\(\)|\bviz\.(?!describe)\w+\(")
# Absolute paths of a POSIX or Windows machine: a home, a workspace, a temp folder, a drive.
ABSOLUTE_PATH = re.compile(r"(?<![\w.~])(/(home|Users|root|work|tmp|opt|private|mnt)/|[A-Z]:\\\\)")
STALE_BAR = re.compile(r"(^|\s)0%\|")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _text_of(output: dict) -> str:
    parts = [output.get("text", ""), output.get("evalue", ""), *output.get("traceback", [])]
    for mime, value in output.get("data", {}).items():
        if mime.startswith("text/"):
            parts.append(value)
    return "".join("".join(p) if isinstance(p, list) else str(p) for p in parts)


def _draws(source: str) -> bool:
    """Whether running the cell draws: a drawing call outside any function it defines."""
    in_def = False
    for line in source.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indented = line[0].isspace()
        if not indented:
            in_def = line.startswith(("def ", "class ", "@"))
        if not in_def and DRAWS.search(line):
            return True
    return False


def _drawing_cells(path: Path) -> list[tuple[int, str]]:
    return [
        (number, "".join(cell["source"]))
        for number, cell in enumerate(_cells(path))
        if cell["cell_type"] == "code" and _draws("".join(cell["source"]))
    ]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_every_drawing_cell_stores_its_figure(path: Path) -> None:
    cells = _cells(path)
    missing = [
        f"cell {number}: {source.splitlines()[0][:70]!r}"
        for number, source in _drawing_cells(path)
        if not any(
            "image/png" in output.get("data", {}) or "image/svg+xml" in output.get("data", {})
            for output in cells[number].get("outputs", [])
        )
    ]
    assert not missing, (
        f"{path.name}: these cells draw but store no image (executed with MPLBACKEND=Agg? "
        f"re-run `make solutions`): " + "; ".join(missing)
    )


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_no_output_names_a_path_of_the_machine(path: Path) -> None:
    leaks = [
        f"cell {number}: ...{match.string[max(0, match.start() - 30) : match.end() + 40]!r}..."
        for number, cell in enumerate(_cells(path))
        for output in cell.get("outputs", [])
        if (match := ABSOLUTE_PATH.search(_text_of(output)))
    ]
    assert not leaks, f"{path.name}: stored outputs hold absolute paths: " + "; ".join(leaks)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_progress_bars_show_their_final_state(path: Path) -> None:
    stale = [
        f"cell {number}: {output['data']['text/plain']!r}"
        for number, cell in enumerate(_cells(path))
        for output in cell.get("outputs", [])
        if WIDGET_VIEW in output.get("data", {})
        and STALE_BAR.search("".join(output["data"].get("text/plain", "")))
    ]
    assert not stale, (
        f"{path.name}: progress bars saved at 0% (re-run `make solutions`): " + "; ".join(stale)
    )


def test_the_checks_can_fail() -> None:
    """The patterns above catch what they are meant to catch."""
    assert ABSOLUTE_PATH.search("SST-2 from prepared copy /work/main/data/prepared/sst2")
    assert ABSOLUTE_PATH.search(r"C:\\Users\\me\\course")
    assert not ABSOLUTE_PATH.search("from data/prepared/sst2 (mirror $COURSE_DATA_MIRROR/sst2)")
    assert not ABSOLUTE_PATH.search("see https://github.com/owner/repo/tree/main/solutions")
    assert STALE_BAR.search("training:   0%|          | 0/800 [00:00<?, ?it/s]")
    assert not STALE_BAR.search("training: 100%|██████████| 800/800 [00:25<00:00]")
    assert _draws("fig = viz.heatmap(table)\nplt.show()")
    assert _draws("for k in range(2):\n    viz.heatmap(tables[k])")
    assert not _draws("def plot(table):\n    viz.heatmap(table)\n    plt.show()")


def test_refresh_runs_the_kernel_in_this_environment(tmp_path: Path, monkeypatch) -> None:
    """The kernel sees our variables (data mirror, offline flags) but not MPLBACKEND=Agg:
    ipykernel then picks its inline backend, so figures are stored."""
    import nbformat

    from course.tooling.refresh import refresh

    monkeypatch.setenv("COURSE_TEST_MARKER", "seen")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    code = "import os; print(os.environ.get('COURSE_TEST_MARKER'), os.environ.get('MPLBACKEND'))"
    path = tmp_path / "probe.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), path)
    refresh(path)
    marker, backend = nbformat.read(path, as_version=4).cells[0].outputs[0]["text"].split()
    assert marker == "seen" and backend != "Agg"
