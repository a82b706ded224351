"""Doctor's socket checks of the environment as it stands, before any plan is applied: the
cluster interface's state, and what NCCL and Gloo would choose with their variables unset
(failure modes FM-01, FM-10 and FM-15).

Runpod's knowledge (``eth0`` and 172.x are management) enters only through
:meth:`Facts.management_reason` and :attr:`Facts.avoid`, which apply it when the Runpod source
matched; elsewhere the same rules run on evidence alone.
"""

from __future__ import annotations

import ipaddress

from clusterenv._facts import Facts
from clusterenv.findings import Finding
from clusterenv.nccl.interface import (
    nccl_default_choice,
    planned_socket_ifname,
    usable_cluster_interface,
)
from clusterenv.sources import runpod

__all__ = ["lookup_hostname", "network_checks"]



def _socket_unset(facts: Facts) -> list[Finding]:
    """FM-01 / FM-15: NCCL_SOCKET_IFNAME unset, and NCCL's own choice is not the cluster NIC."""
    if facts.user_value("NCCL_SOCKET_IFNAME") is not None:
        return []
    chosen = nccl_default_choice(facts)
    cluster = facts.cluster_interface
    cluster_name = cluster.name if cluster is not None else None

    def why(name: str) -> str | None:
        if name in facts.avoid:
            return f"{facts.describe(name)}, {facts.avoid[name]}"
        if cluster_name is not None and name != cluster_name:
            return f"{facts.describe(name)}, not the cluster interface {cluster_name}"
        return None

    if not chosen:
        return []
    if chosen[0] != cluster_name and why(chosen[0]) is not None:
        title = f"NCCL_SOCKET_IFNAME is unset: NCCL would bootstrap over {why(chosen[0])}"
    else:
        extra = [text for name in chosen[1:] if (text := why(name)) is not None]
        if not extra:
            return []
        title = (f"NCCL_SOCKET_IFNAME is unset: besides {chosen[0]}, NCCL's socket transport "
                 f"would also use {'; '.join(extra)}")
    fix_name = usable_cluster_interface(facts)
    return [Finding.of(
        "socket-ifname-unset", title,
        (
            "NCCL's default: ib*, else every interface but docker*/lo*/virbr*, in kernel "
            f"order: {', '.join(facts.kernel_order) or 'none'}",
            f"cluster interface: {facts.cluster_choice[1]}",
        ),
        f"export NCCL_SOCKET_IFNAME={planned_socket_ifname(facts, fix_name)}  "
        "(or: eval \"$(clusterenv env)\")" if fix_name else
        "export NCCL_SOCKET_IFNAME=<the cluster interface>",
    )]


def lookup_hostname(facts: Facts) -> tuple[str, list[str]] | None:
    hostname = facts.hostname
    if not hostname:
        return None
    return hostname, facts.etc_hosts.get(hostname.lower().rstrip("."), [])


def _gloo_unset(facts: Facts) -> list[Finding]:
    """FM-10: GLOO_SOCKET_IFNAME unset, and the host name does not lead to the cluster NIC."""
    if facts.user_value("GLOO_SOCKET_IFNAME") is not None:
        return []
    looked_up = lookup_hostname(facts)
    if looked_up is None:
        return []
    hostname, addresses = looked_up
    cluster = facts.cluster_interface
    fix_name = usable_cluster_interface(facts)
    fix = (f"export GLOO_SOCKET_IFNAME={fix_name}  (or: eval \"$(clusterenv env)\")"
           if fix_name else "export GLOO_SOCKET_IFNAME=<the cluster interface>")
    head = "GLOO_SOCKET_IFNAME is unset and"
    if not addresses:
        title = (f"{head} the host name {hostname!r} is not in /etc/hosts: Gloo resolves it "
                 "through DNS and falls back to the loopback address when that fails")
        evidence: tuple[str, ...] = (f"hostname: {hostname}", "/etc/hosts has no entry for it")
    else:
        first = ipaddress.ip_address(addresses[0])
        owner = facts.network.owner_of(first) if not first.is_loopback else None
        if first.is_loopback:
            title = (f"{head} {hostname!r} resolves to {first} in /etc/hosts: Gloo will bind "
                     "loopback and peers cannot connect")
        elif cluster is None or (owner is not None and owner.name == cluster.name):
            return []
        else:
            where = facts.describe(owner.name) if owner else f"{first} (not an address here)"
            extra = facts.avoid.get(owner.name, "") if owner else ""
            title = (f"{head} {hostname!r} resolves to {where}{', ' + extra if extra else ''}: "
                     f"Gloo will not use the cluster interface {cluster.name}")
        evidence = (f"hostname: {hostname}", f"/etc/hosts: {hostname} -> "
                    f"{', '.join(addresses)}")
    return [Finding.of("gloo-ifname-unset", title, evidence, fix)]


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
        f"bring {interface.name} up (`ip link set {interface.name} up`) or check the cable/port",
    )]


def network_checks(facts: Facts) -> list[Finding]:
    """Doctor's socket checks of the environment as it is (before any plan is applied)."""
    if not facts.multi_node:
        return []
    return [*_cluster_interface_state(facts), *_socket_unset(facts), *_gloo_unset(facts)]
