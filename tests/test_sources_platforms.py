"""Node-level platforms, table-driven from reference/launchers.md §7-10 (examples and traps)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clusterenv import ClusterConfig, ConfigError
from clusterenv.config import check_config
from tests.test_sources import _summary

# §7: the run stage on node 1 of 2 (8 GPUs each).
SKYPILOT = {
    "SKYPILOT_NODE_RANK": "1", "SKYPILOT_NODE_IPS": "10.0.0.4\n10.0.0.5",
    "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NUM_GPUS_PER_NODE": "8",
    "SKYPILOT_TASK_ID": "sky-2023-07-06-21-18-31-563597_myclus_1",
}
# §8: dstack node 1 of 2.
DSTACK = {
    "DSTACK_NODE_RANK": "1", "DSTACK_NODES_NUM": "2", "DSTACK_MASTER_NODE_IP": "10.0.0.4",
    "DSTACK_NODES_IPS": "10.0.0.4\n10.0.0.5", "DSTACK_GPUS_PER_NODE": "8",
    "DSTACK_GPUS_NUM": "16",
}
# §9.1: PyTorchJob v1, worker pod 0 (pod index 1), nprocPerNode "8".
KUBEFLOW_V1 = {
    "KUBERNETES_SERVICE_HOST": "10.96.0.1", "MASTER_ADDR": "myjob-master-0",
    "MASTER_PORT": "23456", "PET_MASTER_ADDR": "myjob-master-0", "PET_MASTER_PORT": "23456",
    "RANK": "1", "PET_NODE_RANK": "1", "WORLD_SIZE": "16", "PET_NPROC_PER_NODE": "8",
    "PET_NNODES": "2", "PYTHONUNBUFFERED": "1",
}
# §9.2: TrainJob v2 node 2 of 4.
KUBEFLOW_V2 = {
    "KUBERNETES_SERVICE_HOST": "10.96.0.1", "PET_NNODES": "4", "PET_NPROC_PER_NODE": "8",
    "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "mytrainjob-node-0-0.mytrainjob",
    "PET_MASTER_PORT": "29500", "JOB_COMPLETION_INDEX": "2",
}
# §10.1: the training toolkit on algo-2 of two.
SAGEMAKER = {
    "SM_HOSTS": '["algo-1","algo-2"]', "SM_CURRENT_HOST": "algo-2", "SM_NUM_GPUS": "8",
    "SM_NETWORK_INTERFACE_NAME": "eth0", "SM_NUM_CPUS": "96",
}
# §10.4: a workerpool1 replica, index 0, of one primary and two workers.
VERTEX = {"CLUSTER_SPEC": json.dumps({
    "cluster": {"workerpool0": ["cmle-training-workerpool0-ab12cd-0:2222"],
                "workerpool1": ["cmle-training-workerpool1-ab12cd-0:2222",
                                "cmle-training-workerpool1-ab12cd-1:2222"]},
    "task": {"type": "workerpool1", "index": 0, "trial": ""}, "environment": "cloud"})}
# §10.3: PAI-DLC worker 1 of master + 1 worker.
PAIDLC = {"MASTER_ADDR": "dlc18isgeayd-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "2",
          "RANK": "1", "NPROC_PER_NODE": "8"}

ACCEPTED: list[tuple[str, dict[str, str], dict[str, Any], dict[str, Any]]] = [
    ("skypilot", SKYPILOT, {}, {"source": "skypilot", "primary": "10.0.0.4:29500", "node": 1,
                                "nodes": 2, "per_node": 8, "world": 16}),
    ("skypilot-master-port", {**SKYPILOT, "MASTER_PORT": "8008"}, {},
     {"source": "skypilot", "primary": "10.0.0.4:8008", "node": 1, "nodes": 2, "per_node": 8,
      "world": 16}),
    ("skypilot-cpu-node", {**SKYPILOT, "SKYPILOT_NUM_GPUS_PER_NODE": "0"}, {},
     {"source": "skypilot", "primary": "10.0.0.4:29500", "node": 1, "nodes": 2, "per_node": 1,
      "world": 2}),
    ("dstack", DSTACK, {}, {"source": "dstack", "primary": "10.0.0.4:29500", "node": 1,
                            "nodes": 2, "per_node": 8, "world": 16}),
    ("kubeflow-v1-rank-is-the-pod", KUBEFLOW_V1, {},
     {"source": "kubeflow", "primary": "myjob-master-0:23456", "node": 1, "nodes": 2,
      "per_node": 8, "world": 16}),
    ("kubeflow-v1-pods-world-size", {**KUBEFLOW_V1, "WORLD_SIZE": "2"}, {},
     {"source": "kubeflow", "primary": "myjob-master-0:23456", "node": 1, "nodes": 2,
      "per_node": 8, "world": 16}),
    ("kubeflow-v2", KUBEFLOW_V2, {},
     {"source": "kubeflow", "primary": "mytrainjob-node-0-0.mytrainjob:29500", "node": 2,
      "nodes": 4, "per_node": 8, "world": 32}),
    ("kubeflow-v1-elastic-fixed", {**{k: v for k, v in KUBEFLOW_V1.items()
                                     if "MASTER" not in k},
                                  "PET_NNODES": "2:2", "PET_RDZV_ENDPOINT": "myjob-worker-0:23456"},
     {}, {"source": "kubeflow", "primary": "myjob-worker-0:23456", "node": 1, "nodes": 2,
          "per_node": 8, "world": 16}),
    ("sagemaker-toolkit", SAGEMAKER, {}, {"source": "sagemaker", "primary": "algo-1:7777",
                                          "node": 1, "nodes": 2, "per_node": 8, "world": 16}),
    ("sagemaker-sdk-driver-sorted-rank", {
        "SM_HOSTS": '["algo-2","algo-10","algo-1"]', "SM_CURRENT_HOST": "algo-10",
        "SM_MASTER_ADDR": "algo-1", "SM_MASTER_PORT": "7777", "SM_HOST_COUNT": "3",
        "SM_CURRENT_HOST_RANK": "1", "SM_NPROC_PER_NODE": "4"}, {},
     {"source": "sagemaker", "primary": "algo-1:7777", "node": 1, "nodes": 3, "per_node": 4,
      "world": 12}),
    ("vertex-worker", VERTEX, {}, {"source": "vertex",
                                   "primary": "cmle-training-workerpool0-ab12cd-0:2222",
                                   "node": 1, "nodes": 3, "per_node": 1, "world": 3}),
    ("paidlc-forced", PAIDLC, {"source": "paidlc"},
     {"source": "paidlc", "primary": "dlc18isgeayd-master-0:23456", "node": 1, "nodes": 2,
      "per_node": 8, "world": 16}),
    ("paidlc-by-variable", {**PAIDLC, "CLUSTERENV_SOURCE": "paidlc"}, {},
     {"source": "paidlc", "primary": "dlc18isgeayd-master-0:23456", "node": 1, "nodes": 2,
      "per_node": 8, "world": 16}),
]


@pytest.mark.parametrize(("env", "kwargs", "expected"), [r[1:] for r in ACCEPTED],
                         ids=[r[0] for r in ACCEPTED])
def test_platform_reads(env: dict[str, str], kwargs: dict[str, Any],
                        expected: dict[str, Any]) -> None:
    check = check_config(env, **kwargs)
    assert check.config is not None, check.problems
    assert _summary(check.config) == expected
    assert check.config.process is None


def test_skypilot_and_dstack_know_this_nodes_address() -> None:
    assert ClusterConfig.from_env(SKYPILOT).node_addr == "10.0.0.5"
    assert ClusterConfig.from_env(DSTACK).node_addr == "10.0.0.5"


def test_paidlc_is_never_detected() -> None:
    # Without forcing, PAI-DLC's WORLD_SIZE=2 reads as processes (the generic meaning).
    cfg = ClusterConfig.from_env(PAIDLC)
    assert cfg.source == "generic" and cfg.source != "paidlc"


REFUSED: list[tuple[str, dict[str, str], set[str], str]] = [
    ("skypilot-ip-count", {**SKYPILOT, "SKYPILOT_NUM_NODES": "3"},
     {"SKYPILOT_NODE_IPS", "SKYPILOT_NUM_NODES"}, "lists 2 addresses"),
    ("skypilot-bad-ip", {**SKYPILOT, "SKYPILOT_NODE_IPS": "10.0.0.4\nnode-b"},
     {"SKYPILOT_NODE_IPS"}, "not an IP address"),
    ("dstack-master-ip-not-yet-known", {**DSTACK, "DSTACK_MASTER_NODE_IP": ""},
     {"DSTACK_MASTER_NODE_IP"}, "not set"),
    ("dstack-node-groups-differ", {**DSTACK, "DSTACK_GPUS_NUM": "12"},
     {"DSTACK_GPUS_NUM", "DSTACK_NODES_NUM", "DSTACK_GPUS_PER_NODE"}, "different GPU counts"),
    ("kubeflow-elastic-range", {**KUBEFLOW_V2, "PET_NNODES": "1:4"}, {"PET_NNODES"},
     "elastic range"),
    # Two addresses that differ disagree as written; two names only by resolving (doctor).
    ("kubeflow-v1-master-aliases-disagree", {**KUBEFLOW_V1, "MASTER_ADDR": "10.96.3.7",
                                             "PET_MASTER_ADDR": "10.96.3.8"},
     {"PET_MASTER_ADDR", "MASTER_ADDR"}, "disagree"),
    ("sagemaker-current-host-missing", {**SAGEMAKER, "SM_CURRENT_HOST": "algo-3"},
     {"SM_CURRENT_HOST", "SM_HOSTS"}, "not in SM_HOSTS"),
    ("sagemaker-garbled-hosts", {**SAGEMAKER, "SM_HOSTS": "algo-1,algo-2"}, {"SM_HOSTS"},
     "not JSON"),
    ("vertex-parameter-server", {"CLUSTER_SPEC": json.dumps({
        "cluster": {"workerpool0": ["h-0:2222"], "workerpool2": ["ps-0:2222"]},
        "task": {"type": "workerpool2", "index": 0}})}, {"CLUSTER_SPEC"}, "not training nodes"),
    ("vertex-garbled", {"CLUSTER_SPEC": '{"cluster": {}}'}, {"CLUSTER_SPEC"}, "workerpool0"),
]


@pytest.mark.parametrize(("env", "variables", "text"), [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])
def test_platform_refuses(env: dict[str, str], variables: set[str], text: str) -> None:
    with pytest.raises(ConfigError) as info:
        ClusterConfig.from_env(env)
    assert set(info.value.variables) == variables, info.value
    assert text in str(info.value)


def test_torchrun_on_skypilot_is_checked_against_skypilot() -> None:
    worker = {**SKYPILOT, "TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "10.0.0.9",
              "MASTER_PORT": "8008", "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "24",
              "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "3"}
    check = check_config(worker)
    assert check.config is not None and check.config.source == "torchelastic"
    codes = sorted(f.code for f in check.notes)
    assert codes == ["worker-node-count", "worker-primary-addr"]
    assert all("source skypilot" in f.evidence for f in check.notes)


def test_lightning_child_on_dstack_takes_the_node_count_from_dstack() -> None:
    child = {**DSTACK, "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29500", "LOCAL_RANK": "3",
             "NODE_RANK": "1", "WORLD_SIZE": "16"}
    cfg = ClusterConfig.from_env(child)
    assert cfg.source == "lightning"
    assert cfg.process is not None and (cfg.process.rank, cfg.num_nodes) == (11, 2)


def test_sagemaker_names_the_socket_interface(tmp_path: Path) -> None:
    # §10.1: SM_NETWORK_INTERFACE_NAME is the NIC SageMaker's own toolkit gives NCCL; the host
    # names in SM_HOSTS give no subnet to match, so without it no interface could be chosen.
    from clusterenv import plan_nccl_env
    from clusterenv.testing import HostBuilder

    HostBuilder(tmp_path).loopback().interface("eth0", addresses=["10.0.1.5/24"]) \
        .interface("eth1", addresses=["10.0.2.5/24"])
    plan = plan_nccl_env({**SAGEMAKER, "SM_NETWORK_INTERFACE_NAME": "eth1"}, root=tmp_path)
    assert plan.env.get("NCCL_SOCKET_IFNAME") in {"eth1", "=eth1"}
    # A name that is not on this host is not evidence of anything.
    plan = plan_nccl_env({**SAGEMAKER, "SM_NETWORK_INTERFACE_NAME": "ethwe"}, root=tmp_path)
    assert "NCCL_SOCKET_IFNAME" not in plan.env
