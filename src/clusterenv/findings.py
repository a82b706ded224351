"""The :class:`Finding` type shared by ``doctor``, the NCCL plan, ``nccl-log`` and ``preflight``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["SEVERITIES", "Finding", "Severity", "has_errors", "sort_findings"]

#: How bad a finding is: ``error`` will break or silently degrade the job, ``warning`` probably
#: will, ``info`` is worth knowing.
Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing found wrong (or worth knowing), with the evidence and the fix.

    Attributes:
        code: Stable identifier, documented in the troubleshooting page, e.g.
            ``"socket-ifname-management"``.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        title: One line a person can act on, naming the variable, value or device.
        evidence: What was observed, one fact per item, e.g. ``("NCCL_SOCKET_IFNAME='eth0'",)``.
        fix: What to do about it, e.g. ``"export NCCL_SOCKET_IFNAME=ens1"``.
    """

    code: str
    severity: Severity
    title: str
    evidence: tuple[str, ...] = ()
    fix: str = ""

    def __str__(self) -> str:
        return f"{self.severity}[{self.code}]: {self.title}"


def has_errors(findings: Iterable[Finding]) -> bool:
    """Whether any finding is an error."""
    return any(f.severity == "error" for f in findings)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; stable within a severity."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: order[f.severity])
