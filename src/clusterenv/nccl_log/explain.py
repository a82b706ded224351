"""What the catalogue says about the messages no specific check reads.

Every warning or failure line the catalogue knows gets its class's reading: what the code that
printed it does, what usually causes it, and what it usually follows; one finding per class.
How severe it is follows from what happened after it: a message after which NCCL returned an
error (by its source) in a process that then stopped is an error, one NCCL carried on after is a
warning, and the failures PyTorch, Gloo or a benchmark report are errors (the job stopped).
Warnings the catalogue does not know stay ``log-nccl-warning``, quoted in order.
"""

from __future__ import annotations

import re

from clusterenv.findings import Code, Finding, Severity
from clusterenv.nccl_log.catalogue import MessageClass, catalogue_classes, lookup_message
from clusterenv.nccl_log.completion import change_event
from clusterenv.nccl_log.cuda import cuda_error, cuda_reading
from clusterenv.nccl_log.interfaces import finding, quote
from clusterenv.nccl_log.model import LogMessage, NcclLog

__all__ = [
    "CODE_NCCL_MESSAGE", "CODE_NCCL_WARNING", "EXPLAINED_KINDS", "class_fix", "explain_checks",
]

CODE_NCCL_MESSAGE: Code = "log-nccl-message"
CODE_NCCL_WARNING: Code = "log-nccl-warning"
#: Kinds of message that no specific check reads (the others have one in
#: :mod:`clusterenv.nccl_log.failures` and :mod:`clusterenv.nccl_log.transport`).
EXPLAINED_KINDS = frozenset({"other", "watchdog", "store", "gloo", "last-error"})
# Classes whose messages report that the job stopped.
_STOPPED = frozenset({"torch-nccl", "torch-watchdog", "torch-store", "gloo", "benchmark"})
# What to do, per class, beyond its causes (classes not here: look at the causes).
_FIXES = {
    "p2p": "confirm with NCCL_P2P_DISABLE=1 (NCCL then copies through host memory); for a "
           "lasting fix enable peer access between the GPUs: IOMMU in pass-through "
           "(`iommu=pt`), PCIe ACS off on the switches, or P2P passthrough in the VM",
    "shm": "give the container a larger /dev/shm (docker --shm-size=16g) or --ipc=host, and run "
           "the processes of one node in one IPC namespace",
    "ipc-socket": "run the processes of one node in one container (or with --ipc=host and "
                  "--pid=host)",
    "nvls": "check that nvidia-fabricmanager runs (`systemctl status nvidia-fabricmanager`) and "
            "matches the driver; NCCL_NVLS_ENABLE=0 skips NVLink SHARP",
    "mnnvl": "check the IMEX service and that /dev/nvidia-caps-imex-channels is in the "
             "container; NCCL_MNNVL_ENABLE=0 skips multi-node NVLink",
    "cuda": "check `nvidia-smi` and the kernel log (Xid errors) on that node, and that the "
            "driver is at least as new as the CUDA runtime of the wheel",
    "device": "give each rank its own GPU: torch.cuda.set_device(local_rank) before "
              "init_process_group, or device_id=torch.device('cuda', local_rank)",
    "tcp-offload": "check the links of the NICs it names and that the plugin's receive daemon "
                   "runs on every node; repeated timeouts slow the job down",
    "version": "make the versions agree: the same NCCL on every node (the same wheel or image; "
               "torch.cuda.nccl.version() shows what a process loaded), a driver at least as "
               "new as the CUDA it was built for, and a network plugin built for this NCCL",
    "config": "check the setting it names against NCCL's documentation of this version, or unset "
              "it to go back to NCCL's default",
    "usage": "check that every rank calls the same collectives in the same order with the same "
             "counts and types (TORCH_DISTRIBUTED_DEBUG=DETAIL makes PyTorch check each "
             "collective across ranks) and that NCCL_PROTO and NCCL_ALGO are alike on every rank",
    "torch-watchdog": "find the rank that stopped first (its own log, the flight recorder "
                      "dumps: `clusterenv hang`); raise the timeout only when the work is "
                      "really that long",
    "torch-store": "check that MASTER_ADDR:MASTER_PORT is reachable from every node and that the "
                   "process hosting the store (rank 0 or the launcher) is alive",
    "gloo": "set GLOO_SOCKET_IFNAME to the cluster interface on every node",
}


