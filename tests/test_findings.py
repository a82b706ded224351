"""The registry of finding codes and the constructor that emitting code uses."""

from __future__ import annotations

import re
import warnings
from typing import get_args

import pytest

from clusterenv.findings import CODES, SEVERITIES, Area, CodeInfo, Finding, code_info, codes_of
from clusterenv.preflight.verdict import NodeRef, Problem


def test_every_code_is_a_stable_identifier_with_a_title() -> None:
    assert len(CODES) >= 100
    for code, info in CODES.items():
        assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)+", code), code
        assert isinstance(info, CodeInfo)
        assert info.severity in SEVERITIES, code
        assert info.area in get_args(Area), code
        assert info.title, code
        assert info.title == info.title.strip() and not info.title.endswith("."), code


def test_areas_partition_the_registry() -> None:
    parts = [codes_of(area) for area in get_args(Area)]
    assert all(parts), "an area without codes"
    assert sorted(c for part in parts for c in part) == sorted(CODES)


def test_of_takes_severity_and_title_from_the_registry() -> None:
    found = Finding.of("cluster-interface-down", "ens1 is down", ["operstate: down"],
                       "ip link set ens1 up")
    assert found == Finding("cluster-interface-down", "error", "ens1 is down",
                            ("operstate: down",), "ip link set ens1 up")
    generic = Finding.of("hang-detection-disabled")
    assert generic.severity == "info"
    assert generic.title == CODES["hang-detection-disabled"].title


def test_of_keeps_a_severity_the_check_chose() -> None:
    assert Finding.of("rdma-not-openable", "x", severity="warning").severity == "warning"


def test_an_unregistered_code_warns_and_never_raises() -> None:
    # Under pytest every warning is an error, so an emitter with a typo fails its tests; a user's
    # run only sees a RuntimeWarning and an error finding.
    with pytest.warns(RuntimeWarning, match="unregistered finding code 'socket-ifname-typo'"):
        # mypy rejects the code (strict mode flags this ignore if it ever stops doing so)
        found = Finding.of("socket-ifname-typo", "something")  # type: ignore[arg-type]
    assert (found.code, found.severity, found.title) == ("socket-ifname-typo", "error", "something")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert code_info("nope-nope").severity == "error"


def test_preflight_problems_use_the_registry_too() -> None:
    problem = Problem.about("preflight-interface-differs", "ens1 vs eth1", (NodeRef(1),))
    assert problem.severity == "warning"
    assert problem.finding().severity == "warning"
    with pytest.warns(RuntimeWarning, match="preflight-nope"):
        Problem.about("preflight-nope")  # type: ignore[arg-type]


def test_finding_to_dict_is_json_data() -> None:
    found = Finding.of("env-deprecated", "old name", ("NCCL_BLOCKING_WAIT=1",), "rename it")
    assert found.to_dict() == {"code": "env-deprecated", "severity": "warning",
                               "title": "old name", "evidence": ["NCCL_BLOCKING_WAIT=1"],
                               "fix": "rename it"}


def test_the_code_type_lists_exactly_the_registered_codes() -> None:
    """``Code`` (what the type checker knows) and ``CODES`` (what the registry holds) cannot
    drift: mypy checks every key of ``CODES`` against ``Code``, this checks the other way."""
    from typing import get_args

    from clusterenv.findings import Code

    assert list(get_args(Code)) == list(CODES)
