"""A container given only ``--device=/dev/infiniband/uverbs1`` on a host with five devices.

Capture: ``libibverbs-container-only-uverbs1-passed-no-driver.txt``. sysfs is not namespaced, so
``/sys/class/infiniband_verbs`` still lists ``uverbs0``..``uverbs4``; only ``uverbs1`` exists in
``/dev/infiniband``, so at most one device is usable. (In the capture libibverbs also lacked
its userspace provider and found ``0 HCAs``; sysfs cannot show that.)
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder, port

from ._model import ExpectedPort, Profile, root_of

NAME = "container-only-uverbs1"
DEVICES = tuple(f"mlx5_{i}" for i in range(5))


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root).cap_ipc_lock(True)  # docker run --cap-add=IPC_LOCK
    for number, name in enumerate(DEVICES):
        host.rdma_device(
            name,
            port(1, rate="100 Gb/sec (4X EDR)", link_layer="InfiniBand"),
            uverbs=number,
            dev_node=number == 1,
            hca_type="MT4119",
        )
    return root


PROFILE = Profile(
    name=NAME,
    capture="libibverbs-container-only-uverbs1-passed-no-driver.txt",
    summary="container with only /dev/infiniband/uverbs1 of uverbs0-4: one usable device",
    build=build,
    devices=DEVICES,
    usable=("mlx5_1",),
    transport="infiniband",
    ports={f"{d}:1": ExpectedPort("ACTIVE", 100.0, "InfiniBand") for d in DEVICES},
    uverbs=("uverbs1",),
    assumed=(
        "device names mlx5_0-4 mapping to uverbs0-4, ConnectX-5 EDR InfiniBand, all ACTIVE "
        "(the capture names only the verbs nodes)",
    ),
)
