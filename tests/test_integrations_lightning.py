"""``ClusterEnvEnvironment`` against the real Lightning, where it is installed.

The mapping from the cluster contract is checked with plain dicts; "never writes os.environ"
and a real two-process Fabric job run in their own interpreters, where the environment is the
process's own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterenv.config import ClusterConfig
from tests.conftest import require_module
from tests.simcluster import base_env
from tests.test_config import RUNPOD_NODE1, TORCHRUN_WORKER

lightning_env = require_module("clusterenv.integrations.lightning", "pip install lightning")
ClusterEnvEnvironment = lightning_env.ClusterEnvEnvironment

NODE1 = {**RUNPOD_NODE1, "NUM_TRAINERS": "2", "WORLD_SIZE": "4"}
EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "fabric_allreduce.py"


def test_it_is_a_lightning_cluster_environment() -> None:
    env = ClusterEnvEnvironment(environ=NODE1)
    assert isinstance(env, lightning_env.ClusterEnvironment)  # lightning's, else the standalone
    assert lightning_env.ClusterEnvironment.__module__.startswith(("lightning.", "lightning_"))
    try:  # pytorch-lightning's own base class, when that package is installed too
        from lightning_fabric.plugins.environments.cluster_environment import (  # type: ignore[import-not-found,unused-ignore]
            ClusterEnvironment as Standalone,
        )
    except ImportError:
        return
    assert isinstance(env, Standalone)


def test_a_runpod_node_before_any_process_is_started() -> None:
    env = ClusterEnvEnvironment(environ=NODE1)
    assert env.creates_processes_externally is False  # Lightning starts the processes
    assert (env.main_address, env.main_port) == ("10.65.0.2", 29500)
    assert (env.node_rank(), env.local_rank(), env.global_rank(), env.world_size()) == (
        1, 0, 2, 4,
    )
    assert (env.num_nodes, env.num_trainers) == (2, 2)


def test_a_process_lightning_started_on_that_node() -> None:
    env = ClusterEnvEnvironment(environ={**NODE1, "LOCAL_RANK": "1"})
    assert env.creates_processes_externally is True
    assert (env.local_rank(), env.global_rank()) == (1, 3)


def test_a_torchrun_worker_reports_torchruns_ranks() -> None:
    env = ClusterEnvEnvironment(environ=TORCHRUN_WORKER)
    assert env.creates_processes_externally is True
    assert (env.global_rank(), env.local_rank(), env.node_rank(), env.world_size()) == (
        9, 1, 1, 16,
    )
    assert (env.main_address, env.main_port) == ("10.65.0.2", 29500)
    assert env.num_trainers == 8


def test_setters_keep_values_on_the_instance() -> None:
    environ = dict(NODE1)
    env = ClusterEnvEnvironment(environ=environ)
    env.set_world_size(6)
    env.set_global_rank(5)
    assert (env.world_size(), env.global_rank()) == (6, 5)
    env.teardown()
    assert environ == NODE1


def test_a_config_can_be_given_directly(tmp_path: Path) -> None:
    env = ClusterEnvEnvironment(ClusterConfig.from_env(NODE1), environ={})
    assert env.node_rank() == 1
    local = ClusterEnvEnvironment(environ={}, root=tmp_path)
    port = local.main_port
    assert local.main_address == "127.0.0.1"
    assert 0 < port < 65536 and local.main_port == port  # a free port, chosen once


def test_validate_settings_names_the_value_to_use() -> None:
    env = ClusterEnvEnvironment(environ=NODE1)
    env.validate_settings(num_devices=2, num_nodes=2)
    with pytest.raises(ValueError, match="HINT: set num_nodes=2"):
        env.validate_settings(num_devices=2, num_nodes=1)
    worker = ClusterEnvEnvironment(environ=TORCHRUN_WORKER)
    with pytest.raises(ValueError, match="HINT: set devices=8"):
        worker.validate_settings(num_devices=4, num_nodes=2)


def test_fewer_devices_than_the_node_runs_is_refused_up_front() -> None:
    # Runpod node with NUM_TRAINERS=2: devices=1 would make Lightning's WORLD_SIZE disagree
    # with every node's contract; the parent refuses before any child starts.
    env = ClusterEnvEnvironment(environ=NODE1)
    with pytest.raises(ValueError, match=r"devices=1 but this node runs 2 processes") as info:
        env.validate_settings(num_devices=1, num_nodes=2)
    assert "HINT: set devices=2" in str(info.value)
    assert "--nproc-per-node 1" in str(info.value)
    # Where the per-node count is only a guess from the visible GPUs, any devices are fine: a
    # laptop, or a SkyPilot CPU node (SKYPILOT_NUM_GPUS_PER_NODE=0).
    ClusterEnvEnvironment(environ={}).validate_settings(num_devices=4, num_nodes=1)
    sky = {"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NUM_GPUS_PER_NODE": "0",
           "SKYPILOT_NODE_IPS": "10.0.0.4\n10.0.0.5"}
    ClusterEnvEnvironment(environ=sky).validate_settings(num_devices=3, num_nodes=2)
    with pytest.raises(ValueError, match="SKYPILOT_NUM_GPUS_PER_NODE=8"):
        ClusterEnvEnvironment(environ={**sky, "SKYPILOT_NUM_GPUS_PER_NODE": "8"}
                              ).validate_settings(num_devices=3, num_nodes=2)


_EVERY_METHOD = """\
import json, os
from clusterenv.integrations.lightning import ClusterEnvEnvironment  # imports Lightning
import lightning  # Lightning's own import sets a few variables; only ours count below

snapshots = [dict(os.environ)]
env = ClusterEnvEnvironment()
snapshots.append(dict(os.environ))
values = {}
for name in ("creates_processes_externally", "main_address", "main_port"):
    values[name] = getattr(env, name)
    snapshots.append(dict(os.environ))
calls = [("detect", ()), ("world_size", ()), ("set_world_size", (6,)), ("global_rank", ()),
         ("set_global_rank", (5,)), ("local_rank", ()), ("node_rank", ()),
         ("validate_settings", (2, 2)), ("world_size", ()), ("global_rank", ()),
         ("teardown", ())]
for name, args in calls:
    values[name] = getattr(env, name)(*args)
    snapshots.append(dict(os.environ))
print(json.dumps({"values": values, "unchanged": all(s == snapshots[0] for s in snapshots)}))
"""


def test_never_writes_os_environ() -> None:
    proc = subprocess.run([sys.executable, "-c", _EVERY_METHOD], env={**base_env(), **NODE1},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    assert out["unchanged"] is True
    assert out["values"] == {
        "creates_processes_externally": False, "main_address": "10.65.0.2", "main_port": 29500,
        "detect": True, "world_size": 6, "set_world_size": None, "global_rank": 5,
        "set_global_rank": None, "local_rank": 0, "node_rank": 1, "validate_settings": None,
        "teardown": None,
    }


def test_fabric_takes_it_as_its_cluster_environment() -> None:
    import lightning as L

    env = ClusterEnvEnvironment(environ=NODE1)
    fabric = L.Fabric(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", plugins=[env])
    assert getattr(fabric.strategy, "cluster_environment", None) is env


def test_the_documented_fabric_example_runs_under_clusterenv_launch(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "clusterenv", "launch", "-q", "--nproc-per-node", "2", "--",
         str(EXAMPLE)],
        env=base_env(), capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Workers share stdout: match whole messages, wherever the line breaks fall.
    found = re.findall(r"rank (\d)/2 on node 0: sum=3", proc.stdout)
    assert sorted(found) == ["0", "1"], proc.stdout + proc.stderr[-4000:]
