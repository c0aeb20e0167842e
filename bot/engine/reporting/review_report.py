"""Text, JSON and Markdown (PR comment) forms of a `check --base` review. Pure functions, no I/O.

Markdown layout (`format_review_markdown`), in reading order — about the change, not the repository:

1. First screen (always in part 1): one verdict line per cluster from *new* findings only
   (`✅ prod: no new findings · fixed: 1 · 3 tiers changed · 1 object moved`); under it a neutral line
   with the size and the pre-existing counts, the cold-start change, the changed tiers. Then one table of
   the new and resolved findings (a one-line `finding_summary` each, ≤ 120 characters), the full
   explanation of each in a `<details>`, and the pre-existing findings folded into one `<details>` of
   counts per check. When it does not fit: explanations go first, then rows fold into "… N more".
2. Per cluster: a heading, base → head, a Mermaid flowchart of the change (changed tiers, their direct
   dependencies and dependents, tiers with new findings, moves; every other tier one note without
   edges; fill colours for new findings only), notes (new / removed / input-only / not compared tiers).
3. Per changed tier, smallest first and largest last, a `<details>` section with one block per
   object change: `+ added`, `- removed`, `~ changed`, `→ moved`, each with its unified diff in a
   ```diff fence. Secrets list key names only, never a diff.

Splitting: every part starts with the verdict lines and "part N of M"; parts are cut at cluster, tier
and object boundaries only; a tier cut in two is closed and reopened as "(continued)". An object whose
diff alone does not fit an empty part is shortened to "… N more lines". Past `max_parts`, the remaining changes are counted in a closing note.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from bot.engine.core import markdown as md
from bot.engine.reporting.releases import ReleaseDiff, release_tier_id
from bot.engine.reporting.diff import ChangeKind, ObjectChange, SecretKeyChanges, TierDiff
from bot.engine.core.github_limits import MAX_COMMENT
from bot.engine.core.model import Finding, Severity, TierId
from bot.engine.reporting.report import SEVERITY_ICON
from bot.engine.reporting.review import ClusterReview, ReviewedFinding
from bot.engine.reporting.review_summary import actions, chain_tiers, expand_documents, fixed_lines, identical_groups, summary_lines, tier_order, ChangeGroup

DEFAULT_MARKER = "fluxwarden:review"
MARKER = f"<!-- {DEFAULT_MARKER} -->"
MAX_MARKER = 120  # characters a caller's marker may have (the bot appends the cluster name)
NEW_MARK = "🆕"
MIN_LIMIT = 1000
LIST_CAP = 10  # tier names listed in a cluster's notes before "and N more"

CHANGE_SIGN = {ChangeKind.ADDED: "+", ChangeKind.REMOVED: "-", ChangeKind.CHANGED: "~", ChangeKind.MOVED: "→"}
_KIND_SHOWN = (ChangeKind.ADDED, ChangeKind.REMOVED, ChangeKind.CHANGED, ChangeKind.MOVED)


# -- shared -------------------------------------------------------------------------------------


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _counts_phrase(findings: Iterable[Finding], adjective: str = "") -> str | None:
    """`1 new error, 2 new warnings` (errors and warnings only), None when there are none."""
    counts = Counter(f.severity for f in findings)
    words = [f"{counts[s]:,} {adjective}{noun}{'' if counts[s] == 1 else 's'}" for s, noun in ((Severity.ERROR, "error"), (Severity.WARNING, "warning")) if counts[s]]
    return ", ".join(words) or None


def review_verdict(review: ClusterReview) -> Severity | None:
    """Judged by what the change adds: ERROR for a new error, WARNING for a new warning, else None."""
    if review.new_errors:
        return Severity.ERROR
    if review.new_warnings:
        return Severity.WARNING
    return None


def review_verdict_line(review: ClusterReview) -> str:
    """About the change's findings only: `❌ prod: 1 new error` · `✅ prod: fixed 2 · no new findings`."""
    verdict = review_verdict(review)
    icon = SEVERITY_ICON[verdict] if verdict else "✅"
    new = [f.finding for f in review.findings if f.new and f.caused_by is None]
    counted = _counts_phrase(new, "new ")
    notes = sum(1 for f in new if f.severity is Severity.INFO)
    if counted is None:
        counted = f"no new errors or warnings · {_plural(notes, 'new note')}" if notes else "no new findings"
    bits = [counted]
    if review.resolved:
        fixed = f"fixed {len(review.resolved):,}"
        bits = [fixed, *bits] if verdict is None else [*bits, f"fixed: {len(review.resolved):,}"]
    return f"{icon} {review.cluster}: " + " · ".join(bits)


def old_counts(review: ClusterReview) -> str | None:
    """The one count of pre-existing findings: `60 errors, 158 warnings, 12 notes` (every place says the same)."""
    old = [f.finding for f in review.findings if not f.new]
    phrase = _counts_phrase(old)
    notes = sum(1 for f in old if f.severity is Severity.INFO)
    if notes:
        phrase = (phrase + ", " if phrase else "") + _plural(notes, "note")
    return phrase


def pre_existing_line(review: ClusterReview) -> str:
    """The neutral line: `79 tiers, 1,234 objects · pre-existing, not from this change: 60 errors, 158 warnings`."""
    old = old_counts(review)
    size = f"{_plural(len(review.head.tiers), 'tier')}, {_plural(review.head.objects, 'object')}"
    return f"{size} · pre-existing, not from this change: {old}" if old else size


