"""Checks on the dependsOn graph itself: cycles, dangling edges, drift between clusters, the tier order file."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Collection, Iterator, Sequence

from bot.engine.tiergraph.checks.context import CheckContext, check, name_list
from bot.engine.core.errors import TierOrderError
from bot.engine.render.flux import KUSTOMIZATION_GROUP
from bot.engine.tiergraph.graph import TierGraph
from bot.engine.core.model import Finding, Severity, SourceLocation, TierId
from bot.engine.core.tree import CONFIG_FILE
from bot.engine.ordering.tierorder import read_tier_order, stale_reasons


@check("dependency-cycle")
def dependency_cycle(ctx: CheckContext) -> Iterator[Finding]:
    for cycle in ctx.graph.cycles:
        yield Finding(
            "dependency-cycle",
            Severity.ERROR,
            f"dependsOn forms a cycle: {cycle}; Flux never applies any of these Kustomizations",
            kustomization=cycle.path[0],
            location=ctx.tier_location(cycle.path[0]),
        )


def anchor_cycles(
    findings: Sequence[Finding], graph: TierGraph, changed: Collection[str], read_text: Callable[[str], str | None],
    base: TierGraph | None = None,
) -> list[Finding]:
    """A review's dependency-cycle findings anchored on the `dependsOn` entry in a file the change edits.

    The finding keeps its tier and message (a cycle on both sides still pairs with the base's): only its
    location moves, to the edge whose dependent is written in a changed file (one the base lacks first),
    at that entry's line.
    """
    out = []
    for finding in findings:
        if finding.check == "dependency-cycle":
            finding = _anchored(finding, graph, changed, read_text, base)
        out.append(finding)
    return out


def _anchored(
    finding: Finding, graph: TierGraph, changed: Collection[str], read_text: Callable[[str], str | None], base: TierGraph | None
) -> Finding:
    cycle = next((c for c in graph.cycles if c.path and c.path[0] == finding.kustomization and str(c) in finding.message), None)
    if cycle is None:
        return finding
    edges = list(zip(cycle.path, cycle.path[1:]))
    if base is not None:  # the edges this change added first
        edges.sort(key=lambda e: e[1] in base.deps.get(e[0], frozenset()))
    for dependent, dependency in edges:
        spec = graph.specs.get(dependent)
        if spec is None or spec.origin is None or spec.origin.file not in changed:
            continue
        line = dependency_line(read_text(spec.origin.file) or "", spec.origin.line or 1, dependency.name)
        return replace(finding, location=SourceLocation(spec.origin.file, line or spec.origin.line))
    return finding


def dependency_line(text: str, start: int, name: str) -> int | None:
    """The 1-based line of `name: <name>` in the first `dependsOn:` list at or after line `start` (None: not found)."""
    lines = text.splitlines()
    inside, indent = False, 0
    for number in range(max(start, 1), len(lines) + 1):
        line = lines[number - 1]
        stripped = line.strip()
        if number > start and stripped == "---":
            return None
        if not inside:
            if stripped.startswith("dependsOn:"):
                inside, indent = True, len(line) - len(stripped)
                if name in stripped:  # a flow list: `dependsOn: [{name: x}]`
                    return number
            continue
        if stripped and not stripped.startswith("-") and len(line) - len(stripped) <= indent:
            return None
        words = stripped.lstrip("- ").replace('"', "").replace("'", "")
        if words.startswith("name:") and words[5:].strip() == name:
            return number
    return None


@check("missing-dependency")
def missing_dependency(ctx: CheckContext) -> Iterator[Finding]:
    by_name: dict[str, list[TierId]] = {}
    for tid in ctx.graph.nodes:
        by_name.setdefault(tid.name, []).append(tid)
    hiding: list[TierId] | None = None
    for tier, dep in ctx.graph.missing_dependencies():
        hint = ""
        candidates = by_name.get(dep.name, [])
        if candidates:
            # dependsOn[].namespace defaults to the dependent's own namespace (Flux v1 API docs).
            hint = f"; did you mean {name_list(str(t) for t in candidates)}? (dependsOn namespace defaults to {tier.namespace})"
            ancestors = [t for t in candidates if ctx.is_ancestor(t, tier)]
            if ancestors:
                # Never advise a child to wait for its own parent: with wait: true the parent waits for it too.
                hint += (
                    f" — but {name_list(str(t) for t in ancestors)} applies {tier} itself: a dependsOn on it deadlocks "
                    f"when it has wait: true (each waits for the other); drop the dependsOn instead"
                )
        if hiding is None:
            hiding = _failed_creators(ctx)
        if hiding:
            # Knock-on of a failed render: the render-failed finding is the error.
            yield Finding(
                "missing-dependency",
                Severity.INFO,
                f"{tier} dependsOn {dep}, which this render does not have; it may be one of the Kustomizations of "
                f"{name_list(str(t) for t in hiding)}, which failed to render (see render-failed){hint}",
                kustomization=tier,
                location=ctx.tier_location(tier),
            )
            continue
        yield Finding(
            "missing-dependency",
            Severity.ERROR,
            f"{tier} dependsOn {dep}, which this cluster does not have; it stays DependencyNotReady forever{hint}",
            kustomization=tier,
            location=ctx.tier_location(tier),
        )


def _failed_creators(ctx: CheckContext) -> list[TierId]:
    """Tiers that failed to render and could have applied Flux Kustomizations (whose own children
    could be anything): the rest of their output is unknown.

    One that reads no file naming the Kustomization API cannot make one; one whose path does not
    exist makes nothing, in Flux too.
    """
    snapshot = ctx.render.snapshot
    out = []
    for tid, tier in ctx.render.tiers.items():
        if not tier.failed or not snapshot.is_dir(tier.spec.path):
            continue
        files = [p for p in tier.inputs if snapshot.is_file(p)]
        if not files or any(KUSTOMIZATION_GROUP in (snapshot.read_text(p) or "") for p in files):
            out.append(tid)
    return out


@check("graph-drift")
def graph_drift(ctx: CheckContext) -> Iterator[Finding]:
    here = ctx.render.cluster
    ignore = ctx.config.graph_drift_ignore
    for other, graph in sorted(ctx.other_graphs.items()):
        for drift in graph_differences(ctx.graph, graph, here, other):
            if any(rule.covers(drift.tier, drift.field, (here, other), drift.depends_on) for rule in ignore):
                continue
            yield Finding("graph-drift", Severity.WARNING, drift.message, kustomization=drift.tier, location=drift.location)


@dataclass(frozen=True)
class Drift:
    """One difference between two clusters' graphs that can break one of them."""

    tier: TierId
    field: str  # dependsOn | wait | prune
    message: str
    location: SourceLocation | None
    depends_on: TierId | None = None


_IGNORE_HINT = f"(if this is meant, declare it under graph_drift.ignore in {CONFIG_FILE})"


def graph_differences(a: TierGraph, b: TierGraph, a_name: str, b_name: str) -> Iterator[Drift]:
    """The differences that break something, for the tiers both clusters have.

    Clusters differ on purpose (a tier only staging has, another path per environment): only a
    dependsOn edge one cluster lacks although both have its target, and wait/prune flipped, count.
    """
    for tid in sorted(set(a.specs) & set(b.specs)):
        sa, sb = a.specs[tid], b.specs[tid]
        for has, lacks, has_name, lacks_name in ((sa, sb, a_name, b_name), (sb, sa, b_name, a_name)):
            for dep in sorted(set(has.depends_on) - set(lacks.depends_on)):
                if dep in a.specs and dep in b.specs:
                    yield Drift(
                        tid,
                        "dependsOn",
                        f"{tid} dependsOn {dep} in {has_name} but not in {lacks_name}, which has both: there {tid} can "
                        f"apply before {dep} is Ready {_IGNORE_HINT}",
                        lacks.origin or has.origin,
                        dep,
                    )
        if sa.wait != sb.wait:
            waits, loose = (a_name, b_name) if sa.wait else (b_name, a_name)
            yield Drift(
                tid,
                "wait",
                f"{tid} has wait: true in {waits} but not in {loose}: there it is Ready as soon as it is applied, so "
                f"the tiers that depend on it can start before its objects are healthy {_IGNORE_HINT}",
                sa.origin,
            )
        if sa.prune != sb.prune:
            prunes, keeps = (a_name, b_name) if sa.prune else (b_name, a_name)
            yield Drift(
                tid,
                "prune",
                f"{tid} has prune: true in {prunes} but not in {keeps}: there objects removed from git stay on the "
                f"cluster, and a change that moves objects between tiers behaves differently {_IGNORE_HINT}",
                sa.origin,
            )


@check("tier-order-stale")
def tier_order_stale(ctx: CheckContext) -> Iterator[Finding]:
    setting = ctx.config.tier_order
    if setting is None:
        return
    text = ctx.render.snapshot.read_text(setting.file)
    where = SourceLocation(setting.file)
    if text is None:
        yield Finding("tier-order-stale", Severity.WARNING, f"tier order file {setting.file} is not in the repository", location=where)
        return
    try:
        order = read_tier_order(text, setting.variable)
    except TierOrderError as exc:
        yield Finding("tier-order-stale", Severity.WARNING, f"{setting.file}: {exc}", location=where)
        return
    entry = ctx.render_entry
    # One list serves every cluster (bootstrap scripts take the cluster as an argument), so it is
    # judged against the union of the clusters' graphs, as `fluxwarden tier-order` computes it.
    deps: dict[str, set[str]] = {}
    tiers: list = []
    for graph in (ctx.graph, *ctx.other_graphs.values()):
        for t in graph.nodes:
            if t == entry:
                continue
            tiers.append(t)
            deps.setdefault(t.name, set()).update(d.name for d in graph.deps[t] if d != entry)
    lines = {e.name: e.line for e in order.entries}
    for reason in stale_reasons(order.names, deps):
        tier = next((t for t in tiers if t.name == reason.tier), None)
        yield Finding(
            "tier-order-stale",
            Severity.WARNING,
            f"{setting.file} {setting.variable}: {reason.detail}",
            kustomization=tier,
            location=SourceLocation(setting.file, lines.get(reason.tier, order.line)),
        )


@check("health-check-deadlock")
def health_check_deadlock(ctx: CheckContext) -> Iterator[Finding]:
    for tier, outcome in sorted(ctx.cold_start.tiers.items()):
        if outcome.reason != "deadlock":
            continue
        yield Finding(
            "health-check-deadlock",
            Severity.ERROR,
            f"on a cold start {tier} never becomes Ready: {outcome.blocked_by}. Health-check only what {tier} applies "
            f"itself or what its dependencies apply, or drop the dependsOn that points back",
            kustomization=tier,
            location=ctx.tier_location(tier),
        )