def _continues(message: LogMessage) -> bool:
    match = lookup_message(message.text)
    return match is not None and match.returns == "continues"


# A system or verbs call that failed, read by its error (glibc's strerror of errno):
# - a memory registration with the HCA (ibv_reg_mr, ibv_reg_mr_iova2, ibv_reg_dmabuf_mr)
#   refused for another reason than memory (EFAULT, EINVAL, EOPNOTSUPP, EPERM; ENOMEM is the
#   locked-memory limit, read by its own check): NCCL registers GPU memory for GPUDirect RDMA,
#   which needs a peer-memory client or DMA-BUF;
# - SYSCHECK's "Call to %s failed : %s" (src/include/checks.h) of bind(2) with the two errors
#   bind returns for the address NCCL chose: EADDRINUSE, EADDRNOTAVAIL.
_REGISTRATION = (
    "the RDMA driver refused to register memory ({error}): with GPUDirect RDMA that memory is "
    "the GPU's, which the HCA can only map through nvidia_peermem or DMA-BUF",
    "load nvidia_peermem on every node (`modprobe nvidia_peermem`; /sys/module/nvidia_peermem), "
    "or use the open GPU kernel module so NCCL can use DMA-BUF; to confirm, run once with "
    "GPUDirect RDMA off (NCCL_NET_GDR_LEVEL=LOC)")
_CALLS: tuple[tuple[re.Pattern[str], dict[str, tuple[str, str]]], ...] = (
    (re.compile(r"ibv_reg_\w{0,20}mr\w{0,20}\b.{0,200}?(Bad address|Invalid argument|"
                r"Operation not supported|Operation not permitted)", re.ASCII),
     dict.fromkeys(("Bad address", "Invalid argument", "Operation not supported",
                    "Operation not permitted"), _REGISTRATION)),
    (re.compile(r"Call to bind failed ?: ?(Address already in use|Cannot assign requested "
                r"address)", re.ASCII),
     {"Address already in use": (
         "bind(2) failed with EADDRINUSE: another socket on this host holds that port",
         "the port NCCL binds is taken (NCCL's sockets take a free port unless one is fixed, "
         "as NCCL_COMM_ID's is): a second job, or a process left from an earlier run, holds "
         "it: end that process (`ss -ltnp` names it) or give each job its own port"),
      "Cannot assign requested address": (
         "bind(2) failed with EADDRNOTAVAIL: the address is not one of this host's",
         "NCCL was given an address to listen on that this host does not have: NCCL_COMM_ID "
         "names another host's address on the rank that creates the root (or an interface "
         "lost its address); use the root host's own address")}),
)


def _call(group: list[LogMessage]) -> tuple[str, str] | None:
    """``(evidence, fix)`` when a message of ``group`` is a call whose error says what went
    wrong (``Call to ibv_reg_mr_iova2 failed with error Bad address``, ``Call to bind failed :
    Address already in use``), or None."""
    for message in group:
        for pattern, readings in _CALLS:
            if (match := pattern.search(message.text)) is not None:
                evidence, fix = readings[match.group(1)]
                return evidence.format(error=match.group(1)), fix
    return None


def _cuda(group: list[LogMessage]) -> tuple[str, str] | None:
    """``(evidence, fix)`` from the first CUDA error with a reading that a message of
    ``group`` carries (``CUDA error: out of memory``), or None."""
    for message in group:
        error = cuda_error(message.text)
        if error is not None and (reading := cuda_reading(error)) is not None:
            return f"CUDA's error: {error.name} ({error.text}): {reading[0]}", reading[1]
    return None


