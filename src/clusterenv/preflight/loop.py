"""A bounded, single-threaded TCP listener loop: the transport under the preflight primary.

One readiness loop (:mod:`~clusterenv.preflight.poller`) in one thread. Every connection has a
deadline from the moment it is accepted, a frame reader with a payload limit, and a write queue
flushed without blocking. A peer that breaks a rule is sent a ``REJECT`` with the reason (best
effort), closed, and recorded as ``rejected peer ADDR:PORT: reason``; nothing a peer does stops
the loop.

Bookkeeping is constant time per event, however many connections are open: deadlines sit in a
heap (a changed deadline is pushed again, the stale entry skipped when it surfaces), and the
pending connections in two arrival-ordered tables (those that sent nothing, those that sent
part of a message), so that the count, the eviction and the expiry never scan every
connection. A deadline measures the peer, not the primary: it starts when the primary greets
(or accepts), and a connection whose deadline passed while the primary was busy has what it
already sent read before it is judged.

Budgets count only work, never attempts. A connection that has not yet delivered a well-formed
message is *pending*: pending connections have their own cap (``max_pending``) and the short
``peer_timeout``. When a new connection arrives at the cap, the pending connection that has been
silent longest is closed to make room, so idle or junk connections can delay an honest node by
at most its own round trip, never lock it out (an honest node sends its message as soon as it is
greeted, and one that is closed anyway reconnects). The run's total (``max_total``) counts
well-formed messages only, so connect/close bursts cannot exhaust it.

Subclasses speak the protocol through hooks: :meth:`~ConnectionLoop._on_frame` (a complete
frame arrived),
:meth:`~ConnectionLoop._on_peer_closed` and :meth:`~ConnectionLoop._on_timeout` (for states
other than the first message and the final flush).
"""

from __future__ import annotations

import errno
import heapq
import itertools
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from clusterenv._text import clip
from clusterenv._values import format_host_port, parse_ip
from clusterenv.preflight.fingerprint import Fingerprint
from clusterenv.preflight.poller import READ, WRITE, Poller
from clusterenv.preflight.wire import (
    Frame,
    FrameReader,
    Kind,
    Limits,
    WireError,
    encode_frame,
    encode_json,
    new_nonce,
)

__all__ = ["PENDING", "Conn", "ConnectionLoop", "host_of", "peer_text"]

_RECV_BYTES = 65536
_REJECT_FLUSH_S = 1.0
# Seconds the listener rests when the process is out of file descriptors (EMFILE): a closing
# connection frees one; meanwhile the kernel queues new connections.
_FD_PAUSE_S = 0.05
# Connection events handled between two looks at the listener's accept queue.
_ACCEPT_EVERY = 64
# Characters of a refusal reason kept in the verdict (a reason may quote what the peer sent).
_MAX_REASON = 240
#: States of a connection that has not yet delivered its first piece of work: ``"hello"``
#: (nothing yet) and ``"open"`` (greeted, its message still to come).
PENDING = frozenset({"hello", "open"})


@dataclass(eq=False)
class Conn:
    """One accepted connection and what the protocol learned from it.

    ``state`` is ``"hello"`` until the first message arrives and ``"closing"`` while the last
    reply is flushed; the protocol uses others in between (``"open"``, ``"waiting"``,
    ``"ring"``). Connections in a :data:`PENDING` state have the short ``peer_timeout``.
    """

    sock: socket.socket
    peer: str
    nonce: bytes
    deadline: float
    reader: FrameReader
    state: str = "hello"
    client_nonce: bytes = b""
    fingerprint: Fingerprint | None = None
    ring_addr: tuple[str, int] | None = None
    ring_result: dict[str, Any] | None = None
    pending: list[memoryview] = field(default_factory=list)
    events: int = 0
    reading: bool = True


def peer_text(address: Any) -> str:
    """``"10.65.0.3:41000"`` for a socket address; IPv6 in brackets, IPv4-mapped unwrapped."""
    host, port = str(address[0]), address[1]
    if ":" not in host:  # an IPv4 address as the kernel writes it: already canonical
        return f"{host}:{port}"
    ip = parse_ip(host)
    if ip is not None and ip.version == 4:  # IPv4, or IPv4-mapped IPv6 unwrapped
        host = str(ip)
    return format_host_port(host, port)


