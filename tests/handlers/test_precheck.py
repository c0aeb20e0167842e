"""handlers/precheck.py on the in-memory fakes: a stopped build is told by its cause, the live and git reads come from the context."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.engine.chatops.jobs import PrecheckPlan
from bot.engine.core.model import Cause, Finding, Severity, TierId
from handlers.context import TierOrderMemo
from handlers.precheck import Precheck, result_state
from tests.engine.test_review_report import cluster_diff, review
from tests.fakes.context import BASE, CLONE_URL, HEAD, REPO, MemoryCounters, MemoryGit, MemoryGitHub

APPS = TierId("flux-system", "apps")


def test_a_build_stopped_by_a_limit_is_an_error_by_its_cause() -> None:
    stopped = Finding("render-failed", Severity.ERROR, "kustomize build timed out after 120s", APPS, cause=Cause.STOPPED)
    state = result_state(review("prod", [], cluster_diff("prod"), [(stopped, True)]))
    assert state.status.state == "error" and "could not render flux-system/apps" in state.status.description


def test_a_message_that_reads_like_a_stop_is_not_one() -> None:
    """No prefix matching: a render-failed whose text starts like a stopped build (kustomize's own words) is the PR's error."""
    failed = Finding("render-failed", Severity.ERROR, "kustomize was killed by the YAML it read", APPS)
    state = result_state(review("prod", [], cluster_diff("prod"), [(failed, True)]))
    assert state.status.state == "failure" and state.status.description == "1 new error in prod"


class _Live:
    """A live reader that says whether it was asked (configured for no cluster)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def configured(self, repo: str, cluster: str) -> bool:
        self.asked.append((repo, cluster))
        return False


def test_the_review_asks_the_context_for_live_access_and_git(tmp_path: Path) -> None:
    live, git, github = _Live(), MemoryGit(), MemoryGitHub()
    precheck = Precheck(github=github, git=git, live=live, metrics=MemoryCounters(), cache_dir=tmp_path)  # type: ignore[arg-type]
    plan = PrecheckPlan(REPO, 7, HEAD, "main", CLONE_URL, ("prod",), "opened")
    desired, verdict = asyncio.run(precheck.desired(plan, "prod"))
    assert live.asked == [(REPO, "prod")]
    assert git.fetched == [(CLONE_URL, ("refs/heads/main", "refs/pull/7/head"))]
    assert verdict == "error" and "git fetch" in desired.status.description and BASE not in desired.status.description


def test_the_tier_order_memo_remembers_a_commit_once_and_forgets_the_oldest() -> None:
    memo = TierOrderMemo(size=2)
    calls: list[str] = []

    def compute(sha: str):  # type: ignore[no-untyped-def]
        return lambda: calls.append(sha) or ValueError(sha)  # type: ignore[func-returns-value]

    first = memo.state(("r", "a"), compute("a"))
    assert memo.state(("r", "a"), compute("a")) is first
    memo.state(("r", "b"), compute("b"))
    memo.state(("r", "c"), compute("c"))
    memo.state(("r", "a"), compute("a"))
    assert calls == ["a", "b", "c", "a"]
    assert memo.lock("Home-Ops/Cluster") is memo.lock("home-ops/cluster")
