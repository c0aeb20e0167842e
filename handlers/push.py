"""push to the default branch: keep the tier order follow-up PR in step with the graph (handlers/tier_order.py)."""

from __future__ import annotations

from typing import Protocol

from bot.engine.chatops.jobs import Submitted, TierOrderKey
from bot.engine.chatops.webhook import NULL_SHA, PushEvent
from handlers.context import Dispatcher
from handlers.tier_order import TierOrderContext, TierOrderTarget, run_tier_order


class PushContext(TierOrderContext, Protocol):
    """What a push needs: a tier order run's parts, and the queue it goes on."""

    @property
    def jobs(self) -> Dispatcher: ...


def target_for_push(event: PushEvent, bot: PushContext) -> TierOrderTarget | str:
    """The reconciliation a push asks for, or why there is none."""
    policy = bot.config.repo(event.repo.full_name)
    if policy is None:
        return "repository not allowlisted"
    if event.ref != f"refs/heads/{event.repo.default_branch}":
        return f"{event.ref} is not the default branch"
    if event.after == NULL_SHA:
        return "the default branch was deleted"
    return TierOrderTarget(
        repo=event.repo.full_name,
        clone_url=policy.clone_url or event.repo.clone_url,
        default_branch=event.repo.default_branch,
        trigger=f"push of {event.after[:12]} to {event.repo.default_branch}",
        pushed=event.after,
    )


async def on_push(event: PushEvent, bot: PushContext) -> Submitted | str:
    """Queue a tier order run (a newer push to the same repository supersedes a queued one)."""
    target = target_for_push(event, bot)
    if isinstance(target, str):
        return target
    return bot.jobs.submit(TierOrderKey(target.repo), event.after, lambda: run_tier_order(bot, target))
