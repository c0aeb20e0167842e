"""Drift reports as one GitHub issue per cluster (handlers/drift.py): the pure decision over hand-made reports,
the GitHub adapter's issue calls against the fake GitHub, and whole runs — a real git origin, the fake
Kubernetes API, the fake GitHub — driven by a clock the test controls."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, AsyncIterator

import git
import pytest

from bot.engine.livestate.drift import DriftItem, DriftKind, DriftReport
from bot.adapters.github import GitHubAdapter, GitHubAuth
from bot.engine.core.model import ObjectRef, TierId
from bot.service.app import build_service
from bot.service.settings import ServiceConfig
from bot.engine.chatops.settings import ClusterPolicy, DriftPolicy, RepoPolicy
from handlers.drift import LABEL, DriftRunner, DriftTarget, IssueMemory, Outage, plan_issue, reconcile_issue, with_memory
from tests.fakes.github import FakeGitHub
from tests.fakes.kube import FakeKube
from tests.gitrepo import EXAMPLE, init_repo
from tests.engine.test_drift import INCIDENT, NS, converge, example, find, ready  # noqa: F401  (example: the fixture)
from tests.adapters.test_kube import closed_port

REPO = "home-ops/cluster"
BOT_TOKEN = "ghs_" + "d" * 36
T0 = datetime(2026, 9, 6, 20, 36, 42, tzinfo=timezone.utc)
STUCK = DriftItem(DriftKind.TIER_STUCK, "tier-stuck:flux-system/apps", "stuck waiting on a dependency for 12h 0m", TierId(NS, "apps"),
                  since=datetime(2026, 9, 6, 8, 36, 42, tzinfo=timezone.utc))
FIELDS = DriftItem(DriftKind.FIELDS_DIFFER, "fields-differ:flux-system/apps:whoami_whoami_apps_Deployment", "git sets spec.replicas differently",
                   TierId(NS, "apps"), ObjectRef("apps/v1", "Deployment", "whoami", "whoami"), details=("spec.replicas: git sets `2`; live has `5`",))


def report(*items: DriftItem, at: datetime = T0, error: str | None = None) -> DriftReport:
    if error is not None:
        return DriftReport.failed("prod", error, at)
    return DriftReport("prod", at, "context prod-admin", "main", "a" * 40, tuple(items))


@dataclass
class Issue:
    number: int
    state: str
    title: str
    body: str


def apply(plan: Any, issue: Issue | None) -> Issue | None:
    """What GitHub would hold after the plan (for chaining pure steps)."""
    if plan.number is None and plan.body is None:
        return issue
    current = issue or Issue(plan.number or 1, "open", plan.title, "")
    body = plan.body if plan.body is not None else current.body
    state = "open" if plan.reopen else ("closed" if plan.close else current.state)
    return Issue(current.number, state, plan.title, body)


# --------------------------------------------------------------------------------------------- the decision


def test_open_edit_close_reopen() -> None:
    created = plan_issue(report(STUCK), [])
    assert (created.action, created.number, created.title) == ("created", None, "Drift report: prod")
    assert created.body.startswith("<!-- fluxwarden:drift:prod -->\n## Drift report: `prod`")
    assert "since 2026-09-06 08:36 UTC (12h 0m)" in created.body  # the cluster's own time
    issue = apply(created, None)

    later = T0 + timedelta(hours=1)
    edited = plan_issue(report(STUCK, FIELDS, at=later), [issue])
    assert (edited.action, edited.number, edited.comments, edited.close, edited.reopen) == ("updated", 1, (), False, False)
    assert "since 2026-09-06 21:36 UTC (first seen now)" in edited.body
    issue = apply(edited, issue)

    again = plan_issue(report(STUCK, FIELDS, at=later + timedelta(hours=2)), [issue])
    assert "since 2026-09-06 21:36 UTC (2h 0m, first seen)" in again.body  # first seen kept across runs
    assert "since 2026-09-06 08:36 UTC (15h 0m)" in again.body
    issue = apply(again, issue)

    closed = plan_issue(report(at=later + timedelta(hours=3)), [issue])
    assert (closed.action, closed.close, len(closed.comments)) == ("closed", True, 1)
    assert closed.comments[0].startswith("✅ `prod` matches `main` at `aaaaaaaaaaaa` again (2026-09-07 00:36 UTC): no drift. Closing")
    assert "No drift" in closed.body
    issue = apply(closed, issue)
    assert IssueMemory.parse(issue.body).first_seen == {}

    assert plan_issue(report(at=later + timedelta(hours=4)), [issue]).action == "nothing"  # clean and closed: quiet

    reopened = plan_issue(report(FIELDS, at=later + timedelta(hours=5)), [issue])
    assert (reopened.action, reopened.number, reopened.reopen) == ("reopened", 1, True)
    assert reopened.comments == ("Drift returned on `prod` (2026-09-07 02:36 UTC): 1 item. Reopening.",)
    assert "(first seen now)" in reopened.body  # a new episode: first seen afresh


def test_unchanged_report_edits_nothing() -> None:
    issue = apply(plan_issue(report(STUCK), []), None)
    assert plan_issue(report(STUCK), [issue]).action == "nothing"


def test_closed_by_a_human_while_drift_persists_is_reopened() -> None:
    issue = replace(apply(plan_issue(report(STUCK), []), None), state="closed")
    plan = plan_issue(report(STUCK, at=T0 + timedelta(hours=1)), [issue])
    assert plan.reopen and plan.comments[0].startswith("Reopening: this issue was closed while `prod` still drifts")


def test_an_outage_is_commented_once_and_its_end_once() -> None:
    issue = apply(plan_issue(report(STUCK), []), None)
    down = T0 + timedelta(hours=1)
    first = plan_issue(report(at=down, error="could not read cluster prod: cannot reach the API server"), [issue])
    assert first.action == "outage" and len(first.comments) == 1
    assert "could not run" in first.comments[0] and "This is not drift." in first.comments[0]
    assert "The report above is from the last successful check, 2026-09-06 20:36 UTC." in first.comments[0]
    assert "stuck waiting on a dependency" in first.body  # the last report stays; the failure is not drift
    assert IssueMemory.parse(first.body).outage == Outage(down, "could not read cluster prod: cannot reach the API server")
    issue = apply(first, issue)

    for hours in (2, 3):  # still down: nothing at all
        assert plan_issue(report(at=T0 + timedelta(hours=hours), error="timeout"), [issue]) == plan_issue(report(at=T0, error="x"), [issue])
        assert plan_issue(report(at=T0 + timedelta(hours=hours), error="timeout"), [issue]).action == "nothing"

    back = plan_issue(report(STUCK, at=T0 + timedelta(hours=4)), [issue])
    assert back.action == "updated" and len(back.comments) == 1
    assert back.comments[0].startswith("✅ The drift check of `prod` runs again (2026-09-07 00:36 UTC); it had failed since 2026-09-06 21:36 UTC (3h 0m)")
    assert IssueMemory.parse(back.body).outage is None


def test_an_outage_without_an_issue_opens_one_and_the_clean_run_closes_it() -> None:
    plan = plan_issue(report(error="could not read cluster prod: 401 Unauthorized"), [])
    assert plan.action == "created" and "could not be checked" in plan.body and "item(s)" not in plan.body
    issue = apply(plan, None)
    clean = plan_issue(report(at=T0 + timedelta(hours=1)), [issue])
    assert clean.close and [c[:30] for c in clean.comments] == ["✅ The drift check of `prod` ru", "✅ `prod` matches `main` at `aa"]


def test_an_outage_on_a_closed_issue_is_noted_there_without_reopening() -> None:
    issue = Issue(3, "closed", "Drift report: prod", with_memory("<!-- fluxwarden:drift:prod -->\nclean\n", IssueMemory(last_ok=T0)))
    plan = plan_issue(report(at=T0 + timedelta(hours=1), error="boom"), [issue])
    assert (plan.action, plan.reopen, len(plan.comments)) == ("outage", False, 1)
    issue = apply(plan, issue)
    ended = plan_issue(report(at=T0 + timedelta(hours=2)), [issue])
    assert (ended.action, ended.close, ended.reopen, len(ended.comments)) == ("outage-ended", False, False, 1)


def test_duplicates_are_closed_in_favour_of_the_oldest_open_issue() -> None:
    body = plan_issue(report(STUCK), []).body
    issues = [Issue(9, "open", "Drift report: prod", body), Issue(4, "open", "Drift report: prod", body), Issue(2, "closed", "x", body)]
    plan = plan_issue(report(STUCK, FIELDS), issues)
    assert (plan.number, plan.duplicates) == (4, (9,))


def test_memory_round_trip_cannot_close_the_html_comment() -> None:
    memory = IssueMemory({"wrong-owner:a--b:c_-->_x": T0}, Outage(T0, "evil --> <!-- text"), T0)
    block = memory.render()
    assert block.count("-->") == 1 and block.endswith(" -->") and "--" not in block[5:-4]
    assert IssueMemory.parse(f"head\n{block}\n") == memory
    assert IssueMemory.parse("no block") == IssueMemory()
    assert IssueMemory.parse("<!-- fluxwarden:drift-state {not json} -->") == IssueMemory()


def test_markdown_never_lets_cluster_text_open_html() -> None:
    item = replace(STUCK, message="Ready=False (x: <!-- sneaky --> <img src=x>)")
    body = plan_issue(report(item), []).body
    assert "<img" not in body and "<!-- sneaky" not in body and "&lt;img src=x&gt;" in body


# --------------------------------------------------------------------------------------------- the adapter


@pytest.fixture
def github() -> Any:
    fake = FakeGitHub()
    with fake.start_in_thread() as base_url:
        fake.add_user("fluxwarden-bot", token=BOT_TOKEN, type="Bot")
        fake.add_user("alice")
        fake.add_repo(REPO)
        adapter = GitHubAdapter(GitHubAuth(token=BOT_TOKEN, api_url=base_url), min_write_interval=0, backoff=0.01, bot_login="fluxwarden-bot")
        yield fake, adapter


def test_adapter_finds_only_the_bots_marked_issues(github: Any) -> None:
    fake, adapter = github
    created = adapter.create_issue(REPO, title="Drift report: prod", body="<!-- fluxwarden:drift:prod -->\nbody", labels=[LABEL])
    assert created.labels == (LABEL,) and created.state == "open" and created.author == "fluxwarden-bot"
    fake.add_issue(REPO, title="quoting the bot", body="<!-- fluxwarden:drift:prod -->\nby a human", author="alice", labels=[LABEL])
    adapter.create_issue(REPO, title="Drift report: dev", body="<!-- fluxwarden:drift:dev -->\n", labels=[LABEL])
    adapter.create_issue(REPO, title="unlabelled", body="<!-- fluxwarden:drift:prod -->\n")
    fake.add_pull(REPO, head_sha="a" * 40, base_sha="b" * 40, head_ref="x", author="fluxwarden-bot", labels=[LABEL])
    assert [i.number for i in adapter.find_issues(REPO, "fluxwarden:drift:prod", LABEL)] == [created.number]
    adapter.edit_issue(REPO, created.number, body="<!-- fluxwarden:drift:prod -->\nnew")
    adapter.close_issue(REPO, created.number, "closing")
    [found] = adapter.find_issues(REPO, "fluxwarden:drift:prod", LABEL)  # closed ones are found too
    assert (found.state, found.body) == ("closed", "<!-- fluxwarden:drift:prod -->\nnew")
    assert fake.issue(REPO, created.number).state_reason == "completed"
    adapter.reopen_issue(REPO, created.number, "back")
    assert fake.issue(REPO, created.number).state == "open"
    assert [c.body for c in fake.issue_comments(REPO, created.number)] == ["closing", "back"]
    info = adapter.repository(REPO)
    assert info.default_branch == "main" and info.full_name == REPO


def test_reconcile_issue_through_the_adapter(github: Any) -> None:
    fake, adapter = github
    outcomes = [reconcile_issue(adapter, REPO, r) for r in (
        report(STUCK),
        report(STUCK, FIELDS, at=T0 + timedelta(hours=1)),
        report(at=T0 + timedelta(hours=2)),
        report(at=T0 + timedelta(hours=3)),
        report(FIELDS, at=T0 + timedelta(hours=4)),
    )]
    assert [o.action for o in outcomes] == ["created", "updated", "closed", "nothing", "reopened"]
    assert len({o.number for o in outcomes}) == 1
    [issue] = [i for i in fake.issues.values() if not i.is_pull]
    assert issue.state == "open" and issue.labels == [LABEL] and issue.title == "Drift report: prod"
    assert [c.body[:12] for c in fake.issue_comments(REPO, issue.number)] == ["✅ `prod` mat", "Drift return"]


# --------------------------------------------------------------------------------------------- whole runs


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


@dataclass
class World:
    github: FakeGitHub
    kube: FakeKube
    runner: DriftRunner
    target: DriftTarget
    clock: Clock
    kubeconfig: Path
    revision: str

    def issues(self) -> list[Any]:
        return [i for i in self.github.issues.values() if not i.is_pull]

    def comments(self) -> list[str]:
        [issue] = self.issues()
        return [c.body for c in self.github.issue_comments(REPO, issue.number)]

    def unreachable(self, down: bool) -> None:
        server = f"http://127.0.0.1:{closed_port()}" if down else None
        self.kube.kubeconfig(self.kubeconfig, context="prod-admin", server=server)


@pytest.fixture
async def world(tmp_path: Path, example: Any) -> AsyncIterator[World]:
    work = tmp_path / "work"
    shutil.copytree(EXAMPLE, work)
    repo = init_repo(work)
    bare = tmp_path / "origin.git"
    git.Repo.init(bare, bare=True)
    repo.git.push(str(bare), "main:refs/heads/main")
    revision = repo.head.commit.hexsha
    kube = converge(FakeKube(), example, revision=f"main@sha1:{revision}")
    async with FakeGitHub() as fake, kube:
        fake.add_user("fluxwarden-bot", token=BOT_TOKEN, type="Bot")
        fake.add_repo(REPO, clone_url=str(bare))
        kubeconfig = kube.kubeconfig(tmp_path / "prod.kubeconfig", context="prod-admin")
        config = ServiceConfig(
            webhook_secret=b"s",
            github=GitHubAuth(token=BOT_TOKEN, api_url=fake.base_url),
            repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("prod", kubeconfig=str(kubeconfig), context="prod-admin", drift=DriftPolicy(interval_seconds=3600)),)),),
            cache_dir=tmp_path / "cache",
        )
        adapter = GitHubAdapter(config.github, min_write_interval=0, backoff=0.01, bot_login="fluxwarden-bot")
        service = build_service(config, github=adapter)
        clock = Clock(T0)
        runner = DriftRunner(service.bot, clock=clock)
        yield World(fake, kube, runner, DriftTarget(REPO, "prod"), clock, kubeconfig, revision)


async def test_runs_open_edit_close_reopen_one_issue(world: World) -> None:
    w = world
    assert (await w.runner.run(w.target)).issue.action == "nothing"  # converged: no issue at all
    assert w.issues() == []

    ready(w.kube, "apps", "False", "DependencyNotReady", "dependency 'flux-system/platform-config' is not ready", INCIDENT)
    w.clock.advance(hours=1)
    outcome = await w.runner.run(w.target)
    assert outcome.issue.action == "created"
    [issue] = w.issues()
    assert issue.title == "Drift report: prod" and issue.labels == [LABEL] and issue.user == "fluxwarden-bot"
    assert issue.body.startswith("<!-- fluxwarden:drift:prod -->")
    assert f"differs from `main` at `{w.revision[:12]}`" in issue.body
    assert "stuck waiting on a dependency for 13h 0m" in issue.body

    find(w.kube, "Deployment", "whoami", "whoami")["spec"]["replicas"] = 5
    w.clock.advance(hours=1)
    assert (await w.runner.run(w.target)).issue.action == "updated"
    first_seen = IssueMemory.parse(w.issues()[0].body).first_seen
    w.clock.advance(hours=1)
    assert (await w.runner.run(w.target)).issue.action == "updated"
    [issue] = w.issues()
    assert IssueMemory.parse(issue.body).first_seen == first_seen
    assert "spec.replicas: git sets `2`; live has `5` — _since 2026-09-06 22:36 UTC (1h 0m, first seen)_" not in issue.body  # details sit under the item
    assert "_since 2026-09-06 22:36 UTC (1h 0m, first seen)_" in issue.body

    ready(w.kube, "apps", "True", "ReconciliationSucceeded", "Applied revision", INCIDENT)
    find(w.kube, "Deployment", "whoami", "whoami")["spec"]["replicas"] = 2
    w.clock.advance(hours=1)
    assert (await w.runner.run(w.target)).issue.action == "closed"
    assert w.issues()[0].state == "closed"

    find(w.kube, "Service", "whoami", "whoami")["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] = "apps-vms"
    w.clock.advance(hours=1)
    assert (await w.runner.run(w.target)).issue.action == "reopened"
    [issue] = w.issues()  # never a second issue
    assert issue.state == "open" and "owner" in issue.body
    assert [c[:14] for c in w.comments()] == ["✅ `prod` match", "Drift returned"]
    assert {m for m, _, _ in w.kube.requests} == {"GET"}


async def test_unreachable_cluster_is_commented_once_per_outage(world: World) -> None:
    w = world
    ready(w.kube, "apps", "False", "DependencyNotReady", "dependency 'flux-system/platform-config' is not ready", INCIDENT)
    await w.runner.run(w.target)
    [issue] = w.issues()
    body = issue.body

    w.unreachable(True)
    for _ in range(3):
        w.clock.advance(hours=1)
        outcome = await w.runner.run(w.target)
        assert outcome.report.error is not None and outcome.report.items == ()  # not reported as drift
    comments = w.comments()
    assert len(comments) == 1  # once per outage, not once per run
    assert comments[0].startswith("⚠️ **The drift check of `prod` could not run** (2026-09-06 21:36 UTC)")
    assert "cannot reach the API server" in comments[0] and "This is not drift." in comments[0]
    [issue] = w.issues()
    assert issue.state == "open"
    assert issue.body.split("<!-- fluxwarden:drift-state")[0] == body.split("<!-- fluxwarden:drift-state")[0]  # the last report stands

    w.unreachable(False)
    w.clock.advance(hours=1)
    await w.runner.run(w.target)
    comments = w.comments()
    assert len(comments) == 2
    assert comments[1].startswith("✅ The drift check of `prod` runs again (2026-09-07 00:36 UTC); it had failed since 2026-09-06 21:36 UTC (3h 0m)")

    w.unreachable(True)  # a second outage is a second comment
    w.clock.advance(hours=1)
    await w.runner.run(w.target)
    w.clock.advance(hours=1)
    await w.runner.run(w.target)
    assert len(w.comments()) == 3 and len(w.issues()) == 1


async def test_a_default_branch_that_cannot_be_fetched_is_an_outage_too(world: World, tmp_path: Path) -> None:
    w = world
    w.github.repos[REPO.lower()].clone_url = str(tmp_path / "gone.git")
    outcome = await w.runner.run(w.target)
    assert outcome.report.error.startswith("could not fetch the default branch")
    [issue] = w.issues()  # nowhere else to say it: the issue is opened with the failure, not drift
    assert "could not be checked" in issue.body and "item(s)" not in issue.body
