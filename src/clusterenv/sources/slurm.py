"""A Slurm task (``srun``, or the batch script itself).

Slurm describes the *task*: ``SLURM_PROCID`` (rank in the step), ``SLURM_LOCALID`` (rank on the
node), ``SLURM_NODEID`` (the node's index in the step), ``SLURM_NTASKS`` /
``SLURM_STEP_NUM_TASKS``, the node count (``SLURM_STEP_NUM_NODES``, ``SLURM_NNODES``,
``SLURM_JOB_NUM_NODES``), the tasks on each node in compressed form
(``SLURM_STEP_TASKS_PER_NODE`` = ``8(x2),4``; ``SLURM_NTASKS_PER_NODE`` only when
``--ntasks-per-node`` was given) and the host list.

- Several tasks on a node: every task is a training process (``srun --ntasks-per-node=8 python
  train.py``); the config has a process context. Different task counts per node are refused.
- One task per node: the task is a launcher for its node (``srun --ntasks-per-node=1 torchrun
  ...``, ``clusterenv launch``); the config is a node context whose processes per node are
  ``SLURM_GPUS_ON_NODE`` or the visible GPUs (else 1).

The primary is ``MASTER_ADDR`` when set, else the first host of the step's host list
(``SLURM_STEP_NODELIST``, then ``SLURM_NODELIST``, then ``SLURM_JOB_NODELIST``): the first host
of the job's list need not run rank 0 of a step (``-w``, ``-r``, ``--distribution``). Host lists
hold host names, so there is no ``node_addr``. The port is ``MASTER_PORT`` when set, else
Lightning's rule, so that both agree: 15000 + the last four digits of ``SLURM_JOB_ID`` (15000 to
24999, the same on every node of the job), or 29500 without a job id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._gpus import visible_gpu_count
from clusterenv._root import Root
from clusterenv._text import count
from clusterenv._values import parse_host
from clusterenv.sources._base import (
    DEFAULT_PORT,
    MAX_NODES,
    EnvReader,
    NodeFacts,
    Reading,
    Source,
    plain_int,
)
from clusterenv.sources._process import Named, finish_worker
from clusterenv.sources._slurm_parse import expand_hostlist, parse_counts_per_node

__all__ = [
    "STEP_VARIABLES",
    "TASK_VARIABLES",
    "SlurmSource",
    "in_slurm_task",
    "slurm_port",
    "slurm_primary",
    "slurm_tasks_per_node",
]

#: What srun puts into the tasks of a step and sbatch does not put into the batch script: the
#: step's own variables and srun's address (the "OUTPUT ENVIRONMENT VARIABLES" of Slurm's
#: ``srun.1`` less those of ``sbatch.1`` and ``salloc.1``, keeping the ones about the step or
#: srun; ``tools/launcher_variables.py slurm`` lists them from a Slurm checkout). Any one of
#: them shows that this process is a task of an ``srun`` step, not the batch script.
STEP_VARIABLES: tuple[str, ...] = (
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_LAUNCHER_PORT",
    "SLURM_STEP_GPUS",
    "SLURM_SRUN_COMM_HOST",
    "SLURM_SRUN_COMM_PORT",
    "SLURM_LAUNCH_NODE_IPADDR",
)
#: What slurmstepd gives every task it starts, the batch script (task 0 of the batch step)
#: included (``setup_env`` in Slurm's ``src/common/env.c``, listed in ``sbatch.1`` and
#: ``srun.1``), but not an ``salloc`` shell, which runs where salloc ran and is no task.
TASK_VARIABLES: tuple[str, ...] = (
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_GTIDS",
    "SLURM_TASK_PID",
)

_JOB_ID = ("SLURM_JOB_ID", "SLURM_JOBID")
_NODES = ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
_HOSTLISTS = ("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
_TASKS_PER_NODE = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
# Node-level platforms that run their nodes as one Slurm task each (SkyPilot on Slurm): their
# variables describe the node better than the task's.
_PLATFORMS_ON_SLURM = ("SKYPILOT_NODE_RANK", "DSTACK_NODE_RANK")


def in_slurm_task(environ: Mapping[str, str]) -> bool:
    """Whether Slurm started this process (a task of a step, or the batch script), unless a
    platform runs its nodes as Slurm tasks (SkyPilot, dstack on Slurm)."""
    return _slurm_evidence(environ) != ()


def _slurm_evidence(environ: Mapping[str, str]) -> tuple[str, ...]:
    if any(environ.get(n) for n in _PLATFORMS_ON_SLURM):
        return ()
    return tuple(n for n in (*TASK_VARIABLES, *STEP_VARIABLES) if environ.get(n))


def slurm_port(environ: Mapping[str, str]) -> int:
    """The rendezvous port for a Slurm job without ``MASTER_PORT``: Lightning's rule."""
    job = next((environ[n].strip() for n in _JOB_ID if environ.get(n, "").strip()), "")
    digits = job[-4:]
    if digits.isascii() and digits.isdigit():
        return 15000 + int(digits)
    return DEFAULT_PORT


