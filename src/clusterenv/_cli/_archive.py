"""A host snapshot as one file: ``clusterenv capture node3.tar.gz`` writes it, and
``--root node3.tar.gz`` reads it as it reads the directory.

An archive comes from someone else's machine, so it is read as hostile: it is unpacked by hand
(never ``extractall``) into a private temporary directory that is removed when the command
ends, and only directories, regular files and symbolic links are created there. A member with
an absolute name, a ``..`` component or a path through a link is skipped with a note; so are
devices, FIFOs and hard links to anything but a file unpacked before. Links are kept as they
are: the snapshot is then read through :class:`~clusterenv._root.Root`, whose chroot semantics
make a link that climbs out read as missing, exactly as in a directory. A regular file keeps at
most one byte more than the largest file clusterenv reads, so an oversized file still reads as
oversized. An archive with more members, more bytes to unpack, or a longer uncompressed stream
(a decompression bomb) than any snapshot needs is refused as a whole, naming the file.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from clusterenv._root import HOST_JSON, MAX_HOST_JSON_BYTES, SIZE_LIMITS, Root, format_size_limit
from clusterenv.errors import DiscoveryError

__all__ = [
    "ARCHIVE_SUFFIXES",
    "MAX_ARCHIVE_STREAM_BYTES",
    "MAX_MEMBERS",
    "MAX_UNPACKED_BYTES",
    "archive_top_name",
    "is_archive_name",
    "is_snapshot_archive",
    "open_archive",
    "write_archive",
]

#: Names ``clusterenv capture`` writes as one gzip-compressed tar file instead of a directory.
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
#: Members read at most. A real snapshot has about a hundred; a host with 16 RDMA devices and
#: full 256-entry GID tables has about 13,000.
MAX_MEMBERS = 50_000
#: Bytes unpacked at most, all files together (a real snapshot: well under 1 MiB, plus an
#: ``/etc/hosts`` of up to 8 MiB).
MAX_UNPACKED_BYTES = 64 << 20
#: Bytes of the uncompressed tar stream read at most, headers and skipped data included: what
#: bounds the work a small compressed file can ask for.
MAX_ARCHIVE_STREAM_BYTES = 128 << 20
# A file keeps one byte more than the most clusterenv reads of any file, so Root still finds it
# too large (and says so) instead of reading a truncated copy as the whole.
_MAX_MEMBER_BYTES = max(*SIZE_LIMITS.values(), MAX_HOST_JSON_BYTES, 64 << 10) + 1
_MAX_LINK_TARGET = 4096
_MAX_NOTES = 20
# Top-level names of a snapshot: an archive whose only entry is one of these holds the
# snapshot at its top, not inside a directory.
_SNAPSHOT_TOP = frozenset({".clusterenv", "sys", "proc", "dev", "etc", "usr", "opt", "lib",
                           "lib64", "home", "root", "run", "var", "tmp"})


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def is_archive_name(path: str | os.PathLike[str]) -> bool:
    """Whether ``capture`` writes ``path`` as an archive: ``node3.tar.gz``, ``node3.tgz``."""
    return str(path).endswith(ARCHIVE_SUFFIXES)


class _Refused(Exception):
    """The archive as a whole is refused; the message says why."""


class _Bounded:
    """A read-only stream that refuses to yield more than ``limit`` bytes in all."""

    def __init__(self, stream: _Reader, limit: int) -> None:
        self._stream = stream
        self._left = limit

    def read(self, size: int = -1) -> bytes:
        # Never ask the decompressor for more than the budget: a header that claims gigabytes
        # must not become a gigabyte in memory.
        wanted = self._left + 1 if size < 0 or size > self._left + 1 else size
        data = self._stream.read(wanted)
        self._left -= len(data)
        if self._left < 0:
            raise _Refused(
                f"it unpacks to more than {format_size_limit(MAX_ARCHIVE_STREAM_BYTES)} (a "
                "real snapshot is a few MiB)")
        return data


class _Unpacker:
    """Unpacks one archive's members into ``top``, noting what it leaves out."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.notes: list[str] = []
        self.skipped = 0
        self.written = 0
        self.files: set[str] = set()

    def note(self, name: str, why: str) -> None:
        self.skipped += 1
        if len(self.notes) < _MAX_NOTES:
            shown = name if len(name) <= 200 else name[:200] + "..."  # names may be megabytes
            self.notes.append(f"skipped {shown!r} in the archive: {why}")

    def parent(self, parts: list[str], name: str) -> Path | None:
        """The directory for ``parts[-1]``, created as needed; None (noted) when the path goes
        through something that is not a directory, such as a link unpacked before."""
        here = self.top
        for part in parts[:-1]:
            here = here / part
            try:
                mode = os.lstat(here).st_mode
            except FileNotFoundError:
                os.mkdir(here, 0o755)
                continue
            if not stat.S_ISDIR(mode):
                self.note(name, "its path goes through a link or a file")
                return None
        return here

    def place(self, parts: list[str], name: str, directory: bool) -> Path | None:
        """Where the member goes, with anything it replaces removed (the last member of a
        name wins, as with tar); None when it cannot go there."""
        parent = self.parent(parts, name)
        if parent is None:
            return None
        target = parent / parts[-1]
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            return target
        if stat.S_ISDIR(mode):
            if not directory:
                self.note(name, "a directory of that name came first")
            return None if not directory else target
        os.unlink(target)
        self.files.discard("/".join(parts))
        return target

    def write(self, target: Path, source: _Reader | None) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
        with os.fdopen(fd, "wb") as out:
            left = _MAX_MEMBER_BYTES
            while source is not None and left > 0:
                chunk = source.read(min(left, 1 << 20))
                if not chunk:
                    break
                self.written += len(chunk)
                if self.written > MAX_UNPACKED_BYTES:
                    raise _Refused(
                        f"its files hold more than {format_size_limit(MAX_UNPACKED_BYTES)} (a "
                        "real snapshot holds well under 10 MiB)")
                out.write(chunk)
                left -= len(chunk)

    def member(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        name = member.name
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if name.startswith("/"):
            self.note(name, "an absolute name")
            return
        if ".." in parts:
            self.note(name, "a '..' in its name leaves the snapshot")
            return
        if not parts:
            return
        kind = ("directory" if member.isdir() else "file" if member.isreg() else
                "link" if member.issym() else "hard link" if member.islnk() else None)
        if kind is None:
            what = ("a device" if member.ischr() or member.isblk() else
                    "a FIFO" if member.isfifo() else "not a file, directory or link")
            self.note(name, f"{what}; a snapshot holds devices as empty files")
            return
        if kind == "link" and (len(member.linkname) > _MAX_LINK_TARGET
                               or "\0" in member.linkname):
            self.note(name, "a link with an unusable target")
            return
        source: Path | None = None
        if kind == "hard link":
            linked = "/".join(p for p in member.linkname.split("/") if p not in ("", "."))
            if linked not in self.files:
                self.note(name, "a hard link to nothing unpacked before it")
                return
            source = self.top / linked
        target = self.place(parts, name, kind == "directory")
        if target is None:
            return
        if kind == "directory":
            if not target.is_dir():
                os.mkdir(target, 0o755)
        elif kind == "link":
            os.symlink(member.linkname, target)
        elif source is not None:
            with open(source, "rb") as copied:  # a file unpacked here
                self.write(target, copied)
            self.files.add("/".join(parts))
        else:
            self.write(target, tar.extractfile(member))
            self.files.add("/".join(parts))


def _decompressed(raw: IO[bytes], shown: str) -> _Reader:
    """The tar stream of ``raw``: gzip, bzip2 and xz are told by their magic numbers, as tar
    does, whatever the file is named."""
    head = raw.read(512)
    raw.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if head.startswith(b"BZh"):
        return bz2.BZ2File(raw, mode="rb")
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw, mode="rb")
    if head[257:262] == b"ustar":
        return raw
    raise DiscoveryError(
        f"{shown!r} is neither a directory nor a snapshot archive: pass the directory or the "
        ".tar.gz file `clusterenv capture` wrote", path=shown)


