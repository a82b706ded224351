"""The node-level cluster contract (``ClusterConfig``) and the worker's ``ProcessContext``.

A *node* context exists before any launcher runs: where the primary is, which node this is, how
many nodes and processes per node. A *process* context exists only inside a worker that torchrun
(or a launcher like it) started: its global and local rank. Runpod's ``WORLD_SIZE`` and
``NODE_RANK`` are node-level; torchrun's ``RANK`` and ``LOCAL_RANK`` are per process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clusterenv._jsonable import json_fields
from clusterenv._root import as_root
from clusterenv._text import count
from clusterenv._values import format_host_port, is_loopback_host, parse_ip
from clusterenv.errors import ConfigError, ConfigProblem
from clusterenv.findings import Finding
from clusterenv.sources import (
    SOURCE_NAMES,
    NodeFacts,
    Reading,
    Source,
    detect_source,
    outer_facts,
    source_named,
)
from clusterenv.sources._base import MAX_NODES, EnvReader, Spelled, Unresolved, same_address
from clusterenv.sources.runpod import pod_evidence

__all__ = ["SOURCE_VARIABLE", "ClusterConfig", "ConfigCheck", "ProcessContext", "check_config"]

#: The variable that forces a source, like ``from_env(source=...)`` (see :func:`check_config`).
SOURCE_VARIABLE = "CLUSTERENV_SOURCE"


class ProcessContext(BaseModel):
    """Where this process sits in the job; only inside a launched worker.

    Attributes:
        rank: Global rank of this process, e.g. ``9``.
        local_rank: Rank on this node, e.g. ``1`` (the GPU index it should use).
        local_world_size: Processes on this node, e.g. ``8``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rank: int = Field(ge=0, description="Global rank of this process, e.g. 9.")
    local_rank: int = Field(ge=0, description="Rank on this node, e.g. 1.")
    local_world_size: int = Field(ge=1, description="Processes on this node, e.g. 8.")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


