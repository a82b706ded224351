"""``clusterenv bench`` options and failures that need no cluster: bad options are refused with
the value and exit 2, and one CPU node measures with a real torchrun (no links to judge)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.simcluster import base_env

REPO = Path(__file__).resolve().parents[1]


def bench(*args: str, env: dict[str, str] | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterenv", "bench", *args],
                          capture_output=True, text=True, env=env or base_env(), cwd=REPO,
                          timeout=timeout, check=False)


def scratch_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment with a TMPDIR of its own, to see which files a run leaves behind."""
    (tmp_path / "tmpdir").mkdir(exist_ok=True)
    return {**base_env(), "TMPDIR": str(tmp_path / "tmpdir"), **extra}


@pytest.mark.parametrize(("args", "message"), [
    (["--sizes", "1M,16X"], "'16X': expected a size such as 4096, 256K, 16M or 1G"),
    (["--sizes", "1001"], "not a multiple of 4"),
    (["--min-fraction", "2"], "2: expected a fraction in (0, 1], e.g. 0.5"),
    (["--time-limit", "0"], "expected a positive number of seconds"),
    (["--iters", "0"], "0: expected at least 1"),
    (["--warmup", "-1"], "-1: expected 0 or more"),
    (["--backend", "mpi"], "invalid choice: 'mpi'"),
])
def test_bad_options_exit_2_naming_the_value(args: list[str], message: str) -> None:
    result = bench(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_nccl_without_gpus_and_inside_a_worker_are_refused() -> None:
    env = {**base_env(), "CUDA_VISIBLE_DEVICES": ""}
    result = bench("--backend", "nccl", env=env)
    assert result.returncode == 2 and "--backend nccl needs GPUs" in result.stderr, result.stderr
    assert "--backend gloo" in result.stderr
    result = bench(env={**base_env(), "RANK": "0", "LOCAL_RANK": "0"})
    assert result.returncode == 2 and "already a launched worker" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.usefixtures("torch_required")
def test_one_cpu_node_measures_all_reduce_and_has_no_links(tmp_path: Path) -> None:
    plot = tmp_path / "one.svg"
    result = bench("--json", "--nproc-per-node", "2", "--sizes", "64K,256K", "--iters", "2",
                   "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["num_nodes"] == 1 and report["world_size"] == 2
    assert [s["size"] for s in report["sizes"]] == [64 << 10, 256 << 10]
    assert report["transfers"] == [] and report["slow_nodes"] == []
    # Two ranks: nccl-tests' bus bandwidth factor 2(n-1)/n is 1. One node: no line rate to
    # hold the all-reduce against (it crossed no NIC).
    assert all(s["busbw_gbs"] == s["algbw_gbs"] > 0 for s in report["sizes"])
    assert all(s["busbw_fraction"] is None for s in report["sizes"])
    assert "all-reduce 64K" in result.stderr  # progress on stderr
    # The picture has the all-reduce curve and no empty link panel.
    picture = plot.read_text()
    assert picture.startswith("<svg") and "1 node, 2 ranks" in picture
    assert picture.count('class="point"') == 2
    assert 'class="bar"' not in picture and "link bandwidth" not in picture
    text = bench("--nproc-per-node", "2", "--sizes", "64K", "--iters", "1")
    assert text.returncode == 0 and "all-reduce (nccl-tests definitions" in text.stdout
    # One line says what one node measured, and what it cannot.
    assert ("nothing to measure across nodes here: one node has no link to another"
            in text.stdout)
    assert ("the all-reduce below ran between this node's 2 processes over TCP inside this "
            "host, not over the network") in text.stdout
    assert "line rate" not in text.stdout  # a NIC's rate says nothing about one node


@pytest.mark.usefixtures("torch_required")
def test_one_rank_times_nothing_and_says_why(tmp_path: Path) -> None:
    # One rank's all-reduce moves no data: on a real H200 its "1 GiB" took 18 us, 60 TB/s.
    plot = tmp_path / "one.svg"
    result = bench("--json", "--sizes", "64K,256K", "--iters", "2", "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["world_size"] == 1 and report["sizes"] == []
    assert [f["code"] for f in report["findings"]] == ["bench-one-rank"]
    assert "all-reduce 64K" not in result.stderr and "nothing to time" in result.stderr
    # Nothing measured, no picture: no empty axes from 0 to 1e-09 Gb/s.
    assert not plot.exists()
    assert f"--plot {plot}: no picture written: one rank on one node measured nothing" \
        in result.stderr
    assert "1 node, 1 rank, gloo" in result.stderr
    text = bench("--sizes", "64K", "--iters", "1")
    assert text.returncode == 0 and "algbw" not in text.stdout
    assert "one rank: an all-reduce moves no data" in text.stdout
    assert text.stdout.startswith("1 node x 1 process, gloo on cpu,")
    assert "nothing to measure across nodes here" in text.stdout


@pytest.mark.usefixtures("torch_required")
def test_the_childrens_teardown_output_stays_out_of_the_terminal(tmp_path: Path) -> None:
    # torch's C++ log at INFO prints, among others, what its store says while shutting down
    # (TCPStoreLibUvBackend.cpp: "uv_loop_close failed ... resource busy", after the result
    # is written), and torchrun prints its OMP_NUM_THREADS banner: the output a user saw as
    # a stack trace after a good run. Only the workers' progress lines reach stderr; the rest
    # is in a log that is removed after a run that ended well.
    env = scratch_env(tmp_path, TORCH_CPP_LOG_LEVEL="INFO")
    args = ("--nproc-per-node", "2", "--sizes", "64K", "--iters", "1")
    quiet = bench(*args, env=env)
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stderr.splitlines()
    assert lines and all(line.startswith("clusterenv bench: ") for line in lines), lines
    assert os.listdir(tmp_path / "tmpdir") == []
    loud = bench(*args, "--debug", env=env)
    assert loud.returncode == 0, loud.stderr
    assert "[c10d]" in loud.stderr and "TCPStoreLibUvBackend" in loud.stderr, loud.stderr
    assert "OMP_NUM_THREADS" in loud.stderr
    assert "clusterenv bench: all-reduce 64K" in loud.stderr


@pytest.mark.usefixtures("torch_required")
def test_a_failed_run_says_why_in_one_line_and_keeps_torchruns_output(tmp_path: Path) -> None:
    # Gloo cannot bind to an interface that does not exist: every worker dies with a Python
    # traceback from c10d ("Unable to find address for: nosuch0", gloo's tcp/device.cc).
    env = scratch_env(tmp_path, GLOO_SOCKET_IFNAME="nosuch0")
    result = bench("--nproc-per-node", "2", "--sizes", "64K", "--iters", "1", env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    said = " ".join(result.stderr.split())  # the message is folded to the terminal's width
    assert "the workers did not report a result (torchrun exited 1)" in said
    assert "Unable to find address for: nosuch0" in said
    (log,) = os.listdir(tmp_path / "tmpdir")
    kept = tmp_path / "tmpdir" / log
    assert f"torchrun's whole output is in {kept}" in said
    assert "Traceback" in kept.read_text()


@pytest.mark.usefixtures("torch_required")
def test_run_inside_a_users_process_group_gives_every_rank_the_same_result(
    tmp_path: Path,
) -> None:
    # Two torchrun agents on this host, node ranks 0 and 1, talking over loopback: two "nodes"
    # as GROUP_RANK tells them apart, each with two ranks.
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = REPO / "tests" / "scripts" / "bench_api_step.py"
    env = {**base_env(), "GLOO_SOCKET_IFNAME": "lo"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
             f"--node-rank={rank}", "--rdzv-backend=static", "--master-addr=127.0.0.1",
             f"--master-port={port}", str(script), str(tmp_path)],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], "\n".join(outputs)
    results = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(4)]
    for result in results:
        assert result == results[0], [k for k in result if result[k] != results[0][k]]
    first = results[0]
    assert first["num_nodes"] == 2 and first["world_size"] == 4
    assert [n["ranks"] for n in first["nodes"]] == [[0, 1], [2, 3]]
    assert [(t["src"], t["dst"]) for t in first["transfers"]] == [(0, 1), (1, 0)]
    # All local ranks pair up: each transfer moved two ranks' worth of the largest size.
    assert all(t["size"] == 2 * (256 << 10) for t in first["transfers"])
    assert [link["interface"] for link in first["links"]] == ["lo", "lo"]
    assert [s["size"] for s in first["sizes"]] == [64 << 10, 256 << 10]
