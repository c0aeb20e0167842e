"""What the checks read of one tier's objects, summarised once per tier.

A tier's facts are small (identities, locations, the few bodies a check must read) and are cached
under the tier's finish key (bot/pipeline/memo.py `FactsStore`), so checking a commit whose tiers were
finished before loads no object body: a one-tier PR on a 20,000-object repository reads its 199
untouched tiers as facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.engine.render.knowledge import KnowledgeBase, bundle_provides
from bot.engine.core.model import GroupKind, Manifest, ObjectRef, SourceLocation, TierId
from bot.engine.render.rendered import ClusterRender

CRD = GroupKind("apiextensions.k8s.io", "CustomResourceDefinition")
HELM_RELEASE = GroupKind("helm.toolkit.fluxcd.io", "HelmRelease")
OCI_REPOSITORY_KIND = "OCIRepository"
SOURCE_GROUP = "source.toolkit.fluxcd.io"
# The objects a HelmRelease's chart comes from (source-controller's kinds; ExternalArtifact is source-controller's too).
CHART_SOURCE_KINDS = frozenset({"HelmRepository", "GitRepository", "OCIRepository", "HelmChart", "ExternalArtifact", "Bucket"})

POD_TEMPLATE_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
PROVIDER_KINDS = ("Namespace", "StorageClass", "StorageProfile", "ClusterIssuer", "IngressClass", "GatewayClass", "PriorityClass", "RuntimeClass")
FLUX_PREFIX = "kustomize.toolkit.fluxcd.io/"
# Objects kustomize-controller never applies over a live one: skipped by its exclusion selector
# (`reconcile: disabled`, `ssa: Ignore`) or created only when absent (`ssa: IfNotPresent`); a label
# or an annotation, compared case-insensitively (fluxcd/pkg ssa/utils/meta.go AnyInMetadata,
# kustomize-controller KustomizationReconciler.apply).
_NOT_APPLIED_OVER = {"reconcile": ("disabled",), "ssa": ("ignore", "ifnotpresent")}
_CONTROL_KEYS = tuple(FLUX_PREFIX + key for key in (*_NOT_APPLIED_OVER, "prune"))


@dataclass(frozen=True)
class ObjectStub:
    """An object's identity, where it was written and its place in the tier: what a finding about it needs."""

    ref: ObjectRef
    origin: SourceLocation | None
    position: int


@dataclass(frozen=True)
class TierFacts:
    """One tier's objects as the checks and the provider index read them."""

    count: int = 0
    kinds: Mapping[GroupKind, tuple[ObjectStub, ...]] = field(default_factory=dict)  # in render order
    own_crds: frozenset[GroupKind] = frozenset()  # kinds its CRDs define (stage 1 of its own apply)
    crds: tuple[tuple[GroupKind, ObjectRef], ...] = ()  # (kind defined, CRD) for CRDs naming group and kind
    helm_releases: tuple[Manifest, ...] = ()
    # What a HelmRelease's chart is read from (HelmRepository, OCIRepository, GitRepository, HelmChart, …) and
    # each CRD's served versions and scope (trimmed): the release stage reads them without loading the tier.
    chart_sources: tuple[Manifest, ...] = ()
    crd_outlines: tuple[Manifest, ...] = ()
    oci_urls: Mapping[tuple[str, str], str] = field(default_factory=dict)  # OCIRepository (namespace, name) → url
    derived: tuple[tuple[GroupKind, ObjectRef], ...] = ()  # kinds its objects define at run time (XRDs…)
    provider_defs: frozenset[tuple[str, str]] = frozenset()  # cluster-scoped (kind, name) of PROVIDER_KINDS
    provider_uses: Mapping[tuple[str, str, str], tuple[ObjectStub, ...]] = field(default_factory=dict)  # (kind, name, how)
    not_applied_over: frozenset[ObjectRef] = frozenset()  # never applied over a live object (see _NOT_APPLIED_OVER)
    unpruned: frozenset[ObjectRef] = frozenset()  # `kustomize.toolkit.fluxcd.io/prune: disabled`
    packages: tuple[tuple[ObjectRef, str], ...] = ()  # a Crossplane package CR's `spec.package` (which provider it is)
    remote: tuple[str, ...] = ()  # remote resources its build left out (RenderedTier.remote): well-known CRD bundles count


