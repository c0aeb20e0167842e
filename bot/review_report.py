"""Text, JSON and Markdown (PR comment) forms of a `check --base` review. Pure functions, no I/O.

Markdown layout (`format_review_markdown`), in reading order:

1. First screen (always whole, always in part 1): one verdict line per cluster, then one findings
   table for all clusters (errors first, new before pre-existing, 🆕 on new rows). When the table
   alone does not fit, long messages are shortened (all to the same cap); only if the rows still do
   not fit at a small cap are the least important rows (pre-existing, then warnings, last) folded
   into a "… N more findings" row.
2. Per cluster: a heading, base → head, a Mermaid flowchart of the tier graph (changed tiers get a
   thick border, tiers with findings a red/amber fill, moved objects a dashed labelled edge), notes
   (new / removed / input-only / not compared tiers).
3. Per changed tier, smallest first and largest last, a `<details>` section with one block per
   object change: `+ added`, `- removed`, `~ changed`, `→ moved`, each with its unified diff in a
   ```diff fence. Secrets list key names only, never a diff.

Splitting: parts are cut at cluster, tier and object boundaries only; a tier cut in two is closed
and reopened as "(continued)". An object whose diff alone does not fit an empty part is shortened
to "… N more lines". Past `max_parts`, the remaining changes are counted in a closing note.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable, Sequence

from bot import markdown as md
from bot.diff import ChangeKind, ObjectChange, SecretKeyChanges, TierDiff
from bot.model import Finding, Severity, TierId
from bot.report import SEVERITY_ICON, format_location
from bot.review import ClusterReview, ReviewedFinding

DEFAULT_MARKER = "fluxwarden:review"
MARKER = f"<!-- {DEFAULT_MARKER} -->"
MAX_MARKER = 120  # characters a caller's marker may have (the bot appends the cluster name)
NEW_MARK = "🆕"
GROUP_THRESHOLD = 30  # more tiers than this: namespace subgraphs, untouched tiers collapsed
MIN_LIMIT = 1000
MIN_MESSAGE = 40  # findings messages are never shortened below this before rows are folded
LIST_CAP = 10  # tier names listed in a cluster's notes before "and N more"

CHANGE_SIGN = {ChangeKind.ADDED: "+", ChangeKind.REMOVED: "-", ChangeKind.CHANGED: "~", ChangeKind.MOVED: "→"}
_KIND_SHOWN = (ChangeKind.ADDED, ChangeKind.REMOVED, ChangeKind.CHANGED, ChangeKind.MOVED)


# -- shared -------------------------------------------------------------------------------------


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _severity_phrase(new: int, old: int, noun: str) -> str | None:
    if new and old:
        return f"{_plural(new + old, noun)} ({old:,} pre-existing)"
    if new:
        return f"{new:,} new {noun}{'' if new == 1 else 's'}"
    if old:
        return f"{old:,} pre-existing {noun}{'' if old == 1 else 's'}"
    return None


def review_verdict(review: ClusterReview) -> Severity | None:
    """Judged by what the change adds: ERROR for a new error, WARNING for a new warning, else None."""
    if review.new_errors:
        return Severity.ERROR
    if review.new_warnings:
        return Severity.WARNING
    return None


def review_verdict_line(review: ClusterReview) -> str:
    """`❌ prod: 1 new error, 2 warnings (1 pre-existing) — 6 tiers, 42 objects, 3 tiers changed`."""
    verdict = review_verdict(review)
    icon = SEVERITY_ICON[verdict] if verdict else "✅"
    phrases = []
    for severity, noun in ((Severity.ERROR, "error"), (Severity.WARNING, "warning")):
        new = sum(1 for f in review.findings if f.new and f.finding.severity == severity)
        old = sum(1 for f in review.findings if not f.new and f.finding.severity == severity)
        phrase = _severity_phrase(new, old, noun)
        if phrase:
            phrases.append(phrase)
    summary = ", ".join(phrases) if phrases else "no errors or warnings"
    changed = len(review.changed_tiers)
    change = f"{_plural(changed, 'tier')} changed" if changed else "no tier changed"
    return f"{icon} {review.cluster}: {summary} — {_plural(len(review.head.tiers), 'tier')}, {_plural(review.head.objects, 'object')}, {change}"


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


def format_review_text(review: ClusterReview) -> str:
    """Plain text: verdict, base → head, findings (errors first, tagged new/pre-existing), changes per tier."""
    lines = [review_verdict_line(review), f"base {_short(review.base_sha)} → head {_short(review.head_sha)}", ""]
    if review.cold_start_change:
        lines[-1:-1] = [f"cold start: {review.cold_start_change}"]
    findings = _ordered_findings(review)
    for reviewed in findings:
        f = reviewed.finding
        where = f"  {f.location}" if f.location else ""
        scope = " ".join(str(x) for x in (f.kustomization, f.object) if x)
        tag = "new" if reviewed.new else "pre-existing"
        lines.append(f"{f.severity.value.upper():7} {tag:12} {f.check}  {scope}{where}")
        lines.append(f"        {f.message}")
    if findings:
        lines.append("")
    tiers = _ordered_tiers(review)
    listed = {t.tier for t in tiers}
    if tiers:
        lines.append("changes by tier (largest last):")
    for tier in tiers:
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
    if not tiers and not any(ids for _, ids in extra):
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
        },
        "kustomizations": review.head.to_json()["kustomizations"],
        **({"cold_start": {**review.head.cold_start.to_json(), "change": review.cold_start_change}} if review.head.cold_start is not None else {}),
        "findings": [{**f.finding.to_json(), "new": f.new} for f in _ordered_findings(review)],
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
    "classDef summary fill:#f6f8fa,stroke:#d0d7de,color:#57606a",
)
MERMAID_LEGEND = "<sub>Thick blue border: changed tier · red fill: errors · amber fill: warnings · dashed grey: removed tier · dashed arrow: objects moved · arrows point from a dependency to its dependents.</sub>"


def tier_graph_mermaid(review: ClusterReview) -> str:
    """The cluster's tier graph as a fenced ```mermaid flowchart (dependency → dependent)."""
    tiers = {t.id: t for t in review.head.tiers}
    order = [t for t in review.head.order if t in tiers] + [t for t in tiers if t not in review.head.order]
    nodes: list[TierId] = list(order)
    extra = [*review.diff.removed_tiers, *(c.from_tier for c in review.diff.moves if c.from_tier), *(t.tier for t in review.diff.tiers)]
    for tid in extra:
        if tid not in nodes:
            nodes.append(tid)
    removed = set(review.diff.removed_tiers) - set(tiers)
    added = set(review.diff.added_tiers)
    changed = set(review.changed_tiers)
    input_only = set(_input_only_tiers(review))
    worst: dict[TierId, Severity] = {}
    counts: dict[TierId, Counter] = {}
    for reviewed in review.findings:
        f = reviewed.finding
        if f.kustomization is None or f.severity not in (Severity.ERROR, Severity.WARNING):
            continue
        counts.setdefault(f.kustomization, Counter())[f.severity] += 1
        if f.kustomization not in worst or f.severity.rank < worst[f.kustomization].rank:
            worst[f.kustomization] = f.severity
    change_counts = {t.tier: _kind_counts(t.changes) for t in review.diff.tiers}

    edges: list[tuple[TierId, TierId]] = []
    for tid in order:
        for dep in tiers[tid].depends_on:
            if dep in nodes and (dep, tid) not in edges:
                edges.append((dep, tid))

    grouped = len(nodes) > GROUP_THRESHOLD
    collapsed: set[TierId] = set()
    if grouped:
        adjacent = {b for a, b in edges if a in changed} | {a for a, b in edges if b in changed}
        candidates = [t for t in nodes if t not in changed and t not in worst and t not in adjacent and t not in removed]
        per_ns = Counter(t.namespace for t in candidates)
        collapsed = {t for t in candidates if per_ns[t.namespace] >= 2}  # one node for one tier gains nothing

    taken: set[str] = set()
    node_id = {t: _mermaid_id("t_", str(t), taken) for t in nodes}
    namespaces = list(dict.fromkeys(t.namespace for t in nodes))
    summary_id = {ns: _mermaid_id("u_", ns, taken) for ns in namespaces if any(t.namespace == ns for t in collapsed)}
    graph_id = {ns: _mermaid_id("ns_", ns, taken) for ns in namespaces}
    one_namespace = len(namespaces) == 1

    def label(tid: TierId) -> str:
        name = tid.name if grouped or one_namespace else str(tid)
        details = []
        if tid in added:
            details.append("new")
        if tid in removed:
            details.append("removed")
        if change_counts.get(tid):
            details.append(change_counts[tid])
        elif tid in input_only:
            details.append("inputs changed")
        c = counts.get(tid)
        if c:
            details.append(" ".join(f"{SEVERITY_ICON[s]} {c[s]}" for s in (Severity.ERROR, Severity.WARNING) if c[s]))
        text = mermaid_label(name) + ("<br/>" + mermaid_label(" · ".join(details)) if details else "")
        return f'{node_id[tid]}["{text}"]'

    def target(tid: TierId) -> str:
        return summary_id[tid.namespace] if tid in collapsed else node_id[tid]

    lines = ["```mermaid", "flowchart LR"]
    lines.extend(f"  {d}" for d in _CLASS_DEFS)
    if grouped:
        for ns in namespaces:
            members = [t for t in nodes if t.namespace == ns and t not in collapsed]
            hidden = sum(1 for t in collapsed if t.namespace == ns)
            lines.append(f'  subgraph {graph_id[ns]}["{mermaid_label(ns)}"]')
            lines.extend(f"    {label(t)}" for t in members)
            if hidden:
                lines.append(f'    {summary_id[ns]}["{_plural(hidden, "unchanged tier")}"]')
            lines.append("  end")
    else:
        lines.extend(f"  {label(t)}" for t in nodes)
    drawn: list[tuple[str, str]] = []
    for a, b in edges:
        pair = (target(a), target(b))
        if pair[0] != pair[1] and pair not in drawn:
            drawn.append(pair)
    lines.extend(f"  {a} --> {b}" for a, b in drawn)
    moves = Counter((c.from_tier, c.tier) for c in review.diff.moves if c.from_tier is not None)
    for (source, destination), n in moves.items():
        lines.append(f"  {target(source)} -.->|{n} moved| {target(destination)}")
    classes = [
        ("changed", [t for t in nodes if t in changed and t not in removed]),
        ("error", [t for t in nodes if worst.get(t) == Severity.ERROR]),
        ("warning", [t for t in nodes if worst.get(t) == Severity.WARNING]),
        ("removed", [t for t in nodes if t in removed]),
    ]
    for cls, members in classes:
        if members:
            lines.append(f"  class {','.join(node_id[t] for t in members)} {cls}")
    if summary_id:
        lines.append(f"  class {','.join(summary_id.values())} summary")
    lines.append("```")
    return "\n".join(lines) + "\n"


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
    lines = _diff_lines(change)
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


