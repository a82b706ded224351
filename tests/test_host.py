"""HostFacts: GPUs, driver, /dev/shm, memlock, CAP_IPC_LOCK, GPUDirect and NCCL config files."""

from __future__ import annotations

import json
import os
import resource
import socket
from pathlib import Path

import pytest

import clusterenv
from clusterenv.errors import DiscoveryError
from clusterenv.host import (
    ENVIRONMENT,
    HostFacts,
    NcclConfFile,
    _parse_cap_ipc_lock,
    _parse_gpu_model,
    _parse_nccl_conf,
    _parse_nvidia_version,
    nccl_conf_files,
    nccl_conf_values,
)
from clusterenv.testing import HostBuilder

OPEN_X86 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Sep 25 00:00:00 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)"
)
OPEN_ARM = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  550.54.15  Release Build  "
    "(dvs-builder@U16-T02-35-3)  Tue Mar  5 19:58:46 UTC 2024"
)
PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 9.4.0 (Ubuntu 9.4.0-1ubuntu1~20.04.1)"
)


# -- parsers -----------------------------------------------------------------------------------


def test_parse_nvidia_version() -> None:
    assert _parse_nvidia_version(OPEN_X86) == ("580.95.05", True)
    assert _parse_nvidia_version(OPEN_ARM) == ("550.54.15", True)
    assert _parse_nvidia_version(PROPRIETARY) == ("535.104.05", False)
    assert _parse_nvidia_version("NVRM version: something 470.82 else") == ("470.82", None)
    assert _parse_nvidia_version("garbage") == (None, None)
    assert _parse_nvidia_version("") == (None, None)
    assert _parse_nvidia_version(None) == (None, None)


def test_parse_cap_ipc_lock() -> None:
    status = "Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t{}\n"
    assert _parse_cap_ipc_lock(status.format("000001ffffffffff")) is True  # privileged root
    assert _parse_cap_ipc_lock(status.format("00000000a80425fb")) is False  # Docker's default
    assert _parse_cap_ipc_lock(status.format("00000000a80465fb")) is True  # --cap-add IPC_LOCK
    assert _parse_cap_ipc_lock(status.format("0000000000000000")) is False
    assert _parse_cap_ipc_lock(status.format("zz")) is None
    assert _parse_cap_ipc_lock("Name:\tpython\n") is None
    assert _parse_cap_ipc_lock(None) is None


def test_parse_gpu_model() -> None:
    info = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t GPU-1\n"
    assert _parse_gpu_model(info) == "NVIDIA H100 80GB HBM3"
    assert _parse_gpu_model("IRQ: 0\n") is None
    assert _parse_gpu_model("Model:\n") is None
    assert _parse_gpu_model(None) is None


def test_parse_nccl_conf_follows_nccl() -> None:
    text = (
        "# a comment\n"
        "NCCL_SOCKET_IFNAME==ens1f0\n"
        "NCCL_DEBUG=WARN  \n"  # trailing blanks are kept
        ' NCCL_IB_HCA="mlx5_0"\n'  # neither the name nor the quotes are trimmed
        "NCCL_DEBUG=INFO\n"  # the first assignment wins (setenv without overwrite)
        "NCCL_ALGO=Ring # not a comment\n"
        "no equals sign\n"
        "=value without a name\n"
        "NCCL_EMPTY=\n"
        "NCCL_CRLF=1\r\n"
        "  # indented: not a comment for NCCL\n"
        "NCCL_LAST=x"
    )
    assert _parse_nccl_conf(text) == {
        "NCCL_SOCKET_IFNAME": "=ens1f0",
        "NCCL_DEBUG": "WARN  ",
        ' NCCL_IB_HCA': '"mlx5_0"',
        "NCCL_ALGO": "Ring # not a comment",
        "NCCL_EMPTY": "",
        "NCCL_CRLF": "1\r",
        "NCCL_LAST": "x",
    }