def tier_facts(manifests: Iterable[Manifest], knowledge: KnowledgeBase, remote: tuple[str, ...] = ()) -> TierFacts:
    """Read a tier's objects once into its facts; `remote`: the remote resources its build left out."""
    kinds: dict[GroupKind, list[ObjectStub]] = {}
    own_crds: set[GroupKind] = set()
    crds: list[tuple[GroupKind, ObjectRef]] = []
    helm_releases: list[Manifest] = []
    chart_sources: list[Manifest] = []
    crd_outlines: list[Manifest] = []
    oci_urls: dict[tuple[str, str], str] = {}
    derived: list[tuple[GroupKind, ObjectRef]] = []
    provider_defs: set[tuple[str, str]] = set()
    provider_uses: dict[tuple[str, str, str], list[ObjectStub]] = {}
    not_applied_over: set[ObjectRef] = set()
    unpruned: set[ObjectRef] = set()
    packages: list[tuple[ObjectRef, str]] = []
    count = 0
    for position, manifest in enumerate(manifests):
        count += 1
        ref = manifest.ref
        gk = ref.group_kind
        stub = ObjectStub(ref, manifest.origin, position)
        kinds.setdefault(gk, []).append(stub)
        if gk == CRD:
            spec = manifest.body.get("spec") or {}
            own_crds.add(GroupKind(str(spec.get("group")), str((spec.get("names") or {}).get("kind"))))
            defined = crd_kind(manifest.body)
            if defined:
                crds.append((defined, ref))
            crd_outlines.append(_crd_outline(manifest))
        elif gk == HELM_RELEASE:
            helm_releases.append(manifest)
        elif ref.kind == OCI_REPOSITORY_KIND:
            oci_urls[(ref.namespace, ref.name)] = str((manifest.body.get("spec") or {}).get("url", ""))
        if ref.kind in CHART_SOURCE_KINDS and ref.group == SOURCE_GROUP:
            chart_sources.append(manifest)
        derived.extend((kind, ref) for kind in sorted(knowledge.derived_kinds(manifest.body)))
        if ref.kind in PROVIDER_KINDS and not ref.namespace:
            provider_defs.add((ref.kind, ref.name))
        for use in required_providers(manifest):
            provider_uses.setdefault(use, []).append(stub)
        if _may_be_controlled(manifest):
            if any(flux_control(manifest, key, values) for key, values in _NOT_APPLIED_OVER.items()):
                not_applied_over.add(ref)
            if flux_control(manifest, "prune", ("disabled",)):
                unpruned.add(ref)
        if ref.group == "pkg.crossplane.io" and isinstance(package := (manifest.body.get("spec") or {}).get("package"), str):
            packages.append((ref, package))
    for url in remote:  # a well-known CRD bundle: stage 1 of the same apply creates the kinds it defines
        provides = bundle_provides(url, knowledge)
        if provides is not None:
            own_crds.update(gk for gk in kinds if provides(gk))
    return TierFacts(
        remote=tuple(remote),
        count=count,
        kinds={gk: tuple(stubs) for gk, stubs in kinds.items()},
        own_crds=frozenset(own_crds),
        crds=tuple(crds),
        helm_releases=tuple(helm_releases),
        chart_sources=tuple(chart_sources),
        crd_outlines=tuple(crd_outlines),
        oci_urls=oci_urls,
        derived=tuple(derived),
        provider_defs=frozenset(provider_defs),
        provider_uses={use: tuple(stubs) for use, stubs in provider_uses.items()},
        not_applied_over=frozenset(not_applied_over),
        unpruned=frozenset(unpruned),
        packages=tuple(packages),
    )


def _crd_outline(manifest: Manifest) -> Manifest:
    """A CRD without its schemas: group, names, scope and each version's name and `served` (what Capabilities and scopes need)."""
    spec = manifest.body.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    versions = spec.get("versions")
    outline_versions = [
        {"name": v.get("name"), "served": v.get("served", True)} for v in (versions if isinstance(versions, list) else []) if isinstance(v, Mapping)
    ]
    body = {
        "apiVersion": manifest.ref.api_version, "kind": manifest.ref.kind, "metadata": {"name": manifest.ref.name},
        "spec": {"group": spec.get("group"), "names": spec.get("names"), "scope": spec.get("scope"), "versions": outline_versions,
                 **({"version": spec["version"]} if "version" in spec else {})},
    }
    return Manifest(manifest.ref, body, manifest.origin)


