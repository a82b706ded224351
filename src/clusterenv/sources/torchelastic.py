"""A worker process started by torchrun / TorchElastic (or a launcher that sets the same names).

torchrun gives each worker ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` (processes in the job),
``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node's index) and its own ``MASTER_ADDR`` /
``MASTER_PORT``. Those describe the process group and win. Provider variables that are also
present (Runpod's ``NODE_RANK``, ``NUM_NODES``, ``NUM_TRAINERS``, ``PRIMARY_ADDR``) are
cross-checked; where torchrun may legitimately differ (fewer processes per node than GPUs, group
ranks assigned by a dynamic rendezvous) the difference is a finding, not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._root import Root
from clusterenv.findings import Finding
from clusterenv.sources._base import EnvReader, Reading, Source, parse_host

__all__ = ["TorchElasticSource"]


class TorchElasticSource(Source):
    """A process launched by torchrun (``TORCHELASTIC_RUN_ID``, or ``RANK`` and ``LOCAL_RANK``)."""

    name: ClassVar[str] = "torchelastic"
    description: ClassVar[str] = "a worker process started by torchrun"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """torchrun's run id is set, or a per-process launcher set both ranks."""
        return bool(environ.get("TORCHELASTIC_RUN_ID")) or bool(
            environ.get("RANK") and environ.get("LOCAL_RANK")
        )

    def read(self, environ: Mapping[str, str], root: Root) -> Reading:
        """Read the worker's process-group variables and cross-check the provider's."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        fields["primary_addr"] = env.host(
            "MASTER_ADDR",
            required=True,
            what="the rendezvous address torchrun gave this worker",
            example="10.65.0.2",
        )
        fields["primary_port"] = env.port("MASTER_PORT", required=True)
        fields["node_addr"] = env.ip(
            "NODE_ADDR", required=False, what="this node's cluster address", example="10.65.0.3"
        )
        rank = env.integer("RANK", required=True, what="this process's global rank", example="0")
        local_rank = env.integer(
            "LOCAL_RANK", required=True, what="this process's rank on its node", example="0"
        )
        world = env.integer(
            "WORLD_SIZE",
            required=True,
            what="the number of processes in the job",
            example="16",
            minimum=1,
        )
        local_world = env.integer(
            "LOCAL_WORLD_SIZE",
            required=True,
            what="the number of processes on this node",
            example="8",
            minimum=1,
        )
        group_rank = env.integer(
            "GROUP_RANK",
            required=False,
            what="this node's index in the job",
            example="0",
        )
        if group_rank is None and rank is not None and local_world:
            group_rank = rank // local_world
        fields["node_rank"] = group_rank
        fields["num_trainers"] = local_world
        fields["world_size"] = world
        num_nodes = None
        if world is not None and local_world is not None:
            if world % local_world:
                env.problem(
                    ("WORLD_SIZE", "LOCAL_WORLD_SIZE"),
                    f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local_world}: "
                    "clusterenv needs the same number of processes on every node",
                    "start torchrun with the same --nproc-per-node on every node",
                    "config-world-size",
                )
            else:
                num_nodes = world // local_world
        fields["num_nodes"] = num_nodes
        if rank is not None and world is not None and rank >= world:
            env.problem(
                ("RANK", "WORLD_SIZE"),
                f"RANK={rank} is outside [0, WORLD_SIZE={world})",
                "let the launcher set RANK; do not export it by hand",
                "config-rank-range",
            )
        if local_rank is not None and local_world is not None and local_rank >= local_world:
            env.problem(
                ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                f"LOCAL_RANK={local_rank} is outside [0, LOCAL_WORLD_SIZE={local_world})",
                "let the launcher set LOCAL_RANK; do not export it by hand",
                "config-rank-range",
            )
        if rank is not None and local_rank is not None and local_world is not None:
            fields["process"] = {
                "rank": rank,
                "local_rank": local_rank,
                "local_world_size": local_world,
            }
        reading.notes.extend(_cross_check(env, fields, num_nodes))
        return reading


def _cross_check(
    env: EnvReader, fields: Mapping[str, object], num_nodes: int | None
) -> list[Finding]:
    notes: list[Finding] = []
    trainers = _plain_int(env.get("NUM_TRAINERS"))
    local_world = fields.get("num_trainers")
    if isinstance(trainers, int) and isinstance(local_world, int) and trainers != local_world:
        if local_world < trainers:
            notes.append(
                Finding.of(
                    "worker-fewer-processes",

                    f"torchrun started {local_world} processes on this node but NUM_TRAINERS="
                    f"{trainers} GPUs are available",
                    (f"LOCAL_WORLD_SIZE={local_world}", f"NUM_TRAINERS={trainers}"),
                    f"pass --nproc-per-node={trainers} to torchrun to use every GPU, if intended",
                )
            )
        else:
            notes.append(
                Finding.of(
                    "worker-more-processes",

                    f"torchrun started {local_world} processes on this node but NUM_TRAINERS="
                    f"{trainers}: some processes will share a GPU or fail with 'CUDA error: "
                    "invalid device ordinal'",
                    (f"LOCAL_WORLD_SIZE={local_world}", f"NUM_TRAINERS={trainers}"),
                    f"pass --nproc-per-node={trainers} to torchrun",
                )
            )
    provider_nodes = _plain_int(env.get("NUM_NODES"))
    if isinstance(provider_nodes, int) and num_nodes is not None and provider_nodes != num_nodes:
        notes.append(
            Finding.of(
                "worker-node-count",

                f"the process group spans {num_nodes} nodes but NUM_NODES={provider_nodes}",
                (f"WORLD_SIZE/LOCAL_WORLD_SIZE={num_nodes}", f"NUM_NODES={provider_nodes}"),
                f"pass --nnodes={provider_nodes} to torchrun on each node (clusterenv launch does)",
            )
        )
    provider_rank = _plain_int(env.get("NODE_RANK"))
    group_rank = fields.get("node_rank")
    if (
        isinstance(provider_rank, int)
        and isinstance(group_rank, int)
        and provider_rank != group_rank
    ):
        notes.append(
            Finding.of(
                "worker-node-rank",

                f"torchrun gave this node GROUP_RANK={group_rank} but NODE_RANK={provider_rank}",
                (f"GROUP_RANK={group_rank}", f"NODE_RANK={provider_rank}"),
                "use a static rendezvous with --node-rank=$NODE_RANK (clusterenv launch does)",
            )
        )
    primary_text = env.get("PRIMARY_ADDR")
    master = fields.get("primary_addr")
    if primary_text is not None and isinstance(master, str):
        primary = parse_host(primary_text)
        if primary is not None and primary != master:
            notes.append(
                Finding.of(
                    "worker-primary-addr",

                    f"torchrun's MASTER_ADDR={master} is not PRIMARY_ADDR={primary}",
                    (f"MASTER_ADDR={master}", f"PRIMARY_ADDR={primary}"),
                    "pass --master-addr=$PRIMARY_ADDR to torchrun (clusterenv launch does)",
                )
            )
    return notes


def _plain_int(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None
