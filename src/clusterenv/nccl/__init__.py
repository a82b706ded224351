"""NCCL, Gloo and TensorPipe settings derived from evidence.

The package's parts: :mod:`~clusterenv.nccl.plan` (:func:`plan_nccl_env`,
:func:`apply_nccl_defaults`), :mod:`~clusterenv.nccl.interface` (which interface
``NCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME`` and ``TP_SOCKET_IFNAME`` name),
:mod:`~clusterenv.nccl.hca` (which RDMA ports ``NCCL_IB_HCA`` lists and the RoCE GID index),
:mod:`~clusterenv.nccl.lint` (the user's own NCCL and PyTorch variables) and
:mod:`~clusterenv.nccl.version` (which NCCL this node would load).

The public names below load on first access, so importing the package costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["PLANNED_VARIABLES", "Action", "EnvChange", "NcclPlan", "apply_nccl_defaults",
           "plan_nccl_env"]

if TYPE_CHECKING:
    from clusterenv.nccl.plan import (
        PLANNED_VARIABLES,
        Action,
        EnvChange,
        NcclPlan,
        apply_nccl_defaults,
        plan_nccl_env,
    )


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'clusterenv.nccl' has no attribute {name!r}")
    value = getattr(importlib.import_module("clusterenv.nccl.plan"), name)
    globals()[name] = value
    return value
