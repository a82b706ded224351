"""A host snapshot as one file, through the real CLI: ``clusterenv capture node3.tar.gz`` writes
it, ``--root node3.tar.gz`` replays it exactly as the directory, and a hostile archive (built
here with :mod:`tarfile`, as an attacker would) can neither write outside its private
temporary directory nor exhaust the machine: unsafe members are skipped with a note, and an
archive too big for any snapshot is refused as a whole, naming the file (exit 2).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from clusterenv._cli._archive import MAX_ARCHIVE_STREAM_BYTES, MAX_MEMBERS, MAX_UNPACKED_BYTES
from clusterenv.testing import HostBuilder, port
from tests.simcluster import base_env

REPO = Path(__file__).resolve().parents[1]
SECRET = "archive-secret-never-written"


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, with its own TMPDIR so that what it leaves behind can be seen."""
    scratch = tmp_path / "tmpdir"
    scratch.mkdir(exist_ok=True)
    env = {**base_env(), "TMPDIR": str(scratch)}
    return subprocess.run([sys.executable, "-m", "clusterenv", *args], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120, check=False)


def left_behind(tmp_path: Path) -> list[str]:
    return sorted(os.listdir(tmp_path / "tmpdir"))


def node(root: Path) -> Path:
    """A two-node Runpod member with a bond (its ``master`` links), RoCE and a secret."""
    (HostBuilder(root).loopback()
     .interface("eth0", addresses=["172.20.0.5/16"], speed=10000)
     .interface("ens1", addresses=["10.65.0.3/24"], mtu=9000, speed=100000)
     .interface("ens2f0", mac="b8:3f:d2:00:00:01").interface("ens2f1", mac="b8:3f:d2:00:00:01")
     .interface("bond0", kind="bond", physical=False, slaves=["ens2f0", "ens2f1"],
                addresses=["10.82.0.3/29"])
     .rdma_device("mlx5_0", port(link_layer="Ethernet", netdev="ens1", rate="100 Gb/sec"))
     .hostname("node-1")
     .environ({"PRIMARY_ADDR": "10.65.0.2", "PRIMARY_PORT": "29500", "NODE_ADDR": "10.65.0.3",
               "NODE_RANK": "1", "NUM_NODES": "2", "NUM_TRAINERS": "1",
               "HOST_NODE_ADDR": "10.65.0.2:29500", "NCCL_IB_TOKEN": SECRET}))
    return root


def without_versions(doc: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in doc.items() if k != "versions"}


def test_capture_writes_one_file_that_replays_as_the_directory(tmp_path: Path) -> None:
    snapshot = node(tmp_path / "node1")
    result = cli(tmp_path, "capture", "--root", str(snapshot), "node1.tar.gz")
    assert result.returncode == 0, result.stderr
    archive = tmp_path / "node1.tar.gz"
    assert f"wrote host snapshot to {archive}" in result.stdout
    assert "replay it with: clusterenv doctor --root node1.tar.gz" in result.stdout
    with tarfile.open(archive) as tar:  # one directory named after the file, shareable modes
        members = tar.getmembers()
    assert {m.name.split("/")[0] for m in members} == {"node1"}
    assert all(m.uid == 0 and m.uname == "" and m.mode in (0o644, 0o755) for m in members)
    assert any(m.issym() and m.name.endswith("/master") for m in members)
    assert SECRET.encode() not in tar_bytes(archive)
    # The same capture as a directory reads the same (a capture scrubs MACs: compare like
    # with like).
    assert cli(tmp_path, "capture", "--root", str(snapshot), "node1-dir").returncode == 0
    for verb in ("doctor", "show"):
        from_dir = cli(tmp_path, verb, "--json", "--no-nccl", "--root", "node1-dir")
        from_file = cli(tmp_path, verb, "--json", "--no-nccl", "--root", "node1.tar.gz")
        assert from_file.returncode == from_dir.returncode, from_file.stderr
        assert without_versions(json.loads(from_file.stdout)) == \
            without_versions(json.loads(from_dir.stdout))
    text = cli(tmp_path, "doctor", "--no-nccl", "--root", "node1.tar.gz")
    assert "source: runpod" in text.stdout and text.stderr == ""
    assert left_behind(tmp_path) == []


def tar_bytes(archive: Path) -> bytes:
    out = b""
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isreg():
                handle = tar.extractfile(member)
                assert handle is not None
                out += handle.read()
    return out


