"""The README's "What grading protects": every row of its tables names the tests that prove it.

A row that names no test, or a test that does not exist (renamed, removed), fails here: the
section may claim only what a test shows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"`(tests/test_\w+\.py)::(test_\w+)`")


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## What grading protects")
    return text[start : text.index("\n## ", start + 1)]


def _rows() -> list[str]:
    """The body rows of every table in the section (not the header or the |---| line)."""
    rows, lines = [], _section().splitlines()
    for before, line in zip(lines, lines[1:], strict=False):
        if line.startswith("| ") and not before.startswith("|---") and before.startswith("|"):
            rows.append(line)
        elif line.startswith("| ") and before.startswith("|---"):
            rows.append(line)
    return rows


def test_the_section_has_its_two_tables():
    rows = _rows()
    assert len(rows) >= 15
    assert any("150,000 chained cells" in r for r in rows) and any("nbformat 3" in r for r in rows)


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r.split("|")[1].strip()[:40])
def test_every_row_names_tests_that_exist(row):
    named = NAMED.findall(row)
    assert named, f"this row names no test: {row[:120]}"
    for path, name in named:
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {name}\(", source, re.MULTILINE), f"{path} has no {name}"
