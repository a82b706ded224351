"""The preflight wire format: framing, size limits and message authentication (sans I/O).

Every message is one frame::

    offset  size  field
    0       4     magic  b"CEPF"
    4       1     protocol version (2)
    5       1     kind (OPEN, HELLO, FINGERPRINT, RING, RING_RESULT, VERDICT, REJECT, PROBE,
                  PROBE_ACK; HANG_REPORT, HANG_VERDICT for ``clusterenv hang --collect``)
    6       1     MAC length: 0, or 32 for an HMAC-SHA256
    7       1     reserved, 0
    8       4     payload length, big-endian, at most the receiver's limit
    12      32?   the MAC, when present
    12(+32) n     payload: UTF-8 JSON object

The header is checked as soon as its 12 bytes arrive, so a message that is too big or not ours is
refused before its body is read. With a shared token, the MAC is ``HMAC-SHA256(token, context ||
version || kind || nonce || payload)`` where the nonce is the one the *receiver* chose (the
primary's ``HELLO`` nonce for messages to the primary, the node's ``OPEN`` nonce for messages to
the node), so a captured message cannot be replayed into another run.

A connection starts with the node's nonce (``OPEN``), so that the primary's greeting can be
authenticated too: the ``HELLO`` announces how long the primary will collect, which decides how
long a node waits for its verdict, and a node with a token trusts that only from a ``HELLO``
MACed over its own nonce (whoever else answers on the port cannot make it wait an hour).

This module does no I/O: the primary's event loop, the node's blocking client and the benchmark's
asyncio clients all feed bytes to :class:`FrameReader` and send what :func:`encode_frame` returns.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import struct
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from clusterenv._text import JSON_SURROGATES, escape_tree

__all__ = [
    "DEFAULT_LIMITS",
    "HEADER",
    "MAC_BYTES",
    "MAGIC",
    "PROTOCOL_VERSION",
    "Frame",
    "FrameReader",
    "Kind",
    "Limits",
    "WireError",
    "decode_object",
    "encode_frame",
    "encode_json",
    "new_nonce",
    "short_texts",
    "verify_mac",
]

MAGIC = b"CEPF"
PROTOCOL_VERSION = 2
HEADER = struct.Struct("!4sBBBxI")
MAC_BYTES = 32
NONCE_BYTES = 16
_CONTEXT = b"clusterenv-preflight\x00"


class Kind:
    """Frame kinds (one byte on the wire)."""

    HELLO = 1  #: primary -> node: nonce, whether a token is required, seconds left
    FINGERPRINT = 2  #: node -> primary: the node's fingerprint
    RING = 3  #: primary -> node: the next node to probe
    RING_RESULT = 4  #: node -> primary: how the probe went
    VERDICT = 5  #: primary -> node: the verdict
    REJECT = 6  #: primary -> node: why this connection was refused
    PROBE = 7  #: node -> node: a ring probe
    PROBE_ACK = 8  #: node -> node: the probe's answer
    OPEN = 9  #: node -> primary, first on a connection: the node's nonce
    HANG_REPORT = 10  #: node -> primary: ``clusterenv hang --collect``'s dump summaries
    HANG_VERDICT = 11  #: primary -> node: every node's summaries, to attribute the hang

    NAMES: dict[int, str] = {  # noqa: RUF012  # read-only table
        1: "HELLO",
        2: "FINGERPRINT",
        3: "RING",
        4: "RING_RESULT",
        5: "VERDICT",
        6: "REJECT",
        7: "PROBE",
        8: "PROBE_ACK",
        9: "OPEN",
        10: "HANG_REPORT",
        11: "HANG_VERDICT",
    }


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that keep a preflight run finite whatever the peers send.

    Attributes:
        max_message_bytes: Largest payload the primary accepts from a node, e.g. ``65536``.
        max_verdict_bytes: Largest verdict a node accepts from the primary, e.g. 4 MiB (the
            primary fits every verdict into a quarter of it).
        peer_timeout: Seconds a connection has, from accept, to deliver its complete
            fingerprint, e.g. ``3.0``; a silent or trickling peer is dropped after it.
        send_timeout: Seconds to deliver the verdict to one node, e.g. ``5.0``.
        connection_slack: Connections that have not yet sent a well-formed message allowed at
            once beyond ``NUM_NODES - 1``, e.g. ``16``; at the cap, the one silent longest is
            closed to make room (an honest node answers its greeting at once, and reconnects
            if it is closed anyway).
        max_connections: Well-formed fingerprints accepted in one run is at most
            ``max_connections * NUM_NODES + 64``; connections that send nothing or garbage do
            not count, so a burst of them cannot lock honest nodes out.
        max_recorded_rejections: Rejected peers listed by address in the verdict, e.g. ``32``
            (the rest are counted).
    """

    max_message_bytes: int = 64 * 1024
    max_verdict_bytes: int = 4 * 1024 * 1024
    peer_timeout: float = 3.0
    send_timeout: float = 5.0
    connection_slack: int = 16
    max_connections: int = 4
    max_recorded_rejections: int = 32


