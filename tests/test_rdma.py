"""RdmaInfo detection: parsers, the sysfs traps, usability, transport and NCCL's GID choice."""

from __future__ import annotations

import dataclasses
import json
import os
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path

import pytest

import clusterenv
from clusterenv.errors import DiscoveryError
from clusterenv.rdma import (
    Gid,
    RdmaInfo,
    RdmaPort,
    _parse_gid,
    _parse_link_layer,
    _parse_node_type,
    _parse_phys_state,
    _parse_rate,
    _parse_state,
    port_transport,
)
from clusterenv.testing import GidSpec, HostBuilder, gid, port

LINK_LOCAL = "fe80::a288:c2ff:fe63:5a20"


def roce(
    *gids: GidSpec, netdev: str = "ens1", state: str = "ACTIVE", table: int | None = None
) -> clusterenv.testing.PortSpec:
    return port(
        1, state=state, link_layer="Ethernet", netdev=netdev, gids=gids, gid_table_len=table
    )


def detect(host: HostBuilder) -> RdmaInfo:
    return RdmaInfo.detect(root=host.root)


def only_port(info: RdmaInfo) -> RdmaPort:
    (device,) = info.devices
    (found,) = device.ports
    return found


# -- pure parsers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("4: ACTIVE", "ACTIVE"),
        ("1: DOWN", "DOWN"),
        ("2: INIT", "INIT"),
        ("3: ARMED", "ARMED"),
        ("5: ACTIVE_DEFER", "ACTIVE_DEFER"),
        ("4: ACTIVE\n", "ACTIVE"),
        ("ACTIVE", "ACTIVE"),
        ("4", "UNKNOWN"),
        ("4:", "ACTIVE"),
        ("9: BANANA", "UNKNOWN"),
        ("0: UNKNOWN", "UNKNOWN"),
        ("", "UNKNOWN"),
        (None, "UNKNOWN"),
        ("4: ACTIVE 4: ACTIVE", "ACTIVE"),
        ("99999999999999999999: X", "UNKNOWN"),
    ],
)
def test_parse_state(text: str | None, state: str) -> None:
    assert _parse_state(text) == state


def test_parse_phys_state_and_node_type() -> None:
    assert _parse_phys_state("5: LinkUp") == "LinkUp"
    assert _parse_phys_state("3: Disabled") == "Disabled"
    assert _parse_phys_state("7: Phy Test") == "Phy Test"
    assert _parse_phys_state("2: Polling") == "Polling"
    assert _parse_phys_state("8: <unknown>") == "Unknown"
    assert _parse_phys_state(None) == "Unknown"
    assert _parse_node_type("1: CA") == "CA"
    assert _parse_node_type("4: RNIC") == "RNIC"
    assert _parse_node_type("6: usNIC UDP") == "usNIC UDP"
    assert _parse_node_type("7: unspecified") == "unspecified"
    assert _parse_node_type("12: <unknown>") is None
    assert _parse_node_type("\x00\xff") is None


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("400 Gb/sec (4X NDR)", 400.0),
        ("200 Gb/sec (2X NDR)", 200.0),
        ("25 Gb/sec (1X EDR)", 25.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("56 Gb/sec (4X FDR)", 56.0),
        ("800 Gb/sec (4X XDR)", 800.0),
        ("400", 400.0),
        ("0 Gb/sec", None),
        ("fast", None),
        ("400 Mb/sec", None),
        ("", None),
        (None, None),
        ("1" * 40 + " Gb/sec", None),
    ],
)
def test_parse_rate(text: str | None, rate: float | None) -> None:
    assert _parse_rate(text) == rate


