"""``clusterenv nccl-log FILE|-``: read an ``NCCL_DEBUG=INFO`` log, say what NCCL actually did."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from clusterenv._cli._common import add_json, add_source, emit_json, render_findings, table
from clusterenv._cli._json import Encoded
from clusterenv._scrub import scrub_setting
from clusterenv._text import count
from clusterenv.nccl_log import NcclLog, NetPlugin, RankInfo, nccl_log_findings, read_nccl_log
from clusterenv.nccl_log.encode import log_fields, ranks_json
from clusterenv.nccl_log.parse import no_cycle_collection

_MAX_ROWS = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``FILE``, ``--json``, ``--strict``, ``--management-interface``, ``--cluster-interface``,
    ``--expect-rdma``, ``--source``."""
    parser.add_argument(
        "file", metavar="FILE", help="the log (plain or .gz); '-' reads standard input"
    )
    add_json(parser)
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 on warnings too, not only on errors"
    )
    parser.add_argument(
        "--management-interface",
        metavar="NAME",
        action="append",
        default=[],
        help="an interface known to be management-only (e.g. eth0 on Runpod); NCCL sockets on "
        "it become errors. Repeat or separate with commas",
    )
    parser.add_argument(
        "--cluster-interface",
        metavar="NAME",
        action="append",
        default=[],
        help="the interface(s) of the cluster network (e.g. ens1); NCCL sockets on any other "
        "become errors. Repeat or separate with commas",
    )
    parser.add_argument(
        "--expect-rdma",
        action="store_true",
        help="the nodes have InfiniBand/RoCE NICs: a socket transport is a fallback, an error",
    )
    add_source(parser)


