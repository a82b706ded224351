"""Can this process use RDMA at full speed? Doctor's checks of devices that do not open (or no
libibverbs), the locked-memory limit, GPUDirect RDMA, and RDMA ports
that are present but not ACTIVE (NCCL skips them without a word).

They run on a multi-node cluster whose node has RDMA devices; ports on a management interface
do not count.
"""

from __future__ import annotations

from collections import Counter

from clusterenv._facts import Facts
from clusterenv._shell import code, command, prose
from clusterenv.findings import Code, Finding
from clusterenv.nccl.hca import (
    management_netdev,
    nccl_ports,
    port_label,
    select_hcas,
    version_text,
)
from clusterenv.nccl.version import known_before, loader_dirs
from clusterenv.rdma import RdmaDevice, RdmaPort, port_transport

__all__ = ["port_state_cause", "rdma_checks"]

_LIBIBVERBS = ("libibverbs.so.1", "libibverbs.so")


def _library_dirs(facts: Facts) -> list[str]:
    """Where the dynamic loader looks (one reader for doctor and the NCCL version)."""
    return loader_dirs(facts.root, facts.environ)


def _has_libibverbs(facts: Facts) -> bool:
    return any(facts.root.exists(f"{d}/{lib}") for d in _library_dirs(facts) for lib in _LIBIBVERBS)


def _not_openable(facts: Facts) -> list[Finding]:
    """RDMA ports are up, but this process cannot open their devices."""
    up = [(d, p) for d in facts.rdma.devices for p in d.ports
          if p.active and port_transport(d, p) in ("infiniband", "roce")
          and management_netdev(facts, p.netdev) is None]
    closed = [(d, p) for d, p in up if not d.dev_node]
    if not closed:
        return []
    listed = ", ".join(port_label(d, p) for d, p in closed)
    nodes = ", ".join(sorted({f"/dev/infiniband/{d.uverbs}" for d, _ in closed if d.uverbs}))
    everything = len(closed) == len(up)
    return [Finding.of(
        "rdma-not-openable",
        f"RDMA ports are ACTIVE in sysfs but this process cannot open {listed}"
        + (": NCCL will silently use TCP sockets" if everything else ""),
        (f"missing or not openable: {nodes or 'no uverbs device names them'}",
         f"present in /dev/infiniband: {', '.join(facts.rdma.uverbs) or 'nothing'}"),
        "give the container the devices: docker run --device=/dev/infiniband (or "
        "--privileged); Kubernetes: the RDMA device plugin",
        severity="error" if everything and _ib_forced(facts) else "warning",
    )]


def _ib_forced(facts: Facts) -> bool:
    """Whether ``NCCL_NET=IB`` forbids NCCL's fallback to sockets: without RDMA the job then
    fails instead of running slower (the severity rule: error only for a certain failure)."""
    found = facts.user_value("NCCL_NET")
    return found is not None and found[0].strip().upper() == "IB"


def _libibverbs(facts: Facts) -> list[Finding]:
    if not facts.root.is_live or not nccl_ports(facts) or _has_libibverbs(facts):
        return []
    return [Finding.of(
        "rdma-no-libibverbs",
        "usable RDMA devices, but no libibverbs in this image: NCCL logs 'Failed to open "
        "libibverbs.so' and uses TCP sockets",
        ("looked in: " + ", ".join(f"/{d}" for d in _library_dirs(facts)[:12]),),
        "install rdma-core in the image (apt-get install ibverbs-providers libibverbs1)",
        severity="error" if _ib_forced(facts) else "warning",
    )]


def _memlock(facts: Facts) -> list[Finding]:
    """RLIMIT_MEMLOCK too small to register NCCL's buffers."""
    host = facts.host
    if not nccl_ports(facts) or not host.memlock_known or host.memlock_soft is None:
        return []
    if host.cap_ipc_lock:
        return []  # the kernel does not enforce the limit for this process
    soft = host.memlock_soft
    hard = "unlimited" if host.memlock_hard is None else f"{host.memlock_hard} bytes"
    fix = ("ulimit -l unlimited  (in the shell that starts training; the hard limit allows it)"
           if host.memlock_hard is None else
           "raise the limit: docker run --ulimit memlock=-1, or '* soft memlock unlimited' and "
           "'* hard memlock unlimited' in /etc/security/limits.conf")
    return [Finding.of(
        "memlock-too-low",
        f"RLIMIT_MEMLOCK is {soft // 1024} KiB; RDMA needs unlimited: NCCL fails with "
        "'ibv_reg_mr ... Cannot allocate memory'",
        (f"memlock soft {soft} bytes, hard {hard}",
         "CAP_IPC_LOCK: " + ("no" if host.cap_ipc_lock is False else "unknown")),
        fix,
    )]


