"""The 12-function ConnectX-7 RoCE node again, with GID tables and the physical states of its two
down ports: ``mlx5_9`` ``DOWN``/``Polling`` (no link partner) and ``mlx5_11`` ``DOWN``/``Disabled``.

Derived from ``ibv_devinfo-h100-roce-cx7-12dev-2down.txt`` (which prints ``PORT_DOWN`` but no
physical state). The facts reference cites a real ibstat capture of an H100 RoCE node whose two
down ConnectX-7 ports read ``Physical state: Polling`` and ``Disabled``; this profile gives the
capture's two down ports those states. Both sit on the dual-port boards (``MT_0000000834``), not
on the eight 400 GbE rails (``MT_0000000838``), so NCCL loses no rail: worth knowing, no more.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder, port
from tests.nccl_hosts import roce_gids

from ._model import ExpectedPort, Profile, root_of

NAME = "roce-cx7-down-polling"
DEVICES = tuple(f"mlx5_{i}" for i in range(12))
DOWN = {"mlx5_9": "Polling", "mlx5_11": "Disabled"}


def _board(index: int) -> str:
    return "MT_0000000834" if index >= 8 else "MT_0000000838"


def _netdev(index: int) -> str:
    return f"ens{index + 1}np0"


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root).loopback().interface("eno1", addresses=["10.10.0.6/24"])
    for index, name in enumerate(DEVICES):
        netdev = _netdev(index)
        phys = DOWN.get(name)
        if phys is None:
            address = f"10.99.{index}.6"
            host.interface(netdev, addresses=[f"{address}/24"], mtu=9000)
            gids = roce_gids(address, netdev, link_local=f"fe80::1270:fdff:fe27:{index:x}")
        else:
            host.interface(netdev, operstate="down", mtu=9000)
            gids = []
        host.rdma_device(
            name,
            port(
                1,
                state="DOWN" if phys else "ACTIVE",
                phys_state=phys,
                rate="200 Gb/sec (4X HDR)" if index >= 8 else "400 Gb/sec (4X NDR)",
                link_layer="Ethernet",
                netdev=netdev,
                gids=gids,
            ),
            hca_type="MT4129",
            fw_ver="28.43.3608",
            board_id=_board(index),
        )
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibv_devinfo-h100-roce-cx7-12dev-2down.txt",
    origin="the capture's two PORT_DOWN ports given the physical states Polling and Disabled "
    "that the facts reference quotes from a real ibstat capture of an H100 RoCE node",
    summary="12 CX7 RoCE functions with GIDs; mlx5_9 DOWN/Polling, mlx5_11 DOWN/Disabled",
    build=build,
    devices=DEVICES,
    usable=tuple(d for d in DEVICES if d not in DOWN),
    transport="roce",
    ports={
        f"{d}:1": (
            ExpectedPort("DOWN", None, "Ethernet", _netdev(i), 0, False) if d in DOWN
            else ExpectedPort("ACTIVE", 200.0 if i >= 8 else 400.0, "Ethernet", _netdev(i), 3,
                              True)
        )
        for i, d in enumerate(DEVICES)
    },
    uverbs=tuple(f"uverbs{i}" for i in range(12)),
    assumed=(
        "physical states Polling (mlx5_9) and Disabled (mlx5_11); ibv_devinfo prints none",
        "netdevs ens<N>np0, IPv4 10.99.N.6/24 with show_gids' layout (IPv4 RoCE v2 at 3)",
        "the down ports' interfaces are down and hold no GID",
        "rates 400 (1-port boards) and 200 Gb/sec (2-port boards)",
        "verbs nodes exist and are open to the process",
    ),
)
