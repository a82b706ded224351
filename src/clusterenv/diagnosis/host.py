"""Host checks: GPUs against the process count, ``/dev/shm``, the rendezvous port, and how the
job is launched.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from clusterenv._facts import Facts
from clusterenv._root import format_size_limit, which
from clusterenv._shell import command, prose
from clusterenv._text import count
from clusterenv.errors import DiscoveryError
from clusterenv.findings import Finding
from clusterenv.host import format_bytes

__all__ = ["SHM_MINIMUM", "host_checks", "port_in_use"]

#: Below this, NCCL's shared-memory segments fail with "No space left on device" once several
#: local processes talk (Docker's default is 64 MiB; Runpod asks for 8 GB or more).
SHM_MINIMUM = 1 << 30
_SHM = "/dev/shm"  # noqa: S108  # named in messages, never written


def _gpus(facts: Facts) -> list[Finding]:
    """More processes per node than GPUs this process can see."""
    config = facts.config
    if config is None or config.source == "local":  # local counts the GPUs it finds
        return []
    host = facts.host
    worker = config.source == "torchelastic"
    # A worker may see one GPU by design (a launcher that narrows CUDA_VISIBLE_DEVICES per
    # process); compare its node's process count with the GPUs given to the node instead.
    visible = host.gpus_installed if worker else host.gpus
    variable = "LOCAL_WORLD_SIZE" if worker else "NUM_TRAINERS"
    wanted = config.num_trainers
    if host.gpus_installed == 0:
        if facts.runpod:
            return [Finding.of(
                "gpus-none-visible",
                f"no NVIDIA GPU is visible, but {variable}={wanted}",
                ("/proc/driver/nvidia/gpus is empty or missing",),
                "check that the NVIDIA driver is loaded and the container was given the GPUs "
                "(nvidia-smi)",
            )]
        return []
    if visible >= wanted:
        return []
    cvd = facts.environ.get("CUDA_VISIBLE_DEVICES")
    evidence = [f"{variable}={wanted}", f"GPUs installed: {host.gpus_installed}"]
    if cvd is not None and not worker:
        evidence.append(f"CUDA_VISIBLE_DEVICES={cvd!r} leaves {visible}")
    return [Finding.of(
        "gpus-too-few",
        f"{variable}={wanted} processes per node, but only {count(visible, 'GPU')} visible: "
        "'CUDA error: invalid device ordinal'",
        tuple(evidence),
        f"start {visible} processes per node (torchrun --nproc-per-node={visible}), or make "
        "all GPUs visible",
    )]


def _shm(facts: Facts) -> list[Finding]:
    """``/dev/shm`` too small for NCCL's shared-memory segments."""
    config = facts.config
    size = facts.host.shm_bytes
    if config is None or size is None or size >= SHM_MINIMUM:
        return []
    if config.num_trainers < 2 and not config.is_multi_node:
        return []
    return [Finding.of(
        "shm-too-small",
        f"{_SHM} is {format_bytes(size)}; NCCL needs more with {config.num_trainers} local "
        "processes: 'posix_fallocate failed: No space left on device'",
        (f"{_SHM}: {size} bytes", f"processes per node: {config.num_trainers}"),
        "give the container a bigger /dev/shm: docker run --shm-size=16g (Runpod recommends "
        "8 GB or more); as root: mount -o remount,size=16g /dev/shm",
    )]


