"""The streaming parser behind :func:`clusterenv.nccl_log.parse_nccl_log`.

Speed matters (logs of many GB exist): a line without ``NCCL`` costs one substring test; a marker
line costs a ``find``, a slice and a dict lookup of its message text in a cache of facts
(:func:`clusterenv.nccl_log.lines.parse_info` runs once per distinct message); only lines that
state a fact touch the per-process state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from clusterenv.nccl_log.lines import (
    TORCH_ERROR,
    VERSION,
    Fact,
    fi_getinfo,
    find_marker,
    kind_of,
    message_end,
    parse_header,
    parse_info,
    source_of,
    split_messages,
)
from clusterenv.nccl_log.model import (
    INTERNAL_NETWORKS,
    GpuDirect,
    LogMessage,
    NcclLog,
    NetDevice,
    NetPlugin,
    RankInfo,
    SocketEndpoint,
)

__all__ = ["MAX_LINE", "parse_lines", "parse_stream"]

#: Characters of one line that are read; the rest of a longer line is skipped unread, so that a
#: file without newlines (a binary, a log joined into one line) costs bounded memory.
MAX_LINE = 65_536
# Facts that only set something the first time (first value wins, or a union): replaying them
# for a line seen before changes nothing, so a repeated line does not run them again.
_ONCE = frozenset({
    "bootstrap", "comm", "dmabuf", "env", "gdr_distance", "gdr_hca", "ib_device", "ib_using",
    "network", "ofi", "ofi_group", "ofi_provider", "ofi_version", "plugin_external",
    "plugin_loaded", "plugin_requested", "plugin_trouble", "socket", "version",
})

# Distinct messages kept per list; a log of a million different retries stays small.
_MAX_MESSAGES = 500
_MAX_TEXT = 400
# Distinct message texts whose facts are cached, and distinct line prefixes remembered (each
# cache is emptied when full: lines of one process come close together).
_MAX_CACHED = 50_000
# The line cache is first filled to this size to see whether lines repeat at all.
_CACHE_PROBE = 4_096
_MISSING: Any = object()
_TAGS = frozenset({"INFO ", "WARN "})


class _Plugin:
    __slots__ = ("evidence", "library", "name", "nics", "placeholder", "provider", "version")

    def __init__(self, name: str, *, placeholder: bool):
        self.name = name
        self.placeholder = placeholder  # named after its library until NCCL names it
        self.library: str | None = None
        self.version: str | None = None
        self.provider: str | None = None
        self.nics: int | None = None
        self.evidence: dict[str, None] = {}


class _Process:
    """What one process (host, pid) said so far."""

    __slots__ = (
        "bootstrap",
        "channel_devices",
        "channel_net",
        "cuda_device",
        "devices",
        "env",
        "first_line",
        "gdr_channels",
        "host",
        "inferred",
        "net_channels",
        "network",
        "nranks",
        "oob",
        "pid",
        "plugin",
        "rank",
        "socket_ifs",
        "version",
    )

    def __init__(self, host: str | None, pid: int | None, cuda_device: int | None):
        self.host = host
        self.pid = pid
        self.cuda_device = cuda_device
        self.first_line = 0
        self.rank: int | None = None
        self.nranks: int | None = None
        self.version: str | None = None
        self.bootstrap: SocketEndpoint | None = None
        self.socket_ifs: tuple[SocketEndpoint, ...] = ()
        self.oob: SocketEndpoint | None = None
        self.network: str | None = None  # "Using network X": what it used
        self.inferred: str | None = None  # from "NET/IB : Using", for logs without that line
        self.devices: dict[str, None] = {}
        self.plugin: _Plugin | None = None
        self.net_channels = 0
        self.gdr_channels = 0
        self.channel_net: str | None = None  # network of its first "via NET/..." channel
        self.channel_devices: dict[tuple[str, int], None] = {}
        self.env: dict[str, str] = {}

    def has_facts(self) -> bool:
        return self.pid is not None or bool(
            self.bootstrap or self.socket_ifs or self.network or self.inferred or self.env
            or self.version or self.devices or self.plugin or self.channel_net
        )


class _Messages:
    """Messages counted by text, capped at ``_MAX_MESSAGES`` distinct texts."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[str, list[Any]] = {}  # text -> [kind, source, count, line, hosts]

    def add(self, text: str, kind: str, source: str | None, line: int, host: str | None) -> None:
        text = text[:_MAX_TEXT]
        entry = self.entries.get(text)
        if entry is None:
            if len(self.entries) >= _MAX_MESSAGES:
                return
            entry = self.entries[text] = [kind, source, 0, line, {}]
        entry[2] += 1
        if host:
            entry[4][host] = None

    def freeze(self) -> tuple[LogMessage, ...]:
        return tuple(
            LogMessage(text, kind, source, count, first, tuple(hosts))
            for text, (kind, source, count, first, hosts) in self.entries.items()
        )


