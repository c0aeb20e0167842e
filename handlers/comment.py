"""issue_comment on a PR: parse commands, check who may run them, reply or schedule prechecks."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bot.engine.commands import (
    PERMISSION_ORDER, Command, CommandError, FixTierOrderCommand, HelpCommand, PrecheckCommand, code_span, parse_commands, permits, you_have,
)
from bot.engine.errors import FluxwardenError, InfraError
from bot.engine.markdown import MAX_COMMENT
from bot.engine.webhook import CommentEvent
from bot.service.settings import RepoPolicy
from handlers.clusters import with_clusters
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
    # Who may use a command is said first: nothing about a command (an unknown cluster, a syntax error)
    # is told to a commenter who may not use it.
    try:
        have = await asyncio.to_thread(bot.github.permission, event.repo.full_name, event.author)
    except InfraError as exc:
        log.warning("cannot authorise %s on %s#%s: %s", event.author, event.repo.full_name, event.number, exc)
        have = None
    if event.is_pull_request and not policy.clusters and have is not None and any(_is_precheck(c) for c in commands):
        # Allowlisted without cluster settings: the clusters of the PR's base branch, as `check` finds them.
        try:
            pull = await asyncio.to_thread(bot.github.pull_request, event.repo.full_name, event.number)
            if permits(have, _needs(PrecheckCommand(()), policy)):
                policy = await with_clusters(bot, policy, policy.clone_url or event.repo.clone_url, pull.base_ref)
                commands = parse_commands(event.body, policy.cluster_names)
        except FluxwardenError as exc:
            log.warning("cannot find the clusters of %s: %s", event.repo.full_name, exc)
            return await _reply(event, bot, [f"cannot read this repository's clusters from the base branch: {exc}"], accepted=False)
    for command in commands:
        needs = _needs(command, policy)
        if have is None and needs is not None:
            replies.append("GitHub did not answer while checking your permission; please try again.")
            break
        if needs is not None and not permits(have or "none", needs):
            what = "/precheck" if _is_precheck(command) else "/fluxwarden"
            replies.append(f"{you_have(have or 'none')}; `{what}` needs {needs}.")
        elif isinstance(command, CommandError):
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
            reply, clusters = await _precheck(event, command, bot, policy, have or "none")
            if reply:
                replies.append(reply)
            scheduled.extend(clusters)
            accepted = accepted or bool(clusters)
    await _reply(event, bot, replies, accepted)
    return CommentOutcome(tuple(replies), tuple(scheduled))


def _is_precheck(command: Command | CommandError) -> bool:
    if isinstance(command, CommandError):
        return command.line.lstrip().startswith("/precheck")
    return isinstance(command, PrecheckCommand)


def _needs(command: Command | CommandError, policy: RepoPolicy) -> str | None:
    """The permission a commenter needs before anything is said about `command` (None: its handler decides)."""
    if isinstance(command, FixTierOrderCommand):
        return None  # handlers/fix_tier_order.py checks it (also on issues)
    if _is_precheck(command):
        # The least any cluster asks (each cluster's own is checked when the run is scheduled).
        ranks = [c.permission for c in policy.clusters] or [policy.permission]
        return min(ranks, key=PERMISSION_ORDER.index)
    return "read"  # /fluxwarden help, a /fluxwarden line that is not a command, or too many commands


async def _reply(event: CommentEvent, bot: BotContext, replies: list[str], accepted: bool) -> CommentOutcome:
    if accepted:
        await _quietly(bot, "reaction", lambda: bot.github.add_reaction(event.repo.full_name, event.comment_id, "eyes"))
    if replies:
        body = reply_body(REPLY_MARKER.format(comment_id=event.comment_id), event.author, replies)
        await _quietly(bot, "reply", lambda: bot.github.upsert_comments(
            event.repo.full_name, event.number, REPLY_MARKER.format(comment_id=event.comment_id), [body]))
    return CommentOutcome(tuple(replies))


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


async def _precheck(event: CommentEvent, command: PrecheckCommand, bot: BotContext, policy: RepoPolicy, have: str) -> tuple[str | None, list[str]]:
    wanted = list(command.clusters or policy.cluster_names)
    if not wanted:
        return "no clusters are configured for this repository, and none was found on its base branch.", []
    try:
        pull = await asyncio.to_thread(bot.github.pull_request, event.repo.full_name, event.number)
    except InfraError as exc:
        log.warning("cannot authorise %s on %s#%s: %s", event.author, event.repo.full_name, event.number, exc)
        return "GitHub did not answer while checking your permission; please try again.", []
    refused = [c for c in wanted if not permits(have, policy.cluster(c).permission)]  # type: ignore[union-attr]
    allowed = [c for c in wanted if c not in refused]
    notes = []
    if refused:
        needs = ", ".join(f"`{c}` needs {policy.cluster(c).permission}" for c in refused)  # type: ignore[union-attr]
        notes.append(f"{you_have(have)}; {needs}.")
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
