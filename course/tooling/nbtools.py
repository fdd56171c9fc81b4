"""The notebook tool: solutions/ is the single source, everything else is generated.

Commands (``python -m course.tooling.nbtools <command>``; the Makefile wraps them):

* ``generate``  write ``notebooks/NN_name.ipynb`` from ``solutions/NN_name.ipynb`` and
  ``course/nn.py`` from the solutions' ``#| export`` cells; the README's time columns and each
  header's ``**Time:**`` line from the tables in ``course/tooling/budgets.py``.
* ``check``     exit 1, naming the files, when ``notebooks/`` or ``course/nn.py`` is out of date.
* ``badges --repo OWNER/NAME``  point every Colab badge and setup cell at another repository.

Cell ids: every cell of a solution must carry a unique nbformat ``id``; the exercise copy keeps
it unchanged, and the grader (``course.grading``) finds a student's answer cells by it.

Marker rules
------------
Code cells: the lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` are what the
student writes. In the exercise they become ``# TODO: <hint>`` and ``raise
NotImplementedError`` at the marker's indentation; text after ``### BEGIN SOLUTION`` on the
same line is the hint. Markdown cells: ``<!-- BEGIN ANSWER -->`` ... ``<!-- END ANSWER -->``
becomes an answer placeholder. Every other cell is copied unchanged (Colab links are
re-pointed from ``solutions/`` to ``notebooks/``), and all outputs are cleared.

Export: a code cell whose first line is ``#| export`` is copied, markers removed, into
``course/nn.py`` (in notebook order) so later notebooks import it instead of copying it.
Its import lines are hoisted to the top of ``nn.py``.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

from course.framework.contract import ANSWER_PLACEHOLDER, STUB_TODO, course_metadata
from course.tooling import budgets

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS, NOTEBOOKS, NN_MODULE = ROOT / "solutions", ROOT / "notebooks", ROOT / "course" / "nn.py"

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_ANSWER, END_ANSWER = "<!-- BEGIN ANSWER -->", "<!-- END ANSWER -->"
EXPORT_TAG = "#| export"
# The slug ends at "/", ".git", a quote (also the JSON-escaped \" of a stored notebook), ")",
# whitespace or the end of a line.
REPO_URL = re.compile(
    r"(github\.com/|colab\.research\.google\.com/github/)([\w.-]+/[\w.-]+?)"
    r"(/|\.git|\\?\"|\)|\s|$)",
    re.MULTILINE,
)


class MarkerError(ValueError):
    """A solution notebook has unbalanced or nested markers, or cells without unique ids."""


def _blocks(lines: list[str], begin: str, end: str, where: str) -> list[tuple[int, int]]:
    """(start, stop) line indices of each marker pair; raise MarkerError when malformed."""
    blocks, start = [], None
    for number, line in enumerate(lines):
        text = line.strip()
        if text.startswith(begin):
            if start is not None:
                raise MarkerError(
                    f"{where}, line {number + 1}: {begin!r} inside another block "
                    f"(opened on line {start + 1}); close it with {end!r} first."
                )
            start = number
        elif text.startswith(end):
            if start is None:
                raise MarkerError(
                    f"{where}, line {number + 1}: {end!r} without a {begin!r} before it."
                )
            blocks.append((start, number))
            start = None
    if start is not None:
        raise MarkerError(f"{where}, line {start + 1}: {begin!r} is never closed by {end!r}.")
    return blocks


def stub_code(source: str, where: str = "cell") -> str:
    """Replace each solution block with a TODO hint and ``raise NotImplementedError``."""
    lines = source.split("\n")
    out, previous = [], 0
    for start, stop in _blocks(lines, BEGIN_SOLUTION, END_SOLUTION, where):
        marker = lines[start]
        indent = marker[: len(marker) - len(marker.lstrip())]
        hint = marker.strip()[len(BEGIN_SOLUTION) :].strip(" :-") or "your code here"
        out += lines[previous:start] + [
            f"{indent}{STUB_TODO} {hint}",
            f"{indent}raise NotImplementedError",
        ]
        previous = stop + 1
    return "\n".join(out + lines[previous:])


def strip_markers(source: str, where: str = "cell") -> str:
    """The solution code with the marker lines removed (what ``course/nn.py`` receives)."""
    lines = source.split("\n")
    marker_lines = {
        i for block in _blocks(lines, BEGIN_SOLUTION, END_SOLUTION, where) for i in block
    }
    return "\n".join(line for i, line in enumerate(lines) if i not in marker_lines)


def stub_markdown(source: str, where: str = "cell") -> str:
    """Replace each answer block (markers included) with the answer placeholder."""
    lines = source.split("\n")
    out, previous = [], 0
    for start, stop in _blocks(lines, BEGIN_ANSWER, END_ANSWER, where):
        out += lines[previous:start] + [ANSWER_PLACEHOLDER]
        previous = stop + 1
    return "\n".join(out + lines[previous:])


def check_cell_ids(notebook: nbformat.NotebookNode, name: str) -> None:
    """Raise MarkerError unless every cell has an id, unique in the notebook."""
    seen: dict[str, int] = {}
    for index, cell in enumerate(notebook.cells):
        cell_id = cell.get("id")
        if not cell_id:
            raise MarkerError(
                f"{name}, cell {index} has no id: save the notebook with nbformat >= 4.5 "
                "(JupyterLab does) so exercise cells can be matched when grading."
            )
        if cell_id in seen:
            raise MarkerError(
                f"{name}, cells {seen[cell_id]} and {index} share the id {cell_id!r}."
            )
        seen[cell_id] = index


def exercise_notebook(solution: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """The student version of one solution notebook (same cells, same ids)."""
    check_cell_ids(solution, name)
    notebook = copy.deepcopy(solution)
    notebook.metadata.pop("widgets", None)  # saved progress-bar state belongs to the outputs
    # What the grader recognises the notebook by, whatever its file is renamed to (course.handins).
    course_metadata(notebook, Path(name).stem)
    for index, cell in enumerate(notebook.cells):
        where = f"{name}, cell {index}"
        if cell.cell_type == "code":
            cell.source = stub_code(cell.source, where)
            cell.outputs, cell.execution_count = [], None
        elif cell.cell_type == "markdown":
            cell.source = stub_markdown(cell.source, where).replace("/solutions/", "/notebooks/")
    return notebook


def solution_paths() -> list[Path]:
    return sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))


def render_exercises() -> dict[Path, str]:
    """Every exercise notebook's text, keyed by its path under ``notebooks/``."""
    rendered = {}
    for path in solution_paths():
        notebook = exercise_notebook(nbformat.read(path, as_version=4), path.name)
        rendered[NOTEBOOKS / path.name] = nbformat.writes(notebook) + "\n"
    return rendered


