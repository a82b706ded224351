"""The measuring side of ``clusterenv bench``: runs in every rank of a process group.

:func:`run` is collective: every rank of an initialised process group calls it with the same
arguments. It imports torch when called (never at import). ``python -m clusterenv.bench.worker``
is what ``clusterenv bench`` starts under torchrun: it joins the process group, calls
:func:`run`, and the first rank of each node writes the result as JSON for the CLI.

What happens, in order:

1. every rank reports its node (torchrun's ``GROUP_RANK``, else ``NODE_RANK``, else the host
   name), its interface and address, the transport and the line rate of the rails in use
   (``all_gather_object``);
2. links: for each ring transfer between two nodes, local rank ``i`` of the sender sends to
   local rank ``i`` of the receiver, all local ranks at once, so the transfer uses every rail the
   node has (with one process per node: one rank per node). Each timed iteration is a
   *go / data / acknowledgement* exchange timed by the sender, so both ends are ready and the
   time ends when the last byte arrived; a sample sends enough transfers back to back to last
   about 100 ms, so a millisecond of scheduling noise does not decide it;
3. all-reduce per size, ascending: warm-up, a barrier, then timed iterations; each iteration's
   time is the slowest rank's, and the result is their median.

Iteration counts shrink (never below one) to stay within the time limit; sizes that no longer
fit are skipped and the result says ``truncated``. On CUDA (NCCL) every timing synchronises the
device before reading the clock. With one rank no all-reduce is timed: it moves no data. The
CUDA path has run on one GPU (one rank); never yet on several GPUs or nodes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from clusterenv._text import count
from clusterenv.bench.conclude import Timing, conclude
from clusterenv.bench.model import BenchResult, NodeInfo
from clusterenv.bench.placement import describe_self, group_nodes
from clusterenv.bench.units import CPU_SIZES, ELEMENT_BYTES, GPU_SIZES, format_size, median
from clusterenv.bench.verdict import Transfer, ring_transfers, schedule_rounds
from clusterenv.errors import LaunchError

__all__ = ["RESULT_ENV", "main", "run"]

#: Where ``python -m clusterenv.bench.worker`` writes the result (the CLI sets it per node).
RESULT_ENV = "CLUSTERENV_BENCH_RESULT"
_DEFAULT_ITERS = {"cpu": 5, "cuda": 20}
_DEFAULT_WARMUP = {"cpu": 1, "cuda": 5}
_TEARDOWN_S = 3.0
#: A timed link sample lasts at least this long (back-to-back transfers), at most _MAX_BATCH.
_SAMPLE_S = 0.1
_MAX_BATCH = 256


class _Clock:
    """The run's time budget; rank 0 decides iteration counts so every rank agrees."""

    def __init__(self, limit: float) -> None:
        self.deadline = time.monotonic() + limit
        self.truncated = False

    def iterations(self, warm_seconds: float, wanted: int, remaining: int) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return 0
        share = left / max(remaining, 1)
        fits = int(share / warm_seconds) if warm_seconds > 0 else wanted
        return max(1, min(wanted, fits))


class _Group:
    """The few torch.distributed calls the measurement needs, on the right device."""

    def __init__(self, torch: Any, dist: Any, device: Any) -> None:
        self.torch, self.dist, self.device = torch, dist, device
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def max_of(self, values: Sequence[float]) -> list[float]:
        tensor = self.torch.tensor(list(values), dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.MAX)
        return [float(v) for v in tensor.cpu().tolist()]

    def decide(self, clock: _Clock, warm: float, wanted: int, remaining: int) -> int:
        """Rank 0's iteration count for the next measurement, broadcast to everyone."""
        (slowest,) = self.max_of([warm])
        mine = clock.iterations(slowest, wanted, remaining) if self.rank == 0 else 0
        tensor = self.torch.tensor([mine], dtype=self.torch.int64, device=self.device)
        self.dist.broadcast(tensor, src=0)
        count = int(tensor.item())
        if count < wanted:
            clock.truncated = True
        return count

    def batch(self, warm_seconds: float) -> int:
        """Transfers per timed sample, so that a sample lasts about :data:`_SAMPLE_S`: a
        sample of a millisecond measures the scheduler more than the link. Rank 0 decides."""
        (slowest,) = self.max_of([warm_seconds])
        mine = min(_MAX_BATCH, max(1, math.ceil(_SAMPLE_S / slowest))) if slowest > 0 else 1
        tensor = self.torch.tensor([mine], dtype=self.torch.int64, device=self.device)
        self.dist.broadcast(tensor, src=0)
        return int(tensor.item())

    def barrier(self) -> None:
        if self.cuda:
            self.dist.barrier(device_ids=[self.device.index])
        else:
            self.dist.barrier()

    def buffer(self, size: int) -> Any:
        return self.torch.ones(size // ELEMENT_BYTES, dtype=self.torch.float32,
                               device=self.device)


