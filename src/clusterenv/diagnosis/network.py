"""Doctor's socket checks of the environment as it stands, before any plan is applied: the
cluster interface's state, and what NCCL and Gloo would choose with their variables unset.

Runpod's knowledge (``eth0`` and 172.x are management) enters only through
:meth:`Facts.management_reason` and :attr:`Facts.avoid`, which apply it when the Runpod source
matched; elsewhere the same rules run on evidence alone.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from clusterenv._facts import Facts
from clusterenv._resolve import Resolution
from clusterenv._shell import Placeholder, code, command, export, prose
from clusterenv.findings import Finding, Severity
from clusterenv.nccl.bootstrap import NcclBootstrap
from clusterenv.nccl.interface import (
    bootstrap_unpredictable,
    planned_socket_ifname,
    predict_bootstrap,
    socket_interfaces,
    usable_cluster_interface,
)
from clusterenv.nccl.paths import Reach, reach, transport
from clusterenv.sources import runpod

__all__ = ["GlooBinding", "gloo_binding", "network_checks"]


def _socket_unset(facts: Facts, bootstrap_report: NcclBootstrap | None) -> list[Finding]:
    """NCCL_SOCKET_IFNAME unset, and NCCL would put bootstrap or data on an interface that
    does not reach the other nodes (:mod:`clusterenv.nccl.paths`).

    An error when the bootstrap interface does not connect (the job hangs in
    ``ncclCommInitRank``), or when sockets carry the data and NCCL's socket transport would also
    use an interface that does not connect (it hangs at the first collective). A warning when
    such an interface may not connect (one node cannot tell), or bootstraps off the cluster
    interface on a network that may work.
    """
    if facts.user_value("NCCL_SOCKET_IFNAME") is not None:
        return []
    chosen = socket_interfaces(facts)
    asked = bootstrap_report.current if bootstrap_report is not None else None
    bootstrap: str | None = chosen[0] if chosen else None
    if asked is not None and asked.asked:  # NCCL's own answer wins over our model
        bootstrap = asked.interface
    elif facts.user_value("NCCL_COMM_ID") is not None:  # NCCL bootstraps in its subnet
        if bootstrap_unpredictable(facts):
            return []
        predicted = predict_bootstrap(facts)
        bootstrap = predicted[0] if predicted else None
    if bootstrap is None:
        return []
    carrier, carrier_why = transport(facts)
    # The socket transport's devices matter when sockets carry the data.
    data = [n for n in chosen if n != bootstrap] if carrier == "sockets" else []
    first = reach(facts, bootstrap)
    others = [r for r in (reach(facts, n) for n in data) if r.connects is not True]
    broken = [r for r in others if r.connects is False]
    if first.connects is True and not others:
        return []
    severity: Severity = "error" if first.connects is False or broken else "warning"
    parts = []
    if first.connects is False:
        parts.append(f"NCCL would bootstrap over {facts.describe(bootstrap)}, {first.why}, "
                     "which the other nodes cannot reach: the job hangs in ncclCommInitRank")
    elif first.connects is None:
        parts.append(f"NCCL would bootstrap over {facts.describe(bootstrap)}, {first.why}: the "
                     "job hangs if the other nodes cannot reach it")
    if others:
        used = _grouped(facts, others)
        then = ("the job hangs at its first collective (connect timeouts)" if broken
                else "the job hangs if the other nodes cannot reach them")
        parts.append(f"NCCL's socket transport, which carries the data here ({carrier_why}), "
                     f"would also use {used}: {then}")
    title = "NCCL_SOCKET_IFNAME is unset: " + "; ".join(parts)
    fix_name = usable_cluster_interface(facts)
    said = None
    if asked is not None and asked.asked and asked.log:
        said = f"{asked.by} itself says: {asked.log[-1].split('NCCL INFO ', 1)[-1]}"
    elif asked is not None and asked.note:
        said = f"clusterenv's prediction; {asked.note}"  # the note says why NCCL did not answer
    return [Finding.of(
        "socket-ifname-unset", title,
        (
            *((said,) if said else ()),
            "NCCL's default: ib*, else every interface but docker*/lo*/virbr*, in kernel "
            f"order: {', '.join(facts.kernel_order) or 'none'}",
            f"data between nodes: {carrier} ({carrier_why})",
            *((f"socket transport devices: {', '.join(chosen)}",)
              if _truncated(others) else ()),
            f"cluster interface: {facts.cluster_choice[1]}",
        ),
        f"{export('NCCL_SOCKET_IFNAME', planned_socket_ifname(facts, fix_name))}, or "
        f"{_PLAN_FIX}" if fix_name else
        export("NCCL_SOCKET_IFNAME", Placeholder("<the cluster interface>")),
        severity=severity,
    )]


#: Interfaces named per reason in a title; the rest are counted (the evidence lists them all).
_NAMES_SHOWN = 4


def _grouped(facts: Facts, reaches: list[Reach]) -> str:
    """``"vethA0, vethA1 (only link-local addresses); eth0 (172.20.0.5), Runpod's management
    interface"``: interfaces sharing a reason named once with it, at most four per reason."""
    groups: dict[str, list[str]] = {}
    for r in reaches:
        groups.setdefault(r.why, []).append(r.interface)
    texts = []
    for why, names in groups.items():
        if len(names) == 1:
            texts.append(f"{facts.describe(names[0])}, {why}")
            continue
        shown = ", ".join(names[:_NAMES_SHOWN])
        more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
        texts.append(f"{shown}{more} ({why})")
    return "; ".join(texts)


