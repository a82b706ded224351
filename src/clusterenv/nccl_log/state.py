"""What the parser keeps while it reads: one record per process, the messages counted by text,
and the plugins (:mod:`clusterenv.nccl_log.result` turns them into a
:class:`~clusterenv.nccl_log.model.NcclLog`).

:class:`FactOps` applies the facts of :func:`~clusterenv.nccl_log.info.parse_info` (one method
per fact name, each given the process, the message, its line number and the fact); the reading
loop (:mod:`clusterenv.nccl_log.parse`) inherits it.
"""

from __future__ import annotations

from typing import Any

from clusterenv.nccl_log.catalogue import CatalogueMatch
from clusterenv.nccl_log.info import Fact
from clusterenv.nccl_log.model import LogMessage, SocketEndpoint

__all__ = ["MAX_MESSAGES", "MAX_TEXT", "FactOps", "Messages", "Plugin", "Process"]

# Distinct messages kept per list; a log of a million different retries stays small.
MAX_MESSAGES = 500
MAX_TEXT = 400
_MAX_PROCESSES = 16


class Plugin:
    """An external network plugin as the processes named it."""

    __slots__ = ("evidence", "library", "name", "nics", "placeholder", "provider", "version")

    def __init__(self, name: str, *, placeholder: bool):
        self.name = name
        self.placeholder = placeholder  # named after its library until NCCL names it
        self.library: str | None = None
        self.version: str | None = None
        self.provider: str | None = None
        self.nics: int | None = None
        self.evidence: dict[str, None] = {}


class Process:
    """What one process (host, pid) said so far."""

    __slots__ = (
        "bootstrap", "chain", "channel_devices", "channel_net", "cuda_device", "devices",
        "driver", "env", "first_line", "gdr_channels", "host", "inferred", "init_done",
        "init_start", "inits", "key", "net_channels",
        "network", "nranks", "oob", "pid", "plugin", "plugin_error", "plugin_net",
        "plugin_rejected", "progress_line", "rank", "socket_ifs", "trace_code", "trace_line",
        "version",
    )

    def __init__(self, host: str | None, pid: int | None, cuda_device: int | None):
        self.host = host
        self.pid = pid
        self.key = f"{host or '?'}:{pid}" if pid is not None else "unprefixed lines"
        self.cuda_device = cuda_device
        self.first_line = 0
        self.rank: int | None = None
        self.nranks: int | None = None
        self.version: str | None = None
        self.driver: str | None = None
        self.bootstrap: SocketEndpoint | None = None
        self.socket_ifs: tuple[SocketEndpoint, ...] = ()
        self.oob: SocketEndpoint | None = None
        self.network: str | None = None  # "Using network X": what it used
        self.inferred: str | None = None  # from "NET/IB : Using", for logs without that line
        self.plugin_net: str | None = None  # a plugin network's own NET/<name> lines
        self.devices: dict[str, None] = {}
        self.plugin: Plugin | None = None
        self.plugin_error: str | None = None  # the dlopen error of a plugin library
        self.plugin_rejected: str | None = None
        self.net_channels = 0
        self.gdr_channels = 0
        self.channel_net: str | None = None  # network of its first "via NET/..." channel
        self.channel_devices: dict[tuple[str, int], None] = {}
        self.env: dict[str, str] = {}
        # the return chain since the last sign of progress: its first step, its last line
        self.chain: str | None = None
        self.trace_line = 0
        self.trace_code: str | None = None
        self.progress_line = 0
        # the last "Init START" and "Init COMPLETE" of ncclCommInitRank it printed (lines)
        self.init_start = 0
        self.init_done = 0
        # the communicators (by the pointer NCCL prints) whose Init START has no Init COMPLETE
        # yet, with the line of the START: one may hang while another of the process finished
        self.inits: dict[str, int] = {}

    def has_facts(self) -> bool:
        return self.pid is not None or bool(
            self.bootstrap or self.socket_ifs or self.network or self.inferred or self.env
            or self.version or self.devices or self.plugin or self.channel_net or self.chain
        )

    def unfinished_init(self) -> int:
        """The line of the first ``Init START`` of a communicator of this process after which
        the log shows neither its ``Init COMPLETE`` nor an error; 0 when there is none.

        Communicators are told apart by the pointer NCCL prints (``comm 0x...``); without one,
        the last start is compared with the last completion."""
        start = min(self.inits.values(), default=0)
        if not start and self.init_start > self.init_done:
            start = self.init_start
        if not start or (self.failure() is not None and self.trace_line > start):
            return 0
        return start

    def failure(self) -> str | None:
        """The return chain that ended its call: one after which nothing shows NCCL went on."""
        if self.chain is None or self.trace_line <= self.progress_line:
            return None
        return self.chain


