"""The test-wide guards: loopback connects pass, anything else fails the test; so do programs off the allow-list."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NetworkEscape, SubprocessEscape


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


@pytest.mark.parametrize(
    "start",
    [
        lambda: subprocess.run(["curl", "-s", "http://127.0.0.1:1/"], check=False),
        lambda: subprocess.Popen(["/usr/bin/env", "git", "--version"]),  # a known program behind an unknown one
        lambda: subprocess.run("git --version", shell=True, check=False),  # the shell could run anything
        lambda: subprocess.run(["git", "--version"], executable="/bin/sh", check=False),
        lambda: os.system("true"),
        lambda: asyncio.run(asyncio.create_subprocess_exec("curl", "--version")),
    ],
    ids=["curl", "env", "shell", "executable", "os.system", "asyncio"],
)
def test_an_unexpected_program_fails_the_test(start, _known_subprocesses_only: list[str]) -> None:
    with pytest.raises(SubprocessEscape, match="not on the allow-list"):
        start()
    assert _known_subprocesses_only  # teardown would fail the test on it
    _known_subprocesses_only.clear()


def test_known_programs_run(tmp_path: Path, _known_subprocesses_only: list[str]) -> None:
    assert subprocess.run(["git", "--version"], capture_output=True, check=True).stdout.startswith(b"git version")
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, check=True).stdout == b"1\n"
    fake = tmp_path / "bin" / "kubectl-fake"  # a script the test wrote itself
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho fake\n")
    fake.chmod(0o755)
    assert subprocess.run([str(fake)], capture_output=True, check=True).stdout == b"fake\n"
    assert _known_subprocesses_only == []