def test_parse_nccl_conf_truncates_like_nccl() -> None:
    parsed = _parse_nccl_conf("NCCL_X=" + "v" * 2000)
    assert parsed == {"NCCL_X": "v" * 1023}


# -- detection on snapshots --------------------------------------------------------------------


def full_host(root: Path) -> HostBuilder:
    return (
        HostBuilder(root)
        .gpus(8, model="NVIDIA H100 80GB HBM3", driver="580.95.05", open_kernel_module=True)
        .gpudirect(peermem=True)
        .memlock(65536, None)
        .cap_ipc_lock(False)
        .shm(64 * 1024 * 1024)
        .hostname("node-3")
        .file("etc/nccl.conf", "NCCL_DEBUG=WARN\nNCCL_IB_HCA==mlx5_0\n")
    )


def test_snapshot_facts(tmp_path: Path) -> None:
    host = full_host(tmp_path)
    facts = HostFacts.detect(environ={}, root=host.root)
    assert facts == HostFacts(
        gpus=8,
        gpus_installed=8,
        gpu_models=("NVIDIA H100 80GB HBM3",),
        driver_version="580.95.05",
        open_kernel_module=True,
        shm_bytes=64 * 1024 * 1024,
        memlock_soft=65536,
        memlock_hard=None,
        memlock_known=True,
        cap_ipc_lock=False,
        gpudirect=True,
        gpudirect_path="/sys/module/nvidia_peermem/version",
        nccl_conf_files=(
            NcclConfFile(
                "/etc/nccl.conf", "system", {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "=mlx5_0"}
            ),
        ),
        hostname="node-3",
    )


def test_visible_gpus_follow_cuda_visible_devices(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).gpus(8)
    facts = HostFacts.detect(environ={"CUDA_VISIBLE_DEVICES": "0,1,2"}, root=host.root)
    assert (facts.gpus, facts.gpus_installed) == (3, 8)
    assert HostFacts.detect(environ={"CUDA_VISIBLE_DEVICES": ""}, root=host.root).gpus == 0


def test_mixed_gpu_models_and_proprietary_driver(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).gpus(2, model="NVIDIA A100-SXM4-80GB", open_kernel_module=False)
    host.gpus(1, model="NVIDIA H100 PCIe", driver="535.104.05", open_kernel_module=False)
    facts = HostFacts.detect(environ={}, root=host.root)
    assert facts.gpu_models == ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 PCIe")
    assert (facts.driver_version, facts.open_kernel_module) == ("535.104.05", False)


def test_a_bare_snapshot_knows_nothing(tmp_path: Path) -> None:
    facts = HostFacts.detect(environ={}, root=HostBuilder(tmp_path).root)
    assert facts == HostFacts(
        gpus=0,
        gpus_installed=0,
        gpu_models=(),
        driver_version=None,
        open_kernel_module=None,
        shm_bytes=None,
        memlock_soft=None,
        memlock_hard=None,
        memlock_known=False,
        cap_ipc_lock=None,
        gpudirect=False,
        gpudirect_path=None,
        nccl_conf_files=(),
        hostname=None,
    )


def test_unlimited_memlock_is_known(tmp_path: Path) -> None:
    facts = HostFacts.detect(environ={}, root=HostBuilder(tmp_path).memlock(None, None).root)
    assert (facts.memlock_known, facts.memlock_soft, facts.memlock_hard) == (True, None, None)


@pytest.mark.parametrize(
    "memlock",
    [{"soft": "unlimited", "hard": None}, {"soft": -1, "hard": -1}, {"soft": 1}, [1, 2], 7, True],
)
def test_garbled_recorded_memlock_is_unknown(tmp_path: Path, memlock: object) -> None:
    host = HostBuilder(tmp_path)
    host._host["memlock"] = memlock
    host._flush()
    facts = HostFacts.detect(environ={}, root=host.root)
    assert (facts.memlock_known, facts.memlock_soft, facts.memlock_hard) == (False, None, None)


