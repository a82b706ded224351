"""Runpod Instant Clusters: the provider's environment contract and network knowledge.

Runpod sets, on every node and before any launcher runs: ``PRIMARY_ADDR``/``MASTER_ADDR``,
``PRIMARY_PORT``/``MASTER_PORT``, ``NODE_ADDR``, ``NODE_RANK``, ``NUM_NODES``, ``NUM_TRAINERS``
(GPUs per node), ``HOST_NODE_ADDR`` (``PRIMARY_ADDR:PRIMARY_PORT``) and ``WORLD_SIZE``
(``NUM_NODES * NUM_TRAINERS``, a count of processes, not nodes). ``MASTER_ADDR`` may be a host
name of the primary pod (``pod-0``) where ``PRIMARY_ADDR`` is its address: the two agree when
the name resolves to it, which only ``doctor`` and ``launch`` check (reading stays pure).

Every pod, in a cluster or not, also has ``RUNPOD_POD_ID``, ``RUNPOD_DC_ID`` and
``RUNPOD_GPU_COUNT``: evidence shown with the source, never a reason to expect the cluster
contract (a single pod has them too). ``RUNPOD_GPU_COUNT`` is compared with ``NUM_TRAINERS``.
``RUNPOD_API_KEY`` is never read.

Cluster traffic uses ``ens1``–``ens8`` (images before September 2025: ``eth1``–``eth8``), a
VXLAN overlay on 10.65.0.0/16; ``eth0`` carries 172.x management addresses that are never
routable between nodes. That knowledge lives here and is applied only when this source matched.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import ClassVar

from clusterenv._root import Root
from clusterenv._shell import export
from clusterenv._values import format_host_port, parse_host, parse_ip, split_host_port
from clusterenv.findings import Finding
from clusterenv.sources._base import (
    MAX_NODES,
    EnvReader,
    NodeFacts,
    Reading,
    Source,
    Spelled,
    Unresolved,
    plain_int,
    same_address,
)

__all__ = [
    "CLUSTER_INTERFACE",
    "MANAGEMENT_INTERFACES",
    "MANAGEMENT_NETWORK",
    "POD_VARIABLES",
    "RunpodSource",
    "is_cluster_interface_name",
    "is_management",
    "pod_evidence",
]

#: Names of the high-bandwidth cluster interfaces (``ens1``–``ens8``; ``eth1``–``eth8`` on older
#: images).
CLUSTER_INTERFACE = re.compile(r"(ens|eth)[1-8]")
#: Interfaces that carry management (internet) traffic only.
MANAGEMENT_INTERFACES: tuple[str, ...] = ("eth0",)
#: The private range Runpod's management addresses come from ("172.xxx" in the provider's docs).
MANAGEMENT_NETWORK = ipaddress.ip_network("172.16.0.0/12")

# Variables only Runpod sets (NUM_TRAINERS is torchrun vocabulary that others use too); any
# of them means this is a Runpod node.
_MARKERS = ("PRIMARY_ADDR", "PRIMARY_PORT", "NODE_ADDR", "HOST_NODE_ADDR")
#: What every Runpod pod has, with the words used to show it: the pod, its data center, and
#: the GPUs it was given. ``RUNPOD_API_KEY`` is deliberately absent (a secret, never read).
POD_VARIABLES: tuple[tuple[str, str], ...] = (
    ("RUNPOD_POD_ID", "pod"),
    ("RUNPOD_DC_ID", "data center"),
    ("RUNPOD_GPU_COUNT", "GPUs"),
)
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def pod_evidence(environ: Mapping[str, str]) -> str:
    """The Runpod pod this runs in, e.g. ``"Runpod pod RUNPOD_POD_ID=abc123, RUNPOD_DC_ID=EU-RO-1,
    RUNPOD_GPU_COUNT=8"``; empty outside Runpod. Odd values are shown quoted."""
    shown = []
    for name, _ in POD_VARIABLES:
        value = (environ.get(name) or "").strip()
        if value:
            shown.append(f"{name}={value}" if _PLAIN.fullmatch(value) else f"{name}={value!r}")
    return f"Runpod pod {', '.join(shown)}" if shown else ""


