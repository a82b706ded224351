"""``hang --collect`` over loopback: the real primary, real nodes and hostile raw sockets.

The inputs are real torch dumps (``tests/hang_dumps.py``), spread over three "nodes" (one rank
each); the answer every node computes must name what the ranks did, and be the same on every
node. The transport is preflight's (framing, limits, token), so the attacks are preflight's
too: a wrong token, garbage, a report too big or malformed.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from clusterenv.hang.collect import collect_on_node, serve_hang_primary
from clusterenv.hang.dumps import read_inputs
from clusterenv.hang.messages import Collected, NodeReport
from clusterenv.preflight import PreflightError, PreflightOptions
from clusterenv.preflight.wire import FrameReader, Kind, Limits, encode_frame, encode_json
from tests.hang_dumps import BEHIND, WORLD, Generated

LOOP = "127.0.0.1"
FAST = Limits(peer_timeout=0.5, send_timeout=2.0)


def reports(fr_dumps: Generated) -> list[NodeReport]:
    """One node per rank, each with its own rank's dump."""
    dumps = read_inputs([fr_dumps.stall]).dumps
    return [NodeReport(rank, f"node-{rank}", tuple(d for d in dumps if d.rank == rank),
                       layout=(WORLD, 1)) for rank in range(WORLD)]


@contextmanager
def primary(own: NodeReport, *, nodes: int = WORLD, timeout: float = 10.0,
            token: bytes | None = None) -> Iterator[tuple[int, list[Collected]]]:
    ready = threading.Event()
    port: list[int] = []
    result: list[Collected] = []

    def listening(bound: int) -> None:
        port.append(bound)
        ready.set()

    def run() -> None:
        result.append(serve_hang_primary(
            own, listen_addr=LOOP, port=0, expected_nodes=nodes,
            options=PreflightOptions(timeout=timeout, token=token, limits=FAST),
            on_listening=listening))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield port[0], result
    thread.join(30)
    assert result, "the primary did not finish"


def send(report: NodeReport, port: int, *, token: bytes | None = None,
         timeout: float = 10.0) -> Collected:
    return collect_on_node(report, primary_addr=LOOP, port=port,
                           options=PreflightOptions(timeout=timeout, token=token, limits=FAST))


def raw(port: int, frame: bytes, *, open_first: bool = True) -> bytes:
    """Connect, open as a node does (``OPEN``, then the primary's ``HELLO``) unless
    ``open_first`` is False, send ``frame``, return everything the primary answers."""
    with socket.create_connection((LOOP, port), timeout=10) as sock:
        chunks = []
        try:
            if open_first:
                sock.sendall(encode_frame(Kind.OPEN, encode_json({"nonce": "00" * 16})))
                reader = FrameReader(max_payload=1 << 24, expect={Kind.HELLO})
                while reader.next_frame() is None:
                    reader.feed(sock.recv(4096))
            sock.sendall(frame)
            while data := sock.recv(65536):
                chunks.append(data)
        except ConnectionResetError:  # refused while still sending: the reset drops the reply
            pass
        return b"".join(chunks)


def test_every_node_gets_the_same_answer_naming_the_rank_that_stopped(
    fr_dumps: Generated,
) -> None:
    own, *others = reports(fr_dumps)
    with primary(own) as (port, result), ThreadPoolExecutor(len(others)) as pool:
        answers = list(pool.map(lambda r: send(r, port), others))
    reports_seen = [c.report() for c in (*answers, result[0])]
    assert len({(r.title, r.verdict) for r in reports_seen}) == 1
    report = reports_seen[0]
    default = next(s for s in report.stalls if s.desc == "default_pg")
    assert default.behind == (BEHIND,)
    assert set(default.waiting) == {r for r, calls in fr_dumps.entered.items()
                                    if any(g == "default" for g, _, _ in calls)}
    node = report.node_of(BEHIND)
    assert node is not None and (node.node_rank, node.host) == (BEHIND, f"node-{BEHIND}")
    assert node.reported is True and node.addr == LOOP