def _snapshot_top(unpacked: Path) -> Path:
    """The snapshot inside what was unpacked: its top, or the one directory it holds
    (``tar czf node3.tar.gz node3/`` and what ``capture`` writes)."""
    entries = os.listdir(unpacked)
    if len(entries) == 1 and entries[0] not in _SNAPSHOT_TOP:
        only = unpacked / entries[0]
        if stat.S_ISDIR(os.lstat(only).st_mode):
            return only
    return unpacked


_PREFIX = "clusterenv-snapshot-"


def _remove_abandoned() -> None:
    """Remove what commands killed before their end (SIGKILL, a lost terminal) left unpacked:
    the ``clusterenv-snapshot-PID-*`` directories of processes that no longer run."""
    base = tempfile.gettempdir()
    pattern = re.compile(rf"{_PREFIX}(\d+)-\w+")
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        path = os.path.join(base, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue  # only our own directories, never another user's
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, OverflowError):  # EPERM: it runs, as another user
            continue


def open_archive(path: str | os.PathLike[str]) -> tuple[Root, Callable[[], None]]:
    """Unpack the snapshot archive ``path`` and return a :class:`Root` on it, with the
    function that removes what was unpacked (call it when the command ends).

    What was left out is in the root's ``notes``.

    Raises:
        DiscoveryError: When ``path`` is not a readable archive, or is refused as a whole (too
            many members, too many bytes, a decompression bomb); the message names the file.
    """
    shown = os.fspath(path)
    _remove_abandoned()
    unpacked = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))

    def remove() -> None:
        shutil.rmtree(unpacked, ignore_errors=True)

    unpacker = _Unpacker(unpacked)
    try:
        try:
            fd = os.open(shown, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as e:
            raise DiscoveryError(f"cannot read {shown!r}: {e.strerror or e}", path=shown) from e
        with os.fdopen(fd, "rb") as raw:
            if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
                raise DiscoveryError(
                    f"{shown!r} is neither a directory nor a regular file: pass the snapshot "
                    "directory or the .tar.gz file `clusterenv capture` wrote", path=shown)
            stream = _Bounded(_decompressed(raw, shown), MAX_ARCHIVE_STREAM_BYTES)
            count = 0
            with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    count += 1
                    if count > MAX_MEMBERS:
                        raise _Refused(f"it has more than {MAX_MEMBERS:,} members (a real "
                                       "snapshot has a few hundred, at most some thousands)")
                    try:
                        unpacker.member(tar, member)
                    except OSError as e:
                        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                            raise
                        unpacker.note(member.name, e.strerror or str(e))
        if count == 0:
            raise _Refused("it is empty")
        root = Root(_snapshot_top(unpacked))
        _load_host_json(root, unpacked, shown)
    except _Refused as e:
        remove()
        raise DiscoveryError(f"refusing to read the snapshot archive {shown!r}: {e}",
                             path=shown) from None
    except DiscoveryError:
        remove()
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, ValueError) as e:
        remove()
        detail = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise DiscoveryError(
            f"cannot read the snapshot archive {shown!r}: {detail}; capture it again with "
            "`clusterenv capture NAME.tar.gz`", path=shown) from None
    except BaseException:
        remove()
        raise
    extra = unpacker.skipped - len(unpacker.notes)
    root.notes.extend(unpacker.notes)
    if extra > 0:
        root.notes.append(f"skipped {extra} more members of the archive")
    return root, remove


