"""A Helm HTTP chart repository on 127.0.0.1 (aiohttp in a background thread) with hooks for hostile behaviour."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import helm_python
import yaml
from aiohttp import web

from tests.fakes.threaded import serve_in_thread


@dataclass(frozen=True)
class Logged:
    """One request the fake answered."""

    method: str
    path: str
    host: str
    authorization: str | None


@dataclass
class ChartRepo:
    """Serves files under `root` (`index.yaml`, archives); `log` records every request.

    Hooks, by request path: `redirects` (path -> Location), `endless` (streams zeros until the client leaves, at
    most `endless_cap` bytes), `lying_length` (path -> claimed Content-Length, a few bytes sent).
    """

    root: Path
    auth: tuple[str, str] | None = None
    redirects: dict[str, str] = field(default_factory=dict)
    endless: set[str] = field(default_factory=set)
    lying_length: dict[str, int] = field(default_factory=dict)
    endless_cap: int = 256 * 1024 * 1024
    log: list[Logged] = field(default_factory=list)
    url: str = ""
    streamed: list[int] = field(default_factory=list)

    def paths(self) -> list[str]:
        """The paths requested so far, in order."""
        return [entry.path for entry in self.log]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one GET (auth, then the hooks, then the file)."""
        self.log.append(Logged(request.method, request.path, request.host, request.headers.get("Authorization")))
        if self.auth is not None:
            expected = "Basic " + base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            if request.headers.get("Authorization") != expected:
                return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="charts"'})
        if request.path in self.redirects:
            raise web.HTTPFound(self.redirects[request.path])
        if request.path in self.endless:
            return await self._stream_endlessly(request)
        if request.path in self.lying_length:
            response = web.StreamResponse(headers={"Content-Length": str(self.lying_length[request.path])})
            await response.prepare(request)
            await response.write(b"\0" * 1024)
            await asyncio.sleep(5)  # the client must refuse before it waits for the promised bytes
            return response
        target = (self.root / request.path.lstrip("/")).resolve()
        if not target.is_relative_to(self.root.resolve()) or not target.is_file():
            return web.Response(status=404)
        return web.Response(body=target.read_bytes())

    async def _stream_endlessly(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()  # chunked: no length announced
        await response.prepare(request)
        sent, block = 0, b"\0" * 65536
        try:
            while sent < self.endless_cap:
                await response.write(block)
                sent += len(block)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.streamed.append(sent)
        return response


@contextlib.contextmanager
def serve_chart_repo(repo: ChartRepo) -> Iterator[ChartRepo]:
    """Run `repo` on a free 127.0.0.1 port; `repo.url` is its base URL while the block runs."""
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", repo.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()

    def url() -> str:
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    with serve_in_thread(start, runner.cleanup, url, "fake-chart-repo") as base:
        repo.url = base
        yield repo


def package_chart(workdir: Path, name: str, version: str, *, destination: Path, extra: dict[str, str] | None = None) -> Path:
    """A minimal chart (`Chart.yaml`, one template) packaged with the Helm SDK into `destination`."""
    chart = workdir / f"src-{name}-{version}" / name
    (chart / "templates").mkdir(parents=True, exist_ok=True)
    (chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: {version}\n")
    (chart / "values.yaml").write_text("replicas: 1\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n")
    for path, text in (extra or {}).items():
        (chart / path).parent.mkdir(parents=True, exist_ok=True)
        (chart / path).write_text(text)
    destination.mkdir(parents=True, exist_ok=True)
    return Path(helm_python.package(chart, destination=destination))


def write_index(root: Path, entries: dict[str, list[dict[str, object]]]) -> Path:
    """`root/index.yaml` with these entries; an entry's `digest: auto` is the sha256 of the file `urls[0]` names."""
    for versions in entries.values():
        for entry in versions:
            if entry.get("digest") == "auto":
                urls = entry["urls"]
                assert isinstance(urls, list)
                local = urlsplit(str(urls[0])).path.lstrip("/")  # an absolute URL: its path on this server
                entry["digest"] = hashlib.sha256((root / local).read_bytes()).hexdigest()
    path = root / "index.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "entries": entries}))
    return path
