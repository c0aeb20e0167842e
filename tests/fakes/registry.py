"""OCI registries on 127.0.0.1: Debian's real `docker-registry` (started per test) and a small Bearer-token fake."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest
from aiohttp import web

from tests.fakes.threaded import serve_in_thread

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


@dataclass
class BearerRegistry:
    """A minimal OCI registry (aiohttp) behind the distribution token flow, serving one chart by tag.

    Real registries (GHCR, Docker Hub, Harbor) answer 401 with `WWW-Authenticate: Bearer realm=…`; Debian's registry
    speaks only Basic without a token server, so this fake covers the Bearer path. `log` records (path, auth).
    """

    archive: bytes
    tag: str
    auth: tuple[str, str] | None = None
    token: str = "fake-registry-token-0123"
    any_digest: bool = False  # answer every manifests/sha256:… request with the tag's manifest (a lying registry)
    corrupt_blob: bool = False  # serve the layer with its last byte changed
    log: list[tuple[str, str | None]] = field(default_factory=list)
    url: str = ""

    def manifest(self) -> bytes:
        """The OCI image manifest of the chart: one config and the chart layer."""
        layer = {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                 "digest": "sha256:" + hashlib.sha256(self.archive).hexdigest(), "size": len(self.archive)}
        config = {"mediaType": "application/vnd.cncf.helm.config.v1+json",
                  "digest": "sha256:" + hashlib.sha256(b"{}").hexdigest(), "size": 2}
        return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": config, "layers": [layer]}).encode()

    async def handle(self, request: web.Request) -> web.Response:
        """The token endpoint, then manifests and blobs for a valid Bearer token only."""
        authorization = request.headers.get("Authorization")
        self.log.append((request.path_qs, authorization))
        if request.path == "/token":
            if self.auth is not None:
                expected = "Basic " + base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
                if authorization != expected:
                    return web.Response(status=401)
            return web.json_response({"token": self.token})
        if authorization != f"Bearer {self.token}":
            challenge = f'Bearer realm="{self.url}/token",service="fake-registry",scope="repository:charts/demo:pull"'
            return web.Response(status=401, headers={"WWW-Authenticate": challenge})
        lying = self.any_digest and request.path.startswith("/v2/charts/demo/manifests/sha256:")
        if request.path == f"/v2/charts/demo/manifests/{self.tag}" or lying:
            return web.Response(body=self.manifest(), content_type="application/vnd.oci.image.manifest.v1+json")
        if request.path == "/v2/charts/demo/blobs/sha256:" + hashlib.sha256(self.archive).hexdigest():
            return web.Response(body=self.archive[:-1] + bytes([self.archive[-1] ^ 1]) if self.corrupt_blob else self.archive)
        return web.Response(status=404)


@contextlib.contextmanager
def serve_bearer_registry(fake: BearerRegistry) -> Iterator[BearerRegistry]:
    """Run `fake` on a free 127.0.0.1 port; `fake.url` is its base URL while the block runs."""
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()

    with serve_in_thread(start, runner.cleanup, lambda: f"http://127.0.0.1:{runner.addresses[0][1]}", "fake-registry") as base:
        fake.url = base
        yield fake
