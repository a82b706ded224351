"""H100 InfiniBand node, 8x ConnectX-7 NDR + BlueField-3 RoCE LAG, from a flattened sysfs tree.

Capture: ``sysfs-class-infiniband-h100-ib-ndr-8x-plus-bf3-bond.txt``. The capture kept only the
identity and port files: no ``gids/``, ``gid_attrs/``, ``device/`` or ``node_guid``, so the
snapshot leaves them out too and detection must cope. Device numbers skip ``mlx5_2``/``mlx5_3``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from clusterenv.testing import HostBuilder, port

from ._model import ExpectedPort, Profile, root_of

NAME = "ib-ndr-bf3-bond-sysfs"
IB_DEVICES = ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9")
ALL_DEVICES = (*IB_DEVICES, "mlx5_bond_0")


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root)
    for name in IB_DEVICES:
        host.rdma_device(
            name,
            port(1, rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand"),
            hca_type="MT4129",
            fw_ver="28.41.1000",
            board_id="MT_0000000838",
        )
    host.rdma_device(
        "mlx5_bond_0",
        port(1, rate="200 Gb/sec (2X NDR)", link_layer="Ethernet"),
        hca_type="MT41692",
        fw_ver="32.38.3056",
        board_id="MT_0000000884",
    )
    for name in ALL_DEVICES:  # what the capture does not have
        device = root / "sys/class/infiniband" / name
        for gone in ("ports/1/gids", "ports/1/gid_attrs", "device"):
            shutil.rmtree(device / gone)
        for gone in ("node_guid", "sys_image_guid"):
            (device / gone).unlink()
    return root


PROFILE = Profile(
    name=NAME,
    capture="sysfs-class-infiniband-h100-ib-ndr-8x-plus-bf3-bond.txt",
    summary="8x CX7 NDR InfiniBand + BF3 mlx5_bond_0 RoCE LAG at 200 Gb/sec (2X NDR); no GIDs",
    build=build,
    devices=ALL_DEVICES,
    usable=ALL_DEVICES,
    transport="mixed",
    ports={
        **{f"{d}:1": ExpectedPort("ACTIVE", 400.0, "InfiniBand") for d in IB_DEVICES},
        # No GID table in the capture: NCCL would use the empty slot 0.
        "mlx5_bond_0:1": ExpectedPort("ACTIVE", 200.0, "Ethernet", None, 0, False),
    },
    uverbs=tuple(f"uverbs{i}" for i in range(9)),
    assumed=("verbs nodes uverbs0-8 exist and are open to the process (not in the capture)",),
)
