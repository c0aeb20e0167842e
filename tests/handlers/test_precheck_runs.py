"""handlers/precheck_runs.py on the in-memory fakes (tests/fakes/context.py), no HTTP and no service: a run's
states on GitHub from the review's verdict, a retarget, a newer push, a refused final write.

The review itself is an in-memory reviewer (a real `ClusterReview`); reviewing a real repository is
tests/service's and tests/pipeline's.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest

from bot.engine.core.errors import InfraError, UserError
from bot.engine.chatops.jobs import PrecheckKey, PrecheckPlan, Submitted
from bot.engine.core.model import Finding, Severity, TierId
from bot.engine.reporting.review import ClusterReview
from handlers.precheck import INTERRUPTED, Precheck, retargeted_description, running_state, status_context
from handlers.precheck_runs import PrecheckRuns
from tests.engine.test_review_report import cluster_diff, review
from tests.fakes.context import BASE, CLONE_URL, HEAD, REPO, MemoryCounters, MemoryGit, MemoryGitHub, MemoryRunSlots, pull_info

PLAN = PrecheckPlan(REPO, 7, HEAD, "main", CLONE_URL, ("prod",), "pull_request opened")
KEY = PrecheckKey(REPO, 7, "prod")
MARKER = "fluxwarden:precheck:prod"
APPS = TierId("flux-system", "apps")


def clean(*_: Any, **__: Any) -> ClusterReview:
    return review("prod", [], cluster_diff("prod"))


def new_error(*_: Any, **__: Any) -> ClusterReview:
    return review("prod", [], cluster_diff("prod"), [(Finding("render-failed", Severity.ERROR, "kustomize build failed", APPS), True)])


def old_error(*_: Any, **__: Any) -> ClusterReview:
    return review("prod", [], cluster_diff("prod"), [(Finding("render-failed", Severity.ERROR, "kustomize build failed", APPS), False)])


def raises(exc: Exception) -> Callable[..., ClusterReview]:
    def reviewer(*_: Any, **__: Any) -> ClusterReview:
        raise exc
    return reviewer


def crashes(*_: Any, **__: Any) -> ClusterReview:
    raise KeyError("a bug")


class Parts:
    """One PR's fakes and its runs."""

    def __init__(self, reviewer: Callable[..., ClusterReview], tmp_path: Path, *, fetchable: bool = True, down: set[str] | None = None) -> None:
        self.github = MemoryGitHub(is_app=True, down=down or set())
        self.git = MemoryGit(refs={"refs/pull/7/head": HEAD} if fetchable else {})
        self.metrics = MemoryCounters()
        self.slots = MemoryRunSlots()
        precheck = Precheck(github=self.github, git=self.git, live=None, metrics=self.metrics, cache_dir=tmp_path, reviewer=reviewer)
        self.runs = PrecheckRuns(precheck, self.slots, self.metrics, final_retry=0.01)

    async def run_all(self) -> None:
        for _, _, job in list(self.slots.submitted):
            await job()

    @property
    def states(self) -> list[str]:
        return self.github.states(HEAD)

    @property
    def comment(self) -> str:
        return self.github.reply(7, MARKER) or ""


