"""pull_request opened/synchronize/reopened/ready_for_review: precheck the clusters configured as automatic.

`edited` with a base change (a retarget) does too, and first marks every verdict on the head pending: each
was computed against the old base, and branch protection reads them on the head whatever the base is now.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from bot.engine.core.errors import FluxwardenError, InfraError
from bot.engine.chatops.jobs import PrecheckPlan
from bot.engine.chatops.settings import RepoPolicy
from bot.engine.chatops.webhook import PullRequestEvent
from handlers.clusters import with_clusters
from handlers.context import BranchHeads, Claims, Prechecks, RetargetGitHub, Settings
from handlers.precheck import cluster_of_context, retargeted_description

log = logging.getLogger(__name__)
TRIGGERING_ACTIONS = frozenset({"opened", "synchronize", "reopened", "ready_for_review"})


NO_CLUSTERS = "no automatic clusters"


class PullRequestContext(Protocol):
    """What a pull request event needs: the repositories, their statuses (a retarget), the runs."""

    @property
    def config(self) -> Settings: ...

    @property
    def github(self) -> RetargetGitHub: ...

    @property
    def git(self) -> BranchHeads: ...  # a repository's clusters, found on the base branch

    @property
    def prechecks(self) -> Prechecks: ...

    @property
    def claims(self) -> Claims | None: ...


def plan_for_pull_request(event: PullRequestEvent, bot: PullRequestContext, policy: RepoPolicy | None = None) -> PrecheckPlan | str:
    """The precheck an event asks for, or why there is none (`policy`: the repository's, with its clusters found)."""
    retarget = event.action == "edited" and event.base_changed_from is not None
    if event.action not in TRIGGERING_ACTIONS and not retarget:
        return f"action {event.action} does not trigger a run" + (" (the base did not change)" if event.action == "edited" else "")
    policy = policy or bot.config.repo(event.repo.full_name)
    if policy is None:
        return "repository not allowlisted"
    if event.pull.draft:
        return "draft PR (runs on ready_for_review)"
    if event.pull.fork and not policy.allow_forks:
        return "PR from a fork (allow_forks: false)"
    clusters = tuple(c.name for c in policy.clusters if c.automatic)
    if not clusters:
        return NO_CLUSTERS
    return PrecheckPlan(
        repo=event.repo.full_name,
        number=event.pull.number,
        head_sha=event.pull.head_sha,
        base_ref=event.pull.base_ref,
        clone_url=policy.clone_url or event.repo.clone_url,
        clusters=clusters,
        trigger=f"pull_request retargeted from {event.base_changed_from}" if retarget else f"pull_request {event.action}",
    )


async def on_pull_request(event: PullRequestEvent, bot: PullRequestContext) -> PrecheckPlan | str:
    """Schedule the automatic precheck; returns the plan or the reason nothing ran."""
    plan = plan_for_pull_request(event, bot)
    policy = bot.config.repo(event.repo.full_name)
    if event.base_changed_from is not None and policy is not None:
        await mark_retargeted(event, bot)
    if plan == NO_CLUSTERS and policy is not None and not policy.clusters:
        # Allowlisted without cluster settings: the base branch's clusters, as `check` finds them.
        try:
            policy = await with_clusters(bot, policy, event.repo.clone_url, event.pull.base_ref)
        except FluxwardenError as exc:
            log.warning("cannot find the clusters of %s on %s: %s", event.repo.full_name, event.pull.base_ref, exc)
            return f"cannot find the clusters of {event.pull.base_ref}: {exc}"
        plan = plan_for_pull_request(event, bot, policy)
    if isinstance(plan, PrecheckPlan):
        bot.prechecks.schedule(plan)
    return plan


async def mark_retargeted(event: PullRequestEvent, bot: PullRequestContext) -> list[str]:
    """Set every Fluxwarden status on the head that is not pending to pending (it judged the old base); returns their contexts.

    The clusters that run on their own are re-run right after (their pending status then says running);
    the others stay pending until someone comments `/precheck <cluster>`.
    """
    try:
        statuses = await asyncio.to_thread(bot.github.statuses, event.repo.full_name, event.pull.head_sha)  # newest first
    except InfraError as exc:
        log.warning("cannot read the statuses of %s#%s after its retarget: %s", event.repo.full_name, event.pull.number, exc)
        return []
    latest: dict[str, str] = {}
    for status in statuses:
        if cluster_of_context(status.context) is not None:
            latest.setdefault(status.context, status.state)
    marked = []
    for context, state in sorted(latest.items()):
        if state == "pending":
            continue
        cluster = cluster_of_context(context) or ""
        description = retargeted_description(cluster, event.base_changed_from or "", event.pull.base_ref)
        if bot.claims is not None:
            # A pending status is a run claim (bot/service/claims.py): mark it released, so no replica takes
            # it for a live run, and the run the retarget starts, a `/precheck` or the sweep may claim it.
            description = bot.claims.tag(description, released=True)
        try:
            await asyncio.to_thread(bot.github.set_status, event.repo.full_name, event.pull.head_sha, context, "pending", description, None)
        except InfraError as exc:
            log.warning("cannot mark %s of %s#%s pending after its retarget: %s", context, event.repo.full_name, event.pull.number, exc)
            continue
        marked.append(context)
    return marked
