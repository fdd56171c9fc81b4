"""What the README promises a newcomer: a clone line, the student times, the offline switch."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def header_minutes() -> dict[str, int]:
    """The "**Time:** about N minutes" of each solution notebook's header."""
    found = {}
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        header = next(c.source for c in cells if "**Time:**" in c.source)
        found[path.name[:2]] = int(re.search(r"\*\*Time:\*\* about (\d+) minutes", header)[1])
    return found


def test_student_time_column_repeats_the_notebook_headers():
    lines = README.splitlines()
    header = next(line for line in lines if line.startswith("| # | notebook |"))
    column = [cell.strip() for cell in header.split("|")].index("student time")
    table = {}
    for line in lines:
        if re.match(r"\| \d\d \|", line):
            cells = [cell.strip() for cell in line.split("|")]
            table[cells[1]] = cells[column]
    assert table == {nn: f"{minutes} min" for nn, minutes in header_minutes().items()}


def test_quick_start_clones_the_repository():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^git clone https://github\.com/[\w.-]+/[\w.-]+\.git course\ncd course$", quick, re.M)
    for promise in ("make setup TORCH=cpu", "make lab DIR=solutions", "LAB_ARGS", "make test"):
        assert promise in quick


def test_offline_switch_is_documented_beside_the_mirror():
    offline = next(line for line in README.split("\n- ") if line.startswith("**Offline use.**"))
    assert "COURSE_DATA_MIRROR" in offline and "COURSE_OFFLINE=1" in offline
