"""Tier facts: what each object contributes, and the cache that lets a check skip loading objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.adapters.cache import BuildCache
from bot.engine.core.errors import InputError
from bot.engine.render.facts import TierFacts, tier_facts
from bot.engine.render.knowledge import default_knowledge
from bot.engine.core.model import GroupKind, Manifest, ObjectRef, SourceLocation
from bot.engine.render.rendered import RenderedTier
from bot.pipeline.memo import FactsStore, StoredManifests
from bot.engine.render.flux import tier_spec
from tests.fluxrepo import crd, ks, obj


def manifest(body: dict[str, Any], file: str = "a/objects.yaml") -> Manifest:
    meta = body["metadata"]
    ref = ObjectRef(body["apiVersion"], body["kind"], meta.get("namespace", ""), meta["name"])
    return Manifest(ref, body, SourceLocation(file))


XRD = obj(
    "apiextensions.crossplane.io/v1",
    "CompositeResourceDefinition",
    "xdatabases.example.org",
    spec={"group": "example.org", "names": {"kind": "XDatabase"}, "claimNames": {"kind": "Database"}},
)
HELM_RELEASE = obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", "cert-manager", "cert-manager", spec={"chart": {"spec": {"chart": "cert-manager"}}})
OCI = obj("source.toolkit.fluxcd.io/v1", "OCIRepository", "charts", "flux-system", spec={"url": "oci://ghcr.io/x/charts/app"})
PVC = obj("v1", "PersistentVolumeClaim", "data", "apps", spec={"storageClassName": "fast"})
STORAGE_CLASS = obj("storage.k8s.io/v1", "StorageClass", "fast")
NAMESPACE = obj("v1", "Namespace", "apps")


@pytest.mark.parametrize(
    "body, field, expected",
    [
        pytest.param(crd("example.com", "Widget", "widgets"), "own_crds", frozenset({GroupKind("example.com", "Widget")}), id="crd-own"),
        pytest.param(crd("example.com", "Widget", "widgets"), "crds", ((GroupKind("example.com", "Widget"), ObjectRef("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets.example.com")),), id="crd-provides"),
        pytest.param(obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "broken", spec={"group": "example.com"}), "crds", (), id="crd-without-kind-provides-nothing"),
        pytest.param(HELM_RELEASE, "helm_releases", (manifest(HELM_RELEASE),), id="helm-release-kept-whole"),
        pytest.param(OCI, "oci_urls", {("flux-system", "charts"): "oci://ghcr.io/x/charts/app"}, id="oci-url"),
        pytest.param(
            XRD, "derived",
            tuple((gk, ObjectRef(XRD["apiVersion"], XRD["kind"], "", XRD["metadata"]["name"])) for gk in sorted({GroupKind("example.org", "XDatabase"), GroupKind("example.org", "Database")})),
            id="xrd-derives-kinds",
        ),
        pytest.param(STORAGE_CLASS, "provider_defs", frozenset({("StorageClass", "fast")}), id="cluster-scoped-provider"),
        pytest.param(obj("v1", "ConfigMap", "Namespace", "apps"), "provider_defs", frozenset(), id="namespaced-object-provides-nothing"),
        pytest.param(NAMESPACE, "provider_uses", {}, id="namespace-needs-nothing"),
    ],
)
def test_what_one_object_contributes(body: dict[str, Any], field: str, expected: object) -> None:
    assert getattr(tier_facts([manifest(body)], default_knowledge()), field) == expected


def test_uses_and_kinds_keep_render_order() -> None:
    manifests = [manifest(b) for b in (NAMESPACE, PVC, obj("v1", "PersistentVolumeClaim", "logs", "apps", spec={"storageClassName": "fast"}))]
    facts = tier_facts(manifests, default_knowledge())
    assert facts.count == 3
    assert [(s.ref.name, s.position, s.origin) for s in facts.kinds[GroupKind("", "PersistentVolumeClaim")]] == [
        ("data", 1, SourceLocation("a/objects.yaml")),
        ("logs", 2, SourceLocation("a/objects.yaml")),
    ]
    assert {use: [s.ref.name for s in stubs] for use, stubs in facts.provider_uses.items()} == {
        ("Namespace", "apps", "its namespace"): ["data", "logs"],
        ("StorageClass", "fast", "storageClassName"): ["data", "logs"],
    }


def _tier(manifests: Any, finish_key: str | None) -> RenderedTier:
    spec = tier_spec(manifest(ks("a", "./a")), None)
    return RenderedTier(spec=spec, manifests=manifests, rendered=True, finish_key=finish_key)


def test_cached_facts_need_no_object(tmp_path: Path) -> None:
    """Facts stored under a finish key are read back without unpickling the tier's objects."""
    cache = BuildCache(tmp_path)
    manifests = (manifest(NAMESPACE), manifest(PVC))
    fresh = FactsStore(default_knowledge(), cache).of(_tier(manifests, "k1"))
    # The objects were never stored: loading them would raise, so an equal answer came from the facts entry.
    stored = StoredManifests(cache, "k1", len(manifests))
    again = FactsStore(default_knowledge(), cache).of(_tier(stored, "k1"))
    assert again == fresh and isinstance(again, TierFacts)
    with pytest.raises(InputError, match="disappeared"):
        list(stored)


def test_unkeyed_tier_is_read_once_per_object(tmp_path: Path) -> None:
    store = FactsStore(default_knowledge(), BuildCache(tmp_path))
    tier = _tier((manifest(PVC),), None)
    assert store.of(tier) is store.of(tier)
    assert list(tmp_path.rglob("*.pickle")) == []  # nothing to key it by: never cached


def test_objects_gone_mid_run_fail_that_run_and_heal_the_next(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    cache.put("finished-k1-objects", (manifest(PVC),))
    cache.put("finished-k1", "summary")
    stored = StoredManifests(cache, "k1", 1)
    cache.discard("finished-k1-objects")
    with pytest.raises(InputError, match="run again"):
        list(stored)
    assert not cache.contains("finished-k1")  # the next run finishes the tier again


def test_a_known_remote_bundle_is_stage_one_of_its_own_tier() -> None:
    """A tier whose build names cert-manager's CRD asset applies its ClusterIssuer after those CRDs (same apply)."""
    issuer = Manifest(ObjectRef("cert-manager.io/v1", "ClusterIssuer", "", "le"), {"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": {"name": "le"}})
    url = "https://github.com/cert-manager/cert-manager/releases/download/v1.8.2/cert-manager.crds.yaml"
    facts = tier_facts([issuer], default_knowledge(), (url,))
    assert facts.remote == (url,) and GroupKind("cert-manager.io", "ClusterIssuer") in facts.own_crds
    unknown = tier_facts([issuer], default_knowledge(), ("https://example.com/crds.yaml",))
    assert unknown.own_crds == frozenset()
