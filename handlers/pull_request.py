"""pull_request opened/synchronize/reopened/ready_for_review: precheck the clusters configured as automatic."""

from __future__ import annotations

import logging

from bot.engine.errors import FluxwardenError
from bot.engine.jobs import PrecheckPlan
from bot.engine.settings import RepoPolicy
from bot.engine.webhook import PullRequestEvent
from handlers.clusters import with_clusters
from handlers.context import BotContext

log = logging.getLogger(__name__)
TRIGGERING_ACTIONS = frozenset({"opened", "synchronize", "reopened", "ready_for_review"})


NO_CLUSTERS = "no automatic clusters"


def plan_for_pull_request(event: PullRequestEvent, bot: BotContext, policy: RepoPolicy | None = None) -> PrecheckPlan | str:
    """The precheck an event asks for, or why there is none (`policy`: the repository's, with its clusters found)."""
    if event.action not in TRIGGERING_ACTIONS:
        return f"action {event.action} does not trigger a run"
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
        trigger=f"pull_request {event.action}",
    )


async def on_pull_request(event: PullRequestEvent, bot: BotContext) -> PrecheckPlan | str:
    """Schedule the automatic precheck; returns the plan or the reason nothing ran."""
    plan = plan_for_pull_request(event, bot)
    policy = bot.config.repo(event.repo.full_name)
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
