"""In-memory fakes of the handlers' context protocols (handlers/context.py), one per protocol, in the style of
Prow's plugin clients: each records what a handler did and can be told to fail, so handler tests are tables.

`bot_context(...)` builds a BotContext of them; a test overrides only the parts its rows vary.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence

from bot.engine.chatops.github_models import BranchPullRequest, PullRequestInfo, StatusInfo
from bot.engine.core.errors import InfraError
from bot.engine.chatops.jobs import JobKey, PrecheckKey, PrecheckPlan, Submitted
from bot.engine.chatops.settings import ClusterPolicy, GitIdentity, Limits, RepoPolicy
from bot.engine.chatops.webhook import CommentEvent, PullRequestEvent, PullRequestRef, PushEvent, Repository
from bot.pipeline.check import CheckOptions
from bot.service.live import KubeLive
from handlers.context import BotContext

REPO = "home-ops/cluster"
CLONE_URL = f"https://github.com/{REPO}.git"
HEAD = "c0ffee" + "1" * 34
BASE = "ba5e00" + "2" * 34


# --------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class MemorySettings:
    """Settings: the repositories served, limits, the bot's git identity."""

    repos: tuple[RepoPolicy, ...] = (RepoPolicy(REPO, clusters=(ClusterPolicy("dev"), ClusterPolicy("prod", permission="maintain"))),)
    limits: Limits = field(default_factory=Limits)
    git_identity: GitIdentity = field(default_factory=GitIdentity)

    def repo(self, full_name: str) -> RepoPolicy | None:
        return next((r for r in self.repos if r.name.lower() == full_name.lower()), None)


# --------------------------------------------------------------------------------------------- GitHub


def pull_info(number: int = 7, *, head_sha: str = HEAD, base_ref: str = "main", state: str = "open", fork: bool = False, draft: bool = False) -> PullRequestInfo:
    """An open pull request as the GitHub adapter returns it."""
    return PullRequestInfo(
        number=number, state=state, draft=draft, head_sha=head_sha, head_ref="feature", head_repo="someone/cluster" if fork else REPO,
        head_clone_url=None if fork else CLONE_URL, base_ref=base_ref, base_sha=BASE, fork=fork, author="alice",
    )


