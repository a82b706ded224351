"""What a profile is, and small helpers to turn capture lines into HostBuilder calls."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from clusterenv.testing import GidSpec, HostBuilder, port

#: Directory name of the real captures the profiles reproduce (in the shared fixtures).
CAPTURES_DIR = "fixtures-real"


@dataclass(frozen=True)
class ExpectedPort:
    """What detection must report for one port (``"mlx5_0:1"``)."""

    state: str
    rate_gbps: float | None
    link_layer: str
    netdev: str | None = None
    nccl_gid_index: int | None = None
    nccl_gid_reaches_peers: bool | None = None


@dataclass(frozen=True)
class Profile:
    """A host snapshot rebuilt from one real capture, and what detection must find on it.

    Attributes:
        name: Registry key, e.g. ``"roce-bond0-ibdev2netdev"``.
        capture: The exact file name of the capture it reproduces.
        summary: One line on what the host is and which trap it carries.
        build: Writes the snapshot under the given directory and returns its root.
        devices: Every RDMA device, in detection order.
        usable: The usable devices (ACTIVE port and openable verbs node).
        transport: The expected ``RdmaInfo.transport``.
        ports: ``"dev:port"`` -> expected port facts, for every port of every device.
        uverbs: The expected ``RdmaInfo.uverbs`` (verbs nodes in ``/dev/infiniband``).
        netdevs: Device -> expected ``RdmaDevice.netdevs``, where the capture shows them.
        assumed: What the capture does not show and the profile had to choose.
        origin: Where the facts come from beyond ``capture``: for a host no shared capture
            holds, the report that describes it (``capture`` is then empty); for a variant of a
            capture, what was changed and on what evidence.
    """

    name: str
    capture: str
    summary: str
    build: Callable[[Path], Path]
    devices: tuple[str, ...]
    usable: tuple[str, ...]
    transport: str | None
    ports: Mapping[str, ExpectedPort]
    uverbs: tuple[str, ...]
    netdevs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    assumed: tuple[str, ...] = ()
    origin: str = ""


#: ``ibstat``'s ``Rate:`` (Gb/s) as sysfs ``ports/N/rate`` shows it for an ACTIVE port
#: (Ethernet speeds are mapped onto InfiniBand speed names by the kernel).
SYSFS_RATE = {
    400: "400 Gb/sec (4X NDR)",
    200: "200 Gb/sec (4X HDR)",
    100: "100 Gb/sec (4X EDR)",
    40: "40 Gb/sec (4X QDR)",
    25: "25 Gb/sec (1X EDR)",
    10: "10 Gb/sec (4X SDR)",
}

#: ``ibstat``'s ``State:`` words as sysfs names them.
IBSTAT_STATE = {"Active": "ACTIVE", "Down": "DOWN", "Initializing": "INIT", "Armed": "ARMED"}


def guid_gid(guid: str) -> str:
    """The default GID (``fe80::/64`` + port GUID) of an ``ibstat`` ``Port GUID: 0x…``."""
    value = int(guid, 16)
    return str(ipaddress.IPv6Address((0xFE80 << 112) | value))


def ib_gids(port_guid: str) -> list[GidSpec]:
    """The GID table of an InfiniBand port as far as ibstat shows it: index 0 only."""
    return [GidSpec(0, guid_gid(port_guid), "IB/RoCE v1", None)]


def root_of(tmp_path: Path, name: str) -> Path:
    """The snapshot directory of profile ``name`` under ``tmp_path``."""
    root = tmp_path / name
    root.mkdir(parents=True, exist_ok=True)
    return root


@dataclass(frozen=True)
class IbstatCa:
    """One ``CA '…'`` block of an ``ibstat`` capture (one port), copied field by field."""

    name: str
    ca_type: str
    firmware: str
    state: str
    phys_state: str
    rate: int
    port_guid: str
    link_layer: str


def add_ibstat_cas(
    host: HostBuilder,
    cas: tuple[IbstatCa, ...],
    *,
    rate_text: Mapping[str, str] | None = None,
) -> HostBuilder:
    """Write the devices of an ``ibstat`` capture; ``rate_text`` overrides a sysfs rate string.

    ``ibstat`` shows no netdevs and, for RoCE ports, only the MAC-derived default GID, so RoCE
    ports get link-local GIDs at 0/1 without a netdev and no IPv4 GID.
    """
    for ca in cas:
        rate = (rate_text or {}).get(ca.name, SYSFS_RATE[ca.rate])
        if ca.link_layer == "InfiniBand":
            gids = ib_gids(ca.port_guid)
        elif int(ca.port_guid, 16) == 0:
            gids = []
        else:
            link_local = guid_gid(ca.port_guid)
            gids = [
                GidSpec(0, link_local, "IB/RoCE v1", None),
                GidSpec(1, link_local, "RoCE v2", None),
            ]
        host.rdma_device(
            ca.name,
            port(
                1,
                state=IBSTAT_STATE[ca.state],
                phys_state=ca.phys_state,
                rate=rate,
                link_layer=ca.link_layer,
                gids=gids,
            ),
            hca_type=ca.ca_type,
            fw_ver=ca.firmware,
        )
    return host


def ibstat_table(text: str) -> tuple[IbstatCa, ...]:
    """CAs from a table with one ``ibstat`` block per row, fields in the order of ``IbstatCa``.

    Row: ``name  CA-type  firmware  State  Physical-state  Rate  Port-GUID  Link-layer``.
    """
    cas = []
    for line in text.strip().splitlines():
        name, ca_type, firmware, state, phys, rate, guid, link_layer = line.split()
        cas.append(IbstatCa(name, ca_type, firmware, state, phys, int(rate), guid, link_layer))
    return tuple(cas)
