"""What every environment source shares: the ABC and a reader that collects problems.

A source reads the variables of one kind of environment (a torchrun worker, a Runpod Instant
Cluster, a generic ``MASTER_ADDR`` setup, a laptop) into the fields of a ``ClusterConfig``. It
never raises on a bad value: every problem is collected so that one ``ConfigError`` can name them
all, and so that ``doctor`` can show them as findings.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from clusterenv._root import Root
from clusterenv._shell import export
from clusterenv._values import is_loopback_host, parse_decimal, parse_host, parse_ip
from clusterenv.errors import ConfigProblem
from clusterenv.findings import Code, Finding

__all__ = [
    "DEFAULT_PORT",
    "MAX_NODES",
    "EnvReader",
    "Named",
    "NodeFacts",
    "Reading",
    "Source",
    "Spelled",
    "Unresolved",
    "plain_int",
    "same_address",
]

#: torchrun's default rendezvous port, used where a source has no port of its own.
DEFAULT_PORT = 29500
#: The most nodes a cluster may have (``NUM_NODES`` and every launcher's node count): four times
#: the 16,384 nodes preflight is measured with. A larger count is refused as a configuration
#: error instead of being taken at its word (a typo such as ``NUM_NODES=999999999`` made the
#: preflight primary try to list a billion ranks).
MAX_NODES = 65536


class Spelled(NamedTuple):
    """An address and the variable it came from, e.g. ``Spelled("MASTER_ADDR", "pod-0")``."""

    variable: str
    host: str


class Unresolved(NamedTuple):
    """Two spellings of one address that only resolving can compare: a host name beside an IP
    address or another name (``PRIMARY_ADDR=10.65.0.10``, ``MASTER_ADDR=pod-0``).

    Reading is pure, so they are not judged here: ``doctor`` and ``launch`` resolve both as
    the job will and report ``code`` when they name different hosts.

    Attributes:
        code: The finding when they resolve apart, e.g. ``"config-alias-mismatch"``.
        first: The spelling used, e.g. ``Spelled("PRIMARY_ADDR", "10.65.0.10")``.
        second: The other spelling, e.g. ``Spelled("MASTER_ADDR", "pod-0")``.
        what: What both name, e.g. ``"the primary node's cluster address"``.
    """

    code: Code
    first: Spelled
    second: Spelled
    what: str


@dataclass
class Reading:
    """What a source read: the config fields, the problems and the cross-check findings."""

    fields: dict[str, Any] = field(default_factory=dict)
    problems: list[ConfigProblem] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    #: Values as given, for checks that compare spellings (``HOST_NODE_ADDR``).
    raw: dict[str, str] = field(default_factory=dict)
    #: The variables the rendezvous address was read from, the one used first, e.g.
    #: ``("PRIMARY_ADDR", "MASTER_ADDR")``; empty when the source derived it (a Slurm node
    #: list, an MPI host list).
    primary_variables: tuple[str, ...] = ()
    #: Spellings of one address that only resolving can compare (see :class:`Unresolved`).
    unresolved: list[Unresolved] = field(default_factory=list)
    #: Where a field's value came from, e.g. ``{"node_rank": "SLURM_NODEID",
    #: "num_nodes": "SLURM_STEP_NUM_NODES"}``, for messages that compare it with another layer.
    origins: dict[str, str] = field(default_factory=dict)


class EnvReader:
    """Reads typed values from an environment, recording a problem for each bad one."""

    def __init__(self, environ: Mapping[str, str], reading: Reading):
        self.environ = environ
        self.reading = reading

    def problem(
        self, variables: tuple[str, ...], message: str, fix: str = "", code: Code = "config-invalid"
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
        self, *names: str, required: bool, what: str, hosts: bool = False
    ) -> tuple[str, str] | None:
        """Read a value that may be spelled several ways (``PRIMARY_ADDR`` / ``MASTER_ADDR``).

        Every spelling that is set must agree; the first is reported as the one used. With
        ``hosts``, two spellings that are valid hosts and differ only where resolving could
        tell (a name beside an address or another name) are kept in ``reading.unresolved``
        instead of being a problem.
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
            if hosts and _needs_resolving(value, other_value):
                self.reading.unresolved.append(Unresolved(
                    "config-alias-mismatch",
                    Spelled(name, parse_host(value) or value),
                    Spelled(other, parse_host(other_value) or other_value),
                    what,
                ))
            elif not _same_value(value, other_value):
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
        found = self.aliased(*names, required=required, what=what)
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
        number = parse_decimal(text)
        if number is None and not (text.isascii() and text.isdigit()):
            kind = "a non-negative" if minimum <= 0 else "a positive"
            self.problem(
                (name,),
                f"{name}={value!r}: expected {kind} decimal integer ({what}, e.g. {example})",
                self.fix(name, rejected=value),
                "config-not-integer",
            )
            return None
        if number is None:
            self.problem(
                (name,),
                f"{name}={value!r}: too large for {what}",
                self.fix(name, rejected=value),
                "config-out-of-range",
            )
            return None
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

    def host(self, *names: str, required: bool, what: str) -> str | None:
        """Read a host: an IP address (IPv6 with or without brackets) or a DNS name."""
        found = self.aliased(*names, required=required, what=what, hosts=True)
        return None if found is None else self._host(*found, what=what)

    def _host(self, name: str, value: str, *, what: str) -> str | None:
        host = parse_host(value)
        if host is None:
            self.problem(
                (name,),
                f"{name}={value!r}: expected an IP address or host name ({what})",
                self.fix(name, rejected=value),
                "config-bad-address",
            )
        return host

    def primary(self, *names: str, required: bool, what: str) -> str | None:
        """Read the rendezvous address (:meth:`host`), noting which variable held it."""
        found = self.aliased(*names, required=required, what=what, hosts=True)
        if found is None:
            return None
        self.reading.primary_variables = tuple(n for n in names if self.get(n) is not None)
        return self._host(*found, what=what)

    def ip(self, name: str, *, required: bool, what: str) -> str | None:
        """Read a variable that must be an IP address (``NODE_ADDR``)."""
        found = self.aliased(name, required=required, what=what)
        if found is None:
            return None
        value = found[1]
        host = parse_host(value)
        if host is not None and parse_ip(host) is not None:
            return host
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


