"""Findings from the failures NCCL printed: each function reads one kind of failure closely.

ibverbs that could not be loaded or opened, socket connections that failed, a peer that closed
its connection, RDMA queue pairs that did not connect, resources (locked memory, ``/dev/shm``,
an interface), an address NCCL could not parse, and the return chains and wrapped errors that
end an NCCL call. What none of them reads is explained by its class in the catalogue
(:mod:`clusterenv.nccl_log.explain`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from clusterenv.findings import Code, Finding
from clusterenv.nccl_log.catalogue import catalogue_classes, source_class
from clusterenv.nccl_log.cuda import cuda_error, cuda_reading, reading_is_the_operations
from clusterenv.nccl_log.explain import class_fix
from clusterenv.nccl_log.interfaces import (
    IFNAME_FIX,
    PEER,
    finding,
    interface_concern,
    labels,
    nccl_hint,
    network_unused,
    quote,
)
from clusterenv.nccl_log.model import LogMessage, NcclLog, RankInfo

__all__ = [
    "CODE_ADDRESS_FAMILY",
    "CODE_CONNECT_TIMEOUT",
    "CODE_IBVERBS_FAILURE",
    "CODE_IB_MEMLOCK",
    "CODE_IB_QP_FAILURE",
    "CODE_INIT_UNFINISHED",
    "CODE_NCCL_ERROR",
    "CODE_NO_INTERFACE",
    "CODE_OPEN_FILES",
    "CODE_PEER_CLOSED",
    "CODE_SHM_EXHAUSTED",
    "address_family_checks",
    "connect_checks",
    "failed_elsewhere",
    "fatal_checks",
    "ibverbs_checks",
    "init_checks",
    "peer_closed_checks",
    "qp_checks",
    "resource_checks",
    "unopenable",
    "version_at_least",
]

CODE_IBVERBS_FAILURE: Code = "log-ibverbs-failure"
CODE_CONNECT_TIMEOUT: Code = "log-connect-timeout"
CODE_IB_QP_FAILURE: Code = "log-ib-qp-failure"
CODE_IB_MEMLOCK: Code = "log-ib-memlock"
CODE_SHM_EXHAUSTED: Code = "log-shm-exhausted"
CODE_OPEN_FILES: Code = "log-open-files"
CODE_INIT_UNFINISHED: Code = "log-init-unfinished"
CODE_NO_INTERFACE: Code = "log-no-interface"
CODE_NCCL_ERROR: Code = "log-nccl-error"
CODE_PEER_CLOSED: Code = "log-peer-closed"
CODE_ADDRESS_FAMILY: Code = "log-address-family"

_QP = re.compile(
    r"failed with ([0-9]{1,4}) ([^,]{0,80}), on dev (\S{1,64}), curr state (\w{1,12}), next "
    r"state (\w{1,12}), local GID index (-?[0-9]{1,4}), local GID (\S{1,64}), remote GID "
    r"(\S{1,64})", re.ASCII)
_FAMILY = re.compile(r"address (\S{0,80}) with family (-?[0-9]{1,6})|with family (-?[0-9]{1,6})",
                     re.ASCII)
_ROCE_V2 = re.compile(r"::ffff:[0-9]{1,3}(?:\.[0-9]{1,3}){3}$", re.ASCII)


def version_at_least(log: NcclLog, *wanted: int) -> bool | None:
    """Whether every NCCL version in the log is at least ``wanted``; None when none is known."""
    if not log.versions:
        return None
    return all(tuple(int(p) for p in v.split(".")) >= wanted for v in log.versions)


def unopenable(log: NcclLog) -> list[LogMessage]:
    """``Call to ibv_open_device failed`` / ``Unable to open device``: RDMA seen, not opened."""
    return [m for m in log.messages("ibverbs")
            if "open device" in m.text or "ibv_open_device" in m.text]


def ibverbs_checks(log: NcclLog) -> list[Finding]:
    """RDMA devices NCCL could not open, a verbs provider libibverbs could not load, or no
    libibverbs at all; only a note on a job of one node whose channels go through no network
    (:func:`~clusterenv.nccl_log.interfaces.network_unused`), which does not need RDMA."""
    found = _ibverbs(log)
    if found is None or not network_unused(log):
        return [] if found is None else [found]
    return [replace(found, severity="info", evidence=(
        *found.evidence, "one node, and no channel through a network: NCCL keeps its transfers "
        "inside it (peer-to-peer, shared memory), so it does not need RDMA here"))]


def _ibverbs(log: NcclLog) -> Finding | None:
    """The finding of :func:`ibverbs_checks` as the failure's kind makes it, or None."""
    ibverbs = log.messages("ibverbs")
    if not ibverbs:
        return None
    if unopenable(log):
        return finding(
            CODE_IBVERBS_FAILURE, "error",
            "NCCL saw RDMA devices but could not open them (Call to ibv_open_device failed)",
            quote(ibverbs),
            "give the process the RDMA device nodes: run the container with "
            "--device=/dev/infiniband (or --privileged) and --cap-add=IPC_LOCK, and check that "
            "/dev/infiniband/uverbs* exist and are read-write for this user",
        )
    providers = [m for m in ibverbs if m.text.startswith("libibverbs: ")]
    if providers:
        return finding(
            CODE_IBVERBS_FAILURE, "warning",
            "libibverbs could not load the driver (provider) of the RDMA devices, so they are "
            "not usable",
            quote(ibverbs),
            "install the verbs provider of these NICs in the image (rdma-core's ibverbs-providers,"
            " e.g. libmlx5) from the same rdma-core as libibverbs; on hosts without RDMA this is "
            "expected",
        )
    on_ib = {f"{r.host or '?'}:{r.pid}" for r in log.ranks if r.transport == "IB"}
    if on_ib and all(m.processes and set(m.processes) <= on_ib for m in ibverbs):
        return None  # every process that printed it then used NET/IB: libibverbs did load
    return finding(
        CODE_IBVERBS_FAILURE, "warning",
        "NCCL could not load libibverbs, so it never tried RDMA",
        quote(ibverbs),
        "if the nodes have InfiniBand/RoCE NICs, install rdma-core (libibverbs1 and "
        "ibverbs-providers) in the image; on hosts without RDMA this is expected",
    )


