"""Build fake hosts (host snapshots) in code, for our tests and for yours.

A snapshot is a directory laid out like ``/`` holding only the files that detection reads, plus
``.clusterenv/host.json`` for what is not a file (addresses, limits, hostname, environment).
Every detector of clusterenv takes ``root=`` and reads such a directory exactly as it reads the
live host, so a framework that depends on clusterenv can test its own cluster logic without a
cluster::

    from clusterenv.testing import HostBuilder, gid, port

    host = (
        HostBuilder(tmp_path)
        .loopback()
        .interface("eth0", addresses=["172.20.0.5/16"])
        .interface("ens1", addresses=["10.65.0.2/24"], mtu=9000)
        .rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1",
                                    gids=[gid(3, "::ffff:10.65.0.2", "RoCE v2", "ens1")]))
        .gpus(8)
        .environ({"PRIMARY_ADDR": "10.65.0.2", "NUM_NODES": "2"})
    )
    RdmaInfo.detect(root=host.root)

Values are written in the kernel's formats (``4: ACTIVE``, uncompressed GIDs, ``400 Gb/sec (4X
NDR)``), so what a test builds is what a real machine shows.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typing_extensions import Self

from clusterenv._root import HOST_JSON, SNAPSHOT_FORMAT

__all__ = [
    "ARPHRD_ETHER",
    "ARPHRD_INFINIBAND",
    "ARPHRD_LOOPBACK",
    "PHYS_STATES",
    "PORT_STATES",
    "GidSpec",
    "HostBuilder",
    "PortSpec",
    "gid",
    "port",
]

ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772

#: ``ports/N/state`` values as the kernel numbers them (``"4: ACTIVE"``).
PORT_STATES: Mapping[str, int] = {
    "DOWN": 1,
    "INIT": 2,
    "ARMED": 3,
    "ACTIVE": 4,
    "ACTIVE_DEFER": 5,
}
#: ``ports/N/phys_state`` values as the kernel numbers them (``"5: LinkUp"``).
PHYS_STATES: Mapping[str, int] = {
    "Sleep": 1,
    "Polling": 2,
    "Disabled": 3,
    "PortConfigurationTraining": 4,
    "LinkUp": 5,
    "LinkErrorRecovery": 6,
    "Phy Test": 7,
}


@dataclass(frozen=True)
class GidSpec:
    """One non-empty GID table entry: index, address (any IPv6 spelling), type and netdev."""

    index: int
    address: str
    type: str = "RoCE v2"
    netdev: str | None = None


def gid(index: int, address: str, type: str = "RoCE v2", netdev: str | None = None) -> GidSpec:
    """A GID entry, e.g. ``gid(3, "::ffff:10.65.0.2", "RoCE v2", "ens1")``."""
    return GidSpec(index, address, type, netdev)


@dataclass(frozen=True)
class PortSpec:
    """One RDMA port, in the words of ``ibstat`` (state names, not numbers)."""

    number: int = 1
    state: str = "ACTIVE"
    phys_state: str = "LinkUp"
    rate: str = "400 Gb/sec (4X NDR)"
    link_layer: str = "InfiniBand"
    netdev: str | None = None
    gids: tuple[GidSpec, ...] = ()
    gid_table_len: int | None = None
    lid: str = "0x0"
    extra_files: Mapping[str, str] = field(default_factory=dict)


def port(
    number: int = 1,
    *,
    state: str = "ACTIVE",
    phys_state: str | None = None,
    rate: str | None = None,
    link_layer: str = "InfiniBand",
    netdev: str | None = None,
    gids: Sequence[GidSpec] | None = None,
    gid_table_len: int | None = None,
) -> PortSpec:
    """An RDMA port with sensible defaults for its link layer.

    A down port gets ``phys_state="Disabled"`` and the meaningless rate real hardware shows
    (``10 Gb/sec`` on InfiniBand, ``40 Gb/sec`` on Ethernet). An InfiniBand port gets a
    link-local ``IB/RoCE v1`` GID at index 0 unless ``gids`` is given; a RoCE port with a
    ``netdev`` gets nothing by default (pass its GID table).
    """
    up = state in ("ACTIVE", "ACTIVE_DEFER", "ARMED", "INIT")
    if phys_state is None:
        phys_state = "LinkUp" if up else "Disabled"
    if rate is None:
        if up:
            rate = "400 Gb/sec (4X NDR)"
        else:
            rate = "10 Gb/sec (4X SDR)" if link_layer == "InfiniBand" else "40 Gb/sec (4X QDR)"
    if gids is None:
        gids = (
            (GidSpec(0, "fe80::a088:c203:63:5a20", "IB/RoCE v1", None),)
            if link_layer == "InfiniBand"
            else ()
        )
    return PortSpec(
        number=number,
        state=state,
        phys_state=phys_state,
        rate=rate,
        link_layer=link_layer,
        netdev=netdev,
        gids=tuple(gids),
        gid_table_len=gid_table_len,
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def _exploded_gid(address: str) -> str:
    """The kernel's ``%pI6`` spelling: eight groups of four hex digits, never compressed."""
    return ipaddress.IPv6Address(address).exploded


