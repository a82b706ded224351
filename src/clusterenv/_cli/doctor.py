"""``clusterenv doctor``: what is wrong on this node, with evidence and fixes."""

from __future__ import annotations

import argparse

from clusterenv._cli._common import (
    add_json,
    add_nccl_version,
    add_no_nccl,
    add_root,
    add_source,
    emit_json,
    host_context,
    render_findings,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--json``, ``--strict``, ``--no-nccl``, ``--root``."""
    add_json(parser)
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 on warnings too, not only on errors"
    )
    add_no_nccl(parser)
    add_nccl_version(parser)
    add_root(parser)
    add_source(parser)


def run(args: argparse.Namespace) -> int:
    """Print findings; exit 1 on errors (with ``--strict`` also on warnings), else 0."""
    from clusterenv._cli._versions import versions
    from clusterenv.diagnosis import diagnose_with_plan  # heavy imports on use
    from clusterenv.diagnosis.assumed import assumptions

    environ, root = host_context(args)
    diagnosis = diagnose_with_plan(environ, root=root, ask_nccl=not args.no_nccl,
                                   nccl_version=args.nccl_version)
    findings, facts = list(diagnosis.findings), diagnosis.facts
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")}
    failing = counts["error"] + (counts["warning"] if args.strict else 0)
    assumed = assumptions(facts)
    if args.json:
        emit_json({"versions": versions(facts, root), "config": facts.config,
                   "assumed": assumed, "findings": findings, "summary": counts})
    else:
        print("assumed:")
        print("\n".join(f"  {line}" for line in assumed.lines()) + "\n")
        print(render_findings(findings))
    return 1 if failing else 0
