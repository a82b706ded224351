"""Ask NCCL itself which interface it bootstraps on: find ``libnccl.so.2`` and run its choice.

NCCL picks its bootstrap interface inside ``ncclGetUniqueId()``, which needs no GPU. This module
finds the library a PyTorch job on this node would load and, in one short-lived subprocess with a
deadline (never in the caller's process: NCCL keeps global state, threads and a listening
socket), calls it once per environment with ``NCCL_DEBUG=INFO`` and reads NCCL's own
``Bootstrap: Using <ifname>:<address><port>`` line, or its ``no socket interface found``
warning when the filter selects nothing.

Where the library comes from, first hit wins, in the dynamic loader's order for a library that
PyTorch links (``LD_LIBRARY_PATH`` comes before the ``RUNPATH`` that points torch at the wheel;
see :mod:`clusterenv.nccl.plugin`):

1. ``CLUSTERENV_NCCL_LIBRARY``: an absolute path to the library, or ``none`` to never ask NCCL;
2. the ``DT_RPATH`` of torch's CUDA library, when it has no ``DT_RUNPATH`` (read from its ELF
   file);
3. the absolute directories of ``LD_LIBRARY_PATH``;
4. the ``DT_RUNPATH`` of torch's CUDA library; without a CUDA torch, the ``nvidia/nccl/lib``
   directory in this interpreter's site-packages (the ``nvidia-nccl-cu*`` wheels that
   pip-installed PyTorch's ``RUNPATH`` points to);
5. the dynamic linker's cache (``/etc/ld.so.cache``).

Only absolute paths are ever opened, and the probe runs in ``/``: a ``libnccl.so.2`` (or a
``nvidia/`` directory) in the current directory is never loaded, whatever ``sys.path`` and
``LD_LIBRARY_PATH`` say (an unset or empty variable, or an empty entry, would otherwise mean
the current directory to the loader).

Cost: one ``python -I -S`` subprocess that forks a worker per environment; about a tenth of a
second in all (see ``benchmarks/bench_nccl_probe.py``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from clusterenv._root import absolute_entries
from clusterenv.nccl.plugin import torch_search_path

__all__ = [
    "LIBRARY_VARIABLE",
    "LibrarySearch",
    "NcclAnswer",
    "NcclLibrary",
    "ask_nccl",
    "find_nccl_library",
    "parse_probe_output",
]

LIBRARY_VARIABLE = "CLUSTERENV_NCCL_LIBRARY"
"""Where the NCCL library is (a path), or ``none`` to never ask NCCL."""

_SONAME = "libnccl.so.2"
_LD_CACHE = "/etc/ld.so.cache"
_MAX_LD_DIRS = 32
_CHILD = Path(__file__).with_name("_probe_child.py")
_MARKER = "@@clusterenv-nccl-probe"
#: Set in the probe's environment so that NCCL prints its choice on stdout (also over an
#: NCCL_DEBUG_FILE from the environment or an NCCL config file) and nothing else changes.
_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,BOOTSTRAP,ENV,NET",
              "NCCL_DEBUG_FILE": "/dev/stdout"}
_BOOTSTRAP = re.compile(r"NCCL INFO Bootstrap ?: Using (\S+)<(\d+)>")
# Nothing selected: by NCCL_SOCKET_IFNAME and the defaults, or (NCCL_COMM_ID) no subnet matches.
_NOTHING = re.compile(r"NCCL WARN (?:Bootstrap ?: no socket interface found|"
                      r"NET/Socket ?: No usable listening interface found)")
_WARN = re.compile(r"NCCL WARN (.*)")


@dataclass(frozen=True, slots=True)
class NcclLibrary:
    """An NCCL library this node would load.

    Attributes:
        path: The file, e.g. ``"/usr/lib/python3/site-packages/nvidia/nccl/lib/libnccl.so.2"``.
        source: How it was found: ``"CLUSTERENV_NCCL_LIBRARY"``, ``"nvidia package"``,
            ``"LD_LIBRARY_PATH"`` or ``"linker cache"``.
    """

    path: str
    source: str


@dataclass(frozen=True, slots=True)
class LibrarySearch:
    """The outcome of :func:`find_nccl_library`.

    Attributes:
        library: The library found, or None.
        note: How it was found or why none was, e.g. ``"libnccl.so.2 from LD_LIBRARY_PATH:
            /opt/nccl/lib/libnccl.so.2"`` or ``"CLUSTERENV_NCCL_LIBRARY=none: NCCL is not
            asked"``.
        problem: The note describes a mistake to report: ``CLUSTERENV_NCCL_LIBRARY`` names no
            readable file.
    """

    library: NcclLibrary | None
    note: str
    problem: bool = False


@dataclass(frozen=True, slots=True)
class NcclAnswer:
    """What NCCL answered for one environment.

    Attributes:
        version: NCCL's own ``ncclGetVersion``, e.g. ``(2, 32, 3)``; None when it did not load.
        interface: The bootstrap interface, e.g. ``"eth0"``; None when NCCL selected nothing
            or did not answer.
        address: Its address as NCCL printed it, e.g. ``"172.20.0.5"`` or
            ``"fe80::1%ens1"``; None likewise.
        error: Why there is no answer (the library failed to load, NCCL failed for another
            reason, the deadline passed), e.g. ``"NCCL did not answer within 5 s"``; None
            when NCCL answered, including "no interface".
        log: NCCL's INFO and WARN lines, as printed.
    """

    version: tuple[int, int, int] | None
    interface: str | None
    address: str | None
    error: str | None = None
    log: tuple[str, ...] = ()

    @property
    def answered(self) -> bool:
        """NCCL made its choice (an interface, or none at all)."""
        return self.error is None and self.version is not None

    @property
    def by(self) -> str:
        """``"nccl 2.32.3"``: who answered."""
        return "nccl " + ".".join(map(str, self.version)) if self.version else "nccl"


def _ld_cache_paths(cache: str = _LD_CACHE) -> Iterator[Path]:
    """Paths of ``libnccl.so.2`` recorded in the linker cache, in the order stored.

    The cache is a string table of sonames and absolute paths; every NUL-terminated absolute
    path ending in ``/libnccl.so.2`` is a candidate (both the old and the new cache format).
    """
    try:
        with open(cache, "rb") as f:
            data = f.read(64 * 1024 * 1024)
    except OSError:
        return
    suffix = b"/" + _SONAME.encode()
    for raw in re.findall(rb"/[^\0]*?" + re.escape(suffix) + rb"(?=\0)", data):
        yield Path(raw.decode("utf-8", "surrogateescape"))


def _is_library(path: Path) -> bool:
    try:
        return path.is_file() and os.access(path, os.R_OK)
    except OSError:
        return False


def find_nccl_library(environ: Mapping[str, str], *, ld_cache: str = _LD_CACHE) -> LibrarySearch:
    """The NCCL library a job here would load, and how it was found.

    Args:
        environ: Read for ``CLUSTERENV_NCCL_LIBRARY`` and ``LD_LIBRARY_PATH``.
        ld_cache: The linker cache to search last.

    Returns:
        e.g. ``LibrarySearch(NcclLibrary(path, "nvidia package"), "libnccl.so.2 from nvidia
        package: PATH")``, or one without a library saying why. A
        ``CLUSTERENV_NCCL_LIBRARY`` that names no readable file gives ``problem=True`` and a
        note that names the variable, the value and the fix. Never raises.
    """
    given = environ.get(LIBRARY_VARIABLE)
    if given is not None and given.strip():
        if given.strip().lower() == "none":
            return LibrarySearch(None, f"{LIBRARY_VARIABLE}=none: NCCL is not asked")
        path = Path(given.strip()).expanduser()
        if not path.is_absolute():
            return LibrarySearch(None, f"{LIBRARY_VARIABLE}={given!r} is a relative path, which "
                                 "would load whatever is in the current directory: set it to "
                                 f"the absolute path of {_SONAME}, or to 'none'", problem=True)
        if path.is_dir():
            path = path / _SONAME
        if not _is_library(path):
            return LibrarySearch(None, f"{LIBRARY_VARIABLE}={given!r} is not a readable file: "
                                 f"set it to the path of {_SONAME}, or to 'none'", problem=True)
        return LibrarySearch(NcclLibrary(str(path), LIBRARY_VARIABLE),
                             f"{_SONAME} from {LIBRARY_VARIABLE}: {path}")
    # The loader's order for torch's DT_NEEDED libnccl.so.2, read from torch's own ELF file
    # (its DT_RPATH, LD_LIBRARY_PATH, its DT_RUNPATH; see clusterenv.nccl.plugin); without a
    # CUDA torch, the NVIDIA wheel stands where pip's torch's RUNPATH points.
    for directory, why in torch_search_path(environ):
        path = Path(directory) / _SONAME
        if _is_library(path):
            source = "nvidia package" if why == "torch's RUNPATH" else why
            found = NcclLibrary(str(path), source)
            return LibrarySearch(found, f"{_SONAME} from {source}: {found.path}")
    for path in _ld_cache_paths(ld_cache):
        if _is_library(path):
            return LibrarySearch(NcclLibrary(str(path), "linker cache"),
                                 f"{_SONAME} from the linker cache: {path}")
    return LibrarySearch(None, f"no {_SONAME} in LD_LIBRARY_PATH, an nvidia package or the "
                         f"linker cache (set {LIBRARY_VARIABLE}=PATH to name one)")


def _version(code: int) -> tuple[int, int, int] | None:
    # NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + ... before.
    if code >= 20900:
        return code // 10000, code // 100 % 100, code % 100
    if code >= 2000:
        return code // 1000, code // 100 % 10, code % 100
    return None


def _split_choice(text: str) -> tuple[str, str] | None:
    """``"eth0:172.20.0.5"`` -> ``("eth0", "172.20.0.5")``; ``"ens1:fe80::1%ens1"`` too.

    Interface names have no ``:`` but IPv4 labels (``eth0:1``) do, and IPv6 addresses do: the
    name ends at the first ``:`` after which an IP address follows.
    """
    for i, char in enumerate(text):
        if char != ":" or i == 0:
            continue
        try:
            ipaddress.ip_address(text[i + 1:].split("%", 1)[0])
        except ValueError:
            continue
        return text[:i], text[i + 1:]
    return None


def parse_probe_output(text: str) -> NcclAnswer:
    """One worker's output (NCCL's log and the final marker line) as an :class:`NcclAnswer`."""
    log = tuple(line for line in text.splitlines() if "NCCL " in line)
    tail = [line for line in text.splitlines() if line.startswith(_MARKER)]
    fields = tail[-1].split()[1:] if tail else []
    if not fields:
        return NcclAnswer(None, None, None, "the probe ended without an answer", log)
    if fields[0] == "load":
        detail = " ".join(fields[1:]) or "unknown error"
        return NcclAnswer(None, None, None, f"could not load NCCL: {detail}", log)
    if fields[0] == "signal":
        return NcclAnswer(None, None, None, f"NCCL crashed (signal {' '.join(fields[1:])})", log)
    try:
        code, result = int(fields[0]), int(fields[1])
    except (ValueError, IndexError):
        return NcclAnswer(None, None, None, f"unreadable probe result {tail[-1]!r}", log)
    version = _version(code)
    for line in log:
        match = _BOOTSTRAP.search(line)
        if match is not None:
            split = _split_choice(match.group(1))
            if split is not None and result == 0:
                return NcclAnswer(version, split[0], split[1], None, log)
    if any(_NOTHING.search(line) for line in log):
        return NcclAnswer(version, None, None, None, log)
    warnings = [m.group(1).strip() for line in log if (m := _WARN.search(line))]
    why = warnings[-1] if warnings else "no Bootstrap line"
    return NcclAnswer(version, None, None, f"ncclGetUniqueId returned {result}: {why}", log)


def probe_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as the probe gives it to NCCL: with ``NCCL_DEBUG=INFO``, the subsystems
    that print the bootstrap choice, and ``NCCL_DEBUG_FILE=/dev/stdout``."""
    return {**environ, **_DEBUG_ENV}


