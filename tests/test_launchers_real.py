"""The real launchers start real workers, and every worker reads its place through ``from_env()``.

- DeepSpeed's launcher (``deepspeed --no_ssh`` with the arguments clusterenv renders, CPU
  accelerator): workers get ``LOCAL_SIZE``/``CROSS_*`` and no ``LOCAL_WORLD_SIZE``;
- Lightning Fabric started with ``python train.py`` and ``devices=2``, with
  ``ClusterEnvEnvironment``, with and without Runpod variables;
- Open MPI's ``mpirun --allow-run-as-root -np 2``;
- Slurm: a one-host cluster (``slurmctld`` + ``slurmd`` + ``munged`` started here) and
  ``srun -N1 -n2``.

Each worker runs a Gloo all-reduce through ``clusterenv.integrations.torch.init_process_group``
(or Fabric), and the ranks ``from_env()`` gave must be the ones torch.distributed (and the
launcher's own variables) report. Under ``CI=true`` a missing launcher fails instead of skipping.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterenv import ClusterConfig
from clusterenv.launch import deepspeed_args
from tests.conftest import require_module, require_tool, skip_or_fail
from tests.simcluster import base_env

pytestmark = pytest.mark.torch

# One worker script for every launcher: read the config, join the group, all-reduce rank+1.
WORKER = """\
import json, os, sys
from clusterenv import ClusterConfig
from clusterenv.integrations.torch import init_process_group
import torch
import torch.distributed as dist