def test_an_archive_made_with_tar_reads_the_same_with_or_without_a_top_directory(
        tmp_path: Path) -> None:
    snapshot = node(tmp_path / "node1")
    expected = json.loads(cli(tmp_path, "doctor", "--json", "--no-nccl", "--root",
                              str(snapshot)).stdout)
    with tarfile.open(tmp_path / "inside.tgz", "w:gz") as tar:
        tar.add(snapshot, arcname="some-other-name")
    with tarfile.open(tmp_path / "flat.tar", "w") as tar:
        tar.add(snapshot, arcname=".")
    with tarfile.open(tmp_path / "xz.tar.xz", "w:xz") as tar:
        tar.add(snapshot, arcname="node1")
    for name in ("inside.tgz", "flat.tar", "xz.tar.xz"):
        result = cli(tmp_path, "doctor", "--json", "--no-nccl", "--root", name)
        assert result.returncode == 1, result.stderr
        assert without_versions(json.loads(result.stdout)) == without_versions(expected), name


def test_capture_replaces_an_earlier_snapshot_archive_but_no_other_file(tmp_path: Path) -> None:
    snapshot = node(tmp_path / "node1")
    assert cli(tmp_path, "capture", "--root", str(snapshot), "n.tar.gz").returncode == 0
    assert cli(tmp_path, "capture", "--root", str(snapshot), "n.tar.gz").returncode == 0
    precious = tmp_path / "data.tar.gz"
    with tarfile.open(precious, "w:gz") as tar:
        tar.add(REPO / "README.md", arcname="README.md")
    before = precious.read_bytes()
    result = cli(tmp_path, "capture", "--root", str(snapshot), "data.tar.gz")
    assert result.returncode == 2
    assert "refusing to overwrite 'data.tar.gz': it is not a snapshot archive" in \
        " ".join(result.stderr.split())
    assert precious.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# -- hostile archives -----------------------------------------------------------------------


def add(tar: tarfile.TarFile, name: str, data: bytes = b"", **fields: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if data else None)


def hostile(tmp_path: Path, name: str = "evil.tar.gz") -> tuple[Path, Path]:
    """An archive holding a good snapshot plus one of every unsafe member, and the directory
    outside it that nothing may touch."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("OUTSIDE-CONTENT\n")
    snapshot = node(tmp_path / "good")
    archive = tmp_path / name
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(snapshot, arcname=".")
        # A link out, then a file through it: extracting naively writes outside/pwned.
        add(tar, "escape", type=tarfile.SYMTYPE, linkname=str(outside))
        add(tar, "escape/pwned", b"written through a link\n")
        add(tar, "../dotdot-pwned", b"x\n")
        add(tar, f"{outside}/absolute-pwned", b"x\n")
        # A file whose content is read through a link that climbs out of the snapshot.
        add(tar, "etc/hostname", type=tarfile.SYMTYPE, linkname="../../../../../../../../"
            f"{str(outside).lstrip('/')}/secret")
        add(tar, "etc/nccl.conf", type=tarfile.SYMTYPE, linkname=f"{outside}/secret")
        add(tar, "dev/infiniband/uverbs9", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        add(tar, "dev/fifo", type=tarfile.FIFOTYPE)
        add(tar, "hardlink-out", type=tarfile.LNKTYPE, linkname=f"{outside}/secret")
        add(tar, "setuid-file", b"#!/bin/sh\n", mode=0o4755)
    return archive, outside


def test_a_hostile_archive_writes_nothing_outside_and_reads_nothing_outside(
        tmp_path: Path) -> None:
    archive, outside = hostile(tmp_path)
    result = cli(tmp_path, "show", "--no-nccl", "--root", archive.name)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(outside)) == ["secret"]
    assert not (tmp_path / "dotdot-pwned").exists()
    assert "OUTSIDE-CONTENT" not in result.stdout + result.stderr
    notes = [line for line in result.stderr.splitlines() if "note:" in line]
    for expected in ("'escape/pwned' in the archive: its path goes through a link",
                     "'../dotdot-pwned' in the archive: a '..' in its name",
                     "absolute-pwned' in the archive: an absolute name",
                     "'dev/infiniband/uverbs9' in the archive: a device",
                     "'dev/fifo' in the archive: a FIFO",
                     "'hardlink-out' in the archive: a hard link to nothing unpacked"):
        assert any(expected in line for line in notes), (expected, notes)
    # The snapshot itself still replays (the good part was read).
    assert "10.65.0.3" in result.stdout
    assert left_behind(tmp_path) == []


def full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is already full: a process writing to it blocks until it is read."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"x" * 4096)
    os.set_blocking(write_end, True)
    return read_end, write_end


def test_the_unpacked_snapshot_is_private_and_removed_on_ctrl_c(tmp_path: Path) -> None:
    # Look inside while it exists: doctor's output goes to a pipe that is already full, so the
    # command stops at its first write, after it unpacked and read the archive.
    archive, _ = hostile(tmp_path)
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    env = {**base_env(), "TMPDIR": str(scratch)}
    env.pop("PYTHONUNBUFFERED", None)
    read_end, write_end = full_pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterenv", "doctor", "--no-nccl", "--root", archive.name],
        cwd=tmp_path, env=env, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    try:
        wchan = Path(f"/proc/{proc.pid}/wchan")
        for _ in range(600):  # until it waits to write: everything is unpacked by then
            # pipe_write, anon_pipe_write or pipe_wait_writable, as kernels name it
            if proc.poll() is not None or "pipe" in wchan.read_text():
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        (unpacked,) = [p for p in scratch.iterdir() if p.name.startswith("clusterenv-snapshot-")]
        assert unpacked.stat().st_mode & 0o777 == 0o700
        kinds = set()
        for path in unpacked.rglob("*"):
            mode = path.lstat().st_mode
            kinds.add(stat.S_IFMT(mode))
            assert stat.S_IFMT(mode) in (stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK), path
            assert not mode & 0o7000, path  # no setuid, setgid or sticky bit
        assert kinds == {stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK}
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the command ends and removes it
        time.sleep(1)
        with os.fdopen(read_end, "rb") as reader:  # what it still writes at exit
            reader.read()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert left_behind(tmp_path) == []


def test_what_a_killed_command_left_behind_is_removed_by_the_next(tmp_path: Path) -> None:
    # SIGKILL leaves no chance to clean up: the next command removes the directories of
    # processes that no longer run, and nothing else.
    scratch = tmp_path / "tmpdir"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = scratch / f"clusterenv-snapshot-{dead.stdout.strip()}-abc123"
    (stale / "sys").mkdir(parents=True)
    alive = scratch / f"clusterenv-snapshot-{os.getpid()}-def456"
    alive.mkdir()
    unrelated = scratch / "clusterenv-snapshot-notapid"
    unrelated.mkdir()
    assert cli(tmp_path, "capture", "--root", str(node(tmp_path / "n")), "n.tgz").returncode == 0
    assert cli(tmp_path, "doctor", "--root", "n.tgz").returncode == 1
    assert left_behind(tmp_path) == sorted([alive.name, unrelated.name])


def test_an_oversized_member_reads_as_oversized_not_truncated(tmp_path: Path) -> None:
    snapshot = node(tmp_path / "good")
    archive = tmp_path / "big.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(snapshot, arcname=".")
        hosts = b"10.65.0.2 node-0\n" * ((10 << 20) // 17)  # about 10 MiB, over its 8 MiB cap
        add(tar, "etc/hosts", hosts)
    result = cli(tmp_path, "doctor", "--json", "--no-nccl", "--root", archive.name)
    assert result.returncode in (0, 1), result.stderr
    assert "etc/hosts: larger than 8 MiB" in result.stderr
    assert "file-too-large" in [f["code"] for f in json.loads(result.stdout)["findings"]]
    assert left_behind(tmp_path) == []


class Zeros(io.RawIOBase):
    """``size`` zero bytes, produced as they are read (never held in memory)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