def same_address(a: str, b: str) -> bool:
    """Whether two hosts are the same without resolving anything: equal as text (ignoring
    case and a trailing dot) or as IP addresses."""
    ha, hb = parse_host(a), parse_host(b)  # canonical: addresses, names in lower case
    return ha is not None and ha == hb


def _needs_resolving(a: str, b: str) -> bool:
    """Two valid hosts, at least one a name, that are not the same as written. ``localhost``
    needs no resolver (it is loopback by definition): beside a host that is not loopback it
    disagrees as written."""
    ha, hb = parse_host(a), parse_host(b)
    if ha is None or hb is None or same_address(ha, hb):
        return False
    if is_loopback_host(ha) != is_loopback_host(hb):
        return False
    return parse_ip(ha) is None or parse_ip(hb) is None


def _same_value(a: str, b: str) -> bool:
    """Two spellings agree when equal as text, as IP addresses, or as integers."""
    if a.strip() == b.strip():
        return True
    ha, hb = parse_host(a), parse_host(b)
    if ha is not None and ha == hb:
        return True
    a_num, b_num = parse_decimal(a), parse_decimal(b)
    return a_num is not None and a_num == b_num


class Named(NamedTuple):
    """A value and the variable (or expression) it came from, e.g. ``Named("LOCAL_SIZE", 8)``
    or ``Named("WORLD_SIZE / nodes", 2)``: a message can then name where the value came from."""

    name: str
    value: int


