"""``clusterenv env``: the planned NCCL/Gloo/TensorPipe settings as shell exports.

``eval "$(clusterenv env)"`` exports exactly what :func:`clusterenv.apply_nccl_defaults` would
set. Only variables the plan sets reach stdout; a comment for each value kept or overridden, and
the plan's notes, go to stderr, so the output can always be evaluated.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from clusterenv._cli._common import (
    add_nccl_version,
    add_no_nccl,
    add_plan_options,
    add_root,
    add_source,
    host_context,
)
from clusterenv._jsonable import to_jsonable

if TYPE_CHECKING:
    from clusterenv._root import Root
    from clusterenv.config import ClusterConfig
    from clusterenv.nccl import NcclPlan


FORMATS = ("sh", "fish", "dotenv", "json")
_SAFE = re.compile(r"[\w@%+=:,./-]+", re.ASCII)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--format``, ``--json``, ``--debug``, ``--override``, ``--torchrun``,
    ``--flight-recorder``, ``--no-nccl``, ``--root``."""
    parser.add_argument(
        "--format", choices=FORMATS, default="sh",
        help="sh: export NAME='value' (default); fish: set -gx NAME value; dotenv: NAME=value; "
        "json: one object",
    )
    parser.add_argument("--json", action="store_true", help="same as --format json")
    add_plan_options(parser)
    parser.add_argument(
        "--torchrun", action="store_true",
        help="also export torchrun's PET_* options, so a bare `torchrun train.py` launches this "
        "node (static rendezvous on PRIMARY_ADDR:PRIMARY_PORT)",
    )
    parser.add_argument(
        "--flight-recorder", action="store_true",
        help="also export PyTorch's flight-recorder variables (where unset: buffer size, dump "
        "location in a new job directory, TORCH_NCCL_DUMP_ON_TIMEOUT=1, CLUSTERENV_HANG_DIR), "
        "as `clusterenv launch` sets them, for `clusterenv hang`",
    )
    add_no_nccl(parser)
    add_nccl_version(parser)
    add_root(parser)
    add_source(parser)


def _sh_quote(value: str) -> str:
    """Always single-quoted, so ``=mlx5_0:1`` does not read as ``==``."""
    quoted = shlex.quote(value)
    return quoted if quoted.startswith("'") else f"'{quoted}'"


def _fish_quote(value: str) -> str:
    if value and _SAFE.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _dotenv_quote(value: str) -> str:
    if value and _SAFE.fullmatch(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return '"' + escaped.replace("\n", "\\n") + '"'


def render(env: Mapping[str, str], fmt: str) -> str:
    """The variables in one shell's syntax, one per line (empty string for none).

    Example: ``render({"NCCL_SOCKET_IFNAME": "ens1"}, "sh")`` is
    ``"export NCCL_SOCKET_IFNAME='ens1'\\n"``.
    """
    if fmt == "json":
        return json.dumps(dict(env), indent=2) + "\n"
    lines = []
    for name, value in env.items():
        if fmt == "fish":
            lines.append(f"set -gx {name} {_fish_quote(value)};")
        elif fmt == "dotenv":
            lines.append(f"{name}={_dotenv_quote(value)}")
        else:
            lines.append(f"export {name}={_sh_quote(value)}")
    return "".join(line + "\n" for line in lines)


def comments(plan: NcclPlan) -> list[str]:
    """The stderr lines: each kept or overridden value, each note, and each harmful finding."""
    lines = []
    for change in plan.changes:
        if change.action == "keep":
            where = change.origin or "environment"
            lines.append(f"# kept {change.name}={change.value!r} ({where}): {change.reason}")
        elif change.action == "override":
            lines.append(f"# overriding {change.name}={change.previous!r} with "
                         f"{change.value!r}: {change.reason}")
    lines.extend(f"# {note}" for note in plan.notes)
    lines.extend(
        f"# {f.severity}[{f.code}]: {f.title}" for f in plan.findings if f.severity != "info"
    )
    return lines


def run(args: argparse.Namespace) -> int:
    """Print the exports; exit 0, 1 when an error remains with them (a kept value that breaks
    the job), or 2 when the environment is invalid (nothing is printed then)."""
    from clusterenv.config import check_config  # heavy imports on use only
    from clusterenv.errors import ConfigError
    from clusterenv.nccl import plan_nccl_env

    environ, root = host_context(args)
    check = check_config(environ, root=root)
    if check.config is None:
        raise ConfigError(check.problems, source=check.source)
    plan = plan_nccl_env(environ, root=root, config=check.config, debug=args.debug,
                         override=args.override, nccl_version=args.nccl_version)
    exports = dict(plan.env)
    if args.torchrun:
        from clusterenv.launch import torchrun_env

        exports.update(torchrun_env(check.config))
    recorder = None
    if args.flight_recorder:
        import os

        from clusterenv.hang.enable import job_directory, plan_recorder

        host = root.host.get("hostname") if not root.is_live else None
        recorder = plan_recorder(environ, directory=job_directory(environ, agent_pid=os.getpid()),
                                 host=host if isinstance(host, str) and host else None)
        exports.update(recorder.env)
        for change in recorder.changes:
            if change.action == "keep":
                print(f"# kept {change.name}={change.value!r}: {change.reason}",
                      file=sys.stderr)
    fmt = "json" if args.json else args.format
    if fmt == "json":
        data = {"env": exports, "plan": plan, **({"recorder": recorder} if recorder else {})}
        sys.stdout.write(json.dumps(to_jsonable(data), indent=2) + "\n")
    else:
        sys.stdout.write(render(exports, fmt))
    for line in comments(plan):
        print(line, file=sys.stderr)
    if not args.no_nccl and root.is_live:
        for line in _nccl_comments(environ, plan, root, check.config):
            print(line, file=sys.stderr)
    errors = [f for f in plan.findings if f.severity == "error"]
    if not errors:
        return 0
    # A value the plan keeps will still break the job: say so, and fail the command, so that
    # `out=$(clusterenv env) && eval "$out"` in a job script stops here.
    kept = [c.name for c in plan.changes if c.action == "keep" and not args.override]
    hint = (f"; `clusterenv env --override` replaces the value{'s' if len(kept) > 1 else ''} "
            f"you set ({', '.join(kept)}) with the plan's" if kept else "")
    count = "1 error remains" if len(errors) == 1 else f"{len(errors)} errors remain"
    print(f"# {count} with these settings (exit 1){hint}", file=sys.stderr)
    return 1


def _nccl_comments(
    environ: Mapping[str, str], plan: NcclPlan, root: Root, config: ClusterConfig
) -> list[str]:
    """Ask NCCL which interface it bootstraps on with the exports applied (only when the plan
    sets a variable that changes that choice)."""
    from clusterenv.nccl.bootstrap import BOOTSTRAP_VARIABLES, ask_one

    if not any(name in plan.env for name in BOOTSTRAP_VARIABLES):
        return []
    choice, _ = ask_one({**environ, **plan.env}, root, config)
    if not choice.asked:
        return [f"# without NCCL's own answer: {choice.note}"]
    lines = [f"# {choice.by}: with these settings NCCL bootstraps over {choice.describe()}"]
    if choice.disagrees:
        lines.append(
            f"# warning[nccl-bootstrap-disagrees]: clusterenv predicted "
            f"{choice.predicted_interface or 'no interface'}; NCCL's own answer is the one above"
        )
    return lines
