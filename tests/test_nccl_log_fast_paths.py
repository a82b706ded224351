"""The fast paths of `clusterenv nccl-log` read what the straightforward ones read.

Files are read in blocks whose lines that need nothing are set apart in bulk
(clusterenv/nccl_log/blocks.py); the reference is the line-by-line parse
(``parse_nccl_log``), which reads each line on its own. ``--json`` is written from pieces
encoded once, and checked for what the scrub would change on its text; the reference is the
walk over every string (``scrub_tree(escape_tree(...))``) and ``json.dumps``. The lines are
the real captures in tests/data/nccl_logs/real/ (a process's setup lines are those of rank 9 of
the real RoCE capture, with their host, pid, rank and address replaced as the benchmark does),
and channel lines in the format of NCCL 2.19+ (src/transport/net.cc ``Channel %02d/%d :
%d[%d] -> %d[%d] [%s] via NET/%s/%d%s%s``, src/transport/p2p.cc ``... via P2P/%s%s%s``) and of
older releases (``Channel %02d : ... via NET/%s/%d``), with every irregularity the bulk path
must notice: a second marker, ``[send]`` elsewhere, two ``via NET/``, a long tail, several
devices or processes in one run.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterenv._cli import _json
from clusterenv._jsonable import to_jsonable
from clusterenv._scrub import _ASSIGNMENT, _assignments, _scrub_assignment, scrub_text, scrub_tree
from clusterenv._text import escape_tree, terminal_line
from clusterenv.nccl_log import NcclLog, parse_nccl_log, read_nccl_log
from clusterenv.nccl_log import blocks as block_reader
from clusterenv.nccl_log import parse as line_reader
from clusterenv.nccl_log.encode import log_fields, ranks_json
from clusterenv.nccl_log.info import info_fact
from clusterenv.nccl_log.lines import parse_header
from clusterenv.nccl_log.state import FactOps, Process

LOGS = Path(__file__).parent / "data" / "nccl_logs"
REAL = LOGS / "real"
ROCE = REAL / "nccl-info-h100-roce-2.27-ofi-plugin-fallback-ib.txt"
# the setup lines of one real process: rank 9, pid 207008, of the RoCE capture
SETUP = [line.split(" NCCL INFO ", 1)[1] for line in ROCE.read_text(encoding="utf-8").splitlines()
         if line.startswith("tpgds-aihub0008:207008:")]
REAL_LINES = [line for path in sorted(LOGS.rglob("*.txt"))
              for line in path.read_text(encoding="utf-8").splitlines()
              if line and not line.startswith("#")]


@contextmanager
def small(block: int, probe: int, cached: int) -> Iterator[None]:
    """Blocks of ``block`` characters and a line cache reviewed at ``probe`` and ``cached``
    entries (for both readers), so that a short text crosses blocks and turns the cache off and
    on."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(block_reader, "BLOCK", block)
        patch.setattr(block_reader, "_HOLD", 16)  # lines held for bulk runs: few
        patch.setattr(line_reader, "_CACHE_PROBE", probe)
        patch.setattr(line_reader, "_MAX_CACHED", cached)
        yield


def both(text: str) -> tuple[NcclLog, NcclLog]:
    """The text read in blocks, and line by line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return read_nccl_log(io.StringIO(text)), parse_nccl_log(lines)


def head(host: int, pid: int, device: int) -> str:
    return f"gpu-node-{host:04d}:{pid}:{pid} [{device}] NCCL INFO "


def setup(host: int, pid: int, device: int, rank: int) -> list[str]:
    """A process's setup lines, as the real one printed them with its own host, pid and rank."""
    return [head(host, pid, device) + line.replace("10.99.91.63", f"10.64.{host}.1")
            .replace("rank 9 nranks 16", f"rank {rank} nranks 64")
            .replace("GPU device 1", f"GPU device {device}") for line in SETUP]


