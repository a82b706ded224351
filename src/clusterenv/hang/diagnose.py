"""The two ways to run the attribution: on the dumps at hand, or across every node."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from clusterenv._facts import Facts
from clusterenv._jsonable import json_fields
from clusterenv._root import as_root
from clusterenv._values import format_host_port
from clusterenv.config import ClusterConfig
from clusterenv.hang.attribute import attribute
from clusterenv.hang.collect import collect_on_node, serve_hang_primary
from clusterenv.hang.dumps import read_inputs
from clusterenv.hang.evidence import attach_evidence
from clusterenv.hang.messages import NodeReport
from clusterenv.hang.recorder import HANG_DIR_VARIABLE, default_hang_base
from clusterenv.hang.report import HangReport
from clusterenv.hang.unpickle import DEFAULT_DUMP_LIMITS, DumpLimits
from clusterenv.preflight import PreflightOptions, default_port
from clusterenv.preflight.fingerprint import TOKEN_VARIABLE
from clusterenv.preflight.node import PreflightError
from clusterenv.preflight.run import local_primary_address as local_primary

__all__ = ["CollectResult", "collect_hang", "default_paths", "diagnose_hang"]


def default_paths(environ: Mapping[str, str]) -> tuple[list[Path], str]:
    """Where to look when no path is given, and why: ``CLUSTERENV_HANG_DIR``, else the newest
    job directory under the default base (see :func:`~clusterenv.hang.recorder.
    default_hang_base`)."""
    given = environ.get(HANG_DIR_VARIABLE)
    if given:
        return [Path(given)], f"{HANG_DIR_VARIABLE}={given}"
    base = default_hang_base(environ)
    try:
        jobs = [p for p in base.iterdir() if p.is_dir()]
    except OSError:
        jobs = []
    if not jobs:
        return [], f"no job directory under {base}"
    newest = max(jobs, key=lambda p: (p.stat().st_mtime, p.name))
    return [newest], f"the newest job directory under {base}"


def diagnose_hang(
    paths: Sequence[str | os.PathLike[str]],
    *,
    nccl_logs: Sequence[str | os.PathLike[str]] = (),
    preflight: str | os.PathLike[str] | None = None,
    limits: DumpLimits = DEFAULT_DUMP_LIMITS,
) -> HangReport:
    """Read the dumps and launch records in ``paths`` and attribute the hang.

    Args:
        paths: Dump files and directories (read one level deep).
        nccl_logs: ``NCCL_DEBUG=INFO`` logs of the same job, to quote about the nodes named.
        preflight: The output of ``clusterenv preflight --json`` of the same cluster.
        limits: Bounds on each file.

    Returns:
        The report; its ``exit_code`` is 1 when a hang is attributed, 0 when every rank
        agrees, 2 when no dump was readable.
    """
    inputs = read_inputs(paths, limits=limits)
    report = attribute(inputs.dumps, inputs.records, notes=inputs.notes)
    return attach_evidence(report, nccl_logs=nccl_logs, preflight=preflight)


@dataclass(frozen=True, slots=True)
class CollectResult:
    """What ``hang --collect`` concluded on this node.

    Attributes:
        role: ``"primary"``, ``"node"`` or ``"single"`` (a one-node job: nothing to collect).
        report: The attribution (on a node that could not reach the primary: from its own
            dumps only).
        error: Why the collection could not complete, naming the address; else None.
        endpoint: The primary's address and port, e.g. ``"10.65.0.2:29501"``.
    """

    role: Literal["primary", "node", "single"]
    report: HangReport
    error: str | None = None
    endpoint: str | None = None

    @property
    def exit_code(self) -> int:
        """The report's exit code, or 2 when the collection could not complete."""
        return 2 if self.error else self.report.exit_code

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``exit_code``."""
        return json_fields(self, exit_code=self.exit_code)


def collect_hang(
    environ: Mapping[str, str] | None = None,
    *,
    paths: Sequence[str | os.PathLike[str]],
    timeout: float = 30.0,
    port: int | None = None,
    nccl_logs: Sequence[str | os.PathLike[str]] = (),
    preflight: str | os.PathLike[str] | None = None,
    limits: DumpLimits = DEFAULT_DUMP_LIMITS,
) -> CollectResult:
    """Run on every node at once: gather every node's dumps on the primary, attribute there,
    and return the same report on every node.

    Args:
        environ: The environment (the cluster contract and ``CLUSTERENV_PREFLIGHT_TOKEN``);
            None reads ``os.environ``.
        paths: This node's dump files and directories.
        timeout: Seconds the primary waits for every node, and a node keeps trying to reach it.
        port: The TCP port; default preflight's (``PRIMARY_PORT + 1``).
        nccl_logs: NCCL logs to quote about the nodes named (read on this node).
        preflight: A preflight verdict (``--json`` output) of the same cluster.
        limits: Bounds on each dump file.

    Raises:
        ConfigError: When the cluster environment is invalid.
        ValueError: ``timeout`` not positive or ``port`` outside 1–65535.
    """
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"port={port!r}: expected 1..65535")
    env: Mapping[str, str] = os.environ if environ is None else environ
    config = ClusterConfig.from_env(env)
    inputs = read_inputs(paths, limits=limits)
    own_record = next((r for r in inputs.records if r.node_rank == config.node_rank), None)
    layout = (config.num_nodes, config.num_trainers)
    own = NodeReport(config.node_rank, socket.gethostname(), inputs.dumps, own_record,
                     inputs.notes, layout)
    options = PreflightOptions(timeout=timeout, token=env.get(TOKEN_VARIABLE, "").encode()
                               or None)

    def finish(report: HangReport) -> HangReport:
        return attach_evidence(report, nccl_logs=nccl_logs, preflight=preflight)

    local = attribute(inputs.dumps, inputs.records, notes=inputs.notes, layout=layout)
    if config.num_nodes <= 1:
        return CollectResult("single", finish(local))
    chosen = port if port is not None else default_port(config.primary_port)
    facts = Facts(environ=env, root=as_root("/"), config=config)
    listen = local_primary(facts, config.primary_addr)
    if listen is not None:
        endpoint = format_host_port(listen, chosen)
        try:
            collected = serve_hang_primary(own, listen_addr=listen, port=chosen,
                                           expected_nodes=config.num_nodes, options=options)
        except OSError as e:
            return CollectResult("primary", finish(local),
                                 f"cannot listen on {endpoint}: {e.strerror or e}; choose "
                                 "another --port (the same on every node)", endpoint)
        return CollectResult("primary", finish(collected.report()), None, endpoint)
    endpoint = format_host_port(config.primary_addr, chosen)
    try:
        collected = collect_on_node(own, primary_addr=config.primary_addr, port=chosen,
                                    options=options, source_addr=config.node_addr)
    except PreflightError as e:
        return CollectResult("node", finish(local), f"{e}; the report below is from this "
                             "node's own dumps only", endpoint)
    return CollectResult("node", finish(collected.report()), None, endpoint)
