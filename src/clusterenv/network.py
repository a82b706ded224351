"""Network interfaces of this node, and which of them carries cluster traffic.

Facts come from ``/sys/class/net`` (state, MTU, speed, MAC, ARPHRD type, physical or virtual,
bridges, bonds) and, for IP addresses, from ``getifaddrs`` on the live host or the snapshot's
``host.json`` (see :mod:`clusterenv._addresses`). The kernel's routing table is read from
``/proc/net/route`` and ``/proc/net/ipv6_route`` by :func:`route_interface`.

Nothing here knows any provider: which names are "management" on which cloud belongs to the
environment sources. The cluster interface is derived from addresses alone: the interface that
holds the node's own address, else the one on the rendezvous address's subnet.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from clusterenv._addresses import IPInterface, address_map, parse_address
from clusterenv._jsonable import json_fields
from clusterenv._root import Root, as_root, natural_key
from clusterenv._routes import route_interface
from clusterenv._values import IPAddress, parse_decimal, split_zone

__all__ = [
    "ARPHRD_INFINIBAND",
    "ARPHRD_LOOPBACK",
    "ConfigAddresses",
    "Interface",
    "NetworkInterfaces",
    "route_interface",
]

ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772
_IFF_UP = 0x1
# The kernel reports SPEED_UNKNOWN as -1; some drivers leak it as the unsigned 32-bit value.
_SPEED_UNKNOWN = (1 << 32) - 1
_MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2})*")

class ConfigAddresses(Protocol):
    """What the interface choice reads from a :class:`~clusterenv.ClusterConfig`.

    Any object with these attributes works, so frameworks can pass their own.
    """

    @property
    def node_addr(self) -> str | None:
        """This node's cluster IP, e.g. ``"10.65.0.2"``, or None."""

    @property
    def primary_addr(self) -> str:
        """The rendezvous address, e.g. ``"10.65.0.1"``."""

    @property
    def is_multi_node(self) -> bool:
        """Whether the job spans more than one node."""

    @property
    def source(self) -> str:
        """The environment source that matched, e.g. ``"runpod"``."""