def is_cluster_interface_name(name: str) -> bool:
    """Whether ``name`` is one of Runpod's cluster interfaces (``ens1``, …, ``eth8``)."""
    return CLUSTER_INTERFACE.fullmatch(name) is not None


def is_management(*, interface: str | None = None, address: str | None = None) -> bool:
    """Whether an interface name or address is Runpod management (``eth0``, 172.16.0.0/12)."""
    if interface is not None and interface in MANAGEMENT_INTERFACES:
        return True
    if address is not None:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return ip.version == 4 and ip in MANAGEMENT_NETWORK
    return False


class RunpodSource(Source):
    """Runpod Instant Cluster (``PRIMARY_*``, ``NODE_ADDR``, ``NUM_TRAINERS``, …)."""

    name: ClassVar[str] = "runpod"
    setter: ClassVar[str] = "Runpod"

    markers: ClassVar[tuple[str, ...]] = _MARKERS
    identifying: ClassVar[tuple[str, ...]] = _MARKERS

    def matches(self, environ: Mapping[str, str]) -> bool:
        """Any variable that only Runpod sets is present."""
        return any(environ.get(name) for name in _MARKERS)

    def node_facts(self, environ: Mapping[str, str]) -> NodeFacts:
        """``NODE_RANK``, ``NUM_NODES``, ``NUM_TRAINERS``, ``PRIMARY_ADDR`` and ``NODE_ADDR``,
        as evidence."""
        primary = parse_host(environ.get("PRIMARY_ADDR") or "")
        node = parse_host(environ.get("NODE_ADDR") or "")
        return NodeFacts(
            self.name,
            node_rank=plain_int(environ, "NODE_RANK"),
            num_nodes=plain_int(environ, "NUM_NODES"),
            per_node=plain_int(environ, "NUM_TRAINERS"),
            primary=None if primary is None else ("PRIMARY_ADDR", primary),
            node_addr=None if node is None or parse_ip(node) is None else ("NODE_ADDR", node),
        )

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the Runpod contract; every variable is required except the two derived ones."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        fields["primary_addr"] = env.primary(
            "PRIMARY_ADDR",
            "MASTER_ADDR",
            required=True,
            what="the primary node's cluster address",
        )
        fields["primary_port"] = env.port("PRIMARY_PORT", "MASTER_PORT", required=True)
        fields["node_addr"] = env.ip(
            "NODE_ADDR", required=True, what="this node's cluster address"
        )
        fields["node_rank"] = env.integer(
            "NODE_RANK", required=True, what="this node's index, 0 on the primary", example="0"
        )
        fields["num_nodes"] = env.integer(
            "NUM_NODES", required=True, what="the number of nodes", example="2", minimum=1,
            maximum=MAX_NODES,
        )
        fields["num_trainers"] = env.integer(
            "NUM_TRAINERS",
            required=True,
            what="the number of GPUs per node",
            example="8",
            minimum=1,
        )
        world = env.get("WORLD_SIZE")
        if world is not None:
            reading.raw["WORLD_SIZE"] = world
        host_node = env.get("HOST_NODE_ADDR")
        if host_node is not None:
            _check_host_node_addr(env, host_node, fields["primary_addr"], fields["primary_port"])
        _check_primary_is_rank_zero(env, fields)
        _check_gpu_count(env, fields)
        return reading


