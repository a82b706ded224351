"""The result types of :mod:`clusterenv.nccl_log` (public there; defined here so that the parser
and the checks can share them without importing each other)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from clusterenv._jsonable import json_fields

__all__ = [
    "INTERNAL_NETWORKS",
    "GpuDirect",
    "LogMessage",
    "NcclLog",
    "NetDevice",
    "NetPlugin",
    "RankInfo",
    "SocketEndpoint",
    "parse_ip",
]

#: Networks built into NCCL (``Using network IB`` / ``Using network Socket``); any other name is
#: an external plugin (``Libfabric``, ``AWS Libfabric``, ``IBext_v8``, ``GPUDirectTCPX``, ...).
INTERNAL_NETWORKS = frozenset({"IB", "Socket"})


@lru_cache(maxsize=65536)
def parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``"fe80::1%eth0"`` -> ``IPv6Address('fe80::1')``; None when it is not an address."""
    if not text or not (text[0].isdigit() or ":" in text) or len(text) > 64:
        return None  # neither a dotted quad nor IPv6: not worth the ipaddress module's time
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class SocketEndpoint:
    """An interface and address NCCL says it uses for sockets.

    Attributes:
        interface: Interface name, e.g. ``"enp25s0np0"``.
        address: The address as NCCL printed it (IPv6 keeps its ``%scope``), e.g.
            ``"10.99.91.63"``; None when the line was cut short or the address is unparsable.
    """

    interface: str
    address: str | None

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """The address as an ``ipaddress`` object (scope dropped), or None."""
        return parse_ip(self.address) if self.address else None

    def __str__(self) -> str:
        return f"{self.interface}:{self.address}" if self.address else self.interface

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return {"interface": self.interface, "address": self.address}


