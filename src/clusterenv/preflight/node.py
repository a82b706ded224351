"""A node's side of preflight: reach the primary, send the fingerprint, wait for the verdict.

The primary may start later than the node (FM-36: the cluster network or rank 0 is not up yet),
so connecting is retried until the node's timeout. A connection opens with the node's nonce
(``OPEN``); the primary's ``HELLO`` answers with its own nonce and the seconds it will still
collect. How long the node then waits for its verdict:

- with ``CLUSTERENV_PREFLIGHT_TOKEN``, the ``HELLO`` must carry a MAC over the node's nonce, and
  the node waits as long as it announces (the primary may have started later), plus a margin;
- without a token, anybody who answers on the port could announce anything, so the announced
  time counts only up to this node's own ``--timeout``: the wait ends at the node's own deadline
  plus a margin (:func:`verdict_margin`), never an hour later because a stranger said so.

Every failure to complete is a
:class:`PreflightError` whose message names the primary's address and port and what to check.
"""

from __future__ import annotations

import contextlib
import errno
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clusterenv._text import clip
from clusterenv._values import format_host_port
from clusterenv.errors import ClusterEnvError
from clusterenv.preflight.fingerprint import TOKEN_VARIABLE, Fingerprint
from clusterenv.preflight.fit import fit_fingerprint
from clusterenv.preflight.options import PreflightOptions
from clusterenv.preflight.ring import (
    PROBE_TIMEOUT_S,
    RING_PHASE_S,
    RingListener,
    probe,
    read_frame,
)
from clusterenv.preflight.verdict import BOUNDS, Verdict
from clusterenv.preflight.wire import (
    Frame,
    FrameReader,
    Kind,
    Limits,
    WireError,
    decode_object,
    encode_frame,
    encode_json,
    new_nonce,
    verify_mac,
)

__all__ = ["PreflightError", "run_node", "verdict_margin"]

_CONNECT_ATTEMPT_S = 2.0
_RETRY_S = 0.25
# Seconds a node dropped before its verdict keeps trying to reconnect.
_REJOIN_S = 2.0
_MAX_WAIT_S = 3600.0
_MESSAGE_OVERHEAD = 512


def verdict_margin(limits: Limits, *, ring: bool) -> float:
    """Seconds a node waits for its verdict beyond the end of the primary's collection: what the
    primary does after it (the ring phase when asked for, then sending the verdict, each bounded
    in time), e.g. ``5.0``, or ``13.0`` with the ring."""
    return limits.send_timeout + (RING_PHASE_S + PROBE_TIMEOUT_S if ring else 0.0)


class PreflightError(ClusterEnvError, RuntimeError):
    """Preflight could not complete on this node (exit code 2): the primary never answered,
    refused this node, or answered with something that is not a valid verdict."""


@dataclass(frozen=True, slots=True)
class _Greeting:
    """An open connection and the primary's ``HELLO`` on it."""

    sock: socket.socket
    hello: dict[str, Any]
    frame: Frame
    nonce: bytes  # this node's nonce, sent in OPEN: the primary MACs its messages over it


