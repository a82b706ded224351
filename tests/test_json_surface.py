"""The public JSON surface: every public result type has ``to_dict()``, and ``--json`` is it.

The host is B0 with two RoCE rails (tests/nccl_hosts.py, from the catalogue's Runpod node).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clusterenv import (
    ClusterConfig,
    EnvChange,
    Finding,
    Gid,
    HostFacts,
    Interface,
    NcclPlan,
    NetworkInterfaces,
    ProcessContext,
    RdmaDevice,
    RdmaInfo,
    RdmaPort,
)
from clusterenv.cli import main
from clusterenv.diagnosis import diagnose_with_plan
from clusterenv.nccl_log import (
    GpuDirect,
    LogMessage,
    NcclLog,
    NetDevice,
    NetPlugin,
    RankInfo,
    SocketEndpoint,
    read_nccl_log,
)
from clusterenv.preflight import (
    Fingerprint,
    NodeRef,
    NodeSummary,
    PreflightResult,
    Problem,
    RdmaSummary,
    RingHop,
    Verdict,
)
from tests.nccl_hosts import B0_ENV, roce_node
from tests.test_config import TORCHRUN_WORKER

PUBLIC_RESULTS = [
    ClusterConfig, ProcessContext, NetworkInterfaces, Interface, RdmaInfo, RdmaDevice, RdmaPort,
    Gid, HostFacts, NcclPlan, EnvChange, Finding, PreflightResult, Verdict, Problem, NodeRef,
    NodeSummary, RingHop, Fingerprint, RdmaSummary, NcclLog, RankInfo, SocketEndpoint, NetDevice,
    GpuDirect, NetPlugin, LogMessage,
]
LOG = Path(__file__).parent / "data" / "nccl_logs" / "roce-2.27-gdr-disabled.txt"


@pytest.mark.parametrize("cls", PUBLIC_RESULTS, ids=lambda c: c.__name__)
def test_every_public_result_type_has_its_own_documented_to_dict(cls: type) -> None:
    method = vars(cls).get("to_dict")
    assert callable(method), f"{cls.__name__} has no to_dict()"
    assert method.__doc__, f"{cls.__name__}.to_dict has no docstring"
    assert not hasattr(cls, "__json_extra__")


def json_data(value: Any) -> dict[str, Any]:
    """``value.to_dict()``, checked to be JSON data (it survives a round trip unchanged)."""
    data: dict[str, Any] = value.to_dict()
    assert json.loads(json.dumps(data)) == data
    return data


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("json-b0")
    roce_node(root, rails=2)
    return root


def test_host_results_carry_their_derived_facts(snapshot: Path) -> None:
    diagnosis = diagnose_with_plan(environ=B0_ENV, root=snapshot)
    plan, facts = diagnosis.plan, diagnosis.facts
    assert facts.config is not None
    config = json_data(facts.config)
    assert (config["host_node_addr"], config["is_primary"], config["is_multi_node"]) == (
        facts.config.host_node_addr, facts.config.is_primary, facts.config.is_multi_node)
    network = json_data(facts.network)
    ens1 = next(i for i in network["interfaces"] if i["name"] == "ens1")
    assert ens1["is_up"] is True and ens1["has_routable_address"] is True
    assert ens1["ipv4"] == ["10.65.0.2/24"]
    rdma = json_data(facts.rdma)
    assert rdma["transport"] == facts.rdma.transport == "roce"
    device = rdma["devices"][0]
    assert device["usable"] is True and device["netdevs"] == ["ens1"]
    port = device["ports"][0]
    assert port["active"] is True and port["nccl_gid_index"] == 3
    assert {"ipv4", "roce_version"} <= set(port["gids"][3])
    json_data(facts.host)
    data = json_data(plan)
    assert data["env"] == plan.env and data["env"]["NCCL_SOCKET_IFNAME"] == "ens1"
    assert data["changes"][0] == json_data(plan.changes[0])


def test_the_worker_context_is_json_data() -> None:
    config = ClusterConfig.from_env(TORCHRUN_WORKER)
    assert config.process is not None
    assert json_data(config)["process"] == json_data(config.process)


def test_nccl_log_results_carry_their_derived_facts() -> None:
    log = read_nccl_log(LOG)
    data = json_data(log)
    assert (data["transport"], data["hosts"], data["multi_node"]) == (
        log.transport, list(log.hosts), log.multi_node)
    assert log.devices
    assert data["devices"][0]["label"] == log.devices[0].label
    assert data["gpudirect"]["enabled"] == log.gpudirect.enabled


def test_a_verdict_carries_ok_and_exit_code_and_survives_the_wire() -> None:
    verdict = Verdict(expected_nodes=2, primary="10.65.0.2:29501", problems=(
        Problem.about("preflight-rank-missing", "1 of 2 nodes did not report", (NodeRef(1),)),))
    data = json_data(verdict)
    assert (data["ok"], data["exit_code"]) == (False, 1)
    assert data["problems"][0]["nodes"] == [{"rank": 1, "addr": None, "hostname": None}]
    assert Verdict.from_wire(verdict.to_wire()) == verdict


def test_cli_json_is_what_to_dict_returns(
    snapshot: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    diagnosis = diagnose_with_plan(environ=B0_ENV, root=snapshot, ask_nccl=True)
    findings, plan, facts = list(diagnosis.findings), diagnosis.plan, diagnosis.facts
    assert main(["show", "--json", "--root", str(snapshot)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert facts.config is not None
    assert shown["config"] == facts.config.to_dict()
    assert shown["network"] == facts.network.to_dict()
    assert shown["rdma"] == facts.rdma.to_dict()
    assert shown["host"] == facts.host.to_dict()
    assert shown["plan"] == plan.to_dict()
    assert shown["findings"] == [f.to_dict() for f in findings]
