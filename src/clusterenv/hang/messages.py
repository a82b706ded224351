"""The messages of ``clusterenv hang --collect``: a node's report and what the primary sends back.

Both are checked field by field on receipt (a peer is untrusted), and both fit preflight's
message limits: a node trims its report (:meth:`NodeReport.fitted`) and the primary its answer
(:func:`trimmed`) rather than sending more than the receiver accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from clusterenv._text import clip
from clusterenv.hang.attribute import attribute
from clusterenv.hang.model import MAX_TEXT, RankDump, WireFormatError
from clusterenv.hang.record import LaunchRecord, RecordError, parse_launch_record
from clusterenv.hang.report import HangReport
from clusterenv.preflight.wire import WireError, encode_json

__all__ = ["MAX_OBJECTS", "Collected", "NodeReport", "trimmed"]

_MAX_DUMPS = 1024
_MAX_NOTES = 64
#: JSON objects a received message may hold (decoding stops beyond): a node's report and the
#: answer of a collection within the verdict's byte limit stay far below it, while megabytes of
#: ``{}`` would otherwise become millions of dictionaries.
MAX_OBJECTS = 1_000_000


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What one node sends the primary.

    Attributes:
        node_rank: Its ``NODE_RANK``, e.g. ``1``; None when unknown.
        host: Its host name, e.g. ``"node-1"``.
        dumps: Its dump summaries.
        record: Its launch record, when ``clusterenv launch`` left one.
        notes: Files it skipped, each naming the file.
        layout: ``(NUM_NODES, NUM_TRAINERS)`` of its cluster contract, e.g. ``(2, 8)``.
    """

    node_rank: int | None
    host: str | None
    dumps: tuple[RankDump, ...] = ()
    record: LaunchRecord | None = None
    notes: tuple[str, ...] = ()
    layout: tuple[int, int] | None = None

    def to_wire(self) -> dict[str, Any]:
        """The JSON object sent."""
        return {"node_rank": self.node_rank, "host": self.host,
                "dumps": [d.to_wire() for d in self.dumps],
                "record": None if self.record is None else self.record.to_dict(),
                "notes": list(self.notes),
                "layout": None if self.layout is None else list(self.layout)}

    @classmethod
    def from_wire(cls, data: Any) -> NodeReport:
        """Check and convert a received report.

        Raises:
            WireError: Naming the first bad field.
        """
        if not isinstance(data, dict):
            raise WireError("hang report must be an object")
        node_rank, host = data.get("node_rank"), data.get("host")
        if node_rank is not None and (not isinstance(node_rank, int) or
                                      isinstance(node_rank, bool) or not 0 <= node_rank < 1 << 20):
            raise WireError("hang report field 'node_rank' must be a rank or null")
        if host is not None and (not isinstance(host, str) or len(host) > 255):
            raise WireError("hang report field 'host' must be a short string or null")
        dumps, notes = data.get("dumps") or [], data.get("notes") or []
        if not isinstance(dumps, list) or len(dumps) > _MAX_DUMPS:
            raise WireError(f"hang report field 'dumps' must be a list of at most {_MAX_DUMPS}")
        if not isinstance(notes, list) or len(notes) > _MAX_NOTES or not all(
                isinstance(n, str) and len(n) <= 4 * MAX_TEXT for n in notes):
            raise WireError(f"hang report field 'notes' must be at most {_MAX_NOTES} strings")
        layout = data.get("layout")
        if layout is not None and (not isinstance(layout, list) or len(layout) != 2 or not all(
                isinstance(n, int) and not isinstance(n, bool) and 1 <= n < 1 << 20
                for n in layout)):
            raise WireError("hang report field 'layout' must be [nodes, processes per node]")
        record = data.get("record")
        try:
            parsed = tuple(RankDump.from_wire(d, f"dumps[{i}].") for i, d in enumerate(dumps))
            launch = None if record is None else parse_launch_record(record)
        except (WireFormatError, RecordError) as e:
            raise WireError(f"hang report: {e}") from e
        if launch is not None and node_rank is not None and launch.node_rank != node_rank:
            raise WireError(f"hang report of node {node_rank} carries the launch record of "
                            f"node {launch.node_rank}")
        return cls(node_rank, host, parsed, launch, tuple(notes),
                   None if layout is None else (layout[0], layout[1]))

    def fitted(self, limit: int) -> NodeReport:
        """This report, trimmed until it encodes in at most ``limit`` bytes: notes first,
        then the stacks and sizes of calls, then every group but the default one, then
        dumps (a note says so)."""

        def size(report: NodeReport) -> int:
            return len(encode_json(report.to_wire()))

        if size(self) <= limit:
            return self
        note = ("summary trimmed to fit the message limit",)
        steps: list[Callable[[NodeReport], NodeReport]] = [
            lambda r: replace(r, notes=tuple(clip(n, 200) for n in r.notes[:4])),
            lambda r: replace(r, dumps=tuple(_plain(d) for d in r.dumps)),
            lambda r: replace(r, dumps=tuple(_default_only(d) for d in r.dumps)),
            lambda r: replace(r, notes=(), record=r.record and replace(r.record, doctor=())),
        ]
        report = self
        for step in steps:
            report = step(report)
            trimmed = replace(report, notes=(*report.notes, *note))
            if size(trimmed) <= limit:
                return trimmed
        dumps = list(trimmed.dumps)
        while dumps and size(replace(trimmed, dumps=tuple(dumps))) > limit:
            dumps.pop()
        return replace(trimmed, dumps=tuple(dumps))


