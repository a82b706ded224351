"""How long preflight takes as the cluster grows: a real primary, N simulated nodes, loopback.

The primary (:func:`clusterenv.preflight.serve_primary`, the same code ``clusterenv preflight``
runs) listens on 127.0.0.1 in a child process of its own, so it does not share an interpreter
lock with the clients. The N nodes are non-blocking sockets in one selector loop of this
process, each speaking the real wire format (``OPEN``, ``HELLO``, a full fingerprint of a
typical 8-GPU RoCE node, the verdict). Every node's verdict is compared byte for byte and one is
decoded into a ``Verdict`` (each real node decodes its own, in parallel). Time is measured from
the moment the nodes start connecting to the moment the last one holds its verdict.

Run::

    python benchmarks/bench_preflight.py      # 8 to 16,384 nodes, 3 runs each (minutes)
    python benchmarks/bench_preflight.py 512 4096 --runs 1

Goals (exit 1 when missed): 16,384 nodes all holding a verdict in under 8 s (512 in under 2 s),
and the cost per node flat from 512 nodes up: the primary's CPU
time per node at each size within 1.5x of that at 512 (or at the smallest size run from 512
up), in the same run. CPU time, not wall time, is the cost: other work on a shared machine
stretches the wall time of both sides, not the CPU the primary spends per node.
Quadratic bookkeeping on the primary showed as 1.5x at 4096, and as REJECT frames to honest
nodes at 16,384. Payloads are encoded before the clock starts (each real node encodes its own).
Each process raises its soft limit of open files to its hard limit: 16,384 nodes need as many
sockets on each side.
"""

from __future__ import annotations

import argparse
import errno
import itertools
import multiprocessing
import os
import resource
import selectors
import socket
import statistics
import sys
import time
from multiprocessing.connection import Connection

from clusterenv.preflight import Fingerprint, PreflightOptions, RdmaSummary, Verdict, serve_primary
from clusterenv.preflight.wire import (
    DEFAULT_LIMITS,
    FrameReader,
    Kind,
    decode_object,
    encode_frame,
    encode_json,
    new_nonce,
)

SIZES = (8, 32, 128, 512, 4096, 16384)
#: Wall-clock goals by size: every node holding its verdict within these seconds.
WALL_GOALS = {512: 2.0, 16384: 8.0}
FLAT_FROM = 512
FLAT_RATIO = 1.5


def typical_fingerprint(rank: int, nodes: int, addr: str = "127.0.0.1") -> Fingerprint:
    """A fingerprint the size of a real 8-GPU RoCE node's (about 1.2 KB of JSON), from a node
    at ``addr``."""
    env = {
        "NCCL_SOCKET_IFNAME": "=ens1",
        "GLOO_SOCKET_IFNAME": "ens1",
        "TP_SOCKET_IFNAME": "ens1",
        "NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}:1" for i in range(8)),
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_DEBUG": "WARN",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCH_NCCL_BLOCKING_WAIT": "0",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    }
    return Fingerprint(
        rank=rank, num_nodes=nodes, num_trainers=8, node_addr=addr,
        primary_addr="127.0.0.1", primary_port=29500, source="runpod", hostname=f"node-{rank}",
        interface="ens1", interface_reason=f"ens1 holds NODE_ADDR {addr}", mtu=9000,
        rdma=RdmaSummary("roce", tuple(f"mlx5_{i}" for i in range(8)), 8, (400.0,) * 8),
        gpus=8, env=env, versions={"torch": "2.13.0", "nccl": "2.27.3", "python": "3.11.9"},
        clusterenv="0.1.0",
    )


def node_address(rank: int) -> str:
    """The loopback address node ``rank`` connects from, e.g. ``"127.1.0.5"``: every node has
    an address of its own, as on a real cluster. From one address, 16,384 connections to one
    port would exhaust the client host's ephemeral ports (past about 14,000 the kernel's search
    for a free one scans every port in use, seconds of the clients' CPU), which no real
    cluster has. Linux routes all of 127.0.0.0/8 to the loopback interface."""
    return f"127.{1 + (rank >> 16)}.{(rank >> 8) & 255}.{rank & 255}"


