"""Execute the solution notebooks and save them as a reader should see them.

    python -m course.tooling.refresh            # all of solutions/
    python -m course.tooling.refresh 05 07      # only these (by number)

``make solutions`` wraps this. What a reader sees on GitHub, in Colab's preview or in
JupyterLab before running anything is the stored output, so it must be what the code
computes:

* **figures inline**: the kernel runs with matplotlib's inline backend (``MPLBACKEND`` is
  removed from its environment: with ``Agg`` a notebook saves no figures at all);
* **final progress bars**: a tqdm bar is a widget whose plain-text fallback is frozen at
  ``0%|`` when it was first displayed; we rewrite that text from the widget's final state;
* **no paths of this machine**: the repository root and the home folder are replaced in
  every output by relative or ``~`` paths (the loaders already print relative paths; this
  is the safety net, and ``tests/test_solution_outputs.py`` fails if one slips through).
"""

from __future__ import annotations

import argparse
import html
import os
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

from course.data import SAMPLE_DATA_MARKER
from course.tooling.nbtools import SOLUTIONS

ROOT = SOLUTIONS.parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
CELL_TIMEOUT_S = 1800


def _bar_text(state: dict[str, Any], model_id: str) -> str | None:
    """The final text of a tqdm widget bar, ``desc: 100%|██████████| 800/800 [00:25<00:00]``."""
    box = state.get(model_id, {}).get("state", {})
    children = [c.removeprefix("IPY_MODEL_") for c in box.get("children", [])]
    if len(children) != 3 or not all(c in state for c in children):
        return None
    left, bar, right = (state[c]["state"] for c in children)
    fraction = 0.0
    if bar.get("max"):
        fraction = min(max(float(bar.get("value") or 0) / float(bar["max"]), 0.0), 1.0)
    filled = round(10 * fraction)

    def text(widget: dict) -> str:
        return html.unescape(str(widget.get("value", ""))).replace("\u2007", " ")

    return f"{text(left)}|{'█' * filled}{' ' * (10 - filled)}|{text(right)}"


def finalise_progress_bars(notebook: nbformat.NotebookNode) -> int:
    """Rewrite each widget output's text fallback from the widget's final state; returns a count."""
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    count = 0
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view and (final := _bar_text(state, view["model_id"])) is not None:
                output["data"]["text/plain"] = final
                count += 1
    return count


def _machine_paths() -> list[tuple[str, str]]:
    """(absolute prefix, replacement) pairs, longest first."""
    pairs = [(str(ROOT) + os.sep, ""), (str(ROOT), "."), (str(Path.home()) + os.sep, "~/")]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def _scrub(value: Any, pairs: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for prefix, replacement in pairs:
            value = value.replace(prefix, replacement)
        return value
    if isinstance(value, list):
        return [_scrub(v, pairs) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v, pairs) for k, v in value.items()}
    return value


def relative_paths(notebook: nbformat.NotebookNode) -> None:
    """Replace this machine's repository and home paths in every text output."""
    pairs = _machine_paths()
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            for key in ("text", "traceback", "evalue"):
                if key in output:
                    output[key] = _scrub(output[key], pairs)
            for mime, value in output.get("data", {}).items():
                if mime.startswith("text/") or mime == "application/json":
                    output["data"][mime] = _scrub(value, pairs)


def kernel_environment() -> dict[str, str]:
    """The environment the kernel inherits: this one, less MPLBACKEND (figures inline)."""
    return {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}


class SamplesUsed(RuntimeError):
    """The notebook ran on the bundled samples: its outputs are not the course's figures."""


def refresh(path: Path, allow_samples: bool = False) -> float:
    """Execute ``path`` in place (run from its folder); returns the seconds it took.

    Raises :class:`SamplesUsed`, leaving the file untouched, when a dataset came from the
    bundled samples (unless ``allow_samples``): stored solutions show the real figures.
    """
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,  # per-cell timestamps would churn every diff (and the exercises)
    )
    saved, kernel_env = dict(os.environ), kernel_environment()
    os.environ.clear()
    os.environ.update(kernel_env)
    start = time.perf_counter()
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    seconds = time.perf_counter() - start
    if not allow_samples and any(
        SAMPLE_DATA_MARKER in "".join(output.get("text", ""))
        for cell in notebook.cells
        for output in cell.get("outputs", [])
    ):
        raise SamplesUsed(
            f"{path.name} ran on the bundled samples, so it was not saved. Prepare the real "
            "data first (`make data`, or set COURSE_DATA_MIRROR), or pass --allow-samples."
        )
    finalise_progress_bars(notebook)
    relative_paths(notebook)
    nbformat.write(notebook, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("numbers", nargs="*", help="notebook numbers (default: all)")
    parser.add_argument(
        "--allow-samples", action="store_true", help="save even when the samples were used"
    )
    args = parser.parse_args(argv)
    paths = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
    if args.numbers:
        paths = [p for p in paths if p.name[:2] in {n.zfill(2) for n in args.numbers}]
        if not paths:
            print(f"no solution notebook numbered {' '.join(args.numbers)}", file=sys.stderr)
            return 2
    for path in paths:
        print(f"executing {path.relative_to(ROOT)} ...", flush=True)
        try:
            seconds = refresh(path, args.allow_samples)
        except SamplesUsed as exc:
            print(f"  {exc}", file=sys.stderr)
            return 1
        print(f"  saved with its outputs ({seconds:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
