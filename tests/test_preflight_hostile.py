"""Attacks on preflight over loopback: the real primary and real nodes, hostile raw sockets.

Each test is one attack that broke a release: one packet that crashed the primary, a peer's host
name that drove every node's terminal, a burst of connections that locked honest nodes out, a
verdict too big for the nodes, a ring that probed where an attacker said. Each checks what the
honest nodes got (the verdict, the same on every node) and their exit codes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import resource
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from clusterenv._cli.preflight import format_verdict
from clusterenv.findings import Finding
from clusterenv.preflight import (
    DEFAULT_LIMITS,
    Fingerprint,
    NodeRef,
    NodeSummary,
    PreflightError,
    PreflightOptions,
    PreflightResult,
    PrimaryServer,
    Problem,
    RdmaSummary,
    RingHop,
    Verdict,
    collect_fingerprint,
    compare,
    preflight,
    run_node,
)
from clusterenv.preflight.compare import missing_spans
from clusterenv.preflight.fit import fit_fingerprint, fit_verdict
from clusterenv.preflight.ring import RingListener, probe
from clusterenv.preflight.verdict import BOUNDS
from clusterenv.preflight.wire import (
    FrameReader,
    Kind,
    decode_object,
    encode_frame,
    encode_json,
)
from clusterenv.sources._base import MAX_NODES
from clusterenv.testing import HostBuilder
from tests.test_preflight import (
    FAST,
    LOOP,
    fingerprint,
    free_port,
    loopback_host,
    nodes,
    open_connection,
    primary,
    runpod_env,
)


def raw_fingerprint(port: int, payload: bytes, *, opening: bytes | None = None) -> bytes:
    """Connect, send ``OPEN`` (``opening`` as its payload, else a nonce of zeros), wait for
    HELLO, send ``payload`` as one FINGERPRINT frame, return the replies."""
    with socket.create_connection((LOOP, port), timeout=10) as sock:
        sock.sendall(encode_frame(Kind.OPEN, opening or encode_json({"nonce": "00" * 16})))
        reader = FrameReader(max_payload=1 << 24, expect={Kind.HELLO, Kind.REJECT})
        while (frame := reader.next_frame()) is None:
            data = sock.recv(4096)
            if not data:
                return b""
            reader.feed(data)
        if frame.kind == Kind.REJECT:
            return frame.payload
        sock.sendall(encode_frame(Kind.FINGERPRINT, payload))
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
        return b"".join(chunks)


def wire_body(fp: Fingerprint, **fields: object) -> dict[str, object]:
    return {"fingerprint": {**fp.to_wire(), **fields}}


# -- one bad string: surrogates and terminal escapes ----------------------------------------------


def test_a_lone_surrogate_in_a_peer_hostname_does_not_crash_the_primary() -> None:
    # The JSON escape \ud800 decodes to a lone surrogate, which cannot be encoded again: the
    # verdict encoder raised, and every honest node got "closed the connection without a verdict".
    payload = encode_json(wire_body(fingerprint(2), hostname="HOSTNAME")).replace(
        b'"HOSTNAME"', b'"\\ud800 x \\udfff"')
    with primary(fingerprint(0), expected=3) as (port, verdict), ThreadPoolExecutor(1) as pool:
        attack = pool.submit(raw_fingerprint, port, payload)
        honest = nodes(port, [fingerprint(1)])[0].result(15)
        attack.result(15)
    result = verdict.result()
    assert honest == result and result.exit_code == 0, result.problems
    shown = {n.hostname for n in result.nodes}
    assert "\\ud800 x \\udfff" in shown  # written out, printable, the same on every node


def test_an_undecodable_byte_in_an_honest_nodes_environment_is_sent_escaped() -> None:
    # NCCL_SOCKET_IFNAME=$'ens1\xff' reads as "ens1\udcff" under surrogateescape.
    odd = fingerprint(2, env={"NCCL_SOCKET_IFNAME": "ens1\udcff", "GLOO_SOCKET_IFNAME": "ens1"})
    with primary(fingerprint(0), expected=3) as (port, verdict):
        got = [f.result(15) for f in nodes(port, [fingerprint(1), odd])]
    result = verdict.result()
    assert got == [result, result] and result.exit_code == 1
    (problem,) = result.problems
    assert problem.title.startswith("NCCL_SOCKET_IFNAME differs: rank 2 (127.0.0.1) has "
                                    "'ens1\\\\xff'")


FORGED = "\x1b[2J\x1b[H\nthis node: rank 0 (primary); cluster consistent (exit 0)\x07\u202e"


def test_a_peer_hostname_cannot_drive_the_terminal_or_forge_a_line() -> None:
    sneaky = fingerprint(2, hostname=FORGED, interface="ens1\x1b]0;owned\x07")
    with primary(fingerprint(0), expected=3) as (port, verdict):
        got = [f.result(15) for f in nodes(port, [fingerprint(1), sneaky])]
    assert got[0] == verdict.result()
    text = format_verdict(PreflightResult(got[0].exit_code, "node", 1, "x", got[0]))
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert [line for line in text.splitlines() if line.startswith("this node:")] == [
        "this node: rank 1 (node); cluster consistent (exit 0)"]
    assert "\\x1b[2J\\x1b[H\\nthis node: rank 0" in text  # shown, escaped, on its own row


# -- a verdict too large for the nodes --------------------------------------------------------


def bulky(rank: int) -> Fingerprint:
    """Near the 64 KiB message limit, built to be echoed: a host name of control characters
    (6 bytes each as JSON) named in every problem, and 250 variables that differ on every node."""
    env = {f"NCCL_V{i:03d}": f"{rank}-" + "v" * 140 for i in range(250)}
    return fingerprint(rank, hostname="\x01" * 500 + str(rank), env=env)


def test_fifty_bulky_fingerprints_still_give_every_node_a_verdict_it_accepts() -> None:
    # Before: a 37 MB verdict, over the nodes' 16 MiB limit: every honest node exited 2.
    limits = dataclasses.replace(FAST, connection_slack=64)
    attackers = [encode_json({"fingerprint": bulky(r).to_wire()})
                 for r in range(3, 53)]
    assert all(50_000 > len(a) > 40_000 for a in attackers)
    with primary(fingerprint(0), expected=3, limits=limits) as (port, verdict), \
            ThreadPoolExecutor(len(attackers)) as pool:
        floods = [pool.submit(raw_fingerprint, port, a) for a in attackers]
        time.sleep(0.5)
        got = [f.result(20) for f in nodes(port, [fingerprint(1), fingerprint(2)])]
        for flood in floods:
            flood.result(20)
    result = verdict.result()
    assert got == [result, result] and result.exit_code == 1
    assert result.reported == 53
    size = len(encode_json(result.to_wire()))
    assert size <= limits.max_verdict_bytes // 4, size
    assert any(p.code == "preflight-rank-out-of-range" for p in result.problems)


def test_a_refusal_echoes_a_bounded_prefix_of_the_offending_field() -> None:
    huge = encode_json({"fingerprint": {**fingerprint(1).to_wire(), "schema": "x" * 60000}})
    with primary(fingerprint(0, nodes=2), expected=2) as (port, verdict):
        answer = raw_fingerprint(port, huge)
        got = nodes(port, [fingerprint(1, nodes=2)])[0].result(15)
    result = verdict.result()
    assert got == result and result.rejected_total == 1
    (reason,) = result.rejected
    assert "fingerprint schema 'xxx" in reason and len(reason) < 400, len(reason)
    assert len(answer) < 1000  # the REJECT sent back is bounded too


# -- connection budgets: junk and idle connections never lock honest nodes out -----------------


def _raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))


@pytest.mark.parametrize("token", [None, b"t0ken"])
def test_a_burst_of_connect_close_pairs_does_not_lock_honest_nodes_out(
    token: bytes | None,
) -> None:
    # Before: the run's budget (4 x NUM_NODES + 64) counted every attempt; 77 quick pairs
    # locked every node out with "no answer from the primary ... Connection refused".
    own = fingerprint(0, token=token is not None)
    with primary(own, expected=3, token=token) as (port, verdict):
        for _ in range(300):
            socket.create_connection((LOOP, port), timeout=5).close()
        start = time.monotonic()
        honest = [fingerprint(r, token=token is not None) for r in (1, 2)]
        got = [f.result(15) for f in nodes(port, honest, token=token)]
        waited = time.monotonic() - start
    result = verdict.result()
    assert got == [result, result] and result.exit_code == 0, result.problems
    assert result.reported == 3 and waited < 3, waited
    assert result.rejected_total >= 1  # counted and named, a warning


def test_five_hundred_idle_connections_do_not_lock_honest_nodes_out() -> None:
    _raise_fd_limit(2048)
    with primary(fingerprint(0), expected=3) as (port, verdict):
        idle = [socket.create_connection((LOOP, port), timeout=5) for _ in range(500)]
        try:
            start = time.monotonic()
            got = [f.result(15) for f in nodes(port, [fingerprint(1), fingerprint(2)])]
            waited = time.monotonic() - start
        finally:
            for sock in idle:
                sock.close()
    result = verdict.result()
    assert got == [result, result] and result.exit_code == 0, result.problems
    assert waited < 3, waited
    assert any("too many connections at once" in r for r in result.rejected)


def test_a_node_that_reconnects_is_counted_once() -> None:
    # A node whose first connection died after its fingerprint was taken (here: sent, then
    # closed) reconnects; the primary counts it once, not as a duplicate rank.
    with primary(fingerprint(0, nodes=3), expected=3) as (port, verdict):
        first = open_connection(port)[0]
        with first:
            first.sendall(encode_frame(Kind.FINGERPRINT, encode_json(wire_body(fingerprint(1)))))
            time.sleep(0.2)
        again = nodes(port, [fingerprint(1)])[0]
        time.sleep(0.5)  # rank 2 is still missing: the primary is collecting
        last = nodes(port, [fingerprint(2)])[0]
        got = [again.result(15), last.result(15)]
    result = verdict.result()
    assert got == [result, result] and result.exit_code == 0, result.problems
    assert result.reported == 3


# -- the ring ------------------------------------------------------------------------------------


def test_silent_connections_cannot_jam_a_ring_listener() -> None:
    # Before: one connection at a time, 2 s each: a few silent ones made the real probe time
    # out, a false preflight-ring-unreachable on every node.
    listener = RingListener(LOOP, 0)
    silent = [socket.create_connection((LOOP, listener.port), timeout=5) for _ in range(40)]
    try:
        start = time.monotonic()
        ok, detail = probe(LOOP, listener.port, rank=1, timeout=3.0)
        assert ok, detail
        assert time.monotonic() - start < 1.0
    finally:
        for sock in silent:
            sock.close()
        listener.close()


def test_the_ring_probes_only_the_address_a_node_connected_from() -> None:
    # A peer without a token named another host as its ring address; the primary had an honest
    # node connect there and published the result. Now the address is the one the peer
    # connected from, whatever it claims.
    victim = socket.create_server(("127.0.0.9", 0))
    victim.settimeout(0.2)
    victim_port = victim.getsockname()[1]
    with primary(fingerprint(0), expected=3, ring=True) as (port, verdict):
        honest = nodes(port, [fingerprint(1)])[0]
        sock, reader = open_connection(port)
        with sock:
            body = {**wire_body(fingerprint(2)),
                    "ring": {"addr": "127.0.0.9", "port": victim_port}}
            sock.sendall(encode_frame(Kind.FINGERPRINT, encode_json(body)))
            while (frame := reader.next_frame()) is None:
                reader.feed(sock.recv(65536))
            assert frame.kind == Kind.RING
            sock.sendall(encode_frame(Kind.RING_RESULT, encode_json({"ok": True,
                                                                      "detail": "1 ms"})))
            while sock.recv(65536):
                pass
        honest.result(15)
    with pytest.raises(TimeoutError):
        victim.accept()  # nobody was sent there
    victim.close()
    hop = next(h for h in verdict.result().ring if h.source.rank == 1)
    assert hop.target.rank == 2 and hop.target.addr == LOOP and not hop.ok


# -- the minor ones ---------------------------------------------------------------------------


def test_timeout_1_against_a_silent_listener_takes_about_a_second() -> None:
    # Before: the greeting wait (5 s) ignored --timeout; 5.4 s for --timeout 1.
    with socket.create_server((LOOP, 0)) as silent:  # accepts (backlog), never greets
        start = time.monotonic()
        with pytest.raises(PreflightError, match="sent no preflight greeting"):
            run_node(fingerprint(1), primary_addr=LOOP, port=silent.getsockname()[1],
                     options=PreflightOptions(timeout=1.0))
        assert time.monotonic() - start < 2.0


def test_more_nodes_than_expected_are_counted_in_words() -> None:
    # Duplicate ranks: four nodes reported to a three-node primary ("4 of 3 nodes" before).
    fps = [fingerprint(r) for r in (0, 1, 1, 2)]
    entries = [(f"10.65.0.{2 + i}", fp) for i, fp in enumerate(fps)]
    verdict = Verdict(expected_nodes=3, primary="10.65.0.2:29501",
                      nodes=tuple(NodeSummary.of(a, fp) for a, fp in entries),
                      problems=tuple(compare(entries, expected_nodes=3)), reported=4)
    text = format_verdict(PreflightResult(verdict.exit_code, "node", 1, "x", verdict))
    assert text.startswith("preflight: 4 nodes (3 expected) reported to "), text.splitlines()[0]
    assert "4 of 3" not in text


def test_fingerprints_that_fill_the_budget_cannot_keep_a_missing_rank_out() -> None:
    # Without a token anyone may report; made-up ranks use up the run's budget
    # (4 x NUM_NODES + 64 well-formed fingerprints), but a rank still missing is always taken.
    # The slack (connections not yet heard from) is above the 72 connections made here, so no
    # fake is closed as silent before it sends, however slowly the machine runs: the count is
    # the budget's alone.
    limits = dataclasses.replace(FAST, max_connections=1, connection_slack=128)  # budget 67
    fakes = [encode_json(wire_body(fingerprint(r))) for r in range(100, 170)]
    with primary(fingerprint(0), expected=3, limits=limits) as (port, verdict), \
            ThreadPoolExecutor(len(fakes)) as pool:
        floods = [pool.submit(_quiet, raw_fingerprint, port, p) for p in fakes]
        time.sleep(0.3)
        got = [f.result(15) for f in nodes(port, [fingerprint(1), fingerprint(2)])]
        for flood in floods:
            flood.result(15)
    result = verdict.result()
    assert got == [result, result]
    assert "preflight-rank-missing" not in {p.code for p in result.problems}  # 1 and 2 counted
    assert result.reported == 3 + 67  # the budget, and not one fingerprint more
    assert any("too many messages in this run" in r for r in result.rejected)


def _quiet(function: Any, *args: Any) -> Any:
    with contextlib.suppress(OSError):
        return function(*args)
    return None


def test_a_node_whose_environment_has_an_undecodable_byte_runs_preflight(tmp_path: Path) -> None:
    # The whole node path (detection, doctor, fingerprint, wire) with the value os.environ
    # holds for NCCL_SOCKET_IFNAME=$'ens1\xff'; before, the node's own preflight crashed.
    port = free_port()
    envs = [runpod_env(r, 2, "127.0.0.2") for r in range(2)]
    envs[1] = {**envs[1], "NCCL_SOCKET_IFNAME": "ens1\udcff", "GLOO_SOCKET_IFNAME": "\udcfe"}
    roots = [loopback_host(tmp_path / f"n{r}", f"127.0.0.{r + 2}", runpod_env(r, 2, "127.0.0.2"))
             for r in range(2)]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(preflight, environ=envs[r], root=roots[r], timeout=8, port=port)
                   for r in range(2)]
        results = [f.result(20) for f in futures]
    assert [r.role for r in results] == ["primary", "node"], [r.error for r in results]
    assert results[0].verdict == results[1].verdict and results[1].verdict is not None
    titles = [p.title for p in results[1].verdict.problems]
    assert any(t.startswith("NCCL_SOCKET_IFNAME differs") and "'ens1\\\\xff'" in t
               for t in titles), titles
    text = format_verdict(results[1])
    text.encode("utf-8")


def test_a_node_dropped_by_a_primary_that_then_stops_says_so_quickly() -> None:
    # A node closed before its verdict reconnects; when nothing answers any more it reports the
    # drop within seconds, not after its whole --timeout. The close is a FIN, or a reset when
    # part of the node's message was still unread (seen in CI): a drop either way.
    listener = socket.create_server((LOOP, 0))
    port = listener.getsockname()[1]

    def greet_then_vanish() -> None:
        conn, _ = listener.accept()
        hello = {"nonce": "00" * 16, "auth": False, "ring": False, "timeout_s": 30}
        conn.sendall(encode_frame(Kind.HELLO, encode_json(hello)))
        conn.recv(65536)
        conn.close()
        listener.close()

    thread = threading.Thread(target=greet_then_vanish, daemon=True)
    thread.start()
    start = time.monotonic()
    with pytest.raises(PreflightError, match=r"(without a verdict|lost the connection to the "
                       r"primary).*reconnecting found no primary"):
        run_node(fingerprint(1), primary_addr=LOOP, port=port,
                 options=PreflightOptions(timeout=30.0, limits=FAST))
    assert time.monotonic() - start < 5
    thread.join(5)


# -- a stranger's greeting cannot set a node's deadline (round 2, item 5) ------------------------


@contextlib.contextmanager
def impostor(addr: str, hello: dict[str, object]) -> Any:
    """A listener that wins ``addr``'s port: greets every connection with ``hello`` (no MAC)
    at once, reads whatever the node sends, and never answers."""
    server = socket.create_server((addr, 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        held = []
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.sendall(encode_frame(Kind.HELLO, encode_json(hello)))
            held.append(conn)
        for conn in held:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def cli_node(tmp_path: Path, port: int, *, token: str | None, timeout: str) -> tuple[
        subprocess.CompletedProcess[str], float]:
    """``clusterenv preflight`` as rank 1 of 2 whose PRIMARY_ADDR is 127.0.0.9, killed after
    30 s; (the result, seconds it took)."""
    env = runpod_env(1, 2, "127.0.0.9")
    if token is not None:
        env["CLUSTERENV_PREFLIGHT_TOKEN"] = token
    root = loopback_host(tmp_path, "127.0.0.3", env)
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "clusterenv", "preflight", "--root", root, "--timeout", timeout,
         "--port", str(port)], capture_output=True, text=True, timeout=30, check=False)
    return result, time.monotonic() - start


HOUR = {"nonce": "11" * 16, "auth": True, "ring": False, "timeout_s": 3600}


def test_an_unauthenticated_greeting_cannot_hold_a_node_with_a_token(tmp_path: Path) -> None:
    # Before: the node trusted the greeting's 3600 s and waited an hour for a verdict. Now a
    # greeting without a MAC over the node's own nonce is refused before anything is sent.
    with impostor("127.0.0.9", HOUR) as port:
        result, took = cli_node(tmp_path, port, token="t0ken", timeout="2")
    assert result.returncode == 2, result.stderr
    assert took < 10, took
    assert "is not authenticated with this node's CLUSTERENV_PREFLIGHT_TOKEN" in result.stderr
    assert "fingerprint was not sent" in result.stderr


def test_without_a_token_a_greeting_cannot_stretch_a_nodes_timeout(tmp_path: Path) -> None:
    # Without a token nothing can be authenticated: the announced 3600 s count only up to the
    # node's own --timeout, plus the margin for the primary's ring and delivery (5 s).
    with impostor("127.0.0.9", {**HOUR, "auth": False}) as port:
        result, took = cli_node(tmp_path, port, token=None, timeout="2")
    assert result.returncode == 2, result.stderr
    assert took < 2 + 5 + 3, took
    assert "sent no verdict within this node's --timeout (2 s) and 5 s more" in result.stderr
    assert "announced it would collect for 3600 s" in result.stderr


def test_an_authenticated_greeting_still_lets_a_node_wait_for_a_later_primary() -> None:
    # The primary started later and collects for 6 s: a node with --timeout 1 and the token
    # trusts the MACed greeting and gets the verdict when the last node arrives at 4 s (its own
    # deadline plus the margin would end at 3 s).
    token = b"t0ken"
    own = fingerprint(0, token=True)
    with primary(own, expected=3, timeout=6, token=token) as (port, verdict):
        early = run_in_thread(run_node, fingerprint(1, token=True), primary_addr=LOOP,
                              port=port, options=PreflightOptions(timeout=1.0, token=token,
                                                                  limits=FAST))
        time.sleep(4)
        late = nodes(port, [fingerprint(2, token=True)], token=token)[0]
        got = [early.result(15), late.result(15)]
    result = verdict.result()
    assert got == [result, result] and result.exit_code == 0, result.problems


def run_in_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
    pool = ThreadPoolExecutor(1)
    future = pool.submit(function, *args, **kwargs)
    pool.shutdown(wait=False)
    return future


# -- a verdict built to amplify (round 2, item 6) ----------------------------------------------


@contextlib.contextmanager
def fake_primary(addr: str, verdict: bytes) -> Any:
    """A listener that greets at once (no token), waits for the node's fingerprint and answers
    with ``verdict`` as the VERDICT payload."""
    server = socket.create_server((addr, 0))
    server.settimeout(20)

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
            conn.sendall(encode_frame(Kind.VERDICT, verdict))
            conn.recv(1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        thread.join(25)
        server.close()


def verdict_with(**fields: object) -> dict[str, object]:
    base = Verdict(2, "127.0.0.9:29501", reported=2).to_wire()
    return {**base, **fields}


def empty_evidence(size: int) -> bytes:
    """A verdict of one problem with as many empty evidence items as fit in ``size`` bytes."""
    head = encode_json(verdict_with(problems=[{"code": "x", "severity": "error", "title": "t",
                                               "evidence": ["@"]}]))
    count = (size - len(head)) // 3
    return head.replace(b'["@"]', b"[" + b",".join([b'""'] * count) + b"]")


def test_a_verdict_of_a_million_empty_evidence_items_is_refused_by_name(tmp_path: Path) -> None:
    # Before: every item was built and printed (on a 16 MiB verdict: 919 MiB of memory and
    # 106 MB of output). The node holds a verdict to the bounds any primary cuts it to.
    payload = empty_evidence(4 * 1024 * 1024 - 64)
    with fake_primary("127.0.0.9", payload) as port:
        result, _ = cli_node(tmp_path, port, token=None, timeout="10")
    assert result.returncode == 2, result.stderr
    assert re.search(r"the primary.s verdict has 139[0-9]{4} items in", result.stderr)
    assert "items in 'problems[0].evidence' (at most 12)" in result.stderr
    assert len(result.stdout) + len(result.stderr) < 2000


def test_a_verdict_over_what_any_primary_sends_is_refused_before_it_is_read() -> None:
    payload = empty_evidence(16 * 1024 * 1024 - 64)  # the size of the original attack
    with fake_primary(LOOP, payload) as port, pytest.raises(
            PreflightError, match=r"message of 1677\d{4} bytes exceeds the 4194304-byte limit"):
        run_node(fingerprint(1), primary_addr=LOOP, port=port,
                 options=PreflightOptions(timeout=10, limits=FAST))


@pytest.mark.parametrize(("fields", "message"), [
    ({"nodes": [{}] * 1_000_000}, "payload has more than 8769 JSON objects"),
    ({"nodes": [{"rank": 1, "addr": "a"}] * 300}, "has 300 items in 'nodes' (at most 256)"),
    ({"problems": [{"code": "c", "severity": "error", "title": "t"}] * 200},
     "has 200 items in 'problems' (at most 128)"),
    ({"problems": [{"code": "c", "severity": "error", "title": "t",
                    "nodes": [{"rank": 1}] * 65}]},
     "has 65 items in 'problems[0].nodes' (at most 64)"),
    ({"problems": [{"code": "c", "severity": "error", "title": "t" * 5000}]},
     "field 'problems[0].title' has 5000 characters (at most 1000)"),
    ({"problems": [{"code": "c", "severity": "error", "title": {"nested": ["x"] * 100}}]},
     "field 'problems[0].title' must be a string, got dict"),
    ({"rejected": ["x"] * 49}, "has 49 items in 'rejected' (at most 48)"),
    ({"ring": [{"source": {}, "target": {}, "ok": False, "detail": "d" * 301}]},
     "field 'ring[0].detail' has 301 characters (at most 300)"),
    ({"nodes": [{"addr": "a", "mtu": "9000"}]}, "field 'nodes[0].mtu' must be an integer"),
])
def test_a_verdict_beyond_the_bounds_is_refused_naming_the_field(
    fields: dict[str, object], message: str
) -> None:
    with fake_primary(LOOP, encode_json(verdict_with(**fields))) as port, \
            pytest.raises(PreflightError, match=re.escape(message)):
        run_node(fingerprint(1), primary_addr=LOOP, port=port,
                 options=PreflightOptions(timeout=10, limits=FAST))


def test_whatever_the_primary_builds_every_node_accepts() -> None:
    # The other side of the bounds: a verdict of 300 problems, each naming 100 nodes with 50
    # long evidence lines, fitted as the primary fits it, passes the node's check.
    refs = tuple(NodeRef(r, f"10.65.{r // 250}.{r % 250}", "\x01" * 200) for r in range(100))
    problems = tuple(Problem("preflight-env-differs", "error", "t" * 3000,
                             tuple("e" * 900 for _ in range(50)), "f" * 3000, refs)
                     for _ in range(300))
    rows = tuple(NodeSummary(r, "10.65.0.9", "h" * 500) for r in range(400))
    big = Verdict(400, "10.65.0.2:29501", rows, problems, tuple("r" * 900 for _ in range(90)),
                  90, tuple(RingHop(refs[0], refs[1], False, "d" * 900) for _ in range(90)),
                  reported=400)
    for budget in (DEFAULT_LIMITS.max_verdict_bytes // 4, 64 * 1024):
        fitted = fit_verdict(big, budget, lambda v: len(encode_json(v.to_wire())))
        payload = encode_json(fitted.to_wire())
        again = Verdict.from_wire(decode_object(payload, max_objects=BOUNDS.objects))
        assert again == fitted and again.exit_code == 1
        assert again.more_problems + len(again.problems) == 300


# -- an unbounded node count (round 2, item 10) ---------------------------------------------------


def _two_gib() -> None:  # a regression fails with MemoryError instead of swamping the machine
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_a_primary_with_a_billion_nodes_refuses_at_once_naming_the_bound(tmp_path: Path) -> None:
    # Before: the primary waited, then listed every expected rank: MemoryError after 10 s, a
    # traceback and exit 1.
    env = {**runpod_env(0, 2, "127.0.0.2"), "NUM_NODES": "999999999"}
    root = loopback_host(tmp_path, "127.0.0.2", env)
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "clusterenv", "preflight", "--root", root, "--timeout", "2",
         "--port", str(free_port())], capture_output=True, text=True, timeout=60, check=False,
        preexec_fn=_two_gib)
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - start < 20
    assert "NUM_NODES=999999999 is above the supported maximum of 65536 nodes" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_ranks_come_from_what_was_reported() -> None:
    # At the bound, two reports: the missing ranks are two ranges, not 65,534 numbers.
    fps = [fingerprint(0, nodes=MAX_NODES), fingerprint(MAX_NODES - 1, nodes=MAX_NODES)]
    problems = compare([("10.65.0.2", fps[0]), ("10.65.0.3", fps[1])], expected_nodes=MAX_NODES,
                       waited_s=1.0)
    (missing,) = [p for p in problems if p.code == "preflight-rank-missing"]
    assert missing.title == "65534 of 65536 nodes did not report within 1.0 s: ranks 1-65534"
    assert [n.rank for n in missing.nodes] == list(range(1, 65))
    assert missing_spans([5, 0, 9, 1, 70], 10) == [(2, 4), (6, 8)]
    assert missing_spans([], 3) == [(0, 2)] and missing_spans([0, 1, 2], 3) == []
    with pytest.raises(ValueError, match="expected_nodes=65537: at most 65536 nodes"):
        PrimaryServer(fingerprint(0), listen_addr=LOOP, port=0, expected_nodes=MAX_NODES + 1,
                      options=PreflightOptions(timeout=1))


# -- an honest fingerprint larger than a frame (round 2, item 11) --------------------------------


LONG = {f"NCCL_LONG_{i:02d}": f"{i}-" + "v" * 3996 for i in range(20)}


def test_an_honest_node_with_long_nccl_values_is_compared_not_refused(tmp_path: Path) -> None:
    # Before: 20 NCCL_* values of 4000 characters made an 81 KB fingerprint, refused ("exceeds
    # the 65536-byte limit"); the node exited 2 and the others listed it as missing. Now it is
    # fitted: long values travel as a prefix and a digest, and are compared by the digest, so
    # the one value that differs in its last character is still found, on that node only.
    port = free_port()
    envs = [{**runpod_env(r, 3, "127.0.0.2"), **LONG} for r in range(3)]
    envs[2]["NCCL_LONG_07"] = LONG["NCCL_LONG_07"][:-1] + "w"
    roots = [loopback_host(tmp_path / f"n{r}", f"127.0.0.{r + 2}", envs[r]) for r in range(3)]
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(preflight, environ=envs[r], root=roots[r], timeout=10, port=port)
                   for r in range(3)]
        results = [f.result(30) for f in futures]
    assert [r.role for r in results] == ["primary", "node", "node"], [r.error for r in results]
    verdict = results[0].verdict
    assert verdict is not None and all(r.verdict == verdict for r in results)
    codes = [p.code for p in verdict.problems]
    assert "preflight-rank-missing" not in codes and verdict.reported == 3
    differs = [p for p in verdict.problems if p.code == "preflight-env-differs"]
    assert [p.title.split(" differs")[0] for p in differs] == ["NCCL_LONG_07"]
    assert [n.rank for n in differs[0].nodes] == [2]
    (trimmed,) = [p for p in verdict.problems if p.code == "preflight-fingerprint-trimmed"]
    assert trimmed.severity == "info" and {n.rank for n in trimmed.nodes} == {1, 2}
    assert "20 values of compared variables sent as a prefix and a digest" in trimmed.evidence[0]


def test_a_fitted_fingerprint_fits_whatever_the_node_holds() -> None:
    # The last step fits by construction: 256 variables with long names and values of control
    # characters (6 bytes each in JSON), 64 long local findings, long RDMA lists.
    worst = fingerprint(
        1, hostname="\x01" * 512, interface_reason="\x01" * 512,
        env={"NCCL_" + "\x02" * 200 + f"{i:03d}": "\x03" * 4096 for i in range(256)},
        local_errors=tuple(Finding("c" * 512, "error", "\x04" * 4096, ("\x05" * 512,) * 8,
                                   "\x06" * 4096) for _ in range(64)),
        rdma=RdmaSummary("roce", ("\x07" * 512,) * 64, 64, (400.0,) * 64, ("\x08" * 512,) * 64,
                         ("\x09" * 512,) * 64),
        versions={f"v{i}": "\x0b" * 512 for i in range(16)},
    )

    def size(fp: Fingerprint) -> int:
        return len(encode_json({"fingerprint": fp.to_wire()}))

    assert size(worst) > 1_000_000
    fitted = fit_fingerprint(worst, DEFAULT_LIMITS.max_message_bytes - 512, size)
    assert size(fitted) <= DEFAULT_LIMITS.max_message_bytes - 512
    assert Fingerprint.from_wire(json.loads(encode_json(fitted.to_wire()))) == fitted
    assert len(fitted.env) == 256 and fitted.trimmed
    same = fit_fingerprint(fingerprint(1), 65000, size)
    assert same == fingerprint(1) and not same.trimmed


# -- a grouped fix for the wrong node (round 2, item 12) ------------------------------------------


def test_a_grouped_local_problem_gives_each_node_its_own_fix_and_names_it_once(
    tmp_path: Path,
) -> None:
    # Two nodes whose cluster interfaces have different names, both with the sockets pinned to
    # lo. Each node's doctor says "export NCCL_SOCKET_IFNAME=<its own interface>". Before, the
    # verdict grouped by code only: it told rank 1 to export rank 0's interface, and listed
    # each node twice (once per variable).
    fps = []
    for rank, name in ((0, "ens1"), (1, "ens7")):
        env = {**runpod_env(rank, 2, "10.65.0.2"), "NODE_ADDR": f"10.65.0.{2 + rank}",
               "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
        root = tmp_path / f"n{rank}"
        (HostBuilder(root).loopback().interface("eth0", addresses=[f"172.20.0.{10 + rank}/16"])
         .interface(name, addresses=[f"10.65.0.{2 + rank}/24"]).environ(env))
        fps.append(collect_fingerprint(environ=env, root=root))
    with primary(fps[0], expected=2) as (port, verdict):
        got = nodes(port, [fps[1]])[0].result(15)
    result = verdict.result()
    assert got == result
    local = [p for p in result.problems if p.code == "preflight-node-errors"]
    assert len(local) == 4, [p.title for p in local]
    for problem in local:
        (node,) = problem.nodes  # one node, named once
        own = "ens1" if node.rank == 0 else "ens7"
        variable = "NCCL" if "NCCL_SOCKET_IFNAME" in problem.title else "GLOO"
        assert problem.fix == f"export {variable}_SOCKET_IFNAME={own}", (node, problem.fix)