@pytest.mark.parametrize("reviewer, fetchable, state, verdict, said", [
    (clean, True, "success", "success", "prod: no new errors (vs main)"),
    (old_error, True, "success", "success", "prod: no new errors (vs main)"),
    (new_error, True, "failure", "failure", "1 new error in prod (vs main)"),
    (raises(UserError("kustomization.yaml: not valid YAML")), True, "failure", "failure", "kustomization.yaml: not valid YAML"),
    (raises(InfraError("kustomize not found")), True, "error", "error", "infrastructure error: kustomize not found"),
    (crashes, True, "error", "error", "internal error (KeyError)"),
    (clean, False, "error", "error", "infrastructure error: git fetch from"),
], ids=["success", "pre-existing-error", "failure", "user-error", "infra-error", "crash", "fetch-fails"])
async def test_a_run_ends_in_its_verdict(reviewer: Callable[..., ClusterReview], fetchable: bool, state: str, verdict: str, said: str, tmp_path: Path) -> None:
    parts = Parts(reviewer, tmp_path, fetchable=fetchable)
    assert parts.runs.schedule(PLAN) == {"prod": Submitted.STARTED}
    await parts.run_all()
    assert parts.states == ["pending", state]
    latest = parts.github.status_list[HEAD][0]
    assert latest.context == status_context("prod") == "fluxwarden/prod" and latest.description.startswith(said)
    assert parts.comment.startswith(f"<!-- {MARKER} -->") and parts.comment != running_state(PLAN, "prod").comment[0]
    assert [(r["status"], r["conclusion"]) for r in parts.github.check_runs] == [("in_progress", None), ("completed", "success" if state == "success" else "failure")]
    assert parts.metrics.runs.counts == {("prod", verdict): 1}
    if fetchable:
        assert parts.git.fetched == [(CLONE_URL, ("refs/heads/main", "refs/pull/7/head"))]


async def test_a_pr_retargeted_during_its_run_is_left_pending(tmp_path: Path) -> None:
    parts = Parts(new_error, tmp_path)
    parts.runs.schedule(PLAN)
    parts.github.pulls[7] = pull_info(base_ref="release")  # retargeted while the review ran
    await parts.run_all()
    assert parts.states == ["pending", "pending"]
    assert parts.github.status_list[HEAD][0].description == retargeted_description("prod", "main", "release")
    assert parts.comment == running_state(PLAN, "prod").comment[0]  # the verdict for the old base is never posted
    assert parts.metrics.runs.counts == {}


async def test_a_run_a_newer_push_superseded_during_its_review_writes_no_verdict(tmp_path: Path) -> None:
    newer = replace(PLAN, head_sha="d" * 40)

    def pushed_meanwhile(*args: Any, **kwargs: Any) -> ClusterReview:
        parts.slots.current[KEY] = newer.version  # the queue holds a newer run of this PR and cluster now
        return new_error()

    parts = Parts(pushed_meanwhile, tmp_path)
    parts.runs.schedule(PLAN)
    await parts.run_all()
    assert parts.states == ["pending"]  # its claim, nothing after it
    assert parts.comment == running_state(PLAN, "prod").comment[0]
    assert parts.metrics.runs.counts == {}


async def test_a_refused_final_status_is_written_again_and_the_run_stays_busy_meanwhile(tmp_path: Path) -> None:
    def outage_begins(*args: Any, **kwargs: Any) -> ClusterReview:
        parts.github.down = {"status"}  # GitHub took the claim, and refuses the final status
        return clean()

    parts = Parts(outage_begins, tmp_path)
    parts.runs.schedule(PLAN)
    await parts.run_all()
    assert parts.states == ["pending"] and parts.runs.busy(KEY, PLAN.version)
    assert parts.metrics.github_errors.counts["status"] >= 1
    parts.github.down = set()
    await asyncio.wait_for(parts.runs._finalising[KEY], 5)
    assert parts.states == ["pending", "success"] and not parts.runs.busy(KEY, PLAN.version)


async def test_giving_up_ends_the_run_in_error(tmp_path: Path) -> None:
    parts = Parts(clean, tmp_path)
    await parts.runs.give_up(PLAN, "prod")
    assert parts.states == ["error"] and "stopped the checker" in parts.github.status_list[HEAD][0].description
    assert parts.metrics.runs.counts == {("prod", "error"): 1}


async def test_a_run_cancelled_by_shutdown_is_marked_interrupted(tmp_path: Path) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(*_: Any, **__: Any) -> ClusterReview:
        started.set()
        release.wait(5)
        return clean()

    parts = Parts(slow, tmp_path)
    parts.runs.schedule(PLAN)
    task = asyncio.get_running_loop().create_task(parts.slots.submitted[0][2]())
    assert await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert parts.states == ["pending", "pending"] and INTERRUPTED in parts.github.status_list[HEAD][0].description
    assert BASE not in parts.comment
