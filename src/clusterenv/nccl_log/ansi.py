"""Terminal escape sequences taken out of a log before it is read.

Logs captured from a terminal, or written through a colouring log handler, wrap lines or their
prefixes in ANSI escape sequences (``\\x1b[36m`` ... ``\\x1b[0m``, ECMA-48's control sequences);
glued to a message, they make ``Using network IB\\x1b[0m`` another text. They carry nothing NCCL
printed, so they are removed: from each line (:func:`plain_lines`) or from each block read from a
file (:class:`PlainStream`, which keeps a sequence cut at the end of a block for the next one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["PlainStream", "plain_lines", "strip_escapes"]

# ECMA-48: a control sequence (CSI: ESC [ parameters intermediates final), an operating system
# command (ESC ] ... BEL or ESC \), or a two-character escape (ESC and one of @ to _)
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]{0,64}[ -/]{0,16}[@-~]|\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)"
                     r"|[@-Z\\-_])")
# A sequence cut at the end of a block is held back when it starts this close to the end.
_LONGEST = 600


def strip_escapes(text: str) -> str:
    """``text`` without its terminal escape sequences (``"\\x1b[1mNCCL\\x1b[0m"`` ->
    ``"NCCL"``); a text without ESC is returned as it is."""
    return _ESCAPE.sub("", text) if "\x1b" in text else text


def plain_lines(lines: Iterable[str]) -> Iterator[str]:
    """The lines, each without its escape sequences."""
    for line in lines:
        yield _ESCAPE.sub("", line) if "\x1b" in line else line


class PlainStream:
    """A text stream whose :meth:`read` returns the text without escape sequences."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._carry = ""  # the start of a sequence the last block cut

    def read(self, size: int = -1) -> str:
        """Up to about ``size`` characters of the text, escapes removed; "" only at its end."""
        while True:
            data: str = self._stream.read(size)
            text, self._carry = self._carry + data, ""
            if "\x1b" not in text:
                return text
            last = text.rfind("\x1b")
            if data and len(text) - last < _LONGEST and _ESCAPE.match(text, last) is None:
                text, self._carry = text[:last], text[last:]
            text = _ESCAPE.sub("", text)
            if text or not data:
                return text
