"""Preflight under a connection flood: the primary's memory and the honest nodes' verdict time.

A real primary (:func:`clusterenv.preflight.serve_primary`) runs in a child process of its own
on 127.0.0.1 and reports its peak resident memory when it is done (its own ``VmHWM``;
``ru_maxrss`` would carry this process's peak across exec). Three honest
nodes (:func:`clusterenv.preflight.run_node`, the code ``clusterenv preflight`` runs) report to
it from threads of this process. Three runs, one after the other:

- *baseline*: nothing else connects;
- *junk*: 300 connections that each send a few bytes of garbage or nothing and close, opened
  from 8 threads while the honest nodes report;
- *idle*: 500 connections opened before the nodes start and held open, silent, until the end.

The time is from the nodes' start to the last node holding its verdict. Goals (exit 1 when
missed): under attack, the verdict within the baseline time + 1 s, and the primary's peak RSS
under 64 MB.

Then the other direction: a hostile primary (a listener in this process that won the port)
answers a real node (:func:`clusterenv.preflight.run_node` in a child process, which reports its
own ``VmHWM`` and how many characters the verdict would print) with a verdict of empty evidence
items, the 16 MiB one of the original attack and the largest a node reads (4 MiB). Goal: the
node's peak RSS under 64 MB and nothing of the verdict printed.

Each scenario runs ``--runs`` times (default 3); the fastest verdict and the largest peak RSS
count.

Run: ``python benchmarks/bench_preflight_hostile.py [--runs N]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from clusterenv.preflight import Fingerprint, PreflightOptions, run_node
from clusterenv.preflight.wire import FrameReader, Kind, encode_frame, encode_json

NODES = 4
RSS_GOAL_MB = 64.0
SLACK_S = 1.0

_PRIMARY = """
import json, re, sys
from clusterenv.preflight import Fingerprint, PreflightOptions, serve_primary
own = Fingerprint(rank=0, num_nodes={nodes}, num_trainers=8, hostname="node-0",
                  interface="ens1", mtu=9000, env={{"NCCL_SOCKET_IFNAME": "ens1"}})
def ready(port):
    print(port, flush=True)
verdict = serve_primary(own, listen_addr="127.0.0.1", port=0, expected_nodes={nodes},
                        options=PreflightOptions(timeout=30), on_listening=ready)
peak_kib = int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read()).group(1))
print(json.dumps({{"rss_mb": peak_kib / 1024, "exit_code": verdict.exit_code,
                   "reported": verdict.reported, "rejected": verdict.rejected_total}}))
"""


def honest(rank: int) -> Fingerprint:
    return Fingerprint(rank=rank, num_nodes=NODES, num_trainers=8, hostname=f"node-{rank}",
                       interface="ens1", mtu=9000, env={"NCCL_SOCKET_IFNAME": "ens1"})


def junk(port: int, count: int, stop: threading.Event) -> None:
    for i in range(count):
        if stop.is_set():
            return
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if i % 2:
                    sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        except OSError:
            pass


def run(scenario: str) -> tuple[float, dict[str, float]]:
    child = subprocess.Popen([sys.executable, "-c", _PRIMARY.format(nodes=NODES)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    port = int(child.stdout.readline())
    held: list[socket.socket] = []
    stop = threading.Event()
    flooders: list[threading.Thread] = []
    if scenario == "idle":
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(500)]
    start = time.monotonic()
    if scenario == "junk":
        flooders = [threading.Thread(target=junk, args=(port, 300 // 8 + 1, stop))
                    for _ in range(8)]
        for thread in flooders:
            thread.start()
    with ThreadPoolExecutor(NODES - 1) as pool:
        futures = [pool.submit(run_node, honest(r), primary_addr="127.0.0.1", port=port,
                               options=PreflightOptions(timeout=20)) for r in range(1, NODES)]
        verdicts = [f.result(60) for f in futures]
    elapsed = time.monotonic() - start
    stop.set()
    for thread in flooders:
        thread.join()
    for sock in held:
        sock.close()
    report = json.loads(child.stdout.readline())
    child.wait(30)
    assert all(v.exit_code == 0 for v in verdicts), verdicts
    return elapsed, report


_NODE = """
import json, re, sys
from clusterenv._cli.preflight import format_verdict
from clusterenv.preflight import (Fingerprint, PreflightError, PreflightOptions, PreflightResult,
                                  run_node)
