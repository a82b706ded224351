"""``clusterenv bench`` on a simulated 3-node cluster (Gloo over ``ens1``), healthy and with
every ``ens1`` held to a known rate by ``tc … tbf``: node 2's at 40 Mbit/s, the others' at
1 Gbit/s.

Every node runs the real CLI, which starts a real torchrun with the bench worker. The healthy
cluster exits 0 with no slow node on every node; the throttled one exits 1 on every node and
names node 2, and every link measures within 25 % of the rate tc holds it to: the truth comes
from the kernel, not from clusterenv. A rate is used rather than the veth's own speed because
the veth "link" is CPU time: under load its bandwidth halves within seconds, while 1 Gbit/s
stays far below what even a loaded machine moves. Sizes are small (a few MiB), one process
per node, so the test stays fast.

Needs root, ``ip netns``, ``tc`` (iproute2) and torch: skips with the reason elsewhere, fails
under ``CI=true``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.simcluster import ClusterFactory, NodeResult, SimCluster, SimNode

pytestmark = [pytest.mark.netns, pytest.mark.torch, pytest.mark.usefixtures("torch_required")]

REPO = Path(__file__).resolve().parents[1]
THROTTLE_MBIT = 40
LINK_SIZE = "2M"
SIZES = f"256K,{LINK_SIZE}"
TOLERANCE = 0.25
FAST_MBIT = 1000
#: The bench runs at this priority, so that other work on a shared machine disturbs it less.
NICE = ["nice", "-n", "-10"]


def bench(cluster: SimCluster, tmp_path: Path, tag: str) -> tuple[list[NodeResult], list[Any]]:
    results = cluster.run_all(
        lambda node: [*NICE, sys.executable, "-m", "clusterenv", "bench", "--json",
                      "--sizes", SIZES, "--iters", "5", "--time-limit", "60",
                      "--plot", str(tmp_path / f"{tag}-{node.rank}.svg")],
        timeout=120, cwd=REPO,
    )
    reports = []
    for result in results:
        assert result.killed is None and result.returncode in (0, 1), describe(results)
        reports.append(json.loads(result.stdout))
    return results, reports


def describe(results: list[NodeResult]) -> str:
    return "\n\n".join(r.describe(60) for r in results)


def link_gbps(report: dict[str, Any], src: int, dst: int) -> float:
    (transfer,) = [t for t in report["transfers"] if t["src"] == src and t["dst"] == dst]
    return float(transfer["gbs"]) * 8


def within(measured: float, reference: float) -> bool:
    return abs(measured - reference) <= TOLERANCE * reference


def limit(tc: str, node: SimNode, mbit: int) -> None:
    """Hold ``node``'s ``ens1`` egress to ``mbit`` Mbit/s (a token bucket; bursts of 64 KB)."""
    subprocess.run([tc, "-n", node.netns, "qdisc", "replace", "dev", "ens1", "root", "tbf",
                    "rate", f"{mbit}mbit", "burst", "64kb", "latency", "400ms"], check=True)


def test_bench_names_the_throttled_node_on_every_node(
    sim_cluster: ClusterFactory, tmp_path: Path
) -> None:
    tc = require_tool("tc", "apt-get install iproute2")
    cluster = sim_cluster(3, trainers=1)

    results, reports = bench(cluster, tmp_path, "healthy")
    text = describe(results)
    assert [r.returncode for r in results] == [0, 0, 0], text
    for report in reports:
        assert report["slow_nodes"] == [], text
        assert report["num_nodes"] == 3 and report["backend"] == "gloo"
        assert [link["interface"] for link in report["links"]] == ["ens1"] * 3, text
        assert len(report["transfers"]) == 6 and len(report["sizes"]) == 2
        # veth reports speed 10000 (Mb/s): the line rate is that interface's speed.
        assert report["line_rate_gbps"] == 10.0
        assert not [f for f in report["findings"] if f["severity"] == "error"], text

    for node, mbit in zip(cluster.nodes, (FAST_MBIT, FAST_MBIT, THROTTLE_MBIT), strict=True):
        limit(tc, node, mbit)
    results, reports = bench(cluster, tmp_path, "throttled")
    text = describe(results)
    assert [r.returncode for r in results] == [1, 1, 1], text
    for result, report in zip(results, reports, strict=True):
        assert report["slow_nodes"] == [2], text
        (finding,) = [f for f in report["findings"] if f["code"] == "bench-slow-node"]
        assert finding["title"].startswith("node 2 (node-2, 10.65.0.4, ens1) is slow"), finding
        assert [link["slow"] for link in report["links"]] == [False, False, True]
        assert "starting gloo" in result.stderr  # progress on stderr, JSON alone on stdout
    # Each direction is limited by its sender's bucket: what node 2 sends measures its 40 Mbit/s;
    # what the others send stays under their 1 Gbit/s and far above node 2's. Below 1 Gbit/s it
    # may fall further than the tolerance: the acknowledgements of a transfer to node 2 leave
    # through node 2's 40 Mbit/s bucket, and the bench's own CPU time counts on a busy 2-core
    # machine (0->2 measured 704 Mb/s once, in a CI run).
    for src, dst in ((0, 1), (1, 0), (0, 2), (1, 2), (2, 0), (2, 1)):
        if (src, dst) not in {(t["src"], t["dst"]) for t in reports[0]["transfers"]}:
            continue
        rate = (THROTTLE_MBIT if src == 2 else FAST_MBIT) / 1000
        measured = link_gbps(reports[0], src, dst)
        print(f"link {src}->{dst}: {measured * 1000:.1f} Mb/s, tc holds it to {rate * 1000:g}")
        if src == 2:
            assert within(measured, rate), (src, dst, measured, rate, text)
        else:
            assert 10 * THROTTLE_MBIT / 1000 <= measured <= (1 + TOLERANCE) * rate, (
                src, dst, measured, rate, text)

    # The picture each node wrote: one point per size, one bar per node, node 2 marked slow.
    svg = "{http://www.w3.org/2000/svg}"
    root = ET.parse(tmp_path / "throttled-1.svg").getroot()  # noqa: S314 - written by the test
    assert len(root.findall(f".//{svg}circle[@class='point']")) == 2
    bars = root.findall(f".//{svg}rect[@class='bar']")
    assert [b.attrib["data-slow"] for b in bars] == ["false", "false", "true"]


def test_a_node_that_never_joins_ends_in_exit_2_within_the_time_limit(
    sim_cluster: ClusterFactory,
) -> None:
    cluster = sim_cluster(2, trainers=1)
    result = cluster.nodes[0].run(
        [sys.executable, "-m", "clusterenv", "bench", "--sizes", "64K", "--time-limit", "5"],
        timeout=60, cwd=REPO,
    )
    assert result.returncode == 2 and result.killed is None, result.describe()
    assert "did not finish within --time-limit 5 s" in result.stderr \
        or "the workers did not report a result" in result.stderr, result.describe()
    assert "Traceback (most recent call last)" not in result.stderr.split("torchrun")[0]
    assert result.duration_s < 5 + 10 + 10, result.describe()
