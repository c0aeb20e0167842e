"""A repository allowlisted by FLUXWARDEN_REPOS alone (no per-repo settings): the bot finds its clusters as `check` does.

The service config is read from the environment by the real loader, as `fluxwarden serve` reads it; the
clusters come from the PR's base branch (`clusters/<name>`, or its `.fluxwarden.yaml`), with the default
permission (write) and no live checks.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

from aiohttp.test_utils import TestClient, TestServer

from bot.adapters.github import GitHubAdapter
from bot.service.app import build_service
from bot.service.settings import load_service_config
from tests.fakes.github import FakeGitHub
from tests.fluxrepo import dump, ks, kustomization
from tests.golden import assert_golden
from tests.hardening.harness import BOT, BOT_TOKEN, REPO, SECRET, Harness, Origin, comment_payload, open_pull, pr_payload


@asynccontextmanager
async def serve_from_env(tmp: Path, origin: Origin, fake: FakeGitHub) -> AsyncIterator[Harness]:
    env = {
        "FLUXWARDEN_WEBHOOK_SECRET": SECRET.decode(),
        "FLUXWARDEN_GITHUB_TOKEN": BOT_TOKEN,
        "FLUXWARDEN_GITHUB_API_URL": fake.base_url,
        "FLUXWARDEN_REPOS": REPO,
        "FLUXWARDEN_CACHE_DIR": str(tmp / "cache"),
    }
    config = load_service_config(None, env)
    assert config.repo(REPO) is not None and config.repo(REPO).clusters == ()  # no per-repo settings
    service = build_service(config, github=GitHubAdapter(config.github, min_write_interval=0, backoff=0.05, bot_login=BOT))
    async with TestClient(TestServer(service.app(), host="127.0.0.1")) as client:
        yield Harness(client, fake, service, origin)


def _local(payload: dict[str, Any], origin: Origin) -> dict[str, Any]:
    """The delivery with the repository's clone URL pointing at the local origin (no network)."""
    payload["repository"]["clone_url"] = str(origin.bare)
    return payload


def _replies(fake: FakeGitHub, number: int) -> list[str]:
    return [c.body for c in fake.issue_comments(REPO, number) if c.user == BOT and "fluxwarden:reply:" in c.body]


async def test_precheck_finds_the_clusters_of_the_base_branch(tmp_path: Path, origin: Origin, fake: FakeGitHub) -> None:
    # The base has `clusters/prod` and a second cluster `clusters/staging`.
    origin.repo.git.checkout("main")
    (origin.work / "clusters/staging").mkdir(parents=True)
    (origin.work / "clusters/staging/kustomization.yaml").write_text(kustomization("apps.yaml"))
    (origin.work / "clusters/staging/apps.yaml").write_text(dump(ks("apps", "./apps")))
    origin.repo.git.add(A=True)
    origin.repo.index.commit("staging")
    origin.main = origin.repo.head.commit.hexsha
    origin.repo.git.push(str(origin.bare), "+main:refs/heads/main")
    # A PR that adds a cluster `canary` does not make it one: the base decides.
    head = origin.pull(1, {"clusters/canary/kustomization.yaml": kustomization("apps.yaml"), "clusters/canary/apps.yaml": dump(ks("apps", "./apps"))})
    open_pull(fake, origin, 1, head)
    async with serve_from_env(tmp_path, origin, fake) as h:
        made = fake.add_comment(REPO, 1, "/precheck staging", user="bob")
        await h.deliver("issue_comment", _local(comment_payload(1, made.id, "/precheck staging", user="bob"), origin))
        await h.settle(timeout=120)
        assert _replies(fake, 1) == []  # accepted: no reply, a run
        assert h.states(head, "fluxwarden/staging") == ["pending", "success"]
        [comment] = h.comments(1, "fluxwarden:precheck:staging")
        assert "staging" in comment.body

        made = fake.add_comment(REPO, 1, "/precheck canary", user="alice")
        await h.deliver("issue_comment", _local(comment_payload(1, made.id, "/precheck canary", user="alice"), origin))
        await h.settle(timeout=60)
        [reply] = [r for r in _replies(fake, 1) if f"fluxwarden:reply:{made.id}" in r]
        assert "unknown cluster `canary`; known: `prod`, `staging`" in reply

        # Every kind of line a comment may hold, in one reply (golden: tests/golden/comments/reply-*.md).
        body = "/precheck canary prod\n/precheck bad/name\n/fluxwarden nope\n/fluxwarden help now\n/fluxwarden\n/fluxwarden help"
        made = fake.add_comment(REPO, 1, body, user="alice")
        await h.deliver("issue_comment", _local(comment_payload(1, made.id, body, user="alice"), origin))
        await h.settle(timeout=60)
        [reply] = [r for r in _replies(fake, 1) if f"fluxwarden:reply:{made.id}" in r]
        assert_golden("comments/reply-errors-and-help.md", reply.replace(str(made.id), "ID"))

        # A PR event runs every cluster of the base automatically.
        await h.deliver("pull_request", _local(pr_payload(1, head, origin.main), origin))
        await h.settle(timeout=120)
        assert h.states(head, "fluxwarden/prod") == ["pending", "success"]
        assert h.states(head, "fluxwarden/canary") == []


