"""The streaming parser behind :func:`clusterenv.nccl_log.parse_nccl_log`, line by line.

Speed matters (logs of many GB exist): a line without ``NCCL`` costs one substring test and one
search for the words of the failures PyTorch and others print; a marker line costs a ``find``, a
slice and a dict lookup of its message text in a cache of facts
(:func:`clusterenv.nccl_log.info.parse_info` and, for INFO lines it has no rule for, the
catalogue's lookup run once per distinct message); only lines that state a fact touch the
per-process state (:mod:`clusterenv.nccl_log.state`). A line seen before costs one dict lookup
in a cache of whole lines (while lines repeat).

What one line does is :meth:`_Parser.line` (and, for a line seen before, the actions the line
cache keeps): :mod:`clusterenv.nccl_log.blocks` reads files in blocks of lines, setting apart in
bulk the lines that need nothing, and calls the same code for the others, so both read the same.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import count
from typing import Any

from clusterenv.nccl_log.catalogue import lookup_message
from clusterenv.nccl_log.foreign import Foreign, recognise, recognise_last_error
from clusterenv.nccl_log.info import NOTHING, VERSION, Fact, channel_fact, fi_getinfo, info_fact
from clusterenv.nccl_log.lines import (
    find_marker,
    kind_of,
    message_end,
    parse_header,
    source_of,
    split_messages,
)
from clusterenv.nccl_log.model import NcclLog
from clusterenv.nccl_log.result import log_of
from clusterenv.nccl_log.state import MAX_TEXT, FactOps, Process

__all__ = ["MAX_LINE", "MISSING", "no_cycle_collection", "parse_lines"]

#: Characters of one line that are read; the rest of a longer line is skipped unread, so that a
#: file without newlines (a binary, a log joined into one line) costs bounded memory.
MAX_LINE = 65_536
# Facts that only set something the first time (first value wins, or a union): replaying them
# for a line seen before changes nothing, so a repeated line does not run them again, except
# that those marking progress (a device list, a network chosen) move the process's progress
# line: a return chain before them was handled.
_ONCE = frozenset({
    "bootstrap", "dmabuf", "driver", "env", "gdr_distance", "gdr_hca", "ib_device", "ib_using",
    "net_named", "network", "ofi", "ofi_group", "ofi_provider", "ofi_version", "plugin_absent",
    "plugin_external", "plugin_loaded", "plugin_requested", "plugin_trouble", "socket",
    "version",
})
_PROGRESS = frozenset({"ib_using", "network", "socket"})

# Distinct message texts whose facts are cached, and distinct line prefixes remembered (each
# cache is emptied when full: lines of one process come close together).
_MAX_CACHED = 50_000
# The line cache is first filled to this size to see whether lines repeat at all (small: every
# line of the sample costs more than it would with the cache off).
_CACHE_PROBE = 1_024
#: What a cache lookup returns for a text not in it (a tuple, so that it is true: the line
#: cache's values are False, an empty tuple or the actions of a line, see :meth:`_Parser.feed`).
MISSING: Any = ("missing",)
_TAGS = frozenset({"INFO ", "WARN "})
# Channel lines are most of a large job's lines, each with its own ranks: those through P2P or
# shared memory state nothing, those through a network are read without the fact cache.
_CHANNEL_HEADS = frozenset({"Chan", "Ring"})


class _Parser(FactOps):
    def __init__(self) -> None:
        super().__init__()
        self.matched = 0
        self.facts: dict[str, Fact | None] = {}
        self.channel_tails: dict[str, Fact | None] = {}  # "via NET/IB/0/GDRDMA" -> its fact
        self.warn_facts: dict[str, Fact] = {}
        self.by_head: dict[str, Process] = {}
        # whole line -> what it does: False (nothing recognised), () (recognised, nothing to do
        # again) or the actions left to run when the same line comes again (see line())
        self.by_line: dict[str, Any] = {}
        self.ops: dict[str, Callable[..., None]] = {
            name[4:]: getattr(self, name) for name in dir(self) if name.startswith("_op_")
        }
        self.cache_from = 0  # line number from which lines are remembered again
        self.cache_start = 0  # line number where the line cache was last emptied
        self.cache_limit = _CACHE_PROBE  # entries at which the line cache is reviewed
        self.cache_changes = 0  # times the line cache was emptied (or switched off)
        self.last_error_line = -1  # PyTorch's "Last error:" with NCCL's text on the next line

    # -- reading ------------------------------------------------------------------------------

    def feed(self, lines: Iterable[str], numbers: Iterable[int] | None = None) -> int:
        """Read every line; returns how many there were.

        A line seen before (every rank prints the same lines, jobs repeat them) costs one dict
        lookup and replays only the actions that still change something; any other goes
        through :meth:`line`. ``numbers`` are the lines' numbers when they are not 1, 2, 3, ...
        """
        get, read = self.by_line.get, self.line
        number = matched = 0
        for number, line in zip(count(1) if numbers is None else numbers, lines):  # noqa: B905
            # while the line cache is off (lines did not repeat), do not even hash the line
            actions = get(line, MISSING) if number >= self.cache_from else MISSING
            if actions is MISSING:
                matched += read(line, number)
            elif actions is not False:
                matched += 1
                for op, proc, msg, fact in actions:
                    op(proc, msg, number, fact)
        self.matched += matched
        return number

    def line(self, line: str, number: int) -> int:
        """Read a line the line cache does not hold (or while it is off); returns 1 when it is
        recognised, else 0.

        A line with one ``NCCL INFO`` message is handled here; anything else (no marker, a
        WARN, several messages, an over-long line) goes through :meth:`_analyse`. While the
        cache is on, the line is remembered with what a repeat of it must run again.
        """
        pos = line.find("NCCL ")
        if (pos < 0 or line[pos + 5 : pos + 10] != "INFO " or len(line) >= MAX_LINE
                or (line.find("NCCL ", pos + 10) >= 0 and find_marker(line, pos + 10) >= 0)):
            return self._analyse(line, number)
        cached = number >= self.cache_from
        if not cached and line.startswith("Chan", pos + 10):
            # most lines of a large job, each with its own ranks: read in place (once the line
            # cache found that lines do not repeat)
            at = line.find("via NET/", pos + 10)
            if at >= 0:
                self.channel(line, pos, at, number)
            return 1
        msg = line[pos + 10 :].strip()
        if "|" in msg or '"' in msg:  # an export's column or quote: rare
            msg = message_end(msg)
        fact = self.facts.get(msg, MISSING)
        if fact is MISSING:
            fact = self._fact(msg)
        result: Any = ()
        if fact is not None:
            head = line[:pos]
            proc = self.by_head.get(head) or self._proc(head)
            op = self.ops[fact[0]]
            if not proc.first_line:
                proc.first_line = number
            op(proc, msg, number, fact)
            if cached:
                result = self._replay(op, proc, msg, fact)
        if cached:
            self._remember(line, number, result)
        return 1

    def _remember(self, line: str, number: int, result: Any) -> None:
        if len(self.by_line) >= self.cache_limit:
            self._cache_full(number)
        self.by_line[line] = result

    def _analyse(self, line: str, number: int) -> bool:
        """What a line not seen before does (the cases :meth:`line` does not handle itself: no
        marker, a WARN, several messages, an over-long line): runs its actions once and
        remembers what a repeat of the line must run again. Returns whether it was
        recognised."""
        cache = True
        if len(line) >= MAX_LINE and line[-1:] != "\n":
            line, cache = line[:MAX_LINE], False  # a block reader read past the rest of it
        pos = line.find("NCCL ")
        if pos >= 0 and line[pos + 5 : pos + 10] not in _TAGS:
            pos = find_marker(line, pos + 5)
        result: Any = self._unmarked(line, number) if pos < 0 else self._messages(line, pos,
                                                                                 number)
        if cache and number >= self.cache_from:
            self._remember(line, number, result)
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
        self.cache_changes += 1

    def _replay(self, op: Callable[..., None], proc: Process, msg: str, fact: Fact) -> Any:
        """What a repeat of a line must run again: nothing for a fact that only sets something
        the first time, the progress mark for one that marks progress, else the fact."""
        if fact[0] not in _ONCE:
            return ((op, proc, msg, fact),)
        if fact[0] in _PROGRESS:
            return ((self._op_progress, proc, msg, fact),)
        return ()

    def _run(self, actions: list[tuple[Any, ...]], number: int) -> Any:
        for op, proc, msg, fact in actions:
            proc.first_line = proc.first_line or number
            op(proc, msg, number, fact)
        return tuple(step for action in actions for step in self._replay(*action))

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

    def tail_fact(self, tail: str) -> Fact | None:
        """The fact of a channel line's ``via NET/...`` text (the same for every rank using that
        device), cached by it."""
        fact = self.channel_tails.get(tail, MISSING)
        if fact is MISSING:
            fact = channel_fact(tail)
            if len(self.channel_tails) >= _MAX_CACHED:
                self.channel_tails.clear()
            self.channel_tails[tail] = fact
        return fact  # type: ignore[no-any-return]

    def channel(self, line: str, pos: int, at: int, number: int) -> None:
        """A ``Channel ... via NET/...`` line whose marker is at ``pos`` and ``via NET/`` at
        ``at``: its fact comes from the text after ``via`` (:meth:`tail_fact`)."""
        fact = self.tail_fact(line[at : at + 120])
        if fact is None:
            return
        _, network, index, _, gdr = fact
        receive = line.find("[send]", pos, at) < 0
        head = line[:pos]
        proc = self.by_head.get(head) or self._proc(head)
        proc.first_line = proc.first_line or number
        self._op_channel(proc, "", number, ("channel", network, index, receive, gdr))

    def _fact(self, msg: str) -> Fact | None:
        if msg[:4] in _CHANNEL_HEADS:
            return channel_fact(msg)  # not cached: every rank prints its own
        fact = info_fact(msg)
        if fact is NOTHING:
            fact = None
        elif fact is None and len(msg) > 8:
            # an INFO line no rule reads: the catalogue knows whether it reports a failure
            match = lookup_message(msg, warning=False)
            if match is not None:
                fact = ("info_failure", kind_of(msg[:MAX_TEXT], match.cls), match)
        if len(self.facts) >= _MAX_CACHED:
            self.facts.clear()
        self.facts[msg] = fact
        return fact

    def _info_action(self, head: str, msg: str) -> tuple[Any, ...] | None:
        fact = self.facts.get(msg, MISSING)
        if fact is MISSING:
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
        """The log, after :meth:`feed` returned ``lines_read``; the parser reads no more lines
        after it."""
        try:
            return log_of(self, lines_read, self.matched)
        finally:
            # The parser refers to itself (its table of bound methods, the actions its line
            # cache replays): left so, all it holds (its caches, every process) would wait for
            # the cycle collector, whose pass over them costs a tenth of reading a large log.
            self.ops.clear()
            self.by_line.clear()

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


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """The cycle collector off while a log is read: the parser makes millions of small objects
    and no cycles, and the collector's passes over them grow with the log (a fifth of the time
    on a log of thousands of processes). Its state is restored after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse_lines(lines: Iterable[str]) -> NcclLog:
    """Parse log lines (see :func:`clusterenv.nccl_log.parse_nccl_log`)."""
    with no_cycle_collection():
        parser = _Parser()
        return parser.finish(parser.feed(lines))
