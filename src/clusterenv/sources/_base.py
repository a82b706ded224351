"""What every environment source shares: the ABC and a reader that collects problems.

A source reads the variables of one kind of environment (a torchrun worker, a Runpod Instant
Cluster, a generic ``MASTER_ADDR`` setup, a laptop) into the fields of a ``ClusterConfig``. It
never raises on a bad value: every problem is collected so that one ``ConfigError`` can name them
all, and so that ``doctor`` can show them as findings.
"""

from __future__ import annotations

import ipaddress
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from clusterenv._root import Root
from clusterenv._shell import export
from clusterenv.errors import ConfigProblem
from clusterenv.findings import Finding

__all__ = [
    "DEFAULT_PORT",
    "MAX_NODES",
    "EnvReader",
    "NodeFacts",
    "Reading",
    "Source",
    "format_host_port",
    "is_loopback_host",
    "parse_host",
    "plain_int",
    "split_host_port",
]

#: torchrun's default rendezvous port, used where a source has no port of its own.
DEFAULT_PORT = 29500
#: The most nodes a cluster may have (``NUM_NODES`` and every launcher's node count): four times
#: the 16,384 nodes preflight is measured with. A larger count is refused as a configuration
#: error instead of being taken at its word (a typo such as ``NUM_NODES=999999999`` made the
#: preflight primary try to list a billion ranks).
MAX_NODES = 65536

_DECIMAL = re.compile(r"[0-9]+")
# A DNS name as RFC 1123 allows it; anything else that is not an IP address is refused.
_HOSTNAME = re.compile(
    r"(?=.{1,253}\Z)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?"
)
# An IPv6 zone: an interface name as plain as Linux allows (IFNAMSIZ - 1 bytes), or an index.
_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_MAX_DIGITS = 9  # ranks, counts and ports never need more; longer values are refused early


@dataclass
class Reading:
    """What a source read: the config fields, the problems and the cross-check findings."""

    fields: dict[str, Any] = field(default_factory=dict)
    problems: list[ConfigProblem] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    #: Values as given, for checks that compare spellings (``HOST_NODE_ADDR``).
    raw: dict[str, str] = field(default_factory=dict)


