"""Which socket interfaces NCCL used, and whether other hosts can reach them (public through
:mod:`clusterenv.nccl_log`: :func:`interface_concern`)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence

from clusterenv._shell import export
from clusterenv._shell import quote as shell_quote
from clusterenv.findings import Code, Finding, Severity
from clusterenv.nccl_log.model import LogMessage, NcclLog, RankInfo, SocketEndpoint, parse_ip

__all__ = [
    "CODE_BOOTSTRAP_MANAGEMENT",
    "CODE_SHARED_ADDRESS",
    "CODE_SOCKET_CHANNEL_UNROUTABLE",
    "IFNAME_FIX",
    "MAX_EVIDENCE",
    "PEER",
    "finding",
    "interface_checks",
    "interface_concern",
    "labels",
    "nccl_hint",
    "network_unused",
    "quote",
    "shared_address_checks",
    "socket_channel_checks",
]

CODE_BOOTSTRAP_MANAGEMENT: Code = "log-bootstrap-management"
CODE_SOCKET_CHANNEL_UNROUTABLE: Code = "log-socket-channel-unroutable"
CODE_SHARED_ADDRESS: Code = "log-shared-address"
MAX_EVIDENCE = 8
#: ``10.65.0.3<43429>``, ``fe80::1%veth0<43429>``: a peer address with its port, as NCCL prints.
PEER = re.compile(r"([0-9A-Fa-f.:]{3,45}(?:%[\w.-]{1,32})?)<([0-9]{1,5})>", re.ASCII)
IFNAME_FIX = (
    "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface of the cluster network on "
    "every node, e.g. `export NCCL_SOCKET_IFNAME=ens1` on Runpod Instant Clusters; "
    "`clusterenv env` prints the right value for this host"
)
_TUNNELS = ("ip6tnl", "ip6gre", "gretap", "gre", "sit", "tun", "tap", "tunl", "ipip", "vti")
_DOCKER_LIKE = ipaddress.ip_network("172.16.0.0/12")


def finding(code: Code, severity: Severity, title: str, evidence: Iterable[str],
            fix: str) -> Finding:
    """:meth:`Finding.of` a registered ``code`` with the severity this case has."""
    return Finding.of(code, title, tuple(evidence), fix, severity=severity)


def labels(ranks: Sequence[RankInfo]) -> str:
    """``"rank 0 (node1 pid 42), rank 1 (...) and 3 more"``."""
    shown = ", ".join(r.label for r in ranks[:4])
    return shown + (f" and {len(ranks) - 4} more" if len(ranks) > 4 else "")


def nccl_hint(log: NcclLog, failures: Sequence[LogMessage]) -> LogMessage | None:
    """The first hint NCCL printed after the first of ``failures``, by a process that printed
    one of them: 2.30.7's printIbWcStatusHint (src/transport/net_ib/common.h, after a completion
    error) and printIbModifyQpHint (src/misc/ibvwrap.cc, after ibv_modify_qp failed) print
    ``HINT: In many cases this error occurs when ...``, the failure's own hint first; a hint
    after another warning of those processes is that warning's."""
    if not failures:
        return None
    after = min(m.first_line for m in failures)
    processes = {p for m in failures for p in m.processes}
    def mine(message: LogMessage) -> bool:
        return not processes or not message.processes or bool(
            processes.intersection(message.processes))

    hints = [m for m in log.notices if m.text.startswith("HINT:") and m.first_line > after
             and mine(m)]
    if not hints:
        return None
    hint = min(hints, key=lambda m: m.first_line)
    # the failure's own: no other warning of those processes between them
    between = [m for m in log.warnings if after < m.first_line < hint.first_line and mine(m)
               and m not in failures]
    return None if between else hint


def network_unused(log: NcclLog) -> bool:
    """Whether the job is one node's and no channel went through a network: NCCL kept its
    transfers inside the node (peer-to-peer, shared memory), so RDMA, GPUDirect RDMA and the
    network it chose carried nothing (with P2P and SHM disabled, ``via NET/...`` channels show
    it did use one)."""
    return log.multi_node is False and not any(r.channel_devices for r in log.ranks)


def quote(messages: Sequence[LogMessage]) -> list[str]:
    """Evidence lines for messages: line number, source, text, count and hosts."""
    lines = []
    for m in messages[:MAX_EVIDENCE]:
        where = f"{m.source} " if m.source and not m.text.startswith(m.source) else ""
        times = f" (x{m.count})" if m.count > 1 else ""
        hosts = f" on {', '.join(m.hosts[:3])}" if m.hosts else ""
        lines.append(f"line {m.first_line}: {where}{m.text}{times}{hosts}")
    return lines


