"""Who stopped: comparing the ranks' last collectives, group by group.

Within one process group every member calls the same collectives in the same order, and torch
numbers them (``collective_seq_id``). So the ranks' last numbers say who is behind: the highest
number any rank reached is the collective some ranks *entered*; a member whose last number is
lower never entered it (it is stuck before it, or elsewhere), and a member with no dump at all
left no evidence (it died, was killed before it could write one, or its dump is on a node that
was not read). With Gloo every entry stays ``scheduled``, so the numbers are all there is; NCCL
also says whether a collective ``completed``.

Group members come from the dump's ``pg_config`` (NCCL), else, for the default group, every rank
of the job (the world size from the launch records or clusterenv's notes), else only the ranks
whose dumps name the group (a Gloo subgroup: a member that never used it cannot be seen).
Point-to-point calls are numbered per rank, not per group, so they are shown, never compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from clusterenv.hang.model import Call, GroupTrace, RankDump, ranks_text
from clusterenv.hang.record import LaunchRecord
from clusterenv.hang.report import HangReport, NodeInfo, RankState, RankView, Stall, Verdict

__all__ = ["attribute"]

# -- ranks to nodes ------------------------------------------------------------------------------


@dataclass
class _Place:
    node_rank: int | None = None
    host: str | None = None
    addr: str | None = None
    source: str = ""


def _world(dumps: Sequence[RankDump], records: Sequence[LaunchRecord],
           layout: tuple[int, int] | None) -> tuple[int | None, str]:
    for record in records:
        return record.world_size, f"launch record of node {record.node_rank}"
    for dump in dumps:
        if dump.world_size:
            return dump.world_size, f"clusterenv's note beside rank {dump.rank}'s dump"
    for dump in dumps:
        for group in dump.groups:
            if group.desc == "default_pg" and group.ranks:
                return len(group.ranks), f"pg_config of rank {dump.rank}'s dump"
    if layout is not None:
        return layout[0] * layout[1], (f"NUM_NODES x NUM_TRAINERS ({layout[0]} x {layout[1]}) "
                                       "of the cluster contract")
    return None, "unknown (no launch record, note or NCCL group config)"


def _places(dumps: Sequence[RankDump], records: Sequence[LaunchRecord],
            world: int | None, layout: tuple[int, int] | None) -> dict[int, _Place]:
    places: dict[int, _Place] = {}
    if records:
        layout = (records[0].num_nodes, records[0].nproc_per_node)
    if layout is not None:
        nodes, nproc = layout
        for rank in range(world or 0):
            if rank // nproc < nodes:
                places[rank] = _Place(rank // nproc, source=f"computed: {nodes} nodes x "
                                      f"{nproc} processes (torchrun's static ranks)")
    for record in records:
        for rank in record.ranks:
            places[rank] = _Place(record.node_rank, record.host, record.node_addr,
                                  "launch record")
    for dump in dumps:
        place = places.setdefault(dump.rank, _Place())
        if dump.reported_by is not None:
            place.addr = dump.reported_by
            if not place.source or place.source.startswith("computed"):
                place.source = "the node that sent its dump"
        if dump.node_rank is not None:
            place.node_rank = dump.node_rank
            place.source = place.source or "clusterenv's note beside the dump"
        if dump.host:
            place.host = dump.host
            place.source = place.source or "the dump's file name"
    return places


def _nodes(places: Mapping[int, _Place], records: Sequence[LaunchRecord],
           reported: Mapping[int, bool] | None) -> tuple[NodeInfo, ...]:
    by_node: dict[tuple[bool, int, str], list[int]] = {}
    first: dict[tuple[bool, int, str], _Place] = {}
    for rank, place in sorted(places.items()):
        key = (place.node_rank is None, place.node_rank or 0, place.host or "")
        by_node.setdefault(key, []).append(rank)
        first.setdefault(key, place)
    doctor = {r.node_rank: r.doctor for r in records}
    out = []
    for key, ranks in sorted(by_node.items()):
        place = first[key]
        host = place.host or next((places[r].host for r in ranks if places[r].host), None)
        addr = place.addr or next((places[r].addr for r in ranks if places[r].addr), None)
        out.append(NodeInfo(
            place.node_rank, host, addr, tuple(ranks), place.source or "unknown",
            doctor.get(place.node_rank, ()) if place.node_rank is not None else (),
            None if reported is None or place.node_rank is None
            else reported.get(place.node_rank, False),
        ))
    return tuple(out)


# -- groups ---------------------------------------------------------------------------------------


def _is_default(name: str, desc: str) -> bool:
    return desc == "default_pg" or (name == "0" and desc in ("", "default_pg"))


def _members(name: str, desc: str, traces: Mapping[int, GroupTrace], world: int | None,
             read: Iterable[int]) -> tuple[int, ...] | None:
    for trace in traces.values():
        if trace.ranks:
            return tuple(sorted(set(trace.ranks)))
    if _is_default(name, desc):
        if world is not None:
            return tuple(range(world))
        return tuple(range(max(read) + 1))  # at least these: higher ranks cannot be seen
    return None


def _mismatch(entered: Mapping[int, Call], frontier: int) -> tuple[str, ...]:
    at = {r: c for r, c in entered.items() if c.seq == frontier}
    shapes: dict[tuple[str, tuple[tuple[int, ...], ...]], list[int]] = {}
    for rank, call in sorted(at.items()):
        shapes.setdefault((call.operation, call.input_sizes), []).append(rank)
    if len(shapes) < 2:
        return ()
    return tuple(f"ranks {ranks_text(ranks)} entered {op} #{frontier} with sizes "
                 f"{[list(s) for s in sizes]}" for (op, sizes), ranks in shapes.items())


def _view(rank: int, state: RankState, dumps: Mapping[int, RankDump], name: str,
          places: Mapping[int, _Place]) -> RankView:
    place = places.get(rank, _Place())
    dump = dumps.get(rank)
    if dump is None:
        return RankView(rank, state, node_rank=place.node_rank, host=place.host)
    trace = dump.group(name)
    last = trace.last if trace is not None else None
    latest = dump.last
    if latest is not None and last is not None and (latest.group, latest.seq, latest.p2p) == (
            last.group, last.seq, last.p2p):
        latest = None
    return RankView(rank, state, last, latest, place.node_rank, place.host, dump.error)


def _stall(name: str, dumps: Mapping[int, RankDump], world: int | None,
           places: Mapping[int, _Place]) -> tuple[Stall | None, str | None]:
    traces = {r: g for r, d in dumps.items() if (g := d.group(name)) is not None}
    desc = next((t.desc for t in traces.values() if t.desc), "")
    entered = {r: t.last for r, t in traces.items() if t.last is not None}
    if not entered:
        return None, None
    frontier = max(c.seq for c in entered.values())
    members = _members(name, desc, traces, world, dumps)
    compared = members if members is not None else tuple(sorted(traces))
    waiting = tuple(r for r in compared if r in entered and entered[r].seq == frontier) or \
        tuple(r for r in sorted(entered) if entered[r].seq == frontier)  # pg_config disagrees
    behind = tuple(r for r in compared if r in dumps and r not in waiting)
    missing = tuple(r for r in compared if r not in dumps)
    call = max((entered[r] for r in waiting), key=lambda c: (c.where is not None, -len(c.op)))
    if call.where is None:  # a dump without stacks: where a waiting rank's call failed
        failed = [d.failed_at for r in waiting if (d := dumps[r]).failed_at
                  and d.failed_in == call.operation]
        if failed:
            call = replace(call, where=failed[0])
    label = f"group {name}" + (f" ({desc})" if desc else "")
    if not behind and not missing:
        at = [r for r, c in entered.items() if c.seq == frontier]
        who = f"ranks {ranks_text(at)} all" if len(at) > 1 else f"rank {ranks_text(at)}"
        tail = ""
        if dumps[waiting[0]].backend == "nccl":  # Gloo neither marks entries nor pg_status
            done = all(entered[r].state == "completed"
                       or (traces[r].last_completed or -1) >= frontier for r in at)
            tail = (" and it completed on every rank" if done else
                    " and it did not complete on every rank (the collective itself stalled)")
        return None, f"{label}: {who} reached {call.operation} #{frontier}{tail}"
    views = tuple(_view(r, "behind", dumps, name, places) for r in behind) + tuple(
        _view(r, "missing", dumps, name, places) for r in missing) + tuple(
        _view(r, "waiting", dumps, name, places) for r in waiting)
    return Stall(name, desc, call, waiting, behind, missing, members is not None, views,
                 _mismatch(entered, frontier)), None


def _where_text(rank: int, places: Mapping[int, _Place]) -> str:
    place = places.get(rank)
    if place is None or (place.node_rank is None and not place.host):
        return ""
    parts = [] if place.node_rank is None else [f"node {place.node_rank}"]
    if place.host:
        parts.append(place.host)
    return f" ({', '.join(parts)})"


def _title(stall: Stall, places: Mapping[int, _Place]) -> str:
    def who(ranks: tuple[int, ...]) -> str:
        nodes = {_where_text(r, places) for r in ranks}
        plural = "s" if len(ranks) > 1 else ""
        where = nodes.pop() if len(nodes) == 1 else ""
        return f"rank{plural} {ranks_text(ranks)}{where}"

    call = stall.call
    what = f"{call.operation} #{call.seq} of group {stall.group}" + (
        f" ({stall.desc})" if stall.desc else "")
    parts = []
    if stall.behind:
        parts.append(f"{who(stall.behind)} never entered {what}")
    if stall.missing:
        parts.append(f"{who(stall.missing)} left no dump" if stall.behind else
                     f"{who(stall.missing)} left no dump and no sign of entering {what}")
    waits = f"{who(stall.waiting)} wait in it" if stall.waiting else ""
    return "; ".join([*parts, waits]) if waits else "; ".join(parts)


def attribute(
    dumps: Sequence[RankDump],
    records: Sequence[LaunchRecord] = (),
    *,
    notes: Sequence[str] = (),
    reported: Mapping[int, bool] | None = None,
    layout: tuple[int, int] | None = None,
) -> HangReport:
    """Compare the dumps and say which ranks did not enter which collective, and where they
    run.

    Args:
        dumps: One summary per rank.
        records: Launch records of the job's nodes (rank ranges, hosts, addresses).
        notes: Notes from reading the files, passed on.
        reported: ``hang --collect``: node rank -> whether that node reported.
        layout: ``(NUM_NODES, NUM_TRAINERS)`` of the cluster contract, for the world size and
            the nodes of ranks without a dump when no launch record says.

    Returns:
        The report; ``verdict`` ``"unreadable"`` when ``dumps`` is empty.
    """
    by_rank = {d.rank: d for d in dumps}
    world, world_source = _world(dumps, records, layout)
    if world is not None and by_rank and max(by_rank) >= world:
        notes = [*notes, f"dumps of ranks up to {max(by_rank)} but a world of {world} "
                 f"({world_source}): the dumps may come from another job"]
    places = _places(dumps, records, world, layout)
    if not records and any(p.node_rank is None for p in places.values()):
        notes = [*notes, "no launch record: ranks without clusterenv's note are reported "
                 "without their node (start jobs with `clusterenv launch`, which records which "
                 "node runs which ranks)"]
    nodes = _nodes(places, records, reported)
    failures = tuple(f"rank {d.rank}{_where_text(d.rank, places)}: "
                     f"{d.failed_in + ': ' if d.failed_in else ''}{d.error}"
                     for d in dumps if d.error)
    if not dumps:
        return HangReport("unreadable", "no readable flight-recorder dump", nodes=nodes,
                          world_size=world, world_source=world_source, notes=tuple(notes))
    if not any(d.entries for d in dumps):  # nothing to judge is not "every rank agrees"
        return HangReport(
            "unreadable", f"the {len(dumps)} dump(s) read hold no recorder entry: the flight "
            "recorder was off (a buffer size of 0; `clusterenv doctor` says) or no collective "
            "ran", nodes=nodes, world_size=world, world_source=world_source,
            ranks_read=tuple(sorted(by_rank)), failures=failures, notes=tuple(notes),
            dumps=tuple(dumps))
    names = sorted({g.name for d in dumps for g in d.groups}, key=lambda n: (len(n), n))
    stalls: list[Stall] = []
    agreed: list[str] = []
    for name in names:
        stall, line = _stall(name, by_rank, world, places)
        if stall is not None:
            stalls.append(stall)
        elif line is not None:
            agreed.append(line)
    stalls.sort(key=lambda s: (not s.behind, -(s.call.time_created_ns or 0)))
    if reported is None:  # reading one node's files: other nodes' dumps are on their disks
        recorded = {r.node_rank for r in records}
        elsewhere = sorted({r for s in stalls for r in s.missing
                            if (p := places.get(r)) is not None and p.node_rank is not None
                            and p.node_rank not in recorded})
        if elsewhere:
            notes = [*notes, f"rank(s) {ranks_text(elsewhere)} ran on other nodes, whose dumps "
                     "are on their own disks: run `clusterenv hang --collect` on every node "
                     "(or copy their dump directories here) before concluding they stopped"]
    if stalls:
        verdict: Verdict = "hang"
        title = _title(stalls[0], places)
    else:
        verdict = "agree"
        title = ("no rank is behind: " + agreed[0]) if agreed else \
            "the dumps record no collective to compare"
    return HangReport(verdict, title, tuple(stalls), tuple(agreed), nodes, world,
                      world_source, tuple(sorted(by_rank)), failures, tuple(notes),
                      tuple(dumps))
