"""The ``clusterenv`` command line: one verb per module in :mod:`clusterenv._cli`.

Each verb module defines ``add_arguments(parser)`` and ``run(args) -> int``; its name and help
line are in :data:`VERBS`. Only the chosen verb's module is imported, so ``--version`` and
``--help`` import no verb module, pydantic, netifaces or typing.

Exit codes: 0 fine, 1 problems found, 2 the command could not do its job (bad usage, unreadable
host, bad environment, a closed or full output stream). A reader that leaves a pipe while
output is still to be written (``clusterenv show --json | head -1`` on a large host, ``... |
true``) ends the command as ``SIGPIPE`` conventionally does (status 141), never as a success;
output that was already in the pipe's buffer when the reader left ends as it would have.
Whatever goes wrong, the command says so in one line on stderr (while stderr is open), never
with a traceback, and every line it writes passes the terminal sanitiser
(:mod:`clusterenv._text`).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re  # argparse imports it anyway
import signal
import sys
from collections.abc import Iterable, Sequence

from clusterenv import __version__

# Not typing.TYPE_CHECKING: importing typing would slow down `clusterenv --version`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO
del TYPE_CHECKING

__all__ = ["EXIT_BROKEN_PIPE", "VERBS", "build_parser", "main"]

#: Verb name -> (its module under ``clusterenv._cli``, its one-line help). ``--version`` and
#: ``--help`` read only this table: a verb's module is imported when that verb runs.
VERBS: dict[str, tuple[str, str]] = {
    "show": ("show", "show the cluster contract, what this node has, and the NCCL/Gloo plan"),
    "doctor": ("doctor", "check this node and explain what will break the job (exit 1 on errors)"),
    "env": (
        "env", 'print the planned NCCL/Gloo settings as shell exports: eval "$(clusterenv env)"'
    ),
    "capture": (
        "capture",
        "write a host snapshot (no secrets, identifiers scrubbed) that --root DIR can replay",
    ),
    "nccl-log": (
        "nccl_log",
        "read an NCCL_DEBUG=INFO log: bootstrap interface, transport, HCAs, GPUDirect, fallbacks",
    ),
    "launch": (
        "launch", "apply the NCCL/Gloo plan, then run torchrun with this cluster's arguments"
    ),
    "preflight": (
        "preflight",
        "check the whole cluster at once: run on every node; names the node that differs",
    ),
    "bench": (
        "bench",
        "measure all-reduce and each node's link against the line rate; name slow nodes",
    ),
    "hang": (
        "hang",
        "read flight-recorder dumps: name the rank, node and collective where a job stopped",
    ),
}

#: Exit status when the reader of stdout went away (128 + SIGPIPE, what a shell shows when a
#: process dies of SIGPIPE).
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def build_parser(load: Iterable[str] | None = None, *,
                 only: bool = False) -> argparse.ArgumentParser:
    """The argument parser, with every verb registered (or those of ``load`` alone).

    Args:
        load: The verbs whose options are added (their modules imported); None: every verb.
            The others are listed with their help line only.
        only: Register the verbs of ``load`` alone (the command line names one: the others
            would cost their parsers for nothing).
    """
    parser = argparse.ArgumentParser(
        prog="clusterenv",
        description=(
            "Know the multi-node GPU cluster you run on, and configure NCCL, Gloo and torchrun "
            "before anything hangs."
        ),
    )
    parser.add_argument("--version", action="version", version=f"clusterenv {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    wanted = set(VERBS) if load is None else set(load)
    for name, (module_name, help_line) in VERBS.items():
        if only and name not in wanted:
            continue
        sub = verbs.add_parser(name, help=help_line, description=help_line)
        if name in wanted:
            import importlib  # noqa: PLC0415  # only when a verb runs

            module = importlib.import_module(f"clusterenv._cli.{module_name}")
            module.add_arguments(sub)
            sub.set_defaults(_run=module.run)
    return parser


def _chosen_verb(argv: Sequence[str]) -> str | None:
    """The verb in ``argv``: the first word that is not an option (the top level takes only
    ``--help`` and ``--version``, neither with a value)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in VERBS else None
    return None