def interface_concern(
    interface: str,
    address: str | None,
    *,
    management_interfaces: Iterable[str] = (),
    cluster_interfaces: Iterable[str] = (),
    multi_node: bool | None = None,
) -> tuple[Severity, str] | None:
    """Why NCCL sockets on ``interface`` probably cannot reach other hosts, or None.

    The log alone cannot know the provider's layout, so names give a warning and an address in
    172.16.0.0/12 (Docker bridges, Runpod's management network, but also many ordinary private
    networks) only ``info``; a caller that knows (Runpod: ``eth0`` is management) sharpens it to
    an error.

    Args:
        interface: Interface name, e.g. ``"eth0"``.
        address: Its address as NCCL printed it, e.g. ``"172.17.0.2"`` or ``"fe80::1%veth0"``.
        management_interfaces: Names known to be management-only, e.g. ``["eth0"]``.
        cluster_interfaces: Names known to carry the cluster network, e.g. ``["ens1"]``; any
            other interface is then wrong.
        multi_node: Whether the job spans nodes (loopback is fine on one node).

    Returns:
        ``(severity, reason)``, e.g. ``("info", "eth0 (172.17.0.2): an address in
        172.16.0.0/12, ...")``.
    """
    management = set(management_interfaces)
    cluster = set(cluster_interfaces)
    where = f"{interface} ({address})" if address else interface
    if interface in management:
        return "error", f"{where}: a management interface, not routed between the nodes"
    if cluster:
        if interface in cluster:
            return None
        names = ", ".join(sorted(cluster))
        return "error", f"{where}: not a cluster interface (expected {names})"
    ip = parse_ip(address) if address else None
    if interface == "lo" or (ip is not None and ip.is_loopback):
        severity: Severity = "error" if multi_node else "warning"
        return severity, f"{where}: loopback, other hosts cannot reach it"
    if interface.startswith("docker"):
        return "warning", f"{where}: a Docker bridge, other hosts cannot reach it"
    if interface.startswith("veth"):
        return "warning", f"{where}: a veth link of a container network, usually host-local"
    if interface.startswith("virbr"):
        return "warning", f"{where}: a libvirt NAT bridge, other hosts cannot reach it"
    if interface.startswith(_TUNNELS):
        return "warning", f"{where}: a tunnel interface, not the cluster network"
    if ip is not None and ip.is_link_local:
        return "warning", (
            f"{where}: a link-local address, valid on one link only and not routable between "
            "hosts (and IPv6 link-local needs a scope the peers do not share)"
        )
    if ip is not None and ip.version == 4 and ip in _DOCKER_LIKE:
        # an ordinary private range on many clusters: only evidence in the log (see
        # interface_checks) or the caller's knowledge makes this more than a remark
        return "info", (
            f"{where}: an address in 172.16.0.0/12, the range of Docker bridges and provider "
            "management networks (eth0:172.17.0.2 on a docker bridge is unroutable from other "
            "hosts), and of ordinary private networks"
        )
    return None


def _routable(endpoint: SocketEndpoint) -> bool:
    concern = interface_concern(endpoint.interface, endpoint.address)
    return concern is None


def _private_evidence(log: NcclLog, name: str, users: list[RankInfo]) -> list[str]:
    """What in the log shows that NCCL's 172.16.0.0/12 interface ``name`` is the wrong one."""
    found: list[str] = []
    bootstrapped = {r.bootstrap_interface for r in users}
    others = {str(e): e for r in users for e in (*r.socket_interfaces, r.oob)
              if e is not None and e.interface != name and e.interface not in bootstrapped
              and _routable(e)}
    if others:
        found.append("NCCL also listed " + ", ".join(sorted(others)[:3]) + " and did not use "
                     "it for bootstrap")
    cluster_like = sorted({
        str(e) for r in log.ranks
        for e in (*r.socket_interfaces, r.oob,
                  SocketEndpoint(r.bootstrap_interface, r.bootstrap_address)
                  if r.bootstrap_interface else None)
        if e is not None and e.interface.startswith("ens") and _routable(e)
    } - set(others))
    if cluster_like:
        found.append("the log names a Runpod-style cluster interface: "
                     + ", ".join(cluster_like[:3]))
    failed = sorted({
        peer.group(1) for m in log.messages("connect") for peer in PEER.finditer(m.text)
        if (ip := parse_ip(peer.group(1))) is not None and ip.version == 4 and ip in _DOCKER_LIKE
    })
    if failed:
        found.append("connections to 172.16.0.0/12 peers failed: " + ", ".join(failed[:4]))
    return found


