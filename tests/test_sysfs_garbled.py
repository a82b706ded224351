"""Garbled, truncated or misplaced sysfs files never crash RdmaInfo.detect or HostFacts.detect."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterenv.errors import DiscoveryError
from clusterenv.host import HostFacts
from clusterenv.rdma import RdmaInfo
from clusterenv.testing import HostBuilder, gid, port

DEV = "sys/class/infiniband/mlx5_0"
PORT = f"{DEV}/ports/1"
# Every file and directory detection reads, relative to the snapshot root.
TARGETS = (
    f"{DEV}/node_type",
    f"{DEV}/hca_type",
    f"{DEV}/fw_ver",
    f"{DEV}/board_id",
    f"{DEV}/device/net",
    f"{DEV}/device/net/ens1",
    f"{DEV}/ports",
    PORT,
    f"{PORT}/state",
    f"{PORT}/phys_state",
    f"{PORT}/rate",
    f"{PORT}/link_layer",
    f"{PORT}/gids",
    f"{PORT}/gids/0",
    f"{PORT}/gids/3",
    f"{PORT}/gids/7",
    f"{PORT}/gid_attrs/types/3",
    f"{PORT}/gid_attrs/ndevs/3",
    f"{PORT}/gid_attrs/types/1",
    f"{PORT}/gid_attrs/ndevs/0",
    "sys/class/infiniband/mlx5_1/ports/1/state",
    "sys/class/infiniband/mlx5_1/ports/1/gids/0",
    "sys/class/infiniband_verbs/uverbs0/ibdev",
    "sys/class/infiniband_verbs/uverbs1/ibdev",
    "sys/class/infiniband_verbs",
    "dev/infiniband/uverbs0",
    "dev/infiniband",
    "proc/driver/nvidia/version",
    "proc/driver/nvidia/gpus",
    "proc/driver/nvidia/gpus/0000:18:00.0/information",
    "sys/module/nvidia_peermem/version",
    "etc/nccl.conf",
)

garbage = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=120).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from(
        [
            b"",
            b"\n",
            b"4: ACTIVE\x00\xff",
            b"0000:0000:0000:0000:0000:ffff:0a63",
            b"::ffff:10.0.0.1%eth0",
            b"RoCE v2" * 50,
            b"../../../etc/passwd",
            b"eth0/../../x",
            b"NCCL_DEBUG",
            b"=\n=\n#\n",
            b"-1 Gb/sec",
            b"1e309 Gb/sec",
            b"99999999999999999999: ACTIVE",
            b"Model: \x00",
            b"CapEff:\tzz",
        ]
    ),
)
# What a mutation does to its target: new bytes, a huge file, a directory, nothing, a bad link.
actions = st.one_of(
    garbage.map(lambda data: ("bytes", data)),
    st.just(("huge", b"")),
    st.just(("directory", b"")),
    st.just(("delete", b"")),
    st.just(("dangling", b"")),
    st.just(("loop", b"")),
)


def build(root: Path) -> None:
    (
        HostBuilder(root)
        .rdma_device(
            "mlx5_0",
            port(
                1,
                link_layer="Ethernet",
                netdev="ens1",
                gids=[
                    gid(0, "fe80::1", "IB/RoCE v1", "ens1"),
                    gid(1, "fe80::1", "RoCE v2", "ens1"),
                    gid(3, "::ffff:10.0.0.1", "RoCE v2", "ens1"),
                ],
                gid_table_len=8,
            ),
        )
        .rdma_device("mlx5_1")
        .gpus(1)
        .gpudirect()
        .memlock(None, None)
        .file("etc/nccl.conf", "NCCL_DEBUG=WARN\n")
    )


def remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def mutate(root: Path, target: str, action: str, data: bytes) -> None:
    path = root / target
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # an earlier mutation turned a parent into a file or a link
        return
    if action == "bytes":
        remove(path)
        path.write_bytes(data)
    elif action == "huge":
        remove(path)
        path.write_bytes(b"4: ACTIVE " * 20000)  # 200 KB where a short line belongs
    elif action == "directory":
        remove(path)
        (path / "surprise").mkdir(parents=True)
    elif action == "delete":
        remove(path)
    elif action == "dangling":
        remove(path)
        os.symlink("nowhere/at/all", path)
    elif action == "loop":
        remove(path)
        os.symlink(path.name, path)  # a link to itself: ELOOP


@contextmanager
def snapshot() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root)
        yield root


# Each example writes a fresh snapshot (about 60 files), so keep the count modest.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(TARGETS), actions), min_size=1, max_size=6))
def test_garbled_sysfs_never_crashes_detection(
    mutations: list[tuple[str, tuple[str, bytes]]],
) -> None:
    with snapshot() as root:
        for target, (action, data) in mutations:
            mutate(root, target, action, data)
        info = RdmaInfo.detect(root=root)
        facts = HostFacts.detect(environ={"HOME": "/root"}, root=root)
        # Derived facts and JSON must hold up too.
        assert info.transport in (None, "infiniband", "roce", "mixed", "efa")
        for device in info.devices:
            assert isinstance(device.usable, bool)
            for found in device.ports:
                assert found.nccl_gid_index is None or found.nccl_gid_index >= 0
                assert found.rate_gbps is None or found.rate_gbps > 0
        json.dumps(info.to_dict())
        json.dumps(facts.to_dict())
        assert facts.gpus <= facts.gpus_installed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["memlock", "shm_bytes", "cap_ipc_lock", "hostname", "addresses"]),
        json_values,
    )
)
def test_odd_host_json_values_never_crash_host_facts(recorded: dict[str, object]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / ".clusterenv").mkdir()
        (root / ".clusterenv/host.json").write_text(json.dumps({"format": 1, **recorded}))
        facts = HostFacts.detect(environ={}, root=root)
        assert facts.shm_bytes is None or facts.shm_bytes >= 0
        assert facts.memlock_known or (facts.memlock_soft, facts.memlock_hard) == (None, None)
        assert facts.cap_ipc_lock in (None, True, False)
        json.dumps(facts.to_dict())


def detect_rdma(root: Path) -> object:
    return RdmaInfo.detect(root=root)


def detect_host(root: Path) -> object:
    return HostFacts.detect(environ={}, root=root)


@pytest.mark.parametrize("detect", [detect_rdma, detect_host])
def test_unreadable_root_names_the_path(tmp_path: Path, detect: Callable[[Path], object]) -> None:
    missing = tmp_path / "no" / "such" / "snapshot"
    with pytest.raises(DiscoveryError) as caught:
        detect(missing)
    assert caught.value.path == str(missing)
    assert str(missing) in str(caught.value)
    assert isinstance(caught.value, OSError)
