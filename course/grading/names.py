"""Student-controlled text made safe for every output: the terminal, grades.csv, feedback, files.

Folder names, zip entry names and what a student's process prints are the student's. One
mechanism per hazard, used everywhere they are written:

* :func:`shown` escapes control characters (C0, DEL, C1), the Unicode bidirectional overrides,
  and the backslash itself, so that it is **one-to-one**: two different names never show alike,
  and no name can move the cursor, clear a line, colour the terminal or start a new CSV row or
  Markdown line. Names are escaped where they are read (:mod:`course.handins`);
* :func:`text` does the same for multi-line text the grader writes (feedback, messages), keeping
  its own line breaks and tabs;
* :func:`csv_cell` also neutralises spreadsheet formulas: a cell starting with ``=``, ``+``,
  ``-``, ``@``, a tab or a carriage return gets a leading ``'`` (OWASP's advice for CSV
  injection), unless it is a plain number;
* :func:`file_names` maps student keys to file names one-to-one: two students never share a
  feedback file (``z\\victim`` and ``z_victim``, ``Ann`` and ``ann`` on a case-insensitive
  disk); a collision adds a short digest of the key to each name that collided, and is named.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

# Bidirectional overrides and isolates: they reorder what a reader sees (CVE-2021-42574).
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?([eE][+-]?\d+)?$")
MAX_FILE_NAME = 80


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def _unsafe(char: str, keep: str = "") -> bool:
    if char in keep:
        return False
    return unicodedata.category(char) in ("Cc", "Cs") or char in BIDI or char == "\u2028"


def shown(name: str) -> str:
    """``name`` as it may be shown anywhere: control characters escaped, one-to-one."""
    name = str(name).replace("\\", "\\\\")
    return "".join(_escape(c) if _unsafe(c) else c for c in name)


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
