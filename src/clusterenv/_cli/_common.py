"""Helpers shared by the CLI verbs: common options, the host to read, and output."""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

from clusterenv._cli._json import dumps
from clusterenv._jsonable import to_jsonable
from clusterenv._root import Root
from clusterenv._scrub import HIDDEN, is_secret_name
from clusterenv._text import printable
from clusterenv.findings import Finding, sort_findings

__all__ = [
    "add_json",
    "add_nccl_version",
    "add_no_nccl",
    "add_plan_options",
    "add_root",
    "add_source",
    "emit_json",
    "host_context",
    "render_findings",
    "style",
    "table",
    "whole_number",
]


def add_root(parser: argparse.ArgumentParser) -> None:
    """``--root DIR``: read a host snapshot instead of this host."""
    parser.add_argument(
        "--root",
        metavar="DIR",
        default=None,
        help="read a host snapshot (the directory or the .tar.gz file `clusterenv capture` "
        "wrote) instead of this host; its recorded environment is used when it has one",
    )


def add_source(parser: argparse.ArgumentParser) -> None:
    """``--source NAME``: force an environment source, as ``CLUSTERENV_SOURCE`` does."""
    from clusterenv.sources import SOURCE_NAMES

    parser.add_argument(
        "--source",
        metavar="NAME",
        choices=SOURCE_NAMES,
        default=None,
        help="read the cluster contract as this source instead of detecting it (sets "
        f"CLUSTERENV_SOURCE for this command): {', '.join(SOURCE_NAMES)}",
    )


def add_json(parser: argparse.ArgumentParser) -> None:
    """``--json``: one JSON object on stdout, nothing else."""
    parser.add_argument("--json", action="store_true", help="print one JSON object, nothing else")


def add_no_nccl(parser: argparse.ArgumentParser) -> None:
    """``--no-nccl``: do not ask the NCCL library for its bootstrap interface."""
    parser.add_argument(
        "--no-nccl", action="store_true",
        help="do not ask libnccl.so.2 which interface it bootstraps on (a subprocess of about "
        "0.1 s); use clusterenv's prediction only. CLUSTERENV_NCCL_LIBRARY=none does the same",
    )


def add_nccl_version(parser: argparse.ArgumentParser) -> None:
    """``--nccl-version VERSION``, as the ``nccl_version=`` of the Python entry points."""
    parser.add_argument(
        "--nccl-version", metavar="VERSION",
        help="assume this NCCL version (e.g. 2.19.3) instead of detecting it; it decides, for "
        "example, whether NCCL_IB_GID_INDEX is needed on RoCE",
    )


def add_plan_options(parser: argparse.ArgumentParser, *, debug_help: str | None = None) -> None:
    """``--override`` and ``--debug``, as ``apply_nccl_defaults`` takes them; ``debug_help``
    says what else ``--debug`` does in this verb."""
    parser.add_argument(
        "--override", action="store_true",
        help="replace NCCL/Gloo values you set that differ from the evidenced ones",
    )
    parser.add_argument(
        "--debug", action="store_true",
        help=debug_help or "also set NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET when unset",
    )


def host_context(args: argparse.Namespace) -> tuple[dict[str, str], Root]:
    """The environment and root a verb reads: the snapshot's (with its recorded environment)
    under ``--root`` (a directory, or an archive unpacked until the command ends), else this
    process's environment and ``/``; ``--source NAME`` adds ``CLUSTERENV_SOURCE=NAME`` to it."""
    root_dir = getattr(args, "root", None)
    if root_dir is not None and os.path.exists(root_dir) and not os.path.isdir(root_dir):
        from clusterenv._cli._archive import open_archive

        root, args._cleanup = open_archive(root_dir)  # the CLI calls it when the verb ends
    else:
        root = Root(root_dir or "/")
    args._root = root  # the CLI prints what reading it skipped (Root.notes)
    environ = dict(os.environ)
    if root_dir is not None:
        recorded = root.recorded_environ()
        if recorded is not None:
            environ = dict(recorded)
    forced = getattr(args, "source", None)
    if forced:
        environ["CLUSTERENV_SOURCE"] = forced
        # What the library then says was forced by the variable, the user forced with --source.
        spellings = getattr(args, "_spellings", None)
        if isinstance(spellings, dict):
            spellings[f"CLUSTERENV_SOURCE={forced}"] = f"--source {forced}"
    return environ, root


def emit_json(data: Any, stream: TextIO | None = None, *, compact: bool = False,
              converted: bool = False) -> None:
    """Print ``data`` as indented JSON (dataclasses and models become objects), secrets
    scrubbed (:func:`~clusterenv._scrub.scrub_tree`).

    ``compact`` prints it on one line, encoded by the json module's C encoder (for large
    outputs such as a log of thousands of processes); what it prints is the same data.
    ``converted`` says that ``data`` is JSON data already (what ``to_dict()`` returns), so it
    is not converted again.
    """
    out = stream or sys.stdout
    out.write(dumps(data if converted else to_jsonable(data), compact=compact) + "\n")


_COLOURS = {"red": "31", "yellow": "33", "green": "32", "blue": "34", "bold": "1", "dim": "2"}


