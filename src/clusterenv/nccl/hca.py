"""RDMA: which ports ``NCCL_IB_HCA`` lists, the RoCE GID index, and the lint of the RDMA
variables the user set.

A port is listed when it is ACTIVE, its device opens (``/dev/infiniband/uverbsN``), NCCL's own
IB transport can drive it (InfiniBand or RoCE, not EFA), and it is on the cluster fabric: not on
a management interface (Runpod's ``eth0``), not the front-end NIC that carries the default route
while other ports remain, not of a minority link layer (a RoCE front-end beside an InfiniBand
fabric), and not slower than the rails (a 100 GbE front-end beside 400 GbE rails).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from clusterenv._facts import Facts, Proposal, with_origin
from clusterenv.filters import IB_HCA, lint_filter, parse_filter, render_exact
from clusterenv.findings import Finding
from clusterenv.nccl.interface import rate_by_consequence, socket_interfaces
from clusterenv.nccl.paths import transport
from clusterenv.nccl.roce import gid_plan, gid_setting_findings, gid_value_findings
from clusterenv.nccl.version import versions_text
from clusterenv.rdma import RdmaDevice, RdmaPort, port_transport
from clusterenv.sources import runpod

__all__ = [
    "HcaSelection",
    "management_netdev",
    "nccl_ports",
    "port_label",
    "rdma_plan",
    "rdma_value_findings",
    "select_hcas",
    "version_text",
]

Pair = tuple[RdmaDevice, RdmaPort]


@dataclass(frozen=True, slots=True)
class HcaSelection:
    """The RDMA ports for ``NCCL_IB_HCA`` and the ones left out.

    Attributes:
        selected: ``(device, port)`` pairs in device order.
        excluded: ``("mlx5_8:1", "port DOWN")`` pairs: each left-out port and why.
        avoid: Devices none of whose usable ports belong in the list, with the reason, e.g.
            ``{"mlx5_9": "netdev eth0 is Runpod's management interface"}``.
        problem: A finding when no list can be chosen (mixed fabrics without evidence).
    """

    selected: tuple[Pair, ...]
    excluded: tuple[tuple[str, str], ...]
    avoid: dict[str, str]
    problem: Finding | None = None

    @property
    def names(self) -> tuple[tuple[str, int], ...]:
        """``(("mlx5_0", 1), ...)``."""
        return tuple((d.name, p.number) for d, p in self.selected)


def port_label(device: RdmaDevice, port: RdmaPort) -> str:
    return f"{device.name}:{port.number}"


def nccl_ports(facts: Facts) -> list[Pair]:
    """Ports NCCL's IB transport could open: ACTIVE, InfiniBand or RoCE, device usable."""
    return [
        (d, p) for d, p in facts.rdma.usable_ports
        if port_transport(d, p) in ("infiniband", "roce")
    ]


def management_netdev(facts: Facts, netdev: str | None) -> str | None:
    if netdev is None:
        return None
    interface = facts.network.get(netdev)
    reason = facts.management_reason(interface) if interface is not None else None
    if reason is None and facts.runpod and runpod.is_management(interface=netdev):
        reason = "Runpod's management interface"
    return f"netdev {netdev} is {reason}" if reason else None


