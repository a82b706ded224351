"""H100 InfiniBand node, 8x ConnectX-7 NDR + BlueField-3 RoCE LAG, as ``ibstat`` shows it.

Capture: ``ibstat-h100-ib-ndr-8x-cx7-plus-bf3-bond.txt``. The RoCE front-end ``mlx5_bond_0`` has
only its MAC-derived link-local GIDs in the capture, so NCCL would find no routable GID on it.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder

from ._model import ExpectedPort, Profile, add_ibstat_cas, ibstat_table, root_of

NAME = "ib-ndr-bf3-bond-ibstat"
CAS = ibstat_table(
    """
    mlx5_0      MT4129  28.41.1000 Active LinkUp 400 0x58a2e10300a7820e InfiniBand
    mlx5_1      MT4129  28.41.1000 Active LinkUp 400 0xa088c20300da6342 InfiniBand
    mlx5_4      MT4129  28.41.1000 Active LinkUp 400 0xa088c20300da656a InfiniBand
    mlx5_5      MT4129  28.41.1000 Active LinkUp 400 0xa088c20300da62aa InfiniBand
    mlx5_6      MT4129  28.41.1000 Active LinkUp 400 0x58a2e10300a78796 InfiniBand
    mlx5_7      MT4129  28.41.1000 Active LinkUp 400 0x58a2e10300a78756 InfiniBand
    mlx5_8      MT4129  28.41.1000 Active LinkUp 400 0x58a2e10300a78b5e InfiniBand
    mlx5_9      MT4129  28.41.1000 Active LinkUp 400 0xa088c20300da62c2 InfiniBand
    mlx5_bond_0 MT41692 32.38.3056 Active LinkUp 200 0x201d97fffe0056cf Ethernet
    """
)
IB_DEVICES = tuple(ca.name for ca in CAS[:8])


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    # The same node family's sysfs shows the BF3 LAG as "200 Gb/sec (2X NDR)".
    add_ibstat_cas(HostBuilder(root), CAS, rate_text={"mlx5_bond_0": "200 Gb/sec (2X NDR)"})
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibstat-h100-ib-ndr-8x-cx7-plus-bf3-bond.txt",
    summary="8x CX7 NDR InfiniBand + BF3 RoCE LAG with only link-local GIDs",
    build=build,
    devices=tuple(ca.name for ca in CAS),
    usable=tuple(ca.name for ca in CAS),
    transport="mixed",
    ports={
        **{f"{d}:1": ExpectedPort("ACTIVE", 400.0, "InfiniBand") for d in IB_DEVICES},
        "mlx5_bond_0:1": ExpectedPort(
            "ACTIVE", 200.0, "Ethernet", nccl_gid_index=0, nccl_gid_reaches_peers=False
        ),
    },
    uverbs=tuple(f"uverbs{i}" for i in range(9)),
    assumed=(
        "verbs nodes exist and are open to the process",
        "RoCE GIDs carry no netdev (ibstat shows none)",
    ),
)
