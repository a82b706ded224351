"""Arbitrary bytes in every field of the wire format and in snapshot files (hypothesis).

Wire: each example runs a real primary on loopback, one hostile peer whose fingerprint carries
the bytes in one field (raw in the JSON text, as ``\\u00XX`` escapes, or as lone-surrogate
escapes), and two honest nodes. Whatever the bytes, the primary finishes, both honest nodes get
its verdict, and the verdict stays within its size bound.

Snapshot: the bytes go into one file a verb reads (or an interface's name); ``show``,
``doctor`` and ``capture`` end with an exit code and never raise.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterenv.cli import main
from clusterenv.preflight.wire import encode_json
from tests.test_hostile_root import _snapshot
from tests.test_preflight import FAST, LOOP, fingerprint, nodes, primary
from tests.test_preflight_hostile import raw_fingerprint

MARK = "@@FIELD@@"


def _wire_paths() -> list[str]:
    fp = fingerprint(1).to_wire()
    paths = [f"fingerprint.{key}" for key in fp]
    paths += ["nonce", "ring.addr", "ring.port", "fingerprint.rdma.transport",
              "fingerprint.rdma.devices[]", "fingerprint.env:key", "fingerprint.env:value",
              "fingerprint.versions:value", "fingerprint.local_errors[].title",
              "fingerprint.local_errors[].code", "fingerprint.local_errors[].evidence[]"]
    return paths


def _place(body: dict[str, Any], path: str) -> None:
    """Put the marker string at ``path`` in ``body``."""
    fp = body["fingerprint"]
    if path == "nonce":
        body["nonce"] = MARK  # sent in the OPEN message
    elif path.startswith("ring."):
        body["ring"] = {"addr": LOOP, "port": 1, path.split(".")[1]: MARK}
    elif path == "fingerprint.rdma.transport":
        fp["rdma"] = {**fp["rdma"], "transport": MARK}
    elif path == "fingerprint.rdma.devices[]":
        fp["rdma"] = {**fp["rdma"], "devices": [MARK]}
    elif path == "fingerprint.env:key":
        fp["env"] = {**fp["env"], MARK: "x"}
    elif path == "fingerprint.env:value":
        fp["env"] = {**fp["env"], "NCCL_SOCKET_IFNAME": MARK}
    elif path == "fingerprint.versions:value":
        fp["versions"] = {**fp["versions"], "torch": MARK}
    elif path.startswith("fingerprint.local_errors[]."):
        field = path.rsplit(".", 1)[1]
        error: dict[str, Any] = {"code": "c", "title": "t", "evidence": [], "fix": ""}
        error[field.rstrip("[]")] = [MARK] if field.endswith("[]") else MARK
        fp["local_errors"] = [error]
    else:
        fp[path.split(".", 1)[1]] = MARK


def _encode(data: bytes, how: str) -> bytes:
    if how == "raw":  # whatever the bytes are, inside the quotes (often not JSON, or not UTF-8)
        return b'"' + data.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
    if how == "latin1":  # valid JSON: every byte a \u00XX character
        return json.dumps(data.decode("latin-1")).encode()
    # lone surrogates, as surrogateescape would make them from undecodable bytes
    return b'"' + b"".join(b"\\udc%02x" % b for b in data) + b'"'


def _attack(port: int, payload: bytes, opening: bytes | None) -> None:
    with contextlib.suppress(OSError):  # refused and reset: what a hostile peer may get
        raw_fingerprint(port, payload, opening=opening)


@given(path=st.sampled_from(_wire_paths()), data=st.binary(max_size=300),
       how=st.sampled_from(["raw", "latin1", "surrogates"]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_bytes_in_any_wire_field_leave_honest_nodes_their_verdict(
    path: str, data: bytes, how: str
) -> None:
    body: dict[str, Any] = {"fingerprint": fingerprint(7).to_wire()}
    _place(body, path)
    opening = None
    if "nonce" in body:  # the node's nonce travels in its OPEN message
        opening = encode_json({"nonce": body.pop("nonce")})
        opening = opening.replace(json.dumps(MARK).encode(), _encode(data, how))
    payload = encode_json(body).replace(json.dumps(MARK).encode(), _encode(data, how))
    with primary(fingerprint(0), expected=3, timeout=5) as (port, verdict):
        attack = threading.Thread(target=_attack, args=(port, payload, opening), daemon=True)
        attack.start()
        got = [f.result(15) for f in nodes(port, [fingerprint(1), fingerprint(2)])]
        attack.join(15)
    result = verdict.result()
    assert got == [result, result]
    assert len(encode_json(result.to_wire())) <= FAST.max_verdict_bytes // 4
    for text in (*(p.title for p in result.problems), *result.rejected):
        text.encode("utf-8")  # every string can be printed and sent again


# -- snapshot files ------------------------------------------------------------------------------

SNAPSHOT_FILES = [
    ".clusterenv/host.json", "etc/hosts", "etc/hostname", "etc/nccl.conf", "proc/net/route",
    "sys/class/net/ens1/mtu", "sys/class/net/ens1/operstate", "sys/class/net/ens1/address",
    "sys/class/net/ens1/type", "sys/class/net/ens1/speed",
    "sys/class/infiniband/mlx5_0/ports/1/state", "sys/class/infiniband/mlx5_0/ports/1/rate",
    "sys/class/infiniband/mlx5_0/ports/1/gids/3", "proc/driver/nvidia/version",
]


@given(where=st.sampled_from([*SNAPSHOT_FILES, "interface-name", "host.json:hostname",
                              "host.json:environ"]),
       data=st.binary(max_size=400))
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_any_bytes_in_a_snapshot_give_an_exit_code_never_a_traceback(
    tmp_path_factory: pytest.TempPathFactory, where: str, data: bytes,
    capsys: pytest.CaptureFixture[str],
) -> None:

    base = tmp_path_factory.mktemp("fuzz")
    root, _ = _snapshot(base)
    if where == "interface-name":
        name = os.fsencode("ens") + data.replace(b"/", b"").replace(b"\0", b"")[:12]
        if name not in (b".", b".."):
            os.rename(root / "sys/class/net/ens1", os.path.join(os.fsencode(root),
                                                                b"sys/class/net/" + name))
    elif where.startswith("host.json:"):
        host = json.loads((root / ".clusterenv/host.json").read_text())
        value = data.decode("utf-8", "surrogateescape")
        if where.endswith("hostname"):
            host["hostname"] = value
        else:
            host["environ"]["NCCL_SOCKET_IFNAME"] = value
        (root / ".clusterenv/host.json").write_bytes(
            json.dumps(host, ensure_ascii=True).encode())
    else:
        (root / where).write_bytes(data)
    for argv in (["show"], ["doctor"], ["show", "--json"],
                 ["capture", str(base / "out")]):
        code = main([*argv, "--root", str(root)])
        assert code in (0, 1, 2), (argv, code)
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    for line in out.out.splitlines():
        assert "\x1b[2J" not in line
