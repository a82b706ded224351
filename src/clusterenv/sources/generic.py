"""A generic ``MASTER_ADDR``/``MASTER_PORT`` setup (a scheduler, a script, Kubeflow's ``PET_*``).

Reads ``MASTER_ADDR`` (required; or torchrun's ``PET_MASTER_ADDR``), ``MASTER_PORT`` (or
``PET_MASTER_PORT``; default 29500, torchrun's), ``NODE_RANK`` (default 0), ``NUM_NODES`` and
``NUM_TRAINERS`` (or torchrun's ``PET_NNODES``, ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE``),
``WORLD_SIZE`` and ``NODE_ADDR`` when present.
Missing counts are derived: processes per node default to the visible GPUs (else 1), and the node
count to ``WORLD_SIZE`` divided by that when ``WORLD_SIZE`` is set, else 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._gpus import visible_gpu_count
from clusterenv._root import Root
from clusterenv._shell import export
from clusterenv.sources._base import (
    DEFAULT_PORT,
    MAX_NODES,
    EnvReader,
    NodeFacts,
    Reading,
    Source,
    plain_int,
)
from clusterenv.sources._node import torchrun_rendezvous_options

__all__ = ["GenericSource"]


class GenericSource(Source):
    """Any environment with ``MASTER_ADDR`` set (and no Runpod variables)."""

    name: ClassVar[str] = "generic"

    markers: ClassVar[tuple[str, ...]] = ("MASTER_ADDR",)
    #: torchrun's own rendezvous address and a node count above one, given as variables
    #: (``PET_MASTER_ADDR``, ``PET_NNODES``): a node set up for a multi-node torchrun.
    identifying: ClassVar[tuple[str, ...]] = ("PET_MASTER_ADDR", "PET_NNODES")
    setter: ClassVar[str] = "a torchrun setup"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """``MASTER_ADDR`` is set."""
        return bool(environ.get("MASTER_ADDR"))

    def evidence(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """``PET_MASTER_ADDR``, or a ``PET_NNODES`` of more than one node."""
        return torchrun_rendezvous_options(environ, self.identifying)

    def node_facts(self, environ: Mapping[str, str]) -> NodeFacts | None:
        """``NODE_RANK``, ``NUM_NODES``, ``NUM_TRAINERS`` (or their ``PET_*`` spellings) as
        evidence; ``MASTER_ADDR`` is not, since every launcher rewrites it."""
        facts = NodeFacts(
            self.name,
            node_rank=plain_int(environ, "NODE_RANK", "PET_NODE_RANK"),
            num_nodes=plain_int(environ, "NUM_NODES", "PET_NNODES"),
            per_node=plain_int(environ, "NUM_TRAINERS", "PET_NPROC_PER_NODE"),
        )
        if facts.node_rank is None and facts.num_nodes is None and facts.per_node is None:
            return None
        return facts

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the generic variables, deriving what is missing."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        fields["primary_addr"] = env.primary(
            "MASTER_ADDR",
            "PET_MASTER_ADDR",
            required=True,
            what="the rendezvous (rank 0) address",
        )
        fields["primary_port"] = env.port(
            "MASTER_PORT", "PET_MASTER_PORT", required=False, default=DEFAULT_PORT
        )
        fields["node_addr"] = env.ip(
            "NODE_ADDR", required=False, what="this node's cluster address"
        )
        node_rank = _count(
            env, "NODE_RANK", "PET_NODE_RANK", what="this node's index", example="0", minimum=0
        )
        num_nodes = _count(
            env, "NUM_NODES", "PET_NNODES", what="the number of nodes", example="2", minimum=1,
            maximum=MAX_NODES,
        )
        trainers = _count(
            env,
            "NUM_TRAINERS",
            "PET_NPROC_PER_NODE",
            what="the number of processes (GPUs) per node",
            example="8",
            minimum=1,
        )
        world_text = env.get("WORLD_SIZE")
        trainers_name, _ = env.first("NUM_TRAINERS", "PET_NPROC_PER_NODE")
        if trainers is None and trainers_name is None:
            trainers = visible_gpu_count(environ, root) or 1
        if num_nodes is not None or env.any_set("NUM_NODES", "PET_NNODES"):
            if world_text is not None:  # checked against NUM_NODES * NUM_TRAINERS by config
                reading.raw["WORLD_SIZE"] = world_text
        else:  # the node count comes from WORLD_SIZE, which is parsed and checked here
            num_nodes = 1
            world = (
                env.parse_int(
                    "WORLD_SIZE",
                    world_text,
                    what="the number of processes",
                    example="16",
                    minimum=1,
                )
                if world_text is not None
                else None
            )
            if world is not None and trainers is not None:
                if world % trainers:
                    per_node = (
                        f"{trainers_name}={trainers}"
                        if trainers_name
                        else f"{trainers} visible GPUs"
                    )
                    env.problem(
                        ("WORLD_SIZE", trainers_name) if trainers_name else ("WORLD_SIZE",),
                        f"WORLD_SIZE={world} is not a multiple of {per_node} (processes per "
                        "node), so the node count cannot be derived: WORLD_SIZE counts "
                        "processes, not nodes",
                        "export NUM_NODES and NUM_TRAINERS explicitly",
                        "config-world-size",
                    )
                    num_nodes = None
                elif world // trainers > MAX_NODES:
                    env.problem(
                        ("WORLD_SIZE", trainers_name) if trainers_name else ("WORLD_SIZE",),
                        f"WORLD_SIZE={world} over {trainers} processes per node is "
                        f"{world // trainers} nodes, above the supported maximum of "
                        f"{MAX_NODES}: WORLD_SIZE counts processes, not nodes",
                        "export NUM_NODES and NUM_TRAINERS explicitly",
                        "config-out-of-range",
                    )
                    num_nodes = None
                else:
                    num_nodes = world // trainers
        fields["node_rank"] = (
            0 if node_rank is None and not env.any_set("NODE_RANK", "PET_NODE_RANK") else node_rank
        )
        fields["num_nodes"] = num_nodes
        fields["num_trainers"] = trainers
        return reading


def _count(
    env: EnvReader, *names: str, what: str, example: str, minimum: int, maximum: int | None = None
) -> int | None:
    """An integer that torchrun may spell as ``PET_*``; ``PET_NNODES`` may be a fixed range."""
    found = env.aliased(*names, required=False, what=what)
    if found is None:
        return None
    name, value = found
    if name == "PET_NNODES" and ":" in value:
        low, _, high = value.partition(":")
        if low.strip() != high.strip():
            env.problem(
                (name,),
                f"{name}={value!r} is an elastic range; clusterenv needs a fixed node count",
                env.fix("NUM_NODES") if not high.strip() else export("NUM_NODES", high.strip()),
                "config-elastic-range",
            )
            return None
        value = low
    return env.parse_int(name, value, what=what, example=example, minimum=minimum,
                         maximum=maximum)
