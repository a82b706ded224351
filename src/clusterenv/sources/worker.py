"""Workers of launchers that follow torch's ``env://`` contract without being torchrun.

- ``worker``: any process with ``RANK`` and ``LOCAL_RANK`` set (and no
  ``TORCHELASTIC_RUN_ID``; ``WORLD_SIZE`` is then required): submitit's ``export()``,
  hand-written launch scripts.
- ``ray``: a Ray Train worker (``ACCELERATE_TORCH_DEVICE`` next to the full set, plus
  ``NODE_RANK`` and ``LOCAL_WORLD_SIZE``); Ray sets the variables inside the actor.
- ``azureml``: an Azure Machine Learning ``pytorch`` distribution job (``AZUREML_*``), which
  starts the processes itself and sets ``NODE_RANK`` but no ``LOCAL_WORLD_SIZE``.

Ray and Azure ML set ``NODE_RANK`` themselves; for a plain worker ``NODE_RANK`` may be an outer
provider's (Runpod's) and is only cross-checked. When ``LOCAL_WORLD_SIZE`` is missing it is
derived only from what the environment proves: ``(RANK - LOCAL_RANK) / NODE_RANK`` on a node
other than the first (Ray, Azure ML), ``WORLD_SIZE`` divided by the hosts of Azure Batch's
``AZ_BATCH_HOST_LIST`` (Azure ML multi-node), or ``WORLD_SIZE`` itself when ``MASTER_ADDR`` is
a loopback address (a single machine); otherwise it is a problem whose fix is a placeholder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._root import Root
from clusterenv._values import is_loopback_host, parse_decimal, parse_host
from clusterenv.sources._base import EnvReader, NodeFacts, Reading, Source
from clusterenv.sources._process import Named
from clusterenv.sources.torchelastic import read_env_worker

__all__ = ["AzureMLSource", "RaySource", "WorkerSource"]

_FULL_SET = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


def _has_full_set(environ: Mapping[str, str]) -> bool:
    return all(environ.get(name) for name in _FULL_SET)


def _derived_local_world(environ: Mapping[str, str], node_rank: str | None) -> Named | None:
    """``LOCAL_WORLD_SIZE`` from values that prove it, or None."""
    rank, local, world = (parse_decimal(environ.get(n))
                          for n in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    node = parse_decimal(environ.get(node_rank)) if node_rank else None
    if rank is not None and local is not None and node and rank >= local:
        span, rest = divmod(rank - local, node)
        if not rest and span > 0:
            return Named("(RANK - LOCAL_RANK) / NODE_RANK", span)
    hosts = environ.get("AZ_BATCH_HOST_LIST") or ""
    if node_rank and world is not None and hosts.strip():
        count = len([h for h in hosts.split(",") if h.strip()])
        if count and not world % count:
            return Named("WORLD_SIZE / (hosts in AZ_BATCH_HOST_LIST)", world // count)
    master = parse_host(environ.get("MASTER_ADDR") or "")
    if world is not None and world > 0 and master is not None and is_loopback_host(master):
        return Named("WORLD_SIZE (MASTER_ADDR is loopback: one machine)", world)
    return None


class WorkerSource(Source):
    """A process with ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` set by some launcher."""

    name: ClassVar[str] = "worker"
    level: ClassVar[str] = "process"
    launcher: ClassVar[str] = "the launcher"
    markers: ClassVar[tuple[str, ...]] = _FULL_SET
    #: The variable holding the node index that this launcher itself sets, if any.
    node_rank_variable: ClassVar[str | None] = None

    def matches(self, environ: Mapping[str, str]) -> bool:
        """``RANK`` and ``LOCAL_RANK`` are set: a launched process, even when the launcher
        forgot ``WORLD_SIZE`` (then reported missing, as torch's ``env://`` would fail)."""
        return bool(environ.get("RANK")) and bool(environ.get("LOCAL_RANK"))

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the ``env://`` variables, and the launcher's own node index where it has one."""
        reading = Reading()
        env = EnvReader(environ, reading)
        derived = _derived_local_world(environ, self.node_rank_variable)
        read_env_worker(env, self.launcher, local_world_default=derived)
        if self.node_rank_variable is not None:
            _node_rank_from(env, self.node_rank_variable)
        return reading


def _node_rank_from(env: EnvReader, name: str) -> None:
    """Check the launcher's node index against the one derived from the ranks."""
    if env.get(name) is None or env.any_set("GROUP_RANK") or env.reading.problems:
        return
    given = env.integer(name, required=False, what="this node's index", example="<node index>")
    derived = env.reading.fields.get("node_rank")
    if given is not None and derived is not None and given != derived:
        env.problem(
            (name, "RANK", "LOCAL_WORLD_SIZE"),
            f"{name}={given} but RANK // LOCAL_WORLD_SIZE = {derived}: the launcher's node "
            "index does not match the ranks it gave",
            f"let the launcher set {name}, RANK and LOCAL_WORLD_SIZE; do not export them by hand",
            "config-rank-layout",
        )


class RaySource(WorkerSource):
    """A Ray Train worker (``ACCELERATE_TORCH_DEVICE`` next to the ``env://`` set)."""

    name: ClassVar[str] = "ray"
    launcher: ClassVar[str] = "Ray Train"
    node_rank_variable: ClassVar[str | None] = "NODE_RANK"
    markers: ClassVar[tuple[str, ...]] = ("ACCELERATE_TORCH_DEVICE", *_FULL_SET, "NODE_RANK")

    def matches(self, environ: Mapping[str, str]) -> bool:
        """The full set plus ``ACCELERATE_TORCH_DEVICE`` and ``NODE_RANK`` (Ray sets both)."""
        return (
            _has_full_set(environ)
            and bool(environ.get("ACCELERATE_TORCH_DEVICE"))
            and bool(environ.get("NODE_RANK"))
        )


class AzureMLSource(WorkerSource):
    """An Azure Machine Learning ``pytorch`` distribution process (``AZUREML_*``)."""

    name: ClassVar[str] = "azureml"
    launcher: ClassVar[str] = "Azure ML"
    node_rank_variable: ClassVar[str | None] = "NODE_RANK"
    markers: ClassVar[tuple[str, ...]] = ("AZUREML_EXPERIMENT_ID", "AZUREML_RUN_ID", *_FULL_SET)

    def matches(self, environ: Mapping[str, str]) -> bool:
        """An ``AZUREML_*`` job id next to the full ``env://`` set."""
        return _has_full_set(environ) and any(
            environ.get(n) for n in ("AZUREML_EXPERIMENT_ID", "AZUREML_RUN_ID")
        )
