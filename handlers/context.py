"""What every handler gets: small protocols of the services it uses, owned here (bot/service/app.py implements them)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Awaitable, Callable, ContextManager, Iterable, Mapping, Protocol, Sequence

from bot.engine.core.errors import FluxwardenError
from bot.engine.chatops.github_models import BranchPullRequest, CheckAnnotation, IssueInfo, PullRequestInfo, RepositoryInfo, StatusInfo
from bot.engine.livestate.drift import DriftOptions, DriftReport
from bot.engine.chatops.jobs import JobKey, PrecheckKey, PrecheckPlan, Submitted
from bot.engine.render.clusterobjects import ConfigFetcher
from bot.engine.livestate.live import LiveState, ObjectFetcher
from bot.engine.chatops.settings import GitIdentity, Limits, RepoPolicy
from bot.engine.ordering.tierfix import TreeState
from bot.pipeline.check import CheckOptions
from bot.pipeline.drift import RenderedCluster


class Settings(Protocol):
    """The repositories the bot serves and how (bot/service/settings.py's ServiceConfig)."""

    @property
    def repos(self) -> tuple[RepoPolicy, ...]: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def git_identity(self) -> GitIdentity: ...

    def repo(self, full_name: str) -> RepoPolicy | None: ...


class Count(Protocol):
    """One labelled child of a counter (prometheus_client's `Counter.labels(...)`)."""

    def inc(self, amount: float = 1) -> None: ...


class LabelledCounter(Protocol):
    """A counter with labels (prometheus_client's `Counter`)."""

    def labels(self, *labels: str) -> Count: ...


class Counters(Protocol):
    """The metrics handlers count: `.labels(...).inc()`."""

    @property
    def github_errors(self) -> LabelledCounter: ...

    @property
    def runs(self) -> LabelledCounter: ...


# GitHub, one protocol per concern (bot/adapters/github.py's GitHubAdapter implements them all); the reads
# return the frozen models of bot/engine/chatops/github_models.py, built in the adapter.


class Comments(Protocol):
    """The bot's comments, found by their hidden marker and edited in place."""

    def upsert_comments(self, repo: str, number: int, marker: str, bodies: list[str]) -> list[int]: ...


class StatusWrites(Protocol):
    """Setting a commit status."""

    def set_status(self, repo: str, sha: str, context: str, state: str, description: str, target_url: str | None = None) -> None: ...


class StatusReads(Protocol):
    """A commit's statuses, newest first."""

    def statuses(self, repo: str, sha: str, limit: int = 100) -> list[StatusInfo]: ...


class CheckRuns(Protocol):
    """Check runs (a GitHub App only)."""

    @property
    def is_app(self) -> bool: ...

    def upsert_check_run(
        self, repo: str, sha: str, name: str, *, status: str, conclusion: str | None, title: str, summary: str,
        text: str | None = None, annotations: Iterable[CheckAnnotation] = (),
    ) -> int: ...


class PullRequestReads(Protocol):
    """One pull request read."""

    def pull_request(self, repo: str, number: int) -> PullRequestInfo: ...


class Permissions(Protocol):
    """A commenter's permission on a repository (read, triage, write, maintain, admin, none)."""

    def permission(self, repo: str, login: str) -> str: ...


class PrecheckGitHub(Comments, StatusWrites, CheckRuns, PullRequestReads, Protocol):
    """What a precheck writes (comment, status, check run) and re-reads (the PR's base and head)."""


class CommentGitHub(Comments, PullRequestReads, Permissions, Protocol):
    """What the comment handler reads and writes on a PR: the commenter's permission, the PR, a reaction, the reply."""

    def add_reaction(self, repo: str, comment_id: int, content: str = "eyes") -> None: ...


class RestartGitHub(StatusReads, Protocol):
    """What re-running pending prechecks reads."""

    def open_pull_requests(self, repo: str) -> list[PullRequestInfo]: ...

    def latest_status(self, repo: str, sha: str, context: str) -> str | None: ...


class RetargetGitHub(StatusReads, StatusWrites, Protocol):
    """What marking a retargeted PR's statuses pending reads and writes."""


class TierOrderGitHub(Comments, StatusWrites, Protocol):
    """What the tier order follow-up PR needs: the bot's branch PR, its conflict note, a failed status on a push."""

    def open_pulls_from(self, repo: str, branch: str) -> list[BranchPullRequest]: ...

    def create_pull(self, repo: str, *, head: str, base: str, title: str, body: str) -> BranchPullRequest: ...

    def update_pull(self, repo: str, number: int, *, title: str | None = None, body: str | None = None) -> None: ...

    def close_pull(self, repo: str, number: int, comment: str | None = None) -> None: ...


class DriftGitHub(Protocol):
    """The GitHub calls a drift run makes: the repository, and its drift issues."""

    def repository(self, repo: str) -> RepositoryInfo: ...

    def find_issues(self, repo: str, marker: str, label: str) -> list[IssueInfo]: ...

    def create_issue(self, repo: str, *, title: str, body: str, labels: Sequence[str] = ()) -> IssueInfo: ...

    def edit_issue(self, repo: str, number: int, *, title: str | None = None, body: str | None = None, state: str | None = None) -> None: ...

    def comment(self, repo: str, number: int, body: str) -> int: ...

    def close_issue(self, repo: str, number: int, comment: str | None = None) -> None: ...


class HandlerGitHub(PrecheckGitHub, CommentGitHub, RestartGitHub, RetargetGitHub, TierOrderGitHub, DriftGitHub, Protocol):
    """Every GitHub call of every handler: what the composition root hands in (each handler asks for its own part)."""


class Revisions(Protocol):
    """A PR's base and head fetched into a mirror (bot.adapters.git.FetchedRevisions)."""

    @property
    def mirror(self) -> Path: ...

    @property
    def base_sha(self) -> str: ...

    @property
    def head_sha(self) -> str: ...


class Heads(Protocol):
    """Where branches point (None: no such branch), fetched into a mirror (bot.adapters.git.BranchHeads)."""

    @property
    def mirror(self) -> Path: ...

    @property
    def heads(self) -> Mapping[str, str | None]: ...


class BranchHeads(Protocol):
    """Where branches point, fetched into a mirror."""

    def branch_heads(self, clone_url: str, branches: Sequence[str]) -> Heads: ...


class Checkouts(Protocol):
    """A commit of a mirror checked out into a scratch directory (removed on exit)."""

    def checkout(self, mirror: Path, sha: str) -> ContextManager[Path]: ...


class PrecheckGit(Protocol):
    """What prechecking needs from git: a PR's base and head fetched, and their merge base."""

    def revisions(self, clone_url: str, base_ref: str, head_ref: str) -> Revisions: ...

    def merge_base(self, mirror: Path, a: str, b: str) -> str: ...


class DriftGit(BranchHeads, Checkouts, Protocol):
    """What a drift run needs from git: the default branch's head, checked out."""


class TierOrderGit(BranchHeads, Checkouts, Protocol):
    """What the tier order follow-up PR needs from git: history, and the bot's own commit pushed to its branch."""

    def commit_file(self, clone_url: str, parent_sha: str, path: str, content: bytes, message: str, author: tuple[str, str], *, reuse: str | None = None) -> str: ...

    def push_branch(self, clone_url: str, sha: str, branch: str, *, force: bool = True) -> None: ...

    def delete_branch(self, clone_url: str, branch: str) -> None: ...

    def first_parent_history(self, mirror: Path, rev: str, limit: int) -> list[str]: ...

    def commit_parents(self, mirror: Path, rev: str) -> list[str]: ...

    def commit_summary(self, mirror: Path, rev: str) -> str: ...


class Git(PrecheckGit, DriftGit, TierOrderGit, Protocol):
    """The git mirrors (bot.adapters.git.Mirrors), given their credentials once by the composition root."""


class Live(Protocol):
    """Reading the clusters the settings configure live (bot/service/live.py on bot/adapters/kube.py; read-only)."""

    def configured(self, repo: str, cluster: str) -> bool: ...

    async def read_state(self, repo: str, cluster: str) -> LiveState: ...

    def object_reader(self, repo: str, cluster: str) -> ObjectFetcher: ...

    def config_reader(self, repo: str, cluster: str) -> ConfigFetcher:
        """Reads the substituteFrom ConfigMaps/Secrets git lacks by name, synchronously (in the review's thread)."""
        ...

    async def read_drift(
        self, rendered: RenderedCluster, repo: str, cluster: str, *, now: Callable[[], datetime], options: DriftOptions,
        branch: str | None = None, revision: str | None = None,
    ) -> DriftReport: ...


class TierOrderMemo:
    """What tier-order runs of one service share: one run per repository at a time, tree states by (repo, commit)."""

    def __init__(self, size: int = 128) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._states: OrderedDict[tuple[str, str], TreeState | FluxwardenError] = OrderedDict()
        self._size = size

    def lock(self, repo: str) -> threading.Lock:
        """The lock of `repo`'s runs (names compare case-insensitively, as GitHub's do)."""
        with self._guard:
            return self._locks.setdefault(repo.lower(), threading.Lock())

    def state(self, key: tuple[str, str], compute: Callable[[], TreeState | FluxwardenError]) -> TreeState | FluxwardenError:
        """The tree state of a commit, computed once (the `size` most recent kept)."""
        with self._guard:
            if key in self._states:
                self._states.move_to_end(key)
                return self._states[key]
        result = compute()
        with self._guard:
            self._states[key] = result
            while len(self._states) > self._size:
                self._states.popitem(last=False)
        return result


class Dispatcher(Protocol):
    """Runs queued jobs, one current version per key (bot/service/runs.py's RunQueue)."""

    def submit(self, key: JobKey, version: str, job: Callable[[], Awaitable[object]]) -> Submitted: ...

    async def run(self, key: JobKey, version: str, job: Callable[[], Awaitable[object]]) -> Submitted: ...


class Prechecks(Protocol):
    """Schedules precheck runs (handlers/precheck_runs.py's PrecheckRuns: queue, claims, final writes)."""

    def schedule(self, plan: PrecheckPlan) -> Mapping[str, Submitted]: ...

    async def give_up(self, plan: PrecheckPlan, cluster: str) -> None: ...

    def busy(self, key: PrecheckKey, version: str) -> bool: ...


class Claims(Protocol):
    """Cross-replica run claims on GitHub's statuses (bot/service/claims.py; only with several replicas)."""

    async def acquire(self, repo: str, sha: str, context: str, description: str, target_url: str | None = None) -> bool: ...

    async def release(self, repo: str, sha: str, context: str, description: str, target_url: str | None = None) -> None: ...

    async def superseded(self, repo: str, number: int, sha: str) -> bool: ...

    async def abandoned_contexts(self, repo: str, sha: str, contexts: Sequence[str]) -> list[str]: ...

    def abandoned(self, statuses: Sequence[StatusInfo], context: str) -> bool: ...

    def tag(self, description: str, *, released: bool = False) -> str: ...


@dataclass(frozen=True)
class BotContext:
    """Shared by every handler of one running service."""

    config: Settings
    github: HandlerGitHub
    git: Git
    prechecks: Prechecks
    jobs: Dispatcher
    metrics: Counters
    options: CheckOptions  # how a render runs (kustomize, jobs, timeout)
    cache_dir: Path  # the build cache
    claims: Claims | None = None  # several replicas: runs are claimed on GitHub
    live: Live | None = None  # reads clusters live (None: never, e.g. in tests of the GitHub side)
    tier_order: TierOrderMemo = field(default_factory=TierOrderMemo)  # the service's tier-order locks and tree states


@dataclass(frozen=True)
class Invocation:
    """A command found in a comment, once authorised: the repository's policy and the commenter's permission."""

    policy: RepoPolicy
    have: str  # the commenter's repository permission (read, write, ...)


@dataclass(frozen=True)
class CommandResult:
    """What a command handler did: a reply (or None), the runs it scheduled, whether it was taken up."""

    reply: str | None = None
    scheduled: tuple[str, ...] = ()
    accepted: bool = False
