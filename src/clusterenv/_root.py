"""Reading files under a filesystem root, and the host snapshot format.

Every detector reads the host through a :class:`Root`: the live machine is ``Root("/")``, a host
snapshot is ``Root("/path/to/snapshot")``. Missing or unreadable files are an empty result, never
an exception: sysfs is full of files that exist but fail to read (``EINVAL`` on empty GID slots,
``speed`` of a link that is down). Only a root that cannot be read at all is a
:class:`~clusterenv.errors.DiscoveryError`.

A snapshot root has chroot semantics: nothing is ever read outside it. Every path, and the
target of every symbolic link met on the way (absolute or relative), is resolved inside the root
component by component; a link that would climb above the root, or links that loop, make the
path read as missing. Only regular files are read, at most a bounded number of bytes each; a
FIFO, socket or device in a snapshot is skipped and noted (:attr:`Root.notes`), never opened
in a way that could block. ``host.json`` has its own size cap. The live host (``/``) is read as
it is, with the same regular-file rule.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterenv._text import escape_tree
from clusterenv.errors import DiscoveryError

__all__ = [
    "HOST_JSON",
    "MAX_HOST_JSON_BYTES",
    "SIZE_LIMITS",
    "SNAPSHOT_FORMAT",
    "Root",
    "absolute_entries",
    "as_root",
    "format_size_limit",
    "natural_key",
    "which",
]

#: Where a snapshot keeps what is not a file (addresses, limits, environment), relative to its root.
HOST_JSON = ".clusterenv/host.json"
#: The snapshot format version this release writes and reads.
SNAPSHOT_FORMAT = 1
#: Largest ``host.json`` read (a real one is a few KiB); a bigger one is refused.
MAX_HOST_JSON_BYTES = 4 * 1024 * 1024

# A sysfs attribute is one short line; anything bigger is garbage we refuse to hold in memory.
_MAX_ATTRIBUTE_BYTES = 64 * 1024
#: Files that are legitimately bigger than a sysfs attribute, and how much of each is read. A
#: hosts file lists every node of a cluster: 10,000 nodes with IPv4 and IPv6 lines and a few
#: aliases each take about 2 MiB.
SIZE_LIMITS: dict[str, int] = {"etc/hosts": 8 * 1024 * 1024}
# Symbolic links followed while resolving one path, as the kernel's MAXSYMLINKS.
_MAX_LINKS = 40
_MAX_NOTES = 64
_DIGIT_RUNS = re.compile(r"\d+|\D+")
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders entry names as people read them: ``ens2`` before ``ens10``,
    ``mlx5_2`` before ``mlx5_10``."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGIT_RUNS.findall(name))


def absolute_entries(value: str | None, *, limit: int = 32, separators: str = ":") -> list[str]:
    """The absolute directories of a path variable, at most ``limit`` entries read.

    An unset or empty variable gives none, and so do empty and relative entries: the dynamic
    loader and the shell would read them against the current directory, which is whatever
    directory the user happens to be in (a clone, ``/tmp``), and nothing is ever loaded,
    started or read from there. ``separators``: ``":"`` for ``PATH``, ``":;"`` for
    ``LD_LIBRARY_PATH`` (the loader splits it at both).

    Example: ``absolute_entries("/opt/nccl/lib::lib: /x;/usr/lib", separators=":;")`` ->
    ``["/opt/nccl/lib", "/usr/lib"]``.
    """
    if not value:
        return []
    entries = re.split(f"[{re.escape(separators)}]", value)[:limit]
    return [entry for entry in entries if entry.startswith("/")]


def which(name: str, path: str | None) -> str | None:
    """The first executable ``name`` in the absolute directories of ``path`` (a ``PATH``
    value; None or empty finds nothing), e.g. ``"/opt/venv/bin/torchrun"``.

    Unlike :func:`shutil.which`, an empty or relative entry is not the current directory: a
    ``torchrun`` dropped where the user stands is never the one started.
    """
    for directory in absolute_entries(path, limit=256):
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def format_size_limit(size: int) -> str:
    """``65536`` -> ``"64 KiB"``, ``8388608`` -> ``"8 MiB"``."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} bytes"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


