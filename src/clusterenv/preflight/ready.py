"""``--wait``: wait for a cluster that is still coming up, saying what is awaited.

On Runpod the cluster network "may still be initializing" when the pods start, and the pods do
not start at the same moment. With ``--wait SECONDS`` a node first waits, up to that long from
its start, until

1. its cluster address is assigned (``NODE_ADDR`` held by an interface of this host, or, without
   ``NODE_ADDR``, a cluster interface found);
2. the primary's address resolves, and the kernel routes it over that cluster interface (not
   over ``eth0`` and the management network);

and then the exchange begins; the primary, for its part, waits until every expected rank has
reported, up to the same time. Each state it waits in is reported through the ``progress``
callback (the CLI shows it on a terminal, updated in place, else one line per change).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Mapping

from clusterenv._root import Root

__all__ = ["await_network"]

_POLL_S = 0.25


def _network_state(environ: Mapping[str, str], root: Root) -> str | None:
    """What this node still lacks to talk to the primary over the cluster network, or None."""
    from clusterenv._facts import Facts  # noqa: PLC0415  # one detection pass per poll
    from clusterenv._routes import route_interface  # noqa: PLC0415

    facts = Facts(environ=environ, root=root)
    config = facts.config
    if config is None or not config.is_multi_node:
        return None  # nothing to wait for: the environment itself is wrong, preflight says so
    interface, _ = facts.cluster_choice
    if config.node_addr is not None and facts.network.owner_of(config.node_addr) is None:
        return f"this node's cluster address (NODE_ADDR {config.node_addr} is on no interface yet)"
    if interface is None:
        return "a cluster interface (no interface holds NODE_ADDR or shares PRIMARY_ADDR's subnet)"
    try:
        primary = str(ipaddress.ip_address(config.primary_addr.strip("[]")))
    except ValueError:
        resolution = facts.resolve(config.primary_addr)
        if not resolution.addresses:
            return f"PRIMARY_ADDR {config.primary_addr} to resolve ({resolution.error})"
        primary = resolution.addresses[0]
    if facts.network.owner_of(primary) is not None:
        return None  # this node is the primary
    try:
        via = route_interface(primary, root=root.path)
    except ValueError:
        return None
    if via != interface.name:
        now = f"now via {via}" if via else "no route yet"
        return f"a route to the primary {primary} over {interface.name} ({now})"
    return None


def await_network(
    environ: Mapping[str, str], root: Root, *, until: float,
    progress: Callable[[str], None] | None = None,
) -> str | None:
    """Wait until this node can reach the primary over its cluster interface, or ``until``
    (a ``time.monotonic()`` value); report each state waited in through ``progress``.

    Returns:
        None when ready, else what was still missing at ``until``, e.g. ``"this node's cluster
        address (NODE_ADDR 10.65.0.3 is on no interface yet)"``.
    """
    while True:
        missing = _network_state(environ, root)
        if missing is None or time.monotonic() >= until:
            return missing
        if progress is not None:
            progress(f"waiting for {missing}, {max(0.0, until - time.monotonic()):.0f} s left")
        time.sleep(min(_POLL_S, max(0.0, until - time.monotonic())))