class ClusterConfig(BaseModel):
    """The validated node-level cluster contract.

    Build it with :meth:`from_env`. Attributes:

        source: Which environment source matched, e.g. ``"torchelastic"``, ``"deepspeed"``,
            ``"slurm"``, ``"runpod"``, ``"generic"`` or ``"local"`` (docs/environment.md lists
            them all, in detection order).
        source_reason: Why it matched, e.g. ``"TORCHELASTIC_RUN_ID is set"``.
        primary_addr: Rendezvous address as given (brackets removed), e.g. ``"10.65.0.2"``.
        primary_port: Rendezvous port, e.g. ``29500``.
        primary_variable: The variable the rendezvous address was read from, e.g.
            ``"PRIMARY_ADDR"`` on Runpod; ``"MASTER_ADDR"`` when the source derived it (the
            variable every launcher reads, and the one to set to change it).
        node_addr: This node's cluster IP, e.g. ``"10.65.0.3"``; None when the source has none.
        node_rank: This node's index, ``0`` on the primary.
        num_nodes: Number of nodes, e.g. ``2``.
        num_trainers: Processes (GPUs) per node, e.g. ``8``.
        world_size: Processes in the job, ``num_nodes * num_trainers``, e.g. ``16``.
        process: The worker's ranks when running inside a launched worker, else None.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="Which environment source matched, e.g. 'runpod'.")
    source_reason: str = Field(
        default="", description="Why that source matched, e.g. 'TORCHELASTIC_RUN_ID is set'."
    )
    primary_addr: str = Field(description="Rendezvous address, e.g. '10.65.0.2'.")
    primary_port: int = Field(ge=1, le=65535, description="Rendezvous port, e.g. 29500.")
    primary_variable: str = Field(
        default="MASTER_ADDR",
        description="The variable the rendezvous address was read from, e.g. 'PRIMARY_ADDR'.",
    )
    node_addr: str | None = Field(default=None, description="This node's cluster IP.")
    node_rank: int = Field(ge=0, description="This node's index, 0 on the primary.")
    num_nodes: int = Field(ge=1, description="Number of nodes, e.g. 2.")
    num_trainers: int = Field(ge=1, description="Processes (GPUs) per node, e.g. 8.")
    world_size: int = Field(ge=1, description="Processes in the job, e.g. 16.")
    process: ProcessContext | None = Field(
        default=None, description="The worker's ranks inside a launched worker."
    )


    @property
    def host_node_addr(self) -> str:
        """``primary_addr:primary_port``, IPv6 in brackets, e.g. ``"[fd00::2]:29500"``."""
        return format_host_port(self.primary_addr, self.primary_port)

    @property
    def is_primary(self) -> bool:
        """Whether this node is the primary (``node_rank == 0``)."""
        return self.node_rank == 0

    @property
    def is_multi_node(self) -> bool:
        """Whether the job spans more than one node."""
        return self.num_nodes > 1

    @property
    def global_ranks(self) -> range:
        """The global ranks of the processes on this node, e.g. ``range(8, 16)`` on node 1."""
        start = self.node_rank * self.num_trainers
        return range(start, start + self.num_trainers)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        source: str | None = None,
        root: str | os.PathLike[str] = "/",
    ) -> ClusterConfig:
        """Read and validate the cluster contract from an environment.

        Args:
            environ: The variables to read; None reads ``os.environ`` at call time.
            source: Force a source by name instead of detecting it (``"runpod"``, …); None
                detects it, honouring ``CLUSTERENV_SOURCE`` (see :func:`check_config`).
            root: Filesystem root used to count GPUs for the defaults (``/`` or a snapshot).

        Returns:
            The validated config.

        Raises:
            ConfigError: With every problem found, each naming the variables, values and fix.

        Reading is pure: nothing is resolved. Two spellings of one address that only a
        resolver can compare (``PRIMARY_ADDR=10.65.0.10`` beside ``MASTER_ADDR=pod-0``) are
        therefore not a problem here; :func:`check_config` lists them in
        :attr:`ConfigCheck.unresolved`, and ``doctor`` and ``launch`` resolve them.
        """
        check = check_config(environ, source=source, root=root)
        if check.config is None:
            raise ConfigError(check.problems, source=check.source)
        return check.config

    def to_env(self) -> dict[str, str]:
        """The canonical contract as variables, in both ``PRIMARY_*`` and ``MASTER_*`` spellings."""
        env = {
            "PRIMARY_ADDR": self.primary_addr,
            "MASTER_ADDR": self.primary_addr,
            "PRIMARY_PORT": str(self.primary_port),
            "MASTER_PORT": str(self.primary_port),
            "HOST_NODE_ADDR": self.host_node_addr,
            "NODE_RANK": str(self.node_rank),
            "NUM_NODES": str(self.num_nodes),
            "NUM_TRAINERS": str(self.num_trainers),
            "WORLD_SIZE": str(self.world_size),
        }
        if self.node_addr is not None:
            env["NODE_ADDR"] = self.node_addr
        return env

    def torchrun_args(self, *, nproc_per_node: int | None = None) -> list[str]:
        """torchrun arguments for this node: a static rendezvous on the primary's address.

        Args:
            nproc_per_node: Processes to start on this node; ``num_trainers`` by default.

        Returns:
            e.g. ``["--nnodes=2", "--nproc-per-node=8", "--node-rank=0",
            "--rdzv-backend=static", "--master-addr=10.65.0.2", "--master-port=29500"]``.
        """
        nproc = self.num_trainers if nproc_per_node is None else nproc_per_node
        return [
            f"--nnodes={self.num_nodes}",
            f"--nproc-per-node={nproc}",
            f"--node-rank={self.node_rank}",
            "--rdzv-backend=static",
            f"--master-addr={self.primary_addr}",
            f"--master-port={self.primary_port}",
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``host_node_addr``, ``is_primary`` and
        ``is_multi_node``."""
        return json_fields(self, host_node_addr=self.host_node_addr, is_primary=self.is_primary,
                           is_multi_node=self.is_multi_node)


@dataclass(frozen=True)
class ConfigCheck:
    """The outcome of reading the environment, for ``doctor``: never raises.

    Attributes:
        source: The source that matched (or was forced).
        config: The config, or None when there were problems.
        problems: Every problem (each becomes an error finding).
        notes: Findings that are not errors (worker cross-checks).
        values: The values of the variables the problems name, as read.
        reason: Why the source matched (or that it was forced).
        unresolved: Spellings of one address that only resolving can compare, e.g.
            ``PRIMARY_ADDR=10.65.0.10`` beside ``MASTER_ADDR=pod-0`` (see
            :class:`~clusterenv.sources._base.Unresolved`): reading never resolves, ``doctor``
            does, and reports each pair that names different hosts.
    """

    source: str
    config: ClusterConfig | None
    problems: tuple[ConfigProblem, ...]
    notes: tuple[Finding, ...]
    #: The values of the variables the problems name, as read.
    values: Mapping[str, str] = field(default_factory=dict)
    #: Why the source matched, e.g. ``"TORCHELASTIC_RUN_ID is set"``.
    reason: str = ""
    #: Spellings of one address left for a resolver to compare.
    unresolved: tuple[Unresolved, ...] = ()

    def findings(self) -> list[Finding]:
        """Problems as error findings, followed by the notes."""
        out = [
            Finding.of(
                p.code,
                p.message,
                (
                    f"source: {self.source}" + (f" ({self.reason})" if self.reason else ""),
                    *tuple(
                        f"{name}={self.values[name]!r}"
                        if name in self.values
                        else f"{name} is unset"
                        for name in p.variables
                    ),
                ),
                p.fix,
            )
            for p in self.problems
        ]
        out.extend(self.notes)
        return out


