"""What every process-level source shares: turning a worker's ranks into a node context.

A launcher that starts one process per GPU gives each process some of: its global rank, its
local rank, the world size, the processes on its node, the node's index and the node count, each
under its own names (torchrun's ``LOCAL_WORLD_SIZE`` is DeepSpeed's ``LOCAL_SIZE`` and Open MPI's
``OMPI_COMM_WORLD_LOCAL_SIZE``). :func:`finish_worker` derives what is missing and applies the
same checks to all of them, naming the variables of the launcher that set them:

- the rank is below the world size, the local rank below the local size;
- every node runs the same number of processes: the world size is the node count times the
  local size (with the node count given, e.g. ``GROUP_WORLD_SIZE``, an uneven layout is caught
  on every node, not only on the one whose local size does not divide the world size);
- ranks sit in blocks on each node (``rank == node index x local size + local rank``): a node
  index derived as ``rank // local size`` needs it, and ``ClusterConfig.global_ranks`` assumes
  it; round-robin placement is refused.
"""

from __future__ import annotations

import re

from clusterenv.sources._base import EnvReader, Named

__all__ = ["Named", "finish_worker"]

_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9_]+\b")


def _variables(*labels: str) -> tuple[str, ...]:
    """The variable names in labels (an expression names several), each once, in order."""
    return tuple(dict.fromkeys(n for label in labels for n in _VARIABLE.findall(label)))


def finish_worker(
    env: EnvReader,
    *,
    launcher: str,
    rank: Named | None,
    local_rank: Named | None,
    world: Named | None,
    local_world: Named | None,
    node_rank: Named | None = None,
    num_nodes: Named | None = None,
) -> None:
    """Fill ``node_rank``, ``num_nodes``, ``num_trainers``, ``world_size`` and ``process``.

    Args:
        env: The reader whose ``reading.fields`` are filled and where problems are recorded.
        launcher: Who set these variables, for messages (``"torchrun"``, ``"mpirun"``).
        rank: This process's global rank.
        local_rank: This process's rank on its node.
        world: Processes in the job.
        local_world: Processes on this node.
        node_rank: This node's index, when the launcher gives it.
        num_nodes: The node count, when the launcher gives it.
    """
    fields = env.reading.fields
    if rank is not None and world is not None and rank.value >= world.value:
        env.problem(
            _variables(rank.name, world.name),
            f"{rank.name}={rank.value} is outside [0, {world.name}={world.value})",
            f"let {launcher} set {rank.name}; do not export it by hand",
            "config-rank-range",
        )
    if local_rank is not None and local_world is not None and local_rank.value >= local_world.value:
        env.problem(
            _variables(local_rank.name, local_world.name),
            f"{local_rank.name}={local_rank.value} is outside [0, {local_world.name}="
            f"{local_world.value}): more processes run on this node than {launcher} says",
            f"let {launcher} set {local_rank.name}; do not export it by hand",
            "config-rank-range",
        )
    nodes: int | None = None
    if world is not None and local_world is not None:
        total, per_node = world.value, local_world.value
        if num_nodes is not None and num_nodes.value * per_node != total:
            env.problem(
                _variables(world.name, num_nodes.name, local_world.name),
                f"{world.name}={total} but {num_nodes.name}={num_nodes.value} nodes x "
                f"{local_world.name}={per_node} processes on this node = "
                f"{num_nodes.value * per_node}: the nodes run different numbers of processes, "
                "and clusterenv needs the same number on every node",
                f"start the same number of processes on every node with {launcher}",
                "config-uneven-nodes",
            )
        elif num_nodes is None and total % per_node:
            env.problem(
                _variables(world.name, local_world.name),
                f"{world.name}={total} is not a multiple of {local_world.name}={per_node}: the "
                "nodes run different numbers of processes, and clusterenv needs the same "
                "number on every node",
                f"start the same number of processes on every node with {launcher}",
                "config-uneven-nodes",
            )
        else:
            nodes = total // per_node
    elif num_nodes is not None:
        nodes = num_nodes.value
    if node_rank is None and rank is not None and local_world is not None:
        if local_rank is not None and rank.value % local_world.value != local_rank.value:
            env.problem(
                _variables(rank.name, local_rank.name, local_world.name),
                f"{rank.name}={rank.value} with {local_rank.name}={local_rank.value} and "
                f"{local_world.name}={local_world.value}: consecutive ranks are not on the same "
                f"node, so this node's index cannot be derived as {rank.name} // "
                f"{local_world.name}",
                "place consecutive ranks on the same node (mpirun --map-by slot, "
                "srun --distribution=block)",
                "config-rank-layout",
            )
        else:
            node_rank = Named(f"{rank.name} // {local_world.name}",
                              rank.value // local_world.value)
    elif (
        node_rank is not None
        and rank is not None
        and local_rank is not None
        and local_world is not None
        and nodes is not None
        and rank.value != node_rank.value * local_world.value + local_rank.value
        and not env.reading.problems
    ):
        env.problem(
            _variables(rank.name, node_rank.name, local_world.name, local_rank.name),
            f"{rank.name}={rank.value} is not {node_rank.name}={node_rank.value} x "
            f"{local_world.name}={local_world.value} + {local_rank.name}={local_rank.value}: "
            "consecutive ranks are not on the same node, and every node's list of ranks would be "
            "wrong",
            "place consecutive ranks on the same node (srun --distribution=block, "
            "mpirun --map-by slot)",
            "config-rank-layout",
        )
    fields["node_rank"] = None if node_rank is None else node_rank.value
    fields["num_nodes"] = nodes
    origins = env.reading.origins
    for key, named in (("node_rank", node_rank), ("num_nodes", num_nodes),
                       ("num_trainers", local_world)):
        if named is not None:
            origins.setdefault(key, named.name)
    if num_nodes is None and world is not None and local_world is not None:
        origins.setdefault("num_nodes", f"{world.name} / {local_world.name}")
    fields["num_trainers"] = None if local_world is None else local_world.value
    fields["world_size"] = None if world is None else world.value
    if (
        rank is not None
        and local_rank is not None
        and local_world is not None
        and not env.reading.problems
    ):
        fields["process"] = {
            "rank": rank.value,
            "local_rank": local_rank.value,
            "local_world_size": local_world.value,
        }
