"""IP addresses of the network interfaces: from netifaces on the live host, from a snapshot's
``host.json`` otherwise.

IP addresses are not in sysfs. On the live host they come from ``getifaddrs(3)`` through
``netifaces`` (the ``netifaces-plus`` distribution), which answers for the network namespace the
process runs in, as a container sees it. This is the only module that imports ``netifaces``, and
only when addresses of the live host are asked for, so ``import clusterenv`` stays cheap.

Addresses travel as CIDR strings (``"10.65.0.2/24"``, ``"fe80::1/64"``), the spelling of
``host.json`` and ``ip -br addr``; :func:`parse_address` turns one into an ``ipaddress`` object.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from clusterenv._root import Root
from clusterenv._text import has_surrogates
from clusterenv.errors import DiscoveryError

__all__ = [
    "IPInterface",
    "address_map",
    "live_addresses",
    "parse_address",
    "snapshot_addresses",
]

#: One address with its prefix, e.g. ``IPv4Interface('10.65.0.2/24')``.
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

# netifaces' family numbers are the platform's AF_* values; Linux values, used by the pure parser.
_AF_INET = 2
_AF_INET6 = 10


def parse_address(text: object) -> IPInterface | None:
    """``"10.65.0.2/24"`` -> ``IPv4Interface('10.65.0.2/24')``; None for anything else.

    A bare address gets a host prefix (``/32``, ``/128``); an IPv6 zone (``fe80::1%eth0/64``) is
    dropped, since the interface already says where the address lives.
    """
    if not isinstance(text, str):
        return None
    address, slash, prefix = text.strip().partition("/")
    address = address.split("%", 1)[0]
    if not address or (slash and not prefix.isdigit()):
        return None
    try:
        return ipaddress.ip_interface(f"{address}/{prefix}" if slash else address)
    except ValueError:
        return None


def _prefix_length(netmask: object, version: int) -> int | None:
    """Prefix length of a netifaces ``netmask`` (``255.255.255.0``, ``ffff:ffff::/64``, ``64``)."""
    if not isinstance(netmask, str) or not netmask:
        return None
    _, slash, length = netmask.partition("/")
    if slash:  # netifaces writes IPv6 masks as "ffff:ffff:ffff:ffff::/64"
        return int(length) if length.isdigit() else None
    if netmask.isdigit():
        return int(netmask)
    try:
        mask = ipaddress.ip_address(netmask)
    except ValueError:
        return None
    if mask.version != version:
        return None
    bits = int(mask)
    width = mask.max_prefixlen
    length_bits = bin(bits).count("1")
    # A contiguous mask is ones followed by zeros; anything else is not a prefix.
    if bits != ((1 << width) - 1) ^ ((1 << (width - length_bits)) - 1):
        return None
    return length_bits


def _parse_netifaces(entries: Mapping[int, Any]) -> list[str]:
    """CIDR strings from one ``netifaces.ifaddresses(name)`` result, IPv4 first, kernel order."""
    out: list[str] = []
    for family, version in ((_AF_INET, 4), (_AF_INET6, 6)):
        items = entries.get(family)
        if not isinstance(items, list):
            continue
        for item in items:
            if not isinstance(item, Mapping):
                continue
            raw = item.get("addr")
            if not isinstance(raw, str):
                continue
            address = raw.split("%", 1)[0]
            length = _prefix_length(item.get("netmask"), version)
            parsed = parse_address(address if length is None else f"{address}/{length}")
            if parsed is not None and parsed.version == version:
                out.append(parsed.with_prefixlen)
    return out


def live_addresses() -> dict[str, list[str]]:
    """Addresses of every interface of this network namespace, e.g. ``{"lo": ["127.0.0.1/8"]}``.

    Interfaces without an IP address are left out (sysfs lists them).

    Raises:
        DiscoveryError: When ``netifaces`` (the ``netifaces-plus`` package) is not installed.
    """
    try:
        import netifaces  # noqa: PLC0415  # only the live host pays for it
    except ImportError as e:
        raise DiscoveryError(
            "cannot read IP addresses: the 'netifaces' module is missing; install it with "
            "`pip install netifaces-plus` (a dependency of clusterenv)",
            path=None,
        ) from e
    out: dict[str, list[str]] = {}
    for name in _interface_names(netifaces):
        try:
            entries = netifaces.ifaddresses(name)
        except (ValueError, SystemError):  # vanished since, or a name that is not UTF-8
            continue
        addresses = _parse_netifaces(entries)
        if addresses:
            out[str(name)] = addresses
    return out


def _interface_names(netifaces: Any) -> list[str]:
    """The interface names netifaces lists; when one of them is not UTF-8 (``$'v\\xff'``),
    netifaces fails for all of them (``SystemError``), so the kernel's list is read instead and
    the undecodable names are left out (their addresses cannot be asked for by name)."""
    try:
        return [str(name) for name in netifaces.interfaces()]
    except (SystemError, UnicodeError):
        import socket  # noqa: PLC0415

        return [name for _, name in socket.if_nameindex() if not has_surrogates(name)]


def snapshot_addresses(host: Mapping[str, Any]) -> dict[str, list[str]]:
    """The ``addresses`` of a snapshot's ``host.json``, keeping only well-formed entries."""
    recorded = host.get("addresses")
    if not isinstance(recorded, Mapping):
        return {}
    out: dict[str, list[str]] = {}
    for name, items in recorded.items():
        if not isinstance(name, str) or not name or not isinstance(items, list):
            continue
        parsed = [p.with_prefixlen for p in map(parse_address, items) if p is not None]
        out[name] = parsed
    return out


def address_map(root: Root) -> dict[str, list[str]]:
    """Addresses per interface: the live host's on ``/``, the recorded ones on a snapshot."""
    if root.is_live:
        return live_addresses()
    return snapshot_addresses(root.host)
