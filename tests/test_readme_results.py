"""The README's "Results at a glance": every figure it calls measured here is one that the stored
solution notebook prints, so a re-executed notebook with other figures fails until the line is
updated."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURE = re.compile(r"\d[\d,]*\.\d+%?|\d+%")


def _glance_rows() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Results at a glance", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| \d\d ", line)]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _printed(nn: str) -> str:
    """Everything the stored solution notebook ``nn`` printed (streams and plain-text results)."""
    (path,) = (ROOT / "solutions").glob(f"{nn}_*.ipynb")
    texts = []
    for cell in nbformat.read(path, as_version=4).cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", "") or output.get("data", {}).get("text/plain", ""))
    return "\n".join(texts)


def test_the_table_has_the_applied_notebooks():
    assert [row[0][:2] for row in _glance_rows()] == ["06", "07", "08", "09", "10"]


@pytest.mark.parametrize("row", _glance_rows(), ids=lambda row: row[0][:2])
def test_every_measured_figure_is_printed_by_its_stored_notebook(row):
    figures = FIGURE.findall(row[1])
    assert figures, f"no figure in {row[1]!r}"
    printed = _printed(row[0][:2])
    missing = [figure for figure in figures if figure not in printed]
    assert not missing, f"notebook {row[0][:2]} prints none of {missing}: update the README's line"


def test_a_figure_the_notebook_does_not_print_is_caught():
    assert "99.9%" not in _printed("06") and FIGURE.findall("fine-tuned 99.9%") == ["99.9%"]
