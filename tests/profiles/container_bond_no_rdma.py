"""A Docker container on a RoCE LAG host, started without any ``/dev/infiniband`` device.

Capture: ``ibstatus-nccl-log-container-ibv_open_device-failed-bond.txt``. The host's
``mlx5_bond_0`` is ACTIVE at 25 GbE (``25 Gb/sec (1X EDR)``) and sysfs shows it inside the
container, but NCCL logs ``Call to ibv_open_device failed`` / ``NET/IB : No device found.`` and
silently uses sockets on ``bond0``. Nothing is usable, so there is no transport.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder, port
from tests.nccl_hosts import roce_gids

from ._model import ExpectedPort, Profile, root_of

NAME = "container-bond-no-rdma"


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root).loopback()
    host.interface("bond0", addresses=["200.1.93.2/24"], physical=False, kind="bond")
    host.rdma_device(
        "mlx5_bond_0",
        port(
            1,
            rate="25 Gb/sec (1X EDR)",
            link_layer="Ethernet",
            netdev="bond0",
            gids=roce_gids("200.1.93.2", "bond0", link_local="fe80::0e42:a1ff:fe9a:6766"),
        ),
        dev_node=False,
        hca_type="MT4117",
    )
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibstatus-nccl-log-container-ibv_open_device-failed-bond.txt",
    summary="container without /dev/infiniband: mlx5_bond_0 ACTIVE in sysfs but not usable",
    build=build,
    devices=("mlx5_bond_0",),
    usable=(),
    transport=None,
    ports={"mlx5_bond_0:1": ExpectedPort("ACTIVE", 25.0, "Ethernet", "bond0", 3, True)},
    uverbs=(),
    netdevs={"mlx5_bond_0": ("bond0",)},
    assumed=(
        "GIDs 1-3 from the default GID and bond0's address 200.1.93.2 in the NCCL log; /24 mask",
        "hca_type MT4117 (ConnectX-4 Lx, typical for 25 GbE; not in the capture)",
    ),
)
