"""Which sockets of the preflight primary are ready: ``epoll`` directly where there is one.

The primary spends most of its time per node in system calls and in the bookkeeping around
them; :mod:`selectors` adds a key object, a file-object lookup and an extra system call to
every registration, and a lookup per event. :class:`Poller` is the little the loop needs:
``epoll`` on Linux, :mod:`selectors` elsewhere. Events are :data:`READ` and :data:`WRITE`, as in
:mod:`selectors`.
"""

from __future__ import annotations

import contextlib
import select
import selectors
from typing import Any

__all__ = ["READ", "WRITE", "Poller"]

READ = selectors.EVENT_READ
WRITE = selectors.EVENT_WRITE


class Poller:
    """Registered file descriptors, each with the object :meth:`poll` returns for it.

    Args:
        use_epoll: ``epoll`` when the platform has it (the default), else :mod:`selectors`
            (tests pass ``False`` to run the portable path on Linux).

    Example::

        poller = Poller()
        poller.register(sock.fileno(), READ, conn)
        for conn, events in poller.poll(1.0):
            ...
        poller.forget(sock.fileno()); sock.close()
    """

    def __init__(self, *, use_epoll: bool = True) -> None:
        self._epoll = select.epoll() if use_epoll and hasattr(select, "epoll") else None
        self._selector = selectors.DefaultSelector() if self._epoll is None else None
        self._data: dict[int, Any] = {}

    def register(self, fd: int, events: int, data: Any) -> None:
        """Watch ``fd`` for ``events`` (:data:`READ`, :data:`WRITE` or both)."""
        if self._epoll is not None:
            self._epoll.register(fd, _to_epoll(events))
        else:
            self._selecting().register(fd, events)
        self._data[fd] = data

    def modify(self, fd: int, events: int) -> None:
        """Watch a registered ``fd`` for other ``events``."""
        if self._epoll is not None:
            self._epoll.modify(fd, _to_epoll(events))
        else:
            self._selecting().modify(fd, events)

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd``, which stays open (a listener that rests); unknown: nothing."""
        if self._data.pop(fd, _ABSENT) is _ABSENT:
            return
        if self._epoll is not None:
            self._epoll.unregister(fd)
        else:
            self._selecting().unregister(fd)

    def forget(self, fd: int) -> None:
        """``fd`` is about to be closed: stop watching it, whatever state it is in (unknown, or
        already refused by the kernel: nothing). Not left to the close: ``epoll`` drops a
        descriptor only when no copy of it is open (a child process forked meanwhile holds
        one), and would go on reporting it under a number a new connection may reuse."""
        if self._data.pop(fd, _ABSENT) is _ABSENT:
            return
        with contextlib.suppress(KeyError, ValueError, OSError):
            if self._epoll is not None:
                self._epoll.unregister(fd)
            else:
                self._selecting().unregister(fd)

    def poll(self, timeout: float) -> list[tuple[Any, int]]:
        """``(data, events)`` for each ready descriptor, waiting at most ``timeout`` seconds
        (``0``: not at all). An error or hang-up is reported as both events, as
        :mod:`selectors` does."""
        data = self._data
        if self._epoll is not None:
            return [(data.get(fd), _from_epoll(mask)) for fd, mask in self._epoll.poll(timeout)]
        return [(data.get(key.fd), mask) for key, mask in self._selecting().select(timeout)]

    def close(self) -> None:
        """Release the ``epoll`` descriptor (or the selector); idempotent."""
        if self._epoll is not None:
            self._epoll.close()
        elif self._selector is not None:
            self._selector.close()
        self._data.clear()

    def _selecting(self) -> selectors.BaseSelector:
        if self._selector is None:
            raise RuntimeError("this poller uses epoll")
        return self._selector


_ABSENT = object()
_EPOLLIN = getattr(select, "EPOLLIN", 1)
_EPOLLOUT = getattr(select, "EPOLLOUT", 4)


def _to_epoll(events: int) -> int:
    return (_EPOLLIN if events & READ else 0) | (_EPOLLOUT if events & WRITE else 0)


def _from_epoll(mask: int) -> int:
    # As selectors reads it: anything but "writable" (readable, an error, a hang-up) wakes a
    # reader, anything but "readable" a writer; the loop keeps what it asked for.
    return (WRITE if mask & ~_EPOLLIN else 0) | (READ if mask & ~_EPOLLOUT else 0)
