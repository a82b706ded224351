"""Azure-style A100 VM: 8x InfiniBand HDR VFs + an Ethernet VF, as ``ibstatus`` shows it.

Capture: ``ibstatus-a100-azure-ib-hdr-8x.txt``. ``ibstatus`` prints the sysfs values verbatim
(``4: ACTIVE``, ``200 Gb/sec (4X HDR)``) and each port's GID 0 (Microsoft ``00:15:5d`` OUI).
``mlx5_8`` is the Ethernet VF at ``40 Gb/sec (4X QDR)`` whose ``default gid`` is ``unknown``:
its GID table cannot be read, so the snapshot has none.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from clusterenv.testing import GidSpec, HostBuilder, port

from ._model import ExpectedPort, Profile, root_of

NAME = "azure-a100-ibstatus"
# (device, default gid) exactly as printed.
IB_PORTS = (
    ("mlx5_0", "fe80:0000:0000:0000:0015:5dff:fd34:11eb"),
    ("mlx5_1", "fe80:0000:0000:0000:0015:5dff:fd34:11ec"),
    ("mlx5_2", "fe80:0000:0000:0000:0015:5dff:fd34:11ed"),
    ("mlx5_3", "fe80:0000:0000:0000:0015:5dff:fd34:11ee"),
    ("mlx5_4", "fe80:0000:0000:0000:0015:5dff:fd34:11ef"),
    ("mlx5_5", "fe80:0000:0000:0000:0015:5dff:fd34:11f0"),
    ("mlx5_6", "fe80:0000:0000:0000:0015:5dff:fd34:11f1"),
    ("mlx5_7", "fe80:0000:0000:0000:0015:5dff:fd34:11f2"),
)
DEVICES = (*(name for name, _ in IB_PORTS), "mlx5_8")


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root)
    for name, default_gid in IB_PORTS:
        host.rdma_device(
            name,
            port(
                1,
                rate="200 Gb/sec (4X HDR)",
                link_layer="InfiniBand",
                gids=[GidSpec(0, default_gid, "IB/RoCE v1", None)],
            ),
            hca_type="MT4124",
        )
    host.rdma_device(
        "mlx5_8", port(1, rate="40 Gb/sec (4X QDR)", link_layer="Ethernet"), hca_type="MT4124"
    )
    shutil.rmtree(root / "sys/class/infiniband/mlx5_8/ports/1/gids")  # "default gid: unknown"
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibstatus-a100-azure-ib-hdr-8x.txt",
    summary="Azure-style VM: 8x InfiniBand HDR + Ethernet VF mlx5_8 at 40 Gb/sec, GID unknown",
    build=build,
    devices=DEVICES,
    usable=DEVICES,
    transport="mixed",
    ports={
        **{f"{name}:1": ExpectedPort("ACTIVE", 200.0, "InfiniBand") for name, _ in IB_PORTS},
        "mlx5_8:1": ExpectedPort("ACTIVE", 40.0, "Ethernet", None, 0, False),
    },
    uverbs=tuple(f"uverbs{i}" for i in range(9)),
    assumed=(
        "hca_type MT4124 (ibstatus does not show it)",
        "verbs nodes exist and are open to the process",
    ),
)
