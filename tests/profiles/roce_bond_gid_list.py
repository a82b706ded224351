"""A RoCE LAG ``mlx5_bond_0`` whose GID list ``ibv_devinfo -v`` printed (NCCL issue 769).

Capture: ``ibv_devinfo-v-gid-list-mlx5_bond_0-roce.txt``. ``ibv_devinfo`` prints v2 GIDs
compressed (``::ffff:200.0.209.6``) and v1 GIDs uncompressed; sysfs always writes them
uncompressed. Index 1 (link-local v2) timed out in the issue, index 3 (IPv4 v2) worked: the
index NCCL ≥ 2.21 picks by itself.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import GidSpec, HostBuilder, port

from ._model import ExpectedPort, Profile, root_of

NAME = "roce-bond-gid-list"
# GID[ i]: address, type — verbatim.
GID_LIST = (
    (0, "fe80:0000:0000:0000:0ac0:ebff:feda:1cfb", "RoCE v1"),
    (1, "fe80::ac0:ebff:feda:1cfb", "RoCE v2"),
    (2, "0000:0000:0000:0000:0000:ffff:c800:d106", "RoCE v1"),
    (3, "::ffff:200.0.209.6", "RoCE v2"),
)
# sysfs names the v1 type "IB/RoCE v1"; ibv_devinfo shortens it.
SYSFS_TYPE = {"RoCE v1": "IB/RoCE v1", "RoCE v2": "RoCE v2"}


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root).loopback()
    host.interface("bond0", addresses=["200.0.209.6/24"], physical=False, kind="bond")
    host.rdma_device(
        "mlx5_bond_0",
        port(
            1,
            rate="100 Gb/sec (4X EDR)",
            link_layer="Ethernet",
            netdev="bond0",
            gids=[GidSpec(i, gid, SYSFS_TYPE[kind], "bond0") for i, gid, kind in GID_LIST],
        ),
        hca_type="MT4123",
    )
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibv_devinfo-v-gid-list-mlx5_bond_0-roce.txt",
    summary="RoCE LAG mlx5_bond_0: link-local v1/v2 at 0/1, IPv4 v1/v2 at 2/3; NCCL picks 3",
    build=build,
    devices=("mlx5_bond_0",),
    usable=("mlx5_bond_0",),
    transport="roce",
    ports={"mlx5_bond_0:1": ExpectedPort("ACTIVE", 100.0, "Ethernet", "bond0", 3, True)},
    uverbs=("uverbs0",),
    netdevs={"mlx5_bond_0": ("bond0",)},
    assumed=(
        "netdev bond0 with 200.0.209.6/24, rate 100 Gb/sec, hca_type MT4123 (not printed)",
    ),
)
