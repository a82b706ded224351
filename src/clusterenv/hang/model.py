"""What one rank's flight-recorder dump says, reduced to what attribution needs.

A dump holds up to thousands of entries; a hang is decided by the last collective (and the last
point-to-point call) of each process group on each rank. :class:`RankDump` keeps exactly that,
small enough to send across nodes (``hang --collect``): :meth:`RankDump.to_wire` and
:meth:`RankDump.from_wire`, which checks every field of what a peer sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from clusterenv._jsonable import json_fields
from clusterenv._text import clip

__all__ = ["Call", "DumpForm", "GroupTrace", "RankDump", "WireFormatError"]

#: How a dump was written: torch's pickle (``_dump_fr_trace``) or its JSON
#: (``_dump_fr_trace_json``).
DumpForm = Literal["pickle", "json"]

MAX_TEXT = 240
MAX_GROUPS = 64
MAX_SIZES = 8
_MAX_RANKS = 1 << 20


class WireFormatError(ValueError):
    """A received summary has a field of the wrong type or size; the message names it."""


def _field(data: Mapping[str, Any], name: str, kinds: tuple[type, ...], where: str,
           *, optional: bool = True) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise WireFormatError(f"{where}{name}: expected {kinds[0].__name__}, got "
                              f"{type(value).__name__}")
    if isinstance(value, str) and len(value) > 4 * MAX_TEXT:
        raise WireFormatError(f"{where}{name}: longer than {4 * MAX_TEXT} characters")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 1 << 63:
        raise WireFormatError(f"{where}{name}: out of range")
    return value


def _list(data: Mapping[str, Any], name: str, limit: int, where: str) -> list[Any]:
    value = data.get(name) or []
    if not isinstance(value, list) or len(value) > limit:
        raise WireFormatError(f"{where}{name}: expected a list of at most {limit} items")
    return value


@dataclass(frozen=True, slots=True)
class Call:
    """One collective or point-to-point call as one rank's recorder saw it.

    Attributes:
        group: The process group's name, e.g. ``"0"`` (the same on every rank).
        seq: Its sequence number in that group: ``collective_seq_id``, or ``p2p_seq_id`` for
            point-to-point calls, e.g. ``12``.
        p2p: Whether it is a send/recv (numbered apart from collectives).
        op: torch's name for it, e.g. ``"gloo:all_reduce"`` or ``"nccl:all_gather"``.
        state: ``"scheduled"``, ``"started"`` or ``"completed"`` (Gloo records only
            ``"scheduled"``).
        input_sizes: Shapes of the inputs, e.g. ``((1024, 1024),)`` (at most 8 shown).
        dtypes: Input dtypes, e.g. ``("Float",)``.
        where: The first caller outside torch, e.g. ``"train.py:42 in step"``; None in the
            JSON form, which has no stack.
        time_created_ns: When the rank enqueued it (Unix time, ns).
        timeout_ms: The collective's timeout, e.g. ``600000``.
        record_id: Its position in the rank's recorder (higher is later).
    """

    group: str
    seq: int
    p2p: bool
    op: str
    state: str
    input_sizes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    where: str | None = None
    time_created_ns: int | None = None
    timeout_ms: int | None = None
    record_id: int | None = None

    @property
    def kind(self) -> str:
        """``"collective"`` or ``"p2p"``."""
        return "p2p" if self.p2p else "collective"

    @property
    def operation(self) -> str:
        """The operation without the backend, e.g. ``"all_reduce"``."""
        return self.op.split(":", 1)[-1]

    def describe(self) -> str:
        """e.g. ``"all_reduce #12 of group 0 (sizes [[4]] Float, at train.py:42 in step)"``."""
        sizes = ", ".join("[" + ", ".join(map(str, s)) + "]" for s in self.input_sizes)
        details = [f"sizes [{sizes}]" + (f" {'/'.join(self.dtypes)}" if self.dtypes else "")]
        if self.where:
            details.append(f"at {self.where}")
        number = f"p2p #{self.seq}" if self.p2p else f"#{self.seq}"
        return f"{self.operation} {number} of group {self.group} ({', '.join(details)})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``operation``."""
        return json_fields(self, operation=self.operation)

    @classmethod
    def from_wire(cls, data: Any, where: str = "call.") -> Call:
        """Check and convert a received call.

        Raises:
            WireFormatError: Naming the first bad field.
        """
        if not isinstance(data, dict):
            raise WireFormatError(f"{where[:-1]}: expected an object")
        sizes = []
        for shape in _list(data, "input_sizes", MAX_SIZES, where):
            if not isinstance(shape, list) or len(shape) > MAX_SIZES or not all(
                    isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 62
                    for d in shape):
                raise WireFormatError(f"{where}input_sizes: expected lists of sizes")
            sizes.append(tuple(shape))
        dtypes = _list(data, "dtypes", MAX_SIZES, where)
        if not all(isinstance(d, str) and len(d) <= 40 for d in dtypes):
            raise WireFormatError(f"{where}dtypes: expected short strings")
        return cls(
            group=_field(data, "group", (str,), where, optional=False),
            seq=_field(data, "seq", (int,), where, optional=False),
            p2p=_field(data, "p2p", (bool,), where, optional=False),
            op=_field(data, "op", (str,), where, optional=False),
            state=_field(data, "state", (str,), where, optional=False),
            input_sizes=tuple(sizes),
            dtypes=tuple(dtypes),
            where=_field(data, "where", (str,), where),
            time_created_ns=_field(data, "time_created_ns", (int,), where),
            timeout_ms=_field(data, "timeout_ms", (int,), where),
            record_id=_field(data, "record_id", (int,), where),
        )


