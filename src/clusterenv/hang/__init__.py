"""``clusterenv hang``: when a job hangs, name the rank and node that stopped, and the collective.

PyTorch's flight recorder keeps each rank's last collectives in memory; a dump of it (written by
the NCCL watchdog on a timeout, or by clusterenv's torch integration when a collective fails)
says, per process group, the sequence number of the last collective the rank entered. Ranks
that never reached the collective the others wait in are the ones that stopped; a member with no
dump at all is evidence too. clusterenv adds what the dumps lack: which node each rank ran on
(the launch record ``clusterenv launch`` writes), and, across nodes, the dumps of every node
(``hang --collect``).

The parts: :mod:`~clusterenv.hang.recorder` (the variables the installed torch reads; used by
``doctor``), :mod:`~clusterenv.hang.enable` (turning the recorder on), :mod:`~clusterenv.hang.
unpickle` (reading a pickle with no globals), :mod:`~clusterenv.hang.dumps` (files and names),
:mod:`~clusterenv.hang.record` (the launch record), :mod:`~clusterenv.hang.attribute` and
:mod:`~clusterenv.hang.report` (who stopped), :mod:`~clusterenv.hang.messages` and
:mod:`~clusterenv.hang.collect` (across nodes). The names below load on first use.

Example::

    from clusterenv.hang import diagnose_hang

    report = diagnose_hang(["/root/.cache/clusterenv/hang/20260501-120000-4242"])
    print(report.title)    # "rank 3 (node 1, node-1) never entered all_reduce #7 of group 0 ..."
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Call",
    "CollectResult",
    "CorruptDump",
    "DumpLimits",
    "GroupTrace",
    "HangReport",
    "LaunchRecord",
    "NodeInfo",
    "RankDump",
    "RankView",
    "RecorderPlan",
    "Stall",
    "TorchRecorder",
    "UnsafeDump",
    "apply_recorder",
    "attribute",
    "collect_hang",
    "diagnose_hang",
    "find_torch",
    "load_pickle",
    "plan_recorder",
    "read_inputs",
]

_HOMES = {
    "Call": "model", "GroupTrace": "model", "RankDump": "model",
    "HangReport": "report", "NodeInfo": "report", "RankView": "report",
    "Stall": "report", "attribute": "attribute",
    "CollectResult": "diagnose", "collect_hang": "diagnose", "diagnose_hang": "diagnose",
    "LaunchRecord": "record", "RecorderPlan": "enable", "apply_recorder": "enable",
    "plan_recorder": "enable", "read_inputs": "dumps", "TorchRecorder": "recorder",
    "find_torch": "recorder", "CorruptDump": "unpickle", "DumpLimits": "unpickle",
    "UnsafeDump": "unpickle", "load_pickle": "unpickle",
}

if TYPE_CHECKING:
    from clusterenv.hang.attribute import attribute
    from clusterenv.hang.diagnose import CollectResult, collect_hang, diagnose_hang
    from clusterenv.hang.dumps import read_inputs
    from clusterenv.hang.enable import RecorderPlan, apply_recorder, plan_recorder
    from clusterenv.hang.model import Call, GroupTrace, RankDump
    from clusterenv.hang.record import LaunchRecord
    from clusterenv.hang.recorder import TorchRecorder, find_torch
    from clusterenv.hang.report import HangReport, NodeInfo, RankView, Stall
    from clusterenv.hang.unpickle import CorruptDump, DumpLimits, UnsafeDump, load_pickle


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'clusterenv.hang' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"clusterenv.hang.{home}"), name)
    globals()[name] = value
    return value