def _truncated(reaches: list[Reach]) -> bool:
    """Whether :func:`_grouped` leaves names out (then the evidence lists them all)."""
    counts: dict[str, int] = {}
    for r in reaches:
        counts[r.why] = counts.get(r.why, 0) + 1
    return any(n > _NAMES_SHOWN for n in counts.values())


#: The fix for every socket variable the plan sets.
_PLAN_FIX = 'eval "$(clusterenv env)" in this shell, or start the job with `clusterenv launch`'


@dataclass(frozen=True, slots=True)
class GlooBinding:
    """What Gloo binds with ``GLOO_SOCKET_IFNAME`` unset, and how that was found out.

    torch resolves the host name and binds the first address that can be bound (one of this
    node's, or loopback); when none can, it warns ``Unable to resolve hostname to a (local)
    address`` and binds 127.0.0.1.

    Attributes:
        hostname: This node's host name, e.g. ``"node-1"``.
        resolution: What the name resolved to.
        address: The address Gloo binds, e.g. ``"172.20.0.11"``; None when unknown.
        fallback: Whether that is torch's loopback fallback.
    """

    hostname: str
    resolution: Resolution
    address: str | None
    fallback: bool


def gloo_binding(facts: Facts) -> GlooBinding | None:
    """What Gloo would bind on this node, or None without a host name."""
    hostname = facts.hostname
    if not hostname:
        return None
    resolution = facts.resolve(hostname)
    if resolution.status == "unknown" and not resolution.failed:
        # No answer in time, or a snapshot that cannot ask: what Gloo would get is unknown.
        # A resolver that fails now fails Gloo's lookup too, and Gloo falls back to loopback.
        return GlooBinding(hostname, resolution, None, False)
    for text in resolution.addresses:
        ip = ipaddress.ip_address(text)
        if ip.is_loopback or facts.network.owner_of(ip) is not None:
            return GlooBinding(hostname, resolution, text, False)
    return GlooBinding(hostname, resolution, "127.0.0.1", True)


