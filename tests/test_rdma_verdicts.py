"""doctor's verdicts on RDMA hardware that is present but unusable: ports that are not ACTIVE, and
RoCE GIDs that cannot reach other nodes, on host snapshots rebuilt from real captures."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from clusterenv import doctor, plan_nccl_env
from clusterenv.findings import Finding
from clusterenv.preflight import Fingerprint, collect_fingerprint, compare
from clusterenv.testing import port
from tests.nccl_hosts import B0_ENV, b0, roce_gids
from tests.profiles import PROFILES
from tests.test_preflight import entries

ENV = {"MASTER_ADDR": "10.0.0.1", "NUM_NODES": "2", "NUM_TRAINERS": "8"}
GID_UNREACHABLE = {"ib-gid-link-local", "ib-gid-missing", "ib-gid-roce-v1"}
PORT_STATES = {"rdma-port-init", "rdma-port-down", "rdma-port-armed"}
VERSIONS = ("2.19.3", "2.23.4", None)


def run(root: Path, version: str | None = None, **extra: str) -> list[Finding]:
    environ = dict(ENV, **extra)
    if version is not None:
        environ["NCCL_VERSION"] = version
    return doctor(environ=environ, root=root)


def of(findings: list[Finding], *codes: str) -> list[Finding]:
    return [f for f in findings if f.code in codes]


# -- GID tables without an IPv4 RoCE v2 entry -----------------------------------------------


def test_ionic_ipv6_only_names_the_link_local_gid_and_a_fix_that_works(tmp_path: Path) -> None:
    root = PROFILES["ionic-ipv6-only"].build(tmp_path)
    found = run(root, "2.23.4")
    (finding,) = of(found, *GID_UNREACHABLE, "ib-gid-index-disagree")
    assert finding.code == "ib-gid-link-local" and finding.severity == "error"
    assert all(f"ionic_{i}:1" in finding.title for i in range(4))
    assert "ionic_0:1: GID 0 fe80::ae1f:6bff:fe2c:0 (RoCE v2 IPv6 link-local)" in (
        finding.evidence[0])
    assert finding.fix == "export NCCL_IB_ADDR_FAMILY=AF_INET6"
    fixed = run(root, "2.23.4", NCCL_IB_ADDR_FAMILY="AF_INET6")
    assert not [f for f in fixed if f.code.startswith("ib-gid")]


def test_ionic_with_unknown_nccl_gets_an_index_that_works_on_both_sides_of_2_21(
    tmp_path: Path,
) -> None:
    root = PROFILES["ionic-ipv6-only"].build(tmp_path)
    (finding,) = of(run(root), *GID_UNREACHABLE, "ib-gid-index-disagree")
    assert finding.code == "ib-gid-link-local"
    assert "NCCL version: before 2.21 or 2.21 or later" in finding.evidence
    # AF_INET6 does not exist before 2.21; the ULA's index works everywhere.
    assert finding.fix == "export NCCL_IB_GID_INDEX=1"
    for version in VERSIONS:
        fixed = run(root, version, NCCL_IB_GID_INDEX="1")
        assert not [f for f in fixed if f.code.startswith("ib-gid")], (version, fixed)


def test_ionic_with_old_nccl_gets_the_ula_index_from_the_plan(tmp_path: Path) -> None:
    root = PROFILES["ionic-ipv6-only"].build(tmp_path)
    plan = plan_nccl_env(environ={**ENV, "NCCL_VERSION": "2.19.3"}, root=root)
    assert plan.env["NCCL_IB_GID_INDEX"] == "1"
    assert not of(list(plan.findings), *GID_UNREACHABLE, "ib-gid-index-disagree")


@pytest.mark.parametrize("version", VERSIONS)
def test_identical_tables_never_disagree(tmp_path: Path, version: str | None) -> None:
    for name in ("ionic-ipv6-only", "roce-show-gids-mlx5_0", "roce-bond-gid-list",
                 "roce-bond0-ibdev2netdev", "roce-cx7-down-polling"):
        root = PROFILES[name].build(tmp_path)
        assert not of(run(root, version), "ib-gid-index-disagree"), name


def test_no_unneeded_advice_when_unsetting_the_index_would_break(tmp_path: Path) -> None:
    root = PROFILES["ionic-ipv6-only"].build(tmp_path)
    found = run(root, "2.23.4", NCCL_IB_GID_INDEX="1")
    assert not of(found, "ib-gid-index-unneeded", "ib-gid-index-wrong", *GID_UNREACHABLE)


def test_ports_that_really_differ_disagree_with_a_fix_that_exists(tmp_path: Path) -> None:
    host = b0(tmp_path).interface("ens2", addresses=["10.65.1.2/24"])
    host.rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1",
                                    gids=roce_gids("10.65.0.2", "ens1", 3)))
    host.rdma_device("mlx5_1", port(link_layer="Ethernet", netdev="ens2",
                                    gids=roce_gids("10.65.1.2", "ens2", 5)))
    (old,) = of(doctor(environ={**B0_ENV, "NCCL_VERSION": "2.19.3"}, root=tmp_path),
                "ib-gid-index-disagree", *GID_UNREACHABLE)
    assert old.code == "ib-gid-index-disagree" and old.severity == "error"
    assert old.fix == "use NCCL 2.21 or later, which chooses the GID per port"
    new = doctor(environ={**B0_ENV, "NCCL_VERSION": "2.23.4"}, root=tmp_path)
    assert not [f for f in new if f.code.startswith("ib-gid")]


def test_ipv4_roce_v1_only_is_a_warning_that_names_the_v1_gid(tmp_path: Path) -> None:
    host = b0(tmp_path)
    host.rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1", gids=[
        g for g in roce_gids("10.65.0.2", "ens1") if g.type == "IB/RoCE v1"]))
    (finding,) = of(doctor(environ={**B0_ENV, "NCCL_VERSION": "2.23.4"}, root=tmp_path),
                    *GID_UNREACHABLE)
    assert finding.code == "ib-gid-roce-v1" and finding.severity == "warning"
    assert "mlx5_0:1: GID 2 10.65.0.2 (RoCE v1 IPv4)" in finding.evidence[0]
    assert "enable RoCE v2" in finding.fix  # no v2 GID at all to point at


def test_roce_version_setting_that_breaks_is_undone(tmp_path: Path) -> None:
    root = PROFILES["roce-show-gids-mlx5_0"].build(tmp_path)
    (finding,) = of(run(root, "2.23.4", NCCL_IB_ROCE_VERSION_NUM="1"), *GID_UNREACHABLE)
    assert finding.code == "ib-gid-roce-v1"
    assert finding.fix == "unset NCCL_IB_ROCE_VERSION_NUM"
    assert "set: NCCL_IB_ROCE_VERSION_NUM=1" in finding.evidence


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("version", VERSIONS)
def test_every_gid_fix_of_the_export_or_unset_kind_works(
    tmp_path: Path, name: str, version: str | None
) -> None:
    """The class: a fix line for an unreachable GID must make the verdict go away."""
    root = PROFILES[name].build(tmp_path)
    for finding in of(run(root, version), *GID_UNREACHABLE, "ib-gid-index-disagree"):
        fix = finding.fix
        assert not fix.startswith("unset"), fix  # nothing is set here that could be unset
        if not fix.startswith("export NCCL_"):
            assert fix.startswith(("give ", "use NCCL 2.21 or later", "the IPv4 GIDs")), fix
            continue
        variable, value = fix.removeprefix("export ").split("=", 1)
        after = run(root, version, **{variable: value})
        assert not of(after, *GID_UNREACHABLE, "ib-gid-index-wrong"), (fix, after)


def test_bond_with_ipv4_gid_is_clean(tmp_path: Path) -> None:
    for name in ("roce-bond-gid-list", "roce-bond0-ibdev2netdev"):
        root = PROFILES[name].build(tmp_path)
        for version in VERSIONS:
            found = run(root, version)
            assert not of(found, *GID_UNREACHABLE, "ib-gid-index-disagree"), (name, version)
        wrong = of(run(root, "2.23.4", NCCL_IB_GID_INDEX="1"), "ib-gid-index-wrong")
        assert wrong and "is link-local" in wrong[0].title and wrong[0].fix.startswith(
            "export NCCL_IB_GID_INDEX=3")


def test_efa_gets_no_gid_or_port_verdict(tmp_path: Path) -> None:
    root = PROFILES["efa-p5en-16dev"].build(tmp_path)
    for version in VERSIONS:
        found = run(root, version)
        assert not [f for f in found if f.code.startswith("ib-gid")]
        assert not of(found, *PORT_STATES)


# -- ports present but not ACTIVE -------------------------------------------------------------


def test_kubernetes_ib_vf_in_init_says_sockets_and_subnet_manager(tmp_path: Path) -> None:
    root = PROFILES["k8s-ib-vf-init"].build(tmp_path)
    (finding,) = of(run(root), *PORT_STATES)
    assert finding.code == "rdma-port-init" and finding.severity == "warning"
    assert "mlx5_1:1 is INIT (physical state LinkUp, InfiniBand)" in finding.title
    assert "NCCL will use TCP sockets" in finding.title
    assert "subnet manager" in finding.fix and "virt_enabled" in finding.fix
    assert "mlx5_1 port 1: state INIT, physical state LinkUp, link layer InfiniBand, MT4126" in (
        finding.evidence)


def test_runpod_roce_ports_all_in_init(tmp_path: Path) -> None:
    host = b0(tmp_path)
    for i in range(2):
        netdev = f"ens{i + 1}"
        if i:
            host.interface(netdev, addresses=[f"10.65.{i}.2/24"], mtu=9000)
        host.rdma_device(f"mlx5_{i}", port(state="INIT", link_layer="Ethernet", netdev=netdev,
                                           gids=roce_gids(f"10.65.{i}.2", netdev)))
    (finding,) = of(doctor(environ=B0_ENV, root=tmp_path), *PORT_STATES)
    assert finding.code == "rdma-port-init" and finding.severity == "warning"
    assert "mlx5_0:1, mlx5_1:1 are INIT (physical state LinkUp, Ethernet)" in finding.title
    assert "rdma link show mlx5_0/1" in finding.fix and "ens1" in finding.fix


def test_down_ports_beside_the_rails_are_information(tmp_path: Path) -> None:
    root = PROFILES["roce-cx7-down-polling"].build(tmp_path)
    found = of(run(root, "2.23.4"), *PORT_STATES)
    by_port = {f.title.split()[2]: f for f in found}
    assert set(by_port) == {"mlx5_9:1", "mlx5_11:1"}
    polling, disabled = by_port["mlx5_9:1"], by_port["mlx5_11:1"]
    assert {polling.severity, disabled.severity} == {"info"}
    assert "DOWN (physical state Polling, Ethernet)" in polling.title
    assert "cable" in polling.fix and "ethtool ens10np0" in polling.fix
    assert "DOWN (physical state Disabled, Ethernet)" in disabled.title
    assert "ip link set ens12np0 up" in disabled.fix and "cable" in disabled.fix


def _rails(root: Path, down: Mapping[int, tuple[str, str]]) -> None:
    host = b0(root)
    for i in range(4):
        netdev = f"ens{i + 1}"
        if i:
            host.interface(netdev, addresses=[f"10.65.{i}.2/24"], mtu=9000)
        state, phys = down.get(i, ("ACTIVE", "LinkUp"))
        host.rdma_device(f"mlx5_{i}", port(state=state, phys_state=phys, link_layer="Ethernet",
                                           netdev=netdev, gids=roce_gids(f"10.65.{i}.2", netdev)),
                         board_id="MT_0000000838")


def test_a_rail_down_polling_is_a_warning(tmp_path: Path) -> None:
    _rails(tmp_path, {2: ("DOWN", "Polling")})
    (finding,) = of(doctor(environ=B0_ENV, root=tmp_path), *PORT_STATES)
    assert finding.code == "rdma-port-down" and finding.severity == "warning"
    assert "mlx5_2:1 is DOWN (physical state Polling, Ethernet)" in finding.title
    assert "NCCL uses only the 3 ACTIVE ports" in finding.title
    assert "ethtool ens3" in finding.fix


def test_eight_rails_down_beside_a_front_end_nic_are_rails(tmp_path: Path) -> None:
    # The B300 capture the facts reference quotes: 8 ConnectX-8 (MT4131) "State: Down /
    # Physical state: Disabled" while ConnectX-7 functions (MT4129) run at 100 Gb/s.
    host = b0(tmp_path)
    host.rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1",
                                    rate="100 Gb/sec (4X EDR)",
                                    gids=roce_gids("10.65.0.2", "ens1")), hca_type="MT4129")
    for i in range(1, 9):
        host.rdma_device(f"mlx5_{i}", port(state="DOWN"), hca_type="MT4131",
                         fw_ver="40.46.5500")
    (finding,) = of(doctor(environ=B0_ENV, root=tmp_path), *PORT_STATES)
    assert finding.code == "rdma-port-down" and finding.severity == "warning"
    assert "mlx5_1:1, mlx5_2:1, mlx5_3:1, mlx5_4:1 and 4 more are DOWN" in finding.title
    assert "(physical state Disabled, InfiniBand)" in finding.title


def test_the_uncabled_second_port_of_a_nic_in_use_is_information(tmp_path: Path) -> None:
    host = b0(tmp_path)
    for i in range(2):
        host.rdma_device(f"mlx5_{i}", port(1), port(2, state="DOWN", phys_state="Polling"))
    found = of(doctor(environ=B0_ENV, root=tmp_path), *PORT_STATES)
    assert [(f.code, f.severity) for f in found] == [("rdma-port-down", "info")]
    assert "mlx5_0:2, mlx5_1:2 are DOWN (physical state Polling" in found[0].title


def test_an_armed_infiniband_port(tmp_path: Path) -> None:
    host = b0(tmp_path)
    host.rdma_device("mlx5_0", port()).rdma_device("mlx5_1", port(state="ARMED"))
    (finding,) = of(doctor(environ=B0_ENV, root=tmp_path), *PORT_STATES)
    assert finding.code == "rdma-port-armed" and finding.severity == "warning"
    assert "mlx5_1:1 is ARMED (physical state LinkUp, InfiniBand)" in finding.title
    assert "subnet-manager sweep" in finding.fix


def test_single_node_and_healthy_nodes_get_no_port_verdict(tmp_path: Path) -> None:
    _rails(tmp_path / "a", {})
    assert not of(doctor(environ=B0_ENV, root=tmp_path / "a"), *PORT_STATES)
    root = PROFILES["k8s-ib-vf-init"].build(tmp_path / "b")
    alone = doctor(environ={"MASTER_ADDR": "127.0.0.1", "NUM_NODES": "1"}, root=root)
    assert not of(alone, *PORT_STATES)


def test_management_port_that_is_down_is_not_reported(tmp_path: Path) -> None:
    # Runpod's eth0 is management: its RDMA port being down is nobody's business.
    host = b0(tmp_path)
    host.rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1",
                                    gids=roce_gids("10.65.0.2", "ens1")))
    host.rdma_device("mlx5_1", port(state="DOWN", link_layer="Ethernet", netdev="eth0"))
    assert not of(doctor(environ=B0_ENV, root=tmp_path), *PORT_STATES)


# -- preflight: the same facts compared across nodes -----------------------------------------


def _fingerprint(root: Path, rank: int, version: str = "2.23.4", **extra: str) -> Fingerprint:
    env = {"PRIMARY_ADDR": "10.0.0.1", "NODE_RANK": str(rank), "NUM_NODES": "3",
           "NUM_TRAINERS": "8", "NCCL_VERSION": version, **extra}
    return collect_fingerprint(environ=env, root=root)


def test_fingerprint_carries_the_kind_of_gid_nccl_uses(tmp_path: Path) -> None:
    ionic = PROFILES["ionic-ipv6-only"].build(tmp_path)
    assert _fingerprint(ionic, 1).rdma.gids == ("RoCE v2 IPv6 link-local",)
    assert _fingerprint(ionic, 1, NCCL_IB_ADDR_FAMILY="AF_INET6").rdma.gids == ("RoCE v2 IPv6",)
    ipv4 = PROFILES["roce-show-gids-mlx5_0"].build(tmp_path)
    assert _fingerprint(ipv4, 1).rdma.gids == ("RoCE v2 IPv4",)
    # Before 2.21 NCCL uses index 0 unless told otherwise.
    assert _fingerprint(ipv4, 1, "2.19.3").rdma.gids == ("RoCE v1 IPv6 link-local",)
    assert _fingerprint(ipv4, 1, "2.19.3", NCCL_IB_GID_INDEX="3").rdma.gids == ("RoCE v2 IPv4",)
    ib = PROFILES["azure-a100-ibstatus"].build(tmp_path)
    assert _fingerprint(ib, 1).rdma.gids == ()  # InfiniBand: no RoCE GID to compare
    wire = json.loads(json.dumps(_fingerprint(ionic, 1).to_wire()))
    assert Fingerprint.from_wire(wire).rdma.gids == ("RoCE v2 IPv6 link-local",)


def test_preflight_names_the_node_on_a_link_local_gid(tmp_path: Path) -> None:
    good = PROFILES["roce-show-gids-mlx5_0"].build(tmp_path)
    ionic = PROFILES["ionic-ipv6-only"].build(tmp_path)
    fps = [_fingerprint(good, 0), _fingerprint(good, 1), _fingerprint(ionic, 2)]
    problems = [p for p in compare(entries(*fps), expected_nodes=3)
                if p.code == "preflight-gid-differs"]
    assert len(problems) == 1 and problems[0].severity == "error"
    assert problems[0].title == (
        "kind of RoCE GID NCCL uses differs: rank 2 (10.65.0.4) has RoCE v2 IPv6 link-local, "
        "2 nodes have RoCE v2 IPv4")
    assert [ref.rank for ref in problems[0].nodes] == [2]
    same = [_fingerprint(good, r) for r in range(3)]
    assert not [p for p in compare(entries(*same), expected_nodes=3)
                if p.code == "preflight-gid-differs"]


def test_preflight_names_the_port_in_init_on_the_node_left_on_sockets(tmp_path: Path) -> None:
    ib = PROFILES["azure-a100-ibstatus"].build(tmp_path)
    pod = PROFILES["k8s-ib-vf-init"].build(tmp_path)
    fp = _fingerprint(pod, 2)
    assert fp.rdma.transport is None
    assert fp.rdma.inactive == (
        "mlx5_1 port 1 INIT (LinkUp): the link is up but no subnet manager has configured the "
        "port (no SM on the fabric, or the SM does not serve this port or virtual function)",)
    problems = compare(entries(_fingerprint(ib, 0), _fingerprint(ib, 1), fp), expected_nodes=3)
    (transport,) = [p for p in problems if p.code == "preflight-transport-differs"]
    assert transport.severity == "error"
    assert "rank 2 (10.65.0.4) has none (TCP sockets)" in transport.title
    assert f"rank 2 (10.65.0.4): {fp.rdma.inactive[0]}" in transport.evidence
    assert "subnet manager" in transport.fix


# -- GID settings NCCL ignores ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "title", "fix"),
    [
        ({"NCCL_IB_ADDR_FAMILY": "ipv6"}, "NCCL_IB_ADDR_FAMILY='ipv6': NCCL compares it with "
         "AF_INET and AF_INET6 exactly, so it uses AF_INET", "export NCCL_IB_ADDR_FAMILY=AF_INET6"),
        ({"NCCL_IB_ADDR_RANGE": "10.99.91.0"}, "NCCL_IB_ADDR_RANGE='10.99.91.0': NCCL ignores "
         "it: it is not ADDRESS/LENGTH", "export NCCL_IB_ADDR_RANGE=10.99.91.38/31 (or unset it)"),
        ({"NCCL_IB_ADDR_RANGE": "fd00::/8"}, "NCCL_IB_ADDR_RANGE='fd00::/8': NCCL ignores it: "
         "'fd00::' is not an IPv4 address (NCCL_IB_ADDR_FAMILY=AF_INET)",
         "export NCCL_IB_ADDR_RANGE=10.99.91.38/31 (or unset it)"),
        ({"NCCL_IB_ADDR_RANGE": "10.99.0.0/40"}, "NCCL_IB_ADDR_RANGE='10.99.0.0/40': NCCL "
         "ignores it: the length '40' is above 32",
         "export NCCL_IB_ADDR_RANGE=10.99.91.38/31 (or unset it)"),
        ({"NCCL_IB_ROCE_VERSION_NUM": "3"}, "NCCL_IB_ROCE_VERSION_NUM='3': NCCL reads 3, a RoCE "
         "version no GID has", "unset NCCL_IB_ROCE_VERSION_NUM"),
    ],
)
def test_gid_settings_nccl_ignores(
    tmp_path: Path, setting: dict[str, str], title: str, fix: str
) -> None:
    root = PROFILES["roce-show-gids-mlx5_0"].build(tmp_path)
    (finding,) = of(run(root, "2.23.4", **setting), "ib-gid-setting-ignored")
    assert (finding.severity, finding.title, finding.fix) == ("warning", title, fix)


def test_gid_settings_that_work_or_do_not_exist_yet(tmp_path: Path) -> None:
    root = PROFILES["roce-show-gids-mlx5_0"].build(tmp_path)
    fine = {"NCCL_IB_ADDR_FAMILY": "AF_INET", "NCCL_IB_ADDR_RANGE": "10.99.91.0/24",
            "NCCL_IB_ROCE_VERSION_NUM": "2"}
    assert not of(run(root, "2.23.4", **fine), "ib-gid-setting-ignored", *GID_UNREACHABLE)
    (old,) = of(run(root, "2.19.3", NCCL_IB_ADDR_FAMILY="AF_INET6"), "ib-gid-setting-ignored")
    assert old.severity == "info" and "older than 2.21" in old.title


def test_automatic_gid_index_asked_of_an_nccl_that_has_none(tmp_path: Path) -> None:
    root = PROFILES["roce-show-gids-mlx5_0"].build(tmp_path)
    (wrong,) = of(run(root, "2.19.3", NCCL_IB_GID_INDEX="-1"), "ib-gid-index-wrong")
    assert "does not have (it came with 2.21)" in wrong.title
    assert wrong.fix == "export NCCL_IB_GID_INDEX=3"
    assert not of(run(root, "2.23.4", NCCL_IB_GID_INDEX="-1"), "ib-gid-index-wrong",
                  *GID_UNREACHABLE)


@pytest.mark.parametrize(("value", "reads"), [("0x3", None), (" 3", None), ("3x", "3"),
                                              ("abc", "0"), ("", None),
                                              ("99999999999", "99999999999")])
def test_gid_index_spelled_as_nccl_reads_it(tmp_path: Path, value: str, reads: str | None) -> None:
    root = PROFILES["roce-show-gids-mlx5_0"].build(tmp_path)
    found = run(root, "2.19.3", NCCL_IB_GID_INDEX=value)
    invalid = of(found, "ib-gid-index-invalid")
    if value in ("0x3", " 3"):  # NCCL reads 3: the right index, nothing to say
        assert not invalid and not of(found, "ib-gid-index-wrong")
        return
    (finding,) = invalid
    assert finding.title.endswith(f": NCCL reads it as {reads}") if reads else (
        finding.title == f"NCCL_IB_GID_INDEX={value!r} is not a GID index")


def test_plan_keeps_a_user_index_nccl_reads_as_the_same(tmp_path: Path) -> None:
    root = PROFILES["roce-show-gids-mlx5_0"].build(tmp_path)
    for value, action in (("0x3", "keep"), ("3", "keep"), ("1", "keep")):
        plan = plan_nccl_env(environ={**ENV, "NCCL_VERSION": "2.19.3", "NCCL_IB_GID_INDEX": value},
                             root=root)
        (change,) = [c for c in plan.changes if c.name == "NCCL_IB_GID_INDEX"]
        assert change.action == action
        same = not [f for f in plan.findings if f.code == "ib-gid-index-wrong"]
        assert same is (value != "1"), (value, plan.findings)
