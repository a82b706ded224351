"""One scrubber for every surface: no credential reaches a snapshot, a fingerprint, or any line
or ``--json`` document that ``show``, ``doctor``, ``env``, ``capture`` or ``nccl-log`` prints.

The disguises are the ones a real environment has: a Slurm REST token (``SLURM_JWT``, set by
``scontrol token`` for slurmrestd clients), URL passwords holding ``/``, ``#``, ``?`` or a
second ``@``, a JSON Web Token under an innocent name, and NCCL's own INFO lines echoing
variables (``%s set by environment to %s``: ``src/misc/param.cc`` and
``src/bootstrap.cc`` ``NCCL_COMM_ID set by environment to %s`` at v2.21.5-1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterenv._scrub import is_secret_name, is_secret_value, scrub_text, scrub_value
from clusterenv.capture import capture
from clusterenv.preflight import collect_fingerprint
from tests.test_capture import rich_host

# Each secret is a distinct string, so a leak names the rule that missed it.
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJib2IiLCJleHAiOjE3OTk5OTk5OTl9"
       ".dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk")
SLASH, HASH, QUERY, AT = "SEC/RET1", "SEC#RET2", "SEC?RET3", "p@SECRET4"
BASE64 = "AKIAQWERTYUIOPASDFGH1234zxcvbnmQWERTY98765lkjh"
SECRETS = (JWT, SLASH, HASH, QUERY, AT, BASE64, "0x5EC12E7")

ENVIRON = {
    "PRIMARY_ADDR": "10.65.0.2", "PRIMARY_PORT": "29500", "NODE_ADDR": "10.65.0.2",
    "NODE_RANK": "0", "NUM_NODES": "2", "NUM_TRAINERS": "2",
    "SLURM_JWT": JWT,
    "NCCL_COMM_ID_BACKUP": JWT,  # an innocent name, a token's shape
    "PET_RDZV_ENDPOINT": f"etcd://root:{SLASH}@10.65.0.2:2379",
    "NCCL_NET_PLUGIN": f"https://bob:{HASH}@plugins.example/x.so",
    "TORCHELASTIC_RUN_ID": BASE64,
    "NCCL_TOPO_FILE": f"https://bob:{QUERY}@h/topo.xml",
    "NCCL_GRAPH_FILE": f"https://bob:{AT}@h/graph.xml",
    "NCCL_IB_KEY": "0x5EC12E7",
}

# NCCL's own lines (format strings named above) echoing the same values.
LOG = f"""\
node0:100:100 [0] NCCL INFO NCCL_IB_KEY set by environment to 0x5EC12E7.
node0:100:100 [0] NCCL INFO NCCL_COMM_ID set by environment to etcd://root:{SLASH}@10.65.0.2:2379
node0:100:100 [0] NCCL INFO NET/Plugin: Plugin load (https://bob:{HASH}@plugins.example/x.so) \
returned 2 : x.so: cannot open shared object file: No such file or directory
node0:100:100 [0] NCCL INFO NCCL_TOPO_FILE set by environment to https://bob:{QUERY}@h/topo.xml
node0:100:100 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to https://bob:{AT}@h/graph.xml
node0:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.65.0.2<0>
node0:100:100 [0] NCCL INFO cudaDriverVersion 12040
node0:100:100 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
"""


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


@pytest.mark.parametrize("value", [JWT, BASE64, "0123456789abcdef0123456789abcdef",
                                   "0x" + "ab" * 20])
def test_credential_shaped_values(value: str) -> None:
    assert is_secret_value(value)
    assert scrub_value(value) == "***"


@pytest.mark.parametrize("value", [
    "/usr/local/cuda/lib64:/opt/nccl/lib", "GPU-0b5c6a1e-7a5f-4d4b-9c8e-2f1a3b4c5d6e",
    "node-[001-128,200-255]", "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1",
    "10.65.0.2", "fe80::e42:a1ff:fe44:5566", "0x8001", "ens1", "INFO",
    "trainer-worker-0-abcdefghijklmnopqrstuvwxyz-0123456789",
])
def test_ordinary_values_are_kept(value: str) -> None:
    assert not is_secret_value(value)
    assert scrub_value(value) == value


@pytest.mark.parametrize("name", ["SLURM_JWT", "MY_BEARER", "HF_TOKEN", "NCCL_IB_KEY"])
def test_token_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(("url", "scrubbed"), [
    (f"etcd://root:{SLASH}@h", "etcd://***@h"),
    (f"https://bob:{HASH}@h/x.so", "https://***@h/x.so"),
    (f"https://bob:{QUERY}@h:443/x", "https://***@h:443/x"),
    (f"https://bob:{AT}@h", "https://***@h"),
])
def test_userinfo_is_scrubbed_up_to_the_last_at(url: str, scrubbed: str) -> None:
    assert scrub_value(url) == scrubbed
    assert scrub_text(f"NCCL_X set by environment to {url} and more") == (
        f"NCCL_X set by environment to {scrubbed} and more")


def test_no_credential_in_a_snapshot(tmp_path: Path) -> None:
    rich_host(tmp_path / "snap").environ(ENVIRON)
    out = capture(tmp_path / "out", root=tmp_path / "snap")
    text = "\n".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
    assert _leaks(text) == []
    environ = json.loads((out / ".clusterenv/host.json").read_text())["environ"]
    assert "SLURM_JWT" not in environ
    assert environ["PET_RDZV_ENDPOINT"] == "etcd://***@10.65.0.2:2379"
    assert environ["NCCL_NET_PLUGIN"] == "https://***@plugins.example/x.so"
    assert environ["TORCHELASTIC_RUN_ID"] == "***"


def test_no_credential_in_a_fingerprint(tmp_path: Path) -> None:
    rich_host(tmp_path / "snap")
    fingerprint = collect_fingerprint(environ=ENVIRON, root=tmp_path / "snap")
    assert _leaks(json.dumps(fingerprint.to_wire())) == []


def _cli(argv: list[str], env: dict[str, str]) -> str:
    base = {"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent",
            "CLUSTERENV_NCCL_LIBRARY": "none"}
    result = subprocess.run([sys.executable, "-m", "clusterenv", *argv], env={**base, **env},
                            capture_output=True, text=True, check=False, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout + result.stderr


@pytest.mark.parametrize("verb", ["show", "doctor", "env"])
@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_no_credential_in_what_a_verb_prints(tmp_path: Path, verb: str, json_output: bool) -> None:
    rich_host(tmp_path / "snap")
    argv = [verb, "--root", str(tmp_path / "snap")]
    if json_output:
        argv.append("--json" if verb != "env" else "--format=json")
    assert _leaks(_cli(argv, ENVIRON)) == []


@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_no_credential_in_an_nccl_log_report(tmp_path: Path, json_output: bool) -> None:
    log = tmp_path / "nccl.log"
    log.write_text(LOG)
    printed = _cli(["nccl-log", str(log), *(["--json"] if json_output else [])], {})
    assert "NCCL_COMM_ID" in printed or "etcd://***@" in printed or "Plugin" in printed, printed
    assert _leaks(printed) == []


def test_no_credential_in_capture_output(tmp_path: Path) -> None:
    printed = _cli(["capture", str(tmp_path / "out")], ENVIRON)
    assert _leaks(printed) == []
    text = "\n".join(p.read_text(errors="replace")
                     for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert _leaks(text) == []
