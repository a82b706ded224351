"""Write a host snapshot of this host, or re-capture another snapshot.

A snapshot is the part of ``/`` that clusterenv reads (``sys/class/net``, ``sys/class/infiniband``,
``dev/infiniband``, the NVIDIA driver's ``/proc`` files, the routing table, NCCL config files)
plus ``.clusterenv/host.json`` for what is not a file (addresses, memlock, CAP_IPC_LOCK,
``/dev/shm``, hostname, environment). Every detector replays it with ``root=DIR``, and
``clusterenv --root DIR`` runs any verb against it, which is how a bug report becomes a test::

    from clusterenv.capture import capture

    path = capture("/tmp/node0-snapshot")      # on the node that misbehaves
    NetworkInterfaces.detect(root=path)        # anywhere else, the same answer

Only cluster-relevant environment variables are recorded, never one whose name looks like a
secret; MACs, GUIDs and GPU UUIDs are replaced by placeholders (see :mod:`clusterenv._scrub`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import re
import shutil
import tempfile
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from clusterenv import __version__
from clusterenv._addresses import address_map, parse_address
from clusterenv._root import HOST_JSON, SNAPSHOT_FORMAT, Root, as_root
from clusterenv._routes import read_table
from clusterenv._scrub import (
    Scrubber,
    cluster_environ,
    is_cluster_name,
    is_secret_name,
    scrub_tree,
    scrub_value,
)
from clusterenv.errors import ClusterEnvError
from clusterenv.host import live_process_facts, software_versions
from clusterenv.nccl.version import detect_nccl_versions

__all__ = ["CaptureError", "capture"]

# Attributes of sys/class/net/<if> worth keeping; identifiers and free text (ifalias) are not.
_NET_FILES = (
    "operstate",
    "carrier",
    "mtu",
    "speed",
    "duplex",
    "address",
    "broadcast",
    "addr_len",
    "addr_assign_type",
    "type",
    "ifindex",
    "iflink",
    "flags",
    "dev_id",
    "dev_port",
    "link_mode",
    "tx_queue_len",
    "phys_port_name",
    "name_assign_type",
    "uevent",
)
_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IB_DEVICE_FILES = ("node_type", "hca_type", "hw_rev", "fw_ver", "board_id")
_IB_GUID_FILES = ("node_guid", "sys_image_guid")
_IB_PORT_FILES = ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid", "cap_mask")


class CaptureError(ClusterEnvError, OSError):
    """A snapshot could not be written where asked; ``path`` names the place."""

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


def capture(
    dest: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    root: str | os.PathLike[str] = "/",
) -> Path:
    """Write a host snapshot of ``root`` into ``dest`` and return its path.

    The snapshot is assembled beside ``dest`` and moved into place, so a failed capture leaves
    nothing half-written. ``dest`` may be missing, an empty directory, or an earlier snapshot
    (which is replaced).

    Args:
        dest: Directory to write, e.g. ``"node0-snapshot"``.
        environ: The environment to record (filtered to cluster variables). None means the
            environment of the host being read: ``os.environ`` on ``/``, the recorded one of a
            snapshot ``root``.
        root: ``/`` for this host, or a snapshot to re-capture.

    Returns:
        The snapshot directory, e.g. ``PosixPath('node0-snapshot')``.

    Raises:
        CaptureError: When ``dest`` is a file, a non-empty directory that is not a snapshot,
            the ``root`` itself, or cannot be written.
        DiscoveryError: When ``root`` cannot be read.
    """
    host = as_root(root)
    if environ is None:
        environ = os.environ if host.is_live else (host.recorded_environ() or {})
    target = Path(dest)
    try:
        _check_destination(target, host)
    except OSError as e:
        if isinstance(e, CaptureError):
            raise
        raise CaptureError(  # e.g. a destination this user may not list
            f"cannot use {str(target)!r} as a snapshot destination: {e.strerror or e}; choose "
            "a directory this user can read and write",
            path=str(target),
        ) from e
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(target)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.capture-{os.getpid()}-",
                                        dir=target.parent))
    except OSError as e:
        raise CaptureError(
            f"cannot write a snapshot at {str(target)!r}: {e.strerror or e}; choose a directory "
            "this user can write",
            path=str(target),
        ) from e
    try:
        _Writer(host, staging, environ).write_all()
        _move_into_place(staging, target)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, CaptureError):
            raise
        kept = " (the previous snapshot there is unchanged)" if _is_snapshot(target) else ""
        raise CaptureError(  # ENOSPC, EROFS, EACCES, EDQUOT: the destination, not the output
            f"cannot write the snapshot {str(target)!r}: {e.strerror or e}{kept}; free some "
            "space or choose another directory",
            path=str(target),
        ) from e
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _is_snapshot(path: Path) -> bool:
    return (path / HOST_JSON).is_file()


def _check_destination(target: Path, host: Root) -> None:
    if target.exists() and not target.is_dir():
        raise CaptureError(
            f"snapshot destination {str(target)!r} is a file; give a new or empty directory",
            path=str(target),
        )
    if target.is_dir() and target.resolve() == host.path.resolve():
        raise CaptureError(
            f"snapshot destination {str(target)!r} is the root being captured; give another "
            "directory",
            path=str(target),
        )
    if target.is_dir() and any(target.iterdir()) and not _is_snapshot(target):
        raise CaptureError(
            f"refusing to write a snapshot into {str(target)!r}: it is not empty and not a "
            f"snapshot (no {HOST_JSON}); give a new or empty directory",
            path=str(target),
        )


def _remove_abandoned(target: Path) -> None:
    """Remove what a killed capture of ``target`` left beside it: staging directories
    (``.NAME.capture-PID-…``) and replaced snapshots (``.NAME.old.PID``) of processes that no
    longer run."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(?:capture-(\d+)-.+|old\.(\d+))")
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for name in names:
        match = pattern.fullmatch(name)
        if match is None:
            continue
        pid = int(match.group(1) or match.group(2))
        if pid != os.getpid() and not _running(pid):
            shutil.rmtree(target.parent / name, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it runs, as another user
        return True
    return True


def _move_into_place(staging: Path, target: Path) -> None:
    staging.chmod(0o755)  # mkdtemp makes it private; a snapshot is meant to be shared
    if not target.exists():
        staging.rename(target)
        return
    if _is_snapshot(target):
        old = target.with_name(f".{target.name}.old.{os.getpid()}")
        target.rename(old)
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)
        return
    target.rmdir()  # empty, checked before
    staging.rename(target)