def _names(values: list[str]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def run(args: argparse.Namespace) -> int:
    """Print what the log shows and the findings; exit 1 on errors, 2 when unreadable or when
    nothing in it is recognised."""
    # the cycle collector off throughout: a log of thousands of processes is millions of
    # objects, none in a cycle, which its passes would walk again and again
    with no_cycle_collection():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if args.file == "-" and sys.stdin is None:
        from clusterenv.errors import DiscoveryError

        raise DiscoveryError("standard input is closed: give the log's path, or pipe it in "
                             "(`… | clusterenv nccl-log -`)", path="-")
    log = read_nccl_log(sys.stdin.buffer if args.file == "-" else args.file)
    if log.lines_matched == 0:
        # Nothing to judge is not "no problems": exit 2, as for an unreadable file.
        source = "standard input" if args.file == "-" else args.file
        print(f"clusterenv nccl-log: {source}: {count(log.lines_read, 'line')}, none from NCCL "
              "(nor a failure line of PyTorch, Gloo, nccl-tests or libibverbs); expected "
              "the output of a job run with NCCL_DEBUG=INFO (lines such as "
              "'node-0:1234:1234 [0] NCCL INFO Bootstrap : Using ens1:10.65.0.2<0>'), "
              "e.g. NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET torchrun ... 2>&1 | tee job.log",
              file=sys.stderr)
        return 2
    management = _names(args.management_interface)
    # `--source runpod` (or CLUSTERENV_SOURCE=runpod) says the log comes from a Runpod cluster,
    # whose eth0 is management only: NCCL sockets there are then errors, not guesses
    if (args.source or os.environ.get("CLUSTERENV_SOURCE", "")).strip().lower() == "runpod":
        from clusterenv.sources.runpod import MANAGEMENT_INTERFACES

        management += [name for name in MANAGEMENT_INTERFACES if name not in management]
    findings = nccl_log_findings(
        log,
        management_interfaces=management,
        cluster_interfaces=_names(args.cluster_interface),
        expect_rdma=args.expect_rdma,
    )
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")}
    # nccl_log_findings puts the most likely cause first among the errors
    cause = findings[0] if findings and findings[0].severity == "error" else None
    if args.json:
        # JSON data already (to_dict()), on one line: a log of thousands of processes makes a
        # large document
        ranks, keys = ranks_json(log.ranks)
        records = Encoded(ranks, keys, lambda: [rank.to_dict() for rank in log.ranks])
        data: dict[str, Any] = {"file": args.file, **log_fields(log, records)}
        data["findings"] = [f.to_dict() for f in findings]
        data["cause"] = cause.to_dict() if cause else None
        data["summary"] = counts
        emit_json(data, compact=True, converted=True)
    else:
        if cause is not None:
            print(f"most likely cause: {cause.title} [{cause.code}]")
            print(f"  fix: {cause.fix}")
            print()
        print(_render(args.file, log))
        print()
        print(render_findings(findings))
    failing = counts["error"] + (counts["warning"] if args.strict else 0)
    return 1 if failing else 0


def _render(name: str, log: NcclLog) -> str:
    source = "standard input" if name == "-" else name
    lines = [f"{source}: {count(log.lines_read, 'line')}, {log.lines_matched} recognised "
             "(NCCL's, and the failure lines of the programs around it)"]
    if not log.lines_matched:
        lines.append("no NCCL INFO/WARN lines: was the job run with NCCL_DEBUG=INFO?")
        return "\n".join(lines)
    rows: list[tuple[str, object]] = [
        ("NCCL version", _version(log)),
        ("transport", ", ".join(log.transports) or None),
        ("devices", _devices(log)),
        ("GPUDirect RDMA", _gpudirect(log)),
        ("net plugins", "; ".join(_plugin(p) for p in log.plugins) or None),
        ("nodes", _nodes(log)),
    ]
    rows += [(name, scrub_setting(name, value)) for name, value in sorted(log.env.items())]
    width = max(len(key) for key, _ in rows)
    lines += [f"{key.ljust(width)}  {'-' if value is None else value}" for key, value in rows]
    lines.append("")
    lines.append(table(
        (_rank_row(r) for r in log.ranks[:_MAX_ROWS]),
        ("rank", "host", "pid", "dev", "bootstrap", "transport", "net recv (GDR)"),
    ))
    if len(log.ranks) > _MAX_ROWS:
        lines.append(f"... and {len(log.ranks) - _MAX_ROWS} more processes (--json lists all)")
    return "\n".join(lines)


def _version(log: NcclLog) -> str | None:
    if not log.versions:
        return None
    text = ", ".join(log.versions)
    return f"{text} (CUDA {log.cuda_version})" if log.cuda_version else text


def _devices(log: NcclLog) -> str | None:
    labels = list(dict.fromkeys(d.label for d in log.devices))
    if not labels:
        return None
    shown = ", ".join(labels[:8]) + (", ..." if len(labels) > 8 else "")
    return f"{shown} ({len(labels)})"


def _gpudirect(log: NcclLog) -> str | None:
    gdr = log.gpudirect
    parts = []
    if gdr.hcas:
        on = sorted(name for name, enabled in gdr.hcas.items() if enabled)
        off = sorted(name for name, enabled in gdr.hcas.items() if not enabled)
        parts += [f"enabled for {', '.join(on)}"] if on else []
        parts += [f"DISABLED for {', '.join(off)}"] if off else []
    if gdr.net_channels:
        parts.append(f"{gdr.gdr_channels} of {gdr.net_channels} receiving net channels /GDRDMA")
    if gdr.distance_disabled:
        parts.append(f"{len(gdr.distance_disabled)} GPU/NIC pairs refused for distance")
    if gdr.dmabuf_gpus:
        parts.append(f"DMA-BUF available on GPUs {', '.join(map(str, gdr.dmabuf_gpus))}")
    return "; ".join(parts) or None


def _plugin(plugin: NetPlugin) -> str:
    details = [d for d in (plugin.library, plugin.version and f"version {plugin.version}",
                           plugin.provider and f"provider {plugin.provider}") if d]
    state = "used" if plugin.used else "FAILED, not used" if plugin.failed else "loaded"
    described = f" ({', '.join(details)})" if details else ""
    return f"{plugin.name}{described}: {state}"


def _nodes(log: NcclLog) -> str:
    hosts = log.hosts
    if hosts:
        text = f"{count(len(hosts), 'host')} in the log: {', '.join(hosts[:4])}"
        text += ", ..." if len(hosts) > 4 else ""
    else:
        text = "unknown (no host:pid prefixes in the log)"
    if log.nranks:
        text += f"; communicator of {count(log.nranks, 'rank')}"
    if log.nnodes:
        text += f" on {count(log.nnodes, 'node')}"
    return text


def _rank_row(rank: RankInfo) -> tuple[object, ...]:
    bootstrap = None
    if rank.bootstrap_interface:
        bootstrap = f"{rank.bootstrap_interface}:{rank.bootstrap_address or '?'}"
    channels = f"{rank.net_channels} ({rank.gdr_channels})" if rank.net_channels else None
    return (rank.rank, rank.host, rank.pid, rank.cuda_device, bootstrap, rank.transport, channels)
