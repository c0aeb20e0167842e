"""What a review's first screen says in words: what to do, what the change does, which tiers the graph needs (pure).

Every piece is plain text with names quoted in backticks (the Markdown form passes it through `markdown.rich`,
the text form prints it as is), built from the same `ClusterReview`, so the comment and the CLI agree.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

import yaml

from bot.engine.reporting.diff import ChangeKind, ObjectChange, TierDiff
from bot.engine.core.model import Finding, Severity, TierId
from bot.engine.reporting.review import ClusterReview, cycle_path

# -- what to do -------------------------------------------------------------------------------------

_SAME_TIER_CR = re.compile(r"Keep (\S+ \S+) in a Kustomization with wait: true")
_ADD_DEPENDENCY = re.compile(r"Add dependsOn: ([^(;.]+?)(?: \(|;|\.|$)")


def _names(tier: TierId | None, review: ClusterReview) -> str:
    """A tier as the comment names it: its name alone when the cluster uses one namespace."""
    if tier is None:
        return "its tier"
    namespaces = {t.id.namespace for t in review.head.tiers}
    return tier.name if namespaces <= {tier.namespace} else str(tier)


def cycle_edge(f: Finding, review: ClusterReview) -> tuple[TierId, TierId] | None:
    """The cycle's `dependsOn` edge (dependent, dependency) the change most likely added: one from a tier it changed."""
    path = cycle_path(f)
    edges = list(zip(path, path[1:]))
    if not edges:
        return None
    for a, b in edges:
        if a in review.changed_tiers:
            return a, b
    return edges[0]


def _objects(f: Finding) -> str:
    if f.object is None:
        return "these objects"
    many = re.match(r"(\d+) \S+ objects \(", f.message)
    more = f" (and {int(many.group(1)) - 1} more)" if many and int(many.group(1)) > 1 else ""
    return f"`{f.object.kind}/{f.object.name}`{more}"


def fix_line(f: Finding, review: ClusterReview) -> str:
    """The fix for one finding, in one line (imperative), names in backticks."""
    tier = f"`{_names(f.kustomization, review)}`"
    if f.check == "dependency-cycle":
        edge = cycle_edge(f, review)
        if edge:
            a, b = (_names(t, review) for t in edge)
            added = "this PR added" if edge[0] in review.changed_tiers else "that closes the cycle"
            return f"remove the `dependsOn` {added} (`{a}` → `{b}`)"
    if f.check == "second-order-crd":
        cr = _SAME_TIER_CR.search(f.message)
        if cr and "in this same tier" in f.message:
            return f"move {_objects(f)} into a new tier that depends on {tier} (keep `{cr.group(1)}` there, with `wait: true`)"
        dep = _ADD_DEPENDENCY.search(f.message)
        if dep:
            return f"add `{dep.group(1).strip()}` to the `dependsOn` of {tier} (with `wait: true` there)"
    if f.check == "crd-not-ordered":
        dep = _ADD_DEPENDENCY.search(f.message)
        if dep:
            return f"add `{dep.group(1).strip()}` to the `dependsOn` of {tier}"
    if f.check == "health-check-deadlock":
        return f"move what {tier} health-checks into a new tier that depends on {tier}, or drop the `dependsOn` that points back"
    if f.check == "prune-transient":
        return f"set `prune: false` on {tier} for one merge, then move the objects and restore it"
    if f.check == "missing-dependency":
        return f"fix or remove the `dependsOn` of {tier} that names a missing Kustomization"
    if f.check == "duplicate-object":
        return f"keep {_objects(f)} in one Kustomization only"
    return f"see `{f.check}`" + (f" in {tier}" if f.kustomization else "") + " below"


def _needs_action(f: Finding) -> bool:
    return f.severity is Severity.ERROR or f.check == "prune-transient"


def actions(review: ClusterReview) -> tuple[str, ...]:
    """One line per new error (and per prune hand-over): its fix; empty when there is nothing to do."""
    out: list[str] = []
    for reviewed in sorted(review.findings, key=lambda r: r.finding.severity.rank):
        f = reviewed.finding
        if reviewed.new and reviewed.caused_by is None and _needs_action(f):
            line = fix_line(f, review)
            if line not in out:
                out.append(line)
    return tuple(out)


def fixed_lines(review: ClusterReview) -> tuple[str, ...]:
    """What a fix PR fixes, in the past tense: the cold-start deadlock, then each resolved finding."""
    out = []
    if review.cold_start_change and "resolves" in review.cold_start_change:
        out.append(review.cold_start_change.replace("this change resolves", "resolved", 1))
    for f in sorted(review.resolved, key=lambda f: f.sort_key()):
        where = f" in `{_names(f.kustomization, review)}`" if f.kustomization else ""
        what = f" for `{f.object.kind}/{f.object.name}`" if f.object else ""
        out.append(f"fixed `{f.check}`{where}{what}")
    return tuple(out)


