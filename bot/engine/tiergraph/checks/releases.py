"""The objects a rendered chart installs, checked where the checks apply: names, kinds nobody serves, one object
applied by a chart and by a Kustomization (or by two charts).

A release's objects are applied by helm-controller, not kustomize-controller, so they are not any tier's: they
are checked here, each finding on the HelmRelease (its file and tier), naming the chart template.
"""

from __future__ import annotations

from typing import Iterator

from bot.engine.core import markdown as md
from bot.engine.tiergraph.checks.context import CheckContext, check
from bot.engine.tiergraph.checks.names import DNS1123_LABEL, name_rule, problem
from bot.engine.render.facts import CRD
from bot.engine.core.model import Finding, GroupKind, ObjectRef, Severity

# Kinds no chart check judges: Flux's own API is there before any chart (flux bootstrap).
_FLUX_GROUP_SUFFIX = ".toolkit.fluxcd.io"


@check(
    "chart-invalid-name",
    "chart-unknown-kind",
    "chart-duplicate-object",
)
def chart_objects(ctx: CheckContext) -> Iterator[Finding]:
    releases = ctx.render.releases
    if not releases:
        return
    appliers: dict[tuple, list[str]] = {}  # identity → who applies it: releases first, then (only those) tiers
    resolved: dict[GroupKind, bool] = {}  # kind → whether anybody serves it
    for ref, release in sorted(releases.items()):
        if not release.rendered:
            continue
        own = {gk for gk, _ in release.crds}
        unknown: dict[GroupKind, list[ObjectRef]] = {}
        for manifest in release.manifests:
            obj = manifest.ref
            why = _name_problem(obj)
            if why is not None:
                yield Finding(
                    "chart-invalid-name", Severity.ERROR,
                    f"HelmRelease {ref.namespace}/{ref.name} (chart {release.chart} {release.version}) renders {obj.kind} {md.code(obj.name)}: {why}; "
                    "the API server refuses it, so helm-controller's install fails",
                    kustomization=release.tier, object=ref, location=release.location,
                )
            gk = obj.group_kind
            if gk not in own and gk != CRD and not gk.group.endswith(_FLUX_GROUP_SUFFIX):
                if gk not in resolved:
                    resolved[gk] = bool(ctx.providers.resolve(gk))
                if not resolved[gk]:
                    unknown.setdefault(gk, []).append(obj)
            appliers.setdefault(obj.identity, []).append(f"HelmRelease {ref.namespace}/{ref.name}")
        for gk, objs in sorted(unknown.items()):
            names = ", ".join(o.name for o in objs[:3]) + (f" and {len(objs) - 3} more" if len(objs) > 3 else "")
            yield Finding(
                "chart-unknown-kind", Severity.WARNING,
                f"HelmRelease {ref.namespace}/{ref.name} (chart {release.chart} {release.version}) renders {gk} ({names}), but no CRD in git, "
                "no chart and no known operator provides that kind: helm-controller's install fails until something installs its CRD",
                kustomization=release.tier, object=ref, location=release.location,
            )
    # Only the identities a chart renders are looked up among the tiers' objects (a cluster has tens of thousands).
    for identity, who in appliers.items():
        who.extend(f"Kustomization {tier_id}" for tier_id, _ in ctx.appliers(identity) if not ctx.render.tiers[tier_id].spec.kube_config)
    yield from _duplicates(ctx, appliers)


def _name_problem(obj: ObjectRef) -> str | None:
    why = problem(obj.name, name_rule(obj.group_kind))
    if why is not None:
        return f"its name must be {why}"
    if obj.namespace:
        why = problem(obj.namespace, DNS1123_LABEL)
        if why is not None:
            return f"its namespace must be {why}"
    return None


def _duplicates(ctx: CheckContext, appliers: dict[tuple, list[str]]) -> Iterator[Finding]:
    """One finding per HelmRelease whose objects another applier applies too."""
    by_release: dict[str, list[tuple[tuple, list[str]]]] = {}
    for identity, who in appliers.items():
        charts = [w for w in who if w.startswith("HelmRelease ")]
        if not charts or len(set(who)) < 2:
            continue
        by_release.setdefault(charts[0], []).append((identity, sorted(set(who))))
    index = {f"HelmRelease {r.namespace}/{r.name}": release for r, release in ctx.render.releases.items()}
    for name, entries in sorted(by_release.items()):
        release = index[name]
        entries.sort()
        shown = "; ".join(f"{_identity(i)} (also {', '.join(w for w in who if w != name)})" for i, who in entries[:3])
        more = f"; and {len(entries) - 3} more" if len(entries) > 3 else ""
        yield Finding(
            "chart-duplicate-object", Severity.WARNING,
            f"{name} (chart {release.chart} {release.version}) renders objects another applier applies too: {shown}{more}. Each apply takes the "
            "object over, so it flips on every reconcile, and an uninstall or prune deletes what the other still defines. Keep each object in one place",
            kustomization=release.tier, object=release.ref, location=release.location,
        )


def _identity(identity: tuple) -> str:
    namespace, name, group, kind = identity
    kind_text = f"{kind}.{group}" if group else kind
    return f"{kind_text}/{namespace}/{name}" if namespace else f"{kind_text}/{name}"


__all__ = ["chart_objects"]
