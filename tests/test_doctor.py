"""doctor(): one test per failure mode of the catalogue that one node can detect (FM-xx).

Snapshots start from the catalogue's baseline Runpod node B0 (tests/nccl_hosts.py). Failure
modes only a cross-node check can see (FM-17, FM-22, FM-31, FM-34, FM-35, FM-36) belong to
``preflight``; FM-26 and FM-13 are checked here in their local part.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterenv import Finding, doctor, nccl_log, plan_nccl_env
from clusterenv._facts import Facts
from clusterenv._root import Root
from clusterenv.diagnosis import CHECK_CODES
from clusterenv.diagnosis.rdma import _has_libibverbs
from clusterenv.filters import ALL_CODES
from clusterenv.findings import CODES, code_info, codes_of, has_errors
from clusterenv.testing import HostBuilder, gid, port
from tests.nccl_hosts import B0_ENV, b0, roce_gids, roce_node


def run(root: Path, environ: Mapping[str, str] | None = None, **extra: str) -> list[Finding]:
    env = dict(B0_ENV if environ is None else environ)
    env.update(extra)
    return doctor(environ=env, root=root)


def only(findings: list[Finding], code: str) -> Finding:
    found = [f for f in findings if f.code == code]
    assert len(found) == 1, [str(f) for f in findings]
    return found[0]


def codes(findings: list[Finding]) -> set[str]:
    return {f.code for f in findings}


def ib_node(root: Path, count: int = 8) -> HostBuilder:
    host = b0(root)
    for i in range(count):
        host.rdma_device(f"mlx5_{i}", port(link_layer="InfiniBand"))
    return host


# -- baselines ---------------------------------------------------------------------------------


def test_plain_b0_is_an_error_until_the_plan_is_applied(tmp_path: Path) -> None:
    """Runpod's variables and nothing else: NCCL would bootstrap over eth0, a certain hang."""
    found = run(b0(tmp_path).root)
    assert {f.code for f in found if f.severity == "error"} == {"socket-ifname-unset"}
    assert codes(found) == {"socket-ifname-unset", "launcher-missing"}


def test_b0_after_apply_is_clean(tmp_path: Path) -> None:
    b0(tmp_path)
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    found = run(tmp_path, {**B0_ENV, **plan.env})
    assert codes(found) == {"launcher-missing"}


def test_laptop_with_nothing_set_has_no_errors(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback().interface("wlan0", addresses=["192.168.1.23/24"])
    assert not has_errors(doctor(environ={}, root=tmp_path))


def test_this_host_with_nothing_set_has_no_errors() -> None:
    found = doctor(environ={})
    assert not has_errors(found), [str(f) for f in found]


# -- A. socket interface selection -------------------------------------------------------------


def test_fm01_nccl_socket_ifname_unset_uses_eth0(tmp_path: Path) -> None:
    finding = only(run(b0(tmp_path).root), "socket-ifname-unset")
    assert finding.severity == "error"
    for text in ("NCCL_SOCKET_IFNAME", "eth0", "172.20.0.5", "management"):
        assert text in finding.title
    assert finding.fix.startswith("export NCCL_SOCKET_IFNAME=ens1")
    assert plan_nccl_env(environ=B0_ENV, root=tmp_path).env["NCCL_SOCKET_IFNAME"] == "ens1"


@pytest.mark.parametrize("variable", ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                                      "TP_SOCKET_IFNAME"])
def test_fm02_socket_ifname_set_to_management(tmp_path: Path, variable: str) -> None:
    finding = only(run(b0(tmp_path).root, {**B0_ENV, variable: "eth0"}),
                   "filter-selects-avoided")
    assert finding.severity == "error"
    assert f"{variable}='eth0' selects eth0 (Runpod's management interface)" == finding.title
    assert finding.fix == f"export {variable}=ens1"


