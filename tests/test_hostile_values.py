"""Values that smuggle options: an address is an address, and no value is ever written into
another tool's comma- or space-separated option syntax.

Python's :mod:`ipaddress` accepts any text after ``%`` as an IPv6 zone, so
``fe80::1%x,LD_PRELOAD=libevil.so`` parses as an address; written into ``srun
--export=ALL,MASTER_ADDR=…`` it would hand every task ``LD_PRELOAD``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterenv import ClusterConfig, doctor
from clusterenv.errors import ConfigError
from clusterenv.launch import plan_launch
from clusterenv.testing import HostBuilder

SMUGGLED = "fe80::1%x,LD_PRELOAD=libevil.so"
BASE = {"MASTER_PORT": "29500", "NUM_NODES": "2", "NODE_RANK": "1", "NUM_TRAINERS": "1",
        "CLUSTERENV_NCCL_LIBRARY": "none"}


@pytest.mark.parametrize("zone", ["x,LD_PRELOAD=libevil.so", "a b", "eth0;id", "x=y",
                                  "0123456789abcdefg", ""])
def test_a_zone_must_look_like_an_interface_name(zone: str) -> None:
    with pytest.raises(ConfigError) as raised:
        ClusterConfig.from_env({**BASE, "MASTER_ADDR": f"fe80::1%{zone}"})
    message = str(raised.value)
    assert "MASTER_ADDR=" in message and "expected an IP address or host name" in message


def test_a_plain_zone_is_an_address() -> None:
    config = ClusterConfig.from_env({**BASE, "MASTER_ADDR": "fe80::1%ens1"})
    assert config.host_node_addr == "[fe80::1%ens1]:29500"


def test_a_zone_that_names_no_interface_here_is_an_error(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback().interface("ens1", addresses=["fe80::2/64", "10.0.0.2/24"])
    found = {f.code: f for f in doctor({**BASE, "MASTER_ADDR": "fe80::1%ens9"}, root=tmp_path)}
    assert found["primary-zone-unknown"].severity == "error"
    assert "'ens9'" in found["primary-zone-unknown"].title
    here = {f.code for f in doctor({**BASE, "MASTER_ADDR": "fe80::1%ens1"}, root=tmp_path)}
    assert "primary-zone-unknown" not in here


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_the_rendezvous_reaches_ranks_through_the_environment(
    tmp_path: Path, launcher: str
) -> None:
    HostBuilder(tmp_path).loopback().interface("ens1", addresses=["10.0.0.2/24"])
    environ = {**BASE, "MASTER_ADDR": "10.0.0.1", "NUM_NODES": "1", "NODE_RANK": "0"}
    plan = plan_launch(environ, command=["train.py"], root=tmp_path, launcher=launcher,
                       torchrun=["torchrun"])
    assert not [word for word in plan.command if "MASTER_ADDR=" in word or "10.0.0.1" in word]
    assert plan.environ["MASTER_ADDR"] == "10.0.0.1"
    assert plan.changes["MASTER_PORT"] == "29500"


def test_launch_refuses_a_smuggling_address_by_name(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), **BASE, "MASTER_ADDR": SMUGGLED}
    result = subprocess.run(
        [sys.executable, "-m", "clusterenv", "launch", "--launcher", "srun", "--dry-run",
         "--json", "--", "train.py"],
        env=env, capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert "LD_PRELOAD" not in result.stdout
    assert "Traceback" not in result.stderr
    assert f"MASTER_ADDR={SMUGGLED!r}" in result.stderr
    doctor_json = subprocess.run(
        [sys.executable, "-m", "clusterenv", "doctor", "--json"],
        env=env, capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert doctor_json.returncode in (1, 2)
    if doctor_json.stdout:
        codes = {f["code"] for f in json.loads(doctor_json.stdout)["findings"]}
        assert codes & {"config-bad-address", "config-invalid"}, codes