@dataclass(frozen=True, slots=True)
class Interface:
    """One network interface, as sysfs and the address table show it.

    Attributes:
        name: Interface name, e.g. ``"ens1"``.
        operstate: Operational state from sysfs, e.g. ``"up"``, ``"down"``, ``"unknown"``
            (loopback and tunnels report ``unknown`` while working).
        mtu: MTU in bytes, e.g. ``9000``; None when unreadable.
        speed_mbps: Link speed in Mb/s, e.g. ``400000``; None when the kernel cannot say (link
            down, bridges, unknown speed).
        mac: Hardware address, e.g. ``"02:00:00:00:00:01"`` (20 bytes for IPoIB); None if absent.
        arphrd: ARPHRD type number: 1 Ethernet, 32 InfiniBand (IPoIB), 772 loopback.
        is_virtual: No backing device (veth, bridge, bond, tunnel, loopback), e.g. ``False``
            for a NIC.
        is_loopback: The loopback interface.
        is_ipoib: IP over InfiniBand (ARPHRD 32).
        is_bridge: A Linux bridge.
        is_bond: A bonding master.
        bond_slaves: For a bond, its slave interfaces, e.g. ``("ens12f0np0", "ens20f0np0")``.
        bridge_ports: For a bridge, its ports, e.g. ``("veth1a2b",)``.
        master: The bond or bridge this interface is enslaved to, e.g. ``"bond0"``.
        flags: The kernel's ``IFF_*`` flags, e.g. ``0x1003``; None when unreadable.
        ipv4: IPv4 addresses with prefix, e.g. ``(IPv4Interface('10.65.0.2/24'),)``.
        ipv6: IPv6 addresses with prefix, e.g. ``(IPv6Interface('fe80::1/64'),)``.
    """

    name: str
    operstate: str = "unknown"
    mtu: int | None = None
    speed_mbps: int | None = None
    mac: str | None = None
    arphrd: int | None = None
    is_virtual: bool = False
    is_loopback: bool = False
    is_ipoib: bool = False
    is_bridge: bool = False
    is_bond: bool = False
    bond_slaves: tuple[str, ...] = ()
    bridge_ports: tuple[str, ...] = ()
    master: str | None = None
    flags: int | None = None
    ipv4: tuple[ipaddress.IPv4Interface, ...] = ()
    ipv6: tuple[ipaddress.IPv6Interface, ...] = ()

    @property
    def addresses(self) -> tuple[IPInterface, ...]:
        """IPv4 then IPv6 addresses."""
        return (*self.ipv4, *self.ipv6)

    @property
    def is_up(self) -> bool:
        """Administratively up and not reported down.

        ``unknown`` counts as up: drivers without carrier reporting (loopback, tun, many
        virtual devices) stay ``unknown`` while working; an admin-down device is always ``down``.
        """
        if self.flags is not None and not self.flags & _IFF_UP:
            return False
        return self.operstate in ("up", "unknown")

    @property
    def has_routable_address(self) -> bool:
        """Has an address another host can reach: not loopback, not only link-local."""
        if self.is_loopback:
            return False
        return any(
            not (a.ip.is_loopback or a.ip.is_link_local or a.ip.is_unspecified)
            for a in self.addresses
        )

    def holds(self, ip: IPAddress) -> bool:
        """Whether ``ip`` is one of this interface's addresses."""
        return any(a.ip == ip for a in self.addresses)

    def network_containing(self, ip: IPAddress) -> IPInterface | None:
        """This interface's address whose network contains ``ip`` (longest prefix), or None."""
        matches = [a for a in self.addresses if a.version == ip.version and ip in a.network]
        return max(matches, key=lambda a: a.network.prefixlen, default=None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``is_up`` and ``has_routable_address``."""
        return json_fields(self, is_up=self.is_up, has_routable_address=self.has_routable_address)


@dataclass(frozen=True, slots=True)
class NetworkInterfaces:
    """Every network interface of the node, and answers about addresses.

    Attributes:
        interfaces: All interfaces in natural name order, e.g. ``lo, eth0, ens1, ens2, ens10``.
    """

    interfaces: tuple[Interface, ...] = ()

    @classmethod
    def detect(cls, *, root: str | os.PathLike[str] = "/") -> NetworkInterfaces:
        """Read the interfaces of this host (``root="/"``) or of a host snapshot.

        Missing or garbled files give empty fields, never an exception. Interfaces that have
        addresses but no sysfs entry (a snapshot that recorded only addresses) still appear.

        Raises:
            DiscoveryError: When ``root`` is not a readable directory, its ``host.json`` is
                garbled, or (live host) ``netifaces`` is not installed.
        """
        host = as_root(root)
        addresses = address_map(host)
        names = {n for n in host.listdir("sys/class/net") if host.is_dir(f"sys/class/net/{n}")}
        names.update(addresses)
        found = [_read_interface(host, name, addresses.get(name, ())) for name in names]
        return cls(_link_masters(found))

    def __iter__(self) -> Iterator[Interface]:
        return iter(self.interfaces)

    def __len__(self) -> int:
        return len(self.interfaces)

    @property
    def names(self) -> tuple[str, ...]:
        """Interface names, e.g. ``("lo", "eth0", "ens1")``."""
        return tuple(i.name for i in self.interfaces)

    def get(self, name: str) -> Interface | None:
        """The interface called ``name``, or None."""
        return next((i for i in self.interfaces if i.name == name), None)

    def owner_of(self, ip: str | IPAddress) -> Interface | None:
        """The interface that holds ``ip`` as one of its addresses, e.g. ``ens1`` for ``10.65.0.2``.

        ``ip`` may carry an IPv6 zone (``fe80::1%ens1``), which restricts the answer to that
        interface; IPv4-mapped IPv6 (``::ffff:10.65.0.2``) counts as the IPv4 address.

        Raises:
            ValueError: When ``ip`` is not an IP address.
        """
        address, zone = _ip_or_raise(ip)
        owners = [
            i for i in self.interfaces if i.holds(address) and (zone is None or i.name == zone)
        ]
        # The same address on two interfaces is a misconfiguration; prefer one that works.
        owners.sort(key=lambda i: (not i.is_up, i.is_loopback))
        return owners[0] if owners else None

    def on_subnet(self, ip: str | IPAddress) -> tuple[Interface, ...]:
        """Interfaces with an address whose network contains ``ip``, most specific prefix first.

        Raises:
            ValueError: When ``ip`` is not an IP address.
        """
        address, zone = _ip_or_raise(ip)
        matches: list[tuple[int, Interface]] = []
        for interface in self.interfaces:
            if zone is not None and interface.name != zone:
                continue
            network = interface.network_containing(address)
            if network is not None:
                matches.append((network.network.prefixlen, interface))
        matches.sort(key=lambda m: -m[0])  # stable: natural name order within a prefix length
        return tuple(i for _, i in matches)

    def cluster_interface(self, config: ConfigAddresses) -> Interface | None:
        """The interface that carries cluster traffic for ``config``, or None; see
        :meth:`choose_cluster_interface` for the rules and the reason."""
        return self.choose_cluster_interface(config)[0]

    def choose_cluster_interface(self, config: ConfigAddresses) -> tuple[Interface | None, str]:
        """Choose the cluster interface for ``config`` and say why.

        In order: the interface that holds ``NODE_ADDR``; else the interface whose subnet
        contains the rendezvous address (``PRIMARY_ADDR``/``MASTER_ADDR``), preferring the one
        that holds it, then one that is up, then the longest prefix; else None. Loopback only
        counts on a single-node job.

        Returns:
            The interface (or None) and one sentence of reason, e.g.
            ``"ens1 holds NODE_ADDR 10.65.0.2"``.
        """
        multi = config.is_multi_node
        notes: list[str] = []
        if config.node_addr:
            try:
                owner = self.owner_of(config.node_addr)
            except ValueError:
                notes.append(f"NODE_ADDR {config.node_addr!r} is not an IP address")
            else:
                if owner is not None and not (owner.is_loopback and multi):
                    return owner, f"{owner.name} holds NODE_ADDR {config.node_addr}"
                if owner is not None:
                    notes.append(
                        f"NODE_ADDR {config.node_addr} is on loopback, which other nodes "
                        "cannot reach"
                    )
                else:
                    notes.append(f"no interface holds NODE_ADDR {config.node_addr}")
        # A framework's own config object may not say which variable held the address.
        variable = ("the local rendezvous address" if config.source == "local"
                    else getattr(config, "primary_variable", "MASTER_ADDR"))
        primary = config.primary_addr
        try:
            candidates = self.on_subnet(primary)
        except ValueError:
            notes.append(
                f"{variable} {primary!r} is a host name, not an IP address, so no subnet can "
                "be matched without resolving it"
            )
            return None, "; ".join(notes)
        if multi:
            candidates = tuple(i for i in candidates if not i.is_loopback)
        if candidates:
            address, _ = _ip_or_raise(primary)
            ranked = sorted(candidates, key=lambda i: (not i.holds(address), not i.is_up))
            chosen = ranked[0]
            held = "holds" if chosen.holds(address) else "is on the subnet of"
            network = chosen.network_containing(address)
            reason = f"{chosen.name} ({network}) {held} {variable} {primary}"
            if not chosen.is_up:
                reason += f", but {chosen.name} is {chosen.operstate}"
            others = [i.name for i in ranked[1:]]
            if others:
                reason += f" (also on that subnet: {', '.join(others)})"
            return chosen, "; ".join([*notes, reason])
        notes.append(f"no {'non-loopback ' if multi else ''}interface is on the subnet of "
                     f"{variable} {primary}")
        known = [
            f"{i.name} {', '.join(str(a) for a in i.addresses)}"
            for i in self.interfaces
            if i.addresses
        ]
        notes.append(f"addresses here: {'; '.join(known) if known else 'none'}")
        return None, "; ".join(notes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


def _ip_or_raise(ip: str | IPAddress) -> tuple[IPAddress, str | None]:
    """:func:`~clusterenv._values.split_zone`, raising for what the public methods refuse."""
    split = split_zone(ip)
    if split is None:
        raise ValueError(f"{ip!r} is not an IP address: expected e.g. '10.65.0.2' or 'fd00::2'")
    return split


# -- reading sysfs --------------------------------------------------------------------------


def _parse_int(text: str | None) -> int | None:
    """A non-negative decimal attribute (``mtu``, ``type``, ``speed``), or None."""
    return parse_decimal(text, max_digits=19)


def _parse_hex(text: str | None) -> int | None:
    """A hex attribute such as ``flags`` (``0x1003``), or None."""
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def _parse_speed(text: str | None) -> int | None:
    """``speed`` in Mb/s; None for ``-1`` (SPEED_UNKNOWN), zero or garbage."""
    value = _parse_int(text)
    if value is None or value <= 0 or value >= _SPEED_UNKNOWN:
        return None
    return value


def _parse_operstate(text: str | None) -> str:
    """``operstate`` lower-cased; ``unknown`` when missing or not a word."""
    state = (text or "").strip().lower()
    return state if state.isalpha() and len(state) <= 32 else "unknown"


def _parse_mac(text: str | None) -> str | None:
    """A hardware address in ``aa:bb:…`` form, lower-cased, or None."""
    mac = (text or "").strip().lower()
    return mac if _MAC.fullmatch(mac) else None


def _parse_names(text: str | None) -> tuple[str, ...]:
    """A whitespace-separated list of interface names (``bonding/slaves``)."""
    return tuple(n for n in (text or "").split() if "/" not in n and len(n) <= 64)


def _read_interface(host: Root, name: str, addresses: Iterable[str]) -> Interface:
    base = f"sys/class/net/{name}"
    in_sysfs = host.is_dir(base)
    arphrd = _parse_int(host.read(f"{base}/type"))
    parsed = [p for p in map(parse_address, addresses) if p is not None]
    ipv4 = tuple(dict.fromkeys(a for a in parsed if isinstance(a, ipaddress.IPv4Interface)))
    ipv6 = tuple(dict.fromkeys(a for a in parsed if isinstance(a, ipaddress.IPv6Interface)))
    is_loopback = arphrd == ARPHRD_LOOPBACK or (arphrd is None and name == "lo")
    return Interface(
        name=name,
        operstate=_parse_operstate(host.read(f"{base}/operstate")),
        mtu=_parse_int(host.read(f"{base}/mtu")),
        speed_mbps=_parse_speed(host.read(f"{base}/speed")),
        mac=_parse_mac(host.read(f"{base}/address")),
        arphrd=arphrd,
        # Physical devices link to their PCI function; a snapshot that recorded only addresses
        # has no sysfs entry and is taken as a plain NIC.
        is_virtual=is_loopback or (in_sysfs and not host.exists(f"{base}/device")),
        is_loopback=is_loopback,
        is_ipoib=arphrd == ARPHRD_INFINIBAND,
        is_bridge=host.is_dir(f"{base}/bridge"),
        is_bond=host.is_dir(f"{base}/bonding"),
        bond_slaves=_parse_names(host.read(f"{base}/bonding/slaves")),
        bridge_ports=tuple(host.listdir(f"{base}/brif")),
        master=host.link_name(f"{base}/master"),
        flags=_parse_hex(host.read(f"{base}/flags")),
        ipv4=ipv4,
        ipv6=ipv6,
    )


def _link_masters(found: list[Interface]) -> tuple[Interface, ...]:
    """Fill ``master`` of slaves and ports that lack the link, from their bond or bridge."""
    masters: dict[str, str] = {}
    for interface in found:
        for member in (*interface.bond_slaves, *interface.bridge_ports):
            masters.setdefault(member, interface.name)
    linked = [
        replace(i, master=masters[i.name]) if i.master is None and i.name in masters else i
        for i in found
    ]
    return tuple(sorted(linked, key=lambda i: natural_key(i.name)))
