"""Suggested commands: every word that came from the host or the user is quoted for the shell.

A fix line is pasted into a shell. An interface may be named ``$(id>X)`` (Linux allows any
byte but ``/``, ``:`` and white space), a variable may hold ``; rm -rf ~``, and through
preflight one node's words reach every node's terminal. So commands are built from their words
here, once, and every word is passed through :func:`shlex.quote`; only a :class:`Placeholder`
(``<the cluster interface>``, text the user replaces and never pastes as it is) is shown
unquoted.

Example::

    command("ip", "link", "set", name, "up")   # "ip link set '$(id>X)' up"
    export("NCCL_SOCKET_IFNAME", name)         # "export NCCL_SOCKET_IFNAME='$(id>X)'"
"""

from __future__ import annotations

import re
import shlex

__all__ = ["Placeholder", "code", "command", "export", "prose", "quote"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Placeholder(str):
    """A part of a command the user fills in, e.g. ``Placeholder("<the cluster interface>")``:
    shown as it is, never quoted (it is not meant to be pasted as it stands)."""

    __slots__ = ()

    @classmethod
    def of(cls, template: str, **words: str) -> Placeholder:
        """``template`` with each ``{name}`` filled by the quoted word, e.g.
        ``Placeholder.of("<the address on {name}>", name="$(id>X)")`` is
        ``<the address on '$(id>X)'>``.

        Raises:
            ValueError: The template holds a straight apostrophe, which would end the quoting
                of a word after it if the line were pasted after all (a bug in clusterenv).
        """
        if "'" in template:
            raise ValueError(f"placeholder template {template!r} holds an apostrophe")
        return cls(template.format(**{key: quote(value) for key, value in words.items()}))


def quote(word: str) -> str:
    """One word for the shell: ``"ens1"`` stays ``ens1``, ``"$(id>X)"`` becomes
    ``'$(id>X)'``; a :class:`Placeholder` is returned as it is."""
    if isinstance(word, Placeholder):
        return str(word)
    return shlex.quote(str(word))


def prose(word: str) -> str:
    """A host-derived word inside a fix's prose (``bring ens1 up``): quoted like a command's
    word when it is not plain, so a line pasted whole runs nothing it names."""
    return quote(word)


def command(*words: str | int) -> str:
    """A command line from its words, each quoted, e.g. ``command("ethtool", "ens1")``."""
    return " ".join(quote(str(w)) if not isinstance(w, Placeholder) else str(w) for w in words)


def export(name: str, value: str | int) -> str:
    """``export NAME=VALUE`` with the value quoted, e.g. ``export NODE_RANK=1``.

    Raises:
        ValueError: ``name`` is not a shell variable name (a bug in clusterenv: names are ours).
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a shell variable name")
    return f"export {name}={quote(value if isinstance(value, str) else str(value))}"


def code(text: str) -> str:
    """A command inside prose, between backticks: ``code(command("ibstat", "mlx5_0", "1"))``
    is ``"`ibstat mlx5_0 1`"``."""
    return f"`{text}`"
