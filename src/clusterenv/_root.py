"""Reading files under a filesystem root, and the host snapshot format (DESIGN §6).

Every detector reads the host through a :class:`Root`: the live machine is ``Root("/")``, a host
snapshot is ``Root("/path/to/snapshot")``. Missing or unreadable files are an empty result, never
an exception: sysfs is full of files that exist but fail to read (``EINVAL`` on empty GID slots,
``speed`` of a link that is down). Only a root that cannot be read at all is a
:class:`~clusterenv.errors.DiscoveryError`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterenv.errors import DiscoveryError

__all__ = ["HOST_JSON", "SNAPSHOT_FORMAT", "Root", "as_root", "natural_key"]

#: Where a snapshot keeps what is not a file (addresses, limits, environment), relative to its root.
HOST_JSON = ".clusterenv/host.json"
#: The snapshot format version this release writes and reads.
SNAPSHOT_FORMAT = 1

# A sysfs attribute is one short line; anything bigger is garbage we refuse to hold in memory.
_MAX_ATTRIBUTE_BYTES = 64 * 1024
_DIGIT_RUNS = re.compile(r"\d+|\D+")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders entry names as people read them: ``ens2`` before ``ens10``,
    ``mlx5_2`` before ``mlx5_10``."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGIT_RUNS.findall(name))


class Root:
    """A filesystem root that detection reads from: ``/`` for the live host, or a snapshot.

    Args:
        path: The directory that stands for ``/``.

    Raises:
        DiscoveryError: When ``path`` is not a readable directory, or its ``host.json`` is garbled.
    """

    __slots__ = ("_host", "path")

    def __init__(self, path: str | os.PathLike[str] = "/"):
        self.path = Path(path)
        if not self.path.is_dir():
            raise DiscoveryError(
                f"host root {str(self.path)!r} is not a directory: pass the directory of a host "
                "snapshot (made by `clusterenv capture DIR`) or '/' for this host",
                path=str(self.path),
            )
        if not os.access(self.path, os.R_OK | os.X_OK):
            raise DiscoveryError(
                f"host root {str(self.path)!r} is not readable by this user: "
                "check its permissions or run as a user that can read it",
                path=str(self.path),
            )
        self._host: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"Root({str(self.path)!r})"

    @property
    def is_live(self) -> bool:
        """True when this root is the running host (``/``), not a snapshot."""
        return self.path == Path("/")

    def join(self, relative: str) -> Path:
        """The path of ``relative`` (spelled from ``/``, e.g. ``sys/class/net``) under the root."""
        return self.path / relative.lstrip("/")

    def read(self, relative: str) -> str | None:
        """The stripped text of a file, or None when it is missing, unreadable or not text.

        Reading never raises: sysfs answers ``EINVAL`` for empty GID slots and ``speed`` of a
        link that is down, and a snapshot may hold a directory where a file is expected.
        """
        text = self.read_raw(relative)
        return None if text is None else text.strip()

    def read_raw(self, relative: str, *, max_bytes: int = _MAX_ATTRIBUTE_BYTES) -> str | None:
        """The whole text of a file, unstripped, or None when it is missing, unreadable or
        larger than ``max_bytes`` (a config file keeps its trailing blanks)."""
        try:
            with open(self.join(relative), "rb") as handle:
                data = handle.read(max_bytes + 1)
        except (OSError, ValueError):
            return None
        if len(data) > max_bytes:
            return None
        return data.decode("utf-8", errors="replace")

    def read_lines(self, relative: str) -> list[str]:
        """The lines of a text file (for ``/proc`` files and configs), or ``[]`` when unreadable."""
        text = self.read(relative)
        return text.splitlines() if text else []

    def listdir(self, relative: str) -> list[str]:
        """Sorted entry names of a directory, or ``[]`` when it is missing or unreadable."""
        try:
            return sorted(os.listdir(self.join(relative)))
        except (OSError, ValueError):
            return []

    def exists(self, relative: str) -> bool:
        """Whether ``relative`` exists under the root (a dangling sysfs link counts as existing)."""
        path = self.join(relative)
        return path.exists() or path.is_symlink()

    def is_dir(self, relative: str) -> bool:
        """Whether ``relative`` is a directory (or a link to one) under the root."""
        return self.join(relative).is_dir()

    def link_name(self, relative: str) -> str | None:
        """The last component of a symbolic link's target, e.g. ``bond0`` for a ``master``
        link to ``../bond0``; None when ``relative`` is no link or names no entry."""
        try:
            target = os.readlink(self.join(relative))
        except (OSError, ValueError):
            return None
        name = os.path.basename(target.rstrip("/"))
        return name if name not in ("", ".", "..") else None

    def device_opens(self, relative: str) -> bool:
        """Whether a device node opens read-write, as libibverbs opens ``/dev/infiniband``'s.

        On the live host the node is opened (a device cgroup that hides it refuses it here);
        a snapshot records device nodes as empty files, so there any non-directory counts.
        """
        path = self.join(relative)
        if not self.is_live:
            return os.path.lexists(path) and not os.path.isdir(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
        except (OSError, ValueError):
            return False
        os.close(fd)
        return True

    @property
    def host(self) -> Mapping[str, Any]:
        """The snapshot's ``.clusterenv/host.json`` as a mapping; empty on the live host.

        Raises:
            DiscoveryError: When the file exists but is not a JSON object of a known format.
        """
        if self._host is None:
            self._host = _load_host_json(self.join(HOST_JSON))
        return self._host

    def recorded_environ(self) -> dict[str, str] | None:
        """The environment recorded in the snapshot, or None when it recorded none."""
        environ = self.host.get("environ")
        if environ is None:
            return None
        return {str(k): str(v) for k, v in environ.items()}


def _load_host_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise DiscoveryError(
            f"cannot read {str(path)!r}: {e.strerror or e}; fix its permissions or recapture "
            "the snapshot with `clusterenv capture DIR`",
            path=str(path),
        ) from e
    try:
        data = json.loads(text)
    except ValueError as e:
        raise DiscoveryError(
            f"{str(path)!r} is not valid JSON ({e}); recapture the snapshot with "
            "`clusterenv capture DIR`",
            path=str(path),
        ) from e
    if not isinstance(data, dict):
        raise DiscoveryError(
            f"{str(path)!r} must hold a JSON object, got {type(data).__name__}; recapture the "
            "snapshot with `clusterenv capture DIR`",
            path=str(path),
        )
    fmt = data.get("format", SNAPSHOT_FORMAT)
    if fmt != SNAPSHOT_FORMAT:
        raise DiscoveryError(
            f"{str(path)!r} has snapshot format {fmt!r}; this clusterenv reads format "
            f"{SNAPSHOT_FORMAT}: upgrade clusterenv or recapture the snapshot",
            path=str(path),
        )
    environ = data.get("environ")
    if environ is not None and not (
        isinstance(environ, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in environ.items())
    ):
        raise DiscoveryError(
            f"{str(path)!r}: 'environ' must map variable names to strings; recapture the "
            "snapshot with `clusterenv capture DIR`",
            path=str(path),
        )
    return data


def as_root(root: Root | str | os.PathLike[str]) -> Root:
    """Accept a :class:`Root` or a path, as every public ``root=`` parameter does."""
    return root if isinstance(root, Root) else Root(root)
