"""Speed of ``clusterenv nccl-log --json`` on large logs, against a plain Python line loop.

Four shapes of log, each timed end to end (``read_nccl_log``, the findings and the JSON output,
as ``clusterenv nccl-log --json FILE`` runs them) against the floor of reading the same file
(``for line in open(path): pass``, decoding included), CPU time, best of ``--repeat`` (a shape
that misses its goal is timed again, twice as many runs, before the miss is believed):

- ``repeated`` (default ``--size-mb`` 100): the lines of the real logs in
  tests/data/nccl_logs/real/ repeated verbatim (jobs that print the same lines again);
  goal within 5x the floor.
- ``unique`` (``--unique-mb`` 100): lines that never repeat: 8192 processes on 1024 hosts, each
  printing the real 2.27 RoCE capture's setup lines with its own host, pid, rank, address and
  communicator, then the channel lines of NCCL 2.19+ (src/transport/net.cc ``Channel %02d/%d :
  %d[%d] -> %d[%d] [%s] via NET/%s/%d%s%s``, src/transport/p2p.cc ``... via P2P/%s%s%s``)
  and ``Init COMPLETE``; goal within 10x the floor.
- ``loop`` (``--loop-mb`` 100): a job stuck in a retry loop, every line stating something
  again: a process printing NCCL 2.27.5's completion-error WARN (src/transport/net_ib.cc:2451
  ``NET/IB: Got completion from peer %s with status=%d opcode=%d len=%u vendor err %u
  (%s)%s%s%s%s hca %s``), the return traces of its callers (src/include/checks.h ``%s:%d ->
  %d``; NCCLCHECK of the network's test() at src/transport/net.cc:1393 and :1227, 6 being
  ncclRemoteError) and a channel line, over and over; goal within 5x the floor (lines that
  repeat), a regression past 10x fails.
- ``addresses`` (``--addresses-mb`` 20): one process per host, every host with its own
  bootstrap address (in 172.16.0.0/12, so that each is judged): no check may grow with
  processes x addresses. Goal: linear, nccl-log's time per byte at this size at most 1.3x its
  time per byte at a quarter of it (a path growing with processes x addresses makes it 4x); its
  own time, not its ratio to the floor (the floor of a small file, a few ms, is too short to
  time well); a miss is timed again, twice as many runs, before it is believed.

Memory: a file of ``--no-newline-mb`` (default 1000) MB without a newline is parsed in a child
process whose peak RSS is printed next to that of a child that only imports clusterenv; goal
under 200 MB more than the import alone.

Exit 1 when any goal is missed, but for a goal not reached yet or not reached on every
machine (``BOUNDS``: ``unique``, whose goal is 10x and which stands at 12-14x, and ``loop``,
3.0-4.2x on a shared 2-core machine): that one fails only past its
bound (a regression) and otherwise exits 3, the miss printed. ``python -m benchmarks --quick``
runs smaller files of the same shapes.

Run: ``python benchmarks/bench_nccl_log.py [--size-mb 100] [--unique-mb 100] [--loop-mb 100]
[--addresses-mb 20] [--repeat 3] [--no-newline-mb 1000]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from clusterenv.cli import main as cli_main

REAL = Path(__file__).resolve().parents[1] / "tests" / "data" / "nccl_logs" / "real"
ROCE = REAL / "nccl-info-h100-roce-2.27-ofi-plugin-fallback-ib.txt"
GOALS = {"repeated": 5.0, "unique": 10.0, "loop": 5.0}
# A goal not reached yet keeps a bound that fails the run: the ratio reached so far with room
# for a busier machine, so that the work done is guarded from regressions while the miss stays
# printed (exit 3, which ``python -m benchmarks`` reports as an open goal).
BOUNDS = {"unique": 20.0, "loop": 7.0}
OPEN = 3
GOAL_LINEAR = 1.3
GOAL_EXTRA_RSS_MB = 200.0
_PROCESSES, _HOSTS = 8192, 1024


def real_lines() -> list[str]:
    lines = []
    for path in sorted(REAL.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        lines += [line + "\n" for line in text.splitlines() if not line.startswith("# source:")]
    return lines


def process_template() -> list[str]:
    """The setup lines one process of the real RoCE capture printed (rank 9, pid 207008)."""
    return [line for line in ROCE.read_text(encoding="utf-8").splitlines()
            if line.startswith("tpgds-aihub0008:207008:")]


def _process_lines(template: list[str], host: int, local: int, channels: int, *,
                   address: str, hosts: int) -> Iterator[str]:
    rank = host * 8 + local
    nranks = hosts * 8
    prefix = f"gpu-node-{host:04d}:{300000 + rank}:{300000 + rank} [{local}] NCCL INFO "
    comm = f"0x55{rank:010x}"
    for line in template:
        msg = line.split(" NCCL INFO ", 1)[1]
        msg = (msg.replace("10.99.91.63", address).replace("0x5654997a1f80", comm)
               .replace("rank 9 nranks 16", f"rank {rank} nranks {nranks}")
               .replace("cudaDev 1 nvmlDev 1", f"cudaDev {local} nvmlDev {local}")
               .replace("GPU device 1", f"GPU device {local}"))
        yield prefix + msg + "\n"
    peer = (rank + 8) % nranks
    for channel in range(channels):
        yield (f"{prefix}Channel {channel:02d}/0 : {rank}[{local}] -> {(rank + 1) % nranks}"
               f"[{(local + 1) % 8}] via P2P/CUMEM/read\n")
        yield (f"{prefix}Channel {channel:02d}/0 : {peer}[{local}] -> {rank}[{local}] [receive] "
               f"via NET/IB/{local}/GDRDMA\n")
        yield (f"{prefix}Channel {channel:02d}/0 : {rank}[{local}] -> {peer}[{local}] [send] "
               f"via NET/IB/{local}/GDRDMA\n")
    yield f"{prefix}Connected all rings, use ring PXN 0 GDR 1\n"
    yield (f"{prefix}ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {local} "
           f"nvmlDev {local} busId {0x1b000 + local * 0x10000:x} commId 0xde4443395863ef4a - "
           "Init COMPLETE\n")


def write_repeated(path: Path, size: int) -> int:
    lines = "".join(real_lines())
    with open(path, "w", encoding="utf-8") as out:
        for _ in range(max(1, size // len(lines.encode()))):
            out.write(lines)
    return os.path.getsize(path)


def write_unique(path: Path, size: int, processes: int = _PROCESSES, hosts: int = _HOSTS) -> int:
    """``processes`` processes on ``hosts`` hosts, as many channels each as fill ``size``."""
    template = process_template()
    per_process = size / processes
    base = sum(len(s) for s in _process_lines(template, 0, 0, 0, address="10.64.0.1", hosts=1))
    channel = sum(len(s) for s in _process_lines(template, 0, 0, 1, address="10.64.0.1",
                                                 hosts=1)) - base
    channels = max(1, round((per_process - base) / channel))
    with open(path, "w", encoding="utf-8") as out:
        for index in range(processes):
            host, local = divmod(index, processes // hosts)
            out.writelines(_process_lines(template, host, local % 8, channels,
                                          address=f"10.{64 + host // 256}.{host % 256}.1",
                                          hosts=hosts))
    return os.path.getsize(path)


def write_loop(path: Path, size: int) -> int:
    """One process retrying: a completion error, the return traces it causes, a channel line
    (each a line NCCL prints; see the module's docstring), again until ``size``."""
    prefix = "gpu-node-0001:300001:300001 [1] NCCL "
    cycle = "".join(prefix + line + "\n" for line in [
        "WARN NET/IB: Got completion from peer 10.1.0.2<40404> with status=12 opcode=0 len=0 "
        "vendor err 129 (Recv) localGid ::ffff:10.1.0.1 remoteGids::ffff:10.1.0.2 hca mlx5_1",
        "INFO transport/net.cc:1393 -> 6",
        "INFO transport/net.cc:1227 -> 6",
        "INFO Channel 00/0 : 8[1] -> 1[1] [receive] via NET/IB/1/GDRDMA",
    ])
    with open(path, "w", encoding="utf-8") as out:
        for _ in range(max(1, size // len(cycle))):
            out.write(cycle)
    return os.path.getsize(path)


def write_addresses(path: Path, size: int) -> int:
    """One process per host, every host bootstrapping from its own 172.16.0.0/12 address."""
    template = process_template()
    per_host = sum(len(s) for s in _process_lines(template, 0, 0, 0, address="172.20.0.1",
                                                  hosts=1))
    hosts = max(2, size // per_host)
    with open(path, "w", encoding="utf-8") as out:
        for host in range(hosts):
            out.writelines(_process_lines(template, host, 0, 0, hosts=hosts,
                                          address=f"172.{20 + host // 65536}."
                                                  f"{host // 256 % 256}.{host % 256}"))
    return os.path.getsize(path)


def floor(path: Path) -> None:
    with open(path, encoding="utf-8", errors="replace") as handle:
        for _ in handle:
            pass


def end_to_end(path: Path) -> None:
    """What ``clusterenv nccl-log --json FILE`` does, in this process (output discarded)."""
    with contextlib.redirect_stdout(io.StringIO()):
        cli_main(["nccl-log", "--json", str(path)])


def best(fns: dict[str, Callable[[Path], None]], path: Path, repeat: int) -> dict[str, float]:
    """The least CPU time of ``repeat`` runs of each, interleaved so that load hits all alike,
    after one run of each that is not timed (the first pays for what is done once a process:
    compiling expressions, filling the page cache).

    CPU time of this process (not wall time) keeps other processes on a shared machine out of
    the ratio.
    """
    for fn in fns.values():
        fn(path)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.process_time()
            fn(path)
            times[name].append(time.process_time() - start)
    return {name: min(values) for name, values in times.items()}


# The child's own peak (VmHWM): getrusage's ru_maxrss survives exec, so it would report this
# process's peak after it parsed 100 MB.
_RSS = """
import re, sys
import clusterenv.nccl_log
if len(sys.argv) > 1:
    log = clusterenv.nccl_log.read_nccl_log(sys.argv[1])
    assert log.lines_read == 1, log.lines_read
print(int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read()).group(1)) / 1024)
"""


def write_no_newline(path: Path, size: int) -> None:
    """``size`` bytes of real NCCL lines joined without a newline."""
    block = "".join(line.rstrip("\n") + " " for line in real_lines()).encode()
    with open(path, "wb") as out:
        for _ in range(size // len(block)):
            out.write(block)


def peak_rss_mb(*args: str) -> float:
    """Peak RSS of a child that imports clusterenv.nccl_log (and parses ``args[0]``)."""
    out = subprocess.run([sys.executable, "-c", _RSS, *args], check=True, capture_output=True,
                         text=True)
    return float(out.stdout)


def run_shape(name: str, path: Path, size: int, repeat: int,  # noqa: PLR0917
              failed: list[str] | None, missed: list[str] | None = None,
              **options: int) -> tuple[float, float]:
    """Write the shape, time it against the floor, print and judge the ratio; returns it, and
    nccl-log's CPU seconds per byte."""
    writer = {"repeated": write_repeated, "unique": write_unique, "loop": write_loop,
              "addresses": write_addresses}[name]
    written = writer(path, size, **options)
    fns: dict[str, Callable[[Path], None]] = {"floor": floor, "nccl-log": end_to_end}
    results = best(fns, path, repeat)
    ratio = results["nccl-log"] / results["floor"]
    if name in GOALS and ratio > GOALS[name]:
        # A miss is timed again, twice as many runs, before it is believed: on a shared machine
        # one busy moment can hold every run of the first set back. The best of all counts.
        again = best(fns, path, 2 * repeat)
        results = {key: min(value, again[key]) for key, value in results.items()}
        ratio = results["nccl-log"] / results["floor"]
    lines = sum(1 for _ in open(path, encoding="utf-8"))  # noqa: SIM115
    hosts = len({m.group(1) for m in re.finditer(r"^([\w.-]+):", path.read_text(), re.M)})
    goal = f" (goal <= {GOALS[name]:.0f})" if name in GOALS else ""
    print(f"{name:9} {written / 1e6:6.1f} MB {lines:8} lines {hosts:5} hosts: floor "
          f"{results['floor']:6.2f} s, nccl-log --json {results['nccl-log']:6.2f} s  "
          f"x{ratio:5.1f}{goal}", flush=True)
    if failed is not None and name in GOALS and ratio > GOALS[name]:
        bound = BOUNDS.get(name)
        if bound is not None and ratio <= bound and missed is not None:
            missed.append(f"{name}: {ratio:.1f}x the floor, goal {GOALS[name]:.0f}x (not "
                          f"reached yet; a regression past {bound:.0f}x fails)")
        else:
            failed.append(f"{name}: {ratio:.1f}x the floor, goal {GOALS[name]:.0f}x")
    path.unlink()
    return ratio, results["nccl-log"] / written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=100.0, help="the repeated shape")
    parser.add_argument("--unique-mb", type=float, default=100.0)
    parser.add_argument("--loop-mb", type=float, default=100.0)
    parser.add_argument("--addresses-mb", type=float, default=20.0)
    parser.add_argument("--processes", type=int, default=_PROCESSES,
                        help="processes of the unique shape (hosts: an eighth of them)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-newline-mb", type=float, default=1000.0)
    args = parser.parse_args()
    failed: list[str] = []
    missed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl.log"
        run_shape("repeated", path, int(args.size_mb * 1e6), args.repeat, failed, missed)
        run_shape("unique", path, int(args.unique_mb * 1e6), args.repeat, failed, missed,
                  processes=args.processes, hosts=max(1, args.processes // 8))
        run_shape("loop", path, int(args.loop_mb * 1e6), args.repeat, failed, missed)
        sizes = int(args.addresses_mb * 1e6 / 4), int(args.addresses_mb * 1e6)
        quarter, full = (run_shape("addresses", path, size, args.repeat, None)[1]
                         for size in sizes)
        growth = full / quarter
        if growth > GOAL_LINEAR:
            # timed again before it is believed, as a missed goal is: the best of each counts
            print("addresses: timed again, twice as many runs", flush=True)
            again = [run_shape("addresses", path, size, 2 * args.repeat, None)[1]
                     for size in sizes]
            quarter, full = min(quarter, again[0]), min(full, again[1])
            growth = full / quarter
        print(f"addresses: x{growth:.2f} the time per byte of a quarter of the size (goal <= "
              f"{GOAL_LINEAR}: nothing grows with processes x addresses)", flush=True)
        if growth > GOAL_LINEAR:
            failed.append(f"addresses: the time per byte grows {growth:.2f}x from a quarter of "
                          f"the size, goal {GOAL_LINEAR}x")
        if args.no_newline_mb > 0:
            joined = Path(tmp) / "joined.log"
            write_no_newline(joined, int(args.no_newline_mb * 1e6))
            start = time.perf_counter()
            rss = peak_rss_mb(str(joined))
            seconds = time.perf_counter() - start
            base = peak_rss_mb()
            extra = rss - base
            print(f"no newline: {joined.stat().st_size / 1e6:.0f} MB parsed in {seconds:.1f} s, "
                  f"peak RSS {rss:.0f} MB (import alone {base:.0f} MB, +{extra:.0f} MB; goal "
                  f"<= +{GOAL_EXTRA_RSS_MB:.0f} MB)")
            if extra > GOAL_EXTRA_RSS_MB:
                failed.append(f"peak RSS +{extra:.0f} MB on a file without newlines")
    if failed:
        print("GOAL MISSED: " + "; ".join(failed + missed))
        sys.exit(1)
    if missed:
        print("GOAL OPEN: " + "; ".join(missed))
        sys.exit(OPEN)


if __name__ == "__main__":
    main()
