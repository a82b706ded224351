"""Every process's facts, and one comparison of them across the processes of a job.

:func:`process_facts` builds a process's fact table (NCCL version, CUDA driver, network plugin,
network, channel transports, bootstrap and out-of-band interface and subnet, link layers, RDMA
device count, and every ``NCCL_*`` setting it printed). :func:`compare_facts` compares each fact
that NCCL needs to agree across processes, by the same rule for all (:data:`FACTS` says how
much each disagreement matters and how to fix it): a fact with several values is a finding that
names the odd hosts, the minority.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, compress, repeat
from typing import cast

from clusterenv.findings import Code, Finding, Severity
from clusterenv.nccl_log.model import RankInfo, SocketEndpoint, parse_ip

__all__ = [
    "CODE_MIXED_ENV",
    "CODE_MIXED_FACT",
    "CODE_MIXED_INTERFACE",
    "CODE_MIXED_PLUGIN",
    "CODE_MIXED_SUBNET",
    "CODE_MIXED_TRANSPORT",
    "CODE_MIXED_VERSION",
    "FACTS",
    "FactSpec",
    "compare_facts",
    "fact_table",
    "process_facts",
]

CODE_MIXED_TRANSPORT: Code = "log-mixed-transport"
CODE_MIXED_INTERFACE: Code = "log-mixed-interface"
CODE_MIXED_VERSION: Code = "log-mixed-version"
CODE_MIXED_ENV: Code = "log-mixed-env"
CODE_MIXED_PLUGIN: Code = "log-mixed-plugin"
CODE_MIXED_SUBNET: Code = "log-mixed-subnet"
CODE_MIXED_FACT: Code = "log-mixed-fact"
_SHOWN = 4


@dataclass(frozen=True)
class FactSpec:
    """How a disagreement of one fact across processes is judged.

    Attributes:
        name: The fact, e.g. ``"NCCL version"``; ``"NCCL_*"`` stands for every setting.
        agree: ``"must"`` (NCCL needs every process to agree: an error), ``"should"`` (a
            difference that slows or may break the job: a warning), ``"reach"`` (a difference
            that breaks the job only when connections fail: an error then, else a remark),
            ``"note"`` (worth knowing).
        code: The finding code.
        why: Why the difference matters.
        fix: The fix, given the groups of values.
        explained_by: Facts whose difference causes this one's (a plugin loaded on some nodes
            only makes the networks differ): their groups are quoted and the finding follows
            theirs.
    """

    name: str
    agree: str
    code: Code
    why: str
    fix: Callable[[dict[str, list[RankInfo]]], str]
    explained_by: tuple[str, ...] = ()


def _same(what: str) -> Callable[[dict[str, list[RankInfo]]], str]:
    return lambda groups: f"use the same {what} on every node"


def _subnet_fix(groups: dict[str, list[RankInfo]]) -> str:
    interfaces = {i for ranks in groups.values() for r in ranks
                  for i in (r.bootstrap_interface, r.oob.interface if r.oob else None) if i}
    if any(i.startswith("ib") for i in interfaces):
        # IPoIB interfaces (ib0, ibp...) carry a subnet per fabric or rail: bootstrap over the
        # Ethernet network the nodes share instead
        return ("bootstrap over the network every node shares: export NCCL_SOCKET_IFNAME=<the "
                "Ethernet NIC every node has> (not an IPoIB interface of one rail)")
    return ("set NCCL_SOCKET_IFNAME to an interface on the network every node shares, or make "
            "the nodes' subnets routable to each other")


#: The facts compared across processes, in the order their findings are reported.
FACTS: tuple[FactSpec, ...] = (
    FactSpec("NCCL version", "must", CODE_MIXED_VERSION,
             "ranks of one communicator must run the same NCCL release (NCCL itself checks: "
             "`Mismatched NCCL version detected`)",
             _same("NCCL (the same PyTorch wheel or container image)")),
    FactSpec("net plugin", "should", CODE_MIXED_PLUGIN,
             "a network plugin that loads on some nodes only gives them another network",
             lambda groups: "install the same network plugin (libnccl-net.so and what it needs) "
                            "on every node, or skip it everywhere with NCCL_NET_PLUGIN=none"),
    FactSpec("network", "must", CODE_MIXED_TRANSPORT,
             "ncclCommInitRank hangs or fails when peers chose different networks",
             lambda groups: "make every node offer the same network: the same RDMA devices and "
                            "access (/dev/infiniband, libibverbs), the same NCCL_IB_HCA / "
                            "NCCL_NET / NCCL_IB_DISABLE and the same net plugin "
                            "(libnccl-net.so) or none (NCCL_NET_PLUGIN=none)",
             explained_by=("net plugin",)),
    FactSpec("link layer", "must", CODE_MIXED_FACT,
             "InfiniBand and RoCE (Ethernet) ports cannot reach each other",
             _same("kind of RDMA port (NCCL_IB_HCA naming one fabric)")),
    FactSpec("bootstrap subnet", "reach", CODE_MIXED_SUBNET,
             "processes bootstrap from different subnets (NCCL does not print netmasks: /24 "
             "assumed for IPv4, /64 for IPv6)", _subnet_fix),
    FactSpec("OOB subnet", "reach", CODE_MIXED_SUBNET,
             "the out-of-band sockets of NET/IB are in different subnets (NCCL does not print "
             "netmasks: /24 assumed for IPv4, /64 for IPv6)", _subnet_fix),
    FactSpec("bootstrap interface", "should", CODE_MIXED_INTERFACE,
             "processes bootstrapped on differently named interfaces",
             lambda groups: "unless the nodes really name their cluster interface differently, "
                            "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface of "
                            "the cluster network on every node"),
    FactSpec("OOB interface", "should", CODE_MIXED_INTERFACE,
             "the out-of-band sockets of NET/IB use differently named interfaces",
             lambda groups: "set NCCL_SOCKET_IFNAME to the same cluster interface on every node"),
    FactSpec("RDMA devices", "should", CODE_MIXED_FACT,
             "nodes offer different numbers of RDMA ports: rings crawl through the node with "
             "fewer, and NCCL 2.24 and later refuse mixed counts (`Detected mixed local Net "
             "device counts`)", _same("RDMA ports (NCCL_IB_HCA)")),
    FactSpec("CUDA driver", "note", CODE_MIXED_FACT,
             "the nodes run different CUDA drivers", _same("NVIDIA driver")),
    FactSpec("NCCL_*", "should", CODE_MIXED_ENV,
             "processes were given different NCCL settings",
             lambda groups: "export the same NCCL_* settings on every node (launchers forward "
                            "only some variables; check ~/.nccl.conf and /etc/nccl.conf on each "
                            "node)"),
)
_BY_NAME = {spec.name: spec for spec in FACTS}


@lru_cache(maxsize=65536)
def _subnet(address: str | None) -> str | None:
    """``"10.65.0.2"`` -> ``"10.65.0.0/24"`` (a /64 for IPv6); None for loopback or no address."""
    ip = parse_ip(address) if address else None
    if ip is None or ip.is_loopback:
        return None
    if ip.version == 4:  # as ipaddress.ip_network(f"{ip}/24") writes it, without building one
        a, b, c, _ = ip.packed
        return f"{a}.{b}.{c}.0/24"
    return str(ipaddress.ip_network(f"{ip}/64", strict=False))


@lru_cache(maxsize=256)
def _driver(value: str | None) -> str | None:
    if not value or not value.isdigit():
        return value
    number = int(value)  # cudaDriverVersion 12040 is CUDA 12.4
    return f"{number // 1000}.{number % 1000 // 10}"


def process_facts(rank: RankInfo, *, driver: str | None = None, plugin_error: str | None = None,
                  plugin_rejected: str | None = None) -> dict[str, str]:
    """The fact table of one process (only the facts its lines state); its ``NCCL_*``
    settings are compared from ``rank.env``."""
    return fact_table(
        version=rank.version, driver=driver, plugin=rank.plugin, plugin_error=plugin_error,
        plugin_rejected=plugin_rejected, transport=rank.transport,
        channel_devices=rank.channel_devices, bootstrap_interface=rank.bootstrap_interface,
        bootstrap_address=rank.bootstrap_address, oob=rank.oob, devices=rank.devices,
    )


# The names of a fact table, in its order (what fact_table states).
_TABLE = ("NCCL version", "CUDA driver", "net plugin", "network", "channel transports",
          "bootstrap interface", "bootstrap subnet", "OOB interface", "OOB subnet", "link layer",
          "RDMA devices")


def fact_table(*, version: str | None, driver: str | None, plugin: str | None,
               plugin_error: str | None, plugin_rejected: str | None, transport: str | None,
               channel_devices: tuple[tuple[str, int], ...], bootstrap_interface: str | None,
               bootstrap_address: str | None, oob: SocketEndpoint | None,
               devices: tuple[str, ...]) -> dict[str, str]:
    """:func:`process_facts` from the fields of a process, before its
    :class:`~clusterenv.nccl_log.model.RankInfo` is made (the parser builds one per process)."""
    link, count = _device_facts(devices)
    values = (
        version,
        _driver(driver),
        (plugin if plugin else f"not loaded: {plugin_error}" if plugin_error else
         f"rejected: {plugin_rejected}" if plugin_rejected else None),
        transport,
        _networks(channel_devices),
        bootstrap_interface,
        _subnet(bootstrap_address),
        oob.interface if oob else None,
        _subnet(oob.address) if oob else None,
        link,
        count,
    )
    # the facts stated (no None left), in their order: a table per process, built in C
    return cast("dict[str, str]", dict(compress(zip(_TABLE, values, strict=True), values)))


# The processes of a job list the same devices and channels: each table is worked out once.
@lru_cache(maxsize=4096)
def _device_facts(devices: tuple[str, ...]) -> tuple[str | None, str | None]:
    """The ``link layer`` and ``RDMA devices`` facts of a process's device list."""
    link = ", ".join(sorted({d.rsplit("/", 1)[-1] for d in devices if d.count("/") == 1}))
    # NET/IB lists every device in one line (a plugin's lists come a device at a time, and an
    # excerpt may hold some of them only)
    ib = [d for d in devices if "/" in d]
    return link or None, str(len(ib)) if ib else None


