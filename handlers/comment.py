"""issue_comment on a PR: parse commands, check who may run them, reply or schedule prechecks."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bot.commands import CommandError, FixTierOrderCommand, HelpCommand, PrecheckCommand, code_span, parse_commands, permits
from bot.errors import InfraError
from bot.markdown import MAX_COMMENT
from bot.webhook import CommentEvent
from handlers.context import BotContext
from handlers.fix_tier_order import on_fix_tier_order
from handlers.help import help_reply
from handlers.precheck import PrecheckPlan

log = logging.getLogger(__name__)
REPLY_MARKER = "fluxwarden:reply:{comment_id}"
MAX_REPLY = 4000  # characters of one command's reply


@dataclass(frozen=True)
class CommentOutcome:
    """What the bot did about one comment (for logs, metrics and tests)."""

    replies: tuple[str, ...] = ()
    scheduled: tuple[str, ...] = ()
    ignored: str | None = None


async def on_comment(event: CommentEvent, bot: BotContext) -> CommentOutcome:
    """Handle the commands in one PR comment; replies are keyed by the comment id, so a redelivery edits, not repeats."""
    if not event.is_pull_request and "fix-tier-order" not in event.body:
        return CommentOutcome(ignored="not a pull request")  # on issues, only /fluxwarden fix-tier-order is read
    if event.author_type == "Bot":
        return CommentOutcome(ignored="comment by a bot")
    policy = bot.config.repo(event.repo.full_name)
    if policy is None:
        return CommentOutcome(ignored="repository not allowlisted")
    commands = parse_commands(event.body, policy.cluster_names)
    if not event.is_pull_request and not any(isinstance(c, FixTierOrderCommand) for c in commands):
        return CommentOutcome(ignored="not a pull request")
    if not commands:
        return CommentOutcome(ignored="no command")
    replies: list[str] = []
    scheduled: list[str] = []
    accepted = False
    for command in commands:
        if isinstance(command, CommandError):
            replies.append(f"{code_span(command.line.strip())}: {command}" if command.line.strip() else str(command))
        elif isinstance(command, HelpCommand):
            replies.append(help_reply(policy))
            accepted = True
        elif isinstance(command, FixTierOrderCommand):
            reply, started = await on_fix_tier_order(event, bot)
            if reply:
                replies.append(reply)
            if started:
                scheduled.append("fix-tier-order")
            accepted = accepted or started
        elif isinstance(command, PrecheckCommand) and not event.is_pull_request:
            replies.append("`/precheck` works on pull requests only.")
        elif isinstance(command, PrecheckCommand):
            reply, clusters = await _precheck(event, command, bot)
            if reply:
                replies.append(reply)
            scheduled.extend(clusters)
            accepted = accepted or bool(clusters)
    if accepted:
        await _quietly(bot, "reaction", lambda: bot.github.add_reaction(event.repo.full_name, event.comment_id, "eyes"))
    if replies:
        body = reply_body(REPLY_MARKER.format(comment_id=event.comment_id), event.author, replies)
        await _quietly(bot, "reply", lambda: bot.github.upsert_comments(
            event.repo.full_name, event.number, REPLY_MARKER.format(comment_id=event.comment_id), [body]))
    return CommentOutcome(tuple(replies), tuple(scheduled))


def reply_body(marker: str, author: str, replies: list[str]) -> str:
    """The reply comment: every reply that fits GitHub's 65,536 characters, then how many did not."""
    head = f"<!-- {marker} -->\n@{author}\n\n"
    room = MAX_COMMENT - len(head) - 200  # the closing note
    kept: list[str] = []
    for text in replies:
        if len(text) > MAX_REPLY:
            text = text[: MAX_REPLY - 1] + "…"  # every reply is built from bounded parts; a last guard
        if sum(len(k) + 2 for k in kept) + len(text) > room:
            break
        kept.append(text)
    if len(kept) < len(replies):
        kept.append(f"… and {len(replies) - len(kept):,} more replies not shown.")
    return head + "\n\n".join(kept) + "\n"


async def _precheck(event: CommentEvent, command: PrecheckCommand, bot: BotContext) -> tuple[str | None, list[str]]:
    policy = bot.config.repo(event.repo.full_name)
    assert policy is not None
    wanted = list(command.clusters or policy.cluster_names)
    if not wanted:
        return "no clusters are configured for this repository.", []
    try:
        have = await asyncio.to_thread(bot.github.permission, event.repo.full_name, event.author)
        pull = await asyncio.to_thread(bot.github.pull_request, event.repo.full_name, event.number)
    except InfraError as exc:
        log.warning("cannot authorise %s on %s#%s: %s", event.author, event.repo.full_name, event.number, exc)
        return "GitHub did not answer while checking your permission; please try again.", []
    refused = [c for c in wanted if not permits(have, policy.cluster(c).permission)]  # type: ignore[union-attr]
    allowed = [c for c in wanted if c not in refused]
    notes = []
    if refused:
        needs = ", ".join(f"`{c}` needs {policy.cluster(c).permission}" for c in refused)  # type: ignore[union-attr]
        notes.append(f"you have {have} permission on this repository; {needs}.")
    if pull.fork and not policy.allow_forks:
        notes.append("PRs from forks are not rendered on this repository (`allow_forks: false`).")
        allowed = []
    if pull.state != "open":
        notes.append("this PR is not open.")
        allowed = []
    if allowed:
        bot.runner.schedule(PrecheckPlan(
            repo=event.repo.full_name,
            number=event.number,
            head_sha=pull.head_sha,
            base_ref=pull.base_ref,
            clone_url=policy.clone_url or event.repo.clone_url,
            clusters=tuple(allowed),
            trigger=f"/precheck by @{event.author}",
        ))
    return (" ".join(notes) or None), allowed


async def _quietly(bot: BotContext, operation: str, call) -> None:
    try:
        await asyncio.to_thread(call)
    except InfraError as exc:
        bot.metrics.github_errors.labels(operation).inc()
        log.warning("GitHub %s failed: %s", operation, exc)
