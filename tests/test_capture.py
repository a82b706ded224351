"""Host snapshots: what capture writes, what it leaves out, and that a snapshot replays."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import operator
import os
import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterenv._root import HOST_JSON, Root
from clusterenv._scrub import Scrubber, cluster_environ, is_secret_name
from clusterenv.capture import CaptureError, capture
from clusterenv.cli import main
from clusterenv.host import HostFacts
from clusterenv.network import NetworkInterfaces, route_interface
from clusterenv.testing import ARPHRD_INFINIBAND, HostBuilder, gid, port

SECRET_VALUE = "s3cr3t-value-never-written"
IB_MAC = "00:00:10:29:fe:80:00:00:00:00:00:00:a0:88:c2:03:00:63:5a:20"


def rich_host(root: Path) -> HostBuilder:
    """A RoCE + IPoIB node with a bond, a bridge, GPUs, NCCL config and a mixed environment."""
    builder = (
        HostBuilder(root)
        .loopback()
        .interface("eth0", addresses=["172.20.0.5/16"], mac="0c:42:a1:11:22:33", speed=10000)
        .interface(
            "ens1",
            addresses=["10.65.0.2/24", "fd00::2/64", "fe80::e42:a1ff:fe44:5566/64"],
            mac="0c:42:a1:44:55:66",
            mtu=9000,
            speed=400000,
        )
        .interface("ens12f0np0", mac="b8:3f:d2:00:00:01")
        .interface("ens20f0np0", mac="b8:3f:d2:00:00:01")
        .interface(
            "bond0",
            kind="bond",
            physical=False,
            slaves=["ens12f0np0", "ens20f0np0"],
            mac="b8:3f:d2:00:00:01",
            addresses=["10.82.101.193/29"],
        )
        .interface("docker0", kind="bridge", physical=False, operstate="down",
                   bridge_ports=["veth1"], addresses=["172.17.0.1/16"], mac="02:42:ac:11:00:01")
        .interface("veth1", physical=False, speed=10000, mac="9e:11:22:33:44:55")
        .interface("ibp26s0", arphrd=ARPHRD_INFINIBAND, mac=IB_MAC, mtu=4092, operstate="down")
        .rdma_device(
            "mlx5_0",
            port(
                link_layer="Ethernet",
                netdev="ens1",
                gids=[
                    gid(0, "fe80::e42:a1ff:fe44:5566", "IB/RoCE v1", "ens1"),
                    gid(1, "fe80::e42:a1ff:fe44:5566", "RoCE v2", "ens1"),
                    gid(2, "::ffff:10.65.0.2", "IB/RoCE v1", "ens1"),
                    gid(3, "::ffff:10.65.0.2", "RoCE v2", "ens1"),
                    gid(4, "fd00::2", "RoCE v2", "ens1"),
                ],
            ),
        )
        .rdma_device(
            "mlx5_1",
            port(gids=[gid(0, "fe80::a088:c203:63:5a20", "IB/RoCE v1")], netdev="ibp26s0"),
            dev_node=False,
        )
        .gpus(2)
        .gpudirect()
        .file("sys/class/infiniband/mlx5_0/node_guid", "0c42:a103:0063:5a20")
        .file("sys/class/infiniband/mlx5_0/sys_image_guid", "0c42:a103:0063:5a20")
        .file("etc/nccl.conf", f"NCCL_DEBUG=WARN\nNCCL_SECRET_KEY={SECRET_VALUE}\n# comment")
        .file("home/ml/.nccl.conf", "NCCL_SOCKET_IFNAME=ens1")
        .file("opt/conf/nccl.conf", "NCCL_IB_HCA=mlx5_0")
        .file("proc/net/route", ROUTE)
        .file("etc/hosts", "127.0.0.1 localhost\n10.65.0.2 node-0\n")
        .hostname("node-0")
        .memlock(None, None)
        .cap_ipc_lock(True)
        .shm(68719476736)
        .environ(
            {
                "PRIMARY_ADDR": "10.65.0.2",
                "NODE_RANK": "0",
                "NCCL_SOCKET_IFNAME": "=ens1",
                "NCCL_CONF_FILE": "/opt/conf/nccl.conf",
                "CLUSTERENV_PREFLIGHT_TOKEN": SECRET_VALUE,
                "NCCL_IB_SECRET_KEY": SECRET_VALUE,
                "HF_TOKEN": SECRET_VALUE,
                "AWS_ACCESS_KEY_ID": SECRET_VALUE,
                "HOME": "/home/ml",
                "PATH": "/usr/bin",
                "NODE_OPTIONS": "--max-old-space-size=4096",
            }
        )
    )
    (root / "sys/class/infiniband/mlx5_0/ports/1/gids/5").write_text(
        "fe80:0000:0000:0000:0000:0000:0000:0000\n"
    )
    return builder


ROUTE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010014AC\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t000014AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
ens1\t0000410A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""


def all_text(root: Path) -> str:
    """Every file of a snapshot, concatenated."""
    return "\n".join(
        p.read_text(errors="replace") for p in sorted(root.rglob("*")) if p.is_file()
    )


def tree(root: Path) -> dict[str, str]:
    """Relative path -> content ('<dir>' / '-> target' for directories and links)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "<dir>"
        else:
            out[rel] = path.read_text(errors="replace")
    return out


