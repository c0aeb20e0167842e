"""Fix a stale tier order list: one order valid for every cluster, the minimal edit, and the words for a PR.

The pure core (`union_graph`, `plan_tier_fix`, `graph_changes`, `first_stale`) takes the graphs of every
cluster of a repository (tier name -> the names it depends on) and the tier order file's text, and says:

* nothing to do, when the list is already a valid order for every cluster;
* or the new order (`stable_order` of `bot.engine.ordering.tierorder` over the union of every cluster's constraints, so a
  tier present in only some clusters still gets its place after its dependencies), the minimal edit of the
  file (`rewrite_tier_order`), what changed and which `dependsOn` edges require it, a commit message, a PR
  title and body;
* or that no single order fits (`TierOrderConflict`): the union of the clusters' edges has a cycle; the
  message names the edges of that cycle and the clusters that have each.

`bot.pipeline.tier_state.read_tree_state` renders every cluster of a checked-out tree to get those graphs.
Names are plain Kustomization names, as `tier-order-stale` compares them; each cluster's entry path (the
`flux-system` Kustomization) is not a tier.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Mapping, Sequence

from bot.engine.core import markdown
from bot.engine.core.errors import UserError
from bot.engine.ordering.tierorder import StaleReason, find_cycle, read_tier_order, rewrite_tier_order, stable_order, stale_reasons
from bot.engine.ordering.tierorder import _lcs  # the same longest-common-subsequence the rewrite keeps lines by

__all__ = [
    "BRANCH",
    "Change",
    "ClusterGraphs",
    "Edge",
    "IncompleteRender",
    "PR_MARKER",
    "StaleCommit",
    "TierFix",
    "TierOrderConflict",
    "TreeState",
    "UnionGraph",
    "first_stale",
    "graph_changes",
    "plan_tier_fix",
    "union_graph",
]

BRANCH = "fluxwarden/tier-order"
PR_MARKER = "fluxwarden:tier-order"

ClusterGraphs = Mapping[str, Mapping[str, AbstractSet[str]]]  # cluster -> tier -> its dependencies


# --------------------------------------------------------------------------------------------
# The union of every cluster's graph


@dataclass(frozen=True)
class Edge:
    """`tier` dependsOn `dependency` in `clusters`."""

    tier: str
    dependency: str
    clusters: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.tier} dependsOn {self.dependency} ({', '.join(self.clusters)})"

    def markdown(self) -> str:
        return f"{markdown.code(self.tier)} dependsOn {markdown.code(self.dependency)} ({markdown.text(', '.join(self.clusters))})"


@dataclass(frozen=True)
class UnionGraph:
    """Every tier and edge of every cluster, with the clusters that have each."""

    clusters: tuple[str, ...]
    tiers: Mapping[str, tuple[str, ...]]  # tier -> clusters that have it
    edges: Mapping[tuple[str, str], tuple[str, ...]]  # (tier, dependency) -> clusters

    @property
    def deps(self) -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {tier: set() for tier in self.tiers}
        for tier, dependency in self.edges:
            out.setdefault(tier, set()).add(dependency)
            out.setdefault(dependency, set())
        return {tier: frozenset(d) for tier, d in out.items()}

    def edge(self, tier: str, dependency: str) -> Edge:
        return Edge(tier, dependency, self.edges[(tier, dependency)])

    def edges_of(self, tier: str) -> list[Edge]:
        """`tier`'s own dependencies."""
        return [self.edge(t, d) for (t, d) in sorted(self.edges) if t == tier]

    def users_of(self, tier: str) -> list[Edge]:
        """The edges of the tiers that depend on `tier`."""
        return [self.edge(t, d) for (t, d) in sorted(self.edges) if d == tier]


