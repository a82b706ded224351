"""A100 node with 8x ConnectX-6 VF InfiniBand HDR, where ``ibstat`` exited 255.

Capture: ``ibstat-a100-vf-mt4124-ib-hdr-8x-exit255.txt``. ibstat printed all 8 CAs and then
died with ``stat of IB device 'mlx5_8' failed: No such file or directory``: a ninth device
entry that cannot be followed. The snapshot has ``mlx5_8`` as a dangling link; detection must
skip it and report the eight others.
"""

from __future__ import annotations

import os
from pathlib import Path

from clusterenv.testing import HostBuilder

from ._model import ExpectedPort, Profile, add_ibstat_cas, ibstat_table, root_of

NAME = "a100-vf-mt4124-exit255"
CAS = ibstat_table(
    """
    mlx5_0 MT4124 20.41.1000 Active LinkUp 200 0x00155dfffd3411eb InfiniBand
    mlx5_1 MT4124 20.41.1000 Active LinkUp 200 0x00155dfffd3411ec InfiniBand
    mlx5_2 MT4124 20.41.1000 Active LinkUp 200 0x00155dfffd3411ed InfiniBand
    mlx5_3 MT4124 20.41.1000 Active LinkUp 200 0x00155dfffd3411ee InfiniBand
    mlx5_4 MT4124 20.41.1000 Active LinkUp 200 0x00155dfffd3411ef InfiniBand
    mlx5_5 MT4124 20.41.1000 Active LinkUp 200 0x00155dfffd3411f0 InfiniBand
    mlx5_6 MT4124 20.41.1000 Active LinkUp 200 0x00155dfffd3411f1 InfiniBand
    mlx5_7 MT4124 20.41.1000 Active LinkUp 200 0x00155dfffd3411f2 InfiniBand
    """
)
DEVICES = tuple(ca.name for ca in CAS)


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    add_ibstat_cas(HostBuilder(root), CAS)
    os.symlink(
        "../../devices/pci0000:00/0000:00:10.0/infiniband/mlx5_8",
        root / "sys/class/infiniband/mlx5_8",
    )
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibstat-a100-vf-mt4124-ib-hdr-8x-exit255.txt",
    summary="8x CX6 VF InfiniBand HDR; a ninth entry mlx5_8 that cannot be followed (exit 255)",
    build=build,
    devices=DEVICES,
    usable=DEVICES,
    transport="infiniband",
    ports={f"{d}:1": ExpectedPort("ACTIVE", 200.0, "InfiniBand") for d in DEVICES},
    uverbs=tuple(f"uverbs{i}" for i in range(8)),
    assumed=(
        "mlx5_8 is a dangling sysfs link (the capture only shows that stat() failed)",
        "verbs nodes exist and are open to the process",
    ),
)
