"""Finding and reading flight-recorder dumps: files and directories, pickle and JSON.

A dump carries no rank, host or pid: torch names the file ``<prefix><rank>`` (``prefix`` from
``TORCH_FR_DUMP_TEMP_FILE``, e.g. ``~/.cache/torch/comm_lib_trace_rank_3`` by default), and
clusterenv's prefix adds the host (``trace-<host>-rank3``). clusterenv's torch integration also
leaves a note beside each dump it writes (``<dump>.clusterenv.json``: rank, host, node rank,
world size and the error the rank failed with), and ``clusterenv launch`` a launch record
(``launch-node<N>.json``) in the same directory.

Every file is untrusted: it is read only when it is a regular file under the size limit, its
pickle through :mod:`clusterenv.hang.unpickle`, its JSON with nesting and size bounds. A file
that cannot be used is skipped with a note naming it and why; nothing raises past this module.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from clusterenv._text import clip
from clusterenv.hang.model import (
    MAX_GROUPS,
    MAX_SIZES,
    MAX_TEXT,
    Call,
    DumpForm,
    GroupTrace,
    RankDump,
)
from clusterenv.hang.record import LaunchRecord, RecordError, parse_launch_record
from clusterenv.hang.unpickle import (
    DEFAULT_DUMP_LIMITS,
    CorruptDump,
    DumpLimits,
    UnsafeDump,
    load_pickle,
)

__all__ = [
    "OUR_PREFIX",
    "SIDECAR_SUFFIX",
    "DumpInputs",
    "read_dump",
    "read_inputs",
    "summarize",
]

#: clusterenv's dump-file prefix inside a job directory: ``trace-<host>-rank`` + the rank.
OUR_PREFIX = "trace-{host}-rank"
#: The note clusterenv's torch integration writes beside a dump.
SIDECAR_SUFFIX = ".clusterenv.json"

_OURS = re.compile(r"trace-(?P<host>[A-Za-z0-9._-]{1,200})-rank(?P<rank>[0-9]{1,7})"
                   r"(?:\.(?:pkl|pickle|json))?")
_TORCH = re.compile(r"(?P<prefix>.{0,200}?)(?P<rank>[0-9]{1,7})(?:\.(?:pkl|pickle|json))?")
_RECORD = re.compile(r"launch-node(?P<node>[0-9]{1,6})\.json")
_MAX_FILES = 4096
_MAX_SIDECAR_BYTES = 64 * 1024
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class _Skip(Exception):  # a file skipped, with why
    pass


@dataclass(frozen=True, slots=True)
class DumpInputs:
    """What a set of paths holds.

    Attributes:
        dumps: One summary per rank (the newest file when a rank has several).
        records: Launch records found, one per node rank.
        notes: Files skipped or doubtful, each naming the file and why.
    """

    dumps: tuple[RankDump, ...] = ()
    records: tuple[LaunchRecord, ...] = ()
    notes: tuple[str, ...] = field(default=())


def _read_regular(path: str, max_bytes: int) -> tuple[bytes, float]:
    """The bytes of a regular file (FIFOs, devices and oversized files are refused)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        raise _Skip(e.strerror or str(e)) from e
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Skip("not a regular file")
        if info.st_size > max_bytes:
            raise _Skip(f"{info.st_size} bytes, over the {max_bytes}-byte limit")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise _Skip(f"grew past the {max_bytes}-byte limit while being read")
        return b"".join(chunks), info.st_mtime
    except OSError as e:
        raise _Skip(e.strerror or str(e)) from e
    finally:
        os.close(fd)


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CorruptDump(f"{what} is not UTF-8") from e
    except RecursionError as e:
        raise CorruptDump(f"{what} is nested too deeply") from e
    except ValueError as e:
        raise CorruptDump(f"not complete JSON ({e})") from e
    if not isinstance(value, dict):
        raise CorruptDump(f"{what} is a JSON {type(value).__name__}, not an object")
    return value


def _int(value: Any) -> int | None:
    """An integer field: torch's JSON form writes some as strings (``"-1"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) < 1 << 63 else None
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,19}", value):
        return int(value)
    return None


def _text(value: Any, limit: int = MAX_TEXT) -> str | None:
    return clip(value, limit) if isinstance(value, str) else None


def _sizes(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    out = []
    for shape in value[:MAX_SIZES]:
        if isinstance(shape, (list, tuple)):
            dims = tuple(d for d in shape[:MAX_SIZES] if isinstance(d, int)
                         and not isinstance(d, bool) and 0 <= d < 1 << 62)
            out.append(dims)
    return tuple(out)


def _where(frames: Any) -> str | None:
    """The first frame outside torch: the user's call."""
    if not isinstance(frames, (list, tuple)):
        return None
    for frame in frames[:64]:
        if not isinstance(frame, dict):
            continue
        filename = frame.get("filename")
        if not isinstance(filename, str) or "/torch/" in filename.replace(os.sep, "/"):
            continue
        line, name = _int(frame.get("line")), _text(frame.get("name"), 80)
        return clip(f"{filename}:{line if line is not None else '?'} in {name or '?'}", MAX_TEXT)
    return None


