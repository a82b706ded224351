"""Attacks on preflight over loopback: the real primary and real nodes, hostile raw sockets.

Each test is one attack that broke a release: one packet that crashed the primary, a peer's host
name that drove every node's terminal, a burst of connections that locked honest nodes out, a
verdict too big for the nodes, a ring that probed where an attacker said. Each checks what the
honest nodes got (the verdict, the same on every node) and their exit codes.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

from clusterenv._cli.preflight import format_verdict
from clusterenv.preflight import Fingerprint, PreflightResult
from clusterenv.preflight.wire import (
    FrameReader,
    Kind,
    encode_frame,
    encode_json,
)
from tests.test_preflight import LOOP, fingerprint, nodes, primary


def raw_fingerprint(port: int, payload: bytes) -> bytes:
    """Connect, wait for HELLO, send ``payload`` as one FINGERPRINT frame, return the replies."""
    with socket.create_connection((LOOP, port), timeout=10) as sock:
        reader = FrameReader(max_payload=1 << 24, expect={Kind.HELLO})
        while reader.next_frame() is None:
            reader.feed(sock.recv(4096))
        sock.sendall(encode_frame(Kind.FINGERPRINT, payload))
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
        return b"".join(chunks)


def wire_body(fp: Fingerprint, **fields: object) -> dict[str, object]:
    return {"fingerprint": {**fp.to_wire(), **fields}, "nonce": "00" * 16}


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
