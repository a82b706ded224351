"""``clusterenv doctor``: what is wrong on this node, with evidence and fixes."""

from __future__ import annotations

import argparse

from clusterenv._cli._common import add_json, add_root, emit_json, host_context, render_findings

HELP = "check this node and explain what will break the job (exit 1 on errors)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--json``, ``--root``."""
    add_json(parser)
    add_root(parser)


def run(args: argparse.Namespace) -> int:
    """Print findings; exit 1 when any is an error."""
    from clusterenv.config import check_config
    from clusterenv.findings import has_errors

    environ, root = host_context(args)
    check = check_config(environ, root=root)
    findings = check.findings()
    if args.json:
        emit_json({"config": check.config, "findings": findings})
    else:
        print(render_findings(findings))
    return 1 if has_errors(findings) else 0