async def test_permission_is_said_before_anything_about_the_command(tmp_path: Path, origin: Origin, fake: FakeGitHub) -> None:
    open_pull(fake, origin, 1, origin.main)
    async with serve_from_env(tmp_path, origin, fake) as h:
        for body in ("/precheck staging", "/precheck prod", "/precheck bad/name"):
            made = fake.add_comment(REPO, 1, body, user="mallory")  # read permission
            await h.deliver("issue_comment", _local(comment_payload(1, made.id, body, user="mallory"), origin))
            await h.settle(timeout=60)
            [reply] = [r for r in _replies(fake, 1) if f"fluxwarden:reply:{made.id}" in r]
            assert reply.endswith("@mallory\n\nyou have read permission on this repository; `/precheck` needs write.\n"), reply
            assert_golden("comments/reply-permission.md", reply.replace(str(made.id), "ID"))
        assert h.states(origin.main, "fluxwarden/prod") == []
        # Someone with no role on the repository (a private one) hears that, and nothing about the command.
        fake.set_permission(REPO, "eve", "none")
        made = fake.add_comment(REPO, 1, "/fluxwarden help", user="eve")
        await h.deliver("issue_comment", _local(comment_payload(1, made.id, "/fluxwarden help", user="eve"), origin))
        await h.settle(timeout=60)
        [reply] = [r for r in _replies(fake, 1) if f"fluxwarden:reply:{made.id}" in r]
        assert reply.endswith("@eve\n\nyou have no permission on this repository; `/fluxwarden` needs read.\n"), reply
        # `/fluxwarden help` needs read: mallory gets it, with the clusters' default permission.
        made = fake.add_comment(REPO, 1, "/fluxwarden help", user="mallory")
        await h.deliver("issue_comment", _local(comment_payload(1, made.id, "/fluxwarden help", user="mallory"), origin))
        await h.settle(timeout=60)
        [reply] = [r for r in _replies(fake, 1) if f"fluxwarden:reply:{made.id}" in r]
        assert "### Fluxwarden commands" in reply and "write or higher" in reply


async def test_a_run_left_pending_on_a_found_cluster_is_rerun_at_start(tmp_path: Path, origin: Origin, fake: FakeGitHub) -> None:
    head = origin.pull(1, {"apps/app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: default}\ndata: {greeting: hi}\n"})
    open_pull(fake, origin, 1, head)
    fake.add_status(REPO, head, state="pending", context="fluxwarden/prod", description="precheck of prod running", creator=BOT)  # died mid-run
    async with serve_from_env(tmp_path, origin, fake) as h:
        await h.settle(timeout=120)
        assert h.states(head, "fluxwarden/prod")[-1] == "success"


async def test_an_unreadable_base_configuration_is_said_not_guessed(tmp_path: Path, origin: Origin, fake: FakeGitHub) -> None:
    (origin.work / ".fluxwarden.yaml").write_text("no_such_key: 1\n")
    origin.repo.git.add(A=True)
    origin.repo.index.commit("a bad configuration")
    origin.main = origin.repo.head.commit.hexsha
    origin.repo.git.push(str(origin.bare), "+main:refs/heads/main")
    head = origin.pull(1, {".fluxwarden.yaml": "clusters:\n  prod: {path: clusters/prod}\n"})  # the PR cannot repair it for itself
    open_pull(fake, origin, 1, head)
    async with serve_from_env(tmp_path, origin, fake) as h:
        await h.deliver("pull_request", _local(pr_payload(1, head, origin.main), origin))
        await h.settle(timeout=60)
        assert h.states(head, "fluxwarden/prod") == []
        made = fake.add_comment(REPO, 1, "/precheck prod", user="bob")
        await h.deliver("issue_comment", _local(comment_payload(1, made.id, "/precheck prod", user="bob"), origin))
        await h.settle(timeout=60)
        [reply] = _replies(fake, 1)
        assert "cannot read this repository's clusters from the base branch: .fluxwarden.yaml: unknown key(s) no_such_key" in reply, reply
        assert h.states(head, "fluxwarden/prod") == []
