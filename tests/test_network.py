"""NetworkInterfaces and route_interface on snapshots built in code, plus the live host."""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterenv._addresses import _parse_netifaces, _prefix_length, parse_address
from clusterenv._routes import _parse_ipv6_route, _parse_route
from clusterenv.config import ClusterConfig
from clusterenv.errors import DiscoveryError
from clusterenv.network import (
    Interface,
    NetworkInterfaces,
    _parse_mac,
    _parse_speed,
    route_interface,
)
from clusterenv.testing import ARPHRD_INFINIBAND, HostBuilder
from tests.test_config import RUNPOD


def runpod_node(root: Path) -> HostBuilder:
    """Baseline Runpod node B0 of the failure-mode catalogue: lo, eth0 management, ens1 cluster."""
    return (
        HostBuilder(root)
        .loopback()
        .interface("eth0", addresses=["172.20.0.5/16"], speed=10000)
        .interface("ens1", addresses=["10.65.0.2/24", "fe80::1/64"], mtu=9000, speed=400000)
    )


@dataclass(frozen=True)
class Addressing:
    """A stand-in for ClusterConfig where a case cannot be a valid config (loopback multi-node)."""

    primary_addr: str
    node_addr: str | None = None
    is_multi_node: bool = True
    source: str = "generic"
    primary_variable: str = "MASTER_ADDR"


# -- interface kinds ----------------------------------------------------------------------------


def test_bridge_with_port(tmp_path: Path) -> None:
    HostBuilder(tmp_path).interface(
        "br0", kind="bridge", physical=False, bridge_ports=["veth0"], addresses=["10.0.0.1/24"]
    ).interface("veth0", physical=False, speed=10000)
    net = NetworkInterfaces.detect(root=tmp_path)
    bridge, port = net.get("br0"), net.get("veth0")
    assert bridge is not None and port is not None
    assert bridge.is_bridge and not bridge.is_bond and bridge.is_virtual
    assert bridge.bridge_ports == ("veth0",)
    assert bridge.speed_mbps is None
    # The port has no `master` link in this snapshot: the bridge's brif/ names it.
    assert port.master == "br0"
    assert port.is_virtual and port.speed_mbps == 10000


def test_bond_with_slaves(tmp_path: Path) -> None:
    # The bonded RoCE node of ip-br-ibdev2netdev-h100-roce-bond0-docker0.txt.
    (
        HostBuilder(tmp_path)
        .interface("ens12f0np0", speed=200000)
        .interface("ens20f0np0", speed=200000)
        .interface(
            "bond0",
            kind="bond",
            physical=False,
            slaves=["ens12f0np0", "ens20f0np0"],
            addresses=["10.82.101.193/29"],
        )
        .interface("ens12f1np1", operstate="down")
    )
    net = NetworkInterfaces.detect(root=tmp_path)
    bond = net.get("bond0")
    assert bond is not None
    assert bond.is_bond and bond.is_virtual and not bond.is_bridge
    assert bond.bond_slaves == ("ens12f0np0", "ens20f0np0")
    assert [net.get(n).master for n in bond.bond_slaves] == ["bond0", "bond0"]  # type: ignore[union-attr]
    assert net.get("ens12f1np1").master is None  # type: ignore[union-attr]
    assert net.owner_of("10.82.101.193") is bond


def test_ipoib(tmp_path: Path) -> None:
    HostBuilder(tmp_path).interface(
        "ibp26s0", arphrd=ARPHRD_INFINIBAND, mtu=4092, addresses=["192.168.10.2/24"]
    )
    ib = NetworkInterfaces.detect(root=tmp_path).get("ibp26s0")
    assert ib is not None and ib.is_ipoib and ib.arphrd == 32
    assert ib.mac is not None and len(ib.mac.split(":")) == 20
    assert ib.mtu == 4092 and not ib.is_virtual


def test_down_interface_without_speed(tmp_path: Path) -> None:
    HostBuilder(tmp_path).interface("ens2", operstate="down").interface("ens3", operstate="up")
    (tmp_path / "sys/class/net/ens3/speed").write_text("-1\n")  # up without link: SPEED_UNKNOWN
    net = NetworkInterfaces.detect(root=tmp_path)
    down, unknown = net.get("ens2"), net.get("ens3")
    assert down is not None and unknown is not None
    assert down.speed_mbps is None and down.operstate == "down" and not down.is_up
    assert unknown.speed_mbps is None and unknown.is_up