def _check_gpu_count(env: EnvReader, fields: dict[str, object]) -> None:
    """``RUNPOD_GPU_COUNT`` (the GPUs this pod was given) against ``NUM_TRAINERS`` (the GPUs per
    node the cluster contract states). The GPUs actually visible decide (``doctor`` counts
    them), so a disagreement is a warning: the job may fail, or leave GPUs idle."""
    pod = plain_int(env.environ, "RUNPOD_GPU_COUNT")
    trainers, nodes = fields["num_trainers"], fields["num_nodes"]
    if pod is None or pod.value < 1 or not isinstance(trainers, int) or trainers == pod.value:
        return
    if trainers > pod.value:
        effect = (f"starting NUM_TRAINERS={trainers} processes per node leaves "
                  f"{trainers - pod.value} without a GPU ('CUDA error: invalid device ordinal') "
                  "if the pod has only those")
    else:
        effect = (f"starting NUM_TRAINERS={trainers} processes per node leaves "
                  f"{pod.value - trainers} of the pod's GPUs idle")
    world = f" WORLD_SIZE={nodes * pod.value}" if isinstance(nodes, int) else ""
    env.reading.notes.append(Finding.of(
        "runpod-gpu-count",
        f"NUM_TRAINERS={trainers} but this pod has RUNPOD_GPU_COUNT={pod.value} GPUs: {effect}",
        (f"NUM_TRAINERS={trainers}", f"RUNPOD_GPU_COUNT={pod.value}"),
        f"check the GPUs with nvidia-smi -L; if the pod has {pod.value}, start that many "
        f"processes per node: export NUM_TRAINERS={pod.value}{world}",
    ))


def _check_host_node_addr(
    env: EnvReader, value: str, primary: str | None, port: int | None
) -> None:
    if primary is None or port is None:
        return
    expected = format_host_port(primary, port)
    parsed = split_host_port(value)
    if parsed is None:
        env.problem(
            ("HOST_NODE_ADDR",),
            f"HOST_NODE_ADDR={value!r}: expected ADDRESS:PORT (IPv6 in brackets)",
            export("HOST_NODE_ADDR", expected),
            "config-host-node-addr",
        )
    elif parsed[1] == port and not same_address(parsed[0], primary) and (
        parse_ip(parsed[0]) is None or parse_ip(primary) is None
    ):  # a name and an address (HOST_NODE_ADDR=pod-0:29500): only resolving can compare them
        env.reading.unresolved.append(Unresolved(
            "config-host-node-addr",
            Spelled("PRIMARY_ADDR", primary),
            Spelled("HOST_NODE_ADDR", parsed[0]),
            "the primary node's address",
        ))
    elif parsed != (primary, port):
        env.problem(
            ("HOST_NODE_ADDR", "PRIMARY_ADDR", "PRIMARY_PORT"),
            f"HOST_NODE_ADDR={value!r} is not PRIMARY_ADDR:PRIMARY_PORT ({expected})",
            export("HOST_NODE_ADDR", expected),
            "config-host-node-addr",
        )


def _check_primary_is_rank_zero(env: EnvReader, fields: dict[str, object]) -> None:
    """On Runpod the primary node has NODE_RANK=0 and owns PRIMARY_ADDR."""
    node_addr, primary, rank = fields["node_addr"], fields["primary_addr"], fields["node_rank"]
    if not isinstance(node_addr, str) or not isinstance(primary, str) or not isinstance(rank, int):
        return
    if not _is_ip(primary):
        return  # a host name: doctor resolves it and judges the address
    if parse_host(primary) != node_addr:
        if rank == 0:
            env.problem(
                ("NODE_RANK", "NODE_ADDR", "PRIMARY_ADDR"),
                f"NODE_RANK=0 but NODE_ADDR={node_addr} is not PRIMARY_ADDR={primary}: "
                "the node with rank 0 is the primary and owns PRIMARY_ADDR",
                "give this node its own NODE_RANK (1 or more), or fix PRIMARY_ADDR",
                "config-primary-rank",
            )
        return
    if rank != 0:
        env.problem(
            ("NODE_RANK", "NODE_ADDR", "PRIMARY_ADDR"),
            f"NODE_ADDR={node_addr} is PRIMARY_ADDR, so this is the primary node, but "
            f"NODE_RANK={rank}: the primary must have NODE_RANK=0",
            "export NODE_RANK=0 on the primary node",
            "config-primary-rank",
        )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