def connect_checks(log: NcclLog) -> list[Finding]:
    """Socket connections that failed (a WARN) or were retried (INFO)."""
    connects = log.messages("connect")
    if not connects:
        return []
    failed = [m for m in connects if m not in log.notices]
    peers = sorted({m.group(1) for c in connects for m in PEER.finditer(c.text)})
    unroutable = [p for p in peers if interface_concern("", p) is not None]
    evidence = quote(connects)
    if unroutable:
        evidence.append(f"peer addresses that look unroutable: {', '.join(unroutable[:4])}")
    fix = (IFNAME_FIX + "; " if unroutable else "") + (
        "NCCL opens random TCP ports between nodes: allow all TCP between the cluster addresses "
        "(not only MASTER_PORT), and make sure every node is up and on the same network"
    )
    return [finding(
        CODE_CONNECT_TIMEOUT, "error" if failed else "warning",
        "socket connections between ranks failed" if failed
        else "socket connections between ranks were retried",
        evidence, fix,
    )]


def _closed_processes(log: NcclLog) -> set[str]:
    """The processes (``host:pid``) that saw a peer close or reset a connection."""
    return {key for m in log.messages("peer-closed") for key in m.processes}


def _follows(rank: RankInfo, closed: set[str]) -> bool:
    """Whether the failure of ``rank`` follows from another process's: its chain returned
    ncclRemoteError (a peer's failure or the network), or a peer closed on it."""
    return "(ncclRemoteError)" in (rank.failure or "") or f"{rank.host or '?'}:{rank.pid}" in closed


