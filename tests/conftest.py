"""Test-wide settings: every test gets its own build cache (no test reads another's cached builds), no test
reaches past the loopback range, and no test starts a program outside a short allow-list."""

from __future__ import annotations

import inspect
import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

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

    # A name lookup asks DNS, off this machine: names other than loopback ones fail as they do offline (CI has
    # no network), so a chart source at a public host is `unreachable` in every test, deterministically.
    original_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: object, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        name = host.decode() if isinstance(host, bytes) else host
        if name is None or _loopback((name, 0)):
            return original_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]
        raise socket.gaierror(socket.EAI_NONAME, f"a test looked up {name!r}: no DNS in tests")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


class SubprocessEscape(AssertionError):
    """A test started a program that is not on the allow-list."""


# By name: what the product runs (git; kubectl for `kubectl kustomize`, or a standalone kustomize), what the
# standard library runs (`uname -p`, for platform.processor()), and two tools tests use (rm for a 1,000-deep
# tree that shutil.rmtree cannot take, diff for the demo), and docker-registry (Debian's OCI distribution registry,
# the real registry tests/fakes/registry.py starts on 127.0.0.1 for the OCI chart fetch tests). Besides these: this interpreter (the kustomize
# reaper, the CLI and the service in a child process) and scripts a test wrote below its own temporary
# directory (fake git and kubectl).
ALLOWED_PROGRAMS = frozenset({"git", "kubectl", "kustomize", "uname", "rm", "diff", "docker-registry"})
_POPEN_SIGNATURE = inspect.signature(subprocess.Popen.__init__)


def _program(args: object, executable: object, shell: bool) -> str:
    """The program a `Popen` starts: the shell for `shell=True`, else `executable` or the first argument."""
    if shell:
        return "/bin/sh"
    first = executable if executable is not None else args if isinstance(args, (str, bytes, os.PathLike)) else list(args)[0]  # type: ignore[call-overload]
    return os.fsdecode(first)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _known_subprocesses_only(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Every `Popen` (subprocess, asyncio's subprocesses, GitPython) and `os.system` is checked against the allow-list.

    An unexpected program raises `SubprocessEscape` where it is started and fails the test at teardown too, in
    case the code under test caught the error. Yields the programs refused (a test of the guard empties it).
    """
    refused: list[str] = []
    own = Path(tmp_path_factory.getbasetemp()).resolve()
    interpreter = os.path.realpath(sys.executable)
    original_init = subprocess.Popen.__init__

    def allowed(program: str) -> bool:
        if os.path.basename(program) in ALLOWED_PROGRAMS:
            return True
        if os.sep not in program:
            return False
        resolved = os.path.realpath(program)
        return resolved == interpreter or Path(resolved).is_relative_to(own)

    def check(program: str) -> None:
        if not allowed(program):
            refused.append(program)
            raise SubprocessEscape(f"a test started {program!r}, which is not on the allow-list in tests/conftest.py")

    def guarded_init(self: subprocess.Popen, *args: object, **kwargs: object) -> None:
        bound = _POPEN_SIGNATURE.bind(self, *args, **kwargs)
        bound.apply_defaults()
        check(_program(bound.arguments["args"], bound.arguments["executable"], bool(bound.arguments["shell"])))
        original_init(self, *args, **kwargs)

    original_system = os.system

    def guarded_system(command: str) -> int:
        check("/bin/sh")
        return original_system(command)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded_init)
    monkeypatch.setattr(os, "system", guarded_system)
    yield refused
    if refused:
        pytest.fail(f"unexpected subprocess(es): {refused} (allow-list: tests/conftest.py)", pytrace=False)
