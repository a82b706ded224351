"""NetworkInterfaces against a real kernel: a network namespace with veth, bridge and dummy links.

Detection runs inside the namespace (``ip netns exec`` also mounts the namespace's own /sys) and
is compared with ``ip -j addr`` there; then ``clusterenv capture`` runs inside and the snapshot is
replayed outside. Needs root and ``ip netns``: skips with the reason elsewhere, fails under
``CI=true`` (CI runs as root and must run it).
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import clusterenv
from clusterenv.network import NetworkInterfaces, route_interface
from tests.conftest import skip_or_fail

pytestmark = pytest.mark.netns

SOURCE_DIR = str(Path(clusterenv.__file__).resolve().parents[1])
PROBES = ("10.77.0.9", "10.78.0.9", "10.79.0.9", "8.8.8.8", "fd00:77::9", "127.0.0.1")
DETECT = f"""
import json
from clusterenv.network import NetworkInterfaces, route_interface
print(json.dumps({{
    "network": NetworkInterfaces.detect().to_dict(),
    "routes": {{ip: route_interface(ip) for ip in {PROBES!r}}},
}}))
"""


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"`ip netns` is unavailable: {probe.stderr.strip()}"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


@pytest.fixture
def namespace() -> Iterator[str]:
    """A namespace with lo, a veth pair (ve1 on bridge br0), a dummy link that stays down,
    IPv4 and IPv6 addresses and MTU 9000 on ve0; always deleted afterwards."""
    reason = _unavailable()
    if reason is not None:
        skip_or_fail(reason)
    name = f"ce-net-{os.getpid()}-{secrets.token_hex(3)}"
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "link", "add", "ve0", "type", "veth", "peer", "name", "ve1")
        _ip("-n", name, "link", "add", "br0", "type", "bridge")
        _ip("-n", name, "link", "set", "ve1", "master", "br0")
        # Kernels built without the dummy driver still have ifb, which behaves the same here.
        if _ip("-n", name, "link", "add", "dm0", "type", "dummy", check=False).returncode:
            _ip("-n", name, "link", "add", "dm0", "type", "ifb")
        _ip("-n", name, "link", "set", "ve0", "mtu", "9000")
        _ip("-n", name, "addr", "add", "10.77.0.2/24", "dev", "ve0")
        _ip("-n", name, "addr", "add", "fd00:77::2/64", "dev", "ve0", "nodad")
        _ip("-n", name, "addr", "add", "10.78.0.1/24", "dev", "br0")
        _ip("-n", name, "addr", "add", "10.79.0.2/24", "dev", "dm0")
        for link in ("ve0", "ve1", "br0"):
            _ip("-n", name, "link", "set", link, "up")
        yield name
    finally:
        _ip("netns", "del", name, check=False)
    assert name not in _ip("netns", "list").stdout


def _ip_addr(name: str) -> dict[str, dict[str, Any]]:
    """``ip -j addr`` in the namespace: name -> operstate, mtu, ipv4, ipv6 (CIDR strings)."""
    out = {}
    for link in json.loads(_ip("-n", name, "-j", "addr").stdout):
        cidrs = [(a["family"], f"{a['local']}/{a['prefixlen']}") for a in link.get("addr_info", [])]
        out[link["ifname"]] = {
            "operstate": link["operstate"].lower(),
            "mtu": link["mtu"],
            "ipv4": sorted(c for family, c in cidrs if family == "inet"),
            "ipv6": sorted(c for family, c in cidrs if family == "inet6"),
        }
    return out


def _settled(name: str) -> dict[str, dict[str, Any]]:
    """``ip -j addr`` once the links are up and have their link-local addresses (carrier and
    IPv6 autoconfiguration are asynchronous: a bridge comes up a moment after its port)."""
    previous: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        current = _ip_addr(name)
        ready = all(
            current.get(link, {}).get("operstate") == "up"
            and any(a.startswith("fe80:") for a in current[link]["ipv6"])
            for link in ("ve0", "ve1", "br0")
        )
        if ready and current == previous:
            return current
        previous = current
        time.sleep(0.2)
    raise AssertionError(f"the namespace did not settle: {previous}")


def _in_namespace(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SOURCE_DIR}
    return subprocess.run(
        ["ip", "netns", "exec", name, sys.executable, *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=120,
    )


def _facts(network: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        i["name"]: {
            "operstate": i["operstate"],
            "mtu": i["mtu"],
            "ipv4": sorted(i["ipv4"]),
            "ipv6": sorted(i["ipv6"]),
        }
        for i in network["interfaces"]
    }


def test_detect_agrees_with_ip_and_replays_from_a_capture(namespace: str, tmp_path: Path) -> None:
    expected = _settled(namespace)
    inside = _in_namespace(namespace, "-c", DETECT)
    assert inside.returncode == 0, inside.stderr
    detected = json.loads(inside.stdout)
    assert _ip_addr(namespace) == expected, "the namespace changed while it was read"

    # What the kernel says and what clusterenv says agree: the API and `clusterenv show --json`.
    assert _facts(detected["network"]) == expected
    shown = _in_namespace(namespace, "-m", "clusterenv", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    assert _facts(json.loads(shown.stdout)["network"]) == expected

    network = {i["name"]: i for i in detected["network"]["interfaces"]}
    assert set(network) == {"lo", "ve0", "ve1", "br0", "dm0"}
    assert network["ve0"]["mtu"] == 9000 and network["ve0"]["is_virtual"] is True
    assert network["ve0"]["speed_mbps"] == 10000  # veth reports 10 Gb/s
    assert network["ve0"]["is_up"] is True and network["ve0"]["has_routable_address"] is True
    assert network["dm0"]["operstate"] == "down" and network["dm0"]["is_up"] is False
    assert network["dm0"]["ipv4"] == ["10.79.0.2/24"]
    assert network["br0"]["is_bridge"] is True and network["br0"]["bridge_ports"] == ["ve1"]
    assert network["ve1"]["master"] == "br0"
    assert network["lo"]["is_loopback"] is True and network["lo"]["is_up"] is True
    assert detected["routes"] == {
        "10.77.0.9": "ve0",
        "10.78.0.9": "br0",
        "10.79.0.9": None,  # dm0 is down: the kernel installed no route for its subnet
        "8.8.8.8": None,  # no default route in the namespace
        "fd00:77::9": "ve0",
        "127.0.0.1": "lo",
    }

    # Capture inside with the real CLI, replay outside: the same answers.
    snapshot = tmp_path / "snapshot"
    captured = _in_namespace(namespace, "-m", "clusterenv", "capture", str(snapshot), "--json")
    assert captured.returncode == 0, captured.stderr
    assert json.loads(captured.stdout)["interfaces"] == ["br0", "dm0", "lo", "ve0", "ve1"]
    replayed = NetworkInterfaces.detect(root=snapshot)
    live = NetworkInterfaces.detect()
    assert replayed.names != live.names  # outside, the host's own interfaces are different

    def comparable(net: dict[str, Any]) -> list[dict[str, Any]]:
        # MACs are scrubbed, and with them the link-local addresses built from them (EUI-64).
        return [
            {
                **i,
                "mac": None,
                "ipv6": [a for a in i["ipv6"] if not ipaddress.ip_interface(a).is_link_local],
            }
            for i in net["interfaces"]
        ]

    assert comparable(replayed.to_dict()) == comparable(detected["network"])
    replayed_show = _in_namespace(
        namespace, "-m", "clusterenv", "show", "--json", "--root", str(snapshot)
    )
    assert replayed_show.returncode == 0, replayed_show.stderr
    assert comparable(json.loads(replayed_show.stdout)["network"]) == comparable(
        detected["network"]
    )
    assert {ip: route_interface(ip, root=snapshot) for ip in PROBES} == detected["routes"]
    macs = {i.mac for i in replayed if not i.is_loopback}
    assert all(m is not None and m.startswith("02:00:00:00:") for m in macs)
    # Scrubbing keeps which links share an address (a bridge takes its port's MAC).
    live_macs = {i["mac"] for i in detected["network"]["interfaces"] if not i["is_loopback"]}
    assert len(macs) == len(live_macs) and not macs & live_macs
    assert (replayed.get("br0").mac == replayed.get("ve1").mac) == (  # type: ignore[union-attr]
        network["br0"]["mac"] == network["ve1"]["mac"]
    )