TIER_CLOSE = "</details>\n\n"


def _name_list(ids: Sequence[TierId]) -> str:
    shown = ", ".join(md.code(t) for t in ids[:LIST_CAP])
    return shown + (f" and {len(ids) - LIST_CAP:,} more" if len(ids) > LIST_CAP else "")


def _cluster_intro(review: ClusterReview, max_len: int) -> str:
    """Heading, base → head, the tier graph and notes; without the graph if it does not fit."""
    notes = [
        ("New tiers", list(review.diff.added_tiers)),
        ("Removed tiers", list(review.diff.removed_tiers)),
        ("Inputs changed, same render", _input_only_tiers(review)),
        ("Not compared (not rendered or failed on a side)", list(review.diff.uncompared)),
        ("Compared in part (failed on a side: objects on both sides only)", list(review.diff.partial)),
    ]
    note_lines = [f"- {label}: {_name_list(ids)}." for label, ids in notes if ids]
    short_notes = [f"- {label}: {len(ids):,}." for label, ids in notes if ids]
    if not review.diff.tiers and not any(ids for _, ids in notes):
        note_lines = short_notes = ["No rendered changes."]
    head = md.code(_short(review.head_sha)) if review.head_sha else "the working tree"
    heading = f"---\n\n#### {md.text(review.cluster)} · base {md.code(_short(review.base_sha))} → head {head}\n\n"
    interesting = bool(review.changed_tiers or review.diff.tiers or any(f.finding.kustomization for f in review.findings))
    graph = f"{tier_graph_mermaid(review)}{MERMAID_LEGEND}\n\n" if interesting else ""
    too_big = f"<sub>Tier graph ({_plural(len(review.head.tiers), 'tier')}) not shown: too large for a comment.</sub>\n\n"
    for g, n in ((graph, note_lines), (too_big if graph else "", note_lines), (too_big if graph else "", short_notes)):
        text = heading + g + ("".join(line + "\n" for line in n) + "\n" if n else "")
        if len(text) <= max_len:
            return text
    return heading[:max_len]


