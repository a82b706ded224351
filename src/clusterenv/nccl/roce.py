"""RoCE GIDs of the listed ports: whether the GID NCCL will use reaches the other nodes, the
``NCCL_IB_GID_INDEX`` the plan writes for NCCL before 2.21, and fixes that NCCL's own rules
(:mod:`clusterenv.nccl.gid`) show to work before they are suggested.

The NCCL release decides the rule (before 2.21 a fixed index, default 0; from 2.21 a walk of the
table), so every verdict is taken for each release range the evidence allows: with the version
unknown, a GID is reported only when it fails on both sides of 2.21.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from clusterenv._facts import Facts, Proposal
from clusterenv.findings import Code, Finding, Severity
from clusterenv.nccl.gid import (
    AUTO_SINCE,
    GID_VARIABLES,
    Family,
    GidChoice,
    GidSettings,
    _parse_range,
    _strtoll,
    choose_gid,
    gid_problem,
)
from clusterenv.nccl.version import known_before, versions_text
from clusterenv.rdma import RdmaDevice, RdmaPort

__all__ = [
    "GID_PROBLEM_CODES",
    "Case",
    "common_gid_index",
    "gid_plan",
    "gid_setting_findings",
    "gid_value_findings",
    "settings_of",
    "version_cases",
]

Pair = tuple[RdmaDevice, RdmaPort]
# An integer as NCCL's strtoll(value, NULL, 0) reads it whole: decimal, 0x hex (or octal).
_INTEGER = re.compile(r"\s*[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+)\s*")
Lookup = Callable[[str], str | None]

#: Finding code per reason a chosen GID cannot reach other nodes.
GID_PROBLEM_CODES: Mapping[str, Code] = {
    "link-local": "ib-gid-link-local",
    "missing": "ib-gid-missing",
    "roce-v1": "ib-gid-roce-v1",
}
# What NCCL reports when the GID cannot carry the connection (NCCL issue 769; misc/ibvwrap.cc).
_SYMPTOM = {
    "link-local": "'Call to ibv_modify_qp failed with error Connection timed out'",
    "missing": "'Call to ibv_modify_qp failed with error Invalid argument'",
    "roce-v1": "RoCE v1 is not routed beyond one Ethernet segment",
}


@dataclass(frozen=True, slots=True)
class Case:
    """One NCCL release range the evidence allows.

    Attributes:
        label: For messages, e.g. ``"2.19.3 (NCCL_VERSION)"`` or ``"before 2.21"``.
        version: For the model: a release before 2.21, or None for 2.21 and later.
    """

    label: str
    version: tuple[int, int, int] | None


OLD = Case("before 2.21", (2, 20, 0))
NEW = Case("2.21 or later", None)


def version_cases(facts: Facts) -> tuple[Case, ...]:
    """The release ranges NCCL may be in here: one when the version is known, else both."""
    older = known_before(facts.nccl_versions, AUTO_SINCE)
    shown = versions_text(facts.nccl_versions)
    if older is True:
        return (Case(shown, OLD.version),)
    if older is False:
        return (Case(shown, None),)
    return (OLD, NEW)


def _lookup(facts: Facts) -> Lookup:
    def value(name: str) -> str | None:
        found = facts.user_value(name)
        return found[0] if found is not None else None

    return value


def _overlay(lookup: Lookup, changes: Mapping[str, str | None]) -> Lookup:
    def value(name: str) -> str | None:
        return changes[name] if name in changes else lookup(name)

    return value


def settings_of(facts: Facts) -> GidSettings:
    """The GID variables as NCCL will read them here (environment, then NCCL's config files)."""
    return GidSettings.read(_lookup(facts))


def _label(device: RdmaDevice, port: RdmaPort) -> str:
    return f"{device.name}:{port.number}"


def _choices(ports: Sequence[Pair], case: Case, lookup: Lookup) -> dict[str, GidChoice]:
    settings = GidSettings.read(lookup)
    out = {}
    for device, port in ports:
        choice = choose_gid(port, version=case.version, settings=settings)
        if choice is not None:
            out[_label(device, port)] = choice
    return out


def _reach_all(ports: Sequence[Pair], cases: Sequence[Case], lookup: Lookup) -> bool:
    return all(
        choice.reaches_peers is True
        for case in cases
        for choice in _choices(ports, case, lookup).values()
    )


def common_gid_index(ports: Sequence[Pair]) -> int | None:
    """The lowest index holding a GID that reaches other nodes on every port, IPv4 first.

    Example: ``3`` on ports laid out as ``show_gids`` shows them; None when they differ.
    """
    tables = [{g.index: g for g in port.gids if gid_problem(g) is None} for _, port in ports]
    if not tables:
        return None
    common = set(tables[0]).intersection(*tables[1:])
    if not common:
        return None
    return min(common, key=lambda i: (any(t[i].ipv4 is None for t in tables), i))


def _names(labels: Sequence[str]) -> str:
    shown = ", ".join(labels[:4])
    return shown if len(labels) <= 4 else f"{shown} and {len(labels) - 4} more"


def _netdevs(ports: Sequence[Pair]) -> list[str]:
    return list(dict.fromkeys(p.netdev for _, p in ports if p.netdev is not None))


def _fallback_fix(ports: Sequence[Pair], cases: Sequence[Case]) -> str:
    """What is left when no setting helps: a RoCE v2 GID must appear in the table."""
    netdevs = _netdevs(ports)
    where = ", ".join(netdevs) if netdevs else "the ports' network interfaces"
    if all(any(g.ipv4 is not None for g in p.gids) for _, p in ports):
        return (f"the IPv4 GIDs of {where} are RoCE v1 only: enable RoCE v2 in the NIC's driver "
                "or firmware settings, so that the kernel lists an IPv4 RoCE v2 GID")
    fix = (f"give {where} an IPv4 address on the cluster network: the kernel then adds an IPv4 "
           "RoCE v2 GID, which NCCL 2.21 and later choose")
    if any(case.version is not None for case in cases):
        fix += " (before 2.21, export NCCL_IB_GID_INDEX with its index, see `show_gids`)"
    return fix


def _working_fix(ports: Sequence[Pair], cases: Sequence[Case], lookup: Lookup) -> str:
    """The first fix under which every port's GID reaches the other nodes in every case."""
    candidates: list[tuple[str, dict[str, str | None]]] = [
        (f"unset {name}", {name: None}) for name in GID_VARIABLES if lookup(name)
    ]
    if lookup("NCCL_IB_ADDR_FAMILY") != "AF_INET6":
        candidates.append(("export NCCL_IB_ADDR_FAMILY=AF_INET6",
                           {"NCCL_IB_ADDR_FAMILY": "AF_INET6", "NCCL_IB_GID_INDEX": None}))
    index = common_gid_index(ports)
    if index is not None:
        candidates.append((f"export NCCL_IB_GID_INDEX={index}", {"NCCL_IB_GID_INDEX": str(index)}))
    for text, change in candidates:
        if _reach_all(ports, cases, _overlay(lookup, change)):
            return text
    if len(cases) > 1:  # nothing works on both sides of 2.21: say what works on the newer side
        for text, change in candidates:
            if _reach_all(ports, [NEW], _overlay(lookup, change)):
                return f"use NCCL 2.21 or later and {text}"
    return _fallback_fix(ports, cases)


def _unreachable(ports: Sequence[Pair], cases: Sequence[Case], lookup: Lookup) -> list[Finding]:
    """Findings for ports whose GID cannot reach other nodes in every allowed case."""
    per_case = [_choices(ports, case, lookup) for case in cases]
    bad: dict[str, list[tuple[str, GidChoice]]] = {}
    for label, choice in per_case[-1].items():
        if all(found[label].reaches_peers is False for found in per_case):
            problem = choice.problem
            if problem is not None and problem in GID_PROBLEM_CODES:
                bad.setdefault(problem, []).append((label, choice))
    if not bad:
        return []
    fix = _working_fix(ports, cases, lookup)
    version = " or ".join(case.label for case in cases)
    given = GidSettings.read(lookup).given
    findings = []
    for kind, items in bad.items():
        labels = [label for label, _ in items]
        what = {"link-local": "a link-local GID", "missing": "an empty GID slot",
                "roce-v1": "a RoCE v1 GID"}[kind]
        evidence = [f"{label}: {choice.describe()}: {choice.rule}" for label, choice in items[:6]]
        evidence.append(f"NCCL version: {version}")
        evidence.append("set: " + (", ".join(given) if given else "no GID variable"))
        findings.append(Finding.of(
            GID_PROBLEM_CODES[kind],
            f"NCCL will use {what} on {_names(labels)}: RDMA traffic cannot reach the other "
            f"nodes ({_SYMPTOM[kind]})",
            tuple(evidence),
            fix,
        ))
    return findings


def gid_plan(
    facts: Facts, selected: Sequence[Pair]
) -> tuple[list[Proposal], list[Finding], list[str]]:
    """``NCCL_IB_GID_INDEX`` for the listed ports (NCCL before 2.21 only), or why not, and
    findings when the GID NCCL will use cannot reach the other nodes."""
    ports = list(selected)
    if not ports or any(p.link_layer != "Ethernet" for _, p in ports):
        return [], [], ["NCCL_IB_GID_INDEX left unset: not a RoCE fabric"] if ports else []
    lookup = _lookup(facts)
    cases = version_cases(facts)
    older = known_before(facts.nccl_versions, AUTO_SINCE)
    user_index = GidSettings.read(lookup).gid_index
    index = common_gid_index(ports)
    if older is True:
        if index is not None:  # the plan keeps a user value NCCL reads as the same index
            reason = (f"GID {index} reaches the other nodes on every listed port; NCCL "
                      f"{cases[0].label} is older than 2.21 and would use index 0")
            return [Proposal("NCCL_IB_GID_INDEX", str(index), reason,
                             lambda user: _INTEGER.fullmatch(user) is not None
                             and _strtoll(user) == index)], [], []
        if user_index is not None:
            return [], [], []  # the user's value is checked by gid_value_findings
        return [], _no_common_index(ports, cases, lookup), [
            "NCCL_IB_GID_INDEX left unset: no index fits every listed port"]
    if user_index is not None and user_index >= 0:
        return [], [], []  # checked by gid_value_findings
    findings = _unreachable(ports, cases, lookup)
    if findings:
        return [], findings, []
    auto = _choices(ports, NEW, lookup)
    shown = ", ".join(f"{label} -> {choice.index}" for label, choice in auto.items())
    indexes = {choice.index for choice in auto.values()}
    if older is False:
        chosen = f"index {indexes.pop()}" if len(indexes) == 1 else f"per port ({shown})"
        return [], [], [f"NCCL_IB_GID_INDEX left unset: NCCL {cases[0].label} chooses {chosen} "
                         "itself"]
    if len(indexes) == 1 and index is not None and index in indexes:
        return [], [Finding.of(
            "ib-gid-index-info",
            f"NCCL version unknown: NCCL_IB_GID_INDEX left unset; the GID that reaches the "
            f"other nodes is at index {index} on every listed port",
            (f"GID index per port: {shown}",),
            f"with NCCL older than 2.21 export NCCL_IB_GID_INDEX={index}; 2.21 and later "
            "choose it themselves",
        )], [f"NCCL_IB_GID_INDEX left unset: NCCL version unknown (index {index})"]
    return [], _no_common_index(ports, (NEW,) if index is None else cases, lookup,
                                severity="info"), [
        f"NCCL_IB_GID_INDEX left unset: NCCL version unknown, ports differ ({shown})"]


def _no_common_index(
    ports: Sequence[Pair], cases: Sequence[Case], lookup: Lookup, *,
    severity: Severity = "error",
) -> list[Finding]:
    """No single index fits: ``ib-gid-index-disagree`` when every port has a GID that reaches
    the others (at different indexes), else the unreachable ports' findings."""
    lacking = [(d, p) for d, p in ports if not any(gid_problem(g) is None for g in p.gids)]
    if lacking:
        return _unreachable(lacking, cases, lookup)
    auto = _choices(ports, NEW, lookup)
    per_port = {
        label: [g.index for g in port.gids if gid_problem(g) is None]
        for label, port in ((_label(d, p), p) for d, p in ports)
    }
    shown = ", ".join(f"{label} -> {auto[label].index}" for label in auto)
    if _reach_all(ports, [NEW], lookup):
        fix = "use NCCL 2.21 or later, which chooses the GID per port"
    else:
        fix = _working_fix(ports, [NEW], lookup) + " with NCCL 2.21 or later"
    return [Finding.of(
        "ib-gid-index-disagree",
        "the listed RoCE ports keep their routable GIDs at different indexes, and "
        "NCCL_IB_GID_INDEX is one value for every port: left unset",
        (f"GID index NCCL 2.21+ would use per port: {shown}",
         "routable GIDs per port: " + "; ".join(f"{k}: {v}" for k, v in per_port.items()),
         "NCCL version: " + " or ".join(case.label for case in cases)),
        fix,
        severity=severity,
    )]


def _what_is_wrong(choice: GidChoice) -> str:
    """``"GID 1 is link-local (fe80::1)"``, ``"GID 7 is empty"``, ``"GID 2 is RoCE v1 (…)"``."""
    gid = choice.gid
    if gid is None:
        return f"GID {choice.index} is empty"
    shown = gid.ipv4 if gid.ipv4 is not None else gid.address
    if choice.problem == "link-local":
        return f"GID {choice.index} is link-local ({shown})"
    return f"GID {choice.index} is RoCE v1 ({shown})"


def gid_value_findings(
    facts: Facts, value: str, origin: str, ports: Sequence[Pair]
) -> list[Finding]:
    """Check a ``NCCL_IB_GID_INDEX`` the user set against the listed RoCE ports."""
    shown = f"NCCL_IB_GID_INDEX={value!r}"
    number = _strtoll(value) if _INTEGER.fullmatch(value) else None
    if number is None or not -(1 << 31) <= number < 1 << 31:
        reads = _strtoll(value) if value.strip() else None
        return [Finding.of(
            "ib-gid-index-invalid",
            f"{shown} is not a GID index" + (f": NCCL reads it as {reads}" if reads is not None
                                               else ""),
            (shown, f"from {origin}"), "unset NCCL_IB_GID_INDEX (NCCL 2.21+ chooses it) or "
            "set the index of the RoCE v2 IPv4 GID (see `show_gids`)",
        )]
    text = str(number)
    if not ports:
        return []
    older = known_before(facts.nccl_versions, AUTO_SINCE)
    if int(text) < 0:
        if older is not True:
            return []  # automatic choice (2.21 and later)
        index = common_gid_index(ports)
        return [Finding.of(
            "ib-gid-index-wrong",
            f"{shown} asks for the automatic choice, which NCCL "
            f"{versions_text(facts.nccl_versions)} does not have (it came with 2.21): it uses "
            f"{text} as an index and cannot connect",
            (shown, f"from {origin}"),
            f"export NCCL_IB_GID_INDEX={index}" if index is not None
            else _fallback_fix(ports, version_cases(facts)),
        )]
    lookup = _lookup(facts)
    cases = version_cases(facts)
    bad = [
        f"{label}: {_what_is_wrong(choice)}"
        for label, choice in _choices(ports, NEW, lookup).items()
        if choice.reaches_peers is False
    ]
    unset = _overlay(lookup, {"NCCL_IB_GID_INDEX": None})
    auto_works = _reach_all(ports, [NEW], unset)
    index = common_gid_index(ports)
    if index is not None:
        fix = f"export NCCL_IB_GID_INDEX={index}" + (
            " (or unset it with NCCL 2.21+)" if auto_works else "")
    elif auto_works:
        fix = "unset NCCL_IB_GID_INDEX and use NCCL 2.21 or later"
    else:
        fix = _working_fix(ports, cases, unset)
    if bad:
        return [Finding.of(
            "ib-gid-index-wrong",
            f"{shown} does not point at a GID that reaches the other nodes: "
            + "; ".join(bad[:3]) + ("; ..." if len(bad) > 3 else ""),
            (shown, *bad, "NCCL reports: Got completion with error 12 / ibv_modify_qp failed"),
            fix,
        )]
    if older is False and auto_works:
        auto = _choices(ports, NEW, unset)
        return [Finding.of(
            "ib-gid-index-unneeded",
            f"{shown} is set, but NCCL {cases[0].label} chooses the GID itself (NCCL's "
            "docs: with 2.21 and later it should not be set)",
            (shown, "NCCL would choose: "
             + ", ".join(sorted({str(c.index) for c in auto.values()}))),
            "unset NCCL_IB_GID_INDEX",
        )]
    return []


def _range_problem(text: str, family: Family) -> str | None:
    """Why NCCL ignores an ``NCCL_IB_ADDR_RANGE`` (``envIbAddrRange``), or None when it takes it."""
    if not text or _parse_range(text, family) is not None:
        return None
    if "/" not in text:
        return "it is not ADDRESS/LENGTH"
    address, mask = text[:127].split("/", 1)
    kind = "IPv4" if family == "AF_INET" else "IPv6"
    if _parse_range(f"{address}/0", family) is None:
        return f"{address!r} is not an {kind} address (NCCL_IB_ADDR_FAMILY={family})"
    return f"the length {mask!r} is above {32 if family == 'AF_INET' else 128}"


def _subnets(facts: Facts, ports: Sequence[Pair], family: str) -> list[str]:
    """The subnets of the listed ports' interfaces, e.g. ``["10.99.0.0/24"]``."""
    found: dict[str, None] = {}
    for _, port in ports:
        interface = facts.network.get(port.netdev) if port.netdev else None
        if interface is None:
            continue
        addresses = interface.ipv4 if family == "AF_INET" else interface.ipv6
        for address in addresses:
            if not address.is_link_local:
                found[str(address.network)] = None
    return list(found)


def gid_setting_findings(
    facts: Facts, name: str, value: str, origin: str, ports: Sequence[Pair]
) -> list[Finding]:
    """``NCCL_IB_ADDR_FAMILY``, ``NCCL_IB_ADDR_RANGE`` or ``NCCL_IB_ROCE_VERSION_NUM`` values
    that NCCL ignores or cannot match, and any of them with an NCCL that has no such variable."""
    if not value or not ports:
        return []
    shown = f"{name}={value!r}"
    if known_before(facts.nccl_versions, AUTO_SINCE) is True:
        return [Finding.of(
            "ib-gid-setting-ignored",
            f"{shown} has no effect: NCCL {versions_text(facts.nccl_versions)} is older than "
            "2.21, which only reads NCCL_IB_GID_INDEX",
            (shown, f"from {origin}"),
            f"unset {name}; the plan sets NCCL_IB_GID_INDEX for this NCCL",
            severity="info",
        )]
    settings = GidSettings.read(_lookup(facts))
    why: str | None = None
    fix = f"unset {name}"
    if name == "NCCL_IB_ADDR_FAMILY" and value not in ("AF_INET", "AF_INET6"):
        why = "NCCL compares it with AF_INET and AF_INET6 exactly, so it uses AF_INET"
        if "6" in value:
            fix = "export NCCL_IB_ADDR_FAMILY=AF_INET6"
    elif name == "NCCL_IB_ADDR_RANGE":
        problem = _range_problem(value, settings.family)
        if problem is not None:
            why = f"NCCL ignores it: {problem}"
            subnets = _subnets(facts, ports, settings.family)
            if len(subnets) == 1:
                fix = f"export NCCL_IB_ADDR_RANGE={subnets[0]} (or unset it)"
    elif name == "NCCL_IB_ROCE_VERSION_NUM" and settings.roce_version not in (1, 2):
        why = f"NCCL reads {settings.roce_version}, a RoCE version no GID has"
    if why is None:
        return []
    return [Finding.of(
        "ib-gid-setting-ignored", f"{shown}: {why}", (shown, f"from {origin}"), fix,
    )]
