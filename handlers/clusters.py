"""A repository allowlisted without per-cluster settings: its clusters, found on the base branch as `check` finds them."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Protocol

from bot.engine.chatops.settings import ClusterPolicy, RepoPolicy
from bot.pipeline.check import commit_clusters
from handlers.context import BranchHeads


class ClustersContext(Protocol):
    """What finding a repository's clusters needs: its base branch fetched."""

    @property
    def git(self) -> BranchHeads: ...


async def with_clusters(bot: ClustersContext, policy: RepoPolicy, clone_url: str, base_ref: str) -> RepoPolicy:
    """`policy` itself when it names clusters; else the clusters of `base_ref` with the default settings
    (automatic, the repository's default permission, no live checks). The base branch, never the PR: a PR must not decide
    what its clusters are (bot/pipeline/review.py reads the configuration from the base too)."""
    if policy.clusters:
        return policy
    names = await asyncio.to_thread(_discover, bot, policy.clone_url or clone_url, base_ref)
    return replace(policy, clusters=tuple(ClusterPolicy(name, permission=policy.permission) for name in names))


def _discover(bot: ClustersContext, clone_url: str, base_ref: str) -> tuple[str, ...]:
    fetched = bot.git.branch_heads(clone_url, [base_ref])
    sha = fetched.heads.get(base_ref)
    if sha is None:
        return ()
    return commit_clusters(fetched.mirror, sha)
