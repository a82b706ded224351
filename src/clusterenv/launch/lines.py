"""Launcher arguments and environments rendered from one :class:`~clusterenv.ClusterConfig`:
``torchrun`` arguments and the ``PET_*`` variables torchrun reads in their place, ``accelerate
launch`` arguments, ``srun`` and ``mpirun`` lines, ``deepspeed --no_ssh`` arguments with the
hostfile and ``.deepspeed_env`` it needs, and finding the torchrun to start.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from clusterenv._root import absolute_entries, which
from clusterenv.config import ClusterConfig
from clusterenv.errors import LaunchError

__all__ = [
    "INSTALL_TORCH",
    "LAUNCHERS",
    "TORCHRUN_MODULE",
    "accelerate_args",
    "deepspeed_args",
    "deepspeed_env_text",
    "deepspeed_hostfile_text",
    "find_torchrun",
    "mpirun_args",
    "processes_per_node",
    "rendezvous_environ",
    "srun_args",
    "torchrun_args",
    "torchrun_env",
    "write_deepspeed_env",
]

#: The launchers :func:`plan_launch` renders for: ``torchrun`` runs on every node; ``srun`` and
#: ``mpirun`` run once (in the batch script, on the first node) and start every process.
LAUNCHERS: tuple[str, ...] = ("torchrun", "srun", "mpirun")

#: The module ``python -m`` runs when no ``torchrun`` script is on ``PATH``.
TORCHRUN_MODULE = "torch.distributed.run"

INSTALL_TORCH = "pip install torch (the CPU wheel is enough to launch)"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def processes_per_node(config: ClusterConfig, nproc_per_node: int | None) -> int:
    nproc = config.num_trainers if nproc_per_node is None else nproc_per_node
    if nproc < 1:
        raise ValueError(f"nproc_per_node={nproc}: expected at least 1 process per node")
    return nproc


# -- torchrun ----------------------------------------------------------------------------------


def torchrun_args(config: ClusterConfig, *, nproc_per_node: int | None = None) -> list[str]:
    """torchrun's arguments for this node (everything before the script).

    Args:
        config: The cluster contract.
        nproc_per_node: Processes on this node; ``config.num_trainers`` by default.

    Returns:
        On a cluster, e.g. ``["--nnodes=2", "--nproc-per-node=8", "--node-rank=1",
        "--rdzv-backend=static", "--master-addr=10.65.0.2", "--master-port=29500"]``;
        on the local default ``["--standalone", "--nnodes=1", "--nproc-per-node=1"]``.
    """
    nproc = processes_per_node(config, nproc_per_node)
    if config.source == "local":
        return ["--standalone", "--nnodes=1", f"--nproc-per-node={nproc}"]
    return config.torchrun_args(nproc_per_node=nproc)


def torchrun_env(config: ClusterConfig, *, nproc_per_node: int | None = None) -> dict[str, str]:
    """The ``PET_*`` variables that make a bare ``torchrun train.py`` launch this node.

    torchrun reads every option it is not given from ``PET_<OPTION>`` (``--nproc-per-node`` from
    ``PET_NPROC_PER_NODE``); options on the command line still win.

    Args:
        config: The cluster contract.
        nproc_per_node: Processes on this node; ``config.num_trainers`` by default.

    Returns:
        e.g. ``{"PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "1",
        "PET_RDZV_BACKEND": "static", "PET_MASTER_ADDR": "10.65.0.2",
        "PET_MASTER_PORT": "29500"}``.
    """
    nproc = processes_per_node(config, nproc_per_node)
    if config.source == "local":
        return {"PET_STANDALONE": "1", "PET_NNODES": "1", "PET_NPROC_PER_NODE": str(nproc)}
    return {
        "PET_NNODES": str(config.num_nodes),
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_NODE_RANK": str(config.node_rank),
        "PET_RDZV_BACKEND": "static",
        "PET_MASTER_ADDR": config.primary_addr,
        "PET_MASTER_PORT": str(config.primary_port),
    }


def _script_interpreter(path: str) -> str | None:
    """The interpreter a console script names: its ``#!`` line, or the ``exec`` line pip
    writes under ``#!/bin/sh`` when the path is too long for ``#!``; None when it names none
    directly (``#!/usr/bin/env python3`` follows ``PATH``) or cannot be read."""
    try:
        with open(path, "rb") as script:
            head = script.read(1024).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    exec_line = "'''exec' "
    if words and words[0] == "/bin/sh" and len(head) > 1 and head[1].startswith(exec_line):
        words = head[1][len(exec_line):].split()
    if not words or os.path.basename(words[0]) in ("env", "sh", "bash"):
        return None
    return words[0]


def find_torchrun(environ: Mapping[str, str] | None = None) -> list[str]:
    """The command that starts torchrun: ``torchrun`` on ``PATH`` when it runs this
    interpreter (or names none), else ``python -m torch.distributed.run`` with this one.

    A ``torchrun`` on ``PATH`` that belongs to another Python (a virtual environment made with
    ``--system-site-packages`` over a container's PyTorch, whose ``torchrun`` is the system's)
    would start the workers without this environment's packages, clusterenv included: when
    this interpreter can import torch (checked without importing it), it starts torchrun itself.

    Args:
        environ: Where ``PATH`` is read; None reads ``os.environ``.

    Returns:
        e.g. ``["/opt/venv/bin/torchrun"]`` or ``["/usr/bin/python3", "-m",
        "torch.distributed.run"]``.

    Raises:
        LaunchError: When neither exists, naming torchrun and how to install it.
    """
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    found = which("torchrun", path)
    here = importlib.util.find_spec("torch") is not None
    if found is not None:
        interpreter = _script_interpreter(found)
        # One environment is one bin directory, not one file: a venv's python links to the
        # base interpreter, whose packages are not the venv's.
        if (not here or interpreter is None or os.path.realpath(os.path.dirname(interpreter))
                == os.path.realpath(os.path.dirname(sys.executable))):
            return [found]
    if here:
        return [sys.executable, "-m", TORCHRUN_MODULE]
    searched = len(absolute_entries(path, limit=256))
    raise LaunchError(
        f"torchrun not found: none of the {searched} directories on PATH has it, and "
        f"{sys.executable} cannot import torch; install PyTorch in the environment that runs "
        f"the job ({INSTALL_TORCH}) or put its bin directory on PATH"
    )


# -- accelerate --------------------------------------------------------------------------------


def accelerate_args(config: ClusterConfig, *, nproc_per_node: int | None = None) -> list[str]:
    """``accelerate launch`` arguments for this node (everything before the script).

    Accelerate counts *all* processes in ``--num_processes`` (torchrun counts per node), and
    with ``--same_network`` hands ``--main_process_ip``/``--main_process_port`` to torchrun as a
    static rendezvous. ``--multi_gpu`` selects its torchrun-based launcher (Gloo on CPU works
    the same way).

    Args:
        config: The cluster contract.
        nproc_per_node: Processes on this node; ``config.num_trainers`` by default.

    Returns:
        e.g. ``["--num_machines=2", "--machine_rank=1", "--main_process_ip=10.65.0.2",
        "--main_process_port=29500", "--num_processes=16", "--multi_gpu", "--same_network",
        "--rdzv_backend=static"]``.
    """
    nproc = processes_per_node(config, nproc_per_node)
    total = config.num_nodes * nproc
    args = [f"--num_machines={config.num_nodes}", f"--machine_rank={config.node_rank}"]
    if config.source != "local":
        args += [
            f"--main_process_ip={config.primary_addr}",
            f"--main_process_port={config.primary_port}",
        ]
    args.append(f"--num_processes={total}")
    if total > 1:
        args.append("--multi_gpu")
    if config.num_nodes > 1:
        args += ["--same_network", "--rdzv_backend=static"]
    return args


# -- srun and mpirun: one command that starts every process ---------------------------------


def srun_args(config: ClusterConfig, *, nproc_per_node: int | None = None) -> list[str]:
    """``srun`` arguments that start one task per process on every node, in blocks.

    Each task reads its ranks from ``SLURM_*`` (the ``slurm`` source) and inherits srun's whole
    environment (``--export=ALL``), where :func:`rendezvous_environ` puts ``MASTER_ADDR`` and
    ``MASTER_PORT``: no value is ever written into ``--export``'s comma-separated syntax, where
    an address such as ``x,LD_PRELOAD=libevil.so`` would add a variable of its own.

    Returns:
        e.g. ``["--nodes=2", "--ntasks-per-node=8", "--distribution=block", "--export=ALL"]``.
    """
    nproc = processes_per_node(config, nproc_per_node)
    return [
        f"--nodes={config.num_nodes}",
        f"--ntasks-per-node={nproc}",
        "--distribution=block",
        "--export=ALL",
    ]


def rendezvous_environ(config: ClusterConfig) -> dict[str, str]:
    """The variables every rank of an ``srun`` or ``mpirun`` job gets from the launcher's
    environment, e.g. ``{"MASTER_ADDR": "10.65.0.2", "MASTER_PORT": "29500"}``."""
    return {"MASTER_ADDR": config.primary_addr, "MASTER_PORT": str(config.primary_port)}


def mpirun_args(
    config: ClusterConfig,
    *,
    nproc_per_node: int | None = None,
    forward: Sequence[str] = (),
    hostfile: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Open MPI ``mpirun`` arguments: ``nproc_per_node`` ranks on each node, in blocks.

    Open MPI passes no variable it is not told to, so ``MASTER_ADDR``, ``MASTER_PORT`` and the
    names in ``forward`` (the NCCL/Gloo plan's) are exported with ``-x NAME``: each rank gets
    the value from ``mpirun``'s environment (:func:`rendezvous_environ`), never from text on
    the command line.

    Args:
        config: The cluster contract.
        nproc_per_node: Ranks per node; ``config.num_trainers`` by default.
        forward: Further variables to export to every rank, e.g. ``["NCCL_SOCKET_IFNAME"]``.
        hostfile: A hostfile listing every node's cluster address with ``slots=N``; required
            for more than one node (only the user knows every node's address).

    Raises:
        LaunchError: Several nodes and no hostfile.

    Returns:
        e.g. ``["-np", "16", "--map-by", "ppr:8:node", "--hostfile", "hosts", "-x",
        "MASTER_ADDR", "-x", "MASTER_PORT"]``.
    """
    nproc = processes_per_node(config, nproc_per_node)
    args = ["-np", str(config.num_nodes * nproc), "--map-by", f"ppr:{nproc}:node"]
    if config.num_nodes > 1:
        if hostfile is None:
            raise LaunchError(
                f"mpirun over {config.num_nodes} nodes needs a hostfile listing each node's "
                f"cluster address with slots={nproc} (one line per node, the primary "
                f"{config.primary_addr} first); only you know the other nodes' addresses"
            )
        args += ["--hostfile", os.fspath(hostfile)]
    args += ["-x", "MASTER_ADDR", "-x", "MASTER_PORT"]
    for name in forward:
        args += ["-x", name]
    return args


# -- DeepSpeed ---------------------------------------------------------------------------------


def deepspeed_hostfile_text(config: ClusterConfig, *, nproc_per_node: int | None = None) -> str:
    """A DeepSpeed hostfile naming every node, for ``deepspeed --no_ssh``.

    Without a hostfile ``deepspeed`` refuses ``--num_nodes`` above 1 and forces the master
    address to ``127.0.0.1``. With ``--no_ssh`` nothing connects to the names: each node finds
    its own line by ``--node_rank``, so placeholder names are enough.

    Returns:
        e.g. ``"node-0 slots=8\\nnode-1 slots=8\\n"``.
    """
    nproc = processes_per_node(config, nproc_per_node)
    return "".join(f"node-{rank} slots={nproc}\n" for rank in range(config.num_nodes))


def deepspeed_args(
    config: ClusterConfig,
    *,
    nproc_per_node: int | None = None,
    hostfile: str | os.PathLike[str] = "hostfile",
) -> list[str]:
    """``deepspeed`` launcher arguments that start this node on its own (no ssh).

    Args:
        config: The cluster contract.
        nproc_per_node: Processes (GPUs) on this node; ``config.num_trainers`` by default.
        hostfile: Where :func:`deepspeed_hostfile_text` is written (multi-node only).

    Returns:
        e.g. ``["--hostfile=hostfile", "--no_ssh", "--node_rank=1", "--num_nodes=2",
        "--num_gpus=8", "--master_addr=10.65.0.2", "--master_port=29500"]``.
    """
    nproc = processes_per_node(config, nproc_per_node)
    args = [f"--hostfile={os.fspath(hostfile)}"] if config.num_nodes > 1 else []
    return [
        *args,
        "--no_ssh",
        f"--node_rank={config.node_rank}",
        f"--num_nodes={config.num_nodes}",
        f"--num_gpus={nproc}",
        f"--master_addr={config.primary_addr}",
        f"--master_port={config.primary_port}",
    ]


def deepspeed_env_text(env: Mapping[str, str]) -> str:
    """``.deepspeed_env`` text: one ``NAME=value`` line per variable, nothing else.

    DeepSpeed's multi-node runners (pdsh, MPI) export these lines on every node; they read the
    file line by line and split at the first ``=``, so the text has no comments or blank lines.

    Args:
        env: The variables, e.g. ``NcclPlan.env``.

    Returns:
        e.g. ``"GLOO_SOCKET_IFNAME=ens1\\nNCCL_SOCKET_IFNAME=ens1\\n"``.

    Raises:
        ValueError: For a name that is not a variable name or a value with a line break.
    """
    lines = []
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if "\n" in value or "\r" in value:
            raise ValueError(f"{name}={value!r}: a .deepspeed_env value must be one line")
        lines.append(f"{name}={value}\n")
    return "".join(lines)


def write_deepspeed_env(
    path: str | os.PathLike[str], env: Mapping[str, str], *, merge: bool = True
) -> Path:
    """Write ``env`` to a ``.deepspeed_env`` file, keeping other variables already in it.

    Args:
        path: The file, e.g. ``".deepspeed_env"`` (DeepSpeed reads ``~/.deepspeed_env`` and
            ``./.deepspeed_env``).
        env: The variables to write; they replace lines of the same name.
        merge: Keep the file's other lines; False replaces the file.

    Returns:
        The path written.
    """
    target = Path(path)
    merged: dict[str, str] = {}
    if merge and target.is_file():
        for line in target.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and _ENV_NAME.fullmatch(name.strip()):
                merged[name.strip()] = value
    merged.update(env)
    target.write_text(deepspeed_env_text(merged))
    return target

