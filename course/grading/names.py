"""Student-controlled text made safe for every output: the terminal, grades.csv, feedback, files.

Folder names, zip entry names and what a student's process prints are the student's. One
mechanism per hazard, used everywhere they are written:

* :func:`shown` escapes every character that is invisible or moves text: control characters
  (C0, DEL, C1), format characters (Unicode category Cf: zero-width spaces and joiners, the
  bidirectional overrides, soft hyphens), the line and paragraph separators (U+2028, U+2029),
  spaces other than the plain one, private-use and unassigned code points, and the backslash
  itself, so that it is **one-to-one** and no name can move the cursor, clear a line, colour the
  terminal, hide a character or start a new CSV row or Markdown line. Names are escaped where
  they are read (:mod:`course.handins`);
* :func:`skeleton` is what a reader takes a name for (NFKC, case folded, the escaped characters
  dropped): two names of one skeleton show alike, and :func:`alike` finds them so that each is
  told apart (:func:`course.handins.students`);
* :func:`text` does the same for multi-line text the grader writes (feedback, messages), keeping
  its own line breaks and tabs;
* :func:`csv_cell` also neutralises spreadsheet formulas: a cell starting with ``=``, ``+``,
  ``-``, ``@``, a tab or a carriage return gets a leading ``'`` (OWASP's advice for CSV
  injection), unless it is a plain number; :func:`csv_text` quotes every cell, so a cell stays
  one cell where a spreadsheet splits on ``;`` as well as on ``,``;
* :func:`quoted_answer` puts a student's Markdown in a block quote whose lines can never start a
  heading, so no answer can open a section of a file that holds everyone's answers;
* :func:`file_names` maps student keys to file names one-to-one: two students never share a
  feedback file (``z\\victim`` and ``z_victim``, ``Ann`` and ``ann`` on a case-insensitive
  disk); a collision adds a short digest of the key to each name that collided, and is named.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import re
import unicodedata
from importlib.resources import files

# Bidirectional overrides and isolates: they reorder what a reader sees (CVE-2021-42574).
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?([eE][+-]?\d+)?$")
MAX_FILE_NAME = 80
_DIRECTION_MARKS = "\u200e\u200f"


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


# Control, surrogate, format (zero-width, bidi, soft hyphen), line and paragraph separators,
# private-use and unassigned: each is invisible, moves text, or shows as anything.
HIDDEN_CATEGORIES = ("Cc", "Cs", "Cf", "Zl", "Zp", "Co", "Cn")


def _unsafe(char: str, keep: str = "") -> bool:
    if char in keep:
        return False
    category = unicodedata.category(char)
    return (
        category in HIDDEN_CATEGORIES
        or (category == "Zs" and char != " ")  # a no-break or thin space shows as a space
        or char in BIDI
    )


def shown(name: str) -> str:
    """``name`` as it may be shown anywhere: control characters escaped, one-to-one."""
    name = str(name).replace("\\", "\\\\")
    return "".join(_escape(c) if _unsafe(c) else c for c in name)


@functools.cache
def _prototypes() -> dict[str, str]:
    """Each character that looks like another, mapped to the prototype it looks like (the
    Cyrillic ``і`` to the Latin ``i``; ``m`` to ``rn``): Unicode's confusables (UTS #39), as
    ``confusable_homoglyphs`` ships them. Its table links each character to its prototype both
    ways, so each group is a star around its prototype: the one linked to all the others (of
    two, the longer, then the smaller)."""
    table = json.loads(
        files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    )
    links: dict[str, set[str]] = {}
    for char, others in table.items():
        char = char.strip(_DIRECTION_MARKS)  # right-to-left characters come between two marks
        for other in (o["c"].strip(_DIRECTION_MARKS) for o in others):
            links.setdefault(char, set()).add(other)
            links.setdefault(other, set()).add(char)
    mapping: dict[str, str] = {}
    for char, others in links.items():
        if len(others) == 1 and len(links[next(iter(others))]) == 1:  # a pair: one choice for both
            prototype = max([char, *others], key=lambda c: (len(c), -ord(c[0])))
        else:  # a source's one link is its prototype; a prototype is linked to several
            prototype = next(iter(others)) if len(others) == 1 else char
        if len(char) == 1 and prototype != char:
            mapping[char] = prototype
    return mapping


def skeleton(name: str) -> str:
    """What a reader takes ``name`` for: NFKC (a full-width ``ｚ`` is ``z``), case folded, the
    characters :func:`shown` escapes dropped, runs of spaces as one, then UTS #39's skeleton
    (each character replaced by the prototype it is confusable with, between two NFDs): a
    Cyrillic ``і`` in ``z_vіctim`` shows as the Latin ``i`` of ``z_victim``."""
    folded = unicodedata.normalize("NFKC", str(name)).casefold()
    kept = "".join(c for c in folded if not _unsafe(c) or unicodedata.category(c) == "Zs")
    plain = " ".join(unicodedata.normalize("NFKC", kept).split())
    prototypes = _prototypes()
    mapped = "".join(prototypes.get(c, c) for c in unicodedata.normalize("NFD", plain))
    return unicodedata.normalize("NFD", mapped)


def alike(names: list[str]) -> dict[str, list[str]]:
    """``name -> the other names that show alike`` (one :func:`skeleton`), for those that do."""
    groups: dict[str, list[str]] = {}
    for name in dict.fromkeys(names):
        groups.setdefault(skeleton(name), []).append(name)
    return {
        n: [o for o in same if o != n] for same in groups.values() if len(same) > 1 for n in same
    }


def told_apart(name: str, raw: str) -> str:
    """``name`` (shown) marked as one of several that show alike, with a digest of its own
    bytes: every output then names exactly one person."""
    digest = hashlib.sha256(str(raw).encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{name} [shows like another name; id {digest}]"


def text(value: str) -> str:
    """Multi-line text for the terminal or a file: control characters escaped except the line
    breaks and tabs of the text itself (a student's ANSI colours or ``\\r`` never act)."""
    return "".join(_escape(c) if _unsafe(c, keep="\n\t") else c for c in str(value))


def csv_cell(value: object) -> str:
    """A grades.csv cell: one line, no control character, no formula a spreadsheet evaluates."""
    cell = "".join(_escape(c) if _unsafe(c) else c for c in str(value))
    if cell.startswith(FORMULA_START) and not NUMBER.match(cell):
        cell = "'" + cell
    return cell


def csv_text(rows: list[list[object]]) -> str:
    """CSV of ``rows``, every cell :func:`csv_cell` and quoted: one cell per value whether a
    spreadsheet splits on ``,`` or on ``;`` (Excel's default in much of Europe)."""
    with io.StringIO(newline="") as file:
        writer = csv.writer(file, quoting=csv.QUOTE_ALL)
        for row in rows:
            writer.writerow([csv_cell(cell) for cell in row])
        return file.getvalue()


# A line that would start a Markdown heading: ``#`` (ATX), or a setext underline (``===``, ``---``)
# under a line of text; a raw HTML heading is disarmed by escaping every ``<``.
_HEADING = re.compile(r"^(\s{0,3})(#|=+\s*$|-+\s*$)")


def quoted_answer(answer: str) -> list[str]:
    """A student's Markdown answer as block-quote lines (``> ...``) in which no line can start a
    heading or a section: ``#`` and setext underlines escaped, HTML tags shown as text. The
    answer's own line breaks are its ``\n`` only (U+2028 and U+2029 stay in the line, escaped
    by :func:`text`)."""
    lines = []
    for line in str(answer).replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = line.replace("<", "&lt;")
        line = _HEADING.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", line)
        lines.append(f"> {line}" if line.strip() else ">")
    return lines


def _base(key: str) -> str:
    """A portable file name for ``key``: letters, digits, ``._-`` and spaces kept, the rest
    ``_``; never empty, never hidden, at most :data:`MAX_FILE_NAME` characters."""
    kept = "".join(c if (c.isalnum() or c in "._- ") and not _unsafe(c) else "_" for c in key)
    kept = kept.strip(" .") or "_"
    return kept[:MAX_FILE_NAME]


def file_names(keys: list[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``(key -> file name, key -> the other keys it collided with)``: one-to-one, also on a
    case-insensitive disk; only the keys that collided get a digest suffix."""
    groups: dict[str, list[str]] = {}
    for key in dict.fromkeys(keys):
        groups.setdefault(_base(key).casefold(), []).append(key)
    names: dict[str, str] = {}
    collided: dict[str, list[str]] = {}
    for same in groups.values():
        for key in same:
            if len(same) == 1:
                names[key] = _base(key)
                continue
            digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
            names[key] = f"{_base(key)[: MAX_FILE_NAME - 9]}-{digest[:8]}"
            collided[key] = [k for k in same if k != key]
    taken = [n.casefold() for n in names.values()]
    if len(set(taken)) != len(taken):  # a suffixed name met an unsuffixed one: use digests only
        for key in names:
            names[key] = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return names, collided
