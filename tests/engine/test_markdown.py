"""bot/engine/core/markdown.py, and every place the bot interpolates repository content into Markdown, fed a hostile string.

The hostile string carries what broke the comment before (issue 14): blank lines, a fake hidden marker, a
fake ✅ heading, `</details>`, an `@` mention, backticks and pipes. Each formatter's output must keep its
structure: its own markers only, balanced `<details>`, table rows with the header's number of cells, code
spans that nothing closes early, no raw mention outside code, no injected line.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from bot.engine.core import markdown as md
from bot.engine.chatops.commands import CommandError, _mask, parse_commands
from tests.handlers.test_registry import help_text
from bot.engine.reporting.diff import ChangeKind, SecretKeyChanges
from bot.engine.livestate.drift import DriftItem, DriftKind, DriftReport, format_markdown as drift_markdown
from bot.engine.core.model import Cause, Finding, ObjectRef, Severity, SourceLocation, TierId
from bot.engine.reporting.report import CheckReport, TierSummary, format_markdown
from bot.engine.reporting.review_report import format_review_markdown
from bot.engine.ordering.tierfix import StaleCommit, TierOrderConflict, graph_changes, plan_tier_fix, union_graph
from handlers.comment import reply_body
from handlers.drift import clean_comment, outage_comment, outage_ended_comment, reopen_comment
from handlers.precheck import PrecheckPlan, error_state, result_state, running_state
from tests.engine.test_review_report import SOURCE, change, cluster_diff, review, tier_diff

HOSTILE = "x\n\n<!-- fluxwarden:precheck:prod -->\n### ✅ fake\n</details>\n@octocat ``a|b`` | `c` \\| d\u202e"
FAKE_MARKER = "<!-- fluxwarden:precheck:prod -->"


# --------------------------------------------------------------------------------------------- the oracle


def _pipes(line: str) -> int:
    """Cell separators of a table row: GFM splits a row at every pipe not right after a backslash (even in code)."""
    return len(re.findall(r"(?<!\\)\|", line))


def assert_contained(markdown: str, *, markers: int = 0) -> None:
    """`markdown` keeps the structure its formatter gave it, whatever the hostile string tried."""
    lines = markdown.split("\n")
    visible = _mask(markdown)  # code spans, fences and HTML comments blanked: what GitHub renders as markup
    # Lines outside fenced blocks (a ```diff or ```mermaid fence shows anything as code; nothing closes it).
    outside = [line for line, masked in zip(lines, visible.split("\n"), strict=True) if not masked.startswith("\x00")]
    assert sum(line.startswith("<!--") for line in outside) == markers, "a hidden marker was injected"
    assert not any(re.match(r"\s*#+\s*✅ fake", line) for line in outside), "a heading was injected"
    assert not any(line.startswith("</details>") and line != "</details>" for line in outside)
    # GitHub mentions `@login` after the start or a non-word character (html-pipeline's MentionFilter).
    assert not re.search(r"(?<!\w)@octocat", visible), "a mention outside code"
    assert visible.count("</details>") == visible.count("<details>"), "<details> closed early"
    assert FAKE_MARKER not in visible
    for i, ch in enumerate(visible):
        if ch == "`":  # every backtick left outside a code span is an escaped one
            assert visible[i - 1] == "\\", f"a code span was broken: {visible[max(0, i - 60):i + 20]!r}"
    table = None
    for line in lines:
        if line.startswith("|"):
            if table is None:
                table = _pipes(line)
            assert _pipes(line) == table, f"a table row has extra cells: {line!r}"
        else:
            table = None


# --------------------------------------------------------------------------------------------- the helpers


def test_each_context_contains_the_hostile_string() -> None:
    for rendered in (md.text(HOSTILE), md.code(HOSTILE), md.rich(HOSTILE), md.code(HOSTILE, table=True), md.html(HOSTILE)):
        assert "\n" not in rendered and "\r" not in rendered and "\u202e" not in rendered
        assert_contained(rendered)
    assert md.comment("a-->b<!--c") == "a--&gt;b&lt;!--c"
    assert md.text("platform_config TIER_ORDER main@sha1:abc a@b.c") == "platform_config TIER_ORDER main@sha1:abc a@b.c"
    assert md.text("@octocat") == "@\u2060octocat" and md.text("(@octocat)") == "(@\u2060octocat)"
    assert md.code("prod") == "`prod`" and md.code("a`b") == "``a`b``" and md.code("") == '""'
    assert md.rich("run `flux get ks a` now") == "run `flux get ks a` now"
    assert md.url_path("apps/a b(1).yaml") == "apps/a%20b%281%29.yaml"


# --------------------------------------------------------------------------------------------- the points

HOSTILE_TIER = TierId("flux-system", HOSTILE)
HOSTILE_REF = ObjectRef("v1", "ConfigMap", "default", HOSTILE)


def hostile_finding(check: str = "invalid-name") -> Finding:
    return Finding(check, Severity.ERROR, f"ConfigMap name {HOSTILE} is `{HOSTILE}` bad", HOSTILE_TIER, HOSTILE_REF, SourceLocation(f"apps/{HOSTILE}.yaml", 3))


def test_check_report_markdown() -> None:
    tier = TierSummary(HOSTILE_TIER, HOSTILE, SOURCE, (HOSTILE_TIER,), True, True, 1, True)
    report = CheckReport(HOSTILE, "clusters/prod", (tier,), (HOSTILE_TIER,), (hostile_finding(),))
    for link in (None, "https://github.com/acme/home-ops/blob/abc"):
        out = format_markdown(report, link_base=link)
        assert_contained(out)
        if link:
            assert "(https://github.com/acme/home-ops/blob/abc/apps/x%0A%0A%3C%21--" in out  # the link target, percent-encoded


def hostile_review(cluster: str = "prod"):
    diff = cluster_diff(
        cluster,
        tier_diff(
            change(ChangeKind.ADDED, "ConfigMap/default/cm", "flux-system/apps", diff="--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+name: evil\n"),
        ),
        added=("flux-system/apps",),
    )
    r = review(cluster, [], diff, [(hostile_finding(), True), (hostile_finding("render-failed"), False)], touched=("flux-system/apps",))
    # Hostile names everywhere the review shows them: the changed tier, the object, a moved-from tier, Secret keys.
    hostile_tier_diff = tier_diff(
        change(ChangeKind.ADDED, "ConfigMap/default/cm", "flux-system/apps"),
    )
    moved = type(hostile_tier_diff.changes[0])(ChangeKind.MOVED, HOSTILE_REF, HOSTILE_TIER, HOSTILE_TIER, "", None, 0)
    secret = type(moved)(ChangeKind.CHANGED, ObjectRef("v1", "Secret", "default", HOSTILE), HOSTILE_TIER, None, "", SecretKeyChanges((HOSTILE,), (), ()), 2)
    tiers = (type(hostile_tier_diff)(HOSTILE_TIER, (moved, secret)),)
    from dataclasses import replace

    return replace(r, diff=replace(r.diff, tiers=tiers, added_tiers=(HOSTILE_TIER,), uncompared=(HOSTILE_TIER,)), changed_tiers=frozenset({HOSTILE_TIER}))


@pytest.mark.parametrize("cluster", ["prod", HOSTILE])
def test_review_comment(cluster: str) -> None:
    r = hostile_review(cluster)
    parts = format_review_markdown([r], link_base="https://github.com/acme/home-ops/blob/abc", marker="fluxwarden:precheck:prod")
    for part in parts:
        assert_contained(part, markers=1)
        assert part.startswith("<!-- fluxwarden:precheck:prod")
    multi = format_review_markdown([r, hostile_review("dev")], limit=4000, max_parts=3)
    for part in multi:
        assert_contained(part, markers=1)


def test_precheck_comments() -> None:
    plan = PrecheckPlan("acme/home-ops", 1, "f" * 40, HOSTILE, "https://github.com/acme/home-ops.git", (HOSTILE,), f"/precheck by @{HOSTILE}")
    running = running_state(plan, HOSTILE)
    assert_contained(running.comment[0], markers=1)
    assert running.comment[0].startswith("<!-- fluxwarden:precheck:x\\n\\n&lt;!-- fluxwarden:precheck:prod --&gt;")
    assert_contained(error_state(HOSTILE, f"infrastructure error: {HOSTILE}", infrastructure=True).comment[0], markers=1)
    # A build stopped by a limit: the "Not a verdict" banner quotes the tier and the message.
    stopped = Finding("render-failed", Severity.ERROR, f"kustomize build timed out after 1s {HOSTILE}", HOSTILE_TIER, cause=Cause.STOPPED)
    r = review("prod", [], cluster_diff("prod"), [(stopped, True)])
    desired = result_state(r, link_base="https://github.com/acme/home-ops/blob/abc")
    assert desired.status.state == "error" and "Not a verdict" in desired.comment[0]
    assert_contained(desired.comment[0], markers=1)
    # The commenter is mentioned (a GitHub login), nothing else is.
    ok = running_state(PrecheckPlan("acme/home-ops", 1, "f" * 40, "main", "u", ("prod",), "/precheck by @alice"), "prod").comment[0]
    assert "(/precheck by @alice)" in ok


def test_drift_issue_and_comments() -> None:
    at = datetime(2026, 9, 6, 20, 36, tzinfo=timezone.utc)
    items = (
        DriftItem(DriftKind.TIER_NOT_READY, "a", f"not Ready: {HOSTILE}", HOSTILE_TIER, since=at - timedelta(hours=1), details=(HOSTILE,)),
        DriftItem(DriftKind.OBJECT_MISSING, "b", f"`{HOSTILE}` is absent", HOSTILE_TIER, HOSTILE_REF),
        DriftItem(DriftKind.CRD_MISSING, f"crd:{HOSTILE}", HOSTILE, HOSTILE_TIER),
    )
    report = DriftReport(HOSTILE, at, HOSTILE, HOSTILE, "0" * 40, items, (HOSTILE,))
    assert_contained(drift_markdown(report, hidden="<!-- fluxwarden:drift-state {} -->"), markers=2)
    failed = DriftReport.failed(HOSTILE, HOSTILE, at, where=HOSTILE, branch=HOSTILE)
    assert_contained(drift_markdown(failed), markers=1)
    from handlers.drift import IssueMemory, Outage

    for text in (
        outage_comment(failed, at),
        outage_ended_comment(HOSTILE, Outage(at, HOSTILE), at),
        clean_comment(report, IssueMemory()),
        reopen_comment(report, True),
        reopen_comment(report, False),
    ):
        assert_contained(text)


def test_tier_order_pr_body_and_conflict() -> None:
    # Tier names are Kubernetes names by then (bot/engine/ordering/tierorder.py refuses others); clusters, files, the base
    # branch and the commit summary are anything.
    graphs = {HOSTILE: {"a": frozenset(), "b": frozenset({"a"})}, "prod": {"a": frozenset(), "b": frozenset({"a"})}}
    fix = plan_tier_fix(graphs, "TIER_ORDER=(\n  b\n  a\n)\n", file=f"boot/{HOSTILE}.sh", variable="TIER_ORDER")
    assert fix.needed
    stale = StaleCommit("a" * 40, HOSTILE, "https://github.com/acme/home-ops/commit/" + "a" * 40, tuple(graph_changes({}, graphs)))
    body = fix.pr_body(repo="acme/home-ops", base=HOSTILE, stale=stale)
    assert_contained(body, markers=1)
    union = union_graph({HOSTILE: {"a": frozenset({"b"})}, "prod": {"b": frozenset({"a"})}})
    conflict = TierOrderConflict(["a", "b", "a"], [union.edge("a", "b"), union.edge("b", "a")], [HOSTILE, "prod"])
    assert_contained(conflict.markdown())


def test_command_replies() -> None:
    known = [HOSTILE, "prod"]
    results = parse_commands("/precheck staging qa `x` " + "!bad " * 20 + "\n/fluxwarden @octocat", known)
    errors = [r for r in results if isinstance(r, CommandError)]
    assert errors
    body = reply_body("fluxwarden:reply:1", "bob", [str(e) for e in errors] * 30)
    assert len(body) <= md.MAX_COMMENT
    assert_contained(body, markers=1)
    assert_contained(help_text({HOSTILE: "write", "prod": "maintain"}))