fp = Fingerprint(rank=1, num_nodes=2, num_trainers=8, hostname="node-1")
try:
    verdict = run_node(fp, primary_addr="127.0.0.1", port=int(sys.argv[1]),
                       options=PreflightOptions(timeout=20))
    printed = len(format_verdict(PreflightResult(verdict.exit_code, "node", 1, "", verdict)))
    outcome = "accepted"
except PreflightError as e:
    printed, outcome = len(str(e)), "refused: " + str(e)[:120]
peak_kib = int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read()).group(1))
print(json.dumps({"rss_mb": peak_kib / 1024, "printed": printed, "outcome": outcome}))
"""


def hostile_verdict(size: int) -> bytes:
    """A verdict of one problem with as many empty evidence items as fit in ``size`` bytes."""
    head = encode_json({"expected_nodes": 2, "primary": "127.0.0.1:1", "problems": [
        {"code": "x", "severity": "error", "title": "t", "evidence": ["@"]}]})
    count = (size - len(head)) // 3
    return head.replace(b'["@"]', b"[" + b",".join([b'""'] * count) + b"]")


def node_under_attack(size: int) -> dict[str, object]:
    """Run a real node against a listener that answers with :func:`hostile_verdict`."""
    payload = hostile_verdict(size)
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError), server.accept()[0] as conn:
            hello = {"nonce": "11" * 16, "auth": False, "ring": False, "timeout_s": 10}
            conn.sendall(encode_frame(Kind.HELLO, encode_json(hello)))
            reader = FrameReader(max_payload=1 << 20, expect={Kind.OPEN, Kind.FINGERPRINT})
            while True:
                while (frame := reader.next_frame()) is None:
                    reader.feed(conn.recv(65536))
                if frame.kind == Kind.FINGERPRINT:
                    break
            conn.sendall(encode_frame(Kind.VERDICT, payload))
            conn.recv(1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    child = subprocess.run([sys.executable, "-c", _NODE, str(server.getsockname()[1])],
                           capture_output=True, text=True, timeout=120, check=False)
    thread.join(10)
    server.close()
    report: dict[str, object] = json.loads(child.stdout.splitlines()[-1])
    return report


def best(scenario: str, runs: int) -> tuple[float, dict[str, float]]:
    """The fastest of ``runs`` runs (noise on a shared machine only ever adds time), with the
    largest peak RSS seen in any of them."""
    results = [run(scenario) for _ in range(runs)]
    took = min(t for t, _ in results)
    report = dict(max((r for _, r in results), key=lambda r: r["rss_mb"]))
    return took, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs per scenario (default 3)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
    base, base_report = best("baseline", args.runs)
    print(f"baseline : verdict in {base:.3f} s, primary peak RSS {base_report['rss_mb']:.1f} MB")
    failed = False
    for scenario, label in (("junk", "300 junk connections"), ("idle", "500 idle connections")):
        took, report = best(scenario, args.runs)
        ok = took <= base + SLACK_S and report["rss_mb"] < RSS_GOAL_MB
        failed |= not ok
        print(f"{label:22}: verdict in {took:.3f} s (goal <= {base + SLACK_S:.3f}), primary peak "
              f"RSS {report['rss_mb']:.1f} MB (goal < {RSS_GOAL_MB:.0f}), "
              f"{int(report['rejected'])} refused — {'ok' if ok else 'MISSED'}")
    for size, label in ((16 * 1024 * 1024 - 64, "16 MiB hostile verdict"),
                        (4 * 1024 * 1024 - 64, "4 MiB hostile verdict")):
        node = node_under_attack(size)
        rss = float(str(node["rss_mb"]))
        ok = rss < RSS_GOAL_MB and str(node["outcome"]).startswith("refused")
        failed |= not ok
        print(f"{label:22}: node peak RSS {rss:.1f} MB (goal < {RSS_GOAL_MB:.0f}), "
              f"{node['printed']} characters to print, {node['outcome']} — "
              f"{'ok' if ok else 'MISSED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