def port_in_use(port: int, *, family: int = socket.AF_INET) -> bool:
    """Whether a listening socket already holds ``port`` on this host (any address).

    Binds the wildcard address with ``SO_REUSEADDR``, as PyTorch's TCPStore does, so a port
    held only by connections in TIME_WAIT counts as free; closes the socket at once.
    """
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))  # noqa: S104
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def _port(facts: Facts) -> list[Finding]:
    """The rendezvous port is already taken on the primary (live host only)."""
    config = facts.config
    if (
        config is None
        or not facts.root.is_live
        or not config.is_multi_node
        or not config.is_primary
        or facts.in_torchrun_worker  # torchrun's agent holds the port on purpose
    ):
        return []
    try:
        family = (socket.AF_INET6 if ipaddress.ip_address(config.primary_addr).version == 6
                  else socket.AF_INET)
    except ValueError:
        family = socket.AF_INET
    if not port_in_use(config.primary_port, family=family):
        return []
    variable = "PRIMARY_PORT" if facts.runpod else "MASTER_PORT"
    return [Finding.of(
        "primary-port-in-use",
        f"{variable}={config.primary_port} is already bound on this node: the rendezvous "
        "fails with 'errno: 98 - Address already in use'",
        (f"binding port {config.primary_port} failed with EADDRINUSE",),
        f"find the holder (ss -ltnp 'sport = :{config.primary_port}') and stop it, or use "
        f"another port on every node (export {variable}=...)",
    )]


def _launcher(facts: Facts) -> list[Finding]:
    """The node contract is set, but this shell was not started by a launcher."""
    config = facts.config
    if config is None or not config.is_multi_node or config.source not in ("runpod", "generic"):
        return []
    if facts.environ.get("RANK") is not None or facts.environ.get("LOCAL_RANK") is not None:
        return []
    torchrun = command("torchrun", *config.torchrun_args(), "train.py")
    evidence = [f"source: {config.source}", "RANK and LOCAL_RANK are unset"]
    fix = f"clusterenv launch -- train.py   (or: {torchrun})"
    missing = _torch_missing(facts)
    if missing is not None:  # the fix must run here: say what it needs first
        evidence.append(missing)
        fix = ("install PyTorch in this Python environment (pip install torch), then "
               f"clusterenv launch -- train.py   (or: {torchrun})")
    return [Finding.of(
        "launcher-missing",
        "the cluster variables are set but no per-process ranks: start training with torchrun "
        "(plain `python train.py` fails with 'environment variable RANK expected, but not set')",
        tuple(evidence), fix,
    )]


def _torch_missing(facts: Facts) -> str | None:
    """Why ``clusterenv launch`` could not start torchrun here, or None when it can (or this is
    a snapshot, whose Python environment is not this one)."""
    if not facts.root.is_live:
        return None
    import importlib.util  # noqa: PLC0415  # only when the finding is made
    import sys  # noqa: PLC0415

    if importlib.util.find_spec("torch") is not None:
        return None
    if which("torchrun", facts.environ.get("PATH")) is not None:
        return None
    return (f"no torchrun on PATH, and this Python ({sys.executable}) cannot import torch: "
            "clusterenv launch needs one of them")


def host_checks(facts: Facts) -> list[Finding]:
    """Doctor's host checks."""
    return [*_gpus(facts), *_shm(facts), *_port(facts), *_launcher(facts)]


def oversized_files(facts: Facts) -> list[Finding]:
    """Files that were not read because they are larger than clusterenv reads of them: here
    (:attr:`Root.oversized`), or when a snapshot was captured (its ``host.json`` ``skipped``).
    Run after every other check, which is what reads the files."""
    try:
        recorded = facts.root.host.get("skipped")
    except DiscoveryError:
        recorded = None
    skipped = dict(facts.root.oversized)
    if isinstance(recorded, dict):
        skipped.update({str(k): v for k, v in recorded.items() if isinstance(v, int)})
    return [Finding.of(
        "file-too-large",
        f"/{name} was not read: it is larger than {format_size_limit(limit)}, the most "
        "clusterenv reads of it, so the checks that need it were skipped",
        (f"/{name}: over {limit} bytes",),
        f"check /{prose(name)} (a file that big is usually generated by mistake); the checks "
        "that read it: " + _READERS.get(name, "see the documentation of the file"),
    ) for name, limit in sorted(skipped.items())[:16]]


#: Which checks read a file that may be skipped for its size.
_READERS = {
    "etc/hosts": "Gloo's binding (gloo-ifname-unset) and host names that resolve to loopback "
                 "(hostname-loopback, config-loopback-primary)",
}
