"""Which tiers a finished tier applies, and how far a render may follow them (pure: locating and patching are passed in)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from bot.engine.render.artifacts import Artifact, Placement, unreadable
from bot.engine.render.config import RepoConfig
from bot.engine.core.errors import InputError
from bot.engine.render.flux import OperatorSync, TierSpecError, TierSpecShapeError, is_flux_instance_release, operator_sync, tier_spec
from bot.engine.render.chartrender import merge_maps
from bot.engine.core.model import Finding, Manifest, SourceLocation, SourceRef, TierId, TierSpec, plural
from bot.engine.render.rendered import RawTier, RenderedTier, object_ref, render_failed, same_tier, unsafe_path
from bot.engine.core.tree import normalise_repo_path
from bot.engine.render.yamlio import load_one

Locate = Callable[[Manifest], "SourceLocation | None"]
# Applies a FluxInstance's patches to its sync Kustomization (kustomize runs): (sync, tier, origin, findings) → body.
# A ConfigMap's body in the cluster's render by (namespace, name), or None.
ConfigMapOf = Callable[[str, str], "Mapping[str, Any] | None"]
PatchSync = Callable[[OperatorSync, TierId, "SourceLocation | None", list[Finding]], Mapping[str, Any]]


@dataclass(frozen=True)
class RenderLimits:
    """How far one cluster render may go before it stops with a `render-limit` finding.

    Far past what real repositories need (250+ tiers, a few levels of nested Kustomizations, tens of
    thousands of objects), far short of what a PR that makes Flux create Kustomizations without end takes
    (`name: loop-${P}` at `path: ./loop` with `postBuild.substitute: {P: "${P}a"}` grows a new tier per
    generation): the checker must never spend its memory on one. A file's own bounds (nesting depth,
    documents) are yamlio's MAX_NESTING and MAX_DOCUMENTS; past any of them the finding is `render-limit` too.
    """

    tiers: int = 2_000  # tiers per cluster
    depth: int = 32  # Kustomizations nested inside Kustomizations
    path_repeats: int = 2  # times one path may recur among a tier's ancestors (a new namespace re-applies once)
    objects: int = 200_000  # rendered objects per cluster
    tier_objects: int = 50_000  # objects one Kustomization's build may produce (a large CRD bundle has a few thousand)
    output_bytes: int = 1 << 30  # kustomize output per renderer (both sides of nothing else)

    def beyond(self, chain: tuple[TierSpec, ...], tiers: int, objects: int, output_bytes: int) -> str | None:
        """Why the last Kustomization of `chain` (entry first) is not rendered, or None when it is within the limits."""
        spec = chain[-1]
        repeats = sum(1 for s in chain[:-1] if (s.source, s.path) == (spec.source, spec.path))
        if repeats > self.path_repeats:
            path = " → ".join(str(s.id) for s in chain if (s.source, s.path) == (spec.source, spec.path))
            return (
                f"{spec.id} renders path {spec.path or '.'!r} again under a new name ({path}): a Kustomization that "
                f"recreates itself never ends in Flux either; not rendered (limit: a path {self.path_repeats + 1} times in one chain)"
            )
        if len(chain) - 1 > self.depth:
            return f"{spec.id} is nested {len(chain) - 1} Kustomizations deep; not rendered (limit: {self.depth})"
        if tiers >= self.tiers:
            return f"the cluster has more than {self.tiers} Kustomizations; {spec.id} and any after it are not rendered (limit: {self.tiers})"
        if objects > self.objects:
            return f"the cluster rendered more than {plural(self.objects, 'object')}; {spec.id} and any after it are not rendered (limit: {self.objects})"
        if output_bytes > self.output_bytes:
            return f"kustomize produced more than {self.output_bytes >> 20} MiB for this render; {spec.id} and any after it are not rendered"
        return None


def child_specs(tier: RenderedTier, entry: str, config: RepoConfig, locate: Locate, findings: list[Finding]) -> list[TierSpec]:
    """The Kustomizations a finished tier applies (the bootstrap one that applies the entry itself aside)."""
    specs = []
    for manifest in tier.flux_kustomizations():
        try:
            spec = tier_spec(replace(manifest, origin=locate(manifest)), tier.spec.id)
        except TierSpecShapeError as exc:
            findings.append(render_failed(tier.spec.id, str(exc), locate(manifest)))
            continue
        except TierSpecError as exc:
            findings.append(unsafe_path(tier.spec.id, str(exc), manifest.origin))
            continue
        if config.is_this_repo(spec.source) and config.repo_path(spec.source, spec.path) == entry and spec.id == tier.spec.id:
            continue  # the bootstrap Kustomization that applies the entry path itself
        specs.append(spec)
    return specs


def in_repo(spec: TierSpec, config: RepoConfig) -> TierSpec:
    """A spec of this repository's content with its repository path (an artifact of a SUBDIR keeps its own as `source_path`)."""
    path = config.repo_path(spec.source, spec.path)
    return spec if path == spec.path else replace(spec, path=path, source_path=spec.path)