def without_macs(net: NetworkInterfaces) -> list[object]:
    return [dataclasses.replace(i, mac=None) for i in net]


@pytest.fixture
def captured(tmp_path: Path) -> tuple[Path, Path]:
    source = rich_host(tmp_path / "source").root
    return source, capture(tmp_path / "snapshot", root=source)


def host_json(root: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((root / HOST_JSON).read_text())
    return data


# -- what is written -----------------------------------------------------------------------------


def test_host_json_format(captured: tuple[Path, Path]) -> None:
    _, snapshot = captured
    data = host_json(snapshot)
    assert data["format"] == 1
    assert data["hostname"] == "node-0"
    assert data["memlock"] == {"soft": None, "hard": None}
    assert data["cap_ipc_lock"] is True and data["shm_bytes"] == 68719476736
    addresses = data["addresses"]
    assert isinstance(addresses, dict)
    assert addresses["ens1"][:2] == ["10.65.0.2/24", "fd00::2/64"]
    assert Root(snapshot).recorded_environ() is not None  # it loads


def test_secrets_are_never_written(captured: tuple[Path, Path]) -> None:
    _, snapshot = captured
    assert SECRET_VALUE not in all_text(snapshot)
    environ = host_json(snapshot)["environ"]
    assert environ == {
        "HOME": "/home/ml",  # because ~/.nccl.conf was captured
        "NCCL_CONF_FILE": "/opt/conf/nccl.conf",
        "NCCL_SOCKET_IFNAME": "=ens1",
        "NODE_RANK": "0",
        "PRIMARY_ADDR": "10.65.0.2",
    }
    assert (snapshot / "etc/nccl.conf").read_text() == "NCCL_DEBUG=WARN\n"  # comments go too


def test_nccl_config_files_are_copied(captured: tuple[Path, Path]) -> None:
    _, snapshot = captured
    assert (snapshot / "home/ml/.nccl.conf").read_text() == "NCCL_SOCKET_IFNAME=ens1\n"
    assert (snapshot / "opt/conf/nccl.conf").read_text() == "NCCL_IB_HCA=mlx5_0\n"


def test_macs_are_scrubbed_consistently(captured: tuple[Path, Path]) -> None:
    _, snapshot = captured
    text = all_text(snapshot)
    for mac in ("0c:42:a1:11:22:33", "0c:42:a1:44:55:66", "b8:3f:d2:00:00:01", "9e:11:22:33:44:55",
                "a0:88:c2:03:00:63:5a:20"):
        assert mac not in text
    net = NetworkInterfaces.detect(root=snapshot)
    bond_macs = {net.get(n).mac for n in ("bond0", "ens12f0np0", "ens20f0np0")}  # type: ignore[union-attr]
    assert len(bond_macs) == 1  # a bond and its slaves share one address, scrubbed or not
    assert net.get("lo").mac == "00:00:00:00:00:00"  # type: ignore[union-attr]
    macs = [i.mac for i in net if not i.is_loopback]
    assert all(m is not None and m.startswith("02:00:00:00:") for m in macs if len(m or "") == 17)
    ib = net.get("ibp26s0")
    assert ib is not None and ib.mac is not None
    # IPoIB keeps its flags and subnet prefix; only the port GUID half changes.
    assert ib.mac.startswith("00:00:10:29:fe:80:00:00:00:00:00:00:") and ib.mac != IB_MAC


def test_link_local_addresses_follow_the_scrubbed_mac(captured: tuple[Path, Path]) -> None:
    _, snapshot = captured
    ens1 = NetworkInterfaces.detect(root=snapshot).get("ens1")
    assert ens1 is not None and ens1.mac is not None
    mac = bytes.fromhex(ens1.mac.replace(":", ""))
    eui64 = bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:]
    expected = ipaddress.IPv6Interface((ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + eui64), 64))
    assert ens1.ipv6 == (ipaddress.IPv6Interface("fd00::2/64"), expected)