def test_a_node_that_never_reports_is_named_and_its_ranks_are_missing(
    fr_dumps: Generated,
) -> None:
    own, first, _ = reports(fr_dumps)
    with primary(own, timeout=2.0) as (port, result):
        answer = send(first, port)
    report = answer.report()
    assert report.title == result[0].report().title
    default = next(s for s in report.stalls if s.desc == "default_pg")
    assert default.missing == (BEHIND,)
    silent = [n for n in report.nodes if n.reported is False]
    assert [n.node_rank for n in silent] == [BEHIND]
    assert any(f"node(s) {BEHIND} did not report" in note for note in report.notes)


def test_a_node_with_another_token_is_refused_and_the_others_still_answer(
    fr_dumps: Generated,
) -> None:
    own, honest, impostor = reports(fr_dumps)
    with primary(own, timeout=3.0, token=b"secret") as (port, result), \
            ThreadPoolExecutor(2) as pool:
        good = pool.submit(send, honest, port, token=b"secret")
        bad = pool.submit(send, impostor, port, token=b"other")
        answer = good.result()
        # The impostor checks the greeting first: the primary's MAC is not over its token, so
        # it sends nothing and says why.
        with pytest.raises(PreflightError, match=r"not authenticated with this node's "
                           r"CLUSTERENV_PREFLIGHT_TOKEN: .* report was not sent"):
            bad.result()
    assert answer.report().title == result[0].report().title
    assert answer.report().ranks_read == (0, 1)  # the impostor's dump never reached anybody
    assert any("the node refused this primary" in r for r in result[0].rejected)
    # A node with a token never sends its dumps to a primary without one.
    with primary(own, nodes=2, timeout=2.0) as (port, _), \
            pytest.raises(PreflightError, match="does not use CLUSTERENV_PREFLIGHT_TOKEN"):
        send(honest, port, token=b"secret", timeout=2.0)


@pytest.mark.parametrize(("frame", "reason", "open_first"), [
    (b"GET / HTTP/1.1\r\n\r\n", "not a clusterenv preflight message", False),
    (encode_frame(Kind.HANG_REPORT, b"{}"), "unexpected HANG_REPORT message (expected OPEN)",
     False),
    (encode_frame(Kind.HANG_REPORT, b"[1, 2]"), "payload must be a JSON object", True),
    (encode_frame(Kind.HANG_REPORT, encode_json({"report": {
        "node_rank": 1, "dumps": [{"rank": "one"}]}})), "dumps[0].rank: expected int", True),
    (encode_frame(Kind.HANG_REPORT, b"x" * 70_000), "exceeds the 65536-byte limit", True),
    (encode_frame(Kind.FINGERPRINT, b"{}"), "unexpected FINGERPRINT message", True),
])
def test_hostile_messages_are_refused_with_the_reason_and_honest_nodes_answered(
    fr_dumps: Generated, frame: bytes, reason: str, open_first: bool,
) -> None:
    own, honest, _ = reports(fr_dumps)
    with primary(own, nodes=2, timeout=3.0) as (port, result):
        reply = raw(port, frame, open_first=open_first)
        answer = send(honest, port)
    assert not reply or reason in reply.decode("utf-8", "replace")
    assert any(reason in r for r in result[0].rejected), result[0].rejected
    assert answer.report().verdict == "hang"


def test_a_report_over_the_message_limit_is_trimmed_by_its_sender(fr_dumps: Generated) -> None:
    own, honest, _ = reports(fr_dumps)
    bulky = replace(honest, notes=tuple("n" * 900 for _ in range(60)))
    fitted = bulky.fitted(4096)
    assert len(encode_json(fitted.to_wire())) <= 4096
    assert "summary trimmed to fit the message limit" in fitted.notes
    with primary(own, nodes=2, timeout=3.0) as (port, _):
        answer = send(bulky, port)
    assert answer.report().ranks_read == (0, 1)


def test_what_the_primary_sends_is_checked_like_what_it_receives() -> None:
    good: dict[str, Any] = {"reports": [], "addresses": {"0": LOOP}, "expected_nodes": 2}
    assert Collected.from_wire(good).expected_nodes == 2
    for bad in ({**good, "expected_nodes": "2"}, {**good, "addresses": {"x": LOOP}},
                {**good, "reports": [{"node_rank": -1}]}, [1]):
        with pytest.raises(Exception, match=r"hang (verdict|report)"):
            Collected.from_wire(bad)
