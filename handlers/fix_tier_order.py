"""`/fluxwarden fix-tier-order` in a PR or issue comment: the tier order follow-up PR, now (handlers/tier_order.py).

The caller (handlers/comment.py) has checked the repository is allowlisted and the author is not a bot. Here:
the author's permission (the registry's, `write` by default), then a queued run whose result is the reply,
edited in place under a marker keyed by the comment (a redelivery edits it rather than adding another).
"""

from __future__ import annotations

import asyncio
import logging

from bot.engine import markdown as md
from bot.engine.commands import REGISTRY, permits, you_have
from bot.engine.errors import InfraError
from bot.service.runs import Submitted
from bot.engine.webhook import CommentEvent
from handlers.context import BotContext
from handlers.tier_order import TierOrderOutcome, TierOrderTarget, run_tier_order

log = logging.getLogger(__name__)
REPLY_MARKER = "fluxwarden:fix-tier-order:{comment_id}"
PERMISSION = next(spec.permission for spec in REGISTRY if spec.name == "fix-tier-order")


async def on_fix_tier_order(event: CommentEvent, bot: BotContext) -> tuple[str | None, bool]:
    """Authorise and queue the run; returns (an immediate reply or None, whether a run was queued)."""
    policy = bot.config.repo(event.repo.full_name)
    if policy is None:
        return None, False
    try:
        have = await asyncio.to_thread(bot.github.permission, event.repo.full_name, event.author)
    except InfraError as exc:
        log.warning("cannot authorise %s on %s: %s", event.author, event.repo.full_name, exc)
        return "GitHub did not answer while checking your permission; please try again.", False
    if not permits(have, PERMISSION):
        return f"{you_have(have)}; `/fluxwarden fix-tier-order` needs {PERMISSION}.", False
    target = TierOrderTarget(
        repo=event.repo.full_name,
        clone_url=policy.clone_url or event.repo.clone_url,
        default_branch=event.repo.default_branch,
        trigger=f"/fluxwarden fix-tier-order by @{event.author} on #{event.number}",
    )
    marker = REPLY_MARKER.format(comment_id=event.comment_id)

    async def reply(outcome: TierOrderOutcome | None, error: str | None) -> None:
        text = outcome.message if outcome is not None else f"could not fix the tier order: {md.rich(error or '')}"
        body = f"<!-- {marker} -->\n@{event.author}\n\n{text}\n"
        try:
            await asyncio.to_thread(bot.github.upsert_comments, event.repo.full_name, event.number, marker, [body])
        except InfraError as exc:
            bot.metrics.github_errors.labels("reply").inc()
            log.warning("GitHub reply on %s#%s failed: %s", event.repo.full_name, event.number, exc)

    key = (event.repo.full_name, event.comment_id, "fix-tier-order")
    submitted = bot.runner.queue.submit(key, f"comment-{event.comment_id}", lambda: run_tier_order(bot, target, reply))
    if submitted == Submitted.QUEUE_FULL:
        return "the bot is busy (its run queue is full); please try again later.", False
    return None, True
