"""Test-wide settings: every test gets its own build cache (no test reads another's cached builds), and no
test reaches past the loopback range."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_build_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path_factory.mktemp("fluxwarden-cache")
    monkeypatch.setenv("FLUXWARDEN_CACHE_DIR", str(cache))
    return cache


class NetworkEscape(AssertionError):
    """A test tried to reach an address outside the loopback range."""


def _loopback(address: object) -> bool:
    """Whether a connect address stays on this machine (a Unix socket path, or 127.0.0.0/8, ::1, localhost)."""
    if isinstance(address, (str, bytes)):
        return True  # AF_UNIX path
    host = address[0] if isinstance(address, tuple) and address else None
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a name: resolving it already asked DNS, which is off this machine


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test touches the network beyond 127.0.0.1: a connect anywhere else fails the test at once.

    Covers everything in this process that connects through `socket.socket` (aiohttp, PyGithub's requests,
    kubernetes-asyncio, asyncio's own connections); kustomize and git run with no network of their own
    (kustomize gets proxies to a closed port; tests give git local paths only).
    """
    original_connect, original_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def connect(self: socket.socket, address: object) -> None:
        if not _loopback(address):
            raise NetworkEscape(f"a test connected to {address!r}, outside the loopback range")
        return original_connect(self, address)

    def connect_ex(self: socket.socket, address: object) -> int:
        if not _loopback(address):
            raise NetworkEscape(f"a test connected to {address!r}, outside the loopback range")
        return original_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
