"""Checks on the dependsOn graph itself: cycles, dangling edges, drift between clusters, the tier order file."""

from __future__ import annotations

from typing import Iterator

from bot.checks import CheckContext, check, name_list
from bot.errors import TierOrderError
from bot.graph import TierGraph
from bot.model import Finding, Severity, SourceLocation
from bot.tierorder import read_tier_order, stale_reasons


@check(("dependency-cycle", Severity.ERROR, "dependsOn forms a cycle (the message shows the path)"))
def dependency_cycle(ctx: CheckContext) -> Iterator[Finding]:
    for cycle in ctx.graph.cycles:
        yield Finding(
            "dependency-cycle",
            Severity.ERROR,
            f"dependsOn forms a cycle: {cycle}; Flux never applies any of these Kustomizations",
            kustomization=cycle.path[0],
            location=ctx.tier_location(cycle.path[0]),
        )


@check(("missing-dependency", Severity.ERROR, "dependsOn names a Kustomization the cluster does not have"))
def missing_dependency(ctx: CheckContext) -> Iterator[Finding]:
    by_name: dict[str, list[str]] = {}
    for tid in ctx.graph.nodes:
        by_name.setdefault(tid.name, []).append(str(tid))
    for tier, dep in ctx.graph.missing_dependencies():
        hint = ""
        if dep.name in by_name:
            # dependsOn[].namespace defaults to the dependent's own namespace (Flux v1 API docs).
            hint = f"; did you mean {name_list(by_name[dep.name])}? (dependsOn namespace defaults to {tier.namespace})"
        yield Finding(
            "missing-dependency",
            Severity.ERROR,
            f"{tier} dependsOn {dep}, which this cluster does not have; it stays DependencyNotReady forever{hint}",
            kustomization=tier,
            location=ctx.tier_location(tier),
        )


@check(("graph-drift", Severity.WARNING, "this cluster's tier graph (nodes, edges, wait/prune) differs from another cluster's"))
def graph_drift(ctx: CheckContext) -> Iterator[Finding]:
    here = ctx.render.cluster
    for other, graph in sorted(ctx.other_graphs.items()):
        differences = list(graph_differences(ctx.graph, graph, here, other, entry=ctx.render_entry))
        if differences:
            shown = "; ".join(differences[:8]) + (f"; and {len(differences) - 8} more" if len(differences) > 8 else "")
            yield Finding(
                "graph-drift",
                Severity.WARNING,
                f"the tier graph of {here} differs from {other}: {shown}",
            )


def graph_differences(a: TierGraph, b: TierGraph, a_name: str, b_name: str, entry: object = None) -> Iterator[str]:
    """Human sentences for each node, edge, wait or prune difference between two graphs.

    The cluster entry's path differs by design (clusters/dev vs clusters/prod), so only its edges count.
    """
    a_nodes, b_nodes = set(a.specs), set(b.specs)
    for tid in sorted(a_nodes - b_nodes):
        yield f"{tid} only in {a_name}"
    for tid in sorted(b_nodes - a_nodes):
        yield f"{tid} only in {b_name}"
    for tid in sorted(a_nodes & b_nodes):
        sa, sb = a.specs[tid], b.specs[tid]
        for dep in sorted(set(sa.depends_on) - set(sb.depends_on)):
            yield f"{tid} dependsOn {dep} only in {a_name}"
        for dep in sorted(set(sb.depends_on) - set(sa.depends_on)):
            yield f"{tid} dependsOn {dep} only in {b_name}"
        for field in ("wait", "prune") if tid == entry else ("wait", "prune", "path"):
            va, vb = getattr(sa, field), getattr(sb, field)
            if va != vb:
                yield f"{tid} {field}: {va!r} in {a_name}, {vb!r} in {b_name}"


@check(("tier-order-stale", Severity.WARNING, "the tier order list misses a tier or lists one before a tier it depends on"))
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