def test_admin_down_flags_override_unknown_operstate(tmp_path: Path) -> None:
    HostBuilder(tmp_path).interface("tun0", operstate="unknown", physical=False)
    (tmp_path / "sys/class/net/tun0/flags").write_text("0x1090\n")  # no IFF_UP
    tun = NetworkInterfaces.detect(root=tmp_path).get("tun0")
    assert tun is not None and tun.flags == 0x1090 and not tun.is_up


def test_loopback(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback()
    lo = NetworkInterfaces.detect(root=tmp_path).get("lo")
    assert lo is not None
    assert lo.is_loopback and lo.is_virtual and lo.is_up  # operstate "unknown" while working
    assert lo.ipv4 == (ipaddress.IPv4Interface("127.0.0.1/8"),)
    assert lo.ipv6 == (ipaddress.IPv6Interface("::1/128"),)
    assert not lo.has_routable_address


def test_ipv6_link_local_only_is_not_routable(tmp_path: Path) -> None:
    HostBuilder(tmp_path).interface("veth0", physical=False, addresses=["fe80::1/64"]).interface(
        "ens1", addresses=["10.65.0.2/24", "fe80::2/64"]
    )
    net = NetworkInterfaces.detect(root=tmp_path)
    veth, ens1 = net.get("veth0"), net.get("ens1")
    assert veth is not None and ens1 is not None
    assert not veth.has_routable_address and ens1.has_routable_address
    # Every interface is on fe80::/64; a zone narrows it to one.
    assert {i.name for i in net.on_subnet("fe80::99")} == {"veth0", "ens1"}
    assert [i.name for i in net.on_subnet("fe80::99%ens1")] == ["ens1"]
    assert net.owner_of("fe80::1%ens1") is None
    assert net.owner_of("fe80::1%veth0") is veth


def test_interface_with_only_addresses(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback().addresses("ens9", ["10.9.0.2/24", "not-an-address"])
    ens9 = NetworkInterfaces.detect(root=tmp_path).get("ens9")
    assert ens9 == Interface(name="ens9", ipv4=(ipaddress.IPv4Interface("10.9.0.2/24"),))
    assert ens9.is_up and not ens9.is_virtual and ens9.has_routable_address


def test_names_in_natural_order(tmp_path: Path) -> None:
    builder = HostBuilder(tmp_path)
    for name in ("ens10", "ens2", "eth0", "ens1", "lo"):
        builder.interface(name)
    (tmp_path / "sys/class/net/bonding_masters").write_text("bond0\n")  # a file, not an interface
    assert NetworkInterfaces.detect(root=tmp_path).names == ("ens1", "ens2", "ens10", "eth0", "lo")


def test_empty_root_has_no_interfaces(tmp_path: Path) -> None:
    net = NetworkInterfaces.detect(root=tmp_path)
    assert net.interfaces == () and len(net) == 0 and net.get("lo") is None


def test_missing_root_is_a_discovery_error(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="not a directory"):
        NetworkInterfaces.detect(root=tmp_path / "nope")


def test_json_uses_attribute_names(tmp_path: Path) -> None:
    runpod_node(tmp_path)
    data = json.loads(json.dumps(NetworkInterfaces.detect(root=tmp_path).to_dict()))
    ens1 = next(i for i in data["interfaces"] if i["name"] == "ens1")
    assert ens1["ipv4"] == ["10.65.0.2/24"] and ens1["ipv6"] == ["fe80::1/64"]
    assert ens1["mtu"] == 9000 and ens1["speed_mbps"] == 400000
    assert ens1["is_up"] is True and ens1["has_routable_address"] is True


# -- addresses ----------------------------------------------------------------------------------


def test_owner_of_and_on_subnet_ipv4(tmp_path: Path) -> None:
    runpod_node(tmp_path).interface("ens2", addresses=["10.65.0.130/25"])
    net = NetworkInterfaces.detect(root=tmp_path)
    assert net.owner_of("10.65.0.2").name == "ens1"  # type: ignore[union-attr]
    assert net.owner_of(ipaddress.IPv4Address("172.20.0.5")).name == "eth0"  # type: ignore[union-attr]
    assert net.owner_of("::ffff:10.65.0.2").name == "ens1"  # type: ignore[union-attr]
    assert net.owner_of("10.65.0.3") is None
    # Most specific prefix first: 10.65.0.200 is in ens2's /25 and ens1's /24.
    assert [i.name for i in net.on_subnet("10.65.0.200")] == ["ens2", "ens1"]
    assert [i.name for i in net.on_subnet("10.65.0.7")] == ["ens1"]
    assert net.on_subnet("8.8.8.8") == ()


def test_owner_of_and_on_subnet_ipv6(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback().interface("ens1", addresses=["fd00::2/64", "fe80::2/64"])
    net = NetworkInterfaces.detect(root=tmp_path)
    assert net.owner_of("fd00::2").name == "ens1"  # type: ignore[union-attr]
    assert net.owner_of("[fd00::2]").name == "ens1"  # type: ignore[union-attr]
    assert net.owner_of("fd00::3") is None
    assert [i.name for i in net.on_subnet("fd00::99")] == ["ens1"]
    assert net.owner_of("::1").name == "lo"  # type: ignore[union-attr]


def test_not_an_ip_is_a_value_error(tmp_path: Path) -> None:
    net = NetworkInterfaces.detect(root=runpod_node(tmp_path).root)
    with pytest.raises(ValueError, match="'node-0' is not an IP address"):
        net.owner_of("node-0")
    with pytest.raises(ValueError, match="not an IP address"):
        net.on_subnet("10.65.0")


# -- the cluster interface ----------------------------------------------------------------------


def test_cluster_interface_holds_node_addr(tmp_path: Path) -> None:
    net = NetworkInterfaces.detect(root=runpod_node(tmp_path).root)
    config = ClusterConfig.from_env(RUNPOD, root=tmp_path)  # NODE_ADDR 10.65.0.2
    chosen, reason = net.choose_cluster_interface(config)
    assert chosen is not None and chosen.name == "ens1"
    assert reason == "ens1 holds NODE_ADDR 10.65.0.2"
    assert net.cluster_interface(config) is chosen


def test_cluster_interface_from_primary_subnet(tmp_path: Path) -> None:
    net = NetworkInterfaces.detect(root=runpod_node(tmp_path).root)
    env = {"MASTER_ADDR": "10.65.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1"}
    config = ClusterConfig.from_env(env, root=tmp_path)
    assert config.is_multi_node and config.node_addr is None
    chosen, reason = net.choose_cluster_interface(config)
    assert chosen is not None and chosen.name == "ens1"
    assert reason == "ens1 (10.65.0.2/24) is on the subnet of MASTER_ADDR 10.65.0.1"


def test_cluster_interface_stale_node_addr_falls_back_to_primary(tmp_path: Path) -> None:
    net = NetworkInterfaces.detect(root=runpod_node(tmp_path).root)
    config = Addressing(primary_addr="10.65.0.1", node_addr="10.65.0.3", source="runpod",
                        primary_variable="PRIMARY_ADDR")
    chosen, reason = net.choose_cluster_interface(config)
    assert chosen is not None and chosen.name == "ens1"
    assert reason.startswith("no interface holds NODE_ADDR 10.65.0.3; ens1 (10.65.0.2/24)")
    assert "PRIMARY_ADDR 10.65.0.1" in reason


def test_cluster_interface_prefers_the_holder_then_up(tmp_path: Path) -> None:
    (
        HostBuilder(tmp_path)
        .interface("ens1", addresses=["10.65.0.2/24"], operstate="down")
        .interface("ens2", addresses=["10.65.0.3/24"])
        .interface("ens3", addresses=["10.65.0.4/24"])
    )
    net = NetworkInterfaces.detect(root=tmp_path)
    chosen, reason = net.choose_cluster_interface(Addressing(primary_addr="10.65.0.9"))
    assert chosen is not None and chosen.name == "ens2"
    assert reason.endswith("(also on that subnet: ens3, ens1)")
    chosen, reason = net.choose_cluster_interface(Addressing(primary_addr="10.65.0.2"))
    assert chosen is not None and chosen.name == "ens1"
    assert "ens1 (10.65.0.2/24) holds MASTER_ADDR 10.65.0.2, but ens1 is down" in reason


def test_cluster_interface_ipv6(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback().interface("ens1", addresses=["fd00::2/64"])
    net = NetworkInterfaces.detect(root=tmp_path)
    chosen, _ = net.choose_cluster_interface(Addressing(primary_addr="fd00::1"))
    assert chosen is not None and chosen.name == "ens1"
    chosen, reason = net.choose_cluster_interface(
        Addressing(primary_addr="fd00::1", node_addr="fd00::2", source="runpod")
    )
    assert chosen is not None and reason == "ens1 holds NODE_ADDR fd00::2"


def test_cluster_interface_local_single_node_is_loopback(tmp_path: Path) -> None:
    net = NetworkInterfaces.detect(root=runpod_node(tmp_path).root)
    config = ClusterConfig.from_env({}, root=tmp_path)
    assert config.source == "local" and not config.is_multi_node
    chosen, reason = net.choose_cluster_interface(config)
    assert chosen is not None and chosen.is_loopback
    assert "holds the local rendezvous address 127.0.0.1" in reason


def test_cluster_interface_never_loopback_on_multi_node(tmp_path: Path) -> None:
    net = NetworkInterfaces.detect(root=runpod_node(tmp_path).root)
    chosen, reason = net.choose_cluster_interface(
        Addressing(primary_addr="127.0.0.1", node_addr="127.0.0.1", source="runpod",
                   primary_variable="PRIMARY_ADDR")
    )
    assert chosen is None
    assert "NODE_ADDR 127.0.0.1 is on loopback" in reason
    assert "no non-loopback interface is on the subnet of PRIMARY_ADDR 127.0.0.1" in reason


def test_no_cluster_interface_names_what_is_there(tmp_path: Path) -> None:
    net = NetworkInterfaces.detect(root=runpod_node(tmp_path).root)
    chosen, reason = net.choose_cluster_interface(Addressing(primary_addr="10.66.0.1"))
    assert chosen is None
    assert "no non-loopback interface is on the subnet of MASTER_ADDR 10.66.0.1" in reason
    assert "eth0 172.20.0.5/16" in reason and "ens1 10.65.0.2/24, fe80::1/64" in reason


def test_cluster_interface_host_name_primary(tmp_path: Path) -> None:
    net = NetworkInterfaces.detect(root=runpod_node(tmp_path).root)
    chosen, reason = net.choose_cluster_interface(Addressing(primary_addr="node-0"))
    assert chosen is None
    assert "MASTER_ADDR 'node-0' is a host name" in reason


# -- routes -------------------------------------------------------------------------------------

# Written the way the kernel prints it on a little-endian host (x86, arm64).
ROUTE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010014AC\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t000014AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
ens1\t0000410A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
ens2\t8000410A\t00000000\t0001\t0\t0\t100\t80FFFFFF\t0\t0\t0
ens3\t8000410A\t00000000\t0001\t0\t0\t50\t80FFFFFF\t0\t0\t0
ens4\t0000420A\t00000000\t0201\t0\t0\t0\t00FFFFFF\t0\t0\t0
ens5\t0000430A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0
garbage line
ens6\tZZZZZZZZ\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""

# From a real host: fd00::/64 and fe80::/64 on eth0, default via fd00::1, local and multicast
# entries, and the kernel's unreachable default on lo.
IPV6_ROUTE = """\
fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth0
00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo
fd000000000000000000000000000002 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000003 00000000 80200001     eth0
fd010000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     ens1
ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000003 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
"""  # noqa: E501


def test_parse_route_table() -> None:
    routes = _parse_route(ROUTE)
    assert [str(r.network) for r in routes[:3]] == ["0.0.0.0/0", "172.20.0.0/16", "10.65.0.0/24"]
    assert routes[0].interface == "eth0" and len(routes) == 7  # the two bad lines are skipped


def test_route_interface(tmp_path: Path) -> None:
    HostBuilder(tmp_path).file("proc/net/route", ROUTE).file("proc/net/ipv6_route", IPV6_ROUTE)
    assert route_interface("10.65.0.1", root=tmp_path) == "ens1"
    assert route_interface("10.65.0.200", root=tmp_path) == "ens3"  # /25 beats /24; metric 50
    assert route_interface("172.20.9.9", root=tmp_path) == "eth0"
    assert route_interface("8.8.8.8", root=tmp_path) == "eth0"  # the default route
    assert route_interface("10.66.0.1", root=tmp_path) is None  # an unreachable (reject) route
    assert route_interface("10.67.0.1", root=tmp_path) == "eth0"  # a route that is not up
    assert route_interface("127.0.0.1", root=tmp_path) == "lo"
    assert route_interface("fd00::9", root=tmp_path) == "eth0"
    assert route_interface("fd00::2", root=tmp_path) == "eth0"  # local entries are skipped
    assert route_interface("fd01::7", root=tmp_path) == "ens1"
    assert route_interface("2001:db8::1", root=tmp_path) == "eth0"
    assert route_interface("::ffff:10.65.0.1", root=tmp_path) == "ens1"
    with pytest.raises(ValueError, match="not an IP address"):
        route_interface("primary", root=tmp_path)


def test_route_interface_without_tables(tmp_path: Path) -> None:
    HostBuilder(tmp_path)
    assert route_interface("10.65.0.1", root=tmp_path) is None
    assert route_interface("fd00::1", root=tmp_path) is None


def test_parse_ipv6_route_unreachable_default() -> None:
    routes = _parse_ipv6_route(IPV6_ROUTE)
    assert len(routes) == 8
    assert any(r.interface == "lo" and r.flags & 0x200 for r in routes)


# -- pure parsers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10000", 10000), ("-1", None), ("4294967295", None), ("0", None), ("fast", None),
     (None, None), ("--5", None), ("", None)],
)
def test_parse_speed(text: str | None, expected: int | None) -> None:
    assert _parse_speed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("AA:bb:cc:dd:ee:ff", "aa:bb:cc:dd:ee:ff"), ("", None), ("aa:bb:c", None), (None, None)],
)
def test_parse_mac(text: str | None, expected: str | None) -> None:
    assert _parse_mac(text) == expected


