"""Snapshots that ``clusterenv capture`` wrote on real hosts, replayed here.

Each snapshot in tests/data/hosts/<name>/ comes with <name>.observed.txt: what the host's own
tools (``nvidia-smi``, ``ls``, ``/proc``, torch) printed there in the same session. The
expectations below are read from those outputs and from the real NCCL log of a job that ran on
the same host, never from clusterenv's own output.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from clusterenv._root import Root
from clusterenv.cli import main
from clusterenv.nccl.version import detect_nccl_versions
from clusterenv.nccl_log import read_nccl_log

DATA = Path(__file__).parent / "data"
H200 = DATA / "hosts" / "h200-vm-ubuntu24"
H200_LOG = DATA / "nccl_logs" / "real" / "nccl-info-h200-vm-single-rank-socket-2.28.9.txt"


def observed(snapshot: Path) -> dict[str, list[str]]:
    """``$ command`` -> the lines it printed, from ``<snapshot>.observed.txt``."""
    out: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in snapshot.with_name(f"{snapshot.name}.observed.txt").read_text().splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("$ "):
            lines = out.setdefault(line[2:], [])
        else:
            lines.append(line)
    return out


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*args, "--json", "--root", str(H200)])
    return code, json.loads(capsys.readouterr().out)


SEEN = observed(H200)


def smi_row() -> dict[str, str]:
    query = next(c for c in SEEN if c.startswith("nvidia-smi --query-gpu="))
    header, *rows = SEEN[query]
    (row,) = rows
    keys = [k.strip().split(" ")[0] for k in header.split(",")]
    return dict(zip(keys, (v.strip() for v in row.split(",")), strict=True))


def test_the_gpus_are_the_ones_nvidia_smi_listed(capsys: pytest.CaptureFixture[str]) -> None:
    row = smi_row()
    code, data = cli_json(capsys, "show")
    assert code == 0
    host = data["host"]
    assert host["gpus"] == host["gpus_installed"] == len(SEEN["nvidia-smi -L"])
    assert host["gpu_models"] == [row["name"]]
    assert host["driver_version"] == row["driver_version"]
    # The capture keeps the PCI address the driver lists, and scrubs the UUID nvidia-smi shows.
    bus = row["pci.bus_id"].lower()[4:]  # "00000000:00:06.0" -> "0000:00:06.0"
    info = (H200 / "proc/driver/nvidia/gpus" / bus / "information").read_text()
    assert "GPU-00000000-0000-0000-0000-000000000000" in info


def test_no_rdma_where_the_kernel_listed_none(capsys: pytest.CaptureFixture[str]) -> None:
    # /dev/infiniband held only rdma_cm, and /sys/class/infiniband was empty: no verbs device.
    assert SEEN["ls /sys/class/infiniband"] == [] and SEEN["ls /dev/infiniband"] == ["rdma_cm"]
    _, data = cli_json(capsys, "show")
    assert data["rdma"] == {"devices": [], "uverbs": [], "transport": None}


def test_interfaces_and_routes_are_the_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    _, data = cli_json(capsys, "show")
    names = [i["name"] for i in data["network"]["interfaces"]]
    assert sorted(names) == sorted(SEEN["ls /sys/class/net"])
    # /proc/net/route: the default route and the on-link subnet both leave by eth0.
    routes = [line.split() for line in SEEN["cat /proc/net/route"][1:]]
    assert {r[0] for r in routes} == {"eth0"}
    (subnet,) = [r for r in routes if r[1] != "00000000"]

    def address(hex_le: str) -> str:
        return socket.inet_ntoa(struct.pack("<I", int(hex_le, 16)))

    network = ipaddress.ip_network(f"{address(subnet[1])}/{address(subnet[7])}")
    eth0 = next(i for i in data["network"]["interfaces"] if i["name"] == "eth0")
    assert [ipaddress.ip_interface(a).ip in network for a in eth0["ipv4"]] == [True]


def test_the_bootstrap_predicted_is_the_one_nccl_used_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (rank,) = read_nccl_log(H200_LOG).ranks
    text = H200_LOG.read_text()
    used = re.search(r"Bootstrap: Using (\w+):([0-9.]+)<", text)
    assert used is not None and (rank.bootstrap_interface, rank.bootstrap_address) == used.groups()
    _, data = cli_json(capsys, "show")
    bootstrap = data["nccl_bootstrap"]
    assert (bootstrap["interface"], bootstrap["address"]) == used.groups()


def test_the_nccl_torch_loaded_comes_first_and_each_library_once() -> None:
    (torch_line,) = next(v for c, v in SEEN.items() if c.startswith("python3 -c"))
    loaded = re.search(r"nccl \((\d+), (\d+), (\d+)\)", torch_line)
    assert loaded is not None
    (env_line,) = [v for v in SEEN["env | grep -E '^(NCCL_VERSION|LD_LIBRARY_PATH)='"]
                   if v.startswith("NCCL_VERSION=")]
    root = Root(H200)
    versions = detect_nccl_versions(root.recorded_environ() or {}, root)
    assert str(versions[0]) == ".".join(loaded.groups())  # the pip NCCL torch loads
    assert str(versions[1]) == env_line.split("=")[1].split("-")[0]
    # One system libnccl (Ubuntu 24.04 merges /usr: /lib is usr/lib), listed once.
    assert len([v for v in versions if v.source.startswith("/")]) == 1


def test_doctor_finds_nothing_wrong_where_the_real_job_ran(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = H200_LOG.read_text()
    assert "Init COMPLETE" in text and "sum=1 expected=1" in text  # the job there succeeded
    code, data = cli_json(capsys, "doctor")
    assert code == 0 and data["findings"] == [], data["findings"]


def test_nccl_log_reads_the_real_single_rank_log(capsys: pytest.CaptureFixture[str]) -> None:
    text = H200_LOG.read_text()
    version = re.search(r"NCCL version ([0-9.]+)\+cuda([0-9.]+)", text)
    network = re.search(r"Using network (\w+)", text)
    assert version is not None and network is not None
    log = read_nccl_log(H200_LOG)
    assert (log.version, log.cuda_version) == version.groups()
    assert log.transport == network.group(1) and log.nranks == 1 and not log.multi_node
    capsys.readouterr()
    assert main(["nccl-log", "--json", str(H200_LOG)]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