def test_fm03_ip_address_or_unknown_name(tmp_path: Path) -> None:
    b0(tmp_path)
    ip = only(run(tmp_path, NCCL_SOCKET_IFNAME="10.65.0.2"), "filter-ip-address")
    assert ip.severity == "error"
    assert "takes interface names (did you mean ens1?)" in ip.title
    typo = only(run(tmp_path, NCCL_SOCKET_IFNAME="ens9"), "filter-matches-nothing")
    assert typo.severity == "error" and "matches no interface (have: lo, eth0, ens1)" in typo.title


def test_fm04_prefix_matches_more_than_intended(tmp_path: Path) -> None:
    b0(tmp_path).interface("ens10", addresses=["10.66.0.2/24"])
    finding = only(run(tmp_path, NCCL_SOCKET_IFNAME="ens1"), "filter-prefix-collision")
    assert finding.severity == "warning"
    assert "prefix 'ens1' also matches ens10; use '=ens1'" in finding.title
    assert plan_nccl_env(environ=B0_ENV, root=tmp_path).env["NCCL_SOCKET_IFNAME"] == "=ens1"


def test_fm04_prefix_matches_every_rail(tmp_path: Path) -> None:
    host = b0(tmp_path)
    for i in range(2, 9):
        host.interface(f"ens{i}", addresses=[f"10.65.{i}.2/24"])
    finding = only(run(tmp_path, NCCL_SOCKET_IFNAME="ens"), "filter-prefix-multiple")
    assert "matches 8 interfaces" in finding.title


def test_fm05_exclusion_list_leaves_management_eligible(tmp_path: Path) -> None:
    finding = only(run(b0(tmp_path).root, NCCL_SOCKET_IFNAME="^lo,docker,veth"),
                   "filter-leaves-avoided")
    assert "exclusion list leaves eth0 (Runpod's management interface) eligible" in finding.title


def test_fm06_modifiers_once_per_list(tmp_path: Path) -> None:
    ib_node(tmp_path, 16)
    finding = only(run(tmp_path, NCCL_IB_HCA="^=mlx5_8,^=mlx5_14"), "filter-modifier-repeated")
    assert finding.severity == "error"
    assert "'^'/'=' allowed only at list start; token '^=mlx5_14'" in finding.title
    suffix = only(run(tmp_path, NCCL_SOCKET_IFNAME="ens1:1"), "filter-port-on-socket")
    assert "port suffix is meaningless for sockets" in suffix.title


# -- B. RDMA device selection ------------------------------------------------------------------


def test_fm07_hca_prefix_collision(tmp_path: Path) -> None:
    ib_node(tmp_path, 12)
    finding = only(run(tmp_path, NCCL_IB_HCA="mlx5_1"), "filter-prefix-collision")
    assert "mlx5_1' also matches mlx5_10, mlx5_11; use '=mlx5_1'" in finding.title
    plan = plan_nccl_env(environ=B0_ENV, root=tmp_path)
    assert plan.env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(12))


def test_fm08_hca_matches_nothing(tmp_path: Path) -> None:
    ib_node(tmp_path, 8)
    finding = only(run(tmp_path, NCCL_IB_HCA="mlx5_9", NCCL_SOCKET_IFNAME="ens1"),
                   "filter-matches-nothing")
    assert finding.severity == "warning"  # TCP over ens1: speed, not a failure
    assert "matches no HCA (have mlx5_0..mlx5_7); NCCL will silently fall back to TCP" in (
        finding.title)
    # With NCCL_SOCKET_IFNAME unset the fallback sockets include eth0: the job hangs.
    hang = only(run(tmp_path, NCCL_IB_HCA="mlx5_9"), "filter-matches-nothing")
    assert hang.severity == "error" and "eth0" in hang.title


def test_fm09_unusable_hca_in_the_list(tmp_path: Path) -> None:
    host = roce_node(tmp_path)
    host.rdma_device("mlx5_8", port(state="DOWN", link_layer="Ethernet", netdev="ens9"))
    host.rdma_device("mlx5_9", port(link_layer="Ethernet", netdev="eth0",
                                    gids=roce_gids("172.20.0.5", "eth0")))
    listed = only(run(tmp_path, NCCL_IB_HCA="=mlx5_0,mlx5_9"), "filter-selects-avoided")
    assert "mlx5_9 (netdev eth0 is Runpod's management interface)" in listed.title
    unset = only(run(tmp_path), "ib-hca-excluded")
    assert unset.severity == "info"
    assert "mlx5_8:1 (port DOWN)" in unset.title and "mlx5_9:1 (netdev eth0" in unset.title


