"""Preflight on loopback: the wire format, the limits, hostile peers, tokens, and the verdict.

The primary here is the real :class:`~clusterenv.preflight.PrimaryServer` on 127.0.0.1 (an
ephemeral port), the nodes are the real :func:`~clusterenv.preflight.run_node` in threads, and
hostile peers are raw sockets. The cross-node checks are exercised with synthetic fingerprints.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterenv.cli import main
from clusterenv.findings import Finding
from clusterenv.preflight import (
    Fingerprint,
    Limits,
    NodeRef,
    NodeSummary,
    PreflightError,
    PreflightOptions,
    PrimaryServer,
    Problem,
    RdmaSummary,
    RingHop,
    Verdict,
    collect_fingerprint,
    compare,
    default_port,
    preflight,
    run_node,
    serve_primary,
)
from clusterenv.preflight.compare import ranks_text
from clusterenv.preflight.fingerprint import (
    FINGERPRINT_SCHEMA,
    compared_environment,
    is_secret_name,
)
from clusterenv.preflight.wire import (
    HEADER,
    MAC_BYTES,
    MAGIC,
    PROTOCOL_VERSION,
    FrameReader,
    Kind,
    WireError,
    decode_object,
    encode_frame,
    encode_json,
    new_nonce,
    verify_mac,
)
from clusterenv.testing import HostBuilder

FAST = Limits(peer_timeout=0.5, send_timeout=2.0)
LOOP = "127.0.0.1"


def fingerprint(rank: int | None, nodes: int = 3, **changes: Any) -> Fingerprint:
    """A healthy node of a ``nodes``-node loopback cluster."""
    base = Fingerprint(
        rank=rank, num_nodes=nodes, num_trainers=2, node_addr=LOOP, primary_addr=LOOP,
        primary_port=29500, source="runpod", hostname=f"node-{rank}", interface="ens1",
        interface_reason="ens1 holds NODE_ADDR", mtu=1500,
        env={"NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1"},
        versions={"torch": "2.13.0", "python": "3.11.7"}, clusterenv="0.1.0",
    )
    return dataclasses.replace(base, **changes)


def entries(*fps: Fingerprint) -> list[tuple[str, Fingerprint]]:
    """(address, fingerprint) as the primary sees them: node i connects from 10.65.0.(2+i)."""
    out = []
    for i, fp in enumerate(fps):
        addr = f"10.65.0.{2 + i}"
        out.append((addr, dataclasses.replace(fp, node_addr=addr) if fp.node_addr == LOOP else fp))
    return out


def codes(problems: list[Problem] | tuple[Problem, ...]) -> list[str]:
    return [p.code for p in problems]


# -- the wire format ----------------------------------------------------------------------------


def test_frame_round_trip_and_header_layout() -> None:
    frame = encode_frame(Kind.FINGERPRINT, b'{"a":1}')
    assert frame[:4] == MAGIC and frame[4] == PROTOCOL_VERSION and frame[5] == Kind.FINGERPRINT
    assert struct.unpack("!I", frame[8:12])[0] == 7 and len(frame) == HEADER.size + 7
    reader = FrameReader(max_payload=100, expect={Kind.FINGERPRINT})
    reader.feed(frame)
    got = reader.next_frame()
    assert got is not None and got.payload == b'{"a":1}' and got.mac == b""
    assert reader.next_frame() is None and reader.buffered == 0


@given(st.lists(st.binary(max_size=200), min_size=1, max_size=4), st.data())
@settings(max_examples=60, deadline=None)
def test_frames_survive_any_split(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(Kind.VERDICT, p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader = FrameReader(max_payload=1000, expect={Kind.VERDICT})
    got = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        reader.feed(stream[start:end])
        while (frame := reader.next_frame()) is not None:
            got.append(frame.payload)
    assert got == payloads


@given(st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_any_bytes_give_frames_or_a_wire_error(data: bytes) -> None:
    reader = FrameReader(max_payload=64, expect={Kind.FINGERPRINT})
    message = ""
    try:
        reader.feed(data)
        while (frame := reader.next_frame()) is not None:
            assert len(frame.payload) <= 64
    except WireError as e:
        message = str(e)
    if not message:  # what is left can only be the start of one frame within the limit
        assert reader.buffered < HEADER.size + MAC_BYTES + 64


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GET / HTTP/1.1\r\n", "not a clusterenv preflight message (it starts with 'GET / HT')"),
        (b"\x16\x03\x01", "it starts with bytes 160301"),  # a TLS client hello
        (HEADER.pack(MAGIC, 9, Kind.FINGERPRINT, 0, 2), "protocol version 9"),
        (HEADER.pack(MAGIC, PROTOCOL_VERSION, Kind.VERDICT, 0, 2), "unexpected VERDICT message"),
        (HEADER.pack(MAGIC, PROTOCOL_VERSION, 77, 0, 2), "unexpected unknown kind 77 message"),
        (HEADER.pack(MAGIC, PROTOCOL_VERSION, Kind.FINGERPRINT, 5, 2), "MAC of 5 bytes"),
        (HEADER.pack(MAGIC, PROTOCOL_VERSION, Kind.FINGERPRINT, 0, 10**9),
         "message of 1000000000 bytes exceeds the 65536-byte limit"),
    ],
)
def test_reader_refuses_bad_headers_before_the_body(data: bytes, message: str) -> None:
    reader = FrameReader(max_payload=65536, expect={Kind.FINGERPRINT})
    with pytest.raises(WireError, match=message.replace("(", r"\(").replace(")", r"\)")):
        reader.feed(data)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (b'{"a": NaN}', "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"[" * 50000 + b"]" * 50000, "nested too deeply"),
    ],
)
def test_payloads_must_be_json_objects(payload: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message):
        decode_object(payload)


def test_mac_binds_token_nonce_kind_and_payload() -> None:
    token, nonce = b"s3cret-token", new_nonce()
    frame_bytes = encode_frame(Kind.FINGERPRINT, b"{}", token=token, nonce=nonce)
    reader = FrameReader(max_payload=100, expect={Kind.FINGERPRINT, Kind.RING_RESULT})
    reader.feed(frame_bytes)
    frame = reader.next_frame()
    assert frame is not None and len(frame.mac) == 32
    assert verify_mac(frame, token=token, nonce=nonce)
    assert not verify_mac(frame, token=b"other", nonce=nonce)
    assert not verify_mac(frame, token=token, nonce=new_nonce())  # a replay into another run
    assert not verify_mac(dataclasses.replace(frame, payload=b'{"x":1}'), token=token, nonce=nonce)
    assert not verify_mac(dataclasses.replace(frame, kind=Kind.RING_RESULT), token=token,
                          nonce=nonce)
    assert not verify_mac(dataclasses.replace(frame, mac=b""), token=token, nonce=nonce)


# -- fingerprints -------------------------------------------------------------------------------


def test_fingerprint_round_trips_through_json() -> None:
    fp = fingerprint(1, rdma=RdmaSummary("roce", ("mlx5_0",), 1, (400.0,), ("mlx5_1 port 1 DOWN",)),
                     local_errors=(Finding("x-y", "error", "bad", ("e",), "fix it"),), token=True)
    wire = json.loads(json.dumps(fp.to_wire()))
    assert wire["schema"] == FINGERPRINT_SCHEMA == 2
    assert Fingerprint.from_wire(wire) == fp


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": 1}, "fingerprint schema 1, the primary reads schema 2"),
        ({"rank": "1"}, "field 'rank' must be an integer"),
        ({"rank": True}, "field 'rank' must be an integer"),
        ({"rank": 2**40}, "field 'rank' must be an integer"),
        ({"hostname": "x" * 600}, "field 'hostname' is longer than 512"),
        ({"env": {"NCCL_X": 1}}, "field 'env' must map short names to strings"),
        ({"env": {f"NCCL_{i}": "1" for i in range(300)}}, "field 'env' has more than 256"),
        ({"rdma": []}, "field 'rdma' must be an object"),
        ({"rdma": {"ports": "8"}}, "field 'rdma.ports' must be an integer"),
        ({"rdma": {"rates_gbps": ["fast"]}}, "field 'rdma.rates_gbps' must hold numbers"),
        ({"local_errors": ["x"]}, "field 'local_errors' must be a list of objects"),
        ({"local_errors": [{}] * 100}, "field 'local_errors' has more than 64 items"),
        ({"token": "yes"}, "field 'token' must be true or false"),
    ],
)
def test_fingerprint_fields_are_checked_by_name(change: dict[str, Any], message: str) -> None:
    wire = {**fingerprint(1).to_wire(), **change}
    with pytest.raises(WireError, match=message.replace("(", r"\(")):
        Fingerprint.from_wire(wire)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(
    st.sampled_from(["schema", "rank", "num_nodes", "env", "rdma", "mtu", "versions", "token",
                     "local_errors", "hostname", "gpus", "trimmed"]), json_values))
@settings(max_examples=80, deadline=None)
def test_any_object_gives_a_fingerprint_or_a_wire_error(data: dict[str, Any]) -> None:
    data = {"schema": FINGERPRINT_SCHEMA, **data} if "schema" not in data else data
    try:
        fp = Fingerprint.from_wire(data)
    except WireError as e:
        message = str(e)
    else:  # what was accepted is exactly what the node would send again
        assert Fingerprint.from_wire(json.loads(json.dumps(fp.to_wire()))) == fp
        return
    assert message.startswith("fingerprint ")


def test_secrets_never_enter_a_fingerprint() -> None:
    env = {
        "NCCL_SOCKET_IFNAME": "ens1", "NCCL_IB_TOKEN": "x", "GLOO_API_KEY": "x",
        "TORCH_NCCL_SECRET_THING": "x", "NCCL_PASSWORD": "x", "CLUSTERENV_PREFLIGHT_TOKEN": "t",
        "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0,1", "TORCH_DISTRIBUTED_DEBUG": "INFO",
    }
    assert compared_environment(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_SOCKET_IFNAME": "ens1",
        "TORCH_DISTRIBUTED_DEBUG": "INFO",
    }
    assert is_secret_name("hf_token") and not is_secret_name("NCCL_IB_HCA")


def test_fingerprint_from_a_snapshot(tmp_path: Path) -> None:
    env = {"PRIMARY_ADDR": "10.65.0.2", "PRIMARY_PORT": "29500", "NODE_ADDR": "10.65.0.3",
           "NODE_RANK": "1", "NUM_NODES": "2", "NUM_TRAINERS": "8", "WORLD_SIZE": "16",
           "NCCL_SOCKET_IFNAME": "ens1", "CLUSTERENV_PREFLIGHT_TOKEN": "very-secret"}
    (HostBuilder(tmp_path).loopback().interface("ens1", addresses=["10.65.0.3/24"], mtu=9000)
     .environ(env))
    fp = collect_fingerprint(environ=env, root=tmp_path)
    assert (fp.rank, fp.num_nodes, fp.num_trainers) == (1, 2, 8)
    assert (fp.interface, fp.mtu, fp.node_addr) == ("ens1", 9000, "10.65.0.3")
    assert fp.gpus is None and fp.rdma.transport is None and fp.token is True
    assert fp.env == {"NCCL_SOCKET_IFNAME": "ens1"}
    assert "very-secret" not in json.dumps(fp.to_wire())


def test_fingerprint_of_an_invalid_environment_keeps_the_raw_rank(tmp_path: Path) -> None:
    env = {"PRIMARY_ADDR": "10.65.0.2", "PRIMARY_PORT": "29500", "NODE_ADDR": "10.65.0.5",
           "NODE_RANK": "7", "NUM_NODES": "2", "NUM_TRAINERS": "8"}
    HostBuilder(tmp_path).loopback().interface("ens1", addresses=["10.65.0.5/24"])
    fp = collect_fingerprint(environ=env, root=tmp_path)
    assert fp.rank == 7 and fp.num_nodes == 2
    assert "config-node-rank" in [f.code for f in fp.local_errors]


@pytest.mark.parametrize("rank", ["²", "١", "-1", "1e3", "9" * 12])
def test_fingerprint_of_a_rank_that_is_not_decimal_ascii_is_unknown(
    tmp_path: Path, rank: str
) -> None:
    env = {"PRIMARY_ADDR": "10.65.0.2", "PRIMARY_PORT": "29500", "NODE_ADDR": "10.65.0.3",
           "NODE_RANK": rank, "NUM_NODES": "2", "NUM_TRAINERS": "8"}
    HostBuilder(tmp_path).loopback().interface("ens1", addresses=["10.65.0.3/24"])
    fp = collect_fingerprint(environ=env, root=tmp_path)
    assert fp.rank is None and fp.num_nodes == 2
    assert fp.local_errors, "the node's own checks name the bad NODE_RANK"


# -- comparing ----------------------------------------------------------------------------------


def test_a_consistent_cluster_has_no_problems() -> None:
    assert compare(entries(*(fingerprint(r) for r in range(3))), expected_nodes=3) == []


def test_env_difference_names_the_variable_the_node_and_the_values() -> None:
    fps = [fingerprint(0), fingerprint(1), fingerprint(2), fingerprint(3, nodes=4)]
    fps = [dataclasses.replace(fp, num_nodes=4) for fp in fps]
    fps[2] = dataclasses.replace(fps[2], env={**fps[2].env, "NCCL_SOCKET_IFNAME": "eth0",
                                              "NCCL_DEBUG": "INFO"})
    problems = compare(entries(*fps), expected_nodes=4)
    assert codes(problems) == ["preflight-env-differs", "preflight-env-differs"]
    error, warning = problems
    assert error.severity == "error" and warning.severity == "warning"  # NCCL_DEBUG: logging
    assert error.title == ("NCCL_SOCKET_IFNAME differs: rank 2 (10.65.0.4) has 'eth0', "
                           "3 nodes have 'ens1'")
    assert error.nodes == (NodeRef(2, "10.65.0.4", "node-2"),)
    assert error.evidence == ("'ens1' on ranks 0-1, 3", "'eth0' on rank 2")
    assert warning.title.startswith("NCCL_DEBUG differs: rank 2 (10.65.0.4) has 'INFO'")
    assert "<unset> on ranks 0-1, 3" in warning.evidence


def test_two_nodes_disagreeing_name_the_one_that_is_not_the_primary() -> None:
    fps = [fingerprint(0, nodes=2), fingerprint(1, nodes=2, env={})]
    (problem, other) = compare(entries(*fps), expected_nodes=2)
    assert problem.nodes == (NodeRef(1, "10.65.0.3", "node-1"),)
    assert other.nodes == problem.nodes


def test_ranks_missing_duplicate_out_of_range_and_unknown() -> None:
    fps = [fingerprint(0, nodes=5), fingerprint(1, nodes=5), fingerprint(1, nodes=5),
           fingerprint(9, nodes=5), fingerprint(None, nodes=5)]
    problems = compare(entries(*fps), expected_nodes=5, waited_s=5.0)
    by_code = {p.code: p for p in problems}
    assert set(by_code) == {"preflight-rank-unknown", "preflight-rank-out-of-range",
                            "preflight-rank-duplicate", "preflight-rank-missing"}
    assert by_code["preflight-rank-duplicate"].title == (
        "NODE_RANK=1 is used by 2 nodes: rank 1 (10.65.0.3), rank 1 (10.65.0.4)")
    assert by_code["preflight-rank-missing"].title == (
        "3 of 5 nodes did not report within 5.0 s: ranks 2-4")
    assert by_code["preflight-rank-out-of-range"].nodes == (NodeRef(9, "10.65.0.5", "node-9"),)
    assert by_code["preflight-rank-unknown"].nodes[0].rank is None


def test_mtu_and_missing_cluster_interface() -> None:
    fps = [fingerprint(0, nodes=4), fingerprint(1, nodes=4), fingerprint(2, nodes=4, mtu=9000),
           fingerprint(3, nodes=4, interface=None, mtu=None,
                       interface_reason="no interface holds NODE_ADDR 10.65.0.5")]
    problems = compare(entries(*fps), expected_nodes=4)
    assert codes(problems) == ["preflight-no-cluster-interface", "preflight-mtu-differs"]
    assert problems[0].evidence == ("no interface holds NODE_ADDR 10.65.0.5",)
    assert problems[1].title == (
        "MTU of the cluster interface differs: rank 2 (10.65.0.4) has 9000, 2 nodes have 1500")


def test_rdma_transport_ports_and_rates() -> None:
    ib8 = RdmaSummary("infiniband", tuple(f"mlx5_{i}" for i in range(8)), 8, (400.0,) * 8)
    ib7 = RdmaSummary("infiniband", ib8.devices[:7], 7, (400.0,) * 7, ("mlx5_7 port 1 DOWN",))
    slow = dataclasses.replace(ib8, rates_gbps=(200.0,) * 8)
    problems = compare(entries(fingerprint(0, rdma=ib8), fingerprint(1, rdma=ib7),
                               fingerprint(2, rdma=RdmaSummary())), expected_nodes=3)
    assert codes(problems) == ["preflight-transport-differs", "preflight-rdma-ports-differ"]
    assert "none (TCP sockets) on rank 2" in problems[0].evidence
    assert "rank 1 (10.65.0.3): mlx5_7 port 1 DOWN" in problems[1].evidence
    rates = compare(entries(fingerprint(0, rdma=ib8), fingerprint(1, rdma=ib8),
                            fingerprint(2, rdma=slow)), expected_nodes=3)
    assert codes(rates) == ["preflight-rdma-rate-differs"] and rates[0].severity == "warning"


def test_gpu_counts() -> None:
    cpu = [fingerprint(r, gpus=None) for r in range(3)]
    assert compare(entries(*cpu), expected_nodes=3) == []  # no driver anywhere: a CPU cluster
    fps = [fingerprint(0, gpus=2), fingerprint(1, gpus=1), fingerprint(2, gpus=None)]
    problems = compare(entries(*fps), expected_nodes=3)
    titles = [p.title for p in problems if p.code == "preflight-gpu-count"]
    assert titles == ["rank 1 (10.65.0.3) sees 1 GPUs but NUM_TRAINERS=2",
                      "rank 2 (10.65.0.4) shows no NVIDIA driver while other nodes have GPUs"]


def test_local_errors_are_grouped_by_code() -> None:
    bad = (Finding("primary-unreachable", "error", "no route to 10.65.0.2", (), "fix routes"),)
    fps = [fingerprint(0), fingerprint(1, local_errors=bad), fingerprint(2, local_errors=bad)]
    (problem,) = compare(entries(*fps), expected_nodes=3)
    assert problem.code == "preflight-node-errors" and problem.fix == "fix routes"
    assert problem.title == ("local check primary-unreachable fails on rank 1 (10.65.0.3), "
                             "rank 2 (10.65.0.4): no route to 10.65.0.2")


def test_versions_tokens_contract_and_addresses() -> None:
    fps = [fingerprint(0), fingerprint(1, versions={"torch": "2.4.0"}, token=True,
                                       num_trainers=4),
           fingerprint(2, versions={}, node_addr="10.9.9.9")]
    problems = compare(entries(*fps), expected_nodes=3)
    by_code = {p.code: p for p in problems}
    assert by_code["preflight-version-differs"].title == (
        "torch version differs: rank 1 (10.65.0.3) has '2.4.0', 1 node has '2.13.0'")
    assert by_code["preflight-token-mismatch"].nodes == (NodeRef(1, "10.65.0.3", "node-1"),)
    assert by_code["preflight-contract-differs"].title.startswith("NUM_TRAINERS differs")
    assert by_code["preflight-addr-mismatch"].severity == "warning"


def test_node_addr_spelled_as_ipv4_mapped_ipv6_is_the_same_address() -> None:
    fps = entries(fingerprint(0, nodes=2), fingerprint(1, nodes=2))
    (addr, fp) = fps[1]
    mapped = [fps[0], (addr, dataclasses.replace(fp, node_addr=f"::ffff:{addr}"))]
    assert compare(mapped, expected_nodes=2) == []
    other = [fps[0], (addr, dataclasses.replace(fp, node_addr="::ffff:10.65.0.99"))]
    assert codes(compare(other, expected_nodes=2)) == ["preflight-addr-mismatch"]


def test_ranks_text() -> None:
    assert ranks_text([2]) == "rank 2"
    assert ranks_text([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8"
    assert ranks_text([None, 1]) == "ranks 1, ?"
    assert ranks_text(range(0, 100, 2), limit=3) == "ranks 0, 2, 4, …"
    assert ranks_text([]) == "no ranks"


def test_verdict_round_trips_and_malformed_ones_are_refused() -> None:
    problem = Problem("preflight-mtu-differs", "error", "t", ("e",), "f", (NodeRef(1, "a", "h"),))
    verdict = Verdict(2, "10.65.0.2:29501", (NodeSummary(0, "10.65.0.2", mtu=1500),), (problem,),
                      ("x:1: y",), 1, (RingHop(NodeRef(0), NodeRef(1), False, "refused"),), 0.5,
                      reported=2, ring_probed=2)
    again = Verdict.from_wire(json.loads(json.dumps(verdict.to_wire())))
    assert again == verdict and again.exit_code == 1 and not again.ok
    assert problem.finding().evidence == ("e", "nodes: rank 1 (a)")
    for bad in ({}, {"expected_nodes": 2, "primary": "p", "problems": [{"code": "c"}]},
                {"expected_nodes": 2, "primary": "p", "nodes": [{"rank": 0, "bogus": 1}]},
                {"expected_nodes": 2, "primary": "p", "problems": [
                    {"code": "c", "severity": "fatal", "title": "t"}]}):
        with pytest.raises(WireError, match=r"the primary's verdict"):
            Verdict.from_wire(bad)


def test_default_port_is_one_above_the_rendezvous_port() -> None:
    assert default_port(29500) == 29501 and default_port(None) == 29501
    assert default_port(65535) == 65534


# -- a real primary and real nodes on loopback --------------------------------------------------


@contextmanager
def primary(
    own: Fingerprint, *, expected: int, timeout: float = 10.0, token: bytes | None = None,
    ring: bool = False, limits: Limits = FAST,
) -> Iterator[tuple[int, Future[Verdict]]]:
    server = PrimaryServer(own, listen_addr=LOOP, port=0, expected_nodes=expected,
                           options=PreflightOptions(timeout=timeout, token=token, ring=ring,
                                                    limits=limits))
    port = server.bind()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(server.serve)
        try:
            yield port, future
        finally:
            future.result(timeout=timeout + 15)
    assert_nothing_listens(port)


def listening_ports() -> set[int]:
    """Local TCP ports in LISTEN state (``0A``) in this network namespace."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as handle:
            for line in handle.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def assert_nothing_listens(port: int, addr: str = LOOP) -> None:
    assert port not in listening_ports()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((addr, port), timeout=2).close()
    with socket.socket() as probe:  # the port is free to bind again (as preflight binds it)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((addr, port))


