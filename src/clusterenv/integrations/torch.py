"""``init_process_group()`` for PyTorch: the cluster's defaults, the right backend, clear errors.

torch is imported only when :func:`init_process_group` runs, never when this module is imported.

- Inside a worker started by torchrun (or ``clusterenv launch``): apply the NCCL/Gloo plan to the
  environment, pick ``nccl`` when CUDA is available and ``gloo`` otherwise, select the GPU
  ``LOCAL_RANK`` and join the launcher's rendezvous (``env://``).
- Started without a launcher while the environment describes a multi-process job (Runpod's
  ``WORLD_SIZE`` and ``NODE_RANK`` are set, ``RANK`` is not): raise :class:`LaunchError` with the
  exact command to use, instead of torch's "environment variable RANK expected, but not set".
- A single process on a laptop: a world of one, through an in-memory store (no port, no network,
  ``os.environ`` untouched).
- Inside a worker, PyTorch's flight recorder is turned on where unset
  (:func:`clusterenv.hang.apply_recorder`: buffer size, dump location, NCCL dump on timeout), and
  the recorder is dumped when a collective fails (Gloo, and NCCL without dump-on-timeout), so
  ``clusterenv hang`` can name the rank that stopped.

Example::

    from clusterenv.integrations.torch import init_process_group

    info = init_process_group()        # instead of torch.distributed.init_process_group()
    model = model.to(info.device)
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from clusterenv.errors import LaunchError

if TYPE_CHECKING:
    from clusterenv.config import ClusterConfig
    from clusterenv.hang.enable import RecorderPlan
    from clusterenv.nccl import NcclPlan

__all__ = [
    "TORCH_RANK_MESSAGE",
    "ProcessGroupInfo",
    "init_process_group",
    "missing_launcher_message",
]

#: What ``torch.distributed`` says when a script that expects a launcher runs without one.
TORCH_RANK_MESSAGE = "environment variable RANK expected, but not set"


@dataclass(frozen=True, slots=True)
class ProcessGroupInfo:
    """The default process group :func:`init_process_group` created.

    Attributes:
        backend: ``"nccl"`` or ``"gloo"`` (or what was asked for).
        rank: This process's global rank, e.g. ``3``.
        world_size: Processes in the group, e.g. ``4``.
        local_rank: Rank on this node, e.g. ``1``; also the CUDA device index.
        device: Where this rank's tensors belong, e.g. ``"cuda:1"`` or ``"cpu"``.
        launched: Whether a launcher started this process (False: a world of one).
        plan: The NCCL/Gloo plan applied first; None when nothing was applied.
        recorder: The flight-recorder variables set or kept; None when not launched or
            ``flight_recorder=False``.
        dump_on_failure: Whether this process dumps the recorder when a collective fails
            (into the dump location the recorder plan names).
    """

    backend: str
    rank: int
    world_size: int
    local_rank: int
    device: str
    launched: bool
    plan: NcclPlan | None = None
    recorder: RecorderPlan | None = None
    dump_on_failure: bool = False


def _script_command(argv: Sequence[str] | None) -> str:
    args = list(sys.argv if argv is None else argv)
    if not args or args[0] in ("", "-c", "-m"):
        return "train.py"
    return shlex.join(args)


def missing_launcher_message(config: ClusterConfig, argv: Sequence[str] | None = None) -> str:
    """The explanation for a script started without a launcher on a multi-process cluster.

    Args:
        config: The cluster contract (node-level: no process context).
        argv: The script and its arguments; ``sys.argv`` by default.

    Returns:
        A message quoting torch's ``environment variable RANK expected, but not set`` and
        giving both ``clusterenv launch -- train.py …`` and the equivalent torchrun line.
    """
    from clusterenv.launch import torchrun_args

    script = _script_command(argv)
    torchrun = shlex.join(["torchrun", *torchrun_args(config)])
    return (
        f"this process was started without a launcher, but the environment (source "
        f"{config.source}) describes a job of {config.num_nodes} node(s) x "
        f"{config.num_trainers} processes (WORLD_SIZE={config.world_size}); "
        f"torch.distributed would fail with '{TORCH_RANK_MESSAGE}'. Start the script with a "
        f"launcher, on every node:\n"
        f"    clusterenv launch -- {script}\n"
        f"or, without clusterenv, on this node (node rank {config.node_rank}):\n"
        f"    {torchrun} {script}"
    )


#: What torch's ``env://`` rendezvous reads.
_ENV_INIT = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


def _timeout(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=float(value))


def init_process_group(
    backend: str | None = None,
    *,
    timeout: timedelta | float | None = None,
    environ: MutableMapping[str, str] | None = None,
    apply_defaults: bool = True,
    root: str | os.PathLike[str] = "/",
    flight_recorder: bool = True,
    **kwargs: Any,
) -> ProcessGroupInfo:
    """Create torch's default process group the way this cluster needs it.

    Args:
        backend: ``"nccl"``, ``"gloo"``, …; None picks ``nccl`` with CUDA, else ``gloo``.
        timeout: For the rendezvous and collectives (a ``timedelta`` or seconds); None keeps
            torch's default.
        environ: Where the cluster contract is read and the NCCL/Gloo defaults are written;
            None is ``os.environ`` (what NCCL, Gloo and ``env://`` read: pass another mapping
            only to test the decisions).
        apply_defaults: Apply :func:`clusterenv.apply_nccl_defaults` inside a launched worker.
        root: ``/`` or a host snapshot, for the plan.
        flight_recorder: Inside a launched worker, turn PyTorch's flight recorder on where
            unset (:func:`clusterenv.hang.apply_recorder`) and dump it when a collective
            fails, for ``clusterenv hang``.
        **kwargs: Passed on to ``torch.distributed.init_process_group`` (e.g. ``device_id``).

    Returns:
        The group's backend, rank, world size, local rank and device.

    Raises:
        LaunchError: Started without a launcher on a multi-process cluster (the message gives
            the command), or ``LOCAL_RANK`` names a GPU that is not visible.
        ConfigError: When the cluster environment is invalid.
    """
    from clusterenv.config import ClusterConfig

    env: MutableMapping[str, str] = os.environ if environ is None else environ
    config = ClusterConfig.from_env(env, root=root)
    launched = config.process is not None or "RANK" in env
    if not launched and config.source != "local" and config.world_size > 1:
        raise LaunchError(missing_launcher_message(config))
    plan = None
    if launched and apply_defaults:
        from clusterenv.nccl import apply_nccl_defaults

        plan = apply_nccl_defaults(env, root=root)
    recorder = None
    if launched and flight_recorder:
        from clusterenv.hang.enable import apply_recorder

        recorder = apply_recorder(env)  # before the first process group: torch reads it then

    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise LaunchError("this torch build has no torch.distributed: install a build with it")
    cuda = bool(torch.cuda.is_available())
    chosen = backend or ("nccl" if cuda else "gloo")
    if launched:
        local_rank = config.process.local_rank if config.process else int(env.get("LOCAL_RANK", 0))
    else:
        local_rank = 0
    device = "cpu"
    if cuda:
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise LaunchError(
                f"LOCAL_RANK={local_rank} but only {count} GPU(s) are visible "
                f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', '(unset)')}): start at "
                f"most {count} processes per node (--nproc-per-node={count})"
            )
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    options: dict[str, Any] = dict(kwargs)
    if timeout is not None:
        options["timeout"] = _timeout(timeout)
    if launched and all(env.get(n) for n in _ENV_INIT):
        options.setdefault("init_method", "env://")
        dist.init_process_group(backend=chosen, **options)
    elif launched and config.process is not None:
        # A launcher that does not export torch's env:// names (mpirun, srun, Lightning's
        # children): the ranks come from the config, the store from the primary's address.
        options.setdefault("init_method", f"tcp://{config.host_node_addr}")
        options.setdefault("rank", config.process.rank)
        options.setdefault("world_size", config.world_size)
        dist.init_process_group(backend=chosen, **options)
    elif launched:
        options.setdefault("init_method", "env://")
        dist.init_process_group(backend=chosen, **options)
    else:
        # A world of one: an in-memory store needs no port and leaves os.environ alone.
        store = dist.HashStore()  # type: ignore[attr-defined,unused-ignore]
        dist.init_process_group(backend=chosen, store=store, rank=0, world_size=1, **options)
    dumping = recorder is not None and _dump_on_failure(env, recorder, str(dist.get_backend()),
                                                         config, local_rank)
    return ProcessGroupInfo(
        backend=str(dist.get_backend()),
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        device=device,
        launched=launched,
        plan=plan,
        recorder=recorder,
        dump_on_failure=dumping,
    )


def _dump_on_failure(env: MutableMapping[str, str], recorder: RecorderPlan, backend: str,
                     config: ClusterConfig, local_rank: int) -> bool:
    """Install the dump-on-failure hook unless torch dumps by itself (an NCCL build that reads
    ``TORCH_NCCL_DUMP_ON_TIMEOUT``, with it on) or no dump location is known."""
    import torch.distributed as dist

    from clusterenv.hang.recorder import DUMP_FILE_NAMES, DUMP_ON_TIMEOUT
    from clusterenv.integrations import _fr_dump

    names = recorder.torch.dump_file if recorder.torch is not None else DUMP_FILE_NAMES
    prefix = next((env[n] for n in names if env.get(n)), None)
    if prefix is None:
        return False
    torch_dumps = recorder.torch is not None and recorder.torch.dump_on_timeout is True
    if "nccl" in backend and torch_dumps and env.get(DUMP_ON_TIMEOUT, "").strip().lower() in (
            "1", "y", "yes", "t", "true"):
        return False  # the NCCL watchdog writes the dump itself
    node = env.get("GROUP_RANK")
    _fr_dump.install(prefix=prefix, rank=dist.get_rank(), world_size=dist.get_world_size(),
                     backend=backend, local_rank=local_rank,
                     node_rank=int(node) if node and node.isdigit() else config.node_rank)
    return True
