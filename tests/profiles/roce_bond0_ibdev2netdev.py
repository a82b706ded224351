"""H100 RoCE node ``tpgds-aihub0001``: 8 rails, ``bond0`` over two RDMA devices, 2 ports down.

Capture: ``ip-br-ibdev2netdev-h100-roce-bond0-docker0.txt`` (``ip -br a`` and
``ibdev2netdev``). ``mlx5_1`` and ``mlx5_7`` both map to ``bond0``; ``mlx5_2`` and ``mlx5_8``
(``ens12f1np1``, ``ens20f1np1``) are down; ``docker0`` is down. The GID tables follow the
``show_gids`` capture of the same node (IPv4 RoCE v2 at index 3).
"""

from __future__ import annotations

from pathlib import Path

from ._model import ExpectedPort, Profile, root_of
from ._rails import build_rails_node

NAME = "roce-bond0-ibdev2netdev"
RAILS = (
    ("mlx5_0", "ens108np0", "10.99.91.39/31"),
    ("mlx5_3", "ens109np0", "10.99.92.39/31"),
    ("mlx5_4", "ens110np0", "10.99.93.39/31"),
    ("mlx5_5", "ens111np0", "10.99.94.39/31"),
    ("mlx5_6", "ens112np0", "10.99.95.39/31"),
    ("mlx5_9", "ens113np0", "10.99.96.39/31"),
    ("mlx5_10", "ens114np0", "10.99.97.39/31"),
    ("mlx5_11", "ens115np0", "10.99.98.39/31"),
)
BONDED = (("mlx5_1", "ens12f0np0"), ("mlx5_7", "ens20f0np0"))
DOWN = (("mlx5_2", "ens12f1np1"), ("mlx5_8", "ens20f1np1"))


def build(tmp_path: Path) -> Path:
    return build_rails_node(
        root_of(tmp_path, NAME),
        rails=RAILS,
        bonded=BONDED,
        down=DOWN,
        bond_address="10.82.101.193/29",
        docker0=True,
    )


PROFILE = Profile(
    name=NAME,
    capture="ip-br-ibdev2netdev-h100-roce-bond0-docker0.txt",
    summary="all-RoCE: 8 rails with /31s, mlx5_1 and mlx5_7 both on bond0, 2 ports down",
    build=build,
    devices=tuple(f"mlx5_{i}" for i in range(12)),
    usable=tuple(f"mlx5_{i}" for i in range(12) if i not in (2, 8)),
    transport="roce",
    ports={
        **{f"{d}:1": ExpectedPort("ACTIVE", 400.0, "Ethernet", n, 3, True) for d, n, _ in RAILS},
        **{f"{d}:1": ExpectedPort("ACTIVE", 200.0, "Ethernet", "bond0", 3, True)
           for d, _ in BONDED},
        **{f"{d}:1": ExpectedPort("DOWN", None, "Ethernet", n, 0, False) for d, n in DOWN},
    },
    uverbs=tuple(f"uverbs{i}" for i in range(12)),
    netdevs={
        "mlx5_0": ("ens108np0",),
        "mlx5_1": ("bond0", "ens12f0np0"),
        "mlx5_7": ("bond0", "ens20f0np0"),
        "mlx5_2": ("ens12f1np1",),
    },
    assumed=(
        "GID tables of every port laid out like the show_gids capture of mlx5_0 (link-local "
        "GIDs made up from its MAC pattern)",
        "down ports have empty GID tables; bonded ports run at 200 Gb/sec",
        "verbs node uverbsN belongs to mlx5_N",
    ),
)
