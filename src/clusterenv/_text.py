"""Text that came from outside: one error policy for undecodable bytes, one sanitiser for terminals.

Two kinds of outside text reach clusterenv. Host text (interface names, environment values, file
names under a snapshot) is decoded by Python with ``surrogateescape``, so a byte that is not
UTF-8 becomes a lone surrogate (``b"ens1\\xff"`` reads as ``"ens1\\udcff"``); wire text (a peer's
JSON) can carry lone surrogates as ``\\ud800`` escapes. Neither can be encoded as UTF-8, and an
unguarded ``encode()`` or ``print()`` ends in ``UnicodeEncodeError``. The policy here, applied
where text enters and leaves: a lone surrogate that stands for an undecodable byte becomes the
four characters ``\\xff``, any other lone surrogate the six characters ``\\ud800``
(:func:`escape_surrogates`). The text stays readable and comparable, and always encodes.

Terminals get one more rule: every string shown there passes :func:`printable`, which escapes
control characters (C0, DEL, C1), lone surrogates and the bidirectional-override characters, so a
peer's host name such as ``"\\x1b[2J…\\nthis node: … consistent"`` can neither clear the screen
nor forge a line of output.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

__all__ = [
    "JSON_SURROGATES",
    "clip",
    "count",
    "escape_surrogates",
    "escape_tree",
    "has_surrogates",
    "printable",
    "terminal_line",
]

_SURROGATE = re.compile("[\ud800-\udfff]")
# Control characters (C0, DEL, C1), lone surrogates, bidirectional formatting characters
# (Trojan Source), and the Unicode line and paragraph separators.
_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
# The same, keeping newlines and tabs and the colour codes clusterenv writes itself.
_TERMINAL = re.compile(
    "\x1b\\[(?:0|1|2|31|32|33|34)m"
    "|[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
    "\u2066-\u2069]"
)
# What _TERMINAL changes in ASCII text: control characters but newlines and tabs (ESC among
# them). ASCII text without any is written as it is: deleting every other byte from its
# encoding (bytes.translate, in C) leaves nothing, ten times faster than a search for them.
_ASCII_CONTROL = bytes([*range(0x09), *range(0x0B, 0x20), 0x7F])
_NOT_CONTROL = bytes(b for b in range(0x80) if b not in _ASCII_CONTROL)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the undecodable byte itself
        return f"\\x{code - 0xDC00:02x}"
    if char in _NAMED:
        return _NAMED[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (it cannot be encoded as UTF-8)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written out: ``"ens1\\udcff"`` -> ``"ens1\\\\xff"``.

    A surrogate from ``surrogateescape`` (U+DC80..U+DCFF) shows the byte it stands for; any other
    shows its code point (``"\\\\ud800"``). Text without surrogates is returned as it is.
    """
    if text.isascii():
        return text
    return _SURROGATE.sub(lambda m: _escape(m.group()), text)


def escape_tree(data: Any) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with every string, keys included,
    passed through :func:`escape_surrogates`; values without surrogates are returned as they are."""
    if isinstance(data, str):
        return escape_surrogates(data)
    if isinstance(data, dict):
        return {escape_surrogates(k) if isinstance(k, str) else k: escape_tree(v)
                for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [escape_tree(v) for v in data]
    return data


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters of ``text``: a longer one is cut and ends in ``…`` with the
    number of characters left out, e.g. ``clip("x" * 60000, 20)`` ->
    ``"xxxxxx… (59994 more)"``; so echoing a hostile value costs a bounded line."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(f"… ({len(text)} more)"), 1)
    return f"{text[:keep]}… ({len(text) - keep} more)"


def printable(text: object, *, newlines: bool = False) -> str:
    """``text`` safe to show on a terminal: control characters, lone surrogates and
    bidirectional overrides escaped (``"a\\x1b[2Jb\\n"`` -> ``"a\\\\x1b[2Jb\\\\n"``).

    Args:
        text: Any value; non-strings are shown with ``str()``.
        newlines: Keep ``\\n`` (for a multi-line message clusterenv composed itself).
    """
    shown = text if isinstance(text, str) else str(text)
    if shown.isascii() and shown.isprintable():
        return shown
    if newlines:
        return "\n".join(_UNPRINTABLE.sub(lambda m: _escape(m.group()), line)
                         for line in shown.split("\n"))
    return _UNPRINTABLE.sub(lambda m: _escape(m.group()), shown)


def terminal_line(text: str) -> str:
    """What a clusterenv output stream writes: like :func:`printable`, but newlines, tabs and
    clusterenv's own colour codes (``ESC [ 31 m`` …) pass; any other escape sequence is shown
    escaped, so text that slipped past a renderer still cannot drive the terminal."""
    if text.isascii() and not text.encode("ascii").translate(None, _NOT_CONTROL):
        return text
    return _TERMINAL.sub(lambda m: m.group() if len(m.group()) > 1 else _escape(m.group()), text)


def _json_surrogates(error: UnicodeError) -> tuple[str, int]:
    """Codec error handler: a lone surrogate inside JSON text becomes an escaped backslash and
    its escape (``\\\\xff``), which a JSON parser reads back as the four characters ``\\xff``."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    chunk = error.object[error.start : error.end]
    return "".join("\\" + _escape(c) for c in chunk), error.end


#: Name of the codec error handler for JSON text: ``text.encode("utf-8", JSON_SURROGATES)``.
JSON_SURROGATES = "clusterenv-json-surrogates"
codecs.register_error(JSON_SURROGATES, _json_surrogates)


def count(number: int, noun: str, plural: str | None = None) -> str:
    """A number of things in words: ``count(1, "node")`` -> ``"1 node"``, ``count(2, "node")``
    -> ``"2 nodes"``, ``count(4, "process")`` -> ``"4 processes"``; ``plural`` for the rest
    (``count(3, "child", "children")``)."""
    if number == 1:
        return f"1 {noun}"
    if plural is None:
        plural = noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")
    return f"{number} {plural}"
