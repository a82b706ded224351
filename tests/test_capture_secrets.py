"""What a snapshot and a fingerprint may carry: no credentials, whatever their disguise; the
partition key that must match, compared.

The snapshot is built by :func:`tests.test_capture.rich_host`; secrets hide in allowed
variables (URLs with userinfo), in names the first filter missed, and in config files.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from clusterenv._scrub import is_secret_name, scrub_value
from clusterenv.capture import capture
from clusterenv.preflight import collect_fingerprint, compare
from tests.test_capture import rich_host

PW = "hunter2-never-in-a-snapshot"

ENVIRON = {
    "PRIMARY_ADDR": "10.65.0.2", "PRIMARY_PORT": "29500", "NODE_ADDR": "10.65.0.2",
    "NODE_RANK": "0", "NUM_NODES": "2", "NUM_TRAINERS": "2", "HOME": "/home/ml",
    "PET_RDZV_ENDPOINT": f"etcd://root:{PW}@10.65.0.2:2379",
    "NCCL_NET_PLUGIN": f"https://user:{PW}@plugins.example/libnccl-net.so",
    "MASTER_PASS": PW, "NODE_PW": PW, "PRIMARY_PWD": PW, "FI_EFA_PSK": PW,
    "NCCL_SESSION": PW, "TORCH_NCCL_COOKIE": PW, "NCCL_AUTH": PW, "CLUSTERENV_CRED": PW,
    "NODE_PRIVATE": PW,
    "NCCL_IB_PKEY": "0x8001",
}

CONF = f"""# written by ops; password is {PW}
NCCL_DEBUG=WARN
NCCL_NET_PLUGIN=https://u:{PW}@plugins.example/x.so
DATABASE_URL=postgres://u:{PW}@db:5432/x
machine github.com login u password {PW}
https://user:{PW}@github.com
NCCL_IB_PKEY=0x8001
"""


def _snapshot(root: Path) -> Path:
    rich_host(root).environ(ENVIRON).file("etc/nccl.conf", CONF)
    return root


def test_no_credential_reaches_a_snapshot(tmp_path: Path) -> None:
    out = capture(tmp_path / "snap2", root=_snapshot(tmp_path / "snap"))
    text = "\n".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
    assert PW not in text
    assert "etcd://***@10.65.0.2:2379" in text
    assert "https://***@plugins.example/libnccl-net.so" in text
    assert '"NCCL_IB_PKEY": "0x8001"' in text
    conf = (out / "etc/nccl.conf").read_text()
    assert conf == ("NCCL_DEBUG=WARN\nNCCL_NET_PLUGIN=https://***@plugins.example/x.so\n"
                    "NCCL_IB_PKEY=0x8001\n")


@pytest.mark.parametrize("name", ["MASTER_PASS", "NODE_PW", "PRIMARY_PWD", "FI_EFA_PSK",
                                  "NCCL_SESSION", "TORCH_NCCL_COOKIE", "NCCL_AUTH",
                                  "CLUSTERENV_CRED", "NODE_PRIVATE", "NCCL_IB_KEY", "HF_TOKEN",
                                  "DB_PASSWORD", "MY_APIKEY", "AWS_ACCESS_KEY_ID"])
def test_names_that_look_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["NCCL_IB_PKEY", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME",
                                  "NCCL_P2P_LEVEL", "MASTER_ADDR", "NCCL_PXN_DISABLE"])
def test_names_that_do_not(name: str) -> None:
    assert not is_secret_name(name)


def test_url_userinfo_is_replaced_anywhere_in_a_value() -> None:
    assert scrub_value("a,etcd://r:p@h:1,b") == "a,etcd://***@h:1,b"
    assert scrub_value("HTTPS://token@h/x") == "HTTPS://***@h/x"
    assert scrub_value("user@host") == "user@host"  # no scheme: not a URL's userinfo


def test_fingerprints_carry_no_credentials_and_compare_the_partition_key(tmp_path: Path) -> None:
    a = collect_fingerprint(environ=ENVIRON, root=_snapshot(tmp_path / "a"))
    other = {**ENVIRON, "NCCL_IB_PKEY": "0x8002", "NODE_RANK": "1", "NODE_ADDR": "10.65.0.3"}
    b = collect_fingerprint(environ=other, root=_snapshot(tmp_path / "b"))
    assert PW not in repr(a.to_wire()) and PW not in repr(b.to_wire())
    assert a.env["NCCL_NET_PLUGIN"] == "https://***@plugins.example/libnccl-net.so"
    b = dataclasses.replace(b, rank=1)
    problems = compare([("10.65.0.2", a), ("10.65.0.3", b)], expected_nodes=2)
    pkey = [p for p in problems if p.code == "preflight-env-differs"
            and p.title.startswith("NCCL_IB_PKEY differs")]
    assert pkey and pkey[0].severity == "error", [p.title for p in problems]


def test_what_a_killed_capture_left_is_removed_by_the_next(tmp_path: Path) -> None:
    root = _snapshot(tmp_path / "snap")
    dead = subprocess.Popen(["true"])
    dead.wait()
    killed = [tmp_path / f".out.capture-{dead.pid}-x1y2", tmp_path / f".out.old.{dead.pid}"]
    alive = tmp_path / f".out.capture-{os.getpid()}-keep"  # a capture still running
    for path in (*killed, alive):
        (path / "sys").mkdir(parents=True)
    capture(tmp_path / "out", root=root)
    assert not any(p.exists() for p in killed) and alive.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["snap", "out", alive.name])