def render_nn_module(paths: list[Path] | None = None) -> str:
    """``course/nn.py``: the ``#| export`` cells of every solution (or of ``paths``), imports hoisted."""
    imports: list[str] = []
    bodies: list[str] = []
    for path in solution_paths() if paths is None else paths:
        notebook = nbformat.read(path, as_version=4)
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code" or not cell.source.startswith(EXPORT_TAG):
                continue
            code = strip_markers(cell.source, f"{path.name}, cell {index}")
            body = []
            for line in code.split("\n")[1:]:
                if line.startswith(("import ", "from ")) and not line.startswith("from __future__"):
                    if not line.startswith("from course.nn import") and line not in imports:
                        imports.append(line)
                else:
                    body.append(line)
            bodies.append(f"# --- from solutions/{path.name} ---\n" + "\n".join(body).strip("\n"))
    header = (
        '"""Modules built in the notebooks, for later notebooks to import.\n\n'
        "GENERATED by `python -m course.tooling.nbtools generate` from the `#| export` cells of\n"
        "solutions/*.ipynb: edit the solution notebook, not this file.\n"
        '"""\n\nfrom __future__ import annotations\n'
    )
    text = header + ("\n" + "\n".join(imports) + "\n" if imports else "")
    return text + "".join(f"\n\n{body}\n" for body in bodies)


def render_all() -> dict[Path, str]:
    files = render_exercises()
    files[NN_MODULE] = render_nn_module()
    return files


def generate() -> list[Path]:
    """Write every generated file that changed; return the ones written."""
    # The README's time columns and each header's Time line come from course/tooling/budgets.py; the
    # headers first, since the exercise copies repeat them.
    written = budgets.write_times(ROOT)
    NOTEBOOKS.mkdir(exist_ok=True)
    for path, text in render_all().items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def stale() -> list[str]:
    """Generated files that differ from what the solutions produce, plus orphans."""
    problems = [
        f"{path.relative_to(ROOT)} quotes other times than course/tooling/budgets.py"
        for path in budgets.write_times(ROOT, write=False)
    ]
    expected = render_all()
    for path, text in expected.items():
        if not path.exists():
            problems.append(f"{path.relative_to(ROOT)} is missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path.relative_to(ROOT)} is out of date")
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        if path not in expected:
            problems.append(f"{path.relative_to(ROOT)} has no solution in solutions/")
    return problems


def rewrite_repository(text: str, slug: str) -> str:
    """``text`` with every GitHub / Colab repository URL pointing at ``slug`` (owner/name)."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", slug):
        raise SystemExit(f"REPO must look like owner/name, got {slug!r}")
    return REPO_URL.sub(lambda m: m.group(1) + slug + m.group(3), text)


def set_repository(slug: str) -> list[Path]:
    """Point Colab badges, setup cells and the project URL at github.com/<slug>."""
    rewrite_repository("", slug)  # validates the slug
    targets = [ROOT / "README.md", ROOT / "pyproject.toml", *solution_paths()]
    changed = []
    for path in targets:
        text = path.read_text(encoding="utf-8")
        new = rewrite_repository(text, slug)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course.tooling.nbtools", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("generate", help="write notebooks/ and course/nn.py from solutions/")
    sub.add_parser("check", help="fail if notebooks/ or course/nn.py is out of date")
    badges = sub.add_parser("badges", help="point Colab badges at another repository")
    badges.add_argument("--repo", required=True, help="owner/name on GitHub")
    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            written = generate()
            print(
                "\n".join(f"wrote {p.relative_to(ROOT)}" for p in written)
                or "everything up to date"
            )
        elif args.command == "check":
            problems = stale()
            if problems:
                print(
                    "Generated files are out of date; run `make exercises` and commit the result:"
                )
                print("\n".join(f"  - {p}" for p in problems))
                return 1
            print(f"notebooks/ and course/nn.py are up to date ({len(solution_paths())} solutions)")
        elif args.command == "badges":
            changed = set_repository(args.repo)
            print(
                "\n".join(f"updated {p.relative_to(ROOT)}" for p in changed) or "nothing to change"
            )
            written = generate()
            print("\n".join(f"wrote {p.relative_to(ROOT)}" for p in written))
    except MarkerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
