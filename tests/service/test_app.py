"""The webhook service end to end: signed deliveries in, real PyGithub calls out to the fake GitHub.

A real git origin (a bare repo in tmp_path) holds the seed's PR: main is the pre-fix state,
refs/pull/7/head the fix. The service fetches it into its own mirror, renders both sides with
kustomize, and reconciles comments and statuses on the fake over HTTP.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bot.adapters.github import GitHubAdapter, GitHubAuth
from bot.pipeline.session import open_run
from bot.service.app import build_service
from bot.service.settings import ServiceConfig
from bot.engine.chatops.settings import ClusterPolicy, RepoPolicy
from tests.fakes.github import FakeGitHub
from tests.fakes.service import BOT_TOKEN, PAYLOADS, REPO, SECRET, load_payload, sign
from tests.fakes.service import Harness as BaseHarness
from tests.fakes.service import Origin as BaseOrigin
from tests.gitrepo import EXAMPLE, pre_fix

__all__ = ["BOT_TOKEN", "PAYLOADS", "REPO", "SECRET", "Harness", "Origin", "payload", "sign"]


class Origin(BaseOrigin):
    """main is the seed's pre-fix example; refs/pull/7/head the fix, then later pushes."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, _pre_fix_example)
        for rel in ("platform-config", "platform-config-cdi"):
            shutil.rmtree(self.work / rel, ignore_errors=True)
            shutil.copytree(EXAMPLE / rel, self.work / rel)
        for name in ("kustomization.yaml", "apps-vms.yaml", "platform-config-cdi.yaml"):
            shutil.copy(EXAMPLE / "clusters/base" / name, self.work / "clusters/base" / name)
        self.head = self.commit("fix(gitops): CDI deadlock repaired in the graph")
        self.publish(self.head, "refs/pull/7/head")

    def push_more(self) -> str:
        (self.work / "apps/whoami/extra.txt").write_text("x\n")
        sha = self.commit("another push")
        self.publish(sha, "refs/pull/7/head")
        return sha


def _pre_fix_example(work: Path) -> None:
    shutil.copytree(EXAMPLE, work)
    pre_fix(work)


def payload(name: str, **shas: str) -> dict[str, Any]:
    data = load_payload(name)
    if "pull_request" in data:
        data["pull_request"]["head"]["sha"] = shas.get("head", data["pull_request"]["head"]["sha"])
        data["pull_request"]["base"]["sha"] = shas.get("base", data["pull_request"]["base"]["sha"])
    return data


class Harness(BaseHarness):
    """PR 7 of the example: comments on it, and what the bot wrote there."""

    def comment(self, body: str, user: str = "bob") -> dict[str, Any]:
        """A PR comment that exists on the fake (GitHub has it before it sends the webhook)."""
        made = self.fake.add_comment(REPO, 7, body, user=user)
        data = payload("issue_comment.created.pr")
        data["comment"].update({"id": made.id, "body": body})
        data["comment"]["user"]["login"] = user
        data["sender"]["login"] = user
        return data


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    origin = Origin(tmp_path)
    async with FakeGitHub() as fake:
        fake.add_user("fluxwarden-bot", token=BOT_TOKEN, type="Bot")
        repo = fake.add_repo(REPO, clone_url=str(origin.bare))
        repo.next_number = 7
        fake.add_pull(REPO, head_sha=origin.head, base_sha=origin.main, head_ref="feat/cdi-tier-order", author="alice")
        for login, role in (("alice", "write"), ("bob", "write"), ("carol", "maintain"), ("mallory", "read")):
            fake.set_permission(REPO, login, role)
        config = ServiceConfig(
            webhook_secret=SECRET,
            github=GitHubAuth(token=BOT_TOKEN, api_url=fake.base_url),
            repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("dev"), ClusterPolicy("prod", permission="maintain")), clone_url=str(origin.bare)),),
            cache_dir=tmp_path / "cache",
        )
        adapter = GitHubAdapter(config.github, min_write_interval=0, backoff=0.05, bot_login="fluxwarden-bot")
        service = build_service(config, github=adapter)
        async with TestClient(TestServer(service.app())) as client:
            yield Harness(client, fake, service, origin)