def nodes(
    port: int, fps: list[Fingerprint], *, timeout: float = 10.0, token: bytes | None = None
) -> list[Future[Verdict]]:
    pool = ThreadPoolExecutor(len(fps))
    futures = [
        pool.submit(run_node, fp, primary_addr=LOOP, port=port,
                    options=PreflightOptions(timeout=timeout, token=token, limits=FAST))
        for fp in fps
    ]
    pool.shutdown(wait=False)
    return futures


def test_healthy_cluster_every_node_gets_the_same_verdict_quickly() -> None:
    start = time.monotonic()
    with primary(fingerprint(0, nodes=4), expected=4) as (port, verdict):
        got = [f.result(15) for f in nodes(port, [fingerprint(r, nodes=4) for r in (1, 2, 3)])]
    elapsed = time.monotonic() - start
    assert verdict.result().exit_code == 0 and verdict.result().problems == ()
    assert all(v == verdict.result() for v in got)
    assert [n.rank for n in verdict.result().nodes] == [0, 1, 2, 3]
    assert elapsed < 5, f"a healthy 4-node preflight took {elapsed:.1f} s"


def test_a_node_with_a_different_variable_is_named_on_every_node() -> None:
    odd = fingerprint(2, env={"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "ens1"})
    with primary(fingerprint(0), expected=3) as (port, verdict):
        got = [f.result(15) for f in nodes(port, [fingerprint(1), odd])]
    for v in (verdict.result(), *got):
        assert v.exit_code == 1
        (problem,) = v.problems
        assert problem.title.startswith("NCCL_SOCKET_IFNAME differs: rank 2 (127.0.0.1) has "
                                        "'eth0'")


def test_missing_node_is_reported_by_rank_within_the_timeout() -> None:
    start = time.monotonic()
    with primary(fingerprint(0, nodes=4), expected=4, timeout=1.5) as (port, verdict):
        got = [f.result(15) for f in nodes(port, [fingerprint(1, nodes=4),
                                                  fingerprint(3, nodes=4)])]
    assert time.monotonic() - start < 6
    (problem,) = verdict.result().problems
    assert problem.code == "preflight-rank-missing" and problem.nodes == (NodeRef(2),)
    assert "ranks 0-1, 3" in problem.evidence[0]
    assert all(v.exit_code == 1 for v in got)


def test_duplicate_rank_ends_after_a_short_grace_not_the_timeout() -> None:
    start = time.monotonic()
    with primary(fingerprint(0), expected=3, timeout=20) as (port, verdict):
        [f.result(15) for f in nodes(port, [fingerprint(1), fingerprint(1)])]
    assert time.monotonic() - start < 8
    assert codes(verdict.result().problems) == ["preflight-rank-duplicate",
                                                "preflight-rank-missing"]


def open_connection(port: int, *, nonce: str = "00" * 16) -> tuple[socket.socket, FrameReader]:
    """Connect as a node does: send ``OPEN`` and read the primary's ``HELLO``."""
    sock = socket.create_connection((LOOP, port), timeout=5)
    sock.sendall(encode_frame(Kind.OPEN, encode_json({"nonce": nonce})))
    reader = FrameReader(max_payload=1 << 24,
                         expect={Kind.HELLO, Kind.RING, Kind.VERDICT, Kind.REJECT})
    while (frame := reader.next_frame()) is None:
        reader.feed(sock.recv(4096))
    assert frame.kind == Kind.HELLO, frame
    return sock, reader


def hostile(port: int, send: bytes, *, close_after: bool = True, greeted: bool = False) -> bytes:
    """Connect like a hostile peer, send ``send``, return whatever the primary answers;
    ``greeted``: after an ``OPEN`` and the primary's ``HELLO``, as a node would."""
    sock = open_connection(port)[0] if greeted else socket.create_connection((LOOP, port),
                                                                             timeout=5)
    with sock:
        if send:
            sock.sendall(send)
        if close_after and send:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
        return b"".join(chunks)


def test_hostile_peers_are_refused_and_honest_nodes_still_get_their_verdict() -> None:
    oversized = HEADER.pack(MAGIC, PROTOCOL_VERSION, Kind.FINGERPRINT, 0, 1 << 30) + b"x" * 1000
    bad_schema = encode_frame(Kind.FINGERPRINT, encode_json(
        {"fingerprint": {**fingerprint(1).to_wire(), "schema": 99}}))
    two = encode_frame(Kind.FINGERPRINT, encode_json(
        {"fingerprint": fingerprint(1).to_wire()})) * 2
    no_open = encode_frame(Kind.FINGERPRINT, encode_json(
        {"fingerprint": fingerprint(1).to_wire()}))
    attacks = [(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False), (oversized, True), (b"", False),
               (bad_schema, True), (two, True), (no_open, False),
               (encode_frame(Kind.FINGERPRINT, b'{"fingerprint": []}'), True),
               (encode_frame(Kind.OPEN, b'{"nonce": 5}'), False)]
    with primary(fingerprint(0), expected=3, timeout=10) as (port, verdict):
        with ThreadPoolExecutor(len(attacks)) as pool:
            answers = list(pool.map(lambda a: hostile(port, a[0], greeted=a[1]), attacks))
        got = [f.result(15) for f in nodes(port, [fingerprint(1), fingerprint(2)])]
    result = verdict.result()
    assert result.exit_code == 0, result.problems  # refused peers are a warning
    assert all(v == result for v in got)
    (warning,) = result.problems
    assert warning.code == "preflight-rejected-peers" and result.rejected_total == len(attacks)
    assert all(r.startswith("rejected peer 127.0.0.1:") for r in result.rejected)
    assert {n.addr for n in warning.nodes} == {r.split(": ")[0][len("rejected peer "):]
                                              for r in result.rejected}
    reasons = " | ".join(result.rejected)
    for expected in ("not a clusterenv preflight message (it starts with 'GET / HT')",
                     "message of 1073741824 bytes exceeds the 65536-byte limit",
                     "sent nothing", "fingerprint schema 99", "more than one message",
                     "must carry a 'fingerprint' object", "unexpected FINGERPRINT message "
                     "(expected OPEN)", "OPEN message must carry a 32-hex 'nonce'"):
        assert expected in reasons
    # Nothing is said before the peer's OPEN: the primary tells it why it was refused, and
    # closes.
    reader = FrameReader(max_payload=1 << 16, expect={Kind.HELLO, Kind.REJECT})
    reader.feed(answers[0])
    frames = [reader.next_frame(), reader.next_frame()]
    assert [f.kind if f else None for f in frames] == [Kind.REJECT, None]
    assert frames[0] is not None
    assert "not a clusterenv preflight message" in decode_object(frames[0].payload)["reason"]


def test_a_silent_peer_is_dropped_after_the_peer_timeout() -> None:
    with primary(fingerprint(0, nodes=2), expected=2, timeout=10) as (port, verdict):
        with socket.create_connection((LOOP, port), timeout=5) as silent:
            start = time.monotonic()
            while silent.recv(4096):  # REJECT, then the close
                pass
            waited = time.monotonic() - start
        nodes(port, [fingerprint(1, nodes=2)])[0].result(15)
    assert 0.4 < waited < 3, waited
    assert any("sent nothing within 0.5 s" in r for r in verdict.result().rejected)


def test_connection_flood_is_bounded() -> None:
    limits = dataclasses.replace(FAST, connection_slack=2, max_connections=1)
    with primary(fingerprint(0, nodes=2), expected=2, limits=limits) as (port, verdict):
        flood = [socket.create_connection((LOOP, port), timeout=5) for _ in range(8)]
        time.sleep(0.2)
        got = nodes(port, [fingerprint(1, nodes=2)], timeout=10)[0].result(15)
        for sock in flood:
            sock.close()
    result = verdict.result()
    assert got == result and result.reported == 2
    assert any("too many connections" in r for r in result.rejected)


def test_nothing_answers_means_exit_2_naming_the_address() -> None:
    with socket.socket() as placeholder:
        placeholder.bind((LOOP, 0))
        port = placeholder.getsockname()[1]  # bound, never listening: connections are refused
        start = time.monotonic()
        with pytest.raises(PreflightError) as caught:
            run_node(fingerprint(1), primary_addr=LOOP, port=port,
                     options=PreflightOptions(timeout=1.0, limits=FAST))
    assert 0.9 < time.monotonic() - start < 4
    message = str(caught.value)
    assert f"no answer from the primary at 127.0.0.1:{port}" in message
    assert "Connection refused" in message and "--port" in message


@pytest.mark.parametrize(
    ("reply", "message"), [(b"SSH-2.0-OpenSSH_9.6\r\n", "does not speak clusterenv preflight"),
                           (None, "sent no preflight greeting")])
def test_another_program_on_the_port_is_named(reply: bytes | None, message: str) -> None:
    server = socket.create_server((LOOP, 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            if reply:
                conn.sendall(reply)
            time.sleep(1.5)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(PreflightError, match=message):
            run_node(fingerprint(1), primary_addr=LOOP, port=port, options=PreflightOptions(
                timeout=5, limits=dataclasses.replace(FAST, peer_timeout=0.5)))
    finally:
        thread.join(5)
        server.close()


def test_a_node_started_before_the_primary_retries_until_it_is_up() -> None:
    own = fingerprint(0, nodes=2)
    server = PrimaryServer(own, listen_addr=LOOP, port=0, expected_nodes=2,
                           options=PreflightOptions(timeout=10, limits=FAST))
    port = server.bind()
    server.close()  # the port is known but nobody listens yet
    early = nodes(port, [fingerprint(1, nodes=2)], timeout=10)[0]
    time.sleep(0.7)
    late = PrimaryServer(own, listen_addr=LOOP, port=port, expected_nodes=2,
                         options=PreflightOptions(timeout=10, limits=FAST))
    verdict = late.serve()
    assert early.result(15) == verdict and verdict.exit_code == 0


def token_run(primary_token: bytes | None, node_tokens: list[bytes | None]) -> tuple[
    Verdict, list[Verdict | PreflightError]
]:
    fps = [fingerprint(r + 1, nodes=len(node_tokens) + 1, token=t is not None)
           for r, t in enumerate(node_tokens)]
    own = fingerprint(0, nodes=len(node_tokens) + 1, token=primary_token is not None)
    results: list[Verdict | PreflightError] = []
    with primary(own, expected=len(fps) + 1, timeout=3, token=primary_token) as (port, verdict):
        pool = ThreadPoolExecutor(len(fps))
        futures = [pool.submit(run_node, fp, primary_addr=LOOP, port=port,
                               options=PreflightOptions(timeout=5, token=t, limits=FAST))
                   for fp, t in zip(fps, node_tokens, strict=True)]
        for future in futures:
            try:
                results.append(future.result(15))
            except PreflightError as e:
                results.append(e)
        pool.shutdown()
    return verdict.result(), results


def test_same_token_everywhere_is_accepted() -> None:
    verdict, results = token_run(b"t0ken", [b"t0ken", b"t0ken"])
    assert verdict.exit_code == 0 and results == [verdict, verdict]


def test_nodes_without_or_with_another_token_are_refused_and_told_why() -> None:
    verdict, results = token_run(b"t0ken", [None, b"wrong", b"t0ken"])
    assert results[2] == verdict
    assert isinstance(results[0], PreflightError) and isinstance(results[1], PreflightError)
    assert "requires CLUSTERENV_PREFLIGHT_TOKEN" in str(results[0])
    # The node with another token refuses the primary's greeting before sending its facts,
    # and tells the primary why.
    assert "greeting from 127.0.0.1:" in str(results[1])
    assert "not authenticated with this node's CLUSTERENV_PREFLIGHT_TOKEN" in str(results[1])
    assert "fingerprint was not sent" in str(results[1])
    assert any("the node refused this primary: its greeting is not authenticated" in r
               and "(the tokens differ)" in r for r in verdict.rejected), verdict.rejected
    missing = next(p for p in verdict.problems if p.code == "preflight-rank-missing")
    assert missing.title.endswith("ranks 1-2")
    assert "t0ken" not in json.dumps(verdict.to_wire()) and "wrong" not in str(results[1])


def test_a_node_with_a_token_refuses_a_primary_without_one_before_sending() -> None:
    verdict, results = token_run(None, [b"t0ken", None])
    assert isinstance(results[0], PreflightError)
    assert "does not use CLUSTERENV_PREFLIGHT_TOKEN" in str(results[0])
    assert "fingerprint was not sent" in str(results[0])
    assert results[1] == verdict
    missing = next(p for p in verdict.problems if p.code == "preflight-rank-missing")
    assert missing.title.endswith("rank 1")  # the primary never saw the node's facts


def test_ring_probes_every_node_and_names_an_unreachable_one() -> None:
    with primary(fingerprint(0), expected=3, ring=True) as (port, verdict):
        got = [f.result(15) for f in nodes(port, [fingerprint(1), fingerprint(2)])]
    result = verdict.result()
    assert result.exit_code == 0 and result.ring_probed == 3
    assert [(h.source.rank, h.target.rank, h.ok) for h in result.ring] == [
        (0, 1, True), (1, 2, True), (2, 0, True)]
    assert all(v == result for v in got)


def test_ring_hop_to_a_dead_listener_is_an_error() -> None:
    # Node 2 announces a ring listener nobody answers on: node 1's probe fails.
    dead = socket.socket()
    dead.bind((LOOP, 0))
    dead_port = dead.getsockname()[1]
    with primary(fingerprint(0), expected=3, ring=True) as (port, verdict):
        honest = nodes(port, [fingerprint(1)])[0]
        sock, reader = open_connection(port)
        with sock:
            body = {"fingerprint": fingerprint(2).to_wire(),
                    "ring": {"addr": LOOP, "port": dead_port}}
            sock.sendall(encode_frame(Kind.FINGERPRINT, encode_json(body)))
            while (frame := reader.next_frame()) is None:
                reader.feed(sock.recv(65536))
            assert frame.kind == Kind.RING
            sock.sendall(encode_frame(Kind.RING_RESULT, encode_json({"ok": True,
                                                                      "detail": "1 ms"})))
            while sock.recv(65536):
                pass
        honest.result(15)
    dead.close()
    (problem,) = verdict.result().problems
    assert problem.code == "preflight-ring-unreachable"
    assert problem.title.startswith("rank 1 (127.0.0.1) cannot open a TCP connection to rank 2")


# -- the API and the CLI ------------------------------------------------------------------------


def runpod_env(rank: int, nodes: int, primary_addr: str, port: int = 29500) -> dict[str, str]:
    return {"PRIMARY_ADDR": primary_addr, "MASTER_ADDR": primary_addr,
            "PRIMARY_PORT": str(port), "MASTER_PORT": str(port), "NODE_ADDR": f"127.0.0.{rank + 2}",
            "NODE_RANK": str(rank), "NUM_NODES": str(nodes), "NUM_TRAINERS": "1",
            "HOST_NODE_ADDR": f"{primary_addr}:{port}"}


def loopback_host(path: Path, address: str, environ: dict[str, str]) -> str:
    HostBuilder(path).loopback().interface("lo", addresses=["127.0.0.1/8", f"{address}/8"]) \
        .environ(environ)
    return str(path)


def test_single_node_needs_no_network(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback()
    result = preflight(environ={}, root=tmp_path, timeout=1)
    assert result.role == "single" and result.exit_code == 0 and result.endpoint is None
    assert result.verdict is not None and result.verdict.reported == 1


def test_api_primary_and_node_on_loopback(tmp_path: Path) -> None:
    port = free_port()
    roots = [loopback_host(tmp_path / f"n{r}", f"127.0.0.{r + 2}",
                           runpod_env(r, 2, "127.0.0.2")) for r in range(2)]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(preflight, environ=runpod_env(r, 2, "127.0.0.2"), root=roots[r],
                               timeout=8, port=port) for r in range(2)]
        results = [f.result(20) for f in futures]
    assert [r.role for r in results] == ["primary", "node"]
    assert results[0].verdict == results[1].verdict
    assert results[0].endpoint == f"127.0.0.2:{port}"
    verdict = results[0].verdict
    assert verdict is not None and verdict.reported == 2
    # A loopback PRIMARY_ADDR on two nodes is a config error both nodes report locally, and
    # loopback never counts as a cluster interface: the verdict says so for both nodes.
    assert set(codes(verdict.problems)) == {"preflight-node-errors",
                                            "preflight-no-cluster-interface"}
    assert any("config-loopback-primary" in p.title for p in verdict.problems)
    assert all(r.exit_code == 1 for r in results)
    assert_nothing_listens(port, "127.0.0.2")


def test_api_node_that_cannot_reach_the_primary_exits_2(tmp_path: Path) -> None:
    port = free_port()
    env = runpod_env(1, 2, "127.0.0.9")
    result = preflight(environ=env, root=loopback_host(tmp_path, "127.0.0.3", env), timeout=0.5,
                       port=port)
    assert result.exit_code == 2 and result.verdict is None and result.role == "node"
    assert result.error is not None and f"127.0.0.9:{port}" in result.error


def test_api_rejects_bad_arguments(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback()
    with pytest.raises(ValueError, match="timeout"):
        preflight(environ={}, root=tmp_path, timeout=0)
    with pytest.raises(ValueError, match="port"):
        preflight(environ={}, root=tmp_path, port=70000)


def test_cli_json_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    HostBuilder(tmp_path).loopback().environ({})
    assert main(["preflight", "--json", "--root", str(tmp_path), "--timeout", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 0 and data["role"] == "single"
    assert data["verdict"]["ok"] is True and data["verdict"]["problems"] == []
    assert main(["preflight", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "preflight: 1 of 1 node reported in" in out and "no problems found" in out
    assert "this node: rank 0 (single); cluster consistent (exit 0)" in out


def test_cli_exit_2_prints_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = runpod_env(1, 2, "127.0.0.9")
    root = loopback_host(tmp_path, "127.0.0.3", env)
    port = str(free_port())
    assert main(["preflight", "--root", root, "--timeout", "0.3", "--port", port]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"no answer from the primary at 127.0.0.9:{port}" in captured.err
    with pytest.raises(SystemExit):
        main(["preflight", "--timeout", "-1"])
    assert "expected seconds" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOP, 0))
        port: int = sock.getsockname()[1]
        return port


def test_helpers_cover_each_other() -> None:
    # The loopback helpers must themselves be able to fail.
    server = socket.create_server((LOOP, 0))
    try:
        assert server.getsockname()[1] in listening_ports()
        with pytest.raises(AssertionError):
            assert_nothing_listens(server.getsockname()[1])
    finally:
        server.close()


def test_port_in_use_on_the_primary_exits_2(tmp_path: Path) -> None:
    env = runpod_env(0, 2, "127.0.0.2")
    with socket.create_server(("127.0.0.2", 0)) as taken:
        port = taken.getsockname()[1]
        result = preflight(environ=env, root=loopback_host(tmp_path, "127.0.0.2", env),
                           timeout=1, port=port)
    assert result.exit_code == 2 and result.role == "primary"
    assert result.error is not None
    assert result.error.startswith(f"cannot listen on 127.0.0.2:{port}: Address already in use")


def test_ipv6_primary() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python")
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here: {e}")
    own = fingerprint(0, nodes=2, node_addr="::1", primary_addr="::1")
    server = PrimaryServer(own, listen_addr="::1", port=0, expected_nodes=2,
                           options=PreflightOptions(timeout=5, ring=True, limits=FAST))
    port = server.bind()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(server.serve)
        got = run_node(fingerprint(1, nodes=2, node_addr="::1", primary_addr="::1"),
                       primary_addr="::1", port=port,
                       options=PreflightOptions(timeout=5, limits=FAST))
        verdict = future.result(15)
    assert got == verdict and verdict.exit_code == 0, verdict.problems
    assert verdict.primary == f"[::1]:{port}" and verdict.nodes[1].addr == "::1"
    assert all(hop.ok for hop in verdict.ring)


def test_human_output_of_a_broken_big_cluster() -> None:
    from clusterenv._cli.preflight import format_verdict
    from clusterenv.preflight import PreflightResult

    odd = NodeRef(70, "10.65.1.72", "node-70")
    problem = Problem("preflight-mtu-differs", "error", "MTU of the cluster interface differs: "
                      "rank 70 (10.65.1.72) has 1500, 99 nodes have 9000",
                      ("9000 on ranks 0-69, 71-99", "1500 on rank 70"), "set the same MTU",
                      (odd,))
    verdict = Verdict(100, "10.65.0.2:29501", (NodeSummary(70, "10.65.1.72", "node-70", "ens1",
                                                           1500, "roce", 8, 8),),
                      (problem,), reported=100, elapsed_s=0.42)
    text = format_verdict(PreflightResult(1, "node", 3, "10.65.0.2:29501", verdict))
    assert text.startswith("preflight: 100 of 100 nodes reported to 10.65.0.2:29501 in 0.42 s")
    assert "70    10.65.1.72  node-70   ens1       1500  roce  8      8" in text
    assert "… and 99 more nodes that no problem names" in text
    assert "ERROR   [preflight-mtu-differs] MTU of the cluster interface differs" in text
    assert "evidence: 1500 on rank 70" in text and "nodes: rank 70 (10.65.1.72)" in text
    assert text.endswith("this node: rank 3 (node); cluster problems found (exit 1)")
    failed = PreflightResult(2, "node", 1, "10.65.0.2:29501", None, "no answer")
    assert format_verdict(failed) == "preflight could not complete: no answer"


def test_timeout_token_ring_and_limits_travel_as_one_options_object() -> None:
    import inspect

    bundle = {"timeout", "token", "ring", "limits"}
    for function in (PrimaryServer, serve_primary, run_node):
        parameters = set(inspect.signature(function).parameters)
        assert "options" in parameters and not bundle & parameters, function
    assert PreflightOptions().timeout == 30.0
    with pytest.raises(ValueError, match="timeout=0"):
        PreflightOptions(timeout=0)