@dataclass
class MemoryGitHub:
    """HandlerGitHub in memory: permissions, pull requests and statuses to read; comments, reactions and statuses written.

    `down` names the operations that fail as the adapter fails once its retries are spent (InfraError)."""

    is_app: bool = False
    permissions: dict[str, str] = field(default_factory=lambda: {"alice": "write", "bob": "write", "carol": "maintain", "mallory": "read"})
    pulls: dict[int, PullRequestInfo] = field(default_factory=lambda: {7: pull_info()})
    status_list: dict[str, list[StatusInfo]] = field(default_factory=dict)  # sha -> statuses, newest first
    comments: dict[tuple[int, str], list[str]] = field(default_factory=dict)  # (number, marker) -> bodies
    reactions: list[tuple[int, str]] = field(default_factory=list)
    branch_pulls: dict[int, BranchPullRequest] = field(default_factory=dict)  # the bot's open follow-up PRs
    closed: list[tuple[int, str | None]] = field(default_factory=list)  # (PR, closing comment)
    check_runs: list[dict[str, Any]] = field(default_factory=list)
    down: set[str] = field(default_factory=set)
    calls: Counter = field(default_factory=Counter)
    clock: Callable[[], float] = time.time  # a status's created_at (claims age by it)

    def _call(self, operation: str) -> None:
        self.calls[operation] += 1
        if operation in self.down:
            raise InfraError(f"GitHub {operation} failed: 502 Bad Gateway")

    def permission(self, repo: str, login: str) -> str:
        self._call("permission")
        return self.permissions.get(login, "none")

    def pull_request(self, repo: str, number: int) -> PullRequestInfo:
        self._call("pull_request")
        if number not in self.pulls:
            raise InfraError(f"GitHub get pull request {repo}#{number} failed: 404 Not Found")
        return self.pulls[number]

    def open_pull_requests(self, repo: str) -> list[PullRequestInfo]:
        self._call("open_pull_requests")
        return [p for p in self.pulls.values() if p.state == "open"]

    def add_reaction(self, repo: str, comment_id: int, content: str = "eyes") -> None:
        self._call("reaction")
        self.reactions.append((comment_id, content))

    def upsert_comments(self, repo: str, number: int, marker: str, bodies: list[str]) -> list[int]:
        self._call("comment")
        self.comments[(number, marker)] = list(bodies)
        return list(range(1, len(bodies) + 1))

    def set_status(self, repo: str, sha: str, context: str, state: str, description: str, target_url: str | None = None) -> None:
        self._call("status")
        self.status_list.setdefault(sha, []).insert(0, StatusInfo(state, context, description, self.clock(), "fluxwarden-bot"))

    def statuses(self, repo: str, sha: str, limit: int = 100) -> list[StatusInfo]:
        self._call("statuses")
        return list(self.status_list.get(sha, []))[:limit]

    def latest_status(self, repo: str, sha: str, context: str) -> str | None:
        self._call("latest_status")
        return next((s.state for s in self.status_list.get(sha, []) if s.context == context), None)

    def upsert_check_run(self, repo: str, sha: str, name: str, **kwargs: Any) -> int:
        self._call("check_run")
        self.check_runs.append({"sha": sha, "name": name, **kwargs})
        return len(self.check_runs)

    def open_pulls_from(self, repo: str, branch: str) -> list[BranchPullRequest]:
        self._call("open_pulls_from")
        return [p for _, p in sorted(self.branch_pulls.items()) if p.head_ref == branch]

    def create_pull(self, repo: str, *, head: str, base: str, title: str, body: str) -> BranchPullRequest:
        self._call("create_pull")
        number = max([100, *self.branch_pulls, *self.pulls]) + 1
        pull = BranchPullRequest(number, title, body, head, "", base, "fluxwarden-bot", f"https://github.com/{repo}/pull/{number}")
        self.branch_pulls[number] = pull
        return pull

    def update_pull(self, repo: str, number: int, *, title: str | None = None, body: str | None = None) -> None:
        self._call("update_pull")
        pull = self.branch_pulls[number]
        self.branch_pulls[number] = replace(pull, title=pull.title if title is None else title, body=pull.body if body is None else body)

    def close_pull(self, repo: str, number: int, comment: str | None = None) -> None:
        self._call("close_pull")
        self.branch_pulls.pop(number, None)
        self.closed.append((number, comment))

    def states(self, sha: str, context: str = "fluxwarden/prod") -> list[str]:
        """The states `context` got on `sha`, oldest first."""
        return [s.state for s in reversed(self.status_list.get(sha, [])) if s.context == context]

    def reply(self, number: int, marker: str) -> str | None:
        """The one body under `marker` on `number` (None: nothing posted)."""
        bodies = self.comments.get((number, marker))
        return bodies[0] if bodies else None


# --------------------------------------------------------------------------------------------- git


@dataclass(frozen=True)
class Heads:
    """What `branch_heads` returns: a mirror and where each branch points."""

    mirror: Path
    heads: dict[str, str | None]


@dataclass(frozen=True)
class Fetched:
    """What `revisions` returns: a mirror, and the base and head it fetched."""

    mirror: Path
    base_sha: str
    head_sha: str


