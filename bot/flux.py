"""Read Flux Kustomization objects into TierSpecs, as kustomize-controller interprets their fields."""

from __future__ import annotations

from typing import Any, Mapping

from bot.model import HealthCheck, Manifest, SourceLocation, SourceRef, SubstituteFrom, TierId, TierSpec
from bot.snapshot import normalise_repo_path

KUSTOMIZATION_GROUP = "kustomize.toolkit.fluxcd.io"
# v1beta1 used `validation`/different fields but the same shape for what we read.
KUSTOMIZATION_VERSIONS = ("v1", "v1beta2", "v1beta1")
SUBSTITUTE_ANNOTATION = "kustomize.toolkit.fluxcd.io/substitute"
DEFAULT_NAMESPACE = "flux-system"


def is_flux_kustomization(manifest: Manifest) -> bool:
    """Whether an object is a Flux Kustomization (not a kustomize config file)."""
    return manifest.ref.kind == "Kustomization" and manifest.ref.api_version in {
        f"{KUSTOMIZATION_GROUP}/{v}" for v in KUSTOMIZATION_VERSIONS
    }


class TierSpecError(ValueError):
    """A Flux Kustomization whose spec we cannot interpret."""


def tier_spec(manifest: Manifest, defined_in: TierId | None) -> TierSpec:
    """Interpret one Flux Kustomization object (namespace defaults follow the controller)."""
    body = manifest.body
    spec: Mapping[str, Any] = body.get("spec") or {}
    namespace = manifest.ref.namespace or DEFAULT_NAMESPACE
    tier = TierId(namespace, manifest.ref.name)
    raw_path = spec.get("path") or ""
    if not isinstance(raw_path, str):
        raise TierSpecError(f"{tier}: spec.path must be a string")
    path = normalise_repo_path(raw_path)
    if path is None:
        raise TierSpecError(f"{tier}: spec.path {raw_path!r} climbs out of the source")
    source_raw = spec.get("sourceRef") or {}
    source = SourceRef(
        str(source_raw.get("kind", "GitRepository")),
        str(source_raw.get("name", "")),
        str(source_raw.get("namespace") or namespace),
    )
    depends_on = tuple(
        TierId(str(dep.get("namespace") or namespace), str(dep.get("name")))
        for dep in spec.get("dependsOn") or []
        if isinstance(dep, dict) and dep.get("name")
    )
    post_build = spec.get("postBuild")
    substitute = {}
    substitute_from: tuple[SubstituteFrom, ...] = ()
    if isinstance(post_build, dict):
        substitute = {str(k): "" if v is None else str(v) for k, v in (post_build.get("substitute") or {}).items()}
        substitute_from = tuple(
            SubstituteFrom(str(s.get("kind", "ConfigMap")), str(s.get("name", "")), bool(s.get("optional", False)))
            for s in post_build.get("substituteFrom") or []
            if isinstance(s, dict)
        )
    common = spec.get("commonMetadata") or {}
    return TierSpec(
        id=tier,
        path=path,
        source=source,
        depends_on=depends_on,
        wait=bool(spec.get("wait", False)),
        prune=bool(spec.get("prune", False)),
        suspend=bool(spec.get("suspend", False)),
        target_namespace=spec.get("targetNamespace") or None,
        name_prefix=spec.get("namePrefix") or None,
        name_suffix=spec.get("nameSuffix") or None,
        common_metadata={
            "labels": dict(common.get("labels") or {}),
            "annotations": dict(common.get("annotations") or {}),
        },
        patches=tuple(p for p in spec.get("patches") or [] if isinstance(p, dict)),
        images=tuple(i for i in spec.get("images") or [] if isinstance(i, dict)),
        components=tuple(str(c) for c in spec.get("components") or []),
        health_checks=_health_checks(spec, namespace),
        has_post_build=isinstance(post_build, dict),
        substitute_always=isinstance(post_build, dict) and post_build.get("substituteStrategy") == "Always",
        substitute=substitute,
        substitute_from=substitute_from,
        decryption=bool(spec.get("decryption")),
        defined_in=defined_in,
        origin=manifest.origin,
    )


def _health_checks(spec: Mapping[str, Any], namespace: str) -> tuple[HealthCheck, ...]:
    checks = [
        HealthCheck(str(h.get("apiVersion", "")), str(h.get("kind", "")), str(h.get("name", "")), str(h.get("namespace") or ""))
        for h in spec.get("healthChecks") or []
        if isinstance(h, dict)
    ]
    # healthCheckExprs cover every object of a kind (CEL), so they count as a wildcard health check.
    checks += [
        HealthCheck(str(h.get("apiVersion", "")), str(h.get("kind", "")), "*", "*")
        for h in spec.get("healthCheckExprs") or []
        if isinstance(h, dict)
    ]
    return tuple(checks)


def entry_tier(path: str, origin: SourceLocation | None = None) -> TierSpec:
    """The synthetic `flux-system` Kustomization that `flux bootstrap` creates for a cluster entry path."""
    return TierSpec(
        id=TierId(DEFAULT_NAMESPACE, DEFAULT_NAMESPACE),
        path=path,
        source=SourceRef("GitRepository", DEFAULT_NAMESPACE, DEFAULT_NAMESPACE),
        prune=True,
        origin=origin,
    )
