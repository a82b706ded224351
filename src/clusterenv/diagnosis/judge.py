"""The verdict of one node: the plan, NCCL's own answer where it is asked, and every check.

:func:`diagnose_with_plan` returns a :class:`Diagnosis`, a frozen result; the facts it judged
are never written to.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from clusterenv._facts import Facts
from clusterenv._root import as_root
from clusterenv.diagnosis.assumed import cluster_variables_missing
from clusterenv.diagnosis.contract import contract_checks
from clusterenv.diagnosis.host import host_checks, oversized_files
from clusterenv.diagnosis.network import network_checks
from clusterenv.diagnosis.rdma import rdma_checks
from clusterenv.diagnosis.rendezvous import rendezvous_checks
from clusterenv.findings import Finding, codes_of, sort_findings
from clusterenv.nccl.bootstrap import NcclBootstrap, bootstrap_findings, choose, relevant
from clusterenv.nccl.plan import NcclPlan, plan_from_facts
from clusterenv.nccl.probe import LibrarySearch, NcclAnswer, ask_nccl, find_nccl_library
from clusterenv.nccl.version import NcclVersion

__all__ = ["CHECK_CODES", "Diagnosis", "diagnose_facts", "diagnose_with_plan", "doctor"]

#: Every finding code the plan and the checks of this package emit (besides the ``config-*``
#: and ``worker-*`` codes of :mod:`clusterenv.config` and the codes of
#: :mod:`clusterenv.filters`): the ``"doctor"`` codes of :data:`clusterenv.findings.CODES`.
CHECK_CODES: tuple[str, ...] = codes_of("doctor")

# The plan's own "environment is invalid" finding repeats what the config findings say.
_REDUNDANT = frozenset({"plan-config-invalid"})


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What :func:`diagnose_with_plan` found.

    Attributes:
        findings: Errors first, e.g. ``(Finding("socket-ifname-unset", "error", ...),)``.
        plan: The NCCL/Gloo/TensorPipe plan for this node.
        facts: The facts judged (with NCCL's own version first when NCCL was asked).
        bootstrap: NCCL's bootstrap interface now and with the plan applied, asked or
            predicted; None when there is no cluster to bootstrap in.
    """

    findings: tuple[Finding, ...]
    plan: NcclPlan
    facts: Facts
    bootstrap: NcclBootstrap | None = None

    @property
    def has_errors(self) -> bool:
        """Whether any finding is an error (the job would fail or hang as it stands)."""
        return any(f.severity == "error" for f in self.findings)


