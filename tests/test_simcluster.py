"""The simulated cluster itself: is it faithful to a Runpod node, and does it clean up?"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.simcluster import (
    ClusterFactory,
    SimCluster,
    base_env,
    make_cluster,
    render_hosts,
    sweep_leftovers,
)

SCRIPTS = Path(__file__).parent / "scripts"
PY = sys.executable

# -- without namespaces: the files and environments a node gets ------------------------------


@pytest.mark.parametrize(
    ("style", "present", "absent"),
    [
        ("debian", ["127.0.1.1\tnode-1"], ["10.65.0.3", "172.20.0.11"]),
        ("management", ["172.20.0.11\tnode-1"], ["127.0.1.1", "10.65.0.3"]),
        ("cluster", ["10.65.0.2\tnode-0", "10.65.0.3\tnode-1"], ["127.0.1.1", "172.20.0.11"]),
        ("management-all", ["172.20.0.10\tnode-0", "172.20.0.11\tnode-1"],
         ["127.0.1.1", "10.65.0.3"]),
        ("none", [], ["node-1", "127.0.1.1"]),
    ],
)
def test_hosts_file_styles(style: str, present: list[str], absent: list[str]) -> None:
    text = render_hosts(
        style,  # type: ignore[arg-type]  # parametrized strings are the Literal's values
        "node-1",
        cluster_addr="10.65.0.3",
        management_addr="172.20.0.11",
        peers={"node-0": "10.65.0.2", "node-1": "10.65.0.3"},
        management_peers={"node-0": "172.20.0.10", "node-1": "172.20.0.11"},
    )
    lines = text.splitlines()
    assert lines[0] == "127.0.0.1\tlocalhost"
    for line in present:
        assert line in lines
    for fragment in absent:
        assert fragment not in text


def test_hosts_file_rejects_unknown_style() -> None:
    with pytest.raises(ValueError, match="'ubuntu'"):
        render_hosts("ubuntu", "n", cluster_addr="10.65.0.2",  # type: ignore[arg-type]
                     management_addr="172.20.0.10")


def test_base_env_keeps_the_developers_settings_out() -> None:
    env = base_env({
        "HOME": "/home/dev",
        "CI": "true",
        "NCCL_SOCKET_IFNAME": "eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
        "MASTER_ADDR": "localhost",
        "PATH": "/opt/elsewhere/bin",
    })
    assert env["HOME"] == "/home/dev"
    assert env["CI"] == "true"
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert "/opt/elsewhere/bin" not in env["PATH"]
    assert not {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR"} & env.keys()


def test_node_env_is_the_runpod_contract() -> None:
    cluster = SimCluster(3, trainers=4, primary_port=29600)  # not started: no root needed
    env = cluster.nodes[2].env()
    assert {k: env[k] for k in cluster.nodes[2].runpod_env()} == {
        "PRIMARY_ADDR": "10.65.0.2",
        "MASTER_ADDR": "10.65.0.2",
        "PRIMARY_PORT": "29600",
        "MASTER_PORT": "29600",
        "HOST_NODE_ADDR": "10.65.0.2:29600",
        "NODE_ADDR": "10.65.0.4",
        "NODE_RANK": "2",
        "NUM_NODES": "3",
        "NUM_TRAINERS": "4",
        "WORLD_SIZE": "12",
    }
    changed = cluster.nodes[0].env({"NCCL_DEBUG": "INFO"}, GLOO_SOCKET_IFNAME="ens1",
                                   MASTER_ADDR=None, NODE_ADDR="10.65.0.99")
    assert changed["NCCL_DEBUG"] == "INFO"
    assert changed["GLOO_SOCKET_IFNAME"] == "ens1"
    assert changed["NODE_ADDR"] == "10.65.0.99"
    assert "MASTER_ADDR" not in changed
    assert changed["PRIMARY_ADDR"] == "10.65.0.2"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 0}, "nodes=0"),
        ({"nodes": 2, "trainers": 0}, "trainers=0"),
        ({"nodes": 2, "mtu": [9000]}, "mtu: expected one value per node"),
        ({"nodes": 2, "hosts": "ubuntu"}, "hosts='ubuntu'"),
        ({"nodes": 2, "hostnames": ["a"]}, "hostnames: expected 2"),
        ({"nodes": 2, "primary_port": 70000}, "primary_port=70000"),
    ],
)
def test_cluster_rejects_bad_options(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimCluster(**kwargs)  # type: ignore[arg-type]


def test_a_cluster_that_was_not_started_runs_nothing() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        SimCluster(1).nodes[0].popen(["true"])


# -- in namespaces ---------------------------------------------------------------------------

CONNECT = """
import json, socket, sys, time

