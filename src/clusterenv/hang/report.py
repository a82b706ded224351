"""What ``clusterenv hang`` concluded: the report, its stalled collectives, ranks and nodes.

Built by :func:`clusterenv.hang.attribute.attribute`; every type has ``to_dict()``, which is
what ``clusterenv hang --json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from clusterenv._jsonable import json_fields
from clusterenv.hang.model import Call, RankDump

__all__ = ["HangReport", "NodeInfo", "RankState", "RankView", "Stall", "Verdict"]

Verdict = Literal["hang", "agree", "unreadable"]
RankState = Literal["waiting", "behind", "missing"]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node of the job and what is known about it.

    Attributes:
        node_rank: Its ``NODE_RANK``, e.g. ``1``; None when unknown.
        host: Its host name, e.g. ``"node-1"``; None when unknown.
        addr: Its cluster address, e.g. ``"10.65.0.3"``; None when unknown.
        ranks: Its global ranks, e.g. ``(2, 3)``.
        source: How the ranks were tied to it, e.g. ``"launch record"``.
        doctor: What doctor said about it at launch (from its launch record).
        reported: ``hang --collect``: whether it sent its dumps; None when not collecting.
        evidence: What a given NCCL log or preflight verdict says about it.
    """

    node_rank: int | None
    host: str | None
    addr: str | None
    ranks: tuple[int, ...]
    source: str
    doctor: tuple[str, ...] = ()
    reported: bool | None = None
    evidence: tuple[str, ...] = ()

    def describe(self) -> str:
        """e.g. ``"node 1 (node-1, 10.65.0.3)"``."""
        name = "node ?" if self.node_rank is None else f"node {self.node_rank}"
        details = [d for d in (self.host, self.addr) if d]
        return f"{name} ({', '.join(details)})" if details else name

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class RankView:
    """One rank of a stalled group.

    Attributes:
        rank: The global rank, e.g. ``3``.
        state: ``"waiting"`` (entered the stalled collective), ``"behind"`` (its dump shows it
            never did) or ``"missing"`` (no dump of it was read).
        last: Its last collective in the group; None when missing or none recorded.
        latest: Its most recent call in any group when that is not ``last`` (where it is
            instead), else None.
        node_rank: Its node, e.g. ``1``; None when unknown.
        host: Its node's host name; None when unknown.
        error: What it failed with (clusterenv's dumps), else None.
    """

    rank: int
    state: RankState
    last: Call | None = None
    latest: Call | None = None
    node_rank: int | None = None
    host: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class Stall:
    """A collective that some members of a group entered and others never did.

    Attributes:
        group: The group's name, e.g. ``"0"``.
        desc: Its description, e.g. ``"default_pg"``.
        call: The collective, as a rank that entered it recorded it.
        waiting: Ranks that entered it, e.g. ``(0, 1, 2)``.
        behind: Ranks whose dumps show they never entered it, e.g. ``(3,)``.
        missing: Members of the group with no dump, e.g. ``()``.
        members_known: Whether the group's members are known (else only the ranks whose
            dumps name the group could be compared).
        ranks: Every behind, missing and waiting rank, with its node and last call.
        mismatch: Ranks that entered the same number with another operation or sizes (the
            ranks disagree on what to call), e.g. ``("rank 2 entered broadcast #7 ...",)``.
    """

    group: str
    desc: str
    call: Call
    waiting: tuple[int, ...]
    behind: tuple[int, ...]
    missing: tuple[int, ...]
    members_known: bool
    ranks: tuple[RankView, ...] = ()
    mismatch: tuple[str, ...] = ()

    @property
    def suspects(self) -> tuple[int, ...]:
        """The ranks that did not enter: behind, then missing."""
        return self.behind + self.missing

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``suspects``."""
        return json_fields(self, suspects=self.suspects)


@dataclass(frozen=True, slots=True)
class HangReport:
    """What ``clusterenv hang`` concluded.

    Attributes:
        verdict: ``"hang"`` (ranks did not all enter a collective: see ``stalls``), ``"agree"``
            (every rank read reached the same collectives) or ``"unreadable"`` (no dump could
            be read).
        title: One line, e.g. ``"rank 3 (node 1, node-1) never entered all_reduce #7 of group 0
            (default_pg); ranks 0-2 wait in it"``.
        stalls: The stalled collectives, the most telling first.
        agreed: Groups whose ranks all reached the same collective, one line each.
        nodes: The job's nodes and their ranks.
        world_size: Processes in the job, e.g. ``4``; None when unknown.
        world_source: Where ``world_size`` came from, e.g. ``"launch record"``.
        ranks_read: The ranks whose dumps were read.
        failures: What ranks failed with, from clusterenv's notes, one line each.
        notes: Files skipped and other caveats, each naming the file.
        dumps: The summaries compared.
    """

    verdict: Verdict
    title: str
    stalls: tuple[Stall, ...] = ()
    agreed: tuple[str, ...] = ()
    nodes: tuple[NodeInfo, ...] = ()
    world_size: int | None = None
    world_source: str = ""
    ranks_read: tuple[int, ...] = ()
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    dumps: tuple[RankDump, ...] = field(default=(), repr=False)

    @property
    def exit_code(self) -> int:
        """``1`` a hang was attributed, ``0`` every rank agrees, ``2`` nothing was readable."""
        return {"hang": 1, "agree": 0, "unreadable": 2}[self.verdict]

    def node_of(self, rank: int) -> NodeInfo | None:
        """The node of ``rank``, or None when unknown."""
        return next((n for n in self.nodes if rank in n.ranks), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``exit_code``."""
        return json_fields(self, exit_code=self.exit_code)