def failed_elsewhere(log: NcclLog) -> bool:
    """Whether a process of the log failed of its own accord: a return chain that does not
    follow from another process (:func:`_follows`), or a CUDA failure of a process no peer
    closed on (the proxy's failures follow from a peer or the network: not its own). A peer
    that closed a connection is then in the log: its failure leads."""
    closed = _closed_processes(log)
    if any(r.failure and not _follows(r, closed) for r in log.ranks):
        return True
    return any(not set(m.processes) & closed and (m.cls == "cuda" or cuda_error(m.text))
               for m in log.messages("fatal"))


def peer_closed_checks(log: NcclLog) -> list[Finding]:
    """``Connection closed by remote peer`` (or a receive or send reset by the peer): the
    peer's process exited, or (at bootstrap accept, with nothing else failing) a client that is
    not NCCL connected."""
    closed = log.messages("peer-closed")
    if not closed:
        return []
    wrappers = {"peer-closed", "error-trace", "nccl-error", "watchdog", "store", "gloo",
                "last-error"}
    others = [m for m in (*log.warnings, *log.errors) if m.kind not in wrappers]
    at_bootstrap = any(m.kind == "error-trace" and "bootstrap" in (m.source or "")
                       for m in log.errors)
    fixed = version_at_least(log, 2, 30, 7)
    evidence = quote(closed)
    if at_bootstrap and not others and not fixed:
        evidence.append("the return chain goes through bootstrap.cc, and no process reports "
                        "another failure: the peer was not a rank of this job")
        return [finding(
            CODE_PEER_CLOSED, "error",
            "something that is not NCCL connected to the bootstrap port and closed the "
            "connection; NCCL before 2.30.7 fails the whole initialisation on that",
            evidence,
            "upgrade NCCL to 2.30.7 or later (it discards such connections), or keep port "
            "scanners and health checks away from the nodes' ephemeral ports (a firewall rule "
            "for the cluster network)",
        )]
    peers = sorted({m.group(1) for c in closed for m in PEER.finditer(c.text)})
    if peers:
        evidence.append(f"peers that closed: {', '.join(peers[:4])}")
    return [finding(
        CODE_PEER_CLOSED, "error",
        "a peer closed its connection: its process exited or failed first",
        evidence,
        "read the log of the peer (the address above) for its first error: that is the cause; "
        "what this process reports after the close follows from it",
    )]


def qp_checks(log: NcclLog) -> list[Finding]:
    """RDMA connection setup that failed (``Call to ibv_modify_qp failed``), with advice that
    fits the link layer, the NCCL version and the GIDs the message names."""
    qp = log.messages("ib-qp")
    if not qp:
        return []
    evidence = quote(qp)
    gid = log.env.get("NCCL_IB_GID_INDEX")
    if gid:
        evidence.append(f"NCCL_IB_GID_INDEX set by environment to {gid}")
    layers = {d.link_layer for d in log.devices if d.link_layer and d.network != "OFI"}
    if layers:
        evidence.append(f"link layer: {', '.join(sorted(layers))}")
    details = [m.groups() for q in qp if (m := _QP.search(q.text)) is not None]
    rail = [d for d in details if d[3] == "INIT" and d[4] == "RTR" and d[0] == "110"
            and _ROCE_V2.search(d[6]) and _ROCE_V2.search(d[7])]
    recent = version_at_least(log, 2, 21)
    if rail:
        local, remote = rail[0][6], rail[0][7]
        evidence.append(f"INIT->RTR timed out between valid RoCE v2 GIDs {local} and {remote}: "
                        "the GID is not the problem, the path between these two NICs is")
        roce = ("pair the NICs rail by rail: export NCCL_CROSS_NIC=0 on every node so each NIC "
                "connects only to the NIC of the same rail on the peer, and check that the "
                "rails' subnets route to each other (or that each rail is one L2 network)")
    elif gid:
        roce = ("check NCCL_IB_GID_INDEX: it must name a RoCE v2 IPv4 GID on every node "
                "(`clusterenv show`); with NCCL 2.21 or newer unset it and NCCL chooses")
    elif recent:
        roce = ("NCCL 2.21 or newer chooses the RoCE v2 GID itself: check that the ports are "
                "up, on the same subnet or routed, and that PFC/ECN is configured")
    else:
        roce = ("NCCL before 2.21 uses GID index 0 (RoCE v1, link-local) unless told: set "
                "NCCL_IB_GID_INDEX to the RoCE v2 IPv4 GID index of the ports (`clusterenv "
                "show`, e.g. 3)" + ("" if log.versions else "; the log does not say which NCCL "
                                    "this is"))
    ib = "on InfiniBand check that the ports are ACTIVE (`ibstat`) and the subnet manager runs"
    advice = roce if layers == {"RoCE"} else ib if layers == {"IB"} else f"{roce}; {ib}"
    advice += ("; also check that the ports are on the same fabric and have the same MTU on "
               "every node")
    hint = nccl_hint(log, qp)
    if hint is not None:
        evidence.append(f"NCCL's own hint: line {hint.first_line}: {hint.text}")
        advice += f"; NCCL's own hint: {hint.text.removeprefix('HINT:').strip()}"
    return [finding(
        CODE_IB_QP_FAILURE, "error",
        "RDMA connection setup between ranks failed (ibv_modify_qp)",
        evidence,
        advice,
    )]


