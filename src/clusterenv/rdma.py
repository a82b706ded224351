"""RDMA devices, ports and GIDs, read from sysfs the way libibverbs and NCCL see them.

:meth:`RdmaInfo.detect` reads ``/sys/class/infiniband/*`` (devices, ports, GID tables),
``/sys/class/infiniband_verbs/uverbsN/ibdev`` (which verbs node belongs to which device) and
``/dev/infiniband`` (which verbs nodes this process was given). It never runs ``ibstat`` or
``ibv_devinfo`` and never loads libibverbs, so it works in any container and on a host snapshot.

What sysfs looks like, and what goes wrong when reading it, is in the docs page *RDMA devices
and host facts* (``docs/discovery-rdma.md``). In short: empty GID slots read as all-zero GIDs
and their ``gid_attrs`` fail with ``EINVAL``, GID tables have up to 256 slots, device names are
not always ``mlx5_N``, two devices can share the netdev ``bond0``, the rate of a port that is not
ACTIVE is meaningless, and a device in sysfs is useless without its ``/dev/infiniband/uverbsN``.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Any, Literal

from clusterenv._jsonable import json_fields
from clusterenv._root import Root, as_root, natural_key

__all__ = ["Gid", "RdmaDevice", "RdmaInfo", "RdmaPort", "Transport", "port_transport"]

#: The fabric RDMA traffic would use: ``"infiniband"``, ``"roce"`` (RDMA over Ethernet),
#: ``"efa"`` (RDMA that only a libfabric plugin can drive, e.g. AWS EFA), or ``"mixed"``.
Transport = Literal["infiniband", "roce", "mixed", "efa"]

# Kernel names of ports/N/state, ports/N/phys_state and node_type, by number
# (drivers/infiniband/core/sysfs.c).
_PORT_STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
_PHYS_STATES = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "Phy Test",
}
_NODE_TYPES = {
    1: "CA",
    2: "switch",
    3: "router",
    4: "RNIC",
    5: "usNIC",
    6: "usNIC UDP",
    7: "unspecified",
}
# sysfs writes InfiniBand/Ethernet/Unknown; ibv_devinfo calls the last one "Unspecified" (EFA).
_LINK_LAYERS = ("InfiniBand", "Ethernet", "Unknown", "Unspecified")
# Node types whose ports NCCL's built-in IB transport cannot drive; they need libfabric.
_LIBFABRIC_NODE_TYPES = frozenset({"unspecified", "usNIC", "usNIC UDP"})

_NUMBERED = re.compile(r"\s*([0-9]+)\s*:\s*(.*?)\s*")
_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(?:Gb/sec\b.*)?", re.DOTALL)
_UVERBS = re.compile(r"uverbs[0-9]+")
# Linux refuses interface names longer than 15 bytes or holding '/', ':' or whitespace.
_NETDEV = re.compile(r"[^/:\s]{1,15}")
# RDMA device names may be longer (IB_DEVICE_NAME_MAX is 64, e.g. rocex525400c0fe123455).
_DEVICE_NAME = re.compile(r"[^/\s]{1,63}")
_SYSFS_GID = re.compile(r"[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){7}")

# The two GID spellings that mean "empty slot": all zero (unused) and the bare link-local prefix.
# sysfs writes GIDs uncompressed, so the common case is a string compare, not an address parse.
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_PREFIX_ONLY_GID = "fe80:0000:0000:0000:0000:0000:0000:0000"
_EMPTY_GID_TEXTS = frozenset({_ZERO_GID, _PREFIX_ONLY_GID})
_EMPTY_ADDRESSES = frozenset({ipaddress.IPv6Address("::"), ipaddress.IPv6Address("fe80::")})
_LINK_LOCAL = ipaddress.IPv6Network("fe80::/64")

_MAX_TEXT = 64  # longest identity string (fw_ver, board_id, GID type) we keep
_MAX_ATTRIBUTE = 4096  # the kernel formats a sysfs attribute into one page


def _parse_numbered(text: str | None, names: dict[int, str]) -> str | None:
    """The name in a kernel ``"N: NAME"`` value, by its name if known, else by its number."""
    if text is None:
        return None
    match = _NUMBERED.fullmatch(text)
    label = match.group(2) if match else text.strip()
    for known in names.values():
        if label.lower() == known.lower():
            return known
    if match:
        number = int(match.group(1)) if len(match.group(1)) < 6 else -1
        return names.get(number)
    return None


def _parse_state(text: str | None) -> str:
    """A port's logical state: ``_parse_state("4: ACTIVE") == "ACTIVE"``; else ``"UNKNOWN"``."""
    return _parse_numbered(text, _PORT_STATES) or "UNKNOWN"


