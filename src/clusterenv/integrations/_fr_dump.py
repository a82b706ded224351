"""Writing the flight recorder's dump when a collective fails (torch imported when installed).

torch's NCCL build dumps the recorder itself when its watchdog sees a timeout
(``TORCH_NCCL_DUMP_ON_TIMEOUT``); Gloo never does, and an NCCL build without that switch does
not either. So :func:`install` hooks the two places a failed collective shows up in Python:

- every ``torch.distributed`` collective logs its exception to torch's c10d logger
  (``torch.distributed.c10d_logger._exception_logger``) before re-raising it: a handler there
  runs in the failing thread, at the moment of failure, before torchrun can kill the process;
- an exception nobody caught (``sys.excepthook``, ``threading.excepthook``), for failures
  raised elsewhere (``work.wait()`` of an asynchronous collective).

The first failure is dumped, once per process, to ``<dump prefix><rank>`` (the path torch's own
dump would take), atomically and without stack traces: with them, torch 2.13 takes seconds and
imports hundreds of modules (sympy among them) in a process that is failing and may be killed
any moment. The one stack that matters, the failing call's, is in the note written beside it,
``<dump>.clusterenv.json``: the rank, host, node rank, world size, the error and the first caller
outside torch (``failed_at``). Nothing here ever raises into the training script.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from clusterenv.hang.dumps import SIDECAR_SUFFIX

__all__ = ["dump_now", "install"]

_lock = threading.Lock()
_state: dict[str, Any] = {"installed": False, "dumped": False}


def _write(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".fr-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


_STDLIB = sysconfig.get_paths()["stdlib"].replace(os.sep, "/") + "/"


def _caller(frames: list[traceback.FrameSummary]) -> str | None:
    """The innermost frame outside torch, clusterenv and the standard library (logging calls
    the handler): the training script's call."""
    for frame in reversed(frames):
        path = frame.filename.replace(os.sep, "/")
        if "/torch/" in path or "/clusterenv/" in path or path.startswith((_STDLIB, "<")):
            continue
        return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return None


def dump_now(error: str, failed_in: str | None = None,
             stack: list[traceback.FrameSummary] | None = None) -> str | None:
    """Write this process's recorder dump and note now (once per process).

    Returns:
        The dump's path, or None when it was written before, the hook is not installed, or
        writing failed.
    """
    with _lock:
        if not _state["installed"] or _state["dumped"]:
            return None
        _state["dumped"] = True
        context: dict[str, Any] = dict(_state["context"])
    try:
        from torch._C._distributed_c10d import (  # type: ignore[attr-defined,unused-ignore]
            _dump_fr_trace,
        )

        path = f"{context.pop('prefix')}{context['rank']}"
        note = {"format": 1, **context, "error": error[:2000], "failed_in": failed_in,
                "failed_at": _caller(stack if stack is not None else traceback.extract_stack()),
                "time": time.time(), "pid": os.getpid()}
        _write(path, _dump_fr_trace(includeStackTraces=False))
        _write(path + SIDECAR_SUFFIX, json.dumps(note).encode())
    except Exception:  # never let the dump mask the job's own error
        return None
    return path


class _FailureHandler(logging.Handler):
    """Receives what torch's ``_exception_logger`` logs when a collective raises."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg
        if isinstance(message, Mapping) and "error" in message:
            dump_now(str(message["error"]), str(message.get("func_name") or "") or None)

    def handleError(self, record: logging.LogRecord) -> None:  # logging's name
        """Stay silent: the job's own error is what matters."""


def _frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(tb)) if tb is not None else []


def _chain_excepthook() -> None:
    previous: Callable[..., Any] = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if isinstance(value, Exception):
            dump_now(f"{kind.__name__}: {value}", stack=_frames(tb))
        previous(kind, value, tb)

    sys.excepthook = hook
    previous_thread = threading.excepthook

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.exc_value, Exception):
            dump_now(f"{args.exc_type.__name__}: {args.exc_value}",
                     stack=_frames(args.exc_traceback))
        previous_thread(args)

    threading.excepthook = thread_hook


def install(*, prefix: str, rank: int, world_size: int, backend: str,
            node_rank: int | None, local_rank: int) -> bool:
    """Dump the recorder to ``<prefix><rank>`` on this process's first collective failure.

    Returns:
        Whether the hook was installed now (False when it already was, or torch has no
        recorder dump function).
    """
    try:
        from torch._C._distributed_c10d import (  # type: ignore[attr-defined,unused-ignore]
            _dump_fr_trace,  # noqa: F401  # it must exist
        )
    except ImportError:
        return False
    with _lock:
        if _state["installed"]:
            return False
        _state["context"] = {"prefix": prefix, "rank": rank, "world_size": world_size,
                             "backend": backend, "node_rank": node_rank,
                             "local_rank": local_rank, "host": socket.gethostname()}
        _state["installed"] = True
    try:
        from torch.distributed import c10d_logger

        logger = getattr(c10d_logger, "_c10d_logger", None)
        if isinstance(logger, logging.Logger):
            logger.addHandler(_FailureHandler(logging.DEBUG))
    except ImportError:
        pass
    _chain_excepthook()
    return True
