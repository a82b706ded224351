"""The filter language of ``NCCL_SOCKET_IFNAME`` and ``NCCL_IB_HCA``: parse, match, render.

Public through :mod:`clusterenv.filters`; see there for the language itself. Everything here is
pure: no I/O, no environment access.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "IB_HCA",
    "MAX_TOKENS",
    "SOCKET_IFNAME",
    "FilterToken",
    "NcclFilter",
    "nccl_default_interfaces",
    "needs_exact",
    "parse_filter",
    "render_exact",
    "split_modifiers",
]

SOCKET_IFNAME = "NCCL_SOCKET_IFNAME"
"""NCCL's socket interface filter (bootstrap, NET/Socket, the NET/IB out-of-band socket)."""

IB_HCA = "NCCL_IB_HCA"
"""NCCL's RDMA device filter, tokens ``device[:port]``, e.g. ``=mlx5_0:1,mlx5_1:1``."""

# NCCL stops parsing after this many tokens: MAX_IFS for sockets, MAX_IB_DEVS for HCAs.
MAX_TOKENS = {SOCKET_IFNAME: 16, IB_HCA: 32}


@dataclass(frozen=True, slots=True)
class FilterToken:
    """One comma-separated entry of a filter, as NCCL reads it.

    Attributes:
        name: The device or interface name (or prefix) before the first ``:``, e.g. ``"mlx5_0"``.
        port: The port after the first ``:`` (used by ``NCCL_IB_HCA`` only), or None for every port,
            e.g. ``1``. A field that is no number reads as ``0`` (C ``atoi``) and matches no port.
        raw: The token as written, e.g. ``"mlx5_0:1"`` or ``"mlx5_0::0:0"`` (rail and plane).
    """

    name: str
    port: int | None
    raw: str

    @property
    def fields(self) -> tuple[str, ...]:
        """The ``:``-separated fields after the name (port, rail, plane), e.g. ``("1",)``."""
        return tuple(self.raw.split(":")[1:])

    def __str__(self) -> str:
        return self.raw


