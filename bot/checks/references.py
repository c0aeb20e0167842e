"""missing-provider: an object names a cluster-scoped provider that git defines in a tier not applied before it."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterator, Mapping

from bot.checks import CheckContext, check, name_list, plural
from bot.model import Finding, Manifest, Severity, TierId

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


@check(("missing-provider", Severity.WARNING, "an object names a cluster-scoped provider (StorageClass, ClusterIssuer, IngressClass, GatewayClass, PriorityClass, RuntimeClass, its Namespace) that git defines in a tier this one does not depend on"))
def missing_provider(ctx: CheckContext) -> Iterator[Finding]:
    defined: dict[tuple[str, str], set[TierId]] = defaultdict(set)
    for tier, manifest in ctx.render.manifests():
        if manifest.ref.kind in PROVIDER_KINDS and not manifest.ref.namespace:
            defined[(manifest.ref.kind, manifest.ref.name)].add(tier)
    for tier_id, tier in ctx.render.tiers.items():
        users: dict[tuple[str, str, str], list[Manifest]] = defaultdict(list)
        for manifest in tier.manifests:
            for kind, name, how in required_providers(manifest):
                owners = defined.get((kind, name))
                if not owners or tier_id in owners or any(ctx.before(tier_id, o) for o in owners):
                    continue  # not in git (made elsewhere), same tier (staged apply), or applied before
                users[(kind, name, how)].append(manifest)
        for (kind, name, how), objects in sorted(users.items()):
            owners = name_list(str(o) for o in defined[(kind, name)])
            first = objects[0]
            yield Finding(
                "missing-provider",
                Severity.WARNING,
                f"{plural(len(objects), 'object')} ({name_list(str(m.ref) for m in objects)}) use {kind} {name} "
                f"({how}), which {owners} defines; {tier_id} does not depend on it, so on a cold cluster they can "
                f"be applied before it exists. Add dependsOn: {owners}",
                kustomization=tier_id,
                object=first.ref,
                location=ctx.locate(first),
            )