DEFAULT_LIMITS = Limits()


class WireError(ValueError):
    """A peer sent something this protocol does not accept; the message says what."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame.

    Attributes:
        kind: One of :class:`Kind`, e.g. ``Kind.FINGERPRINT``.
        mac: The 32-byte MAC, or ``b""`` when the sender had no token.
        payload: The JSON payload bytes.
    """

    kind: int
    mac: bytes
    payload: bytes


def new_nonce() -> bytes:
    """A fresh random nonce (16 bytes)."""
    return secrets.token_bytes(NONCE_BYTES)


def _mac(token: bytes, kind: int, nonce: bytes, payload: bytes) -> bytes:
    message = b"".join((_CONTEXT, bytes((PROTOCOL_VERSION, kind)), nonce, payload))
    return hmac.new(token, message, hashlib.sha256).digest()


def encode_frame(
    kind: int, payload: bytes, *, token: bytes | None = None, nonce: bytes = b""
) -> bytes:
    """One frame; MACed over ``nonce`` (the receiver's) when ``token`` is given."""
    mac = _mac(token, kind, nonce, payload) if token else b""
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, kind, len(mac), len(payload)) + mac + payload


# One encoder and one decoder for every message (json.dumps and json.loads with options build a
# new one per call, a measurable share of the primary's time per node).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_json(data: Any) -> bytes:
    """Compact UTF-8 JSON, as every payload is sent.

    A lone surrogate (an undecodable byte of an environment value, ``"ens1\\udcff"``) is sent
    written out (``"ens1\\\\xff"``, see :mod:`clusterenv._text`): the payload is always valid
    UTF-8, and what arrives is what every node prints.
    """
    return _ENCODER.encode(data).encode("utf-8", JSON_SURROGATES)


def verify_mac(frame: Frame, *, token: bytes, nonce: bytes) -> bool:
    """Whether ``frame`` carries a valid MAC for ``token`` and ``nonce`` (constant time)."""
    if len(frame.mac) != MAC_BYTES:
        return False
    return hmac.compare_digest(frame.mac, _mac(token, frame.kind, nonce, frame.payload))


def _describe_start(data: bytes) -> str:
    printable = data[:8].decode("ascii", errors="replace")
    if printable.isprintable():
        return f"it starts with {printable!r}"
    return f"it starts with bytes {data[:8].hex()}"


