"""``clusterenv hang --collect``: every node's dumps meet on the primary, every node prints.

Dumps live on each node's own disk. Run ``clusterenv hang --collect`` on every node at about the
same time, as ``clusterenv preflight`` is run, and with everything preflight uses: the same
rendezvous (the node holding ``PRIMARY_ADDR`` listens on that address only, on
``PRIMARY_PORT + 1`` by default; the others connect over their cluster address and retry until
the timeout), the same framing, size and time limits (:mod:`clusterenv.preflight.wire`,
:class:`~clusterenv.preflight.Limits`), the same token (``CLUSTERENV_PREFLIGHT_TOKEN``: every
message MACed with the receiver's nonce) and the same treatment of hostile peers
(:class:`~clusterenv.preflight.loop.ConnectionLoop`: greeting deadlines, connection budgets,
refusals recorded by address).

Each node sends its dump summaries and launch record (:class:`NodeReport`, at most
``max_message_bytes``); the primary waits for every ``NODE_RANK`` or the timeout, then sends all
of it back (a node that did not report is named as such), and every node runs the same
attribution on the same inputs, so every node prints the same answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from clusterenv._text import clip
from clusterenv._values import format_host_port
from clusterenv.hang.attribute import HangReport, attribute
from clusterenv.hang.model import MAX_TEXT, RankDump, WireFormatError
from clusterenv.hang.record import LaunchRecord, RecordError, parse_launch_record
from clusterenv.preflight.fingerprint import TOKEN_VARIABLE
from clusterenv.preflight.loop import Conn, ConnectionLoop, host_of
from clusterenv.preflight.node import PreflightError, _connect
from clusterenv.preflight.options import PreflightOptions
from clusterenv.preflight.ring import read_frame
from clusterenv.preflight.wire import (
    Frame,
    FrameReader,
    Kind,
    WireError,
    decode_object,
    encode_frame,
    encode_json,
    new_nonce,
    verify_mac,
)

__all__ = ["Collected", "HangPrimary", "NodeReport", "collect_on_node", "serve_hang_primary"]

_MAX_DUMPS = 1024
_MAX_NOTES = 64
_MARGIN_S = 15.0


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


class HangPrimary(ConnectionLoop):
    """The primary of ``hang --collect``: collect every node's report, answer each.

    Args:
        own: The primary's own report.
        listen_addr: The one address to bind, e.g. ``"10.65.0.2"``.
        port: TCP port; ``0`` lets the kernel choose.
        expected_nodes: ``NUM_NODES``.
        options: Timeout, token and limits (preflight's).
    """

    def __init__(self, own: NodeReport, *, listen_addr: str, port: int, expected_nodes: int,
                 options: PreflightOptions) -> None:
        nodes = max(1, expected_nodes)
        super().__init__(listen_addr=listen_addr, port=port, limits=options.limits,
                         expect={Kind.HANG_REPORT}, max_pending=nodes - 1 +
                         options.limits.connection_slack,
                         max_total=options.limits.max_connections * nodes + 64)
        self.own = own
        self.expected_nodes = nodes
        self.options = options
        self.token = options.token or None
        self._reports: dict[int, tuple[Conn, NodeReport]] = {}
        self._deadline = float("inf")

    def serve(self) -> Collected:
        """Collect, answer every node, close; the collection is returned.

        Raises:
            OSError: When the address cannot be bound.
        """
        start = time.monotonic()
        try:
            self._start()
            self._deadline = start + self.options.timeout
            wanted = set(range(self.expected_nodes)) - {self.own.node_rank}
            while time.monotonic() < self._deadline and not wanted <= {
                    r.node_rank for _, r in self._reports.values()}:
                self._loop_once(self._deadline)
            self._stop_listening()
            collected = self._collected(time.monotonic() - start)
            self._deliver(collected)
            return collected
        finally:
            self.close()

    def _collected(self, elapsed: float) -> Collected:
        own = replace(self.own, dumps=tuple(replace(d, reported_by=self.listen_addr)
                                            for d in self.own.dumps))
        reports = [own]
        addresses = {} if own.node_rank is None else {own.node_rank: self.listen_addr}
        for conn, report in self._reports.values():
            addr = host_of(conn.peer)
            reports.append(replace(report, dumps=tuple(replace(d, reported_by=addr)
                                                       for d in report.dumps)))
            if report.node_rank is not None:
                addresses.setdefault(report.node_rank, addr)
        rejected = tuple(self.rejected) + ((f"and {self.rejected_total - len(self.rejected)} "
                                            "more rejected peers",)
                                           if self.rejected_total > len(self.rejected) else ())
        return Collected(tuple(reports), addresses, self.expected_nodes, rejected,
                         round(elapsed, 3))

    def _greet(self, conn: Conn) -> None:
        remaining = round(max(0.0, self._deadline - time.monotonic()), 3)
        hello = {"nonce": conn.nonce.hex(), "auth": self.token is not None, "ring": False,
                 "timeout_s": remaining}
        self._send(conn, encode_frame(Kind.HELLO, encode_json(hello)))

    def _on_frame(self, conn: Conn, frame: Frame) -> None:
        if conn.state != "hello":
            raise WireError("more than one message on one connection")
        if self.token is not None and not verify_mac(frame, token=self.token, nonce=conn.nonce):
            raise WireError("invalid or missing MAC: this node's CLUSTERENV_PREFLIGHT_TOKEN "
                            "differs from the primary's")
        body = decode_object(frame.payload)
        nonce = body.get("nonce")
        if not isinstance(nonce, str) or len(nonce) != 32:
            raise WireError("hang report must carry a 32-hex 'nonce'")
        try:
            conn.client_nonce = bytes.fromhex(nonce)
        except ValueError as e:
            raise WireError("hang report 'nonce' is not hexadecimal") from e
        report = NodeReport.from_wire(body.get("report"))
        if not self._count_work(conn):
            return
        if report.node_rank is not None and report.node_rank == self.own.node_rank:
            raise WireError(f"node rank {report.node_rank} is the primary's own")
        key = report.node_rank if report.node_rank is not None else -1 - len(self._reports)
        if key in self._reports:
            earlier = self._reports[key][0]
            if host_of(earlier.peer) != host_of(conn.peer):
                raise WireError(f"node rank {key} already reported from {earlier.peer}")
            self._drop(earlier)  # the same node reconnected: its new report replaces the old
        self._reports[key] = (conn, report)
        conn.state = "waiting"
        conn.deadline = float("inf")

    def _on_peer_closed(self, conn: Conn) -> None:
        self._drop(conn)  # its report still counts

    def _deliver(self, collected: Collected) -> None:
        payload = encode_json(collected.to_wire())
        if len(payload) > self.limits.max_verdict_bytes // 4:
            payload = encode_json(_trimmed(collected).to_wire())
        deadline = time.monotonic() + self.limits.send_timeout
        for conn, _ in self._reports.values():
            if conn.sock.fileno() < 0:
                continue
            conn.state = "closing"
            conn.deadline = deadline
            self._send(conn, encode_frame(Kind.HANG_VERDICT, payload, token=self.token,
                                          nonce=conn.client_nonce))
        while self._conns and time.monotonic() < deadline:
            self._loop_once(deadline)


def _trimmed(collected: Collected) -> Collected:
    """Every dump reduced to its default group, without stacks: what a node needs to name the
    ranks that stopped in a job too big to send whole."""
    return replace(collected, reports=tuple(
        replace(r, dumps=tuple(_default_only(_plain(d)) for d in r.dumps),
                notes=(*r.notes[:4], "summaries trimmed to fit the message limit"))
        for r in collected.reports))


def serve_hang_primary(own: NodeReport, *, listen_addr: str, port: int, expected_nodes: int,
                       options: PreflightOptions,
                       on_listening: Callable[[int], None] | None = None) -> Collected:
    """Run the primary once: bind, collect, answer, close.

    Raises:
        OSError: When the address cannot be bound.
    """
    primary = HangPrimary(own, listen_addr=listen_addr, port=port,
                          expected_nodes=expected_nodes, options=options)
    try:
        primary.bind()
        if on_listening is not None:
            on_listening(primary.port)
        return primary.serve()
    finally:
        primary.close()


def collect_on_node(report: NodeReport, *, primary_addr: str, port: int,
                    options: PreflightOptions, source_addr: str | None = None) -> Collected:
    """Send this node's report to the primary and return what it collected.

    Raises:
        PreflightError: The primary never answered, refused this node, or answered with
            something that is not valid (the message says which and what to check).
    """
    where = format_host_port(primary_addr, port)
    deadline = time.monotonic() + options.timeout
    sock, hello = _connect(primary_addr, port, deadline=deadline, source_addr=source_addr,
                           limits=options.limits)
    token = options.token
    try:
        nonce_hex, auth = hello.get("nonce"), hello.get("auth")
        if not isinstance(nonce_hex, str) or len(nonce_hex) != 32 or not isinstance(auth, bool):
            raise PreflightError(f"the primary at {where} sent a malformed greeting")
        try:
            primary_nonce = bytes.fromhex(nonce_hex)
        except ValueError as e:
            raise PreflightError(f"the primary at {where} sent a malformed greeting") from e
        if token is not None and not auth:
            raise PreflightError(f"the primary at {where} does not use {TOKEN_VARIABLE}, but "
                                 "this node has it set: set the same token on every node (or "
                                 "on none); nothing was sent")
        announced = hello.get("timeout_s")
        wait = float(announced) if isinstance(announced, (int, float)) else options.timeout
        until = time.monotonic() + min(max(wait, 0.0) + _MARGIN_S, 3600.0)
        my_nonce = new_nonce()
        body = {"nonce": my_nonce.hex(),
                "report": report.fitted(options.limits.max_message_bytes - 256).to_wire()}
        sock.settimeout(options.limits.send_timeout)
        sock.sendall(encode_frame(Kind.HANG_REPORT, encode_json(body), token=token,
                                  nonce=primary_nonce))
        reader = FrameReader(max_payload=options.limits.max_verdict_bytes,
                             expect={Kind.HANG_VERDICT, Kind.REJECT})
        try:
            frame = read_frame(sock, reader, until)
        except TimeoutError as e:
            raise PreflightError(f"the primary at {where} took this node's report but sent no "
                                 f"answer in {wait + _MARGIN_S:.0f} s") from e
        except EOFError as e:
            raise PreflightError(f"the primary at {where} closed the connection without an "
                                 "answer; its own output says why") from e
        if frame.kind == Kind.REJECT:
            reason = decode_object(frame.payload).get("reason", "no reason given")
            raise PreflightError(f"the primary at {where} refused this node: "
                                 f"{clip(str(reason), 300)}")
        if token is not None and not verify_mac(frame, token=token, nonce=my_nonce):
            raise PreflightError(f"the answer from {where} is not authenticated with this "
                                 f"node's {TOKEN_VARIABLE}: set the same token on every node")
        return Collected.from_wire(decode_object(frame.payload))
    except WireError as e:
        raise PreflightError(f"bad message from the primary at {where}: {e}") from e
    except OSError as e:
        raise PreflightError(f"lost the connection to the primary at {where}: "
                             f"{e.strerror or e}") from e
    finally:
        sock.close()


def local_only(reports: Sequence[NodeReport]) -> HangReport:
    """Attribution from reports read on this node alone (no collection)."""
    dumps = [d for r in reports for d in r.dumps]
    records = [r.record for r in reports if r.record is not None]
    notes = [n for r in reports for n in r.notes]
    return attribute(dumps, records, notes=notes)