def _own_causes(group: list[LogMessage], cls: MessageClass | None) -> str:
    """The causes the catalogue reviewed for a message of ``group`` itself, narrower than its
    class's (``Bootstrap Root : mismatch in rank count``: two jobs on one root, not the
    network); "" when none has its own."""
    for message in group:
        match = lookup_message(message.text) or lookup_message(message.text, warning=False)
        if match is not None and match.causes and (cls is None or match.causes != cls.causes):
            return match.causes
    return ""


def class_fix(cls: MessageClass) -> str | None:
    """The usual causes of a failure of ``cls`` and what to do about it, when the class says
    more than "read the messages" (the classes of a node's own resources: NVLS, P2P, shared
    memory, the GPU); None otherwise."""
    fix = _FIXES.get(cls.name)
    return f"usual causes: {cls.causes}; {fix}" if fix else None


# How PyTorch prints a WorkNCCL (ProcessGroupNCCL.cpp, its operator<<, which the watchdog's
# timeout message quotes): "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=..., ..."
_WORK = re.compile(r"WorkNCCL\(SeqNum=([0-9]{1,12}), OpType=(\w{1,40})", re.ASCII)


def _first(timeouts: list[LogMessage], log: NcclLog) -> tuple[str, str] | None:
    """What the watchdog's timeouts say when every one is of the ranks' first collective
    (``SeqNum=1``): no rank got through any, so none fell behind and none was slow; the ranks
    never exchanged data. NCCL 2.22 and later connect the channels between ranks at that first
    collective (``NCCL_RUNTIME_CONNECT``, 1 by default: src/init.cc), after ``Init
    COMPLETE``. ``(evidence, fix)``, or None."""
    seqs = {int(m.group(1)) for t in timeouts if (m := _WORK.search(t.text)) is not None}
    if seqs != {1}:
        return None
    evidence = ("every timeout is of the first collective (SeqNum=1): no rank got through any, "
                "so the ranks never exchanged data")
    version = tuple(int(p) for p in (log.version or "0.0").split(".")[:2] if p.isdigit())
    if version >= (2, 22):
        evidence += (f"; NCCL {log.version} connects the channels between ranks at that first "
                     "collective (NCCL_RUNTIME_CONNECT=1, its default), after Init COMPLETE")
    return evidence, ("look at the data path, not at a slow rank: between nodes the RDMA path "
                      "(the ports' state, the RoCE GID and routing) or the interfaces NCCL's "
                      "socket transport uses; inside a node peer-to-peer between the GPUs (PCIe "
                      "ACS or the IOMMU blocking it: NCCL_P2P_DISABLE=1 confirms); rerun with "
                      "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET on every rank to see which "
                      "connection stops")


def _behind(timeouts: list[LogMessage]) -> tuple[str, str] | None:
    """What the watchdog's timeouts of several ranks say when they differ: each rank reports
    the oldest collective it is waiting for (its sequence number counts the collectives it
    called), so a rank at a lower number fell behind; two operations at one number are ranks
    that called different collectives. ``(evidence, fix)``, or None when they agree."""
    works: dict[tuple[int, str], list[int]] = {}
    for message in timeouts:
        if (match := _WORK.search(message.text)) is not None:
            works.setdefault((int(match.group(1)), match.group(2)), []).append(message.first_line)
    if len(works) < 2:
        return None
    seen = "; ".join(f"SeqNum {seq} ({op}) at line{'s' if len(lines) > 1 else ''} "
                     f"{', '.join(map(str, lines[:4]))}"
                     for (seq, op), lines in sorted(works.items()))
    evidence = f"the ranks time out in different collectives: {seen}"
    lowest = min(works)
    if len({seq for seq, _ in works}) == 1:
        return evidence, (f"the ranks called different collectives as their collective "
                          f"{lowest[0]}: find where their code paths part (TORCH_DISTRIBUTED_"
                          "DEBUG=DETAIL checks each collective across ranks)")
    return evidence, (f"the rank at SeqNum {lowest[0]} (line {works[lowest][0]}) fell behind "
                      "the others, or took another code path: read its log first")


def _label(cls: MessageClass | None, name: str) -> str:
    return cls.meaning if cls else name