CHANNELS = {
    "p2p": "Channel {c:02d}/0 : {r}[{d}] -> {n}[{d}] via P2P/CUMEM/read",
    "recv": "Channel {c:02d}/0 : {n}[{d}] -> {r}[{d}] [receive] via NET/IB/{d}/GDRDMA",
    "send": "Channel {c:02d}/0 : {r}[{d}] -> {n}[{d}] [send] via NET/IB/{d}/GDRDMA",
    "recv1": "Channel {c:02d}/1 : {n}[{d}] -> {r}[{d}] [receive] via NET/IB/1",
    "socket": "Channel {c:02d}/0 : {n}[{d}] -> {r}[{d}] [receive] via NET/Socket/0",
    "old": "Channel {c:02d} : {r}[{d}] -> {n}[{d}] via NET/IB/0",
    "ring": "Ring {c:02d} : {r}[{d}] -> {n}[{d}] [send] via NET/IB/0/GDRDMA",
    "shm": "Channel {c:02d}/0 : {r}[{d}] -> {n}[{d}] via SHM/direct/direct",
    "send-late": "Channel {c:02d}/0 : {r}[{d}] -> {n}[{d}] via NET/IB/0 [send]",
    "send-twice": "Channel {c:02d}/0 : [send] {r}[{d}] -> {n}[{d}] [receive] via NET/IB/0",
    "two-nets": "Channel {c:02d}/0 : {r}[{d}] -> {n}[{d}] via NET/IB/0 via NET/IB/1",
    "long-tail": "Channel {c:02d}/0 : {n}[{d}] -> {r}[{d}] [receive] via NET/" + "x" * 130 + "/0",
    "marker": "Channel {c:02d}/0 : {n}[{d}] -> {r}[{d}] [receive] via NET/IB/0 {h}NCCL WARN oops",
    "cut": "Channel {c:02d}/0 : {n}[{d}] -> {r}[{d}] [rec",
}
_COMMON = ["p2p", "recv", "send", "p2p", "recv", "send", "recv1", "socket", "shm"]


@st.composite
def logs(draw: st.DrawFn) -> str:
    """A log of a few processes: setup lines, runs of channel lines, the lines after them, in
    the order a job prints them or interleaved, with real lines of other logs between."""
    lines: list[str] = []
    for rank in range(draw(st.integers(1, 5))):
        host, device = draw(st.integers(0, 2)), rank % 8
        pid = 300000 + rank
        lines += setup(host, pid, device, rank)
        if draw(st.integers(0, 3)) == 0:  # two processes wrote into one line
            at = draw(st.integers(0, len(lines) - 1))
            lines[at] += draw(st.sampled_from([" ", ""])) + head(host, pid + 1, device) + draw(
                st.sampled_from(SETUP))
        kinds = st.sampled_from(_COMMON) if draw(st.booleans()) else st.sampled_from(list(CHANNELS))
        for channel in range(draw(st.integers(0, 12))):
            kind = draw(kinds)
            text = CHANNELS[kind].format(c=channel, r=rank, n=rank + 8, d=device,
                                         h=head(host, pid + 1, device))
            where = draw(st.sampled_from(["own", "own", "own", "other", "bare"]))
            prefix = {"own": head(host, pid, device), "other": head(host, pid + 1, device),
                      "bare": "NCCL INFO "}[where]
            lines.append(prefix + text)
        lines.append(head(host, pid, device) + "Connected all rings, use ring PXN 0 GDR 1")
        lines.append(head(host, pid, device) + f"ncclCommInitRank comm 0x55{rank:010x} rank "
                     f"{rank} nranks 64 cudaDev {device} nvmlDev {device} busId 1b000 commId "
                     "0xde4443395863ef4a - Init COMPLETE")
    if draw(st.booleans()):
        lines = draw(st.permutations(lines))
    for _ in range(draw(st.integers(0, 6))):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(REAL_LINES)))
    if draw(st.booleans()):  # a job that prints it all again: the line cache's case
        lines += lines
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(logs(), st.sampled_from([200, 1000, 4096, 65536]), st.sampled_from([8, 64, 1024]))
def test_reading_in_blocks_reads_what_reading_line_by_line_reads(text: str, block: int,
                                                                 probe: int) -> None:
    with small(block, probe, 4 * probe):
        fast, reference = both(text)
    assert fast == reference