# -- measurements -------------------------------------------------------------------------------


def _progress(stream: TextIO | None, text: str) -> None:
    if stream is not None:
        stream.write(f"clusterenv bench: {text}\n")
        stream.flush()


def _exchange(group: _Group, role: str, peer: int, buffers: tuple[Any, Any],
              batch: int) -> float:
    """One timed go / data x ``batch`` / ack exchange; the sender's seconds per transfer, 0 for
    the receiver."""
    dist = group.dist
    data, token = buffers
    if role == "recv":
        dist.send(token, dst=peer)
        for _ in range(batch):
            dist.recv(data, src=peer)
        group.sync()
        dist.send(token, dst=peer)
        group.sync()
        return 0.0
    dist.recv(token, src=peer)
    group.sync()
    start = time.perf_counter()
    for _ in range(batch):
        dist.send(data, dst=peer)
    dist.recv(token, src=peer)
    group.sync()
    return (time.perf_counter() - start) / batch


def _links(group: _Group, nodes: Sequence[NodeInfo], *, size: int, iters: int, warmup: int,
           clock: _Clock, remaining: int, stream: TextIO | None) -> list[Transfer]:
    rounds = schedule_rounds(ring_transfers(len(nodes)))
    data = group.buffer(size)
    token = group.buffer(ELEMENT_BYTES)
    out: list[Transfer] = []
    for number, members in enumerate(rounds):
        roles: list[tuple[int, str, int]] = []  # (index in round, role, peer rank)
        width: dict[int, int] = {}
        for index, (src, dst) in enumerate(members):
            pairs = list(zip(nodes[src].ranks, nodes[dst].ranks))  # noqa: B905 - unequal nodes
            width[index] = len(pairs)
            for sender, receiver in pairs:
                if group.rank == sender:
                    roles.append((index, "send", receiver))
                elif group.rank == receiver:
                    roles.append((index, "recv", sender))
        warm = 0.0
        for _ in range(max(warmup, 1)):  # at least one: the batch size comes from it
            for _index, role, peer in roles:
                warm = max(warm, _exchange(group, role, peer, (data, token), 1))
        batch = group.batch(warm)
        count = group.decide(clock, warm * batch, iters, remaining - number)
        group.barrier()
        times = [[0.0] * max(count, 1) for _ in members]
        for i in range(count):
            for index, role, peer in roles:
                seconds = _exchange(group, role, peer, (data, token), batch)
                times[index][i] = max(times[index][i], seconds)
        flat = group.max_of([t for row in times for t in row])
        for index, (src, dst) in enumerate(members):
            if count == 0:
                continue
            row = flat[index * max(count, 1):(index + 1) * max(count, 1)]
            transfer = Transfer(src, dst, size * width[index], median(row), count)
            out.append(transfer)
            _progress(stream, f"link node {src} -> node {dst}: {transfer.gbs * 8:.3g} Gb/s "
                              f"(median of {count} x {batch} x {format_size(transfer.size)})")
    return out


def _all_reduce(group: _Group, size: int, *, iters: int, warmup: int, clock: _Clock,
                remaining: int) -> Timing | None:
    dist = group.dist
    data = group.buffer(size)
    warm = 0.0
    for _ in range(warmup):
        group.sync()
        start = time.perf_counter()
        dist.all_reduce(data)
        group.sync()
        warm = max(warm, time.perf_counter() - start)
    count = group.decide(clock, warm, iters, remaining)
    if count == 0:
        return None
    group.barrier()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        dist.all_reduce(data)
        group.sync()
        times.append(time.perf_counter() - start)
    slowest = group.max_of(times)
    return size, median(slowest), count