def _roles(rank: RankInfo) -> list[tuple[str, str, str | None]]:
    roles: list[tuple[str, str, str | None]] = []
    if rank.bootstrap_interface:
        roles.append(("bootstrap", rank.bootstrap_interface, rank.bootstrap_address))
    if rank.transport in (None, "Socket"):
        # every entry of the list: NCCL spreads channels over all of them, and a log rarely
        # shows every channel (those a channel line shows are socket_channel_checks' to report)
        roles += [("NET/Socket", e.interface, e.address) for e in rank.socket_interfaces]
    if rank.oob is not None:
        roles.append(("NET/IB OOB", rank.oob.interface, rank.oob.address))
    return roles


def interface_checks(
    log: NcclLog, management: tuple[str, ...], cluster: tuple[str, ...]
) -> list[Finding]:
    """``log-bootstrap-management``: one finding per interface other hosts cannot reach
    (except those :func:`socket_channel_checks` reports)."""
    multi_node = log.multi_node  # once: it reads every process
    if multi_node is False:
        return []  # one host: its sockets never leave it
    skipped = set(_bad_channels(log, multi_node))
    # interface -> address -> role -> the processes that used it so
    uses: dict[str, dict[str | None, dict[str, list[RankInfo]]]] = {}
    for rank in log.ranks:
        for role, name, address in _roles(rank):
            if name not in skipped:
                by_role = uses.setdefault(name, {}).setdefault(address, {})
                by_role.setdefault(role, []).append(rank)
    findings = []
    for name, addresses in uses.items():
        flagged = []
        for address, by_role in addresses.items():
            concern = interface_concern(
                name, address, management_interfaces=management, cluster_interfaces=cluster,
                multi_node=multi_node,
            )
            if concern is not None:
                flagged.append((address, by_role, concern))
        if flagged:
            findings.append(_interface_finding(log, name, flagged))
    return findings


def _interface_finding(
    log: NcclLog,
    name: str,
    flagged: list[tuple[str | None, dict[str, list[RankInfo]], tuple[Severity, str]]],
) -> Finding:
    severities = {c[0] for _, _, c in flagged}
    severity: Severity = ("error" if "error" in severities
                          else "warning" if "warning" in severities else "info")
    roles = list(dict.fromkeys(role for _, by_role, _ in flagged for role in by_role))
    title = f"NCCL {' and '.join(roles)} on {flagged[0][2][1]}"
    if len(flagged) > 1:
        title += f" (and {len(flagged) - 1} more address(es) on {name})"
    evidence = [
        f"{role} on {name}:{address or '?'} by {labels(ranks)}"
        for address, by_role, _ in flagged
        for role, ranks in by_role.items()
    ][: MAX_EVIDENCE * 2]
    failed = [m for m in log.messages("connect") if m in log.warnings]
    if severity == "warning" and failed:
        # an interface other hosts cannot reach, and connections that failed: the cause
        severity = "error"
        evidence += ["connections between ranks failed:", *quote(failed)]
    if severity == "info":
        users = list({id(r): r for _, by_role, _ in flagged for rs in by_role.values()
                      for r in rs}.values())
        found = _private_evidence(log, name, users)
        if found:
            severity = "warning"
            evidence += found
        else:
            evidence.append("nothing else in the log says it is unreachable (no other interface "
                            "listed, no failed connection to a 172.16.0.0/12 peer): pass "
                            "--management-interface or --cluster-interface if you know")
    ifname = log.env.get("NCCL_SOCKET_IFNAME")
    if ifname:
        evidence.append(f"NCCL_SOCKET_IFNAME set by environment to {ifname}")
        fix = (f"NCCL_SOCKET_IFNAME={shell_quote(ifname)} selects {shell_quote(name)}: change "
               f"it; {IFNAME_FIX}")
    else:
        evidence.append("NCCL_SOCKET_IFNAME not reported as set: NCCL picked the interface")
        fix = IFNAME_FIX
    if severity == "info":
        fix = "if the nodes cannot reach each other on this network, " + fix
    return finding(CODE_BOOTSTRAP_MANAGEMENT, severity, title, tuple(evidence), fix)