def _load_host_json(root: Root, unpacked: Path, shown: str) -> None:
    """Read ``host.json`` now, so that a garbled one names the archive, not the temporary
    directory it was unpacked into."""
    try:
        root.host  # noqa: B018  # loads and validates it
    except DiscoveryError as e:
        message = str(e).replace(str(root.path), shown).replace(str(unpacked), shown)
        raise DiscoveryError(message, path=f"{shown}/{HOST_JSON}") from None


# -- writing ------------------------------------------------------------------------------


def archive_top_name(path: str | os.PathLike[str]) -> str:
    """The directory an archive holds its snapshot in: ``node3`` for ``node3.tar.gz``."""
    name = os.path.basename(os.fspath(path))
    for suffix in ARCHIVE_SUFFIXES:
        name = name.removesuffix(suffix)
    return name if re.fullmatch(r"[^\x00-\x1f/]+", name) and name not in (".", "..") \
        else "snapshot"


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # Nothing about the capturing user or their umask travels with the snapshot.
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.isdir() else 0o644
    return info


def is_snapshot_archive(path: Path) -> bool:
    """Whether ``path`` is an archive that holds a snapshot (a ``host.json``), read with the
    same limits as :func:`open_archive`; anything else is never overwritten."""
    try:
        with open(path, "rb") as raw:
            stream = _Bounded(_decompressed(raw, str(path)), MAX_ARCHIVE_STREAM_BYTES)
            with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
                for count, member in enumerate(tar):
                    parts = [p for p in member.name.split("/") if p not in ("", ".")]
                    if "/".join(parts[-2:]) == HOST_JSON and len(parts) <= 3:
                        return True
                    if count >= MAX_MEMBERS:
                        return False
    except (_Refused, DiscoveryError, tarfile.TarError, EOFError, OSError, zlib.error,
            lzma.LZMAError, ValueError):
        return False
    return False


def write_archive(snapshot: Path, dest: Path) -> None:
    """Write the snapshot directory ``snapshot`` as the gzip-compressed tar file ``dest``,
    under one directory named after it (``node3/`` in ``node3.tar.gz``); written beside
    ``dest`` and renamed into place, so a failure leaves any earlier file as it was.

    Raises:
        OSError: When it cannot be written (the caller names the destination).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w:gz") as tar:
            tar.add(snapshot, arcname=archive_top_name(dest), filter=_normalised)
        os.chmod(temporary, 0o644)  # mkstemp makes it private; a snapshot is meant to be shared
        os.replace(temporary, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
