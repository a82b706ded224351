"""Where each rank of a ``clusterenv bench`` run is: its node, the interface and address its
traffic leaves by, the transport NCCL chose and the line rate of the rails in use.

Every rank describes itself (:func:`describe_self`); the descriptions are gathered and grouped
into nodes (:func:`group_nodes`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterenv._routes import route_interface
from clusterenv.bench.linerate import LineRate, rails_in_use
from clusterenv.bench.model import NodeInfo
from clusterenv.nccl_log import read_nccl_log
from clusterenv.network import NetworkInterfaces
from clusterenv.rdma import RdmaInfo

__all__ = ["RankPlace", "describe_self", "group_nodes", "nccl_transport"]


@dataclass(frozen=True, slots=True)
class RankPlace:
    """What one rank knows about itself, sent to everyone."""

    rank: int
    node_key: str
    local_rank: int
    hostname: str
    address: str | None
    interface: str | None
    transport: str
    line_rate: LineRate


def _node_key(environ: Mapping[str, str], hostname: str) -> str:
    for name in ("GROUP_RANK", "NODE_RANK"):
        value = environ.get(name, "").strip()
        if value.isdigit():
            return f"{int(value):08d}"
    return f"host:{hostname}"


def _nccl_log_path(environ: Mapping[str, str], hostname: str) -> Path | None:
    pattern = environ.get("NCCL_DEBUG_FILE", "").strip()
    if not pattern:
        return None
    return Path(pattern.replace("%h", hostname).replace("%p", str(os.getpid())))


def nccl_transport(environ: Mapping[str, str], hostname: str) -> tuple[str, tuple[str, ...]]:
    """NCCL's network and devices from this process's own debug file, when it has one."""
    path = _nccl_log_path(environ, hostname)
    if path is None or not path.is_file():
        return "nccl", ()
    try:
        log = read_nccl_log(path)
    except OSError:
        return "nccl", ()
    mine = [r for r in log.ranks if r.pid == os.getpid()] or list(log.ranks)
    for rank in mine:
        if rank.transport:
            return rank.transport, rank.devices
    return "nccl", ()


def describe_self(
    rank: int, local_rank: int, *, backend: str, environ: Mapping[str, str], root: str
) -> RankPlace:
    """This rank's place: its node (``GROUP_RANK``, else ``NODE_RANK``, else the host name),
    the interface and address its traffic leaves by, the transport and the rails' line rate."""
    hostname = socket.gethostname()
    network = NetworkInterfaces.detect(root=root)
    if backend == "nccl":
        transport, devices = nccl_transport(environ, hostname)
    else:
        transport, devices = "gloo", ()
    interface = _socket_interface(environ, backend, network, root)
    rdma = RdmaInfo.detect(root=root) if backend == "nccl" else RdmaInfo((), ())
    line_rate = rails_in_use(transport=transport if transport != "nccl" else "IB",
                             environ=environ, network=network, rdma=rdma,
                             cluster_interface=interface, nccl_devices=devices)
    if backend == "nccl" and transport == "nccl" and not line_rate.rails:
        # No log and no RDMA port: NCCL can only have used sockets.
        line_rate = rails_in_use(transport="Socket", environ=environ, network=network,
                                 rdma=rdma, cluster_interface=interface)
    found = network.get(interface) if interface else None
    address = str(found.ipv4[0].ip) if found is not None and found.ipv4 else None
    return RankPlace(rank, _node_key(environ, hostname), local_rank, hostname, address, interface,
                  transport, line_rate)


def _socket_interface(environ: Mapping[str, str], backend: str, network: Any,
                      root: str) -> str | None:
    variable = "GLOO_SOCKET_IFNAME" if backend == "gloo" else "NCCL_SOCKET_IFNAME"
    value = environ.get(variable, "").strip().lstrip("=")
    first = value.split(",")[0].split(":")[0].strip()
    if first and not first.startswith("^") and network.get(first) is not None:
        return first
    node_addr = environ.get("NODE_ADDR", "").strip()
    if node_addr:
        try:
            owner = network.owner_of(node_addr)
        except ValueError:
            owner = None
        if owner is not None:
            return str(owner.name)
    primary = environ.get("MASTER_ADDR", "").strip()
    if primary:
        try:
            return route_interface(primary, root=root)
        except ValueError:
            return None
    return None


def group_nodes(everyone: Sequence[RankPlace]) -> list[NodeInfo]:
    """Every rank's place, gathered, as nodes in node order, each with its ranks."""
    by_key: dict[str, list[RankPlace]] = {}
    for local in everyone:
        by_key.setdefault(local.node_key, []).append(local)
    # Node ranks when every rank reported one (torchrun's GROUP_RANK), else host names in the
    # order of their lowest global rank.
    if all(key.isdigit() for key in by_key):
        keys = sorted(by_key, key=int)
    else:
        keys = sorted(by_key, key=lambda k: min(m.rank for m in by_key[k]))
    nodes = []
    for index, key in enumerate(keys):
        members = sorted(by_key[key], key=lambda m: (m.local_rank, m.rank))
        first = members[0]
        nodes.append(NodeInfo(index, first.hostname, first.address, first.interface,
                              first.transport, first.line_rate,
                              tuple(m.rank for m in members)))
    return nodes
