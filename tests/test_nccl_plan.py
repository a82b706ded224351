"""plan_nccl_env / apply_nccl_defaults: only unset and evidenced values, user values kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterenv import (
    ClusterEnvWarning,
    ConfigError,
    EnvChange,
    NcclPlan,
    apply_nccl_defaults,
    plan_nccl_env,
)
from clusterenv._root import Root
from clusterenv.nccl import PLANNED_VARIABLES
from clusterenv.nccl.version import (
    detect_nccl_versions,
    known_before,
    loader_dirs,
    parse_nccl_version,
)
from clusterenv.testing import HostBuilder, port
from tests.nccl_hosts import B0_ENV, b0, roce_gids, roce_node


def change(plan: NcclPlan, name: str) -> EnvChange:
    found = [c for c in plan.changes if c.name == name]
    assert len(found) == 1, plan.changes
    return found[0]


def codes(plan: NcclPlan) -> list[str]:
    return [f.code for f in plan.findings]


# -- sockets ---------------------------------------------------------------------------------


def test_b0_sets_the_three_socket_variables_to_ens1(tmp_path: Path) -> None:
    b0(tmp_path)
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    assert plan.env == {
        "NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1", "TP_SOCKET_IFNAME": "ens1",
    }
    assert all(c.action == "set" and c.previous is None for c in plan.changes)
    nccl = change(plan, "NCCL_SOCKET_IFNAME")
    assert "ens1 holds NODE_ADDR 10.65.0.2" in nccl.reason
    assert "eth0 (172.20.0.5), Runpod's management interface" in nccl.reason
    assert plan.multi_node and plan.cluster_interface == "ens1"
    assert plan.findings == ()


def test_prefix_sibling_gets_exact_nccl_value_but_plain_gloo(tmp_path: Path) -> None:
    b0(tmp_path).interface("ens10", addresses=["10.66.0.2/24"])
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    assert plan.env["NCCL_SOCKET_IFNAME"] == "=ens1"
    assert plan.env["GLOO_SOCKET_IFNAME"] == "ens1"
    assert plan.env["TP_SOCKET_IFNAME"] == "ens1"
    assert "also matches ens10" in change(plan, "NCCL_SOCKET_IFNAME").reason


def test_single_node_sets_nothing_and_says_so(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback().interface("eth0", addresses=["192.168.1.5/24"])
    plan = plan_nccl_env(environ={}, root=tmp_path)
    assert plan.changes == () and plan.env == {}
    assert not plan.multi_node
    assert any("single node" in note and "nothing to set" in note for note in plan.notes)


def test_single_node_still_reports_a_user_value_that_matches_nothing(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback().interface("eth0", addresses=["192.168.1.5/24"])
    plan = plan_nccl_env(environ={"NCCL_SOCKET_IFNAME": "ens9"}, root=tmp_path)
    assert plan.env == {}
    kept = change(plan, "NCCL_SOCKET_IFNAME")
    assert kept.action == "keep" and kept.harmful and kept.planned is None
    assert "filter-matches-nothing" in codes(plan)


def test_user_value_is_kept_and_reported(tmp_path: Path) -> None:
    b0(tmp_path)
    plan = plan_nccl_env(environ={**B0_ENV, "NCCL_SOCKET_IFNAME": "eth0"}, root=tmp_path)
    kept = change(plan, "NCCL_SOCKET_IFNAME")
    assert (kept.action, kept.value, kept.previous) == ("keep", "eth0", "eth0")
    assert kept.planned == "ens1"
    assert kept.harmful and kept.origin == "environment"
    assert "NCCL_SOCKET_IFNAME" not in plan.env
    assert plan.env["GLOO_SOCKET_IFNAME"] == "ens1"
    assert "filter-selects-avoided" in codes(plan)


def test_override_replaces_the_user_value(tmp_path: Path) -> None:
    b0(tmp_path)
    environ = {**B0_ENV, "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    plan = plan_nccl_env(environ=environ, root=tmp_path, override=True)
    overridden = change(plan, "GLOO_SOCKET_IFNAME")
    assert (overridden.action, overridden.value) == ("override", "ens1")
    assert overridden.previous == "eth0"
    assert plan.env["NCCL_SOCKET_IFNAME"] == "ens1"
    # The reason tells why the value was replaced, not what happens when it is unset, and the
    # replaced values are no longer findings.
    nccl = change(plan, "NCCL_SOCKET_IFNAME")
    assert "NCCL_SOCKET_IFNAME='eth0' selects eth0" in nccl.reason
    assert "unset" not in nccl.reason
    assert "filter-selects-avoided" not in codes(plan)
    set_reason = change(plan_nccl_env(environ=B0_ENV, root=tmp_path), "NCCL_SOCKET_IFNAME").reason
    assert set_reason == ("ens1 holds NODE_ADDR 10.65.0.2; unset, NCCL would bootstrap over eth0 "
                          "(172.20.0.5), Runpod's management interface")


def test_user_value_with_the_same_effect_is_kept_quietly(tmp_path: Path) -> None:
    b0(tmp_path)
    plan = plan_nccl_env(environ={**B0_ENV, "NCCL_SOCKET_IFNAME": "=ens1"}, root=tmp_path,
                         override=True)
    kept = change(plan, "NCCL_SOCKET_IFNAME")
    assert kept.action == "keep" and not kept.harmful
    assert "same effect" in kept.reason
    assert plan.findings == ()


def test_values_from_nccl_conf_count_as_set_by_the_user(tmp_path: Path) -> None:
    b0(tmp_path).file("etc/nccl.conf", "NCCL_SOCKET_IFNAME=eth0\nNCCL_DEBUG=WARN\n")
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path, debug=True)
    kept = change(plan, "NCCL_SOCKET_IFNAME")
    assert kept.action == "keep" and kept.origin == "/etc/nccl.conf" and kept.harmful
    assert "in /etc/nccl.conf" in kept.reason
    debug = change(plan, "NCCL_DEBUG")
    assert debug.action == "keep" and debug.value == "WARN" and not debug.harmful
    # Gloo does not read NCCL's config file.
    assert plan.env["GLOO_SOCKET_IFNAME"] == "ens1"
    finding = next(f for f in plan.findings if f.code == "filter-selects-avoided")
    assert "set in /etc/nccl.conf" in finding.evidence


def test_home_nccl_conf_beats_etc_and_override_sets_the_environment(tmp_path: Path) -> None:
    b0(tmp_path).file("home/ada/.nccl.conf", "NCCL_SOCKET_IFNAME=lo\n").file(
        "etc/nccl.conf", "NCCL_SOCKET_IFNAME=eth0\n")
    environ = {**B0_ENV, "HOME": "/home/ada"}
    plan = plan_nccl_env(environ=environ, root=tmp_path)
    assert change(plan, "NCCL_SOCKET_IFNAME").origin == "/home/ada/.nccl.conf"
    applied = apply_nccl_defaults(environ, override=True, root=tmp_path)  # replaced: no warning
    assert change(applied, "NCCL_SOCKET_IFNAME").action == "override"
    assert environ["NCCL_SOCKET_IFNAME"] == "ens1"  # the environment wins over NCCL's files


def test_debug_sets_both_debug_variables_even_on_one_node(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback()
    plan = plan_nccl_env(environ={}, root=tmp_path, debug=True)
    assert plan.env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    assert plan_nccl_env(environ={}, root=tmp_path).env == {}


def test_cluster_interface_unknown_sets_nothing(tmp_path: Path) -> None:
    b0(tmp_path)
    environ = {"MASTER_ADDR": "trainer-0.example", "NUM_NODES": "2", "NUM_TRAINERS": "8"}
    plan = plan_nccl_env(environ=environ, root=tmp_path)
    assert plan.env == {}
    finding = next(f for f in plan.findings if f.code == "cluster-interface-unknown")
    assert "host name" in finding.evidence[0]


def test_runpod_node_addr_on_management_sets_nothing(tmp_path: Path) -> None:
    b0(tmp_path)
    environ = {**B0_ENV, "NODE_ADDR": "172.20.0.5", "NODE_RANK": "1"}
    plan = plan_nccl_env(environ=environ, root=tmp_path)
    assert plan.env == {}
    finding = next(f for f in plan.findings if f.code == "cluster-interface-management")
    assert finding.severity == "error" and "eth0 (172.20.0.5)" in finding.title
    assert plan.cluster_interface is None


def test_generic_source_uses_evidence_without_runpod_rules(tmp_path: Path) -> None:
    """Elsewhere eth0 and 172.x are not special: the subnet of MASTER_ADDR decides."""
    b0(tmp_path)
    environ = {"MASTER_ADDR": "172.20.0.9", "MASTER_PORT": "29500", "NUM_NODES": "2",
               "NODE_RANK": "1", "NUM_TRAINERS": "8"}
    plan = plan_nccl_env(environ=environ, root=tmp_path)
    assert plan.env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "eth0 (172.20.0.5/16) is on the subnet of MASTER_ADDR 172.20.0.9" in change(
        plan, "NCCL_SOCKET_IFNAME").reason
    assert plan.findings == ()


def test_invalid_environment_becomes_a_finding(tmp_path: Path) -> None:
    b0(tmp_path)
    with pytest.warns(ClusterEnvWarning, match="nothing is planned"):
        plan = plan_nccl_env(environ={**B0_ENV, "WORLD_SIZE": "2"}, root=tmp_path)
    assert plan.env == {}
    assert codes(plan) == ["plan-config-invalid"]
    assert "WORLD_SIZE" in plan.findings[0].evidence[0]


def test_plan_is_json_with_attribute_names(tmp_path: Path) -> None:
    b0(tmp_path)
    data = plan_nccl_env(environ=B0_ENV, root=tmp_path).to_dict()
    json.dumps(data)
    assert set(data) >= {"changes", "findings", "notes", "env", "cluster_interface"}
    assert set(data["changes"][0]) == {"name", "value", "previous", "action", "reason", "origin",
                                       "planned", "harmful"}


# -- RDMA ------------------------------------------------------------------------------------


def test_fm09_hca_list_leaves_out_down_and_management_ports(tmp_path: Path) -> None:
    host = roce_node(tmp_path)
    host.rdma_device("mlx5_8", port(state="DOWN", link_layer="Ethernet", netdev="ens9"))
    host.rdma_device("mlx5_9", port(link_layer="Ethernet", netdev="eth0",
                                    gids=roce_gids("172.20.0.5", "eth0")))
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    assert plan.env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    excluded = next(f for f in plan.findings if f.code == "ib-hca-excluded")
    assert excluded.severity == "info"
    assert "mlx5_8:1: port DOWN" in excluded.evidence
    assert "mlx5_9:1: netdev eth0 is Runpod's management interface" in excluded.evidence


def test_ib_fabric_leaves_out_the_roce_front_end(tmp_path: Path) -> None:
    """8 InfiniBand rails beside a BlueField RoCE bond (gpud's H100 capture)."""
    host = b0(tmp_path).interface("bond0", addresses=["10.1.0.5/16"], kind="bond")
    for i in range(8):
        host.rdma_device(f"mlx5_{i}", port(link_layer="InfiniBand"))
    host.rdma_device("mlx5_bond_0", port(link_layer="Ethernet", netdev="bond0",
                                         rate="200 Gb/sec (2X NDR)"))
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    assert plan.env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert "NCCL_IB_GID_INDEX" not in plan.env
    assert any("mlx5_bond_0:1: link layer differs" in e
               for f in plan.findings for e in f.evidence)


def test_front_end_with_the_default_route_is_left_out(tmp_path: Path) -> None:
    """Generic RoCE host: rails plus a bonded front-end that carries the default route."""
    host = b0(tmp_path, routes=[("bond0", "0.0.0.0/0", "10.1.0.1"),
                                ("bond0", "10.1.0.0/16", None), ("ens1", "10.65.0.0/24", None)])
    host.interface("bond0", addresses=["10.1.0.5/16"], kind="bond")
    host.rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1",
                                    gids=roce_gids("10.65.0.2", "ens1")))
    host.rdma_device("mlx5_1", port(link_layer="Ethernet", netdev="bond0",
                                    gids=roce_gids("10.1.0.5", "bond0")))
    environ = {"MASTER_ADDR": "10.65.0.2", "NUM_NODES": "2", "NUM_TRAINERS": "8"}
    plan = plan_nccl_env(environ=environ, root=tmp_path)
    assert plan.env["NCCL_IB_HCA"] == "=mlx5_0:1"


