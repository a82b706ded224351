"""Nothing is dropped silently for its size, and a snapshot that cannot be written says where
and why, keeping the previous one.

A hosts file of a 10,000-node cluster (generated here as cluster tooling writes one: an IPv4
and an IPv6 line per node with a short alias) is a real file of about 0.8 MiB; it is read, so
the checks that depend on it keep their verdicts. A file beyond its limit is named in the
capture's summary, in the snapshot, and as a finding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterenv import doctor
from clusterenv._root import SIZE_LIMITS
from clusterenv.capture import capture
from tests.nccl_hosts import B0_ENV, b0

HEAD = "127.0.0.1\tlocalhost\n127.0.1.1\tnode-0\n"  # node-0 on loopback: Gloo's certain failure


def cluster_hosts(nodes: int) -> str:
    """``/etc/hosts`` of a cluster of ``nodes``: one IPv4 and one IPv6 line per node."""
    lines = []
    for i in range(nodes):
        lines.append(f"10.{64 + i // 65536}.{i // 256 % 256}.{i % 256}\tnode-{i + 1:05d}."
                     f"cluster.internal node-{i + 1:05d}\n")
        lines.append(f"fd00::{i:x}\tnode-{i + 1:05d}-v6.cluster.internal\n")
    return "".join(lines)


def codes(root: Path) -> dict[str, str]:
    return {f.code: f.severity for f in doctor(B0_ENV, root=root)}


def test_a_hosts_file_of_ten_thousand_nodes_is_read(tmp_path: Path) -> None:
    hosts = HEAD + cluster_hosts(10_000)
    assert len(hosts.encode()) > 64 * 1024  # the old limit, which dropped it
    b0(tmp_path, hosts=hosts)
    found = codes(tmp_path)
    assert found.get("gloo-ifname-unset") == "error"
    assert "hostname-loopback" in found
    assert "file-too-large" not in found
    # The snapshot carries it whole, and the replay judges the same.
    out = capture(tmp_path / "snap", root=tmp_path)
    assert (out / "etc/hosts").read_text().count("\n") == hosts.count("\n")
    assert codes(out) == found


def test_a_file_over_its_limit_is_named_everywhere(tmp_path: Path) -> None:
    limit = SIZE_LIMITS["etc/hosts"]
    b0(tmp_path, hosts=HEAD + "#" * limit + "\n")
    found = {f.code: f for f in doctor(B0_ENV, root=tmp_path)}
    skipped = found["file-too-large"]
    assert skipped.severity == "warning" and skipped.title.startswith("/etc/hosts was not read")
    assert "gloo-ifname-unset" in skipped.fix
    printed = subprocess.run(
        [sys.executable, "-m", "clusterenv", "capture", str(tmp_path / "snap"), "--root",
         str(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    assert printed.returncode == 0, printed.stderr
    assert "left out: /etc/hosts is larger than 8 MiB" in printed.stdout
    recorded = json.loads((tmp_path / "snap/.clusterenv/host.json").read_text())
    assert recorded["skipped"] == {"etc/hosts": limit}
    # The replay of that snapshot says it too: its checks lack the file.
    assert "file-too-large" in codes(tmp_path / "snap")


@pytest.fixture
def small_filesystem(tmp_path: Path, netns_required: None) -> Path:
    """Where a small tmpfs is mounted, in a private mount namespace of the test's command."""
    mount = tmp_path / "fs"
    mount.mkdir()
    return mount


def _in_mount_namespace(mount: Path, options: str, script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (sh) in a new mount namespace where ``mount`` is a tmpfs."""
    shell = (f"mount -t tmpfs -o {options} tmpfs {mount} && {script}")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", shell],
                          capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "CLUSTERENV_NCCL_LIBRARY": "none"})


def test_a_full_disk_names_the_snapshot_and_keeps_the_previous_one(
    tmp_path: Path, small_filesystem: Path
) -> None:
    b0(tmp_path / "host", hosts=HEAD + cluster_hosts(1500))  # about 120 KiB of hosts
    clusterenv = f"{sys.executable} -m clusterenv"
    # The first capture fits; then the disk fills up, and the second cannot be written.
    result = _in_mount_namespace(
        small_filesystem, "size=2m",
        f"{clusterenv} capture {small_filesystem}/snap --root {tmp_path}/host >/dev/null && "
        f"md5sum {small_filesystem}/snap/etc/hosts && "
        f"(dd if=/dev/zero of={small_filesystem}/filler bs=4k 2>/dev/null; true) && "
        f"{clusterenv} capture {small_filesystem}/snap --root {tmp_path}/host; echo rc=$?; "
        f"md5sum {small_filesystem}/snap/etc/hosts; ls -a {small_filesystem}")
    out = result.stdout
    assert "rc=2" in out, out + result.stderr
    assert "Traceback" not in result.stderr
    assert f"{small_filesystem}/snap" in result.stderr and "No space left on device" in \
        result.stderr, result.stderr
    assert "standard output" not in result.stderr
    sums = [line.split()[0] for line in out.splitlines() if line.endswith("etc/hosts")]
    assert len(sums) == 2 and sums[0] == sums[1]  # the previous snapshot is intact
    leftovers = [x for x in out.splitlines() if ".capture-" in x or ".old." in x]
    assert "filler" in out
    assert leftovers == []


def test_a_read_only_filesystem_names_the_snapshot(
    tmp_path: Path, small_filesystem: Path
) -> None:
    b0(tmp_path / "host")
    result = _in_mount_namespace(
        small_filesystem, "size=256k,ro",
        f"{sys.executable} -m clusterenv capture {small_filesystem}/snap --root "
        f"{tmp_path}/host; echo rc=$?")
    assert "rc=2" in result.stdout, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"{small_filesystem}/snap" in result.stderr
    assert "Read-only file system" in result.stderr
