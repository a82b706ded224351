"""NCCL itself, asked on a simulated Runpod node (network namespaces, the real libnccl.so.2).

Each node has ``eth0`` on 172.20.0.0/16 (management, default route) and ``ens1`` on the cluster
bridge. Unset, NCCL itself says it bootstraps over ``eth0`` (the provider's warning, confirmed
by NCCL) and doctor's error says so; after ``eval "$(clusterenv env)"`` NCCL says ``ens1``.
Needs root and the ``nvidia-nccl-cu12`` wheel; elsewhere it skips, under ``CI=true`` it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from clusterenv.nccl.probe import find_nccl_library
from tests.conftest import skip_or_fail
from tests.simcluster import ClusterFactory, NodeResult, SimNode

CLI = [sys.executable, "-m", "clusterenv"]
NCCL_BY = "nccl "


@pytest.fixture(autouse=True)
def nccl_required() -> None:
    """Skip (fail under CI) without a libnccl.so.2 to ask."""
    search = find_nccl_library({k: v for k, v in os.environ.items()
                                if k != "CLUSTERENV_NCCL_LIBRARY"})
    if search.library is None:
        skip_or_fail(f"NCCL is not installed: {search.note}; pip install nvidia-nccl-cu12")


def run_json(node: SimNode, command: str, **env: str | None) -> tuple[NodeResult, Any]:
    result = node.run(["sh", "-c", command], env=node.env(**env), timeout=60)
    try:
        return result, json.loads(result.stdout)
    except ValueError:
        pytest.fail(result.describe())


def finding(report: dict[str, Any], code: str) -> dict[str, Any] | None:
    return next((f for f in report["findings"] if f["code"] == code), None)


def test_runpod_unset_nccl_says_eth0_then_env_makes_it_ens1(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, trainers=2)
    worker = cluster.nodes[1]
    cli = " ".join(CLI)
    eth0 = worker.management_addr

    # As the node starts: NCCL itself says eth0 (172.20.x), and doctor's error says so.
    result, shown = run_json(worker, f"{cli} show --json")
    assert result.returncode == 0, result.describe()
    boot = shown["nccl_bootstrap"]
    assert (boot["interface"], boot["address"]) == ("eth0", eth0), boot
    assert boot["by"].startswith(NCCL_BY) and boot["predicted"]["interface"] == "eth0", boot
    assert boot["planned"]["interface"] == "ens1", boot
    assert boot["planned"]["by"].startswith(NCCL_BY), boot
    result, report = run_json(worker, f"{cli} doctor --json")
    assert result.returncode == 1, result.describe()
    unset = finding(report, "socket-ifname-unset")
    assert unset is not None and unset["severity"] == "error", report
    assert "eth0" in unset["title"], unset
    assert f"{boot['by']} itself says: Bootstrap: Using eth0:{eth0}<0>" in unset["evidence"], unset
    assert finding(report, "nccl-bootstrap-disagrees") is None, report

    # After eval "$(clusterenv env)": NCCL itself says ens1, and env said so on stderr.
    applied = f'eval "$({cli} env)" && {cli} show --json'
    result, shown = run_json(worker, applied)
    assert result.returncode == 0, result.describe()
    boot = shown["nccl_bootstrap"]
    assert (boot["interface"], boot["address"]) == ("ens1", worker.cluster_addr), boot
    assert boot["by"].startswith(NCCL_BY), boot
    printed = worker.run([*CLI, "env"], env=worker.env(), timeout=60)
    assert (f"NCCL bootstraps over ens1 ({worker.cluster_addr})" in printed.stderr
            and printed.stderr.count("# nccl ") == 1), printed.describe()
    result, report = run_json(worker, f'eval "$({cli} env)" && {cli} doctor --json')
    assert result.returncode == 0, result.describe()
    quiet = worker.run([*CLI, "env", "--no-nccl"], env=worker.env(), timeout=60)
    assert quiet.stdout == printed.stdout and "# nccl " not in quiet.stderr, quiet.describe()


def test_turned_off_or_misconfigured(sim_cluster: ClusterFactory) -> None:
    worker = sim_cluster(2, trainers=1).nodes[1]
    cli = " ".join(CLI)
    for command, env in ((f"{cli} show --json --no-nccl", {}),
                         (f"{cli} show --json", {"CLUSTERENV_NCCL_LIBRARY": "NONE"})):
        result, shown = run_json(worker, command, **env)
        assert result.returncode == 0, result.describe()
        boot = shown["nccl_bootstrap"]
        assert boot["by"] == "prediction" and boot["interface"] == "eth0", boot
        assert boot["note"] in ("not asked (--no-nccl)",
                                "CLUSTERENV_NCCL_LIBRARY=none: NCCL is not asked"), boot
    result, report = run_json(worker, f"{cli} doctor --json",
                              CLUSTERENV_NCCL_LIBRARY="/nonexistent/libnccl.so.2")
    assert result.returncode == 1, result.describe()
    problem = finding(report, "nccl-probe-failed")
    assert problem is not None and problem["severity"] == "warning", report
    assert "CLUSTERENV_NCCL_LIBRARY='/nonexistent/libnccl.so.2'" in problem["title"], problem
    # The prediction still judges the node: eth0, an error.
    unset = finding(report, "socket-ifname-unset")
    assert unset is not None and unset["severity"] == "error", report


def test_unpredictable_comm_id_trusts_nccl(sim_cluster: ClusterFactory) -> None:
    # NCCL_COMM_ID given as a host name: NCCL bootstraps on the interface in the subnet of the
    # address it resolves to (localhost: ::1 on lo), whatever NCCL_SOCKET_IFNAME says. The
    # model does not resolve names, so it predicts nothing; doctor judges NCCL's answer, lo,
    # which the other node cannot reach.
    worker = sim_cluster(2, trainers=1).nodes[1]
    cli = " ".join(CLI)
    result, shown = run_json(worker, f"{cli} show --json", NCCL_COMM_ID="localhost:29611")
    boot = shown["nccl_bootstrap"]
    assert (boot["interface"], boot["address"], boot["predicted"]) == ("lo", "::1", None), boot
    result, report = run_json(worker, f"{cli} doctor --json", NCCL_COMM_ID="localhost:29611")
    assert result.returncode == 1, result.describe()
    assert finding(report, "nccl-bootstrap-disagrees") is None, report
    unset = finding(report, "socket-ifname-unset")
    assert unset is not None and unset["severity"] == "error", report
    assert "NCCL would bootstrap over lo (127.0.0.1), loopback" in unset["title"], unset


def test_nccl_disagrees_and_doctor_trusts_nccl(sim_cluster: ClusterFactory) -> None:
    # A gap of the model, kept on purpose as the real disagreement: an address with a label
    # added before its interface's own address comes first in getifaddrs (the kernel keeps
    # them in that order), and nothing clusterenv reads shows that order. NCCL bootstraps over
    # "eth0:0"; the model says eth0. doctor reports the disagreement and trusts NCCL.
    worker = sim_cluster(2, trainers=1).nodes[1]
    ip = shutil.which("ip") or "ip"
    ns = ["-n", worker.netns]
    default = subprocess.run([ip, *ns, "route", "show", "default"], capture_output=True,
                             text=True, check=True).stdout.split()
    own = f"{worker.management_addr}/16"
    for argv in (["address", "add", "10.7.0.9/24", "dev", "eth0", "label", "eth0:0"],
                 ["address", "del", own, "dev", "eth0"], ["address", "add", own, "dev", "eth0"],
                 ["route", "replace", *default]):
        subprocess.run([ip, *ns, *argv], check=True, capture_output=True)
    result, shown = run_json(worker, f"{' '.join(CLI)} show --json")
    boot = shown["nccl_bootstrap"]
    assert (boot["interface"], boot["address"]) == ("eth0:0", "10.7.0.9"), boot
    assert boot["predicted"] == {"interface": "eth0", "address": worker.management_addr}, boot
    result, report = run_json(worker, f"{' '.join(CLI)} doctor --json")
    assert result.returncode == 1, result.describe()
    disagree = finding(report, "nccl-bootstrap-disagrees")
    assert disagree is not None and disagree["severity"] == "error", report
    assert (f"bootstraps over eth0:0 (10.7.0.9), not eth0 ({worker.management_addr}) as "
            "clusterenv predicted: not the cluster interface ens1") in disagree["title"], disagree
    assert disagree["fix"] == "export NCCL_SOCKET_IFNAME=ens1", disagree
    unset = finding(report, "socket-ifname-unset")
    assert unset is not None and "bootstrap over eth0:0 (10.7.0.9)" in unset["title"], unset
