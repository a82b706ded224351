"""`clusterenv launch` on a simulated 2-node x 2-process Runpod cluster, with a real torchrun.

Every node runs ``python -m clusterenv launch -- allreduce_step.py``: torchrun with a static
rendezvous on ``PRIMARY_ADDR``, Gloo told to use ``ens1`` by the plan, and each rank checks the
all-reduced sum. Then the failures the plan prevents, made real in the same harness: the user's
``GLOO_SOCKET_IFNAME=eth0`` (kept, warned about) and a plain ``torchrun`` with nothing set (the
hostname resolves to ``127.0.1.1``, so Gloo advertises loopback) both fail within seconds, and
``clusterenv doctor`` on those nodes names the cause.

Needs root, ``ip netns`` and torch: skips with the reason elsewhere, fails under ``CI=true``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.simcluster import ClusterFactory, NodeResult, SimCluster

pytestmark = [pytest.mark.netns, pytest.mark.torch, pytest.mark.usefixtures("torch_required")]

STEP = Path(__file__).parent / "scripts" / "allreduce_step.py"
REPO = Path(__file__).resolve().parents[1]


def launch_argv(*step_args: str, options: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "clusterenv", "launch", *options, "--", str(STEP), *step_args]


def report(results: list[NodeResult]) -> str:
    return "\n\n".join(r.describe(60) for r in results)


def ok_ranks(result: NodeResult) -> set[int]:
    return {
        int(m.group(1))
        for m in re.finditer(r"allreduce_step rank=(\d+) world_size=4 backend=gloo .* "
                             r"sum=10 expected=10 ok$", result.stdout, re.MULTILINE)
    }


def doctor(cluster: SimCluster, env: dict[int, dict[str, str]]) -> list[dict[str, Any]]:
    """``clusterenv doctor --json`` on every node, with each node's environment."""
    results = cluster.run_all(
        lambda node: [sys.executable, "-m", "clusterenv", "doctor", "--json"],
        env=lambda node: env[node.rank], timeout=120, cwd=REPO,
    )
    out = []
    for result in results:
        assert result.killed is None and result.returncode in (0, 1), result.describe()
        out.append({"code": result.returncode, **json.loads(result.stdout)})
    return out


def test_launch_runs_a_gloo_allreduce_over_ens1_on_every_node(
    sim_cluster: ClusterFactory,
) -> None:
    cluster = sim_cluster(2, trainers=2)  # Debian hosts files: node-N -> 127.0.1.1
    results = cluster.run_all(lambda node: launch_argv("--timeout", "30"), timeout=120,
                              cwd=REPO, stop_on_failure=True)
    for node, result in zip(cluster.nodes, results, strict=True):
        assert result.returncode == 0, report(results)
        assert ok_ranks(result) == {2 * node.rank, 2 * node.rank + 1}, report(results)
        # The summary printed before the exec: the static rendezvous and the interface set.
        assert f"--node-rank={node.rank} --rdzv-backend=static --master-addr=10.65.0.2" \
            in result.stderr, result.describe()
        assert re.search(r"^set\s+GLOO_SOCKET_IFNAME\s+ens1\s", result.stderr, re.MULTILINE), \
            result.describe()


def _assert_failed_fast(results: list[NodeResult]) -> None:
    text = report(results)
    assert all(r.returncode != 0 for r in results), text
    # A node failed by itself within the job's timeout; the harness deadline was not needed.
    assert any(r.killed is None for r in results), text
    assert not any(r.timed_out for r in results), text
    assert not any(ok_ranks(r) for r in results), text


