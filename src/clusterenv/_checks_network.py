"""Socket interfaces: what the plan sets for NCCL, Gloo and TensorPipe, and the checks of
failure modes FM-01 to FM-06, FM-10, FM-11 and FM-15.

Runpod's knowledge (``eth0`` and 172.x are management) enters only through
:meth:`Facts.management_reason` and :attr:`Facts.avoid`, which apply it when the Runpod source
matched; elsewhere the same rules run on evidence alone.
"""

from __future__ import annotations

import ipaddress

from clusterenv._facts import Facts, Proposal, with_origin
from clusterenv.filters import (
    lint_exact_names,
    lint_filter,
    nccl_default_interfaces,
    needs_exact,
    parse_filter,
    render_exact,
)
from clusterenv.findings import Finding
from clusterenv.sources import runpod

__all__ = [
    "lookup_hostname",
    "network_checks",
    "planned_socket_ifname",
    "primary_variable",
    "socket_plan",
    "socket_value_findings",
]
_SOCKET_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


def primary_variable(facts: Facts) -> str:
    if facts.source == "runpod" and facts.environ.get("PRIMARY_ADDR"):
        return "PRIMARY_ADDR"
    return "MASTER_ADDR"


def _usable_cluster_interface(facts: Facts) -> str | None:
    """The cluster interface name when there is one the plan may use (multi-node, not
    management), else None."""
    interface = facts.cluster_interface if facts.multi_node else None
    if interface is None or facts.management_reason(interface) is not None:
        return None
    return interface.name


def planned_socket_ifname(facts: Facts, name: str) -> str:
    """``ens1``, or ``=ens1`` when another interface here starts with ``ens1`` (``ens10``)."""
    return render_exact([name]) if needs_exact(name, facts.network.names) else name


def _nccl_default_choice(facts: Facts) -> tuple[str, ...]:
    """The interfaces NCCL uses with ``NCCL_SOCKET_IFNAME`` unset; it bootstraps on the first."""
    version = facts.nccl_versions[0].version if facts.nccl_versions else None
    return nccl_default_interfaces(facts.kernel_order, nccl_version=version)


def socket_plan(facts: Facts) -> tuple[list[Proposal], list[Finding], list[str]]:
    """The three socket variables on a multi-node cluster, or why they are left alone."""
    interface, why = facts.cluster_choice
    unset = "NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME and TP_SOCKET_IFNAME"
    if interface is None:
        finding = Finding(
            "cluster-interface-unknown", "warning",
            f"no interface here carries the cluster network: {unset} are left unset",
            (why,),
            "export NODE_ADDR=<this node's cluster IP>, or set NCCL_SOCKET_IFNAME and "
            "GLOO_SOCKET_IFNAME to the cluster interface yourself",
        )
        return [], [finding], [f"{unset} left unset: no cluster interface ({why})"]
    management = facts.management_reason(interface)
    if management is not None:
        finding = Finding(
            "cluster-interface-management", "error",
            f"the cluster address is on {facts.describe(interface.name)}, {management}: "
            f"{unset} are left unset",
            (why, "Runpod: eth0 and 172.x addresses are for internet traffic only and time "
             "out between nodes"),
            "use the addresses Runpod sets (NODE_ADDR and PRIMARY_ADDR are on ens1); do not "
            "export them from `hostname -I`",
        )
        return [], [finding], [f"{unset} left unset: the cluster address is on {management}"]
    name = interface.name
    nccl_default = _nccl_default_choice(facts)
    default = nccl_default[0] if nccl_default else None
    nccl_why = why
    if default is not None and default != name:
        risk = facts.avoid.get(default)
        nccl_why += f"; unset, NCCL would bootstrap over {facts.describe(default)}"
        nccl_why += f", {risk}" if risk else ""
    value = planned_socket_ifname(facts, name)
    if value != name:
        prefixed = [n for n in facts.network.names if n != name and n.startswith(name)]
        nccl_why += f"; '=' because the prefix {name!r} also matches {', '.join(prefixed)}"
    names = facts.network.names

    def nccl_same(user: str) -> bool:
        parsed = parse_filter(user)
        return parsed is not None and parsed.select_interfaces(names) == (name,)

    proposals = [
        Proposal("NCCL_SOCKET_IFNAME", value, nccl_why, nccl_same),
        Proposal("GLOO_SOCKET_IFNAME", name,
                 f"{why}; unset, Gloo binds whatever the host name resolves to",
                 lambda user: user.split(",") == [name]),
        Proposal("TP_SOCKET_IFNAME", name,
                 f"{why}; unset, TensorPipe binds whatever the host name resolves to",
                 lambda user: user == name),
    ]
    return proposals, [], []


