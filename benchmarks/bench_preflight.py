"""How long preflight takes as the cluster grows: a real primary, N simulated nodes, loopback.

The primary (:func:`clusterenv.preflight.serve_primary`, the same code ``clusterenv preflight``
runs) listens on 127.0.0.1 in a child process of its own, so it does not share an interpreter
lock with the clients. The N nodes are asyncio connections in this process, each speaking the
real wire format (``HELLO``, a full fingerprint of a typical 8-GPU RoCE node, the verdict, which
every node decodes into a ``Verdict``). Time is measured from the moment the nodes start
connecting to the moment the last one holds its verdict.

Run::

    python benchmarks/bench_preflight.py              # 8, 32, 128, 512 nodes, 3 runs each
    python benchmarks/bench_preflight.py 1024 --runs 1

Goal: 512 nodes in under 2 s (median; exit 1 when missed). The baseline is the smallest size in
the same run: the printed ratio is the cost per node at each size against it, about 1 when the
time grows linearly with the node count.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
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

SIZES = (8, 32, 128, 512)
GOAL_NODES = 512
GOAL_SECONDS = 2.0


def typical_fingerprint(rank: int, nodes: int) -> Fingerprint:
    """A fingerprint the size of a real 8-GPU RoCE node's (about 1.5 KB of JSON)."""
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
        rank=rank, num_nodes=nodes, num_trainers=8, node_addr="127.0.0.1",
        primary_addr="127.0.0.1", primary_port=29500, source="runpod", hostname=f"node-{rank}",
        interface="ens1", interface_reason="ens1 holds NODE_ADDR 127.0.0.1", mtu=9000,
        rdma=RdmaSummary("roce", tuple(f"mlx5_{i}" for i in range(8)), 8, (400.0,) * 8),
        gpus=8, env=env, versions={"torch": "2.13.0", "nccl": "2.27.3", "python": "3.11.9"},
        clusterenv="0.1.0",
    )


def _primary(nodes: int, conn: Connection) -> None:
    own = typical_fingerprint(0, nodes)
    verdict = serve_primary(own, listen_addr="127.0.0.1", port=0, expected_nodes=nodes,
                            options=PreflightOptions(timeout=60.0), on_listening=conn.send)
    conn.send((verdict.elapsed_s, verdict.reported, len(verdict.problems)))


async def _node(port: int, fp: Fingerprint) -> Verdict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        frames = FrameReader(max_payload=DEFAULT_LIMITS.max_verdict_bytes,
                             expect={Kind.HELLO, Kind.VERDICT})
        writer.write(encode_frame(Kind.OPEN, encode_json({"nonce": new_nonce().hex()})))
        while (frame := frames.next_frame()) is None:
            frames.feed(await reader.read(65536))
        decode_object(frame.payload)
        body = {"fingerprint": fp.to_wire()}
        writer.write(encode_frame(Kind.FINGERPRINT, encode_json(body)))
        while (frame := frames.next_frame()) is None:
            data = await reader.read(1 << 20)
            if not data:
                raise ConnectionError("the primary closed without a verdict")
            frames.feed(data)
        return Verdict.from_wire(decode_object(frame.payload))
    finally:
        writer.close()


async def _nodes(port: int, fingerprints: list[Fingerprint]) -> list[Verdict]:
    return await asyncio.gather(*(_node(port, fp) for fp in fingerprints))


def run_once(clients: int) -> tuple[float, float]:
    """One run with ``clients`` nodes besides the primary; (client-side s, primary-side s)."""
    nodes = clients + 1
    fingerprints = [typical_fingerprint(rank, nodes) for rank in range(1, nodes)]
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(target=_primary, args=(nodes, child))
    process.start()
    try:
        port = parent.recv()
        start = time.perf_counter()
        verdicts = asyncio.run(_nodes(port, fingerprints))
        elapsed = time.perf_counter() - start
        primary_s, reported, problems = parent.recv()
    finally:
        process.join(30)
    if reported != nodes or any(v.exit_code != 0 for v in verdicts) or problems:
        raise SystemExit(f"{clients} nodes: {reported} reported, {problems} problems")
    return elapsed, primary_s


def main(argv: list[str] | None = None) -> int:
    """Print one line per size: median and best time, and the cost per node."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{'nodes':>6}  {'median s':>9}  {'best s':>7}  {'primary s':>9}  {'ms/node':>8}  "
          f"{'ratio':>6}")
    baseline: float | None = None
    missed = []
    for clients in args.sizes:
        results = [run_once(clients) for _ in range(args.runs)]
        times = [r[0] for r in results]
        median = statistics.median(times)
        primary = statistics.median(r[1] for r in results)
        per_node = median / clients
        baseline = per_node if baseline is None else baseline
        print(f"{clients:>6}  {median:>9.3f}  {min(times):>7.3f}  {primary:>9.3f}  "
              f"{per_node * 1000:>8.2f}  {per_node / baseline:>6.2f}", flush=True)
        if clients >= GOAL_NODES and median > GOAL_SECONDS * clients / GOAL_NODES:
            missed.append(f"{clients} nodes in {median:.2f} s")
    print(f"goal: {GOAL_NODES} nodes in under {GOAL_SECONDS:g} s (scaled for larger sizes)"
          + (f"; MISSED: {', '.join(missed)}" if missed else "; met"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