def slurm_primary(env: EnvReader) -> str | None:
    """The first host of the step's host list (recording a problem when it is garbled)."""
    name, value = env.first(*_HOSTLISTS)
    if name is None or value is None:
        return None
    try:
        first = expand_hostlist(value)[0]
    except ValueError as e:
        env.problem(
            (name,),
            f"{name}={value!r} is not a Slurm host list ({e})",
            "export MASTER_ADDR=<the address of the step's first node>",
            "config-bad-address",
        )
        return None
    host = parse_host(first)
    if host is None:
        env.problem(
            (name,),
            f"{name}={value!r}: its first host {first!r} is not a host name",
            "export MASTER_ADDR=<the address of the step's first node>",
            "config-bad-address",
        )
    return host


def slurm_tasks_per_node(env: EnvReader) -> tuple[str, list[int]] | None:
    """Tasks on each node, from ``SLURM_NTASKS_PER_NODE`` or the compressed per-node list."""
    name, value = env.first(*_TASKS_PER_NODE)
    if name is None or value is None:
        return None
    try:
        return name, parse_counts_per_node(value)
    except ValueError as e:
        env.problem(
            (name,),
            f"{name}={value!r} is not Slurm's per-node count format ({e}), e.g. '8(x2),4'",
            "let srun set it; do not export it by hand",
            "config-not-integer",
        )
        return None