async def test_pull_request_opened_posts_review_and_statuses(harness: Harness) -> None:
    h = harness
    started = time.monotonic()
    response = await h.deliver("pull_request", payload("pull_request.opened", head=h.origin.head, base=h.origin.main))
    acknowledged = time.monotonic() - started
    assert response.status == 202
    assert acknowledged < 1.0
    await h.settle()
    for cluster in ("dev", "prod"):
        [comment] = h.comments(7, f"fluxwarden:precheck:{cluster}")
        # prune-transient, tier-order-stale, and the CDI CR's readiness gap (dependency-not-waited)
        assert f"### ⚠️ {cluster}: 3 new warnings" in comment.body
        assert "Cold start: this change resolves a cold-start deadlock" in comment.body
        assert "prune-transient" in comment.body and "```mermaid" in comment.body
        assert h.states(h.origin.head, f"fluxwarden/{cluster}") == ["pending", "success"]
        # Created once ("running"), then edited in place with the review.
        posts = h.fake.find_effects("POST", r"/issues/7/comments$")
        edits = h.fake.find_effects("PATCH", rf"/issues/comments/{comment.id}$")
        assert any(e.json["body"].startswith(f"<!-- fluxwarden:precheck:{cluster} -->\n### ⏳") for e in posts)
        assert len(edits) == 1
    metrics = await (await h.client.get("/metrics")).text()
    assert 'fluxwarden_webhook_deliveries_total{event="pull_request",outcome="accepted"} 1.0' in metrics
    assert 'fluxwarden_runs_total{cluster="prod",verdict="success"} 1.0' in metrics
    assert "fluxwarden_work_in_progress 0.0" in metrics  # settled: what bench/soak.py waits for before it judges


async def test_comment_command_permissions(harness: Harness) -> None:
    h = harness
    comment = h.comment("/precheck prod")  # bob has write; prod needs maintain
    response = await h.deliver("issue_comment", comment)
    assert response.status == 202
    await h.settle()
    [reply] = h.comments(7, f"fluxwarden:reply:{comment['comment']['id']}")
    assert "you have write permission on this repository; `prod` needs maintain" in reply.body
    assert h.states(h.origin.head, "fluxwarden/prod") == []
    assert h.fake.reactions_for(comment["comment"]["id"]) == []
    # A maintainer may; the bot reacts 👀 and runs prod only.
    h.fake.set_permission(REPO, "bob", "maintain")
    comment = h.comment("/precheck prod")
    await h.deliver("issue_comment", comment)
    await h.settle()
    assert [r.content for r in h.fake.reactions_for(comment["comment"]["id"])] == ["eyes"]
    assert h.states(h.origin.head, "fluxwarden/prod") == ["pending", "success"]
    assert h.states(h.origin.head, "fluxwarden/dev") == []


async def test_help_and_bad_commands_reply_without_running(harness: Harness) -> None:
    h = harness
    comment = h.comment("/fluxwarden help\n/precheck staging\n> /precheck prod")
    await h.deliver("issue_comment", comment)
    await h.settle()
    [reply] = h.comments(7, f"fluxwarden:reply:{comment['comment']['id']}")
    assert "/precheck" in reply.body and "prod: maintain or higher" in reply.body
    assert "unknown cluster `staging`" in reply.body
    assert h.fake.statuses_for(REPO, h.origin.head) == []


