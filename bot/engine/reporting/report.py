"""The result of a check, and its text, JSON and Markdown forms."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bot.engine.core import markdown as md
from bot.engine.tiergraph.coldstart import ColdStart
from bot.engine.core.github_limits import MAX_COMMENT
from bot.engine.core.model import Finding, Severity, SourceRef, TierId, plural

SEVERITY_ICON = {Severity.ERROR: "❌", Severity.WARNING: "⚠️", Severity.INFO: "ℹ️"}


@dataclass(frozen=True)
class TierSummary:
    """One Flux Kustomization as the report lists it."""

    id: TierId
    path: str
    source: SourceRef
    depends_on: tuple[TierId, ...]
    wait: bool
    prune: bool
    objects: int
    rendered: bool
    source_path: str | None = None  # the path inside an ExternalArtifact that `path` maps onto
    kube_config: str | None = None  # applied to another cluster: its spec.kubeConfig
    defined_in: TierId | None = None  # the Kustomization that applies it (None for the cluster entry)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.id.name,
            "namespace": self.id.namespace,
            "path": self.path,
            "dependsOn": [str(d) for d in self.depends_on],
            "wait": self.wait,
            "prune": self.prune,
            "objects": self.objects,
        }
        if self.source_path is not None:
            out["source"] = {"ref": str(self.source), "path": self.source_path}
        if self.kube_config is not None:
            out["kubeConfig"] = self.kube_config
        return out

    def where(self) -> str:
        """`./path`, with the artifact path it maps from and the cluster it applies to when they are not the obvious ones."""
        text = f"./{self.path}"
        if self.source_path is not None:
            text += f" (./{self.source_path} of {self.source})"
        if self.kube_config is not None:
            text += f" → cluster of {self.kube_config}"
        return text


@dataclass(frozen=True)
class CheckReport:
    """Everything `fluxwarden check` found for one cluster."""

    cluster: str
    entry: str
    tiers: tuple[TierSummary, ...]
    order: tuple[TierId, ...]
    findings: tuple[Finding, ...]
    cold_start: ColdStart | None = None  # the simulated cold start (bot/engine/tiergraph/coldstart.py)
    releases: int = 0  # HelmReleases whose charts were rendered
    releases_not_rendered: int = 0  # HelmReleases whose charts could not be had (never a silent pass)

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def errors(self) -> int:
        return self.count(Severity.ERROR)

    @property
    def warnings(self) -> int:
        return self.count(Severity.WARNING)

    @property
    def verdict(self) -> Severity | None:
        """The worst severity among error/warning findings; None when clean."""
        if self.errors:
            return Severity.ERROR
        if self.warnings:
            return Severity.WARNING
        return None

    @property
    def objects(self) -> int:
        return sum(t.objects for t in self.tiers)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cluster": self.cluster,
            "kustomizations": [t.to_json() for t in self.tiers],
            "findings": [f.to_json() for f in self.findings],
        }
        if self.cold_start is not None:
            out["cold_start"] = self.cold_start.to_json()
        if self.releases or self.releases_not_rendered:
            out["helmReleases"] = {"rendered": self.releases, "notRendered": self.releases_not_rendered}
        return out


def listing_order(report: CheckReport) -> list[TierId]:
    """The tiers as listed: each after the Kustomization that applies it and after its dependencies,
    otherwise in the report's apply order (tiers on a cycle keep their place at the end)."""
    position = {tid: i for i, tid in enumerate(report.order)}
    by_id = {t.id: t for t in report.tiers}
    before = {
        tid: {d for d in (*t.depends_on, t.defined_in) if d is not None and d in by_id and d != tid}
        for tid, t in by_id.items()
    }
    out: list[TierId] = []
    placed: set[TierId] = set()
    pending = sorted(by_id, key=lambda t: position.get(t, len(position)))
    while pending:
        ready = [t for t in pending if before[t] <= placed]
        if not ready:  # a cycle (a tier depending on its own child, or dependsOn): the rest as they were
            out.extend(pending)
            break
        out.append(ready[0])
        placed.add(ready[0])
        pending.remove(ready[0])
    return out


