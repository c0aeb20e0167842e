"""The GitHub adapter: the only module that imports PyGithub.

Synchronous by design (PyGithub is); async callers wrap calls in ``asyncio.to_thread``. One instance is safe to
share between threads.

``GitHubAdapter`` is the one class callers build. It is put together from parts: ``_Transport`` (PyGithub's
clients, retries, rate limits, errors), ``_IdentityAPI`` (the bot's login and git token) and one part per
consumer protocol of ``handlers/context.py``: ``_PrecheckAPI`` (comments, statuses, check runs),
``_CommandAPI`` (permission, pull request, reactions), ``_RestartAPI`` (open PRs, statuses), ``_TierOrderAPI``
(the bot's branch pulls) and ``_DriftAPI`` (repository, issues).

Decisions worth knowing:

* **Retries are ours, not PyGithub's.** PyGithub is built with ``retry=None`` and every HTTP step goes through
  :meth:`_Transport._call`: 5xx answers, connection errors and timeouts are retried ``retries`` times with
  exponential backoff (``backoff * 2**n``, capped at 30 s, with a little jitter); a primary rate limit
  (403/429 with ``X-RateLimit-Remaining: 0``) waits until ``X-RateLimit-Reset`` (against the response's
  ``Date`` header when the local clock is visibly skewed); a secondary rate limit waits
  ``Retry-After`` (or a minute when GitHub gives none). The total rate-limit wait of one step is bounded by
  ``max_rate_limit_wait``; beyond it the step fails at once with ``GitHubError("… rate limited until …")``.
  ``GithubRetry`` was not used: it adds a second to every reset wait, waits a fixed 60 s on secondary limits
  without ``Retry-After``, never retries PATCH, recognises rate limits only by message text, and surfaces
  exhaustion as a bare ``requests.RetryError``.
* **Retried writes.** A write that timed out may have landed. Statuses and reactions are idempotent on
  GitHub's side; :meth:`upsert_comments` heals a duplicate on its next run (it keeps the oldest comment per
  part and deletes the others); a duplicated check run is harmless (GitHub shows the newest per name).
* **Timeouts are whole seconds**: PyGithub only accepts an ``int``; ``timeout`` is rounded up (minimum 1 s).
* **The bot's own comments** are those whose author is the authenticated identity (``GET /user`` for a
  token; ``<app slug>[bot]`` from ``GET /app`` for a GitHub App) *and* whose first line is exactly the hidden
  marker. A human quoting the marker is never touched. ``bot_login=`` skips the lookup.
* **Fork** means the head repository differs from the base repository (or was deleted): that is the
  security-relevant question ("is the head code from outside this repo?"), not GitHub's ``repo.fork`` flag.
* **Permissions** use ``role_name`` (admin/maintain/write/triage/read/none); a custom role falls back to the
  legacy ``permission`` field (admin/write/read/none); a 404 (no such user) is ``"none"``.
* **Check runs** are GitHub-App only. ``upsert_check_run`` reuses this app's newest run of that name on the
  sha while it is not completed; a completed run is superseded by a new one (updating it would *append*
  annotations to the old ones). Annotations go 50 per request: the first batch with the status/conclusion,
  the rest as output-only updates.
* **No secret leaves this module**: ``GitHubAuth`` and the adapter mask secrets in ``repr``; errors carry the
  operation, HTTP status and GitHub's short ``message`` only (scrubbed of the token and key); PyGithub's
  exceptions are not chained.
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Any, Callable, Iterable, Sequence, TypeVar
from urllib.parse import quote

import requests
from github import Auth, Github, GithubException, GithubIntegration
from github.CommitStatus import CommitStatus as _GhCommitStatus
from github.PaginatedList import PaginatedList

from bot.engine.core.errors import ConfigError, GitHubError
from bot.engine.chatops.github_models import BranchPullRequest, CheckAnnotation, IssueInfo, PullRequestInfo, RepositoryInfo, StatusInfo
from bot.engine.core.github_limits import ANNOTATIONS_PER_REQUEST, MAX_CHECK_TEXT, MAX_CHECK_TITLE, MAX_COMMENT, MAX_STATUS_DESCRIPTION

log = logging.getLogger(__name__)

T = TypeVar("T")

ROLES = ("admin", "maintain", "write", "triage", "read", "none")
STATUS_STATES = frozenset({"error", "failure", "pending", "success"})
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
CHECK_STATUSES = frozenset({"queued", "in_progress", "completed"})
CHECK_CONCLUSIONS = frozenset(
    {"action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"}
)
ANNOTATION_KEYS = frozenset({"path", "start_line", "end_line", "annotation_level", "message"})
MAX_BACKOFF = 30.0
SECONDARY_DEFAULT_WAIT = 60.0  # GitHub: without Retry-After, wait at least a minute
RESET_MARGIN = 0.1
MAX_CLOCK_SKEW = 1.5  # seconds of disagreement with GitHub's Date header that we attribute to its resolution
MIN_REPEAT_RATE_WAIT = 1.0  # a rate limit again right after waiting: our clock was early, wait at least this
_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_ELLIPSIS = "…"


class GitHubNotFound(GitHubError):
    """GitHub answered 404 (no such object, or no access to it)."""


@dataclass(frozen=True, repr=False)
class GitHubAuth:
    """Either a token, or a GitHub App (id, PEM private key, installation id)."""

    token: str | None = None
    app_id: int | None = None
    private_key: str | None = None
    installation_id: int | None = None
    api_url: str = "https://api.github.com"

    @property
    def is_app(self) -> bool:
        return self.app_id is not None

    def __repr__(self) -> str:
        parts = []
        if self.token is not None:
            parts.append("token='***'")
        if self.app_id is not None:
            parts.append(f"app_id={self.app_id}")
        if self.private_key is not None:
            parts.append("private_key='***'")
        if self.installation_id is not None:
            parts.append(f"installation_id={self.installation_id}")
        parts.append(f"api_url={self.api_url!r}")
        return f"GitHubAuth({', '.join(parts)})"

    __str__ = __repr__

    def validate(self) -> None:
        app_fields = (self.app_id, self.private_key, self.installation_id)
        if self.token is not None:
            if any(f is not None for f in app_fields):
                raise ConfigError("GitHub auth: give either a token or GitHub App credentials, not both")
            if not self.token.strip():
                raise ConfigError("GitHub auth: the token is empty")
        elif any(f is None for f in app_fields):
            raise ConfigError("GitHub auth: a GitHub App needs app_id, private_key and installation_id")
        if not re.match(r"^https?://[^/\s]+", self.api_url or ""):
            raise ConfigError("GitHub auth: api_url must be an http(s) URL")


_TOKEN_PATTERNS = (
    (re.compile(r"\b(gh[pousr]_|github_pat_)[A-Za-z0-9_]{8,}"), r"\1***"),
    (re.compile(r'("token"\s*:\s*")[^"]*(")'), r"\1***\2"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"), "***jwt***"),
)
_KNOWN_SECRETS: set[str] = set()  # configured tokens of any shape (e.g. legacy 40-hex ones)
_SECRETS_LOCK = threading.Lock()


def redact(text: str) -> str:
    """`text` without any token, JWT or configured secret."""
    with _SECRETS_LOCK:
        known = sorted(_KNOWN_SECRETS, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, "***")
    for pattern, replacement in _TOKEN_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class _RedactingFilter(logging.Filter):
    """PyGithub's Requester logs response bodies at DEBUG (an installation token mint included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is not ours to fix
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


