"""A student copy of the course up to one notebook: ``python -m course.release DIR UPTO``.

The copy holds notebooks 00..UPTO (the exercise versions, badges and setup cells pointing at
``--repo``), the ``course`` package with ``course/nn.py`` rebuilt from the solutions *before*
UPTO only and the checks of the released notebooks only, the data README and samples, the tests
that make sense without solutions, and a README and Makefile of its own. No ``solutions/``.

What still leaks, by design: ``course/nn.py`` holds the answers of the notebooks before UPTO
(later notebooks import them), and ``tests/test_checks_nbKK.py`` for those notebooks holds
reference implementations of their exercises.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from course import nbtools

ROOT = Path(__file__).resolve().parents[1]
GENERIC_TESTS = [
    "conftest.py",
    "test_check.py",
    "test_data.py",
    "test_env_viz.py",
    "test_models.py",
]
TOP_FILES = [
    "requirements.txt",
    "requirements-colab.txt",
    "environment.yml",
    "pyproject.toml",
    "LICENSE",
]
SKIP_MODULES = {"nbtools.py", "release.py", "refresh.py"}  # need solutions/ to work

README = """# Transformers, hands-on: notebooks 00 to {upto}

Your copy of the course. Each notebook explains one idea, asks you to write the key parts, and
checks your code right after you write it.

## Start

You need Python 3.11 and `make`.

```bash
make setup      # create .venv with the pinned packages (once)
make lab        # open JupyterLab on notebooks/
make progress   # what you have done: a table of every exercise, then "passed: N of M exercises"
```

Open `notebooks/00_welcome.ipynb` first. On Colab, use the badge at the top of each notebook: its
setup cell clones {repo_url} and installs what Colab lacks.

An exercise cell contains `# TODO:` and `raise NotImplementedError`: replace them with your
code, run the cell, then run the check cell after it. Keep your answer inside the exercise cell
(helper functions too): your instructor grades exactly those cells with the same checks.

## What this copy contains

- `notebooks/`: notebooks 00 to {upto}.
- `course/`: the helper package. `course/nn.py` holds the modules that later notebooks import,
  built from the *answers* of notebooks {before}: by design, this copy contains those earlier
  answers (and `tests/` contains reference implementations for them). Notebook {upto}'s own
  answers are not here.
- `data/`: the data README and small samples; `make data` (needs a network) prepares the full
  datasets, and without them the notebooks fall back to the samples.
- `tests/`: `make test` runs the package's own tests.
"""

MAKEFILE = """# Student copy of the course: `make setup`, `make lab`, `make progress`, `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
BIN    := .venv/bin
.PHONY: setup lab progress test data

setup:
\t@test -x $(BIN)/python || $(PYTHON) -m venv .venv
\t$(BIN)/python -m pip install --quiet -r requirements.txt
\t$(BIN)/python -m pip install --quiet --no-deps -e .

lab:
\t$(BIN)/jupyter lab --notebook-dir=notebooks

progress:
\t$(BIN)/python -m course.classroom progress --dir $(or $(DIR),notebooks) -j $(or $(JOBS),2)

test:
\t$(BIN)/python -m pytest tests -q

data:
\t$(BIN)/python -m course.data prepare
"""


def release(dest: Path, upto: int, repo: str | None = None) -> list[Path]:
    """Write the student copy into ``dest`` (which must not exist or be empty)."""
    if dest.exists() and any(dest.iterdir()):
        raise SystemExit(f"{dest} is not empty: choose a new folder")
    solutions = [p for p in nbtools.solution_paths() if int(p.name[:2]) <= upto]
    if not solutions or int(solutions[-1].name[:2]) != upto:
        raise SystemExit(f"no solution notebook {upto:02d}_*.ipynb in {nbtools.SOLUTIONS}")
    earlier = [p for p in solutions if int(p.name[:2]) < upto]

    def rewrite(text: str) -> str:
        return nbtools.rewrite_repository(text, repo) if repo else text

    written: dict[Path, str | bytes] = {}
    for path in solutions:
        notebook = nbtools.exercise_notebook(nbformat.read(path, as_version=4), path.name)
        written[Path("notebooks") / path.name] = rewrite(nbformat.writes(notebook) + "\n")
    for path in sorted((ROOT / "course").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if path.name in SKIP_MODULES or "__pycache__" in path.parts:
            continue
        if relative.parent.name == "checks" and path.name.startswith("nb"):
            if int(path.stem[2:]) > upto:
                continue
        written[relative] = path.read_bytes()
    written[Path("course/nn.py")] = nbtools.render_nn_module(earlier)
    tests = GENERIC_TESTS + [f"test_checks_nb{p.name[:2]}.py" for p in earlier]
    for name in tests:
        if (ROOT / "tests" / name).exists():
            written[Path("tests") / name] = (ROOT / "tests" / name).read_bytes()
    for name in TOP_FILES:
        if (ROOT / name).exists():
            written[Path(name)] = rewrite((ROOT / name).read_text(encoding="utf-8"))
    written[Path("data/README.md")] = (ROOT / "data" / "README.md").read_bytes()
    for path in sorted((ROOT / "data" / "samples").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            written[path.relative_to(ROOT)] = path.read_bytes()
    slug = repo or "transformers-hands-on/transformers-hands-on"
    before = f"00 to {upto - 1:02d}" if upto > 0 else "(none: this is the first notebook)"
    written[Path("README.md")] = README.format(
        upto=f"{upto:02d}", repo_url=f"https://github.com/{slug}", before=before
    )
    written[Path("Makefile")] = MAKEFILE
    written[Path(".gitignore")] = (
        ".venv/\n__pycache__/\n*.egg-info/\ndata/prepared/\ndata/downloads/\n"
    )
    for relative, content in written.items():
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    return sorted(dest / r for r in written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course.release", description=__doc__.split("\n")[0]
    )
    parser.add_argument("dest", type=Path, help="folder to create")
    parser.add_argument("upto", type=int, help="last notebook number to release, e.g. 3")
    parser.add_argument("--repo", default=None, help="owner/name the badges and setup cells clone")
    args = parser.parse_args(argv)
    files = release(args.dest, args.upto, args.repo)
    print(f"wrote {len(files)} files to {args.dest} (notebooks 00 to {args.upto:02d})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
