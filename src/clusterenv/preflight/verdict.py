"""The preflight verdict: the problems found across nodes, the node table, the ring probes.

The primary builds a :class:`Verdict` (with :func:`clusterenv.preflight.compare.compare`) and
sends it to every node as JSON; each node rebuilds it with :meth:`Verdict.from_wire`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clusterenv._jsonable import json_fields
from clusterenv._text import clip
from clusterenv.findings import Code, Finding, Severity
from clusterenv.preflight.fingerprint import Fingerprint
from clusterenv.preflight.wire import WireError

__all__ = [
    "BOUNDS",
    "TABLE_LIMIT",
    "NodeRef",
    "NodeSummary",
    "Problem",
    "RingHop",
    "Verdict",
    "VerdictBounds",
]

#: Up to this many reporting nodes the verdict lists every node (and every ring probe); above
#: it, only the nodes (and probes) that problems name.
TABLE_LIMIT = 64


@dataclass(frozen=True, slots=True)
class VerdictBounds:
    """What any verdict holds at most: the primary cuts every verdict to these
    (:func:`clusterenv.preflight.fit.fit_verdict`), and a node refuses a verdict beyond them by
    name (:meth:`Verdict.from_wire`), so what a node builds and prints is bounded whoever sent it.

    Attributes:
        problems: Problems listed, e.g. ``128`` (the rest are counted in ``more_problems``).
        evidence: Evidence lines per problem, e.g. ``12``.
        named_nodes: Nodes named per problem, e.g. ``64``.
        table_rows: Rows of the node table, e.g. ``256``.
        rejected: Refused connections listed, e.g. ``48``.
        ring: Ring probes listed, e.g. ``64``.
        title: Characters of a title or a fix, e.g. ``1000``.
        evidence_text: Characters of an evidence line, a refusal or a probe's detail, e.g.
            ``300``.
        short: Characters of a code, an address, a host name or a table cell, e.g. ``128``.
    """

    problems: int = 128
    evidence: int = 12
    named_nodes: int = 64
    table_rows: int = 256
    rejected: int = 48
    ring: int = 64
    title: int = 1000
    evidence_text: int = 300
    short: int = 128

    @property
    def objects(self) -> int:
        """JSON objects a verdict within these bounds has at most, e.g. ``8769``."""
        return 1 + self.problems * (1 + self.named_nodes) + self.table_rows + 3 * self.ring


#: The bounds every verdict keeps.
BOUNDS = VerdictBounds()


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A node named in a problem.

    Attributes:
        rank: Its ``NODE_RANK``, e.g. ``2``; None when it sent none.
        addr: The address it connected from, e.g. ``"10.65.0.4"``; None for a node that never
            reported.
        hostname: e.g. ``"node-2"``; None when unknown.
    """

    rank: int | None
    addr: str | None = None
    hostname: str | None = None

    def __str__(self) -> str:
        rank = "rank ?" if self.rank is None else f"rank {self.rank}"
        return f"{rank} ({self.addr})" if self.addr else rank

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class Problem(Finding):
    """A finding about some nodes of the cluster: a :class:`~clusterenv.findings.Finding`
    with the nodes it concerns.

    Attributes:
        nodes: The nodes to look at, e.g. ``(NodeRef(2, "10.65.0.4", "node-2"),)``; the title
            names them too, e.g. ``"NCCL_SOCKET_IFNAME differs: rank 2 (10.65.0.4) has 'eth0',
            3 nodes have 'ens1'"``, and the evidence says what each reported.
    """

    nodes: tuple[NodeRef, ...] = ()

    @classmethod
    def about(
        cls,
        code: Code,
        title: str = "",
        nodes: tuple[NodeRef, ...] = (),
        evidence: tuple[str, ...] = (),
        fix: str = "",
        *,
        severity: Severity | None = None,
    ) -> Problem:
        """A problem with a registered code about ``nodes``; severity and title default to
        the registry's (:meth:`Finding.of`)."""
        finding = Finding.of(code, title, evidence, fix, severity=severity)
        return cls(finding.code, finding.severity, finding.title, finding.evidence, finding.fix,
                   nodes)

    def finding(self) -> Finding:
        """The problem as a plain :class:`~clusterenv.findings.Finding`, the nodes in its
        evidence (as ``doctor`` prints findings)."""
        nodes = (f"nodes: {', '.join(map(str, self.nodes))}",) if self.nodes else ()
        return Finding(self.code, self.severity, self.title, (*self.evidence, *nodes), self.fix)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the finding's fields and ``nodes``."""
        return {**Finding.to_dict(self), "nodes": [n.to_dict() for n in self.nodes]}


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """One row of the verdict's node table.

    Attributes:
        rank: e.g. ``1``. addr: where it connected from, e.g. ``"10.65.0.3"``.
        hostname: e.g. ``"node-1"``. interface: e.g. ``"ens1"``. mtu: e.g. ``9000``.
        transport: ``"infiniband"``, ``"roce"``, … or None. rdma_ports: usable ports, e.g. ``8``.
        gpus: e.g. ``8`` (None: no driver visible). local_errors: number of ``doctor`` errors.
        torch: e.g. ``"2.4.1"``.
        nccl: e.g. ``"2.21.5"``: what the library a job would load reports, when NCCL could
            be asked; else the installed package's version.
    """

    rank: int | None
    addr: str
    hostname: str | None = None
    interface: str | None = None
    mtu: int | None = None
    transport: str | None = None
    rdma_ports: int = 0
    gpus: int | None = None
    local_errors: int = 0
    torch: str | None = None
    nccl: str | None = None

    @classmethod
    def of(cls, addr: str, fp: Fingerprint) -> NodeSummary:
        """The row for a node that connected from ``addr`` with fingerprint ``fp``."""
        return cls(
            rank=fp.rank, addr=addr, hostname=fp.hostname, interface=fp.interface, mtu=fp.mtu,
            transport=fp.rdma.transport, rdma_ports=fp.rdma.ports, gpus=fp.gpus,
            local_errors=len(fp.local_errors), torch=fp.versions.get("torch"),
            nccl=fp.runtime.version or fp.versions.get("nccl"),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class RingHop:
    """One probe of the ring: ``source`` opened a TCP connection to ``target``, or failed to.

    Attributes:
        source: The probing node. target: The node probed (next in rank order).
        ok: Whether the connection and the reply succeeded.
        detail: e.g. ``"1.2 ms"`` or ``"connection refused"``.
    """

    source: NodeRef
    target: NodeRef
    ok: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the primary concluded; every node prints the same one.

    Attributes:
        expected_nodes: ``NUM_NODES`` on the primary, e.g. ``4``.
        primary: Where the primary listened, e.g. ``"10.65.0.2:29501"``.
        nodes: The nodes that reported, in rank order. Above :data:`TABLE_LIMIT` reporting
            nodes, only those that a problem names: every node receives the verdict, and a
            table of every node on every node would make the exchange quadratic.
        problems: Errors first, then warnings and info.
        rejected: Connections refused, e.g. ``("rejected peer 10.65.0.9:41000: not a clusterenv
            preflight message (it starts with 'GET / HT')",)``; at most a few dozen are listed.
        rejected_total: How many were refused in all.
        ring: The ring probes, when asked for (above :data:`TABLE_LIMIT` nodes, the failed
            ones only).
        elapsed_s: Seconds from the primary's start to the verdict, e.g. ``0.8``.
        reported: How many nodes reported, the primary included, e.g. ``4``.
        ring_probed: How many ring probes were made (0 without ``--ring``).
        more_problems: Problems left out to keep the verdict within :data:`BOUNDS` (the least
            severe ones: errors come first), e.g. ``0``.
    """

    expected_nodes: int
    primary: str
    nodes: tuple[NodeSummary, ...] = ()
    problems: tuple[Problem, ...] = ()
    rejected: tuple[str, ...] = ()
    rejected_total: int = 0
    ring: tuple[RingHop, ...] = ()
    elapsed_s: float = 0.0
    reported: int = 0
    ring_probed: int = 0
    more_problems: int = 0

    @property
    def ok(self) -> bool:
        """No problem is an error."""
        return not any(p.severity == "error" for p in self.problems)

    @property
    def exit_code(self) -> int:
        """``0`` consistent, ``1`` problems found."""
        return 0 if self.ok else 1

    def to_wire(self) -> dict[str, Any]:
        """The verdict as a JSON object (the field names above, plus ``ok``, ``exit_code``)."""
        return self.to_dict()

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Verdict:
        """Rebuild a verdict received from the primary, holding it to :data:`BOUNDS` (what
        every primary cuts a verdict to) before building anything: a verdict of millions of
        empty evidence items is refused by name, not printed.

        Raises:
            WireError: When it does not have the verdict's shape or exceeds a bound, naming
                the field, e.g. ``"the primary's verdict has 5592404 items in
                'problems[0].evidence' (at most 12)"``.
        """
        b = BOUNDS
        problems = tuple(
            Problem(
                code=_text(p, "code", b.short, f"problems[{i}]."),
                severity=_severity(p.get("severity"), f"problems[{i}].severity"),
                title=_text(p, "title", b.title, f"problems[{i}]."),
                nodes=tuple(_node_ref(n, f"problems[{i}].nodes[{j}]") for j, n in
                            enumerate(_items(p, "nodes", b.named_nodes, f"problems[{i}]."))),
                evidence=tuple(_item_text(e, b.evidence_text, f"problems[{i}].evidence[{j}]")
                               for j, e in enumerate(_items(p, "evidence", b.evidence,
                                                            f"problems[{i}]."))),
                fix=_text(p, "fix", b.title, f"problems[{i}].", default=""),
            )
            for i, p in enumerate(_items(_object(data, "verdict"), "problems", b.problems, ""))
        )
        return cls(
            expected_nodes=_number(data, "expected_nodes", required=True),
            primary=_text(data, "primary", b.short, ""),
            nodes=tuple(_summary(n, f"nodes[{i}]")
                        for i, n in enumerate(_items(data, "nodes", b.table_rows, ""))),
            problems=problems,
            rejected=tuple(_item_text(r, b.evidence_text, f"rejected[{i}]")
                           for i, r in enumerate(_items(data, "rejected", b.rejected, ""))),
            rejected_total=_number(data, "rejected_total"),
            ring=tuple(_hop(h, f"ring[{i}]")
                       for i, h in enumerate(_items(data, "ring", b.ring, ""))),
            elapsed_s=_seconds(data, "elapsed_s"),
            reported=_number(data, "reported"),
            ring_probed=_number(data, "ring_probed"),
            more_problems=_number(data, "more_problems"),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``ok`` and ``exit_code``."""
        return json_fields(self, ok=self.ok, exit_code=self.exit_code)


# -- reading a received verdict, field by field (every error names the field) ---------------


def _malformed(where: str, wanted: str, value: object) -> WireError:
    return WireError(f"the primary's verdict field '{where}' must be {wanted}, got "
                     f"{type(value).__name__}")


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _malformed(where, "an object", value)
    return value


def _items(data: object, key: str, cap: int, where: str) -> list[Any]:
    value = _object(data, where.rstrip(".") or "verdict").get(key, [])
    if not isinstance(value, list):
        raise _malformed(f"{where}{key}", "a list", value)
    if len(value) > cap:
        raise WireError(f"the primary's verdict has {len(value)} items in '{where}{key}' "
                        f"(at most {cap})")
    return value


def _item_text(value: object, cap: int, where: str) -> str:
    if not isinstance(value, str):
        raise _malformed(where, "a string", value)
    if len(value) > cap:
        raise WireError(f"the primary's verdict field '{where}' has {len(value)} characters "
                        f"(at most {cap})")
    return value


def _text(data: object, key: str, cap: int, where: str, *, default: str | None = None) -> str:
    value = _object(data, where.rstrip(".") or "verdict").get(key, default)
    if value is None:
        raise WireError(f"the primary's verdict has no '{where}{key}'")
    return _item_text(value, cap, f"{where}{key}")


def _optional_text(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    return None if value is None else _item_text(value, BOUNDS.short, f"{where}.{key}")


def _optional_number(data: Mapping[str, Any], key: str, where: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 1 << 63:
        raise _malformed(f"{where}{key}", "an integer", value)
    return value


def _number(data: object, key: str, *, required: bool = False) -> int:
    found = _optional_number(_object(data, "verdict"), key, "")
    if found is None and required:
        raise WireError(f"the primary's verdict has no '{key}'")
    return found or 0


def _seconds(data: Mapping[str, Any], key: str) -> float:
    value = data.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _malformed(key, "a number", value)
    return float(value)


def _severity(value: object, where: str) -> Severity:
    if value == "error":
        return "error"
    if value == "warning":
        return "warning"
    if value == "info":
        return "info"
    raise WireError(f"the primary's verdict field '{where}' is not a severity: "
                    f"{clip(repr(value), 40)}")


def _node_ref(value: object, where: str) -> NodeRef:
    data = _object(value, where)
    return NodeRef(_optional_number(data, "rank", f"{where}."),
                   _optional_text(data, "addr", where), _optional_text(data, "hostname", where))


def _summary(value: object, where: str) -> NodeSummary:
    data = _object(value, where)
    unknown = set(data) - _SUMMARY_FIELDS
    if unknown:
        raise WireError(f"the primary's verdict field '{where}' has unknown keys: "
                        f"{clip(', '.join(sorted(map(str, unknown))), 80)}")
    texts = {k: _optional_text(data, k, where) for k in _SUMMARY_TEXTS}
    numbers = {k: _optional_number(data, k, f"{where}.") for k in _SUMMARY_NUMBERS}
    return NodeSummary(
        rank=numbers["rank"], addr=texts["addr"] or "", hostname=texts["hostname"],
        interface=texts["interface"], mtu=numbers["mtu"], transport=texts["transport"],
        rdma_ports=numbers["rdma_ports"] or 0, gpus=numbers["gpus"],
        local_errors=numbers["local_errors"] or 0, torch=texts["torch"], nccl=texts["nccl"],
    )


def _hop(value: object, where: str) -> RingHop:
    data = _object(value, where)
    ok = data.get("ok")
    if not isinstance(ok, bool):
        raise _malformed(f"{where}.ok", "true or false", ok)
    return RingHop(_node_ref(data.get("source"), f"{where}.source"),
                   _node_ref(data.get("target"), f"{where}.target"), ok,
                   _text(data, "detail", BOUNDS.evidence_text, f"{where}.", default=""))


_SUMMARY_TEXTS = ("addr", "hostname", "interface", "transport", "torch", "nccl")
_SUMMARY_NUMBERS = ("rank", "mtu", "rdma_ports", "gpus", "local_errors")
_SUMMARY_FIELDS = frozenset((*_SUMMARY_TEXTS, *_SUMMARY_NUMBERS))