def _call(entry: Mapping[str, Any], group: str, seq: int, p2p: bool) -> Call:
    dtypes = entry.get("input_dtypes")
    return Call(
        group=group, seq=seq, p2p=p2p,
        op=_text(entry.get("profiling_name"), 80) or "?",
        state=_text(entry.get("state"), 40) or "?",
        input_sizes=_sizes(entry.get("input_sizes")),
        dtypes=tuple(clip(d, 40) for d in dtypes[:MAX_SIZES] if isinstance(d, str))
        if isinstance(dtypes, (list, tuple)) else (),
        where=_where(entry.get("frames")),
        time_created_ns=_int(entry.get("time_created_ns")),
        timeout_ms=_int(entry.get("timeout_ms")),
        record_id=_int(entry.get("record_id")),
    )


def _group_ranks(config: Any) -> tuple[int, ...] | None:
    """``pg_config[name]["ranks"]``: torch writes the vector as text, ``"[0, 1, 2]"``."""
    if not isinstance(config, dict):
        return None
    ranks = config.get("ranks")
    if isinstance(ranks, str) and len(ranks) < 1 << 22:
        found = re.findall(r"-?[0-9]+", ranks)
        values = [int(r) for r in found[: 1 << 20]]
    elif isinstance(ranks, (list, tuple)):
        values = [r for r in ranks[: 1 << 20] if isinstance(r, int) and not isinstance(r, bool)]
    else:
        return None
    if not values or any(r < 0 for r in values):
        return None
    return tuple(values)


def summarize(raw: Mapping[str, Any], *, rank: int, path: str, form: DumpForm,
              limits: DumpLimits = DEFAULT_DUMP_LIMITS) -> RankDump:
    """Reduce a loaded dump to its :class:`RankDump`.

    Raises:
        CorruptDump: It has no ``entries`` list (not a flight-recorder dump).
    """
    entries = raw.get("entries")
    if not isinstance(entries, list):
        raise CorruptDump("no 'entries' list: not a PyTorch flight-recorder dump")
    seen = entries[-limits.max_entries:]
    last: dict[str, Call] = {}
    last_p2p: dict[str, Call] = {}
    counts: dict[str, int] = {}
    desc: dict[str, str] = {}
    pg_ids: dict[str, str] = {}
    for entry in seen:
        if not isinstance(entry, dict):
            continue
        pg = entry.get("process_group")
        if not isinstance(pg, (list, tuple)) or not pg or not isinstance(pg[0], str):
            continue
        name = clip(pg[0], 80)
        if name not in counts and len(counts) >= MAX_GROUPS:
            continue
        counts[name] = counts.get(name, 0) + 1
        if len(pg) > 1 and isinstance(pg[1], str):
            desc[name] = clip(pg[1], 80)
        pg_id = _int(entry.get("pg_id"))
        if pg_id is not None:
            pg_ids[str(pg_id)] = name
        p2p = entry.get("is_p2p") is True
        seq = _int(entry.get("p2p_seq_id" if p2p else "collective_seq_id"))
        if seq is None:
            continue
        table = last_p2p if p2p else last
        if name not in table or seq >= table[name].seq:
            table[name] = _call(entry, name, seq, p2p)
    config = raw.get("pg_config")
    config = config if isinstance(config, dict) else {}
    status = raw.get("pg_status")
    status = status if isinstance(status, dict) else {}
    completed: dict[str, int] = {}
    for pg_id, values in list(status.items())[:MAX_GROUPS * 4]:
        if isinstance(values, dict) and str(pg_id) in pg_ids:
            done = _int(values.get("last_completed_collective"))
            if done is not None and done >= 0:
                completed[pg_ids[str(pg_id)]] = done
    groups = tuple(
        GroupTrace(name=name, desc=desc.get(name, ""),
                   ranks=_group_ranks(config.get(name)),
                   last=last.get(name), last_p2p=last_p2p.get(name), entries=counts[name],
                   last_completed=completed.get(name))
        for name in sorted(counts, key=lambda n: (len(n), n))
    )
    return RankDump(rank=rank, path=clip(path, MAX_TEXT), form=form,
                    version=_text(raw.get("version"), 20) or "", groups=groups,
                    entries=len(entries))


def _parse(data: bytes, limits: DumpLimits) -> tuple[dict[str, Any], DumpForm]:
    start = data.lstrip()[:1]
    if start == b"\x80":
        return load_pickle(data, limits), "pickle"
    if start == b"{":
        return _json_object(data, "the dump"), "json"
    if not data:
        raise CorruptDump("empty file (the rank may have been killed while writing it)")
    raise CorruptDump("neither a pickle nor JSON")


