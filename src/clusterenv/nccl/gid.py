"""Which RoCE GID NCCL puts on the wire, per NCCL release and per setting, and whether that GID
can reach another node.

NCCL reads the GID of each RoCE port in ``ncclIbGetGidIndex`` (``src/transport/net_ib.cc``, later
``src/transport/net_ib/connect.cc``); docs/discovery-rdma.md cites what each release does. In
short:

- NCCL before 2.21 has no automatic choice: ``NCCL_IB_GID_INDEX`` defaults to ``0``, which is the
  link-local RoCE v1 GID on a typical table.
- NCCL 2.21 and later: ``NCCL_IB_GID_INDEX`` (default ``-1``) is used verbatim when it is ``>= 0``;
  otherwise NCCL starts at index 0 and walks the table once. A candidate of the wanted address
  family (``NCCL_IB_ADDR_FAMILY``, default ``AF_INET``) inside ``NCCL_IB_ADDR_RANGE`` replaces
  the current index when the current one is of the other family; a candidate of the same family
  replaces it when it is a valid (configured, not link-local) GID of the wanted RoCE version
  (``NCCL_IB_ROCE_VERSION_NUM``, default 2) and the current one is invalid or of the other
  version. With no IPv4 RoCE v2 GID on the port the walk never leaves index 0; with
  ``AF_INET6`` it ends on the first global (non-link-local) IPv6 RoCE v2 GID.

:func:`choose_gid` replays that walk on the GID table detection read, empty slots included.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from clusterenv.rdma import Gid, RdmaPort

__all__ = [
    "AUTO_SINCE",
    "GID_VARIABLES",
    "AddressRange",
    "GidChoice",
    "GidSettings",
    "choose_gid",
    "gid_family",
    "gid_problem",
]

#: NCCL chooses the RoCE GID itself from this release on (``NCCL_IB_GID_INDEX=-1`` by default).
AUTO_SINCE = (2, 21)
#: The variables NCCL reads to choose a RoCE GID.
GID_VARIABLES = (
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_ADDR_RANGE",
)

Family = Literal["AF_INET", "AF_INET6"]
_Slot = tuple[Family, bool, int, bool]
#: Why a chosen GID cannot carry traffic to another node, or None when it can.
Problem = Literal["missing", "link-local", "roce-v1", "unknown-type"]

_V4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_V4_MAPPED_MULTICAST = ipaddress.IPv6Network("ff0e::ffff:0:0/96")
_LINK_LOCAL_64 = ipaddress.IPv6Network("fe80::/64")
_INT64_MAX = (1 << 63) - 1


def _strtoll(text: str) -> int | None:
    """C's ``strtoll(text, NULL, 0)`` as NCCL's ``ncclLoadParam`` calls it; None on ``ERANGE``.

    Leading blanks and a sign are skipped, ``0x`` means hex and a leading ``0`` octal; parsing
    stops at the first character that is not a digit, and no digits at all read as 0
    (``"abc"`` -> 0, ``"3x"`` -> 3, ``"0x10"`` -> 16).
    """
    rest = text.lstrip(" \t\n\v\f\r")
    sign = 1
    if rest[:1] in ("+", "-"):
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    base = 10
    if rest[:2].lower() == "0x" and rest[2:3] and rest[2].lower() in "0123456789abcdef":
        base, rest = 16, rest[2:]
    elif rest[:1] == "0":
        base = 8
    digits = "0123456789abcdef"[:base]
    end = 0
    while end < len(rest) and rest[end].lower() in digits:
        end += 1
    if end == 0:
        return 0
    value = sign * int(rest[:end], base)
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        return None
    return value


def _strtol10(text: str) -> int:
    """C's ``strtol(text, NULL, 10)`` for a mask length: ``"16"`` -> 16, ``"x"`` -> 0."""
    rest = text.lstrip(" \t\n\v\f\r")
    sign = -1 if rest[:1] == "-" else 1
    rest = rest[1:] if rest[:1] in ("+", "-") else rest
    end = 0
    while end < len(rest) and rest[end] in "0123456789":
        end += 1
    return sign * int(rest[:end]) if end else 0


