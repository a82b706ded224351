"""How one preflight run behaves: the options the primary and the nodes share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clusterenv.preflight.wire import DEFAULT_LIMITS, Limits

__all__ = ["PreflightOptions"]


@dataclass(frozen=True, slots=True)
class PreflightOptions:
    """The options of one preflight run, for :func:`~clusterenv.preflight.serve_primary`,
    :class:`~clusterenv.preflight.PrimaryServer` and :func:`~clusterenv.preflight.run_node`.

    Attributes:
        timeout: Seconds the primary waits for every node, and a node keeps trying to reach the
            primary, e.g. ``30.0``.
        token: The shared secret (``CLUSTERENV_PREFLIGHT_TOKEN``, as bytes); when set, messages
            without a valid MAC are refused. None: unauthenticated.
        ring: On the primary: have each node open a TCP connection to the next node in rank
            order (nodes learn it from the primary).
        limits: Size, time and connection bounds.
        progress: Called with one line each time what this node waits for changes, e.g.
            ``"waiting for ranks 2, 5-7 (13 of 16 reported, 12 s left)"``; None: silent.

    Raises:
        ValueError: When ``timeout`` is not a positive number of seconds.
    """

    timeout: float = 30.0
    token: bytes | None = None
    ring: bool = False
    limits: Limits = DEFAULT_LIMITS
    progress: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"timeout={self.timeout!r}: expected a positive number of seconds")

    def say(self, line: str) -> None:
        """Report ``line`` through :attr:`progress`, if any."""
        if self.progress is not None:
            self.progress(line)
