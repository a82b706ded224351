"""Lines without an ``NCCL INFO``/``NCCL WARN`` marker that still say what went wrong.

A log a user pastes is often not NCCL's debug output but what surrounds it: PyTorch's exception
block (``torch.distributed.DistBackendError: NCCL error in: ...``, ``ncclSystemError: ...``,
``Last error:`` followed by NCCL's own last WARN text), the watchdog's timeout, a TCPStore or
Gloo failure, an nccl-tests failure line, libibverbs' warnings, NCCL's banner printed without a
prefix (``NCCL_DEBUG=VERSION``/``WARN``) and the WARN formats of old releases
(``misc/ibvwrap.cu:212 WARN ...``, NCCL 1's ``WARN file.cu:12 ...``). Each is recognised by the
catalogue of messages (:mod:`clusterenv.nccl_log.catalogue`), after the decorations around it
(``[rank1]:``, glog headers, ``[PG ID 0 ...]``, an exception's type) are skipped.

:func:`recognise` is pure: it returns what the line is, the parser keeps the state (a
``Last error:`` line says that the next line is NCCL's message).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterenv.nccl_log.catalogue import CatalogueMatch, lookup_message
from clusterenv.nccl_log.lines import kind_of

__all__ = ["HINT", "Foreign", "recognise", "recognise_last_error"]

_A = re.ASCII
#: A line that holds none of these is none of the messages this module knows (one search costs
#: less than the catalogue's lookup): the parser tests it first.
HINT = re.compile(
    r"NCCL|nccl|Last error|atchdog|WARN|libibverbs|Gloo|losed by|imed out|TCP client|"
    r"client socket|server socket|clients joined|wait timeout|recvValue|Failed to recv|"
    r"Test .{0,6}failure|remote process exited|async exception|"
    r"resolve hostname|timed out|blocking wait"
)
_BANNER = re.compile(r"NCCL version ([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})", _A)
# "misc/ibvwrap.cu:212 WARN msg" (a marker without "NCCL"), NCCL 1's "WARN file.cu:12 msg"
_OLD_WARN = re.compile(r"([\w./+-]{1,200}\.(?:cu|cc|c|h|cpp):[0-9]{1,6}) WARN (.{1,4000})$", _A)
_V1_WARN = re.compile(r"(?:^|\s)WARN ([\w./+-]{1,200}\.cu:[0-9]{1,6}) (.{1,4000})$", _A)
_LAST_ERROR = re.compile(r"Last error:[ \t]*(.{0,4000})$")
# Decorations before a message: launcher and rank prefixes, glog/c10 headers, c10d and process
# group prefixes, an exception's type, a Gloo location ("[../gloo/transport/tcp/pair.cc:534] ")
_DECORATION = re.compile(
    r"\s*(?:\[(?:rank|default)?[0-9]{1,7}\]:|[0-9]{1,7}: |\[[0-9]{1,7},[0-9]{1,7}\]<\w{1,8}>:|"
    r"\[?[EWIF] ?[0-9]{0,4} ?[0-9:.]{0,20} ?[0-9]{0,8} ?[\w./-]{1,200}\.(?:cpp|cc|h|hpp):"
    r"[0-9]{1,6}\] ?|\[c10d(?: - \w{1,10})?\] ?|\[PG [^\]]{0,300}\] ?|\[Rank [0-9]{1,7}\] ?|"
    r"[\w.]{0,100}(?:Error|Exception|Warning): |\[[^\]]{0,300}\.(?:cc|cpp|h):[0-9]{1,6}\] )",
    _A,
)
# What c10's warning handler appends to a warning: " (function operator())" (c10/util/Logging.cpp,
# the warning's source location).
_FUNCTION_SUFFIX = re.compile(r"\s\(function [\w:<>~ ,*&]{1,200}(?:\(\))?\)$", _A)
# Where a message may begin inside a line, after the decorations: after these separators.
_STARTS = re.compile(r": |\] ", _A)
_MAX_STARTS = 6
_TORCH_KINDS = {"torch-nccl": "nccl-error", "benchmark": "nccl-error",
                "torch-watchdog": "watchdog", "torch-store": "store", "gloo": "gloo"}


@dataclass(frozen=True, slots=True)
class Foreign:
    """What a line outside NCCL's tagged log is.

    Attributes:
        what: ``"message"`` (a catalogued failure line), ``"banner"`` (``NCCL version``),
            ``"warn"`` (a WARN of an old NCCL format), ``"last-error"`` (PyTorch's ``Last
            error:``; ``text`` is NCCL's message when it is on the same line).
        text: The message, e.g. ``"ncclSystemError: System call (e.g. socket, malloc) ..."``,
            or the version of a banner.
        kind: The kind the checks use, e.g. ``"nccl-error"``, ``"watchdog"``, ``"ibverbs"``.
        match: The catalogue's entry.
        head: For ``"warn"``: the text before the message (host prefix and location).
    """

    what: str
    text: str
    kind: str = ""
    match: CatalogueMatch | None = None
    head: str = ""


def _undecorated(line: str) -> list[str]:
    """The line, then the line without each decoration in turn (an exception's type such as
    ``ncclInternalError:`` is a decoration of some messages and the start of others)."""
    text = line.strip()
    texts = [text]
    for _ in range(8):
        found = _DECORATION.match(text)
        if found is None or not found.group(0):
            break
        text = text[found.end() :].strip()
        texts.append(text)
    suffix = _FUNCTION_SUFFIX.search(text)
    if suffix is not None:
        texts.append(text[: suffix.start()])
    return texts


def _kind(match: CatalogueMatch, text: str) -> str:
    return _TORCH_KINDS.get(match.cls) or kind_of(text, match.cls)


def _lookup(texts: list[str]) -> tuple[str, CatalogueMatch] | None:
    """The catalogued message that one of ``texts`` is, or the last of them holds after a
    ``": "`` or ``"] "``."""
    candidates = list(dict.fromkeys(texts[1:] or texts))
    text = texts[-1]
    for found in _STARTS.finditer(text):
        if len(candidates) > _MAX_STARTS:
            break
        candidates.append(text[found.end() :])
    for whole in (c.strip() for c in candidates):
        if len(whole) < 8:
            continue
        candidate = whole
        match = lookup_message(candidate, warning=True)
        end = whole.find(". ")
        for _ in range(4):
            if match is not None or end < 0:
                break
            # PyTorch's messages run on past the sentences its source starts them with (the
            # heartbeat monitor's "... enqueued collectives. This typically indicates ...")
            candidate = whole[: end + 1]
            match = lookup_message(candidate, warning=True)
            end = whole.find(". ", end + 2)
        if match is not None and match.level != "I":
            return candidate, match
    return None


def recognise(line: str) -> Foreign | None:
    """What an unmarked line is, or None (most lines: a program's own output).

    Example: ``"[rank1]: ncclRemoteError: A call failed possibly due to a network error or a
    remote process exiting prematurely."`` -> ``Foreign("message", "ncclRemoteError: ...",
    "nccl-error", <torch-nccl match>)``.
    """
    if HINT.search(line) is None:
        return None
    last = _LAST_ERROR.search(line)
    if last is not None:
        rest = last.group(1).strip()
        return recognise_last_error(rest) if rest else Foreign("last-error", "")
    old = _OLD_WARN.search(line)
    if old is not None and "NCCL WARN" not in line:
        return Foreign("warn", old.group(2).strip(), head=line[: old.start(1)] + old.group(1) + " ")
    old = _V1_WARN.search(line)
    if old is not None:
        return Foreign("warn", old.group(2).strip(), head=old.group(1) + " ")
    texts = _undecorated(line)
    banner = _BANNER.match(texts[-1])
    if banner is not None:
        return Foreign("banner", banner.group(1))
    found = _lookup(texts)
    if found is None:
        return None
    message, match = found
    return Foreign("message", message[:4000], _kind(match, message), match)


def recognise_last_error(line: str) -> Foreign:
    """The line after PyTorch's ``Last error:``: NCCL's last WARN text, with its class when the
    catalogue knows it (a warning of unknown text stays a warning)."""
    text = _undecorated(line)[-1]
    match = lookup_message(text, warning=True) if text else None
    return Foreign("last-error", text[:4000], kind_of(text, match.cls if match else None), match)