class HostBuilder:
    """Writes a host snapshot under ``root``; each method writes at once and returns the builder.

    Args:
        root: The snapshot directory (created if missing). Use it as ``root=`` of any detector.
    """

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._host: dict[str, Any] = {"format": SNAPSHOT_FORMAT}
        self._next_ifindex = 1
        self._next_uverbs = 0
        self._next_gpu = 0
        self._flush()

    # -- host.json -------------------------------------------------------------------------

    def _flush(self) -> None:
        _write(self.root / HOST_JSON, json.dumps(self._host, indent=1, sort_keys=True))

    def environ(self, environ: Mapping[str, str]) -> Self:
        """Record the environment that ``--root`` replays (replaces any recorded before)."""
        self._host["environ"] = dict(environ)
        self._flush()
        return self

    def hostname(self, name: str) -> Self:
        """Record the host name."""
        self._host["hostname"] = name
        self._flush()
        return self

    def memlock(self, soft: int | None, hard: int | None) -> Self:
        """Record RLIMIT_MEMLOCK in bytes; None means unlimited."""
        self._host["memlock"] = {"soft": soft, "hard": hard}
        self._flush()
        return self

    def cap_ipc_lock(self, present: bool = True) -> Self:
        """Record whether the process holds CAP_IPC_LOCK."""
        self._host["cap_ipc_lock"] = present
        self._flush()
        return self

    def shm(self, size_bytes: int) -> Self:
        """Record the size of ``/dev/shm`` in bytes."""
        self._host["shm_bytes"] = size_bytes
        self._flush()
        return self

    def software(self, **versions: str | None) -> Self:
        """Record the versions a bug report needs, as ``clusterenv capture`` does: ``python``,
        ``torch`` (None: not installed), ``os``, ``kernel``, ``machine``, e.g.
        ``.software(python="3.11.7", torch="2.5.1", kernel="6.8.0-49-generic")``."""
        self._host["software"] = dict(versions)
        self._flush()
        return self

    def addresses(self, name: str, addresses: Iterable[str]) -> Self:
        """Record the IP addresses of an interface (``"10.65.0.2/24"``, ``"fe80::1/64"``)."""
        self._host.setdefault("addresses", {})[name] = list(addresses)
        self._flush()
        return self

    # -- network interfaces ----------------------------------------------------------------

    def interface(
        self,
        name: str,
        *,
        addresses: Iterable[str] = (),
        operstate: str = "up",
        mtu: int = 1500,
        speed: int | None = None,
        mac: str | None = None,
        arphrd: int = ARPHRD_ETHER,
        physical: bool = True,
        kind: str | None = None,
        slaves: Sequence[str] = (),
        bridge_ports: Sequence[str] = (),
    ) -> Self:
        """A network interface under ``sys/class/net/NAME`` and its addresses.

        Args:
            name: Interface name, e.g. ``"ens1"``.
            addresses: IP interfaces in CIDR form.
            operstate: ``up``, ``down``, ``unknown``, … as in ``operstate``.
            mtu: The MTU.
            speed: Mb/s; None leaves ``speed`` out, as for bridges and links that are down.
            mac: Hardware address; a made-up one by default (20 bytes for IPoIB).
            arphrd: ARPHRD type number (1 Ethernet, 32 InfiniBand/IPoIB, 772 loopback).
            physical: Whether it has a ``device`` entry (a PCI function).
            kind: ``"bridge"``, ``"bond"``, ``"veth"`` or None, for virtual devices.
            slaves: For a bond, its slave interfaces (written to ``bonding/slaves``).
            bridge_ports: For a bridge, its ports (written under ``brif/``).
        """
        base = self.root / "sys/class/net" / name
        base.mkdir(parents=True, exist_ok=True)
        index = self._next_ifindex
        self._next_ifindex += 1
        if mac is None:
            if arphrd == ARPHRD_INFINIBAND:
                mac = "00:00:10:29:fe:80:00:00:00:00:00:00:a0:88:c2:03:00:63:5a:" + f"{index:02x}"
            elif arphrd == ARPHRD_LOOPBACK:
                mac = "00:00:00:00:00:00"
            else:
                mac = f"02:00:00:00:00:{index:02x}"
        files = {
            "operstate": operstate,
            "mtu": str(mtu),
            "address": mac,
            "type": str(arphrd),
            "ifindex": str(index),
            "iflink": str(index),
            "addr_len": str(len(mac.split(":"))),
        }
        if speed is not None:
            files["speed"] = str(speed)
        for file_name, text in files.items():
            _write(base / file_name, text)
        if physical:
            (base / "device").mkdir(exist_ok=True)
        if kind == "bridge":
            (base / "bridge").mkdir(exist_ok=True)
            for member in bridge_ports:
                (base / "brif" / member).mkdir(parents=True, exist_ok=True)
        if kind == "bond" or slaves:
            _write(base / "bonding/slaves", " ".join(slaves))
            for slave in slaves:
                link = self.root / "sys/class/net" / slave / "master"
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.exists() and not link.is_symlink():
                    os.symlink(f"../{name}", link)
        addresses = list(addresses)
        if addresses:
            self._host.setdefault("addresses", {})[name] = addresses
            self._flush()
        return self

    def loopback(self) -> Self:
        """The loopback interface ``lo`` with ``127.0.0.1/8`` and ``::1/128``."""
        return self.interface(
            "lo",
            addresses=["127.0.0.1/8", "::1/128"],
            operstate="unknown",
            mtu=65536,
            arphrd=ARPHRD_LOOPBACK,
            physical=False,
        )

    # -- RDMA --------------------------------------------------------------------------------

    def rdma_device(
        self,
        name: str,
        *ports: PortSpec,
        uverbs: int | None = None,
        dev_node: bool = True,
        verbs: bool = True,
        hca_type: str | None = "MT4129",
        fw_ver: str | None = "28.39.1002",
        board_id: str | None = None,
        node_type: str = "1: CA",
        pci_netdevs: Sequence[str] | None = None,
    ) -> Self:
        """An RDMA device under ``sys/class/infiniband/NAME`` with its ports and verbs node.

        Args:
            name: Device name, e.g. ``"mlx5_0"``, ``"mlx5_bond_0"``, ``"rdmap85s0"``.
            ports: The ports (``port(...)``); one ACTIVE InfiniBand port by default.
            uverbs: The N of ``uverbsN``; the next free number by default.
            dev_node: Whether ``/dev/infiniband/uverbsN`` exists (False: a container that was
                not given the device).
            verbs: Whether ``sys/class/infiniband_verbs/uverbsN`` exists at all.
            hca_type: ``hca_type`` (``MT4129`` = ConnectX-7); None leaves it out.
            fw_ver: Firmware version; None leaves it out.
            board_id: PSID; None leaves it out.
            node_type: ``node_type`` as the kernel writes it.
            pci_netdevs: Netdevs of the same PCI function (``device/net/*``); by default the
                ``netdev`` of each port.
        """
        if not ports:
            ports = (port(),)
        base = self.root / "sys/class/infiniband" / name
        base.mkdir(parents=True, exist_ok=True)
        _write(base / "node_type", node_type)
        _write(base / "node_guid", "0000:0000:0000:0000")
        _write(base / "sys_image_guid", "0000:0000:0000:0000")
        for file_name, text in (("hca_type", hca_type), ("fw_ver", fw_ver), ("board_id", board_id)):
            if text is not None:
                _write(base / file_name, text)
        if pci_netdevs is None:
            pci_netdevs = [p.netdev for p in ports if p.netdev]
        (base / "device").mkdir(exist_ok=True)
        for netdev in pci_netdevs:
            (base / "device/net" / netdev).mkdir(parents=True, exist_ok=True)
        for spec in ports:
            self._write_port(base / "ports" / str(spec.number), spec)
        if verbs:
            number = self._next_uverbs if uverbs is None else uverbs
            self._next_uverbs = max(self._next_uverbs, number + 1)
            verbs_dir = self.root / "sys/class/infiniband_verbs" / f"uverbs{number}"
            _write(verbs_dir / "ibdev", name)
            _write(verbs_dir / "abi_version", "1")
            _write(self.root / "sys/class/infiniband_verbs/abi_version", "6")
            if dev_node:
                node = self.root / "dev/infiniband" / f"uverbs{number}"
                node.parent.mkdir(parents=True, exist_ok=True)
                node.touch()
        return self

    @staticmethod
    def _write_port(base: Path, spec: PortSpec) -> None:
        state = PORT_STATES.get(spec.state, 0)
        phys = PHYS_STATES.get(spec.phys_state, 0)
        _write(base / "state", f"{state}: {spec.state}")
        _write(base / "phys_state", f"{phys}: {spec.phys_state}")
        _write(base / "rate", spec.rate)
        _write(base / "link_layer", spec.link_layer)
        _write(base / "lid", spec.lid)
        _write(base / "sm_lid", spec.lid)
        _write(base / "cap_mask", "0x00010000")
        used = [g.index for g in spec.gids]
        table_len = spec.gid_table_len or max([*used, 0]) + 1
        if spec.link_layer == "Ethernet" and spec.gid_table_len is None:
            table_len = max(table_len, 16)
        by_index = {g.index: g for g in spec.gids}
        zero = "0000:0000:0000:0000:0000:0000:0000:0000"
        (base / "gid_attrs/types").mkdir(parents=True, exist_ok=True)
        (base / "gid_attrs/ndevs").mkdir(parents=True, exist_ok=True)
        for index in range(table_len):
            entry = by_index.get(index)
            # Empty slots exist in gids/ but their attributes fail to read (EINVAL); a snapshot
            # leaves those attribute files out.
            _write(base / "gids" / str(index), _exploded_gid(entry.address) if entry else zero)
            if entry is not None:
                _write(base / "gid_attrs/types" / str(index), entry.type)
                if entry.netdev is not None:
                    _write(base / "gid_attrs/ndevs" / str(index), entry.netdev)
        for rel, text in spec.extra_files.items():
            _write(base / rel, text)

    # -- GPUs and GPUDirect -----------------------------------------------------------------

    def gpus(
        self,
        count: int,
        *,
        model: str = "NVIDIA H100 80GB HBM3",
        driver: str = "580.95.05",
        open_kernel_module: bool = True,
    ) -> Self:
        """``count`` GPUs under ``proc/driver/nvidia/gpus`` and the driver version file."""
        for _ in range(count):
            minor = self._next_gpu
            self._next_gpu += 1
            bdf = f"0000:{0x18 + 0x10 * minor:02x}:00.0"
            info = (
                f"Model: \t\t {model}\n"
                "IRQ:   \t\t 0\n"
                f"GPU UUID: \t GPU-00000000-0000-0000-0000-{minor:012x}\n"
                "Video BIOS: \t 96.00.99.00.01\n"
                "Bus Type: \t PCIe\n"
                "DMA Size: \t 52 bits\n"
                "DMA Mask: \t 0xfffffffffffff\n"
                f"Bus Location: \t {bdf}\n"
                f"Device Minor: \t {minor}\n"
                "GPU Excluded: \t No\n"
            )
            _write(self.root / "proc/driver/nvidia/gpus" / bdf / "information", info)
        flavour = "Open Kernel Module" if open_kernel_module else "x86_64 Kernel Module"
        _write(
            self.root / "proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX {flavour}  {driver}  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Thu Oct 10 00:00:00 UTC 2025\n"
            "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)",
        )
        return self

    def gpudirect(self, *, peermem: bool = True, nv_mem: bool = False) -> Self:
        """GPUDirect RDMA: ``nvidia_peermem`` loaded and/or the legacy ``nv_mem`` peer path."""
        if peermem:
            _write(self.root / "sys/module/nvidia_peermem/version", "580.95.05")
        if nv_mem:
            _write(self.root / "sys/kernel/mm/memory_peers/nv_mem/version", "1.3-0")
        return self

    def file(self, relative: str, text: str) -> Self:
        """Any other file, e.g. ``file("etc/nccl.conf", "NCCL_DEBUG=WARN")``."""
        _write(self.root / relative.lstrip("/"), text)
        return self
