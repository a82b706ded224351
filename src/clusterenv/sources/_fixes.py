"""The value a fix may suggest for a contract variable: one the other variables support, else a
placeholder (DESIGN principle 7).

A fix never carries the rejected value and never a number from an example. What counts as
evidence:

- the primary's address: the other spelling (``PRIMARY_ADDR``/``MASTER_ADDR``) or the host of
  ``HOST_NODE_ADDR``, when those that are set agree and are not loopback;
- the port: the other spelling or the port of ``HOST_NODE_ADDR``, likewise;
- ``NUM_TRAINERS`` = ``WORLD_SIZE / NUM_NODES``, ``NUM_NODES`` = ``WORLD_SIZE / NUM_TRAINERS``,
  ``WORLD_SIZE`` = ``NUM_NODES * NUM_TRAINERS``, when those divide;
- ``NODE_RANK``: ``0`` when ``NODE_ADDR`` is ``PRIMARY_ADDR``; ``1`` when it is not and there
  are two nodes;
- ``HOST_NODE_ADDR``: the evidenced address and port.

Everything else is a placeholder such as ``<the primary node's cluster IP address>``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping

from clusterenv._shell import Placeholder, export
from clusterenv._values import (
    format_host_port,
    is_loopback_host,
    parse_decimal,
    parse_host,
    split_host_port,
)

__all__ = ["PLACEHOLDERS", "evidenced_value", "fix_for", "placeholder"]

#: The placeholder each variable gets when nothing supports a value.
PLACEHOLDERS: dict[str, str] = {
    "PRIMARY_ADDR": "<the primary node's cluster IP address>",
    "MASTER_ADDR": "<the primary node's cluster IP address>",
    "PRIMARY_PORT": "<the rendezvous port, the same on every node>",
    "MASTER_PORT": "<the rendezvous port, the same on every node>",
    "HOST_NODE_ADDR": "<PRIMARY_ADDR:PRIMARY_PORT>",
    "NODE_ADDR": "<this node's cluster IP address>",
    "NODE_RANK": "<this node's index: 0 on the primary, 1 to NUM_NODES-1 on the others>",
    "NUM_NODES": "<the number of nodes>",
    "NUM_TRAINERS": "<the number of processes (GPUs) per node>",
    "WORLD_SIZE": "<NUM_NODES x NUM_TRAINERS, the number of processes>",
    "LOCAL_WORLD_SIZE": "<the number of processes on this node>",
    "RANK": "<this process's global rank>",
    "LOCAL_RANK": "<this process's rank on its node>",
    "GROUP_RANK": "<this node's index>",
}
_ADDRESSES = ("PRIMARY_ADDR", "MASTER_ADDR")
_PORTS = ("PRIMARY_PORT", "MASTER_PORT")


def _int(environ: Mapping[str, str], *names: str, minimum: int = 1) -> int | None:
    """The value of the first of ``names`` that is set, when every one set says the same valid
    number; else None."""
    values = {(environ.get(n) or "").strip() for n in names} - {""}
    if len(values) != 1:
        return None
    number = parse_decimal(values.pop())
    return number if number is not None and number >= minimum else None


def _one(candidates: list[str]) -> str | None:
    distinct = set(candidates)
    return distinct.pop() if len(distinct) == 1 else None


def _address(environ: Mapping[str, str], name: str) -> str | None:
    candidates = []
    for other in _ADDRESSES:
        if other != name and (host := parse_host(environ.get(other) or "")) is not None:
            candidates.append(host)
    split = split_host_port(environ.get("HOST_NODE_ADDR") or "")
    if split is not None and name != "HOST_NODE_ADDR":
        candidates.append(split[0])
    return _one([c for c in candidates if not is_loopback_host(c)])


def _port(environ: Mapping[str, str], name: str) -> str | None:
    candidates = [str(port) for other in _PORTS
                  if other != name and (port := _int(environ, other)) is not None
                  and port <= 65535]
    split = split_host_port(environ.get("HOST_NODE_ADDR") or "")
    if split is not None and 1 <= split[1] <= 65535 and name != "HOST_NODE_ADDR":
        candidates.append(str(split[1]))
    return _one(candidates)


def _quotient(environ: Mapping[str, str], total: str, part: tuple[str, ...]) -> str | None:
    whole, divisor = _int(environ, total), _int(environ, *part)
    if whole is None or divisor is None or whole % divisor:
        return None
    return str(whole // divisor)


def _world_size(environ: Mapping[str, str]) -> str | None:
    nodes, trainers = _int(environ, "NUM_NODES"), _int(environ, "NUM_TRAINERS")
    return str(nodes * trainers) if nodes is not None and trainers is not None else None


def _node_rank(environ: Mapping[str, str]) -> str | None:
    node = environ.get("NODE_ADDR") or ""
    primary = _address(environ, "NODE_RANK") or ""
    try:
        same = ipaddress.ip_address(node.strip().strip("[]")) == ipaddress.ip_address(primary)
    except ValueError:
        return None
    if same:
        return "0"
    return "1" if _int(environ, "NUM_NODES") == 2 else None  # two nodes


def _host_node_addr(environ: Mapping[str, str]) -> str | None:
    address, port = _address(environ, "HOST_NODE_ADDR"), _port(environ, "HOST_NODE_ADDR")
    if address is None or port is None:
        return None
    return format_host_port(address, int(port))


_DERIVED: dict[str, Callable[[Mapping[str, str]], str | None]] = {
    "PRIMARY_ADDR": lambda env: _address(env, "PRIMARY_ADDR"),
    "MASTER_ADDR": lambda env: _address(env, "MASTER_ADDR"),
    "PRIMARY_PORT": lambda env: _port(env, "PRIMARY_PORT"),
    "MASTER_PORT": lambda env: _port(env, "MASTER_PORT"),
    "NUM_TRAINERS": lambda env: _quotient(env, "WORLD_SIZE", ("NUM_NODES",)),
    "NUM_NODES": lambda env: _quotient(env, "WORLD_SIZE", ("NUM_TRAINERS",)),
    "WORLD_SIZE": _world_size,
    "NODE_RANK": _node_rank,
    "HOST_NODE_ADDR": _host_node_addr,
}


def evidenced_value(
    name: str, environ: Mapping[str, str], *, rejected: str | None = None
) -> str | None:
    """The value the other variables support for ``name``, or None.

    ``name``'s own value never counts as evidence, and a derived value equal to ``rejected``
    (or to ``name``'s current value) is dropped.

    Example: ``evidenced_value("NUM_TRAINERS", {"WORLD_SIZE": "16", "NUM_NODES": "4"})`` is
    ``"4"``.
    """
    derive = _DERIVED.get(name)
    if derive is None:
        return None
    others = {k: v for k, v in environ.items() if k != name}
    value = derive(others)
    refused = {(rejected or "").strip(), (environ.get(name) or "").strip()} - {""}
    return None if value is None or value in refused else value


def fix_for(name: str, environ: Mapping[str, str], *, rejected: str | None = None) -> str:
    """``export NAME=VALUE`` with an evidenced value, else with the variable's placeholder.

    Example: ``fix_for("NODE_RANK", {"NODE_ADDR": "10.65.0.3", "PRIMARY_ADDR": "10.65.0.2",
    "NUM_NODES": "4"})`` is ``"export NODE_RANK=<this node's index: 0 on the primary, ...>"``.
    """
    value = evidenced_value(name, environ, rejected=rejected)
    return export(name, value if value is not None else placeholder(name))


def placeholder(name: str) -> Placeholder:
    """The placeholder of ``name``, e.g. ``"<the number of nodes>"``."""
    return Placeholder(PLACEHOLDERS.get(name, f"<a valid {name}>"))
