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


#: Each public module (docs/api.md) and its ``__all__``: what users may import from it. A
#: change here is a change of the public surface, to be made on purpose (and in CHANGELOG).
PUBLIC_ALL: dict[str, set[str]] = {
    "clusterenv.config": {
        "ClusterConfig", "ConfigCheck", "ProcessContext", "SOURCE_VARIABLE", "check_config"
    },
    "clusterenv.network": {
        "ARPHRD_INFINIBAND", "ARPHRD_LOOPBACK", "ConfigAddresses", "Interface",
        "NetworkInterfaces", "route_interface"
    },
    "clusterenv.rdma": {
        "Gid", "RdmaDevice", "RdmaInfo", "RdmaPort", "Transport", "port_transport"
    },
    "clusterenv.host": {
        "ENVIRONMENT", "HostFacts", "NcclConfFile", "format_bytes", "live_process_facts",
        "nccl_conf_files", "nccl_conf_values", "software_versions"
    },
    "clusterenv.findings": {
        "Area", "CODES", "Code", "CodeInfo", "Finding", "SEVERITIES", "Severity", "code_info",
        "codes_of", "has_errors", "sort_findings"
    },
    "clusterenv.errors": {
        "ClusterEnvError", "ClusterEnvWarning", "ConfigError", "ConfigProblem", "DiscoveryError",
        "LaunchError"
    },
    "clusterenv.nccl": {
        "Action", "EnvChange", "NcclPlan", "PLANNED_VARIABLES", "apply_nccl_defaults",
        "plan_nccl_env"
    },
    "clusterenv.nccl.gid": {
        "AUTO_SINCE", "AddressRange", "GID_VARIABLES", "GidChoice", "GidSettings", "choose_gid",
        "gid_family", "gid_problem"
    },
    "clusterenv.filters": {
        "ALL_CODES", "FilterToken", "IB_HCA", "MAX_TOKENS", "NcclFilter", "SOCKET_IFNAME",
        "lint_exact_names", "lint_filter", "nccl_default_interfaces", "needs_exact",
        "parse_filter", "render_exact", "split_modifiers"
    },
    "clusterenv.diagnosis": {
        "CHECK_CODES", "Diagnosis", "diagnose_facts", "diagnose_with_plan", "doctor"
    },
    "clusterenv.nccl_log": {
        "CODES", "CODE_ADDRESS_FAMILY", "CODE_BOOTSTRAP_MANAGEMENT", "CODE_CONNECT_TIMEOUT",
        "CODE_GDR_DISABLED", "CODE_IBVERBS_FAILURE", "CODE_IB_COMPLETION_ERROR",
        "CODE_IB_DISABLED", "CODE_IB_MEMLOCK", "CODE_IB_QP_FAILURE", "CODE_IB_SETTING_RANGE",
        "CODE_INIT_UNFINISHED",
        "CODE_MIXED_ENV", "CODE_MIXED_FACT", "CODE_MIXED_INTERFACE", "CODE_MIXED_LINK_LAYER",
        "CODE_MIXED_PLUGIN", "CODE_MIXED_RDMA_DRIVER", "CODE_MIXED_SUBNET",
        "CODE_MIXED_TRANSPORT", "CODE_MIXED_VERSION", "CODE_NCCL_ERROR", "CODE_NCCL_MESSAGE",
        "CODE_NCCL_WARNING", "CODE_NO_INTERFACE", "CODE_OFI_NO_PROVIDER", "CODE_PEER_CLOSED",
        "CODE_OPEN_FILES", "CODE_PLUGIN_FAILED", "CODE_PLUGIN_LOAD", "CODE_SHARED_ADDRESS",
        "CODE_SHM_EXHAUSTED",
        "CODE_SOCKET_CHANNEL_UNROUTABLE", "CODE_SOCKET_FALLBACK", "CatalogueMatch", "GpuDirect",
        "INTERNAL_NETWORKS", "LogMessage", "MAX_LINE", "MessageClass", "NcclLog", "NetDevice",
        "NetPlugin", "RankInfo", "SocketEndpoint", "WC_STATUSES", "WcStatus", "interface_concern",
        "lookup_message", "nccl_log_findings", "parse_nccl_log", "read_nccl_log"
    },
    "clusterenv.preflight": {
        "DEFAULT_LIMITS", "Fingerprint", "Limits", "NodeRef", "NodeSummary", "PreflightError",
        "PreflightOptions", "PreflightResult", "PrimaryServer", "Problem", "RdmaSummary",
        "RingHop", "TOKEN_VARIABLE", "Verdict", "collect_fingerprint", "compare", "default_port",
        "preflight", "run_node", "serve_primary"
    },
    "clusterenv.bench": {
        "BenchResult", "CODES", "CPU_SIZES", "GPU_SIZES", "LineRate", "LinkResult", "NodeInfo",
        "NodeScore", "Rail", "SizeResult", "Transfer", "algbw_gbs", "busbw_factor", "busbw_gbs",
        "conclude", "format_size", "interface_line_rate", "line_fraction", "nothing_to_draw",
        "parse_size", "parse_sizes", "rails_in_use", "rdma_line_rate", "render_svg",
        "ring_transfers", "run",
        "schedule_rounds", "score_nodes", "write_svg"
    },
    "clusterenv.launch": {
        "LAUNCHERS", "LaunchPlan", "TORCHRUN_MODULE", "accelerate_args", "deepspeed_args",
        "deepspeed_env_text", "deepspeed_hostfile_text", "exec_plan", "find_torchrun", "launch",
        "mpirun_args", "plan_launch", "refusal", "rendezvous_environ", "srun_args",
        "torchrun_args", "torchrun_env", "write_deepspeed_env"
    },
    "clusterenv.hang": {
        "Call", "CollectResult", "CorruptDump", "DumpLimits", "GroupTrace", "HangReport",
        "LaunchRecord", "NodeInfo", "RankDump", "RankView", "RecorderPlan", "Stall",
        "TorchRecorder", "UnsafeDump", "apply_recorder", "attribute", "collect_hang",
        "diagnose_hang", "find_torch", "load_pickle", "plan_recorder", "read_inputs"
    },
    "clusterenv.capture": {
        "CaptureError", "capture"
    },
    "clusterenv.testing": {
        "ARPHRD_ETHER", "ARPHRD_INFINIBAND", "ARPHRD_LOOPBACK", "GidSpec", "HostBuilder",
        "PHYS_STATES", "PORT_STATES", "PortSpec", "gid", "port"
    },
    "clusterenv.integrations.torch": {
        "ProcessGroupInfo", "TORCH_RANK_MESSAGE", "init_process_group", "missing_launcher_message"
    },
    "clusterenv.integrations.lightning": {
        "ClusterEnvEnvironment"
    },
    "clusterenv.cli": {
        "EXIT_BROKEN_PIPE", "VERBS", "build_parser", "main"
    },
}


