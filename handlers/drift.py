"""Scheduled drift reports as one GitHub issue per cluster (the job bot/adapters/scheduler.py runs).

Each run fetches the default branch into the mirror, renders the cluster, reads it live (read-only),
builds the drift report (bot/engine/livestate/drift.py) and makes the repository's issue say so:

* one issue per cluster — title "Drift report: <cluster>", label `fluxwarden:drift`, the hidden marker
  `<!-- fluxwarden:drift:<cluster> -->` as the body's first line — found again by label, marker and
  author (the bot), never a new issue per run;
* created when drift appears, its body edited in place while drift lasts, closed with a short comment
  when the cluster is clean, reopened (with a comment) when drift returns or persists after someone
  closed it; duplicates (a race between replicas) are closed in favour of the oldest open one;
* each item's first-seen time survives across runs in a hidden JSON block at the end of the body
  (`<!-- fluxwarden:drift-state {...} -->`), so "since" is stable even where the cluster gives no time;
* a failed run (cluster unreachable, an expired credential, the default branch not fetchable or not
  renderable) is not drift: it is commented ONCE per outage — the outage is remembered in the hidden
  state — and the next successful run says it ended. With no issue yet, the outage opens one (there is
  nowhere else to say it), which the next clean run closes.

`plan_issue` is the pure decision (report + the issues found → what to do); `reconcile_issue` applies it
through the GitHub adapter (blocking); `DriftRunner.run` is the whole job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence

from bot.engine.core import markdown as md
from bot.engine.livestate.drift import DriftOptions, DriftReport, format_duration, format_markdown, format_time, parse_time
from bot.engine.core.errors import FluxwardenError, InfraError
from bot.engine.chatops.jobs import DriftKey, Submitted
from bot.engine.core.model import plural
from bot.engine.chatops.settings import DriftPolicy
from bot.pipeline.check import CheckOptions
from bot.pipeline.drift import RenderedCluster, render_cluster, utcnow
from handlers.context import Counters, Dispatcher, DriftGit, DriftGitHub, Live, Settings

log = logging.getLogger(__name__)

LABEL = "fluxwarden:drift"
TITLE = "Drift report: {cluster}"
MARKER = "fluxwarden:drift:{cluster}"  # the cluster through bot.engine.core.markdown.comment (DriftReport.marker)
STATE_TAG = "fluxwarden:drift-state"
MAX_REMEMBERED = 300  # items whose first-seen time the issue keeps (the body has room for about that many)
SCHEDULED = "scheduled"  # every firing is the same version: one still running is joined, never cancelled
_STATE_RE = re.compile(r"<!-- " + re.escape(STATE_TAG) + r" (\{.*?\}) -->", re.DOTALL)


# --------------------------------------------------------------------------------------------- hidden state


@dataclass(frozen=True)
class Outage:
    """A run that failed, since when, and why (commented once)."""

    since: datetime
    error: str


@dataclass(frozen=True)
class IssueMemory:
    """What the issue remembers between runs, in its hidden JSON block."""

    first_seen: Mapping[str, datetime] = field(default_factory=dict)  # item key -> first seen
    outage: Outage | None = None
    last_ok: datetime | None = None  # the last successful check

    def render(self) -> str:
        doc: dict[str, Any] = {"v": 1, "first_seen": {k: _iso(v) for k, v in sorted(self.first_seen.items())}}
        if self.outage is not None:
            doc["outage"] = {"since": _iso(self.outage.since), "error": self.outage.error}
        if self.last_ok is not None:
            doc["last_ok"] = _iso(self.last_ok)
        text = json.dumps(doc, ensure_ascii=True, separators=(",", ":"))
        # `--` only ever occurs inside JSON strings here; escaped, nothing can close the HTML comment early.
        return f"<!-- {STATE_TAG} {text.replace('--', '-' + chr(92) + 'u002d')} -->"

    @classmethod
    def parse(cls, body: str | None) -> "IssueMemory":
        """The memory in an issue body; empty when absent or unreadable (a human edit never breaks a run)."""
        match = _STATE_RE.search(body or "")
        if match is None:
            return cls()
        try:
            doc = json.loads(match.group(1))
        except ValueError:
            return cls()
        if not isinstance(doc, dict):
            return cls()
        seen = {}
        for key, value in (doc.get("first_seen") or {}).items() if isinstance(doc.get("first_seen"), dict) else ():
            when = parse_time(value) if isinstance(value, str) else None
            if when is not None:
                seen[str(key)] = when
        outage = None
        raw = doc.get("outage")
        if isinstance(raw, dict) and parse_time(raw.get("since")) is not None:
            outage = Outage(parse_time(raw["since"]), str(raw.get("error") or ""))  # type: ignore[arg-type]
        return cls(seen, outage, parse_time(doc.get("last_ok")) if isinstance(doc.get("last_ok"), str) else None)


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def with_memory(body: str, memory: IssueMemory) -> str:
    """`body` with its hidden block replaced by `memory` (appended when it has none)."""
    block = memory.render()
    if _STATE_RE.search(body):
        return _STATE_RE.sub(lambda _: block, body, count=1)
    return body.rstrip("\n") + "\n\n" + block + "\n"


# --------------------------------------------------------------------------------------------- the decision


class IssueLike(Protocol):
    """What deciding on an issue reads of it (bot/engine/chatops/github_models.py's IssueInfo, or a test's own)."""

    @property
    def number(self) -> int: ...

    @property
    def state(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def body(self) -> str: ...


@dataclass(frozen=True)
class IssuePlan:
    """What to do on GitHub: create or edit the issue, comment, reopen or close, close duplicates."""

    action: str  # created | updated | reopened | closed | outage | outage-ended | nothing
    number: int | None  # the issue (None: create one)
    title: str
    body: str | None = None  # the new body (None: leave it)
    reopen: bool = False
    close: bool = False
    comments: tuple[str, ...] = ()  # posted after the edit, before a close
    duplicates: tuple[int, ...] = ()  # other open bot issues for this cluster: closed as duplicates


def pick_issue(issues: Sequence[IssueLike]) -> tuple[IssueLike | None, tuple[int, ...]]:
    """The cluster's issue (the oldest open one, else the newest closed one) and the other open ones."""
    opened = sorted((i for i in issues if i.state == "open"), key=lambda i: i.number)
    if opened:
        return opened[0], tuple(i.number for i in opened[1:])
    closed = sorted(issues, key=lambda i: i.number)
    return (closed[-1] if closed else None), ()


