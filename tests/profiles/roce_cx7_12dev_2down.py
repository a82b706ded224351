"""H100 RoCE node: 12 ConnectX-7 functions in Ethernet mode, two of them PORT_DOWN.

Capture: ``ibv_devinfo-h100-roce-cx7-12dev-2down.txt``. 8 single-port boards
(``MT_0000000838``) and 4 functions of dual-port boards (``MT_0000000834``); ``mlx5_9`` and
``mlx5_11`` are down.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder, port

from ._model import ExpectedPort, Profile, root_of

NAME = "roce-cx7-12dev-2down"
DEVICES = tuple(f"mlx5_{i}" for i in range(12))
DOWN = ("mlx5_9", "mlx5_11")


def _board(name: str) -> str:
    return "MT_0000000834" if int(name.split("_")[1]) >= 8 else "MT_0000000838"


def _rate(name: str) -> str:
    return "200 Gb/sec (4X HDR)" if _board(name) == "MT_0000000834" else "400 Gb/sec (4X NDR)"


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root)
    for name in DEVICES:
        down = name in DOWN
        host.rdma_device(
            name,
            port(
                1,
                state="DOWN" if down else "ACTIVE",
                rate=None if down else _rate(name),
                link_layer="Ethernet",
            ),
            hca_type="MT4129",
            fw_ver="28.43.3608",
            board_id=_board(name),
        )
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibv_devinfo-h100-roce-cx7-12dev-2down.txt",
    summary="all-RoCE: 12 CX7 Ethernet functions (8x 1-port + 4x 2-port boards), 2 PORT_DOWN",
    build=build,
    devices=DEVICES,
    usable=tuple(d for d in DEVICES if d not in DOWN),
    transport="roce",
    ports={
        f"{d}:1": ExpectedPort(
            "DOWN" if d in DOWN else "ACTIVE",
            None if d in DOWN else float(_rate(d).split()[0]),
            "Ethernet",
            nccl_gid_index=0,  # no GID table in the capture: the empty slot 0
            nccl_gid_reaches_peers=False,
        )
        for d in DEVICES
    },
    uverbs=tuple(f"uverbs{i}" for i in range(12)),
    assumed=(
        "rates 400 (1-port boards) and 200 Gb/sec (2-port boards); ibv_devinfo does not print them",
        "no netdevs or GIDs (not in the capture)",
        "verbs nodes exist and are open to the process",
    ),
)
