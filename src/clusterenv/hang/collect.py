"""``clusterenv hang --collect``: every node's dumps meet on the primary, every node prints.

Dumps live on each node's own disk. Run ``clusterenv hang --collect`` on every node at about the
same time, as ``clusterenv preflight`` is run, and with everything preflight uses: the same
rendezvous (the node holding ``PRIMARY_ADDR`` listens on that address only, on
``PRIMARY_PORT + 1`` by default; the others connect over their cluster address and retry until
the timeout), the same handshake (the node's ``OPEN`` with its nonce, the primary's ``HELLO``),
framing, size and time limits (:mod:`clusterenv.preflight.wire`,
:class:`~clusterenv.preflight.Limits`), the same token (``CLUSTERENV_PREFLIGHT_TOKEN``: every
message MACed with the receiver's nonce, the greeting included, and a node with the token sends
nothing to a primary that does not prove it holds it) and the same treatment of hostile peers
(:class:`~clusterenv.preflight.loop.ConnectionLoop`: deadlines, connection budgets, refusals
recorded by address).

Each node sends its dump summaries and launch record (:class:`NodeReport`, at most
``max_message_bytes``); the primary waits for every ``NODE_RANK`` or the timeout, then sends all
of it back (a node that did not report is named as such), and every node runs the same
attribution on the same inputs, so every node prints the same answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from clusterenv._text import clip
from clusterenv._values import format_host_port
from clusterenv.hang.messages import MAX_OBJECTS, Collected, NodeReport, trimmed
from clusterenv.preflight.fingerprint import TOKEN_VARIABLE
from clusterenv.preflight.loop import Conn, ConnectionLoop, host_of
from clusterenv.preflight.node import (
    PreflightError,
    connect_primary,
    trust_greeting,
    verdict_deadline,
)
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
    verify_mac,
)
from clusterenv.sources._base import MAX_NODES

__all__ = ["HangPrimary", "collect_on_node", "serve_hang_primary"]


class HangPrimary(ConnectionLoop):
    """The primary of ``hang --collect``: collect every node's report, answer each.

    Args:
        own: The primary's own report.
        listen_addr: The one address to bind, e.g. ``"10.65.0.2"``.
        port: TCP port; ``0`` lets the kernel choose.
        expected_nodes: ``NUM_NODES``, at most preflight's bound.
        options: Timeout, token and limits (preflight's).

    Raises:
        ValueError: More nodes than preflight accepts.
    """

    def __init__(self, own: NodeReport, *, listen_addr: str, port: int, expected_nodes: int,
                 options: PreflightOptions) -> None:
        if expected_nodes > MAX_NODES:
            raise ValueError(f"expected_nodes={expected_nodes}: at most {MAX_NODES} nodes")
        nodes = max(1, expected_nodes)
        super().__init__(listen_addr=listen_addr, port=port, limits=options.limits,
                         expect={Kind.OPEN, Kind.HANG_REPORT, Kind.REJECT},
                         max_pending=nodes - 1 + options.limits.connection_slack,
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

    def _greet(self, conn: Conn, frame: Frame) -> None:
        """Answer a node's ``OPEN`` (its nonce) with ``HELLO``, MACed over that nonce when
        there is a token, as preflight's primary does."""
        nonce = decode_object(frame.payload).get("nonce")
        if not isinstance(nonce, str) or len(nonce) != 32:
            raise WireError("OPEN message must carry a 32-hex 'nonce'")
        try:
            conn.client_nonce = bytes.fromhex(nonce)
        except ValueError as e:
            raise WireError("OPEN 'nonce' is not hexadecimal") from e
        remaining = round(max(0.0, self._deadline - time.monotonic()), 3)
        hello = {"nonce": conn.nonce.hex(), "auth": self.token is not None, "ring": False,
                 "timeout_s": remaining}
        self._move(conn, "open", time.monotonic() + self.limits.peer_timeout)
        self._send(conn, encode_frame(Kind.HELLO, encode_json(hello), token=self.token,
                                      nonce=conn.client_nonce))

    def _on_frame(self, conn: Conn, frame: Frame) -> None:
        if conn.state == "hello":
            if frame.kind != Kind.OPEN:
                raise WireError(f"unexpected {Kind.NAMES[frame.kind]} message (expected OPEN)")
            self._greet(conn, frame)
            return
        if conn.state != "open":
            raise WireError("more than one message on one connection")
        if frame.kind == Kind.REJECT:  # a node that does not trust this greeting says why
            reason = decode_object(frame.payload).get("reason")
            self._reject(conn, f"the node refused this primary: {clip(str(reason), 200)}",
                         send=False)
            return
        if frame.kind != Kind.HANG_REPORT:
            raise WireError(f"unexpected {Kind.NAMES[frame.kind]} message (expected "
                            "HANG_REPORT)")
        if self.token is not None and not verify_mac(frame, token=self.token, nonce=conn.nonce):
            raise WireError("invalid or missing MAC: this node's CLUSTERENV_PREFLIGHT_TOKEN "
                            "differs from the primary's")
        report = NodeReport.from_wire(decode_object(frame.payload,
                                                    max_objects=MAX_OBJECTS).get("report"))
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
        self._move(conn, "waiting", float("inf"))

    def _on_peer_closed(self, conn: Conn) -> None:
        self._drop(conn)  # its report still counts

    def _deliver(self, collected: Collected) -> None:
        payload = encode_json(collected.to_wire())
        if len(payload) > self.limits.max_verdict_bytes // 4:
            payload = encode_json(trimmed(collected).to_wire())
        deadline = time.monotonic() + self.limits.send_timeout
        for conn, _ in self._reports.values():
            if conn.sock.fileno() < 0:
                continue
            self._move(conn, "closing", deadline)
            self._send(conn, encode_frame(Kind.HANG_VERDICT, payload, token=self.token,
                                          nonce=conn.client_nonce))
        while self._conns and time.monotonic() < deadline:
            self._loop_once(deadline)


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
    token, limits = options.token, options.limits
    greeting = connect_primary(primary_addr, port, deadline=deadline, source_addr=source_addr,
                        limits=limits, say=options.say)
    sock, hello, my_nonce = greeting.sock, greeting.hello, greeting.nonce
    try:
        primary_nonce = trust_greeting(greeting, where=where, port=port, token=token,
                                       limits=limits, unsent="this node's report")
        until, wait_text = verdict_deadline(hello, own_deadline=deadline,
                                             trusted=token is not None, limits=limits,
                                             timeout=options.timeout)
        body = {"report": report.fitted(limits.max_message_bytes - 256).to_wire()}
        sock.settimeout(limits.send_timeout)
        sock.sendall(encode_frame(Kind.HANG_REPORT, encode_json(body), token=token,
                                  nonce=primary_nonce))
        reader = FrameReader(max_payload=limits.max_verdict_bytes,
                             expect={Kind.HANG_VERDICT, Kind.REJECT})
        try:
            frame = read_frame(sock, reader, until)
        except TimeoutError as e:
            raise PreflightError(f"the primary at {where} took this node's report but sent no "
                                 f"answer {wait_text}") from e
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
        return Collected.from_wire(decode_object(frame.payload, max_objects=MAX_OBJECTS))
    except WireError as e:
        raise PreflightError(f"bad message from the primary at {where}: {e}") from e
    except OSError as e:
        raise PreflightError(f"lost the connection to the primary at {where}: "
                             f"{e.strerror or e}") from e
    finally:
        sock.close()