class Root:
    """A filesystem root that detection reads from: ``/`` for the live host, or a snapshot.

    Args:
        path: The directory that stands for ``/``.

    Attributes:
        path: The directory given, e.g. ``PosixPath('node0-snapshot')``.
        notes: What was skipped while reading, one line each, e.g.
            ``"skipped sys/class/net/eth0/mtu: a FIFO, not a regular file"`` (at most 64).
        oversized: Files left unread because they are larger than their limit
            (:data:`SIZE_LIMITS`), with that limit, e.g. ``{"etc/hosts": 8388608}``.

    Raises:
        DiscoveryError: When ``path`` is not a readable directory, or its ``host.json`` is garbled.
    """

    __slots__ = ("_dirs", "_host", "_real", "notes", "oversized", "path")

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
        # The root directory itself is the user's choice and trusted; what is under it is not.
        self._real = os.path.realpath(self.path)
        self._host: dict[str, Any] | None = None
        # Resolved directories: the path as asked (e.g. "sys/class/net/eth0") -> the real path
        # under the root ("sys/devices/.../net/eth0"), or None when it leaves the root.
        self._dirs: dict[str, str | None] = {"": ""}
        self.notes: list[str] = []
        self.oversized: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"Root({str(self.path)!r})"

    def __fspath__(self) -> str:
        """The root as a path, so a root can go wherever a ``root=`` path is accepted."""
        return str(self.path)

    @property
    def is_live(self) -> bool:
        """True when this root is the running host (``/``), not a snapshot."""
        return self._real == "/"

    # -- resolving inside the root ------------------------------------------------------------

    def _note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < _MAX_NOTES:
            self.notes.append(text)

    def _host_path(self, real: str) -> str:
        return f"{self._real.rstrip('/')}/{real}" if real else self._real

    def _walk(self, asked: str, done: list[str], todo: list[str], follow_last: bool) -> str | None:
        """Resolve the components ``todo`` (reversed: the next one last) below the real
        components ``done``, following links inside the root; the real relative path or None."""
        links = 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not done:
                    self._note(f"skipped {asked}: a path or link leaves the snapshot")
                    return None
                done.pop()
                continue
            full = self._host_path("/".join((*done, part)))
            try:
                mode = os.lstat(full).st_mode
            except (OSError, ValueError):
                if todo:
                    return None
                done.append(part)  # a missing last component: the caller finds it missing
                break
            if stat.S_ISLNK(mode) and (todo or follow_last):
                links += 1
                if links > _MAX_LINKS:
                    self._note(f"skipped {asked}: too many levels of symbolic links")
                    return None
                try:
                    target = os.readlink(full)
                except (OSError, ValueError):
                    return None
                if target.startswith("/"):
                    done = []  # an absolute target starts again at the root, as in a chroot
                todo.extend(reversed(target.split("/")))
                continue
            if todo and not stat.S_ISDIR(mode):
                return None
            done.append(part)
        return "/".join(done)

    def _directory(self, relative: str) -> str | None:
        """The real path of directory ``relative`` (cached: detection reads many files per
        directory), or None when it leaves the root."""
        if relative in self._dirs:
            return self._dirs[relative]
        head, _, name = relative.rpartition("/")
        parent = self._directory(head)
        real = None
        if parent is not None:
            real = self._walk(relative, parent.split("/") if parent else [], [name], True)
        if len(self._dirs) < 65536:
            self._dirs[relative] = real
        return real

    def locate(self, relative: str, *, follow: bool = True) -> str | None:
        """The host path that stands for ``relative`` (spelled from ``/``) under the root.

        On a snapshot every link on the way is resolved inside the root (the last component
        too unless ``follow`` is false); None when the path would leave the root, links loop,
        or a directory on the way is missing. On the live host the path itself.
        """
        clean = relative.strip("/")
        if self._real == "/":
            return f"/{clean}"
        head, _, name = clean.rpartition("/")
        parent = self._directory(head)
        if parent is None:
            return None
        if name in ("", ".", ".."):
            real = self._walk(clean, parent.split("/") if parent else [], [name], follow)
        else:
            real = f"{parent}/{name}" if parent else name
            if follow and os.path.islink(self._host_path(real)):
                real = self._walk(clean, parent.split("/") if parent else [], [name], True)
        return None if real is None else self._host_path(real)

    def join(self, relative: str) -> Path:
        """Like :meth:`locate`, as a ``Path``; a path that leaves the root gives a path that
        does not exist (so callers that only test or open it find nothing)."""
        located = self.locate(relative)
        if located is None:
            return Path(self._real, ".clusterenv", "outside-the-root", "missing")
        return Path(located)

    # -- reading --------------------------------------------------------------------------------

    def _open_regular(self, relative: str) -> int | None:
        """A read-only descriptor of the regular file ``relative``, or None (noting why when
        it is something that must not be read: a FIFO, socket or device)."""
        clean = relative.strip("/")
        if self._real == "/":
            path: str = f"/{clean}"
            flags = _OPEN_FLAGS
        else:
            head, _, name = clean.rpartition("/")
            parent = self._directory(head)
            if parent is None or name in ("", ".", ".."):
                return None
            path = self._host_path(f"{parent}/{name}" if parent else name)
            flags = _OPEN_FLAGS | os.O_NOFOLLOW
        try:
            fd = os.open(path, flags)
        except OSError as e:
            if e.errno != errno.ELOOP or self._real == "/":  # the last component is a link
                return None
            located = self.locate(clean)
            if located is None:
                return None
            try:
                fd = os.open(located, flags)
            except OSError:
                return None
        except ValueError:  # a NUL in the path
            return None
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            os.close(fd)
            return None
        if not stat.S_ISREG(mode):
            os.close(fd)
            if not stat.S_ISDIR(mode):
                self._note(f"skipped {clean}: {_kind(mode)}, not a regular file")
            return None
        return fd

    def read_bytes(
        self, relative: str, *, max_bytes: int | None = None, truncate: bool = False
    ) -> bytes | None:
        """The bytes of a regular file, or None when it is missing, unreadable, not a regular
        file, or larger than ``max_bytes`` (with ``truncate``, its first ``max_bytes``).

        ``max_bytes`` defaults to the file's limit in :data:`SIZE_LIMITS`, else 64 KiB. A file
        left unread for its size is noted (:attr:`notes`, :attr:`oversized`): a check that
        needs it says so instead of judging without it.
        """
        if max_bytes is None:
            max_bytes = SIZE_LIMITS.get(relative.strip("/"), _MAX_ATTRIBUTE_BYTES)
        fd = self._open_regular(relative)
        if fd is None:
            return None
        try:
            chunks = []
            left = max_bytes + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        except OSError:
            return None
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            if not truncate:
                clean = relative.strip("/")
                if clean not in self.oversized and len(self.oversized) < _MAX_NOTES:
                    self.oversized[clean] = max_bytes
                self._note(f"skipped {clean}: larger than {format_size_limit(max_bytes)}, the "
                           "most clusterenv reads of it")
                return None
            data = data[:max_bytes]
        return data

    def read(self, relative: str, *, max_bytes: int | None = None) -> str | None:
        """The stripped text of a file, or None when it is missing, unreadable or not text.

        Reading never raises: sysfs answers ``EINVAL`` for empty GID slots and ``speed`` of a
        link that is down, and a snapshot may hold a directory where a file is expected.
        """
        text = self.read_raw(relative, max_bytes=max_bytes)
        return None if text is None else text.strip()

    def read_raw(self, relative: str, *, max_bytes: int | None = None) -> str | None:
        """The whole text of a file, unstripped, or None when it is missing, unreadable or
        larger than ``max_bytes`` (a config file keeps its trailing blanks)."""
        data = self.read_bytes(relative, max_bytes=max_bytes)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_lines(self, relative: str) -> list[str]:
        """The lines of a text file (for ``/proc`` files and configs), or ``[]`` when unreadable."""
        text = self.read(relative)
        return text.splitlines() if text else []

    def listdir(self, relative: str) -> list[str]:
        """Sorted entry names of a directory, or ``[]`` when it is missing or unreadable."""
        path = self.locate(relative)
        if path is None:
            return []
        try:
            return sorted(os.listdir(path))
        except (OSError, ValueError):
            return []

    def exists(self, relative: str) -> bool:
        """Whether ``relative`` exists under the root (a dangling sysfs link counts as existing)."""
        path = self.locate(relative, follow=False)
        return path is not None and os.path.lexists(path)

    def is_dir(self, relative: str) -> bool:
        """Whether ``relative`` is a directory (or a link to one) under the root."""
        path = self.locate(relative)
        return path is not None and os.path.isdir(path)

    def is_file(self, relative: str) -> bool:
        """Whether ``relative`` is a regular file (or a link to one) under the root."""
        path = self.locate(relative)
        return path is not None and os.path.isfile(path)

    def link_name(self, relative: str) -> str | None:
        """The last component of a symbolic link's target, e.g. ``bond0`` for a ``master``
        link to ``../bond0``; None when ``relative`` is no link or names no entry."""
        path = self.locate(relative, follow=False)
        if path is None:
            return None
        try:
            target = os.readlink(path)
        except (OSError, ValueError):
            return None
        name = os.path.basename(target.rstrip("/"))
        return name if name not in ("", ".", "..") else None

    def device_opens(self, relative: str) -> bool:
        """Whether a device node opens read-write, as libibverbs opens ``/dev/infiniband``'s.

        On the live host the node is opened (a device cgroup that hides it refuses it here);
        a snapshot records device nodes as empty files, so there any non-directory counts
        (and nothing in it is ever opened).
        """
        if not self.is_live:
            path = self.locate(relative, follow=False)
            return path is not None and os.path.lexists(path) and not self.is_dir(relative)
        try:
            fd = os.open(f"/{relative.strip('/')}", os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
        except (OSError, ValueError):
            return False
        os.close(fd)
        return True

    @property
    def host(self) -> Mapping[str, Any]:
        """The snapshot's ``.clusterenv/host.json`` as a mapping; empty on the live host.

        Raises:
            DiscoveryError: When the file exists but is not a JSON object of a known format,
                is not a regular file, or is larger than :data:`MAX_HOST_JSON_BYTES`.
        """
        if self._host is None:
            self._host = self._load_host_json()
        return self._host

    def recorded_environ(self) -> dict[str, str] | None:
        """The environment recorded in the snapshot, or None when it recorded none."""
        environ = self.host.get("environ")
        if environ is None:
            return None
        return {str(k): str(v) for k, v in environ.items()}

    def _load_host_json(self) -> dict[str, Any]:
        shown = str(self.path / HOST_JSON)
        located = self.locate(HOST_JSON)
        if located is None or not os.path.lexists(located):
            return {}
        try:
            mode = os.stat(located).st_mode
        except OSError as e:
            raise DiscoveryError(
                f"cannot read {shown!r}: {e.strerror or e}; fix its permissions or recapture "
                "the snapshot with `clusterenv capture DIR`", path=shown) from e
        if not stat.S_ISREG(mode):
            raise DiscoveryError(
                f"{shown!r} is {_kind(mode)}, not a regular file; recapture the snapshot with "
                "`clusterenv capture DIR`", path=shown)
        data = self.read_bytes(HOST_JSON, max_bytes=MAX_HOST_JSON_BYTES)
        if data is None:
            raise DiscoveryError(
                f"{shown!r} is unreadable or larger than {MAX_HOST_JSON_BYTES // (1024 * 1024)} "
                "MiB (a real one is a few KiB); recapture the snapshot with `clusterenv capture "
                "DIR`", path=shown)
        return _parse_host_json(data, shown)


def _parse_host_json(raw: bytes, shown: str) -> dict[str, Any]:
    try:
        data = escape_tree(json.loads(raw.decode("utf-8")))
    except (ValueError, RecursionError) as e:
        raise DiscoveryError(
            f"{shown!r} is not valid JSON ({e}); recapture the snapshot with "
            "`clusterenv capture DIR`",
            path=shown,
        ) from e
    if not isinstance(data, dict):
        raise DiscoveryError(
            f"{shown!r} must hold a JSON object, got {type(data).__name__}; recapture the "
            "snapshot with `clusterenv capture DIR`",
            path=shown,
        )
    fmt = data.get("format", SNAPSHOT_FORMAT)
    if fmt != SNAPSHOT_FORMAT:
        raise DiscoveryError(
            f"{shown!r} has snapshot format {fmt!r}; this clusterenv reads format "
            f"{SNAPSHOT_FORMAT}: upgrade clusterenv or recapture the snapshot",
            path=shown,
        )
    environ = data.get("environ")
    if environ is not None and not (
        isinstance(environ, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in environ.items())
    ):
        raise DiscoveryError(
            f"{shown!r}: 'environ' must map variable names to strings; recapture the "
            "snapshot with `clusterenv capture DIR`",
            path=shown,
        )
    return data


def as_root(root: str | os.PathLike[str]) -> Root:
    """The :class:`Root` for a public ``root=`` argument: a path (``str`` or any
    ``os.PathLike``); a :class:`Root`, itself path-like, is used as it is."""
    return root if isinstance(root, Root) else Root(root)
