"""The one skip policy: a missing optional package or tool skips with the reason, except under
``CI=true``, where it fails (CI installs everything the tests use)."""

from __future__ import annotations

import pytest

from tests.conftest import require_module, require_tool

MISSING = "clusterenv_no_such_package_for_this_test"


def test_a_missing_package_skips_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"{MISSING} cannot be imported.*pip install x"):
        require_module(MISSING, "pip install x")


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_a_missing_package_fails_under_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="CI=true: this test must run"):
        require_module(MISSING, "pip install x")


def test_a_missing_tool_skips_or_fails_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="fish is not installed: apt-get install fish"):
        require_tool("fish", "apt-get install fish")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        require_tool("fish", "apt-get install fish")


def test_an_installed_package_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert require_module("json", "stdlib").dumps([1]) == "[1]"