def test_guids_and_gids_are_scrubbed_but_ipv4_mapped_kept(captured: tuple[Path, Path]) -> None:
    source, snapshot = captured
    device = snapshot / "sys/class/infiniband/mlx5_0"
    assert (device / "node_guid").read_text().strip() != "0c42:a103:0063:5a20"
    assert (device / "node_guid").read_text() == (device / "sys_image_guid").read_text()
    gids = device / "ports/1/gids"
    source_gids = source / "sys/class/infiniband/mlx5_0/ports/1/gids"
    assert (gids / "2").read_text() == (source_gids / "2").read_text()
    assert (gids / "3").read_text().strip() == "0000:0000:0000:0000:0000:ffff:0a41:0002"
    assert (gids / "4").read_text().strip() == ipaddress.IPv6Address("fd00::2").exploded
    assert (gids / "5").read_text().strip() == "fe80:0000:0000:0000:0000:0000:0000:0000"
    link_local = ipaddress.IPv6Address((gids / "0").read_text().strip())
    ens1 = NetworkInterfaces.detect(root=snapshot).get("ens1")
    assert ens1 is not None and link_local == ens1.ipv6[1].ip  # still the netdev's own address
    assert "a088:c203:0063:5a20" not in all_text(snapshot)
    assert (gids / "15").read_text().strip() == "0000:0000:0000:0000:0000:0000:0000:0000"
    assert not (device / "ports/1/gid_attrs/types/15").exists()  # empty slots stay attribute-less
    assert (device / "ports/1/gid_attrs/types/3").read_text() == "RoCE v2\n"
    assert (device / "ports/1/gid_attrs/ndevs/3").read_text() == "ens1\n"


def test_rdma_and_gpu_files(captured: tuple[Path, Path]) -> None:
    source, snapshot = captured
    for rel in ("state", "phys_state", "rate", "link_layer", "lid"):
        path = f"sys/class/infiniband/mlx5_0/ports/1/{rel}"
        assert (snapshot / path).read_text() == (source / path).read_text()
    assert (snapshot / "sys/class/infiniband/mlx5_0/device/net/ens1").is_dir()
    assert (snapshot / "sys/class/infiniband_verbs/uverbs0/ibdev").read_text() == "mlx5_0\n"
    assert (snapshot / "sys/class/infiniband_verbs/uverbs1/ibdev").read_text() == "mlx5_1\n"
    assert sorted(os.listdir(snapshot / "dev/infiniband")) == ["uverbs0"]
    assert (snapshot / "dev/infiniband/uverbs0").stat().st_size == 0
    assert (snapshot / "sys/module/nvidia_peermem/version").is_file()
    assert (snapshot / "proc/driver/nvidia/version").read_text() == (
        source / "proc/driver/nvidia/version"
    ).read_text()
    infos = sorted((snapshot / "proc/driver/nvidia/gpus").glob("*/information"))
    assert len(infos) == 2
    assert "GPU UUID: \t GPU-00000000-0000-0000-0000-000000000000" in infos[0].read_text()


def test_sysfs_net_layout(captured: tuple[Path, Path]) -> None:
    _, snapshot = captured
    net = snapshot / "sys/class/net"
    assert (net / "ens1/device").is_dir() and not (net / "bond0/device").exists()
    assert (net / "docker0/bridge").is_dir() and (net / "docker0/brif/veth1").is_dir()
    assert (net / "bond0/bonding/slaves").read_text() == "ens12f0np0 ens20f0np0\n"
    assert os.readlink(net / "ens12f0np0/master") == "../bond0"
    assert (net / "ens1/speed").read_text() == "400000\n"
    assert not (net / "docker0/speed").exists()  # no speed in the source: none is made up
    assert (snapshot / "etc/hosts").read_text().endswith("10.65.0.2 node-0\n")


# -- replay ----------------------------------------------------------------------------------------


def test_snapshot_replays_network(captured: tuple[Path, Path]) -> None:
    source, snapshot = captured
    before, after = NetworkInterfaces.detect(root=source), NetworkInterfaces.detect(root=snapshot)
    assert after.names == before.names
    # Equal in everything but hardware addresses (and the EUI-64 link-local derived from one).
    for old, new in zip(before, after, strict=True):
        assert dataclasses.replace(new, mac=None, ipv6=()) == dataclasses.replace(
            old, mac=None, ipv6=()
        )
        assert [a for a in new.ipv6 if not a.ip.is_link_local] == [
            a for a in old.ipv6 if not a.ip.is_link_local
        ]


