"""Reading a flight-recorder pickle runs nothing and stays bounded, whatever the file holds.

The hostile pickles are built with the standard library's own pickler from objects whose
``__reduce__`` names a callable (``os.system`` writing a marker file): if anything ran, the
marker would exist. The real dumps come from torch (``tests/hang_dumps.py``).
"""

from __future__ import annotations

import copyreg
import io
import os
import pickle
import pickletools
from pathlib import Path
from typing import Any

import pytest

from clusterenv.hang.dumps import read_inputs
from clusterenv.hang.unpickle import (
    CorruptDump,
    DumpLimits,
    NoGlobalsUnpickler,
    UnsafeDump,
    load_pickle,
    scan_pickle,
)
from tests.hang_dumps import Generated


class RunsCode:
    """Unpickling this with ``pickle.load`` runs ``os.system(command)``."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (self.command,)


class Plain:
    """An ordinary object: pickled with BUILD (state) after NEWOBJ or REDUCE."""

    def __init__(self) -> None:
        self.value = 1


def hostile(marker: Path, protocol: int) -> bytes:
    entry = {"process_group": ["0", "default_pg"], "collective_seq_id": 1,
             "profiling_name": RunsCode(f"touch {marker}")}
    return pickle.dumps({"version": "2.10", "entries": [entry]}, protocol=protocol)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_reduce_to_os_system_is_refused_by_name_and_nothing_runs(
    tmp_path: Path, protocol: int
) -> None:
    marker = tmp_path / "ran"
    data = hostile(marker, protocol)
    with pytest.raises(UnsafeDump, match=r"'posix\.system'.*nothing was run"):
        load_pickle(data)
    # The unpickler alone, without the opcode scan, refuses it as well, by the same name.
    with pytest.raises(UnsafeDump, match=r"'posix\.system'"):
        NoGlobalsUnpickler(io.BytesIO(data)).load()
    assert not marker.exists()
    # The check is not vacuous: the standard unpickler runs it.
    pickle.loads(data)  # proving the file is hostile
    assert marker.exists()


def test_a_hostile_dump_among_real_ones_is_refused_by_name_and_the_rest_is_read(
    tmp_path: Path, fr_dumps: Generated
) -> None:
    marker = tmp_path / "ran"
    jobs = tmp_path / "job"
    jobs.mkdir()
    for rank in (0, 1):
        name = f"comm_lib_trace_rank_{rank}"
        (jobs / name).write_bytes((fr_dumps.stall / name).read_bytes())
    (jobs / "trace-evil-rank2").write_bytes(hostile(marker, 2))
    inputs = read_inputs([jobs])
    assert [d.rank for d in inputs.dumps] == [0, 1]
    assert any("trace-evil-rank2: refused: it imports 'posix.system'" in n for n in inputs.notes)
    assert not marker.exists()


def test_a_registered_extension_code_is_refused(tmp_path: Path) -> None:
    # EXT1 looks the callable up in copyreg's registry: still a global, still refused.
    copyreg.add_extension(os.system.__module__, "system", 0x7E)
    try:
        data = pickle.dumps({"entries": [RunsCode(f"touch {tmp_path / 'ran'}")]}, protocol=2)
        assert any(op.name == "EXT1" for op, _, _ in pickletools.genops(data))
        with pytest.raises(UnsafeDump, match="EXT1"):
            scan_pickle(data)
        with pytest.raises(UnsafeDump, match=r"'posix\.system'"):
            NoGlobalsUnpickler(io.BytesIO(data)).load()
    finally:
        copyreg.remove_extension(os.system.__module__, "system", 0x7E)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_any_object_that_is_not_plain_data_is_refused(protocol: int) -> None:
    with pytest.raises(UnsafeDump, match=r"it imports '[a-z_.]+\.[A-Za-z_]+'|builds objects"):
        load_pickle(pickle.dumps({"entries": [Plain()]}, protocol=protocol))


@pytest.mark.parametrize("value", [{1: "a"}, {("a", 1): "b"}, {None: 1}])
def test_dict_keys_must_be_strings(value: dict[Any, Any]) -> None:
    # Integer keys can be chosen to collide in the hash table: building such a dict is
    # quadratic. torch keys every dict of a dump by string.
    with pytest.raises(UnsafeDump, match="dict key of type"):
        load_pickle(pickle.dumps({"entries": [], "x": value}, protocol=2))


@pytest.mark.parametrize("value", [{1, 2}, frozenset({1}), bytearray(b"x")])
def test_sets_and_bytearrays_are_refused(value: object) -> None:
    with pytest.raises(UnsafeDump):
        load_pickle(pickle.dumps({"entries": [value]}, protocol=5))


def test_the_opcode_cap_bounds_memory() -> None:
    data = pickle.dumps({"entries": [[] for _ in range(5000)]}, protocol=2)
    with pytest.raises(CorruptDump, match="more than 1000 pickle opcodes"):
        load_pickle(data, DumpLimits(max_opcodes=1000))
    assert len(load_pickle(data)["entries"]) == 5000


def test_the_byte_cap_is_checked_before_parsing() -> None:
    with pytest.raises(CorruptDump, match="over the 100-byte limit"):
        load_pickle(pickle.dumps({"entries": ["x" * 200]}), DumpLimits(max_bytes=100))


@pytest.mark.timeout(60)
def test_shared_references_do_not_multiply_the_work(tmp_path: Path) -> None:
    # 2**60 leaves if walked: memo references make a tiny pickle of an enormous tree. Reading
    # and summarising never walks it.
    node: list[Any] = [1]
    for _ in range(60):
        node = [node, node]
    entry = {"process_group": ["0", "default_pg"], "collective_seq_id": 3, "is_p2p": False,
             "profiling_name": "gloo:all_reduce", "input_sizes": node, "frames": node,
             "input_dtypes": node}
    data = pickle.dumps({"version": "2.10", "entries": [entry] * 1000}, protocol=2)
    assert len(data) < 10_000
    (tmp_path / "comm_lib_trace_rank_0").write_bytes(data)
    inputs = read_inputs([tmp_path])
    call = inputs.dumps[0].groups[0].last
    assert call is not None and call.seq == 3


def test_deep_nesting_is_data_not_a_crash() -> None:
    # {"entries": [[[...100 000 levels...]]]}: MARK, then LIST closing each level.
    nested = b"".join([b"\x80\x02}X\x07\x00\x00\x00entries", b"(" * 100_000, b"]",
                       b"l" * 100_000, b"s."])
    value = load_pickle(nested)
    assert isinstance(value["entries"], list)


@pytest.mark.parametrize("cut", [1, 100, -1])
def test_a_truncated_real_dump_is_corrupt_not_a_crash(fr_dumps: Generated, cut: int) -> None:
    data = (fr_dumps.stall / "comm_lib_trace_rank_0").read_bytes()
    with pytest.raises(CorruptDump, match="not a complete pickle"):
        load_pickle(data[:cut])


def test_real_dumps_read_as_the_standard_unpickler_reads_them(fr_dumps: Generated) -> None:
    for directory in (fr_dumps.agree, fr_dumps.stall):
        for path in sorted(directory.glob("comm_lib_trace_rank_*")):
            data = path.read_bytes()
            assert load_pickle(data) == pickle.loads(data), path  # torch's own