def test_parse_gid_accepts_every_spelling() -> None:
    mapped = IPv6Address("::ffff:10.99.91.39")
    assert _parse_gid("0000:0000:0000:0000:0000:ffff:0a63:5b27") == mapped  # sysfs
    assert _parse_gid("::ffff:10.99.91.39") == mapped  # ibv_devinfo -v, v2 GIDs
    assert _parse_gid("::FFFF:0A63:5B27\n") == mapped
    assert _parse_gid("fe80::1%eth0") is None
    assert _parse_gid("10.99.91.39") is None
    assert _parse_gid("0000:0000:0000:0000:0000:ffff:0a63") is None
    assert _parse_gid("zzzz:0000:0000:0000:0000:ffff:0a63:5b27") is None
    assert _parse_gid("") is None
    assert _parse_gid(None) is None


def test_parse_link_layer() -> None:
    assert _parse_link_layer("InfiniBand") == "InfiniBand"
    assert _parse_link_layer("ethernet\n") == "Ethernet"
    assert _parse_link_layer("Unspecified") == "Unspecified"
    assert _parse_link_layer("Unknown") == "Unknown"
    assert _parse_link_layer("Token Ring") == "Unknown"
    assert _parse_link_layer(None) == "Unknown"


def test_gid_properties() -> None:
    v2 = Gid(3, IPv6Address("::ffff:10.0.0.1"), "RoCE v2", "ens1")
    assert v2.ipv4 == IPv4Address("10.0.0.1")
    assert v2.roce_version == 2
    assert not v2.is_link_local
    local = Gid(0, IPv6Address(LINK_LOCAL), "IB/RoCE v1", "ens1")
    assert local.ipv4 is None
    assert local.roce_version == 1
    assert local.is_link_local
    assert Gid(2, IPv6Address("::ffff:10.0.0.1"), "RoCE v1", None).roce_version == 1
    assert Gid(2, IPv6Address("::ffff:10.0.0.1"), None, None).roce_version is None
    assert Gid(2, IPv6Address("::ffff:10.0.0.1"), "iWARP", None).roce_version is None


# -- GID tables -----------------------------------------------------------------------------


def test_show_gids_layout_gives_index_3(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0",
        roce(
            gid(0, LINK_LOCAL, "IB/RoCE v1", "ens1"),
            gid(1, LINK_LOCAL, "RoCE v2", "ens1"),
            gid(2, "::ffff:10.99.91.39", "IB/RoCE v1", "ens1"),
            gid(3, "::ffff:10.99.91.39", "RoCE v2", "ens1"),
        ),
    )
    found = only_port(detect(host))
    assert [g.index for g in found.gids] == [0, 1, 2, 3]
    assert found.nccl_gid_index == 3
    assert found.gids[3].ipv4 == IPv4Address("10.99.91.39")
    assert found.netdev == "ens1"


def test_second_link_local_pushes_ipv4_v2_to_index_5(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0",
        roce(
            gid(0, LINK_LOCAL, "IB/RoCE v1"),
            gid(1, LINK_LOCAL, "RoCE v2"),
            gid(2, "fe80::7d1c:9a2:1b3:44", "IB/RoCE v1"),
            gid(3, "fe80::7d1c:9a2:1b3:44", "RoCE v2"),
            gid(4, "::ffff:10.0.0.7", "IB/RoCE v1"),
            gid(5, "::ffff:10.0.0.7", "RoCE v2"),
        ),
    )
    assert only_port(detect(host)).nccl_gid_index == 5


def test_macvlan_sparse_table_with_ipv4_first(tmp_path: Path) -> None:
    # A Kubernetes MACVLAN pod: only slots 6-9, IPv4 before link-local, v2 IPv4 at 7.
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0",
        roce(
            gid(6, "::ffff:192.168.1.20", "IB/RoCE v1", "net1"),
            gid(7, "::ffff:192.168.1.20", "RoCE v2", "net1"),
            gid(8, "fe80::4c3e:42ff:fe11:2233", "IB/RoCE v1", "net1"),
            gid(9, "fe80::4c3e:42ff:fe11:2233", "RoCE v2", "net1"),
            netdev="net1",
        ),
    )
    found = only_port(detect(host))
    assert [g.index for g in found.gids] == [6, 7, 8, 9]
    assert found.nccl_gid_index == 7
    assert found.netdev == "net1"