@pytest.mark.parametrize(
    ("netmask", "version", "expected"),
    [
        ("255.255.255.0", 4, 24),
        ("255.255.0.255", 4, None),
        ("ffff:ffff:ffff:ffff::/64", 6, 64),
        ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", 6, 128),
        ("ffff:ff00::", 6, 24),
        ("24", 4, 24),
        ("255.255.255.0", 6, None),
        (None, 4, None),
    ],
)
def test_prefix_length(netmask: str | None, version: int, expected: int | None) -> None:
    assert _prefix_length(netmask, version) == expected


def test_parse_netifaces_entry() -> None:
    # netifaces.ifaddresses("eth0") on a real host: AF_PACKET 17, AF_INET 2, AF_INET6 10.
    entries = {
        17: [{"addr": "02:fc:00:00:00:01", "broadcast": "ff:ff:ff:ff:ff:ff"}],
        2: [{"addr": "192.0.2.2", "netmask": "255.255.255.0", "broadcast": "192.0.2.255"}],
        10: [
            {"addr": "fd00::2", "netmask": "ffff:ffff:ffff:ffff::/64"},
            {"addr": "fe80::fc:ff:fe00:1%eth0", "netmask": "ffff:ffff:ffff:ffff::/64"},
            {"addr": 7},
        ],
    }
    assert _parse_netifaces(entries) == ["192.0.2.2/24", "fd00::2/64", "fe80::fc:ff:fe00:1/64"]
    assert _parse_netifaces({2: [{"addr": "10.0.0.1"}]}) == ["10.0.0.1/32"]


