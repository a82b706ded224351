"""A CLI that agrees with itself: a fix doctor prints runs here, or says what it needs first;
the header never calls an invalid two-node contract "one node"."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from clusterenv.diagnosis import diagnose_with_plan
from clusterenv.diagnosis.assumed import assumptions
from tests.nccl_hosts import B0_ENV, b0
from tests.venvs import partial_venv

MULTI_NODE = {"MASTER_ADDR": "10.99.0.1", "MASTER_PORT": "29500", "NUM_NODES": "2",
              "NODE_RANK": "1", "NUM_TRAINERS": "1", "CLUSTERENV_NCCL_LIBRARY": "none"}


@pytest.fixture(scope="module")
def no_torch_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with clusterenv's dependencies and no torch, as the README's
    ``pip install .`` venv on a node where PyTorch lives in another environment."""
    venv = partial_venv(tmp_path_factory.mktemp("notorch"),
                        without=("torch", "nvidia", "lightning", "accelerate", "deepspeed"))
    return venv / "bin" / "python"


def _run(python: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", **MULTI_NODE}
    return subprocess.run([str(python), "-m", "clusterenv", *argv], env=env, text=True,
                          capture_output=True, timeout=120, check=False)


def test_a_launch_fix_says_what_it_needs_where_torch_is_missing(no_torch_python: Path) -> None:
    """The fix `clusterenv launch -- train.py` fails on a node without torch; doctor says so
    instead of printing a fix that cannot run."""
    launch = _run(no_torch_python, "launch", "--", "train.py")
    assert launch.returncode == 2 and "torchrun not found" in launch.stderr, launch.stderr
    assert max(len(line) for line in launch.stderr.splitlines()) <= 160, launch.stderr
    assert launch.stderr.count("/usr/bin:/bin") <= 1, launch.stderr
    report = json.loads(_run(no_torch_python, "doctor", "--json").stdout)
    [missing] = [f for f in report["findings"] if f["code"] == "launcher-missing"]
    assert missing["fix"].startswith("install PyTorch in this Python environment"), missing
    assert any("cannot import torch" in e for e in missing["evidence"]), missing


def test_where_torch_is_installed_the_fix_is_launch_itself(tmp_path: Path) -> None:
    b0(tmp_path)
    env = {**B0_ENV, "PATH": os.environ.get("PATH", "")}
    report = diagnose_with_plan(env, ask_nccl=False)
    [missing] = [f for f in report.findings if f.code == "launcher-missing"]
    assert missing.fix.startswith("clusterenv launch -- train.py")


def test_an_invalid_two_node_contract_is_not_called_one_node(tmp_path: Path) -> None:
    b0(tmp_path)
    facts = diagnose_with_plan({**B0_ENV, "PRIMARY_PORT": "abc"}, root=tmp_path).facts
    assert facts.config is None
    assert assumptions(facts).cluster_interface == "unknown: the cluster environment is invalid"
