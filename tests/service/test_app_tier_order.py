"""The tier order follow-up PR end to end: signed push / comment deliveries in, git pushes to a real bare origin,
PRs and comments on the fake GitHub over real PyGithub calls.

The origin's `main` starts as the seed's pre-fix state (the list is right); tests then push commits to it (the
CDI split, a reordering, a human's fix...) and deliver the matching `push` event, as GitHub would.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import git
import pytest
from aiohttp.test_utils import TestClient, TestServer

import bot.adapters.git as gitrepo
from bot.engine.core.errors import ConfigError
from bot.adapters.github import GitHubAdapter, GitHubAuth
from bot.adapters.git import Mirrors
from bot.service.app import build_service
from bot.service.settings import ServiceConfig, load_service_config
from bot.engine.chatops.settings import ClusterPolicy, GitIdentity, RepoPolicy
from bot.engine.ordering.tierfix import BRANCH
from bot.engine.ordering.tierorder import read_tier_order
from tests.fakes.github import FakeGitHub
from tests.gitrepo import EXAMPLE, commit_all, pre_fix
from tests.golden import assert_golden
from tests.fakes.service import BOT_TOKEN, PAYLOADS, REPO, SECRET
from tests.fakes.service import Harness as BaseHarness
from tests.fakes.service import Origin as BaseOrigin
from tests.service.test_cli_tier_order import KUSTOMIZATION, disagree

SCRIPT = "bootstrap/standup.sh"
IDENTITY = GitIdentity("Fluxwarden Test Bot", "bot@fluxwarden.test")


class LiveBranches(dict):  # type: ignore[type-arg]
    """The fake's `repo.branches`, read from the bare origin (so a pushed branch can head a new PR)."""

    def __init__(self, bare: Path) -> None:
        super().__init__()
        self.bare = bare

    def _sha(self, name: str) -> str | None:
        try:
            return git.Repo(self.bare).git.rev_parse("--verify", "-q", f"refs/heads/{name}")
        except git.GitCommandError:
            return None

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return self._sha(name) or default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._sha(name) is not None

    def __getitem__(self, name: str) -> str:
        sha = self._sha(name)
        if sha is None:
            raise KeyError(name)
        return sha


class Origin(BaseOrigin):
    """A bare origin whose main starts at the pre-fix example; `commit` pushes more to main."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, _pre_fix_example)

    def push(self) -> str:
        self.publish("main", "refs/heads/main")
        return self.repo.head.commit.hexsha

    def commit(self, message: str, edit: Callable[[Path], None]) -> str:  # type: ignore[override]
        edit(self.work)
        commit_all(self.repo, message)
        self.main = self.push()
        return self.main

    def cdi_split(self) -> str:
        """The seed's commit: StorageProfiles in their own tier, apps-vms depending on it; TIER_ORDER untouched."""

        def edit(root: Path) -> None:
            for rel in ("platform-config", "platform-config-cdi"):
                shutil.rmtree(root / rel, ignore_errors=True)
                shutil.copytree(EXAMPLE / rel, root / rel)
            for name in ("kustomization.yaml", "apps-vms.yaml", "platform-config-cdi.yaml"):
                shutil.copy(EXAMPLE / "clusters/base" / name, root / "clusters/base" / name)

        return self.commit("fix(gitops): CDI cold-start deadlock repaired IN THE GRAPH", edit)

    def branch(self, name: str = BRANCH) -> str | None:
        return LiveBranches(self.bare).get(name)

    def show(self, rev: str, path: str = SCRIPT) -> str:
        return self.origin.git.show(f"{rev}:{path}")


def _pre_fix_example(work: Path) -> None:
    shutil.copytree(EXAMPLE, work)
    pre_fix(work)


def add_tier_line(root: Path, line: str = "  platform-config-cdi\n") -> None:
    script = root / SCRIPT
    text = script.read_text()
    anchor = "  platform-config   # CDI + KubeVirt CRs, StorageClasses, ClusterIssuer\n"
    script.write_text(text.replace(anchor, anchor + line))


def add_monitoring(root: Path) -> None:
    """A new tier on top of platform, in every cluster."""
    (root / "monitoring").mkdir()
    (root / "monitoring/kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - namespace.yaml\n"
    )
    (root / "monitoring/namespace.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: monitoring\n")
    (root / "clusters/base/monitoring.yaml").write_text(KUSTOMIZATION.format(name="monitoring", path="./monitoring", dep="platform"))
    kfile = root / "clusters/base/kustomization.yaml"
    kfile.write_text(kfile.read_text().rstrip("\n") + "\n  - monitoring.yaml\n")


