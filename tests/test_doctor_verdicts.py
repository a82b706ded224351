"""doctor's severities follow one rule (error = a job launched now fails or hangs), and host
names are resolved and judged like IP addresses.

Snapshots start from the catalogue's baseline Runpod node B0 (tests/nccl_hosts.py): ``eth0``
172.20.0.5/16 (management, default route), ``ens1`` 10.65.0.2/24, host name ``node-0``. In a
snapshot names resolve from its ``/etc/hosts`` only; the live resolver is exercised in
tests/test_doctor_netns.py.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from clusterenv import Finding, doctor, plan_nccl_env
from clusterenv._resolve import from_hosts, system_resolve
from clusterenv.testing import HostBuilder
from tests.nccl_hosts import B0_ENV, b0

HOSTS_HEAD = "127.0.0.1\tlocalhost\n"


def findings(root: Path, **extra: str) -> list[Finding]:
    return doctor(environ={**B0_ENV, **extra}, root=root)


def applied(root: Path, **extra: str) -> dict[str, str]:
    """B0's environment after ``eval "$(clusterenv env)"``."""
    env = {**B0_ENV, **extra}
    return {**env, **plan_nccl_env(environ=env, root=root).env}


def by_code(found: list[Finding], code: str) -> Finding | None:
    matching = [f for f in found if f.code == code]
    assert len(matching) <= 1, [str(f) for f in found]
    return matching[0] if matching else None


# -- what Gloo binds with GLOO_SOCKET_IFNAME unset ----------------------------------------------


@pytest.mark.parametrize(
    ("hosts", "severity", "fragment"),
    [
        # Debian images: the name maps to 127.0.1.1; Gloo binds loopback.
        ("127.0.1.1\tnode-0\n", "error", "'node-0' resolves to 127.0.1.1"),
        # Docker / Runpod: the name maps to eth0's 172.x address.
        ("172.20.0.5\tnode-0\n", "error",
         "'node-0' resolves to eth0 (172.20.0.5), Runpod's management interface"),
        # An address of another machine (a hosts file copied between nodes): not bindable, so
        # torch falls back to 127.0.0.1.
        ("10.65.0.99\tnode-0\n", "error", "none of them an address of this node"),
        # The first bindable address wins, whatever comes after it.
        ("10.65.0.99\tnode-0\n172.20.0.5\tnode-0\n", "error", "eth0 (172.20.0.5)"),
        ("10.65.0.2\tnode-0\n127.0.1.1\tnode-0\n", None, ""),
        ("10.65.0.2\tnode-0\n", None, ""),
        # A snapshot cannot ask DNS: unknown, so a warning, never an error.
        ("", "warning", "could not be resolved here"),
    ],
)
def test_gloo_binding_severity(
    tmp_path: Path, hosts: str, severity: str | None, fragment: str
) -> None:
    b0(tmp_path, hosts=HOSTS_HEAD + hosts)
    finding = by_code(findings(tmp_path), "gloo-ifname-unset")
    if severity is None:
        assert finding is None, finding
        return
    assert finding is not None
    assert finding.severity == severity, finding
    assert fragment in finding.title, finding.title
    assert finding.fix.startswith("export GLOO_SOCKET_IFNAME=ens1, or eval")
    # After `eval "$(clusterenv env)"` it is gone.
    assert by_code(doctor(environ=applied(tmp_path), root=tmp_path), "gloo-ifname-unset") is None


GENERIC = {"MASTER_ADDR": "10.65.0.2", "MASTER_PORT": "29500", "NODE_RANK": "0",
           "NUM_NODES": "2", "NUM_TRAINERS": "8"}


def two_routable_nics(root: Path, hosts: str) -> HostBuilder:
    """Not Runpod: ``eno1`` 192.168.7.2/24 (first in kernel order) and ``ens1`` 10.65.0.2/24."""
    return (HostBuilder(root).loopback()
            .interface("eno1", addresses=["192.168.7.2/24"])
            .interface("ens1", addresses=["10.65.0.2/24"])
            .hostname("node-0").file("etc/hosts", HOSTS_HEAD + hosts))


