"""ClusterConfig: every source and every validation rule of DESIGN §4.1, table-driven."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterenv import ClusterConfig, ConfigError, ProcessContext
from clusterenv.config import check_config
from clusterenv.sources._base import MAX_NODES
from clusterenv.testing import HostBuilder

# The Runpod baseline node B0 of the failure-mode catalogue (node 0 of 2, 8 GPUs each).
RUNPOD = {
    "PRIMARY_ADDR": "10.65.0.2",
    "MASTER_ADDR": "10.65.0.2",
    "PRIMARY_PORT": "29500",
    "MASTER_PORT": "29500",
    "NODE_ADDR": "10.65.0.2",
    "NODE_RANK": "0",
    "NUM_NODES": "2",
    "NUM_TRAINERS": "8",
    "WORLD_SIZE": "16",
    "HOST_NODE_ADDR": "10.65.0.2:29500",
}
# Node 1 of the same cluster.
RUNPOD_NODE1 = {**RUNPOD, "NODE_ADDR": "10.65.0.3", "NODE_RANK": "1"}

# What torchrun gives worker 9 (node 1, local rank 1) of a 2 x 8 job, on a Runpod node.
TORCHRUN_WORKER = {
    **RUNPOD_NODE1,
    "WORLD_SIZE": "16",
    "RANK": "9",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "8",
    "GROUP_RANK": "1",
    "ROLE_RANK": "9",
    "TORCHELASTIC_RUN_ID": "none",
}


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


def problems_of(env: dict[str, str], **kwargs: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        ClusterConfig.from_env(env, **kwargs)
    return info.value


# -- sources ---------------------------------------------------------------------------------


def test_runpod_baseline() -> None:
    cfg = ClusterConfig.from_env(RUNPOD)
    assert cfg.source == "runpod"
    assert (cfg.primary_addr, cfg.primary_port, cfg.node_addr) == ("10.65.0.2", 29500, "10.65.0.2")
    assert (cfg.node_rank, cfg.num_nodes, cfg.num_trainers, cfg.world_size) == (0, 2, 8, 16)
    assert cfg.process is None
    assert cfg.is_primary and cfg.is_multi_node
    assert cfg.host_node_addr == "10.65.0.2:29500"
    assert cfg.global_ranks == range(8)


def test_runpod_second_node() -> None:
    cfg = ClusterConfig.from_env(RUNPOD_NODE1)
    assert not cfg.is_primary
    assert cfg.global_ranks == range(8, 16)


@pytest.mark.parametrize(
    "drop",
    [
        pytest.param(("MASTER_ADDR", "MASTER_PORT"), id="only-PRIMARY"),
        pytest.param(("PRIMARY_ADDR", "PRIMARY_PORT"), id="only-MASTER"),
    ],
)
def test_runpod_aliases_given_one_way(drop: tuple[str, ...]) -> None:
    cfg = ClusterConfig.from_env(without(RUNPOD, *drop))
    assert cfg.source == "runpod"
    assert (cfg.primary_addr, cfg.primary_port) == ("10.65.0.2", 29500)


def test_runpod_derived_variables_are_optional() -> None:
    cfg = ClusterConfig.from_env(without(RUNPOD, "WORLD_SIZE", "HOST_NODE_ADDR"))
    assert cfg.world_size == 16


def test_ipv6_primary() -> None:
    env = {
        **RUNPOD,
        "PRIMARY_ADDR": "fd00::2",
        "MASTER_ADDR": "[fd00::2]",
        "NODE_ADDR": "fd00::2",
        "HOST_NODE_ADDR": "[fd00::2]:29500",
    }
    cfg = ClusterConfig.from_env(env)
    assert cfg.primary_addr == "fd00::2"
    assert cfg.host_node_addr == "[fd00::2]:29500"
    assert "--master-addr=fd00::2" in cfg.torchrun_args()
    assert cfg.to_env()["HOST_NODE_ADDR"] == "[fd00::2]:29500"


def test_ipv6_host_node_addr_without_brackets_is_an_error() -> None:
    env = {
        **RUNPOD,
        "PRIMARY_ADDR": "fd00::2",
        "MASTER_ADDR": "fd00::2",
        "NODE_ADDR": "fd00::2",
        "HOST_NODE_ADDR": "fd00::2:29500",
    }
    error = problems_of(env)
    assert error.variables == ("HOST_NODE_ADDR",)
    assert "[fd00::2]:29500" in str(error)


def test_torchrun_worker_fills_process_context() -> None:
    cfg = ClusterConfig.from_env(TORCHRUN_WORKER)
    assert cfg.source == "torchelastic"
    assert cfg.process == ProcessContext(rank=9, local_rank=1, local_world_size=8)
    assert (cfg.node_rank, cfg.num_nodes, cfg.num_trainers, cfg.world_size) == (1, 2, 8, 16)
    assert cfg.node_addr == "10.65.0.3"
    assert check_config(TORCHRUN_WORKER).notes == ()


def test_torchrun_worker_with_fewer_processes_than_gpus_is_a_finding_not_an_error() -> None:
    env = {**TORCHRUN_WORKER, "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "RANK": "5"}
    check = check_config(env)
    assert check.config is not None
    assert check.config.num_trainers == 4
    codes = {f.code: f.severity for f in check.notes}
    assert codes == {"worker-fewer-processes": "info"}


def test_torchrun_worker_cross_checks_provider_variables() -> None:
    env = {
        **TORCHRUN_WORKER,
        "GROUP_RANK": "0",
        "RANK": "1",
        "MASTER_ADDR": "10.65.0.9",
        "WORLD_SIZE": "24",
    }
    check = check_config(env)
    assert check.config is not None
    codes = sorted(f.code for f in check.notes)
    assert codes == ["worker-node-count", "worker-node-rank", "worker-primary-addr"]


def test_torchrun_worker_outside_any_provider() -> None:
    env = {
        "MASTER_ADDR": "node-0.example",
        "MASTER_PORT": "1234",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "TORCHELASTIC_RUN_ID": "abc",
    }
    cfg = ClusterConfig.from_env(env)
    assert (cfg.source, cfg.primary_addr, cfg.num_nodes, cfg.node_addr) == (
        "torchelastic",
        "node-0.example",
        2,
        None,
    )


def test_generic_master_addr() -> None:
    cfg = ClusterConfig.from_env(
        {
            "MASTER_ADDR": "10.1.0.1",
            "MASTER_PORT": "1234",
            "NODE_RANK": "2",
            "NUM_NODES": "4",
            "NUM_TRAINERS": "2",
        }
    )
    assert (cfg.source, cfg.primary_port, cfg.node_rank, cfg.world_size) == ("generic", 1234, 2, 8)


def test_generic_derives_nodes_from_world_size_and_gpus(tmp_path: Path) -> None:
    HostBuilder(tmp_path).gpus(4)
    cfg = ClusterConfig.from_env({"MASTER_ADDR": "10.1.0.1", "WORLD_SIZE": "8"}, root=tmp_path)
    assert (cfg.num_trainers, cfg.num_nodes, cfg.primary_port) == (4, 2, 29500)


def test_generic_reports_a_garbled_world_size_once(tmp_path: Path) -> None:
    error = problems_of({"MASTER_ADDR": "10.1.0.1", "WORLD_SIZE": "abc"}, root=str(tmp_path))
    assert [p.variables for p in error.problems] == [("WORLD_SIZE",)]
    assert "WORLD_SIZE='abc'" in str(error)


def test_generic_reads_torchrun_pet_variables() -> None:
    cfg = ClusterConfig.from_env(
        {"MASTER_ADDR": "svc", "PET_NNODES": "3", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "2"}
    )
    assert (cfg.num_nodes, cfg.node_rank, cfg.num_trainers) == (3, 1, 2)


def test_generic_refuses_elastic_ranges() -> None:
    error = problems_of({"MASTER_ADDR": "svc", "PET_NNODES": "1:4"})
    assert error.variables == ("PET_NNODES",)


def test_local_default_without_gpus(tmp_path: Path) -> None:
    cfg = ClusterConfig.from_env({}, root=tmp_path)
    assert cfg.source == "local"
    assert (cfg.primary_addr, cfg.primary_port, cfg.node_rank, cfg.num_nodes) == (
        "127.0.0.1",
        29500,
        0,
        1,
    )
    assert cfg.num_trainers == 1 and not cfg.is_multi_node


@pytest.mark.parametrize(
    ("visible", "expected"),
    [(None, 8), ("0,1,2", 3), ("", 0), ("0,9", 1), ("GPU-1234,GPU-5678", 2), ("-1", 0)],
)
def test_local_default_counts_visible_gpus(
    tmp_path: Path, visible: str | None, expected: int
) -> None:
    HostBuilder(tmp_path).gpus(8)
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    cfg = ClusterConfig.from_env(env, root=tmp_path)
    assert cfg.num_trainers == max(expected, 1)


def test_source_can_be_forced() -> None:
    error = problems_of({"MASTER_ADDR": "10.0.0.1"}, source="runpod")
    assert {"NODE_ADDR", "NODE_RANK", "NUM_NODES", "NUM_TRAINERS"} <= set(error.variables)
    assert ClusterConfig.from_env(RUNPOD, source="local").source == "local"


def test_unknown_source_names_the_choices() -> None:
    error = problems_of({}, source="nope")
    assert "torchelastic, deepspeed" in str(error) and ", local" in str(error)


# -- validation rules: each names every variable involved -------------------------------------

RULES = [
    (
        "alias-addr",
        {**RUNPOD, "MASTER_ADDR": "10.65.0.9"},
        {"PRIMARY_ADDR", "MASTER_ADDR"},
        "disagree",
    ),
    ("alias-port", {**RUNPOD, "MASTER_PORT": "29501"}, {"PRIMARY_PORT", "MASTER_PORT"}, "disagree"),
    ("missing", without(RUNPOD, "NODE_ADDR"), {"NODE_ADDR"}, "not set"),
    (
        "missing-alias",
        without(RUNPOD, "PRIMARY_PORT", "MASTER_PORT"),
        {"PRIMARY_PORT", "MASTER_PORT"},
        "not set",
    ),
    ("not-decimal", {**RUNPOD, "NUM_TRAINERS": "eight"}, {"NUM_TRAINERS"}, "'eight'"),
    ("float", {**RUNPOD, "NUM_NODES": "2.0"}, {"NUM_NODES"}, "decimal integer"),
    ("negative", {**RUNPOD, "NODE_RANK": "-1"}, {"NODE_RANK"}, "decimal integer"),
    ("unicode-digits", {**RUNPOD, "NODE_RANK": "\u0660"}, {"NODE_RANK"}, "decimal integer"),
    (
        "port-zero",
        {**RUNPOD, "PRIMARY_PORT": "0", "MASTER_PORT": "0", "HOST_NODE_ADDR": ""},
        {"PRIMARY_PORT"},
        "between 1 and 65535",
    ),
    (
        "port-high",
        {**RUNPOD, "PRIMARY_PORT": "65536", "MASTER_PORT": "65536", "HOST_NODE_ADDR": ""},
        {"PRIMARY_PORT"},
        "between 1 and 65535",
    ),
    ("zero-nodes", {**RUNPOD, "NUM_NODES": "0"}, {"NUM_NODES"}, "between 1 and 65536"),
    (
        "rank-range",
        {**RUNPOD_NODE1, "NODE_RANK": "2"},
        {"NODE_RANK", "NUM_NODES"},
        "outside [0, NUM_NODES=2)",
    ),
    (
        "world-size",
        {**RUNPOD, "WORLD_SIZE": "2"},
        {"WORLD_SIZE", "NUM_NODES", "NUM_TRAINERS"},
        "counts processes",
    ),
    (
        "host-node-addr",
        {**RUNPOD, "HOST_NODE_ADDR": "10.65.0.2:29501"},
        {"HOST_NODE_ADDR", "PRIMARY_ADDR", "PRIMARY_PORT"},
        "10.65.0.2:29500",
    ),
    (
        "host-node-addr-garbled",
        {**RUNPOD, "HOST_NODE_ADDR": "10.65.0.2"},
        {"HOST_NODE_ADDR"},
        "ADDRESS:PORT",
    ),
    (
        "loopback-primary",
        {
            **RUNPOD_NODE1,
            "PRIMARY_ADDR": "localhost",
            "MASTER_ADDR": "localhost",
            "HOST_NODE_ADDR": "localhost:29500",
        },
        {"PRIMARY_ADDR", "MASTER_ADDR"},
        "loopback",
    ),
    (
        "loopback-generic",
        {"MASTER_ADDR": "127.0.0.1", "NUM_NODES": "2", "NUM_TRAINERS": "1"},
        {"MASTER_ADDR"},
        "loopback",
    ),
    (
        "node-addr-not-ip",
        {**RUNPOD_NODE1, "NODE_ADDR": "node-1"},
        {"NODE_ADDR"},
        "not an IP address",
    ),
    (
        "primary-not-rank-0",
        {**RUNPOD, "NODE_RANK": "1"},
        {"NODE_RANK", "NODE_ADDR", "PRIMARY_ADDR"},
        "must have NODE_RANK=0",
    ),
    (
        "rank-0-not-primary",
        {**RUNPOD_NODE1, "NODE_RANK": "0"},
        {"NODE_RANK", "NODE_ADDR", "PRIMARY_ADDR"},
        "rank 0 is the primary",
    ),
    (
        "bad-primary",
        {**RUNPOD, "PRIMARY_ADDR": "10.65.0.2;rm", "MASTER_ADDR": "10.65.0.2;rm"},
        {"PRIMARY_ADDR"},
        "IP address or host name",
    ),
    (
        "worker-rank-range",
        {**TORCHRUN_WORKER, "RANK": "16"},
        {"RANK", "WORLD_SIZE"},
        "outside [0, WORLD_SIZE=16)",
    ),
    (
        "worker-uneven",
        {**TORCHRUN_WORKER, "WORLD_SIZE": "15"},
        {"WORLD_SIZE", "LOCAL_WORLD_SIZE"},
        "not a multiple",
    ),
    (
        "worker-missing",
        without(TORCHRUN_WORKER, "LOCAL_WORLD_SIZE"),
        {"LOCAL_WORLD_SIZE"},
        "not set",
    ),
    (
        "generic-uneven",
        {"MASTER_ADDR": "10.1.0.1", "NUM_TRAINERS": "3", "WORLD_SIZE": "8"},
        {"WORLD_SIZE", "NUM_TRAINERS"},
        "not a multiple",
    ),
]


@pytest.mark.parametrize(
    ("env", "variables", "text"), [r[1:] for r in RULES], ids=[r[0] for r in RULES]
)
def test_validation_rule(env: dict[str, str], variables: set[str], text: str) -> None:
    error = problems_of(env)
    assert set(error.variables) == variables, error
    assert text in str(error)
    for problem in error.problems:  # every message names each variable it is about
        for name in problem.variables:
            assert name in problem.message


def test_all_problems_are_collected_into_one_error() -> None:
    env = {
        **RUNPOD,
        "MASTER_ADDR": "10.65.0.9",
        "NUM_TRAINERS": "x",
        "NODE_RANK": "5",
        "NODE_ADDR": "nope",
    }
    error = problems_of(env)
    assert len(error.problems) == 4
    assert str(error).count("\n  - ") == 4


def test_world_size_message_says_processes_not_nodes() -> None:
    message = str(problems_of({**RUNPOD, "WORLD_SIZE": "2"}))
    assert "WORLD_SIZE=2" in message and "NUM_NODES*NUM_TRAINERS=2*8=16" in message
    assert "processes" in message and "not nodes" in message


def test_from_env_reads_os_environ_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # The one place os.environ is touched: proving that None means "the live environment".
    for name in list(RUNPOD):
        monkeypatch.setenv(name, RUNPOD[name])
    assert ClusterConfig.from_env().source == "runpod"


# -- rendering -------------------------------------------------------------------------------


def test_to_env_has_both_spellings_and_round_trips() -> None:
    cfg = ClusterConfig.from_env(RUNPOD_NODE1)
    env = cfg.to_env()
    assert env == {**RUNPOD_NODE1}
    assert ClusterConfig.from_env(env) == cfg


def test_torchrun_args_use_a_static_rendezvous_on_the_primary_ip() -> None:
    cfg = ClusterConfig.from_env(RUNPOD_NODE1)
    assert cfg.torchrun_args() == [
        "--nnodes=2",
        "--nproc-per-node=8",
        "--node-rank=1",
        "--rdzv-backend=static",
        "--master-addr=10.65.0.2",
        "--master-port=29500",
    ]
    assert "--nproc-per-node=4" in cfg.torchrun_args(nproc_per_node=4)


def test_config_is_frozen() -> None:
    cfg = ClusterConfig.from_env(RUNPOD)
    with pytest.raises(ValueError, match="frozen"):
        cfg.node_rank = 1


# -- errors ------------------------------------------------------------------------------------


def test_config_error_pickles_with_its_problems() -> None:
    error = problems_of({**RUNPOD, "WORLD_SIZE": "2", "NODE_RANK": "x"})
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ConfigError) and isinstance(copy, ValueError)
    assert copy.problems == error.problems and str(copy) == str(error)


# -- property: never anything but a config or a ConfigError ------------------------------------

NAMES = sorted(
    {
        *RUNPOD,
        *TORCHRUN_WORKER,
        "PET_NNODES",
        "PET_NODE_RANK",
        "PET_NPROC_PER_NODE",
        "CUDA_VISIBLE_DEVICES",
    }
)
values = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "0",
            "1",
            "2",
            "8",
            "16",
            "29500",
            "65536",
            "-1",
            "10.65.0.2",
            "fd00::2",
            "[fd00::2]",
            "[fd00::2]:29500",
            "10.65.0.2:29500",
            "localhost",
            "1:4",
            "9" * 40,
            "",
            " 3 ",
        ]
    ),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.one_of(st.sampled_from(NAMES), st.text(max_size=8)), values))
def test_any_environment_gives_a_config_or_a_config_error(env: dict[str, str]) -> None:
    check = check_config(env)
    reported = [(p.code, p.variables) for p in check.problems]
    assert len(reported) == len(set(reported)), check.problems  # each problem once
    if check.config is None:
        assert check.problems
        with pytest.raises(ConfigError):
            ClusterConfig.from_env(env)
    else:
        cfg = check.config
        assert cfg.world_size == cfg.num_nodes * cfg.num_trainers
        assert 0 <= cfg.node_rank < cfg.num_nodes


@pytest.mark.parametrize("addr", ["127.0.0.1", "127.0.1.1", "::1"])
def test_a_loopback_node_addr_on_a_multi_node_job_is_refused(addr: str) -> None:
    error = problems_of({**RUNPOD_NODE1, "NODE_ADDR": addr})
    [problem] = [p for p in error.problems if p.code == "config-loopback-node"]
    assert problem.variables == ("NODE_ADDR",)
    assert f"NODE_ADDR={addr} is a loopback address but NUM_NODES=2" in problem.message


def test_a_loopback_node_addr_on_one_node_is_fine() -> None:
    local = {**RUNPOD, "NUM_NODES": "1", "WORLD_SIZE": "8", "PRIMARY_ADDR": "127.0.0.1",
             "MASTER_ADDR": "127.0.0.1", "NODE_ADDR": "127.0.0.1",
             "HOST_NODE_ADDR": "127.0.0.1:29500"}
    assert ClusterConfig.from_env(local).node_addr == "127.0.0.1"


@pytest.mark.parametrize(("changes", "variable"), [
    ({"NUM_NODES": "999999999"}, "NUM_NODES='999999999'"),
    ({"NUM_NODES": "65537", "WORLD_SIZE": "524296"}, "NUM_NODES='65537'"),
])
def test_the_node_count_has_an_upper_bound(changes: dict[str, str], variable: str) -> None:
    # Before: NUM_NODES=999999999 was taken at its word, and the preflight primary tried to
    # list a billion ranks. The bound is four times the 16,384 nodes preflight is measured with.
    env = {**RUNPOD_NODE1, **changes}
    with pytest.raises(ConfigError) as caught:
        ClusterConfig.from_env(env)
    assert f"{variable}: the number of nodes must be between 1 and {MAX_NODES}" in str(caught.value)
    assert MAX_NODES == 65536
    at_bound = {**RUNPOD_NODE1, "NUM_NODES": str(MAX_NODES), "WORLD_SIZE": str(MAX_NODES * 8)}
    assert ClusterConfig.from_env(at_bound).num_nodes == MAX_NODES


def test_a_node_count_derived_from_world_size_has_the_same_bound() -> None:
    env = {"MASTER_ADDR": "10.65.0.2", "WORLD_SIZE": "999999999", "NUM_TRAINERS": "1"}
    with pytest.raises(ConfigError, match="WORLD_SIZE=999999999 over 1 processes per node is "
                       "999999999 nodes, above the supported maximum of 65536"):
        ClusterConfig.from_env(env)