def test_gloo_on_eth0_is_refused_and_fails_when_forced(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, trainers=2)
    env = {node.rank: node.env(GLOO_SOCKET_IFNAME="eth0") for node in cluster.nodes}
    # launch judges the environment the job would get and refuses: exit 1, torchrun not started.
    refused = cluster.run_all(lambda node: launch_argv("--timeout", "10"),
                              env=lambda node: env[node.rank], timeout=60, cwd=REPO)
    for result in refused:
        assert result.returncode == 1, result.describe()
        assert "refusing to start the job: 1 error remains" in result.stderr, result.describe()
        assert "filter-selects-avoided" in result.stderr, result.describe()
        assert "allreduce_step rank=" not in result.stdout + result.stderr, result.describe()
    # --force starts it anyway, and the failure launch predicted is real. The harness deadline
    # is far above the job's own 10 s: four workers importing torch on a loaded machine took
    # the whole of an earlier 60 s before Gloo's timeout could even start.
    results = cluster.run_all(lambda node: launch_argv("--timeout", "10", options=("--force",)),
                              env=lambda node: env[node.rank], timeout=120, cwd=REPO,
                              stop_on_failure=True)
    _assert_failed_fast(results)
    # Gloo advertised the management addresses, which the other node cannot reach.
    stderr = "\n".join(r.stderr for r in results)
    assert re.search(r"remote=\[172\.20\.0\.\d+\]", stderr), report(results)
    for result in results:
        # The plan kept the user's value, said so, and flagged it before starting.
        assert re.search(r"^keep\s+GLOO_SOCKET_IFNAME\s+eth0\s", result.stderr, re.MULTILINE), \
            result.describe()
        assert "ERROR" in result.stderr and "GLOO_SOCKET_IFNAME='eth0'" in result.stderr

    for node_report in doctor(cluster, env):
        assert node_report["code"] == 1, node_report
        errors = [f for f in node_report["findings"] if f["severity"] == "error"]
        assert any("GLOO_SOCKET_IFNAME" in f["title"] and "eth0" in f["title"] for f in errors), \
            node_report["findings"]


def test_plain_torchrun_fails_over_loopback_and_doctor_names_the_hostname(
    sim_cluster: ClusterFactory,
) -> None:
    cluster = sim_cluster(2, trainers=2)
    results = cluster.run_all(
        lambda node: node.torchrun_argv(STEP, "--timeout", "5"), timeout=120, cwd=REPO,
        stop_on_failure=True,
    )
    _assert_failed_fast(results)
    stderr = "\n".join(r.stderr for r in results)
    assert "connectFullMesh failed" in stderr, report(results)

    env = {node.rank: node.env() for node in cluster.nodes}  # nothing set, plan not applied
    for node, node_report in zip(cluster.nodes, doctor(cluster, env), strict=True):
        assert node_report["code"] == 1, node_report
        gloo = [f for f in node_report["findings"] if f["code"] == "gloo-ifname-unset"]
        assert gloo and gloo[0]["severity"] == "error", node_report["findings"]
        assert f"{node.hostname!r} resolves to 127.0.1.1" in gloo[0]["title"], gloo
        assert "GLOO_SOCKET_IFNAME=ens1" in gloo[0]["fix"], gloo


def test_the_quickstart_runpod_recipe_end_to_end(sim_cluster: ClusterFactory) -> None:
    """docs/quickstart.md's Runpod recipe, in order, on every node of the Runpod layout (host
    names on eth0): env + doctor (exit 0), preflight on all nodes at once, then launch."""
    cluster = sim_cluster(2, trainers=2, hosts="management-all")
    cli = f"{sys.executable} -m clusterenv"
    recipe = (f'eval "$({cli} env)" && {cli} doctor > /dev/null && '
              f"{cli} preflight --ring --timeout 30 && "
              f"{cli} launch -q -- {STEP} --timeout 30")
    results = cluster.run_all(lambda node: ["sh", "-c", recipe], timeout=150, cwd=REPO,
                              stop_on_failure=True)
    for node, result in zip(cluster.nodes, results, strict=True):
        assert result.returncode == 0, report(results)
        assert ok_ranks(result) == {2 * node.rank, 2 * node.rank + 1}, report(results)