# One line per check (`check/severity` where the severities mean different outcomes), standing on its own
# (what, where, why): {tier} and {object} are filled in, short. Written for the check's error/warning
# findings; others use the message's first sentence.
SUMMARY_TEMPLATES = {
    "second-order-crd": "{object}'s CRD is created at run time by a CR that {tier} cannot wait for: the tier never converges",
    "second-order-crd/warning": "{object}'s CRD is created at run time by a CR that {tier} does not wait for: its first apply can fail",
    "prune-transient": "{object} moves out of {tier} (prune: true): Flux may delete and recreate it, losing its state",
    "prune-transient/many": "{count} objects ({object}, …) move out of {tier} (prune: true): Flux may delete and recreate them",
    "tier-order-stale": "the bootstrap tier order misses {tier} or lists it before a dependency: a scripted standup stalls",
    "duplicate-object": "{object} is applied by two Kustomizations ({tier} and another): they overwrite and may prune it",
    "crd-not-ordered": "{object}'s CRD comes from a tier {tier} does not depend on: the first apply can fail",
    "dependency-not-waited": "{tier} relies on a CRD/CR from a tier with no wait or health check: it can apply too early",
    "health-check-deadlock": "{tier} waits on an object that only a tier depending on it applies: neither becomes Ready",
    "missing-dependency": "{tier} dependsOn a Kustomization this cluster does not have: {tier} never reconciles",
    "dependency-cycle": "dependsOn forms a cycle through {tier}: none of the tiers in it ever reconciles",
    "missing-provider": "{object} uses a provider from a tier {tier} does not depend on: on a cold start it can come first",
    "invalid-name": "{object} has an invalid name or namespace: the API server refuses it",
    "unknown-kind": "no CRD in git or a known chart provides {object}'s kind: its dry-run fails unless a controller adds it",
    "literal-token": "a ${{…}} in {object} ships literally: no postBuild of {tier} substitutes it",
    "undefined-variable": "{variable} (no default) in {object} is not defined for this cluster: Flux substitutes \"\"",
    "config-changed": "this change edits .fluxwarden.yaml: reviewed under the base's configuration, it applies after merge",
}
SUMMARY_MAX = 120
_SENTENCE_END = re.compile(r"(?<=[.;])\s|:\s(?=[A-Z])")
_VARIABLE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
_MANY = re.compile(r"\b(\d+) objects move from ")  # bot/engine/reporting/diff.py prune_transient_findings