class _SafeStream:
    """A text stream whose every write passes :func:`~clusterenv._scrub.scrub_text` (no
    secret is ever printed) and :func:`~clusterenv._text.terminal_line`.

    ``spellings`` maps what the library says to what the user typed: a verb that turns an
    option into a variable for the library (``--source runpod`` into
    ``CLUSTERENV_SOURCE=runpod``) adds the pair, so that the user reads back their own words.
    """

    def __init__(self, stream: TextIO, spellings: dict[str, str]) -> None:
        self._stream = stream
        self._spellings = spellings

    def write(self, text: str) -> int:
        from clusterenv._scrub import scrub_text  # noqa: PLC0415  # not for --version
        from clusterenv._text import terminal_line  # noqa: PLC0415

        shown = terminal_line(scrub_text(text))
        for library, typed in self._spellings.items():
            if library in shown:
                shown = re.sub(re.escape(library) + r"(?![\w.-])", typed, shown)
        self._stream.write(shown)
        return len(text)

    def unsanitised(self) -> TextIO:
        """The stream underneath, for a control sequence the caller composed itself around
        text it sanitised (preflight's progress line, redrawn in place on a terminal)."""
        return self._stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _say(verb: str, message: str) -> None:
    """One line on stderr, when stderr is still open, as ``clusterenv VERB: message`` (a
    message that already starts with ``clusterenv VERB`` does not get it twice)."""
    stream = sys.stderr
    if stream is None:
        return
    named = f"clusterenv {verb}"
    if message.startswith((f"{named} ", f"{named}:")):
        message = message[len(named):].lstrip(" :")
    from clusterenv._cli._common import output_width, wrap  # noqa: PLC0415  # not for --version
    from clusterenv._scrub import scrub_text  # noqa: PLC0415
    from clusterenv._text import printable  # noqa: PLC0415

    text = printable(scrub_text(message), newlines=True)
    width = output_width(stream)
    lines: list[str] = []
    for k, part in enumerate(text.split("\n")):  # a ConfigError lists one problem per line
        lead = f"clusterenv {verb}: " if k == 0 else part[: len(part) - len(part.lstrip())]
        lines += wrap(part.strip(), width, lead + "  " if k else "  ", lead)
    with contextlib.suppress(OSError, ValueError):
        stream.write("\n".join(lines) + "\n")
        stream.flush()


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush cannot fail again."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def _flush_stdout() -> None:
    if sys.stdout is not None:
        sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    chosen = _chosen_verb(words)
    parser = build_parser([]) if chosen is None else build_parser([chosen], only=True)
    args = parser.parse_args(words)
    from clusterenv.errors import ClusterEnvError  # noqa: PLC0415  # after --help/--version

    verb = str(args.verb)
    if sys.stdout is None:  # started with stdout closed (`clusterenv env >&-`)
        _say(verb, "standard output is closed; nothing can be written (exit 2)")
        return 2
    saved = sys.stdout, sys.stderr
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")  # a stray surrogate never crashes
    spellings: dict[str, str] = {}
    args._spellings = spellings  # filled by the verb (host_context: --source)
    sys.stdout = _SafeStream(saved[0], spellings)
    if saved[1] is not None:
        sys.stderr = _SafeStream(saved[1], spellings)
    try:
        code: int = args._run(args)
        _flush_stdout()
    except ClusterEnvError as e:
        _say(verb, str(e))
        code = 2
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # `clusterenv doctor | head -1`: the reader left. Not a success, and not worth a word.
        _silence_stdout()
        code = EXIT_BROKEN_PIPE
    except OSError as e:
        if e.errno == errno.EPIPE:
            _silence_stdout()
            code = EXIT_BROKEN_PIPE
        else:
            detail = e.strerror or str(e)
            if e.filename is not None:
                _say(verb, f"{e.filename!r}: {detail}")
            else:  # a full disk or closed descriptor under stdout, most often
                _say(verb, f"cannot write standard output: {detail}")
                _silence_stdout()
            code = 2
    finally:
        sys.stdout, sys.stderr = saved
        cleanup = getattr(args, "_cleanup", None)
        if cleanup is not None:  # a snapshot archive unpacked for --root
            cleanup()
        root = getattr(args, "_root", None)
        for note in getattr(root, "notes", ()):
            _say(verb, f"note: {note}")
    return code
