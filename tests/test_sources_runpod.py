"""Runpod's contract as its documentation states it today (docs/environment.md, "runpod").

- ``MASTER_ADDR`` may be a host name of the primary pod (``pod-0``) beside
  ``PRIMARY_ADDR=10.65.0.10``: reading leaves the pair to a resolver, and doctor compares the
  addresses they resolve to (a snapshot resolves from its ``/etc/hosts``).
- The pod variables ``RUNPOD_POD_ID``, ``RUNPOD_DC_ID``, ``RUNPOD_GPU_COUNT`` are evidence shown
  with the source, and ``RUNPOD_GPU_COUNT`` is compared with ``NUM_TRAINERS`` and with the GPUs
  in the container; ``RUNPOD_API_KEY`` never leaves the process.
- Managed Slurm clusters set Slurm's and Runpod's variables together: Slurm's task wins (the
  innermost launcher), and the two must agree.

The Runpod environments are the provider's reference page (``PRIMARY_ADDR`` = ``MASTER_ADDR``
on ``ens1``, ``NODE_RANK`` 0 on the primary); the Slurm ones are srun's output environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clusterenv import ClusterConfig, ConfigError, doctor
from clusterenv.capture import capture
from clusterenv.cli import main
from clusterenv.config import check_config
from clusterenv.preflight import collect_fingerprint
from clusterenv.sources._base import Spelled, Unresolved
from tests.nccl_hosts import b0
from tests.simcluster import ClusterFactory
from tests.test_config import RUNPOD, RUNPOD_NODE1
from tests.test_sources_slurm_mpi import OMPI_TWO, SRUN_PER_NODE

HOSTS_HEAD = "127.0.0.1\tlocalhost\n"
# A pod of the cluster on node 1: the primary is 10.65.0.10, this node 10.65.0.2 (B0's ens1).
NODE1 = {**RUNPOD, "PRIMARY_ADDR": "10.65.0.10", "MASTER_ADDR": "10.65.0.10",
         "HOST_NODE_ADDR": "10.65.0.10:29500", "NODE_ADDR": "10.65.0.2", "NODE_RANK": "1"}
POD = {"RUNPOD_POD_ID": "abc123xyz", "RUNPOD_DC_ID": "EU-RO-1", "RUNPOD_GPU_COUNT": "8"}
API_KEY = "rpa_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcd"


# -- MASTER_ADDR as a host name of the primary pod ---------------------------------------------


def test_a_name_beside_the_address_is_left_to_a_resolver() -> None:
    check = check_config({**NODE1, "MASTER_ADDR": "pod-0"})
    assert check.config is not None, check.problems  # before: config-alias-mismatch
    assert check.config.primary_addr == "10.65.0.10"
    assert check.unresolved == (Unresolved(
        "config-alias-mismatch", Spelled("PRIMARY_ADDR", "10.65.0.10"),
        Spelled("MASTER_ADDR", "pod-0"), "the primary node's cluster address"),)
    # from_env is pure and deterministic: the same config, nothing resolved.
    assert ClusterConfig.from_env({**NODE1, "MASTER_ADDR": "pod-0"}) == check.config


def test_two_different_addresses_still_disagree_as_written() -> None:
    with pytest.raises(ConfigError) as info:
        ClusterConfig.from_env({**NODE1, "MASTER_ADDR": "10.65.0.11"})
    assert {p.code for p in info.value.problems} == {"config-alias-mismatch"}


def test_localhost_needs_no_resolver() -> None:
    check = check_config({**NODE1, "MASTER_ADDR": "localhost"})
    assert [p.code for p in check.problems] == ["config-alias-mismatch"]


@pytest.mark.parametrize(
    ("extra", "hosts", "expected"),
    [
        # The provider's case: pod-0 resolves to PRIMARY_ADDR.
        ({"MASTER_ADDR": "pod-0"}, "10.65.0.10\tpod-0\n", None),
        ({"MASTER_ADDR": "pod-0"}, "10.65.0.11\tpod-0\n", "config-alias-mismatch"),
        ({"HOST_NODE_ADDR": "pod-0:29500"}, "10.65.0.10\tpod-0\n", None),
        ({"HOST_NODE_ADDR": "pod-0:29500"}, "10.65.0.11\tpod-0\n", "config-host-node-addr"),
        # Two names for one node (a short name and its FQDN).
        ({"PRIMARY_ADDR": "pod-0.cluster", "MASTER_ADDR": "pod-0",
          "HOST_NODE_ADDR": "pod-0.cluster:29500"},
         "10.65.0.10\tpod-0.cluster pod-0\n", None),
    ],
    ids=["resolves-to-primary", "resolves-elsewhere", "host-node-addr-agrees",
         "host-node-addr-elsewhere", "name-and-fqdn"],
)
def test_doctor_compares_spellings_by_what_they_resolve_to(
    tmp_path: Path, extra: dict[str, str], hosts: str, expected: str | None
) -> None:
    b0(tmp_path, hosts=HOSTS_HEAD + hosts)
    found = doctor(environ={**NODE1, **extra}, root=tmp_path, ask_nccl=False)
    spelled = [f for f in found if f.code in ("config-alias-mismatch", "config-host-node-addr")]
    if expected is None:
        assert spelled == [], [str(f) for f in spelled]
        return
    (finding,) = spelled
    assert (finding.code, finding.severity) == (expected, "error")
    assert "name different hosts (10.65.0.10 and 10.65.0.11)" in finding.title
    assert "pod-0 -> 10.65.0.11 (the snapshot's /etc/hosts)" in finding.evidence
    assert "10.65.0.10" in finding.fix and "10.65.0.11" not in finding.fix


def test_launch_refuses_spellings_that_resolve_apart(tmp_path: Path) -> None:
    from clusterenv.launch import plan_launch

    b0(tmp_path, hosts=HOSTS_HEAD + "10.65.0.11\tpod-0\n")
    env = {**NODE1, "MASTER_ADDR": "pod-0"}
    plan = plan_launch(env, command=["train.py"], root=tmp_path, torchrun=["torchrun"])
    assert "config-alias-mismatch" in {f.code for f in plan.errors}
    b0(tmp_path, hosts=HOSTS_HEAD + "10.65.0.10\tpod-0\n")
    plan = plan_launch(env, command=["train.py"], root=tmp_path, torchrun=["torchrun"])
    assert "config-alias-mismatch" not in {f.code for f in plan.findings}


def test_an_unresolvable_name_is_said_once_by_the_rendezvous_checks(tmp_path: Path) -> None:
    b0(tmp_path, hosts=HOSTS_HEAD)
    found = doctor(environ={**NODE1, "MASTER_ADDR": "pod-0"}, root=tmp_path, ask_nccl=False)
    codes = [f.code for f in found]
    assert "config-alias-mismatch" not in codes
    assert codes.count("primary-name-unverified") == 1


def test_a_worker_s_master_addr_named_by_host_name_is_resolved_too(tmp_path: Path) -> None:
    # torchrun's c10d rendezvous advertises socket.getfqdn(): a name beside PRIMARY_ADDR.
    worker = {**NODE1, "TORCHELASTIC_RUN_ID": "none", "RANK": "9", "LOCAL_RANK": "1",
              "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1",
              "MASTER_ADDR": "pod-0"}
    check = check_config(worker)
    assert check.notes == ()  # before: worker-primary-addr, by spelling alone
    assert [u.code for u in check.unresolved] == ["worker-primary-addr"]
    b0(tmp_path, hosts=HOSTS_HEAD + "10.65.0.12\tpod-0\n")
    found = doctor(environ=worker, root=tmp_path, ask_nccl=False)
    (finding,) = [f for f in found if f.code == "worker-primary-addr"]
    assert finding.severity == "warning"


# -- the pod variables ---------------------------------------------------------------------------


def test_pod_variables_are_shown_with_the_source() -> None:
    check = check_config({**RUNPOD, **POD})
    assert check.reason.endswith(
        "; Runpod pod RUNPOD_POD_ID=abc123xyz, RUNPOD_DC_ID=EU-RO-1, RUNPOD_GPU_COUNT=8")
    # A single pod (no Instant Cluster): still the local default, with the pod named.
    alone = check_config(POD)
    assert alone.source == "local" and "RUNPOD_POD_ID=abc123xyz" in alone.reason


@pytest.mark.parametrize(("gpus", "fragment"), [
    ("4", "leaves 4 without a GPU ('CUDA error: invalid device ordinal')"),
    ("16", "leaves 8 of the pod's GPUs idle"),
])
def test_gpu_count_against_num_trainers(gpus: str, fragment: str) -> None:
    check = check_config({**RUNPOD, **POD, "RUNPOD_GPU_COUNT": gpus})
    assert check.config is not None
    (note,) = check.notes
    assert (note.code, note.severity) == ("runpod-gpu-count", "warning")
    assert f"NUM_TRAINERS=8 but this pod has RUNPOD_GPU_COUNT={gpus} GPUs" in note.title
    assert fragment in note.title
    assert note.fix.endswith(f"export NUM_TRAINERS={gpus} WORLD_SIZE={2 * int(gpus)}")
    assert check_config({**RUNPOD, **POD}).notes == ()


@pytest.mark.parametrize(("installed", "visible", "expected"), [
    (8, None, False),
    (4, None, True),      # the container lost GPUs the pod was given
    (8, "0,1", False),    # CUDA_VISIBLE_DEVICES narrows on purpose
])
def test_gpu_count_against_the_gpus_in_the_container(
    tmp_path: Path, installed: int, visible: str | None, expected: bool
) -> None:
    b0(tmp_path, gpus=installed)
    env = {**RUNPOD, **POD, "NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    found = [f for f in doctor(environ=env, root=tmp_path, ask_nccl=False)
             if f.code == "runpod-gpu-count"]
    assert bool(found) == expected, [str(f) for f in found]
    if expected:
        assert "RUNPOD_GPU_COUNT=8 GPUs but the NVIDIA driver lists 4" in found[0].title


def test_the_api_key_never_leaves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {**RUNPOD, **POD, "RUNPOD_API_KEY": API_KEY}
    host = tmp_path / "host"
    b0(host, environ=env)
    snapshot = capture(tmp_path / "snap", environ=env, root=host)
    recorded = json.loads((snapshot / ".clusterenv/host.json").read_text(encoding="utf-8"))
    assert "RUNPOD_API_KEY" not in recorded["environ"]
    assert recorded["environ"]["RUNPOD_POD_ID"] == "abc123xyz"  # evidence is kept
    for path in snapshot.rglob("*"):
        if path.is_file():
            assert API_KEY not in path.read_text(encoding="utf-8", errors="replace"), path
    for verb in ("show", "doctor"):
        main([verb, "--json", "--no-nccl", "--root", str(host)] if verb == "doctor"
             else [verb, "--json", "--root", str(host)])
        out = capsys.readouterr()
        assert API_KEY not in out.out + out.err, verb
        assert "RUNPOD_POD_ID=abc123xyz" in out.out, verb
    fingerprint = collect_fingerprint(environ=env, root=host)
    assert API_KEY not in json.dumps(fingerprint.to_dict())


# -- Slurm managed by Runpod: both sets of variables --------------------------------------------

# srun --ntasks-per-node=1 on node 1 of a 2-node Runpod cluster (Runpod's variables inherited).
SLURM_ON_RUNPOD = {**RUNPOD_NODE1, **POD, **SRUN_PER_NODE, "MASTER_ADDR": "10.65.0.2"}


def test_slurm_wins_over_runpod_and_agrees() -> None:
    check = check_config(SLURM_ON_RUNPOD)
    assert check.config is not None and check.source == "slurm", check.problems
    assert check.reason.startswith("SLURM_JOB_ID, SLURM_PROCID, SLURM_STEP_ID are set")
    assert (check.config.node_rank, check.config.num_nodes) == (1, 2)
    assert check.notes == ()


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        # Slurm's node 0 is not the node holding PRIMARY_ADDR: node 0 hosts the store
        # elsewhere, and every node waits at 10.65.0.2.
        ({"SLURM_NODEID": "0", "SLURM_PROCID": "0"},
         "SLURM_NODEID=0 makes this node the job's node 0, which hosts the rendezvous, but the "
         "job rendezvouses on MASTER_ADDR=10.65.0.2 (PRIMARY_ADDR), another node "
         "(NODE_ADDR=10.65.0.3 here)"),
        ({"NODE_ADDR": "10.65.0.2", "NODE_RANK": "0"},
         "NODE_ADDR=10.65.0.2 is PRIMARY_ADDR, the address the job rendezvouses on "
         "(MASTER_ADDR=10.65.0.2), but SLURM_NODEID=1 makes this node the job's node 1"),
    ],
    ids=["slurm-node-0-elsewhere", "primary-not-slurm-node-0"],
)
def test_slurm_and_runpod_disagreeing_on_node_0_is_refused(
    extra: dict[str, str], fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        ClusterConfig.from_env({**SLURM_ON_RUNPOD, **extra})
    (problem,) = info.value.problems
    assert problem.code == "config-primary-rank"
    assert set(problem.variables) == {"SLURM_NODEID", "NODE_ADDR", "PRIMARY_ADDR"}
    assert fragment in problem.message


def test_the_same_rule_holds_for_mpi_and_torchrun_on_runpod() -> None:
    # Open MPI's rank 3 of 2 x 8 is on node 0 (ranks in blocks), but this is Runpod's node 1.
    mpi = {**RUNPOD_NODE1, **OMPI_TWO, "OMPI_COMM_WORLD_RANK": "3", "MASTER_ADDR": "10.65.0.2"}
    with pytest.raises(ConfigError) as info:
        ClusterConfig.from_env(mpi)
    assert [p.code for p in info.value.problems] == ["config-primary-rank"]
    # A static torchrun given --node-rank 1 on the primary: its node 0 hosts the store elsewhere.
    worker = {**RUNPOD, "TORCHELASTIC_RUN_ID": "none", "RANK": "9", "LOCAL_RANK": "1",
              "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1"}
    with pytest.raises(ConfigError) as info:
        ClusterConfig.from_env(worker)
    assert [p.code for p in info.value.problems] == ["config-primary-rank"]


def test_a_node_count_that_differs_names_both_and_the_stale_count() -> None:
    # Pods added to a running cluster: Slurm counts 3 nodes, this older pod still says 2.
    env = {**SLURM_ON_RUNPOD, "SLURM_STEP_NUM_NODES": "3", "SLURM_NNODES": "3",
           "SLURM_STEP_TASKS_PER_NODE": "1(x3)", "SLURM_NTASKS": "3",
           "SLURM_STEP_NUM_TASKS": "3"}
    check = check_config(env)
    assert check.config is not None, check.problems
    (note,) = check.notes
    assert note.code == "worker-node-count"
    assert note.title == "the process group spans 3 nodes (SLURM_STEP_NUM_NODES) but NUM_NODES=2"
    assert "NUM_NODES is stale: pods added to a running Runpod cluster" in note.fix


def test_the_batch_script_assumes_node_0_and_is_not_judged_by_it() -> None:
    # sbatch's script runs on one node of the allocation; its node 0 is an assumption, not a
    # task's index, so a Runpod pod other than the primary is no contradiction.
    batch = {k: v for k, v in SLURM_ON_RUNPOD.items()
             if not k.startswith(("SLURM_STEP", "SLURM_SRUN", "SLURM_LAUNCH"))}
    batch |= {"SLURM_NODEID": "0", "SLURM_PROCID": "0"}  # sbatch.1: task 0 of the batch step
    check = check_config(batch)
    assert check.config is not None and check.config.node_rank == 0, check.problems
    assert check.notes == ()


# -- on a simulated cluster: the live resolver of the node (its /etc/hosts, no DNS) -------------


def test_live_resolver_settles_a_named_master_addr(sim_cluster: ClusterFactory) -> None:
    """``hosts="cluster"``: ``node-0`` resolves to node 0's ``ens1`` address, the primary's."""
    cluster = sim_cluster(2, trainers=2, hosts="cluster")
    worker = cluster.nodes[1]
    cli = f"{sys.executable} -m clusterenv"
    for name, expected in (("node-0", 0), ("node-1", 1)):
        result = worker.run(["sh", "-c", f'eval "$({cli} env)" && {cli} doctor --json'],
                            env=worker.env(MASTER_ADDR=name), timeout=60)
        assert result.killed is None and result.returncode == expected, result.describe()
        findings = json.loads(result.stdout)["findings"]
        spelled = [f for f in findings if f["code"] == "config-alias-mismatch"]
        if expected == 0:
            assert spelled == [], spelled
            continue
        (finding,) = spelled
        assert "MASTER_ADDR=node-1" in finding["title"], finding
        assert "node-1 -> 10.65.0.3 (the system resolver)" in finding["evidence"], finding
