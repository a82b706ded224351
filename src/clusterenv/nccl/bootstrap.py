"""The interface NCCL bootstraps on: NCCL's own answer when it can be asked, else our prediction.

:func:`choose` sets NCCL's answer under one environment (asked through
:mod:`clusterenv.nccl.probe`, by ``doctor`` under the environment as it stands and under the
plan, in one subprocess) beside :func:`~clusterenv.nccl.interface.predict_bootstrap`.
Where the two disagree our model of NCCL is wrong for that NCCL version: doctor reports it
(``nccl-bootstrap-disagrees``) and every other check trusts NCCL's answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterenv._facts import Facts
from clusterenv._root import Root
from clusterenv._shell import export, prose
from clusterenv.findings import Finding, Severity
from clusterenv.nccl.interface import (
    bootstrap_unpredictable,
    predict_bootstrap,
    usable_cluster_interface,
)
from clusterenv.nccl.probe import (
    LibrarySearch,
    NcclAnswer,
    NcclLibrary,
    ask_nccl,
    find_nccl_library,
)

if TYPE_CHECKING:
    from clusterenv.config import ClusterConfig

__all__ = [
    "BOOTSTRAP_VARIABLES",
    "BootstrapChoice",
    "NcclBootstrap",
    "ask_one",
    "bootstrap_findings",
    "choose",
]

#: The variables that change NCCL's bootstrap interface choice.
BOOTSTRAP_VARIABLES = ("NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_COMM_ID")

PREDICTION = "prediction"
"""``by`` of a choice that comes from our model, not from NCCL."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BootstrapChoice:
    """The interface NCCL bootstraps on under one environment, and who says so.

    Attributes:
        interface: e.g. ``"ens1"``; None when NCCL selects nothing (``ncclGetUniqueId`` fails
            with "no socket interface found").
        address: As NCCL prints it, e.g. ``"10.65.0.2"`` or ``"fe80::1%ens1"``; None likewise.
        by: ``"nccl 2.32.3"`` when NCCL itself answered, else ``"prediction"``.
        predicted_interface: What our model predicts, e.g. ``"ens1"`` (None: nothing).
        predicted_address: The address our model predicts.
        ifname: The ``NCCL_SOCKET_IFNAME`` NCCL saw (environment or config file), None unset.
        comm_id: The ``NCCL_COMM_ID`` NCCL saw, None unset. When set, NCCL bootstraps on the
            interface in the subnet of its address, whatever ``NCCL_SOCKET_IFNAME`` says.
        note: Why NCCL was not asked or did not answer, e.g. ``"no libnccl.so.2 in ..."``;
            empty when it answered.
        unpredictable: Why our model made no prediction (``NCCL_COMM_ID`` names a host);
            empty when it did.
        log: NCCL's ``Bootstrap`` / ``WARN`` lines behind the answer.
    """

    interface: str | None
    address: str | None
    by: str
    predicted_interface: str | None
    predicted_address: str | None
    ifname: str | None = None
    comm_id: str | None = None
    note: str = ""
    unpredictable: str = ""
    log: tuple[str, ...] = ()

    @property
    def asked(self) -> bool:
        """NCCL itself answered."""
        return self.by != PREDICTION

    @property
    def predicted(self) -> bool:
        """Our model made a prediction (see ``unpredictable``)."""
        return not self.unpredictable

    @property
    def disagrees(self) -> bool:
        """NCCL answered something other than our prediction."""
        return self.asked and self.predicted and (self.interface, self.address) != (
            self.predicted_interface, self.predicted_address)

    def describe(self) -> str:
        """``"eth0 (172.20.0.5)"`` or ``"no interface"``."""
        return f"{self.interface} ({self.address})" if self.interface else "no interface"


@dataclass(frozen=True, slots=True)
class NcclBootstrap:
    """NCCL's bootstrap interface here, now and with the plan applied.

    Attributes:
        current: Under the environment as it stands.
        planned: Under the environment with the plan applied.
        library: The ``libnccl.so.2`` asked, or None.
        library_note: How the library was found, or why none was, e.g.
            ``"CLUSTERENV_NCCL_LIBRARY=none: NCCL is not asked"``.
        library_problem: Whether ``library_note`` describes a mistake to report (a
            ``CLUSTERENV_NCCL_LIBRARY`` that names no file).
    """

    current: BootstrapChoice
    planned: BootstrapChoice
    library: NcclLibrary | None = None
    library_note: str = ""
    library_problem: bool = False


