"""``clusterenv launch``: apply the NCCL plan, judge the environment the job will get, and
replace this process with the launcher (:func:`launch`); :func:`plan_launch` says what it would
do without doing it.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from clusterenv._facts import Facts
from clusterenv._root import Root, as_root, which
from clusterenv._text import count
from clusterenv.config import ClusterConfig
from clusterenv.diagnosis import diagnose_facts
from clusterenv.errors import LaunchError
from clusterenv.findings import Finding
from clusterenv.hang.enable import RecorderPlan, job_directory, plan_recorder
from clusterenv.hang.record import LaunchRecord, write_launch_record
from clusterenv.hang.recorder import HANG_DIR_VARIABLE
from clusterenv.launch.lines import (
    INSTALL_TORCH,
    LAUNCHERS,
    find_torchrun,
    mpirun_args,
    processes_per_node,
    rendezvous_environ,
    srun_args,
    torchrun_args,
)
from clusterenv.nccl.plan import NcclPlan, plan_from_facts

__all__ = ["LaunchPlan", "exec_plan", "launch", "plan_launch", "refusal"]


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
        recorder: The flight-recorder variables set or kept (see :mod:`clusterenv.hang.
            enable`); None when turned off.
        record: The launch record written into the job's dump directory just before the
            start (torchrun only: ``srun`` and ``mpirun`` start every node from one place).
    """

    config: ClusterConfig
    command: tuple[str, ...]
    nccl: NcclPlan
    findings: tuple[Finding, ...]
    environ: Mapping[str, str] = field(repr=False)
    rendezvous: Mapping[str, str] = field(default_factory=dict)
    recorder: RecorderPlan | None = None
    record: LaunchRecord | None = None

    @property
    def changes(self) -> dict[str, str]:
        """The variables the launch adds or replaces, e.g. ``{"GLOO_SOCKET_IFNAME": "ens1"}``."""
        return {**self.nccl.env, **(self.recorder.env if self.recorder else {}),
                **self.rendezvous}

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
    flight_recorder: bool = True,
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
        flight_recorder: Turn PyTorch's flight recorder on where unset and plan the launch
            record (see :mod:`clusterenv.hang.enable`), so ``clusterenv hang`` can name the
            rank and node that stopped.

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
    nproc = processes_per_node(config, nproc_per_node)
    findings: list[Finding] = []
    if torchrun is None and launcher == "torchrun":
        try:
            torchrun = find_torchrun(env)
        except LaunchError as e:
            torchrun = ["torchrun"]
            findings.append(Finding.of(
                "launch-torchrun-missing", str(e), (), INSTALL_TORCH,
            ))
    facts = Facts(environ=env, root=host_root, config=config, nccl_version=nccl_version)
    nccl = plan_from_facts(facts, override=override, debug=debug)
    findings += _process_count_findings(config, nproc, env, facts.host.gpus)
    recorder = None
    if flight_recorder:
        # launch execs torchrun, so this pid is the agent's, the workers' parent: they name
        # the same job directory (see hang.enable.job_directory)
        recorder = plan_recorder(env, directory=job_directory(env, agent_pid=os.getpid()),
                                 host=_host_name(host_root))
    launch_env = {**env, **nccl.env, **(recorder.env if recorder else {})}
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
        forward = sorted({**nccl.env, **(recorder.env if recorder else {})})
        argv = (tool, *mpirun_args(config, nproc_per_node=nproc, forward=forward),
                sys.executable, *command)
    elif launcher == "torchrun":
        argv = (*(torchrun or ["torchrun"]), *torchrun_args(config, nproc_per_node=nproc),
                *command)
    else:
        raise LaunchError(f"launcher {launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    unique = tuple(dict.fromkeys(findings))
    record = None
    if recorder is not None and launcher == "torchrun":
        record = LaunchRecord(
            node_rank=config.node_rank, num_nodes=config.num_nodes, nproc_per_node=nproc,
            first_rank=config.node_rank * nproc, host=_host_name(host_root),
            node_addr=config.node_addr, primary=config.host_node_addr,
            started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            doctor=tuple(f"{f.severity}[{f.code}]: {f.title}"[:300] for f in unique)[:32],
        )
    rendezvous = rendezvous_environ(config) if launcher in ("srun", "mpirun") else {}
    return LaunchPlan(config, tuple(argv), nccl, unique, {**launch_env, **rendezvous},
                      rendezvous, recorder, record)


def _host_name(root: Root) -> str:
    """This node's host name (a snapshot's recorded one under ``--root``)."""
    if not root.is_live:
        recorded = root.host.get("hostname")
        if isinstance(recorded, str) and recorded:
            return recorded
    return socket.gethostname()


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
    flight_recorder: bool = True,
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
        flight_recorder: Turn PyTorch's flight recorder on where unset and write the launch
            record (see :func:`plan_launch`).

    Raises:
        ConfigError: When the cluster environment is invalid.
        LaunchError: When an error remains (without ``force``), or torchrun is missing or
            cannot be started.
    """
    plan = plan_launch(environ, command=command, root=root, nproc_per_node=nproc_per_node,
                       override=override, debug=debug, flight_recorder=flight_recorder)
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
    if plan.record is not None and plan.recorder is not None:
        directory = plan.environ.get(HANG_DIR_VARIABLE, str(plan.recorder.directory))
        try:
            write_launch_record(directory, plan.record)
        except OSError as e:  # the job matters more than its record: say so and go on
            print(f"clusterenv launch: note: no launch record written in {directory}: "
                  f"{e.strerror or e}; `clusterenv hang` will report ranks without nodes",
                  file=sys.stderr)
    sys.stdout.flush()  # exec discards Python's buffers
    sys.stderr.flush()
    try:
        # exec, not a child process: the job's exit status and signals are torchrun's own
        os.execve(plan.command[0], list(plan.command), dict(plan.environ))  # noqa: S606
    except OSError as e:
        name = os.path.basename(plan.command[0])
        hint = INSTALL_TORCH if "torchrun" in name or "python" in name else "install it"
        raise LaunchError(
            f"could not start {plan.command[0]!r}: {e.strerror or e}; check that it is an "
            f"executable {name} ({hint})"
        ) from e
