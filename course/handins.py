"""Hand-ins as students make them: which student handed in what, and which file is which notebook.

``make grade`` and ``make progress`` both read hand-ins through this module, so they agree on
what counts. A hand-in is a folder, a single notebook or a zip; inside it, notebooks are found
in nested folders and in zips (whole hand-in or inside the folder), then recognised:

1. by the course metadata the generator writes into every notebook
   (``metadata["course"]["notebook"] == "01_tokens"``);
2. by its content: the line ``from course.checks import nb01 as check`` of the setup/imports
   (for an editor that drops notebook metadata);
3. by its file name: the ``NN_`` prefix anywhere after a separator, case-insensitive, so
   ``Copy of 00_welcome.ipynb``, ``01_tokens (1).ipynb``, ``02_Attention.ipynb``,
   ``doeada_12345_67890_01_tokens.ipynb`` (Canvas) all count; failing that, the notebook's name
   (``tokens``) in the file name.

When several files are the same notebook, one is graded (:func:`choose`): a readable notebook
before an unreadable one, one recognised by what it is (1 or 2) before one recognised only by
its name, then the newest modification, then the one with fewer ``NotImplementedError`` stubs
left. The feedback names every file and says which one was graded and why.

Class folders (:func:`students`): each sub-folder is a student, named after the folder
(Moodle's ``Ada Lovelace_1234567_assignsubmission_file_`` folders are grouped as
``Ada Lovelace_1234567``); files
named as Canvas's bulk download names them (``doeada_12345_67890_<file>``, ``doeada_LATE_...``)
or as Moodle's flat download does (``Ada Lovelace_1234567_assignsubmission_file_<file>``) are
grouped per student; any other file (a zip, a notebook) is a student of its own, named after
the file. Zips are read in memory, never extracted to disk: entries with absolute paths or
``..``, links, more than ``MAX_ENTRIES`` entries, or more than ``MAX_BYTES`` once inflated are
refused and reported.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from course.framework.contract import STUB
from course.grading.limits import MAX_FILE_BYTES, NotebookRefused, normalise, source_text
from course.grading.names import alike, shown, told_apart

MAX_BYTES = 400 * 1024**2  # everything read from one hand-in, zips inflated
MAX_ENTRIES = 2000  # entries of one zip
MAX_DEPTH = 3  # zips inside zips

IMPORT_LINE = re.compile(r"from\s+course\.checks\s+import\s+nb(\d\d)\s+as\s+check\b")
NAME_NUMBER = re.compile(r"(?:^|[^0-9a-z])(\d\d)(?=[ _.-])")
CANVAS = re.compile(r"^(?P<who>[a-z0-9-]+?)_(?:late_)?(?P<uid>\d{3,})_\d{3,}_(?P<file>.+)$", re.I)
MOODLE = re.compile(r"^(?P<who>.+?_\d+)_assign(?:submission|feedback)_\w+?_(?P<file>.*)$")
SKIPPED_PARTS = ("__MACOSX", ".ipynb_checkpoints")

METADATA, CONTENT, FILE_NAME = "metadata", "content", "file name"
HOW = {
    METADATA: "its course metadata names it",
    CONTENT: "it imports that notebook's checks",
    FILE_NAME: "its file name",
}


@dataclass
class Found:
    """A file read from a hand-in: where it was, its bytes, when it was last modified."""

    where: str  # shown to people: "ada/sub/01_tokens (1).ipynb", "ada/hw.zip:01_tokens.ipynb"
    data: bytes
    modified: float  # seconds since the epoch
    notebook: str | None = None  # the template's stem, once recognised ("01_tokens")
    how: str = ""  # METADATA, CONTENT or FILE_NAME
    readable: bool = True
    stubs_left: int = 0
    problem: str = ""  # why it is not readable: not JSON, too large (course.grading.limits)
    raw: str = ""  # a zip entry's own name, as stored (``where`` shows it escaped)

    @property
    def name(self) -> str:
        return PurePosixPath(self.where.rsplit(":", 1)[-1]).name


@dataclass
class Handin:
    """One student's hand-in: the file chosen for each notebook and what to tell about it."""

    student: str
    chosen: dict[str, Found] = field(default_factory=dict)  # template stem -> file to grade
    notes: dict[str, str] = field(default_factory=dict)  # template stem -> why this file
    problems: list[str] = field(default_factory=list)  # refused entries, unreadable zips, ...
    ignored: list[str] = field(default_factory=list)  # notebooks that are no course notebook
    skipped: list[str] = field(default_factory=list)  # hidden or system entries not read