@dataclass(frozen=True, slots=True)
class GroupTrace:
    """One process group as one rank's dump shows it.

    Attributes:
        name: The group's name, e.g. ``"0"`` (the default group) or ``"1"``.
        desc: torch's description, e.g. ``"default_pg"``; ``""`` when unknown.
        ranks: The group's global ranks from the dump's ``pg_config`` (NCCL dumps), e.g.
            ``(0, 1, 2, 3)``; None when the dump does not say (Gloo dumps of torch 2.13 key
            their ``pg_config`` by ``""``).
        last: The last collective this rank entered in the group; None when none is recorded.
        last_p2p: The last point-to-point call, likewise.
        entries: Recorder entries of this group in the dump, e.g. ``2000``.
        last_completed: ``pg_status.last_completed_collective``: the last collective this
            rank saw finish (NCCL); None when unknown (Gloo says ``-1`` or nothing).
    """

    name: str
    desc: str
    ranks: tuple[int, ...] | None
    last: Call | None
    last_p2p: Call | None
    entries: int
    last_completed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)

    @classmethod
    def from_wire(cls, data: Any, where: str) -> GroupTrace:
        """Check and convert a received group trace.

        Raises:
            WireFormatError: Naming the first bad field.
        """
        if not isinstance(data, dict):
            raise WireFormatError(f"{where[:-1]}: expected an object")
        ranks = data.get("ranks")
        if ranks is not None and (not isinstance(ranks, list) or len(ranks) > _MAX_RANKS
                                  or not all(isinstance(r, int) and not isinstance(r, bool)
                                             and 0 <= r < _MAX_RANKS for r in ranks)):
            raise WireFormatError(f"{where}ranks: expected a list of ranks")
        last, last_p2p = data.get("last"), data.get("last_p2p")
        return cls(
            name=_field(data, "name", (str,), where, optional=False),
            desc=_field(data, "desc", (str,), where) or "",
            ranks=None if ranks is None else tuple(ranks),
            last=None if last is None else Call.from_wire(last, f"{where}last."),
            last_p2p=None if last_p2p is None else Call.from_wire(last_p2p, f"{where}last_p2p."),
            entries=_field(data, "entries", (int,), where) or 0,
            last_completed=_field(data, "last_completed", (int,), where),
        )


