"""The public surface: what `clusterenv` exports, and that importing it stays cheap."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import clusterenv

EXPECTED = {
    "ClusterConfig",
    "ProcessContext",
    "NetworkInterfaces",
    "Interface",
    "RdmaInfo",
    "RdmaDevice",
    "RdmaPort",
    "Gid",
    "HostFacts",
    "NcclPlan",
    "EnvChange",
    "Finding",
    "plan_nccl_env",
    "apply_nccl_defaults",
    "doctor",
    "ClusterEnvError",
    "ConfigError",
    "DiscoveryError",
    "LaunchError",
    "ClusterEnvWarning",
    "__version__",
}


def test_all_is_pinned() -> None:
    assert set(clusterenv.__all__) == EXPECTED
    assert sorted(clusterenv.__all__) == clusterenv.__all__


def test_every_exported_name_resolves_and_is_documented() -> None:
    for name in clusterenv.__all__:
        value = getattr(clusterenv, name)
        if name != "__version__":
            assert value.__doc__, f"{name} has no docstring"
            assert value.__module__.startswith("clusterenv."), name


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = clusterenv.NoSuchThing


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(json.loads(out))


def test_import_is_lazy() -> None:
    loaded = _modules_after("import clusterenv")
    for heavy in ("pydantic", "netifaces", "torch", "clusterenv.config", "ipaddress"):
        assert heavy not in loaded, f"`import clusterenv` imported {heavy}"


def test_cli_module_import_is_light() -> None:
    loaded = _modules_after("import clusterenv.cli")
    assert not {"pydantic", "netifaces", "torch"} & loaded


def test_first_model_access_pays_for_pydantic() -> None:
    loaded = _modules_after("import clusterenv; clusterenv.ClusterConfig")
    assert "pydantic" in loaded
    assert "netifaces" not in loaded and "torch" not in loaded


def test_exported_functions_are_not_shadowed_by_submodules() -> None:
    # Importing every submodule first must not turn a public function into a module object.
    code = (
        "import importlib, pkgutil, clusterenv\n"
        "for m in pkgutil.walk_packages(clusterenv.__path__, 'clusterenv.'):\n"
        "    skip = m.name.endswith('__main__') or '.integrations' in m.name\n"
        "    if not skip: importlib.import_module(m.name)\n"
        "import types\n"
        "names = clusterenv.__all__\n"
        "bad = [n for n in names if isinstance(getattr(clusterenv, n), types.ModuleType)]\n"
        "print('BAD ' + ' '.join(bad) if bad else 'ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True, capture_output=True, text=True,
    ).stdout
    assert out.strip() == "ok", out
