"""Launcher renderers, the launch plan, and `clusterenv launch` on this machine.

Renderer outputs are checked against the target tools' own argument parsers where they are
importable: torchrun's ``get_args_parser()`` (also for ``PET_*``), accelerate's
``launch_command_parser()`` followed by its own torchrun translation, DeepSpeed's
``parse_args()``, hostfile parser and export quoting.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterenv.cli import main
from clusterenv.config import ClusterConfig
from clusterenv.errors import LaunchError
from clusterenv.launch import (
    accelerate_args,
    deepspeed_args,
    deepspeed_env_text,
    deepspeed_hostfile_text,
    find_torchrun,
    plan_launch,
    torchrun_args,
    torchrun_env,
    write_deepspeed_env,
)
from clusterenv.testing import HostBuilder
from tests.conftest import require_module
from tests.simcluster import base_env
from tests.test_config import RUNPOD, RUNPOD_NODE1, TORCHRUN_WORKER

# Node 1 of a 2 x 2 cluster.
NODE1 = {**RUNPOD_NODE1, "NUM_TRAINERS": "2", "WORLD_SIZE": "4"}


def node1_config() -> ClusterConfig:
    return ClusterConfig.from_env(NODE1)


def runpod_host(tmp_path: Path, environ: dict[str, str], *, gpus: int = 0) -> Path:
    """A Runpod node 1: eth0 management, ens1 cluster, Debian /etc/hosts."""
    builder = (
        HostBuilder(tmp_path / "host")
        .loopback()
        .interface("eth0", addresses=["172.20.0.11/16"])
        .interface("ens1", addresses=["10.65.0.3/24"])
        .hostname("node-1")
        .file("etc/hosts", "127.0.0.1\tlocalhost\n127.0.1.1\tnode-1\n")
        .environ(environ)
    )
    if gpus:
        builder.gpus(gpus)
    return tmp_path / "host"


# -- torchrun ----------------------------------------------------------------------------------


def test_torchrun_args_are_a_static_rendezvous_on_the_primary() -> None:
    assert torchrun_args(node1_config()) == [
        "--nnodes=2",
        "--nproc-per-node=2",
        "--node-rank=1",
        "--rdzv-backend=static",
        "--master-addr=10.65.0.2",
        "--master-port=29500",
    ]
    assert "--nproc-per-node=1" in torchrun_args(node1_config(), nproc_per_node=1)


def test_local_default_uses_standalone_so_a_busy_port_does_not_matter(tmp_path: Path) -> None:
    cfg = ClusterConfig.from_env({}, root=tmp_path)
    assert torchrun_args(cfg) == ["--standalone", "--nnodes=1", "--nproc-per-node=1"]
    assert torchrun_env(cfg) == {
        "PET_STANDALONE": "1", "PET_NNODES": "1", "PET_NPROC_PER_NODE": "1",
    }


def test_torchrun_env_names_every_option() -> None:
    assert torchrun_env(node1_config()) == {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "2",
        "PET_NODE_RANK": "1",
        "PET_RDZV_BACKEND": "static",
        "PET_MASTER_ADDR": "10.65.0.2",
        "PET_MASTER_PORT": "29500",
    }


def test_nproc_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="nproc_per_node=0"):
        torchrun_args(node1_config(), nproc_per_node=0)


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(1, 64),
    data=st.data(),
    trainers=st.integers(1, 16),
    port=st.integers(1, 65535),
    last_octet=st.integers(1, 254),
)
def test_torchrun_args_and_pet_env_always_agree(
    nodes: int, data: st.DataObject, trainers: int, port: int, last_octet: int
) -> None:
    rank = data.draw(st.integers(0, nodes - 1))
    primary = f"10.65.0.{last_octet}"
    cfg = ClusterConfig.from_env({
        "MASTER_ADDR": primary, "MASTER_PORT": str(port), "NODE_RANK": str(rank),
        "NUM_NODES": str(nodes), "NUM_TRAINERS": str(trainers),
    })
    flags = dict(arg[2:].split("=", 1) for arg in torchrun_args(cfg))
    as_env = {f"PET_{name.upper().replace('-', '_')}": value for name, value in flags.items()}
    assert as_env == torchrun_env(cfg)
    assert flags["nnodes"] == str(nodes) and flags["node-rank"] == str(rank)
    accelerate = dict(arg[2:].split("=", 1) for arg in accelerate_args(cfg) if "=" in arg)
    assert accelerate["num_processes"] == str(nodes * trainers)  # accelerate counts all


_PARSE_WITH_TORCHRUN = """\
import json, os, sys
from torch.distributed.run import get_args_parser
keys = ("nnodes", "nproc_per_node", "node_rank", "master_addr", "master_port", "rdzv_backend",
        "standalone", "training_script", "training_script_args")