def run(
    environ: Mapping[str, str] | None = None,
    *,
    sizes: Sequence[int] | None = None,
    iters: int | None = None,
    warmup: int | None = None,
    link_size: int | None = None,
    time_limit: float = 60.0,
    min_fraction: float = 0.5,
    progress: TextIO | None = None,
    root: str = "/",
) -> BenchResult:
    """Measure inside an initialised process group; every rank calls it and gets the result.

    Args:
        environ: The environment to read (``GROUP_RANK``, ``*_SOCKET_IFNAME``,
            ``NCCL_DEBUG_FILE``); None reads ``os.environ``.
        sizes: All-reduce sizes in bytes, e.g. ``parse_sizes("1M,64M")``; default
            :data:`~clusterenv.bench.GPU_SIZES` on CUDA, :data:`~clusterenv.bench.CPU_SIZES`
            on CPU.
        iters: Timed iterations per measurement (default 20 on CUDA, 5 on CPU).
        warmup: Untimed iterations first (default 5 on CUDA, 1 on CPU).
        link_size: Bytes per point-to-point transfer (default: the largest size).
        time_limit: Seconds for the whole measurement; iterations shrink to fit, e.g. ``60``.
        min_fraction: A node below this fraction of the others' median is slow, e.g. ``0.5``.
        progress: Where the first rank of each node writes progress lines, e.g. ``sys.stderr``.
        root: ``/`` (sysfs for the line rate).

    Returns:
        The same :class:`~clusterenv.bench.BenchResult` on every rank.

    Raises:
        LaunchError: When torch is missing or no process group is initialised.
    """
    env = os.environ if environ is None else environ
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        raise LaunchError(f"clusterenv.bench.run needs PyTorch: {e}") from e
    if not dist.is_available() or not dist.is_initialized():
        raise LaunchError(
            "clusterenv.bench.run measures inside a process group: call "
            "torch.distributed.init_process_group() first, or run `clusterenv bench` from a "
            "shell on every node"
        )
    backend = str(dist.get_backend())
    if backend == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    group = _Group(torch, dist, device)
    kind = device.type
    size_list = sorted(set(sizes or (GPU_SIZES if kind == "cuda" else CPU_SIZES)))
    iters = _DEFAULT_ITERS[kind] if iters is None else iters
    warmup = _DEFAULT_WARMUP[kind] if warmup is None else warmup
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters={iters}, warmup={warmup}: expected iters >= 1, warmup >= 0")
    clock = _Clock(time_limit)
    started = time.monotonic()
    local_rank = int(env.get("LOCAL_RANK", "0") or 0)
    # A first collective creates the NCCL communicator, so its log names the transport.
    first = group.buffer(ELEMENT_BYTES)
    dist.all_reduce(first)
    group.sync()
    me = describe_self(group.rank, local_rank, backend=backend, environ=env, root=root)
    everyone: list[Any] = [None] * group.world
    dist.all_gather_object(everyone, me)
    nodes = group_nodes(everyone)
    leader = any(n.ranks[0] == group.rank for n in nodes)
    stream = progress if leader else None
    timed = (f"sizes {','.join(format_size(s) for s in size_list)}" if group.world > 1
             else "one rank: an all-reduce moves no data, nothing to time")
    _progress(stream, f"{count(len(nodes), 'node')}, {count(group.world, 'rank')}, {backend} on "
                      f"{kind}; {timed}")
    rounds = len(schedule_rounds(ring_transfers(len(nodes))))
    remaining = rounds + len(size_list)
    transfers = _links(group, nodes, size=link_size or size_list[-1], iters=iters,
                       warmup=warmup, clock=clock, remaining=remaining, stream=stream)
    remaining -= rounds
    timings: list[Timing] = []
    for size in size_list if group.world > 1 else ():
        timing = _all_reduce(group, size, iters=iters, warmup=warmup, clock=clock,
                             remaining=remaining)
        remaining -= 1
        if timing is None:
            _progress(stream, f"all-reduce {format_size(size)}: skipped, time limit reached")
            continue
        timings.append(timing)
        algbw = size / timing[1] / 1e9
        _progress(stream, f"all-reduce {format_size(size)}: {timing[1] * 1e6:.0f} us, "
                          f"algbw {algbw:.3g} GB/s ({count(timing[2], 'iteration')})")
    # Every rank returns the same result: the slowest rank's elapsed time.
    (elapsed,) = group.max_of([time.monotonic() - started])
    return conclude(backend=backend, device=kind, world_size=group.world, nodes=nodes,
                    sizes=timings, transfers=transfers, min_fraction=min_fraction,
                    elapsed_s=elapsed, truncated=clock.truncated)


# -- the torchrun entry point -------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clusterenv.bench.worker",
                                     description="one rank of `clusterenv bench`")
    parser.add_argument("--backend", choices=("gloo", "nccl"), required=True)
    parser.add_argument("--sizes", default="", help="comma-separated byte counts")
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--deadline", type=float, required=True,
                        help="time.time() by which the result must be written")
    parser.add_argument("--min-fraction", type=float, default=0.5)
    parser.add_argument("--init-timeout", type=float, default=60.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Join the process group torchrun describes, measure, write the result; exit status."""
    args = _parser().parse_args(argv)
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(args.backend, timeout=timedelta(seconds=args.init_timeout))
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s] or None
        # The CLI's deadline (same machine, same clock), less time to write and leave.
        budget = max(1.0, args.deadline - time.time() - _TEARDOWN_S)
        result = run(sizes=sizes, iters=args.iters, warmup=args.warmup, time_limit=budget,
                     min_fraction=args.min_fraction, progress=sys.stderr)
        target = os.environ.get(RESULT_ENV)
        if target and local_rank == 0:
            Path(target).write_text(json.dumps(result.to_dict()), encoding="utf-8")
        if args.backend == "nccl":  # name the device, or torch warns on every run
            dist.barrier(device_ids=[local_rank])
        else:
            dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
