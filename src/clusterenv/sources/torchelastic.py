"""A worker process started by torchrun / TorchElastic.

torchrun gives each worker ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` (processes in the job),
``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node's index), ``GROUP_WORLD_SIZE`` (the node count)
and its own ``MASTER_ADDR`` / ``MASTER_PORT``, and sets ``TORCHELASTIC_RUN_ID`` (its presence is
the signal; the value may be the literal ``none``). Those describe the process group and win over
anything an outer scheduler or provider set; the outer values are cross-checked (see
``clusterenv.config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._root import Root
from clusterenv.sources._base import MAX_NODES, EnvReader, NodeFacts, Reading, Source
from clusterenv.sources._process import Named, finish_worker

__all__ = ["TORCHRUN_VARIABLES", "TorchElasticSource", "read_env_worker"]

#: What torchrun's agent writes into each worker's environment that no other launcher does:
#: ``LocalElasticAgent._start_workers`` in ``torch/distributed/elastic/agent/server/
#: local_elastic_agent.py``, and ``TORCHELASTIC_ERROR_FILE`` from the log specs in
#: ``torch/distributed/elastic/multiprocessing/api.py`` (``tools/launcher_variables.py torchrun``
#: lists them from an installed torch). ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
#: ``LOCAL_WORLD_SIZE`` and ``MASTER_*`` are torch's ``env://`` names, which other launchers
#: set too, and ``ROLE_NAME`` is too common a word to prove anything.
TORCHRUN_VARIABLES: tuple[str, ...] = (
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
)


class TorchElasticSource(Source):
    """A process launched by torchrun (``TORCHELASTIC_RUN_ID`` is present)."""

    name: ClassVar[str] = "torchelastic"
    level: ClassVar[str] = "process"
    launcher: ClassVar[str] = "torchrun"
    markers: ClassVar[tuple[str, ...]] = ("TORCHELASTIC_RUN_ID",)
    identifying: ClassVar[tuple[str, ...]] = TORCHRUN_VARIABLES

    def matches(self, environ: Mapping[str, str]) -> bool:
        """torchrun's run id is present (any value, ``none`` included)."""
        return "TORCHELASTIC_RUN_ID" in environ

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the worker's process-group variables."""
        reading = Reading()
        env = EnvReader(environ, reading)
        read_env_worker(env, self.launcher)
        return reading


def _named(name: str, value: int | None) -> Named | None:
    return None if value is None else Named(name, value)


def read_env_worker(
    env: EnvReader, launcher: str, *, local_world_default: Named | None = None
) -> None:
    """Read torch's ``env://`` contract (``MASTER_*``, ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
    ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``GROUP_WORLD_SIZE``) into ``env.reading``.

    ``local_world_default`` stands in for an unset ``LOCAL_WORLD_SIZE`` (a launcher that
    exports the node's process count under another name).
    """
    fields = env.reading.fields
    fields["primary_addr"] = env.primary(
        "MASTER_ADDR",
        required=True,
        what=f"the rendezvous address {launcher} gave this process",
    )
    fields["primary_port"] = env.port("MASTER_PORT", required=True)
    fields["node_addr"] = env.ip(
        "NODE_ADDR", required=False, what="this node's cluster address"
    )
    rank = env.integer(
        "RANK", required=True, what="this process's global rank", example="<this process's rank>"
    )
    local_rank = env.integer(
        "LOCAL_RANK",
        required=True,
        what="this process's rank on its node",
        example="<this process's rank on the node>",
    )
    world = env.integer(
        "WORLD_SIZE",
        required=True,
        what="the number of processes in the job",
        example="<processes in the job>",
        minimum=1,
    )
    local_world = env.integer(
        "LOCAL_WORLD_SIZE",
        required=local_world_default is None,
        what="the number of processes on this node",
        example="<processes on this node>",
        minimum=1,
    )
    group_rank = env.integer(
        "GROUP_RANK", required=False, what="this node's index in the job", example="<node index>"
    )
    group_size = env.integer(
        "GROUP_WORLD_SIZE",
        required=False,
        what="the number of nodes in the job",
        example="<number of nodes>",
        minimum=1,
        maximum=MAX_NODES,
    )
    per_node = _named("LOCAL_WORLD_SIZE", local_world)
    if per_node is None and not env.any_set("LOCAL_WORLD_SIZE"):
        per_node = local_world_default
    finish_worker(
        env,
        launcher=launcher,
        rank=_named("RANK", rank),
        local_rank=_named("LOCAL_RANK", local_rank),
        world=_named("WORLD_SIZE", world),
        local_world=per_node,
        node_rank=_named("GROUP_RANK", group_rank),
        num_nodes=_named("GROUP_WORLD_SIZE", group_size),
    )
