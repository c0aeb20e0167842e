"""handlers/push.py against in-memory fakes: a push to the default branch queues one tier order run per repository."""

from __future__ import annotations

import pytest

from bot.engine.chatops.jobs import Submitted, TierOrderKey
from bot.engine.chatops.settings import RepoPolicy
from bot.engine.chatops.webhook import NULL_SHA
from handlers.push import on_push, target_for_push
from tests.fakes.context import HEAD, REPO, MemorySettings, RecordingDispatcher, bot_context, push_event


@pytest.mark.parametrize("ref, after, settings, answer, outcome", [
    ("refs/heads/main", HEAD, MemorySettings(), Submitted.STARTED, Submitted.STARTED),
    ("refs/heads/main", HEAD, MemorySettings(), Submitted.SUPERSEDED, Submitted.SUPERSEDED),
    ("refs/heads/main", HEAD, MemorySettings(), Submitted.QUEUE_FULL, Submitted.QUEUE_FULL),
    ("refs/heads/feature", HEAD, MemorySettings(), Submitted.STARTED, "refs/heads/feature is not the default branch"),
    ("refs/tags/v1", HEAD, MemorySettings(), Submitted.STARTED, "refs/tags/v1 is not the default branch"),
    ("refs/heads/main", NULL_SHA, MemorySettings(), Submitted.STARTED, "the default branch was deleted"),
    ("refs/heads/main", HEAD, MemorySettings(repos=(RepoPolicy("someone/else"),)), Submitted.STARTED, "repository not allowlisted"),
], ids=["queued", "supersedes", "queue-full", "other-branch", "tag", "deleted", "not-allowlisted"])
async def test_push(ref: str, after: str, settings: MemorySettings, answer: Submitted, outcome: object) -> None:
    jobs = RecordingDispatcher(answer=answer)
    bot = bot_context(config=settings, jobs=jobs)
    assert await on_push(push_event(ref=ref, after=after), bot) == outcome
    queued = isinstance(outcome, Submitted) and outcome != Submitted.QUEUE_FULL
    assert jobs.keys == ([(TierOrderKey(REPO), HEAD)] if queued else [])


def test_the_target_names_the_pushed_commit() -> None:
    target = target_for_push(push_event(), bot_context())
    assert not isinstance(target, str)
    assert (target.repo, target.default_branch, target.pushed, target.trigger) == (REPO, "main", HEAD, f"push of {HEAD[:12]} to main")