def _parse_phys_state(text: str | None) -> str:
    """A port's physical state: ``_parse_phys_state("5: LinkUp") == "LinkUp"``, or ``"Unknown"``."""
    return _parse_numbered(text, _PHYS_STATES) or "Unknown"


def _parse_node_type(text: str | None) -> str | None:
    """A device's node type: ``_parse_node_type("1: CA") == "CA"``; None if garbled."""
    return _parse_numbered(text, _NODE_TYPES)


def _parse_link_layer(text: str | None) -> str:
    """``InfiniBand``, ``Ethernet``, ``Unspecified`` or ``Unknown`` (also for garbage)."""
    if text is not None:
        for known in _LINK_LAYERS:
            if text.strip().lower() == known.lower():
                return known
    return "Unknown"


def _parse_rate(text: str | None) -> float | None:
    """Gb/s of a port: ``_parse_rate("400 Gb/sec (4X NDR)") == 400.0``; None if garbled."""
    if text is None:
        return None
    match = _RATE.fullmatch(text)
    if match is None or len(match.group(1)) > 12:
        return None
    rate = float(match.group(1))
    return rate if rate > 0 else None


def _parse_gid(text: str | None) -> ipaddress.IPv6Address | None:
    """A GID in any IPv6 spelling (sysfs writes it uncompressed); None if it is not one.

    ``_parse_gid("0000:0000:0000:0000:0000:ffff:0a63:5b27") == IPv6Address("::ffff:10.99.91.39")``
    """
    if text is None:
        return None
    text = text.strip()
    if _SYSFS_GID.fullmatch(text):  # the kernel's spelling: parse the 128-bit number directly
        return ipaddress.IPv6Address(int(text.replace(":", ""), 16))
    if not text or len(text) > 45 or "%" in text:  # no scope ids in a GID table
        return None
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        return None


def _parse_gid_type(text: str | None) -> str | None:
    """A GID type as the kernel names it (``"RoCE v2"``, ``"IB/RoCE v1"``); None if unreadable."""
    return _clean(text)


def _parse_netdev(text: str | None) -> str | None:
    """A network interface name, or None when ``text`` cannot be one."""
    if text is None:
        return None
    text = text.strip()
    if not _NETDEV.fullmatch(text) or text in (".", ".."):
        return None
    return text


def _roce_version(gid_type: str | None) -> int | None:
    """1 or 2 from a GID type, as NCCL reads it (``IB/RoCE v1`` and ``RoCE v1`` are both 1)."""
    if gid_type is None:
        return None
    if gid_type.startswith(("IB/RoCE v1", "RoCE v1")):
        return 1
    if gid_type.startswith("RoCE v2"):
        return 2
    return None


def _clean(text: str | None) -> str | None:
    """Short printable identity text (firmware, board id), or None for garbage."""
    if text is None:
        return None
    text = text.strip()
    if not text or len(text) > _MAX_TEXT or not text.isprintable():
        return None
    return text


