"""Real hangs in the simulated cluster, and what ``clusterenv hang --collect`` says about them.

Every node starts the job with ``clusterenv launch`` (torchrun, Gloo over ``ens1``, the flight
recorder on) and its own dump directory (``CLUSTERENV_HANG_DIR``: dumps live on each node's
disk). The job (``tests/scripts/hang_job.py``) prints what each rank does; the test makes one
thing go wrong, then runs ``clusterenv hang --collect`` on every node at once and holds what
every node printed against what the job did: the rank that never entered, its node, and the
collective the others entered (its step and the line that called it).

Needs root, ``ip netns`` and torch: skips with the reason elsewhere, fails under ``CI=true``.
The jobs' own timeouts are 3 s; the harness deadlines are generous because starting torch on a
loaded machine is slow.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.simcluster import NodeResult, SimCluster

pytestmark = [pytest.mark.netns, pytest.mark.torch, pytest.mark.usefixtures("torch_required")]

JOB = Path(__file__).parent / "scripts" / "hang_job.py"
REPO = Path(__file__).resolve().parents[1]
EVENT = re.compile(r"^hangjob rank=(\d+) node=(\S+) (?:host=\S+ )?(\w+)(?: step=(\d+))?"
                   r"(?: call=(\S+))?", re.MULTILINE)


def node_envs(cluster: SimCluster, tmp: Path) -> dict[int, dict[str, str]]:
    return {node.rank: node.env(CLUSTERENV_HANG_DIR=str(tmp / f"node{node.rank}"))
            for node in cluster.nodes}


def launch(*job: str) -> list[str]:
    return [sys.executable, "-m", "clusterenv", "launch", "-q", "--", str(JOB),
            "--timeout", "3", *job]


def events(results: list[NodeResult] | str) -> list[tuple[int, str, int | None, str | None]]:
    """(rank, event, step, call) for every line the job printed."""
    text = results if isinstance(results, str) else "\n".join(r.stdout for r in results)
    return [(int(m[1]), m[3], int(m[4]) if m[4] else None, m[5])
            for m in EVENT.finditer(text)]


def collect(cluster: SimCluster, envs: dict[int, dict[str, str]], *, timeout: str = "15"
            ) -> list[dict[str, Any]]:
    results = cluster.run_all(
        lambda node: [sys.executable, "-m", "clusterenv", "hang", "--collect", "--json",
                      "--timeout", timeout],
        env=lambda node: envs[node.rank], timeout=90, cwd=REPO)
    out = []
    for result in results:
        assert result.killed is None, result.describe()
        out.append({"code": result.returncode, **json.loads(result.stdout)})
    return out


def report(results: list[NodeResult]) -> str:
    return "\n\n".join(r.describe(60) for r in results)


def default_stall(answer: dict[str, Any]) -> dict[str, Any]:
    stalls = [s for s in answer["report"]["stalls"] if s["desc"] == "default_pg"]
    assert len(stalls) == 1, answer["report"]
    stall: dict[str, Any] = stalls[0]
    return stall


def node_of(answer: dict[str, Any], rank: int) -> dict[str, Any]:
    found = [n for n in answer["report"]["nodes"] if rank in n["ranks"]]
    assert len(found) == 1, answer["report"]["nodes"]
    return found[0]  # type: ignore[no-any-return]


def test_a_rank_that_never_calls_the_collective(sim_cluster: Any, tmp_path: Path) -> None:
    cluster = sim_cluster(2, trainers=2)
    envs = node_envs(cluster, tmp_path)
    culprit, step = 3, 3  # node 1's second rank skips the third step's all_reduce
    results = cluster.run_all(lambda node: launch("--mode", "skip", "--rank", str(culprit),
                                                  "--step", str(step)),
                              env=lambda node: envs[node.rank], timeout=150, cwd=REPO)
    did = events(results)
    assert all(r.returncode != 0 and r.killed is None for r in results), report(results)
    assert (culprit, "skip", step, None) in did, report(results)
    entered = {rank for rank, event, at, _ in did if event == "enter" and at == step}
    assert entered == {0, 1, 2}, report(results)
    call_site = {call for rank, event, at, call in did if event == "enter" and at == step}

    answers = collect(cluster, envs)
    assert [a["code"] for a in answers] == [1, 1], answers
    assert answers[0]["report"] == answers[1]["report"]
    stall = default_stall(answers[0])
    # The rank that skipped is named, and no rank that entered is called behind. A rank that
    # entered can still be "missing": torchrun kills a node's other workers as soon as one
    # fails, which on a loaded machine can come before a slower rank wrote its dump.
    assert culprit in stall["missing"]
    assert not stall["behind"]
    assert set(stall["waiting"]) <= entered and stall["waiting"]
    assert set(stall["waiting"]) | set(stall["missing"]) == {0, 1, 2, 3}
    assert stall["call"]["seq"] == step and stall["call"]["operation"] == "all_reduce"
    assert stall["call"]["where"].rsplit("/", 1)[-1].split(" in ")[0] in call_site
    node = node_of(answers[0], culprit)
    assert (node["node_rank"], node["host"], node["addr"]) == (
        1, cluster.nodes[1].hostname, cluster.nodes[1].cluster_addr)
    assert node["reported"] is True


def test_a_rank_that_dies(sim_cluster: Any, tmp_path: Path) -> None:
    cluster = sim_cluster(2, trainers=1)
    envs = node_envs(cluster, tmp_path)
    culprit, step = 1, 2  # node 1's only rank is killed before the second all_reduce
    results = cluster.run_all(lambda node: launch("--mode", "die", "--rank", str(culprit),
                                                  "--step", str(step)),
                              env=lambda node: envs[node.rank], timeout=150, cwd=REPO)
    did = events(results)
    assert (culprit, "die", step, None) in did, report(results)
    assert "exitcode  : -9" in results[1].stderr, report(results)  # torchrun saw the SIGKILL
    entered = {rank for rank, event, at, _ in did if event == "enter" and at == step}

    answers = collect(cluster, envs)
    assert answers[0]["report"] == answers[1]["report"], answers
    stall = default_stall(answers[0])
    assert stall["suspects"] == [culprit] and set(stall["waiting"]) == entered == {0}
    assert stall["call"]["seq"] == step
    node = node_of(answers[0], culprit)
    assert (node["node_rank"], node["host"]) == (1, cluster.nodes[1].hostname)


def test_a_node_whose_cluster_link_is_cut_mid_run(sim_cluster: Any, tmp_path: Path) -> None:
    cluster = sim_cluster(2, trainers=1)
    envs = node_envs(cluster, tmp_path)
    progress = tmp_path / "progress"
    procs = cluster.popen_all(
        lambda node: launch("--steps", "0", "--pause", "0.2", "--progress", str(progress)),
        env=lambda node: envs[node.rank], cwd=REPO)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:  # the job runs: both ranks finished step 3
        done = {r for r, event, at, _ in events(progress.read_text() if progress.exists()
                                                else "") if event == "done" and (at or 0) >= 3}
        if done == {0, 1} or any(p.poll() is not None for p in procs):
            break
        time.sleep(0.1)
    cut = cluster.nodes[1]
    subprocess.run(["ip", "-n", cut.netns, "link", "set", "ens1", "down"], check=True)
    results = [p.wait(max(deadline - time.monotonic(), 1)) for p in procs]
    assert all(r.killed is None and r.returncode != 0 for r in results), report(results)
    did = events(progress.read_text())
    last = max(at or 0 for rank, event, at, _ in did if rank == 0 and event == "enter")
    assert last >= 4, report(results)  # it was running when the link went down

    answers = collect(cluster, envs, timeout="3")
    primary, cut_off = answers
    assert cut_off["code"] == 2 and "no answer from the primary" in cut_off["error"]
    assert primary["code"] == 1, primary
    stall = default_stall(primary)
    assert stall["suspects"] == [1] and stall["waiting"] == [0]
    assert stall["call"]["seq"] == last  # the all_reduce rank 0 entered last
    node = node_of(primary, 1)
    assert node["node_rank"] == 1 and node["reported"] is False
    assert any("did not report" in note for note in primary["report"]["notes"])
