"""Findings from a parsed NCCL log, the first failure first (public through
:mod:`clusterenv.nccl_log`).

Each check reads only the :class:`~clusterenv.nccl_log.NcclLog`; what the log cannot know (which
interface is the management one, whether the nodes have RDMA NICs) the caller may say. The
order is causal: the conditions that make a job fail (processes that disagree on a fact NCCL
needs shared, a device list of two fabrics, an interface other hosts cannot reach, a setting
verbs refuses) lead; then the failures in the order the log shows them; then what only follows
from a failure (a flushed request, the framework's error, the watchdog), each noting the
failure it follows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from clusterenv.findings import Finding, codes_of, sort_findings
from clusterenv.nccl_log.completion import CODE as CODE_IB_COMPLETION_ERROR
from clusterenv.nccl_log.completion import completion_findings
from clusterenv.nccl_log.devices import (
    CODE_MIXED_LINK_LAYER,
    CODE_MIXED_RDMA_DRIVER,
    link_layer_checks,
)
from clusterenv.nccl_log.explain import CODE_NCCL_MESSAGE, CODE_NCCL_WARNING, explain_checks
from clusterenv.nccl_log.facts import (
    CODE_MIXED_ENV,
    CODE_MIXED_FACT,
    CODE_MIXED_INTERFACE,
    CODE_MIXED_PLUGIN,
    CODE_MIXED_SUBNET,
    CODE_MIXED_TRANSPORT,
    CODE_MIXED_VERSION,
    compare_facts,
)
from clusterenv.nccl_log.failures import (
    CODE_ADDRESS_FAMILY,
    CODE_CONNECT_TIMEOUT,
    CODE_IB_MEMLOCK,
    CODE_IB_QP_FAILURE,
    CODE_IBVERBS_FAILURE,
    CODE_INIT_UNFINISHED,
    CODE_NCCL_ERROR,
    CODE_NO_INTERFACE,
    CODE_OPEN_FILES,
    CODE_PEER_CLOSED,
    CODE_SHM_EXHAUSTED,
    address_family_checks,
    connect_checks,
    failed_elsewhere,
    fatal_checks,
    ibverbs_checks,
    init_checks,
    peer_closed_checks,
    qp_checks,
    resource_checks,
)
from clusterenv.nccl_log.interfaces import (
    CODE_BOOTSTRAP_MANAGEMENT,
    CODE_SHARED_ADDRESS,
    CODE_SOCKET_CHANNEL_UNROUTABLE,
    interface_checks,
    interface_concern,
    shared_address_checks,
    socket_channel_checks,
)
from clusterenv.nccl_log.model import INTERNAL_NETWORKS, NcclLog
from clusterenv.nccl_log.plugins import (
    CODE_OFI_NO_PROVIDER,
    CODE_PLUGIN_FAILED,
    CODE_PLUGIN_LOAD,
    ofi_checks,
    plugin_checks,
    plugin_load_checks,
)
from clusterenv.nccl_log.transport import (
    CODE_GDR_DISABLED,
    CODE_IB_DISABLED,
    CODE_IB_SETTING_RANGE,
    CODE_SOCKET_FALLBACK,
    gdr_checks,
    setting_checks,
    transport_checks,
)

__all__ = [
    "CODES",
    "CODE_ADDRESS_FAMILY",
    "CODE_BOOTSTRAP_MANAGEMENT",
    "CODE_CONNECT_TIMEOUT",
    "CODE_GDR_DISABLED",
    "CODE_IBVERBS_FAILURE",
    "CODE_IB_COMPLETION_ERROR",
    "CODE_IB_DISABLED",
    "CODE_IB_MEMLOCK",
    "CODE_IB_QP_FAILURE",
    "CODE_IB_SETTING_RANGE",
    "CODE_INIT_UNFINISHED",
    "CODE_MIXED_ENV",
    "CODE_MIXED_FACT",
    "CODE_MIXED_INTERFACE",
    "CODE_MIXED_LINK_LAYER",
    "CODE_MIXED_PLUGIN",
    "CODE_MIXED_RDMA_DRIVER",
    "CODE_MIXED_SUBNET",
    "CODE_MIXED_TRANSPORT",
    "CODE_MIXED_VERSION",
    "CODE_NCCL_ERROR",
    "CODE_NCCL_MESSAGE",
    "CODE_NCCL_WARNING",
    "CODE_NO_INTERFACE",
    "CODE_OFI_NO_PROVIDER",
    "CODE_OPEN_FILES",
    "CODE_PEER_CLOSED",
    "CODE_PLUGIN_FAILED",
    "CODE_PLUGIN_LOAD",
    "CODE_SHARED_ADDRESS",
    "CODE_SHM_EXHAUSTED",
    "CODE_SOCKET_CHANNEL_UNROUTABLE",
    "CODE_SOCKET_FALLBACK",
    "INTERNAL_NETWORKS",
    "interface_concern",
    "nccl_log_findings",
]

#: Every finding code :func:`nccl_log_findings` can return: the ``"nccl-log"`` codes of
#: :data:`clusterenv.findings.CODES`.
CODES: tuple[str, ...] = codes_of("nccl-log")

# The conditions that make a job fail, most fundamental first: these lead whatever line shows
# them (an error among them explains the failures that follow).
_CONDITIONS = (
    CODE_MIXED_LINK_LAYER,  # an error only when a failing ring goes through the odd port
    CODE_MIXED_RDMA_DRIVER,
    CODE_SHARED_ADDRESS,
    CODE_SOCKET_CHANNEL_UNROUTABLE,
    CODE_IB_SETTING_RANGE,
    CODE_MIXED_VERSION,
    CODE_PLUGIN_LOAD,
    CODE_MIXED_PLUGIN,
    CODE_MIXED_TRANSPORT,
    CODE_MIXED_SUBNET,
    CODE_MIXED_FACT,
    CODE_ADDRESS_FAMILY,
    CODE_BOOTSTRAP_MANAGEMENT,
    CODE_SOCKET_FALLBACK,
    CODE_MIXED_INTERFACE,
    CODE_MIXED_ENV,
    CODE_IB_DISABLED,
    CODE_GDR_DISABLED,
    CODE_PLUGIN_FAILED,
)
_LINE = re.compile(r"line ([0-9]{1,12}): ")


def nccl_log_findings(
    log: NcclLog,
    *,
    management_interfaces: Iterable[str] = (),
    cluster_interfaces: Iterable[str] = (),
    expect_rdma: bool = False,
) -> list[Finding]:
    """Findings from an NCCL log, errors first, in the same form as ``doctor``.

    Args:
        log: A parsed log (:func:`~clusterenv.nccl_log.parse_nccl_log`).
        management_interfaces: Interfaces known to be management-only, e.g. ``["eth0"]``.
        cluster_interfaces: Interfaces known to carry the cluster network, e.g. ``["ens1"]``.
        expect_rdma: The nodes have RDMA NICs, so TCP sockets are a fallback, not a choice.

    Returns:
        Findings such as ``Finding("log-socket-fallback", "error", ...)``; empty when the log
        shows nothing wrong. When there are errors, the first is the most likely cause: a
        condition that makes the job fail (processes that disagree, a device list of two
        fabrics) or else the first failure in the log; what only follows from a failure
        (``NCCL error``, the watchdog, a flushed request) comes last and says what it follows.
    """
    ofi = ofi_checks(log)
    plugin_failed = plugin_checks(log)
    reported = frozenset({"plugin"}) if plugin_failed or ofi else frozenset()
    conditions = [
        *transport_checks(log, expect_rdma),
        *shared_address_checks(log),
        *socket_channel_checks(log),
        *interface_checks(log, tuple(management_interfaces), tuple(cluster_interfaces)),
        *compare_facts(log.ranks, connections=_connections(log), banners=log.banners),
        *link_layer_checks(log),
        *setting_checks(log),
        *gdr_checks(log),
        *plugin_failed,
        *plugin_load_checks(log),
        *address_family_checks(log),
    ]
    # a peer that closed its connections follows from that peer's own failure: when that is in
    # the log too, it leads
    closed = peer_closed_checks(log)
    elsewhere = bool(closed) and failed_elsewhere(log)
    if elsewhere:
        closed = [replace(f, evidence=(*f.evidence, "a process of this log failed on its own "
                                       "(the first error above): the close follows from it"))
                  for f in closed]
    failures = [
        *completion_findings(log, consequences=False),
        *ofi,
        *ibverbs_checks(log),
        *resource_checks(log),
        *([] if elsewhere else closed),
        *qp_checks(log),
        *connect_checks(log),
        *explain_checks(log, reported=reported, stopped=False),
        *init_checks(log),
    ]
    consequences = [
        *completion_findings(log, consequences=True),
        *explain_checks(log, reported=reported, stopped=True),
        *fatal_checks(log),
        *(closed if elsewhere else []),
    ]
    return _in_causal_order(conditions, failures, consequences)


def _connections(log: NcclLog) -> str:
    """What the log shows of socket connections between processes: ``"failed"``, ``"worked"``
    (channels through a network were set up and nothing failed) or ``"unknown"``."""
    failed = (any(m not in log.notices for m in log.messages("connect"))
              or log.messages("peer-closed") or log.messages("address-family")
              or any(r.failure and ("bootstrap" in r.failure or "socket" in r.failure)
                     for r in log.ranks)
              or any(m.cls == "torch-store" for m in log.errors))
    if failed:
        return "failed"
    return "worked" if any(r.channel_devices for r in log.ranks) else "unknown"


def _first_line(finding: Finding) -> int:
    lines = [int(m.group(1)) for e in finding.evidence if (m := _LINE.match(e))]
    return min(lines, default=1 << 62)


def _in_causal_order(conditions: list[Finding], failures: list[Finding],
                     consequences: list[Finding]) -> list[Finding]:
    rank: dict[str, int] = {code: i for i, code in enumerate(_CONDITIONS)}
    ordered = sorted(conditions, key=lambda f: rank.get(f.code, len(rank)))
    ordered += sorted(failures, key=_first_line)
    ordered = sort_findings(ordered)
    leader = next((f for f in ordered if f.severity == "error"), None)
    after: list[Finding] = []
    for finding in consequences:
        if leader is not None and finding.severity == "error":
            after.append(replace(finding, evidence=(
                *finding.evidence, f"this follows from the first failure above: {leader.title}")))
        else:
            after.append(finding)
    return sort_findings([*ordered, *after])