def union_graph(graphs: ClusterGraphs) -> UnionGraph:
    """Merge the clusters' graphs: a tier or an edge of any cluster is a tier or an edge of the union."""
    tiers: dict[str, list[str]] = {}
    edges: dict[tuple[str, str], list[str]] = {}
    for cluster in sorted(graphs):
        for tier, requires in graphs[cluster].items():
            tiers.setdefault(tier, []).append(cluster)
            for dependency in requires:
                edges.setdefault((tier, dependency), []).append(cluster)
                # A tier named only as a dependency is a tier too (stale_reasons/stable_order agree).
                if cluster not in tiers.setdefault(dependency, []):
                    tiers[dependency].append(cluster)
    return UnionGraph(
        clusters=tuple(sorted(graphs)),
        tiers={t: tuple(sorted(set(c))) for t, c in sorted(tiers.items())},
        edges={e: tuple(sorted(set(c))) for e, c in sorted(edges.items())},
    )


class TierOrderConflict(UserError):
    """No single order fits every cluster: the union of their `dependsOn` edges has a cycle."""

    def __init__(self, cycle: Sequence[str], edges: Sequence[Edge], clusters: Sequence[str]) -> None:
        self.cycle = tuple(cycle)
        self.edges = tuple(edges)
        self.clusters = tuple(clusters)
        common = sorted(set.intersection(*(set(e.clusters) for e in edges))) if edges else []
        if common:
            why = f"the graph of {_join(common)} itself has a dependency cycle"
        else:
            why = "the clusters' graphs disagree"
        super().__init__(
            f"no single tier order fits every cluster ({', '.join(clusters)}): {why}: "
            + "; ".join(str(e) for e in edges)
            + " — a cycle "
            + " → ".join(cycle)
        )

    def markdown(self) -> str:
        lines = [
            f"No single tier order fits every cluster ({markdown.text(', '.join(self.clusters))}): these `dependsOn` edges form a cycle "
            f"{markdown.code(' → '.join(self.cycle), limit=None)}, so any order lists one tier before a tier it depends on in some cluster:",
            "",
            *(f"- {e.markdown()}" for e in self.edges),
            "",
            "Make the clusters agree on the direction of these edges (or break the cycle); then the order can be fixed.",
        ]
        return "\n".join(lines)


class IncompleteRender(UserError):
    """A tier of this repository could not be rendered, so the graph may miss the Kustomizations it defines."""


# --------------------------------------------------------------------------------------------
# The fix


@dataclass(frozen=True)
class Change:
    """One entry that the fix adds, moves or removes, and the edges that require it."""

    kind: str  # "added" | "moved" | "removed"
    tier: str
    after: str | None = None  # the entry it now follows (None: it is first); not for "removed"
    edges: tuple[Edge, ...] = ()  # dependsOn edges that place it (its dependencies and its users)
    note: str = ""  # for "removed": why

    def sentence(self, md: bool = False) -> str:
        q = markdown.code if md else (lambda s: s)
        where = f"right after {q(self.after)}" if self.after else "first"
        if self.kind == "removed":
            return f"removes {q(self.tier)}: {markdown.text(self.note) if md else self.note}"
        verb = "adds" if self.kind == "added" else "moves"
        text = f"{verb} {q(self.tier)} {where}"
        if self.edges:
            edges = "; ".join(e.markdown() if md else str(e) for e in self.edges)
            text += f", required by {edges}"
        return text


@dataclass(frozen=True)
class StaleCommit:
    """The commit that made the order stale (as far as we could tell), for links and explanations."""

    sha: str
    summary: str = ""
    url: str | None = None
    graph_changes: tuple[str, ...] = ()  # what that commit did to the graph