def _shorten(text: str, cap: int = SUMMARY_MAX) -> str:
    """`text` within `cap` characters, cut at a word boundary with `…` (never mid-word)."""
    text = " ".join(text.split())
    if len(text) <= cap:
        return text
    cut = text.rfind(" ", 0, cap)
    return (text[:cut] if cut > cap // 2 else text[: cap - 1]).rstrip(" ,;:—-") + "…"


def short_object(obj: object) -> str:
    """`Kind/name` (the namespace shows in the full explanation)."""
    kind = getattr(obj, "kind", None)
    return f"{kind}/{obj.name}" if kind else str(obj)  # type: ignore[attr-defined]


def finding_summary(f: Finding) -> str:
    """A one-line message of at most SUMMARY_MAX characters that stands on its own: what, where, why."""
    many = _MANY.search(f.message) if f.check == "prune-transient" else None
    key = f"{f.check}/many" if many else f"{f.check}/{f.severity.value}"
    template = SUMMARY_TEMPLATES.get(key, SUMMARY_TEMPLATES.get(f.check)) if f.severity in (Severity.ERROR, Severity.WARNING) else None
    if template and ("{object}" in template and f.object is None or "{tier}" in template and f.kustomization is None):
        template = None  # a template names what the finding is about: without it, the message's own words
    if template:
        variable = _VARIABLE.search(f.message)
        # Long names: the object as Kind/name, then its name alone, then the tier unnamed (the table's
        # tier and object columns name both), before the template is given up.
        objects = (short_object(f.object), f.object.name) if f.object else ("an object",)
        tiers = (f.kustomization.name, "its tier") if f.kustomization else ("its tier",)
        for tier, obj in itertools.product(tiers, objects):
            text = template.format(tier=tier, object=obj, variable=variable.group(0) if variable else "a variable", count=many.group(1) if many else "")
            if len(text) <= SUMMARY_MAX:
                return text[0].upper() + text[1:] if text.startswith("its ") else text
    message = " ".join(f.message.split())
    first = _SENTENCE_END.split(message, maxsplit=1)[0].rstrip(".;:, ")
    # A lead-in too short to stand on its own (`HIGH IMPACT:`): the message goes on past it.
    return _shorten(first if len(first) >= 40 else message)


def _ordered_findings(review: ClusterReview) -> list[ReviewedFinding]:
    """Errors first, new before pre-existing within a severity, otherwise the report's order."""
    return sorted(review.findings, key=lambda f: (f.finding.severity.rank, not f.new))


def _ordered_tiers(review: ClusterReview) -> list[TierDiff]:
    """Smallest change first, largest last (the diff module's order; re-sorted stably to be sure)."""
    return sorted(review.diff.tiers, key=lambda t: t.size)


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "working tree"


def _key_phrase(keys: SecretKeyChanges | None) -> str:
    if keys is None or keys.empty:
        return "no key changes"
    parts = []
    for label, names in (("added", keys.added), ("removed", keys.removed), ("changed", keys.changed)):
        if names:
            parts.append(f"{label}: {', '.join(names)}")
    return "keys " + "; ".join(parts)


def _is_secret(change: ObjectChange) -> bool:
    return change.secret_keys is not None or (change.ref.kind == "Secret" and change.ref.group == "")


def _tier_flags(review: ClusterReview, tier: TierId) -> list[str]:
    flags = []
    if tier in review.diff.added_tiers:
        flags.append("new tier")
    if tier in review.diff.removed_tiers:
        flags.append("removed tier")
    return flags


def _input_only_tiers(review: ClusterReview) -> list[TierId]:
    """Tiers the change touched (inputs) whose render is the same on both sides."""
    return sorted(review.changed_tiers - review.diff.changed_tiers() - set(review.diff.uncompared) - set(review.diff.partial))


def _kind_counts(changes: Iterable[ObjectChange]) -> str:
    counts = Counter(c.kind for c in changes)
    return " ".join(f"{CHANGE_SIGN[k]}{counts[k]}" for k in _KIND_SHOWN if counts[k])


# -- text -----------------------------------------------------------------------------------------


def _text_change(change: ObjectChange) -> str:
    sign = CHANGE_SIGN[change.kind]
    details = []
    if change.kind is ChangeKind.MOVED:
        details.append(f"moved from {change.from_tier}")
    if change.kind in (ChangeKind.CHANGED, ChangeKind.MOVED) and change.lines_changed:
        details.append(_plural(change.lines_changed, "line"))
    if _is_secret(change):
        details.append(_key_phrase(change.secret_keys))
    line = f"    {sign} {change.ref}"
    if change.kind is ChangeKind.MOVED:
        head, *rest = details
        return f"{line} {head}" + (f" ({'; '.join(rest)})" if rest else "")
    return line + (f" ({'; '.join(details)})" if details else "")


def _plain(line: str) -> str:
    return line.replace("`", "")


def format_review_text(review: ClusterReview, all_findings: bool = False) -> str:
    """Plain text in the comment's order: verdict, what to do, what changed, new findings, then the changes.

    Pre-existing findings are a count per check unless `all_findings`.
    """
    lines = [review_verdict_line(review)]
    fixed = fixed_lines(review)
    todo = actions(review)
    if fixed and not review.new_errors:
        lines.append("fixed: " + _plain("; ".join(fixed)))
    lines += [f"to do: {_plain(t)}" for t in todo] or ["nothing to do"]
    if fixed and review.new_errors:
        lines.append("fixed: " + _plain("; ".join(fixed)))
    lines.append("what changed:")
    lines += [f"  {_plain(line)}" for line in summary_lines(review)]
    if review.cold_start_change:
        lines.append(f"  cold start: {review.cold_start_change}")
    lines += [pre_existing_line(review), f"base {_short(review.base_sha)} → head {_short(review.head_sha)}", ""]
    findings = _ordered_findings(review)
    new = [r.finding for r in findings if r.new and r.caused_by is None and r.finding.severity is not Severity.INFO]
    notes = [r.finding for r in findings if r.new and r.caused_by is None and r.finding.severity is Severity.INFO]
    old = [r.finding for r in findings if not r.new]

    def finding_lines(f: Finding, tag: str) -> list[str]:
        where = f"  {f.location}" if f.location else ""
        scope = " ".join(str(x) for x in (f.kustomization, f.object) if x)
        return [f"{f.severity.value.upper():7} {tag:12} {f.check}  {scope}{where}", f"        {f.message}"]

    for f in new:
        lines += finding_lines(f, "new")
        lines += [f"        follows from it: {c.severity.value} {c.check}  {' '.join(str(x) for x in (c.kustomization, c.object) if x)}" for c in consequences(review, f)]
    for f in review.resolved:
        scope = " ".join(str(x) for x in (f.kustomization, f.object) if x)
        lines.append(f"fixed: {f.severity.value} {f.check}  {scope}")
    for f in notes:
        lines += finding_lines(f, "new note")
    if old and all_findings:
        for f in old:
            lines += finding_lines(f, "pre-existing")
    elif old:
        per_check = Counter((f.check, f.severity) for f in old)
        counts = ", ".join(f"{check} {n} {severity.value}{'' if n == 1 else 's'}" for (check, severity), n in sorted(per_check.items(), key=lambda item: (item[0][1].rank, -item[1], item[0][0])))
        lines.append(f"pre-existing, not from this change ({old_counts(review)}): {counts} (--all lists them)")
    if new or notes or old or review.resolved:
        lines.append("")
    sections = _sections(review)
    listed = {t.tier for t, _ in sections}
    if sections:
        lines.append("changes by tier (root cause first):")
    for tier, group in sections:
        if group is not None:
            names = ", ".join(f"{short_object(c.ref)} in {c.tier}" for c in group.changes)
            lines.append(f"  the same change in {_plural(len(group.tiers), 'tier')} ({_plural(len(group.changes), 'object')}): {names}")
            lines.append(_text_change(group.changes[0]))
            continue
        flags = "".join(f" [{flag}]" for flag in _tier_flags(review, tier.tier))
        lines.append(f"  {tier.tier}{flags}: {_plural(len(tier.changes), 'object change')}, {_plural(tier.size, 'line')}")
        lines.extend(_text_change(c) for c in tier.changes)
    extra = [
        ("new tiers without compared objects", [t for t in review.diff.added_tiers if t not in listed]),
        ("removed tiers without compared objects", [t for t in review.diff.removed_tiers if t not in listed]),
        ("inputs changed, same render", _input_only_tiers(review)),
        ("not compared (not rendered or failed on a side)", list(review.diff.uncompared)),
        ("compared in part (failed on a side: objects on both sides only)", list(review.diff.partial)),
    ]
    for label, ids in extra:
        if ids:
            lines.append(f"{label}: {', '.join(str(t) for t in ids)}")
    releases = review.releases.releases
    if releases:
        lines.append("charts (each HelmRelease's rendered objects):")
    for release in releases:
        lines.append(f"  {release.summary()}")
        lines.extend(_text_change(c) for c in release.changes)
    if not sections and not releases and not any(ids for _, ids in extra):
        lines.append("no rendered changes")
    return "\n".join(lines) + "\n"


# -- JSON ------------------------------------------------------------------------------------------


def review_to_json(review: ClusterReview) -> dict[str, Any]:
    """The review as JSON: the head report's tiers, findings with `new`, object changes (largest tier last)."""
    return {
        "cluster": review.cluster,
        "base": review.base_sha,
        "head": review.head_sha,
        "summary": {
            "newErrors": review.new_errors,
            "newWarnings": review.new_warnings,
            "errors": review.head.errors,
            "warnings": review.head.warnings,
            "fixed": len(review.resolved),
        },
        "kustomizations": review.head.to_json()["kustomizations"],
        **({"cold_start": {**review.head.cold_start.to_json(), "change": review.cold_start_change}} if review.head.cold_start is not None else {}),
        "findings": [
            {**f.finding.to_json(), "new": f.new, "summary": finding_summary(f.finding), **({"causedBy": finding_summary(f.caused_by)} if f.caused_by else {})}
            for f in _ordered_findings(review)
        ],
        "resolved": [{**f.to_json(), "summary": finding_summary(f)} for f in review.resolved],
        "changes": [
            {
                "tier": str(c.tier),
                "kind": c.kind.value,
                "object": c.ref.to_json(),
                "from_tier": str(c.from_tier) if c.from_tier else None,
                "lines": c.lines_changed,
                "secretKeys": (
                    {"added": list(c.secret_keys.added), "removed": list(c.secret_keys.removed), "changed": list(c.secret_keys.changed)}
                    if c.secret_keys is not None
                    else None
                ),
            }
            for t in _ordered_tiers(review)
            for c in t.changes
        ] + [
            {
                "tier": str(r.tier),
                "helmRelease": f"{r.ref.namespace}/{r.ref.name}",
                "kind": c.kind.value,
                "object": c.ref.to_json(),
                "from_tier": None,
                "lines": c.lines_changed,
                "fields": list(c.fields),
            }
            for r in review.releases.releases
            for c in r.changes
        ],
        "releases": [
            {
                "helmRelease": f"{r.ref.namespace}/{r.ref.name}", "tier": str(r.tier), "chart": r.chart,
                "from": r.base_version, "to": r.head_version, "summary": r.summary(),
            }
            for r in review.releases.releases
        ],
        "changedTiers": sorted(str(t) for t in review.changed_tiers),
        "addedTiers": [str(t) for t in review.diff.added_tiers],
        "removedTiers": [str(t) for t in review.diff.removed_tiers],
        "uncomparedTiers": [str(t) for t in review.diff.uncompared],
        **({"partlyComparedTiers": [str(t) for t in review.diff.partial]} if review.diff.partial else {}),
    }


# -- Mermaid ---------------------------------------------------------------------------------------

_MERMAID_ESCAPE = set('"#<>[]{}|`&')


def mermaid_label(text: str) -> str:
    """Text safe inside a quoted Mermaid label or edge label: specials as `#<code>;` entities."""
    out = []
    for ch in text.replace("\r", " ").replace("\n", " "):
        out.append(f"#{ord(ch)};" if ch in _MERMAID_ESCAPE else ch)
    return "".join(out)


def _mermaid_id(prefix: str, text: str, taken: set[str]) -> str:
    base = prefix + re.sub(r"[^A-Za-z0-9_]", "_", text)
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    taken.add(candidate)
    return candidate


_CLASS_DEFS = (
    "classDef changed stroke:#0969da,stroke-width:3px",
    "classDef error fill:#ffebe9,color:#82071e",
    "classDef warning fill:#fff8c5,color:#4d2d00",
    "classDef removed fill:#f6f8fa,stroke:#8c959f,stroke-dasharray:5 3,color:#57606a",
)
MERMAID_LEGEND = "<sub>Only the tiers a new error runs through and the ends of each move. Arrows point from a dependency to its dependents; dashed: objects moved. Red/amber fill: new errors/warnings; thick blue border: changed.</sub>"
GRAPH_FOLD = 15  # boxes: a larger graph is folded


def _graph_edges(review: ClusterReview, nodes: Sequence[TierId]) -> tuple[list[tuple[TierId, TierId]], Counter]:
    """(dependsOn edges dependency → dependent among `nodes`, moves (from, to) → objects)."""
    tiers = {t.id: t for t in review.head.tiers}
    drawn = set(nodes)
    edges = [(dep, tid) for tid in nodes if tid in tiers for dep in tiers[tid].depends_on if dep in drawn and dep != tid]
    moves = Counter((c.from_tier, c.tier) for c in review.diff.moves if c.from_tier is not None and c.from_tier in drawn and c.tier in drawn)
    return edges, moves


def graph_tiers(review: ClusterReview) -> list[TierId]:
    """The tiers the graph draws: the chains of new errors (cycle, deadlock, CRD) and the ends of moves, each with an edge."""
    nodes = chain_tiers(review)
    edges, moves = _graph_edges(review, nodes)
    touched = {t for e in [*edges, *moves] for t in e}
    return [t for t in nodes if t in touched]


def tier_graph_mermaid(review: ClusterReview) -> str:
    """The graph as a fenced ```mermaid flowchart (dependency → dependent), "" when nothing needs it."""
    nodes = graph_tiers(review)
    if not nodes:
        return ""
    tiers = {t.id: t for t in review.head.tiers}
    removed = set(review.diff.removed_tiers) - set(tiers)
    added = set(review.diff.added_tiers)
    changed = set(review.changed_tiers)
    input_only = set(_input_only_tiers(review))
    worst: dict[TierId, Severity] = {}
    counts: dict[TierId, Counter] = {}
    for reviewed in review.findings:
        f = reviewed.finding
        if not reviewed.new or f.kustomization is None or f.severity not in (Severity.ERROR, Severity.WARNING):
            continue  # colours mean new findings only
        counts.setdefault(f.kustomization, Counter())[f.severity] += 1
        if f.kustomization not in worst or f.severity.rank < worst[f.kustomization].rank:
            worst[f.kustomization] = f.severity
    change_counts = {t.tier: _kind_counts(c for c in t.changes if c.kind is not ChangeKind.MOVED) for t in review.diff.tiers}
    edges, moves = _graph_edges(review, nodes)
    moved_in = Counter(c.tier for c in review.diff.moves)
    moved_out: Counter = Counter(c.from_tier for c in review.diff.moves if c.from_tier is not None)

    taken: set[str] = set()
    node_id = {t: _mermaid_id("t_", str(t), taken) for t in nodes}
    one_namespace = len({t.namespace for t in nodes}) <= 1

    def label(tid: TierId) -> str:
        name = tid.name if one_namespace else str(tid)
        details = []
        if tid in added:
            details.append("new")
        if tid in removed:
            details.append("removed")
        if change_counts.get(tid):
            details.append(change_counts[tid])
        elif tid in input_only:
            details.append("inputs changed")
        if moved_in[tid]:
            details.append(f"{moved_in[tid]:,} moved in")
        if moved_out[tid]:
            details.append(f"→ {moved_out[tid]:,} moved out")
        c = counts.get(tid)
        if c:
            details.append(" ".join(f"{SEVERITY_ICON[s]} {c[s]} new" for s in (Severity.ERROR, Severity.WARNING) if c[s]))
        text = mermaid_label(name) + ("<br/>" + mermaid_label(" · ".join(details)) if details else "")
        return f'{node_id[tid]}["{text}"]'

    lines = ["```mermaid", "flowchart LR"]
    lines.extend(f"  {d}" for d in _CLASS_DEFS)
    lines.extend(f"  {label(t)}" for t in nodes)
    lines.extend(f"  {node_id[a]} --> {node_id[b]}" for a, b in edges)
    for (source, destination), n in moves.items():
        lines.append(f"  {node_id[source]} -.->|{n} moved| {node_id[destination]}")
    classes = [
        ("changed", [t for t in nodes if t in changed and t not in removed]),
        ("error", [t for t in nodes if worst.get(t) == Severity.ERROR]),
        ("warning", [t for t in nodes if worst.get(t) == Severity.WARNING]),
        ("removed", [t for t in nodes if t in removed]),
    ]
    for cls, members in classes:
        if members:
            lines.append(f"  class {','.join(node_id[t] for t in members)} {cls}")
    lines.append("```")
    return "\n".join(lines) + "\n"


def graph_block(review: ClusterReview) -> str:
    """The graph with its legend, folded past GRAPH_FOLD boxes; "" when no new error or move needs one."""
    graph = tier_graph_mermaid(review)
    if not graph:
        return ""
    boxes = len(graph_tiers(review))
    if boxes > GRAPH_FOLD:
        return f"<details><summary>Tier graph: {boxes:,} tiers (the chain of the new findings and the moves)</summary>\n\n{graph}{MERMAID_LEGEND}\n\n</details>\n\n"
    return f"{graph}{MERMAID_LEGEND}\n\n"


# -- Markdown blocks --------------------------------------------------------------------------------


def _fence(body: str) -> str:
    """A backtick fence longer than any backtick run in `body` (a diff line ` ``` ` would close ```)."""
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def _diff_lines(change: ObjectChange) -> list[str]:
    lines = change.diff.splitlines()
    if len(lines) >= 2 and lines[0].startswith("--- ") and lines[1].startswith("+++ "):
        lines = lines[2:]  # the heading above names the object
    return lines


def _change_heading(change: ObjectChange) -> str:
    sign = CHANGE_SIGN[change.kind]
    text = f"**{sign} {change.kind.value}** {md.code(change.ref)}"
    if change.kind is ChangeKind.MOVED:
        text += f" from {md.code(change.from_tier)}"
    if change.kind in (ChangeKind.CHANGED, ChangeKind.MOVED):
        text += f" · {_plural(change.lines_changed, 'line')}" if change.lines_changed else " · unchanged"
    return text


def _secret_block(change: ObjectChange) -> str:
    keys = change.secret_keys
    if keys is None or keys.empty:
        what = "no key changes"
    else:
        parts = []
        for label, names in (("added", keys.added), ("removed", keys.removed), ("changed", keys.changed)):
            if names:
                parts.append(f"{label} " + ", ".join(md.code(n) for n in names))
        what = "keys " + "; ".join(parts)
    return f"{_change_heading(change)}: {what} (Secret: key names only, values are never shown)\n\n"


def _change_block(change: ObjectChange, max_len: int) -> str:
    """One object change: heading and ```diff fence, shortened to `max_len` with "… N more lines"."""
    if _is_secret(change):
        block = _secret_block(change)
        if len(block) <= max_len:
            return block
        return block[: max_len - 3] + "…\n\n"  # only absurd key lists get here
    lines = expand_documents(_diff_lines(change))
    heading = _change_heading(change) + "\n\n"
    if not lines:
        return heading

    def render(shown: int) -> str:
        body = lines[:shown]
        if shown < len(lines):
            body = [*body, f"… {len(lines) - shown:,} more lines"]
        text = "\n".join(body)
        fence = _fence(text)
        return f"{heading}{fence}diff\n{text}\n{fence}\n\n"

    full = render(len(lines))
    if len(full) <= max_len:
        return full
    lo, hi = 0, len(lines) - 1  # largest `shown` that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(render(mid)) <= max_len:
            lo = mid
        else:
            hi = mid - 1
    block = render(lo)
    if len(block) <= max_len:
        return block
    return heading[: max_len - 2] + "\n\n"  # cannot happen with MIN_LIMIT; keeps the bound absolute


def _tier_open(review: ClusterReview, tier: TierDiff, continued: bool = False) -> str:
    bits = [f"<b>{md.html(tier.tier)}</b>"]
    if continued:
        bits.append("(continued)")
    flags = _tier_flags(review, tier.tier)
    summary = f"{_plural(len(tier.changes), 'object')}: {_kind_counts(tier.changes)}, {_plural(tier.size, 'line')}"
    text = " ".join(bits) + " · " + " · ".join([*flags, summary])
    return f"<details><summary>{text}</summary>\n\n"


def _release_open(release: ReleaseDiff, tier: TierDiff, continued: bool = False) -> str:
    """`HelmRelease default/webapp · chart webapp 1.0.0 → 1.1.0 · in flux-system/apps · 2 objects: ~2, 14 lines`."""
    name = f"<b>HelmRelease {md.html(f'{release.ref.namespace}/{release.ref.name}')}</b>" + (" (continued)" if continued else "")
    versions = release.head_version or release.base_version or ""
    if release.base_version and release.head_version and release.base_version != release.head_version:
        versions = f"{release.base_version} → {release.head_version}"
    chart = md.html(f"chart {release.chart} {versions}".rstrip())
    summary = f"{_plural(len(tier.changes), 'object')}: {_kind_counts(tier.changes)}, {_plural(tier.size, 'line')}"
    return f"<details><summary>{name} · {chart} · in {md.html(release.tier)} · {summary}</summary>\n\n"


TIER_CLOSE = "</details>\n\n"


def _name_list(ids: Sequence[TierId]) -> str:
    shown = ", ".join(md.code(t) for t in ids[:LIST_CAP])
    return shown + (f" and {len(ids) - LIST_CAP:,} more" if len(ids) > LIST_CAP else "")


def _cluster_intro(review: ClusterReview, max_len: int) -> str:
    """Heading, base → head, the charts rendered differently and the notes on tiers not compared."""
    notes = [
        ("Inputs changed, same render", _input_only_tiers(review)),
        ("Not compared (not rendered or failed on a side)", list(review.diff.uncompared)),
        ("Compared in part (failed on a side: objects on both sides only)", list(review.diff.partial)),
    ]
    note_lines = [f"- {label}: {_name_list(ids)}." for label, ids in notes if ids]
    short_notes = [f"- {label}: {len(ids):,}." for label, ids in notes if ids]
    releases = review.releases.releases
    charts = [f"- {md.text(r.summary())}" for r in releases[:LIST_CAP]]
    if len(releases) > LIST_CAP:
        charts.append(f"- and {len(releases) - LIST_CAP:,} more HelmReleases rendered differently.")
    note_lines, short_notes = charts + note_lines, (charts[:3] if charts else []) + short_notes
    if not review.diff.tiers and not releases and not review.diff.added_tiers and not review.diff.removed_tiers and not any(ids for _, ids in notes):
        note_lines = short_notes = ["No rendered changes."]
    head = md.code(_short(review.head_sha)) if review.head_sha else "the working tree"
    heading = f"---\n\n#### {md.text(review.cluster)} · base {md.code(_short(review.base_sha))} → head {head}\n\n"
    for n in (note_lines, short_notes, []):
        text = heading + ("".join(line + "\n" for line in n) + "\n" if n else "")
        if len(text) <= max_len:
            return text
    return heading[:max_len]


def _continued_heading(review: ClusterReview) -> str:
    return f"#### {md.text(review.cluster)} (continued)\n\n"


# -- Markdown: first screen --------------------------------------------------------------------------

FIXED_MARK = "✅ fixed"


def _tier_cell(review: ClusterReview, tier: TierId | None) -> str:
    """The tier's name, with its namespace only when the cluster's tiers use more than one."""
    if tier is None:
        return ""
    namespaces = {t.id.namespace for t in review.head.tiers}
    return md.code(tier.name if namespaces <= {tier.namespace} else tier)


def _where_cell(f: Finding, link_base: str | None) -> str:
    """The repository-relative `path:line`, linked to the line when the blob URL base is known."""
    if not f.location:
        return ""
    short = f.location.file + (f":{f.location.line}" if f.location.line else "")
    text = md.code(short)
    if link_base:
        anchor = f"#L{f.location.line}" if f.location.line else ""
        return f"[{text}]({link_base.rstrip('/')}/{md.url_path(f.location.file)}{anchor})"
    return text


def _finding_row(review: ClusterReview, multi: bool, f: Finding, mark: str, link_base: str | None) -> str:
    """One list item: mark, the check and its tier (first, so they never wrap), the message, where."""
    names = [f"`{f.check}`"]
    if multi:
        names.insert(0, md.text(review.cluster))
    if f.kustomization:
        names.append(_tier_cell(review, f.kustomization))
    if f.object:
        names.append(md.code(short_object(f.object)))
    where = _where_cell(f, None if mark == FIXED_MARK else link_base)  # a fixed finding's place is the base's
    before = "before this change: " if mark == FIXED_MARK else ""
    return f"- {mark} " + " · ".join(names) + f": {before}{md.rich(finding_summary(f))}" + (f" ({where})" if where else "")


def consequences(review: ClusterReview, cause: Finding) -> list[Finding]:
    """The new findings that only follow from `cause` (bot/engine/reporting/review.py mark_new caused_by)."""
    return [r.finding for r in review.findings if r.new and r.caused_by == cause]


def _consequence_rows(review: ClusterReview, f: Finding, mark: str) -> str:
    """Under a new finding's list item: the findings re-graded because of it, not each a 🆕 of its own."""
    if mark == FIXED_MARK:
        return ""
    return "".join(
        f"  - follows from it: {SEVERITY_ICON[c.severity]} `{c.check}`" + (f" · {md.code(short_object(c.object))}" if c.object else "") + f": {md.rich(finding_summary(c))}\n"
        for c in consequences(review, f)
    )


def _finding_details(review: ClusterReview, multi: bool, f: Finding, mark: str) -> str:
    """The full explanation and the fix, folded: one `<details>` per new or resolved finding."""
    scope = " · ".join(md.html(x) for x in ([review.cluster] if multi else []) + [f.check] + [str(x) for x in (f.kustomization, f.object) if x])
    where = f"\n\nAt {md.code(f.location)}." if f.location else ""
    return f"<details><summary>{mark} {scope}</summary>\n\n{md.rich(f.message)}{where}\n\n</details>\n\n"


def _notes_details(review: ClusterReview, multi: bool, link_base: str | None) -> str:
    """New info findings: notes, folded, never counted as new findings."""
    notes = [f.finding for f in review.findings if f.new and f.caused_by is None and f.finding.severity is Severity.INFO]
    if not notes:
        return ""
    where = f" on {md.html(review.cluster)}" if multi else ""
    items = "".join(_finding_row(review, False, f, SEVERITY_ICON[Severity.INFO], link_base) + "\n" for f in notes)
    return f"<details><summary>{_plural(len(notes), 'new note')}{where} (info)</summary>\n\n{items}\n</details>\n\n"


def _pre_existing_details(review: ClusterReview, multi: bool) -> str:
    """The findings this change did not add, folded: counts per check."""
    old = [f.finding for f in review.findings if not f.new]
    if not old:
        return ""
    per_check: dict[str, Counter] = {}
    for f in old:
        per_check.setdefault(f.check, Counter())[f.severity] += 1
    severities = (Severity.ERROR, Severity.WARNING, Severity.INFO)
    rows = "".join(
        f"| `{check}` | " + " | ".join(str(c[s]) if c[s] else "" for s in severities) + " |\n"
        for check, c in sorted(per_check.items(), key=lambda item: tuple(-item[1][s] for s in severities) + (item[0],))
    )
    where = f" on {md.html(review.cluster)}" if multi else ""
    return (
        f"<details><summary>Pre-existing{where}, not from this change: {old_counts(review)} (counts per check)</summary>\n\n"
        f"| check | {' | '.join(SEVERITY_ICON[s] for s in severities)} |\n|---|---:|---:|---:|\n{rows}\n"
        "Run `fluxwarden check` for the full list.\n\n</details>\n"
    )


def verdict_block(reviews: Sequence[ClusterReview]) -> str:
    """The verdict lines, one per cluster (the head of every part)."""
    return "".join(f"### {md.text(review_verdict_line(r))}\n" for r in reviews)


def _action_lines(review: ClusterReview) -> str:
    """What the change fixed (past tense, first on a fix PR), then what to do: one line per new error, else "Nothing to do"."""
    out = ""
    fixed = fixed_lines(review)
    if fixed and not review.new_errors:
        out += "**Fixed:** " + md.rich("; ".join(fixed)) + ".\n\n"
    todo = actions(review)
    if not todo:
        out += "**Nothing to do.**\n\n"
    elif len(todo) == 1:
        out += "**To do:** " + md.rich(todo[0][0].upper() + todo[0][1:]) + ".\n\n"
    else:
        out += "**To do:**\n\n" + "".join(f"{i}. {md.rich(line[0].upper() + line[1:])}\n" for i, line in enumerate(todo, 1)) + "\n"
    if fixed and review.new_errors:
        out += "**Fixed:** " + md.rich("; ".join(fixed)) + ".\n\n"
    return out


def _summary_text(review: ClusterReview, cap: int | None = None) -> str:
    """The change in words (one line per kind of change), then the neutral size and pre-existing line."""
    lines = list(summary_lines(review))
    if cap is not None and len(lines) > cap:
        lines = lines[:cap] + [f"{len(lines) - cap} more kinds of change below"]
    body = "".join(f"- {md.rich(line)}\n" for line in lines)
    cold = f"- {md.text('Cold start: ' + review.cold_start_change)}\n" if review.cold_start_change else ""
    return f"**What changed:**\n\n{body}{cold}\n<sub>{md.text(pre_existing_line(review))}</sub>\n\n"


def _cluster_lines(review: ClusterReview, cap: int | None = None, graph: bool = True) -> str:
    """Under a verdict: what to do (and what it fixed), the change in words, the graph of a new error's chain."""
    return _action_lines(review) + _summary_text(review, cap) + (graph_block(review) if graph else "")


def _first_screen(reviews: Sequence[ClusterReview], link_base: str | None, max_len: int) -> tuple[str, str]:
    """(verdict lines, the rest of the first screen): per cluster what to do and what changed, then the findings.

    The list holds new errors and warnings and the fixed ones (one short line each); the full explanations
    follow in `<details>`, then new notes and the pre-existing counts. When it does not fit: the graph goes
    first, then explanations, then list items fold into "… N more".
    """
    multi = len(reviews) > 1
    verdicts = verdict_block(reviews)
    room = max_len - len(verdicts)

    def intro_at(cap: int | None, graph: bool = True) -> str:
        if multi:
            return "".join(f"**{md.text(r.cluster)}**\n\n{_cluster_lines(r, cap, graph)}" for r in reviews)
        return _cluster_lines(reviews[0], cap, graph)

    intro = intro_at(None)
    for cap, graph in ((None, False), (3, False), (0, False)):
        if len(intro) <= room // 2:
            break
        intro = intro_at(cap, graph)
    rows: list[tuple[ClusterReview, Finding, str]] = []
    for r in reviews:
        rows += [(r, f.finding, f"{SEVERITY_ICON[f.finding.severity]} {NEW_MARK}") for f in _ordered_findings(r) if f.new and f.caused_by is None and f.finding.severity is not Severity.INFO]
    rows.sort(key=lambda row: row[1].severity.rank)
    for r in reviews:
        rows += [(r, f, FIXED_MARK) for f in sorted(r.resolved, key=lambda f: f.sort_key())]
    old = "".join(_notes_details(r, multi, link_base) + _pre_existing_details(r, multi) for r in reviews)
    new_count = sum(1 for _, _, mark in rows if mark != FIXED_MARK)
    fixed_count = len(rows) - new_count
    heading = "**Findings:** " + ", ".join(x for x in (f"{new_count:,} new" if new_count else "", f"{fixed_count:,} fixed" if fixed_count else "") if x) + "\n\n"

    def render(keep: int, explained: int, with_old: bool = True) -> str:
        if not rows:
            return intro + (old + "\n" if with_old and old else "")
        body = "".join(_finding_row(r, multi, f, mark, link_base) + "\n" + _consequence_rows(r, f, mark) for r, f, mark in rows[:keep])
        if keep < len(rows):
            body += f"- … {_plural(len(rows) - keep, 'more finding')} not shown (see the JSON output)\n"
        details = "".join(_finding_details(r, multi, f, mark) for r, f, mark in rows[:explained])
        return intro + heading + body + "\n" + details + (old + "\n" if with_old and old else "")

    full = render(len(rows), len(rows))
    if len(full) <= room:
        return verdicts, full
    if len(render(len(rows), 0)) <= room:
        lo, hi = 0, len(rows)  # most explanations that fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(render(len(rows), mid)) <= room:
                lo = mid
            else:
                hi = mid - 1
        return verdicts, render(len(rows), lo)
    if len(render(0, 0, with_old=False)) > room:
        intro = intro_at(0, False)
        fold = f"… {_plural(len(rows), 'more finding')} not shown (see the JSON output)\n\n" if rows else ""
        bare = intro + fold if len(intro + fold) <= room else fold  # a tiny limit: the cluster sections list the tiers
        if len(bare) > room:
            raise ValueError(f"limit too small for the verdict lines ({len(verdicts)} characters)")
        if len(render(0, 0, with_old=False)) > room:
            return verdicts, bare
    lo, hi = 0, len(rows)  # most rows that fit, without explanations or pre-existing counts
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(render(mid, 0, with_old=False)) <= room:
            lo = mid
        else:
            hi = mid - 1
    return verdicts, render(lo, 0, with_old=False)


# -- Markdown: parts -------------------------------------------------------------------------------


def _part_prefix(n: int, m: int, marker: str = DEFAULT_MARKER) -> str:
    # The hidden marker is how the bot finds its own comment to edit in place (as bedevere does).
    return f"<!-- {marker} -->\n" if n == 1 else f"<!-- {marker} part={n} -->\n"


def _part_line(n: int, m: int) -> str:
    """Under the verdict lines of every part of a split comment."""
    return f"<sub>Fluxwarden review · part {n} of {m}</sub>\n\n" if m > 1 else ""


def _part_footer(n: int, m: int) -> str:
    if m == 1:
        return ""
    if n < m:
        return f"<sub>Fluxwarden review · part {n} of {m} · continued in the next comment</sub>\n"
    return f"<sub>Fluxwarden review · part {n} of {m}</sub>\n"


def _omission_note(changes: int, tiers: int, clusters: int, max_parts: int) -> str:
    what = f"{_plural(changes, 'more object change')} in {_plural(tiers, 'tier')}"
    if clusters:
        what += f" and {_plural(clusters, 'more cluster section')}"
    return (
        f"> [!NOTE]\n> {what} not shown: this review is limited to {_plural(max_parts, 'comment')}. "
        "Run `fluxwarden check --base <base>` locally for the full diff.\n\n"
    )


_BIG = 999_999_999
_RESERVE = (
    max(len(_part_prefix(1, _BIG)) + len(_part_footer(1, _BIG)), len(_part_prefix(_BIG, _BIG)) + len(_part_footer(_BIG, _BIG)))
    + len(_part_line(_BIG, _BIG))
    + MAX_MARKER
    + len(_omission_note(_BIG, _BIG, _BIG, _BIG))
    + 8  # newlines around the footer
)


def format_review_markdown(
    reviews: Sequence[ClusterReview] | ClusterReview,
    *,
    link_base: str | None = None,
    limit: int = MAX_COMMENT,
    max_parts: int = 10,
    marker: str = DEFAULT_MARKER,
) -> list[str]:
    """The PR comment: parts of at most `limit` characters each, part 1 starting with `<!-- marker -->`."""
    _check_markdown_args(limit, max_parts, marker)
    if isinstance(reviews, ClusterReview):
        reviews = [reviews]
    verdicts = verdict_block(reviews)
    budget = limit - _RESERVE - len(verdicts)  # every part repeats the verdict lines
    if budget < 250:  # the intro, a tier heading and a diff line at least
        raise ValueError(f"limit too small for the verdict lines ({len(verdicts)} characters)")
    _, first = _first_screen(reviews, link_base, budget + len(verdicts))
    pages = _Pages(budget, max_parts, [[first]], [len(first)])
    for review in reviews:
        _page_cluster(pages, review)
    if pages.full:
        pages.add(_omission_note(pages.omitted_changes, pages.omitted_tiers, pages.omitted_clusters, max_parts))
    return _join_parts(pages.parts, verdicts, marker, limit)


def _check_markdown_args(limit: int, max_parts: int, marker: str) -> None:
    """Refuse a marker that could break out of its HTML comment, and limits no comment can keep."""
    if len(marker) > MAX_MARKER or marker != md.comment(marker):
        raise ValueError("marker must be a short HTML-comment-safe string")
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} characters")
    if max_parts < 1:
        raise ValueError("max_parts must be at least 1")


