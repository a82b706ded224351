"""`clusterenv.nccl_log` and `clusterenv nccl-log`: reading what NCCL actually did.

The logs under tests/data/nccl_logs/real/ are copies of the real captures in
../shared/fixtures-real/ (first line `# source:` says where each comes from); the others in
tests/data/nccl_logs/ are derived from them by tests/data/nccl_logs/derive_variants.py, one change
each (another interface, a socket fallback, a second node, GPUDirect off, launcher prefixes).
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterenv.cli import main
from clusterenv.errors import DiscoveryError
from clusterenv.findings import Finding
from clusterenv.nccl_log import (
    CODES,
    NcclLog,
    interface_concern,
    nccl_log_findings,
    parse_nccl_log,
    read_nccl_log,
)

LOGS = Path(__file__).parent / "data" / "nccl_logs"
REAL = LOGS / "real"
SHARED_FIXTURES = Path(__file__).parents[2] / "shared" / "fixtures-real"
ROCE = REAL / "nccl-info-h100-roce-2.27-ofi-plugin-fallback-ib.txt"
DOCKER = REAL / "nccl-info-docker-bridge-eth0-no-libibverbs-socket.txt"
EFA = REAL / "nccl-info-aws-p5en-h200-efa-ofi.txt"
IBV = REAL / "ibstatus-nccl-log-container-ibv_open_device-failed-bond.txt"
ROCE_LINES = ROCE.read_text(encoding="utf-8").splitlines()


def info(msg: str, host: str = "node1", pid: int = 100, dev: int = 0) -> str:
    return f"{host}:{pid}:{pid} [{dev}] NCCL INFO {msg}"


def warn(msg: str, source: str = "misc/socket.cc:484", host: str = "node1", pid: int = 100) -> str:
    return f"{host}:{pid}:{pid} [0] {source} NCCL WARN {msg}"


def codes(findings: list[Finding]) -> dict[str, str]:
    return {f.code: f.severity for f in findings}


def by_code(findings: list[Finding], code: str) -> Finding:
    matches = [f for f in findings if f.code == code]
    assert len(matches) == 1, findings
    return matches[0]


# -- the real logs and their variants, each with what it must say -----------------------------


# The real RoCE capture is an excerpt (lines 41-330 of a script's output): its processes print
# ncclCommInitRank's "Init START" and the excerpt ends before "Init COMPLETE", as do the
# variants derived from it; that is a note, not a warning (none finished).
EXCERPT = {"log-init-unfinished": "info"}


@dataclass(frozen=True)
class Expected:
    transports: tuple[str, ...]
    bootstrap: set[tuple[str, str]]  # (interface, address) over all processes
    findings: dict[str, str]  # code -> severity
    version: str | None = None
    processes: int | None = None
    hosts: tuple[str, ...] = ()
    devices: int = 0
    options: dict[str, list[str]] = field(default_factory=dict)


ENP = ("enp25s0np0", "10.99.91.63")
CASES: dict[str, Expected] = {
    "real/nccl-info-h100-roce-2.27-ofi-plugin-fallback-ib.txt": Expected(
        ("IB",), {ENP}, {**EXCERPT, "log-plugin-failed": "warning"}, "2.27.5", 8,
        ("tpgds-aihub0008",), 8
    ),
    # one host, nothing in the log says 172.17.0.2 is the wrong network: a remark only
    "real/nccl-info-docker-bridge-eth0-no-libibverbs-socket.txt": Expected(
        ("Socket",), {("eth0", "172.17.0.2")},
        {"log-bootstrap-management": "info", "log-ibverbs-failure": "warning"},
        None, 5, ("26a46eb2b1d3",),
    ),
    "real/nccl-info-aws-p5en-h200-efa-ofi.txt": Expected(
        ("Libfabric",), set(), {}, None, 2, ("8h200-2", "8h200-3"), 9
    ),
    # one GPU of a VM with no RDMA device: Socket, nothing to say (the job succeeded)
    "real/nccl-info-h200-vm-single-rank-socket-2.28.9.txt": Expected(
        ("Socket",), {("eth0", "192.0.2.2")}, {}, "2.28.9", 1, ("vm",),
    ),
    "real/ibstatus-nccl-log-container-ibv_open_device-failed-bond.txt": Expected(
        ("Socket",), {("bond0", "200.1.93.2")},
        {"log-socket-fallback": "error", "log-ibverbs-failure": "error"}, None, 1,
    ),
    "roce-2.27-socket-fallback.txt": Expected(
        ("Socket",), {ENP},
        {**EXCERPT, "log-socket-fallback": "error", "log-ibverbs-failure": "error",
         "log-plugin-failed": "warning"},
        "2.27.5", 8, ("tpgds-aihub0008",), 0,
    ),
    "roce-2.27-eth0-management.txt": Expected(
        ("IB",), {("eth0", "172.20.0.5")},
        {**EXCERPT, "log-bootstrap-management": "info", "log-plugin-failed": "warning"},
        "2.27.5", 8, ("tpgds-aihub0008",), 8,
    ),
    # a tunnel and a veth (not the 172.16.0.0/12 rule), and connections that failed: the cause
    "docker-bridge-ipv6-veth-timeout.txt": Expected(
        ("Socket",), {("ip6tnl0", "fe80::2c0:ffff:fe00:1%ip6tnl0")},
        {"log-bootstrap-management": "error", "log-connect-timeout": "error",
         "log-ibverbs-failure": "warning", "log-nccl-error": "error"},
        None, 5, ("26a46eb2b1d3",),
    ),
    "roce-2.27-two-nodes-mixed.txt": Expected(
        ("Socket", "IB"), {ENP, ("enp25s0np0", "10.99.91.62")},
        {**EXCERPT, "log-mixed-transport": "error", "log-socket-fallback": "error",
         "log-ibverbs-failure": "error", "log-plugin-failed": "warning"},
        "2.27.5", 16, ("tpgds-aihub0007", "tpgds-aihub0008"), 8,
    ),
    "roce-2.27-gdr-disabled.txt": Expected(
        ("IB",), {ENP}, {**EXCERPT, "log-gdr-disabled": "warning", "log-plugin-failed": "warning"},
        "2.27.5", 8, ("tpgds-aihub0008",), 8,
    ),
    "roce-2.27-launcher-prefixed.txt": Expected(
        ("IB",), {ENP}, {**EXCERPT, "log-plugin-failed": "warning"}, "2.27.5", 8,
        ("tpgds-aihub0008",), 8
    ),
    # NCCL_NET=Socket, no "Using network": the channels say Socket, so GPUDirect is not judged
    "roce-2.27-net-socket-channels.txt": Expected(
        ("Socket",), {ENP},
        {**EXCERPT, "log-socket-fallback": "error", "log-plugin-failed": "warning"},
        "2.27.5", 8, ("tpgds-aihub0008",), 8,
    ),
    "roce-2.27-completion-error-12.txt": Expected(
        ("IB",), {ENP},
        {**EXCERPT, "log-ib-completion-error": "error", "log-nccl-error": "error",
         "log-gdr-disabled": "warning", "log-plugin-failed": "warning"},
        "2.27.5", 8, ("tpgds-aihub0008",), 8,
    ),
    "ib-2.27-gdr-completion-error-5.txt": Expected(
        ("IB",), {ENP},
        {**EXCERPT, "log-ib-completion-error": "error", "log-plugin-failed": "warning"},
        "2.27.5", 8, ("tpgds-aihub0008",), 8,
    ),
    "roce-2.27-cloudwatch-export.txt": Expected(
        ("IB",), {ENP}, {**EXCERPT, "log-plugin-failed": "warning"}, "2.27.5", 8,
        ("tpgds-aihub0008",), 8
    ),
    "roce-2.27-more-decorations.txt": Expected(
        ("IB",), {ENP}, {**EXCERPT, "log-plugin-failed": "warning"}, "2.27.5", 8,
        ("tpgds-aihub0008",), 8
    ),
    "roce-2.27-two-nodes-172-network.txt": Expected(
        ("IB",), {("enp25s0np0", "172.20.91.63"), ("enp25s0np0", "172.20.91.62")},
        {**EXCERPT, "log-bootstrap-management": "info", "log-plugin-failed": "warning"},
        "2.27.5", 16, ("tpgds-aihub0007", "tpgds-aihub0008"), 8,
    ),
    "docker-bridge-eth0-ens1-listed.txt": Expected(
        ("Socket",), {("eth0", "172.17.0.2")},
        {"log-bootstrap-management": "warning", "log-ibverbs-failure": "warning"},
        None, 5, ("26a46eb2b1d3",),
    ),
    "docker-socket-channel-veth.txt": Expected(
        ("Socket",), {("eno1", "10.1.0.2")},
        {"log-socket-channel-unroutable": "error", "log-connect-timeout": "error",
         "log-nccl-error": "error", "log-ibverbs-failure": "warning"},
        None, 5, ("26a46eb2b1d3",),
    ),
    "roce-2.27-mixed-link-layer.txt": Expected(
        ("IB",), {ENP},
        {**EXCERPT, "log-mixed-link-layer": "error", "log-ib-completion-error": "error",
         "log-gdr-disabled": "warning", "log-plugin-failed": "warning"},
        "2.27.5", 8, ("tpgds-aihub0008",), 8,
    ),
    "roce-2.27-retry-cnt-15.txt": Expected(
        ("IB",), {ENP},
        {**EXCERPT, "log-ib-setting-range": "error", "log-plugin-failed": "warning"},
        "2.27.5", 8, ("tpgds-aihub0008",), 8,
    ),
    "efa-p5en-no-efa-device.txt": Expected(
        (), set(), {"log-ofi-no-provider": "error", "log-nccl-error": "error"},
        None, 1, ("8h200-2",),
    ),
}


def test_every_log_in_the_data_directory_has_expectations() -> None:
    present = {str(p.relative_to(LOGS)) for p in LOGS.rglob("*.txt")}
    assert present == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_says_what_nccl_did(name: str) -> None:
    expected = CASES[name]
    log = read_nccl_log(LOGS / name)
    assert log.transports == expected.transports
    assert {(r.bootstrap_interface, r.bootstrap_address) for r in log.ranks
            if r.bootstrap_interface} == expected.bootstrap
    assert log.version == expected.version
    assert len(log.ranks) == expected.processes
    assert log.hosts == expected.hosts  # in order of first appearance
    assert len(log.devices) == expected.devices
    assert codes(nccl_log_findings(log)) == expected.findings
    assert log.lines_read == len((LOGS / name).read_text(encoding="utf-8").splitlines())


def test_variants_are_what_derive_variants_writes() -> None:
    spec = importlib.util.spec_from_file_location("derive_variants", LOGS / "derive_variants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, (source, derive) in module.VARIANTS.items():
        lines = (LOGS / name).read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith(f"# derived from real/{source}")
        assert lines[1:] == derive(module.real_lines(source)), name


def test_real_copies_match_the_shared_fixtures() -> None:
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"{SHARED_FIXTURES} is absent: the copies in {REAL} are the reference")
    wanted = [*sorted(SHARED_FIXTURES.glob("nccl-info-*.txt")), SHARED_FIXTURES / IBV.name]
    for original in wanted:
        copy = REAL / original.name
        assert copy.is_file(), f"copy {original.name} into {REAL}"
        assert copy.read_bytes() == original.read_bytes(), original.name
        assert copy.read_text(encoding="utf-8").startswith("# source:")


def test_roce_2_27_details() -> None:
    log = read_nccl_log(ROCE)
    assert log.cuda_version == "12.9"
    assert [r.rank for r in log.ranks] == list(range(8, 16))
    assert [r.cuda_device for r in log.ranks] == list(range(8))
    assert {r.nranks for r in log.ranks} == {16} and log.nranks == 16
    assert log.multi_node is None  # 16 ranks, one host in this excerpt, no nNodes line
    assert [d.label for d in log.devices][:2] == ["mlx5_0:1/RoCE", "mlx5_1:1/RoCE"]
    assert {d.link_layer for d in log.devices} == {"RoCE"}
    assert log.devices[-1].name == "mlx5_11" and log.devices[-1].index == 7
    oob = log.ranks[0].oob
    assert oob is not None and (oob.interface, oob.address) == ENP
    assert log.env == {
        "NCCL_SOCKET_IFNAME": "enp25s0np0",
        "NCCL_IB_DISABLE": "0",  # printed as "to 0." (integer settings end with a full stop)
        "NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_11",
        "NCCL_CUMEM_ENABLE": "0",
        "NCCL_NET_GDR_LEVEL": "PIX",
        "NCCL_NVLS_ENABLE": "0",
        "NCCL_CROSS_NIC": "1",
    }
    assert log.gpudirect.dmabuf_gpus == tuple(range(8))
    assert log.gpudirect.enabled is None  # no per-HCA verdict or channel line in the excerpt
    (plugin,) = log.plugins
    assert (plugin.name, plugin.library, plugin.version) == ("AWS Libfabric", "libnccl-net.so",
                                                             "1.6.0")
    assert (plugin.provider, plugin.nics, plugin.used, plugin.failed) == ("verbs;ofi_rxm", 58,
                                                                          False, True)
    assert "NET/OFI Invalid type of PCI bus returned 0" in plugin.evidence
    assert all(r.plugin == "AWS Libfabric" for r in log.ranks)
    (trace,) = log.errors
    assert (trace.kind, trace.source, trace.count) == ("error-trace", "plugin/net.cc:118", 8)
    assert log.warnings == ()


def test_plugin_failure_names_plugin_and_fallback() -> None:
    finding = by_code(nccl_log_findings(read_nccl_log(ROCE)), "log-plugin-failed")
    assert "AWS Libfabric" in finding.title and "IB" in finding.title
    assert "version 1.6.0" in finding.evidence[0]
    assert "NCCL_NET_PLUGIN=none" in finding.fix


def test_efa_plugin_used() -> None:
    log = read_nccl_log(EFA)
    (plugin,) = log.plugins
    assert (plugin.provider, plugin.nics, plugin.used, plugin.failed) == ("efa", 16, True, False)
    assert log.multi_node is True and log.transport == "Libfabric"
    assert {d.network for d in log.devices} == {"OFI"}
    assert "0000:a3:00.0" in log.ranks[0].devices


def test_docker_bridge_judgement_sharpens_with_knowledge() -> None:
    log = read_nccl_log(DOCKER)
    heuristic = by_code(nccl_log_findings(log), "log-bootstrap-management")
    assert heuristic.severity == "info"  # one host, no evidence in the log
    assert "172.16.0.0/12" in heuristic.title and "unroutable" in heuristic.title
    assert "NCCL_SOCKET_IFNAME=ens1" in heuristic.fix
    known = nccl_log_findings(log, management_interfaces=["eth0"])
    assert by_code(known, "log-bootstrap-management").severity == "error"
    cluster = nccl_log_findings(log, cluster_interfaces=["ens1"])
    assert "expected ens1" in by_code(cluster, "log-bootstrap-management").title
    trusted = nccl_log_findings(log, cluster_interfaces=["eth0"])
    assert "log-bootstrap-management" not in codes(trusted)
    ibverbs = by_code(nccl_log_findings(log), "log-ibverbs-failure")
    assert "Failed to open libibverbs.so[.1] (x3)" in ibverbs.evidence[0]


def test_eth0_variant_says_nccl_picked_it() -> None:
    log = read_nccl_log(LOGS / "roce-2.27-eth0-management.txt")
    finding = by_code(nccl_log_findings(log, management_interfaces=["eth0"]),
                      "log-bootstrap-management")
    assert finding.severity == "error"
    assert "bootstrap" in finding.title and "NET/IB OOB" in finding.title
    assert any("NCCL picked the interface" in e for e in finding.evidence)


def test_socket_fallback_explains_why_rdma_was_expected() -> None:
    log = read_nccl_log(LOGS / "roce-2.27-socket-fallback.txt")
    finding = by_code(nccl_log_findings(log), "log-socket-fallback")
    text = " | ".join(finding.evidence)
    assert "could not open" in text and "NCCL_IB_HCA=mlx5_0" in text
    assert "Unable to open device mlx5_0 (x8)" in text
    assert "/dev/infiniband" in finding.fix
    assert log.devices == () and all(r.socket_interfaces for r in log.ranks)


def test_ibv_open_device_excerpt_without_prefixes() -> None:
    log = read_nccl_log(IBV)
    (rank,) = log.ranks
    assert rank.host is None and rank.pid is None and rank.label == "unprefixed lines"
    assert log.env == {"NCCL_IB_DISABLE": "0"}
    assert [m.source for m in log.warnings] == ["misc/ibvwrap.cc:212", "transport/net_ib.cc:148"]
    assert [m.kind for m in log.notices] == ["no-device"]


def test_two_nodes_mixed() -> None:
    log = read_nccl_log(LOGS / "roce-2.27-two-nodes-mixed.txt")
    assert [r.rank for r in log.ranks] == list(range(16))
    assert log.multi_node is True and log.transport is None
    finding = by_code(nccl_log_findings(log), "log-mixed-transport")
    assert finding.evidence[0].startswith("Socket: rank 0 (tpgds-aihub0007")
    assert finding.evidence[1].startswith("IB: rank 8 (tpgds-aihub0008")


def test_gdr_disabled_and_enabled() -> None:
    path = LOGS / "roce-2.27-gdr-disabled.txt"
    log = read_nccl_log(path)
    gdr = log.gpudirect
    assert gdr.enabled is False and set(gdr.hcas.values()) == {False} and len(gdr.hcas) == 8
    assert (gdr.net_channels, gdr.gdr_channels) == (8, 0)  # receive side only
    assert log.nnodes == 2 and log.multi_node is True
    finding = by_code(nccl_log_findings(log), "log-gdr-disabled")
    assert "mlx5_0" in finding.title and "nvidia_peermem" in finding.fix
    assert "NCCL_NET_GDR_LEVEL set by environment to PIX" in finding.evidence
    text = path.read_text(encoding="utf-8")
    enabled = text.replace("RDMA Disabled", "RDMA Enabled").replace("[receive] via NET/IB/0",
                                                                    "[receive] via NET/IB/0/GDRDMA")
    enabled = "\n".join(line + "/GDRDMA" if " via NET/IB/" in line and "GDRDMA" not in line
                        else line for line in enabled.splitlines())
    on = parse_nccl_log(enabled.splitlines())
    assert on.gpudirect.enabled is True and on.gpudirect.gdr_channels == 8
    assert "log-gdr-disabled" not in codes(nccl_log_findings(on))


def test_launcher_prefixes_cut_lines_and_mashed_lines_change_nothing() -> None:
    plain = read_nccl_log(ROCE)
    prefixed = read_nccl_log(LOGS / "roce-2.27-launcher-prefixed.txt")
    assert prefixed.lines_read > plain.lines_read  # training output in between
    assert [(r.host, r.pid, r.rank, r.cuda_device, r.bootstrap_interface, r.transport, r.devices)
            for r in prefixed.ranks] == [
        (r.host, r.pid, r.rank, r.cuda_device, r.bootstrap_interface, r.transport, r.devices)
        for r in plain.ranks]
    assert prefixed.env == plain.env and prefixed.plugins == plain.plugins
    assert prefixed.versions == plain.versions and prefixed.devices == plain.devices


def test_mashed_line_of_two_processes() -> None:
    line = (info("Bootstrap : Using [0]ens1:10.0.0.1<0>", "a", 1)
            + info("Bootstrap : Using [0]ens1:10.0.0.2<0>", "b", 2, 1))
    log = parse_nccl_log([line])
    assert [(r.host, r.bootstrap_address) for r in log.ranks] == [("a", "10.0.0.1"),
                                                                  ("b", "10.0.0.2")]
    assert log.lines_matched == 1


# -- formats of NCCL 2.4 to 2.30, one line at a time -----------------------------------------


FORMATS: list[tuple[str, str, Callable[[NcclLog], object], object]] = [
    ("2.4-2.7 ring via NET with GDR",
     info("Ring 00 : 3[3] -> 4[0] [receive] via NET/IB/0/GDRDMA"),
     lambda g: (g.gpudirect.net_channels, g.gpudirect.gdr_channels), (1, 1)),
    ("the send side does not count (NCCL_NET_GDR_READ)",
     info("Channel 00 : 0[1c000] -> 8[1c000] [send] via NET/IB/0"),
     lambda g: (g.gpudirect.net_channels, g.gpudirect.enabled), (0, None)),
    ("2.8-2.18 channel", info("Channel 00 : 0[1c000] -> 8[1c000] [receive] via NET/IB/0"),
     lambda g: (g.gpudirect.net_channels, g.gpudirect.gdr_channels), (1, 0)),
    ("2.19+ channel", info("Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA"),
     lambda g: g.ranks[0].gdr_channels, 1),
    ("PXN proxy rank", info("Channel 02/0 : 9[1] -> 1[1] [receive] via NET/IB/2(0)/GDRDMA"),
     lambda g: g.gpudirect.gdr_channels, 1),
    ("plugin name with a space",
     info("Channel 00/0 : 8[0] -> 0[0] [receive] via NET/AWS Libfabric/0/GDRDMA"),
     lambda g: g.gpudirect.gdr_channels, 1),
    ("P2P channel is not network", info("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"),
     lambda g: g.gpudirect.net_channels, 0),
    ("old bootstrap", info("Bootstrap : Using [0]ib0:192.168.11.1<0>"),
     lambda g: (g.ranks[0].bootstrap_interface, g.ranks[0].bootstrap_address),
     ("ib0", "192.168.11.1")),
    ("2.27 bootstrap", info("Bootstrap: Using enp25s0np0:10.99.91.63<0>"),
     lambda g: g.ranks[0].bootstrap_interface, "enp25s0np0"),
    # 2.32.3, as `clusterenv show` asking NCCL prints them (no "[0]", no space before ":").
    ("2.32 bootstrap", info("Bootstrap: Using eth0:192.0.2.2<0>"),
     lambda g: (g.ranks[0].bootstrap_interface, g.ranks[0].bootstrap_address),
     ("eth0", "192.0.2.2")),
    ("2.32 bootstrap, IPv6 link-local", info("Bootstrap: Using ll0:fe80::5%ll0<0>"),
     lambda g: (g.ranks[0].bootstrap_interface, g.ranks[0].bootstrap_address),
     ("ll0", "fe80::5%ll0")),
    ("interface alias", info("Bootstrap : Using [0]eth0:1:10.0.0.5<0>"),
     lambda g: (g.ranks[0].bootstrap_interface, g.ranks[0].bootstrap_address),
     ("eth0:1", "10.0.0.5")),
    ("IPv6 link-local with scope", info("Bootstrap : Using [0]veth0:fe80::1%veth0<0>"),
     lambda g: g.ranks[0].bootstrap_address, "fe80::1%veth0"),
    ("cut short after the interface", info("Bootstrap : Using [0]eth0:172.1"),
     lambda g: (g.ranks[0].bootstrap_interface, g.ranks[0].bootstrap_address), ("eth0", None)),
    ("old NET/IB spacing", info("NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>"),
     lambda g: (g.ranks[0].devices, str(g.ranks[0].oob)), (("mlx5_0:1/IB",), "ib0:10.0.0.1")),
    ("NET/IB cut short in the device list",
     info("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_"),
     lambda g: g.ranks[0].devices, ("mlx5_0:1/IB", "mlx5_1:1/IB")),
    ("2.27 device detail", info("NET/IB: [11] mlx5_11:uverbs11:1/RoCE provider=Mlx5 "
                                "speed=400000 context=0x5581 pciPath=/sys/devices/pci0000:9a ar=0"),
     lambda g: (g.devices[0].label, g.devices[0].speed_mbps, g.devices[0].index),
     ("mlx5_11:1/RoCE", 400000, 11)),
    ("NET/Socket with two interfaces",
     info("NET/Socket : Using [0]ens1:10.65.0.2<0> [1]ens2:10.66.0.2<0>"),
     lambda g: [str(e) for e in g.ranks[0].socket_interfaces],
     ["ens1:10.65.0.2", "ens2:10.66.0.2"]),
    ("per-HCA GDR verdict", info("NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'"),
     lambda g: g.gpudirect.hcas, {"mlx5_0": True}),
    ("IBext plugin GDR verdict",
     info("NET/IBext_v8 : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'"),
     lambda g: g.gpudirect.hcas, {"mlx5_1": False}),
    ("socket GDR verdict is not RDMA",
     info("NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'"),
     lambda g: g.gpudirect.hcas, {}),
    ("2.4-2.12 distance verdict",
     info("GPU Direct RDMA Disabled for GPU 1c000 / HCA 0 (distance 5 > 2)"),
     lambda g: g.gpudirect.distance_disabled, ("GPU 1c000 / HCA 0 (distance 5 > 2)",)),
    ("old comm line", info("comm 0x7f4c58001200 rank 3 nranks 16 cudaDev 3 busId 3e000 - "
                           "Init COMPLETE"), lambda g: (g.ranks[0].rank, g.nranks), (3, 16)),
    ("2.19+ comm line", info("comm 0x55e5e8d6c970 rank 0 nRanks 16 nNodes 2 localRanks 8 "
                             "localRank 0 MNNVL 0"), lambda g: (g.nnodes, g.multi_node), (2, True)),
    ("single node", info("comm 0x55 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0"),
     lambda g: g.multi_node, False),
    ("ancient version string", info("NCCL version 2.4.8+cudaCUDA_MAJOR.CUDA_MINOR"),
     lambda g: (g.version, g.cuda_version), ("2.4.8", None)),
    ("string setting keeps a full stop", info("NCCL_DEBUG_FILE set by environment to /tmp/x."),
     lambda g: g.env, {"NCCL_DEBUG_FILE": "/tmp/x."}),
    ("negative integer setting", info("NCCL_IB_GID_INDEX set by environment to -1."),
     lambda g: g.env, {"NCCL_IB_GID_INDEX": "-1"}),
    ("2.23+ timestamped WARN",
     "[2024-10-12 08:00:00] node1:42:50 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: "
     "Connect to 10.1.1.2<39753> failed : Software caused connection abort",
     lambda g: [(m.kind, m.source, m.hosts) for m in g.warnings],
     [("connect", "misc/socket.cc:484", ("node1",))]),
    ("NCCL_DEBUG=VERSION and PyTorch's error line",
     "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "NCCLUtils.hpp:317, unhandled system error (run with NCCL_DEBUG=INFO for details), "
     "NCCL version 2.18.1", lambda g: (g.version, [m.kind for m in g.errors]),
     ("2.18.1", ["nccl-error"])),
    ("using network", info("Using network IBext_v8"), lambda g: g.transports, ("IBext_v8",)),
    ("assigned plugin", info("Assigned NET plugin IB to comm"), lambda g: g.transport, "IB"),
    ("no marker, no facts", "node1:1:1 [0] NCCL_DEBUG=INFO python train.py",
     lambda g: (g.lines_matched, g.ranks), (0, ())),
]


@pytest.mark.parametrize(("name", "line", "get", "expected"), FORMATS, ids=[f[0] for f in FORMATS])
def test_line_formats(name: str, line: str, get: Callable[[NcclLog], object],
                      expected: object) -> None:
    assert get(parse_nccl_log([line + "\n"])) == expected


# -- one small log per finding code ----------------------------------------------------------


SOCKET = [info("NET/Socket : Using [0]ens1:10.65.0.2<0>"), info("Using network Socket")]
FINDING_LOGS: dict[str, tuple[list[str], str]] = {
    "log-socket-fallback": (
        [info("NCCL_IB_HCA set to =mlx5_0:1"), info("NET/IB : No device found."), *SOCKET],
        "error"),
    "log-ib-disabled": ([info("NCCL_IB_DISABLE set by environment to 1."), *SOCKET], "info"),
    "log-bootstrap-management": ([info("Bootstrap : Using [0]docker0:172.17.0.1<0>")], "warning"),
    "log-mixed-transport": (
        [info("Using network IB"), info("Using network Socket", host="node2")], "error"),
    "log-mixed-interface": (
        [info("Bootstrap : Using [0]ens1:10.0.0.1<0>"),
         info("Bootstrap : Using [0]eth1:10.0.0.2<0>", host="node2")], "warning"),
    "log-mixed-version": (
        [info("NCCL version 2.21.5+cuda12.4"), info("NCCL version 2.18.1+cuda12.1", host="node2")],
        "error"),
    "log-mixed-env": (
        [info("NCCL_IB_HCA set to mlx5_0"), info("NCCL_IB_HCA set to mlx5_1", host="node2")],
        "warning"),
    "log-gdr-disabled": (
        [info("Using network IB"), info("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'")],
        "warning"),
    "log-ibverbs-failure": ([warn("Call to ibv_open_device failed", "misc/ibvwrap.cc:212")],
                            "error"),
    "log-plugin-failed": (
        [info("NET/Plugin: Plugin name set by env to libnccl-net-ofi.so"),
         info("NET/Plugin: Could not find: libnccl-net-ofi.so."), info("Using network IB")],
        "warning"),
    "log-connect-timeout": (
        [warn("Connect to 10.65.0.3<43429> failed : Connection timed out")], "error"),
    "log-ib-qp-failure": (
        [warn("Call to ibv_modify_qp failed with error Invalid argument", "misc/ibvwrap.cc:106")],
        "error"),
    "log-ib-completion-error": (
        [warn("NET/IB : Got completion from peer 10.1.1.2<46045> with error 12, opcode 0, len 0, "
              "vendor err 129 (Recv)", "transport/net_ib.cc:1323")], "error"),
    "log-ib-setting-range": ([info("NCCL_IB_TIMEOUT set by environment to 40.")], "error"),
    "log-mixed-link-layer": (
        [info("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/RoCE ; "
              "OOB ib0:10.0.0.1<0>")],
        "warning"),
    "log-socket-channel-unroutable": (
        [info("NET/Socket : Using [0]eno1:10.0.0.1<0> [1]veth1:fe80::1%veth1<0>"),
         info("Channel 00 : 1[0] -> 0[0] [receive] via NET/Socket/1")], "warning"),
    "log-ofi-no-provider": (
        ["libfabric:100:1:core:core:fi_getinfo_():1386<info> fi_getinfo: provider efa output "
         "empty list"], "warning"),
    "log-ib-memlock": (
        [warn("Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory",
              "misc/ibvwrap.cc:278")], "error"),
    "log-shm-exhausted": (
        [warn("Call to posix_fallocate failed : No space left on device", "include/shm.h:28")],
        "error"),
    # src/init.cc (v2.27.5-1): ncclCommInitRank's "Init START", then nothing
    "log-init-unfinished": ([info("ncclCommInitRank comm 0x55 rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
                                  "busId 1000 commId 0xabc - Init START")], "info"),
    # src/misc/socket.cc:453 (v2.27.5-1), strerror(EMFILE)
    "log-open-files": ([warn("socketTryAccept: Accept failed: Too many open files",
                             "misc/socket.cc:453")], "error"),
    # src/bootstrap.cc (v2.20.5-1) "Bootstrap : Using%s": two containers on Docker bridges
    "log-shared-address": ([info("Bootstrap : Using eth0:172.17.0.2<0>"),
                            info("Bootstrap : Using eth0:172.17.0.2<0>", host="node2")],
                           "error"),
    "log-no-interface": ([warn("Bootstrap : no socket interface found", "bootstrap.cc:43")],
                         "error"),
    "log-nccl-error": ([info("init.cc:1110 -> 2"), info("group.cc:64 -> 2")], "error"),
    "log-nccl-warning": (
        [warn("NCCL_TOPO_FILE /tmp/topo.xml could not be read", "graph/topo.cc:123")], "warning"),
    # each format below is NCCL's (or a plugin's) at the release and line the catalogue names:
    # src/net.cc:464 (2.19-2.25) and :457 of 2.22.3
    "log-mixed-plugin": (
        [info("NET/Plugin: Loaded net plugin AWS Libfabric (v7)"),
         info("NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 "
              "and lower are not supported.", host="node2")], "warning"),
    # socketStartConnect: src/misc/socket.cc:480 (2.16.2) .. :485 (2.23.4)
    "log-mixed-subnet": (
        [info("Bootstrap : Using ib0:192.168.10.5<0>"),
         info("Bootstrap : Using ib0:192.168.20.7<0>", host="node2"),
         warn("socketStartConnect: Connect to 192.168.10.5<41234> failed : No route to host",
              "misc/socket.cc:484", host="node2")], "error"),
    "log-mixed-fact": (
        [info("NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>"),
         info("NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.2<0>", host="node2")], "error"),
    "log-mixed-rdma-driver": (
        [info("NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [2]irdma0:1/RoCE ; "
              "OOB eth0:10.0.0.1<0>")], "warning"),
    # src/misc/socket.cc:49 (2.16.2) .. :58 (2.30.7)
    "log-peer-closed": (
        [warn("socketProgress: Connection closed by remote peer 10.0.0.2<52110>",
              "misc/socket.cc:50")], "error"),
    # src/misc/socket.cc:703 (2.16.2) .. :585 (2.30.7)
    "log-address-family": (
        [warn("ncclSocketInit: connecting to address 0.0.0.0<0> with family 0 is neither "
              "AF_INET(2) nor AF_INET6(10)", "misc/socket.cc:703")], "error"),
    # src/net.cc:127 (2.12.7) .. :360 (2.20.5), then src/net.cc:195 (2.12.7) .. :937 (2.25.1)
    "log-plugin-load": (
        [info("NET/Plugin : Plugin load returned 2 : libfabric.so.1: cannot open shared object "
              "file: No such file or directory."),
         warn("Error: network AWS Libfabric not found.", "net.cc:627")], "error"),
    # src/transport/p2p.cu:547 (2.3.5) .. src/transport/p2p.cc:275 (2.7.8)
    "log-nccl-message": (
        [warn("failed to open CUDA IPC handle : 217 peer access is not supported",
              "transport/p2p.cc:275")], "error"),
}


def test_every_code_has_a_log() -> None:
    assert set(FINDING_LOGS) == set(CODES)
    assert len(CODES) == len(set(CODES))


@pytest.mark.parametrize("code", sorted(FINDING_LOGS))
def test_finding(code: str) -> None:
    lines, severity = FINDING_LOGS[code]
    findings = nccl_log_findings(parse_nccl_log(lines))
    found = by_code(findings, code)
    assert found.severity == severity
    assert found.title and found.fix and found.evidence
    assert code.startswith("log-")


# A return chain is fatal wherever it is (NCCLCHECK prints "%s:%d -> %d" on every return of
# an error, src/include/checks.h), unless the process shows afterwards that NCCL carried on: a
# network chosen, a device list, a channel, "Init COMPLETE". (Until this release only chains
# from init.cc/group.cc/enqueue.cc/collectives.cc counted; NCCL's source has no such list: a
# net_ib or plugin chain with nothing after it ended the call too.)
@pytest.mark.parametrize(
    ("trace", "after", "fatal"),
    [("init.cc:1110 -> 2", [], True), ("group.cc:64 -> 5", [], True),
     ("init.cc:1719 -> 7", [], False),  # ncclInProgress: not an error
     ("transport/net_ib/init.cc:291 -> 2", [], True), ("plugin/net.cc:118 -> 2", [], True),
     ("init.cc:1230 (ncclCommInitRank) -> 2", [], True),  # 2.30's INFO_LOC form
     ("init.cc:1230 ->", [], True),  # cut off after the arrow
     # NCCL fell back to sockets after the IB init failed: handled
     ("transport/net_ib/init.cc:291 -> 2", ["NET/Socket : Using [0]eth0:10.0.0.1<0>",
                                            "Using network Socket"], False),
     ("plugin/net.cc:118 -> 2", ["Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0"], False),
     ("init.cc:1110 -> 2", ["comm 0x5 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 - "
                            "Init COMPLETE"], False)],
)
def test_which_error_returns_reach_the_caller(trace: str, after: list[str], fatal: bool) -> None:
    log = parse_nccl_log([info(trace), *(info(line) for line in after)])
    assert [m.kind for m in log.errors] == ["error-trace"]
    assert ("log-nccl-error" in codes(nccl_log_findings(log))) is fatal


def test_quiet_log_has_no_findings() -> None:
    lines = [info("NCCL version 2.21.5+cuda12.4"), info("Bootstrap : Using [0]ens1:10.65.0.2<0>"),
             info("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ens1:10.65.0.2<0>"),
             info("NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'"),
             info("Using network IB"), info("Call to connect returned Connection refused, "
                                            "retrying") + " x",
             info("Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA")]
    findings = nccl_log_findings(parse_nccl_log(lines[:5] + lines[6:]))
    assert findings == []
    retried = nccl_log_findings(parse_nccl_log(lines))
    assert codes(retried) == {"log-connect-timeout": "warning"}


def test_expect_rdma_turns_a_plain_socket_log_into_a_fallback() -> None:
    log = parse_nccl_log(SOCKET)
    assert nccl_log_findings(log) == []
    finding = by_code(nccl_log_findings(log, expect_rdma=True), "log-socket-fallback")
    assert "because the nodes have RDMA NICs" in finding.evidence


def test_ib_disabled_with_rdma_expected_is_an_error_with_the_knob_in_the_fix() -> None:
    lines = [info("NCCL_IB_DISABLE set by environment to 1."), *SOCKET]
    finding = by_code(nccl_log_findings(parse_nccl_log(lines), expect_rdma=True),
                      "log-socket-fallback")
    assert finding.fix.startswith("unset NCCL_IB_DISABLE")


def test_qp_failure_mentions_gid_index_when_set() -> None:
    lines = [info("NCCL_IB_GID_INDEX set by environment to 1."),
             warn("Call to ibv_modify_qp failed with error Connection timed out",
                  "misc/ibvwrap.cc:106")]
    findings = nccl_log_findings(parse_nccl_log(lines))
    assert "log-connect-timeout" not in codes(findings)  # a QP timeout is not a socket one
    finding = by_code(findings, "log-ib-qp-failure")
    assert "NCCL_IB_GID_INDEX set by environment to 1" in finding.evidence


@pytest.mark.parametrize(
    ("interface", "address", "multi_node", "expected"),
    [
        ("ens1", "10.65.0.2", True, None),
        ("lo", "127.0.0.1", True, "error"),
        ("lo", "127.0.0.1", None, "warning"),
        ("eth0", "172.20.0.5", None, "info"),  # evidence in the log may raise it
        ("eth0", "172.32.0.5", None, None),  # outside 172.16.0.0/12
        ("docker0", "10.200.0.1", None, "warning"),
        ("virbr0", "192.168.122.1", None, "warning"),
        ("veth12ab", "10.1.0.2", None, "warning"),
        ("ip6tnl0", None, None, "warning"),
        ("tun0", "10.8.0.2", None, "warning"),
        ("ens1", "fe80::1%ens1", None, "warning"),
        ("ens1", "169.254.3.4", None, "warning"),
    ],
)
def test_interface_concern(
    interface: str, address: str | None, multi_node: bool | None, expected: str | None
) -> None:
    concern = interface_concern(interface, address, multi_node=multi_node)
    assert (concern[0] if concern else None) == expected


def test_one_finding_per_interface_however_many_nodes() -> None:
    lines = [info(f"Bootstrap : Using [0]eth0:172.20.0.{n}<0>", host=f"node{n}") for n in range(5)]
    (finding,) = nccl_log_findings(parse_nccl_log(lines), management_interfaces=["eth0"])
    assert finding.severity == "error"
    assert "eth0 (172.20.0.0)" in finding.title
    assert "(and 4 more address(es) on eth0)" in finding.title
    assert len(finding.evidence) == 6


def test_single_node_sockets_never_leave_the_host() -> None:
    lines = [info("Bootstrap : Using [0]lo:127.0.0.1<0>"),
             info("comm 0x55 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0")]
    assert nccl_log_findings(parse_nccl_log(lines)) == []
    multi = [lines[0], info("Bootstrap : Using [0]lo:127.0.0.1<0>", host="node2")]
    finding = by_code(nccl_log_findings(parse_nccl_log(multi)), "log-bootstrap-management")
    assert finding.severity == "error" and "loopback" in finding.title


def test_every_code_is_documented_with_its_symptom() -> None:
    page = (Path(__file__).parents[1] / "docs" / "nccl-log.md").read_text(encoding="utf-8")
    for code in CODES:
        row = next((line for line in page.splitlines() if line.startswith(f"| `{code}` |")), None)
        assert row is not None, f"{code} has no row in the findings table of docs/nccl-log.md"
        assert row.count("`") >= 4, f"{code}: name the log text users search for"


def test_connect_timeout_points_at_unroutable_peers() -> None:
    lines = [warn("Connect to 172.17.0.3<43429> failed : Connection timed out")]
    finding = by_code(nccl_log_findings(parse_nccl_log(lines)), "log-connect-timeout")
    assert "peer addresses that look unroutable: 172.17.0.3" in finding.evidence
    assert finding.fix.startswith("set NCCL_SOCKET_IFNAME")


def test_repeated_messages_are_counted_once_and_capped() -> None:
    lines = [warn(f"Connect to 10.0.{i // 250}.{i % 250}<1> failed : Connection refused")
             for i in range(2000)]
    lines += [warn("Connect to 10.9.9.9<1> failed : Connection refused")] * 3
    log = parse_nccl_log(lines)
    assert len(log.warnings) == 500
    assert log.warnings[0].count == 1 and log.lines_matched == 2003


# -- reading ---------------------------------------------------------------------------------


def test_read_gzip_binary_and_text_streams(tmp_path: Path) -> None:
    data = ROCE.read_bytes()
    packed = tmp_path / "train.log.gz"
    packed.write_bytes(gzip.compress(data))
    expected = read_nccl_log(ROCE)
    assert read_nccl_log(packed) == expected
    assert read_nccl_log(io.BytesIO(data)) == expected
    assert read_nccl_log(io.StringIO(data.decode())) == expected


def test_undecodable_bytes_are_replaced(tmp_path: Path) -> None:
    path = tmp_path / "bad.log"
    garbage = b"\xff\xfe garbage\n"
    path.write_bytes(garbage + info("Using network IB").encode() + b"\n\xc3\xffNCCL\n")
    log = read_nccl_log(path)
    assert log.transport == "IB" and log.lines_read == 3


@pytest.mark.parametrize("make", ["missing", "directory", "bad-gzip"])
def test_unreadable_files_raise_discovery_error_naming_the_path(tmp_path: Path, make: str) -> None:
    path = tmp_path / "x.log.gz"
    if make == "directory":
        path.mkdir()
    elif make == "bad-gzip":
        path.write_bytes(b"not gzip at all")
    with pytest.raises(DiscoveryError) as caught:
        read_nccl_log(path)
    assert caught.value.path == str(path)
    assert str(path) in str(caught.value) and "NCCL_DEBUG=INFO" in str(caught.value)


def test_rank_to_dict_is_the_generic_conversion() -> None:
    # RankInfo.to_dict is written out for speed: it must say what json_fields says
    from clusterenv._jsonable import json_fields

    for path in sorted(LOGS.rglob("*.txt")):
        for rank in read_nccl_log(path).ranks:
            assert rank.to_dict() == json_fields(rank)


def test_compact_json_is_the_same_data() -> None:
    from clusterenv._cli._common import emit_json

    log = read_nccl_log(ROCE)
    data = {"log": log, "findings": nccl_log_findings(log), "odd": "ens1\udcff"}
    indented, compact = io.StringIO(), io.StringIO()
    emit_json(data, indented)
    emit_json(data, compact, compact=True)
    assert compact.getvalue().count("\n") == 1
    assert json.loads(compact.getvalue()) == json.loads(indented.getvalue())
    assert "ens1\\\\xff" in compact.getvalue()  # the surrogate is written out, as before


def test_json_of_a_log_round_trips() -> None:
    data = json.loads(json.dumps(read_nccl_log(ROCE).to_dict()))
    assert data["transport"] == "IB" and data["version"] == "2.27.5"
    assert data["devices"][0]["label"] == "mlx5_0:1/RoCE"
    assert data["ranks"][0]["oob"] == {"interface": "enp25s0np0", "address": "10.99.91.63"}


def test_import_is_light() -> None:
    code = ("import sys, clusterenv.nccl_log; "
            "print([m for m in ('pydantic', 'netifaces', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-log", str(ROCE)]) == 0
    out = capsys.readouterr().out
    assert "2.27.5 (CUDA 12.9)" in out and "mlx5_0:1/RoCE" in out
    assert "enp25s0np0:10.99.91.63" in out and "[log-plugin-failed]" in out
    assert main(["nccl-log", "--strict", str(ROCE)]) == 1


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-log", "--json", str(LOGS / "roce-2.27-socket-fallback.txt")]) == 1
    data = json.loads(capsys.readouterr().out)
    for key in ("version", "ranks", "transport", "devices", "gpudirect", "env", "warnings",
                "findings", "summary"):
        assert key in data
    assert data["transport"] == "Socket" and data["summary"]["error"] == 2
    assert {f["code"] for f in data["findings"]} >= {"log-socket-fallback"}


def test_cli_interface_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-log", str(DOCKER)]) == 0
    assert main(["nccl-log", "--management-interface", "eth0,eth1", str(DOCKER)]) == 1
    assert "a management interface" in capsys.readouterr().out
    assert main(["nccl-log", "--expect-rdma", str(DOCKER)]) == 1


def test_cli_unreadable_file_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.log"
    assert main(["nccl-log", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "No such file" in err


def test_cli_reads_standard_input() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "clusterenv", "nccl-log", "--json", "-"],
        input=IBV.read_bytes(), capture_output=True, check=False,
    )
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["file"] == "-" and data["transport"] == "Socket"


def test_cli_says_when_there_is_nothing_from_nccl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.log"
    path.write_text("epoch 1 loss 2.3\n", encoding="utf-8")
    # Nothing to judge is "could not check" (2), never "no problems found" (0).
    for argv in (["nccl-log", str(path)], ["nccl-log", "--json", str(path)]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert f"{path}: 1 line, none from NCCL" in err and "NCCL_DEBUG=INFO" in err
        assert "no problems found" not in out + err
    empty = tmp_path / "nothing.log"
    empty.write_bytes(b"")
    assert main(["nccl-log", str(empty)]) == 2


# -- nothing crashes it ----------------------------------------------------------------------


FRAGMENTS = [
    "NCCL INFO ", "NCCL WARN ", "node1:12:12 [0] ", "[rank3]:", "Bootstrap : Using ", "Bootstrap: ",
    "NET/IB : Using ", "NET/Socket : Using ", "NET/Plugin: ", "NET/OFI ", "[0]", "[1]", "mlx5_0",
    ":1/RoCE", ":", "<0>", "; OOB ", "eth0", "fe80::1%eth0", "172.17.0.2", "via NET/IB/0",
    "/GDRDMA", "Channel 00/0 : ", "GPU Direct RDMA Disabled for HCA 0 '", "'", "NCCL version ",
    "2.27.5+cuda12.9", "NCCL_IB_HCA set to ", "set by environment to ", "Using network ",
    "Loaded net plugin ", "Initialized NET plugin ", " -> ", "init.cc:1", " (v6)", "rank ",
    " nranks ", " nNodes ", "9" * 30, " ", "\n", "\r", "\x00", "é", "%", "(", ")",
]
fragmented = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)


def check_never_crashes(text: str) -> None:
    log = parse_nccl_log(text.splitlines(keepends=True))
    assert 0 <= log.lines_matched <= log.lines_read
    findings = nccl_log_findings(log, management_interfaces=["eth0"], expect_rdma=True)
    json.dumps(log.to_dict())
    json.dumps([f.to_dict() for f in findings])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400), fragmented))
def test_arbitrary_text_never_crashes(text: str) -> None:
    check_never_crashes(text)


CASES_LINES = [
    line for name in CASES for line in (LOGS / name).read_text(encoding="utf-8").splitlines()
    if "NCCL " in line
][::7]


@st.composite
def mutated_real_lines(draw: st.DrawFn) -> str:
    lines = draw(st.lists(st.sampled_from(ROCE_LINES[1:] + CASES_LINES), min_size=1, max_size=12))
    out: list[str] = []
    for line in lines:
        cut = draw(st.integers(0, len(line)))
        action = draw(st.sampled_from(["keep", "truncate", "insert", "delete", "join"]))
        if action == "join" and out:
            out[-1] += line
        elif action == "truncate":
            out.append(line[:cut])
        elif action == "insert":
            out.append(line[:cut] + draw(st.one_of(st.text(max_size=20), fragmented)) + line[cut:])
        elif action == "delete":
            out.append(line[:cut] + line[cut + draw(st.integers(1, 20)) :])
        else:
            out.append(line)
    return "\n".join(out)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_real_lines())
def test_mutated_real_lines_never_crash(text: str) -> None:
    check_never_crashes(text)