for _name in ("github.Requester", "github.GithubRetry", "github.GithubIntegration", "github.Auth"):
    _logger = logging.getLogger(_name)
    if not any(isinstance(f, _RedactingFilter) for f in _logger.filters):
        _logger.addFilter(_RedactingFilter())


def _marker_re(marker: str) -> re.Pattern[str]:
    return re.compile(r"^<!--\s*" + re.escape(marker) + r"(?:\s+part=(\d+))?\s*-->$")


def _first_line(body: str) -> str:
    return body.split("\n", 1)[0].strip()


def _normalise(body: str) -> str:
    return body.replace("\r\n", "\n").rstrip()


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + _ELLIPSIS

def _repo_path(repo: str) -> str:
    """`repo` when it is an ``owner/name`` GitHub accepts in a URL path; ValueError otherwise."""
    if not isinstance(repo, str) or not _REPO_RE.match(repo) or ".." in repo:
        raise ValueError(f"not an owner/name repository: {repo!r}")
    return repo


def _pr_info(pr: Any, base_full: str) -> PullRequestInfo:
    """A PyGithub pull request as the handlers read it."""
    head, base = pr.head, pr.base
    head_repo = head.repo
    head_full = head_repo.full_name if head_repo is not None else None
    base_repo_full = base.repo.full_name if base.repo is not None else base_full
    return PullRequestInfo(
        number=pr.number,
        state=pr.state,
        draft=bool(pr.draft),
        head_sha=head.sha,
        head_ref=head.ref,
        head_repo=head_full,
        head_clone_url=head_repo.clone_url if head_repo is not None else None,
        base_ref=base.ref,
        base_sha=base.sha,
        fork=head_full is None or head_full.lower() != base_repo_full.lower(),
        author=pr.user.login if pr.user is not None else None,
    )


