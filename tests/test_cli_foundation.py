"""`clusterenv show` and `clusterenv doctor` on the config (snapshots replay an environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterenv.cli import main
from clusterenv.testing import HostBuilder
from tests.test_config import RUNPOD


def snapshot(tmp_path: Path, environ: dict[str, str]) -> str:
    HostBuilder(tmp_path).loopback().environ(environ)
    return str(tmp_path)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_show_json_on_a_runpod_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(capsys, "show", "--json", "--root", snapshot(tmp_path, RUNPOD))
    assert code == 0
    config = data["config"]
    assert isinstance(config, dict)
    assert config["source"] == "runpod" and config["world_size"] == 16
    assert config["host_node_addr"] == "10.65.0.2:29500"


def test_doctor_exit_1_names_the_variables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = snapshot(tmp_path, {**RUNPOD, "WORLD_SIZE": "2"})
    code, data = run_json(capsys, "doctor", "--json", "--root", root)
    assert code == 1
    findings = data["findings"]
    assert isinstance(findings, list)
    world = [f for f in findings if f["code"] == "config-world-size"]
    assert len(world) == 1 and world[0]["severity"] == "error"
    assert "WORLD_SIZE='2'" in world[0]["evidence"]


def test_doctor_human_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = snapshot(tmp_path, {**RUNPOD, "NODE_RANK": "two"})
    assert main(["doctor", "--root", root]) == 1
    out = capsys.readouterr().out
    assert "NODE_RANK='two'" in out and "fix: export NODE_RANK=0" in out


def test_show_with_a_broken_environment_exits_2_and_still_shows_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An invalid contract is when a user needs the node's interfaces, RDMA and host facts."""
    root = snapshot(tmp_path, {**RUNPOD, "NUM_NODES": "zero"})
    assert main(["show", "--root", root]) == 2
    out = capsys.readouterr().out
    assert "NUM_NODES='zero'" in out
    for section in ("network", "rdma", "host", "findings"):
        assert f"\n{section}\n" in out, out
    assert main(["show", "--json", "--root", root]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["config"] is None and any("NUM_NODES='zero'" in p for p in data["problems"])
    assert {"network", "rdma", "host", "findings"} <= set(data)


def test_unreadable_root_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--root", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err


def test_nothing_set_prints_the_local_default_and_exits_0(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    for verb in ("show", "doctor"):
        result = subprocess.run(
            [sys.executable, "-m", "clusterenv", verb, "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["config"]["source"] == "local"
        assert data["config"]["primary_addr"] == "127.0.0.1"
