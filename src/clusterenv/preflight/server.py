"""The primary's side of preflight: collect fingerprints, compare, answer every node.

Phases, all in one thread on one :class:`~clusterenv.preflight.loop.ConnectionLoop`:

1. *collect*: answer each connection's ``OPEN`` (the node's nonce) with ``HELLO`` (a fresh
   nonce, whether a token is required, the seconds left; MACed over the node's nonce when there
   is a token), read one fingerprint per connection, until every rank
   ``0..NUM_NODES-1`` has reported, or ``NUM_NODES`` fingerprints arrived and :data:`GRACE_S`
   passed (a duplicated rank then costs a second, not the whole timeout), or the deadline;
2. *ring* (optional): tell each node its successor in rank order, collect the probe results;
3. *deliver*: send the verdict to every node (MACed with each node's nonce when there is a
   token), then close everything.
"""

from __future__ import annotations

import bisect
import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from clusterenv.preflight.compare import compare, missing_spans, spans_text
from clusterenv.preflight.fingerprint import Fingerprint
from clusterenv.preflight.fit import fit_verdict
from clusterenv.preflight.loop import PENDING, Conn, ConnectionLoop, host_of
from clusterenv.preflight.options import PreflightOptions
from clusterenv.preflight.ring import PROBE_TIMEOUT_S, RING_PHASE_S, probe
from clusterenv.preflight.verdict import (
    TABLE_LIMIT,
    NodeRef,
    NodeSummary,
    RingHop,
    Verdict,
)
from clusterenv.preflight.wire import (
    Frame,
    Kind,
    WireError,
    decode_object,
    encode_frame,
    encode_json,
    verify_mac,
)
from clusterenv.sources._base import MAX_NODES

__all__ = ["GRACE_S", "PrimaryServer", "serve_primary"]

#: Seconds the primary waits for stragglers once NUM_NODES fingerprints arrived but some rank is
#: still missing (a duplicate rank took its place).
GRACE_S = 1.0
_REPORT_S = 0.25


def _address_order(addr: str) -> tuple[int, int, str]:
    """(IP version, the address as a number, "") for an address, ``(9, 0, addr)`` for anything
    else. The C library's parser first (a sort key per node: ``ipaddress`` costs ten times as
    much), ``ipaddress`` for what it does not read (an IPv6 zone)."""
    for family, version in ((socket.AF_INET, 4), (socket.AF_INET6, 6)):
        try:
            return (version, int.from_bytes(socket.inet_pton(family, addr), "big"), "")
        except (OSError, ValueError):
            continue
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return (9, 0, addr)
    return (ip.version, int(ip), "")


def _node_order(addr: str, rank: int | None) -> tuple[object, ...]:
    """Sort key: rank (unknown last), then address in numeric order (10.65.0.3 before .10)."""
    return (rank is None, rank or 0, _address_order(addr))


def _peer_gone(conn: Conn) -> bool:
    """Whether the peer of an open connection has closed it (a pending EOF or reset)."""
    try:
        return conn.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


