"""Reading an ``NCCL_DEBUG=INFO`` log: what NCCL actually did.

NCCL tells the truth about a job only in its debug log: which interface it bootstrapped on, which
network it chose (``IB``, ``Socket``, a plugin such as ``Libfabric``), which HCAs, whether
GPUDirect RDMA is on, and which settings it took from the environment. Silent fallbacks (sockets
instead of RDMA, GPUDirect off, the management interface chosen) show nowhere else.

:func:`parse_nccl_log` reads such a log line by line (any length, streaming) and returns a
:class:`NcclLog`; :func:`nccl_log_findings` turns it into :class:`~clusterenv.findings.Finding`
objects in the same form as ``doctor``. The parser is tolerant: lines of many processes
interleaved, the formats of NCCL 2.5 to 2.30, prefixes added by launchers (``[rank3]:``, ``0: ``,
``[1,0]<stdout>:``, timestamps), lines cut short and arbitrary garbage in between.

Example::

    from clusterenv.nccl_log import nccl_log_findings, read_nccl_log

    log = read_nccl_log("train.log")
    print(log.version, log.transport, [r.bootstrap_interface for r in log.ranks])
    for finding in nccl_log_findings(log, management_interfaces=["eth0"]):
        print(finding)
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterable
from typing import IO, Any

from clusterenv.errors import DiscoveryError
from clusterenv.nccl_log import checks as _checks
from clusterenv.nccl_log.checks import *  # noqa: F403  (every name of checks.__all__ is public here)
from clusterenv.nccl_log.completion import WC_STATUSES, WcStatus
from clusterenv.nccl_log.model import (
    GpuDirect,
    LogMessage,
    NcclLog,
    NetDevice,
    NetPlugin,
    RankInfo,
    SocketEndpoint,
)
from clusterenv.nccl_log.parse import MAX_LINE, parse_lines, parse_stream

__all__ = [
    "MAX_LINE",
    "WC_STATUSES",
    "GpuDirect",
    "LogMessage",
    "NcclLog",
    "NetDevice",
    "NetPlugin",
    "RankInfo",
    "SocketEndpoint",
    "WcStatus",
    "parse_nccl_log",
    "read_nccl_log",
]
__all__ += _checks.__all__


def parse_nccl_log(lines: Iterable[str]) -> NcclLog:
    """Parse the lines of an ``NCCL_DEBUG=INFO`` log (any iterable of strings, streamed).

    Lines without an ``NCCL INFO`` / ``NCCL WARN`` marker are skipped (PyTorch's ``NCCL error``
    lines are kept as errors); nothing in the input makes this raise.

    Args:
        lines: The log, e.g. an open file or ``text.splitlines()``.

    Returns:
        What NCCL reported, e.g. ``NcclLog(version="2.27.5", transports=("IB",), ...)``.
    """
    return parse_lines(lines)


def read_nccl_log(source: str | os.PathLike[str] | IO[str] | IO[bytes]) -> NcclLog:
    """Read and parse an NCCL log from a path (``.gz`` too) or an open file.

    Undecodable bytes are replaced, never fatal.

    Args:
        source: A path such as ``"train.log"``, or an open text or binary file (``sys.stdin``).

    Returns:
        The parsed :class:`NcclLog`.

    Raises:
        DiscoveryError: When the file cannot be opened or read; ``path`` names it.
    """
    if hasattr(source, "read"):
        stream: Any = source
        if isinstance(stream, (io.RawIOBase, io.BufferedIOBase)) or "b" in getattr(
            stream, "mode", ""
        ):
            stream = io.TextIOWrapper(stream, encoding="utf-8", errors="replace")
        name = str(getattr(source, "name", "<stream>"))
        try:
            return parse_stream(stream)
        except (OSError, EOFError) as e:
            raise _unreadable(name, e) from e
    path = os.fspath(source)
    try:
        if str(path).endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
                return parse_stream(handle)
        with open(path, encoding="utf-8", errors="replace") as handle:
            return parse_stream(handle)
    except (OSError, EOFError) as e:
        raise _unreadable(str(path), e) from e


def _unreadable(path: str, error: BaseException) -> DiscoveryError:
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return DiscoveryError(
        f"cannot read NCCL log {path!r}: {reason}; pass a readable file (or '-' for standard "
        "input) holding the output of a run with NCCL_DEBUG=INFO",
        path=path,
    )