def check_config(
    environ: Mapping[str, str] | None = None,
    *,
    source: str | None = None,
    root: str | os.PathLike[str] = "/",
) -> ConfigCheck:
    """Read the environment like :meth:`ClusterConfig.from_env`, returning problems as data.

    The source is ``source`` when given (forced, whatever else is set). Otherwise
    ``CLUSTERENV_SOURCE`` names one: a process-level source (a launcher's workers) is then
    forced too, while a node-level one (a platform, e.g. ``paidlc``) is used unless a launcher's
    worker variables are present, because the variable is inherited by the workers that
    launcher starts and their own variables describe them. Without either, the first source
    that matches in the documented order is used.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    chosen, reason, forced_node = _choose_source(env, source)
    if chosen is None:
        named = source if source is not None else env.get(SOURCE_VARIABLE, "")
        variables = () if source is not None else (SOURCE_VARIABLE,)
        where = "source=" if source is not None else f"{SOURCE_VARIABLE}="
        problem = ConfigProblem(
            variables,
            f"{where}{named!r} names no source",
            f"use one of: {', '.join(SOURCE_NAMES)}",
            "config-unknown-source",
        )
        values = {SOURCE_VARIABLE: named} if variables else {}
        return ConfigCheck(str(named), None, (problem,), (), values)
    outer = None
    if chosen.level == "process":  # the node-level evidence around a worker
        outer = forced_node.node_facts(env) if forced_node is not None else None
        if outer is None:
            outer = outer_facts(env, exclude=chosen.name)
    reading = chosen.read(env, as_root(root), outer=outer)
    _validate_common(env, reading)
    if outer is not None:
        _rank_zero_holds_primary(chosen, reading, outer)
    pod = pod_evidence(env)
    if pod:
        reason = f"{reason}; {pod}"
    config = None
    notes = list(reading.notes)
    if not reading.problems:
        config = _build(chosen.name, reason, reading)
    if config is not None and outer is not None:
        notes.extend(_cross_check(chosen, config, outer, reading))
    mentioned = {name for p in reading.problems for name in p.variables}
    values = {name: env[name] for name in sorted(mentioned) if name in env}
    return ConfigCheck(
        chosen.name, config, tuple(reading.problems), tuple(notes), values, reason,
        tuple(reading.unresolved),
    )


def _choose_source(
    environ: Mapping[str, str], forced: str | None
) -> tuple[Source | None, str, Source | None]:
    """The source, why, and the node-level source ``CLUSTERENV_SOURCE`` named if a worker
    source won over it (kept as the outer evidence)."""
    if forced is not None:
        return source_named(forced), f"forced with source={forced!r}", None
    variable = environ.get(SOURCE_VARIABLE, "").strip()
    if variable:
        named = source_named(variable)
        if named is None:
            return None, "", None
        if named.level == "process":
            return named, f"forced with {SOURCE_VARIABLE}={variable}", None
        worker = detect_source(environ, level="process")
        if worker.level == "process":
            why = (
                f"{worker.reason(environ)}; this process is a worker, so {SOURCE_VARIABLE}="
                f"{variable} describes its node and is used as evidence"
            )
            return worker, why, named
        return named, f"forced with {SOURCE_VARIABLE}={variable}", None
    detected = detect_source(environ)
    return detected, detected.reason(environ), None


_NAME = re.compile(r"\b[A-Z][A-Z0-9_]+\b")


def _rank_zero_holds_primary(source: Source, reading: Reading, facts: NodeFacts) -> None:
    """Inside a platform that states this node's address (Runpod's ``NODE_ADDR``), a job that
    rendezvouses on the platform's primary address must make the node holding it its node 0:
    node 0 hosts the rendezvous store (torchrun's agent, or the ``env://`` process with rank
    0), and the others connect to the address. Otherwise nothing listens there and every node
    waits; Slurm or MPI numbering the nodes unlike the platform is the usual cause."""
    fields = reading.fields
    primary, rank = fields.get("primary_addr"), fields.get("node_rank")
    origin = reading.origins.get("node_rank")
    if (facts.primary is None or facts.node_addr is None or origin is None
            or not isinstance(primary, str) or not isinstance(rank, int)):
        return
    primary_variable, platform_primary = facts.primary
    if not same_address(primary, platform_primary):
        return  # the job rendezvouses elsewhere: its own launcher's business
    addr_variable, addr = facts.node_addr
    holds = same_address(addr, platform_primary)
    if holds == (rank == 0):
        return
    used = (reading.primary_variables or ("MASTER_ADDR",))[0]
    index = f"{origin}={rank}" if "=" not in origin and " " not in origin else (
        f"{origin} = {rank}")
    if holds:
        message = (
            f"{addr_variable}={addr} is {primary_variable}, the address the job rendezvouses "
            f"on ({used}={primary}), but {index} makes this node the job's node {rank}: node "
            f"0 hosts the rendezvous on another node, nothing listens at {platform_primary}, "
            "and every node waits"
        )
    else:
        message = (
            f"{index} makes this node the job's node 0, which hosts the rendezvous, but the job "
            f"rendezvouses on {used}={primary} ({primary_variable}), another node "
            f"({addr_variable}={addr} here): nothing listens there, and every node waits"
        )
    variables = tuple(dict.fromkeys((*_NAME.findall(origin), addr_variable, primary_variable)))
    reading.problems.append(ConfigProblem(
        variables,
        message,
        f"start the job's node 0 on the node that holds {primary_variable} (list that node "
        f"first to {source.launcher}), or rendezvous on the job's node 0: export {used}=<the "
        f"cluster address of the node with {origin} = 0>",
        "config-primary-rank",
    ))


def _cross_check(
    source: Source, config: ClusterConfig, facts: NodeFacts, reading: Reading
) -> list[Finding]:
    """Contradictions between a worker's launcher and the outer platform, as findings; a
    rendezvous address spelled unlike the platform's primary (a name beside an address) is left
    in ``reading.unresolved`` for ``doctor`` to resolve."""
    notes: list[Finding] = []
    launcher = source.launcher
    outer = f"source {facts.source}"
    per_node = config.num_trainers
    if facts.per_node is not None and facts.per_node.value != per_node:
        name, value = facts.per_node
        evidence = (f"processes on this node: {per_node} ({launcher})", f"{name}={value}", outer)
        if per_node < value:
            notes.append(Finding.of(
                "worker-fewer-processes",
                f"{launcher} started {count(per_node, 'process')} on this node but "
                f"{name}={value} GPUs are available",
                evidence,
                f"start {value} processes per node to use every GPU, if intended",
            ))
        else:
            process = config.process
            beyond = process is not None and process.local_rank >= value
            notes.append(Finding.of(
                "worker-more-processes",
                (f"this process's local rank {process.local_rank} is beyond {name}={value} "
                 f"GPUs ({launcher} started {count(per_node, 'process')} on this node): it has no "
                 "GPU of its own and fails with 'CUDA error: invalid device ordinal'")
                if beyond and process is not None else
                f"{launcher} started {count(per_node, 'process')} on this node but {name}={value}: "
                "some processes will share a GPU or fail with 'CUDA error: invalid device "
                "ordinal'",
                evidence,
                f"start at most {value} processes per node",
                severity="error" if beyond else None,
            ))
    if facts.num_nodes is not None and facts.num_nodes.value != config.num_nodes:
        name, value = facts.num_nodes
        counted = reading.origins.get("num_nodes")
        stale = (
            f"; or {name} is stale: pods added to a running Runpod cluster do not update it on "
            "the pods already running" if facts.source == "runpod" and config.num_nodes > value
            else ""
        )
        notes.append(Finding.of(
            "worker-node-count",
            f"the process group spans {count(config.num_nodes, 'node')}"
            + (f" ({counted})" if counted else "") + f" but {name}={value}",
            (f"nodes in the process group: {config.num_nodes} ({launcher})",
             f"{name}={value}", outer),
            f"start {launcher} on all {value} nodes with the node count {value} "
            f"(clusterenv launch does){stale}",
        ))
    if (
        facts.node_rank is not None
        and facts.node_rank.value != config.node_rank
        and "node_rank" in reading.origins  # not an assumed index (the batch script's 0)
        and source.name != "mpi"  # MPI daemons' Slurm node ids need not follow rank order
    ):
        name, value = facts.node_rank
        notes.append(Finding.of(
            "worker-node-rank",
            f"{launcher} gave this node the index {config.node_rank} but {name}={value}",
            (f"node index: {config.node_rank} ({launcher})", f"{name}={value}", outer),
            f"give {launcher} the node index {value} (a static rendezvous with --node-rank="
            f"{value}; clusterenv launch does)",
        ))
    if facts.primary is not None and not same_address(facts.primary[1], config.primary_addr):
        variable, address = facts.primary
        if parse_ip(address) is None or parse_ip(config.primary_addr) is None:
            reading.unresolved.append(Unresolved(
                "worker-primary-addr",
                Spelled(variable, address),
                Spelled(config.primary_variable, config.primary_addr),
                "the rendezvous address",
            ))
            return notes
        notes.append(Finding.of(
            "worker-primary-addr",
            f"{launcher}'s MASTER_ADDR={config.primary_addr} is not {variable}={address}",
            (f"MASTER_ADDR={config.primary_addr}", f"{variable}={address}", outer),
            f"rendezvous on {variable} ({address}); clusterenv launch does",
        ))
    return notes


def _validate_common(environ: Mapping[str, str], reading: Reading) -> None:
    """The rules every source shares."""
    env = EnvReader(environ, reading)
    fields = reading.fields
    rank, nodes, trainers = (
        fields.get("node_rank"),
        fields.get("num_nodes"),
        fields.get("num_trainers"),
    )
    if isinstance(nodes, int) and nodes > MAX_NODES:  # a count derived, not read (WORLD_SIZE)
        env.problem(
            (),
            f"the node count {nodes} (derived from the launcher's variables) is above the "
            f"supported maximum of {MAX_NODES}",
            "check the launcher's node and process counts (WORLD_SIZE counts processes)",
            "config-out-of-range",
        )
        fields["num_nodes"] = nodes = None
    if isinstance(rank, int) and isinstance(nodes, int) and rank >= nodes:
        env.problem(
            ("NODE_RANK", "NUM_NODES"),
            f"NODE_RANK={rank} is outside [0, NUM_NODES={nodes}): ranks count from 0",
            f"give each node a distinct NODE_RANK from 0 to {nodes - 1}",
            "config-node-rank",
        )
    world_text = reading.raw.get("WORLD_SIZE")
    if world_text is not None and isinstance(nodes, int) and isinstance(trainers, int):
        world = env.parse_int(
            "WORLD_SIZE",
            world_text,
            what="the number of processes",
            example=str(nodes * trainers),
            minimum=1,
        )
        if world is not None and world != nodes * trainers:
            env.problem(
                ("WORLD_SIZE", "NUM_NODES", "NUM_TRAINERS"),
                f"WORLD_SIZE={world} != NUM_NODES*NUM_TRAINERS={nodes}*{trainers}="
                f"{nodes * trainers}: WORLD_SIZE counts processes (GPUs in the job), not nodes",
                f"export WORLD_SIZE={nodes * trainers}, and pass the node count as --nnodes",
                "config-world-size",
            )
    primary = fields.get("primary_addr")
    if (
        isinstance(primary, str)
        and isinstance(nodes, int)
        and nodes > 1
        and is_loopback_host(primary)
    ):
        names = reading.primary_variables or ("MASTER_ADDR",)
        env.problem(
            names,
            f"{'/'.join(names)}={primary} is a loopback address but NUM_NODES={nodes}: other nodes "
            "cannot reach it and the rendezvous hangs",
            env.fix(names[0], rejected=primary),
            "config-loopback-primary",
        )
    node_addr = fields.get("node_addr")
    if (
        isinstance(node_addr, str)
        and isinstance(nodes, int)
        and nodes > 1
        and is_loopback_host(node_addr)
    ):
        env.problem(
            ("NODE_ADDR",),
            f"NODE_ADDR={node_addr} is a loopback address but NUM_NODES={nodes}",
            env.fix("NODE_ADDR", rejected=node_addr),
            "config-loopback-node",
        )
    if "world_size" not in fields and isinstance(nodes, int) and isinstance(trainers, int):
        fields["world_size"] = nodes * trainers


def _build(source: str, reason: str, reading: Reading) -> ClusterConfig | None:
    data: dict[str, Any] = {"source": source, "source_reason": reason, **reading.fields}
    if reading.primary_variables:
        data["primary_variable"] = reading.primary_variables[0]
    try:
        return ClusterConfig.model_validate(data)
    except ValidationError as e:  # a rule above missed something: still report, never leak
        for error in e.errors():
            where = ".".join(str(p) for p in error["loc"])
            reading.problems.append(
                ConfigProblem((), f"{where}: {error['msg']}", "", "config-invalid")
            )
        return None