out = []
for args, env in json.loads(sys.argv[1]):
    for name in [n for n in os.environ if n.startswith("PET_")]:
        del os.environ[name]
    os.environ.update(env)  # this throwaway interpreter's own environment
    ns = get_args_parser().parse_args(args)
    out.append({k: getattr(ns, k) for k in keys})
print(json.dumps(out))
"""


def _torchrun_namespaces(cases: list[tuple[list[str], dict[str, str]]]) -> list[dict[str, Any]]:
    """Parse each (argv, PET_* env) with torch.distributed.run's own parser, in a fresh
    interpreter: the parser reads PET_* from os.environ, which this test process never changes."""
    proc = subprocess.run(
        [sys.executable, "-c", _PARSE_WITH_TORCHRUN, json.dumps(cases)],
        env=base_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: list[dict[str, Any]] = json.loads(proc.stdout.splitlines()[-1])
    return result


@pytest.mark.usefixtures("torch_required")
def test_torchrun_parses_our_arguments_and_our_pet_variables_the_same(tmp_path: Path) -> None:
    cfg = node1_config()
    local = ClusterConfig.from_env({}, root=tmp_path)
    expected = {
        "nnodes": "2", "nproc_per_node": "2", "node_rank": 1, "master_addr": "10.65.0.2",
        "master_port": 29500, "rdzv_backend": "static", "standalone": False,
        "training_script": "train.py", "training_script_args": ["--lr", "3e-4"],
    }
    from_args, from_env, local_env, user_option = _torchrun_namespaces([
        ([*torchrun_args(cfg), "train.py", "--lr", "3e-4"], {}),
        (["train.py", "--lr", "3e-4"], torchrun_env(cfg)),
        (["train.py"], torchrun_env(local)),
        # `clusterenv launch -- --nproc-per-node=1 train.py`: the user's option comes later
        ([*torchrun_args(cfg), "--nproc-per-node=1", "train.py", "--lr", "3e-4"], {}),
    ])
    assert from_args == expected
    assert from_env == expected
    assert user_option == {**expected, "nproc_per_node": "1"}
    assert local_env["standalone"] is True
    assert (local_env["nnodes"], local_env["nproc_per_node"]) == ("1", "1")


# -- accelerate --------------------------------------------------------------------------------


def test_accelerate_args_count_all_processes() -> None:
    assert accelerate_args(node1_config()) == [
        "--num_machines=2",
        "--machine_rank=1",
        "--main_process_ip=10.65.0.2",
        "--main_process_port=29500",
        "--num_processes=4",
        "--multi_gpu",
        "--same_network",
        "--rdzv_backend=static",
    ]


def test_accelerate_args_for_one_local_process(tmp_path: Path) -> None:
    cfg = ClusterConfig.from_env({}, root=tmp_path)
    assert accelerate_args(cfg) == ["--num_machines=1", "--machine_rank=0", "--num_processes=1"]


def test_accelerate_turns_our_arguments_into_the_same_torchrun_rendezvous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launch = require_module("accelerate.commands.launch", "pip install accelerate")
    from accelerate.utils.launch import _filter_args, prepare_multi_gpu_env
    from torch.distributed.run import get_args_parser

    # accelerate reads a default config file from HF_HOME; make sure there is none.
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    args = launch.launch_command_parser().parse_args(
        [*accelerate_args(node1_config()), "train.py", "--lr", "3e-4"]
    )
    assert (args.num_machines, args.machine_rank, args.num_processes) == (2, 1, 4)
    assert (args.training_script, args.training_script_args) == ("train.py", ["--lr", "3e-4"])
    args, _, _ = launch._validate_launch_command(args)
    prepare_multi_gpu_env(args)  # what `accelerate launch` does before torchrun
    torchrun = _filter_args(args, get_args_parser(), ["train.py"])
    assert (torchrun.nnodes, torchrun.nproc_per_node, torchrun.node_rank) == ("2", "2", 1)
    assert (torchrun.master_addr, str(torchrun.master_port)) == ("10.65.0.2", "29500")
    assert torchrun.rdzv_backend == "static"
    assert not getattr(torchrun, "rdzv_endpoint", "")


# -- DeepSpeed ---------------------------------------------------------------------------------


def test_deepspeed_args_and_hostfile() -> None:
    cfg = node1_config()
    assert deepspeed_args(cfg, hostfile="/job/hostfile") == [
        "--hostfile=/job/hostfile",
        "--no_ssh",
        "--node_rank=1",
        "--num_nodes=2",
        "--num_gpus=2",
        "--master_addr=10.65.0.2",
        "--master_port=29500",
    ]
    assert deepspeed_hostfile_text(cfg) == "node-0 slots=2\nnode-1 slots=2\n"


def test_deepspeed_parses_our_arguments_hostfile_and_env_file(tmp_path: Path) -> None:
    runner = require_module("deepspeed.launcher.runner",
                            "pip install --no-build-isolation deepspeed (after torch)")
    from deepspeed.launcher.multinode_runner import PDSHRunner

    cfg = node1_config()
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(deepspeed_hostfile_text(cfg))
    args = runner.parse_args([*deepspeed_args(cfg, hostfile=hostfile), "train.py", "--lr", "3"])
    assert args.no_ssh is True
    assert (args.node_rank, args.num_nodes, args.num_gpus) == (1, 2, 2)
    assert (args.master_addr, args.master_port) == ("10.65.0.2", 29500)
    assert (args.user_script, args.user_args) == ("train.py", ["--lr", "3"])
    pool = runner.fetch_hostfile(args.hostfile)
    assert dict(pool) == {"node-0": 2, "node-1": 2}
    # The node finds its own line by --node_rank; there must be one per node.
    assert 0 <= args.node_rank < len(pool)

    # .deepspeed_env as DeepSpeed reads it: split each line at the first '=', then export.
    text = deepspeed_env_text({"NCCL_SOCKET_IFNAME": "=ens1", "GLOO_SOCKET_IFNAME": "ens1",
                               "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"})
    pdsh = PDSHRunner(args, "")
    for line in text.splitlines(keepends=True):
        key, val = line.split("=", maxsplit=1)
        pdsh.add_export(key, val)
    assert pdsh.exports == {
        "NCCL_SOCKET_IFNAME": "=ens1", "GLOO_SOCKET_IFNAME": "ens1",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
    }


def test_deepspeed_env_text_refuses_what_the_reader_would_mangle() -> None:
    with pytest.raises(ValueError, match="one line"):
        deepspeed_env_text({"NCCL_DEBUG": "INFO\nNCCL_P2P_DISABLE=1"})
    with pytest.raises(ValueError, match="not an environment variable name"):
        deepspeed_env_text({"NCCL SOCKET": "ens1"})
    assert deepspeed_env_text({}) == ""


def test_write_deepspeed_env_keeps_other_variables(tmp_path: Path) -> None:
    path = tmp_path / ".deepspeed_env"
    path.write_text("PYTHONPATH=/code\nNCCL_SOCKET_IFNAME=eth0\n")
    write_deepspeed_env(path, {"NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1"})
    assert path.read_text() == (
        "PYTHONPATH=/code\nNCCL_SOCKET_IFNAME=ens1\nGLOO_SOCKET_IFNAME=ens1\n"
    )
    write_deepspeed_env(path, {"A": "1"}, merge=False)
    assert path.read_text() == "A=1\n"


# -- the launch plan ---------------------------------------------------------------------------


def test_plan_applies_the_cluster_interface_and_builds_the_command(tmp_path: Path) -> None:
    root = runpod_host(tmp_path, NODE1)
    plan = plan_launch(command=["train.py", "--lr", "3e-4"], environ=NODE1, root=root,
                       torchrun=["torchrun"])
    assert plan.command == ("torchrun", *torchrun_args(node1_config()), "train.py", "--lr",
                            "3e-4")
    assert plan.nccl.env == {"NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1",
                             "TP_SOCKET_IFNAME": "ens1"}
    assert plan.recorder is not None  # the flight recorder's variables come on top
    assert plan.changes == {**plan.nccl.env, **plan.recorder.env}
    assert plan.environ["GLOO_SOCKET_IFNAME"] == "ens1"
    assert plan.environ["NODE_RANK"] == "1"
    assert not [f for f in plan.findings if f.severity == "error"]


def test_plan_keeps_a_harmful_user_value_and_reports_it(tmp_path: Path) -> None:
    environ = {**NODE1, "GLOO_SOCKET_IFNAME": "eth0"}
    root = runpod_host(tmp_path, environ)
    plan = plan_launch(command=["train.py"], environ=environ, root=root, torchrun=["torchrun"])
    assert plan.environ["GLOO_SOCKET_IFNAME"] == "eth0"
    kept = {c.name: c for c in plan.nccl.changes}["GLOO_SOCKET_IFNAME"]
    assert (kept.action, kept.harmful) == ("keep", True)
    assert any(f.severity == "error" and "GLOO_SOCKET_IFNAME" in f.title for f in plan.findings)
    overridden = plan_launch(environ, command=["train.py"], root=root, torchrun=["torchrun"],
                             override=True)
    assert overridden.environ["GLOO_SOCKET_IFNAME"] == "ens1"


def test_plan_warns_when_more_processes_than_gpus(tmp_path: Path) -> None:
    root = runpod_host(tmp_path, NODE1, gpus=2)
    plan = plan_launch(command=["train.py"], environ=NODE1, root=root, torchrun=["torchrun"],
                       nproc_per_node=4)
    codes = {f.code: f for f in plan.findings}
    assert codes["launch-nproc-exceeds-gpus"].severity == "warning"
    assert "invalid device ordinal" in codes["launch-nproc-exceeds-gpus"].title
    assert codes["launch-nproc-differs"].severity == "info"
    assert "--nproc-per-node=4" in plan.command
    fine = plan_launch(command=["train.py"], environ=NODE1, root=root, torchrun=["torchrun"])
    assert "launch-nproc-exceeds-gpus" not in {f.code for f in fine.findings}


def test_plan_refuses_inside_a_worker_and_without_a_script(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"already a launched worker \(RANK=9"):
        plan_launch(TORCHRUN_WORKER, command=["train.py"], root=tmp_path, torchrun=["torchrun"])
    with pytest.raises(LaunchError, match="nothing to launch"):
        plan_launch(command=[], environ=RUNPOD, root=tmp_path, torchrun=["torchrun"])


def test_find_torchrun_prefers_path(tmp_path: Path) -> None:
    script = tmp_path / "torchrun"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert find_torchrun({"PATH": str(tmp_path)}) == [str(script)]


@pytest.mark.usefixtures("torch_required")
def test_find_torchrun_falls_back_to_this_interpreter(tmp_path: Path) -> None:
    assert find_torchrun({"PATH": str(tmp_path)}) == [
        sys.executable, "-m", "torch.distributed.run",
    ]


def torchrun_script(directory: Path, head: str) -> Path:
    """A console script as pip writes it for torch: ``head`` (its interpreter lines), then the
    entry point."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "torchrun"
    script.write_text(f"{head}\nimport sys\nfrom torch.distributed.run import main\n"
                      "sys.exit(main())\n")
    script.chmod(0o755)
    return script


