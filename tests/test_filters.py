"""The NCCL filter language (NCCL_SOCKET_IFNAME / NCCL_IB_HCA) and the Gloo/TensorPipe names.

Host shapes come from reference/failure-modes.md: B0 is the baseline Runpod node (``lo``,
``eth0`` management on 172.20.0.5/16, ``ens1`` cluster on 10.65.0.2/24).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterenv.filters import (
    ALL_CODES,
    IB_HCA,
    SOCKET_IFNAME,
    FilterToken,
    NcclFilter,
    lint_exact_names,
    lint_filter,
    nccl_default_interfaces,
    needs_exact,
    parse_filter,
    render_exact,
)
from clusterenv.findings import Finding

B0 = ["lo", "eth0", "ens1"]
B0_OWNER = {"127.0.0.1": "lo", "172.20.0.5": "eth0", "10.65.0.2": "ens1"}
RUNPOD_AVOID = {"eth0": "management", "lo": "loopback"}
RUNPOD_8 = ["lo", "eth0", *(f"ens{i}" for i in range(1, 9))]


def hcas(n: int) -> list[str]:
    return [f"mlx5_{i}" for i in range(n)]


def one(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, findings
    return matching[0]


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


# --- parsing ----------------------------------------------------------------------------------

Tokens = list[tuple[str, int | None]]

PARSE_CASES: list[tuple[str, str, tuple[bool, bool, Tokens] | None]] = [
    # value, variable, (exclude, exact, [(name, port)]) or None when NCCL ignores the value
    ("mlx5", IB_HCA, (False, False, [("mlx5", None)])),
    ("=mlx5_0:1,mlx5_1:1", IB_HCA, (False, True, [("mlx5_0", 1), ("mlx5_1", 1)])),
    ("^=mlx5_1,mlx5_4", IB_HCA, (True, True, [("mlx5_1", None), ("mlx5_4", None)])),
    ("^docker", SOCKET_IFNAME, (True, False, [("docker", None)])),
    ("^=docker0", SOCKET_IFNAME, (True, True, [("docker0", None)])),
    # '=' then '^': the '^' is part of a literal token
    ("=^docker0", SOCKET_IFNAME, (False, True, [("^docker0", None)])),
    # modifiers apply once: the second token is the literal name '^=mlx5_14'
    ("^=mlx5_8,^=mlx5_14", IB_HCA, (True, True, [("mlx5_8", None), ("^=mlx5_14", None)])),
    ("^^eth0", SOCKET_IFNAME, (True, False, [("^eth0", None)])),
    ("==eth0", SOCKET_IFNAME, (False, True, [("=eth0", None)])),
    # the port is parsed for sockets too, and ignored when matching
    ("ens1:1", SOCKET_IFNAME, (False, False, [("ens1", 1)])),
    # one-character values: ignored for sockets, literal for HCAs
    ("e", SOCKET_IFNAME, None),
    ("^", SOCKET_IFNAME, None),
    ("=", SOCKET_IFNAME, None),
    (",", SOCKET_IFNAME, None),
    ("", SOCKET_IFNAME, None),
    ("", IB_HCA, None),
    ("m", IB_HCA, (False, False, [("m", None)])),
    ("^", IB_HCA, (True, False, [])),
    # empty tokens are skipped
    ("ens1,,ens2,", SOCKET_IFNAME, (False, False, [("ens1", None), ("ens2", None)])),
    (",,", SOCKET_IFNAME, (False, False, [])),
    ("^,", SOCKET_IFNAME, (True, False, [])),
    ("^=", SOCKET_IFNAME, (True, True, [])),
    (":1,eth0", SOCKET_IFNAME, (False, False, [("eth0", None)])),
    # whitespace is not trimmed
    ("ens1, ens2", SOCKET_IFNAME, (False, False, [("ens1", None), (" ens2", None)])),
    (" ens1", SOCKET_IFNAME, (False, False, [(" ens1", None)])),
    # ports: atoi semantics; -1 is NCCL's "any port"; an empty port field (2.30 rails) too
    ("mlx5_0::0:0", IB_HCA, (False, False, [("mlx5_0", None)])),
    ("mlx5_0:2:1", IB_HCA, (False, False, [("mlx5_0", 2)])),
    ("mlx5_0:a", IB_HCA, (False, False, [("mlx5_0", 0)])),
    ("mlx5_0: 2x", IB_HCA, (False, False, [("mlx5_0", 2)])),
    ("mlx5_0:-1", IB_HCA, (False, False, [("mlx5_0", None)])),
    # NCCL sees a C string
    ("eth0\0junk,ens1", SOCKET_IFNAME, (False, False, [("eth0", None)])),
]


@pytest.mark.parametrize(("value", "variable", "expected"), PARSE_CASES)
def test_parse_filter(
    value: str, variable: str, expected: tuple[bool, bool, Tokens] | None
) -> None:
    parsed = parse_filter(value, variable=variable)
    if expected is None:
        assert parsed is None
        return
    assert parsed is not None
    exclude, exact, tokens = expected
    assert (parsed.exclude, parsed.exact) == (exclude, exact)
    assert [(t.name, t.port) for t in parsed.tokens] == tokens
    assert parsed.raw == value
    assert parsed.variable == variable


def test_parse_none_is_unset() -> None:
    assert parse_filter(None) is None
    assert parse_filter(None, variable=IB_HCA) is None


def test_token_fields_and_spelling() -> None:
    parsed = parse_filter("=mlx5_0:1,mlx5_1::0:1", variable=IB_HCA)
    assert parsed is not None
    assert parsed.tokens[1].fields == ("", "0", "1")
    assert parsed.names == ("mlx5_0", "mlx5_1")
    assert str(parsed.tokens[0]) == "mlx5_0:1"
    assert str(parsed) == "=mlx5_0:1,mlx5_1::0:1"


@pytest.mark.parametrize(("variable", "limit"), [(SOCKET_IFNAME, 16), (IB_HCA, 32)])
def test_parse_stops_at_nccl_token_limit(variable: str, limit: int) -> None:
    parsed = parse_filter(",".join(f"n{i}" for i in range(limit + 3)), variable=variable)
    assert parsed is not None
    assert len(parsed.tokens) == limit
    assert parsed.tokens[-1].name == f"n{limit - 1}"


def test_equality_ignores_spelling_not_meaning() -> None:
    assert parse_filter("ens1,,ens2") == parse_filter("ens1,ens2,")
    assert parse_filter("ens1,ens2") != parse_filter("=ens1,ens2")
    assert parse_filter("ens1") != parse_filter("ens1", variable=IB_HCA)


@pytest.mark.parametrize(
    ("value", "variable", "rendered"),
    [
        ("^=docker0,lo", SOCKET_IFNAME, "^=docker0,lo"),
        ("ens1,,ens2,", SOCKET_IFNAME, "ens1,ens2"),
        (",=a", SOCKET_IFNAME, ",=a"),  # keep '=a' a literal token
        (",^a", SOCKET_IFNAME, ",^a"),
        ("^,=a", SOCKET_IFNAME, "^,=a"),
        (",a", SOCKET_IFNAME, "a,"),  # 'a' alone would be ignored by NCCL
        (",,", SOCKET_IFNAME, ",,"),
        ("^,", SOCKET_IFNAME, "^,"),
        ("^", IB_HCA, "^"),
        (",", IB_HCA, ","),
    ],
)
def test_str_renders_nccl_spelling(value: str, variable: str, rendered: str) -> None:
    parsed = parse_filter(value, variable=variable)
    assert parsed is not None
    assert str(parsed) == rendered
    assert parse_filter(rendered, variable=variable) == parsed


# --- matching ---------------------------------------------------------------------------------


def select(value: str, names: list[str], variable: str = SOCKET_IFNAME) -> tuple[str, ...]:
    parsed = parse_filter(value, variable=variable)
    assert parsed is not None, value
    return parsed.select_interfaces(names)


@pytest.mark.parametrize(
    ("value", "names", "selected"),
    [
        # FM-04: tokens are prefixes unless the list starts with '='
        ("ens1", ["ens1", "ens10", "ens1f0", "ens2"], ("ens1", "ens10", "ens1f0")),
        ("=ens1", ["ens1", "ens10", "ens1f0", "ens2"], ("ens1",)),
        ("bond0", ["bond0", "bond0.2093.1", "eth0"], ("bond0", "bond0.2093.1")),
        ("=bond0", ["bond0", "bond0.2093.1", "eth0"], ("bond0",)),
        ("ens", RUNPOD_8, tuple(f"ens{i}" for i in range(1, 9))),
        # FM-05: an exclusion list keeps everything it does not name
        ("^docker0", ["lo", "eth0", "docker0"], ("lo", "eth0")),
        ("^docker0,lo", ["lo", "eth0", "docker0"], ("eth0",)),
        ("^lo,docker,veth", ["lo", "eth0", "docker0", "veth12", "ens1"], ("eth0", "ens1")),
        # FM-06: '=' before '^' is a literal; a port suffix acts as a prefix for sockets
        ("=^docker0", ["lo", "eth0", "docker0"], ()),
        ("^=docker0", ["lo", "eth0", "docker0"], ("lo", "eth0")),
        ("ens1:1", ["ens1", "ens10", "eth0"], ("ens1", "ens10")),
        # FM-03: an IP address or a typo matches nothing
        ("10.65.0.2", B0, ()),
        ("ens9", B0, ()),
        # empty lists and whitespace
        (",,", B0, tuple(B0)),
        ("^,", B0, ()),
        ("ens1, ens2", ["ens1", "ens2"], ("ens1",)),
    ],
)
def test_select_interfaces(value: str, names: list[str], selected: tuple[str, ...]) -> None:
    assert select(value, names) == selected


PORTS_0_11 = [(d, 1) for d in hcas(12)]


@pytest.mark.parametrize(
    ("value", "pairs", "selected"),
    [
        # FM-07: mlx5_1 also matches mlx5_10 and mlx5_11
        ("mlx5_1", PORTS_0_11, [("mlx5_1", 1), ("mlx5_10", 1), ("mlx5_11", 1)]),
        ("=mlx5_1", PORTS_0_11, [("mlx5_1", 1)]),
        ("=mlx5_0:1,mlx5_1:1", [("mlx5_0", 1), ("mlx5_0", 2), ("mlx5_1", 1), ("mlx5_10", 1)],
         [("mlx5_0", 1), ("mlx5_1", 1)]),
        # a port in the token must match; no port means every port
        ("mlx5_0:2", [("mlx5_0", 1), ("mlx5_0", 2)], [("mlx5_0", 2)]),
        ("=mlx5_0", [("mlx5_0", 1), ("mlx5_0", 2)], [("mlx5_0", 1), ("mlx5_0", 2)]),
        ("^=mlx5_0:1", [("mlx5_0", 1), ("mlx5_0", 2)], [("mlx5_0", 2)]),
        ("mlx5_0:a", [("mlx5_0", 1)], []),
        ("mlx5_0::0:0", [("mlx5_0", 1), ("mlx5_0", 2)], [("mlx5_0", 1), ("mlx5_0", 2)]),
        # FM-06: exclusions
        ("^=mlx5_1,mlx5_4", [(d, 1) for d in hcas(6)],
         [("mlx5_0", 1), ("mlx5_2", 1), ("mlx5_3", 1), ("mlx5_5", 1)]),
        ("^=mlx5_8,^=mlx5_14", [(d, 1) for d in ("mlx5_7", "mlx5_8", "mlx5_14")],
         [("mlx5_7", 1), ("mlx5_14", 1)]),
        ("^=mlx5_8,mlx5_14", [(d, 1) for d in ("mlx5_7", "mlx5_8", "mlx5_14")], [("mlx5_7", 1)]),
        # renamed devices: the mlx5 prefix matches nothing
        ("mlx5", [("ibp12s0", 1), ("rocep193s0f0", 1)], []),
        # '^' alone is not ignored for HCAs: it excludes everything
        ("^", PORTS_0_11, []),
        ("m", PORTS_0_11, PORTS_0_11),
    ],
)
def test_select_ports(
    value: str, pairs: list[tuple[str, int]], selected: list[tuple[str, int]]
) -> None:
    parsed = parse_filter(value, variable=IB_HCA)
    assert parsed is not None
    assert parsed.select_ports(pairs) == tuple(selected)


def test_matches_port_minus_one_is_any_port_and_interface_ignores_ports() -> None:
    parsed = parse_filter("=mlx5_0:2", variable=IB_HCA)
    assert parsed is not None
    assert not parsed.matches_port("mlx5_0", 1)
    assert parsed.matches_port("mlx5_0", -1)
    assert parsed.matches_interface("mlx5_0")
    assert not parsed.matches_interface("mlx5_1")


def test_select_keeps_given_order() -> None:
    assert select("^lo", ["ens2", "lo", "ens1", "eth0"]) == ("ens2", "ens1", "eth0")


# --- rendering --------------------------------------------------------------------------------


def test_render_exact() -> None:
    assert render_exact(["ens1"]) == "=ens1"
    assert render_exact([("mlx5_0", 1), ("mlx5_1", 1)]) == "=mlx5_0:1,mlx5_1:1"
    assert render_exact(["ens1", "ens2"]) == "=ens1,ens2"


def test_render_exact_fm09_selects_only_cluster_ports() -> None:
    # FM-09: mlx5_0..7 ACTIVE on the cluster fabric, mlx5_8 DOWN, mlx5_9 on the management netdev
    cluster = [(d, 1) for d in hcas(8)]
    value = render_exact(cluster)
    assert value == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    parsed = parse_filter(value, variable=IB_HCA)
    assert parsed is not None
    assert parsed.select_ports([*cluster, ("mlx5_8", 1), ("mlx5_9", 1)]) == tuple(cluster)
    assert lint_filter(
        value, variable=IB_HCA, names=hcas(10), ports=[*cluster, ("mlx5_9", 1)],
        avoid={"mlx5_9": "netdev eth0 is management"},
    ) == []


@pytest.mark.parametrize("names", [[], [""], ["a,b"], ["ens1:1"], ["a\0b"], [("", 1)]])
def test_render_exact_rejects_unwritable_names(names: list[str | tuple[str, int]]) -> None:
    with pytest.raises(ValueError, match=r"render_exact|cannot write"):
        render_exact(names)


@pytest.mark.parametrize(
    ("name", "names", "expected"),
    [
        ("ens1", [*B0, "ens10"], True),  # FM-04
        ("ens1", B0, False),
        ("bond0", ["bond0", "bond0.2093.1"], True),
        ("mlx5_1", hcas(12), True),  # FM-07
        ("mlx5_2", hcas(12), False),
        ("ens1", ["ens1", "ens1"], False),
    ],
)
def test_needs_exact(name: str, names: list[str], expected: bool) -> None:
    assert needs_exact(name, names) is expected


# --- NCCL's own choice when the variable is unset -----------------------------------------------


@pytest.mark.parametrize(
    ("names", "version", "chosen"),
    [
        (B0, None, ("eth0", "ens1")),  # FM-01: bootstrap on eth0, the management NIC
        (["lo", "eth0", "ib0"], None, ("ib0",)),
        (["lo", "docker0", "eth0"], None, ("eth0",)),
        (["lo", "docker0"], None, ("docker0",)),
        (["lo"], None, ("lo",)),
        ([], None, ()),
        (["lo", "veth0", "eth0"], None, ("veth0", "eth0")),  # veth is not excluded
        (["lo", "virbr0", "ens1"], None, ("ens1",)),
        (["lo", "virbr0", "ens1"], (2, 27, 5), ("virbr0", "ens1")),
        (["virbr0"], (2, 28), ("virbr0",)),
    ],
)
def test_nccl_default_interfaces(
    names: list[str], version: tuple[int, ...] | None, chosen: tuple[str, ...]
) -> None:
    assert nccl_default_interfaces(names, nccl_version=version) == chosen


# --- lint: the failure-mode catalogue, FM-03..FM-11 ---------------------------------------------


def test_fm02_management_interface_named() -> None:
    found = lint_filter("eth0", names=B0, avoid=RUNPOD_AVOID, suggest="ens1")
    finding = one(found, "filter-selects-avoided")
    assert finding.severity == "error"
    assert "NCCL_SOCKET_IFNAME='eth0' selects eth0 (management)" in finding.title
    assert finding.fix == "export NCCL_SOCKET_IFNAME=ens1"
    gloo = lint_exact_names("eth0", names=B0, avoid=RUNPOD_AVOID)
    assert codes(gloo) == ["filter-selects-avoided"]
    assert "GLOO_SOCKET_IFNAME='eth0'" in gloo[0].title


def test_fm03_ip_address_instead_of_name() -> None:
    found = lint_filter("10.65.0.2", names=B0, owner=B0_OWNER)
    finding = one(found, "filter-ip-address")
    assert finding.severity == "error"
    assert (
        "value looks like an IP address; NCCL_SOCKET_IFNAME takes interface names "
        "(did you mean ens1?)" in finding.title
    )
    assert finding.fix == "export NCCL_SOCKET_IFNAME=ens1"
    assert "10.65.0.2 is held by ens1" in finding.evidence
    nothing = one(found, "filter-matches-nothing")
    assert "matches no interface (have: lo, eth0, ens1)" in nothing.title


@pytest.mark.parametrize("value", ["fe80::1", "fe80::1%ens1", "[2001:db8::5]", "10.65.0.2:29500"])
def test_fm03_other_address_spellings(value: str) -> None:
    found = lint_filter(value, names=B0, owner={"fe80::1": "ens1", "2001:db8::5": "ens1"})
    assert "filter-ip-address" in codes(found)


def test_fm03_ip_without_owner_names_no_interface() -> None:
    finding = one(lint_filter("192.0.2.7", names=B0), "filter-ip-address")
    assert "did you mean" not in finding.title
    assert "192.0.2.7" in finding.fix


def test_fm03_typo_matches_nothing() -> None:
    found = lint_filter("ens9", names=B0)
    assert codes(found) == ["filter-matches-nothing"]
    finding = found[0]
    assert finding.severity == "error"
    assert finding.title == "NCCL_SOCKET_IFNAME='ens9' matches no interface (have: lo, eth0, ens1)"
    assert "local interfaces: lo, eth0, ens1" in finding.evidence
    assert any("Bootstrap : no socket interface found" in e for e in finding.evidence)


def test_fm04_prefix_also_matches_longer_name() -> None:
    found = lint_filter("ens1", names=[*B0, "ens10"], suggest="=ens1")
    finding = one(found, "filter-prefix-collision")
    assert finding.severity == "warning"
    assert "prefix 'ens1' also matches ens10; use '=ens1'" in finding.title
    assert finding.fix == "export NCCL_SOCKET_IFNAME==ens1"
    assert lint_filter("=ens1", names=[*B0, "ens10"]) == []
    both = one(lint_filter("ens1,ens2", names=[*B0, "ens2", "ens10"]), "filter-prefix-collision")
    assert both.fix == "write NCCL_SOCKET_IFNAME==ens1,ens2"
    assert lint_filter("ens1", names=B0) == []


def test_fm04_bond_vlan() -> None:
    found = lint_filter("bond0", names=["lo", "bond0", "bond0.2093.1"])
    assert "also matches bond0.2093.1" in one(found, "filter-prefix-collision").title


def test_fm04_prefix_matches_many_interfaces() -> None:
    finding = one(lint_filter("ens", names=RUNPOD_8), "filter-prefix-multiple")
    assert "matches 8 interfaces (ens1..ens8)" in finding.title
    assert "bootstrap would use ens1" in finding.evidence


def test_fm05_exclusion_leaves_management_eligible() -> None:
    found = lint_filter("^lo,docker,veth", names=B0, avoid=RUNPOD_AVOID)
    finding = one(found, "filter-leaves-avoided")
    # eth0 comes first: NCCL bootstraps on it, a certain hang (an error).
    assert finding.severity == "error"
    assert "exclusion list leaves eth0 (management) eligible" in finding.title
    assert "selected: eth0, ens1" in finding.evidence
    # Behind the cluster interface it is only eligible for the socket transport: a warning.
    later = one(lint_filter("^lo,docker,veth", names=["lo", "ens1", "eth0"],
                            avoid=RUNPOD_AVOID), "filter-leaves-avoided")
    assert later.severity == "warning"


def test_fm05_excluding_docker_reenables_loopback() -> None:
    found = lint_filter("^docker0", names=["lo", "eth0", "docker0", "ens1"], avoid=RUNPOD_AVOID)
    assert "leaves lo (loopback), eth0 (management) eligible" in one(
        found, "filter-leaves-avoided"
    ).title
    assert lint_filter("^=lo,eth0", names=B0, avoid=RUNPOD_AVOID) == []


def test_fm06_modifiers_repeated_per_token() -> None:
    found = lint_filter("^=mlx5_8,^=mlx5_14", variable=IB_HCA, names=hcas(16))
    assert codes(found) == ["filter-modifier-repeated"]
    finding = found[0]
    assert finding.severity == "error"
    assert "NCCL_IB_HCA='^=mlx5_8,^=mlx5_14'" in finding.title
    assert "'^'/'=' allowed only at list start; token '^=mlx5_14'" in finding.title
    assert "matches nothing" in finding.title
    assert finding.fix == "write NCCL_IB_HCA='^=mlx5_8,mlx5_14'"


def test_fm06_repeated_exclusion_without_leading_modifier() -> None:
    finding = one(lint_filter("eth0,^docker0", names=B0), "filter-modifier-repeated")
    assert finding.fix == "write NCCL_SOCKET_IFNAME='^eth0,docker0'"


def test_fm06_equals_before_caret() -> None:
    found = lint_filter("=^docker0", names=["lo", "eth0", "docker0"])
    finding = one(found, "filter-modifier-order")
    assert finding.severity == "error"
    assert "'=' before '^'" in finding.title
    assert finding.fix == "write NCCL_SOCKET_IFNAME='^=docker0'"
    assert "filter-matches-nothing" in codes(found)


def test_fm06_port_suffix_on_socket() -> None:
    found = lint_filter("ens1:1", names=B0)
    assert codes(found) == ["filter-port-on-socket"]
    assert found[0].severity == "warning"
    assert "port suffix is meaningless for sockets" in found[0].title
    assert found[0].fix == "write NCCL_SOCKET_IFNAME=ens1"
    assert lint_filter("=mlx5_0:1", variable=IB_HCA, names=hcas(2)) == []


def test_fm07_hca_prefix_collision() -> None:
    found = lint_filter("mlx5_1", variable=IB_HCA, names=hcas(12), ports=PORTS_0_11)
    finding = one(found, "filter-prefix-collision")
    assert "mlx5_1' also matches mlx5_10, mlx5_11; use '=mlx5_1'" in finding.title
    # exclusions collide too: '^mlx5_1' drops mlx5_10 and mlx5_11 as well
    excluded = one(lint_filter("^mlx5_1", variable=IB_HCA, names=hcas(12)),
                   "filter-prefix-collision")
    assert "also excludes mlx5_10, mlx5_11; use '^=mlx5_1'" in excluded.title
    # a broad prefix over all HCAs is normal for NCCL_IB_HCA
    assert lint_filter("mlx5", variable=IB_HCA, names=hcas(12)) == []


def test_fm08_hca_matches_nothing() -> None:
    found = lint_filter("mlx5_9", variable=IB_HCA, names=hcas(8))
    assert codes(found) == ["filter-matches-nothing"]
    assert found[0].severity == "warning"  # NCCL falls back to sockets: slower, not failed
    assert found[0].title == (
        "NCCL_IB_HCA='mlx5_9' matches no HCA (have mlx5_0..mlx5_7); NCCL will silently fall "
        "back to TCP"
    )
    assert any("NET/IB : No device found." in e for e in found[0].evidence)
    with_ports = lint_filter("mlx5_9", variable=IB_HCA, names=hcas(8), ports=PORTS_0_11[:8])
    assert "usable ports: mlx5_0:1..mlx5_7:1" in with_ports[0].evidence
    assert codes(lint_filter("mlxl5_7", variable=IB_HCA, names=hcas(8))) == [
        "filter-matches-nothing"
    ]


def test_fm08_renamed_devices() -> None:
    found = lint_filter("mlx5", variable=IB_HCA, names=["ibp12s0", "ibp75s0"])
    assert "matches no HCA (have ibp12s0, ibp75s0)" in one(found, "filter-matches-nothing").title


def test_fm09_unusable_hcas_in_list() -> None:
    names = hcas(10)
    usable = [(d, 1) for d in [*hcas(8), "mlx5_9"]]  # mlx5_8 is DOWN
    avoid = {"mlx5_9": "netdev eth0 is management"}
    found = lint_filter("mlx5", variable=IB_HCA, names=names, ports=usable, avoid=avoid)
    finding = one(found, "filter-selects-avoided")
    assert "selects mlx5_9 (netdev eth0 is management)" in finding.title
    down = lint_filter("=mlx5_0:1,mlx5_8:1", variable=IB_HCA, names=names, ports=usable)
    assert codes(down) == ["filter-token-unmatched"]
    assert "token 'mlx5_8:1' matches no HCA" in down[0].title


def test_fm10_gloo_names() -> None:
    assert lint_exact_names(None, names=B0) == []
    assert lint_exact_names("ens1", names=B0) == []
    # a one-character value sends Gloo back to hostname resolution (and loopback)
    finding = one(lint_exact_names("e", names=B0), "ifname-ignored-short")
    assert finding.severity == "warning"
    assert "GLOO_SOCKET_IFNAME='e' is ignored" in finding.title


def test_fm11_gloo_nccl_syntax() -> None:
    found = lint_exact_names("^lo,docker", names=B0, suggest="ens1")
    assert codes(found) == ["ifname-nccl-syntax"]
    assert found[0].severity == "error"
    assert "Gloo does not support NCCL filter syntax" in found[0].title
    assert "Gloo reports: Unable to find address for: ^lo" in found[0].evidence
    assert found[0].fix == "export GLOO_SOCKET_IFNAME=ens1"
    assert codes(lint_exact_names("=ens1", names=B0)) == ["ifname-nccl-syntax"]


def test_fm11_gloo_prefix() -> None:
    found = lint_exact_names("ens", names=B0)
    assert codes(found) == ["ifname-no-such-interface"]
    assert "no interface named 'ens' (Gloo needs exact names)" in found[0].title
    assert "'ens' is a prefix of ens1; Gloo does not match prefixes" in found[0].evidence


def test_fm11_gloo_ip_address() -> None:
    finding = one(lint_exact_names("10.65.0.2", names=B0, owner=B0_OWNER), "ifname-ip-address")
    assert "(did you mean ens1?)" in finding.title
    assert finding.fix == "export GLOO_SOCKET_IFNAME=ens1"


def test_gloo_lists_and_empty_names() -> None:
    names = [*B0, "ens2"]
    assert lint_exact_names("ens1,ens2", names=names) == []
    assert lint_exact_names("ens1,", names=names) == []  # getline drops a trailing empty piece
    found = lint_exact_names(",ens1", names=names)
    assert "an empty interface name" in one(found, "ifname-no-such-interface").title
    assert lint_exact_names("anything", names=[]) == []


def test_tensorpipe_takes_one_name() -> None:
    tp = "TP_SOCKET_IFNAME"
    assert lint_exact_names("ens1", variable=tp, names=B0, single=True) == []
    found = lint_exact_names("ens1,ens2", variable=tp, names=[*B0, "ens2"], single=True)
    assert codes(found) == ["ifname-multiple"]
    assert "TP_SOCKET_IFNAME takes exactly one interface name" in found[0].title
    syntax = lint_exact_names("^lo", variable=tp, names=B0, single=True)
    assert "TensorPipe does not support NCCL filter syntax" in syntax[0].title
    # TensorPipe has no length rule: an empty value is an empty interface name
    assert codes(lint_exact_names("", variable=tp, names=B0, single=True)) == [
        "ifname-no-such-interface"
    ]


# --- lint: the remaining codes ----------------------------------------------------------------


def test_one_character_socket_value_is_ignored() -> None:
    finding = one(lint_filter("e", names=B0), "filter-ignored-short")
    assert "NCCL_SOCKET_IFNAME='e' is ignored" in finding.title
    assert "NCCL's default choice here: eth0, ens1" in finding.evidence
    # for HCAs a single '^' excludes every device
    hca = lint_filter("^", variable=IB_HCA, names=hcas(2))
    assert codes(hca) == ["filter-empty-list"]
    assert hca[0].severity == "error"
    assert "it selects no HCA" in hca[0].title


def test_empty_lists() -> None:
    excluded = one(lint_filter("^,", names=B0), "filter-empty-list")
    assert excluded.severity == "error"
    assert "lists no names: it selects no interface" in excluded.title
    included = one(lint_filter(",,", names=B0), "filter-empty-list")
    assert included.severity == "warning"
    assert "it selects every interface, loopback included" in included.title
    hca = one(lint_filter("=,", variable=IB_HCA, names=hcas(2)), "filter-empty-list")
    assert hca.title == "NCCL_IB_HCA='=,' lists no names: it selects every HCA"


def test_bad_port_field() -> None:
    found = lint_filter("=mlx5_0:a,mlx5_1", variable=IB_HCA, names=hcas(2))
    finding = one(found, "filter-bad-port")
    assert "port field 'a' of 'mlx5_0:a' is not a port number" in finding.title


def test_too_many_tokens() -> None:
    value = ",".join(f"ens{i}" for i in range(1, 19))
    finding = one(lint_filter(value, names=B0), "filter-too-many-tokens")
    assert "18 tokens, but NCCL reads only the first 16" in finding.title
    assert "ignored: ens17, ens18" in finding.evidence


def test_whitespace_in_token() -> None:
    found = lint_filter("=ens1, ens2", names=[*B0, "ens2"])
    assert codes(found) == ["filter-whitespace"]
    assert "token ' ens2' contains whitespace" in found[0].title
    assert found[0].fix == "write NCCL_SOCKET_IFNAME==ens1,ens2"


def test_token_unmatched_in_include_list_only() -> None:
    found = lint_filter("=ens1,ens9", names=B0)
    assert codes(found) == ["filter-token-unmatched"]
    assert "token 'ens9' matches no interface here" in found[0].title
    # exclusions of absent names are normal in cluster-wide settings
    assert lint_filter("^=docker0,lo", names=B0) == []


def test_unset_and_empty_values_are_fine() -> None:
    assert lint_filter(None, names=B0) == []
    assert lint_filter("", names=B0) == []
    assert lint_filter("", variable=IB_HCA, names=hcas(2)) == []


def test_no_host_facts_skips_matching_checks() -> None:
    assert lint_filter("ens9", names=[]) == []
    assert codes(lint_filter("^=a,^=b", names=[])) == ["filter-modifier-repeated"]


LintCall = Callable[[], list[Finding]]

# One call per code: together they must cover ALL_CODES (so a new code needs a test here).
EVERY_CODE: dict[str, LintCall] = {
    "filter-ignored-short": lambda: lint_filter("e", names=B0),
    "filter-empty-list": lambda: lint_filter("^,", names=B0),
    "filter-modifier-repeated": lambda: lint_filter("^=a,^=b", names=B0),
    "filter-modifier-order": lambda: lint_filter("=^docker0", names=B0),
    "filter-ip-address": lambda: lint_filter("10.65.0.2", names=B0),
    "filter-port-on-socket": lambda: lint_filter("ens1:1", names=B0),
    "filter-bad-port": lambda: lint_filter("mlx5_0:x", variable=IB_HCA, names=hcas(1)),
    "filter-too-many-tokens": lambda: lint_filter(",".join("abcdefghijklmnopq"), names=B0),
    "filter-whitespace": lambda: lint_filter("ens1 ", names=B0),
    "filter-matches-nothing": lambda: lint_filter("ens9", names=B0),
    "filter-token-unmatched": lambda: lint_filter("ens1,ens9", names=B0),
    "filter-prefix-collision": lambda: lint_filter("ens1", names=[*B0, "ens10"]),
    "filter-prefix-multiple": lambda: lint_filter("ens", names=RUNPOD_8),
    "filter-leaves-avoided": lambda: lint_filter("^lo", names=B0, avoid=RUNPOD_AVOID),
    "filter-selects-avoided": lambda: lint_filter("eth", names=B0, avoid=RUNPOD_AVOID),
    "ifname-nccl-syntax": lambda: lint_exact_names("^lo", names=B0),
    "ifname-ip-address": lambda: lint_exact_names("10.65.0.2", names=B0),
    "ifname-no-such-interface": lambda: lint_exact_names("ens", names=B0),
    "ifname-multiple": lambda: lint_exact_names("a,b", variable="TP_SOCKET_IFNAME", names=B0,
                                              single=True),
    "ifname-ignored-short": lambda: lint_exact_names("e", names=B0),
}


def test_every_code_has_a_case() -> None:
    assert set(EVERY_CODE) == set(ALL_CODES)
    assert len(ALL_CODES) == len(set(ALL_CODES))


@pytest.mark.parametrize("code", ALL_CODES)
def test_each_code_is_emitted_and_well_formed(code: str) -> None:
    found = EVERY_CODE[code]()
    finding = one(found, code)
    variable = finding.evidence[0].split("=", 1)[0]
    assert finding.title.startswith(variable)  # names the variable and the value
    assert finding.evidence[0] in finding.title
    assert finding.fix


@pytest.mark.parametrize("code", ALL_CODES)
def test_each_code_is_documented(code: str) -> None:
    docs = (Path(__file__).parents[1] / "docs" / "filters.md").read_text(encoding="utf-8")
    assert f"`{code}`" in docs


# --- properties -------------------------------------------------------------------------------

VARIABLES = st.sampled_from([SOCKET_IFNAME, IB_HCA])
FILTERISH = st.text(alphabet="^=,:-1 0ae\0", max_size=14)
ANY_VALUE = st.one_of(st.text(), FILTERISH)


def c_atoi(text: str) -> int:
    digits = text.lstrip(" \t\n\v\f\r")
    sign = -1 if digits[:1] == "-" else 1
    digits = digits[1:] if digits[:1] in "+-" and digits else digits
    count = len(digits) - len(digits.lstrip(string.digits))
    return sign * int(digits[:count]) if count else 0


def c_parse_string_list(text: str, max_list: int) -> list[tuple[str, int]]:
    """A line-by-line transliteration of NCCL's parseStringList (utils.cc), -1 = any port.

    One deliberate difference, as in NCCL 2.30: an empty port field before rail/plane fields
    (``mlx5_0::0:0``) means every port.
    """
    text += "\0"
    out: list[tuple[str, int]] = []
    prefix = ""
    ptr = 0
    while True:
        c = text[ptr]
        if c == ":":
            if prefix:
                port_text = text[ptr + 1 :]
                port = -1 if port_text[:1] in (":", ",", "\0") else c_atoi(port_text)
                out.append((prefix, port))
                prefix = ""
            while c not in (",", "\0"):
                ptr += 1
                c = text[ptr]
        elif c in (",", "\0"):
            if prefix:
                out.append((prefix, -1))
                prefix = ""
        else:
            prefix += c
        ptr += 1
        if not (len(out) < max_list and c != "\0"):
            return out


@given(ANY_VALUE, VARIABLES)
def test_parse_agrees_with_nccl_parser(value: str, variable: str) -> None:
    parsed = parse_filter(value, variable=variable)
    text = value.split("\0", 1)[0]
    if parsed is None:
        assert text == "" or (variable == SOCKET_IFNAME and len(text) <= 1)
        return
    exclude = text.startswith("^")
    rest = text[1:] if exclude else text
    exact = rest.startswith("=")
    body = rest[1:] if exact else rest
    assert (parsed.exclude, parsed.exact) == (exclude, exact)
    limit = 16 if variable == SOCKET_IFNAME else 32
    expected = c_parse_string_list(body, limit)
    assert [(t.name, -1 if t.port is None else t.port) for t in parsed.tokens] == expected


@given(ANY_VALUE, VARIABLES)
def test_str_round_trips(value: str, variable: str) -> None:
    parsed = parse_filter(value, variable=variable)
    if parsed is not None:
        again = parse_filter(str(parsed), variable=variable)
        assert again == parsed
        assert str(again) == str(parsed)


NAME = st.text(alphabet=st.characters(blacklist_characters=",:\0"), min_size=1, max_size=8)


@given(st.lists(NAME, min_size=1, max_size=6, unique=True), st.lists(NAME, max_size=6),
       st.randoms(use_true_random=False))
def test_render_exact_selects_exactly_the_names(
    names: list[str], others: list[str], rnd: random.Random
) -> None:
    superset = list(dict.fromkeys([*names, *others]))
    rnd.shuffle(superset)
    for variable in (SOCKET_IFNAME, IB_HCA):
        parsed = parse_filter(render_exact(names), variable=variable)
        assert parsed is not None
        assert parsed.select_interfaces(superset) == tuple(n for n in superset if n in names)
    pairs = [(n, p) for n in superset for p in (1, 2)]
    wanted = [(n, 1) for n in names]
    parsed = parse_filter(render_exact(wanted), variable=IB_HCA)
    assert parsed is not None
    assert parsed.select_ports(pairs) == tuple(p for p in pairs if p in wanted)


@given(ANY_VALUE, VARIABLES, st.lists(st.one_of(NAME, st.sampled_from(B0)), max_size=5))
def test_lint_never_raises_and_names_the_variable(
    value: str, variable: str, names: list[str]
) -> None:
    ports = [(n, 1) for n in names] if variable == IB_HCA else None
    found = lint_filter(value, variable=variable, names=names, ports=ports, owner=B0_OWNER,
                        avoid=RUNPOD_AVOID)
    found += lint_exact_names(value, names=names, owner=B0_OWNER, avoid=RUNPOD_AVOID)
    found += lint_exact_names(value, variable="TP_SOCKET_IFNAME", names=names, single=True)
    for finding in found:
        assert finding.code in ALL_CODES
        assert finding.title.split("=", 1)[0] in (variable, "GLOO_SOCKET_IFNAME",
                                                  "TP_SOCKET_IFNAME")
        assert finding.fix


def test_filter_types_are_frozen() -> None:
    parsed = parse_filter("ens1")
    assert isinstance(parsed, NcclFilter)
    with pytest.raises(AttributeError):
        parsed.exclude = True  # type: ignore[misc]
    token = FilterToken("ens1", None, "ens1")
    assert parsed.tokens == (token,)