def connect_primary(
    host: str, port: int, *, deadline: float, source_addr: str | None, limits: Limits,
    say: Callable[[str], None],
) -> _Greeting:
    """Connect (retrying until ``deadline``), send ``OPEN`` and read the primary's ``HELLO``."""
    where = format_host_port(host, port)
    last = "no attempt finished"
    attempts = 0
    source: tuple[str, int] | None = (source_addr, 0) if source_addr else None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PreflightError(
                f"no answer from the primary at {where} after {attempts} attempts "
                f"(last: {last}). Check that `clusterenv preflight` runs on the primary (the node "
                "that holds PRIMARY_ADDR, NODE_RANK 0) within the same time window, that "
                f"PRIMARY_ADDR is right, that TCP port {port} is open between the nodes, and that "
                "every node uses the same --port"
            )
        attempts += 1
        start = time.monotonic()
        try:
            sock = socket.create_connection(
                (host, port), timeout=min(_CONNECT_ATTEMPT_S, remaining), source_address=source
            )
        except OSError as e:
            if source is not None and e.errno == errno.EADDRNOTAVAIL:
                source = None  # NODE_ADDR is not on this host: doctor reports it; go unbound
                continue
            last = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
            say(f"waiting for the primary at {where} ({last}), "
                f"{max(0.0, deadline - time.monotonic()):.0f} s left")
            time.sleep(min(_RETRY_S, max(0.0, deadline - time.monotonic())))
            continue
        nonce = new_nonce()
        reader = FrameReader(max_payload=limits.max_message_bytes, expect={Kind.HELLO})
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(encode_frame(Kind.OPEN, encode_json({"nonce": nonce.hex()})))
            # A busy primary greets late: wait up to this node's own deadline (--timeout 1
            # means about a second), not a fixed few seconds.
            frame = read_frame(sock, reader, deadline)
            hello = decode_object(frame.payload)
        except EOFError:  # the primary was at its connection limit, or just closing: retry
            sock.close()
            last = "the connection was closed before the primary's greeting"
            time.sleep(min(_RETRY_S, max(0.0, deadline - time.monotonic())))
            continue
        except TimeoutError as e:
            sock.close()
            raise PreflightError(
                f"something accepted the connection at {where} but sent no preflight greeting "
                f"within {max(deadline - start, 0.0):.1f} s: another program may own port "
                f"{port}; "
                "choose another --port on every node"
            ) from e
        except WireError as e:
            sock.close()
            raise PreflightError(
                f"{where} does not speak clusterenv preflight ({e}): another program owns port "
                f"{port}, or the primary runs another clusterenv release"
            ) from e
        except OSError as e:  # reset before the greeting: retry, paced like the others
            sock.close()
            last = e.strerror or str(e)
            time.sleep(min(_RETRY_S, max(0.0, deadline - time.monotonic())))
            continue
        return _Greeting(sock, hello, frame, nonce)


def run_node(
    fingerprint: Fingerprint,
    *,
    primary_addr: str,
    port: int,
    options: PreflightOptions,
    source_addr: str | None = None,
) -> Verdict:
    """Send ``fingerprint`` to the primary and return its verdict.

    Args:
        fingerprint: This node's fingerprint.
        primary_addr: e.g. ``"10.65.0.2"``.
        port: The preflight port, e.g. ``29501``.
        options: Its ``timeout`` (seconds to keep trying to reach the primary), ``token`` and
            ``limits``; ``ring`` is the primary's to decide.
        source_addr: Bind the connection to this local address (the node's ``NODE_ADDR``), so
            it leaves through the cluster interface; ignored when the address is not local.

    Raises:
        PreflightError: With what failed and what to check.
    """
    where = format_host_port(primary_addr, port)
    deadline = time.monotonic() + options.timeout
    # Room for the rest of the message (the ring listener's address): the primary refuses a
    # message over its limit, so an honest node's fingerprint is fitted to it beforehand.
    fingerprint = fit_fingerprint(
        fingerprint, options.limits.max_message_bytes - _MESSAGE_OVERHEAD,
        lambda fp: len(encode_json({"fingerprint": fp.to_wire()})))
    dropped: _Dropped | None = None
    while True:
        # After a drop, a primary that still runs takes the node back at once; one that
        # stopped refuses at once: a short window, then the drop is the answer.
        until = deadline if dropped is None else min(deadline, time.monotonic() + _REJOIN_S)
        try:
            return _attempt(fingerprint, where=where, primary_addr=primary_addr, port=port,
                            connect_by=until, own_deadline=deadline, options=options,
                            source_addr=source_addr)
        except _Dropped as e:
            # Closed before the verdict with no reason given: the primary made room for other
            # connections. Reconnect; the primary counts a reconnected node once.
            if time.monotonic() + _RETRY_S >= deadline:
                raise PreflightError(str(e)) from e
            dropped = e
            time.sleep(_RETRY_S)
        except PreflightError as e:
            if dropped is not None and str(e).startswith("no answer from the primary"):
                raise PreflightError(f"{dropped}; reconnecting found no primary") from e
            raise


