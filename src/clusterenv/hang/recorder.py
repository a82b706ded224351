"""PyTorch's flight recorder as the installed torch reads it: variable names, default, state.

The recorder keeps the last collectives of every process group in each rank's memory; a dump of
it is what ``clusterenv hang`` reads. Which variables switch it on and where torch writes a dump
changed between releases, so the names come from the installed torch itself, found without
importing it (seconds, and CUDA initialisation): the ``getCvarInt({...}, default)`` call in the
C++ headers torch ships (``include/torch/csrc/distributed/c10d/FlightRecorder.hpp``, or
``TraceUtils.h`` in releases before that header existed). ``tests/scripts/torch_fr_variables.py``
reads the same facts, and the names in ``libtorch_cpu.so``, from any torch installation.

What torch 2.13 does (its ``FlightRecorder.hpp`` and ``Utils.hpp``): the buffer size is read from
``TORCH_FR_BUFFER_SIZE``, else the older ``TORCH_NCCL_TRACE_BUFFER_SIZE`` (with a deprecation
warning whenever the older one is set), default 2000 entries, when the first process group is
created; ``0`` switches the recorder off; each set spelling goes through ``std::stoi``, and a
value it rejects fails the ``TORCH_CHECK`` "Invalid value for environment variable" (with Gloo
the process then hangs, or aborts with "terminate called without an active exception", inside
the process group's constructor: measured, both happen). Dumps go to
``<TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>``. Releases without the
``TORCH_FR_*`` names read only the older ones.

Only the standard library is imported here: ``doctor`` and the NCCL lint use it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from clusterenv.findings import Finding

__all__ = [
    "BUFFER_SIZE_NAMES",
    "DEFAULT_ENTRIES",
    "DUMP_FILE_NAMES",
    "DUMP_ON_TIMEOUT",
    "HANG_DIR_VARIABLE",
    "RecorderSetting",
    "TorchRecorder",
    "default_hang_base",
    "find_torch",
    "parse_recorder_header",
    "recorder_checks",
    "recorder_setting",
    "stoi",
]

#: Buffer-size spellings, newest first (torch reads the first one set).
BUFFER_SIZE_NAMES: tuple[str, ...] = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
#: Dump-file prefix spellings, newest first; renamed together with the buffer size.
DUMP_FILE_NAMES: tuple[str, ...] = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
#: The NCCL build's watchdog dumps the recorder on a collective timeout when this is on.
DUMP_ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT"
#: Where this job's dumps and launch records go (clusterenv's own variable).
HANG_DIR_VARIABLE = "CLUSTERENV_HANG_DIR"
#: Entries torch 2.13 keeps by default (``FlightRecorder.hpp``); what clusterenv sets where the
#: installed torch's own default is not known.
DEFAULT_ENTRIES = 2000
#: The oldest release whose own code was read with the ``TORCH_FR_*`` names (2.13); without
#: headers, an older or unknown torch gets the older names, which every release with a
#: recorder reads (newer ones with a deprecation warning).
NEW_NAMES_SINCE = (2, 13)

_HEADERS = (
    "include/torch/csrc/distributed/c10d/FlightRecorder.hpp",
    "include/torch/csrc/distributed/c10d/TraceUtils.h",
    "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp",
)
_NCCL_HEADER = "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"
_CVAR_INT = re.compile(r"getCvarInt\(\s*\{([^{}]{1,400})\}\s*,\s*(-?[0-9]{1,12})\s*\)")
_QUOTED = re.compile(r'"([A-Z0-9_]{1,80})"')
_MAX_HEADER_BYTES = 1024 * 1024
_INT32 = 2**31


@dataclass(frozen=True, slots=True)
class TorchRecorder:
    """How one torch installation's flight recorder reads its settings.

    Attributes:
        version: torch's version, e.g. ``"2.13.0+cpu"``; None when unknown.
        buffer_size: The buffer-size variables it reads, in its order of precedence, e.g.
            ``("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")``.
        dump_file: The dump-file prefix variables it reads, likewise.
        default_entries: Entries kept when no variable is set, e.g. ``2000``; None when unknown.
        evidence: Where this was read, e.g. ``"torch 2.13.0+cpu: include/torch/csrc/
            distributed/c10d/FlightRecorder.hpp"``.
        dump_on_timeout: Whether its NCCL process group reads ``TORCH_NCCL_DUMP_ON_TIMEOUT``
            (its ``ProcessGroupNCCL.hpp`` names it); None when unknown.
    """

    version: str | None
    buffer_size: tuple[str, ...]
    dump_file: tuple[str, ...]
    default_entries: int | None
    evidence: str
    dump_on_timeout: bool | None = None

    @classmethod
    def by_version(cls, version: str | None, evidence: str) -> TorchRecorder:
        """The names by version alone (no header to read): new names from 2.13 on."""
        new = _version_tuple(version) >= NEW_NAMES_SINCE if version else False
        return cls(version, BUFFER_SIZE_NAMES if new else BUFFER_SIZE_NAMES[1:],
                   DUMP_FILE_NAMES if new else DUMP_FILE_NAMES[1:], None, evidence)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = re.match(r"([0-9]+)\.([0-9]+)", version)
    return (int(parts[1]), int(parts[2])) if parts else (0, 0)


def parse_recorder_header(text: str) -> tuple[tuple[str, ...], int] | None:
    """The buffer-size variables and default of a torch header's ``getCvarInt`` call.

    Example: ``getCvarInt({"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, 2000)`` ->
    ``(("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"), 2000)``; None when the text
    has no such call.
    """
    for match in _CVAR_INT.finditer(text):
        names = tuple(_QUOTED.findall(match[1]))
        if any(name in BUFFER_SIZE_NAMES for name in names):
            return names, int(match[2])
    return None


def find_torch() -> TorchRecorder | None:
    """The installed torch's recorder settings, read without importing torch; None when torch
    is not installed for this interpreter. Read once per ``sys.path``."""
    return _find_torch(tuple(sys.path))


@functools.lru_cache(maxsize=4)
def _find_torch(search_path: tuple[str, ...]) -> TorchRecorder | None:
    del search_path  # the cache key: another sys.path may find another torch
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        version: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        version = None
    where = Path(next(iter(spec.submodule_search_locations)))
    dump_on_timeout: bool | None = None
    try:
        with open(where / _NCCL_HEADER, "rb") as header:
            dump_on_timeout = f'"{DUMP_ON_TIMEOUT}"'.encode() in header.read(_MAX_HEADER_BYTES)
    except OSError:
        pass
    for relative in _HEADERS:
        try:
            with open(where / relative, "rb") as header:
                text = header.read(_MAX_HEADER_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        found = parse_recorder_header(text)
        if found is None:
            continue
        names, default = found
        dump = DUMP_FILE_NAMES if names[0] == BUFFER_SIZE_NAMES[0] else DUMP_FILE_NAMES[1:]
        return TorchRecorder(version, names, dump, default, f"torch {version}: {relative}",
                             dump_on_timeout)
    by_version = TorchRecorder.by_version(version, f"torch {version}: no recorder header "
                                          "shipped; names by version")
    return replace(by_version, dump_on_timeout=dump_on_timeout)


def stoi(text: str) -> int | None:
    """``std::stoi(text)`` as torch reads an integer variable: leading white space, a sign,
    the longest run of digits; None when it throws (no digit, or outside a 32-bit int)."""
    rest = text.lstrip(" \t\n\r\f\v")
    sign = -1 if rest[:1] == "-" else 1
    rest = rest[1:] if rest[:1] in "+-" else rest
    digits = re.match(r"[0-9]{1,40}", rest)
    if digits is None:
        return None
    value = sign * int(digits[0])
    return value if -_INT32 <= value < _INT32 else None


@dataclass(frozen=True, slots=True)
class RecorderSetting:
    """The recorder as a job started from one environment would have it.

    Attributes:
        variable: The buffer-size variable in effect, e.g. ``"TORCH_FR_BUFFER_SIZE"``; None
            when none is set.
        entries: Entries it keeps, e.g. ``2000``; None when unknown.
        invalid: Set variables torch rejects, as ``NAME='value'``, e.g.
            ``("TORCH_NCCL_TRACE_BUFFER_SIZE='abc'",)``.
    """

    variable: str | None
    entries: int | None
    invalid: tuple[str, ...] = ()

    @property
    def off(self) -> bool:
        """Whether the recorder keeps nothing (a buffer of 0 entries)."""
        return self.entries == 0


def recorder_setting(environ: Mapping[str, str], torch: TorchRecorder) -> RecorderSetting:
    """What ``torch`` makes of the buffer-size variables in ``environ``."""
    invalid = tuple(f"{name}={environ[name]!r}" for name in torch.buffer_size
                    if name in environ and stoi(environ[name]) is None)
    for name in torch.buffer_size:
        if name in environ:
            return RecorderSetting(name, stoi(environ[name]), invalid)
    return RecorderSetting(None, torch.default_entries, invalid)


def recorder_checks(
    environ: Mapping[str, str], torch: TorchRecorder | None
) -> list[tuple[str, Finding]]:
    """``flight-recorder-invalid`` and ``flight-recorder-off``, each with its variable.

    Args:
        environ: The job's environment.
        torch: The installed torch (:func:`find_torch`); None when there is none or the host
            is a snapshot: then the names torch 2.13 reads are judged and an unset variable
            says nothing (its default is unknown).
    """
    reader = torch or TorchRecorder(None, BUFFER_SIZE_NAMES, DUMP_FILE_NAMES, None,
                                    "no torch here: the names torch 2.13 reads")
    setting = recorder_setting(environ, reader)
    shown = f"torch {reader.version}" if reader.version else "PyTorch"
    evidence = (f"{shown} reads {' then '.join(reader.buffer_size)} ({reader.evidence})",)
    out: list[tuple[str, Finding]] = []
    for item in setting.invalid:
        name = item.split("=", 1)[0]
        out.append((name, Finding.of(
            "flight-recorder-invalid",
            f"{item} is not an integer: {shown} rejects it ('Invalid value for environment "
            f"variable: {name}') when the first process group is created; with Gloo the "
            "process then hangs or aborts ('terminate called without an active exception') "
            "in the process group's constructor",
            (item, *evidence), f"unset {name}",
        )))
    if setting.off and not setting.invalid:
        if setting.variable is not None:
            fix = (f"unset {setting.variable}" if reader.default_entries else
                   f"export {setting.variable}={DEFAULT_ENTRIES}")
            title = (f"{setting.variable}={environ[setting.variable]!r} switches PyTorch's "
                     "flight recorder off: a hang leaves no record of which collective each "
                     "rank was in")
            item = f"{setting.variable}={environ[setting.variable]!r}"
        else:
            name = reader.buffer_size[0]
            fix = f"export {shlex.quote(name)}={DEFAULT_ENTRIES}"
            title = (f"{shown} keeps no flight-recorder entries unless {name} is set: a hang "
                     "leaves no record of which collective each rank was in")
            item = f"{name} is unset (default {reader.default_entries})"
        out.append((setting.variable or reader.buffer_size[0], Finding.of(
            "flight-recorder-off", title, (item, *evidence),
            f"{fix} (or start the job with `clusterenv launch`, which sets it when unset)",
        )))
    return out


def default_hang_base(environ: Mapping[str, str]) -> Path:
    """Where per-job dump directories go when ``CLUSTERENV_HANG_DIR`` is unset:
    ``$XDG_CACHE_HOME/clusterenv/hang``, else ``~/.cache/clusterenv/hang`` (torch's own dumps
    default to ``~/.cache/torch``), else ``/tmp/clusterenv-hang``."""
    cache = environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(cache):
        return Path(cache) / "clusterenv" / "hang"
    home = environ.get("HOME", "")
    if os.path.isabs(home):
        return Path(home) / ".cache" / "clusterenv" / "hang"
    return Path("/tmp/clusterenv-hang")  # noqa: S108  # no home: the documented last resort