class _Parser:
    def __init__(self) -> None:
        self.matched = 0
        self.facts: dict[str, Fact | None] = {}
        self.by_head: dict[str, _Process] = {}
        # whole line -> what it does: False (no marker), True (marker, nothing to do) or the
        # actions left to run when the same line comes again (see _analyse)
        self.by_line: dict[str, Any] = {}
        self.procs: dict[tuple[str | None, int | None], _Process] = {}
        self.plugins: dict[str, _Plugin] = {}
        self.cuda: str | None = None
        self.fallback_version: str | None = None
        self.nranks: int | None = None
        self.nnodes: int | None = None
        self.devices: dict[tuple[str, str, int | None], list[Any]] = {}
        self.gdr_hcas: dict[str, bool] = {}
        self.dmabuf: dict[int, None] = {}
        self.distance_disabled: dict[str, None] = {}
        self.warnings = _Messages()
        self.errors = _Messages()
        self.notices = _Messages()
        self.ops: dict[str, Callable[..., None]] = {
            name[4:]: getattr(self, name) for name in dir(self) if name.startswith("_op_")
        }
        self.skip_rest: Callable[[], None] | None = None
        self.cache_from = 0  # line number from which lines are remembered again
        self.cache_start = 0  # line number where the line cache was last emptied
        self.cache_limit = _CACHE_PROBE  # entries at which the line cache is reviewed

    # -- reading ------------------------------------------------------------------------------

    def feed(self, lines: Iterable[str]) -> int:
        """Read every line; returns how many there were.

        The hot path is one dict lookup per line: a line seen before (every rank prints the same
        lines, jobs repeat them) replays only the actions that still change something. A line
        seen for the first time with one ``NCCL INFO`` message is handled inline (no call);
        anything else goes through :meth:`_analyse`.
        """
        by_line, facts, by_head, ops = self.by_line, self.facts, self.by_head, self.ops
        get, get_fact, get_proc = by_line.get, facts.get, by_head.get
        analyse, new_fact, new_proc = self._analyse, self._fact, self._proc
        once, missing, limit = _ONCE, _MISSING, MAX_LINE
        number = matched = 0
        cache_from, cache_limit = self.cache_from, self.cache_limit
        for number, line in enumerate(lines, 1):
            # while the line cache is off (lines did not repeat), do not even hash the line
            actions = get(line) if number >= cache_from else None
            if actions is None:
                pos = line.find("NCCL ")
                if (pos < 0 or line[pos + 5 : pos + 10] != "INFO " or len(line) >= limit
                        or (line.find("NCCL ", pos + 10) >= 0
                            and find_marker(line, pos + 10) >= 0)):
                    matched += analyse(line, number)  # ran its actions, remembered the line
                    cache_from, cache_limit = self.cache_from, self.cache_limit
                    continue
                msg = line[pos + 10 :].strip()
                if "|" in msg or '"' in msg:  # an export's column or quote: rare
                    msg = message_end(msg)
                fact = get_fact(msg, missing)
                if fact is missing:
                    fact = new_fact(msg)
                matched += 1
                if fact is None:
                    result: Any = True
                else:
                    head = line[:pos]
                    proc = get_proc(head) or new_proc(head)
                    op = ops[fact[0]]
                    if not proc.first_line:
                        proc.first_line = number
                    op(proc, msg, number, fact)
                    result = True if fact[0] in once else ((op, proc, msg, fact),)
                if number >= cache_from:
                    if len(by_line) >= cache_limit:
                        self._cache_full(number)
                        cache_from, cache_limit = self.cache_from, self.cache_limit
                    by_line[line] = result
                continue
            if actions is False:
                continue
            matched += 1
            if actions is not True:
                for op, proc, msg, fact in actions:
                    op(proc, msg, number, fact)
        self.matched += matched
        return number

    def _analyse(self, line: str, number: int) -> Any:
        """What a line not seen before does (the cases :meth:`feed` does not handle inline: no
        marker, a WARN, several messages, an over-long line): runs its actions once and
        remembers what a repeat of the line must run again. Returns whether it has a marker."""
        cache = True
        if len(line) >= MAX_LINE and line[-1:] != "\n":
            if self.skip_rest is not None:
                self.skip_rest()  # the rest of an over-long line is not read (memory bound)
            line, cache = line[:MAX_LINE], False
        pos = line.find("NCCL ")
        if pos >= 0 and line[pos + 5 : pos + 10] not in _TAGS:
            pos = find_marker(line, pos + 5)
        result: Any
        if pos < 0:
            self._unmarked(line, number)
            result = False
        else:
            result = self._messages(line, pos, number)
        if cache and number >= self.cache_from:
            if len(self.by_line) >= self.cache_limit:
                self._cache_full(number)
            self.by_line[line] = result
        return result is not False

    def _cache_full(self, number: int) -> None:
        """Review the line cache when it reaches its limit, then empty it (memory stays bounded).

        Fewer lines read since it was last emptied than twice what it holds means repeats are
        rare (a counter or a timestamp in every line): remembering lines then costs more than it
        saves, so it stops for a while and is tried again later on a small sample first.
        """
        if number - self.cache_start < 2 * len(self.by_line):
            self.cache_from = number + 20 * _MAX_CACHED
            self.cache_limit = _CACHE_PROBE
        else:
            self.cache_limit = _MAX_CACHED
        self.by_line.clear()
        self.cache_start = max(number, self.cache_from)

    def _messages(self, line: str, pos: int, number: int) -> Any:
        """A WARN line, or a line holding several messages: run them, return the repeatable."""
        actions = []
        if find_marker(line, pos + 10) < 0:  # one message ("NCCL version ...", a WARN)
            parts = [(line[:pos], message_end(line[pos + 10 :]), line[pos + 5] == "W")]
        else:
            parts = split_messages(line, pos)
        for head, msg, is_warn in parts:
            action = self._warn_action(head, msg) if is_warn else self._info_action(head, msg)
            if action is not None:
                actions.append(action)
        for op, proc, msg, fact in actions:
            proc.first_line = proc.first_line or number
            op(proc, msg, number, fact)
        # facts that only set something once (first value wins) need not run again
        return tuple(a for a in actions if a[3][0] not in _ONCE) or True

    def _fact(self, msg: str) -> Fact | None:
        fact = parse_info(msg)
        if len(self.facts) >= _MAX_CACHED:
            self.facts.clear()
        self.facts[msg] = fact
        return fact

    def _info_action(self, head: str, msg: str) -> tuple[Any, ...] | None:
        fact = self.facts.get(msg, _MISSING)
        if fact is _MISSING:
            fact = self._fact(msg)
        if fact is None:
            return None
        return (self.ops[fact[0]], self._proc(head), msg, fact)

    def _warn_action(self, head: str, msg: str) -> tuple[Any, ...]:
        text = msg[:_MAX_TEXT]
        return (self._op_warn, self._proc(head), msg, ("warn", kind_of(text), source_of(head)))

    def _proc(self, head: str) -> _Process:
        proc = self.by_head.get(head)
        if proc is not None:
            return proc
        header = parse_header(head)
        key = (header[0], header[1]) if header else (None, None)
        proc = self.procs.get(key)
        if proc is None:
            device = header[2] if header else None
            proc = self.procs[key] = _Process(key[0], key[1], device)
        if len(self.by_head) >= _MAX_CACHED:
            self.by_head.clear()
        self.by_head[head] = proc
        return proc

    def _unmarked(self, line: str, number: int) -> None:
        """A line without a marker: PyTorch's ``NCCL error``, ``NCCL_DEBUG=VERSION`` output,
        libfabric's own log (``fi_getinfo: provider efa output empty list``)."""
        if "fi_getinfo" in line and fi_getinfo(line) is not None:
            text = line[line.find("fi_getinfo") :].strip()
            self.notices.add(text, "ofi-no-provider", None, number, None)
        if "NCCL" not in line:
            return
        if TORCH_ERROR.search(line):
            self.errors.add(line.strip(), "nccl-error", None, number, None)
        match = VERSION.search(line)
        if match and self.fallback_version is None:
            self.fallback_version = match.group(1)

    def _op_warn(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        _, kind, source = fact
        self.warnings.add(msg, kind, source, number, proc.host)
        if kind == "plugin" and proc.plugin:
            proc.plugin.evidence[msg[:_MAX_TEXT]] = None

    # -- facts: one method per fact name of parse_info, each given (process, message, line, fact)

    def _op_bootstrap(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        proc.bootstrap = proc.bootstrap or fact[1]

    def _op_notice(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        self.notices.add(msg, fact[1], None, number, proc.host)

    def _op_socket(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        proc.socket_ifs = proc.socket_ifs or fact[1]
        proc.inferred = proc.inferred or "Socket"

    def _op_ib_using(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        _, network, devices, oob = fact
        for index, name, port, link, suffixes in devices:
            self._device(proc, network, index, name, port, link=link, suffixes=suffixes)
        proc.oob = proc.oob or oob
        if proc.inferred in (None, "Socket"):  # NCCL tries RDMA first, sockets when it fails
            proc.inferred = network

    def _op_ib_device(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        _, network, index, name, port, link, speed = fact
        self._device(proc, network, index, name, port, link=link, speed=speed)

    def _device(
        self,
        proc: _Process,
        network: str,
        index: str,
        name: str,
        port: str | None,
        *,
        link: str | None = None,
        speed: str | None = None,
        suffixes: str = "",
    ) -> None:
        port_number = int(port) if port is not None else None
        key = (network, name, port_number)
        entry = self.devices.get(key)
        if entry is None:
            # index, link, speed, hosts, suffixes ("/SHARP"), the processes' indices
            entry = self.devices[key] = [int(index), link, None, {}, suffixes]
        if speed is not None:
            entry[2] = int(speed)
        if suffixes and not entry[4]:
            entry[4] = suffixes
        if proc.host:
            entry[3][proc.host] = None
        label = name if port_number is None else f"{name}:{port_number}"
        label = f"{label}/{link}" if link else label
        proc.devices[label + (entry[4] or "")] = None

    def _op_gdr_hca(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        _, name, enabled = fact
        self.gdr_hcas[name] = self.gdr_hcas.get(name, True) and enabled

    def _op_gdr_distance(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        if len(self.distance_disabled) < _MAX_MESSAGES:
            self.distance_disabled[fact[1]] = None

    def _op_dmabuf(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        self.dmabuf[fact[1]] = None

    def _op_channel(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        _, network, index, receive, gdr = fact
        proc.channel_net = proc.channel_net or network
        proc.channel_devices[(network, index)] = None
        if receive and network != "Socket":  # sockets never use GPUDirect RDMA
            proc.net_channels += 1
            proc.gdr_channels += gdr

    def _op_comm(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        _, rank, nranks, nnodes = fact
        if rank is not None and proc.rank is None:
            proc.rank, proc.nranks = rank, nranks
        if nranks is not None:
            self.nranks = max(self.nranks or 0, nranks)
        if nnodes is not None:
            self.nnodes = max(self.nnodes or 0, nnodes)

    def _op_version(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        proc.version = proc.version or fact[1]
        self.cuda = self.cuda or fact[2]

    def _op_env(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        proc.env.setdefault(fact[1], fact[2])

    def _op_network(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        proc.network = proc.network or fact[1]

    def _op_trace(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        _, source, text = fact
        self.errors.add(text, "error-trace", source, number, proc.host)
        if proc.plugin and "net.cc" in source:
            proc.plugin.evidence[text] = None

    # -- plugins: a process names its plugin by library first, by NCCL's name later ----------

    def _placeholder(self, proc: _Process, name: str) -> _Plugin:
        if proc.plugin is None:
            plugin = self.plugins.get(name)
            if plugin is None:
                plugin = self.plugins[name] = _Plugin(name, placeholder=True)
            proc.plugin = plugin
        return proc.plugin

    def _op_plugin_requested(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        self._placeholder(proc, fact[1]).library = fact[1]

    def _op_plugin_external(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        library = fact[1]
        plugin = self._placeholder(proc, library or "libnccl-net.so")
        plugin.library = plugin.library or library or None

    def _op_plugin_loaded(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        name, current = fact[1], proc.plugin
        plugin = self.plugins.get(name)
        if plugin is None:
            if current is not None and current.placeholder:
                plugin = current
                plugin.name, plugin.placeholder = name, False
            else:
                plugin = _Plugin(name, placeholder=False)
            self.plugins[name] = plugin
        elif current is not None and current is not plugin:
            plugin.library = plugin.library or current.library
            plugin.evidence.update(current.evidence)
        proc.plugin = plugin

    def _op_plugin_trouble(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        if proc.plugin:
            proc.plugin.evidence[msg[:_MAX_TEXT]] = None

    def _op_ofi(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        self._placeholder(proc, "aws-ofi-nccl")

    def _op_ofi_version(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        self._placeholder(proc, "aws-ofi-nccl").version = fact[1]

    def _op_ofi_provider(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        _, provider, nics = fact
        plugin = self._placeholder(proc, "aws-ofi-nccl")
        plugin.provider = provider
        plugin.nics = nics if nics is not None else plugin.nics

    def _op_ofi_group(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        self._placeholder(proc, "aws-ofi-nccl")
        self._device(proc, "OFI", fact[1], fact[2], None)

    def _op_ofi_trouble(self, proc: _Process, msg: str, number: int, fact: Fact) -> None:
        self._placeholder(proc, "aws-ofi-nccl").evidence[msg[:_MAX_TEXT]] = None
        self.notices.add(msg, "plugin", None, number, proc.host)

    # -- the result ---------------------------------------------------------------------------

    def finish(self, lines_read: int) -> NcclLog:
        procs = [p for p in self.procs.values() if p.has_facts()]
        ranks = sorted(
            (_rank(p) for p in procs),
            key=lambda r: (r.rank is None, r.rank or 0, r.host or "", r.pid or 0),
        )
        counts = Counter(p.version for p in procs if p.version)
        versions = tuple(v for v, _ in counts.most_common())
        if not versions and self.fallback_version:
            versions = (self.fallback_version,)
        env: dict[str, str] = {}
        for rank in ranks:
            for name, value in rank.env.items():
                env.setdefault(name, value)
        plugins = dict.fromkeys(p.plugin for p in procs if p.plugin is not None)
        return NcclLog(
            version=versions[0] if versions else None,
            cuda_version=self.cuda,
            versions=versions,
            ranks=tuple(ranks),
            transports=tuple(dict.fromkeys(r.transport for r in ranks if r.transport)),
            devices=tuple(
                NetDevice(network, index, name, port, link, speed, tuple(hosts),
                          tuple(suffixes.split("/")[1:]))
                for (network, name, port), (index, link, speed, hosts, suffixes)
                in self.devices.items()
            ),
            gpudirect=GpuDirect(
                hcas=dict(self.gdr_hcas),
                dmabuf_gpus=tuple(sorted(self.dmabuf)),
                net_channels=sum(r.net_channels for r in ranks),
                gdr_channels=sum(r.gdr_channels for r in ranks),
                distance_disabled=tuple(self.distance_disabled),
            ),
            plugins=tuple(_plugin(p, ranks) for p in plugins if p is not None),
            env=env,
            nranks=self.nranks,
            nnodes=self.nnodes,
            warnings=self.warnings.freeze(),
            errors=self.errors.freeze(),
            notices=self.notices.freeze(),
            lines_read=lines_read,
            lines_matched=self.matched,
        )


def _rank(proc: _Process) -> RankInfo:
    bootstrap = proc.bootstrap
    return RankInfo(
        host=proc.host,
        pid=proc.pid,
        cuda_device=proc.cuda_device,
        rank=proc.rank,
        nranks=proc.nranks,
        version=proc.version,
        bootstrap_interface=bootstrap.interface if bootstrap else None,
        bootstrap_address=bootstrap.address if bootstrap else None,
        socket_interfaces=proc.socket_ifs,
        oob=proc.oob,
        transport=proc.network or proc.channel_net or proc.inferred,
        devices=tuple(proc.devices),
        plugin=proc.plugin.name if proc.plugin else None,
        net_channels=proc.net_channels,
        gdr_channels=proc.gdr_channels,
        channel_devices=tuple(sorted(proc.channel_devices)),
        env=dict(proc.env),
        first_line=proc.first_line,
    )


def _plugin(plugin: _Plugin, ranks: list[RankInfo]) -> NetPlugin:
    users = [r for r in ranks if r.plugin == plugin.name]
    return NetPlugin(
        name=plugin.name,
        library=plugin.library,
        version=plugin.version,
        provider=plugin.provider,
        nics=plugin.nics,
        used=any(r.transport and r.transport not in INTERNAL_NETWORKS for r in users),
        failed=any(r.transport in INTERNAL_NETWORKS for r in users),
        evidence=tuple(plugin.evidence)[:20],
    )


def parse_lines(lines: Iterable[str]) -> NcclLog:
    """Parse log lines (see :func:`clusterenv.nccl_log.parse_nccl_log`)."""
    parser = _Parser()
    return parser.finish(parser.feed(lines))


def parse_stream(stream: Any) -> NcclLog:
    """Parse an open text file, reading at most :data:`MAX_LINE` characters of any line."""
    readline = getattr(stream, "readline", None)
    if readline is None:
        return parse_lines(stream)
    parser = _Parser()

    def skip_rest() -> None:
        while True:
            piece = readline(MAX_LINE)
            if not piece or piece.endswith("\n"):
                return

    parser.skip_rest = skip_rest
    return parser.finish(parser.feed(iter(partial(readline, MAX_LINE), "")))