# -- C. Gloo -----------------------------------------------------------------------------------


def test_fm10_gloo_unset_and_hostname_is_loopback(tmp_path: Path) -> None:
    b0(tmp_path, hosts="127.0.0.1\tlocalhost\n127.0.1.1\tnode-0\n")
    finding = only(run(tmp_path), "gloo-ifname-unset")
    assert "'node-0' resolves to 127.0.1.1" in finding.title and "loopback" in finding.title
    assert finding.fix.startswith("export GLOO_SOCKET_IFNAME=ens1")
    assert plan_nccl_env(environ=B0_ENV, root=tmp_path).env["GLOO_SOCKET_IFNAME"] == "ens1"
    assert "gloo-ifname-unset" not in codes(run(tmp_path, GLOO_SOCKET_IFNAME="ens1"))


def test_fm10_hostname_on_the_management_address(tmp_path: Path) -> None:
    b0(tmp_path, hosts="127.0.0.1\tlocalhost\n172.20.0.5\tnode-0\n")
    finding = only(run(tmp_path), "gloo-ifname-unset")
    assert "resolves to eth0 (172.20.0.5), Runpod's management interface" in finding.title


def test_fm11_gloo_takes_exact_names(tmp_path: Path) -> None:
    b0(tmp_path)
    syntax = only(run(tmp_path, GLOO_SOCKET_IFNAME="^lo,docker"), "ifname-nccl-syntax")
    assert syntax.severity == "error" and "does not support NCCL filter syntax" in syntax.title
    prefix = only(run(tmp_path, GLOO_SOCKET_IFNAME="ens"), "ifname-no-such-interface")
    assert "no interface named 'ens' (Gloo needs exact names)" in prefix.title
    several = only(run(tmp_path, TP_SOCKET_IFNAME="ens1,eth0"), "ifname-multiple")
    assert "takes exactly one interface name" in several.title


# -- D. rendezvous address and port ------------------------------------------------------------


def test_fm12_loopback_master_addr(tmp_path: Path) -> None:
    b0(tmp_path)
    generic = {"MASTER_ADDR": "localhost", "MASTER_PORT": "29500", "NUM_NODES": "2",
               "NUM_TRAINERS": "8"}
    finding = only(run(tmp_path, generic), "config-loopback-primary")
    assert "MASTER_ADDR=localhost is a loopback address but NUM_NODES=2" in finding.title
    disagree = only(run(tmp_path, MASTER_ADDR="localhost"), "config-alias-mismatch")
    assert "disagree" in disagree.title


def test_fm13_hostname_resolves_to_loopback(tmp_path: Path) -> None:
    b0(tmp_path, hosts="127.0.0.1\tlocalhost\n127.0.1.1\tnode-0.cluster node-0\n")
    finding = only(run(tmp_path), "hostname-loopback")
    assert "'node-0' resolves to 127.0.1.1" in finding.title
    assert "--rdzv-backend=static --master-addr=$PRIMARY_ADDR" in finding.fix


def test_fm14_master_addr_in_the_management_range(tmp_path: Path) -> None:
    found = run(b0(tmp_path).root, MASTER_ADDR="172.20.0.9")
    finding = only(found, "primary-addr-management")
    assert finding.severity == "error"
    assert "MASTER_ADDR=172.20.0.9 is a Runpod management address" in finding.title
    assert finding.fix.startswith("export MASTER_ADDR=<the primary node's ens1 address>;")
    assert "config-alias-mismatch" in codes(found)  # PRIMARY_ADDR says otherwise