def verdict_line(report: CheckReport) -> str:
    """`✅ prod: 6 tiers, 41 objects, no findings` or the same with counts."""
    icon = SEVERITY_ICON.get(report.verdict, "✅") if report.verdict else "✅"
    parts = []
    if report.errors:
        parts.append(plural(report.errors, "error"))
    if report.warnings:
        parts.append(plural(report.warnings, "warning"))
    summary = ", ".join(parts) if parts else "no errors or warnings"
    charts = f", {plural(report.releases, 'chart')} rendered" if report.releases else ""
    missing = f" · {plural(report.releases_not_rendered, 'HelmRelease')} not rendered" if report.releases_not_rendered else ""
    return f"{icon} {report.cluster}: {summary} ({plural(len(report.tiers), 'tier')}, {plural(report.objects, 'object')}{charts}){missing}"


def format_text(report: CheckReport) -> str:
    """Plain text for a terminal: verdict, findings (errors first), then the tier order."""
    lines = [verdict_line(report), ""]
    for finding in report.findings:
        where = f"  {finding.location}" if finding.location else ""
        scope = " ".join(str(x) for x in (finding.kustomization, finding.object) if x)
        lines.append(f"{finding.severity.value.upper():7} {finding.check}  {scope}{where}")
        lines.append(f"        {finding.message}")
    if report.findings:
        lines.append("")
    lines.append(f"tiers of {report.cluster} (entry {report.entry or '.'}), in apply order:")
    by_id = {t.id: t for t in report.tiers}
    for tier_id in listing_order(report):
        tier = by_id[tier_id]
        flags = ", ".join(flag for flag, on in (("wait", tier.wait), ("prune", tier.prune)) if on)
        deps = f" ← {', '.join(str(d) for d in tier.depends_on)}" if tier.depends_on else ""
        content = plural(tier.objects, "object") if tier.rendered else "not rendered"
        lines.append(f"  {tier_id}  {tier.where()}  {content}{' [' + flags + ']' if flags else ''}{deps}")
    if report.cold_start is not None and report.cold_start.tiers:
        lines += ["", f"cold start: {report.cold_start.timeline()}"]
    return "\n".join(lines) + "\n"


def format_location(finding: Finding, link_base: str | None) -> str:
    """A Markdown `file:line` for a table cell (a link when we know the blob URL base)."""
    if not finding.location:
        return ""
    text = md.code(finding.location, table=True)
    if link_base:
        anchor = f"#L{finding.location.line}" if finding.location.line else ""
        return f"[{text}]({link_base.rstrip('/')}/{md.url_path(finding.location.file)}{anchor})"
    return text


_HEADER = ["| | check | tier | object | where | message |", "|---|---|---|---|---|---|"]
GROUP_MIN = 3  # findings of one shape from this many places become one row
GROUP_SHOWN = 3  # the tiers and objects a grouped row names before "and N more"
_NUMBER = re.compile(r"\d+")
_BACKTICKED = re.compile(r"`[^`]*`")


@dataclass(frozen=True)
class FindingGroup:
    """Findings of one check and one message shape (their own names and numbers aside): one row of the table."""

    findings: tuple[Finding, ...]

    @property
    def first(self) -> Finding:
        return self.findings[0]


def message_shape(f: Finding) -> tuple[str, Severity, str]:
    """What findings alike share: check, severity and the message without its own tier, object, quoted names and numbers."""
    text = f.message
    names = {str(f.kustomization), f.kustomization.name} if f.kustomization else set()
    if f.object is not None:
        names |= {str(f.object), f.object.name}
    for name in sorted((n for n in names if len(n) > 1), key=len, reverse=True):
        text = text.replace(name, "…")
    return f.check, f.severity, _NUMBER.sub("N", _BACKTICKED.sub("`…`", text))


def group_findings(findings: tuple[Finding, ...] | list[Finding]) -> list[FindingGroup]:
    """The findings in their order, those of one shape from GROUP_MIN places or more together (at the first's place)."""
    by_shape: dict[tuple[str, Severity, str], list[Finding]] = {}
    for f in findings:
        by_shape.setdefault(message_shape(f), []).append(f)
    out: list[FindingGroup] = []
    placed: set[tuple[str, Severity, str]] = set()
    for f in findings:
        shape = message_shape(f)
        alike = by_shape[shape]
        if len(alike) < GROUP_MIN:
            out.append(FindingGroup((f,)))
        elif shape not in placed:
            placed.add(shape)
            out.append(FindingGroup(tuple(alike)))
    return out


def _some(values: list[str]) -> str:
    unique = list(dict.fromkeys(v for v in values if v))
    shown = ", ".join(unique[:GROUP_SHOWN])
    return shown + (f" and {len(unique) - GROUP_SHOWN} more" if len(unique) > GROUP_SHOWN else "")


