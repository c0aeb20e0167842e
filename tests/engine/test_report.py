"""The check report's Markdown (bot/engine/reporting/report.py): findings alike grouped, notes folded, within a comment's limit."""

from __future__ import annotations

from bot.engine.core.model import Finding, ObjectRef, Severity, SourceLocation, SourceRef, TierId
from bot.engine.reporting.report import CheckReport, TierSummary, format_markdown, group_findings, message_shape

NS = "flux-system"
SOURCE = SourceRef("GitRepository", NS, NS)


def _tier(i: int) -> TierSummary:
    return TierSummary(TierId(NS, f"tier-{i:03}"), f"tiers/tier-{i:03}", SOURCE, (TierId(NS, f"tier-{i - 1:03}"),) if i else (), True, True, 7, True)


def _missing(i: int) -> Finding:
    tier = TierId(NS, f"tier-{i:03}")
    return Finding(
        "missing-dependency", Severity.ERROR, f"{tier} dependsOn {NS}/gone-{i:03}, which this cluster does not have",
        kustomization=tier, location=SourceLocation(f"clusters/base/tier-{i:03}.yaml", 7),
    )


def _note(i: int) -> Finding:
    ref = ObjectRef("helm.toolkit.fluxcd.io/v2", "HelmRelease", f"ns-{i}", f"app-{i}")
    return Finding("chart-not-rendered", Severity.INFO, f"1 HelmRelease from HelmRepository ns-{i}/repo-{i} not rendered: unreachable", object=ref)


def _report(n: int, findings: list[Finding]) -> CheckReport:
    tiers = tuple(_tier(i) for i in range(n))
    return CheckReport("dev", "clusters/dev", tiers, tuple(t.id for t in tiers), tuple(findings))


def test_findings_alike_are_one_row_with_a_count_and_the_first_places() -> None:
    findings = [_missing(i) for i in range(40)] + [Finding("dependency-cycle", Severity.ERROR, "dependsOn forms a cycle: a → b → a; …", kustomization=TierId(NS, "a"))]
    assert len({message_shape(f) for f in findings[:40]}) == 1
    groups = group_findings(findings)
    assert [len(g.findings) for g in groups] == [40, 1]
    text = format_markdown(_report(40, findings))
    [row] = [line for line in text.splitlines() if "`missing-dependency`" in line]
    assert "`missing-dependency` ×40" in row and "flux-system/tier-000, flux-system/tier-001, flux-system/tier-002 and 37 more" in row
    assert "40 alike; the first: flux-system/tier-000 dependsOn flux-system/gone-000" in row
    assert "`clusters/base/tier-000.yaml:7`" in row


def test_two_alike_stay_two_rows() -> None:
    text = format_markdown(_report(2, [_missing(0), _missing(1)]))
    assert sum("`missing-dependency` |" in line for line in text.splitlines()) == 2


def test_notes_are_folded_after_the_problems() -> None:
    text = format_markdown(_report(3, [_note(1), _missing(0)]))
    problems, notes = text.index("`missing-dependency`"), text.index("<details><summary>ℹ️ 1 note</summary>")
    assert problems < notes < text.index("`chart-not-rendered`") < text.index("</details>")


def test_a_big_report_stays_within_the_limit_and_says_what_it_cut() -> None:
    findings = [_missing(i) for i in range(500)] + [_note(i) for i in range(600)]
    for limit, cut in ((65536, False), (20000, True)):
        text = format_markdown(_report(500, findings), limit=limit)
        assert len(text) <= limit
        assert "`missing-dependency` ×500" in text and "`chart-not-rendered` ×600" in text
        assert ("more tiers (see `fluxwarden check --format text`)" in text) is cut
        assert text.count("<details>") == text.count("</details>") == 2


def test_notes_are_cut_before_the_problems_are() -> None:
    distinct = [Finding("bootstrap", Severity.INFO, f"note {'abcdefghij'[i % 10] * 20} {i:04} " + "y" * 200) for i in range(3)]
    unique = [Finding("x-check", Severity.INFO, "z" * 300 + chr(65 + i % 26) * (i + 1)) for i in range(200)]
    text = format_markdown(_report(10, [_missing(0), *distinct, *unique]), limit=20000)
    assert len(text) <= 20000 and "`missing-dependency`" in text and "more notes" in text
