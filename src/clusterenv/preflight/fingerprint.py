"""What one node tells the primary about itself: the fingerprint, built and checked.

A :class:`Fingerprint` is built from the same detectors as ``show`` and ``doctor`` (the cluster
contract, the cluster interface, the RDMA devices, the GPUs, the local findings); nothing here
reads sysfs on its own. On the wire it is a JSON object with a schema version; the primary checks
every field's type and size (:meth:`Fingerprint.from_wire`) before it compares anything, so a
hostile or broken peer is refused with a message that names the field.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clusterenv._jsonable import json_fields
from clusterenv._root import Root, as_root
from clusterenv._scrub import is_secret_name as _is_secret_name
from clusterenv._scrub import scrub_value
from clusterenv._text import clip
from clusterenv.findings import Finding
from clusterenv.preflight.digest import digest_form
from clusterenv.preflight.runtime import NcclRuntime, collect_runtime
from clusterenv.preflight.wire import WireError, short_texts

if TYPE_CHECKING:
    from clusterenv._facts import Facts

__all__ = [
    "ENV_EXACT",
    "ENV_PREFIXES",
    "FINGERPRINT_SCHEMA",
    "TOKEN_VARIABLE",
    "Fingerprint",
    "NcclRuntime",
    "RdmaSummary",
    "collect_fingerprint",
    "compared_environment",
    "is_secret_name",
]

#: Version of the fingerprint's JSON layout; a node with another schema is refused by name.
FINGERPRINT_SCHEMA = 2
#: The shared secret that authenticates fingerprints and verdicts when set on every node.
TOKEN_VARIABLE = "CLUSTERENV_PREFLIGHT_TOKEN"  # noqa: S105  # a variable name, not a secret
#: Variables compared across nodes: everything with these prefixes …
ENV_PREFIXES: tuple[str, ...] = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_")
#: … and these names.
ENV_EXACT: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES", "TP_SOCKET_IFNAME")

_MAX_TEXT = 512
_MAX_VALUE = 4096
_MAX_ENV = 256
_MAX_ITEMS = 64
_MAX_INT = 1 << 31


def is_secret_name(name: str) -> bool:
    """Whether a variable name looks like it holds a secret (``TOKEN``, ``KEY``, ``SECRET``,
    ``PASS``, ``PSK``, …; the same rule as a host snapshot's); such variables are never sent,
    e.g. ``is_secret_name("NCCL_IB_KEY")`` is True, ``is_secret_name("NCCL_IB_PKEY")`` False."""
    return _is_secret_name(name)


def compared_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a fingerprint carries, sorted, secrets left out and URL credentials
    replaced (``https://***@host/…``). A name or value too long for a fingerprint is sent as
    a prefix and a digest (:mod:`clusterenv.preflight.digest`), compared by the digest.

    Example: ``{"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_SOCKET_IFNAME": "ens1"}``.
    """
    chosen = {
        digest_form(name, _MAX_TEXT // 2): digest_form(scrub_value(value), _MAX_VALUE)
        for name, value in environ.items()
        if (name.startswith(ENV_PREFIXES) or name in ENV_EXACT) and not is_secret_name(name)
    }
    return dict(sorted(chosen.items())[:_MAX_ENV])


@dataclass(frozen=True, slots=True)
class RdmaSummary:
    """The RDMA facts that must agree across nodes.

    Attributes:
        transport: ``"infiniband"``, ``"roce"``, ``"efa"``, ``"mixed"``, or None (TCP only).
        devices: Usable devices, e.g. ``("mlx5_0", "mlx5_1")``.
        ports: Number of usable ACTIVE ports, e.g. ``8``.
        rates_gbps: Rates of those ports, sorted, e.g. ``(400.0, 400.0)``.
        inactive: Ports of RDMA devices that are not ACTIVE, with the physical state and the
            likely cause, e.g. ``("mlx5_3 port 1 DOWN (Polling): no link partner: …",)``.
        gids: The kinds of GID NCCL will use on the RoCE ports ``NCCL_IB_HCA`` lists, e.g.
            ``("RoCE v2 IPv4",)``; ``("RoCE v2 IPv6 link-local",)`` on a node that cannot reach
            the others; empty without RoCE.
    """

    transport: str | None = None
    devices: tuple[str, ...] = ()
    ports: int = 0
    rates_gbps: tuple[float, ...] = ()
    inactive: tuple[str, ...] = ()
    gids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """One node's facts, as sent to the primary.

    Attributes:
        rank: ``NODE_RANK`` as read (even when invalid), e.g. ``1``; None when unreadable.
        num_nodes: ``NUM_NODES``, e.g. ``4``.
        num_trainers: ``NUM_TRAINERS``, e.g. ``8``.
        node_addr: ``NODE_ADDR``, e.g. ``"10.65.0.3"``.
        primary_addr: ``PRIMARY_ADDR``/``MASTER_ADDR``, e.g. ``"10.65.0.2"``.
        primary_port: ``PRIMARY_PORT``/``MASTER_PORT``, e.g. ``29500``.
        source: Which environment source matched, e.g. ``"runpod"``.
        hostname: e.g. ``"node-1"``.
        interface: The cluster interface, e.g. ``"ens1"``; None when none was found.
        interface_reason: Why, e.g. ``"ens1 holds NODE_ADDR 10.65.0.3"``.
        mtu: The cluster interface's MTU, e.g. ``9000``.
        rdma: The RDMA summary.
        gpus: GPUs this node can see, e.g. ``8``; None without a visible NVIDIA driver.
        env: The compared variables (:func:`compared_environment`).
        local_errors: Error findings of this node's own checks (``doctor``).
        versions: e.g. ``{"torch": "2.4.1", "nccl": "2.21.5", "python": "3.11.9"}``.
        token: Whether ``CLUSTERENV_PREFLIGHT_TOKEN`` is set here (never its value).
        clusterenv: The clusterenv version, e.g. ``"0.1.0"``.
        runtime: What NCCL will load and use here (:class:`NcclRuntime`): the library and its
            own version, the network plugin, the RDMA ports NCCL selects, GPU models, driver,
            ``/dev/shm``, memlock, ``RUNPOD_DC_ID``.
        trimmed: What was left out or shortened to fit the message limit, e.g. ``("fitted to
            the 65024-byte message limit (81913 bytes): 20 values sent as a prefix and a
            digest (compared by the digest)",)``; empty when nothing was.
    """

    rank: int | None
    num_nodes: int | None
    num_trainers: int | None
    node_addr: str | None = None
    primary_addr: str | None = None
    primary_port: int | None = None
    source: str = "unknown"
    hostname: str | None = None
    interface: str | None = None
    interface_reason: str = ""
    mtu: int | None = None
    rdma: RdmaSummary = field(default_factory=RdmaSummary)
    gpus: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    local_errors: tuple[Finding, ...] = ()
    versions: Mapping[str, str] = field(default_factory=dict)
    token: bool = False
    clusterenv: str = ""
    runtime: NcclRuntime = field(default_factory=NcclRuntime)
    trimmed: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        """The JSON object sent on the wire, with ``schema``."""
        data = self.to_dict()
        data["schema"] = FINGERPRINT_SCHEMA
        return data

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Fingerprint:
        """Check and convert a received object.

        Raises:
            WireError: Naming the first field of the wrong type or size, e.g.
                ``"fingerprint field 'rank' must be an integer or null, got str"``.
        """
        schema = data.get("schema")
        if schema != FINGERPRINT_SCHEMA:
            raise WireError(
                f"fingerprint schema {clip(repr(schema), 40)}, the primary reads schema "
                f"{FINGERPRINT_SCHEMA}: "
                "run the same clusterenv release on every node"
            )
        rdma = _obj(data, "rdma")
        return cls(
            rank=_int(data, "rank"),
            num_nodes=_int(data, "num_nodes"),
            num_trainers=_int(data, "num_trainers"),
            node_addr=_text(data, "node_addr"),
            primary_addr=_text(data, "primary_addr"),
            primary_port=_int(data, "primary_port"),
            source=_text(data, "source") or "unknown",
            hostname=_text(data, "hostname"),
            interface=_text(data, "interface"),
            interface_reason=_text(data, "interface_reason") or "",
            mtu=_int(data, "mtu"),
            rdma=RdmaSummary(
                transport=_text(rdma, "transport", "rdma."),
                devices=_texts(rdma, "devices", "rdma."),
                ports=_int(rdma, "ports", "rdma.") or 0,
                rates_gbps=_floats(rdma, "rates_gbps", "rdma."),
                inactive=_texts(rdma, "inactive", "rdma."),
                gids=_texts(rdma, "gids", "rdma."),
            ),
            gpus=_int(data, "gpus"),
            env=_strmap(data, "env", _MAX_ENV, _MAX_VALUE),
            local_errors=_findings(data, "local_errors"),
            versions=_strmap(data, "versions", 16, _MAX_TEXT),
            token=_bool(data, "token"),
            clusterenv=_text(data, "clusterenv") or "",
            runtime=NcclRuntime.from_wire(data.get("runtime")),
            trimmed=_texts(data, "trimmed")[:4],
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


# -- checking received fields -----------------------------------------------------------------


def _type_error(where: str, name: str, wanted: str, value: object) -> WireError:
    return WireError(
        f"fingerprint field '{where}{name}' must be {wanted}, got {type(value).__name__}"
    )


def _obj(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise _type_error("", name, "an object", value)
    return value


def _int(data: Mapping[str, Any], name: str, where: str = "") -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -_MAX_INT < value < _MAX_INT:
        raise _type_error(where, name, "an integer (|n| < 2**31) or null", value)
    return value


def _bool(data: Mapping[str, Any], name: str) -> bool:
    value = data.get(name, False)
    if not isinstance(value, bool):
        raise _type_error("", name, "true or false", value)
    return value


def _text(
    data: Mapping[str, Any], name: str, where: str = "", limit: int = _MAX_TEXT
) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _type_error(where, name, "a string or null", value)
    if len(value) > limit:
        raise WireError(f"fingerprint field '{where}{name}' is longer than {limit} characters")
    return value


def _list(data: Mapping[str, Any], name: str, where: str) -> list[Any]:
    value = data.get(name, [])
    if not isinstance(value, list):
        raise _type_error(where, name, "a list", value)
    if len(value) > _MAX_ITEMS:
        raise WireError(f"fingerprint field '{where}{name}' has more than {_MAX_ITEMS} items")
    return value


def _texts(data: Mapping[str, Any], name: str, where: str = "") -> tuple[str, ...]:
    items = _list(data, name, where)
    if not short_texts(items, _MAX_TEXT):
        raise WireError(f"fingerprint field '{where}{name}' must hold short strings")
    return tuple(items)


def _floats(data: Mapping[str, Any], name: str, where: str = "") -> tuple[float, ...]:
    items = _list(data, name, where)
    if not _NUMBERS.issuperset(map(type, items)):  # a subclass (not bool) is a number too
        for item in items:
            if not isinstance(item, (int, float)) or isinstance(item, bool):
                raise WireError(f"fingerprint field '{where}{name}' must hold numbers")
    return tuple(map(float, items))


def _strmap(data: Mapping[str, Any], name: str, items: int, limit: int) -> dict[str, str]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise _type_error("", name, "an object", value)
    if len(value) > items:
        raise WireError(f"fingerprint field '{name}' has more than {items} entries")
    if not short_texts(value.values(), limit) or max(map(len, value), default=0) > _MAX_TEXT:
        raise WireError(f"fingerprint field '{name}' must map short names to strings")
    return dict(value)


_NUMBERS = frozenset({int, float})


def _findings(data: Mapping[str, Any], name: str) -> tuple[Finding, ...]:
    out = []
    for item in _list(data, name, ""):
        if not isinstance(item, dict):
            raise _type_error("", name, "a list of objects", item)
        where = f"{name}[]."
        out.append(
            Finding(
                code=_text(item, "code", where) or "unknown",
                severity="error",
                title=_text(item, "title", where, _MAX_VALUE) or "",
                evidence=_texts(item, "evidence", where)[:8],
                fix=_text(item, "fix", where, _MAX_VALUE) or "",
            )
        )
    return tuple(out)


# -- building one from this node -----------------------------------------------------------


def _raw_int(environ: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        text = environ.get(name, "").strip()
        if text.isascii() and text.isdigit() and len(text) <= 9:  # "²".isdigit(), int() refuses
            return int(text)
    return None


def _versions(facts: Facts) -> dict[str, str]:
    versions = {"python": platform.python_version()}
    if facts.root.is_live:
        from importlib import metadata  # noqa: PLC0415  # the scan is paid only here

        # The distribution's metadata: never `import torch` (seconds, and CUDA init). Absent or
        # a broken dist-info: unknown.
        with contextlib.suppress(Exception):
            versions["torch"] = metadata.version("torch")
    nccl = facts.nccl_versions
    if nccl:
        versions["nccl"] = str(nccl[0])
    return versions


def _gid_kinds(facts: Facts) -> tuple[str, ...]:
    """The kinds of GID NCCL will use on the listed RoCE ports (with the version's rule)."""
    from clusterenv.nccl.gid import choose_gid  # noqa: PLC0415  # only with RDMA devices
    from clusterenv.nccl.hca import select_hcas  # noqa: PLC0415
    from clusterenv.nccl.roce import settings_of, version_cases  # noqa: PLC0415

    if not facts.rdma.devices:
        return ()
    cases = version_cases(facts)
    version = cases[0].version if len(cases) == 1 else None  # unknown: 2.21 or later
    settings = settings_of(facts)
    kinds = {
        choice.kind
        for _, port in select_hcas(facts).selected
        if (choice := choose_gid(port, version=version, settings=settings)) is not None
    }
    return tuple(sorted(kinds))


def _inactive(facts: Facts) -> tuple[str, ...]:
    """``"mlx5_3 port 1 DOWN (Polling): <cause>"`` for every port that is not ACTIVE."""
    from clusterenv.diagnosis.rdma import port_state_cause  # noqa: PLC0415

    out = []
    for device in facts.rdma.devices:
        for port in device.ports:
            if not port.active:
                text = f"{device.name} port {port.number} {port.state} ({port.phys_state})"
                if port.state in ("INIT", "DOWN", "ARMED"):
                    text += f": {port_state_cause(device, port)[0]}"
                out.append(text[:_MAX_TEXT])
    return tuple(out)


def _rdma_summary(facts: Facts) -> RdmaSummary:
    info = facts.rdma
    ports = info.usable_ports
    inactive = _inactive(facts)
    return RdmaSummary(
        transport=info.transport,
        devices=tuple(d.name for d in info.usable_devices)[:_MAX_ITEMS],
        ports=len(ports),
        rates_gbps=tuple(sorted(p.rate_gbps for _, p in ports if p.rate_gbps is not None))[
            :_MAX_ITEMS
        ],
        inactive=inactive[:_MAX_ITEMS],
        gids=_gid_kinds(facts)[:_MAX_ITEMS],
    )


def _gpu_count(facts: Facts) -> int | None:
    host = facts.host
    if host.driver_version is None and host.gpus_installed == 0:
        return None  # no NVIDIA driver visible: not "zero GPUs"
    return host.gpus


def _nccl_environment(facts: Facts) -> dict[str, str]:
    """The environment NCCL sees: ``NCCL_*`` settings from its config files where the
    environment does not set them (NCCL reads those files too)."""
    merged = dict(facts.environ)
    for name, (value, _) in facts.nccl_conf.items():
        merged.setdefault(name, value)
    return merged


def _collect(environ: Mapping[str, str], root: Root) -> tuple[Fingerprint, Facts]:
    from clusterenv import __version__  # noqa: PLC0415
    from clusterenv.diagnosis import diagnose_with_plan  # noqa: PLC0415  # the check catalogue

    # On the live host NCCL itself is asked (one short subprocess): its own version, and the
    # library the loader finds, which the runtime summary compares across nodes.
    diagnosis = diagnose_with_plan(environ=environ, root=root, ask_nccl=root.is_live)
    findings, facts = list(diagnosis.findings), diagnosis.facts
    errors = [f for f in findings if f.severity == "error"][:_MAX_ITEMS]
    config = facts.config
    interface, reason = facts.cluster_choice
    rank: int | None
    nodes: int | None
    trainers: int | None
    node_addr: str | None
    primary: str | None
    port: int | None
    if config is not None:
        rank, nodes, trainers = config.node_rank, config.num_nodes, config.num_trainers
        node_addr, primary, port = config.node_addr, config.primary_addr, config.primary_port
    else:
        rank = _raw_int(environ, "NODE_RANK", "GROUP_RANK")
        nodes = _raw_int(environ, "NUM_NODES")
        trainers = _raw_int(environ, "NUM_TRAINERS", "LOCAL_WORLD_SIZE")
        node_addr = environ.get("NODE_ADDR") or None
        primary = environ.get("PRIMARY_ADDR") or environ.get("MASTER_ADDR") or None
        port = _raw_int(environ, "PRIMARY_PORT", "MASTER_PORT")
    fingerprint = Fingerprint(
        rank=rank,
        num_nodes=nodes,
        num_trainers=trainers,
        node_addr=(node_addr or "")[:_MAX_TEXT] or None,
        primary_addr=(primary or "")[:_MAX_TEXT] or None,
        primary_port=port,
        source=facts.source,
        hostname=(facts.hostname or "")[:_MAX_TEXT] or None,
        interface=interface.name if interface is not None else None,
        interface_reason=reason[:_MAX_TEXT],
        mtu=interface.mtu if interface is not None else None,
        rdma=_rdma_summary(facts),
        gpus=_gpu_count(facts),
        env=compared_environment(_nccl_environment(facts)),
        local_errors=tuple(
            Finding(f.code, "error", f.title[:_MAX_VALUE], f.evidence[:8], f.fix[:_MAX_VALUE])
            for f in errors
        ),
        versions=_versions(facts),
        token=bool(environ.get(TOKEN_VARIABLE)),
        clusterenv=__version__,
        runtime=collect_runtime(facts, diagnosis.bootstrap, _nccl_environment(facts)),
    )
    return fingerprint, facts


def collect_fingerprint(
    *, environ: Mapping[str, str] | None = None, root: str | os.PathLike[str] = "/"
) -> Fingerprint:
    """Detect this node's fingerprint.

    Args:
        environ: The environment to read; None reads ``os.environ`` at call time.
        root: ``/`` or a host snapshot.

    Returns:
        e.g. ``Fingerprint(rank=1, num_nodes=2, num_trainers=8, node_addr="10.65.0.3", …,
        interface="ens1", mtu=9000, …)``. An invalid environment still gives a fingerprint (with
        the values as read and the problems in ``local_errors``), so the primary can name it.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    return _collect(env, as_root(root))[0]
