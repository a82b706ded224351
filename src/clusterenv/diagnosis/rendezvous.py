"""The rendezvous address and this node's own address: doctor's checks of failure modes FM-13,
FM-14, FM-20 and FM-37 of the catalogue.

On Runpod the rendezvous address must not be a 172.x management address and must not be
reached through ``eth0``; elsewhere the route is compared with the cluster interface.
"""

from __future__ import annotations

import ipaddress

from clusterenv._facts import Facts
from clusterenv.diagnosis.network import lookup_hostname
from clusterenv.findings import Finding
from clusterenv.nccl.interface import primary_variable
from clusterenv.network import route_interface
from clusterenv.sources import runpod

__all__ = ["FRAMEWORK_HOST_IPS", "rendezvous_checks"]

#: Variables in which frameworks take this node's own address (FM-37).
FRAMEWORK_HOST_IPS = ("VLLM_HOST_IP", "RAY_NODE_IP_ADDRESS")


def _hostname_loopback(facts: Facts) -> list[Finding]:
    """FM-13: the host name resolves to loopback, which a c10d rendezvous would advertise."""
    looked_up = lookup_hostname(facts)
    if looked_up is None or not looked_up[1]:
        return []
    hostname, addresses = looked_up
    first = ipaddress.ip_address(addresses[0])
    if not first.is_loopback:
        return []
    variable = primary_variable(facts)
    return [Finding.of(
        "hostname-loopback",
        f"host name {hostname!r} resolves to {first} (/etc/hosts): torchrun's c10d rendezvous "
        "and socket.getfqdn() would hand other nodes a loopback address",
        (f"/etc/hosts: {hostname} -> {', '.join(addresses)}",),
        f"use a static rendezvous on the IP address: torchrun --rdzv-backend=static "
        f"--master-addr=${variable} (clusterenv launch does), or map {hostname} to this "
        "node's cluster address in /etc/hosts",
    )]


def _route_table_present(facts: Facts, version: int) -> bool:
    return facts.root.exists("proc/net/route" if version == 4 else "proc/net/ipv6_route")


def _primary_address(facts: Facts) -> list[Finding]:
    """FM-14: the rendezvous address is a management address, or is reached the wrong way."""
    out: list[Finding] = []
    seen: set[str] = set()
    for variable in ("PRIMARY_ADDR", "MASTER_ADDR"):
        text = facts.environ.get(variable, "").strip().strip("[]")
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            continue
        if str(ip) in seen or ip.is_loopback:
            continue
        seen.add(str(ip))
        cluster = facts.cluster_interface
        if facts.runpod and runpod.is_management(address=str(ip)):
            where = (f"the primary node's address on {cluster.name} "
                     f"({cluster.ipv4[0].network if cluster.ipv4 else 'the cluster network'})"
                     if cluster else "the primary node's ens1 address")
            out.append(Finding.of(
                "primary-addr-management",
                f"{variable}={ip} is a Runpod management address (172.16.0.0/12, eth0): "
                "other nodes cannot reach it and the rendezvous times out",
                (f"{variable}={ip}", "Runpod: 172.x addresses are for internet traffic only"),
                f"export {variable}=<{where}>; Runpod sets PRIMARY_ADDR on ens1, so keep "
                "the value it set instead of `hostname -I`",
            ))
            continue
        if facts.network.owner_of(ip) is not None or not _route_table_present(facts, ip.version):
            continue
        route = route_interface(ip, root=facts.root)
        evidence = (f"{variable}={ip}",
                    f"route to {ip}: {'via ' + route if route else 'none'}",
                    f"cluster interface: {facts.cluster_choice[1]}")
        if route is None:
            out.append(Finding.of(
                "primary-unreachable",
                f"no route to {variable}={ip}: the kernel's routing table has no entry for it",
                evidence, f"check {variable}, or the cluster network (`ip route get {ip}`)",
            ))
            continue
        interface = facts.network.get(route)
        management = facts.management_reason(interface) if interface else None
        if facts.runpod and (management or runpod.is_management(interface=route)):
            out.append(Finding.of(
                "primary-route-management",
                f"the route to {variable}={ip} leaves via {facts.describe(route)}, "
                f"{management or 'Runpod management'}: the rendezvous will time out",
                evidence,
                f"use the primary's address on the cluster network for {variable} "
                "(the value Runpod set), so that it is reached over ens1",
            ))
        elif cluster is not None and route != cluster.name:
            out.append(Finding.of(
                "primary-route-not-cluster",
                f"the route to {variable}={ip} leaves via {facts.describe(route)}, not the "
                f"cluster interface {facts.describe(cluster.name)}",
                evidence,
                f"set {variable} to the primary's address on the subnet of {cluster.name}",
            ))
    return out


