"""A node's side of preflight: reach the primary, send the fingerprint, wait for the verdict.

The primary may start later than the node (FM-36: the cluster network or rank 0 is not up yet),
so connecting is retried until the node's timeout. Once connected, the node waits as long as the
primary's ``HELLO`` announces, whatever its own timeout. Every failure to complete is a
:class:`PreflightError` whose message names the primary's address and port and what to check.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import time
from typing import Any

from clusterenv._text import clip
from clusterenv._values import format_host_port
from clusterenv.errors import ClusterEnvError
from clusterenv.preflight.fingerprint import TOKEN_VARIABLE, Fingerprint
from clusterenv.preflight.options import PreflightOptions
from clusterenv.preflight.ring import PROBE_TIMEOUT_S, RingListener, probe, read_frame
from clusterenv.preflight.verdict import Verdict
from clusterenv.preflight.wire import (
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

__all__ = ["PreflightError", "run_node"]

_CONNECT_ATTEMPT_S = 2.0
_RETRY_S = 0.25
# Seconds a node dropped before its verdict keeps trying to reconnect.
_REJOIN_S = 2.0
# Extra seconds a node waits beyond the primary's announced deadline: the ring phase and
# delivering the verdict come after it.
_VERDICT_MARGIN_S = 15.0
_MAX_WAIT_S = 3600.0


class PreflightError(ClusterEnvError, RuntimeError):
    """Preflight could not complete on this node (exit code 2): the primary never answered,
    refused this node, or answered with something that is not a valid verdict."""


def _connect(
    host: str, port: int, *, deadline: float, source_addr: str | None, limits: Limits
) -> tuple[socket.socket, dict[str, Any]]:
    """Connect (retrying until ``deadline``) and read the primary's ``HELLO``."""
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
            time.sleep(min(_RETRY_S, max(0.0, deadline - time.monotonic())))
            continue
        reader = FrameReader(max_payload=limits.max_message_bytes, expect={Kind.HELLO})
        # Never past this node's own deadline (--timeout 1 means about a second).
        greeting_by = min(time.monotonic() + limits.peer_timeout, deadline)
        try:
            frame = read_frame(sock, reader, greeting_by)
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
                f"within {max(greeting_by - start, 0.0):.1f} s: another program may own port "
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
        return sock, hello


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
    dropped: _Dropped | None = None
    while True:
        # After a drop, a primary that still runs takes the node back at once; one that
        # stopped refuses at once: a short window, then the drop is the answer.
        until = deadline if dropped is None else min(deadline, time.monotonic() + _REJOIN_S)
        try:
            return _attempt(fingerprint, where=where, primary_addr=primary_addr, port=port,
                            deadline=until, token=options.token, source_addr=source_addr,
                            limits=options.limits)
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
    deadline: float,
    token: bytes | None,
    source_addr: str | None,
    limits: Limits,
) -> Verdict:
    sock, hello = _connect(primary_addr, port, deadline=deadline,
                           source_addr=source_addr, limits=limits)
    ring: RingListener | None = None
    try:
        nonce_hex, auth = hello.get("nonce"), hello.get("auth")
        if not isinstance(nonce_hex, str) or len(nonce_hex) != 32 or not isinstance(auth, bool):
            raise PreflightError(f"the primary at {where} sent a malformed greeting")
        try:
            primary_nonce = bytes.fromhex(nonce_hex)
        except ValueError as e:
            raise PreflightError(f"the primary at {where} sent a malformed greeting") from e
        if token is not None and not auth:
            # Refuse before sending anything: this node's facts go only to a primary that
            # proves it holds the same token.
            raise PreflightError(
                f"the primary at {where} does not use {TOKEN_VARIABLE}, but this node has it "
                "set: set the same token on every node (or on none); this node's fingerprint "
                "was not sent"
            )
        announced = hello.get("timeout_s")
        wait = float(announced) if isinstance(announced, (int, float)) else deadline - \
            time.monotonic()
        until = time.monotonic() + min(max(wait, 0.0) + _VERDICT_MARGIN_S, _MAX_WAIT_S)
        body: dict[str, Any] = {"fingerprint": fingerprint.to_wire()}
        my_nonce = new_nonce()
        body["nonce"] = my_nonce.hex()
        if hello.get("ring") is True:
            local = str(sock.getsockname()[0])
            with contextlib.suppress(OSError):
                ring = RingListener(local, port)
                body["ring"] = {"addr": ring.addr, "port": ring.port}
        sock.settimeout(limits.send_timeout)
        sock.sendall(encode_frame(Kind.FINGERPRINT, encode_json(body), token=token,
                                  nonce=primary_nonce))
        reader = FrameReader(max_payload=limits.max_verdict_bytes,
                             expect={Kind.VERDICT, Kind.REJECT, Kind.RING})
        answered_ring = False
        while True:
            try:
                frame = read_frame(sock, reader, until)
            except TimeoutError as e:
                raise PreflightError(
                    f"the primary at {where} took this node's fingerprint but sent no verdict in "
                    f"{wait + _VERDICT_MARGIN_S:.0f} s; its own output says why"
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
            body = decode_object(frame.payload)
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