def test_parse_address() -> None:
    assert parse_address("fe80::1%eth0/64") == ipaddress.IPv6Interface("fe80::1/64")
    assert parse_address("10.0.0.1/33") is None and parse_address(["x"]) is None


# -- garbled sysfs never crashes detection -------------------------------------------------------

_ATTRIBUTES = ("operstate", "mtu", "speed", "address", "type", "flags", "bonding/slaves")
_garbage = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=40).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b"-1", b"4294967295", b"0x", b"99999999999999999999999", b"up\n\n"]),
)


@settings(max_examples=60, deadline=None)
@given(
    files=st.dictionaries(st.sampled_from(_ATTRIBUTES), _garbage, max_size=len(_ATTRIBUTES)),
    master=st.one_of(st.none(), st.sampled_from(["file", "dir", "dangling", "link"])),
    addresses=st.lists(st.one_of(st.text(max_size=20), st.integers(), st.none()), max_size=4),
)
def test_garbled_sysfs_never_crashes(
    tmp_path_factory: pytest.TempPathFactory,
    files: dict[str, bytes],
    master: str | None,
    addresses: list[object],
) -> None:
    root = tmp_path_factory.mktemp("garbled")
    base = root / "sys/class/net/ens1"
    base.mkdir(parents=True)
    for name, data in files.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_bytes(data)
    if master == "file":
        (base / "master").write_bytes(b"\xff")
    elif master == "dir":
        (base / "master").mkdir()
    elif master == "dangling":
        os.symlink("../../nowhere/bond9", base / "master")
    elif master == "link":
        os.symlink("..", base / "master")
    (root / "sys/class/net/device").write_bytes(b"not an interface")
    (root / ".clusterenv").mkdir()
    host = {"format": 1, "addresses": {"ens1": addresses, "ens2": "x", "": ["10.0.0.1/8"]}}
    (root / ".clusterenv/host.json").write_text(json.dumps(host))

    net = NetworkInterfaces.detect(root=root)

    ens1 = net.get("ens1")
    assert ens1 is not None
    assert ens1.mtu is None or isinstance(ens1.mtu, int)
    assert ens1.speed_mbps is None or ens1.speed_mbps > 0
    assert isinstance(ens1.operstate, str) and isinstance(ens1.is_up, bool)
    assert ens1.master in (None, "bond9")  # a link to ".." names no interface
    assert all(isinstance(a, ipaddress.IPv4Interface) for a in ens1.ipv4)
    json.dumps(net.to_dict())