@dataclass
class MemoryGit:
    """Git in memory: the remote's branches and refs, first parents, the bot's commits and pushes. No mirror on disk:
    a fetch of revisions to review fails unless `refs` has both (once `gate`, when given, is set), and a checkout fails."""

    branches: dict[str, str] = field(default_factory=lambda: {"main": BASE})
    refs: dict[str, str] = field(default_factory=dict)  # e.g. refs/pull/7/head -> its SHA (refs/heads/<b> also from `branches`)
    parents: dict[str, str] = field(default_factory=dict)  # commit -> its first parent (none: a root commit)
    fetched: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    commits: list[tuple[str, str, str]] = field(default_factory=list)  # (sha, parent, path) of each commit made
    pushes: list[tuple[str, str]] = field(default_factory=list)  # (branch, sha)
    deleted: list[str] = field(default_factory=list)
    down: bool = False  # every fetch fails (the remote is unreachable)
    gate: threading.Event | None = None  # fetches of revisions wait for it (at most 10 s)

    def _ref(self, ref: str) -> str | None:
        return self.refs.get(ref) or self.branches.get(ref.removeprefix("refs/heads/"))

    def revisions(self, clone_url: str, base_ref: str, head_ref: str) -> Fetched:
        self.fetched.append((clone_url, (base_ref, head_ref)))
        if self.gate is not None:
            self.gate.wait(10)
        base, head = self._ref(base_ref), self._ref(head_ref)
        if self.down or base is None or head is None or head_ref not in self.refs:
            raise InfraError(f"git fetch from {clone_url} failed: could not resolve host")
        return Fetched(Path("/nonexistent/mirror"), base, head)

    def merge_base(self, mirror: Path, a: str, b: str) -> str:
        return a  # the PR branched off its base's head

    def checkout(self, mirror: Path, sha: str) -> AbstractContextManager[Path]:
        raise InfraError(f"no mirror on disk to check {sha[:12]} out of")

    def first_parent_history(self, mirror: Path, rev: str, limit: int) -> list[str]:
        history = [rev]
        while len(history) < limit and history[-1] in self.parents:
            history.append(self.parents[history[-1]])
        return history

    def commit_parents(self, mirror: Path, rev: str) -> list[str]:
        return [self.parents[rev]] if rev in self.parents else []

    def commit_summary(self, mirror: Path, rev: str) -> str:
        return f"commit {rev[:12]}"

    def commit_file(self, clone_url: str, parent_sha: str, path: str, content: bytes, message: str, author: tuple[str, str], *, reuse: str | None = None) -> str:
        sha = hashlib.sha1(b"\0".join([parent_sha.encode(), path.encode(), content, message.encode(), *(a.encode() for a in author)])).hexdigest()
        if sha == reuse:
            return reuse  # the same commit again, as the adapter reuses an identical one
        self.commits.append((sha, parent_sha, path))
        return sha

    def push_branch(self, clone_url: str, sha: str, branch: str, *, force: bool = True) -> None:
        self.branches[branch] = sha
        self.pushes.append((branch, sha))

    def delete_branch(self, clone_url: str, branch: str) -> None:
        self.branches.pop(branch, None)
        self.deleted.append(branch)

    def branch_heads(self, clone_url: str, branches: Sequence[str]) -> Heads:
        self.fetched.append((clone_url, tuple(branches)))
        if self.down:
            raise InfraError(f"git ls-remote from {clone_url} failed: could not resolve host")
        return Heads(Path("/nonexistent/mirror"), {b: self.branches.get(b) for b in branches})


# --------------------------------------------------------------------------------------------- runs


@dataclass
class RecordingPrechecks:
    """Prechecks: records every scheduled plan and give-up; `busy` holds the (key, version) a run still works on."""

    plans: list[PrecheckPlan] = field(default_factory=list)
    given_up: list[tuple[PrecheckPlan, str]] = field(default_factory=list)
    working: set[tuple[PrecheckKey, str]] = field(default_factory=set)

    def schedule(self, plan: PrecheckPlan) -> dict[str, Submitted]:
        self.plans.append(plan)
        return dict.fromkeys(plan.clusters, Submitted.STARTED)

    async def give_up(self, plan: PrecheckPlan, cluster: str) -> None:
        self.given_up.append((plan, cluster))

    def busy(self, key: PrecheckKey, version: str) -> bool:
        return (key, version) in self.working

    @property
    def scheduled(self) -> list[tuple[int, str, tuple[str, ...]]]:
        """(PR, head SHA, clusters) of each plan, in order."""
        return [(p.number, p.head_sha, p.clusters) for p in self.plans]


@dataclass
class RecordingDispatcher:
    """Dispatcher: records submissions (answering `answer`); `run_all` then runs the recorded jobs."""

    answer: Submitted = Submitted.STARTED
    submitted: list[tuple[JobKey, str, Callable[[], Awaitable[object]]]] = field(default_factory=list)

    def submit(self, key: JobKey, version: str, job: Callable[[], Awaitable[object]]) -> Submitted:
        if self.answer != Submitted.QUEUE_FULL:
            self.submitted.append((key, version, job))
        return self.answer

    async def run(self, key: JobKey, version: str, job: Callable[[], Awaitable[object]]) -> Submitted:
        answer = self.submit(key, version, job)
        if answer != Submitted.QUEUE_FULL:
            await job()
        return answer

    async def run_all(self) -> None:
        for _, _, job in self.submitted:
            await job()

    @property
    def keys(self) -> list[tuple[JobKey, str]]:
        return [(key, version) for key, version, _ in self.submitted]


@dataclass
class MemoryRunSlots:
    """RunSlots (handlers/precheck_runs.py): each key's current version; the jobs submitted, run by the test."""

    current: dict[JobKey, str] = field(default_factory=dict)
    submitted: list[tuple[JobKey, str, Callable[[], Awaitable[object]]]] = field(default_factory=list)
    done: set[tuple[JobKey, str]] = field(default_factory=set)  # the runs that ended
    depth: int = 0

    def submit(self, key: JobKey, version: str, job: Callable[[], Awaitable[object]]) -> Submitted:
        if self.current.get(key) == version:
            return Submitted.COALESCED
        superseded = key in self.current
        self.current[key] = version

        async def tracked() -> None:
            try:
                await job()
            finally:
                self.done.add((key, version))

        self.submitted.append((key, version, tracked))
        return Submitted.SUPERSEDED if superseded else Submitted.STARTED

    def running(self, key: JobKey, version: str) -> bool:
        return self.current.get(key) == version and (key, version) not in self.done

    def is_current(self, key: JobKey, version: str) -> bool:
        return self.current.get(key) == version