@dataclass(frozen=True)
class TierFix:
    """What a tier order file needs (maybe nothing) to fit every cluster's graph."""

    file: str
    variable: str
    clusters: tuple[str, ...]
    current: tuple[str, ...]
    order: tuple[str, ...]
    reasons: tuple[StaleReason, ...]
    changes: tuple[Change, ...]
    old_text: str
    new_text: str

    @property
    def needed(self) -> bool:
        return self.new_text != self.old_text

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(c.tier for c in self.changes if c.kind == "added")

    @property
    def moved(self) -> tuple[str, ...]:
        return tuple(c.tier for c in self.changes if c.kind == "moved")

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(c.tier for c in self.changes if c.kind == "removed")

    def diff(self) -> str:
        """A unified diff of the file (empty when nothing changes)."""
        return "".join(
            difflib.unified_diff(
                self.old_text.splitlines(True), self.new_text.splitlines(True), f"a/{self.file}", f"b/{self.file}"
            )
        )

    def headline(self) -> str:
        """`add platform-config-cdi to TIER_ORDER`, `move apps after platform in TIER_ORDER`, ..."""
        parts = []
        if self.added:
            parts.append("add " + _join(self.added))
        if self.moved:
            parts.append("move " + _join(self.moved))
        if self.removed:
            parts.append("remove " + _join([c.tier if c.note.startswith("not ") else f"duplicate {c.tier}" for c in self.changes if c.kind == "removed"]))
        if not parts:
            return f"{self.variable} is in dependency order"
        if len(parts) == 1 and self.added:
            return f"{parts[0]} to {self.variable}"
        if len(parts) == 1 and self.removed:
            return f"{parts[0]} from {self.variable}"
        return f"{', '.join(parts)} in {self.variable}"

    def commit_message(self, stale: StaleCommit | None = None) -> str:
        """Subject and body: which tiers were added/moved/removed and which edges require it."""
        lines = [
            f"fix(bootstrap): {self.headline()}",
            "",
            f"{self.file} {self.variable} no longer matches the Flux dependsOn graph of "
            f"{_join(self.clusters)}:",
            *(f"- {r.detail}" for r in self.reasons),
            "",
            "This change:",
            *(f"- {c.sentence()}" for c in self.changes),
            "",
            f"New order: {' '.join(self.order)}",
            f"The order is valid for every cluster ({', '.join(self.clusters)}); only the lines that must change are edited.",
        ]
        if stale is not None:
            lines += ["", f"Made stale by {stale.sha}" + (f" ({markdown.visible(stale.summary, 120, mentions=False)})" if stale.summary else "") + "."]  # GitHub links @mentions in commit messages too
            lines += [f"  {g}" for g in stale.graph_changes]
        lines += ["", "Generated by Fluxwarden (fluxwarden tier-order --fix)."]
        return "\n".join(lines) + "\n"

    def pr_title(self) -> str:
        return f"Tier order: {self.headline()} ({self.file})"

    def pr_body(self, *, repo: str | None = None, base: str | None = None, stale: StaleCommit | None = None,
                stale_unknown: str | None = None) -> str:
        """The PR description: the graph change, why the list is stale, what the edit does."""
        marker = f"<!-- {PR_MARKER} stale-since={stale.sha if stale else 'unknown'} -->"
        lines = [
            marker,
            f"### Keep {markdown.code(self.variable)} in step with the Flux dependency graph",
            "",
            f"{markdown.code(self.file)} lists the Flux Kustomizations in the order a cluster is brought up tier by tier; "
            f"it no longer matches the `dependsOn` graph of {_join([markdown.code(c) for c in self.clusters])}"
            + (f" on {markdown.code(base)}" if base else "")
            + ".",
            "",
        ]
        if stale is not None:
            link = f"[`{stale.sha[:12]}`]({stale.url})" if stale.url else markdown.text(f"{repo + '@' if repo else ''}{stale.sha}")
            lines.append(f"**The graph change.** The order became stale with {link}" + (f" ({markdown.text(stale.summary, 120)})" if stale.summary else "") + ":")
            lines.append("")
            lines += [f"- {g}" for g in stale.graph_changes] or ["- (no change to the tier graph or the list that Fluxwarden can name; see the commit)"]
            lines.append("")
        elif stale_unknown:
            lines += [f"**The graph change.** {stale_unknown}", ""]
        lines += ["**Why the list is stale**", ""]
        lines += [f"- {markdown.text(r.detail)}" for r in self.reasons]
        lines += ["", "**This PR**", ""]
        lines += [f"- {c.sentence(md=True)}" for c in self.changes]
        lines += [
            "",
            "| | order |",
            "|---|---|",
            f"| before | {' '.join(markdown.code(n, table=True) for n in self.current) or '(empty)'} |",
            f"| after | {' '.join(markdown.code(n, table=True) for n in self.order) or '(empty)'} |",
            "",
            f"The new order is valid for every cluster ({markdown.text(', '.join(self.clusters))}): each tier comes after every tier it "
            "depends on in any of them. Entries keep their place wherever that is already valid, and only the lines "
            "that must change are edited (comments and formatting stay).",
            "",
            "<sub>Maintained by Fluxwarden: this branch is force-pushed when the graph changes again, and the PR is "
            "closed when the order becomes correct another way. Comment `/fluxwarden fix-tier-order` to refresh it; "
            "run `fluxwarden tier-order --fix` to do the same locally.</sub>",
            "",
        ]
        return "\n".join(lines)

    def report(self) -> str:
        """Plain text for the CLI: the reasons, the new order with what moved, the diff."""
        where = f"{self.file} {self.variable}"
        if not self.needed:
            return f"{where} is in dependency order for {_join(self.clusters)}:\n  {' '.join(self.order)}\n"
        out = [f"{where} is stale for the dependency graph of {_join(self.clusters)}:"]
        out += [f"  - {r.detail}" for r in self.reasons]
        out += ["New order:"]
        changed = {c.tier: c for c in self.changes if c.kind != "removed"}
        for name in self.order:
            change = changed.get(name)
            out.append(f"  {name}" + (f"    # {change.kind}" if change else ""))
        out += ["Changes:"]
        out += [f"  - {c.sentence()}" for c in self.changes]
        return "\n".join(out) + "\n"