class Harness(BaseHarness):
    """Deliveries settle before they return; pushes to main and commands in comments, and the bot's PRs."""

    async def deliver(self, event: str, data: dict[str, Any], **kwargs: Any) -> Any:  # type: ignore[override]
        response = await super().deliver(event, data, **kwargs)
        await self.settle()
        return response

    async def push(self, after: str | None = None, before: str = "1" * 40, ref: str = "refs/heads/main") -> Any:
        data = json.loads((PAYLOADS / "push.main.json").read_text())
        after = after or self.origin.main
        data.update(ref=ref, before=before, after=after)
        data["commits"] = [{**(data["commits"][0] if data["commits"] else {}), "id": after}]
        return await self.deliver("push", data)

    async def command(self, number: int, body: str = "/fluxwarden fix-tier-order", user: str = "bob", *, issue: bool = True) -> int:
        made = self.fake.add_comment(REPO, number, body, user=user)
        data = json.loads((PAYLOADS / ("issue_comment.created.issue.json" if issue else "issue_comment.created.pr.json")).read_text())
        data["issue"]["number"] = number
        data["comment"].update({"id": made.id, "body": body})
        data["comment"]["user"]["login"] = user
        data["sender"]["login"] = user
        await self.deliver("issue_comment", data)
        return made.id

    def pulls(self, state: str | None = None) -> list[Any]:
        with self.fake.lock:
            found = [p for (r, _), p in self.fake.pulls.items() if r == REPO.lower() and p.head_ref == BRANCH]
        return [p for p in found if state is None or p.state == state]

    def comments_on(self, number: int) -> list[str]:
        return [c.body for c in self.fake.issue_comments(REPO, number)]


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    origin = Origin(tmp_path)
    async with FakeGitHub() as fake:
        fake.add_user("fluxwarden-bot", token=BOT_TOKEN, type="Bot")
        repo = fake.add_repo(REPO, clone_url=str(origin.bare))
        repo.branches = LiveBranches(origin.bare)
        repo.next_number = 40
        for login, role in (("bob", "write"), ("mallory", "read")):
            fake.set_permission(REPO, login, role)
        config = ServiceConfig(
            webhook_secret=SECRET,
            github=GitHubAuth(token=BOT_TOKEN, api_url=fake.base_url),
            repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("dev"), ClusterPolicy("prod")), clone_url=str(origin.bare)),),
            cache_dir=tmp_path / "cache",
            git_identity=IDENTITY,
        )
        adapter = GitHubAdapter(config.github, min_write_interval=0, backoff=0.05, bot_login="fluxwarden-bot")
        service = build_service(config, github=adapter)
        async with TestClient(TestServer(service.app())) as client:
            yield Harness(client, fake, service, origin, prefix="tier-delivery")


def order_at(origin: Origin, rev: str) -> list[str]:
    return list(read_tier_order(origin.show(rev), "TIER_ORDER").names)


