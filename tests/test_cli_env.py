"""`clusterenv env`, `doctor` and `show` on host snapshots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterenv._cli.env import render
from clusterenv.cli import main
from clusterenv.testing import HostBuilder
from tests.conftest import require_tool
from tests.nccl_hosts import B0_ENV, b0, roce_node


def cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m clusterenv`` in a fresh process with only ``env``."""
    base = {"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent"}
    return subprocess.run([sys.executable, "-m", "clusterenv", *argv], env={**base, **(env or {})},
                          capture_output=True, text=True, check=False, timeout=60)


def test_env_prints_sh_exports_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b0(tmp_path)
    assert main(["env", "--root", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == (
        "export NCCL_SOCKET_IFNAME='ens1'\n"
        "export GLOO_SOCKET_IFNAME='ens1'\n"
        "export TP_SOCKET_IFNAME='ens1'\n"
    )


def test_eval_in_a_shell_exports_ens1(tmp_path: Path) -> None:
    b0(tmp_path).interface("ens10", addresses=["10.66.0.2/24"])
    script = (f'eval "$({sys.executable} -m clusterenv env --root {tmp_path})" && '
              'printf "%s|%s" "$NCCL_SOCKET_IFNAME" "$GLOO_SOCKET_IFNAME"')
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False,
                            env={"PATH": os.environ.get("PATH", "")}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "=ens1|ens1"


def test_kept_values_are_commented_on_stderr_only(tmp_path: Path) -> None:
    b0(tmp_path, environ={**B0_ENV, "GLOO_SOCKET_IFNAME": "eth0"})
    result = cli("env", "--root", str(tmp_path))
    # A kept value that breaks the job fails the command (exit 1), so that
    # `out=$(clusterenv env) && eval "$out"` stops, and says what replaces it.
    assert result.returncode == 1
    assert ("# 1 error remains with these settings (exit 1); `clusterenv env --override` "
            "replaces the value you set (GLOO_SOCKET_IFNAME) with the plan's") in result.stderr
    assert "GLOO_SOCKET_IFNAME" not in result.stdout
    assert all(line.startswith("export ") for line in result.stdout.splitlines())
    assert "# kept GLOO_SOCKET_IFNAME='eth0' (environment)" in result.stderr
    assert "filter-selects-avoided" in result.stderr
    overridden = cli("env", "--root", str(tmp_path), "--override")
    assert overridden.returncode == 0, overridden.stderr
    assert "export GLOO_SOCKET_IFNAME='ens1'" in overridden.stdout
    # The replaced value is reported as replaced, with the true reason, and no longer as an
    # error: the job will not see it.
    assert ("# overriding GLOO_SOCKET_IFNAME='eth0' with 'ens1': you asked to override the value "
            "set in the environment: GLOO_SOCKET_IFNAME='eth0' selects eth0 (Runpod's management "
            "interface); 'ens1': ens1 holds NODE_ADDR 10.65.0.2") in overridden.stderr
    assert "filter-selects-avoided" not in overridden.stderr


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("fish", "set -gx NCCL_IB_HCA =mlx5_0:1,mlx5_1:1;"),
        ("dotenv", "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1"),
        ("sh", "export NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'"),
    ],
)
def test_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str,
                 expected: str) -> None:
    roce_node(tmp_path, rails=2)
    assert main(["env", "--root", str(tmp_path), "--format", fmt]) == 0
    assert expected in capsys.readouterr().out.splitlines()


