"""Which network NCCL used and how: a fallback to TCP sockets, GPUDirect RDMA off, queue-pair
settings outside what verbs accepts."""

from __future__ import annotations

from clusterenv._shell import quote as shell_quote
from clusterenv.findings import Code, Finding
from clusterenv.nccl_log.failures import unopenable
from clusterenv.nccl_log.interfaces import MAX_EVIDENCE, finding, labels, network_unused, quote
from clusterenv.nccl_log.model import NcclLog

__all__ = [
    "CODE_GDR_DISABLED",
    "CODE_IB_DISABLED",
    "CODE_IB_SETTING_RANGE",
    "CODE_SOCKET_FALLBACK",
    "gdr_checks",
    "setting_checks",
    "transport_checks",
]

CODE_SOCKET_FALLBACK: Code = "log-socket-fallback"
CODE_IB_DISABLED: Code = "log-ib-disabled"
CODE_GDR_DISABLED: Code = "log-gdr-disabled"
CODE_IB_SETTING_RANGE: Code = "log-ib-setting-range"


def transport_checks(log: NcclLog, expect_rdma: bool) -> list[Finding]:
    """TCP sockets although RDMA was expected (or because a setting disabled it)."""
    socket_ranks = [r for r in log.ranks if r.transport == "Socket"]
    if not socket_ranks:
        return []
    rdma_ranks = [r for r in log.ranks if r.transport and r.transport != "Socket"]
    unopenable_devices = unopenable(log)
    hca = log.env.get("NCCL_IB_HCA")
    ib_disable = log.env.get("NCCL_IB_DISABLE", "0") not in ("", "0")
    # The setting that kept NCCL off RDMA, if one did.
    knob = ("NCCL_IB_DISABLE" if ib_disable
            else "NCCL_NET" if log.env.get("NCCL_NET", "").lower() == "socket" else None)
    reasons: list[str] = []
    if unopenable_devices:
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
    evidence += quote(unopenable_devices or list(log.messages("no-device")))
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
    elif hca and not unopenable_devices and log.messages("no-device"):
        # NCCL opened every device it listed and kept none: the filter matched nothing here
        evidence.append(f"NCCL_IB_HCA={shell_quote(hca)} is set and NET/IB found no device it "
                        "allows")
        fix = (f"NCCL_IB_HCA={shell_quote(hca)} matched no RDMA device of these hosts: name "
               "devices that "
               "`ibv_devices` lists on every node (a prefix matches, `=` asks for exact names, "
               "`^` excludes, `:1` picks a port), or unset it; if no devices are listed, "
               + fix)
    one_node = network_unused(log)
    if one_node:
        evidence.append("one node, and no channel through a network: NCCL keeps its transfers "
                        "inside it (peer-to-peer, shared memory)")
    return [finding(
        CODE_SOCKET_FALLBACK, "info" if one_node else "error",
        f"NCCL fell back to TCP sockets on {len(socket_ranks)} process(es) although RDMA was "
        "expected: inter-node bandwidth is a fraction of what the fabric gives",
        tuple(evidence), fix,
    )]


def gdr_checks(log: NcclLog) -> list[Finding]:
    """GPUDirect RDMA off for an HCA, refused for distance, or missing from channels."""
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
    one_node = network_unused(log)
    if one_node:
        evidence.append("one node, and no channel through a network: GPUDirect RDMA carries "
                        "nothing here")
    return [finding(CODE_GDR_DISABLED, "info" if one_node else "warning", title,
                    tuple(evidence), fix)]


def setting_checks(log: NcclLog) -> list[Finding]:
    """``NCCL_IB_RETRY_CNT set by environment to 15.``: queue-pair settings out of range."""
    if not any(name.startswith("NCCL_IB_") for name in log.env):
        return []  # the table holds NCCL_IB_* settings only: nothing to import for
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