def test_a_lone_port_on_the_default_route_nic_is_kept(tmp_path: Path) -> None:
    """The front-end rule drops the default-route NIC only while other ports remain: a host
    whose only RDMA port is on it keeps RDMA rather than fall back to TCP sockets."""
    host = b0(tmp_path, routes=[("bond0", "0.0.0.0/0", "10.1.0.1"),
                                ("bond0", "10.1.0.0/16", None), ("ens1", "10.65.0.0/24", None)])
    host.interface("bond0", addresses=["10.1.0.5/16"], kind="bond")
    host.rdma_device("mlx5_1", port(link_layer="Ethernet", netdev="bond0",
                                    gids=roce_gids("10.1.0.5", "bond0")))
    environ = {"MASTER_ADDR": "10.65.0.2", "NUM_NODES": "2", "NUM_TRAINERS": "8"}
    plan = plan_nccl_env(environ, root=tmp_path)
    assert plan.env["NCCL_IB_HCA"] == "=mlx5_1:1"
    assert not any("carries the default route" in e for f in plan.findings for e in f.evidence)


def test_rdma_in_sysfs_without_device_nodes_sets_no_hca(tmp_path: Path) -> None:
    b0(tmp_path).rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1"),
                             dev_node=False)
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    assert "NCCL_IB_HCA" not in plan.env
    assert any("no usable RDMA port" in n for n in plan.notes)


