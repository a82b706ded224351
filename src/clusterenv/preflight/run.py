"""Running preflight on this node: the role it plays (primary, node, single) and the result.

:func:`preflight` is what ``clusterenv preflight`` runs: it waits for the network when asked,
collects this node's fingerprint, and either serves as the primary (the node that holds
``PRIMARY_ADDR``) or reports to it.
"""


from __future__ import annotations

import ipaddress
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from clusterenv._jsonable import json_fields
from clusterenv._root import as_root
from clusterenv._values import format_host_port
from clusterenv.preflight.compare import compare
from clusterenv.preflight.fingerprint import (
    TOKEN_VARIABLE,
    _collect,
)
from clusterenv.preflight.node import PreflightError, run_node
from clusterenv.preflight.options import PreflightOptions
from clusterenv.preflight.ready import await_network
from clusterenv.preflight.server import serve_primary
from clusterenv.preflight.verdict import NodeSummary, Verdict
from clusterenv.preflight.wire import DEFAULT_LIMITS, Limits
from clusterenv.sources._base import MAX_NODES

if TYPE_CHECKING:
    from clusterenv._facts import Facts

__all__ = ["PreflightResult", "Role", "default_port", "preflight"]

Role = Literal["primary", "node", "single"]


@dataclass(frozen=True, slots=True)
class PreflightResult:
    """What preflight concluded on this node.

    Attributes:
        exit_code: ``0`` consistent, ``1`` problems found, ``2`` could not complete.
        role: ``"primary"`` (this node collected and compared), ``"node"`` (it reported to the
            primary) or ``"single"`` (a one-node job: nothing to compare across nodes).
        rank: This node's ``NODE_RANK``, e.g. ``1``; None when unreadable.
        endpoint: The primary's preflight address, e.g. ``"10.65.0.2:29501"``.
        verdict: The verdict every node printed; None when preflight could not complete.
        error: Why it could not complete, naming the address and what to check; else None.
        elapsed_s: Seconds this node spent, e.g. ``0.42``.
    """

    exit_code: int
    role: Role
    rank: int | None
    endpoint: str | None
    verdict: Verdict | None
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the cluster is consistent (exit code 0)."""
        return self.exit_code == 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``ok``."""
        return json_fields(self, ok=self.ok)


def default_port(primary_port: int | None) -> int:
    """The preflight port: ``PRIMARY_PORT + 1`` (``29501`` for the usual ``29500``).

    One above the rendezvous port, so preflight never holds the port torchrun's store needs;
    ``65534`` when ``PRIMARY_PORT`` is ``65535``.
    """
    base = primary_port or 29500
    return base + 1 if base < 65535 else base - 1


def _local_primary_address(facts: Facts, primary: str) -> str | None:
    """The address of ``primary`` that this node holds (so it is the primary), else None."""
    try:
        candidates = [str(ipaddress.ip_address(primary.strip("[]")))]
    except ValueError:  # a host name: this node is the primary if it holds what it resolves to
        try:
            infos = socket.getaddrinfo(primary, None, type=socket.SOCK_STREAM)
        except OSError:
            return None
        candidates = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in candidates:
        try:
            if facts.network.owner_of(address) is not None:
                return address
        except ValueError:
            continue
    return None


