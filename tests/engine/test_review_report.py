"""Review output (`check --base`): text, JSON, Markdown PR comment with Mermaid tier graph, and its splitting.

Reviews are built by hand (CheckReport, Finding, ClusterDiff…): no kustomize, no git.
"""

from __future__ import annotations

import json
import re

import pytest

from bot.engine.reporting.diff import ChangeKind, ClusterDiff, ObjectChange, SecretKeyChanges, TierDiff
from bot.engine.core.model import Finding, ObjectRef, Severity, SourceLocation, SourceRef, TierId
from bot.engine.reporting.report import CheckReport, TierSummary
from bot.engine.reporting.review import ClusterReview, ReviewedFinding
from bot.engine.reporting.review_report import (
    MARKER,
    format_review_markdown,
    finding_summary,
    format_review_text,
    mermaid_label,
    review_to_json,
    review_verdict_line,
    tier_graph_mermaid,
)
from tests.golden import assert_golden

SOURCE = SourceRef("GitRepository", "flux-system", "flux-system")
BASE = "0123456789abcdef0123456789abcdef01234567"
HEAD = "fedcba9876543210fedcba9876543210fedcba98"
LINK = "https://github.com/acme/home-ops/blob/" + HEAD

# --------------------------------------------------------------------------------------------
# building blocks


def tid(text: str) -> TierId:
    return TierId.parse(text)


def summary(name: str, *deps: str, objects: int = 3, path: str | None = None) -> TierSummary:
    t = tid(name)
    return TierSummary(t, path if path is not None else t.name, SOURCE, tuple(tid(d) for d in deps), True, True, objects, True)


def ref(text: str, api_version: str = "v1") -> ObjectRef:
    kind, namespace, name = text.split("/")
    return ObjectRef(api_version, kind, namespace, name)


def yaml_diff(old: list[str], new: list[str], name: str = "x") -> str:
    """A unified diff in the diff module's shape (headers, one hunk), written out by hand."""
    lines = [f"--- a/{name}", f"+++ b/{name}", f"@@ -1,{len(old)} +1,{len(new)} @@"]
    lines += [f"-{line}" for line in old] + [f"+{line}" for line in new]
    return "\n".join(lines) + "\n"