#: What pip writes when the interpreter's path is too long for a ``#!`` line.
LONG_PATH_HEAD = "#!/bin/sh\n'''exec' /opt/other-env/bin/python3 \"$0\" \"$@\"\n' '''"


@pytest.mark.usefixtures("torch_required")
@pytest.mark.parametrize("head", [
    "#!/opt/other-env/bin/python3",
    "#!/opt/other-env/bin/python3 -E",
    LONG_PATH_HEAD,
])
def test_a_torchrun_of_another_python_is_passed_over(tmp_path: Path, head: str) -> None:
    # A venv made with --system-site-packages over a container's PyTorch has no torchrun of
    # its own: the one on PATH runs the system Python, which lacks the venv's packages.
    torchrun_script(tmp_path / "bin", head)
    assert find_torchrun({"PATH": str(tmp_path / "bin")}) == [
        sys.executable, "-m", "torch.distributed.run",
    ]


@pytest.mark.parametrize("head", [
    f"#!{sys.executable}",
    "#!/usr/bin/env python3",  # follows PATH: nothing to judge
])
def test_a_torchrun_of_this_python_or_of_none_named_is_used(tmp_path: Path, head: str) -> None:
    script = torchrun_script(tmp_path / "bin", head)
    assert find_torchrun({"PATH": str(tmp_path / "bin")}) == [str(script)]


