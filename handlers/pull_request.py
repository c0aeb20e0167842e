"""pull_request opened/synchronize/reopened/ready_for_review: precheck the clusters configured as automatic."""

from __future__ import annotations

from bot.webhook import PullRequestEvent
from handlers.context import BotContext
from handlers.precheck import PrecheckPlan

TRIGGERING_ACTIONS = frozenset({"opened", "synchronize", "reopened", "ready_for_review"})


def plan_for_pull_request(event: PullRequestEvent, bot: BotContext) -> PrecheckPlan | str:
    """The precheck an event asks for, or why there is none."""
    if event.action not in TRIGGERING_ACTIONS:
        return f"action {event.action} does not trigger a run"
    policy = bot.config.repo(event.repo.full_name)
    if policy is None:
        return "repository not allowlisted"
    if event.pull.draft:
        return "draft PR (runs on ready_for_review)"
    if event.pull.fork and not policy.allow_forks:
        return "PR from a fork (allow_forks: false)"
    clusters = tuple(c.name for c in policy.clusters if c.automatic)
    if not clusters:
        return "no automatic clusters"
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
    if isinstance(plan, PrecheckPlan):
        bot.runner.schedule(plan)
    return plan