def select_hcas(facts: Facts) -> HcaSelection:
    """Choose the ports for ``NCCL_IB_HCA`` from this host's evidence."""
    excluded: list[tuple[str, str]] = []
    candidates: list[Pair] = []
    for device in facts.rdma.devices:
        for port in device.ports:
            transport = port_transport(device, port)
            if transport == "efa":
                why = "EFA: NCCL's IB transport cannot drive it (the aws-ofi-nccl plugin does)"
            elif transport is None:
                why = f"link layer {port.link_layer}"
            elif not port.active:
                why = f"port {port.state}"
            elif not device.dev_node:
                why = (f"/dev/infiniband/{device.uverbs} is missing or cannot be opened"
                       if device.uverbs else "no verbs device (uverbsN) for it")
            else:
                candidates.append((device, port))
                continue
            excluded.append((port_label(device, port), why))
    avoided: dict[str, str] = {}

    def drop(pairs: list[Pair], why: str) -> None:
        for device, port in pairs:
            excluded.append((port_label(device, port), why))
            candidates.remove((device, port))
            avoided.setdefault(device.name, why)

    for device, port in list(candidates):
        reason = management_netdev(facts, port.netdev)
        if reason is not None:
            drop([(device, port)], reason)
    front = facts.default_route
    cluster = facts.cluster_interface
    if front is not None and (cluster is None or front != cluster.name):
        on_front = [(d, p) for d, p in candidates if p.netdev == front]
        if on_front and len(on_front) < len(candidates):
            drop(on_front, f"netdev {front} carries the default route, not the cluster network")
    layers = Counter(p.link_layer for _, p in candidates)
    if len(layers) > 1:
        (top, top_count), (_, second_count) = layers.most_common(2)
        if top_count == second_count:
            top = next((p.link_layer for _, p in candidates
                        if cluster is not None and p.netdev == cluster.name), "")
        if not top:
            listed = ", ".join(f"{port_label(d, p)} {p.link_layer}" for d, p in candidates)
            problem = Finding.of(
                "ib-hca-mixed-fabric",
                "usable RDMA ports are half InfiniBand, half RoCE, and nothing tells which is "
                "the cluster fabric: NCCL_IB_HCA is left unset",
                (listed,),
                "export NCCL_IB_HCA='=dev:port,...' listing the ports of the cluster fabric "
                "(NCCL fails with 'Attempted to merge incompatible devices' when it mixes them)",
            )
            return HcaSelection((), tuple(excluded), avoided, problem)
        minority = [(d, p) for d, p in candidates if p.link_layer != top]
        drop(minority, f"link layer differs from the {top} fabric of the other ports")
    # Rails of one fabric run at one speed; slower ports are front-end or storage NICs.
    rates = {p.rate_gbps for _, p in candidates if p.rate_gbps is not None}
    if len(rates) > 1:
        fastest = max(rates)
        for device, port in [(d, p) for d, p in candidates
                             if p.rate_gbps is not None and p.rate_gbps < fastest]:
            drop([(device, port)],
                 f"{port.rate_gbps:g} Gb/s, slower than the {fastest:g} Gb/s rails")
    for name in list(avoided):
        if any(d.name == name for d, _ in candidates):
            del avoided[name]  # another port of the device stays in the list
    return HcaSelection(tuple(candidates), tuple(excluded), avoided)


def version_text(facts: Facts) -> str:
    return versions_text(facts.nccl_versions)


def rdma_plan(facts: Facts) -> tuple[list[Proposal], list[Finding], list[str]]:
    """``NCCL_IB_HCA`` and ``NCCL_IB_GID_INDEX`` on a multi-node cluster, or why not."""
    if not facts.rdma.devices:
        return [], [], ["NCCL_IB_HCA left unset: no RDMA device on this node"]
    selection = select_hcas(facts)
    findings: list[Finding] = []
    if selection.problem is not None:
        findings.append(selection.problem)
    if not selection.selected:
        return [], findings, ["NCCL_IB_HCA left unset: no usable RDMA port on the cluster fabric"]
    if selection.excluded:
        listed = ", ".join(f"{name} ({why})" for name, why in selection.excluded)
        findings.append(Finding.of(
            "ib-hca-excluded",
            f"left out of NCCL_IB_HCA: {listed}",
            tuple(f"{name}: {why}" for name, why in selection.excluded),
            "",
        ))
    try:
        value = render_exact(selection.names)
    except ValueError:  # a device name NCCL's filter cannot spell: leave the choice to NCCL
        return [], findings, ["NCCL_IB_HCA left unset: a device name cannot be written in it"]
    wanted = selection.names
    openable = [(d.name, p.number) for d, p in nccl_ports(facts)]

    def same(user: str) -> bool:
        parsed = parse_filter(user, variable=IB_HCA)
        return parsed is not None and parsed.select_ports(openable) == wanted

    reason = f"ACTIVE, openable ports on the cluster fabric ({len(wanted)})"
    if selection.excluded:
        reason += "; left out: " + ", ".join(f"{n} ({w})" for n, w in selection.excluded)
    proposals = [Proposal("NCCL_IB_HCA", value, reason, same)]
    gid_proposals, gid_findings, notes = gid_plan(facts, selection.selected)
    return proposals + gid_proposals, findings + gid_findings, notes


