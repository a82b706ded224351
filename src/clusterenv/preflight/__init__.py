"""Cross-node preflight (DESIGN §7): check the whole cluster in seconds and name the broken node.

Run ``clusterenv preflight`` (or :func:`preflight`) on every node at once. The node that holds
``PRIMARY_ADDR`` becomes the primary: it listens on that address only, on the preflight port
(default ``PRIMARY_PORT + 1``, so never the torchrun rendezvous port), and waits for every other
node's fingerprint. The others connect, retrying until the timeout, send theirs, and wait. The
primary compares them all and sends one verdict that every node prints:

- missing, duplicate and out-of-range ranks, each named;
- ``NCCL_*``, ``GLOO_*``, ``TORCH_NCCL_*``, ``TORCH_DISTRIBUTED_*``, ``CUDA_VISIBLE_DEVICES`` and
  ``TP_SOCKET_IFNAME`` that differ (which variable, which nodes, which values);
- the cluster contract (``NUM_NODES``, ``NUM_TRAINERS``, ``PRIMARY_ADDR``, ``PRIMARY_PORT``);
- MTU and name of the cluster interface; RDMA transport, number and rate of usable ports;
- GPUs against ``NUM_TRAINERS``; nodes whose local ``doctor`` has errors;
- what NCCL will load and use: the ``libnccl.so.2`` the loader finds and its own version, the
  network plugin it would load (resolved per NCCL release), the RDMA ports it would select;
  GPU models, driver, ``/dev/shm``, memlock and Runpod's ``RUNPOD_DC_ID``;
- torch and NCCL versions (torch's read without importing it);
- optionally, a ring: each node opens a TCP connection to the next node in rank order.

Exit codes: ``0`` consistent, ``1`` problems found (every node exits 1), ``2`` preflight could not
complete on this node (the primary never answered, refused this node, or the port was taken).

Example::

    from clusterenv.preflight import preflight

    result = preflight(timeout=30)
    if result.exit_code:
        for problem in result.verdict.problems if result.verdict else ():
            print(problem.title)
"""

from __future__ import annotations

from clusterenv.preflight.compare import compare
from clusterenv.preflight.fingerprint import (
    TOKEN_VARIABLE,
    Fingerprint,
    RdmaSummary,
    collect_fingerprint,
)
from clusterenv.preflight.node import PreflightError, run_node
from clusterenv.preflight.options import PreflightOptions
from clusterenv.preflight.run import PreflightResult, default_port, preflight
from clusterenv.preflight.server import PrimaryServer, serve_primary
from clusterenv.preflight.verdict import NodeRef, NodeSummary, Problem, RingHop, Verdict
from clusterenv.preflight.wire import DEFAULT_LIMITS, Limits

__all__ = [
    "DEFAULT_LIMITS",
    "TOKEN_VARIABLE",
    "Fingerprint",
    "Limits",
    "NodeRef",
    "NodeSummary",
    "PreflightError",
    "PreflightOptions",
    "PreflightResult",
    "PrimaryServer",
    "Problem",
    "RdmaSummary",
    "RingHop",
    "Verdict",
    "collect_fingerprint",
    "compare",
    "default_port",
    "preflight",
    "run_node",
    "serve_primary",
]
