"""Every environment source, table-driven from reference/launchers.md (its examples and traps).

Each environment is what the launcher or platform puts in a process's environment according to
the reference (section given per case); each row says which source must match, what the node
and process context must be, or which variables the refusal must name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterenv import ClusterConfig, ConfigError
from clusterenv.cli import main
from clusterenv.config import check_config
from clusterenv.sources import SOURCE_NAMES, SOURCES
from clusterenv.testing import HostBuilder
from tests.test_config import RUNPOD, RUNPOD_NODE1

# §3.1: worker 9 of `deepspeed` over two hosts of 8 GPUs (host 1, local rank 1).
DEEPSPEED = {
    "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_SIZE": "8", "CROSS_RANK": "1",
    "CROSS_SIZE": "2", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29500",
}
# §3.1 on one machine, `deepspeed --no_ssh` with two slots.
DEEPSPEED_LOCAL = {
    "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_SIZE": "2", "CROSS_RANK": "0",
    "CROSS_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
}
# §2.1: child 1 of `python train.py` with Fabric(devices=2) and nothing else set.
LIGHTNING_LOCAL = {
    "LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "49152",
}
# §2.1 + §11: child 1 of devices=2, num_nodes=2 on Runpod node 1 whose NUM_TRAINERS is 4
# (Lightning overwrites WORLD_SIZE with devices x num_nodes; the rest is Runpod's).
LIGHTNING_RUNPOD = {
    **RUNPOD_NODE1, "NUM_TRAINERS": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
}
# §10.5: Ray Train worker 9 of 2 x 8.
RAY = {
    "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8",
    "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "53411",
    "ACCELERATE_TORCH_DEVICE": "cuda:1",
}
# §10.2: Azure ML `distribution: pytorch`, process 9 of 2 x 8 (no LOCAL_WORLD_SIZE).
AZUREML = {
    "AZUREML_EXPERIMENT_ID": "2f7c8a9e-0000-4000-8000-000000000000", "MASTER_ADDR": "10.0.0.4",
    "MASTER_PORT": "6105", "WORLD_SIZE": "16", "NODE_RANK": "1", "RANK": "9", "LOCAL_RANK": "1",
}
# §1.1: torchrun over 2 nodes with --nproc-per-node 8 on node 0 and 4 on node 1.
UNEVEN_TORCHRUN_NODE1 = {
    "TORCHELASTIC_RUN_ID": "job", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29500",
    "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "12", "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
}


def _summary(cfg: ClusterConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "source": cfg.source, "primary": cfg.host_node_addr, "node": cfg.node_rank,
        "nodes": cfg.num_nodes, "per_node": cfg.num_trainers, "world": cfg.world_size,
    }
    if cfg.process is not None:
        out["rank"] = (cfg.process.rank, cfg.process.local_rank, cfg.process.local_world_size)
    return out


ACCEPTED: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("deepspeed-two-hosts", DEEPSPEED, {
        "source": "deepspeed", "primary": "10.0.0.4:29500", "node": 1, "nodes": 2,
        "per_node": 8, "world": 16, "rank": (9, 1, 8)}),
    ("deepspeed-no-ssh-one-machine", DEEPSPEED_LOCAL, {
        "source": "deepspeed", "primary": "127.0.0.1:29500", "node": 0, "nodes": 1,
        "per_node": 2, "world": 2, "rank": (1, 1, 2)}),
    # §3.2: DeepSpeed's MPICH runner: -genv WORLD_SIZE/LOCAL_SIZE/MASTER_*, and its helper
    # copies PMI_RANK/MPI_LOCALRANKID to RANK/LOCAL_RANK; there is no CROSS_*.
    ("deepspeed-mpich-runner", {
        "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_SIZE": "8",
        "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29500", "PMI_RANK": "9", "PMI_SIZE": "16",
        "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "8"}, {
        "source": "deepspeed", "primary": "10.0.0.4:29500", "node": 1, "nodes": 2,
        "per_node": 8, "world": 16, "rank": (9, 1, 8)}),
    ("deepspeed-on-runpod", {**RUNPOD_NODE1, **DEEPSPEED, "MASTER_ADDR": "10.65.0.2"}, {
        "source": "deepspeed", "primary": "10.65.0.2:29500", "node": 1, "nodes": 2,
        "per_node": 8, "world": 16, "rank": (9, 1, 8)}),
    ("lightning-child-one-machine", LIGHTNING_LOCAL, {
        "source": "lightning", "primary": "127.0.0.1:49152", "node": 0, "nodes": 1,
        "per_node": 2, "world": 2, "rank": (1, 1, 2)}),
    ("lightning-child-parent-keeps-local-rank-0", {**LIGHTNING_LOCAL, "LOCAL_RANK": "0"}, {
        "source": "lightning", "primary": "127.0.0.1:49152", "node": 0, "nodes": 1,
        "per_node": 2, "world": 2, "rank": (0, 0, 2)}),
    ("lightning-child-on-runpod", LIGHTNING_RUNPOD, {
        "source": "lightning", "primary": "10.65.0.2:29500", "node": 1, "nodes": 2,
        "per_node": 2, "world": 4, "rank": (3, 1, 2)}),
    ("lightning-child-multi-node-with-NUM_NODES", {
        **LIGHTNING_LOCAL, "MASTER_ADDR": "10.1.0.1", "NODE_RANK": "1", "WORLD_SIZE": "4",
        "NUM_NODES": "2"}, {
        "source": "lightning", "primary": "10.1.0.1:49152", "node": 1, "nodes": 2,
        "per_node": 2, "world": 4, "rank": (3, 1, 2)}),
    ("ray-train-worker", RAY, {
        "source": "ray", "primary": "10.0.0.4:53411", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (9, 1, 8)}),
    ("azureml-pytorch-node-1", AZUREML, {
        "source": "azureml", "primary": "10.0.0.4:6105", "node": 1, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (9, 1, 8)}),
    ("azureml-pytorch-node-0-with-batch-host-list", {
        **AZUREML, "NODE_RANK": "0", "RANK": "1", "AZ_BATCH_HOST_LIST": "10.0.0.4,10.0.0.5"}, {
        "source": "azureml", "primary": "10.0.0.4:6105", "node": 0, "nodes": 2, "per_node": 8,
        "world": 16, "rank": (1, 1, 8)}),
    ("plain-env-worker-with-local-world-size", {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.1.0.1", "MASTER_PORT": "1234"}, {
        "source": "worker", "primary": "10.1.0.1:1234", "node": 1, "nodes": 2, "per_node": 2,
        "world": 4, "rank": (3, 1, 2)}),
    ("plain-env-worker-one-machine", {
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost",
        "MASTER_PORT": "1234"}, {
        "source": "worker", "primary": "localhost:1234", "node": 0, "nodes": 1, "per_node": 2,
        "world": 2, "rank": (1, 1, 2)}),
    ("torchrun-empty-run-id-still-torchrun", {
        "TORCHELASTIC_RUN_ID": "", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, {
        "source": "torchelastic", "primary": "127.0.0.1:29500", "node": 0, "nodes": 1,
        "per_node": 1, "world": 1, "rank": (0, 0, 1)}),
]


@pytest.mark.parametrize(("env", "expected"), [r[1:] for r in ACCEPTED],
                         ids=[r[0] for r in ACCEPTED])
def test_source_reads(env: dict[str, str], expected: dict[str, Any]) -> None:
    cfg = ClusterConfig.from_env(env)
    assert _summary(cfg) == expected
    assert cfg.source_reason  # show and doctor say why


REFUSED: list[tuple[str, dict[str, str], set[str], str]] = [
    # §1.1: the node with 4 processes divides WORLD_SIZE evenly but GROUP_WORLD_SIZE shows
    # that the nodes differ; before, it silently computed 3 nodes.
    ("torchrun-uneven-node-1", UNEVEN_TORCHRUN_NODE1,
     {"WORLD_SIZE", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE"}, "different numbers of processes"),
    ("torchrun-uneven-node-0", {**UNEVEN_TORCHRUN_NODE1, "RANK": "1", "GROUP_RANK": "0",
                                "LOCAL_WORLD_SIZE": "8"},
     {"WORLD_SIZE", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE"}, "different numbers of processes"),
    ("torchrun-local-rank-beyond-local-world", {**UNEVEN_TORCHRUN_NODE1, "WORLD_SIZE": "8",
                                                "RANK": "5", "LOCAL_RANK": "4"},
     {"LOCAL_RANK", "LOCAL_WORLD_SIZE"}, "outside [0, LOCAL_WORLD_SIZE=4)"),
    # §3.4 trap 3: a hostfile with 4 slots then 8 slots.
    ("deepspeed-uneven-hostfile", {**DEEPSPEED, "WORLD_SIZE": "12"},
     {"WORLD_SIZE", "CROSS_SIZE", "LOCAL_SIZE"}, "different numbers of processes"),
    ("deepspeed-missing-local-size", {k: v for k, v in DEEPSPEED.items() if k != "LOCAL_SIZE"},
     {"LOCAL_SIZE"}, "not set"),
    ("lightning-child-multi-node-without-node-count", {
        **LIGHTNING_LOCAL, "MASTER_ADDR": "10.1.0.1", "WORLD_SIZE": "4"},
     {"WORLD_SIZE", "MASTER_ADDR"}, "how many nodes"),
    # Lightning's num_nodes=1 on a 2-node Runpod cluster: LOCAL_RANK 1 has no slot.
    ("lightning-child-num-nodes-mismatch", {**LIGHTNING_RUNPOD, "WORLD_SIZE": "2"},
     {"LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"}, "outside"),
    ("worker-without-local-world-size-multi-node", {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "10.1.0.1",
        "MASTER_PORT": "1234"}, {"LOCAL_WORLD_SIZE"}, "not set"),
    # A launcher that set both ranks but no WORLD_SIZE: torch's env:// would fail too.
    ("worker-without-world-size", {"RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": "1234"}, {"WORLD_SIZE", "LOCAL_WORLD_SIZE"},
     "WORLD_SIZE is not set"),
    ("ray-node-rank-disagrees-with-ranks", {**RAY, "NODE_RANK": "0"},
     {"NODE_RANK", "RANK", "LOCAL_WORLD_SIZE"}, "does not match"),
]


@pytest.mark.parametrize(("env", "variables", "text"), [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])
def test_source_refuses(env: dict[str, str], variables: set[str], text: str) -> None:
    with pytest.raises(ConfigError) as info:
        ClusterConfig.from_env(env)
    error = info.value
    assert set(error.variables) == variables, error
    assert text in str(error)
    for problem in error.problems:
        for name in problem.variables:
            assert name in problem.message
        # Never a number invented for the fix: every number in it is in the input.
        given = set(env.values()) | {str(int(v) - 1) for v in env.values() if v.isdigit()}
        for number in re.findall(r"\b\d+\b", problem.fix):
            assert number in given or number in problem.message, (number, problem.fix)


def test_deepspeed_worker_used_to_need_local_world_size() -> None:
    # The exact breakage of the issue: workers of `deepspeed --no_ssh` have no
    # LOCAL_WORLD_SIZE; they are read under DeepSpeed's names instead of failing.
    check = check_config(DEEPSPEED_LOCAL)
    assert check.config is not None and check.problems == ()
    assert "LOCAL_WORLD_SIZE" not in DEEPSPEED_LOCAL


def test_lightning_child_on_runpod_with_fewer_devices_is_a_finding() -> None:
    check = check_config(LIGHTNING_RUNPOD)
    assert check.config is not None
    codes = {f.code: f.severity for f in check.notes}
    assert codes == {"worker-fewer-processes": "info"}
    (note,) = check.notes
    assert "NUM_TRAINERS=4" in note.title and "Lightning started 2" in note.title


def test_torchrun_inside_runpod_contradictions_name_both_layers() -> None:
    env = {**RUNPOD_NODE1, "TORCHELASTIC_RUN_ID": "none", "RANK": "1", "LOCAL_RANK": "1",
           "WORLD_SIZE": "24", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "0",
           "MASTER_ADDR": "10.65.0.9"}
    check = check_config(env)
    assert check.config is not None
    by_code = {f.code: f for f in check.notes}
    assert set(by_code) == {"worker-node-count", "worker-node-rank", "worker-primary-addr"}
    assert "NUM_NODES=2" in by_code["worker-node-count"].title
    assert "source runpod" in by_code["worker-node-rank"].evidence


# -- forcing a source ------------------------------------------------------------------------


def test_clusterenv_source_forces_a_node_level_source() -> None:
    env = {**RUNPOD, "CLUSTERENV_SOURCE": "generic"}
    cfg = ClusterConfig.from_env(env)
    assert cfg.source == "generic" and "CLUSTERENV_SOURCE=generic" in cfg.source_reason


def test_a_worker_wins_over_an_inherited_node_level_clusterenv_source() -> None:
    # CLUSTERENV_SOURCE exported on the node reaches torchrun's workers: their own variables
    # still describe them, and the named platform is the evidence they are checked against.
    env = {**RUNPOD_NODE1, "CLUSTERENV_SOURCE": "runpod", "TORCHELASTIC_RUN_ID": "none",
           "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "4",
           "GROUP_RANK": "1"}
    check = check_config({**env, "WORLD_SIZE": "8", "RANK": "5"})
    assert check.config is not None and check.config.source == "torchelastic"
    assert "CLUSTERENV_SOURCE=runpod" in check.reason
    assert [f.code for f in check.notes] == ["worker-fewer-processes"]


def test_clusterenv_source_naming_a_worker_source_is_forced() -> None:
    with pytest.raises(ConfigError) as info:
        ClusterConfig.from_env({**RUNPOD, "CLUSTERENV_SOURCE": "deepspeed"})
    assert {"RANK", "LOCAL_RANK", "LOCAL_SIZE"} <= set(info.value.variables)


def test_unknown_clusterenv_source_names_the_variable_and_the_choices() -> None:
    check = check_config({"CLUSTERENV_SOURCE": "slurmm"})
    assert check.config is None
    (problem,) = check.problems
    assert problem.variables == ("CLUSTERENV_SOURCE",)
    assert "'slurmm'" in problem.message and "torchelastic" in problem.fix
    (finding,) = check.findings()
    assert "CLUSTERENV_SOURCE='slurmm'" in finding.evidence


def test_source_argument_beats_the_variable() -> None:
    env = {**RUNPOD, "CLUSTERENV_SOURCE": "generic"}
    assert ClusterConfig.from_env(env, source="runpod").source == "runpod"


def test_every_source_can_be_forced_and_never_raises_anything_else() -> None:
    assert len(set(SOURCE_NAMES)) == len(SOURCES)
    for name in SOURCE_NAMES:
        check = check_config({}, source=name)
        assert check.source == name
        assert (check.config is None) == bool(check.problems)


# -- the CLI: --source on the verbs, and which source matched and why -------------------------


def test_every_verb_that_reads_the_cluster_takes_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    HostBuilder(tmp_path).loopback().environ(RUNPOD)
    assert main(["show", "--json", "--root", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["source"] == "runpod"
    assert main(["show", "--json", "--source", "generic", "--root", str(tmp_path)]) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert config["source"] == "generic"
    # The user typed --source, and reads back --source (the variable is how the CLI passes it).
    assert config["source_reason"] == "forced with --source generic"
    for verb in ("show", "doctor", "env", "launch", "preflight", "capture"):
        with pytest.raises(SystemExit) as info:
            main([verb, "--help"])
        assert info.value.code == 0
        assert "--source NAME" in capsys.readouterr().out, verb


def test_doctor_says_which_source_matched_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    HostBuilder(tmp_path).loopback().environ(DEEPSPEED_LOCAL)
    main(["doctor", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.startswith("assumed:\n  source: deepspeed (RANK, LOCAL_RANK, LOCAL_SIZE, "
                          "CROSS_RANK, CROSS_SIZE are set)")


def test_an_unknown_source_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["show", "--source", "slurmm"])
    assert info.value.code == 2
    assert "invalid choice: 'slurmm'" in capsys.readouterr().err


# -- property: any environment, any source: a config or a ConfigError, nothing else ------------

ALL_NAMES = sorted({
    *DEEPSPEED, *RAY, *AZUREML, *UNEVEN_TORCHRUN_NODE1, *LIGHTNING_RUNPOD, "CLUSTERENV_SOURCE",
    "AZ_BATCH_HOST_LIST", "LOCAL_WORLD_SIZE", "NUM_NODES",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "MPI_LOCALNRANKID", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_NNODES", "SLURM_STEP_NUM_NODES",
    "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST", "SLURM_GPUS_ON_NODE",
    "SKYPILOT_NODE_RANK", "SKYPILOT_NODE_IPS", "SKYPILOT_NUM_NODES",
    "SKYPILOT_NUM_GPUS_PER_NODE", "DSTACK_NODE_RANK", "DSTACK_NODES_NUM",
    "DSTACK_MASTER_NODE_IP", "DSTACK_NODES_IPS", "DSTACK_GPUS_PER_NODE", "DSTACK_GPUS_NUM",
    "KUBERNETES_SERVICE_HOST", "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK",
    "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_RDZV_ENDPOINT", "JOB_COMPLETION_INDEX",
    "SM_HOSTS", "SM_CURRENT_HOST", "SM_NUM_GPUS", "SM_MASTER_ADDR", "SM_CURRENT_HOST_RANK",
    "SM_HOST_COUNT", "SM_NPROC_PER_NODE", "CLUSTER_SPEC", "NPROC_PER_NODE",
    "RUNPOD_POD_ID", "RUNPOD_DC_ID", "RUNPOD_GPU_COUNT",
    # every source's identifying variables: partial evidence must still give one of the two
    *(name for source in SOURCES for name in source.identifying),
})
ANY_VALUE = st.one_of(
    st.text(max_size=12),
    st.sampled_from([
        "0", "1", "2", "3", "8", "16", "29500", "-1", "9" * 30, "", " 1 ", "1:4", "2:2",
        "auto", "gpu", "cpu", "127.0.0.1", "10.0.0.4", "fd00::2", "node-a", "10.0.0.4:29500",
        "10.0.0.4\n10.0.0.5", "gpu-[01-02]", "rack[1-2]-n[1-2]", "n[0-999999999]", "8(x2)",
        "2(x2),1", "8x2", '["algo-1","algo-2"]', "algo-2", "[]", "{}", "null",
        '{"cluster": {"workerpool0": ["h:2222"]}, "task": {"type": "workerpool0", "index": 0}}',
        *SOURCE_NAMES, "slurmm",
    ]),
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.one_of(st.sampled_from(ALL_NAMES), st.text(max_size=6)), ANY_VALUE),
       st.one_of(st.none(), st.sampled_from(SOURCE_NAMES)))
def test_any_environment_and_source_give_a_config_or_a_config_error(
    env: dict[str, str], source: str | None
) -> None:
    check = check_config(env, source=source)
    if check.config is None:
        assert check.problems
        with pytest.raises(ConfigError):
            ClusterConfig.from_env(env, source=source)
        return
    cfg = check.config
    assert cfg.world_size == cfg.num_nodes * cfg.num_trainers
    assert 0 <= cfg.node_rank < cfg.num_nodes
    if cfg.process is not None:
        assert 0 <= cfg.process.rank < cfg.world_size
        assert 0 <= cfg.process.local_rank < cfg.process.local_world_size == cfg.num_trainers
        assert cfg.process.rank in cfg.global_ranks


def test_capture_keeps_what_every_source_reads() -> None:
    # A snapshot replays the environment with --root: every variable a source reads is kept
    # (the property test's names are every source's), and secrets still are not.
    from clusterenv._scrub import cluster_environ

    env = dict.fromkeys(ALL_NAMES, "1") | {"HF_TOKEN": "x", "SLURM_JOB_PASSWORD": "x"}
    kept = cluster_environ(env)
    assert set(ALL_NAMES) <= set(kept)
    assert "HF_TOKEN" not in kept and "SLURM_JOB_PASSWORD" not in kept


def test_local_rank_beyond_the_nodes_gpus_is_an_error_in_that_process() -> None:
    # torchrun --nproc-per-node 8 on a Runpod node with NUM_TRAINERS=4: processes 4-7 have no
    # GPU (LOCAL_RANK >= NUM_TRAINERS), processes 0-3 share the node with them.
    worker = {**RUNPOD_NODE1, "NUM_TRAINERS": "4", "WORLD_SIZE": "16", "TORCHELASTIC_RUN_ID": "x",
              "RANK": "13", "LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1",
              "NUM_NODES": "2"}
    (note,) = check_config(worker).notes
    assert (note.code, note.severity) == ("worker-more-processes", "error")
    assert "local rank 5 is beyond NUM_TRAINERS=4" in note.title
    (note,) = check_config({**worker, "RANK": "9", "LOCAL_RANK": "1"}).notes
    assert (note.code, note.severity) == ("worker-more-processes", "warning")