def test_efa_is_never_listed(tmp_path: Path) -> None:
    host = b0(tmp_path)
    for i in range(2):
        host.rdma_device(f"rdmap{85 + i}s0", port(link_layer="Unknown"), node_type="7: unspecified",
                         hca_type=None)
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    assert "NCCL_IB_HCA" not in plan.env and "NCCL_IB_GID_INDEX" not in plan.env


def test_no_rdma_sets_nothing_rdma_related(tmp_path: Path) -> None:
    b0(tmp_path)
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    assert not set(plan.env) & {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_DISABLE"}
    assert "NCCL_IB_HCA left unset: no RDMA device on this node" in plan.notes


@pytest.mark.parametrize(
    ("version_file", "expected"),
    [("libnccl.so.2.19.3", "3"), ("libnccl.so.2.21.5", None), (None, None)],
)
def test_fm27_gid_index_only_for_old_nccl(
    tmp_path: Path, version_file: str | None, expected: str | None
) -> None:
    host = roce_node(tmp_path, rails=2)
    if version_file:
        host.file(f"usr/lib/x86_64-linux-gnu/{version_file}", "")
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    assert plan.env.get("NCCL_IB_GID_INDEX") == expected
    if version_file is None:
        info = next(f for f in plan.findings if f.code == "ib-gid-index-info")
        assert info.severity == "info" and "index 3" in info.title
    elif expected is None:
        assert any("chooses index 3 itself" in n for n in plan.notes)


def test_gid_index_not_set_when_ports_disagree(tmp_path: Path) -> None:
    host = b0(tmp_path).interface("ens2", addresses=["10.65.1.2/24"])
    host.rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1",
                                    gids=roce_gids("10.65.0.2", "ens1", 3)))
    host.rdma_device("mlx5_1", port(link_layer="Ethernet", netdev="ens2",
                                    gids=roce_gids("10.65.1.2", "ens2", 5)))
    plan = plan_nccl_env(environ={**B0_ENV, "NCCL_VERSION": "2.18.3"}, root=tmp_path)
    assert plan.env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert "NCCL_IB_GID_INDEX" not in plan.env
    finding = next(f for f in plan.findings if f.code == "ib-gid-index-disagree")
    # NCCL 2.18 would use GID 0 (link-local) on both ports: the job cannot connect.
    assert finding.severity == "error" and "mlx5_1:1 -> 5" in finding.evidence[0]
    assert finding.fix == "use NCCL 2.21 or later, which chooses the GID per port"