# What NCCL 2.27.5 prints after the channels of its rings and of its trees
# (src/transport/generic.cc:31 and :50).
_AFTER = ["Connected all rings, use ring PXN 0 GDR 1", "Connected all trees"]


@st.composite
def rows(draw: st.DrawFn) -> str:
    """Processes printed one after another (each a row of lines of its own prefix, read
    together): setup lines, then rings and trees, each a run of channel lines followed by
    NCCL's line for it, with lines that break a run drawn in: a setup line that carries a
    second message (a channel line of the same process, or another's), a channel line with a
    second marker, another process's line."""
    lines: list[str] = []
    for rank in range(draw(st.integers(1, 4))):
        host, device, pid = rank // 2, rank % 8, 300000 + rank
        own = head(host, pid, device)
        lines += draw(st.lists(st.sampled_from(setup(host, pid, device, rank)), max_size=6))
        for after in _AFTER[: draw(st.integers(1, 2))]:
            kinds = st.sampled_from(_COMMON[:3]) if draw(st.booleans()) else st.sampled_from(
                list(CHANNELS))
            for channel in range(draw(st.integers(0, 8))):
                lines.append(own + CHANNELS[draw(kinds)].format(
                    c=channel, r=rank, n=rank + 8, d=device, h=head(host, pid + 1, device)))
            lines.append(own + after)
        for _ in range(draw(st.integers(0, 2))):
            at = draw(st.integers(0, len(lines)))
            lines.insert(at, draw(st.sampled_from([
                own + SETUP[0] + " " + own + CHANNELS["recv"].format(c=0, r=rank, n=8,
                                                                     d=device, h=""),
                own + SETUP[0] + " " + head(host, pid + 1, device) + SETUP[1],
                head(host, pid + 1, device) + SETUP[2],
            ])))
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(rows(), st.sampled_from([300, 1000, 65536]))
def test_rows_of_one_process_read_together_read_what_line_by_line_reads(text: str,
                                                                         block: int) -> None:
    # the line cache off from the start: rows are read together only then
    with small(block, 8, 8):
        fast, reference = both(text)
    assert fast == reference


def test_a_line_between_two_runs_of_channel_lines_is_read_in_its_place() -> None:
    # NCCL 2.27.5 prints the rings' channels, "Connected all rings" (generic.cc:31), the
    # trees' channels and "Connected all trees" (generic.cc:50); here every channel goes
    # through P2P (src/transport/p2p.cc) and the log ends before the trees are connected, so
    # that "Connected all rings" is the one sign of progress after the return trace before it
    # (checks.h "%s:%d -> %d"): read as a channel line, it would leave that trace the failure
    # of the process
    own = head(0, 300000, 0)
    ring = [own + f"Channel {c:02d}/0 : 0[0] -> 1[1] via P2P/CUMEM/read" for c in range(4)]
    tree = [own + f"Channel {c:02d}/0 : 0[0] -> 1[1] via P2P/CUMEM/read" for c in range(4, 8)]
    text = "\n".join([*setup(0, 300000, 0, 0), own + "init.cc:1234 -> 3", *ring,
                      own + _AFTER[0], *tree]) + "\n"
    with small(65536, 8, 8):
        fast, reference = both(text)
    assert fast == reference
    assert fast.ranks[0].failure is None


