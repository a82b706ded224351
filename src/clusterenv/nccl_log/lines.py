"""Where an NCCL log line's parts are: its marker, its ``host:pid:tid [dev]`` header, the source
location of a WARN, several messages run together (pure functions, no state).

A line is ``<launcher prefix><host>:<pid>:<tid> [<cuda dev>] [<file>:<line> [(<function>)]]
NCCL INFO|WARN <msg>`` (src/debug.cc of every release; 2.30 adds the function after a WARN's
location; plugins pass their ``__PRETTY_FUNCTION__`` as the file), where everything before the
marker is optional. What an INFO message says is :mod:`clusterenv.nccl_log.info`'s business.

Every pattern is ASCII with bounded quantifiers: arbitrary text must neither crash ``int()`` (which
refuses more than 4300 digits) nor make a regular expression backtrack for long.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = [
    "RESULT_NAMES",
    "TRACE",
    "find_marker",
    "kind_of",
    "message_end",
    "parse_header",
    "source_of",
    "split_messages",
]

_A = re.ASCII
# A host name is letters, digits, "_", "." and "-" (RFC 1123 and container/pod names); anything
# else in front of it (a launcher's "[1,0]<stdout>:", a CloudWatch " | " column, quotes) is a
# decoration.
_HEADER = re.compile(r"([\w.-]{1,253}):([0-9]{1,10}):[0-9]{1,10} \[([0-9]{1,5})\] ?$", _A)
_PLAIN_HEADER = re.compile(r"([\w.-]{1,253}):([0-9]{1,10}):[0-9]{1,10} \[([0-9]{1,5})\] ?", _A)
_DEVICE = re.compile(r" \[[0-9]{1,5}\] ", _A)
# An ISO 8601 / syslog-style date and time, possibly glued to the host name that follows it
# (CloudWatch exports print "2025-03-01T12:00:00.123-07:00node1:42:42 [0] NCCL INFO ...").
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]{1,9})?)?"
    r"(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)?",
    _A,
)
# The location a WARN names: "misc/socket.cc:484", "init.cc:1234 (ncclCommInitRank)" (2.30), a
# plugin's "ncclResult_t tcpxTest(void*, int*, int*):1238"
_SOURCE = re.compile(r"([\w./+-]{1,200}\.(?:cc|cu|cpp|c|h)):([0-9]{1,6})(?: \([^()]{0,200}\))? ?$",
                     _A)
_ANY_SOURCE = re.compile(r"(\S[^\[\]]{0,300}?):([0-9]{1,6}) ?$", _A)
#: A return chain of NCCLCHECK: ``init.cc:1234 -> 2``, ``init.cc:1234 (ncclCommInitRank) -> 2``
#: (2.30), ``proxy.cc:75 -> 3 [Async thread]``; a chain cut short after ``->`` has no code.
TRACE = re.compile(
    r"([\w./+-]{1,200}\.(?:cc|cu|cpp|c|h)):([0-9]{1,6})(?: \([^()]{0,200}\))? ->(?: ?([0-9]{1,3}))?"
    r"(?![0-9])",
    _A,
)
#: ``ncclResult_t`` values (src/nccl.h.in).
RESULT_NAMES = {
    "1": "ncclUnhandledCudaError",
    "2": "ncclSystemError",
    "3": "ncclInternalError",
    "4": "ncclInvalidArgument",
    "5": "ncclInvalidUsage",
    "6": "ncclRemoteError",
    "7": "ncclInProgress",
    "8": "ncclTimeout",
}

# A socket call that failed: a WARN of kind "connect", and a notice when NCCL logs it as INFO.
CONNECT = re.compile(
    r"(?i)(?:connect|recv|send)\w*\b.{0,200}?"
    r"(?:timed out|refused|abort|unreachable|no route to host|reset by peer|timeout)"
)
#: libfabric's ``fi_getinfo: provider efa output empty list`` (or ``returned -61 (No data
#: available)``): the provider has no usable device in this process.
FI_EMPTY = re.compile(
    r"fi_getinfo: provider ([\w;.-]{1,64}) (?:output empty list|returned -[0-9]{1,5}"
    r"(?: \([^)]{0,60}\))?)",
    _A,
)
# The first matching rule names what a WARN (or notable INFO) line is about, for the checks
# that read one kind of failure closely (the catalogue classes every message more broadly).
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # a registration refused for memory (ENOMEM): the locked-memory limit; one refused for
    # another reason (EFAULT on GPU memory) is read by its class
    ("memlock", re.compile(r"ibv_reg_\w{0,20}mr\w{0,20}\b.{0,200}?Cannot allocate memory|"
                           r"RLIMIT_MEMLOCK")),
    # RDMA devices or libibverbs that could not be used: a device NCCL could not open, NCCL
    # failing to load libibverbs, libibverbs failing to load a device's provider (rdma-core
    # libibverbs/init.c, dynamic_driver.c); its other warnings (fork()-safety) are read by their
    # class
    ("ibverbs", re.compile(r"ibv_open_device|Failed to open libibverbs|Unable to open device|"
                           r"ibv_get_device|libibverbs: (?:Fatal|Warning: (?:couldn't load "
                           r"driver|no userspace|Driver ))")),
    # "Got completion from peer 10.1.1.2<46045> with error 12" (NCCL <= 2.22), "... with
    # status=12" / "status=transport retry counter exceeded(12)" (newer); IBV_WC_* names
    ("ib-completion", re.compile(r"[Cc]ompletion .{0,200}?(?:with error|status[ =])|IBV_WC_")),
    ("ib-qp", re.compile(r"ibv_modify_qp|ibv_poll_cq|ibv_create_qp")),
    ("shm", re.compile(r"posix_fallocate|No space left on device|shared memory|[Ss]hmOpen")),
    ("address-family", re.compile(r"neither AF_INET")),
    ("no-interface", re.compile(r"no socket interface|[Nn]o IP interface|no interface found|"
                                r"No usable listening interface")),
    # a process out of file descriptors (glibc's strerror of EMFILE and ENFILE: "Too many open
    # files", "... in system"): every socket it opens or accepts fails, whatever the peer does
    ("open-files", re.compile(r"Too many open files")),
    # an established connection that the peer ended: closed, or reset (glibc's strerror of
    # ECONNRESET and EPIPE, "Connection reset by peer" and "Broken pipe", on a receive or
    # send: the peer's process exited; a refused connect is "connect")
    ("peer-closed", re.compile(r"Connection closed by (?:remote )?peer|(?i:recv|send)\w*\b"
                               r".{0,200}?(?:[Cc]onnection reset by peer|Broken pipe)")),
    # fatal to the communicator: a CUDA call failed, or the proxy thread gave up on a peer
    (
        "fatal",
        re.compile(
            r"Cuda failure|CUDA error|cuda[A-Z]\w{0,40} failed|Proxy Service [0-9]{1,5}\] Failed|"
            r"Failed to execute operation|Error encountered progressing operation"
        ),
    ),
    ("connect", CONNECT),
    ("ofi-no-provider", FI_EMPTY),
    ("plugin", re.compile(r"NET/OFI|NET/Plugin|libnccl-net|[Pp]lugin")),
)


# The catalogue classes a kind's words can belong to: "recv ... timeout" in a RAS or TCPX
# message is not NCCL's socket layer failing, "Cuda failure" in a plugin is the plugin's.
_KIND_CLASSES = {
    "connect": frozenset({"socket", "bootstrap", "net-socket", "interface"}),
    "ib-qp": frozenset({"ibverbs", "net-ib"}),
    "ib-completion": frozenset({"net-ib"}),
    "memlock": frozenset({"ibverbs", "net-ib", "memory"}),
    "shm": frozenset({"shm"}),
    "fatal": frozenset({"cuda", "proxy", "p2p", "net", "init", "launch", "memory"}),
}


@lru_cache(maxsize=4096)
def kind_of(text: str, cls: str | None = None) -> str:
    """What a warning is about, e.g. ``"ibverbs"`` for ``Call to ibv_open_device failed``;
    ``cls``, its class in the catalogue, rules out words that belong to another subsystem."""
    for kind, pattern in _KINDS:
        if pattern.search(text):
            classes = _KIND_CLASSES.get(kind)
            # "system": NCCL's generic wrappers of system calls (SYSCHECK) say nothing narrower
            if cls not in (None, "system") and classes is not None and cls not in classes:
                return "other"
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
        region_start = max(low, pos - 600)
        match = _HEADER.search(_without_source(line[region_start:pos]))
        starts.append(region_start + match.start() if match else pos)
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


def _without_source(head: str) -> str:
    """``head`` without the source location a WARN puts after ``[dev] ``."""
    if head.endswith(("] ", "]")):
        return head
    device = _last(_DEVICE, head[-700:])
    if device is None:
        return head
    return head[: len(head) - len(head[-700:]) + device.end()]


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007  (the last one is wanted)
        pass
    return found


def parse_header(head: str) -> tuple[str, int, int] | None:
    """``"[rank3]:node1:4242:4250 [3] "`` -> ``("node1", 4242, 3)``; None without a prefix.

    Whatever precedes ``host:pid:tid [dev]`` is a decoration, including a timestamp glued to the
    host name (``...-07:00node1:42:42 [0]`` is host ``node1``, not ``00node1``); a WARN's source
    location after it is skipped.
    """
    if len(head) < 600 and (match := _PLAIN_HEADER.fullmatch(head)) is not None:
        # the whole head is the header (the leftmost match, from its first character: nothing
        # before the host can be a timestamp glued to it)
        return match.group(1), int(match.group(2)), int(match.group(3))
    tail = _without_source(head[-900:])[-600:]
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
    """The source location a WARN line names before its marker, e.g. ``misc/ibvwrap.cc:63``
    (without the function 2.30 adds; a plugin's function signature as it printed it)."""
    tail = head[-400:]
    match = _SOURCE.search(tail)
    if match is not None:
        return f"{match.group(1)}:{match.group(2)}"
    device = _last(_DEVICE, tail)
    if device is None:
        return None
    plugin = _ANY_SOURCE.search(tail[device.end() :])
    return f"{plugin.group(1)}:{plugin.group(2)}" if plugin else None