def test_gloo_on_another_routable_interface_is_a_warning(tmp_path: Path) -> None:
    """A name on a second, routable NIC may work (slower), so it is a warning."""
    two_routable_nics(tmp_path, "192.168.7.2\tnode-0\n")
    finding = by_code(doctor(environ=GENERIC, root=tmp_path), "gloo-ifname-unset")
    assert finding is not None and finding.severity == "warning", finding
    assert "resolves to eno1 (192.168.7.2): Gloo will not use the cluster interface ens1" in (
        finding.title)


def test_nccl_default_on_a_routable_non_cluster_nic_is_a_warning(tmp_path: Path) -> None:
    two_routable_nics(tmp_path, "10.65.0.2\tnode-0\n")
    finding = by_code(doctor(environ=GENERIC, root=tmp_path), "socket-ifname-unset")
    assert finding is not None and finding.severity == "warning", finding
    assert "bootstrap over eno1 (192.168.7.2), not the cluster interface ens1" in finding.title


def test_plain_runpod_node_is_an_error_and_clean_after_env(tmp_path: Path) -> None:
    b0(tmp_path, hosts=HOSTS_HEAD + "172.20.0.5\tnode-0\n")
    plain = findings(tmp_path)
    assert {f.code for f in plain if f.severity == "error"} == {
        "socket-ifname-unset", "gloo-ifname-unset"}
    after = doctor(environ=applied(tmp_path), root=tmp_path)
    assert not [f for f in after if f.severity == "error"], [str(f) for f in after]


# -- rendezvous host names ---------------------------------------------------------------------

WORKER = {"NODE_ADDR": "10.65.0.2", "NODE_RANK": "1"}  # node 1 of 2: the primary is elsewhere


def named_primary(name: str, port: str = "29500") -> dict[str, str]:
    return {**WORKER, "PRIMARY_ADDR": name, "MASTER_ADDR": name, "HOST_NODE_ADDR": f"{name}:{port}"}


@pytest.mark.parametrize(
    ("hosts", "name", "expected"),
    [
        ("172.20.0.10\tnode-p\n", "node-p", ("primary-addr-management", "error",
         "PRIMARY_ADDR=node-p (resolves to 172.20.0.10) is a Runpod management address")),
        ("10.66.0.2\tnode-p\n", "node-p", ("primary-route-management", "error",
         "the route to PRIMARY_ADDR=node-p (resolves to 10.66.0.2) leaves via eth0")),
        ("", "node-p", ("primary-name-unverified", "warning",
                        "PRIMARY_ADDR=node-p could not be resolved here")),
        # A name that resolves to loopback on a worker: it would rendezvous with itself.
        ("127.0.1.1\tnode-p\n", "node-p", ("config-loopback-primary", "error",
         "PRIMARY_ADDR=node-p resolves to 127.0.1.1 on this node (rank 1)")),
        ("10.65.0.9\tnode-p\n", "node-p", None),
        ("10.65.0.9\tNode-P.\n", "NODE-P", None),
    ],
)
def test_primary_names_are_resolved_and_judged(
    tmp_path: Path, hosts: str, name: str, expected: tuple[str, str, str] | None
) -> None:
    b0(tmp_path, hosts=HOSTS_HEAD + "10.65.0.2\tnode-0\n" + hosts)
    found = doctor(environ=applied(tmp_path, **named_primary(name)), root=tmp_path)
    rendezvous = [f for f in found if f.code.startswith(("primary-", "config-loopback"))]
    if expected is None:
        assert not rendezvous, [str(f) for f in found]
        return
    code, severity, fragment = expected
    assert [f.code for f in rendezvous] == [code], [str(f) for f in found]
    assert rendezvous[0].severity == severity
    assert fragment in rendezvous[0].title, rendezvous[0].title
    assert any(name.lower() in item.lower() for item in rendezvous[0].evidence)