def _branch_pull(pr: Any) -> BranchPullRequest:
    """A PyGithub pull request as the bot's follow-up PRs are read."""
    return BranchPullRequest(
        number=pr.number,
        title=pr.title or "",
        body=pr.body or "",
        head_ref=pr.head.ref,
        head_sha=pr.head.sha,
        base_ref=pr.base.ref,
        author=pr.user.login if pr.user is not None else None,
        html_url=pr.html_url or "",
    )


def _issue_info(issue: Any) -> IssueInfo:
    """A PyGithub issue as the drift reports read it."""
    return IssueInfo(
        number=issue.number,
        title=issue.title or "",
        body=issue.body or "",
        state=issue.state,
        labels=tuple(label.name for label in issue.labels),
        author=issue.user.login if issue.user is not None else None,
        html_url=issue.html_url or "",
    )


def _title_body_edits(title: str | None, body: str | None, what: str) -> dict[str, Any]:
    """The fields of an issue/PR edit that are set, with GitHub's body length limit enforced before sending."""
    changes: dict[str, str] = {}
    if title is not None:
        changes["title"] = title
    if body is not None:
        if len(body) > MAX_COMMENT:
            raise ValueError(f"{what} body is longer than GitHub's {MAX_COMMENT} characters")
        changes["body"] = body
    return changes