def _node_addr(facts: Facts) -> list[Finding]:
    """FM-14: NODE_ADDR is not an address of this node (an environment copied from another)."""
    text = facts.environ.get("NODE_ADDR", "").strip().strip("[]")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return []
    if ip.is_loopback or facts.network.owner_of(ip) is not None:
        return []
    have = [f"{i.name} {', '.join(str(a.ip) for a in i.addresses)}"
            for i in facts.network if i.addresses and not i.is_loopback]
    return [Finding.of(
        "node-addr-not-local",
        f"NODE_ADDR={ip} is not an address of this node",
        (f"NODE_ADDR={ip}", f"addresses here: {'; '.join(have) or 'none'}"),
        "export NODE_ADDR=<this node's own cluster address>; do not copy the environment "
        "between nodes",
    )]


def _primary_rank(facts: Facts) -> list[Finding]:
    """FM-20: this node holds the rendezvous address but is not rank 0 (generic sources; the
    Runpod source checks this itself)."""
    config = facts.config
    if config is None or facts.runpod or config.node_rank == 0:
        return []
    try:
        owner = facts.network.owner_of(config.primary_addr)
    except ValueError:
        return []
    if owner is None or owner.is_loopback:
        return []
    variable = primary_variable(facts)
    return [Finding.of(
        "primary-rank-mismatch",
        f"this node holds {variable}={config.primary_addr} (on {owner.name}) but its node rank "
        f"is {config.node_rank}: the node that hosts the rendezvous must be rank 0",
        (f"{variable}={config.primary_addr} is on {owner.name}",
         f"node rank: {config.node_rank}"),
        "export NODE_RANK=0 on this node, and give the other nodes ranks 1 and up",
    )]


def _framework_host_ips(facts: Facts) -> list[Finding]:
    """FM-37: Ray/vLLM told to bind an address that is not this node's cluster address."""
    cluster = facts.cluster_interface
    out = []
    for variable in FRAMEWORK_HOST_IPS:
        text = facts.environ.get(variable)
        if text is None:
            continue
        try:
            ip = ipaddress.ip_address(text.strip())
        except ValueError:
            continue
        owner = facts.network.owner_of(ip)
        evidence = (f"{variable}={text!r}", f"cluster interface: {facts.cluster_choice[1]}")
        fix = (f"export {variable}={cluster.ipv4[0].ip}" if cluster and cluster.ipv4
               else f"set {variable} to this node's cluster address")
        if owner is None:
            out.append(Finding.of("framework-host-ip",
                               f"{variable}={ip} is not an address of this node", evidence, fix))
        elif (reason := facts.avoid.get(owner.name)) is not None:
            out.append(Finding.of("framework-host-ip",
                               f"{variable}={ip} is on {owner.name}, {reason}", evidence, fix))
        elif cluster is not None and owner.name != cluster.name:
            out.append(Finding.of(
                "framework-host-ip",
                f"{variable}={ip} is on {owner.name}, not the cluster interface {cluster.name}",
                evidence, fix,
                severity="warning",
            ))
    return out


def rendezvous_checks(facts: Facts) -> list[Finding]:
    """Doctor's checks of the rendezvous address and this node's addresses."""
    if not facts.multi_node:
        # A broken Runpod environment still says where the rendezvous would go.
        return _primary_address(facts) if facts.config is None and facts.runpod else []
    return [
        *_primary_address(facts),
        *_node_addr(facts),
        *_primary_rank(facts),
        *_hostname_loopback(facts),
        *_framework_host_ips(facts),
    ]
