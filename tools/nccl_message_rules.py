"""How ``tools/nccl_messages.py`` classes each message: the classes, the rules, and the reviewed
overrides for what the rules cannot class.

A message gets the class of the first rule that matches it: first the words of its format
(``_WORD_RULES``: a version check is about versions wherever it is printed), then the source file
it is printed from (``_PATH_RULES``). ``OVERRIDES`` names single formats whose class, severity or
causes the rules get wrong; each entry says why. There is deliberately no catch-all: a message
from a file no rule knows stays unclassed, and the catalogue's test fails until a rule is added.

Which INFO lines are catalogued: those that report a failure (``_FAILURE``) or a choice that
matters (``_CHOICE``); the many progress lines (``Channel 00 : ... via P2P/IPC``, timings) are
not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CLASSES", "OVERRIDES", "MessageClass", "Override", "classify", "info_level",
           "override_for"]


@dataclass(frozen=True)
class MessageClass:
    """What a class of messages is about.

    Attributes:
        meaning: What the code that prints it does, in a few words.
        causes: What usually makes such a message appear, most common first.
        consequence_of: The classes (or events) it usually follows, e.g. ``"peer-exit"``;
            empty when it is usually a first failure.
    """

    meaning: str
    causes: str
    consequence_of: tuple[str, ...] = ()


_PEER = "peer-exit"  # an event, not a class: another rank's process stopped first

#: The meaning classes, by name.
CLASSES: dict[str, MessageClass] = {
    "bootstrap": MessageClass(
        "the ranks' rendezvous over TCP (the unique id's root, then a ring of bootstrap sockets)",
        "a rank cannot reach the root or its neighbour on the bootstrap interface (an "
        "NCCL_SOCKET_IFNAME or an interface other hosts cannot reach, a firewall, different "
        "subnets), a rank that crashed or started late, or ranks of two jobs sharing a unique id",
        ("socket", _PEER)),
    "socket": MessageClass(
        "a TCP socket call of NCCL (bootstrap, proxy or the socket transport)",
        "the peer address is not reachable from this interface (NCCL_SOCKET_IFNAME, firewall, "
        "different subnets), the peer process exited, or a client that is not NCCL (a port "
        "scanner, a health check) connected to NCCL's port", (_PEER,)),
    "interface": MessageClass(
        "choosing the network interface and address family for NCCL's sockets",
        "NCCL_SOCKET_IFNAME matches no interface that is up and has an address on this host, "
        "or ranks use different network implementations (a net plugin on some, NCCL's own on "
        "others) so that the address handles they exchange do not parse"),
    "net-ib": MessageClass(
        "NCCL's InfiniBand/RoCE transport (NET/IB): devices, queue pairs, transfers",
        "an RDMA port that is down or on another fabric, the RoCE GID index, the fabric path "
        "between the nodes (routing, PFC), the locked-memory limit, or a peer that failed first",
        (_PEER,)),
    "ibverbs": MessageClass(
        "loading libibverbs (rdma-core) and calling it",
        "rdma-core (libibverbs and its mlx5 provider) missing from the image, /dev/infiniband "
        "not passed into the container, or the locked-memory limit too low"),
    "net-socket": MessageClass(
        "NCCL's TCP socket transport (NET/Socket) between nodes",
        "no usable interface for NCCL_SOCKET_IFNAME, a peer that cannot be reached on the "
        "interface chosen, or a peer that exited", (_PEER,)),
    "net-plugin": MessageClass(
        "loading an external network plugin (libnccl-net*.so) and choosing the network",
        "the plugin's library or one of its dependencies is missing or built for another "
        "system (glibc, libfabric), the plugin implements an API older than this NCCL accepts, "
        "or NCCL_NET names a network that did not initialise"),
    "net": MessageClass(
        "NCCL's network transport layer: connections, buffers and GPUDirect RDMA over a network",
        "the network plugin or transport under it failed, or a peer failed first", (_PEER,)),
    "gpudirect": MessageClass(
        "GPUDirect RDMA and DMA-BUF: the NIC reading and writing GPU memory",
        "nvidia_peermem not loaded and no DMA-BUF (open kernel module), the GPU and NIC too far "
        "apart in PCI (NCCL_NET_GDR_LEVEL), or PCIe ACS / the IOMMU redirecting peer traffic"),
    "gdrcopy": MessageClass(
        "GDRCopy (the gdrdrv module) for CPU access to GPU memory",
        "the gdrdrv module or libgdrapi missing or of another version"),
    "coll-net": MessageClass(
        "CollNet (in-network reductions such as SHARP)",
        "the SHARP plugin or its aggregation manager is not available, or too many GPUs per node"),
    "shm": MessageClass(
        "shared memory (/dev/shm) between the processes of one node",
        "/dev/shm too small (a container's 64 MB default), or processes in different IPC "
        "namespaces (containers without --ipc=host)"),
    "ipc-socket": MessageClass(
        "UNIX domain sockets that pass CUDA memory handles between the processes of one node",
        "processes in different containers or PID/network namespaces, or a socket path that "
        "cannot be created"),
    "p2p": MessageClass(
        "CUDA peer-to-peer and IPC between the GPUs of one node",
        "peer access not supported between these GPUs (a VM without P2P passthrough, PCIe ACS or "
        "the IOMMU), processes in different containers, or a GPU fault"),
    "nvls": MessageClass(
        "NVLink SHARP and multicast memory (NVLS) over NVSwitch",
        "the NVIDIA fabric manager not running or of another version, multicast not supported "
        "on this system or driver, or IMEX channels not available in the container"),
    "mnnvl": MessageClass(
        "multi-node NVLink (MNNVL): the NVLink fabric between nodes and its IMEX channels",
        "IMEX not running or its channels not visible in the container, or nodes outside one "
        "NVLink domain"),
    "cuda": MessageClass(
        "a CUDA driver or runtime call",
        "a driver older than the CUDA runtime NCCL was built for, a GPU fault (Xid, ECC), out of "
        "GPU memory, a GPU not visible to the process, or an earlier failed kernel"),
    "nvml": MessageClass(
        "NVML (the management library of the driver)",
        "libnvidia-ml missing or of another driver version than the kernel module"),
    "topology": MessageClass(
        "detecting the node's topology (PCI, NUMA, NVLink, NICs) and planning rings and trees",
        "sysfs not fully visible (a VM or container), an unusual PCI layout, NCCL_TOPO_FILE, or "
        "settings such as NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL / NCCL_ALGO that exclude every "
        "path"),
    "proxy": MessageClass(
        "NCCL's proxy thread, which drives the network and some intra-node transfers",
        "the connection it serves failed (a peer exited, the network failed) or a CUDA error",
        ("net-ib", "socket", "net", _PEER)),
    "init": MessageClass(
        "creating, splitting or destroying a communicator",
        "ranks that disagree (different sizes, ids or settings), a failure in a step of setup "
        "(see the messages before it), or a communicator used after an error"),
    "device": MessageClass(
        "which GPU each rank uses",
        "two ranks on one GPU (the GPU not chosen from LOCAL_RANK), an invalid device number, or "
        "CUDA_VISIBLE_DEVICES that differs between ranks"),
    "usage": MessageClass(
        "a call into NCCL that the application made wrongly",
        "inconsistent arguments across ranks (counts, types, roots, order of collectives), "
        "settings that change the protocol on some ranks only (NCCL_PROTO, NCCL_ALGO), a "
        "communicator used from several threads or after an error, or a bug in the framework"),
    "launch": MessageClass(
        "planning and launching collective kernels",
        "no algorithm or protocol left by NCCL_ALGO/NCCL_PROTO, kernel resources beyond the GPU "
        "(an NCCL older than the GPU), or a failed CUDA launch"),
    "config": MessageClass(
        "reading NCCL_* settings and communicator options",
        "a setting with a value NCCL does not accept or ignores"),
    "memory": MessageClass(
        "allocating and registering memory",
        "out of host or GPU memory, a memory type the driver does not support (cuMem, fabric "
        "handles), or registration limits"),
    "version": MessageClass(
        "checking versions (of NCCL across ranks, of the driver, of a plugin's API)",
        "different NCCL versions on different nodes, a CUDA driver older than required, or a "
        "plugin built against another NCCL API"),
    "ras": MessageClass(
        "NCCL's RAS subsystem (reliability, availability and serviceability): a monitor that "
        "connects the processes of a job and answers `ncclras` queries",
        "a peer process that exited or hangs, or the RAS port unreachable; RAS messages do not "
        "fail the job by themselves", (_PEER,)),
    "plugin": MessageClass(
        "loading a tuner, profiler, environment, GIN or RMA plugin",
        "the plugin library missing, or built against another plugin API"),
    "gin": MessageClass(
        "GPU-initiated networking and one-sided RMA (the device API of NCCL 2.28 and later)",
        "a network or driver without the features it needs (DOCA GPUNetIO, dmabuf), or its "
        "use in the application"),
    "system": MessageClass(
        "a call to the operating system (threads, files, dynamic libraries)",
        "a resource limit (threads, open files), a missing library, or permissions"),
    "debug": MessageClass(
        "NCCL's own logging (NCCL_DEBUG_FILE)",
        "a debug file path that cannot be written"),
    "ofi": MessageClass(
        "the aws-ofi-nccl plugin (libfabric, EFA and other providers)",
        "no usable device for the libfabric provider in this process (EFA devices not passed "
        "into the container), another libfabric loaded than the plugin was built for, a "
        "provider that lacks a needed feature, or a peer that failed", (_PEER,)),
    "ucx": MessageClass(
        "the UCX network of the nccl-rdma-sharp plugin",
        "UCX not finding a usable transport or device, or a peer that failed", (_PEER,)),
    "tcp-offload": MessageClass(
        "a TCP data-path plugin (GPUDirect-TCPX, FastSocket): its sockets and flows",
        "congested or failing links, a peer that stopped reading, or the plugin's receive "
        "daemon (TCPX's rxdm) not running", (_PEER,)),
    "torch-nccl": MessageClass(
        "PyTorch's ProcessGroupNCCL reporting that an NCCL call failed",
        "the NCCL error it wraps: read NCCL's own WARN lines (and the `Last error:` text) for "
        "the cause", ("net-ib", "socket", "bootstrap", "cuda", _PEER)),
    "torch-watchdog": MessageClass(
        "PyTorch's watchdog: a collective that did not finish within the process group timeout",
        "a rank that stopped or lags (a crash, a hang, a different code path), a failed network "
        "under NCCL, or a timeout shorter than the work", (_PEER,)),
    "torch-store": MessageClass(
        "PyTorch's TCPStore rendezvous (MASTER_ADDR:MASTER_PORT)",
        "MASTER_ADDR/MASTER_PORT unreachable or wrong, the store's host (rank 0 or the "
        "launcher) exited, or ranks that never started", (_PEER,)),
    "gloo": MessageClass(
        "Gloo, PyTorch's CPU collectives",
        "GLOO_SOCKET_IFNAME unset or wrong (a hostname that resolves to loopback), a firewall, "
        "or a peer that exited", (_PEER,)),
    "benchmark": MessageClass(
        "a benchmark's (nccl-tests) report that an NCCL call failed",
        "the NCCL error it names: read NCCL's WARN lines above it", ("net-ib", "socket", _PEER)),
}

# Words of the format that decide the class wherever the message is printed (checked in order).
_WORD_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern)) for name, pattern in (
        # ranks that called different collectives (or the same with other sizes): the data
        # path's check of a message's size reports it, wherever in the network it is printed
        ("usage", r"collective mismatch|[Mm]ismatched collective|mismatch in collective|"
                  r"^NET/Socket : (?:peer %s )?message truncated"),
        # NVML's verdict on peer access between two GPUs, printed while the topology is read
        ("p2p", r"^P2P is disabled between|^P2P not supported between"),
        ("version", r"(?i)version.{0,60}(?:mismatch|differ|older|newer|too old|minimum|"
                    r"required|compiled with)|[Mm]ismatched NCCL version|API version"),
        ("device", r"Duplicate GPU|same GPU|same CUDA device|Invalid device|invalid device"),
        ("interface", r"neither AF_INET|no socket interface|No usable listening interface|"
                      r"[Nn]o (?:IP )?interface found|SOCKET_IFNAME|SOCKET_FAMILY"),
        ("shm", r"/dev/shm|shared memory (?:segment|file|mapping)|posix_fallocate|shm_open"),
        ("gpudirect", r"GPU Direct RDMA|DMA-BUF|[Dd]mabuf|nvidia_peermem|nv_peer_mem|PeerMem"),
        ("nvls", r"NVLS|[Mm]ulticast|fabric manager|Fabric Manager"),
        ("cuda", r"Cuda failure|CUDA failure|CUDA error|Cuda error|cudaErr|CUDA driver|"
                 r"maxSharedMem"),
        ("memory", r"[Mm]alloc|[Cc]alloc|out of memory|Cannot allocate memory"),
        ("net-plugin", r"^NET/Plugin|[Pp]lugin load|libnccl-net|ncclNetPlugin"),
        ("config", r"set by environment|Invalid config|Invalig config|[Cc]omm config|"
                   r"^ENV:|is being ignored|NCCL_[A-Z0-9_]+ (?:is|set|must|should|value|=)"),
    )
)

# The source file decides otherwise (searched in the path, in order).
_PATH_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern)) for name, pattern in (
        # the plugins' repositories (tools/nccl_messages.py prefixes their paths)
        ("ofi", r"^aws-ofi-nccl/"),
        ("ucx", r"^nccl-rdma-sharp-plugins/.*ucx"),
        ("coll-net", r"^nccl-rdma-sharp-plugins/.*sharp"),
        ("net-ib", r"^nccl-rdma-sharp-plugins/.*(?:ib_plugin|p2p_plugin)"),
        ("ibverbs", r"^nccl-rdma-sharp-plugins/.*ibvwrap"),
        ("system", r"^nccl-rdma-sharp-plugins/"),
        ("tcp-offload", r"^(?:nccl-fastsocket|nccl-plugin-gpudirecttcpx)/"),
        ("ibverbs", r"^rdma-core/libibverbs/"),
        ("benchmark", r"^nccl-tests/"),
        # NCCL
        ("bootstrap", r"bootstrap"),
        ("ras", r"/ras/"),
        ("net-ib", r"net_ib.*/(?:gdaki|gin)|/gin/|/rma/|gdaki"),
        ("net-ib", r"transport/net_ib"),
        ("net-socket", r"transport/net_socket"),
        ("coll-net", r"transport/coll_net"),
        ("nvls", r"transport/nvls"),
        ("p2p", r"transport/p2p"),
        ("shm", r"transport/shm|shmutils|include/shm\.h"),
        ("net", r"transport/net\.|transport/generic"),
        ("init", r"src/transport\.c|src/channel\.c|src/group\.c|misc/rings|src/ring\.c"),
        ("ipc-socket", r"ipcsocket|socket_pair"),
        ("socket", r"misc/socket|include/socket"),
        ("ibverbs", r"ibvwrap|ibvsymbols|mlx5dv|ibvcore"),
        ("net-plugin", r"src/net\.c|plugin/net|plugin/plugin_open"),
        ("plugin", r"plugin/|misc/profiler|misc/tuner"),
        ("gdrcopy", r"gdrwrap"),
        ("nvml", r"nvmlwrap"),
        ("cuda", r"cudawrap|strongstream"),
        # the generic wrappers (SYSCHECK, NCCLCHECK); their CUDA ones are classed by their words
        ("system", r"include/checks\.h|include/core\.h|include/utils\.h"),
        ("mnnvl", r"mnnvl"),
        ("topology", r"/graph/|include/nvlink|include/topo"),
        ("proxy", r"src/proxy\."),
        ("usage", r"argcheck|common_coll|src/collectives|enqueue\.cu$|misc/group\.cu"),
        ("launch", r"src/enqueue\.cc|ce_coll|sym_kernels|scheduler/|src/collectives"),
        ("memory", r"alloc|mem_manager|register|dev_runtime|devcomm"),
        ("config", r"/param|include/param"),
        ("init", r"src/init\.c|src/init_nvtx"),
        ("system", r"/os/|misc/utils|include/os"),
        ("debug", r"src/debug\.c|include/debug"),
    )
)


@dataclass(frozen=True)
class Override:
    """A reviewed decision for one format that the rules class wrongly.

    Attributes:
        cls: The class, e.g. ``"socket"``.
        why: Why the rules' answer is wrong here.
        fatal: The message means the job fails although NCCL prints it at INFO or carries on.
        causes: Usual causes of this message, when they are narrower than its class's.
        consequence_of: What it usually follows, when that differs from its class's.
    """

    cls: str
    why: str
    fatal: bool = False
    causes: str = ""
    consequence_of: tuple[str, ...] = ()


#: A pattern searched in the format (its first line, as in the source) -> the reviewed decision
#: for every format it matches.
OVERRIDES: dict[str, Override] = {
    r"^ncclMaxSharedMem %d exceeds device/fn maxSharedMem": Override(
        "launch",
        "NCCL 2.25 prints it at INFO, lowers the kernels' shared memory and carries on; on a GPU "
        "newer than the NCCL release the kernels then cannot launch (2.26 made it a WARN that "
        "fails the call)",
        fatal=True,
        causes="an NCCL release older than the GPU's architecture: upgrade NCCL (the PyTorch "
               "wheel or the container image) to one that supports this GPU"),
    r"Connection closed by remote peer": Override(
        "socket",
        "printed by the socket layer, but it reports what the peer did: its process exited or "
        "it was not NCCL at all",
        causes="the peer process exited (read its log for the first error); at bootstrap "
               "accept with nothing else failing, a client that is not NCCL (a port scanner, "
               "a health check) connected and closed: NCCL before 2.30.7 fails on that "
               "(socketFinalizeAccept; 2.30.7 discards such connections), so upgrade NCCL or "
               "keep scanners off the bootstrap ports",
        consequence_of=(_PEER,)),
    r"^Bootstrap Root : (?:mismatch in|rank %d of %d ranks has already checked in)": Override(
        "bootstrap",
        "the root thread received a process that does not fit the job as the first one "
        "described it (another rank count, a rank already there) and stops serving: the "
        "processes disagree about the job, the network is fine",
        causes="processes of two jobs reached one root (two launches given the same "
               "NCCL_COMM_ID, or sharing one rendezvous, MASTER_ADDR:MASTER_PORT), or the "
               "processes of one job were started with different world sizes (WORLD_SIZE, "
               "--nnodes, --nproc-per-node) or two of them with the same RANK: give each job "
               "its own port or NCCL_COMM_ID, and start every node with the same world size "
               "and distinct ranks"),
    r"^ProcessGroupNCCL's watchdog got stuck for %d seconds": Override(
        "torch-watchdog",
        "PyTorch's heartbeat monitor reports the watchdog thread itself blocked, not a "
        "collective that timed out (HeartbeatMonitor::runLoop, ProcessGroupNCCL.cpp)",
        causes="the watchdog thread is blocked inside a CUDA or NCCL call: a GPU or driver that "
               "hangs (Xid errors in `dmesg`, `nvidia-smi` not answering), an NCCL abort that "
               "hangs after an earlier failure (read the first error before it), or another "
               "thread holding the GIL inside a CUDA call; TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC "
               "only moves the abort later"),
    r"^The server socket has failed to listen on any local network address": Override(
        "torch-store",
        "the store's host could not open MASTER_PORT: nothing is unreachable, the port is not "
        "free there (the message names the errno)",
        causes="MASTER_PORT is taken on the host of rank 0 (name: EADDRINUSE): another job, or "
               "a process left from an earlier run (its rank 0 or torchrun's agent), listens on "
               "it; end that process (`ss -ltnp` names it) or choose another MASTER_PORT "
               "(EADDRNOTAVAIL instead: MASTER_ADDR is not an address of that host)"),
    r"^libibverbs: Warning: fork\(\)-safety requested but init failed": Override(
        "ibverbs",
        "libibverbs prints it when RDMAV_FORK_SAFE or IBV_FORK_SAFE is set and ibv_fork_init "
        "fails (rdma-core libibverbs/init.c); the devices still work",
        causes="RDMAV_FORK_SAFE or IBV_FORK_SAFE is set in the environment and fork-safety "
               "could not be set up; NCCL does not need it, so this matters only to a program "
               "that forks after registering RDMA memory: unset the variable to silence it"),
    r"Plugin load (?:\(%s\) )?returned %d : %s": Override(
        "net-plugin",
        "an INFO line, but its dlopen error is the cause of a later `network ... not found` or "
        "of the fallback to NCCL's own transports",
        causes="the plugin library's dependencies are missing or built for another system "
               "(the dlopen error says which: a glibc symbol version, libfabric, libcudart)"),
    r"^Error: network %s not found": Override(
        "net-plugin",
        "printed when NCCL_NET names a network no plugin provided; the plugin's own load error "
        "comes before it",
        causes="NCCL_NET names a network whose plugin did not load (see `Plugin load returned` "
               "or `Failed to initialize` before it), or is misspelt",
        consequence_of=("net-plugin",)),
}

_OVERRIDES = tuple((re.compile(pattern), override) for pattern, override in OVERRIDES.items())

_FAILURE = re.compile(
    r"(?i)fail|error|unable|cannot|can't|could not|couldn't|not supported|unsupported|disabl|"
    r"invalid|timeout|timed out|abort|refus|mismatch|exceed|insufficient|not found|"
    r"fall(?:ing)? ?back|too (?:old|small|large|many|few)|ignor|not (?:enabled|available|usable)|"
    r"no .{0,30}found|denied|missing|out of|closed"
)
_CHOICE = re.compile(
    r"(?i)\busing\b|selected|set by environment|loaded|assigned|NCCL version|plugin|"
    r"GPU Direct|via NET|\bchose|\bchoos"
)


def info_level(fmt: str) -> str | None:
    """How an INFO format is catalogued: ``"F"`` when it reports a failure, ``"I"`` when it
    reports a choice that matters, None when it is not catalogued (progress, timings)."""
    if _FAILURE.search(fmt):
        return "F"
    return "I" if _CHOICE.search(fmt) else None


def override_for(fmt: str) -> Override | None:
    """The reviewed decision for a format, if any."""
    for pattern, override in _OVERRIDES:
        if pattern.search(fmt):
            return override
    return None


def classify(path: str, fmt: str) -> str | None:
    """The class of a message from its source path (``"src/misc/socket.cc"``, plugin paths
    prefixed with their repository's name) and its format; None when no rule applies."""
    override = override_for(fmt)
    if override is not None:
        return override.cls
    for name, pattern in _WORD_RULES:
        if pattern.search(fmt):
            return name
    return path_class(path)


def path_class(path: str) -> str | None:
    """The class of what a source file does (``"src/transport/nvls.cc"`` -> ``"nvls"``), by its
    path alone; None when no rule applies."""
    for name, pattern in _PATH_RULES:
        if pattern.search(path):
            return name
    return None