@pytest.mark.parametrize(("case", "message"), [
    ("bomb", f"it unpacks to more than {MAX_ARCHIVE_STREAM_BYTES >> 20} MiB"),
    ("members", f"it has more than {MAX_MEMBERS:,} members"),
    ("bytes", f"its files hold more than {MAX_UNPACKED_BYTES >> 20} MiB"),
    ("garbage", "is neither a directory nor a snapshot archive"),
    ("truncated", "cannot read the snapshot archive"),
    ("empty", "it is empty"),
])
def test_an_archive_no_snapshot_could_be_is_refused_naming_the_file(
        tmp_path: Path, case: str, message: str) -> None:
    archive = tmp_path / "node9.tar.gz"
    if case == "garbage":
        archive.write_bytes(b"this is not an archive\n" * 40)
    elif case == "truncated":
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(node(tmp_path / "good"), arcname="node9")
        archive.write_bytes(archive.read_bytes()[:-200])
    else:
        with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
            if case == "bomb":  # 200 MiB of zeros: about 200 KiB compressed
                info = tarfile.TarInfo("etc/hosts")
                info.size = 200 << 20
                tar.addfile(info, io.BufferedReader(Zeros(info.size)))
            elif case == "members":
                for i in range(MAX_MEMBERS + 1):
                    add(tar, f"sys/class/net/x{i}")
            elif case == "bytes":  # under every per-file cap, over the total
                for i in range(MAX_UNPACKED_BYTES // (4 << 20) + 1):
                    info = tarfile.TarInfo(f"etc/file{i}")
                    info.size = 4 << 20
                    tar.addfile(info, io.BufferedReader(Zeros(info.size)))
    result = cli(tmp_path, "doctor", "--root", archive.name)
    assert result.returncode == 2, (result.stdout, result.stderr)
    said = " ".join(result.stderr.split())  # the message is folded to the terminal's width
    assert "node9.tar.gz" in said and message in said, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert left_behind(tmp_path) == []