def diagnose_with_plan(
    environ: Mapping[str, str] | None = None,
    *,
    root: str | os.PathLike[str] = "/",
    nccl_version: str | None = None,
    debug: bool = False,
    ask_nccl: bool = True,
) -> Diagnosis:
    """:func:`doctor` and :func:`~clusterenv.plan_nccl_env` from one detection pass.

    Args:
        environ: The environment to judge; None reads ``os.environ``.
        root: ``/`` for this host, or a host snapshot.
        nccl_version: Assume this NCCL version instead of detecting it.
        debug: Plan ``NCCL_DEBUG=INFO`` too.
        ask_nccl: Ask the NCCL library found here (one subprocess, see
            :mod:`clusterenv.nccl.probe`) which interface it bootstraps on, now and with the
            plan applied; its version becomes evidence. Only on the live host (a snapshot is
            another host); False predicts from NCCL's rules alone, as ``--no-nccl`` does.

    Returns:
        The findings (errors first), the plan, the facts both were judged from, and NCCL's
        bootstrap interface (asked or predicted).
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    facts = Facts(environ=env, root=as_root(root), nccl_version=nccl_version)
    return diagnose_facts(facts, debug=debug, ask_nccl=ask_nccl, nccl_version=nccl_version)


def diagnose_facts(
    facts: Facts, *, debug: bool = False, ask_nccl: bool = True, nccl_version: str | None = None
) -> Diagnosis:
    """:func:`diagnose_with_plan` on facts already gathered (``launch`` judges the environment
    it will start the job with this way, reusing its detection).

    Returns:
        The diagnosis; its facts are new ones when NCCL's own version changed the evidence.
    """
    plan = plan_from_facts(facts, debug=debug)
    facts, plan, bootstrap = _ask_nccl(facts, plan, ask=ask_nccl, nccl_version=nccl_version,
                                       debug=debug)
    findings: list[Finding] = []
    if facts.check is not None:
        findings += facts.check.findings()
    findings += [f for f in plan.findings if f.code not in _REDUNDANT]
    findings += network_checks(facts, bootstrap)
    findings += rendezvous_checks(facts)
    findings += contract_checks(facts)
    findings += rdma_checks(facts)
    findings += host_checks(facts)
    findings += cluster_variables_missing(facts)
    if bootstrap is not None:
        findings += bootstrap_findings(facts, bootstrap)
    findings += oversized_files(facts)  # last: the checks above are what read the files
    unique = sort_findings(dict.fromkeys(findings))
    return Diagnosis(tuple(unique), plan, facts, bootstrap)


def _ask_nccl(
    facts: Facts, plan: NcclPlan, *, ask: bool, nccl_version: str | None, debug: bool
) -> tuple[Facts, NcclPlan, NcclBootstrap]:
    """NCCL's answer now and with the plan applied, or the prediction.

    When NCCL reports a version that is not already the first evidence, the facts and the plan
    are made again with it first (the plan's version rules then follow the NCCL that answered).
    """
    planned_env = {**facts.environ, **plan.env}
    search = LibrarySearch(None, "not asked (--no-nccl)")
    if ask and not facts.root.is_live:
        search = LibrarySearch(None, "not asked: a host snapshot is not this host")
    elif ask:
        search = find_nccl_library(facts.environ)
    library = search.library
    same = relevant(planned_env) == relevant(facts.environ)
    answers: list[NcclAnswer] = []
    if library is not None:
        answers = ask_nccl([facts.environ] if same else [facts.environ, planned_env], library)
    reported = tuple(
        NcclVersion(a.version, f"{library.path} (ncclGetVersion)")
        for a in answers[:1] if a.version is not None and library is not None
    )
    stale = False
    if reported and nccl_version is None:
        # NCCL's own version is the strongest evidence: plan again with it listed first.
        facts = facts.derive(nccl_reported=reported)
        plan = plan_from_facts(facts, debug=debug)
        replanned = {**facts.environ, **plan.env}
        stale = relevant(replanned) != relevant(planned_env)
        planned_env = replanned
        same = relevant(planned_env) == relevant(facts.environ)
    current = choose(facts, answers[0] if answers else None, search.note)
    if same:
        planned = current
    else:
        planned_facts = facts.derive(environ=planned_env)
        answer = answers[1] if len(answers) > 1 and not stale else None
        note = "not asked: the plan changed with NCCL's version" if stale else search.note
        planned = choose(planned_facts, answer, note)
    bootstrap = NcclBootstrap(current, planned, library, search.note, search.problem)
    return facts, plan, bootstrap


def doctor(
    environ: Mapping[str, str] | None = None,
    *,
    root: str | os.PathLike[str] = "/",
    nccl_version: str | None = None,
    ask_nccl: bool = True,
) -> list[Finding]:
    """Check this node and explain what will break the job.

    The same verdict as ``clusterenv doctor``: on this host (``root="/"``) NCCL itself is asked
    which interface it bootstraps on, in a short-lived subprocess; ``ask_nccl=False`` (the
    CLI's ``--no-nccl``) predicts from NCCL's rules instead.

    Args:
        environ: The environment to judge; None reads ``os.environ`` at call time.
        root: ``/`` for this host, or a host snapshot.
        nccl_version: Assume this NCCL version (e.g. ``"2.19.3"``) instead of detecting it.
        ask_nccl: Ask the NCCL library this node would load (see
            :mod:`clusterenv.nccl.probe`).

    Returns:
        Findings, errors first, e.g.
        ``[Finding("filter-selects-avoided", "error", "NCCL_SOCKET_IFNAME='eth0' selects eth0
        (Runpod's management interface)", ...)]``; empty when nothing is wrong.

    Raises:
        DiscoveryError: When ``root`` cannot be read.
    """
    return list(diagnose_with_plan(environ=environ, root=root, nccl_version=nccl_version,
                                   ask_nccl=ask_nccl).findings)
