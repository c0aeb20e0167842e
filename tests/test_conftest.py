"""The test-wide network guard: loopback connects pass, anything else fails the test."""

from __future__ import annotations

import socket

import pytest

from tests.conftest import NetworkEscape


@pytest.mark.parametrize("address", [("10.0.0.1", 80), ("192.168.1.1", 443), ("93.184.216.34", 80), ("2001:db8::1", 80, 0, 0), ("example.com", 80)])
def test_a_connect_outside_loopback_fails(address) -> None:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock, pytest.raises(NetworkEscape):
        sock.connect(address)


def test_a_loopback_connect_goes_through() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