@dataclass
class _Pages:
    """The comment's part bodies as they fill, each within `budget`; once out of parts, what is left is counted."""

    budget: int
    max_parts: int
    parts: list[list[str]]
    used: list[int]
    full: bool = False
    omitted_changes: int = 0
    omitted_tiers: int = 0
    omitted_clusters: int = 0

    def fits(self, n: int) -> bool:
        """Whether `n` more characters fit in the current part."""
        return self.used[-1] + n <= self.budget

    def add(self, text: str) -> None:
        """Append `text` to the current part."""
        self.parts[-1].append(text)
        self.used[-1] += len(text)

    def new_part(self) -> bool:
        """Start the next part; False (and full from now on) when `max_parts` are in use."""
        if len(self.parts) >= self.max_parts:
            self.full = True
            return False
        self.parts.append([])
        self.used.append(0)
        return True

    def omit(self, changes: int, tiers: int, clusters: int = 0) -> None:
        """Count what the comment does not show, for the omission note."""
        self.omitted_changes += changes
        self.omitted_tiers += tiers
        self.omitted_clusters += clusters


def _sections(review: ClusterReview) -> list[tuple[TierDiff, ChangeGroup | None]]:
    """The diff sections in reading order: tiers with a new finding's root cause, identical changes grouped, the rest smallest first."""
    tiers = tier_order(review)
    groups = identical_groups(tiers)
    grouped = {c for g in groups for c in g.changes}
    lead = {f.finding.kustomization for f in review.findings if f.new and f.finding.severity in (Severity.ERROR, Severity.WARNING)} | set(chain_tiers(review))
    rest = [TierDiff(t.tier, tuple(c for c in t.changes if c not in grouped)) for t in tiers]
    rest = [t for t in rest if t.changes]
    first = [(t, None) for t in rest if t.tier in lead]
    group_sections = [(TierDiff(g.changes[0].tier, g.changes[:1]), g) for g in groups]
    return [*first, *group_sections, *((t, None) for t in rest if t.tier not in lead)]