def test_a_name_and_its_address_get_the_same_verdict(tmp_path: Path) -> None:
    b0(tmp_path, hosts=HOSTS_HEAD + "10.65.0.2\tnode-0\n172.20.0.10\tnode-p\n")
    as_name = doctor(environ=applied(tmp_path, **named_primary("node-p")), root=tmp_path)
    as_ip = doctor(environ=applied(tmp_path, **named_primary("172.20.0.10")), root=tmp_path)

    def verdicts(found: list[Finding]) -> set[tuple[str, str]]:
        return {(f.code, f.severity) for f in found}

    assert verdicts(as_name) == verdicts(as_ip)
    assert ("primary-addr-management", "error") in verdicts(as_ip)


def test_a_named_primary_on_rank_0_is_not_refused_by_the_contract(tmp_path: Path) -> None:
    """PRIMARY_ADDR=node-0 on the primary: only a resolver can compare it with NODE_ADDR."""
    b0(tmp_path)
    found = doctor(environ=applied(tmp_path, PRIMARY_ADDR="node-0", MASTER_ADDR="node-0",
                                   HOST_NODE_ADDR="node-0:29500"), root=tmp_path)
    assert not [f for f in found if f.severity == "error"], [str(f) for f in found]


# -- the resolver ------------------------------------------------------------------------------


def test_system_resolver_answers_for_localhost() -> None:
    resolution = system_resolve("localhost")
    assert resolution.status == "resolved", resolution
    assert "127.0.0.1" in resolution.addresses or "::1" in resolution.addresses


def test_system_resolver_gives_up_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """getaddrinfo itself blocked (the C call of a resolver that never answers): the caller
    gets ``unknown`` after the deadline, and the blocked thread never holds up the exit."""
    release = threading.Event()

    def blocked(*args: object, **kwargs: object) -> list[object]:
        release.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", blocked)
    start = time.monotonic()
    resolution = system_resolve("node-0", deadline=0.2)
    assert time.monotonic() - start < 2
    release.set()
    assert resolution.status == "unknown" and "no answer within 0.2 s" in resolution.error
    stuck = [t for t in threading.enumerate() if t.name == "clusterenv-resolve"]
    assert all(t.daemon for t in stuck)


def test_snapshot_hosts_resolution() -> None:
    hosts = {"node-0": ["10.65.0.2"]}
    assert from_hosts("Node-0.", hosts, where="/etc/hosts").addresses == ("10.65.0.2",)
    assert from_hosts("10.65.0.7", hosts, where="/etc/hosts").addresses == ("10.65.0.7",)
    missing = from_hosts("node-1", hosts, where="/etc/hosts")
    assert missing.status == "unknown" and not missing.addresses


# -- what doctor assumed, and a cluster node without cluster variables -------------------------


@pytest.mark.parametrize(
    ("interfaces", "environ", "warned"),
    [
        # Runpod's layout: eth0 on 172.16.0.0/12 beside ens1.
        ({"eth0": "172.20.0.11/16", "ens1": "10.65.0.3/24"}, {}, True),
        # Several cluster NICs (IPoIB).
        ({"eth0": "192.168.1.5/24", "ib0": "10.10.0.5/16", "ib1": "10.11.0.5/16"}, {}, True),
        # A laptop, a Docker container, a VM with one NIC: nothing to say.
        ({"wlan0": "192.168.1.23/24"}, {}, False),
        ({"eth0": "172.17.0.2/16"}, {}, False),
        ({"ens33": "192.168.56.10/24"}, {}, False),
        # One node on purpose.
        ({"eth0": "172.20.0.11/16", "ens1": "10.65.0.3/24"}, {"CLUSTERENV_SOURCE": "local"},
         False),
        # Variables present: not the local default.
        ({"eth0": "172.20.0.11/16", "ens1": "10.65.0.3/24"}, dict(B0_ENV), False),
    ],
)
def test_cluster_node_without_cluster_variables(
    tmp_path: Path, interfaces: dict[str, str], environ: dict[str, str], warned: bool
) -> None:
    host = HostBuilder(tmp_path).loopback()
    for name, address in interfaces.items():
        host.interface(name, addresses=[address])
    found = by_code(doctor(environ=environ, root=tmp_path), "cluster-variables-missing")
    assert (found is not None) == warned, found
    if found is not None:
        assert found.severity == "warning"
        assert "PRIMARY_ADDR/MASTER_ADDR, NODE_RANK, NUM_NODES" in found.title
        assert "every node would train alone" in found.title
        evidence = " ".join(found.evidence)
        assert all(f"interface {name}" in evidence for name in interfaces
                   if name.startswith(("ens", "ib")))