def _own_addresses() -> bool:
    """Whether this host lets a socket bind to a loopback address other than 127.0.0.1 (Linux
    does; elsewhere every node connects from 127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((node_address(1), 0))
        except OSError:
            return False
    return True


def _more_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _primary(nodes: int, conn: Connection) -> None:
    _more_files()
    own = typical_fingerprint(0, nodes)
    before = resource.getrusage(resource.RUSAGE_SELF)
    verdict = serve_primary(own, listen_addr="127.0.0.1", port=0, expected_nodes=nodes,
                            options=PreflightOptions(timeout=300.0), on_listening=conn.send)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    conn.send((verdict.elapsed_s, verdict.reported, len(verdict.problems),
               verdict.rejected_total, cpu))


class _Node:
    """One simulated node: a non-blocking socket walking the real exchange."""

    __slots__ = ("address", "frames", "message", "opening", "sock", "state", "verdict")

    def __init__(self, address: str | None, opening: bytes, message: bytes) -> None:
        self.address, self.opening, self.message = address, opening, message
        self.state = "connecting"
        self.verdict = b""

    def connect(self, port: int) -> bool:
        """Start connecting from the node's own address; send ``OPEN`` at once when the
        connection is already up (on loopback it usually is). Whether ``OPEN`` went out."""
        self.sock = sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.frames = FrameReader(max_payload=DEFAULT_LIMITS.max_verdict_bytes,
                                  expect={Kind.HELLO, Kind.VERDICT, Kind.REJECT})
        sock.setblocking(False)
        if self.address is not None:
            # The port is chosen at connect, per (source, destination): each address has the
            # whole ephemeral range of its own.
            sock.setsockopt(socket.IPPROTO_IP, _BIND_NO_PORT, 1)
            sock.bind((self.address, 0))
        error = sock.connect_ex(("127.0.0.1", port))
        if error not in (0, errno.EINPROGRESS):
            raise ConnectionError(f"connect: {os.strerror(error)}")
        try:
            sent = sock.send(self.opening)
        except (BlockingIOError, InterruptedError):
            return False  # still connecting: OPEN goes out once the socket is writable
        if sent != len(self.opening):
            raise ConnectionError("OPEN did not fit in an empty socket buffer")
        self.state = "hello"
        return True


# Linux's IP_BIND_ADDRESS_NO_PORT (24): Python exposes the name from 3.12 on some builds only.
_BIND_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
_SLICE = 64
# Bytes asked of each recv: a verdict is a few KB (a bigger buffer is allocated, and its pages
# touched, on every call).
_RECV_BYTES = 65536


def _run_nodes(port: int, messages: list[tuple[str | None, bytes, bytes]],
               timeout: float) -> list[bytes]:
    """Every node connects at once, sends OPEN, reads HELLO, sends its fingerprint and reads
    its verdict; all in one selector loop (lighter than asyncio streams: the nodes must not be
    the bottleneck of a measurement of the primary). Returns each node's verdict payload."""
    nodes = [_Node(*m) for m in messages]
    with selectors.DefaultSelector() as selector:
        left = len(nodes)
        starting = iter(nodes)
        deadline = time.monotonic() + timeout
        connecting = True
        while left and time.monotonic() < deadline:
            # Answer first, then connect the next slice: a real node answers its greeting at
            # once, however many other nodes are still connecting.
            ready = selector.select(0 if connecting else 1.0)
            if connecting and len(ready) < _SLICE:
                batch = list(itertools.islice(starting, _SLICE))
                for node in batch:
                    opened = node.connect(port)
                    selector.register(node.sock, selectors.EVENT_READ if opened
                                      else selectors.EVENT_WRITE, node)
                connecting = len(batch) == _SLICE
            for key, _ in ready:
                node = key.data
                if node.state == "connecting":
                    error = node.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if error:
                        raise ConnectionError(f"connect: {os.strerror(error)}")
                    node.sock.sendall(node.opening)
                    node.state = "hello"
                    selector.modify(node.sock, selectors.EVENT_READ, node)
                    continue
                data = node.sock.recv(_RECV_BYTES)
                if not data:
                    raise ConnectionError(f"the primary closed in state {node.state}")
                node.frames.feed(data)
                while (frame := node.frames.next_frame()) is not None:
                    if frame.kind == Kind.REJECT:
                        raise ConnectionError(f"refused: {decode_object(frame.payload)}")
                    if frame.kind == Kind.HELLO:
                        node.sock.sendall(node.message)
                        node.state = "waiting"
                    else:
                        node.verdict = frame.payload
                        selector.unregister(node.sock)
                        node.sock.close()
                        left -= 1
        if left:
            raise TimeoutError(f"{left} nodes without a verdict after {timeout:g} s")
    return [node.verdict for node in nodes]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_once(clients: int) -> tuple[float, float, float, float]:
    """One run with ``clients`` nodes besides the primary; (seconds until every node held its
    verdict, the primary's own seconds, the primary's CPU seconds, the nodes' CPU seconds)."""
    nodes = clients + 1
    own = _own_addresses()
    messages = []
    for rank in range(1, nodes):
        address = node_address(rank) if own else None
        fingerprint = typical_fingerprint(rank, nodes, address or "127.0.0.1")
        opening = encode_frame(Kind.OPEN, encode_json({"nonce": new_nonce().hex()}))
        message = encode_frame(Kind.FINGERPRINT,
                               encode_json({"fingerprint": fingerprint.to_wire()}))
        messages.append((address, opening, message))
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(target=_primary, args=(nodes, child))
    process.start()
    try:
        port = parent.recv()
        start, cpu_start = time.perf_counter(), _cpu()
        payloads = _run_nodes(port, messages, timeout=300)
        elapsed, nodes_cpu = time.perf_counter() - start, _cpu() - cpu_start
        primary_s, reported, problems, rejected, cpu = parent.recv()
    finally:
        process.join(30)
    # Every node holds the same verdict; each real node decodes its own in parallel, so one
    # decoded here (and the rest compared byte for byte) stands for all.
    verdict = Verdict.from_wire(decode_object(payloads[0]))
    if reported != nodes or verdict.exit_code != 0 or problems or rejected \
            or any(p != payloads[0] for p in payloads):
        raise SystemExit(f"{clients} nodes: {reported} reported, {problems} problems, "
                         f"{rejected} refused")
    return elapsed, primary_s, cpu, nodes_cpu