def test_garbled_recorded_facts_are_unknown(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path)
    host._host.update({"shm_bytes": "64M", "cap_ipc_lock": "yes", "hostname": 42})
    host._flush()
    facts = HostFacts.detect(environ={}, root=host.root)
    assert (facts.shm_bytes, facts.cap_ipc_lock, facts.hostname) == (None, None, None)


def test_snapshot_ignores_process_files_it_may_contain(tmp_path: Path) -> None:
    # Live-only facts come from host.json on a snapshot, never from the snapshot's /proc/self.
    host = HostBuilder(tmp_path).cap_ipc_lock(False)
    host.file("proc/self/status", "CapEff:\t000001ffffffffff\n")
    assert HostFacts.detect(environ={}, root=host.root).cap_ipc_lock is False


@pytest.mark.parametrize(
    ("peermem", "nv_mem", "path"),
    [
        (True, False, "/sys/module/nvidia_peermem/version"),
        (False, True, "/sys/kernel/mm/memory_peers/nv_mem/version"),
        (True, True, "/sys/kernel/mm/memory_peers/nv_mem/version"),  # NCCL's order
        (False, False, None),
    ],
)
def test_gpudirect(tmp_path: Path, peermem: bool, nv_mem: bool, path: str | None) -> None:
    host = HostBuilder(tmp_path).gpudirect(peermem=peermem, nv_mem=nv_mem)
    facts = HostFacts.detect(environ={}, root=host.root)
    assert (facts.gpudirect, facts.gpudirect_path) == (path is not None, path)


def test_gpudirect_legacy_nc_path_and_not_a_directory(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).file("sys/kernel/mm/memory_peers/nv_mem_nc/version", "1.1")
    (host.root / "sys/module/nvidia_peermem/version").mkdir(parents=True)
    facts = HostFacts.detect(environ={}, root=host.root)
    assert facts.gpudirect_path == "/sys/kernel/mm/memory_peers/nv_mem_nc/version"


# -- NCCL configuration files ------------------------------------------------------------------


def test_conf_files_in_nccl_order(tmp_path: Path) -> None:
    host = (
        HostBuilder(tmp_path)
        .file("home/ada/.nccl.conf", "NCCL_DEBUG=INFO\nNCCL_SOCKET_IFNAME=ens1\n")
        .file("etc/nccl.conf", "NCCL_DEBUG=WARN\nNCCL_IB_HCA==mlx5_0\n")
        .file("opt/job/nccl.conf", "NCCL_DEBUG=TRACE\n")
    )
    files = nccl_conf_files(environ={"HOME": "/home/ada/"}, root=host.root)
    assert [(f.path, f.origin) for f in files] == [
        ("/home/ada/.nccl.conf", "home"),
        ("/etc/nccl.conf", "system"),
    ]
    user = nccl_conf_files(
        environ={"HOME": "/home/ada", "NCCL_CONF_FILE": "/opt/job/nccl.conf"}, root=host.root
    )
    assert [(f.path, f.origin) for f in user] == [
        ("/opt/job/nccl.conf", "NCCL_CONF_FILE"),  # and ~/.nccl.conf is not read at all
        ("/etc/nccl.conf", "system"),
    ]
    empty = nccl_conf_files(environ={"HOME": "/home/ada", "NCCL_CONF_FILE": ""}, root=host.root)
    assert [f.origin for f in empty] == ["home", "system"]
    assert [f.origin for f in nccl_conf_files(environ={}, root=host.root)] == ["system"]