def test_nccl_version_sources(tmp_path: Path) -> None:
    HostBuilder(tmp_path).file("opt/nccl/lib/libnccl.so.2.19.3", "").file(
        "custom/lib/libnccl.so.2.23.4", "")
    root = Root(tmp_path)
    found = detect_nccl_versions({"NCCL_VERSION": "2.21.5", "LD_LIBRARY_PATH": "/custom/lib"},
                                 root)
    assert [(str(v), v.source) for v in found] == [
        ("2.21.5", "NCCL_VERSION"),
        ("2.19.3", "/opt/nccl/lib/libnccl.so.2.19.3"),
        ("2.23.4", "/custom/lib/libnccl.so.2.23.4"),
    ]
    assert known_before(found, (2, 21)) is None  # the evidence disagrees
    assert known_before(found[:1], (2, 21)) is False
    assert known_before(found[1:2], (2, 21)) is True
    assert known_before((), (2, 21)) is None
    assert parse_nccl_version("2.21.5-1+cuda12.4") == (2, 21, 5)
    assert parse_nccl_version("12.4") is None


# -- apply -----------------------------------------------------------------------------------


def test_apply_sets_the_mapping_and_is_idempotent(tmp_path: Path) -> None:
    b0(tmp_path)
    environ = dict(B0_ENV)
    first = apply_nccl_defaults(environ, root=tmp_path)
    assert environ == {**B0_ENV, **first.env}
    snapshot = dict(environ)
    second = apply_nccl_defaults(environ, root=tmp_path)
    assert environ == snapshot
    assert second.env == {} and all(c.action == "keep" and not c.harmful for c in second.changes)


