"""Host snapshots for the NCCL plan and doctor tests: the catalogue's baseline Runpod node B0.

B0 (failure-modes catalogue): ``lo``, ``eth0`` 172.20.0.5/16 (management, default route),
``ens1`` 10.65.0.2/24 MTU 9000, 8 GPUs, the Runpod variables of node 0 of 2. This builder adds
what a healthy node also has: a big ``/dev/shm``, unlimited memlock, the host name mapped to the
cluster address in ``/etc/hosts``, and the kernel's routing table.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path

from clusterenv.testing import GidSpec, HostBuilder, gid, port
from tests.test_config import RUNPOD

__all__ = ["B0_ENV", "b0", "roce_gids", "roce_node", "route_table"]

#: The Runpod variables of node 0 of 2 (test_config's RUNPOD).
B0_ENV: dict[str, str] = dict(RUNPOD)

_B0_ROUTES = (
    ("eth0", "0.0.0.0/0", "172.20.0.1"),
    ("eth0", "172.20.0.0/16", None),
    ("ens1", "10.65.0.0/24", None),
)


def _hex(address: ipaddress.IPv4Address) -> str:
    """``/proc/net/route`` writes addresses in host byte order (little-endian here)."""
    return f"{int.from_bytes(address.packed, 'little'):08X}"


def route_table(routes: Iterable[tuple[str, str, str | None]]) -> str:
    """``/proc/net/route`` text for ``(interface, "10.65.0.0/24", gateway or None)`` routes."""
    lines = ["Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"]
    for interface, cidr, gateway in routes:
        network = ipaddress.IPv4Network(cidr)
        flags = 0x0001 | (0x0002 if gateway else 0)
        via = ipaddress.IPv4Address(gateway or "0.0.0.0")
        lines.append(
            f"{interface}\t{_hex(network.network_address)}\t{_hex(via)}\t{flags:04X}\t0\t0\t0\t"
            f"{_hex(network.netmask)}\t0\t0\t0"
        )
    return "\n".join(lines) + "\n"


def b0(
    root: Path,
    *,
    environ: Mapping[str, str] | None = None,
    hosts: str | None = None,
    routes: Iterable[tuple[str, str, str | None]] = _B0_ROUTES,
    gpus: int = 8,
) -> HostBuilder:
    """Write node B0 under ``root`` and return the builder for more.

    Args:
        root: The snapshot directory.
        environ: The recorded environment (B0's Runpod variables by default).
        hosts: ``/etc/hosts`` text; by default ``node-0`` maps to its cluster address.
        routes: The IPv4 routing table.
        gpus: GPUs installed.
    """
    return (
        HostBuilder(root)
        .loopback()
        .interface("eth0", addresses=["172.20.0.5/16"])
        .interface("ens1", addresses=["10.65.0.2/24"], mtu=9000)
        .gpus(gpus)
        .shm(64 << 30)
        .memlock(None, None)
        .cap_ipc_lock(True)
        .hostname("node-0")
        .file("etc/hosts", hosts if hosts is not None
              else "127.0.0.1\tlocalhost\n10.65.0.2\tnode-0\n::1\tlocalhost ip6-localhost\n")
        .file("proc/net/route", route_table(routes))
        .environ(dict(B0_ENV if environ is None else environ))
    )


def roce_gids(
    address: str | None,
    netdev: str,
    v2_index: int = 3,
    *,
    link_local: str | None = "fe80::a288:c2ff:fe03:1",
) -> list[GidSpec]:
    """A RoCE GID table as ``show_gids`` shows it: the link-local GID as v1/v2 at 0/1 (none when
    ``link_local`` is None), the IPv4 ``address`` as v1 just before v2 at ``v2_index`` (none
    when ``address`` is None)."""
    gids: list[GidSpec] = []
    if link_local is not None:
        gids += [gid(0, link_local, "IB/RoCE v1", netdev), gid(1, link_local, "RoCE v2", netdev)]
    if address is not None:
        gids += [gid(v2_index - 1, f"::ffff:{address}", "IB/RoCE v1", netdev),
                 gid(v2_index, f"::ffff:{address}", "RoCE v2", netdev)]
    return gids


def roce_node(root: Path, *, rails: int = 8, v2_index: int = 3) -> HostBuilder:
    """B0 with RoCE rails mlx5_0.. on ens1..ensN (ens1 is the cluster interface)."""
    host = b0(root)
    for i in range(rails):
        netdev = f"ens{i + 1}"
        address = f"10.65.{i}.2"
        if i:
            host.interface(netdev, addresses=[f"{address}/24"], mtu=9000)
        host.rdma_device(f"mlx5_{i}", port(link_layer="Ethernet", netdev=netdev,
                                           gids=roce_gids(address, netdev, v2_index)))
    return host
