"""Environment sources, tried in a fixed order (see :data:`SOURCES`)."""

from __future__ import annotations

from clusterenv.sources._base import Reading, Source
from clusterenv.sources.generic import GenericSource
from clusterenv.sources.local import LocalSource
from clusterenv.sources.runpod import RunpodSource
from clusterenv.sources.torchelastic import TorchElasticSource

__all__ = ["SOURCES", "SOURCE_NAMES", "Reading", "Source", "source_named"]

#: The order sources are tried in. A torchrun worker comes first: its variables describe the
#: process group and it may run on any provider (torchrun sets its own MASTER_* and WORLD_SIZE
#: over the provider's). Runpod comes before generic because Runpod also sets MASTER_*, and its
#: own variables (NODE_ADDR, NUM_TRAINERS, ...) are more specific. Local is the last resort.
SOURCES: tuple[Source, ...] = (
    TorchElasticSource(),
    RunpodSource(),
    GenericSource(),
    LocalSource(),
)
#: The names accepted by ``ClusterConfig.from_env(source=...)``.
SOURCE_NAMES: tuple[str, ...] = tuple(s.name for s in SOURCES)


def source_named(name: str) -> Source | None:
    """The source called ``name``, or None."""
    for source in SOURCES:
        if source.name == name:
            return source
    return None