@dataclass(frozen=True)
class NodeFacts:
    """What a node-level source says about this node, used as evidence inside a worker.

    Each value is ``(variable, value)`` so that a contradiction can name its variable.
    """

    source: str
    node_rank: Named | None = None
    num_nodes: Named | None = None
    per_node: Named | None = None
    primary: tuple[str, str] | None = None
    #: This node's own address on the platform's network, e.g. ``("NODE_ADDR", "10.65.0.3")``.
    node_addr: tuple[str, str] | None = None


def plain_int(environ: Mapping[str, str], *names: str) -> Named | None:
    """The first of ``names`` holding a plain decimal integer, as ``(name, value)``; never
    records a problem (for evidence, not for the values a source is built from)."""
    for name in names:
        number = parse_decimal(environ.get(name))
        if number is not None:
            return Named(name, number)
    return None


class Source(ABC):
    """One kind of environment: decides whether it matches and reads the config fields."""

    #: The value of ``ClusterConfig.source`` this source produces, e.g. ``"runpod"``.
    name: ClassVar[str]
    #: ``"process"`` when it describes a launched worker (ranks), ``"node"`` otherwise.
    level: ClassVar[str] = "node"
    #: Who starts the processes, for messages (``"torchrun"``, ``"mpirun"``).
    launcher: ClassVar[str] = "your launcher"
    #: False for sources used only when forced (their variables mean other things elsewhere).
    auto: ClassVar[bool] = True
    #: The variables whose presence makes it match, reported by :meth:`reason`.
    markers: ClassVar[tuple[str, ...]] = ()
    #: Variables that only this launcher or platform puts into the processes it starts
    #: (taken from its own code or documentation), so that any one of them proves it was
    #: here even when the rest are missing (a partial dump, a launcher that skipped one): the
    #: registry then chooses this source, which names what is missing, instead of falling
    #: through to the local default. Names other launchers share (``RANK``, ``WORLD_SIZE``,
    #: ``MASTER_ADDR``) are not identifying.
    identifying: ClassVar[tuple[str, ...]] = ()
    #: Who sets the identifying variables, for messages (``"torchrun"``, ``"Slurm"``,
    #: ``"SkyPilot"``).
    setter: ClassVar[str] = ""

    @abstractmethod
    def matches(self, environ: Mapping[str, str]) -> bool:
        """Whether this environment looks like this source (never raises)."""

    @abstractmethod
    def read(
        self, environ: Mapping[str, str], root: Root, *, outer: NodeFacts | None = None
    ) -> Reading:
        """Read the config fields, collecting every problem instead of raising.

        Args:
            environ: The variables.
            root: The host, for the few sources that count visible GPUs.
            outer: What the node-level source around a worker says about its node (the
                caller finds it), e.g. the node count a Lightning child cannot know itself.
        """

    def evidence(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """The :attr:`identifying` variables that are set (non-empty), e.g.
        ``("GROUP_RANK", "ROLE_RANK")``; empty when there is no trace of this source."""
        return tuple(name for name in self.identifying if environ.get(name))

    def reason(self, environ: Mapping[str, str]) -> str:
        """Why it matched, e.g. ``"TORCHELASTIC_RUN_ID is set"`` (for ``show`` and ``doctor``).

        A source chosen on its :meth:`evidence` alone says so: ``"GROUP_RANK is set, which only
        torchrun sets, but not all that torchrun sets"``.
        """
        if not self.matches(environ):
            found = self.evidence(environ)
            if found:
                verb = "is" if len(found) == 1 else "are"
                who = self.setter or self.launcher
                return (f"{', '.join(found)} {verb} set, which only {who} sets, but not all "
                        f"that {who} sets")
        present = [name for name in self.markers if name in environ]
        if not present:
            return "nothing more specific matched"
        verb = "is" if len(present) == 1 else "are"
        return f"{', '.join(present)} {verb} set"

    def node_facts(self, environ: Mapping[str, str]) -> NodeFacts | None:
        """What this (outer, node-level) source says about the node; None when nothing."""
        return None
