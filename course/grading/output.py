"""Writing OUT (grades.csv, feedback/, written/) once, atomically, never through a link, with a
manifest of digests that tells later whether anything in it changed.

The grader calls :func:`write_tree` after the last student process has ended: each file is
written to a temporary name in its folder (``O_EXCL | O_NOFOLLOW``) and renamed over the final
name, which replaces a link left there rather than writing through it; a folder on the way that
is a link is replaced by a real folder. ``OUT/manifest.json`` (written last) holds the sha256 of
every file; :func:`verify` (``python -m course.classroom verify OUT``, run by ``make grade``)
lists what differs from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

MANIFEST = "manifest.json"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _real_folder(path: Path) -> None:
    """``path`` and every folder above it (up to an existing real one) as real folders."""
    for folder in [*reversed(path.parents), path]:
        if folder.is_symlink():
            folder.unlink()  # a link where a folder of OUT belongs: never followed
        if not folder.exists():
            folder.mkdir()
        elif not folder.is_dir():
            raise OSError(f"{folder} is not a folder")


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` at ``path`` atomically: temp file beside it, then ``os.replace``."""
    path = Path(path)
    _real_folder(path.parent)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    if partial.is_symlink() or partial.exists():
        partial.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(partial, flags, 0o644)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)  # replaces a link at ``path`` itself, never its target


def write_tree(out: Path, files: dict[str, str | bytes]) -> Path:
    """Write every ``relative path -> content`` under ``out``, then ``out/manifest.json``."""
    out = Path(out)
    digests = {}
    for name in sorted(files):
        relative = Path(name)
        if relative.is_absolute() or ".." in relative.parts:
            raise ValueError(f"not a path inside OUT: {name}")
        data = files[name]
        data = data.encode("utf-8") if isinstance(data, str) else data
        write_file(out / relative, data)
        digests[relative.as_posix()] = _digest(data)
    manifest = {"files": digests}
    write_file(out / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return out / MANIFEST


def _read(path: Path) -> bytes | None:
    """A file's bytes, read without following a link or blocking; None if it is not a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return file.read()


def verify(out: Path) -> list[str]:
    """What in ``out`` differs from its manifest (empty: every file as the grader wrote it)."""
    out = Path(out)
    raw = _read(out / MANIFEST)
    if raw is None:
        return [f"{out / MANIFEST} is missing or not a file"]
    try:
        digests = json.loads(raw)["files"]
    except (ValueError, KeyError, TypeError):
        return [f"{out / MANIFEST} is not a manifest"]
    problems = []
    for name, expected in sorted(digests.items()):
        path = out / name
        if any(p.is_symlink() for p in [path, *path.parents] if out in [p, *p.parents]):
            problems.append(f"{name}: is now a link (or inside one)")
            continue
        data = _read(path)
        if data is None:
            problems.append(f"{name}: missing or not a file")
        elif _digest(data) != expected:
            problems.append(f"{name}: changed since the grader wrote it")
    for path in sorted(out.rglob("*")):
        name = path.relative_to(out).as_posix()
        if name != MANIFEST and (path.is_file() or path.is_symlink()) and name not in digests:
            if not path.name.endswith(".partial"):
                problems.append(f"{name}: not written by this grading")
    return problems
