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

from clusterenv.filters import language, lint
from clusterenv.filters.language import *  # noqa: F403  # the façade: each part's __all__
from clusterenv.filters.lint import *  # noqa: F403

__all__: list[str] = []
__all__ += language.__all__
__all__ += lint.__all__