def _row(group: FindingGroup, link_base: str | None) -> str:
    f = group.first
    if len(group.findings) == 1:
        return (
            f"| {SEVERITY_ICON[f.severity]} | `{f.check}` | {md.text(f.kustomization or '')} | "
            f"{md.text(f.object or '')} | {format_location(f, link_base)} | {md.rich(f.message, table=True)} |"
        )
    n = len(group.findings)
    tiers = _some([str(x.kustomization) for x in group.findings if x.kustomization])
    objects = _some([str(x.object) for x in group.findings if x.object])
    return (
        f"| {SEVERITY_ICON[f.severity]} | `{f.check}` ×{n} | {md.text(tiers)} | {md.text(objects)} | {format_location(f, link_base)} | "
        f"{md.rich(f'{n} alike; the first: {f.message}', table=True)} |"
    )


def findings_table(findings: tuple[Finding, ...] | list[Finding], link_base: str | None = None) -> str:
    """The findings as a Markdown table in their order, findings alike grouped (one row, a count, the first few places)."""
    return "\n".join([*_HEADER, *(_row(g, link_base) for g in group_findings(findings))])


def _rows_within(header: list[str], rows: list[str], budget: int, more: str) -> list[str]:
    """`header` and as many `rows` as fit in `budget` characters, then a line saying how many were left out."""
    out, used = list(header), sum(len(h) + 1 for h in header)
    for i, row in enumerate(rows):
        left = len(rows) - i
        if used + len(row) + 1 + (len(more) + 20 if left > 1 else 0) > budget:
            return [*out, "", f"… and {left} more {more}"]
        out.append(row)
        used += len(row) + 1
    return out


def format_markdown(report: CheckReport, link_base: str | None = None, limit: int = MAX_COMMENT) -> str:
    """Markdown for a PR comment or a CI summary, within `limit` characters.

    Findings alike are one row with a count; notes (info findings) are folded; the tier list is folded and,
    like the notes, cut to what the limit leaves (the text and JSON forms list everything).
    """
    problems = [f for f in report.findings if f.severity != Severity.INFO]
    notes = [f for f in report.findings if f.severity == Severity.INFO]
    head = [f"### {md.text(verdict_line(report))}", ""]
    cold = [md.text(f"Cold start: {report.cold_start.timeline()}"), ""] if report.cold_start is not None and report.cold_start.tiers else []
    by_id = {t.id: t for t in report.tiers}
    tier_rows = [
        f"| {md.text(t.id)} | {md.code(t.where(), table=True)} | {t.objects if t.rendered else 'not rendered'} | "
        f"{'✓' if t.wait else ''} | {'✓' if t.prune else ''} | {md.text(', '.join(str(d) for d in t.depends_on))} |"
        for t in (by_id[tid] for tid in listing_order(report))
    ]
    problem_rows = [_row(g, link_base) for g in group_findings(problems)]
    note_rows = [_row(g, link_base) for g in group_findings(notes)]
    tier_header = ["<details><summary>Tiers in apply order</summary>", "", "| tier | path | objects | wait | prune | dependsOn |", "|---|---|---|---|---|---|"]
    note_header = [f"<details><summary>{SEVERITY_ICON[Severity.INFO]} {plural(len(notes), 'note')}</summary>", "", *_HEADER]
    closing = ["", "</details>", ""]
    margin = 200  # the closing lines and the last "… and N more" lines
    budget = limit - margin - sum(len(line) + 1 for line in [*head, *cold])
    problem_part = _rows_within(_HEADER, problem_rows, budget, "findings (see `fluxwarden check --format text`)") + [""] if problems else []
    budget -= sum(len(line) + 1 for line in problem_part)
    # The notes and the tier list share what is left: each is cut only when both do not fit.
    note_need = sum(len(line) + 1 for line in [*note_header, *note_rows, *closing]) if notes else 0
    tier_need = sum(len(line) + 1 for line in [*tier_header, *tier_rows, *closing])
    note_budget = note_need if note_need + tier_need <= budget else max(budget // 2, budget - tier_need)
    note_part = _rows_within(note_header, note_rows, note_budget, "notes") + closing if notes else []
    budget -= sum(len(line) + 1 for line in note_part)
    tier_part = _rows_within(tier_header, tier_rows, budget, "tiers (see `fluxwarden check --format text`)") + closing
    body = "\n".join([*head, *problem_part, *note_part, *cold, *tier_part])
    return md.bounded(body, limit)
