"""Which NCCL library and which network plugin a job on this node would really load.

Two loader searches, both done as the dynamic loader does them (``ld.so(8)``, ``dlopen(3)``),
reading ELF files and never loading one:

- ``libnccl.so.2`` is a ``DT_NEEDED`` of torch's CUDA library. The loader looks in that
  library's ``DT_RPATH`` when it has no ``DT_RUNPATH``, then ``LD_LIBRARY_PATH``, then its
  ``DT_RUNPATH`` (pip's torch: ``$ORIGIN/../../nvidia/nccl/lib``, the NVIDIA wheel), then the
  linker cache, then the default directories. So a ``libnccl.so.2`` on ``LD_LIBRARY_PATH`` wins
  over the wheel: :func:`torch_search_path` reads torch's own entries from its ELF file.
- The network plugin is ``dlopen()``ed by ``libnccl.so.2`` under names that depend on the NCCL
  release (``NCCL_NET_PLUGIN`` unset: ``libnccl-net.so``; set: the name, ``libnccl-net-NAME.so``,
  a comma-separated list, ``none``; see ``tools/nccl_plugin_rules.py`` and the table it writes,
  :mod:`clusterenv.nccl._plugin_rules`). A name without ``/`` is searched for as above with
  ``libnccl.so.2`` as the caller; a file is accepted when it exports one of the
  ``ncclNetPlugin_vN`` symbols that release looks up. Since 2.27 NCCL loads the plugin only at
  communicator init, so ``ncclGetUniqueId`` cannot reveal it: this is the only way to know.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from clusterenv._elf import ElfError, exported_symbols, read_dynamic
from clusterenv._jsonable import json_fields
from clusterenv._root import absolute_entries
from clusterenv.nccl._plugin_rules import RULES

__all__ = ["DEFAULT_DIRS", "NetPlugin", "PluginRule", "resolve_net_plugin", "rule_for",
           "search_path", "torch_search_path"]

#: The loader's default directories, after its cache (glibc on x86_64 and aarch64 systems).
DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
_LD_CACHE = "/etc/ld.so.cache"
_MAX_DIRS = 64


@dataclass(frozen=True, slots=True)
class PluginRule:
    """How one run of NCCL releases finds and accepts a network plugin (see the table's
    generator, ``tools/nccl_plugin_rules.py``, for the meaning of each field)."""

    since: tuple[int, int, int]
    tag: str
    default: str
    named: str
    separator: str | None
    none: bool
    static: bool
    symbols: tuple[str, ...]


def rule_for(version: tuple[int, int, int] | None) -> PluginRule:
    """The rules of the NCCL release ``version``: the last run that starts at or before it
    (the newest known for a newer release or an unknown version)."""
    rows = [PluginRule(*row) for row in RULES]
    if version is None:
        return rows[-1]
    chosen = rows[0]
    for row in rows:
        if row.since <= version:
            chosen = row
    return chosen


@dataclass(frozen=True, slots=True)
class NetPlugin:
    """The network plugin NCCL would load here.

    Attributes:
        path: The file, e.g. ``"/opt/aws-ofi-nccl/lib/libnccl-net.so"``; None: NCCL uses its
            own IB and socket transports.
        interface: The plugin interface NCCL would use, e.g. ``"ncclNetPlugin_v8"``.
        note: How it was resolved, e.g. ``"NCCL_NET_PLUGIN unset: libnccl-net.so from
            LD_LIBRARY_PATH"``, or why there is none.
        rules: Whose rules, e.g. ``"NCCL 2.21.5 (v2.21.5-1)"``.
    """

    path: str | None
    interface: str | None
    note: str
    rules: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready data: the fields above."""
        return json_fields(self)


def _expand(entry: str, origin: str) -> str:
    return entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


