"""Cross-replica run claims: GitHub's own commit statuses decide which replica runs a precheck.

With two or more replicas behind one Service, the same (PR head SHA, cluster) can reach two of them: a
webhook redelivery, a `/precheck` comment next to a `synchronize` event, two replicas starting at once and
both finding a pending status. `RunQueue` dedupes within one process only; across processes the source of
truth is the commit status `fluxwarden/<cluster>` on the SHA (what the PR shows anyway).

**A claim** is our `pending` status whose description ends with ``[fw:<replica id>]``, e.g.
``precheck of prod running [fw:fluxwarden-7d9c5b-x2kq9-a1b2c]``; GitHub's `created_at` is its start time.
Reading the statuses of the context newest first, the *episode* is the run of `pending` statuses on top
(a `success`/`failure`/`error` ends it: that run finished). A claim in the episode is **live** unless

* it is older than `ttl` (the run timeout plus a grace period): its replica died or hung — *stale*;
* a newer `[fw:<same id>:released]` status is in the episode: that replica was shut down mid-run and said so;
* it was made by an earlier process in *this* pod (same pod name, different random suffix): a pod runs one
  Fluxwarden process, so that one is gone (only when the pod name is known: `$POD_NAME`).

An untagged `pending` status (a Fluxwarden without claims, i.e. an older version during a rolling update) is
live while younger than `ttl` too. **The owner** of the (SHA, cluster) is the *oldest* live claim.

**Acquire** (before anything else of a run is written):

1. read the statuses; a live claim owned by another replica → skip (that replica is running it);
2. write our claim (the run's `pending` status);
3. read them again: run only if we are the owner now. Two replicas that raced past step 1 both wrote a
   claim; each sees the other's on re-reading, and only the first written (the older) is the owner. The
   loser has written one extra `pending` status and nothing else: no comment, no check run. The winner's
   result status later ends the episode.

When GitHub cannot be read, the run goes ahead (fail open: a duplicate run is harmless — the comment is
edited in place and the status converges on the same verdict; a lost run would leave the PR pending).

**Restart and sweep**: a `pending` status is *abandoned* when it has no live claim; `handlers/restart.py`
re-runs abandoned ones at start-up, and the leader re-runs them every `leader_election.sweep_seconds`.

**Superseded across replicas**: a replica whose run finishes checks that the PR head is still its SHA
before writing the result; if another push moved it (and another replica runs the new head), it writes
nothing, as a run superseded within one process does.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

from bot.engine.core.errors import InfraError
from bot.engine.core.github_limits import MAX_STATUS_DESCRIPTION
from bot.engine.chatops.github_models import PullRequestInfo, StatusInfo
from handlers.precheck_runs import RELEASE_TIMEOUT

log = logging.getLogger(__name__)

CLAIM_GRACE = 60.0  # seconds on top of the run timeout before a claim is stale
_TAG = re.compile(r"\s*\[fw:(?P<replica>[a-z0-9][a-z0-9.-]*?)(?P<released>:released)?\]\s*$")
UNTAGGED = "?"  # the owner of an untagged pending status


class ClaimsGitHub(Protocol):
    """What claims need from GitHub (bot/adapters/github.py provides it)."""

    def statuses(self, repo: str, sha: str, limit: int = 100) -> list[StatusInfo]: ...

    def set_status(self, repo: str, sha: str, context: str, state: str, description: str, target_url: str | None = None) -> None: ...

    def pull_request(self, repo: str, number: int) -> PullRequestInfo: ...


@dataclass(frozen=True)
class Claim:
    """A pending status read back: whose, whether released, how old."""

    replica: str  # UNTAGGED when it carries no tag
    released: bool
    age: float


def parse_claim(status: StatusInfo, now: float) -> Claim:
    match = _TAG.search(status.description or "")
    age = max(0.0, now - status.created_at)
    if match is None:
        return Claim(UNTAGGED, False, age)
    return Claim(match.group("replica"), bool(match.group("released")), age)


def pod_of(replica: str) -> str:
    """The pod name in `<pod>-<suffix>`."""
    return replica.rpartition("-")[0] or replica


class Claims:
    """One replica's view: its id, how long a claim lives, and the GitHub calls."""

    def __init__(
        self,
        github: ClaimsGitHub,
        replica: str,
        *,
        ttl: float,
        pod: str | None = None,  # our pod name when known ($POD_NAME): claims of its earlier processes are dead
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not _TAG.search(f"[fw:{replica}]"):
            raise ValueError(f"replica id {replica!r} must be lower-case letters, digits, '.' and '-'")
        self.github = github
        self.replica = replica
        self.ttl = ttl
        self.pod = pod
        self.clock = clock

    # ------------------------------------------------------------------ pure logic

    def tag(self, description: str, *, released: bool = False) -> str:
        """`description` with our tag, within GitHub's MAX_STATUS_DESCRIPTION characters."""
        tag = f" [fw:{self.replica}{':released' if released else ''}]"
        return description[: max(0, MAX_STATUS_DESCRIPTION - len(tag))].rstrip() + tag

    def _dead_process(self, replica: str) -> bool:
        return self.pod is not None and replica != self.replica and replica != UNTAGGED and pod_of(replica) == self.pod

    def owner(self, statuses: Iterable[StatusInfo], context: str) -> str | None:
        """The replica owning `context` (the oldest live claim of the pending episode), or None when free."""
        now = self.clock()
        released: set[str] = set()
        live: list[str] = []
        for status in statuses:  # newest first
            if status.context != context:
                continue
            if status.state != "pending":
                break  # a finished run ends the episode
            claim = parse_claim(status, now)
            if claim.released:
                released.add(claim.replica)
                continue
            if claim.age > self.ttl or claim.replica in released or self._dead_process(claim.replica):
                continue
            live.append(claim.replica)
        return live[-1] if live else None

    def abandoned(self, statuses: Sequence[StatusInfo], context: str) -> bool:
        """The newest status of `context` is pending and nobody holds a live claim on it."""
        latest = next((s for s in statuses if s.context == context), None)
        return latest is not None and latest.state == "pending" and self.owner(statuses, context) is None

    # ------------------------------------------------------------------ GitHub

    async def _read(self, repo: str, sha: str) -> list[StatusInfo]:
        return await asyncio.to_thread(self.github.statuses, repo, sha)

    async def acquire(self, repo: str, sha: str, context: str, description: str, target_url: str | None = None) -> bool:
        """Claim (sha, context) for this replica by setting its pending status; False when another replica owns it."""
        try:
            owner = self.owner(await self._read(repo, sha), context)
        except InfraError as exc:
            log.warning("claims: cannot read the statuses of %s@%s (%s); running without a claim check", repo, sha[:12], exc)
            owner = None
        if owner is not None and owner != self.replica:
            log.info("claims: %s@%s %s is being run by %s; not running it here", repo, sha[:12], context, owner)
            return False
        try:
            await asyncio.to_thread(self.github.set_status, repo, sha, context, "pending", self.tag(description), target_url)
        except InfraError as exc:
            log.warning("claims: cannot claim %s@%s %s (%s); running anyway", repo, sha[:12], context, exc)
            return True
        try:
            owner = self.owner(await self._read(repo, sha), context)
        except InfraError as exc:
            log.warning("claims: cannot re-read the statuses of %s@%s (%s); running", repo, sha[:12], exc)
            return True
        if owner is not None and owner != self.replica:
            log.info("claims: %s@%s %s was claimed first by %s; not running it here", repo, sha[:12], context, owner)
            return False
        return True

    async def release(self, repo: str, sha: str, context: str, description: str, target_url: str | None = None) -> None:
        """Shutting down mid-run: mark our claim released, so the next start or the leader's sweep re-runs it at once."""
        call = asyncio.to_thread(self.github.set_status, repo, sha, context, "pending", self.tag(description, released=True), target_url)
        try:
            await asyncio.wait_for(call, timeout=RELEASE_TIMEOUT)
        except (InfraError, asyncio.TimeoutError) as exc:
            log.warning("claims: could not release %s@%s %s: %s", repo, sha[:12], context, exc or "timed out")

    async def abandoned_contexts(self, repo: str, sha: str, contexts: Sequence[str]) -> list[str]:
        """The contexts whose pending status nobody runs any more (one GitHub read for all of them)."""
        statuses = await self._read(repo, sha)
        return [c for c in contexts if self.abandoned(statuses, c)]

    async def superseded(self, repo: str, number: int, sha: str) -> bool:
        """Whether the PR head moved away from `sha` (another replica then owns the PR's comment)."""
        try:
            pull = await asyncio.to_thread(self.github.pull_request, repo, number)
        except InfraError as exc:
            log.warning("claims: cannot read %s#%s (%s); writing the result", repo, number, exc)
            return False
        return bool(pull.head_sha) and pull.head_sha != sha
