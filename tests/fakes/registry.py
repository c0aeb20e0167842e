"""A real OCI registry on 127.0.0.1: Debian's `docker-registry` (distribution 2.8), started per test and stopped after."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

BINARY = "/usr/bin/docker-registry"
USER, PASSWORD = "chart-reader", "s3cret-registry-pass"
# bcrypt of PASSWORD at cost 4 (distribution's htpasswd accepts only bcrypt), made once with crypt.crypt.
HTPASSWD = f"{USER}:$2b$04$fluxwardenTestSalt000uYYz8hLxaZsVUCfsArIBPiz9TPH2oMwi\n"


@dataclass(frozen=True)
class Registry:
    """A running registry: `host` is `127.0.0.1:<port>`; `auth` is (user, password) when htpasswd is on."""

    host: str
    auth: tuple[str, str] | None
    log: Path

    @property
    def oci(self) -> str:
        """`oci://host` (append `/charts/<name>`)."""
        return f"oci://{self.host}"

    def requests(self, agent: str = "fluxwarden-chart-fetcher") -> list[str]:
        """The request lines of the registry's access log made by `agent` (the chart fetcher by default)."""
        lines = self.log.read_text(errors="replace").splitlines()
        return [line.split('"')[1] for line in lines if line.count('"') >= 2 and line.split('"')[1][:4] in ("GET ", "HEAD")
                and line.rstrip().endswith(f'"{agent}"')]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(root: Path, port: int, htpasswd: Path | None) -> str:
    auth = f"auth:\n  htpasswd:\n    realm: fluxwarden-test\n    path: {htpasswd}\n" if htpasswd else ""
    return (
        "version: 0.1\n"
        "log:\n  level: info\n  accesslog:\n    disabled: false\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: fluxwarden-test-only\n"
        + auth
    )


def _binary() -> str:
    """The registry binary; missing it fails the test in CI (it must run there) and skips it elsewhere."""
    if os.path.exists(BINARY):
        return BINARY
    message = f"{BINARY} is missing (apt-get install docker-registry; .ci/run installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def start_registry(workdir: Path, *, with_auth: bool = False) -> Iterator[Registry]:
    """Start `docker-registry serve CONFIG` on a free port, wait for `/v2/`, yield it, then stop it."""
    binary = _binary()
    workdir.mkdir(parents=True, exist_ok=True)
    htpasswd = None
    if with_auth:
        htpasswd = workdir / "htpasswd"
        htpasswd.write_text(HTPASSWD)
    port = _free_port()
    config = workdir / "config.yml"
    config.write_text(_config(workdir / "storage", port, htpasswd))
    log = workdir / "registry.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([binary, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "HOME": str(workdir)})
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
                break
            except urllib.error.HTTPError as exc:
                if exc.code == 401:
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"docker-registry did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield Registry(f"127.0.0.1:{port}", (USER, PASSWORD) if with_auth else None, log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        shutil.rmtree(workdir / "storage", ignore_errors=True)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """An anonymous registry."""
    yield from start_registry(tmp_path / "registry")


@pytest.fixture
def auth_registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry behind htpasswd (Basic) authentication: `auth` holds the user and password."""
    yield from start_registry(tmp_path / "auth-registry", with_auth=True)
