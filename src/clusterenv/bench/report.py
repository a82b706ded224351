"""The terminal report of a run: the all-reduce table, the links table and the findings."""

from __future__ import annotations

from typing import TextIO

from clusterenv._cli._common import render_findings, table
from clusterenv._text import count
from clusterenv.bench.model import BenchResult
from clusterenv.bench.units import format_size

__all__ = ["one_node_line", "render_report"]


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _gbit(gbs: float | None) -> str:
    return "-" if gbs is None else f"{gbs * 8:.3g}"


#: What carries an all-reduce between the processes of one node, per backend.
_WITHIN_A_NODE = {
    "gloo": "TCP inside this host",
    "nccl": "NVLink, PCIe or shared memory",
}


def one_node_line(result: BenchResult) -> str:
    """The line a run on one node leads with: there is no link between nodes to measure, and
    what the run did measure, e.g. ``"nothing to measure across nodes here: ...; the all-reduce
    below ran between this node's 8 processes over NVLink, PCIe or shared memory, not over the
    network"``."""
    line = ("nothing to measure across nodes here: one node has no link to another (run "
            "`clusterenv bench` on every node at once to measure the links)")
    if result.world_size > 1:
        carrier = _WITHIN_A_NODE.get(result.backend, f"{result.backend} within this host")
        line += (f"; the all-reduce below ran between this node's "
                 f"{count(result.world_size, 'process')} over {carrier}, not over the network")
    return line


def render_report(result: BenchResult, stream: TextIO | None = None) -> str:
    """The report as text: what ran, one row per size, one row per node, then the verdict.

    Args:
        result: The run.
        stream: Where it will be written (colour only on a terminal).
    """
    nproc = result.world_size // result.num_nodes if result.num_nodes else 0
    rate = "unknown" if result.line_rate_gbps is None else f"{result.line_rate_gbps:g} Gb/s"
    head = (f"{count(result.num_nodes, 'node')} x {count(nproc, 'process')}, "
            f"{result.backend} on {result.device}, "
            + (f"line rate {rate}, " if result.num_nodes > 1 else "")
            + f"{result.elapsed_s:.1f} s"
            + (" (iterations cut to fit the time limit)" if result.truncated else ""))
    if result.num_nodes == 1:
        head += "\n" + one_node_line(result)
    sizes = table(
        [(format_size(s.size), f"{s.seconds * 1e6:.0f}", _num(s.algbw_gbs), _num(s.busbw_gbs),
          _gbit(s.busbw_gbs), _percent(s.busbw_fraction), s.iterations) for s in result.sizes],
        ("size", "time_us", "algbw GB/s", "busbw GB/s", "busbw Gb/s", "of line", "iters"),
    )
    links = table(
        [(link.node, link.hostname, link.address, link.interface, link.transport,
          _gbit(link.send_gbs), _gbit(link.recv_gbs), _num(link.line_rate_gbps),
          _percent(link.fraction), "SLOW" if link.slow else "ok") for link in result.links],
        ("node", "host", "address", "interface", "transport", "send Gb/s", "recv Gb/s",
         "line Gb/s", "of line", "verdict"),
    )
    parts = [head]
    if result.sizes:
        parts.append("all-reduce (nccl-tests definitions: busbw = algbw x 2(n-1)/n)\n" + sizes)
    if result.links and result.num_nodes > 1:
        parts.append("links (best send and best receive between neighbouring nodes)\n" + links)
    parts.append(render_findings(result.findings, stream))
    return "\n\n".join(parts)
