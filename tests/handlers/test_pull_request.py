"""handlers/pull_request.py against in-memory fakes: which events schedule which automatic clusters."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from bot.engine.jobs import PrecheckPlan
from bot.engine.settings import ClusterPolicy, RepoPolicy
from handlers.pull_request import NO_CLUSTERS, on_pull_request
from tests.fakes.context import BASE, CLONE_URL, HEAD, REPO, MemoryGit, MemorySettings, bot_context, pull_request_event

DEV_PROD = MemorySettings()
MANUAL_PROD = MemorySettings(repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("dev"), ClusterPolicy("prod", automatic=False))),))
ALL_MANUAL = MemorySettings(repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("prod", automatic=False),)),))
FORKS = MemorySettings(repos=(replace(DEV_PROD.repos[0], allow_forks=True),))
OTHER = MemorySettings(repos=(RepoPolicy("someone/else"),))
DISCOVER = MemorySettings(repos=(RepoPolicy(REPO),))  # allowlisted without cluster settings


@pytest.mark.parametrize("action, pull, settings, git, outcome", [
    ("opened", {}, DEV_PROD, MemoryGit(), ("dev", "prod")),
    ("synchronize", {}, DEV_PROD, MemoryGit(), ("dev", "prod")),
    ("reopened", {}, DEV_PROD, MemoryGit(), ("dev", "prod")),
    ("ready_for_review", {}, DEV_PROD, MemoryGit(), ("dev", "prod")),
    ("opened", {}, MANUAL_PROD, MemoryGit(), ("dev",)),
    ("opened", {"fork": True}, FORKS, MemoryGit(), ("dev", "prod")),
    ("closed", {}, DEV_PROD, MemoryGit(), "action closed does not trigger a run"),
    ("edited", {}, DEV_PROD, MemoryGit(), "action edited does not trigger a run"),
    ("opened", {}, OTHER, MemoryGit(), "repository not allowlisted"),
    ("opened", {"draft": True}, DEV_PROD, MemoryGit(), "draft PR (runs on ready_for_review)"),
    ("opened", {"fork": True}, DEV_PROD, MemoryGit(), "PR from a fork (allow_forks: false)"),
    ("opened", {}, ALL_MANUAL, MemoryGit(), NO_CLUSTERS),
    ("opened", {}, DISCOVER, MemoryGit(branches={}), NO_CLUSTERS),  # no base branch: no clusters found
    ("opened", {}, DISCOVER, MemoryGit(down=True), "cannot find the clusters of main: git ls-remote from "
     f"{CLONE_URL} failed: could not resolve host"),
], ids=[
    "opened", "synchronize", "reopened", "ready", "manual-cluster-skipped", "fork-allowed", "closed", "edited", "not-allowlisted",
    "draft", "fork-refused", "all-manual", "discovered-none", "discovery-failed",
])
async def test_pull_request(action: str, pull: dict[str, Any], settings: MemorySettings, git: MemoryGit, outcome: Any) -> None:
    bot = bot_context(config=settings, git=git)
    result = await on_pull_request(pull_request_event(action, **pull), bot)
    if isinstance(outcome, tuple):
        assert isinstance(result, PrecheckPlan) and result.clusters == outcome
        assert bot.prechecks.plans == [result]
        assert (result.number, result.head_sha, result.base_ref, result.clone_url, result.trigger) == (7, HEAD, "main", CLONE_URL, f"pull_request {action}")
    else:
        assert result == outcome and bot.prechecks.plans == []


async def test_discovery_reads_the_base_branch_never_the_pr() -> None:
    git = MemoryGit(branches={})
    await on_pull_request(pull_request_event("opened", base_ref="release"), bot_context(config=DISCOVER, git=git))
    assert git.fetched == [(CLONE_URL, ("release",))]


async def test_configured_clone_url_wins() -> None:
    settings = MemorySettings(repos=(replace(DEV_PROD.repos[0], clone_url="https://git.example.com/mirror.git"),))
    bot = bot_context(config=settings)
    plan = await on_pull_request(pull_request_event("opened", base_sha=BASE), bot)
    assert isinstance(plan, PrecheckPlan) and plan.clone_url == "https://git.example.com/mirror.git"