async def test_bad_signature_ping_unknown_and_duplicates(harness: Harness) -> None:
    h = harness
    assert (await h.deliver("pull_request", payload("pull_request.opened"), secret=b"wrong")).status == 401
    assert (await h.deliver("ping", payload("ping"))).status == 200
    assert (await h.deliver("deployment", {"action": "created"})).status == 204
    assert (await h.client.post("/webhook", data=b"{}", headers={"X-GitHub-Event": "ping"})).status == 401
    opened = payload("pull_request.opened", head=h.origin.head, base=h.origin.main)
    first = await h.deliver("pull_request", opened, delivery="same-delivery")
    again = await h.deliver("pull_request", opened, delivery="same-delivery")
    assert (first.status, again.status) == (202, 200)
    await h.settle()
    assert h.states(h.origin.head, "fluxwarden/dev") == ["pending", "success"]


async def test_fork_pr_is_not_rendered(harness: Harness) -> None:
    h = harness
    assert (await h.deliver("pull_request", payload("pull_request.opened.fork"))).status == 202
    await h.settle()
    assert h.fake.find_effects("POST") == []


async def test_new_push_supersedes_the_older_run(harness: Harness) -> None:
    h = harness
    old = h.origin.head
    new = h.origin.push_more()  # refs/pull/7/head is already at `new`
    await h.deliver("pull_request", payload("pull_request.opened", head=old, base=h.origin.main))
    await h.deliver("pull_request", payload("pull_request.synchronize", head=new, base=h.origin.main))
    await h.settle()
    [comment] = h.comments(7, "fluxwarden:precheck:prod")
    assert new[:12] in json.dumps([e.json for e in h.fake.find_effects("PATCH")] + [comment.body])
    assert h.states(new, "fluxwarden/prod") == ["pending", "success"]
    assert "success" not in h.states(old, "fluxwarden/prod")


async def test_github_5xx_is_retried(harness: Harness) -> None:
    h = harness
    h.fake.inject("POST", r"/statuses/", status=502, times=2)
    await h.deliver("pull_request", payload("pull_request.opened", head=h.origin.head, base=h.origin.main))
    await h.settle()
    assert h.states(h.origin.head, "fluxwarden/prod")[-1] == "success"
    assert any(r.status == 502 for r in h.fake.find_requests("POST", r"/statuses/"))


async def test_infrastructure_failure_is_an_error_status(harness: Harness) -> None:
    h = harness
    shutil.rmtree(h.origin.bare)  # the origin is gone: git fetch fails
    await h.deliver("pull_request", payload("pull_request.opened", head=h.origin.head, base=h.origin.main))
    await h.settle()
    assert h.states(h.origin.head, "fluxwarden/prod") == ["pending", "error"]
    [comment] = h.comments(7, "fluxwarden:precheck:prod")
    assert "infrastructure error" in comment.body and "could not run" in comment.body


async def test_health_and_readiness(harness: Harness) -> None:
    h = harness
    assert (await h.client.get("/healthz")).status == 200
    ready = await h.client.get("/readyz")
    assert ready.status == 200
    assert (await ready.json())["checks"] == {"config": None, "github": None, "kustomize": None}
    # The readiness probe's kustomize version is the process's: every run's binary is located with the same record.
    probes = h.service.bot.options.probes
    assert probes is not None
    with open_run(h.service.bot.options) as run:
        assert run.binary.probes is probes and probes.knows(run.binary.path, run.binary.embedded)


async def test_restart_reruns_pending_statuses(tmp_path: Path) -> None:
    origin = Origin(tmp_path)
    async with FakeGitHub() as fake:
        fake.add_user("fluxwarden-bot", token=BOT_TOKEN, type="Bot")
        repo = fake.add_repo(REPO, clone_url=str(origin.bare))
        repo.next_number = 7
        fake.add_pull(REPO, head_sha=origin.head, base_sha=origin.main, head_ref="feat/x")
        fake.add_status(REPO, origin.head, state="pending", context="fluxwarden/prod", description="precheck of prod running", creator="fluxwarden-bot")
        config = ServiceConfig(
            webhook_secret=SECRET,
            github=GitHubAuth(token=BOT_TOKEN, api_url=fake.base_url),
            repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("dev"), ClusterPolicy("prod")), clone_url=str(origin.bare)),),
            cache_dir=tmp_path / "cache",
        )
        service = build_service(config, github=GitHubAdapter(config.github, min_write_interval=0, bot_login="fluxwarden-bot"))
        async with TestClient(TestServer(service.app())):
            await service.webhook.settle(timeout=120)
        states = [s.state for s in reversed(fake.statuses_for(REPO, origin.head)) if s.context == "fluxwarden/prod"]
        assert states[-1] == "success"
        assert not [s for s in fake.statuses_for(REPO, origin.head) if s.context == "fluxwarden/dev"]


