"""NCCL's RoCE GID choice (``ncclIbGetGidIndex``) replayed per release range and setting.

Each table is written to a host snapshot in the kernel's format and read back by detection, so
the rows test what NCCL would do with the tables real hosts show (docs/discovery-rdma.md cites
the rules per release).
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv6Address
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterenv.nccl.gid import GidSettings, _strtoll, choose_gid, gid_family
from clusterenv.rdma import Gid, RdmaInfo, RdmaPort
from clusterenv.testing import GidSpec, HostBuilder, gid, port

LL = "fe80::a288:c2ff:fe03:1"
LL2 = "fe80::7d1c:9a2:1b3:44"  # a second link-local (NetworkManager stable-privacy)
ULA = "fd93:16d3:59b6:1a::12"
GLOBAL = "2001:db8::5"

TABLES: dict[str, Sequence[GidSpec]] = {
    # show_gids on a ConnectX-7 RoCE port: link-local v1/v2, IPv4 v1/v2.
    "standard": (gid(0, LL, "IB/RoCE v1"), gid(1, LL, "RoCE v2"),
                 gid(2, "::ffff:10.99.91.39", "IB/RoCE v1"), gid(3, "::ffff:10.99.91.39")),
    # AMD Pensando ionic: RoCE v2 only, link-local at 0 and a ULA at 1, no IPv4.
    "ionic": (gid(0, LL, "RoCE v2"), gid(1, ULA, "RoCE v2")),
    "second-link-local": (gid(0, LL, "IB/RoCE v1"), gid(1, LL, "RoCE v2"),
                          gid(2, LL2, "IB/RoCE v1"), gid(3, LL2, "RoCE v2"),
                          gid(4, "::ffff:10.0.0.7", "IB/RoCE v1"), gid(5, "::ffff:10.0.0.7")),
    # Kubernetes MACVLAN pod: slots 6-9 only, IPv4 before link-local.
    "macvlan-sparse": (gid(6, "::ffff:192.168.1.20", "IB/RoCE v1"), gid(7, "::ffff:192.168.1.20"),
                       gid(8, LL, "IB/RoCE v1"), gid(9, LL, "RoCE v2")),
    # A kernel or NIC without RoCE v2: v1 entries only.
    "v1-only": (gid(0, LL, "IB/RoCE v1"), gid(1, "::ffff:10.0.0.9", "IB/RoCE v1")),
    "empty": (),
    "dual-stack": (gid(0, LL, "IB/RoCE v1"), gid(1, LL, "RoCE v2"),
                   gid(2, "::ffff:10.0.0.3", "IB/RoCE v1"), gid(3, "::ffff:10.0.0.3"),
                   gid(4, GLOBAL, "IB/RoCE v1"), gid(5, GLOBAL, "RoCE v2")),
    # IPv4 entries first, then link-local, then a ULA (sparse tables seen in pods).
    "ipv4-first": (gid(0, "::ffff:10.0.0.4", "IB/RoCE v1"), gid(1, "::ffff:10.0.0.4"),
                   gid(2, LL, "IB/RoCE v1"), gid(3, LL, "RoCE v2"),
                   gid(4, ULA, "IB/RoCE v1"), gid(5, ULA, "RoCE v2")),
    "two-ipv4": (gid(3, "::ffff:10.0.0.1"), gid(5, "::ffff:10.99.0.1")),
}

OLD = (2, 19, 3)
NEW = (2, 21, 5)
NEWEST = (2, 30, 7)

# table, NCCL release, settings -> index NCCL uses, whether it reaches other nodes, and why not.
Row = tuple[str, tuple[int, int, int], dict[str, str], int, bool, str | None]
ROWS: list[Row] = [
    ("standard", NEW, {}, 3, True, None),
    ("standard", NEWEST, {}, 3, True, None),
    ("standard", OLD, {}, 0, False, "link-local"),
    ("standard", OLD, {"NCCL_IB_GID_INDEX": "3"}, 3, True, None),
    ("standard", OLD, {"NCCL_IB_ADDR_FAMILY": "AF_INET6"}, 0, False, "link-local"),
    ("standard", NEW, {"NCCL_IB_ADDR_FAMILY": "AF_INET6"}, 0, False, "link-local"),
    ("standard", NEW, {"NCCL_IB_ROCE_VERSION_NUM": "1"}, 2, False, "roce-v1"),
    ("standard", NEW, {"NCCL_IB_GID_INDEX": "1"}, 1, False, "link-local"),
    ("standard", NEW, {"NCCL_IB_GID_INDEX": "-1"}, 3, True, None),
    ("standard", NEW, {"NCCL_IB_GID_INDEX": "0x3"}, 3, True, None),  # strtoll, base 0
    ("standard", NEW, {"NCCL_IB_GID_INDEX": "abc"}, 0, False, "link-local"),  # strtoll -> 0
    ("standard", NEW, {"NCCL_IB_ADDR_FAMILY": "af_inet6"}, 3, True, None),  # strcmp: ignored
    ("ionic", NEW, {}, 0, False, "link-local"),
    ("ionic", NEWEST, {}, 0, False, "link-local"),
    ("ionic", NEW, {"NCCL_IB_ADDR_FAMILY": "AF_INET6"}, 1, True, None),
    ("ionic", OLD, {}, 0, False, "link-local"),
    ("ionic", OLD, {"NCCL_IB_ADDR_FAMILY": "AF_INET6"}, 0, False, "link-local"),  # no such knob
    ("ionic", OLD, {"NCCL_IB_GID_INDEX": "1"}, 1, True, None),
    ("ionic", NEW, {"NCCL_IB_ADDR_FAMILY": "AF_INET6",
                    "NCCL_IB_ADDR_RANGE": "fd93:16d3::/32"}, 1, True, None),
    ("ionic", NEW, {"NCCL_IB_ADDR_FAMILY": "AF_INET6",
                    "NCCL_IB_ADDR_RANGE": "fd00:aaaa::/32"}, 0, False, "link-local"),
    ("second-link-local", NEW, {}, 5, True, None),
    ("macvlan-sparse", NEW, {}, 7, True, None),
    ("macvlan-sparse", OLD, {}, 0, False, "missing"),
    ("macvlan-sparse", NEW, {"NCCL_IB_ADDR_FAMILY": "AF_INET6"}, 0, False, "missing"),
    ("v1-only", NEW, {}, 1, False, "roce-v1"),
    ("empty", NEW, {}, 0, False, "missing"),
    ("empty", OLD, {}, 0, False, "missing"),
    ("dual-stack", NEW, {}, 3, True, None),
    ("dual-stack", NEW, {"NCCL_IB_ADDR_FAMILY": "AF_INET6"}, 5, True, None),
    ("ipv4-first", NEW, {}, 1, True, None),
    # The family switch takes the first IPv6 GID of any kind; only a valid v2 one displaces it.
    ("ipv4-first", NEW, {"NCCL_IB_ADDR_FAMILY": "AF_INET6"}, 5, True, None),
    ("ipv4-first", OLD, {}, 0, False, "roce-v1"),
    ("two-ipv4", NEW, {}, 3, True, None),
    ("two-ipv4", NEW, {"NCCL_IB_ADDR_RANGE": "10.99.0.0/16"}, 5, True, None),
    ("two-ipv4", NEW, {"NCCL_IB_ADDR_RANGE": "10.99.0.0"}, 3, True, None),  # no mask: ignored
    ("two-ipv4", NEW, {"NCCL_IB_ADDR_RANGE": "10.99.0.0/33"}, 3, True, None),  # bad mask
    ("two-ipv4", NEW, {"NCCL_IB_ADDR_RANGE": "10.98.0.0/16"}, 0, False, "missing"),
    ("two-ipv4", OLD, {"NCCL_IB_GID_INDEX": "-1"}, -1, False, "missing"),
]


def _port(tmp_path: Path, table: Sequence[GidSpec]) -> RdmaPort:
    host = HostBuilder(tmp_path).rdma_device(
        "mlx5_0", port(link_layer="Ethernet", netdev="ens1", gids=table)
    )
    return RdmaInfo.detect(root=host.root).devices[0].ports[0]


@pytest.mark.parametrize(
    "row", ROWS,
    ids=[f"{r[0]}-{'.'.join(map(str, r[1]))}-{'-'.join(f'{k}={v}' for k, v in r[2].items())}"
         for r in ROWS],
)
def test_gid_choice_table(tmp_path: Path, row: Row) -> None:
    table, version, environ, index, reaches, problem = row
    found = _port(tmp_path, TABLES[table])
    choice = choose_gid(found, version=version, settings=GidSettings.from_mapping(environ))
    assert choice is not None
    assert (choice.index, choice.reaches_peers, choice.problem) == (index, reaches, problem)
    if version >= (2, 21) and not environ:
        # The public property is this very choice with NCCL's defaults.
        assert (found.nccl_gid_index, found.nccl_gid_reaches_peers) == (index, reaches)


def test_every_table_and_both_release_ranges_are_covered() -> None:
    assert {row[0] for row in ROWS} == set(TABLES)
    for name in ("standard", "ionic"):
        versions = {row[1] for row in ROWS if row[0] == name}
        families = {row[2].get("NCCL_IB_ADDR_FAMILY", "AF_INET") for row in ROWS if row[0] == name}
        assert any(v < (2, 21) for v in versions) and any(v >= (2, 21) for v in versions)
        assert {"AF_INET", "AF_INET6"} <= families


def test_infiniband_and_efa_ports_have_no_roce_gid(tmp_path: Path) -> None:
    host = HostBuilder(tmp_path).rdma_device("mlx5_0", port(1)).rdma_device(
        "rdmap85s0", port(1, link_layer="Unknown", gids=[], gid_table_len=1),
        node_type="7: unspecified",
    )
    for device in RdmaInfo.detect(root=host.root).devices:
        found = device.ports[0]
        assert choose_gid(found) is None
        assert (found.nccl_gid_index, found.nccl_gid_reaches_peers) == (None, None)


def test_rule_says_why(tmp_path: Path) -> None:
    ionic = _port(tmp_path / "a", TABLES["ionic"])
    choice = choose_gid(ionic)
    assert choice is not None
    assert choice.rule == "no valid IPv4 RoCE v2 GID: NCCL stays on index 0"
    assert choice.describe() == f"GID 0 {LL} (RoCE v2 IPv6 link-local)"
    assert choice.kind == "RoCE v2 IPv6 link-local"
    six = choose_gid(ionic, settings=GidSettings.from_mapping({"NCCL_IB_ADDR_FAMILY": "AF_INET6"}))
    assert six is not None and six.rule == "the lowest valid IPv6 RoCE v2 GID"
    assert six.kind == "RoCE v2 IPv6"
    old = choose_gid(_port(tmp_path / "b", TABLES["standard"]), version=OLD)
    assert old is not None and "defaults to 0" in old.rule


@pytest.mark.parametrize(
    ("text", "value"),
    [("3", 3), (" 3", 3), ("+3", 3), ("-1", -1), ("0x10", 16), ("010", 8), ("3x", 3),
     ("abc", 0), ("", 0), ("0x", 0), ("99999999999999999999", None)],
)
def test_integer_parameters_read_like_strtoll(text: str, value: int | None) -> None:
    assert _strtoll(text) == value


# -- the walk against the rule the references state ------------------------------------------

_POOL = (LL, LL2, ULA, GLOBAL, "::ffff:10.0.0.1", "::ffff:10.99.0.1")
_TYPES = ("IB/RoCE v1", "RoCE v2", None)


@st.composite
def _tables(draw: st.DrawFn) -> tuple[Gid, ...]:
    slots = draw(st.lists(st.tuples(st.sampled_from(_POOL), st.sampled_from(_TYPES)),
                          max_size=10))
    holes = draw(st.sets(st.integers(0, 9)))
    return tuple(Gid(i, IPv6Address(address), kind, "ens1")
                 for i, (address, kind) in enumerate(slots) if i not in holes)


@settings(max_examples=300, deadline=None)
@given(gids=_tables(), family=st.sampled_from(["AF_INET", "AF_INET6"]),
       roce=st.sampled_from([1, 2]))
def test_walk_ends_on_the_lowest_valid_gid_of_the_wanted_kind(
    gids: tuple[Gid, ...], family: str, roce: int
) -> None:
    """The references' net effect of ncclIbGetGidIndex: the lowest valid GID of the wanted family
    and RoCE version, when there is one; otherwise never such a GID (index 0, or whatever the
    family switch reached; index 0 may still be a GID that works, e.g. a ULA when IPv4 is
    wanted)."""
    found = RdmaPort(1, "ACTIVE", "LinkUp", 400.0, "Ethernet", "ens1", gids, 16)
    environ = {"NCCL_IB_ADDR_FAMILY": family, "NCCL_IB_ROCE_VERSION_NUM": str(roce)}
    choice = choose_gid(found, settings=GidSettings.from_mapping(environ))
    assert choice is not None
    wanted = [g.index for g in gids
              if gid_family(g.address) == family and not g.is_link_local
              and g.roce_version == roce]
    if wanted:
        assert choice.index == min(wanted)
        assert choice.reaches_peers is (roce == 2)
    else:
        # Index 0, or where the family switch landed: a GID of the wanted family, or for
        # AF_INET6 an empty slot (the all-zero GID counts as IPv6).
        landed = choice.gid.address if choice.gid is not None else IPv6Address(0)
        assert choice.index == 0 or gid_family(landed) == family
