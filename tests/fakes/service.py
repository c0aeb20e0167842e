"""The one harness of the service tests: a real bare git origin, the real service behind aiohttp's test client
(loopback HTTP), signed deliveries in, and the fake GitHub (tests/fakes/github.py) to read what it did.

Suites seed the origin their own way (`Origin(tmp, seed)`) and add their own delivery helpers by subclassing
`Harness`; nothing else is copied between them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import git
from aiohttp.test_utils import TestClient

from tests.fakes.github import FakeGitHub
from tests.gitrepo import commit_all, init_repo

PAYLOADS = Path(__file__).resolve().parents[1] / "payloads"
REPO = "home-ops/cluster"  # the recorded payloads' repository
SECRET = b"it's a secret to everybody"
BOT = "fluxwarden-bot"
BOT_TOKEN = "ghs_" + "b" * 36


def sign(body: bytes, secret: bytes = SECRET) -> str:
    """GitHub's X-Hub-Signature-256 of `body`."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def load_payload(name: str) -> dict[str, Any]:
    """A recorded delivery (tests/payloads/<name>.json)."""
    return json.loads((PAYLOADS / f"{name}.json").read_text())


class Origin:
    """A work repository seeded by `seed(work)` with one commit on `main`, pushed to a bare origin the service fetches."""

    def __init__(self, tmp: Path, seed: Callable[[Path], None], *, work: str = "work") -> None:
        self.work = tmp / work
        seed(self.work)
        self.repo = init_repo(self.work)
        self.bare = tmp / "origin.git"
        git.Repo.init(self.bare, bare=True, initial_branch="main")
        self.main = self.repo.head.commit.hexsha
        self.publish(self.main, "refs/heads/main")

    @property
    def origin(self) -> git.Repo:
        return git.Repo(self.bare)

    def publish(self, rev: str, ref: str) -> None:
        """Point the origin's `ref` at `rev` of the work repository (forced)."""
        self.repo.git.push(str(self.bare), f"+{rev}:{ref}")

    def commit(self, message: str) -> str:
        """Commit everything in the work tree; return the SHA (not published)."""
        return commit_all(self.repo, message)


@dataclass
class Harness:
    """The running service, its fake GitHub and the origin; deliveries are signed and numbered."""

    client: TestClient
    fake: FakeGitHub
    service: Any  # bot.service.app.Service
    origin: Any  # an Origin (or a suite's subclass)
    secret: bytes = SECRET
    prefix: str = "delivery"
    _n: int = field(default=0)

    async def post(self, body: bytes, headers: Mapping[str, str]) -> Any:
        return await self.client.post("/webhook", data=body, headers=dict(headers))

    async def deliver(self, event: str, data: Any, *, delivery: str | None = None, secret: bytes | None = None) -> Any:
        """POST one signed delivery of `event` (the handler runs in the background: `settle` waits for it)."""
        self._n += 1
        body = json.dumps(data).encode()
        return await self.post(body, {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or f"{self.prefix}-{self._n}",
            "X-Hub-Signature-256": sign(body, self.secret if secret is None else secret),
            "Content-Type": "application/json",
        })

    async def settle(self, timeout: float = 120) -> None:
        """Wait for the background handlers and the runs they queued."""
        await self.service.webhook.settle(timeout=timeout)

    async def healthy(self) -> bool:
        return (await self.client.get("/healthz")).status == 200 and (await self.client.get("/readyz")).status == 200

    async def metric(self, name: str, **labels: str) -> float:
        return metric_value(await (await self.client.get("/metrics")).text(), name, **labels)

    def comments(self, number: int, marker: str = "fluxwarden:precheck:prod") -> list[Any]:
        """The bot's comments on `number` under `marker`."""
        return [c for c in self.fake.issue_comments(REPO, number) if c.body.startswith(f"<!-- {marker} -->")]

    def states(self, sha: str, context: str = "fluxwarden/prod") -> list[str]:
        """The commit statuses `context` got on `sha`, oldest first."""
        return states(self.fake, sha, context)


def states(fake: FakeGitHub, sha: str, context: str = "fluxwarden/prod") -> list[str]:
    """The commit statuses `context` got on `sha`, oldest first."""
    return [s.state for s in reversed(fake.statuses_for(REPO, sha)) if s.context == context]


def metric_value(exposition: str, name: str, **labels: str) -> float:
    """One sample of a Prometheus text exposition (0 when absent)."""
    for line in exposition.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        match = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(3))
    return 0.0
