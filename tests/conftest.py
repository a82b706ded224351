"""Shared pytest fixtures.

The simulated cluster (``tests/simcluster.py``, docs/testing.md) needs root and network
namespaces. Where it cannot run, its tests skip with the reason, except under ``CI=true``, where
they fail: CI runs as root and must run them.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

from tests.hang_dumps import Generated, generate
from tests.simcluster import (
    ClusterFactory,
    SimCluster,
    make_cluster,
    netns_available,
    torch_available,
)

GPU_TESTS = Path(__file__).parent / "gpu"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--gpu``: also collect tests/gpu, the checks that need an NVIDIA GPU and its NCCL."""
    parser.addoption("--gpu", action="store_true", default=False,
                     help="also run tests/gpu (needs NVIDIA GPUs; fails without them)")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/gpu runs only with ``--gpu``: CI has no GPU, and a GPU check is never a skip."""
    if collection_path == GPU_TESTS and not config.getoption("--gpu"):
        return True
    return None


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """Whether we run in CI (``CI=true``, as GitHub Actions, GitLab and most others set it)."""
    environ = os.environ if environ is None else environ
    return environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test (or, at module level, the module) with ``reason``; under ``CI=true`` fail
    it instead: CI installs everything the tests use and must run them."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: this test must run in CI, not skip)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_module(name: str, install: str) -> ModuleType:
    """Import the optional package (or module) ``name`` a test needs, e.g.
    ``require_module("deepspeed.launcher.runner", "pip install deepspeed")``.

    The one skip policy for optional packages (Lightning, Accelerate, DeepSpeed, torch): when
    it cannot be imported the test skips with the reason and the install command, and under
    ``CI=true`` it fails.
    """
    try:
        return importlib.import_module(name)
    except ImportError as e:
        skip_or_fail(f"{name} cannot be imported ({e}): {install}")


def require_tool(name: str, install: str) -> str:
    """The path of the command-line tool ``name`` a test needs, e.g.
    ``require_tool("fish", "apt-get install fish")``; skips (fails under ``CI=true``) when it is
    not on ``PATH``."""
    path = shutil.which(name)
    if path is None:
        skip_or_fail(f"{name} is not installed: {install}")
    return path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by what they use, so ``-m "not netns"`` / ``-m "not torch"`` select them."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "sim_cluster" in fixtures or "netns_required" in fixtures:
            item.add_marker(pytest.mark.netns)
        if "torch_required" in fixtures or "fr_dumps" in fixtures:
            item.add_marker(pytest.mark.torch)


@pytest.fixture
def netns_required() -> None:
    """Skip (fail under CI) unless network namespaces can be built here."""
    available, reason = netns_available()
    if not available:
        skip_or_fail(f"simulated cluster unavailable: {reason}")


@pytest.fixture
def torch_required() -> None:
    """Skip (fail under CI) unless PyTorch is installed for this interpreter."""
    available, reason = torch_available()
    if not available:
        skip_or_fail(reason)


@pytest.fixture(scope="session", autouse=True)
def _job_directories(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``clusterenv launch`` and the torch integration create a job directory under
    ``$XDG_CACHE_HOME/clusterenv/hang``: the commands tests start keep theirs in a temporary
    directory, not in the home directory of whoever runs the suite."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def fr_dumps(tmp_path_factory: pytest.TempPathFactory) -> Generated:
    """Real flight-recorder dumps of three Gloo ranks, made once per session by torch itself
    (``tests/hang_dumps.py``); skips (fails under CI) without torch."""
    available, reason = torch_available()
    if not available:
        skip_or_fail(reason)
    return generate(tmp_path_factory.mktemp("fr-dumps"))


@pytest.fixture
def sim_cluster(netns_required: None) -> Iterator[ClusterFactory]:
    """A factory of simulated clusters; every cluster it made is torn down after the test.

    Example::

        def test_two_nodes(sim_cluster: ClusterFactory) -> None:
            cluster = sim_cluster(2, trainers=2, mtu=(9000, 1500))
            result = cluster.nodes[1].run([sys.executable, "-m", "clusterenv", "show"])
    """
    clusters: list[SimCluster] = []

    def factory(*args: Any, **kwargs: Any) -> SimCluster:  # the signature: ClusterFactory
        cluster = make_cluster(*args, **kwargs)
        clusters.append(cluster)
        return cluster

    yield factory
    problems = []
    for cluster in reversed(clusters):
        try:
            cluster.close()
        except RuntimeError as e:
            problems.append(str(e))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
