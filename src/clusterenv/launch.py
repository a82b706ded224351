"""Launcher arguments and environments rendered from one :class:`~clusterenv.ClusterConfig`.

One config, every launcher: ``torchrun`` arguments and the ``PET_*`` variables torchrun reads
in their place, ``accelerate launch`` arguments, ``deepspeed --no_ssh`` arguments with the
hostfile and ``.deepspeed_env`` it needs, and :func:`launch`, which applies the NCCL plan and
replaces this process with torchrun (what ``clusterenv launch`` does).

Every renderer uses a static rendezvous on ``PRIMARY_ADDR:PRIMARY_PORT`` with this node's
``NODE_RANK``: Runpod does not support torchrun's dynamic ``c10d`` rendezvous, which advertises
the host name (often ``127.0.1.1`` in ``/etc/hosts``) to the other nodes. On a machine with no
cluster variables (the ``local`` source) torchrun gets ``--standalone`` instead, so a busy port
29500 never gets in the way.

Example::

    from clusterenv import ClusterConfig
    from clusterenv.launch import accelerate_args, torchrun_args

    cfg = ClusterConfig.from_env()
    torchrun_args(cfg)    # ['--nnodes=2', '--nproc-per-node=8', '--node-rank=1', ...]
    accelerate_args(cfg)  # ['--num_machines=2', '--machine_rank=1', ..., '--num_processes=16']
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from clusterenv._facts import Facts
from clusterenv._root import absolute_entries, as_root, which
from clusterenv._text import count
from clusterenv.config import ClusterConfig
from clusterenv.diagnosis import diagnose_facts
from clusterenv.errors import LaunchError
from clusterenv.findings import Finding
from clusterenv.nccl.plan import NcclPlan, plan_from_facts

__all__ = [
    "LAUNCHERS",
    "TORCHRUN_MODULE",
    "LaunchPlan",
    "accelerate_args",
    "deepspeed_args",
    "deepspeed_env_text",
    "deepspeed_hostfile_text",
    "exec_plan",
    "find_torchrun",
    "launch",
    "mpirun_args",
    "plan_launch",
    "refusal",
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

_INSTALL_TORCH = "pip install torch (the CPU wheel is enough to launch)"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _nproc(config: ClusterConfig, nproc_per_node: int | None) -> int:
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
    nproc = _nproc(config, nproc_per_node)
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
    nproc = _nproc(config, nproc_per_node)
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
        f"the job ({_INSTALL_TORCH}) or put its bin directory on PATH"
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
    nproc = _nproc(config, nproc_per_node)
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
    nproc = _nproc(config, nproc_per_node)
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
    nproc = _nproc(config, nproc_per_node)
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
    nproc = _nproc(config, nproc_per_node)
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
    nproc = _nproc(config, nproc_per_node)
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


# -- clusterenv launch -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """What :func:`launch` runs, with which environment changes, and why.

    Attributes:
        config: The cluster contract the command was built from.
        command: The full command, e.g. ``("/opt/venv/bin/torchrun", "--nnodes=2", ...,
            "train.py", "--lr", "3e-4")``.
        nccl: The NCCL/Gloo/TensorPipe plan applied to the environment before the exec.
        findings: What to know before launching: doctor's verdict on the environment the job
            gets (after the plan) and the launch's own (``launch-nproc-exceeds-gpus``,
            ``launch-torchrun-missing``, …). An error among them makes :attr:`refused` true.
        environ: The complete environment the command gets (not printed: it may hold secrets).
        rendezvous: What the launch puts in that environment for ``srun`` and ``mpirun`` to
            hand every rank (:func:`rendezvous_environ`); empty for torchrun, which gets the
            rendezvous as arguments.
    """

    config: ClusterConfig
    command: tuple[str, ...]
    nccl: NcclPlan
    findings: tuple[Finding, ...]
    environ: Mapping[str, str] = field(repr=False)
    rendezvous: Mapping[str, str] = field(default_factory=dict)

    @property
    def changes(self) -> dict[str, str]:
        """The variables the launch adds or replaces, e.g. ``{"GLOO_SOCKET_IFNAME": "ens1"}``."""
        return {**self.nccl.env, **self.rendezvous}

    @property
    def errors(self) -> tuple[Finding, ...]:
        """The findings that say the job cannot work as planned (severity ``error``)."""
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def refused(self) -> bool:
        """Whether an error remains after the plan: the job, started now, fails or hangs, so
        :func:`exec_plan` refuses to start it unless forced."""
        return bool(self.errors)


def plan_launch(
    environ: Mapping[str, str] | None = None,
    *,
    command: Sequence[str],
    root: str | os.PathLike[str] = "/",
    nproc_per_node: int | None = None,
    override: bool = False,
    debug: bool = False,
    torchrun: Sequence[str] | None = None,
    nccl_version: str | None = None,
    launcher: str = "torchrun",
) -> LaunchPlan:
    """Build the torchrun command and environment for this node; runs nothing, changes nothing.

    Args:
        command: The script and its arguments, e.g. ``["train.py", "--lr", "3e-4"]``; torchrun
            options may come first (``["--max-restarts=3", "train.py"]``) and win over ours.
        environ: The environment to start from; None reads ``os.environ`` at call time.
        root: ``/`` or a host snapshot.
        nproc_per_node: Processes on this node instead of ``NUM_TRAINERS``.
        override: Let the NCCL plan replace user values that differ from the evidenced ones.
        debug: Also set ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS=INIT,NET``.
        torchrun: The torchrun command; found with :func:`find_torchrun` when None.
        nccl_version: Assume this NCCL version (e.g. ``"2.19.3"``) instead of detecting it.
        launcher: ``"torchrun"`` (run on every node), or ``"srun"`` / ``"mpirun"`` (run
            once, e.g. in the batch script: the command starts ``python SCRIPT`` on every node;
            see :func:`srun_args` and :func:`mpirun_args`).

    Returns:
        The plan, whose ``command`` is e.g. ``("/opt/venv/bin/torchrun", "--nnodes=2", ...)``.

    Raises:
        ConfigError: When the cluster environment is invalid.
        LaunchError: When there is no script, or this process is already a launched worker.
        ValueError: When ``nproc_per_node`` is below 1.
    """
    env = dict(os.environ if environ is None else environ)
    host_root = as_root(root)
    if not command:
        raise LaunchError(
            "nothing to launch: give the training script and its arguments, e.g. "
            "`clusterenv launch -- train.py --lr 3e-4`"
        )
    config = ClusterConfig.from_env(env, root=host_root)
    if config.process is not None:
        raise LaunchError(
            f"this process is already a launched worker (RANK={config.process.rank}, "
            f"LOCAL_RANK={config.process.local_rank}): starting torchrun inside a worker "
            "would start a second job; run `clusterenv launch` from the node's shell, not from "
            "a training script"
        )
    nproc = _nproc(config, nproc_per_node)
    findings: list[Finding] = []
    if torchrun is None and launcher == "torchrun":
        try:
            torchrun = find_torchrun(env)
        except LaunchError as e:
            torchrun = ["torchrun"]
            findings.append(Finding.of(
                "launch-torchrun-missing", str(e), (), _INSTALL_TORCH,
            ))
    facts = Facts(environ=env, root=host_root, config=config, nccl_version=nccl_version)
    nccl = plan_from_facts(facts, override=override, debug=debug)
    findings += _process_count_findings(config, nproc, env, facts.host.gpus)
    launch_env = {**env, **nccl.env}
    # Judge the environment the job will get, as doctor would after `eval "$(clusterenv env)"`:
    # what remains is what launch refuses on.
    after = Facts(environ=launch_env, root=host_root, config=config, network=facts.network,
                  rdma=facts.rdma, host=facts.host)
    remaining = diagnose_facts(after, debug=debug).findings
    findings += [f for f in remaining if f.code not in _NOT_FOR_LAUNCH]
    tool = which(launcher, env.get("PATH")) or launcher
    if launcher == "srun":
        argv: tuple[str, ...] = (tool, *srun_args(config, nproc_per_node=nproc),
                                 sys.executable, *command)
    elif launcher == "mpirun":
        argv = (tool, *mpirun_args(config, nproc_per_node=nproc, forward=sorted(nccl.env)),
                sys.executable, *command)
    elif launcher == "torchrun":
        argv = (*(torchrun or ["torchrun"]), *torchrun_args(config, nproc_per_node=nproc),
                *command)
    else:
        raise LaunchError(f"launcher {launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    rendezvous = rendezvous_environ(config) if launcher in ("srun", "mpirun") else {}
    return LaunchPlan(config, tuple(argv), nccl, tuple(dict.fromkeys(findings)),
                      {**launch_env, **rendezvous}, rendezvous)


#: doctor's codes that launch itself takes care of: it is the launcher, and its rendezvous is
#: static on the address (a host name on loopback only misleads c10d's).
_NOT_FOR_LAUNCH = frozenset({"launcher-missing", "hostname-loopback"})


def _process_count_findings(
    config: ClusterConfig, nproc: int, environ: Mapping[str, str], gpus: int
) -> list[Finding]:
    out: list[Finding] = []
    if gpus and nproc > gpus:
        out.append(Finding.of(
            "launch-nproc-exceeds-gpus",
            f"{nproc} processes per node but {count(gpus, 'GPU')} visible: the extra processes "
            "fail with 'CUDA error: invalid device ordinal' or share a GPU",
            (f"processes per node: {nproc}", f"visible GPUs: {gpus}",
             f"CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}"),
            f"--nproc-per-node={gpus}",
        ))
    if config.source != "local" and nproc != config.num_trainers:
        out.append(Finding.of(
            "launch-nproc-differs",
            f"{nproc} processes per node instead of NUM_TRAINERS={config.num_trainers}: the job "
            f"has {nproc * config.num_nodes} processes, not WORLD_SIZE={config.world_size}",
            (f"--nproc-per-node={nproc}", f"NUM_TRAINERS={config.num_trainers}"),
            "use the same --nproc-per-node on every node",
        ))
    return out


def launch(
    command: Sequence[str],
    *,
    environ: Mapping[str, str] | None = None,
    root: str | os.PathLike[str] = "/",
    nproc_per_node: int | None = None,
    override: bool = False,
    debug: bool = False,
    force: bool = False,
) -> NoReturn:
    """Apply the NCCL plan and replace this process with torchrun; never returns.

    The exit status of the job is torchrun's own: this process *becomes* torchrun. When an
    error remains after the plan (the job would fail or hang), nothing is started unless
    ``force=True``.

    Args:
        command: The script and its arguments, e.g. ``["train.py", "--lr", "3e-4"]``.
        environ: The environment to start from; None uses ``os.environ``.
        root: ``/`` or a host snapshot (for testing the plan; the job runs here).
        nproc_per_node: Processes on this node instead of ``NUM_TRAINERS``.
        override: Let the NCCL plan replace user values that differ from the evidenced ones.
        debug: Also set ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS=INIT,NET``.
        force: Start the job even when an error remains.

    Raises:
        ConfigError: When the cluster environment is invalid.
        LaunchError: When an error remains (without ``force``), or torchrun is missing or
            cannot be started.
    """
    plan = plan_launch(environ, command=command, root=root, nproc_per_node=nproc_per_node,
                       override=override, debug=debug)
    exec_plan(plan, force=force)


def refusal(plan: LaunchPlan, *, force: str = "force=True") -> str:
    """Why :func:`exec_plan` refuses ``plan``, naming each remaining error, e.g.
    ``"refusing to start the job: 1 error remains: filter-selects-avoided (...); ..."``.

    ``force`` is how the caller's user starts it anyway: ``"force=True"`` in Python, the
    command line passes ``"--force"``."""
    errors = plan.errors
    listed = "; ".join(f"{f.code} ({f.title})" for f in errors)
    return (f"refusing to start the job: {len(errors)} error{'s' if len(errors) != 1 else ''} "
            f"remain{'s' if len(errors) == 1 else ''} after the plan, so it would fail or hang: "
            f"{listed}; fix {'it' if len(errors) == 1 else 'them'} (`clusterenv doctor` shows "
            f"the fixes), or pass {force} to start it anyway")


def exec_plan(plan: LaunchPlan, *, force: bool = False) -> NoReturn:
    """Replace this process with ``plan.command`` in ``plan.environ``; never returns.

    Raises:
        LaunchError: When an error remains (without ``force``), or torchrun is missing or the
            exec fails.
    """
    for finding in plan.findings:
        if finding.code == "launch-torchrun-missing":
            raise LaunchError(finding.title)
    if plan.refused and not force:
        raise LaunchError(refusal(plan))
    if not os.path.isabs(plan.command[0]):
        # execve resolves a bare name against the current directory, never against PATH.
        raise LaunchError(
            f"{plan.command[0]} not found: no absolute directory on PATH holds it "
            f"(PATH={plan.environ.get('PATH', '')!r}); install it or put its directory on PATH"
        )
    sys.stdout.flush()  # exec discards Python's buffers
    sys.stderr.flush()
    try:
        # exec, not a child process: the job's exit status and signals are torchrun's own
        os.execve(plan.command[0], list(plan.command), dict(plan.environ))  # noqa: S606
    except OSError as e:
        name = os.path.basename(plan.command[0])
        hint = _INSTALL_TORCH if "torchrun" in name or "python" in name else "install it"
        raise LaunchError(
            f"could not start {plan.command[0]!r}: {e.strerror or e}; check that it is an "
            f"executable {name} ({hint})"
        ) from e
