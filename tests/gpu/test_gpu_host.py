"""Checks that only a host with NVIDIA GPUs can run: ``pytest --gpu tests/gpu`` there.

They are collected only with ``--gpu`` (CI has no GPU, and a GPU check is never a skip); on a
host without a visible GPU they fail. Every expectation comes from outside clusterenv:
``nvidia-smi``, ``torch.cuda``, NCCL's own log and NCCL's own bootstrap choice.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterenv.nccl.probe import ask_nccl, find_nccl_library
from clusterenv.nccl_log import parse_nccl_log
from tests.simcluster import base_env

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "torch_allreduce.py"


def nccl_version() -> str:
    """The NCCL that torch loaded, e.g. ``"2.28.9"``."""
    import torch

    return ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]


def gpu_count() -> int:
    import torch

    count = int(torch.cuda.device_count())
    if count == 0:
        pytest.fail("tests/gpu needs a visible NVIDIA GPU: torch.cuda.device_count() is 0")
    return count


def gpu_env(**extra: str) -> dict[str, str]:
    """The minimal test environment, plus what finds the driver and narrows the GPUs."""
    env = base_env()
    for name in ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        if name in os.environ:
            env[name] = os.environ[name]
    return {**env, **extra}


def clusterenv(*args: str, env: dict[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterenv", *args], env=env or gpu_env(),
                          capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=REPO)


def nvidia_smi(*query: str) -> list[list[str]]:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(query)}",
                          "--format=csv,noheader"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return [[field.strip() for field in line.split(",")] for line in out.splitlines() if line]


def test_a_real_nccl_process_group_through_the_torch_integration() -> None:
    n = gpu_count()
    proc = clusterenv("launch", "-q", "--nproc-per-node", str(n), "--", str(EXAMPLE),
                      env=gpu_env(NCCL_DEBUG="INFO"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    found = re.findall(r"rank (\d+)/(\d+) \(nccl on cuda:(\d+)\): sum=(\S+) expected=(\S+)", out)
    assert sorted(int(rank) for rank, *_ in found) == list(range(n)), out[-4000:]
    assert all(world == str(n) and total == expected for _, world, _, total, expected in found)
    log = parse_nccl_log(out.splitlines())
    assert log.version == nccl_version()
    assert log.nranks == n and not log.errors
    # NCCL's own bootstrap choice, asked of the library torch loads, is the interface the
    # communicator really bootstrapped on.
    search = find_nccl_library(gpu_env())
    assert search.library is not None, search.note
    (answer,) = ask_nccl([gpu_env()], search.library, timeout=60)
    assert answer.answered, answer.error
    assert {rank.bootstrap_interface for rank in log.ranks} == {answer.interface}


def test_doctors_error_is_a_real_nccl_failure_and_its_all_clear_a_real_success() -> None:
    # The verdict is a gate: where doctor says the job breaks, the real job breaks, for the
    # reason doctor gave; where it finds nothing, the same job runs (plain torchrun here, so
    # that nothing of clusterenv's stands between the environment and NCCL).
    n = gpu_count()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={n}", str(EXAMPLE)]
    for name, env, verdict in (("plain", gpu_env(), 0),
                               ("bogus", gpu_env(NCCL_SOCKET_IFNAME="bogus0"), 1)):
        doctor = clusterenv("doctor", "--json", env=env)
        assert doctor.returncode == verdict, (name, doctor.stdout, doctor.stderr)
        job = subprocess.run(torchrun, env={**env, "NCCL_DEBUG": "WARN"}, capture_output=True,
                             text=True, timeout=300, check=False, cwd=REPO)
        out = job.stdout + job.stderr
        if verdict == 0:
            assert job.returncode == 0, out[-4000:]
            continue
        assert job.returncode != 0, out[-4000:]
        (finding,) = json.loads(doctor.stdout)["findings"]
        assert finding["code"] == "filter-matches-nothing"
        said = next(e for e in finding["evidence"] if e.startswith("NCCL fails with"))
        assert said.split("'")[1] in out, (said, out[-4000:])


def test_more_processes_than_gpus_is_refused_with_the_count() -> None:
    n = gpu_count()
    proc = clusterenv("launch", "-q", "--nproc-per-node", str(n + 1), "--", str(EXAMPLE))
    assert proc.returncode != 0
    assert (f"LOCAL_RANK={n} but only {n} GPU(s) are visible" in proc.stdout + proc.stderr), \
        (proc.stdout + proc.stderr)[-4000:]


def test_bench_on_nccl_measures_or_says_why_not() -> None:
    n = gpu_count()
    proc = clusterenv("bench", "--json", "--debug", "--sizes", "1M,64M", "--time-limit", "120")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Warning" not in proc.stderr, proc.stderr[-4000:]  # torch's, about our own calls
    report: dict[str, Any] = json.loads(proc.stdout)
    assert (report["backend"], report["device"], report["world_size"]) == ("nccl", "cuda", n)
    codes = [f["code"] for f in report["findings"]]
    if n == 1:
        assert report["sizes"] == [] and codes == ["bench-one-rank"]
    else:
        assert [s["size"] for s in report["sizes"]] == [1 << 20, 64 << 20]
        assert all(s["busbw_gbs"] > 0 and s["busbw_fraction"] is None for s in report["sizes"])
    log = parse_nccl_log(proc.stderr.splitlines())  # --debug: NCCL's INFO lines, from every rank
    assert log.version == nccl_version()
    assert log.nranks == n


def test_a_capture_of_this_host_replays_what_nvidia_smi_says(tmp_path: Path) -> None:
    n = gpu_count()
    snapshot = tmp_path / "snap"
    proc = clusterenv("capture", str(snapshot))
    assert proc.returncode == 0, proc.stderr
    for root in ("/", str(snapshot)):
        shown = clusterenv("show", "--json", "--root", root)
        assert shown.returncode == 0, shown.stderr
        host = json.loads(shown.stdout)["host"]
        rows = nvidia_smi("name", "driver_version")
        assert host["gpus"] == n == len(rows)
        assert host["gpu_models"] == list(dict.fromkeys(name for name, _ in rows))  # PCI order
        assert host["driver_version"] == rows[0][1]
    live = clusterenv("show")
    assert live.returncode == 0, live.stderr
    (nccl,) = [line for line in live.stdout.splitlines() if re.match(r"NCCL {2,}[0-9]", line)]
    assert nccl_version() in nccl
    # One file is one piece of evidence, however many names reach it (merged /usr).
    files = re.findall(r"\((/[^ ()]*libnccl\.so\.[0-9.]+)\)", nccl)
    assert len({os.path.realpath(f) for f in files}) == len(files), nccl