_RESOURCES: tuple[tuple[str, Code, str, str], ...] = (
    ("memlock", CODE_IB_MEMLOCK,
     "RDMA memory registration failed: the locked-memory limit is too low",
     "raise the memlock limit to unlimited where NCCL runs (docker --ulimit memlock=-1; "
     "`* soft memlock unlimited` and `* hard memlock unlimited` in limits.conf, then log in "
     "again) and give the container CAP_IPC_LOCK"),
    ("shm", CODE_SHM_EXHAUSTED,
     "NCCL ran out of shared memory (/dev/shm)",
     "give the container a larger /dev/shm (docker --shm-size=16g, or --ipc=host)"),
    ("open-files", CODE_OPEN_FILES,
     "a process ran out of file descriptors (Too many open files): its sockets failed",
     "raise the open-files limit where NCCL runs (`ulimit -n`; docker --ulimit nofile=N:N, "
     "LimitNOFILE= of a systemd unit, the limits a scheduler propagates): NCCL opens sockets per "
     "peer and channel, and a large job needs more than Linux's default soft limit of 1024"),
    ("no-interface", CODE_NO_INTERFACE,
     "NCCL found no usable socket interface",
     "make NCCL_SOCKET_IFNAME name an interface that is up and has an address on this host "
     "(interface names, not IP addresses; `ip -br addr`)"),
)


def resource_checks(log: NcclLog) -> list[Finding]:
    """What a host lacked: locked memory for RDMA, ``/dev/shm``, file descriptors, a usable
    interface."""
    findings = []
    for kind, code, title, fix in _RESOURCES:
        messages = log.messages(kind)
        if messages:
            evidence = quote(messages)
            if kind == "no-interface" and "NCCL_SOCKET_IFNAME" in log.env:
                evidence.append(f"NCCL_SOCKET_IFNAME set by environment to "
                                f"{log.env['NCCL_SOCKET_IFNAME']}")
            findings.append(finding(code, "error", title, evidence, fix))
    return findings


