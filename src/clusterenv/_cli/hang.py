"""``clusterenv hang``: read flight-recorder dumps and name the rank, node and collective that
stopped. ``--collect`` on every node at once gathers every node's dumps first."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from clusterenv._cli._common import add_json, emit_json, seconds_up_to, style, table, tcp_port
from clusterenv._text import printable

if TYPE_CHECKING:
    from clusterenv.hang import Call, HangReport, Stall


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``PATH…``, ``--collect``, ``--timeout``, ``--port``, ``--nccl-log``, ``--preflight``,
    ``--json``."""
    parser.add_argument(
        "paths", nargs="*", metavar="PATH",
        help="dump files or directories (default: CLUSTERENV_HANG_DIR, else the newest job "
        "directory under ~/.cache/clusterenv/hang)",
    )
    parser.add_argument(
        "--collect", action="store_true",
        help="run on every node at once: every node's dumps go to the primary (preflight's "
        "rendezvous, limits and CLUSTERENV_PREFLIGHT_TOKEN) and every node prints the answer",
    )
    parser.add_argument(
        "--timeout", type=seconds_up_to(3600), default=30.0, metavar="SECONDS",
        help="with --collect: how long the primary waits for every node (default: 30)",
    )
    parser.add_argument(
        "--port", type=tcp_port, default=None,
        help="with --collect: TCP port, the same on every node (default: PRIMARY_PORT + 1)",
    )
    parser.add_argument(
        "--nccl-log", action="append", default=[], metavar="FILE",
        help="an NCCL_DEBUG=INFO log of the same job: what it says about the nodes named is "
        "shown with them (repeatable)",
    )
    parser.add_argument(
        "--preflight", metavar="FILE", default=None,
        help="the output of `clusterenv preflight --json` for the same cluster: its problems "
        "about the nodes named are shown with them",
    )
    add_json(parser)


def _call(call: Call | None) -> str:
    if call is None:
        return "none recorded"
    text = f"{call.operation} #{call.seq}" if not call.p2p else f"{call.operation} p2p #{call.seq}"
    if call.group:
        text += f" (group {call.group})"
    return text + (f" at {call.where}" if call.where else "")


def _stall_lines(stall: Stall) -> list[str]:
    desc = f" ({stall.desc})" if stall.desc else ""
    lines = [f"stalled in group {stall.group}{desc}: {stall.call.describe()}"]
    rows = []
    for view in stall.ranks:
        detail = f"its latest: {_call(view.latest)}" if view.latest is not None else ""
        rows.append((view.rank, view.node_rank, view.host, view.state,
                     _call(view.last) if view.state != "missing" else "no dump read",
                     detail or None))
    lines.append(table(rows, ("rank", "node", "host", "state", "last collective in group",
                              "elsewhere")))
    if not stall.members_known:
        lines.append("  (the group's members are not in the dumps: only ranks that recorded "
                      "it are compared)")
    lines += [f"  mismatch: {m}" for m in stall.mismatch]
    return lines


def format_report(report: HangReport, read_from: str) -> str:
    """The report for people."""
    ranks = report.ranks_read
    lines = [f"read {len(ranks)} dump{'s' if len(ranks) != 1 else ''} "
             f"({'ranks ' + _ranks(ranks) if ranks else 'no rank'}) from {read_from}"]
    if report.world_size is not None:
        lines.append(f"world: {report.world_size} ranks ({report.world_source})")
    head = {"hang": style("HANG", "red"), "agree": style("AGREE", "green"),
            "unreadable": style("UNREADABLE", "yellow")}[report.verdict]
    lines += ["", f"{head}  {report.title}"]
    for stall in report.stalls:
        lines += ["", *_stall_lines(stall)]
    if report.agreed and report.stalls:
        lines += ["", "groups in agreement:", *(f"  {line}" for line in report.agreed)]
    elif len(report.agreed) > 1:
        lines += ["", *(f"  {line}" for line in report.agreed[1:])]
    if report.failures:
        lines += ["", "what ranks failed with:", *(f"  {line}" for line in report.failures)]
    if report.nodes:
        lines.append("")
        lines.append("nodes:")
        for node in report.nodes:
            status = "" if node.reported is None else (
                "; reported" if node.reported else "; DID NOT REPORT")
            lines.append(f"  {node.describe()}: ranks {_ranks(node.ranks)} [{node.source}]"
                         f"{status}")
            lines += [f"      doctor: {line}" for line in node.doctor]
            lines += [f"      {line}" for line in node.evidence]
    if report.notes:
        lines += ["", "notes:", *(f"  - {note}" for note in report.notes)]
    meaning = {"hang": "a hang is attributed", "agree": "every rank read agrees",
               "unreadable": "no dump could be read"}[report.verdict]
    lines += ["", f"exit {report.exit_code}: {meaning}"]
    return "\n".join(printable(line, newlines=True) for line in lines)


def _ranks(ranks: tuple[int, ...]) -> str:
    from clusterenv.hang.model import ranks_text

    return ranks_text(ranks)


def run(args: argparse.Namespace) -> int:
    """Exit 1 when a hang is attributed, 0 when every rank agrees, 2 when nothing was readable
    (or ``--collect`` could not complete)."""
    from clusterenv.hang.diagnose import collect_hang, default_paths, diagnose_hang

    paths = list(args.paths)
    read_from = ", ".join(paths)
    if not paths:
        found, why = default_paths(os.environ)
        paths = [str(p) for p in found]
        read_from = f"{', '.join(paths)} ({why})" if paths else why
    if args.collect:
        result = collect_hang(paths=paths, timeout=args.timeout, port=args.port,
                              nccl_logs=args.nccl_log, preflight=args.preflight)
        if args.json:
            emit_json(result)
            return result.exit_code
        if result.error:
            print(f"clusterenv hang: {printable(result.error)}", file=sys.stderr)
        where = f"every node via {result.endpoint}" if result.endpoint and not result.error \
            else read_from
        print(format_report(result.report, where))
        return result.exit_code
    report = diagnose_hang(paths, nccl_logs=args.nccl_log, preflight=args.preflight)
    if args.json:
        emit_json(report)
    else:
        print(format_report(report, read_from))
    return report.exit_code