cfg = ClusterConfig.from_env()
info = init_process_group("gloo", apply_defaults=False, timeout=120)
total = torch.tensor([float(cfg.process.rank + 1)])
dist.all_reduce(total)
launcher = {k: v for k, v in os.environ.items()
            if k.startswith(("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "OMPI_COMM_WORLD",
                             "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "CROSS_"))}
derived = None
if "SLURM_JOB_ID" in os.environ:  # the primary Slurm's host list gives, without MASTER_ADDR
    plain = {k: v for k, v in os.environ.items() if k != "MASTER_ADDR"}
    derived = ClusterConfig.from_env(plain).primary_addr
os.write(1, ("RESULT " + json.dumps({
    "source": cfg.source, "rank": cfg.process.rank, "local_rank": cfg.process.local_rank,
    "local_world": cfg.process.local_world_size, "world": cfg.world_size,
    "nodes": cfg.num_nodes, "dist_rank": dist.get_rank(), "dist_world": dist.get_world_size(),
    "sum": total.item(), "env": launcher, "derived_primary": derived,
}) + "\\n").encode())  # one write(2): the ranks share the pipe, a print() could interleave
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def results(output: str) -> list[dict[str, Any]]:
    found = [json.loads(line[len("RESULT "):]) for line in output.splitlines()
             if line.startswith("RESULT ")]
    return sorted(found, key=lambda r: r["rank"])


def check_two_workers(found: list[dict[str, Any]], source: str) -> None:
    assert [r["rank"] for r in found] == [0, 1]
    for r in found:
        assert r["source"] == source
        assert (r["dist_rank"], r["dist_world"]) == (r["rank"], 2)
        assert (r["local_rank"], r["local_world"], r["world"], r["nodes"]) == (r["rank"], 2, 2, 1)
        assert r["sum"] == 3.0


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    require_module("torch", "pip install torch")
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    return script


def test_deepspeed_no_ssh_workers_read_their_ranks(worker: Path, tmp_path: Path) -> None:
    require_module("deepspeed.launcher.runner", "pip install deepspeed")
    port = free_port()
    config = ClusterConfig.from_env(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NUM_TRAINERS": "2"}
    )
    argv = [sys.executable, "-m", "deepspeed.launcher.runner",
            *deepspeed_args(config, nproc_per_node=2), str(worker)]
    proc = subprocess.run(argv, env={**base_env(), "DS_ACCELERATOR": "cpu"}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, check=False)
    found = results(proc.stdout)
    assert proc.returncode == 0 and len(found) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_two_workers(found, "deepspeed")
    for r in found:  # what DeepSpeed gave, with no LOCAL_WORLD_SIZE among it
        assert r["env"]["LOCAL_SIZE"] == "2" and r["env"]["CROSS_SIZE"] == "1"
        assert "LOCAL_WORLD_SIZE" not in r["env"] and r["env"]["RANK"] == str(r["rank"])


def test_open_mpi_ranks_agree_with_torch(worker: Path, tmp_path: Path) -> None:
    mpirun = require_tool("mpirun", "apt-get install openmpi-bin")
    env = base_env()
    forwarded = [arg for name in ("PATH", "PYTHONPATH", "VIRTUAL_ENV") if name in env
                 for arg in ("-x", name)]
    argv = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", *forwarded,
            "-x", f"MASTER_PORT={free_port()}", sys.executable, str(worker)]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, check=False)
    found = results(proc.stdout)
    assert proc.returncode == 0 and len(found) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_two_workers(found, "mpi")
    for r in found:
        assert r["env"]["OMPI_COMM_WORLD_RANK"] == str(r["rank"])
        assert "RANK" not in r["env"]  # mpirun exports no torch names: from_env found them


# -- Lightning: `python train.py` with devices=2 -------------------------------------------

FABRIC = """\
import json, os, sys
import lightning as L
import torch
from clusterenv import ClusterConfig
from clusterenv.integrations.lightning import ClusterEnvEnvironment

env = ClusterEnvEnvironment()
fabric = L.Fabric(accelerator="cpu", devices=2, num_nodes=1, strategy="ddp", plugins=[env])
fabric.launch()
cfg = ClusterConfig.from_env()
total = fabric.all_reduce(torch.tensor([float(fabric.global_rank + 1)]), reduce_op="sum")
os.write(1, ("RESULT " + json.dumps({
    "source": cfg.source, "rank": cfg.process.rank, "local_rank": cfg.process.local_rank,
    "local_world": cfg.process.local_world_size, "world": cfg.world_size,
    "nodes": cfg.num_nodes, "dist_rank": fabric.global_rank, "dist_world": fabric.world_size,
    "sum": total.item(), "env": {}, "derived_primary": None,
}) + "\\n").encode())  # one write(2): the ranks share the pipe, a print() could interleave
"""


def _runpod_one_node(port: int, trainers: int) -> dict[str, str]:
    return {"PRIMARY_ADDR": "127.0.0.1", "MASTER_ADDR": "127.0.0.1", "NODE_ADDR": "127.0.0.1",
            "PRIMARY_PORT": str(port), "MASTER_PORT": str(port), "NODE_RANK": "0",
            "NUM_NODES": "1", "NUM_TRAINERS": str(trainers), "WORLD_SIZE": str(trainers),
            "HOST_NODE_ADDR": f"127.0.0.1:{port}"}


def _run_fabric(tmp_path: Path, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    require_module("lightning", "pip install lightning")
    require_module("torch", "pip install torch")
    script = tmp_path / "train.py"
    script.write_text(FABRIC, encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], env={**base_env(), **extra},
                          cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.parametrize("runpod", [False, True], ids=["no-cluster-variables", "runpod-node"])
def test_lightning_children_read_their_ranks(tmp_path: Path, runpod: bool) -> None:
    extra = _runpod_one_node(free_port(), 2) if runpod else {}
    proc = _run_fabric(tmp_path, extra)
    found = results(proc.stdout)
    assert proc.returncode == 0 and len(found) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_two_workers(found, "lightning")


def test_lightning_with_fewer_devices_than_num_trainers_is_refused_up_front(
    tmp_path: Path,
) -> None:
    proc = _run_fabric(tmp_path, _runpod_one_node(free_port(), 4))
    assert proc.returncode != 0
    assert "devices=2 but this node runs 4 processes" in proc.stderr
    assert "HINT: set devices=4" in proc.stderr
    assert results(proc.stdout) == []  # no child was started


# -- Slurm: a one-host cluster ---------------------------------------------------------------


def _slurm_conf(directory: Path, host: str, ports: tuple[int, int]) -> str:
    d = directory
    return f"""\
ClusterName=clusterenvtest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``munged``, ``slurmctld`` and ``slurmd`` for this host, in a private directory with
    their own ports; yields the environment that points ``srun`` at them. The daemons talk over
    127.0.0.1, so nothing depends on how this host's name resolves."""
    tools = {name: require_tool(name, "apt-get install slurm-wlm munge")
             for name in ("munged", "slurmctld", "slurmd", "srun", "sinfo")}
    if os.geteuid() != 0:
        skip_or_fail("a private Slurm cluster needs root (slurmd runs tasks as their user)")
    d = tmp_path_factory.mktemp("slurm")
    (d / "state").mkdir()
    (d / "spool").mkdir()
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(_slurm_conf(d, host, (free_port(), free_port())), encoding="utf-8")
    env = {**base_env(), "SLURM_CONF": str(conf)}
    started: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []
    try:
        subprocess.run([tools["munged"], "--force", f"--key-file={key}",
                        f"--socket={d}/munge.sock", f"--pid-file={d}/munged.pid",
                        f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed"],
                       check=True, timeout=30, env=env)
        for daemon in ("slurmctld", "slurmd"):
            log = (d / f"{daemon}.out").open("wb")
            logs.append(log)
            started.append(subprocess.Popen([tools[daemon], "-D", "-f", str(conf)], env=env,
                                            stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            out = subprocess.run([tools["sinfo"], "-h", "-o", "%t"], env=env,
                                 capture_output=True, text=True, timeout=30, check=False)
            state = out.stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            tails = "".join((d / f).read_text(errors="replace")[-2000:]
                            for f in ("slurmctld.out", "slurmd.out"))
            pytest.fail(f"the one-host Slurm cluster never became idle (state {state!r}):\n{tails}")
        yield env
    finally:
        for proc in started:
            proc.send_signal(signal.SIGTERM)
        for proc in started:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
        pid_file = d / "munged.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)


def test_slurm_tasks_read_their_ranks(
    slurm_cluster: dict[str, str], worker: Path, tmp_path: Path
) -> None:
    srun = shutil.which("srun")
    assert srun is not None
    # MASTER_ADDR is given so the rendezvous never depends on how this host name resolves;
    # the worker also reports what it derives without it (the step's first host).
    argv = [srun, "-N1", "-n2", "--overcommit",
            f"--export=ALL,MASTER_ADDR=127.0.0.1,MASTER_PORT={free_port()}",
            sys.executable, str(worker)]
    proc = subprocess.run(argv, env=slurm_cluster, cwd=tmp_path, capture_output=True,
                          text=True, timeout=240, check=False)
    found = results(proc.stdout)
    assert proc.returncode == 0 and len(found) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_two_workers(found, "slurm")
    host = socket.gethostname().split(".")[0].lower()
    for r in found:
        assert r["env"]["SLURM_PROCID"] == str(r["rank"])
        assert r["env"]["SLURM_LOCALID"] == str(r["local_rank"])
        assert r["env"]["SLURM_NTASKS"] == "2"
        assert r["derived_primary"] == host


# -- clusterenv launch --launcher srun / mpirun: the rendered lines really start the job ------


def _launch(launcher: str, worker: Path, env: dict[str, str], cwd: Path
            ) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "clusterenv", "launch", "-q", "--launcher", launcher,
            "--nproc-per-node", "2", "--", str(worker)]
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=240,
                          check=False)


def test_launch_renders_an_srun_line_that_runs(
    slurm_cluster: dict[str, str], worker: Path, tmp_path: Path
) -> None:
    env = {**slurm_cluster, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    proc = _launch("srun", worker, env, tmp_path)
    found = results(proc.stdout)
    assert proc.returncode == 0 and len(found) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_two_workers(found, "slurm")


def test_launch_renders_an_mpirun_line_that_runs(worker: Path, tmp_path: Path) -> None:
    require_tool("mpirun", "apt-get install openmpi-bin")
    env = {**base_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           # root in a container, and maybe fewer cores than ranks: Open MPI's own switches
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    proc = _launch("mpirun", worker, env, tmp_path)
    found = results(proc.stdout)
    assert proc.returncode == 0 and len(found) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_two_workers(found, "mpi")


# -- the real launchers' environments, dumped whole and in part ----------------------------------
#
# What each launcher really puts into its processes, recorded here, then read whole and with
# variables missing (as dumps pasted in public threads are): the launcher's source is chosen
# either way, never the local default.

DUMP = """\
import json, os
os.write(1, ("ENV " + json.dumps(dict(os.environ)) + "\\n").encode())
"""


def dumps(output: str) -> list[dict[str, str]]:
    return [json.loads(line[len("ENV "):]) for line in output.splitlines()
            if line.startswith("ENV ")]


def only_launcher(env: dict[str, str], *prefixes: str) -> dict[str, str]:
    """The launcher's own variables, without this test machine's environment."""
    return {k: v for k, v in env.items() if k.startswith(prefixes)}


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    script = tmp_path / "dump.py"
    script.write_text(DUMP, encoding="utf-8")
    return script


def test_real_slurm_step_and_batch_script_environments(
    slurm_cluster: dict[str, str], dump: Path, tmp_path: Path
) -> None:
    from clusterenv.config import check_config
    from clusterenv.sources.slurm import STEP_VARIABLES, TASK_VARIABLES

    srun, sbatch = shutil.which("srun"), require_tool("sbatch", "apt-get install slurm-client")
    assert srun is not None
    proc = subprocess.run([srun, "-N1", "-n2", "--overcommit", sys.executable, str(dump)],
                          env=slurm_cluster, cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, check=False)
    tasks = [only_launcher(e, "SLURM_") for e in dumps(proc.stdout)]
    assert proc.returncode == 0 and len(tasks) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    for task in tasks:
        assert set(TASK_VARIABLES) <= set(task), sorted(task)  # srun sets every task variable
        assert {"SLURM_STEP_ID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_TASKS"} <= set(task)
        whole = check_config(task, root=tmp_path)
        assert whole.config is not None and whole.config.process is not None, whole.problems
        assert whole.config.process.rank == int(task["SLURM_PROCID"])
        # Without the step ids, the other step variables still make it a task of the step.
        partial = check_config({k: v for k, v in task.items()
                                if k not in ("SLURM_STEP_ID", "SLURM_STEPID")}, root=tmp_path)
        assert partial.config is not None, partial.problems
        assert partial.config.process == whole.config.process
        bare = check_config({k: v for k, v in task.items()
                             if k not in ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID")},
                            root=tmp_path)
        assert bare.source == "slurm" and [p.variables for p in bare.problems] == [
            ("SLURM_PROCID",)]

    script = tmp_path / "batch.sh"
    out = tmp_path / "batch.out"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {dump}\n", encoding="utf-8")
    proc = subprocess.run([sbatch, "--wait", "-N1", "-n1", f"--output={out}", str(script)],
                          env=slurm_cluster, cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (batch,) = [only_launcher(e, "SLURM_") for e in dumps(out.read_text(encoding="utf-8"))]
    # The batch script is a task of Slurm's but no step's: the step variables are srun's only.
    assert not set(STEP_VARIABLES) & set(batch), sorted(set(STEP_VARIABLES) & set(batch))
    for env in (batch, {k: v for k, v in batch.items() if k != "SLURM_PROCID"}):
        check = check_config(env, root=tmp_path)
        assert check.source == "slurm" and check.config is not None, check.problems
        assert (check.config.node_rank, check.config.process) == (0, None)


def test_real_torchrun_worker_environment(dump: Path, tmp_path: Path) -> None:
    from clusterenv.config import check_config
    from clusterenv.sources.torchelastic import TORCHRUN_VARIABLES

    require_module("torch", "pip install torch")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node=2", str(dump)], env=base_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, check=False)
    workers = dumps(proc.stdout)
    assert proc.returncode == 0 and len(workers) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    for env in workers:
        assert set(TORCHRUN_VARIABLES) <= set(env), sorted(set(TORCHRUN_VARIABLES) - set(env))
        ours = {k: v for k, v in env.items()
                if k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                         "MASTER_PORT", *TORCHRUN_VARIABLES)}
        assert check_config(ours).config is not None
        # Without the run id and the ranks (an `env | grep SIZE` paste): still torchrun's.
        partial = check_config({k: v for k, v in ours.items()
                                if k not in ("TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK")})
        assert partial.source == "torchelastic", partial.reason
        assert {v for p in partial.problems for v in p.variables} == {"RANK", "LOCAL_RANK"}


def test_real_mpirun_rank_environment(dump: Path, tmp_path: Path) -> None:
    from clusterenv.config import check_config

    mpirun = require_tool("mpirun", "apt-get install openmpi-bin")
    env = {**base_env(), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    proc = subprocess.run([mpirun, "-np", "2", sys.executable, str(dump)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)
    ranks = [only_launcher(e, "OMPI_COMM_WORLD_", "OMPI_UNIVERSE_SIZE", "PMIX_RANK")
             for e in dumps(proc.stdout)]
    assert proc.returncode == 0 and len(ranks) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in ranks:
        assert check_config(rank).config is not None
        for missing in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"):
            partial = check_config({k: v for k, v in rank.items() if k != missing})
            assert partial.source == "mpi", partial.reason
            assert {v for p in partial.problems for v in p.variables} == {missing}
