"""H100 InfiniBand node, 8x ConnectX-7 NDR + 4x ConnectX-6 Dx Ethernet of which 3 are down.

Capture: ``ibstat-h100-ib-ndr-cx7-plus-cx6dx-some-down.txt``. The down ports report
``Rate: 40``, which must not be read as a rate; the one ACTIVE CX6 Dx (``mlx5_1``) is a RoCE
front-end beside the InfiniBand fabric, so the transport is mixed.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder

from ._model import ExpectedPort, Profile, add_ibstat_cas, ibstat_table, root_of

NAME = "ib-ndr-cx6dx-some-down"
CAS = ibstat_table(
    """
    mlx5_0  MT4129 28.39.1002 Active LinkUp   400 0x946dae0300cde72c InfiniBand
    mlx5_1  MT4125 22.38.1002 Active LinkUp   100 0x966daefffec2b690 Ethernet
    mlx5_10 MT4129 28.39.1002 Active LinkUp   400 0x946dae0300cde884 InfiniBand
    mlx5_11 MT4129 28.39.1002 Active LinkUp   400 0x946dae0300cdea00 InfiniBand
    mlx5_2  MT4125 22.38.1002 Down   Disabled 40  0x966daefffec2b691 Ethernet
    mlx5_3  MT4129 28.39.1002 Active LinkUp   400 0x946dae0300cde728 InfiniBand
    mlx5_4  MT4129 28.39.1002 Active LinkUp   400 0x946dae0300cde78c InfiniBand
    mlx5_5  MT4129 28.39.1002 Active LinkUp   400 0x946dae0300cde780 InfiniBand
    mlx5_6  MT4129 28.39.1002 Active LinkUp   400 0x946dae0300cde8ac InfiniBand
    mlx5_7  MT4125 22.38.1002 Down   Disabled 40  0x966daefffec2b648 Ethernet
    mlx5_8  MT4125 22.38.1002 Down   Disabled 40  0x966daefffec2b649 Ethernet
    mlx5_9  MT4129 28.39.1002 Active LinkUp   400 0x946dae0300cde9c8 InfiniBand
    """
)
IB = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")
DOWN = ("mlx5_2", "mlx5_7", "mlx5_8")


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    add_ibstat_cas(HostBuilder(root), CAS)
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibstat-h100-ib-ndr-cx7-plus-cx6dx-some-down.txt",
    summary="8x CX7 NDR InfiniBand + CX6 Dx Ethernet: 1 ACTIVE front-end, 3 Down at 'Rate: 40'",
    build=build,
    devices=tuple(f"mlx5_{i}" for i in range(12)),
    usable=tuple(f"mlx5_{i}" for i in (0, 1, 3, 4, 5, 6, 9, 10, 11)),
    transport="mixed",
    ports={
        **{f"{d}:1": ExpectedPort("ACTIVE", 400.0, "InfiniBand") for d in IB},
        "mlx5_1:1": ExpectedPort("ACTIVE", 100.0, "Ethernet", None, 0, False),
        **{f"{d}:1": ExpectedPort("DOWN", None, "Ethernet", None, 0, False) for d in DOWN},
    },
    uverbs=tuple(f"uverbs{i}" for i in range(12)),
    assumed=("verbs nodes exist and are open to the process",),
)
