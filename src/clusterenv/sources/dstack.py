"""dstack tasks: node-level variables on every node (job) of a replica.

``DSTACK_MASTER_NODE_IP`` (job 0's internal IP; may be empty while unknown), ``DSTACK_NODE_RANK``,
``DSTACK_NODES_NUM``, ``DSTACK_NODES_IPS`` (one IP per line, rank order),
``DSTACK_GPUS_PER_NODE`` (this node's GPUs) and ``DSTACK_GPUS_NUM`` (the sum over nodes). dstack
gives no port: ``MASTER_PORT`` when set, else 29500. With node groups the nodes can have
different GPU counts; ``DSTACK_GPUS_NUM`` shows it, and it is refused because every node must
run the same number of processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._root import Root
from clusterenv.sources._base import (
    DEFAULT_PORT,
    MAX_NODES,
    EnvReader,
    NodeFacts,
    Reading,
    Source,
    plain_int,
)
from clusterenv.sources._node import gpus_or_visible, ip_lines

__all__ = ["DstackSource"]


class DstackSource(Source):
    """A dstack task node (``DSTACK_NODE_RANK``)."""

    name: ClassVar[str] = "dstack"
    markers: ClassVar[tuple[str, ...]] = ("DSTACK_NODE_RANK", "DSTACK_MASTER_NODE_IP")
    #: The cluster variables dstack's runner gives a task's jobs (``executor.go``,
    #: ``tasks.md`` "System environment variables").
    identifying: ClassVar[tuple[str, ...]] = (
        "DSTACK_NODE_RANK", "DSTACK_NODES_NUM", "DSTACK_MASTER_NODE_IP", "DSTACK_NODES_IPS",
        "DSTACK_MPI_HOSTFILE",
    )
    setter: ClassVar[str] = "dstack"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """``DSTACK_NODE_RANK`` is set."""
        return bool(environ.get("DSTACK_NODE_RANK"))

    def node_facts(self, environ: Mapping[str, str]) -> NodeFacts:
        """Node rank, node count, GPUs per node and the master IP."""
        gpus = plain_int(environ, "DSTACK_GPUS_PER_NODE")
        master = (environ.get("DSTACK_MASTER_NODE_IP") or "").strip()
        return NodeFacts(
            self.name,
            node_rank=plain_int(environ, "DSTACK_NODE_RANK"),
            num_nodes=plain_int(environ, "DSTACK_NODES_NUM"),
            per_node=gpus if gpus is not None and gpus.value > 0 else None,
            primary=("DSTACK_MASTER_NODE_IP", master) if master else None,
        )

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read dstack's variables."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        fields["primary_addr"] = env.primary(
            "DSTACK_MASTER_NODE_IP", required=True,
            what="job 0's internal IP (empty while dstack does not know it yet)",
        )
        fields["primary_port"] = env.port("MASTER_PORT", required=False, default=DEFAULT_PORT)
        rank = env.integer("DSTACK_NODE_RANK", required=True, what="this node's rank",
                           example="<node rank>")
        nodes = env.integer("DSTACK_NODES_NUM", required=True, what="the number of nodes",
                            example="<nodes>", minimum=1, maximum=MAX_NODES)
        ips = ip_lines(env, "DSTACK_NODES_IPS")
        if ips is not None and nodes is not None and len(ips) != nodes:
            env.problem(("DSTACK_NODES_IPS", "DSTACK_NODES_NUM"),
                        f"DSTACK_NODES_IPS lists {len(ips)} addresses but DSTACK_NODES_NUM="
                        f"{nodes}", "let dstack set them; do not export them by hand",
                        "config-invalid")
        fields["node_addr"] = (
            ips[rank] if ips is not None and rank is not None and rank < len(ips) else None
        )
        per_node = gpus_or_visible(env, "DSTACK_GPUS_PER_NODE", root, what="GPUs on this node")
        total = env.integer("DSTACK_GPUS_NUM", required=False, what="GPUs over all nodes",
                            example="<GPUs in the job>")
        gpus = plain_int(environ, "DSTACK_GPUS_PER_NODE")
        if (total and nodes is not None and gpus is not None and gpus[1] > 0
                and total != nodes * gpus[1]):
            env.problem(
                ("DSTACK_GPUS_NUM", "DSTACK_NODES_NUM", "DSTACK_GPUS_PER_NODE"),
                f"DSTACK_GPUS_NUM={total} but DSTACK_NODES_NUM={nodes} x DSTACK_GPUS_PER_NODE="
                f"{gpus[1]} = {nodes * gpus[1]}: the nodes have different GPU counts, and "
                "clusterenv needs the same number of processes on every node",
                "use nodes with the same number of GPUs (one node group)",
                "config-uneven-nodes",
            )
        fields["node_rank"] = rank
        fields["num_nodes"] = nodes
        fields["num_trainers"] = per_node
        return reading
