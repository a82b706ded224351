"""What an ``NCCL INFO`` message states, from its text alone (pure functions, no state).

:func:`parse_info` turns the message of an INFO line into a *fact*, a tuple whose first item
names what it is (``("bootstrap", endpoint)``, ``("env", "NCCL_IB_HCA", "mlx5_0")``) or None for
the many lines that say nothing we need. The stateful parser (:mod:`clusterenv.nccl_log.parse`)
caches facts by message text, since every rank prints the same messages.

Every pattern is ASCII with bounded quantifiers: arbitrary text must neither crash ``int()`` (which
refuses more than 4300 digits) nor make a regular expression backtrack for long.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from clusterenv.nccl_log.lines import CONNECT, FI_EMPTY, RESULT_NAMES, TRACE
from clusterenv.nccl_log.model import INTERNAL_NETWORKS, SocketEndpoint, parse_ip

__all__ = ["NOTHING", "TORCH_ERROR", "VERSION", "Fact", "channel_fact", "fi_getinfo",
           "info_fact", "parse_info", "trace_fact"]

#: ``("op", *arguments)``; see :func:`parse_info`.
Fact = tuple[Any, ...]
#: What a rule returns for a line it knows to state nothing (not even a failure the catalogue
#: would find: probing a plugin's API versions is normal).
NOTHING: Fact = ("nothing",)

_A = re.ASCII
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
_NNODES = re.compile(r"\bnNodes ([0-9]{1,6})", _A)
_POINTER = re.compile(r"\bcomm (0x[0-9a-fA-F]{1,16})\b", _A)
_DMABUF = re.compile(r"DMA-BUF is available on GPU device ([0-9]{1,3})", _A)
_DRIVER = re.compile(r"cudaDriverVersion ([0-9]{1,9})", _A)
_LOADED_PLUGIN = re.compile(r"Loaded (?:net|NET) plugin (.{1,64}?)(?: \(v[0-9]{1,3}\))?\.?$", _A)
_PLUGIN_ERROR = re.compile(
    r"(?:Most recent plugin load|Plugin load(?: \([^)]{0,200}\))?) returned ([0-9]{1,5}) ?: ?"
    r"(.{0,400}?)\.?(?: ?: when loading \S{1,200})?(?: All attempts .{0,200})?$",
    _A,
)
_OFI_VERSION = re.compile(r"NET/OFI Using aws-ofi-nccl ([0-9][\w.+-]{0,30})", _A)
_OFI_PROVIDER = re.compile(
    r"Selected [Pp]rovider is (\S{1,64})(?:,? \(found ([0-9]{1,5}) nics\))?", _A
)
_OFI_GROUP = re.compile(r"NIC group ([0-9]{1,4}) device #[0-9]{1,3} (\S{1,64})", _A)
_TROUBLE = re.compile(r"(?i)invalid|fail|error|unable|couldn't|could not|not supported")
# NET/<name> lines of a plugin network other than NCCL's own (NET/IB, NET/Socket), its plugin
# loader (NET/Plugin) and aws-ofi-nccl (NET/OFI, read on its own)
_NET_NAME = re.compile(r"NET/([A-Za-z][\w.-]{0,40}(?: [A-Za-z][\w.-]{0,40})?) ?: ", _A)


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
    if "v4 and lower are not supported" in rest or "symbol (v4 or v5)" in rest:
        # the library loaded but offers no API version this NCCL accepts (src/net.cc)
        return ("plugin_rejected", "it implements only a plugin API older than this NCCL accepts")
    if rest.startswith("dlerror="):
        # 2.19-2.20 (src/net.cc): "dlerror=%s No plugin found (%s), using internal
        # implementation" after any failed dlopen: the loader's error says which (a library
        # that is not installed is no failure: plugins._absent)
        loader = rest[len("dlerror=") :].split(" No plugin found", 1)[0].strip()
        return ("plugin_error", loader) if loader and loader != "(null)" else NOTHING
    if "symbol" in rest or "Failed to find ncclNet".startswith(rest[:22]):
        return NOTHING  # "Failed to find ncclNetPlugin_v10 symbol.": probing API versions
    if rest.startswith(("Could not find:", "No plugin found")):
        # no plugin library installed (ENOENT): NCCL uses its own networks, a failure only when
        # a plugin was asked for (plugins._absent)
        return ("plugin_absent", rest.rstrip("."))
    if rest.startswith("Using internal"):
        return NOTHING
    error = _PLUGIN_ERROR.search(rest)
    if error:
        return ("plugin_error", error.group(2).strip())
    if rest.startswith("Plugin name set by env to"):
        library = rest[len("Plugin name set by env to") :].strip()
        return ("plugin_requested", library) if library else None
    loaded = _LOADED_PLUGIN.search(rest)
    if loaded:
        return ("plugin_loaded", loaded.group(1).strip())
    if ": " in rest and (".so" in rest.split(": ", 1)[0] or "cannot open" in rest
                         or "undefined symbol" in rest or "not found" in rest):
        # 2.22+: "NET/Plugin: libnccl-net.so: <dlopen error>" for anything but ENOENT
        return ("plugin_error", rest.split(": ", 1)[1].strip())
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
    named = _NET_NAME.match(msg)
    if named and not named.group(1).startswith(("IB", "Socket", "Plugin", "OFI")):
        # NET/GPUDirectTCPX, NET/FastSocket, NET/AWS Libfabric, ...: a plugin network at work
        return ("net_named", named.group(1))
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


def channel_fact(msg: str) -> Fact | None:
    """``("channel", network, index, receive side, /GDRDMA)`` for ``Channel 00/0 : 8[0] ->
    0[0] [receive] via NET/IB/0/GDRDMA``; None for channels through P2P or shared memory."""
    at = msg.find("via NET/")
    if at < 0:
        return None
    # one of the most frequent lines of a large job: matched on its tail only
    match = _CHANNEL_NET.match(msg, at)
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
    # each searched only where it can be, from the first "rank " (the expression starts with
    # \b: it has no fixed text to be looked for by)
    at = msg.find("rank ") if "anks " in msg else -1
    ranks = _COMM.search(msg, at) if at >= 0 else None
    nodes = _NNODES.search(msg) if "nNodes " in msg else None
    alone = None if ranks or "anks" not in msg else _NRANKS.search(msg)  # NCCL 2.4: no "rank N"
    if ranks is None and nodes is None and alone is None:
        return _progress(msg)
    complete, start = "Init COMPLETE" in msg, "Init START" in msg  # START: 2.18 and later
    pointer = _POINTER.search(msg) if complete or start else None
    return (
        "comm",
        int(ranks.group(1)) if ranks else None,
        int(ranks.group(2)) if ranks else int(alone.group(1)) if alone else None,
        int(nodes.group(1)) if nodes else None,
        complete,
        start,
        pointer.group(1) if pointer else None,  # which communicator (src/init.cc: "comm %p")
    )


def _progress(msg: str) -> Fact | None:
    """Lines that show a communicator got past setup: an error return before them was handled."""
    if "Init COMPLETE" in msg or msg.startswith("Connected all"):
        return ("progress",)
    return None


def _driver(msg: str) -> Fact | None:
    match = _DRIVER.match(msg)
    return ("driver", match.group(1)) if match else None


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
    if msg.startswith("Connected"):
        return _progress(msg)
    if not CONNECT.search(msg):
        return None
    return ("notice", "connect")


def trace_fact(msg: str) -> Fact | None:
    """``("trace", "init.cc:1234", code or None, "init.cc:1234 -> 2 (ncclSystemError)")`` for a
    return chain line; the code is None when the line was cut after ``->``."""
    match = TRACE.match(msg)
    if match is None:
        return None
    source = f"{match.group(1)}:{match.group(2)}"
    code = match.group(3)
    if code is None:
        return ("trace", source, None, f"{source} -> (cut off)")
    return ("trace", source, code, f"{source} -> {code} ({RESULT_NAMES.get(code, 'error')})")


# Dispatch on the first four characters of the message: one dict lookup for most lines.
_BY_HEAD: dict[str, Callable[[str], Fact | None]] = {
    "Boot": _bootstrap,
    "NET/": _net,
    "Usin": _network("Using network "),
    "Assi": _network("Assigned NET plugin ", " to comm"),
    "NCCL": _nccl,
    "Chan": channel_fact,
    "Ring": channel_fact,
    "GPU ": _gdr_gpu,
    "DMA-": _dmabuf,
    "nccl": _comm,
    "comm": _comm,
    "Init": _initialized,
    "Succ": _external,
    "Call": _connect,
    "sock": _connect,
    "Conn": _connect,
    "cuda": _driver,
}


def parse_info(msg: str) -> Fact | None:
    """The fact an ``NCCL INFO`` message states, or None when it states nothing we use.

    Args:
        msg: The text after ``NCCL INFO``, e.g. ``"Bootstrap : Using [0]eth0:172.17.0.2<0>"``.

    Returns:
        e.g. ``("bootstrap", SocketEndpoint("eth0", "172.17.0.2"))``.
    """
    fact = info_fact(msg)
    return None if fact is NOTHING else fact


def info_fact(msg: str) -> Fact | None:
    """:func:`parse_info`, but :data:`NOTHING` for a line known to state nothing (None: no rule
    knows it)."""
    parse = _BY_HEAD.get(msg[:4])
    if parse is not None:
        fact = parse(msg)
        if fact is not None:
            return fact
    if " ->" in msg:
        return trace_fact(msg)
    if "anks" in msg:
        return _comm(msg)
    if "fi_getinfo" in msg:
        return fi_getinfo(msg)
    if "COMPLETE" in msg:
        return _progress(msg)
    return None


def fi_getinfo(text: str) -> Fact | None:
    """``("notice", "ofi-no-provider")`` for libfabric's empty ``fi_getinfo`` answer."""
    return ("notice", "ofi-no-provider") if FI_EMPTY.search(text) else None