def address_family_checks(log: NcclLog) -> list[Finding]:
    """``family N is neither AF_INET nor AF_INET6``: ranks on different network implementations
    (a handle that is not a socket address), or an NCCL_SOCKET_IFNAME that matched nothing."""
    messages = log.messages("address-family")
    if not messages:
        return []
    evidence = quote(messages)
    families = {m.group(2) or m.group(3) for q in messages if (m := _FAMILY.search(q.text))}
    plugins = sorted({r.plugin for r in log.ranks if r.plugin}
                     | {r.transport for r in log.ranks
                        if r.transport and r.transport not in ("IB", "Socket")})
    networks = {r.transport for r in log.ranks if r.transport}
    ifname = log.env.get("NCCL_SOCKET_IFNAME")
    found = [r for r in log.ranks if r.bootstrap_interface or r.socket_interfaces]
    if plugins or len(networks) > 1 or families & {"0"}:
        if plugins:
            evidence.append(f"network plugin in the log: {', '.join(plugins)}")
        if len(networks) > 1:
            evidence.append(f"processes use different networks: {', '.join(sorted(networks))}")
        if "0" in families:
            evidence.append("family 0: the bytes NCCL received are not a socket address at all "
                            "(another network's connection handle)")
        return [finding(
            CODE_ADDRESS_FAMILY, "error",
            "ranks run different network implementations: a peer's connection handle is not a "
            "socket address (neither AF_INET nor AF_INET6)",
            evidence,
            "load the same network plugin on every node (the same libnccl-net.so, found the "
            "same way), or none anywhere (NCCL_NET_PLUGIN=none); NCCL_SOCKET_IFNAME does not "
            "fix this",
        )]
    if ifname and not found:
        evidence.append(f"NCCL_SOCKET_IFNAME set by environment to {ifname}, and no process "
                        "printed a `Bootstrap : Using` line: it matched no interface")
        return [finding(
            CODE_ADDRESS_FAMILY, "error",
            f"NCCL_SOCKET_IFNAME={ifname} matched no interface, so NCCL had no address to use",
            evidence,
            "make NCCL_SOCKET_IFNAME name an interface that exists, is up and has an address on "
            "every node (`ip -br addr`; a leading `=` means exact names, `^` excludes)",
        )]
    return [finding(
        CODE_ADDRESS_FAMILY, "error",
        "NCCL received an address that is neither IPv4 nor IPv6",
        evidence,
        "load the same network plugin (or none) on every node; if NCCL_SOCKET_IFNAME is set, "
        "make it name an interface that exists on every node",
    )]


def init_checks(log: NcclLog) -> list[Finding]:
    """Processes whose ``ncclCommInitRank`` printed ``Init START`` and then neither ``Init
    COMPLETE`` nor an error: where a job that hangs in initialisation stops (or where the log
    ends): a warning when other processes finished it, else a note."""
    if not log.init_unfinished:
        return []
    ranks = {f"{r.host or '?'}:{r.pid}": r for r in log.ranks}
    evidence = []
    for key, line in log.init_unfinished[:4]:
        rank = ranks.get(key)
        evidence.append(f"line {line}: Init START of {labels([rank]) if rank else key}, and "
                        "after it neither Init COMPLETE nor an error")
    if len(log.init_unfinished) > 4:
        evidence.append(f"and {len(log.init_unfinished) - 4} more processes")
    present = {r.rank for r in log.ranks if r.rank is not None}
    if log.nranks and len(present) < log.nranks:
        evidence.append(f"the communicator has {log.nranks} ranks and the log holds "
                        f"{len(present)} of them: the others' logs say whether they started")
    processes = sum(1 for r in log.ranks if r.pid is not None)
    if log.init_complete:
        evidence.append(f"{log.init_complete} other processes finished it (Init COMPLETE): they "
                        "wait for these")
    # Others that finished make it the stop of a hang (ranks finish together); none finished
    # may as well be a log cut while the job ran (a pasted excerpt)
    return [finding(
        CODE_INIT_UNFINISHED, "warning" if log.init_complete else "info",
        f"ncclCommInitRank started and did not finish in this log ({len(log.init_unfinished)} "
        f"of the {processes} processes in it)",
        evidence,
        "if the job hangs here, the ranks wait for each other: check that every rank started "
        "and called ncclCommInitRank with the same unique id, and that the nodes reach each "
        "other on the bootstrap interface (`clusterenv preflight` on every node); if the log "
        "was cut while the job ran, this is only where it had got to",
    )]


