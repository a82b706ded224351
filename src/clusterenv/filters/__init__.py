"""The filter language of ``NCCL_SOCKET_IFNAME`` and ``NCCL_IB_HCA``: parse, match, render, lint.

NCCL reads both variables with one small parser: an optional leading ``^`` (exclude the listed
names), then an optional ``=`` (match whole names instead of prefixes), then a comma-separated
list of tokens, each ``name[:port[:rail[:plane]]]``. Nothing else is special: a ``^`` or ``=``
after the start, whitespace, or an IP address is taken literally and silently matches nothing.
This module mirrors that parser (``parseStringList`` / ``matchIfList`` in NCCL's
``src/misc/utils.cc``) so a value can be checked against this host before NCCL sees it, and it
lints the exact-name variables of Gloo (``GLOO_SOCKET_IFNAME``) and TensorPipe
(``TP_SOCKET_IFNAME``), which look similar but accept no filter syntax at all.

Everything here is pure: no I/O, no environment access. Callers pass the names to match against.

Example::

    >>> f = parse_filter("^=docker0,lo")
    >>> f.select_interfaces(["lo", "eth0", "docker0", "ens1"])
    ('eth0', 'ens1')
    >>> render_exact([("mlx5_0", 1), ("mlx5_1", 1)])
    '=mlx5_0:1,mlx5_1:1'
"""

from __future__ import annotations

from clusterenv.filters.language import (
    IB_HCA,
    SOCKET_IFNAME,
    FilterToken,
    NcclFilter,
    nccl_default_interfaces,
    needs_exact,
    parse_filter,
    render_exact,
)
from clusterenv.filters.lint import (
    ALL_CODES,
    FILTER_BAD_PORT,
    FILTER_EMPTY_LIST,
    FILTER_IGNORED_SHORT,
    FILTER_IP_ADDRESS,
    FILTER_LEAVES_AVOIDED,
    FILTER_MATCHES_NOTHING,
    FILTER_MODIFIER_ORDER,
    FILTER_MODIFIER_REPEATED,
    FILTER_PORT_ON_SOCKET,
    FILTER_PREFIX_COLLISION,
    FILTER_PREFIX_MULTIPLE,
    FILTER_SELECTS_AVOIDED,
    FILTER_TOKEN_UNMATCHED,
    FILTER_TOO_MANY_TOKENS,
    FILTER_WHITESPACE,
    IFNAME_IGNORED_SHORT,
    IFNAME_IP_ADDRESS,
    IFNAME_MULTIPLE,
    IFNAME_NCCL_SYNTAX,
    IFNAME_NO_SUCH_INTERFACE,
    lint_exact_names,
    lint_filter,
)

__all__ = [
    "ALL_CODES",
    "FILTER_BAD_PORT",
    "FILTER_EMPTY_LIST",
    "FILTER_IGNORED_SHORT",
    "FILTER_IP_ADDRESS",
    "FILTER_LEAVES_AVOIDED",
    "FILTER_MATCHES_NOTHING",
    "FILTER_MODIFIER_ORDER",
    "FILTER_MODIFIER_REPEATED",
    "FILTER_PORT_ON_SOCKET",
    "FILTER_PREFIX_COLLISION",
    "FILTER_PREFIX_MULTIPLE",
    "FILTER_SELECTS_AVOIDED",
    "FILTER_TOKEN_UNMATCHED",
    "FILTER_TOO_MANY_TOKENS",
    "FILTER_WHITESPACE",
    "IB_HCA",
    "IFNAME_IGNORED_SHORT",
    "IFNAME_IP_ADDRESS",
    "IFNAME_MULTIPLE",
    "IFNAME_NCCL_SYNTAX",
    "IFNAME_NO_SUCH_INTERFACE",
    "SOCKET_IFNAME",
    "FilterToken",
    "NcclFilter",
    "lint_exact_names",
    "lint_filter",
    "nccl_default_interfaces",
    "needs_exact",
    "parse_filter",
    "render_exact",
]