def _continued_heading(review: ClusterReview) -> str:
    return f"#### {md.text(review.cluster)} (continued)\n\n"


# -- Markdown: first screen --------------------------------------------------------------------------


def _truncate(text: str, cap: int | None) -> str:
    if cap is None or len(text) <= cap:
        return text
    return text[: cap - 1].rstrip() + "…"


def _finding_row(cluster: str | None, reviewed: ReviewedFinding, link_base: str | None, cap: int | None) -> str:
    f: Finding = reviewed.finding
    mark = f"{SEVERITY_ICON[f.severity]} {NEW_MARK}" if reviewed.new else SEVERITY_ICON[f.severity]
    cells = [mark]
    if cluster is not None:
        cells.append(md.text(cluster))
    cells += [
        f"`{f.check}`",
        md.text(f.kustomization or ""),
        md.text(f.object or ""),
        format_location(f, link_base),
        md.rich(_truncate(f.message, cap), table=True),
    ]
    return "| " + " | ".join(cells) + " |"


def _first_screen(reviews: Sequence[ClusterReview], link_base: str | None, max_len: int) -> str:
    """Verdict lines and the findings table, shortened (messages, then folded rows) to `max_len`."""
    verdicts = "".join(
        f"### {md.text(review_verdict_line(r))}\n" + (f"{md.text('Cold start: ' + r.cold_start_change)}\n" if r.cold_start_change else "")
        for r in reviews
    ) + "\n"
    multi = len(reviews) > 1
    rows = [
        (r.cluster if multi else None, f)
        for r in reviews
        for f in _ordered_findings(r)
    ]
    # Across clusters: errors first, new first, cluster order kept otherwise.
    rows.sort(key=lambda row: (row[1].finding.severity.rank, not row[1].new))
    if not rows:
        if len(verdicts) > max_len:
            raise ValueError(f"limit too small for the verdict lines ({len(verdicts)} characters)")
        return verdicts
    columns = 7 if multi else 6
    table_head = f"| |{' cluster |' if multi else ''} check | tier | object | where | message |\n" + "|" + "---|" * columns + "\n"

    def render(cap: int | None, keep: int) -> str:
        body = "".join(_finding_row(c, f, link_base, cap) + "\n" for c, f in rows[:keep])
        if keep < len(rows):
            folded = len(rows) - keep
            cells = [""] * (columns - 1) + [f"… {_plural(folded, 'more finding')} not shown (see the JSON output)"]
            body += "| " + " | ".join(cells) + " |\n"
        return verdicts + table_head + body + "\n"

    text = render(None, len(rows))
    if len(text) <= max_len:
        return text
    longest = max(len(f.finding.message) for _, f in rows)
    if len(render(MIN_MESSAGE, len(rows))) <= max_len:
        lo, hi = MIN_MESSAGE, longest  # largest message cap that fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(render(mid, len(rows))) <= max_len:
                lo = mid
            else:
                hi = mid - 1
        return render(lo, len(rows))
    if len(render(MIN_MESSAGE, 0)) > max_len:
        raise ValueError(f"limit too small for the verdict lines ({len(verdicts)} characters)")
    lo, hi = 0, len(rows)  # most rows that fit at the smallest cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(render(MIN_MESSAGE, mid)) <= max_len:
            lo = mid
        else:
            hi = mid - 1
    return render(MIN_MESSAGE, lo)