@dataclass(frozen=True, slots=True)
class RankInfo:
    """What one NCCL process (host and pid) reported.

    Attributes:
        host: Hostname from the line prefix, e.g. ``"tpgds-aihub0008"``; None for lines without
            the ``host:pid:tid [dev]`` prefix.
        pid: Process id, e.g. ``207008``.
        cuda_device: CUDA device index from ``[N]`` in the prefix, e.g. ``1``.
        rank: Global rank in the first communicator it initialised, e.g. ``9``.
        nranks: Size of that communicator, e.g. ``16``.
        version: NCCL version it printed, e.g. ``"2.27.5"``.
        bootstrap_interface: Interface of ``Bootstrap : Using``, e.g. ``"enp25s0np0"``.
        bootstrap_address: Its address, e.g. ``"10.99.91.63"``.
        socket_interfaces: Interfaces of ``NET/Socket : Using`` (the data path when the
            transport is ``Socket``).
        oob: The out-of-band socket of ``NET/IB : Using ...; OOB ...``.
        transport: Network it used, e.g. ``"IB"``, ``"Socket"``, ``"Libfabric"``.
        devices: Network devices it listed, e.g. ``("mlx5_0:1/RoCE",)``.
        plugin: External network plugin it loaded, e.g. ``"AWS Libfabric"``.
        net_channels: Receiving channel connections through an RDMA network
            (``[receive] via NET/IB/0``; ``NET/Socket`` channels never use GPUDirect RDMA and
            are not counted).
        gdr_channels: Of those, how many use GPUDirect RDMA (``/GDRDMA``).
        env: Settings it reported as taken from the environment, e.g.
            ``{"NCCL_SOCKET_IFNAME": "enp25s0np0"}``.
        first_line: Line number (1-based) of its first line in the log.
        channel_devices: The network devices its channels go through, as ``(network, index)``
            pairs, e.g. ``(("Socket", 1),)`` for ``via NET/Socket/1``: the index is the ``[1]``
            entry of that network's ``Using`` list.
        facts: Its fact table, the facts that are compared across processes (with ``env``), by
            name, e.g. ``{"NCCL version": "2.27.5", "network": "IB", "bootstrap subnet":
            "10.99.91.0/24"}`` (:mod:`clusterenv.nccl_log.facts` names them all).
        failure: The return chain that ended its NCCL call, when nothing after it shows NCCL
            carried on, e.g. ``"bootstrap.cc:95 -> 2 (ncclSystemError)"``; None when it has none.
        failure_line: Line number of that chain's last step.
    """

    host: str | None
    pid: int | None
    cuda_device: int | None
    rank: int | None
    nranks: int | None
    version: str | None
    bootstrap_interface: str | None
    bootstrap_address: str | None
    socket_interfaces: tuple[SocketEndpoint, ...]
    oob: SocketEndpoint | None
    transport: str | None
    devices: tuple[str, ...]
    plugin: str | None
    net_channels: int
    gdr_channels: int
    env: dict[str, str]
    first_line: int
    channel_devices: tuple[tuple[str, int], ...] = ()
    facts: dict[str, str] = field(default_factory=dict)
    failure: str | None = None
    failure_line: int | None = None

    @property
    def label(self) -> str:
        """How to name this process in a message, e.g. ``"rank 9 (tpgds-aihub0008 pid 207008)"``."""
        where = f"{self.host or '?'} pid {self.pid}" if self.pid is not None else "unprefixed lines"
        if self.rank is not None:
            return f"rank {self.rank} ({where})"
        return where

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above (written out: a log of 8192 processes has as many
        of these, and the generic conversion costs ten times more)."""
        return {
            "host": self.host, "pid": self.pid, "cuda_device": self.cuda_device,
            "rank": self.rank, "nranks": self.nranks, "version": self.version,
            "bootstrap_interface": self.bootstrap_interface,
            "bootstrap_address": self.bootstrap_address,
            "socket_interfaces": [e.to_dict() for e in self.socket_interfaces],
            "oob": self.oob.to_dict() if self.oob else None, "transport": self.transport,
            "devices": list(self.devices), "plugin": self.plugin,
            "net_channels": self.net_channels, "gdr_channels": self.gdr_channels,
            "env": dict(self.env), "first_line": self.first_line,
            "channel_devices": [list(d) for d in self.channel_devices],
            "facts": dict(self.facts), "failure": self.failure,
            "failure_line": self.failure_line,
        }


@dataclass(frozen=True, slots=True)
class NetDevice:
    """A network device NCCL listed, e.g. ``[0]mlx5_0:1/RoCE``.

    Attributes:
        network: The NCCL network that listed it, e.g. ``"IB"``, ``"OFI"``.
        index: NCCL's device index, e.g. ``0``.
        name: Device name, e.g. ``"mlx5_0"`` (a PCI address for OFI NIC groups).
        port: Port number, e.g. ``1``.
        link_layer: NCCL's link word: ``"IB"`` (InfiniBand) or ``"RoCE"`` (Ethernet).
        speed_mbps: Speed when NCCL printed it (2.27+), e.g. ``400000``.
        hosts: Hosts that listed it.
        suffixes: What NCCL printed after the link layer, e.g. ``("SHARP",)`` for
            ``[0]mlx5_0:1/IB/SHARP`` (the SHARP plugin's collective-capable devices).
    """

    network: str
    index: int | None
    name: str
    port: int | None
    link_layer: str | None
    speed_mbps: int | None
    hosts: tuple[str, ...]
    suffixes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """As NCCL writes it, e.g. ``"mlx5_0:1/RoCE"`` or ``"mlx5_0:1/IB/SHARP"``."""
        text = self.name if self.port is None else f"{self.name}:{self.port}"
        text = f"{text}/{self.link_layer}" if self.link_layer else text
        return "/".join((text, *self.suffixes))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``label``."""
        return json_fields(self, label=self.label)


@dataclass(frozen=True, slots=True)
class GpuDirect:
    """GPUDirect RDMA as NCCL reported it.

    Attributes:
        hcas: NCCL's verdict per HCA (``GPU Direct RDMA Enabled|Disabled for HCA 0 'mlx5_0'``),
            e.g. ``{"mlx5_0": True}``; False when any process said Disabled.
        dmabuf_gpus: CUDA devices with ``DMA-BUF is available on GPU device N``.
        net_channels: Receiving channel connections through an RDMA network
            (``[receive] via NET/IB/0/GDRDMA``). The send side is not counted: it uses GPUDirect
            only where ``NCCL_NET_GDR_READ`` allows (off by default before Ampere without
            NVLink); nor are ``NET/Socket`` channels, which never use GPUDirect RDMA.
        gdr_channels: Of those, how many use GPUDirect RDMA (``/GDRDMA``).
        distance_disabled: GPU/HCA pairs NCCL refused for distance, e.g.
            ``("GPU 1c000 / HCA 0 (distance 5 > 2)",)``.
    """

    hcas: dict[str, bool]
    dmabuf_gpus: tuple[int, ...]
    net_channels: int
    gdr_channels: int
    distance_disabled: tuple[str, ...]

    @property
    def enabled(self) -> bool | None:
        """True when every sign says on, False when any says off, None without evidence."""
        if (
            not all(self.hcas.values())
            or self.distance_disabled
            or self.gdr_channels < self.net_channels
        ):
            return False
        if self.hcas or self.gdr_channels:
            return True
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``enabled``."""
        return json_fields(self, enabled=self.enabled)


@dataclass(frozen=True, slots=True)
class NetPlugin:
    """An external network plugin (``libnccl-net.so``) NCCL loaded or was asked to load.

    Attributes:
        name: Name NCCL gave it, e.g. ``"AWS Libfabric"``; the library name when that is all the
            log says.
        library: Library file, e.g. ``"libnccl-net.so"``.
        version: Plugin version, e.g. ``"1.6.0"`` (``NET/OFI Using aws-ofi-nccl 1.6.0``).
        provider: Libfabric provider it selected, e.g. ``"efa"`` or ``"verbs;ofi_rxm"``.
        nics: NICs the provider found, e.g. ``16``.
        used: Whether some process ended up using it.
        failed: Whether some process loaded it (or was asked to) and then used another network.
        evidence: Log lines that show why it failed, e.g.
            ``("NET/OFI Invalid type of PCI bus returned 0",)``.
    """

    name: str
    library: str | None
    version: str | None
    provider: str | None
    nics: int | None
    used: bool
    failed: bool
    evidence: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class LogMessage:
    """A warning, error or notable line, counted once however often it repeats.

    Attributes:
        text: The message without the prefix, e.g. ``"Call to ibv_open_device failed"``.
        kind: What it is about: ``ibverbs``, ``memlock``, ``ib-qp``, ``connect``, ``shm``,
            ``no-interface``, ``no-device``, ``plugin``, ``error-trace``, ``nccl-error``,
            ``other``.
        source: NCCL source location, e.g. ``"misc/ibvwrap.cc:212"``.
        count: How many times it appeared.
        first_line: Line number (1-based) of its first appearance.
        hosts: Hosts that printed it.
        cls: Its meaning class in the catalogue of NCCL's messages, e.g. ``"socket"``
            (:func:`~clusterenv.nccl_log.catalogue.lookup_message`); None when not catalogued.
        origin: Where the catalogue says it is printed, e.g. ``"src/misc/socket.cc:49
            (v2.16.2-1) .. :58 (v2.30.7-1)"``.
        fails: NCCL returns an error right after printing it (by its source), or the catalogue
            marks it fatal.
        processes: The processes that printed it (``"host:pid"``, at most 16).
        carried_on: Every process that printed it showed, after its last appearance, that NCCL
            went on (a network chosen, channels set up, ``Init COMPLETE``): an error it
            returned was handled.
    """

    text: str
    kind: str
    source: str | None
    count: int
    first_line: int
    hosts: tuple[str, ...]
    cls: str | None = None
    origin: str | None = None
    fails: bool = False
    processes: tuple[str, ...] = ()
    carried_on: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class NcclLog:
    """Everything an NCCL debug log says about how NCCL set itself up.

    Attributes:
        version: NCCL version (the most common one), e.g. ``"2.27.5"``.
        cuda_version: CUDA version NCCL was built for, e.g. ``"12.9"``.
        versions: Every NCCL version seen (more than one is a problem).
        ranks: One entry per process (host and pid), ordered by rank.
        transports: Networks used, in order of first use, e.g. ``("IB",)``.
        devices: Network devices listed, e.g. ``[0]mlx5_0:1/RoCE``.
        gpudirect: GPUDirect RDMA verdicts and channel counts.
        plugins: External network plugins loaded or requested.
        env: Settings NCCL reported as taken from the environment (first value seen), e.g.
            ``{"NCCL_IB_HCA": "mlx5_0,mlx5_1"}``.
        nranks: Largest communicator size seen, e.g. ``16``.
        nnodes: Node count when NCCL printed it (``nNodes 2``), e.g. ``2``.
        warnings: ``NCCL WARN`` lines.
        errors: Error returns (``init.cc:1234 -> 2``) and PyTorch's ``NCCL error`` lines.
        notices: INFO lines that report a problem, e.g. ``NET/IB : No device found.``.
        lines_read: Lines read.
        lines_matched: Lines recognised: those carrying an ``NCCL INFO`` or ``NCCL WARN``
            marker, and the failure lines of the programs around NCCL (PyTorch's exceptions and
            watchdog, nccl-tests, libibverbs, NCCL's own older formats).
        banners: ``NCCL version`` banners printed without a host prefix (``NCCL_DEBUG=VERSION``
            or ``WARN``), as ``(version, line number)``; one per process that printed it.
        init_unfinished: Processes with a communicator whose ``ncclCommInitRank`` printed
            ``Init START`` (NCCL 2.18 and later) and, after it, neither that communicator's
            ``Init COMPLETE`` (by the ``comm 0x...`` pointer) nor an error, as ``(process, line
            of Init START)``, e.g. ``(("node1:4242", 12),)``: stuck in it, or the log ends
            there.
        init_complete: Processes whose last ``ncclCommInitRank`` printed ``Init COMPLETE``.
    """

    version: str | None
    cuda_version: str | None
    versions: tuple[str, ...]
    ranks: tuple[RankInfo, ...]
    transports: tuple[str, ...]
    devices: tuple[NetDevice, ...]
    gpudirect: GpuDirect
    plugins: tuple[NetPlugin, ...]
    env: dict[str, str]
    nranks: int | None
    nnodes: int | None
    warnings: tuple[LogMessage, ...]
    errors: tuple[LogMessage, ...]
    notices: tuple[LogMessage, ...]
    lines_read: int
    lines_matched: int
    banners: tuple[tuple[str, int], ...] = ()
    init_unfinished: tuple[tuple[str, int], ...] = ()
    init_complete: int = 0

    @property
    def transport(self) -> str | None:
        """The network every process used, e.g. ``"IB"``; None when unknown or mixed."""
        return self.transports[0] if len(self.transports) == 1 else None

    @property
    def hosts(self) -> tuple[str, ...]:
        """Hostnames seen in line prefixes, in order of appearance."""
        return tuple(dict.fromkeys(r.host for r in self.ranks if r.host))

    @property
    def multi_node(self) -> bool | None:
        """Whether the job spans nodes: True, False or None (unknown).

        True when NCCL said ``nNodes 2`` or more, or processes of several hosts are in the log;
        False when NCCL said ``nNodes 1``, or when one host's processes are every rank of their
        communicators; else channels through a network (``via NET/...``) suggest other nodes.
        """
        if (self.nnodes or 0) > 1 or len(self.hosts) > 1:
            return True
        if self.nnodes == 1:
            return False
        ranks = {r.rank for r in self.ranks if r.pid is not None and r.rank is not None}
        if self.hosts and self.nranks and len(ranks) >= self.nranks:
            return False  # every rank of the communicator is on this one host
        if any(r.channel_devices for r in self.ranks):
            return True
        return None

    def messages(self, kind: str) -> tuple[LogMessage, ...]:
        """Warnings, errors and notices of one ``kind``, e.g. ``"ibverbs"``."""
        return tuple(m for m in (*self.warnings, *self.errors, *self.notices) if m.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``transport``, ``hosts`` and ``multi_node``."""
        return json_fields(
            self, transport=self.transport, hosts=self.hosts, multi_node=self.multi_node
        )
