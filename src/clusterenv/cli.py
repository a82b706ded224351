"""The ``clusterenv`` command line: one verb per module in :mod:`clusterenv._cli`.

Each verb module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Only the chosen verb's heavy imports are paid for. Exit codes: 0 fine, 1 problems found,
2 the command could not do its job (bad usage, unreadable host, bad environment).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from clusterenv import __version__
from clusterenv.errors import ClusterEnvError

__all__ = ["VERBS", "build_parser", "main"]

#: Verb name -> module under clusterenv._cli.
VERBS: dict[str, str] = {
    "show": "show",
    "doctor": "doctor",
    "env": "env",
    "capture": "capture",
    "nccl-log": "nccl_log",
    "launch": "launch",
    "preflight": "preflight",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every verb registered."""
    parser = argparse.ArgumentParser(
        prog="clusterenv",
        description=(
            "Know the multi-node GPU cluster you run on, and configure NCCL, Gloo and torchrun "
            "before anything hangs."
        ),
    )
    parser.add_argument("--version", action="version", version=f"clusterenv {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    for verb, module_name in VERBS.items():
        module = importlib.import_module(f"clusterenv._cli.{module_name}")
        sub = verbs.add_parser(verb, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args._run(args)
    except ClusterEnvError as e:
        print(f"clusterenv {args.verb}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `clusterenv show | head`: the reader left; that is not our failure.
        sys.stderr.close()
        return 0
    return code