def test_json_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b0(tmp_path)
    assert main(["env", "--root", str(tmp_path), "--json", "--debug"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["env"]["NCCL_DEBUG"] == "INFO"
    assert data["env"]["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert data["plan"]["cluster_interface"] == "ens1"
    assert {c["name"] for c in data["plan"]["changes"]} >= {"NCCL_SOCKET_IFNAME", "NCCL_DEBUG"}


def test_single_node_prints_nothing_but_a_note(tmp_path: Path) -> None:
    HostBuilder(tmp_path).loopback().environ({})
    result = cli("env", "--root", str(tmp_path))
    assert result.returncode == 0 and result.stdout == ""
    assert "single node" in result.stderr


def test_invalid_environment_exits_2_with_nothing_to_eval(tmp_path: Path) -> None:
    b0(tmp_path, environ={**B0_ENV, "WORLD_SIZE": "2"})
    result = cli("env", "--root", str(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    assert "WORLD_SIZE" in result.stderr


@pytest.mark.parametrize("value", ["ens1", "=mlx5_0:1", "a b", "it's", "$HOME", 'q"x', "x\\y"])
def test_sh_quoting_round_trips(value: str) -> None:
    script = render({"CE_TEST": value}, "sh") + 'printf "%s" "$CE_TEST"'
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False,
                            timeout=30)
    assert result.stdout == value


@pytest.mark.parametrize("value", ["ens1", "a b", "it's", "x\\y"])
def test_fish_quoting_round_trips(value: str) -> None:
    require_tool("fish", "apt-get install fish")
    script = render({"CE_TEST": value}, "fish") + " printf '%s' $CE_TEST"
    result = subprocess.run(["fish", "-c", script], capture_output=True, text=True, check=False,
                            timeout=30)
    assert result.stdout == value


def test_dotenv_quotes_what_needs_it() -> None:
    assert render({"A": "ens1", "B": "a b", "C": 'q"$x'}, "dotenv") == (
        'A=ens1\nB="a b"\nC="q\\"\\$x"\n'
    )


# -- doctor and show ---------------------------------------------------------------------------


def test_doctor_exit_codes_and_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b0(tmp_path / "plain")  # NCCL_SOCKET_IFNAME unset: NCCL would bootstrap over eth0
    assert main(["doctor", "--root", str(tmp_path / "plain")]) == 1
    assert "ERROR   [socket-ifname-unset]" in capsys.readouterr().out
    socket_vars = {"NCCL_SOCKET_IFNAME": "ens1", "GLOO_SOCKET_IFNAME": "ens1",
                   "TP_SOCKET_IFNAME": "ens1"}
    # After `eval "$(clusterenv env)"`, a host name on 127.0.1.1 only matters to c10d: a warning.
    b0(tmp_path / "applied", environ={**B0_ENV, **socket_vars},
       hosts="127.0.0.1\tlocalhost\n127.0.1.1\tnode-0\n")
    assert main(["doctor", "--root", str(tmp_path / "applied")]) == 0
    assert "WARNING [hostname-loopback]" in capsys.readouterr().out
    assert main(["doctor", "--root", str(tmp_path / "applied"), "--strict"]) == 1
    capsys.readouterr()
    broken = b0(tmp_path / "broken", environ={**B0_ENV, "NCCL_SOCKET_IFNAME": "eth0"}).root
    assert main(["doctor", "--root", str(broken), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"versions", "config", "assumed", "findings", "summary"}
    assert data["assumed"]["source"].startswith("runpod (")
    assert data["assumed"]["layout"] == "2 nodes x 8 processes per node (16 in the job)"
    assert data["summary"]["error"] >= 1
    finding = next(f for f in data["findings"] if f["code"] == "filter-selects-avoided")
    assert set(finding) == {"code", "severity", "title", "evidence", "fix"}
    assert "eth0" in finding["title"]


def test_show_json_has_every_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    roce_node(tmp_path, rails=2)
    assert main(["show", "--root", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["versions", "config", "network", "rdma", "host", "plan",
                          "nccl_bootstrap", "findings"]
    assert data["config"]["source"] == "runpod"
    # A snapshot is not this host: NCCL is not asked, the prediction says so.
    boot = data["nccl_bootstrap"]
    assert (boot["by"], boot["note"]) == (
        "prediction", "not asked: a host snapshot is not this host")
    assert boot["planned"]["interface"] == "ens1" and boot["planned"]["by"] == "prediction"
    assert [i["name"] for i in data["network"]["interfaces"]][:3] == ["ens1", "ens2", "eth0"]
    assert [d["name"] for d in data["rdma"]["devices"]] == ["mlx5_0", "mlx5_1"]
    assert data["rdma"]["transport"] == "roce"
    assert data["host"]["gpus"] == 8
    assert data["plan"]["env"]["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert any(f["code"] == "socket-ifname-unset" for f in data["findings"])


def test_show_for_people(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b0(tmp_path, environ={**B0_ENV, "GLOO_SOCKET_IFNAME": "eth0"})
    assert main(["show", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for heading in ("config", "network", "rdma", "host", "plan", "findings"):
        assert f"\n{heading}" in f"\n{out}"
    assert "cluster: ens1 holds NODE_ADDR 10.65.0.2" in out
    assert "keep    GLOO_SOCKET_IFNAME  eth0" in out
    assert "set     NCCL_SOCKET_IFNAME  ens1" in out


@pytest.mark.parametrize(("version", "gid_index"), [("2.19.3", "3"), ("2.21.5", None)])
def test_nccl_version_option_reaches_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, gid_index: str | None
) -> None:
    # RoCE with the IPv4 RoCE v2 GID at index 3: NCCL before 2.21 needs NCCL_IB_GID_INDEX.
    roce_node(tmp_path, rails=2)
    assert main(["env", "--root", str(tmp_path), "--json", "--nccl-version", version]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plan"]["nccl_version"] == version
    assert data["env"].get("NCCL_IB_GID_INDEX") == gid_index
    # Unknown here, the version makes doctor say so (ib-gid-index-info); given, it does not.
    main(["doctor", "--root", str(tmp_path), "--json"])
    assert "ib-gid-index-info" in _codes(capsys.readouterr().out)
    main(["doctor", "--root", str(tmp_path), "--json", "--nccl-version", version])
    assert "ib-gid-index-info" not in _codes(capsys.readouterr().out)


def _codes(doctor_json: str) -> set[str]:
    data = json.loads(doctor_json)
    findings = data["findings"] if isinstance(data, dict) else data
    return {f["code"] for f in findings}
