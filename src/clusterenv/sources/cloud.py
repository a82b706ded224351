"""Cloud training platforms: SageMaker, Vertex AI, and PAI-DLC (forced only).

- **SageMaker** (training toolkit and SDK drivers): ``SM_HOSTS`` (JSON list of container host
  names), ``SM_CURRENT_HOST``, ``SM_NUM_GPUS``. The primary is ``SM_MASTER_ADDR`` (newer SDK
  drivers, with ``SM_CURRENT_HOST_RANK`` over the *sorted* hosts), else the first of ``SM_HOSTS``
  (the toolkit's choice); the node rank is this host's index there. The port is
  ``SM_MASTER_PORT``, else ``MASTER_PORT``, else 7777 (the toolkit's torch_distributed port).
  Processes per node: ``SM_NPROC_PER_NODE``, else ``SM_NUM_GPUS`` (0: the visible GPUs, else 1).
- **Vertex AI**: ``CLUSTER_SPEC`` JSON. ``cluster.workerpool0`` is the primary (one replica),
  ``workerpool1`` the workers; pools 2 and 3 (parameter servers, evaluators) are not training
  nodes. The primary is ``workerpool0[0]`` (``host:port``); node rank 0 for pool 0, ``index +
  1`` for pool 1; nodes = replicas of pools 0 and 1; processes per node = the visible GPUs
  (else 1). ``MASTER_PORT`` overrides the pool's port.
- **PAI-DLC**: ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` = **nodes**, ``RANK`` = **node
  index**, ``NPROC_PER_NODE``. Those names mean processes everywhere else, so this source is used
  only when forced (``CLUSTERENV_SOURCE=paidlc``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from clusterenv._gpus import visible_gpu_count
from clusterenv._root import Root
from clusterenv._values import parse_host, split_host_port
from clusterenv.sources._base import (
    DEFAULT_PORT,
    MAX_NODES,
    EnvReader,
    NodeFacts,
    Reading,
    Source,
)
from clusterenv.sources._node import gpus_or_visible

__all__ = ["SAGEMAKER_PORT", "PaiDlcSource", "SageMakerSource", "VertexSource"]

#: The port SageMaker's training toolkit gives torchrun.
SAGEMAKER_PORT = 7777


def _json(env: EnvReader, name: str, *, what: str) -> Any:
    value = env.get(name)
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        env.problem((name,), f"{name}={value[:80]!r} is not JSON ({what})",
                    "let the platform set it; do not export it by hand", "config-invalid")
        return None


class SageMakerSource(Source):
    """An AWS SageMaker training container (``SM_HOSTS``, ``SM_CURRENT_HOST``)."""

    name: ClassVar[str] = "sagemaker"
    markers: ClassVar[tuple[str, ...]] = ("SM_HOSTS", "SM_CURRENT_HOST")
    #: The topology the training toolkit and the SDK drivers write (``SM_`` + the key of
    #: ``environment.py``); ``SM_NUM_GPUS`` and the like describe one host only.
    identifying: ClassVar[tuple[str, ...]] = (
        "SM_HOSTS", "SM_CURRENT_HOST", "SM_MASTER_ADDR", "SM_CURRENT_HOST_RANK", "SM_HOST_COUNT",
    )
    setter: ClassVar[str] = "SageMaker"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """``SM_HOSTS`` and ``SM_CURRENT_HOST`` are set."""
        return all(environ.get(n) for n in self.markers)

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the host list and this host's place in it."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        hosts = _json(env, "SM_HOSTS", what="a list of host names")
        current = env.get("SM_CURRENT_HOST")
        if hosts is not None and (
            not isinstance(hosts, list) or not hosts
            or not all(isinstance(h, str) and parse_host(h) for h in hosts)
        ):
            env.problem(("SM_HOSTS",), f"SM_HOSTS={env.get('SM_HOSTS')!r}: expected a JSON list "
                        "of host names", "let SageMaker set it", "config-invalid")
            hosts = None
        if env.any_set("SM_MASTER_ADDR"):
            fields["primary_addr"] = env.primary("SM_MASTER_ADDR", required=True,
                                              what="the master host")
            fields["node_rank"] = env.integer(
                "SM_CURRENT_HOST_RANK", required=True, what="this host's rank",
                example="<host rank>",
            )
        elif hosts is not None:
            fields["primary_addr"] = parse_host(hosts[0])
            if current is None:
                env.problem(("SM_CURRENT_HOST",), "SM_CURRENT_HOST is not set (this container's "
                            "host name in SM_HOSTS)", "let SageMaker set it", "config-missing")
            elif current not in hosts:
                env.problem(("SM_CURRENT_HOST", "SM_HOSTS"),
                            f"SM_CURRENT_HOST={current!r} is not in SM_HOSTS", "let SageMaker "
                            "set them", "config-invalid")
            else:
                fields["node_rank"] = hosts.index(current)
        elif not env.any_set("SM_HOSTS"):
            env.problem(("SM_HOSTS",), "SM_HOSTS is not set (the JSON list of the job's host "
                        "names, the first the primary)", "let SageMaker set it",
                        "config-missing")
        fields["num_nodes"] = env.integer("SM_HOST_COUNT", required=False, what="hosts",
                                          example="<hosts>", minimum=1,
                                          maximum=MAX_NODES) or (
            len(hosts) if hosts is not None else None)
        if env.any_set("SM_MASTER_ADDR") and not env.any_set("SM_HOST_COUNT", "SM_HOSTS"):
            env.problem(("SM_HOST_COUNT", "SM_HOSTS"), "neither SM_HOST_COUNT nor SM_HOSTS is "
                        "set, so the number of hosts is unknown", "let SageMaker set them",
                        "config-missing")
        port_name, _ = env.first("SM_MASTER_PORT", "MASTER_PORT")
        fields["primary_port"] = (
            env.port(port_name, required=True) if port_name else SAGEMAKER_PORT
        )
        fields["node_addr"] = None
        if env.any_set("SM_NPROC_PER_NODE"):
            fields["num_trainers"] = env.integer(
                "SM_NPROC_PER_NODE", required=True, what="processes per host",
                example="<processes per host>", minimum=1,
            )
        else:
            fields["num_trainers"] = gpus_or_visible(env, "SM_NUM_GPUS", root,
                                                     what="GPUs on this host")
        return reading


class VertexSource(Source):
    """A Vertex AI custom training replica (``CLUSTER_SPEC``)."""

    name: ClassVar[str] = "vertex"
    markers: ClassVar[tuple[str, ...]] = ("CLUSTER_SPEC",)
    identifying: ClassVar[tuple[str, ...]] = ("CLUSTER_SPEC",)
    setter: ClassVar[str] = "Vertex AI"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """``CLUSTER_SPEC`` is set."""
        return bool(environ.get("CLUSTER_SPEC"))

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the worker pools and this replica's task."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        spec = _json(env, "CLUSTER_SPEC", what="Vertex AI's cluster description")
        if spec is None:
            if not reading.problems:
                env.problem(("CLUSTER_SPEC",), "CLUSTER_SPEC is not set", "run on Vertex AI",
                            "config-missing")
            return reading
        try:
            cluster = spec["cluster"]
            pool0 = [str(h) for h in cluster["workerpool0"]]
            pool1 = [str(h) for h in cluster.get("workerpool1", [])]
            task = spec["task"]
            kind, index = str(task["type"]), int(task["index"])
        except (KeyError, TypeError, ValueError, AttributeError):
            env.problem(("CLUSTER_SPEC",),
                        "CLUSTER_SPEC has no cluster.workerpool0 list or task.type/task.index",
                        "let Vertex AI set it; do not export it by hand", "config-invalid")
            return reading
        primary = split_host_port(pool0[0]) if pool0 else None
        if primary is None:
            env.problem(("CLUSTER_SPEC",), f"CLUSTER_SPEC's workerpool0 {pool0!r} does not "
                        "start with HOST:PORT", "let Vertex AI set it", "config-invalid")
            return reading
        if kind == "workerpool0" and index == 0:
            rank = 0
        elif kind == "workerpool1":
            rank = index + 1
        else:
            env.problem(("CLUSTER_SPEC",),
                        f"CLUSTER_SPEC says this replica is {kind!r}: parameter servers "
                        "(workerpool2) and evaluators (workerpool3) are not training nodes",
                        "run the training script in workerpool0 and workerpool1 only",
                        "config-invalid")
            return reading
        fields["primary_addr"], port = primary
        master_port = env.port("MASTER_PORT", required=False)
        fields["primary_port"] = master_port if master_port is not None else port
        fields["node_addr"] = None
        fields["node_rank"] = rank
        fields["num_nodes"] = len(pool0) + len(pool1)
        fields["num_trainers"] = visible_gpu_count(environ, root) or 1
        return reading


class PaiDlcSource(Source):
    """Alibaba PAI-DLC (``WORLD_SIZE`` = nodes, ``RANK`` = node index); only when forced."""

    name: ClassVar[str] = "paidlc"
    auto: ClassVar[bool] = False

    def matches(self, environ: Mapping[str, str]) -> bool:
        """Never detected: its names mean processes in every other source."""
        return False

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read PAI-DLC's node-level names."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        fields["primary_addr"] = env.primary("MASTER_ADDR", required=True,
                                          what="the master node's service name")
        fields["primary_port"] = env.port("MASTER_PORT", required=False, default=DEFAULT_PORT)
        fields["node_addr"] = None
        fields["node_rank"] = env.integer("RANK", required=True,
                                          what="this node's index (PAI-DLC: a node, not a "
                                          "process)", example="<node index>")
        fields["num_nodes"] = env.integer("WORLD_SIZE", required=True,
                                          what="the number of nodes (PAI-DLC: nodes, not "
                                          "processes)", example="<nodes>", minimum=1,
                                          maximum=MAX_NODES)
        if env.any_set("NPROC_PER_NODE"):
            fields["num_trainers"] = env.integer("NPROC_PER_NODE", required=True,
                                                 what="GPUs per node", example="<GPUs>",
                                                 minimum=1)
        else:
            fields["num_trainers"] = gpus_or_visible(env, "NPROC_PER_NODE", root,
                                                     what="GPUs per node")
        return reading
