"""The public surface: what `clusterenv` exports, and that importing it stays cheap."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

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


def _imported_by(code: str) -> set[str]:
    """The modules ``code`` imports beyond what the interpreter loads at start-up (a site
    ``.pth`` file may load some of them first, e.g. ipaddress through pathlib)."""
    return _modules_after(code) - _modules_after("pass")


def test_import_is_lazy() -> None:
    loaded = _imported_by("import clusterenv")
    for heavy in ("pydantic", "netifaces", "torch", "clusterenv.config", "ipaddress"):
        assert heavy not in loaded, f"`import clusterenv` imported {heavy}"


def test_cli_module_import_is_light() -> None:
    loaded = _modules_after("import clusterenv.cli")
    assert not {"pydantic", "netifaces", "torch"} & loaded


def _imported_by_cli(argv: list[str]) -> set[str]:
    """What running ``clusterenv ARGV`` imports (its output discarded)."""
    return _imported_by(
        "import contextlib, io\n"
        "from clusterenv.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
    )


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["-h"]])
def test_version_and_help_import_no_verb(argv: list[str]) -> None:
    loaded = _imported_by_cli(argv)
    assert "clusterenv.cli" in loaded
    heavy = {m for m in loaded if m.startswith((
        "clusterenv._cli", "pydantic", "netifaces", "typing", "clusterenv.errors", "dataclasses",
    ))}
    assert not heavy, f"clusterenv {' '.join(argv)} imported {sorted(heavy)}"


def test_a_verb_imports_only_its_own_module() -> None:
    loaded = _imported_by_cli(["nccl-log", "--help"])
    verbs = {m for m in loaded if m.startswith("clusterenv._cli.")}
    assert verbs == {"clusterenv._cli.nccl_log", "clusterenv._cli._common"}, verbs


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


def test_entry_points_take_environ_first_and_the_rest_by_keyword() -> None:
    import inspect

    from clusterenv.config import check_config
    from clusterenv.launch import plan_launch
    from clusterenv.preflight import preflight

    entry_points: list[Callable[..., object]] = [
        clusterenv.ClusterConfig.from_env, check_config, clusterenv.plan_nccl_env,
        clusterenv.apply_nccl_defaults, clusterenv.doctor, preflight, plan_launch,
    ]
    for function in entry_points:
        first, *rest = inspect.signature(function).parameters.values()
        name = function.__qualname__
        assert first.name == "environ", name
        assert first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, name
        assert first.default is None, name
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in rest), name
    versioned: list[Callable[..., object]] = [clusterenv.plan_nccl_env,
                                              clusterenv.apply_nccl_defaults, clusterenv.doctor]
    for function in versioned:
        assert "nccl_version" in inspect.signature(function).parameters, function.__qualname__
