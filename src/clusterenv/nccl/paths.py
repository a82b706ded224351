"""What will carry the job's traffic, over which interfaces, and whether they reach the other
nodes: the one model of consequence every interface check rates its severity by.

NCCL needs two things from the network of a multi-node job:

- **bootstrap** (and, with RDMA, the out-of-band connection that exchanges queue pairs): one
  socket interface, the first ``NCCL_SOCKET_IFNAME`` selects (NCCL's own answer when it was
  asked, else :func:`~clusterenv.nccl.interface.predict_bootstrap`);
- **data**: RDMA when a usable port is selected (``NCCL_IB_HCA``, or every openable port when
  unset, unless ``NCCL_IB_DISABLE`` or ``NCCL_NET=Socket``), a network plugin when one is in
  play (EFA, ``NCCL_NET_PLUGIN``), else NCCL's socket transport, which spreads its channels over
  *every* interface ``NCCL_SOCKET_IFNAME`` selects (up to 16; NCCL's ``MAX_IFS``).

Each interface involved either reaches the other nodes, does not (Runpod's management network,
loopback, link-local only, a bridge with no physical port), or cannot be told from one node (a
second routable network, a tunnel). The severity follows (DESIGN's verdict rule): an error when
bootstrap or data would cross an interface that does not connect (the job hangs), a warning when
it may not connect or only the speed suffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clusterenv._facts import Facts
from clusterenv.filters import IB_HCA, parse_filter
from clusterenv.findings import Severity
from clusterenv.rdma import port_transport

__all__ = ["Reach", "Transport", "data_consequence", "reach", "transport"]

#: What carries the data between nodes.
Transport = Literal["rdma", "plugin", "sockets"]

# ARPHRD types of tunnels: ipip, ip6tnl, sit, ipgre, ip6gre, and "none" (WireGuard, tun).
_TUNNELS = frozenset({768, 769, 776, 778, 823, 65534})
_OFF = {"", "0", "false", "no"}


@dataclass(frozen=True, slots=True)
class Reach:
    """Whether one interface reaches the other nodes of the job.

    Attributes:
        interface: e.g. ``"eth0"``.
        connects: True, False, or None when one node cannot tell.
        why: The evidence, e.g. ``"Runpod's management interface"`` or ``"on the cluster
            subnet 10.65.0.0/24"``.
    """

    interface: str
    connects: bool | None
    why: str

    def describe(self) -> str:
        """``"eth0 (Runpod's management interface)"``."""
        return f"{self.interface} ({self.why})"


def reach(facts: Facts, name: str) -> Reach:
    """Whether interface ``name`` reaches the other nodes, on the evidence of this node."""
    if name in facts.avoid:
        return Reach(name, False, facts.avoid[name])
    cluster = facts.cluster_interface
    if cluster is not None and name == cluster.name:
        return Reach(name, True, "the cluster interface")
    interface = facts.network.get(name)
    if interface is None:
        return Reach(name, None, "not an interface of this node")
    if cluster is not None:
        for address in interface.addresses:
            for own in cluster.addresses:
                if address.version == own.version and address.ip in own.network \
                        and not own.ip.is_link_local:
                    return Reach(name, True, f"on the cluster subnet {own.network}")
    if interface.is_bridge and not any(
        (port := facts.network.get(p)) is not None and not port.is_virtual
        for p in interface.bridge_ports
    ):
        return Reach(name, False, "a bridge with no physical port: it reaches only this "
                     "host's containers")
    if interface.arphrd in _TUNNELS:
        return Reach(name, None, "a tunnel: one node cannot tell whether the others are on it")
    if cluster is None:
        return Reach(name, None, "no cluster interface to compare with: one node cannot tell "
                     "whether the others share its network")
    subnet = f" or on its subnet {cluster.addresses[0].network}" if cluster.addresses else ""
    return Reach(name, None, f"not the cluster interface {cluster.name}{subnet}: one node "
                 "cannot tell whether the others share its network")


def data_consequence(facts: Facts, interfaces: tuple[str, ...]) -> tuple[Severity | None, str]:
    """What it costs when NCCL's socket transport uses ``interfaces`` (its devices, the first
    one also bootstrap): ``("error", why)`` when sockets carry the data and one of them does
    not reach the other nodes, or the first does not (bootstrap); ``("warning", why)`` when one
    may not; ``(None, "")`` when they all reach the other nodes or RDMA carries the data (then
    only the first matters).

    Example: ``("error", "sockets carry the data here (no usable RDMA port on this node), and
    NCCL's socket transport would use eth0 (Runpod's management interface), which the other
    nodes cannot reach: the job hangs at its first collective")``.
    """
    if not interfaces:
        return None, ""
    carrier, carrier_why = transport(facts)
    used = interfaces if carrier == "sockets" else interfaces[:1]
    reaches = [reach(facts, name) for name in used]
    broken = [r for r in reaches if r.connects is False]
    unsure = [r for r in reaches if r.connects is None]
    if not broken and not unsure:
        return None, ""
    what = "bootstraps" if carrier != "sockets" else "carries the data and bootstraps"
    listed = "; ".join(r.describe() for r in broken or unsure)
    why = (f"NCCL {what} over {listed}" if carrier != "sockets"
           else f"sockets carry the data here ({carrier_why}), and NCCL's socket transport "
                f"would use {listed}")
    if broken:
        return "error", f"{why}, which the other nodes cannot reach: the job hangs"
    return "warning", f"{why}: the job hangs if the other nodes cannot reach it"


def transport(facts: Facts) -> tuple[Transport, str]:
    """What carries the data between nodes under the settings as they stand, and why.

    Returns:
        e.g. ``("rdma", "mlx5_0:1, mlx5_1:1 selected")``, ``("sockets", "NCCL_IB_HCA='mlx5_9'
        selects no usable port")`` or ``("plugin", "NCCL_NET_PLUGIN='ofi' is set")``.
    """
    net = facts.user_value("NCCL_NET")
    if net is not None and net[0].strip().lower() == "socket":
        return "sockets", f"NCCL_NET={net[0]!r} forces sockets"
    plugin = facts.user_value("NCCL_NET_PLUGIN")
    if plugin is not None and plugin[0].strip().lower() not in ("", "none"):
        return "plugin", f"NCCL_NET_PLUGIN={plugin[0]!r} is set"
    usable = facts.rdma.usable_ports
    if any(port_transport(d, p) == "efa" for d, p in usable):
        return "plugin", "EFA devices: the aws-ofi-nccl plugin carries the data"
    disabled = facts.user_value("NCCL_IB_DISABLE")
    if disabled is not None and disabled[0].strip().lower() not in _OFF:
        return "sockets", f"NCCL_IB_DISABLE={disabled[0]!r}"
    ports = [(d.name, p.number) for d, p in usable if port_transport(d, p) in ("infiniband",
                                                                                "roce")]
    if not ports:
        return "sockets", "no usable RDMA port on this node"
    hca = facts.user_value("NCCL_IB_HCA")
    if hca is not None:
        parsed = parse_filter(hca[0], variable=IB_HCA)
        selected = parsed.select_ports(ports) if parsed is not None else ()
        if not selected:
            return "sockets", f"NCCL_IB_HCA={hca[0]!r} selects no usable RDMA port"
        ports = list(selected)
    listed = ", ".join(f"{d}:{p}" for d, p in ports[:8]) + (", ..." if len(ports) > 8 else "")
    return "rdma", f"RDMA ports {listed}"
