"""Which kinds are cluster-scoped: the built-in APIs' table, and CRDs by their `spec.scope` (pure)."""

from __future__ import annotations

from typing import Callable, Iterable

from bot.engine.core.model import GroupKind, Manifest

# Cluster-scoped kinds of the built-in APIs (`kubectl api-resources --namespaced=false` on Kubernetes 1.34).
BUILTIN_CLUSTER_SCOPED = frozenset({
    GroupKind("", "Namespace"), GroupKind("", "Node"), GroupKind("", "PersistentVolume"), GroupKind("", "ComponentStatus"),
    GroupKind("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    GroupKind("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    GroupKind("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    GroupKind("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    GroupKind("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    GroupKind("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
    GroupKind("apiextensions.k8s.io", "CustomResourceDefinition"),
    GroupKind("apiregistration.k8s.io", "APIService"),
    GroupKind("certificates.k8s.io", "CertificateSigningRequest"),
    GroupKind("certificates.k8s.io", "ClusterTrustBundle"),
    GroupKind("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    GroupKind("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    GroupKind("networking.k8s.io", "IngressClass"), GroupKind("networking.k8s.io", "IPAddress"), GroupKind("networking.k8s.io", "ServiceCIDR"),
    GroupKind("node.k8s.io", "RuntimeClass"),
    GroupKind("rbac.authorization.k8s.io", "ClusterRole"), GroupKind("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    GroupKind("scheduling.k8s.io", "PriorityClass"),
    GroupKind("storage.k8s.io", "CSIDriver"), GroupKind("storage.k8s.io", "CSINode"), GroupKind("storage.k8s.io", "StorageClass"),
    GroupKind("storage.k8s.io", "VolumeAttachment"), GroupKind("storage.k8s.io", "VolumeAttributesClass"),
    GroupKind("resource.k8s.io", "DeviceClass"), GroupKind("resource.k8s.io", "ResourceSlice"),
})


def cluster_scoped_kinds(crds: Iterable[Manifest]) -> Callable[[GroupKind], bool]:
    """Whether a kind is cluster-scoped: built in, or a CRD among `crds` with `scope: Cluster`."""
    cluster = set(BUILTIN_CLUSTER_SCOPED)
    for crd in crds:
        spec = crd.body.get("spec")
        if not isinstance(spec, dict) or spec.get("scope") != "Cluster":
            continue
        names = spec.get("names")
        if isinstance(spec.get("group"), str) and isinstance(names, dict) and isinstance(names.get("kind"), str):
            cluster.add(GroupKind(spec["group"], names["kind"]))
    return cluster.__contains__