# --- recognising a notebook ------------------------------------------------------------------


def _number_and_slug(stem: str) -> tuple[str, str]:
    number, _, slug = stem.partition("_")
    return number, slug.lower()


def from_file_name(name: str, stems: Iterable[str]) -> str | None:
    """The template stem a file name points at, or None (see the module's rule 3)."""
    stems = list(stems)
    by_number = {_number_and_slug(s)[0]: s for s in stems}
    base = name.lower()
    base = base[: -len(".ipynb")] if base.endswith(".ipynb") else base
    for match in NAME_NUMBER.finditer(base + " "):
        if match.group(1) in by_number:
            return by_number[match.group(1)]
    words = re.sub(r"[^a-z0-9]+", "_", base)
    named = [
        s for s in stems if re.search(rf"(^|_){re.escape(_number_and_slug(s)[1])}(_|$)", words)
    ]
    return max(named, key=lambda s: len(_number_and_slug(s)[1])) if named else None


def _named(notebook: dict) -> str | None:
    """The stem the course metadata names (``metadata.course.notebook``), or None."""
    meta = notebook.get("metadata")
    course = meta.get("course") if isinstance(meta, dict) else None
    named = course.get("notebook") if isinstance(course, dict) else None
    return named if isinstance(named, str) else None


def recognise(found: Found, stems: Iterable[str]) -> Found:
    """Fill ``found.notebook`` / ``how`` / ``readable`` / ``stubs_left`` (rules 1-3).

    A readable file's ``data`` becomes its normalised form (:func:`course.grading.limits.normalise`:
    nbformat 4, outputs dropped, within the bounds); an unreadable one gets ``problem``, the
    reason its rows will give.
    """
    stems = list(stems)
    try:
        notebook = normalise(found.data, found.name)
    except NotebookRefused as error:
        found.readable, found.problem = False, str(error)
        named = _named(error.parsed or {})
        if named in stems:
            found.notebook, found.how = named, METADATA
        else:
            found.notebook, found.how = from_file_name(found.name, stems), FILE_NAME
        return found
    found.data = json.dumps(notebook).encode("utf-8")
    cells = notebook["cells"]
    named = _named(notebook)
    sources = [source_text(c) for c in cells]
    found.stubs_left = sum(len(STUB.findall(s)) for s in sources)
    if named in stems:
        found.notebook, found.how = named, METADATA
        return found
    for source in sources:
        imported = IMPORT_LINE.search(source)
        if imported:
            numbered = [s for s in stems if s.startswith(imported.group(1) + "_")]
            if numbered:
                found.notebook, found.how = numbered[0], CONTENT
                return found
    found.notebook, found.how = from_file_name(found.name, stems), FILE_NAME
    return found


def choose(files: list[Found], stems: Iterable[str]) -> Handin:
    """Which file to grade for each notebook (module docstring), and why."""
    handin = Handin(student="")
    stems = list(stems)
    for found in files:
        recognise(found, stems)
    for found in files:
        if found.notebook is None:
            handin.ignored.append(found.where)
    for stem in stems:
        same = [f for f in files if f.notebook == stem]
        if not same:
            continue
        ranked = sorted(
            same,
            key=lambda f: (f.readable, f.how != FILE_NAME, f.modified, -f.stubs_left, f.where),
            reverse=True,
        )
        best = ranked[0]
        handin.chosen[stem] = best
        note = f"graded `{best.where}` ({HOW[best.how]}"
        note += "" if best.readable else f"; {best.problem or 'it is not a readable notebook'}"
        note += ")"
        if len(ranked) > 1:
            others = "; ".join(f"`{f.where}` ({_why(best, f)})" for f in ranked[1:])
            handin.notes[stem] = (
                f"{len(ranked)} files are notebook {stem}: {note}; not graded: {others}."
            )
        elif best.name.lower() != f"{stem}.ipynb" or not best.readable:
            handin.notes[stem] = note + "."  # renamed: say how it was recognised
    return handin


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(seconds)) + " UTC"


def _why(best: Found, runner_up: Found) -> str:
    if best.readable != runner_up.readable:
        return "a readable notebook comes before an unreadable file"
    if (best.how != FILE_NAME) != (runner_up.how != FILE_NAME):
        return "a file recognised by its content comes before one recognised only by its name"
    if best.modified != runner_up.modified:
        return (
            f"the newest modification comes first ({_when(best.modified)} against "
            f"{_when(runner_up.modified)})"
        )
    if best.stubs_left != runner_up.stubs_left:
        return (
            f"same modification time: the one with fewer unanswered stubs comes first "
            f"({best.stubs_left} against {runner_up.stubs_left})"
        )
    if best.data == runner_up.data:
        return "identical content and modification time: the later by its place, to be repeatable"
    return (
        "same modification time and as many unanswered stubs, different content: the later by "
        "its place, to be repeatable; your instructor may check which one you meant"
    )