def _may_be_controlled(manifest: Manifest) -> bool:
    """Whether the object carries any label or annotation `tier_facts` reads with `flux_control` (few do)."""
    return any(isinstance(meta, Mapping) and any(key in meta for key in _CONTROL_KEYS) for meta in (manifest.labels, manifest.annotations))


def flux_control(manifest: Manifest, key: str, values: tuple[str, ...]) -> bool:
    """Whether the label or the annotation `kustomize.toolkit.fluxcd.io/<key>` is one of `values` (any case)."""
    for meta in (manifest.labels, manifest.annotations):
        value = meta.get(FLUX_PREFIX + key) if isinstance(meta, Mapping) else None
        if isinstance(value, str) and value.lower() in values:
            return True
    return False


def facts_of_render(render: ClusterRender, knowledge: KnowledgeBase) -> dict[TierId, TierFacts]:
    """The facts of every tier of a cluster, in the render's order (bot/pipeline/memo.py `FactsStore` remembers them)."""
    return {tid: tier_facts(tier.manifests, knowledge, tier.remote) for tid, tier in render.tiers.items()}


def crd_kind(body: Mapping[str, Any]) -> GroupKind | None:
    """The kind a CRD defines, when it names both group and kind."""
    spec = body.get("spec") or {}
    group = spec.get("group")
    kind = (spec.get("names") or {}).get("kind")
    return GroupKind(str(group), str(kind)) if group and kind else None


def _get(body: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(body, Mapping):
            return None
        body = body.get(key)
    return body


def _storage_class(dv_spec: Any) -> str | None:
    return _get(dv_spec, "storage", "storageClassName") or _get(dv_spec, "pvc", "storageClassName")


def required_providers(manifest: Manifest) -> Iterator[tuple[str, str, str]]:
    """(provider kind, provider name, how it is referenced) for each cluster-scoped thing the object needs."""
    body, kind, group = manifest.body, manifest.ref.kind, manifest.ref.group
    if manifest.ref.namespace and kind != "Namespace":
        yield "Namespace", manifest.ref.namespace, "its namespace"
    if kind == "PersistentVolumeClaim" and group == "":
        name = _get(body, "spec", "storageClassName")
        if name:
            yield "StorageClass", name, "storageClassName"
    if kind == "StatefulSet":
        for template in _get(body, "spec", "volumeClaimTemplates") or []:
            name = _get(template, "spec", "storageClassName")
            if name:
                yield "StorageClass", name, "volumeClaimTemplates storageClassName"
    if kind == "DataVolume" and group == "cdi.kubevirt.io":
        name = _storage_class(body.get("spec"))
        if name:
            yield "StorageClass", name, "storageClassName"
            # CDI reads access/volume modes from the StorageProfile named after the class (seed incident).
            yield "StorageProfile", name, "storageClassName (its StorageProfile)"
    if kind == "VirtualMachine" and group == "kubevirt.io":
        for template in _get(body, "spec", "dataVolumeTemplates") or []:
            name = _storage_class(_get(template, "spec"))
            if name:
                yield "StorageClass", name, "dataVolumeTemplates storageClassName"
                yield "StorageProfile", name, "dataVolumeTemplates storageClassName (its StorageProfile)"
    if group == "cert-manager.io" and kind == "Certificate":
        issuer = _get(body, "spec", "issuerRef") or {}
        if issuer.get("kind") == "ClusterIssuer" and issuer.get("name"):
            yield "ClusterIssuer", issuer["name"], "issuerRef"
    annotations = manifest.annotations
    if kind in ("Ingress", "Gateway", "HTTPRoute") and annotations.get("cert-manager.io/cluster-issuer"):
        yield "ClusterIssuer", annotations["cert-manager.io/cluster-issuer"], "cert-manager.io/cluster-issuer annotation"
    if kind == "Ingress" and group == "networking.k8s.io":
        name = _get(body, "spec", "ingressClassName")
        if name:
            yield "IngressClass", name, "ingressClassName"
    if kind == "Gateway" and group == "gateway.networking.k8s.io":
        name = _get(body, "spec", "gatewayClassName")
        if name:
            yield "GatewayClass", name, "gatewayClassName"
    pod_path = POD_TEMPLATE_PATHS.get(kind) if group in ("", "apps", "batch") else None
    if pod_path:
        pod = _get(body, *pod_path) or {}
        if pod.get("priorityClassName"):
            yield "PriorityClass", pod["priorityClassName"], "priorityClassName"
        if pod.get("runtimeClassName"):
            yield "RuntimeClass", pod["runtimeClassName"], "runtimeClassName"
