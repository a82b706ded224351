"""Slurm and MPI: the pure parsers, and the sources table-driven from reference/launchers.md §5-6.

The host-list cases are the reference's own examples (§5.2, §5.4), including the one
Lightning's regex gets wrong (``rack[1-2]-node[01-02]``) and whitespace-separated lists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterenv import ClusterConfig, ConfigError
from clusterenv.config import check_config
from clusterenv.sources._slurm_parse import MAX_HOSTS, expand_hostlist, parse_counts_per_node
from clusterenv.sources.slurm import slurm_port
from tests.test_sources import _summary

HOSTLISTS = [
    ("gpu-[01-04,07],cpu1", ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-07", "cpu1"]),
    ("cpu1,gpu-[01-04]", ["cpu1", "gpu-01", "gpu-02", "gpu-03", "gpu-04"]),
    ("gpu[001-002]-ib", ["gpu001-ib", "gpu002-ib"]),
    ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
    ("node[0998-1001]", ["node0998", "node0999", "node1000", "node1001"]),
    ("node[9-10]", ["node9", "node10"]),
    ("a[1-2] b[3]", ["a1", "a2", "b3"]),
    ("a[1-2],b[3],c", ["a1", "a2", "b3", "c"]),
    ("single", ["single"]),
    ("n[3,1-2]", ["n3", "n1", "n2"]),  # Slurm's order, never sorted
]


@pytest.mark.parametrize(("text", "hosts"), HOSTLISTS, ids=[h[0] for h in HOSTLISTS])
def test_hostlist_expansion(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["gpu[01-02", "gpu01]", "gpu[[1]]", "gpu[2-1]", "gpu[a-b]",
                                  "gpu[]", "", " , ", "n[0-999999999]",
                                  "a[0-999]b[0-999]"])
def test_hostlist_garbage_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  # the message varies by the fault
        expand_hostlist(text)


@given(st.text(max_size=40))
def test_hostlist_never_raises_anything_else(text: str) -> None:
    try:
        hosts = expand_hostlist(text)
    except ValueError:
        return
    assert 0 < len(hosts) <= MAX_HOSTS


COUNTS = [("8(x2),4", [8, 8, 4]), ("1(x2)", [1, 1]), ("2(x3),1", [2, 2, 2, 1]), ("16", [16])]


@pytest.mark.parametrize(("text", "counts"), COUNTS, ids=[c[0] for c in COUNTS])
def test_counts_per_node(text: str, counts: list[int]) -> None:
    assert parse_counts_per_node(text) == counts


@pytest.mark.parametrize("text", ["8x2", "8(2)", "", "8(x0)", "a", "8(x2)4"])
def test_counts_garbage_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        parse_counts_per_node(text)


def test_port_rule_is_lightnings() -> None:
    # §5.4: 1234567 -> 19567, 42 -> 15042; no job id -> torchrun's default.
    assert slurm_port({"SLURM_JOB_ID": "1234567"}) == 19567
    assert slurm_port({"SLURM_JOBID": "42"}) == 15042
    assert slurm_port({}) == 29500


# §5.1: task 11 of `srun -N2 --ntasks-per-node=8` (node 1, local 3), job 1234567.
SRUN_TASK = {
    "SLURM_JOB_ID": "1234567", "SLURM_STEP_ID": "0", "SLURM_PROCID": "11", "SLURM_LOCALID": "3",
    "SLURM_NODEID": "1", "SLURM_NTASKS": "16", "SLURM_STEP_NUM_TASKS": "16",
    "SLURM_NNODES": "2", "SLURM_STEP_NUM_NODES": "2", "SLURM_JOB_NUM_NODES": "2",
    "SLURM_STEP_TASKS_PER_NODE": "8(x2)", "SLURM_TASKS_PER_NODE": "8(x2)",
    "SLURM_STEP_NODELIST": "gpu-[01-02]", "SLURM_NODELIST": "gpu-[01-02]",
    "SLURM_JOB_NODELIST": "gpu-[01-02]", "SLURM_JOB_NAME": "train",
}
# §12.2: `srun --ntasks-per-node=1 torchrun ...`: the srun task on node 1 of 2, before torchrun.
SRUN_PER_NODE = {
    **SRUN_TASK, "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2",
    "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_GPUS_ON_NODE": "8",
}
# ... and a worker torchrun started there (torchrun's variables over the task's).
TORCHRUN_IN_SRUN = {
    **SRUN_PER_NODE, "TORCHELASTIC_RUN_ID": "job", "RANK": "9", "LOCAL_RANK": "1",
    "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "gpu-01", "MASTER_PORT": "29500",
}
# §6.1: `mpirun -np 2` on one machine.
OMPI_LOCAL = {
    "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "1",
    "OMPI_UNIVERSE_SIZE": "2",
}
# §6.1 over two hosts of 8, rank 11, with MASTER_ADDR passed by `mpirun -x`.
OMPI_TWO = {
    "OMPI_COMM_WORLD_RANK": "11", "OMPI_COMM_WORLD_SIZE": "16",
    "OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "8",
    "OMPI_COMM_WORLD_NODE_RANK": "3", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29600",
}
# §6.2: Hydra (MPICH, Intel MPI).
HYDRA = {"PMI_RANK": "11", "PMI_SIZE": "16", "MPI_LOCALRANKID": "3", "MPI_LOCALNRANKS": "8",
         "MASTER_ADDR": "10.0.0.4"}
# §12.2: `mpirun` inside `sbatch`: the batch step's SLURM_* are inherited and stale.
MPIRUN_IN_SBATCH = {
    **OMPI_TWO, "SLURM_JOB_ID": "77", "SLURM_PROCID": "0", "SLURM_NTASKS": "16",
    "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu-[01-02]", "SLURM_NODEID": "0",
    "SLURM_TASKS_PER_NODE": "8(x2)",
}

ACCEPTED: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("srun-task-per-gpu", SRUN_TASK, {
        "source": "slurm", "primary": "gpu-01:19567", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (11, 3, 8)}),
    ("srun-master-port-wins", {**SRUN_TASK, "MASTER_PORT": "29555", "MASTER_ADDR": "10.1.0.1"}, {
        "source": "slurm", "primary": "10.1.0.1:29555", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (11, 3, 8)}),
    ("srun-ntasks-per-node-only", {
        k: v for k, v in SRUN_TASK.items() if "TASKS_PER_NODE" not in k
    } | {"SLURM_NTASKS_PER_NODE": "8"}, {
        "source": "slurm", "primary": "gpu-01:19567", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (11, 3, 8)}),
    ("srun-step-list-not-job-list", {**SRUN_TASK, "SLURM_JOB_NODELIST": "gpu-[00-03]"}, {
        "source": "slurm", "primary": "gpu-01:19567", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (11, 3, 8)}),
    ("srun-rack-list", {**SRUN_TASK, "SLURM_STEP_NODELIST": "rack[1-2]-node[01]"}, {
        "source": "slurm", "primary": "rack1-node01:19567", "node": 1, "nodes": 2,
        "per_node": 8, "world": 16, "rank": (11, 3, 8)}),
    ("srun-one-task-per-node-is-a-node-context", SRUN_PER_NODE, {
        "source": "slurm", "primary": "gpu-01:19567", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16}),
    ("sbatch-script", {k: v for k, v in SRUN_TASK.items()
                       if not k.startswith("SLURM_STEP") and k != "SLURM_NODEID"}
     | {"SLURM_PROCID": "0", "SLURM_LOCALID": "0"}, {
        "source": "slurm", "primary": "gpu-01:19567", "node": 0, "nodes": 2, "per_node": 1,
        "world": 2}),
    ("torchrun-inside-srun-torchrun-wins", TORCHRUN_IN_SRUN, {
        "source": "torchelastic", "primary": "gpu-01:29500", "node": 1, "nodes": 2,
        "per_node": 8, "world": 16, "rank": (9, 1, 8)}),
    ("ompi-one-machine", OMPI_LOCAL, {
        "source": "mpi", "primary": "127.0.0.1:29500", "node": 0, "nodes": 1, "per_node": 2,
        "world": 2, "rank": (1, 1, 2)}),
    ("ompi-two-hosts", OMPI_TWO, {
        "source": "mpi", "primary": "10.0.0.4:29600", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (11, 3, 8)}),
    ("hydra", HYDRA, {
        "source": "mpi", "primary": "10.0.0.4:29500", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (11, 3, 8)}),
    ("pmix-mpich-misspelt-local-rank", {
        **{k: v for k, v in HYDRA.items() if k != "MPI_LOCALRANKID"},
        "MPI_LOCALNRANKID": "3", "PMIX_RANK": "11"}, {
        "source": "mpi", "primary": "10.0.0.4:29500", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (11, 3, 8)}),
    ("mvapich", {"MV2_COMM_WORLD_RANK": "5", "MV2_COMM_WORLD_SIZE": "8",
                 "MV2_COMM_WORLD_LOCAL_RANK": "1", "MV2_COMM_WORLD_LOCAL_SIZE": "4",
                 "MASTER_ADDR": "node-a"}, {
        "source": "mpi", "primary": "node-a:29500", "node": 1, "nodes": 2, "per_node": 4,
        "world": 8, "rank": (5, 1, 4)}),
    ("slurm-pmi2-uses-slurm-local-ids", {
        **SRUN_TASK, "PMI_RANK": "11", "PMI_SIZE": "16"}, {
        "source": "mpi", "primary": "gpu-01:29500", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (11, 3, 8)}),
    ("mpirun-inside-sbatch-mpi-wins", MPIRUN_IN_SBATCH, {
        "source": "mpi", "primary": "10.0.0.4:29600", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (11, 3, 8)}),
]


@pytest.mark.parametrize(("env", "expected"), [r[1:] for r in ACCEPTED],
                         ids=[r[0] for r in ACCEPTED])
def test_source_reads(env: dict[str, str], expected: dict[str, Any]) -> None:
    check = check_config(env)
    assert check.config is not None, check.problems
    assert _summary(check.config) == expected
    assert check.notes == ()


REFUSED: list[tuple[str, dict[str, str], set[str], str]] = [
    ("srun-uneven-tasks", {**SRUN_TASK, "SLURM_STEP_TASKS_PER_NODE": "9,7"},
     {"SLURM_STEP_TASKS_PER_NODE"}, "different numbers of tasks"),
    ("srun-cyclic-distribution", {**SRUN_TASK, "SLURM_PROCID": "7"},
     {"SLURM_PROCID", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_LOCALID"},
     "consecutive ranks are not on the same node"),
    ("srun-garbled-tasks-per-node", {**SRUN_TASK, "SLURM_STEP_TASKS_PER_NODE": "8x2"},
     {"SLURM_STEP_TASKS_PER_NODE"}, "'8(x2),4'"),
    ("srun-garbled-nodelist", {**SRUN_TASK, "SLURM_STEP_NODELIST": "gpu-[01-02"},
     {"SLURM_STEP_NODELIST"}, "not a Slurm host list"),
    ("srun-list-count-mismatch", {**SRUN_TASK, "SLURM_STEP_TASKS_PER_NODE": "8(x3)"},
     {"SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_NODES"}, "lists 3 nodes"),
    ("ompi-two-hosts-without-master-addr",
     {k: v for k, v in OMPI_TWO.items() if not k.startswith("MASTER")},
     {"MASTER_ADDR"}, "gives no rendezvous address"),
    ("ompi-map-by-node", {**OMPI_TWO, "OMPI_COMM_WORLD_RANK": "6",
                          "OMPI_COMM_WORLD_LOCAL_RANK": "3"},
     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
     "consecutive ranks are not on the same node"),
    ("ompi-uneven", {**OMPI_TWO, "OMPI_COMM_WORLD_SIZE": "12"},
     {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}, "different numbers of processes"),
    ("pmi-without-any-local-size", {"PMI_RANK": "1", "PMI_SIZE": "2"},
     {"MPI_LOCALNRANKS"}, "not set"),
    ("pmix-disagrees", {**HYDRA, "PMIX_RANK": "3"}, {"PMIX_RANK", "PMI_RANK"}, "disagree"),
]


@pytest.mark.parametrize(("env", "variables", "text"), [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])
def test_source_refuses(env: dict[str, str], variables: set[str], text: str) -> None:
    with pytest.raises(ConfigError) as info:
        ClusterConfig.from_env(env)
    assert set(info.value.variables) == variables, info.value
    assert text in str(info.value)


def test_torchrun_in_srun_checks_the_node_count_against_slurms() -> None:
    check = check_config({**TORCHRUN_IN_SRUN, "WORLD_SIZE": "24", "GROUP_WORLD_SIZE": "3",
                          "RANK": "9"})
    assert check.config is not None
    (note,) = check.notes
    assert note.code == "worker-node-count" and "SLURM_STEP_NUM_NODES=2" in note.title


def test_a_dynamic_rendezvous_may_number_nodes_unlike_slurm() -> None:
    # torchrun's c10d rendezvous assigns GROUP_RANK itself: not a contradiction (§1.4 trap 3).
    check = check_config({**TORCHRUN_IN_SRUN, "GROUP_RANK": "0", "RANK": "1"})
    assert check.config is not None and check.notes == ()


def test_skypilot_on_slurm_is_not_read_as_a_slurm_task() -> None:
    # §7 trap 3: SkyPilot's generated code runs each node as one Slurm task.
    env = {**SRUN_PER_NODE, "SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2",
           "SKYPILOT_NODE_IPS": "10.0.0.4\n10.0.0.5", "SKYPILOT_NUM_GPUS_PER_NODE": "8"}
    cfg = ClusterConfig.from_env(env)
    assert (cfg.source, cfg.primary_addr, cfg.node_addr) == ("skypilot", "10.0.0.4", "10.0.0.5")


# -- rendering: srun and mpirun lines --------------------------------------------------------


def test_srun_and_mpirun_lines() -> None:
    from clusterenv.errors import LaunchError
    from clusterenv.launch import mpirun_args, rendezvous_environ, srun_args

    cfg = ClusterConfig.from_env(SRUN_PER_NODE)
    assert srun_args(cfg) == ["--nodes=2", "--ntasks-per-node=8", "--distribution=block",
                              "--export=ALL"]
    assert mpirun_args(cfg, nproc_per_node=4, hostfile="hosts", forward=["NCCL_SOCKET_IFNAME"]) == [
        "-np", "8", "--map-by", "ppr:4:node", "--hostfile", "hosts", "-x", "MASTER_ADDR",
        "-x", "MASTER_PORT", "-x", "NCCL_SOCKET_IFNAME"]
    assert rendezvous_environ(cfg) == {"MASTER_ADDR": "gpu-01", "MASTER_PORT": "19567"}
    with pytest.raises(LaunchError, match="needs a hostfile listing each node's cluster address"):
        mpirun_args(cfg)
    # What those lines start is read back as the same cluster: ranks in blocks of 8.
    task = {**SRUN_TASK, "MASTER_ADDR": "gpu-01", "MASTER_PORT": "19567"}
    back = ClusterConfig.from_env(task)
    assert (back.num_nodes, back.num_trainers, back.primary_addr) == (2, 8, "gpu-01")


def test_launch_dry_run_renders_srun_in_the_batch_script(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from clusterenv.cli import main
    from clusterenv.testing import HostBuilder

    batch = {k: v for k, v in SRUN_TASK.items() if not k.startswith("SLURM_STEP")
             and k != "SLURM_NODEID"} | {"SLURM_PROCID": "0", "SLURM_GPUS_ON_NODE": "8"}
    HostBuilder(tmp_path).loopback().environ(batch)
    # --force: this snapshot has only loopback, so the NCCL plan has errors to refuse on.
    assert main(["launch", "--dry-run", "--force", "--json", "--launcher", "srun", "--root",
                 str(tmp_path), "--", "train.py", "--lr", "3e-4"]) == 0
    printed = json.loads(capsys.readouterr().out)
    command = printed["command"]
    assert command[0].endswith("srun") and command[-3:] == ["train.py", "--lr", "3e-4"]
    assert command[1:5] == ["--nodes=2", "--ntasks-per-node=8", "--distribution=block",
                            "--export=ALL"]
    # The rendezvous travels in srun's environment, never in --export's comma syntax.
    assert {k: printed["env"][k] for k in ("MASTER_ADDR", "MASTER_PORT")} == {
        "MASTER_ADDR": "gpu-01", "MASTER_PORT": "19567"}
