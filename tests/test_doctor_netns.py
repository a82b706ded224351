"""doctor's verdict as a gate, on a simulated two-node Runpod cluster (network namespaces).

The layout of the issue that asked for it: ``ens1`` 10.65.0.x is the cluster network, ``eth0``
172.20.0.x is management only (isolated bridge ports: other nodes' 172.x addresses are
unreachable), and every node's host name resolves to its ``eth0`` address
(``hosts="management-all"``). Name lookups go through the real system resolver of the namespace
(``/etc/hosts``, no DNS), the way torchrun and Gloo resolve them.

Each test runs the real CLI inside a node. Needs root; skips elsewhere, fails under ``CI=true``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from tests.simcluster import ClusterFactory, NodeResult, SimNode

CLI = f"{sys.executable} -m clusterenv"


def sh(node: SimNode, script: str, **env: str | None) -> NodeResult:
    return node.run(["sh", "-c", script], env=node.env(**env), timeout=60)


def verdict(result: NodeResult) -> dict[str, Any]:
    """The exit code and ``doctor --json`` output, with the codes of its errors."""
    assert result.killed is None and result.returncode in (0, 1), result.describe()
    data: dict[str, Any] = json.loads(result.stdout)
    data["code"] = result.returncode
    data["errors"] = {f["code"] for f in data["findings"] if f["severity"] == "error"}
    return data


def titles(data: dict[str, Any], code: str) -> list[str]:
    return [f["title"] for f in data["findings"] if f["code"] == code]


def test_plain_runpod_node_fails_until_env_is_applied(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, trainers=2, hosts="management-all")
    for node in cluster.nodes:
        plain = verdict(sh(node, f"{CLI} doctor --json"))
        assert plain["code"] == 1, plain
        assert plain["errors"] == {"socket-ifname-unset", "gloo-ifname-unset"}, plain
        (gloo,) = titles(plain, "gloo-ifname-unset")
        assert f"{node.hostname!r} resolves to eth0 ({node.management_addr})" in gloo, gloo
        (nccl,) = titles(plain, "socket-ifname-unset")
        assert f"bootstrap over eth0 ({node.management_addr})" in nccl, nccl

        applied = sh(node, f'eval "$({CLI} env)" && {CLI} doctor --json')
        fixed = verdict(applied)
        assert fixed["code"] == 0 and not fixed["errors"], fixed


def test_plain_debian_node_fails_over_loopback(sim_cluster: ClusterFactory) -> None:
    """Debian-style hosts file: the name resolves to 127.0.1.1, so Gloo binds loopback."""
    cluster = sim_cluster(2, trainers=2, hosts="debian")
    data = verdict(sh(cluster.nodes[1], f"{CLI} doctor --json"))
    assert data["code"] == 1, data
    (gloo,) = titles(data, "gloo-ifname-unset")
    assert "'node-1' resolves to 127.0.1.1" in gloo and "loopback" in gloo, gloo


def test_host_name_not_resolving_to_this_node_falls_back_to_loopback(
    sim_cluster: ClusterFactory,
) -> None:
    cluster = sim_cluster(2, trainers=2, hosts="none")
    data = verdict(sh(cluster.nodes[1], f"{CLI} doctor --json"))
    (gloo,) = titles(data, "gloo-ifname-unset")
    assert "'node-1' does not resolve" in gloo and "127.0.0.1" in gloo, gloo
    assert "gloo-ifname-unset" in data["errors"], data


def test_primary_given_as_a_name_is_resolved_and_judged(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, trainers=2, hosts="management-all")
    worker, port = cluster.nodes[1], cluster.primary_port
    by_name = {"PRIMARY_ADDR": "node-0", "MASTER_ADDR": "node-0",
               "HOST_NODE_ADDR": f"node-0:{port}"}
    # With the socket variables applied, the only error left is where the rendezvous goes.
    data = verdict(sh(worker, f'eval "$({CLI} env)" && {CLI} doctor --json', **by_name))
    assert data["code"] == 1, data
    assert data["errors"] == {"primary-addr-management"}, data
    (title,) = titles(data, "primary-addr-management")
    assert "PRIMARY_ADDR=node-0 (resolves to 172.20.0.10)" in title, title

    # The same address written as an IP gives the same verdict.
    literal = verdict(sh(worker, f'eval "$({CLI} env)" && {CLI} doctor --json',
                         PRIMARY_ADDR="172.20.0.10", MASTER_ADDR="172.20.0.10",
                         HOST_NODE_ADDR=f"172.20.0.10:{port}"))
    assert literal["errors"] == {"primary-addr-management"}, literal

    missing = {"PRIMARY_ADDR": "node-9", "MASTER_ADDR": "node-9",
               "HOST_NODE_ADDR": f"node-9:{port}"}
    data = verdict(sh(worker, f'eval "$({CLI} env)" && {CLI} doctor --json', **missing))
    assert data["code"] == 1 and data["errors"] == {"primary-name-unresolvable"}, data
    (title,) = titles(data, "primary-name-unresolvable")
    assert title.startswith("PRIMARY_ADDR=node-9 does not resolve"), title


def test_primary_name_on_the_cluster_network_passes(sim_cluster: ClusterFactory) -> None:
    """Names that resolve to the cluster addresses (a good hosts file) are fine."""
    cluster = sim_cluster(2, trainers=2, hosts="cluster")
    port = cluster.primary_port
    by_name = {"PRIMARY_ADDR": "node-0", "MASTER_ADDR": "node-0",
               "HOST_NODE_ADDR": f"node-0:{port}"}
    for node in cluster.nodes:
        data = verdict(sh(node, f'eval "$({CLI} env)" && {CLI} doctor --json', **by_name))
        assert data["code"] == 0 and not data["errors"], data


def test_a_silent_dns_server_costs_the_deadline_not_a_hang(sim_cluster: ClusterFactory) -> None:
    """A name only DNS could answer, and a DNS server that never answers (an address on the
    cluster subnet that nobody holds): the lookup is abandoned after its deadline."""
    cluster = sim_cluster(2, trainers=2, hosts="cluster")
    worker = cluster.nodes[1]
    etc = Path("/etc/netns") / worker.netns
    (etc / "resolv.conf").write_text("nameserver 10.65.0.250\noptions timeout:5 attempts:3\n")
    if (etc / "nsswitch.conf").exists():
        (etc / "nsswitch.conf").write_text("hosts: files dns\n")
    port = cluster.primary_port
    by_name = {"PRIMARY_ADDR": "primary.cluster.example", "MASTER_ADDR": "primary.cluster.example",
               "HOST_NODE_ADDR": f"primary.cluster.example:{port}"}
    start = time.monotonic()
    data = verdict(sh(worker, f'eval "$({CLI} env)" && {CLI} doctor --json', **by_name))
    elapsed = time.monotonic() - start
    assert elapsed < 20, f"doctor took {elapsed:.1f} s"  # the resolver alone would take 15 s
    (title,) = titles(data, "primary-name-unverified")
    assert "no answer within 2 s" in title, title
    assert data["code"] == 0, data  # unknown is a warning, never an error


def test_launch_refuses_a_kept_management_interface(sim_cluster: ClusterFactory) -> None:
    """``NCCL_SOCKET_IFNAME=eth0`` is the user's and kept: the job would hang, so launch exits 1
    (also with --dry-run) and starts nothing; --force goes ahead."""
    cluster = sim_cluster(2, trainers=2, hosts="management-all")
    worker = cluster.nodes[1]
    dry = sh(worker, f"{CLI} launch --dry-run -- train.py", NCCL_SOCKET_IFNAME="eth0")
    assert dry.returncode == 1, dry.describe()
    assert "[filter-selects-avoided] NCCL_SOCKET_IFNAME='eth0' selects eth0" in dry.stdout
    assert "refusing to start the job" in dry.stdout, dry.describe()
    forced = sh(worker, f"{CLI} launch --dry-run --force -- train.py",
                NCCL_SOCKET_IFNAME="eth0")
    assert forced.returncode == 0, forced.describe()
    assert "--node-rank=1 --rdzv-backend=static --master-addr=10.65.0.2" in forced.stdout
    # Without the user's value, the plan fixes every socket variable and launch is content.
    planned = sh(worker, f"{CLI} launch --dry-run -- train.py")
    assert planned.returncode == 0, planned.describe()


def test_a_node_that_lost_its_cluster_variables_is_called_out(
    sim_cluster: ClusterFactory,
) -> None:
    """All cluster variables gone (e.g. through sudo) on a node with eth0 172.x and ens1 10.65.x:
    doctor says the local default was assumed and warns; launch would go --standalone."""
    cluster = sim_cluster(2, trainers=2, hosts="management-all")
    node = cluster.nodes[1]
    lost = dict.fromkeys(node.runpod_env())
    text = sh(node, f"{CLI} doctor", **lost)
    assert text.returncode == 0, text.describe()  # a warning: one node may be intended
    assert text.stdout.startswith("assumed:\n  source: local"), text.describe()
    assert "the local default, this machine alone" in text.stdout
    assert "WARNING [cluster-variables-missing]" in text.stdout, text.describe()
    assert "interface eth0 172.20.0.11 (Runpod's management range)" in text.stdout
    assert "interface ens1 10.65.0.3" in text.stdout
    launch = sh(node, f"{CLI} launch --dry-run -- train.py", **lost)
    assert "--standalone" in launch.stdout, launch.describe()
    assert "[cluster-variables-missing]" in launch.stdout, launch.describe()
