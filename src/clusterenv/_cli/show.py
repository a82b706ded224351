"""``clusterenv show``: everything detected about this node."""

from __future__ import annotations

import argparse
from typing import Any

from clusterenv._cli._common import add_json, add_root, emit_json, host_context, table

HELP = "show the cluster contract and what this node has"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--json``, ``--root``."""
    add_json(parser)
    add_root(parser)


def run(args: argparse.Namespace) -> int:
    """Print the config (and, as discovery grows, the host); exit 0, or 2 when unreadable."""
    from clusterenv.config import check_config
    from clusterenv.errors import ConfigError

    environ, root = host_context(args)
    check = check_config(environ, root=root)
    if check.config is None:
        raise ConfigError(check.problems, source=check.source)
    parts: dict[str, Any] = {"config": check.config}
    if args.json:
        emit_json(parts)
        return 0
    cfg = check.config
    rows = [
        ("source", cfg.source),
        ("primary", cfg.host_node_addr),
        ("node address", cfg.node_addr),
        ("node rank", f"{cfg.node_rank} of {cfg.num_nodes}"),
        ("processes per node", cfg.num_trainers),
        ("world size", cfg.world_size),
    ]
    if cfg.process is not None:
        rows.append(
            (
                "this process",
                f"rank {cfg.process.rank}, local rank "
                f"{cfg.process.local_rank} of {cfg.process.local_world_size}",
            )
        )
    print(table(rows, ("config", "")))
    return 0
