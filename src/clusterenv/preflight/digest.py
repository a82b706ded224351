"""Long texts on the wire: a prefix and a digest, compared by the digest (pure).

A fingerprint has to fit in one frame whatever the node's environment holds, so a long value
travels as its first characters and a SHA-256 of the whole, e.g.
``"abc…[4000 characters, sha256 0123456789abcdef]"``. Nodes compare what they send by
:func:`compare_key`, which gives the same key for a value and for any such shortened form of
it: two nodes agree or differ exactly as their full values do, however much of each was sent.
"""

from __future__ import annotations

import hashlib
import re

from clusterenv._text import JSON_SURROGATES

__all__ = ["KEY_BYTES", "clip_bytes", "compare_key", "digest_form", "json_length"]

#: Texts whose JSON encoding is longer than this many bytes are compared by their digest.
KEY_BYTES = 64

_DIGEST = re.compile(r"(?s).*…\[([0-9]{1,9}) characters, sha256 ([0-9a-f]{16})\]")
_ELLIPSIS = "…"


def json_length(text: str) -> int:
    """Bytes of ``text`` inside a JSON string (quotes not counted), as the wire encodes it."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text)
    body = text.replace("\\", "\\\\").replace('"', '\\"')
    size = 0
    for char in body:
        code = ord(char)
        if code < 0x20 or code == 0x7F:
            size += 6 if char not in "\b\f\n\r\t" else 2
        elif 0xD800 <= code <= 0xDFFF:  # written out as \\udcff (see clusterenv._text)
            size += len(char.encode("utf-8", JSON_SURROGATES))
        else:
            size += len(char.encode("utf-8"))
    return size


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def digest_form(text: str, max_bytes: int) -> str:
    """``text`` as a prefix and a digest within ``max_bytes`` (JSON-encoded), or ``text`` itself
    when it fits, e.g. ``digest_form("x" * 4000, 64)`` ->
    ``"xxxxxxxxxxx…[4000 characters, sha256 9d3c1e61c0b8a3f0]"``."""
    if json_length(text) <= max_bytes:
        return text
    found = _DIGEST.fullmatch(text)
    length, digest = (int(found.group(1)), found.group(2)) if found else (len(text), _sha(text))
    suffix = f"{_ELLIPSIS}[{length} characters, sha256 {digest}]"
    room = max_bytes - json_length(suffix)
    prefix = text[: text.rfind(_ELLIPSIS + "[")] if found else text
    return clip_bytes(prefix, max(room, 0), ellipsis=False) + suffix


def clip_bytes(text: str, max_bytes: int, *, ellipsis: bool = True) -> str:
    """The longest prefix of ``text`` whose JSON encoding fits in ``max_bytes`` (ending in ``…``
    when cut and ``ellipsis``), e.g. ``clip_bytes("abcdef", 4)`` -> ``"a…"`` (``…`` is 3
    bytes)."""
    if json_length(text) <= max_bytes:
        return text
    room = max_bytes - (len(_ELLIPSIS.encode()) if ellipsis else 0)
    low, high = 0, min(len(text), max(room, 0))
    while low < high:  # the longest prefix that fits
        middle = (low + high + 1) // 2
        if json_length(text[:middle]) <= room:
            low = middle
        else:
            high = middle - 1
    return text[:low] + (_ELLIPSIS if ellipsis else "")


def compare_key(text: str) -> str:
    """What ``text`` is compared by: itself when short, else its length and digest, the same
    for the full text and for every :func:`digest_form` of it."""
    found = _DIGEST.fullmatch(text) if _ELLIPSIS in text else None
    if found is not None:
        return f"sha256 {found.group(2)} of {found.group(1)} characters"
    if json_length(text) <= KEY_BYTES:
        return text
    return f"sha256 {_sha(text)} of {len(text)} characters"