def test_snapshot_replays_routes(captured: tuple[Path, Path]) -> None:
    source, snapshot = captured
    for ip in ("10.65.0.1", "172.20.3.4", "8.8.8.8"):
        assert route_interface(ip, root=snapshot) == route_interface(ip, root=source)
    assert route_interface("10.65.0.1", root=snapshot) == "ens1"


def test_capture_is_deterministic(tmp_path: Path) -> None:
    source = rich_host(tmp_path / "source").root
    first = tree(capture(tmp_path / "one", root=source))
    second = tree(capture(tmp_path / "two", root=source))
    assert first == second


def test_recapture_of_a_snapshot_is_stable(captured: tuple[Path, Path], tmp_path: Path) -> None:
    _, snapshot = captured
    again = capture(tmp_path / "again", root=snapshot)
    assert tree(again) == tree(snapshot)  # scrubbing placeholders is a fixed point


def test_live_capture_replays_live_detect(tmp_path: Path) -> None:
    snapshot = capture(tmp_path / "live", environ={"NCCL_DEBUG": "INFO", "HF_TOKEN": "x"})
    live = NetworkInterfaces.detect()
    replay = NetworkInterfaces.detect(root=snapshot)
    assert replay.names == live.names
    for old, new in zip(live, replay, strict=True):
        assert dataclasses.replace(new, mac=None, ipv6=()) == dataclasses.replace(
            old, mac=None, ipv6=()
        )
    for ip in ("8.8.8.8", "10.1.2.3", "127.0.0.1"):
        assert route_interface(ip, root=snapshot) == route_interface(ip)
    data = host_json(snapshot)
    assert data["environ"] == {"NCCL_DEBUG": "INFO"}
    assert (snapshot / "proc/net/route").is_file()
    # The process facts replay as HostFacts reads them live: limits, capability, shm, name.
    fields = ("memlock_known", "memlock_soft", "memlock_hard", "cap_ipc_lock", "shm_bytes",
              "hostname")
    live_facts, replayed = HostFacts.detect(environ={}), HostFacts.detect(environ={}, root=snapshot)
    assert [getattr(replayed, f) for f in fields] == [getattr(live_facts, f) for f in fields]
    assert replayed.memlock_known and isinstance(replayed.hostname, str)


# -- destinations ----------------------------------------------------------------------------------


def test_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    source = rich_host(tmp_path / "source").root
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    expected = r"refusing to write a snapshot into .*busy.*not a snapshot"
    with pytest.raises(CaptureError, match=expected) as info:
        capture(busy, root=source)
    assert info.value.path == str(busy)
    assert sorted(os.listdir(busy)) == ["notes.txt"]
    assert sorted(os.listdir(tmp_path)) == ["busy", "source"]  # no staging directory left behind


def test_refuses_a_file_and_the_root_itself(tmp_path: Path) -> None:
    source = rich_host(tmp_path / "source").root
    (tmp_path / "file").write_text("x")
    with pytest.raises(CaptureError, match="is a file"):
        capture(tmp_path / "file", root=source)
    with pytest.raises(CaptureError, match="is the root being captured"):
        capture(source, root=source)


def test_empty_directory_and_existing_snapshot_are_fine(tmp_path: Path) -> None:
    source = rich_host(tmp_path / "source").root
    empty = tmp_path / "empty"
    empty.mkdir()
    assert capture(empty, root=source) == empty and (empty / HOST_JSON).is_file()
    (empty / "sys/class/net/stale0").mkdir(parents=True)
    capture(empty, root=source)
    assert not (empty / "sys/class/net/stale0").exists()  # an earlier snapshot is replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "source"]


def test_capture_error_pickles() -> None:
    error = CaptureError("refusing to write into '/x'", path="/x")
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, CaptureError) and isinstance(again, OSError)
    assert str(again) == str(error) and again.path == "/x"


def test_paths_that_leave_the_snapshot_are_not_followed(tmp_path: Path) -> None:
    source = HostBuilder(tmp_path / "source").file("etc/nccl.conf", "NCCL_DEBUG=WARN").root
    (tmp_path / "outside.conf").write_text("NCCL_DEBUG=INFO")
    snapshot = capture(
        tmp_path / "snap", root=source, environ={"NCCL_CONF_FILE": "/../outside.conf"}
    )
    assert not (tmp_path / "snap" / "outside.conf").exists()
    assert "NCCL_DEBUG=INFO" not in all_text(snapshot)