class _Dropped(Exception):
    """The connection ended before a verdict, without a refusal: worth reconnecting."""


def _attempt(
    fingerprint: Fingerprint,
    *,
    where: str,
    primary_addr: str,
    port: int,
    connect_by: float,
    own_deadline: float,
    options: PreflightOptions,
    source_addr: str | None,
) -> Verdict:
    token, limits = options.token, options.limits
    greeting = connect_primary(primary_addr, port, deadline=connect_by, source_addr=source_addr,
                        limits=limits, say=options.say)
    sock, hello, my_nonce = greeting.sock, greeting.hello, greeting.nonce
    ring: RingListener | None = None
    try:
        primary_nonce = trust_greeting(greeting, where=where, port=port, token=token,
                                       limits=limits, unsent="this node's fingerprint")
        until, wait_text = verdict_deadline(hello, own_deadline=own_deadline,
                                             trusted=token is not None, limits=limits,
                                             timeout=options.timeout)
        body: dict[str, Any] = {"fingerprint": fingerprint.to_wire()}
        if hello.get("ring") is True:
            local = str(sock.getsockname()[0])
            with contextlib.suppress(OSError):
                ring = RingListener(local, port)
                body["ring"] = {"addr": ring.addr, "port": ring.port}
        sock.settimeout(limits.send_timeout)
        sock.sendall(encode_frame(Kind.FINGERPRINT, encode_json(body), token=token,
                                  nonce=primary_nonce))
        options.say(f"waiting for the verdict from {where} (the primary collects for up to "
                    f"{max(0.0, until - time.monotonic()):.0f} s)")
        reader = FrameReader(max_payload=limits.max_verdict_bytes,
                             expect={Kind.VERDICT, Kind.REJECT, Kind.RING})
        answered_ring = False
        while True:
            try:
                frame = read_frame(sock, reader, until)
            except TimeoutError as e:
                raise PreflightError(
                    f"the primary at {where} took this node's fingerprint but sent no verdict "
                    f"{wait_text}"
                ) from e
            except EOFError as e:
                message = (f"the primary at {where} closed the connection without a verdict (it "
                           "stopped, or was interrupted); its own output says why")
                if answered_ring:
                    raise PreflightError(message) from e
                raise _Dropped(message) from e
            if frame.kind == Kind.REJECT:
                reason = decode_object(frame.payload).get("reason", "no reason given")
                raise PreflightError(f"the primary at {where} refused this node: "
                                     f"{clip(str(reason), 300)}")
            if token is not None and not verify_mac(frame, token=token, nonce=my_nonce):
                raise PreflightError(
                    f"the {Kind.NAMES[frame.kind]} from {where} is not authenticated with this "
                    f"node's {TOKEN_VARIABLE}: set the same token on every node (or on none); "
                    "an unauthenticated verdict is not trusted"
                )
            # The most objects a verdict within its bounds has: decoding stops beyond it.
            body = decode_object(frame.payload, max_objects=BOUNDS.objects)
            if frame.kind == Kind.VERDICT:
                return Verdict.from_wire(body)
            _answer_ring(sock, body, rank=fingerprint.rank, token=token, nonce=primary_nonce,
                         limits=limits)
            answered_ring = True
    except WireError as e:
        raise PreflightError(f"bad message from the primary at {where}: {e}") from e
    except (ConnectionResetError, BrokenPipeError) as e:
        raise _Dropped(f"lost the connection to the primary at {where}: "
                       f"{e.strerror or e}") from e
    except OSError as e:
        raise PreflightError(
            f"lost the connection to the primary at {where}: {e.strerror or e}"
        ) from e
    finally:
        sock.close()
        if ring is not None:
            ring.close()


def refuse_primary(sock: socket.socket, reason: str, limits: Limits) -> None:
    """Tell the primary why this node goes (best effort): its verdict then names the reason."""
    with contextlib.suppress(OSError):
        sock.settimeout(limits.send_timeout)
        sock.sendall(encode_frame(Kind.REJECT, encode_json({"reason": reason})))


