"""Turning the flight recorder on where jobs start, without touching what the user set.

``clusterenv launch``, ``clusterenv env --flight-recorder`` and the torch integration's
``init_process_group()`` set, each only when no spelling of it is set:

- the buffer size (``TORCH_FR_BUFFER_SIZE``, or ``TORCH_NCCL_TRACE_BUFFER_SIZE`` for a torch
  that reads only that), to the installed torch's default (2000 in torch 2.13), so releases
  whose default is 0 record too;
- the dump file prefix (``TORCH_FR_DUMP_TEMP_FILE`` or ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``) to
  ``<job directory>/trace-<host>-rank``: torch appends the rank;
- ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``: the NCCL build's watchdog writes the dump on a timeout;
- ``CLUSTERENV_HANG_DIR``: the job directory, where the launch records and clusterenv's own
  dumps go too.

The job directory is ``CLUSTERENV_HANG_DIR`` when set, else
``<default base>/<start time>-<pid of the torchrun agent>`` (see
:func:`~clusterenv.hang.recorder.default_hang_base`): ``launch`` becomes the agent (it execs
torchrun), and the workers are its children, so both name the same directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterenv._jsonable import json_fields
from clusterenv.hang.dumps import OUR_PREFIX
from clusterenv.hang.recorder import (
    DEFAULT_ENTRIES,
    DUMP_ON_TIMEOUT,
    HANG_DIR_VARIABLE,
    TorchRecorder,
    default_hang_base,
    find_torch,
)
from clusterenv.nccl.plan import EnvChange

__all__ = ["RecorderPlan", "apply_recorder", "job_directory", "plan_recorder", "safe_host"]


@dataclass(frozen=True, slots=True)
class RecorderPlan:
    """What turning the recorder on does (or did).

    Attributes:
        changes: One :class:`~clusterenv.nccl.EnvChange` per variable: ``"set"`` or ``"keep"``.
        directory: The job directory, e.g. ``~/.cache/clusterenv/hang/20260501-120000-4242``.
        torch: What the names were chosen from; None when no torch was found here.
    """

    changes: tuple[EnvChange, ...]
    directory: Path
    torch: TorchRecorder | None

    @property
    def env(self) -> dict[str, str]:
        """The variables it sets, e.g. ``{"TORCH_FR_BUFFER_SIZE": "2000", ...}``."""
        return {c.name: c.value for c in self.changes if c.action == "set"}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the fields above, plus ``env``."""
        return json_fields(self, env=self.env)


def safe_host(host: str) -> str:
    """A host name fit for a file name: ``"gpu node/1"`` -> ``"gpu_node_1"``."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", host)[:64].strip(".")
    return cleaned or "host"


def _started(pid: int) -> str | None:
    """When process ``pid`` started, as ``YYYYmmdd-HHMMSS`` UTC, from ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith(b"btime "))
        ticks = int(fields[19])  # field 22 of stat: start time in clock ticks after boot
        seconds = boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(seconds))


def job_directory(environ: Mapping[str, str], *, agent_pid: int) -> Path:
    """This job's dump directory: ``CLUSTERENV_HANG_DIR``, else one named after the torchrun
    agent's start time and pid under the default base, e.g.
    ``~/.cache/clusterenv/hang/20260501-120000-4242``."""
    given = environ.get(HANG_DIR_VARIABLE)
    if given:
        return Path(given)
    stamp = _started(agent_pid) or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return default_hang_base(environ) / f"{stamp}-{agent_pid}"


def _decide(environ: Mapping[str, str], names: tuple[str, ...], value: str,
            reason: str) -> EnvChange:
    for name in names:
        if name in environ:
            return EnvChange(name, environ[name], environ[name], "keep",
                             f"set by you; torch reads {name}", origin="environment",
                             planned=value if name == names[0] else None)
    return EnvChange(names[0], value, None, "set", reason)


def plan_recorder(
    environ: Mapping[str, str] | None = None,
    *,
    directory: str | os.PathLike[str],
    host: str | None = None,
    torch: TorchRecorder | None = None,
) -> RecorderPlan:
    """Decide the recorder variables; changes nothing.

    Args:
        environ: The job's environment; None reads ``os.environ``.
        directory: The job directory (see :func:`job_directory`).
        host: This node's host name, part of the dump file names; default
            ``socket.gethostname()``.
        torch: The torch to name the variables for; default :func:`find_torch` (the old
            spellings, which every release with a recorder reads, when none is found).
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    found = torch if torch is not None else find_torch()
    reader = found or TorchRecorder.by_version(None, "no torch found here")
    where = Path(directory)
    entries = reader.default_entries or DEFAULT_ENTRIES
    shown = f"torch {reader.version}" if reader.version else "torch"
    prefix = str(where / OUR_PREFIX.format(host=safe_host(host or socket.gethostname())))
    changes = (
        _decide(env, reader.buffer_size, str(entries),
                f"flight recorder on with {entries} entries ({shown} reads "
                f"{' then '.join(reader.buffer_size)})"),
        _decide(env, reader.dump_file, prefix,
                "dumps land in this job's directory, named with the host; torch adds the rank"),
        _decide(env, (DUMP_ON_TIMEOUT,), "1",
                "the NCCL watchdog dumps the recorder when a collective times out"),
        _decide(env, (HANG_DIR_VARIABLE,), str(where),
                "where clusterenv's dumps and launch records go; `clusterenv hang` reads it"),
    )
    return RecorderPlan(changes, where, found)


def apply_recorder(
    environ: MutableMapping[str, str] | None = None,
    *,
    directory: str | os.PathLike[str] | None = None,
    host: str | None = None,
    torch: TorchRecorder | None = None,
) -> RecorderPlan:
    """:func:`plan_recorder`, then set its variables in ``environ`` (default ``os.environ``)
    and create the job directory (best effort: torch reports a dump it cannot write).

    Args:
        directory: The job directory; default :func:`job_directory` for the parent process
            (inside a torchrun worker: the agent).
    """
    env: MutableMapping[str, str] = os.environ if environ is None else environ
    where = directory if directory is not None else job_directory(env, agent_pid=os.getppid())
    plan = plan_recorder(env, directory=where, host=host, torch=torch)
    env.update(plan.env)
    # ValueError: a path no file system takes (a NUL byte); torch reports the dump it cannot
    # write, and a job must not fail for want of a dump directory.
    with contextlib.suppress(OSError, ValueError):
        Path(env.get(HANG_DIR_VARIABLE, str(plan.directory))).mkdir(parents=True,
                                                                    exist_ok=True)
    return plan