def attempt(addr, timeout):
    start = time.monotonic()
    try:
        with socket.create_connection((addr, 4000), timeout=timeout) as s:
            return ["connected", s.getsockname()[0]]
    except OSError as e:
        return [type(e).__name__, round(time.monotonic() - start, 2)]

# The first address is the listener's cluster address: retry until it is up, so that the
# other addresses are tried against a listener known to be running.
first, *others = sys.argv[1:]
deadline = time.monotonic() + 15
results = {first: attempt(first, 1.5)}
while results[first][0] != "connected" and time.monotonic() < deadline:
    time.sleep(0.1)
    results[first] = attempt(first, 1.5)
for addr in others:
    results[addr] = attempt(addr, 1.5)
print(json.dumps(results))
"""
LISTEN = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 4000))  # every address of node 0: eth0's and ens1's
s.listen()
s.settimeout(20)
while True:
    conn, peer = s.accept()
    print("accepted", peer[0], flush=True)
    conn.close()
    if peer[0] == sys.argv[1]:
        break
"""


@pytest.mark.netns
def test_nodes_reach_each_other_over_ens1(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2)
    listener = cluster.primary.popen([PY, "-c", LISTEN, "10.65.0.3"])
    client = cluster.nodes[1].run([PY, "-c", CONNECT, "10.65.0.2"], timeout=30)
    assert client.returncode == 0, client.describe()
    assert json.loads(client.stdout) == {"10.65.0.2": ["connected", "10.65.0.3"]}
    served = listener.wait(10)
    assert served.returncode == 0, served.describe()
    assert served.stdout.splitlines()[-1] == "accepted 10.65.0.3"


@pytest.mark.netns
def test_management_addresses_are_unreachable_between_nodes(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2)
    listener = cluster.primary.popen([PY, "-c", LISTEN, "none"])  # keeps accepting
    client = cluster.nodes[1].run(
        [PY, "-c", CONNECT, "10.65.0.2", "172.20.0.10", "172.20.0.1"], timeout=30)
    listener.kill()
    assert client.returncode == 0, client.describe()
    results = json.loads(client.stdout)
    # The listener is up and reachable over ens1...
    assert results["10.65.0.2"] == ["connected", "10.65.0.3"], results
    # ...but not at the peer's 172.x address: silence, as on Runpod (isolated bridge port).
    assert results["172.20.0.10"][0] == "TimeoutError", results
    # eth0 itself works: the gateway answers (it refuses, nothing listens there).
    assert results["172.20.0.1"][0] == "ConnectionRefusedError", results
    assert "172." not in listener.wait(0).stdout


@pytest.mark.netns
def test_node_has_runpod_interfaces_routes_and_mtu(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, mtu=(9000, None))
    results = cluster.run_all(
        lambda node: ["sh", "-c",
                      "ls /sys/class/net; echo ---; ip -j addr show; echo ---; ip -j route show"],
        timeout=20, check=True)
    for node, result in zip(cluster.nodes, results, strict=True):
        listing, addrs, routes = result.stdout.split("---\n")
        assert sorted(listing.split()) == ["ens1", "eth0", "lo"], result.describe()
        links = {link["ifname"]: link for link in json.loads(addrs)}
        ipv4 = {name: [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"]
                       if a["family"] == "inet"] for name, link in links.items()}
        assert ipv4 == {
            "lo": ["127.0.0.1/8"],
            "eth0": [f"172.20.0.{10 + node.rank}/16"],
            "ens1": [f"10.65.0.{2 + node.rank}/24"],
        }
        assert links["eth0"]["operstate"] == links["ens1"]["operstate"] == "UP"
        assert links["ens1"]["mtu"] == (9000 if node.rank == 0 else 1500)
        assert links["eth0"]["mtu"] == 1500
        default = [(r["gateway"], r["dev"]) for r in json.loads(routes) if r["dst"] == "default"]
        assert default == [("172.20.0.1", "eth0")]


