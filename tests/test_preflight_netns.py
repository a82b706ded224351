"""``clusterenv preflight`` across simulated nodes (network namespaces, DESIGN §8).

Each test starts the real CLI on 3–4 namespace nodes at once, over the cluster bridge, and reads
every node's ``--json`` verdict. Skipped without root or ``ip netns`` (failed instead under
``CI=true``, see tests/conftest.py).
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from clusterenv.preflight import DEFAULT_LIMITS
from tests.simcluster import ClusterFactory, NodeResult, SimCluster, SimNode

PORT = 29501  # PRIMARY_PORT 29500 + 1, the default
GOOD = {"NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1"}


def node_env(node: SimNode, **changes: str | None) -> dict[str, str]:
    """A well-configured node (sockets pinned to ens1), with ``changes``."""
    return node.env({**GOOD, **changes})


def preflight_on(
    nodes: Iterable[SimNode],
    *args: str,
    env: Mapping[SimNode, Mapping[str, str]] | None = None,
    timeout: float = 40.0,
) -> list[tuple[NodeResult, dict[str, Any]]]:
    """Run ``clusterenv preflight --json ARGS`` on ``nodes`` at once; results in node order."""
    chosen = list(nodes)
    argv = [sys.executable, "-m", "clusterenv", "preflight", "--json", *args]
    procs = [n.popen(argv, env=(env or {}).get(n) or node_env(n)) for n in chosen]
    deadline = time.monotonic() + timeout
    out = []
    for proc in procs:
        result = proc.wait(deadline - time.monotonic())
        assert not result.timed_out, result.describe()
        try:
            data = json.loads(result.stdout)
        except ValueError as e:
            raise AssertionError(f"not JSON:\n{result.describe()}") from e
        out.append((result, data))
    return out


def listening_ports(node: SimNode) -> set[int]:
    """TCP ports in LISTEN state inside ``node``'s namespace."""
    result = node.run(["cat", "/proc/net/tcp", "/proc/net/tcp6"], timeout=10, check=True)
    ports = set()
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def problems(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = data["verdict"]["problems"]
    return found


def describe(results: Sequence[tuple[NodeResult, dict[str, Any]]]) -> str:
    return "\n".join(r.describe() for r, _ in results)


def assert_same_verdict_everywhere(results: Sequence[tuple[NodeResult, dict[str, Any]]],
                                   exit_code: int) -> dict[str, Any]:
    codes = [r.returncode for r, _ in results]
    assert codes == [exit_code] * len(results), describe(results)
    verdicts = [data["verdict"] for _, data in results]
    assert all(v == verdicts[0] for v in verdicts), describe(results)
    roles = [data["role"] for _, data in results]
    assert roles == ["primary", *["node"] * (len(results) - 1)]
    first: dict[str, Any] = verdicts[0]
    return first


def test_healthy_cluster_exits_0_everywhere_in_seconds(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(3, hosts="cluster")
    start = time.monotonic()
    results = preflight_on(cluster.nodes, "--timeout", "20")
    elapsed = time.monotonic() - start
    verdict = assert_same_verdict_everywhere(results, 0)
    assert verdict["problems"] == [] and verdict["reported"] == 3
    assert [(n["rank"], n["addr"], n["interface"]) for n in verdict["nodes"]] == [
        (0, "10.65.0.2", "ens1"), (1, "10.65.0.3", "ens1"), (2, "10.65.0.4", "ens1")]
    assert verdict["primary"] == f"10.65.0.2:{PORT}"
    assert elapsed < 15, f"{elapsed:.1f} s\n{describe(results)}"  # mostly interpreter start-up
    assert PORT not in listening_ports(cluster.primary)

    # Again, with a shared token and the ring: the port is free at once, the token is never shown.
    token = "preflight-token-0123456789"
    env = {n: node_env(n, CLUSTERENV_PREFLIGHT_TOKEN=token) for n in cluster.nodes}
    results = preflight_on(cluster.nodes, "--timeout", "20", "--ring", env=env)
    verdict = assert_same_verdict_everywhere(results, 0)
    assert [(h["source"]["rank"], h["target"]["rank"], h["ok"]) for h in verdict["ring"]] == [
        (0, 1, True), (1, 2, True), (2, 0, True)]
    assert all(token not in r.stdout + r.stderr for r, _ in results)
    for node in cluster.nodes:
        assert PORT not in listening_ports(node)


def test_one_node_with_another_socket_ifname_fails_everywhere_naming_it(
    sim_cluster: ClusterFactory,
) -> None:
    cluster = sim_cluster(4, hosts="cluster")
    odd = cluster.nodes[2]
    env = {n: node_env(n) for n in cluster.nodes}
    env[odd] = node_env(odd, NCCL_SOCKET_IFNAME="eth0")
    results = preflight_on(cluster.nodes, "--timeout", "20", env=env)
    verdict = assert_same_verdict_everywhere(results, 1)
    differs = [p for p in verdict["problems"] if p["code"] == "preflight-env-differs"]
    assert len(differs) == 1, verdict["problems"]
    assert differs[0]["title"] == (
        "NCCL_SOCKET_IFNAME differs: rank 2 (10.65.0.4) has 'eth0', 3 nodes have 'ens1'")
    assert differs[0]["nodes"] == [{"rank": 2, "addr": "10.65.0.4", "hostname": "node-2"}]
    # The node's own doctor also flags eth0 (management): named by rank too.
    local = [p for p in verdict["problems"] if p["code"] == "preflight-node-errors"]
    assert all(n["rank"] == 2 for p in local for n in p["nodes"])


def test_missing_node_is_reported_by_rank_within_the_timeout(
    sim_cluster: ClusterFactory,
) -> None:
    cluster = sim_cluster(4, hosts="cluster")
    started = [n for n in cluster.nodes if n.rank != 2]  # node 2 never runs preflight
    start = time.monotonic()
    results = preflight_on(started, "--timeout", "5")
    elapsed = time.monotonic() - start
    verdict = assert_same_verdict_everywhere(results, 1)
    (missing,) = verdict["problems"]
    assert missing["code"] == "preflight-rank-missing"
    assert missing["title"].startswith("1 of 4 nodes did not report within")
    assert missing["title"].endswith(": rank 2")
    assert elapsed < 20, f"{elapsed:.1f} s"
    assert PORT not in listening_ports(cluster.primary)


def test_duplicate_node_rank(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(3, hosts="cluster")
    env = {n: node_env(n) for n in cluster.nodes}
    env[cluster.nodes[2]] = node_env(cluster.nodes[2], NODE_RANK="1")
    start = time.monotonic()
    results = preflight_on(cluster.nodes, "--timeout", "30", env=env)
    assert time.monotonic() - start < 20  # a short grace, not the 30 s timeout
    verdict = assert_same_verdict_everywhere(results, 1)
    by_code = {p["code"]: p for p in verdict["problems"]}
    assert by_code["preflight-rank-duplicate"]["title"] == (
        "NODE_RANK=1 is used by 2 nodes: rank 1 (10.65.0.3), rank 1 (10.65.0.4)")
    assert by_code["preflight-rank-missing"]["title"].endswith(": rank 2")


def test_node_with_another_mtu_is_named(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(3, hosts="cluster", mtu=(1500, 1500, 9000))
    verdict = assert_same_verdict_everywhere(preflight_on(cluster.nodes, "--timeout", "20"), 1)
    mtu = [p for p in verdict["problems"] if p["code"] == "preflight-mtu-differs"]
    assert len(mtu) == 1 and mtu[0]["severity"] == "error"
    assert mtu[0]["title"] == (
        "MTU of the cluster interface differs: rank 2 (10.65.0.4) has 9000, 2 nodes have 1500")
    assert [n["mtu"] for n in verdict["nodes"]] == [1500, 1500, 9000]


# A peer inside the cluster network that is not a node: garbage, a header announcing 1 GiB, and
# a connection that says nothing. It waits until the primary has dropped the silent one.
HOSTILE = textwrap.dedent("""
    import socket, struct, sys, time
    from clusterenv.preflight.wire import PROTOCOL_VERSION
    target = (sys.argv[1], int(sys.argv[2]))
    def connect():
        deadline = time.monotonic() + 20
        while True:
            try:
                return socket.create_connection(target, timeout=10)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    silent = connect()
    garbage = connect()
    garbage.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    oversized = connect()
    header = struct.pack("!BBBxI", PROTOCOL_VERSION, 2, 0, 1 << 30)
    oversized.sendall(b"CEPF" + header + b"x" * 4096)
    start = time.monotonic()
    while silent.recv(4096):
        pass
    print(f"silent connection closed by the primary after {time.monotonic() - start:.1f} s")
""")


def test_hostile_peers_are_refused_and_honest_nodes_get_their_verdict(
    sim_cluster: ClusterFactory,
) -> None:
    cluster: SimCluster = sim_cluster(4, hosts="cluster")
    honest, intruder = cluster.nodes[:3], cluster.nodes[3]
    three = {"NUM_NODES": "3", "WORLD_SIZE": str(3 * cluster.trainers)}
    argv = [sys.executable, "-m", "clusterenv", "preflight", "--json", "--timeout", "30"]
    primary = cluster.primary.popen(argv, env=node_env(cluster.primary, **three))
    attack = intruder.run([sys.executable, "-c", HOSTILE, cluster.primary_addr, str(PORT)],
                          timeout=30)
    assert attack.returncode == 0, attack.describe()
    assert "closed by the primary" in attack.stdout
    others = preflight_on(honest[1:], "--timeout", "20",
                          env={n: node_env(n, **three) for n in honest[1:]})
    first = primary.wait(30)
    results = [(first, json.loads(first.stdout)), *others]
    verdict = assert_same_verdict_everywhere(results, 0)  # refused peers: a warning
    (warning,) = verdict["problems"]
    assert warning["code"] == "preflight-rejected-peers" and verdict["rejected_total"] == 3
    reasons = "\n".join(verdict["rejected"])
    assert reasons.count("10.65.0.5:") == 3, reasons
    assert "not a clusterenv preflight message (it starts with 'GET / HT')" in reasons
    assert "message of 1073741824 bytes exceeds the 65536-byte limit" in reasons
    assert f"sent nothing within {DEFAULT_LIMITS.peer_timeout:.1f} s" in reasons
    assert verdict["reported"] == 3
    assert PORT not in listening_ports(cluster.primary)