def _group_open(review: ClusterReview, group: ChangeGroup, max_len: int) -> tuple[str, str]:
    """(opening, reopening): `The same change in 77 tiers`, every object it is made to, the diff shown once below."""
    what = f"<b>The same change in {_plural(len(group.tiers), 'tier')}</b>"
    rest = f" · {CHANGE_SIGN[group.kind]} {group.kind.value} · {_plural(len(group.changes), 'object')} · {_plural(group.changes[0].lines_changed, 'line')} each"
    names = [f"{md.code(short_object(c.ref))} in {_tier_cell(review, c.tier)}" for c in group.changes]
    shown: list[str] = []
    used = 0
    for n in names:
        if used + len(n) > min(3000, max_len // 2):
            break
        shown.append(n)
        used += len(n) + 2
    listed = ", ".join(shown) + (f" and {len(names) - len(shown):,} more" if len(shown) < len(names) else "")
    opening = f"<details><summary>{what}{rest}</summary>\n\nMade to {listed}. The diff of the first:\n\n"
    return opening, f"<details><summary>{what} (continued){rest}</summary>\n\n"


def _page_cluster(pages: _Pages, review: ClusterReview) -> None:
    """Add a cluster's section, section by section, or count it as omitted when the parts are full."""
    sections = _sections(review)
    if pages.full:
        pages.omit(sum(len(t.changes) for t, _ in sections), len(sections), clusters=1)
        return
    intro = _cluster_intro(review, pages.budget)
    if not pages.fits(len(intro)) and not pages.new_part():
        pages.omit(sum(len(t.changes) for t, _ in sections), len(sections), clusters=1)
        return
    pages.add(intro)
    continued = _continued_heading(review)
    for tier, group in sections:
        if pages.full:
            pages.omit(len(tier.changes), 1)
            continue
        if group is not None:
            _page_tier(pages, review, tier, continued, opening=_group_open(review, group, pages.budget))
        else:
            _page_tier(pages, review, tier, continued)
    for release in review.releases.releases:
        if not release.changes:
            continue
        if pages.full:
            pages.omit(len(release.changes), 1)
            continue
        _page_tier(pages, review, TierDiff(release_tier_id(release.ref), release.changes), continued, release)


def _page_tier(
    pages: _Pages, review: ClusterReview, tier: TierDiff, continued: str, release: ReleaseDiff | None = None, opening: tuple[str, str] | None = None
) -> None:
    """Add a tier's (a HelmRelease's, a group's) changes; one cut by a new part reopens there under the cluster's continued heading."""
    heads: tuple[str, str]
    if opening is not None:
        heads = opening
    elif release is not None:
        heads = _release_open(release, tier), _release_open(release, tier, continued=True)
    else:
        heads = _tier_open(review, tier), _tier_open(review, tier, continued=True)
    first, reopening = heads
    max_block = pages.budget - len(continued) - len(reopening) - len(TIER_CLOSE)
    is_open, shown = False, 0
    for index, change in enumerate(tier.changes):
        block = _change_block(change, max_block)
        if pages.fits(len(block) + len(TIER_CLOSE) + (0 if is_open else len(first))):
            if not is_open:
                pages.add(first)
                is_open = True
            pages.add(block)
            shown += 1
            continue
        if is_open:
            pages.add(TIER_CLOSE)
            is_open = False
        if not pages.new_part():
            pages.omit(len(tier.changes) - index, 1)
            break
        pages.add(continued)
        pages.add(reopening if shown else first)
        is_open = True
        pages.add(block)
        shown += 1
    if is_open:
        pages.add(TIER_CLOSE)


def _join_parts(parts: list[list[str]], verdicts: str, marker: str, limit: int) -> list[str]:
    """Each part's comment: marker, verdict lines, (part line), body, (footer); none over `limit`."""
    total = len(parts)
    out = [
        _part_prefix(n, total, marker) + verdicts + ("\n" + _part_line(n, total) if total > 1 else "") + "".join(body).rstrip("\n") + "\n"
        + ("\n" + _part_footer(n, total) if total > 1 else "")
        for n, body in enumerate(parts, 1)
    ]
    for n, text in enumerate(out, 1):
        if len(text) > limit:  # a bug, never a reason to post an over-long comment
            raise AssertionError(f"review part {n} is {len(text)} characters, over the limit of {limit}")
    return out


__all__ = [
    "MARKER",
    "format_review_markdown",
    "format_review_text",
    "mermaid_label",
    "review_to_json",
    "review_verdict_line",
    "tier_graph_mermaid",
]
