"""Errors subclass the builtins they narrow, carry what they name, and pickle."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from clusterenv import (
    ClusterEnvError,
    ClusterEnvWarning,
    ConfigError,
    DiscoveryError,
    LaunchError,
)
from clusterenv._root import Root
from clusterenv.errors import ConfigProblem


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (
            ConfigError(
                [ConfigProblem(("NODE_RANK",), "NODE_RANK='x': bad", "export NODE_RANK=0")]
            ),
            ValueError,
        ),
        (DiscoveryError("cannot read '/x'", path="/x"), OSError),
        (LaunchError("torchrun not found"), RuntimeError),
    ],
)
def test_dual_inheritance_and_pickling(error: ClusterEnvError, builtin: type) -> None:
    assert isinstance(error, ClusterEnvError) and isinstance(error, builtin)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)


def test_config_error_keeps_problems_and_source_through_pickle() -> None:
    problem = ConfigProblem(
        ("WORLD_SIZE", "NUM_NODES"), "WORLD_SIZE=2 is wrong", "fix it", "config-world-size"
    )
    error = ConfigError([problem], source="runpod")
    copy = pickle.loads(pickle.dumps(error))
    assert copy.problems == (problem,) and copy.source == "runpod"
    assert copy.variables == ("WORLD_SIZE", "NUM_NODES")
    assert "source: runpod" in str(copy) and "fix it" in str(copy)


def test_discovery_error_keeps_path_through_pickle() -> None:
    copy = pickle.loads(pickle.dumps(DiscoveryError("boom", path="/sys/x")))
    assert copy.path == "/sys/x" and str(copy) == "boom"


def test_warning_is_a_user_warning() -> None:
    assert issubclass(ClusterEnvWarning, UserWarning)


def test_unreadable_root_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(DiscoveryError) as info:
        Root(missing)
    assert info.value.path == str(missing) and str(missing) in str(info.value)


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "JSON object"),
        ('{"format": 7}', "format 7"),
        ('{"environ": {"A": 1}}', "'environ'"),
    ],
)
def test_garbled_host_json_is_a_discovery_error(tmp_path: Path, content: str, text: str) -> None:
    (tmp_path / ".clusterenv").mkdir()
    (tmp_path / ".clusterenv/host.json").write_text(content)
    with pytest.raises(DiscoveryError, match=r"host\.json") as info:
        _ = Root(tmp_path).host
    assert text in str(info.value)