RESOLVE = """
import json, socket, sys, time
out = {"hostname": socket.gethostname()}
for name in sys.argv[1:]:
    start = time.monotonic()
    try:
        out[name] = sorted({ai[4][0] for ai in socket.getaddrinfo(name, None, socket.AF_INET)})
    except socket.gaierror as e:
        out[name] = [e.errno, round(time.monotonic() - start, 3)]
print(json.dumps(out))
"""


@pytest.mark.netns
def test_hostname_resolves_the_debian_way_and_unknown_names_fail_at_once(
    sim_cluster: ClusterFactory,
) -> None:
    cluster = sim_cluster(2)
    result = cluster.nodes[1].run([PY, "-c", RESOLVE, "node-1", "node-0", "pypi.org"],
                                  timeout=20, check=True)
    out = json.loads(result.stdout)
    assert out["hostname"] == "node-1"
    assert out["node-1"] == ["127.0.1.1"]  # what sends Gloo to loopback (FM-10)
    for unknown in ("node-0", "pypi.org"):
        errno, seconds = out[unknown]
        assert errno == socket.EAI_NONAME, out  # "Name or service not known", no DNS wait
        assert seconds < 1.0, out


@pytest.mark.netns
def test_hosts_styles_per_node(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, hosts=("cluster", "none"), hostnames=("alpha", "beta"))
    results = cluster.run_all(lambda node: [PY, "-c", RESOLVE, "alpha", "beta"], timeout=20,
                              check=True)
    alpha, beta = (json.loads(r.stdout) for r in results)
    assert alpha == {"hostname": "alpha", "alpha": ["10.65.0.2"], "beta": ["10.65.0.3"]}
    assert beta["hostname"] == "beta"
    assert beta["beta"][0] == socket.EAI_NONAME  # gai error -2 (FM-13)


@pytest.mark.netns
def test_environment_inside_each_node(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, trainers=3)
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    results = cluster.run_all(
        lambda node: [PY, "-c", dump],
        env=lambda node: node.env(GLOO_SOCKET_IFNAME="ens1", MASTER_PORT=None),
        timeout=20, check=True)
    for node, result in zip(cluster.nodes, results, strict=True):
        env = json.loads(result.stdout)
        expected = node.env(GLOO_SOCKET_IFNAME="ens1", MASTER_PORT=None)
        # Only what we passed, plus what the shell shim adds; nothing of the developer's.
        assert set(env) - set(expected) <= {"PWD", "SHLVL", "OLDPWD", "_"}, env
        assert {k: env[k] for k in expected} == expected
        assert env["NODE_RANK"] == str(node.rank)
        assert env["WORLD_SIZE"] == "6"
        assert "MASTER_PORT" not in env
    version = cluster.nodes[1].run([PY, "-m", "clusterenv", "--version"], timeout=30)
    assert version.returncode == 0, version.describe()
    assert version.stdout.startswith("clusterenv ")


