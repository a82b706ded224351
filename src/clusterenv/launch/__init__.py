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

from clusterenv.launch.lines import (
    LAUNCHERS,
    TORCHRUN_MODULE,
    accelerate_args,
    deepspeed_args,
    deepspeed_env_text,
    deepspeed_hostfile_text,
    find_torchrun,
    mpirun_args,
    rendezvous_environ,
    srun_args,
    torchrun_args,
    torchrun_env,
    write_deepspeed_env,
)
from clusterenv.launch.plan import LaunchPlan, exec_plan, launch, plan_launch, refusal

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
