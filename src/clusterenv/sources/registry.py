"""The source registry: the detection order, and finding a source by name or by evidence."""

from __future__ import annotations

from collections.abc import Mapping

from clusterenv.sources._base import NodeFacts, Source
from clusterenv.sources.cloud import PaiDlcSource, SageMakerSource, VertexSource
from clusterenv.sources.deepspeed import DeepSpeedSource
from clusterenv.sources.dstack import DstackSource
from clusterenv.sources.generic import GenericSource
from clusterenv.sources.kubeflow import KubeflowSource
from clusterenv.sources.lightning import LightningSource
from clusterenv.sources.local import LocalSource
from clusterenv.sources.mpi import MpiSource
from clusterenv.sources.runpod import RunpodSource
from clusterenv.sources.skypilot import SkyPilotSource
from clusterenv.sources.slurm import SlurmSource
from clusterenv.sources.torchelastic import TorchElasticSource
from clusterenv.sources.worker import AzureMLSource, RaySource, WorkerSource

__all__ = ["SOURCES", "SOURCE_NAMES", "detect_source", "outer_facts", "source_named"]

#: The order sources are tried in (the documented detection order; docs/environment.md).
#:
#: 1. ``torchelastic``: ``TORCHELASTIC_RUN_ID`` present, the strongest worker marker.
#: 2. ``deepspeed``, ``ray``, ``azureml``: a full ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` set with
#:    a launcher's own marker; then ``worker``: the full set from any launcher.
#: 3. ``lightning``: ``LOCAL_RANK``, ``NODE_RANK`` and ``WORLD_SIZE`` without ``RANK``.
#: 4. ``mpi``: an MPI rank (Open MPI, MVAPICH, MPICH/Intel MPI/Hydra, PMIx): preferred over
#:    ``SLURM_PROCID``, which ``mpirun`` inside ``sbatch`` inherits from the batch step.
#: 5. ``slurm``: a Slurm task (process-level with several tasks per node, else node-level).
#: 6. Node-level platforms: ``runpod``, ``skypilot``, ``dstack``, ``sagemaker``, ``vertex``,
#:    ``kubeflow``.
#: 7. ``generic`` ``MASTER_ADDR``, then ``local``.
#:
#: A source is chosen when it matches (its full set of variables) **or** when any of its
#: identifying variables is present (:meth:`Source.evidence`): partial evidence of a launcher
#: or platform selects it, and its reading names what is missing, so an environment is read as
#: the local default only when no launcher or platform left a trace. The order is the same
#: for both, so the innermost launcher still wins.
#:
#: ``paidlc`` is never detected (its ``WORLD_SIZE`` = nodes and ``RANK`` = node index look
#: like other meanings); it is used only when forced.
SOURCES: tuple[Source, ...] = (
    TorchElasticSource(),
    DeepSpeedSource(),
    RaySource(),
    AzureMLSource(),
    WorkerSource(),
    LightningSource(),
    MpiSource(),
    SlurmSource(),
    RunpodSource(),
    SkyPilotSource(),
    DstackSource(),
    SageMakerSource(),
    VertexSource(),
    KubeflowSource(),
    GenericSource(),
    LocalSource(),
    PaiDlcSource(),
)
#: The names accepted by ``ClusterConfig.from_env(source=...)`` and ``CLUSTERENV_SOURCE``.
SOURCE_NAMES: tuple[str, ...] = tuple(s.name for s in SOURCES)


def source_named(name: str) -> Source | None:
    """The source called ``name``, or None."""
    for source in SOURCES:
        if source.name == name:
            return source
    return None


def detect_source(environ: Mapping[str, str], *, level: str | None = None) -> Source:
    """The first source in :data:`SOURCES` that matches or shows identifying evidence
    (``local`` at the latest).

    Args:
        environ: The variables to look at.
        level: Only consider sources of this level (``"process"`` or ``"node"``).
    """
    for source in SOURCES:
        if not source.auto or (level is not None and source.level != level):
            continue
        if source.matches(environ) or source.evidence(environ):
            return source
    return next(s for s in SOURCES if s.name == "local")


def outer_facts(environ: Mapping[str, str], *, exclude: str) -> NodeFacts | None:
    """What the first matching source (other than ``exclude``) that describes nodes says about
    this node: the evidence an inner launcher's values are checked against. Worker sources say
    nothing about outer layers, so they are passed over. None when no source says anything.
    """
    for source in SOURCES:
        if not source.auto or source.name == exclude:
            continue
        if source.matches(environ):
            facts = source.node_facts(environ)
            if facts is not None:
                return facts
    return None
