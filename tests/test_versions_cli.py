"""The versions a bug report needs, through the real CLI: ``show`` prints them first, the
``--json`` of ``show`` and ``doctor`` carries them, and under ``--root`` they are the snapshot's.

Every expected value is read here from another source than the one clusterenv uses: the
interpreter's own ``sys.version_info``, pip's record of torch and of the NCCL wheel,
``platform.freedesktop_os_release()`` and ``platform.uname()``.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from clusterenv import __version__
from clusterenv.testing import HostBuilder
from tests.simcluster import base_env

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterenv", *args], capture_output=True,
                          text=True, env=base_env(), cwd=REPO, timeout=120, check=False)


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _block(text: str) -> dict[str, str]:
    """The first section of ``show``: its heading line, then ``label  value`` rows."""
    lines = text.split("\n\n", 1)[0].splitlines()
    assert lines[0].startswith("versions"), lines[0]
    return {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in lines[1:]}


def _os_name() -> str:
    try:
        return platform.freedesktop_os_release()["PRETTY_NAME"]
    except (OSError, KeyError):
        pytest.skip("this machine has no /etc/os-release PRETTY_NAME to compare with")


def test_show_leads_with_the_versions_of_this_machine() -> None:
    result = cli("show", "--no-nccl")
    assert result.returncode == 0, result.stderr
    block = _block(result.stdout)
    assert list(block) == ["clusterenv", "Python", "torch", "NCCL", "OS", "kernel"]
    assert block["clusterenv"] == __version__
    assert block["Python"] == ".".join(map(str, sys.version_info[:3]))
    assert block["torch"] == (_installed("torch") or "not installed")
    assert block["OS"] == _os_name()
    uname = platform.uname()
    assert block["kernel"] == f"{uname.release} ({uname.machine})"
    nccl = _installed("nvidia-nccl-cu12")
    if nccl is not None:
        assert block["NCCL"].startswith(f"{nccl} ("), block["NCCL"]


@pytest.mark.parametrize("verb", ["show", "doctor"])
def test_the_json_of_show_and_doctor_carries_the_versions(verb: str) -> None:
    result = cli(verb, "--json", "--no-nccl")
    assert result.returncode in (0, 1), result.stderr
    found = json.loads(result.stdout)["versions"]
    uname = platform.uname()
    assert found["clusterenv"] == __version__
    assert found["python"] == platform.python_version()
    assert found["torch"] == _installed("torch")
    assert (found["os"], found["kernel"], found["machine"]) == (
        _os_name(), uname.release, uname.machine)
    assert found["snapshot"] is None
    nccl = _installed("nvidia-nccl-cu12")
    if nccl is not None:
        assert nccl in [item["version"] for item in found["nccl"]], found["nccl"]


def test_the_versions_never_import_torch() -> None:
    # torch's version comes from its installed metadata: importing torch takes seconds.
    code = ("import sys; from clusterenv.cli import main; "
            "main(['show', '--json', '--no-nccl']); main(['doctor', '--json', '--no-nccl']); "
            "sys.stderr.write(repr(sorted(m for m in sys.modules if m.split('.')[0] == "
            "'torch')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=base_env(), cwd=REPO, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().endswith("[]"), result.stderr[-500:]


def test_a_snapshot_shows_the_versions_it_recorded_not_this_machines(tmp_path: Path) -> None:
    snapshot = tmp_path / "node3"
    (HostBuilder(snapshot).loopback().hostname("node3")
     .software(python="3.10.14", torch=None, os="Ubuntu 22.04.4 LTS",
               kernel="5.15.0-119-generic", machine="aarch64"))
    (snapshot / ".clusterenv/host.json").write_text(json.dumps({
        **json.loads((snapshot / ".clusterenv/host.json").read_text()),
        "clusterenv": "0.0.9",
        "nccl_versions": [{"version": "2.19.3", "source": "nvidia-nccl-cu12 2.19.3 (pip)"}],
    }))
    block = _block(cli("show", "--no-nccl", "--root", str(snapshot)).stdout)
    assert block == {
        "clusterenv": f"{__version__} (the snapshot was captured with 0.0.9)",
        "Python": "3.10.14",
        "torch": "not installed",
        "NCCL": "2.19.3 (nvidia-nccl-cu12 2.19.3 (pip))",
        "OS": "Ubuntu 22.04.4 LTS",
        "kernel": "5.15.0-119-generic (aarch64)",
    }
    found = json.loads(cli("doctor", "--json", "--no-nccl", "--root", str(snapshot)).stdout)
    assert found["versions"]["snapshot"] == {"recorded": True, "captured_with": "0.0.9"}
    assert found["versions"]["kernel"] == "5.15.0-119-generic"


def test_a_snapshot_from_before_the_versions_says_they_were_not_recorded(
        tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback()
    block = _block(cli("show", "--no-nccl", "--root", str(tmp_path)).stdout)
    for label in ("Python", "torch", "OS", "kernel"):
        assert block[label] == "not recorded in the snapshot", block
    assert block["clusterenv"].endswith("(the snapshot was captured with an unknown version)")


def test_capture_records_this_machines_versions_and_replays_them(tmp_path: Path) -> None:
    live = json.loads(cli("show", "--json", "--no-nccl").stdout)["versions"]
    result = cli("capture", str(tmp_path / "snap"))
    assert result.returncode == 0, result.stderr
    replayed = json.loads(cli("show", "--json", "--no-nccl", "--root",
                              str(tmp_path / "snap")).stdout)["versions"]
    assert replayed["snapshot"] == {"recorded": True, "captured_with": __version__}
    for key in ("clusterenv", "python", "torch", "os", "kernel", "machine", "nccl"):
        assert replayed[key] == live[key], key
