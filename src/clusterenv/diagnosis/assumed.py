"""What doctor assumed, said first: the source, nodes x processes, this node's rank, the cluster
interface, RDMA and GPUs; and a warning when a node that looks like a cluster node has no cluster
variable at all (a shell that lost them, e.g. through ``sudo``), so that every node would train
alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterenv._facts import Facts
from clusterenv.findings import Finding
from clusterenv.sources import runpod

__all__ = ["Assumptions", "assumptions", "cluster_variables_missing"]

# Names of interfaces that carry cluster traffic on GPU clusters: Runpod's ens1-ens8, other
# clouds' ens*/ib* (IPoIB) ones.
_CLUSTER_NAMES = re.compile(r"(ens|ib)\w*")


@dataclass(frozen=True, slots=True)
class Assumptions:
    """What the verdict rests on, one line each.

    Attributes:
        source: The environment source and why, e.g. ``"runpod (PRIMARY_ADDR ... are set)"``.
        layout: Nodes x processes, e.g. ``"2 nodes x 8 processes (16 in the job)"``.
        node: This node's rank and the rendezvous, e.g. ``"rank 1; rendezvous 10.65.0.2:29500"``.
        cluster_interface: e.g. ``"ens1 (10.65.0.3): ens1 holds NODE_ADDR 10.65.0.3"``.
        rdma: e.g. ``"2 usable devices (roce): mlx5_0, mlx5_1"`` or ``"none found"``.
        gpus: e.g. ``"8 visible"``.
    """

    source: str
    layout: str
    node: str
    cluster_interface: str
    rdma: str
    gpus: str

    def lines(self) -> list[str]:
        """``["source: runpod (...)", "nodes: 2 x 8 processes ...", ...]``, for people."""
        return [f"{label}: {value}" for label, value in (
            ("source", self.source), ("nodes", self.layout), ("this node", self.node),
            ("cluster interface", self.cluster_interface), ("RDMA", self.rdma),
            ("GPUs", self.gpus),
        )]


def assumptions(facts: Facts) -> Assumptions:
    """What doctor assumed about this node, from the facts it judged."""
    check = facts.check
    config = facts.config
    reason = config.source_reason if config is not None else (check.reason if check else "")
    source = facts.source + (f" ({reason})" if reason else "")
    if facts.source == "local":
        source += ": the local default, this machine alone"
    if config is None:
        layout = node = "unknown: the cluster environment is invalid"
    else:
        layout = (f"{config.num_nodes} node{'s' if config.num_nodes != 1 else ''} x "
                  f"{config.num_trainers} process{'es' if config.num_trainers != 1 else ''} "
                  f"per node ({config.world_size} in the job)")
        node = f"rank {config.node_rank}; rendezvous {config.host_node_addr}"
    if config is None:
        cluster = "unknown: the cluster environment is invalid"
    elif not facts.multi_node:
        cluster = "not needed on one node"
    else:
        interface, why = facts.cluster_choice
        cluster = f"{facts.describe(interface.name)}: {why}" if interface else f"none: {why}"
    usable = facts.rdma.usable_devices
    rdma = (f"{len(usable)} usable device{'s' if len(usable) != 1 else ''} "
            f"({facts.rdma.transport or 'unknown transport'}): "
            f"{', '.join(d.name for d in usable)}" if usable else
            f"none usable ({len(facts.rdma.devices)} found)" if facts.rdma.devices else
            "none found")
    gpus = facts.host.gpus
    return Assumptions(source, layout, node, cluster, rdma,
                       f"{gpus} visible" if gpus else "none visible")


def _cluster_looking(facts: Facts) -> list[str]:
    """Why this host looks like a cluster node, e.g. ``["eth0 172.20.0.11 (Runpod's management
    range)", "ens1 10.65.0.3"]``; empty when it does not."""
    with_ipv4 = [i for i in facts.network if i.ipv4 and not i.is_loopback]
    named = [i for i in with_ipv4 if _CLUSTER_NAMES.fullmatch(i.name)]
    eth0 = facts.network.get("eth0")
    runpod_layout = (
        eth0 is not None
        and any(runpod.is_management(address=str(a.ip)) for a in eth0.ipv4)
        and any(runpod.is_cluster_interface_name(i.name) for i in with_ipv4)
    )
    if len(named) < 2 and not runpod_layout:  # "several" cluster NICs
        return []
    shown = [i for i in with_ipv4 if i in named or (runpod_layout and i is eth0)]
    return [f"{i.name} {', '.join(str(a.ip) for a in i.ipv4)}"
            + (" (Runpod's management range)" if runpod_layout and i is eth0 else "")
            for i in shown]


def cluster_variables_missing(facts: Facts) -> list[Finding]:
    """No cluster variable is set (the local default was assumed) on a host that looks like a
    cluster node: each node would train alone."""
    check = facts.check
    if facts.source != "local" or (check is not None and check.reason.startswith("forced")):
        return []
    looks = _cluster_looking(facts)
    if not looks:
        return []
    return [Finding.of(
        "cluster-variables-missing",
        "no cluster variable is set (PRIMARY_ADDR/MASTER_ADDR, NODE_RANK, NUM_NODES, "
        "NUM_TRAINERS), but this host looks like a node of a cluster: clusterenv assumed one "
        "node, so `clusterenv launch` would start --standalone and every node would train alone",
        ("source: local (nothing matched)", *(f"interface {text}" for text in looks)),
        "run in the shell the provider set up (Runpod sets the variables in the container's "
        "environment; `sudo` drops them unless `sudo -E`), or export PRIMARY_ADDR/MASTER_ADDR, "
        "NODE_RANK, NUM_NODES and NUM_TRAINERS; CLUSTERENV_SOURCE=local says one node is "
        "intended",
    )]