def bootstrap_spec(tier: RenderedTier, entry: str, config: RepoConfig, locate: Locate) -> TierSpec | None:
    """The Kustomization in the entry tier's own output that applies the entry path from this repository
    (`flux bootstrap`'s gotk-sync, as patched by its kustomization): the truth about the entry tier."""
    # Only a Kustomization whose path can name the entry is parsed: an entry tier may apply hundreds.
    roots = {sub for _, sub in config.source_paths}
    for manifest in tier.flux_kustomizations():
        if not _may_name(manifest, entry, roots):
            continue
        try:
            spec = tier_spec(manifest, None)
        except TierSpecError:
            continue  # `child_specs` reports it
        if config.is_this_repo(spec.source) and config.repo_path(spec.source, spec.path) == entry:
            return replace(in_repo(spec, config), origin=locate(manifest))  # located only when found: a file read per tier
    return None


def _may_name(manifest: Manifest, entry: str, roots: set[str]) -> bool:
    """Whether a Kustomization's `spec.path` can be the repository path `entry`, as itself or below an
    artifact's subdirectory (`RepoConfig.repo_path`); a path `tier_spec` would refuse is left to it."""
    spec = manifest.body.get("spec")
    raw = spec.get("path") if isinstance(spec, Mapping) else None
    path = normalise_repo_path(raw or "") if raw is None or isinstance(raw, str) else None
    if path is None:  # not a string, or climbing out
        return True
    return path == entry or any((posixpath.join(root, path) if path else root) == entry for root in roots if root)


def release_values(manifest: Manifest, config_map: ConfigMapOf) -> Mapping[str, Any] | None:
    """A flux-instance HelmRelease's values with its `valuesFrom` ConfigMaps merged in, as helm-controller
    composes them (fluxcd/pkg chartutil ChartValuesFromReferences: each source in order, `spec.values` on top).

    Only what the entry needs is read: a Secret, a `targetPath` or a source not in git leaves the values
    not known (None), never guessed."""
    spec = manifest.body.get("spec") or {}
    values: dict[str, Any] = {}
    for ref in spec.get("valuesFrom") or []:
        if not isinstance(ref, dict) or ref.get("kind") != "ConfigMap" or ref.get("targetPath"):
            return None
        body = config_map(manifest.ref.namespace, str(ref.get("name", "")))
        data = body.get("data") if isinstance(body, dict) else None
        text = data.get(str(ref.get("valuesKey") or "values.yaml")) if isinstance(data, dict) else None
        if not isinstance(text, str):
            if ref.get("optional") and body is None:
                continue
            return None
        try:
            loaded = load_one(text, f"ConfigMap {manifest.ref.namespace}/{ref.get('name')}")
        except InputError:
            return None
        if not isinstance(loaded, dict):
            return None
        values = merge_maps(values, loaded)
    inline = spec.get("values")
    return merge_maps(values, inline) if isinstance(inline, dict) else values


def operator_entry(
    tiers: dict[TierId, RenderedTier], entry: str, current: TierSpec, findings: list[Finding], config: RepoConfig, locate: Locate, patch: PatchSync,
    config_map: ConfigMapOf = lambda namespace, name: None,
) -> TierSpec | None:
    """The sync Kustomization a FluxInstance in git (an object, one a ResourceSet creates, or a flux-instance
    HelmRelease, its values inline or from ConfigMaps) makes for the entry path, when it differs from
    `current`; its location becomes the entry tier's either way."""
    for tier in tiers.values():
        for manifest in tier.discovery_objects():
            values = release_values(manifest, config_map) if is_flux_instance_release(manifest) else None
            sync = operator_sync(manifest, values)
            if sync is None:
                continue
            synced = sync.kustomization["spec"]
            source = synced.get("sourceRef") if isinstance(synced.get("sourceRef"), dict) else {}
            ref = SourceRef(str(source.get("kind", "GitRepository")), str(source.get("name", "")), str(source.get("namespace") or "flux-system"))
            if config.repo_path(ref, normalise_repo_path(str(synced["path"])) or "") != entry:
                continue
            origin = locate(manifest)
            body = patch(sync, tier.spec.id, origin, findings)
            try:
                spec = tier_spec(Manifest(object_ref(body) or manifest.ref, body, origin), None)
            except TierSpecError:
                continue
            if not config.is_this_repo(spec.source) or config.repo_path(spec.source, spec.path) != entry:
                continue
            # An artifact of a SUBDIR (xunholy/k8s-gitops: `flux push artifact --path=./kubernetes`, synced at ./clusters/x):
            # the build reads kubernetes/clusters/x, as `bootstrap_spec` and the children do.
            spec = in_repo(spec, config)
            if same_tier(spec, current) and current.id in tiers:
                tiers[current.id] = replace(tiers[current.id], spec=spec)
                return None
            return spec
    return None


def within_artifact(raw: RawTier, artifact: Artifact, placement: Placement) -> tuple[RawTier, str | None]:
    """A build of a tier on an ExternalArtifact, checked against what the artifact holds: failed when it
    reads what the artifact lacks; with a reason not to render it when it reads what the artifact holds
    from elsewhere in the repository."""
    spec = raw.spec
    absent, elsewhere = unreadable(artifact, placement, raw.inputs)
    if elsewhere:
        return raw, (
            f"{spec.id} applies {spec.source}, where {elsewhere[0]} is not at its place in the repository "
            f"({artifact.generator} assembles it from elsewhere); its content is not rendered"
        )
    if not absent:
        return raw, None
    shown = ", ".join(absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
    message = (
        f"the build reads {shown}, which {artifact.generator} does not copy into {spec.source}: "
        "kustomize-controller cannot find it there"
    )
    return RawTier(spec, inputs=raw.inputs, failed=True, findings=(render_failed(spec.id, message, spec.origin),)), None