# -- what changed -----------------------------------------------------------------------------------

_IMAGE = re.compile(r"^[-+]\s*(?:-\s+)?image:\s*['\"]?([^'\"\s]+?)['\"]?\s*$")
_VERSION = re.compile(r"^[-+]\s*(?:-\s+)?(version|tag|newTag|digest|appVersion|chart|semver):\s*['\"]?([^'\"\s]*)['\"]?\s*$")
_QUIET = re.compile(r"^[-+]\s*(?:-\s+)?(helm\.sh/chart|app\.kubernetes\.io/version|checksum/[\w.-]+):")


@dataclass(frozen=True)
class ChartMove:
    """One HelmRelease's chart version moving."""

    release: str
    chart: str
    old: str | None
    new: str | None

    def __str__(self) -> str:
        if self.old and self.new:
            return f"`{self.chart}` {self.old} → {self.new}"
        return f"`{self.chart}` {self.new or self.old or ''}".rstrip()


@dataclass(frozen=True)
class ChangeSummary:
    """The change in words: charts, images, tiers, moves and what could not be rendered."""

    charts: tuple[ChartMove, ...]
    images: tuple[tuple[str, str, str], ...]  # (repository, old tag, new tag)
    added: tuple[TierId, ...]
    removed: tuple[TierId, ...]
    renamed: tuple[tuple[TierId, TierId], ...]
    moves: tuple[tuple[TierId, TierId, int], ...]  # (from, to, objects)
    changed_tiers: int
    not_rendered: int
    only_versions: bool

    @property
    def empty(self) -> bool:
        return not (self.charts or self.images or self.added or self.removed or self.renamed or self.moves or self.changed_tiers)


def _split_image(ref: str) -> tuple[str, str]:
    if "@" in ref:
        repo, _, digest = ref.partition("@")
        return repo, digest[:19]
    head, _, last = ref.rpartition("/")
    if ":" in last:
        name, _, tag = last.partition(":")
        return (f"{head}/{name}" if head else name), tag
    return ref, ""


