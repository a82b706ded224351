"""Framework integrations, each imported only when used.

- :mod:`clusterenv.integrations.torch`: ``init_process_group()`` that applies the NCCL/Gloo plan,
  picks NCCL with CUDA and Gloo without, and explains the missing-launcher failure.
- :mod:`clusterenv.integrations.lightning`: :class:`ClusterEnvEnvironment`, a Lightning
  ``ClusterEnvironment`` built on :class:`~clusterenv.ClusterConfig`.

Importing this package imports neither torch nor Lightning; importing a submodule imports its
framework (``integrations.torch`` only when its functions are called).
"""

from __future__ import annotations

__all__: list[str] = []