@dataclass
class MemoryCounters:
    """Counters: `github_errors.labels(op).inc()` and `runs.labels(cluster, verdict).inc()`, counted by labels;
    a run's duration observed and the queue's depth set."""

    github_errors: "_Counter" = field(default_factory=lambda: _Counter())
    runs: "_Counter" = field(default_factory=lambda: _Counter())
    run_seconds: "_Counter" = field(default_factory=lambda: _Counter())
    queue_depth: "_Gauge" = field(default_factory=lambda: _Gauge())


@dataclass
class _Gauge:
    value: float = 0.0

    def set(self, value: float) -> None:
        self.value = value


@dataclass
class _Counter:
    counts: Counter = field(default_factory=Counter)

    def labels(self, *labels: str) -> "_Child":
        return _Child(self.counts, labels if len(labels) > 1 else labels[0])


@dataclass
class _Child:
    counts: Counter
    key: Any

    def inc(self, amount: float = 1) -> None:
        self.counts[self.key] += amount

    def observe(self, amount: float) -> None:
        self.counts[self.key] += 1


@dataclass
class MemoryClaims:
    """Claims of several replicas: `abandoned_set` holds the (sha, context) nobody runs any more; `claimed_since`
    the contexts another replica claimed after they were found abandoned."""

    abandoned_set: set[tuple[str, str]] = field(default_factory=set)
    claimed_since: set[str] = field(default_factory=set)

    async def abandoned_contexts(self, repo: str, sha: str, contexts: Sequence[str]) -> list[str]:
        return [c for c in contexts if (sha, c) in self.abandoned_set]

    def abandoned(self, statuses: Sequence[Any], context: str) -> bool:
        return context not in self.claimed_since

    def tag(self, description: str, *, released: bool = False) -> str:
        return f"{description} [fw:memory{':released' if released else ''}]"


# --------------------------------------------------------------------------------------------- the context


def bot_context(**parts: Any) -> BotContext:
    """A BotContext of in-memory fakes; keyword arguments replace parts (config, github, git, prechecks, jobs, ...)."""
    defaults: dict[str, Any] = {
        "config": MemorySettings(),
        "github": MemoryGitHub(),
        "git": MemoryGit(),
        "prechecks": RecordingPrechecks(),
        "jobs": RecordingDispatcher(),
        "metrics": MemoryCounters(),
        "options": CheckOptions(),
        "cache_dir": Path("/nonexistent/cache"),
        "claims": None,
    }
    defaults.update(parts)
    defaults.setdefault("live", KubeLive(defaults["config"]))  # live reads go to the cluster the settings name (a loopback fake)
    return BotContext(**defaults)


# --------------------------------------------------------------------------------------------- events


REPOSITORY = Repository(full_name=REPO, clone_url=CLONE_URL, default_branch="main", private=False)


def comment_event(body: str, *, author: str = "bob", number: int = 7, comment_id: int = 1001, pull_request: bool = True, author_type: str = "User") -> CommentEvent:
    """An `issue_comment.created` on PR (or issue) `number`."""
    return CommentEvent(
        delivery="d-1", action="created", repo=REPOSITORY, number=number, is_pull_request=pull_request, comment_id=comment_id,
        body=body, author=author, author_type=author_type, installation_id=None,
    )


def pull_request_event(action: str = "opened", **pull: Any) -> PullRequestEvent:
    """A `pull_request` event on PR 7 (fields of the PR overridable)."""
    ref = PullRequestRef(
        number=7, head_sha=HEAD, head_ref="feature", head_repo=REPO, head_clone_url=CLONE_URL, base_ref="main", base_sha=BASE,
        fork=False, draft=False, state="open", author="alice",
    )
    return PullRequestEvent(delivery="d-1", action=action, repo=REPOSITORY, pull=replace(ref, **pull), sender="alice", installation_id=None)


def push_event(*, ref: str = "refs/heads/main", after: str = HEAD, before: str = BASE) -> PushEvent:
    """A push to `ref`."""
    return PushEvent(delivery="d-1", repo=REPOSITORY, ref=ref, before=before, after=after, installation_id=None, commits=(after,))