def fatal_checks(log: NcclLog) -> list[Finding]:
    """An NCCL call that failed: a return chain after which the process did not go on, a CUDA
    or proxy failure, or a framework's report of an NCCL error."""
    chains = [r for r in log.ranks if r.failure]
    fatal = [*log.messages("fatal"), *(m for m in log.errors if m.kind == "nccl-error")]
    if not chains and not fatal:
        return []
    # the first failure, before those that follow from another process's (a remote error, a
    # peer that closed): in a log of one node after another, the cause may come later
    closed = _closed_processes(log)
    chains.sort(key=lambda r: (_follows(r, closed), r.failure_line or 0))
    fatal.sort(key=lambda m: (bool(set(m.processes) & closed), m.first_line))
    evidence = [f"line {r.failure_line}: {r.failure} ({labels([r])}; nothing after it shows "
                "NCCL carried on)" for r in chains[:4]]
    evidence += quote(fatal)
    lines: list[tuple[bool, int, str, tuple[str, ...]]] = [
        (_follows(r, closed), r.failure_line or 0, r.failure or "", (f"{r.host or '?'}:{r.pid}",))
        for r in chains]
    lines += [(bool(set(m.processes) & closed), m.first_line, m.text, tuple(m.processes))
              for m in fatal]
    _, first_line, first, first_processes = min(lines)
    fix = ("the first WARN line before the error usually names the cause; rerun with "
           "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET if it does not")
    # What NCCL was doing when it failed, the reading that says most: the file of the deepest
    # step of the first chain (transport/nvls.cc: NVLink SHARP), the CUDA error of the first
    # failure line (out of memory, invalid device ordinal), the class of that line (a CUDA
    # call), else the warning the failing process printed last before its chain
    first_message = fatal[0] if fatal else None
    steps = [r.failure.split(" ", 1)[0] for r in chains[:1] if r.failure]
    # a CUDA error of the process or the GPU (out of memory, an invalid device) says more than
    # the file it happened in; one of the operation (not supported) says less
    error = cuda_error(first_message.text) if first_message is not None else None
    cuda = cuda_reading(error) if error is not None else None
    by_error = [] if error is None or cuda is None else [
        (f"CUDA's error: {error.name} ({error.text}): {cuda[0]}", cuda[1])]
    places = [(step, cls) for step in steps if (cls := source_class(step))]
    by_place = [(f"where it failed: {step}: {cls.meaning}", reading)
                for step, cls in places if (reading := class_fix(cls))]
    readings: list[tuple[str, str] | None] = []
    if by_error and error is not None and not reading_is_the_operations(error):
        readings += by_error
        if places:
            evidence.append(f"where it failed: {places[0][0]}: {places[0][1].meaning}")
    readings += [*by_place, *by_error]
    if first_message is not None and (cls := catalogue_classes().get(first_message.cls or "")):
        reading = class_fix(cls)
        readings.append((f"what failed: {cls.meaning}", reading) if reading else None)
    readings.append(_warning_before(log, first_processes, first_line))
    found = next((r for r in readings if r is not None), None)
    if found is not None:
        evidence.append(found[0])
        fix = found[1]
    return [finding(CODE_NCCL_ERROR, "error", f"an NCCL call failed: {first[:120]}", evidence,
                    fix)]


def _warning_before(log: NcclLog, processes: tuple[str, ...],
                    line: int) -> tuple[str, str] | None:
    """The warning the first failing process (``processes``, ``host:pid`` keys) printed last
    before its first failure (at ``line``, a chain or a failure message): the one NCCL's advice
    points at, named rather than described; None when it printed none before it."""
    before = [m for m in log.warnings
              if m.first_line < line and not set(processes).isdisjoint(m.processes)]
    if not before:
        return None
    last = max(before, key=lambda m: m.first_line)
    return (f"the warning before it in that process: line {last.first_line}: "
            f"{last.text[:160]}",
            f"the warning that process printed before the error (line {last.first_line}) is the "
            "likely cause: see its finding; rerun with NCCL_DEBUG=INFO "
            "NCCL_DEBUG_SUBSYS=INIT,NET if it does not explain it")
