"""Finding libnccl.so.2 and asking it, for real (the ``nvidia-nccl-cu12`` wheel, no GPU).

Where the wheel is missing these tests skip with the reason; under ``CI=true`` they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from clusterenv.nccl.probe import (
    LIBRARY_VARIABLE,
    NcclLibrary,
    ask_nccl,
    find_nccl_library,
    parse_probe_output,
)
from tests.conftest import skip_or_fail

CLEAN = {k: v for k, v in os.environ.items()
         if not k.startswith("NCCL_") and k != LIBRARY_VARIABLE}


@pytest.fixture(scope="module")
def library() -> NcclLibrary:
    """The wheel's library, found the way show and doctor find it."""
    search = find_nccl_library(CLEAN)
    if search.library is None:
        skip_or_fail(f"NCCL is not installed: {search.note}; pip install nvidia-nccl-cu12")
    return search.library


def wheel_version() -> tuple[int, ...]:
    """The version pip recorded for the wheel: evidence independent of the library."""
    text = metadata.version("nvidia-nccl-cu12")
    return tuple(int(p) for p in text.split(".")[:3])


# -- finding the library ---------------------------------------------------------------------


def test_the_nvidia_package_comes_first(library: NcclLibrary) -> None:
    assert library.source == "nvidia package"
    assert library.path.endswith("/nvidia/nccl/lib/libnccl.so.2")
    assert Path(library.path).is_file()


def test_the_variable_overrides_or_turns_off(library: NcclLibrary, tmp_path: Path) -> None:
    off = find_nccl_library({**CLEAN, LIBRARY_VARIABLE: "none"})
    assert off.library is None and not off.problem
    assert off.note == "CLUSTERENV_NCCL_LIBRARY=none: NCCL is not asked"
    given = find_nccl_library({**CLEAN, LIBRARY_VARIABLE: library.path})
    assert given.library == NcclLibrary(library.path, LIBRARY_VARIABLE)
    directory = find_nccl_library({**CLEAN, LIBRARY_VARIABLE: str(Path(library.path).parent)})
    assert directory.library is not None and directory.library.path == library.path
    missing = tmp_path / "libnccl.so.2"
    wrong = find_nccl_library({**CLEAN, LIBRARY_VARIABLE: str(missing)})
    assert wrong.library is None and wrong.problem
    assert wrong.note == (f"CLUSTERENV_NCCL_LIBRARY={str(missing)!r} is not a readable file: "
                          "set it to the path of libnccl.so.2, or to 'none'")


def _find_without_site(env: dict[str, str], ld_cache: str | None = None) -> dict[str, Any]:
    """find_nccl_library in an interpreter without site-packages (no nvidia package)."""
    src = str(Path(__file__).parents[1] / "src")
    code = (
        f"import sys, json; sys.path.insert(0, {src!r});"
        "from clusterenv.nccl.probe import find_nccl_library;"
        f"s = find_nccl_library(__import__('os').environ, ld_cache={ld_cache or '/nonexistent'!r});"
        "print(json.dumps({'path': s.library and s.library.path, "
        "'source': s.library and s.library.source, 'note': s.note}))"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=60)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_then_ld_library_path(library: NcclLibrary, tmp_path: Path) -> None:
    (tmp_path / "libnccl.so.2").symlink_to(library.path)
    env = {"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": f"/nonexistent:{tmp_path}"}
    found = _find_without_site(env)
    assert found["source"] == "LD_LIBRARY_PATH"
    assert found["path"] == str(tmp_path / "libnccl.so.2")
    nothing = _find_without_site({"PATH": os.environ.get("PATH", "")})
    assert nothing["path"] is None
    assert nothing["note"].startswith("no libnccl.so.2 in LD_LIBRARY_PATH, an nvidia package")


def test_ld_library_path_comes_before_the_wheel(library: NcclLibrary, tmp_path: Path) -> None:
    """The loader's order for a library torch links: LD_LIBRARY_PATH, then the RUNPATH that
    points at the wheel."""
    (tmp_path / "libnccl.so.2").symlink_to(library.path)
    found = find_nccl_library({**CLEAN, "LD_LIBRARY_PATH": f"relative:{tmp_path}"})
    assert found.library == NcclLibrary(str(tmp_path / "libnccl.so.2"), "LD_LIBRARY_PATH")


