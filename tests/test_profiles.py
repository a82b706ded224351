"""Detection on host snapshots rebuilt from real captures (tests/profiles)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterenv.rdma import RdmaInfo
from tests.profiles import PROFILES, ExpectedPort, Profile

# NCCL logs are the other kind of capture: tests/test_nccl_log.py keeps copies of them.
NCCL_LOG_PREFIX = "nccl-info-"


def shared_captures() -> Path:
    """The project's real captures (shared/fixtures-real next to the checkout or above it)."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "fixtures-real"
        if candidate.is_dir():
            return candidate
    pytest.skip("shared/fixtures-real is not next to this checkout: the profiles name their "
                "captures, but which captures exist cannot be listed")


def test_every_rdma_capture_has_a_profile_and_every_profile_a_capture() -> None:
    # Listed, not hard-coded: a new capture without a profile, or a renamed one, fails here.
    listed = {p.name for p in shared_captures().iterdir() if p.is_file()}
    host_captures = {name for name in listed if not name.startswith(NCCL_LOG_PREFIX)}
    named = {p.capture for p in PROFILES.values() if p.capture}
    assert host_captures - named == set(), "captures without a profile"
    assert named - listed == set(), "profiles naming a capture that does not exist"


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
