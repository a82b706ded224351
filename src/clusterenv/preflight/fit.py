"""Fitting what goes on the wire into its frame, by construction (pure, no I/O).

A verdict is cut to :data:`~clusterenv.preflight.verdict.BOUNDS` and to the byte budget the
primary gives it (:func:`fit_verdict`); every node then accepts it, however many nodes report
whatever they report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from clusterenv._text import clip
from clusterenv.preflight.verdict import BOUNDS, NodeRef, NodeSummary, Problem, RingHop, Verdict

__all__ = ["fit_verdict"]


def _ref(ref: NodeRef) -> NodeRef:
    return NodeRef(ref.rank, None if ref.addr is None else clip(ref.addr, BOUNDS.short),
                   None if ref.hostname is None else clip(ref.hostname, BOUNDS.short))


def _row(row: NodeSummary) -> NodeSummary:
    def short(text: str | None) -> str | None:
        return None if text is None else clip(text, BOUNDS.short)

    return replace(row, addr=clip(row.addr, BOUNDS.short), hostname=short(row.hostname),
                   interface=short(row.interface), transport=short(row.transport),
                   torch=short(row.torch), nccl=short(row.nccl))


def _problem(problem: Problem, *, evidence: int, nodes: int, text: int) -> Problem:
    return Problem(
        code=clip(problem.code, BOUNDS.short), severity=problem.severity,
        title=clip(problem.title, text),
        nodes=tuple(_ref(n) for n in problem.nodes[:nodes]),
        evidence=tuple(clip(e, BOUNDS.evidence_text) for e in problem.evidence[:evidence]),
        fix=clip(problem.fix, text),
    )


def fit_verdict(verdict: Verdict, max_bytes: int, size: Callable[[Verdict], int]) -> Verdict:
    """``verdict`` within :data:`~clusterenv.preflight.verdict.BOUNDS`, cut to fit in
    ``max_bytes`` as measured by ``size`` (its encoded length).

    Every text is first cut to a bounded prefix (a peer's 60,000-character value is echoed as
    its first few hundred characters) and every list to its bound (problems beyond it are
    counted in ``more_problems``). If that is still too big, the evidence and the node table
    go, then all but the first problems: errors come first, so the exit code every node derives
    from the verdict never changes. The last step is small by construction: 64 problems of at
    most 600 characters and 4 named nodes each, 16 refusals and 16 failed probes, under
    1 MiB even when every character is escaped (6 bytes).
    """
    b = BOUNDS
    ring = tuple(RingHop(_ref(h.source), _ref(h.target), h.ok, clip(h.detail, b.evidence_text))
                 for h in verdict.ring)
    failed = tuple(h for h in ring if not h.ok)
    # (evidence lines, named nodes, problems, characters of a title or fix, table, lists)
    steps = (
        (b.evidence, b.named_nodes, b.problems, b.title, True, b.rejected),
        (0, 8, b.problems, b.title, False, b.rejected),
        (0, 4, 64, 300, False, 16),
    )
    fitted = verdict
    for evidence, nodes, problems, text, table, listed in steps:
        kept = verdict.problems[:problems]
        fitted = replace(
            verdict,
            nodes=tuple(_row(n) for n in verdict.nodes[:b.table_rows]) if table else (),
            problems=tuple(_problem(p, evidence=evidence, nodes=nodes, text=text) for p in kept),
            more_problems=verdict.more_problems + len(verdict.problems) - len(kept),
            rejected=tuple(clip(r, b.evidence_text) for r in verdict.rejected[:listed]),
            ring=ring[:b.ring] if table else failed[:min(listed, b.ring)],
        )
        if size(fitted) <= max_bytes:
            return fitted
    return fitted
