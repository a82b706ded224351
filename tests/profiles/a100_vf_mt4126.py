"""A100 VM with mlx5 virtual functions: 8x InfiniBand HDR VFs + an Ethernet VF at ``mlx5_0``.

Capture: ``ibstat-a100-vf-mt4126-ib-hdr-8x.txt``. ``mlx5_0`` is the VM's accelerated-networking
Ethernet VF: ACTIVE, RoCE-capable, and not part of the InfiniBand fabric.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder

from ._model import ExpectedPort, Profile, add_ibstat_cas, ibstat_table, root_of

NAME = "a100-vf-mt4126-eth-vf"
CAS = ibstat_table(
    """
    mlx5_0 MT4126 22.35.2302 Active LinkUp 200 0x1c918efffe7a03a0 Ethernet
    mlx5_1 MT4126 28.37.1014 Active LinkUp 200 0x6b9d7f2c99902a63 InfiniBand
    mlx5_2 MT4126 28.37.1014 Active LinkUp 200 0xb6f5686b2a0384d3 InfiniBand
    mlx5_3 MT4126 28.37.1014 Active LinkUp 200 0xbcaf66ff1fb84de3 InfiniBand
    mlx5_4 MT4126 28.37.1014 Active LinkUp 200 0xff764023a4d54d1f InfiniBand
    mlx5_5 MT4126 28.37.1014 Active LinkUp 200 0x85b89152a49a6c7f InfiniBand
    mlx5_6 MT4126 28.37.1014 Active LinkUp 200 0xf405e6a5caf90755 InfiniBand
    mlx5_7 MT4126 28.37.1014 Active LinkUp 200 0x8127c63ef9e8fc5f InfiniBand
    mlx5_8 MT4126 28.37.1014 Active LinkUp 200 0x4c1037318e9cd20a InfiniBand
    """
)
DEVICES = tuple(ca.name for ca in CAS)


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    add_ibstat_cas(HostBuilder(root), CAS)
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibstat-a100-vf-mt4126-ib-hdr-8x.txt",
    summary="VM: 8x mlx5 VF InfiniBand HDR + Ethernet VF mlx5_0 (a front-end NCCL would also use)",
    build=build,
    devices=DEVICES,
    usable=DEVICES,
    transport="mixed",
    ports={
        "mlx5_0:1": ExpectedPort("ACTIVE", 200.0, "Ethernet", None, 0, False),
        **{f"{d}:1": ExpectedPort("ACTIVE", 200.0, "InfiniBand") for d in DEVICES[1:]},
    },
    uverbs=tuple(f"uverbs{i}" for i in range(9)),
    assumed=("verbs nodes exist and are open to the process",),
)