@dataclass(frozen=True, slots=True)
class AddressRange:
    """``NCCL_IB_ADDR_RANGE`` as NCCL parsed it: the family, the address bits and the length."""

    family: Family
    base: int
    length: int

    def __str__(self) -> str:
        if self.family == "AF_INET":
            return f"{ipaddress.IPv4Address(self.base)}/{self.length}"
        return f"{ipaddress.IPv6Address(self.base)}/{self.length}"

    def matches(self, address: ipaddress.IPv6Address) -> bool:
        """Whether NCCL's ``matchGidAddrPrefix`` accepts a GID.

        For ``AF_INET`` NCCL compares the last 32 bits of the GID (where an IPv4-mapped GID
        keeps its IPv4 address); for ``AF_INET6`` the first ``length`` bits.
        """
        if self.length <= 0:
            return True
        if self.family == "AF_INET":
            shift = 32 - self.length
            return (int(address) & 0xFFFFFFFF) >> shift == self.base >> shift
        shift = 128 - self.length
        return int(address) >> shift == self.base >> shift


@dataclass(frozen=True, slots=True)
class GidSettings:
    """The variables NCCL reads to choose a RoCE GID, read the way NCCL reads them.

    Attributes:
        gid_index: ``NCCL_IB_GID_INDEX``, e.g. ``3``; None when unset (each release's default:
            ``0`` before 2.21, ``-1`` = automatic from 2.21).
        family: ``NCCL_IB_ADDR_FAMILY``: ``"AF_INET"`` (the default, also for any other value)
            or ``"AF_INET6"``.
        roce_version: ``NCCL_IB_ROCE_VERSION_NUM``, e.g. ``2`` (the default).
        addr_range: ``NCCL_IB_ADDR_RANGE`` when NCCL accepts it for ``family``, else None.
        given: The variables that were set, as ``NAME=value`` text, for messages.
    """

    gid_index: int | None = None
    family: Family = "AF_INET"
    roce_version: int = 2
    addr_range: AddressRange | None = None
    given: tuple[str, ...] = ()

    @classmethod
    def read(cls, value: Callable[[str], str | None]) -> GidSettings:
        """The settings from a lookup such as ``environ.get`` (empty values count as unset).

        Example: ``GidSettings.read({"NCCL_IB_ADDR_FAMILY": "AF_INET6"}.get).family`` is
        ``"AF_INET6"``.
        """
        given = tuple(
            f"{name}={text}" for name in GID_VARIABLES if (text := value(name))
        )
        index = _int_param(value("NCCL_IB_GID_INDEX"))
        roce = _int_param(value("NCCL_IB_ROCE_VERSION_NUM"))
        family: Family = "AF_INET6" if value("NCCL_IB_ADDR_FAMILY") == "AF_INET6" else "AF_INET"
        return cls(
            gid_index=index,
            family=family,
            roce_version=2 if roce is None else roce,
            addr_range=_parse_range(value("NCCL_IB_ADDR_RANGE"), family),
            given=given,
        )

    @classmethod
    def from_mapping(cls, environ: Mapping[str, str]) -> GidSettings:
        """The settings in an environment mapping."""
        return cls.read(environ.get)



def _int_param(text: str | None) -> int | None:
    """An NCCL integer parameter: None when unset or out of range (NCCL keeps its default)."""
    if not text:
        return None
    return _strtoll(text)


