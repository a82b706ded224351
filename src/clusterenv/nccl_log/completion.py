"""RDMA completion errors in an NCCL log: what the ibverbs status says, per link layer.

NCCL's IB transport polls its completion queues and, for a work completion whose status is not
``IBV_WC_SUCCESS``, prints (``src/transport/net_ib.cc``, ``net_ib/*.cc`` since 2.23)::

    NET/IB : Got completion from peer 10.1.1.2<46045> with error 12, opcode 0, len 0,
        vendor err 129 (Recv)
    NET/IB: Got completion from peer 10.1.1.2<46045> with status=12 opcode=0 len=0
        vendor err 129 (Recv) localGid ... hca mlx5_0

(one line each in the log).
(NCCL 2.4-2.6 print ``Got completion with error 12, ...`` without the peer.) The number is
``wc->status``, a value of ``enum ibv_wc_status`` (rdma-core ``libibverbs/verbs.h``; the text
of each is ``ibv_wc_status_str()``, ``libibverbs/enum_strs.c``). ``vendor err`` is
``wc->vendor_err``, the HCA's own syndrome (mlx5: ``mlx5_err_cqe.vendor_err_synd``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from clusterenv.findings import Code, Finding
from clusterenv.nccl_log.interfaces import nccl_hint
from clusterenv.nccl_log.model import LogMessage, NcclLog

__all__ = [
    "CODE", "WC_STATUSES", "WcStatus", "change_event", "completion_findings", "parse_completion",
]

#: The finding code of :func:`completion_findings`.
CODE: Code = "log-ib-completion-error"


@dataclass(frozen=True, slots=True)
class WcStatus:
    """One ``enum ibv_wc_status`` value and what it means for NCCL.

    Attributes:
        number: The value, e.g. ``12``.
        name: The enum name, e.g. ``"IBV_WC_RETRY_EXC_ERR"``.
        text: ``ibv_wc_status_str()``, e.g. ``"transport retry counter exceeded"``.
        cause: What usually produces it under NCCL.
        consequence: Whether it only follows an earlier error (a flushed request), so that the
            first other error is the cause.
    """

    number: int
    name: str
    text: str
    cause: str
    consequence: bool = False


_GDR = ("with GPUDirect RDMA this is, per NCCL's maintainers, PCIe ACS or the IOMMU redirecting "
        "the NIC's peer-to-peer reads and writes of GPU memory")
_PEER = "the peer process failed or stalled first: read the peer's log for the first error"

#: ``enum ibv_wc_status`` of rdma-core ``libibverbs/verbs.h``, with the ``ibv_wc_status_str()``
#: texts of ``libibverbs/enum_strs.c`` (the same strings are in libibverbs.so.1 of rdma-core 44).
WC_STATUSES: dict[int, WcStatus] = {s.number: s for s in (
    WcStatus(1, "IBV_WC_LOC_LEN_ERR", "local length error",
             "a message longer than the receive buffer: usually different MTUs (or NCCL "
             "versions) on the two nodes"),
    WcStatus(2, "IBV_WC_LOC_QP_OP_ERR", "local QP operation error",
             "the queue pair was set up with attributes the HCA rejects (check the NCCL_IB_* "
             "settings)"),
    WcStatus(3, "IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error",
             "an internal HCA error"),
    WcStatus(4, "IBV_WC_LOC_PROT_ERR", "local protection error",
             "the NIC was refused access to a registered buffer; " + _GDR),
    WcStatus(5, "IBV_WC_WR_FLUSH_ERR", "Work Request Flushed Error",
             "requests flushed because the queue pair had already failed", consequence=True),
    WcStatus(6, "IBV_WC_MW_BIND_ERR", "memory management operation error",
             "a memory window operation failed"),
    WcStatus(7, "IBV_WC_BAD_RESP_ERR", "bad response error",
             "an unexpected response from the peer's HCA"),
    WcStatus(8, "IBV_WC_LOC_ACCESS_ERR", "local access error",
             "the NIC was refused access to a registered buffer; " + _GDR),
    WcStatus(9, "IBV_WC_REM_INV_REQ_ERR", "remote invalid request error",
             "the peer rejected the request: usually a message larger than it accepts "
             "(different MTUs or NCCL versions)"),
    WcStatus(10, "IBV_WC_REM_ACCESS_ERR", "remote access error",
             "the peer's NIC was refused access to its buffer; " + _GDR + " (on the peer)"),
    WcStatus(11, "IBV_WC_REM_OP_ERR", "remote operation error",
             "the peer could not complete the operation; " + _PEER, consequence=True),
    WcStatus(12, "IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded",
             "the peer never acknowledged: the packets do not get through (the fabric path), "
             "or the peer is gone"),
    WcStatus(13, "IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded",
             "receiver not ready: the peer had no receive posted in time; " + _PEER),
    WcStatus(14, "IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error", "an internal HCA error"),
    WcStatus(15, "IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request",
             "the peer rejected an RDMA read"),
    WcStatus(16, "IBV_WC_REM_ABORT_ERR", "aborted error",
             "the peer aborted the operation; " + _PEER, consequence=True),
    WcStatus(17, "IBV_WC_INV_EECN_ERR", "invalid EE context number", "an internal HCA error"),
    WcStatus(18, "IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state",
             "an internal HCA error"),
    WcStatus(19, "IBV_WC_FATAL_ERR", "fatal error",
             "the HCA hit a fatal error: check `dmesg` and the firmware"),
    WcStatus(20, "IBV_WC_RESP_TIMEOUT_ERR", "response timeout error",
             "the peer did not answer an RDMA read in time: the fabric path, or the peer is "
             "gone"),
    WcStatus(21, "IBV_WC_GENERAL_ERR", "general error",
             "the HCA reported a general error: check `dmesg` and the firmware"),
    WcStatus(22, "IBV_WC_TM_ERR", "TM error", "a tag-matching error"),
    WcStatus(23, "IBV_WC_TM_RNDV_INCOMPLETE", "TM software rendezvous",
             "a tag-matching rendezvous did not complete"),
)}
_BY_NAME = {s.name: s for s in WC_STATUSES.values()}
# the mlx5 syndrome that NCCL's maintainers tie to ACS/IOMMU when it comes with status 5 and
# GPUDirect RDMA on InfiniBand (NVIDIA/nccl issues on "error 5, vendor err 249")
_VENDOR_ACS = 249

_STATUS = re.compile(
    r"[Cc]ompletion (?:from peer (\S{1,80}) )?with (?:error |status[ =])"
    r"(?:[A-Za-z][\w ]{0,60}\()?([0-9]{1,3})",
    re.ASCII,
)
_VENDOR = re.compile(r"vendor[ _]err[ =]?([0-9]{1,6})", re.ASCII)
_HCA = re.compile(r"\bhca[ =]([\w.-]{1,64})", re.ASCII)
_WC_NAME = re.compile(r"IBV_WC_[A-Z_]{2,30}", re.ASCII)


def parse_completion(text: str) -> tuple[int | None, int | None, str | None, str | None] | None:
    """``(status, vendor err, peer, hca)`` of a completion error message, or None.

    Example: ``"NET/IB : Got completion from peer 10.1.1.2<46045> with error 12, opcode 0,
    len 0, vendor err 129 (Recv)"`` -> ``(12, 129, "10.1.1.2<46045>", None)``.
    """
    match = _STATUS.search(text)
    number: int | None = None
    peer: str | None = None
    if match is not None:
        peer, number = match.group(1), int(match.group(2))
    else:
        name = _WC_NAME.search(text)
        if name is None or name.group(0) not in _BY_NAME:
            return None
        number = _BY_NAME[name.group(0)].number
    vendor = _VENDOR.search(text)
    hca = _HCA.search(text)
    return (number, int(vendor.group(1)) if vendor else None, peer,
            hca.group(1) if hca else None)


def _link_layers(log: NcclLog, hcas: Sequence[str]) -> set[str]:
    """Link layers of the HCAs named in the errors, else of every IB device in the log."""
    named = {d.link_layer for d in log.devices if d.name in hcas and d.link_layer}
    return named or {d.link_layer for d in log.devices if d.link_layer and d.network != "OFI"}


def _gdr_on(log: NcclLog) -> bool:
    gdr = log.gpudirect
    return gdr.gdr_channels > 0 or any(gdr.hcas.values())


def _fabric_fix(layers: set[str], log: NcclLog) -> str:
    roce = ("on RoCE: the GID index (with NCCL 2.21 or newer leave NCCL_IB_GID_INDEX unset; "
            "older versions need the RoCE v2 IPv4 GID, `clusterenv show`), routing between the "
            "nodes' subnets, and lossless Ethernet (PFC/ECN) on every switch port")
    ib = ("on InfiniBand: the ports (`ibstat`: State Active, the same rate everywhere), cables "
          "and the subnet manager (routing, partitions)")
    parts = [roce] if layers == {"RoCE"} else [ib] if layers == {"IB"} else [roce, ib]
    text = "check the path between the two nodes: " + "; ".join(parts)
    text += "; and that the peer process was still alive (its log)"
    if "NCCL_IB_TIMEOUT" in log.env or "NCCL_IB_RETRY_CNT" in log.env:
        text += "; NCCL_IB_TIMEOUT/NCCL_IB_RETRY_CNT only change how long it waits"
    return text


_ACS_FIX = (
    "confirm by running once with GPUDirect RDMA off (NCCL_NET_GDR_LEVEL=LOC, the `0` of older "
    "NCCL versions): if that works, disable PCIe ACS on the PCIe switches (a BIOS setting, or "
    "`setpci` on the switch ports at every boot) and put the IOMMU in pass-through (kernel "
    "parameter `iommu=pt`), as NCCL's troubleshooting guide describes"
)


def _acs_flush(status: WcStatus | None, vendor: set[int], layers: set[str], log: NcclLog,
               first: bool) -> bool:
    """A flushed request (status 5) that is the ACS/IOMMU signature: on InfiniBand with
    GPUDirect RDMA, with the mlx5 syndrome 249 or as the first failure in the log (nothing
    failed before it, so it flushed nothing else's requests)."""
    return (status is not None and status.number == 5 and _gdr_on(log) and "IB" in layers
            and (_VENDOR_ACS in vendor or first))


def _cause_and_fix(status: WcStatus | None, vendor: set[int], layers: set[str],
                   log: NcclLog, first: bool) -> tuple[str, str]:
    gdr = _gdr_on(log)
    if status is None:
        return "an RDMA transfer failed", _fabric_fix(layers, log)
    if status.number in (4, 8, 10) or _acs_flush(status, vendor, layers, log, first):
        cause = ("GPUDirect RDMA broken by PCIe ACS or the IOMMU" if gdr else
                 "the NIC could not access a registered buffer")
        return cause, _ACS_FIX if gdr else (
            "check the memory registration limits (memlock unlimited) and that the same NCCL "
            "runs on every node; if GPUDirect RDMA is in use, " + _ACS_FIX)
    if status.number in (12, 20):
        return "the fabric path between the nodes", _fabric_fix(layers, log)
    if status.number == 13:
        return "the peer was not ready to receive", (
            "find the peer (the address in the message) and read its log: it crashed, hung or "
            "fell behind before this error")
    if status.number in (1, 9):
        return "a message size mismatch", (
            "use the same MTU on the RDMA ports of every node (`ibv_devinfo`: active_mtu) and the "
            "same NCCL version on every node")
    if status.consequence:
        return "a consequence of an earlier failure", (
            "this status only follows another error: look for the first completion error or "
            "NCCL WARN on any node, which names the cause")
    return status.text, _fabric_fix(layers, log) + "; check `dmesg` on both nodes"


def _earliest_failure(log: NcclLog) -> int:
    lines = [m.first_line for m in (*log.warnings, *log.errors)
             if m.kind not in ("error-trace", "nccl-error")]
    return min(lines, default=0)


# NCCL's async-event thread (src/transport/net_ib.cc "NET/IB : %s:%d Got async event : %s",
# 2.29's ".../common.cc" "Got non-fatal async event: %s(%d)"): ibv_event_type_str's text
_ASYNC = re.compile(r"Got (?:non-fatal )?async event ?: ?([^()]{1,80})", re.ASCII)
# The events that report a failure (rdma-core libibverbs/enum_strs.c, ibv_event_type_str):
# IBV_EVENT_CQ_ERR, _QP_FATAL, _QP_REQ_ERR, _QP_ACCESS_ERR, _PATH_MIG_ERR, _DEVICE_FATAL,
# _PORT_ERR, _SRQ_ERR, _WQ_FATAL; the others (port active, LID, P_Key, SM or GID table change,
# client reregistration, ...) report a change, not a failure
_FAILURE_EVENTS = frozenset({
    "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
    "local access violation work queue error", "path migration request error",
    "local catastrophic error", "port error", "SRQ catastrophic error", "WQ fatal",
})


def change_event(text: str) -> bool:
    """Whether ``text`` is NCCL printing an RDMA device's async event that reports a change,
    not a failure (``NET/IB : mlx5_0:1 Got async event : GID table change``)."""
    match = _ASYNC.search(text)
    return match is not None and match.group(1).strip() not in _FAILURE_EVENTS


def _async_events(log: NcclLog, before: int) -> list[LogMessage]:
    """The async events reporting a failure of an RDMA device that NCCL printed before line
    ``before``."""
    return sorted((m for m in log.warnings if m.first_line < before
                   and (match := _ASYNC.search(m.text)) is not None
                   and match.group(1).strip() in _FAILURE_EVENTS),
                  key=lambda m: m.first_line)


def _event(text: str) -> str:
    match = _ASYNC.search(text)
    return match.group(1).strip() if match else text


def completion_findings(log: NcclLog, *, consequences: bool | None = None) -> list[Finding]:
    """One error finding per ibverbs status in ``Got completion ... with error N`` lines, the
    statuses that are causes before those that only follow another error.

    Args:
        log: The parsed log.
        consequences: Only the statuses that follow another failure (True), only the others
            (False), or all (None).
    """
    groups: dict[int | None, list[tuple[LogMessage, tuple[int | None, int | None, str | None,
                                                             str | None]]]] = {}
    for message in log.messages("ib-completion"):
        parsed = parse_completion(message.text)
        if parsed is not None:
            groups.setdefault(parsed[0], []).append((message, parsed))
    earliest = _earliest_failure(log)
    judged = []
    for number, entries in groups.items():
        status = WC_STATUSES.get(number) if number is not None else None
        vendor = {p[1] for _, p in entries if p[1] is not None}
        hcas = sorted({p[3] for _, p in entries if p[3]})
        first = min(m.first_line for m, _ in entries) <= earliest
        follows = bool(status and status.consequence) and not _acs_flush(
            status, vendor, _link_layers(log, hcas), log, first)
        if consequences is None or consequences == follows:
            judged.append((follows, min(m.first_line for m, _ in entries), number, entries, first))
    findings = []
    for _, _, number, entries, first in sorted(judged, key=lambda item: item[:2]):
        status = WC_STATUSES.get(number) if number is not None else None
        vendor = {p[1] for _, p in entries if p[1] is not None}
        hcas = sorted({p[3] for _, p in entries if p[3]})
        peers = sorted({p[2] for _, p in entries if p[2]})
        layers = _link_layers(log, hcas)
        cause, fix = _cause_and_fix(status, vendor, layers, log, first)
        name = f"{status.name}, {status.text!r}" if status else "an unknown status"
        evidence = [f"status {number} = {name} (rdma-core libibverbs/verbs.h): "
                    f"{status.cause if status else 'not an ibv_wc_status value'}"]
        if vendor:
            evidence.append(f"vendor err {', '.join(map(str, sorted(vendor)))} (the HCA's own "
                            "error syndrome)")
        evidence.append("link layer: " + (", ".join(sorted(layers)) or "unknown (no NET/IB "
                                          "device list in the log)")
                        + ("; GPUDirect RDMA in use" if _gdr_on(log) else ""))
        if hcas:
            evidence.append(f"HCA: {', '.join(hcas[:4])}")
        if peers:
            evidence.append(f"peers: {', '.join(peers[:4])}" + (" ..." if len(peers) > 4 else ""))
        for setting in ("NCCL_IB_GID_INDEX", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT",
                        "NCCL_NET_GDR_LEVEL"):
            if setting in log.env:
                evidence.append(f"{setting} set by environment to {log.env[setting]}")
        evidence += [f"line {m.first_line}: {m.text}" + (f" (x{m.count})" if m.count > 1 else "")
                     for m, _ in entries[:4]]
        events = _async_events(log, min(m.first_line for m, _ in entries))
        if events:
            evidence += [f"before it: line {m.first_line}: {m.text}" for m in events[:2]]
            fix = (f"an RDMA port reported an event first ({_event(events[0].text)}): a link that "
                   "went down or an HCA that failed makes every queue pair on it fail, so check "
                   "that port first (`ibstat`: State and Physical state, the cable, the switch "
                   f"port's log, `dmesg` for the HCA); then: {fix}")
        hint = nccl_hint(log, [m for m, _ in entries])
        if hint is not None:
            evidence.append(f"NCCL's own hint: line {hint.first_line}: {hint.text}")
            fix = f"{fix}; NCCL's own hint: {hint.text.removeprefix('HINT:').strip()}"
        label = f"error {number}" if number is not None else "an error"
        findings.append(Finding.of(
            CODE,
            f"RDMA completion {label} ({status.name if status else 'unknown'}): most likely "
            f"{cause}",
            tuple(evidence), fix,
        ))
    return findings

