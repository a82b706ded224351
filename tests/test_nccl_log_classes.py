"""`clusterenv nccl-log` on the classes of failure seen on logs nobody here had described.

Each test builds its log from NCCL's own lines: the format strings of the release named next to
each line (file:line of the format at that tag, as the catalogue `messages.json` records it,
printed with the prefix src/debug.cc of that release writes), or lines of the real captures in
tests/data/nccl_logs/real/. The values filled into a format (hosts, addresses, numbers) are
ours.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterenv.cli import main
from clusterenv.findings import Finding
from clusterenv.nccl_log import lookup_message, nccl_log_findings, parse_nccl_log

REAL = Path(__file__).parent / "data" / "nccl_logs" / "real"
EFA = REAL / "nccl-info-aws-p5en-h200-efa-ofi.txt"


def info(msg: str, host: str = "node1", pid: int = 100, dev: int = 0) -> str:
    """An INFO line as src/debug.cc prints it (``%s:%d:%d [%d] NCCL INFO %s``)."""
    return f"{host}:{pid}:{pid} [{dev}] NCCL INFO {msg}"


def warn(msg: str, source: str, host: str = "node1", pid: int = 100) -> str:
    """A WARN line as src/debug.cc prints it (``%s:%d:%d [%d] %s:%d NCCL WARN %s``)."""
    return f"{host}:{pid}:{pid} [0] {source} NCCL WARN {msg}"


def findings_of(lines: list[str], **options: object) -> list[Finding]:
    return nccl_log_findings(parse_nccl_log(lines), **options)  # type: ignore[arg-type]


def only(findings: list[Finding], code: str) -> Finding:
    matches = [f for f in findings if f.code == code]
    assert len(matches) == 1, findings
    return matches[0]


def codes(findings: list[Finding]) -> dict[str, str]:
    return {f.code: f.severity for f in findings}


def cli(tmp_path: Path, lines: list[str], *args: str) -> tuple[int, dict[str, object]]:
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["nccl-log", "--json", *args, str(path)])
    return code, json.loads(out.getvalue())


def test_every_line_built_here_is_in_the_catalogue() -> None:
    # the formats this file fills in are NCCL's: each message is found, with its class
    for text, cls in [
        ("socketStartConnect: Connect to 10.0.0.2<41234> failed : Connection refused", "socket"),
        ("socketProgress: Connection closed by remote peer 10.0.0.2<52110>", "socket"),
        ("Bootstrap : no socket interface found", "interface"),
        ("Error: network AWS Libfabric not found.", "net-plugin"),
        ("failed to open CUDA IPC handle : 217 peer access is not supported", "p2p"),
        ("ncclSocketInit: connecting to address 0.0.0.0<0> with family 0 is neither AF_INET(2) "
         "nor AF_INET6(10)", "interface"),
    ]:
        match = lookup_message(text)
        assert match is not None and match.cls == cls, text


# -- a bootstrap failure chain is fatal -------------------------------------------------------

# "%s:%d -> %d": NCCLCHECK, src/include/checks.h:111 (v2.12.7-1) .. :145 (v2.30.3-1); the second
# line of the chain is cut after "->" as pasted logs often are.
BOOTSTRAP_CHAIN = [
    info("Bootstrap : Using eth0:10.0.0.1<0>"),  # src/bootstrap.cc:119 (v2.23.4-1)
    warn("socketStartConnect: Connect to 10.0.0.2<41234> failed : Connection refused",
         "misc/socket.cc:484"),  # src/misc/socket.cc:485 (v2.23.4-1)
    info("misc/socket.cc:567 -> 2"),
    info("bootstrap.cc:95 -> 2"),
    info("init.cc:1450 ->"),
]


def test_a_bootstrap_failure_chain_is_an_error(tmp_path: Path) -> None:
    code, data = cli(tmp_path, BOOTSTRAP_CHAIN)
    assert code == 1
    fatal = only(findings_of(BOOTSTRAP_CHAIN), "log-nccl-error")
    assert any("misc/socket.cc:567 -> 2 (ncclSystemError)" in e for e in fatal.evidence)
    # the connection that failed leads; the chain follows from it
    assert data["cause"]["code"] == "log-connect-timeout"  # type: ignore[index]


def test_a_lone_cut_chain_is_an_error() -> None:
    assert codes(findings_of([info("bootstrap.cc:95 -> 2"), info("init.cc:1450 ->")])) == {
        "log-nccl-error": "error"}


# -- the OOB interface and the subnets are compared across nodes --------------------------------

# "NET/IB : Using%s %s; OOB %s:%s": src/transport/net_ib.cc:247 (v2.12.7-1) .. :839 (v2.28.9-1)
def ipoib(host: str, address: str) -> list[str]:
    return [info(f"Bootstrap : Using ib0:{address}<0>", host=host),
            info(f"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:{address}<0>",
                 host=host)]


def test_ipoib_subnets_that_differ_are_an_error_fixed_by_the_ethernet_nic() -> None:
    lines = [*ipoib("node1", "192.168.10.5"), *ipoib("node2", "192.168.20.5"),
             warn("socketStartConnect: Connect to 192.168.10.5<41234> failed : No route to host",
                  "misc/socket.cc:484", host="node2")]
    findings = findings_of(lines)
    subnet = [f for f in findings if f.code == "log-mixed-subnet"]
    assert {f.severity for f in subnet} == {"error"}
    assert "NCCL_SOCKET_IFNAME=<the Ethernet NIC every node has>" in subnet[0].fix
    assert findings[0].code == "log-mixed-subnet"
    assert "node2 has 192.168.20.0/24" in subnet[0].title or "node1 has" in subnet[0].title


def test_subnets_that_differ_but_connected_are_no_finding() -> None:
    lines = [*ipoib("node1", "192.168.10.5"), *ipoib("node2", "192.168.20.5"),
             info("Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0", host="node2")]
    assert "log-mixed-subnet" not in codes(findings_of(lines))


def test_the_oob_interface_is_compared() -> None:
    lines = [info("NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.1<0>"),
             info("NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.2<0>", host="node2")]
    finding = only(findings_of(lines), "log-mixed-interface")
    assert "OOB interface" in finding.title and "node2 has eth0" in finding.title


# -- banners printed without a prefix -----------------------------------------------------------

# NCCL_DEBUG=VERSION/WARN: "NCCL version %s" printed by VERSION() ("%s\n", src/debug.cc), one per
# process, here behind an Open MPI prefix on one of them
def test_unprefixed_banners_of_two_versions_are_a_mixed_version_error() -> None:
    log = parse_nccl_log(["NCCL version 2.18.1+cuda12.1", "[1,0]<stdout>:NCCL version "
                          "2.18.1+cuda12.1", "NCCL version 2.19.3+cuda12.2"])
    assert set(log.versions) == {"2.18.1", "2.19.3"} and len(log.banners) == 3
    finding = only(nccl_log_findings(log), "log-mixed-version")
    assert finding.severity == "error"
    assert any("printed without a host prefix" in e for e in finding.evidence)


def test_banners_of_one_version_are_fine() -> None:
    log = parse_nccl_log(["NCCL version 2.18.1+cuda12.1", "NCCL version 2.18.1+cuda12.1"])
    assert nccl_log_findings(log) == [] and log.lines_matched == 2


# -- network plugins ----------------------------------------------------------------------------

def test_plugin_rejected_as_too_old_on_one_node_loaded_on_another() -> None:
    lines = [
        # src/net.cc:471 (v2.19.1-1): "NET/Plugin: Loaded net plugin %s (v6)"
        info("NET/Plugin: Loaded net plugin AWS Libfabric (v6)"),
        info("Using network AWS Libfabric"),
        # src/net.cc:457 (v2.22.3-1)
        info("NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 "
             "and lower are not supported.", host="node2"),
        info("Using network IB", host="node2"),
    ]
    findings = findings_of(lines)
    assert findings[0].severity == "error"
    assert findings[0].code in ("log-plugin-load", "log-mixed-transport")
    transport = only(findings, "log-mixed-transport")
    assert any(e.startswith("because net plugin differs") for e in transport.evidence)
    assert "same network plugin" in transport.fix
    plugin = only(findings, "log-mixed-plugin")
    assert "node2 has rejected" in plugin.title


GLIBC = ("/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by "
         "/opt/amazon/ofi-nccl/lib/libnccl-net.so)")


def test_a_dlopen_error_is_the_cause_of_network_not_found() -> None:
    lines = [info("NCCL_NET set by environment to AWS Libfabric"),
             # src/net.cc:127 (v2.12.7-1) .. :360 (v2.20.5-1)
             info(f"NET/Plugin : Plugin load returned 2 : {GLIBC}."),
             # src/net.cc:195 (v2.12.7-1) .. :937 (v2.25.1-1)
             warn("Error: network AWS Libfabric not found.", "net.cc:627"),
             info("init.cc:1450 -> 5")]
    findings = findings_of(lines)
    lead = findings[0]
    assert (lead.code, lead.severity) == ("log-plugin-load", "error")
    assert "GLIBC_2.34" in lead.fix
    assert any("network AWS Libfabric not found" in e for e in lead.evidence)


def test_a_missing_plugin_library_is_not_a_failure() -> None:
    lines = [info("NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared "
                  "object file: No such file or directory."),
             info("NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.1<0>"),
             info("Using network IB")]
    assert findings_of(lines) == []


def test_a_process_whose_using_network_line_is_cut_used_its_plugin_network() -> None:
    # the real EFA capture: 8h200-3's "Using network Libfabric" is not in the excerpt, its
    # NET/OFI lines say the plugin selected efa
    log = parse_nccl_log(EFA.read_text(encoding="utf-8").splitlines())
    assert [r.transport for r in log.ranks] == ["Libfabric", "Libfabric"]
    assert "log-mixed-transport" not in codes(nccl_log_findings(log))


# -- "family N is neither AF_INET nor AF_INET6" ---------------------------------------------------

# src/misc/socket.cc:703 (v2.16.2-1) .. :585 (v2.30.7-1)
FAMILY = ("ncclSocketInit: connecting to address {0} with family {1} is neither AF_INET(2) nor "
          "AF_INET6(10)")


def test_family_0_with_a_plugin_in_the_log_is_mixed_networks_not_an_interface() -> None:
    lines = [info("NET/Plugin: Loaded net plugin GPUDirectTCPX (v7)"),
             info("Using network GPUDirectTCPX"),
             warn(FAMILY.format("0.0.0.0<0>", 0), "misc/socket.cc:703", host="node2")]
    finding = only(findings_of(lines), "log-address-family")
    assert finding.severity == "error"
    assert "same network plugin" in finding.fix
    assert "NCCL_SOCKET_IFNAME does not fix this" in finding.fix


def test_family_error_with_an_ifname_that_matched_nothing() -> None:
    lines = [info("NCCL_SOCKET_IFNAME set by environment to ens9"),
             warn(FAMILY.format("<unknown>", 12345), "misc/socket.cc:703")]
    finding = only(findings_of(lines), "log-address-family")
    assert "NCCL_SOCKET_IFNAME=ens9 matched no interface" in finding.title
    assert "name an interface that exists" in finding.fix


# -- exception text without the word NCCL ------------------------------------------------------

TORCH_BLOCK = [
    # NCCLUtils.hpp C10D_NCCL_CHECK (pytorch@aac9c44) and getNcclErrorDetailStr (pytorch@37ee6bc)
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "NCCLUtils.hpp:275, internal error - please report this issue to the NCCL developers, NCCL "
    "version 2.19.3",
    "[rank1]: ncclInternalError: Internal check failed.",
    "[rank1]: Last error:",
    # src/bootstrap.cc:37 (v2.4.8-1) .. :126 (v2.30.7-1)
    "[rank1]: Bootstrap : no socket interface found",
]


def test_exception_lines_without_nccl_are_read(tmp_path: Path) -> None:
    log = parse_nccl_log(TORCH_BLOCK[1:])
    assert log.lines_matched == 3
    assert [(m.kind, m.cls) for m in log.errors] == [("nccl-error", "torch-nccl"),
                                                     ("no-interface", "interface")]
    code, data = cli(tmp_path, TORCH_BLOCK)
    assert code == 1 and data["cause"]["code"] == "log-no-interface"  # type: ignore[index]


def test_last_error_text_the_catalogue_does_not_know_is_kept() -> None:
    log = parse_nccl_log(["[rank0]: Last error:", "[rank0]: something NCCL never printed"])
    assert [(m.text, m.kind) for m in log.errors] == [("something NCCL never printed",
                                                       "last-error")]


def test_a_log_with_nothing_recognised_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("epoch 1 loss 2.3\nepoch 2 loss 2.1\n", encoding="utf-8")
    assert main(["nccl-log", str(path)]) == 2


# -- Connection closed by remote peer ------------------------------------------------------------

# src/misc/socket.cc:49 (v2.16.2-1) .. :58 (v2.30.7-1)
CLOSED = "socketProgress: Connection closed by remote peer 10.0.0.2<52110>"


def test_a_close_leads_over_an_out_of_memory_after_it() -> None:
    lines = [info("NCCL version 2.21.5+cuda12.4"),
             warn(CLOSED, "misc/socket.cc:50"),
             info("misc/socket.cc:753 -> 6"),
             # "Failed to CUDA calloc %ld bytes": src/include/alloc.h:105 (v2.14.3-1) .. :493
             warn("Failed to CUDA calloc 8388608 bytes", "include/alloc.h:121"),
             info("proxy.cc:1493 -> 2")]
    findings = findings_of(lines)
    assert findings[0].code == "log-peer-closed"
    assert "its process exited" in findings[0].title
    assert "log-nccl-message" in codes(findings)  # the allocation failure, after it


def test_a_receive_reset_by_the_peer_is_the_peer_exiting_not_a_firewall() -> None:
    # src/misc/socket.cc:46 (v2.27.5-1): "socketProgressOpt: Call to %s %s failed : %s", the
    # strerror of ECONNRESET, after the communicator was up (src/init.cc "Init COMPLETE")
    lines = [info("comm 0x55 rank 1 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE"),
             warn("socketProgressOpt: Call to recv from 10.0.0.3<45678> failed : Connection "
                  "reset by peer", "misc/socket.cc:46"),
             info("misc/socket.cc:58 -> 6"), info("transport/net_socket.cc:400 -> 6"),
             info("proxy.cc:700 -> 6")]
    findings = findings_of(lines)
    assert findings[0].code == "log-peer-closed"
    assert "log-connect-timeout" not in codes(findings)  # no firewall advice
    assert any("10.0.0.3<45678>" in e for e in findings[0].evidence)


@pytest.mark.parametrize("line", [
    warn("socketTryAccept: Accept failed: Too many open files", "misc/socket.cc:453"),
    warn("[Service thread] Accept failed Too many open files", "proxy.cc:1632"),
])
def test_accept_out_of_file_descriptors_is_the_open_files_limit(line: str) -> None:
    # src/misc/socket.cc:453 and src/proxy.cc:1632 (v2.27.5-1), strerror(EMFILE)
    findings = findings_of([info("NCCL version 2.27.5+cuda12.9"), line,
                            info("misc/socket.cc:480 -> 2")])
    assert (findings[0].code, findings[0].severity) == ("log-open-files", "error")
    assert "ulimit -n" in findings[0].fix
    assert "SOCKET_IFNAME" not in findings[0].fix


def test_a_close_at_bootstrap_accept_with_nothing_else_is_a_foreign_client() -> None:
    lines = [info("NCCL version 2.21.5+cuda12.4"),
             info("Bootstrap : Using eth0:10.0.0.1<0>"),
             warn(CLOSED, "misc/socket.cc:50"),
             info("misc/socket.cc:752 -> 6"), info("misc/socket.cc:428 -> 6"),
             info("bootstrap.cc:252 -> 6")]
    lead = findings_of(lines)[0]
    assert lead.code == "log-peer-closed" and "not NCCL" in lead.title
    assert "2.30.7" in lead.fix
    newer = [line.replace("2.21.5", "2.30.7") for line in lines]
    assert "not NCCL" not in findings_of(newer)[0].title


# -- CUDA failures inside a node ------------------------------------------------------------------

def test_cuda_ipc_failure_leads_over_the_frameworks_error() -> None:
    lines = [
        # src/transport/p2p.cu:547 (v2.3.5-5) .. src/transport/p2p.cc:275 (v2.7.8-1)
        warn("failed to open CUDA IPC handle : 217 peer access is not supported",
             "transport/p2p.cc:275"),
        info("transport/p2p.cc:298 -> 1"),
        TORCH_BLOCK[0].replace("internal error - please report this issue to the NCCL "
                               "developers", "unhandled cuda error (run with NCCL_DEBUG=INFO "
                               "for details)"),
    ]
    findings = findings_of(lines)
    lead = findings[0]
    assert (lead.code, lead.severity) == ("log-nccl-message", "error")
    assert "peer-to-peer" in lead.title and "NCCL_P2P_DISABLE=1" in lead.fix
    assert findings[1].code == "log-nccl-error"
    assert any("follows from the first failure" in e for e in findings[1].evidence)


def test_a_warning_that_fails_the_call_leads_over_the_chain_it_starts(tmp_path: Path) -> None:
    # src/init.cc:737 (v2.27.5-1): WARN, `ret = ncclInvalidUsage; goto fail;`; the callers'
    # traces (src/include/checks.h "%s:%d -> %d") carry the 5 up
    lines = [
        info("NCCL version 2.27.5+cuda12.9"),
        warn("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000",
             "init.cc:737"),
        info("init.cc:1395 -> 5"),
        info("init.cc:1888 -> 5"),
    ]
    code, data = cli(tmp_path, lines)
    assert code == 1
    findings = findings_of(lines)
    assert (findings[0].code, findings[0].severity) == ("log-nccl-message", "error")
    assert "own GPU" in findings[0].fix and "local_rank" in findings[0].fix
    assert data["cause"]["code"] == "log-nccl-message"  # type: ignore[index]
    chain = only(findings, "log-nccl-error")
    assert any("follows from the first failure" in e for e in chain.evidence)


def test_a_cuda_failure_is_read_by_the_file_nccl_failed_in() -> None:
    # NCCL 2.27.5: src/transport/nvls.cc:58 CUCHECK(cuMulticastCreate(...)) prints
    # src/include/cudawrap.h:34 "Cuda failure %d '%s'" (801: CUDA_ERROR_NOT_SUPPORTED) and
    # returns ncclUnhandledCudaError; its caller's NCCLCHECKGOTO at :245 traces it
    lines = [
        info("NCCL version 2.27.5+cuda12.9"),
        warn("Cuda failure 801 'operation not supported'", "transport/nvls.cc:58"),
        info("transport/nvls.cc:245 -> 1"),
        info("init.cc:1620 -> 1"),
    ]
    fatal = only(findings_of(lines), "log-nccl-error")
    assert "NVLS" in " ".join(fatal.evidence)
    assert "fabric manager" in fatal.fix and "NCCL_NVLS_ENABLE=0" in fatal.fix
    # the same failure in a file whose class has no reading of its own (src/include/alloc.h:56
    # CUCHECK(cuMemCreate(...)) in v2.27.5-1, memory): read as the CUDA call it is
    oom = [lines[0], warn("Cuda failure 2 'out of memory'", "include/alloc.h:56"),
           info("include/alloc.h:217 -> 1"), info("init.cc:1620 -> 1")]
    fatal = only(findings_of(oom), "log-nccl-error")
    assert any("cudaErrorMemoryAllocation" in e for e in fatal.evidence)
    assert "nvidia-smi" in fatal.fix and "NCCL_BUFFSIZE" in fatal.fix
    # a chain through files without a reading keeps the generic advice
    other = [lines[0], info("init.cc:1620 -> 3")]
    assert "first WARN line" in only(findings_of(other), "log-nccl-error").fix


@pytest.mark.parametrize("warning", [
    # src/transport/net_ib.cc:998 (v2.12.10-1) .. :1119 (v2.19.4-1)
    ("NET/IB : req 0/1 tag 7 peer 10.0.0.3<45678> collective mismatch error, local size 65536 "
     "remote size 1048576", "transport/net_ib.cc:1119"),
    # src/transport/net_socket.cc:561 (v2.27.3-1) .. :636 (v2.30.7-1)
    ("NET/Socket : peer 10.0.0.3<45678> message truncated : receiving 1048576 bytes instead of "
     "65536. If you believe your socket network is in a healthy state, there may be a mismatch "
     "in collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks",
     "transport/net_socket.cc:561"),
])
def test_a_size_the_peer_did_not_expect_is_ranks_that_disagree(warning: tuple[str, str]) -> None:
    lines = [info("NCCL version 2.19.4+cuda12.3"),
             info("comm 0x55 rank 1 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE"),
             warn(*warning), info("transport/net.cc:1350 -> 5"), info("proxy.cc:700 -> 5")]
    lead = nccl_log_findings(parse_nccl_log(lines))[0]
    assert (lead.code, lead.severity) == ("log-nccl-message", "error")
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in lead.fix and "NCCL_PROTO" in lead.fix
    # not the network's causes: nothing is wrong with the fabric or the interface
    assert "GID" not in lead.fix and "SOCKET_IFNAME" not in lead.fix


def test_a_chain_names_the_warning_its_process_printed_before_it() -> None:
    # src/transport/net_ib.cc:103 (v2.22.3-1) "NET/IB : %s:%d Got async event : %s": NCCL's
    # async thread prints it and carries on; the call that then fails traces its return
    lines = [info("NCCL version 2.22.3+cuda12.6"),
             info("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ens1:10.0.0.2<0>"),
             warn("NET/IB : mlx5_0:1 Got async event : local catastrophic error",
                  "transport/net_ib.cc:103"),
             info("Bootstrap : Using ens1:10.0.0.2<0>", pid=200),  # another process
             warn("NET/IB : mlx5_1:1 Got async event : port error", "transport/net_ib.cc:103",
                  pid=200),
             info("transport/net_ib.cc:1500 -> 2"), info("transport/net.cc:1350 -> 2")]
    fatal = only(findings_of(lines), "log-nccl-error")
    assert "line 3" in fatal.fix
    assert any("local catastrophic error" in e for e in fatal.evidence)
    assert not any("port error" in e for e in fatal.evidence)  # not the other process's


# src/init.cc (v2.27.5-1): "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId
# 0x%llx - Init START" when ncclCommInitRank begins, "... - Init COMPLETE" when it returns
def init_line(rank: int, pid: int, host: str, end: str) -> str:
    return info(f"ncclCommInitRank comm 0x55{rank} rank {rank} nranks 2 cudaDev 0 nvmlDev 0 "
                f"busId 1000 commId 0xabc - Init {end}", host=host, pid=pid)


def test_an_initialisation_that_started_and_did_not_finish_is_reported(tmp_path: Path) -> None:
    lines = [info("Bootstrap : Using ens1:10.0.0.2<0>", host="a", pid=1), init_line(0, 1, "a",
             "START"), info("Bootstrap : Using ens1:10.0.0.3<0>", host="b", pid=2),
             init_line(1, 2, "b", "START"), init_line(1, 2, "b", "COMPLETE")]
    finding = only(findings_of(lines), "log-init-unfinished")
    assert finding.severity == "warning"
    assert "1 of the 2 processes" in finding.title
    assert any("line 2: Init START of rank 0 (a pid 1)" in e for e in finding.evidence)
    assert not any("pid 2" in e for e in finding.evidence)
    code, data = cli(tmp_path, lines)
    assert code == 0 and data["init_unfinished"] == [["a:1", 2]]
    # every process finished: nothing to report
    done = [*lines, init_line(0, 1, "a", "COMPLETE")]
    assert "log-init-unfinished" not in codes(findings_of(done))
    # one that failed after the start is reported by its failure, not as unfinished
    failed = [*lines, info("bootstrap.cc:95 -> 2", host="a", pid=1)]
    assert "log-init-unfinished" not in codes(findings_of(failed))
    assert "log-nccl-error" in codes(findings_of(failed))


def test_a_log_of_half_the_ranks_says_the_others_are_missing() -> None:
    finding = only(findings_of([init_line(0, 1, "a", "START")]), "log-init-unfinished")
    assert any("2 ranks and the log holds 1" in e for e in finding.evidence)


@pytest.mark.parametrize(("error", "found"), [
    ("libnccl-net.so: cannot open shared object file: No such file or directory", False),
    ("/usr/lib/libnccl-net.so: undefined symbol: fi_getinfo", True),
])
def test_the_219_plugin_line_reports_a_failure_only_for_a_library_that_is_there(
        error: str, found: bool) -> None:
    # src/net.cc:231 (v2.19.3-1): "NET/Plugin : dlerror=%s No plugin found (%s), using internal
    # implementation", printed after any dlopen that failed, also of a library not installed
    lines = [info("NCCL version 2.19.3+cuda12.3"),
             info(f"NET/Plugin : dlerror={error} No plugin found (libnccl-net.so), using "
                  "internal implementation"),
             info("NET/IB : Using [0]mlx5_0:1/IB ; OOB ens1:10.0.0.2<0>"),
             info("Using network IB")]
    assert ("log-plugin-load" in codes(findings_of(lines))) == found


@pytest.mark.parametrize(("failure", "name", "words"), [
    # src/include/checks.h:16 (v2.27.5-1) CUDACHECK: "Cuda failure '%s'", cudaGetErrorString
    ("Cuda failure 'invalid device ordinal'", "cudaErrorInvalidDevice", "LOCAL_RANK"),
    ("Cuda failure 'system not yet initialized'", "cudaErrorSystemNotReady", "fabricmanager"),
    ("Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'",
     "cudaErrorInsufficientDriver", "driver"),
    # src/include/cudawrap.h:34 (v2.27.5-1) CUCHECK: "Cuda failure %d '%s'"
    ("Cuda failure 700 'an illegal memory access was encountered'", "cudaErrorIllegalAddress",
     "CUDA_LAUNCH_BLOCKING=1"),
])
def test_a_cuda_failure_is_read_by_cudas_error(failure: str, name: str, words: str) -> None:
    lines = [info("NCCL version 2.27.5+cuda12.9"), warn(failure, "init.cc:1450"),
             info("init.cc:1450 -> 1"), info("init.cc:1888 -> 1")]
    fatal = only(findings_of(lines), "log-nccl-error")
    assert any(name in e for e in fatal.evidence)
    assert words in fatal.fix


def test_a_warning_whose_error_nccl_handled_is_no_error() -> None:
    # src/graph/xml.cc:419 (v2.27.5-1) "Could not find real path of %s" returns
    # ncclSystemError; in a VM the caller carries on, and the process completes its init
    warning = warn("Could not find real path of /sys/class/pci_bus/0000:00/../../0000:00:05.0",
                   "graph/xml.cc:419")
    went_on = [info("NCCL version 2.27.5+cuda12.9"), warning,
               info("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"),
               info("comm 0x55 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0xabc - "
                    "Init COMPLETE")]
    log = parse_nccl_log(went_on)
    assert log.warnings[0].fails and log.warnings[0].carried_on
    assert codes(nccl_log_findings(log)) == {"log-nccl-message": "warning"}
    # the same warning as the last thing the process printed: it ended the call
    assert codes(findings_of(went_on[:2]))["log-nccl-message"] == "error"
    # printed again after the progress, and nothing after that: the last one ended the call
    again = [*went_on, warning]
    assert codes(findings_of(again))["log-nccl-message"] == "error"


def test_a_close_follows_the_failure_of_the_peer_when_that_is_in_the_log(tmp_path: Path) -> None:
    # node a's log first, then node b's (logs of two nodes put one after the other): a sees
    # b close (src/misc/socket.cc:71 (v2.27.5-1), returning ncclRemoteError), b ran out of
    # memory (src/include/checks.h:16 CUDACHECK)
    lines = [
        info("comm 0x55 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE", host="a"),
        warn("socketProgress: Connection closed by remote peer b<45678>", "misc/socket.cc:71",
             host="a"),
        info("misc/socket.cc:80 -> 6", host="a"),
        info("comm 0x56 rank 1 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE", host="b",
             pid=200),
        warn("Cuda failure 'out of memory'", "enqueue.cc:100", host="b", pid=200),
        info("enqueue.cc:110 -> 1", host="b", pid=200),
    ]
    code, data = cli(tmp_path, lines)
    cause = data["cause"]
    assert code == 1 and cause["code"] == "log-nccl-error"  # type: ignore[index]
    assert "out of memory" in cause["title"] and "nvidia-smi" in cause["fix"]  # type: ignore[index]
    closed = only(findings_of(lines), "log-peer-closed")
    assert any("failed on its own" in e for e in closed.evidence)
    # without b's failure in the log, the close is what there is to read
    assert findings_of(lines[:3])[0].code == "log-peer-closed"
    # b's proxy giving up on the connection (src/proxy.cc:1665, v2.27.5-1) follows from a peer
    # or the network: not a failure of b's own, so the close still leads
    proxy = [*lines[:4], warn("[Service thread] Error encountered progressing operation=Connect, "
                              "res=3, closing connection", "proxy.cc:1665", host="b", pid=200)]
    assert findings_of(proxy)[0].code == "log-peer-closed"


def watchdog(rank: int, seq: int, op: str, numel: int) -> str:
    """PyTorch's watchdog line (ProcessGroupNCCL.cpp WorkNCCL::checkTimeout, pytorch@87602c5:
    "Watchdog caught collective operation timeout: " and WorkNCCL's own text), as torchrun
    prefixes it."""
    return (f"[rank{rank}]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank {rank}] "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
            f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for {600010 + rank} "
            "milliseconds before timing out.")


def test_watchdog_timeouts_at_different_collectives_name_the_rank_behind() -> None:
    lines = [watchdog(0, 5, "ALLREDUCE", 1024), watchdog(1, 5, "ALLREDUCE", 1024),
             watchdog(3, 4, "BROADCAST", 10)]
    lead = findings_of(lines)[0]
    assert lead.code == "log-nccl-message" and lead.severity == "error"
    assert "SeqNum 4 (line 3)" in lead.fix
    assert any("SeqNum 4 (BROADCAST) at line 3; SeqNum 5 (ALLREDUCE) at lines 1, 2" in e
               for e in lead.evidence)
    # one collective, two operations: ranks whose code paths parted
    split = [watchdog(0, 5, "ALLREDUCE", 1024), watchdog(1, 5, "BROADCAST", 10)]
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in findings_of(split)[0].fix
    # all at the same collective: nothing to tell them apart
    same = [watchdog(0, 5, "ALLREDUCE", 1024), watchdog(1, 5, "ALLREDUCE", 1024)]
    assert "SeqNum" not in findings_of(same)[0].fix


def test_versions_that_disagree_get_a_fix_not_only_causes() -> None:
    # src/init.cc:775 (v2.23.4-1) .. :1043 (v2.30.7-1), returning ncclInvalidUsage
    lines = [info("NCCL version 2.23.4+cuda12.6"),
             warn("Mismatched NCCL version detected : rank 0 version 22304 rank 1 version 22103",
                  "init.cc:775"),
             info("init.cc:800 -> 5")]
    lead = findings_of(lines)[0]
    assert (lead.code, lead.severity) == ("log-nccl-message", "error")
    assert "same NCCL on every node" in lead.fix and "torch.cuda.nccl.version()" in lead.fix


def test_p2p_that_nvml_disables_between_nvlink_gpus_is_read_as_p2p() -> None:
    # src/graph/paths.cc:350 (v2.27.5-1): NVML says no peer access between NVLink-connected
    # GPUs; NCCL returns ncclUnhandledCudaError (reading sysfs, the topology class, is fine)
    lines = [info("NCCL version 2.27.5+cuda12.9"),
             warn("P2P is disabled between NVLINK connected GPUs 0 and 1. This should not be the "
                  "case given their connectivity, and is probably due to a hardware issue. If "
                  "you still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.",
                  "graph/paths.cc:350"),
             info("graph/paths.cc:360 -> 1")]
    lead = findings_of(lines)[0]
    assert (lead.code, lead.severity) == ("log-nccl-message", "error")
    assert "peer-to-peer" in lead.title and "NCCL_TOPO_FILE" not in lead.fix


def test_a_fatal_condition_printed_at_info_is_read() -> None:
    # src/enqueue.cc:52 (v2.25.1-1): NCCL 2.25 lowers the kernels' shared memory and goes on
    lines = [info("NCCL version 2.25.1+cuda12.8"),
             info("ncclMaxSharedMem 77312 exceeds device/fn maxSharedMem 73728")]
    finding = only(findings_of(lines), "log-nccl-message")
    assert finding.severity == "error"
    assert "older than the GPU" in finding.fix


# -- single-host logs ---------------------------------------------------------------------------

def single_host(interface: str, address: str) -> list[str]:
    return [line for rank in (0, 1) for line in (
        info(f"Bootstrap : Using {interface}:{address}<0>", host="box", pid=10 + rank, dev=rank),
        # src/init.cc "comm %p rank %d nranks %d cudaDev %d busId %lx - Init COMPLETE"
        info(f"comm 0x55 rank {rank} nranks 2 cudaDev {rank} busId 1000 - Init COMPLETE",
             host="box", pid=10 + rank, dev=rank))]


@pytest.mark.parametrize(("interface", "address"), [("tun0", "10.8.0.2"), ("docker0",
                                                     "172.17.0.1"), ("veth12ab", "10.1.0.2")])
def test_single_host_logs_get_no_multi_node_alarms(interface: str, address: str) -> None:
    log = parse_nccl_log(single_host(interface, address))
    assert log.multi_node is False
    assert nccl_log_findings(log) == []


def test_the_bootstrap_interface_is_not_called_unused() -> None:
    lines = [line for host, n in (("node1", 2), ("node2", 3)) for line in (
        info(f"Bootstrap : Using ens1:10.65.0.{n}<0>", host=host),
        info(f"NET/Socket : Using [0]ens1:10.65.0.{n}<0> [1]eth0:172.20.0.{n}<0>", host=host))]
    finding = only(findings_of(lines), "log-bootstrap-management")
    assert not any("did not use it for bootstrap" in e for e in finding.evidence)


def test_any_unreachable_entry_of_a_socket_list_is_flagged() -> None:
    # the one channel line in the log goes through [0]; NCCL spreads channels over all entries,
    # and a log rarely shows every channel ("Channel %02d/%d : %d[%d] -> %d[%d] [%s] via
    # NET/%s/%d%s%s": src/transport/net.cc)
    lines = [info("NET/Socket : Using [0]eno1:10.0.0.1<0> [1]veth1:fe80::1%veth1<0>"),
             info("NET/Socket : Using [0]eno1:10.0.0.2<0> [1]veth1:fe80::1%veth1<0>",
                  host="node2"),
             info("Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0"),
             info("Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0", host="node2")]
    finding = only(findings_of(lines), "log-bootstrap-management")
    assert "veth1" in finding.title and finding.severity == "warning"


# -- RoCE -----------------------------------------------------------------------------------------

ROCE = info("NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>")


@pytest.mark.parametrize("version", [None, "2.19.3"])
def test_a_qp_failure_before_2_21_with_the_gid_unset_gets_the_gid_hint(version: str | None) -> None:
    lines = [*([info(f"NCCL version {version}+cuda12.2")] if version else []), ROCE,
             # "Call to %s failed with error %s": src/misc/ibvwrap.cc (IBV_INT_CHECK_RET_ERRNO)
             warn("Call to ibv_modify_qp failed with error Connection timed out",
                  "misc/ibvwrap.cc:106")]
    finding = only(findings_of(lines), "log-ib-qp-failure")
    assert "set NCCL_IB_GID_INDEX to the RoCE v2 IPv4 GID index" in finding.fix


def test_a_qp_failure_on_2_21_does_not_blame_the_gid() -> None:
    lines = [info("NCCL version 2.21.5+cuda12.4"), ROCE,
             warn("Call to ibv_modify_qp failed with error Connection timed out",
                  "misc/ibvwrap.cc:106")]
    fix = only(findings_of(lines), "log-ib-qp-failure").fix
    assert "NCCL 2.21 or newer chooses the RoCE v2 GID itself" in fix
    assert "set NCCL_IB_GID_INDEX" not in fix and "set it to" not in fix


def test_init_to_rtr_timeout_on_valid_roce_v2_gids_suggests_rail_pairing() -> None:
    # "Call to ibv_modify_qp failed with %d %s, %s": src/misc/ibvwrap.cc:291 (v2.24.3-1), the
    # second %s as ibvModifyQpLog writes it
    lines = [info("NCCL version 2.27.5+cuda12.9"), ROCE, warn(
        "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_1:1, curr state "
        "INIT, next state RTR, local GID index 3, local GID ::ffff:10.1.1.2, remote GID "
        "::ffff:10.2.1.3", "misc/ibvwrap.cc:301")]
    finding = only(findings_of(lines), "log-ib-qp-failure")
    assert finding.fix.startswith("pair the NICs rail by rail: export NCCL_CROSS_NIC=0")


def test_an_iwarp_device_listed_as_roce_beside_mlx5() -> None:
    lines = [info("NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [2]irdma0:1/RoCE [RO]; "
                  "OOB eth0:10.0.0.1<0>")]
    finding = only(findings_of(lines), "log-mixed-rdma-driver")
    assert "irdma0 (irdma)" in finding.title
    assert "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in finding.fix


def test_flush_first_in_the_log_on_ib_with_gpudirect_is_acs() -> None:
    lines = [info("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.1<0>"),
             info("Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA"),
             # "NET/IB : Got completion from peer %s with error %d, opcode %d, len %d, vendor err
             # %d (%s)": src/transport/net_ib.cc:1294 (v2.18.1-1) .. :1333 (v2.19.4-1)
             warn("NET/IB : Got completion from peer 10.0.0.2<46045> with error 5, opcode 0, "
                  "len 0, vendor err 244 (Recv)", "transport/net_ib.cc:1323")]
    lead = findings_of(lines)[0]
    assert lead.code == "log-ib-completion-error" and "ACS or the IOMMU" in lead.title


# -- plugin data-path warnings --------------------------------------------------------------------

def test_a_tcp_offload_timeout_gets_a_reading() -> None:
    # "%p:%p, nic %d, %s, %s %s ctrl timeout cnt %lu, nanos %lu": GPUDirect-TCPX
    # src/net_tcpx.cc:1238 (4b8ea7f); plugins pass __PRETTY_FUNCTION__ as the WARN's file
    line = ("node1:100:120 [0] ncclResult_t tcpxTest(void*, int*, int*):1238 NCCL WARN "
            "0x7f21:0x7f22, nic 2, 10.0.0.1<34567>, rx ctrl, tcpxRecv ctrl timeout cnt 3, nanos "
            "10000000000")
    log = parse_nccl_log([line, line.replace("cnt 3", "cnt 4")])
    assert next((m.cls, m.source) for m in log.warnings) == (
        "tcp-offload", "ncclResult_t tcpxTest(void*, int*, int*):1238")
    finding = only(nccl_log_findings(log), "log-nccl-message")
    assert finding.severity == "warning" and "TCP data-path plugin" in finding.title


def test_every_catalogued_warning_is_explained() -> None:
    # a catalogued message never ends up "unexplained": one per class, quoted with its origin
    lines = [warn("PARAM: Duplicate registration for key \"x\", ignoring.",
                  "param/param_registry.cc:40"),
             warn("NCCL_WORK_FIFO_DEPTH=3 is being ignored because it is not a power of 2.",
                  "init.cc:420")]
    log = parse_nccl_log(lines)
    assert all(m.cls for m in log.warnings)
    found = nccl_log_findings(log)
    assert "log-nccl-warning" not in codes(found)
    assert any("printed by src/" in e for f in found for e in f.evidence)


def test_json_carries_each_messages_class(tmp_path: Path) -> None:
    _, data = cli(tmp_path, BOOTSTRAP_CHAIN)
    warnings = data["warnings"]
    assert isinstance(warnings, list)
    assert warnings[0]["cls"] == "socket" and "src/misc/socket.cc" in warnings[0]["origin"]




def test_the_warning_named_comes_before_the_first_failure_not_after_it() -> None:
    # src/proxy.cc (v2.18.5-1): "[Proxy Service %d] Failed to execute operation %s from rank %d,
    # retcode %d" is the first failure; "[Service thread] Error encountered progressing
    # operation=%s, res=%d, closing connection" and the rank's chain come after it: a warning
    # printed after the first failure is no cause of it
    lines = [info("NCCL version 2.18.5+cuda12.2"),
             warn("[Proxy Service 0] Failed to execute operation Connect from rank 0, retcode 2",
                  "proxy.cc:1497"),
             warn("[Service thread] Error encountered progressing operation=Connect, res=2, "
                  "closing connection", "proxy.cc:1448"),
             info("transport/net.cc:330 -> 2"), info("init.cc:900 -> 2")]
    fatal = only(findings_of(lines), "log-nccl-error")
    assert "Proxy Service 0" in fatal.title
    assert "line 3" not in fatal.fix and "the warning before it" not in " ".join(fatal.evidence)
    # with a warning before it, that one is named
    before = [info("NCCL version 2.18.5+cuda12.2"),
              warn("NET/IB : mlx5_0:1 Got async event : port error", "transport/net_ib.cc:100"),
              *lines[1:]]
    assert "line 2" in only(findings_of(before), "log-nccl-error").fix


def test_a_root_that_got_a_process_of_another_job_is_an_error_about_the_job(
        tmp_path: Path) -> None:
    # src/bootstrap.cc:140 (v2.22.3-1) "Bootstrap Root : mismatch in rank count from procs %d :
    # %d": the root's thread jumps to its end and serves no one; every rank then waits in
    # bootstrap. Not the network: two jobs on one root, or world sizes that differ
    lines = [info("Bootstrap : Using eth0:10.0.0.1<0>"), info("NCCL version 2.22.3+cuda12.6"),
             info("Bootstrap : Using eth0:10.0.0.2<0>", host="node2", pid=200),
             warn("Bootstrap Root : mismatch in rank count from procs 16 : 8", "bootstrap.cc:140")]
    code, report = cli(tmp_path, lines)
    assert code == 1
    lead = report["findings"][0]  # type: ignore[index]
    assert (lead["code"], lead["severity"]) == ("log-nccl-message", "error")
    assert "NCCL_COMM_ID" in lead["fix"] and "WORLD_SIZE" in lead["fix"]
    assert "firewall" not in lead["fix"]


def test_an_ib_hca_filter_that_matched_nothing_is_named_in_the_fix() -> None:
    # src/transport/net_ib.cc (v2.18.5-1): "NCCL_IB_HCA set to %s" (:180), then NET/IB keeps
    # no device, "NET/IB : No device found." (:252), and NCCL runs on its socket transport
    lines = []
    for host, pid, address, rank in (("node1", 100, "10.0.0.1", 0), ("node2", 200, "10.0.0.2", 1)):
        lines += [info(f"Bootstrap : Using eth0:{address}<0>", host, pid),
                  info("NCCL version 2.18.5+cuda12.2", host, pid),
                  info("NCCL_IB_HCA set to mlx5_9", host, pid),
                  info("NET/IB : No device found.", host, pid),
                  info(f"NET/Socket : Using [0]eth0:{address}<0>", host, pid),
                  info("Using network Socket", host, pid),
                  info(f"comm 0x55 rank {rank} nranks 2 cudaDev 0 busId 18000 - Init COMPLETE",
                       host, pid)]
    fallback = only(findings_of(lines), "log-socket-fallback")
    assert fallback.fix.startswith("NCCL_IB_HCA=mlx5_9 matched no RDMA device")
    # a device NCCL could not open is another cause: the filter is then not blamed first
    opened = [*lines[:3], warn("Call to ibv_open_device failed", "misc/ibvwrap.cc:230"),
              *lines[3:]]
    assert not only(findings_of(opened), "log-socket-fallback").fix.startswith("NCCL_IB_HCA")
    # the value is the log's: quoted for the shell, as a user would paste it
    hostile = [line.replace("NCCL_IB_HCA set to mlx5_9", "NCCL_IB_HCA set to $(id)")
               for line in lines]
    assert only(findings_of(hostile), "log-socket-fallback").fix.startswith(
        "NCCL_IB_HCA='$(id)' matched no RDMA device")


# "Bootstrap : Using%s": src/bootstrap.cc:56 (v2.20.5-1); socketStartConnect's "Connect to %s
# failed : %s": src/misc/socket.cc:484 (v2.20.5-1)
@pytest.mark.parametrize(("addresses", "expected"), [
    (("172.17.0.2", "172.17.0.2"), True),  # two containers, each on its own Docker bridge
    (("10.0.0.1", "10.0.0.2"), False),
    (("127.0.0.1", "127.0.0.1"), False),  # loopback: the interface checks' business
])
def test_hosts_that_bootstrap_from_one_address_reach_themselves(
        addresses: tuple[str, str], expected: bool) -> None:
    lines = []
    for (host, pid), address in zip((("node1", 100), ("node2", 200)), addresses, strict=True):
        lines += [info(f"Bootstrap : Using eth0:{address}<0>", host, pid),
                  info("NCCL version 2.20.5+cuda12.4", host, pid)]
    lines += [warn(f"socketStartConnect: Connect to {addresses[0]}<45761> failed : Software "
                   "caused connection abort", "misc/socket.cc:484", "node2", 200),
              info("misc/socket.cc:565 -> 2", "node2", 200)]
    findings = findings_of(lines)
    assert ("log-shared-address" in codes(findings)) == expected
    if expected:
        assert findings[0].code == "log-shared-address" and findings[0].severity == "error"
        assert "--network=host" in findings[0].fix and "172.17.0.2" in findings[0].title


# -- PyTorch's lines as its libraries print them ------------------------------------------------

def test_a_torch_message_that_runs_on_past_its_first_sentence_is_read() -> None:
    # ProcessGroupNCCL.cpp HeartbeatMonitor::runLoop (pytorch@87602c5): the format the
    # catalogue quotes is the message's first sentence; PyTorch appends its advice on the same
    # line. The watchdog thread itself is blocked: not a collective that timed out
    line = ("[rank3]:[E1207 10:00:00.000000 123 ProcessGroupNCCL.cpp:1400] [PG ID 0 PG GUID "
            "0(default_pg) Rank 3] ProcessGroupNCCL's watchdog got stuck for 480 seconds without "
            "making progress in monitoring enqueued collectives. This typically indicates a "
            "NCCL/CUDA API hang blocking the watchdog.")
    lead = findings_of([line])[0]
    assert (lead.code, lead.severity) == ("log-nccl-message", "error")
    assert "blocked inside a CUDA or NCCL call" in lead.fix


def test_a_warning_of_c10_is_read_without_the_function_it_names() -> None:
    # c10's warning handler (libc10.so: "Warning: ", " (function "), around Gloo's
    # ProcessGroupGloo.cpp warning (pytorch@87602c5): Gloo falls back to loopback and goes on,
    # which breaks a job of several nodes only: a warning, not an error
    lines = ["[W ProcessGroupGloo.cpp:745] Warning: Unable to resolve hostname to a (local) "
             "address. Using the loopback address as fallback. Manually set the network "
             "interface to bind to with GLOO_SOCKET_IFNAME. (function operator())"]
    found = only(findings_of(lines), "log-nccl-message")
    assert found.severity == "warning" and "GLOO_SOCKET_IFNAME" in found.fix


def test_a_cuda_error_in_the_watchdogs_exception_is_read_as_that_error() -> None:
    # ProcessGroupNCCL.cpp (pytorch@87602c5) "Process group watchdog thread terminated with
    # exception: %s", the exception being CUDA's "CUDA error: %s" (cudaGetErrorString of
    # cudaErrorIllegalAddress): a kernel faulted, no collective timed out
    lines = ["[rank0]:[E1207 10:00:00.000 123 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID "
             "0(default_pg) Rank 0] Process group watchdog thread terminated with exception: "
             "CUDA error: an illegal memory access was encountered"]
    lead = findings_of(lines)[0]
    assert lead.fix.startswith("rerun with CUDA_LAUNCH_BLOCKING=1")
    assert any("cudaErrorIllegalAddress" in e for e in lead.evidence)


def test_a_torch_message_of_two_sentences_is_read_with_what_follows_them() -> None:
    # WorkNCCL::handleException (pytorch@87602c5): two sentences catalogued, then PyTorch's
    # next sentence on the same line
    line = ("[rank1]:[E1207 10:00:00.000 77 ProcessGroupNCCL.cpp:621] [Rank 1] Some NCCL "
            "operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
            "subsequent GPU operations might run on corrupted/incomplete data. To avoid data "
            "inconsistency, we are taking the entire process down.")
    log = parse_nccl_log([line])
    assert [m.cls for m in log.errors] == ["torch-watchdog"]


# src/misc/ibvwrap.cc (v2.21.5-1): "Call to " name " failed with error %s errno %d", printed at
# INFO by one wrapper (:56) and as a WARN by another (:60, :71); ibv_reg_mr_iova2's (:169)
# fails the call with ncclSystemError
def test_a_warning_is_matched_to_the_warn_of_a_format_also_printed_at_info() -> None:
    match = lookup_message("Call to ibv_reg_mr_iova2 failed with error Bad address errno 14")
    assert match is not None and match.level == "W" and match.fails


def test_a_registration_the_driver_refused_is_gpudirect_not_the_memlock_limit() -> None:
    lines = [info("NCCL version 2.21.5+cuda12.4"),
             info("NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"),
             info("Using network IB"),
             info("Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA"),
             warn("Call to ibv_reg_mr_iova2 failed with error Bad address errno 14",
                  "misc/ibvwrap.cc:169"),
             info("transport/net_ib.cc:1100 -> 2"), info("proxy.cc:1200 -> 2")]
    findings = findings_of(lines)
    lead = findings[0]
    assert (lead.code, lead.severity) == ("log-nccl-message", "error")
    assert "nvidia_peermem" in lead.fix and "log-ib-memlock" not in codes(findings)
    # refused for memory, it is the locked-memory limit
    memory = [*lines[:4], warn("Call to ibv_reg_mr_iova2 failed with error Cannot allocate "
                               "memory errno 12", "misc/ibvwrap.cc:169"), *lines[5:]]
    assert findings_of(memory)[0].code == "log-ib-memlock"


def test_a_communicator_that_hangs_beside_one_that_finished_is_reported() -> None:
    # src/init.cc (v2.27.5-1) "%s comm %p rank %d nranks %d ... - Init START" / "Init COMPLETE":
    # a process creates its communicators one after another, and may start the next (a
    # subgroup's) before the log shows the first one finish; the pointer tells them apart
    def init(comm: str, end: str) -> str:
        return info(f"ncclCommInitRank comm {comm} rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId "
                    f"1000 commId 0xabc - Init {end}", host="a", pid=1)

    lines = [info("Bootstrap : Using ens1:10.0.0.2<0>", host="a", pid=1),
             init("0x5501", "START"), init("0x5502", "START"), init("0x5501", "COMPLETE")]
    log = parse_nccl_log(lines)
    assert log.init_unfinished == (("a:1", 3),)
    assert "log-init-unfinished" in codes(nccl_log_findings(log))
    assert parse_nccl_log([*lines, init("0x5502", "COMPLETE")]).init_unfinished == ()


def test_a_cuda_error_with_a_reading_leads_over_the_file_it_happened_in() -> None:
    # src/transport/nvls.cc (v2.27.5-1) allocates NVLink SHARP's buffers with CUCHECK; an out of
    # memory there ("Cuda failure %d '%s'", src/include/cudawrap.h:34) is memory, not the
    # fabric manager that an unsupported operation in the same file points at
    lines = [info("NCCL version 2.27.5+cuda12.9"),
             warn("Cuda failure 2 'out of memory'", "transport/nvls.cc:58"),
             info("transport/nvls.cc:245 -> 1"), info("init.cc:1620 -> 1")]
    fatal = only(findings_of(lines), "log-nccl-error")
    assert fatal.fix.startswith("check what holds the GPU's memory")
    assert "NCCL_NVLS_ENABLE=0" in fatal.fix and "fabric manager" not in fatal.fix
    assert any(e.startswith("where it failed: transport/nvls.cc:245") for e in fatal.evidence)


@pytest.mark.parametrize(("event", "named"), [
    ("port error", True),  # IBV_EVENT_PORT_ERR (rdma-core libibverbs/enum_strs.c)
    ("local catastrophic error", True),  # IBV_EVENT_DEVICE_FATAL
    ("GID table change", False),  # IBV_EVENT_GID_CHANGE: a change, not a failure
])
def test_a_port_that_failed_before_completion_errors_is_checked_first(event: str,
                                                                       named: bool) -> None:
    # src/transport/net_ib.cc:103 (v2.22.3-1) "NET/IB : %s:%d Got async event : %s", then the
    # completion error of a queue pair on that port, :1984 "NET/IB: Got completion from peer
    # %s with status=%d opcode=%d len=%d vendor err %d (%s)%s%s%s%s hca %s"
    lines = [info("NCCL version 2.22.3+cuda12.6"),
             info("NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"),
             warn(f"NET/IB : mlx5_0:1 Got async event : {event}", "transport/net_ib.cc:103"),
             warn("NET/IB: Got completion from peer 10.0.0.2<45000> with status=12 opcode=0 "
                  "len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2 "
                  "hca mlx5_0", "transport/net_ib.cc:1984"),
             info("transport/net.cc:1200 -> 6")]
    completion = only(findings_of(lines), "log-ib-completion-error")
    assert completion.fix.startswith("an RDMA port reported an event first") == named
    assert any(f"async event : {event}" in e for e in completion.evidence) == named


def test_watchdog_timeouts_all_at_the_first_collective_point_at_the_data_path() -> None:
    # PyTorch's watchdog line (ProcessGroupNCCL.cpp WorkNCCL::checkTimeout, pytorch@87602c5) on
    # both ranks at SeqNum=1; src/init.cc (v2.22.3-1) NCCL_PARAM(RuntimeConnect,
    # "RUNTIME_CONNECT", 1): the channels connect at that first collective
    def timeout(rank: int, seq: int) -> str:
        return (f"[rank{rank}]:[E1207 10:00:00.000 1 ProcessGroupNCCL.cpp:632] [Rank {rank}] "
                f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 "
                "milliseconds before timing out.")

    lines = [info("NCCL version 2.22.3+cuda12.6"), timeout(0, 1), timeout(1, 1)]
    found = only(findings_of(lines), "log-nccl-message")
    assert found.fix.startswith("look at the data path, not at a slow rank")
    assert any("NCCL_RUNTIME_CONNECT=1" in e for e in found.evidence)
    # an older release connected during initialisation: no such remark, the same reading
    older = [info("NCCL version 2.21.5+cuda12.4"), *lines[1:]]
    found = only(findings_of(older), "log-nccl-message")
    assert found.fix.startswith("look at the data path")
    assert not any("NCCL_RUNTIME_CONNECT" in e for e in found.evidence)
    # ranks that got further are no first-collective hang
    later = [lines[0], timeout(0, 7), timeout(1, 7)]
    assert not only(findings_of(later), "log-nccl-message").fix.startswith("look at the data")


def test_nccls_own_hint_after_a_completion_error_is_quoted_in_its_finding() -> None:
    # src/transport/net_ib/p2p.cc:688 (v2.30.7-1) "NET/IB: Got completion from peer %s with
    # status=%s(%d) opcode=%s(%d) vendor_err=%u %s%s%s%s hca %s" (ibvWcStatusStr and
    # ibvWcOpcodeStr of src/misc/ibvwrap.cc), then printIbWcStatusHint
    # (src/transport/net_ib/common.h:612), whose cases fall through: the status's own hint first
    lines = [info("NCCL version 2.30.7+cuda13.0"),
             info("NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>"),
             warn("NET/IB: Got completion from peer 10.0.0.2<45000> with "
                  "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  localGid "
                  "::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2 hca mlx5_0",
                  "transport/net_ib/p2p.cc:688"),
             info("HINT: In many cases this error occurs when the NCCL_IB_TIMEOUT is set too "
                  "short."),
             info("HINT: Default value is 20, which is ~30 seconds before error."),
             info("transport/net.cc:1300 -> 6")]
    completion = only(findings_of(lines), "log-ib-completion-error")
    assert "IBV_WC_RETRY_EXC_ERR" in completion.title
    assert completion.fix.endswith("NCCL's own hint: In many cases this error occurs when the "
                                   "NCCL_IB_TIMEOUT is set too short.")
    assert any(e.startswith("NCCL's own hint: line 4: HINT:") for e in completion.evidence)


@pytest.mark.parametrize(("error", "words"), [
    ("Address already in use", "ss -ltnp"),  # EADDRINUSE
    ("Cannot assign requested address", "NCCL_COMM_ID names another host's address"),
])
def test_a_bind_that_failed_is_read_by_its_error(error: str, words: str) -> None:
    # src/misc/socket.cc:380 (v2.21.5-1) SYSCHECK(bind(...), "bind"): src/include/checks.h
    # "Call to %s failed : %s" with strerror(errno); a generic system call's causes (limits,
    # libraries, permissions) say nothing about it
    lines = [info("NCCL version 2.21.5+cuda12.4"),
             warn(f"Call to bind failed : {error}", "misc/socket.cc:380"),
             info("misc/socket.cc:381 -> 2"), info("bootstrap.cc:200 -> 2")]
    lead = findings_of(lines)[0]
    assert (lead.code, lead.severity) == ("log-nccl-message", "error")
    assert words in lead.fix.split("; otherwise")[0]


@pytest.mark.parametrize(("event", "severity"), [
    ("GID table change", "info"),  # IBV_EVENT_GID_CHANGE (rdma-core libibverbs/enum_strs.c)
    ("port error", "warning"),  # IBV_EVENT_PORT_ERR: a failure, whatever followed
])
def test_an_rdma_port_event_is_judged_by_what_it_reports(event: str, severity: str) -> None:
    # src/transport/net_ib.cc:103 (v2.22.3-1) "NET/IB : %s:%d Got async event : %s", in a job
    # that then finished its initialisation
    lines = [info("NCCL version 2.22.3+cuda12.6"),
             info("NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>"),
             info("comm 0x55 rank 0 nranks 1 cudaDev 0 busId 18000 - Init COMPLETE"),
             warn(f"NET/IB : mlx5_0:1 Got async event : {event}", "transport/net_ib.cc:103")]
    found = only(findings_of(lines), "log-nccl-message")
    assert found.severity == severity
    assert ("not a failure" in found.fix) == (severity == "info")


def test_a_plugin_asked_for_and_not_found_is_reported_and_one_not_asked_for_is_not() -> None:
    # NCCL 2.28.9: src/plugin/net.cc:291 "NCCL_NET_PLUGIN set by environment to %s";
    # src/plugin/plugin_open.cc:107 "%s/Plugin: Could not find:%s%s%s" with every name tried
    # that does not exist (appendNameToList, " %s" each); NCCL then uses its own networks
    def process(host: str, pid: int, rank: int, asked: bool) -> list[str]:
        names = " aws-ofi libnccl-net-aws-ofi.so" if asked else " libnccl-net.so"
        return [info("NCCL version 2.28.9+cuda12.9", host, pid),
                *([info("NCCL_NET_PLUGIN set by environment to aws-ofi", host, pid)]
                  if asked else []),
                info(f"NET/Plugin: Could not find:{names}", host, pid),
                info(f"NET/Socket : Using [0]eth0:10.0.0.{rank + 1}<0>", host, pid),
                info("Using network Socket", host, pid),
                info(f"ncclCommInitRank comm 0x55 rank {rank} nranks 2 cudaDev 0 nvmlDev 0 busId "
                     "18000 commId 0x1 - Init COMPLETE", host, pid)]

    asked = process("node1", 100, 0, True) + process("node2", 200, 1, True)
    found = only(findings_of(asked), "log-plugin-load")
    assert found.severity == "warning" and "aws-ofi" in found.title and "Socket" in found.title
    not_asked = process("node1", 100, 0, False) + process("node2", 200, 1, False)
    assert "log-plugin-load" not in codes(findings_of(not_asked))
    # no plugin library is no notice either
    assert not [m for m in parse_nccl_log(not_asked).notices if m.kind == "plugin-load"]


def test_every_catalogued_failure_outside_nccl_passes_the_parsers_first_filter() -> None:
    # the parser looks a line without NCCL's marker up only when foreign.HINT finds a word of
    # it: a PyTorch, Gloo or nccl-tests message (tools/c10d_messages.py, nccl-tests' formats)
    # that HINT misses would never be read
    from clusterenv.nccl_log.catalogue import catalogue_entries
    from clusterenv.nccl_log.foreign import HINT

    outside = [e for e in catalogue_entries() if e["project"] in ("pytorch", "nccl-tests")
               and e["level"] != "I"]
    assert outside
    missed = [e["format"] for e in outside if HINT.search(e["format"]) is None]
    assert missed == []


def test_a_store_port_that_is_taken_is_read_by_its_error() -> None:
    # c10d socket.cpp (pytorch@056b6f3; the text is in libtorch_cpu.so of torch 2.13) "The
    # server socket has failed to listen on any local network address. port: {}, useIpv6: {},
    # code: {}, name: {}, message: {}" raised as DistNetworkError
    lines = ["torch.distributed.DistNetworkError: The server socket has failed to listen on any "
             "local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, "
             "message: address already in use"]
    lead = findings_of(lines)[0]
    assert (lead.code, lead.severity) == ("log-nccl-message", "error")
    assert "MASTER_PORT is taken" in lead.fix and "unreachable" not in lead.fix


def test_a_libibverbs_warning_that_is_no_load_failure_is_not_read_as_one() -> None:
    # rdma-core libibverbs/init.c ibverbs_init: "Warning: fork()-safety requested but init
    # failed" (PFX "libibverbs: ") when RDMAV_FORK_SAFE is set; NCCL then uses the device
    # (src/transport/net_ib.cc (v2.21.5-1) "NET/IB : Using%s %s; OOB %s:%s")
    lines = ["libibverbs: Warning: fork()-safety requested but init failed",
             info("NCCL version 2.21.5+cuda12.4"),
             info("NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"),
             info("Using network IB")]
    findings = findings_of(lines)
    assert "log-ibverbs-failure" not in codes(findings)
    assert "RDMAV_FORK_SAFE" in only(findings, "log-nccl-message").fix
    # NCCL failing to load libibverbs (src/misc/ibvwrap.cc:63, v2.10.3-1) is still that
    failed = [warn("Failed to open libibverbs.so[.1]", "misc/ibvwrap.cc:63"),
              info("NCCL version 2.10.3+cuda11.4"), info("Using network Socket")]
    assert "could not load libibverbs" in only(findings_of(failed),
                                               "log-ibverbs-failure").title


def test_libibverbs_missing_on_a_job_of_one_node_is_only_a_note() -> None:
    # src/misc/ibvwrap.cc:63 (v2.10.3-1) "Failed to open libibverbs.so[.1]"; src/init.cc
    # (v2.21.5-1) "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d"
    def job(nodes: int) -> list[str]:
        return [warn("Failed to open libibverbs.so[.1]", "misc/ibvwrap.cc:63"),
                info("NCCL version 2.21.5+cuda12.4"), info("Using network Socket"),
                info(f"comm 0x55 rank 0 nRanks 2 nNodes {nodes} localRanks {3 - nodes} localRank "
                     "0 MNNVL 0")]

    one = only(findings_of(job(1)), "log-ibverbs-failure")
    assert one.severity == "info" and any("does not need RDMA" in e for e in one.evidence)
    assert only(findings_of(job(2)), "log-ibverbs-failure").severity == "warning"


def test_a_socket_network_on_a_job_of_one_node_is_only_a_note() -> None:
    # src/transport/net_ib.cc (v2.18.5-1) "NCCL_IB_HCA set to %s", "NET/IB : No device found.";
    # src/init.cc "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d"
    def job(nodes: int) -> list[str]:
        return [info("NCCL version 2.18.5+cuda12.2"), info("NCCL_IB_HCA set to mlx5"),
                info("NET/IB : No device found."),
                info("NET/Socket : Using [0]eth0:10.0.0.5<0>"), info("Using network Socket"),
                info(f"comm 0x55 rank 0 nRanks 2 nNodes {nodes} localRanks {3 - nodes} "
                     "localRank 0 MNNVL 0")]

    assert only(findings_of(job(1)), "log-socket-fallback").severity == "info"
    assert only(findings_of(job(2)), "log-socket-fallback").severity == "error"


def test_one_node_whose_channels_go_through_the_network_keeps_its_rdma_findings() -> None:
    # NCCL 2.12.12: "NET/IB : GPU Direct RDMA Disabled for HCA %d '%s' (no module)"
    # (src/transport/net_ib.cc:290); a job of one node whose channels NCCL still sends through
    # NET/IB (P2P and SHM disabled: src/transport/net.cc:220 "Channel %02d/%d : %d[%lx] ->
    # %d[%lx] [receive] via NET/%s/%d%s%s")
    base = [info("NCCL version 2.12.12+cuda11.6"),
            info("NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"),
            info("Using network IB"),
            info("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)"),
            info("comm 0x55 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0")]
    assert only(findings_of(base), "log-gdr-disabled").severity == "info"
    through_net = [*base, info("Channel 00/0 : 1[1b000] -> 0[18000] [receive] via NET/IB/0")]
    assert only(findings_of(through_net), "log-gdr-disabled").severity == "warning"


@pytest.mark.parametrize(("library", "reported"), [
    ("libnccl-net-aws-ofi.so", True),  # a name only NCCL_NET_PLUGIN gives
    ("libnccl-net.so", False),  # the default: no plugin asked for
])
def test_a_plugin_asked_for_is_known_by_its_name_where_the_setting_is_not_printed(
        library: str, reported: bool) -> None:
    # src/net.cc:231 (v2.19.3-1) "NET/Plugin : dlerror=%s No plugin found (%s), using internal
    # implementation" (ncclNetPluginName: NCCL_NET_PLUGIN's library, else libnccl-net.so);
    # 2.19 prints no "NCCL_NET_PLUGIN set by environment" line
    lines = [info("NCCL version 2.19.3+cuda12.3"),
             info(f"NET/Plugin : dlerror={library}: cannot open shared object file: No such file "
                  f"or directory No plugin found ({library}), using internal implementation"),
             info("NET/Socket : Using [0]eth0:10.0.0.1<0>"), info("Using network Socket")]
    assert ("log-plugin-load" in codes(findings_of(lines))) == reported


def test_nccls_own_hint_after_a_queue_pair_failure_is_quoted_in_its_finding() -> None:
    # src/misc/ibvwrap.cc (v2.30.7-1): :376 "Call to ibv_modify_qp failed with %d %s, %s" (the
    # %s from :330 "on dev %s:%d, curr state %s, next state %s, local GID index %d, local GID
    # %s, remote GID %s"), then :377 printIbModifyQpHint(ETIMEDOUT): :339 the hint
    hint = info("HINT: In many cases this error occurs when NICs are not cross-rail connected.")
    lines = [info("NCCL version 2.30.7+cuda13.0"),
             info("NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>"),
             warn("Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, "
                  "curr state INIT, next state RTR, local GID index 3, local GID "
                  "::ffff:10.0.0.1, remote GID ::ffff:10.0.1.2", "misc/ibvwrap.cc:376")]
    qp = only(findings_of([*lines, hint, info("transport/net_ib/connect.cc:900 -> 2")]),
              "log-ib-qp-failure")
    assert qp.fix.endswith("NCCL's own hint: In many cases this error occurs when NICs are not "
                           "cross-rail connected.")
    # another WARN of that process between the failure and the hint: the hint belongs to what
    # came last
    between = [*lines, warn("NET/IB : mlx5_0:1 Got async event : port error",
                            "transport/net_ib.cc:103"), hint]
    assert "NCCL's own hint" not in only(findings_of(between), "log-ib-qp-failure").fix
