"""Detection on host snapshots rebuilt from real captures (tests/profiles)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterenv.rdma import RdmaInfo
from tests.profiles import PROFILES, ExpectedPort, Profile

# The captures of a host's RDMA that must each have a profile.
REQUIRED_CAPTURES = {
    "sysfs-class-infiniband-h100-ib-ndr-8x-plus-bf3-bond.txt",
    "ibstat-h100-ib-ndr-8x-cx7-plus-bf3-bond.txt",
    "ibv_devinfo-h100-roce-cx7-12dev-2down.txt",
    "ibstat-h100-ib-ndr-cx7-plus-cx6dx-some-down.txt",
    "ibstat-h100-roce-8x-cx7-400g-plus-4x-cx6dx-100g.txt",
    "ibstat-a100-vf-mt4126-ib-hdr-8x.txt",
    "ibstat-a100-vf-mt4124-ib-hdr-8x-exit255.txt",
    "ibstatus-a100-azure-ib-hdr-8x.txt",
    "ibv_devinfo-aws-p5en-h200-efa-16dev.txt",
    "libibverbs-container-only-uverbs1-passed-no-driver.txt",
    "ip-br-ibdev2netdev-h100-roce-bond0-docker0.txt",
    "show_gids-h100-roce-cx7-mlx5_0.txt",
    "ibv_devinfo-v-gid-list-mlx5_bond_0-roce.txt",
}


def test_every_rdma_capture_has_a_profile() -> None:
    captures = {p.capture for p in PROFILES.values()}
    assert captures >= REQUIRED_CAPTURES, REQUIRED_CAPTURES - captures


def test_profiles_describe_themselves() -> None:
    for name, profile in PROFILES.items():
        assert profile.name == name
        if profile.capture:
            assert profile.capture.endswith(".txt") and "/" not in profile.capture
        else:  # a host no shared capture holds: the report it comes from is named instead
            assert profile.origin
        assert profile.summary
        assert set(profile.usable) <= set(profile.devices)
        assert {key.split(":")[0] for key in profile.ports} == set(profile.devices)


@pytest.mark.parametrize("profile", list(PROFILES.values()), ids=list(PROFILES))
def test_detection_matches_the_capture(profile: Profile, tmp_path: Path) -> None:
    root = profile.build(tmp_path)
    info = RdmaInfo.detect(root=root)

    assert tuple(d.name for d in info.devices) == profile.devices
    assert tuple(d.name for d in info.usable_devices) == profile.usable
    assert info.transport == profile.transport
    assert info.uverbs == profile.uverbs
    ports = {
        f"{d.name}:{p.number}": ExpectedPort(
            p.state, p.rate_gbps, p.link_layer, p.netdev, p.nccl_gid_index,
            p.nccl_gid_reaches_peers,
        )
        for d in info.devices
        for p in d.ports
    }
    assert ports == dict(profile.ports)
    for device, netdevs in profile.netdevs.items():
        found = info.get(device)
        assert found is not None
        assert found.netdevs == netdevs
    data = json.loads(json.dumps(info.to_dict()))
    assert [d["name"] for d in data["devices"]] == list(profile.devices)
    assert data["transport"] == profile.transport


def test_profiles_build_side_by_side(tmp_path: Path) -> None:
    roots = {name: profile.build(tmp_path) for name, profile in PROFILES.items()}
    assert len(set(roots.values())) == len(PROFILES)
    for name, root in roots.items():
        assert len(RdmaInfo.detect(root=root).devices) == len(PROFILES[name].devices)