def _gpudirect(facts: Facts) -> list[Finding]:
    """No GPUDirect RDMA, or an NCCL too old to see nvidia_peermem."""
    host = facts.host
    if not nccl_ports(facts) or host.gpus_installed == 0:
        return []
    if not host.gpudirect:
        if host.open_kernel_module:
            return [Finding.of(
                "gpudirect-unavailable",
                "nvidia_peermem is not loaded; with the open GPU kernel module NCCL can still "
                "use GPUDirect RDMA through DMA-BUF (look for 'DMA-BUF is available')",
                ("no /sys/module/nvidia_peermem, no /sys/kernel/mm/memory_peers/nv_mem",
                 f"driver {host.driver_version}: open kernel module"),
                "if NCCL logs 'GPU Direct RDMA Disabled', run `modprobe nvidia_peermem` on the "
                "host",
                severity="info",
            )]
        return [Finding.of(
            "gpudirect-unavailable",
            "GPUDirect RDMA unavailable (nvidia_peermem not loaded): NCCL logs 'GPU Direct RDMA "
            "Disabled for HCA' and copies through host memory",
            ("no /sys/module/nvidia_peermem, no /sys/kernel/mm/memory_peers/nv_mem",
             f"driver: {host.driver_version or 'unknown'}"),
            "run `modprobe nvidia_peermem` on the host (or use the open GPU kernel module)",
        )]
    if (host.gpudirect_path == "/sys/module/nvidia_peermem/version"
            and known_before(facts.nccl_versions, (2, 23))):
        return [Finding.of(
            "gpudirect-old-nccl",
            f"nvidia_peermem is loaded, but NCCL {version_text(facts)} (before 2.23) may not "
            "detect it on newer driver stacks: 'GPU Direct RDMA Disabled'",
            (f"found {host.gpudirect_path}", "no /sys/kernel/mm/memory_peers/nv_mem/version"),
            "use NCCL 2.23 or later (pip install -U nvidia-nccl-cu12)",
        )]
    return []


_STATE_CODES: dict[str, Code] = {
    "INIT": "rdma-port-init", "DOWN": "rdma-port-down", "ARMED": "rdma-port-armed",
}


def port_state_cause(device: RdmaDevice, port: RdmaPort) -> tuple[str, str]:
    """Why a port is not ACTIVE and what brings it up, from its state, physical state and link
    layer, e.g. ``("the link is up but no subnet manager has configured the port", "…")``.
    """
    label = f"{prose(device.name)} port {port.number}"
    netdev = port.netdev
    ibstat = code(command("ibstat", device.name, port.number))
    ib = port.link_layer == "InfiniBand"
    if port.state == "INIT":
        if ib:
            return (
                "the link is up but no subnet manager has configured the port (no SM on the "
                "fabric, or the SM does not serve this port or virtual function)",
                "run a subnet manager on the fabric (OpenSM on one node, or the switch's or "
                "UFM's SM) and check it with `sminfo`; for an SR-IOV virtual function "
                "(Kubernetes) the SM must have virtualization enabled (OpenSM `virt_enabled 2`) "
                f"and know the VF's GUID; {ibstat} shows "
                "'State: Initializing' until then",
            )
        return (
            "the link is up but the RoCE driver has not activated the port",
            f"check {code(command('rdma', 'link', 'show', f'{device.name}/{port.number}'))}, "
            f"that {prose(netdev) if netdev else 'its interface'} is up with an address, and "
            "the NIC driver's "
            "messages (`dmesg`)",
        )
    if port.state == "ARMED":
        return (
            "the subnet manager configured the port but has not activated it (a sweep in "
            "progress, or a stalled SM)",
            "wait for the next subnet-manager sweep; if the port stays ARMED, check the SM "
            f"(`sminfo`, its log) for errors about {label}",
        )
    if port.phys_state == "Polling":
        cause = ("no link partner: the port is enabled and polling (cable, transceiver or "
                 "switch port down)")
        check = code(command("ethtool", netdev)) if netdev and not ib else ibstat
        return cause, (f"check the cable, the transceiver and the switch port of {label} "
                       f"({check} shows the link)")
    if port.phys_state == "Disabled":
        if ib:
            return ("the port is disabled", f"enable {label} if it is a rail (`ibportstate` "
                    "on the port, or the switch side), otherwise nothing: NCCL never uses it")
        up = (code(command("ip", "link", "set", netdev, "up")) if netdev
              else "bring its interface up")
        check = code(command("ethtool", netdev)) if netdev else "`ethtool` on its interface"
        return ("the port is disabled: its interface is down or has no link (cable), or the "
                "port is unused",
                f"if {label} is a rail: {up} and check the cable ({check} shows 'Link "
                "detected'); otherwise nothing: NCCL never uses it")
    return (f"the link is not up (physical state {port.phys_state})",
            f"check the cable and the switch port of {label} ({ibstat})")