# Messages of one process whose order decides something: NCCL's return trace (NCCLCHECK in
# src/include/checks.h prints "%s:%d -> %d"; the first is a real line of the 2.27 capture; 7 is
# ncclInProgress), progress marks (the capture's "Using network IB", a channel line of NCCL
# 2.19+, ncclCommInitRank's "Init COMPLETE"), and lines only counted (the capture's aws-ofi-nccl
# trouble line, and the completion-error WARN of src/transport/net_ib.cc:2451 at 2.27.5, "NET/IB:
# Got completion from peer %s with status=%d opcode=%d len=%u vendor err %u (%s)%s%s%s%s hca %s").
_ORDERED = [
    "INFO plugin/net.cc:118 -> 2", "INFO misc/socket.cc:{d}84 -> 6", "INFO init.cc:1{d}1 -> 3",
    "INFO transport/net.cc:{d}9 -> 7",
    "INFO Using network IB", "INFO Channel 0{d}/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    "INFO ncclCommInitRank comm 0x55{d} rank {d} nranks 8 cudaDev 0 nvmlDev 0 busId 1b000 "
    "commId 0xde4443395863ef4a - Init COMPLETE",
    "INFO NET/OFI Invalid type of PCI bus returned 0",
    "WARN NET/IB: Got completion from peer 10.1.0.{d}<40404> with status=12 opcode=0 len=0 "
    "vendor err 129 (Recv) localGid ::ffff:10.1.0.1 remoteGids::ffff:10.1.0.{d} hca mlx5_{d}",
]


@st.composite
def _ordered(draw: st.DrawFn) -> str:
    """One of the messages, or two of one process in one line (two processes' output that
    met, or a message printed twice before its newline)."""
    message = draw(st.sampled_from(_ORDERED))
    if draw(st.integers(0, 4)) == 0:
        message += " {head}" + draw(st.sampled_from(_ORDERED))
    return message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3), _ordered(), st.integers(0, 2)),
                min_size=1, max_size=30),
       st.lists(st.integers(0, 29), max_size=8), st.integers(1, 12),
       st.sampled_from([200, 1000, 4096]))
