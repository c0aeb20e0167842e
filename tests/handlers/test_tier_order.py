"""handlers/tier_order.py on the in-memory fakes (tests/fakes/context.py), no HTTP and no service: the follow-up PR
opened, updated, left alone when it already has the fix, closed when the order is right.

Each commit's tree state (its tier order file and every cluster's graph) is put in the service's TierOrderMemo,
as a run remembers it once read; reading it from a real repository with kustomize is tests/service's.
"""

from __future__ import annotations

import pytest

from bot.engine.chatops.github_models import BranchPullRequest
from bot.engine.ordering.tierfix import BRANCH, TreeState
from handlers.context import TierOrderMemo
from handlers.tier_order import TierOrderOutcome, TierOrderTarget, reconcile_tier_order
from tests.fakes.context import CLONE_URL, REPO, MemoryGit, MemoryGitHub, bot_context

FILE, VAR = "bootstrap/standup.sh", "TIER_ORDER"
SCRIPT = "#!/usr/bin/env bash\nTIER_ORDER=(\n  platform\n  platform-config\n  apps\n)\n"
IN_ORDER = {"dev": {"platform": frozenset(), "platform-config": frozenset({"platform"}), "apps": frozenset({"platform-config"})}}
STALE = {"dev": {"platform": frozenset(), "platform-config": frozenset({"platform", "apps"}), "apps": frozenset()}}  # apps must come first now
OLD, HEAD = "1" * 40, "2" * 40  # main's last two commits: HEAD made the order stale
TARGET = TierOrderTarget(REPO, CLONE_URL, "main", f"push of {HEAD[:12]} to main", pushed=HEAD)


def parts(head_graphs: dict, *, bot_pr: bool = False) -> tuple[MemoryGitHub, MemoryGit, TierOrderMemo]:
    memo = TierOrderMemo()
    for sha, graphs in ((OLD, IN_ORDER), (HEAD, head_graphs)):
        memo.state((REPO.lower(), sha), lambda graphs=graphs: TreeState(FILE, VAR, SCRIPT, graphs))
    github, git = MemoryGitHub(), MemoryGit(branches={"main": HEAD}, parents={HEAD: OLD})
    if bot_pr:
        git.branches[BRANCH] = "f" * 40
        github.branch_pulls[42] = BranchPullRequest(42, "old title", "old body", BRANCH, "f" * 40, "main", "fluxwarden-bot", "")
    return github, git, memo


def reconcile(github: MemoryGitHub, git: MemoryGit, memo: TierOrderMemo) -> TierOrderOutcome:
    return reconcile_tier_order(bot_context(github=github, git=git, tier_order=memo), TARGET)


@pytest.mark.parametrize("head_graphs, bot_pr, action, pushed, created, closed", [
    (IN_ORDER, False, "correct", 0, 0, 0),
    (IN_ORDER, True, "closed", 0, 0, 1),
    (STALE, False, "opened", 1, 1, 0),
    (STALE, True, "updated", 1, 0, 0),
], ids=["in-order", "in-order-closes-the-bot-pr", "stale-opens-a-pr", "stale-updates-the-bot-pr"])
def test_the_follow_up_pr_matches_the_default_branch(head_graphs: dict, bot_pr: bool, action: str, pushed: int, created: int, closed: int) -> None:
    github, git, memo = parts(head_graphs, bot_pr=bot_pr)
    outcome = reconcile(github, git, memo)
    assert outcome.action == action and outcome.head == HEAD
    assert (len(git.pushes), github.calls["create_pull"], len(github.closed)) == (pushed, created, closed)
    if action in ("opened", "updated"):
        (sha, parent, path), = git.commits
        assert (parent, path, git.branches[BRANCH]) == (HEAD, FILE, sha) and outcome.commit == sha
        pull = github.branch_pulls[outcome.pull]  # type: ignore[index]
        assert "move platform-config" in pull.title and HEAD[:12] in pull.body and OLD[:12] not in pull.body  # HEAD made it stale
    if action == "closed":
        assert git.deleted == [BRANCH] and github.branch_pulls == {} and "no longer needs this PR" in (github.closed[0][1] or "")
    if action == "correct":
        assert git.commits == [] and github.calls["update_pull"] == 0 and git.deleted == []


@pytest.mark.parametrize("bot_pr", [False, True], ids=["after-opening", "after-updating"])
def test_a_second_run_on_the_same_commit_changes_nothing(bot_pr: bool) -> None:
    github, git, memo = parts(STALE, bot_pr=bot_pr)
    first = reconcile(github, git, memo)
    updates, pushes = github.calls["update_pull"], len(git.pushes)
    again = reconcile(github, git, memo)
    assert again.action == "unchanged" and (again.pull, again.commit) == (first.pull, first.commit)
    assert (github.calls["create_pull"], github.calls["update_pull"], len(git.pushes)) == (0 if bot_pr else 1, updates, pushes)
    assert len(github.branch_pulls) == 1


def test_a_duplicate_bot_pr_is_closed_in_favour_of_the_oldest() -> None:
    github, git, memo = parts(STALE, bot_pr=True)
    github.branch_pulls[43] = BranchPullRequest(43, "t", "b", BRANCH, "f" * 40, "main", "fluxwarden-bot", "")
    outcome = reconcile(github, git, memo)
    assert (outcome.action, outcome.pull) == ("updated", 42)
    assert github.closed == [(43, "Closing: #42 is this repository's tier order PR.")]