@pytest.mark.parametrize("module", sorted(PUBLIC_ALL))
def test_every_public_module_pins_its_all(module: str) -> None:
    import importlib

    from tests.test_architecture import declared_modules

    public, _ = declared_modules()
    assert set(public) == {"clusterenv", *PUBLIC_ALL}  # docs/api.md and this pin agree
    loaded = importlib.import_module(module)
    assert set(loaded.__all__) == PUBLIC_ALL[module]
    for name in loaded.__all__:
        assert hasattr(loaded, name), f"{module}.{name} is in __all__ but does not resolve"


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
    # the verbs' shared helpers (_common, _json: underscore names) are not verbs
    verbs = {m for m in loaded if m.startswith("clusterenv._cli.")
             and not m.rpartition(".")[2].startswith("_")}
    assert verbs == {"clusterenv._cli.nccl_log"}, verbs


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
    from clusterenv.hang import apply_recorder, collect_hang, plan_recorder
    from clusterenv.launch import plan_launch
    from clusterenv.preflight import preflight

    entry_points: list[Callable[..., object]] = [
        clusterenv.ClusterConfig.from_env, check_config, clusterenv.plan_nccl_env,
        clusterenv.apply_nccl_defaults, clusterenv.doctor, preflight, plan_launch,
        collect_hang, plan_recorder, apply_recorder,
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
