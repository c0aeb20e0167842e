"""Read Flux Kustomization objects into TierSpecs, as kustomize-controller interprets their fields."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from bot.engine.core.model import HealthCheck, Manifest, SourceLocation, SourceRef, SubstituteFrom, TierId, TierSpec
from bot.engine.core.tree import normalise_repo_path

KUSTOMIZATION_GROUP = "kustomize.toolkit.fluxcd.io"
FLUX_INSTANCE_GROUP = "fluxcd.controlplane.io"
HELM_RELEASE_GROUP = "helm.toolkit.fluxcd.io"
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


class TierSpecShapeError(TierSpecError):
    """A Flux Kustomization with a field of the wrong type (the API server rejects it)."""


def tier_spec(manifest: Manifest, defined_in: TierId | None) -> TierSpec:
    """Interpret one Flux Kustomization object (namespace defaults follow the controller)."""
    try:
        return _tier_spec(manifest, defined_in)
    except (AttributeError, TypeError) as exc:  # a field of the wrong shape: the API server would reject it
        raise TierSpecShapeError(
            f"{manifest.ref.namespace or DEFAULT_NAMESPACE}/{manifest.ref.name}: spec has a field of the wrong type ({exc}); the API server rejects it"
        ) from None


def _tier_spec(manifest: Manifest, defined_in: TierId | None) -> TierSpec:
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
        ignore_missing_components=spec.get("ignoreMissingComponents") is True,
        health_checks=_health_checks(spec, namespace),
        has_post_build=isinstance(post_build, dict),
        substitute_always=isinstance(post_build, dict) and post_build.get("substituteStrategy") == "Always",
        substitute=substitute,
        substitute_from=substitute_from,
        decryption=bool(spec.get("decryption")),
        defined_in=defined_in,
        origin=manifest.origin,
        kube_config=_kube_config(spec.get("kubeConfig"), namespace),
        interval=duration_seconds(spec.get("interval")) or 600,
        retry_interval=duration_seconds(spec.get("retryInterval")),
    )


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


def duration_seconds(raw: Any) -> int | None:
    """A Go duration (`10m`, `1h30m`, `10m0s`) in whole seconds; None when absent or unreadable."""
    if not isinstance(raw, str) or not raw or _DURATION.sub("", raw):
        return None
    return int(sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(raw)))


def _kube_config(raw: Any, namespace: str) -> str | None:
    """`Secret/ns/name` (or ConfigMap) of `spec.kubeConfig`: the cluster the Kustomization applies to.

    Both references are local to the Kustomization's namespace (kustomize-controller api/v1
    KubeConfigReference: a SecretKeyReference or a LocalObjectReference).
    """
    if not raw:
        return None
    for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
        ref = raw.get(key) if isinstance(raw, dict) else None
        if isinstance(ref, dict) and ref.get("name"):
            return f"{kind}/{namespace}/{ref['name']}"
    return "kubeConfig"


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


@dataclass(frozen=True)
class OperatorSync:
    """The sync Kustomization the Flux Operator generates for a FluxInstance, and the patches that reach it."""

    kustomization: Mapping[str, Any]
    patches: tuple[Mapping[str, Any], ...] = ()


def is_flux_instance_release(manifest: Manifest) -> bool:
    """A HelmRelease of the flux-instance chart whose values come (partly) from `valuesFrom`: its `instance.sync`
    may be in a ConfigMap (controlplaneio-fluxcd/charts flux-instance; the chart's own name, or an OCIRepository
    `chartRef` named after it)."""
    if manifest.ref.kind != "HelmRelease" or manifest.ref.group != HELM_RELEASE_GROUP:
        return False
    spec = manifest.body.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("valuesFrom"), list) or not spec["valuesFrom"]:
        return False
    chart = spec.get("chart")
    chart_spec = chart.get("spec") if isinstance(chart, dict) else None
    name = chart_spec.get("chart") if isinstance(chart_spec, dict) else None
    if name is None and isinstance(spec.get("chartRef"), dict):
        name = spec["chartRef"].get("name")
    return isinstance(name, str) and "flux-instance" in name


def operator_sync(manifest: Manifest, values: Mapping[str, Any] | None = None) -> OperatorSync | None:
    """The sync Kustomization of a FluxInstance, as an object or as the flux-instance chart's HelmRelease values.

    The operator names the source and the Kustomization `sync.name`, else after the FluxInstance's
    namespace, and renders the Kustomization with `path: sync.path`, `prune: true` and nothing else
    (flux-operator internal/builder/templates.go `syncTmpl`; `sync.interval` is the source's). It
    builds it in one kustomization with the controllers, so `kustomize.patches` that target a
    Kustomization patch it (e.g. the documented `spec.decryption` patch); the rest patch the controllers.
    The flux-instance chart templates the FluxInstance into the release namespace, with `sync` only
    when `instance.sync.url` is set (controlplaneio-fluxcd/charts flux-instance templates/instance.yaml).
    `values`: a HelmRelease's composed values when they come from `valuesFrom` (see `discovery.operator_entry`).
    """
    body, ref = manifest.body, manifest.ref
    spec = body.get("spec")
    if not isinstance(spec, dict):
        return None
    if ref.kind == "FluxInstance" and ref.group == FLUX_INSTANCE_GROUP:
        namespace = ref.namespace or DEFAULT_NAMESPACE
        sync, kustomize = spec.get("sync"), spec.get("kustomize")
    elif ref.kind == "HelmRelease" and ref.group == HELM_RELEASE_GROUP:
        values = values if values is not None else (spec["values"] if isinstance(spec.get("values"), dict) else None)
        instance = values.get("instance") if isinstance(values, dict) else None
        if not isinstance(instance, dict):
            return None
        namespace = str(spec.get("targetNamespace") or ref.namespace or DEFAULT_NAMESPACE)
        sync, kustomize = instance.get("sync"), instance.get("kustomize")
        if not isinstance(sync, dict) or not sync.get("url"):
            return None
    else:
        return None
    if not isinstance(sync, dict) or not isinstance(sync.get("path"), str):
        return None
    name = str(sync.get("name") or namespace)
    kustomization = {
        "apiVersion": f"{KUSTOMIZATION_GROUP}/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "interval": "10m0s",
            "path": sync["path"],
            "prune": True,
            "sourceRef": {"kind": str(sync.get("kind") or "GitRepository"), "name": name},
        },
    }
    raw_patches = kustomize.get("patches") if isinstance(kustomize, dict) else None
    patches = tuple(
        {k: p[k] for k in ("patch", "target") if k in p}  # inline only: a `path` would read a file we never vetted
        for p in (raw_patches if isinstance(raw_patches, list) else [])
        if isinstance(p, dict) and isinstance(p.get("patch"), str) and _may_patch_kustomization(p, name)
    )
    return OperatorSync(kustomization, patches)


def _may_patch_kustomization(patch: Mapping[str, Any], name: str) -> bool:
    """Whether a FluxInstance patch can select the sync Kustomization (kustomize's anchored regex selectors)."""
    target = patch.get("target")
    if isinstance(target, dict):
        return all(
            _selects(target.get(key), value)
            for key, value in (("kind", "Kustomization"), ("group", KUSTOMIZATION_GROUP), ("name", name))
        )
    # No target: a strategic merge patch selects by its own kind and name.
    head = re.search(r"^kind:\s*(\S+)", patch["patch"], re.MULTILINE)
    return head is not None and head.group(1) == "Kustomization"


def _selects(selector: Any, value: str) -> bool:
    if selector in (None, ""):
        return True
    try:
        return re.fullmatch(str(selector), value) is not None
    except re.error:
        return False