class SlurmSource(Source):
    """A task started by Slurm (``SLURM_JOB_ID`` and ``SLURM_PROCID``)."""

    name: ClassVar[str] = "slurm"
    level: ClassVar[str] = "process"
    launcher: ClassVar[str] = "srun"
    markers: ClassVar[tuple[str, ...]] = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_PROCID",
                                          "SLURM_STEP_ID")
    identifying: ClassVar[tuple[str, ...]] = (*TASK_VARIABLES, *STEP_VARIABLES)
    setter: ClassVar[str] = "Slurm"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """A job id and a task rank, unless a platform runs its nodes as Slurm tasks."""
        if not (any(environ.get(n) for n in _JOB_ID) and environ.get("SLURM_PROCID")):
            return False
        return not any(environ.get(n) for n in _PLATFORMS_ON_SLURM)

    def evidence(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """A task's or a step's variables, unless a platform runs its nodes as Slurm tasks."""
        return _slurm_evidence(environ)

    def node_facts(self, environ: Mapping[str, str]) -> NodeFacts | None:
        """The step's node count. Not the node index: a dynamic torchrun rendezvous may number
        the nodes differently and legitimately."""
        nodes = plain_int(environ, *_NODES)
        return None if nodes is None else NodeFacts(self.name, num_nodes=nodes)

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the task; a process context when the step runs several tasks per node."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        in_step = env.any_set(*STEP_VARIABLES)
        primary = env.host(
            "MASTER_ADDR", required=False, what="the rendezvous address"
        )
        if primary is None and not env.any_set("MASTER_ADDR"):
            primary = slurm_primary(env)
            if primary is None and not reading.problems:
                env.problem(
                    _HOSTLISTS,
                    "none of SLURM_STEP_NODELIST, SLURM_NODELIST, SLURM_JOB_NODELIST is set, so "
                    "the primary (the step's first node) is unknown",
                    "export MASTER_ADDR=<the address of the step's first node>",
                    "config-missing",
                )
        fields["primary_addr"] = primary
        fields["primary_port"] = env.port(
            "MASTER_PORT", required=False, default=slurm_port(environ)
        )
        fields["node_addr"] = env.ip(
            "NODE_ADDR", required=False, what="this node's cluster address",
        )
        nodes_name, _ = env.first(*_NODES)
        nodes = env.integer(
            *((nodes_name,) if nodes_name else ("SLURM_NNODES",)),
            required=True, what="the number of nodes in the step", example="<nodes>", minimum=1,
            maximum=MAX_NODES,
        )
        node_rank = env.integer(
            "SLURM_NODEID",
            required=in_step,
            what="this node's index in the step",
            example="<node index>",
        )
        if node_rank is None and not in_step:
            node_rank = 0  # the batch script runs on the first node of the allocation
        per_node_given = env.integer(
            "SLURM_NTASKS_PER_NODE", required=False, what="tasks per node", example="<tasks>",
            minimum=1,
        )
        listed = slurm_tasks_per_node(env)
        if reading.problems or nodes is None or node_rank is None:
            return reading
        tasks: list[int] | None = None
        tasks_name = "SLURM_NTASKS_PER_NODE"
        if listed is not None:
            tasks_name, tasks = listed
            if len(tasks) != nodes:
                env.problem(
                    (tasks_name, nodes_name or "SLURM_NNODES"),
                    f"{tasks_name} lists {count(len(tasks), 'node')} but {nodes_name}={nodes}",
                    "let srun set them; do not export them by hand",
                    "config-uneven-nodes",
                )
                return reading
        elif per_node_given is not None:
            tasks = [per_node_given] * nodes
        if tasks is None or max(tasks) <= 1 or not in_step:
            # One task per node (or the batch script): a launcher for this node.
            fields["node_rank"] = node_rank
            fields["num_nodes"] = nodes
            reading.origins["num_nodes"] = nodes_name or "SLURM_NNODES"
            if in_step:  # the batch script is node 0 by assumption, not by a task's index
                reading.origins["node_rank"] = "SLURM_NODEID"
            gpus = plain_int(environ, "SLURM_GPUS_ON_NODE")
            fields["num_trainers"] = (
                gpus.value if gpus is not None and gpus.value > 0
                else visible_gpu_count(environ, root) or 1
            )
            return reading
        if len(set(tasks)) > 1:
            env.problem(
                (tasks_name,),
                f"{tasks_name}={env.get(tasks_name)!r}: the nodes run different numbers of tasks "
                f"({', '.join(str(t) for t in tasks)}), and clusterenv needs the same number on "
                "every node",
                "start the same number of tasks on every node (srun --ntasks-per-node=<tasks>)",
                "config-uneven-nodes",
            )
            return reading
        self._read_task(env, tasks_name, tasks[0], nodes_name=nodes_name or "SLURM_NNODES",
                        nodes=nodes, node_rank=node_rank)
        return reading

    def _read_task(
        self, env: EnvReader, tasks_name: str, per_node: int, *, nodes_name: str, nodes: int,
        node_rank: int,
    ) -> None:
        rank = env.integer("SLURM_PROCID", required=True, what="this task's rank", example="0")
        local = env.integer(
            "SLURM_LOCALID", required=True, what="this task's rank on the node", example="0"
        )
        world_name, _ = env.first("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
        world = env.integer(
            world_name or "SLURM_NTASKS", required=True, what="the tasks in the step",
            example="<tasks in the step>", minimum=1,
        )
        finish_worker(
            env,
            launcher=self.launcher,
            rank=None if rank is None else Named("SLURM_PROCID", rank),
            local_rank=None if local is None else Named("SLURM_LOCALID", local),
            world=None if world is None else Named(world_name or "SLURM_NTASKS", world),
            local_world=Named(tasks_name, per_node),
            node_rank=Named("SLURM_NODEID", node_rank),
            num_nodes=Named(nodes_name, nodes),
        )