def host_of(peer: str) -> str:
    """The address part of :func:`peer_text`, e.g. ``"10.65.0.3"`` or ``"::1"``."""
    host = peer.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") else host


class ConnectionLoop:
    """Listener, connections and their deadlines; see the module docstring.

    Args:
        listen_addr: The one address to bind, e.g. ``"10.65.0.2"``.
        port: TCP port; ``0`` lets the kernel choose.
        limits: Size, time and connection bounds.
        max_pending: Connections open at once that have not delivered a well-formed message,
            e.g. ``NUM_NODES - 1 + 16``.
        max_total: Well-formed messages accepted in all, e.g. ``4 * NUM_NODES + 64``.
        expect: Frame kinds a connection may send.
    """

    def __init__(
        self,
        *,
        listen_addr: str,
        port: int,
        limits: Limits,
        max_pending: int,
        max_total: int,
        expect: set[int],
    ) -> None:
        self.listen_addr = listen_addr
        self.limits = limits
        self._requested_port = port
        self._max_pending = max(1, max_pending)
        self._max_total = max_total
        self._expect = frozenset(expect)
        self._listener: socket.socket | None = None
        self._poller: Poller | None = None
        self._conns: dict[int, Conn] = {}
        # Pending connections (no well-formed message yet), oldest first: those silent so far,
        # and those that sent part of a message. Eviction takes the first of the silent ones.
        self._silent: dict[int, Conn] = {}
        self._partial: dict[int, Conn] = {}
        self._deadlines: list[tuple[float, int, Conn]] = []
        self._sequence = itertools.count()
        self._paused_until = 0.0
        self._work = 0  # well-formed messages accepted (the run's budget)
        self.rejected: list[str] = []
        self.rejected_total = 0

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (after :meth:`bind`), e.g. ``29501``."""
        if self._listener is None:
            return self._requested_port
        return int(self._listener.getsockname()[1])

    @property
    def endpoint(self) -> str:
        """``"10.65.0.2:29501"`` (IPv6 in brackets)."""
        return format_host_port(self.listen_addr, self.port)

    def bind(self) -> int:
        """Bind and listen on ``listen_addr:port`` only; return the port.

        Raises:
            OSError: The address is not on this host, or the port is taken.
        """
        if self._listener is not None:
            return self.port
        family = socket.AF_INET6 if ":" in self.listen_addr else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.listen_addr, self._requested_port))
            sock.listen(socket.SOMAXCONN)  # a burst waits in the kernel, never drops a SYN
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._listener = sock
        return self.port

    def close(self) -> None:
        """Close the listener and every connection; idempotent."""
        for conn in list(self._conns.values()):
            self._drop(conn)
        self._stop_listening()
        if self._poller is not None:
            self._poller.close()
            self._poller = None

    def _start(self) -> None:
        self.bind()
        self._poller = Poller()
        self._poller.register(self._listening().fileno(), READ, None)

    def _listening(self) -> socket.socket:
        if self._listener is None:
            raise RuntimeError("the preflight listener is closed")
        return self._listener

    def _running(self) -> Poller:
        if self._poller is None:
            raise RuntimeError("the preflight server is not running")
        return self._poller

    def _stop_listening(self) -> None:
        if self._listener is not None:
            if self._poller is not None:
                self._poller.unregister(self._listener.fileno())
            self._listener.close()
            self._listener = None

    # -- hooks --------------------------------------------------------------------------------

    def _on_frame(self, conn: Conn, frame: Frame) -> None:
        """A complete frame arrived; raise :class:`WireError` to refuse the peer."""
        raise WireError(f"unexpected {Kind.NAMES.get(frame.kind, frame.kind)} message")

    def _on_peer_closed(self, conn: Conn) -> None:
        """The peer closed a connection past its first message."""
        self._drop(conn)

    def _on_timeout(self, conn: Conn) -> None:
        """A deadline passed in a protocol state of the subclass."""
        self._drop(conn)

    def _on_rejected(self, conn: Conn) -> None:
        """``conn`` is being refused (forget what it sent)."""

    # -- the loop -----------------------------------------------------------------------------

    def _move(self, conn: Conn, state: str, deadline: float) -> None:
        """Put ``conn`` in ``state`` with ``deadline`` (``inf``: none): the one place where
        both change, so that the pending tables and the deadline heap stay exact."""
        key = id(conn)
        if state in PENDING:
            if key not in self._partial:
                target = self._partial if conn.reader.received else self._silent
                target.setdefault(key, conn)
        else:
            self._silent.pop(key, None)
            self._partial.pop(key, None)
        conn.state = state
        conn.deadline = deadline
        if deadline != float("inf"):
            heapq.heappush(self._deadlines, (deadline, next(self._sequence), conn))

    def _next_deadline(self) -> float:
        heap = self._deadlines
        while heap:
            deadline, _, conn = heap[0]
            if conn.deadline == deadline and id(conn) in self._conns:
                return deadline
            heapq.heappop(heap)  # stale: the deadline changed, or the connection is gone
        return float("inf")

    def _loop_once(self, until: float) -> None:
        """Handle what is ready, waiting at most until ``until`` or the next deadline."""
        now = time.monotonic()
        wake = min(until, self._next_deadline())
        if self._paused_until > now:
            wake = min(wake, self._paused_until)
        elif self._paused_until:
            self._paused_until = 0.0
            if self._listener is not None:
                self._running().register(self._listener.fileno(), READ, None)
        conn: Conn | None
        for handled, (conn, ready) in enumerate(self._running().poll(max(0.0, wake - now))):
            if conn is None or (handled % _ACCEPT_EVERY == 0 and self._listener is not None
                                and not self._paused_until):
                # The listener first, and again every few events: when thousands of nodes
                # connect at once, a full accept queue makes the kernel drop their handshakes,
                # which they repeat only after 1, 3, 7 s.
                self._accept()
                if conn is None:
                    continue
            mask = ready & conn.events  # an error or hang-up wakes only what was asked for
            if mask & READ and conn.sock.fileno() >= 0:
                self._on_readable(conn)
            if mask & WRITE and conn.sock.fileno() >= 0:
                self._flush(conn)
        now = time.monotonic()
        while self._next_deadline() <= now:
            self._expire(heapq.heappop(self._deadlines)[2])

    def _accept(self) -> None:
        listener, poller = self._listening(), self._running()
        while True:
            try:
                sock, address = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    self._out_of_files(listener)
                return  # ECONNABORTED and friends: the peer is gone already
            peer = peer_text(address)
            if self._pending() >= self._max_pending:
                self._evict_pending()
            sock.setblocking(False)
            conn = Conn(
                sock=sock, peer=peer, nonce=new_nonce(), deadline=float("inf"),
                reader=FrameReader(max_payload=self.limits.max_message_bytes,
                                   expect=self._expect),
            )
            self._conns[id(conn)] = conn
            self._move(conn, "hello", time.monotonic() + self.limits.peer_timeout)
            poller.register(sock.fileno(), READ, conn)
            conn.events = READ

    def _out_of_files(self, listener: socket.socket) -> None:
        """No file descriptor for a new connection: rest the listener briefly (it would be
        readable at once again, a busy loop) and say why once."""
        if not self._paused_until:
            self._running().unregister(listener.fileno())
        self._paused_until = time.monotonic() + _FD_PAUSE_S
        if not getattr(self, "_said_fds", False):
            self._said_fds = True
            import resource  # noqa: PLC0415  # only on this rare path

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            self._record("(listener)", f"this process ran out of file descriptors (soft limit "
                         f"{soft}): raise it above NUM_NODES + 64 (`ulimit -n`) on the primary")

    def _pending(self) -> int:
        return len(self._silent) + len(self._partial)

    def _evict_pending(self) -> None:
        """Close the pending connection silent for longest (the oldest among those that sent
        nothing, else the oldest) to make room for a new one."""
        table = self._silent or self._partial
        if not table:
            return
        victim = next(iter(table.values()))
        self._record(victim.peer, f"too many connections at once that sent no message; closed "
                     f"the longest-silent one ({self._sent(victim)})")
        self._on_rejected(victim)
        self._drop(victim)

    def _count_work(self, conn: Conn) -> bool:
        """Count one well-formed message against the run's budget; False (and the peer
        refused) when the budget is spent."""
        if self._work >= self._max_total:
            self._reject(conn, f"too many messages in this run (the budget is {self._max_total})")
            return False
        self._work += 1
        return True

    def _on_readable(self, conn: Conn) -> bool:
        """Read once; whether anything was there (data or the peer's close)."""
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            self._reject(conn, f"connection error: {e.strerror or e}", send=False)
            return True
        if conn.state == "closing":  # the reply is being flushed; anything more is ignored
            if not data:  # the peer shut its side: stop watching for reads (no busy loop)
                conn.reading = False
                self._flush(conn)
            return True
        if not data:
            if conn.state in PENDING:
                self._reject(conn, f"closed the connection ({self._sent(conn)})", send=False)
            else:
                self._on_peer_closed(conn)
            return True
        if id(conn) in self._silent:  # its first bytes: no longer among the silent ones
            self._partial[id(conn)] = self._silent.pop(id(conn))
        try:
            conn.reader.feed(data)
            frame = conn.reader.next_frame()
            if frame is not None:
                if conn.reader.buffered:
                    raise WireError("more than one message on one connection")
                self._on_frame(conn, frame)
        except WireError as e:
            self._reject(conn, str(e))
        return True

    @staticmethod
    def _sent(conn: Conn) -> str:
        received = conn.reader.received
        return "sent nothing" if not received else f"sent only {received} bytes"

    def _expire(self, conn: Conn) -> None:
        if conn.state in PENDING:
            # Its deadline may have passed while this loop was busy with others: what the peer
            # already sent is read before it is judged.
            # Only a whole message counts: a trickle of bytes does not buy more time.
            before = conn.state
            while id(conn) in self._conns and conn.state == before and self._on_readable(conn):
                pass
            if id(conn) not in self._conns or conn.state != before:
                return  # it answered in time (or left): its new deadline stands
            self._reject(conn, f"{self._sent(conn)} within {self.limits.peer_timeout:.1f} s")
        elif conn.state == "closing":
            self._drop(conn)
        else:
            self._on_timeout(conn)

    def _send(self, conn: Conn, data: bytes) -> None:
        if not conn.pending:  # the usual case: it all goes out at once, nothing to queue
            try:
                sent = conn.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._drop(conn)
                return
            if sent == len(data):
                if conn.state == "closing":
                    self._drop(conn)
                return
            conn.pending.append(memoryview(data)[sent:])
        else:
            conn.pending.append(memoryview(data))
        self._flush(conn)

    def _flush(self, conn: Conn) -> None:
        while conn.pending:
            chunk = conn.pending[0]
            try:
                sent = conn.sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                conn.pending.clear()
                self._drop(conn)
                return
            if sent < len(chunk):
                conn.pending[0] = chunk[sent:]
                break
            conn.pending.pop(0)
        if not conn.pending and conn.state == "closing":
            self._drop(conn)
            return
        wanted = (READ if conn.reading else 0) | (WRITE if conn.pending else 0)
        if wanted and wanted != conn.events and self._poller is not None \
                and conn.sock.fileno() >= 0:
            self._poller.modify(conn.sock.fileno(), wanted)
            conn.events = wanted

    def _record(self, peer: str, reason: str) -> None:
        self.rejected_total += 1
        if len(self.rejected) < self.limits.max_recorded_rejections:
            self.rejected.append(f"rejected peer {peer}: {clip(reason, _MAX_REASON)}")

    def _reject(self, conn: Conn, reason: str, *, send: bool = True, record: bool = True) -> None:
        """Refuse ``conn``: record why, tell the peer (best effort), close."""
        if record:
            self._record(conn.peer, reason)
        self._on_rejected(conn)
        if not send:
            self._drop(conn)
            return
        conn.pending.clear()
        self._move(conn, "closing", time.monotonic() + _REJECT_FLUSH_S)
        self._send(conn, encode_frame(Kind.REJECT, encode_json({"reason": clip(reason,
                                                                               _MAX_REASON)})))

    def _drop(self, conn: Conn) -> None:
        self._conns.pop(id(conn), None)
        self._silent.pop(id(conn), None)
        self._partial.pop(id(conn), None)
        if self._poller is not None and conn.sock.fileno() >= 0:
            self._poller.forget(conn.sock.fileno())
        conn.sock.close()
