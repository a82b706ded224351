"""AWS p5en.48xlarge: 16 EFA devices ``rdmapNNs0``, which only a libfabric plugin can drive.

Capture: ``ibv_devinfo-aws-p5en-h200-efa-16dev.txt``. ``ibv_devinfo`` prints
``transport: unspecified (4)`` and ``link_layer: Unspecified``; in sysfs the same devices read
``node_type`` ``7: unspecified`` and ``link_layer`` ``Unknown``, with a one-slot GID table.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder, port

from ._model import ExpectedPort, Profile, root_of

NAME = "efa-p5en-16dev"
DEVICES = tuple(
    f"rdmap{bus}s0"
    for bus in (85, 86, 87, 88, 110, 111, 112, 113, 135, 136, 137, 138, 160, 161, 162, 163)
)


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root)
    for name in DEVICES:
        host.rdma_device(
            name,
            port(1, rate="200 Gb/sec (4X HDR)", link_layer="Unknown", gids=[], gid_table_len=1),
            node_type="7: unspecified",
            hca_type=None,
            fw_ver="0.0.0.0",
        )
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibv_devinfo-aws-p5en-h200-efa-16dev.txt",
    summary="AWS p5en: 16 EFA devices (node type unspecified, link layer Unknown/Unspecified)",
    build=build,
    devices=DEVICES,
    usable=DEVICES,
    transport="efa",
    ports={f"{d}:1": ExpectedPort("ACTIVE", 200.0, "Unknown") for d in DEVICES},
    uverbs=tuple(f"uverbs{i}" for i in range(16)),
    assumed=(
        "rate 200 Gb/sec (3200 Gb/s over 16 devices; ibv_devinfo does not print it)",
        "GID table of one empty slot (not in the capture)",
        "verbs nodes exist and are open to the process",
    ),
)