def test_then_the_linker_cache(library: NcclLibrary, tmp_path: Path) -> None:
    ldconfig = shutil.which("ldconfig") or shutil.which("ldconfig", path="/sbin:/usr/sbin")
    if ldconfig is None:
        skip_or_fail("ldconfig not found (libc-bin)")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copy(library.path, libdir / "libnccl.so.2")
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"{libdir}\n")
    cache = tmp_path / "ld.so.cache"
    # A real cache written by the real ldconfig, holding only our directory.
    subprocess.run([ldconfig, "-X", "-f", str(conf), "-C", str(cache)], check=True, timeout=60)
    found = _find_without_site({"PATH": os.environ.get("PATH", "")}, ld_cache=str(cache))
    assert found["source"] == "linker cache"
    assert found["path"] == str(libdir / "libnccl.so.2")


# -- asking NCCL -----------------------------------------------------------------------------


def test_nccl_answers_with_its_version_and_choice(library: NcclLibrary) -> None:
    lo_only = {**CLEAN, "NCCL_SOCKET_IFNAME": "=lo"}
    nothing = {**CLEAN, "NCCL_SOCKET_IFNAME": "=no-such-interface"}
    answers = ask_nccl([lo_only, nothing], library)
    assert answers[0].version == wheel_version()
    assert answers[0].by == "nccl " + ".".join(map(str, wheel_version()))
    assert (answers[0].interface, answers[0].address) == ("lo", "127.0.0.1")
    assert any("Bootstrap" in line and "Using lo:127.0.0.1" in line for line in answers[0].log)
    # Selecting nothing is an answer (ncclGetUniqueId fails), not an error.
    assert answers[1].answered and answers[1].interface is None and answers[1].error is None


def test_never_in_the_callers_process(library: NcclLibrary) -> None:
    ask_nccl([CLEAN], library)
    maps = Path("/proc/self/maps").read_text()
    assert "libnccl" not in maps


def test_nccl_debug_file_is_not_written(library: NcclLibrary, tmp_path: Path) -> None:
    target = tmp_path / "nccl.log"
    [answer] = ask_nccl([{**CLEAN, "NCCL_DEBUG_FILE": str(target), "NCCL_DEBUG": "WARN",
                          "NCCL_SOCKET_IFNAME": "lo"}], library)
    assert answer.interface == "lo"
    assert not target.exists()
    # The same from an NCCL config file, which NCCL applies under the environment.
    conf = tmp_path / "nccl.conf"
    conf.write_text(f"NCCL_DEBUG_FILE={target}\nNCCL_SOCKET_IFNAME==lo\n")
    [answer] = ask_nccl([{**CLEAN, "NCCL_CONF_FILE": str(conf)}], library)
    assert (answer.interface, answer.error) == ("lo", None)
    assert not target.exists()


def test_deadline_kills_the_probe(library: NcclLibrary) -> None:
    start = time.monotonic()
    answers = ask_nccl([CLEAN, CLEAN], library, timeout=0.001)
    assert time.monotonic() - start < 5
    assert [a.error for a in answers] == ["NCCL did not answer within 0.001 s"] * 2
    assert not any(a.answered for a in answers)


def test_a_library_that_is_not_nccl() -> None:
    libc = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6",
                             "/lib/aarch64-linux-gnu/libc.so.6") if Path(p).exists()), None)
    if libc is None:
        pytest.skip("no libc.so.6 at a known path")
    [answer] = ask_nccl([CLEAN], NcclLibrary(libc, LIBRARY_VARIABLE))
    assert answer.error is not None and answer.error.startswith("could not load NCCL: ")
    assert "ncclGetVersion" in answer.error


def test_a_file_that_is_no_library(tmp_path: Path) -> None:
    fake = tmp_path / "libnccl.so.2"
    fake.write_text("not an ELF file\n")
    [answer] = ask_nccl([CLEAN], NcclLibrary(str(fake), LIBRARY_VARIABLE))
    assert answer.error is not None and answer.error.startswith("could not load NCCL: ")
    assert str(fake) in answer.error


# -- reading the output ----------------------------------------------------------------------

MARK = "@@clusterenv-nccl-probe"


