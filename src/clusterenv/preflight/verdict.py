"""The preflight verdict: the problems found across nodes, the node table, the ring probes.

The primary builds a :class:`Verdict` (with :func:`clusterenv.preflight.compare.compare`) and
sends it to every node as JSON; each node rebuilds it with :meth:`Verdict.from_wire`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from clusterenv._jsonable import json_fields
from clusterenv._text import clip
from clusterenv.findings import Finding, Severity, code_info
from clusterenv.preflight.fingerprint import Fingerprint
from clusterenv.preflight.wire import WireError

__all__ = [
    "TABLE_LIMIT",
    "NodeRef",
    "NodeSummary",
    "Problem",
    "RingHop",
    "Verdict",
    "fit_verdict",
]

#: Up to this many reporting nodes the verdict lists every node (and every ring probe); above
#: it, only the nodes (and probes) that problems name.
TABLE_LIMIT = 64


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
class Problem:
    """One cross-node problem and the nodes it concerns.

    Attributes:
        code: Stable identifier, e.g. ``"preflight-env-differs"``.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        title: One line naming the variable or value and the nodes, e.g.
            ``"NCCL_SOCKET_IFNAME differs: rank 2 (10.65.0.4) has 'eth0', 3 nodes have 'ens1'"``.
        nodes: The nodes to look at, e.g. ``(NodeRef(2, "10.65.0.4", "node-2"),)``.
        evidence: What each node reported, e.g. ``("'ens1' on rank 0, 1, 3", "'eth0' on rank 2")``.
        fix: What to do, e.g. ``"set NCCL_SOCKET_IFNAME to the same value on every node"``.
    """

    code: str
    severity: Severity
    title: str
    nodes: tuple[NodeRef, ...] = ()
    evidence: tuple[str, ...] = ()
    fix: str = ""

    @classmethod
    def of(
        cls,
        code: str,
        title: str = "",
        nodes: tuple[NodeRef, ...] = (),
        evidence: tuple[str, ...] = (),
        fix: str = "",
        *,
        severity: Severity | None = None,
    ) -> Problem:
        """A problem with a registered code; severity and title default to the registry's
        (:data:`clusterenv.findings.CODES`)."""
        info = code_info(code)
        return cls(code, severity or info.severity, title or info.title, nodes, evidence, fix)

    def finding(self) -> Finding:
        """The same problem as a :class:`~clusterenv.findings.Finding` (nodes in the evidence)."""
        nodes = (f"nodes: {', '.join(map(str, self.nodes))}",) if self.nodes else ()
        return Finding(self.code, self.severity, self.title, (*self.evidence, *nodes), self.fix)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """One row of the verdict's node table.

    Attributes:
        rank: e.g. ``1``. addr: where it connected from, e.g. ``"10.65.0.3"``.
        hostname: e.g. ``"node-1"``. interface: e.g. ``"ens1"``. mtu: e.g. ``9000``.
        transport: ``"infiniband"``, ``"roce"``, … or None. rdma_ports: usable ports, e.g. ``8``.
        gpus: e.g. ``8`` (None: no driver visible). local_errors: number of ``doctor`` errors.
        torch: e.g. ``"2.4.1"``. nccl: e.g. ``"2.21.5"``.
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
            nccl=fp.versions.get("nccl"),
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
        """Rebuild a verdict received from the primary.

        Raises:
            WireError: When it does not have the verdict's shape.
        """
        try:
            return cls(
                expected_nodes=int(data["expected_nodes"]),
                primary=str(data["primary"]),
                nodes=tuple(NodeSummary(**n) for n in data.get("nodes", ())),
                problems=tuple(
                    Problem(
                        code=str(p["code"]),
                        severity=_severity(p["severity"]),
                        title=str(p["title"]),
                        nodes=tuple(NodeRef(**n) for n in p.get("nodes", ())),
                        evidence=tuple(str(e) for e in p.get("evidence", ())),
                        fix=str(p.get("fix", "")),
                    )
                    for p in data.get("problems", ())
                ),
                rejected=tuple(str(r) for r in data.get("rejected", ())),
                rejected_total=int(data.get("rejected_total", 0)),
                ring=tuple(
                    RingHop(NodeRef(**h["source"]), NodeRef(**h["target"]), bool(h["ok"]),
                            str(h.get("detail", "")))
                    for h in data.get("ring", ())
                ),
                elapsed_s=float(data.get("elapsed_s", 0.0)),
                reported=int(data.get("reported", 0)),
                ring_probed=int(data.get("ring_probed", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise WireError(f"the primary's verdict is malformed ({type(e).__name__}: {e})") from e

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``ok`` and ``exit_code``."""
        return json_fields(self, ok=self.ok, exit_code=self.exit_code)


def _severity(value: object) -> Severity:
    if value == "error":
        return "error"
    if value == "warning":
        return "warning"
    if value == "info":
        return "info"
    raise ValueError(f"unknown severity {value!r}")


# Bounds on the parts of a verdict (characters): every text in it is a prefix of at most these.
_TITLE = 1000
_EVIDENCE_ITEMS = 12
_EVIDENCE = 300
_NAMED_NODES = 64
_SHORT = 128


def _ref(ref: NodeRef) -> NodeRef:
    return NodeRef(ref.rank, None if ref.addr is None else clip(ref.addr, _SHORT),
                   None if ref.hostname is None else clip(ref.hostname, _SHORT))


def _row(row: NodeSummary) -> NodeSummary:
    def short(text: str | None) -> str | None:
        return None if text is None else clip(text, _SHORT)

    return replace(row, addr=clip(row.addr, _SHORT), hostname=short(row.hostname),
                   interface=short(row.interface), transport=short(row.transport),
                   torch=short(row.torch), nccl=short(row.nccl))


def _problem(problem: Problem, *, evidence: int, nodes: int) -> Problem:
    return Problem(
        code=clip(problem.code, _SHORT), severity=problem.severity,
        title=clip(problem.title, _TITLE),
        nodes=tuple(_ref(n) for n in problem.nodes[:nodes]),
        evidence=tuple(clip(e, _EVIDENCE) for e in problem.evidence[:evidence]),
        fix=clip(problem.fix, _TITLE),
    )


def fit_verdict(verdict: Verdict, max_bytes: int, size: Callable[[Verdict], int]) -> Verdict:
    """``verdict`` cut to fit in ``max_bytes`` as measured by ``size`` (its encoded length).

    Every text is first cut to a bounded prefix (a peer's 60,000-character value is echoed as
    its first few hundred characters). If that is still too big, the evidence and the node
    table go, then all but the first problems: errors come first, so the exit code every node
    derives from the verdict never changes. The last step is small by construction.
    """
    ring = tuple(RingHop(_ref(h.source), _ref(h.target), h.ok, clip(h.detail, _EVIDENCE))
                 for h in verdict.ring)
    steps = (
        (_EVIDENCE_ITEMS, _NAMED_NODES, None, True),
        (0, 8, None, False),
        (0, 4, 64, False),
    )
    fitted = verdict
    for evidence, nodes, problems, table in steps:
        kept = verdict.problems if problems is None else verdict.problems[:problems]
        fitted = replace(
            verdict,
            nodes=tuple(_row(n) for n in verdict.nodes) if table else (),
            problems=tuple(_problem(p, evidence=evidence, nodes=nodes) for p in kept),
            rejected=tuple(clip(r, _EVIDENCE) for r in verdict.rejected[:_EVIDENCE_ITEMS * 4]),
            ring=ring if table else tuple(h for h in ring if not h.ok)[:64],
        )
        if size(fitted) <= max_bytes:
            return fitted
    return fitted