def _processes_with(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def _marker() -> str:
    # A sleep length nobody else uses, to find exactly our processes in /proc.
    return f"{300 + secrets.randbelow(10_000)}.{secrets.randbelow(10**6):06d}"


@pytest.mark.netns
def test_a_run_past_its_timeout_is_killed_with_its_children(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(1)
    marker = _marker()
    result = cluster.primary.run(
        ["sh", "-c", f"sleep {marker} & setsid sleep {marker} & echo started; wait"], timeout=1.0)
    assert result.timed_out
    assert result.killed == "deadline"
    assert result.returncode == -9
    assert 1.0 <= result.duration_s < 3.0, result.describe()
    assert result.stdout == "started\n"
    assert _processes_with(marker) == []  # even the setsid'd one: the PID namespace died


@pytest.mark.netns
def test_run_all_stops_the_others_when_one_fails(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2)
    marker = _marker()
    results = cluster.run_all([["sh", "-c", "sleep 0.3; exit 3"], ["sleep", marker]],
                              timeout=30, stop_on_failure=True)
    assert results[0].returncode == 3
    assert results[0].killed is None
    assert results[1].killed == "peer-failed"
    assert results[1].duration_s < 5.0, results[1].describe()
    assert _processes_with(marker) == []
    with pytest.raises(subprocess.CalledProcessError, match="exit 3"):
        results[0].check_returncode()


def _our_names(tag: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            check=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           check=True).stdout
    etc = Path("/etc/netns")
    files = [p.name for p in etc.iterdir()] if etc.is_dir() else []
    return [line for line in [*listed.splitlines(), *links.splitlines(), *files] if tag in line]


@pytest.mark.netns
@pytest.mark.usefixtures("netns_required")
def test_teardown_leaves_nothing_even_when_interrupted() -> None:
    marker = _marker()
    with pytest.raises(KeyboardInterrupt), make_cluster(2) as cluster:  # noqa: PT012
        tag = cluster.tag
        assert len(_our_names(tag)) >= 2 * 2 + 1  # nodes and switch namespaces, /etc/netns
        cluster.primary.popen(["sleep", marker])
        assert cluster.primary.run(["true"], timeout=10).returncode == 0
        raise KeyboardInterrupt
    assert _our_names(tag) == []
    assert _processes_with(marker) == []
    cluster.close()  # idempotent


@pytest.mark.netns
@pytest.mark.usefixtures("netns_required")
def test_sweeper_removes_leftovers_of_dead_runs_only() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # its PID now names a test run that died without tearing down
    suffix = secrets.token_hex(3)
    dead = f"ce-{gone.pid}-{suffix}-n0"
    alive = f"ce-{os.getpid()}-{suffix}-n0"
    try:
        for name in (dead, alive):
            subprocess.run(["ip", "netns", "add", name], check=True)
            (Path("/etc/netns") / name).mkdir(parents=True)
        removed = sweep_leftovers()
        assert dead in removed
        assert alive not in removed
        assert _our_names(dead) == []
        assert len(_our_names(alive)) == 2  # its namespace and /etc/netns dir, left alone
    finally:
        for name in (dead, alive):
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)


# -- torchrun + Gloo across nodes (DESIGN §8, FM-10) -----------------------------------------


@pytest.mark.netns
@pytest.mark.torch
@pytest.mark.usefixtures("torch_required")
def test_gloo_allreduce_over_ens1(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, trainers=2)
    results = cluster.run_all(
        lambda node: node.torchrun_argv(SCRIPTS / "allreduce_step.py", "--timeout", "30"),
        env=lambda node: node.env(GLOO_SOCKET_IFNAME="ens1"),
        timeout=120, stop_on_failure=True)
    for node, result in zip(cluster.nodes, results, strict=True):
        assert result.returncode == 0, result.describe()
        ok = [line for line in result.stdout.splitlines() if line.endswith(" ok")]
        ranks = {2 * node.rank, 2 * node.rank + 1}
        assert {int(line.split("rank=")[1].split()[0]) for line in ok} == ranks, result.describe()
        assert all("world_size=4 backend=gloo" in line and "sum=10" in line for line in ok)


@pytest.mark.netns
@pytest.mark.torch
@pytest.mark.usefixtures("torch_required")
def test_gloo_without_socket_ifname_fails_over_loopback(sim_cluster: ClusterFactory) -> None:
    cluster = sim_cluster(2, trainers=2)  # Debian hosts file: node-N -> 127.0.1.1
    results = cluster.run_all(
        lambda node: node.torchrun_argv(SCRIPTS / "allreduce_step.py", "--timeout", "5"),
        timeout=90, stop_on_failure=True)
    report = "\n\n".join(r.describe(60) for r in results)
    assert all(r.returncode != 0 for r in results), report
    # At least one node failed by itself (its peers may wait on; those are stopped for us).
    assert any(r.killed is None for r in results), report
    stderr = "\n".join(r.stderr for r in results)
    assert "connectFullMesh failed" in stderr, report
    # Every rank advertised a loopback address: the hostname's 127.0.1.1 (or 127.0.0.1, where
    # torch falls back to loopback for a hostname it cannot resolve).
    assert re.search(r"remote=\[127\.0\.[01]\.1\]", stderr), report
    assert " ok" not in "".join(r.stdout for r in results), report
