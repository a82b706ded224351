"""``clusterenv preflight``: run on every node at once; every node prints the same verdict."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, TextIO

from clusterenv._cli._common import (
    add_json,
    add_root,
    add_source,
    emit_json,
    host_context,
    render_findings,
    seconds_up_to,
    style,
    table,
    tcp_port,
)
from clusterenv._text import printable

if TYPE_CHECKING:
    from clusterenv.preflight import PreflightResult, Verdict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--timeout``, ``--wait``, ``--port``, ``--ring``, ``--json``, ``--root``."""
    parser.add_argument(
        "--timeout", type=seconds_up_to(3600), default=30.0, metavar="SECONDS",
        help="how long the primary waits for every node, and a node keeps trying to reach the "
        "primary (default: 30)",
    )
    parser.add_argument(
        "--wait", type=seconds_up_to(3600, zero=True), default=0.0, metavar="SECONDS",
        help="the cluster may still be coming up: wait up to SECONDS for this node's cluster "
        "address, a route to the primary over the cluster interface, and every node "
        "(default: 0, do not wait)",
    )
    parser.add_argument(
        "--port", type=tcp_port, default=None,
        help="preflight TCP port, the same on every node (default: PRIMARY_PORT + 1, e.g. 29501)",
    )
    parser.add_argument(
        "--ring", action="store_true",
        help="also have each node open a TCP connection to the next node in rank order "
        "(decided on the primary; other nodes follow)",
    )
    add_json(parser)
    add_root(parser)
    add_source(parser)


def _node_rows(verdict: Verdict) -> list[tuple[object, ...]]:
    return [
        (
            "?" if n.rank is None else n.rank, n.addr, n.hostname, n.interface, n.mtu,
            n.transport or "tcp", n.rdma_ports, n.gpus, n.local_errors, n.torch, n.nccl,
        )
        for n in verdict.nodes
    ]


def format_verdict(result: PreflightResult) -> str:
    """The verdict for people: a summary line, the node table, the problems, this node's line."""
    verdict = result.verdict
    if verdict is None:
        return f"preflight could not complete: {printable(result.error, newlines=True)}"
    reported = verdict.reported
    where = f"to {printable(verdict.primary)} " if verdict.primary != "local" else ""
    plural = "s" if verdict.expected_nodes != 1 else ""
    counted = (
        f"{reported} of {verdict.expected_nodes} node{plural}"
        if reported <= verdict.expected_nodes  # more: duplicate ranks or strangers reported
        else f"{reported} nodes ({verdict.expected_nodes} expected)"
    )
    lines = [
        f"preflight: {counted} reported {where}in {verdict.elapsed_s:.2f} s",
        "",
    ]
    rows = _node_rows(verdict)
    hidden = reported - len(rows)
    headers = ("rank", "address", "hostname", "interface", "mtu", "rdma", "ports", "gpus",
               "errors", "torch", "nccl")
    lines.append(table(rows, headers))
    if hidden:
        lines.append(f"… and {hidden} more nodes that no problem names")
    if verdict.ring_probed:
        failed = sum(1 for hop in verdict.ring if not hop.ok)
        lines += ["", f"ring: {verdict.ring_probed - failed} of {verdict.ring_probed} probes ok"]
        lines += [
            f"  {printable(hop.source)} -> {printable(hop.target)}: "
            f"{'ok' if hop.ok else 'FAILED'} ({printable(hop.detail)})"
            for hop in verdict.ring
        ]
    lines += ["", render_findings([p.finding() for p in verdict.problems])]
    if verdict.more_problems:
        lines.append(f"… and {verdict.more_problems} more problems (the verdict lists "
                     f"{len(verdict.problems)}, the most severe first)")
    rank = "?" if result.rank is None else result.rank
    outcome = (
        style("consistent", "green") if verdict.ok
        else style("problems found", "red")
    )
    lines += ["", f"this node: rank {rank} ({result.role}); cluster {outcome} "
              f"(exit {result.exit_code})"]
    return "\n".join(lines)


class _Progress:
    """What this node waits for, on stderr: on a terminal one line redrawn in place; otherwise
    a line whenever it changes (at most one a second while only a count or a time changes)."""

    def __init__(self, stream: TextIO) -> None:
        # The CLI's stream escapes control characters; the line is sanitised here instead, and
        # only the redraw sequence goes around it.
        unsanitised = getattr(stream, "unsanitised", None)
        self.stream: TextIO = unsanitised() if callable(unsanitised) else stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.shown = ""
        self.at = float("-inf")

    def __call__(self, line: str) -> None:
        from clusterenv._scrub import scrub_text

        text = printable(scrub_text(line))
        now = time.monotonic()
        if text == self.shown:
            return
        same_kind = text.split("(", 1)[0] == self.shown.split("(", 1)[0]
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
        elif same_kind and now - self.at < 1.0:
            return
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.shown, self.at = text, now

    def done(self) -> None:
        """End the line being redrawn, before the verdict is printed."""
        if self.tty and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    """Run preflight; exit 0 consistent, 1 problems found, 2 could not complete."""
    from clusterenv.preflight import preflight

    environ, root = host_context(args)
    progress = _Progress(sys.stderr)
    try:
        result = preflight(environ=environ, root=root, timeout=args.timeout, port=args.port,
                           ring=args.ring, wait=args.wait, progress=progress)
    finally:
        progress.done()
    if args.json:
        emit_json(result)
    elif result.verdict is None:
        print(f"clusterenv preflight: {printable(result.error, newlines=True)}", file=sys.stderr)
    else:
        print(format_verdict(result))
    return result.exit_code
