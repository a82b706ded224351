"""``clusterenv hang`` on real flight-recorder dumps: what it names against what the ranks did.

The dumps come from torch itself (``tests/hang_dumps.py``: three Gloo ranks; after the "agree"
dumps rank 2 stops while ranks 0 and 1 enter one more all_reduce of the default group, and rank
1 an all_gather of the group of ranks 1 and 2). Every expectation is what the ranks printed
about themselves, never clusterenv's own output.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clusterenv.cli import main
from clusterenv.hang import HangReport, Stall, diagnose_hang
from clusterenv.hang.diagnose import default_paths
from clusterenv.hang.record import LaunchRecord, write_launch_record
from clusterenv.preflight import NodeRef, PreflightResult, Problem, Verdict
from tests.hang_dumps import BEHIND, WORLD, Generated

NCCL_LOG = Path(__file__).parent / "data" / "nccl_logs" / "real" / \
    "nccl-info-docker-bridge-eth0-no-libibverbs-socket.txt"
NCCL_HOST = "26a46eb2b1d3"  # the host every line of that log names


def entered(fr_dumps: Generated, group: str) -> dict[int, tuple[str, str]]:
    """Rank -> (operation, call site) of what it entered in ``group`` after the agree dumps."""
    return {rank: (op, where) for rank, calls in fr_dumps.entered.items()
            for g, op, where in calls if g == group}


def stall_with(report: HangReport, operation: str) -> Stall:
    found = [s for s in report.stalls if s.call.operation == operation]
    assert len(found) == 1, report
    return found[0]


def assert_names_what_the_ranks_did(report: HangReport, fr_dumps: Generated, *,
                                    stacks: bool) -> None:
    default = entered(fr_dumps, "default")
    assert report.verdict == "hang" and report.exit_code == 1
    stall = stall_with(report, "all_reduce")
    assert stall.desc == "default_pg"
    assert set(stall.waiting) == set(default)
    assert set(stall.behind) == set(range(WORLD)) - set(default) == {BEHIND}
    if stacks:  # which call: the line the ranks printed as the one they entered
        assert stall.call.where is not None
        site = stall.call.where.rsplit("/", 1)[-1].split(" in ")[0]  # "fr_dumps.py:64"
        assert {where for _, where in default.values()} == {site}
    # g12: rank 1 entered an all_gather; rank 2, its other member, never did.
    g12 = entered(fr_dumps, "g12")
    gather = stall_with(report, "all_gather")
    assert set(gather.waiting) == set(g12)
    assert set(gather.behind) == {BEHIND}
    assert not gather.members_known  # Gloo's pg_config does not list the members


def test_pickles_named_as_torch_names_them(fr_dumps: Generated) -> None:
    report = diagnose_hang([fr_dumps.stall])
    assert_names_what_the_ranks_did(report, fr_dumps, stacks=True)
    assert report.ranks_read == tuple(range(WORLD))
    assert any(n.startswith("no launch record") for n in report.notes)  # it says so
    # The group both ranks 0 and 1 used earlier is in agreement.
    assert any("ranks 0-1 all reached all_reduce" in line for line in report.agreed)


def test_json_dumps_named_with_host_and_rank(fr_dumps: Generated) -> None:
    report = diagnose_hang([fr_dumps.stall / "json"])
    assert_names_what_the_ranks_did(report, fr_dumps, stacks=False)
    assert all(d.form == "json" for d in report.dumps)
    assert report.node_of(BEHIND) is not None
    assert report.node_of(BEHIND).host == "fakehost"  # type: ignore[union-attr]


def test_pickle_and_json_mixed_and_a_rank_read_twice(tmp_path: Path, fr_dumps: Generated
                                                     ) -> None:
    shutil.copy(fr_dumps.stall / "comm_lib_trace_rank_0", tmp_path)
    for rank in range(WORLD):
        shutil.copy(fr_dumps.stall / "json" / f"trace-fakehost-rank{rank}.json", tmp_path)
    report = diagnose_hang([tmp_path])
    assert_names_what_the_ranks_did(report, fr_dumps, stacks=False)
    assert any(n.startswith("rank 0: two dumps") for n in report.notes)


def test_dumps_where_every_rank_made_the_same_calls_agree(fr_dumps: Generated,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    report = diagnose_hang([fr_dumps.agree])
    assert report.verdict == "agree" and report.exit_code == 0 and not report.stalls
    assert main(["hang", str(fr_dumps.agree)]) == 0
    assert "AGREE" in capsys.readouterr().out


def test_a_missing_ranks_dump_is_evidence(tmp_path: Path, fr_dumps: Generated) -> None:
    for rank in range(WORLD):
        if rank != BEHIND:
            shutil.copy(fr_dumps.stall / f"comm_lib_trace_rank_{rank}", tmp_path)
    # Three nodes of one process each; the record of the behind rank's node is not here.
    for node_rank in range(WORLD):
        if node_rank != BEHIND:
            write_launch_record(tmp_path, LaunchRecord(
                node_rank, WORLD, 1, node_rank, f"host-{node_rank}", f"10.65.0.{2 + node_rank}",
                "10.65.0.2:29500", "2026-05-01T12:00:00Z"))
    report = diagnose_hang([tmp_path])
    stall = stall_with(report, "all_reduce")
    assert stall.missing == (BEHIND,) and not stall.behind
    assert set(stall.waiting) == set(entered(fr_dumps, "default"))
    assert report.world_size == WORLD
    node = report.node_of(BEHIND)
    assert node is not None and node.node_rank == BEHIND and node.host is None
    assert node.source.startswith("computed")
    assert f"rank {BEHIND} (node {BEHIND}) left no dump" in report.title


def test_a_truncated_dump_is_skipped_with_a_note_naming_it(tmp_path: Path,
                                                           fr_dumps: Generated) -> None:
    for rank in range(WORLD):
        shutil.copy(fr_dumps.stall / f"comm_lib_trace_rank_{rank}", tmp_path)
    cut = tmp_path / "comm_lib_trace_rank_1"
    cut.write_bytes(cut.read_bytes()[:300])
    report = diagnose_hang([tmp_path])
    assert any(n.startswith(f"{cut}: skipped: not a complete pickle") for n in report.notes)
    assert report.ranks_read == (0, 2)
    stall = stall_with(report, "all_reduce")
    assert stall.missing == (1,) and stall.behind == (BEHIND,)


def test_nothing_readable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "trace-x-rank0").write_bytes(b"garbage")
    (tmp_path / "trace-x-rank1").write_bytes(b"")
    assert main(["hang", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "UNREADABLE" in out and "neither a pickle nor JSON" in out and "empty file" in out
    assert main(["hang", str(tmp_path / "nope")]) == 2


def test_dumps_of_a_recorder_that_was_off_are_nothing_to_judge(
    tmp_path: Path, fr_dumps: Generated
) -> None:
    # With a buffer size of 0, torch's dump has an empty "entries" list (tests/scripts/
    # fr_buffer.py counts them): these are real JSON dumps with their entries taken out.
    for rank in range(WORLD):
        name = f"trace-fakehost-rank{rank}.json"
        dump = json.loads((fr_dumps.stall / "json" / name).read_text())
        dump["entries"] = []
        (tmp_path / name).write_text(json.dumps(dump))
    report = diagnose_hang([tmp_path])
    assert report.verdict == "unreadable" and report.exit_code == 2
    assert "hold no recorder entry" in report.title


def test_json_output_is_the_report(fr_dumps: Generated, capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    assert main(["hang", "--json", str(fr_dumps.stall)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "hang" and data["exit_code"] == 1
    default = next(s for s in data["stalls"] if s["desc"] == "default_pg")
    assert default["suspects"] == [BEHIND]


def test_nccl_log_and_preflight_evidence_join_the_named_node(
    tmp_path: Path, fr_dumps: Generated
) -> None:
    for rank in range(WORLD):
        shutil.copy(fr_dumps.stall / f"comm_lib_trace_rank_{rank}", tmp_path)
    hosts = {0: "host-0", 1: "host-1", 2: NCCL_HOST}
    for node_rank, host in hosts.items():
        write_launch_record(tmp_path, LaunchRecord(node_rank, WORLD, 1, node_rank, host,
                                                   f"10.65.0.{2 + node_rank}", "10.65.0.2:29500",
                                                   "2026-05-01T12:00:00Z"))
    problem = Problem.about("preflight-mtu-differs", "ens1 MTU 1500 on rank 2, 9000 elsewhere",
                         (NodeRef(BEHIND, "10.65.0.4", NCCL_HOST),))
    verdict = Verdict(expected_nodes=3, primary="10.65.0.2:29501", nodes=(),
                      problems=(problem,), elapsed_s=0.1, reported=3)
    preflight = tmp_path / "preflight.json"
    preflight.write_text(json.dumps(PreflightResult(1, "primary", 0, None, verdict).to_dict()))
    report = diagnose_hang([tmp_path], nccl_logs=[NCCL_LOG], preflight=preflight)
    node = report.node_of(BEHIND)
    assert node is not None and node.host == NCCL_HOST
    assert any("Failed to open libibverbs.so[.1]" in line for line in node.evidence)
    assert any("ens1 MTU 1500 on rank 2" in line for line in node.evidence)
    waiting = report.node_of(0)
    assert waiting is not None and not waiting.evidence  # host-0 is not in the log


def test_default_path_is_the_job_directory_or_the_newest_under_the_cache(tmp_path: Path
                                                                         ) -> None:
    assert default_paths({"CLUSTERENV_HANG_DIR": "/x/job"})[0] == [Path("/x/job")]
    base = tmp_path / "cache" / "clusterenv" / "hang"
    assert default_paths({"XDG_CACHE_HOME": str(tmp_path / "cache")})[0] == []
    (base / "20260101-000000-1").mkdir(parents=True)
    newest = base / "20260102-000000-2"
    newest.mkdir()
    assert default_paths({"XDG_CACHE_HOME": str(tmp_path / "cache")})[0] == [newest]
