"""The text of values from the environment, files and peers: IP addresses, hosts, ports and
decimal numbers, with one parser each.

Every parser here returns None for text it does not accept and never raises; a caller that
must refuse (a public method documented to raise ``ValueError``, a reader that records a
``ConfigError`` problem naming the variable) says so in its own words.

Examples::

    parse_decimal(" 0042 ")          # 42
    split_zone("[fe80::1%ens1]")     # (IPv6Address('fe80::1'), 'ens1')
    parse_ip("::ffff:10.65.0.2")     # IPv4Address('10.65.0.2')
    parse_host("Node-0.")            # 'node-0'
    split_host_port("[fd00::2]:29500")  # ('fd00::2', 29500)
"""

from __future__ import annotations

import ipaddress
import re

__all__ = [
    "MAX_DIGITS",
    "IPAddress",
    "format_host_port",
    "is_loopback_host",
    "parse_decimal",
    "parse_host",
    "parse_ip",
    "split_host_port",
    "split_zone",
]

#: One address, e.g. ``IPv4Address('10.65.0.2')``.
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Ranks, counts and ports never need more digits; a longer value is refused before ``int()``.
MAX_DIGITS = 9

_DIGITS = re.compile(r"[0-9]+")
# RFC 1123 host names: labels of letters, digits and inner hyphens, 253 characters in all.
_HOSTNAME = re.compile(
    r"(?=.{1,253}\Z)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?"
)
# An IPv6 zone: an interface name as plain as Linux allows (IFNAMSIZ - 1 bytes), or an index.
# Python accepts any text after "%", and a zone such as "x,LD_PRELOAD=libevil.so" would
# otherwise ride into another tool's option syntax.
_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})


def _unbracketed(text: str) -> str:
    """``" [fd00::2] "`` -> ``"fd00::2"``: white space and one pair of brackets off."""
    stripped = text.strip()
    return stripped[1:-1] if stripped.startswith("[") and stripped.endswith("]") else stripped


def parse_decimal(text: str | None, *, max_digits: int = MAX_DIGITS) -> int | None:
    """A non-negative decimal integer in ASCII digits (surrounding white space allowed, leading
    zeros ignored, at most ``max_digits`` significant digits), e.g. ``" 0042 "`` -> ``42``;
    None for anything else (``"-1"``, ``"1e3"``, ``"١٢"``, ``"0x10"``, ``""``)."""
    if text is None:
        return None
    stripped = text.strip()
    if not stripped.isascii() or not _DIGITS.fullmatch(stripped):
        return None
    if len(stripped.lstrip("0")) > max_digits:
        return None
    return int(stripped)


def split_zone(text: str | IPAddress) -> tuple[IPAddress, str | None] | None:
    """An IP address and its IPv6 zone, e.g. ``"[fe80::1%ens1]"`` ->
    ``(IPv6Address('fe80::1'), "ens1")``; None when ``text`` is not an IP address or its zone
    does not look like an interface name.

    Brackets are accepted; an IPv4-mapped IPv6 address (``::ffff:10.65.0.2``) is the IPv4 one.
    """
    if isinstance(text, ipaddress.IPv4Address):
        return text, None
    if isinstance(text, ipaddress.IPv6Address):
        zone = text.scope_id or None
        address = ipaddress.IPv6Address(text.packed)
    else:
        stripped = _unbracketed(text)
        bare, percent, zone_text = stripped.partition("%")
        if percent and not _ZONE.fullmatch(zone_text):
            return None
        try:
            parsed = ipaddress.ip_address(bare)
        except ValueError:
            return None
        if percent and parsed.version != 6:
            return None
        if isinstance(parsed, ipaddress.IPv4Address):
            return parsed, None
        address, zone = parsed, zone_text or None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, None
    return address, zone


def parse_ip(text: str | IPAddress) -> IPAddress | None:
    """An IP address without its zone (:func:`split_zone`), e.g. ``"fe80::1%eth0"`` ->
    ``IPv6Address('fe80::1')``; None when ``text`` is not one."""
    split = split_zone(text)
    return None if split is None else split[0]


def parse_host(value: str) -> str | None:
    """A host normalised: an IP address in canonical form (brackets removed, a plain zone kept:
    ``fe80::1%ens1``) or a DNS name in lower case without the final dot; None when ``value`` is
    neither."""
    text = _unbracketed(value)
    _, percent, zone = text.partition("%")
    if percent and not _ZONE.fullmatch(zone):
        return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if text.isascii() and _HOSTNAME.fullmatch(text) and not text.replace(".", "").isdigit():
        return text.rstrip(".").lower()
    return None


def split_host_port(value: str) -> tuple[str, int] | None:
    """``"10.65.0.2:29500"`` or ``"[fd00::2]:29500"`` -> host and port; None if garbled."""
    text = value.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1:].startswith(":"):
            return None
        host_part, port_part = text[1:end], text[end + 2:]
    else:
        host_part, sep, port_part = text.rpartition(":")
        if not sep or ":" in host_part:
            return None
    host = parse_host(host_part)
    port = parse_decimal(port_part, max_digits=5) if port_part.strip() == port_part else None
    if host is None or port is None:
        return None
    return host, port


def format_host_port(host: str, port: int) -> str:
    """``host:port``, with IPv6 addresses in brackets (``[fd00::2]:29500``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback_host(host: str) -> bool:
    """Whether a host is loopback without asking a resolver (``localhost``, 127/8, ``::1``)."""
    address = parse_ip(host)
    if address is not None:
        return address.is_loopback
    name = host.strip().lower().rstrip(".")
    return name in _LOOPBACK_NAMES or name.endswith(".localhost")