@pytest.mark.usefixtures("torch_required")
def test_launch_runs_the_job_with_this_environment_not_another_torchrun(tmp_path: Path) -> None:
    # End to end: a torchrun first on PATH whose interpreter is another environment's (here
    # one that does not exist, as good as one without torch); the job still runs, with this one.
    torchrun_script(tmp_path / "other" / "bin", "#!/opt/other-env/bin/python3")
    script = tmp_path / "step.py"
    script.write_text("import sys, clusterenv\nprint('worker ran', sys.executable)\n")
    env = base_env()
    env["PATH"] = f"{tmp_path / 'other' / 'bin'}:{env['PATH']}"
    proc = subprocess.run(
        [sys.executable, "-m", "clusterenv", "launch", "--", str(script)],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"worker ran {sys.executable}" in proc.stdout
    assert f"{sys.executable} -m torch.distributed.run" in proc.stderr  # the command shown


# -- the CLI -----------------------------------------------------------------------------------


def test_dry_run_json_on_a_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = runpod_host(tmp_path, {**NODE1, "GLOO_SOCKET_IFNAME": "eth0"})
    code = main(["launch", "--dry-run", "--json", "--root", str(root), "--", "train.py",
                 "--data", "my data"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # GLOO_SOCKET_IFNAME=eth0 is kept: the job would fail, so launch refuses
    assert out["refused"] is True
    assert set(out) == {"config", "command", "env", "plan", "recorder", "record", "findings",
                        "refused"}
    assert out["command"] == ["torchrun", *torchrun_args(node1_config()), "train.py", "--data",
                              "my data"]
    assert out["env"] == {"NCCL_SOCKET_IFNAME": "ens1", "TP_SOCKET_IFNAME": "ens1",
                          **out["recorder"]["env"]}
    actions = {c["name"]: c["action"] for c in out["plan"]["changes"]}
    assert actions["GLOO_SOCKET_IFNAME"] == "keep"
    assert out["config"]["node_rank"] == 1
    assert any(f["severity"] == "error" for f in out["findings"])
    forced = main(["launch", "--dry-run", "--json", "--force", "--root", str(root), "--",
                   "train.py"])
    assert forced == 0 and json.loads(capsys.readouterr().out)["refused"] is False


def test_dry_run_human_output_is_shell_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = runpod_host(tmp_path, NODE1)
    assert main(["launch", "--dry-run", "--nproc-per-node", "1", "--root", str(root),
                 "train.py", "--data", "my data"]) == 0
    out = capsys.readouterr().out
    expected = ["torchrun", *torchrun_args(node1_config(), nproc_per_node=1), "train.py",
                "--data", "my data"]
    assert f"  {shlex.join(expected)}\n" in out
    assert re.search(r"^set\s+NCCL_SOCKET_IFNAME\s+ens1\s", out, re.MULTILINE), out


def test_torchrun_options_and_modules_follow_ours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = runpod_host(tmp_path, NODE1)
    assert main(["launch", "--dry-run", "--json", "--root", str(root), "--",
                 "--max-restarts=3", "-m", "pkg.train", "--nproc-per-node", "3"]) == 0
    command = json.loads(capsys.readouterr().out)["command"]
    ours = torchrun_args(node1_config())
    assert command == ["torchrun", *ours, "--max-restarts=3", "-m", "pkg.train",
                       "--nproc-per-node", "3"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["launch", "--json", "--", "train.py"], "--json needs --dry-run"),
        (["launch", "--root", ".", "--", "train.py"], "--root needs --dry-run"),
    ],
)
def test_cli_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_nproc_per_node_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["launch", "--nproc-per-node", "0", "train.py"])
    assert exc.value.code == 2
    assert "at least 1" in capsys.readouterr().err


