"""One ConnectX-7 RoCE port as ``show_gids`` and ``ibv_devinfo -d`` show it (IPv4 v2 at 3).

Capture: ``show_gids-h100-roce-cx7-mlx5_0.txt``. Four GIDs (link-local v1/v2 at 0/1,
``10.99.91.39`` v1/v2 at 2/3) in a 256-slot table, as mlx5 RoCE ports have.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import GidSpec, HostBuilder, port

from ._model import ExpectedPort, Profile, root_of

NAME = "roce-show-gids-mlx5_0"
# DEV PORT INDEX GID IPv4 VER DEV, verbatim.
SHOW_GIDS = (
    (0, "fe80:0000:0000:0000:a288:c2ff:fe63:5a20", "v1"),
    (1, "fe80:0000:0000:0000:a288:c2ff:fe63:5a20", "v2"),
    (2, "0000:0000:0000:0000:0000:ffff:0a63:5b27", "v1"),
    (3, "0000:0000:0000:0000:0000:ffff:0a63:5b27", "v2"),
)
TYPES = {"v1": "IB/RoCE v1", "v2": "RoCE v2"}


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root).loopback().interface("ens108np0", addresses=["10.99.91.39/31"])
    host.rdma_device(
        "mlx5_0",
        port(
            1,
            rate="400 Gb/sec (4X NDR)",
            link_layer="Ethernet",
            netdev="ens108np0",
            gids=[GidSpec(i, gid, TYPES[ver], "ens108np0") for i, gid, ver in SHOW_GIDS],
            gid_table_len=256,
        ),
        hca_type="MT4129",
        fw_ver="28.43.2026",
        board_id="MT_0000000838",
    )
    return root


PROFILE = Profile(
    name=NAME,
    capture="show_gids-h100-roce-cx7-mlx5_0.txt",
    summary="one CX7 RoCE port, 4 GIDs in a 256-slot table, IPv4 RoCE v2 at index 3",
    build=build,
    devices=("mlx5_0",),
    usable=("mlx5_0",),
    transport="roce",
    ports={"mlx5_0:1": ExpectedPort("ACTIVE", 400.0, "Ethernet", "ens108np0", 3, True)},
    uverbs=("uverbs0",),
    netdevs={"mlx5_0": ("ens108np0",)},
    assumed=("rate 400 Gb/sec and a 256-slot table (neither is printed)",),
)
