"""How long each exercise's introduction is: the words of markdown from its heading to its
first code cell, in every solution notebook (about 150 at most).

    .venv/bin/python docs/exercise_intros.py [--over N]

An exercise heading is a markdown line starting with ``#`` that names ``Exercise N.k``. Words
are whitespace-separated tokens after LaTeX, HTML comments and Markdown images are removed,
so a formula or an embedded diagram counts as one word, not as hundreds of characters.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^#+ .*\bExercise (\d+\.\d+)", re.MULTILINE)
# Display math, inline math, images (diagrams) and HTML comments each count as one word.
COLLAPSE = re.compile(
    r"\$\$.*?\$\$|\$[^$\n]+\$|!\[(?:[^\[\]]|\[[^\[\]]*\])*\]\([^)]*\)|<!--.*?-->", re.DOTALL
)


def words(text: str) -> int:
    return len(COLLAPSE.sub(" X ", text).split())


def intros(path: Path) -> list[tuple[str, int, bool]]:
    """(exercise, words from its heading to its first code cell, heading starts its cell)."""
    cells = nbformat.read(path, as_version=4).cells
    found = []
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        for match in HEADING.finditer(cell.source):
            text = cell.source[match.start():]
            for later in cells[index + 1:]:
                if later.cell_type == "code":
                    break
                text += "\n" + later.source
            at_start = not cell.source[: match.start()].strip()
            found.append((match.group(1), words(text), at_start))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--over", type=int, default=0, help="list only intros longer than this")
    args = parser.parse_args(argv)
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        for exercise, count, at_start in intros(path):
            if count > args.over or not at_start:
                where = "" if at_start else "  (begins mid-cell)"
                print(f"{path.name:32} Exercise {exercise:5} {count:4} words{where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
