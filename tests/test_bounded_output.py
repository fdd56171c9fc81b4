"""What a student's process prints and raises is read into a bounded buffer (head and tail kept,
the cut said): a 200 MB print or a 200 MB exception message does not make the process that runs
the notebook hold more than the string itself, and an honest cell's output is whole."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from course.framework.failure import clipped, exception_text, summarise_exception
from course.grading.kernel import STUDENT
from course.grading.streams import BoundedStream

ROOT = Path(__file__).resolve().parents[1]
SIZE = 200_000_000  # characters: the hostile round's print


def test_a_stream_keeps_head_and_tail_and_says_what_was_cut():
    target = io.StringIO()
    stream = BoundedStream(target, head=10, tail=5)
    stream.write("0123456789abcdefghij")
    stream.write("XYZ")
    stream.close()
    assert target.getvalue() == "0123456789\n[... 8 characters cut ...]\nijXYZ"


def test_an_honest_output_is_written_whole():
    target = io.StringIO()
    stream = BoundedStream(target)
    print("✅ Exercise 0.1 (numerically stable softmax): passed", file=stream)
    stream.close()
    assert target.getvalue() == "✅ Exercise 0.1 (numerically stable softmax): passed\n"


def test_an_exception_message_is_bounded_and_says_so():
    text = exception_text(ValueError("x" * 1_000_000))
    assert len(text) < 5000 and "characters cut" in text and text.startswith("ValueError: xxx")
    assert exception_text(KeyError("k")) == "KeyError: 'k'"  # its own __str__, unchanged
    assert clipped("short") == "short"
    try:
        raise RuntimeError("y" * 1_000_000)
    except RuntimeError as error:
        assert len(summarise_exception(error)) < 5000


def _peak_mb(tmp_path: Path, sources: list[str]) -> tuple[float, str, list[dict]]:
    """Run ``sources`` as the grader's student process does; its peak memory (MB), its
    stdout and stderr, and its cell log."""
    cells = [
        {"cell_type": "code", "source": s, "metadata": {"course_index": i}}
        for i, s in enumerate(sources)
    ]
    notebook, log = tmp_path / "nb.json", tmp_path / "cells.jsonl"
    notebook.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    runner = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "print(done.stdout + done.stderr)\n"
    )
    student = [sys.executable, "-c", STUDENT, str(notebook), str(log), "60"]
    done = subprocess.run(
        [sys.executable, "-c", runner, *student],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    )
    peak, output = done.stdout.split("\n", 1)
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    return int(peak) / 1024, output, rows


@pytest.mark.parametrize(
    "source",
    [
        f"big = 'x' * {SIZE}\nprint(big)",
        f"raise ValueError('y' * {SIZE})",
        f"'z' * {SIZE}",  # the last expression, once shown by the display hook
    ],
    ids=["print", "exception", "display"],
)
def test_a_200_mb_output_leaves_memory_near_the_string_itself(tmp_path, source):
    peak, output, rows = _peak_mb(tmp_path, ["print('honest line')", source])
    assert "honest line" in output  # the head, whole
    assert len(output) < 300_000, len(output)
    if "print" in source or "raise" in source:  # head, tail and the cut said
        assert "characters cut" in output
    if "raise" in source:
        message = next(r["message"] for r in rows if r.get("status") == "error")
        assert message.startswith("ValueError: yyy") and len(message) <= 500
    # The 200 MB string and IPython itself (216 MB measured for each); unbounded, the print
    # held 407 MB, the exception 792 MB and the display 598 MB.
    assert peak < 1.5 * SIZE / 1e6, f"peak {peak:.0f} MB"
