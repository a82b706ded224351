"""A rank started by an MPI launcher: Open MPI, MVAPICH, MPICH / Intel MPI (Hydra), PMIx.

- Open MPI (``mpirun``, PRRTE): ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``,
  ``OMPI_COMM_WORLD_LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_SIZE``;
- MVAPICH2 (``mpirun_rsh``): ``MV2_COMM_WORLD_RANK``, ``MV2_COMM_WORLD_SIZE``,
  ``MV2_COMM_WORLD_LOCAL_RANK``, ``MV2_COMM_WORLD_LOCAL_SIZE``;
- MPICH, Intel MPI (Hydra), Slurm PMI-2: ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID`` (PMIx's
  MPICH module spells it ``MPI_LOCALNRANKID``), ``MPI_LOCALNRANKS``.

``PMIX_RANK`` alone (``srun --mpi=pmix``) carries no size: the Slurm task variables describe such
a process, and ``PMIX_RANK`` must agree with the family's rank when both are present.
``OMPI_COMM_WORLD_NODE_RANK`` is *not* a node index (it counts other jobs' processes) and is not
read. No MPI family gives a node index or a rendezvous address: the node index is
``rank // local size``, trusted only when ranks sit in blocks (``--map-by slot``, the default);
the primary is ``MASTER_ADDR`` (``mpirun -x MASTER_ADDR=...``), else ``127.0.0.1`` when every
rank is on this node, else the first host of the Slurm step under Slurm. The port is
``MASTER_PORT``, else 29500. Under Slurm without an MPI local rank (PMI-2), ``SLURM_LOCALID``
and Slurm's tasks per node stand in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from clusterenv._root import Root
from clusterenv.sources._base import DEFAULT_PORT, EnvReader, NodeFacts, Reading, Source
from clusterenv.sources._process import Named, finish_worker
from clusterenv.sources.local import LOCAL_PRIMARY
from clusterenv.sources.slurm import in_slurm_task, slurm_primary, slurm_tasks_per_node

__all__ = ["FAMILIES", "MpiSource"]

#: Per family: its name, then the variables for rank, size, local rank(s) and local size.
FAMILIES: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     ("OMPI_COMM_WORLD_LOCAL_RANK",), "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
     ("MV2_COMM_WORLD_LOCAL_RANK",), "MV2_COMM_WORLD_LOCAL_SIZE"),
    ("MPICH/Hydra", "PMI_RANK", "PMI_SIZE",
     ("MPI_LOCALRANKID", "MPI_LOCALNRANKID"), "MPI_LOCALNRANKS"),
)


Family = tuple[str, str, str, tuple[str, ...], str]

# What else only mpirun sets (Open MPI's "Environment variables set for MPI applications").
_MORE: dict[str, tuple[str, ...]] = {
    "Open MPI": ("OMPI_COMM_WORLD_NODE_RANK", "OMPI_UNIVERSE_SIZE"),
}
# Names that Slurm's MPI plugins set in its own tasks too (srun --mpi=pmi2): inside a Slurm task
# they do not show that an MPI launcher started the process.
_SHARED_WITH_SLURM = frozenset({"PMI_RANK", "PMI_SIZE"})


def _names(family: Family) -> tuple[str, ...]:
    label, rank, size, local_ranks, local_size = family
    return (rank, size, *local_ranks, local_size, *_MORE.get(label, ()))


def _evidence(family: Family, environ: Mapping[str, str]) -> tuple[str, ...]:
    shared_is_slurms = in_slurm_task(environ)
    return tuple(n for n in _names(family) if environ.get(n)
                 and not (shared_is_slurms and n in _SHARED_WITH_SLURM))


def _family(environ: Mapping[str, str]) -> Family | None:
    """The family whose rank and size are set, else the first one with any variable set."""
    for family in FAMILIES:
        if environ.get(family[1]) and environ.get(family[2]):
            return family
    for family in FAMILIES:
        if _evidence(family, environ):
            return family
    return None


class MpiSource(Source):
    """An MPI rank (Open MPI, MVAPICH, MPICH/Hydra): a rank and a size are set."""

    name: ClassVar[str] = "mpi"
    level: ClassVar[str] = "process"
    launcher: ClassVar[str] = "mpirun"
    identifying: ClassVar[tuple[str, ...]] = tuple(n for f in FAMILIES for n in _names(f))
    setter: ClassVar[str] = "an MPI launcher"

    def matches(self, environ: Mapping[str, str]) -> bool:
        """One family's rank and size are both set."""
        return any(environ.get(f[1]) and environ.get(f[2]) for f in FAMILIES)

    def evidence(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """Any family's variables; ``PMI_RANK``/``PMI_SIZE`` only outside a Slurm task."""
        return tuple(n for f in FAMILIES for n in _evidence(f, environ))

    def reason(self, environ: Mapping[str, str]) -> str:
        """The family and its two variables."""
        family = _family(environ)
        if family is None:
            return "forced"
        if not self.matches(environ):
            return f"{super().reason(environ)} ({family[0]})"
        return f"{family[1]} and {family[2]} are set ({family[0]})"

    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the rank; derive the node index and count; find a rendezvous."""
        reading = Reading()
        env = EnvReader(environ, reading)
        fields = reading.fields
        family = _family(environ) or FAMILIES[0]
        label, rank_name, size_name, local_names, local_size_name = family
        rank = env.integer(rank_name, required=True, what="this rank", example="<rank>")
        size = env.integer(
            size_name, required=True, what="the ranks in the job", example="<ranks>", minimum=1
        )
        local_rank: Named | None = None
        local_size: Named | None = None
        local_name, _ = env.first(*local_names)
        if local_name is not None or env.get(local_size_name) is not None:
            found = env.integer(
                local_name or local_names[0],
                required=True, what="this rank's index on the node", example="<local rank>",
            )
            count = env.integer(
                local_size_name, required=True, what="the ranks on this node",
                example="<ranks on this node>", minimum=1,
            )
            local_rank = None if found is None else Named(local_name or local_names[0], found)
            local_size = None if count is None else Named(local_size_name, count)
        elif env.get("SLURM_LOCALID") is not None:  # Slurm PMI-2: Slurm knows the node
            found = env.integer(
                "SLURM_LOCALID", required=True, what="this task's index on the node",
                example="<local rank>",
            )
            local_rank = None if found is None else Named("SLURM_LOCALID", found)
            listed = slurm_tasks_per_node(env)
            node = env.integer(
                "SLURM_NODEID", required=True, what="this node's index", example="<node index>"
            )
            if listed is not None and node is not None and node < len(listed[1]):
                local_size = Named(listed[0], listed[1][node])
        if local_size is None and local_name is None and not env.any_set(
            local_size_name, "SLURM_LOCALID"
        ):
            env.problem(
                (local_size_name,),
                f"{local_size_name} is not set ({label} ranks on this node), so this node's "
                "index and the node count cannot be derived",
                f"start the ranks with {label}'s mpirun/mpiexec, or export {local_size_name}="
                "<ranks on this node>",
                "config-missing",
            )
        pmix = env.integer("PMIX_RANK", required=False, what="the PMIx rank", example="<rank>")
        if pmix is not None and rank is not None and pmix != rank:
            env.problem(
                ("PMIX_RANK", rank_name),
                f"PMIX_RANK={pmix} and {rank_name}={rank} disagree: two launchers' ranks are "
                "mixed in this environment",
                "start the job with one launcher; do not export rank variables by hand",
                "config-alias-mismatch",
            )
        finish_worker(
            env,
            launcher=self.launcher,
            rank=None if rank is None else Named(rank_name, rank),
            local_rank=local_rank,
            world=None if size is None else Named(size_name, size),
            local_world=local_size,
        )
        fields["node_addr"] = env.ip(
            "NODE_ADDR", required=False, what="this node's cluster address",
        )
        fields["primary_port"] = env.port("MASTER_PORT", required=False, default=DEFAULT_PORT)
        primary = env.host(
            "MASTER_ADDR", required=False, what="the rendezvous address (rank 0's host)",
        )
        if primary is None and not env.any_set("MASTER_ADDR"):
            nodes = fields.get("num_nodes")
            if nodes == 1:
                primary = LOCAL_PRIMARY
            elif env.any_set("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"):
                primary = slurm_primary(env)
            elif isinstance(nodes, int):
                env.problem(
                    ("MASTER_ADDR",),
                    f"MASTER_ADDR is not set and the ranks span {nodes} nodes: {label} gives no "
                    "rendezvous address",
                    "mpirun -x MASTER_ADDR=<rank 0's host address> -x MASTER_PORT=<a free "
                    "port> ...",
                    "config-missing",
                )
        fields["primary_addr"] = primary
        return reading