def _hca_value(facts: Facts, value: str, origin: str) -> list[Finding]:
    selection = select_hcas(facts)
    try:
        suggest = render_exact(selection.names) if selection.selected else None
    except ValueError:
        suggest = None
    findings = lint_filter(
        value, variable=IB_HCA, names=[d.name for d in facts.rdma.devices],
        ports=[(d.name, p.number) for d, p in nccl_ports(facts)], avoid=selection.avoid,
        suggest=suggest,
    )
    # An HCA list that selects nothing sends the data over sockets: slower when they reach
    # the other nodes, a hang when one of them does not.
    if transport(facts)[0] == "sockets":
        findings = rate_by_consequence(facts, findings, socket_interfaces(facts))
    return with_origin(findings, origin)


def _gid_value(facts: Facts, value: str, origin: str) -> list[Finding]:
    return gid_value_findings(facts, value, origin, _roce_ports(facts))


def _roce_ports(facts: Facts) -> list[Pair]:
    """The RoCE ports NCCL will use: the listed ones, else every openable one."""
    ports = [(d, p) for d, p in nccl_ports(facts) if p.link_layer == "Ethernet"]
    selected = [(d, p) for d, p in select_hcas(facts).selected if p.link_layer == "Ethernet"]
    return selected or ports


def _gid_setting(name: str) -> Callable[[Facts, str, str], list[Finding]]:
    def check(facts: Facts, value: str, origin: str) -> list[Finding]:
        return gid_setting_findings(facts, name, value, origin, _roce_ports(facts))

    return check


def _ib_disabled(facts: Facts, value: str, origin: str) -> list[Finding]:
    text = value.strip()
    usable = nccl_ports(facts)
    if not text or text == "0" or not usable:
        return []
    plugin = facts.user_value("NCCL_NET_PLUGIN")
    evidence = [f"NCCL_IB_DISABLE={value!r} (from {origin})",
                "usable: " + ", ".join(port_label(d, p) for d, p in usable)]
    if plugin is not None:
        evidence.append(f"NCCL_NET_PLUGIN={plugin[0]!r}: a net plugin may ignore "
                        "NCCL_IB_DISABLE; NCCL_NET=Socket forces sockets")
    return [Finding.of(
        "ib-disabled",
        f"NCCL_IB_DISABLE={value!r} while RDMA is usable here: NCCL runs over TCP at a "
        "fraction of the bandwidth",
        tuple(evidence),
        "unset NCCL_IB_DISABLE (or export NCCL_IB_DISABLE=0)",
    )]


def rdma_value_findings(facts: Facts) -> list[tuple[str, Finding]]:
    """Lint the RDMA variables the user set."""
    out: list[tuple[str, Finding]] = []
    checks = (("NCCL_IB_HCA", _hca_value), ("NCCL_IB_GID_INDEX", _gid_value),
              ("NCCL_IB_DISABLE", _ib_disabled),
              *((name, _gid_setting(name)) for name in
                ("NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM")))
    for variable, check in checks:
        found = facts.user_value(variable)
        if found is not None and facts.rdma.devices:
            out.extend((variable, f) for f in check(facts, *found))
    return out

