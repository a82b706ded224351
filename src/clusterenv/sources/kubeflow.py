"""Kubeflow: Training Operator v1 ``PyTorchJob`` and Trainer v2 ``TrainJob`` pods.

Both give the pod torchrun's own variables: ``PET_NNODES``, ``PET_NPROC_PER_NODE`` (an integer,
or ``auto``/``gpu``/``cpu`` resolved as torchrun does), ``PET_NODE_RANK``, ``PET_MASTER_ADDR``,
``PET_MASTER_PORT`` (elastic v1 jobs: ``PET_RDZV_ENDPOINT`` instead). v1 also sets
``MASTER_ADDR``/``MASTER_PORT`` and ``RANK`` = the **pod** index (not a process rank) and a
``WORLD_SIZE`` that counts pods or pods x processes: neither is read as a process value. The pod
is a node context; torchrun inside it overwrites ``RANK``/``WORLD_SIZE`` for its workers.
Kubernetes' ``KUBERNETES_SERVICE_HOST`` tells an operator's ``PET_*`` from ones exported by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._root import Root
from clusterenv._values import split_host_port
from clusterenv.sources._base import (
    MAX_NODES,
    EnvReader,
    NodeFacts,
    Reading,
    Source,
    plain_int,
)
from clusterenv.sources._node import nproc_per_node, torchrun_rendezvous_options

__all__ = ["KubeflowSource"]


class KubeflowSource(Source):
    """A Kubeflow PyTorchJob (v1) or TrainJob (v2) pod."""

    name: ClassVar[str] = "kubeflow"
    markers: ClassVar[tuple[str, ...]] = ("PET_NNODES", "PET_NPROC_PER_NODE",
                                          "KUBERNETES_SERVICE_HOST")
    #: torchrun's rendezvous options that the operators write into the pod (v1
    #: ``envvar.go``/``elastic.go``, v2 ``torch.go``); they identify Kubeflow only inside a
    #: Kubernetes pod (``KUBERNETES_SERVICE_HOST``), since anyone may export them for torchrun.
    identifying: ClassVar[tuple[str, ...]] = (
        "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_RDZV_ENDPOINT",
    )
    setter: ClassVar[str] = "the Kubeflow training operator"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """``PET_NNODES`` and ``PET_NPROC_PER_NODE`` in a Kubernetes pod."""
        return all(environ.get(n) for n in self.markers)

    def evidence(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """torchrun's rendezvous options in a Kubernetes pod (see
        :func:`~clusterenv.sources._node.torchrun_rendezvous_options`)."""
        if not environ.get("KUBERNETES_SERVICE_HOST"):
            return ()
        return torchrun_rendezvous_options(environ, self.identifying)

    def node_facts(self, environ: Mapping[str, str]) -> NodeFacts:
        """The pod's node rank and the node count (a fixed ``PET_NNODES``)."""
        nnodes = (environ.get("PET_NNODES") or "").strip()
        low, _, high = nnodes.partition(":")
        count = plain_int({"PET_NNODES": low}, "PET_NNODES") if not high or low == high else None
        return NodeFacts(
            self.name,
            node_rank=plain_int(environ, "PET_NODE_RANK"),
            num_nodes=count,
            per_node=plain_int(environ, "PET_NPROC_PER_NODE"),
        )

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the pod's ``PET_*`` (and v1's duplicates, which must agree)."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        endpoint = env.get("PET_RDZV_ENDPOINT")
        if env.any_set("PET_MASTER_ADDR", "MASTER_ADDR") or endpoint is None:
            fields["primary_addr"] = env.primary(
                "PET_MASTER_ADDR", "MASTER_ADDR", required=True,
                what="the master pod's service name",
            )
            fields["primary_port"] = env.port("PET_MASTER_PORT", "MASTER_PORT", required=True)
        else:
            parsed = split_host_port(endpoint)
            if parsed is None:
                env.problem(("PET_RDZV_ENDPOINT",),
                            f"PET_RDZV_ENDPOINT={endpoint!r}: expected HOST:PORT",
                            "export PET_RDZV_ENDPOINT=<host>:<port>", "config-bad-address")
            else:
                fields["primary_addr"], fields["primary_port"] = parsed
        fields["node_addr"] = None
        fields["node_rank"] = env.integer(
            "PET_NODE_RANK", "RANK", "JOB_COMPLETION_INDEX", required=True,
            what="this pod's index", example="<pod index>",
        )
        nnodes = env.get("PET_NNODES") or ""
        low, sep, high = nnodes.partition(":")
        if not nnodes:
            env.problem(("PET_NNODES",), "PET_NNODES is not set (the number of pods, torchrun's "
                        "--nnodes)", "export PET_NNODES=<the number of nodes>", "config-missing")
            fields["num_nodes"] = None
        elif sep and low.strip() != high.strip():
            env.problem(("PET_NNODES",),
                        f"PET_NNODES={nnodes!r} is an elastic range; clusterenv needs a fixed "
                        "node count", "export NUM_NODES=<the number of nodes>",
                        "config-elastic-range")
            fields["num_nodes"] = None
        else:
            fields["num_nodes"] = env.parse_int("PET_NNODES", low, what="the number of nodes",
                                                example="<nodes>", minimum=1, maximum=MAX_NODES)
        fields["num_trainers"] = nproc_per_node(env, "PET_NPROC_PER_NODE", root)
        return reading
