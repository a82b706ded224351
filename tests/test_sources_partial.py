"""Partial launcher evidence is never read as the local default.

Environment dumps posted in public threads are often partial (``env | grep RANK``, a launcher
that skipped one variable, a scrubbed paste). Each environment here is a launcher's or
platform's own, as its code or documentation sets it (the origin is named per case, sections
of reference/launchers.md), with variables missing: the launcher's source must be chosen, and
it either reads a config or names what is missing. The local default is only for an
environment without any identifying variable (the last cases).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clusterenv import ClusterConfig
from clusterenv.config import check_config
from clusterenv.launch import torchrun_env
from clusterenv.sources import SOURCES
from tests.test_sources import DEEPSPEED, _summary
from tests.test_sources_platforms import DSTACK, KUBEFLOW_V2, SAGEMAKER, SKYPILOT
from tests.test_sources_slurm_mpi import HYDRA, OMPI_TWO, SRUN_TASK


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


# What torch 2.13's LocalElasticAgent._start_workers gives worker 9 of 2 nodes x 8
# (torch/distributed/elastic/agent/server/local_elastic_agent.py), and TORCHELASTIC_ERROR_FILE
# from torch/distributed/elastic/multiprocessing/api.py.
TORCHRUN_WORKER = {
    "RANK": "9", "LOCAL_RANK": "1", "GROUP_RANK": "1", "ROLE_RANK": "9", "ROLE_NAME": "default",
    "LOCAL_WORLD_SIZE": "8", "WORLD_SIZE": "16", "GROUP_WORLD_SIZE": "2",
    "ROLE_WORLD_SIZE": "16", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29500",
    "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCHELASTIC_ERROR_FILE": "/tmp/torchelastic_x/none_y/attempt_0/1/error.json",
}
# Slurm's sbatch.1 "OUTPUT ENVIRONMENT VARIABLES" for the batch script of `sbatch -N2`: the task
# variables of the batch step, no step variables.
SBATCH_SCRIPT = {
    "SLURM_JOB_ID": "1234567", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "gpu-[01-02]", "SLURM_NODELIST": "gpu-[01-02]",
    "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_NODEID": "0", "SLURM_LOCALID": "0",
    "SLURM_GTIDS": "0", "SLURM_TASK_PID": "4242", "SLURM_PROCID": "0",
}
# salloc.1's output environment: the shell salloc starts where it ran, which is no task.
SALLOC_SHELL = {
    "SLURM_JOB_ID": "1234567", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "gpu-[01-02]", "SLURM_NODELIST": "gpu-[01-02]",
    "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_NTASKS": "2", "SLURM_SUBMIT_HOST": "login-1",
}

# name, environment, source, then either the config read (a summary) or the missing variables.
PARTIAL: list[tuple[str, dict[str, str], str, dict[str, Any] | set[str]]] = [
    # `env | grep -E 'GROUP|ROLE|WORLD|TORCHELASTIC_R'` in a torchrun worker: before, local.
    ("torchrun-worker-without-ranks-or-address",
     without(TORCHRUN_WORKER, "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE",
             "TORCHELASTIC_USE_AGENT_STORE", "ROLE_NAME"),
     "torchelastic", {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}),
    # A worker dump without the run id, RANK and LOCAL_WORLD_SIZE: before, the generic source
    # read MASTER_ADDR and made WORLD_SIZE=16 one node of 16 processes, rank 0.
    ("torchrun-worker-missing-local-world-size",
     without(TORCHRUN_WORKER, "RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"),
     "torchelastic", {"RANK", "LOCAL_WORLD_SIZE"}),
    # torch's env:// names alone prove no launcher: RANK and LOCAL_RANK are every launcher's.
    ("torchrun-only-run-id-still-torchrun",
     {"TORCHELASTIC_RUN_ID": "none", "LOCAL_RANK": "0"}, "torchelastic",
     {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}),
    # srun's task without SLURM_STEP_ID/SLURM_STEPID and SLURM_PROCID (srun.1): the step
    # variables still show a step of 8 tasks per node, and its rank is what is missing.
    ("srun-task-without-step-id-and-procid",
     without(SRUN_TASK, "SLURM_STEP_ID", "SLURM_PROCID"), "slurm", {"SLURM_PROCID"}),
    # The same task with its rank but no step id: before, read as the batch script (a node
    # context of one process per node); it is a step of 16 tasks, this one rank 11.
    ("srun-task-without-step-id",
     without(SRUN_TASK, "SLURM_STEP_ID"), "slurm",
     {"source": "slurm", "primary": "gpu-01:19567", "node": 1, "nodes": 2, "per_node": 8,
      "world": 16, "rank": (11, 3, 8)}),
    # The batch script without SLURM_PROCID: before, local; it is node 0 of the allocation.
    ("sbatch-script-without-procid",
     without(SBATCH_SCRIPT, "SLURM_PROCID"), "slurm",
     {"source": "slurm", "primary": "gpu-01:19567", "node": 0, "nodes": 2, "per_node": 1,
      "world": 2}),
    # An Open MPI rank (OMPI docs, §6.1) without the sizes: before, the generic source read
    # MASTER_ADDR as one node.
    ("ompi-rank-without-sizes",
     without(OMPI_TWO, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"), "mpi",
     {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}),
    ("ompi-rank-without-local-size",
     without(OMPI_TWO, "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"), "mpi",
     {"OMPI_COMM_WORLD_LOCAL_SIZE"}),
    # Hydra (pmip_cb.c launch_procs, §6.2) without PMI_SIZE and MASTER_ADDR: before, local.
    ("hydra-rank-without-size", without(HYDRA, "PMI_SIZE", "MASTER_ADDR"), "mpi", {"PMI_SIZE"}),
    # A Kubeflow TrainJob pod (kubeflow/trainer torch.go, §9.2) whose dump lost
    # PET_NPROC_PER_NODE: before, local (v2 sets no MASTER_ADDR).
    ("kubeflow-v2-without-nproc",
     without(KUBEFLOW_V2, "PET_NPROC_PER_NODE"), "kubeflow",
     {"source": "kubeflow", "primary": "mytrainjob-node-0-0.mytrainjob:29500", "node": 2,
      "nodes": 4, "per_node": 1, "world": 4}),
    # The same pod's `env | grep PET_` (no KUBERNETES_SERVICE_HOST): torchrun's options, read as
    # torchrun would; before, local.
    ("kubeflow-v2-only-pet", {k: v for k, v in KUBEFLOW_V2.items() if k.startswith("PET_")},
     "generic",
     {"source": "generic", "primary": "mytrainjob-node-0-0.mytrainjob:29500", "node": 2,
      "nodes": 4, "per_node": 8, "world": 32}),
    # torchrun's --nnodes for several nodes and no address: torchrun would rendezvous on
    # 127.0.0.1 and hang.
    ("pet-nnodes-without-address", {"PET_NNODES": "2", "PET_NODE_RANK": "1"}, "generic",
     {"MASTER_ADDR", "PET_MASTER_ADDR"}),
    # DeepSpeed's worker (deepspeed/launcher/launch.py, §3.1) without RANK/LOCAL_RANK: before,
    # generic, one node.
    ("deepspeed-without-ranks", without(DEEPSPEED, "RANK", "LOCAL_RANK"), "deepspeed",
     {"RANK", "LOCAL_RANK"}),
    # SkyPilot's run stage (environment-variables.rst, §7) without its rank: before, local.
    ("skypilot-without-node-rank", without(SKYPILOT, "SKYPILOT_NODE_RANK"), "skypilot",
     {"SKYPILOT_NODE_RANK"}),
    # dstack (executor.go, §8) without its rank: before, local.
    ("dstack-without-node-rank", without(DSTACK, "DSTACK_NODE_RANK"), "dstack",
     {"DSTACK_NODE_RANK"}),
    # SageMaker (the training toolkit's environment.py, §10.1) without this host: before, local.
    ("sagemaker-without-current-host", without(SAGEMAKER, "SM_CURRENT_HOST"), "sagemaker",
     {"SM_CURRENT_HOST"}),
]


@pytest.mark.parametrize(("env", "source", "expected"), [c[1:] for c in PARTIAL],
                         ids=[c[0] for c in PARTIAL])
def test_partial_evidence_chooses_the_launcher(
    env: dict[str, str], source: str, expected: dict[str, Any] | set[str], tmp_path: Path
) -> None:
    check = check_config(env, root=tmp_path)  # a host without GPUs: one process per node
    assert check.source == source, (check.source, check.reason, check.problems)
    if isinstance(expected, dict):
        assert check.config is not None, check.problems
        assert _summary(check.config) == expected
        return
    assert check.config is None
    missing = {v for p in check.problems if p.code == "config-missing" for v in p.variables}
    assert missing == expected, check.problems


LOCAL: list[tuple[str, dict[str, str]]] = [
    # A single Runpod pod (not an Instant Cluster) has the pod variables and no cluster ones.
    ("runpod-single-pod", {"RUNPOD_POD_ID": "abc123xyz", "RUNPOD_DC_ID": "EU-RO-1",
                           "RUNPOD_GPU_COUNT": "1", "RUNPOD_API_KEY": "rpa_SECRET"}),
    # Azure ML sets its ids in every job, distributed or not.
    ("azureml-single-process", {"AZUREML_RUN_ID": "run-1", "AZUREML_EXPERIMENT_ID": "e-1"}),
    # An salloc shell: an allocation, but no task (it runs where salloc ran).
    ("salloc-shell", SALLOC_SHELL),
    # torchrun's per-machine option, in a Kubernetes pod or not.
    ("pet-nproc-only", {"PET_NPROC_PER_NODE": "2", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}),
    # SkyPilot's setup stage, which runs on every node and is no training context.
    ("skypilot-setup", {"SKYPILOT_SETUP_NODE_RANK": "1", "SKYPILOT_SETUP_NODE_IPS": "a\nb",
                        "SKYPILOT_NUM_NODES": "2"}),
]


@pytest.mark.parametrize("env", [c[1] for c in LOCAL], ids=[c[0] for c in LOCAL])
def test_no_identifying_variable_is_the_local_default(env: dict[str, str]) -> None:
    check = check_config(env)
    assert check.source == "local" and check.config is not None, check.problems


def test_what_clusterenv_env_torchrun_exports_on_one_machine_stays_local() -> None:
    # eval "$(clusterenv env --torchrun)" on a laptop exports PET_STANDALONE and PET_NNODES=1.
    exported = torchrun_env(ClusterConfig.from_env({}))
    assert exported["PET_NNODES"] == "1"
    assert check_config(exported).source == "local"


@pytest.mark.parametrize(
    ("source", "variable"),
    [(s.name, v) for s in SOURCES for v in s.identifying],
    ids=[f"{s.name}-{v}" for s in SOURCES for v in s.identifying],
)
def test_each_identifying_variable_alone_chooses_its_source(source: str, variable: str) -> None:
    # Kubeflow's variables are torchrun's options: they identify Kubeflow inside a pod only.
    context = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"} if source == "kubeflow" else {}
    check = check_config({**context, variable: "2"})
    assert check.source == source, (check.source, check.reason)
    assert variable in check.reason
    # Whatever is missing is named: never a problem without a variable.
    assert all(p.variables for p in check.problems), check.problems


def test_the_reason_says_the_evidence_is_partial() -> None:
    check = check_config(without(TORCHRUN_WORKER, "TORCHELASTIC_RUN_ID", "RANK"))
    assert check.reason.startswith("TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, ")
    assert "which only torchrun sets, but not all that torchrun sets" in check.reason


def test_pmi_rank_inside_a_slurm_task_is_slurms() -> None:
    # srun --mpi=pmi2 puts PMI_RANK into its tasks: the Slurm task describes the process, as
    # before (only an MPI family's own variables or a full PMI rank and size choose mpi).
    check = check_config({**SRUN_TASK, "PMI_RANK": "11"})
    assert check.source == "slurm" and check.config is not None, check.problems