def test_conf_values_precedence_and_provenance(tmp_path: Path) -> None:
    host = (
        HostBuilder(tmp_path)
        .file("home/ada/.nccl.conf", "NCCL_DEBUG=INFO\nNCCL_SOCKET_IFNAME=ens1\n")
        .file("etc/nccl.conf", "NCCL_DEBUG=WARN\nNCCL_IB_HCA==mlx5_0\nNCCL_SOCKET_IFNAME=eth0\n")
    )
    environ = {"HOME": "/home/ada", "NCCL_IB_HCA": "mlx5_1", "NCCL_NET_GDR_LEVEL": "PIX"}
    facts = HostFacts.detect(environ=environ, root=host.root)
    assert facts.nccl_conf_values(environ) == {
        "NCCL_DEBUG": ("INFO", "/home/ada/.nccl.conf"),
        "NCCL_IB_HCA": ("mlx5_1", ENVIRONMENT),
        "NCCL_NET_GDR_LEVEL": ("PIX", ENVIRONMENT),
        "NCCL_SOCKET_IFNAME": ("ens1", "/home/ada/.nccl.conf"),
    }
    files_only = facts.nccl_conf_values({})
    assert files_only["NCCL_IB_HCA"] == ("=mlx5_0", "/etc/nccl.conf")
    assert nccl_conf_values(facts.nccl_conf_files, environ={}) == files_only


def test_conf_value_set_empty_in_the_environment_still_wins() -> None:
    files = [NcclConfFile("/etc/nccl.conf", "system", {"NCCL_SOCKET_IFNAME": "eth0"})]
    assert nccl_conf_values(files, environ={"NCCL_SOCKET_IFNAME": ""}) == {
        "NCCL_SOCKET_IFNAME": ("", ENVIRONMENT)
    }


def test_unreadable_conf_file_is_absent(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path)
    (host.root / "etc/nccl.conf").mkdir(parents=True)
    assert nccl_conf_files(environ={}, root=host.root) == ()


# -- live host, JSON, errors -------------------------------------------------------------------


def test_live_host_facts_come_from_the_process() -> None:
    facts = HostFacts.detect(environ={})
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert facts.memlock_known
    assert facts.memlock_soft == (None if soft == resource.RLIM_INFINITY else soft)
    assert facts.memlock_hard == (None if hard == resource.RLIM_INFINITY else hard)
    assert facts.hostname == socket.gethostname()
    # Oracles: the kernel's effective capability mask (CAP_IPC_LOCK is bit 14) and statvfs.
    with open("/proc/self/status", encoding="ascii") as status:
        effective = next(int(line.split()[1], 16) for line in status if line.startswith("CapEff:"))
    assert facts.cap_ipc_lock is bool(effective >> 14 & 1)
    if os.path.isdir("/dev/shm"):
        shm = os.statvfs("/dev/shm")
        assert facts.shm_bytes == shm.f_blocks * shm.f_frsize


@pytest.mark.parametrize(("visible", "count"), [("1", 1), ("0,1", 2), ("", 0)])
def test_detect_reads_os_environ_when_none_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, visible: str, count: int
) -> None:
    # A 2-GPU host: os.environ's CUDA_VISIBLE_DEVICES, read at call time, narrows the count.
    host = HostBuilder(tmp_path).gpus(2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert HostFacts.detect(root=host.root).gpus == count
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert HostFacts.detect(root=host.root).gpus == 2


def test_json_is_clean(tmp_path: Path) -> None:
    facts = HostFacts.detect(environ={}, root=full_host(tmp_path).root)
    data = json.loads(json.dumps(facts.to_dict()))
    assert data["gpu_models"] == ["NVIDIA H100 80GB HBM3"]
    assert data["memlock_hard"] is None
    assert data["nccl_conf_files"] == [
        {
            "path": "/etc/nccl.conf",
            "origin": "system",
            "values": {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "=mlx5_0"},
        }
    ]


def test_unreadable_root_is_a_discovery_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(DiscoveryError) as caught:
        HostFacts.detect(environ={}, root=not_a_dir)
    assert caught.value.path == str(not_a_dir)


def test_garbled_host_json_is_a_discovery_error(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path)
    (host.root / ".clusterenv/host.json").write_text("{not json")
    with pytest.raises(DiscoveryError, match=r"host\.json"):
        HostFacts.detect(environ={}, root=host.root)


def test_public_name_resolves_lazily() -> None:
    assert clusterenv.HostFacts is HostFacts
