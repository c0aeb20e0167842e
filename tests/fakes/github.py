"""A loopback fake of the GitHub REST API (aiohttp.web), for tests that drive real PyGithub over real HTTP.

Two ways to run it:

* ``with FakeGitHub().start_in_thread() as base_url:`` — the server runs on its own event loop in a daemon
  thread, so synchronous code (PyGithub, ``bot.github.GitHubAdapter``) can call it from a plain test.
* ``await fake.start()`` / ``await fake.stop()`` (or ``async with fake:``) — the server runs on the *current*
  loop; synchronous clients must then be called through ``asyncio.to_thread`` (a blocking call on the loop
  thread would deadlock against its own server).

``base_url`` is ``http://127.0.0.1:PORT/api/v3`` (GitHub Enterprise style, which is how PyGithub is pointed at
a non-default server). Every path below is relative to that prefix.

State is plain in-memory dataclasses (``users``, ``repos``, ``issues``, ``pulls``, ``comments``, ``reactions``,
``statuses``, ``check_runs``, ``apps``, ``installations``), inspectable from tests; read it under ``fake.lock``
or through the helpers, which copy. Two logs:

* ``fake.requests`` — every request that reached the server, with the status it got (faults included): count
  attempts here.
* ``fake.effects`` — every *successful* mutating call (POST/PUT/PATCH/DELETE with a 2xx answer) as an
  :class:`Effect` (method, path, json body, timestamp, status, actor): assert side effects here.

Faults (``fake.inject``) are matched in the order they were added by method and a regex searched in the path;
each fires ``times`` times: an HTTP status (5xx), a primary rate limit (403/429 with ``X-RateLimit-Remaining:
0`` and a reset in ``reset_in`` seconds; the caller's quota then really stays exhausted until the reset, so
retrying early gets another 403), a secondary rate limit (403/429 with ``Retry-After``), or a delay (the
request is then served normally, so a timed-out mutation still happens, as on GitHub).

Authentication: ``Authorization: token X`` or ``Bearer X`` must carry a known token (``add_user(token=...)``
or an installation token this fake minted), else 401 ``Bad credentials``. ``/app`` endpoints take a JWT
(``Bearer``) whose ``iss`` is a registered app id; its RS256 signature is verified when the app was registered
with a public key.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
import math
import re
import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from aiohttp import web
from tests.fakes.threaded import serve_in_thread

API_PREFIX = "/api/v3"
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
ROLES = ("admin", "maintain", "write", "triage", "read", "none")
# GitHub's legacy `permission` field predates maintain/triage: maintain reads as write, triage as read.
LEGACY_PERMISSION = {"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read", "none": "none"}
STATUS_STATES = frozenset({"error", "failure", "pending", "success"})
CHECK_STATUSES = frozenset({"queued", "in_progress", "completed", "waiting", "requested", "pending"})
CHECK_CONCLUSIONS = frozenset(
    {"action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"}
)
MAX_COMMENT_BODY = 65536
MAX_STATUS_DESCRIPTION = 140
MAX_CHECK_OUTPUT = 65535
MAX_ANNOTATIONS_PER_REQUEST = 50
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_RATE_LIMIT = 5000


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _node_id(kind: str, ident: int | str) -> str:
    return base64.b64encode(f"{kind}:{ident}".encode()).decode().rstrip("=")


# --------------------------------------------------------------------------------------------- state


@dataclass
class User:
    login: str
    id: int
    type: str = "User"  # "User" | "Bot" | "Organization"


@dataclass
class Role:
    role_name: str  # admin|maintain|write|triage|read|none or a custom role name
    permission: str  # the legacy field: admin|write|read|none


@dataclass
class Label:
    name: str
    id: int
    color: str = "ededed"
    description: str | None = None


@dataclass
class Repo:
    full_name: str
    id: int
    private: bool = False
    default_branch: str = "main"
    fork: bool = False
    clone_url: str = ""
    branches: dict[str, str] = field(default_factory=dict)  # name -> sha
    roles: dict[str, Role] = field(default_factory=dict)  # login (lower-case) -> role
    labels: dict[str, Label] = field(default_factory=dict)  # name (lower-case) -> label
    next_number: int = 1

    @property
    def owner(self) -> str:
        return self.full_name.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.full_name.split("/", 1)[1]


@dataclass
class Issue:
    repo: str
    number: int
    id: int
    title: str
    body: str | None
    user: str
    state: str = "open"
    state_reason: str | None = None
    labels: list[str] = field(default_factory=list)
    assignees: list[str] = field(default_factory=list)
    created_at: float = 0.0
    updated_at: float = 0.0
    closed_at: float | None = None
    is_pull: bool = False


@dataclass
class PullRequest:
    repo: str
    number: int
    id: int
    head_sha: str
    head_ref: str
    head_repo: str | None  # full name; None when the fork was deleted
    head_clone_url: str | None  # None: the head repository's own clone URL
    base_ref: str
    base_sha: str
    fork: bool  # the head repository's `fork` flag
    draft: bool = False
    merged: bool = False
    issue: Issue | None = None  # title, body, author, state and labels live on the issue (as on GitHub)

    @property
    def state(self) -> str:
        assert self.issue is not None
        return self.issue.state

    @property
    def title(self) -> str:
        assert self.issue is not None
        return self.issue.title

    @property
    def author(self) -> str:
        assert self.issue is not None
        return self.issue.user


@dataclass
class IssueComment:
    id: int
    repo: str
    issue_number: int
    body: str
    user: str
    created_at: float
    updated_at: float


@dataclass
class Reaction:
    id: int
    repo: str
    comment_id: int
    content: str
    user: str
    created_at: float


@dataclass
class CommitStatus:
    id: int
    repo: str
    sha: str
    state: str
    context: str
    description: str | None
    target_url: str | None
    creator: str
    created_at: float


@dataclass
class CheckRun:
    id: int
    repo: str
    head_sha: str
    name: str
    app_id: int
    status: str
    conclusion: str | None
    started_at: float
    completed_at: float | None
    details_url: str | None = None
    external_id: str | None = None
    title: str | None = None
    summary: str | None = None
    text: str | None = None
    annotations: list[dict[str, Any]] = field(default_factory=list)
    check_suite_id: int = 0


@dataclass
class App:
    id: int
    slug: str
    name: str
    owner: str
    public_key_pem: str | None = None

    @property
    def bot_login(self) -> str:
        return f"{self.slug}[bot]"


@dataclass
class Installation:
    id: int
    app_id: int
    account: str


@dataclass
class Credential:
    login: str
    installation_id: int | None = None
    expires_at: float | None = None


@dataclass(frozen=True)
class Effect:
    """A successful mutating call."""

    method: str
    path: str  # without the /api/v3 prefix and without the query
    json: Any
    timestamp: float
    status: int
    actor: str | None  # login (or "app:<id>" for JWT calls); never the token


@dataclass(frozen=True)
class RequestRecord:
    """Any request that reached the server."""

    method: str
    path: str
    query: dict[str, str]
    json: Any
    timestamp: float
    status: int
    actor: str | None
    fault: str | None  # "status" | "rate_limit" | "secondary_rate_limit" | "delay" | "quota" | None


@dataclass
class Fault:
    method: str  # "*" matches any
    path: re.Pattern[str]
    kind: str  # "status" | "rate_limit" | "secondary_rate_limit" | "delay"
    times: int
    status: int | None = None
    delay: float = 0.0
    reset_in: float = 1.0
    retry_after: float = 1.0
    hits: int = 0
    for_seconds: float | None = None  # active this long from its first hit (an outage), `times` aside
    started: float | None = None

    def matches(self, method: str, path: str) -> bool:
        if self.for_seconds is not None and self.started is not None and time.monotonic() >= self.started + self.for_seconds:
            return False
        return (self.for_seconds is not None or self.hits < self.times) and self.method in ("*", method) and bool(self.path.search(path))


@dataclass
class Quota:
    limit: int
    remaining: int
    reset: int


class ApiError(Exception):
    def __init__(self, status: int, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


def _not_found() -> ApiError:
    return ApiError(404, "Not Found")


def _invalid(message: str = "Validation Failed", **error: Any) -> ApiError:
    return ApiError(422, message, [error] if error else None)


@dataclass
class Req:
    """What a handler sees."""

    method: str
    path: str
    params: dict[str, str]  # path parameters
    query: dict[str, str]
    json: Any
    actor: str | None
    app_id: int | None  # set for JWT-authenticated /app calls
    url: Any  # yarl.URL of the request (for pagination links)


@dataclass
class Reply:
    data: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


_Handler = Callable[["FakeGitHub", Req], Any]
_ROUTES: list[tuple[str, re.Pattern[str], _Handler, str]] = []  # method, path regex, handler, auth ("token"|"jwt")


def route(method: str, pattern: str, auth: str = "token") -> Callable[[_Handler], _Handler]:
    def deco(fn: _Handler) -> _Handler:
        expanded = pattern.replace("{repo}", r"(?P<owner>[^/]+)/(?P<name>[^/]+)")
        _ROUTES.append((method, re.compile(rf"^{expanded}$"), fn, auth))
        return fn

    return deco


# ----------------------------------------------------------------------------------------- the fake


class FakeGitHub:
    def __init__(self, *, rate_limit: int = DEFAULT_RATE_LIMIT) -> None:
        self.lock = threading.RLock()
        self.rate_limit = rate_limit
        self.users: dict[str, User] = {}  # lower-case login -> user
        self.tokens: dict[str, Credential] = {}
        self.apps: dict[int, App] = {}
        self.installations: dict[int, Installation] = {}
        self.issued_tokens: list[str] = []  # installation tokens minted, oldest first
        self.installation_token_ttl = 3600.0
        self.repos: dict[str, Repo] = {}  # lower-case full name -> repo
        self.issues: dict[tuple[str, int], Issue] = {}
        self.pulls: dict[tuple[str, int], PullRequest] = {}
        self.comments: dict[int, IssueComment] = {}
        self.reactions: list[Reaction] = []
        self.statuses: dict[tuple[str, str], list[CommitStatus]] = {}  # (repo, sha) -> newest first
        self.check_runs: dict[int, CheckRun] = {}
        self.faults: list[Fault] = []
        self._requests: list[RequestRecord] = []
        self._effects: list[Effect] = []
        self._quotas: dict[str, Quota] = {}
        self._ids = itertools.count(1001)
        self._host = "127.0.0.1"
        self._port: int | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeGitHub is not running")
        return f"http://{self._host}:{self._port}{API_PREFIX}"

    @property
    def web_url(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeGitHub is not running")
        return f"http://{self._host}:{self._port}"

    async def start(self) -> str:
        """Serve on the running loop; returns the base URL."""
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self.base_url

    async def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()  # pending delays end now
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeGitHub:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start_in_thread(self) -> contextlib.AbstractContextManager[str]:
        """Serve from a daemon thread with its own loop; yields the base URL."""
        return serve_in_thread(self.start, self.stop, lambda: self.base_url, "fake-github")

    # ------------------------------------------------------------------ seeding

    def _next_id(self) -> int:
        return next(self._ids)

    def add_user(self, login: str, *, token: str | None = None, type: str = "User") -> User:
        with self.lock:
            user = self.users.get(login.lower())
            if user is None:
                user = User(login=login, id=self._next_id(), type=type)
                self.users[login.lower()] = user
            if token is not None:
                self.tokens[token] = Credential(login=user.login)
            return user

    def add_app(self, app_id: int, slug: str, *, owner: str = "fluxwarden-org", public_key_pem: str | None = None) -> App:
        with self.lock:
            app = App(id=app_id, slug=slug, name=slug.replace("-", " ").title(), owner=owner, public_key_pem=public_key_pem)
            self.apps[app_id] = app
            self.add_user(app.bot_login, type="Bot")
            self.add_user(owner, type="Organization")
            return app

    def add_installation(self, installation_id: int, app_id: int, *, account: str = "octo-org") -> Installation:
        with self.lock:
            inst = Installation(id=installation_id, app_id=app_id, account=account)
            self.installations[installation_id] = inst
            return inst

    def add_repo(
        self,
        full_name: str,
        *,
        private: bool = False,
        default_branch: str = "main",
        fork: bool = False,
        clone_url: str | None = None,
        branches: dict[str, str] | None = None,
    ) -> Repo:
        with self.lock:
            repo = Repo(
                full_name=full_name,
                id=self._next_id(),
                private=private,
                default_branch=default_branch,
                fork=fork,
                clone_url=clone_url or "",
                branches=dict(branches or {}),
            )
            self.repos[full_name.lower()] = repo
            self.add_user(repo.owner)
            return repo

    def set_permission(self, repo: str, login: str, role: str, *, legacy: str | None = None) -> None:
        """Give `login` a role on `repo`; a custom role name needs its `legacy` base permission."""
        with self.lock:
            self.add_user(login)
            if legacy is None:
                if role not in LEGACY_PERMISSION:
                    raise ValueError(f"custom role {role!r} needs legacy=")
                legacy = LEGACY_PERMISSION[role]
            self._repo(repo).roles[login.lower()] = Role(role_name=role, permission=legacy)

    def add_pull(
        self,
        repo: str,
        *,
        head_sha: str,
        head_ref: str = "feature",
        base_ref: str = "main",
        base_sha: str = "0" * 40,
        head_repo: str | None | bool = True,
        head_clone_url: str | None = None,
        fork: bool | None = None,
        draft: bool = False,
        state: str = "open",
        author: str = "alice",
        title: str = "A change",
        body: str | None = None,
        labels: list[str] | None = None,
    ) -> PullRequest:
        """A pull request; `head_repo=True` (default) means the same repository, None a deleted fork."""
        with self.lock:
            base = self._repo(repo)
            self.add_user(author)
            if head_repo is True:
                head_full: str | None = base.full_name
            elif head_repo is False:
                head_full = None
            else:
                head_full = head_repo
            if fork is None:
                fork = head_full is not None and head_full.lower() != base.full_name.lower()
            now = time.time()
            number = base.next_number
            base.next_number += 1
            issue = Issue(
                repo=base.full_name, number=number, id=self._next_id(), title=title, body=body, user=author,
                state=state, labels=list(labels or []), created_at=now, updated_at=now, is_pull=True,
                closed_at=now if state == "closed" else None,
            )
            for label in issue.labels:
                self._label(base, label)
            pull = PullRequest(
                repo=base.full_name, number=number, id=self._next_id(), head_sha=head_sha, head_ref=head_ref,
                head_repo=head_full, head_clone_url=head_clone_url, base_ref=base_ref, base_sha=base_sha,
                fork=fork, draft=draft, issue=issue,
            )
            self.issues[(base.full_name.lower(), number)] = issue
            self.pulls[(base.full_name.lower(), number)] = pull
            return pull

    def add_issue(self, repo: str, *, title: str, body: str | None = None, author: str = "alice", labels: list[str] | None = None, state: str = "open") -> Issue:
        with self.lock:
            base = self._repo(repo)
            self.add_user(author)
            now = time.time()
            issue = Issue(
                repo=base.full_name, number=base.next_number, id=self._next_id(), title=title, body=body,
                user=author, state=state, labels=list(labels or []), created_at=now, updated_at=now,
            )
            base.next_number += 1
            for label in issue.labels:
                self._label(base, label)
            self.issues[(base.full_name.lower(), issue.number)] = issue
            return issue

    def add_comment(self, repo: str, number: int, body: str, *, user: str) -> IssueComment:
        with self.lock:
            self.add_user(user)
            full = self._repo(repo).full_name
            if (full.lower(), number) not in self.issues:
                raise KeyError(f"{repo}#{number}")
            now = time.time()
            comment = IssueComment(id=self._next_id(), repo=full, issue_number=number, body=body, user=self.users[user.lower()].login, created_at=now, updated_at=now)
            self.comments[comment.id] = comment
            return comment

    def add_status(
        self, repo: str, sha: str, *, state: str, context: str, description: str | None = None, creator: str = "ci-bot",
        created_at: float | None = None, target_url: str | None = None,
    ) -> CommitStatus:
        """A status as if set earlier (`created_at`: epoch seconds, default now), newest first like GitHub's list."""
        with self.lock:
            self.add_user(creator)
            full = self._repo(repo).full_name
            status = CommitStatus(
                id=self._next_id(), repo=full, sha=sha, state=state, context=context, description=description, target_url=target_url,
                creator=creator, created_at=time.time() if created_at is None else created_at,
            )
            self.statuses.setdefault((full.lower(), sha), []).insert(0, status)
            return status

    # ------------------------------------------------------------------ faults and logs

    def inject(
        self,
        method: str,
        path: str,
        *,
        status: int | None = None,
        times: int = 1,
        rate_limit: str | None = None,
        delay: float | None = None,
        reset_in: float = 1.0,
        retry_after: float = 1.0,
        for_seconds: float | None = None,
    ) -> Fault:
        """Queue a fault for requests matching `method` ("*" for any) and the regex `path` (searched).

        `status=502` answers that status; `rate_limit="primary"` a 403 (or `status=429`) with the caller's quota
        exhausted until now+`reset_in`; `rate_limit="secondary"` a 403 (or 429) with `Retry-After: retry_after`;
        `delay=s` waits s seconds and then serves the request normally (or answers `status` if given too).
        `for_seconds=s`: every matching request for s seconds from the first one gets the fault (an outage).
        """
        if rate_limit not in (None, "primary", "secondary"):
            raise ValueError(rate_limit)
        if rate_limit == "primary":
            kind = "rate_limit"
        elif rate_limit == "secondary":
            kind = "secondary_rate_limit"
        elif delay is not None:
            kind = "delay"
        elif status is not None:
            kind = "status"
        else:
            raise ValueError("a fault needs status=, rate_limit= or delay=")
        fault = Fault(
            method=method.upper(), path=re.compile(path), kind=kind, times=times, status=status,
            delay=delay or 0.0, reset_in=reset_in, retry_after=retry_after, for_seconds=for_seconds,
        )
        with self.lock:
            self.faults.append(fault)
        return fault

    @property
    def requests(self) -> list[RequestRecord]:
        with self.lock:
            return list(self._requests)

    @property
    def effects(self) -> list[Effect]:
        with self.lock:
            return list(self._effects)

    def find_requests(self, method: str | None = None, path: str | None = None) -> list[RequestRecord]:
        return [r for r in self.requests if (method is None or r.method == method.upper()) and (path is None or re.search(path, r.path))]

    def find_effects(self, method: str | None = None, path: str | None = None) -> list[Effect]:
        return [e for e in self.effects if (method is None or e.method == method.upper()) and (path is None or re.search(path, e.path))]

    def clear_logs(self) -> None:
        with self.lock:
            self._requests.clear()
            self._effects.clear()

    # ------------------------------------------------------------------ inspection helpers

    def issue_comments(self, repo: str, number: int) -> list[IssueComment]:
        with self.lock:
            return sorted(
                (replace(c) for c in self.comments.values() if c.repo.lower() == repo.lower() and c.issue_number == number),
                key=lambda c: c.id,
            )

    def statuses_for(self, repo: str, sha: str) -> list[CommitStatus]:
        with self.lock:
            return [replace(s) for s in self.statuses.get((repo.lower(), sha), [])]

    def check_runs_for(self, repo: str, sha: str) -> list[CheckRun]:
        with self.lock:
            return sorted(
                (replace(c, annotations=list(c.annotations)) for c in self.check_runs.values() if c.repo.lower() == repo.lower() and c.head_sha == sha),
                key=lambda c: c.id,
            )

    def reactions_for(self, comment_id: int) -> list[Reaction]:
        with self.lock:
            return [replace(r) for r in self.reactions if r.comment_id == comment_id]

    def issue(self, repo: str, number: int) -> Issue:
        with self.lock:
            return self.issues[(repo.lower(), number)]

    def pull(self, repo: str, number: int) -> PullRequest:
        with self.lock:
            return self.pulls[(repo.lower(), number)]

    # ------------------------------------------------------------------ HTTP plumbing

    def _web(self) -> str:
        return f"http://{self._host}:{self._port}" if self._port else "http://127.0.0.1"

    def _api(self) -> str:
        return self._web() + API_PREFIX

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        now = time.time()
        method = request.method.upper()
        full_path = request.path
        query = dict(request.query)
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")

        record: dict[str, Any] = {"actor": None, "fault": None}

        def finish(resp: web.Response, status: int) -> web.Response:
            with self.lock:
                self._requests.append(
                    RequestRecord(method=method, path=path, query=query, json=body, timestamp=now, status=status, actor=record["actor"], fault=record["fault"])
                )
                if method in MUTATING and 200 <= status < 300 and record["fault"] in (None, "delay"):
                    self._effects.append(Effect(method=method, path=path, json=body, timestamp=now, status=status, actor=record["actor"]))
            return resp

        if not full_path.startswith(API_PREFIX + "/") and full_path != API_PREFIX:
            path = full_path
            return finish(self._error_response(ApiError(404, "Not Found"), None), 404)
        path = full_path[len(API_PREFIX):] or "/"

        handler, params, auth_kind = self._route(method, path)

        # authentication
        actor, app_id, auth_error = self._authenticate(request.headers.get("Authorization", ""), auth_kind)
        record["actor"] = actor
        if auth_error is not None:
            return finish(self._error_response(auth_error, None), auth_error.status)

        quota_key = actor
        # the caller's primary quota
        if quota_key is not None and path != "/rate_limit":
            quota = self._quota(quota_key)
            if quota.remaining <= 0 and time.time() < quota.reset:
                record["fault"] = "quota"
                err = ApiError(403, f"API rate limit exceeded for {actor}. (But here's the good news: Authenticated requests get a higher rate limit.)")
                return finish(self._error_response(err, quota_key), 403)

        # faults
        fault = self._take_fault(method, path)
        if fault is not None:
            record["fault"] = fault.kind
            if fault.delay > 0:
                assert self._stopping is not None
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), timeout=fault.delay)
            if fault.kind == "rate_limit":
                quota = self._quota(quota_key or "anonymous")
                with self.lock:
                    quota.remaining = 0
                    quota.reset = math.ceil(time.time() + fault.reset_in)
                err = ApiError(fault.status or 403, f"API rate limit exceeded for {actor}.")
                return finish(self._error_response(err, quota_key or "anonymous"), err.status)
            if fault.kind == "secondary_rate_limit":
                err = ApiError(
                    fault.status or 403,
                    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                )
                resp = self._error_response(err, quota_key)
                resp.headers["Retry-After"] = str(int(math.ceil(fault.retry_after)))
                return finish(resp, err.status)
            if fault.status is not None:
                err = ApiError(fault.status, "Server Error" if fault.status >= 500 else "Injected fault")
                return finish(self._error_response(err, quota_key), fault.status)

        if handler is None:
            return finish(self._error_response(_not_found(), quota_key), 404)

        req = Req(method=method, path=path, params=params, query=query, json=body, actor=actor, app_id=app_id, url=request.url)
        try:
            with self.lock:
                result = handler(self, req)
        except ApiError as err:
            return finish(self._error_response(err, quota_key), err.status)
        reply = result if isinstance(result, Reply) else Reply(result)

        with self.lock:
            if quota_key is not None and path != "/rate_limit":
                self._quota(quota_key).remaining -= 1
        if reply.status == 204:
            resp = web.Response(status=204)
        else:
            text = json.dumps(reply.data)
            etag = 'W/"' + hashlib.sha256(text.encode()).hexdigest()[:40] + '"'
            if method == "GET" and request.headers.get("If-None-Match") == etag:
                resp = web.Response(status=304)
                resp.headers["ETag"] = etag
                self._rate_headers(resp, quota_key)
                return finish(resp, 304)
            resp = web.Response(status=reply.status, text=text, content_type="application/json", charset="utf-8")
            resp.headers["ETag"] = etag
        for k, v in reply.headers.items():
            resp.headers[k] = v
        self._rate_headers(resp, quota_key)
        return finish(resp, reply.status)

    def _route(self, method: str, path: str) -> tuple[_Handler | None, dict[str, str], str]:
        found_path = False
        for m, rx, fn, auth in _ROUTES:
            match = rx.match(path)
            if match:
                found_path = True
                if m == method:
                    return fn, match.groupdict(), auth
        return None, {}, "jwt" if path.startswith("/app") and found_path else "token"

    def _authenticate(self, header: str, kind: str) -> tuple[str | None, int | None, ApiError | None]:
        scheme, _, cred = header.partition(" ")
        scheme = scheme.lower()
        cred = cred.strip()
        bad = ApiError(401, "Bad credentials")
        if not cred or scheme not in ("token", "bearer"):
            return None, None, ApiError(401, "Requires authentication")
        if kind == "jwt":
            if scheme != "bearer":
                return None, None, ApiError(401, "A JSON web token could not be decoded")
            app = self._app_from_jwt(cred)
            if app is None:
                return None, None, ApiError(401, "A JSON web token could not be decoded")
            return f"app:{app.id}", app.id, None
        with self.lock:
            credential = self.tokens.get(cred)
        if credential is None:
            return None, None, bad
        if credential.expires_at is not None and time.time() >= credential.expires_at:
            return None, None, bad
        return credential.login, None, None

    def _app_from_jwt(self, token: str) -> App | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            padded = parts[1] + "=" * (-len(parts[1]) % 4)
            payload = json.loads(base64.urlsafe_b64decode(padded))
            app = self.apps.get(int(payload["iss"]))
        except (ValueError, KeyError, TypeError):
            return None
        if app is None:
            return None
        if app.public_key_pem:
            import jwt  # PyJWT, a PyGithub dependency

            try:
                jwt.decode(token, app.public_key_pem, algorithms=["RS256"], leeway=60)
            except jwt.PyJWTError:
                return None
        elif float(payload.get("exp", 0)) < time.time():
            return None
        return app

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    if fault.started is None:
                        fault.started = time.monotonic()
                    return fault
        return None

    def _quota(self, key: str) -> Quota:
        with self.lock:
            quota = self._quotas.get(key)
            now = time.time()
            if quota is None or now >= quota.reset:
                quota = Quota(limit=self.rate_limit, remaining=self.rate_limit, reset=int(now) + 3600)
                self._quotas[key] = quota
            return quota

    def _rate_headers(self, resp: web.StreamResponse, key: str | None) -> None:
        if key is None:
            return
        quota = self._quota(key)
        resp.headers["X-RateLimit-Limit"] = str(quota.limit)
        resp.headers["X-RateLimit-Remaining"] = str(max(quota.remaining, 0))
        resp.headers["X-RateLimit-Reset"] = str(quota.reset)
        resp.headers["X-RateLimit-Used"] = str(quota.limit - max(quota.remaining, 0))
        resp.headers["X-RateLimit-Resource"] = "core"
        resp.headers["X-GitHub-Request-Id"] = secrets.token_hex(8).upper()
        resp.headers["X-GitHub-Api-Version-Selected"] = "2022-11-28"

    def _error_response(self, err: ApiError, key: str | None) -> web.Response:
        data: dict[str, Any] = {"message": err.message, "documentation_url": "https://docs.github.com/rest", "status": str(err.status)}
        if err.errors:
            data["errors"] = err.errors
        resp = web.Response(status=err.status, text=json.dumps(data), content_type="application/json", charset="utf-8")
        self._rate_headers(resp, key)
        return resp

    def _page(self, req: Req, items: list[Any], *, wrap: str | None = None, extra: dict[str, Any] | None = None) -> Reply:
        try:
            per_page = max(1, min(int(req.query.get("per_page", "30")), 100))
            page = max(1, int(req.query.get("page", "1")))
        except ValueError:
            raise _invalid("per_page and page must be integers") from None
        last = max(1, math.ceil(len(items) / per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        links = []

        def link(n: int, rel: str) -> str:
            q = dict(req.query)
            q["page"] = str(n)
            q["per_page"] = str(per_page)
            url = f"{self._api()}{req.path}?" + "&".join(f"{k}={v}" for k, v in q.items())
            return f'<{url}>; rel="{rel}"'

        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        if page > 1:
            links += [link(1, "first"), link(page - 1, "prev")]
        headers = {"Link": ", ".join(links)} if links else {}
        data: Any = chunk if wrap is None else {"total_count": len(items), wrap: chunk, **(extra or {})}
        return Reply(data, headers=headers)

    # ------------------------------------------------------------------ lookups

    def _repo(self, full_name: str) -> Repo:
        repo = self.repos.get(full_name.lower())
        if repo is None:
            raise _not_found()
        return repo

    def _repo_of(self, req: Req) -> Repo:
        return self._repo(f"{req.params['owner']}/{req.params['name']}")

    def _issue_of(self, req: Req, number: str | None = None) -> Issue:
        repo = self._repo_of(req)
        issue = self.issues.get((repo.full_name.lower(), int(number or req.params["number"])))
        if issue is None:
            raise _not_found()
        return issue

    def _comment_of(self, req: Req) -> IssueComment:
        repo = self._repo_of(req)
        comment = self.comments.get(int(req.params["cid"]))
        if comment is None or comment.repo.lower() != repo.full_name.lower():
            raise _not_found()
        return comment

    def _label(self, repo: Repo, name: str) -> Label:
        label = repo.labels.get(name.lower())
        if label is None:
            label = Label(name=name, id=self._next_id())
            repo.labels[name.lower()] = label
        return label

    def _clone_url(self, repo: Repo) -> str:
        return repo.clone_url or f"{self._web()}/{repo.full_name}.git"

    def _author_association(self, repo: Repo, login: str) -> str:
        if login.lower() == repo.owner.lower():
            return "OWNER"
        if login.lower() in repo.roles:
            return "COLLABORATOR"
        return "NONE"

    # ------------------------------------------------------------------ JSON shapes (the fields PyGithub reads)

    def user_json(self, login: str) -> dict[str, Any]:
        user = self.users.get(login.lower()) or self.add_user(login)
        return {
            "login": user.login,
            "id": user.id,
            "node_id": _node_id("User", user.id),
            "avatar_url": f"{self._web()}/avatars/{user.login}",
            "gravatar_id": "",
            "url": f"{self._api()}/users/{user.login}",
            "html_url": f"{self._web()}/{user.login}",
            "type": user.type,
            "site_admin": False,
        }

    def repo_json(self, repo: Repo) -> dict[str, Any]:
        return {
            "id": repo.id,
            "node_id": _node_id("Repository", repo.id),
            "name": repo.name,
            "full_name": repo.full_name,
            "owner": self.user_json(repo.owner),
            "private": repo.private,
            "visibility": "private" if repo.private else "public",
            "html_url": f"{self._web()}/{repo.full_name}",
            "description": None,
            "fork": repo.fork,
            "url": f"{self._api()}/repos/{repo.full_name}",
            "clone_url": self._clone_url(repo),
            "git_url": f"git://{self._host}/{repo.full_name}.git",
            "ssh_url": f"git@{self._host}:{repo.full_name}.git",
            "default_branch": repo.default_branch,
            "archived": False,
            "disabled": False,
            "created_at": iso(0),
            "updated_at": iso(0),
            "pushed_at": iso(0),
        }

    def _head_repo_json(self, pull: PullRequest) -> dict[str, Any] | None:
        if pull.head_repo is None:
            return None
        known = self.repos.get(pull.head_repo.lower())
        if known is not None:
            data = self.repo_json(known)
        else:
            owner, name = pull.head_repo.split("/", 1)
            ident = int(hashlib.sha256(pull.head_repo.lower().encode()).hexdigest()[:8], 16)
            data = {
                "id": ident,
                "node_id": _node_id("Repository", ident),
                "name": name,
                "full_name": pull.head_repo,
                "owner": self.user_json(owner),
                "private": False,
                "visibility": "public",
                "html_url": f"{self._web()}/{pull.head_repo}",
                "url": f"{self._api()}/repos/{pull.head_repo}",
                "default_branch": "main",
                "archived": False,
                "disabled": False,
            }
        data["fork"] = pull.fork
        data["clone_url"] = pull.head_clone_url or (self._clone_url(known) if known else f"{self._web()}/{pull.head_repo}.git")
        return data

    def label_json(self, repo: Repo, name: str) -> dict[str, Any]:
        label = self._label(repo, name)
        return {
            "id": label.id,
            "node_id": _node_id("Label", label.id),
            "url": f"{self._api()}/repos/{repo.full_name}/labels/{label.name}",
            "name": label.name,
            "color": label.color,
            "default": False,
            "description": label.description,
        }

    def issue_json(self, issue: Issue) -> dict[str, Any]:
        repo = self._repo(issue.repo)
        base = f"{self._api()}/repos/{repo.full_name}/issues/{issue.number}"
        data = {
            "url": base,
            "repository_url": f"{self._api()}/repos/{repo.full_name}",
            "labels_url": base + "/labels{/name}",
            "comments_url": base + "/comments",
            "events_url": base + "/events",
            "html_url": f"{self._web()}/{repo.full_name}/{'pull' if issue.is_pull else 'issues'}/{issue.number}",
            "id": issue.id,
            "node_id": _node_id("Issue", issue.id),
            "number": issue.number,
            "title": issue.title,
            "user": self.user_json(issue.user),
            "labels": [self.label_json(repo, name) for name in issue.labels],
            "state": issue.state,
            "state_reason": issue.state_reason,
            "locked": False,
            "assignee": self.user_json(issue.assignees[0]) if issue.assignees else None,
            "assignees": [self.user_json(a) for a in issue.assignees],
            "milestone": None,
            "comments": sum(1 for c in self.comments.values() if c.repo == issue.repo and c.issue_number == issue.number),
            "created_at": iso(issue.created_at),
            "updated_at": iso(issue.updated_at),
            "closed_at": iso(issue.closed_at) if issue.closed_at else None,
            "author_association": self._author_association(repo, issue.user),
            "body": issue.body,
        }
        if issue.is_pull:
            pr = f"{self._api()}/repos/{repo.full_name}/pulls/{issue.number}"
            html = f"{self._web()}/{repo.full_name}/pull/{issue.number}"
            data["pull_request"] = {"url": pr, "html_url": html, "diff_url": html + ".diff", "patch_url": html + ".patch", "merged_at": None}
        return data

    def pull_json(self, pull: PullRequest) -> dict[str, Any]:
        assert pull.issue is not None
        repo = self._repo(pull.repo)
        issue = pull.issue
        url = f"{self._api()}/repos/{repo.full_name}/pulls/{pull.number}"
        html = f"{self._web()}/{repo.full_name}/pull/{pull.number}"
        head_owner = pull.head_repo.split("/", 1)[0] if pull.head_repo else "ghost"
        return {
            "url": url,
            "id": pull.id,
            "node_id": _node_id("PullRequest", pull.id),
            "html_url": html,
            "diff_url": html + ".diff",
            "patch_url": html + ".patch",
            "issue_url": f"{self._api()}/repos/{repo.full_name}/issues/{pull.number}",
            "commits_url": url + "/commits",
            "review_comments_url": url + "/comments",
            "comments_url": f"{self._api()}/repos/{repo.full_name}/issues/{pull.number}/comments",
            "statuses_url": f"{self._api()}/repos/{repo.full_name}/statuses/{pull.head_sha}",
            "number": pull.number,
            "state": issue.state,
            "locked": False,
            "title": issue.title,
            "user": self.user_json(issue.user),
            "body": issue.body,
            "labels": [self.label_json(repo, name) for name in issue.labels],
            "created_at": iso(issue.created_at),
            "updated_at": iso(issue.updated_at),
            "closed_at": iso(issue.closed_at) if issue.closed_at else None,
            "merged_at": iso(issue.closed_at) if pull.merged and issue.closed_at else None,
            "merge_commit_sha": None,
            "draft": pull.draft,
            "merged": pull.merged,
            "mergeable": None,
            "author_association": self._author_association(repo, issue.user),
            "head": {
                "label": f"{head_owner}:{pull.head_ref}",
                "ref": pull.head_ref,
                "sha": pull.head_sha,
                "user": self.user_json(head_owner),
                "repo": self._head_repo_json(pull),
            },
            "base": {
                "label": f"{repo.owner}:{pull.base_ref}",
                "ref": pull.base_ref,
                "sha": pull.base_sha,
                "user": self.user_json(repo.owner),
                "repo": self.repo_json(repo),
            },
        }

    def comment_json(self, comment: IssueComment) -> dict[str, Any]:
        repo = self._repo(comment.repo)
        return {
            "id": comment.id,
            "node_id": _node_id("IssueComment", comment.id),
            "url": f"{self._api()}/repos/{repo.full_name}/issues/comments/{comment.id}",
            "html_url": f"{self._web()}/{repo.full_name}/pull/{comment.issue_number}#issuecomment-{comment.id}",
            "issue_url": f"{self._api()}/repos/{repo.full_name}/issues/{comment.issue_number}",
            "body": comment.body,
            "user": self.user_json(comment.user),
            "created_at": iso(comment.created_at),
            "updated_at": iso(comment.updated_at),
            "author_association": self._author_association(repo, comment.user),
        }

    def reaction_json(self, reaction: Reaction) -> dict[str, Any]:
        return {
            "id": reaction.id,
            "node_id": _node_id("Reaction", reaction.id),
            "user": self.user_json(reaction.user),
            "content": reaction.content,
            "created_at": iso(reaction.created_at),
        }

    def status_json(self, status: CommitStatus) -> dict[str, Any]:
        return {
            "url": f"{self._api()}/repos/{status.repo}/statuses/{status.sha}",
            "avatar_url": None,
            "id": status.id,
            "node_id": _node_id("StatusContext", status.id),
            "state": status.state,
            "description": status.description,
            "target_url": status.target_url,
            "context": status.context,
            "created_at": iso(status.created_at),
            "updated_at": iso(status.created_at),
            "creator": self.user_json(status.creator),
        }

    def app_json(self, app: App) -> dict[str, Any]:
        return {
            "id": app.id,
            "slug": app.slug,
            "node_id": _node_id("App", app.id),
            "name": app.name,
            "description": "",
            "owner": self.user_json(app.owner),
            "external_url": f"{self._web()}/apps/{app.slug}",
            "html_url": f"{self._web()}/apps/{app.slug}",
            "created_at": iso(0),
            "updated_at": iso(0),
            "permissions": {"checks": "write", "issues": "write", "pull_requests": "write", "statuses": "write", "contents": "read"},
            "events": ["issue_comment", "pull_request"],
        }

    def check_run_json(self, run: CheckRun) -> dict[str, Any]:
        url = f"{self._api()}/repos/{run.repo}/check-runs/{run.id}"
        return {
            "id": run.id,
            "node_id": _node_id("CheckRun", run.id),
            "head_sha": run.head_sha,
            "external_id": run.external_id,
            "url": url,
            "html_url": f"{self._web()}/{run.repo}/runs/{run.id}",
            "details_url": run.details_url,
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": iso(run.started_at),
            "completed_at": iso(run.completed_at) if run.completed_at else None,
            "name": run.name,
            "output": {
                "title": run.title,
                "summary": run.summary,
                "text": run.text,
                "annotations_count": len(run.annotations),
                "annotations_url": url + "/annotations",
            },
            "check_suite": {"id": run.check_suite_id},
            "app": self.app_json(self.apps[run.app_id]) if run.app_id in self.apps else {"id": run.app_id},
            "pull_requests": [],
        }

    # ------------------------------------------------------------------ mutations shared by handlers

    def _set_labels(self, repo: Repo, issue: Issue, labels: Any) -> None:
        if not isinstance(labels, list):
            raise _invalid("labels must be a list")
        names = [label["name"] if isinstance(label, dict) else str(label) for label in labels]
        for name in names:
            self._label(repo, name)
        issue.labels = list(dict.fromkeys(names))

    def _apply_check_output(self, run: CheckRun, output: Any) -> None:
        if output is None:
            return
        if not isinstance(output, dict) or "title" not in output or "summary" not in output:
            raise _invalid("output needs title and summary")
        summary, text = output.get("summary"), output.get("text")
        if len(summary or "") > MAX_CHECK_OUTPUT:
            raise _invalid("Invalid request.\n\nOnly 65535 characters are allowed; 'summary' has more.")
        if text is not None and len(text) > MAX_CHECK_OUTPUT:
            raise _invalid("Invalid request.\n\nOnly 65535 characters are allowed; 'text' has more.")
        annotations = output.get("annotations") or []
        if len(annotations) > MAX_ANNOTATIONS_PER_REQUEST:
            raise _invalid("Invalid request.\n\nOnly 50 annotations are allowed per request.")
        for a in annotations:
            if not isinstance(a, dict) or not {"path", "start_line", "end_line", "annotation_level", "message"} <= a.keys():
                raise _invalid("annotation needs path, start_line, end_line, annotation_level and message")
            if a["annotation_level"] not in ("notice", "warning", "failure"):
                raise _invalid("annotation_level must be notice, warning or failure")
        run.title, run.summary = output["title"], summary
        if "text" in output:
            run.text = text
        run.annotations.extend(dict(a) for a in annotations)  # GitHub appends annotations on every update

    def _apply_check_state(self, run: CheckRun, body: dict[str, Any]) -> None:
        status = body.get("status")
        conclusion = body.get("conclusion")
        if status is not None and status not in CHECK_STATUSES:
            raise _invalid(f"status {status!r} is not valid")
        if conclusion is not None and conclusion not in CHECK_CONCLUSIONS:
            raise _invalid(f"conclusion {conclusion!r} is not valid")
        if status == "completed" and conclusion is None and run.conclusion is None:
            raise _invalid("conclusion is required when status is completed")
        if conclusion is not None:
            run.conclusion, run.status = conclusion, "completed"
            run.completed_at = time.time()
        elif status is not None:
            run.status = status
            if status != "completed":
                run.conclusion, run.completed_at = None, None
        for key in ("details_url", "external_id", "name"):
            if key in body:
                setattr(run, key, body[key])


def _touch(issue: Issue) -> None:
    issue.updated_at = time.time()


# ----------------------------------------------------------------------------------------- routes
# Handlers run under fake.lock; they return JSON data, a Reply, or raise ApiError.


@route("GET", "/user")
def _get_user(fake: FakeGitHub, req: Req) -> Any:
    user = fake.users[req.actor.lower()]  # type: ignore[union-attr]
    if user.type == "Bot":
        raise ApiError(403, "Resource not accessible by integration")
    return {**fake.user_json(user.login), "name": user.login, "email": None}


@route("GET", "/users/(?P<login>[^/]+)")
def _get_named_user(fake: FakeGitHub, req: Req) -> Any:
    if req.params["login"].lower() not in fake.users:
        raise _not_found()
    return fake.user_json(req.params["login"])


@route("GET", "/rate_limit")
def _rate_limit(fake: FakeGitHub, req: Req) -> Any:
    quota = fake._quota(req.actor or "anonymous")
    core = {"limit": quota.limit, "remaining": max(quota.remaining, 0), "reset": quota.reset, "used": quota.limit - max(quota.remaining, 0), "resource": "core"}
    other = {"limit": 30, "remaining": 30, "reset": quota.reset, "used": 0}
    return {"resources": {"core": core, "search": {**other, "resource": "search"}, "graphql": {**core, "resource": "graphql"}}, "rate": core}


@route("GET", "/app", auth="jwt")
def _get_app(fake: FakeGitHub, req: Req) -> Any:
    return fake.app_json(fake.apps[req.app_id])  # type: ignore[index]


@route("GET", r"/app/installations/(?P<iid>\d+)", auth="jwt")
def _get_installation(fake: FakeGitHub, req: Req) -> Any:
    inst = fake.installations.get(int(req.params["iid"]))
    if inst is None or inst.app_id != req.app_id:
        raise _not_found()
    return {"id": inst.id, "app_id": inst.app_id, "account": fake.user_json(inst.account), "target_type": "Organization", "permissions": {}, "events": []}


@route("POST", r"/app/installations/(?P<iid>\d+)/access_tokens", auth="jwt")
def _create_access_token(fake: FakeGitHub, req: Req) -> Any:
    inst = fake.installations.get(int(req.params["iid"]))
    if inst is None or inst.app_id != req.app_id:
        raise _not_found()
    app = fake.apps[inst.app_id]
    token = "ghs_" + secrets.token_urlsafe(27)
    expires = time.time() + fake.installation_token_ttl
    fake.tokens[token] = Credential(login=app.bot_login, installation_id=inst.id, expires_at=expires)
    fake.issued_tokens.append(token)
    return Reply(
        {"token": token, "expires_at": iso(expires), "permissions": fake.app_json(app)["permissions"], "repository_selection": "all"},
        status=201,
    )


@route("GET", "/repos/{repo}")
def _get_repo(fake: FakeGitHub, req: Req) -> Any:
    return fake.repo_json(fake._repo_of(req))


@route("GET", "/repos/{repo}/collaborators/(?P<login>[^/]+)/permission")
def _get_permission(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    login = req.params["login"]
    if login.lower() not in fake.users:
        raise _not_found()
    role = repo.roles.get(login.lower())
    if role is None:
        role = Role("read", "read") if not repo.private else Role("none", "none")
    user = fake.user_json(login)
    return {
        "permission": role.permission,
        "role_name": role.role_name,
        "user": {**user, "permissions": {
            "admin": role.permission == "admin",
            "maintain": role.role_name in ("admin", "maintain"),
            "push": role.permission in ("admin", "write"),
            "triage": role.role_name in ("admin", "maintain", "write", "triage"),
            "pull": role.permission != "none",
        }},
    }


# pulls


@route("GET", "/repos/{repo}/pulls")
def _list_pulls(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    state = req.query.get("state", "open")
    pulls = [p for (r, _), p in fake.pulls.items() if r == repo.full_name.lower()]
    if state != "all":
        pulls = [p for p in pulls if p.state == state]
    if "base" in req.query:
        pulls = [p for p in pulls if p.base_ref == req.query["base"]]
    if "head" in req.query:
        pulls = [p for p in pulls if f"{(p.head_repo or 'ghost/x').split('/')[0]}:{p.head_ref}".lower() == req.query["head"].lower()]
    pulls.sort(key=lambda p: p.number, reverse=req.query.get("direction", "desc") == "desc")
    return fake._page(req, [fake.pull_json(p) for p in pulls])


@route("GET", r"/repos/{repo}/pulls/(?P<number>\d+)")
def _get_pull(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    pull = fake.pulls.get((repo.full_name.lower(), int(req.params["number"])))
    if pull is None:
        raise _not_found()
    return fake.pull_json(pull)


@route("POST", "/repos/{repo}/pulls")
def _create_pull(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    body = req.json if isinstance(req.json, dict) else {}
    head, base = body.get("head"), body.get("base")
    if not body.get("title") or not head or not base:
        raise _invalid(resource="PullRequest", code="missing_field", field="title/head/base")
    head_owner, _, head_ref = head.rpartition(":")
    head_repo_name = f"{head_owner}/{repo.name}" if head_owner and head_owner.lower() != repo.owner.lower() else repo.full_name
    head_repo = fake.repos.get(head_repo_name.lower())
    head_sha = (head_repo.branches if head_repo else {}).get(head_ref)
    if head_sha is None:
        raise _invalid(resource="PullRequest", code="invalid", field="head")
    if base not in repo.branches:
        raise _invalid(resource="PullRequest", code="invalid", field="base")
    pull = fake.add_pull(
        repo.full_name, head_sha=head_sha, head_ref=head_ref, base_ref=base, base_sha=repo.branches[base],
        head_repo=head_repo_name, draft=bool(body.get("draft", False)), author=req.actor or "ghost",
        title=body["title"], body=body.get("body"),
    )
    return Reply(fake.pull_json(pull), status=201)


@route("PATCH", r"/repos/{repo}/pulls/(?P<number>\d+)")
def _edit_pull(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    pull = fake.pulls.get((repo.full_name.lower(), int(req.params["number"])))
    if pull is None:
        raise _not_found()
    assert pull.issue is not None
    body = req.json if isinstance(req.json, dict) else {}
    if "title" in body:
        pull.issue.title = body["title"]
    if "body" in body:
        pull.issue.body = body["body"]
    if "state" in body:
        if body["state"] not in ("open", "closed"):
            raise _invalid(field="state", code="invalid")
        pull.issue.state = body["state"]
        pull.issue.closed_at = time.time() if body["state"] == "closed" else None
    if "base" in body:
        pull.base_ref = body["base"]
        pull.base_sha = repo.branches.get(body["base"], pull.base_sha)
    _touch(pull.issue)
    return fake.pull_json(pull)


# issues


@route("GET", "/repos/{repo}/issues")
def _list_issues(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    state = req.query.get("state", "open")
    issues = [i for (r, _), i in fake.issues.items() if r == repo.full_name.lower()]
    if state != "all":
        issues = [i for i in issues if i.state == state]
    if req.query.get("labels"):
        wanted = {name.strip().lower() for name in req.query["labels"].split(",") if name.strip()}
        issues = [i for i in issues if wanted <= {name.lower() for name in i.labels}]
    if req.query.get("creator"):
        issues = [i for i in issues if i.user.lower() == req.query["creator"].lower()]
    issues.sort(key=lambda i: (i.created_at, i.number), reverse=req.query.get("direction", "desc") == "desc")
    return fake._page(req, [fake.issue_json(i) for i in issues])


@route("POST", "/repos/{repo}/issues")
def _create_issue(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    body = req.json if isinstance(req.json, dict) else {}
    if not body.get("title"):
        raise _invalid(resource="Issue", code="missing_field", field="title")
    issue = fake.add_issue(repo.full_name, title=body["title"], body=body.get("body"), author=req.actor or "ghost")
    if "labels" in body:
        fake._set_labels(repo, issue, body["labels"])
    issue.assignees = list(body.get("assignees") or [])
    return Reply(fake.issue_json(issue), status=201)


@route("GET", r"/repos/{repo}/issues/(?P<number>\d+)")
def _get_issue(fake: FakeGitHub, req: Req) -> Any:
    return fake.issue_json(fake._issue_of(req))


@route("PATCH", r"/repos/{repo}/issues/(?P<number>\d+)")
def _edit_issue(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    issue = fake._issue_of(req)
    body = req.json if isinstance(req.json, dict) else {}
    if "title" in body:
        issue.title = body["title"]
    if "body" in body:
        issue.body = body["body"]
    if "state" in body:
        if body["state"] not in ("open", "closed"):
            raise _invalid(field="state", code="invalid")
        issue.state = body["state"]
        issue.closed_at = time.time() if body["state"] == "closed" else None
        issue.state_reason = body.get("state_reason") if body["state"] == "closed" else "reopened"
    if "labels" in body:
        fake._set_labels(repo, issue, body["labels"])
    if "assignees" in body:
        issue.assignees = list(body["assignees"] or [])
    _touch(issue)
    return fake.issue_json(issue)


@route("GET", r"/repos/{repo}/issues/(?P<number>\d+)/labels")
def _list_labels(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    issue = fake._issue_of(req)
    return fake._page(req, [fake.label_json(repo, name) for name in issue.labels])


@route("POST", r"/repos/{repo}/issues/(?P<number>\d+)/labels")
def _add_labels(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    issue = fake._issue_of(req)
    labels = req.json.get("labels") if isinstance(req.json, dict) else req.json
    fake._set_labels(repo, issue, list(issue.labels) + list(labels or []))
    _touch(issue)
    return [fake.label_json(repo, name) for name in issue.labels]


@route("PUT", r"/repos/{repo}/issues/(?P<number>\d+)/labels")
def _set_labels(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    issue = fake._issue_of(req)
    labels = req.json.get("labels") if isinstance(req.json, dict) else req.json
    fake._set_labels(repo, issue, list(labels or []))
    _touch(issue)
    return [fake.label_json(repo, name) for name in issue.labels]


@route("DELETE", r"/repos/{repo}/issues/(?P<number>\d+)/labels/(?P<label>[^/]+)")
def _remove_label(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    issue = fake._issue_of(req)
    kept = [name for name in issue.labels if name.lower() != req.params["label"].lower()]
    if len(kept) == len(issue.labels):
        raise ApiError(404, "Label does not exist")
    issue.labels = kept
    _touch(issue)
    return [fake.label_json(repo, name) for name in issue.labels]


# issue comments


@route("GET", r"/repos/{repo}/issues/(?P<number>\d+)/comments")
def _list_comments(fake: FakeGitHub, req: Req) -> Any:
    issue = fake._issue_of(req)
    comments = sorted(
        (c for c in fake.comments.values() if c.repo == issue.repo and c.issue_number == issue.number),
        key=lambda c: c.id,
    )
    return fake._page(req, [fake.comment_json(c) for c in comments])


@route("POST", r"/repos/{repo}/issues/(?P<number>\d+)/comments")
def _create_comment(fake: FakeGitHub, req: Req) -> Any:
    issue = fake._issue_of(req)
    body = req.json.get("body") if isinstance(req.json, dict) else None
    if not isinstance(body, str) or not body:
        raise _invalid(resource="IssueComment", code="missing_field", field="body")
    if len(body) > MAX_COMMENT_BODY:
        raise _invalid(resource="IssueComment", code="custom", field="body", message="Body is too long (maximum is 65536 characters)")
    comment = fake.add_comment(issue.repo, issue.number, body, user=req.actor or "ghost")
    _touch(issue)
    return Reply(fake.comment_json(comment), status=201)


@route("GET", r"/repos/{repo}/issues/comments/(?P<cid>\d+)")
def _get_comment(fake: FakeGitHub, req: Req) -> Any:
    return fake.comment_json(fake._comment_of(req))


@route("PATCH", r"/repos/{repo}/issues/comments/(?P<cid>\d+)")
def _edit_comment(fake: FakeGitHub, req: Req) -> Any:
    comment = fake._comment_of(req)
    body = req.json.get("body") if isinstance(req.json, dict) else None
    if not isinstance(body, str) or not body:
        raise _invalid(resource="IssueComment", code="missing_field", field="body")
    if len(body) > MAX_COMMENT_BODY:
        raise _invalid(resource="IssueComment", code="custom", field="body", message="Body is too long (maximum is 65536 characters)")
    comment.body = body
    comment.updated_at = time.time()
    return fake.comment_json(comment)


@route("DELETE", r"/repos/{repo}/issues/comments/(?P<cid>\d+)")
def _delete_comment(fake: FakeGitHub, req: Req) -> Any:
    comment = fake._comment_of(req)
    del fake.comments[comment.id]
    fake.reactions = [r for r in fake.reactions if r.comment_id != comment.id]
    return Reply(None, status=204)


@route("GET", r"/repos/{repo}/issues/comments/(?P<cid>\d+)/reactions")
def _list_reactions(fake: FakeGitHub, req: Req) -> Any:
    comment = fake._comment_of(req)
    return fake._page(req, [fake.reaction_json(r) for r in fake.reactions if r.comment_id == comment.id])


@route("POST", r"/repos/{repo}/issues/comments/(?P<cid>\d+)/reactions")
def _create_reaction(fake: FakeGitHub, req: Req) -> Any:
    comment = fake._comment_of(req)
    content = req.json.get("content") if isinstance(req.json, dict) else None
    if content not in REACTIONS:
        raise _invalid(resource="Reaction", code="invalid", field="content")
    for existing in fake.reactions:
        if existing.comment_id == comment.id and existing.user == req.actor and existing.content == content:
            return Reply(fake.reaction_json(existing), status=200)
    reaction = Reaction(id=fake._next_id(), repo=comment.repo, comment_id=comment.id, content=content, user=req.actor or "ghost", created_at=time.time())
    fake.reactions.append(reaction)
    return Reply(fake.reaction_json(reaction), status=201)


# commit statuses


@route("POST", "/repos/{repo}/statuses/(?P<sha>[^/]+)")
def _create_status(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    body = req.json if isinstance(req.json, dict) else {}
    if body.get("state") not in STATUS_STATES:
        raise _invalid(resource="Status", code="custom", field="state", message="state is not included in the list")
    description = body.get("description")
    if description is not None and len(description) > MAX_STATUS_DESCRIPTION:
        raise _invalid(resource="Status", code="custom", field="description", message="description is too long (maximum is 140 characters)")
    status = CommitStatus(
        id=fake._next_id(), repo=repo.full_name, sha=req.params["sha"], state=body["state"],
        context=body.get("context") or "default", description=description, target_url=body.get("target_url"),
        creator=req.actor or "ghost", created_at=time.time(),
    )
    fake.statuses.setdefault((repo.full_name.lower(), status.sha), []).insert(0, status)
    return Reply(fake.status_json(status), status=201)


def _statuses(fake: FakeGitHub, req: Req, ref: str) -> list[CommitStatus]:
    repo = fake._repo_of(req)
    return fake.statuses.get((repo.full_name.lower(), ref), [])


@route("GET", "/repos/{repo}/statuses/(?P<sha>[^/]+)")
def _list_statuses_legacy(fake: FakeGitHub, req: Req) -> Any:
    return fake._page(req, [fake.status_json(s) for s in _statuses(fake, req, req.params["sha"])])


@route("GET", "/repos/{repo}/commits/(?P<ref>[^/]+)/statuses")
def _list_statuses(fake: FakeGitHub, req: Req) -> Any:
    return fake._page(req, [fake.status_json(s) for s in _statuses(fake, req, req.params["ref"])])


@route("GET", "/repos/{repo}/commits/(?P<ref>[^/]+)/status")
def _combined_status(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    latest: dict[str, CommitStatus] = {}
    for s in _statuses(fake, req, req.params["ref"]):  # newest first
        latest.setdefault(s.context, s)
    states = {s.state for s in latest.values()}
    if states & {"error", "failure"}:
        state = "failure"
    elif not states or "pending" in states:
        state = "pending"
    else:
        state = "success"
    ref = req.params["ref"]
    return fake._page(
        req,
        [fake.status_json(s) for s in latest.values()],
        wrap="statuses",
        extra={
            "state": state,
            "sha": ref,
            "repository": fake.repo_json(repo),
            "commit_url": f"{fake._api()}/repos/{repo.full_name}/commits/{ref}",
            "url": f"{fake._api()}/repos/{repo.full_name}/commits/{ref}/status",
        },
    )


@route("GET", "/repos/{repo}/commits/(?P<ref>[^/]+)")
def _get_commit(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    ref = repo.branches.get(req.params["ref"], req.params["ref"])
    return {
        "sha": ref,
        "node_id": _node_id("Commit", ref),
        "url": f"{fake._api()}/repos/{repo.full_name}/commits/{ref}",
        "html_url": f"{fake._web()}/{repo.full_name}/commit/{ref}",
        "commit": {"message": "", "url": f"{fake._api()}/repos/{repo.full_name}/git/commits/{ref}"},
        "parents": [],
        "files": [],
    }


# check runs


def _require_app(fake: FakeGitHub, req: Req) -> int:
    cred_app = None
    for cred in fake.tokens.values():
        if cred.login == req.actor and cred.installation_id is not None:
            cred_app = fake.installations[cred.installation_id].app_id
            break
    if cred_app is None:
        raise ApiError(403, "You must authenticate via a GitHub App.")
    return cred_app


@route("POST", "/repos/{repo}/check-runs")
def _create_check_run(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    app_id = _require_app(fake, req)
    body = req.json if isinstance(req.json, dict) else {}
    if not body.get("name") or not body.get("head_sha"):
        raise _invalid(resource="CheckRun", code="missing_field", field="name/head_sha")
    run = CheckRun(
        id=fake._next_id(), repo=repo.full_name, head_sha=body["head_sha"], name=body["name"], app_id=app_id,
        status="queued", conclusion=None, started_at=time.time(), completed_at=None, check_suite_id=fake._next_id(),
    )
    fake._apply_check_state(run, {"status": body.get("status", "queued"), **{k: v for k, v in body.items() if k != "status"}})
    fake._apply_check_output(run, body.get("output"))
    fake.check_runs[run.id] = run
    return Reply(fake.check_run_json(run), status=201)


def _check_run_of(fake: FakeGitHub, req: Req) -> CheckRun:
    repo = fake._repo_of(req)
    run = fake.check_runs.get(int(req.params["id"]))
    if run is None or run.repo.lower() != repo.full_name.lower():
        raise _not_found()
    return run


@route("GET", r"/repos/{repo}/check-runs/(?P<id>\d+)")
def _get_check_run(fake: FakeGitHub, req: Req) -> Any:
    return fake.check_run_json(_check_run_of(fake, req))


@route("PATCH", r"/repos/{repo}/check-runs/(?P<id>\d+)")
def _edit_check_run(fake: FakeGitHub, req: Req) -> Any:
    run = _check_run_of(fake, req)
    if _require_app(fake, req) != run.app_id:
        raise ApiError(403, "Invalid app_id `%d` - check run can only be modified by the GitHub App that created it." % run.app_id)
    body = req.json if isinstance(req.json, dict) else {}
    fake._apply_check_state(run, body)
    fake._apply_check_output(run, body.get("output"))
    return fake.check_run_json(run)


@route("GET", r"/repos/{repo}/check-runs/(?P<id>\d+)/annotations")
def _list_annotations(fake: FakeGitHub, req: Req) -> Any:
    return fake._page(req, list(_check_run_of(fake, req).annotations))


@route("GET", "/repos/{repo}/commits/(?P<ref>[^/]+)/check-runs")
def _list_check_runs(fake: FakeGitHub, req: Req) -> Any:
    repo = fake._repo_of(req)
    runs = [r for r in fake.check_runs.values() if r.repo.lower() == repo.full_name.lower() and r.head_sha == req.params["ref"]]
    if req.query.get("check_name"):
        runs = [r for r in runs if r.name == req.query["check_name"]]
    if req.query.get("status"):
        runs = [r for r in runs if r.status == req.query["status"]]
    if req.query.get("app_id"):
        runs = [r for r in runs if str(r.app_id) == req.query["app_id"]]
    runs.sort(key=lambda r: r.id, reverse=True)
    if req.query.get("filter", "latest") == "latest":
        seen: set[tuple[str, int]] = set()
        latest = []
        for r in runs:
            if (r.name, r.app_id) not in seen:
                seen.add((r.name, r.app_id))
                latest.append(r)
        runs = latest
    return fake._page(req, [fake.check_run_json(r) for r in runs], wrap="check_runs")
