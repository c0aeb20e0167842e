"""On start, re-run prechecks whose status is still pending: a crash mid-run must not block a PR forever.

With several replicas (`leader_election.enabled`, bot/service/claims.py) only *abandoned* pending statuses are
re-run — no live claim: stale, released at shutdown, or left by an earlier process of this pod — so a replica
starting next to a busy one does not re-run what that one is running. The leader also sweeps for abandoned
ones every `leader_election.sweep_seconds` (`sweep_pending`): a replica that died mid-run is re-run within
the claim's lifetime (run timeout + grace) plus one sweep, even when nothing restarts.

A PR whose run crashed the checker must not crash it on every start: its re-run says so in its status
("running again after the checker stopped"), and when that status is found pending again the run is ended
with `error` "this PR stopped the checker" instead (`_how_it_stopped`). A graceful shutdown marks its runs
"interrupted", which never counts as a crash.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Protocol

from bot.engine.core.errors import FluxwardenError, InfraError
from bot.engine.chatops.github_models import PullRequestInfo
from bot.engine.chatops.jobs import PrecheckKey, PrecheckPlan, precheck_version
from bot.engine.chatops.settings import RepoPolicy
from handlers.clusters import with_clusters
from handlers.context import BranchHeads, Claims, Prechecks, RestartGitHub, Settings
from handlers.precheck import INTERRUPTED, RESUMED, status_context

log = logging.getLogger(__name__)


class RestartContext(Protocol):
    """What re-running pending prechecks needs: the repositories, their open PRs and statuses, the runs."""

    @property
    def config(self) -> Settings: ...

    @property
    def github(self) -> RestartGitHub: ...

    @property
    def git(self) -> BranchHeads: ...  # a repository's clusters, found on a PR's base branch

    @property
    def prechecks(self) -> Prechecks: ...

    @property
    def claims(self) -> Claims | None: ...


async def resume_pending(bot: RestartContext, trigger: str = "restart: status was left pending", *, stale_after: float | None = None) -> list[PrecheckPlan]:
    """Schedule a run for every open PR and cluster whose latest `fluxwarden/<cluster>` status is pending (and abandoned).

    `stale_after` (a single replica's sweep, no claims): only statuses pending for longer than that, of runs
    this process is not working on, are re-run; at start-up (None) every pending one is.
    """
    plans = []
    for policy in bot.config.repos:
        try:
            pulls = await asyncio.to_thread(bot.github.open_pull_requests, policy.name)
        except InfraError as exc:
            log.warning("cannot list open PRs of %s: %s", policy.name, exc)
            continue
        found: dict[str, RepoPolicy] = {}  # base branch -> the policy with that branch's clusters
        for pull in pulls:
            if pull.fork and not policy.allow_forks:
                continue
            # Not a fork: the head repository is the base repository, so its clone URL is ours.
            clone_url = policy.clone_url or (pull.head_clone_url if not pull.fork and pull.head_clone_url else f"https://github.com/{policy.name}.git")
            if pull.base_ref not in found:
                try:
                    found[pull.base_ref] = await with_clusters(bot, policy, clone_url, pull.base_ref)
                except FluxwardenError as exc:
                    log.warning("cannot find the clusters of %s on %s: %s", policy.name, pull.base_ref, exc)
                    continue
            pending = await _pending(bot, found[pull.base_ref], pull, stale_after)
            if pending:
                plan = PrecheckPlan(policy.name, pull.number, pull.head_sha, pull.base_ref, clone_url, tuple(pending), trigger)
                plans.extend(await _rerun(bot, plan))
    return plans


async def _pending(bot: RestartContext, policy: RepoPolicy, pull: PullRequestInfo, stale_after: float | None) -> list[str]:
    """The clusters of `pull` to re-run: abandoned (several replicas), stale (a single replica's sweep), or pending (start-up)."""
    if bot.claims is not None:
        contexts = {status_context(c): c for c in policy.cluster_names}
        try:
            return [contexts[c] for c in await bot.claims.abandoned_contexts(policy.name, pull.head_sha, list(contexts))]
        except InfraError as exc:
            log.warning("cannot read statuses of %s#%s: %s", policy.name, pull.number, exc)
            return []
    if stale_after is not None:
        return await _stale_pending(bot, policy, pull, stale_after)
    pending = []
    for cluster in policy.cluster_names:
        try:
            state = await asyncio.to_thread(bot.github.latest_status, policy.name, pull.head_sha, status_context(cluster))
        except InfraError as exc:
            log.warning("cannot read status of %s#%s: %s", policy.name, pull.number, exc)
            continue
        if state == "pending":
            pending.append(cluster)
    return pending


async def _rerun(bot: RestartContext, plan: PrecheckPlan) -> list[PrecheckPlan]:
    """Schedule the pending clusters of `plan` again, as their last run ended; give up on those that stopped the checker twice."""
    outcome = await _how_it_stopped(bot, plan)
    for cluster in outcome["gave-up"]:
        log.warning("%s#%s %s stopped the checker twice; not re-running it", plan.repo, plan.number, cluster)
        await bot.prechecks.give_up(plan, cluster)
    plans = []
    for kind, resumed in (("interrupted", False), ("crashed", True)):
        if outcome[kind]:
            again = replace(plan, clusters=tuple(outcome[kind]), resumed=resumed)
            bot.prechecks.schedule(again)
            plans.append(again)
    return plans


async def _how_it_stopped(bot: RestartContext, plan: PrecheckPlan) -> dict[str, list[str]]:
    """Each pending cluster's last run, from its status: `interrupted` by a graceful shutdown (re-run as it was),
    `crashed` (re-run once, marked: the run itself may be what stopped the checker), or `gave-up` (that
    re-run stopped the checker too: a PR that kills the checker must not do it on every start)."""
    try:
        statuses = await asyncio.to_thread(bot.github.statuses, plan.repo, plan.head_sha)
    except InfraError as exc:
        log.warning("cannot read statuses of %s#%s: %s", plan.repo, plan.number, exc)
        statuses = []
    outcome: dict[str, list[str]] = {"interrupted": [], "crashed": [], "gave-up": []}
    claims = bot.claims
    for cluster in plan.clusters:
        context = status_context(cluster)
        if claims is not None and statuses and not claims.abandoned(statuses, context):
            continue  # another replica claimed it since it was found abandoned: its status is that run's, not a crash's
        latest = next((s for s in statuses if s.context == context), None)
        description = latest.description if latest is not None else ""
        # " interrupted (" also matches what releasing replicas of earlier versions wrote ("… (replica stopped) …").
        interrupted = INTERRUPTED in description or " interrupted (" in description
        kind = "interrupted" if interrupted else "gave-up" if RESUMED in description else "crashed"
        outcome[kind].append(cluster)
    return outcome


async def _stale_pending(bot: RestartContext, policy: RepoPolicy, pull: PullRequestInfo, stale_after: float) -> list[str]:
    """The clusters of `pull` whose status has been pending longer than `stale_after` with no run of ours behind it."""
    try:
        statuses = await asyncio.to_thread(bot.github.statuses, policy.name, pull.head_sha)  # newest first
    except InfraError as exc:
        log.warning("cannot read statuses of %s#%s: %s", policy.name, pull.number, exc)
        return []
    now = time.time()
    stale = []
    for cluster in policy.cluster_names:
        latest = next((s for s in statuses if s.context == status_context(cluster)), None)
        if latest is None or latest.state != "pending" or now - latest.created_at < stale_after:
            continue
        if not bot.prechecks.busy(PrecheckKey(policy.name, pull.number, cluster), precheck_version(pull.head_sha, pull.base_ref)):
            stale.append(cluster)
    return stale


async def sweep_own(bot: RestartContext, interval: float, stale_after: float) -> None:
    """A single replica's job (no leader election): every `interval` seconds, re-run prechecks whose status
    has been pending longer than `stale_after` although this process runs nothing for them (a run lost
    between its claim and its result). With several replicas the leader's `sweep_pending` does this."""
    while True:
        await asyncio.sleep(interval)
        try:
            plans = await resume_pending(bot, trigger="sweep: status was left pending", stale_after=stale_after)
        except Exception:  # the sweep must outlive one bad round
            log.exception("sweep of pending prechecks failed")
            continue
        if plans:
            log.info("re-running %d precheck(s) left pending", len(plans))


async def sweep_pending(bot: RestartContext, interval: float) -> None:
    """The leader's job: every `interval` seconds, re-run prechecks left pending by a replica that is gone."""
    while True:
        await asyncio.sleep(interval)
        try:
            plans = await resume_pending(bot, trigger="a replica left the status pending")
        except Exception:  # the sweep must outlive one bad round
            log.exception("sweep of pending prechecks failed")
            continue
        if plans:
            log.info("re-running %d precheck(s) a stopped replica left pending", len(plans))