class EnvReader:
    """Reads typed values from an environment, recording a problem for each bad one."""

    def __init__(self, environ: Mapping[str, str], reading: Reading):
        self.environ = environ
        self.reading = reading

    def problem(
        self, variables: tuple[str, ...], message: str, fix: str = "", code: str = "config-invalid"
    ) -> None:
        """Record a problem."""
        self.reading.problems.append(ConfigProblem(variables, message, fix, code))

    def fix(self, name: str, *, rejected: str | None = None) -> str:
        """``export NAME=VALUE`` with a value the other variables support, else a placeholder;
        never ``rejected`` (see :mod:`clusterenv.sources._fixes`)."""
        from clusterenv.sources._fixes import fix_for  # noqa: PLC0415  # it imports this module

        return fix_for(name, self.environ, rejected=rejected)

    def _agreeing_fix(
        self, names: tuple[str, ...], first: tuple[str, str], second: tuple[str, str]
    ) -> str:
        """The fix of two spellings that disagree: the one a third variable (``HOST_NODE_ADDR``)
        supports, else a placeholder for both."""
        from clusterenv.sources._fixes import evidenced_value, placeholder  # noqa: PLC0415

        third = {k: v for k, v in self.environ.items() if k not in names}
        arbiter = evidenced_value(first[0], third)
        if arbiter is not None:
            for (wrong, _), (_, right) in ((first, second), (second, first)):
                if _same_value(arbiter, right):
                    return export(wrong, right)
        return (f"set both to the same value: {export(first[0], placeholder(first[0]))}; "
                f"export {second[0]}=${first[0]}")

    def get(self, name: str) -> str | None:
        """The value of ``name``, or None when it is unset. An empty value counts as unset."""
        value = self.environ.get(name)
        return value if value else None

    def first(self, *names: str) -> tuple[str, str] | tuple[None, None]:
        """The first of ``names`` that is set, as ``(name, value)``."""
        for name in names:
            value = self.get(name)
            if value is not None:
                return name, value
        return None, None

    def aliased(
        self, *names: str, required: bool, what: str, example: str
    ) -> tuple[str, str] | None:
        """Read a value that may be spelled several ways (``PRIMARY_ADDR`` / ``MASTER_ADDR``).

        Every spelling that is set must agree; the first is reported as the one used.
        """
        present = [(n, v) for n in names if (v := self.get(n)) is not None]
        if not present:
            if required:
                spelled = " or ".join(names)
                self.problem(
                    names,
                    f"{spelled} is not set ({what}); this source requires it",
                    self.fix(names[0]),
                    "config-missing",
                )
            return None
        name, value = present[0]
        for other, other_value in present[1:]:
            if not _same_value(value, other_value):
                self.problem(
                    (name, other),
                    f"{name}={value!r} and {other}={other_value!r} disagree: they are two "
                    f"spellings of {what} and must be equal",
                    self._agreeing_fix(names, (name, value), (other, other_value)),
                    "config-alias-mismatch",
                )
        return name, value

    def integer(
        self,
        *names: str,
        required: bool,
        what: str,
        example: str,
        minimum: int = 0,
        maximum: int | None = None,
    ) -> int | None:
        """Read a decimal integer (first spelling that is set; all spellings must agree)."""
        found = self.aliased(*names, required=required, what=what, example=example)
        if found is None:
            return None
        name, value = found
        return self.parse_int(
            name, value, what=what, example=example, minimum=minimum, maximum=maximum
        )

    def parse_int(
        self,
        name: str,
        value: str,
        *,
        what: str,
        example: str,
        minimum: int = 0,
        maximum: int | None = None,
    ) -> int | None:
        """Parse ``value`` of variable ``name`` as a decimal integer within bounds."""
        text = value.strip()
        if not _DECIMAL.fullmatch(text) or not text.isascii():
            kind = "a non-negative" if minimum <= 0 else "a positive"
            self.problem(
                (name,),
                f"{name}={value!r}: expected {kind} decimal integer ({what}, e.g. {example})",
                self.fix(name, rejected=value),
                "config-not-integer",
            )
            return None
        if len(text.lstrip("0")) > _MAX_DIGITS:
            self.problem(
                (name,),
                f"{name}={value!r}: too large for {what}",
                self.fix(name, rejected=value),
                "config-out-of-range",
            )
            return None
        number = int(text)
        if number < minimum or (maximum is not None and number > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            self.problem(
                (name,),
                f"{name}={value!r}: {what} must be {bound}",
                self.fix(name, rejected=value),
                "config-out-of-range",
            )
            return None
        return number

    def port(self, *names: str, required: bool, default: int | None = None) -> int | None:
        """Read a TCP port (1-65535)."""
        found = self.integer(
            *names,
            required=required and default is None,
            what="a TCP port",
            example=str(DEFAULT_PORT),
            minimum=1,
            maximum=65535,
        )
        return default if found is None and not self.any_set(*names) else found

    def host(self, *names: str, required: bool, what: str, example: str) -> str | None:
        """Read a host: an IP address (IPv6 with or without brackets) or a DNS name."""
        found = self.aliased(*names, required=required, what=what, example=example)
        if found is None:
            return None
        name, value = found
        host = parse_host(value)
        if host is None:
            self.problem(
                (name,),
                f"{name}={value!r}: expected an IP address or host name ({what})",
                self.fix(name, rejected=value),
                "config-bad-address",
            )
        return host

    def ip(self, name: str, *, required: bool, what: str, example: str) -> str | None:
        """Read a variable that must be an IP address (``NODE_ADDR``)."""
        found = self.aliased(name, required=required, what=what, example=example)
        if found is None:
            return None
        value = found[1]
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        try:
            return str(ipaddress.ip_address(text))
        except ValueError:
            self.problem(
                (name,),
                f"{name}={value!r} is not an IP address ({what})",
                self.fix(name, rejected=value),
                "config-bad-address",
            )
            return None

    def any_set(self, *names: str) -> bool:
        """Whether any of ``names`` is set (non-empty), valid or not."""
        return any(self.get(n) is not None for n in names)


def _same_value(a: str, b: str) -> bool:
    """Two spellings agree when equal as text, as IP addresses, or as integers."""
    if a.strip() == b.strip():
        return True
    ha, hb = parse_host(a), parse_host(b)
    if ha is not None and ha == hb:
        return True
    a_num, b_num = a.strip(), b.strip()
    return bool(
        _DECIMAL.fullmatch(a_num) and _DECIMAL.fullmatch(b_num) and int(a_num) == int(b_num)
    )


def parse_host(value: str) -> str | None:
    """Normalise a host: an IP address (brackets removed, canonical form) or a DNS name.

    An IPv6 zone (``fe80::1%ens1``) must look like an interface name (up to 15 letters, digits,
    ``.``, ``_``, ``-``): Python accepts any text after ``%``, and a zone such as
    ``x,LD_PRELOAD=libevil.so`` would otherwise ride into another tool's option syntax.

    Returns None when ``value`` is neither.
    """
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    _, percent, zone = text.partition("%")
    if percent and not _ZONE.fullmatch(zone):
        return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if text.isascii() and _HOSTNAME.fullmatch(text) and not text.replace(".", "").isdigit():
        return text.rstrip(".").lower()
    return None


def split_host_port(value: str) -> tuple[str, int] | None:
    """Split ``"10.65.0.2:29500"`` or ``"[fd00::2]:29500"`` into host and port; None if garbled."""
    text = value.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1 :].startswith(":"):
            return None
        host_part, port_part = text[1:end], text[end + 2 :]
    else:
        host_part, sep, port_part = text.rpartition(":")
        if not sep or ":" in host_part:
            return None
    host = parse_host(host_part)
    if host is None or not _DECIMAL.fullmatch(port_part) or len(port_part) > 5:
        return None
    return host, int(port_part)