def plan_tier_fix(graphs: ClusterGraphs, text: str, *, file: str, variable: str) -> TierFix:
    """The fix (maybe none) for `text`'s list against every cluster's graph.

    Raises TierOrderConflict when no single order fits every cluster, TierOrderError when the list cannot be
    read (or rewritten) statically.
    """
    union = union_graph(graphs)
    deps = union.deps
    cycle = find_cycle(deps)
    if cycle is not None:
        edges = [union.edge(cycle[i], cycle[i + 1]) for i in range(len(cycle) - 1)]
        raise TierOrderConflict(cycle, edges, union.clusters)
    order = read_tier_order(text, variable)
    current = list(order.names)
    reasons = stale_reasons(current, deps)
    if not reasons:
        return TierFix(file, variable, union.clusters, tuple(current), tuple(current), (), (), text, text)
    new = stable_order(current, deps)
    new_text = rewrite_tier_order(text, order, new)
    changes = _changes(current, new, union)
    return TierFix(file, variable, union.clusters, tuple(current), tuple(new), tuple(reasons), tuple(changes), text, new_text)


def _changes(current: Sequence[str], new: Sequence[str], union: UnionGraph) -> list[Change]:
    """Added and moved entries in new-list order, then removed ones in old-list order."""
    kept_old = set(_lcs(list(current), list(new)).values())
    kept_names = {current[i] for i in kept_old}
    out: list[Change] = []
    for k, name in enumerate(new):
        if name in kept_names:
            continue
        after = new[k - 1] if k else None
        kind = "moved" if name in current else "added"
        # The edges that place it: its own dependencies, and the listed tiers that depend on it.
        edges = tuple(e for e in union.edges_of(name) if e.dependency in new) + tuple(
            e for e in union.users_of(name) if e.tier in new
        )
        if kind == "moved":
            # For a move, the edges the old position broke say why it moves.
            old = {n: i for i, n in reversed(list(enumerate(current)))}
            broken = tuple(
                e for e in edges if (e.tier == name and old.get(e.dependency, -1) > old[name])
                or (e.dependency == name and 0 <= old.get(e.tier, len(current)) < old[name])
            )
            edges = broken or edges
        out.append(Change(kind, name, after, edges))
    for name, count in sorted(Counter(current).items(), key=lambda kv: current.index(kv[0])):
        if name not in union.tiers:
            out.append(Change("removed", name, note="not a Kustomization of any cluster"))
        elif count > 1:
            out.append(Change("removed", name, note=f"listed {count} times; only one entry stays"))
    return out


