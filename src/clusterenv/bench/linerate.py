"""The line rate of what carried the traffic: interface speeds or RDMA port rates, per rail.

A node's line rate is the sum over the rails in use: the sockets' interfaces when the traffic
went over TCP (Gloo, or NCCL's ``NET/Socket``), the RDMA ports when NCCL used them (``NET/IB``,
InfiniBand or RoCE). The speeds come from sysfs: ``/sys/class/net/<if>/speed`` (Mb/s) and
``/sys/class/infiniband/<dev>/ports/<n>/rate`` (Gb/s), as :class:`~clusterenv.NetworkInterfaces`
and :class:`~clusterenv.RdmaInfo` read them. A rail whose speed the kernel does not report (a
bridge, a link that is down) has ``gbps=None`` and is left out of the sum.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from clusterenv.filters import parse_filter

if TYPE_CHECKING:
    from clusterenv.network import NetworkInterfaces
    from clusterenv.rdma import RdmaInfo

__all__ = ["LineRate", "Rail", "interface_line_rate", "rails_in_use", "rdma_line_rate"]

_LOG_DEVICE = re.compile(r"(?P<name>[^:/\s]+)(?::(?P<port>[0-9]+))?")


@dataclass(frozen=True, slots=True)
class Rail:
    """One link that carried traffic.

    Attributes:
        name: An interface (``"ens1"``) or an RDMA port (``"mlx5_0:1"``).
        kind: ``"interface"`` or ``"rdma"``.
        gbps: Its line rate in Gb/s, e.g. ``400.0``; None when the kernel does not report one.
    """

    name: str
    kind: Literal["interface", "rdma"]
    gbps: float | None


@dataclass(frozen=True, slots=True)
class LineRate:
    """The rails in use on one node and their summed line rate.

    Attributes:
        rails: e.g. ``(Rail("mlx5_0:1", "rdma", 400.0), Rail("mlx5_1:1", "rdma", 400.0))``.
    """

    rails: tuple[Rail, ...]

    @property
    def gbps(self) -> float | None:
        """The sum of the known rail rates in Gb/s, e.g. ``800.0``; None when none is known."""
        known = [rail.gbps for rail in self.rails if rail.gbps is not None]
        return sum(known) if known else None

    @property
    def complete(self) -> bool:
        """Whether every rail's rate is known (else :attr:`gbps` is a lower bound)."""
        return bool(self.rails) and all(rail.gbps is not None for rail in self.rails)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"gbps": 800.0, "complete": true, "rails": [{"name": ..., ...}]}``."""
        return {
            "gbps": self.gbps,
            "complete": self.complete,
            "rails": [{"name": r.name, "kind": r.kind, "gbps": r.gbps} for r in self.rails],
        }


def interface_line_rate(network: NetworkInterfaces, names: Iterable[str]) -> LineRate:
    """The line rate of the interfaces ``names`` (sysfs ``speed``, Mb/s → Gb/s).

    Example: ``ens1`` with ``speed`` 100000 gives ``LineRate((Rail("ens1", "interface",
    100.0),))``. An interface this host lacks, or one without a speed, has ``gbps=None``.
    """
    rails = []
    for name in dict.fromkeys(names):
        interface = network.get(name)
        speed = interface.speed_mbps if interface is not None else None
        rails.append(Rail(name, "interface", None if speed is None else speed / 1000))
    return LineRate(tuple(rails))


def rdma_line_rate(rdma: RdmaInfo, ports: Iterable[tuple[str, int | None]]) -> LineRate:
    """The line rate of RDMA ports: ``(device, port)`` pairs, port None meaning each active port.

    Example: ``[("mlx5_0", 1)]`` with ``rate`` ``400 Gb/sec (4X NDR)`` gives
    ``LineRate((Rail("mlx5_0:1", "rdma", 400.0),))``. A port that is not ACTIVE has no rate.
    """
    devices = {device.name: device for device in rdma.devices}
    rails: dict[str, Rail] = {}
    for name, number in ports:
        device = devices.get(name)
        if device is None:
            label = name if number is None else f"{name}:{number}"
            rails[label] = Rail(label, "rdma", None)
            continue
        for port in device.ports:
            if number is None and not port.active:
                continue
            if number is None or port.number == number:
                label = f"{name}:{port.number}"
                rails[label] = Rail(label, "rdma", port.rate_gbps if port.active else None)
        if number is not None and f"{name}:{number}" not in rails:
            rails[f"{name}:{number}"] = Rail(f"{name}:{number}", "rdma", None)
    return LineRate(tuple(rails.values()))


def _log_ports(devices: Sequence[str]) -> list[tuple[str, int | None]]:
    # NCCL's "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB", as nccl_log keeps them.
    out: list[tuple[str, int | None]] = []
    for text in devices:
        match = _LOG_DEVICE.match(text.strip())
        if match:
            out.append((match["name"], int(match["port"]) if match["port"] else None))
    return out


def _exact_names(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


def rails_in_use(
    *,
    transport: str,
    environ: Mapping[str, str],
    network: NetworkInterfaces,
    rdma: RdmaInfo,
    cluster_interface: str | None,
    nccl_devices: Sequence[str] = (),
) -> LineRate:
    """The rails that carried this node's traffic and their line rate.

    Args:
        transport: What moved the bytes: ``"gloo"`` (TCP sockets), or NCCL's network name from
            its log: ``"Socket"``, ``"IB"`` (InfiniBand or RoCE verbs), a plugin such as
            ``"Libfabric"``.
        environ: The workers' environment: ``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME`` and
            ``NCCL_IB_HCA`` choose the rails when set.
        network: This node's interfaces.
        rdma: This node's RDMA devices.
        cluster_interface: The interface holding the cluster address, e.g. ``"ens1"``, used when
            no variable names the sockets' interfaces.
        nccl_devices: The devices NCCL's log says it used, e.g. ``("mlx5_0:1/RoCE",)``.

    Returns:
        e.g. ``LineRate((Rail("ens1", "interface", 100.0),))`` for Gloo over ``ens1``.
    """
    if transport in {"gloo", "Socket"}:
        variable = "GLOO_SOCKET_IFNAME" if transport == "gloo" else "NCCL_SOCKET_IFNAME"
        value = environ.get(variable, "").strip()
        names: list[str] = []
        if value and transport == "gloo":
            names = _exact_names(value)
        elif value:
            rule = parse_filter(value, variable=variable)
            candidates = [i.name for i in network.interfaces if not i.is_loopback and i.is_up]
            names = list(rule.select_interfaces(candidates)) if rule is not None else []
        if not names and cluster_interface is not None:
            names = [cluster_interface]
        return interface_line_rate(network, names)
    if nccl_devices:
        return rdma_line_rate(rdma, _log_ports(nccl_devices))
    pairs = [(d.name, p.number) for d in rdma.usable_devices for p in d.ports if p.active]
    hca = environ.get("NCCL_IB_HCA", "").strip()
    rule = parse_filter(hca, variable="NCCL_IB_HCA") if hca else None
    if rule is not None:
        pairs = list(rule.select_ports(pairs))
    return rdma_line_rate(rdma, pairs)