def test_lines_repeated_in_a_block_replay_in_bulk_as_line_by_line(
        steps: list[tuple[int, str, int]], extra: list[int], copies: int, block: int) -> None:
    # a job printing the same traces, progress and warnings again and again: the block reader
    # replays each distinct line once per block, and a trace after progress must still start a
    # new return chain, for every process on its own
    lines = []
    for rank, message, digit in steps:
        prefix = head(0, 300000 + rank, rank).replace("INFO ", "")
        lines.append(prefix + message.format(d=digit, head=prefix))
    text = lines * copies + [lines[at % len(lines)] for at in extra] + lines[: len(lines) // 2]
    with small(block, 8, 64):
        fast, reference = both("\n".join(text))
    assert fast == reference


@pytest.mark.parametrize("first", [
    # a trace, then progress, in one line: that progress comes at the trace's own line, so the
    # next trace continues the chain (NCCL went no further than that line)
    ["INFO init.cc:1{d}1 -> 3 {head}INFO Using network IB", "INFO misc/socket.cc:{d}84 -> 6"],
    # progress, then a trace, in one line: the trace starts a new chain
    ["INFO Using network IB {head}INFO init.cc:1{d}1 -> 3", "INFO misc/socket.cc:{d}84 -> 6"],
    ["INFO misc/socket.cc:{d}84 -> 6", "INFO init.cc:1{d}1 -> 3 {head}INFO Using network IB"],
])
def test_a_trace_and_progress_in_one_line_replay_in_bulk_as_line_by_line(
        first: list[str]) -> None:
    prefix = head(0, 300000, 0).replace("INFO ", "")
    lines = [prefix + message.format(d=1, head=prefix) for message in first]
    with small(4096, 8, 64):
        fast, reference = both("\n".join(lines * 40))
    assert fast == reference
    assert fast.ranks[0].failure == reference.ranks[0].failure


@pytest.mark.parametrize("path", sorted(LOGS.rglob("*.txt")), ids=lambda p: p.name)
def test_every_log_read_in_small_blocks_reads_the_same(path: Path) -> None:
    # every real log and variant, crossing blocks everywhere, the line cache turned off early
    with small(300, 8, 32):
        fast, reference = both(path.read_text(encoding="utf-8"))
    assert fast == reference


def test_a_large_job_read_in_blocks_reads_the_same(tmp_path: Path) -> None:
    # the benchmark's shapes: lines that never repeat (the bulk paths), one process per host
    # with its own address, and real lines repeated (the line cache)
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import bench_nccl_log as bench  # type: ignore[import-not-found]

    unique, addresses, repeated = tmp_path / "u.log", tmp_path / "a.log", tmp_path / "r.log"
    bench.write_unique(unique, 3_000_000, processes=256, hosts=32)
    bench.write_addresses(addresses, 1_000_000)
    bench.write_repeated(repeated, 1_000_000)
    for path in (unique, addresses, repeated):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        assert read_nccl_log(path) == parse_nccl_log(lines)


# -- the parts the block reader relies on ----------------------------------------------------


def test_a_device_list_applied_once_per_host_lists_what_each_device_says() -> None:
    # NET/IB's list applied to processes of several hosts, with a device listed twice and a
    # suffix (SHARP) gained between: what one _device call per entry gives
    lists = ["NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB/SHARP [2]mlx5_0:1/IB/SHARP ; OOB "
             "ib0:10.0.0.1<0>", "NET/IB : Using [0]mlx5_1:1/IB [1]mlx5_2:1/RoCE ; OOB "
             "eth0:10.0.0.2<0>"]
    facts: dict[str, Any] = {text: info_fact(text) for text in lists}
    fast, plain = FactOps(), FactOps()
    procs: dict[tuple[Any, ...], tuple[Process, Process]] = {}
    for step, (text, host, pid) in enumerate([(lists[0], "a", 1), (lists[0], "a", 2),
                                              (lists[1], "b", 3), (lists[0], "b", 4),
                                              (lists[1], None, 5), (lists[0], "c", 6)]):
        one, other = procs.setdefault((host, pid), (Process(host, pid, 0), Process(host, pid, 0)))
        fast._op_ib_using(one, text, step, facts[text])
        _, network, devices, _ = facts[text]
        for index, name, port, link, suffixes in devices:
            plain._device(other, network, index, name, port, link=link, suffixes=suffixes)
        if step == 2:  # a plugin's own line: the device gains a suffix
            for ops, proc in ((fast, one), (plain, other)):
                ops._device(proc, "IB", "1", "mlx5_1", "1", link="IB", suffixes="/SHARP")
    assert fast.devices == plain.devices
    assert all(list(one.devices) == list(other.devices) for one, other in procs.values())


@given(st.text(st.sampled_from("ab:1.-_[] 0\x00"), max_size=40)
       | st.builds(lambda h, p, d, t: f"{h}:{p}:{p} [{d}]{t}", st.text("node-1._", min_size=1,
                   max_size=12), st.integers(0, 10**12), st.integers(0, 99999),
                   st.sampled_from(["", " ", "  ", " x"])))
def test_a_plain_header_is_read_as_any_other(text: str) -> None:
    # the general reading: the leftmost host:pid:tid [dev] of the tail, a timestamp glued to
    # the host skipped (what parse_header does for any head that is not only the header)
    from clusterenv.nccl_log import lines

    tail = lines._without_source(text[-900:])[-600:]
    match = lines._HEADER.search(tail)
    expected = None
    if match is not None:
        host, start = match.group(1), match.start(1)
        for stamp in lines._TIMESTAMP.finditer(tail, max(0, start - 40), match.end(1)):
            if stamp.start() < start < stamp.end() < match.end(1):
                host = tail[stamp.end() : match.end(1)]
                break
        expected = (host, int(match.group(2)), int(match.group(3)))
    assert parse_header(text) == expected


# -- the scrub of long texts and the --json text ----------------------------------------------


_WORDS = st.sampled_from(["=", "==", "A", "b", "_", "9", " ", "'", '"', ",", ";", "\n", "é",
                          "NCCL_IB_KEY", "TOKEN", "x_pass", " set by environment to ",
                          "0123456789abcdef0123456789abcdef01", "eyJhbGciOiJI.eyJzdWIiOiIx.c2ln",
                          "https://u:p@h/", "@", "-"])


@given(st.lists(_WORDS, max_size=30).map("".join))
def test_assignments_found_by_their_separators_are_those_the_expression_finds(text: str) -> None:
    # a long text (a --json document) is searched for its separators, not at every character
    for sample in (text, text * (5000 // max(len(text), 1) + 1)):
        assert _assignments(sample) == _ASSIGNMENT.sub(_scrub_assignment, sample)


_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False),
                    st.lists(_WORDS, max_size=6).map("".join),
                    st.sampled_from(["ens1\udcff", "a\x7fb", 'q"uote', "back\\slash", "tab\t",
                                     "NCCL_IB_HCA=mlx5_0", "secret=hunter2"]))
_KEYS = st.one_of(st.sampled_from(["host", "env", "NCCL_IB_HCA", "NCCL_IB_KEY", "SLURM_JWT",
                                   "a b", "k\udcff", 'q"k', "x=y"]), st.text(max_size=5))
_TREES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_TREES, st.booleans())
def test_json_text_is_what_walking_every_string_gives(data: Any, compact: bool) -> None:
    options: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 2}
    expected = json.dumps(scrub_tree(escape_tree(to_jsonable(data))), **options)
    assert _json.dumps(to_jsonable(data), compact=compact) == expected


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(_KEYS, _TREES, max_size=4), st.dictionaries(_KEYS, _LEAVES, max_size=3))
def test_json_with_an_encoded_part_is_the_same(rest: dict[str, Any],
                                               inner: dict[str, Any]) -> None:
    data = to_jsonable({**rest, "records": [inner, inner]})
    records = data["records"]
    text = json.dumps(records, ensure_ascii=False, separators=(",", ":"))
    keys = frozenset(k for record in records for k in record)
    encoded = {**data, "records": _json.Encoded(text, keys, lambda: records)}
    assert _json.dumps(encoded, compact=True) == json.dumps(
        scrub_tree(escape_tree(data)), separators=(",", ":"))


