"""Host facts that decide whether multi-node training can run fast: GPUs, ``/dev/shm``,
locked-memory limits, CAP_IPC_LOCK, GPUDirect RDMA and the NCCL configuration files.

Facts that are files (``/proc/driver/nvidia``, ``/sys/module/nvidia_peermem``,
``/etc/nccl.conf``) are read under ``root``; facts that belong to the running process
(memlock limits, capabilities, ``/dev/shm`` size, host name) come from the process on the live
host and from the snapshot's ``.clusterenv/host.json`` when ``root`` is a snapshot.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusterenv._gpus import visible_gpu_count
from clusterenv._jsonable import json_fields
from clusterenv._root import Root, as_root

__all__ = [
    "ENVIRONMENT",
    "HostFacts",
    "NcclConfFile",
    "format_bytes",
    "live_process_facts",
    "nccl_conf_files",
    "nccl_conf_values",
    "software_versions",
]

#: The provenance :func:`nccl_conf_values` gives a value that came from the process environment.
ENVIRONMENT = "environment"

# Where NCCL looks for a loaded peer-memory module, in NCCL's order (src/transport/net_ib/gdr.cc):
# the legacy Mellanox nv_peer_mem paths first, then the driver's own nvidia_peermem.
_GPUDIRECT_PATHS = (
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "/sys/module/nvidia_peermem/version",
)
_CAP_IPC_LOCK = 14  # bit in CapEff (include/uapi/linux/capability.h)
_NCCL_LINE_MAX = 1023  # NCCL copies names and values into 1024-byte buffers
_MAX_CONF_BYTES = 1024 * 1024
_DRIVER_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9]+(?:\.[0-9]+)+)")
_ANY_VERSION = re.compile(r"\s([0-9]{2,4}\.[0-9]+(?:\.[0-9]+)?)\s")


@dataclass(frozen=True, slots=True)
class NcclConfFile:
    """One NCCL configuration file that exists, with the assignments NCCL would take from it.

    Attributes:
        path: The file as NCCL opens it, e.g. ``"/etc/nccl.conf"`` or ``"/home/ada/.nccl.conf"``.
        origin: Why NCCL reads it: ``"NCCL_CONF_FILE"``, ``"home"`` (``~/.nccl.conf``) or
            ``"system"`` (``/etc/nccl.conf``).
        values: ``VAR -> value`` in NCCL's own reading: ``#`` starts a comment only at the start
            of a line, nothing is trimmed or unquoted, and the first assignment of a name wins,
            e.g. ``{"NCCL_SOCKET_IFNAME": "=ens1f0"}``.
    """

    path: str
    origin: str
    values: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What this host offers a distributed job beyond its network.

    Attributes:
        gpus: GPUs this process can see (installed, narrowed by ``CUDA_VISIBLE_DEVICES``), e.g. 8.
        gpus_installed: GPUs the NVIDIA driver lists (those given to this container), e.g. 8.
        gpu_models: The distinct GPU models, in PCI order, e.g. ``("NVIDIA H100 80GB HBM3",)``.
        driver_version: NVIDIA driver version, e.g. ``"580.95.05"``; None without a driver.
        open_kernel_module: True for the open GPU kernel module (DMA-BUF GPUDirect works
            without ``nvidia_peermem``), False for the proprietary one, None without a driver.
        shm_bytes: Size of ``/dev/shm`` in bytes, e.g. ``68719476736``; None when unknown.
            Docker's default of 64 MiB makes NCCL fail with "unhandled system error".
        memlock_soft: RLIMIT_MEMLOCK soft limit in bytes; None means unlimited (what RDMA needs).
        memlock_hard: RLIMIT_MEMLOCK hard limit in bytes; None means unlimited.
        memlock_known: False when a snapshot did not record the limits (then both read None).
        cap_ipc_lock: Whether the process holds CAP_IPC_LOCK (which lifts the memlock limit for
            RDMA registrations); None when unknown.
        gpudirect: Whether a GPUDirect RDMA peer-memory module is loaded, as NCCL checks it.
        gpudirect_path: The path that showed it, e.g. ``"/sys/module/nvidia_peermem/version"``.
        nccl_conf_files: The NCCL configuration files that exist, in NCCL's precedence
            (``NCCL_CONF_FILE`` or ``~/.nccl.conf`` first, then ``/etc/nccl.conf``).
        hostname: The host name, e.g. ``"node-0"``; None when a snapshot did not record it.
    """

    gpus: int
    gpus_installed: int
    gpu_models: tuple[str, ...]
    driver_version: str | None
    open_kernel_module: bool | None
    shm_bytes: int | None
    memlock_soft: int | None
    memlock_hard: int | None
    memlock_known: bool
    cap_ipc_lock: bool | None
    gpudirect: bool
    gpudirect_path: str | None
    nccl_conf_files: tuple[NcclConfFile, ...]
    hostname: str | None

    def nccl_conf_values(
        self, environ: Mapping[str, str] | None = None
    ) -> dict[str, tuple[str, str]]:
        """Each NCCL setting's effective value and provenance; see :func:`nccl_conf_values`."""
        return nccl_conf_values(self.nccl_conf_files, environ=environ)

    @classmethod
    def detect(
        cls,
        *,
        environ: Mapping[str, str] | None = None,
        root: str | os.PathLike[str] = "/",
    ) -> HostFacts:
        """Read the host facts of ``root`` (``/`` or a host snapshot).

        Args:
            environ: The environment (``CUDA_VISIBLE_DEVICES``, ``NCCL_CONF_FILE``, ``HOME``);
                None means ``os.environ`` at call time.
            root: ``/`` for this host, or a snapshot directory.

        Raises:
            DiscoveryError: When ``root`` or its ``host.json`` cannot be read.
        """
        env = os.environ if environ is None else environ
        host = as_root(root)
        installed = len(host.listdir("proc/driver/nvidia/gpus"))
        version, open_module = _parse_nvidia_version(host.read("proc/driver/nvidia/version"))
        gpudirect_path = next((p for p in _GPUDIRECT_PATHS if _is_file(host, p)), None)
        # The live process's facts take the shape a snapshot records them in, and are read alike.
        recorded = live_process_facts(host) if host.is_live else host.host
        memlock_known, soft, hard = _recorded_memlock(recorded.get("memlock"))
        cap = recorded.get("cap_ipc_lock")
        name = recorded.get("hostname")
        return cls(
            gpus=visible_gpu_count(env, host),
            gpus_installed=installed,
            gpu_models=_gpu_models(host),
            driver_version=version,
            open_kernel_module=open_module,
            shm_bytes=_non_negative_int(recorded.get("shm_bytes")),
            memlock_soft=soft,
            memlock_hard=hard,
            memlock_known=memlock_known,
            cap_ipc_lock=cap if isinstance(cap, bool) else None,
            gpudirect=gpudirect_path is not None,
            gpudirect_path=gpudirect_path,
            nccl_conf_files=nccl_conf_files(environ=env, root=host),
            hostname=name if isinstance(name, str) and name else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


def live_process_facts(root: str | os.PathLike[str] = "/") -> dict[str, Any]:
    """What belongs to the running process rather than to a file, in ``host.json``'s shape.

    ``memlock`` (``{"soft": None, "hard": 65536}``, None = unlimited), ``cap_ipc_lock``,
    ``shm_bytes`` (the size of ``/dev/shm``) and ``hostname``; a fact that cannot be read is
    left out. A snapshot records exactly this (``clusterenv capture``), and
    :meth:`HostFacts.detect` reads the live host through it.

    Args:
        root: ``/`` (the default), or another root whose ``proc/self/status`` to read.
    """
    host = as_root(root)
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    facts: dict[str, Any] = {
        "memlock": {
            "soft": None if soft == resource.RLIM_INFINITY else soft,
            "hard": None if hard == resource.RLIM_INFINITY else hard,
        },
        "hostname": socket.gethostname(),
    }
    capability = _parse_cap_ipc_lock(host.read("proc/self/status"))
    if capability is not None:
        facts["cap_ipc_lock"] = capability
    try:
        stat = os.statvfs(host.join("dev/shm"))
    except (OSError, ValueError):
        pass
    else:
        facts["shm_bytes"] = stat.f_blocks * stat.f_frsize
    return facts


def software_versions(root: str | os.PathLike[str] = "/") -> dict[str, str | None]:
    """The software a bug report needs, in ``host.json``'s ``software`` shape, e.g.
    ``{"python": "3.11.7", "torch": "2.13.0+cpu", "os": "Ubuntu 24.04.1 LTS",
    "kernel": "6.8.0-49-generic", "machine": "x86_64"}``.

    On the live host: this interpreter, the installed ``torch`` distribution's metadata (None
    when it is not installed; torch itself is never imported, which takes seconds), the
    ``PRETTY_NAME`` of ``/etc/os-release`` and ``uname``. On a snapshot: what ``clusterenv
    capture`` recorded; a snapshot that recorded nothing (made before 0.1.0) gives ``{}``.

    Args:
        root: ``/`` (the default), or a host snapshot.
    """
    host = as_root(root)
    if not host.is_live:
        recorded = host.host.get("software")
        if not isinstance(recorded, Mapping):
            return {}
        return {key: value if isinstance(value, str) else None for key, value in
                recorded.items() if key in _SOFTWARE}
    from importlib import metadata  # noqa: PLC0415  # a few ms, paid only by those who ask

    try:
        torch: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    uname = os.uname()
    return {
        "python": platform.python_version(),
        "torch": torch,
        "os": _parse_os_release(host.read("etc/os-release")),
        "kernel": uname.release,
        "machine": uname.machine,
    }


_SOFTWARE = ("python", "torch", "os", "kernel", "machine")


def _parse_os_release(text: str | None) -> str | None:
    """``PRETTY_NAME`` of an ``os-release`` text (``PRETTY_NAME="Ubuntu 24.04.1 LTS"``), else
    ``NAME VERSION_ID``; None when it names neither."""
    fields: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    if fields.get("PRETTY_NAME"):
        return fields["PRETTY_NAME"]
    name = " ".join(v for v in (fields.get("NAME"), fields.get("VERSION_ID")) if v)
    return name or None


def nccl_conf_files(
    *,
    environ: Mapping[str, str] | None = None,
    root: str | os.PathLike[str] = "/",
) -> tuple[NcclConfFile, ...]:
    """The NCCL configuration files that exist, in the order NCCL applies them.

    NCCL (``src/misc/param.cc``) reads ``$NCCL_CONF_FILE`` when it is set and non-empty, else
    ``~/.nccl.conf``, and then ``/etc/nccl.conf``; a variable already set is never overwritten,
    so the earlier file wins and the process environment beats both.

    ``~`` is ``HOME`` from ``environ``. NCCL itself asks the password database
    (``getpwuid(getuid())``), which agrees with ``HOME`` except in unusual setups (a ``HOME``
    pointed elsewhere, or a container user without a passwd entry, for whom NCCL reads no
    home file at all).
    """
    env = os.environ if environ is None else environ
    host = as_root(root)
    candidates: list[tuple[str, str]] = []
    user_file = env.get("NCCL_CONF_FILE", "")
    if user_file:
        if not os.path.isabs(user_file) and host.is_live:
            user_file = os.path.abspath(user_file)  # NCCL opens it relative to its cwd
        candidates.append((user_file, "NCCL_CONF_FILE"))
    elif env.get("HOME"):
        candidates.append((f"{env['HOME'].rstrip('/')}/.nccl.conf", "home"))
    candidates.append(("/etc/nccl.conf", "system"))
    files = []
    for path, origin in candidates:
        text = host.read_raw(path, max_bytes=_MAX_CONF_BYTES)  # NCCL keeps trailing blanks
        if text is not None:
            files.append(NcclConfFile(path=path, origin=origin, values=_parse_nccl_conf(text)))
    return tuple(files)


def nccl_conf_values(
    files: Sequence[NcclConfFile], *, environ: Mapping[str, str] | None = None
) -> dict[str, tuple[str, str]]:
    """What NCCL will see for each setting, and where it comes from.

    Every ``NCCL_*`` variable of the environment and every variable a config file sets, mapped
    to ``(value, provenance)``; provenance is :data:`ENVIRONMENT` (``"environment"``) or the
    path of the file. The environment wins, then the files in the order given (as returned by
    :func:`nccl_conf_files`). A value from a file counts as set by the user.

    Example::

        >>> nccl_conf_values([NcclConfFile("/etc/nccl.conf", "system",
        ...                                {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "=mlx5_0"})],
        ...                  environ={"NCCL_DEBUG": "INFO"})
        {'NCCL_DEBUG': ('INFO', 'environment'), 'NCCL_IB_HCA': ('=mlx5_0', '/etc/nccl.conf')}
    """
    env = os.environ if environ is None else environ
    values: dict[str, tuple[str, str]] = {}
    for conf in files:
        for name, value in conf.values.items():
            if name in env:
                values.setdefault(name, (env[name], ENVIRONMENT))
            else:
                values.setdefault(name, (value, conf.path))
    for name, value in env.items():
        if name.startswith("NCCL_"):
            values.setdefault(name, (value, ENVIRONMENT))
    return dict(sorted(values.items()))


def _parse_nccl_conf(text: str) -> dict[str, str]:
    """``VAR=value`` lines as NCCL's ``setEnvFile`` reads them.

    A line starting with ``#`` is a comment; a line without ``=`` is skipped; the name is
    everything before the first ``=`` and the value everything after it, untrimmed and unquoted
    (``NCCL_SOCKET_IFNAME==ens1f0`` sets ``=ens1f0``). NCCL applies each line with
    ``setenv(..., 0)``, so the first assignment of a name wins.
    """
    values: dict[str, str] = {}
    for line in text.split("\n"):
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        name = name[:_NCCL_LINE_MAX]
        if name and "\0" not in name:  # setenv refuses an empty name
            values.setdefault(name, value[:_NCCL_LINE_MAX])
    return values


def _parse_nvidia_version(text: str | None) -> tuple[str | None, bool | None]:
    """Driver version and whether it is the open kernel module (``/proc/driver/nvidia/version``).

    ``"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ..."``
    gives ``("580.95.05", True)``; the proprietary module reads
    ``"NVIDIA UNIX x86_64 Kernel Module  535.104.05  ..."`` and gives ``(..., False)``.
    """
    if not text:
        return None, None
    line = next((ln for ln in text.splitlines() if ln.startswith("NVRM")), text.splitlines()[0])
    match = _DRIVER_VERSION.search(line) or _ANY_VERSION.search(f" {line} ")
    version = match.group(1) if match else None
    if "Open Kernel Module" in line:
        return version, True
    if "Kernel Module" in line:
        return version, False
    return version, None


def _parse_cap_ipc_lock(status: str | None) -> bool | None:
    """Whether bit 14 (CAP_IPC_LOCK) is set in ``CapEff`` of a ``/proc/<pid>/status`` text."""
    if status is None:
        return None
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            value = line.partition(":")[2].strip()
            try:
                return bool(int(value, 16) >> _CAP_IPC_LOCK & 1)
            except ValueError:
                return None
    return None


def _parse_gpu_model(text: str | None) -> str | None:
    """The ``Model:`` of a ``/proc/driver/nvidia/gpus/<bdf>/information`` text."""
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Model":
            model = value.strip()
            return model if model and model.isprintable() else None
    return None


def _gpu_models(host: Root) -> tuple[str, ...]:
    models: dict[str, None] = {}
    for bdf in host.listdir("proc/driver/nvidia/gpus"):
        model = _parse_gpu_model(host.read(f"proc/driver/nvidia/gpus/{bdf}/information"))
        if model is not None:
            models[model] = None
    return tuple(models)


def _is_file(host: Root, path: str) -> bool:
    """Whether ``path`` is a file under the root, as NCCL's ``access(F_OK)`` would find it."""
    return host.is_file(path)


def _recorded_memlock(value: Any) -> tuple[bool, int | None, int | None]:
    """``(known, soft, hard)`` from host.json ``memlock`` (``{"soft": null, "hard": 65536}``)."""
    if not isinstance(value, Mapping) or "soft" not in value or "hard" not in value:
        return False, None, None
    soft, hard = value["soft"], value["hard"]
    if not all(v is None or (type(v) is int and v >= 0) for v in (soft, hard)):
        return False, None, None
    return True, soft, hard


def _non_negative_int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def format_bytes(n: int) -> str:
    """A size for people, in binary units: ``format_bytes(64 << 20)`` is ``"64 MiB"``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"
