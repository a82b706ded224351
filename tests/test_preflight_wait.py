"""``clusterenv preflight --wait`` and what preflight says while it waits.

Through the real CLI: on loopback with a pseudo-terminal (the awaited ranks redrawn in place)
and with a pipe (one line per change), and on namespace nodes where the cluster comes up late:
a node whose ``ens1`` address is assigned a few seconds after it starts, and a node that starts
its preflight after the primary's ``--timeout`` would have ended. Before, preflight printed
nothing while it waited, and the late address or node gave an error instead of a wait.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from tests.simcluster import ClusterFactory
from tests.test_preflight import free_port, loopback_host, runpod_env
from tests.test_preflight_netns import assert_same_verdict_everywhere, node_env

CLI = [sys.executable, "-m", "clusterenv", "preflight"]


def _read_all(fd: int, until: float) -> bytes:
    out = b""
    while time.monotonic() < until:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        out += chunk
    return out


def test_the_primary_shows_the_awaited_ranks_in_place_on_a_terminal(tmp_path: Path) -> None:
    port = str(free_port())
    roots = [loopback_host(tmp_path / f"n{r}", f"127.0.0.{r + 2}", runpod_env(r, 2, "127.0.0.2"))
             for r in range(2)]
    leader, follower = pty.openpty()
    primary = subprocess.Popen([*CLI, "--root", roots[0], "--timeout", "20", "--port", port],
                               stdout=subprocess.PIPE, stderr=follower, text=True)
    os.close(follower)
    try:
        seen = _read_all(leader, time.monotonic() + 3)  # the primary waits for rank 1
        node = subprocess.run([*CLI, "--root", roots[1], "--timeout", "20", "--port", port],
                              capture_output=True, text=True, timeout=60, check=False)
        out, _ = primary.communicate(timeout=60)
        seen += _read_all(leader, time.monotonic() + 1)
    finally:
        primary.kill()
        os.close(leader)
    text = seen.decode("utf-8", "replace")
    assert "\r\x1b[Kwaiting for rank 1 (1 of 2 reported, " in text, text
    assert text.endswith("\r\x1b[K")  # the line is cleared before the verdict
    assert "\n" not in text.replace("\r\n", "")  # redrawn in place, not a line per update
    assert out.startswith("preflight: 2 of 2 nodes reported"), out
    assert node.returncode == primary.returncode == 1  # loopback primaries: doctor errors
    assert "\r" not in node.stderr  # a pipe gets lines


def test_a_node_says_what_it_waits_for_one_line_per_change(tmp_path: Path) -> None:
    port = str(free_port())
    root = loopback_host(tmp_path, "127.0.0.3", runpod_env(1, 2, "127.0.0.9"))
    result = subprocess.run([*CLI, "--root", root, "--timeout", "2.5", "--port", port],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    waits = [line for line in result.stderr.splitlines() if line.startswith("waiting for")]
    assert waits and all(line.startswith(f"waiting for the primary at 127.0.0.9:{port} "
                                         "(Connection refused), ") for line in waits), waits
    assert 1 <= len(waits) <= 4, waits  # a count of seconds changing: at most one a second
    assert "\r" not in result.stderr


def test_wait_outlasts_an_address_assigned_late_and_a_node_started_late(
    sim_cluster: ClusterFactory,
) -> None:
    cluster = sim_cluster(3, hosts="cluster")
    late_addr, late_start = cluster.nodes[1], cluster.nodes[2]
    subprocess.run(["ip", "-n", late_addr.netns, "addr", "del",
                    f"{late_addr.cluster_addr}/24", "dev", "ens1"], check=True)
    argv = [*CLI, "--json", "--timeout", "3", "--wait", "40"]
    first = [n.popen(argv, env=node_env(n)) for n in cluster.nodes[:2]]
    time.sleep(4)  # past the primary's --timeout: only --wait keeps it collecting
    subprocess.run(["ip", "-n", late_addr.netns, "addr", "add",
                    f"{late_addr.cluster_addr}/24", "dev", "ens1"], check=True)
    time.sleep(2)
    last = late_start.popen(argv, env=node_env(late_start))  # 6 s after the others
    results = [p.wait(60) for p in (*first, last)]
    everything = [(r, json.loads(r.stdout)) for r in results]
    verdict = assert_same_verdict_everywhere(everything, 0)
    assert verdict["reported"] == 3 and verdict["problems"] == [], verdict["problems"]
    assert "waiting for this node's cluster address (NODE_ADDR 10.65.0.3 is on no interface " \
        "yet)" in results[1].stderr, results[1].stderr
    assert "waiting for rank" in results[0].stderr


def test_more_nodes_than_num_nodes_and_rank_gaps_are_named() -> None:
    # Pods added to a running cluster: four report to a primary whose NUM_NODES is 3, with
    # ranks 0, 1, 3, 4 (a replaced pod got rank 4, rank 2 is gone).
    from clusterenv.preflight import compare
    from tests.test_preflight import entries, fingerprint

    problems = compare(entries(*(fingerprint(r) for r in (0, 1, 3, 4))), expected_nodes=3)
    (extra,) = [p for p in problems if p.code == "preflight-rank-out-of-range"]
    assert extra.title == ("4 nodes reported, 1 more than NUM_NODES=3: rank 3 (10.65.0.4), "
                           "rank 4 (10.65.0.5) have NODE_RANK outside [0, 3)")
    assert extra.evidence == ("the ranks have gaps: rank 2 missing while ranks 3-4 reported: "
                              "nodes added to or replaced in a running cluster got new ranks",)
    (missing,) = [p for p in problems if p.code == "preflight-rank-missing"]
    assert missing.title.endswith(": rank 2")
