"""``clusterenv launch``: apply the NCCL plan, then become torchrun with the cluster's arguments.

``clusterenv launch -- train.py --lr 3e-4`` on every node replaces itself with ``torchrun
--nnodes=… --nproc-per-node=… --node-rank=… --rdzv-backend=static --master-addr=…
--master-port=… train.py --lr 3e-4`` in an environment with the planned ``NCCL_*``/``GLOO_*``
settings; the job's exit status is torchrun's. ``--dry-run`` prints the command and the
environment changes instead.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, TextIO

from clusterenv._cli._common import (
    add_json,
    add_nccl_version,
    add_plan_options,
    add_root,
    add_source,
    emit_json,
    host_context,
    render_findings,
    table,
    whole_number,
)

if TYPE_CHECKING:
    from clusterenv.launch import LaunchPlan




def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--dry-run``, ``--nproc-per-node``, ``--override``, ``--debug``, ``--quiet``, ``--json``,
    ``--root`` and the command."""
    parser.usage = "%(prog)s [options] [--] SCRIPT [ARGS ...]"
    parser.add_argument(
        "--dry-run", action="store_true",
        help="print the torchrun command and the environment changes; run nothing",
    )
    parser.add_argument(
        "--nproc-per-node", type=whole_number(1, "expected at least 1 process per node"),
        metavar="N", default=None,
        help="processes on this node (default: NUM_TRAINERS, else the visible GPUs, else 1)",
    )
    parser.add_argument(
        "--launcher", choices=("torchrun", "srun", "mpirun"), default="torchrun",
        help="torchrun (default: run this on every node), or srun / mpirun (run once, e.g. in "
        "the batch script: it starts `python SCRIPT` on every node)",
    )
    add_plan_options(parser)
    add_nccl_version(parser)
    parser.add_argument(
        "--force", action="store_true",
        help="start the job even when an error remains after the plan (by default launch "
        "exits 1 and starts nothing: the job would fail or hang)",
    )
    parser.add_argument(
        "--no-flight-recorder", action="store_true",
        help="do not set PyTorch's flight-recorder variables or write the launch record "
        "(by default both are done, so `clusterenv hang` can name the rank and node that "
        "stopped)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true",
        help="do not print the command and the changes before starting it",
    )
    add_json(parser)
    add_root(parser)
    add_source(parser)
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS ...]",
        help="the training script and its arguments; torchrun options may come first "
        "(`-- --max-restarts=3 train.py`) and win over clusterenv's",
    )


def _summary(plan: LaunchPlan, stream: TextIO, heading: str = "command:") -> str:
    recorder = plan.recorder.changes if plan.recorder is not None else ()
    rows = [(c.action, c.name, c.value, c.reason) for c in (*plan.nccl.changes, *recorder)]
    rows += [("set", name, value, "every rank reads the rendezvous from the launcher's "
              "environment") for name, value in plan.rendezvous.items()]
    env = (
        table(rows, ("action", "variable", "value", "reason"))
        if rows
        else "no changes" + "".join(f"\n  {note}" for note in plan.nccl.notes)
    )
    parts = [f"{heading}\n  {shlex.join(plan.command)}", f"environment:\n{env}"]
    if plan.findings:
        parts.append(render_findings(plan.findings, stream))
    return "\n\n".join(parts)


def run(args: argparse.Namespace) -> int:
    """Exec torchrun (never returns), or print the plan with ``--dry-run``. Exit 1, starting
    nothing, when an error remains after the plan (unless ``--force``); else 0."""
    from clusterenv.errors import LaunchError
    from clusterenv.launch import exec_plan, plan_launch, refusal

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.json and not args.dry_run:
        raise LaunchError("--json needs --dry-run: a running job owns stdout")
    if args.root is not None and not args.dry_run:
        raise LaunchError(
            "--root needs --dry-run: a snapshot describes another host, and the job would run "
            "on this one"
        )
    environ, root = host_context(args)
    plan = plan_launch(
        environ, command=command, root=root, nproc_per_node=args.nproc_per_node,
        override=args.override, debug=args.debug, nccl_version=args.nccl_version,
        torchrun=["torchrun"] if args.root is not None else None, launcher=args.launcher,
        flight_recorder=not args.no_flight_recorder,
    )
    refused = plan.refused and not args.force
    if not args.dry_run:
        missing = [f for f in plan.findings if f.code == "launch-torchrun-missing"]
        if missing:
            raise LaunchError(missing[0].title)
        if not args.quiet or refused:
            # Information, not an error: no "clusterenv launch:" prefix (stdout is the job's).
            heading = "this node would start:" if refused else "starting on this node:"
            print(f"{_summary(plan, sys.stderr, heading)}\n", file=sys.stderr)
        if refused:
            print(f"clusterenv launch: {refusal(plan, force='--force')}", file=sys.stderr)
            return 1
        exec_plan(plan, force=args.force)
    if args.json:
        emit_json({
            "config": plan.config,
            "command": list(plan.command),
            "env": plan.changes,
            "plan": plan.nccl,
            "recorder": plan.recorder,
            "record": plan.record,
            "findings": list(plan.findings),
            "refused": refused,
        })
    else:
        print(_summary(plan, sys.stdout))
        if refused:
            print(f"\n{refusal(plan, force='--force')}")
    return 1 if refused else 0
