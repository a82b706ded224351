"""Environment sources, tried in a fixed order (see :data:`SOURCES`).

The innermost launcher wins. Variables are inherited downwards (scheduler, then node launcher,
then worker), so a worker sees every layer that started it, and the layer that created the
process is the one that describes it: a torchrun worker inside ``srun`` still sees ``SLURM_*``
values that describe the srun task (one per node), not the worker. Process-level sources come
first, most specific marker first; node-level platforms after them; ``generic`` and ``local``
last. The outer, node-level source that also matches is kept as evidence
(:func:`outer_facts`) and contradictions become findings.
"""

from __future__ import annotations

from clusterenv.sources._base import NodeFacts, Reading, Source
from clusterenv.sources.registry import (
    SOURCE_NAMES,
    SOURCES,
    detect_source,
    outer_facts,
    source_named,
)

__all__ = [
    "SOURCES",
    "SOURCE_NAMES",
    "NodeFacts",
    "Reading",
    "Source",
    "detect_source",
    "outer_facts",
    "source_named",
]
