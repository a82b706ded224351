"""The catalogue of messages NCCL and the programs around it print (``messages.json``).

The file is generated from the source of NCCL at every release tag, of the network plugins, of
libibverbs and nccl-tests, and from PyTorch's c10d messages, by ``tools/nccl_messages.py``
(docs/nccl-log.md says how to regenerate it). Each message has a matcher (a regular expression
derived from its printf format), where it comes from (file and line at the first and last
release that prints it), a meaning class, the usual causes and what it typically follows.

The file is read the first time a message is looked up, not at import. Matching is by the fixed
text a message starts with: a dictionary lookup per prefix length finds the few candidates, whose
expressions are compiled when first tried.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "CatalogueMatch",
    "MessageClass",
    "catalogue_classes",
    "catalogue_entries",
    "lookup_message",
    "source_class",
]

_CONVERSION = re.compile(
    r"%[-+ #0']*(?:\*|[0-9]+)?(?:\.(?:\*|[0-9]*))?(?:hh|h|ll|l|L|q|j|z|Z|t)?[diouxXeEfFgGaAcspnm%]"
)
# Candidates are found by the first characters of the message: at most this many.
_KEY = 12
# "file.cc:123 (function) " before INFO_LOC messages of NCCL 2.30 and WARN texts quoted
# with their location
_LOCATION = re.compile(r"[\w./+-]{1,200}\.(?:cc|cu|cpp|c|h):[0-9]{1,6}(?: \([^)]{0,200}\))? ",
                       re.ASCII)


@dataclass(frozen=True, slots=True)
class MessageClass:
    """What a class of messages is about, e.g. the class ``"socket"``.

    Attributes:
        name: e.g. ``"socket"``.
        meaning: What the code that prints it does.
        causes: What usually makes such messages appear.
        consequence_of: Classes (or ``"peer-exit"``) it usually follows.
    """

    name: str
    meaning: str
    causes: str
    consequence_of: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CatalogueMatch:
    """A log message recognised in the catalogue.

    Attributes:
        cls: Its meaning class, e.g. ``"socket"``.
        project: Who prints it, e.g. ``"nccl"``, ``"aws-ofi-nccl"``, ``"pytorch"``.
        level: ``"W"`` (a warning or failure line), ``"F"`` (an INFO line reporting a
            failure) or ``"I"`` (an INFO line reporting a choice).
        format: The format string in the source, e.g. ``"Connect to %s failed : %s"``.
        origin: Where, e.g. ``"src/misc/socket.cc:540 (v2.19.3-1) .. :612 (v2.30.7-1)"``.
        returns: What NCCL does after printing it: the ``ncclResult_t`` the call returns (e.g.
            ``"ncclSystemError"``: it fails), ``"abort"`` (the process ends), ``"stops"`` (it
            jumps out of a function that returns a pointer: a thread such as the bootstrap
            root's gives up what it serves), ``"continues"``,
            or ``""`` when unknown.
        fatal: The catalogue's reviewed note that it means failure although printed at INFO.
        causes: The usual causes (the message's own when reviewed, else its class's).
        consequence_of: What it usually follows.
        groups: The values its conversions printed, e.g. ``("10.0.0.2<4242>", "Connection
            refused")``.
    """

    cls: str
    project: str
    level: str
    format: str
    origin: str
    returns: str
    fatal: bool
    causes: str
    consequence_of: tuple[str, ...]
    groups: tuple[str, ...]

    @property
    def fails(self) -> bool:
        """Whether NCCL returns an error right after printing it (or it is reviewed fatal)."""
        return self.fatal or self.returns in ("abort", "stops") or (
            self.returns.startswith("nccl") and self.returns not in ("ncclSuccess",
                                                                     "ncclInProgress"))


class _Entry:
    __slots__ = ("fields", "literal", "needles", "pattern")

    def __init__(self, fields: list[Any]):
        self.fields = fields
        pieces = _CONVERSION.split(fields[3])
        self.literal = sum(ch.isalnum() for piece in pieces for ch in piece)
        # the two longest pieces of fixed text: a text without them cannot match (a substring
        # test costs far less than trying the expression)
        self.needles = sorted((p for p in pieces if p.strip()), key=len)[-2:] or [""]
        self.pattern: re.Pattern[str] | None = None

    def match(self, text: str) -> re.Match[str] | None:
        for needle in self.needles:
            if needle not in text:
                return None
        if self.pattern is None:
            regex = self.fields[4]
            # a closing quote is what log exports strip (CSV columns): it may be missing
            regex = regex[:-1] + '"?' if regex.endswith('"') else regex
            self.pattern = re.compile(regex + r"\s*", re.DOTALL)
        return self.pattern.fullmatch(text)


class _Index:
    """Entries by the fixed text they start with (prefix length -> first characters ->
    entries); those that start with a conversion by the longest fixed text they hold."""

    def __init__(self, entries: list[_Entry]):
        self.by_prefix: dict[int, dict[str, list[_Entry]]] = {}
        self.leading: dict[str, list[_Entry]] = {}
        for entry in entries:
            fmt = entry.fields[3]
            conversion = _CONVERSION.search(fmt)
            lead = fmt[: conversion.start()] if conversion else fmt
            if len(lead) < 3:
                self.leading.setdefault(entry.needles[-1], []).append(entry)
                continue
            size = min(len(lead), _KEY)
            self.by_prefix.setdefault(size, {}).setdefault(lead[:size], []).append(entry)
        self.sizes = sorted(self.by_prefix, reverse=True)
        # every 3-character start of an entry: most texts start otherwise and stop here
        self.starts = {key[:3] for table in self.by_prefix.values() for key in table}

    def match(self, text: str) -> tuple[_Entry, re.Match[str]] | None:
        """The entry with the most fixed text that matches all of ``text``; of entries with as
        much, a WARN's (one format printed at WARN by one file and at INFO by another, as
        ``Call to %s failed with error %s errno %d``: a line that matches both is far more
        often the WARN)."""
        groups: list[list[_Entry]] = [e for needle, e in self.leading.items() if needle in text]
        if text[:3] in self.starts:
            for size in self.sizes:
                entries = self.by_prefix[size].get(text[:size])
                if entries:
                    groups.append(entries)
        best: tuple[_Entry, re.Match[str]] | None = None
        floor = -1
        for entries in groups:
            for entry in entries:
                rank = 2 * entry.literal + (entry.fields[1] == "W")
                if rank > floor and (matched := entry.match(text)) is not None:
                    best, floor = (entry, matched), rank
        return best


class _Catalogue:
    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.projects: list[str] = data["projects"]
        self.paths: list[str] = data["paths"]
        self.releases: dict[str, list[str]] = data["releases"]
        self.classes = {
            name: MessageClass(name, c["meaning"], c["causes"], tuple(c["consequence_of"]))
            for name, c in data["classes"].items()
        }
        # NCCL's files as its return traces name them (relative to src/), with their class
        self.files = {path[4:]: cls for path, cls in zip(self.paths, data.get("path_classes", ()),
                                                         strict=False)
                      if cls and path.startswith("src/")}
        entries = [_Entry(fields) for fields in data["messages"]]
        # a warning (or a line outside NCCL's log) may be any message; an INFO line is looked
        # up only among the INFO messages that report a failure: those that report a choice
        # are read by the parser's own rules
        self.any = _Index(entries)
        self.info = _Index([e for e in entries if e.fields[1] == "F"])

    def match(self, text: str, warning: bool) -> CatalogueMatch | None:
        found = (self.any if warning else self.info).match(text)
        return None if found is None else self.result(found[0], found[1].groups())

    def result(self, entry: _Entry, groups: tuple[str, ...]) -> CatalogueMatch:
        project_index, level, cls, fmt, _, origins, returns, *rest = entry.fields
        extra: dict[str, Any] = rest[0] if rest else {}
        project = self.projects[project_index]
        message_class = self.classes[cls]
        return CatalogueMatch(
            cls=cls, project=project, level=level, format=fmt,
            origin=self.origin(project, origins), returns=returns,
            fatal=bool(extra.get("fatal")),
            causes=extra.get("causes") or message_class.causes,
            consequence_of=tuple(extra.get("consequence_of") or message_class.consequence_of),
            groups=tuple(g or "" for g in groups),
        )

    def origin(self, project: str, origins: list[list[Any]]) -> str:
        releases = self.releases.get(project, [])
        parts = []
        for path_index, first, first_line, last, last_line in origins[:3]:
            path = self.paths[path_index]
            if not releases or project == "pytorch":
                parts.append(path)
                continue
            start = f"{path}:{first_line} ({releases[first]})"
            parts.append(start if first == last else
                         f"{start} .. :{last_line} ({releases[last]})")
        return "; ".join(parts)


@lru_cache(maxsize=1)
def _catalogue() -> _Catalogue:
    # beside this module in the wheel (importlib.resources costs more to import than this file
    # takes to read)
    text = (Path(__file__).parent / "messages.json").read_text(encoding="utf-8")
    return _Catalogue(json.loads(text))


def lookup_message(text: str, *, warning: bool = True) -> CatalogueMatch | None:
    """The catalogued message ``text`` is, or None.

    Args:
        text: A message without its log prefix, e.g. ``"socketProgress: Connection closed by
            remote peer 10.0.0.2<52110>"``; a location NCCL puts before it
            (``"init.cc:1230 (ncclCommInitRank) "``) is skipped.
        warning: Whether it was printed as a warning (``NCCL WARN``, or a failure text outside
            NCCL's log); INFO lines are only compared with INFO messages.

    Returns:
        e.g. ``CatalogueMatch(cls="socket", project="nccl", ...)``; when several formats match,
        the one with the most fixed text.
    """
    catalogue = _catalogue()
    text = text.strip()
    found = catalogue.match(text, warning)
    if found is None and warning and (location := _LOCATION.match(text)) is not None:
        found = catalogue.match(text[location.end() :], warning)
    return found


def source_class(location: str) -> MessageClass | None:
    """What the NCCL source file of a return trace's step does, e.g. ``"transport/nvls.cc:174"``
    -> the ``nvls`` class (NVLink SHARP); None for a file the catalogue does not know.

    The classes of files come from the same rules as those of messages (by path:
    ``tools/nccl_message_rules.py``), for every file that prints a catalogued message."""
    catalogue = _catalogue()
    name = catalogue.files.get(location.rpartition(":")[0] or location)
    return catalogue.classes.get(name) if name else None


def catalogue_classes() -> dict[str, MessageClass]:
    """Every meaning class of the catalogue, by name."""
    return dict(_catalogue().classes)


def catalogue_entries() -> list[dict[str, Any]]:
    """Every catalogued message as a dict: ``project``, ``level``, ``class``, ``format``,
    ``regex``, ``origin``, ``returns`` (for tests and for listing what the reader knows)."""
    catalogue = _catalogue()
    out = []
    for fields in catalogue.data["messages"]:
        project = catalogue.projects[fields[0]]
        out.append({"project": project, "level": fields[1], "class": fields[2],
                    "format": fields[3], "regex": fields[4],
                    "origin": catalogue.origin(project, fields[5]), "returns": fields[6],
                    "extra": fields[7] if len(fields) > 7 else {}})
    return out
