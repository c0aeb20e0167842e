"""handlers/fix_tier_order.py against in-memory fakes: the run is queued under the comment's key, its result is the reply."""

from __future__ import annotations

import pytest

from bot.engine.chatops.commands import FixTierOrderCommand
from bot.engine.chatops.jobs import FixTierOrderKey, Submitted
from handlers.context import Invocation
from handlers.fix_tier_order import REPLY_MARKER, on_fix_tier_order, result_reply
from handlers.tier_order import TierOrderOutcome
from tests.fakes.context import CLONE_URL, REPO, MemoryGit, MemorySettings, RecordingDispatcher, bot_context, comment_event
from tests.golden import assert_golden

MARKER = REPLY_MARKER.format(comment_id=1001)


def invocation() -> Invocation:
    return Invocation(MemorySettings().repos[0], "write")


@pytest.mark.parametrize("pull_request", [True, False], ids=["on-a-pr", "on-an-issue"])
async def test_queued_under_the_comment(pull_request: bool) -> None:
    jobs = RecordingDispatcher()
    bot = bot_context(jobs=jobs)
    result = await on_fix_tier_order(comment_event("/fluxwarden fix-tier-order", pull_request=pull_request), FixTierOrderCommand(), bot, invocation())
    assert (result.reply, result.scheduled, result.accepted) == (None, ("fix-tier-order",), True)
    assert jobs.keys == [(FixTierOrderKey(REPO, 1001), "comment-1001")]


async def test_a_full_queue_says_so() -> None:
    bot = bot_context(jobs=RecordingDispatcher(answer=Submitted.QUEUE_FULL))
    result = await on_fix_tier_order(comment_event("/fluxwarden fix-tier-order"), FixTierOrderCommand(), bot, invocation())
    assert (result.scheduled, result.accepted) == ((), False)
    assert_golden("replies/fix-tier-order-queue-full.md", result.reply + "\n")


async def test_a_failed_run_is_the_reply() -> None:
    git = MemoryGit(down=True)
    bot = bot_context(git=git)
    await on_fix_tier_order(comment_event("/fluxwarden fix-tier-order", author="alice"), FixTierOrderCommand(), bot, invocation())
    await bot.jobs.run_all()
    assert git.fetched == [(CLONE_URL, ("main", "fluxwarden/tier-order"))]
    assert_golden("replies/fix-tier-order-failed.md", bot.github.reply(7, MARKER))


async def test_a_refused_reply_is_counted() -> None:
    bot = bot_context(git=MemoryGit(down=True))
    bot.github.down.add("comment")
    await on_fix_tier_order(comment_event("/fluxwarden fix-tier-order"), FixTierOrderCommand(), bot, invocation())
    await bot.jobs.run_all()
    assert bot.metrics.github_errors.counts == {"reply": 1}


@pytest.mark.parametrize("action, message", [
    ("opened", "Opened #41: move `platform-config-cdi` before `apps-vms`."),
    ("updated", "Updated #41: move `platform-config-cdi` before `apps-vms`."),
])
def test_the_result_reply(action: str, message: str) -> None:
    outcome = TierOrderOutcome(action, message, "a" * 40, 41, "b" * 40)
    assert_golden(f"replies/fix-tier-order-{action}.md", result_reply(MARKER, "alice", outcome, None))
