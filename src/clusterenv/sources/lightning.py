"""A process started by Lightning's own launcher (``python train.py`` with ``devices=N``).

Lightning's launcher (``_SubprocessScriptLauncher``) starts ``N - 1`` copies of the command and
writes into every process's environment ``LOCAL_RANK``, ``NODE_RANK`` (the existing value, else
``GROUP_RANK``, else 0), ``WORLD_SIZE`` (``devices * num_nodes``: processes, overwriting any
inherited value), ``MASTER_ADDR`` (existing, else ``127.0.0.1``) and ``MASTER_PORT``. It exports
no ``RANK`` and no per-node count: each process computes ``node_rank * devices + local_rank``.

The node count therefore has to come from elsewhere, and only from what proves it:

- a loopback ``MASTER_ADDR`` means one machine;
- an outer provider or scheduler that states the node count (Runpod's ``NUM_NODES``,
  ``SKYPILOT_NUM_NODES``, Slurm's node count, ...), used as evidence.

Processes per node are then ``WORLD_SIZE / nodes``. A Runpod node whose ``NUM_TRAINERS``
differs from ``devices`` is reported as a finding, not an error, since the processes agree among
themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._root import Root
from clusterenv._values import is_loopback_host
from clusterenv.sources._base import EnvReader, NodeFacts, Reading, Source
from clusterenv.sources._process import Named, finish_worker

__all__ = ["LightningSource"]


class LightningSource(Source):
    """A Lightning-spawned process: ``LOCAL_RANK``, ``NODE_RANK``, ``WORLD_SIZE``, no ``RANK``."""

    name: ClassVar[str] = "lightning"
    level: ClassVar[str] = "process"
    launcher: ClassVar[str] = "Lightning"
    markers: ClassVar[tuple[str, ...]] = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE")

    def matches(self, environ: Mapping[str, str]) -> bool:
        """``LOCAL_RANK``, ``NODE_RANK`` and ``WORLD_SIZE`` are set and ``RANK`` is not."""
        return (
            all(environ.get(n) for n in self.markers)
            and not environ.get("RANK")
        )

    def reason(self, environ: Mapping[str, str]) -> str:
        """Which variables matched, and that ``RANK`` is missing."""
        return "LOCAL_RANK, NODE_RANK and WORLD_SIZE are set, RANK is not"

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the child's variables; the node count from loopback or ``outer`` evidence."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        primary = env.primary(
            "MASTER_ADDR",
            required=True,
            what="the rendezvous address Lightning gave this process",
        )
        fields["primary_addr"] = primary
        fields["primary_port"] = env.port("MASTER_PORT", required=True)
        fields["node_addr"] = env.ip(
            "NODE_ADDR",
            required=False,
            what="this node's cluster address",
        )
        local_rank = env.integer(
            "LOCAL_RANK", required=True, what="this process's rank on its node", example="0"
        )
        node_rank = env.integer(
            "NODE_RANK", required=True, what="this node's index", example="<this node's index>"
        )
        world = env.integer(
            "WORLD_SIZE",
            required=True,
            what="the number of processes in the job (devices x num_nodes)",
            example="<devices x num_nodes>",
            minimum=1,
        )
        nodes: Named | None = None
        if primary is not None and is_loopback_host(primary):
            nodes = Named("MASTER_ADDR (loopback: one machine)", 1)
        elif outer is not None and outer.num_nodes is not None:
            nodes = outer.num_nodes
        if nodes is None:
            if primary is not None:
                env.problem(
                    ("WORLD_SIZE", "MASTER_ADDR"),
                    f"this process was started by Lightning (LOCAL_RANK set, RANK unset) with "
                    f"WORLD_SIZE={world} processes and MASTER_ADDR={primary}, but nothing in the "
                    "environment says how many nodes there are, so the processes per node and "
                    "this process's rank cannot be derived",
                    "export NUM_NODES=<the number of nodes, Lightning's num_nodes> on every "
                    "node, or start the job with clusterenv launch",
                    "config-missing",
                )
            return reading
        per_node = None
        if world is not None and nodes.value >= 1:  # NUM_NODES=0 is the outer source's problem
            if world % nodes.value:
                env.problem(
                    ("WORLD_SIZE", nodes.name.split(" ")[0]),
                    f"WORLD_SIZE={world} (Lightning's devices x num_nodes) is not a multiple of "
                    f"{nodes.name}={nodes.value} nodes: Lightning's num_nodes does not match the "
                    "cluster",
                    f"pass num_nodes={nodes.value} to the Trainer or Fabric",
                    "config-uneven-nodes",
                )
                return reading
            per_node = Named("WORLD_SIZE / nodes", world // nodes.value)
        rank = None
        if per_node is not None and local_rank is not None and node_rank is not None:
            rank = Named("NODE_RANK * (WORLD_SIZE / nodes) + LOCAL_RANK",
                         node_rank * per_node.value + local_rank)
        finish_worker(
            env,
            launcher=self.launcher,
            rank=rank,
            local_rank=None if local_rank is None else Named("LOCAL_RANK", local_rank),
            world=None if world is None else Named("WORLD_SIZE", world),
            local_world=per_node,
            node_rank=None if node_rank is None else Named("NODE_RANK", node_rank),
            num_nodes=nodes,
        )
        return reading
