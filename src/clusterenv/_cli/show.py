"""``clusterenv show``: everything detected about this node, and what ``apply`` would do."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from clusterenv._cli._common import (
    add_json,
    add_nccl_version,
    add_no_nccl,
    add_root,
    add_source,
    emit_json,
    host_context,
    output_width,
    render_findings,
    style,
    table,
    wrap,
)
from clusterenv._text import printable

if TYPE_CHECKING:
    from clusterenv._facts import Facts
    from clusterenv.config import ClusterConfig
    from clusterenv.findings import Finding
    from clusterenv.nccl import NcclPlan
    from clusterenv.nccl.bootstrap import BootstrapChoice, NcclBootstrap
    from clusterenv.rdma import RdmaPort


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--json``, ``--debug``, ``--no-nccl``, ``--root``."""
    add_json(parser)
    parser.add_argument(
        "--debug", action="store_true", help="plan NCCL_DEBUG=INFO too, as `env --debug` would"
    )
    add_no_nccl(parser)
    add_nccl_version(parser)
    add_root(parser)
    add_source(parser)


def _size(n: int | None) -> str:
    from clusterenv.host import format_bytes

    return "unlimited" if n is None else format_bytes(n)


def _pairs(rows: list[tuple[str, object]]) -> str:
    width = max((len(key) for key, _ in rows), default=0)
    total = output_width()
    lines: list[str] = []
    for key, value in rows:
        text = "-" if value is None else printable(value)
        lines += wrap(text, total, " " * (width + 2), f"{key.ljust(width)}  ")
    return "\n".join(lines)


def _config_rows(cfg: ClusterConfig) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = [
        ("source", f"{cfg.source} ({cfg.source_reason})" if cfg.source_reason else cfg.source),
        ("primary", cfg.host_node_addr),
        ("node address", cfg.node_addr),
        ("node rank", f"{cfg.node_rank} of {cfg.num_nodes}"),
        ("processes per node", cfg.num_trainers),
        ("world size", cfg.world_size),
    ]
    if cfg.process is not None:
        rows.append(("this process", f"rank {cfg.process.rank}, local rank "
                     f"{cfg.process.local_rank} of {cfg.process.local_world_size}"))
    return rows


def _network_rows(facts: Facts) -> list[tuple[object, ...]]:
    cluster = facts.cluster_interface if facts.multi_node else None
    rows: list[tuple[object, ...]] = []
    for interface in facts.network:
        role = facts.avoid.get(interface.name, "")
        if cluster is not None and interface.name == cluster.name:
            role = "cluster: " + facts.cluster_choice[1]
        rows.append((
            interface.name,
            interface.operstate,
            interface.mtu,
            interface.speed_mbps,
            " ".join(str(a) for a in interface.addresses) or None,
            role or None,
        ))
    return rows


def _gid_cell(port: RdmaPort) -> str | None:
    """The GID index NCCL 2.21+ uses, with why it reaches no other node: ``"0 (link-local)"``."""
    from clusterenv.nccl.gid import choose_gid

    choice = choose_gid(port)
    if choice is None:
        return None
    return f"{choice.index} ({choice.problem})" if choice.problem else str(choice.index)


def _rdma_rows(facts: Facts) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for device in facts.rdma.devices:
        for port in device.ports:
            rows.append((
                f"{device.name}:{port.number}",
                port.state,
                port.link_layer,
                f"{port.rate_gbps:g}" if port.rate_gbps is not None else None,
                port.netdev,
                _gid_cell(port),
                "yes" if device.usable and port.active else "no",
            ))
    return rows


def _host_rows(facts: Facts) -> list[tuple[str, object]]:
    host = facts.host
    gpus = f"{host.gpus} visible of {host.gpus_installed}"
    if host.gpu_models:
        gpus += f" ({', '.join(host.gpu_models)})"
    memlock = "unknown" if not host.memlock_known else (
        f"soft {_size(host.memlock_soft)}, hard {_size(host.memlock_hard)}"
    )
    versions = ", ".join(f"{v} ({v.source})" for v in facts.nccl_versions) or "unknown"
    return [
        ("GPUs", gpus),
        ("driver", host.driver_version),
        ("/dev/shm", _size(host.shm_bytes) if host.shm_bytes is not None else "unknown"),  # noqa: S108
        ("memlock", memlock),
        ("CAP_IPC_LOCK", {True: "yes", False: "no", None: "unknown"}[host.cap_ipc_lock]),
        ("GPUDirect RDMA", host.gpudirect_path or "no peer-memory module"),
        ("NCCL", versions),
        ("NCCL config files", ", ".join(f.path for f in host.nccl_conf_files) or "none"),
    ]