def format_host_port(host: str, port: int) -> str:
    """``host:port``, with IPv6 addresses in brackets (``[fd00::2]:29500``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback_host(host: str) -> bool:
    """Whether a host is loopback without asking a resolver (``localhost``, 127/8, ``::1``)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        name = host.lower().rstrip(".")
        return name in {"localhost", "ip6-localhost", "ip6-loopback"} or name.endswith(".localhost")


@dataclass(frozen=True)
class NodeFacts:
    """What a node-level source says about this node, used as evidence inside a worker.

    Each value is ``(variable, value)`` so that a contradiction can name its variable.
    """

    source: str
    node_rank: tuple[str, int] | None = None
    num_nodes: tuple[str, int] | None = None
    per_node: tuple[str, int] | None = None
    primary: tuple[str, str] | None = None


def plain_int(environ: Mapping[str, str], *names: str) -> tuple[str, int] | None:
    """The first of ``names`` holding a plain decimal integer, as ``(name, value)``; never
    records a problem (for evidence, not for the values a source is built from)."""
    for name in names:
        text = (environ.get(name) or "").strip()
        if text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS:
            return name, int(text)
    return None


class Source(ABC):
    """One kind of environment: decides whether it matches and reads the config fields."""

    #: The value of ``ClusterConfig.source`` this source produces, e.g. ``"runpod"``.
    name: ClassVar[str]
    #: One line for docs and ``show``, e.g. ``"Runpod Instant Cluster"``.
    description: ClassVar[str]
    #: ``"process"`` when it describes a launched worker (ranks), ``"node"`` otherwise.
    level: ClassVar[str] = "node"
    #: Who starts the processes, for messages (``"torchrun"``, ``"mpirun"``).
    launcher: ClassVar[str] = "your launcher"
    #: False for sources used only when forced (their variables mean other things elsewhere).
    auto: ClassVar[bool] = True
    #: The variables whose presence makes it match, reported by :meth:`reason`.
    markers: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def matches(self, environ: Mapping[str, str]) -> bool:
        """Whether this environment looks like this source (never raises)."""

    @abstractmethod
    def read(self, environ: Mapping[str, str], root: Root) -> Reading:
        """Read the config fields, collecting every problem instead of raising."""

    def reason(self, environ: Mapping[str, str]) -> str:
        """Why it matched, e.g. ``"TORCHELASTIC_RUN_ID is set"`` (for ``show`` and ``doctor``)."""
        present = [name for name in self.markers if name in environ]
        if not present:
            return "nothing more specific matched"
        verb = "is" if len(present) == 1 else "are"
        return f"{', '.join(present)} {verb} set"

    def node_facts(self, environ: Mapping[str, str]) -> NodeFacts | None:
        """What this (outer, node-level) source says about the node; None when nothing."""
        return None