def preflight(
    environ: Mapping[str, str] | None = None,
    *,
    root: str | os.PathLike[str] = "/",
    timeout: float = 30.0,
    port: int | None = None,
    ring: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    wait: float = 0.0,
    progress: Callable[[str], None] | None = None,
) -> PreflightResult:
    """Run preflight on this node (start it on every node at about the same time).

    Args:
        environ: The environment; None reads ``os.environ`` at call time.
        root: ``/`` or a host snapshot (the fingerprint is read from it; the network is live).
        timeout: Seconds the primary waits for every node and a node keeps trying to reach the
            primary, e.g. ``30``.
        port: Preflight TCP port; default :func:`default_port` (``PRIMARY_PORT + 1``). Must be
            the same on every node.
        ring: On the primary: also have each node open a TCP connection to the next node.
            Nodes follow the primary's choice.
        limits: Size, time and connection bounds.
        wait: Seconds to wait for a cluster that is still coming up, e.g. ``300``: first until
            this node's cluster address is assigned and the primary resolves and routes over
            the cluster interface (:mod:`clusterenv.preflight.ready`), then, on the primary,
            until every rank reported, and on a node, for the primary; in all at least until
            ``wait`` seconds from the start, and ``timeout`` seconds after this node was ready.
        progress: Called with a line whenever what this node waits for changes (the CLI shows
            it on stderr); None: silent.

    ``timeout``, ``ring``, ``limits``, ``progress`` and the token
    (``CLUSTERENV_PREFLIGHT_TOKEN``) become one :class:`PreflightOptions`, which the primary and
    the node's side take.

    Returns:
        The result; ``exit_code`` 2 with ``error`` set when it could not complete.

    Raises:
        ValueError: ``timeout`` not positive, ``wait`` negative or ``port`` outside 1–65535.
        DiscoveryError: When ``root`` cannot be read.
    """
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"port={port!r}: expected 1..65535")
    if not wait >= 0:
        raise ValueError(f"wait={wait!r}: expected seconds >= 0")
    if not timeout > 0:
        raise ValueError(f"timeout={timeout!r}: expected a positive number of seconds")
    start = time.monotonic()
    env: Mapping[str, str] = os.environ if environ is None else environ
    host = as_root(root)
    if wait and host.is_live:  # a snapshot's network never comes up: nothing to wait for
        await_network(env, host, until=start + wait, progress=progress)
    own, facts = _collect(env, host)
    # The exchange may run until `wait` from the start, and at least `timeout` from now.
    budget = max(start + wait, time.monotonic() + timeout) - time.monotonic()
    options = PreflightOptions(timeout=budget, token=env.get(TOKEN_VARIABLE, "").encode() or None,
                               ring=ring, limits=limits, progress=progress)

    def failed(role: Role, endpoint: str | None, error: str) -> PreflightResult:
        return PreflightResult(2, role, own.rank, endpoint, None, error,
                               round(time.monotonic() - start, 3))

    if own.num_nodes is None or own.primary_addr is None:
        return failed("node", None, "cannot tell the cluster from this environment (NUM_NODES "
                      "and PRIMARY_ADDR/MASTER_ADDR are needed); `clusterenv doctor` says what is "
                      "wrong")
    if own.num_nodes > MAX_NODES:  # read as given when the environment is invalid
        return failed("node", None, f"NUM_NODES={own.num_nodes} is above the supported maximum "
                      f"of {MAX_NODES} nodes: set NUM_NODES to the number of nodes (`clusterenv "
                      "doctor` says what else is wrong)")
    chosen_port = port if port is not None else default_port(own.primary_port)
    if own.num_nodes <= 1:
        addr = own.node_addr or own.primary_addr
        verdict = Verdict(
            expected_nodes=1, primary="local", nodes=(NodeSummary.of(addr, own),),
            problems=tuple(compare([(addr, own)], expected_nodes=1)),
            elapsed_s=round(time.monotonic() - start, 3), reported=1,
        )
        return PreflightResult(verdict.exit_code, "single", own.rank, None, verdict, None,
                               verdict.elapsed_s)
    listen = _local_primary_address(facts, own.primary_addr)
    if listen is not None:
        endpoint = format_host_port(listen, chosen_port)
        try:
            verdict = serve_primary(own, listen_addr=listen, port=chosen_port,
                                    expected_nodes=own.num_nodes, options=options)
        except OSError as e:
            return failed("primary", endpoint, f"cannot listen on {endpoint}: "
                          f"{e.strerror or e}; another program may hold the port: choose another "
                          "--port (the same on every node)")
        return PreflightResult(verdict.exit_code, "primary", own.rank, endpoint, verdict, None,
                               round(time.monotonic() - start, 3))
    endpoint = format_host_port(own.primary_addr, chosen_port)
    try:
        verdict = run_node(own, primary_addr=own.primary_addr, port=chosen_port,
                           options=options, source_addr=own.node_addr)
    except PreflightError as e:
        message = str(e)
        if own.rank == 0:
            message += (f". Note: this node has NODE_RANK=0 but holds no address of PRIMARY_ADDR="
                        f"{own.primary_addr}, so it did not act as the primary")
        return failed("node", endpoint, message)
    return PreflightResult(verdict.exit_code, "node", own.rank, endpoint, verdict, None,
                           round(time.monotonic() - start, 3))