def _plan_text(plan: NcclPlan) -> str:
    rows = [(c.action, c.name, c.value, c.reason) for c in plan.changes]
    lines = [table(rows, ("action", "variable", "value", "why"))] if rows else []
    lines += [f"note: {printable(n)}" for n in plan.notes]
    return "\n".join(lines) or "nothing to do"


def _choice_json(choice: BootstrapChoice) -> dict[str, Any]:
    return {
        "interface": choice.interface,
        "address": choice.address,
        "by": choice.by,
        "predicted": {"interface": choice.predicted_interface,
                      "address": choice.predicted_address} if choice.predicted else None,
        "note": choice.note or None,
    }


def bootstrap_json(report: NcclBootstrap) -> dict[str, Any]:
    """``nccl_bootstrap`` of ``show --json``: the choice as the environment stands
    (``interface``, ``address``, ``by``), the same under ``planned``, and the library asked."""
    return {
        **_choice_json(report.current),
        "planned": _choice_json(report.planned),
        "library": report.library.path if report.library else None,
        "library_note": report.library_note,
    }


def _bootstrap_text(report: NcclBootstrap) -> str:
    def line(choice: BootstrapChoice) -> str:
        text = f"{choice.describe()}, by {choice.by}"
        if choice.note:
            text += f"; {choice.note}"
        if choice.disagrees:
            text += (f"; clusterenv predicted {choice.predicted_interface or 'no interface'}")
        return text

    return _pairs([("now", line(report.current)), ("with the plan", line(report.planned)),
                   ("library", report.library_note)])


def run(args: argparse.Namespace) -> int:
    """Print every part; exit 0, or 2 when the environment or host cannot be read."""
    from clusterenv._cli._versions import version_rows, versions
    from clusterenv.diagnosis import diagnose_with_plan  # heavy imports on use

    environ, root = host_context(args)
    diagnosis = diagnose_with_plan(environ, root=root, debug=args.debug,
                                   ask_nccl=not args.no_nccl, nccl_version=args.nccl_version)
    findings, plan, facts = list(diagnosis.findings), diagnosis.plan, diagnosis.facts
    bootstrap = diagnosis.bootstrap
    if facts.config is None:
        return _invalid(args, facts, findings, versions(facts, root))
    found = versions(facts, root)
    if args.json:
        parts: dict[str, Any] = {
            "versions": found,
            "config": facts.config,
            "network": facts.network,
            "rdma": facts.rdma,
            "host": facts.host,
            "plan": plan,
            "nccl_bootstrap": bootstrap_json(bootstrap) if bootstrap else None,
            "findings": findings,
        }
        emit_json(parts)
        return 0
    heading, rows = version_rows(found)
    sections = [
        (heading, _pairs(rows)),
        ("config", _pairs(_config_rows(facts.config))),
        *_node_sections(facts),
        ("plan (clusterenv env / apply_nccl_defaults)", _plan_text(plan)),
        ("NCCL bootstrap interface", _bootstrap_text(bootstrap) if bootstrap else "unknown"),
        ("findings", render_findings(findings)),
    ]
    print("\n\n".join(f"{style(title, 'bold')}\n{body}" for title, body in sections))
    return 0


def _invalid(args: argparse.Namespace, facts: Facts, findings: list[Finding],
             found: dict[str, Any]) -> int:
    """An invalid contract: its problems, and beside them what this node has (interfaces, RDMA,
    host), which is what a user needs to fix them, after the versions. Exit 2: the plan cannot
    be made."""
    from clusterenv._cli._versions import version_rows
    from clusterenv.errors import ConfigError

    check = facts.check
    error = ConfigError(check.problems if check else (), source=facts.source)
    if args.json:
        emit_json({"versions": found, "config": None,
                   "problems": [str(p) for p in error.problems],
                   "network": facts.network, "rdma": facts.rdma, "host": facts.host,
                   "findings": findings})
        return 2
    heading, rows = version_rows(found)
    sections = [
        (heading, _pairs(rows)),
        ("config (invalid: nothing is planned until it is fixed)", str(error)),
        *_node_sections(facts),
        ("findings", render_findings(findings)),
    ]
    print("\n\n".join(f"{style(title, 'bold')}\n{body}" for title, body in sections))
    return 2


def _node_sections(facts: Facts) -> list[tuple[str, str]]:
    """What this node has: its interfaces, RDMA ports and host facts."""
    return [
        ("network", table(_network_rows(facts),
                          ("interface", "state", "mtu", "speed", "addresses", "role"))),
        ("rdma", table(_rdma_rows(facts),
                       ("port", "state", "link", "Gb/s", "netdev", "gid", "usable"))
         if facts.rdma.devices else "no RDMA device"),
        ("host", _pairs(_host_rows(facts))),
    ]