def test_lowest_ipv4_v2_wins_over_later_ones(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0",
        roce(
            gid(3, "::ffff:10.0.0.1", "RoCE v2"),
            gid(5, "::ffff:10.99.0.1", "RoCE v2"),
            gid(1, "2001:db8::1", "RoCE v2"),
        ),
    )
    assert only_port(detect(host)).nccl_gid_index == 3


def test_no_ipv4_v2_gid_ends_on_the_ipv4_v1_gid(tmp_path: Path) -> None:
    # NCCL switches to the first GID of the wanted family (IPv4) whatever its RoCE version, and
    # only a valid IPv4 RoCE v2 GID would displace it: it sends RoCE v1, which is not routed.
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0",
        roce(
            gid(0, LINK_LOCAL, "IB/RoCE v1"),
            gid(1, LINK_LOCAL, "RoCE v2"),  # link-local v2: times out across subnets
            gid(2, "::ffff:10.0.0.1", "IB/RoCE v1"),
            gid(3, "2001:db8::1", "RoCE v2"),
        ),
    )
    found = only_port(detect(host))
    assert (found.nccl_gid_index, found.nccl_gid_reaches_peers) == (2, False)


def test_infiniband_ports_have_no_gid_index(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0",
        port(1, gids=[gid(0, LINK_LOCAL, "IB/RoCE v1"), gid(1, "::ffff:10.0.0.1", "RoCE v2")]),
    )
    found = only_port(detect(host))
    assert (found.nccl_gid_index, found.nccl_gid_reaches_peers) == (None, None)


def test_empty_slots_are_left_out_but_link_local_kept(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0", roce(gid(1, LINK_LOCAL, "RoCE v2"), gid(3, "::ffff:10.0.0.1", "RoCE v2"))
    )
    gids_dir = host.root / "sys/class/infiniband/mlx5_0/ports/1/gids"
    (gids_dir / "2").write_text("fe80:0000:0000:0000:0000:0000:0000:0000\n")  # bare prefix
    (gids_dir / "4").write_text("::\n")  # zero, compressed (not what sysfs writes)
    (gids_dir / "5").write_text("fe80::\n")
    found = only_port(detect(host))
    assert [g.index for g in found.gids] == [1, 3]
    assert found.gids[0].is_link_local
    assert found.gid_table_len == 16


def test_unreadable_gid_attributes_read_as_unknown(tmp_path: Path) -> None:
    # A container's sysfs can answer EINVAL for gid_attrs of a slot that has a GID.
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0",
        roce(gid(3, "::ffff:10.0.0.1", "RoCE v2", "ens1"), gid(5, "::ffff:10.0.0.1", "RoCE v2")),
    )
    attrs = host.root / "sys/class/infiniband/mlx5_0/ports/1/gid_attrs"
    (attrs / "types/3").unlink()
    (attrs / "ndevs/3").unlink()
    (attrs / "types/3").mkdir()  # reading it fails like EINVAL does
    found = only_port(detect(host))
    assert found.gids[0] == Gid(3, IPv6Address("::ffff:10.0.0.1"), None, None)
    assert found.nccl_gid_index == 5  # NCCL skips the slot whose type it cannot read


def test_full_256_entry_table(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0", roce(gid(255, "::ffff:10.0.0.9", "RoCE v2", "ens1"), table=256)
    )
    found = only_port(detect(host))
    assert found.gid_table_len == 256
    assert found.nccl_gid_index == 255