def choose(facts: Facts, answer: NcclAnswer | None, note: str) -> BootstrapChoice:
    """NCCL's answer beside our prediction under ``facts.environ``; the prediction alone (with
    ``note`` or the answer's error saying why) when NCCL did not answer."""
    unpredictable = bootstrap_unpredictable(facts) or ""
    predicted = None if unpredictable else predict_bootstrap(facts)
    p_name, p_address = predicted if predicted is not None else (None, None)
    found = facts.user_value("NCCL_SOCKET_IFNAME")
    ifname = found[0] if found is not None else None
    comm = facts.user_value("NCCL_COMM_ID")
    comm_id = comm[0] if comm is not None else None
    if answer is not None and answer.answered:
        lines = tuple(line.strip() for line in answer.log if "Bootstrap" in line)
        return BootstrapChoice(
            interface=answer.interface, address=answer.address, by=answer.by,
            predicted_interface=p_name, predicted_address=p_address, ifname=ifname,
            comm_id=comm_id, unpredictable=unpredictable, log=lines,
        )
    if answer is not None and answer.error:
        note = f"NCCL did not answer: {answer.error}"
    if unpredictable:
        note = f"no prediction: {unpredictable}; {note}"
    return BootstrapChoice(
        interface=p_name, address=p_address, by=PREDICTION, predicted_interface=p_name,
        predicted_address=p_address, ifname=ifname, comm_id=comm_id, note=note,
        unpredictable=unpredictable,
    )


def ask_one(
    environ: Mapping[str, str], root: Root, config: ClusterConfig | None = None
) -> tuple[BootstrapChoice, LibrarySearch]:
    """NCCL's bootstrap interface under ``environ`` on the live host (asked when a library is
    found, else predicted), and how the library was looked for."""
    search = find_nccl_library(environ)
    answer = ask_nccl([environ], search.library)[0] if search.library is not None else None
    facts = Facts(environ=environ, root=root, config=config)
    return choose(facts, answer, search.note), search


def relevant(environ: Mapping[str, str]) -> tuple[str | None, ...]:
    """The values of :data:`BOOTSTRAP_VARIABLES` in ``environ``."""
    return tuple(environ.get(name) for name in BOOTSTRAP_VARIABLES)


def _disagreement(facts: Facts, choice: BootstrapChoice, where: str) -> Finding:
    cluster = usable_cluster_interface(facts)
    name = choice.interface
    severity: Severity
    if name is None:
        severity = "error"
        consequence = "ncclGetUniqueId fails: no socket interface found"
    elif name in facts.avoid or (cluster is not None and name != cluster):
        severity = "error"
        consequence = (f"not the cluster interface {cluster}" if cluster is not None
                       else facts.avoid[name])
    else:
        severity = "warning"
        consequence = "clusterenv's other checks trust NCCL's answer"
    predicted = (f"{choice.predicted_interface} ({choice.predicted_address})"
                 if choice.predicted_interface else "no interface (NCCL would fail)")
    setting = (f"NCCL_SOCKET_IFNAME={choice.ifname!r}" if choice.ifname is not None
               else "NCCL_SOCKET_IFNAME unset")
    if cluster is None or name == cluster:
        fix = "trust NCCL's answer; please report the disagreement with this output"
    elif choice.comm_id is not None:
        setting += f", NCCL_COMM_ID={choice.comm_id!r}"
        fix = (f"unset NCCL_COMM_ID, or give it an address on {prose(cluster)}: NCCL bootstraps "
               "on the "
               "interface in that address's subnet, whatever NCCL_SOCKET_IFNAME says")
    else:
        fix = export("NCCL_SOCKET_IFNAME", cluster)
    return Finding.of(
        "nccl-bootstrap-disagrees",
        f"{where}, {choice.by} bootstraps over {choice.describe()}, not {predicted} as "
        f"clusterenv predicted: {consequence}",
        (setting, *choice.log, f"clusterenv's model of NCCL predicted {predicted}"),
        fix,
        severity=severity,
    )


def bootstrap_findings(facts: Facts, report: NcclBootstrap) -> list[Finding]:
    """Doctor's findings about asking NCCL: a disagreement with our prediction (now, and with
    the plan applied), and a ``CLUSTERENV_NCCL_LIBRARY`` or probe that failed."""
    findings: list[Finding] = []
    if report.library_problem:
        findings.append(Finding.of(
            "nccl-probe-failed",
            f"NCCL was not asked for its bootstrap interface: {report.library_note}",
            (report.library_note,),
            "set CLUSTERENV_NCCL_LIBRARY to the path of libnccl.so.2, or to 'none'",
        ))
    elif report.library is not None and not report.current.asked and report.current.note:
        findings.append(Finding.of(
            "nccl-probe-failed",
            f"{report.library.path} gave no bootstrap interface: {report.current.note}",
            (f"library: {report.library.path} ({report.library.source})",
             "the checks use clusterenv's prediction instead"),
            "run `clusterenv doctor` again; if it persists set CLUSTERENV_NCCL_LIBRARY=none "
            "and report it",
        ))
    if report.current.disagrees:
        findings.append(_disagreement(facts, report.current, "as the environment stands"))
    if report.planned.disagrees and report.planned != report.current:
        findings.append(_disagreement(facts, report.planned, "with the plan applied"))
    return findings