def _severity(messages: list[LogMessage], log: NcclLog, cls: str | None) -> Severity:
    if all(change_event(m.text) for m in messages):
        return "info"  # an RDMA port reported a change (GID table, LID, SM), not a failure
    if cls in _STOPPED:
        # a failure PyTorch raised, unless every message is a warning it goes on after (Gloo
        # falling back to loopback: a multi-node job then fails, one node works)
        return "warning" if all(_continues(m) for m in messages) else "error"
    failed = {f"{r.host or '?'}:{r.pid}" for r in log.ranks if r.failure and r.pid is not None}
    has_chains = any(m.kind == "error-trace" for m in log.errors)
    for message in messages:
        if not message.fails or message.carried_on:
            continue  # NCCL went on after it, in every process that printed it
        if any(p in failed for p in message.processes) or not has_chains:
            return "error"  # it failed the call, and nothing shows NCCL got past it
    return "warning"


def explain_checks(log: NcclLog, *, reported: frozenset[str] = frozenset(),
                   stopped: bool | None = None) -> list[Finding]:
    """One finding per catalogue class among the messages no specific check reads, and one for
    the warnings the catalogue does not know.

    Args:
        log: The parsed log.
        reported: Further kinds already reported by a specific check (``"plugin"`` when the
            plugin's failure was).
        stopped: Only the classes that report the job stopped (PyTorch, Gloo, nccl-tests:
            True), only the others (False), or all (None).
    """
    kinds = EXPLAINED_KINDS | ({"plugin"} - reported)
    messages = [m for m in (*log.warnings, *log.errors) if m.kind in kinds
                and (stopped is None or (m.cls in _STOPPED) == stopped)]
    by_class: dict[str, list[LogMessage]] = {}
    unknown: list[LogMessage] = []
    for message in sorted(messages, key=lambda m: m.first_line):
        if message.cls:
            by_class.setdefault(message.cls, []).append(message)
        else:
            unknown.append(message)
    classes = catalogue_classes() if by_class else {}
    findings = []
    for name, group in by_class.items():
        cls = classes.get(name)
        evidence = quote(group)
        origins = list(dict.fromkeys(m.origin for m in group if m.origin))[:3]
        evidence += [f"printed by {origin}" for origin in origins]
        if cls is not None:
            evidence.append(f"what it is about: {cls.meaning}")
            if cls.consequence_of:
                evidence.append("it usually follows: " + ", ".join(cls.consequence_of).replace(
                    "peer-exit", "another process exiting first"))
        own = _own_causes(group, cls)
        causes = own or (cls.causes if cls else "see the message")
        fix = f"usual causes: {causes}" + (f"; {_FIXES[name]}" if name in _FIXES and not own
                                           else "")
        if all(change_event(m.text) for m in group):
            fix = ("an RDMA port reported a change, not a failure, and NCCL carries on; only if "
                   "RDMA errors follow, check what changed on that port (an address added to or "
                   "removed from a RoCE interface changes its GIDs, a subnet manager event its "
                   "LID)")
        if (refused := _call(group)) is not None:
            evidence.append(refused[0])
            fix = f"{refused[1]}; otherwise, {fix}"
        if (cuda := _cuda(group)) is not None:
            # the CUDA error the message carries says more than its class (the watchdog's
            # "CUDA error: an illegal memory access was encountered" is a kernel that faulted)
            evidence.append(cuda[0])
            fix = f"{cuda[1]}; otherwise, {fix}"
        if name == "torch-watchdog" and (behind := _behind(group) or _first(group, log)):
            evidence.append(behind[0])
            fix = f"{behind[1]}; {fix}"
        findings.append(finding(
            CODE_NCCL_MESSAGE, _severity(group, log, name),
            f"NCCL {_label(cls, name)}: {group[0].text[:120]}", evidence, fix,
        ))
    if unknown:
        findings.append(finding(
            CODE_NCCL_WARNING, "warning",
            f"NCCL printed {len(unknown)} warning(s) that are not in the catalogue of its "
            "messages",
            quote(unknown),
            "read them in order; the first is usually the cause of the rest",
        ))
    return findings
