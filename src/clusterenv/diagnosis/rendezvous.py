"""The rendezvous address and this node's own address: where the host name resolves, whether the
rendezvous address is reachable over the cluster interface, NODE_ADDR, the primary's rank, and
the host addresses frameworks bind.

On Runpod the rendezvous address must not be a 172.x management address and must not be
reached through ``eth0``; elsewhere the route is compared with the cluster interface.
"""

from __future__ import annotations

import ipaddress

from clusterenv._facts import Facts
from clusterenv._resolve import Resolution
from clusterenv._shell import Placeholder, command, export, prose
from clusterenv._values import is_loopback_host, parse_host, split_host_port
from clusterenv.findings import Finding
from clusterenv.nccl.interface import primary_variable
from clusterenv.network import route_interface
from clusterenv.sources import runpod

__all__ = ["FRAMEWORK_HOST_IPS", "rendezvous_checks"]

#: Variables in which frameworks take this node's own address.
FRAMEWORK_HOST_IPS = ("VLLM_HOST_IP", "RAY_NODE_IP_ADDRESS")


def _hostname_loopback(facts: Facts) -> list[Finding]:
    """The host name resolves to loopback, which a c10d rendezvous would advertise."""
    hostname = facts.hostname
    if not hostname:
        return []
    resolution = facts.resolve(hostname)
    if not resolution.addresses:
        return []
    first = ipaddress.ip_address(resolution.addresses[0])
    if not first.is_loopback:
        return []
    variable = primary_variable(facts)
    return [Finding.of(
        "hostname-loopback",
        f"host name {hostname!r} resolves to {first} ({resolution.via}): torchrun's c10d "
        "rendezvous and socket.getfqdn() would hand other nodes a loopback address",
        (resolution.describe(),),
        f"use a static rendezvous on the IP address: torchrun --rdzv-backend=static "
        f"--master-addr=${variable} (clusterenv launch does), or map {prose(hostname)} to this "
        "node's cluster address in /etc/hosts",
    )]


def _route_table_present(facts: Facts, version: int) -> bool:
    return facts.root.exists("proc/net/route" if version == 4 else "proc/net/ipv6_route")


#: The variables that name the rendezvous host, in the order they are judged.
_PRIMARY_VARIABLES = ("PRIMARY_ADDR", "MASTER_ADDR", "HOST_NODE_ADDR")


