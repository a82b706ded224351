"""The preflight primary's readiness poller (``epoll`` and the portable path), and the cheap
checks its bookkeeping relies on: ``short_texts`` and the numeric address order."""

from __future__ import annotations

import ipaddress
import select
import socket
from collections.abc import Iterator

import pytest

from clusterenv.preflight.poller import READ, WRITE, Poller
from clusterenv.preflight.server import _address_order
from clusterenv.preflight.wire import short_texts

MODES = [pytest.param(False, id="selectors")]
if hasattr(select, "epoll"):
    MODES.append(pytest.param(True, id="epoll"))


@pytest.fixture(params=MODES)
def poller(request: pytest.FixtureRequest) -> Iterator[Poller]:
    p = Poller(use_epoll=request.param)
    yield p
    p.close()


def pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def test_readable_and_writable_with_their_data(poller: Poller) -> None:
    a, b = pair()
    with a, b:
        poller.register(a.fileno(), READ, "a")
        assert poller.poll(0) == []
        b.send(b"x")
        assert poller.poll(1.0) == [("a", READ)]
        poller.modify(a.fileno(), READ | WRITE)
        assert poller.poll(1.0) == [("a", READ | WRITE)]
        a.recv(1)
        assert poller.poll(1.0) == [("a", WRITE)]


def test_a_hang_up_wakes_a_reader(poller: Poller) -> None:
    a, b = pair()
    with a:
        poller.register(a.fileno(), READ, "a")
        b.close()
        [(data, events)] = poller.poll(1.0)
        assert data == "a" and events & READ


def test_unknown_descriptors_are_nothing_to_unregister_or_forget(poller: Poller) -> None:
    a, b = pair()
    with a, b:
        poller.unregister(a.fileno())
        poller.forget(a.fileno())
        poller.register(a.fileno(), READ, "a")
        poller.unregister(a.fileno())
        poller.unregister(a.fileno())
        b.send(b"x")
        assert poller.poll(0) == []


def test_a_forgotten_descriptor_can_be_reused_by_a_new_socket(poller: Poller) -> None:
    a, b = pair()
    fd = a.fileno()
    poller.register(fd, READ, "old")
    b.send(b"x")
    poller.forget(fd)
    a.close()
    b.close()
    c, d = pair()
    with c, d:
        assert fd in (c.fileno(), d.fileno())  # the lowest free number: the old one
        poller.register(fd, READ, "new")
        assert poller.poll(0) == []
        (d if c.fileno() == fd else c).send(b"y")
        assert poller.poll(1.0) == [("new", READ)]


def test_a_forgotten_descriptor_still_open_elsewhere_is_not_reported(poller: Poller) -> None:
    a, b = pair()
    copy = a.dup()  # as a child process forked meanwhile would hold it
    with copy, b:
        poller.register(a.fileno(), READ, "a")
        poller.forget(a.fileno())
        a.close()
        b.send(b"x")
        assert poller.poll(0) == []


def test_close_is_idempotent() -> None:
    p = Poller()
    p.close()
    p.close()


@pytest.mark.parametrize(("items", "limit", "expected"), [
    ([], 4, True),
    (["mlx5_0", "mlx5_1"], 6, True),
    (["mlx5_0", "mlx5_10"], 6, False),
    (["a", 1], 64, False),
    (["a", None], 64, False),
    ([b"a"], 64, False),
    ({"x": "yy"}.values(), 2, True),
])
def test_short_texts(items: list[object], limit: int, expected: bool) -> None:
    assert short_texts(items, limit) is expected


ADDRESSES = ["10.65.0.10", "10.65.0.3", "0.0.0.0", "255.255.255.255", "::1", "fe80::1",
             "::ffff:10.65.0.3", "2001:db8::1", "fe80::1%eth0", "010.0.0.1", "node-3", "",
             "1.2.3", "10.0.0.1\x00"]


@pytest.mark.parametrize("addr", ADDRESSES)
def test_address_order_is_that_of_ipaddress(addr: str) -> None:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        assert _address_order(addr) == (9, 0, addr)
    else:
        assert _address_order(addr) == (ip.version, int(ip), "")


def test_addresses_sort_by_number() -> None:
    assert sorted(["10.65.0.10", "node", "::1", "10.65.0.3"], key=_address_order) == [
        "10.65.0.3", "10.65.0.10", "::1", "node"]