# --- reading files, folders and zips ---------------------------------------------------------


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_BYTES

    def take(self, n: int) -> bool:
        self.left -= n
        return self.left >= 0


def _skipped(parts: Iterable[str]) -> bool:
    return any(p in SKIPPED_PARTS or p.startswith(".") for p in parts)


def _unsafe(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or bool(re.match(r"^[A-Za-z]:", name)) or ".." in parts


def read_zip(
    data: bytes,
    where: str,
    budget: _Budget,
    problems: list[str],
    depth: int = 1,
    expand: bool = True,
    skipped: list[str] | None = None,
    refused: list[tuple[str, str]] | None = None,
) -> list[Found]:
    """The notebooks in a zip (and in zips inside it), read in memory within the limits.

    With ``expand=False`` a zip inside is returned as one file instead of being read. Every
    entry refused is a line of ``problems``; with ``refused``, also ``(its own name, the line)``,
    so a class zip can say whose notebook it was (:func:`class_students`).
    """
    found: list[Found] = []
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        problems.append(f"`{where}` is not a readable zip file")
        return found
    if len(entries) > MAX_ENTRIES:
        problems.append(f"`{where}` refused: {len(entries)} entries (at most {MAX_ENTRIES})")
        return found
    name = ""

    def _refuse(line: str) -> None:
        problems.append(line)
        if refused is not None:
            refused.append((name, line))

    count: dict[str, int] = {}
    for info in entries:
        count[info.filename] = count.get(info.filename, 0) + 1
    seen: dict[str, int] = {}
    for info in entries:
        name = info.filename
        lower = name.lower()
        if info.is_dir() or not lower.endswith((".ipynb", ".zip")):
            continue
        seen[name] = seen.get(name, 0) + 1
        inner = f"{where}:{shown(name)}"
        if count[name] > 1:  # one name, several entries: each named by its place in the zip
            inner += f" (entry {seen[name]} of {count[name]} so named)"
        if _unsafe(name):
            _refuse(f"`{inner}` refused: an absolute path, a drive letter or `..` in a zip")
            continue
        if _skipped(PurePosixPath(name.replace("\\", "/")).parts):
            if skipped is not None:
                skipped.append(inner)
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            _refuse(f"`{inner}` refused: a link")
            continue
        if info.file_size > MAX_FILE_BYTES:
            _refuse(f"`{inner}` refused: larger than {MAX_FILE_BYTES // 1024**2} MB")
            continue
        try:
            with archive.open(info) as stream:
                content = stream.read(MAX_FILE_BYTES + 1)
        except (zipfile.BadZipFile, RuntimeError, OSError, ValueError, NotImplementedError) as e:
            _refuse(f"`{inner}` could not be read ({type(e).__name__})")
            continue
        if len(content) > MAX_FILE_BYTES or not budget.take(len(content)):
            problems.append(f"`{inner}` refused: the hand-in inflates to more than the limit")
            return found
        try:
            modified = time.mktime((*info.date_time, 0, 0, -1))
        except (OverflowError, ValueError):
            modified = 0.0
        if lower.endswith(".zip") and expand:
            if depth >= MAX_DEPTH:
                _refuse(f"`{inner}` refused: zips nested more than {MAX_DEPTH} deep")
            else:
                found += read_zip(content, inner, budget, problems, depth + 1, True, skipped)
        else:
            raw = name
            if count[name] > 1:  # each entry its own file when a class zip is unpacked
                stem, dot, suffix = name.rpartition(".")
                raw = f"{stem} (entry {seen[name]} of {count[name]} so named){dot}{suffix}"
            found.append(Found(inner, content, modified, raw=raw))
    return found


def read_paths(
    paths: Iterable[Path], base: Path, skipped: list[str] | None = None
) -> tuple[list[Found], list[str]]:
    """Every notebook in ``paths`` (files, folders searched recursively, zips); the hidden and
    system entries left unread are added to ``skipped`` (shown, for the report)."""
    budget, problems, found = _Budget(), [], []
    skipped = [] if skipped is None else skipped
    files: list[Path] = []
    for path in paths:
        if path.is_symlink():
            problems.append(f"`{shown(path.relative_to(base))}` refused: a link")
        elif path.is_dir():
            for folder, dirs, names in os.walk(path):
                here = Path(folder)
                skipped += [shown((here / d).relative_to(base)) for d in dirs if _skipped([d])]
                skipped += [
                    shown((here / n).relative_to(base))
                    for n in names
                    if n.startswith(".") and n.lower().endswith((".ipynb", ".zip"))
                ]
                dirs[:] = sorted(d for d in dirs if not _skipped([d]))
                files += [here / n for n in sorted(names) if not n.startswith(".")]
        else:
            files.append(path)
    for path in files:
        where = shown(path.relative_to(base))
        if not path.name.lower().endswith((".ipynb", ".zip")):
            continue
        if path.is_symlink():
            problems.append(f"`{where}` refused: a link")
            continue
        size = path.stat().st_size
        if size > MAX_FILE_BYTES or not budget.take(size):
            problems.append(f"`{where}` refused: larger than the limit")
            continue
        data = path.read_bytes()
        if path.name.lower().endswith(".zip"):
            found += read_zip(data, where, budget, problems, skipped=skipped)
        else:
            found.append(Found(where, data, path.stat().st_mtime))
    return found, problems


def read_handin(student: str, paths: list[Path], base: Path, stems: Iterable[str]) -> Handin:
    """One student's hand-in (folders, notebooks, zips) with a file chosen per notebook."""
    skipped: list[str] = []
    found, problems = read_paths(paths, base, skipped)
    handin = choose(found, stems)
    handin.student = student
    handin.problems = problems + handin.problems
    handin.skipped = skipped
    return handin


def skipped_entries(submissions: Path) -> list[str]:
    """The entries of a class folder :func:`students` does not read (hidden or system ones,
    ``.x``, ``__MACOSX``), shown: the report lists them."""
    return [shown(p.name) for p in sorted(submissions.iterdir()) if p.name.startswith((".", "__"))]


def owner(raw: str) -> tuple[str, bool]:
    """Whose a class zip's entry ``raw`` is: the first part of its path once a leading ``/``, a
    drive letter and every ``.`` or ``..`` are taken away, and whether that part is a folder
    (a student's folder) or the entry itself (a student of its own, as :func:`students` reads)."""
    parts = [
        p
        for p in re.split(r"[\\/]", raw)
        if p not in ("", ".", "..") and not re.fullmatch(r"[A-Za-z]:", p)
    ]
    return (parts[0], len(parts) > 1) if parts else ("(an entry with no name)", False)


def _who(name: str, folder: bool) -> str:
    """The student a class folder's entry ``name`` belongs to (the module's grouping rules)."""
    moodle = MOODLE.match(name)
    canvas = CANVAS.match(name) if not folder else None
    if moodle and (folder or moodle.group("file")):
        return moodle.group("who")
    if canvas:
        return f"{canvas.group('who')}_{canvas.group('uid')}"
    return name


def students(submissions: Path) -> dict[str, list[Path]]:
    """Each student's paths in a class folder (module docstring), sorted by student. A student
    is keyed by :func:`~course.grading.names.shown` of its name: one-to-one, printable; names
    that show alike (``Ann`` and ``ann``, ``z_victim`` and a zero-width space after it, a
    full-width letter) are each told apart by a digest of their own (``told_apart``), so no row,
    file or section shows as another student's."""
    return class_students(submissions)[0]


def class_students(
    submissions: Path, refused: Iterable[tuple[str, str]] = ()
) -> tuple[dict[str, list[Path]], dict[str, list[str]]]:
    """:func:`students`, and ``refused`` (a class zip's refused entries: ``(its own name, why)``)
    grouped by the same keys: a student whose only notebook was refused still has a key, whose
    rows say why."""
    groups: dict[str, list[Path]] = {}
    raw: dict[str, str] = {}
    said: dict[str, list[str]] = {}
    for path in sorted(submissions.iterdir()):
        if path.name.startswith((".", "__")):
            continue  # reported by skipped_entries
        who = _who(path.name, not path.is_file())
        groups.setdefault(shown(who), []).append(path)
        raw.setdefault(shown(who), who)
    for name, line in refused:
        who = _who(*owner(name))
        groups.setdefault(shown(who), [])
        raw.setdefault(shown(who), who)
        said.setdefault(shown(who), []).append(line)
    posing = alike(list(raw.values()))  # the raw names: a hidden character is no difference
    key = {k: told_apart(k, raw[k]) if raw[k] in posing else k for k in groups}
    return (
        dict(sorted((key[k], paths) for k, paths in groups.items())),
        {key[k]: lines for k, lines in said.items()},
    )
