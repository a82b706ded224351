"""Reading a file in blocks of lines: the lines that need nothing are set apart in bulk.

A file is read a megabyte at a time; its lines are a block. Read one by one
(:meth:`~clusterenv.nccl_log.parse._Parser.feed`), every line costs a trip through the Python
interpreter, ten times what reading it costs; most need nothing but to be counted. A block
finds those with passes that run in C (``map``, ``compress``, ``str.count``) and hands the
others, in order, to the code that reads one line (:meth:`~clusterenv.nccl_log.parse._Parser.line`),
so that the result is the same as reading line by line (a test compares the two):

- While lines repeat (the line cache is on), one dict lookup per line in C finds what each line
  did before: a line that needs nothing again is only counted, the others replay their actions,
  held until thousands are, then run once per distinct line where that is the same as running
  each (a job stuck printing the same warning, trace and channel line again and again).
- While they do not (a job of thousands of processes, each line with its own host, pid and
  ranks), consecutive lines of one process (a row: each starts with the same ``host:pid:tid
  [dev] NCCL INFO ``, proven by the least and the greatest of them) are read together: the
  messages that state nothing (most setup lines) are looked up in C and only counted, and the
  channel lines (``Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA``, most of a
  large job's lines) are counted in bulk on the row's text, after counts of that text prove
  that each is an ordinary channel line read as :meth:`line` reads it (one marker, one ``via
  NET/`` at its end). Any other line is read on its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from itertools import compress, repeat
from operator import itemgetter
from typing import IO, Any

from clusterenv.nccl_log.lines import find_marker
from clusterenv.nccl_log.model import NcclLog
from clusterenv.nccl_log.parse import MAX_LINE, MISSING, _Parser, no_cycle_collection, parse_lines
from clusterenv.nccl_log.state import Process

__all__ = ["BLOCK", "BlockParser", "blocks", "parse_stream"]

#: Characters read at a time from a file; the lines in them are a block (small enough for the
#: processor's cache, and no longer than a line is read).
BLOCK = MAX_LINE
# The longest ``via NET/...`` text a channel line is read by (parse._Parser.channel).
_TAIL = 120
# Consecutive lines of one process from which they are read together.
_ROW = 4
# Lines seen before whose actions are held to be run together, once per distinct line.
_HOLD = 8192


class BlockParser(_Parser):
    """The parser, reading blocks of lines (:meth:`feed_block`)."""

    def __init__(self) -> None:
        super().__init__()
        # the block being read while the line cache is off: its lines, the number of the first;
        # the length of the last row of one process's lines (where the next is looked for)
        self._block: list[str] = []
        self._base = 0
        self._guess = _ROW
        # lines seen before, held to be run once per distinct line (_hold): their text, number
        # and actions; the actions that can be (_bulk), and those among them that mark progress
        self._held_numbers: list[int] = []
        self._held_actions: list[Any] = []
        self._progress_ops = {self._op_progress, self._op_channel, self._op_comm}
        self._bulk_ops = {
            self._op_warn, self._op_notice, self._op_info_failure, self._op_trace,
            self._op_ofi_trouble, self._op_plugin_error, self._op_plugin_rejected,
            *self._progress_ops,
        }

    def finish(self, lines_read: int) -> NcclLog:
        """The log (see :meth:`~clusterenv.nccl_log.parse._Parser.finish`)."""
        self._release()
        try:
            return super().finish(lines_read)
        finally:
            self._bulk_ops.clear()  # bound methods: the parser would refer to itself
            self._progress_ops.clear()

    def feed_block(self, lines: list[str], first: int, *, plain: bool = False) -> None:
        """Read a block of lines (without their newlines) numbered from ``first``, as
        :meth:`feed` would.

        ``plain`` says that no line holds ``|`` or ``"`` (an export's columns and quotes) and
        none is :data:`~clusterenv.nccl_log.parse.MAX_LINE` long: only then are lines set
        apart in bulk while the line cache is off.
        """
        start, end = 0, len(lines)
        while start < end:
            if first + start >= self.cache_from:
                start = self._cached(lines, first, start)
            else:
                self._release()
                stop = min(end, self.cache_from - first)
                if plain:
                    self.matched += self._uncached(lines[start:stop], first + start)
                else:
                    self.feed(lines[start:stop], range(first + start, first + stop))
                start = stop

    # -- while the line cache is on ----------------------------------------------------------

    def _cached(self, lines: list[str], first: int, start: int) -> int:
        """Read ``lines[start:]`` with the line cache on, until the cache is emptied or switched
        off (then a lookup made in advance may be stale); returns where it stopped.

        When every line was seen before, their actions are held (:meth:`_hold`) to be run
        later, once per distinct line; any other block is read line by line, after what is
        held."""
        block = lines[start:] if start else lines
        base = first + start
        # False: nothing recognised; (): recognised, nothing to run again (both false, so that
        # compress() skips them); a tuple of actions. A line not seen before stops the lookups
        # (KeyError): the loop below reads the block.
        try:
            known = list(map(self.by_line.__getitem__, block))
        except KeyError:
            pass
        else:
            self._hold(block, known, list(compress(known, known)), base)
            return start + len(block)
        self._release()
        get = self.by_line.get
        known = list(map(get, block, repeat(MISSING)))
        changes = self.cache_changes
        stop = len(block)
        matched = 0
        for index in compress(range(stop), known):
            actions: Any = known[index]
            number = base + index
            if actions is MISSING:
                actions = get(block[index], MISSING)  # an earlier line of this block, perhaps
                if actions is MISSING:
                    matched += self.line(block[index], number)
                    if self.cache_changes != changes:
                        stop = index + 1
                        break
                    continue
                if actions is False:
                    continue
            matched += 1
            for op, proc, msg, fact in actions:
                op(proc, msg, number, fact)
        self.matched += matched + (known if stop == len(known) else known[:stop]).count(())
        return start + stop

    def _hold(self, block: list[str], known: list[Any], actions: list[Any], base: int) -> None:
        """Hold the lines of ``block`` with actions (``actions``, all of lines seen before)
        until enough are held to be run once per distinct line (:meth:`_release`)."""
        lines = range(base, base + len(block))
        if len(actions) == len(block):  # every line has actions (a job stuck in a loop)
            self.matched += len(actions)
            self._held_numbers += lines
        else:
            self.matched += len(actions) + known.count(())
            self._held_numbers += compress(lines, known)
        if actions:
            self._held_actions += actions
            if len(self._held_actions) >= _HOLD:
                self._release()

    def _release(self) -> None:
        """Run the actions held, in bulk where it pays and is the same (:meth:`_bulk`), else in
        order."""
        numbers, actions = self._held_numbers, self._held_actions
        if not actions:
            return
        self._held_numbers, self._held_actions = [], []
        if not self._bulk(numbers, actions):
            for number, steps in zip(numbers, actions, strict=True):
                for op, proc, msg, fact in steps:
                    op(proc, msg, number, fact)

    def _bulk(self, numbers: list[int], actions: list[Any]) -> bool:
        """Run the ``actions`` of lines seen before (at lines ``numbers``) once per distinct
        line, when lines repeat among them and every action can be; returns False,
        having changed nothing, when they cannot be.

        A line that comes ``n`` times runs its actions once with ``times=n``, at the number of
        its last occurrence: counts add up, a progress mark moves to the latest, what is set
        once stays set. Only the return chain of a trace depends on the order of lines (a
        trace after progress starts a new chain): for a process with a trace among these
        lines, the chain is then worked out from the order of its traces and progress marks
        (:meth:`_chains`). Lines with an action of any other kind are run in order.
        """
        # a line's actions are one tuple, the same object each time it comes: its id stands
        # for the line
        times = Counter(map(id, actions))
        if len(times) * 2 > len(actions):
            return False  # lines repeat too little for this to pay
        at = self._last(actions, len(times))  # where each line comes last
        steps_of = {key: actions[index] for key, index in at.items()}
        safe, trace = self._bulk_ops, self._op_trace
        traced: dict[Process, None] = {}  # with a trace that may start a chain
        for steps in steps_of.values():
            for op, proc, _, fact in steps:
                if op not in safe:
                    return False
                if op == trace and fact[2] != "7":
                    traced[proc] = None
        before = {proc: (proc.chain, proc.trace_line, proc.progress_line) for proc in traced}
        for key, n in times.items():
            number = numbers[at[key]]
            for op, proc, msg, fact in steps_of[key]:
                op(proc, msg, number, fact, n)
        if before:
            self._chains(actions, numbers, steps_of, before)
        return True

    @staticmethod
    def _last(actions: list[Any], distinct: int) -> dict[int, int]:
        """Where each of the ``distinct`` lines among ``actions`` (by the id of its actions)
        comes last: read from the end, where a loop's lines all are, or else from every
        entry."""
        at: dict[int, int] = {}
        for index in range(len(actions) - 1, max(-1, len(actions) - 1 - 4 * distinct), -1):
            at.setdefault(id(actions[index]), index)
            if len(at) == distinct:
                return at
        return dict(zip(map(id, actions), range(len(actions)), strict=True))

    def _chains(self, actions: list[Any], numbers: list[int], steps_of: dict[int, Any],
                before: dict[Process, tuple[str | None, int, int]]) -> None:
        """Set the return chain, last trace and its code of each process of ``before`` (its
        chain, trace line and progress line before these lines were run) as running the lines
        (their ``actions``, at lines ``numbers``; ``steps_of`` by the id of each) in order
        would have.

        :meth:`_op_trace` starts a new chain at a trace that comes after progress, so the chain
        is the first trace after the last progress mark that precedes the last trace, or,
        without such a mark, the first trace when the chain had ended before these lines. The
        lines are read backwards from the last, until each process has its mark."""
        trace, marks, comm = self._op_trace, self._progress_ops, self._op_comm
        events: dict[int, list[tuple[Process, str | None, str | None]]] = {}
        for key, steps in steps_of.items():
            found = []
            traced: set[Process] = set()  # with a trace earlier in this line
            for op, proc, _, fact in steps:
                if proc not in before:
                    continue
                if op == trace:
                    if fact[2] != "7":  # ncclInProgress: no step of a chain
                        found.append((proc, fact[3], fact[2]))
                        traced.add(proc)
                elif op in marks and (op != comm or fact[4]) and proc not in traced:
                    # a mark after a trace of the same line is at that trace's line number:
                    # not after it, so the next trace goes on with the chain
                    found.append((proc, None, None))
            if found:
                events[key] = found[::-1]
        open_ = dict.fromkeys(before)
        last: dict[Process, tuple[int, str | None]] = {}
        first: dict[Process, str] = {}  # the earliest trace read so far, of each process
        backwards = range(len(actions) - 1, -1, -1)
        for at in compress(backwards, map(events.__contains__, map(id, reversed(actions)))):
            for proc, chain, code in events[id(actions[at])]:
                if proc not in open_:
                    continue
                if chain is not None:
                    last.setdefault(proc, (numbers[at], code))
                    first[proc] = chain
                elif proc in last:  # the progress mark before the last trace
                    proc.chain = first[proc]
                    del open_[proc]
            if not open_:
                break
        for proc in open_:
            chain, trace_line, progress_line = before[proc]
            proc.chain = first[proc] if chain is None or progress_line > trace_line else chain
        for proc, (number, code) in last.items():
            proc.trace_line, proc.trace_code = number, code

    # -- while it is off -----------------------------------------------------------------------

    def _uncached(self, block: list[str], base: int) -> int:
        """Read a plain ``block`` (numbered from ``base``) with the line cache off; returns how
        many lines were recognised.

        Consecutive lines of one process (a row: each starts with the same ``host:pid:tid [dev]
        NCCL INFO ``) are read together (:meth:`_row`); any other line on its own
        (:meth:`_alone`). A row is looked for as long as the last one (:meth:`_row_end`)."""
        self._block, self._base = block, base
        matched = index = 0
        count = len(block)
        guess = self._guess
        while index < count:
            line = block[index]
            pos = line.find("NCCL ")
            if (count - index >= _ROW and pos > 0 and line[pos - 1] == " "
                    and line.startswith("INFO ", pos + 5)):
                prefix = line[: pos + 10]  # "host:pid:tid [dev] NCCL INFO "
                if all(map(str.startswith, block[index + 1 : index + _ROW], repeat(prefix))):
                    end = self._row_end(block, index, prefix, guess)
                    if index and end < count:  # a whole row: the next is looked for as long
                        guess = max(_ROW, end - index)
                    matched += self._row(block[index:end], prefix, index)
                    index = end
                    continue
            matched += self._alone(line, index)
            index += 1
        self._guess = guess
        return matched

    @staticmethod
    def _row_end(block: list[str], index: int, prefix: str, guess: int) -> int:
        """Where the lines from ``block[index]`` that start with ``prefix`` end, tried first
        at ``guess`` lines, then at twice as many at a time.

        Lines that start with the same text are next to each other in sorted order: when the
        least and the greatest of some lines start with ``prefix``, all of them do (two passes
        of comparisons in C, each stopping a few characters past the prefix)."""
        count, step = len(block), guess
        end = index
        while end < count:
            rest = block[end : end + step]
            if not (min(rest).startswith(prefix) and max(rest).startswith(prefix)):
                same = list(map(str.startswith, rest, repeat(prefix)))
                return end + same.index(False)
            end += len(rest)
            if end >= count or not block[end].startswith(prefix):
                return end
            step *= 2
        return end

    def _row(self, lines: list[str], prefix: str, index: int) -> int:
        """Read a row: consecutive lines of one process (``block[index:]``, each starting with
        ``prefix``).

        Its channel lines (starting ``prefix + "Chan"``) are most of a large job's lines. When
        they are one run, counts on the row's joined text read it (:meth:`_channel_run`) and
        the lines around it are read together (:meth:`_together`); otherwise each run of
        channel lines and of other lines is read as it comes."""
        chan = prefix + "Chan"
        text = "\n".join(lines)
        first = text.find(chan)
        if first < 0:
            return self._together(lines, prefix, index)
        count = len(lines)
        if (not first or text[first - 1] == "\n") and "via NET/" not in prefix:
            # the first channel line, and the line after the last text of one
            eol = text.find("\n", first)
            start = lines.index(text[first:] if eol < 0 else text[first:eol])
            last = text.rfind(chan)
            stop = count - text.count("\n", last)
            end = text.find("\n", last)
            end = len(text) if end < 0 else end
            # The lines from the first to the last are the channel lines, one run, when each
            # holds one "NCCL ", that of "NCCL INFO Chan" (a second, or the text of one inside
            # another line, would add to the count).
            if (text.count("NCCL ", first, end) == stop - start
                    and text.count("NCCL INFO Chan", first, end) == stop - start):
                matched = self._together(lines[:start], prefix, index) if start else 0
                matched += self._channel_run(text, first, end, lines, prefix, index, start,
                                             stop)
                if stop < count:
                    matched += self._together(lines[stop:], prefix, index + stop)
                return matched
        kinds = bytes(map(str.startswith, lines, repeat(chan)))
        matched = at = 0
        channels = kinds[:1] == b"\x01"
        while at < count:
            end = kinds.find(b"\x00" if channels else b"\x01", at)
            if end < 0:
                end = count
            if channels:
                matched += self._channels(lines[at:end], self._base + index + at)
            else:
                matched += self._together(lines[at:end], prefix, index + at)
            at, channels = end, not channels
        return matched

    def _channel_run(self, text: str, lo: int, hi: int,  # noqa: PLR0917
                     lines: list[str], prefix: str, index: int, start: int, stop: int) -> int:
        """Read the channel lines ``lines[start:stop]`` of a row (``block[index:]``, joined in
        ``text``, the run at ``text[lo:hi]``; none holds a second ``NCCL ``), as :meth:`line`
        reads each: counts of the run's text prove that every ``via NET/`` ends
        its line with the same text and every ``[send]`` comes right before it; otherwise they
        are read by :meth:`_channels`. Returns how many lines were recognised."""
        nets = text.count("via NET/", lo, hi)
        if not nets:
            return stop - start  # through P2P or shared memory: nothing to keep
        at = text.find("via NET/", lo, hi)
        end = text.find("\n", at, hi)
        tail = text[at:hi] if end < 0 else text[at:end]
        sends = text.count("[send] via NET/", lo, hi)
        if (len(tail) > _TAIL
                or text.count(tail + "\n", lo, hi) + text.endswith(tail, lo, hi) != nets
                or text.count("[send]", lo, hi) != sends):
            return self._channels(lines[start:stop], self._base + index + start)
        fact = self.tail_fact(tail)
        if fact is None:
            return stop - start
        base = self._base + index + start
        proc = self.by_head.get(prefix[:-10]) or self._proc(prefix[:-10])
        if not proc.first_line:
            proc.first_line = base + text.count("\n", lo, at)
        # the last line through the network: counted back from the run's last line
        number = base + stop - start - 1 - text.count("\n", text.rfind("via NET/", lo, hi), hi)
        _, network, device, _, gdr = fact
        if nets > sends:
            self.channels(proc, (network, device), True, gdr, nets - sends, number)
        if sends:
            self.channels(proc, (network, device), False, gdr, sends, number)
        return stop - start

    def _alone(self, line: str, index: int) -> int:
        """Read one line (what :meth:`line` does, inline for a line of one INFO message)."""
        number = self._base + index
        pos = line.find("NCCL ")
        if (pos >= 0 and line.startswith("INFO ", pos + 5)
                and not line.startswith("Chan", pos + 10)
                and line.find("NCCL ", pos + 10) < 0):
            msg = line[pos + 10 :].strip()
            fact = self.facts.get(msg, MISSING)
            if fact is MISSING:
                fact = self._fact(msg)
            if fact is None:
                return 1
            head = line[:pos]
            proc = self.by_head.get(head) or self._proc(head)
            if not proc.first_line:
                proc.first_line = number
            self.ops[fact[0]](proc, msg, number, fact)
            return 1
        return self.line(line, number)

    def _together(self, lines: list[str], prefix: str, index: int) -> int:
        """Read consecutive lines of one process (``block[index:]``, each starting with
        ``prefix``, ``host:pid:tid [dev] NCCL INFO ``), as :meth:`line` reads each.

        Their messages are looked up in the cache of facts in C; only those that state something
        are read one by one (and a line with a second marker by :meth:`line`). A message the
        cache holds has no second marker: its line would not have been read so."""
        count = len(lines)
        messages = list(map(itemgetter(slice(len(prefix), None)), lines))
        found: list[Any] = list(map(self.facts.get, messages, repeat(MISSING)))
        matched = 0
        head, ops, facts, base = prefix[:-10], self.ops, self.facts, self._base + index
        proc = None
        for at in compress(range(count), found):
            fact = found[at]
            if fact is MISSING:
                message = messages[at]
                if "NCCL " in message and find_marker(message) >= 0:  # a second marker
                    matched += self.line(lines[at], base + at) - 1
                    continue
                message = messages[at] = message.strip()
                fact = facts.get(message, MISSING)
                if fact is MISSING:
                    fact = self._fact(message)
                if fact is None:
                    continue
            if proc is None:
                proc = self.by_head.get(head) or self._proc(head)
                if not proc.first_line:
                    proc.first_line = base + at
            ops[fact[0]](proc, messages[at], base + at, fact)
        return matched + count

    def _channels(self, run: list[str], base: int) -> int:
        """Read consecutive channel lines (``run``, numbered from ``base``) that no other line
        between them changes anything for; returns how many were recognised.

        Those of one process through one device are counted on their joined text; counts of
        that text prove that each is an ordinary channel line, so that this reads them as
        :meth:`line` would: every line starts with the same ``host:pid:tid [dev] NCCL INFO
        Chan`` and holds no other ``NCCL ``; every ``via NET/`` ends its line with the same
        text; every ``[send]`` comes right before it. Any other run is read line by line.
        """
        count = len(run)
        first = run[0]
        pos = first.find("NCCL ")
        prefix = first[: pos + 14]  # "host:pid:tid [dev] NCCL INFO Chan"
        if pos < 0 or not prefix.endswith("NCCL INFO Chan"):
            return self._each(run, base)
        text = "\n".join(run)
        if text.count("\n" + prefix) != count - 1 or text.count("NCCL ") != count:
            return self._each(run, base)
        nets = text.count("via NET/")
        if not nets:
            return count  # through P2P or shared memory: nothing to keep
        start = text.find("via NET/")
        end = text.find("\n", start)
        tail = text[start:] if end < 0 else text[start:end]
        sends = text.count("[send] via NET/")
        if (start < len(prefix) or len(tail) > _TAIL
                or text.count(tail + "\n") + text.endswith(tail) != nets
                or text.count("[send]") != sends):
            return self._each(run, base)
        fact = self.tail_fact(tail)
        if fact is None:
            return count
        head = first[:pos]
        proc = self.by_head.get(head) or self._proc(head)
        proc.first_line = proc.first_line or base + text.count("\n", 0, start)
        last = base + count - 1 - text.count("\n", text.rfind("via NET/"))
        _, network, index, _, gdr = fact
        if nets > sends:
            self.channels(proc, (network, index), True, gdr, nets - sends, last)
        if sends:
            self.channels(proc, (network, index), False, gdr, sends, last)
        return count

    def _each(self, run: list[str], base: int) -> int:
        read = self.line
        return sum(read(line, base + index) for index, line in enumerate(run))


def blocks(stream: IO[str]) -> Iterator[tuple[list[str], bool]]:
    """The lines of ``stream``, without their newlines, in blocks of about :data:`BLOCK`
    characters, each with whether it is plain (see :meth:`BlockParser.feed_block`); a line
    longer than :data:`~clusterenv.nccl_log.parse.MAX_LINE` is cut there and the rest of it is
    read past, never kept (a file without newlines costs bounded memory)."""
    carry = ""
    skipping = False  # inside a line already cut
    while True:
        chunk = stream.read(BLOCK)
        if not chunk:
            if carry:
                yield [carry], False
            return
        if "\n" not in chunk:  # no line ends here
            if not skipping:
                carry += chunk
                if len(carry) >= MAX_LINE:
                    yield [carry[:MAX_LINE]], False
                    carry, skipping = "", True
            continue
        lines = chunk.split("\n")
        # a block is at most MAX_LINE characters: only its first line, which began in the text
        # before it, can be as long
        plain = not ("|" in chunk or '"' in chunk or "|" in carry or '"' in carry)
        carry, lines[0] = lines.pop(), carry + lines[0]  # the text after the last newline waits
        if skipping:
            del lines[0]  # the rest of the line that was cut
            skipping = False
        if lines:
            yield lines, plain and len(lines[0]) < MAX_LINE


def parse_stream(stream: Any) -> NcclLog:
    """Parse an open text file, block by block, reading at most
    :data:`~clusterenv.nccl_log.parse.MAX_LINE` characters of any line (the rest of a longer
    line is read past, never kept)."""
    if not hasattr(stream, "read"):
        return parse_lines(stream)
    with no_cycle_collection():
        parser = BlockParser()
        read = 0
        for lines, plain in blocks(stream):
            parser.feed_block(lines, read + 1, plain=plain)
            read += len(lines)
        return parser.finish(read)