def _dirs_of(path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(RPATH used before LD_LIBRARY_PATH, RUNPATH used after it) of the object at ``path``."""
    try:
        dynamic = read_dynamic(path)
    except (OSError, ElfError):
        return (), ()
    origin = str(Path(path).parent)
    rpath = () if dynamic.runpath else tuple(_expand(e, origin) for e in dynamic.rpath)
    return rpath, tuple(_expand(e, origin) for e in dynamic.runpath)


def _cache_paths(name: str, cache: str = _LD_CACHE) -> Iterator[str]:
    try:
        with open(cache, "rb") as f:
            data = f.read(64 * 1024 * 1024)
    except OSError:
        return
    for raw in re.findall(rb"/[^\0]*?/" + re.escape(name.encode()) + rb"(?=\0)", data):
        yield raw.decode("utf-8", "surrogateescape")


def search_path(
    environ: Mapping[str, str], *, caller: str | None, fallback_runpath: tuple[str, ...] = ()
) -> list[tuple[str, str]]:
    """Directories the loader searches for a name ``caller`` asks for, in order, with why:
    the caller's ``DT_RPATH`` (when it has no ``DT_RUNPATH``), ``LD_LIBRARY_PATH``, its
    ``DT_RUNPATH`` (``fallback_runpath`` when the caller is unknown), then (by the caller of
    this function) the linker cache and :data:`DEFAULT_DIRS`. Absolute directories only: an
    empty or relative entry would mean the current directory."""
    rpath, runpath = _dirs_of(caller) if caller else ((), fallback_runpath)
    found = [(d, f"DT_RPATH of {caller}") for d in rpath]
    found += [(d, "LD_LIBRARY_PATH") for d in
              absolute_entries(environ.get("LD_LIBRARY_PATH"), limit=_MAX_DIRS, separators=":;")]
    found += [(d, f"DT_RUNPATH of {caller}" if caller else "torch's RUNPATH") for d in runpath]
    return [(d, why) for d, why in found if os.path.isabs(d)]


def _locate(name: str, dirs: list[tuple[str, str]], cache: str) -> tuple[str, str] | None:
    if "/" in name:  # dlopen takes a name with a slash as a path, searching nothing
        return (name, "the path as given") if os.path.isfile(name) else None
    for directory, why in dirs:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            return candidate, why
    for candidate in _cache_paths(name, cache):
        if os.path.isfile(candidate):
            return candidate, "the linker cache"
    for directory in DEFAULT_DIRS:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            return candidate, "a default directory"
    return None


def torch_search_path(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """Where the loader looks for ``libnccl.so.2`` when torch's CUDA library asks for it: read
    from that library (a ``libtorch*.so`` whose ``DT_NEEDED`` names it) in the torch this
    interpreter would import; without one (no torch, a CPU build), pip's CUDA torch's
    ``RUNPATH`` is assumed: the ``nvidia/nccl/lib`` directory of each site-packages."""
    from clusterenv.nccl.version import site_packages_dirs  # noqa: PLC0415  # live host only

    caller = None
    for site in site_packages_dirs():
        lib = Path(site) / "torch" / "lib"
        for candidate in sorted(lib.glob("libtorch*.so")) if lib.is_dir() else ():
            try:
                if "libnccl.so.2" in read_dynamic(str(candidate)).needed:
                    caller = str(candidate)
                    break
            except (OSError, ElfError):
                continue
        if caller:
            break
    wheels = tuple(str(Path(s) / "nvidia" / "nccl" / "lib") for s in site_packages_dirs())
    return search_path(environ, caller=caller, fallback_runpath=wheels)


def _candidates(rule: PluginRule, value: str | None) -> tuple[list[str], str]:
    """The names NCCL tries, in order, and how ``NCCL_NET_PLUGIN`` reads."""
    if not value:  # unset or empty: both mean the default in every release
        return [rule.default], f"NCCL_NET_PLUGIN unset: {rule.default}"
    if rule.none and value.lower() == "none":
        return [], "NCCL_NET_PLUGIN=none: no external plugin"
    entries = [e for e in value.split(rule.separator) if e] if rule.separator else [value]
    names: list[str] = []
    for entry in entries:
        looks_lib = entry.startswith("lib") and entry.endswith(".so") and len(entry) >= 7
        prefixed = f"libnccl-net-{entry}.so"
        if rule.named == "prefixed":
            names.append(prefixed)
        elif rule.named == "name-then-prefixed":
            names += [entry, prefixed]
        elif rule.named == "lib-so-name-else-prefixed":
            names.append(entry if looks_lib else prefixed)
        else:  # name-then-prefixed-unless-file
            names += [entry] if "/" in entry or looks_lib else [entry, prefixed]
    return names, f"NCCL_NET_PLUGIN={value}"


def resolve_net_plugin(
    environ: Mapping[str, str],
    *,
    version: tuple[int, int, int] | None,
    library: str | None,
    cache: str = _LD_CACHE,
) -> NetPlugin:
    """The network plugin the NCCL ``library`` (release ``version``) would load here.

    Args:
        environ: Read for ``NCCL_NET_PLUGIN`` (merge NCCL's config files in first: NCCL reads
            them too) and ``LD_LIBRARY_PATH``.
        version: The release, e.g. ``(2, 21, 5)``; None: the newest rules known.
        library: The ``libnccl.so.2`` that loads (its ``RUNPATH`` is searched).
        cache: The linker cache.

    Returns:
        The plugin, or one with ``path=None`` saying why there is none. Never raises.
    """
    rule = rule_for(version)
    shown = ".".join(map(str, version)) if version else "unknown (newest rules)"
    rules = f"NCCL {shown} ({rule.tag})"
    names, how = _candidates(rule, environ.get("NCCL_NET_PLUGIN"))
    dirs = search_path(environ, caller=library)
    tried = []
    for name in names:
        if rule.static and name and "STATIC_PLUGIN".lower().startswith(name.lower()):
            return NetPlugin(None, None, f"{how}: {name!r} names the program itself "
                             "(STATIC_PLUGIN), which exports no plugin", rules)
        located = _locate(name, dirs, cache)
        if located is None:
            tried.append(f"{name} (not found)")
            continue
        path, where = located
        try:
            exported = exported_symbols(path, "ncclNetPlugin_")
        except (OSError, ElfError) as e:
            tried.append(f"{path} (not loadable: {e})")
            continue
        accepted = next((s for s in rule.symbols if s in exported), None)
        if accepted is None:
            tried.append(f"{path} (exports none of {', '.join(rule.symbols)})")
            continue
        return NetPlugin(path, accepted, f"{how}: {name} from {where}", rules)
    detail = f"; tried {', '.join(tried)}" if tried else ""
    return NetPlugin(None, None, f"{how}: NCCL uses its own transports{detail}", rules)