def style(text: str, colour: str, stream: TextIO | None = None) -> str:
    """``text`` in ``colour`` when writing to a terminal and ``NO_COLOR`` is unset."""
    out = stream or sys.stdout
    if os.environ.get("NO_COLOR") or not getattr(out, "isatty", lambda: False)():
        return text
    return f"\033[{_COLOURS[colour]}m{text}\033[0m"


def _scrub_row(row: Sequence[object]) -> list[object]:
    """A row with every cell after a secret-looking variable name (``NCCL_IB_KEY``,
    ``SLURM_JWT``) hidden: a table of settings shows that it was set, never its value."""
    cells = list(row)
    for i, cell in enumerate(cells):
        if isinstance(cell, str) and _VARIABLE.fullmatch(cell) and is_secret_name(cell):
            return [*cells[: i + 1], *(HIDDEN if c is not None else None for c in cells[i + 1:])]
    return cells


_VARIABLE = re.compile(r"[A-Z][A-Z0-9_]*")


#: The width of output that does not go to a terminal (a log, a pipe, a CI job).
NOT_A_TERMINAL_WIDTH = 160


def output_width(stream: TextIO | None = None) -> int:
    """The columns to wrap output at: the terminal's width (at least 60), or
    :data:`NOT_A_TERMINAL_WIDTH` when ``stream`` is not a terminal."""
    out = stream or sys.stdout
    try:
        if out.isatty():
            return max(60, os.get_terminal_size(out.fileno()).columns)
    except (AttributeError, OSError, ValueError):
        pass
    return NOT_A_TERMINAL_WIDTH


def wrap(text: str, width: int, indent: str = "", first: str = "") -> list[str]:
    """``first + text`` folded at spaces to ``width`` columns, continuation lines indented by
    ``indent``; a word longer than a line (a path, an address list) is never cut."""
    return textwrap.wrap(text, width=width, initial_indent=first, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def table(rows: Iterable[Sequence[object]], headers: Sequence[str], *,
          width: int | None = None) -> str:
    """A plain-text table with aligned columns; every cell passes the terminal sanitiser, and
    the values of a secret-looking variable are hidden (:func:`_scrub_row`). A row wider than
    ``width`` (:func:`output_width` by default) has its widest cells folded onto more lines."""
    limit = output_width() if width is None else width
    body = [[("-" if cell is None else printable(cell)) for cell in _scrub_row(row)]
            for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    while sum(widths) + 2 * (len(widths) - 1) > limit:
        widest = max(range(len(widths)), key=lambda i: widths[i])
        room = widths[widest] - (sum(widths) + 2 * (len(widths) - 1) - limit)
        if room < max(12, len(headers[widest])):
            break
        widths[widest] = room
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    for row in body:
        cells = [wrap(c, widths[i]) if len(c) > widths[i] else [c] for i, c in enumerate(row)]
        for k in range(max(len(c) for c in cells)):
            parts = [(c[k] if k < len(c) else "").ljust(widths[i]) for i, c in enumerate(cells)]
            lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


_SEVERITY_COLOUR = {"error": "red", "warning": "yellow", "info": "blue"}


def render_findings(findings: Iterable[Finding], stream: TextIO | None = None) -> str:
    """Findings for people: severity and code, title, evidence and fix, errors first, folded
    to the output's width (:func:`output_width`). Evidence already shown for an earlier finding
    of the report is not repeated (``--json`` keeps it all)."""
    ordered = sort_findings(findings)
    if not ordered:
        return style("no problems found", "green", stream)
    width = output_width(stream)
    shown: set[str] = set()
    blocks = []
    pad = " " * 8
    for f in ordered:
        head = f"{f.severity.upper():7} [{printable(f.code)}] "
        lines = wrap(printable(f.title), width, pad, head)
        lines[0] = lines[0].replace(f"{f.severity.upper():7}",
                                    style(f"{f.severity.upper():7}", _SEVERITY_COLOUR[f.severity],
                                          stream), 1)
        for item in f.evidence:
            text = printable(item)
            if text in shown:
                continue
            shown.add(text)
            lines += wrap(text, width, pad + "  ", f"{pad}evidence: ")
        if f.fix:
            lines += wrap(printable(f.fix), width, pad + "  ", f"{pad}fix: ")
        blocks.append("\n".join(lines))
    counts: Mapping[str, int] = {
        s: sum(1 for f in ordered if f.severity == s) for s in ("error", "warning", "info")
    }
    summary = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
    return "\n".join(blocks) + "\n\n" + summary


def whole_number(minimum: int, expected: str) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number of at least ``minimum``; ``expected`` ends the
    message for a smaller one, e.g. ``"expected at least 1 process per node"``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value}: {expected}")
        return value

    return parse


def seconds_up_to(limit: float, *, zero: bool = False) -> Callable[[str], float]:
    """An argparse ``type`` for seconds above 0 (or from 0, with ``zero``) up to ``limit``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        above = value >= 0 if zero else value > 0
        if not above or not value <= limit:  # NaN is neither
            raise argparse.ArgumentTypeError(f"{text!r}: expected seconds between 0 and "
                                             f"{limit:g}")
        return value

    return parse


def tcp_port(text: str) -> int:
    """An argparse ``type`` for a TCP port, 1-65535."""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a TCP port 1-65535")
    return int(text)
