"""On start, re-run prechecks whose status is still pending: a crash mid-run must not block a PR forever."""

from __future__ import annotations

import asyncio
import logging

from bot.errors import InfraError
from handlers.context import BotContext
from handlers.precheck import STATUS_CONTEXT, PrecheckPlan

log = logging.getLogger(__name__)


async def resume_pending(bot: BotContext) -> list[PrecheckPlan]:
    """Schedule a run for every open PR and cluster whose latest `fluxwarden/<cluster>` status is pending."""
    plans = []
    for policy in bot.config.repos:
        try:
            pulls = await asyncio.to_thread(bot.github.open_pull_requests, policy.name)
        except InfraError as exc:
            log.warning("cannot list open PRs of %s: %s", policy.name, exc)
            continue
        for pull in pulls:
            if pull.fork and not policy.allow_forks:
                continue
            pending = []
            for cluster in policy.cluster_names:
                try:
                    state = await asyncio.to_thread(bot.github.latest_status, policy.name, pull.head_sha, STATUS_CONTEXT.format(cluster=cluster))
                except InfraError as exc:
                    log.warning("cannot read status of %s#%s: %s", policy.name, pull.number, exc)
                    continue
                if state == "pending":
                    pending.append(cluster)
            if pending:
                plan = PrecheckPlan(
                    repo=policy.name,
                    number=pull.number,
                    head_sha=pull.head_sha,
                    base_ref=pull.base_ref,
                    # Not a fork: the head repository is the base repository, so its clone URL is ours.
                    clone_url=policy.clone_url or (pull.head_clone_url if not pull.fork and pull.head_clone_url else f"https://github.com/{policy.name}.git"),
                    clusters=tuple(pending),
                    trigger="restart: status was left pending",
                )
                bot.runner.schedule(plan)
                plans.append(plan)
    return plans
