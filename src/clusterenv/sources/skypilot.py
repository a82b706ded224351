"""SkyPilot's ``run`` stage: node-level variables on every node of the job.

``SKYPILOT_NODE_RANK`` (0..nodes-1), ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NODE_IPS`` (one IP per
line, in rank order, head first) and ``SKYPILOT_NUM_GPUS_PER_NODE`` (rounded up; ``0`` on CPU
nodes). SkyPilot gives no port: ``MASTER_PORT`` when set, else 29500. The primary is the first
line of ``SKYPILOT_NODE_IPS`` (SkyPilot's own recipe), unless ``MASTER_ADDR`` is set, and this
node's address is its own line. ``setup`` runs with ``SKYPILOT_SETUP_*`` variables on every
cluster node and is not a training context, so it does not match.
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

__all__ = ["SkyPilotSource"]


class SkyPilotSource(Source):
    """A SkyPilot ``run`` command (``SKYPILOT_NODE_RANK``)."""

    name: ClassVar[str] = "skypilot"
    markers: ClassVar[tuple[str, ...]] = ("SKYPILOT_NODE_RANK", "SKYPILOT_NODE_IPS")
    #: What SkyPilot sets only in the ``run`` stage (its environment-variables page): not
    #: ``SKYPILOT_NUM_NODES`` or ``SKYPILOT_TASK_ID``, which are not documented as run-only,
    #: nor the ``SKYPILOT_SETUP_*`` of the ``setup`` stage, which is not a training context.
    identifying: ClassVar[tuple[str, ...]] = (
        "SKYPILOT_NODE_RANK", "SKYPILOT_NODE_IPS", "SKYPILOT_NUM_GPUS_PER_NODE",
    )
    setter: ClassVar[str] = "SkyPilot"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """``SKYPILOT_NODE_RANK`` is set."""
        return bool(environ.get("SKYPILOT_NODE_RANK"))

    def node_facts(self, environ: Mapping[str, str]) -> NodeFacts:
        """Node rank, node count, GPUs per node and the head's IP."""
        ips = [line.strip() for line in environ.get("SKYPILOT_NODE_IPS", "").splitlines()
               if line.strip()]
        gpus = plain_int(environ, "SKYPILOT_NUM_GPUS_PER_NODE")
        return NodeFacts(
            self.name,
            node_rank=plain_int(environ, "SKYPILOT_NODE_RANK"),
            num_nodes=plain_int(environ, "SKYPILOT_NUM_NODES"),
            per_node=gpus if gpus is not None and gpus.value > 0 else None,
            primary=("SKYPILOT_NODE_IPS (first line)", ips[0]) if ips else None,
        )

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read SkyPilot's variables."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        rank = env.integer("SKYPILOT_NODE_RANK", required=True, what="this node's rank",
                           example="<node rank>")
        nodes = env.integer("SKYPILOT_NUM_NODES", required=True, what="the number of nodes",
                            example="<nodes>", minimum=1, maximum=MAX_NODES)
        ips = ip_lines(env, "SKYPILOT_NODE_IPS")
        if ips is None and not env.any_set("SKYPILOT_NODE_IPS"):
            env.problem(("SKYPILOT_NODE_IPS",),
                        "SKYPILOT_NODE_IPS is not set (the nodes' IPs, head first)",
                        "run the command in the task's run section, where SkyPilot sets it",
                        "config-missing")
        if ips is not None and nodes is not None and len(ips) != nodes:
            env.problem(("SKYPILOT_NODE_IPS", "SKYPILOT_NUM_NODES"),
                        f"SKYPILOT_NODE_IPS lists {len(ips)} addresses but SKYPILOT_NUM_NODES="
                        f"{nodes}", "let SkyPilot set them; do not export them by hand",
                        "config-invalid")
        primary = env.host("MASTER_ADDR", required=False, what="the rendezvous address")
        if primary is None and ips:
            primary = ips[0]
        fields["primary_addr"] = primary
        fields["primary_port"] = env.port("MASTER_PORT", required=False, default=DEFAULT_PORT)
        fields["node_addr"] = (
            ips[rank] if ips is not None and rank is not None and rank < len(ips) else None
        )
        fields["node_rank"] = rank
        fields["num_nodes"] = nodes
        fields["num_trainers"] = gpus_or_visible(
            env, "SKYPILOT_NUM_GPUS_PER_NODE", root, what="GPUs per node"
        )
        return reading
