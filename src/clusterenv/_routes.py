"""The kernel's routing table, read from ``/proc/net/route`` and ``/proc/net/ipv6_route``.

Only the main table is modelled (longest prefix, then lowest metric, as ``ip route get`` does
without policy rules), which is what a check such as "the route to PRIMARY_ADDR leaves via the
management interface" needs, and what a snapshot can replay.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from clusterenv._root import Root, as_root
from clusterenv._values import IPAddress, parse_ip

__all__ = ["read_table", "route_interface"]


_RTF_UP = 0x0001
_RTF_REJECT = 0x0200
_RTF_LOCAL = 0x80000000
# Routing tables of hosts with thousands of routes (Kubernetes nodes) run to megabytes.
_MAX_TABLE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Route:
    """One route, kept as integers: a large table is parsed and matched without objects."""

    version: int
    destination: int
    mask: int
    prefixlen: int
    metric: int
    flags: int
    interface: str

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """The destination, e.g. ``IPv4Network('10.65.0.0/24')``."""
        return ipaddress.ip_network((self.destination, self.prefixlen), strict=False)

    def contains(self, address: int) -> bool:
        return address & self.mask == self.destination


def _parse_route(text: str) -> list[_Route]:
    """``/proc/net/route``: hex fields in host byte order (little-endian on x86 and arm64)."""
    routes = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or len(fields[1]) != 8 or len(fields[7]) != 8:
            continue
        try:
            destination = int.from_bytes(int(fields[1], 16).to_bytes(4, "little"), "big")
            mask = int.from_bytes(int(fields[7], 16).to_bytes(4, "little"), "big")
            flags = int(fields[3], 16)
            metric = int(fields[6])
        except ValueError:
            continue
        prefixlen = bin(mask).count("1")
        if mask != (0xFFFFFFFF << (32 - prefixlen)) & 0xFFFFFFFF:
            continue  # not a prefix
        routes.append(_Route(4, destination & mask, mask, prefixlen, metric, flags, fields[0]))
    return routes


_ALL_ONES_128 = (1 << 128) - 1


def _parse_ipv6_route(text: str) -> list[_Route]:
    """``/proc/net/ipv6_route``: dest, prefix length, source, source length, next hop, metric,
    refcount, use, flags and device, all hex."""
    routes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10 or len(fields[0]) != 32:
            continue
        try:
            destination = int(fields[0], 16)
            prefixlen = int(fields[1], 16)
            metric = int(fields[5], 16)
            flags = int(fields[8], 16)
        except ValueError:
            continue
        if prefixlen > 128:
            continue
        mask = (_ALL_ONES_128 << (128 - prefixlen)) & _ALL_ONES_128
        routes.append(_Route(6, destination & mask, mask, prefixlen, metric, flags, fields[9]))
    return routes


def read_table(host: Root, relative: str) -> str:
    """A ``/proc`` table, which may outgrow :meth:`Root.read`'s limit; ``""`` if unreadable."""
    data = host.read_bytes(relative, max_bytes=_MAX_TABLE_BYTES, truncate=True)
    return "" if data is None else data.decode("ascii", errors="replace")


def _best_route(routes: list[_Route], address: IPAddress) -> _Route | None:
    value = int(address)
    usable = [
        r
        for r in routes
        if r.flags & _RTF_UP
        and not r.flags & _RTF_LOCAL
        and r.version == address.version
        and r.contains(value)
    ]
    return min(usable, key=lambda r: (-r.prefixlen, r.metric), default=None)


def route_interface(
    ip: str | IPAddress, *, root: str | os.PathLike[str] = "/"
) -> str | None:
    """The interface the kernel's main routing table sends traffic for ``ip`` through.

    Longest prefix wins, then the lowest metric, as in ``ip route get``. Loopback addresses give
    ``"lo"``; another address of this host resolves to the interface of its connected subnet
    (the local table is not consulted).
    Policy routing (``ip rule``) is not seen.

    Args:
        ip: The destination, e.g. ``"10.65.0.1"`` or ``"fd00::1"``.
        root: ``/`` or a host snapshot with ``proc/net/route`` (and ``proc/net/ipv6_route``).

    Returns:
        The interface name, e.g. ``"eth0"``; None when no route matches or the best match is
        an unreachable/prohibit route.

    Raises:
        ValueError: When ``ip`` is not an IP address.
    """
    address = parse_ip(ip)
    if address is None:
        raise ValueError(f"{ip!r} is not an IP address: expected e.g. '10.65.0.2' or 'fd00::2'")
    if address.is_loopback:
        return "lo"  # served from the local table, which /proc/net/route does not show
    host = as_root(root)
    if address.version == 4:
        routes = _parse_route(read_table(host, "proc/net/route"))
    else:
        routes = _parse_ipv6_route(read_table(host, "proc/net/ipv6_route"))
    best = _best_route(routes, address)
    if best is None or best.flags & _RTF_REJECT:
        return None
    return best.interface