def _changed_lines(change: ObjectChange) -> list[str]:
    return [line for line in change.diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++ ", "--- "))]


def _image_moves(changes: Iterable[ObjectChange]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for change in changes:
        if change.kind is not ChangeKind.CHANGED:
            continue
        old: dict[str, str] = {}
        new: dict[str, str] = {}
        for line in _changed_lines(change):
            m = _IMAGE.match(line)
            if m:
                repo, tag = _split_image(m.group(1))
                (old if line[0] == "-" else new).setdefault(repo, tag)
        out += [(repo, old[repo], new[repo]) for repo in sorted(old.keys() & new.keys()) if old[repo] != new[repo]]
    return out


def _only_versions(changes: Iterable[ObjectChange]) -> bool:
    seen = False
    for change in changes:
        if change.kind is not ChangeKind.CHANGED or change.secret_keys is not None:
            return False
        for line in _changed_lines(change):
            if not (_IMAGE.match(line) or _VERSION.match(line) or _QUIET.match(line)):
                return False
            seen = True
    return seen


def _chart_moves(review: ClusterReview) -> list[ChartMove]:
    """Rendered charts whose version moved, then HelmReleases whose `spec.chart.spec.version` changed in git."""
    out = [ChartMove(f"{r.ref.namespace}/{r.ref.name}", r.chart, r.base_version, r.head_version) for r in review.releases.releases if r.base_version != r.head_version]
    rendered = {m.release for m in out}
    for tier in review.diff.tiers:
        for change in tier.changes:
            if change.kind is not ChangeKind.CHANGED or change.ref.kind != "HelmRelease" or f"{change.ref.namespace}/{change.ref.name}" in rendered:
                continue
            versions = {line[0]: m.group(2) for line in _changed_lines(change) if (m := _VERSION.match(line)) and m.group(1) == "version"}
            if versions.get("-") and versions.get("+") and versions["-"] != versions["+"]:
                chart = _chart_name(change) or change.ref.name
                out.append(ChartMove(f"{change.ref.namespace}/{change.ref.name}", chart, versions["-"], versions["+"]))
    return out


def _chart_name(change: ObjectChange) -> str | None:
    m = re.search(r"^[ +-]\s*chart:\s*['\"]?([\w.-]+)['\"]?\s*$", change.diff, re.M)
    return m.group(1) if m else None


def change_summary(review: ClusterReview) -> ChangeSummary:
    """The change in words, from the review's diff and HelmRelease renders."""
    diff = review.diff
    renamed: list[tuple[TierId, TierId]] = []
    pairs = Counter((c.from_tier, c.tier) for c in diff.moves if c.from_tier is not None)
    for (source, target), _ in pairs.most_common():
        if source in diff.removed_tiers and target in diff.added_tiers and all(source != s for s, _ in renamed) and all(target != t for _, t in renamed):
            renamed.append((source, target))
    gone = {s for s, _ in renamed}
    came = {t for _, t in renamed}
    changes = [c for t in diff.tiers for c in t.changes] + [c for r in review.releases.releases for c in r.changes]
    images = sorted(set(_image_moves(changes)))
    structural = bool(diff.added_tiers or diff.removed_tiers or diff.moves)
    return ChangeSummary(
        charts=tuple(_chart_moves(review)),
        images=tuple(images),
        added=tuple(t for t in diff.added_tiers if t not in came),
        removed=tuple(t for t in diff.removed_tiers if t not in gone),
        renamed=tuple(renamed),
        moves=tuple((s, t, n) for (s, t), n in sorted(pairs.items(), key=lambda item: (str(item[0][0]), str(item[0][1])))),
        changed_tiers=len(review.changed_tiers),
        not_rendered=review.head.releases_not_rendered,
        only_versions=not structural and _only_versions(changes),
    )


def _listed(items: Sequence[str], cap: int = 3) -> str:
    shown = ", ".join(items[:cap])
    return shown + (f" and {len(items) - cap} more" if len(items) > cap else "")


def summary_lines(review: ClusterReview) -> tuple[str, ...]:
    """The change in words, one line per kind of change; one line when it only moves versions."""
    s = change_summary(review)
    name = lambda t: f"`{_names(t, review)}`"  # noqa: E731
    charts = f"chart{'s' if len(s.charts) != 1 else ''} " + _listed([str(c) for c in s.charts]) if s.charts else ""
    tags = f"{len(s.images)} image tag{'s' if len(s.images) != 1 else ''} (" + _listed([f"`{r}` {a} → {b}" for r, a, b in s.images], 2) + ")" if s.images else ""
    lines = []
    if s.only_versions:
        lines.append("Only moves versions: " + "; ".join(x for x in (charts, tags) if x) if charts or tags else "Only moves versions.")
    else:
        if charts:
            lines.append(charts[0].upper() + charts[1:])
        if tags:
            lines.append(tags[0].upper() + tags[1:])
    if s.added:
        lines.append(f"Tiers added: {_listed([name(t) for t in s.added], 8)}")
    if s.removed:
        lines.append(f"Tiers removed: {_listed([name(t) for t in s.removed], 8)}")
    if s.renamed:
        lines.append("Tiers renamed: " + _listed([f"{name(a)} → {name(b)}" for a, b in s.renamed], 8))
    if s.moves:
        total = sum(n for _, _, n in s.moves)
        lines.append(f"{total} object{'s' if total != 1 else ''} moved: " + _listed([f"{name(a)} → {name(b)} ({n})" for a, b, n in s.moves], 4))
    if s.not_rendered:
        lines.append(f"{s.not_rendered} HelmRelease{'s' if s.not_rendered != 1 else ''} not rendered (chart not fetched: `chart-not-rendered`)")
    tiers = sorted(review.changed_tiers)
    if tiers:
        lines.append(f"{len(tiers)} tier{'s' if len(tiers) != 1 else ''} changed: " + _listed([name(t) for t in tiers], 6))
    elif not lines:
        lines.append("No tier changed.")
    return tuple(lines)


# -- the graph: only the chains of new errors and moves ---------------------------------------------


def chain_tiers(review: ClusterReview) -> list[TierId]:
    """The tiers a new error's chain runs through (a cycle, a deadlock's or CRD's tiers) and each move's two ends."""
    known = {t.id for t in review.head.tiers}
    by_text = {str(t): t for t in known}
    wanted: list[TierId] = []

    def add(t: TierId | None) -> None:
        if t is not None and t not in wanted:
            wanted.append(t)

    for reviewed in review.findings:
        f = reviewed.finding
        if not reviewed.new or not _needs_action(f):
            continue
        path = cycle_path(f)
        if path:
            for t in path:
                add(t)
            continue
        add(f.kustomization)
        if f.severity is Severity.ERROR:
            for text in re.findall(r"[a-z0-9][a-z0-9.-]*/[a-z0-9][a-z0-9.-]*", f.message):
                add(by_text.get(text))
    for c in review.diff.moves:
        add(c.from_tier)
        add(c.tier)
    return wanted


# -- diffs: identical changes, strings that hold documents -------------------------------------------


def change_body(change: ObjectChange) -> str:
    """A change's diff without headers and hunk line numbers: equal for the same edit in two objects."""
    lines = [line for line in change.diff.splitlines() if not line.startswith(("--- ", "+++ "))]
    return "\n".join("@@" if line.startswith("@@") else line for line in lines)


@dataclass(frozen=True)
class ChangeGroup:
    """The same change (kind and diff) in several objects."""

    kind: ChangeKind
    changes: tuple[ObjectChange, ...]

    @property
    def tiers(self) -> tuple[TierId, ...]:
        return tuple(sorted({c.tier for c in self.changes}))


def identical_groups(tiers: Sequence[TierDiff], minimum: int = 3) -> tuple[ChangeGroup, ...]:
    """Changes with the same kind and diff body in at least `minimum` objects, largest group first."""
    by_body: dict[tuple[ChangeKind, str], list[ObjectChange]] = {}
    for tier in tiers:
        for change in tier.changes:
            if change.secret_keys is not None or change.kind is ChangeKind.MOVED or not change.diff:
                continue
            by_body.setdefault((change.kind, change_body(change)), []).append(change)
    groups = [ChangeGroup(kind, tuple(cs)) for (kind, _), cs in by_body.items() if len(cs) >= minimum]
    return tuple(sorted(groups, key=lambda g: (-len(g.changes), str(g.changes[0].ref))))


_SCALAR_LINE = re.compile(r"^([-+ ])(\s*(?:-\s+)?)([\w./-]+):\s+(\"|')(.*)$")
_DECODE_MIN = 80  # characters: shorter strings read fine as they are


def _decode(quote: str, rest: str) -> str | None:
    """The text of a YAML-quoted scalar (`"…\\n…"`), or None when it is not one."""
    try:
        value = yaml.safe_load(quote + rest)
    except yaml.YAMLError:
        return None
    return value if isinstance(value, str) else None


def _document_lines(text: str) -> list[str]:
    """A decoded string as lines: JSON pretty-printed (keys in their order), YAML and text as written."""
    stripped = text.strip()
    if stripped[:1] in "{[":
        try:
            return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False).splitlines()
        except ValueError:
            pass
    return text.splitlines()


def expand_documents(lines: list[str]) -> list[str]:
    """Diff lines with each changed quoted string that holds a document (patch, values, dashboard) diffed inside.

    A `-key: "…"` line and a `+key: "…"` line of the same hunk block, same key and indent, become a
    ` key: (a string; …)` line and the decoded texts' own unified diff, indented under it.
    """
    out: list[str] = []
    consumed: set[int] = set()
    for i, line in enumerate(lines):
        if i in consumed:
            continue
        old = _SCALAR_LINE.match(line) if line.startswith("-") else None
        partner = _partner(lines, i, old, consumed) if old else None
        if old and partner is not None and max(len(line), len(lines[partner[0]])) >= _DECODE_MIN:
            a, b = _decode(old.group(4), old.group(5)), _decode(partner[1].group(4), partner[1].group(5))
            if a is not None and b is not None and a != b and ("\n" in a or "\n" in b or a.strip()[:1] in "{["):
                inner = list(difflib.unified_diff(_document_lines(a), _document_lines(b), lineterm="", n=2))[2:]
                indent = old.group(2).replace("-", " ")
                out.append(f" {indent}{old.group(3)}: (a string; the change inside it:)")
                out += [f" {indent}  ⋯" if d.startswith("@@") else f"{d[:1]}{indent}  {d[1:]}" for d in inner]
                consumed.add(partner[0])
                continue
        out.append(line)
    return out


def _partner(lines: list[str], i: int, old: re.Match, consumed: set[int]) -> tuple[int, re.Match] | None:
    """The `+` line (index, match) that replaces `-` line `i`: same indent and key, in the next `+` block."""
    j = i + 1
    while j < len(lines) and lines[j].startswith("-"):
        j += 1
    while j < len(lines) and lines[j].startswith("+"):
        m = _SCALAR_LINE.match(lines[j])
        if j not in consumed and m and m.group(2) == old.group(2) and m.group(3) == old.group(3):
            return j, m
        j += 1
    return None


def tier_order(review: ClusterReview) -> list[TierDiff]:
    """Tiers with the root cause first (new errors, then new warnings), the rest smallest first."""
    rank: dict[TierId, int] = {}
    for reviewed in review.findings:
        f = reviewed.finding
        if reviewed.new and f.kustomization is not None and f.severity in (Severity.ERROR, Severity.WARNING):
            rank[f.kustomization] = min(rank.get(f.kustomization, 9), f.severity.rank)
    for t in chain_tiers(review):
        rank.setdefault(t, 5)
    return sorted(review.diff.tiers, key=lambda t: (rank.get(t.tier, 9), t.size, t.tier))


__all__ = [
    "ChangeGroup",
    "ChangeSummary",
    "ChartMove",
    "actions",
    "chain_tiers",
    "change_body",
    "change_summary",
    "cycle_edge",
    "expand_documents",
    "fix_line",
    "fixed_lines",
    "identical_groups",
    "summary_lines",
    "tier_order",
]
