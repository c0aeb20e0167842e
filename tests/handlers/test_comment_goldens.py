"""Golden files for every comment the bot posts besides the review itself (tests/golden/comments/).

The review comment has its own goldens (tests/golden/review). Here: the precheck's running and error
comments, drift issue bodies and their outage/clean/reopen comments, and the tier order PR's body and
notes. Command replies are golden-tested by the handler tests (tests/handlers, tests/golden/replies) and
against the running service in tests/hardening/test_new_user.py. FLUXWARDEN_UPDATE_GOLDEN=1 rewrites them.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.handlers.test_registry import help_text
from bot.engine.ordering.tierfix import StaleCommit, TierOrderConflict
from handlers.comment import reply_body
from handlers.drift import duplicate_comment, plan_issue
from bot.engine.core.model import Cause, Finding, Severity, TierId
from handlers.precheck import STOPPED_THE_CHECKER, PrecheckPlan, error_state, result_state, running_state
from handlers.tier_order import conflict_note, duplicate_pull_comment, in_order_message, not_configured_message, settled_comment
from tests.golden import assert_golden
from tests.handlers.test_drift import FIELDS, STUCK, T0, apply, report
from tests.engine.test_review_report import cluster_diff, review
from tests.engine.test_tierfix import SEED, plan

HEAD = "c0ffee" + "1" * 34
PLAN = PrecheckPlan("home-ops/cluster", 7, HEAD, "main", "https://github.com/home-ops/cluster.git", ("prod",), "/precheck by @alice")


# --------------------------------------------------------------------------------------------- precheck


def test_running() -> None:
    assert_golden("comments/precheck-running.md", running_state(PLAN, "prod").comment[0])
    resumed = running_state(replace(PLAN, trigger="pull_request synchronize", resumed=True), "prod")
    assert_golden("comments/precheck-running-resumed.md", resumed.comment[0] + f"\nstatus: {resumed.status}\n")


@pytest.mark.parametrize("name, message, infrastructure", [
    ("infrastructure-error", "infrastructure error: git fetch of https://github.com/home-ops/cluster.git failed: timed out after 120s", True),
    ("timeout", "the run took longer than 900s", True),
    ("internal-error", "internal error (KeyError)", True),
    ("stopped-the-checker", STOPPED_THE_CHECKER.format(cluster="prod"), True),
    ("cannot-check", "unknown cluster prod: no clusters/prod and .fluxwarden.yaml names none (known: dev)", False),
])
def test_error(name: str, message: str, infrastructure: bool) -> None:
    state = error_state("prod", message, infrastructure=infrastructure)
    assert_golden(f"comments/precheck-{name}.md", state.comment[0] + f"\nstatus: {state.status}\n")


def test_not_a_verdict() -> None:
    """A build stopped by a limit: `error`, and a banner saying the review is no verdict."""
    stopped = Finding("render-failed", Severity.ERROR, "kustomize build timed out after 120s", TierId("flux-system", "apps"), cause=Cause.STOPPED)
    state = result_state(review("prod", [], cluster_diff("prod"), [(stopped, True)]), link_base=f"https://github.com/home-ops/cluster/blob/{HEAD}")
    assert_golden("comments/precheck-not-a-verdict.md", state.comment[0] + f"\nstatus: {state.status}\nconclusion: {state.conclusion}\n")


# --------------------------------------------------------------------------------------------- command replies


def test_help() -> None:
    assert_golden("comments/help.md", help_text({"dev": "write", "prod": "maintain"}))
    assert_golden("comments/help-no-clusters.md", help_text({}, "triage"))


def test_reply_that_does_not_fit() -> None:
    many = reply_body("fluxwarden:reply:1002", "alice", ["x" * 3000] * 30)
    assert_golden("comments/reply-too-many.md", many.replace("x" * 3000, "x…x"))


# --------------------------------------------------------------------------------------------- drift issues


def _drift_steps() -> dict[str, str]:
    """One drift episode from opening to reopening, each body and comment the bot writes."""
    out: dict[str, str] = {}
    created = plan_issue(report(STUCK), [])
    out["drift-issue-created.md"] = created.body
    issue = apply(created, None)
    later = T0 + timedelta(hours=1)
    updated = plan_issue(report(STUCK, FIELDS, at=later), [issue])
    out["drift-issue-updated.md"] = updated.body
    issue = apply(updated, issue)
    down = plan_issue(report(at=later + timedelta(hours=1), error="could not read cluster prod (context prod-admin): 401 Unauthorized"), [issue])
    out["drift-outage-comment.md"] = down.comments[0]
    out["drift-issue-during-outage.md"] = down.body
    issue = apply(down, issue)
    back = plan_issue(report(STUCK, FIELDS, at=later + timedelta(hours=3)), [issue])
    out["drift-outage-ended-comment.md"] = back.comments[0]
    issue = apply(back, issue)
    clean = plan_issue(report(at=later + timedelta(hours=4)), [issue])
    out["drift-clean-comment.md"] = clean.comments[0]
    out["drift-issue-closed.md"] = clean.body
    issue = apply(clean, issue)
    again = plan_issue(report(FIELDS, at=later + timedelta(hours=5)), [issue])
    out["drift-reopen-comment.md"] = again.comments[0]
    human = replace(apply(again, issue), state="closed")
    persisted = plan_issue(report(FIELDS, at=later + timedelta(hours=6)), [human])
    out["drift-reopen-persisted-comment.md"] = persisted.comments[0]
    out["drift-issue-outage-first.md"] = plan_issue(report(error="could not read cluster prod: cannot reach the API server"), []).body
    out["drift-duplicate-comment.md"] = duplicate_comment(4)
    return out


@pytest.mark.parametrize("name", sorted(_drift_steps()))
def test_drift(name: str) -> None:
    text = _drift_steps()[name]
    assert_golden(f"comments/{name}", text if text.endswith("\n") else text + "\n")


# --------------------------------------------------------------------------------------------- tier order


def test_tier_order_pr() -> None:
    fix = plan({"dev": SEED, "prod": SEED})
    url = "https://github.com/home-ops/cluster/commit/" + "b" * 40
    stale = StaleCommit("b" * 40, "fix(gitops): CDI cold-start deadlock", url, ("new tier `platform-config-cdi` (dependsOn `platform-config`) in dev, prod",))
    assert_golden("comments/tier-order-pr.md", f"title: {fix.pr_title()}\n\n" + fix.pr_body(repo="home-ops/cluster", base="main at aaaaaaaaaaaa", stale=stale))
    unknown = fix.pr_body(repo="home-ops/cluster", base="main at aaaaaaaaaaaa", stale_unknown="The order was already stale 32 first-parent commits back.")
    assert_golden("comments/tier-order-pr-stale-unknown.md", unknown)
    assert_golden("comments/tier-order-commit-message.txt", fix.commit_message(stale) + "\n")


def test_tier_order_notes() -> None:
    dev = {"platform": set(), "platform-config": {"platform"}, "apps": {"platform-config"}}
    prod = {"platform": set(), "platform-config": {"platform", "apps"}, "apps": {"platform"}}
    with pytest.raises(TierOrderConflict) as conflict:
        plan({"dev": dev, "prod": prod}, "TIER_ORDER=(platform platform-config apps)\n")
    assert_golden("comments/tier-order-conflict.md", conflict_note(conflict.value, "main", "a" * 40))
    correct = plan({"dev": SEED, "prod": SEED}, "TIER_ORDER=(platform platform-config platform-config-cdi apps apps-vms)\n")
    closing = settled_comment(in_order_message(correct, "main", "a" * 40), "main", "a" * 40, "push to main by @alice")
    assert_golden("comments/tier-order-closed-in-order.md", closing + "\n")
    closing = settled_comment(not_configured_message("main", "a" * 40), "main", "a" * 40, "/fluxwarden fix-tier-order by @alice on #7")
    assert_golden("comments/tier-order-closed-not-configured.md", closing + "\n")
    assert_golden("comments/tier-order-duplicate.md", duplicate_pull_comment(12) + "\n")