# --------------------------------------------------------------------------------------------
# What a commit did to the graph, and which commit made the order stale


def graph_changes(old: ClusterGraphs, new: ClusterGraphs) -> list[str]:
    """Sentences (Markdown) for tiers and edges added or removed between two states, with their clusters."""
    found: dict[str, list[str]] = {}
    for cluster in sorted(set(old) | set(new)):
        a, b = old.get(cluster, {}), new.get(cluster, {})
        for tier in sorted(set(b) - set(a)):
            requires = sorted(b[tier])
            text = f"new tier {markdown.code(tier)}" + (f" (dependsOn {', '.join(markdown.code(d) for d in requires)})" if requires else "")
            found.setdefault(text, []).append(cluster)
        for tier in sorted(set(a) - set(b)):
            found.setdefault(f"tier {markdown.code(tier)} removed", []).append(cluster)
        for tier in sorted(set(a) & set(b)):
            for dep in sorted(set(b[tier]) - set(a[tier])):
                found.setdefault(f"{markdown.code(tier)} now dependsOn {markdown.code(dep)}", []).append(cluster)
            for dep in sorted(set(a[tier]) - set(b[tier])):
                found.setdefault(f"{markdown.code(tier)} no longer dependsOn {markdown.code(dep)}", []).append(cluster)
    return [f"{text} in {markdown.text(', '.join(clusters))}" for text, clusters in found.items()]


def first_stale(commits: Sequence[str], is_stale: Callable[[str], bool | None]) -> int | None:
    """The index of the first stale commit of `commits` (oldest first; the last one is stale), by bisection.

    None when the oldest is already stale, or when `is_stale` cannot tell (returns None) for a commit it needs.
    Assumes that once stale, the order stays stale (a bisection, like git bisect).
    """
    if not commits:
        return None
    first = is_stale(commits[0])
    if first is None:
        return None
    if first:
        return None
    good, bad = 0, len(commits) - 1
    while bad - good > 1:
        mid = (good + bad) // 2
        verdict = is_stale(commits[mid])
        if verdict is None:
            return None
        if verdict:
            bad = mid
        else:
            good = mid
    return bad


# --------------------------------------------------------------------------------------------
# One revision's state (read by bot/pipeline/tier_state.py)


@dataclass(frozen=True)
class TreeState:
    """What a fix needs from one revision: the configured list, its text and every cluster's graph."""

    file: str | None  # None: `.fluxwarden.yaml` names no tier order
    variable: str | None
    text: str | None  # None: the file does not exist
    graphs: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)

    def plan(self) -> TierFix:
        """The fix for this state; a UserError when no tier order is configured or the file is missing."""
        if self.file is None or self.variable is None:
            raise UserError("no tier order configured: add `tier_order: {file: ..., variable: ...}` to .fluxwarden.yaml")
        if self.text is None:
            raise UserError(f"tier order file {self.file} is not in the repository")
        if not self.graphs:
            raise UserError("no clusters found (configure `clusters` in .fluxwarden.yaml)")
        return plan_tier_fix(self.graphs, self.text, file=self.file, variable=self.variable)


def _join(names: Sequence[str]) -> str:
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]

