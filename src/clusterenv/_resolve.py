"""Host names resolved the way the job will resolve them, with a deadline and never a hang.

torchrun's store client, Gloo and TensorPipe resolve names with the system resolver
(``getaddrinfo``): ``/etc/hosts``, then DNS, as ``nsswitch.conf`` says. On the live host we ask
it too, in a daemon thread that is abandoned after a short deadline, so a missing or silent DNS
server costs at most the deadline and never blocks the exit. A host snapshot cannot ask the
resolver of the machine it came from: there only its ``/etc/hosts`` answers, and a name it does
not list is *unknown*, not unresolvable.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import Literal

__all__ = ["DEADLINE_S", "Resolution", "Status", "from_hosts", "system_resolve"]

#: How long the system resolver may take before the name counts as unknown (seconds).
DEADLINE_S = 2.0

#: ``resolved``: addresses found; ``unresolvable``: the resolver answered that the name does not
#: exist; ``unknown``: no answer within the deadline, or a snapshot without an entry.
Status = Literal["resolved", "unresolvable", "unknown"]

# getaddrinfo's "no such name" answers (EAI_NODATA is glibc's "no address for this name").
_NO_SUCH_NAME = frozenset(
    code for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None))
    if code is not None
)


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a host name resolves to, and how that was found out.

    Attributes:
        name: The name looked up, e.g. ``"node-0"``.
        addresses: The addresses in the resolver's order, each once, e.g. ``("172.20.0.10",)``.
        status: ``"resolved"``, ``"unresolvable"`` or ``"unknown"``.
        via: Where the answer came from, e.g. ``"the system resolver"`` or ``"/etc/hosts"``.
        error: Why there is no address, e.g. ``"Name or service not known"``; empty when
            resolved.
        failed: The resolver answered now with an error that is not "no such name" (no DNS
            server, ``EAI_AGAIN``): the name's existence is unknown, but a program resolving it
            now gets the same error (torch's Gloo then binds loopback).
    """

    name: str
    addresses: tuple[str, ...]
    status: Status
    via: str
    error: str = ""
    failed: bool = False

    def describe(self) -> str:
        """One line of evidence, e.g. ``"node-0 -> 172.20.0.10 (the system resolver)"``."""
        if self.addresses:
            return f"{self.name} -> {', '.join(self.addresses)} ({self.via})"
        return f"{self.name}: {self.error} ({self.via})"


def _unique(addresses: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(addresses))


def system_resolve(name: str, *, deadline: float = DEADLINE_S) -> Resolution:
    """Resolve ``name`` with ``getaddrinfo``, giving up after ``deadline`` seconds.

    The lookup runs in a daemon thread: when the deadline passes the thread is left to finish
    (or not) on its own, and the result is ``unknown``.
    """
    via = "the system resolver"
    outcome: dict[str, object] = {}

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
        except socket.gaierror as e:
            outcome["error"] = e
        except (OSError, UnicodeError, ValueError) as e:
            outcome["failed"] = e
        else:
            outcome["addresses"] = [str(info[4][0]).split("%", 1)[0] for info in infos]

    thread = threading.Thread(target=lookup, name="clusterenv-resolve", daemon=True)
    thread.start()
    thread.join(deadline)
    if thread.is_alive():
        return Resolution(name, (), "unknown", via, f"no answer within {deadline:g} s")
    addresses = outcome.get("addresses")
    if isinstance(addresses, list) and addresses:
        return Resolution(name, _unique(addresses), "resolved", via)
    error = outcome.get("error")
    if isinstance(error, socket.gaierror):
        # EAI_NONAME / EAI_NODATA: the resolver answered "no such name". EAI_AGAIN and the
        # rest (no server, a failure) say nothing certain about the name.
        certain = error.errno in _NO_SUCH_NAME
        return Resolution(name, (), "unresolvable" if certain else "unknown", via,
                          error.strerror or str(error), failed=not certain)
    failed = outcome.get("failed")
    return Resolution(name, (), "unknown", via, str(failed or "no address returned"),
                      failed=True)



def from_hosts(name: str, hosts: dict[str, list[str]], *, where: str) -> Resolution:
    """Resolve ``name`` from a parsed ``/etc/hosts`` (a snapshot's): a missing entry is
    ``unknown``, since the machine's DNS may still know the name.

    An IP address resolves to itself.
    """
    try:
        return Resolution(name, (str(ipaddress.ip_address(name)),), "resolved", "an IP address")
    except ValueError:
        pass
    addresses = hosts.get(name.lower().rstrip("."), [])
    if addresses:
        return Resolution(name, tuple(addresses), "resolved", where)
    return Resolution(name, (), "unknown", where,
                      f"not in {where}, and a snapshot cannot ask the machine's DNS")
