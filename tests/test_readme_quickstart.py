"""What the README promises a newcomer: one screen to a running lab and a passing `make test`,
the notebook table with the student times, and links to the rest."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_WORDS, MAX_PARAGRAPH_WORDS, FIRST_SCREEN_LINES = 1500, 120, 40


def header_minutes() -> dict[str, int]:
    """The "**Time:** about N minutes" of each solution notebook's header."""
    found = {}
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        header = next(c.source for c in cells if "**Time:**" in c.source)
        found[path.name[:2]] = int(re.search(r"\*\*Time:\*\* about (\d+) minutes", header)[1])
    return found


def _prose_paragraphs(text: str) -> list[str]:
    """The paragraphs of ``text`` outside code blocks and tables (a list item is one)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    blocks = re.split(r"\n\s*\n|\n(?=- )", text)
    return [b for b in blocks if b.strip() and not b.lstrip().startswith(("|", "#"))]


def test_student_time_column_repeats_the_notebook_headers():
    lines = README.splitlines()
    header = next(line for line in lines if line.startswith("| # | notebook |"))
    column = [cell.strip() for cell in header.split("|")].index("time")
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


def test_the_first_screen_holds_the_lab_and_test_commands():
    first = README.splitlines()[:FIRST_SCREEN_LINES]
    assert any(re.match(r"make lab\b", line) for line in first), "no `make lab` line"
    assert any(re.match(r"make test\b", line) for line in first), "no `make test` line"


def test_the_readme_is_a_landing_page():
    words = len(README.split())
    assert words <= MAX_WORDS, f"the README has {words} words (at most {MAX_WORDS})"
    long = [p for p in _prose_paragraphs(README) if len(p.split()) > MAX_PARAGRAPH_WORDS]
    assert not long, f"paragraphs over {MAX_PARAGRAPH_WORDS} words: " + " / ".join(
        p[:60] for p in long
    )


def test_the_paragraph_rule_sees_a_long_paragraph():
    long = " ".join(["word"] * (MAX_PARAGRAPH_WORDS + 1))
    text = f"# T\n\n{long}\n\n- short item\n\n```\n{long}\n```\n"
    assert _prose_paragraphs(text) == [long, "- short item"]


def test_the_readme_links_every_page_of_the_guide():
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert pages, "no page under docs/"
    missing = [page for page in pages if f"]({page})" not in README]
    assert not missing, f"the README does not link {missing}"
