"""The JSON text of a log's processes, written from pieces each encoded once.

``clusterenv nccl-log --json`` on a job of thousands of processes prints as many records; most
of what they hold repeats from one to the next (the settings, the fact table of a host, its
device list and addresses). :func:`ranks_json` writes exactly what ``json.dumps([r.to_dict()
for r in ranks], ensure_ascii=False, separators=(",", ":"))`` writes, encoding each distinct
piece once instead of building and walking a dict per process (a test compares the two).
:func:`log_fields` is :meth:`NcclLog.to_dict <clusterenv.nccl_log.NcclLog.to_dict>` with
something else in place of the records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from json.encoder import encode_basestring
from typing import Any

from clusterenv._jsonable import json_fields
from clusterenv.nccl_log.model import NcclLog, RankInfo, SocketEndpoint

__all__ = ["RANK_KEYS", "log_fields", "ranks_json"]

#: The keys of :meth:`RankInfo.to_dict <clusterenv.nccl_log.RankInfo.to_dict>`, in order.
RANK_KEYS = (
    "host", "pid", "cuda_device", "rank", "nranks", "version", "bootstrap_interface",
    "bootstrap_address", "socket_interfaces", "oob", "transport", "devices", "plugin",
    "net_channels", "gdr_channels", "env", "first_line", "channel_devices", "facts", "failure",
    "failure_line",
)
_ENDPOINT_KEYS = ("interface", "address")
_MAX_CACHED = 65_536


def log_fields(log: NcclLog, ranks: Any) -> dict[str, Any]:
    """``log.to_dict()`` with ``ranks`` in place of the processes' records (which are not
    built)."""
    data = json_fields(replace(log, ranks=()), transport=log.transport, hosts=log.hosts,
                       multi_node=log.multi_node)
    data["ranks"] = ranks
    return data


def ranks_json(ranks: Sequence[RankInfo]) -> tuple[str, frozenset[str]]:
    """The compact JSON text of ``[r.to_dict() for r in ranks]`` (characters outside ASCII
    written as they are), and every key of the objects in it."""
    string = _Texts(_string)
    endpoints, endpoint = _Texts(_endpoints), _Texts(_endpoint)
    lists, pairs, tables = _Texts(_list), _Texts(_pairs), _Texts(_json)
    parts = []
    keys: set[str] = set(RANK_KEYS)
    for r in ranks:
        if r.socket_interfaces or r.oob is not None:
            keys.update(_ENDPOINT_KEYS)
        keys.update(r.env, r.facts)
        parts.append(
            f'{{"host":{string[r.host]},"pid":{_number(r.pid)},'
            f'"cuda_device":{_number(r.cuda_device)},"rank":{_number(r.rank)},'
            f'"nranks":{_number(r.nranks)},"version":{string[r.version]},'
            f'"bootstrap_interface":{string[r.bootstrap_interface]},'
            f'"bootstrap_address":{string[r.bootstrap_address]},'
            f'"socket_interfaces":{endpoints[r.socket_interfaces]},"oob":{endpoint[r.oob]},'
            f'"transport":{string[r.transport]},"devices":{lists[r.devices]},'
            f'"plugin":{string[r.plugin]},"net_channels":{_number(r.net_channels)},'
            f'"gdr_channels":{_number(r.gdr_channels)},"env":{tables[tuple(r.env.items())]},'
            f'"first_line":{_number(r.first_line)},'
            f'"channel_devices":{pairs[r.channel_devices]},'
            f'"facts":{tables[tuple(r.facts.items())]},'
            f'"failure":{string[r.failure]},"failure_line":{_number(r.failure_line)}}}'
        )
    return "[" + ",".join(parts) + "]", frozenset(keys)


class _Texts(dict[Any, str]):
    """The JSON text of values, each encoded once (while at most :data:`_MAX_CACHED`)."""

    def __init__(self, encode: Callable[[Any], str]):
        super().__init__()
        self.encode = encode

    def __missing__(self, value: Any) -> str:
        text = self.encode(value)
        if len(self) < _MAX_CACHED:
            self[value] = text
        return text


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json(value: Any) -> str:
    # a tuple of (key, value) pairs: the dict they were taken from
    return _compact(dict(value))


def _string(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _number(value: int | None) -> str:
    # what json writes for an int (int.__repr__); anything else as json writes it
    return str(value) if type(value) is int else "null" if value is None else _compact(value)


def _endpoint(value: SocketEndpoint | None) -> str:
    return "null" if value is None else _compact(value.to_dict())


def _endpoints(value: tuple[SocketEndpoint, ...]) -> str:
    return _compact([e.to_dict() for e in value])


def _list(value: tuple[str, ...]) -> str:
    return _compact(list(value))


def _pairs(value: tuple[tuple[str, int], ...]) -> str:
    return _compact([list(pair) for pair in value])