def ask_nccl(
    environs: Sequence[Mapping[str, str]],
    library: NcclLibrary,
    *,
    timeout: float = 5.0,
) -> list[NcclAnswer]:
    """Ask NCCL which interface it bootstraps on, once per environment, in one subprocess.

    Args:
        environs: The complete environments to judge, e.g. the one as it stands and the one
            with the plan applied. NCCL also reads its config files (``NCCL_CONF_FILE``,
            ``~/.nccl.conf``, ``/etc/nccl.conf``) as a job would.
        library: From :func:`find_nccl_library`.
        timeout: Seconds for the whole probe; then it is killed and every answer says so.

    Returns:
        One :class:`NcclAnswer` per environment, in order. Never raises for what NCCL does.
    """
    if not environs:
        return []
    if not os.path.isabs(library.path):
        why = f"{library.path!r} is not an absolute path: NCCL is not loaded from it"
        return [NcclAnswer(None, None, None, why)] * len(environs)
    payload = json.dumps([probe_environ(e) for e in environs])
    start = time.monotonic()
    try:
        proc = subprocess.Popen(  # our own script, with this interpreter
            [sys.executable, "-I", "-S", str(_CHILD), library.path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=_loader_environ(environs[0]), cwd="/", start_new_session=True,
        )
    except OSError as e:
        return [NcclAnswer(None, None, None, f"could not start the probe: {e}")] * len(environs)
    try:
        out, err = proc.communicate(payload.encode("utf-8", "surrogateescape"), timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        why = f"NCCL did not answer within {timeout:g} s"
        return [NcclAnswer(None, None, None, why)] * len(environs)
    try:
        texts = json.loads(out.decode("utf-8", "replace"))
    except ValueError:
        texts = None
    if not isinstance(texts, list) or len(texts) != len(environs):
        detail = " ".join(err.decode("utf-8", "replace").split())[-200:]
        detail = detail or f"exit {proc.returncode}"
        why = f"the probe failed after {time.monotonic() - start:.1f} s: {detail}"
        return [NcclAnswer(None, None, None, why)] * len(environs)
    return [parse_probe_output(str(t)) for t in texts]


def _loader_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The probe process's own environment: ``environ`` with ``LD_LIBRARY_PATH`` reduced to
    its absolute entries (the loader reads it once, at start, to resolve NCCL's dependencies
    and plugins; an empty or relative entry would mean the directory the probe runs in)."""
    env = dict(environ)
    if "LD_LIBRARY_PATH" in env:
        kept = absolute_entries(env["LD_LIBRARY_PATH"], limit=_MAX_LD_DIRS, separators=":;")
        if kept:
            env["LD_LIBRARY_PATH"] = ":".join(kept)
        else:
            del env["LD_LIBRARY_PATH"]
    return env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.communicate()
