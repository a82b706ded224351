"""The streaming parser behind :func:`clusterenv.nccl_log.parse_nccl_log`.

Speed matters (logs of many GB exist): a line without ``NCCL`` costs one substring test and one
search for the words of the failures PyTorch and others print; a marker line costs a ``find``, a
slice and a dict lookup of its message text in a cache of facts
(:func:`clusterenv.nccl_log.info.parse_info` and, for INFO lines it has no rule for, the
catalogue's lookup run once per distinct message); only lines that state a fact touch the
per-process state (:mod:`clusterenv.nccl_log.state`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from clusterenv.nccl_log.catalogue import lookup_message
from clusterenv.nccl_log.foreign import Foreign, recognise, recognise_last_error
from clusterenv.nccl_log.info import VERSION, Fact, fi_getinfo, parse_info
from clusterenv.nccl_log.lines import (
    find_marker,
    kind_of,
    message_end,
    parse_header,
    source_of,
    split_messages,
)
from clusterenv.nccl_log.model import NcclLog
from clusterenv.nccl_log.state import MAX_TEXT, FactOps, Process

__all__ = ["MAX_LINE", "parse_lines", "parse_stream"]

#: Characters of one line that are read; the rest of a longer line is skipped unread, so that a
#: file without newlines (a binary, a log joined into one line) costs bounded memory.
MAX_LINE = 65_536
# Facts that only set something the first time (first value wins, or a union): replaying them
# for a line seen before changes nothing, so a repeated line does not run them again. Facts
# that mark progress (a network chosen, a channel, a communicator complete) are replayed: a
# return chain before them was handled.
_ONCE = frozenset({
    "bootstrap", "dmabuf", "driver", "env", "gdr_distance", "gdr_hca", "ib_device", "net_named",
    "ofi", "ofi_group", "ofi_provider", "ofi_version", "plugin_external", "plugin_loaded",
    "plugin_requested", "plugin_trouble", "version",
})

# Distinct message texts whose facts are cached, and distinct line prefixes remembered (each
# cache is emptied when full: lines of one process come close together).
_MAX_CACHED = 50_000
# The line cache is first filled to this size to see whether lines repeat at all.
_CACHE_PROBE = 4_096
_MISSING: Any = object()
_TAGS = frozenset({"INFO ", "WARN "})


class _Parser(FactOps):
    def __init__(self) -> None:
        super().__init__()
        self.matched = 0
        self.facts: dict[str, Fact | None] = {}
        self.warn_facts: dict[str, Fact] = {}
        self.by_head: dict[str, Process] = {}
        # whole line -> what it does: False (nothing recognised), True (recognised, nothing to
        # do) or the actions left to run when the same line comes again (see _analyse)
        self.by_line: dict[str, Any] = {}
        self.ops: dict[str, Callable[..., None]] = {
            name[4:]: getattr(self, name) for name in dir(self) if name.startswith("_op_")
        }
        self.skip_rest: Callable[[], None] | None = None
        self.cache_from = 0  # line number from which lines are remembered again
        self.cache_start = 0  # line number where the line cache was last emptied
        self.cache_limit = _CACHE_PROBE  # entries at which the line cache is reviewed
        self.last_error_line = -1  # PyTorch's "Last error:" with NCCL's text on the next line

    # -- reading ------------------------------------------------------------------------------

    def feed(self, lines: Iterable[str]) -> int:
        """Read every line; returns how many there were.

        The hot path is one dict lookup per line: a line seen before (every rank prints the same
        lines, jobs repeat them) replays only the actions that still change something. A line
        seen for the first time with one ``NCCL INFO`` message is handled inline (no call);
        anything else goes through :meth:`_analyse`.
        """
        by_line, facts, by_head, ops = self.by_line, self.facts, self.by_head, self.ops
        get, get_fact, get_proc = by_line.get, facts.get, by_head.get
        analyse, new_fact, new_proc = self._analyse, self._fact, self._proc
        once, missing, limit = _ONCE, _MISSING, MAX_LINE
        number = matched = 0
        cache_from, cache_limit = self.cache_from, self.cache_limit
        for number, line in enumerate(lines, 1):
            # while the line cache is off (lines did not repeat), do not even hash the line
            actions = get(line) if number >= cache_from else None
            if actions is None:
                pos = line.find("NCCL ")
                if (pos < 0 or line[pos + 5 : pos + 10] != "INFO " or len(line) >= limit
                        or (line.find("NCCL ", pos + 10) >= 0
                            and find_marker(line, pos + 10) >= 0)):
                    matched += analyse(line, number)  # ran its actions, remembered the line
                    cache_from, cache_limit = self.cache_from, self.cache_limit
                    continue
                msg = line[pos + 10 :].strip()
                if "|" in msg or '"' in msg:  # an export's column or quote: rare
                    msg = message_end(msg)
                fact = get_fact(msg, missing)
                if fact is missing:
                    fact = new_fact(msg)
                matched += 1
                if fact is None:
                    result: Any = True
                else:
                    head = line[:pos]
                    proc = get_proc(head) or new_proc(head)
                    op = ops[fact[0]]
                    if not proc.first_line:
                        proc.first_line = number
                    op(proc, msg, number, fact)
                    result = True if fact[0] in once else ((op, proc, msg, fact),)
                if number >= cache_from:
                    if len(by_line) >= cache_limit:
                        self._cache_full(number)
                        cache_from, cache_limit = self.cache_from, self.cache_limit
                    by_line[line] = result
                continue
            if actions is False:
                continue
            matched += 1
            if actions is not True:
                for op, proc, msg, fact in actions:
                    op(proc, msg, number, fact)
        self.matched += matched
        return number

    def _analyse(self, line: str, number: int) -> Any:
        """What a line not seen before does (the cases :meth:`feed` does not handle inline: no
        marker, a WARN, several messages, an over-long line): runs its actions once and
        remembers what a repeat of the line must run again. Returns whether it was
        recognised."""
        cache = True
        if len(line) >= MAX_LINE and line[-1:] != "\n":
            if self.skip_rest is not None:
                self.skip_rest()  # the rest of an over-long line is not read (memory bound)
            line, cache = line[:MAX_LINE], False
        pos = line.find("NCCL ")
        if pos >= 0 and line[pos + 5 : pos + 10] not in _TAGS:
            pos = find_marker(line, pos + 5)
        result: Any = self._unmarked(line, number) if pos < 0 else self._messages(line, pos,
                                                                                 number)
        if cache and number >= self.cache_from:
            if len(self.by_line) >= self.cache_limit:
                self._cache_full(number)
            self.by_line[line] = result
        return result is not False

    def _cache_full(self, number: int) -> None:
        """Review the line cache when it reaches its limit, then empty it (memory stays bounded).

        Fewer lines read since it was last emptied than twice what it holds means repeats are
        rare (a counter or a timestamp in every line): remembering lines then costs more than it
        saves, so it stops for a while and is tried again later on a small sample first.
        """
        if number - self.cache_start < 2 * len(self.by_line):
            self.cache_from = number + 20 * _MAX_CACHED
            self.cache_limit = _CACHE_PROBE
        else:
            self.cache_limit = _MAX_CACHED
        self.by_line.clear()
        self.cache_start = max(number, self.cache_from)

    def _run(self, actions: list[tuple[Any, ...]], number: int) -> Any:
        for op, proc, msg, fact in actions:
            proc.first_line = proc.first_line or number
            op(proc, msg, number, fact)
        # facts that only set something once (first value wins) need not run again
        return tuple(a for a in actions if a[3][0] not in _ONCE) or True

    def _messages(self, line: str, pos: int, number: int) -> Any:
        """A WARN line, or a line holding several messages: run them, return the repeatable."""
        actions = []
        if find_marker(line, pos + 10) < 0:  # one message ("NCCL version ...", a WARN)
            parts = [(line[:pos], message_end(line[pos + 10 :]), line[pos + 5] == "W")]
        else:
            parts = split_messages(line, pos)
        for head, msg, is_warn in parts:
            action = self._warn_action(head, msg) if is_warn else self._info_action(head, msg)
            if action is not None:
                actions.append(action)
        return self._run(actions, number)

    def _fact(self, msg: str) -> Fact | None:
        fact = parse_info(msg)
        if fact is None and len(msg) > 8:
            # an INFO line no rule reads: the catalogue knows whether it reports a failure
            match = lookup_message(msg, warning=False)
            if match is not None:
                fact = ("info_failure", kind_of(msg[:MAX_TEXT], match.cls), match)
        if len(self.facts) >= _MAX_CACHED:
            self.facts.clear()
        self.facts[msg] = fact
        return fact

    def _info_action(self, head: str, msg: str) -> tuple[Any, ...] | None:
        fact = self.facts.get(msg, _MISSING)
        if fact is _MISSING:
            fact = self._fact(msg)
        if fact is None:
            return None
        return (self.ops[fact[0]], self._proc(head), msg, fact)

    def _warn_action(self, head: str, msg: str) -> tuple[Any, ...]:
        fact = self.warn_facts.get(msg)
        if fact is None:
            match = lookup_message(msg)
            fact = ("warn", kind_of(msg[:MAX_TEXT], match.cls if match else None), None, match)
            if len(self.warn_facts) >= _MAX_CACHED:
                self.warn_facts.clear()
            self.warn_facts[msg] = fact
        fact = (*fact[:2], source_of(head), fact[3])
        return (self._op_warn, self._proc(head), msg, fact)

    def _proc(self, head: str) -> Process:
        proc = self.by_head.get(head)
        if proc is not None:
            return proc
        header = parse_header(head)
        key = (header[0], header[1]) if header else (None, None)
        proc = self.procs.get(key)
        if proc is None:
            device = header[2] if header else None
            proc = self.procs[key] = Process(key[0], key[1], device)
        if len(self.by_head) >= _MAX_CACHED:
            self.by_head.clear()
        self.by_head[head] = proc
        return proc

    def finish(self, lines_read: int) -> NcclLog:
        """The log, after :meth:`feed` returned ``lines_read``."""
        return self.result(lines_read, self.matched)

    # -- lines without a marker (:mod:`clusterenv.nccl_log.foreign`) --------------------------

    def _unmarked(self, line: str, number: int) -> Any:
        """A line without a marker: libfabric's own log, PyTorch's exception and watchdog lines,
        nccl-tests, libibverbs, banners and WARNs of old formats. Returns the actions to replay
        for a repeat of the line, or False when it is none of these."""
        if "fi_getinfo" in line and fi_getinfo(line) is not None:
            text = line[line.find("fi_getinfo") :].strip()
            self.notices.add(text, "ofi-no-provider", None, number, None)
        if "NCCL" in line and self.fallback_version is None:
            # PyTorch's "NCCL error in: ..., NCCL version 2.18.1": the version when no banner
            version = VERSION.search(line)
            if version:
                self.fallback_version = version.group(1)
        if self.last_error_line == number - 1 and line.strip():
            found: Foreign | None = recognise_last_error(line)
        else:
            found = recognise(line)
        if found is None:
            return False
        proc = self._proc("")
        if found.what == "warn":
            return self._run([self._warn_action(found.head, found.text)], number)
        if found.what == "last-error" and not found.text:
            return self._run([(self._op_last_error, proc, "", ("last_error",))], number)
        fact = ("foreign", found)
        return self._run([(self._op_foreign, proc, found.text, fact)], number)

    def _op_last_error(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        self.last_error_line = number

    def _op_foreign(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        found: Foreign = fact[1]
        if found.what == "banner":
            self.banners.append((found.text, number))
            return
        kind = found.kind or "other"
        if found.what == "last-error" and found.match is None:
            kind = kind if kind != "other" else "last-error"
        self.errors.add(found.text, kind, None, number, None, found.match)


def parse_lines(lines: Iterable[str]) -> NcclLog:
    """Parse log lines (see :func:`clusterenv.nccl_log.parse_nccl_log`)."""
    parser = _Parser()
    return parser.finish(parser.feed(lines))


def parse_stream(stream: Any) -> NcclLog:
    """Parse an open text file, reading at most :data:`MAX_LINE` characters of any line."""
    readline = getattr(stream, "readline", None)
    if readline is None:
        return parse_lines(stream)
    parser = _Parser()

    def skip_rest() -> None:
        while True:
            piece = readline(MAX_LINE)
            if not piece or piece.endswith("\n"):
                return

    parser.skip_rest = skip_rest
    return parser.finish(parser.feed(iter(partial(readline, MAX_LINE), "")))