class PrimaryServer(ConnectionLoop):
    """The primary: listener, collection, comparison and answers (see the module docstring).

    Args:
        own: The primary's own fingerprint (entry 0 of the verdict).
        listen_addr: The one address to bind, e.g. ``"10.65.0.2"`` (never a wildcard in
            production; tests and benchmarks pass ``"127.0.0.1"``).
        port: TCP port, e.g. ``29501``; ``0`` lets the kernel choose (see :attr:`port`).
        expected_nodes: ``NUM_NODES``, e.g. ``4``.
        options: ``timeout`` (seconds to wait for every node, from :meth:`serve`), ``token``
            (fingerprints without a valid MAC are refused), ``ring`` (ask the nodes to probe
            their successor in rank order) and ``limits``.

    Example::

        with PrimaryServer(fp, listen_addr="127.0.0.1", port=0, expected_nodes=3,
                           options=PreflightOptions(timeout=10)) as server:
            start_nodes(server.port)
            verdict = server.serve()
    """

    def __init__(
        self,
        own: Fingerprint,
        *,
        listen_addr: str,
        port: int,
        expected_nodes: int,
        options: PreflightOptions,
    ) -> None:
        if expected_nodes > MAX_NODES:
            raise ValueError(f"expected_nodes={expected_nodes}: at most {MAX_NODES} nodes")
        nodes = max(1, expected_nodes)
        ring, limits = options.ring, options.limits
        expect = {Kind.OPEN, Kind.FINGERPRINT, Kind.PROBE, Kind.REJECT,
                  *((Kind.RING_RESULT,) if ring else ())}
        super().__init__(
            listen_addr=listen_addr, port=port, limits=limits, expect=expect,
            max_pending=nodes - 1 + limits.connection_slack,
            max_total=limits.max_connections * nodes + 64,
        )
        self.own = own
        self.expected_nodes = nodes
        self.options = options
        self.timeout = options.timeout
        self.token = options.token or None
        self.ring = ring
        # Bookkeeping in constant time per fingerprint: the accepted connections (in arrival
        # order), how many fingerprints claim each rank, and how many of the ranks
        # 0..NUM_NODES-1 have reported (the primary's own included).
        self._accepted: dict[int, Conn] = {}
        self._by_rank: dict[int | None, int] = {}
        self._by_peer: dict[tuple[str, int | None], list[Conn]] = {}
        self._covered = 1 if self._expected(own.rank) else 0
        self._in_range = 0  # fingerprints whose rank is one of 0..NUM_NODES-1
        self._reported_at = float("-inf")
        self._in_ring: dict[int, Conn] = {}  # nodes asked for a probe that have not answered
        self._collecting = True
        self._deadline = float("inf")

    def __enter__(self) -> PrimaryServer:
        self.bind()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def serve(self) -> Verdict:
        """Run all phases and return the verdict sent to every node; always closes everything.

        Raises:
            OSError: When the address cannot be bound.
        """
        start = time.monotonic()
        try:
            self._start()
            self._deadline = start + self.timeout
            self._collect(self._deadline)
            ring = self._ring_phase() if self.ring else ()
            # A quarter of what a node accepts: every node receives it, and the limit holds
            # however many nodes report whatever they report.
            verdict = fit_verdict(self._verdict(start, ring), self.limits.max_verdict_bytes // 4,
                                  lambda v: len(encode_json(v.to_wire())))
            self._deliver(verdict)
            return verdict
        finally:
            self.close()

    def _expected(self, rank: int | None) -> bool:
        return rank is not None and 0 <= rank < self.expected_nodes

    def _add(self, conn: Conn, fingerprint: Fingerprint) -> None:
        conn.fingerprint = fingerprint
        self._accepted[id(conn)] = conn
        rank = fingerprint.rank
        self._by_rank[rank] = self._by_rank.get(rank, 0) + 1
        self._in_range += self._expected(rank)
        if self._by_rank[rank] == 1 and self._expected(rank) and rank != self.own.rank:
            self._covered += 1
        self._by_peer.setdefault((host_of(conn.peer), rank), []).append(conn)

    def _remove(self, conn: Conn) -> None:
        if self._accepted.pop(id(conn), None) is None or conn.fingerprint is None:
            return
        rank = conn.fingerprint.rank
        self._by_rank[rank] -= 1
        self._in_range -= self._expected(rank)
        if not self._by_rank[rank]:
            del self._by_rank[rank]
            if self._expected(rank) and rank != self.own.rank:
                self._covered -= 1
        same = self._by_peer.get((host_of(conn.peer), rank), [])
        if conn in same:
            same.remove(conn)

    def _report(self, deadline: float) -> None:
        """Say which ranks are awaited (at most every quarter second: the text is built from
        the reported ranks, and a terminal need not be redrawn per node)."""
        now = time.monotonic()
        if self.options.progress is None or now < self._reported_at + _REPORT_S:
            return
        self._reported_at = now
        reported = [r for r in self._by_rank if self._expected(r)]
        if self._expected(self.own.rank):
            reported.append(self.own.rank)
        gaps = missing_spans((r for r in reported if r is not None), self.expected_nodes)
        self.options.say(f"waiting for {spans_text(gaps, limit=8)} ({self._covered} of "
                         f"{self.expected_nodes} reported, {max(0.0, deadline - now):.0f} s left)")

    def _collect(self, deadline: float) -> None:
        full_since: float | None = None
        while time.monotonic() < deadline:
            if self._covered >= self.expected_nodes:  # every rank 0..NUM_NODES-1 reported
                break
            self._report(deadline)
            # NUM_NODES fingerprints of this cluster's ranks (a duplicate took a rank's place):
            # a short grace, not the whole timeout. Out-of-range ranks are not this cluster's
            # nodes and never shorten the wait for the missing ones.
            if 1 + self._in_range >= self.expected_nodes:
                full_since = full_since or time.monotonic()
                if time.monotonic() - full_since >= GRACE_S:
                    break
            until = deadline if full_since is None else min(deadline, full_since + GRACE_S)
            self._loop_once(until)
        self._collecting = False
        for conn in [c for c in self._conns.values() if c.state in PENDING]:
            self._reject(conn, "the primary's deadline passed before this node's fingerprint "
                         "arrived", record=False)
        if not self.ring:
            self._stop_listening()  # late nodes now get "connection refused" at once

    # -- the protocol ---------------------------------------------------------------------------

    def _greet(self, conn: Conn, frame: Frame) -> None:
        """Answer a node's ``OPEN`` (its nonce) with ``HELLO``, MACed over that nonce when
        there is a token: a node with the token trusts the announced deadline only then."""
        nonce = decode_object(frame.payload).get("nonce")
        if not isinstance(nonce, str) or len(nonce) != 32:
            raise WireError("OPEN message must carry a 32-hex 'nonce'")
        try:
            conn.client_nonce = bytes.fromhex(nonce)
        except ValueError as e:
            raise WireError("OPEN 'nonce' is not hexadecimal") from e
        # A node with the token waits for the verdict as long as this says (plus a margin),
        # however short its own --timeout: the primary may have started later.
        remaining = round(max(0.0, self._deadline - time.monotonic()), 3)
        hello = {"nonce": conn.nonce.hex(), "auth": self.token is not None, "ring": self.ring,
                 "timeout_s": remaining}
        # The fingerprint is due within peer_timeout of this greeting, however long the
        # primary took to get here.
        self._move(conn, "open", time.monotonic() + self.limits.peer_timeout)
        self._send(conn, encode_frame(Kind.HELLO, encode_json(hello), token=self.token,
                                      nonce=conn.client_nonce))

    def _on_frame(self, conn: Conn, frame: Frame) -> None:
        if conn.state == "hello":
            if frame.kind == Kind.PROBE:
                self._move(conn, "closing", time.monotonic() + self.limits.send_timeout)
                self._send(conn, encode_frame(Kind.PROBE_ACK, b"{}"))
                return
            if frame.kind != Kind.OPEN:
                raise WireError(f"unexpected {Kind.NAMES[frame.kind]} message (expected OPEN)")
            self._greet(conn, frame)
            return
        if conn.state not in ("open", "ring"):
            raise WireError("more than one message on one connection")
        if conn.state == "open" and frame.kind == Kind.REJECT:
            # A node that does not trust this greeting (another token) says why, so that the
            # verdict names the node and the reason, not only a missing rank.
            reason = decode_object(frame.payload).get("reason")
            self._reject(conn, f"the node refused this primary: {reason}"
                         if isinstance(reason, str) else "the node refused this primary",
                         send=False)
            return
        wanted = Kind.FINGERPRINT if conn.state == "open" else Kind.RING_RESULT
        if frame.kind != wanted:
            raise WireError(f"unexpected {Kind.NAMES[frame.kind]} message (expected "
                            f"{Kind.NAMES[wanted]})")
        self._check_mac(frame, conn.nonce)
        body = decode_object(frame.payload)
        if conn.state == "ring":
            ok, detail = body.get("ok"), body.get("detail", "")
            if not isinstance(ok, bool) or not isinstance(detail, str) or len(detail) > 512:
                raise WireError("malformed ring probe result")
            conn.ring_result = {"ok": ok, "detail": detail}
            self._move(conn, "waiting", float("inf"))
            self._in_ring.pop(id(conn), None)
            return
        if not self._collecting:
            raise WireError("too late: the primary had stopped collecting fingerprints")
        self._accept_fingerprint(conn, body)

    def _check_mac(self, frame: Frame, nonce: bytes) -> None:
        if self.token is None or verify_mac(frame, token=self.token, nonce=nonce):
            return
        if frame.mac:
            raise WireError("invalid MAC: this node's CLUSTERENV_PREFLIGHT_TOKEN differs from "
                            "the primary's")
        raise WireError("no MAC, but the primary requires CLUSTERENV_PREFLIGHT_TOKEN on every "
                        "node: set the same token there")

    def _accept_fingerprint(self, conn: Conn, body: dict[str, Any]) -> None:
        fp_data = body.get("fingerprint")
        if not isinstance(fp_data, dict):
            raise WireError("fingerprint message must carry a 'fingerprint' object")
        fingerprint = Fingerprint.from_wire(fp_data)
        # A rank that is still missing is always taken, budget or not: peers that fill the
        # budget with made-up ranks cannot keep a real node's fingerprint out.
        rank = fingerprint.rank
        missing = self._expected(rank) and rank != self.own.rank and rank not in self._by_rank
        if missing:
            self._work += 1
        elif not self._count_work(conn):
            return
        ring = body.get("ring")
        if isinstance(ring, dict):
            port = ring.get("port")
            if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
                # Only the address this node connected from, never one it names: the ring
                # probes cluster nodes, not whatever address a peer chooses.
                conn.ring_addr = (host_of(conn.peer), port)
        self._forget_closed(conn, fingerprint)
        # Now it waits for the verdict, as long as collection runs.
        self._move(conn, "waiting", float("inf"))
        self._add(conn, fingerprint)

    def _forget_closed(self, conn: Conn, fingerprint: Fingerprint) -> None:
        """A node that reconnects (its first connection was closed before the verdict) replaces
        its earlier fingerprint instead of counting twice."""
        for old in list(self._by_peer.get((host_of(conn.peer), fingerprint.rank), ())):
            if old.sock.fileno() < 0 or _peer_gone(old):
                self._remove(old)
                self._drop(old)

    def _on_peer_closed(self, conn: Conn) -> None:
        if conn.state == "ring":
            conn.ring_result = {"ok": False, "detail": "the node left before reporting"}
        self._drop(conn)  # a node that gave up waiting: its fingerprint still counts

    def _on_timeout(self, conn: Conn) -> None:
        if conn.state == "ring":
            conn.ring_result = {"ok": False, "detail": "no probe result in time"}
            self._move(conn, "waiting", float("inf"))
            self._in_ring.pop(id(conn), None)
        else:
            self._drop(conn)

    def _drop(self, conn: Conn) -> None:
        self._in_ring.pop(id(conn), None)
        super()._drop(conn)

    def _on_rejected(self, conn: Conn) -> None:
        self._remove(conn)

    # -- ring, verdict, delivery ----------------------------------------------------------------

    def _ring_phase(self) -> tuple[RingHop, ...]:
        members: list[tuple[NodeRef, tuple[str, int] | None, Conn | None]] = [
            (NodeRef(self.own.rank, self.listen_addr, self.own.hostname),
             (self.listen_addr, self.port), None)
        ]
        for member in self._accepted.values():
            if (fp := member.fingerprint) is not None:
                members.append((NodeRef(fp.rank, host_of(member.peer), fp.hostname),
                                member.ring_addr, member))
        members.sort(key=lambda m: _node_order(m[0].addr or "", m[0].rank))
        if len(members) < 2:
            return ()
        own_result: dict[str, Any] = {}
        own_thread: threading.Thread | None = None

        def own_probe(addr: str, port: int) -> None:
            ok, detail = probe(addr, port, rank=self.own.rank, timeout=PROBE_TIMEOUT_S)
            own_result.update(ok=ok, detail=detail)

        deadline = time.monotonic() + RING_PHASE_S
        for index, (_, _, node) in enumerate(members):
            target_ref, target_addr, _ = members[(index + 1) % len(members)]
            if node is None:
                if target_addr is not None:
                    own_thread = threading.Thread(target=own_probe, args=target_addr,
                                                  daemon=True)
                    own_thread.start()
                continue
            if target_addr is None:
                node.ring_result = {"ok": False, "detail": f"{target_ref} has no ring listener"}
                continue
            message = encode_json({"target": {"addr": target_addr[0], "port": target_addr[1],
                                              "rank": target_ref.rank}})
            self._move(node, "ring", deadline)
            self._in_ring[id(node)] = node
            self._send(node, encode_frame(Kind.RING, message, token=self.token,
                                          nonce=node.client_nonce))
        while self._in_ring and time.monotonic() < deadline:
            self._loop_once(deadline)
        if own_thread is not None:
            own_thread.join(max(0.0, deadline - time.monotonic()) + PROBE_TIMEOUT_S)
        hops = []
        for index, (ref, _, node) in enumerate(members):
            target = members[(index + 1) % len(members)][0]
            result = own_result if node is None else (node.ring_result or {})
            ok = bool(result.get("ok"))
            detail = str(result.get("detail", "no probe result"))
            hops.append(RingHop(ref, target, ok, detail))
        return tuple(hops)

    def _verdict(self, start: float, ring: tuple[RingHop, ...]) -> Verdict:
        # The primary first, then rank and address order: the verdict does not depend on
        # which node happened to arrive first.
        def order_of(entry: tuple[str, Fingerprint]) -> tuple[Any, ...]:
            return _node_order(entry[0], entry[1].rank)

        # Each key computed once (an address parse per node): the others in order, and the
        # primary's row where its own key falls for the table.
        keyed = sorted(((order_of(e), e) for e in ((host_of(c.peer), c.fingerprint)
                                                   for c in self._accepted.values()
                                                   if c.fingerprint is not None)),
                       key=lambda item: item[0])
        others = [entry for _, entry in keyed]
        entries = [(self.listen_addr, self.own), *others]
        problems = compare(
            entries, expected_nodes=self.expected_nodes, waited_s=time.monotonic() - start,
            rejected=self.rejected, rejected_total=self.rejected_total, ring=ring,
        )
        at = bisect.bisect_right([key for key, _ in keyed], order_of(entries[0]))
        order = [*others[:at], entries[0], *others[at:]]
        hops = ring
        if len(entries) > TABLE_LIMIT:
            named = {(n.rank, n.addr) for p in problems for n in p.nodes}
            order = [e for e in order if (e[1].rank, e[0]) in named]
            hops = tuple(h for h in ring if not h.ok)
        return Verdict(
            expected_nodes=self.expected_nodes, primary=self.endpoint,
            nodes=tuple(NodeSummary.of(addr, fp) for addr, fp in order), problems=tuple(problems),
            rejected=tuple(self.rejected), rejected_total=self.rejected_total, ring=hops,
            elapsed_s=round(time.monotonic() - start, 3), reported=len(entries),
            ring_probed=len(ring),
        )

    def _deliver(self, verdict: Verdict) -> None:
        self._stop_listening()
        payload = encode_json(verdict.to_wire())
        plain = encode_frame(Kind.VERDICT, payload) if self.token is None else b""
        deadline = time.monotonic() + self.limits.send_timeout
        for conn in list(self._accepted.values()):
            if conn.sock.fileno() < 0:
                continue
            frame = plain or encode_frame(Kind.VERDICT, payload, token=self.token,
                                          nonce=conn.client_nonce)
            self._move(conn, "closing", deadline)
            self._send(conn, frame)
        while self._conns and time.monotonic() < deadline:
            self._loop_once(deadline)


def serve_primary(
    own: Fingerprint,
    *,
    listen_addr: str,
    port: int,
    expected_nodes: int,
    options: PreflightOptions,
    on_listening: Callable[[int], None] | None = None,
) -> Verdict:
    """Run the primary once: bind ``listen_addr:port``, collect, compare, answer, close.

    ``on_listening`` is called with the bound port once the listener accepts connections (tests
    and benchmarks pass ``port=0`` and learn the port there).

    Raises:
        OSError: When the address cannot be bound (not on this host, port in use).
    """
    with PrimaryServer(own, listen_addr=listen_addr, port=port, expected_nodes=expected_nodes,
                       options=options) as server:
        if on_listening is not None:
            on_listening(server.port)
        return server.serve()