def _parse_range(text: str | None, family: Family) -> AddressRange | None:
    """``envIbAddrRange``: ``"10.99.0.0/16"`` for AF_INET; None when NCCL ignores it."""
    if not text or "/" not in text:
        return None
    address, mask = text[:127].split("/", 1)
    try:
        parsed: ipaddress.IPv4Address | ipaddress.IPv6Address
        if family == "AF_INET":
            parsed = ipaddress.IPv4Address(address)
        else:
            parsed = ipaddress.IPv6Address(address)
    except ValueError:
        return None
    if "%" in address:
        return None
    length = _strtol10(mask)
    if length > (32 if family == "AF_INET" else 128):
        return None
    return AddressRange(family, int(parsed), length)


def gid_family(address: ipaddress.IPv6Address) -> Family:
    """NCCL's ``getGidAddrFamily``: IPv4-mapped (also IPv4-mapped multicast) is ``AF_INET``."""
    if address in _V4_MAPPED or address in _V4_MAPPED_MULTICAST:
        return "AF_INET"
    return "AF_INET6"


def _valid(address: ipaddress.IPv6Address | None) -> bool:
    """NCCL's ``validGid``: configured (not all-zero, not bare ``fe80::``) and not link-local."""
    return address is not None and address not in _LINK_LOCAL_64 and int(address) != 0


def gid_problem(gid: Gid | None) -> Problem | None:
    """Why traffic on this GID cannot reach another node, or None when it can.

    ``"missing"`` (an empty slot), ``"link-local"`` (``fe80::/64`` never leaves the link),
    ``"roce-v1"`` (RoCE v1 is not routed beyond one Ethernet segment), ``"unknown-type"`` (the
    type could not be read).
    """
    if gid is None:
        return "missing"
    if gid.is_link_local:
        return "link-local"
    version = gid.roce_version
    if version == 1:
        return "roce-v1"
    if version is None:
        return "unknown-type"
    return None


@dataclass(frozen=True, slots=True)
class GidChoice:
    """The GID NCCL will use on one RoCE port, and why.

    Attributes:
        index: The GID index, e.g. ``3`` (``0`` when NCCL found nothing better).
        gid: The table entry at that index; None when the slot is empty (NCCL then sends an
            all-zero GID and ``ibv_modify_qp`` fails).
        rule: How NCCL came to it, e.g. ``"the lowest IPv4 RoCE v2 GID"`` or
            ``"no IPv4 RoCE v2 GID: NCCL stays on index 0"``.
    """

    index: int
    gid: Gid | None
    rule: str

    @property
    def problem(self) -> Problem | None:
        """Why the GID cannot reach other nodes (:func:`gid_problem`); None when it can."""
        return gid_problem(self.gid)

    @property
    def reaches_peers(self) -> bool | None:
        """Whether traffic on this GID can reach another node; None when the type is unknown."""
        problem = self.problem
        if problem == "unknown-type":
            return None
        return problem is None

    @property
    def kind(self) -> str:
        """Type and family, the facts compared across nodes, e.g. ``"RoCE v2 IPv4"``,
        ``"RoCE v2 IPv6 link-local"``, ``"RoCE v1 IPv4"`` or ``"empty"``."""
        if self.gid is None:
            return "empty"
        version = self.gid.roce_version
        kind = f"RoCE v{version}" if version else "unknown type"
        if self.gid.ipv4 is not None:
            return f"{kind} IPv4"
        return f"{kind} IPv6" + (" link-local" if self.gid.is_link_local else "")

    def describe(self) -> str:
        """``"GID 0 fe80::1 (RoCE v2 IPv6 link-local)"`` or ``"GID 0 (empty slot)"``."""
        if self.gid is None:
            return f"GID {self.index} (empty slot)"
        shown = self.gid.ipv4 if self.gid.ipv4 is not None else self.gid.address
        return f"GID {self.index} {shown} ({self.kind})"