def test_gids_dir_missing_or_garbled_entries(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0", roce(gid(3, "::ffff:10.0.0.1", "RoCE v2")))
    gids_dir = host.root / "sys/class/infiniband/mlx5_0/ports/1/gids"
    (gids_dir / "readme").write_text("not a slot")
    (gids_dir / "7").write_text("garbage")
    assert only_port(detect(host)).gid_table_len == 16
    for entry in gids_dir.iterdir():
        entry.unlink()
    gids_dir.rmdir()
    found = only_port(detect(host))
    # NCCL still uses index 0: an empty GID, which reaches nobody.
    assert (found.gids, found.gid_table_len, found.nccl_gid_index) == ((), 0, 0)
    assert found.nccl_gid_reaches_peers is False


# -- ports, devices, names ------------------------------------------------------------------


def test_rate_only_for_active_ports(tmp_path: Path) -> None:
    host = (
        HostBuilder(tmp_path)
        .rdma_device("mlx5_0", port(1, state="DOWN"))  # writes the meaningless "10 Gb/sec"
        .rdma_device("mlx5_1", port(1, state="DOWN", link_layer="Ethernet"))  # "40 Gb/sec"
        .rdma_device("mlx5_2", port(1, state="INIT", phys_state="LinkUp"))  # no subnet manager
        .rdma_device("mlx5_3", port(1, state="ACTIVE", rate="200 Gb/sec (4X HDR)"))
    )
    info = detect(host)
    ports = {d.name: d.ports[0] for d in info.devices}
    assert [ports[n].rate_gbps for n in ("mlx5_0", "mlx5_1", "mlx5_2")] == [None, None, None]
    assert ports["mlx5_2"].phys_state == "LinkUp"
    assert not ports["mlx5_2"].active
    assert ports["mlx5_3"].rate_gbps == 200.0
    assert [d.name for d in info.usable_devices] == ["mlx5_3"]


def test_renamed_devices_sort_naturally(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path)
    for name in ("mlx5_10", "rocep193s0f0", "mlx5_2", "ibp12s0", "mlx5_bond_0", "rdmap85s0"):
        host.rdma_device(name)
    names = [d.name for d in detect(host).devices]
    assert names == ["ibp12s0", "mlx5_2", "mlx5_10", "mlx5_bond_0", "rdmap85s0", "rocep193s0f0"]


def test_long_persistent_names_map_to_their_verbs_node(tmp_path: Path) -> None:
    # rdma_rename's by-guid fallback gives names longer than an interface name may be.
    host = HostBuilder(tmp_path).rdma_device("rocex525400c0fe123455", roce(), uverbs=4)
    (device,) = detect(host).devices
    assert (device.name, device.uverbs, device.usable) == ("rocex525400c0fe123455", "uverbs4", True)


def test_two_devices_on_bond0(tmp_path: Path) -> None:
    bond = [
        gid(0, LINK_LOCAL, "RoCE v2", "bond0"),
        gid(3, "::ffff:10.82.101.193", "RoCE v2", "bond0"),
    ]
    host = (
        HostBuilder(tmp_path)
        .rdma_device("mlx5_1", roce(*bond, netdev="bond0"), pci_netdevs=["ens12f0np0"])
        .rdma_device("mlx5_7", roce(*bond, netdev="bond0"), pci_netdevs=["ens20f0np0"])
    )
    info = detect(host)
    assert [d.ports[0].netdev for d in info.devices] == ["bond0", "bond0"]
    assert [d.netdevs for d in info.devices] == [("bond0", "ens12f0np0"), ("bond0", "ens20f0np0")]
    assert [d.pci_netdevs for d in info.devices] == [("ens12f0np0",), ("ens20f0np0",)]


def test_ipoib_netdev_of_two_port_device_by_dev_port(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0", port(1), port(2), pci_netdevs=["ibp12s0", "ibp12s0d1"]
    )
    net = host.root / "sys/class/infiniband/mlx5_0/device/net"
    (net / "ibp12s0/dev_port").write_text("0\n")
    (net / "ibp12s0d1/dev_port").write_text("1\n")
    (device,) = detect(host).devices
    assert [p.netdev for p in device.ports] == ["ibp12s0", "ibp12s0d1"]
    assert device.port(2) is device.ports[1]
    assert device.port(3) is None


def test_ipoib_netdev_of_one_port_device(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("ibp26s0", port(1), pci_netdevs=["ibp26s0"])
    assert only_port(detect(host)).netdev == "ibp26s0"


def test_device_identity(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_bond_0",
        hca_type="MT41692",
        fw_ver="32.38.3056",
        board_id="MT_0000000884",
    )
    (device,) = detect(host).devices
    assert (device.node_type, device.hca_type, device.fw_ver, device.board_id) == (
        "CA",
        "MT41692",
        "32.38.3056",
        "MT_0000000884",
    )


# -- verbs nodes and usability ---------------------------------------------------------------


def test_uverbs_number_is_not_the_device_number(tmp_path: Path) -> None:
    host = (
        HostBuilder(tmp_path)
        .rdma_device("mlx5_0", uverbs=5)
        .rdma_device("mlx5_1", uverbs=2, dev_node=False)
    )
    info = detect(host)
    assert [(d.name, d.uverbs, d.dev_node, d.usable) for d in info.devices] == [
        ("mlx5_0", "uverbs5", True, True),
        ("mlx5_1", "uverbs2", False, False),
    ]
    assert info.uverbs == ("uverbs5",)


def test_device_without_any_verbs_entry_is_not_usable(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0", verbs=False)
    (device,) = detect(host).devices
    assert (device.uverbs, device.dev_node, device.usable) == (None, False, False)


def test_verbs_link_under_the_device_is_a_fallback(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0", verbs=False)
    (host.root / "sys/class/infiniband/mlx5_0/device/infiniband_verbs/uverbs3").mkdir(parents=True)
    host.file("dev/infiniband/uverbs3", "")
    (device,) = detect(host).devices
    assert (device.uverbs, device.usable) == ("uverbs3", True)


def test_only_verbs_nodes_count_in_dev_infiniband(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0", uverbs=10).rdma_device("mlx5_1", uverbs=9)
    for name in ("umad0", "issm0", "rdma_cm", "uverbsX"):
        host.file(f"dev/infiniband/{name}", "")
    assert detect(host).uverbs == ("uverbs9", "uverbs10")


def test_directory_in_place_of_the_dev_node_is_not_a_node(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0", dev_node=False)
    (host.root / "dev/infiniband/uverbs0").mkdir(parents=True)
    assert not detect(host).devices[0].dev_node


def test_two_verbs_entries_naming_one_device_keep_the_first(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0", uverbs=1)
    host.file("sys/class/infiniband_verbs/uverbs7/ibdev", "mlx5_0")
    assert detect(host).devices[0].uverbs == "uverbs1"


# -- transport ------------------------------------------------------------------------------


def test_transport_infiniband_roce_efa(tmp_path: Path) -> None:
    ib = HostBuilder(tmp_path / "ib").rdma_device("mlx5_0").rdma_device("mlx5_1")
    assert detect(ib).transport == "infiniband"
    eth = HostBuilder(tmp_path / "roce").rdma_device("mlx5_0", roce())
    assert detect(eth).transport == "roce"
    efa = HostBuilder(tmp_path / "efa").rdma_device(
        "rdmap85s0", port(1, link_layer="Unknown", gids=[]), node_type="7: unspecified"
    )
    assert detect(efa).transport == "efa"
    devinfo_words = HostBuilder(tmp_path / "efa2").rdma_device(
        "rdmap86s0", port(1, link_layer="Unspecified", gids=[]), node_type="garbage"
    )
    assert detect(devinfo_words).transport == "efa"


def test_mixed_counts_only_usable_active_ports(tmp_path: Path) -> None:
    front_end_down = (
        HostBuilder(tmp_path / "a")
        .rdma_device("mlx5_0")
        .rdma_device("mlx5_1", roce(state="DOWN"))
    )
    assert detect(front_end_down).transport == "infiniband"
    front_end_hidden = (
        HostBuilder(tmp_path / "b")
        .rdma_device("mlx5_0")
        .rdma_device("mlx5_1", roce(), dev_node=False)
    )
    assert detect(front_end_hidden).transport == "infiniband"
    front_end_up = (
        HostBuilder(tmp_path / "c").rdma_device("mlx5_0").rdma_device("mlx5_bond_0", roce())
    )
    assert detect(front_end_up).transport == "mixed"
    one_device_two_layers = HostBuilder(tmp_path / "d").rdma_device(
        "mlx5_0", port(1), port(2, link_layer="Ethernet")
    )
    assert detect(one_device_two_layers).transport == "mixed"


def test_nothing_usable_means_no_transport(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0", dev_node=False)
    info = detect(host)
    assert (len(info.devices), info.usable_devices, info.transport) == (1, (), None)


def test_port_transport_of_unknown_link_layer_is_none(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0", port(1, link_layer="Unknown", gids=[]))
    info = detect(host)
    assert port_transport(info.devices[0], info.devices[0].ports[0]) is None
    assert info.transport is None
    assert info.usable_ports == ((info.devices[0], info.devices[0].ports[0]),)


# -- whole-host behaviour ----------------------------------------------------------------------


def test_empty_host(tmp_path: Path) -> None:
    info = RdmaInfo.detect(root=tmp_path)
    assert (info.devices, info.uverbs, info.transport) == ((), (), None)
    assert info.get("mlx5_0") is None


def test_unreadable_root_is_a_discovery_error(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError) as caught:
        RdmaInfo.detect(root=tmp_path / "missing")
    assert caught.value.path == str(tmp_path / "missing")
    assert str(tmp_path / "missing") in str(caught.value)


def test_stray_entries_in_class_dir_are_skipped(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0")
    host.file("sys/class/infiniband/README", "not a device")
    os.symlink("../../devices/gone/mlx5_9", host.root / "sys/class/infiniband/mlx5_9")
    (host.root / "sys/class/infiniband/mlx5_0/ports/notaport").mkdir()
    host.file("sys/class/infiniband/mlx5_0/ports/2", "a file, not a port")
    info = detect(host)
    assert [d.name for d in info.devices] == ["mlx5_0"]
    assert [p.number for p in info.devices[0].ports] == [1]


def test_results_are_frozen(tmp_path: Path) -> None:
    info = detect(HostBuilder(tmp_path).rdma_device("mlx5_0"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.devices[0].name = "x"  # type: ignore[misc]


def test_json_uses_public_attribute_names(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0", roce(gid(3, "::ffff:10.0.0.1", "RoCE v2", "ens1"))
    )
    data = json.loads(json.dumps(detect(host).to_dict()))
    assert set(data) == {"devices", "uverbs", "transport"}
    device = data["devices"][0]
    assert {"name", "ports", "usable", "netdevs", "uverbs", "dev_node"} <= set(device)
    found = device["ports"][0]
    assert {
        "number",
        "state",
        "phys_state",
        "link_layer",
        "rate_gbps",
        "netdev",
        "gids",
        "nccl_gid_index",
        "nccl_gid_reaches_peers",
        "active",
    } <= set(found)
    assert found["nccl_gid_index"] == 3
    assert found["nccl_gid_reaches_peers"] is True
    assert found["gids"][0] == {
        "index": 3,
        "address": str(IPv6Address("::ffff:10.0.0.1")),
        "type": "RoCE v2",
        "netdev": "ens1",
        "ipv4": "10.0.0.1",
        "roce_version": 2,
    }


def test_public_names_resolve_lazily() -> None:
    assert clusterenv.RdmaInfo is RdmaInfo
    assert clusterenv.RdmaPort is RdmaPort
    assert clusterenv.Gid is Gid


def test_live_host_detection_agrees_with_sysfs() -> None:
    # Oracle: the kernel's own list of RDMA devices and of each device's ports.
    info = RdmaInfo.detect()
    sysfs = Path("/sys/class/infiniband")
    names = sorted(p.name for p in sysfs.iterdir()) if sysfs.is_dir() else []
    assert sorted(d.name for d in info.devices) == names
    for device in info.devices:
        ports = sorted(int(p.name) for p in (sysfs / device.name / "ports").iterdir())
        assert sorted(p.number for p in device.ports) == ports
    assert all(d.usable == (d.dev_node and any(p.active for p in d.ports)) for d in info.devices)
