"""Findings from a parsed NCCL log (public through :mod:`clusterenv.nccl_log`).

Each check reads only the :class:`~clusterenv.nccl_log.NcclLog`; what the log cannot know (which
interface is the management one, whether the nodes have RDMA NICs) the caller may say.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence

from clusterenv.findings import Finding, Severity, codes_of, sort_findings
from clusterenv.nccl_log.model import INTERNAL_NETWORKS, LogMessage, NcclLog, RankInfo, parse_ip

__all__ = [
    "CODES",
    "CODE_BOOTSTRAP_MANAGEMENT",
    "CODE_CONNECT_TIMEOUT",
    "CODE_GDR_DISABLED",
    "CODE_IBVERBS_FAILURE",
    "CODE_IB_DISABLED",
    "CODE_IB_MEMLOCK",
    "CODE_IB_QP_FAILURE",
    "CODE_MIXED_ENV",
    "CODE_MIXED_INTERFACE",
    "CODE_MIXED_TRANSPORT",
    "CODE_MIXED_VERSION",
    "CODE_NCCL_ERROR",
    "CODE_NCCL_WARNING",
    "CODE_NO_INTERFACE",
    "CODE_PLUGIN_FAILED",
    "CODE_SHM_EXHAUSTED",
    "CODE_SOCKET_FALLBACK",
    "INTERNAL_NETWORKS",
    "interface_concern",
    "nccl_log_findings",
]

CODE_SOCKET_FALLBACK = "log-socket-fallback"
"""NCCL used TCP sockets (``Using network Socket``) although RDMA devices were there."""
CODE_IB_DISABLED = "log-ib-disabled"
"""Sockets because ``NCCL_IB_DISABLE=1`` or ``NCCL_NET=Socket`` told NCCL so."""
CODE_BOOTSTRAP_MANAGEMENT = "log-bootstrap-management"
"""Bootstrap (or the socket data path) on a management, docker, veth, tunnel, loopback or
link-local interface that other hosts probably cannot reach."""
CODE_MIXED_TRANSPORT = "log-mixed-transport"
"""Ranks chose different networks (``IB`` here, ``Socket`` there): init hangs."""
CODE_MIXED_INTERFACE = "log-mixed-interface"
"""Ranks bootstrapped on differently named interfaces."""
CODE_MIXED_VERSION = "log-mixed-version"
"""Ranks ran different NCCL versions."""
CODE_MIXED_ENV = "log-mixed-env"
"""Ranks reported different values for the same ``NCCL_*`` setting."""
CODE_GDR_DISABLED = "log-gdr-disabled"
"""GPUDirect RDMA off: ``GPU Direct RDMA Disabled for HCA``, or channels without ``/GDRDMA``."""
CODE_IBVERBS_FAILURE = "log-ibverbs-failure"
"""``Call to ibv_open_device failed``, ``Unable to open device``,
``Failed to open libibverbs.so``."""
CODE_PLUGIN_FAILED = "log-plugin-failed"
"""A network plugin (``libnccl-net.so``) was loaded or requested and NCCL used another network."""
CODE_CONNECT_TIMEOUT = "log-connect-timeout"
"""Socket connections failed: ``Connect to ... failed : Connection timed out`` / refused."""
CODE_IB_QP_FAILURE = "log-ib-qp-failure"
"""RDMA connections failed: ``ibv_modify_qp failed``, ``Got completion with error 12``."""
CODE_IB_MEMLOCK = "log-ib-memlock"
"""Memory registration failed: ``ibv_reg_mr ... Cannot allocate memory`` (memlock limit)."""
CODE_SHM_EXHAUSTED = "log-shm-exhausted"
"""``/dev/shm`` too small: ``posix_fallocate failed : No space left on device``."""
CODE_NO_INTERFACE = "log-no-interface"
"""No usable socket interface: ``Bootstrap : no socket interface found``."""
CODE_NCCL_ERROR = "log-nccl-error"
"""An NCCL call failed: an error return from ``init.cc``/``group.cc`` or PyTorch's
``NCCL error in: ...``."""
CODE_NCCL_WARNING = "log-nccl-warning"
"""``NCCL WARN`` lines that no other check explains."""

#: Every finding code :func:`nccl_log_findings` can return: the ``"nccl-log"`` codes of
#: :data:`clusterenv.findings.CODES`.
CODES: tuple[str, ...] = codes_of("nccl-log")

_TUNNELS = ("ip6tnl", "ip6gre", "gretap", "gre", "sit", "tun", "tap", "tunl", "ipip", "vti")
_DOCKER_LIKE = ipaddress.ip_network("172.16.0.0/12")
# Error returns from these top-level sources reach the caller (transport/net_ib/init.cc does not:
# NCCL falls back to sockets). ncclInProgress (7) is how non-blocking communicators say "later".
_FATAL_SOURCES = frozenset({"init.cc", "group.cc", "enqueue.cc", "collectives.cc"})
_PEER = re.compile(r"([0-9A-Fa-f.:]{3,45}(?:%[\w.-]{1,32})?)<([0-9]{1,5})>", re.ASCII)
_MAX_EVIDENCE = 8
_IFNAME_FIX = (
    "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface of the cluster network on "
    "every node, e.g. `export NCCL_SOCKET_IFNAME=ens1` on Runpod Instant Clusters; "
    "`clusterenv env` prints the right value for this host"
)


def interface_concern(
    interface: str,
    address: str | None,
    *,
    management_interfaces: Iterable[str] = (),
    cluster_interfaces: Iterable[str] = (),
    multi_node: bool | None = None,
) -> tuple[Severity, str] | None:
    """Why NCCL sockets on ``interface`` probably cannot reach other hosts, or None.

    The log alone cannot know the provider's layout, so names and ranges give a warning;
    a caller that knows (Runpod: ``eth0`` is management) sharpens it to an error.

    Args:
        interface: Interface name, e.g. ``"eth0"``.
        address: Its address as NCCL printed it, e.g. ``"172.17.0.2"`` or ``"fe80::1%veth0"``.
        management_interfaces: Names known to be management-only, e.g. ``["eth0"]``.
        cluster_interfaces: Names known to carry the cluster network, e.g. ``["ens1"]``; any
            other interface is then wrong.
        multi_node: Whether the job spans nodes (loopback is fine on one node).

    Returns:
        ``(severity, reason)``, e.g. ``("warning", "eth0 (172.17.0.2): an address in
        172.16.0.0/12, ...")``.
    """
    management = set(management_interfaces)
    cluster = set(cluster_interfaces)
    where = f"{interface} ({address})" if address else interface
    if interface in management:
        return "error", f"{where}: a management interface, not routed between the nodes"
    if cluster:
        if interface in cluster:
            return None
        names = ", ".join(sorted(cluster))
        return "error", f"{where}: not a cluster interface (expected {names})"
    ip = parse_ip(address) if address else None
    if interface == "lo" or (ip is not None and ip.is_loopback):
        severity: Severity = "error" if multi_node else "warning"
        return severity, f"{where}: loopback, other hosts cannot reach it"
    if interface.startswith("docker"):
        return "warning", f"{where}: a Docker bridge, other hosts cannot reach it"
    if interface.startswith("veth"):
        return "warning", f"{where}: a veth link of a container network, usually host-local"
    if interface.startswith("virbr"):
        return "warning", f"{where}: a libvirt NAT bridge, other hosts cannot reach it"
    if interface.startswith(_TUNNELS):
        return "warning", f"{where}: a tunnel interface, not the cluster network"
    if ip is not None and ip.is_link_local:
        return "warning", (
            f"{where}: a link-local address, valid on one link only and not routable between "
            "hosts (and IPv6 link-local needs a scope the peers do not share)"
        )
    if ip is not None and ip.version == 4 and ip in _DOCKER_LIKE:
        return "warning", (
            f"{where}: an address in 172.16.0.0/12, the range of Docker bridges and provider "
            "management networks (eth0:172.17.0.2 on a docker bridge is unroutable from other "
            "hosts)"
        )
    return None


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
        shows nothing wrong.
    """
    management = tuple(management_interfaces)
    cluster = tuple(cluster_interfaces)
    findings: list[Finding] = []
    findings += _transport_checks(log, expect_rdma)
    findings += _interface_checks(log, management, cluster)
    findings += _mixed_checks(log)
    findings += _gdr_checks(log)
    findings += _plugin_checks(log)
    findings += _message_checks(log)
    return sort_findings(findings)


def _labels(ranks: Sequence[RankInfo]) -> str:
    shown = ", ".join(r.label for r in ranks[:4])
    return shown + (f" and {len(ranks) - 4} more" if len(ranks) > 4 else "")


def _quote(messages: Sequence[LogMessage]) -> list[str]:
    lines = []
    for m in messages[:_MAX_EVIDENCE]:
        where = f"{m.source} " if m.source and not m.text.startswith(m.source) else ""
        times = f" (x{m.count})" if m.count > 1 else ""
        hosts = f" on {', '.join(m.hosts[:3])}" if m.hosts else ""
        lines.append(f"line {m.first_line}: {where}{m.text}{times}{hosts}")
    return lines


def _unopenable(log: NcclLog) -> list[LogMessage]:
    """``Call to ibv_open_device failed`` / ``Unable to open device``: RDMA seen, not opened."""
    return [m for m in log.messages("ibverbs")
            if "open device" in m.text or "ibv_open_device" in m.text]


def _transport_checks(log: NcclLog, expect_rdma: bool) -> list[Finding]:
    socket_ranks = [r for r in log.ranks if r.transport == "Socket"]
    if not socket_ranks:
        return []
    rdma_ranks = [r for r in log.ranks if r.transport and r.transport != "Socket"]
    unopenable = _unopenable(log)
    hca = log.env.get("NCCL_IB_HCA")
    ib_disable = log.env.get("NCCL_IB_DISABLE", "0") not in ("", "0")
    # The setting that kept NCCL off RDMA, if one did.
    knob = ("NCCL_IB_DISABLE" if ib_disable
            else "NCCL_NET" if log.env.get("NCCL_NET", "").lower() == "socket" else None)
    reasons: list[str] = []
    if unopenable:
        reasons.append("NCCL found RDMA devices it could not open")
    if rdma_ranks:
        others = sorted({str(r.transport) for r in rdma_ranks})
        reasons.append(f"other ranks used {', '.join(others)}")
    if hca and not ib_disable:
        reasons.append(f"NCCL_IB_HCA={hca} asks for RDMA devices")
    if expect_rdma:
        reasons.append("the nodes have RDMA NICs")
    evidence = [f"{len(socket_ranks)} of {len(log.ranks)} processes used network Socket: "
                f"{_labels(socket_ranks)}"]
    evidence += [f"because {reason}" for reason in reasons]
    evidence += _quote(unopenable or list(log.messages("no-device")))
    if knob is not None:
        setting = f"{knob}={log.env[knob]}"
        evidence.append(f"{setting} set by environment")
        if not reasons:
            return [Finding.of(
                CODE_IB_DISABLED,
                f"NCCL used TCP sockets because {setting} disables RDMA",
                tuple(evidence),
                f"if these nodes have InfiniBand/RoCE NICs, unset {knob}: it is "
                "a debugging knob and costs most of the inter-node bandwidth",
            )]
    if not reasons:
        return []
    fix = (
        "make the RDMA devices usable where NCCL runs: pass /dev/infiniband into the container "
        "(--device=/dev/infiniband --cap-add=IPC_LOCK --ulimit memlock=-1), install rdma-core "
        "(libibverbs and the mlx5 provider) in the image, and check that NCCL_IB_HCA names "
        "devices of this host (`clusterenv doctor`)"
    )
    if knob is not None:
        fix = f"unset {knob} (it keeps NCCL off RDMA), then " + fix
    return [Finding.of(
        CODE_SOCKET_FALLBACK,
        f"NCCL fell back to TCP sockets on {len(socket_ranks)} process(es) although RDMA was "
        "expected: inter-node bandwidth is a fraction of what the fabric gives",
        tuple(evidence), fix,
    )]


def _interface_checks(
    log: NcclLog, management: tuple[str, ...], cluster: tuple[str, ...]
) -> list[Finding]:
    if log.multi_node is False:
        return []  # NCCL said nNodes 1: its sockets never leave the host
    # interface -> address -> role -> the processes that used it so
    uses: dict[str, dict[str | None, dict[str, list[RankInfo]]]] = {}
    for rank in log.ranks:
        roles: list[tuple[str, str, str | None]] = []
        if rank.bootstrap_interface:
            roles.append(("bootstrap", rank.bootstrap_interface, rank.bootstrap_address))
        if rank.transport in (None, "Socket"):
            roles += [("NET/Socket", e.interface, e.address) for e in rank.socket_interfaces]
        if rank.oob is not None:
            roles.append(("NET/IB OOB", rank.oob.interface, rank.oob.address))
        for role, name, address in roles:
            by_role = uses.setdefault(name, {}).setdefault(address, {})
            by_role.setdefault(role, []).append(rank)
    findings = []
    for name, addresses in uses.items():
        flagged = []
        for address, by_role in addresses.items():
            concern = interface_concern(
                name, address, management_interfaces=management, cluster_interfaces=cluster,
                multi_node=log.multi_node,
            )
            if concern is not None:
                flagged.append((address, by_role, concern))
        if flagged:
            findings.append(_interface_finding(log, name, flagged))
    return findings


def _interface_finding(
    log: NcclLog,
    name: str,
    flagged: list[tuple[str | None, dict[str, list[RankInfo]], tuple[Severity, str]]],
) -> Finding:
    severity: Severity = "error" if any(c[0] == "error" for _, _, c in flagged) else "warning"
    roles = list(dict.fromkeys(role for _, by_role, _ in flagged for role in by_role))
    title = f"NCCL {' and '.join(roles)} on {flagged[0][2][1]}"
    if len(flagged) > 1:
        title += f" (and {len(flagged) - 1} more address(es) on {name})"
    evidence = [
        f"{role} on {name}:{address or '?'} by {_labels(ranks)}"
        for address, by_role, _ in flagged
        for role, ranks in by_role.items()
    ][: _MAX_EVIDENCE * 2]
    ifname = log.env.get("NCCL_SOCKET_IFNAME")
    if ifname:
        evidence.append(f"NCCL_SOCKET_IFNAME set by environment to {ifname}")
        fix = f"NCCL_SOCKET_IFNAME={ifname} selects {name}: change it; {_IFNAME_FIX}"
    else:
        evidence.append("NCCL_SOCKET_IFNAME not reported as set: NCCL picked the interface")
        fix = _IFNAME_FIX
    return Finding.of(CODE_BOOTSTRAP_MANAGEMENT, title, tuple(evidence), fix, severity=severity)


def _by_value(ranks: Iterable[RankInfo], attribute: str) -> dict[str, list[RankInfo]]:
    groups: dict[str, list[RankInfo]] = {}
    for rank in ranks:
        value = getattr(rank, attribute)
        if value:
            groups.setdefault(str(value), []).append(rank)
    return groups


def _mixed_checks(log: NcclLog) -> list[Finding]:
    findings = []
    transports = _by_value(log.ranks, "transport")
    if len(transports) > 1:
        findings.append(Finding.of(
            CODE_MIXED_TRANSPORT,
            f"ranks chose different networks ({', '.join(transports)}): ncclCommInitRank hangs "
            "or fails when peers disagree",
            tuple(f"{name}: {_labels(ranks)}" for name, ranks in transports.items()),
            "make every node offer the same network: the same RDMA devices and access "
            "(/dev/infiniband, libibverbs), the same NCCL_IB_HCA / NCCL_NET / NCCL_IB_DISABLE "
            "and the same net plugin (libnccl-net.so) or none (NCCL_NET_PLUGIN=none)",
        ))
    interfaces = _by_value(log.ranks, "bootstrap_interface")
    if len(interfaces) > 1:
        findings.append(Finding.of(
            CODE_MIXED_INTERFACE,
            f"ranks bootstrapped on different interfaces ({', '.join(interfaces)})",
            tuple(f"{name}: {_labels(ranks)}" for name, ranks in interfaces.items()),
            "unless the nodes really name their cluster interface differently, " + _IFNAME_FIX,
        ))
    if len(log.versions) > 1:
        versions = _by_value(log.ranks, "version")
        findings.append(Finding.of(
            CODE_MIXED_VERSION,
            f"ranks run different NCCL versions ({', '.join(log.versions)})",
            tuple(f"{name}: {_labels(ranks)}" for name, ranks in versions.items())
            or tuple(log.versions),
            "install the same NCCL (same PyTorch wheel or container image) on every node",
        ))
    differing: list[str] = []
    names = sorted({name for rank in log.ranks for name in rank.env})
    for name in names:
        values: dict[str, list[RankInfo]] = {}
        for rank in log.ranks:
            if name in rank.env:
                values.setdefault(rank.env[name], []).append(rank)
        if len(values) > 1:
            differing += [f"{name}={value!r}: {_labels(ranks)}" for value, ranks in values.items()]
    if differing:
        findings.append(Finding.of(
            CODE_MIXED_ENV,
            "ranks report different values for the same NCCL setting",
            tuple(differing[:_MAX_EVIDENCE * 2]),
            "export the same NCCL_* settings on every node (launchers forward only some "
            "variables; check ~/.nccl.conf and /etc/nccl.conf on each node)",
        ))
    return findings


def _gdr_checks(log: NcclLog) -> list[Finding]:
    rdma = any(r.transport and r.transport != "Socket" for r in log.ranks) or any(
        d.network != "OFI" for d in log.devices
    )
    gdr = log.gpudirect
    if not rdma and not gdr.net_channels:
        return []
    evidence: list[str] = []
    disabled = sorted(name for name, on in gdr.hcas.items() if not on)
    if disabled:
        evidence.append(f"GPU Direct RDMA Disabled for HCA {', '.join(disabled)}")
        title = f"GPUDirect RDMA is disabled for {', '.join(disabled[:4])}" + (
            " and more" if len(disabled) > 4 else "")
        fix = (
            "load the peer-memory module on every node (`modprobe nvidia_peermem`; check "
            "/sys/module/nvidia_peermem), or use the open GPU kernel module so NCCL can use "
            "DMA-BUF; NCCL 2.22.3 and older may miss nvidia_peermem on newer stacks: upgrade NCCL"
        )
    elif gdr.distance_disabled:
        title = (f"NCCL refused GPUDirect RDMA for {len(gdr.distance_disabled)} GPU/NIC pair(s): "
                 "the PCI path between them is longer than NCCL_NET_GDR_LEVEL allows")
        fix = ("place GPU and NIC under the same PCIe switch, or raise NCCL_NET_GDR_LEVEL "
               "(e.g. PHB) after measuring that it helps")
    elif gdr.net_channels and gdr.gdr_channels < gdr.net_channels:
        title = (f"{gdr.net_channels - gdr.gdr_channels} of {gdr.net_channels} receiving "
                 "network channels run without GPUDirect RDMA (no /GDRDMA)")
        fix = ("check that nvidia_peermem is loaded (or DMA-BUF is available) on every node and "
               "that NCCL_NET_GDR_LEVEL is not set lower than the GPU-NIC distance")
    else:
        return []
    evidence += list(gdr.distance_disabled[:_MAX_EVIDENCE])
    if gdr.net_channels:
        evidence.append(f"{gdr.gdr_channels} of {gdr.net_channels} `[receive] via NET/...` "
                        "connections end in /GDRDMA")
    if gdr.dmabuf_gpus:
        gpus = ", ".join(map(str, gdr.dmabuf_gpus))
        evidence.append(f"DMA-BUF is available on GPU devices {gpus}")
    level = log.env.get("NCCL_NET_GDR_LEVEL")
    if level:
        evidence.append(f"NCCL_NET_GDR_LEVEL set by environment to {level}")
    return [Finding.of(CODE_GDR_DISABLED, title, tuple(evidence), fix)]


def _plugin_checks(log: NcclLog) -> list[Finding]:
    findings = []
    for plugin in log.plugins:
        if not plugin.failed:
            continue
        users = [r for r in log.ranks if r.plugin == plugin.name]
        fallbacks = sorted({str(r.transport) for r in users if r.transport in INTERNAL_NETWORKS})
        details = [plugin.library, f"version {plugin.version}" if plugin.version else None,
                   f"provider {plugin.provider}" if plugin.provider else None]
        described = ", ".join(d for d in details if d)
        evidence = [f"plugin {plugin.name}" + (f" ({described})" if described else "")]
        evidence += [f"then used network {', '.join(fallbacks)}: {_labels(users)}"]
        evidence += list(plugin.evidence[:_MAX_EVIDENCE])
        findings.append(Finding.of(
            CODE_PLUGIN_FAILED,
            f"network plugin {plugin.name} was tried and failed; NCCL fell back to its internal "
            f"{'/'.join(fallbacks)} transport",
            tuple(evidence),
            "if this cluster does not need the plugin, skip it with NCCL_NET_PLUGIN=none (or "
            "remove libnccl-net.so from the library path) on every node, so that every node "
            "makes the same choice; if it does need it, fix the plugin's provider setup "
            "(FI_PROVIDER, its libfabric) so it initialises",
        ))
    return findings


def _message_checks(log: NcclLog) -> list[Finding]:
    findings = []
    ibverbs = log.messages("ibverbs")
    if ibverbs:
        if _unopenable(log):
            findings.append(Finding.of(
                CODE_IBVERBS_FAILURE,
                "NCCL saw RDMA devices but could not open them (Call to ibv_open_device failed)",
                tuple(_quote(ibverbs)),
                "give the process the RDMA device nodes: run the container with "
                "--device=/dev/infiniband (or --privileged) and --cap-add=IPC_LOCK, and check "
                "that /dev/infiniband/uverbs* exist and are read-write for this user",
            ))
        else:
            findings.append(Finding.of(
                CODE_IBVERBS_FAILURE,
                "NCCL could not load libibverbs, so it never tried RDMA",
                tuple(_quote(ibverbs)),
                "if the nodes have InfiniBand/RoCE NICs, install rdma-core (libibverbs1 and "
                "ibverbs-providers) in the image; on hosts without RDMA this is expected",
                severity="warning",
            ))
    connects = log.messages("connect")
    if connects:
        failed = [m for m in connects if m in log.warnings]
        peers = sorted({m.group(1) for c in connects for m in _PEER.finditer(c.text)})
        unroutable = [p for p in peers if interface_concern("", p) is not None]
        evidence = _quote(connects)
        if unroutable:
            evidence.append(f"peer addresses that look unroutable: {', '.join(unroutable[:4])}")
        fix = (_IFNAME_FIX + "; " if unroutable else "") + (
            "NCCL opens random TCP ports between nodes: allow all TCP between the cluster "
            "addresses (not only MASTER_PORT), and make sure every node is up and on the same "
            "network"
        )
        findings.append(Finding.of(
            CODE_CONNECT_TIMEOUT,
            "socket connections between ranks failed" if failed
            else "socket connections between ranks were retried",
            tuple(evidence), fix,
            severity="error" if failed else "warning",
        ))
    qp = log.messages("ib-qp")
    if qp:
        evidence = _quote(qp)
        gid = log.env.get("NCCL_IB_GID_INDEX")
        if gid:
            evidence.append(f"NCCL_IB_GID_INDEX set by environment to {gid}")
        findings.append(Finding.of(
            CODE_IB_QP_FAILURE,
            "RDMA connections between ranks failed (queue pair setup or completion errors)",
            tuple(evidence),
            "on RoCE this is usually the GID index: with NCCL 2.21 or newer unset "
            "NCCL_IB_GID_INDEX, on older NCCL set it to the RoCE v2 IPv4 GID (`clusterenv "
            "show`); also check that the ports are ACTIVE, on the same fabric and with the same "
            "MTU on every node (completion error 12 = the peer never answered)",
        ))
    simple: tuple[tuple[str, str, str, str], ...] = (
        ("memlock", CODE_IB_MEMLOCK,
         "RDMA memory registration failed: the locked-memory limit is too low",
         "raise the memlock limit to unlimited where NCCL runs (docker --ulimit memlock=-1; "
         "`* soft memlock unlimited` and `* hard memlock unlimited` in limits.conf, then log in "
         "again) and give the container CAP_IPC_LOCK"),
        ("shm", CODE_SHM_EXHAUSTED,
         "NCCL ran out of shared memory (/dev/shm)",
         "give the container a larger /dev/shm (docker --shm-size=16g, or --ipc=host)"),
        ("no-interface", CODE_NO_INTERFACE,
         "NCCL found no usable socket interface",
         "make NCCL_SOCKET_IFNAME name an interface that is up and has an address on this "
         "host (interface names, not IP addresses; `ip -br addr`)"),
    )
    for kind, code, title, fix in simple:
        messages = log.messages(kind)
        if messages:
            evidence = _quote(messages)
            if kind == "no-interface" and "NCCL_SOCKET_IFNAME" in log.env:
                evidence.append(f"NCCL_SOCKET_IFNAME set by environment to "
                                f"{log.env['NCCL_SOCKET_IFNAME']}")
            findings.append(Finding.of(code, title, tuple(evidence), fix))
    fatal = [m for m in log.errors if m.kind == "nccl-error" or (
        m.source is not None and m.source.rsplit(":", 1)[0] in _FATAL_SOURCES
        and " -> 7 " not in m.text)]
    if fatal:
        findings.append(Finding.of(
            CODE_NCCL_ERROR,
            "an NCCL call failed",
            tuple(_quote(fatal)),
            "the first WARN line before the error usually names the cause; rerun with "
            "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET if it does not",
        ))
    reported_plugin = any(p.failed for p in log.plugins)
    others = [m for m in log.warnings
              if m.kind == "other" or (m.kind == "plugin" and not reported_plugin)]
    if others:
        findings.append(Finding.of(
            CODE_NCCL_WARNING,
            f"NCCL printed {len(others)} warning(s) that no other check explains",
            tuple(_quote(others)),
            "read them in order; the first is usually the cause of the rest",
        ))
    return findings
