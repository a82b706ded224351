"""A worker started by DeepSpeed's launcher (``deepspeed``, ``deepspeed.launcher.launch``).

Each worker gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` and,
under DeepSpeed's own names, ``LOCAL_SIZE`` (processes on this node), ``CROSS_RANK`` (this
node's index) and ``CROSS_SIZE`` (the node count). There is no ``LOCAL_WORLD_SIZE`` or
``GROUP_RANK``. Its MPICH and Intel MPI runners export ``LOCAL_SIZE`` but no ``CROSS_*``: the
node index is then ``RANK // LOCAL_SIZE`` (checked against ``LOCAL_RANK``). DeepSpeed computes
``LOCAL_RANK = RANK % LOCAL_SIZE``, which is only right when every host has the same number of
slots, so an uneven hostfile is refused with the variables that show it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._root import Root
from clusterenv.sources._base import MAX_NODES, EnvReader, NodeFacts, Reading, Source
from clusterenv.sources._process import Named, finish_worker

__all__ = ["DeepSpeedSource"]

_DEEPSPEED = ("LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")


def _named(name: str, value: int | None) -> Named | None:
    return None if value is None else Named(name, value)


class DeepSpeedSource(Source):
    """A DeepSpeed launcher worker (``RANK``, ``LOCAL_RANK`` and ``LOCAL_SIZE``/``CROSS_*``)."""

    name: ClassVar[str] = "deepspeed"
    level: ClassVar[str] = "process"
    launcher: ClassVar[str] = "the deepspeed launcher"
    markers: ClassVar[tuple[str, ...]] = ("RANK", "LOCAL_RANK", *_DEEPSPEED)
    #: DeepSpeed's own names (``deepspeed/launcher/launch.py``; its MPICH and Intel MPI runners
    #: pass ``LOCAL_SIZE`` with ``-genv``).
    identifying: ClassVar[tuple[str, ...]] = _DEEPSPEED

    def matches(self, environ: Mapping[str, str]) -> bool:
        """Both ranks and at least one of DeepSpeed's own names are set."""
        return (
            bool(environ.get("RANK"))
            and bool(environ.get("LOCAL_RANK"))
            and any(environ.get(n) for n in _DEEPSPEED)
        )

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the worker's variables under DeepSpeed's names."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        fields["primary_addr"] = env.primary(
            "MASTER_ADDR",
            required=True,
            what="the rendezvous address the deepspeed launcher gave this process",
        )
        fields["primary_port"] = env.port("MASTER_PORT", required=True)
        fields["node_addr"] = env.ip(
            "NODE_ADDR",
            required=False,
            what="this node's cluster address",
        )
        counts = {
            "RANK": ("this process's global rank", 0),
            "LOCAL_RANK": ("this process's rank on its node", 0),
            "WORLD_SIZE": ("the number of processes in the job", 1),
            "LOCAL_SIZE": ("the number of processes on this node", 1),
            "CROSS_RANK": ("this node's index", 0),
            "CROSS_SIZE": ("the number of nodes", 1),
        }
        values: dict[str, Named | None] = {}
        for name, (what, minimum) in counts.items():
            value = env.integer(  # the MPI runners export no CROSS_*: derived from the ranks
                name, required=not name.startswith("CROSS_"), what=what, example=f"<{what}>",
                minimum=minimum, maximum=MAX_NODES if name == "CROSS_SIZE" else None,
            )
            values[name] = _named(name, value)
        finish_worker(
            env,
            launcher=self.launcher,
            rank=values["RANK"],
            local_rank=values["LOCAL_RANK"],
            world=values["WORLD_SIZE"],
            local_world=values["LOCAL_SIZE"],
            node_rank=values["CROSS_RANK"],
            num_nodes=values["CROSS_SIZE"],
        )
        return reading