def _rank_and_host(name: str) -> tuple[int | None, str | None]:
    ours = _OURS.fullmatch(name)
    if ours:
        return int(ours["rank"]), ours["host"]
    theirs = _TORCH.fullmatch(name)
    return (int(theirs["rank"]), None) if theirs else (None, None)


def _sidecar(path: str) -> dict[str, Any]:
    """clusterenv's note beside a dump, or ``{}``."""
    try:
        data, _ = _read_regular(path + SIDECAR_SUFFIX, _MAX_SIDECAR_BYTES)
        note = _json_object(data, "the note")
    except (_Skip, CorruptDump):
        return {}
    return note if note.get("format") == 1 else {}


def read_dump(path: str | os.PathLike[str], *, limits: DumpLimits = DEFAULT_DUMP_LIMITS
              ) -> tuple[RankDump, float]:
    """Read one dump file and the note beside it; return its summary and modification time.

    Raises:
        ValueError: Why it cannot be used (unsafe, truncated, no rank), without the path.
    """
    shown = os.fspath(path)
    try:
        data, mtime = _read_regular(shown, limits.max_bytes)
    except _Skip as e:
        raise ValueError(str(e)) from e
    raw, form = _parse(data, limits)
    note = _sidecar(shown)
    named_rank, host = _rank_and_host(os.path.basename(shown))
    rank = _int(note.get("rank"))
    if rank is None:
        rank = named_rank
    if rank is None or not 0 <= rank < 1 << 20:
        raise ValueError("no rank: torch names a dump <prefix><rank>, and this name ends in no "
                         "number; rename it, e.g. to trace-<host>-rank<N>")
    dump = summarize(raw, rank=rank, path=shown, form=form, limits=limits)
    return replace(
        dump,
        host=_text(note.get("host"), 200) or host,
        node_rank=_int(note.get("node_rank")),
        world_size=_int(note.get("world_size")),
        error=_text(note.get("error"), 2 * MAX_TEXT),
        failed_in=_text(note.get("failed_in"), 80),
        failed_at=_text(note.get("failed_at")),
    ), mtime


def _candidates(path: str, notes: list[str]) -> Iterable[str]:
    """Every file under ``path`` worth reading: ``path`` itself, or the files of a directory
    named like a dump or a launch record."""
    if not os.path.isdir(path):
        if os.path.lexists(path):
            yield path
        else:
            notes.append(f"{path}: no such file or directory")
        return
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        notes.append(f"{path}: {e.strerror or e}")
        return
    if len(names) > _MAX_FILES:
        notes.append(f"{path}: {len(names)} entries, only the first {_MAX_FILES} are read")
    for name in names[:_MAX_FILES]:
        if name.endswith(SIDECAR_SUFFIX) or name.startswith("."):
            continue
        if _RECORD.fullmatch(name) or _OURS.fullmatch(name) or _TORCH.fullmatch(name):
            yield os.path.join(path, name)


def read_inputs(paths: Sequence[str | os.PathLike[str]], *,
                limits: DumpLimits = DEFAULT_DUMP_LIMITS) -> DumpInputs:
    """Read every dump and launch record in ``paths`` (files, or directories read one level
    deep: files named like a dump or a launch record)."""
    notes: list[str] = []
    chosen: dict[int, tuple[RankDump, float]] = {}
    records: dict[int, LaunchRecord] = {}
    for given in paths:
        for path in _candidates(os.fspath(given), notes):
            name = os.path.basename(path)
            if _RECORD.fullmatch(name):
                try:
                    data, _ = _read_regular(path, _MAX_SIDECAR_BYTES)
                    record = parse_launch_record(_json_object(data, "the launch record"))
                except (_Skip, CorruptDump, RecordError) as e:
                    notes.append(f"{path}: skipped: {e}")
                    continue
                records[record.node_rank] = record
                continue
            try:
                dump, mtime = read_dump(path, limits=limits)
            except UnsafeDump as e:
                notes.append(f"{path}: refused: {e}")
                continue
            except ValueError as e:  # CorruptDump and the reasons read_dump gives
                notes.append(f"{path}: skipped: {e}")
                continue
            earlier = chosen.get(dump.rank)
            if earlier is not None:
                keep, drop = sorted([(dump, mtime), earlier],
                                    key=lambda d: (d[1], d[0].form == "pickle"), reverse=True)
                notes.append(f"rank {dump.rank}: two dumps, {keep[0].path} (used) and "
                             f"{drop[0].path} (older)")
                chosen[dump.rank] = keep
            else:
                chosen[dump.rank] = (dump, mtime)
    dumps = tuple(d for _, (d, _) in sorted(chosen.items()))
    return DumpInputs(dumps, tuple(r for _, r in sorted(records.items())), tuple(notes))