@lru_cache(maxsize=4096)
def _networks(channel_devices: tuple[tuple[str, int], ...]) -> str | None:
    """The ``channel transports`` fact: the networks of a process's channels."""
    return ", ".join(sorted({n for n, _ in channel_devices})) or None


def _spec(name: str) -> FactSpec | None:
    return _BY_NAME.get("NCCL_*" if name.startswith("NCCL_") else name)


def _hosts(ranks: Sequence[RankInfo]) -> str:
    names = list(dict.fromkeys(r.host or r.label for r in ranks))
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _labels(ranks: Sequence[RankInfo]) -> str:
    shown = ", ".join(r.label for r in ranks[:_SHOWN])
    return shown + (f" and {len(ranks) - _SHOWN} more" if len(ranks) > _SHOWN else "")


def _groups(ranks: Sequence[RankInfo], name: str) -> dict[str, list[RankInfo]]:
    groups: dict[str, list[RankInfo]] = {}
    for rank in ranks:
        value = (rank.env if name.startswith("NCCL_") else rank.facts).get(name)
        if value is not None:
            groups.setdefault(value, []).append(rank)
    return groups


def compare_facts(ranks: Sequence[RankInfo], *, connections: str,
                  banners: Sequence[tuple[str, int]] = ()) -> list[Finding]:
    """One finding per fact (one for all ``NCCL_*`` settings) whose value differs between
    processes, naming the odd hosts.

    Args:
        ranks: The processes of the log.
        connections: What the log shows of connections between processes: ``"failed"`` (a
            ``"reach"`` difference is then an error), ``"worked"`` (it is then no problem) or
            ``"unknown"``.
        banners: Versions printed without a host prefix (``NCCL version`` at
            ``NCCL_DEBUG=VERSION``), each one more process, as ``(version, line)``.
    """
    differing: dict[str, dict[str, list[RankInfo]]] = {}
    tables = [rank.facts for rank in ranks]
    envs = [rank.env for rank in ranks]
    # every name in the order the processes state them (the loops run in C: a log may hold
    # thousands of processes, and most facts agree, so only a differing one is grouped)
    names = chain.from_iterable(chain.from_iterable(zip(tables, envs, strict=True)))
    for name in dict.fromkeys(names):
        values = set(map(dict.get, envs if name.startswith("NCCL_") else tables, repeat(name)))
        values.discard(None)
        if name == "NCCL version":
            values.update(version for version, _ in banners)  # a process without a prefix
        if len(values) > 1:
            spec = _spec(name)
            if spec is not None and spec.agree == "reach" and connections == "worked":
                continue  # no finding: the processes reached each other (nothing explains by it)
            groups = _groups(ranks, name)
            if name == "NCCL version":
                for version, _ in banners:
                    groups.setdefault(version, [])
            differing[name] = groups
    if "NCCL version" not in differing and len({v for v, _ in banners}) > 1:
        differing["NCCL version"] = {v: [] for v, _ in banners}
    findings: list[Finding] = []
    for spec in FACTS:
        if spec.name == "NCCL_*":
            env = [f"{name}={value!r}: {_labels(group)}"
                   for name in differing if name.startswith("NCCL_")
                   for value, group in differing[name].items()]
            if env:
                findings.append(Finding.of(spec.code, "processes report different values for "
                                           "the same NCCL setting", tuple(env[:16]),
                                           spec.fix({}), severity="warning"))
        elif spec.name in differing and not (spec.agree == "reach" and connections == "worked"):
            findings.append(_finding(spec, differing[spec.name], differing,
                                     connections == "failed", banners))
    return findings


