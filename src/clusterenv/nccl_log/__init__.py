"""Reading an ``NCCL_DEBUG=INFO`` log: what NCCL actually did, and what went wrong first.

NCCL tells the truth about a job only in its debug log: which interface it bootstrapped on, which
network it chose (``IB``, ``Socket``, a plugin such as ``Libfabric``), which HCAs, whether
GPUDirect RDMA is on, and which settings it took from the environment. Silent fallbacks (sockets
instead of RDMA, GPUDirect off, the management interface chosen) show nowhere else.

:func:`parse_nccl_log` reads such a log line by line (any length, streaming) and returns a
:class:`NcclLog`; :func:`nccl_log_findings` turns it into :class:`~clusterenv.findings.Finding`
objects in the same form as ``doctor``, the most likely cause first. The parser is tolerant:
lines of many processes interleaved, the formats of NCCL 2.3 to 2.30, prefixes added by
launchers (``[rank3]:``, ``0: ``, ``[1,0]<stdout>:``, timestamps), lines cut short, arbitrary
garbage in between, and logs that hold no NCCL line at all but PyTorch's exception block, its
watchdog, nccl-tests or libibverbs. Every message is recognised by a catalogue generated from
NCCL's source at each release (:func:`lookup_message`).

Example::

    from clusterenv.nccl_log import nccl_log_findings, read_nccl_log

    log = read_nccl_log("train.log")
    print(log.version, log.transport, [r.bootstrap_interface for r in log.ranks])
    for finding in nccl_log_findings(log, management_interfaces=["eth0"]):
        print(finding)

This module only gathers the public names of its submodules.
"""

from __future__ import annotations

from clusterenv.nccl_log import checks as _checks
from clusterenv.nccl_log.catalogue import CatalogueMatch, MessageClass, lookup_message
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
from clusterenv.nccl_log.parse import MAX_LINE
from clusterenv.nccl_log.reader import parse_nccl_log, read_nccl_log

__all__ = [
    "MAX_LINE",
    "WC_STATUSES",
    "CatalogueMatch",
    "GpuDirect",
    "LogMessage",
    "MessageClass",
    "NcclLog",
    "NetDevice",
    "NetPlugin",
    "RankInfo",
    "SocketEndpoint",
    "WcStatus",
    "lookup_message",
    "parse_nccl_log",
    "read_nccl_log",
]
__all__ += _checks.__all__
