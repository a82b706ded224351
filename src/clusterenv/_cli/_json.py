"""The text of a ``--json`` document: ``json.dumps`` of the data with secrets scrubbed and
undecodable bytes written out (:func:`~clusterenv._scrub.scrub_tree` over
:func:`~clusterenv._text.escape_tree`), found without walking every string when nothing in it
needs either.

A document of thousands of processes (``nccl-log --json`` on a large job) holds millions of
strings; walking them in Python costs ten times what encoding them does. So the data is encoded
first, by the json module's C encoder, and the text says what the walk would change:

- only a string with a character outside ASCII can hold a lone surrogate (encoded as it is, the
  text is then not ASCII);
- :func:`~clusterenv._scrub.scrub_text` changes only a string holding ``=``, ``@``, ``eyJ`` or
  `` set by environment to ``: each string literal around one of those is decoded and scrubbed;
- :func:`~clusterenv._scrub.scrub_tree` hides the value under a secret-looking key: the keys of
  every mapping are collected (a walk over the containers, not the strings) and tested.

When the walk would change anything, it is done, as it always was; the text is the same either
way (a test compares them). A value of the top-level object may come already encoded
(:class:`Encoded`: the records of thousands of processes, written from pieces each encoded once,
with the keys they hold); the walk then builds it the ordinary way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress
from json.encoder import encode_basestring
from typing import Any

from clusterenv._scrub import is_secret_name, scrub_text, scrub_tree
from clusterenv._text import escape_tree

__all__ = ["Encoded", "dumps"]

# What a string must hold for scrub_text to change it (its first tests).
_NEEDLES = ("=", "@", "eyJ", " set by environment to ")
_CONTAINERS = frozenset({dict, list, tuple})
_PLAIN = _CONTAINERS | {str, int, float, bool, type(None)}
_KNOWN: dict[str, bool] = {}  # key -> whether it looks secret, for the keys met so far


@dataclass(frozen=True)
class Encoded:
    """A value of the top-level object already encoded.

    Attributes:
        text: Its compact JSON text, characters outside ASCII written as they are (what
            ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` writes).
        keys: Every key of the objects in it.
        value: Builds the value itself (for the walk, when it is needed).
    """

    text: str
    keys: frozenset[str]
    value: Callable[[], Any]


def dumps(data: Any, *, compact: bool = False) -> str:
    """``json.dumps(scrub_tree(escape_tree(data)))``, on one line when ``compact`` (else
    indented by two), for JSON data (what :func:`~clusterenv._jsonable.to_jsonable` returns),
    whose top-level object may hold :class:`Encoded` values."""
    options: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 2}
    if type(data) is dict and any(type(value) is Encoded for value in data.values()):
        if compact and all(type(key) is str for key in data):
            text = "{" + ",".join(
                encode_basestring(key) + ":"
                + (value.text if type(value) is Encoded else json.dumps(value, ensure_ascii=False,
                                                                        **options))
                for key, value in data.items()) + "}"
            plain = {key: None if type(value) is Encoded else value for key, value in data.items()}
            keys = {key for value in data.values() if type(value) is Encoded for key in value.keys}
            if _clean(text, plain) and not _secret(keys):
                return text
        data = {key: value.value() if type(value) is Encoded else value
                for key, value in data.items()}
    text = json.dumps(data, ensure_ascii=False, **options)
    if _clean(text, data):
        return text
    return json.dumps(scrub_tree(escape_tree(data)), **options)


def _clean(text: str, data: Any) -> bool:
    """Whether the walk would change nothing in ``data``, whose JSON text is ``text``."""
    # ASCII without DEL is what ensure_ascii=True would write too (it escapes DEL, and every
    # other character outside ASCII, which could be a surrogate escape_tree writes out)
    return (text.isascii() and "\x7f" not in text and not _secret_keys(data)
            and not any(_scrubbed(text, needle) for needle in _NEEDLES))


def _secret_keys(data: Any) -> bool:
    """Whether any mapping in ``data`` has a key :func:`is_secret_name` calls secret (or
    ``data`` holds something other than plain JSON data, which the walk then handles)."""
    if type(data) not in _PLAIN:
        return True
    keys: set[Any] = set()
    stack = [data]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            keys.update(node)
            node = node.values()
        elif type(node) not in _CONTAINERS:
            continue
        # the containers inside it, found without a Python step per string or number
        types = list(map(type, node))
        if not _PLAIN.issuperset(types):
            return True
        stack.extend(compress(node, map(_CONTAINERS.__contains__, types)))
    return _secret(keys)


def _secret(keys: set[Any] | frozenset[Any]) -> bool:
    for key in keys:
        secret = _KNOWN.get(key)
        if secret is None:
            secret = isinstance(key, str) and is_secret_name(key)
            if len(_KNOWN) >= 4096:
                _KNOWN.clear()
            _KNOWN[key] = secret
        if secret:
            return True
    return False


def _scrubbed(text: str, needle: str) -> bool:
    """Whether :func:`scrub_text` changes a string value of the encoded ``text`` that holds
    ``needle`` (a key is never scrubbed: it is tested by :func:`_secret_keys`)."""
    at = text.find(needle)
    seen: set[str] = set()
    while at >= 0:
        # needles hold no quote, and outside strings JSON has none of their characters: the
        # string literal around ``at`` runs between the unescaped quotes before and after it
        start = _quote(text, text.rfind('"', 0, at), backwards=True)
        end = _quote(text, text.find('"', at), backwards=False)
        literal = text[start : end + 1]
        if text[end + 1 : end + 2] != ":" and literal not in seen:
            seen.add(literal)
            value = json.loads(literal)
            if scrub_text(value) != value:
                return True
        at = text.find(needle, end + 1)
    return False


def _quote(text: str, at: int, *, backwards: bool) -> int:
    """The first quote at or beyond ``at`` (searching backwards or forwards) that is not
    escaped (not after an odd number of backslashes)."""
    while True:
        slashes = 0
        while text[at - 1 - slashes] == "\\":
            slashes += 1
        if slashes % 2 == 0:
            return at
        at = text.rfind('"', 0, at) if backwards else text.find('"', at + 1)
