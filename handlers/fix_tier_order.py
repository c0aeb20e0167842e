"""`/fluxwarden fix-tier-order` in a PR or issue comment: the tier order follow-up PR, now (handlers/tier_order.py).

The caller (handlers/comment.py) has checked the repository is allowlisted, the author is not a bot and has the
registry's permission (`write`). Here: a queued run whose result is the reply, edited in place under a marker
keyed by the comment (a redelivery edits it rather than adding another).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from bot.engine.core import markdown as md
from bot.engine.chatops.commands import FixTierOrderCommand
from bot.engine.core.errors import InfraError
from bot.engine.chatops.jobs import FixTierOrderKey, Submitted
from bot.engine.chatops.webhook import CommentEvent
from handlers.context import CommandResult, Counters, Dispatcher, Invocation
from handlers.tier_order import TierOrderContext, TierOrderOutcome, TierOrderTarget, run_tier_order

log = logging.getLogger(__name__)
REPLY_MARKER = "fluxwarden:fix-tier-order:{comment_id}"
QUEUE_FULL = "the bot is busy (its run queue is full); please try again later."


class FixTierOrderContext(TierOrderContext, Protocol):
    """What the command needs: a tier order run's parts (its GitHub writes the reply), the queue, the counters."""

    @property
    def jobs(self) -> Dispatcher: ...

    @property
    def metrics(self) -> Counters: ...


def result_reply(marker: str, author: str, outcome: TierOrderOutcome | None, error: str | None) -> str:
    """The reply that carries a run's result (or why it could not run)."""
    text = outcome.message if outcome is not None else f"could not fix the tier order: {md.rich(error or '')}"
    return f"<!-- {marker} -->\n@{author}\n\n{text}\n"


async def on_fix_tier_order(event: CommentEvent, command: FixTierOrderCommand, bot: FixTierOrderContext, call: Invocation) -> CommandResult:
    """Queue the run; its result is posted as the reply when it is done."""
    target = TierOrderTarget(
        repo=event.repo.full_name,
        clone_url=call.policy.clone_url or event.repo.clone_url,
        default_branch=event.repo.default_branch,
        trigger=f"/fluxwarden fix-tier-order by @{event.author} on #{event.number}",
    )
    marker = REPLY_MARKER.format(comment_id=event.comment_id)

    async def reply(outcome: TierOrderOutcome | None, error: str | None) -> None:
        body = result_reply(marker, event.author, outcome, error)
        try:
            await asyncio.to_thread(bot.github.upsert_comments, event.repo.full_name, event.number, marker, [body])
        except InfraError as exc:
            bot.metrics.github_errors.labels("reply").inc()
            log.warning("GitHub reply on %s#%s failed: %s", event.repo.full_name, event.number, exc)

    key = FixTierOrderKey(event.repo.full_name, event.comment_id)
    submitted = bot.jobs.submit(key, f"comment-{event.comment_id}", lambda: run_tier_order(bot, target, reply))
    if submitted == Submitted.QUEUE_FULL:
        return CommandResult(QUEUE_FULL)
    return CommandResult(scheduled=("fix-tier-order",), accepted=True)
