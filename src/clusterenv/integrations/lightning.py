"""A Lightning ``ClusterEnvironment`` built on :class:`~clusterenv.ClusterConfig`.

Lightning (``lightning`` or ``pytorch-lightning``) is imported with this module; ``import
clusterenv`` never imports it. The environment reads the cluster contract once, when it is
created, and never writes ``os.environ``: values Lightning sets (``set_world_size``,
``set_global_rank``) are kept on the instance.

Two ways to run on a Runpod Instant Cluster (or any cluster clusterenv reads):

- ``clusterenv launch -- train.py`` on every node: torchrun starts one process per GPU and the
  environment reports torchrun's ranks (``creates_processes_externally`` is True);
- ``python train.py`` on every node: Lightning starts the processes itself, and the environment
  gives it the primary's address and port and this node's rank from ``PRIMARY_ADDR``,
  ``PRIMARY_PORT`` and ``NODE_RANK``.

Example::

    import lightning as L
    from clusterenv.integrations.lightning import ClusterEnvEnvironment

    env = ClusterEnvEnvironment()
    trainer = L.Trainer(num_nodes=env.num_nodes, devices=env.num_trainers, plugins=[env])
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Mapping

from clusterenv.config import ClusterConfig, check_config

try:
    from lightning.fabric.plugins.environments.cluster_environment import ClusterEnvironment
except ImportError:  # the standalone packages: pytorch-lightning / lightning-fabric
    try:
        from lightning_fabric.plugins.environments.cluster_environment import (  # type: ignore[assignment,import-not-found,unused-ignore]
            ClusterEnvironment,
        )
    except ImportError as e:
        raise ImportError(
            "clusterenv.integrations.lightning needs Lightning: pip install lightning "
            "(or pytorch-lightning)"
        ) from e

__all__ = ["ClusterEnvEnvironment"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ClusterEnvEnvironment(ClusterEnvironment):  # type: ignore[misc,unused-ignore]
    """Lightning's view of the cluster, from :class:`~clusterenv.ClusterConfig`.

    Args:
        config: The cluster contract; read from ``environ`` when None.
        environ: Where the contract and ``LOCAL_RANK`` are read; None is ``os.environ``.
        root: ``/`` or a host snapshot (counts GPUs for the local default).

    Raises:
        ConfigError: When the cluster environment is invalid.

    Example::

        env = ClusterEnvEnvironment()
        env.main_address, env.main_port, env.node_rank()   # ('10.65.0.2', 29500, 1)
    """

    def __init__(
        self,
        config: ClusterConfig | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        root: str | os.PathLike[str] = "/",
    ) -> None:
        super().__init__()
        self._environ = environ
        self.config = (
            config if config is not None else ClusterConfig.from_env(environ, root=root)
        )
        process = self.config.process
        self._world_size = self.config.world_size
        if process is not None:
            self._global_rank = process.rank
        else:
            self._global_rank = self.config.node_rank * self.config.num_trainers + self.local_rank()
        self._port: int | None = None

    def _env(self) -> Mapping[str, str]:
        return os.environ if self._environ is None else self._environ

    @property
    def num_nodes(self) -> int:
        """Nodes in the job (``Trainer(num_nodes=...)``), e.g. ``2``."""
        return self.config.num_nodes

    @property
    def num_trainers(self) -> int:
        """Processes per node (``Trainer(devices=...)``), e.g. ``8``."""
        if self.config.process is not None:
            return self.config.process.local_world_size
        return self.config.num_trainers

    @property
    def creates_processes_externally(self) -> bool:
        """True inside a launched worker (torchrun, or a process Lightning already started)."""
        return self.config.process is not None or "LOCAL_RANK" in self._env()

    @property
    def main_address(self) -> str:
        """The primary's address, e.g. ``"10.65.0.2"``."""
        return self.config.primary_addr

    @property
    def main_port(self) -> int:
        """The rendezvous port, e.g. ``29500``; on a laptop (local default) a free port."""
        if self.config.source != "local":
            return self.config.primary_port
        if self._port is None:
            self._port = _free_port()
        return self._port

    @staticmethod
    def detect() -> bool:
        """Whether ``os.environ`` describes a cluster clusterenv can read (not the local
        default)."""
        check = check_config()
        return check.config is not None and check.config.source != "local"

    def world_size(self) -> int:
        """Processes in the job, e.g. ``16``."""
        return self._world_size

    def set_world_size(self, size: int) -> None:
        """Record the world size Lightning computed; kept here, never in ``os.environ``."""
        self._world_size = size

    def global_rank(self) -> int:
        """This process's global rank, e.g. ``9``."""
        return self._global_rank

    def set_global_rank(self, rank: int) -> None:
        """Record the rank Lightning computed; kept here, never in ``os.environ``."""
        self._global_rank = rank

    def local_rank(self) -> int:
        """This process's rank on its node (its GPU index), e.g. ``1``."""
        if self.config.process is not None:
            return self.config.process.local_rank
        return int(self._env().get("LOCAL_RANK", "0"))

    def node_rank(self) -> int:
        """This node's index, e.g. ``1``."""
        return self.config.node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Refuse a Trainer/Fabric whose ``num_nodes`` or ``devices`` contradict the cluster.

        Raises:
            ValueError: Naming both values and the setting to use.
        """
        if num_nodes != self.config.num_nodes:
            raise ValueError(
                f"num_nodes={num_nodes} but the cluster has {self.config.num_nodes} nodes "
                f"(source {self.config.source}): the nodes would wait for each other forever or "
                f"train separately. HINT: set num_nodes={self.config.num_nodes}"
            )
        process = self.config.process
        stated = self._stated_per_node()
        if process is None and stated is not None and num_devices != self.config.num_trainers:
            trainers = self.config.num_trainers
            raise ValueError(
                f"devices={num_devices} but this node runs {trainers} processes per node "
                f"({stated}={trainers}, source {self.config.source}): Lightning would set "
                f"WORLD_SIZE={num_devices * num_nodes} while every node's cluster contract "
                f"says {trainers * self.config.num_nodes}, and the processes would compute "
                f"different ranks. HINT: set devices={trainers}, or start {num_devices} "
                f"processes per node with `clusterenv launch --nproc-per-node {num_devices} -- "
                "train.py`"
            )
        if process is not None and num_devices != process.local_world_size:
            raise ValueError(
                f"devices={num_devices} but the launcher started {process.local_world_size} "
                f"processes on this node (LOCAL_WORLD_SIZE). HINT: set "
                f"devices={process.local_world_size}"
            )

    def _stated_per_node(self) -> str | None:
        """The variable that states this node's process count (``NUM_TRAINERS``), when the
        environment states one; None when the count is only a guess from the visible GPUs."""
        from clusterenv.sources import source_named

        source = source_named(self.config.source)
        facts = source.node_facts(self._env()) if source is not None else None
        if facts is None or facts.per_node is None:
            return None
        name, value = facts.per_node
        return name if value == self.config.num_trainers else None

    def teardown(self) -> None:
        """Nothing to undo: this environment never changed ``os.environ``."""


def _register_with_standalone() -> None:
    """Let pytorch-lightning (built on ``lightning_fabric``) accept this class as well."""
    if ClusterEnvironment.__module__.startswith("lightning_fabric"):
        return
    if importlib.util.find_spec("lightning_fabric") is None:
        return
    from lightning_fabric.plugins.environments.cluster_environment import (  # type: ignore[import-not-found,unused-ignore]
        ClusterEnvironment as Standalone,
    )

    Standalone.register(ClusterEnvEnvironment)


_register_with_standalone()