def _normal(text: str | None) -> str:
    return (text or "").replace("\r\n", "\n").strip()


def plan_issue(report: DriftReport, issues: Sequence[IssueLike]) -> IssuePlan:
    """The issue state `report` calls for, given the bot's issues for this cluster (pure)."""
    cluster, now = report.cluster, report.checked_at
    title = TITLE.format(cluster=cluster)
    issue, duplicates = pick_issue(issues)
    memory = IssueMemory.parse(issue.body if issue else None)
    number = issue.number if issue else None

    if report.error is not None:
        if memory.outage is not None:
            return IssuePlan("nothing", number, title, duplicates=duplicates)  # said once already
        outage = Outage(now, report.error)
        remembered = replace(memory, outage=outage)
        if issue is None:
            body = format_markdown(report, hidden=remembered.render())
            return IssuePlan("created", None, title, body)
        body = with_memory(issue.body, remembered)
        return IssuePlan("outage", number, title, body, comments=(outage_comment(report, memory.last_ok),), duplicates=duplicates)

    comments: list[str] = []
    if memory.outage is not None:
        comments.append(outage_ended_comment(cluster, memory.outage, now))
    if report.clean:
        remembered = IssueMemory(last_ok=now)
        if issue is None:
            return IssuePlan("nothing", None, title)
        if issue.state == "open":
            body = format_markdown(report, hidden=remembered.render())
            comments.append(clean_comment(report, memory))
            return IssuePlan("closed", number, title, body, close=True, comments=tuple(comments), duplicates=duplicates)
        if memory.outage is not None:  # closed, clean: only the outage to close out
            return IssuePlan("outage-ended", number, title, with_memory(issue.body, remembered), comments=tuple(comments))
        return IssuePlan("nothing", number, title)

    first_seen = {key: memory.first_seen.get(key, now) for key in report.keys()[:MAX_REMEMBERED]}
    remembered = IssueMemory(first_seen, None, now)
    body = format_markdown(report, first_seen, hidden=remembered.render())
    if issue is None:
        return IssuePlan("created", None, title, body)
    if issue.state != "open":
        persisted = any(key in memory.first_seen for key in report.keys())
        comments.append(reopen_comment(report, persisted))
        return IssuePlan("reopened", number, title, body, reopen=True, comments=tuple(comments), duplicates=duplicates)
    changed = _normal(body) != _normal(issue.body) or issue.title != title
    action = "updated" if changed else ("outage-ended" if comments else "nothing")
    return IssuePlan(action, number, title, body if changed else None, comments=tuple(comments), duplicates=duplicates)


# --------------------------------------------------------------------------------------------- comments


