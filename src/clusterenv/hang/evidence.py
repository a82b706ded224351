"""Attaching what an NCCL log or a preflight verdict of the same job says about a node.

``clusterenv hang --nccl-log FILE --preflight FILE`` joins them by host name (NCCL prefixes
every line with ``host:pid:tid``) and by node rank, address or host (preflight's problems name
their nodes), and adds what they say to each node of the report that a stall names.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from clusterenv._text import clip
from clusterenv.errors import DiscoveryError
from clusterenv.hang.report import HangReport, NodeInfo
from clusterenv.nccl_log import read_nccl_log

__all__ = ["attach_evidence"]

_MAX_PREFLIGHT_BYTES = 16 * 1024 * 1024
_PER_NODE = 8


def _nccl_lines(paths: Sequence[str | os.PathLike[str]], hosts: set[str],
                notes: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in paths:
        try:
            log = read_nccl_log(path)
        except DiscoveryError as e:
            notes.append(f"{os.fspath(path)}: NCCL log not read: {e}")
            continue
        for rank in log.ranks:
            if rank.host in hosts:
                out.setdefault(rank.host, []).append(
                    f"NCCL rank {rank.rank if rank.rank is not None else '?'} on {rank.host}: "
                    f"bootstrap {rank.bootstrap_interface or '?'} "
                    f"({rank.bootstrap_address or '?'}), transport {rank.transport or '?'}")
        for kind, messages in (("WARN", log.warnings), ("error", log.errors)):
            for message in messages:
                for host in set(message.hosts) & hosts:
                    out.setdefault(host, []).append(
                        f"NCCL {kind} on {host} (x{message.count}): {clip(message.text, 200)}")
    return out


def _preflight_problems(path: str | os.PathLike[str], notes: list[str]) -> list[dict[str, Any]]:
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(_MAX_PREFLIGHT_BYTES + 1)[:_MAX_PREFLIGHT_BYTES])
    except (OSError, ValueError, RecursionError) as e:
        notes.append(f"{os.fspath(path)}: preflight verdict not read: {e}")
        return []
    verdict = data.get("verdict") if isinstance(data, dict) else None
    verdict = verdict if isinstance(verdict, dict) else data
    problems = verdict.get("problems") if isinstance(verdict, dict) else None
    if not isinstance(problems, list):
        notes.append(f"{os.fspath(path)}: not the output of `clusterenv preflight --json`")
        return []
    return [p for p in problems[:512] if isinstance(p, dict)]


def _names(problem: dict[str, Any], node: NodeInfo) -> bool:
    for ref in problem.get("nodes") or []:
        if not isinstance(ref, dict):
            continue
        if node.node_rank is not None and ref.get("rank") == node.node_rank:
            return True
        if node.addr and ref.get("addr") == node.addr:
            return True
        if node.host and ref.get("hostname") == node.host:
            return True
    return False


def attach_evidence(report: HangReport, *, nccl_logs: Sequence[str | os.PathLike[str]] = (),
                    preflight: str | os.PathLike[str] | None = None) -> HangReport:
    """``report`` with, on each node a stall names, what the NCCL logs and the preflight
    verdict say about it (a note for each file that cannot be read)."""
    if not nccl_logs and preflight is None:
        return report
    named = {r for s in report.stalls for r in (*s.suspects, *s.waiting)}
    targets = [n for n in report.nodes if named & set(n.ranks) or n.reported is False]
    notes: list[str] = []
    hosts = {n.host for n in targets if n.host}
    nccl = _nccl_lines(nccl_logs, hosts, notes) if nccl_logs else {}
    problems = _preflight_problems(preflight, notes) if preflight is not None else []
    nodes = []
    for node in report.nodes:
        if node not in targets:
            nodes.append(node)
            continue
        extra = list(nccl.get(node.host or "", []))[:_PER_NODE]
        extra += [f"preflight {p.get('severity')}[{p.get('code')}]: "
                  f"{clip(str(p.get('title')), 200)}" for p in problems if _names(p, node)
                  ][:_PER_NODE]
        nodes.append(replace(node, evidence=(*node.evidence, *extra)))
    return replace(report, nodes=tuple(nodes), notes=(*report.notes, *notes))
