"""The CLI with closed, full and broken streams: exit 2 (or 141 for a reader that left), one
line on stderr, never a traceback, never an error turned into success.

Each case runs the real ``python -m clusterenv`` under ``bash``, which closes or redirects the
descriptor exactly as a user's shell would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clusterenv.testing import HostBuilder
from tests.conftest import require_tool

PY = sys.executable


def shell(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (f"{PY} -m clusterenv nccl-log - <&-", "standard input is closed"),
        (f"{PY} -m clusterenv env --format json >&-", "standard output is closed"),
        (f"{PY} -m clusterenv env >&-", "standard output is closed"),
        (f"{PY} -m clusterenv env --json >&-", "standard output is closed"),
        (f"{PY} -m clusterenv doctor >/dev/full",
         "cannot write standard output: No space left on device"),
        (f"{PY} -m clusterenv show --json >/dev/full",
         "cannot write standard output: No space left on device"),
    ],
)
def test_a_closed_or_full_stream_is_exit_2_with_one_line(command: str, message: str) -> None:
    done = shell(command)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_reader_that_leaves_never_turns_an_error_into_success(tmp_path: Path) -> None:
    # A node whose doctor has errors (exit 1): behind `| true` it must not become 0.
    HostBuilder(tmp_path).loopback().environ({"NUM_NODES": "2", "PRIMARY_ADDR": "10.9.9.9",
                                              "NODE_RANK": "7"})
    alone = shell(f"{PY} -m clusterenv doctor --root {tmp_path} >/dev/null")
    assert alone.returncode in (1, 2)
    piped = shell(f"set -o pipefail; {PY} -m clusterenv doctor --root {tmp_path} | true")
    assert piped.returncode in (alone.returncode, 141), piped
    assert piped.returncode != 0 and "Traceback" not in piped.stderr


def test_a_reader_that_leaves_early_ends_the_command_only_when_output_was_left(
        tmp_path: Path) -> None:
    # What docs/cli.md says about SIGPIPE, measured: output that fits the pipe (64 KiB on
    # Linux) is written whole, in one write at exit, before `head` leaves, so the command ends
    # as it would have; output larger than the pipe is still being written: status 141.
    # PYTHONUNBUFFERED=1 makes every line a write of its own (then either can happen).
    small = tmp_path / "small"
    HostBuilder(small).loopback()
    large = tmp_path / "large"
    builder = HostBuilder(large).loopback()
    for i in range(400):
        builder.interface(f"ens{i}", addresses=[f"10.{i // 250}.{i % 250}.2/24"])
    run = f"env -u PYTHONUNBUFFERED {PY} -m clusterenv show --json --no-nccl --root"
    for root, size, status in ((small, range(1, 64 << 10), 0), (large, range(64 << 10, 1 << 30),
                                                                    141)):
        alone = shell(f"{run} {root} | wc -c")
        assert int(alone.stdout) in size, alone
        for _ in range(3):
            piped = shell(f"{run} {root} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}")
            assert piped.stdout.strip() == str(status), (root.name, piped)
            assert piped.stderr == ""


def test_an_unwritable_capture_destination_is_exit_2_naming_it() -> None:
    done = shell(f"{PY} -m clusterenv capture /sys/kernel/clusterenv-snapshot")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "'/sys/kernel/clusterenv-snapshot': Operation not permitted" in done.stderr


def test_an_interface_name_that_is_not_utf8_is_shown_escaped(netns_required: None) -> None:
    # netifaces raised SystemError for every interface once one name was not UTF-8.
    unshare = require_tool("unshare", "apt-get install util-linux")
    # A network namespace with its own /sys, as `ip netns exec` makes one.
    script = (f"mount --make-rprivate / && mount -t sysfs sysfs /sys && "
              f"ip link add $'v\\xff' type veth peer name v2 && ip addr add 10.9.0.1/24 dev v2 "
              f"&& {PY} -m clusterenv show && {PY} -m clusterenv doctor >/dev/null; echo rc=$?")
    done = subprocess.run([unshare, "--net", "--mount", "bash", "-c", script], capture_output=True,
                          text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    assert "SystemError" not in done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("v")}
    assert "v\\xff" in rows and "10.9.0.1/24" in rows["v2"], done.stdout
    assert done.stdout.rstrip().endswith(("rc=0", "rc=1")), done.stdout[-300:]