def test_fm14_route_to_primary_leaves_via_eth0(tmp_path: Path) -> None:
    """PRIMARY_ADDR outside ens1's subnet: only the default route (eth0) reaches it."""
    environ = {**B0_ENV, "NODE_ADDR": "10.65.0.3", "NODE_RANK": "1", "PRIMARY_ADDR": "10.66.0.2",
               "MASTER_ADDR": "10.66.0.2", "HOST_NODE_ADDR": "10.66.0.2:29500"}
    b0(tmp_path).interface("ens1", addresses=["10.65.0.3/24"], mtu=9000)
    finding = only(run(tmp_path, environ), "primary-route-management")
    assert finding.severity == "error"
    assert "the route to PRIMARY_ADDR=10.66.0.2 leaves via eth0 (172.20.0.5)" in finding.title
    assert "route to 10.66.0.2: via eth0" in finding.evidence


def test_fm14_route_elsewhere_judged_by_evidence(tmp_path: Path) -> None:
    """Without Runpod, a route that misses the cluster interface is a warning, not an error."""
    b0(tmp_path)
    worker = {"MASTER_ADDR": "10.66.0.2", "MASTER_PORT": "29500", "NODE_ADDR": "10.65.0.2",
              "RANK": "8", "LOCAL_RANK": "0", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8",
              "TORCHELASTIC_RUN_ID": "job"}
    found = run(tmp_path, worker)
    finding = only(found, "primary-route-not-cluster")
    assert finding.severity == "warning" and "not the cluster interface ens1" in finding.title
    assert "primary-route-management" not in codes(found)


def test_fm14_no_route_and_foreign_node_addr(tmp_path: Path) -> None:
    b0(tmp_path, routes=[("ens1", "10.65.0.0/24", None)])
    environ = {**B0_ENV, "NODE_ADDR": "10.65.0.3", "NODE_RANK": "1", "PRIMARY_ADDR": "10.66.0.2",
               "MASTER_ADDR": "10.66.0.2", "HOST_NODE_ADDR": "10.66.0.2:29500"}
    found = run(tmp_path, environ)
    assert only(found, "primary-unreachable").severity == "error"
    assert "NODE_ADDR=10.65.0.3 is not an address of this node" in only(
        found, "node-addr-not-local").title


def test_fm15_link_local_veth_would_carry_nccl_traffic(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).loopback().interface(
        "veth0", addresses=["fe80::1/64"], physical=False, kind="veth"
    ).interface("ens1", addresses=["10.65.0.2/24"]).gpus(8).shm(64 << 30)
    host.environ(B0_ENV)
    finding = only(run(tmp_path), "socket-ifname-unset")
    assert "veth0 (fe80::1), only link-local addresses" in finding.title
    assert plan_nccl_env(environ=B0_ENV, root=tmp_path).env["NCCL_SOCKET_IFNAME"] == "ens1"


