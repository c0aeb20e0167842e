"""issue_comment on a PR (or an issue): parse commands, check who may run them, run each through its handler
(handlers/registry.py), and reply once, edited in place."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bot.engine.chatops.commands import CommandError, code_span, parse_commands, permits, you_have
from bot.engine.core.errors import FluxwardenError, InfraError
from bot.engine.core.github_limits import MAX_COMMENT
from bot.engine.chatops.settings import RepoPolicy
from bot.engine.chatops.webhook import CommentEvent
from handlers.clusters import with_clusters
from handlers.context import BotContext, Invocation
from handlers.registry import REGISTRY, entry_for
from handlers.retry import read_permission, read_pull_request

log = logging.getLogger(__name__)
REPLY_MARKER = "fluxwarden:reply:{comment_id}"
PRECHECK = next(entry for entry in REGISTRY if entry.per_cluster)  # `/precheck`: its clusters decide who may use it
MAX_REPLY = 4000  # characters of one command's reply


@dataclass(frozen=True)
class CommentOutcome:
    """What the bot did about one comment (for logs, metrics and tests)."""

    replies: tuple[str, ...] = ()
    scheduled: tuple[str, ...] = ()
    ignored: str | None = None


async def on_comment(event: CommentEvent, bot: BotContext) -> CommentOutcome:
    """Handle the commands in one PR comment; replies are keyed by the comment id, so a redelivery edits, not repeats."""
    on_issues = [entry for entry in REGISTRY if entry.on_issues]
    if not event.is_pull_request and not any(entry.name in event.body for entry in on_issues):
        return CommentOutcome(ignored="not a pull request")  # on issues, only the commands the registry marks are read
    if event.author_type == "Bot":
        return CommentOutcome(ignored="comment by a bot")
    policy = bot.config.repo(event.repo.full_name)
    if policy is None:
        return CommentOutcome(ignored="repository not allowlisted")
    commands = parse_commands(event.body, policy.cluster_names)
    if not event.is_pull_request and not any(not isinstance(c, CommandError) and entry_for(c).on_issues for c in commands):
        return CommentOutcome(ignored="not a pull request")
    if not commands:
        return CommentOutcome(ignored="no command")
    replies: list[str] = []
    scheduled: list[str] = []
    accepted = False
    # Who may use a command is said first: nothing about a command (an unknown cluster, a syntax error)
    # is told to a commenter who may not use it.
    try:
        have = await read_permission(bot, event.repo.full_name, event.author)
    except InfraError as exc:
        log.warning("cannot authorise %s on %s#%s: %s", event.author, event.repo.full_name, event.number, exc)
        have = None
    if event.is_pull_request and not policy.clusters and have is not None and any(_is_precheck(c) for c in commands):
        # Allowlisted without cluster settings: the clusters of the PR's base branch, as `check` finds them.
        try:
            policy, commands = await _base_clusters(event, bot, policy, have, commands)
        except FluxwardenError as exc:
            log.warning("cannot find the clusters of %s: %s", event.repo.full_name, exc)
            return await _reply(event, bot, [f"cannot read this repository's clusters from the base branch: {exc}"], accepted=False)
    for command in commands:
        needs, said_as = _needs(command, policy)
        if have is None:
            replies.append("GitHub did not answer while checking your permission; please try again.")
            break
        if not permits(have, needs):
            replies.append(f"{you_have(have)}; `{said_as}` needs {needs}.")
        elif isinstance(command, CommandError):
            replies.append(f"{code_span(command.line.strip())}: {command}" if command.line.strip() else str(command))
        else:
            result = await entry_for(command).handler(event, command, bot, Invocation(policy, have))
            if result.reply:
                replies.append(result.reply)
            scheduled.extend(result.scheduled)
            accepted = accepted or result.accepted
    await _reply(event, bot, replies, accepted)
    return CommentOutcome(tuple(replies), tuple(scheduled))


async def _base_clusters(event: CommentEvent, bot: BotContext, policy: RepoPolicy, have: str, commands: list) -> tuple[RepoPolicy, list]:
    """The policy with the clusters of the PR's base branch, and the comment parsed again with them (for a commenter
    who may precheck; anyone else learns nothing about the repository's clusters)."""
    pull = await read_pull_request(bot, event.repo.full_name, event.number)
    if not permits(have, PRECHECK.needs(policy)):
        return policy, commands
    policy = await with_clusters(bot, policy, policy.clone_url or event.repo.clone_url, pull.base_ref)
    return policy, parse_commands(event.body, policy.cluster_names)


def _is_precheck(command: object) -> bool:
    if isinstance(command, CommandError):
        return command.line.lstrip().startswith(PRECHECK.said_as)
    return entry_for(command).per_cluster  # type: ignore[arg-type]


def _needs(command: object, policy: RepoPolicy) -> tuple[str, str]:
    """The permission a commenter needs before anything is said about `command`, and how a refusal names it."""
    if isinstance(command, CommandError):
        if _is_precheck(command):
            return PRECHECK.needs(policy), PRECHECK.said_as
        return "read", "/fluxwarden"  # a /fluxwarden line that is not a command, or too many commands
    entry = entry_for(command)  # type: ignore[arg-type]
    return entry.needs(policy), entry.said_as


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


async def _quietly(bot: BotContext, operation: str, call) -> None:
    try:
        await asyncio.to_thread(call)
    except InfraError as exc:
        bot.metrics.github_errors.labels(operation).inc()
        log.warning("GitHub %s failed: %s", operation, exc)
