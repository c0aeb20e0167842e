"""What every handler gets: small protocols of the services it uses, owned here (bot/service/app.py implements them)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Awaitable, Callable, ContextManager, Iterable, Mapping, Protocol, Sequence

from bot.engine.errors import FluxwardenError
from bot.engine.drift import DriftOptions, DriftReport
from bot.engine.jobs import JobKey, PrecheckKey, PrecheckPlan, Submitted
from bot.engine.clusterobjects import ConfigFetcher
from bot.engine.live import LiveState, ObjectFetcher
from bot.engine.settings import GitIdentity, Limits, RepoPolicy
from bot.engine.tierfix import TreeState
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


class Counters(Protocol):
    """The metrics handlers count (prometheus_client collectors: `.labels(...).inc()`)."""

    @property
    def github_errors(self) -> Any: ...

    @property
    def runs(self) -> Any: ...


class PrecheckGitHub(Protocol):
    """What prechecking needs from GitHub (the adapter in bot/adapters/github.py provides it)."""

    @property
    def is_app(self) -> bool: ...

    def pull_request(self, repo: str, number: int) -> Any: ...

    def upsert_comments(self, repo: str, number: int, marker: str, bodies: list[str]) -> list[int]: ...

    def set_status(self, repo: str, sha: str, context: str, state: str, description: str, target_url: str | None = None) -> None: ...

    def upsert_check_run(self, repo: str, sha: str, name: str, *, status: str, conclusion: str | None, title: str, summary: str, text: str | None = None, annotations: Iterable[dict[str, Any]] = ()) -> int: ...


class CommentGitHub(Protocol):
    """What the comment and event handlers read and write on a PR."""

    def permission(self, repo: str, login: str) -> str: ...

    def pull_request(self, repo: str, number: int) -> Any: ...

    def add_reaction(self, repo: str, comment_id: int, content: str = "eyes") -> None: ...

    def upsert_comments(self, repo: str, number: int, marker: str, bodies: list[str]) -> list[int]: ...


class RestartGitHub(Protocol):
    """What re-running pending prechecks reads."""

    def open_pull_requests(self, repo: str) -> list: ...

    def latest_status(self, repo: str, sha: str, context: str) -> str | None: ...

    def statuses(self, repo: str, sha: str, limit: int = 100) -> list: ...


class TierOrderGitHub(Protocol):
    """What the tier order follow-up PR needs."""

    def open_pulls_from(self, repo: str, branch: str) -> list: ...

    def create_pull(self, repo: str, *, head: str, base: str, title: str, body: str) -> Any: ...

    def update_pull(self, repo: str, number: int, *, title: str | None = None, body: str | None = None) -> None: ...

    def close_pull(self, repo: str, number: int, comment: str | None = None) -> None: ...

    def upsert_comments(self, repo: str, number: int, marker: str, bodies: list[str]) -> list[int]: ...

    def set_status(self, repo: str, sha: str, context: str, state: str, description: str, target_url: str | None = None) -> None: ...


class DriftGitHub(Protocol):
    """The GitHub calls a drift run makes."""

    def repository(self, repo: str) -> Any: ...

    def find_issues(self, repo: str, marker: str, label: str) -> list[Any]: ...

    def create_issue(self, repo: str, *, title: str, body: str, labels: Sequence[str] = ()) -> Any: ...

    def edit_issue(self, repo: str, number: int, *, title: str | None = None, body: str | None = None, state: str | None = None) -> None: ...

    def comment(self, repo: str, number: int, body: str) -> int: ...

    def close_issue(self, repo: str, number: int, comment: str | None = None) -> None: ...


class HandlerGitHub(PrecheckGitHub, CommentGitHub, RestartGitHub, TierOrderGitHub, DriftGitHub, Protocol):
    """Every GitHub call the handlers make (bot.adapters.github.GitHubAdapter)."""


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


class Git(Protocol):
    """The git mirrors (bot.adapters.git.Mirrors), given their credentials once by the composition root."""

    def revisions(self, clone_url: str, base_ref: str, head_ref: str) -> Revisions: ...

    def branch_heads(self, clone_url: str, branches: Sequence[str]) -> Heads: ...

    def checkout(self, mirror: Path, sha: str) -> ContextManager[Path]: ...

    def commit_file(self, clone_url: str, parent_sha: str, path: str, content: bytes, message: str, author: tuple[str, str], *, reuse: str | None = None) -> str: ...

    def push_branch(self, clone_url: str, sha: str, branch: str, *, force: bool = True) -> None: ...

    def delete_branch(self, clone_url: str, branch: str) -> None: ...

    def merge_base(self, mirror: Path, a: str, b: str) -> str: ...

    def first_parent_history(self, mirror: Path, rev: str, limit: int) -> list[str]: ...

    def commit_parents(self, mirror: Path, rev: str) -> list[str]: ...

    def commit_summary(self, mirror: Path, rev: str) -> str: ...


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
    """Schedules precheck runs (bot/service/runs.py's PrecheckRuns: queue, claims, final writes)."""

    def schedule(self, plan: PrecheckPlan) -> Mapping[str, Submitted]: ...

    async def give_up(self, plan: PrecheckPlan, cluster: str) -> None: ...

    def busy(self, key: PrecheckKey, version: str) -> bool: ...


class Claims(Protocol):
    """Which pending statuses no replica runs any more (bot/service/claims.py; only with several replicas)."""

    async def abandoned_contexts(self, repo: str, sha: str, contexts: Sequence[str]) -> list[str]: ...

    def abandoned(self, statuses: Sequence[Any], context: str) -> bool: ...

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
