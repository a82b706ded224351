"""Fitting what goes on the wire into its frame, by construction (pure, no I/O).

A verdict is cut to :data:`~clusterenv.preflight.verdict.BOUNDS` and to the byte budget the
primary gives it (:func:`fit_verdict`); every node then accepts it, however many nodes report
whatever they report. A fingerprint is cut to the primary's message limit
(:func:`fit_fingerprint`): an honest node with long ``NCCL_*`` values is compared, not refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from clusterenv._text import clip
from clusterenv.findings import Finding
from clusterenv.preflight.digest import KEY_BYTES, clip_bytes, digest_form
from clusterenv.preflight.fingerprint import Fingerprint, RdmaSummary
from clusterenv.preflight.verdict import BOUNDS, NodeRef, NodeSummary, Problem, RingHop, Verdict

__all__ = ["fit_fingerprint", "fit_verdict"]


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


@dataclass(frozen=True, slots=True)
class _Cut:
    """How far one step of :func:`fit_fingerprint` goes (sizes in JSON bytes)."""

    value: int  # a compared value longer than this is sent as a prefix and a digest
    name: int  # likewise a variable's name
    errors: int  # local findings kept
    error_text: int  # bytes of a local finding's title or fix
    evidence: int  # evidence lines kept per local finding
    items: int  # entries kept in each RDMA list
    text: int  # bytes of any other text


# Least important first: the details of local findings (the verdict shows their titles), then
# long values, then everything down to digests. The last step fits by construction: 256
# variables of at most 2 x 64 bytes, 8 findings of 3 x 256 bytes, RDMA lists of 8 x 64 bytes
# and a dozen texts of 128 bytes: under 48 KiB.
_STEPS = (
    _Cut(value=1024, name=128, errors=64, error_text=1000, evidence=4, items=64, text=512),
    _Cut(value=256, name=128, errors=16, error_text=300, evidence=0, items=16, text=256),
    _Cut(value=KEY_BYTES, name=KEY_BYTES, errors=8, error_text=256, evidence=0, items=8,
         text=128),
)


def _cut(fp: Fingerprint, cut: _Cut) -> Fingerprint:
    def texts(items: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(clip_bytes(i, KEY_BYTES) for i in items[: cut.items])

    def compared(items: Mapping[str, str], limit: int) -> dict[str, str]:
        return {digest_form(k, cut.name): digest_form(v, limit) for k, v in items.items()}

    def short(text: str | None) -> str | None:
        return None if text is None else digest_form(text, cut.text)

    rdma = fp.rdma
    return replace(
        fp,
        node_addr=short(fp.node_addr), primary_addr=short(fp.primary_addr),
        source=clip_bytes(fp.source, cut.text),
        hostname=None if fp.hostname is None else clip_bytes(fp.hostname, cut.text),
        interface=short(fp.interface), interface_reason=clip_bytes(fp.interface_reason, cut.text),
        rdma=RdmaSummary(
            transport=None if rdma.transport is None else digest_form(rdma.transport, KEY_BYTES),
            devices=texts(rdma.devices), ports=rdma.ports, rates_gbps=rdma.rates_gbps[:64],
            inactive=tuple(clip_bytes(i, cut.text) for i in rdma.inactive[: cut.items]),
            gids=tuple(digest_form(g, KEY_BYTES) for g in rdma.gids[: cut.items]),
        ),
        env=compared(fp.env, cut.value),
        local_errors=tuple(
            Finding(clip_bytes(f.code, KEY_BYTES), "error", clip_bytes(f.title, cut.error_text),
                    tuple(clip_bytes(e, cut.text) for e in f.evidence[: cut.evidence]),
                    clip_bytes(f.fix, cut.error_text))
            for f in fp.local_errors[: cut.errors]
        ),
        versions=compared(fp.versions, KEY_BYTES),
        clusterenv=clip_bytes(fp.clusterenv, KEY_BYTES),
        runtime=replace(
            fp.runtime, library=short(fp.runtime.library),
            net_plugin=short(fp.runtime.net_plugin),
            net_plugin_note=clip_bytes(fp.runtime.net_plugin_note, cut.text),
            hcas=tuple(digest_form(h, KEY_BYTES) for h in fp.runtime.hcas[: cut.items]),
            gpu_models=tuple(digest_form(g, KEY_BYTES) for g in fp.runtime.gpu_models[:8]),
            driver=short(fp.runtime.driver), datacenter=short(fp.runtime.datacenter),
        ),
    )


def _what_changed(before: Fingerprint, after: Fingerprint) -> list[str]:
    values = sum(1 for (k, v), (k2, v2) in zip(before.env.items(), after.env.items(),
                                                 strict=True) if v != v2)
    names = sum(1 for k, k2 in zip(before.env, after.env, strict=True) if k != k2)
    parts = []
    if values:
        parts.append(f"{values} values of compared variables sent as a prefix and a digest "
                     "(compared by the digest)")
    if names:
        parts.append(f"{names} variable names likewise")
    dropped = len(before.local_errors) - len(after.local_errors)
    if dropped:
        parts.append(f"{dropped} of {len(before.local_errors)} local findings left out")
    if any(a.evidence != b.evidence or a.title != b.title or a.fix != b.fix
           for a, b in zip(before.local_errors, after.local_errors, strict=False)):
        parts.append("the details of local findings shortened")
    if after.rdma != before.rdma or after.hostname != before.hostname \
            or after.interface_reason != before.interface_reason:
        parts.append("long texts shortened")
    return parts or ["texts shortened"]


def fit_fingerprint(
    fingerprint: Fingerprint, max_bytes: int, size: Callable[[Fingerprint], int]
) -> Fingerprint:
    """``fingerprint`` cut to fit in ``max_bytes`` as measured by ``size`` (the length of the
    message that carries it), with a note in ``trimmed`` saying what went.

    The least important detail goes first (the evidence of local findings, which the verdict
    does not show in full anyway), then long values become a prefix and a digest: nodes compare
    values by :func:`~clusterenv.preflight.digest.compare_key`, so a node whose value was
    shortened still agrees or differs exactly as its full value does. The last step fits by
    construction. A fingerprint that fits is returned as it is.
    """
    original = size(fingerprint)
    if original <= max_bytes:
        return fingerprint
    fitted = fingerprint
    for cut in _STEPS:
        fitted = _cut(fingerprint, cut)
        note = (f"fitted to the {max_bytes}-byte message limit ({original} bytes): "
                + ", ".join(_what_changed(fingerprint, fitted)))
        fitted = replace(fitted, trimmed=(clip(note, 500),))
        if size(fitted) <= max_bytes:
            return fitted
    return fitted
