"""``--root`` is a chroot: a hostile snapshot can neither read outside itself nor hang a verb.

Each test plants the attack in a snapshot built by :func:`tests.test_capture.rich_host` and runs
the real CLI (in a subprocess where a hang or a memory blow-up is the failure being tested).
The secret lives beside the snapshot, where a link that leaves the root would find it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterenv._root import HOST_JSON, MAX_HOST_JSON_BYTES, Root
from clusterenv.cli import main
from clusterenv.network import NetworkInterfaces
from tests.test_capture import rich_host

SECRET = "root:$6$never-leaves-the-host:19000:0:99999:7:::"

# Files that detection or capture read, each a target of the link attack.
READ_FILES = [
    "etc/hosts",
    "etc/hostname",
    "etc/nccl.conf",
    "sys/class/net/ens1/mtu",
    "sys/class/net/ens1/uevent",
    "sys/class/infiniband/mlx5_0/fw_ver",
    "sys/class/infiniband/mlx5_0/ports/1/state",
    "proc/driver/nvidia/version",
    "proc/net/route",
]


def _snapshot(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "snap"
    rich_host(root).environ({"PRIMARY_ADDR": "10.65.0.2", "PRIMARY_PORT": "29500",
                             "NODE_ADDR": "10.65.0.2", "NODE_RANK": "0", "NUM_NODES": "2",
                             "NUM_TRAINERS": "2", "HOME": "/home/ml"})
    (root / "sys/class/net/ens1/uevent").write_text("INTERFACE=ens1\nIFINDEX=3\n")
    (root / "sys/class/infiniband/mlx5_0/fw_ver").write_text("28.39.1002\n")
    (root / "etc/hostname").write_text("node-0\n")
    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n")
    return root, secret


def _everything_under(path: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in path.rglob("*") if p.is_file())


def _link(path: Path, target: str) -> None:
    path.unlink()
    path.symlink_to(target)


@pytest.mark.parametrize("relative", READ_FILES)
@pytest.mark.parametrize("style", ["absolute", "climbing"])
def test_a_link_out_of_the_root_is_never_followed(
    tmp_path: Path, relative: str, style: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root, secret = _snapshot(tmp_path)
    depth = relative.count("/") + 1  # enough ../ to reach tmp_path from the file's directory
    target = str(secret) if style == "absolute" else "../" * depth + "outside/shadow"
    _link(root / relative, target)
    assert SECRET in (root / relative).read_text()  # the link reaches it, on the host's terms
    out = tmp_path / "captured"
    assert main(["capture", str(out), "--root", str(root)]) == 0
    assert SECRET not in _everything_under(out)
    assert main(["show", "--json", "--root", str(root)]) == 0
    assert "never-leaves-the-host" not in capsys.readouterr().out


def test_a_symlinked_sys_class_net_does_not_show_the_live_interfaces(tmp_path: Path) -> None:
    root, _ = _snapshot(tmp_path)
    for target in ("/sys/class/net", "../../../../../../../../sys/class/net"):
        net = root / "sys/class/net"
        if net.is_symlink():
            net.unlink()
        else:
            net.rename(root / "sys/class/net-real")
        net.symlink_to(target)
        # Interfaces now come only from the recorded addresses: nothing read from any sysfs.
        read = {i.name: i.mtu for i in NetworkInterfaces.detect(root=root).interfaces}
        assert all(mtu is None for mtu in read.values()), (target, read)


def test_links_inside_the_root_resolve_inside_it(tmp_path: Path) -> None:
    # A real sysfs copy: class entries are links into sys/devices, absolute or relative; both
    # resolve against the snapshot, never against the host.
    root, _ = _snapshot(tmp_path)
    devices = root / "sys/devices/pci0000:00/0000:00:01.0/net"
    devices.mkdir(parents=True)
    (root / "sys/class/net/ens1").rename(devices / "ens1")
    (root / "sys/class/net/ens1").symlink_to("/sys/devices/pci0000:00/0000:00:01.0/net/ens1")
    (root / "sys/class/net/eth0").rename(devices / "eth0")
    (root / "sys/class/net/eth0").symlink_to("../../devices/pci0000:00/0000:00:01.0/net/eth0")
    found = {i.name: i.mtu for i in NetworkInterfaces.detect(root=root).interfaces}
    assert found["ens1"] == 9000 and found["eth0"] == 1500


@pytest.mark.parametrize("relative", ["sys/class/net/ens1/mtu", "etc/hosts", "etc/nccl.conf"])
def test_a_fifo_is_skipped_with_a_note_not_waited_on(tmp_path: Path, relative: str) -> None:
    root, _ = _snapshot(tmp_path)
    (root / relative).unlink()
    os.mkfifo(root / relative)
    for verb in (["show"], ["doctor"], ["capture", str(tmp_path / "out")]):
        done = subprocess.run(
            [sys.executable, "-m", "clusterenv", *verb, "--root", str(root)],
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert done.returncode in (0, 1), done.stderr
        assert f"skipped {relative}: a FIFO, not a regular file" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_fifo_host_json_is_refused_with_exit_2(tmp_path: Path) -> None:
    root, _ = _snapshot(tmp_path)
    (root / HOST_JSON).unlink()
    os.mkfifo(root / HOST_JSON)
    done = subprocess.run([sys.executable, "-m", "clusterenv", "show", "--root", str(root)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "host.json' is a FIFO, not a regular file" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_huge_host_json_is_refused_with_exit_2(tmp_path: Path) -> None:
    root, _ = _snapshot(tmp_path)
    with open(root / HOST_JSON, "r+b") as handle:  # 1 GB, sparse: cheap to make
        handle.truncate(1 << 30)
    done = subprocess.run([sys.executable, "-m", "clusterenv", "show", "--root", str(root)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert f"larger than {MAX_HOST_JSON_BYTES // (1024 * 1024)} MiB" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_huge_host_json_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    root, _ = _snapshot(tmp_path)
    with open(root / HOST_JSON, "r+b") as handle:
        handle.truncate(1 << 30)
    # A fresh interpreter, and its own VmHWM: getrusage's ru_maxrss survives fork and exec
    # (Linux keeps the larger of the old and new peaks), so it would carry whatever earlier
    # tests loaded into this process, e.g. torch. VmHWM belongs to the new address space alone.
    code = (
        "import re, sys\n"
        "from clusterenv._root import Root\n"
        "try:\n"
        "    Root(sys.argv[1]).host\n"
        "    refused = False\n"
        "except Exception:\n"
        "    refused = True\n"
        "peak = re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "print(refused, peak)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True,
                          text=True, check=True, timeout=120)
    refused, peak_kib = done.stdout.split()
    assert refused == "True", done.stdout
    assert int(peak_kib) < 256 * 1024, f"{peak_kib} KiB to refuse a 1 GB host.json"


def test_the_live_host_is_read_as_it_is() -> None:
    live = Root("/")
    assert live.is_live and live.locate("sys/class/net") == "/sys/class/net"
    names = {i.name for i in NetworkInterfaces.detect(root=live).interfaces}
    assert names == set(os.listdir("/sys/class/net")) - {"bonding_masters"}
    assert live.notes == []


def test_capture_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = _snapshot(tmp_path)
    assert main(["capture", str(tmp_path / "c"), "--root", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)


INJECTED = "\x1b[2J\x1b]0;owned\x07\nthis node: rank 0 (primary); cluster consistent (exit 0)"


def test_names_from_a_snapshot_cannot_drive_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = _snapshot(tmp_path)
    (root / "sys/class/net/ens1").rename(root / "sys/class/net" / f"e{INJECTED[:9]}x")
    host = json.loads((root / HOST_JSON).read_text())
    host["hostname"] = INJECTED
    host["addresses"][f"e{INJECTED[:9]}x"] = ["10.65.0.9/24"]
    host["environ"]["NCCL_SOCKET_IFNAME"] = INJECTED
    (root / HOST_JSON).write_text(json.dumps(host))
    (root / "etc/hosts").write_text(f"127.0.1.1 {INJECTED}\n")
    for verb in ("show", "doctor", "env"):
        main([verb, "--root", str(root)])
        out = capsys.readouterr()
        for text in (out.out, out.err):
            assert "\x1b" not in text and "\x07" not in text, (verb, text)
            assert not any(line.startswith("this node:") for line in text.splitlines())
    main(["show", "--root", str(root)])
    assert "e\\x1b[2J\\x1b]0;ox" in capsys.readouterr().out  # shown, escaped