def test_doctor_says_what_it_assumed(tmp_path: Path) -> None:
    from clusterenv.diagnosis import diagnose_with_plan
    from clusterenv.diagnosis.assumed import assumptions

    b0(tmp_path)
    facts = diagnose_with_plan(environ=B0_ENV, root=tmp_path).facts
    assumed = assumptions(facts)
    assert assumed.source.startswith("runpod (")
    assert assumed.layout == "2 nodes x 8 processes per node (16 in the job)"
    assert assumed.node == "rank 0; rendezvous 10.65.0.2:29500"
    assert assumed.cluster_interface == "ens1 (10.65.0.2): ens1 holds NODE_ADDR 10.65.0.2"
    assert assumed.rdma == "none found" and assumed.gpus == "8 visible"

    local = diagnose_with_plan(environ={}, root=tmp_path).facts
    assert assumptions(local).source.endswith("the local default, this machine alone")
    assert assumptions(local).cluster_interface == "not needed on one node"


def test_a_named_rendezvous_host_still_finds_the_cluster_interface(tmp_path: Path) -> None:
    """MASTER_ADDR=node-0 (as under Slurm) and no NODE_ADDR: the name is resolved and its
    subnet picks the interface, so the plan is not left empty."""
    b0(tmp_path, hosts=HOSTS_HEAD + "10.65.0.2\tnode-0\n10.65.0.7\tnode-7\n")
    generic = {"MASTER_ADDR": "node-7", "MASTER_PORT": "29500", "NODE_RANK": "1",
               "NUM_NODES": "2", "NUM_TRAINERS": "8"}
    plan = plan_nccl_env(generic, root=tmp_path)
    assert plan.env["NCCL_SOCKET_IFNAME"] == "ens1", plan
    reason = next(c.reason for c in plan.changes if c.name == "NCCL_SOCKET_IFNAME")
    assert "(node-7 resolves to 10.65.0.7)" in reason
    # A name the snapshot cannot resolve leaves it unset, and says why.
    unknown = plan_nccl_env({**generic, "MASTER_ADDR": "node-9"}, root=tmp_path)
    assert "NCCL_SOCKET_IFNAME" not in unknown.env
    assert "cluster-interface-unknown" in {f.code for f in unknown.findings}


def test_a_diagnosis_returns_its_result_and_leaves_the_facts_alone(tmp_path: Path) -> None:
    """Facts hold facts: the NCCL answer comes back in the diagnosis, and a new set of facts
    with one part replaced is a new object."""
    from clusterenv._facts import Facts
    from clusterenv._root import Root
    from clusterenv.diagnosis import diagnose_facts
    from clusterenv.nccl.version import NcclVersion

    b0(tmp_path)
    facts = Facts(environ=B0_ENV, root=Root(tmp_path))
    diagnosis = diagnose_facts(facts)
    assert not hasattr(facts, "bootstrap")
    assert diagnosis.bootstrap is not None and diagnosis.bootstrap.current.by == "prediction"
    assert diagnosis.facts is facts  # a snapshot is never asked, so nothing was replaced
    reported = (NcclVersion((2, 19, 3), "libnccl.so.2 (ncclGetVersion)"),)
    derived = facts.derive(nccl_reported=reported)
    assert derived.nccl_versions[0] == reported[0] and facts.nccl_versions[:1] != reported
    assert derived.network is facts.network  # detected once, carried over
    planned = facts.derive(environ={**B0_ENV, "NCCL_SOCKET_IFNAME": "ens1"})
    assert planned.config == facts.config and facts.environ is B0_ENV