@dataclass(frozen=True, slots=True)
class Gid:
    """One non-empty entry of a port's GID table.

    Attributes:
        index: Slot in the table, e.g. ``3`` (the number NCCL_IB_GID_INDEX takes).
        address: The GID as an IPv6 address, e.g. ``IPv6Address("::ffff:10.99.91.39")``.
        type: ``"RoCE v2"``, ``"IB/RoCE v1"`` (InfiniBand and RoCE v1 share it), or None when
            ``gid_attrs/types/N`` could not be read.
        netdev: The interface that owns it (``gid_attrs/ndevs/N``), e.g. ``"ens108np0"`` or
            ``"bond0"``; None on InfiniBand.
    """

    index: int
    address: ipaddress.IPv6Address
    type: str | None
    netdev: str | None

    @property
    def ipv4(self) -> ipaddress.IPv4Address | None:
        """The IPv4 address of an IPv4-mapped GID, e.g. ``IPv4Address("10.99.91.39")``."""
        return self.address.ipv4_mapped

    @property
    def roce_version(self) -> int | None:
        """1 or 2 for RoCE v1/v2 GIDs (InfiniBand GIDs read as 1), None when the type is unknown."""
        return _roce_version(self.type)

    @property
    def is_link_local(self) -> bool:
        """Whether the GID is in ``fe80::/64``, which NCCL never picks on RoCE."""
        return self.address in _LINK_LOCAL

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``ipv4`` and ``roce_version``."""
        return json_fields(self, ipv4=self.ipv4, roce_version=self.roce_version)


@dataclass(frozen=True, slots=True)
class RdmaPort:
    """One port of an RDMA device.

    Attributes:
        number: Port number, from 1, e.g. ``1``.
        state: Logical state, e.g. ``"ACTIVE"`` (also ``DOWN``, ``INIT``, ``ARMED``,
            ``ACTIVE_DEFER``, ``UNKNOWN``). Only ``ACTIVE`` carries traffic.
        phys_state: Physical state, e.g. ``"LinkUp"`` (``Disabled``, ``Polling``, …).
            ``LinkUp`` with state ``INIT`` is an InfiniBand port that no subnet manager serves.
        rate_gbps: Signalling rate in Gb/s, e.g. ``400.0``; None unless the port is ACTIVE
            (a port that is down reports a meaningless 10 or 40).
        link_layer: ``"InfiniBand"``, ``"Ethernet"`` (RoCE) or ``"Unknown"`` (EFA).
        netdev: The network interface of this port, e.g. ``"ens108np0"`` or ``"bond0"``;
            None when there is none (EFA) or it cannot be told.
        gids: The non-empty GID table entries, by index. Empty slots (all-zero, or the bare
            ``fe80::`` prefix) are left out; link-local GIDs are kept.
        gid_table_len: Slots in the GID table (``gids/*`` files), e.g. ``256``.
    """

    number: int
    state: str
    phys_state: str
    rate_gbps: float | None
    link_layer: str
    netdev: str | None
    gids: tuple[Gid, ...]
    gid_table_len: int

    @property
    def active(self) -> bool:
        """Whether the port is ``ACTIVE``, the only state NCCL uses."""
        return self.state == "ACTIVE"

    @property
    def nccl_gid_index(self) -> int | None:
        """The GID index NCCL ≥ 2.21 uses on this RoCE port with its defaults, e.g. ``3``.

        With ``NCCL_IB_ADDR_FAMILY=AF_INET`` and ``NCCL_IB_ROCE_VERSION_NUM=2`` (the defaults)
        NCCL takes the lowest slot holding an IPv4-mapped RoCE v2 GID. When there is none it
        stays on index ``0`` (often the link-local GID, sometimes an empty slot) or ends on an
        IPv4 RoCE v1 GID: the index is still what NCCL uses, and :attr:`nccl_gid_reaches_peers`
        says whether that GID can carry traffic to another node. None on InfiniBand ports
        (addressed by LID; NCCL uses GID 0) and EFA. Other releases and settings:
        :func:`clusterenv.nccl.gid.choose_gid`.
        """
        from clusterenv.nccl.gid import choose_gid  # noqa: PLC0415  # NCCL's rules live there

        choice = choose_gid(self)
        return choice.index if choice is not None else None

    @property
    def nccl_gid_reaches_peers(self) -> bool | None:
        """Whether the GID at :attr:`nccl_gid_index` can reach another node: False when it is
        link-local (``fe80::/64``), RoCE v1 (not routed beyond one Ethernet segment) or an empty
        slot; None on non-RoCE ports and when the GID's type cannot be read."""
        from clusterenv.nccl.gid import choose_gid  # noqa: PLC0415

        choice = choose_gid(self)
        return choice.reaches_peers if choice is not None else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``active``, ``nccl_gid_index`` and
        ``nccl_gid_reaches_peers``."""
        return json_fields(self, active=self.active, nccl_gid_index=self.nccl_gid_index,
                           nccl_gid_reaches_peers=self.nccl_gid_reaches_peers)


@dataclass(frozen=True, slots=True)
class RdmaDevice:
    """One RDMA device (``/sys/class/infiniband/<name>``).

    Attributes:
        name: Device name, e.g. ``"mlx5_0"``, ``"mlx5_bond_0"``, ``"ibp12s0"``, ``"rdmap85s0"``.
        ports: Its ports, by number.
        uverbs: Its verbs node, e.g. ``"uverbs3"`` (the number need not match the device's);
            None when ``/sys/class/infiniband_verbs`` names none.
        dev_node: Whether ``/dev/infiniband/<uverbs>`` is there and, on the live host, opens
            read-write. False in a container that was not given the device: libibverbs then
            skips it and NCCL silently falls back to TCP sockets.
        node_type: ``"CA"`` for InfiniBand/RoCE adapters, ``"unspecified"`` for EFA, ``"RNIC"``
            for iWARP; None when unreadable.
        hca_type: Model from the PCI device id, e.g. ``"MT4129"`` (ConnectX-7); mlx5 only.
        fw_ver: Firmware version, e.g. ``"28.41.1000"`` (not semver).
        board_id: Board PSID, e.g. ``"MT_0000000838"``.
        pci_netdevs: Interfaces of the same PCI function (``device/net/*``), e.g.
            ``("ens12f0np0",)``; for a bonded port the bond itself is in the port's ``netdev``.
    """

    name: str
    ports: tuple[RdmaPort, ...]
    uverbs: str | None
    dev_node: bool
    node_type: str | None
    hca_type: str | None
    fw_ver: str | None
    board_id: str | None
    pci_netdevs: tuple[str, ...]

    @property
    def usable(self) -> bool:
        """Whether a process here can use the device: an ACTIVE port and an openable verbs node."""
        return self.dev_node and any(p.active for p in self.ports)

    @property
    def netdevs(self) -> tuple[str, ...]:
        """Every interface tied to the device: ports' netdevs, GID owners, then ``pci_netdevs``.

        E.g. ``("bond0", "ens12f0np0")`` for a RoCE port enslaved to ``bond0``.
        """
        seen: dict[str, None] = {}
        for port in self.ports:
            if port.netdev is not None:
                seen[port.netdev] = None
            for gid in port.gids:
                if gid.netdev is not None:
                    seen[gid.netdev] = None
        seen.update(dict.fromkeys(self.pci_netdevs))
        return tuple(seen)

    def port(self, number: int) -> RdmaPort | None:
        """The port with this number, or None."""
        return next((p for p in self.ports if p.number == number), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``usable`` and ``netdevs``."""
        return json_fields(self, usable=self.usable, netdevs=self.netdevs)


def port_transport(device: RdmaDevice, port: RdmaPort) -> Transport | None:
    """What kind of RDMA a port offers: ``"infiniband"``, ``"roce"``, ``"efa"`` or None.

    ``"efa"`` covers every port NCCL's built-in IB transport ignores but a libfabric plugin can
    drive: node type ``unspecified`` (AWS EFA, whose link layer reads ``Unknown`` in sysfs and
    ``Unspecified`` in ``ibv_devinfo``) and the obsolete Cisco usNIC.
    """
    if device.node_type in _LIBFABRIC_NODE_TYPES or port.link_layer == "Unspecified":
        return "efa"
    if port.link_layer == "InfiniBand":
        return "infiniband"
    if port.link_layer == "Ethernet":
        return "roce"
    return None


@dataclass(frozen=True, slots=True)
class RdmaInfo:
    """The RDMA devices of a host and which of them this process can use.

    Attributes:
        devices: Every device in ``/sys/class/infiniband``, sorted by name (``mlx5_2`` before
            ``mlx5_10``), usable or not.
        uverbs: The verbs nodes present in ``/dev/infiniband``, e.g. ``("uverbs0", "uverbs1")``;
            empty in a container that was given none.

    Example::

        rdma = RdmaInfo.detect()
        rdma.transport                          # "roce"
        [d.name for d in rdma.usable_devices]   # ["mlx5_0", "mlx5_1", ...]
    """

    # usable_devices is left out of JSON: each device already carries "usable".
    devices: tuple[RdmaDevice, ...]
    uverbs: tuple[str, ...]

    @property
    def usable_devices(self) -> tuple[RdmaDevice, ...]:
        """Devices with an ACTIVE port and an openable ``/dev/infiniband/uverbsN``."""
        return tuple(d for d in self.devices if d.usable)

    @property
    def usable_ports(self) -> tuple[tuple[RdmaDevice, RdmaPort], ...]:
        """Every ACTIVE port of a usable device, as ``(device, port)`` pairs."""
        return tuple((d, p) for d in self.usable_devices for p in d.ports if p.active)

    @property
    def transport(self) -> Transport | None:
        """The RDMA fabric this process would use, judged from the usable ACTIVE ports only.

        ``"infiniband"``, ``"roce"`` or ``"efa"`` when they all agree; ``"mixed"`` when usable
        ports differ (typically InfiniBand compute NICs beside a RoCE front-end such as a
        BlueField ``mlx5_bond_0``, which NCCL would also use unless ``NCCL_IB_HCA`` leaves it
        out); None when nothing is usable, even if sysfs lists devices.
        """
        kinds = {port_transport(d, p) for d, p in self.usable_ports}
        kinds.discard(None)
        if not kinds:
            return None
        if len(kinds) > 1:
            return "mixed"
        return kinds.pop()

    def get(self, name: str) -> RdmaDevice | None:
        """The device called ``name`` (exact), or None."""
        return next((d for d in self.devices if d.name == name), None)

    @classmethod
    def detect(cls, *, root: str | os.PathLike[str] = "/") -> RdmaInfo:
        """Read the RDMA devices under ``root`` (``/`` or a host snapshot).

        Missing ``/sys/class/infiniband`` is an empty result; garbled files read as unknown
        values, never as an exception.

        Raises:
            DiscoveryError: When ``root`` itself cannot be read.
        """
        host = as_root(root)
        nodes = tuple(
            sorted(
                (n for n in host.listdir("dev/infiniband") if _UVERBS.fullmatch(n)),
                key=natural_key,
            )
        )
        verbs = _verbs_by_device(host)
        devices = []
        for name in sorted(host.listdir("sys/class/infiniband"), key=natural_key):
            # Skips dangling links and stray files alike; never raises (EACCES in a snapshot).
            if host.is_dir(f"sys/class/infiniband/{name}"):
                devices.append(_read_device(host, name, verbs.get(name)))
        return cls(tuple(devices), nodes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``transport``."""
        return json_fields(self, transport=self.transport)


def _verbs_by_device(host: Root) -> dict[str, str]:
    """Device name -> ``uverbsN``, from ``/sys/class/infiniband_verbs/uverbsN/ibdev``."""
    found: dict[str, str] = {}
    for entry in sorted(host.listdir("sys/class/infiniband_verbs"), key=natural_key):
        if _UVERBS.fullmatch(entry):
            device = host.read(f"sys/class/infiniband_verbs/{entry}/ibdev")
            if device and _DEVICE_NAME.fullmatch(device) and device not in (".", ".."):
                found.setdefault(device, entry)
    return found


def _read_attribute(host: Root, relative: str) -> str | None:
    """The stripped text of one sysfs attribute, or None when it cannot be read or is no attribute.

    EINVAL on an empty GID slot, a directory, a missing file, a FIFO or device planted in a
    snapshot, and anything larger than a page all read as None (:meth:`Root.read`).
    """
    return host.read(relative, max_bytes=_MAX_ATTRIBUTE)


def _read_device(host: Root, name: str, uverbs: str | None) -> RdmaDevice:
    base = f"sys/class/infiniband/{name}"
    path = base
    if uverbs is None:  # older kernels without the class dir still link it from the device
        uverbs = next(
            (
                e
                for e in sorted(host.listdir(f"{base}/device/infiniband_verbs"), key=natural_key)
                if _UVERBS.fullmatch(e)
            ),
            None,
        )
    pci_netdevs = tuple(
        n for n in host.listdir(f"{base}/device/net") if _parse_netdev(n) is not None
    )
    numbers = sorted(
        int(p) for p in host.listdir(f"{base}/ports") if p.isascii() and p.isdigit() and len(p) < 6
    )
    ports = tuple(
        _read_port(host, f"{path}/ports/{number}", number, pci_netdevs, len(numbers))
        for number in numbers
        if host.is_dir(f"{path}/ports/{number}")
    )
    return RdmaDevice(
        name=name,
        ports=ports,
        uverbs=uverbs,
        dev_node=uverbs is not None and host.device_opens(f"dev/infiniband/{uverbs}"),
        node_type=_parse_node_type(_read_attribute(host, f"{path}/node_type")),
        hca_type=_clean(_read_attribute(host, f"{path}/hca_type")),
        fw_ver=_clean(_read_attribute(host, f"{path}/fw_ver")),
        board_id=_clean(_read_attribute(host, f"{path}/board_id")),
        pci_netdevs=pci_netdevs,
    )


def _read_port(
    host: Root, path: str, number: int, pci_netdevs: tuple[str, ...], port_count: int
) -> RdmaPort:
    state = _parse_state(_read_attribute(host, f"{path}/state"))
    gids, table_len = _read_gids(host, path)
    netdev = next((g.netdev for g in gids if g.netdev is not None), None)
    if netdev is None:
        netdev = _netdev_of_port(host, path, number, pci_netdevs, port_count)
    return RdmaPort(
        number=number,
        state=state,
        phys_state=_parse_phys_state(_read_attribute(host, f"{path}/phys_state")),
        rate_gbps=_parse_rate(_read_attribute(host, f"{path}/rate")) if state == "ACTIVE" else None,
        link_layer=_parse_link_layer(_read_attribute(host, f"{path}/link_layer")),
        netdev=netdev,
        gids=gids,
        gid_table_len=table_len,
    )


def _read_gids(host: Root, path: str) -> tuple[tuple[Gid, ...], int]:
    """The non-empty GIDs of a port and the size of its table.

    A RoCE table has up to 256 slots, nearly all empty; an empty slot is recognised from the
    GID text alone, so its ``gid_attrs`` (which fail with EINVAL) are never read.
    """
    names = host.listdir(f"{path}/gids")
    indices = sorted(int(n) for n in names if n.isascii() and n.isdigit() and len(n) < 6)
    gids: list[Gid] = []
    for index in indices:
        text = _read_attribute(host, f"{path}/gids/{index}")
        if text is None or text in _EMPTY_GID_TEXTS:
            continue
        address = _parse_gid(text)
        if address is None or address in _EMPTY_ADDRESSES:
            continue
        gids.append(
            Gid(
                index=index,
                address=address,
                type=_parse_gid_type(_read_attribute(host, f"{path}/gid_attrs/types/{index}")),
                netdev=_parse_netdev(_read_attribute(host, f"{path}/gid_attrs/ndevs/{index}")),
            )
        )
    return tuple(gids), len(indices)


def _netdev_of_port(
    host: Root, path: str, number: int, pci_netdevs: tuple[str, ...], port_count: int
) -> str | None:
    """The interface of a port without GID netdevs (InfiniBand/IPoIB): same PCI function.

    A one-port device with one interface is unambiguous; otherwise the interface's ``dev_port``
    (0-based) must name the port.
    """
    if port_count == 1 and len(pci_netdevs) == 1:
        return pci_netdevs[0]
    device_path = path.rsplit("/ports/", 1)[0]
    for netdev in pci_netdevs:
        dev_port = _read_attribute(host, f"{device_path}/device/net/{netdev}/dev_port")
        if dev_port and dev_port.isascii() and dev_port.isdigit() and int(dev_port) + 1 == number:
            return netdev
    return None