# -- the environment allowlist ---------------------------------------------------------------------


def test_cluster_environ() -> None:
    environ = {
        "PRIMARY_ADDR": "10.65.0.2",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "0",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_PKEY": "0x8001",  # a partition key (not a secret): compared across nodes
        "TORCHELASTIC_RUN_ID": "abc",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCH_HOME": "/cache",
        "OMPI_MCA_btl_tcp_if_include": "ens1",
        "CLUSTERENV_PREFLIGHT_TOKEN": "x",
        "GLOO_SOCKET_IFNAME": "ens1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NODE_EXTRA_CA_CERTS": "/etc/ssl/x.pem",
        "WANDB_API_KEY": "x",
        "PATH": "/bin",
        "HOME": "/root",
    }
    assert cluster_environ(environ) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GLOO_SOCKET_IFNAME": "ens1",
        "LOCAL_RANK": "0",
        "MASTER_PORT": "29500",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_PKEY": "0x8001",
        "OMPI_MCA_btl_tcp_if_include": "ens1",
        "PRIMARY_ADDR": "10.65.0.2",
        "TORCHELASTIC_RUN_ID": "abc",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "WORLD_SIZE": "16",
    }


_names = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789abc", min_size=1, max_size=30)


@given(
    environ=st.dictionaries(
        st.one_of(
            _names,
            st.builds(operator.add, st.sampled_from(["NCCL_", "PRIMARY_", "CLUSTERENV_"]), _names),
            st.builds(operator.add, _names, st.sampled_from(["TOKEN", "_KEY", "Secret", "PASSWD"])),
        ),
        st.text(max_size=10),
        max_size=20,
    )
)
def test_cluster_environ_never_keeps_secrets(environ: dict[str, str]) -> None:
    kept = cluster_environ(environ)
    assert kept.items() <= environ.items()
    markers = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
    assert not any(marker in name.upper() for name in kept for marker in markers)
    assert not any("KEY" in name.upper().split("_") for name in kept)
    assert not any(is_secret_name(name) for name in kept)


def test_scrubber_is_consistent() -> None:
    scrub = Scrubber()
    first = scrub.hardware_address("0C:42:A1:44:55:66")
    assert first == "02:00:00:00:00:01"
    assert scrub.hardware_address("0c:42:a1:44:55:66") == first
    assert scrub.hardware_address("ff:ff:ff:ff:ff:ff") == "ff:ff:ff:ff:ff:ff"
    assert scrub.hardware_address("nonsense") == ""
    assert scrub.guid("a088:c203:0063:5a20") == "0000:0000:0000:0001"
    assert scrub.guid("garbage") == "0000:0000:0000:0000"
    eui64 = scrub.gid("fe80::e42:a1ff:fe44:5566")
    assert eui64 == "fe80:0000:0000:0000:0000:00ff:fe00:0001"  # built from 02:00:00:00:00:01
    assert scrub.gid("not a gid") == "0000:0000:0000:0000:0000:0000:0000:0000"


# -- the CLI ---------------------------------------------------------------------------------------


def test_cli_capture_from_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = rich_host(tmp_path / "source").root
    assert main(["capture", str(tmp_path / "snap"), "--root", str(source)]) == 0
    out = capsys.readouterr().out
    assert f"wrote host snapshot to {(tmp_path / 'snap').resolve()}" in out
    assert "9 interfaces (bond0, docker0, ens1," in out and "2 RDMA devices, 2 GPUs" in out
    assert "left out as secrets: CLUSTERENV_PREFLIGHT_TOKEN, NCCL_IB_SECRET_KEY" in out
    assert SECRET_VALUE not in out


def test_cli_capture_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = rich_host(tmp_path / "source").root
    assert main(["capture", str(tmp_path / "snap"), "--root", str(source), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rdma_devices"] == ["mlx5_0", "mlx5_1"] and data["gpus"] == 2
    assert "ens1" in data["interfaces"] and "PRIMARY_ADDR" in data["environ"]
    assert data["withheld_secrets"] == ["CLUSTERENV_PREFLIGHT_TOKEN", "NCCL_IB_SECRET_KEY"]


def test_cli_capture_refusal_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy/x").write_text("x")
    assert main(["capture", str(tmp_path / "busy"), "--root", str(tmp_path / "busy")]) == 2
    assert "clusterenv capture:" in capsys.readouterr().err