@pytest.mark.parametrize(("line", "interface", "address"), [
    # NCCL 2.32 spelling, as the probe prints it on this host.
    ("host:1:1 [0] NCCL INFO Bootstrap: Using eth0:172.20.0.5<0>", "eth0", "172.20.0.5"),
    # Before 2.2x: a space before the colon.
    ("host:1:1 [0] NCCL INFO Bootstrap : Using ens1:10.65.0.2<0>", "ens1", "10.65.0.2"),
    ("host:1:1 [0] NCCL INFO Bootstrap: Using ll:fe80::5%ll<0>", "ll", "fe80::5%ll"),
    ("host:1:1 [0] NCCL INFO Bootstrap: Using v6:fd00::5<0>", "v6", "fd00::5"),
    # An IPv4 label: getifaddrs names the address "eth0:1".
    ("host:1:1 [0] NCCL INFO Bootstrap: Using eth0:1:10.0.0.9<0>", "eth0:1", "10.0.0.9"),
])
def test_bootstrap_line_spellings(line: str, interface: str, address: str) -> None:
    answer = parse_probe_output(f"{line}\n\n{MARK} 23203 0\n")
    assert (answer.version, answer.interface, answer.address) == ((2, 32, 3), interface, address)


def test_old_version_codes_and_failures() -> None:
    old = parse_probe_output(f"x NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>\n{MARK} 2708 0\n")
    assert old.version == (2, 7, 8)
    failed = parse_probe_output(
        "x NCCL WARN Could not open socket\n"
        f"x NCCL INFO init.cc:211 (ncclGetUniqueId) -> 2\n{MARK} 23203 2\n")
    assert failed.error == "ncclGetUniqueId returned 2: Could not open socket"
    assert parse_probe_output("").error == "the probe ended without an answer"
    assert parse_probe_output(f"{MARK} signal 11\n").error == "NCCL crashed (signal 11)"


def test_nccl_log_reads_the_probes_lines(library: NcclLibrary) -> None:
    # The lines NCCL itself printed for the probe (2.32 spelling) are read by nccl-log as the
    # same interface and address.
    from clusterenv.nccl_log import parse_nccl_log

    [answer] = ask_nccl([{**CLEAN, "NCCL_SOCKET_IFNAME": "=lo"}], library)
    assert answer.interface == "lo"
    parsed = parse_nccl_log(answer.log)
    assert [(r.bootstrap_interface, r.bootstrap_address) for r in parsed.ranks] == [
        ("lo", "127.0.0.1")]


def test_the_version_nccl_reports_is_the_first_evidence(library: NcclLibrary) -> None:
    from clusterenv.diagnosis import diagnose_with_plan

    # NCCL_VERSION says otherwise (a container's label): both stay evidence, NCCL's own first.
    env = {**CLEAN, "NCCL_VERSION": "2.19.3"}
    asked = diagnose_with_plan(environ=env, ask_nccl=True)
    facts = asked.facts
    first = facts.nccl_versions[0]
    assert first.version == wheel_version()
    assert first.source == f"{library.path} (ncclGetVersion)"
    assert (2, 19, 3) in [v.version for v in facts.nccl_versions]
    assert asked.bootstrap is not None and asked.bootstrap.current.asked
    unasked = diagnose_with_plan(environ=env, ask_nccl=False)
    assert not any(v.source.endswith("(ncclGetVersion)") for v in unasked.facts.nccl_versions)
    assert unasked.bootstrap is not None and unasked.bootstrap.current.by == "prediction"


def test_the_api_and_the_command_give_one_verdict(library: NcclLibrary) -> None:
    """``clusterenv.doctor()`` asks NCCL as ``clusterenv doctor`` does (by default, on this
    host), and both give the same findings from the same environment."""
    from clusterenv import doctor
    from clusterenv.diagnosis import diagnose_with_plan

    address = next(a for a in _host_addresses() if not a.startswith("127."))
    env = {**CLEAN, "MASTER_ADDR": address, "MASTER_PORT": "29500", "NUM_NODES": "2",
           "NODE_RANK": "0", "NUM_TRAINERS": "1", "NCCL_SOCKET_IFNAME": "=lo"}
    assert diagnose_with_plan(environ=env).bootstrap.current.asked  # type: ignore[union-attr]
    api = [f.to_dict() for f in doctor(env)]
    cli = subprocess.run([sys.executable, "-m", "clusterenv", "doctor", "--json"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert json.loads(cli.stdout)["findings"] == api


def _host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=True)
    return [a["local"] for i in json.loads(out.stdout) for a in i.get("addr_info", [])]