def _not_cluster(facts: Facts, variable: str, value: str, used: str, cluster: str) -> Finding:
    return Finding(
        "ifname-not-cluster", "warning",
        f"{variable}={value!r} uses {facts.describe(used)}, not the cluster interface "
        f"{facts.describe(cluster)}",
        (f"{variable}={value!r}", f"cluster interface: {facts.cluster_choice[1]}"),
        f"export {variable}={cluster}",
    )


def socket_value_findings(facts: Facts) -> list[tuple[str, Finding]]:
    """Lint the socket variables the user set, against this host (FM-02 to FM-06, FM-11)."""
    cluster = _usable_cluster_interface(facts)
    out: list[tuple[str, Finding]] = []
    for variable in _SOCKET_VARIABLES:
        found = facts.user_value(variable)
        if found is None:
            continue
        value, origin = found
        if variable == "NCCL_SOCKET_IFNAME":
            suggest = planned_socket_ifname(facts, cluster) if cluster else None
            findings = lint_filter(
                value, variable=variable, names=facts.kernel_order, owner=facts.owners,
                avoid=facts.avoid, suggest=suggest,
            )
            parsed = parse_filter(value)
            selected = parsed.select_interfaces(facts.kernel_order) if parsed else ()
        else:
            findings = lint_exact_names(
                value, variable=variable, names=facts.network.names,
                single=variable == "TP_SOCKET_IFNAME", owner=facts.owners, avoid=facts.avoid,
                suggest=cluster,
            )
            selected = tuple(n for n in value.split(",")[:1] if n in facts.network.names)
        if (
            not findings
            and cluster is not None
            and selected
            and selected[0] != cluster
            and selected[0] not in facts.avoid
        ):
            findings.append(_not_cluster(facts, variable, value, selected[0], cluster))
        out.extend((variable, f) for f in with_origin(findings, origin))
    return out


# -- doctor-only checks: the environment as it is now ----------------------------------------


def _socket_unset(facts: Facts) -> list[Finding]:
    """FM-01 / FM-15: NCCL_SOCKET_IFNAME unset, and NCCL's own choice is not the cluster NIC."""
    if facts.user_value("NCCL_SOCKET_IFNAME") is not None:
        return []
    chosen = _nccl_default_choice(facts)
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
    fix_name = _usable_cluster_interface(facts)
    return [Finding(
        "socket-ifname-unset", "warning", title,
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
    fix_name = _usable_cluster_interface(facts)
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
    return [Finding("gloo-ifname-unset", "warning", title, evidence, fix)]


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
        return [Finding(
            "cluster-interface-no-ipv4", "error",
            f"{bare[0]} has no IPv4 address: the cluster network of this node is not configured",
            (f"interfaces without IPv4: {', '.join(bare)}", facts.cluster_choice[1]),
            "wait for the cluster network to come up (Runpod: up to 30 s after start), or "
            "restart the pod",
        )]
    if interface.is_up:
        return []
    return [Finding(
        "cluster-interface-down", "error",
        f"the cluster interface {facts.describe(interface.name)} is {interface.operstate}",
        (f"cluster interface: {facts.cluster_choice[1]}", f"operstate: {interface.operstate}"),
        f"bring {interface.name} up (`ip link set {interface.name} up`) or check the cable/port",
    )]


def network_checks(facts: Facts) -> list[Finding]:
    """Doctor's socket checks of the environment as it is (before any plan is applied)."""
    if not facts.multi_node:
        return []
    return [*_cluster_interface_state(facts), *_socket_unset(facts), *_gloo_unset(facts)]