def choose_gid(
    port: RdmaPort,
    *,
    version: tuple[int, ...] | None = None,
    settings: GidSettings | None = None,
) -> GidChoice | None:
    """The GID NCCL will use on a RoCE port; None on other link layers (InfiniBand addresses
    by LID and uses GID 0 since 2.23; EFA is not NCCL's IB transport).

    Args:
        port: The port as detection read it.
        version: The NCCL release, e.g. ``(2, 19, 3)``; None means 2.21 or later.
        settings: The NCCL variables (the defaults when None).

    Example::

        choose_gid(port).index                                   # 3 on a typical table
        choose_gid(port, version=(2, 19, 3)).index               # 0: no automatic choice
    """
    if port.link_layer != "Ethernet":
        return None
    settings = settings or GidSettings()
    table = {g.index: g for g in port.gids}
    if version is not None and tuple(version[:2]) < AUTO_SINCE:
        index = 0 if settings.gid_index is None else settings.gid_index
        rule = (f"NCCL_IB_GID_INDEX={index}" if settings.gid_index is not None
                else "NCCL before 2.21 has no automatic choice: NCCL_IB_GID_INDEX defaults to 0")
        return GidChoice(index, table.get(index), rule)
    if settings.gid_index is not None and settings.gid_index >= 0:
        index = settings.gid_index
        return GidChoice(index, table.get(index), f"NCCL_IB_GID_INDEX={index}")
    index = _walk(table, port.gid_table_len, settings)
    chosen = table.get(index)
    wanted = (f"{'IPv4' if settings.family == 'AF_INET' else 'IPv6'} RoCE "
              f"v{settings.roce_version} GID")
    if settings.addr_range is not None:
        wanted += f" in NCCL_IB_ADDR_RANGE {settings.addr_range}"
    fits = (
        chosen is not None
        and gid_family(chosen.address) == settings.family
        and _valid(chosen.address)
        and chosen.roce_version == settings.roce_version
        and (settings.addr_range is None or settings.addr_range.matches(chosen.address))
    )
    if fits:
        rule = f"the lowest valid {wanted}"
    elif index == 0:
        rule = f"no valid {wanted}: NCCL stays on index 0"
    else:
        rule = (f"no valid {wanted}: NCCL ends on index {index}, the first "
                f"{'IPv4' if settings.family == 'AF_INET' else 'IPv6'} entry after a GID of the "
                "other family")
    return GidChoice(index, chosen, rule)


def _walk(table: Mapping[int, Gid], table_len: int, settings: GidSettings) -> int:
    """``ncclIbGetGidIndex`` with ``NCCL_IB_GID_INDEX < 0``: start at 0, try 1..len-1 once
    (``ncclUpdateGidIndex`` per candidate). Empty slots read as the all-zero GID, whose family is
    ``AF_INET6``; a type that cannot be read never matches the wanted RoCE version (NCCL skips a
    GID whose ``gid_attrs/types/N`` read fails with EINVAL)."""
    size = max(table_len, max(table, default=-1) + 1)
    want = settings.family
    matches = settings.addr_range.matches if settings.addr_range is not None else None

    def facts(address: ipaddress.IPv6Address, gid_type: int) -> _Slot:
        return (gid_family(address), _valid(address), gid_type,
                matches(address) if matches is not None else True)

    # (family, valid, RoCE version or -1 when unreadable, inside NCCL_IB_ADDR_RANGE) per slot;
    # an empty slot is the all-zero GID.
    slots = {
        i: facts(g.address, g.roce_version if g.roce_version is not None else -1)
        for i, g in table.items()
    }
    empty = facts(ipaddress.IPv6Address(0), -1)
    current = 0
    cur = slots.get(0, empty)
    for candidate in range(1, size):
        cand = slots.get(candidate)
        if cand is None:
            if want == "AF_INET":
                continue  # an empty slot is AF_INET6: never taken when IPv4 is wanted
            cand = empty
        family, valid, version, inside = cand
        if family != cur[0] and family == want and inside:
            current, cur = candidate, cand
            continue
        if family != want or not valid or not inside:
            continue
        if (cur[2] != version or not cur[1]) and version == settings.roce_version:
            current, cur = candidate, cand
    return current
