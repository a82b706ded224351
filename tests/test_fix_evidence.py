"""Fix lines carry only evidence (DESIGN principle 7): every concrete value in a fix is one the
input environment or the host supports, never the rejected value, never a number from an
example; otherwise the fix has a placeholder such as ``<the primary node's cluster IP address>``.

The host is chosen so that no example value of the code (10.65.0.2, 10.65.0.3, 29500, 8, 16, 2)
is one of its facts: an invented value cannot pass for evidence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterenv import doctor
from clusterenv._values import parse_host, split_host_port
from clusterenv.config import check_config
from clusterenv.findings import Finding
from clusterenv.sources._fixes import PLACEHOLDERS, evidenced_value
from clusterenv.testing import HostBuilder

#: The host's facts, none of them an example value.
HOST_FACTS = {"lo", "eth0", "ens1", "127.0.0.1", "172.21.4.7", "10.70.3.7", "4", "gpu-a"}


def build_host(root: Path) -> Path:
    (HostBuilder(root).loopback()
     .interface("eth0", addresses=["172.21.4.7/16"])
     .interface("ens1", addresses=["10.70.3.7/24"], mtu=9000)
     .gpus(4).shm(64 << 30).memlock(None, None).cap_ipc_lock(True)
     .hostname("gpu-a")
     .file("etc/hosts", "127.0.0.1\tlocalhost\n10.70.3.7\tgpu-a\n10.70.3.9\tnode-p\n"))
    return root


@pytest.fixture(scope="module")
def host_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_host(tmp_path_factory.mktemp("fix-evidence"))


# -- what a fix may say ------------------------------------------------------------------------

_ASSIGNMENT = re.compile(r"(?<![\w-])(--[a-z][a-z-]*|[A-Z][A-Z0-9_]*)=([^\s;,'\"`)]+)")
_TOKENS = re.compile(r"[=^,:\[\]]+")


def _integers(environ: Mapping[str, str]) -> set[int]:
    out = set()
    for value in environ.values():
        for token in _TOKENS.split(value):
            if token.isascii() and token.isdigit() and len(token) < 10:
                out.add(int(token))
    return out


def universe(environ: Mapping[str, str], root: Path) -> set[str]:
    """Every value the input or the host supports: the input's values and their parts, the
    host's facts, the contract derived from them, and products and quotients of input numbers
    (``WORLD_SIZE / NUM_NODES``)."""
    values = set(HOST_FACTS)
    for value in environ.values():
        values.add(value.strip())
        values.update(t for t in _TOKENS.split(value.strip()) if t)
        host = parse_host(value)
        if host is not None:
            values.add(host)
    given = _integers(environ)
    numbers = given | {4}  # the host's GPUs: the default processes per node
    for a in given:
        for b in numbers:
            values.add(str(a * b))
            values.update(str(x // y) for x, y in ((a, b), (b, a)) if y and x % y == 0)
    config = check_config(environ, root=root).config
    if config is not None:  # the contract the input gives, defaults included (torchrun's port)
        values.update(config.to_env().values())
        values.update(a.split("=", 1)[1] for a in config.torchrun_args() if "=" in a)
    return values


def _supported(value: str, known: set[str]) -> bool:
    if value in known:
        return True
    tokens = [t for t in _TOKENS.split(value) if t]
    return bool(tokens) and all(t in known for t in tokens)


def _node_rank_supported(value: str, environ: Mapping[str, str]) -> bool:
    """``NODE_RANK=0`` only for the node that holds the primary's address; ``1`` only as the
    other one of two nodes."""
    primary = {h for name in ("PRIMARY_ADDR", "MASTER_ADDR")
               if (h := parse_host(environ.get(name) or "")) is not None}
    if (split := split_host_port(environ.get("HOST_NODE_ADDR") or "")) is not None:
        primary.add(split[0])
    mine = {"10.70.3.7"}
    node = parse_host(environ.get("NODE_ADDR") or "")
    if node is not None:
        mine.add(node)
    if value == "0":
        return bool(primary & mine)
    if value == "1":
        return (environ.get("NUM_NODES") or "").strip() == "2" and bool(primary - mine)
    return False


def bad_values(finding: Finding, environ: Mapping[str, str], known: set[str]) -> list[str]:
    """The concrete values of ``finding.fix`` that nothing supports, with why."""
    problems = []
    for name, value in _ASSIGNMENT.findall(finding.fix):
        if value.startswith(("<", "$")):
            continue  # a placeholder, or the variable itself
        if (name.startswith("--") or name == "CLUSTERENV_SOURCE") and value.isalpha():
            continue  # a constant: --rdzv-backend=static, CLUSTERENV_SOURCE=local
        if not name.startswith("--") and (environ.get(name) or "").strip() == value:
            problems.append(f"{name}={value} repeats the rejected value")
        elif name == "NODE_RANK":
            if not _node_rank_supported(value, environ):
                problems.append(f"NODE_RANK={value} without evidence of this node's index")
        elif not _supported(value, known):
            problems.append(f"{name}={value} is in neither the input nor the host")
    return problems


# -- generated environments --------------------------------------------------------------------

ADDRESSES = ["10.70.3.9", "10.70.3.7", "node-p", "node-q", "localhost", "127.0.0.1",
             "abc def", "172.21.0.9", "[fd00::9]", ""]
PORTS = ["29511", "29512", "70000", "0", "x", ""]
COUNTS = ["1", "3", "4", "5", "12", "15", "0", "-1", "two", ""]
VARIABLES: dict[str, list[str]] = {
    "PRIMARY_ADDR": ADDRESSES, "MASTER_ADDR": ADDRESSES, "NODE_ADDR": ADDRESSES,
    "PRIMARY_PORT": PORTS, "MASTER_PORT": PORTS,
    "HOST_NODE_ADDR": ["10.70.3.9:29511", "node-p:29511", "10.70.3.9:70000", "garbage",
                       "[fd00::9]:29511", ""],
    "NODE_RANK": COUNTS, "NUM_NODES": COUNTS, "NUM_TRAINERS": COUNTS, "WORLD_SIZE": COUNTS,
    "RANK": COUNTS, "LOCAL_RANK": COUNTS, "LOCAL_WORLD_SIZE": COUNTS, "GROUP_RANK": COUNTS,
    "TORCHELASTIC_RUN_ID": ["job-7", ""],
    "PET_NNODES": ["1:3", "3", "3:", ""], "PET_NODE_RANK": COUNTS,
    "PET_NPROC_PER_NODE": COUNTS,
    "NCCL_SOCKET_IFNAME": ["eth0", "ens1", "=ens1", "^lo", "ens9"],
    "GLOO_SOCKET_IFNAME": ["eth0", "ens1", "ens"],
    "VLLM_HOST_IP": ["172.21.4.7", "10.70.3.99"],
}
#: A consistent Runpod node 1 of 3 to start from, so that single changes are explored too.
BASE = {"PRIMARY_ADDR": "10.70.3.9", "MASTER_ADDR": "10.70.3.9", "PRIMARY_PORT": "29511",
        "MASTER_PORT": "29511", "HOST_NODE_ADDR": "10.70.3.9:29511", "NODE_ADDR": "10.70.3.7",
        "NODE_RANK": "1", "NUM_NODES": "3", "NUM_TRAINERS": "4", "WORLD_SIZE": "12"}


@st.composite
def environments(draw: st.DrawFn) -> dict[str, str]:
    start = draw(st.sampled_from([BASE, {}]))
    dropped = draw(st.sets(st.sampled_from(sorted(BASE)), max_size=4))
    env = {k: v for k, v in start.items() if k not in dropped}
    changed = draw(st.dictionaries(st.sampled_from(sorted(VARIABLES)),
                                   st.integers(min_value=0, max_value=20), max_size=6))
    for name, index in changed.items():
        choices = VARIABLES[name]
        env[name] = choices[index % len(choices)]
    return env


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(environ=environments())
def test_property_every_fix_value_is_evidenced(host_root: Path, environ: dict[str, str]) -> None:
    known = universe(environ, host_root)
    found = doctor(environ=environ, root=host_root)
    problems = {f"{f.code}: {p} (fix: {f.fix})"
                for f in found for p in bad_values(f, environ, known)}
    assert not problems, sorted(problems)


# -- the cases of the issue, one by one --------------------------------------------------------


def fixes(root: Path, environ: Mapping[str, str], code: str) -> list[str]:
    return [f.fix for f in doctor(environ=environ, root=root) if f.code == code]


@pytest.mark.parametrize(
    ("environ", "code", "expected", "forbidden"),
    [
        # A worker environment with nothing but the ranks: nothing supports any value.
        ({"TORCHELASTIC_RUN_ID": "job-7", "RANK": "0", "LOCAL_RANK": "0"}, "config-missing",
         ["export MASTER_ADDR=<the primary node's cluster IP address>",
          "export WORLD_SIZE=<NUM_NODES x NUM_TRAINERS, the number of processes>",
          "export LOCAL_WORLD_SIZE=<the number of processes on this node>"],
         ["10.65.0.2", "=16", "=8"]),
        # NUM_TRAINERS empty: WORLD_SIZE / NUM_NODES says 4.
        ({**BASE, "NUM_NODES": "4", "WORLD_SIZE": "16", "NUM_TRAINERS": ""}, "config-missing",
         ["export NUM_TRAINERS=4"], ["NUM_TRAINERS=8"]),
        # NODE_RANK empty on a node that is not the primary, three nodes: a placeholder.
        ({**BASE, "NODE_RANK": ""}, "config-missing",
         ["export NODE_RANK=<this node's index: 0 on the primary, 1 to NUM_NODES-1 on the "
          "others>"], ["NODE_RANK=0"]),
        # ...two nodes: the only index a non-primary node can have.
        ({**BASE, "NODE_RANK": "", "NUM_NODES": "2", "WORLD_SIZE": "8"}, "config-missing",
         ["export NODE_RANK=1"], ["NODE_RANK=0"]),
        # ...the node that holds PRIMARY_ADDR: 0.
        ({**BASE, "NODE_RANK": "", "NODE_ADDR": "10.70.3.9"}, "config-missing",
         ["export NODE_RANK=0"], []),
        # A port out of range, repeated in every spelling: a placeholder, never 70000 again.
        ({**BASE, "PRIMARY_PORT": "70000", "MASTER_PORT": "70000",
          "HOST_NODE_ADDR": "10.70.3.9:70000"}, "config-out-of-range",
         ["export PRIMARY_PORT=<the rendezvous port, the same on every node>"],
         ["=70000", "29500"]),
        # ...but HOST_NODE_ADDR knows the port.
        ({**BASE, "PRIMARY_PORT": "70000", "MASTER_PORT": "70000"}, "config-out-of-range",
         ["export PRIMARY_PORT=29511"], ["=70000"]),
        # Two spellings disagree and nothing arbitrates: a placeholder, not a copy of either.
        # (Two addresses; a name beside an address is compared after resolving.)
        ({**BASE, "PRIMARY_ADDR": "10.70.3.99", "HOST_NODE_ADDR": ""}, "config-alias-mismatch",
         ["set both to the same value: export PRIMARY_ADDR=<the primary node's cluster IP "
          "address>; export MASTER_ADDR=$PRIMARY_ADDR"], ["MASTER_ADDR=10.70.3.99"]),
        # ...HOST_NODE_ADDR arbitrates.
        ({**BASE, "PRIMARY_ADDR": "10.70.3.99"}, "config-alias-mismatch",
         ["export PRIMARY_ADDR=10.70.3.9"], ["MASTER_ADDR=10.70.3.99"]),
        # A loopback primary: HOST_NODE_ADDR says where the primary is.
        ({**BASE, "PRIMARY_ADDR": "127.0.0.1", "MASTER_ADDR": "127.0.0.1"},
         "config-loopback-primary", ["export PRIMARY_ADDR=10.70.3.9"], []),
    ],
)
def test_fix_values_come_from_evidence(
    host_root: Path, environ: dict[str, str], code: str, expected: list[str],
    forbidden: list[str],
) -> None:
    found = fixes(host_root, environ, code)
    for fix in expected:
        assert fix in found, found
    for text in forbidden:
        assert not any(text in fix for fix in found), found


def test_evidenced_values() -> None:
    assert evidenced_value("NUM_TRAINERS", {"WORLD_SIZE": "16", "NUM_NODES": "4"}) == "4"
    assert evidenced_value("NUM_TRAINERS", {"WORLD_SIZE": "15", "NUM_NODES": "4"}) is None
    assert evidenced_value("NUM_NODES", {"WORLD_SIZE": "16", "NUM_TRAINERS": "8"}) == "2"
    assert evidenced_value("WORLD_SIZE", {"NUM_NODES": "2", "NUM_TRAINERS": "8"}) == "16"
    # The rejected value is never suggested back.
    assert evidenced_value("WORLD_SIZE", {"NUM_NODES": "2", "NUM_TRAINERS": "8"},
                           rejected="16") is None
    # Spellings that disagree support nothing.
    assert evidenced_value("PRIMARY_ADDR", {"MASTER_ADDR": "10.0.0.1",
                                            "HOST_NODE_ADDR": "10.0.0.2:1"}) is None
    assert evidenced_value("PRIMARY_ADDR", {"MASTER_ADDR": "localhost"}) is None
    assert evidenced_value("HOST_NODE_ADDR", {"PRIMARY_ADDR": "fd00::2",
                                              "PRIMARY_PORT": "29511"}) == "[fd00::2]:29511"
    assert set(PLACEHOLDERS) >= {"PRIMARY_ADDR", "NODE_RANK", "NUM_TRAINERS", "WORLD_SIZE"}


def test_the_property_checker_catches_invented_values(host_root: Path) -> None:
    """The checker itself can fail: an example number, the rejected value, an unsupported
    rank."""
    environ = {"RANK": "0", "LOCAL_RANK": "0", "NUM_NODES": "3"}
    known = universe(environ, host_root)

    def finding(fix: str) -> Finding:
        return Finding("config-missing", "error", "t", ("e",), fix)

    assert bad_values(finding("export MASTER_ADDR=10.65.0.2"), environ, known)
    assert bad_values(finding("export WORLD_SIZE=16"), environ, known)
    assert bad_values(finding("export NUM_NODES=3"), environ, known)  # the rejected value
    assert bad_values(finding("export NODE_RANK=0"), environ, known)
    assert not bad_values(finding("export MASTER_ADDR=<the primary>"), environ, known)
    assert not bad_values(finding("export LOCAL_WORLD_SIZE=4"), environ, known)  # host GPUs
