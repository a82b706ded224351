"""Which NCCL this node would load, found without importing torch or loading NCCL.

Three cheap kinds of evidence, in the order a PyTorch job is likely to use them:

1. an installed ``nvidia-nccl-cu*`` distribution (the NCCL that pip-installed PyTorch loads),
   looked up with :mod:`importlib.metadata`, on the live host only;
2. ``NCCL_VERSION`` in the environment (NVIDIA's NGC containers set it to the bundled NCCL);
3. ``libnccl.so.2.X.Y`` files in the usual library directories under the root and in
   ``LD_LIBRARY_PATH``.

The version matters for two decisions: ``NCCL_IB_GID_INDEX`` (NCCL 2.21 and later choose the
RoCE GID themselves) and GPUDirect detection (NCCL before 2.23 may miss ``nvidia_peermem``).
When the sources disagree, neither side of a threshold is "known".
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from clusterenv._root import Root, absolute_entries
from clusterenv.errors import DiscoveryError

__all__ = [
    "NcclVersion", "detect_nccl_versions", "known_before", "loader_dirs",
    "parse_nccl_version", "site_packages_dirs", "versions_text",
]

_VERSION = re.compile(
    r"\s*v?([0-9]{1,3})\.([0-9]{1,3})(?:\.([0-9]{1,4}))?(?:[-+.][0-9A-Za-z.+-]*)?\s*"
)
_LIBRARY = re.compile(r"libnccl\.so\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,4})")
_DISTRIBUTIONS = ("nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl-cu11")
# The dynamic loader's default directories (Debian/Ubuntu multiarch, RHEL), relative to the root.
_STANDARD_LIBRARY_DIRS = (
    "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib",
    "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib/sbsa-linux-gnu",
    "usr/lib64", "usr/lib", "usr/local/lib",
)
# Where CUDA and NGC images put libnccl outside the loader's own directories.
_NCCL_DIRS = ("usr/local/cuda/lib64", "usr/local/nccl/lib", "opt/nccl/lib")
_MAX_LD_DIRS = 32


@dataclass(frozen=True, slots=True)
class NcclVersion:
    """One piece of evidence of the NCCL version.

    Attributes:
        version: ``(major, minor, patch)``, e.g. ``(2, 21, 5)``.
        source: Where it was found, e.g. ``"nvidia-nccl-cu12 (pip)"``,
            ``"NCCL_VERSION"`` or ``"/usr/lib/x86_64-linux-gnu/libnccl.so.2.19.3"``.
    """

    version: tuple[int, int, int]
    source: str

    def __str__(self) -> str:
        return ".".join(map(str, self.version))


def parse_nccl_version(text: str | None) -> tuple[int, int, int] | None:
    """``"2.21.5"`` (or ``"2.21.5-1+cuda12.4"``, ``"2.21"``) -> ``(2, 21, 5)``; None otherwise."""
    if text is None:
        return None
    match = _VERSION.fullmatch(text)
    if match is None:
        return None
    major, minor, patch = match.group(1), match.group(2), match.group(3)
    if int(major) != 2:  # NCCL 1 is long gone; anything else is not an NCCL version
        return None
    return int(major), int(minor), int(patch or 0)


def site_packages_dirs() -> list[str]:
    """This interpreter's own package directories (site-packages, and the user's when Python
    uses it), in its search order; never the current directory or a script's directory,
    which ``sys.path`` starts with under ``python -m`` and ``python script.py``.

    Only directories that are on ``sys.path`` count: an interpreter started with ``-S`` uses
    none, and neither does a job it starts.
    """
    import site  # noqa: PLC0415  # only the live host pays for it
    import sys  # noqa: PLC0415

    candidates = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        candidates.append(site.getusersitepackages())
    active = {os.path.realpath(entry) for entry in sys.path if entry}
    found: list[str] = []
    for directory in candidates:
        if os.path.isabs(directory) and os.path.realpath(directory) in active \
                and directory not in found:
            found.append(directory)
    return found


def _pip_versions() -> list[NcclVersion]:
    from importlib import metadata  # noqa: PLC0415  # only the live host pays for the scan

    found = []
    path = site_packages_dirs()
    for name in _DISTRIBUTIONS:
        try:
            # Looked up in site-packages only: a dist-info in the current directory is not
            # what the job's torch loads.
            distribution = next(iter(metadata.distributions(name=name, path=path)), None)
            text = distribution.version if distribution is not None else None
        except Exception:  # noqa: S112  # a broken dist-info: no evidence
            continue
        if text is None:
            continue
        parsed = parse_nccl_version(text)
        if parsed is not None:
            found.append(NcclVersion(parsed, f"{name} {text} (pip)"))
    return found


def _recorded_pip_versions(root: Root) -> list[NcclVersion]:
    """The pip-installed NCCL a snapshot's capture found (``host.json``'s ``nccl_versions``):
    the NCCL that pip-installed PyTorch loads leaves no version in a file name, so a replay
    knows it only from the record. Entries that are not such a record are ignored."""
    try:
        recorded = root.host.get("nccl_versions")
    except DiscoveryError:  # reported where the snapshot's other facts are read
        return []
    found = []
    for item in recorded if isinstance(recorded, list) else ():
        if not isinstance(item, dict):
            continue
        source, text = item.get("source"), item.get("version")
        if not (isinstance(source, str) and isinstance(text, str) and len(source) <= 200):
            continue
        name = source.split(" ", 1)[0]
        parsed = parse_nccl_version(text)
        if name in _DISTRIBUTIONS and source.endswith(" (pip)") and parsed is not None:
            found.append(NcclVersion(parsed, source))
    return found


def loader_dirs(
    root: Root, environ: Mapping[str, str], *, extra: tuple[str, ...] = ()
) -> list[str]:
    """Where the dynamic loader looks for a library, relative to ``root``: its default
    directories (then ``extra``), those of ``etc/ld.so.conf.d/*.conf`` and the first 32 of
    ``LD_LIBRARY_PATH`` (absolute entries only, see :func:`absolute_entries`; a ``..``
    component is skipped: nothing is read outside the root), each
    directory once: on a merged-``/usr`` system ``lib`` is a link to ``usr/lib``, and the
    second name of a directory already listed is left out, so that one file is one piece of
    evidence.

    Example: ``["lib/x86_64-linux-gnu", ..., "usr/local/lib", "opt/rdma/lib"]``.
    """
    configured = [
        line
        for conf in root.listdir("etc/ld.so.conf.d") if conf.endswith(".conf")
        for line in root.read_lines(f"etc/ld.so.conf.d/{conf}") if line.strip().startswith("/")
    ]
    variable = absolute_entries(environ.get("LD_LIBRARY_PATH"), separators=":;")
    dirs: list[str] = []
    seen: set[object] = set()
    for raw in (*_STANDARD_LIBRARY_DIRS, *extra, *configured, *variable):
        entry = raw.strip().strip("/")
        if not entry or entry in dirs or ".." in entry.split("/"):
            continue
        identity = _directory_identity(root, entry)
        if identity in seen:
            continue
        seen.add(identity)
        dirs.append(entry)
    return dirs


def _directory_identity(root: Root, relative: str) -> object:
    """The directory's device and inode (links followed, inside a snapshot), or its name
    where it cannot be stat'ed (missing: two missing names are two directories)."""
    located = root.locate(relative)
    if located is not None:
        try:
            info = os.stat(located)
        except (OSError, ValueError):
            pass
        else:
            return (info.st_dev, info.st_ino)
    return relative


def _library_versions(root: Root, environ: Mapping[str, str]) -> list[NcclVersion]:
    found = []
    for directory in loader_dirs(root, environ, extra=_NCCL_DIRS):
        for name in root.listdir(directory):
            match = _LIBRARY.fullmatch(name)
            if match is not None and int(match.group(1)) == 2:
                version = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
                found.append(NcclVersion(version, f"/{directory}/{name}"))
    return found


def detect_nccl_versions(
    environ: Mapping[str, str], root: Root, *, override: str | None = None
) -> tuple[NcclVersion, ...]:
    """Every piece of evidence of the NCCL version, most likely first.

    Args:
        environ: Read for ``NCCL_VERSION`` and ``LD_LIBRARY_PATH``.
        root: ``/`` (which also asks :mod:`importlib.metadata`) or a snapshot.
        override: A version given by the caller, e.g. ``"2.19.3"``; when it parses, it is the
            only evidence.

    Returns:
        e.g. ``(NcclVersion((2, 21, 5), "nvidia-nccl-cu12 2.21.5 (pip)"),)``; empty when
        nothing was found.
    """
    if override is not None:
        parsed = parse_nccl_version(override)
        return (NcclVersion(parsed, "given by the caller"),) if parsed else ()
    found: list[NcclVersion] = []
    found.extend(_pip_versions() if root.is_live else _recorded_pip_versions(root))
    env_version = parse_nccl_version(environ.get("NCCL_VERSION"))
    if env_version is not None:
        found.append(NcclVersion(env_version, "NCCL_VERSION"))
    found.extend(_library_versions(root, environ))
    return tuple(found)


def known_before(versions: Iterable[NcclVersion], threshold: tuple[int, int]) -> bool | None:
    """Whether NCCL is known to be older than ``threshold``, e.g. ``(2, 21)``.

    True when every piece of evidence is older, False when every piece is at least that new,
    None when there is no evidence or it disagrees.
    """
    sides = {v.version[:2] < threshold for v in versions}
    return sides.pop() if len(sides) == 1 else None


def versions_text(versions: Iterable[NcclVersion]) -> str:
    """The evidence for messages, e.g. ``"2.19.3 (NCCL_VERSION)"``; ``"unknown"`` without any."""
    shown = ", ".join(f"{v} ({v.source})" for v in versions)
    return shown or "unknown"
