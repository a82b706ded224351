"""H100 RoCE node ``tpgds-aihub0008`` (``enp…`` names), the node of the NCCL 2.27 INFO log.

Capture: ``ip-ibdev2netdev-nvidia-smi-topo-h100-roce-4nodes.txt`` (the ``tpgds-aihub0008``
part). ``mlx5_3`` and ``mlx5_9`` map to ``bond0``; ``mlx5_4`` and ``mlx5_10`` are down. On this
node NCCL ran with ``NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_11``
(``nccl-info-h100-roce-2.27-ofi-plugin-fallback-ib.txt``): the 8 rails, neither the bond nor
the down ports. Besides the rails the node has a USB BMC interface and two onboard ports down.
"""

from __future__ import annotations

from pathlib import Path

from ._model import ExpectedPort, Profile, root_of
from ._rails import build_rails_node

NAME = "roce-4nodes-aihub0008"
RAILS = (
    ("mlx5_0", "enp25s0np0", "10.99.91.63/31"),
    ("mlx5_1", "enp41s0np0", "10.99.92.63/31"),
    ("mlx5_2", "enp59s0np0", "10.99.93.63/31"),
    ("mlx5_5", "enp92s0np0", "10.99.94.63/31"),
    ("mlx5_6", "enp155s0np0", "10.99.95.63/31"),
    ("mlx5_7", "enp170s0np0", "10.99.96.63/31"),
    ("mlx5_8", "enp187s0np0", "10.99.97.63/31"),
    ("mlx5_11", "enp218s0np0", "10.99.98.63/31"),
)
BONDED = (("mlx5_3", "enp83s0f0np0"), ("mlx5_9", "enp210s0f0np0"))
DOWN = (("mlx5_4", "enp83s0f1np1"), ("mlx5_10", "enp210s0f1np1"))
#: What NCCL was told to use on this node, and used (from the NCCL INFO log).
NCCL_IB_HCA = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_11")


def build(tmp_path: Path) -> Path:
    return build_rails_node(
        root_of(tmp_path, NAME),
        rails=RAILS,
        bonded=BONDED,
        down=DOWN,
        bond_address="10.73.175.138/29",
        interfaces_before=(
            ("enp0s20f0u5u2c2", "unknown"),
            ("enp86s0f0", "down"),
            ("enp86s0f1", "down"),
        ),
    )


PROFILE = Profile(
    name=NAME,
    capture="ip-ibdev2netdev-nvidia-smi-topo-h100-roce-4nodes.txt",
    summary="all-RoCE, enp names: 8 rails, mlx5_3 and mlx5_9 on bond0, 2 ports down",
    build=build,
    devices=tuple(f"mlx5_{i}" for i in range(12)),
    usable=tuple(f"mlx5_{i}" for i in range(12) if i not in (4, 10)),
    transport="roce",
    ports={
        **{f"{d}:1": ExpectedPort("ACTIVE", 400.0, "Ethernet", n, 3, True) for d, n, _ in RAILS},
        **{f"{d}:1": ExpectedPort("ACTIVE", 200.0, "Ethernet", "bond0", 3, True)
           for d, _ in BONDED},
        **{f"{d}:1": ExpectedPort("DOWN", None, "Ethernet", n, 0, False) for d, n in DOWN},
    },
    uverbs=tuple(f"uverbs{i}" for i in range(12)),
    netdevs={"mlx5_3": ("bond0", "enp83s0f0np0"), "mlx5_9": ("bond0", "enp210s0f0np0")},
    assumed=(
        "GID tables laid out like the show_gids capture of the same cluster (IPv4 v2 at 3)",
        "down ports have empty GID tables; bonded ports run at 200 Gb/sec",
    ),
)
