"""HelmReleases rendered with their charts: what each installs, and how a change moves it (pure models and diff).

A release's objects are not its tier's: kustomize-controller applies the HelmRelease, and helm-controller
installs the chart later, once the HelmRelease's `dependsOn` are ready. So they live beside the tiers
(`ClusterRender.releases`), are diffed per HelmRelease, and give the provider index the CRDs each chart
really installs (bot/engine/tiergraph/providers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from bot.engine.reporting.diff import ClusterDiff, ObjectChange, diff_clusters
from bot.engine.render.helmvalues import fold_churn
from bot.engine.core.model import ObjectRef, SourceRef, TierId, TierSpec
from bot.engine.render.rendered import ClusterRender, Outcome, RenderedRelease, RenderedTier



@dataclass(frozen=True)
class ReleaseDiff:
    """How a change moves one HelmRelease's rendered objects."""

    ref: ObjectRef
    tier: TierId
    chart: str
    base_version: str | None
    head_version: str | None
    changes: tuple[ObjectChange, ...]
    added: bool = False  # the HelmRelease is new (or newly rendered)
    removed: bool = False

    def summary(self) -> str:
        """`HelmRelease default/webapp · chart webapp 1.0.0 → 1.1.0: Deployment/default/webapp changed (image, ports)`."""
        if self.base_version and self.head_version and self.base_version != self.head_version:
            chart = f"chart {self.chart} {self.base_version} → {self.head_version}"
        else:
            chart = f"chart {self.chart} {self.head_version or self.base_version or ''}".rstrip()
        what = "; ".join(_change_line(c) for c in self.changes[:5])
        more = f"; {len(self.changes) - 5} more" if len(self.changes) > 5 else ""
        state = " (new)" if self.added else (" (removed)" if self.removed else "")
        return f"HelmRelease {self.ref.namespace}/{self.ref.name}{state} · {chart}: {what or 'no object changed'}{more}"


@dataclass(frozen=True)
class ReleaseChanges:
    """Every HelmRelease a change moves, in HelmRelease order."""

    releases: tuple[ReleaseDiff, ...] = ()
    diff: ClusterDiff | None = None  # the objects' diff, one "tier" per HelmRelease (see `release_tier_id`)

    @property
    def empty(self) -> bool:
        return not self.releases


def release_tier_id(ref: ObjectRef) -> TierId:
    """The id a HelmRelease's objects are diffed under (a HelmRelease is namespaced: namespace/name)."""
    return TierId(ref.namespace, ref.name)


def _as_tier(release: RenderedRelease) -> RenderedTier:
    tid = release_tier_id(release.ref)
    spec = TierSpec(id=tid, path="", source=SourceRef("HelmRelease", release.ref.name, release.ref.namespace))
    manifests = tuple(replace(m, body=fold_churn(m.body)) for m in release.manifests)
    return RenderedTier(spec=spec, manifests=manifests, rendered=release.rendered, failed=release.outcome is Outcome.FAILED)


def _render_of(render: ClusterRender | None, releases: Iterable[RenderedRelease]) -> ClusterRender | None:
    if render is None:
        return None
    return replace(render, tiers={release_tier_id(r.ref): _as_tier(r) for r in releases}, findings=())


def diff_releases(base: ClusterRender | None, head: ClusterRender) -> ReleaseChanges:
    """Each HelmRelease's objects diffed base vs head (a chart bump's Deployments, CRDs and RBAC), churn labels folded."""
    old = dict(base.releases) if base is not None else {}
    new = dict(head.releases)
    if not old and not new:
        return ReleaseChanges()
    # Only releases rendered on both sides, or on the one side they exist on, are compared: a chart that
    # could not be fetched on one side says nothing about what the change does to it.
    comparable_old = {ref: r for ref, r in old.items() if r.rendered and (ref not in new or new[ref].rendered)}
    comparable_new = {ref: r for ref, r in new.items() if r.rendered and (ref not in old or old[ref].rendered)}
    # A release rendered identically on both sides has nothing to show: folding and diffing it was most of a warm review's diff.
    same = {ref for ref, r in comparable_old.items() if comparable_new.get(ref) == r}
    comparable_old = {ref: r for ref, r in comparable_old.items() if ref not in same}
    comparable_new = {ref: r for ref, r in comparable_new.items() if ref not in same}
    base_render = _render_of(base, comparable_old.values()) if base is not None else None
    head_render = _render_of(head, comparable_new.values())
    assert head_render is not None
    diff = diff_clusters(base_render, head_render)
    by_tier = {d.tier: d.changes for d in diff.tiers}
    out = []
    for ref in sorted(comparable_old.keys() | comparable_new.keys()):
        b, h = comparable_old.get(ref), comparable_new.get(ref)
        changes = by_tier.get(release_tier_id(ref), ())
        moved_version = b is not None and h is not None and b.version != h.version
        if not changes and not moved_version and b is not None and h is not None:
            continue
        either = h or b
        assert either is not None
        out.append(ReleaseDiff(
            ref=ref, tier=either.tier, chart=either.chart, base_version=b.version if b else None, head_version=h.version if h else None,
            changes=changes, added=b is None and base is not None, removed=h is None,
        ))
    return ReleaseChanges(tuple(out), diff)


def _change_line(change: ObjectChange) -> str:
    fields = ""
    if change.fields:
        fields = f" ({', '.join(change.fields)})"
    return f"{change.ref} {change.kind.value}{fields}"