def _gloo_unset(facts: Facts) -> list[Finding]:
    """GLOO_SOCKET_IFNAME unset, and the host name does not lead to the cluster NIC.

    An error when Gloo would certainly bind loopback or an interface that must not carry
    cluster traffic; a warning when it binds another interface or the name could not be
    resolved here.
    """
    if facts.user_value("GLOO_SOCKET_IFNAME") is not None:
        return []
    binding = gloo_binding(facts)
    if binding is None:
        return []
    hostname, resolution = binding.hostname, binding.resolution
    cluster = facts.cluster_interface
    fix_name = usable_cluster_interface(facts)
    fix = (f"{export('GLOO_SOCKET_IFNAME', fix_name)}, or {_PLAN_FIX}"
           if fix_name else export("GLOO_SOCKET_IFNAME", Placeholder("<the cluster interface>")))
    head = "GLOO_SOCKET_IFNAME is unset and"
    evidence: tuple[str, ...] = (f"hostname: {hostname}", resolution.describe())
    severity: Severity = "error"
    if binding.address is None:
        severity = "warning"
        title = (f"{head} the host name {hostname!r} could not be resolved here "
                 f"({resolution.error}): Gloo binds whatever it resolves to, and falls back to "
                 "the loopback address when that fails")
    elif binding.fallback:
        found = (f"resolves to {', '.join(resolution.addresses)}, none of them an address of "
                 "this node" if resolution.addresses else f"does not resolve ({resolution.error})")
        title = (f"{head} the host name {hostname!r} {found}: Gloo falls back to 127.0.0.1 "
                 "and the other nodes cannot connect (Gloo connectFullMesh failed)")
    elif ipaddress.ip_address(binding.address).is_loopback:
        title = (f"{head} {hostname!r} resolves to {binding.address} ({resolution.via}): Gloo "
                 "will bind loopback and the other nodes cannot connect (Gloo connectFullMesh "
                 "failed)")
    else:
        owner = facts.network.owner_of(binding.address)
        if owner is None or cluster is None or owner.name == cluster.name:
            return []
        risk = facts.avoid.get(owner.name)
        if risk is None:
            severity = "warning"
        title = (f"{head} {hostname!r} resolves to {facts.describe(owner.name)}"
                 f"{', ' + risk if risk else ''}: Gloo will not use the cluster interface "
                 f"{cluster.name}")
        if risk is not None:
            title += ", and the other nodes cannot reach it"
    return [Finding.of("gloo-ifname-unset", title, evidence, fix, severity=severity)]


def _cluster_interface_state(facts: Facts) -> list[Finding]:
    """The cluster interface is down, or (Runpod) ``ens1`` exists without an IPv4 address."""
    interface = facts.cluster_interface
    if interface is None:
        if not facts.runpod:
            return []
        bare = [i.name for i in facts.network
                if runpod.is_cluster_interface_name(i.name) and not i.ipv4]
        if not bare:
            return []
        return [Finding.of(
            "cluster-interface-no-ipv4",
            f"{bare[0]} has no IPv4 address: the cluster network of this node is not configured",
            (f"interfaces without IPv4: {', '.join(bare)}", facts.cluster_choice[1]),
            "wait for the cluster network to come up (Runpod: up to 30 s after start), or "
            "restart the pod",
        )]
    if interface.is_up:
        return []
    return [Finding.of(
        "cluster-interface-down",
        f"the cluster interface {facts.describe(interface.name)} is {interface.operstate}",
        (f"cluster interface: {facts.cluster_choice[1]}", f"operstate: {interface.operstate}"),
        f"bring {prose(interface.name)} up "
        f"({code(command('ip', 'link', 'set', interface.name, 'up'))}) "
        "or check the cable/port",
    )]


def network_checks(facts: Facts, bootstrap: NcclBootstrap | None = None) -> list[Finding]:
    """Doctor's socket checks of the environment as it is (before any plan is applied);
    ``bootstrap`` is NCCL's own answer where it was asked."""
    if not facts.multi_node:
        return []
    return [*_cluster_interface_state(facts), *_socket_unset(facts, bootstrap),
            *_gloo_unset(facts)]
