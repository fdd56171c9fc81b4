"""A student copy of the course up to one notebook: ``python -m course.tooling.release DIR UPTO``.

The copy holds notebooks 00..UPTO (the exercise versions, badges and setup cells pointing at
``--repo``), the same notebooks untouched in ``course/templates/`` (what ``make progress``
grades against, as the instructor's ``make grade`` does), the ``course`` package with
``course/nn.py`` rebuilt from the solutions *before* UPTO only and the checks of the released
notebooks only, the data README and samples, the tests that make sense without solutions, and
a README and Makefile of its own. No ``solutions/`` and no ``tests/test_checks_nbKK.py`` (they
hold correct implementations of the exercises).

What it still contains by design: ``course/nn.py`` holds the answers of the notebooks before
UPTO (later notebooks import them).

With ``--site`` (``make release ... SITE=1``) the copy also holds ``site/``: the course website
of the released notebooks without solutions, as ``make site SOLUTIONS=0`` builds it
(``docs/site/build.py``), ready to publish; ``--hub URL`` adds nbgitpuller links to it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import nbformat

from course.tooling import nbtools

ROOT = Path(__file__).resolve().parents[2]
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
- `course/`: the helper package. `course/nn.py` holds the modules that later notebooks
  import, built from the *answers* of notebooks {before}: by design, this copy contains those
  earlier answers, and nothing else of an answer. Notebook {upto}'s own answers are not here,
  and the checks in `course/checks/` compare your code with PyTorch's own layers, formulas and
  stored values, not with an implementation of the exercise.
- `course/templates/`: the notebooks as released, untouched. `make progress` grades your
  `notebooks/` against them exactly as your instructor's `make grade` does (your answer cells,
  and the cells you added, in your notebook; the check cells from the template). Do not edit
  them.
- `data/`: the data README and small samples; `make data` (needs a network) prepares the full
  datasets, and without them the notebooks fall back to the samples.
- `tests/`: `make test` runs the package's own tests (no tests of the exercises: those hold
  correct implementations).

In a container where you are root, `make lab` adds `--allow-root` itself. `make setup TORCH=cpu`
installs the CPU-only torch (no CUDA libraries).
"""

MAKEFILE = """# Student copy of the course: `make setup`, `make lab`, `make progress`, `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
BIN    := .venv/bin
# TORCH=cpu installs torch from PyTorch's CPU-only wheel index (no CUDA libraries on Linux),
# as the course's own Makefile does; another value names another of its indexes (TORCH=cu128).
TORCH  ?=
TORCH_INDEX   := https://download.pytorch.org/whl/$(TORCH)
TORCH_VERSION := $(shell sed -n 's/^torch==//p' requirements.txt)
.PHONY: setup lab progress test data

setup:
\t@test -n "$(PYTHON)" || { echo "Python 3.11 not found: make setup PYTHON=/path/to/python3.11"; exit 1; }
\t@test -x $(BIN)/python || $(PYTHON) -m venv .venv
\t$(if $(TORCH),$(BIN)/python -m pip install --quiet --index-url $(TORCH_INDEX) torch==$(TORCH_VERSION))
\t$(BIN)/python -m pip install --quiet -r requirements.txt
\t$(BIN)/python -m pip install --quiet --no-deps -e .

lab:
\t$(BIN)/jupyter lab --notebook-dir=$(or $(DIR),notebooks) $(if $(filter 0,$(shell id -u)),--allow-root,) $(LAB_ARGS)

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
        text = rewrite(nbformat.writes(notebook) + "\n")
        written[Path("notebooks") / path.name] = text
        written[Path("course") / "templates" / path.name] = text
    for path in sorted((ROOT / "course").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if path.name in SKIP_MODULES or {"__pycache__", "templates"} & set(relative.parts):
            continue
        if relative.parent.name == "checks" and path.name.startswith("nb"):
            if int(path.stem[2:]) > upto:
                continue
        written[relative] = path.read_bytes()
    written[Path("course/nn.py")] = nbtools.render_nn_module(earlier)
    for name in GENERIC_TESTS:
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


SITE_BUILDER = ROOT / "docs" / "site" / "build.py"
SITE_NOTE = """
## The website

`site/` is this course's website (notebooks 00 to {upto}, no solutions): open
`site/index.html`, or publish the folder as it is (GitHub Pages, any static web server).
"""


def build_site(dest: Path, upto: int, repo: str | None = None, hub: str | None = None) -> Path:
    """Write the student website of notebooks 00..upto into ``dest/site`` (see the docstring)."""
    command = [sys.executable, str(SITE_BUILDER), "--out", str(dest / "site"), "--no-solutions"]
    command += ["--upto", str(upto), *(["--repo", repo] if repo else [])]
    command += ["--hub", hub] if hub else []
    if subprocess.run(command, cwd=ROOT).returncode:
        raise SystemExit("the website was not built (messages above); the copy itself is complete")
    with (dest / "README.md").open("a", encoding="utf-8") as readme:
        readme.write(SITE_NOTE.format(upto=f"{upto:02d}"))
    return dest / "site"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course.tooling.release", description=__doc__.split("\n")[0]
    )
    parser.add_argument("dest", type=Path, help="folder to create")
    parser.add_argument("upto", type=int, help="last notebook number to release, e.g. 3")
    parser.add_argument("--repo", default=None, help="owner/name the badges and setup cells clone")
    parser.add_argument("--site", action="store_true", help="also build the website into DIR/site")
    parser.add_argument("--hub", default=None, help="with --site: JupyterHub for nbgitpuller links")
    args = parser.parse_args(argv)
    files = release(args.dest, args.upto, args.repo)
    print(f"wrote {len(files)} files to {args.dest} (notebooks 00 to {args.upto:02d})")
    if args.site:
        build_site(args.dest, args.upto, args.repo, args.hub)
    return 0


if __name__ == "__main__":
    sys.exit(main())
