"""`/precheck [cluster ...]` in a PR comment: schedule the clusters the commenter may run (handlers/precheck.py runs them)."""

from __future__ import annotations

import logging
from typing import Protocol

from bot.engine.chatops.commands import PrecheckCommand, permits, you_have
from bot.engine.core.errors import InfraError
from bot.engine.chatops.jobs import PrecheckPlan
from bot.engine.chatops.webhook import CommentEvent
from handlers.context import CommandResult, Invocation, Prechecks
from handlers.retry import PullReadContext, read_pull_request

log = logging.getLogger(__name__)


class PrecheckCommandContext(PullReadContext, Protocol):
    """What `/precheck` needs: the PR read (with the limits of retrying it), and the runs."""

    @property
    def prechecks(self) -> Prechecks: ...


async def on_precheck(event: CommentEvent, command: PrecheckCommand, bot: PrecheckCommandContext, call: Invocation) -> CommandResult:
    """Check each cluster's permission and the PR (open, not a refused fork), then schedule the run."""
    if not event.is_pull_request:
        return CommandResult("`/precheck` works on pull requests only.")
    policy = call.policy
    wanted = list(command.clusters or policy.cluster_names)
    if not wanted:
        return CommandResult("no clusters are configured for this repository, and none was found on its base branch.")
    try:
        pull = await read_pull_request(bot, event.repo.full_name, event.number)
    except InfraError as exc:
        log.warning("cannot authorise %s on %s#%s: %s", event.author, event.repo.full_name, event.number, exc)
        return CommandResult("GitHub did not answer while checking your permission; please try again.")
    refused = [c for c in wanted if not permits(call.have, policy.cluster(c).permission)]  # type: ignore[union-attr]
    allowed = [c for c in wanted if c not in refused]
    notes = []
    if refused:
        needs = ", ".join(f"`{c}` needs {policy.cluster(c).permission}" for c in refused)  # type: ignore[union-attr]
        notes.append(f"{you_have(call.have)}; {needs}.")
    if pull.fork and not policy.allow_forks:
        notes.append("PRs from forks are not rendered on this repository (`allow_forks: false`).")
        allowed = []
    if pull.state != "open":
        notes.append("this PR is not open.")
        allowed = []
    if allowed:
        bot.prechecks.schedule(PrecheckPlan(
            repo=event.repo.full_name,
            number=event.number,
            head_sha=pull.head_sha,
            base_ref=pull.base_ref,
            clone_url=policy.clone_url or event.repo.clone_url,
            clusters=tuple(allowed),
            trigger=f"/precheck by @{event.author}",
        ))
    return CommandResult(" ".join(notes) or None, tuple(allowed), accepted=bool(allowed))