def trust_greeting(greeting: _Greeting, *, where: str, port: int, token: bytes | None,
                   limits: Limits, unsent: str) -> bytes:
    """The primary's nonce from its ``HELLO``, once the greeting is well formed and, when this
    node has a token, authenticated with it; else the primary is told why (best effort) and a
    :class:`PreflightError` says so, naming what was not sent (``unsent``): nothing of this
    node goes to a primary that does not prove it holds the same token."""
    hello, sock = greeting.hello, greeting.sock
    nonce_hex, auth = hello.get("nonce"), hello.get("auth")
    if not isinstance(nonce_hex, str) or len(nonce_hex) != 32 or not isinstance(auth, bool):
        raise PreflightError(f"the primary at {where} sent a malformed greeting")
    try:
        primary_nonce = bytes.fromhex(nonce_hex)
    except ValueError as e:
        raise PreflightError(f"the primary at {where} sent a malformed greeting") from e
    if token is not None and not auth:
        refuse_primary(sock, f"this node has {TOKEN_VARIABLE} set and the primary does not",
                       limits)
        raise PreflightError(
            f"the primary at {where} does not use {TOKEN_VARIABLE}, but this node has it "
            f"set: set the same token on every node (or on none); {unsent} was not sent"
        )
    if token is not None and not verify_mac(greeting.frame, token=token, nonce=greeting.nonce):
        refuse_primary(sock, "its greeting is not authenticated with this node's "
                       f"{TOKEN_VARIABLE} (the tokens differ)", limits)
        raise PreflightError(
            f"the greeting from {where} is not authenticated with this node's "
            f"{TOKEN_VARIABLE}: the primary's token differs (set the same token on every "
            f"node), or another program answers on port {port}; {unsent} was not sent"
        )
    return primary_nonce


def verdict_deadline(
    hello: dict[str, Any], *, own_deadline: float, trusted: bool, limits: Limits, timeout: float
) -> tuple[float, str]:
    """When to stop waiting for the verdict, and the words that say why at that moment.

    The announced seconds move the deadline beyond this node's own only when ``trusted`` (a
    ``HELLO`` MACed over this node's nonce); otherwise the node's own deadline caps them.
    """
    now = time.monotonic()
    announced = hello.get("timeout_s")
    primary_s = own_deadline - now
    if isinstance(announced, (int, float)) and not isinstance(announced, bool) \
            and math.isfinite(announced):
        primary_s = float(announced)
    primary_s = min(max(primary_s, 0.0), _MAX_WAIT_S)
    margin = verdict_margin(limits, ring=hello.get("ring") is True)
    if trusted:
        return now + primary_s + margin, f"within {primary_s + margin:.0f} s; its own output " \
            "says why"
    until = min(now + primary_s, own_deadline) + margin
    if now + primary_s <= own_deadline:
        return until, f"within {until - now:.0f} s; its own output says why"
    return until, (
        f"within this node's --timeout ({timeout:g} s) and {margin:g} s more, although it "
        f"announced it would collect for {primary_s:.0f} s: without {TOKEN_VARIABLE} a node "
        "does not wait beyond its own --timeout (anybody may answer on the port). Start every "
        "node with the same --timeout, or set the same token on every node"
    )


def _answer_ring(sock: socket.socket, body: dict[str, Any], *, rank: int | None,
                 token: bytes | None, nonce: bytes, limits: Limits) -> None:
    target = body.get("target")
    if not isinstance(target, dict):
        raise WireError("ring message without a target")
    addr, port = target.get("addr"), target.get("port")
    if not isinstance(addr, str) or not isinstance(port, int) or not 0 < port < 65536:
        raise WireError("ring target must have 'addr' and 'port'")
    ok, detail = probe(addr, port, rank=rank, timeout=PROBE_TIMEOUT_S)
    result = encode_json({"ok": ok, "detail": detail[:500]})
    sock.settimeout(limits.send_timeout)
    sock.sendall(encode_frame(Kind.RING_RESULT, result, token=token, nonce=nonce))
