"""Interface layouts built in network namespaces, and the oracle that asks NCCL inside them.

A :class:`Layout` is a list of interfaces in creation order (so interface indexes follow the
list), each an ``ifb`` device (carrier as soon as it is up), a ``veth`` whose peer sits down in a
sink namespace (up without carrier), a ``veth`` whose peer is up (carrier), or a bridge; with
IPv4 and IPv6 addresses, up or down. IPv6 addresses are added without duplicate address
detection and interfaces get no automatic link-local address, so what NCCL sees does not change
while a test runs.

:class:`Oracle` runs ``tests/scripts/nccl_bootstrap_oracle.py`` inside the namespace: our
prediction of NCCL's bootstrap interface and NCCL's own answer, for many values per request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any, Literal

from tests.simcluster import _cmd, _tool

Kind = Literal["ifb", "veth", "veth-carrier", "bridge"]
ORACLE = Path(__file__).parent / "scripts" / "nccl_bootstrap_oracle.py"
_SERIAL = count()


@dataclass(frozen=True)
class Iface:
    """One interface of a layout, e.g. ``Iface("ens1", "veth-carrier", True, ("10.65.0.2/24",))``.

    Attributes:
        name: The interface name.
        kind: What device it is (see the module docstring).
        up: Administratively up.
        addresses: CIDR addresses, IPv4 and IPv6.
        labelled: IPv4 CIDR addresses added with a label (``eth0:1``, as ifupdown aliases and
            keepalived do), which ``getifaddrs`` reports under the label's name.
    """

    name: str
    kind: Kind = "ifb"
    up: bool = True
    addresses: tuple[str, ...] = ()
    labelled: tuple[str, ...] = ()


@dataclass(frozen=True)
class Layout:
    """Interfaces in creation order, and whether ``lo`` is up (then it has 127.0.0.1 and ::1)."""

    interfaces: tuple[Iface, ...]
    lo_up: bool = True
    routes: tuple[str, ...] = field(default=())

    def batch(self, sink: str) -> tuple[str, str]:
        """``ip -batch`` text for the namespace and for the sink namespace of veth peers."""
        lines: list[str] = []
        sink_lines: list[str] = []
        if self.lo_up:
            lines.append("link set lo up")
        for i, iface in enumerate(self.interfaces):
            if iface.kind == "ifb":
                lines.append(f"link add name {iface.name} type ifb")
            elif iface.kind == "bridge":
                lines.append(f"link add name {iface.name} type bridge")
            else:
                lines.append(f"link add name {iface.name} type veth peer name p{i} netns {sink}")
                if iface.kind == "veth-carrier":
                    sink_lines.append(f"link set dev p{i} up")
            lines.append(f"link set dev {iface.name} addrgenmode none")
            if iface.up:
                lines.append(f"link set dev {iface.name} up")
            for address in iface.addresses:
                extra = " nodad" if ":" in address else ""
                lines.append(f"address add {address} dev {iface.name}{extra}")
            for k, address in enumerate(iface.labelled):
                lines.append(f"address add {address} dev {iface.name} label {iface.name}:{k}")
        lines.extend(f"route add {route}" for route in self.routes)
        return "\n".join(lines) + "\n", "\n".join(sink_lines) + "\n"


class Oracle:
    """A namespace with ``layout`` built and the oracle script running in it."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        tag = f"ce16-{os.getpid()}-{next(_SERIAL)}"
        self.ns, self.sink = tag, tag + "-sink"
        self._ip = _tool("ip")
        self.proc: subprocess.Popen[str] | None = None
        _cmd([self._ip, "netns", "add", self.ns])
        try:
            _cmd([self._ip, "netns", "add", self.sink])
            main, sink = layout.batch(self.sink)
            self._batch(self.ns, main)
            self._batch(self.sink, sink)
            self.proc = subprocess.Popen(  # our own script
                [self._ip, "netns", "exec", self.ns, sys.executable, str(ORACLE)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env={k: v for k, v in os.environ.items()
                                if not k.startswith(("NCCL_", "CLUSTERENV_"))},
            )
        except BaseException:
            self.close()
            raise

    def _batch(self, ns: str, text: str) -> None:
        if not text.strip():
            return
        proc = subprocess.run([self._ip, "-n", ns, "-batch", "-"], input=text, text=True,
                              capture_output=True, check=False, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"building {self.layout} failed: {proc.stderr.strip()}")

    def ask(self, cases: Sequence[Sequence[str | None]]) -> list[dict[str, Any]]:
        """``[(NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY[, NCCL_COMM_ID]), ...]`` (None: unset) ->
        one result per case."""
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"cases": list(cases)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"the oracle died: {err[-2000:]}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        results: list[dict[str, Any]] = reply["results"]
        return results

    def close(self) -> None:
        """Stop the oracle and delete both namespaces."""
        if self.proc is not None:
            if self.proc.stdin:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream:
                    stream.close()
        for ns in (self.ns, self.sink):
            subprocess.run([self._ip, "netns", "del", ns], capture_output=True, check=False)

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def disagreements(
    cases: Sequence[Sequence[str | None]], results: Sequence[dict[str, Any]]
) -> Iterator[str]:
    """One line per case where our prediction and NCCL differ (or NCCL gave no answer);
    cases the model declares unpredictable (a host name in ``NCCL_COMM_ID``) are skipped."""
    for case, result in zip(cases, results, strict=True):
        if result["unpredictable"] is not None:
            continue
        if result["error"] is not None:
            yield f"{case}: NCCL gave no answer: {result['error']}"
        elif result["predicted"] != result["nccl"]:
            yield f"{case}: predicted {result['predicted']}, {result['by']} says {result['nccl']}"
