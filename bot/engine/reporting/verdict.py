"""From a cluster's render and findings to its report: apply order, and what says a render checked nothing."""

from __future__ import annotations

from bot.engine.tiergraph.bootstrap import applied_before_flux, bare_cluster_findings, bootstrap_findings
from bot.engine.tiergraph.checks import CheckContext, run_checks
from bot.engine.tiergraph.coldstart import ColdStart
from bot.engine.render.flux import is_flux_kustomization
from bot.engine.tiergraph.graph import TierGraph
from bot.engine.livestate.live import live_provider_findings
from bot.engine.core.model import Finding, Severity, SourceLocation, TierId, plural
from bot.engine.render.rendered import Outcome, ClusterRender, RenderedTier
from bot.engine.reporting.report import CheckReport, TierSummary

NOT_CHECKED_LISTED = 10  # tiers named in a `nothing-rendered` message before "and N more"


def cluster_findings(ctx: CheckContext, bootstrap: bool = True) -> list[Finding]:
    """Every finding of one cluster: its render's (less what its bootstrap installs first), the checks', and the
    render's and bootstrap's notes; `bootstrap` False judges a bare cluster (`--no-bootstrap`)."""
    render = ctx.render
    return [
        *(f for f in render.findings if not applied_before_flux(f, ctx.bootstrap)),
        *run_checks(ctx),
        *unreached_unsafe_paths(render),
        *live_provider_findings(ctx.providers),
        *nothing_rendered(render),
        *(bootstrap_findings(ctx.bootstrap) if bootstrap else bare_cluster_findings()),
    ]


def nothing_rendered(render: ClusterRender) -> list[Finding]:
    """An error when the cluster's content was not rendered: nothing checked is not a pass.

    The entry path (the bootstrap Kustomization's) usually only wires the cluster up: when it applies
    Kustomizations, at least one of them must render an object; when it applies none, it must render
    one itself. A tier that applies another source, failed to build, or built nothing renders none.
    A tier that failed but still produced objects (a SOPS Secret without decryption) was checked,
    and its `render-failed` is the error.
    """
    entry = next(iter(render.tiers), None)  # discovery order: the entry tier first
    children = [tid for tid in render.tiers if tid != entry]
    judged = children or list(render.tiers)
    if any(render.tiers[tid].rendered and len(render.tiers[tid].manifests) for tid in judged):
        return []
    if entry is not None and _only_other_repositories(render, entry, children):
        return []
    unchecked = judged if entry is None or render.tiers[entry].rendered and children else [entry, *children]
    reasons = [f"{tid} ({_why_not_rendered(render.tiers[tid])})" for tid in unchecked]
    listed = ", ".join(reasons[:NOT_CHECKED_LISTED]) + (f" and {len(reasons) - NOT_CHECKED_LISTED} more" if len(reasons) > NOT_CHECKED_LISTED else "")
    what = f"none of the {plural(len(children), 'Kustomization')} its entry applies rendered an object" if children else "its entry rendered no object"
    message = f"nothing of cluster {render.cluster} (entry ./{render.entry}) was checked: {what}; not checked: {listed or 'no tier'}"
    return [Finding("nothing-rendered", Severity.ERROR, message, location=SourceLocation(render.entry or "."))]


_SOURCE_GROUP = "source.toolkit.fluxcd.io"
# The source kinds a Kustomization may apply that name a repository by URL.
_REPOSITORY_KINDS = frozenset({"GitRepository", "OCIRepository", "Bucket"})


def _only_other_repositories(render: ClusterRender, entry: TierId, children: list[TierId]) -> bool:
    """Whether the entry rendered the cluster's own objects and every other tier applies another repository
    that the render itself defines (controlplaneio-fluxcd/d2-fleet's `update` cluster: its Kustomizations run
    image automation on the d2-apps and d2-infra repositories). Not for a source the entry itself syncs from:
    that is this repository under another name, and nothing of it was checked."""
    own = render.tiers[entry]
    if not own.rendered or not children:
        return False
    if not any(not is_flux_kustomization(m) and m.ref.group != _SOURCE_GROUP for m in own.manifests):
        return False  # Kustomizations and sources only: wiring, not the cluster's own objects
    defined = {(m.ref.kind, m.ref.namespace, m.ref.name) for tier in render.tiers.values() for m in tier.manifests if m.ref.kind in _REPOSITORY_KINDS}
    for tid in children:
        tier = render.tiers[tid]
        source = tier.spec.source
        if tier.rendered or tier.failed or source == own.spec.source or (source.kind, source.namespace, source.name) not in defined:
            return False
    return True


def _why_not_rendered(tier: RenderedTier) -> str:
    if tier.failed:
        return "failed to render"
    if not tier.rendered:
        return f"applies {tier.spec.source.kind}/{tier.spec.source.name}, not this repository"
    return "rendered no object"


def unreached_unsafe_paths(render: ClusterRender) -> list[Finding]:
    """Symlinks out of the repo that no tier reads are still reported: the PR added them."""
    reported = {f.location.file for f in render.findings if f.check == "unsafe-path" and f.location}
    return [
        Finding("unsafe-path", Severity.ERROR, f"{r.path} {r.reason}", location=SourceLocation(r.path))
        for r in render.snapshot.refused
        if "symlink" in r.reason and r.path not in reported
    ]


def apply_order(render: ClusterRender, graph: TierGraph) -> list[TierId]:
    """Tiers in apply order (dependencies first, ties by name), cycle members last."""
    order = graph.order()
    return order + [t for t in render.tiers if t not in order]


def build_report(render: ClusterRender, graph: TierGraph, findings: list[Finding], cold_start: ColdStart | None = None) -> CheckReport:
    """Assemble the report: tiers in apply order (cycle members last), findings sorted errors first."""
    order = apply_order(render, graph)
    tiers = tuple(
        TierSummary(
            id=t.spec.id,
            path=t.spec.path,
            source=t.spec.source,
            depends_on=t.spec.depends_on,
            wait=t.spec.wait,
            prune=t.spec.prune,
            objects=len(t.manifests),
            rendered=t.rendered,
            source_path=t.spec.source_path,
            kube_config=t.spec.kube_config,
            defined_in=t.spec.defined_in,
        )
        for t in (render.tiers[tid] for tid in order)
    )
    unique = list(dict.fromkeys(findings))
    return CheckReport(
        cluster=render.cluster,
        entry=render.entry,
        tiers=tiers,
        order=tuple(order),
        findings=tuple(sorted(unique, key=Finding.sort_key)),
        cold_start=cold_start,
        releases=sum(1 for r in render.releases.values() if r.rendered),
        releases_not_rendered=sum(1 for r in render.releases.values() if r.outcome is Outcome.NOT_RENDERED),
    )
