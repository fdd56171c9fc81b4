"""The repository stands alone: no tracked file refers to files outside it.

The course once pointed at a design file and a dataset mirror beside the clone. Only CI's
runner script (.ci/run) may still look there, for the mirror CI provides; everything else,
stored notebook outputs included, must make sense in a fresh clone on another machine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {".ci/run"}
# the sibling folder "shared" seen from the clone or by its absolute path here (the pattern
# is split so that this file does not match itself)
OUTSIDE = re.compile(r"(\.\./|/work/)" + "shared" + r"\b")


def tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [name for name in listed.stdout.split("\0") if name]


def test_no_tracked_file_refers_outside_the_repository():
    offenders = []
    for name in tracked_files():
        path = ROOT / name
        if name in ALLOWED or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{lineno}: {line.strip()[:120]}")
    assert not offenders, "references outside the repository:\n" + "\n".join(offenders)


def test_the_pattern_catches_what_it_should():
    assert OUTSIDE.search("see ../" + "shared/DESIGN.md")
    assert OUTSIDE.search("from mirror /work/" + "shared/datasets/sst2")
    assert not OUTSIDE.search("a shared mirror; sharedness")