def _primary_hosts(facts: Facts) -> list[tuple[str, str]]:
    """``(variable, host)`` for each rendezvous variable that names a host, each host once;
    e.g. ``[("PRIMARY_ADDR", "node-0")]``. Garbled values are the config checks' business."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for variable in _PRIMARY_VARIABLES:
        text = facts.environ.get(variable, "").strip()
        if not text:
            continue
        if variable == "HOST_NODE_ADDR":
            split = split_host_port(text)
            host = split[0] if split is not None else None
        else:
            host = parse_host(text)
        if host is None or host in seen:
            continue
        seen.add(host)
        out.append((variable, host))
    return out


def _cluster_placeholder(facts: Facts) -> Placeholder:
    """``<the address of the primary node on ens1 (10.65.0.0/24)>``, from what this node
    shows."""
    cluster = facts.cluster_interface
    if cluster is None or facts.management_reason(cluster) is not None:
        where = "ens1" if facts.runpod else "cluster"
        return Placeholder(f"<the primary node's {where} address>")
    network = f" ({cluster.ipv4[0].network})" if cluster.ipv4 else ""
    return Placeholder.of("<the address of the primary node on {name}" + network + ">",
                          name=cluster.name)


def _primary_address(facts: Facts) -> list[Finding]:
    """The rendezvous host is a management address, does not resolve, or is reached the
    wrong way. A host name is resolved first (system resolver, short deadline) and its address
    judged exactly like a literal one."""
    out: list[Finding] = []
    judged: set[str] = set()
    for variable, host in _primary_hosts(facts):
        if is_loopback_host(host):
            continue  # config-loopback-primary says it
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            if str(ip) not in judged:
                judged.add(str(ip))
                out += _judge_primary_ip(facts, variable, ip, f"{variable}={ip}", ())
            continue
        resolution = facts.resolve(host)
        if resolution.status == "unresolvable":
            out.append(Finding.of(
                "primary-name-unresolvable",
                f"{variable}={host} does not resolve ({resolution.error}): torchrun cannot "
                "find the rendezvous and every node fails at start",
                (f"{variable}={facts.environ.get(variable, '')!r}", resolution.describe()),
                f"{export(variable, _cluster_placeholder(facts))}, or make {prose(host)} resolve "
                "on every node (/etc/hosts)",
            ))
            continue
        if resolution.status == "unknown":
            out.append(Finding.of(
                "primary-name-unverified",
                f"{variable}={host} could not be resolved here ({resolution.error}): clusterenv "
                "cannot check where the rendezvous goes",
                (f"{variable}={facts.environ.get(variable, '')!r}", resolution.describe()),
                f"{export(variable, _cluster_placeholder(facts))} (an IP address needs no "
                "resolver), or check that the name resolves: " + command("getent", "hosts", host),
            ))
            continue
        first = ipaddress.ip_address(resolution.addresses[0])
        if str(first) in judged:
            continue
        judged.add(str(first))
        if first.is_loopback:
            out += _named_loopback_primary(facts, variable, host, resolution)
            continue
        out += _judge_primary_ip(facts, variable, first,
                                 f"{variable}={host} (resolves to {first})",
                                 (resolution.describe(),))
    return out


def _named_loopback_primary(
    facts: Facts, variable: str, host: str, resolution: Resolution
) -> list[Finding]:
    """A rendezvous name that resolves to loopback here. On the primary that is harmless (the
    store listens on every address); on any other node torchrun would connect to itself."""
    config = facts.config
    if config is None or config.node_rank == 0:
        return []
    return [Finding.of(
        "config-loopback-primary",
        f"{variable}={host} resolves to {resolution.addresses[0]} on this node (rank "
        f"{config.node_rank}): torchrun here would look for the rendezvous on itself, and the "
        "rendezvous never completes",
        (f"{variable}={facts.environ.get(variable, '')!r}", resolution.describe()),
        f"{export(variable, _cluster_placeholder(facts))} (an IP address), or map {prose(host)} "
        "to the primary's cluster address in this node's /etc/hosts",
    )]


def _judge_primary_ip(
    facts: Facts,
    variable: str,
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
    shown: str,
    resolved: tuple[str, ...],
) -> list[Finding]:
    """The checks of one rendezvous address; ``shown`` is how the title names it, e.g.
    ``"PRIMARY_ADDR=node-0 (resolves to 172.20.0.10)"``."""
    cluster = facts.cluster_interface
    given = (f"{variable}={facts.environ.get(variable, '')!r}", *resolved)
    zone = ip.scope_id if isinstance(ip, ipaddress.IPv6Address) else None
    if zone and facts.network.get(zone) is None and not zone.isdigit():
        return [Finding.of(
            "primary-zone-unknown",
            f"{shown} names the zone {zone!r}, and this node has no interface of that name: "
            "the address cannot be resolved, so binding and connecting to it fail ('Name or "
            "service not known')",
            (*given, f"interfaces here: {', '.join(facts.network.names) or 'none'}"),
            f"use the primary's routable address on the cluster network for {variable}, or a "
            f"zone that names this node's cluster interface "
            f"({export(variable, Placeholder('<address>%<interface>'))})",
        )]
    if facts.runpod and runpod.is_management(address=str(ip)):
        return [Finding.of(
            "primary-addr-management",
            f"{shown} is a Runpod management address (172.16.0.0/12, eth0): other nodes "
            "cannot reach it and the rendezvous times out",
            (*given, "Runpod: 172.x addresses are for internet traffic only"),
            f"{export(variable, _cluster_placeholder(facts))}; Runpod sets PRIMARY_ADDR on "
            "ens1, so keep the value it set instead of `hostname -I` or a host name",
        )]
    if facts.network.owner_of(ip) is not None or not _route_table_present(facts, ip.version):
        return []
    route = route_interface(ip, root=facts.root)
    evidence = (*given,
                f"route to {ip}: {'via ' + route if route else 'none'}",
                f"cluster interface: {facts.cluster_choice[1]}")
    if route is None:
        return [Finding.of(
            "primary-unreachable",
            f"no route to {shown}: the kernel's routing table has no entry for it",
            evidence, f"check {variable}, or the cluster network (`ip route get {ip}`)",
        )]
    interface = facts.network.get(route)
    management = facts.management_reason(interface) if interface else None
    if facts.runpod and (management or runpod.is_management(interface=route)):
        return [Finding.of(
            "primary-route-management",
            f"the route to {shown} leaves via {facts.describe(route)}, "
            f"{management or 'Runpod management'}: the rendezvous will time out",
            evidence,
            f"use the primary's address on the cluster network for {variable} "
            "(the value Runpod set), so that it is reached over ens1",
        )]
    if cluster is not None and route != cluster.name:
        return [Finding.of(
            "primary-route-not-cluster",
            f"the route to {shown} leaves via {facts.describe(route)}, not the "
            f"cluster interface {facts.describe(cluster.name)}",
            evidence,
            f"set {variable} to the primary's address on the subnet of {prose(cluster.name)}",
        )]
    return []


def _node_addr(facts: Facts) -> list[Finding]:
    """NODE_ADDR is not an address of this node (an environment copied from another)."""
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
    """This node holds the rendezvous address but is not rank 0 (generic sources; the
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
    """Ray/vLLM told to bind an address that is not this node's cluster address."""
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
        fix = (export(variable, str(cluster.ipv4[0].ip)) if cluster and cluster.ipv4
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
