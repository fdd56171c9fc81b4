"""Bounded text from the student's process: what it prints and what it raises, head and tail kept.

A student's output is never graded, yet a ``print`` of 200 MB, or an exception whose message is
200 MB, made the process that runs the notebook hold gigabytes: the text copied by the encoder,
the traceback formatter, the display hook and the probe's message. Here every such text passes
through a bounded buffer first: its head and its tail are kept, and what was cut is said (how
many characters), so output size never drives memory.

Imported by the student's process (:func:`course.grading.kernel._execute`): keep it light.
"""

from __future__ import annotations

import io
from typing import Any, TextIO

from course.framework.failure import clipped, exception_text

__all__ = ["BoundedStream", "clipped", "exception_text"]

HEAD = 32 * 1024  # characters of a stream written through before the rest is cut
TAIL = 32 * 1024  # characters of its end kept, written when the stream is closed


class BoundedStream(io.TextIOBase):
    """A text stream that writes its first ``head`` characters through to ``target``, keeps only
    the last ``tail`` of the rest, and on :meth:`close` writes how much was cut and that tail."""

    def __init__(self, target: TextIO, head: int = HEAD, tail: int = TAIL):
        super().__init__()
        self.target, self.head, self.tail = target, head, tail
        self.written = 0  # characters written through
        self.cut = 0  # characters past the head (the kept tail among them)
        self.end = ""

    def writable(self) -> bool:
        return True

    def write(self, text: Any) -> int:
        text = text if type(text) is str else str(text)
        size = len(text)
        room = min(size, max(0, self.head - self.written))
        if room:
            self.target.write(text[:room])
            self.written += room
        if size > room:  # slices of the tail only: the rest is never copied
            self.cut += size - room
            self.end = (self.end + text[max(room, size - self.tail) :])[-self.tail :]
        return size

    def flush(self) -> None:
        self.target.flush()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", "utf-8")

    def fileno(self) -> int:
        return self.target.fileno()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        if self.closed:
            return
        dropped = self.cut - len(self.end)
        if dropped:
            self.target.write(f"\n[... {dropped} characters cut ...]\n")
        self.target.write(self.end)
        self.end = ""
        self.target.flush()
        super().close()
