"""Which network plugin each NCCL release would load, and which libnccl.so.2 torch would load.

The plugins are real shared objects compiled here (tests/nccl_artefacts.py) and the library is
a real NCCL release from the package index; symbols and dynamic sections are read from the
files. The rules come from NCCL's source at each release tag (the table written by
tools/nccl_plugin_rules.py): for instance 2.12-2.20 try only ``libnccl-net-NAME.so`` for
``NCCL_NET_PLUGIN=NAME``, 2.21 the name first, 2.27.3 the name only when it looks like
``lib*.so``, 2.28 take ``none`` and comma-separated lists.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterenv._elf import ElfError, exported_symbols, read_dynamic
from clusterenv.nccl.plugin import resolve_net_plugin, rule_for, search_path
from tests.nccl_artefacts import compiled_plugin, nccl_release

V = {"2.12": (2, 12, 7), "2.19": (2, 19, 3), "2.21": (2, 21, 5), "2.27.3": (2, 27, 3),
     "2.28": (2, 28, 3), "2.30": (2, 30, 7)}


def test_exported_symbols_and_dynamic_section_come_from_the_file(tmp_path: Path) -> None:
    plugin = compiled_plugin(tmp_path, "ncclNetPlugin_v8")
    assert exported_symbols(str(plugin), "ncclNetPlugin_") == {"ncclNetPlugin_v8"}
    library = nccl_release() / "libnccl.so.2"
    dynamic = read_dynamic(str(library))
    assert dynamic.soname == "libnccl.so.2" and "libc.so.6" in dynamic.needed
    assert {"ncclGetVersion", "ncclGetUniqueId"} <= exported_symbols(str(library), "ncclGet")
    (tmp_path / "not-elf.so").write_bytes(b"#!/bin/sh\n")
    with pytest.raises(ElfError, match="not an ELF file"):
        exported_symbols(str(tmp_path / "not-elf.so"))


def test_a_plugin_on_ld_library_path_is_found_as_the_loader_finds_it(tmp_path: Path) -> None:
    plugin = compiled_plugin(tmp_path / "plug", "ncclNetPlugin_v8")
    library = str(nccl_release() / "libnccl.so.2")
    env = {"LD_LIBRARY_PATH": f"relative:{tmp_path / 'plug'}"}
    found = resolve_net_plugin(env, version=V["2.21"], library=library)
    assert (found.path, found.interface) == (str(plugin), "ncclNetPlugin_v8")
    assert "from LD_LIBRARY_PATH" in found.note and "v2.21.5-1" in found.rules
    none = resolve_net_plugin({}, version=V["2.21"], library=library)
    assert none.path is None and "libnccl-net.so (not found)" in none.note


def test_a_release_accepts_only_the_plugin_interfaces_it_knows(tmp_path: Path) -> None:
    compiled_plugin(tmp_path, "ncclNetPlugin_v8")
    env = {"LD_LIBRARY_PATH": str(tmp_path)}
    assert resolve_net_plugin(env, version=V["2.21"], library=None).interface == \
        "ncclNetPlugin_v8"
    old = resolve_net_plugin(env, version=V["2.12"], library=None)  # v5 and v4 only
    assert old.path is None and "exports none of ncclNetPlugin_v5, ncclNetPlugin_v4" in old.note
    assert rule_for(V["2.30"]).symbols[0] == "ncclNetPlugin_v12"


@pytest.mark.parametrize(("release", "value", "loads"), [
    ("2.19", "{dir}/libnccl-net-ofi.so", False),  # only libnccl-net-NAME.so is tried
    ("2.19", "ofi", True),                          # libnccl-net-ofi.so, as v6
    ("2.21", "{dir}/libnccl-net-ofi.so", True),    # the name first
    ("2.27.3", "{dir}/libnccl-net-ofi.so", False),  # a path is not lib*.so: prefixed only
    ("2.27.3", "libnccl-net-ofi.so", True),
    ("2.28", "{dir}/libnccl-net-ofi.so", True),
    ("2.28", "none", False),
    ("2.28", "missing,ofi", True),                  # a list, in order
    ("2.21", "missing,ofi", False),                 # no lists before 2.27
])
def test_nccl_net_plugin_is_read_as_each_release_reads_it(
    tmp_path: Path, release: str, value: str, loads: bool
) -> None:
    # v6 and v8: an interface every release here accepts (2.19 stops at v7, 2.28 starts at v6)
    plugin = compiled_plugin(tmp_path, "ncclNetPlugin_v6", "ncclNetPlugin_v8",
                             name="libnccl-net-ofi.so")
    env = {"LD_LIBRARY_PATH": str(tmp_path), "NCCL_NET_PLUGIN": value.format(dir=tmp_path)}
    found = resolve_net_plugin(env, version=V[release], library=None)
    assert (found.path == str(plugin)) is loads, found


def test_the_loader_order_puts_ld_library_path_before_runpath(tmp_path: Path) -> None:
    dirs = search_path({"LD_LIBRARY_PATH": f"{tmp_path}::."}, caller=None,
                       fallback_runpath=("/site/nvidia/nccl/lib",))
    assert dirs == [(str(tmp_path), "LD_LIBRARY_PATH"),
                    ("/site/nvidia/nccl/lib", "torch's RUNPATH")]
