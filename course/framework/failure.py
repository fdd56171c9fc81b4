"""How a check says "wrong", and the student's exception in one line (apart from
:mod:`course.framework.check`, so that :mod:`course.framework.observe` uses them without an import circle)."""

from __future__ import annotations

import re
import sysconfig
import traceback

VIOLATED = " (the property violated: "


class CheckFailure(Exception):
    """Raised *inside* a check body when the student's result is wrong. Besides the words, as
    data for grading records: ``prop``, the property violated (what the message names after
    "the property violated:"), and ``mistake``, the name of the known mistake the result is
    (a spec's ``mistakes``), or None. Given ``prop``, a message that names no property gets
    "(the property violated: ``prop``)." composed here, the one place those words are
    written: a check says what happened and which property it breaks, never the phrase."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        prop: str | None = None,
        mistake: str | None = None,
    ):
        if prop is not None and _named_property(message) is None:
            message = f"{message.rstrip().rstrip('.')}{VIOLATED}{prop})."
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.mistake = mistake
        self.prop = prop if prop is not None else _named_property(message)


_NAMED = re.compile(r"property violated: ([^);]*?)(?:[);]|\.\s|\.?$)", re.IGNORECASE)


def students_words(text: str) -> str:
    """Text the student's code wrote (its exception's message, a failure it raised), as the
    trusted side may quote it: it can never name a property (:func:`_named_property`), so that no
    hand-in writes its way into the grading records."""
    return re.sub(r"violated(\s*):", r"violated\1(so says your code):", text, flags=re.IGNORECASE)


def _named_property(message: str) -> str | None:
    """The property a message names: the words after its last "the property violated:"."""
    found = _NAMED.findall(message)
    return found[-1].strip() if found else None


def violated(what: str, symptom: str, prop: str, hint: str | None = None) -> CheckFailure:
    """The failure of one property on one case, composed the same way everywhere: "``what``
    ``symptom`` (the property violated: ``prop``)", the property kept as data."""
    return CheckFailure(f"{what} {symptom}" if symptom else what, hint, prop=prop)


def depends_on_earlier_calls(what: str, against: str) -> CheckFailure:
    """The failure of code whose result depends on earlier calls (a cache, a counter, state on
    a module): ``against`` says which two results of the same inputs differed."""
    return CheckFailure(
        f"{what}: your code gives different results on repeated calls with the same inputs "
        f"({against})",
        "Keep nothing between calls (no cache, counter or mask stored in a global, on the "
        "function or on the module); compute everything from the arguments of this call.",
        prop="the result depends only on the inputs",
    )


MESSAGE = 2000  # characters kept at each end of a student's exception message


def clipped(text: str, head: int = MESSAGE, tail: int = MESSAGE) -> str:
    """``text`` with its middle cut beyond ``head`` + ``tail`` characters, the cut said."""
    if len(text) <= head + tail:
        return text
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail :]}"


def exception_text(error: BaseException) -> str:
    """``Type: message`` of a student's exception, bounded. A message given as a string is cut
    before anything is built from it; a ``__str__`` of the student's own is called once."""
    args = getattr(error, "args", ())
    plain = type(error).__str__ is BaseException.__str__  # str() would be args[0] itself
    try:
        if plain and len(args) == 1 and type(args[0]) is str:
            message = clipped(args[0])
        else:
            message = clipped(str(error))
    except Exception as failed:  # noqa: BLE001 - a __str__ that raises still gets a line
        message = f"<its message could not be read: {type(failed).__name__}>"
    return f"{type(error).__name__}: {message}"


# the checking modules: a frame there is never the student's line
_CHECKER_FILES = ("/course/framework/", "/course/checks/")

_LIBRARY_DIRS = tuple(
    {
        path.replace("\\", "/").rstrip("/") + "/"
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(key))
    }
)


def _is_checker(filename: str) -> bool:
    name = filename.replace("\\", "/")
    return any(part in name for part in _CHECKER_FILES)


def _is_library(filename: str) -> bool:
    name = filename.replace("\\", "/")
    return name.startswith(_LIBRARY_DIRS) or "/site-packages/" in name


def summarise_exception(exc: BaseException, what: str | None = None) -> str:
    """`ValueError: ... (in `forward`, line 3: `x = y @ z`)` from a student's exception.

    The location is the student's own line: the last frame that is neither in the checker nor
    inside an installed library (torch, the standard library), so that an error raised deep
    inside ``F.linear`` or ``Module._call_impl`` points at the call the student wrote. With no
    such frame (a wrong signature fails on the call itself) it names the observed call ``what``.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    outside = [f for f in frames if not _is_checker(f.filename)]
    own = [f for f in outside if not _is_library(f.filename)] or outside
    where = ""
    if own:
        frame = own[-1]
        where = f" (in `{frame.name}`, line {frame.lineno}: `{(frame.line or '').strip()}`)"
    elif what:  # raised on the call itself (a wrong signature)
        where = f" (when the check called your code for: {what})"
    return f"your code raised {exception_text(exc)}{where}"
