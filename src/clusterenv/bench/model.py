"""The result of a bandwidth run: all-reduce per size, each node's link, and the verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clusterenv.bench.linerate import LineRate, Rail
from clusterenv.bench.verdict import Transfer
from clusterenv.findings import Finding, has_errors

__all__ = ["BenchResult", "LinkResult", "NodeInfo", "SizeResult"]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What one node reported about itself before measuring.

    Attributes:
        node: Node rank, e.g. ``2``.
        hostname: e.g. ``"node-2"``.
        address: Its cluster address, e.g. ``"10.65.0.4"``; None when unknown.
        interface: The interface the traffic left by, e.g. ``"ens1"``; None when unknown.
        transport: What carried the bytes: ``"gloo"`` (TCP), or NCCL's network from its log
            (``"IB"``, ``"Socket"``, a plugin name); ``"nccl"`` when the log was not available.
        line_rate: The rails in use and their line rate.
        ranks: Global ranks on this node, e.g. ``(4, 5)``; the first one measures the link.
    """

    node: int
    hostname: str
    address: str | None
    interface: str | None
    transport: str
    line_rate: LineRate
    ranks: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``line_rate`` as :meth:`LineRate.to_dict`."""
        return {"node": self.node, "hostname": self.hostname, "address": self.address,
                "interface": self.interface, "transport": self.transport,
                "line_rate": self.line_rate.to_dict(), "ranks": list(self.ranks)}


@dataclass(frozen=True, slots=True)
class SizeResult:
    """All-reduce of one message size, in nccl-tests' terms.

    Attributes:
        size: Bytes per rank, e.g. ``16777216``.
        seconds: Median time of the timed iterations (each the slowest rank's), e.g. ``0.0042``.
        iterations: Timed iterations, e.g. ``20`` (fewer when the time limit was near).
        algbw_gbs: ``size / seconds`` in GB/s.
        busbw_gbs: ``algbw × 2(n−1)/n`` in GB/s, ``n`` the number of ranks.
        busbw_fraction: Bus bandwidth as a fraction of the cluster's line rate, e.g. ``0.82``;
            None when the line rate is unknown.
    """

    size: int
    seconds: float
    iterations: int
    algbw_gbs: float
    busbw_gbs: float
    busbw_fraction: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; adds ``time_us``."""
        return {"size": self.size, "time_us": self.seconds * 1e6, "seconds": self.seconds,
                "iterations": self.iterations, "algbw_gbs": self.algbw_gbs,
                "busbw_gbs": self.busbw_gbs, "busbw_fraction": self.busbw_fraction}


@dataclass(frozen=True, slots=True)
class LinkResult:
    """One node's link: its point-to-point bandwidth against the others' and the line rate.

    Attributes:
        node: Node rank, e.g. ``2``.
        hostname: e.g. ``"node-2"``.
        address: Cluster address, e.g. ``"10.65.0.4"``.
        interface: e.g. ``"ens1"``.
        transport: As :attr:`NodeInfo.transport`.
        send_gbs: Best transfer out of the node, GB/s.
        recv_gbs: Best transfer into the node, GB/s.
        gbs: The node's link bandwidth, the smaller of the two, GB/s.
        median_gbs: Median link bandwidth over the nodes (the verdict's reference), GB/s.
        line_rate_gbps: The node's line rate in Gb/s (summed over its rails).
        fraction: ``gbs`` as a fraction of ``line_rate_gbps``.
        slow: Named by the verdict.
    """

    node: int
    hostname: str
    address: str | None
    interface: str | None
    transport: str
    send_gbs: float | None
    recv_gbs: float | None
    gbs: float | None
    median_gbs: float | None
    line_rate_gbps: float | None
    fraction: float | None
    slow: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class BenchResult:
    """Everything one run measured and concluded; the same on every node.

    Attributes:
        backend: ``"gloo"`` or ``"nccl"``.
        device: ``"cpu"`` or ``"cuda"``.
        world_size: Ranks, e.g. ``16``.
        num_nodes: Nodes, e.g. ``2``.
        min_fraction: The verdict's threshold, e.g. ``0.5``.
        line_rate_gbps: The slowest node's line rate in Gb/s (what a collective can reach);
            None when no node's is known.
        sizes: All-reduce per message size, ascending.
        links: One per node, in node order.
        transfers: Every point-to-point transfer measured.
        nodes: What each node reported about itself.
        slow_nodes: Node ranks the verdict named, e.g. ``(2,)``.
        findings: The verdict in words: ``bench-slow-node`` and friends.
        elapsed_s: Wall time of the measurement, e.g. ``12.5``.
        truncated: Fewer iterations than asked, to stay within the time limit.
    """

    backend: str
    device: str
    world_size: int
    num_nodes: int
    min_fraction: float
    line_rate_gbps: float | None
    sizes: tuple[SizeResult, ...]
    links: tuple[LinkResult, ...]
    transfers: tuple[Transfer, ...]
    nodes: tuple[NodeInfo, ...]
    slow_nodes: tuple[int, ...]
    findings: tuple[Finding, ...] = field(default=())
    elapsed_s: float = 0.0
    truncated: bool = False

    @property
    def exit_code(self) -> int:
        """0 when no node is slow and no finding is an error, else 1."""
        return 1 if self.slow_nodes or has_errors(self.findings) else 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchResult:
        """The result back from :meth:`to_dict` (how the CLI reads what the workers wrote).

        Raises:
            KeyError, TypeError, ValueError: When ``data`` is not such a dictionary.
        """
        nodes = tuple(
            NodeInfo(int(n["node"]), str(n["hostname"]), n["address"], n["interface"],
                     str(n["transport"]),
                     LineRate(tuple(Rail(str(r["name"]), r["kind"], r["gbps"])
                                    for r in n["line_rate"]["rails"])),
                     tuple(int(r) for r in n["ranks"]))
            for n in data["nodes"]
        )
        sizes = tuple(
            SizeResult(int(s["size"]), float(s["seconds"]), int(s["iterations"]),
                       float(s["algbw_gbs"]), float(s["busbw_gbs"]), s["busbw_fraction"])
            for s in data["sizes"]
        )
        links = tuple(LinkResult(**{name: link[name] for name in LinkResult.__slots__})
                      for link in data["links"])
        transfers = tuple(
            Transfer(int(t["src"]), int(t["dst"]), int(t["size"]), float(t["seconds"]),
                     int(t["iterations"]))
            for t in data["transfers"]
        )
        findings = tuple(
            Finding(str(f["code"]), f["severity"], str(f["title"]),
                    tuple(str(e) for e in f["evidence"]), str(f["fix"]))
            for f in data["findings"]
        )
        return cls(
            backend=str(data["backend"]), device=str(data["device"]),
            world_size=int(data["world_size"]), num_nodes=int(data["num_nodes"]),
            min_fraction=float(data["min_fraction"]), line_rate_gbps=data["line_rate_gbps"],
            sizes=sizes, links=links, transfers=transfers, nodes=nodes,
            slow_nodes=tuple(int(n) for n in data["slow_nodes"]), findings=findings,
            elapsed_s=float(data["elapsed_s"]), truncated=bool(data["truncated"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``backend``, ``sizes``, ``links``, ``slow_nodes``, ``line_rate_gbps``,
        ``transfers``, ``nodes``, ``findings``, …"""
        return {
            "backend": self.backend,
            "device": self.device,
            "world_size": self.world_size,
            "num_nodes": self.num_nodes,
            "min_fraction": self.min_fraction,
            "line_rate_gbps": self.line_rate_gbps,
            "slow_nodes": list(self.slow_nodes),
            "sizes": [s.to_dict() for s in self.sizes],
            "links": [link.to_dict() for link in self.links],
            "transfers": [
                {"src": t.src, "dst": t.dst, "size": t.size, "seconds": t.seconds,
                 "iterations": t.iterations, "gbs": t.gbs}
                for t in self.transfers
            ],
            "nodes": [n.to_dict() for n in self.nodes],
            "findings": [
                {"code": f.code, "severity": f.severity, "title": f.title,
                 "evidence": list(f.evidence), "fix": f.fix}
                for f in self.findings
            ],
            "elapsed_s": self.elapsed_s,
            "truncated": self.truncated,
        }
