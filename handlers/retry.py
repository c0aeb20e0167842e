"""The GitHub reads a command waits on (the commenter's permission, the pull request), tried again on a fault.

A burst of 5xx answers must not end a `/precheck` in "please try again" after the adapter's few seconds of
retries: the read is tried again with the backoff of the final writes (engine.chatops.settings.Backoff) until
`Limits.read_retry_seconds` have passed. An answer (a 404, a 403, a rate limit past its wait) is not retried.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Protocol, TypeVar

from bot.engine.core.errors import GitHubError
from bot.engine.chatops.github_models import PullRequestInfo
from bot.engine.chatops.settings import Backoff
from handlers.context import Permissions, PullRequestReads, Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


class PermissionContext(Protocol):
    """What reading a commenter's permission needs: the limits, and GitHub."""

    @property
    def config(self) -> Settings: ...

    @property
    def github(self) -> Permissions: ...


class PullReadContext(Protocol):
    """What reading a command's pull request needs: the limits, and GitHub."""

    @property
    def config(self) -> Settings: ...

    @property
    def github(self) -> PullRequestReads: ...


def is_fault(exc: BaseException) -> bool:
    """A GitHub server error or a timeout / lost connection (no HTTP status), not an answer."""
    return isinstance(exc, GitHubError) and (exc.status is None or exc.status >= 500)


async def gating_read(what: str, call: Callable[[], T], backoff: Backoff, within: float) -> T:
    """`call` in a worker thread; on a GitHub fault, again after `backoff`'s waits until `within` seconds have passed."""
    deadline = time.monotonic() + max(within, 0.0)
    attempt = 0
    while True:
        try:
            return await asyncio.to_thread(call)
        except GitHubError as exc:
            left = deadline - time.monotonic()
            if not is_fault(exc) or left <= 0:
                raise
            wait = min(backoff.delay(attempt), left)
            attempt += 1
            log.warning("%s failed (%s); trying again in %.1fs (attempt %d)", what, exc, wait, attempt + 1)
            await asyncio.sleep(wait)


async def read_permission(bot: PermissionContext, repo: str, login: str) -> str:
    """The commenter's permission, tried again on a GitHub fault."""
    limits = bot.config.limits
    return await gating_read(f"permission of {login} on {repo}", lambda: bot.github.permission(repo, login), limits.backoff, limits.read_retry_seconds)


async def read_pull_request(bot: PullReadContext, repo: str, number: int) -> PullRequestInfo:
    """The pull request a command is about, tried again on a GitHub fault."""
    limits = bot.config.limits
    return await gating_read(f"pull request {repo}#{number}", lambda: bot.github.pull_request(repo, number), limits.backoff, limits.read_retry_seconds)
