"""Socket interfaces: which interface the plan names in ``NCCL_SOCKET_IFNAME``,
``GLOO_SOCKET_IFNAME`` and ``TP_SOCKET_IFNAME``, and the lint of the values the user set there.
Doctor's checks of the unset case live in
:mod:`clusterenv.diagnosis.network`.

Runpod's knowledge (``eth0`` and 172.x are management) enters only through
:meth:`Facts.management_reason` and :attr:`Facts.avoid`, which apply it when the Runpod source
matched; elsewhere the same rules run on evidence alone.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import TYPE_CHECKING

from clusterenv._facts import Facts, Proposal, with_origin
from clusterenv._shell import export
from clusterenv.filters import (
    lint_exact_names,
    lint_filter,
    nccl_default_interfaces,
    needs_exact,
    parse_filter,
    render_exact,
)
from clusterenv.findings import Finding
from clusterenv.nccl.paths import data_consequence

if TYPE_CHECKING:
    from clusterenv._values import IPAddress

__all__ = [
    "MAX_SOCKET_DEVICES",
    "SOCKET_FAMILIES",
    "bootstrap_unpredictable",
    "comm_id_address",
    "nccl_default_choice",
    "planned_socket_ifname",
    "predict_bootstrap",
    "primary_variable",
    "rate_by_consequence",
    "socket_interfaces",
    "socket_plan",
    "socket_value_findings",
    "usable_cluster_interface",
]
_SOCKET_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


def primary_variable(facts: Facts) -> str:
    """The variable the rendezvous address was read from (``ClusterConfig.primary_variable``),
    e.g. ``"PRIMARY_ADDR"``; ``"MASTER_ADDR"`` when the contract is invalid."""
    return facts.config.primary_variable if facts.config is not None else "MASTER_ADDR"


def usable_cluster_interface(facts: Facts) -> str | None:
    """The cluster interface name when there is one the plan may use (multi-node, not
    management), else None."""
    interface = facts.cluster_interface if facts.multi_node else None
    if interface is None or facts.management_reason(interface) is not None:
        return None
    return interface.name


def planned_socket_ifname(facts: Facts, name: str) -> str:
    """``ens1``, or ``=ens1`` when another interface here starts with ``ens1`` (``ens10``)."""
    return render_exact([name]) if needs_exact(name, facts.network.names) else name


#: NCCL's ``MAX_IFS``: the most interfaces its socket transport uses.
MAX_SOCKET_DEVICES = 16


def socket_interfaces(facts: Facts) -> tuple[str, ...]:
    """The interfaces NCCL's socket transport uses, in NCCL's order: those
    ``NCCL_SOCKET_IFNAME`` selects (NCCL's default when unset or one character), at most 16.
    The first is the bootstrap interface by NCCL's rules (``NCCL_COMM_ID`` aside)."""
    value = facts.user_value("NCCL_SOCKET_IFNAME")
    parsed = parse_filter(value[0]) if value is not None and len(value[0]) > 1 else None
    if parsed is None:
        return nccl_default_choice(facts)[:MAX_SOCKET_DEVICES]
    return parsed.select_interfaces(facts.kernel_order)[:MAX_SOCKET_DEVICES]


def nccl_default_choice(facts: Facts) -> tuple[str, ...]:
    """The interfaces NCCL uses with ``NCCL_SOCKET_IFNAME`` unset; it bootstraps on the first."""
    version = facts.nccl_versions[0].version if facts.nccl_versions else None
    return nccl_default_interfaces(facts.kernel_order, nccl_version=version)


#: ``NCCL_SOCKET_FAMILY`` values NCCL honours (exact spelling); anything else means either family.
SOCKET_FAMILIES = {"AF_INET": 4, "AF_INET6": 6}


def nccl_address_text(name: str, ip: IPAddress) -> str:
    """An address as NCCL prints it: ``"10.65.0.2"``, or ``"fe80::1%ens1"`` (link-local IPv6
    carries its interface, as ``getnameinfo`` writes it)."""
    if ip.version == 6 and ip.is_link_local:
        return f"{ip}%{name}"
    return str(ip)


def comm_id_address(value: str) -> tuple[IPAddress, str | None] | None:
    """The IP address of an ``NCCL_COMM_ID`` value and the scope of a link-local IPv6 one.

    Example: ``"10.65.0.2:29600"`` and ``"10.65.0.2"`` give ``(IPv4Address("10.65.0.2"), None)``;
    ``"[fe80::1%ens1]:29600"`` gives ``(IPv6Address("fe80::1"), "ens1")``. A host name, or
    anything that is no address, gives None.
    """
    if value.startswith("["):
        host, bracket, _ = value[1:].partition("]")
        if not bracket:
            return None
    elif value.count(":") <= 1:
        host = value.split(":", 1)[0]
    else:
        return None
    address, _, scope = host.partition("%")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    return ip, scope or None


def bootstrap_unpredictable(facts: Facts) -> str | None:
    """Why our model cannot predict NCCL's bootstrap interface here, or None when it can.

    ``NCCL_COMM_ID`` naming a host: NCCL resolves it and bootstraps in the subnet of the
    result; the model does not resolve names (no DNS from a check).
    """
    comm = facts.user_value("NCCL_COMM_ID")
    if comm is not None and comm_id_address(comm[0]) is None:
        return (f"NCCL_COMM_ID={comm[0]!r} is not an IP address and clusterenv does not resolve "
                "host names")
    return None


def _comm_id_choice(facts: Facts, value: str) -> tuple[str, str] | None:
    # ncclFindInterfaceMatchSubnet: the first address in getifaddrs order, up or not, of the
    # same family whose subnet holds the address; a link-local IPv6 address also needs the
    # same scope (interface).
    parsed = comm_id_address(value)
    if parsed is None:
        return None
    ip, scope = parsed
    for name, address, _running in facts.getifaddrs_order:
        if address.version != ip.version or ip not in address.network:
            continue
        local_scope = name if address.version == 6 and address.ip.is_link_local else None
        if local_scope == scope:
            return name, nccl_address_text(name, address.ip)
    return None


def predict_bootstrap(facts: Facts) -> tuple[str, str] | None:
    """The interface and address NCCL bootstraps on under ``facts.environ``, by our model.

    With ``NCCL_COMM_ID`` set to an IP address, NCCL takes the first address (in ``getifaddrs``
    order, whether the interface is up or not) in the same subnet, whatever
    ``NCCL_SOCKET_IFNAME`` says. Otherwise the model of NCCL's ``ncclFindInterfaces`` with one
    interface wanted: walk the addresses in ``getifaddrs`` order (:attr:`Facts.address_order`),
    keep those of ``NCCL_SOCKET_FAMILY`` when it is ``AF_INET`` or ``AF_INET6``, and take the
    first one whose interface the filter of ``NCCL_SOCKET_IFNAME`` selects; unset (or one
    character), the first that NCCL's default steps select
    (:func:`~clusterenv.filters.nccl_default_interfaces`). Check
    :func:`bootstrap_unpredictable` first: a host name in ``NCCL_COMM_ID`` is not modelled.

    Returns:
        ``("ens1", "10.65.0.2")``, or None when NCCL selects nothing (and fails).
    """
    comm = facts.user_value("NCCL_COMM_ID")
    if comm is not None:
        return _comm_id_choice(facts, comm[0])
    family_value = facts.user_value("NCCL_SOCKET_FAMILY")
    family = SOCKET_FAMILIES.get(family_value[0]) if family_value else None
    entries = [(n, a.ip) for n, a in facts.address_order if family in (None, a.version)]
    names = tuple(dict.fromkeys(n for n, _ in entries))
    value = facts.user_value("NCCL_SOCKET_IFNAME")
    parsed = parse_filter(value[0]) if value is not None else None
    if parsed is not None:
        allowed = parsed.select_interfaces(names)
    else:
        version = facts.nccl_versions[0].version if facts.nccl_versions else None
        allowed = nccl_default_interfaces(names, nccl_version=version)
    # Each default step is a search of its own: the first interface of the step that selected
    # anything, which is the first of ``allowed`` in address order.
    for name, ip in entries:
        if name in allowed:
            return name, nccl_address_text(name, ip)
    return None


def socket_plan(facts: Facts) -> tuple[list[Proposal], list[Finding], list[str]]:
    """The three socket variables on a multi-node cluster, or why they are left alone."""
    interface, why = facts.cluster_choice
    unset = "NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME and TP_SOCKET_IFNAME"
    if interface is None:
        finding = Finding.of(
            "cluster-interface-unknown",
            f"no interface here carries the cluster network: {unset} are left unset",
            (why,),
            "export NODE_ADDR=<this node's cluster IP>, or set NCCL_SOCKET_IFNAME and "
            "GLOO_SOCKET_IFNAME to the cluster interface yourself",
        )
        return [], [finding], [f"{unset} left unset: no cluster interface ({why})"]
    management = facts.management_reason(interface)
    if management is not None:
        finding = Finding.of(
            "cluster-interface-management",
            f"the cluster address is on {facts.describe(interface.name)}, {management}: "
            f"{unset} are left unset",
            (why, "Runpod: eth0 and 172.x addresses are for internet traffic only and time "
             "out between nodes"),
            "use the addresses Runpod sets (NODE_ADDR and PRIMARY_ADDR are on ens1); do not "
            "export them from `hostname -I`",
        )
        return [], [finding], [f"{unset} left unset: the cluster address is on {management}"]
    name = interface.name
    nccl_default = nccl_default_choice(facts)
    default = nccl_default[0] if nccl_default else None
    nccl_why = why
    nccl_unset = ""
    if default is not None and default != name:
        risk = facts.avoid.get(default)
        nccl_unset = f"unset, NCCL would bootstrap over {facts.describe(default)}"
        nccl_unset += f", {risk}" if risk else ""
    value = planned_socket_ifname(facts, name)
    if value != name:
        prefixed = [n for n in facts.network.names if n != name and n.startswith(name)]
        nccl_why += f"; '=' because the prefix {name!r} also matches {', '.join(prefixed)}"
    names = facts.network.names

    def nccl_same(user: str) -> bool:
        parsed = parse_filter(user)
        return parsed is not None and parsed.select_interfaces(names) == (name,)

    proposals = [
        Proposal("NCCL_SOCKET_IFNAME", value, nccl_why, nccl_same, nccl_unset),
        Proposal("GLOO_SOCKET_IFNAME", name, why, lambda user: user.split(",") == [name],
                 "unset, Gloo binds whatever the host name resolves to"),
        Proposal("TP_SOCKET_IFNAME", name, why, lambda user: user == name,
                 "unset, TensorPipe binds whatever the host name resolves to"),
    ]
    return proposals, [], []


#: Findings about interfaces a socket setting selects or leaves eligible, which the consequence
#: of those interfaces rates (:func:`rate_by_consequence`).
_RATED = frozenset({"filter-selects-avoided", "filter-leaves-avoided", "filter-matches-nothing"})


def rate_by_consequence(
    facts: Facts, findings: list[Finding], interfaces: tuple[str, ...]
) -> list[Finding]:
    """``findings`` about a setting whose effect is that NCCL's socket transport uses
    ``interfaces``, each rated by what that costs (:func:`~clusterenv.nccl.paths.
    data_consequence`): an error, naming the consequence, when bootstrap or data would cross an
    interface that does not reach the other nodes; as rated by the lint otherwise."""
    if not facts.multi_node:
        return findings
    severity, why = data_consequence(facts, interfaces)
    if severity != "error":
        return findings
    return [replace(f, severity="error", title=f"{f.title}: {why}") if f.code in _RATED
            and f.severity != "error" else f for f in findings]


def _not_cluster(facts: Facts, variable: str, value: str, used: str, cluster: str) -> Finding:
    return Finding.of(
        "ifname-not-cluster",
        f"{variable}={value!r} uses {facts.describe(used)}, not the cluster interface "
        f"{facts.describe(cluster)}",
        (f"{variable}={value!r}", f"cluster interface: {facts.cluster_choice[1]}"),
        export(variable, cluster),
    )


def socket_value_findings(facts: Facts) -> list[tuple[str, Finding]]:
    """Lint the socket variables the user set, against this host."""
    cluster = usable_cluster_interface(facts)
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
            findings = rate_by_consequence(facts, findings, socket_interfaces(facts))
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
