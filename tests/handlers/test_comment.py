"""handlers/comment.py against in-memory fakes: who may run what, what is scheduled, and the reply posted (golden)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import pytest

from bot.engine.chatops.jobs import FixTierOrderKey
from bot.engine.chatops.settings import RepoPolicy
from handlers.comment import REPLY_MARKER, on_comment
from tests.fakes.context import REPO, MemoryGit, MemoryGitHub, MemorySettings, bot_context, comment_event, pull_info
from tests.golden import assert_golden


@dataclass(frozen=True)
class Case:
    name: str
    body: str
    author: str = "bob"
    pull_request: bool = True
    author_type: str = "User"
    settings: MemorySettings = MemorySettings()
    git: MemoryGit = field(default_factory=MemoryGit)
    setup: Callable[[Any], None] = lambda bot: None  # changes the fakes before the comment arrives
    ignored: str | None = None
    scheduled: tuple[str, ...] = ()
    reacted: bool = False
    replied: bool = False  # a reply is posted (its body is the golden tests/golden/replies/comment-<name>.md)
    submitted: tuple[Any, ...] = ()  # dispatcher keys
    errors: dict[str, int] = field(default_factory=dict)  # github_errors by operation


def _down(*operations: str) -> Callable[[Any], None]:
    return lambda bot: bot.github.down.update(operations)


def _pull(**fields: Any) -> Callable[[Any], None]:
    return lambda bot: bot.github.pulls.update({7: pull_info(**fields)})


DISCOVER = MemorySettings(repos=(RepoPolicy(REPO, permission="write"),))  # allowlisted without cluster settings

CASES = [
    Case("precheck-everything", "/precheck", author="carol", scheduled=("dev", "prod"), reacted=True),
    Case("precheck-some-refused", "/precheck", scheduled=("dev",), reacted=True, replied=True),
    Case("precheck-named", "please\n/precheck prod\nthanks", author="carol", scheduled=("prod",), reacted=True),
    Case("precheck-refused", "/precheck", author="mallory", replied=True),
    Case("unknown-cluster", "/precheck staging", replied=True),
    Case("unknown-cluster-not-told", "/precheck staging", author="mallory", replied=True),
    Case("help", "/fluxwarden help", author="mallory", reacted=True, replied=True),
    Case("unknown-command", "/fluxwarden frobnicate", author="mallory", replied=True),
    Case("bot-author", "/precheck", author="renovate[bot]", author_type="Bot", ignored="comment by a bot"),
    Case("no-command", "looks good to me", ignored="no command"),
    Case("quoted-command", "> /precheck\nwhy?", ignored="no command"),
    Case("issue-precheck-only", "/precheck", pull_request=False, ignored="not a pull request"),
    Case(
        "issue-precheck-and-fix", "/fluxwarden fix-tier-order\n/precheck", pull_request=False, scheduled=("fix-tier-order",),
        reacted=True, replied=True, submitted=(FixTierOrderKey(REPO, 1001),),
    ),
    Case("fix-tier-order", "/fluxwarden fix-tier-order", scheduled=("fix-tier-order",), reacted=True, submitted=(FixTierOrderKey(REPO, 1001),)),
    Case("fix-tier-order-refused", "/fluxwarden fix-tier-order", author="mallory", replied=True),
    Case("permission-unknown", "/precheck\n/fluxwarden help", setup=_down("permission"), replied=True),
    Case("pull-unknown", "/precheck", author="carol", setup=_down("pull_request"), replied=True),
    Case("fork", "/precheck", author="carol", setup=_pull(fork=True), replied=True),
    Case("closed", "/precheck", author="carol", setup=_pull(state="closed"), replied=True),
    Case("clusters-found-none", "/precheck", settings=DISCOVER, git=MemoryGit(branches={}), replied=True),
    Case("clusters-unreadable", "/precheck", settings=DISCOVER, git=MemoryGit(down=True), replied=True),
    Case("clusters-not-read-for-the-unauthorised", "/precheck", author="mallory", settings=DISCOVER, git=MemoryGit(down=True), replied=True),
    Case("reply-refused", "/fluxwarden help", setup=_down("comment"), reacted=True, errors={"reply": 1}),
    Case("reaction-refused", "/precheck", author="carol", setup=_down("reaction"), scheduled=("dev", "prod"), errors={"reaction": 1}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_comment(case: Case) -> None:
    bot = bot_context(config=case.settings, git=case.git)
    case.setup(bot)
    outcome = await on_comment(comment_event(case.body, author=case.author, pull_request=case.pull_request, author_type=case.author_type), bot)
    assert outcome.ignored == case.ignored
    assert tuple(c for p in bot.prechecks.plans for c in p.clusters) + tuple(s for s in outcome.scheduled if s == "fix-tier-order") == case.scheduled
    assert bool(bot.github.reactions) == case.reacted
    assert tuple(key for key, _ in bot.jobs.keys) == case.submitted
    assert dict(bot.metrics.github_errors.counts) == case.errors
    reply = bot.github.reply(7, REPLY_MARKER.format(comment_id=1001))
    assert (reply is not None) == case.replied, reply
    if reply is not None:
        assert_golden(f"replies/comment-{case.name}.md", reply)


async def test_a_scheduled_precheck_carries_the_pr_and_the_commenter() -> None:
    bot = bot_context()
    await on_comment(comment_event("/precheck prod", author="carol"), bot)
    [plan] = bot.prechecks.plans
    assert (plan.repo, plan.number, plan.head_sha, plan.base_ref, plan.clusters, plan.trigger) == (
        REPO, 7, pull_info().head_sha, "main", ("prod",), "/precheck by @carol",
    )


async def test_not_allowlisted_repository_is_ignored() -> None:
    bot = bot_context(config=MemorySettings(repos=(RepoPolicy("someone/else"),)))
    outcome = await on_comment(comment_event("/precheck"), bot)
    assert outcome.ignored == "repository not allowlisted" and bot.github.calls == {}


async def test_a_redelivery_edits_the_same_reply() -> None:
    bot = bot_context(github=MemoryGitHub())
    for _ in range(2):
        await on_comment(comment_event("/fluxwarden help"), bot)
    assert list(bot.github.comments) == [(7, REPLY_MARKER.format(comment_id=1001))]


async def test_fork_prs_run_where_allowed() -> None:
    settings = MemorySettings()
    settings = replace(settings, repos=(replace(settings.repos[0], allow_forks=True),))
    bot = bot_context(config=settings)
    _pull(fork=True)(bot)
    await on_comment(comment_event("/precheck", author="carol"), bot)
    assert bot.prechecks.scheduled == [(7, pull_info().head_sha, ("dev", "prod"))]
