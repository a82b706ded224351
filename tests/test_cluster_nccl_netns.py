"""A two-node simulated Runpod cluster (network namespaces): `clusterenv env` and `doctor`.

Each node has ``eth0`` on 172.20.0.0/16 (an isolated management bridge: other nodes' 172.x
addresses are unreachable, the default route still leaves there) and ``ens1`` on the shared
cluster bridge, with the Runpod variables of its rank. The tests run the real CLI inside the
namespaces. They need root; elsewhere they skip with the reason, and under ``CI=true`` they fail.
"""

from __future__ import annotations

import sys

from tests.simcluster import ClusterFactory, NodeResult, SimNode

CLI = [sys.executable, "-m", "clusterenv"]


def doctor(node: SimNode, **env: str | None) -> NodeResult:
    return node.run([*CLI, "doctor"], env=node.env(**env), timeout=60)


def test_env_chooses_ens1_and_eval_exports_it(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, trainers=2)
    printed = cluster.run_all(lambda node: [*CLI, "env"], timeout=60)
    for result in printed:
        assert result.returncode == 0, result.describe()
        assert result.stdout.splitlines() == [
            "export NCCL_SOCKET_IFNAME='ens1'",
            "export GLOO_SOCKET_IFNAME='ens1'",
            "export TP_SOCKET_IFNAME='ens1'",
        ], result.describe()
    script = (f'eval "$({sys.executable} -m clusterenv env)" && '
              'printf "%s %s %s" "$NCCL_SOCKET_IFNAME" "$GLOO_SOCKET_IFNAME" "$TP_SOCKET_IFNAME"')
    for result in cluster.run_all(lambda node: ["sh", "-c", script], timeout=60):
        assert result.returncode == 0, result.describe()
        assert result.stdout == "ens1 ens1 ens1", result.describe()


def test_doctor_healthy_then_broken(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, trainers=2)
    for result in cluster.run_all(lambda node: [*CLI, "doctor"], timeout=60):
        # Debian-style /etc/hosts: the host name resolves to 127.0.1.1, so Gloo would bind lo,
        # and NCCL would bootstrap over eth0: a plain launcher started now fails.
        assert result.returncode == 1, result.describe()
        assert "ERROR   [gloo-ifname-unset]" in result.stdout, result.describe()
        assert "ERROR   [socket-ifname-unset]" in result.stdout, result.describe()
    cli = f"{sys.executable} -m clusterenv"
    applied = f'eval "$({cli} env)" && {cli} doctor'
    for result in cluster.run_all(lambda node: ["sh", "-c", applied], timeout=60):
        assert result.returncode == 0, result.describe()

    worker = cluster.nodes[1]
    wrong_nic = doctor(worker, NCCL_SOCKET_IFNAME="eth0")
    assert wrong_nic.returncode == 1, wrong_nic.describe()
    assert "NCCL_SOCKET_IFNAME='eth0' selects eth0" in wrong_nic.stdout, wrong_nic.describe()

    management = cluster.primary.management_addr
    wrong_primary = doctor(worker, PRIMARY_ADDR=management, MASTER_ADDR=management,
                           HOST_NODE_ADDR=f"{management}:{cluster.primary_port}")
    assert wrong_primary.returncode == 1, wrong_primary.describe()
    assert f"PRIMARY_ADDR={management} is a Runpod management address" in wrong_primary.stdout, (
        wrong_primary.describe())
