"""NCCL, Gloo and TensorPipe settings derived from evidence: :func:`plan_nccl_env` and
:func:`apply_nccl_defaults`.

The plan sets only what is unset and evidenced, on a multi-node cluster:

- ``NCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME``: the cluster interface
  (the one holding ``NODE_ADDR``, else the one on the subnet of ``PRIMARY_ADDR``). NCCL matches
  prefixes, so it gets ``=ens1`` when another interface name starts with ``ens1``; Gloo and
  TensorPipe take exact names.
- ``NCCL_IB_HCA``: the exact list ``=dev:port,...`` of ACTIVE, openable ports on the cluster
  fabric.
- ``NCCL_IB_GID_INDEX``: only on RoCE, only when every listed port agrees, and only when NCCL is
  known to be older than 2.21.
- ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS=INIT,NET`` only with ``debug=True``.

A value the user set (in the environment, or for ``NCCL_*`` in NCCL's config files) is kept
unless ``override=True``; a harmful one is reported and warned about. Nothing is set on a single
node. ``NCCL_IB_DISABLE`` and debugging knobs are never written.

Example::

    from clusterenv import apply_nccl_defaults

    plan = apply_nccl_defaults()   # before torch.distributed.init_process_group()
    for change in plan.changes:
        print(change.action, change.name, change.value, change.reason)
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from clusterenv._facts import ENVIRONMENT, Facts, Proposal
from clusterenv._jsonable import json_fields
from clusterenv._root import as_root
from clusterenv.errors import ClusterEnvWarning, ConfigError
from clusterenv.findings import Finding
from clusterenv.nccl.hca import rdma_plan, rdma_value_findings
from clusterenv.nccl.interface import socket_plan, socket_value_findings
from clusterenv.nccl.lint import env_checks

if TYPE_CHECKING:
    from clusterenv.config import ClusterConfig
    from clusterenv.host import HostFacts
    from clusterenv.network import NetworkInterfaces
    from clusterenv.rdma import RdmaInfo

__all__ = ["PLANNED_VARIABLES", "Action", "EnvChange", "NcclPlan", "apply_nccl_defaults",
           "plan_nccl_env"]

#: What a change does: ``"set"`` an unset variable, ``"keep"`` the user's value, or
#: ``"override"`` it (only with ``override=True``).
Action = Literal["set", "keep", "override"]

#: Every variable the plan may write, in the order it lists them.
PLANNED_VARIABLES: tuple[str, ...] = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
)
_DEBUG_VALUES = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


@dataclass(frozen=True, slots=True)
class EnvChange:
    """One decision of the plan about one variable.

    Attributes:
        name: The variable, e.g. ``"NCCL_SOCKET_IFNAME"``.
        value: The value in effect after the plan is applied, e.g. ``"ens1"`` (for ``"keep"``
            the user's value).
        previous: The value before, or None when unset, e.g. ``"eth0"``.
        action: ``"set"`` (was unset), ``"keep"`` (the user's value stays) or ``"override"``.
        reason: The evidence, e.g. ``"ens1 holds NODE_ADDR 10.65.0.2"``.
        origin: Where ``previous`` came from: ``"environment"`` or an NCCL config file such as
            ``"/etc/nccl.conf"``; None when it was unset.
        planned: For ``"keep"``: what clusterenv would have set, e.g. ``"ens1"``; None when it
            plans nothing for this variable.
        harmful: The kept value is known to be harmful (see the plan's findings).
    """

    name: str
    value: str
    previous: str | None
    action: Action
    reason: str
    origin: str | None = None
    planned: str | None = None
    harmful: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class NcclPlan:
    """What :func:`apply_nccl_defaults` does (or did), and why.

    Attributes:
        changes: One :class:`EnvChange` per variable decided, in :data:`PLANNED_VARIABLES`
            order, then kept variables that are harmful.
        findings: Problems with the values found (harmful user values, no cluster interface, …).
        notes: What was left alone and why, e.g. ``("single node: nothing to set",)``.
        multi_node: Whether the cluster spans several nodes (nothing is planned otherwise).
        cluster_interface: The interface chosen for cluster traffic, e.g. ``"ens1"``.
        nccl_version: The NCCL version found, e.g. ``"2.21.5"``; None when unknown, and on a
            single node or an invalid environment (nothing is planned, the version is not read).
    """

    changes: tuple[EnvChange, ...] = ()
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    multi_node: bool = False
    cluster_interface: str | None = None
    nccl_version: str | None = None

    @property
    def env(self) -> dict[str, str]:
        """The variables the plan sets (``set`` and ``override``), e.g.
        ``{"NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1"}``."""
        return {c.name: c.value for c in self.changes if c.action != "keep"}

    @property
    def kept(self) -> tuple[EnvChange, ...]:
        """The user's values that stay."""
        return tuple(c for c in self.changes if c.action == "keep")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``env``."""
        return json_fields(self, env=self.env)


def plan_nccl_env(
    environ: Mapping[str, str] | None = None,
    *,
    root: str | os.PathLike[str] = "/",
    config: ClusterConfig | None = None,
    network: NetworkInterfaces | None = None,
    rdma: RdmaInfo | None = None,
    host: HostFacts | None = None,
    debug: bool = False,
    override: bool = False,
    nccl_version: str | None = None,
    strict: bool = False,
) -> NcclPlan:
    """Decide the NCCL, Gloo and TensorPipe settings for this node; changes nothing.

    Args:
        environ: The environment to plan for; None reads ``os.environ`` at call time.
        root: ``/`` or a host snapshot to read the host from.
        config: The cluster contract; read from ``environ`` when None. An invalid contract
            plans nothing: a ``plan-config-invalid`` finding and a warning, or ``ConfigError``
            with ``strict=True``.
        network: Interfaces, when already detected.
        rdma: RDMA devices, when already detected.
        host: Host facts (NCCL config files), when already detected.
        debug: Also set ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS=INIT,NET`` when unset.
        override: Plan to replace user values that differ from the evidenced ones.
        nccl_version: Assume this NCCL version (e.g. ``"2.19.3"``) instead of detecting it.
        strict: Raise ``ConfigError`` on an invalid contract instead of warning.

    Returns:
        The plan, e.g. with ``plan.env == {"NCCL_SOCKET_IFNAME": "ens1", ...}``.

    Raises:
        ConfigError: With ``strict=True``, when the cluster environment is invalid.
        DiscoveryError: When ``root`` cannot be read.

    Warns:
        ClusterEnvWarning: When the cluster environment is invalid (nothing is planned), naming
            every problem, e.g. ``WORLD_SIZE=2 != NUM_NODES*NUM_TRAINERS``.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    facts = Facts(environ=env, root=as_root(root), config=config, network=network, rdma=rdma,
                  host=host, nccl_version=nccl_version)
    _judge_contract(facts, strict=strict, stacklevel=3)
    return plan_from_facts(facts, debug=debug, override=override)


def _judge_contract(facts: Facts, *, strict: bool, stacklevel: int) -> None:
    """An invalid contract: ``ConfigError`` when strict, else a ``ClusterEnvWarning`` naming
    every problem (the plan is empty, and a silent empty plan looks like success)."""
    check = facts.check
    if check is None or check.config is not None:
        return
    if strict:
        raise ConfigError(check.problems, source=check.source)
    problems = "; ".join(str(p) for p in check.problems)
    warnings.warn(
        f"the cluster environment is invalid (source: {check.source}), so nothing is planned "
        f"for NCCL, Gloo and TensorPipe: {problems}. Fix it (`clusterenv doctor` lists the "
        "fixes), or pass strict=True to raise ConfigError instead",
        ClusterEnvWarning,
        stacklevel=stacklevel,
    )


def plan_from_facts(facts: Facts, *, debug: bool = False, override: bool = False) -> NcclPlan:
    """:func:`plan_nccl_env` on facts already gathered (``doctor`` shares them)."""
    proposals: list[Proposal] = []
    findings: list[Finding] = []
    notes: list[str] = []
    if facts.config is None:
        problems = facts.check.problems if facts.check is not None else ()
        findings.append(Finding.of(
            "plan-config-invalid",
            "the cluster environment is invalid: nothing is planned for NCCL, Gloo and "
            "TensorPipe",
            tuple(str(p) for p in problems[:5]),
            "fix the problems `clusterenv doctor` lists",
        ))
        notes.append("nothing planned: the cluster environment is invalid")
    elif not facts.multi_node:
        notes.append(
            f"single node (source {facts.source}): NCCL, Gloo and TensorPipe need no interface "
            "or HCA settings; nothing to set"
        )
    else:
        for part in (socket_plan, rdma_plan):
            part_proposals, part_findings, part_notes = part(facts)
            proposals += part_proposals
            findings += part_findings
            notes += part_notes
    if debug:
        proposals += [
            Proposal(name, value, "debug=True: log NCCL's interface and transport choices",
                     _same_upper(value))
            for name, value in _DEBUG_VALUES.items()
        ]
    flagged = [*socket_value_findings(facts), *rdma_value_findings(facts), *env_checks(facts)]
    changes = _decide(facts, proposals, flagged, override=override)
    # A value the plan replaces no longer matters: its findings live on in the change's reason.
    replaced = {c.name for c in changes if c.action == "override"}
    for name, finding in flagged:
        if name not in replaced and finding not in findings:
            findings.append(finding)
    cluster = facts.cluster_interface if facts.multi_node else None
    if cluster is not None and facts.management_reason(cluster) is not None:
        cluster = None  # found, but refused: nothing carries cluster traffic
    # Read on every multi-node plan (whether or not a check needed it), never on a single node:
    # the field depends on the inputs only, not on what touched the facts first.
    version = None
    if facts.config is not None and facts.multi_node and facts.nccl_versions:
        version = str(facts.nccl_versions[0])
    return NcclPlan(
        changes=tuple(changes),
        findings=tuple(findings),
        notes=tuple(notes),
        multi_node=facts.multi_node,
        cluster_interface=cluster.name if cluster is not None else None,
        nccl_version=version,
    )


def _same_upper(value: str) -> Callable[[str], bool]:
    return lambda user: user.strip().upper() == value


def _where(origin: str) -> str:
    return "in the environment" if origin == ENVIRONMENT else f"in {origin}"


def _decide(
    facts: Facts,
    proposals: list[Proposal],
    flagged: list[tuple[str, Finding]],
    *,
    override: bool,
) -> list[EnvChange]:
    problems: dict[str, list[Finding]] = {}
    for name, finding in flagged:
        if finding.severity != "info":
            problems.setdefault(name, []).append(finding)
    order = {name: i for i, name in enumerate(PLANNED_VARIABLES)}
    changes: list[EnvChange] = []
    for proposal in sorted(proposals, key=lambda p: order.get(p.name, len(order))):
        name = proposal.name
        found = facts.user_value(name)
        if found is None:
            reason = "; ".join(r for r in (proposal.reason, proposal.unset_note) if r)
            changes.append(EnvChange(name, proposal.value, None, "set", reason))
            continue
        value, origin = found
        if proposal.same(value):
            changes.append(EnvChange(
                name, value, value, "keep",
                f"already set {_where(origin)}, with the same effect as {proposal.value!r}",
                origin, proposal.value,
            ))
        elif override:
            harm = problems.get(name, [])
            why = "; ".join(f.title for f in harm) or "it differs from the evidenced value"
            changes.append(EnvChange(
                name, proposal.value, value, "override",
                f"you asked to override the value set {_where(origin)}: {why}; "
                f"{proposal.value!r}: {proposal.reason}",
                origin,
            ))
        else:
            harm = problems.get(name, [])
            why = "; ".join(f.title for f in harm) or proposal.reason
            changes.append(EnvChange(
                name, value, value, "keep",
                f"set by you {_where(origin)}; clusterenv would set {proposal.value!r}: {why}",
                origin, proposal.value, bool(harm),
            ))
    decided = {c.name for c in changes}
    for name, harm in problems.items():
        if name in decided:
            continue
        found = facts.user_value(name)
        if found is None:  # a finding about an unset variable (none today); nothing to keep
            continue
        value, origin = found
        changes.append(EnvChange(
            name, value, value, "keep",
            f"set by you {_where(origin)}; clusterenv never changes it: "
            + "; ".join(f.title for f in harm),
            origin, None, True,
        ))
    return changes


def _torch_distributed_initialised() -> bool:
    """Whether ``torch.distributed`` is imported and a default process group exists.

    Looks in ``sys.modules`` only: importing torch here would cost seconds.
    """
    module = sys.modules.get("torch.distributed")
    is_initialized = getattr(module, "is_initialized", None)
    if not callable(is_initialized):
        return False
    try:
        return bool(is_initialized())
    except Exception:  # an odd torch build must not break apply
        return False


def apply_nccl_defaults(
    environ: MutableMapping[str, str] | None = None,
    *,
    override: bool = False,
    debug: bool = False,
    root: str | os.PathLike[str] = "/",
    nccl_version: str | None = None,
    strict: bool = False,
) -> NcclPlan:
    """Apply :func:`plan_nccl_env` to ``environ`` (default ``os.environ``) and return the plan.

    Sets only unset, evidenced variables; keeps the user's values unless ``override=True``.
    Idempotent: applying twice changes nothing the second time. Call it before
    ``torch.distributed.init_process_group()``: NCCL and Gloo read these variables when a
    process group is created.

    Args:
        environ: The mapping to change; None changes ``os.environ``.
        override: Replace user values that differ from the evidenced ones.
        debug: Also set ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS=INIT,NET`` when unset.
        root: ``/`` or a host snapshot.
        nccl_version: Assume this NCCL version (e.g. ``"2.19.3"``) instead of detecting it.
        strict: Raise ``ConfigError`` on an invalid contract instead of warning.

    Returns:
        The plan that was applied.

    Raises:
        ConfigError: With ``strict=True``, when the cluster environment is invalid (nothing is
            changed then).

    Warns:
        ClusterEnvWarning: When the cluster environment is invalid (nothing is planned), for
            each kept user value known to be harmful, and when ``torch.distributed`` is already
            initialised (the changes come too late for it).
    """
    target: MutableMapping[str, str] = os.environ if environ is None else environ
    facts = Facts(environ=target, root=as_root(root), nccl_version=nccl_version)
    _judge_contract(facts, strict=strict, stacklevel=3)
    plan = plan_from_facts(facts, debug=debug, override=override)
    if plan.env and _torch_distributed_initialised():
        warnings.warn(
            "torch.distributed is already initialised: NCCL and Gloo read these variables when "
            "a process group is created, so only groups created from now on see "
            f"{', '.join(plan.env)}; call apply_nccl_defaults() before init_process_group()",
            ClusterEnvWarning,
            stacklevel=2,
        )
    for change in plan.changes:
        if change.action != "keep":
            target[change.name] = change.value
        elif change.harmful:
            warnings.warn(
                f"{change.name}={change.value!r} kept ({_where(change.origin or ENVIRONMENT)}) "
                f"although it is known to be harmful: {change.reason}",
                ClusterEnvWarning,
                stacklevel=2,
            )
    return plan