def socket_channel_checks(log: NcclLog) -> list[Finding]:
    """``log-socket-channel-unroutable``: channels ``via NET/Socket/N`` through the ``[N]``
    entry of ``NET/Socket : Using [0]eno1:... [1]veth...:fe80::...`` when that one is host-local
    or link-local; an error when connections failed."""
    bad = _bad_channels(log, log.multi_node)
    if not bad:
        return []
    failures = [*log.messages("connect"), *log.messages("fatal")]
    findings = []
    for name, (endpoint, ranks, good) in bad.items():
        reason = interface_concern(endpoint.interface, endpoint.address)
        evidence = [
            f"{labels(ranks)} send through `via NET/Socket/N` = {endpoint} in their "
            "`NET/Socket : Using` list",
            reason[1] if reason else str(endpoint),
            *quote(failures),
        ]
        if good:
            names = ",".join(good)
            fix = (f"{export('NCCL_SOCKET_IFNAME', '=' + names)} on every node (the leading "
                   f"`=` means exactly these names), so that NCCL leaves {shell_quote(name)} "
                   "out")
        else:
            fix = IFNAME_FIX
        findings.append(finding(
            CODE_SOCKET_CHANNEL_UNROUTABLE, "error" if failures else "warning",
            f"NCCL's socket channels go through {endpoint}, which other hosts cannot reach"
            + (": that is why connections fail" if failures else ""),
            tuple(evidence), fix,
        ))
    return findings


def _bad_channels(
    log: NcclLog, multi_node: bool | None,
) -> dict[str, tuple[SocketEndpoint, list[RankInfo], dict[str, None]]]:
    """Interfaces that ``via NET/Socket/N`` channels use although other hosts cannot reach
    them: name -> (endpoint, processes, the routable interfaces those processes listed)."""
    if multi_node is False:
        return {}
    bad: dict[str, tuple[SocketEndpoint, list[RankInfo], dict[str, None]]] = {}
    for rank in log.ranks:
        used = sorted({i for network, i in rank.channel_devices if network == "Socket"})
        for index in used:
            if index >= len(rank.socket_interfaces):
                continue
            endpoint = rank.socket_interfaces[index]
            concern = interface_concern(endpoint.interface, endpoint.address,
                                        multi_node=multi_node)
            if concern is None or concern[0] == "info":
                continue
            entry = bad.setdefault(endpoint.interface, (endpoint, [], {}))
            entry[1].append(rank)
            entry[2].update((e.interface, None) for e in rank.socket_interfaces if _routable(e))
    return bad


def shared_address_checks(log: NcclLog) -> list[Finding]:
    """Hosts whose processes bootstrap from (or put their NET/IB out-of-band socket on) one and
    the same address: each is a private address of its own container or NAT (every container on
    a Docker bridge is 172.17.0.2), so a peer that connects to it reaches itself, not that host.
    Loopback addresses are left to the interface checks."""
    hosts: dict[str, dict[str, list[RankInfo]]] = {}
    for rank in log.ranks:
        if rank.host is None:
            continue
        for address in {rank.bootstrap_address, rank.oob.address if rank.oob else None}:
            if address:
                hosts.setdefault(address, {}).setdefault(rank.host, []).append(rank)
    shared = {address: by_host for address, by_host in hosts.items()
              if len(by_host) > 1 and not _loopback(address)}
    if not shared:
        return []
    evidence = [f"{address}: {', '.join(sorted(by_host)[:MAX_EVIDENCE])}"
                + (f" and {len(by_host) - MAX_EVIDENCE} more" if len(by_host) > MAX_EVIDENCE
                   else "")
                for address, by_host in sorted(shared.items())[:MAX_EVIDENCE]]
    evidence.append("NCCL gives its peers the address it bootstraps from: one address on "
                    "several hosts is a private one of each (a container's NAT), and a peer "
                    "that connects to it reaches its own host")
    address, by_host = next(iter(sorted(shared.items())))
    return [finding(
        CODE_SHARED_ADDRESS, "error",
        f"{len(by_host)} hosts bootstrap NCCL from the same address {address} "
        f"({', '.join(sorted(by_host)[:4])}{' ...' if len(by_host) > 4 else ''})",
        evidence,
        "run the containers in the host's network (docker --network=host, Kubernetes "
        "hostNetwork: true, or a CNI that gives each an address the other hosts reach), and "
        "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to that interface on every node",
    )]


def _loopback(address: str) -> bool:
    parsed = parse_ip(address)
    return parsed is not None and parsed.is_loopback
