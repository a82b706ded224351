"""One parser per kind of value text (:mod:`clusterenv._values`): what each accepts, what it
refuses, and that none of them raises on any text."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterenv._values import (
    format_host_port,
    is_loopback_host,
    parse_decimal,
    parse_host,
    parse_ip,
    split_host_port,
    split_zone,
)


@pytest.mark.parametrize(("text", "number"), [
    ("0", 0), (" 0042 ", 42), ("999999999", 999999999), ("0000000001234", 1234),
])
def test_decimals(text: str, number: int) -> None:
    assert parse_decimal(text) == number


@pytest.mark.parametrize("text", ["", " ", "-1", "+1", "1e3", "0x10", "1_000", "١٢", "1.0",
                                  "1234567890", None])
def test_not_decimals(text: str | None) -> None:
    assert parse_decimal(text) is None


def test_zones() -> None:
    v6 = ipaddress.IPv6Address
    assert split_zone("fe80::1%ens1") == (v6("fe80::1"), "ens1")
    assert split_zone("[fe80::1%eth0.100]") == (v6("fe80::1"), "eth0.100")
    assert split_zone("[fd00::2]") == (v6("fd00::2"), None)
    assert split_zone("::ffff:10.65.0.2") == (ipaddress.IPv4Address("10.65.0.2"), None)
    assert split_zone(v6("fe80::1%ens1")) == (v6("fe80::1"), "ens1")
    for hostile in ("fe80::1%x,LD_PRELOAD=libevil.so", "fe80::1%a b", "fe80::1%",
                    "fe80::1%0123456789abcdef", "10.0.0.1%eth0"):
        assert split_zone(hostile) is None, hostile
        assert parse_ip(hostile) is None and parse_host(hostile) is None


def test_hosts_and_ports() -> None:
    assert parse_host(" Node-0.Cluster. ") == "node-0.cluster"
    assert parse_host("[fe80::1%ens1]") == "fe80::1%ens1"
    assert parse_host("10.65.0.2") == "10.65.0.2"
    assert parse_host("-bad") is None and parse_host("10.0.0") is None
    assert split_host_port("[fd00::2]:29500") == ("fd00::2", 29500)
    assert split_host_port("node-0:80") == ("node-0", 80)
    for garbled in ("fd00::2:29500", "node-0:", "node-0: 80", "node-0:123456", "[fd00::2]"):
        assert split_host_port(garbled) is None, garbled
    assert format_host_port("fd00::2", 1) == "[fd00::2]:1"
    assert format_host_port("10.0.0.1", 1) == "10.0.0.1:1"
    assert is_loopback_host("localhost.") and is_loopback_host("::1")
    assert is_loopback_host("127.0.1.1") and not is_loopback_host("10.0.0.1")


@given(st.text(max_size=64))
def test_no_parser_raises(text: str) -> None:
    parse_decimal(text)
    split_zone(text)
    parse_ip(text)
    parse_host(text)
    split_host_port(text)
    is_loopback_host(text)
