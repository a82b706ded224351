"""Reading an NCCL log from lines, a path (``.gz`` too) or an open file (public through
:mod:`clusterenv.nccl_log`)."""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterable
from typing import IO, Any

from clusterenv.errors import DiscoveryError
from clusterenv.nccl_log.ansi import PlainStream, plain_lines
from clusterenv.nccl_log.blocks import parse_stream
from clusterenv.nccl_log.model import NcclLog
from clusterenv.nccl_log.parse import parse_lines

__all__ = ["parse_nccl_log", "read_nccl_log"]


def parse_nccl_log(lines: Iterable[str]) -> NcclLog:
    """Parse the lines of an ``NCCL_DEBUG=INFO`` log (any iterable of strings, streamed).

    Lines without an ``NCCL INFO`` / ``NCCL WARN`` marker are skipped, except the failure lines
    of the programs around NCCL (PyTorch's exception block and watchdog, nccl-tests,
    libibverbs, NCCL's older formats), which are kept as errors; terminal escape sequences
    (colours) are removed first; nothing in the input makes this raise.

    Args:
        lines: The log, e.g. an open file or ``text.splitlines()``.

    Returns:
        What NCCL reported, e.g. ``NcclLog(version="2.27.5", transports=("IB",), ...)``.
    """
    return parse_lines(plain_lines(lines))


def read_nccl_log(source: str | os.PathLike[str] | IO[str] | IO[bytes]) -> NcclLog:
    """Read and parse an NCCL log from a path (``.gz`` too) or an open file.

    Undecodable bytes are replaced, never fatal.

    Args:
        source: A path such as ``"train.log"``, or an open text or binary file (``sys.stdin``).

    Returns:
        The parsed :class:`NcclLog`.

    Raises:
        DiscoveryError: When the file cannot be opened or read; ``path`` names it.
    """
    if hasattr(source, "read"):
        stream: Any = source
        if isinstance(stream, (io.RawIOBase, io.BufferedIOBase)) or "b" in getattr(
            stream, "mode", ""
        ):
            stream = io.TextIOWrapper(stream, encoding="utf-8", errors="replace")
        name = str(getattr(source, "name", "<stream>"))
        try:
            return parse_stream(PlainStream(stream))
        except (OSError, EOFError) as e:
            raise _unreadable(name, e) from e
    path = os.fspath(source)
    try:
        if str(path).endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
                return parse_stream(PlainStream(handle))
        with open(path, encoding="utf-8", errors="replace") as handle:
            return parse_stream(PlainStream(handle))
    except (OSError, EOFError) as e:
        raise _unreadable(str(path), e) from e


def _unreadable(path: str, error: BaseException) -> DiscoveryError:
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return DiscoveryError(
        f"cannot read NCCL log {path!r}: {reason}; pass a readable file (or '-' for standard "
        "input) holding the output of a run with NCCL_DEBUG=INFO",
        path=path,
    )