async def test_github_app_gets_check_runs_with_annotations(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    origin = Origin(tmp_path)
    async with FakeGitHub() as fake:
        repo = fake.add_repo(REPO, clone_url=str(origin.bare))
        repo.next_number = 7
        fake.add_pull(REPO, head_sha=origin.head, base_sha=origin.main, head_ref="feat/x")
        fake.add_app(4242, "fluxwarden", public_key_pem=public)
        fake.add_installation(42, 4242)
        config = ServiceConfig(
            webhook_secret=SECRET,
            github=GitHubAuth(app_id=4242, private_key=private, installation_id=42, api_url=fake.base_url),
            repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("prod"),), clone_url=str(origin.bare)),),
            cache_dir=tmp_path / "cache",
        )
        service = build_service(config, github=GitHubAdapter(config.github, min_write_interval=0))
        async with TestClient(TestServer(service.app())) as client:
            h = Harness(client, fake, service, origin)
            await h.deliver("pull_request", payload("pull_request.opened", head=origin.head, base=origin.main))
            await h.settle()
        [run] = fake.check_runs_for(REPO, origin.head)
        assert (run.name, run.status, run.conclusion) == ("fluxwarden/prod", "completed", "neutral")
        paths = {(a["path"], a["annotation_level"], a["title"]) for a in run.annotations}
        assert ("platform-config-cdi/cdi-storageprofiles.yaml", "warning", "prune-transient (new)") in paths
        assert ("bootstrap/standup.sh", "warning", "tier-order-stale (new)") in paths
        [comment] = [c for c in fake.issue_comments(REPO, 7) if c.body.startswith("<!-- fluxwarden:precheck:prod -->")]
        assert comment.user == "fluxwarden[bot]"


async def test_rate_limit_is_honoured(harness: Harness) -> None:
    h = harness
    h.fake.inject("POST", r"/statuses/", rate_limit="primary", reset_in=1.0)
    started = time.monotonic()
    await h.deliver("pull_request", payload("pull_request.opened", head=h.origin.head, base=h.origin.main))
    await h.settle()
    assert h.states(h.origin.head, "fluxwarden/prod")[-1] == "success"
    assert h.states(h.origin.head, "fluxwarden/dev")[-1] == "success"
    # The quota stays empty until the reset, so each of the two concurrent runs met one 403, then waited.
    limited = [r for r in h.fake.find_requests("POST", r"/statuses/") if r.status == 403]
    assert 1 <= len(limited) <= 2 and time.monotonic() - started >= 1.0


async def test_readiness_fails_on_a_bad_token(tmp_path: Path) -> None:
    async with FakeGitHub() as fake:
        fake.add_user("fluxwarden-bot", token=BOT_TOKEN, type="Bot")
        fake.add_repo(REPO)
        config = ServiceConfig(
            webhook_secret=SECRET,
            github=GitHubAuth(token="ghs_" + "x" * 36, api_url=fake.base_url),
            repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("prod"),)),),
            cache_dir=tmp_path / "cache",
        )
        service = build_service(config, github=GitHubAdapter(config.github, min_write_interval=0, retries=0))
        async with TestClient(TestServer(service.app())) as client:
            ready = await client.get("/readyz")
            body = await ready.json()
        assert ready.status == 503
        assert body["checks"]["github"] and "401" in body["checks"]["github"]
        assert "x" * 36 not in json.dumps(body)