# -- Markdown: parts -------------------------------------------------------------------------------


def _part_prefix(n: int, m: int, marker: str = DEFAULT_MARKER) -> str:
    # The hidden marker is how the bot finds its own comment to edit in place (as bedevere does).
    if n == 1:
        return f"<!-- {marker} -->\n"
    return f"<!-- {marker} part={n} -->\n### Fluxwarden review · part {n} of {m}\n\n"


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
    + MAX_MARKER
    + len(_omission_note(_BIG, _BIG, _BIG, _BIG))
    + 8  # newlines around the footer
)


def format_review_markdown(
    reviews: Sequence[ClusterReview] | ClusterReview,
    *,
    link_base: str | None = None,
    limit: int = 65536,
    max_parts: int = 10,
    marker: str = DEFAULT_MARKER,
) -> list[str]:
    """The PR comment: parts of at most `limit` characters each, part 1 starting with `<!-- marker -->`."""
    if len(marker) > MAX_MARKER or marker != md.comment(marker):
        raise ValueError("marker must be a short HTML-comment-safe string")
    if isinstance(reviews, ClusterReview):
        reviews = [reviews]
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} characters")
    if max_parts < 1:
        raise ValueError("max_parts must be at least 1")
    budget = limit - _RESERVE
    parts: list[list[str]] = [[_first_screen(reviews, link_base, budget)]]
    used = [len(parts[0][0])]
    omitted = {"changes": 0, "tiers": 0, "clusters": 0}

    def fits(n: int) -> bool:
        return used[-1] + n <= budget

    def add(text: str) -> None:
        parts[-1].append(text)
        used[-1] += len(text)

    def new_part() -> bool:
        if len(parts) >= max_parts:
            return False
        parts.append([])
        used.append(0)
        return True

    full = False
    for review in reviews:
        tiers = _ordered_tiers(review)
        if full:
            omitted["clusters"] += 1
            omitted["changes"] += sum(len(t.changes) for t in tiers)
            omitted["tiers"] += len(tiers)
            continue
        intro = _cluster_intro(review, budget)
        if not fits(len(intro)) and not new_part():
            full = True
            omitted["clusters"] += 1
            omitted["changes"] += sum(len(t.changes) for t in tiers)
            omitted["tiers"] += len(tiers)
            continue
        add(intro)
        continued = _continued_heading(review)
        for tier in tiers:
            if full:
                omitted["changes"] += len(tier.changes)
                omitted["tiers"] += 1
                continue
            opening, reopening = _tier_open(review, tier), _tier_open(review, tier, continued=True)
            max_block = budget - len(continued) - len(reopening) - len(TIER_CLOSE)
            is_open, shown = False, 0
            for index, change in enumerate(tier.changes):
                block = _change_block(change, max_block)
                if fits(len(block) + len(TIER_CLOSE) + (0 if is_open else len(opening))):
                    if not is_open:
                        add(opening)
                        is_open = True
                    add(block)
                    shown += 1
                    continue
                if is_open:
                    add(TIER_CLOSE)
                    is_open = False
                if not new_part():
                    full = True
                    omitted["changes"] += len(tier.changes) - index
                    omitted["tiers"] += 1
                    break
                add(continued)
                add(reopening if shown else opening)
                is_open = True
                add(block)
                shown += 1
            if is_open:
                add(TIER_CLOSE)
    if full:
        add(_omission_note(omitted["changes"], omitted["tiers"], omitted["clusters"], max_parts))

    total = len(parts)
    out = [_part_prefix(n, total, marker) + "".join(body).rstrip("\n") + "\n" + ("\n" + _part_footer(n, total) if total > 1 else "") for n, body in enumerate(parts, 1)]
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
