"""Comparing fingerprints across nodes and naming the nodes that differ (pure, no I/O).

Where nodes disagree, the largest group is the reference (on a tie, the primary's group) and the
others are named: one node of sixteen with a different ``NCCL_SOCKET_IFNAME`` is named alone, not
the fifteen that agree. Every problem carries the values each group reported as evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from clusterenv._values import parse_ip
from clusterenv.findings import Code, Finding, Severity
from clusterenv.preflight.digest import compare_key
from clusterenv.preflight.fingerprint import Fingerprint
from clusterenv.preflight.verdict import NodeRef, Problem, RingHop

__all__ = ["compare", "missing_spans", "ranks_text", "spans_text"]

# Variables that only change logging: a difference is worth a warning, not a failed preflight.
_LOGGING_ONLY = frozenset(
    {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "TORCH_DISTRIBUTED_DEBUG"}
)
# Variables that are per node by design.
_PER_NODE = frozenset({"NCCL_HOSTID"})
_MAX_EVIDENCE = 12
_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class _Entry:
    ref: NodeRef
    fp: Fingerprint


def ranks_text(ranks: Iterable[int | None], limit: int = 24) -> str:
    """Ranks as compact text, e.g. ``"rank 2"``, ``"ranks 0-3, 7"``; long lists end in ``…``."""
    given = list(ranks)
    known = sorted({r for r in given if r is not None})
    spans: list[tuple[int, int]] = []
    for rank in known:
        if spans and rank == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], rank)
        else:
            spans.append((rank, rank))
    return spans_text(spans, unknown=any(r is None for r in given), limit=limit)


def spans_text(spans: Sequence[tuple[int, int]], *, unknown: bool = False, limit: int = 24) -> str:
    """Ranges of ranks as text, e.g. ``[(0, 3), (7, 7)]`` -> ``"ranks 0-3, 7"``."""
    words = [str(first) if first == last else f"{first}-{last}" for first, last in spans]
    if unknown:
        words.append("?")
    if len(words) > limit:
        words = [*words[:limit], "…"]
    one = len(spans) == 1 and spans[0][0] == spans[0][1] and not unknown
    return f"{'rank' if one else 'ranks'} {', '.join(words)}" if words else "no ranks"


def missing_spans(reported: Iterable[int], expected: int) -> list[tuple[int, int]]:
    """The ranges of ``0..expected-1`` that no reported rank covers, computed from the reported
    ranks alone (never by listing every expected rank: ``NUM_NODES`` may be large), e.g.
    ``missing_spans([0, 1, 5], 8)`` -> ``[(2, 4), (6, 7)]``."""
    gaps = []
    following = 0
    for rank in sorted({r for r in reported if 0 <= r < expected}):
        if rank > following:
            gaps.append((following, rank - 1))
        following = rank + 1
    if following < expected:
        gaps.append((following, expected - 1))
    return gaps


def _names(refs: Sequence[NodeRef], limit: int = 6) -> str:
    shown = ", ".join(map(str, refs[:limit]))
    return shown if len(refs) <= limit else f"{shown} and {len(refs) - limit} more"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def _show(value: object) -> str:
    if value is None:
        return "<unset>"
    return repr(value) if isinstance(value, str) else str(value)


Groups = list[tuple[K, list[_Entry]]]


def _groups(entries: Sequence[_Entry], keys: Sequence[K]) -> Groups[K]:
    """Entries grouped by their ``keys``: the largest group first, ties to the primary's (entry
    0)."""
    groups: dict[K, list[_Entry]] = {}
    for value, entry in zip(keys, entries, strict=True):
        groups.setdefault(value, []).append(entry)
    first = keys[0]
    order = {value: i for i, value in enumerate(groups)}
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0] != first, order[kv[0]]))


def _differ(
    entries: Sequence[_Entry],
    key: Callable[[Fingerprint], K],
    *,
    what: str,
    code: Code,
    fix: str,
    severity: Severity | None = None,
    show: Callable[[K], str] = _show,
    more: Callable[[Groups[K]], list[str]] | None = None,
) -> Problem | None:
    """One problem when ``key`` differs between entries, naming all but the reference group."""
    if not entries:
        return None
    keys = [key(e.fp) for e in entries]
    if keys.count(keys[0]) == len(keys):  # every node agrees (the usual case): no grouping
        return None
    groups = _groups(entries, keys)
    (reference, agree), others = groups[0], groups[1:]
    odd = [e.ref for _, members in others for e in members]
    if len(others) == 1 and len(others[0][1]) <= 4:
        value, members = others[0]
        title = (
            f"{what} differs: {_names([e.ref for e in members])} "
            f"{'has' if len(members) == 1 else 'have'} {show(value)}, "
            f"{_plural(len(agree), 'node')} {'has' if len(agree) == 1 else 'have'} "
            f"{show(reference)}"
        )
    else:
        title = f"{what} differs between nodes: {len(groups)} different values"
    evidence = [
        f"{show(value)} on {ranks_text(e.ref.rank for e in members)}"
        for value, members in groups[:_MAX_EVIDENCE]
    ]
    if more is not None:
        evidence += more(groups)[:_MAX_EVIDENCE]
    return Problem.about(code, title, tuple(odd), tuple(evidence), fix, severity=severity)


def _rank_problems(entries: Sequence[_Entry], expected: int, waited: float) -> list[Problem]:
    out = []
    unknown = [e.ref for e in entries if e.fp.rank is None]
    if unknown:
        out.append(Problem.about(
            "preflight-rank-unknown", f"{_names(unknown)} sent no valid NODE_RANK",
            tuple(unknown), (), "export NODE_RANK (0 on the primary, 1..NUM_NODES-1 elsewhere)",
        ))
    outside = [e.ref for e in entries if e.fp.rank is not None and not 0 <= e.fp.rank < expected]
    gaps = missing_spans((e.fp.rank for e in entries if e.fp.rank is not None), expected)
    if outside:
        extra = len(entries) - expected
        title = (f"{len(entries)} nodes reported, {extra} more than NUM_NODES={expected}: "
                 f"{_names(outside)} {'has' if len(outside) == 1 else 'have'} NODE_RANK outside "
                 f"[0, {expected})" if extra > 0 else
                 f"NODE_RANK outside [0, NUM_NODES={expected}) on {_names(outside)}")
        evidence = (f"the ranks have gaps: {spans_text(gaps)} missing while "
                    f"{ranks_text(r.rank for r in outside)} reported: nodes added to or "
                    "replaced in a running cluster got new ranks",) if gaps else ()
        out.append(Problem.about(
            "preflight-rank-out-of-range", title, tuple(outside), evidence,
            f"give each node a distinct NODE_RANK from 0 to {expected - 1}, and NUM_NODES the "
            "number of nodes in the cluster as it is now (recreate the cluster's pods, or set "
            "both on every node)",
        ))
    by_rank: dict[int, list[NodeRef]] = {}
    for e in entries:
        if e.fp.rank is not None:
            by_rank.setdefault(e.fp.rank, []).append(e.ref)
    for rank, refs in sorted(by_rank.items()):
        if len(refs) > 1:
            out.append(Problem.about(
                "preflight-rank-duplicate",
                f"NODE_RANK={rank} is used by {len(refs)} nodes: {_names(refs)}",
                tuple(refs), tuple(f"{r}: hostname {r.hostname or '?'}" for r in refs[:8]),
                "give each node a distinct NODE_RANK: two nodes with one rank hang the "
                "rendezvous or fail with 'Duplicate GPU detected'",
            ))
    missing = sum(last - first + 1 for first, last in gaps)
    if missing:
        named = [r for first, last in gaps[:64] for r in range(first, min(last, first + 63) + 1)]
        out.append(Problem.about(
            "preflight-rank-missing",
            f"{missing} of {expected} nodes did not report within {waited:.1f} s: "
            f"{spans_text(gaps)}",
            tuple(NodeRef(r) for r in named[:64]),
            (f"reported: {ranks_text(by_rank)}",),
            "run `clusterenv preflight` on every node at the same time; on a missing node, its "
            "own output says whether it reached the primary",
        ))
    return out


def _contract_problems(entries: Sequence[_Entry]) -> list[Problem]:
    checks: tuple[tuple[str, Callable[[Fingerprint], object]], ...] = (
        ("NUM_NODES", lambda fp: fp.num_nodes),
        ("NUM_TRAINERS", lambda fp: fp.num_trainers),
        ("PRIMARY_ADDR", lambda fp: fp.primary_addr),
        ("PRIMARY_PORT", lambda fp: fp.primary_port),
    )
    found = [
        _differ(entries, key, what=variable, code="preflight-contract-differs",
                fix=f"every node must see the same {variable}; fix the launcher or that node's "
                "environment")
        for variable, key in checks
    ]
    return [p for p in found if p is not None]


def _env_problems(entries: Sequence[_Entry]) -> list[Problem]:
    # Names and values are compared by compare_key: a long value sent as a prefix and a digest
    # (a fingerprint fitted to the message limit) agrees with the same value sent in full.
    keyed: dict[int, dict[str, str]] = {}
    names: dict[str, str] = {}  # key -> the name as the first node sent it
    shown: dict[str, str] = {}  # key -> the value as the first node sent it
    # Most nodes hold the same environment: each distinct one is keyed once.
    by_environment: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for e in entries:
        environment = tuple(e.fp.env.items())
        values = by_environment.get(environment)
        if values is None:
            values = by_environment[environment] = {}
            for name, value in environment:
                name_key, value_key = compare_key(name), compare_key(value)
                names.setdefault(name_key, name)
                shown.setdefault(value_key, value)
                values[name_key] = value_key
        keyed[id(e.fp)] = values
    distinct = list(by_environment.values())
    out = []
    for name_key, name in sorted(names.items(), key=lambda kv: kv[1]):
        if name in _PER_NODE or len({values.get(name_key) for values in distinct}) < 2:
            continue  # per node by design, or the same wherever it is set or unset
        problem = _differ(
            entries, lambda fp, n=name_key: keyed[id(fp)].get(n),  # type: ignore[misc]
            what=name, code="preflight-env-differs",
            severity="warning" if name in _LOGGING_ONLY else "error",
            show=lambda key: _show(None if key is None else shown[key]),
            fix=f"set {name} to the same value on every node (in the image or the launcher's "
            "environment, not by hand in one shell), or unset it everywhere",
        )
        if problem is not None:
            out.append(problem)
    return out


def _trimmed_problems(entries: Sequence[_Entry]) -> list[Problem]:
    trimmed = [e for e in entries if e.fp.trimmed]
    if not trimmed:
        return []
    refs = [e.ref for e in trimmed]
    return [Problem.about(
        "preflight-fingerprint-trimmed",
        f"{_names(refs)}: fingerprint fitted to the message limit", tuple(refs),
        tuple(f"{e.ref}: {note}" for e in trimmed[:_MAX_EVIDENCE] for note in e.fp.trimmed[:1]),
        "nothing to do: long values are compared by their digest; shorten them to read them "
        "in the verdict",
    )]


def _network_problems(entries: Sequence[_Entry]) -> list[Problem]:
    out = [
        Problem.about(
            "preflight-no-cluster-interface", f"{e.ref} has no cluster interface",
            (e.ref,), (e.fp.interface_reason,) if e.fp.interface_reason else (),
            "give the node an address on the cluster network (NODE_ADDR) and run "
            "`clusterenv doctor` there",
        )
        for e in entries
        if e.fp.interface is None
    ]
    have = [e for e in entries if e.fp.interface is not None]
    mtu = _differ(
        have, lambda fp: fp.mtu, what="MTU of the cluster interface",
        code="preflight-mtu-differs",
        fix="set the same MTU on the cluster interface of every node (e.g. `ip link set dev ens1 "
        "mtu 9000`, and on the switch); a mismatch hangs NCCL or fails with IBV_WC_LOC_LEN_ERR",
    )
    name = _differ(
        have, lambda fp: fp.interface, what="cluster interface name",
        code="preflight-interface-differs",
        fix="one NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME value must match every node's interface: "
        "use a list or a prefix that covers all names",
    )
    return out + [p for p in (mtu, name) if p is not None]


def _show_transport(value: str | None) -> str:
    return value if value is not None else "none (TCP sockets)"


def _show_rates(rates: tuple[float, ...]) -> str:
    return "[" + ", ".join(f"{r:g}" for r in rates) + "] Gb/s" if rates else "no ports"


def _down(groups: Groups[Any]) -> list[str]:
    """The ports that are not ACTIVE on the nodes outside the reference group."""
    return [f"{e.ref}: {item}" for _, members in groups[1:] for e in members
            for item in e.fp.rdma.inactive[:4]]


def _rdma_problems(entries: Sequence[_Entry]) -> list[Problem]:
    transport = _differ(
        entries, lambda fp: fp.rdma.transport, what="RDMA transport", show=_show_transport,
        code="preflight-transport-differs", more=_down,
        fix="make RDMA usable on every node or on none (devices, /dev/infiniband, drivers; a "
        "port in INIT needs a subnet manager, a port DOWN its cable or switch port, see "
        "`clusterenv doctor` there): NCCL hangs at init when nodes pick different transports",
    )
    ports = _differ(
        entries, lambda fp: fp.rdma.ports, what="number of usable RDMA ports", more=_down,
        code="preflight-rdma-ports-differ",
        fix="bring every RDMA port up (`ibstat`), or exclude the same ports everywhere with "
        "NCCL_IB_HCA",
    )
    rates = None if ports else _differ(
        entries, lambda fp: fp.rdma.rates_gbps, what="RDMA port rates", show=_show_rates,
        code="preflight-rdma-rate-differs",
        fix="check the slow ports' links (`ibstat`): the slowest port sets the pace for all",
    )
    roce = [e for e in entries if e.fp.rdma.gids]
    gids = None if transport else _differ(
        roce, lambda fp: fp.rdma.gids, what="kind of RoCE GID NCCL uses",
        show=" + ".join, code="preflight-gid-differs",
        fix="run `clusterenv doctor` on the odd node: it names the GID NCCL will use and the "
        "setting that fixes it (NCCL_IB_ADDR_FAMILY, NCCL_IB_GID_INDEX, or an IPv4 address on "
        "the RoCE interface); a node on a link-local or RoCE v1 GID cannot reach the others",
    )
    return [p for p in (transport, ports, rates, gids) if p is not None]


def _gpu_problems(entries: Sequence[_Entry]) -> list[Problem]:
    if all(e.fp.gpus is None for e in entries):
        return []  # no driver visible anywhere: a CPU cluster, or each node's doctor says why
    out = []
    for e in entries:
        trainers = e.fp.num_trainers
        if e.fp.gpus is None:
            out.append(Problem.about(
                "preflight-gpu-count",
                f"{e.ref} shows no NVIDIA driver while other nodes have GPUs", (e.ref,), (),
                "check the node's driver, and that the container was given the GPUs",
            ))
        elif trainers is not None and e.fp.gpus < trainers:
            visible = e.fp.env.get("CUDA_VISIBLE_DEVICES")
            out.append(Problem.about(
                "preflight-gpu-count",
                f"{e.ref} sees {e.fp.gpus} GPUs but NUM_TRAINERS={trainers}", (e.ref,),
                (f"CUDA_VISIBLE_DEVICES={_show(visible)}",),
                "check `nvidia-smi` on that node (a missing or faulted GPU, the fabric manager) "
                "and CUDA_VISIBLE_DEVICES",
            ))
    return out


def _local_problems(entries: Sequence[_Entry]) -> list[Problem]:
    # Grouped by code and fix: a fix names this node's own values (its interface, its
    # address), so nodes are grouped only where the same fix applies to each of them.
    by_fix: dict[tuple[str, str], list[tuple[_Entry, Finding]]] = {}
    for e in entries:
        for finding in e.fp.local_errors:
            by_fix.setdefault((finding.code, finding.fix), []).append((e, finding))
    out = []
    for (code, fix), items in sorted(by_fix.items()):
        refs = list(dict.fromkeys(e.ref for e, _ in items))  # each node once
        first = items[0][1]
        # Each node's own wording, when the nodes do not all say the same thing.
        distinct = len({f.title for _, f in items}) > 1
        titles = list(dict.fromkeys(f"{e.ref}: {f.title}" for e, f in items)) if distinct else []
        out.append(Problem.about(
            "preflight-node-errors",
            f"local check {code} fails on {_names(refs)}: {first.title}",
            tuple(refs), tuple(titles[:_MAX_EVIDENCE]),
            fix or f"run `clusterenv doctor` on {refs[0]}",
        ))
    return out


def _version_problems(entries: Sequence[_Entry]) -> list[Problem]:
    out = []
    # Where every node's NCCL answered for itself, its own version is compared instead of the
    # installed package's (_runtime_problems): LD_LIBRARY_PATH may load another one.
    asked = all(e.fp.runtime.version for e in entries)
    for name in ("torch", "clusterenv") if asked else ("torch", "nccl", "clusterenv"):
        def version(fp: Fingerprint, name: str = name) -> str | None:
            return (fp.clusterenv or None) if name == "clusterenv" else fp.versions.get(name)

        problem = _differ(
            [e for e in entries if version(e.fp)], version, what=f"{name} version",
            code="preflight-version-differs",
            severity="warning" if name == "clusterenv" else "error",
            fix=f"install the same {name} on every node (one image for the whole cluster)",
        )
        if problem is not None:
            out.append(problem)
    return out


def _libraries(groups: Groups[Any]) -> list[str]:
    return [f"{e.ref}: {e.fp.runtime.library} ({e.fp.runtime.library_source})"
            for _, members in groups for e in members[:2] if e.fp.runtime.library]


def _plugins(groups: Groups[Any]) -> list[str]:
    return [f"{e.ref}: {e.fp.runtime.net_plugin or 'none'}; {e.fp.runtime.net_plugin_note}"
            for _, members in groups for e in members[:2]]


def _plugin_key(fp: Fingerprint) -> tuple[str, str] | None:
    runtime = fp.runtime
    if runtime.net_plugin is None:
        return None
    return runtime.net_plugin.rsplit("/", 1)[-1], runtime.net_plugin_interface or "?"


def _show_plugin(key: tuple[str, str] | None) -> str:
    return "none (NCCL's own IB and socket transports)" if key is None else \
        f"{key[0]} ({key[1]})"


def _runtime_problems(entries: Sequence[_Entry]) -> list[Problem]:
    """What NCCL will load and use (:class:`~clusterenv.preflight.runtime.NcclRuntime`),
    each with the severity of its consequence."""
    found: list[Problem | None] = []
    asked = [e for e in entries if e.fp.runtime.library or e.fp.runtime.version]
    if asked:
        found.append(_differ(
            entries, lambda fp: fp.runtime.version, what="NCCL library loaded",
            code="preflight-nccl-library-differs", more=_libraries,
            show=lambda v: repr(v) if v else "no libnccl.so.2 found",
            fix="make every node load the same libnccl.so.2 (one image; the same "
            "LD_LIBRARY_PATH and CLUSTERENV_NCCL_LIBRARY everywhere): NCCL 2.24 and later "
            "refuse ranks of another version ('Mismatched NCCL version detected'), older ones "
            "may hang",
        ))
        found.append(_differ(
            asked, _plugin_key, what="NCCL network plugin", show=_show_plugin,
            code="preflight-net-plugin-differs", more=_plugins,
            fix="install the same network plugin on every node, or none (take it off "
            "LD_LIBRARY_PATH or the loader's directories, or set NCCL_NET_PLUGIN to the same "
            "value everywhere): ranks on different network implementations hang at init",
        ))
    rdma = [e for e in entries if e.fp.rdma.devices or e.fp.runtime.hcas]
    if rdma:
        counts = {len(e.fp.runtime.hcas) for e in rdma}
        found.append(_differ(
            rdma, lambda fp: len(fp.runtime.hcas), what="RDMA ports NCCL selects",
            code="preflight-hca-selection-differs",
            severity="error" if 0 in counts and len(counts) > 1 else "warning",
            more=lambda groups: [f"{e.ref}: {', '.join(e.fp.runtime.hcas) or 'none'}"
                                 for _, members in groups[1:] for e in members[:4]],
            fix="make the same RDMA ports ACTIVE and openable in every container "
            "(/dev/infiniband) and list the same ones in NCCL_IB_HCA: a node that selects "
            "none falls back to sockets while the others use IB, and NCCL hangs",
        ))
    checks: tuple[tuple[str, Callable[[Fingerprint], Any], Code, str, Severity], ...] = (
        ("GPU model", lambda fp: fp.runtime.gpu_models or None, "preflight-gpu-model-differs",
         "use one GPU model in a job: the slowest GPU paces every collective", "warning"),
        ("NVIDIA driver version", lambda fp: fp.runtime.driver, "preflight-driver-differs",
         "install the same driver on every node (one machine image)", "warning"),
        ("/dev/shm size", lambda fp: fp.runtime.shm_bytes,  # noqa: S108  # a name
         "preflight-host-limits-differ",
         "give every container the same /dev/shm (docker --shm-size, a Kubernetes "
         "emptyDir with medium Memory)", "warning"),
        ("memlock limit", lambda fp: fp.runtime.memlock, "preflight-host-limits-differ",
         "set the same memlock limit everywhere (ulimit -l unlimited, docker "
         "--ulimit memlock=-1)", "warning"),
        ("RUNPOD_DC_ID (data centre)", lambda fp: fp.runtime.datacenter,
         "preflight-datacenter-differs", "create the cluster's pods in one data centre: the "
         "cluster network does not reach between data centres", "error"),
    )
    for what, key, code, fix, severity in checks:
        present = [e for e in entries if key(e.fp) is not None]
        if present:
            found.append(_differ(present if code != "preflight-datacenter-differs" else entries,
                                 key, what=what, code=code, fix=fix, severity=severity,
                                 show=lambda v: "<unset>" if v is None else ", ".join(v)
                                 if isinstance(v, tuple) else repr(v)))
    return [p for p in found if p is not None]


def _token_problems(entries: Sequence[_Entry]) -> list[Problem]:
    problem = _differ(
        entries, lambda fp: fp.token, what="CLUSTERENV_PREFLIGHT_TOKEN",
        show=lambda t: "set" if t else "unset", code="preflight-token-mismatch",
        fix="set the same CLUSTERENV_PREFLIGHT_TOKEN on every node, or on none",
    )
    return [problem] if problem is not None else []


def _same_address(claimed: str, seen: str) -> bool:
    if claimed == seen:
        return True
    # IPv4-mapped IPv6 is the IPv4 address; a zone does not matter here
    a, b = parse_ip(claimed), parse_ip(seen)
    return a == b if a is not None and b is not None else claimed == seen


def _address_problems(entries: Sequence[_Entry]) -> list[Problem]:
    out = []
    for e in entries[1:]:  # the primary's own entry is where it listens
        claimed, seen = e.fp.node_addr, e.ref.addr
        if claimed and seen and not _same_address(claimed, seen):
            out.append(Problem.about(
                "preflight-addr-mismatch",
                f"{e.ref} says NODE_ADDR={claimed} but connected from {seen}", (e.ref,), (),
                "check NODE_ADDR on that node, and that its traffic to the primary leaves "
                "through the cluster interface (`ip route get PRIMARY_ADDR`)",
            ))
    return out


def _ring_problems(ring: Sequence[RingHop]) -> list[Problem]:
    return [
        Problem.about(
            "preflight-ring-unreachable",
            f"{hop.source} cannot open a TCP connection to {hop.target}: {hop.detail}",
            (hop.source, hop.target), (),
            "check routes and firewalls between these two nodes on the cluster network",
        )
        for hop in ring
        if not hop.ok
    ]


def _rejected_problem(rejected: Sequence[str], total: int) -> list[Problem]:
    if not total:
        return []
    peers = tuple(
        NodeRef(None, r.removeprefix("rejected peer ").split(": ", 1)[0]) for r in rejected
    )
    return [Problem.about(
        "preflight-rejected-peers",
        f"refused {_plural(total, 'connection')} that did not send a valid fingerprint",
        peers, tuple(rejected),
        "if one of them is a node of this cluster, run the same clusterenv release there (with "
        "the same CLUSTERENV_PREFLIGHT_TOKEN); otherwise something else talks to the preflight "
        "port",
    )]


def compare(
    entries: Sequence[tuple[str, Fingerprint]],
    *,
    expected_nodes: int,
    waited_s: float = 0.0,
    rejected: Sequence[str] = (),
    rejected_total: int = 0,
    ring: Sequence[RingHop] = (),
) -> list[Problem]:
    """Every cross-node problem among ``entries``: (address it connected from, fingerprint).

    The first entry is the primary's own. Errors come first, then warnings, then info.

    Example::

        compare([("10.65.0.2", fp0), ("10.65.0.3", fp1)], expected_nodes=2)
        # [Problem("preflight-env-differs", "error",
        #          "NCCL_SOCKET_IFNAME differs: rank 1 (10.65.0.3) has <unset>, ...", ...)]
    """
    items = [_Entry(NodeRef(fp.rank, addr, fp.hostname), fp) for addr, fp in entries]
    problems = _rank_problems(items, expected_nodes, waited_s)
    if items:
        problems += _contract_problems(items)
        problems += _env_problems(items)
        problems += _network_problems(items)
        problems += _rdma_problems(items)
        problems += _gpu_problems(items)
        problems += _version_problems(items)
        problems += _runtime_problems(items)
        problems += _token_problems(items)
        problems += _local_problems(items)
        problems += _address_problems(items)
        problems += _trimmed_problems(items)
    problems += _ring_problems(ring)
    problems += _rejected_problem(rejected, rejected_total)
    return sorted(problems, key=lambda p: _SEVERITY_ORDER[p.severity])  # stable within severity