def keys_of(data: Any) -> Iterator[Any]:
    """Every key of every mapping in ``data``."""
    if isinstance(data, dict):
        yield from data
        for value in data.values():
            yield from keys_of(value)
    elif isinstance(data, list):
        for value in data:
            yield from keys_of(value)


def test_the_processes_json_is_what_their_dicts_give(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import bench_nccl_log as bench

    path = tmp_path / "job.log"
    bench.write_unique(path, 1_000_000, processes=64, hosts=8)
    for source in [*sorted(LOGS.rglob("*.txt")), path]:
        log = read_nccl_log(source)
        records = [rank.to_dict() for rank in log.ranks]
        text, keys = ranks_json(log.ranks)
        assert text == json.dumps(records, ensure_ascii=False, separators=(",", ":"))
        assert keys == set(keys_of(records))
        assert log_fields(log, records) == log.to_dict()


@pytest.mark.parametrize("path", sorted(REAL.glob("*.txt")), ids=lambda p: p.name)
def test_nccl_log_json_is_the_generic_conversion(path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from clusterenv.cli import main
    from clusterenv.nccl_log import nccl_log_findings

    main(["nccl-log", "--json", str(path)])
    printed = capsys.readouterr().out
    log = read_nccl_log(path)
    findings = nccl_log_findings(log)
    cause = findings[0] if findings and findings[0].severity == "error" else None
    data = {"file": str(path), **log.to_dict(), "findings": findings, "cause": cause,
            "summary": {s: sum(1 for f in findings if f.severity == s)
                        for s in ("error", "warning", "info")}}
    expected = json.dumps(scrub_tree(escape_tree(to_jsonable(data))), separators=(",", ":"))
    assert printed == terminal_line(scrub_text(expected + "\n"))


def test_reading_a_log_leaves_nothing_for_the_cycle_collector(tmp_path: Path) -> None:
    """The parser refers to itself (its table of bound methods); what it held must go when the
    log is read, not wait for the cycle collector, whose pass over a large job's processes cost
    a tenth of the read. The real RoCE capture, read from a file in blocks and as lines."""
    import gc

    path = tmp_path / "job.log"
    path.write_text(ROCE.read_text(encoding="utf-8") * 3, encoding="utf-8")
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for log in (read_nccl_log(path), parse_nccl_log(path.read_text().splitlines())):
            assert log.ranks
            del log
            assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()