def change(kind: ChangeKind, obj: str, tier: str, *, from_tier: str | None = None, diff: str = "", keys: SecretKeyChanges | None = None, api_version: str = "v1") -> ObjectChange:
    lines = sum(1 for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++ ", "--- ")))
    if keys is not None:
        lines += 2 * len(keys.changed)
    return ObjectChange(kind, ref(obj, api_version), tid(tier), tid(from_tier) if from_tier else None, diff, keys, lines)


def tier_diff(*changes: ObjectChange) -> TierDiff:
    return TierDiff(changes[0].tier, tuple(changes))


def cluster_diff(cluster: str, *tiers: TierDiff, added: tuple[str, ...] = (), removed: tuple[str, ...] = (), uncompared: tuple[str, ...] = ()) -> ClusterDiff:
    return ClusterDiff(
        cluster,
        tuple(sorted(tiers, key=lambda t: (t.size, t.tier))),
        tuple(tid(t) for t in added),
        tuple(tid(t) for t in removed),
        tuple(tid(t) for t in uncompared),
    )


def finding(check: str, severity: Severity, message: str, tier: str | None = None, obj: str | None = None, where: str | None = None) -> Finding:
    location = None
    if where:
        file, _, line = where.partition(":")
        location = SourceLocation(file, int(line) if line else None)
    return Finding(check, severity, message, tid(tier) if tier else None, ref(obj) if obj else None, location)


def review(
    cluster: str,
    tiers: list[TierSummary],
    diff: ClusterDiff,
    findings: list[tuple[Finding, bool]] = (),  # type: ignore[assignment]
    touched: tuple[str, ...] = (),
    head_sha: str | None = HEAD,
    resolved: tuple[Finding, ...] = (),
) -> ClusterReview:
    ordered = sorted(findings, key=lambda pair: pair[0].sort_key())
    head = CheckReport(cluster, f"clusters/{cluster}", tuple(tiers), tuple(t.id for t in tiers), tuple(f for f, _ in ordered))
    return ClusterReview(
        cluster=cluster,
        base_sha=BASE,
        head_sha=head_sha,
        head=head,
        diff=diff,
        findings=tuple(ReviewedFinding(f, new) for f, new in ordered),
        changed_files=frozenset(),
        changed_tiers=frozenset(diff.changed_tiers() | {tid(t) for t in touched}),
        resolved=resolved,
    )


# --------------------------------------------------------------------------------------------
# scenarios

WEB_DIFF = (
    "--- a/Deployment/apps/web\n+++ b/Deployment/apps/web\n@@ -10,7 +10,7 @@\n"
    "   template:\n     spec:\n       containers:\n"
    "-      - image: ghcr.io/acme/web:1.4.2\n+      - image: ghcr.io/acme/web:1.5.0\n"
    "         name: web\n         ports:\n         - containerPort: 8080\n"
)
TRICKY_DIFF = (  # a context line of three backticks would close a ``` fence
    "--- a/ConfigMap/apps/readme\n+++ b/ConfigMap/apps/readme\n@@ -1,4 +1,4 @@\n"
    " data:\n   README.md: |\n"
    " ```\n-old text\n+new text\n"
)


def prod_review() -> ClusterReview:
    """Five tiers (plus a removed one): changes, a move, a Secret, new and pre-existing findings."""
    tiers = [
        summary("flux-system", objects=6, path="clusters/prod"),
        summary("platform", objects=16),
        summary("platform-config", "platform", objects=5),
        summary("apps", "platform-config", objects=10),
        summary("platform-config-cdi", "platform-config", objects=2),
    ]
    diff = cluster_diff(
        "prod",
        tier_diff(
            change(ChangeKind.ADDED, "ConfigMap/apps/web-env", "apps", diff=yaml_diff([], ["apiVersion: v1", "data:", "  LOG_LEVEL: info", "kind: ConfigMap"])),
            change(ChangeKind.CHANGED, "Deployment/apps/web", "apps", diff=WEB_DIFF, api_version="apps/v1"),
            change(ChangeKind.CHANGED, "ConfigMap/apps/readme", "apps", diff=TRICKY_DIFF),
            change(ChangeKind.CHANGED, "Secret/apps/creds", "apps", diff="--- a\n+++ b\n@@ -1 +1 @@\n-  token: '**masked**'\n+  token2: '**masked**'\n", keys=SecretKeyChanges(added=("token2",), removed=("token",), changed=("password",))),
            change(ChangeKind.REMOVED, "Service/apps/web-old", "apps", diff=yaml_diff(["apiVersion: v1", "kind: Service"], [])),
        ),
        tier_diff(
            change(ChangeKind.MOVED, "StorageProfile//ceph-block", "platform-config-cdi", from_tier="platform-config", api_version="cdi.kubevirt.io/v1beta1"),
        ),
        tier_diff(change(ChangeKind.REMOVED, "ConfigMap/legacy/settings", "legacy", diff=yaml_diff(["kind: ConfigMap"], []))),
        removed=("legacy",),
    )
    findings = [
        (finding("missing-crd", Severity.ERROR, "Deployment uses <kind> a|b not installed by any tier", "apps", "Deployment/apps/web", "apps/web.yaml:12"), True),
        (finding("prune-transient", Severity.WARNING, "1 object moves from flux-system/platform-config (prune: true) to flux-system/platform-config-cdi.", "platform-config", "StorageProfile//ceph-block", "platform-config-cdi/profile.yaml:1"), True),
        (finding("tier-order-stale", Severity.WARNING, "bootstrap/standup.sh TIER_ORDER: platform-config-cdi is not listed", "platform-config-cdi", None, "bootstrap/standup.sh:18"), False),
        (finding("unused-variable", Severity.INFO, "variable CLUSTER_NAME is never used", "platform"), False),
    ]
    return review("prod", tiers, diff, findings, touched=("platform",))


def clean_review(cluster: str = "dev") -> ClusterReview:
    return review(cluster, [summary("flux-system", objects=4), summary("apps", objects=7)], cluster_diff(cluster), head_sha=None)


def big_review() -> ClusterReview:
    """60 tiers in three namespaces: a chain each; one change, a move between namespaces, one warning."""
    tiers = []
    for i in range(20):
        tiers.append(summary(f"flux-system/infra-{i}", *([f"flux-system/infra-{i - 1}"] if i else [])))
    for i in range(20):
        tiers.append(summary(f"team-a/a-{i}", f"team-a/a-{i - 1}" if i else "flux-system/infra-19"))
    for i in range(20):
        tiers.append(summary(f"team-b/b-{i}", f"team-b/b-{i - 1}" if i else "flux-system/infra-19"))
    diff = cluster_diff(
        "big",
        tier_diff(change(ChangeKind.CHANGED, "ConfigMap/team-a/cfg", "team-a/a-5", diff=yaml_diff(["  a: 1"], ["  a: 2"]))),
        tier_diff(
            change(ChangeKind.MOVED, "Secret/team-a/s1", "team-a/a-5", from_tier="team-b/b-3", keys=SecretKeyChanges()),
            change(ChangeKind.MOVED, "Secret/team-a/s2", "team-a/a-5", from_tier="team-b/b-3", keys=SecretKeyChanges()),
        ),
    )
    # one TierDiff per tier: merge the two above
    merged = TierDiff(tid("team-a/a-5"), diff.tiers[0].changes + diff.tiers[1].changes)
    diff = ClusterDiff("big", (merged,))
    findings = [(finding("health-check-missing", Severity.WARNING, "no health check for HelmRelease", "team-b/b-10"), True)]
    return review("big", tiers, diff, findings)


def splitting_review(objects: int = 24, huge_lines: int = 2000) -> ClusterReview:
    """Many tiers of medium changes and one object whose diff alone is far bigger than a part."""
    tiers = [summary(f"t{i}") for i in range(8)]
    diffs = []
    n = 0
    for i in range(8):
        changes = []
        for _ in range(objects // 8):
            body = [f"  key{k}: value-{n}-{k}" for k in range(12)]
            changes.append(change(ChangeKind.CHANGED, f"ConfigMap/ns/obj-{n:03}", f"t{i}", diff=yaml_diff(body[:6], body[6:], f"obj-{n}")))
            n += 1
        diffs.append(tier_diff(*changes))
    huge = [f"  line{k}: {'x' * 30}" for k in range(huge_lines)]
    diffs.append(tier_diff(change(ChangeKind.ADDED, "ConfigMap/ns/huge", "t7", diff=yaml_diff([], huge, "huge"))))
    # t7 gets both: rebuild it as one TierDiff
    t7 = TierDiff(tid("t7"), diffs[7].changes + diffs[8].changes)
    diff = cluster_diff("prod", *diffs[:7], t7)
    findings = [
        (finding("missing-crd", Severity.ERROR, f"problem {k} in tier t{k}", f"t{k}", where=f"t{k}/x.yaml:{k + 1}"), k % 2 == 0)
        for k in range(6)
    ]
    return review("prod", tiers, diff, findings)


# --------------------------------------------------------------------------------------------
# verdict, text, JSON


@pytest.mark.parametrize(
    "findings,expected",
    [
        ([], "✅ c: no new findings"),
        ([("e", True)], "❌ c: 1 new error"),
        ([("e", True), ("w", True), ("w", False)], "❌ c: 1 new error, 1 new warning"),
        ([("e", False), ("w", True)], "⚠️ c: 1 new warning"),
        ([("e", False), ("e", False)], "✅ c: no new findings"),  # never a ✅ beside old errors…
        ([("w", True), ("w", True)], "⚠️ c: 2 new warnings"),
    ],
)
def test_verdict_line_counts_new_and_pre_existing(findings: list[tuple[str, bool]], expected: str) -> None:
    made = [
        (finding(f"check-{i}", Severity.ERROR if sev == "e" else Severity.WARNING, "m", "a"), new)
        for i, (sev, new) in enumerate(findings)
    ]
    r = review("c", [summary("a"), summary("b")], cluster_diff("c"), made)
    assert review_verdict_line(r) == expected
    old = sum(1 for _, new in findings if not new)
    text = format_review_markdown([r])[0]
    if old:  # …the old ones are a neutral line of their own
        assert re.search(r"^<sub>2 tiers, 6 objects · pre-existing, not from this change: \d (error|warning)", text, re.M)
        assert "✅" not in text.splitlines()[2]


def test_verdict_line_counts_new_findings_and_fixes() -> None:
    line = review_verdict_line(prod_review())
    assert line == "❌ prod: 1 new error, 1 new warning"  # what changed is the summary's, not the verdict's
    fixed = finding("second-order-crd", Severity.ERROR, "deadlock", "platform-config", "CDI/cdi/cdi")
    r = review("c", [summary("a")], cluster_diff("c"), resolved=(fixed,))
    assert review_verdict_line(r) == "✅ c: fixed 1 · no new findings"  # a fix PR leads with what it fixes


def test_text_golden() -> None:
    assert_golden("review/prod.txt", format_review_text(prod_review()))


def test_text_lists_changes_with_signs() -> None:
    text = format_review_text(prod_review())
    assert "    + ConfigMap/apps/web-env\n" in text
    assert "    - Service/apps/web-old\n" in text
    assert "    ~ Deployment/apps/web (2 lines)\n" in text
    assert "    → StorageProfile/ceph-block moved from flux-system/platform-config\n" in text
    assert "ERROR   new          missing-crd" in text
    # the order of the comment: verdict, what to do, what changed, findings, changes
    assert text.index("to do: see missing-crd") < text.index("what changed:") < text.index("ERROR   new") < text.index("changes by tier")
    # pre-existing findings: a count per check, unless --all
    assert "pre-existing, not from this change (1 warning, 1 note): tier-order-stale 1 warning, unused-variable 1 info (--all lists them)" in text
    assert "WARNING pre-existing tier-order-stale" in format_review_text(prod_review(), all_findings=True)
    assert text.index("ERROR") < text.index("WARNING")
    # largest tier last
    assert text.index("flux-system/apps:") < text.index("flux-system/platform-config-cdi:")  # the new error's tier first
    assert "inputs changed, same render: flux-system/platform\n" in text


def test_text_clean_review() -> None:
    text = format_review_text(clean_review())
    assert text == (
        "✅ dev: no new findings\nnothing to do\nwhat changed:\n  No tier changed.\n2 tiers, 11 objects\n"
        f"base {BASE[:12]} → head working tree\n\nno rendered changes\n"
    )


def test_json_golden() -> None:
    data = review_to_json(prod_review())
    assert_golden("review/prod.json", json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def test_json_shape() -> None:
    data = review_to_json(prod_review())
    assert (data["cluster"], data["base"], data["head"]) == ("prod", BASE, HEAD)
    assert [f["new"] for f in data["findings"]] == [True, True, False, False]
    assert data["findings"][0]["check"] == "missing-crd"
    first = data["changes"][0]
    assert set(first) >= {"tier", "kind", "object", "from_tier", "lines"}
    moved = next(c for c in data["changes"] if c["kind"] == "moved")
    assert moved["from_tier"] == "flux-system/platform-config"
    assert moved["tier"] == "flux-system/platform-config-cdi"
    assert data["changes"][-1]["tier"] == "flux-system/apps"  # largest last
    assert "flux-system/platform" in data["changedTiers"]
    assert data["kustomizations"] == [t.to_json() for t in prod_review().head.tiers]
    assert data["summary"] == {"newErrors": 1, "newWarnings": 1, "errors": 1, "warnings": 2, "fixed": 0}
    assert all(len(f["summary"]) <= 120 for f in data["findings"])
    secret = next(c for c in data["changes"] if c["object"]["kind"] == "Secret")
    assert secret["secretKeys"] == {"added": ["token2"], "removed": ["token"], "changed": ["password"]}


# --------------------------------------------------------------------------------------------
# Mermaid

_EDGE = re.compile(r"^\s*(\w+)\s*(?:-->|-\.->)(?:\|[^|]*\|)?\s*(\w+)\s*$")
_NODE = re.compile(r'^\s*(\w+)\["([^"]*)"\]\s*$')


def mermaid_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```mermaid\n(.*?)^```$", markdown, re.M | re.S)


def assert_edges_avoid_summaries(graph: str, r: ClusterReview) -> None:
    """Every edge joins two drawn tiers (never a summary note), and every drawn tier has an edge."""
    [body] = mermaid_blocks(graph) if graph.startswith("```") else [graph]
    nodes = {m.group(1): m.group(2) for m in map(_NODE.match, body.splitlines()) if m}
    summaries = {n for n, text in nodes.items() if re.search(r"other tiers? unchanged|unchanged tier", text)}
    summaries |= set(re.findall(r"^\s*class ([\w,]+) summary$", body, re.M)[0].split(",")) if " summary\n" in body else set()
    edges = [m.groups() for m in map(_EDGE.match, body.splitlines()) if m]
    for a, b in edges:
        assert a in nodes and b in nodes, (a, b)
        assert a not in summaries and b not in summaries, (a, b)
    assert not summaries
    touched = {t for e in edges for t in e}
    assert set(nodes) == touched, set(nodes) - touched  # no box without an edge


def test_mermaid_small_golden() -> None:
    assert_golden("review/mermaid-5-tiers.md", tier_graph_mermaid(prod_review()))


def test_mermaid_small_content() -> None:
    graph = tier_graph_mermaid(prod_review())
    assert graph.startswith("```mermaid\nflowchart LR\n")
    assert graph.endswith("```\n")
    assert "subgraph" not in graph
    # the new error's tier (apps), the prune hand-over's tier and the move's two ends; nothing else
    assert re.findall(r"^  (t_\w+)\[", graph, re.M) == ["t_flux_system_apps", "t_flux_system_platform_config", "t_flux_system_platform_config_cdi"]
    assert "  t_flux_system_platform_config --> t_flux_system_apps\n" in graph
    assert "  t_flux_system_platform_config -.->|1 moved| t_flux_system_platform_config_cdi\n" in graph
    assert re.search(r"class [^\n]*t_flux_system_apps[^\n]* changed", graph)
    assert re.search(r"class t_flux_system_apps error", graph)
    assert "legacy" not in graph and "t_flux_system_platform[" not in graph
    ids = re.findall(r"^\s*(\w+)\[", graph, re.M)
    assert ids and all(re.fullmatch(r"[A-Za-z0-9_]+", i) for i in ids)


def test_mermaid_change_graph_golden() -> None:
    assert_golden("review/mermaid-60-tiers.md", tier_graph_mermaid(big_review()))


def test_mermaid_draws_only_the_chain_and_the_moves() -> None:
    graph = tier_graph_mermaid(big_review())
    assert "subgraph" not in graph
    # the move's two ends only: a-5's neighbours and b-10's warning (no error) show nothing the graph must
    drawn = re.findall(r"^  (t_\w+)\[", graph, re.M)
    assert sorted(drawn) == ["t_team_a_a_5", "t_team_b_b_3"]
    assert "others" not in graph
    assert "  t_team_b_b_3 -.->|2 moved| t_team_a_a_5\n" in graph
    assert re.search(r't_team_b_b_3\["team-b/b-3<br/>→ 2 moved out"\]', graph)
    assert_edges_avoid_summaries(graph, big_review())


def test_mermaid_colours_new_findings_only() -> None:
    r = review(
        "c",
        [summary("a"), summary("b", "a"), summary("c", "b")],
        cluster_diff("c", tier_diff(change(ChangeKind.ADDED, "ConfigMap/x/y", "b"))),
        [(finding("missing-crd", Severity.ERROR, "old", "a"), False), (finding("missing-crd", Severity.ERROR, "new: needs flux-system/b first", "c"), True)],
    )
    graph = tier_graph_mermaid(r)
    assert "class t_flux_system_c error" in graph
    assert "  t_flux_system_b --> t_flux_system_c\n" in graph  # the tier the error names, with its edge
    assert "t_flux_system_a" not in graph  # an old error is no part of the change's chain


def test_mermaid_label_escaping() -> None:
    assert mermaid_label('a "b" [c] <d> | #e {f} `g` & h\ni') == "a #34;b#34; #91;c#93; #60;d#62; #124; #35;e #123;f#125; #96;g#96; #38; h i"


def test_mermaid_ids_are_sanitised_and_unique() -> None:
    tiers = [summary("a-b/c"), summary("a_b/c"), summary("x.y/end")]
    moves = tier_diff(change(ChangeKind.MOVED, "ConfigMap/n/m", "a_b/c", from_tier="a-b/c"), change(ChangeKind.MOVED, "ConfigMap/n/k", "x.y/end", from_tier="a_b/c"))
    diff = ClusterDiff("c", (TierDiff(tid("a_b/c"), moves.changes[:1]), TierDiff(tid("x.y/end"), moves.changes[1:])))
    graph = tier_graph_mermaid(review("c", tiers, diff))
    ids = re.findall(r"^\s*(\w+)\[", graph, re.M)
    assert ids == ["t_a_b_c", "t_a_b_c_2", "t_x_y_end"]


# --------------------------------------------------------------------------------------------
# Markdown


def test_markdown_single_part_golden() -> None:
    parts = format_review_markdown([prod_review()], link_base=LINK)
    assert len(parts) == 1
    assert_golden("review/prod.md", parts[0])


def test_markdown_multi_cluster_golden() -> None:
    parts = format_review_markdown([prod_review(), clean_review()])
    assert len(parts) == 1
    assert_golden("review/multi.md", parts[0])
    assert "**prod**\n\n**To do:**" in parts[0] and "**dev**\n\n**Nothing to do.**" in parts[0]
    assert "- ❌ 🆕 prod · `missing-crd` · `apps` · `Deployment/web`: " in parts[0]


def test_markdown_first_screen() -> None:
    text = format_review_markdown([prod_review()], link_base=LINK)[0]
    lines = text.splitlines()
    assert lines[0] == MARKER
    assert lines[1] == "### ❌ prod: 1 new error, 1 new warning"
    # what to do comes next: one line per new error (and per prune hand-over)
    assert lines[2:6] == ["**To do:**", "", "1. See `missing-crd` in `apps` below", "2. Set `prune: false` on `platform-config` for one merge, then move the objects and restore it"]
    # then the change in words, before any list of findings
    assert text.index("**What changed:**") < text.index("```mermaid") < text.index("**Findings:** 2 new")
    assert "- Tiers removed: `legacy`\n- 1 object moved: `platform-config` → `platform-config-cdi` (1)\n" in text
    # one count of the pre-existing findings, said the same way in both places
    assert "<sub>5 tiers, 39 objects · pre-existing, not from this change: 1 warning, 1 note</sub>" in text
    assert re.search(r"<summary>Pre-existing, not from this change: 1 warning, 1 note \(counts per check\)</summary>\n\n\| check \| ❌ \| ⚠️ \| ℹ️ \|", text)
    rows = [line for line in lines if line.startswith(("- ❌", "- ⚠️"))]
    assert len(rows) == 2  # new findings only: the pre-existing ones are counted, folded
    assert rows[0].startswith("- ❌ 🆕 `missing-crd` · `apps` · `Deployment/web`: Deployment uses &lt;kind&gt; a\\|b not installed by any tier")
    assert rows[0].endswith(f"([`apps/web.yaml:12`]({LINK}/apps/web.yaml#L12))")  # the repository path, linked to the line
    assert rows[1].startswith("- ⚠️ 🆕 `prune-transient` · `platform-config` · `StorageProfile/ceph-block`: StorageProfile/ceph-block moves out of platform-config")
    assert "<details><summary>❌ 🆕 missing-crd · flux-system/apps · Deployment/apps/web</summary>" in text
    assert "| `tier-order-stale` |  | 1 |  |" in text


def test_markdown_lists_resolved_findings() -> None:
    fixed = finding("second-order-crd", Severity.ERROR, "platform-config waits for StorageProfile.cdi.kubevirt.io ← created by cdi-operator", "platform-config", "CDI//cdi", "platform-config/cdi.yaml:3")
    r = review("prod", [summary("platform-config")], cluster_diff("prod"), resolved=(fixed,), touched=("platform-config",))
    text = format_review_markdown([r])[0]
    lines = text.splitlines()
    assert lines[1:4] == ["### ✅ prod: fixed 1 · no new findings", "**Fixed:** fixed `second-order-crd` in `platform-config` for `CDI/cdi`.", ""]
    assert lines[4] == "**Nothing to do.**"
    row = next(line for line in lines if line.startswith("- ✅ fixed"))
    # in the past tense, and its place is the base's: not linked into the head's tree
    assert row.startswith("- ✅ fixed `second-order-crd` · `platform-config` · `CDI/cdi`: before this change: ")
    assert row.endswith(" (`platform-config/cdi.yaml:3`)")
    assert "<details><summary>✅ fixed second-order-crd · flux-system/platform-config · CDI/cdi</summary>" in text
    assert "fixed: error second-order-crd  flux-system/platform-config CDI/cdi\n" in format_review_text(r)
    assert review_to_json(r)["resolved"][0]["check"] == "second-order-crd" and review_to_json(r)["summary"]["fixed"] == 1


def test_markdown_escapes_cells() -> None:
    text = format_review_markdown([prod_review()])[0]
    assert "Deployment uses &lt;kind&gt; a\\|b not installed by any tier" in text
    assert "a|b" not in text


def test_markdown_diffs_root_cause_first_with_fences() -> None:
    text = format_review_markdown([prod_review()])[0]
    summaries = re.findall(r"<summary><b>([^<]+)</b>", text)
    # apps holds the new error: first, though largest; then the move's destination; the rest smallest first
    assert summaries == ["flux-system/apps", "flux-system/platform-config-cdi", "flux-system/legacy"]
    assert "```diff\n@@ -10,7 +10,7 @@" in text
    assert "--- a/Deployment/apps/web" not in text  # the heading names the object
    # a diff containing ``` gets a longer fence
    assert "````diff\n@@ -1,4 +1,4 @@\n data:\n   README.md: |\n ```\n-old text\n+new text\n````\n" in text


def test_markdown_secret_lists_key_names_only() -> None:
    text = format_review_markdown([prod_review()])[0]
    line = next(line for line in text.splitlines() if "`Secret/apps/creds`" in line)
    assert "added `token2`; removed `token`; changed `password`" in line
    assert "**masked**" not in text


def test_markdown_clean_review_has_no_table_or_graph() -> None:
    text = format_review_markdown([clean_review()])[0]
    assert text.splitlines()[1:3] == ["### ✅ dev: no new findings", "**Nothing to do.**"]
    assert "- No tier changed." in text
    assert "**Findings" not in text and "mermaid" not in text
    assert "No rendered changes." in text


def test_markdown_table_holds_new_rows_only() -> None:
    r = review(
        "c",
        [summary("a")],
        cluster_diff("c"),
        [(finding("x", Severity.WARNING, "fresh", "a"), True), (finding("y", Severity.WARNING, "stale", "a"), False)],
    )
    rows = [line for line in format_review_markdown([r])[0].splitlines() if line.startswith("- ⚠️")]
    assert rows == ["- ⚠️ 🆕 `x` · `a`: fresh"]


# --------------------------------------------------------------------------------------------
# splitting


def _headings(part: str) -> list[str]:
    return re.findall(r"^\*\*[-+~→] \w+\*\* `([^`]+)`", part, re.M)


def _assert_well_formed(parts: list[str], limit: int) -> None:
    assert parts[0].startswith(MARKER + "\n")
    verdicts = re.match(r"<!-- [^\n]* -->\n((?:### [^\n]*\n)+)", parts[0])
    assert verdicts, parts[0][:300]
    for n, part in enumerate(parts, 1):
        assert part.split("\n", 1)[1].startswith(verdicts.group(1))  # every part starts with the verdict lines
        assert len(part) <= limit, (n, len(part))
        if n > 1:
            assert part.startswith(f"<!-- fluxwarden:review part={n} -->\n")
        if len(parts) > 1:
            assert f"part {n} of {len(parts)}" in part
        assert part.count("<details>") == part.count("</details>")
        fences = re.findall(r"^(`{3,})", part, re.M)
        assert len(fences) % 2 == 0


def test_split_small_limit() -> None:
    r = splitting_review()
    parts = format_review_markdown([r], limit=3000)
    assert len(parts) > 3
    _assert_well_formed(parts, 3000)
    # new findings whole in part 1, never elsewhere; pre-existing ones only counted
    for k in range(6):
        assert (f"problem {k} in tier t{k}" in parts[0]) == (k % 2 == 0)
        assert all(f"problem {k} " not in p for p in parts[1:])
    assert "Pre-existing, not from this change: 3 errors" in parts[0]
    # every object change exactly once
    expected = sorted(str(c.ref) for t in r.diff.tiers for c in t.changes)
    shown = sorted(h for p in parts for h in _headings(p))
    assert shown == expected
    # the huge diff is folded with a count
    huge = next(p for p in parts if "`ConfigMap/ns/huge`" in p)
    assert re.search(r"^… [\d,]+ more lines$", huge, re.M)
    # a tier cut in two is reopened as continued
    assert any(re.search(r"<summary><b>[^<]+</b> \(continued\)", p) for p in parts[1:])


def test_split_golden() -> None:
    parts = format_review_markdown([splitting_review(objects=8, huge_lines=120)], limit=3000)
    assert len(parts) > 1
    assert_golden("review/split-3000.md", "\n\n<!-- ====== next comment ====== -->\n\n".join(parts))


def test_split_counts_omitted_changes_past_max_parts() -> None:
    r = splitting_review()
    parts = format_review_markdown([r, prod_review()], limit=3000, max_parts=3)
    assert len(parts) == 3
    _assert_well_formed(parts, 3000)
    shown = [h for p in parts for h in _headings(p)]
    assert len(shown) == len(set(shown))
    note = re.search(r"> ([\d,]+) more object changes? in ([\d,]+) tiers? and 1 more cluster section not shown", parts[-1])
    assert note, parts[-1][-600:]
    total = sum(len(t.changes) for rv in (r, prod_review()) for t in rv.diff.tiers)
    assert len(shown) + int(note.group(1).replace(",", "")) == total


def test_single_part_has_no_part_title() -> None:
    parts = format_review_markdown([prod_review()])
    assert "part 1 of" not in parts[0]


def test_long_messages_are_shortened_not_dropped() -> None:
    findings = [(finding("chk", Severity.ERROR, f"message {k}: " + "very long | texts " * 80, f"t{k}"), True) for k in range(10)]
    r = review("prod", [summary(f"t{k}") for k in range(10)], cluster_diff("prod"), findings)
    parts = format_review_markdown([r], limit=3000)
    _assert_well_formed(parts, 3000)
    rows = [line for line in parts[0].splitlines() if line.startswith("- ❌")]
    assert len(rows) == 10
    assert all(row.endswith(" texts…") for row in rows)  # cut at a word boundary, never mid-word
    assert all(f"message {k}:" in rows[k] for k in range(10))
    assert all(len(row.split("`: ", 1)[1].replace("\\|", "|")) <= 120 for row in rows)


def test_too_many_findings_fold_the_least_important_rows() -> None:
    findings = [(finding("missing-crd", Severity.ERROR, f"new error {k}", "a"), True) for k in range(60)]
    findings += [(finding("old-warning", Severity.WARNING, f"old warning {k}", "a"), False) for k in range(60)]
    r = review("prod", [summary("a")], cluster_diff("prod"), findings)
    parts = format_review_markdown([r], limit=3000)
    _assert_well_formed(parts, 3000)
    text = parts[0]
    folded = re.search(r"… ([\d,]+) more findings not shown", text)
    assert folded
    rows = [line for line in text.splitlines() if line.startswith(("- ❌", "- ⚠️"))]
    assert len(rows) + int(folded.group(1)) == 60  # new findings only: the pre-existing ones are counted
    assert all(row.startswith("- ❌ 🆕") for row in rows)


def test_graph_past_15_boxes_is_folded_and_dropped_when_it_does_not_fit() -> None:
    tiers = [summary(f"t{k}", f"t{(k + 1) % 40}", objects=1) for k in range(40)]  # one cycle through 40 tiers
    path = " → ".join(f"flux-system/t{k % 40}" for k in range(41))
    cycle = finding("dependency-cycle", Severity.ERROR, f"dependsOn forms a cycle: {path}; Flux never applies any of these Kustomizations", "t0")
    r = review("c", tiers, cluster_diff("c"), [(cycle, True)], touched=("t7",))
    [part] = format_review_markdown([r])
    assert "<details><summary>Tier graph: 40 tiers (the chain of the new findings and the moves)</summary>\n\n```mermaid" in part
    assert "**To do:** Remove the `dependsOn` this PR added (`t7` → `t8`)." in part
    parts = format_review_markdown([r], limit=2500)
    _assert_well_formed(parts, 2500)
    assert "mermaid" not in "".join(parts)


def test_limit_too_small() -> None:
    with pytest.raises(ValueError):
        format_review_markdown([prod_review()], limit=500)


@pytest.mark.parametrize("seed", range(25))
def test_split_invariants_on_random_reviews(seed: int) -> None:
    import random

    rng = random.Random(seed)
    clusters = []
    for c in range(rng.randint(1, 3)):
        n_tiers = rng.randint(1, 45)
        tiers = [summary(f"ns{k % 4}/tier-{k}", *([f"ns{(k - 1) % 4}/tier-{k - 1}"] if k and rng.random() < 0.7 else [])) for k in range(n_tiers)]
        diffs = []
        for k in rng.sample(range(n_tiers), rng.randint(0, n_tiers)):
            changes = []
            for j in range(rng.randint(1, 6)):
                kind = rng.choice(list(ChangeKind))
                lines = [f"  k{i}: {'v' * rng.randint(1, 60)} | <x> ```" for i in range(rng.choice([0, 3, 40, 400]))]
                changes.append(change(kind, f"ConfigMap/ns/c{c}-t{k}-o{j}", f"ns{k % 4}/tier-{k}",
                                      from_tier="ns0/tier-0" if kind is ChangeKind.MOVED else None,
                                      diff=yaml_diff(lines[: len(lines) // 2], lines[len(lines) // 2 :]) if lines else ""))
            diffs.append(tier_diff(*changes))
        findings = [
            (finding(f"chk-{i}", rng.choice([Severity.ERROR, Severity.WARNING, Severity.INFO]), "msg | <b> " * rng.randint(1, 30), f"ns{i % 4}/tier-{i % n_tiers}"), rng.random() < 0.5)
            for i in range(rng.randint(0, 25))
        ]
        clusters.append(review(f"c{c}", tiers, cluster_diff(f"c{c}", *diffs), findings))
    limit = rng.choice([1000, 2000, 3000, 8000, 65536])
    max_parts = rng.choice([1, 2, 5, 50])
    parts = format_review_markdown(clusters, limit=limit, max_parts=max_parts)
    _assert_well_formed(parts, limit)
    assert len(parts) <= max_parts
    expected = sorted(str(ch.ref) for r in clusters for t in r.diff.tiers for ch in t.changes)
    shown = [h for p in parts for h in _headings(p)]
    assert len(shown) == len(set(shown))
    note = re.search(r"> ([\d,]+) more object changes? in", parts[-1])
    omitted = int(note.group(1).replace(",", "")) if note else 0
    assert len(shown) + omitted == len(expected)
    rows = sum(1 for line in parts[0].splitlines() if line.startswith(("- ❌ 🆕", "- ⚠️ 🆕")))
    folded = re.search(r"… ([\d,]+) more findings? not shown", parts[0])
    # info findings are notes (folded under the findings), never counted as new findings
    assert rows + (int(folded.group(1)) if folded else 0) == sum(1 for r in clusters for f in r.findings if f.new and f.finding.severity is not Severity.INFO)


# --------------------------------------------------------------------------------------------
# one-line summaries


def test_summary_names_the_object_and_says_why() -> None:
    f = finding("second-order-crd", Severity.ERROR, "2 StorageProfile objects need … (long)", "platform-config", "StorageProfile//longhorn-vm")
    assert len(finding_summary(f)) <= 120
    assert "platform-config" in finding_summary(f) and "never converges" in finding_summary(f)
    warning = finding("second-order-crd", Severity.WARNING, "m", "nfd", "NodeFeatureRule/kube-system/intel-gpu-rule")
    assert finding_summary(warning).endswith(": its first apply can fail")


def test_summary_drops_names_before_the_template() -> None:
    long_tier = "a-very-long-tier-name-" + "x" * 40
    f = finding("second-order-crd", Severity.ERROR, "m", long_tier, "NodeFeatureRule/kube-system/intel-gpu-rule")
    assert finding_summary(f) == "intel-gpu-rule's CRD is created at run time by a CR that its tier cannot wait for: the tier never converges"


def test_summary_without_a_template_cuts_at_a_word_boundary() -> None:
    f = finding("render-failed", Severity.WARNING, "kustomize build failed for apps/web because " + "the overlay patches a missing resource " * 6)
    text = finding_summary(f)
    assert len(text) <= 120 and text.endswith("…")
    assert text[:-1] in f.message and f.message[len(text) - 1] == " "  # the cut falls between words
    # a lead-in too short to stand on its own goes on past its colon
    lead = finding("prune-transient", Severity.INFO, "HIGH IMPACT: StorageProfile/x: CDI re-creates a pruned StorageProfile")
    assert finding_summary(lead).startswith("HIGH IMPACT: StorageProfile/x")
