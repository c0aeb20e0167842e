"""handlers/pull_request.py against in-memory fakes: which events schedule which automatic clusters."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from bot.engine.chatops.jobs import PrecheckPlan
from bot.engine.chatops.settings import ClusterPolicy, RepoPolicy
from handlers.pull_request import NO_CLUSTERS, on_pull_request
from bot.engine.chatops.github_models import StatusInfo
from tests.fakes.context import BASE, CLONE_URL, HEAD, REPO, MemoryClaims, MemoryGitHub, MemoryGit, MemorySettings, bot_context, pull_request_event

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
    ("edited", {}, DEV_PROD, MemoryGit(), "action edited does not trigger a run (the base did not change)"),
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


def _retarget(**pull: Any):
    return replace(pull_request_event("edited", base_ref="main", **pull), base_changed_from="release")


def _status(cluster: str, state: str, description: str = "") -> StatusInfo:
    return StatusInfo(state, f"fluxwarden/{cluster}", description or f"{cluster}: {state}", 0.0, "fluxwarden-bot")


@pytest.mark.parametrize("settings, statuses, marked, rerun", [
    # Both automatic: both verdicts go pending at once, and both re-run against the new base.
    (DEV_PROD, [_status("prod", "success"), _status("dev", "failure")], ["fluxwarden/dev", "fluxwarden/prod"], ("dev", "prod")),
    # prod is manual: its green goes pending and stays so until `/precheck prod`; dev re-runs.
    (MANUAL_PROD, [_status("prod", "success"), _status("dev", "success")], ["fluxwarden/dev", "fluxwarden/prod"], ("dev",)),
    # A status already pending (a run under way) is left to that run's supersession; other bots' contexts untouched.
    (DEV_PROD, [_status("prod", "pending"), _status("prod", "success"), StatusInfo("success", "ci/build", "ok", 0.0, "ci")], [], ("dev", "prod")),
    # Nothing posted yet: nothing to mark, the automatic clusters run.
    (DEV_PROD, [], [], ("dev", "prod")),
], ids=["automatic", "manual-prod", "pending-and-foreign", "nothing-yet"])
async def test_a_retarget_marks_every_verdict_pending_and_reruns(settings: MemorySettings, statuses: list[StatusInfo], marked: list[str], rerun: tuple[str, ...]) -> None:
    github = MemoryGitHub(status_list={HEAD: list(statuses)})
    bot = bot_context(config=settings, github=github)
    plan = await on_pull_request(_retarget(), bot)
    assert isinstance(plan, PrecheckPlan) and plan.clusters == rerun
    assert (plan.base_ref, plan.trigger) == ("main", "pull_request retargeted from release")
    written = list(github.status_list[HEAD][: len(github.status_list[HEAD]) - len(statuses)]) if HEAD in github.status_list else []
    assert sorted(s.context for s in written) == marked
    assert all(s.state == "pending" and "judged against release; the PR now targets main" in s.description for s in written)
    # Whatever each context showed before, its newest status is no verdict any more.
    for context in {s.context for s in statuses if s.context.startswith("fluxwarden/")}:
        assert next(s for s in github.status_list[HEAD] if s.context == context).state == "pending"


async def test_a_retarget_marks_pending_as_a_released_claim_with_several_replicas() -> None:
    github = MemoryGitHub(status_list={HEAD: [_status("prod", "success")]})
    await on_pull_request(_retarget(), bot_context(config=MANUAL_PROD, github=github, claims=MemoryClaims()))
    newest = github.status_list[HEAD][0]
    assert newest.state == "pending" and newest.description.endswith(":released]")


async def test_a_retarget_of_a_draft_still_marks_its_verdicts_pending() -> None:
    github = MemoryGitHub(status_list={HEAD: [_status("prod", "success")]})
    result = await on_pull_request(_retarget(draft=True), bot_context(config=DEV_PROD, github=github))
    assert result == "draft PR (runs on ready_for_review)"
    assert github.status_list[HEAD][0].state == "pending"


async def test_a_title_edit_changes_nothing() -> None:
    github = MemoryGitHub(status_list={HEAD: [_status("prod", "success")]})
    bot = bot_context(config=DEV_PROD, github=github)
    assert await on_pull_request(pull_request_event("edited"), bot) == "action edited does not trigger a run (the base did not change)"
    assert [s.state for s in github.status_list[HEAD]] == ["success"] and bot.prechecks.plans == []