class FrameReader:
    """Incremental frame decoder with a payload limit.

    Args:
        max_payload: Largest payload accepted, e.g. ``65536``; a bigger header is refused at once.
        expect: The kinds accepted here; anything else is a :class:`WireError`.

    Example::

        reader = FrameReader(max_payload=65536, expect={Kind.FINGERPRINT})
        reader.feed(sock.recv(65536))
        frame = reader.next_frame()   # None until a whole frame is buffered
    """

    __slots__ = ("_buffer", "_expect", "_header", "_max_payload", "received")

    def __init__(self, *, max_payload: int, expect: set[int] | frozenset[int]):
        self._max_payload = max_payload
        self._expect = frozenset(expect)
        self._buffer = bytearray()
        self._header: tuple[int, int, int] | None = None
        #: Bytes fed so far, e.g. ``1234``.
        self.received = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as a frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> None:
        """Add received bytes; check the header as soon as it is complete.

        Raises:
            WireError: Not our magic, another protocol version, an unexpected kind, a bad MAC
                length or a payload over the limit.
        """
        self.received += len(data)
        self._buffer += data
        self._check_header()

    def _check_header(self) -> None:
        if self._header is not None or len(self._buffer) < HEADER.size:
            if self._header is None and self._buffer and not MAGIC.startswith(
                bytes(self._buffer[: len(MAGIC)])
            ):
                raise WireError(
                    f"not a clusterenv preflight message ({_describe_start(bytes(self._buffer))})"
                )
            return
        magic, version, kind, mac_len, length = HEADER.unpack_from(self._buffer)
        if magic != MAGIC:
            raise WireError(
                f"not a clusterenv preflight message ({_describe_start(bytes(self._buffer))})"
            )
        if version != PROTOCOL_VERSION:
            raise WireError(
                f"preflight protocol version {version}, this side speaks {PROTOCOL_VERSION}: "
                "run the same clusterenv release on every node"
            )
        if kind not in self._expect:
            name = Kind.NAMES.get(kind, f"unknown kind {kind}")
            wanted = " or ".join(sorted(Kind.NAMES.get(k, str(k)) for k in self._expect))
            raise WireError(f"unexpected {name} message (expected {wanted})")
        if mac_len not in (0, MAC_BYTES):
            raise WireError(f"MAC of {mac_len} bytes (expected 0 or {MAC_BYTES})")
        if length > self._max_payload:
            raise WireError(
                f"message of {length} bytes exceeds the {self._max_payload}-byte limit"
            )
        self._header = (kind, mac_len, length)

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None while it is still arriving."""
        if self._header is None:
            return None
        kind, mac_len, length = self._header
        end = HEADER.size + mac_len + length
        if len(self._buffer) < end:
            return None
        mac = bytes(self._buffer[HEADER.size : HEADER.size + mac_len])
        payload = bytes(self._buffer[HEADER.size + mac_len : end])
        del self._buffer[:end]
        self._header = None
        self._check_header()
        return Frame(kind, mac, payload)


def short_texts(items: Collection[Any], limit: int) -> bool:
    """Whether every item is a string of at most ``limit`` characters, checked in C (a
    fingerprint has dozens of such items, and the primary reads one per node), e.g.
    ``short_texts(["mlx5_0", "mlx5_1"], 64)`` is True, ``short_texts(["a", 1], 64)`` False."""
    try:
        "".join(items)  # a TypeError is the answer: an item that is not a string
    except TypeError:
        return False
    return max(map(len, items), default=0) <= limit


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


class _TooManyObjects(Exception):
    pass


def decode_object(payload: bytes, *, max_objects: int | None = None) -> dict[str, Any]:
    """The payload as a JSON object; a lone surrogate spelled as a JSON escape (``\\ud800``)
    comes back written out (``"\\\\ud800"``), so no received string fails to encode.

    Args:
        payload: The frame's payload.
        max_objects: Refuse a payload with more JSON objects than this (decoding stops at the
            first one over), e.g. the most a bounded verdict has: a few megabytes of ``{}``
            would otherwise become millions of dictionaries.

    Raises:
        WireError: Not UTF-8, not JSON (``NaN`` and ``Infinity`` included), nested too deeply,
            not an object, or more objects than ``max_objects``.
    """
    count = 0

    def counted(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal count
        count += 1
        if max_objects is not None and count > max_objects:
            raise _TooManyObjects
        return dict(pairs)

    try:
        if max_objects is None:
            data = _DECODER.decode(payload.decode("utf-8"))
        else:
            data = json.loads(payload.decode("utf-8"), parse_constant=_reject_constant,
                              object_pairs_hook=counted)
    except _TooManyObjects as e:
        raise WireError(f"payload has more than {max_objects} JSON objects") from e
    except UnicodeDecodeError as e:
        raise WireError(f"payload is not UTF-8 ({e.reason} at byte {e.start})") from e
    except RecursionError as e:
        raise WireError("payload JSON is nested too deeply") from e
    except ValueError as e:
        raise WireError(f"payload is not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise WireError(f"payload must be a JSON object, got {type(data).__name__}")
    # "\ud800" in the JSON: escape it, as encode_json does (the plain search first: most
    # payloads have no escape at all)
    if b"\\u" in payload and _SURROGATE_ESCAPE.search(payload):
        escaped: dict[str, Any] = escape_tree(data)
        return escaped
    return data
