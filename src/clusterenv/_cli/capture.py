"""``clusterenv capture DIR``: write a host snapshot for a bug report, or to replay in tests."""

from __future__ import annotations

import argparse
from typing import Any

from clusterenv._cli._common import add_json, add_root, add_source, emit_json, host_context
from clusterenv._gpus import visible_gpu_count
from clusterenv._root import Root, format_size_limit
from clusterenv._scrub import is_cluster_name, is_secret_name
from clusterenv._shell import command
from clusterenv._text import printable
from clusterenv.capture import capture
from clusterenv.network import NetworkInterfaces


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``DIR``, ``--json``, ``--root``."""
    parser.add_argument(
        "dir",
        metavar="DIR",
        help="directory to write: new, empty, or an earlier snapshot (which is replaced)",
    )
    add_json(parser)
    add_root(parser)
    add_source(parser)


def run(args: argparse.Namespace) -> int:
    """Capture, then read the snapshot back for a one-line summary; exit 0, or 2 on failure."""
    environ, root = host_context(args)
    path = capture(args.dir, environ=environ, root=root)
    snapshot = Root(path)
    network = NetworkInterfaces.detect(root=snapshot)
    rdma = [
        d for d in snapshot.listdir("sys/class/infiniband")
        if snapshot.is_dir(f"sys/class/infiniband/{d}")
    ]
    recorded = snapshot.recorded_environ() or {}
    withheld = sorted(
        name
        for name in environ
        if is_cluster_name(name) and is_secret_name(name)
    )
    recorded_skips = snapshot.host.get("skipped")
    skipped = {str(k): int(v) for k, v in recorded_skips.items()
               if isinstance(v, int)} if isinstance(recorded_skips, dict) else {}
    summary: dict[str, Any] = {
        "path": str(path.resolve()),
        "interfaces": list(network.names),
        "rdma_devices": rdma,
        "gpus": visible_gpu_count({}, snapshot),
        "environ": sorted(recorded),
        "withheld_secrets": withheld,
        "skipped": skipped,
    }
    if args.json:
        emit_json(summary)
        return 0
    print(f"wrote host snapshot to {printable(summary['path'])}")
    line = (
        f"{len(network)} interfaces ({printable(', '.join(network.names)) or 'none'}), "
        f"{len(rdma)} RDMA devices, {summary['gpus']} GPUs, "
        f"{len(recorded)} environment variables recorded"
    )
    if withheld:
        line += f" ({len(withheld)} left out as secrets: {printable(', '.join(withheld))})"
    print(line + "; MACs, GUIDs and GPU UUIDs scrubbed")
    for name, limit in skipped.items():
        print(f"left out: /{printable(name)} is larger than {format_size_limit(limit)}, the most "
              "clusterenv reads of it; the checks that need it are skipped")
    print(f"replay it with: {printable(command('clusterenv', 'doctor', '--root', args.dir))}")
    return 0
