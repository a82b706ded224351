"""Linting ``NCCL_SOCKET_IFNAME`` / ``NCCL_IB_HCA`` values and the exact-name variables of Gloo
(``GLOO_SOCKET_IFNAME``) and TensorPipe (``TP_SOCKET_IFNAME``) against this host.

Public through :mod:`clusterenv.filters`. Pure: callers pass the names to match against.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

from clusterenv._values import IPAddress, parse_ip
from clusterenv.filters.language import (
    IB_HCA,
    MAX_TOKENS,
    SOCKET_IFNAME,
    FilterToken,
    NcclFilter,
    nccl_default_interfaces,
    parse_filter,
    render_exact,
    split_modifiers,
)
from clusterenv.findings import Code, Finding, Severity, codes_of

__all__ = [
    "ALL_CODES",
    "lint_exact_names",
    "lint_filter",
]

# The codes are declared once, in clusterenv.findings.CODES; docs/troubleshooting.md lists each
# with the error text users search for.

#: Every code :func:`lint_filter` and :func:`lint_exact_names` return: the ``"filters"`` codes of
#: :data:`clusterenv.findings.CODES`.
ALL_CODES: tuple[str, ...] = codes_of("filters")
"""Every finding code this module emits, e.g. ``"filter-prefix-collision"``."""

# ---------------------------------------------------------------------------------------------
# Lint
# ---------------------------------------------------------------------------------------------

_NUMBERED = re.compile(r"(.*?)(0|[1-9]\d*)(:\d+)?")  # mlx5_7, ens10, mlx5_7:1


def _summary(items: Sequence[str]) -> str:
    """``lo, eth0, ens1``, with runs of three or more compressed to ``mlx5_0..mlx5_7``."""
    if not items:
        return "none"
    parts: list[str] = []
    i = 0
    while i < len(items):
        j = i
        first = _NUMBERED.fullmatch(items[i])
        while first and j + 1 < len(items):
            nxt = _NUMBERED.fullmatch(items[j + 1])
            if (
                not nxt
                or (nxt[1], nxt[3]) != (first[1], first[3])
                or int(nxt[2]) != int(first[2]) + j + 1 - i
            ):
                break
            j += 1
        parts.extend([f"{items[i]}..{items[j]}"] if j - i >= 2 else items[i : j + 1])
        i = j + 1
    return ", ".join(parts)


def _as_ip(text: str) -> IPAddress | None:
    """The IP address a filter token spells, also as ``address:port`` or ``address/prefix``
    (what people write where NCCL expects interface names)."""
    candidate = text.strip().strip("[]").split("%", 1)[0]
    for attempt in (candidate, candidate.split(":", 1)[0], candidate.rsplit("/", 1)[0]):
        address = parse_ip(attempt)
        if address is not None:
            return address
    return None


def _owner_of(
    ip: IPAddress, owner: Mapping[str, str] | None
) -> str | None:
    for key, name in (owner or {}).items():
        if _as_ip(key) == ip:
            return name
    return None


def _fix(variable: str, suggest: str | None, otherwise: str) -> str:
    return f"export {variable}={shlex.quote(suggest)}" if suggest else otherwise


class _Linter:
    """The findings for one value, each titled and evidenced with ``VARIABLE='value'``."""

    def __init__(self, variable: str, value: str, suggest: str | None) -> None:
        self.variable = variable
        self.shown = f"{variable}={value!r}"
        self.suggest = suggest
        self.findings: list[Finding] = []

    def add(
        self, code: Code, title: str, evidence: Iterable[str], fix: str,
        *, severity: Severity | None = None,
    ) -> None:
        """Record a finding whose evidence starts with the value itself (severity: the code's
        default unless given)."""
        facts = (self.shown, *evidence)
        self.findings.append(Finding.of(code, title, facts, fix, severity=severity))

    def fix(self, otherwise: str) -> str:
        """The fix text: the suggested value when the caller gave one."""
        return _fix(self.variable, self.suggest, otherwise)


def lint_filter(
    value: str | None,
    *,
    variable: str = SOCKET_IFNAME,
    names: Sequence[str],
    ports: Sequence[tuple[str, int]] | None = None,
    owner: Mapping[str, str] | None = None,
    avoid: Mapping[str, str] | None = None,
    suggest: str | None = None,
) -> list[Finding]:
    """Report misuse of an ``NCCL_SOCKET_IFNAME`` / ``NCCL_IB_HCA`` value against this host.

    Args:
        value: The value as set, e.g. ``"^=mlx5_8,^=mlx5_14"``; None (unset) gives no findings.
        variable: ``"NCCL_SOCKET_IFNAME"`` (default) or ``"NCCL_IB_HCA"``; named in every title.
        names: What the filter is matched against: for sockets the interfaces NCCL can use
            (up, with an address) in kernel order, e.g. ``["lo", "eth0", "ens1"]``; for HCAs the
            RDMA device names, e.g. ``["mlx5_0", "mlx5_1"]``. Empty skips the matching checks.
        ports: For ``NCCL_IB_HCA``, the ports NCCL can use (ACTIVE, InfiniBand or Ethernet link
            layer) as ``(device, port)`` pairs; matching then honours port numbers.
        owner: Address -> interface name, e.g. ``{"10.65.0.2": "ens1"}``, to suggest the
            interface when the value is an IP address.
        avoid: Names that must not be selected, with the reason, e.g.
            ``{"eth0": "management interface", "lo": "loopback"}``.
        suggest: The value to recommend in fixes, e.g. ``"=ens1"``.

    Returns:
        Findings (codes in :data:`ALL_CODES`), in check order; empty when the value is fine.
    """
    if value is None:
        return []
    lint = _Linter(variable, value, suggest)
    socket = variable != IB_HCA
    kind = "interface" if socket else "HCA"
    text = value.split("\0", 1)[0]
    have = f"local {kind}s: {_summary(names)}"
    if socket and len(text) == 1:
        chosen = nccl_default_interfaces(names)
        lint.add(
            "filter-ignored-short",
            f"{lint.shown} is ignored: NCCL uses {variable} only when it is longer than one "
            "character, and picks interfaces itself",
            [f"NCCL's default choice here: {_summary(chosen)}"] if names else [],
            lint.fix(f"write the whole interface name ({have})"),
        )
        return lint.findings
    parsed = parse_filter(text, variable=variable)
    if parsed is None:
        return []
    literal = _lint_syntax(lint, parsed, text, owner=owner)
    if not parsed.tokens:
        # matchIfList matches everything against an empty list, so '^' then selects nothing.
        outcome = f"no {kind}" if parsed.exclude else f"every {kind}"
        if socket and not parsed.exclude:
            outcome += ", loopback included, in kernel order"
        lint.add(
            "filter-empty-list",
            f"{lint.shown} lists no names: it selects {outcome}",
            [have] if names else [],
            lint.fix(f"list names after the modifiers, e.g. {variable}=^=docker0,lo"),
            severity="error" if parsed.exclude else "warning",
        )
        return lint.findings
    if names or ports:
        _lint_matching(lint, parsed, names, ports, literal=literal, avoid=avoid or {})
    return lint.findings


def _lint_syntax(
    lint: _Linter, parsed: NcclFilter, text: str, *, owner: Mapping[str, str] | None
) -> set[str]:
    """Checks that need no host facts. Returns the tokens already reported as broken."""
    socket = parsed.variable != IB_HCA
    broken: set[str] = set()
    _, _, body = split_modifiers(text)
    pieces = body.split(",")
    marked = [i for i, p in enumerate(pieces) if p[:1] in ("^", "=")]
    if marked and marked[0] == 0 and parsed.exact and not parsed.exclude and body[:1] == "^":
        wanted = "^=" + ",".join([pieces[0].lstrip("^="), *pieces[1:]])
        lint.add(
            "filter-modifier-order",
            f"{lint.shown}: '=' before '^' is not an exclusion; NCCL reads {pieces[0]!r} as a "
            "literal name, which matches nothing",
            ["NCCL reads an optional '^' and then an optional '=', in that order"],
            f"write {parsed.variable}={shlex.quote(wanted)}",
        )
        broken.add(pieces[0])
        marked = marked[1:]
    if marked:
        leads = [pieces[i][: len(pieces[i]) - len(pieces[i].lstrip("^="))] for i in marked]
        exclude = parsed.exclude or any(lead.startswith("^") for lead in leads)
        exact = parsed.exact or any("=" in lead for lead in leads)
        kept = [p.lstrip("^=") for p in pieces if p.lstrip("^=")]
        wanted = ("^" if exclude else "") + ("=" if exact else "") + ",".join(kept)
        shown = ", ".join(repr(pieces[i]) for i in marked)
        lint.add(
            "filter-modifier-repeated",
            f"{lint.shown}: '^'/'=' allowed only at list start; token {shown} is taken "
            "literally and matches nothing",
            ["'^' and '=' apply once, to the whole list"],
            f"write {parsed.variable}={shlex.quote(wanted)}",
        )
        broken.update(pieces[i] for i in marked)
    for piece in pieces:
        if piece in broken or not piece:
            continue
        ip = _as_ip(piece)
        if ip is not None:
            broken.add(piece)
            name = _owner_of(ip, owner)
            takes = "interface names" if socket else "RDMA device names"
            hint = f" (did you mean {name}?)" if name else ""
            lint.add(
                "filter-ip-address",
                f"{lint.shown}: value looks like an IP address; {parsed.variable} takes "
                f"{takes}{hint}",
                [f"{ip} is held by {name}"] if name else [],
                _fix(parsed.variable, lint.suggest or name,
                     f"name the interface that holds {ip} (see `ip -br addr`)" if socket else
                     f"name the RDMA device whose port carries {ip} (see `ibdev2netdev`)"),
            )
        elif piece != "".join(piece.split()):
            broken.add(piece)
            lint.add(
                "filter-whitespace",
                f"{lint.shown}: token {piece!r} contains whitespace; NCCL does not trim it, so "
                "it matches nothing",
                [],
                f"write {parsed.variable}={shlex.quote(''.join(text.split()))}",
            )
    suffixed = [t for t in parsed.tokens if t.raw not in broken and ":" in t.raw]
    if socket and suffixed:
        plain = NcclFilter(
            text, parsed.exclude, parsed.exact,
            tuple(FilterToken(t.name, None, t.name) for t in parsed.tokens), parsed.variable,
        )
        shown = ", ".join(f"{t.raw!r} acts as the prefix {t.name!r}" for t in suffixed)
        lint.add(
            "filter-port-on-socket",
            f"{lint.shown}: port suffix is meaningless for sockets; {shown}",
            ["NCCL_SOCKET_IFNAME tokens are interface names or prefixes; ':' starts fields "
             "that only NCCL_IB_HCA uses"],
            f"write {parsed.variable}={shlex.quote(str(plain))}",
        )
    for token in suffixed if not socket else []:
        if token.port is not None and token.port <= 0:
            broken.add(token.raw)
            lint.add(
                "filter-bad-port",
                f"{lint.shown}: port field {token.fields[0]!r} of {token.raw!r} is not a port "
                f"number; NCCL reads port {token.port}, which matches no port",
                ["RDMA ports are numbered from 1"],
                f"write the port number, e.g. {token.name}:1, or leave it out for every port",
            )
    limit = MAX_TOKENS.get(parsed.variable, MAX_TOKENS[IB_HCA])
    written = [p for p in pieces if p.partition(":")[0]]
    if len(written) > limit:
        lint.add(
            "filter-too-many-tokens",
            f"{lint.shown}: {len(written)} tokens, but NCCL reads only the first {limit}",
            [f"ignored: {', '.join(written[limit:])}"],
            "use a shorter list (prefixes, or an exclusion list)",
        )
    return broken


def _lint_matching(
    lint: _Linter,
    parsed: NcclFilter,
    names: Sequence[str],
    ports: Sequence[tuple[str, int]] | None,
    *,
    literal: set[str],
    avoid: Mapping[str, str],
) -> None:
    socket = parsed.variable != IB_HCA
    kind = "interface" if socket else "HCA"
    if ports is not None:
        selected_ports = parsed.select_ports(ports)
        selected = tuple(dict.fromkeys(d for d, _ in selected_ports))
        have = f"usable ports: {_summary([f'{d}:{p}' for d, p in ports])}"
        known = list(dict.fromkeys([*names, *(d for d, _ in ports)]))
    else:
        selected = parsed.select_interfaces(names)
        have = f"local {kind}s: {_summary(names)}"
        known = list(names)
    if not selected:
        if socket:
            what = f"matches no interface (have: {_summary(names)})"
            then = "NCCL fails with 'Bootstrap : no socket interface found'"
        else:
            what = f"matches no HCA (have {_summary(known)}); NCCL will silently fall back to TCP"
            then = "NCCL logs 'NET/IB : No device found.' and uses sockets"
        if parsed.exclude:
            what = f"excludes every {kind}" + ("" if socket else "; NCCL will fall back to TCP")
        lint.add(
            "filter-matches-nothing", f"{lint.shown} {what}", [have, then],
            lint.fix(f"set {parsed.variable} to names that exist on this host"),
            # An HCA list that selects nothing costs bandwidth (TCP), not the job.
            severity=None if socket else "warning",
        )
        return
    marker = "^" if parsed.exclude else ""
    for token in parsed.tokens:
        if token.raw in literal:
            continue
        hits = [n for n in known if (n == token.name if parsed.exact else n.startswith(token.name))]
        if ports is not None:
            hits = [d for d in hits if any(
                dev == d and (token.port is None or token.port == port) for dev, port in ports
            )]
        if not parsed.exact and token.name in hits and len(hits) > 1:
            others = [n for n in hits if n != token.name]
            verb = "excludes" if parsed.exclude else "matches"
            lint.add(
                "filter-prefix-collision",
                f"{lint.shown}: prefix {token.name!r} also {verb} {', '.join(others)}; use "
                f"'{marker}={token.name}'",
                [have, "NCCL matches tokens as prefixes unless the list starts with '='"],
                lint.fix(_exact_fix(parsed, known, token)),
            )
        elif not hits and not parsed.exclude:
            lint.add(
                "filter-token-unmatched",
                f"{lint.shown}: token {token.raw!r} matches no {kind} here",
                [have],
                "fix the name, or drop it if it belongs to other machines",
            )
        elif socket and len(hits) > 1 and token.name not in hits and not parsed.exclude:
            lint.add(
                "filter-prefix-multiple",
                f"{lint.shown}: prefix {token.name!r} matches {len(hits)} interfaces "
                f"({_summary(hits)}); NCCL bootstraps on the first one it enumerates",
                [have, f"bootstrap would use {selected[0]}"],
                lint.fix(f"name one interface exactly, e.g. "
                         f"{parsed.variable}={render_exact(hits[:1])}"),
            )
    bad = [(n, avoid[n]) for n in selected if n in avoid]
    if bad:
        listed = ", ".join(f"{n} ({why})" for n, why in bad)
        code: Code
        if parsed.exclude:
            code = "filter-leaves-avoided"
            title = f"{lint.shown}: exclusion list leaves {listed} eligible"
        else:
            code = "filter-selects-avoided"
            title = f"{lint.shown} selects {listed}"
        instead = (f"name the {kind}s to use with '=' instead of excluding others"
                   if parsed.exclude else f"leave {', '.join(n for n, _ in bad)} out of the list")
        # NCCL bootstraps on the first interface selected: when that one is to be avoided the
        # hang is certain (an error), whatever the code's default.
        first_avoided = socket and selected[0] in avoid
        lint.add(code, title, [f"selected: {_summary(selected)}", have], lint.fix(instead),
                 severity="error" if first_avoided else None)


def _exact_fix(parsed: NcclFilter, known: Sequence[str], token: FilterToken) -> str:
    marker = "^" if parsed.exclude else ""
    if all(t.name in known for t in parsed.tokens):  # every token is a whole name already
        body = ",".join(t.raw for t in parsed.tokens)
        return f"write {parsed.variable}={shlex.quote(marker + '=' + body)}"
    return (f"start the list with '{marker}=' and write whole names, e.g. "
            f"{parsed.variable}={shlex.quote(marker + '=' + token.raw)}")


def _split_getline(value: str) -> list[str]:
    """Split like C++ ``std::getline`` on ``,``, as PyTorch does: no trailing empty piece."""
    pieces = value.split(",")
    return pieces[:-1] if len(pieces) > 1 and pieces[-1] == "" else pieces


_PROGRAMS = {"GLOO_SOCKET_IFNAME": "Gloo", "TP_SOCKET_IFNAME": "TensorPipe"}


def lint_exact_names(
    value: str | None,
    *,
    variable: str = "GLOO_SOCKET_IFNAME",
    names: Sequence[str],
    single: bool = False,
    owner: Mapping[str, str] | None = None,
    avoid: Mapping[str, str] | None = None,
    suggest: str | None = None,
) -> list[Finding]:
    """Report misuse of ``GLOO_SOCKET_IFNAME`` / ``TP_SOCKET_IFNAME``, which take exact names.

    Gloo splits its value on ``,`` and opens one device per interface name; TensorPipe takes
    exactly one name. Neither knows prefixes, ``^`` or ``=``.

    Args:
        value: The value as set, e.g. ``"^lo,docker"``; None (unset) gives no findings.
        variable: ``"GLOO_SOCKET_IFNAME"`` (default) or ``"TP_SOCKET_IFNAME"``.
        names: Local interface names, e.g. ``["lo", "eth0", "ens1"]``; empty skips the
            existence check.
        single: The variable takes exactly one name (True for ``TP_SOCKET_IFNAME``).
        owner: Address -> interface name, e.g. ``{"10.65.0.2": "ens1"}``.
        avoid: Names that must not be used, with the reason, e.g. ``{"eth0": "management"}``.
        suggest: The value to recommend in fixes, e.g. ``"ens1"``.

    Returns:
        Findings (codes in :data:`ALL_CODES`); empty when the value is fine.
    """
    if value is None:
        return []
    lint = _Linter(variable, value, suggest)
    program = _PROGRAMS.get(variable, variable)
    have = f"local interfaces: {_summary(names)}"
    example = f"one of: {_summary(names)}" if names else "e.g. ens1"
    if not single and len(value) <= 1:
        lint.add(
            "ifname-ignored-short",
            f"{lint.shown} is ignored: {program} uses it only when it is longer than one "
            "character, and otherwise binds to the address of the hostname (often loopback)",
            [], lint.fix(f"write the interface name in full, {example}"),
        )
        return lint.findings
    if value[:1] in ("^", "=") or any(p[:1] in ("^", "=") for p in value.split(",")):
        lint.add(
            "ifname-nccl-syntax",
            f"{lint.shown}: {program} does not support NCCL filter syntax ('^', '=', prefixes); "
            "it needs exact interface names",
            [f"{program} reports: Unable to find address for: {_split_getline(value)[0]}"],
            lint.fix(f"name the interface exactly, {example}"),
        )
        return lint.findings
    if single and "," in value:
        lint.add(
            "ifname-multiple",
            f"{lint.shown}: {variable} takes exactly one interface name",
            [f"{program} looks up an interface literally named {value!r}"],
            lint.fix(f"keep one name, {example}"),
        )
        return lint.findings
    chosen: list[str] = []
    for piece in [value] if single else _split_getline(value):
        ip = _as_ip(piece) if piece else None
        if ip is not None:
            name = _owner_of(ip, owner)
            lint.add(
                "ifname-ip-address",
                f"{lint.shown}: {piece!r} is an IP address; {variable} takes interface names"
                + (f" (did you mean {name}?)" if name else ""),
                [f"{ip} is held by {name}"] if name else [],
                _fix(variable, lint.suggest or name, f"name the interface that holds {ip}"),
            )
        elif names and piece not in names:
            prefixed = [n for n in names if piece and n.startswith(piece)]
            detail = [f"{piece!r} is a prefix of {_summary(prefixed)}; {program} does not "
                      "match prefixes"] if prefixed else []
            what = f"no interface named {piece!r}" if piece else "an empty interface name"
            lint.add(
                "ifname-no-such-interface",
                f"{lint.shown}: {what} ({program} needs exact names)",
                [*detail, have],
                lint.fix(f"name an existing interface, {example}"),
            )
        else:
            chosen.append(piece)
    bad = [(n, avoid[n]) for n in chosen if avoid and n in avoid]
    if bad:
        listed = ", ".join(f"{n} ({why})" for n, why in bad)
        lint.add(
            "filter-selects-avoided", f"{lint.shown} selects {listed}", [have],
            lint.fix(f"name the cluster interface instead, {example}"),
        )
    return lint.findings