class _Writer:
    """Copies what detection reads from ``host`` into ``out``, scrubbing as it goes."""

    def __init__(self, host: Root, out: Path, environ: Mapping[str, str]):
        self.host = host
        self.out = out
        self.environ = environ
        self.scrub = Scrubber()

    def write_all(self) -> None:
        addresses = address_map(self.host)
        self.network()
        self.infiniband(addresses)
        self.gpus()
        for relative in ("proc/net/route", "proc/net/ipv6_route"):
            text = read_table(self.host, relative)
            if text:
                self.put(relative, text)
        for relative in ("etc/hostname", "etc/hosts"):  # how Gloo resolves this node's name
            self.copy(relative)
        home = self.nccl_configs()
        nccl = self.nccl_libraries()
        self.host_json(addresses, home, nccl)

    # -- files ------------------------------------------------------------------------------

    def inside(self, relative: str) -> Path:
        """``relative`` under the snapshot; a path that climbs out (``..``) is refused."""
        parts = relative.strip("/").split("/")
        if ".." in parts or not relative.strip("/"):
            raise CaptureError(
                f"refusing to write {relative!r} into the snapshot: the path leaves it",
                path=relative,
            )
        return self.out.joinpath(*parts)

    def put(self, relative: str, text: str) -> None:
        path = self.inside(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")

    def mark(self, relative: str) -> None:
        self.inside(relative).mkdir(parents=True, exist_ok=True)

    def copy(self, relative: str) -> str | None:
        text = self.host.read(relative)
        if text is not None:
            self.put(relative, text)
        return text

    def network(self) -> None:
        for name in self.host.listdir("sys/class/net"):
            base = f"sys/class/net/{name}"
            if not self.host.is_dir(base):
                continue  # e.g. bonding_masters
            self.mark(base)
            for attribute in _NET_FILES:
                text = self.host.read(f"{base}/{attribute}")
                if text is None:
                    continue  # EINVAL: speed of a link that is down, carrier of an admin-down one
                if attribute == "address":
                    text = self.scrub.hardware_address(text)
                self.put(f"{base}/{attribute}", text)
            for marker in ("device", "bridge"):
                if self.host.exists(f"{base}/{marker}"):
                    self.mark(f"{base}/{marker}")
            if self.host.is_dir(f"{base}/bonding"):
                self.mark(f"{base}/bonding")
                self.copy(f"{base}/bonding/slaves")
                self.copy(f"{base}/bonding/mode")
            for member in self.host.listdir(f"{base}/brif"):
                self.mark(f"{base}/brif/{member}")
            master = self.host.link_name(f"{base}/master")
            if master:
                os.symlink(f"../{master}", self.inside(f"{base}/master"))

    def infiniband(self, addresses: Mapping[str, list[str]]) -> None:
        # GIDs that are configured IPv6 addresses stay as they are, like the addresses.
        keep = {
            a.ip
            for items in addresses.values()
            for a in map(parse_address, items)
            if isinstance(a, ipaddress.IPv6Interface) and a.ip.packed[11:13] != b"\xff\xfe"
        }
        for device in self.host.listdir("sys/class/infiniband"):
            base = f"sys/class/infiniband/{device}"
            if not self.host.is_dir(base):
                continue
            self.mark(base)
            for attribute in _IB_DEVICE_FILES:
                self.copy(f"{base}/{attribute}")
            for attribute in _IB_GUID_FILES:
                text = self.host.read(f"{base}/{attribute}")
                if text is not None:
                    self.put(f"{base}/{attribute}", self.scrub.guid(text))
            if self.host.exists(f"{base}/device"):
                self.mark(f"{base}/device")
            for netdev in self.host.listdir(f"{base}/device/net"):
                self.mark(f"{base}/device/net/{netdev}")
                self.copy(f"{base}/device/net/{netdev}/dev_port")  # which port it serves
            for verbs in self.host.listdir(f"{base}/device/infiniband_verbs"):
                self.mark(f"{base}/device/infiniband_verbs/{verbs}")
            for port in self.host.listdir(f"{base}/ports"):
                self.ib_port(f"{base}/ports/{port}", keep)
        for entry in self.host.listdir("sys/class/infiniband_verbs"):
            relative = f"sys/class/infiniband_verbs/{entry}"
            if self.host.is_dir(relative):
                self.copy(f"{relative}/ibdev")
                self.copy(f"{relative}/abi_version")
            else:
                self.copy(relative)
        for node in self.host.listdir("dev/infiniband"):
            if node.startswith("uverbs") and not self.host.device_opens(f"dev/infiniband/{node}"):
                continue  # present but refused (device cgroup): a snapshot shows it absent
            self.put_empty(f"dev/infiniband/{node}")

    def ib_port(self, base: str, keep: AbstractSet[ipaddress.IPv6Address]) -> None:
        for attribute in _IB_PORT_FILES:
            self.copy(f"{base}/{attribute}")
        for index in self.host.listdir(f"{base}/gids"):
            text = self.host.read(f"{base}/gids/{index}")
            if text is not None:
                self.put(f"{base}/gids/{index}", self.scrub.gid(text, keep))
        for table in ("types", "ndevs"):
            self.mark(f"{base}/gid_attrs/{table}")
            for index in self.host.listdir(f"{base}/gid_attrs/{table}"):
                self.copy(f"{base}/gid_attrs/{table}/{index}")  # empty slots fail: left out

    def put_empty(self, relative: str) -> None:
        path = self.inside(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def gpus(self) -> None:
        self.copy("sys/module/nvidia_peermem/version")
        for peer in self.host.listdir("sys/kernel/mm/memory_peers"):
            self.copy(f"sys/kernel/mm/memory_peers/{peer}/version")
        self.copy("proc/driver/nvidia/version")
        for gpu in self.host.listdir("proc/driver/nvidia/gpus"):
            relative = f"proc/driver/nvidia/gpus/{gpu}/information"
            text = self.host.read(relative)
            if text is not None:
                self.put(relative, self.scrub.gpu_information(text))

    def nccl_configs(self) -> str | None:
        """Copy ``/etc/nccl.conf``, ``$NCCL_CONF_FILE`` and ``~/.nccl.conf``; return the home
        directory when a ``~/.nccl.conf`` was found (its path needs ``HOME`` to replay)."""
        paths = ["etc/nccl.conf"]
        conf_file = self.environ.get("NCCL_CONF_FILE", "")
        if conf_file.startswith("/"):
            paths.append(conf_file)
        home = self.environ.get("HOME") or (_user_home() if self.host.is_live else None)
        user_conf = f"{home.rstrip('/')}/.nccl.conf" if home and home.startswith("/") else None
        if user_conf:
            paths.append(user_conf)
        found_home = None
        for relative in paths:
            if ".." in relative.split("/"):
                continue  # only plain absolute paths; never read or write outside the roots
            text = self.host.read(relative)
            if text is None:
                continue
            self.put(relative.lstrip("/"), _setting_lines(text))
            if relative == user_conf:
                found_home = home
        return found_home

    def nccl_libraries(self) -> list[dict[str, str]]:
        """Leave an empty ``libnccl.so.2.X.Y`` where one was found; return every piece of NCCL
        version evidence (pip-installed NCCL has no version in its file name)."""
        evidence = detect_nccl_versions(self.environ, self.host)
        for item in evidence:
            if (
                item.source.startswith("/")
                and "/libnccl.so." in item.source
                and ".." not in item.source.split("/")
            ):
                self.put_empty(item.source.lstrip("/"))
        return [{"version": str(item), "source": item.source} for item in evidence]

    def host_json(
        self, addresses: Mapping[str, list[str]], home: str | None, nccl: list[dict[str, str]]
    ) -> None:
        data: dict[str, Any] = {"format": SNAPSHOT_FORMAT, "clusterenv": __version__}
        data["addresses"] = {
            name: [self._scrub_address(a) for a in items] for name, items in addresses.items()
        }
        if nccl:
            data["nccl_versions"] = nccl
        if self.host.is_live:
            data.update(live_process_facts(self.host))
            data["software"] = software_versions(self.host)  # the versions a bug report needs
        else:
            for key in ("memlock", "cap_ipc_lock", "shm_bytes", "hostname", "nccl_versions",
                        "software"):
                if key in self.host.host:
                    data[key] = self.host.host[key]
        environ = cluster_environ(self.environ)
        if home is not None:
            environ["HOME"] = home
        data["environ"] = dict(sorted(environ.items()))
        if self.host.oversized:
            # Left out for size: a replay says which checks could not be made.
            data["skipped"] = dict(sorted(self.host.oversized.items()))
        self.put(HOST_JSON, json.dumps(scrub_tree(data), indent=1, sort_keys=True))

    def _scrub_address(self, text: str) -> str:
        address = parse_address(text)
        if address is None or address.version == 4:
            return text
        return self.scrub.ipv6_interface(address).with_prefixlen


def _setting_lines(text: str) -> str:
    """An NCCL config reduced to what NCCL reads from it that a snapshot may keep: the
    ``NAME=value`` lines whose name is a cluster variable (``NCCL_*``, …) and does not look
    secret, URL credentials replaced. Comments and every other line (a ``DATABASE_URL``, a
    netrc or git-credential line) are left out."""
    kept = []
    for line in text.splitlines():
        name, equals, value = line.partition("=")
        if equals and _SETTING_NAME.fullmatch(name) and is_cluster_name(name) \
                and not is_secret_name(name):
            kept.append(f"{name}={scrub_value(value)}")
    return "\n".join(kept)


def _user_home() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None
