"""The launch record: which ranks run on which node, written where the job's dumps go.

A flight-recorder dump says nothing about the machine it came from, so ``clusterenv launch``
writes one small JSON file per node into the job's dump directory before it starts torchrun:
``launch-node<N>.json`` with the node's rank, host name, cluster address, its range of global
ranks (torchrun's static rendezvous gives node ``N`` ranks ``N * nproc`` to
``N * nproc + nproc - 1``) and a summary of what ``doctor`` said about the node. ``clusterenv
hang`` joins it to the dumps to name the node of every rank.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterenv._jsonable import json_fields
from clusterenv._text import clip

__all__ = ["RECORD_FORMAT", "LaunchRecord", "RecordError", "parse_launch_record",
           "record_name", "write_launch_record"]

RECORD_FORMAT = 1
_MAX_DOCTOR = 32
_MAX_TEXT = 300


class RecordError(ValueError):
    """A launch record with a missing or malformed field; the message names it."""


def record_name(node_rank: int) -> str:
    """The record's file name, e.g. ``"launch-node1.json"``."""
    return f"launch-node{node_rank}.json"


@dataclass(frozen=True, slots=True)
class LaunchRecord:
    """One node of a job, as ``clusterenv launch`` started it.

    Attributes:
        node_rank: ``NODE_RANK``, e.g. ``1``.
        num_nodes: Nodes in the job, e.g. ``2``.
        nproc_per_node: Processes started on this node, e.g. ``8``.
        first_rank: The node's lowest global rank, e.g. ``8``.
        host: Its host name, e.g. ``"node-1"``.
        node_addr: Its cluster address (``NODE_ADDR``), e.g. ``"10.65.0.3"``; None when unknown.
        primary: The rendezvous, e.g. ``"10.65.0.2:29500"``.
        started: When the launch began, ISO 8601 UTC, e.g. ``"2026-05-01T12:00:00Z"``.
        doctor: What doctor said about the node before the start, one line per finding, e.g.
            ``("warning[hostname-loopback]: the host name resolves to 127.0.1.1",)``.
    """

    node_rank: int
    num_nodes: int
    nproc_per_node: int
    first_rank: int
    host: str
    node_addr: str | None
    primary: str
    started: str
    doctor: tuple[str, ...] = ()

    @property
    def ranks(self) -> range:
        """The node's global ranks, e.g. ``range(8, 16)``."""
        return range(self.first_rank, self.first_rank + self.nproc_per_node)

    @property
    def world_size(self) -> int:
        """Processes in the job when every node runs as many as this one, e.g. ``16``."""
        return self.num_nodes * self.nproc_per_node

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``format``."""
        return {"format": RECORD_FORMAT, **json_fields(self)}


def _int(data: Mapping[str, Any], name: str, low: int) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value < 1 << 24:
        raise RecordError(f"'{name}': expected an integer of at least {low}, got "
                          f"{clip(repr(value), 40)}")
    return value


def _str(data: Mapping[str, Any], name: str, *, optional: bool = False) -> str | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise RecordError(f"'{name}': expected a string of at most {_MAX_TEXT} characters")
    return value


def parse_launch_record(data: Mapping[str, Any]) -> LaunchRecord:
    """Check and convert a launch record read from a file or received from a node.

    Raises:
        RecordError: Naming the first bad field.
    """
    if data.get("format") != RECORD_FORMAT:
        raise RecordError(f"format {clip(repr(data.get('format')), 20)}: this clusterenv reads "
                          f"format {RECORD_FORMAT}")
    doctor = data.get("doctor") or []
    if not isinstance(doctor, list) or len(doctor) > _MAX_DOCTOR or not all(
            isinstance(line, str) and len(line) <= _MAX_TEXT for line in doctor):
        raise RecordError(f"'doctor': expected at most {_MAX_DOCTOR} lines")
    record = LaunchRecord(
        node_rank=_int(data, "node_rank", 0),
        num_nodes=_int(data, "num_nodes", 1),
        nproc_per_node=_int(data, "nproc_per_node", 1),
        first_rank=_int(data, "first_rank", 0),
        host=_str(data, "host") or "",
        node_addr=_str(data, "node_addr", optional=True),
        primary=_str(data, "primary") or "",
        started=_str(data, "started") or "",
        doctor=tuple(doctor),
    )
    if record.node_rank >= record.num_nodes:
        raise RecordError(f"'node_rank' {record.node_rank} is not below 'num_nodes' "
                          f"{record.num_nodes}")
    return record


def write_launch_record(directory: str | os.PathLike[str], record: LaunchRecord) -> Path:
    """Write ``launch-node<N>.json`` into ``directory`` (created when missing), atomically.

    Returns:
        The file written.

    Raises:
        OSError: When the directory cannot be created or written.
    """
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    path = target / record_name(record.node_rank)
    fd, temporary = tempfile.mkstemp(prefix=".launch-", dir=target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record.to_dict(), handle, indent=2)
            handle.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