_BLOCK_TORCH = (
    "import sys\n"
    "sys.modules['torch'] = None  # how Python spells 'not importable'\n"
    "from clusterenv.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_missing_torchrun_is_a_clear_error(tmp_path: Path) -> None:
    env = {**base_env(), "PATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCK_TORCH, "launch", "--", "train.py"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "torchrun not found" in proc.stderr
    assert "pip install torch" in proc.stderr
    dry = subprocess.run(
        [sys.executable, "-c", _BLOCK_TORCH, "launch", "--dry-run", "--", "train.py"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert dry.returncode == 1, dry.stderr  # an error remains: the job could not start
    assert "[launch-torchrun-missing]" in dry.stdout
    assert "refusing to start the job: 1 error remains" in dry.stdout


# One write(2) per line: under PYTHONUNBUFFERED print() writes the text and the newline
# separately, and the two workers share one pipe, so their lines could interleave.
_WORKER = """\
import os, sys
line = (f"worker rank={os.environ['RANK']} world={os.environ['WORLD_SIZE']} "
        f"parent={os.getppid()}\\n")
os.write(1, line.encode())
sys.exit(int(os.environ.get("WORKER_EXIT", "0")))
"""


@pytest.mark.usefixtures("torch_required")
def test_launch_execs_torchrun_and_passes_its_exit_status_through(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    env = base_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterenv", "launch", "--nproc-per-node", "2", "--",
         str(script)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = sorted(line for line in out.splitlines() if line.startswith("worker "))
    # exec keeps the PID: the workers' parent (torchrun's agent) is the process we started.
    assert lines == [f"worker rank={r} world=2 parent={proc.pid}" for r in (0, 1)], out + err
    assert "--standalone" in err  # the summary printed before the exec

    failing = subprocess.run(
        [sys.executable, "-m", "clusterenv", "launch", "-q", "--", str(script)],
        env={**env, "WORKER_EXIT": "3"}, capture_output=True, text=True, timeout=120,
        cwd=tmp_path, check=False,
    )
    direct = subprocess.run(
        [*find_torchrun(env), "--standalone", "--nnodes=1", "--nproc-per-node=1", str(script)],
        env={**env, "WORKER_EXIT": "3"}, capture_output=True, text=True, timeout=120,
        cwd=tmp_path, check=False,
    )
    assert failing.returncode == direct.returncode != 0, failing.stderr
    assert "exitcode  : 3" in failing.stderr
    assert "clusterenv launch:" not in failing.stderr  # -q


def test_launch_is_registered_and_documented(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["launch", "--help"])
    out = capsys.readouterr().out
    assert "SCRIPT [ARGS ...]" in out and "--dry-run" in out
    assert os.environ.get("PET_NNODES") is None  # nothing above leaked into this process


def test_env_torchrun_exports_pet_variables_with_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = runpod_host(tmp_path, NODE1)
    assert main(["env", "--torchrun", "--root", str(root)]) == 0
    words = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
    assert all(len(w) == 2 and w[0] == "export" for w in words), words
    exported = dict(w[1].split("=", 1) for w in words)
    assert exported == {"NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1",
                        "TP_SOCKET_IFNAME": "ens1", **torchrun_env(node1_config())}
    assert main(["env", "--root", str(root)]) == 0
    assert "PET_" not in capsys.readouterr().out  # only on request
    assert main(["env", "--torchrun", "--json", "--root", str(root)]) == 0
    as_json = json.loads(capsys.readouterr().out)["env"]
    assert as_json == exported
    assert as_json["PET_NODE_RANK"] == "1"