def _same_model(a: RdmaDevice, b: RdmaDevice) -> bool:
    """Whether two devices are the same adapter model, as far as sysfs tells."""
    return all(x is None or y is None or x == y
               for x, y in ((a.hca_type, b.hca_type), (a.board_id, b.board_id)))


def _ports_not_active(facts: Facts) -> list[Finding]:
    """RDMA ports present but not ACTIVE (INIT, DOWN, ARMED): NCCL skips them silently.

    A port like the ports NCCL will use (same link layer and adapter model), or any such port
    when no port is usable, is a missing rail: a warning, since this node then runs on fewer
    rails or on TCP sockets while its peers may use RDMA (preflight makes that an error). Any
    other port (a disabled front-end port, an unused second port) is reported for information.
    """
    idle = [(d, p) for d in facts.rdma.devices for p in d.ports
            if p.state in _STATE_CODES and port_transport(d, p) in ("infiniband", "roce")
            and management_netdev(facts, p.netdev) is None]
    if not idle:
        return []
    selected = select_hcas(facts).selected
    in_use = {d.name for d, _ in selected}
    models = Counter((p.link_layer, d.hca_type, d.board_id) for d, p in idle)
    groups: dict[tuple[str, str, str, bool], list[tuple[RdmaDevice, RdmaPort]]] = {}
    for device, port in idle:
        # A rail: like the ports in use (the second port of a NIC in use is usually uncabled,
        # not a rail), or one of at least as many idle ports of one model as there are ports in
        # use (a node whose eight rails are down while a front-end NIC carries on).
        alike = any(p.link_layer == port.link_layer and _same_model(d, device)
                    for d, p in selected)
        many = models[(port.link_layer, device.hca_type, device.board_id)] >= max(
            2, len(selected))
        rail = not selected or (device.name not in in_use and (alike or many))
        key = (port.state, port.phys_state, port.link_layer, rail)
        groups.setdefault(key, []).append((device, port))
    findings = []
    used = ", ".join(port_label(d, p) for d, p in selected) or "none"
    for (state, phys, link_layer, rail), ports in groups.items():
        labels = [port_label(d, p) for d, p in ports]
        shown = ", ".join(labels[:4]) + (f" and {len(labels) - 4} more" if len(labels) > 4 else "")
        plural = len(labels) > 1
        head = (f"RDMA port{'s' if plural else ''} {shown} {'are' if plural else 'is'} {state} "
                f"(physical state {phys}, {link_layer})")
        if rail and not selected:
            title = f"{head}: no RDMA port is usable, NCCL will use TCP sockets on this node"
        elif rail:
            title = (f"{head}: NCCL uses only the {len(selected)} ACTIVE port"
                     f"{'s' if len(selected) > 1 else ''}, this node has fewer rails than its "
                     "peers")
        else:
            title = f"{head}: not one of the rails NCCL uses, worth knowing only"
        cause, fix = port_state_cause(*ports[0])
        evidence = [
            f"{d.name} port {p.number}: state {p.state}, physical state {p.phys_state}, link "
            f"layer {p.link_layer}" + (f", netdev {p.netdev}" if p.netdev else "")
            + (f", {d.hca_type}" if d.hca_type else "")
            for d, p in ports[:6]
        ]
        evidence += [f"cause: {cause}", f"ports NCCL will use: {used}"]
        findings.append(Finding.of(
            _STATE_CODES[state], title, tuple(evidence), fix,
            severity="warning" if rail else "info",
        ))
    return findings


def rdma_checks(facts: Facts) -> list[Finding]:
    """Doctor's RDMA checks on a multi-node cluster with RDMA devices."""
    if not facts.multi_node or not facts.rdma.devices:
        return []
    return [*_not_openable(facts), *_ports_not_active(facts), *_libibverbs(facts),
            *_memlock(facts), *_gpudirect(facts)]
