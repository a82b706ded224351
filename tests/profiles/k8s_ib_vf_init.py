"""A Kubernetes pod given one InfiniBand virtual function whose port sits in ``INIT``.

Derived from ``ibstat-a100-vf-mt4126-ib-hdr-8x.txt``: the VF is that capture's ``mlx5_1`` (CA type
MT4126, firmware 28.37.1014, HDR), as a pod sees it when the SR-IOV device plugin hands it one VF.
Issue 17 reports such a pod from a real capture: ``State: Initializing``, ``Physical state:
LinkUp``: the link is up but no subnet manager configured the VF's port. NCCL skips the port
without a word and runs over TCP sockets.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import HostBuilder, port

from ._model import ExpectedPort, Profile, ib_gids, root_of

NAME = "k8s-ib-vf-init"
PORT_GUID = "0x6b9d7f2c99902a63"  # mlx5_1's Port GUID in the capture


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root).loopback().interface("eth0", addresses=["10.244.3.17/24"])
    host.rdma_device(
        "mlx5_1",
        port(
            1,
            state="INIT",
            phys_state="LinkUp",
            rate="200 Gb/sec (4X HDR)",
            gids=ib_gids(PORT_GUID),  # a port in INIT already has its default GID
        ),
        hca_type="MT4126",
        fw_ver="28.37.1014",
    )
    return root


PROFILE = Profile(
    name=NAME,
    capture="ibstat-a100-vf-mt4126-ib-hdr-8x.txt",
    origin="issue 17: a Kubernetes pod with one IB VF whose port stayed in INIT (real capture, "
    "not in the shared fixtures); the VF's identity is mlx5_1 of the named capture",
    summary="Kubernetes pod, one MT4126 IB VF in INIT/LinkUp (no subnet manager): sockets",
    build=build,
    devices=("mlx5_1",),
    usable=(),
    transport=None,
    ports={"mlx5_1:1": ExpectedPort("INIT", None, "InfiniBand")},
    uverbs=("uverbs0",),
    assumed=(
        "the pod's only other interface is the CNI's eth0 10.244.3.17/24",
        "no IPoIB interface in the pod",
        "the verbs node of the VF exists and is open to the process",
    ),
)
