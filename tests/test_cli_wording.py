"""What the command line says, read as a user reads it: no API spellings (``force=True``,
``override=True``), no doubled prefixes (``clusterenv bench: clusterenv bench``, ``not asked:
not asked``), no ``1 nodes``, no repository paths a pip user does not have (``docs/bench.md``),
an option reported as typed (``--source runpod``, not ``CLUSTERENV_SOURCE=runpod``), and no
plan printed on stderr under an error-like ``clusterenv launch: command:`` prefix.

Each pattern is a class: the scan runs the real CLI over several verbs and situations chosen
so that every count is 1 somewhere, every option is used, and the refusals and fallbacks
appear; any line of any output that matches fails the test with the line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import pytest

from clusterenv.testing import HostBuilder, port
from tests.simcluster import base_env

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"

#: pattern -> what is wrong with a line that matches it.
PATTERNS: dict[str, str] = {
    r"\b(?:force|override|debug|ask_nccl|nccl_version)=(?:True|False|None)\b":
        "a Python keyword argument where the user typed an option",
    r"\bsource='": "the Python spelling of --source",
    r"\bclusterenv ([\w-]+): clusterenv \1\b": "the verb's prefix twice",
    r"\bnot asked\b[^\n]{0,60}\bnot asked\b": "'not asked' twice",
    r"(?<![\d.,/])\b1 (?:[A-Za-z]+ )?(?:lines|nodes|ranks|processes|errors|warnings|infos|"
    r"interfaces|devices|GPUs|variables|hosts|iterations|members|sizes|transfers|ports)\b":
        "a plural after 1",
    r"\bdocs/[\w-]+\.md\b": "a repository path, which a pip user does not have",
    r"(?m)^clusterenv launch: (?:command|environment):": "a plan that reads like an error",
    r"\(s\)": "a plural left to the reader",
}


def scan(outputs: dict[str, str]) -> list[str]:
    """Every match, in each text as printed and with its lines joined (long lines are folded
    to the terminal's width, which may split a phrase)."""
    wrong = []
    for name, text in outputs.items():
        joined = " ".join(text.split())
        for pattern, why in PATTERNS.items():
            for where in (text, joined) if "^" not in pattern else (text,):
                wrong += [f"{name}: {why}: {m.string[max(0, m.start() - 60):m.end() + 40]!r}"
                          for m in re.finditer(pattern, where)]
    return sorted(set(wrong))


def cli(argv: Sequence[str], cwd: Path, *, env: dict[str, str] | None = None,
        executable: str = sys.executable) -> str:
    result = subprocess.run([executable, "-m", "clusterenv", *argv], capture_output=True,
                            text=True, env=env or base_env(), cwd=cwd, timeout=120, check=False)
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout + result.stderr


RUNPOD = {"PRIMARY_ADDR": "10.65.0.2", "PRIMARY_PORT": "29500", "NODE_ADDR": "10.65.0.3",
          "NODE_RANK": "1", "NUM_NODES": "2", "NUM_TRAINERS": "1",
          "HOST_NODE_ADDR": "10.65.0.2:29500"}


def one_of_each(root: Path, environ: dict[str, str]) -> Path:
    """A node with one of everything: one RDMA device and port, one GPU, one process."""
    (HostBuilder(root).loopback()
     .interface("eth0", addresses=["172.20.0.11/16"], speed=10000)
     .interface("ens1", addresses=["10.65.0.3/24"], mtu=9000, speed=100000)
     .rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1", rate="100 Gb/sec"))
     .gpus(1).hostname("node-1").environ(environ))
    return root


def test_no_output_of_any_verb_has_the_wording_users_reported(tmp_path: Path) -> None:
    node = one_of_each(tmp_path / "node", {**RUNPOD, "GLOO_SOCKET_IFNAME": "eth0"})
    worker = one_of_each(tmp_path / "worker", {
        **RUNPOD, "NUM_TRAINERS": "8", "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "none",
        "MASTER_ADDR": "10.65.0.2", "MASTER_PORT": "29500"})
    tiny = tmp_path / "tiny"
    (HostBuilder(tiny).loopback()
     .rdma_device("mlx5_0", port(link_layer="InfiniBand", rate="200 Gb/sec"))
     .gpus(1).environ({"NCCL_DEBUG": "WARN"}))
    one_line = tmp_path / "one-line.log"
    one_line.write_text("epoch 1 loss 2.3\n")
    one_nccl = tmp_path / "one-nccl.log"
    one_nccl.write_text("node-0:1234:1234 [0] NCCL INFO Bootstrap : Using ens1:10.65.0.2<0>\n")
    root = ("--root", str(node))
    outputs = {
        "show": cli(["show", "--no-nccl", *root], tmp_path),
        "show --source": cli(["show", "--no-nccl", "--source", "runpod", *root], tmp_path),
        "doctor": cli(["doctor", "--no-nccl", *root], tmp_path),
        "doctor --json --source": cli(["doctor", "--json", "--no-nccl", "--source", "runpod",
                                       *root], tmp_path),
        "doctor worker": cli(["doctor", "--no-nccl", "--root", str(worker)], tmp_path),
        "env": cli(["env", *root], tmp_path),
        "env --override": cli(["env", "--override", *root], tmp_path),
        "env live": cli(["env"], tmp_path, env={**base_env(), **RUNPOD,
                                                "CLUSTERENV_NCCL_LIBRARY": "none"}),
        "launch --dry-run": cli(["launch", "--dry-run", "--nproc-per-node", "2", *root,
                                 "--", "train.py"], tmp_path),
        "launch --dry-run --override": cli(["launch", "--dry-run", "--override", *root, "--",
                                            "train.py"], tmp_path),
        "capture tiny": cli(["capture", "--root", str(tiny), "tiny-copy"], tmp_path),
        "capture archive": cli(["capture", "--root", str(tiny), "tiny.tar.gz"], tmp_path),
        "nccl-log one line": cli(["nccl-log", str(one_line)], tmp_path),
        "nccl-log one NCCL line": cli(["nccl-log", str(one_nccl)], tmp_path),
    }
    wrong = scan(outputs)
    assert not wrong, "\n".join(wrong)
    # What the scan cannot see, said positively.
    assert "forced with --source runpod" in outputs["show --source"]
    assert "forced with --source runpod" in outputs["doctor --json --source"]
    assert "1 interface (lo), 1 RDMA device, 1 GPU, 1 environment variable recorded" in \
        outputs["capture tiny"]
    assert "you asked to override the value set in the environment" in outputs["env --override"]


@pytest.mark.usefixtures("torch_required")
def test_a_refused_launch_shows_its_plan_as_information_and_names_the_option(
        tmp_path: Path) -> None:
    # Gloo told to bind to an interface that does not exist: an error remains, so launch
    # starts nothing, but shows what it would have started and how to force it.
    env = {**base_env(), "GLOO_SOCKET_IFNAME": "nosuch0"}
    result = subprocess.run([sys.executable, "-m", "clusterenv", "launch", "--source", "local",
                             "--", "train.py"], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120, check=False)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""  # stdout belongs to the job
    assert result.stderr.startswith("this node would start:\n  "), result.stderr[:200]
    said = " ".join(result.stderr.split())  # long lines are folded to the terminal's width
    assert "clusterenv launch: refusing to start the job: 1 error remains after the plan" in said
    assert said.endswith("or pass --force to start it anyway")
    wrong = scan({"launch refused": result.stderr})
    assert not wrong, "\n".join(wrong)


@pytest.fixture(scope="module")
def venv_without_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with clusterenv's dependencies and no torch: this environment's
    packages but torch's, reached through a ``.pth`` file."""
    base = tmp_path_factory.mktemp("no-torch")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    deps = base / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith("torch") and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    [site] = (venv / "lib").glob("python*/site-packages")
    (site / "deps.pth").write_text(f"{deps}\n{SRC}\n")
    return venv / "bin" / "python"


def test_an_error_that_names_the_command_is_not_prefixed_with_it_twice(
        venv_without_torch: Path, tmp_path: Path) -> None:
    env = {**base_env(), "PATH": f"{venv_without_torch.parent}{os.pathsep}/usr/bin:/bin"}
    env.pop("PYTHONPATH", None)
    out = cli(["bench"], tmp_path, env=env, executable=str(venv_without_torch))
    said = " ".join(out.split())
    assert "clusterenv bench: PyTorch is not installed in the interpreter that runs it" in said
    assert "pip install torch" in said
    wrong = scan({"bench without torch": out})
    assert not wrong, "\n".join(wrong)


def test_the_scan_finds_each_reported_wording() -> None:
    # The lines users reported, as they were printed: each one must be caught.
    reported = {
        "force": "fix it (`clusterenv doctor` shows the fixes), or pass --force (force=True) to "
                 "start it anyway",
        "override": "# overriding GLOO_SOCKET_IFNAME='eth0' with 'ens1': override=True replaced "
                    "it (in the environment)",
        "prefix": "clusterenv bench: clusterenv bench needs PyTorch in the interpreter",
        "not asked": "# NCCL not asked: not asked: a host snapshot is not this host",
        "lines": "clusterenv nccl-log: job.log: 1 lines, none from NCCL",
        "nodes": "clusterenv bench: 1 nodes, 1 ranks, gloo; no slow node",
        "launch": "clusterenv launch: command:\n  /opt/venv/bin/torchrun --nnodes=2",
        "docs": "fix: see docs/bench.md for the fraction to expect per transport",
        "host(s)": "nodes  1 host(s) in the log: tpgds-aihub0008",
        "source": "source: generic (forced with source='generic')",
    }
    for name, line in reported.items():
        assert scan({name: line}), name
