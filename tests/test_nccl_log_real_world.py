"""`clusterenv nccl-log` on logs as people paste them: one test (or more) per class of mistake
seen on real logs.

Every log here is a real capture in tests/data/nccl_logs/real/ or a variant that
tests/data/nccl_logs/derive_variants.py derives from one by editing its lines (the first line of
each variant names its origin and the edit); lines made inline below are edits of the real lines
named next to them.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterenv.cli import main
from clusterenv.findings import Finding
from clusterenv.nccl.lint import IB_SETTING_RANGES, ib_setting_problem
from clusterenv.nccl_log import (
    MAX_LINE,
    WC_STATUSES,
    NcclLog,
    nccl_log_findings,
    parse_nccl_log,
    read_nccl_log,
)
from clusterenv.nccl_log.completion import parse_completion
from tests.conftest import skip_or_fail

LOGS = Path(__file__).parent / "data" / "nccl_logs"
REAL = LOGS / "real"
ROCE = REAL / "nccl-info-h100-roce-2.27-ofi-plugin-fallback-ib.txt"
DOCKER = REAL / "nccl-info-docker-bridge-eth0-no-libibverbs-socket.txt"
EFA = REAL / "nccl-info-aws-p5en-h200-efa-ofi.txt"


def lines_of(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if not line.startswith("#")]


ROCE_LINES = lines_of(ROCE)
DOCKER_LINES = [line for line in lines_of(DOCKER) if line]
# "26a46eb2b1d3:111329:111329 [0] " and "tpgds-aihub0008:207008:207008 [1] ": real prefixes
DOCKER_HEAD = DOCKER_LINES[0].split("NCCL INFO", 1)[0]
ROCE_HEAD = ROCE_LINES[0].split("NCCL INFO", 1)[0]
# "NET/IB : Using [0]mlx5_0:1/RoCE ... [7]mlx5_11:1/RoCE [RO]; OOB enp25s0np0:10.99.91.63<0>"
NET_IB = next(line for line in ROCE_LINES if "NET/IB : Using" in line)


def codes(findings: list[Finding]) -> dict[str, str]:
    return {f.code: f.severity for f in findings}


def only(findings: list[Finding], code: str) -> Finding:
    matches = [f for f in findings if f.code == code]
    assert len(matches) == 1, findings
    return matches[0]


def findings_of(name: str, **options: list[str]) -> list[Finding]:
    return nccl_log_findings(read_nccl_log(LOGS / name), **options)  # type: ignore[arg-type]


def same_setup(a: NcclLog, b: NcclLog) -> None:
    """What NCCL did is the same in both logs (hosts, processes, interfaces, devices)."""
    assert [(r.host, r.pid, r.rank, r.cuda_device, r.bootstrap_interface, r.bootstrap_address,
             r.transport, r.devices, r.oob) for r in a.ranks] == [
        (r.host, r.pid, r.rank, r.cuda_device, r.bootstrap_interface, r.bootstrap_address,
         r.transport, r.devices, r.oob) for r in b.ranks]
    assert (a.env, a.plugins, a.versions, a.devices, a.hosts, a.multi_node) == (
        b.env, b.plugins, b.versions, b.devices, b.hosts, b.multi_node)


# -- 1. GPUDirect is judged only over RDMA channels ---------------------------------------------


def test_socket_channels_are_not_judged_for_gpudirect() -> None:
    log = read_nccl_log(LOGS / "roce-2.27-net-socket-channels.txt")
    # no "Using network" line: the channels say Socket, although NET/IB listed its devices
    assert log.transports == ("Socket",)
    assert all(r.channel_devices == (("Socket", 0),) for r in log.ranks)
    assert (log.gpudirect.net_channels, log.gpudirect.enabled) == (0, None)
    findings = nccl_log_findings(log)
    assert "log-gdr-disabled" not in codes(findings)
    fallback = only(findings, "log-socket-fallback")
    assert fallback.fix.startswith("unset NCCL_NET")


def test_rdma_channels_without_gdrdma_are_still_judged() -> None:
    line = f"{ROCE_HEAD}NCCL INFO Channel 00/0 : 1[1] -> 9[1] [receive] via NET/IB/1"
    log = parse_nccl_log([ROCE_LINES[2], line])
    assert log.transports == ("IB",) and log.gpudirect.net_channels == 1
    assert codes(nccl_log_findings(log)) == {"log-gdr-disabled": "warning"}


# -- 2. completion errors: the ibverbs status says what is wrong --------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    # NCCL 2.4-2.6 (no peer), 2.7-2.22, 2.19+ "status=", a status name
    ("NET/IB : Got completion with error 12, opcode 1, len 32591, vendor err 129",
     (12, 129, None, None)),
    ("NET/IB : Got completion from peer 10.1.1.2<46045> with error 5, opcode 129, len 0, "
     "vendor err 249 (Recv)", (5, 249, "10.1.1.2<46045>", None)),
    ("NET/IB: Got completion from peer 10.1.1.2<46045> with status=13 opcode=0 len=0 vendor err "
     "136 (Recv) localGid ::ffff:10.1.1.1 remoteGids ::ffff:10.1.1.2 hca mlx5_3",
     (13, 136, "10.1.1.2<46045>", "mlx5_3")),
    ("NET/IB: Got completion from peer 10.1.1.2<1> with status=local protection error(4) "
     "opcode=RDMA_WRITE(1) vendor_err=81", (4, 81, "10.1.1.2<1>", None)),
    ("ibv_poll_cq returned IBV_WC_RETRY_EXC_ERR", (12, None, None, None)),
])
def test_completion_formats(text: str, expected: tuple[object, ...]) -> None:
    assert parse_completion(text) == expected


def test_status_names_are_libibverbs_own() -> None:
    found = [path for pattern in ("/usr/lib/*/libibverbs.so.1", "/usr/lib64/libibverbs.so.1")
             for path in sorted(Path("/").glob(pattern.lstrip("/")))]
    library = found[0] if found else Path("/usr/lib/x86_64-linux-gnu/libibverbs.so.1")
    if not library.exists():
        skip_or_fail(f"{library} is not installed: apt-get install libibverbs1")
    strings = set(re.findall(rb"[ -~]{4,}", library.read_bytes()))
    for status in WC_STATUSES.values():
        assert status.text.encode() in strings, status
    assert [s.number for s in WC_STATUSES.values()] == list(range(1, 24))


def test_retry_exceeded_on_roce_points_at_the_fabric_path_and_leads() -> None:
    findings = findings_of("roce-2.27-completion-error-12.txt")
    first = findings[0]
    assert (first.code, first.severity) == ("log-ib-completion-error", "error")
    assert "error 12 (IBV_WC_RETRY_EXC_ERR)" in first.title and "fabric path" in first.title
    assert "GID index" in first.fix and "PFC" in first.fix
    assert "subnet manager" not in first.fix  # RoCE only: every device is /RoCE
    assert any(e.startswith("link layer: RoCE") for e in first.evidence)
    # the flushed requests (status 5) follow; then the failed proxy / ncclSystemError
    second = findings[1]
    assert "error 5" in second.title and "consequence" in second.title
    assert findings[2].code == "log-nccl-error"


def test_flush_with_vendor_249_and_gpudirect_on_ib_is_acs() -> None:
    finding = only(findings_of("ib-2.27-gdr-completion-error-5.txt"), "log-ib-completion-error")
    assert "ACS or the IOMMU" in finding.title
    assert "NCCL_NET_GDR_LEVEL=LOC" in finding.fix and "iommu=pt" in finding.fix
    assert "vendor err 249 (the HCA's own error syndrome)" in finding.evidence


@pytest.mark.parametrize(("status", "link", "gdr", "words"), [
    (4, "IB", True, "ACS or the IOMMU"),
    (4, "IB", False, "could not access a registered buffer"),
    (12, "IB", False, "fabric path"),
    (13, "RoCE", False, "not ready to receive"),
    (1, "RoCE", False, "size mismatch"),
    (5, "RoCE", True, "consequence"),  # vendor err 244, on RoCE: not the ACS signature
    (19, "IB", False, "fatal error"),
])
def test_each_status_gets_its_own_cause(status: int, link: str, gdr: bool, words: str) -> None:
    # the NET/IB line of the real RoCE log, its link layer edited; a real channel line shape
    devices = NET_IB.replace("/RoCE", f"/{link}")
    channel = (f"{ROCE_HEAD}NCCL INFO Channel 00/0 : 1[1] -> 9[1] [receive] via NET/IB/1"
               + ("/GDRDMA" if gdr else ""))
    warning = (f"{ROCE_HEAD}transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from "
               f"peer 10.99.91.62<51231> with error {status}, opcode 0, len 0, vendor err 244 "
               "(Recv)")
    finding = only(nccl_log_findings(parse_nccl_log([devices, channel, warning])),
                   "log-ib-completion-error")
    assert words in finding.title
    assert WC_STATUSES[status].name in finding.title
    if status == 12:
        assert "subnet manager" in finding.fix and "GID index" not in finding.fix


# -- 3. decorations: the message structure, not a prefix rule -----------------------------------


@pytest.mark.parametrize("name", ["roce-2.27-cloudwatch-export.txt",
                                  "roce-2.27-more-decorations.txt"])
def test_decorated_logs_say_the_same_as_the_plain_one(name: str) -> None:
    plain = read_nccl_log(ROCE)
    decorated = read_nccl_log(LOGS / name)
    same_setup(decorated, plain)
    assert decorated.lines_matched == plain.lines_matched
    # duplicated columns are counted once
    assert [(m.text, m.count) for m in decorated.errors] == [(m.text, m.count)
                                                             for m in plain.errors]


def test_a_timestamp_glued_to_the_host_is_not_part_of_it() -> None:
    line = ROCE_LINES[2]  # "... Bootstrap: Using enp25s0np0:10.99.91.63<0>"
    for stamp in ("2025-03-01T12:00:07.123-07:00", "2025-03-01T12:00:07Z", "2025-03-01 12:00:07",
                  "2025-03-01T12:00:07.123+0530"):
        log = parse_nccl_log([f"  | {stamp}{line} | {line}"])
        assert log.hosts == ("tpgds-aihub0008",), stamp
        assert log.lines_matched == 1


def test_two_processes_in_one_line_stay_two() -> None:
    # two different real lines run together (and a third repeating the first)
    line = DOCKER_LINES[0] + " | " + ROCE_LINES[2] + " | " + DOCKER_LINES[0]
    log = parse_nccl_log([line])
    assert [(r.host, r.bootstrap_interface) for r in log.ranks] == [
        ("26a46eb2b1d3", "eth0"), ("tpgds-aihub0008", "enp25s0np0")]


# -- 4. 172.16.0.0/12 needs evidence ------------------------------------------------------------


def test_single_host_container_on_172_17_is_a_remark() -> None:
    finding = only(findings_of(DOCKER.relative_to(LOGS).as_posix()), "log-bootstrap-management")
    assert finding.severity == "info"
    assert any("nothing else in the log says it is unreachable" in e for e in finding.evidence)


def test_two_hosts_on_a_172_network_whose_bootstrap_worked_is_a_remark() -> None:
    finding = only(findings_of("roce-2.27-two-nodes-172-network.txt"), "log-bootstrap-management")
    assert finding.severity == "info"


def test_an_unused_cluster_interface_is_evidence() -> None:
    finding = only(findings_of("docker-bridge-eth0-ens1-listed.txt"), "log-bootstrap-management")
    assert finding.severity == "warning"
    assert "NCCL also listed ens1:10.65.0.2 and did not use it for bootstrap" in finding.evidence


def test_a_failed_connection_to_a_172_peer_is_evidence() -> None:
    # the real docker-bridge lines plus a WARN edited from the ipv6 variant's timeout line
    timeout = (f"{DOCKER_HEAD}include/socket.h:403 NCCL WARN Connect to 172.17.0.3<43429> "
               "failed : Connection timed out")
    findings = nccl_log_findings(parse_nccl_log([*DOCKER_LINES, timeout]))
    finding = only(findings, "log-bootstrap-management")
    assert finding.severity == "warning"
    assert "connections to 172.16.0.0/12 peers failed: 172.17.0.3" in finding.evidence


def test_a_runpod_source_makes_eth0_an_error(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERENV_SOURCE", raising=False)
    assert main(["nccl-log", str(DOCKER)]) == 0  # info only
    capsys.readouterr()
    assert main(["nccl-log", "--source", "runpod", "--json", str(DOCKER)]) == 1
    cause = json.loads(capsys.readouterr().out)["cause"]
    assert cause["code"] == "log-bootstrap-management"
    assert "a management interface" in cause["title"]
    monkeypatch.setenv("CLUSTERENV_SOURCE", "runpod")
    assert main(["nccl-log", str(DOCKER)]) == 1


def test_knowing_the_layout_makes_172_an_error() -> None:
    log = read_nccl_log(DOCKER)
    known = only(nccl_log_findings(log, management_interfaces=["eth0"]), "log-bootstrap-management")
    assert known.severity == "error"
    cluster = only(nccl_log_findings(log, cluster_interfaces=["ens1"]), "log-bootstrap-management")
    assert cluster.severity == "error"


# -- 5. the channel's device index names the interface ------------------------------------------


def test_socket_channel_through_a_link_local_veth_is_the_cause() -> None:
    findings = findings_of("docker-socket-channel-veth.txt")
    first = findings[0]
    assert (first.code, first.severity) == ("log-socket-channel-unroutable", "error")
    assert "veth3f2a1b" in first.title
    assert first.fix.startswith("export NCCL_SOCKET_IFNAME==eno1 ")
    # the veth is reported once, by the channel finding; eno1 is fine
    assert "log-bootstrap-management" not in codes(findings)


def test_socket_channel_through_the_routable_entry_is_fine() -> None:
    text = (LOGS / "docker-socket-channel-veth.txt").read_text(encoding="utf-8")
    log = parse_nccl_log(text.replace("via NET/Socket/1", "via NET/Socket/0").splitlines())
    assert "log-socket-channel-unroutable" not in codes(nccl_log_findings(log))


def test_socket_channel_without_failures_is_a_warning() -> None:
    text = (LOGS / "docker-socket-channel-veth.txt").read_text(encoding="utf-8")
    quiet = [line for line in text.splitlines() if "NCCL WARN Connect" not in line
             and "init.cc" not in line]
    finding = only(nccl_log_findings(parse_nccl_log(quiet)), "log-socket-channel-unroutable")
    assert finding.severity == "warning"


# -- 6. link layers mixed in one device list ----------------------------------------------------


def test_roce_port_among_ib_ports_with_a_failing_ring_leads() -> None:
    findings = findings_of("roce-2.27-mixed-link-layer.txt")
    first = findings[0]
    assert (first.code, first.severity) == ("log-mixed-link-layer", "error")
    assert "mlx5_2 (RoCE) together with InfiniBand ports" in first.title
    assert ("NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_11:1"
            in first.fix)
    assert "instead of NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2" in first.fix


def test_ib_port_among_roce_ports_is_named_too() -> None:
    line = NET_IB.replace("[5]mlx5_7:1/RoCE", "[5]mlx5_7:1/IB")
    finding = only(nccl_log_findings(parse_nccl_log([line])), "log-mixed-link-layer")
    assert finding.severity == "warning"  # no failing ring through it
    assert "mlx5_7 (IB) together with RoCE ports" in finding.title


def test_device_suffixes_are_kept() -> None:
    # the real NET/IB line as the SHARP plugin (NET/IBext) prints it
    line = (NET_IB.replace("NET/IB : Using", "NET/IBext_v8 : Using")
            .replace(":1/RoCE", ":1/IB/SHARP"))
    log = parse_nccl_log([line])
    assert log.devices[0].label == "mlx5_0:1/IB/SHARP"
    assert {(d.network, d.suffixes) for d in log.devices} == {("IBext_v8", ("SHARP",))}
    assert log.ranks[0].devices[0] == "mlx5_0:1/IB/SHARP" and log.transport == "IBext_v8"


# -- 7. interface aliases -----------------------------------------------------------------------


@pytest.mark.parametrize(("endpoint", "expected"), [
    ("eno1:avahi:<address><0>", ("eno1:avahi", None)),
    ("eno1:1:<address><0>", ("eno1:1", None)),  # the address redacted whole
    ("eno1:<address><0>", ("eno1", None)),
    ("eno1:avahi:169.254.7.7<0>", ("eno1:avahi", "169.254.7.7")),
    ("eth0:1:10.0.0.5<0>", ("eth0:1", "10.0.0.5")),
    ("eth0:172.1", ("eth0", None)),  # cut short: not an alias
    ("eth0:xx.xx.xx.xx<0>", ("eth0", None)),  # a redacted address, not an alias
])
def test_interface_alias_is_kept_whatever_follows(endpoint: str, expected: tuple[str, str]) -> None:
    line = DOCKER_LINES[0].replace("eth0:172.17.0.2<0>", endpoint)
    rank = parse_nccl_log([line]).ranks[0]
    assert (rank.bootstrap_interface, rank.bootstrap_address) == expected


# -- 8. errors fatal to the communicator ---------------------------------------------------------


@pytest.mark.parametrize("message", [
    "enqueue.cc:1424 NCCL WARN Cuda failure 'invalid argument'",
    "proxy.cc:1523 NCCL WARN [Proxy Service 3] Failed to execute operation Connect from rank 3, "
    "retcode 3",
    "proxy.cc:1545 NCCL WARN [Service thread] Error encountered progressing operation=Connect, "
    "res=3, closing connection",
])
def test_fatal_warnings_are_errors(message: str, tmp_path: Path) -> None:
    lines = [*DOCKER_LINES, DOCKER_HEAD + message]
    finding = only(nccl_log_findings(parse_nccl_log(lines)), "log-nccl-error")
    assert finding.severity == "error"
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["nccl-log", str(path)]) == 1


# -- 9. settings outside what verbs accepts ------------------------------------------------------


def test_retry_count_15_in_a_log() -> None:
    finding = only(findings_of("roce-2.27-retry-cnt-15.txt"), "log-ib-setting-range")
    assert finding.severity == "error"
    assert "NCCL_IB_RETRY_CNT='15' is outside 0-7" in finding.title
    assert finding.fix == ("set NCCL_IB_RETRY_CNT within 0-7, or unset it (NCCL's default is 7)")


@pytest.mark.parametrize(("name", "value", "severity"), [
    ("NCCL_IB_RETRY_CNT", "7", None), ("NCCL_IB_RETRY_CNT", "8", "error"),
    ("NCCL_IB_RETRY_CNT", "0x10", "error"),  # strtoll base 0: 16
    ("NCCL_IB_RETRY_CNT", "010", "error"),  # octal 8
    ("NCCL_IB_TIMEOUT", "31", None), ("NCCL_IB_TIMEOUT", "32", "error"),
    ("NCCL_IB_TIMEOUT", "0", "warning"),  # wait forever
    ("NCCL_IB_SL", "15", None), ("NCCL_IB_SL", "16", "error"),
    ("NCCL_IB_TC", "106", None), ("NCCL_IB_TC", "256", "error"), ("NCCL_IB_TC", "-1", "error"),
    ("NCCL_IB_TC", "abc", "warning"),  # NCCL reads 0
    ("NCCL_IB_GID_INDEX", "99", None),  # not a range of this table
])
def test_setting_ranges(name: str, value: str, severity: str | None) -> None:
    problem = ib_setting_problem(name, value)
    assert (problem[0] if problem else None) == severity
    logged = parse_nccl_log([f"{ROCE_HEAD}NCCL INFO {name} set by environment to {value}."])
    found = [f for f in nccl_log_findings(logged) if f.code == "log-ib-setting-range"]
    if name in IB_SETTING_RANGES and value.lstrip("-").isdigit():
        assert [f.severity for f in found] == ([severity] if severity else [])


# -- 10. plugins and providers -----------------------------------------------------------------


def test_no_efa_device_in_the_process_is_reported() -> None:
    findings = findings_of("efa-p5en-no-efa-device.txt")
    first = findings[0]
    assert (first.code, first.severity) == ("log-ofi-no-provider", "error")
    assert "no usable efa device" in first.title
    assert "fi_info -p efa" in first.fix
    assert "log-nccl-warning" not in codes(findings)  # the NET/OFI warning is its evidence


def test_probing_a_provider_that_is_not_selected_is_normal() -> None:
    line = "libfabric:207008:1709294400::core:core:fi_getinfo_():1386<info> fi_getinfo: provider " \
           "efa output empty list"
    log = parse_nccl_log([line, *ROCE_LINES])  # the plugin then selected verbs;ofi_rxm
    assert "ofi-no-provider" in [m.kind for m in log.notices]
    assert "log-ofi-no-provider" not in codes(nccl_log_findings(log))


# -- 11. smaller parse misses ------------------------------------------------------------------


def test_nranks_without_rank() -> None:
    log = parse_nccl_log([f"{DOCKER_HEAD}NCCL INFO nranks 16"])
    assert log.nranks == 16


def test_processes_whose_only_lines_are_warnings() -> None:
    warning = (f"{DOCKER_HEAD.replace('111329:111329', '2222:2230')}include/socket.h:403 "
               "NCCL WARN Connect to 172.17.0.3<43429> failed : Connection timed out")
    log = parse_nccl_log([*DOCKER_LINES, warning.replace("26a46eb2b1d3", "7c1f9e0d2b44")])
    lonely = [r for r in log.ranks if r.host == "7c1f9e0d2b44"]
    assert [(r.pid, r.cuda_device, r.first_line) for r in lonely] == [
        (2222, 0, len(DOCKER_LINES) + 1)]
    assert log.hosts[-1] == "7c1f9e0d2b44" and log.multi_node is True


# -- the report leads with the cause; reading is bounded -----------------------------------------


def test_cli_leads_with_the_most_likely_cause(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-log", str(LOGS / "roce-2.27-completion-error-12.txt")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("most likely cause: RDMA completion error 12 (IBV_WC_RETRY_EXC_ERR)")
    assert main(["nccl-log", "--json", str(LOGS / "roce-2.27-mixed-link-layer.txt")]) == 1
    assert json.loads(capsys.readouterr().out)["cause"]["code"] == "log-mixed-link-layer"
    assert main(["nccl-log", "--json", str(ROCE)]) == 0
    assert json.loads(capsys.readouterr().out)["cause"] is None


def test_an_over_long_line_is_cut_and_the_next_line_read(tmp_path: Path) -> None:
    path = tmp_path / "joined.log"
    path.write_text(ROCE_LINES[2] + "x" * (3 * MAX_LINE) + "\n" + DOCKER_LINES[0] + "\n",
                    encoding="utf-8")
    log = read_nccl_log(path)
    assert log.lines_read == 2 and log.lines_matched == 2
    assert {r.bootstrap_interface for r in log.ranks} == {"enp25s0np0", "eth0"}
    assert read_nccl_log(io.StringIO(path.read_text(encoding="utf-8"))) == log


# -- never crashes, decorated and long lines included -------------------------------------------


_DECORATIONS = st.sampled_from([
    "", "  | 2025-03-01T12:00:07.123-07:00", "2025-03-01T12:00:07.123456789Z ", "[56] ",
    "  123  ", "Mar  1 12:00:07 gpu-node-7 python[4242]: ", "[pod/trainer-0/pytorch] ",
    "2025-03-01 12:00:07 [1,0]<stdout>:", '"2025-03-01 12:00:07","', "[rank3]:", "0: ",
])
_REAL = [line for path in sorted(LOGS.rglob("*.txt")) for line in lines_of(path)
         if "NCCL " in line][::5]


@st.composite
def decorated_lines(draw: st.DrawFn) -> str:
    out = []
    for line in draw(st.lists(st.sampled_from(_REAL), min_size=1, max_size=8)):
        text = draw(_DECORATIONS) + line
        if draw(st.booleans()):
            text += " | " + draw(st.sampled_from([line, draw(st.sampled_from(_REAL))]))
        if draw(st.integers(0, 9)) == 0:
            text += draw(st.sampled_from(["x", "NCCL INFO ", " | "])) * draw(
                st.integers(MAX_LINE // 8, 2 * MAX_LINE))
        out.append(text)
    return "\n".join(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(decorated_lines())
def test_decorated_and_long_lines_never_crash(text: str) -> None:
    for log in (parse_nccl_log(text.splitlines()), read_nccl_log(io.StringIO(text))):
        assert 0 <= log.lines_matched <= log.lines_read
        assert all(len(m.text) <= MAX_LINE for m in (*log.warnings, *log.errors, *log.notices))
        findings = nccl_log_findings(log, management_interfaces=["eth0"], expect_rdma=True)
        json.dumps(log.to_dict())
        json.dumps([f.to_dict() for f in findings])


def test_the_line_cache_changes_no_result() -> None:
    # real lines that repeat (the line cache is used), and the same after 6000 lines that never
    # repeat (it switches itself off): each result equals a parse that never caches lines
    from clusterenv.nccl_log.parse import _Parser

    repeated = [*ROCE_LINES * 3, *lines_of(LOGS / "roce-2.27-completion-error-12.txt") * 2]
    unique = [DOCKER_LINES[0].replace(":111329:111329", f":{pid}:{pid}")
              for pid in range(10_000, 16_000)]
    for lines in (repeated, [*unique, *repeated]):
        cached = _Parser()
        log = cached.finish(cached.feed(lines))
        plain = _Parser()
        plain.cache_from = 10**12
        assert log == plain.finish(plain.feed(lines))
        assert log.errors[0].count > 1
        assert (cached.cache_from > len(lines)) == (lines is not repeated)


def test_reading_in_blocks_changes_no_result(tmp_path: Path) -> None:
    # files are read in blocks whose channel lines are counted in bulk once lines stop
    # repeating; every real log, and a log of 240 processes printing the real RoCE capture's
    # lines with their own pids and channels (2.5 MB: the blocks after the first are counted in
    # bulk), read so must equal the line-by-line parse
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from bench_nccl_log import write_unique  # type: ignore[import-not-found]

    unique = tmp_path / "unique.log"
    write_unique(unique, 2_500_000, processes=240, hosts=30)
    for path in [*sorted(LOGS.rglob("*.txt")), unique]:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        assert read_nccl_log(path) == parse_nccl_log(lines), path.name
    log = read_nccl_log(unique)
    assert len(log.ranks) == 240 and log.gpudirect.net_channels > 0
    assert all(r.first_line > 0 for r in log.ranks)