class _Transport:
    """PyGithub's clients and every HTTP step through `_call`: retries, backoff, rate limits, errors without secrets."""

    def __init__(
        self,
        auth: GitHubAuth,
        *,
        timeout: float = 15,
        retries: int = 4,
        backoff: float = 0.5,
        max_rate_limit_wait: float = 60,
        per_page: int = 100,
        min_write_interval: float = 1.0,
        bot_login: str | None = None,
        user_agent: str = "fluxwarden",
    ) -> None:
        """`min_write_interval`: PyGithub spaces writes this far apart (GitHub's advice against secondary rate
        limits; 0 disables). `bot_login`: the bot's login, when known, saves one request."""
        auth.validate()
        self.auth = auth
        if auth.token and len(auth.token) >= 8:  # (a shorter "token" would redact ordinary words)
            with _SECRETS_LOCK:
                _KNOWN_SECRETS.add(auth.token)
        self.api_url = auth.api_url.rstrip("/")
        self.timeout = max(1, math.ceil(timeout))
        self.retries = max(0, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.max_rate_limit_wait = max(0.0, float(max_rate_limit_wait))
        self.rate_limit_remaining: int | None = None
        self._bot_login = bot_login
        self._lock = threading.Lock()
        self._sleep = time.sleep
        common: dict[str, Any] = dict(
            base_url=self.api_url,
            timeout=self.timeout,
            user_agent=user_agent,
            per_page=per_page,
            retry=None,
            seconds_between_requests=None,
            seconds_between_writes=min_write_interval or None,
            lazy=True,
        )
        self._app_auth: Auth.AppAuth | None = None
        self._integration: GithubIntegration | None = None
        if auth.is_app:
            try:
                self._app_auth = Auth.AppAuth(int(auth.app_id), auth.private_key)  # type: ignore[arg-type]
                self._app_auth.create_jwt()  # fail early (and offline) on a bad key
            except Exception:
                raise ConfigError("GitHub App private_key is not a usable PEM RSA private key") from None
            self._pg_auth: Auth.Auth = self._app_auth.get_installation_auth(int(auth.installation_id))  # type: ignore[arg-type]
            self._integration = GithubIntegration(auth=self._app_auth, **common)
        else:
            self._pg_auth = Auth.Token(auth.token)  # type: ignore[arg-type]
        self._gh = Github(auth=self._pg_auth, **common)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(api_url={self.api_url!r}, is_app={self.is_app})"

    def close(self) -> None:
        self._gh.close()
        if self._integration is not None:
            self._integration.close()

    @property
    def is_app(self) -> bool:
        return self.auth.is_app

    def _scrub(self, text: str) -> str:
        if self.auth.private_key:
            text = text.replace(self.auth.private_key, "***")
        return redact(text)

    def _note_rate(self, headers: dict[str, Any] | None = None) -> None:
        remaining: Any = None
        if headers:
            remaining = headers.get("x-ratelimit-remaining")
        if remaining is None:
            remaining = self._gh.requester.rate_limiting[0]
        try:
            value = int(float(remaining))
        except (TypeError, ValueError):
            return
        if value >= 0:
            self.rate_limit_remaining = value

    @staticmethod
    def _server_now(headers: dict[str, Any]) -> float:
        """Now on GitHub's clock: the local clock unless the response's Date shows it off by more than the
        Date header's one-second resolution can tell."""
        local = time.time()
        date = headers.get("date")
        if date:
            try:
                server = email.utils.parsedate_to_datetime(date).timestamp()
            except (TypeError, ValueError):
                return local
            if abs(server - local) > MAX_CLOCK_SKEW:
                return server
        return local

    def _rate_limit_wait(self, exc: GithubException) -> tuple[float, float] | None:
        """(seconds to wait, epoch when the limit lifts) if `exc` is a rate limit, else None."""
        if exc.status not in (403, 429):
            return None
        headers = {str(k).lower(): v for k, v in (exc.headers or {}).items()}
        retry_after = headers.get("retry-after")
        if retry_after is not None:
            try:
                wait = float(retry_after)
            except ValueError:
                try:
                    wait = email.utils.parsedate_to_datetime(retry_after).timestamp() - self._server_now(headers)
                except (TypeError, ValueError):
                    wait = SECONDARY_DEFAULT_WAIT
            wait = max(wait, 0.0)
            return wait, time.time() + wait
        if str(headers.get("x-ratelimit-remaining", "")).strip() == "0" and headers.get("x-ratelimit-reset"):
            try:
                reset = float(headers["x-ratelimit-reset"])
            except ValueError:
                reset = time.time() + SECONDARY_DEFAULT_WAIT
            wait = max(reset - self._server_now(headers), 0.0) + RESET_MARGIN
            return wait, time.time() + wait
        message = ""
        if isinstance(exc.data, dict):
            message = str(exc.data.get("message") or "").lower()
        if exc.status == 429 or "rate limit" in message:
            return SECONDARY_DEFAULT_WAIT, time.time() + SECONDARY_DEFAULT_WAIT
        return None

    def _error(self, what: str, exc: GithubException) -> GitHubError:
        message = ""
        if isinstance(exc.data, dict):
            message = str(exc.data.get("message") or "")
        message = self._scrub(" ".join(message.split()))[:200]
        cls = GitHubNotFound if exc.status == 404 else GitHubError
        suffix = f": {message}" if message else ""
        return cls(f"GitHub {self._scrub(what)} failed: HTTP {exc.status}{suffix}", status=exc.status)

    def _backoff_delay(self, attempt: int) -> float:
        base = min(self.backoff * (2**attempt), MAX_BACKOFF)
        return base + random.uniform(0, base * 0.1)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one GitHub step with retries; PyGithub and requests errors become GitHubError."""
        attempt = 0
        waited = 0.0
        rate_waits = 0
        while True:
            try:
                result = fn()
            except GithubException as exc:
                self._note_rate({str(k).lower(): v for k, v in (exc.headers or {}).items()})
                limited = self._rate_limit_wait(exc)
                if limited is not None:
                    wait, until = limited
                    if rate_waits:
                        wait = max(wait, MIN_REPEAT_RATE_WAIT)
                    rate_waits += 1
                    if waited + wait > self.max_rate_limit_wait or rate_waits > self.retries + 2:
                        when = datetime.fromtimestamp(until, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                        raise GitHubError(
                            f"GitHub {self._scrub(what)} failed: rate limited until {when}", status=exc.status
                        ) from None
                    log.warning("GitHub %s: rate limited (HTTP %s), waiting %.1fs", what, exc.status, wait)
                    self._sleep(wait)
                    waited += wait
                    continue
                if exc.status is not None and 500 <= exc.status <= 599 and attempt < self.retries:
                    delay = self._backoff_delay(attempt)
                    attempt += 1
                    log.warning("GitHub %s: HTTP %s, retry %d/%d in %.2fs", what, exc.status, attempt, self.retries, delay)
                    self._sleep(delay)
                    continue
                raise self._error(what, exc) from None
            except (requests.exceptions.Timeout, requests.exceptions.ConnectionError) as exc:
                kind = "timed out" if isinstance(exc, requests.exceptions.Timeout) else "connection failed"
                if attempt < self.retries:
                    delay = self._backoff_delay(attempt)
                    attempt += 1
                    log.warning("GitHub %s: %s, retry %d/%d in %.2fs", what, kind, attempt, self.retries, delay)
                    self._sleep(delay)
                    continue
                raise GitHubError(
                    f"GitHub {self._scrub(what)} failed: {kind} after {attempt + 1} attempt(s) (timeout {self.timeout}s)"
                ) from None
            except requests.exceptions.RequestException as exc:
                raise GitHubError(f"GitHub {self._scrub(what)} failed: {type(exc).__name__}") from None
            self._note_rate()
            return result



class _IdentityAPI(_Transport):
    """Who the bot is on GitHub: its login and the token `git fetch` uses."""

    def installation_token(self) -> str | None:
        """A token for `git fetch`: the current App installation token (minted/refreshed as needed) or the token."""
        if not self.is_app:
            return self.auth.token
        return self._call("mint installation token", lambda: self._pg_auth.token)

    @property
    def bot_login(self) -> str:
        """The login the bot's comments carry: the token's user, or ``<app slug>[bot]``."""
        with self._lock:
            if self._bot_login is not None:
                return self._bot_login
        if self.is_app:
            assert self._integration is not None
            integration = self._integration
            login = self._call("get app", lambda: f"{integration.get_app().slug}[bot]")
        else:
            login = self._call("get authenticated user", lambda: self._gh.get_user().login)
        with self._lock:
            self._bot_login = login
        return login


class _PrecheckAPI(_IdentityAPI):
    """What a precheck posts: the bot's marked comments (and plain ones), commit statuses, check runs."""

    def upsert_comments(self, repo: str, number: int, marker: str, bodies: Sequence[str]) -> list[int]:
        """Make the bot's marked comments on `repo#number` exactly `bodies` (part 1..N); returns their ids.

        Each body must start with its marker line (``<!-- marker -->`` for part 1, ``<!-- marker part=N -->``).
        Existing parts are edited in place (not when unchanged), missing ones created, surplus parts and
        duplicates of a part deleted, in that order (the thread is never without a report). Idempotent.
        """
        full = _repo_path(repo)
        pattern = _marker_re(marker)
        for i, body in enumerate(bodies, 1):
            match = pattern.match(_first_line(body))
            if match is None or int(match.group(1) or 1) != i:
                raise ValueError(f"comment body {i} does not start with its marker line for part {i}")
            if len(body) > MAX_COMMENT:
                raise ValueError(f"comment body {i} is longer than GitHub's {MAX_COMMENT} characters")
        me = self.bot_login.lower()
        issue = self._gh.get_repo(full).get_issue(int(number))

        def mine() -> dict[int, list[Any]]:
            found: dict[int, list[Any]] = {}
            for comment in issue.get_comments():
                if comment.user is None or (comment.user.login or "").lower() != me:
                    continue
                match = pattern.match(_first_line(comment.body or ""))
                if match is not None:
                    found.setdefault(int(match.group(1) or 1), []).append(comment)
            return found

        existing = self._call(f"list comments of {repo}#{number}", mine)
        surplus: list[Any] = []
        for part, comments in existing.items():
            comments.sort(key=lambda c: c.id)
            surplus.extend(comments[1:] if part <= len(bodies) else comments)
        ids: list[int] = []
        for part, body in enumerate(bodies, 1):
            current = existing.get(part, [None])[0]
            if current is None:
                created = self._call(f"create comment on {repo}#{number}", partial(issue.create_comment, body))
                ids.append(created.id)
            else:
                if _normalise(current.body or "") != _normalise(body):
                    self._call(f"edit comment {current.id} on {repo}", partial(current.edit, body))
                ids.append(current.id)
        for comment in sorted(surplus, key=lambda c: c.id):
            try:
                self._call(f"delete comment {comment.id} on {repo}", comment.delete)
            except GitHubNotFound:
                pass  # already gone
        return ids

    def comment(self, repo: str, number: int, body: str) -> int:
        """Post a plain comment on an issue or PR; returns its id."""
        full = _repo_path(repo)
        if len(body) > MAX_COMMENT:
            raise ValueError(f"comment body is longer than GitHub's {MAX_COMMENT} characters")
        issue = self._call(f"get issue {repo}#{number}", lambda: self._gh.get_repo(full).get_issue(int(number)))
        return int(self._call(f"create comment on {repo}#{number}", lambda: issue.create_comment(body)).id)

    def set_status(
        self, repo: str, sha: str, context: str, state: str, description: str, target_url: str | None = None
    ) -> None:
        if state not in STATUS_STATES:
            raise ValueError(f"commit status state must be one of {sorted(STATUS_STATES)}")
        payload: dict[str, Any] = {
            "state": state,
            "context": context,
            "description": _truncate(description or "", MAX_STATUS_DESCRIPTION),
        }
        if target_url:
            payload["target_url"] = target_url
        path = f"/repos/{_repo_path(repo)}/statuses/{quote(sha, safe='')}"
        self._call(
            f"set status {context} on {repo}@{sha[:12]}",
            lambda: self._gh.requester.requestJsonAndCheck("POST", path, input=payload),
        )

    def upsert_check_run(
        self,
        repo: str,
        sha: str,
        name: str,
        *,
        status: str,
        conclusion: str | None,
        title: str,
        summary: str,
        text: str | None = None,
        annotations: Iterable[CheckAnnotation] = (),
    ) -> int:
        """Create or update this app's check run `name` on `sha`; returns its id. GitHub App only."""
        if not self.is_app:
            raise GitHubError("check runs need GitHub App authentication (a token cannot create them)")
        if status not in CHECK_STATUSES:
            raise ValueError(f"check run status must be one of {sorted(CHECK_STATUSES)}")
        if conclusion is not None and conclusion not in CHECK_CONCLUSIONS:
            raise ValueError(f"unknown check run conclusion {conclusion!r}")
        if status == "completed" and conclusion is None:
            raise ValueError("a completed check run needs a conclusion")
        if status != "completed" and conclusion is not None:
            raise ValueError("a conclusion needs status='completed'")
        notes: list[dict[str, Any]] = [dict(a) for a in annotations]
        for a in notes:
            missing = ANNOTATION_KEYS - a.keys()
            if missing:
                raise ValueError(f"annotation lacks {sorted(missing)}")
        full = _repo_path(repo)
        gh_repo = self._gh.get_repo(full)
        output: dict[str, Any] = {"title": _truncate(title, MAX_CHECK_TITLE), "summary": _truncate(summary, MAX_CHECK_TEXT)}
        if text is not None:
            output["text"] = _truncate(text, MAX_CHECK_TEXT)
        batches = [notes[i : i + ANNOTATIONS_PER_REQUEST] for i in range(0, len(notes), ANNOTATIONS_PER_REQUEST)] or [[]]
        app_id = int(self.auth.app_id)  # type: ignore[arg-type]

        def find() -> Any:
            runs = [
                run
                for run in gh_repo.get_commit(sha).get_check_runs(check_name=name, filter="all")
                if run.app is not None and run.app.id == app_id
            ]
            runs.sort(key=lambda run: run.id, reverse=True)
            return runs[0] if runs and runs[0].status != "completed" else None

        run = self._call(f"find check run {name!r} on {repo}@{sha[:12]}", find)
        state: dict[str, Any] = {"status": status}
        if conclusion is not None:
            state["conclusion"] = conclusion
        first = {**output, "annotations": batches[0]} if batches[0] else output
        if run is None:
            run = self._call(
                f"create check run {name!r} on {repo}@{sha[:12]}",
                lambda: gh_repo.create_check_run(name=name, head_sha=sha, output=first, **state),
            )
        else:
            self._call(f"update check run {run.id} on {repo}", lambda: run.edit(output=first, **state))
        for batch in batches[1:]:
            self._call(
                f"add annotations to check run {run.id} on {repo}",
                partial(run.edit, output={**output, "annotations": batch}),
            )
        return int(run.id)


class _CommandAPI(_Transport):
    """What a `/fluxwarden` comment needs: the commenter's permission, the pull request, a reaction."""

    def permission(self, repo: str, login: str) -> str:
        """admin|maintain|write|triage|read|none for `login` on `repo`."""
        path = f"/repos/{_repo_path(repo)}/collaborators/{quote(login, safe='')}/permission"
        try:
            _, data = self._call(f"permission of {login} on {repo}", lambda: self._gh.requester.requestJsonAndCheck("GET", path))
        except GitHubNotFound:
            return "none"
        if not isinstance(data, dict):
            return "none"
        role = data.get("role_name")
        if role in ROLES:
            return role
        legacy = data.get("permission")
        return legacy if legacy in ROLES else "none"

    def pull_request(self, repo: str, number: int) -> PullRequestInfo:
        full = _repo_path(repo)
        return self._call(f"get pull request {repo}#{number}", lambda: _pr_info(self._gh.get_repo(full).get_pull(int(number)), full))

    def add_reaction(self, repo: str, comment_id: int, content: str = "eyes") -> None:
        if content not in REACTIONS:
            raise ValueError(f"unknown reaction {content!r}")
        path = f"/repos/{_repo_path(repo)}/issues/comments/{int(comment_id)}/reactions"
        self._call(
            f"react to comment {comment_id} on {repo}",
            lambda: self._gh.requester.requestJsonAndCheck(
                "POST", path, input={"content": content}, headers={"Accept": "application/vnd.github+json"}
            ),
        )


class _RestartAPI(_Transport):
    """What restarting abandoned prechecks reads: open pull requests and their commit statuses."""

    def open_pull_requests(self, repo: str) -> list[PullRequestInfo]:
        full = _repo_path(repo)
        return self._call(
            f"list open pull requests of {repo}",
            lambda: [_pr_info(pr, full) for pr in self._gh.get_repo(full).get_pulls(state="open")],
        )

    def latest_status(self, repo: str, sha: str, context: str) -> str | None:
        """The state of the newest commit status with `context` on `sha`, or None."""
        path = f"/repos/{_repo_path(repo)}/commits/{quote(sha, safe='')}/statuses"

        def find() -> str | None:
            for status in PaginatedList(_GhCommitStatus, self._gh.requester, path, None):  # newest first
                if status.context == context:
                    return status.state
            return None

        return self._call(f"list statuses of {repo}@{sha[:12]}", find)

    def statuses(self, repo: str, sha: str, limit: int = 100) -> list[StatusInfo]:
        """The newest `limit` commit statuses on `sha`, every context, newest first (GitHub's order)."""
        path = f"/repos/{_repo_path(repo)}/commits/{quote(sha, safe='')}/statuses"

        def read() -> list[StatusInfo]:
            out: list[StatusInfo] = []
            for status in PaginatedList(_GhCommitStatus, self._gh.requester, path, None):  # newest first
                created = status.created_at
                out.append(StatusInfo(
                    state=status.state,
                    context=status.context,
                    description=status.description or "",
                    created_at=(created if created.tzinfo else created.replace(tzinfo=timezone.utc)).timestamp() if created else 0.0,
                    creator=status.creator.login if status.creator is not None else None,
                ))
                if len(out) >= limit:
                    break
            return out

        return self._call(f"list statuses of {repo}@{sha[:12]}", read)


class _TierOrderAPI(_PrecheckAPI):
    """The bot's own pull requests from a branch of the repository (tier-order fixes)."""

    def open_pulls_from(self, repo: str, branch: str) -> list[BranchPullRequest]:
        """Open PRs whose head is `branch` of `repo` itself (not a fork), lowest number first."""
        full = _repo_path(repo)
        owner = full.split("/", 1)[0]

        def find() -> list[BranchPullRequest]:
            pulls = self._gh.get_repo(full).get_pulls(state="open", head=f"{owner}:{branch}")
            out = []
            for pr in pulls:
                head_repo = pr.head.repo
                if pr.head.ref != branch or head_repo is None or head_repo.full_name.lower() != full.lower():
                    continue
                out.append(_branch_pull(pr))
            return sorted(out, key=lambda p: p.number)

        return self._call(f"list pull requests from {branch} of {repo}", find)

    def create_pull(self, repo: str, *, head: str, base: str, title: str, body: str) -> BranchPullRequest:
        """Open a PR from branch `head` of `repo` into `base`."""
        full = _repo_path(repo)
        if len(body) > MAX_COMMENT:
            raise ValueError(f"pull request body is longer than GitHub's {MAX_COMMENT} characters")
        return self._call(
            f"create pull request {head} -> {base} on {repo}",
            lambda: _branch_pull(self._gh.get_repo(full).create_pull(base=base, head=head, title=title, body=body)),
        )

    def update_pull(self, repo: str, number: int, *, title: str | None = None, body: str | None = None) -> None:
        """Edit a PR's title and/or body (nothing is sent when both are None)."""
        full = _repo_path(repo)
        changes = _title_body_edits(title, body, "pull request")
        if not changes:
            return
        pr = self._call(f"get pull request {repo}#{number}", lambda: self._gh.get_repo(full).get_pull(int(number)))
        self._call(f"edit pull request {repo}#{number}", lambda: pr.edit(**changes))

    def close_pull(self, repo: str, number: int, comment: str | None = None) -> None:
        """Close a PR, after commenting why when `comment` is given."""
        full = _repo_path(repo)
        if comment:
            self.comment(repo, number, comment)
        pr = self._call(f"get pull request {repo}#{number}", lambda: self._gh.get_repo(full).get_pull(int(number)))
        self._call(f"close pull request {repo}#{number}", lambda: pr.edit(state="closed"))


class _DriftAPI(_PrecheckAPI):
    """The repository and the bot's own issues (drift reports)."""

    def repository(self, repo: str) -> RepositoryInfo:
        """The repository's default branch and clone URL."""
        full = _repo_path(repo)

        def get() -> RepositoryInfo:
            r = self._gh.get_repo(full)
            return RepositoryInfo(r.full_name, r.default_branch, r.clone_url)

        return self._call(f"get repository {repo}", get)

    def find_issues(self, repo: str, marker: str, label: str) -> list[IssueInfo]:
        """The bot's issues (open and closed) labelled `label` whose body starts with ``<!-- marker -->``, lowest
        number first. Pull requests, and issues by anyone else (a human quoting the marker), are never returned."""
        full = _repo_path(repo)
        me = self.bot_login.lower()
        pattern = _marker_re(marker)

        def find() -> list[IssueInfo]:
            out = []
            for issue in self._gh.get_repo(full).get_issues(state="all", labels=[label]):
                if issue.pull_request is not None or issue.user is None or (issue.user.login or "").lower() != me:
                    continue
                match = pattern.match(_first_line(issue.body or ""))
                if match is not None and match.group(1) is None:
                    out.append(_issue_info(issue))
            return sorted(out, key=lambda i: i.number)

        return self._call(f"list issues labelled {label} of {repo}", find)

    def create_issue(self, repo: str, *, title: str, body: str, labels: Sequence[str] = ()) -> IssueInfo:
        """Open an issue (GitHub creates a label that does not exist yet)."""
        full = _repo_path(repo)
        if len(body) > MAX_COMMENT:
            raise ValueError(f"issue body is longer than GitHub's {MAX_COMMENT} characters")
        return self._call(
            f"create issue on {repo}",
            lambda: _issue_info(self._gh.get_repo(full).create_issue(title=title, body=body, labels=list(labels))),
        )

    def edit_issue(self, repo: str, number: int, *, title: str | None = None, body: str | None = None, state: str | None = None) -> None:
        """Edit an issue's title, body and/or state (`open` reopens, `closed` closes as completed); nothing when all are None."""
        full = _repo_path(repo)
        changes = _title_body_edits(title, body, "issue")
        if state is not None:
            if state not in ("open", "closed"):
                raise ValueError("issue state must be open or closed")
            changes["state"] = state
            if state == "closed":
                changes["state_reason"] = "completed"
        if not changes:
            return
        issue = self._call(f"get issue {repo}#{number}", lambda: self._gh.get_repo(full).get_issue(int(number)))
        self._call(f"edit issue {repo}#{number}", lambda: issue.edit(**changes))

    def close_issue(self, repo: str, number: int, comment: str | None = None) -> None:
        """Close an issue, after commenting why when `comment` is given."""
        if comment:
            self.comment(repo, number, comment)
        self.edit_issue(repo, number, state="closed")

    def reopen_issue(self, repo: str, number: int, comment: str | None = None) -> None:
        """Reopen an issue, then comment why when `comment` is given."""
        self.edit_issue(repo, number, state="open")
        if comment:
            self.comment(repo, number, comment)


class GitHubAdapter(_CommandAPI, _RestartAPI, _TierOrderAPI, _DriftAPI, _PrecheckAPI, _IdentityAPI):
    """Every GitHub call the bot makes: the feature parts over one transport (the composition root builds this)."""
