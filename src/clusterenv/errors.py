"""Exceptions and warnings raised by clusterenv.

Every exception subclasses both :class:`ClusterEnvError` and the builtin it narrows, so callers can
catch either ``ClusterEnvError`` or the familiar ``ValueError`` / ``OSError`` / ``RuntimeError``.
All of them pickle, so a worker process can re-raise them in its parent unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusterenv.findings import Code

__all__ = [
    "ClusterEnvError",
    "ClusterEnvWarning",
    "ConfigError",
    "ConfigProblem",
    "DiscoveryError",
    "LaunchError",
]


class ClusterEnvError(Exception):
    """Base class of every error clusterenv raises on purpose."""


@dataclass(frozen=True)
class ConfigProblem:
    """One problem found while validating the environment.

    Attributes:
        variables: The variables involved, e.g. ``("WORLD_SIZE", "NUM_NODES", "NUM_TRAINERS")``.
        message: What is wrong, naming the variables and their values, e.g.
            ``"WORLD_SIZE='abc': expected a decimal integer"``.
        fix: What to do about it, e.g. ``"export WORLD_SIZE=16"``; may be empty.
        code: Stable identifier of the rule (the ``doctor`` finding code), e.g.
            ``"config-world-size"``.
    """

    variables: tuple[str, ...]
    message: str
    fix: str = ""
    code: Code = "config-invalid"

    def __str__(self) -> str:
        return f"{self.message}; {self.fix}" if self.fix else self.message


class ConfigError(ClusterEnvError, ValueError):
    """Bad or inconsistent environment values.

    Carries every problem found (``problems``), each naming the variable, its value and the fix,
    so one run shows everything that needs changing.
    """

    def __init__(self, problems: Iterable[ConfigProblem | str], *, source: str | None = None):
        items = tuple(
            p if isinstance(p, ConfigProblem) else ConfigProblem((), str(p)) for p in problems
        )
        self.problems: tuple[ConfigProblem, ...] = items
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = f" (source: {self.source})" if self.source else ""
        if len(self.problems) == 1:
            return f"invalid cluster environment{where}: {self.problems[0]}"
        lines = [f"invalid cluster environment{where}: {len(self.problems)} problems"]
        lines.extend(f"  - {p}" for p in self.problems)
        return "\n".join(lines)

    @property
    def variables(self) -> tuple[str, ...]:
        """Every variable named by any problem, in order of first mention."""
        seen: dict[str, None] = {}
        for problem in self.problems:
            seen.update(dict.fromkeys(problem.variables))
        return tuple(seen)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_config_error, (self.problems, self.source))


def _rebuild_config_error(problems: tuple[ConfigProblem, ...], source: str | None) -> ConfigError:
    return ConfigError(problems, source=source)


class DiscoveryError(ClusterEnvError, OSError):
    """The host could not be read: an unreadable root, snapshot or sysfs tree.

    ``path`` names what could not be read; the message says why and what to do.
    """

    def __init__(self, message: str, *, path: str | None = None):
        # One argument: str() is the message as is, and pickling keeps ``path`` (the __dict__).
        super().__init__(message)
        self.path = path


class LaunchError(ClusterEnvError, RuntimeError):
    """A launch could not start: a missing ``torchrun``, a worker started without a launcher, …"""


class ClusterEnvWarning(UserWarning):
    """A value the user set is kept but known to be harmful, or an action came too late."""
