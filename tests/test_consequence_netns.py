"""One model of consequence: an interface check's severity follows from whether bootstrap or
data would cross an interface that does not reach the other nodes (a hang: error) or only
costs speed (a warning). Checked on the simulated Runpod cluster, whose ``eth0`` really is
unreachable between nodes (isolated bridge ports), and on RoCE snapshots.

Each netns test first shows the fact the verdict rests on (a TCP connection to the other node's
``eth0`` fails, to its ``ens1`` succeeds), then runs the real CLI in the node.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from clusterenv import doctor
from tests.nccl_hosts import B0_ENV, roce_node
from tests.simcluster import ClusterFactory, NodeResult, SimCluster, SimNode

CLI = f"{sys.executable} -m clusterenv"

# Listens once on every address of the node; the connecting side prints what happened.
_LISTEN = ("import socket; s = socket.create_server(('', {port})); s.settimeout(20); "
           "c, _ = s.accept(); c.close()")
_CONNECT = ("import socket, sys\ntry:\n    socket.create_connection(('{addr}', {port}), "
            "timeout=2).close(); print('connected')\nexcept OSError as e:\n    print('failed', e)")


def _connects(cluster: SimCluster, source: SimNode, target: SimNode, addr: str) -> bool:
    port = 31000 + target.rank
    server = target.popen([sys.executable, "-c", _LISTEN.format(port=port)])
    try:
        for _ in range(50):  # until it listens
            probe = source.run([sys.executable, "-c", _CONNECT.format(addr=addr, port=port)],
                               timeout=30)
            if "connected" in probe.stdout or addr != target.cluster_addr:
                return "connected" in probe.stdout
        return False
    finally:
        server.kill("deadline")


def _doctor(node: SimNode, **env: str | None) -> dict[str, Any]:
    result: NodeResult = node.run(["sh", "-c", f"{CLI} doctor --json"], env=node.env(**env),
                                  timeout=120)
    assert result.killed is None and result.returncode in (0, 1), result.describe()
    data: dict[str, Any] = json.loads(result.stdout)
    data["code"] = result.returncode
    return data


def test_socket_transport_over_the_management_interface_is_an_error(
    sim_cluster: ClusterFactory,
) -> None:
    """NCCL bootstraps on ens1 here (ens1 comes first), but with no RDMA its socket transport
    spreads the data over every interface its default selects: eth0 too, which the other nodes
    cannot reach. The job hangs at its first collective: an error, not a warning."""
    cluster = sim_cluster(2, trainers=1, hosts="cluster", cluster_first=True)
    node, other = cluster.nodes
    assert _connects(cluster, node, other, other.cluster_addr)
    assert not _connects(cluster, node, other, other.management_addr)
    data = _doctor(node)
    [finding] = [f for f in data["findings"] if f["code"] == "socket-ifname-unset"]
    assert finding["severity"] == "error", finding
    assert data["code"] == 1
    assert "socket transport" in finding["title"] and "eth0" in finding["title"], finding
    assert any("bootstraps" in e or "Using ens1" in e for e in finding["evidence"]), finding
    # With the plan applied, NCCL uses ens1 only: clean.
    fixed = node.run(["sh", "-c", f'eval "$({CLI} env)" && {CLI} doctor --json'],
                     env=node.env(), timeout=120)
    assert fixed.returncode == 0, fixed.describe()


def test_gloo_falls_back_to_loopback_when_the_resolver_fails(
    sim_cluster: ClusterFactory, torch_required: None
) -> None:
    """A resolver that fails now (a DNS server configured but unreachable: 'Temporary failure
    in name resolution', not 'no such name') fails torch's lookup too, and Gloo binds the
    loopback address: the other nodes cannot connect. Shown with torch's own warning."""
    cluster = sim_cluster(2, trainers=1, hosts="none")
    node = cluster.nodes[1]
    etc = Path("/etc/netns") / node.netns
    (etc / "nsswitch.conf").write_text("hosts: files dns\n")
    (etc / "resolv.conf").write_text("nameserver 127.0.0.53\noptions timeout:1 attempts:1\n")
    lookup = node.run([sys.executable, "-c", "import socket\ntry:\n socket.getaddrinfo("
                       f"'{node.hostname}', None)\nexcept socket.gaierror as e: print(e.errno)"],
                      timeout=30)
    assert lookup.stdout.strip() == str(__import__("socket").EAI_AGAIN), lookup.describe()
    gloo_init = ("import torch.distributed as d; d.init_process_group('gloo', "
                 "init_method='tcp://127.0.0.1:29611', rank=0, world_size=1); "
                 "d.destroy_process_group()")
    real = node.run([sys.executable, "-c", gloo_init], timeout=120)
    assert "Unable to resolve hostname to a (local) address" in real.stderr, real.describe()
    data = _doctor(node)
    [gloo] = [f for f in data["findings"] if f["code"] == "gloo-ifname-unset"]
    assert gloo["severity"] == "error" and "127.0.0.1" in gloo["title"], gloo


def test_an_hca_list_that_selects_nothing_is_rated_by_the_sockets_it_leaves(
    tmp_path: Path,
) -> None:
    """NCCL_IB_HCA=mlx5_9 matches no port: NCCL logs 'NET/IB : No device found.' and sends the
    data over sockets. Over ens1 only, that costs bandwidth (a warning); with
    NCCL_SOCKET_IFNAME unset the sockets include eth0, which does not reach the other nodes
    (an error)."""
    roce_node(tmp_path, rails=2)
    slow = {f.code: f for f in doctor({**B0_ENV, "NCCL_IB_HCA": "mlx5_9",
                                       "NCCL_SOCKET_IFNAME": "=ens1"}, root=tmp_path)}
    assert slow["filter-matches-nothing"].severity == "warning", slow
    hang = {f.code: f for f in doctor({**B0_ENV, "NCCL_IB_HCA": "mlx5_9"}, root=tmp_path)}
    nothing = hang["filter-matches-nothing"]
    assert nothing.severity == "error" and "eth0" in nothing.title, nothing
    assert hang["socket-ifname-unset"].severity == "error"


def _busy_node(cluster: SimCluster) -> SimNode:
    """Node 1 with what a real GPU host collects: Docker's bridge (no physical port), a VPN
    tunnel, and veth pairs with addresses, on top of eth0 and ens1."""
    node = cluster.nodes[1]
    commands = [
        ["link", "add", "docker0", "type", "bridge"],
        ["addr", "add", "172.17.0.1/16", "dev", "docker0"],
        ["link", "set", "docker0", "up"],
        ["tuntap", "add", "dev", "tun0", "mode", "tun"],
        ["addr", "add", "100.64.0.7/10", "dev", "tun0"],
        ["link", "set", "tun0", "up"],
    ]
    for i in range(4):
        commands += [["link", "add", f"vethA{i}", "type", "veth", "peer", "name", f"vethB{i}"],
                     ["addr", "add", f"192.168.{100 + i}.1/24", "dev", f"vethA{i}"],
                     ["link", "set", f"vethA{i}", "up"], ["link", "set", f"vethB{i}", "up"]]
    for argv in commands:
        result = node.run(["ip", *argv], timeout=30)
        assert result.returncode == 0, result.describe()
    return node


def test_a_misconfigured_nodes_report_fits_one_screen(sim_cluster: ClusterFactory) -> None:
    """doctor on a node with docker0, a tunnel and veths: every line within 160 columns (the
    width when not a terminal), no piece of evidence twice, and the whole report in 40 lines."""
    cluster = sim_cluster(2, trainers=1, hosts="management-all")
    node = _busy_node(cluster)
    result = node.run(["sh", "-c", f"{CLI} doctor"], env=node.env(), timeout=120)
    assert result.returncode == 1, result.describe()
    lines = result.stdout.splitlines()
    assert len(lines) <= 40, result.stdout
    assert max(len(line) for line in lines) <= 160, result.stdout
    evidence = [line.split("evidence: ", 1)[1] for line in lines if "evidence: " in line]
    assert len(evidence) == len(set(evidence)), result.stdout
    shown = node.run(["sh", "-c", f"{CLI} show"], env=node.env(), timeout=120)
    assert max(len(line) for line in shown.stdout.splitlines()) <= 160, shown.stdout
