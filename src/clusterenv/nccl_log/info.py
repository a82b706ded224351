"""What one NCCL log line says, from its text alone (pure functions, no state).

A line is ``<launcher prefix><host>:<pid>:<tid> [<cuda dev>] [<file>:<line>] NCCL INFO|WARN <msg>``
where everything before the marker is optional. :func:`parse_info` turns the message of an INFO
line into a *fact*, a tuple whose first item names what it is (``("bootstrap", endpoint)``,
``("env", "NCCL_IB_HCA", "mlx5_0")``) or None for the many lines that say nothing we need.
The stateful parser (:mod:`clusterenv.nccl_log.parse`) caches facts by message text, since
every rank prints the same messages.

Every pattern is ASCII with bounded quantifiers: arbitrary text must neither crash ``int()`` (which
refuses more than 4300 digits) nor make a regular expression backtrack for long.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from clusterenv.nccl_log.model import INTERNAL_NETWORKS, SocketEndpoint, parse_ip

__all__ = [
    "FI_EMPTY",
    "TORCH_ERROR",
    "VERSION",
    "Fact",
    "fi_getinfo",
    "find_marker",
    "kind_of",
    "message_end",
    "parse_header",
    "parse_info",
    "source_of",
    "split_messages",
]

#: ``("op", *arguments)``; see :func:`parse_info`.
Fact = tuple[Any, ...]

_A = re.ASCII
# A host name is letters, digits, "_", "." and "-" (RFC 1123 and container/pod names); anything
# else in front of it (a launcher's "[1,0]<stdout>:", a CloudWatch " | " column, quotes) is a
# decoration.
_HEADER = re.compile(
    r"([\w.-]{1,253}):([0-9]{1,10}):[0-9]{1,10} \[([0-9]{1,5})\] ?"
    r"(?:[\w./+-]{1,200}:[0-9]{1,6} ?)?$",
    _A,
)
# An ISO 8601 / syslog-style date and time, possibly glued to the host name that follows it
# (CloudWatch exports print "2025-03-01T12:00:00.123-07:00node1:42:42 [0] NCCL INFO ...").
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]{1,9})?)?"
    r"(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)?",
    _A,
)
_SOURCE = re.compile(r"([\w./+-]{1,200}\.(?:cc|cu|cpp|c|h):[0-9]{1,6}) ?$", _A)
#: ``NCCL version 2.27.5+cuda12.9``: group 1 the version, group 2 the CUDA version.
VERSION = re.compile(
    r"NCCL version ([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})[^\s+]{0,20}"
    r"(?:\+cuda([0-9]{1,3}\.[0-9]{1,3}))?",
    _A,
)
#: PyTorch's report of a failed NCCL call (``NCCL error in: ...``, ``ncclSystemError``).
TORCH_ERROR = re.compile(
    r"NCCL error|nccl(?:Internal|System|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error",
    _A,
)
_ENV = re.compile(r"(NCCL_[A-Z0-9_]{1,64}) set (?:by environment )?to ?(.{0,1000})", _A)
_INDEXED = re.compile(r"\[[0-9]{1,4}\]", _A)
_ALIAS = re.compile(r"[\w-]{0,15}[g-zG-Z_-][\w-]{0,15}", _A)
_IB_DEVICE = re.compile(
    r"\[([0-9]{1,4})\]([^\s:\[\]/;]{1,64}):([0-9]{1,3})/([A-Za-z]{1,16})((?:/[A-Za-z0-9_]{1,16}){0,4})",
    _A,
)
_IB_DEVICE_DETAIL = re.compile(
    r"\[([0-9]{1,4})\] ([^\s:\[\]/]{1,64}):(?:uverbs[0-9]{1,4}:)?([0-9]{1,3})/([A-Za-z]{1,16})"
    r"(?:.{0,400}?\bspeed=([0-9]{1,9}))?",
    _A,
)
_GDR_HCA = re.compile(
    r"GPU Direct RDMA(?: \([^)]{0,40}\))? ([Ee]nabled|[Dd]isabled) for HCA ([0-9]{1,4})"
    r"(?: '([^']{0,64})')?",
    _A,
)
_GDR_GPU = re.compile(
    r"GPU Direct RDMA (Enabled|Disabled) for GPU (\S{1,32}) / HCA (\S{1,32})"
    r"(?: \(distance ([0-9]{1,3}) ([<>]=?) ([0-9]{1,3})\))?",
    _A,
)
_CHANNEL_NET = re.compile(
    r"via NET/([^/\s]{1,64}(?: [^/\s]{1,64}){0,3})/([0-9]{1,4})(?:\([0-9]{1,7}\))?(/GDRDMA)?", _A
)
_COMM = re.compile(r"\brank ([0-9]{1,7}) n[Rr]anks ([0-9]{1,7})", _A)
_NRANKS = re.compile(r"\bn[Rr]anks[ =:]{1,3}([0-9]{1,7})\b", _A)
#: libfabric's ``fi_getinfo: provider efa output empty list`` (or ``returned -61 (No data
#: available)``): the provider has no usable device in this process.
FI_EMPTY = re.compile(
    r"fi_getinfo: provider ([\w;.-]{1,64}) (?:output empty list|returned -[0-9]{1,5}"
    r"(?: \([^)]{0,60}\))?)",
    _A,
)
_NNODES = re.compile(r"\bnNodes ([0-9]{1,6})", _A)
_DMABUF = re.compile(r"DMA-BUF is available on GPU device ([0-9]{1,3})", _A)
_TRACE = re.compile(r"([\w./+-]{1,200}\.(?:cc|cu|cpp|c|h)):([0-9]{1,6}) -> ([0-9]{1,3})\b", _A)
_LOADED_PLUGIN = re.compile(r"Loaded (?:net|NET) plugin (.{1,64}?)(?: \(v[0-9]{1,3}\))?\.?$", _A)
_OFI_VERSION = re.compile(r"NET/OFI Using aws-ofi-nccl ([0-9][\w.+-]{0,30})", _A)
_OFI_PROVIDER = re.compile(
    r"Selected [Pp]rovider is (\S{1,64})(?:,? \(found ([0-9]{1,5}) nics\))?", _A
)
_OFI_GROUP = re.compile(r"NIC group ([0-9]{1,4}) device #[0-9]{1,3} (\S{1,64})", _A)
_TROUBLE = re.compile(r"(?i)invalid|fail|error|unable|couldn't|could not|not supported")

_RESULT_NAMES = {
    "1": "ncclUnhandledCudaError",
    "2": "ncclSystemError",
    "3": "ncclInternalError",
    "4": "ncclInvalidArgument",
    "5": "ncclInvalidUsage",
    "6": "ncclRemoteError",
    "7": "ncclInProgress",
}

# A socket call that failed: a WARN of kind "connect", and a notice when NCCL logs it as INFO.
_CONNECT = re.compile(
    r"(?i)(?:connect|recv|send)\w*\b.{0,200}?"
    r"(?:timed out|refused|abort|unreachable|no route to host|reset by peer|timeout)"
)
# The first matching rule names what a WARN (or notable INFO) line is about.
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("memlock", re.compile(r"ibv_reg_mr|RLIMIT_MEMLOCK|Cannot allocate memory")),
    ("ibverbs", re.compile(r"ibv_open_device|libibverbs|Unable to open device|ibv_get_device")),
    # "Got completion from peer 10.1.1.2<46045> with error 12" (NCCL <= 2.22), "... with
    # status=12" / "status=transport retry counter exceeded(12)" (newer); IBV_WC_* names
    ("ib-completion", re.compile(r"[Cc]ompletion .{0,200}?(?:with error|status[ =])|IBV_WC_")),
    ("ib-qp", re.compile(r"ibv_modify_qp|ibv_poll_cq|ibv_create_qp")),
    ("shm", re.compile(r"posix_fallocate|No space left on device|shared memory|[Ss]hmOpen")),
    (
        "no-interface",
        re.compile(r"no socket interface|[Nn]o IP interface|no interface found|neither AF_INET"),
    ),
    # fatal to the communicator: a CUDA call failed, or the proxy thread gave up on a peer
    (
        "fatal",
        re.compile(
            r"Cuda failure|CUDA error|cuda[A-Z]\w{0,40} failed|Proxy Service [0-9]{1,5}\] Failed|"
            r"Failed to execute operation|Error encountered progressing operation"
        ),
    ),
    ("connect", _CONNECT),
    ("ofi-no-provider", FI_EMPTY),
    ("plugin", re.compile(r"NET/OFI|NET/Plugin|libnccl-net|[Pp]lugin")),
)


@lru_cache(maxsize=4096)
def kind_of(text: str) -> str:
    """What a warning is about, e.g. ``"ibverbs"`` for ``Call to ibv_open_device failed``."""
    for kind, pattern in _KINDS:
        if pattern.search(text):
            return kind
    return "other"


def find_marker(line: str, start: int = 0) -> int:
    """Index of the first ``NCCL INFO `` / ``NCCL WARN `` marker at or after ``start``, or -1."""
    pos = line.find("NCCL ", start)
    while pos >= 0:
        tag = line[pos + 5 : pos + 10]
        if tag in ("INFO ", "WARN "):
            return pos
        pos = line.find("NCCL ", pos + 5)
    return -1


def split_messages(line: str, first: int) -> list[tuple[str, str, bool]]:
    """Every NCCL message in a line: ``(text before it, message, is WARN)`` triples.

    ``first`` is the index of the first marker. Several processes may have written into one line,
    and exports repeat a message in a second column (``... | node1:1:1 [0] NCCL INFO same``):
    a message ends where the next ``host:pid:tid [dev]`` header or marker begins, and exact
    repeats (same process, same text) are kept once.
    """
    markers: list[int] = []
    pos = first
    while pos >= 0 and len(markers) < 64:
        markers.append(pos)
        pos = find_marker(line, pos + 10)
    starts = []  # where the header of each marker begins (the marker itself when none)
    low = 0
    for pos in markers:
        region = line[max(low, pos - 600) : pos]
        match = _HEADER.search(region)
        starts.append(pos - len(region) + match.start() if match else pos)
        low = pos + 10
    out: list[tuple[str, str, bool]] = []
    seen: set[tuple[object, bool, str]] = set()
    low = 0
    for i, pos in enumerate(markers):
        end = starts[i + 1] if i + 1 < len(markers) else len(line)
        head, msg = line[low:pos], message_end(line[pos + 10 : end])
        low = pos + 10
        header = parse_header(head)
        key = (header[:2] if header else None, line[pos + 5] == "W", msg)
        if key in seen or (header is None and msg and any(k[2] == msg for k in seen)):
            continue
        seen.add(key)
        out.append((head, msg, key[1]))
    return out


def parse_header(head: str) -> tuple[str, int, int] | None:
    """``"[rank3]:node1:4242:4250 [3] "`` -> ``("node1", 4242, 3)``; None without a prefix.

    Whatever precedes ``host:pid:tid [dev]`` is a decoration, including a timestamp glued to the
    host name (``...-07:00node1:42:42 [0]`` is host ``node1``, not ``00node1``).
    """
    tail = head[-600:]
    match = _HEADER.search(tail)
    if match is None:
        return None
    host, start = match.group(1), match.start(1)
    for stamp in _TIMESTAMP.finditer(tail, max(0, start - 40), match.end(1)):
        if stamp.start() < start < stamp.end() < match.end(1):
            host = tail[stamp.end() : match.end(1)]
            break
    return host, int(match.group(2)), int(match.group(3))


def message_end(text: str) -> str:
    """A message without what exports append: a ``" | "`` column, trailing quotes or spaces."""
    bar = text.find(" | ")
    if bar >= 0:
        text = text[:bar]
    return text.strip().rstrip('|"').rstrip()


def source_of(head: str) -> str | None:
    """The NCCL source location a WARN line names before its marker, e.g. ``misc/ibvwrap.cc:63``."""
    match = _SOURCE.search(head[-300:])
    return match.group(1) if match else None


def _endpoint(token: str) -> SocketEndpoint | None:
    """``eth0:172.17.0.2<0>`` (also ``[0]eth0:...``, IPv6 with ``%scope``, cut short)."""
    token = _INDEXED.sub("", token, count=1) if token.startswith("[") else token
    body = token.split("<", 1)[0][:128]  # a name (<16) and an address with scope fit easily
    first = body.find(":")
    if first <= 0:
        return None
    colon = first
    while colon > 0:  # interface aliases (eth0:1) contain a colon too: find the split that is an IP
        if parse_ip(body[colon + 1 :]) is not None:
            return SocketEndpoint(body[:colon], body[colon + 1 :])
        colon = body.find(":", colon + 1)
    # No address (cut short or redacted): keep alias labels. A label that cannot start an
    # address (a letter beyond a-f: "eno1:avahi") is one; so is every label before an address
    # redacted whole ("eno1:1:<address><0>": NCCL's "<port>" is still there). A line cut short
    # has no "<": "eth0:172.1" stays "eth0".
    name = body[:first]
    labels = body[first + 1 :].split(":")
    if "<" in token and body.endswith(":"):
        return SocketEndpoint(":".join([name, *labels[:-1]]), None)
    for label in labels:
        if not _ALIAS.fullmatch(label):
            break
        name += ":" + label
    return SocketEndpoint(name, None)


def _endpoints(text: str) -> tuple[SocketEndpoint, ...]:
    found = (_endpoint(token) for token in text.split(maxsplit=64)[:64])
    return tuple(e for e in found if e is not None)


def _env_value(raw: str) -> str:
    value = raw.strip()
    # integer settings are printed as "to 0." (a trailing full stop); string settings are not
    if value.endswith(".") and value[:-1].lstrip("-").isdigit():
        return value[:-1]
    return value


def _after(msg: str, prefix_length: int) -> str:
    return msg[prefix_length:].lstrip(" :")


def _bootstrap(msg: str) -> Fact | None:
    rest = _after(msg, 9)
    if rest.startswith("Using"):
        endpoints = _endpoints(rest[5:])
        return ("bootstrap", endpoints[0]) if endpoints else None
    if "no socket interface" in rest:
        return ("notice", "no-interface")
    return None


def _net_ib(msg: str) -> Fact | None:
    # "NET/IB : ...", "NET/IB: ..." and plugins built on it: "NET/IBext_v8 : Using ..."
    end = 6
    while end < len(msg) and end < 40 and msg[end] not in " :":
        end += 1
    network = msg[4:end]
    rest = _after(msg, end)
    if rest.startswith("Using"):
        devices_part, _, oob_part = rest[5:].partition("OOB")
        devices = tuple(m.groups() for m in _IB_DEVICE.finditer(devices_part))
        oob = _endpoints(oob_part)
        return ("ib_using", network, devices, oob[0] if oob else None)
    if rest.startswith("["):
        detail = _IB_DEVICE_DETAIL.match(rest)
        return ("ib_device", network, *detail.groups()) if detail else None
    if "GPU Direct RDMA" in rest:
        return _gdr_hca(rest)
    if rest.startswith("No device found"):
        return ("notice", "no-device")
    if rest.startswith("No IP interface"):
        return ("notice", "no-interface")
    return None


def _gdr_hca(text: str) -> Fact | None:
    match = _GDR_HCA.search(text)
    if match is None:
        return None
    name = match.group(3) or f"HCA {match.group(2)}"
    return ("gdr_hca", name, match.group(1).lower() == "enabled")


def _net_plugin(msg: str) -> Fact | None:
    rest = _after(msg, 10)
    if "symbol" in rest or "Failed to find ncclNet".startswith(rest[:22]):
        return None  # "Failed to find ncclNetPlugin_v10 symbol.": probing API versions is normal
    if rest.startswith("Plugin name set by env to"):
        library = rest[len("Plugin name set by env to") :].strip()
        return ("plugin_requested", library) if library else None
    loaded = _LOADED_PLUGIN.search(rest)
    if loaded:
        return ("plugin_loaded", loaded.group(1).strip())
    lowered = rest.lower()
    if "could not" in lowered or "returned" in lowered or "fail" in lowered:
        return ("plugin_trouble",)
    return None


def _net_ofi(msg: str) -> Fact:
    if "fi_getinfo" in msg and FI_EMPTY.search(msg):
        return ("notice", "ofi-no-provider")
    version = _OFI_VERSION.match(msg)
    if version:
        return ("ofi_version", version.group(1))
    provider = _OFI_PROVIDER.search(msg)
    if provider:
        nics = provider.group(2)
        return ("ofi_provider", provider.group(1), int(nics) if nics else None)
    group = _OFI_GROUP.search(msg)
    if group:
        return ("ofi_group", group.group(1), group.group(2))
    if _TROUBLE.search(msg) and "Support for" not in msg:
        return ("ofi_trouble",)
    return ("ofi",)


def _net(msg: str) -> Fact | None:
    if msg.startswith("NET/IB"):
        return _net_ib(msg)
    if msg.startswith("NET/Socket"):
        rest = _after(msg, 10)
        if rest.startswith("Using"):
            return ("socket", _endpoints(rest[5:]))
        return ("notice", "no-interface") if "no interface" in rest.lower() else None
    if msg.startswith("NET/Plugin"):
        return _net_plugin(msg)
    if msg.startswith("NET/OFI"):
        return _net_ofi(msg)
    if "GPU Direct RDMA" in msg:  # NET/IBext_v8, NET/AWS Libfabric, ...
        return _gdr_hca(msg)
    return None


def _network(prefix: str, suffix: str = "") -> Callable[[str], Fact | None]:
    def parse(msg: str) -> Fact | None:
        if not (msg.startswith(prefix) and msg.endswith(suffix)):
            return None
        name = msg[len(prefix) : len(msg) - len(suffix)].strip()
        return ("network", name[:64]) if name else None

    return parse


def _nccl(msg: str) -> Fact | None:
    if msg.startswith("NCCL version"):
        match = VERSION.match(msg)
        return ("version", match.group(1), match.group(2)) if match else None
    env = _ENV.match(msg)
    return ("env", env.group(1), _env_value(env.group(2))) if env else None


def _channel(msg: str) -> Fact | None:
    if "via NET/" not in msg:
        return None
    match = _CHANNEL_NET.search(msg)
    if match is None:
        return None
    # ("channel", network, device index, receive side, /GDRDMA). Only the receive side tells
    # whether GPUDirect RDMA is on: the send side also needs NCCL_NET_GDR_READ, which is off by
    # default before Ampere without NVLink.
    network, index, gdr = match.groups()
    return ("channel", network, int(index), "[send]" not in msg, gdr is not None)


def _gdr_gpu(msg: str) -> Fact | None:
    match = _GDR_GPU.match(msg)
    if match is None or match.group(1) != "Disabled":
        return None
    text = f"GPU {match.group(2)} / HCA {match.group(3)}"
    if match.group(4):
        text += f" (distance {match.group(4)} {match.group(5)} {match.group(6)})"
    return ("gdr_distance", text)


def _dmabuf(msg: str) -> Fact | None:
    match = _DMABUF.match(msg)
    return ("dmabuf", int(match.group(1))) if match else None


def _comm(msg: str) -> Fact | None:
    ranks = _COMM.search(msg)
    nodes = _NNODES.search(msg)
    alone = None if ranks else _NRANKS.search(msg)  # NCCL 2.4: "nranks 16" without "rank N"
    if ranks is None and nodes is None and alone is None:
        return None
    return (
        "comm",
        int(ranks.group(1)) if ranks else None,
        int(ranks.group(2)) if ranks else int(alone.group(1)) if alone else None,
        int(nodes.group(1)) if nodes else None,
    )


def _initialized(msg: str) -> Fact | None:
    if not msg.startswith("Initialized NET plugin "):
        return None
    name = msg[len("Initialized NET plugin ") :].strip()
    return ("plugin_loaded", name[:64]) if name and name not in INTERNAL_NETWORKS else None


def _external(msg: str) -> Fact | None:
    if not msg.startswith("Successfully loaded external plugin"):
        return None
    return ("plugin_external", msg[len("Successfully loaded external plugin") :].strip()[:200])


def _connect(msg: str) -> Fact | None:
    if msg.startswith("Connected") or not _CONNECT.search(msg):
        return None
    return ("notice", "connect")


def _trace(msg: str) -> Fact | None:
    match = _TRACE.match(msg)
    if match is None:
        return None
    source = f"{match.group(1)}:{match.group(2)}"
    code = match.group(3)
    return ("trace", source, f"{source} -> {code} ({_RESULT_NAMES.get(code, 'error')})")


# Dispatch on the first four characters of the message: one dict lookup for most lines.
_BY_HEAD: dict[str, Callable[[str], Fact | None]] = {
    "Boot": _bootstrap,
    "NET/": _net,
    "Usin": _network("Using network "),
    "Assi": _network("Assigned NET plugin ", " to comm"),
    "NCCL": _nccl,
    "Chan": _channel,
    "Ring": _channel,
    "GPU ": _gdr_gpu,
    "DMA-": _dmabuf,
    "nccl": _comm,
    "comm": _comm,
    "Init": _initialized,
    "Succ": _external,
    "Call": _connect,
    "sock": _connect,
    "Conn": _connect,
}


def parse_info(msg: str) -> Fact | None:
    """The fact an ``NCCL INFO`` message states, or None when it states nothing we use.

    Args:
        msg: The text after ``NCCL INFO``, e.g. ``"Bootstrap : Using [0]eth0:172.17.0.2<0>"``.

    Returns:
        e.g. ``("bootstrap", SocketEndpoint("eth0", "172.17.0.2"))``.
    """
    parse = _BY_HEAD.get(msg[:4])
    if parse is not None:
        fact = parse(msg)
        if fact is not None:
            return fact
    if " -> " in msg:
        return _trace(msg)
    if "anks" in msg:
        return _comm(msg)
    if "fi_getinfo" in msg:
        return fi_getinfo(msg)
    return None


def fi_getinfo(text: str) -> Fact | None:
    """``("notice", "ofi-no-provider")`` for libfabric's empty ``fi_getinfo`` answer."""
    return ("notice", "ofi-no-provider") if FI_EMPTY.search(text) else None
