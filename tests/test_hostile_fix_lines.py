"""Fix lines run nothing they name: every host- or user-derived word is quoted for the shell.

Linux allows any byte but ``/``, ``:`` and white space in an interface name, so ``$(id>X)``
is a legal one (``ip link add '$(id>X)' type veth`` works); RDMA device names come from sysfs,
and rendezvous values from the user. Two kinds of check:

- on host snapshots whose interfaces, RDMA devices and values are hostile, every fix that
  names such a word names it inside single quotes (a generic detector over every finding);
- in a real network namespace, the ``ip link set … up`` that doctor suggests for a cluster
  interface named ``$(id>X)`` is pasted into ``sh``: it brings that interface up and runs
  nothing, and the suggested ``export`` sets the variable to the name itself.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clusterenv import doctor
from clusterenv.findings import Finding
from clusterenv.testing import port
from tests.nccl_hosts import B0_ENV, route_table

HOSTILE = "$(id>X)"  # 7 bytes: a legal interface name
HOSTILE_DEV = "m$(id>Y)"
HOSTILE_NETDEV = "r`id>Z`"
HOSTILE_HOST = "h;id>W"


def _host(root: Path, *, cluster_up: bool = True) -> None:
    from clusterenv.testing import HostBuilder

    (
        HostBuilder(root)
        .loopback()
        .interface("eth0", addresses=["172.20.0.5/16"])
        .interface(HOSTILE, addresses=["10.65.0.2/24"], mtu=9000,
                   operstate="up" if cluster_up else "down")
        .interface(HOSTILE_NETDEV, addresses=["10.66.0.2/24"])
        .rdma_device(HOSTILE_DEV, port(state="DOWN", phys_state="Disabled",
                                       link_layer="Ethernet", netdev=HOSTILE_NETDEV))
        .rdma_device("mlx5_1", port(state="DOWN", phys_state="Polling",
                                    link_layer="Ethernet", netdev=HOSTILE_NETDEV))
        .rdma_device("mlx5_2", port(state="INIT", phys_state="LinkUp"))
        .gpus(8)
        .hostname("node-0")
        .file("etc/hosts", "127.0.0.1 localhost\n")
        .file("proc/net/route", route_table([("eth0", "0.0.0.0/0", "172.20.0.1"),
                                             ("eth0", "172.20.0.0/16", None)]))
    )


def _unquoted(fix: str, word: str) -> list[int]:
    """Where ``word`` appears in ``fix`` without single quotes right around it."""
    return [m.start() for m in re.finditer(re.escape(word), fix)
            if not (fix[m.start() - 1:m.start()] == "'" and fix[m.end():m.end() + 1] == "'")]


ENVIRONS = {
    "runpod": B0_ENV,
    "socket-set-elsewhere": {**B0_ENV, "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"},
    "hostile-primary-name": {**B0_ENV, "PRIMARY_ADDR": HOSTILE_HOST, "MASTER_ADDR": HOSTILE_HOST,
                             "HOST_NODE_ADDR": f"{HOSTILE_HOST}:29500"},
    "hostile-values": {**B0_ENV, "HOST_NODE_ADDR": "10.65.0.2:1;id>V", "PET_NNODES": "1:$(id>U)"},
}


@pytest.mark.parametrize("cluster_up", [True, False], ids=["up", "down"])
@pytest.mark.parametrize("name", list(ENVIRONS))
def test_every_fix_quotes_what_it_names(tmp_path: Path, name: str, cluster_up: bool) -> None:
    _host(tmp_path, cluster_up=cluster_up)
    findings: list[Finding] = doctor(ENVIRONS[name], root=tmp_path)
    fixes = [f.fix for f in findings if f.fix]
    assert fixes, [f.code for f in findings]
    named = 0
    for fix in fixes:
        for word in (HOSTILE, HOSTILE_DEV, HOSTILE_NETDEV, HOSTILE_HOST, "id>V", "$(id>U)"):
            named += fix.count(word)
            assert not _unquoted(fix, word), fix
    if name == "runpod":
        assert named, fixes  # the detector saw the names it guards


def test_capture_replay_line_is_quoted(tmp_path: Path) -> None:
    out = tmp_path / "snap $(id>X)"
    result = subprocess.run([sys.executable, "-m", "clusterenv", "capture", str(out)],
                            capture_output=True, text=True, timeout=120, check=False,
                            env={"PATH": "/usr/bin:/bin", "CLUSTERENV_NCCL_LIBRARY": "none"})
    line = next(x for x in result.stdout.splitlines() if x.startswith("replay it with: "))
    command = line.removeprefix("replay it with: ")
    shown = subprocess.run(["sh", "-c", f"set -- {command}; printf '%s\\n' \"$@\""],
                           cwd=tmp_path, capture_output=True, text=True, timeout=30, check=True)
    assert shown.stdout.splitlines()[-1] == str(out)
    assert not (tmp_path / "X").exists()


@pytest.mark.netns
def test_pasting_the_fixes_in_a_real_namespace(tmp_path: Path, netns_required: None) -> None:
    """The interface exists for real under that name; the fix brings it up and runs nothing."""
    ns = f"ce-fix-{abs(hash(tmp_path)) % 10**6}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", HOSTILE, "type", "veth", "peer", "name",
                        "peer0"], check=True)
        subprocess.run(["ip", "-n", ns, "addr", "add", "10.65.0.2/24", "dev", HOSTILE],
                       check=True)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CLUSTERENV_NCCL_LIBRARY": "none",
               **B0_ENV}
        result = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "clusterenv", "doctor", "--json"],
            capture_output=True, text=True, timeout=120, check=False, env=env, cwd=tmp_path)
        findings = json.loads(result.stdout)["findings"]
        down = next(f for f in findings if f["code"] == "cluster-interface-down")
        [up] = re.findall(r"`(ip link set [^`]*)`", down["fix"])
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", up], check=True, cwd=tmp_path,
                       timeout=30)
        state = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "dev", HOSTILE],
                               capture_output=True, text=True, check=True)
        assert "UP" in json.loads(state.stdout)[0]["flags"]
        exports = [m for f in findings for m in re.findall(r"export [A-Z_]+=(?:'[^']*'|\S+)",
                                                            f["fix"]) if HOSTILE in m]
        assert exports, [f["fix"] for f in findings]
        for line in exports:
            name = line.split()[1].split("=")[0]
            value = subprocess.run(["sh", "-c", f'{line}; printf %s "${name}"'], cwd=tmp_path,
                                   capture_output=True, text=True, timeout=30, check=True)
            assert value.stdout.lstrip("=") == HOSTILE
        assert not (tmp_path / "X").exists()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_nccl_log_fixes_quote_names_from_the_log(tmp_path: Path) -> None:
    """A log is outside text: interface and device names in it (NCCL prints them as the kernel
    and sysfs give them) reach nccl-log's fix lines quoted. Lines in NCCL's formats
    (``NET/Socket : Using [%d]%s:%s`` and ``Channel %02d : ... via NET/Socket/%d``)."""
    def info(msg: str, host: str) -> str:
        return f"{host}:100:100 [0] NCCL INFO {msg}"

    lines = []
    for host, addr in (("node1", "10.65.0.2"), ("node2", "10.65.0.3")):
        lines += [
            info(f"Bootstrap : Using {HOSTILE}:172.20.0.5<0>", host),
            info(f"NET/Socket : Using [0]ens1:{addr}<0> [1]{HOSTILE}:fe80::1%{HOSTILE}<0>",
                 host),
            info("Using network Socket", host),
            info("Channel 00 : 1[0] -> 0[0] [receive] via NET/Socket/1", host),
            info("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]m$(id>Y):1/RoCE ; OOB "
                 f"ens1:{addr}<0>", host),
        ]
    log = tmp_path / "nccl.log"
    log.write_text("\n".join(lines) + "\n")
    result = subprocess.run([sys.executable, "-m", "clusterenv", "nccl-log", "--json", str(log)],
                            capture_output=True, text=True, timeout=120, check=False)
    fixes = [f["fix"] for f in json.loads(result.stdout)["findings"] if f["fix"]]
    named = 0
    for fix in fixes:
        for word in (HOSTILE, "m$(id>Y)"):
            named += fix.count(word)
            assert not [i for i in re.finditer(re.escape(word), fix)
                        if fix[i.start() - 1:i.start()] not in ("'", "=")], fix
            for m in re.finditer(r"export [A-Z_]+=(?:'[^']*'|\S+)", fix):
                sh = subprocess.run(["sh", "-c", f"{m.group(0)}; true"], cwd=tmp_path,
                                    capture_output=True, text=True, timeout=30, check=True)
                assert sh.returncode == 0
    assert not (tmp_path / "X").exists() and not (tmp_path / "Y").exists()
    assert named, fixes