class Messages:
    """Messages counted by text, capped at ``MAX_MESSAGES`` distinct texts."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        # text -> [kind, source, count, first line, hosts, match, processes, last line]
        self.entries: dict[str, list[Any]] = {}

    def add(self, text: str, kind: str, source: str | None, line: int,  # noqa: PLR0917
            proc: Process | None, match: CatalogueMatch | None = None, times: int = 1) -> None:
        if len(text) > MAX_TEXT:
            text = text[:MAX_TEXT]
        entry = self.entries.get(text)
        if entry is None:
            if len(self.entries) >= MAX_MESSAGES:
                return
            entry = self.entries[text] = [kind, source, 0, line, {}, match, {}, line]
        entry[2] += times
        entry[7] = max(entry[7], line)
        if proc is not None:
            if proc.host:
                entry[4][proc.host] = None
            if len(entry[6]) < _MAX_PROCESSES:
                entry[6][proc.key] = None

    def freeze(self, progress: dict[str, int]) -> tuple[LogMessage, ...]:
        """The messages, ``progress`` giving the line of each process's last sign of progress
        (by ``host:pid``): a message carried on when every process that printed it made
        progress after its last appearance."""
        return tuple(
            LogMessage(text, kind, source, count, first, tuple(hosts),
                       cls=match.cls if match else None,
                       origin=match.origin if match else None,
                       fails=bool(match and match.fails), processes=tuple(processes),
                       carried_on=bool(processes) and all(
                           progress.get(key, 0) > last for key in processes))
            for text, (kind, source, count, first, hosts, match, processes, last)
            in self.entries.items()
        )


class FactOps:
    """The per-fact handlers and the parser's state they write."""

    def __init__(self) -> None:
        self.procs: dict[tuple[str | None, int | None], Process] = {}
        self.plugins: dict[str, Plugin] = {}
        self.cuda: str | None = None
        self.fallback_version: str | None = None
        self.banners: list[tuple[str, int]] = []
        self.nranks: int | None = None
        self.nnodes: int | None = None
        self.devices: dict[tuple[str, str, int | None], list[Any]] = {}
        # NET/IB device lists (by the id of the tuple, which each entry keeps alive): the list,
        # the hosts that gave it, the labels a process lists (valid while no device gained a
        # suffix since: self.suffixed), then per device its key, index, link, suffixes, label
        self.device_lists: dict[int, list[Any]] = {}
        self.suffixed = 0  # devices that gained a suffix ("/SHARP")
        self.gdr_hcas: dict[str, bool] = {}
        self.dmabuf: dict[int, None] = {}
        self.distance_disabled: dict[str, None] = {}
        self.warnings = Messages()
        self.errors = Messages()
        self.notices = Messages()

    # The ops a line seen before replays take ``times``: that many of its lines at once, the
    # last at line ``number`` (the block reader's bulk replay, blocks.BlockParser._bulk). A
    # progress mark only ever moves forward, so that lines replayed out of order leave the
    # latest.

    def _op_warn(self, proc: Process, msg: str, number: int, fact: Fact, times: int = 1) -> None:
        _, kind, source, match = fact
        self.warnings.add(msg, kind, source, number, proc, match, times)
        if kind == "plugin" and proc.plugin:
            proc.plugin.evidence[msg[:MAX_TEXT]] = None

    def _op_bootstrap(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        proc.bootstrap = proc.bootstrap or fact[1]

    def _op_notice(self, proc: Process, msg: str, number: int, fact: Fact,
                   times: int = 1) -> None:
        self.notices.add(msg, fact[1], None, number, proc, None, times)

    def _op_info_failure(self, proc: Process, msg: str, number: int, fact: Fact,
                         times: int = 1) -> None:
        match: CatalogueMatch = fact[2]
        target = self.errors if match.fatal else self.notices
        target.add(msg, fact[1], None, number, proc, match, times)

    def _op_socket(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        proc.socket_ifs = proc.socket_ifs or fact[1]
        proc.inferred = proc.inferred or "Socket"
        proc.progress_line = number

    def _op_ib_using(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        _, network, devices, oob = fact
        # every process of a job lists the same devices: what each entry needs is worked out
        # once per list (what _device does), and the list a host gave once per host
        plan = self.device_lists.get(id(devices))
        if plan is None or plan[0] is not devices:
            if len(self.device_lists) >= MAX_MESSAGES:
                self.device_lists.clear()
            plan = self.device_lists[id(devices)] = [devices, {}, -1, []] + [
                ((network, name, int(port)), int(index), link, suffixes,
                 f"{name}:{int(port)}/{link}" if link else f"{name}:{int(port)}")
                for index, name, port, link, suffixes in devices
            ]
        host = proc.host
        if plan[2] != self.suffixed or (host and host not in plan[1]):
            known, before, labels = self.devices, self.suffixed, []
            for key, index, link, suffixes, label in plan[4:]:
                entry = known.get(key)
                if entry is None:
                    entry = known[key] = [index, link, None, {}, suffixes]
                if suffixes and not entry[4]:
                    entry[4] = suffixes
                    self.suffixed += 1
                if host:
                    entry[3][host] = None
                labels.append(label + entry[4] if entry[4] else label)
            if host:
                plan[1][host] = None
            # the labels hold while no device gains a suffix (one that did during this loop may
            # be labelled otherwise by the next process)
            plan[2] = self.suffixed if self.suffixed == before else -1
            plan[3] = labels
        proc.devices.update(dict.fromkeys(plan[3]))
        proc.oob = proc.oob or oob
        if proc.inferred in (None, "Socket"):  # NCCL tries RDMA first, sockets when it fails
            proc.inferred = network
        proc.progress_line = number

    def _op_ib_device(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        _, network, index, name, port, link, speed = fact
        self._device(proc, network, index, name, port, link=link, speed=speed)

    def _device(self, proc: Process, network: str, index: str, name: str, port: str | None, *,
                link: str | None = None, speed: str | None = None, suffixes: str = "") -> None:
        port_number = int(port) if port is not None else None
        key = (network, name, port_number)
        entry = self.devices.get(key)
        if entry is None:
            # index, link, speed, hosts, suffixes ("/SHARP")
            entry = self.devices[key] = [int(index), link, None, {}, suffixes]
        if speed is not None:
            entry[2] = int(speed)
        if suffixes and not entry[4]:
            entry[4] = suffixes
            self.suffixed += 1
        if proc.host:
            entry[3][proc.host] = None
        label = name if port_number is None else f"{name}:{port_number}"
        label = f"{label}/{link}" if link else label
        proc.devices[label + (entry[4] or "")] = None

    def _op_gdr_hca(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        _, name, enabled = fact
        self.gdr_hcas[name] = self.gdr_hcas.get(name, True) and enabled

    def _op_gdr_distance(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        if len(self.distance_disabled) < MAX_MESSAGES:
            self.distance_disabled[fact[1]] = None

    def _op_dmabuf(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        self.dmabuf[fact[1]] = None

    def _op_channel(self, proc: Process, msg: str, number: int, fact: Fact,
                    times: int = 1) -> None:
        _, network, index, receive, gdr = fact
        self.channels(proc, (network, index), receive, gdr, times, number)

    def channels(self, proc: Process, device: tuple[str, int], receive: bool,  # noqa: PLR0917
                 gdr: bool, times: int, number: int) -> None:
        """``times`` channel lines of ``proc`` through ``device`` (network, index), the last
        at line ``number``."""
        proc.channel_net = proc.channel_net or device[0]
        proc.channel_devices[device] = None
        if receive and device[0] != "Socket":  # sockets never use GPUDirect RDMA
            proc.net_channels += times
            proc.gdr_channels += times if gdr else 0
        proc.progress_line = max(proc.progress_line, number)

    def _op_comm(self, proc: Process, msg: str, number: int, fact: Fact, times: int = 1) -> None:
        _, rank, nranks, nnodes, complete, start, pointer = fact
        if start:
            proc.init_start = max(proc.init_start, number)
            if pointer is not None:
                proc.inits[pointer] = number
        if complete:
            proc.init_done = max(proc.init_done, number)
            if pointer is not None and proc.inits.get(pointer, number + 1) <= number:
                del proc.inits[pointer]
        if rank is not None and proc.rank is None:
            proc.rank, proc.nranks = rank, nranks
        if nranks is not None:
            self.nranks = max(self.nranks or 0, nranks)
        if nnodes is not None:
            self.nnodes = max(self.nnodes or 0, nnodes)
        if complete and number > proc.progress_line:
            proc.progress_line = number

    def _op_progress(self, proc: Process, msg: str, number: int, fact: Fact,
                     times: int = 1) -> None:
        proc.progress_line = max(proc.progress_line, number)

    def _op_version(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        proc.version = proc.version or fact[1]
        self.cuda = self.cuda or fact[2]

    def _op_driver(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        proc.driver = proc.driver or fact[1]

    def _op_env(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        proc.env.setdefault(fact[1], fact[2])

    def _op_network(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        proc.network = proc.network or fact[1]
        proc.progress_line = number

    def _op_net_named(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        proc.plugin_net = proc.plugin_net or fact[1]

    def _op_trace(self, proc: Process, msg: str, number: int, fact: Fact, times: int = 1) -> None:
        _, source, code, text = fact
        self.errors.add(text, "error-trace", source, number, proc, None, times)
        if proc.plugin and "net.cc" in source:
            proc.plugin.evidence[text] = None
        if code == "7":
            return  # ncclInProgress: a non-blocking call saying "later", not an error
        if proc.chain is None or proc.progress_line > proc.trace_line:
            proc.chain = text  # the first (deepest) step of a new chain
        proc.trace_line, proc.trace_code = number, code

    # -- plugins: a process names its plugin by library first, by NCCL's name later ----------

    def _placeholder(self, proc: Process, name: str) -> Plugin:
        if proc.plugin is None:
            plugin = self.plugins.get(name)
            if plugin is None:
                plugin = self.plugins[name] = Plugin(name, placeholder=True)
            proc.plugin = plugin
        return proc.plugin

    def _op_plugin_requested(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        self._placeholder(proc, fact[1]).library = fact[1]

    def _op_plugin_external(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        library = fact[1]
        plugin = self._placeholder(proc, library or "libnccl-net.so")
        plugin.library = plugin.library or library or None

    def _op_plugin_loaded(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        name, current = fact[1], proc.plugin
        plugin = self.plugins.get(name)
        if plugin is None:
            if current is not None and current.placeholder:
                plugin = current
                plugin.name, plugin.placeholder = name, False
            else:
                plugin = Plugin(name, placeholder=False)
            self.plugins[name] = plugin
        elif current is not None and current is not plugin:
            plugin.library = plugin.library or current.library
            plugin.evidence.update(current.evidence)
        proc.plugin = plugin

    def _op_plugin_trouble(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        if proc.plugin:
            proc.plugin.evidence[msg[:MAX_TEXT]] = None

    def _op_plugin_error(self, proc: Process, msg: str, number: int, fact: Fact,
                         times: int = 1) -> None:
        proc.plugin_error = proc.plugin_error or fact[1][:MAX_TEXT]
        self.notices.add(msg, "plugin-load", None, number, proc, None, times)

    def _op_plugin_absent(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        # no plugin library installed: the loader's words, for the process's facts (a failure
        # only when NCCL_NET_PLUGIN asked for one: plugins._absent), no notice
        proc.plugin_error = proc.plugin_error or fact[1][:MAX_TEXT]

    def _op_plugin_rejected(self, proc: Process, msg: str, number: int, fact: Fact,
                            times: int = 1) -> None:
        proc.plugin_rejected = proc.plugin_rejected or fact[1]
        self.notices.add(msg, "plugin-load", None, number, proc, None, times)

    def _op_ofi(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        self._placeholder(proc, "aws-ofi-nccl")

    def _op_ofi_version(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        self._placeholder(proc, "aws-ofi-nccl").version = fact[1]

    def _op_ofi_provider(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        _, provider, nics = fact
        plugin = self._placeholder(proc, "aws-ofi-nccl")
        plugin.provider = provider
        plugin.nics = nics if nics is not None else plugin.nics

    def _op_ofi_group(self, proc: Process, msg: str, number: int, fact: Fact) -> None:
        self._placeholder(proc, "aws-ofi-nccl")
        self._device(proc, "OFI", fact[1], fact[2], None)

    def _op_ofi_trouble(self, proc: Process, msg: str, number: int, fact: Fact,
                        times: int = 1) -> None:
        self._placeholder(proc, "aws-ofi-nccl").evidence[msg[:MAX_TEXT]] = None
        self.notices.add(msg, "plugin", None, number, proc, None, times)
