"""The H100 RoCE nodes of one real cluster (``tpgds-aihub*``): rails, a bond0 and down ports.

Each node has eight ConnectX-7 rail NICs (one netdev and one /31 each), two dual-port
NICs whose first ports are enslaved to ``bond0`` (both RDMA devices then report ``bond0`` as
their GID netdev) and whose second ports are down.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clusterenv.testing import HostBuilder, port
from tests.nccl_hosts import roce_gids


def link_local(index: int) -> str:
    """A MAC-derived link-local GID in the layout of the captured ``show_gids`` output."""
    return f"fe80::a288:c2ff:fe63:{0x5A20 + index:04x}"


def build_rails_node(
    root: Path,
    *,
    rails: Sequence[tuple[str, str, str]],
    bonded: Sequence[tuple[str, str]],
    down: Sequence[tuple[str, str]],
    bond_address: str,
    interfaces_before: Sequence[tuple[str, str]] = (),
    docker0: bool = False,
) -> Path:
    """Write the node.

    Args:
        root: Snapshot directory.
        rails: ``(device, netdev, "a.b.c.d/31")`` per rail NIC.
        bonded: ``(device, netdev)`` of the two ports enslaved to ``bond0``.
        down: ``(device, netdev)`` of the ports that are down.
        bond_address: ``bond0``'s address in CIDR form.
        interfaces_before: Other interfaces ``(name, operstate)`` without an address.
        docker0: Whether a down ``docker0`` bridge with 172.17.0.1/16 exists.
    """
    host = HostBuilder(root).loopback()
    for name, operstate in interfaces_before:
        host.interface(name, operstate=operstate)
    for _, netdev, cidr in rails:
        host.interface(netdev, addresses=[cidr], speed=400000)
    for _, netdev in bonded:
        host.interface(netdev, speed=200000)
    for _, netdev in down:
        host.interface(netdev, operstate="down")
    host.interface(
        "bond0",
        addresses=[bond_address],
        physical=False,
        kind="bond",
        slaves=[netdev for _, netdev in bonded],
    )
    if docker0:
        host.interface(
            "docker0", addresses=["172.17.0.1/16"], operstate="down", physical=False, kind="bridge"
        )
    for device, netdev, cidr in rails:
        number = int(device.split("_")[1])
        host.rdma_device(
            device,
            port(
                1,
                rate="400 Gb/sec (4X NDR)",
                link_layer="Ethernet",
                netdev=netdev,
                gids=roce_gids(cidr.split("/", maxsplit=1)[0], netdev,
                               link_local=link_local(number)),
            ),
            uverbs=number,
            board_id="MT_0000000838",
        )
    bond_ip = bond_address.split("/", maxsplit=1)[0]
    for device, netdev in bonded:
        number = int(device.split("_")[1])
        host.rdma_device(
            device,
            port(
                1,
                rate="200 Gb/sec (4X HDR)",
                link_layer="Ethernet",
                netdev="bond0",
                gids=roce_gids(bond_ip, "bond0", link_local=link_local(number)),
            ),
            uverbs=number,
            board_id="MT_0000000834",
            pci_netdevs=[netdev],
        )
    for device, netdev in down:
        number = int(device.split("_")[1])
        host.rdma_device(
            device,
            port(1, state="DOWN", link_layer="Ethernet", gids=[]),
            uverbs=number,
            board_id="MT_0000000834",
            pci_netdevs=[netdev],
        )
    return root