def _finding(spec: FactSpec, groups: dict[str, list[RankInfo]],
             differing: dict[str, dict[str, list[RankInfo]]], connections_failed: bool,
             banners: Sequence[tuple[str, int]]) -> Finding:
    ordered = sorted(groups.items(), key=lambda item: -len({r.host for r in item[1]}))
    majority, odd = ordered[0], ordered[1:]
    severities: dict[str, Severity] = {"must": "error", "should": "warning", "note": "info"}
    severity = severities.get(spec.agree, "error" if connections_failed else "info")
    odd_text = "; ".join(f"{_hosts(group) or 'a banner without a host prefix'} "
                         f"{'have' if len(group) != 1 else 'has'} {value}"
                         for value, group in odd)
    title = (f"{spec.name} differs between processes: {odd_text}, the others "
             f"{majority[0]}")
    evidence = [f"{value}: {_labels(group) or 'no prefixed process'}"
                for value, group in ordered]
    evidence += [f"line {line}: NCCL version {version} (printed without a host prefix)"
                 for version, line in banners if spec.name == "NCCL version"][:_SHOWN]
    evidence.append(spec.why)
    fix = spec.fix(groups)
    for cause in spec.explained_by:
        if cause in differing:
            evidence += [f"because {cause} differs: " + "; ".join(
                f"{value}: {_labels(group)}" for value, group in differing[cause].items())]
            fix = _BY_NAME[cause].fix(differing[cause])
    if spec.agree == "reach":
        evidence.append("connections between processes failed" if connections_failed else
                        "nothing in the log shows a connection failing between them")
        if not connections_failed:
            fix = "if the processes cannot reach each other: " + fix
    return Finding.of(spec.code, title, tuple(evidence), fix, severity=severity)
