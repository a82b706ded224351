"""The local default: nothing set, one node on this machine (a laptop, a single GPU box)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._gpus import visible_gpu_count
from clusterenv._root import Root
from clusterenv.sources._base import DEFAULT_PORT, NodeFacts, Reading, Source

__all__ = ["LOCAL_PRIMARY", "LocalSource"]

#: Where a single-node job rendezvouses when nothing says otherwise.
LOCAL_PRIMARY = "127.0.0.1"


class LocalSource(Source):
    """One node, rank 0, primary ``127.0.0.1:29500``, one process per visible GPU (else 1)."""

    name: ClassVar[str] = "local"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """Always: the last resort."""
        return True

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """The local default; never a problem."""
        trainers = visible_gpu_count(environ, root) or 1
        return Reading(
            fields={
                "primary_addr": LOCAL_PRIMARY,
                "primary_port": DEFAULT_PORT,
                "node_addr": None,
                "node_rank": 0,
                "num_nodes": 1,
                "num_trainers": trainers,
            }
        )
