"""The step that turns what the parser kept (:mod:`clusterenv.nccl_log.state`) into a
:class:`~clusterenv.nccl_log.model.NcclLog`: one :class:`~clusterenv.nccl_log.model.RankInfo`
with its fact table per process, the versions, devices, plugins and messages.

A log of thousands of processes makes as many records, so each is built once, from the
process's own fields (its fact table too: :func:`clusterenv.nccl_log.facts.fact_table`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from clusterenv.nccl_log.facts import fact_table
from clusterenv.nccl_log.model import (
    INTERNAL_NETWORKS,
    GpuDirect,
    NcclLog,
    NetDevice,
    NetPlugin,
    RankInfo,
)

if TYPE_CHECKING:
    from clusterenv.nccl_log.state import FactOps, Plugin, Process

__all__ = ["log_of"]


def log_of(state: FactOps, lines_read: int, lines_matched: int) -> NcclLog:
    """The log as ``state`` holds it after ``lines_read`` lines, ``lines_matched`` recognised."""
    procs = [p for p in state.procs.values() if p.has_facts()]
    # a process whose "Using network" line is missing (cut, or another subsystem's debug
    # output) used the network the other users of its plugin name, when they agree
    networks: dict[int, set[str]] = {}
    for proc in procs:
        if proc.plugin is not None and proc.network and proc.network not in INTERNAL_NETWORKS:
            networks.setdefault(id(proc.plugin), set()).add(proc.network)
    for proc in procs:
        named = networks.get(id(proc.plugin)) if proc.plugin is not None else None
        if named and len(named) == 1 and not proc.plugin_net:
            proc.plugin_net = next(iter(named))
    ranks = sorted(
        map(_rank, procs),
        key=lambda r: (r.rank is None, r.rank or 0, r.host or "", r.pid or 0),
    )
    counts = Counter(p.version for p in procs if p.version)
    counts.update(version for version, _ in state.banners)
    versions = tuple(v for v, _ in counts.most_common())
    if not versions and state.fallback_version:
        versions = (state.fallback_version,)
    env: dict[str, str] = {}
    for rank in ranks:
        if not rank.env.keys() <= env.keys():  # most processes print the same settings
            for name, value in rank.env.items():
                env.setdefault(name, value)
    plugins = dict.fromkeys(p.plugin for p in procs if p.plugin is not None)
    progress = {p.key: p.progress_line for p in state.procs.values()}
    return NcclLog(
        version=versions[0] if versions else None,
        cuda_version=state.cuda,
        versions=versions,
        ranks=tuple(ranks),
        transports=tuple(dict.fromkeys(r.transport for r in ranks if r.transport)),
        devices=tuple(
            NetDevice(network, index, name, port, link, speed, tuple(hosts),
                      tuple(suffixes.split("/")[1:]))
            for (network, name, port), (index, link, speed, hosts, suffixes)
            in state.devices.items()
        ),
        gpudirect=GpuDirect(
            hcas=dict(state.gdr_hcas),
            dmabuf_gpus=tuple(sorted(state.dmabuf)),
            net_channels=sum(r.net_channels for r in ranks),
            gdr_channels=sum(r.gdr_channels for r in ranks),
            distance_disabled=tuple(state.distance_disabled),
        ),
        plugins=tuple(_plugin(p, ranks) for p in plugins if p is not None),
        env=env,
        nranks=state.nranks,
        nnodes=state.nnodes,
        warnings=state.warnings.freeze(progress),
        errors=state.errors.freeze(progress),
        notices=state.notices.freeze(progress),
        lines_read=lines_read,
        lines_matched=lines_matched,
        banners=tuple(state.banners[:64]),
        init_unfinished=tuple((p.key, line) for p in procs if (line := p.unfinished_init())),
        init_complete=sum(1 for p in procs if p.init_done and p.init_done >= p.init_start),
    )


def _rank(proc: Process) -> RankInfo:
    bootstrap = proc.bootstrap
    plugin = proc.plugin.name if proc.plugin else None
    # without "Using network", the network a process used is the plugin network its NET/<name>
    # lines speak for, else what its channels or device lists say
    transport = proc.network or proc.channel_net or proc.plugin_net or proc.inferred
    devices = tuple(proc.devices)
    channel_devices = tuple(sorted(proc.channel_devices))
    failure = proc.failure()
    interface = bootstrap.interface if bootstrap else None
    address = bootstrap.address if bootstrap else None
    facts = fact_table(
        version=proc.version, driver=proc.driver, plugin=plugin, plugin_error=proc.plugin_error,
        plugin_rejected=proc.plugin_rejected, transport=transport,
        channel_devices=channel_devices, bootstrap_interface=interface,
        bootstrap_address=address, oob=proc.oob, devices=devices,
    )
    return RankInfo(
        proc.host, proc.pid, proc.cuda_device, proc.rank, proc.nranks, proc.version,
        interface, address, proc.socket_ifs, proc.oob, transport, devices, plugin,
        proc.net_channels, proc.gdr_channels, dict(proc.env), proc.first_line, channel_devices,
        facts, failure, proc.trace_line if failure else None,
    )


def _plugin(plugin: Plugin, ranks: list[RankInfo]) -> NetPlugin:
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