def outage_comment(report: DriftReport, last_ok: datetime | None) -> str:
    before = f" The report above is from the last successful check, {format_time(last_ok)}." if last_ok else ""
    return (
        f"⚠️ **The drift check of {md.code(report.cluster)} could not run** ({format_time(report.checked_at)}): "
        f"{md.rich(report.error or '')}\n\nThis is not drift.{before} Fluxwarden keeps trying on schedule and says "
        f"here once when a check succeeds again (no comment per failed run)."
    )


def outage_ended_comment(cluster: str, outage: Outage, now: datetime) -> str:
    return (
        f"✅ The drift check of {md.code(cluster)} runs again ({format_time(now)}); it had failed since "
        f"{format_time(outage.since)} ({format_duration(now - outage.since)}): {md.rich(outage.error)}"
    )


def clean_comment(report: DriftReport, memory: IssueMemory) -> str:
    where = md.code(report.branch) + (f" at {md.code(report.revision[:12])}" if report.revision else "") if report.branch else "git"
    return (
        f"✅ {md.code(report.cluster)} matches {where} again ({format_time(report.checked_at)}): no drift. Closing; "
        f"this issue reopens if drift returns."
    )


def reopen_comment(report: DriftReport, persisted: bool) -> str:
    if persisted:
        return (f"Reopening: this issue was closed while {md.code(report.cluster)} still drifts "
                f"({plural(len(report.items), 'item')} at {format_time(report.checked_at)}). It closes itself once the cluster matches git.")
    return f"Drift returned on {md.code(report.cluster)} ({format_time(report.checked_at)}): {plural(len(report.items), 'item')}. Reopening."


def duplicate_comment(number: int) -> str:
    return f"Closing as a duplicate of #{number}: Fluxwarden keeps one drift issue per cluster."


# --------------------------------------------------------------------------------------------- applying it


@dataclass(frozen=True)
class IssueOutcome:
    action: str
    number: int | None


def reconcile_issue(github: DriftGitHub, repo: str, report: DriftReport) -> IssueOutcome:
    """Make the cluster's drift issue match `report` (blocking: run it in a thread)."""
    marker = report.marker
    plan = plan_issue(report, github.find_issues(repo, marker, LABEL))
    number = plan.number
    if number is None:
        if plan.body is None:
            return IssueOutcome(plan.action, None)
        number = github.create_issue(repo, title=plan.title, body=plan.body, labels=[LABEL]).number
    elif plan.body is not None or plan.reopen:
        github.edit_issue(repo, number, title=plan.title, body=plan.body, state="open" if plan.reopen else None)
    for text in plan.comments:
        github.comment(repo, number, text)
    if plan.close:
        github.edit_issue(repo, number, state="closed")
    for duplicate in plan.duplicates:
        github.close_issue(repo, duplicate, duplicate_comment(number))
    if plan.action != "nothing":
        log.info("drift issue of %s on %s: %s #%s", report.cluster, repo, plan.action, number)
    return IssueOutcome(plan.action, number)


# --------------------------------------------------------------------------------------------- the job


class DriftContext(Protocol):
    """What a drift run needs: the repositories, git, GitHub's issues, live reads, how to render, the queue."""

    @property
    def config(self) -> Settings: ...

    @property
    def github(self) -> DriftGitHub: ...

    @property
    def git(self) -> DriftGit: ...

    @property
    def live(self) -> Live | None: ...

    @property
    def jobs(self) -> Dispatcher: ...

    @property
    def metrics(self) -> Counters: ...

    @property
    def options(self) -> CheckOptions: ...

    @property
    def cache_dir(self) -> Path: ...


@dataclass(frozen=True)
class DriftTarget:
    """One scheduled job: a repository's cluster."""

    repo: str
    cluster: str
    clone_url: str | None = None  # None: the repository's clone URL from GitHub
    options: DriftOptions = DriftOptions()

    @property
    def key(self) -> DriftKey:
        return DriftKey(self.repo, self.cluster)

    @property
    def job_id(self) -> str:
        return str(self.key)


@dataclass(frozen=True)
class DriftOutcome:
    """What one run found and did."""

    report: DriftReport | None
    issue: IssueOutcome | None
    error: str | None = None  # the run itself broke (GitHub unreachable, a bug): logged, nothing posted