@dataclass(frozen=True, slots=True)
class NcclFilter:
    """A parsed ``NCCL_SOCKET_IFNAME`` or ``NCCL_IB_HCA`` value.

    Two filters are equal when NCCL would treat them the same (``raw`` is not compared), and
    ``str()`` renders one back in NCCL's spelling.

    Attributes:
        raw: The value as given, e.g. ``"^=docker0,lo"``.
        exclude: A leading ``^``: select everything the list does not match.
        exact: ``=`` (after the optional ``^``): tokens are whole names, not prefixes.
        tokens: The non-empty tokens, in order, e.g. ``(FilterToken("docker0", None, "docker0"),)``.
        variable: Which variable's rules apply, e.g. ``"NCCL_IB_HCA"``.
    """

    raw: str = field(compare=False)
    exclude: bool
    exact: bool
    tokens: tuple[FilterToken, ...]
    variable: str = SOCKET_IFNAME

    @property
    def names(self) -> tuple[str, ...]:
        """The token names in order, e.g. ``("docker0", "lo")``."""
        return tuple(t.name for t in self.tokens)

    def _listed(self, name: str, port: int | None) -> bool:
        # matchIfList: an empty list matches everything; port None (NCCL: -1) matches any port.
        if not self.tokens:
            return True
        for token in self.tokens:
            hit = name == token.name if self.exact else name.startswith(token.name)
            if hit and (port is None or token.port is None or token.port == port):
                return True
        return False

    def matches_interface(self, name: str) -> bool:
        """Whether NCCL would select the interface (or device, ignoring ports) ``name``.

        Example: ``parse_filter("ens1").matches_interface("ens10")`` is True (prefix match).
        """
        return self._listed(name, None) != self.exclude

    def matches_port(self, device: str, port: int) -> bool:
        """Whether NCCL would select port ``port`` of RDMA device ``device``.

        A token with a port only matches that port; a token without one matches every port.
        Example: ``parse_filter("=mlx5_0:1", variable="NCCL_IB_HCA").matches_port("mlx5_0", 2)``
        is False.
        """
        return self._listed(device, None if port == -1 else port) != self.exclude

    def select_interfaces(self, names: Iterable[str]) -> tuple[str, ...]:
        """The names this filter selects, in the given order, e.g. ``("eth0", "ens1")``."""
        return tuple(n for n in names if self.matches_interface(n))

    def select_ports(self, pairs: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
        """The ``(device, port)`` pairs this filter selects, in order, e.g. ``(("mlx5_0", 1),)``."""
        return tuple((d, p) for d, p in pairs if self.matches_port(d, p))

    def __str__(self) -> str:
        text = ("^" if self.exclude else "") + ("=" if self.exact else "")
        body = ",".join(t.raw for t in self.tokens)
        # A body that starts with a modifier NCCL would consume needs a leading empty token.
        if (body[:1] == "=" and not self.exact) or (body[:1] == "^" and not text):
            body = "," + body
        text += body
        # An empty value is unset, and a one-character NCCL_SOCKET_IFNAME is ignored: pad with
        # empty tokens, which NCCL skips, so the text means what this filter means.
        while len(text) < (2 if _ignores_short(self.variable) else 1):
            text += ","
        return text


def _ignores_short(variable: str) -> bool:
    # ncclFindInterfaces uses NCCL_SOCKET_IFNAME only when strlen > 1; ncclIbInitDevices has no
    # such rule for NCCL_IB_HCA, so "^" there excludes every HCA.
    return variable != IB_HCA


def _atoi(text: str) -> int:
    """C ``atoi``: optional leading whitespace and sign, then digits; no digits reads as 0."""
    match = re.match(r"[ \t\n\v\f\r]*([+-]?\d+)", text)
    return int(match.group(1)) if match else 0


def _parse_port(fields: str) -> int | None:
    port_field = fields.split(":", 1)[0]
    if port_field == "":  # "mlx5_0::0:0": rail and plane without a port means every port
        return None
    port = _atoi(port_field)
    return None if port == -1 else port  # NCCL uses -1 as "any port"


def split_modifiers(text: str) -> tuple[bool, bool, str]:
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    exact = text.startswith("=")
    if exact:
        text = text[1:]
    return exclude, exact, text


def parse_filter(value: str | None, *, variable: str = SOCKET_IFNAME) -> NcclFilter | None:
    """Parse a filter value exactly as NCCL does.

    Args:
        value: The value, e.g. ``"^=mlx5_1,mlx5_4"``; None means unset.
        variable: ``"NCCL_SOCKET_IFNAME"`` (default) or ``"NCCL_IB_HCA"``. For the socket
            variable a value of one character or less is ignored by NCCL (None is returned);
            for ``NCCL_IB_HCA`` only the empty value is, and ``^`` alone excludes every HCA.

    Returns:
        The filter, or None when NCCL behaves as if the variable were unset. Never raises.

    Example:
        ``parse_filter("=mlx5_0:1", variable="NCCL_IB_HCA")`` has ``exact=True`` and one token
        ``FilterToken("mlx5_0", 1, "mlx5_0:1")``.
    """
    if value is None:
        return None
    text = value.split("\0", 1)[0]  # NCCL sees a C string
    if not text or (_ignores_short(variable) and len(text) <= 1):
        return None
    exclude, exact, body = split_modifiers(text)
    limit = MAX_TOKENS.get(variable, MAX_TOKENS[IB_HCA])
    tokens: list[FilterToken] = []
    for piece in body.split(","):
        name, colon, rest = piece.partition(":")
        if not name:  # parseStringList skips empty tokens, and ":1" with its fields
            continue
        tokens.append(FilterToken(name, _parse_port(rest) if colon else None, piece))
        if len(tokens) == limit:
            break
    return NcclFilter(value, exclude, exact, tuple(tokens), variable)


def render_exact(names: Iterable[str | tuple[str, int]]) -> str:
    """Render an exact-match filter that selects precisely ``names``.

    Args:
        names: Interface names (``["ens1"]``) or ``(device, port)`` pairs
            (``[("mlx5_0", 1), ("mlx5_1", 1)]``), in the order NCCL should list them.

    Returns:
        ``"=ens1"`` or ``"=mlx5_0:1,mlx5_1:1"``.

    Raises:
        ValueError: No names, or a name that cannot be written in the language (empty, or
            containing ``,``, ``:`` or NUL).
    """
    tokens: list[str] = []
    for item in names:
        name, port = (item, None) if isinstance(item, str) else item
        if not name or any(c in name for c in ",:\0"):
            raise ValueError(f"cannot write {name!r} in an NCCL filter: expected a non-empty name "
                             "without ',', ':' or NUL")
        tokens.append(name if port is None else f"{name}:{port}")
    if not tokens:
        raise ValueError("render_exact() needs at least one name: '=' alone selects everything")
    return "=" + ",".join(tokens)


def needs_exact(name: str, all_names: Iterable[str]) -> bool:
    """Whether the prefix ``name`` would also match another name, so ``=name`` is needed.

    Example: ``needs_exact("ens1", ["lo", "ens1", "ens10"])`` is True; with only
    ``["lo", "eth0", "ens1"]`` it is False.
    """
    return any(other != name and other.startswith(name) for other in all_names)


def nccl_default_interfaces(
    names: Sequence[str], *, nccl_version: tuple[int, ...] | None = None
) -> tuple[str, ...]:
    """The interfaces NCCL selects when ``NCCL_SOCKET_IFNAME`` is unset (or ignored).

    NCCL tries, in order, and keeps the first step that selects anything: ``ib*``; then the
    interface in the subnet of ``NCCL_COMM_ID`` (not modelled here: only used when that is set);
    then everything but ``docker*``, ``lo*`` and (NCCL >= 2.28) ``virbr*``; then ``docker*``;
    then ``lo*``; then ``virbr*``. Bootstrap uses the first result; NET/Socket up to 16.

    Args:
        names: Interfaces NCCL can use (up, with an IPv4/IPv6 address other than ``::1``), in
            kernel (``getifaddrs``) order, e.g. ``["lo", "eth0", "ens1"]``.
        nccl_version: ``(major, minor, …)`` of NCCL, e.g. ``(2, 27, 5)``; None means current.

    Returns:
        The selected names in order, e.g. ``("eth0", "ens1")``.
    """
    with_virbr = nccl_version is None or tuple(nccl_version[:2]) >= (2, 28)
    steps = ["ib", "^docker,lo,virbr" if with_virbr else "^docker,lo", "docker", "lo"]
    if with_virbr:
        steps.append("virbr")
    for step in steps:
        selected = _must_parse(step).select_interfaces(names)
        if selected:
            return selected
    return ()


def _must_parse(value: str, variable: str = SOCKET_IFNAME) -> NcclFilter:
    parsed = parse_filter(value, variable=variable)
    assert parsed is not None, value  # noqa: S101 - internal values are longer than one char
    return parsed
