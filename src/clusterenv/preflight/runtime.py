"""What NCCL will load and use on this node, for the cross-node comparison.

Most one-node-differs hangs are not in the environment variables: a different ``libnccl.so.2``
behind ``LD_LIBRARY_PATH``, a network plugin on part of the nodes, an RDMA card that is in
sysfs but cannot be opened in one container, another GPU model or driver, a small ``/dev/shm``,
a pod in another data centre. :class:`NcclRuntime` carries those facts, resolved as NCCL and the
loader resolve them (:mod:`clusterenv.nccl.plugin`): the library that would load and its own
``ncclGetVersion``, the network plugin and the interface version NCCL would use, the RDMA ports
NCCL would select, the GPU models, the driver, ``/dev/shm``, memlock and Runpod's
``RUNPOD_DC_ID``. The primary compares each (:mod:`clusterenv.preflight.compare`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clusterenv._jsonable import json_fields
from clusterenv.preflight.wire import WireError, short_texts

if TYPE_CHECKING:
    from clusterenv._facts import Facts
    from clusterenv.nccl.bootstrap import NcclBootstrap

__all__ = ["NcclRuntime", "collect_runtime"]

_TEXT = 512
_ITEMS = 64


@dataclass(frozen=True, slots=True)
class NcclRuntime:
    """What NCCL will load and use on one node.

    Attributes:
        library: The ``libnccl.so.2`` a job here would load, e.g.
            ``"/opt/nccl/lib/libnccl.so.2"``; None when none is found (or not asked).
        library_source: How the loader finds it, e.g. ``"LD_LIBRARY_PATH"``.
        version: That library's own ``ncclGetVersion``, e.g. ``"2.21.5"``; None unknown.
        net_plugin: The network plugin NCCL would load, e.g. ``"/opt/ofi/lib/libnccl-net.so"``;
            None: NCCL's own IB and socket transports.
        net_plugin_interface: e.g. ``"ncclNetPlugin_v8"``.
        net_plugin_note: How the plugin was resolved (or why none), with whose rules.
        hcas: The RDMA ports NCCL would select (ACTIVE, openable in this container, and
            listed by ``NCCL_IB_HCA`` when set), e.g. ``("mlx5_0:1", "mlx5_1:1")``.
        gpu_models: e.g. ``("NVIDIA H100 80GB HBM3",)``.
        driver: The NVIDIA driver version, e.g. ``"550.54.15"``.
        shm_bytes: Size of ``/dev/shm``, e.g. ``68719476736``.
        memlock: The memlock soft limit, ``"unlimited"`` or bytes as text; None unknown.
        datacenter: Runpod's ``RUNPOD_DC_ID``, e.g. ``"US-TX-3"``; None elsewhere.
    """

    library: str | None = None
    library_source: str | None = None
    version: str | None = None
    net_plugin: str | None = None
    net_plugin_interface: str | None = None
    net_plugin_note: str = ""
    hcas: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()
    driver: str | None = None
    shm_bytes: int | None = None
    memlock: str | None = None
    datacenter: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above."""
        return json_fields(self)

    @classmethod
    def from_wire(cls, data: object) -> NcclRuntime:
        """Check and convert the ``runtime`` object of a received fingerprint.

        Raises:
            WireError: Naming the first field of the wrong type or size.
        """
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise WireError("fingerprint field 'runtime' must be an object")
        shm = data.get("shm_bytes")
        if shm is not None and (isinstance(shm, bool) or not isinstance(shm, int)
                                or not 0 <= shm < 1 << 62):
            raise WireError("fingerprint field 'runtime.shm_bytes' must be a byte count")
        return cls(
            library=_text(data, "library"), library_source=_text(data, "library_source"),
            version=_text(data, "version"), net_plugin=_text(data, "net_plugin"),
            net_plugin_interface=_text(data, "net_plugin_interface"),
            net_plugin_note=_text(data, "net_plugin_note") or "", hcas=_texts(data, "hcas"),
            gpu_models=_texts(data, "gpu_models"), driver=_text(data, "driver"), shm_bytes=shm,
            memlock=_text(data, "memlock"), datacenter=_text(data, "datacenter"),
        )


def _text(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and (not isinstance(value, str) or len(value) > _TEXT):
        raise WireError(f"fingerprint field 'runtime.{name}' must be a short string")
    return value


def _texts(data: dict[str, Any], name: str) -> tuple[str, ...]:
    value = data.get(name, [])
    if isinstance(value, list) and len(value) <= _ITEMS and short_texts(value, _TEXT):
        return tuple(value)
    raise WireError(f"fingerprint field 'runtime.{name}' must hold short strings")


def _selected_ports(facts: Facts) -> tuple[str, ...]:
    """The ports NCCL's IB transport would use: ACTIVE and openable here, filtered by
    ``NCCL_IB_HCA`` when it is set (NCCL's own filter language)."""
    from clusterenv.filters.language import parse_filter  # noqa: PLC0415

    pairs = [(d.name, p.number) for d, p in facts.rdma.usable_ports]
    user = facts.user_value("NCCL_IB_HCA")
    value = user[0] if user is not None else None
    if value:
        chosen = parse_filter(value, variable="NCCL_IB_HCA")
        if chosen is not None:
            pairs = list(chosen.select_ports(pairs))
    return tuple(f"{d}:{p}" for d, p in pairs)[:_ITEMS]


def _memlock(facts: Facts) -> str | None:
    host = facts.host
    if not host.memlock_known:
        return None
    return "unlimited" if host.memlock_soft is None else str(host.memlock_soft)


def collect_runtime(
    facts: Facts, bootstrap: NcclBootstrap | None, environ: Mapping[str, str]
) -> NcclRuntime:
    """This node's :class:`NcclRuntime` from a diagnosis already made (with NCCL asked, on the
    live host: ``bootstrap`` holds the library and ``facts.nccl_versions`` its own version
    first); ``environ`` is the environment NCCL sees, its config files merged in."""
    from clusterenv.nccl.plugin import resolve_net_plugin  # noqa: PLC0415  # reads ELF files

    library = bootstrap.library if bootstrap is not None else None
    reported = [v for v in facts.nccl_versions if v.source.endswith("(ncclGetVersion)")]
    version = reported[0].version if reported else None
    plugin = None
    if library is not None:
        plugin = resolve_net_plugin(environ, version=version, library=library.path)
    host = facts.host
    return NcclRuntime(
        library=library.path[:_TEXT] if library else None,
        library_source=library.source if library else None,
        version=".".join(map(str, version)) if version else None,
        net_plugin=plugin.path[:_TEXT] if plugin and plugin.path else None,
        net_plugin_interface=plugin.interface if plugin else None,
        net_plugin_note=(f"{plugin.note} ({plugin.rules})" if plugin else "")[:_TEXT],
        hcas=_selected_ports(facts),
        gpu_models=tuple(m[:_TEXT] for m in host.gpu_models)[:_ITEMS],
        driver=(host.driver_version or "")[:_TEXT] or None,
        shm_bytes=host.shm_bytes,
        memlock=_memlock(facts),
        datacenter=(facts.environ.get("RUNPOD_DC_ID") or "")[:_TEXT] or None,
    )