def main(argv: list[str] | None = None) -> int:
    """Print one line per size: median and best time, the primary's CPU time, and the cost per
    node (the primary's CPU time per node, which other load on the machine does not change)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    _more_files()
    print(f"{'nodes':>6}  {'median s':>9}  {'best s':>7}  {'primary s':>9}  {'cpu s':>6}  "
          f"{'cpu ms/node':>11}  {'ratio':>6}  {'nodes cpu s':>11}")
    flat_base: float | None = None
    missed = []
    for clients in args.sizes:
        results = [run_once(clients) for _ in range(args.runs)]
        times = [r[0] for r in results]
        median = statistics.median(times)
        primary = statistics.median(r[1] for r in results)
        cpu = statistics.median(r[2] for r in results)
        nodes_cpu = statistics.median(r[3] for r in results)
        per_node = cpu / clients
        ratio = per_node / flat_base if flat_base else 1.0
        print(f"{clients:>6}  {median:>9.3f}  {min(times):>7.3f}  {primary:>9.3f}  {cpu:>6.2f}  "
              f"{per_node * 1000:>11.3f}  {ratio:>6.2f}  {nodes_cpu:>11.2f}", flush=True)
        if clients >= FLAT_FROM:
            flat_base = flat_base or per_node
            if ratio > FLAT_RATIO:
                missed.append(f"{clients} nodes at {ratio:.2f}x the cost per node from "
                              f"{FLAT_FROM} up")
        limit = WALL_GOALS.get(clients)
        if limit is not None and median > limit:
            missed.append(f"{clients} nodes in {median:.2f} s (goal {limit:g} s)")
    walls = ", ".join(f"{n} nodes in under {t:g} s" for n, t in WALL_GOALS.items())
    print(f"goal: {walls}; the primary's CPU time per node within {FLAT_RATIO:g}x from "
          f"{FLAT_FROM} up" + (f"; MISSED: {', '.join(missed)}" if missed else "; met"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
