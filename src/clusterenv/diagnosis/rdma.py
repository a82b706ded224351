"""Can this process use RDMA at full speed? Doctor's checks of failure modes FM-25 (devices not
openable, no libibverbs), FM-29 (locked-memory limit) and FM-30 (GPUDirect RDMA).

They run on a multi-node cluster whose node has RDMA devices; ports on a management interface
do not count.
"""

from __future__ import annotations

from clusterenv._facts import Facts
from clusterenv.findings import Finding
from clusterenv.nccl.hca import management_netdev, nccl_ports, port_label, version_text
from clusterenv.nccl.version import known_before
from clusterenv.rdma import port_transport

__all__ = ["rdma_checks"]

_LIBIBVERBS = ("libibverbs.so.1", "libibverbs.so")
_STANDARD_LIBRARY_DIRS = (
    "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib",
    "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib",
    "usr/local/lib",
)


def _library_dirs(facts: Facts) -> list[str]:
    """Where the dynamic loader looks: standard dirs, ld.so.conf.d and LD_LIBRARY_PATH."""
    dirs = list(_STANDARD_LIBRARY_DIRS)
    for conf in facts.root.listdir("etc/ld.so.conf.d"):
        if conf.endswith(".conf"):
            dirs += [line.strip() for line in facts.root.read_lines(f"etc/ld.so.conf.d/{conf}")
                     if line.strip().startswith("/")]
    dirs += [d for d in facts.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return [d.strip("/") for d in dirs if ".." not in d]


def _has_libibverbs(facts: Facts) -> bool:
    return any(facts.root.exists(f"{d}/{lib}") for d in _library_dirs(facts) for lib in _LIBIBVERBS)


def _not_openable(facts: Facts) -> list[Finding]:
    """FM-25: RDMA ports are up, but this process cannot open their devices."""
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
        severity="error" if everything else "warning",
    )]


def _libibverbs(facts: Facts) -> list[Finding]:
    if not facts.root.is_live or not nccl_ports(facts) or _has_libibverbs(facts):
        return []
    return [Finding.of(
        "rdma-no-libibverbs",
        "usable RDMA devices, but no libibverbs in this image: NCCL logs 'Failed to open "
        "libibverbs.so' and uses TCP sockets",
        ("looked in: " + ", ".join(f"/{d}" for d in _library_dirs(facts)[:12]),),
        "install rdma-core in the image (apt-get install ibverbs-providers libibverbs1)",
    )]


def _memlock(facts: Facts) -> list[Finding]:
    """FM-29: RLIMIT_MEMLOCK too small to register NCCL's buffers."""
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
    """FM-30: no GPUDirect RDMA, or an NCCL too old to see nvidia_peermem."""
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


def rdma_checks(facts: Facts) -> list[Finding]:
    """Doctor's RDMA checks on a multi-node cluster with RDMA devices."""
    if not facts.multi_node or not facts.rdma.devices:
        return []
    return [*_not_openable(facts), *_libibverbs(facts), *_memlock(facts), *_gpudirect(facts)]