@dataclass(frozen=True, slots=True)
class RankDump:
    """What one rank's dump says.

    Attributes:
        rank: The global rank, e.g. ``3`` (from clusterenv's note beside the dump, else the
            file name: torch names a dump ``<prefix><rank>``).
        path: The file, e.g. ``"/root/.cache/clusterenv/hang/…/trace-node-1-rank3"``.
        form: ``"pickle"`` or ``"json"``.
        version: The dump format version torch wrote, e.g. ``"2.10"``.
        groups: Each process group the rank has entries for, by name.
        entries: Entries in the dump, e.g. ``2000``.
        host: The host that wrote it, e.g. ``"node-1"``; None when unknown.
        node_rank: The node's ``NODE_RANK``/``GROUP_RANK`` when recorded, else None.
        world_size: Processes in the job when recorded, e.g. ``16``.
        error: What failed on this rank, as its exception said (clusterenv's dumps only),
            e.g. ``"Timed out waiting 30000ms for recv operation to complete"``.
        failed_in: The ``torch.distributed`` function that raised, e.g. ``"all_reduce"``.
        failed_at: Where the script called it, e.g. ``"/job/train.py:42 in step"``
            (clusterenv's dumps, which carry no stacks of their own).
        reported_by: In ``hang --collect``: the address of the node that sent it.
    """

    rank: int
    path: str
    form: DumpForm
    version: str
    groups: tuple[GroupTrace, ...]
    entries: int
    host: str | None = None
    node_rank: int | None = None
    world_size: int | None = None
    error: str | None = None
    failed_in: str | None = None
    failed_at: str | None = None
    reported_by: str | None = None

    @property
    def backend(self) -> str | None:
        """``"gloo"`` or ``"nccl"`` from the recorded operation names; None when empty."""
        for group in self.groups:
            for call in (group.last, group.last_p2p):
                if call is not None and ":" in call.op:
                    return call.op.split(":", 1)[0]
        return None

    @property
    def last(self) -> Call | None:
        """The most recent call this rank made in any group (highest ``record_id``)."""
        calls = [c for g in self.groups for c in (g.last, g.last_p2p) if c is not None]
        return max(calls, key=lambda c: (c.record_id is not None, c.record_id or 0,
                                         c.time_created_ns or 0), default=None)

    def group(self, name: str) -> GroupTrace | None:
        """The trace of group ``name``, or None."""
        return next((g for g in self.groups if g.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``backend``."""
        return json_fields(self, backend=self.backend)

    def to_wire(self) -> dict[str, Any]:
        """The summary as sent to the primary (``to_dict`` less what is derived)."""
        data = self.to_dict()
        data.pop("backend", None)
        return data

    @classmethod
    def from_wire(cls, data: Any, where: str = "dump.") -> RankDump:
        """Check and convert a received summary.

        Raises:
            WireFormatError: Naming the first bad field, e.g. ``"dump.rank: expected int,
                got str"``.
        """
        if not isinstance(data, dict):
            raise WireFormatError(f"{where[:-1]}: expected an object")
        rank = _field(data, "rank", (int,), where, optional=False)
        if not 0 <= rank < _MAX_RANKS:
            raise WireFormatError(f"{where}rank: {rank} is out of range")
        form = data.get("form")
        if form not in ("pickle", "json"):
            raise WireFormatError(f"{where}form: expected 'pickle' or 'json'")
        groups = tuple(GroupTrace.from_wire(g, f"{where}groups[{i}].")
                       for i, g in enumerate(_list(data, "groups", MAX_GROUPS, where)))
        return cls(
            rank=rank,
            path=clip(_field(data, "path", (str,), where, optional=False), MAX_TEXT),
            form=form,
            version=_field(data, "version", (str,), where) or "",
            groups=groups,
            entries=_field(data, "entries", (int,), where) or 0,
            host=_field(data, "host", (str,), where),
            node_rank=_field(data, "node_rank", (int,), where),
            world_size=_field(data, "world_size", (int,), where),
            error=_field(data, "error", (str,), where),
            failed_in=_field(data, "failed_in", (str,), where),
            failed_at=_field(data, "failed_at", (str,), where),
        )


def ranks_text(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"``."""
    out: list[str] = []
    ordered = sorted(set(ranks))
    start = prev = None
    for rank in ordered:
        if prev is not None and rank == prev + 1:
            prev = rank
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = rank
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(out)
