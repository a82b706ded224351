"""AMD Pensando ionic RoCE NICs whose GID tables hold IPv6 GIDs only: link-local at 0, a ULA at 1.

No shared capture holds this host; issue 17 reports it from a real capture: four ionic ports, every
one with the same two-entry table and no IPv4 address on the RoCE interfaces. NCCL 2.21 and later
with the default ``NCCL_IB_ADDR_FAMILY=AF_INET`` then stay on GID 0, the link-local one, on every
port, and cross-node traffic fails; ``NCCL_IB_ADDR_FAMILY=AF_INET6`` makes them take the ULA at 1.
"""

from __future__ import annotations

from pathlib import Path

from clusterenv.testing import GidSpec, HostBuilder, port

from ._model import ExpectedPort, Profile, root_of

NAME = "ionic-ipv6-only"
DEVICES = tuple(f"ionic_{i}" for i in range(4))
NETDEVS = tuple(f"enp{bus}s0np0" for bus in (9, 24, 137, 152))
# ionic speaks RoCE v2 only, so every GID is typed "RoCE v2".
LINK_LOCAL = tuple(f"fe80::ae1f:6bff:fe2c:{i:x}0" for i in range(4))
ULA = tuple(f"fd12:3456:789a:{i + 1}::12" for i in range(4))


def build(tmp_path: Path) -> Path:
    root = root_of(tmp_path, NAME)
    host = HostBuilder(root).loopback().interface("eno1", addresses=["10.0.0.12/24"])
    for device, netdev, local, ula in zip(DEVICES, NETDEVS, LINK_LOCAL, ULA, strict=True):
        host.interface(netdev, addresses=[f"{ula}/64"], mtu=9000)
        host.rdma_device(
            device,
            port(
                1,
                rate="400 Gb/sec (4X NDR)",
                link_layer="Ethernet",
                netdev=netdev,
                gids=[GidSpec(0, local, "RoCE v2", netdev), GidSpec(1, ula, "RoCE v2", netdev)],
            ),
            hca_type=None,
            fw_ver=None,
        )
    return root


PROFILE = Profile(
    name=NAME,
    capture="",
    origin="issue 17: a real capture of an AMD Pensando ionic host (not in the shared fixtures): "
    "four ionic RoCE ports, GID tables with link-local at 0 and a ULA at 1, no IPv4 GID",
    summary="4 ionic RoCE ports with IPv6-only GID tables: NCCL >= 2.21 stays on link-local GID 0",
    build=build,
    devices=DEVICES,
    usable=DEVICES,
    transport="roce",
    ports={f"{d}:1": ExpectedPort("ACTIVE", 400.0, "Ethernet", n, 0, False)
           for d, n in zip(DEVICES, NETDEVS, strict=True)},
    uverbs=tuple(f"uverbs{i}" for i in range(4)),
    netdevs={d: (n,) for d, n in zip(DEVICES, NETDEVS, strict=True)},
    assumed=(
        "device names ionic_0..3 (the driver's own names, not renamed by udev)",
        "netdev names enp<bus>s0np0, ULAs fd12:3456:789a:N::12/64, MTU 9000",
        "rate 400 Gb/sec; a front-end eno1 with 10.0.0.12/24 carries IPv4",
        "verbs nodes exist and are open to the process",
    ),
)
