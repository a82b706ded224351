"""H100 RoCE node: 8x ConnectX-7 at 400 GbE + 4x ConnectX-6 Dx at 100 GbE, all ACTIVE.

Capture: ``ibstat-h100-roce-8x-cx7-400g-plus-4x-cx6dx-100g.txt``. The CX6 Dx ports show a zero
Port GUID, so their GID tables are empty in the snapshot. No IPv4 GIDs are in the capture, so
no port has an index NCCL would pick.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder

from ._model import ExpectedPort, Profile, add_ibstat_cas, ibstat_table, root_of

NAME = "roce-cx7-400g-cx6dx-100g"
CAS = ibstat_table(
    """
    mlx5_0  MT4129 28.39.1002 Active LinkUp 400 0xa288c2fffee3142a Ethernet
    mlx5_1  MT4125 22.39.1002 Active LinkUp 100 0x0000000000000000 Ethernet
    mlx5_10 MT4129 28.39.1002 Active LinkUp 400 0xa288c2fffee313fa Ethernet
    mlx5_11 MT4129 28.39.1002 Active LinkUp 400 0xa288c2fffee0478e Ethernet
    mlx5_2  MT4125 22.39.1002 Active LinkUp 100 0x0000000000000000 Ethernet
    mlx5_3  MT4129 28.39.1002 Active LinkUp 400 0xa288c2fffee312f2 Ethernet
    mlx5_4  MT4129 28.39.1002 Active LinkUp 400 0xa288c2fffee31372 Ethernet
    mlx5_5  MT4129 28.39.1002 Active LinkUp 400 0xa288c2fffee04776 Ethernet
    mlx5_6  MT4129 28.39.1002 Active LinkUp 400 0xa288c2fffee0476e Ethernet
    mlx5_7  MT4125 22.39.1002 Active LinkUp 100 0x0000000000000000 Ethernet
    mlx5_8  MT4125 22.39.1002 Active LinkUp 100 0x0000000000000000 Ethernet
    mlx5_9  MT4129 28.39.1002 Active LinkUp 400 0xa288c2fffee313f2 Ethernet
    """
)
DEVICES = tuple(f"mlx5_{i}" for i in range(12))


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    add_ibstat_cas(HostBuilder(root), CAS)
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibstat-h100-roce-8x-cx7-400g-plus-4x-cx6dx-100g.txt",
    summary="all-RoCE: 8x CX7 400 GbE + 4x CX6 Dx 100 GbE, 12 devices ACTIVE",
    build=build,
    devices=DEVICES,
    usable=DEVICES,
    transport="roce",
    # ibstat shows no IPv4 GID: NCCL stays on GID 0 (link-local or empty), which reaches nobody.
    ports={f"{ca.name}:1": ExpectedPort("ACTIVE", float(ca.rate), "Ethernet", None, 0, False)
           for ca in CAS},
    uverbs=tuple(f"uverbs{i}" for i in range(12)),
    assumed=("verbs nodes exist and are open to the process",),
)
