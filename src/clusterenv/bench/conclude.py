"""From raw timings to a :class:`~clusterenv.bench.BenchResult`: bandwidths, verdict, findings.

Pure: the worker gathers the numbers, this module judges them, so the judgement is tested
without a process group.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from clusterenv._shell import Placeholder, code, command
from clusterenv.bench.model import BenchResult, LinkResult, NodeInfo, SizeResult
from clusterenv.bench.units import algbw_gbs, busbw_gbs, format_size, line_fraction, median
from clusterenv.bench.verdict import NodeScore, Transfer, score_nodes, slow_transfers
from clusterenv.findings import Finding, codes_of

__all__ = [
    "CODES",
    "conclude",
]

#: Every finding code ``bench`` reports: the ``"bench"`` codes of
#: :data:`clusterenv.findings.CODES`.
CODES: tuple[str, ...] = codes_of("bench")

#: A timing: ``(size in bytes, median seconds, timed iterations)``.
Timing = tuple[int, float, int]


def _gbit(gbs: float | None) -> str:
    return "unknown" if gbs is None else f"{gbs * 8:.3g} Gb/s"


def _rate(gbps: float | None) -> str:
    return "unknown" if gbps is None else f"{gbps:g} Gb/s"


def _where(info: NodeInfo) -> str:
    parts = [info.hostname, info.address or "address unknown", info.interface or "interface ?"]
    return f"node {info.node} ({', '.join(parts)})"


def _majority_transport(nodes: Sequence[NodeInfo], skip: int) -> str | None:
    counts = Counter(n.transport for n in nodes if n.node != skip)
    return counts.most_common(1)[0][0] if counts else None


def _slow_node_finding(info: NodeInfo, score: NodeScore, nodes: Sequence[NodeInfo],
                       min_fraction: float) -> Finding:
    others = _majority_transport(nodes, info.node)
    ratio = (score.gbs / score.median_gbs
             if score.gbs is not None and score.median_gbs else None)
    how = f"{ratio:.0%} of" if ratio is not None else "below"
    title = (f"{_where(info)} is slow: its link carries {_gbit(score.gbs)}, {how} the "
             f"nodes' median {_gbit(score.median_gbs)} (line rate "
             f"{_rate(info.line_rate.gbps)})")
    if len(nodes) == 2:
        title += "; with two nodes a slow direction cannot be pinned on one end"
    if others is not None and info.transport != others:
        title += f"; it ran over {info.transport} while the others used {others}"
    rails = ", ".join(f"{r.name} {_rate(r.gbps)}" for r in info.line_rate.rails) or "none known"
    evidence = (
        f"sent at best {_gbit(score.send_gbs)}, received at best {_gbit(score.recv_gbs)}",
        f"median of the nodes {_gbit(score.median_gbs)}; threshold --min-fraction "
        f"{min_fraction:g}",
        f"transport {info.transport}; rails {rails}",
    )
    iface = info.interface or Placeholder("<its cluster interface>")
    fix = (f"on node {info.node}: run `clusterenv doctor`; check the link "
           f"({code(command('ethtool', iface))}: speed, duplex, errors) and shaping "
           f"({code(command('tc', 'qdisc', 'show', 'dev', iface))}); with NCCL, check "
           "that it used the RDMA ports (`NCCL_DEBUG=INFO`, then `clusterenv nccl-log`); "
           "drain the node if it stays slow")
    return Finding.of("bench-slow-node", title, evidence, fix)


def _slow_link_finding(transfer: Transfer, by_node: dict[int, NodeInfo], typical: float,
                       min_fraction: float) -> Finding:
    src, dst = by_node[transfer.src], by_node[transfer.dst]
    # A warning: one direction between two nodes is a single measurement, and a moment of
    # contention on either host looks the same as a bad cable.
    return Finding.of(
        "bench-slow-link",
        f"the transfer from {_where(src)} to {_where(dst)} carries {_gbit(transfer.gbs)}, "
        f"below {min_fraction:g} × the median transfer {_gbit(typical)}; both nodes are "
        "fast towards their other neighbours",
        (f"{format_size(transfer.size)} in {transfer.seconds * 1e3:.3g} ms "
         f"(median of {transfer.iterations})",),
        "check the path between these two nodes: cables, switch ports, routes "
        f"({code(command('ip', 'route', 'get', dst.address or Placeholder('<its address>')))} "
        f"on node {src.node})",
    )


def conclude(
    *,
    backend: str,
    device: str,
    world_size: int,
    nodes: Sequence[NodeInfo],
    sizes: Sequence[Timing],
    transfers: Sequence[Transfer],
    min_fraction: float,
    elapsed_s: float = 0.0,
    truncated: bool = False,
) -> BenchResult:
    """Bandwidths in nccl-tests' terms, each node's link score, the verdict and its findings.

    Args:
        backend: ``"gloo"`` or ``"nccl"``.
        device: ``"cpu"`` or ``"cuda"``.
        world_size: Ranks in the run.
        nodes: One per node, in node order.
        sizes: All-reduce timings per size; ignored with one rank, where an all-reduce moves
            no data (the result then has no sizes and a ``bench-one-rank`` finding).
        transfers: Point-to-point transfers between the nodes' first ranks.
        min_fraction: A node below this fraction of the others' median is slow, e.g. ``0.5``.
        elapsed_s: Wall time of the run.
        truncated: Whether the time limit cut iterations.

    Returns:
        The result, with ``slow_nodes`` and findings filled in.
    """
    known_rates = [n.line_rate.gbps for n in nodes if n.line_rate.gbps is not None]
    line_rate = min(known_rates) if known_rates else None
    # Only an all-reduce that crossed nodes ran over the links the line rate describes; on one
    # node it ran over NVLink, PCIe or shared memory, and a fraction of the NICs' rate would be
    # a number about links it never used.
    crossed = line_rate if len(nodes) > 1 else None
    size_results = []
    # One rank: an all-reduce moves no data (NCCL returns at once), so a "bandwidth" would be
    # the size over the call's overhead: tens of TB/s, measured on nothing.
    for size, seconds, iterations in sorted(sizes) if world_size > 1 else ():
        algbw = algbw_gbs(size, seconds)
        busbw = busbw_gbs(algbw, world_size)
        size_results.append(SizeResult(size, seconds, iterations, algbw, busbw,
                                       line_fraction(busbw, crossed)))
    scores = score_nodes([n.node for n in nodes], transfers, min_fraction=min_fraction)
    by_node = {n.node: n for n in nodes}
    links = []
    for score in scores:
        info = by_node[score.node]
        rate = info.line_rate.gbps
        links.append(LinkResult(
            score.node, info.hostname, info.address, info.interface, info.transport,
            score.send_gbs, score.recv_gbs, score.gbs, score.median_gbs, rate,
            line_fraction(score.gbs, rate), score.slow,
        ))
    slow = tuple(s.node for s in scores if s.slow)
    findings = [_slow_node_finding(by_node[s.node], s, nodes, min_fraction)
                for s in scores if s.slow]
    lagging = slow_transfers(transfers, slow, min_fraction=min_fraction)
    if lagging:
        typical = median(t.gbs for t in transfers if t.src not in slow and t.dst not in slow)
        findings += [_slow_link_finding(t, by_node, typical, min_fraction) for t in lagging]
    transports = Counter(n.transport for n in nodes)
    if len(transports) > 1:
        listed = "; ".join(
            f"{name}: node{'s' if count > 1 else ''} "
            + ", ".join(str(n.node) for n in nodes if n.transport == name)
            for name, count in transports.most_common()
        )
        findings.append(Finding.of(
            "bench-transport-mixed",
            f"the nodes moved data over different transports ({listed}): the job runs at the "
            "speed of the slowest",
            tuple(f"node {n.node}: {n.transport}" for n in nodes),
            "run `clusterenv doctor` on the nodes that differ, and compare NCCL_* variables "
            "with `clusterenv preflight`",
        ))
    if world_size == 1:
        findings.append(Finding.of(
            "bench-one-rank",
            "one rank: an all-reduce moves no data, so there is no bandwidth to measure",
            (f"backend {backend} on {device}", "1 rank on 1 node"),
            "start one process per GPU (`--nproc-per-node N`) or run `clusterenv bench` on "
            "every node of the cluster",
        ))
    largest = size_results[-1] if size_results else None
    if largest is not None and largest.busbw_fraction is not None \
            and largest.busbw_fraction < min_fraction:
        findings.append(Finding.of(
            "bench-below-line-rate",
            f"all-reduce of {format_size(largest.size)} reached {largest.busbw_fraction:.0%} of "
            f"the line rate ({_gbit(largest.busbw_gbs)} bus bandwidth against "
            f"{_rate(line_rate)})",
            (f"backend {backend} on {device}", f"{world_size} ranks on {len(nodes)} nodes"),
            "on messages of hundreds of MiB expect about 0.8-0.95 of the line rate with RDMA "
            "and GPUDirect, 0.5-0.8 with RDMA staged through host memory, often 0.1-0.4 over "
            "TCP on a 100-400 Gb/s NIC; small messages never reach it. With RDMA hardware and a "
            "low fraction, check GPUDirect RDMA and the rails NCCL used (`NCCL_DEBUG=INFO`, "
            "then `clusterenv nccl-log`)",
        ))
    return BenchResult(
        backend=backend, device=device, world_size=world_size, num_nodes=len(nodes),
        min_fraction=min_fraction, line_rate_gbps=line_rate, sizes=tuple(size_results),
        links=tuple(links), transfers=tuple(transfers), nodes=tuple(nodes), slow_nodes=slow,
        findings=tuple(findings), elapsed_s=elapsed_s, truncated=truncated,
    )
