"""``clusterenv.integrations.torch.init_process_group`` against the real torch.

Each torch run happens in its own interpreter: a process group is global state, and the helper's
``environ=None`` path reads the process's own environment, which these tests never change.
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
from clusterenv.errors import LaunchError
from clusterenv.integrations.torch import (
    TORCH_RANK_MESSAGE,
    init_process_group,
    missing_launcher_message,
)
from tests.simcluster import base_env
from tests.test_config import RUNPOD_NODE1, TORCHRUN_WORKER

NODE1 = {**RUNPOD_NODE1, "NUM_TRAINERS": "2", "WORLD_SIZE": "4"}
EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "torch_allreduce.py"

_STEP = """\
import json, os, sys
import torch
import torch.distributed as dist
from clusterenv.integrations.torch import init_process_group

before = dict(os.environ)  # after torch's own import: only the helper's effect counts
info = init_process_group(timeout=30)
value = torch.tensor([float(info.rank + 1)])
dist.all_reduce(value)
changed = sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k))
result = json.dumps({
    "backend": info.backend, "rank": info.rank, "world_size": info.world_size,
    "local_rank": info.local_rank, "device": info.device, "launched": info.launched,
    "plan_env": None if info.plan is None else info.plan.env,
    "sum": value.item(), "changed": changed,
})
with open(f"result-{info.rank}.json", "w") as out:  # one file per rank: no interleaving
    out.write(result)
dist.destroy_process_group()
"""


def _results(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob("result-*.json"))]


@pytest.mark.usefixtures("torch_required")
def test_a_single_process_gets_a_world_of_one_without_touching_the_environment(
    tmp_path: Path,
) -> None:
    script = tmp_path / "step.py"
    script.write_text(_STEP)
    proc = subprocess.run([sys.executable, str(script)], env=base_env(), capture_output=True,
                          text=True, timeout=120, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _results(tmp_path) == [{
        "backend": "gloo", "rank": 0, "world_size": 1, "local_rank": 0, "device": "cpu",
        "launched": False, "plan_env": None, "sum": 1.0, "changed": [],
    }]


@pytest.mark.usefixtures("torch_required")
def test_the_documented_example_runs_two_processes_under_clusterenv_launch(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "clusterenv", "launch", "-q", "--nproc-per-node", "2", "--",
         str(EXAMPLE)],
        env=base_env(), capture_output=True, text=True, timeout=180, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    # Workers share stdout: match whole messages, wherever the line breaks fall.
    found = re.findall(r"rank (\d)/2 \(gloo on cpu\): sum=3 expected=3", proc.stdout)
    assert sorted(found) == ["0", "1"], proc.stdout + proc.stderr


def test_runpod_variables_without_a_launcher_explain_the_command() -> None:
    environ = dict(NODE1)
    with pytest.raises(LaunchError) as exc:
        init_process_group(environ=environ)
    message = str(exc.value)
    assert TORCH_RANK_MESSAGE in message
    assert "clusterenv launch -- " in message
    assert ("torchrun --nnodes=2 --nproc-per-node=2 --node-rank=1 --rdzv-backend=static "
            "--master-addr=10.65.0.2 --master-port=29500 ") in message
    assert environ == NODE1  # nothing applied before refusing


def test_missing_launcher_message_names_the_script_and_this_node() -> None:
    message = missing_launcher_message(ClusterConfig.from_env(NODE1),
                                       ["train.py", "--data", "my data"])
    assert "    clusterenv launch -- train.py --data 'my data'\n" in message
    assert "on this node (node rank 1)" in message
    assert message.endswith("--master-port=29500 train.py --data 'my data'")
    assert "2 node(s) x 2 processes (WORLD_SIZE=4)" in message


_NO_TORCH = """\
import sys
sys.modules["torch"] = None  # torch cannot be imported in this interpreter
import clusterenv.integrations.torch as helper
from clusterenv.errors import LaunchError
try:
    helper.init_process_group(environ=dict(NODE1))
except LaunchError as e:
    print("LaunchError", "RANK expected" in str(e))
"""


def test_the_module_and_the_refusal_do_not_need_torch() -> None:
    code = f"NODE1 = {NODE1!r}\n" + _NO_TORCH
    proc = subprocess.run([sys.executable, "-c", code], env=base_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "LaunchError True"


def test_a_broken_worker_environment_is_a_config_error() -> None:
    broken = {**TORCHRUN_WORKER, "LOCAL_RANK": "8"}  # LOCAL_WORLD_SIZE is 8
    with pytest.raises(ValueError, match="LOCAL_RANK=8 is outside"):
        init_process_group(environ=broken, apply_defaults=False)