class DriftRunner:
    """Runs drift jobs for a service: git through its mirrors, GitHub through its adapter."""

    def __init__(self, bot: DriftContext, *, clock: Callable[[], datetime] = utcnow, timeout: float | None = None) -> None:
        self.bot = bot
        self.clock = clock
        self.timeout = timeout if timeout is not None else bot.config.limits.run_timeout
        self._locks: dict[str, asyncio.Lock] = {}

    async def run(self, target: DriftTarget) -> DriftOutcome:
        """One check of one cluster, reconciled on its issue; never raises (a broken run is logged)."""
        lock = self._locks.setdefault(target.job_id, asyncio.Lock())
        async with lock:
            try:
                return await asyncio.wait_for(self._run(target), timeout=self.timeout)
            except asyncio.TimeoutError:
                report = DriftReport.failed(target.cluster, f"the drift check took longer than {self.timeout:g}s", self.clock())
                return await self._publish(target, report)
            except Exception as exc:  # a bug must not kill the scheduler's job
                log.exception("drift check of %s on %s crashed", target.cluster, target.repo)
                return DriftOutcome(None, None, f"internal error ({type(exc).__name__})")

    async def _run(self, target: DriftTarget) -> DriftOutcome:
        live = self.bot.live
        if live is None or not live.configured(target.repo, target.cluster):
            return DriftOutcome(None, None, f"{target.cluster} of {target.repo} has no live access configured")
        try:
            branch, revision, rendered = await asyncio.to_thread(self._render, target)
        except FluxwardenError as exc:
            what = "fetch" if isinstance(exc, InfraError) else "render"
            report = DriftReport.failed(target.cluster, f"could not {what} the default branch: {exc}", self.clock())
        else:
            report = await live.read_drift(rendered, target.repo, target.cluster, now=self.clock, options=target.options, branch=branch, revision=revision)
        return await self._publish(target, report)

    async def _publish(self, target: DriftTarget, report: DriftReport) -> DriftOutcome:
        try:
            issue = await asyncio.to_thread(reconcile_issue, self.bot.github, target.repo, report)
        except FluxwardenError as exc:
            self.bot.metrics.github_errors.labels("drift_issue").inc()
            log.warning("drift issue of %s on %s could not be updated: %s", target.cluster, target.repo, exc)
            return DriftOutcome(report, None, str(exc))
        return DriftOutcome(report, issue)

    def _render(self, target: DriftTarget) -> tuple[str, str, RenderedCluster]:
        """Fetch the default branch into the mirror and render the cluster at its head (blocking)."""
        git = self.bot.git
        info = self.bot.github.repository(target.repo)
        clone_url = target.clone_url or info.clone_url
        fetched = git.branch_heads(clone_url, [info.default_branch])
        head = fetched.heads.get(info.default_branch)
        if head is None:
            raise InfraError(f"{target.repo} has no branch {info.default_branch}")
        with git.checkout(fetched.mirror, head) as tree:
            rendered = render_cluster(tree, target.cluster, self.bot.options, self.bot.cache_dir)
        return info.default_branch, head, rendered


def drift_targets(bot: DriftContext) -> list[tuple[DriftTarget, DriftPolicy]]:
    """Every (target, schedule policy) the service config enables: live clusters without `drift: {enabled: false}`."""
    out: list[tuple[DriftTarget, DriftPolicy]] = []
    for repo in bot.config.repos:
        for cluster in repo.clusters:
            policy = getattr(cluster, "drift", None)
            if policy is None or not cluster.live or policy.enabled is False:
                continue
            out.append((DriftTarget(repo.name, cluster.name, repo.clone_url, policy.options()), policy))
    return out


@dataclass(frozen=True)
class DriftJob:
    """One scheduled drift report: when it fires (the cluster's policy) and what a firing runs."""

    id: str
    cron: str | None
    interval_seconds: int | None
    jitter: int
    run: Callable[[], Awaitable[None]]


def drift_jobs(bot: DriftContext, *, clock: Callable[[], datetime] = utcnow) -> tuple[DriftRunner, list[DriftJob]] | None:
    """The service's drift jobs (None when no cluster has drift on): one per enabled cluster, each running
    `DriftRunner.run` on the service's dispatcher like every other run (a firing while the cluster's last
    run still goes on joins it). bot/service/app.py schedules them (bot/adapters/scheduler.py)."""
    targets = drift_targets(bot)
    if not targets:
        return None
    runner = DriftRunner(bot, clock=clock)
    jobs = [
        DriftJob(
            target.job_id, policy.schedule, policy.interval_seconds, policy.jitter,
            partial(_dispatch, bot, target.key, partial(runner.run, target)),
        )
        for target, policy in targets
    ]
    return runner, jobs


async def _dispatch(bot: DriftContext, key: DriftKey, run: Callable[[], Awaitable[object]]) -> None:
    """One firing, through the dispatcher: waits for a worker, and for the run to end."""
    if await bot.jobs.run(key, SCHEDULED, run) == Submitted.QUEUE_FULL:
        log.warning("%s skipped: the run queue is full", key)
