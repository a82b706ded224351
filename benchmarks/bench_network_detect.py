"""How long NetworkInterfaces.detect(), route_interface() and capture() take.

Times detection on this host (sysfs plus getifaddrs), on a snapshot of a large node (64
interfaces: 16 rails, bonds, bridges, a veth per container), route lookups in a 5,000-route
table, and a capture of the large snapshot. Detection runs once per process start in a training
job, so the goal is milliseconds, not microseconds.

Baseline, same run: reading every file under the snapshot's ``sys/class/net`` once, plus its
``host.json``. Goal (exit 1 when missed): detection on the big snapshot at most 1.5x that
baseline (it reads fewer files than the baseline, but parses them).

Run: ``python benchmarks/bench_network_detect.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from clusterenv.capture import capture
from clusterenv.network import NetworkInterfaces, route_interface
from clusterenv.testing import HostBuilder

RAILS = 16
CONTAINERS = 40
ROUTES = 5000


def build(root: Path) -> None:
    """A big node: lo, eth0, 16 rails, 2 bonded ports, docker0 with 40 veths."""
    host = HostBuilder(root).loopback().interface("eth0", addresses=["172.20.0.5/16"])
    for rail in range(RAILS):
        host.interface(
            f"ens{rail + 1}", addresses=[f"10.{rail}.0.2/24", f"fd00:{rail}::2/64"], mtu=9000
        )
    host.interface("ens20f0np0").interface("ens20f1np1")
    host.interface(
        "bond0", kind="bond", physical=False, slaves=["ens20f0np0", "ens20f1np1"],
        addresses=["10.82.0.2/29"],
    )
    veths = [f"veth{n:04x}" for n in range(CONTAINERS)]
    host.interface("docker0", kind="bridge", physical=False, bridge_ports=veths,
                   addresses=["172.17.0.1/16"])
    for veth in veths:
        host.interface(veth, physical=False, speed=10000)
    lines = ["Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"]
    for n in range(ROUTES):
        destination = (10 | (n % 250) << 8 | (n // 250) << 16).to_bytes(4, "big")
        lines.append(
            f"ens{n % RAILS + 1}\t{int.from_bytes(destination, 'little'):08X}\t00000000\t0001"
            "\t0\t0\t0\t00FFFFFF\t0\t0\t0"
        )
    host.file("proc/net/route", "\n".join(lines))


GOAL_RATIO = 1.5


def read_everything(root: Path) -> int:
    """Read every file under ``sys/class/net`` (following the interface links) and host.json."""
    count = 0
    for interface in (root / "sys" / "class" / "net").iterdir():
        for path in interface.resolve().rglob("*"):
            if path.is_file():
                path.read_bytes()
                count += 1
    host = root / ".clusterenv" / "host.json"
    if host.is_file():
        host.read_bytes()
    return count


def timed(label: str, func: Callable[[], object], repeat: int) -> float:
    """Print and return the median seconds of ``func`` over ``repeat`` runs."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    print(
        f"{label:44} median {statistics.median(samples) * 1e3:8.2f} ms   "
        f"min {min(samples) * 1e3:8.2f} ms"
    )
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "big"
        build(root)
        count = len(NetworkInterfaces.detect(root=root))
        print(f"live host: {len(NetworkInterfaces.detect())} interfaces; snapshot: {count}")
        timed("NetworkInterfaces.detect() (this host)", NetworkInterfaces.detect, args.repeat)
        floor = timed("baseline: read every file of the snapshot", lambda: read_everything(root),
                      args.repeat)
        detect = timed("NetworkInterfaces.detect(root=big)",
                       lambda: NetworkInterfaces.detect(root=root), args.repeat)
        timed("route_interface() in 5,000 routes", lambda: route_interface("10.7.3.9", root=root),
              args.repeat)
        counter = iter(range(10**6))
        timed("capture(root=big)", lambda: capture(Path(tmp) / f"c{next(counter)}", root=root),
              max(3, args.repeat // 4))
    ratio = detect / floor
    print(f"ratio: {ratio:.2f} (goal <= {GOAL_RATIO:g})")
    return 0 if ratio <= GOAL_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