def test_apply_warns_about_harmful_kept_values(tmp_path: Path) -> None:
    b0(tmp_path)
    environ = {**B0_ENV, "GLOO_SOCKET_IFNAME": "eth0", "NCCL_P2P_DISABLE": "1"}
    with pytest.warns(ClusterEnvWarning) as caught:
        apply_nccl_defaults(environ, root=tmp_path)
    messages = [str(w.message) for w in caught]
    assert any(m.startswith("GLOO_SOCKET_IFNAME='eth0' kept") for m in messages)
    assert any(m.startswith("NCCL_P2P_DISABLE='1' kept") for m in messages)
    assert environ["GLOO_SOCKET_IFNAME"] == "eth0" and environ["NCCL_P2P_DISABLE"] == "1"


@pytest.fixture
def initialised_torch_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``torch.distributed`` in ``sys.modules`` whose default group exists."""
    fake = types.ModuleType("torch.distributed")
    fake.is_initialized = lambda: True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)


@pytest.mark.usefixtures("initialised_torch_distributed")
def test_apply_warns_when_torch_distributed_is_initialised(tmp_path: Path) -> None:
    b0(tmp_path)
    with pytest.warns(ClusterEnvWarning, match="already initialised"):
        apply_nccl_defaults(dict(B0_ENV), root=tmp_path)


@pytest.mark.usefixtures("initialised_torch_distributed")
def test_no_late_warning_when_nothing_changes(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_nccl_defaults({}, root=tmp_path)


def test_apply_defaults_to_os_environ_in_a_fresh_process(tmp_path: Path) -> None:
    b0(tmp_path)
    code = (
        "import os, clusterenv; plan = clusterenv.apply_nccl_defaults(root=os.environ['ROOT']); "
        "print(os.environ['NCCL_SOCKET_IFNAME'], os.environ['GLOO_SOCKET_IFNAME'], "
        "'torch' in __import__('sys').modules)"
    )
    env = {**B0_ENV, "ROOT": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ens1", "ens1", "False"]


# -- properties ------------------------------------------------------------------------------

_NAMES = st.sampled_from([
    *PLANNED_VARIABLES, *B0_ENV, "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_NET", "RANK",
    "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "CUDA_VISIBLE_DEVICES", "NCCL_CONF_FILE", "HOME",
    "NCCL_ASYNC_ERROR_HANDLING", "VLLM_HOST_IP",
])
_VALUES = st.one_of(
    st.sampled_from(["", "0", "1", "2", "eth0", "ens1", "=ens1", "^lo", "10.65.0.2",
                     "172.20.0.9", "mlx5_0", "localhost", "29500", "16", "INFO", "-1", "3"]),
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"), max_size=12),
)
_ENVIRONS = st.dictionaries(_NAMES, _VALUES, max_size=10).map(
    lambda extra: {**B0_ENV, **extra}
) | st.dictionaries(_NAMES, _VALUES, max_size=10)


@pytest.fixture(scope="module")
def roce_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("roce")
    roce_node(root, rails=2).interface("ens10", addresses=["10.66.0.2/24"]).file(
        "etc/nccl.conf", "NCCL_IB_HCA=mlx5\n")
    return root


def _apply_quietly(environ: dict[str, str], root: Path, *, override: bool = False,
                   debug: bool = False) -> NcclPlan:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClusterEnvWarning)
        return apply_nccl_defaults(environ, root=root, override=override, debug=debug)


_PROPERTY = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@_PROPERTY
@given(environ=_ENVIRONS, debug=st.booleans())
def test_property_apply_never_changes_a_variable_set_before(
    roce_root: Path, environ: dict[str, str], debug: bool
) -> None:
    before = dict(environ)
    plan = _apply_quietly(environ, roce_root, debug=debug)
    assert {k: environ[k] for k in before} == before
    assert set(environ) - set(before) == set(plan.env) <= set(PLANNED_VARIABLES)


@_PROPERTY
@given(environ=_ENVIRONS, debug=st.booleans(), override=st.booleans())
def test_property_applying_twice_equals_once(
    roce_root: Path, environ: dict[str, str], debug: bool, override: bool
) -> None:
    _apply_quietly(environ, roce_root, debug=debug, override=override)
    once = dict(environ)
    second = _apply_quietly(environ, roce_root, debug=debug, override=override)
    assert environ == once
    assert second.env == {}


@_PROPERTY
@given(environ=_ENVIRONS)
def test_property_plan_never_raises(roce_root: Path, environ: dict[str, str]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ClusterEnvWarning)
        plan = plan_nccl_env(environ=environ, root=roce_root)
    invalid = "plan-config-invalid" in codes(plan)
    # An invalid contract plans nothing and says so; a valid one plans without a word.
    assert invalid == any("nothing is planned" in str(w.message) for w in caught)
    assert set(plan.env) <= set(PLANNED_VARIABLES)
    assert "NCCL_IB_DISABLE" not in plan.env


# -- real captures (tests/profiles) ------------------------------------------------------------

#: Profile -> the ports NCCL_IB_HCA must list (None: left unset), from what each capture shows.
EXPECTED_HCAS: dict[str, tuple[str, ...] | None] = {
    # 8 InfiniBand rails; the BlueField RoCE LAG is a minority link layer.
    "ib-ndr-bf3-bond-sysfs": ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7",
                              "mlx5_8", "mlx5_9"),
    "ib-ndr-bf3-bond-ibstat": ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7",
                               "mlx5_8", "mlx5_9"),
    # The one ACTIVE CX6 Dx Ethernet port is the front-end; three others are down.
    "ib-ndr-cx6dx-some-down": ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9",
                               "mlx5_10", "mlx5_11"),
    # All RoCE: the 100 GbE CX6 Dx ports are slower than the 400 GbE rails.
    "roce-cx7-400g-cx6dx-100g": ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9",
                                 "mlx5_10", "mlx5_11"),
    "roce-cx7-12dev-2down": tuple(f"mlx5_{i}" for i in range(8)),
    # Azure-style VMs: the Ethernet VF is left out.
    "a100-vf-mt4126-eth-vf": tuple(f"mlx5_{i}" for i in range(1, 9)),
    "azure-a100-ibstatus": tuple(f"mlx5_{i}" for i in range(8)),
    "a100-vf-mt4124-exit255": tuple(f"mlx5_{i}" for i in range(8)),
    "efa-p5en-16dev": None,  # EFA needs the aws-ofi-nccl plugin, not NCCL_IB_HCA
    "container-only-uverbs1": ("mlx5_1",),  # the only device given to the container
    "container-bond-no-rdma": None,
    # bond0 (two 200 GbE ports) is the front-end beside eight 400 GbE rails.
    "roce-bond0-ibdev2netdev": ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9",
                                "mlx5_10", "mlx5_11"),
    "roce-4nodes-aihub0008": ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_5", "mlx5_6", "mlx5_7",
                              "mlx5_8", "mlx5_11"),
    "roce-show-gids-mlx5_0": ("mlx5_0",),
    "roce-bond-gid-list": ("mlx5_bond_0",),
    "ionic-ipv6-only": tuple(f"ionic_{i}" for i in range(4)),
    "k8s-ib-vf-init": None,  # the only port is in INIT
    # The down ports and the 200 GbE ports of the dual-port boards are left out.
    "roce-cx7-down-polling": tuple(f"mlx5_{i}" for i in range(8)),
}


#: Profiles whose NCCL before 2.21 needs an index that the defaults of 2.21 and later do not pick.
OLD_NCCL_GID_INDEX = {"ionic-ipv6-only": "1"}  # the ULA: the only GID that reaches other nodes


def test_every_profile_has_an_expected_hca_list() -> None:
    from tests.profiles import PROFILES

    assert set(EXPECTED_HCAS) == set(PROFILES)


@pytest.mark.parametrize("name", sorted(EXPECTED_HCAS))
def test_hca_list_on_real_captures(tmp_path: Path, name: str) -> None:
    from tests.profiles import PROFILES

    profile = PROFILES[name]
    root = profile.build(tmp_path)
    environ = {"MASTER_ADDR": "10.0.0.1", "NUM_NODES": "2", "NUM_TRAINERS": "8",
               "NCCL_VERSION": "2.19.3"}
    plan = plan_nccl_env(environ=environ, root=root)
    devices = EXPECTED_HCAS[name]
    if devices is None:
        assert "NCCL_IB_HCA" not in plan.env
        return
    assert plan.env["NCCL_IB_HCA"] == "=" + ",".join(f"{d}:1" for d in devices)
    listed = [profile.ports[f"{d}:1"] for d in devices]
    indexes = {p.nccl_gid_index for p in listed}
    roce = all(p.link_layer == "Ethernet" for p in listed)
    reach = all(p.nccl_gid_reaches_peers for p in listed)
    agreed = roce and reach and len(indexes) == 1
    expected_gid = str(indexes.pop()) if agreed else OLD_NCCL_GID_INDEX.get(name)
    assert plan.env.get("NCCL_IB_GID_INDEX") == expected_gid


# -- one convention for the entry points ---------------------------------------------------------


def test_environ_comes_first_positionally_and_nccl_version_reaches_apply(roce_root: Path) -> None:
    # NCCL 2.19 needs NCCL_IB_GID_INDEX on RoCE; 2.21 chooses it per port: the version given to
    # apply_nccl_defaults must reach the plan, as it does for plan_nccl_env.
    old, new = dict(B0_ENV), dict(B0_ENV)
    older = _quiet(lambda: apply_nccl_defaults(old, root=roce_root, nccl_version="2.19.3"))
    newer = _quiet(lambda: apply_nccl_defaults(new, root=roce_root, nccl_version="2.21.5"))
    assert (older.nccl_version, newer.nccl_version) == ("2.19.3", "2.21.5")
    assert old.get("NCCL_IB_GID_INDEX") == "3"
    assert "NCCL_IB_GID_INDEX" not in new
    assert plan_nccl_env(B0_ENV, root=roce_root, nccl_version="2.19.3") == older
    with pytest.raises(TypeError):
        plan_nccl_env(B0_ENV, roce_root)  # type: ignore[call-arg]  # the rest by keyword


def test_the_plan_does_not_depend_on_what_touched_the_facts_first(roce_root: Path) -> None:
    from clusterenv._facts import Facts
    from clusterenv.nccl.plan import plan_from_facts

    for environ in (B0_ENV, {}):  # a multi-node and a single-node (local) environment
        untouched = Facts(environ=environ, root=Root(roce_root), nccl_version="2.21.5")
        touched = Facts(environ=environ, root=Root(roce_root), nccl_version="2.21.5")
        assert touched.nccl_versions  # as a check that runs first (doctor, preflight) would
        assert plan_from_facts(untouched) == plan_from_facts(touched)
        expected = "2.21.5" if environ else None
        assert plan_from_facts(untouched).nccl_version == expected


def _quiet(call: Callable[[], NcclPlan]) -> NcclPlan:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClusterEnvWarning)
        return call()


# -- "the same effect": a user value is kept only when it selects exactly what the plan would ---


@pytest.mark.parametrize(("name", "same", "different"), [
    ("NCCL_SOCKET_IFNAME", "=ens1", "ens2"),
    ("GLOO_SOCKET_IFNAME", "ens1", "ens2"),
    ("TP_SOCKET_IFNAME", "ens1", "ens2"),
    ("TP_SOCKET_IFNAME", "ens1", "ens1,ens2"),
])
def test_a_user_value_counts_as_the_same_only_when_it_selects_the_cluster_interface(
    tmp_path: Path, name: str, same: str, different: str
) -> None:
    b0(tmp_path)  # cluster interface ens1; ens2 is up too

    def change(value: str) -> EnvChange:
        plan = plan_nccl_env({**B0_ENV, name: value}, root=tmp_path, override=True)
        return next(c for c in plan.changes if c.name == name)

    kept = change(same)
    assert (kept.action, kept.value) == ("keep", same)
    assert "same effect" in kept.reason
    replaced = change(different)
    assert (replaced.action, replaced.value, replaced.previous) == ("override", "ens1", different)


def test_one_loader_search_for_libibverbs_and_libnccl(tmp_path: Path) -> None:
    # doctor's libibverbs check and the NCCL version read the same directories.
    from clusterenv._facts import Facts
    from clusterenv.diagnosis.rdma import _has_libibverbs
    from clusterenv.nccl.version import loader_dirs

    host = HostBuilder(tmp_path)
    host.file("opt/conf/lib/libibverbs.so.1", "").file("opt/conf/lib/libnccl.so.2.21.5", "")
    host.file("etc/ld.so.conf.d/rdma.conf", "# rdma-core\n/opt/conf/lib\n")
    host.file("opt/env/lib/libnccl.so.2.19.3", "")
    host.file("opt/env/relative/libnccl.so.2.18.1", "")
    # ";" separates like ":" for the loader; empty and relative entries name the current
    # directory (" /opt/x" too: the loader strips no space), so none of them is read.
    environ = {"LD_LIBRARY_PATH": "/opt/env/lib/;/opt/../etc:: /opt/env/relative:relative"}
    dirs = loader_dirs(Root(tmp_path), environ)
    assert {"opt/conf/lib", "opt/env/lib"} <= set(dirs)
    assert not [d for d in dirs if ".." in d.split("/") or "relative" in d]
    assert _has_libibverbs(Facts(environ=environ, root=Root(tmp_path)))
    found = {v.version for v in detect_nccl_versions(environ, Root(tmp_path))}
    assert {(2, 21, 5), (2, 19, 3)} <= found
    assert (2, 18, 1) not in found


def test_one_library_reached_by_two_names_is_one_piece_of_evidence(tmp_path: Path) -> None:
    # A real H200 host (Ubuntu 24.04, merged /usr) listed its one system libnccl twice, as
    # /lib/x86_64-linux-gnu/... and /usr/lib/x86_64-linux-gnu/..., because /lib -> usr/lib.
    # Every way to reach a directory twice: the standard link, an absolute link, a CUDA-style
    # versioned directory, and LD_LIBRARY_PATH naming both the link and its target.
    host = HostBuilder(tmp_path)
    host.file("usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3", "")
    host.file("usr/local/cuda-13.0/lib64/libnccl.so.2.27.7", "")
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "lib64").symlink_to("/usr/lib64")  # absolute: resolved inside the snapshot
    (tmp_path / "usr/lib64").mkdir()
    (tmp_path / "usr/local/cuda").symlink_to("cuda-13.0")
    environ = {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/usr/local/cuda-13.0/lib64:/nowhere"}
    found = detect_nccl_versions(environ, Root(tmp_path))
    assert sorted((str(v), v.source) for v in found) == [
        ("2.27.7", "/usr/local/cuda/lib64/libnccl.so.2.27.7"),
        ("2.28.3", "/lib/x86_64-linux-gnu/libnccl.so.2.28.3"),
    ]
    dirs = loader_dirs(Root(tmp_path), environ)
    assert "nowhere" in dirs and "usr/lib/x86_64-linux-gnu" not in dirs


def test_the_live_hosts_loader_directories_are_each_listed_once() -> None:
    dirs = loader_dirs(Root("/"), {"LD_LIBRARY_PATH": "/lib:/usr/lib:/lib64"})
    identities = [(s.st_dev, s.st_ino) for s in (os.stat(f"/{d}") for d in dirs
                                                 if os.path.isdir(f"/{d}"))]
    assert len(identities) == len(set(identities)), dirs


def test_an_invalid_contract_is_never_a_silent_empty_plan(tmp_path: Path) -> None:
    """WORLD_SIZE given as a node count: nothing can be planned, and the caller is told."""
    b0(tmp_path)
    environ = {**B0_ENV, "WORLD_SIZE": "2"}
    with pytest.warns(ClusterEnvWarning, match=r"invalid .*WORLD_SIZE=2 != NUM_NODES\*"):
        plan = apply_nccl_defaults(environ, root=tmp_path)
    assert plan.env == {} and environ == {**B0_ENV, "WORLD_SIZE": "2"}
    with pytest.warns(ClusterEnvWarning, match="WORLD_SIZE counts processes"):
        assert plan_nccl_env(environ, root=tmp_path).env == {}
    with pytest.raises(ConfigError, match="WORLD_SIZE=2") as raised:
        apply_nccl_defaults(environ, root=tmp_path, strict=True)
    assert "WORLD_SIZE" in raised.value.variables
    with pytest.raises(ConfigError, match="WORLD_SIZE=2"):
        plan_nccl_env(environ, root=tmp_path, strict=True)
    assert environ == {**B0_ENV, "WORLD_SIZE": "2"}
    # A valid contract: no warning, strict or not.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plan_nccl_env(B0_ENV, root=tmp_path, strict=True).env
