"""docs/grading.md, "What grading protects": every row of its tables names the tests that prove it.

A row that names no test, or a test that does not exist (renamed, removed), fails here: the
page may claim only what a test shows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"`(tests/test_\w+\.py)::(test_\w+)`")


def _section() -> str:
    """The claims: docs/grading.md up to its list of what is not protected."""
    text = (ROOT / "docs" / "grading.md").read_text(encoding="utf-8")
    return text[: text.index("## What is not protected")]


def _rows() -> list[str]:
    """The body rows of every table in the section (not the header or the |---| line)."""
    rows, lines = [], _section().splitlines()
    for before, line in zip(lines, lines[1:], strict=False):
        if line.startswith("| ") and not before.startswith("|---") and before.startswith("|"):
            rows.append(line)
        elif line.startswith("| ") and before.startswith("|---"):
            rows.append(line)
    return rows


def test_the_page_has_its_two_tables():
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


def test_the_stated_notebook_bound_is_the_engines_and_fits_gradescope():
    """The stated notebook bound is computed, not typed: 10 x GRADING_COSTS + 120 s, from the
    cheapest to the dearest notebook; with the setup check's own bound before it, every
    notebook graded alone (``ONLY=NN``) leaves results.json written within Gradescope's
    default 10 minutes."""
    from course.grading import engine
    from course.tooling.budgets import GRADESCOPE_DEFAULTS, GRADING_COSTS

    bounds = {int(nn): engine.deadline_s(int(nn)) for nn in GRADING_COSTS["cpu_s"]}
    low, high = min(bounds, key=bounds.get), max(bounds, key=bounds.get)
    text = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    stated = f"from {bounds[low]:.0f} s ({low:02d}) to {bounds[high]:.0f} s ({high:02d})"
    assert stated in " ".join(text.split()), stated
    assert f"at most {bounds[high]:.0f} s" in _section()
    setup_check = engine.deadline_s(0)  # the known-right notebook is notebook 00's check
    assert all(b + setup_check < GRADESCOPE_DEFAULTS["timeout_s"] for b in bounds.values())
    for nn, cost in GRADING_COSTS["cpu_s"].items():
        assert (
            engine.deadline_s(int(nn)) == engine.DEADLINE_FACTOR * cost + engine.DEADLINE_MARGIN_S
        )
