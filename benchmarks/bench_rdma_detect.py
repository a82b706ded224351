"""How long RdmaInfo.detect() takes on a large host, against the floor of reading its files once.

Builds a snapshot with 16 devices x 2 RoCE ports x 256-slot GID tables (the mlx5 RoCE table
size), once sparse (4 used slots per port, as on a real host) and once full (every slot used),
then times ``RdmaInfo.detect()`` against walking the same tree and reading every file once.
The goal is a ratio of at most 1.5: detection should cost little more than the reads it needs.
The ratio to a stricter floor (the same reads as bare system calls) is printed too.

Run: ``python benchmarks/bench_rdma_detect.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from clusterenv.rdma import RdmaInfo
from clusterenv.testing import GidSpec, HostBuilder, port

DEVICES = 16
PORTS = 2
TABLE = 256


def build(root: Path, used_per_port: int) -> None:
    """A host with DEVICES x PORTS RoCE ports whose tables have ``used_per_port`` used slots."""
    host = HostBuilder(root)
    for d in range(DEVICES):
        ports = []
        for p in range(1, PORTS + 1):
            netdev = f"ens{d}f{p - 1}np{p - 1}"
            gids = []
            for i in range(used_per_port):
                kind = "IB/RoCE v1" if i % 2 == 0 else "RoCE v2"
                if i < 2:
                    address = f"fe80::a288:c2ff:fe{d:02x}:{p:04x}"
                else:
                    address = f"::ffff:10.{d}.{p}.{i // 2}"
                gids.append(GidSpec(i, address, kind, netdev))
            ports.append(
                port(
                    p,
                    link_layer="Ethernet",
                    netdev=netdev,
                    gids=gids,
                    gid_table_len=TABLE,
                )
            )
        host.rdma_device(f"mlx5_{d}", *ports)


def read_everything(root: Path) -> int:
    """The floor: walk the tree and read every file once; returns the number of files."""
    count = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(directory, name), "rb") as handle:
                handle.read()
            count += 1
    return count


def read_everything_raw(root: Path) -> int:
    """A stricter floor: the same reads with bare ``os.open``/``os.read`` system calls."""
    count = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.read(fd, 4097)
            finally:
                os.close(fd)
            count += 1
    return count


def best_of(repeat: int, run: Callable[[], object]) -> float:
    """Median wall time of ``run`` in seconds over ``repeat`` runs (after one warm-up)."""
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per measurement")
    args = parser.parse_args()
    worst = 0.0
    for label, used in (("sparse (4 of 256 slots used)", 4), ("full (256 of 256 used)", TABLE)):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            build(root, used)
            files = read_everything(root)
            info = RdmaInfo.detect(root=root)
            assert len(info.devices) == DEVICES
            assert all(len(p.gids) == used for d in info.devices for p in d.ports)
            floor = best_of(args.repeat, lambda root=root: read_everything(root))  # type: ignore[misc]
            raw = best_of(args.repeat, lambda root=root: read_everything_raw(root))  # type: ignore[misc]
            detect = best_of(args.repeat, lambda root=root: RdmaInfo.detect(root=root))  # type: ignore[misc]
        ratio = detect / floor
        worst = max(worst, ratio)
        print(f"{label}: {DEVICES} devices x {PORTS} ports x {TABLE} GID slots, {files} files")
        print(f"  read every file once : {floor * 1000:8.1f} ms")
        print(f"  same, bare syscalls  : {raw * 1000:8.1f} ms")
        print(f"  RdmaInfo.detect()    : {detect * 1000:8.1f} ms")
        print(f"  ratio                : {ratio:8.2f}  (goal <= 1.5)")
        print(f"  ratio to bare floor  : {detect / raw:8.2f}")
    return 0 if worst <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
