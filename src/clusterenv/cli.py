"""The ``clusterenv`` command line: one verb per module in :mod:`clusterenv._cli`.

Each verb module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Only the chosen verb's heavy imports are paid for. Exit codes: 0 fine, 1 problems found,
2 the command could not do its job (bad usage, unreadable host, bad environment, a closed or full
output stream). A reader that leaves a pipe early (``clusterenv doctor | head -1``) ends the
command as ``SIGPIPE`` conventionally does (status 141), never as a success. Whatever goes wrong,
the command says so in one line on stderr (while stderr is open), never with a traceback, and
every line it writes passes the terminal sanitiser (:mod:`clusterenv._text`).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from clusterenv import __version__
from clusterenv._text import printable, terminal_line
from clusterenv.errors import ClusterEnvError

__all__ = ["EXIT_BROKEN_PIPE", "VERBS", "build_parser", "main"]

#: Verb name -> module under clusterenv._cli.
VERBS: dict[str, str] = {
    "show": "show",
    "doctor": "doctor",
    "env": "env",
    "capture": "capture",
    "nccl-log": "nccl_log",
    "launch": "launch",
    "preflight": "preflight",
}

#: Exit status when the reader of stdout went away (128 + SIGPIPE, what a shell shows when a
#: process dies of SIGPIPE).
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every verb registered."""
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
    for verb, module_name in VERBS.items():
        module = importlib.import_module(f"clusterenv._cli.{module_name}")
        sub = verbs.add_parser(verb, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


class _SafeStream:
    """A text stream whose every write passes :func:`~clusterenv._text.terminal_line`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(terminal_line(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _say(verb: str, message: str) -> None:
    """One line on stderr, when stderr is still open."""
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        stream.write(f"clusterenv {verb}: {printable(message, newlines=True)}\n")
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
    parser = build_parser()
    args = parser.parse_args(argv)
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
    sys.stdout = _SafeStream(saved[0])
    if saved[1] is not None:
        sys.stderr = _SafeStream(saved[1])
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
        root = getattr(args, "_root", None)
        for note in getattr(root, "notes", ()):
            _say(verb, f"note: {note}")
    return code
