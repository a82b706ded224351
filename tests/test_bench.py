"""The pure parts of ``clusterenv bench``: sizes, nccl-tests arithmetic, line rates, the verdict,
the findings and the SVG picture. The measurement itself is in tests/test_bench_netns.py."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import pytest

from clusterenv.bench import (
    LineRate,
    NodeInfo,
    Rail,
    Transfer,
    algbw_gbs,
    busbw_factor,
    busbw_gbs,
    conclude,
    format_size,
    nothing_to_draw,
    parse_size,
    parse_sizes,
    rails_in_use,
    render_svg,
    ring_transfers,
    schedule_rounds,
    score_nodes,
)
from clusterenv.bench.report import render_report
from clusterenv.nccl_log import read_nccl_log
from clusterenv.network import NetworkInterfaces
from clusterenv.rdma import RdmaInfo
from clusterenv.testing import HostBuilder
from tests.profiles import PROFILES
from tests.profiles import roce_4nodes_aihub0008 as aihub
from tests.profiles import roce_cx7_400g_cx6dx_100g as mixed_rails

REAL_LOGS = Path(__file__).parent / "data" / "nccl_logs" / "real"
SVG = "{http://www.w3.org/2000/svg}"

# -- sizes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "size"), [
    ("4096", 4096), ("256K", 256 << 10), ("1M", 1 << 20), ("16m", 16 << 20), ("1G", 1 << 30),
    ("1MiB", 1 << 20), ("2KB", 2048), (" 64M ", 64 << 20), ("0.5M", 512 << 10),
])
def test_parse_size_accepts_nccl_tests_spellings(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(("text", "message"), [
    ("16X", "expected a size such as 4096, 256K, 16M or 1G"),
    ("", "expected a size"),
    ("-1M", "expected a size"),
    ("0", "at least 4 bytes"),
    ("1001", "not a multiple of 4"),
    ("0.3K", "not a whole number of bytes"),
])
def test_parse_size_refuses_with_the_value_and_the_form(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_size(text)
    assert repr(text) in str(info.value)


def test_parse_sizes_sorts_dedups_and_reports_every_bad_entry() -> None:
    assert parse_sizes("1M,16M,256M") == (1 << 20, 16 << 20, 256 << 20)
    assert parse_sizes("16M,1M,16M,") == (1 << 20, 16 << 20)
    with pytest.raises(ValueError, match="16X") as info:
        parse_sizes("1M,16X,7")
    assert "'16X'" in str(info.value) and "'7'" in str(info.value)
    with pytest.raises(ValueError, match="at least one size"):
        parse_sizes(" , ")


@pytest.mark.parametrize("size", [4, 1000, 1536, 1 << 10, 3 << 20, 1 << 30, 4 << 40])
def test_format_size_round_trips(size: int) -> None:
    assert parse_size(format_size(size)) == size


# -- nccl-tests arithmetic -----------------------------------------------------------------------


def ring_allreduce_busiest_link(ranks: int, elements: int) -> int:
    """Simulate a ring all-reduce (reduce-scatter then all-gather, as NCCL's ring does) and count
    the elements sent over the busiest link; the data also checks the algorithm is right."""
    chunks = [[[r * 1000 + c * 10 + e for e in range(elements // ranks)]
               for c in range(ranks)] for r in range(ranks)]
    expected = [[sum(chunks[r][c][e] for r in range(ranks)) for e in range(elements // ranks)]
                for c in range(ranks)]
    sent = [0] * ranks  # elements sent by rank r to rank r+1
    for step in range(ranks - 1):  # reduce-scatter
        outgoing = [(r, (r - step) % ranks, list(chunks[r][(r - step) % ranks]))
                    for r in range(ranks)]
        for r, c, data in outgoing:
            dst = (r + 1) % ranks
            chunks[dst][c] = [a + b for a, b in zip(chunks[dst][c], data, strict=True)]
            sent[r] += len(data)
    for step in range(ranks - 1):  # all-gather of the reduced chunks
        outgoing = [(r, (r + 1 - step) % ranks, list(chunks[r][(r + 1 - step) % ranks]))
                    for r in range(ranks)]
        for r, c, data in outgoing:
            chunks[(r + 1) % ranks][c] = data
            sent[r] += len(data)
    assert all(chunks[r] == expected for r in range(ranks))
    return max(sent)


@pytest.mark.parametrize("ranks", [2, 3, 4, 8, 16])
def test_busbw_is_what_the_busiest_ring_link_carries(ranks: int) -> None:
    # nccl-tests PERFORMANCE.md: busbw = algbw * 2(n-1)/n is the rate each ring link runs at.
    elements = ranks * 6
    size = elements * 4
    seconds = 0.25
    link_bytes = ring_allreduce_busiest_link(ranks, elements) * 4
    assert busbw_gbs(algbw_gbs(size, seconds), ranks) * 1e9 * seconds == \
        pytest.approx(link_bytes)
    assert busbw_factor(ranks) == pytest.approx(2 * (ranks - 1) / ranks)


def test_nccl_tests_factors_and_units() -> None:
    assert algbw_gbs(10**9, 0.5) == pytest.approx(2.0)  # GB/s = 10^9 bytes per second
    assert busbw_factor(8, "all_gather") == pytest.approx(7 / 8)
    assert busbw_factor(8, "reduce_scatter") == pytest.approx(7 / 8)
    assert busbw_factor(8, "broadcast") == 1.0
    assert busbw_factor(1) == 0.0
    with pytest.raises(ValueError, match="ranks=0"):
        busbw_factor(0)
    with pytest.raises(ValueError, match="positive"):
        algbw_gbs(1024, 0.0)


# -- line rate -----------------------------------------------------------------------------------


def test_gloo_line_rate_is_the_socket_interfaces_speed(tmp_path: Path) -> None:
    host = (HostBuilder(tmp_path).loopback()
            .interface("eth0", addresses=["172.20.0.5/16"], speed=10000)
            .interface("ens1", addresses=["10.65.0.2/24"], speed=100000)
            .interface("ens2", addresses=["10.65.1.2/24"], speed=100000)
            .interface("ens3", addresses=["10.65.2.2/24"], speed=None))
    network = NetworkInterfaces.detect(root=host.root)
    rdma = RdmaInfo.detect(root=host.root)

    def rate(transport: str, cluster: str | None = "ens1", **env: str) -> LineRate:
        return rails_in_use(transport=transport, environ=env, network=network, rdma=rdma,
                            cluster_interface=cluster)

    assert rate("gloo").gbps == 100.0
    assert rate("gloo", GLOO_SOCKET_IFNAME="ens1,ens2").gbps == 200.0
    # NCCL's socket transport uses every interface its filter selects: "ens" takes three, one
    # without a speed, so the sum is a lower bound.
    socket = rate("Socket", NCCL_SOCKET_IFNAME="ens")
    assert [r.name for r in socket.rails] == ["ens1", "ens2", "ens3"]
    assert socket.gbps == 200.0 and not socket.complete
    assert rate("Socket", NCCL_SOCKET_IFNAME="^eth,lo,ens2,ens3").gbps == 100.0
    assert rate("gloo", cluster=None).gbps is None
    assert rate("gloo", GLOO_SOCKET_IFNAME="nope0").rails == (Rail("nope0", "interface", None),)


def test_nccl_ib_line_rate_sums_the_rails_its_log_names(tmp_path: Path) -> None:
    # The real NCCL 2.27 log of tpgds-aihub0008 and the snapshot of the same node's capture.
    log = read_nccl_log(REAL_LOGS / "nccl-info-h100-roce-2.27-ofi-plugin-fallback-ib.txt")
    rank = next(r for r in log.ranks if r.host == "tpgds-aihub0008")
    root = PROFILES[aihub.NAME].build(tmp_path)
    rate = rails_in_use(transport=rank.transport or "", environ={},
                        network=NetworkInterfaces.detect(root=root),
                        rdma=RdmaInfo.detect(root=root), cluster_interface=None,
                        nccl_devices=rank.devices)
    assert [r.name for r in rate.rails] == [f"{d}:1" for d in aihub.NCCL_IB_HCA]
    expected = sum(p.rate_gbps or 0 for d in RdmaInfo.detect(root=root).devices
                   if d.name in aihub.NCCL_IB_HCA for p in d.ports)
    assert rate.gbps == expected and rate.complete


def test_nccl_ib_line_rate_without_a_log_follows_nccl_ib_hca(tmp_path: Path) -> None:
    root = PROFILES[mixed_rails.NAME].build(tmp_path)
    network, rdma = NetworkInterfaces.detect(root=root), RdmaInfo.detect(root=root)
    fast = [ca.name for ca in mixed_rails.CAS if ca.rate == 400]

    def rate(**env: str) -> float | None:
        return rails_in_use(transport="IB", environ=env, network=network, rdma=rdma,
                            cluster_interface=None).gbps

    assert rate(NCCL_IB_HCA="=" + ",".join(f"{name}:1" for name in fast)) == 400.0 * len(fast)
    assert rate() == sum(ca.rate for ca in mixed_rails.CAS)
    assert rate(NCCL_IB_HCA="=mlx5_1") == 100.0


# -- the verdict ---------------------------------------------------------------------------------


def test_ring_transfers_cover_both_directions_and_rounds_never_share_a_node() -> None:
    assert ring_transfers(1) == []
    assert ring_transfers(2) == [(0, 1), (1, 0)]
    assert sorted(ring_transfers(3)) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    for nodes in range(2, 17):
        pairs = ring_transfers(nodes)
        rounds = schedule_rounds(pairs)
        assert sorted(p for r in rounds for p in r) == sorted(pairs)
        for members in rounds:
            ends = [n for pair in members for n in pair]
            assert len(ends) == len(set(ends)), (nodes, members)
        assert len(rounds) <= (4 if nodes % 2 == 0 else 6), (nodes, len(rounds))


def measured(nodes: int, gbs: dict[tuple[int, int], float], default: float = 2.0,
             size: int = 1 << 22) -> list[Transfer]:
    return [Transfer(s, d, size, size / (gbs.get((s, d), default) * 1e9), 5)
            for s, d in ring_transfers(nodes)]


@pytest.mark.parametrize("nodes", [3, 4, 8])
def test_a_node_that_sends_slowly_is_named_and_only_it(nodes: int) -> None:
    bad = nodes - 1
    slow = {(s, d): 0.005 for s, d in ring_transfers(nodes) if s == bad}
    scores = score_nodes(range(nodes), measured(nodes, slow), min_fraction=0.5)
    assert [s.node for s in scores if s.slow] == [bad]
    assert scores[bad].send_gbs == pytest.approx(0.005)
    assert scores[bad].median_gbs == pytest.approx(2.0)


@pytest.mark.parametrize("nodes", [3, 5])
def test_a_node_that_receives_slowly_is_named_and_only_it(nodes: int) -> None:
    slow = {(s, d): 0.1 for s, d in ring_transfers(nodes) if d == 1}
    scores = score_nodes(range(nodes), measured(nodes, slow), min_fraction=0.5)
    assert [s.node for s in scores if s.slow] == [1]
    assert scores[1].recv_gbs == pytest.approx(0.1)


def test_a_noisy_transfer_beside_a_slow_node_names_only_the_slow_node() -> None:
    # Measured on the simulated cluster: node 2 throttled to 40 Mbit/s, and one transfer into
    # node 0 caught at a busy moment (3.1 Gb/s against ~13). Against "the median of the other
    # two" (their mean, dragged down by node 2) node 0 looked slow too; it is the median node.
    gbit = {(0, 1): 13.4, (1, 2): 12.8, (2, 0): 0.0383, (1, 0): 3.1, (2, 1): 0.0382,
            (0, 2): 13.8}
    scores = score_nodes(range(3), measured(3, {k: v / 8 for k, v in gbit.items()}),
                         min_fraction=0.5)
    assert [s.node for s in scores if s.slow] == [2]


def test_healthy_and_uniformly_slow_clusters_name_nobody() -> None:
    jitter = {(0, 1): 1.6, (1, 2): 2.4, (2, 0): 1.9}  # +-20 %: noise, not a slow node
    assert not any(s.slow for s in score_nodes(range(3), measured(3, jitter), min_fraction=0.5))
    everyone = score_nodes(range(4), measured(4, {}, default=0.01), min_fraction=0.5)
    assert not any(s.slow for s in everyone)


def test_min_fraction_is_the_threshold() -> None:
    slow = {(s, d): 0.9 for s, d in ring_transfers(3) if s == 2}
    assert not any(s.slow for s in score_nodes(range(3), measured(3, slow), min_fraction=0.4))
    assert [s.node for s in score_nodes(range(3), measured(3, slow), min_fraction=0.5)
            if s.slow] == [2]


def test_two_nodes_with_one_slow_direction_name_both_ends() -> None:
    scores = score_nodes(range(2), measured(2, {(1, 0): 0.1}), min_fraction=0.5)
    assert [s.slow for s in scores] == [True, True]
    assert not any(s.slow for s in score_nodes(range(2), measured(2, {}), min_fraction=0.5))


def test_one_node_has_no_links_and_no_verdict() -> None:
    (score,) = score_nodes([0], [], min_fraction=0.5)
    assert score.gbs is None and not score.slow


# -- conclusions and findings --------------------------------------------------------------------


def node(n: int, transport: str = "gloo", speed: float | None = 10.0) -> NodeInfo:
    return NodeInfo(n, f"node-{n}", f"10.65.0.{2 + n}", "ens1", transport,
                    LineRate((Rail("ens1", "interface", speed),)), (n,))


def test_conclude_names_the_slow_node_with_its_address_interface_and_numbers() -> None:
    slow = {(s, d): 0.005 for s, d in ring_transfers(3) if s == 2}
    result = conclude(backend="gloo", device="cpu", world_size=3,
                      nodes=[node(0), node(1), node(2, speed=1.0)],
                      sizes=[(1 << 20, 0.01, 5), (1 << 16, 0.001, 5)],
                      transfers=measured(3, slow), min_fraction=0.5)
    assert result.slow_nodes == (2,) and result.exit_code == 1
    assert result.line_rate_gbps == 1.0  # the slowest node's line rate bounds a collective
    assert [s.size for s in result.sizes] == [1 << 16, 1 << 20]
    big = result.sizes[1]
    assert big.algbw_gbs == pytest.approx((1 << 20) / 0.01 / 1e9)
    assert big.busbw_gbs == pytest.approx(big.algbw_gbs * 4 / 3)
    assert big.busbw_fraction == pytest.approx(big.busbw_gbs * 8 / 1.0)
    (finding,) = [f for f in result.findings if f.severity == "error"]
    assert finding.code == "bench-slow-node"
    assert "node 2 (node-2, 10.65.0.4, ens1)" in finding.title
    assert "0.04 Gb/s" in finding.title and "16 Gb/s" in finding.title
    assert "line rate 1 Gb/s" in finding.title
    assert "ethtool ens1" in finding.fix
    data = result.to_dict()
    assert data["slow_nodes"] == [2] and data["line_rate_gbps"] == 1.0
    assert [link["slow"] for link in data["links"]] == [False, False, True]
    assert data["links"][2]["fraction"] == pytest.approx(0.005 * 8 / 1.0)
    assert {"sizes", "links", "transfers", "nodes", "findings"} <= set(data)


def test_conclude_says_which_transport_the_slow_node_used() -> None:
    slow = {(s, d): 0.5 for s, d in ring_transfers(4) if s == 3}
    result = conclude(backend="nccl", device="cuda", world_size=32,
                      nodes=[node(0, "IB"), node(1, "IB"), node(2, "IB"), node(3, "Socket")],
                      sizes=[(1 << 30, 0.05, 20)], transfers=measured(4, slow, default=45.0),
                      min_fraction=0.5)
    assert result.slow_nodes == (3,)
    slow_node = next(f for f in result.findings if f.code == "bench-slow-node")
    assert "it ran over Socket while the others used IB" in slow_node.title
    mixed = next(f for f in result.findings if f.code == "bench-transport-mixed")
    assert mixed.severity == "warning" and "Socket: node 3" in mixed.title


def test_a_bad_path_between_two_healthy_nodes_is_a_slow_link() -> None:
    result = conclude(backend="gloo", device="cpu", world_size=4,
                      nodes=[node(n) for n in range(4)], sizes=[],
                      transfers=measured(4, {(1, 2): 0.2}), min_fraction=0.5)
    assert result.slow_nodes == ()
    (finding,) = result.findings
    assert finding.code == "bench-slow-link" and "node 1" in finding.title \
        and "node 2" in finding.title
    assert finding.severity == "warning" and result.exit_code == 0


def test_a_healthy_run_exits_0() -> None:
    result = conclude(backend="gloo", device="cpu", world_size=3,
                      nodes=[node(n) for n in range(3)], sizes=[(1 << 20, 0.001, 3)],
                      transfers=measured(3, {}), min_fraction=0.5)
    assert result.exit_code == 0 and result.slow_nodes == () and not result.findings


# -- measurements that did not measure what their number claims ---------------------------------
# Seen on a real H200 host: one rank's "all-reduce" of 1 GiB took 18 us (NCCL moves nothing on
# one rank), which read as 60,000 GB/s of algorithm bandwidth and 0 GB/s of bus bandwidth.


@pytest.mark.parametrize(("backend", "device", "seconds"),
                         [("nccl", "cuda", 18e-6), ("gloo", "cpu", 2e-3)])
def test_one_rank_reports_no_bandwidth_and_says_why(backend: str, device: str,
                                                    seconds: float) -> None:
    result = conclude(backend=backend, device=device, world_size=1, nodes=[node(0, speed=400.0)],
                      sizes=[(1 << 20, seconds, 20), (1 << 30, seconds, 20)], transfers=[],
                      min_fraction=0.5)
    assert result.sizes == ()  # no algbw of 60,000 GB/s, no busbw of 0
    assert [f.code for f in result.findings] == ["bench-one-rank"]  # not "0% of the line rate"
    (finding,) = result.findings
    assert finding.severity == "info" and result.exit_code == 0
    assert "moves no data" in finding.title and "--nproc-per-node" in finding.fix
    text = render_report(result)
    assert "GB/s" not in text.split("findings")[0] and "algbw" not in text
    assert "moves no data" in text


@pytest.mark.parametrize("ranks", [2, 8])
def test_one_node_is_never_compared_with_its_nics_line_rate(ranks: int) -> None:
    # Eight GPUs of one node all-reduce over NVLink or PCIe: a slow PCIe box at 20 GB/s of bus
    # bandwidth is not "4% of the line rate" of NICs the collective never used.
    one = NodeInfo(0, "node-0", "10.65.0.2", "ibp1", "IB",
                   LineRate((Rail("mlx5_0:1", "rdma", 400.0),)), tuple(range(ranks)))
    busbw = 20.0
    seconds = (1 << 30) / (busbw / busbw_factor(ranks) * 1e9)
    result = conclude(backend="nccl", device="cuda", world_size=ranks, nodes=[one],
                      sizes=[(1 << 30, seconds, 20)], transfers=[], min_fraction=0.5)
    (size,) = result.sizes
    assert size.busbw_gbs == pytest.approx(busbw) and size.busbw_fraction is None
    assert not [f for f in result.findings if f.code == "bench-below-line-rate"]
    assert result.line_rate_gbps == 400.0  # still shown: it is the node's fact
    (row,) = [line.split() for line in render_report(result).splitlines()
              if line.startswith("1G ")]
    assert row[5] == "-"  # the "of line" column


def test_across_nodes_the_line_rate_still_judges_the_all_reduce() -> None:
    nodes = [NodeInfo(n, f"node-{n}", f"10.65.0.{2 + n}", "ibp1", "IB",
                      LineRate((Rail("mlx5_0:1", "rdma", 400.0),)), (2 * n, 2 * n + 1))
             for n in range(2)]
    busbw = 10.0  # GB/s: 80 Gb/s against 400
    seconds = (1 << 30) / (busbw / busbw_factor(4) * 1e9)
    result = conclude(backend="nccl", device="cuda", world_size=4, nodes=nodes,
                      sizes=[(1 << 30, seconds, 20)], transfers=measured(2, {}),
                      min_fraction=0.5)
    assert result.sizes[0].busbw_fraction == pytest.approx(0.2)
    (finding,) = [f for f in result.findings if f.code == "bench-below-line-rate"]
    assert "20% of the line rate" in finding.title


# -- the picture ---------------------------------------------------------------------------------


def picture(result_nodes: Sequence[NodeInfo], slow_node: int | None,
            sizes: Sequence[int]) -> ET.Element:
    n = len(result_nodes)
    slow = {(s, d): 0.01 for s, d in ring_transfers(n) if s == slow_node}
    result = conclude(backend="gloo", device="cpu", world_size=n, nodes=result_nodes,
                      sizes=[(s, s / 1e9, 3) for s in sizes], transfers=measured(n, slow),
                      min_fraction=0.5)
    text = render_svg(result)
    assert "href" not in text and "<script" not in text  # self-contained, nothing to fetch
    return ET.fromstring(text)  # noqa: S314 - our own output, not untrusted input


def test_svg_has_one_point_per_size_and_one_bar_per_node_with_slow_nodes_marked() -> None:
    sizes = [1 << 18, 1 << 20, 1 << 22, 1 << 24]
    root = picture([node(n) for n in range(4)], 1, sizes)
    assert root.tag == f"{SVG}svg"
    points = root.findall(f".//{SVG}circle[@class='point']")
    assert [int(p.attrib["data-size"]) for p in points] == sizes
    bars = root.findall(f".//{SVG}rect[@class='bar']")
    assert [b.attrib["data-node"] for b in bars] == ["0", "1", "2", "3"]
    assert [b.attrib["data-slow"] for b in bars] == ["false", "true", "false", "false"]
    assert bars[1].attrib["fill"] != bars[0].attrib["fill"]
    labels = root.findall(f".//{SVG}text[@class='slow-label']")
    assert [label.attrib["data-node"] for label in labels] == ["1"]
    # Heights are to scale: the slow bar is 0.01/2 of the others.
    heights = [float(b.attrib["height"]) for b in bars]
    assert heights[1] == pytest.approx(heights[0] * 0.005, abs=0.1)
    # Bus bandwidth rises with size here (fixed 1 GB/s algbw): points are on one level.
    ys = [float(p.attrib["cy"]) for p in points]
    assert max(ys) - min(ys) < 1
    assert len(root.findall(f".//{SVG}line[@class='bar-line-rate']")) == 4


def test_svg_escapes_names_and_handles_one_size_and_no_line_rate() -> None:
    nodes = [NodeInfo(n, f"<node&{n}>", None, None, "gloo", LineRate(()), (n,))
             for n in range(3)]
    root = picture(nodes, None, [1 << 20])
    assert len(root.findall(f".//{SVG}circle[@class='point']")) == 1
    assert not root.findall(f".//{SVG}line[@class='line-rate']")
    assert all(math.isfinite(float(p.attrib["cx"]))
               for p in root.findall(f".//{SVG}circle"))


@pytest.mark.parametrize("nodes", [3, 16])
def test_svg_writes_each_bars_value_and_names_its_node_by_host_and_address(nodes: int) -> None:
    # Tooltips are lost in a PNG or a paste: the numbers and names are written out, across
    # wide bars and turned under narrow ones.
    root = picture([node(n) for n in range(nodes)], 2, [1 << 20, 1 << 22])
    bars = root.findall(f".//{SVG}rect[@class='bar']")
    values = {v.attrib["data-node"]: v.text for v in root.findall(f".//{SVG}text[@class='value']")
              if "data-node" in v.attrib}
    for bar in bars:
        assert values[bar.attrib["data-node"]] == f"{float(bar.attrib['data-gbps']):.3g}"
    labels = [" ".join(t.text or "" for t in root.findall(
        f".//{SVG}text[@class='node-label'][@data-node='{n}']")) for n in range(nodes)]
    for n, label in enumerate(labels):
        assert f"node {n}" in label and f"node-{n}" in label and f"10.65.0.{2 + n}" in label
    points = {t.attrib["data-size"]: t.text for t in root.findall(f".//{SVG}text[@class='value']")
              if "data-size" in t.attrib}
    for point in root.findall(f".//{SVG}circle[@class='point']"):
        assert points[point.attrib["data-size"]] == \
            f"{float(point.attrib['data-busbw-gbps']):.3g}"
    assert [t.attrib["data-node"] for t in root.findall(f".//{SVG}text[@class='slow-label']")] \
        == ["2"]


def test_svg_of_one_node_draws_no_empty_panel_and_one_rank_no_picture() -> None:
    one_node = conclude(backend="gloo", device="cpu", world_size=2,
                        nodes=[NodeInfo(0, "node-0", "10.65.0.2", "ens1", "gloo",
                                        LineRate((Rail("ens1", "interface", 10.0),)), (0, 1))],
                        sizes=[(1 << 20, 1e-3, 3)], transfers=[], min_fraction=0.5)
    root = ET.fromstring(render_svg(one_node))  # noqa: S314 - our own output
    title = root.findtext(f"{SVG}title") or ""
    assert title.startswith("clusterenv bench: 1 node, 2 ranks, gloo"), title
    assert len(root.findall(f".//{SVG}circle[@class='point']")) == 1
    assert not root.findall(f".//{SVG}rect[@class='bar']")
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert not any("link" in t for t in texts), texts
    assert not any("line rate" in t for t in texts)  # a NIC's rate: not this all-reduce's
    assert nothing_to_draw(one_node) is None
    one_rank = conclude(backend="gloo", device="cpu", world_size=1, nodes=[node(0)],
                        sizes=[(1 << 20, 1e-6, 3)], transfers=[], min_fraction=0.5)
    assert nothing_to_draw(one_rank) == "one rank on one node measured nothing"
    report = render_report(one_rank)
    assert report.splitlines()[1].startswith("nothing to measure across nodes here")


def test_a_result_survives_json() -> None:
    import json

    from clusterenv.bench import BenchResult

    slow = {(s, d): 0.005 for s, d in ring_transfers(3) if s == 2}
    result = conclude(backend="gloo", device="cpu", world_size=3,
                      nodes=[node(0), node(1), node(2)], sizes=[(1 << 20, 0.01, 5)],
                      transfers=measured(3, slow), min_fraction=0.5, elapsed_s=3.5,
                      truncated=True)
    assert BenchResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_a_worker_reads_the_transport_from_its_own_nccl_debug_file(tmp_path: Path) -> None:
    # The worker side of "which transport NCCL used", on the real NCCL 2.27 log.
    import os
    import shutil
    import socket

    from clusterenv.bench.placement import nccl_transport

    host = socket.gethostname()
    shutil.copy(REAL_LOGS / "nccl-info-h100-roce-2.27-ofi-plugin-fallback-ib.txt",
                tmp_path / f"nccl.{host}.{os.getpid()}.log")
    pattern = str(tmp_path / "nccl.%h.%p.log")
    transport, devices = nccl_transport({"NCCL_DEBUG_FILE": pattern}, host)
    assert transport == "IB"
    assert devices[:2] == ("mlx5_0:1/RoCE", "mlx5_1:1/RoCE") and len(devices) == 8
    assert nccl_transport({}, host) == ("nccl", ())
    assert nccl_transport({"NCCL_DEBUG_FILE": str(tmp_path / "none.%p")}, host) == ("nccl", ())