def _plain(dump: RankDump) -> RankDump:
    groups = tuple(replace(g, last=g.last and replace(g.last, where=None, input_sizes=()),
                           last_p2p=g.last_p2p and replace(g.last_p2p, where=None,
                                                           input_sizes=()))
                   for g in dump.groups)
    return replace(dump, groups=groups, error=dump.error and clip(dump.error, 120))


def _default_only(dump: RankDump) -> RankDump:
    return replace(dump, groups=tuple(g for g in dump.groups if g.desc == "default_pg"
                                      or g.name == "0"))


@dataclass(frozen=True, slots=True)
class Collected:
    """What the primary gathered, as it sends it to every node.

    Attributes:
        reports: The node reports, the primary's first, each dump's ``reported_by`` set to the
            address its node connected from.
        addresses: Node rank -> the address it connected from.
        expected_nodes: ``NUM_NODES``.
        rejected: Peers refused, by address and reason.
        elapsed_s: Seconds the primary waited.
    """

    reports: tuple[NodeReport, ...]
    addresses: dict[int, str]
    expected_nodes: int
    rejected: tuple[str, ...] = ()
    elapsed_s: float = 0.0

    def report(self) -> HangReport:
        """The attribution every node prints."""
        dumps: dict[int, RankDump] = {}
        notes: list[str] = []
        records = []
        for node in self.reports:
            if node.record is not None:
                records.append(node.record)
            notes += [f"node {node.node_rank}: {n}" for n in node.notes]
            for sent in node.dumps:
                # The node a dump arrived from is where it ran, unless the rank's own note
                # beside the dump says otherwise.
                dump = replace(sent, node_rank=sent.node_rank if sent.node_rank is not None
                               else node.node_rank, host=sent.host or node.host)
                if dump.rank in dumps:
                    notes.append(f"rank {dump.rank}: reported by two nodes "
                                 f"({dumps[dump.rank].reported_by} and {dump.reported_by}); "
                                 "the first is used")
                    continue
                dumps[dump.rank] = dump
        reported = {rank: rank in self.addresses for rank in range(self.expected_nodes)}
        silent = [r for r, ok in reported.items() if not ok]
        if silent:
            notes.append(f"node(s) {', '.join(map(str, silent))} did not report within the "
                         f"time limit ({self.elapsed_s:.0f} s): their dumps were not read; "
                         "a node that cannot reach the primary over the cluster network is "
                         "the first suspect")
        notes += list(self.rejected)
        layout = next((r.layout for r in self.reports if r.layout is not None), None)
        return attribute(list(dumps.values()), records, notes=notes, reported=reported,
                         layout=layout)

    def to_wire(self) -> dict[str, Any]:
        """The JSON object sent to every node."""
        return {"reports": [r.to_wire() for r in self.reports],
                "addresses": {str(k): v for k, v in self.addresses.items()},
                "expected_nodes": self.expected_nodes, "rejected": list(self.rejected),
                "elapsed_s": self.elapsed_s}

    @classmethod
    def from_wire(cls, data: Any) -> Collected:
        """Check and convert what the primary sent.

        Raises:
            WireError: Naming the first bad field.
        """
        if not isinstance(data, dict):
            raise WireError("hang verdict must be an object")
        reports, addresses = data.get("reports"), data.get("addresses")
        expected, elapsed = data.get("expected_nodes"), data.get("elapsed_s")
        rejected = data.get("rejected") or []
        if not isinstance(reports, list) or len(reports) > 1 << 16:
            raise WireError("hang verdict field 'reports' must be a list")
        if not isinstance(addresses, dict) or not all(
                isinstance(k, str) and k.isdigit() and len(k) < 8 and isinstance(v, str)
                and len(v) < 64 for k, v in addresses.items()):
            raise WireError("hang verdict field 'addresses' must map node ranks to addresses")
        if not isinstance(expected, int) or isinstance(expected, bool) or \
                not 1 <= expected < 1 << 20:
            raise WireError("hang verdict field 'expected_nodes' must be a node count")
        if not isinstance(rejected, list) or not all(isinstance(r, str) and len(r) < 512
                                                     for r in rejected[:64]):
            raise WireError("hang verdict field 'rejected' must be a list of strings")
        elapsed_s = float(elapsed) if isinstance(elapsed, (int, float)) and not isinstance(
            elapsed, bool) else 0.0
        parsed = []
        for report in reports:
            node = NodeReport.from_wire(report)
            # The addresses come from the primary, which saw them; each dump names its sender.
            dumps = report.get("dumps") or []
            parsed.append(replace(node, dumps=tuple(
                replace(d, reported_by=_text(raw.get("reported_by")))
                for d, raw in zip(node.dumps, dumps, strict=True))))
        return cls(tuple(parsed), {int(k): v for k, v in addresses.items()}, expected,
                   tuple(rejected[:64]), elapsed_s)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) < 64 else None


def trimmed(collected: Collected) -> Collected:
    """Every dump reduced to its default group, without stacks: what a node needs to name the
    ranks that stopped in a job too big to send whole."""
    return replace(collected, reports=tuple(
        replace(r, dumps=tuple(_default_only(_plain(d)) for d in r.dumps),
                notes=(*r.notes[:4], "summaries trimmed to fit the message limit"))
        for r in collected.reports))
