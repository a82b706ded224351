"""The optional ring probe: each node opens a TCP connection to the next node in rank order.

A ring proves node-to-node reachability on the cluster network, which the star around the
primary does not (NCCL's rings and trees need every neighbour, not only rank 0). Each node
listens briefly on its own address (:class:`RingListener`); the primary tells each node its
successor; each node runs :func:`probe` and reports the result. Every step has a time limit.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time

from clusterenv.preflight.wire import (
    Frame,
    FrameReader,
    Kind,
    WireError,
    encode_frame,
    encode_json,
)

__all__ = ["ANSWER_TIMEOUT_S", "MAX_OPEN", "PROBE_TIMEOUT_S", "RING_PHASE_S", "RingListener",
           "probe", "read_frame"]

#: Seconds one probe may take, connection and answer together.
PROBE_TIMEOUT_S = 3.0
#: Seconds the primary gives the whole ring phase (the probes run at once).
RING_PHASE_S = 5.0
#: Seconds a connection to a ring listener has to deliver its probe.
ANSWER_TIMEOUT_S = 1.0
#: Connections a ring listener keeps open at once.
MAX_OPEN = 32


def read_frame(sock: socket.socket, reader: FrameReader, until: float) -> Frame:
    """The next frame, or ``TimeoutError`` at ``until``, ``EOFError`` when the peer closes."""
    while (frame := reader.next_frame()) is None:
        remaining = until - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        data = sock.recv(65536)
        if not data:
            raise EOFError
        reader.feed(data)
    return frame


def probe(addr: str, port: int, *, rank: int | None, timeout: float) -> tuple[bool, str]:
    """Open a TCP connection to a node's ring listener and exchange ``PROBE``/``PROBE_ACK``.

    Returns:
        ``(True, "0.4 ms")`` or ``(False, "connection refused")``.
    """
    start = time.monotonic()
    try:
        with socket.create_connection((addr, port), timeout=timeout) as sock:
            sock.sendall(encode_frame(Kind.PROBE, encode_json({"rank": rank})))
            # The primary's listener greets every connection with HELLO before the answer.
            reader = FrameReader(max_payload=4096, expect={Kind.HELLO, Kind.PROBE_ACK})
            while True:
                frame = reader.next_frame()
                if frame is not None and frame.kind == Kind.PROBE_ACK:
                    break
                if frame is None:
                    data = sock.recv(4096)
                    if not data:
                        return False, "closed the connection without answering the probe"
                    reader.feed(data)
    except TimeoutError:
        return False, f"no answer within {timeout:.1f} s"
    except OSError as e:
        return False, e.strerror or str(e)
    except WireError as e:
        return False, f"answered with something else: {e}"
    return True, f"{(time.monotonic() - start) * 1000:.1f} ms"


class RingListener:
    """A short-lived listener that answers ring probes from the previous node.

    Binds ``addr:port``, or ``addr`` with a kernel-chosen port when that port is taken (the
    primary tells the previous node which port). Answers each ``PROBE`` with ``PROBE_ACK`` in a
    background thread until :meth:`close`. Connections are served concurrently, each with a
    deadline of :data:`ANSWER_TIMEOUT_S`; at most :data:`MAX_OPEN` are open at once (the oldest is
    closed to make room), so silent connections cannot keep the real probe from being answered.
    """

    def __init__(self, addr: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self._sock.bind((addr, port))
            except OSError:
                self._sock.bind((addr, 0))
            self._sock.listen(64)
            self._sock.setblocking(False)
        except BaseException:
            self._sock.close()
            raise
        self.addr = addr
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="preflight-ring")
        self._thread.start()

    def _serve(self) -> None:
        open_: dict[socket.socket, tuple[float, FrameReader]] = {}
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ)
            try:
                while not self._stop.is_set():
                    for key, _ in selector.select(0.1):
                        if key.fileobj is self._sock:
                            self._accept(selector, open_)
                        else:
                            self._read(selector, open_, key.fileobj)  # type: ignore[arg-type]
                    now = time.monotonic()
                    for conn in [c for c, (until, _) in open_.items() if until <= now]:
                        self._close(selector, open_, conn)
            finally:
                for conn in list(open_):
                    self._close(selector, open_, conn)

    def _accept(self, selector: selectors.BaseSelector,
                open_: dict[socket.socket, tuple[float, FrameReader]]) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if len(open_) >= MAX_OPEN:
                oldest = min(open_, key=lambda c: open_[c][0])
                self._close(selector, open_, oldest)
            conn.setblocking(False)
            open_[conn] = (time.monotonic() + ANSWER_TIMEOUT_S,
                           FrameReader(max_payload=4096, expect={Kind.PROBE}))
            selector.register(conn, selectors.EVENT_READ)

    @staticmethod
    def _close(selector: selectors.BaseSelector,
               open_: dict[socket.socket, tuple[float, FrameReader]], conn: socket.socket) -> None:
        open_.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        conn.close()

    def _read(self, selector: selectors.BaseSelector,
              open_: dict[socket.socket, tuple[float, FrameReader]], conn: socket.socket) -> None:
        _, reader = open_[conn]
        try:
            data = conn.recv(4096)
            if data:
                reader.feed(data)
                if reader.next_frame() is not None:
                    conn.setblocking(True)
                    conn.settimeout(1.0)
                    conn.sendall(encode_frame(Kind.PROBE_ACK, b"{}"))
                    data = b""
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, WireError):
            data = b""
        if not data:
            self._close(selector, open_, conn)

    def close(self) -> None:
        """Stop answering and close the socket."""
        self._stop.set()
        self._thread.join(2.0)
        self._sock.close()