def test_fm15_cluster_interface_without_ipv4(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback().interface("eth0", addresses=["172.20.0.5/16"]).interface(
        "ens1", addresses=["fe80::2/64"]).gpus(8)
    finding = only(run(tmp_path), "cluster-interface-no-ipv4")
    assert finding.severity == "error" and "ens1 has no IPv4 address" in finding.title


def test_fm16_primary_port_already_bound() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        environ = {"MASTER_ADDR": "192.0.2.10", "MASTER_PORT": str(busy), "NUM_NODES": "2",
                   "NODE_RANK": "0", "NUM_TRAINERS": "1"}
        finding = only(doctor(environ=environ), "primary-port-in-use")
        assert f"MASTER_PORT={busy} is already bound on this node" in finding.title
        worker = {**environ, "TORCHELASTIC_RUN_ID": "job", "RANK": "0", "LOCAL_RANK": "0",
                  "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
        assert "primary-port-in-use" not in codes(doctor(environ=worker))
    assert "primary-port-in-use" not in codes(doctor(environ=environ))


def test_fm16_not_checked_on_a_snapshot(tmp_path: Path) -> None:
    assert "primary-port-in-use" not in codes(run(b0(tmp_path).root))


# -- E. rank and size semantics ----------------------------------------------------------------


def test_fm18_world_size_counts_processes(tmp_path: Path) -> None:
    finding = only(run(b0(tmp_path).root, WORLD_SIZE="2"), "config-world-size")
    assert "WORLD_SIZE=2 != NUM_NODES*NUM_TRAINERS=2*8=16" in finding.title
    assert "counts processes" in finding.title


def test_fm19_more_processes_than_gpus(tmp_path: Path) -> None:
    b0(tmp_path)
    finding = only(run(tmp_path, CUDA_VISIBLE_DEVICES="0,1,2,3"), "gpus-too-few")
    assert "NUM_TRAINERS=8 processes per node, but only 4 GPUs visible" in finding.title
    assert "CUDA_VISIBLE_DEVICES='0,1,2,3' leaves 4" in finding.evidence


def test_fm19_fewer_gpus_installed(tmp_path: Path) -> None:
    finding = only(run(b0(tmp_path, gpus=7).root), "gpus-too-few")
    assert "only 7 GPUs" in finding.title and finding.severity == "error"


def test_fm20_node_rank_out_of_range_or_not_the_primary(tmp_path: Path) -> None:
    b0(tmp_path)
    assert "NODE_RANK=2 is outside [0, NUM_NODES=2)" in only(
        run(tmp_path, NODE_RANK="2"), "config-node-rank").title
    assert "the primary must have NODE_RANK=0" in only(
        run(tmp_path, NODE_RANK="1"), "config-primary-rank").title
    generic = {"MASTER_ADDR": "10.65.0.2", "NUM_NODES": "2", "NODE_RANK": "1",
               "NUM_TRAINERS": "8"}
    assert "this node holds MASTER_ADDR=10.65.0.2 (on ens1) but its node rank is 1" in only(
        run(tmp_path, generic), "primary-rank-mismatch").title


def test_fm21_cluster_variables_but_no_launcher(tmp_path: Path) -> None:
    b0(tmp_path)
    finding = only(run(tmp_path), "launcher-missing")
    assert finding.severity == "info"
    assert "torchrun --nnodes=2 --nproc-per-node=8 --node-rank=0 --rdzv-backend=static" in (
        finding.fix)
    worker = {"TORCHELASTIC_RUN_ID": "job", "RANK": "0", "LOCAL_RANK": "0",
              "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "0"}
    assert "launcher-missing" not in codes(run(tmp_path, {**B0_ENV, **worker}))


# -- F. timeouts -------------------------------------------------------------------------------


def test_fm23_deprecated_and_ineffective_names(tmp_path: Path) -> None:
    b0(tmp_path)
    found = run(tmp_path, NCCL_ASYNC_ERROR_HANDLING="1", NCCL_TIMEOUT="3600")
    deprecated = only(found, "env-deprecated")
    assert "PyTorch 2.2 and later read TORCH_NCCL_ASYNC_ERROR_HANDLING" in deprecated.title
    assert deprecated.fix == (
        "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1; unset NCCL_ASYNC_ERROR_HANDLING")
    assert "init_process_group" in only(found, "env-no-such-timeout").fix


def test_fm24_hang_detection_disabled(tmp_path: Path) -> None:
    finding = only(run(b0(tmp_path).root, TORCH_NCCL_ENABLE_MONITORING="0"),
                   "hang-detection-disabled")
    assert finding.severity == "info"


# -- G. RDMA stack -----------------------------------------------------------------------------


def test_fm25_rdma_in_sysfs_but_no_device_nodes(tmp_path: Path) -> None:
    b0(tmp_path).rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1"),
                             dev_node=False)
    finding = only(run(tmp_path), "rdma-not-openable")
    # NCCL falls back to sockets: slower, not a failure (a warning)...
    assert finding.severity == "warning" and "NCCL will silently use TCP sockets" in finding.title
    # ...unless NCCL_NET=IB forbids the fallback: then the job fails (an error).
    assert only(run(tmp_path, NCCL_NET="IB"), "rdma-not-openable").severity == "error"
    assert "NCCL_IB_HCA" not in plan_nccl_env(environ=B0_ENV, root=tmp_path).env


def test_fm25_libibverbs_is_looked_for_where_the_loader_looks(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).file("etc/ld.so.conf.d/rdma.conf", "/opt/rdma/lib\n")
    facts = Facts(environ={}, root=Root(tmp_path))
    assert not _has_libibverbs(facts)
    host.file("opt/rdma/lib/libibverbs.so.1", "")
    assert _has_libibverbs(Facts(environ={}, root=Root(tmp_path)))


def test_fm26_ignore_net_mismatch(tmp_path: Path) -> None:
    b0(tmp_path).file("etc/nccl.conf", "NCCL_IGNORE_NET_MISMATCH=1\n")
    finding = only(run(tmp_path), "ignore-net-mismatch")
    assert "(from /etc/nccl.conf)" in finding.evidence[0]


def test_fm27_gid_index_link_local(tmp_path: Path) -> None:
    roce_node(tmp_path, rails=1)
    finding = only(run(tmp_path, NCCL_IB_GID_INDEX="1"), "ib-gid-index-wrong")
    assert finding.severity == "error" and "mlx5_0:1: GID 1 is link-local" in finding.title
    assert finding.fix.startswith("export NCCL_IB_GID_INDEX=3")
    unneeded = only(run(tmp_path, NCCL_IB_GID_INDEX="3", NCCL_VERSION="2.23.4"),
                    "ib-gid-index-unneeded")
    assert unneeded.severity == "info"
    assert not {"ib-gid-index-wrong", "ib-gid-index-unneeded"} & codes(
        run(tmp_path, NCCL_IB_GID_INDEX="3", NCCL_VERSION="2.19.3"))


def test_fm27_infiniband_never_gets_a_gid_index(tmp_path: Path) -> None:
    ib_node(tmp_path, 2)
    plan = plan_nccl_env(environ={**B0_ENV, "NCCL_VERSION": "2.18.3"}, root=tmp_path)
    assert "NCCL_IB_GID_INDEX" not in plan.env and "NCCL_IB_HCA" in plan.env


def test_fm28_ib_disabled_with_usable_rdma(tmp_path: Path) -> None:
    ib_node(tmp_path, 2)
    finding = only(run(tmp_path, NCCL_IB_DISABLE="1"), "ib-disabled")
    assert "NCCL runs over TCP" in finding.title
    plugin = only(run(tmp_path, NCCL_IB_DISABLE="1", NCCL_NET_PLUGIN="libnccl-net.so"),
                  "ib-disabled")
    assert any("NCCL_NET=Socket" in e for e in plugin.evidence)
    assert "ib-disabled" not in codes(run(tmp_path, NCCL_IB_DISABLE="0"))
    assert "ib-disabled" not in codes(run(b0(tmp_path / "plain").root, NCCL_IB_DISABLE="1"))


def test_fm29_memlock_too_low(tmp_path: Path) -> None:
    host = ib_node(tmp_path, 2).memlock(65536, 65536).cap_ipc_lock(False)
    finding = only(run(tmp_path), "memlock-too-low")
    assert finding.severity == "error" and "RLIMIT_MEMLOCK is 64 KiB; RDMA needs unlimited" in (
        finding.title)
    assert "--ulimit memlock=-1" in finding.fix
    host.memlock(65536, None)
    assert only(run(tmp_path), "memlock-too-low").fix.startswith("ulimit -l unlimited")
    host.cap_ipc_lock(True)
    assert "memlock-too-low" not in codes(run(tmp_path))


def test_fm29_no_rdma_no_memlock_check(tmp_path: Path) -> None:
    b0(tmp_path).memlock(65536, 65536).cap_ipc_lock(False)
    assert "memlock-too-low" not in codes(run(tmp_path))


def test_fm30_gpudirect_unavailable(tmp_path: Path) -> None:
    host = ib_node(tmp_path, 2).gpus(0, open_kernel_module=False)
    finding = only(run(tmp_path), "gpudirect-unavailable")
    assert finding.severity == "warning" and "nvidia_peermem not loaded" in finding.title
    host.gpudirect(peermem=True)
    old = only(run(tmp_path, NCCL_VERSION="2.21.5"), "gpudirect-old-nccl")
    assert "before 2.23" in old.title
    assert not {"gpudirect-old-nccl", "gpudirect-unavailable"} & codes(
        run(tmp_path, NCCL_VERSION="2.23.4"))


# -- H. container and leftovers ----------------------------------------------------------------


def test_fm32_dev_shm_too_small(tmp_path: Path) -> None:
    finding = only(run(b0(tmp_path).shm(64 << 20).root), "shm-too-small")
    assert finding.severity == "error"
    assert finding.title.startswith("/dev/shm is 64 MiB; NCCL needs more with 8 local processes")


def test_fm33_leftover_debug_knobs(tmp_path: Path) -> None:
    b0(tmp_path)
    found = run(tmp_path, NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_NET="Socket")
    knobs = [f for f in found if f.code == "nccl-debug-knob"]
    assert sorted(f.evidence[0].split("=")[0] for f in knobs) == [
        "NCCL_NET", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"]
    assert all(f.severity == "warning" for f in knobs)
    contradiction = run(tmp_path, NCCL_NET="Socket", NCCL_IB_HCA="=mlx5_0")
    assert "contradict" in only(contradiction, "nccl-net-contradiction").title
    assert "nccl-debug-knob" not in codes(run(tmp_path, NCCL_P2P_DISABLE="0", NCCL_NET="IB"))


def test_ib_settings_outside_what_verbs_accepts(tmp_path: Path) -> None:
    # the same range table as nccl-log's log-ib-setting-range (clusterenv.nccl.lint)
    b0(tmp_path)
    found = run(tmp_path, NCCL_IB_RETRY_CNT="15", NCCL_IB_TIMEOUT="0x20", NCCL_IB_TC="106")
    ranges = [f for f in found if f.code == "nccl-ib-setting-range"]
    assert [(f.severity, f.evidence[0]) for f in ranges] == [
        ("error", "NCCL_IB_TIMEOUT='0x20' (from environment)"),
        ("error", "NCCL_IB_RETRY_CNT='15' (from environment)"),
    ]
    assert "(NCCL reads it as 32) is outside 1-31" in ranges[0].title
    assert ranges[1].fix == "set NCCL_IB_RETRY_CNT within 0-7, or unset it (NCCL's default is 7)"
    forever = only(run(tmp_path, NCCL_IB_TIMEOUT="0"), "nccl-ib-setting-range")
    assert forever.severity == "warning" and "wait forever" in forever.title
    assert "nccl-ib-setting-range" not in codes(run(tmp_path, NCCL_IB_RETRY_CNT="7",
                                                    NCCL_IB_SL="15"))


def test_fm37_framework_bound_to_the_management_address(tmp_path: Path) -> None:
    b0(tmp_path)
    finding = only(run(tmp_path, VLLM_HOST_IP="172.20.0.5"), "framework-host-ip")
    assert finding.severity == "error"
    assert "VLLM_HOST_IP=172.20.0.5 is on eth0, Runpod's management interface" in finding.title
    assert finding.fix == "export VLLM_HOST_IP=10.65.0.2"
    assert "framework-host-ip" not in codes(run(tmp_path, RAY_NODE_IP_ADDRESS="10.65.0.2"))


def test_every_finding_is_complete(tmp_path: Path) -> None:
    """Stable kebab codes, a known severity, a title, evidence, and a fix for problems."""
    host = roce_node(tmp_path, rails=2).shm(64 << 20).memlock(65536, 65536).cap_ipc_lock(False)
    host.file("etc/hosts", "127.0.1.1 node-0\n").rdma_device(
        "mlx5_7", port(link_layer="Ethernet", netdev="eth0",
                       gids=[gid(3, "::ffff:172.20.0.5", "RoCE v2", "eth0")]))
    found = run(tmp_path, NCCL_SOCKET_IFNAME="eth0", GLOO_SOCKET_IFNAME="^lo",
                NCCL_IB_GID_INDEX="1", NCCL_P2P_DISABLE="1", VLLM_HOST_IP="172.20.0.5",
                NCCL_ASYNC_ERROR_HANDLING="1", CUDA_VISIBLE_DEVICES="0")
    assert len(found) >= 10
    for finding in found:
        assert finding.code.islower() and " " not in finding.code, finding
        assert finding.severity in ("error", "warning", "info")
        assert finding.title and finding.evidence, finding
        assert finding.fix or finding.severity == "info", finding


# -- every code is known and documented ---------------------------------------------------------

_REPO = Path(__file__).resolve().parents[1]


def troubleshooting_entries() -> dict[str, str]:
    """Code -> the text of its entry in docs/troubleshooting.md (headed ``### … { #code }``)."""
    page = (_REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    entries: dict[str, str] = {}
    for section in re.split(r"^### ", page, flags=re.MULTILINE)[1:]:
        head, _, body = section.partition("\n")
        anchor = re.search(r" \{ #([a-z0-9-]+) \}$", head)
        assert anchor, f"an entry without a code anchor: {head!r}"
        assert anchor[1] not in entries, f"{anchor[1]} has two entries"
        entries[anchor[1]] = body
    return entries


def test_troubleshooting_has_one_entry_per_code() -> None:
    entries = troubleshooting_entries()
    missing = set(CODES) - set(entries)
    assert not missing, f"codes without an entry in docs/troubleshooting.md: {sorted(missing)}"
    stale = set(entries) - set(CODES)
    assert not stale, f"entries for codes clusterenv never emits: {sorted(stale)}"


@pytest.mark.parametrize("code", sorted(CODES))
def test_troubleshooting_states_the_default_severity(code: str) -> None:
    # Each entry starts with "`code` · severity": the registry's default comes first.
    body = troubleshooting_entries()[code]
    assert f"`{code}` · {code_info(code).severity}" in body, body[:200]


def test_the_old_code_tuples_are_views_of_the_registry() -> None:
    assert set(CHECK_CODES) | set(ALL_CODES) | set(nccl_log.CODES) < set(CODES)
    assert codes_of("doctor") == CHECK_CODES
    assert codes_of("filters") == ALL_CODES
    assert codes_of("nccl-log") == nccl_log.CODES


def test_doctor_emits_only_registered_codes(tmp_path: Path) -> None:
    known = set(CODES)
    host = roce_node(tmp_path, rails=2).shm(64 << 20).memlock(65536, 65536).cap_ipc_lock(False)
    host.file("etc/hosts", "127.0.1.1 node-0\n")
    found = run(tmp_path, NCCL_SOCKET_IFNAME="eth0", GLOO_SOCKET_IFNAME="ens", NCCL_IB_HCA="mlx5",
                NCCL_IB_GID_INDEX="1", NCCL_NET="Socket", TORCH_NCCL_ENABLE_MONITORING="0",
                NCCL_TIMEOUT="5", CUDA_VISIBLE_DEVICES="0", VLLM_HOST_IP="10.9.9.9")
    assert {f.code for f in found} <= known
    assert len({f.code for f in found}) >= 12


_KNOWN = set(CODES)


@pytest.fixture(scope="module")
def roce_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("doctor-roce")
    roce_node(root, rails=2).interface("ens10", addresses=["10.66.0.2/24"])
    return root


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=st.dictionaries(
    st.sampled_from([*B0_ENV, "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME",
                     "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_DISABLE", "VLLM_HOST_IP",
                     "CUDA_VISIBLE_DEVICES", "RANK", "LOCAL_RANK", "NCCL_NET"]),
    st.sampled_from(["", "0", "1", "eth0", "=ens1", "^lo", "ens", "10.65.0.2", "172.20.0.9",
                     "mlx5_0", "=mlx5_0:1,mlx5_1:1", "-1", "3", "localhost", "fe80::1%ens1"]),
    max_size=8,
))
def test_property_doctor_never_raises(roce_root: Path, extra: dict[str, str]) -> None:
    found = doctor(environ={**B0_ENV, **extra}, root=roce_root)
    assert {f.code for f in found} <= _KNOWN
