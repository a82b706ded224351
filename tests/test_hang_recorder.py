"""The flight-recorder variables: read from the installed torch, checked by doctor, set (only
when unset) by launch, env and the torch integration.

The names and default come from torch's own header (``FlightRecorder.hpp``), and are held
against its library's strings and against what torch does when run with them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterenv import doctor
from clusterenv.cli import main
from clusterenv.hang.dumps import read_inputs
from clusterenv.hang.enable import apply_recorder, plan_recorder
from clusterenv.hang.recorder import (
    BUFFER_SIZE_NAMES,
    DUMP_FILE_NAMES,
    DUMP_ON_TIMEOUT,
    HANG_DIR_VARIABLE,
    TorchRecorder,
    find_torch,
    parse_recorder_header,
    recorder_checks,
    stoi,
)
from clusterenv.launch import plan_launch
from tests.hang_dumps import Generated
from tests.test_launch import NODE1, runpod_host

SCRIPT = Path(__file__).parent / "scripts" / "fr_buffer.py"
EXTRACT = Path(__file__).parent / "scripts" / "torch_fr_variables.py"
NEW = TorchRecorder("2.13.0", BUFFER_SIZE_NAMES, DUMP_FILE_NAMES, 2000, "test")
OLD_ZERO = TorchRecorder("2.3.0", BUFFER_SIZE_NAMES[1:], DUMP_FILE_NAMES[1:], 0, "test")
ALL_NAMES = (*BUFFER_SIZE_NAMES, *DUMP_FILE_NAMES, DUMP_ON_TIMEOUT, HANG_DIR_VARIABLE)


def torch_dir() -> Path:
    found = find_torch()
    if found is None:
        pytest.skip("torch is not installed")
    import importlib.util

    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def test_the_names_and_default_are_read_from_the_installed_torch(torch_required: None) -> None:
    found = find_torch()
    assert found is not None and found.version is not None
    # The extraction script reads the same torch from its files alone.
    facts = json.loads(subprocess.run(
        [sys.executable, str(EXTRACT), str(torch_dir())], capture_output=True, text=True,
        check=True).stdout)
    assert facts["version"] == found.version
    assert (tuple(facts["buffer_size"]), facts["default_entries"]) == (
        found.buffer_size, found.default_entries)
    assert found.evidence.endswith(facts["header"])
    # Every name the table gives this torch is a string its own library or headers hold.
    for name in (*found.buffer_size, *found.dump_file):
        assert name in facts["library_names"], name
    assert DUMP_ON_TIMEOUT in facts["nccl_header_names"]
    assert found.dump_on_timeout is True
    assert found.buffer_size == BUFFER_SIZE_NAMES and found.dump_file == DUMP_FILE_NAMES


def test_the_header_parser_takes_the_buffer_size_call_only() -> None:
    # torch 2.13's FlightRecorder.hpp, verbatim: the capture_cpp_stack_ call is not the one.
    header = (
        '    max_entries_ = getCvarInt(\n'
        '        {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, 2000);\n'
        '    capture_cpp_stack_ = getCvarBool(\n'
        '        {"TORCH_FR_CPP_STACK", "TORCH_NCCL_TRACE_CPP_STACK"}, false);\n')
    assert parse_recorder_header(header) == (BUFFER_SIZE_NAMES, 2000)
    assert parse_recorder_header('getCvarInt({"TORCH_NCCL_TRACE_BUFFER_SIZE"}, 0)') == (
        ("TORCH_NCCL_TRACE_BUFFER_SIZE",), 0)
    assert parse_recorder_header('getCvarInt({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"}, 480)') is None


@pytest.mark.parametrize(("text", "value"), [
    ("2000", 2000), (" 12x", 12), ("+5", 5), ("-1", -1), ("0", 0), ("abc", None), ("", None),
    ("99999999999", None), ("\t7", 7),
])
def test_stoi_reads_like_std_stoi(text: str, value: int | None) -> None:
    assert stoi(text) == value


def test_what_doctor_says_is_what_torch_does(fr_dumps: Generated) -> None:
    # Unset: the session's real dumps were made with nothing set, and hold entries.
    assert read_inputs([fr_dumps.agree]).dumps[0].entries > 0
    assert recorder_checks({}, find_torch()) == []
    # The older spelling at 0, and the newer one unreadable; both run at once.
    cases = {
        "old-zero": {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"},
        "invalid": {"TORCH_FR_BUFFER_SIZE": "abc"},
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_")}
    procs = {name: subprocess.Popen([sys.executable, str(SCRIPT)], env={**base, **env},
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, env in cases.items()}
    out: dict[str, str] = {}
    try:
        out["old-zero"] = procs["old-zero"].communicate(timeout=180)[0]
        # The valid case made its group and three all_reduces: ten more seconds is ample.
        try:
            out["invalid"] = procs["invalid"].communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            out["invalid"] = "(still running)"
    finally:
        for proc in procs.values():
            proc.kill()
            proc.communicate()
    torch = find_torch()
    # torch never got past creating the group: it hung there, or aborted (both measured).
    invalid = out["invalid"]
    assert "creating" in invalid or invalid == "(still running)", invalid
    assert "entries=" not in invalid, invalid
    assert invalid == "(still running)" or procs["invalid"].returncode != 0, invalid
    assert {f.code for _, f in recorder_checks(cases["invalid"], torch)} == {
        "flight-recorder-invalid"}
    assert "entries=0" in out["old-zero"], out["old-zero"]
    assert {f.code for _, f in recorder_checks(cases["old-zero"], torch)} == {
        "flight-recorder-off"}


def test_doctor_reports_the_recorder_off_only_where_it_is(tmp_path: Path) -> None:
    off = recorder_checks({"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, NEW)
    assert [(v, f.code, f.severity) for v, f in off] == [
        ("TORCH_NCCL_TRACE_BUFFER_SIZE", "flight-recorder-off", "info")]
    assert off[0][1].fix.startswith("unset TORCH_NCCL_TRACE_BUFFER_SIZE")
    # The newer spelling wins when both are set: the older one's 0 is not in effect.
    assert recorder_checks({"TORCH_FR_BUFFER_SIZE": "100",
                            "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, NEW) == []
    # A torch whose default is 0 records nothing unless told to.
    unset = recorder_checks({}, OLD_ZERO)
    assert [f.code for _, f in unset] == ["flight-recorder-off"]
    assert "export TORCH_NCCL_TRACE_BUFFER_SIZE=2000" in unset[0][1].fix
    # A torch that does not read the newer name is not judged by it.
    assert [f.code for _, f in recorder_checks({"TORCH_FR_BUFFER_SIZE": "abc"}, OLD_ZERO)] == \
        ["flight-recorder-off"]
    # Through doctor, on a snapshot (no torch of its own): the explicit values only.
    root = runpod_host(tmp_path, NODE1)
    found = doctor({**NODE1, "TORCH_FR_BUFFER_SIZE": "0"}, root=root)
    assert [f.code for f in found if f.code.startswith("flight-")] == ["flight-recorder-off"]
    assert not [f for f in doctor(NODE1, root=root) if f.code.startswith("flight-")]


env_values = st.dictionaries(st.sampled_from(ALL_NAMES), st.text(min_size=1, max_size=8),
                             max_size=len(ALL_NAMES))


@given(env_values)
def test_the_recorder_plan_never_changes_a_variable_that_is_set(environ: dict[str, str]) -> None:
    plan = plan_recorder(environ, directory="/jobs/1", host="node-1", torch=NEW)
    for name in plan.env:
        assert name not in environ
    # One spelling of each setting at most, and none where any spelling is set.
    for family in (BUFFER_SIZE_NAMES, DUMP_FILE_NAMES):
        assert len(set(family) & set(plan.env)) == (0 if set(family) & set(environ) else 1)
    # apply_recorder creates the job directory, a user's relative CLUSTERENV_HANG_DIR too: in
    # a directory of its own, not in the checkout the tests run from
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            twice = dict(environ)
            apply_recorder(twice, directory="/nonexistent/jobs/1", host="node-1", torch=NEW)
            again = dict(twice)
            apply_recorder(again, directory="/nonexistent/jobs/2", host="node-2", torch=NEW)
        finally:
            os.chdir(here)
    assert again == twice


def test_the_recorder_plan_uses_the_names_the_torch_reads() -> None:
    new = plan_recorder({}, directory="/jobs/1", host="gpu node/1", torch=NEW).env
    assert new == {"TORCH_FR_BUFFER_SIZE": "2000",
                   "TORCH_FR_DUMP_TEMP_FILE": "/jobs/1/trace-gpu_node_1-rank",
                   DUMP_ON_TIMEOUT: "1", HANG_DIR_VARIABLE: "/jobs/1"}
    old = plan_recorder({}, directory="/jobs/1", host="n", torch=OLD_ZERO).env
    assert set(old) == {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                        DUMP_ON_TIMEOUT, HANG_DIR_VARIABLE}
    assert old["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    # The user's older spelling is kept, and the newer one (which would win) is not set.
    kept = plan_recorder({"TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}, directory="/j", torch=NEW)
    assert "TORCH_FR_BUFFER_SIZE" not in kept.env
    assert {c.name: c.action for c in kept.changes}["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "keep"


def test_launch_sets_the_recorder_and_plans_the_launch_record(tmp_path: Path) -> None:
    root = runpod_host(tmp_path, NODE1)
    plan = plan_launch(NODE1, command=["train.py"], root=root, torchrun=["torchrun"])
    assert plan.recorder is not None and plan.record is not None
    directory = plan.environ[HANG_DIR_VARIABLE]
    assert str(plan.recorder.directory) == directory
    names = plan.recorder.torch.dump_file if plan.recorder.torch else DUMP_FILE_NAMES[1:]
    assert plan.environ[names[0]].startswith(f"{directory}/trace-")
    assert plan.environ[DUMP_ON_TIMEOUT] == "1"
    record = plan.record
    assert (record.node_rank, record.num_nodes, record.nproc_per_node) == (1, 2, 2)
    assert list(record.ranks) == [2, 3] and record.node_addr == NODE1["NODE_ADDR"]
    off = plan_launch(NODE1, command=["train.py"], root=root, torchrun=["torchrun"],
                      flight_recorder=False)
    assert off.recorder is None and off.record is None
    assert not set(ALL_NAMES) & set(off.environ)


def test_env_flight_recorder_exports_them(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = runpod_host(tmp_path, NODE1)
    assert main(["env", "--flight-recorder", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"export {DUMP_ON_TIMEOUT}='1'" in out and f"export {HANG_DIR_VARIABLE}=" in out
    assert main(["env", "--root", str(root)]) == 0
    assert DUMP_ON_TIMEOUT not in capsys.readouterr().out  # only on request
