"""clusterenv: know the multi-node GPU cluster you run on, and configure NCCL, Gloo and torchrun.

Importing this package is cheap: public names are loaded on first access (PEP 562), so
``import clusterenv`` imports neither pydantic nor netifaces, and never torch.

Example::

    from clusterenv import ClusterConfig, apply_nccl_defaults

    plan = apply_nccl_defaults()      # sets only what is unset and evidenced; returns what it did
    cfg = ClusterConfig.from_env()    # the validated node-level contract
"""

from __future__ import annotations

import importlib

# Not typing.TYPE_CHECKING: importing typing would cost `clusterenv --version` a few ms.
TYPE_CHECKING = False

__version__ = "0.1.0"

# name -> module that defines it. Keep in sync with __all__ (a test pins both).
_LAZY: dict[str, str] = {
    "ClusterConfig": "clusterenv.config",
    "ProcessContext": "clusterenv.config",
    "NetworkInterfaces": "clusterenv.network",
    "Interface": "clusterenv.network",
    "RdmaInfo": "clusterenv.rdma",
    "RdmaDevice": "clusterenv.rdma",
    "RdmaPort": "clusterenv.rdma",
    "Gid": "clusterenv.rdma",
    "HostFacts": "clusterenv.host",
    "NcclPlan": "clusterenv.nccl",
    "EnvChange": "clusterenv.nccl",
    "plan_nccl_env": "clusterenv.nccl",
    "apply_nccl_defaults": "clusterenv.nccl",
    "Finding": "clusterenv.findings",
    "doctor": "clusterenv.diagnosis",
    "ClusterEnvError": "clusterenv.errors",
    "ConfigError": "clusterenv.errors",
    "DiscoveryError": "clusterenv.errors",
    "LaunchError": "clusterenv.errors",
    "ClusterEnvWarning": "clusterenv.errors",
}

__all__ = [
    "ClusterConfig",
    "ClusterEnvError",
    "ClusterEnvWarning",
    "ConfigError",
    "DiscoveryError",
    "EnvChange",
    "Finding",
    "Gid",
    "HostFacts",
    "Interface",
    "LaunchError",
    "NcclPlan",
    "NetworkInterfaces",
    "ProcessContext",
    "RdmaDevice",
    "RdmaInfo",
    "RdmaPort",
    "__version__",
    "apply_nccl_defaults",
    "doctor",
    "plan_nccl_env",
]

if TYPE_CHECKING:
    from typing import Any

    from clusterenv.config import ClusterConfig, ProcessContext
    from clusterenv.diagnosis import doctor
    from clusterenv.errors import (
        ClusterEnvError,
        ClusterEnvWarning,
        ConfigError,
        DiscoveryError,
        LaunchError,
    )
    from clusterenv.findings import Finding
    from clusterenv.host import HostFacts
    from clusterenv.nccl import EnvChange, NcclPlan, apply_nccl_defaults, plan_nccl_env
    from clusterenv.network import Interface, NetworkInterfaces
    from clusterenv.rdma import Gid, RdmaDevice, RdmaInfo, RdmaPort
del TYPE_CHECKING


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'clusterenv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
