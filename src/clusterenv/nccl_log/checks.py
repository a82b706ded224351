"""Findings from a parsed NCCL log (public through :mod:`clusterenv.nccl_log`).

Each check reads only the :class:`~clusterenv.nccl_log.NcclLog`; what the log cannot know (which
interface is the management one, whether the nodes have RDMA NICs) the caller may say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from clusterenv.findings import Finding, codes_of, sort_findings
from clusterenv.nccl_log import completion, interfaces
from clusterenv.nccl_log.completion import completion_findings
from clusterenv.nccl_log.interfaces import (
    IFNAME_FIX,
    MAX_EVIDENCE,
    PEER,
    finding,
    interface_checks,
    interface_concern,
    labels,
    quote,
    socket_channel_checks,
)
from clusterenv.nccl_log.model import INTERNAL_NETWORKS, LogMessage, NcclLog, RankInfo

__all__ = [
    "CODES",
    "CODE_BOOTSTRAP_MANAGEMENT",
    "CODE_CONNECT_TIMEOUT",
    "CODE_GDR_DISABLED",
    "CODE_IBVERBS_FAILURE",
    "CODE_IB_COMPLETION_ERROR",
    "CODE_IB_DISABLED",
    "CODE_IB_MEMLOCK",
    "CODE_IB_QP_FAILURE",
    "CODE_IB_SETTING_RANGE",
    "CODE_MIXED_ENV",
    "CODE_MIXED_INTERFACE",
    "CODE_MIXED_LINK_LAYER",
    "CODE_MIXED_TRANSPORT",
    "CODE_MIXED_VERSION",
    "CODE_NCCL_ERROR",
    "CODE_NCCL_WARNING",
    "CODE_NO_INTERFACE",
    "CODE_OFI_NO_PROVIDER",
    "CODE_PLUGIN_FAILED",
    "CODE_SHM_EXHAUSTED",
    "CODE_SOCKET_CHANNEL_UNROUTABLE",
    "CODE_SOCKET_FALLBACK",
    "INTERNAL_NETWORKS",
    "interface_concern",
    "nccl_log_findings",
]

CODE_SOCKET_FALLBACK = "log-socket-fallback"
"""NCCL used TCP sockets (``Using network Socket``) although RDMA devices were there."""
CODE_IB_DISABLED = "log-ib-disabled"
"""Sockets because ``NCCL_IB_DISABLE=1`` or ``NCCL_NET=Socket`` told NCCL so."""
CODE_BOOTSTRAP_MANAGEMENT = interfaces.CODE_BOOTSTRAP_MANAGEMENT
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
"""RDMA connection setup failed: ``Call to ibv_modify_qp failed``."""
CODE_IB_COMPLETION_ERROR = completion.CODE
"""An RDMA transfer failed: ``Got completion from peer ... with error 12``; the ibverbs status
says why (:data:`WC_STATUSES`)."""
CODE_IB_SETTING_RANGE = "log-ib-setting-range"
"""``NCCL_IB_RETRY_CNT``/``TIMEOUT``/``SL``/``TC`` outside what verbs accepts."""
CODE_MIXED_LINK_LAYER = "log-mixed-link-layer"
"""RoCE ports among InfiniBand ports (or the reverse) in one ``NET/IB : Using`` list."""
CODE_SOCKET_CHANNEL_UNROUTABLE = interfaces.CODE_SOCKET_CHANNEL_UNROUTABLE
"""Channels ``via NET/Socket/N`` go through an interface other hosts cannot reach."""
CODE_OFI_NO_PROVIDER = "log-ofi-no-provider"
"""libfabric found no usable device for a provider (``fi_getinfo: provider efa output empty
list``) in a process that needed it."""
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

# Error returns from these top-level sources reach the caller (transport/net_ib/init.cc does not:
# NCCL falls back to sockets). ncclInProgress (7) is how non-blocking communicators say "later".
_FATAL_SOURCES = frozenset({"init.cc", "group.cc", "enqueue.cc", "collectives.cc"})


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
        specific failure (an RDMA completion status, a device NCCL could not open, an
        unreachable interface) before what it leads to (``NCCL error``, a failed proxy).
    """
    management = tuple(management_interfaces)
    cluster = tuple(cluster_interfaces)
    findings: list[Finding] = []
    findings += completion_findings(log)
    findings += _transport_checks(log, expect_rdma)
    findings += socket_channel_checks(log)
    findings += interface_checks(log, management, cluster)
    findings += _mixed_checks(log)
    findings += _link_layer_checks(log)
    findings += _setting_checks(log)
    findings += _gdr_checks(log)
    findings += _ofi_checks(log)
    findings += _plugin_checks(log)
    findings += _message_checks(log)
    rank = {code: i for i, code in enumerate(_CAUSE_ORDER)}
    return sort_findings(sorted(findings, key=lambda f: rank.get(f.code, len(rank))))


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
                f"{labels(socket_ranks)}"]
    evidence += [f"because {reason}" for reason in reasons]
    evidence += quote(unopenable or list(log.messages("no-device")))
    if knob is not None:
        setting = f"{knob}={log.env[knob]}"
        evidence.append(f"{setting} set by environment")
        if not reasons:
            return [finding(
                CODE_IB_DISABLED, "info",
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
    return [finding(
        CODE_SOCKET_FALLBACK, "error",
        f"NCCL fell back to TCP sockets on {len(socket_ranks)} process(es) although RDMA was "
        "expected: inter-node bandwidth is a fraction of what the fabric gives",
        tuple(evidence), fix,
    )]


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
        findings.append(finding(
            CODE_MIXED_TRANSPORT, "error",
            f"ranks chose different networks ({', '.join(transports)}): ncclCommInitRank hangs "
            "or fails when peers disagree",
            tuple(f"{name}: {labels(ranks)}" for name, ranks in transports.items()),
            "make every node offer the same network: the same RDMA devices and access "
            "(/dev/infiniband, libibverbs), the same NCCL_IB_HCA / NCCL_NET / NCCL_IB_DISABLE "
            "and the same net plugin (libnccl-net.so) or none (NCCL_NET_PLUGIN=none)",
        ))
    interfaces = _by_value(log.ranks, "bootstrap_interface")
    if len(interfaces) > 1:
        findings.append(finding(
            CODE_MIXED_INTERFACE, "warning",
            f"ranks bootstrapped on different interfaces ({', '.join(interfaces)})",
            tuple(f"{name}: {labels(ranks)}" for name, ranks in interfaces.items()),
            "unless the nodes really name their cluster interface differently, " + IFNAME_FIX,
        ))
    if len(log.versions) > 1:
        versions = _by_value(log.ranks, "version")
        findings.append(finding(
            CODE_MIXED_VERSION, "error",
            f"ranks run different NCCL versions ({', '.join(log.versions)})",
            tuple(f"{name}: {labels(ranks)}" for name, ranks in versions.items())
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
            differing += [f"{name}={value!r}: {labels(ranks)}" for value, ranks in values.items()]
    if differing:
        findings.append(finding(
            CODE_MIXED_ENV, "warning",
            "ranks report different values for the same NCCL setting",
            tuple(differing[:MAX_EVIDENCE * 2]),
            "export the same NCCL_* settings on every node (launchers forward only some "
            "variables; check ~/.nccl.conf and /etc/nccl.conf on each node)",
        ))
    return findings


def _gdr_checks(log: NcclLog) -> list[Finding]:
    # Sockets never use GPUDirect RDMA: judge only processes on an RDMA network (NET/IB,
    # NET/IBext*, plugins), and only channels through one (the parser counts no NET/Socket one).
    gdr = log.gpudirect
    known = [r.transport for r in log.ranks if r.transport]
    rdma = any(t != "Socket" for t in known) or (
        not known and any(d.network != "OFI" for d in log.devices))
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
    evidence += list(gdr.distance_disabled[:MAX_EVIDENCE])
    if gdr.net_channels:
        evidence.append(f"{gdr.gdr_channels} of {gdr.net_channels} `[receive] via NET/...` "
                        "connections end in /GDRDMA")
    if gdr.dmabuf_gpus:
        gpus = ", ".join(map(str, gdr.dmabuf_gpus))
        evidence.append(f"DMA-BUF is available on GPU devices {gpus}")
    level = log.env.get("NCCL_NET_GDR_LEVEL")
    if level:
        evidence.append(f"NCCL_NET_GDR_LEVEL set by environment to {level}")
    return [finding(CODE_GDR_DISABLED, "warning", title, tuple(evidence), fix)]


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
        evidence += [f"then used network {', '.join(fallbacks)}: {labels(users)}"]
        evidence += list(plugin.evidence[:MAX_EVIDENCE])
        findings.append(finding(
            CODE_PLUGIN_FAILED, "warning",
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
            findings.append(finding(
                CODE_IBVERBS_FAILURE, "error",
                "NCCL saw RDMA devices but could not open them (Call to ibv_open_device failed)",
                tuple(quote(ibverbs)),
                "give the process the RDMA device nodes: run the container with "
                "--device=/dev/infiniband (or --privileged) and --cap-add=IPC_LOCK, and check "
                "that /dev/infiniband/uverbs* exist and are read-write for this user",
            ))
        else:
            findings.append(finding(
                CODE_IBVERBS_FAILURE, "warning",
                "NCCL could not load libibverbs, so it never tried RDMA",
                tuple(quote(ibverbs)),
                "if the nodes have InfiniBand/RoCE NICs, install rdma-core (libibverbs1 and "
                "ibverbs-providers) in the image; on hosts without RDMA this is expected",
            ))
    connects = log.messages("connect")
    if connects:
        failed = [m for m in connects if m in log.warnings]
        peers = sorted({m.group(1) for c in connects for m in PEER.finditer(c.text)})
        unroutable = [p for p in peers if interface_concern("", p) is not None]
        evidence = quote(connects)
        if unroutable:
            evidence.append(f"peer addresses that look unroutable: {', '.join(unroutable[:4])}")
        fix = (IFNAME_FIX + "; " if unroutable else "") + (
            "NCCL opens random TCP ports between nodes: allow all TCP between the cluster "
            "addresses (not only MASTER_PORT), and make sure every node is up and on the same "
            "network"
        )
        findings.append(finding(
            CODE_CONNECT_TIMEOUT, "error" if failed else "warning",
            "socket connections between ranks failed" if failed
            else "socket connections between ranks were retried",
            tuple(evidence), fix,
        ))
    qp = log.messages("ib-qp")
    if qp:
        evidence = quote(qp)
        gid = log.env.get("NCCL_IB_GID_INDEX")
        if gid:
            evidence.append(f"NCCL_IB_GID_INDEX set by environment to {gid}")
        layers = {d.link_layer for d in log.devices if d.link_layer and d.network != "OFI"}
        if layers:
            evidence.append(f"link layer: {', '.join(sorted(layers))}")
        roce = ("on RoCE this is usually the GID index: with NCCL 2.21 or newer unset "
                "NCCL_IB_GID_INDEX, on older NCCL set it to the RoCE v2 IPv4 GID (`clusterenv "
                "show`)")
        ib = ("on InfiniBand check that the ports are ACTIVE (`ibstat`) and the subnet manager "
              "runs")
        advice = roce if layers == {"RoCE"} else ib if layers == {"IB"} else f"{roce}; {ib}"
        findings.append(finding(
            CODE_IB_QP_FAILURE, "error",
            "RDMA connection setup between ranks failed (ibv_modify_qp)",
            tuple(evidence),
            advice + "; also check that the ports are on the same fabric and have the same MTU "
            "on every node",
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
            evidence = quote(messages)
            if kind == "no-interface" and "NCCL_SOCKET_IFNAME" in log.env:
                evidence.append(f"NCCL_SOCKET_IFNAME set by environment to "
                                f"{log.env['NCCL_SOCKET_IFNAME']}")
            findings.append(finding(code, "error", title, tuple(evidence), fix))
    # A CUDA call that failed inside NCCL, or the proxy thread giving up on a connection
    # ("[Proxy Service 3] Failed to execute operation Connect", "Error encountered progressing
    # operation"), ends the communicator as surely as an error return does.
    fatal = [*log.messages("fatal"), *(m for m in log.errors if m.kind == "nccl-error" or (
        m.source is not None and m.source.rsplit(":", 1)[0] in _FATAL_SOURCES
        and " -> 7 " not in m.text))]
    if fatal:
        first = min(fatal, key=lambda m: m.first_line)
        findings.append(finding(
            CODE_NCCL_ERROR, "error",
            f"an NCCL call failed: {first.text[:120]}",
            tuple(quote(sorted(fatal, key=lambda m: m.first_line))),
            "the first WARN line before the error usually names the cause; rerun with "
            "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET if it does not",
        ))
    reported_plugin = any(p.failed for p in log.plugins) or bool(_ofi_checks(log))
    others = [m for m in log.warnings
              if m.kind == "other" or (m.kind == "plugin" and not reported_plugin)]
    if others:
        findings.append(finding(
            CODE_NCCL_WARNING, "warning",
            f"NCCL printed {len(others)} warning(s) that no other check explains",
            tuple(quote(others)),
            "read them in order; the first is usually the cause of the rest",
        ))
    return findings


def _link_layer_checks(log: NcclLog) -> list[Finding]:
    """RoCE ports among InfiniBand ports (or the reverse) in one process's ``NET/IB : Using``."""
    by_label = {d.label: d for d in log.devices}
    findings = []
    seen: set[tuple[str, ...]] = set()
    for rank in log.ranks:
        devices = [by_label[label] for label in rank.devices if label in by_label]
        devices = [d for d in devices if d.link_layer in ("IB", "RoCE") and d.network != "OFI"]
        layers: dict[str, list[str]] = {}
        for device in devices:
            layers.setdefault(str(device.link_layer), []).append(device.name)
        if len(layers) < 2:
            continue
        # the minority is the odd one out; on a tie, RoCE (a front-end port on IB compute nodes)
        odd = min(layers, key=lambda layer: (len(layers[layer]), layer != "RoCE"))
        keep = [d for d in devices if d.link_layer != odd]
        names = tuple(layers[odd])
        if names in seen:
            continue
        seen.add(names)
        odd_index = {d.index for d in devices if d.link_layer == odd}
        failing = [m for kind in ("ib-completion", "ib-qp", "fatal") for m in log.messages(kind)]
        via_odd = any(network != "Socket" and index in odd_index
                      for r in log.ranks for network, index in r.channel_devices)
        other = "InfiniBand" if odd == "RoCE" else "RoCE"
        evidence = [f"{rank.label} listed " + ", ".join(d.label for d in devices),
                    f"{', '.join(names)}: {odd} ({'Ethernet' if odd == 'RoCE' else 'InfiniBand'}"
                    f" link layer) among {other} ports"]
        if via_odd:
            evidence.append("channels go through it: `via NET/.../"
                            f"{'|'.join(map(str, sorted(i for i in odd_index if i is not None)))}`")
        evidence += quote(failing)
        hca = log.env.get("NCCL_IB_HCA")
        if hca:
            evidence.append(f"NCCL_IB_HCA set by environment to {hca}")
        wanted = ",".join(f"{d.name}:{d.port}" if d.port is not None else d.name for d in keep)
        findings.append(finding(
            CODE_MIXED_LINK_LAYER, "error" if failing and via_odd else "warning",
            f"NCCL uses {', '.join(names)} ({odd}) together with {other} ports: they are "
            "different fabrics, and rings through them fail or crawl",
            tuple(evidence),
            f"select the ports of one fabric: export NCCL_IB_HCA=={wanted} (the leading `=` "
            "means exactly these names) on every node" + (
                f", instead of NCCL_IB_HCA={hca}" if hca else ""),
        ))
    return findings


def _setting_checks(log: NcclLog) -> list[Finding]:
    """``NCCL_IB_RETRY_CNT set by environment to 15.``: queue-pair settings out of range."""
    # one range table for doctor and nccl-log; imported here, so `import clusterenv.nccl_log`
    # stays light
    from clusterenv.nccl.lint import ib_setting_problem  # noqa: PLC0415

    findings = []
    for name, value in sorted(log.env.items()):
        problem = ib_setting_problem(name, value)
        if problem is not None:
            severity, reason, fix = problem
            findings.append(finding(
                CODE_IB_SETTING_RANGE, severity, reason,
                (f"{name} set by environment to {value}",), fix,
            ))
    return findings


def _ofi_checks(log: NcclLog) -> list[Finding]:
    """``fi_getinfo: provider efa output empty list`` in a process whose libfabric plugin then
    found no provider: no usable EFA (or other) device in that process."""
    empty = log.messages("ofi-no-provider")
    if not empty:
        return []
    if any(p.provider for p in log.plugins) or any(p.used for p in log.plugins):
        return []  # another provider was selected: probing this one was normal
    trouble = [m for m in (*log.warnings, *log.notices, *log.errors)
               if ("NET/OFI" in m.text or "ofi" in (m.source or "").lower())
               and m.kind != "ofi-no-provider"]
    fatal = [m for m in log.errors if m.kind in ("error-trace", "nccl-error")]
    providers = sorted({m.group(1) for e in empty
                        if (m := _FI_PROVIDER.search(e.text)) is not None})
    named = ", ".join(providers) or "the requested provider"
    failed = bool(trouble or fatal or log.messages("fatal"))
    evidence = quote(empty) + quote(trouble)
    if not trouble:
        evidence.append("no `NET/OFI Selected Provider` line: the plugin found no provider")
    return [finding(
        CODE_OFI_NO_PROVIDER, "error" if failed else "warning",
        f"libfabric found no usable {named} device in this process (fi_getinfo returned nothing)"
        + (", so the aws-ofi-nccl plugin could not open an endpoint" if failed else ""),
        tuple(evidence),
        "on an instance with EFA, give the process the EFA devices: on Kubernetes request "
        "vpc.amazonaws.com/efa resources, in Docker pass the /dev/infiniband/uverbs* devices; "
        f"check with `fi_info -p {providers[0] if providers else 'efa'}` in the same container "
        "(it must list the devices), and that the process loads the EFA installer's libfabric, "
        "not another one. On a host without EFA, do not load the plugin (NCCL_NET_PLUGIN=none)",
    )]


_FI_PROVIDER = re.compile(r"provider ([\w;.-]{1,64})", re.ASCII)

# Among errors, the most likely cause first: specific failures before what they lead to.
_CAUSE_ORDER = (
    CODE_MIXED_LINK_LAYER,  # an error only when a failing ring goes through the odd port
    CODE_IB_COMPLETION_ERROR,
    CODE_SOCKET_CHANNEL_UNROUTABLE,
    CODE_IB_SETTING_RANGE,
    CODE_IBVERBS_FAILURE,
    CODE_IB_MEMLOCK,
    CODE_SHM_EXHAUSTED,
    CODE_NO_INTERFACE,
    CODE_OFI_NO_PROVIDER,
    CODE_MIXED_VERSION,
    CODE_MIXED_TRANSPORT,
    CODE_BOOTSTRAP_MANAGEMENT,
    CODE_SOCKET_FALLBACK,
    CODE_IB_QP_FAILURE,
    CODE_CONNECT_TIMEOUT,
    CODE_NCCL_ERROR,
)