def diff_lines(origin: Origin, a: str, b: str) -> list[str]:
    out = origin.origin.git.diff(a, b, "--unified=0")
    return [line for line in out.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


# --------------------------------------------------------------------------------------------


def _masked(text: str, comment_id: int) -> str:
    """A reply without what changes from run to run (the comment id, commit SHAs)."""
    return re.sub(r"\b[0-9a-f]{40}\b|\b[0-9a-f]{12}\b", "<sha>", text.replace(str(comment_id), "ID") if comment_id else text)


async def test_push_that_makes_the_order_stale_opens_a_pr(harness: Harness) -> None:
    h = harness
    stale = h.origin.cdi_split()
    response = await h.push(stale)
    assert response.status == 202

    # The branch: one commit on main by the bot's identity, touching one line of one file.
    head = h.origin.branch()
    assert head is not None
    commit = h.origin.origin.commit(head)
    assert [p.hexsha for p in commit.parents] == [stale]
    assert (commit.author.name, commit.author.email) == (IDENTITY.name, IDENTITY.email)
    assert (commit.committer.name, commit.committer.email) == (IDENTITY.name, IDENTITY.email)
    assert h.origin.origin.git.diff("--name-only", stale, head).split() == [SCRIPT]
    assert diff_lines(h.origin, stale, head) == ["+  platform-config-cdi"]
    assert order_at(h.origin, head) == ["platform", "platform-config", "platform-config-cdi", "apps", "apps-vms"]
    assert commit.tree[SCRIPT].mode == h.origin.origin.commit(stale).tree[SCRIPT].mode  # executable bit kept
    message = commit.message
    assert message.startswith("fix(bootstrap): add platform-config-cdi to TIER_ORDER\n")
    assert "platform-config-cdi dependsOn platform-config (dev, prod)" in message
    assert "apps-vms dependsOn platform-config-cdi (dev, prod)" in message
    assert f"Made stale by {stale} (fix(gitops): CDI cold-start deadlock repaired IN THE GRAPH)." in message

    # The PR: created once by the bot, from the branch into main, explaining the graph change.
    [created] = h.fake.find_effects("POST", r"/repos/home-ops/cluster/pulls$")
    assert created.actor == "fluxwarden-bot"
    assert (created.json["head"], created.json["base"]) == (BRANCH, "main")
    assert created.json["title"] == "Tier order: add platform-config-cdi to TIER_ORDER (bootstrap/standup.sh)"
    body = created.json["body"]
    assert f"stale-since={stale}" in body
    assert f"https://github.com/{REPO}/commit/{stale}" in body
    assert "new tier `platform-config-cdi` (dependsOn `platform-config`) in dev, prod" in body
    assert "`apps-vms` now dependsOn `platform-config-cdi` in dev, prod" in body
    assert "adds `platform-config-cdi` right after `platform-config`" in body
    [pull] = h.pulls("open")
    assert pull.author == "fluxwarden-bot" and pull.head_sha == head


async def test_push_when_the_order_is_already_right_does_nothing(harness: Harness) -> None:
    h = harness
    await h.push()  # the pre-fix main: the list matches the graph
    h.origin.cdi_split()  # split the tier and list it in the same push
    await h.push(h.origin.commit("list platform-config-cdi", add_tier_line))
    assert h.fake.effects == []
    assert h.origin.branch() is None


async def test_wrong_position_is_fixed_by_moving_the_entry(harness: Harness) -> None:
    h = harness
    apps = "  apps              # plain workloads\n"

    def reorder(root: Path) -> None:
        script = root / SCRIPT
        script.write_text(script.read_text().replace(apps, "").replace("TIER_ORDER=(\n", "TIER_ORDER=(\n" + apps))

    bad = h.origin.commit("bootstrap: apps first", reorder)
    await h.push(bad)
    head = h.origin.branch()
    assert head is not None
    assert order_at(h.origin, head) == ["platform", "platform-config", "apps", "apps-vms"]
    assert diff_lines(h.origin, bad, head) == ["-" + apps.rstrip("\n"), "+" + apps.rstrip("\n")]
    [created] = h.fake.find_effects("POST", r"/pulls$")
    assert created.json["title"] == "Tier order: move apps in TIER_ORDER (bootstrap/standup.sh)"
    assert "`bootstrap/standup.sh` itself was edited" in created.json["body"]
    assert "apps is listed before platform-config, which it depends on" in created.json["body"]
    assert f"stale-since={bad}" in created.json["body"]


async def test_existing_pr_is_updated_by_force_push_never_duplicated(harness: Harness) -> None:
    h = harness
    stale = h.origin.cdi_split()
    await h.push(stale)
    first = h.origin.branch()
    [pull] = h.pulls("open")

    # A redelivered or repeated push changes nothing: no push, no edit, no second PR.
    await h.push(stale)
    assert h.origin.branch() == first
    assert len(h.fake.find_effects("POST", r"/pulls$")) == 1
    assert h.fake.find_effects("PATCH", rf"/pulls/{pull.number}$") == []

    # The graph changes again: the same PR is updated, its branch force-pushed onto the new main.
    newer = h.origin.commit("platform: monitoring tier", add_monitoring)
    await h.push(newer)
    second = h.origin.branch()
    assert second not in (None, first)
    commit = h.origin.origin.commit(second)
    assert [p.hexsha for p in commit.parents] == [newer]
    assert not h.origin.origin.is_ancestor(first, second)  # rewritten, not stacked
    assert order_at(h.origin, second) == ["platform", "monitoring", "platform-config", "platform-config-cdi", "apps", "apps-vms"]
    assert sorted(diff_lines(h.origin, newer, second)) == ["+  monitoring", "+  platform-config-cdi"]
    assert len(h.fake.find_effects("POST", r"/pulls$")) == 1
    [edit] = h.fake.find_effects("PATCH", rf"/pulls/{pull.number}$")
    assert "add monitoring and platform-config-cdi to TIER_ORDER" in edit.json["title"]
    assert f"stale-since={stale}" in edit.json["body"]  # still the commit that first made it stale
    assert len(h.pulls("open")) == 1


async def test_pr_is_closed_with_a_comment_when_the_order_is_fixed_another_way(harness: Harness) -> None:
    h = harness
    await h.push(h.origin.cdi_split())
    [pull] = h.pulls("open")
    assert h.origin.branch() is not None

    fixed = h.origin.commit("bootstrap: list platform-config-cdi (by hand)", add_tier_line)
    await h.push(fixed)
    assert h.fake.pull(REPO, pull.number).state == "closed"
    [closing] = h.fake.find_effects("PATCH", rf"/pulls/{pull.number}$")
    assert closing.json == {"state": "closed"}
    [comment] = h.comments_on(pull.number)
    assert comment.startswith("Closing: the tier order no longer needs this PR.")
    assert "already in dependency order for `dev`, `prod`" in comment and fixed in comment
    assert_golden("comments/tier-order-closed-by-push.md", _masked(comment, 0) + "\n")
    assert h.origin.branch() is None  # the branch is deleted too
    # And nothing more happens on the next push.
    before = len(h.fake.effects)
    await h.push(fixed)
    assert len(h.fake.effects) == before


async def test_clusters_that_disagree_get_no_pr_but_an_explanation(harness: Harness) -> None:
    h = harness
    sha = h.origin.commit("prod: apps before platform-config", disagree)
    await h.push(sha)
    assert h.fake.find_effects("POST", r"/pulls$") == []
    assert h.origin.branch() is None
    [status] = h.fake.statuses_for(REPO, sha)
    assert (status.context, status.state) == ("fluxwarden/tier-order", "failure")
    assert status.description.startswith("no single tier order fits every cluster (dev, prod)")

    # Asked for explicitly, the reply explains which edges of which clusters conflict.
    issue = h.fake.add_issue(REPO, title="TIER_ORDER", author="bob")
    comment_id = await h.command(issue.number)
    [reply] = [b for b in h.comments_on(issue.number) if b.startswith(f"<!-- fluxwarden:fix-tier-order:{comment_id} -->")]
    assert "No single tier order fits every cluster (dev, prod)" in reply
    assert "- `apps` dependsOn `platform-config` (dev)" in reply
    assert "- `platform-config` dependsOn `apps` (prod)" in reply
    assert_golden("comments/fix-tier-order-conflict.md", _masked(reply, comment_id))
    assert h.fake.find_effects("POST", r"/pulls$") == []


async def test_fix_tier_order_command_in_an_issue_opens_the_pr(harness: Harness) -> None:
    h = harness
    h.origin.cdi_split()  # pushed without a delivery: the command finds it on its own
    issue = h.fake.add_issue(REPO, title="bootstrap/standup.sh TIER_ORDER misses platform-config-cdi", author="bob")
    comment_id = await h.command(issue.number)
    [pull] = h.pulls("open")
    [reply] = h.comments_on(issue.number)[1:]
    assert f"Opened #{pull.number}: add platform-config-cdi to TIER_ORDER." in reply
    assert_golden("comments/fix-tier-order-opened.md", _masked(reply, comment_id))
    assert [r.content for r in h.fake.reactions_for(comment_id)] == ["eyes"]
    assert order_at(h.origin, h.origin.branch()) == ["platform", "platform-config", "platform-config-cdi", "apps", "apps-vms"]

    # Again, on the PR itself: nothing to change, and it says so.
    comment_id = await h.command(pull.number, issue=False)
    [reply] = [b for b in h.comments_on(pull.number) if f"fix-tier-order:{comment_id}" in b]
    assert f"#{pull.number} already has this fix" in reply
    assert_golden("comments/fix-tier-order-unchanged.md", _masked(reply, comment_id))
    assert len(h.fake.find_effects("POST", r"/pulls$")) == 1


async def test_fix_tier_order_command_when_already_right_and_without_permission(harness: Harness) -> None:
    h = harness
    issue = h.fake.add_issue(REPO, title="is the order right?", author="bob")
    comment_id = await h.command(issue.number)
    [reply] = h.comments_on(issue.number)[1:]
    assert f"fix-tier-order:{comment_id}" in reply
    assert "`TIER_ORDER` in `bootstrap/standup.sh` is already in dependency order for `dev`, `prod`" in reply
    assert_golden("comments/fix-tier-order-in-order.md", _masked(reply, comment_id))

    h.origin.cdi_split()
    comment_id = await h.command(issue.number, user="mallory")
    [reply] = [b for b in h.comments_on(issue.number) if f"fluxwarden:reply:{comment_id}" in b]
    assert "you have read permission on this repository; `/fluxwarden fix-tier-order` needs write." in reply
    assert_golden("comments/fix-tier-order-permission.md", _masked(reply, comment_id))
    assert h.pulls() == [] and h.origin.branch() is None

    # Other commands in an issue: /precheck is for PRs; a comment without fix-tier-order is not read at all.
    comment_id = await h.command(issue.number, body="/fluxwarden fix-tier-order\n/precheck prod")
    [reply] = [b for b in h.comments_on(issue.number) if f"fluxwarden:reply:{comment_id}" in b]
    assert "`/precheck` works on pull requests only." in reply
    before = len(h.fake.effects)
    await h.command(issue.number, body="/fluxwarden help")
    assert len(h.fake.effects) == before


async def test_pushes_that_do_not_concern_the_default_branch_are_ignored(harness: Harness) -> None:
    h = harness
    h.origin.cdi_split()
    await h.push(ref="refs/heads/feature")
    await h.push(ref=f"refs/heads/{BRANCH}")
    await h.push(after="0" * 40)
    assert h.fake.effects == [] and h.origin.branch() is None


async def test_the_token_never_reaches_argv_urls_or_logs(harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    h = harness
    calls: list[tuple[list[str], dict[str, str]]] = []
    real = gitrepo._run

    def spy(argv: list[str], env: dict[str, str], **kwargs: Any) -> Any:
        calls.append((list(argv), dict(env)))
        return real(argv, env, **kwargs)

    monkeypatch.setattr(gitrepo, "_run", spy)
    caplog.set_level(logging.DEBUG)
    await h.push(h.origin.cdi_split())
    pushes = [(argv, env) for argv, env in calls if "push" in argv]
    assert pushes, "the fix was pushed through the git adapter"
    header = "Authorization: Basic " + base64.b64encode(f"x-access-token:{BOT_TOKEN}".encode()).decode()
    for _, env in pushes:
        assert header in env.values()
    for argv, _ in calls:
        assert not any(BOT_TOKEN in a or "x-access-token" in a for a in argv)
        assert not any("@" in a and "://" in a for a in argv)
    assert BOT_TOKEN not in caplog.text
    assert h.origin.branch() is not None


# --------------------------------------------------------------------------------------------
# The git adapter's branch operations on their own


def test_commit_file_reuses_an_identical_commit_and_delete_is_idempotent(tmp_path: Path) -> None:
    origin = Origin(tmp_path)
    mirrors = Mirrors(tmp_path / "mirrors")
    url = str(origin.bare)
    heads = mirrors.branch_heads(url, ["main", BRANCH])
    assert heads.heads == {"main": origin.main, BRANCH: None}
    text = (origin.work / SCRIPT).read_text().replace("  apps ", "  monitoring\n  apps ", 1)
    author = (IDENTITY.name, IDENTITY.email)
    sha = mirrors.commit_file(url, origin.main, SCRIPT, text.encode(), "one\n", author)
    assert mirrors.commit_file(url, origin.main, SCRIPT, text.encode(), "two\n", author, reuse=sha) == sha
    other = mirrors.commit_file(url, origin.main, SCRIPT, (text + "# more\n").encode(), "three\n", author, reuse=sha)
    assert other != sha
    mirrors.push_branch(url, sha, BRANCH)
    assert origin.branch() == sha
    mirrors.push_branch(url, other, BRANCH)  # not a fast-forward: forced
    assert origin.branch() == other
    assert mirrors.branch_heads(url, ["main", BRANCH]).heads[BRANCH] == other
    mirrors.delete_branch(url, BRANCH)
    mirrors.delete_branch(url, BRANCH)
    assert origin.branch() is None
    with pytest.raises(gitrepo.GitError, match="is not a file"):
        mirrors.commit_file(url, origin.main, "no/such/file", b"x", "m\n", author)


def test_git_identity_is_configurable(tmp_path: Path) -> None:
    secret = {"FLUXWARDEN_WEBHOOK_SECRET": "s", "FLUXWARDEN_GITHUB_TOKEN": BOT_TOKEN}
    assert load_service_config(None, secret).git_identity == GitIdentity()
    path = tmp_path / "config.yaml"
    path.write_text("git: {name: Home Ops Bot, email: bot@home.example}\n")
    assert load_service_config(path, secret).git_identity == GitIdentity("Home Ops Bot", "bot@home.example")
    env = {**secret, "FLUXWARDEN_GIT_NAME": "Env Bot", "FLUXWARDEN_GIT_EMAIL": "env@bot.example"}
    assert load_service_config(path, env).git_identity == GitIdentity("Env Bot", "env@bot.example")
    path.write_text("git: {name: 'Evil <root@x>', email: a@b}\n")
    with pytest.raises(ConfigError, match="git.name"):
        load_service_config(path, secret)