def test_garbled_addresses_in_host_json(tmp_path: Path) -> None:
    (tmp_path / ".clusterenv").mkdir()
    (tmp_path / ".clusterenv/host.json").write_text(json.dumps({"addresses": ["lo"]}))
    assert NetworkInterfaces.detect(root=tmp_path).interfaces == ()


# -- the live host --------------------------------------------------------------------------


def test_live_host_lists_every_sysfs_interface() -> None:
    net = NetworkInterfaces.detect()
    in_sysfs = {n for n in os.listdir("/sys/class/net") if os.path.isdir(f"/sys/class/net/{n}")}
    assert in_sysfs <= set(net.names)
    lo = net.get("lo")
    assert lo is not None and lo.is_loopback
    assert ipaddress.IPv4Interface("127.0.0.1/8") in lo.ipv4


_RUNPOD = {"NODE_ADDR": "10.65.0.3", "NODE_RANK": "1", "NUM_NODES": "2", "NUM_TRAINERS": "8",
           "PRIMARY_PORT": "29500"}


@pytest.mark.parametrize(("environ", "expected"), [
    ({**_RUNPOD, "PRIMARY_ADDR": "10.65.0.2", "MASTER_ADDR": "10.65.0.2"}, "PRIMARY_ADDR"),
    ({**_RUNPOD, "MASTER_ADDR": "10.65.0.2", "CLUSTERENV_SOURCE": "runpod"}, "MASTER_ADDR"),
    ({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1", "NUM_NODES": "2", "NODE_RANK": "0",
      "NUM_TRAINERS": "1"}, "MASTER_ADDR"),
    ({"SM_MASTER_ADDR": "algo-1", "SM_MASTER_PORT": "7777", "SM_HOSTS": '["algo-1","algo-2"]',
      "SM_CURRENT_HOST": "algo-2", "SM_CURRENT_HOST_RANK": "1", "SM_NUM_GPUS": "8"},
     "SM_MASTER_ADDR"),
    ({}, "MASTER_ADDR"),  # the local default reads no variable
])
def test_the_reader_says_which_variable_held_the_rendezvous_address(
    environ: dict[str, str], expected: str
) -> None:
    # The interface choice, the plan and doctor all name the variable the source really read.
    from clusterenv import ClusterConfig
    from clusterenv._facts import Facts
    from clusterenv._root import Root
    from clusterenv.nccl.interface import primary_variable

    config = ClusterConfig.from_env(environ)
    assert config.primary_variable == expected
    assert primary_variable(Facts(environ=environ, root=Root("/"))) == expected
