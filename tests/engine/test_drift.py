"""Drift reports (bot/engine/livestate/drift.py, bot/pipeline/drift.py): the example repo rendered once, a fake cluster that has
converged to it (every object applied with Flux's labels, every tier Ready with its inventory), then one
perturbation per kind of drift — read through the real kubernetes-asyncio client, at a fixed clock."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from bot.service.cli import main
from bot.engine.livestate.drift import (
    DriftKind,
    DriftReport,
    compare_fields,
    format_duration,
    format_markdown,
    format_text,
    report_to_json,
)
from bot.pipeline.drift import RenderedCluster, read_drift, render_cluster
from bot.engine.render.knowledge import default_knowledge
from bot.adapters.kube import ClusterAccess
from bot.engine.livestate.live import LiveBody, inventory_id
from bot.engine.core.model import GroupKind, TierId
from tests.fakes.kube import FakeKube, Resource, crd as live_crd, git_repository, kustomization, owned_by
from tests.fluxrepo import dump, flux_repo, ks, kustomization as kfile, obj, write_tree
from tests.gitrepo import EXAMPLE, pre_fix
from tests.golden import assert_golden
from tests.adapters.test_kube import closed_port

NS = "flux-system"
R1 = "main@sha1:" + "1" * 40
R2 = "main@sha1:" + "2" * 40
NOW = datetime(2026, 9, 6, 20, 36, 42, tzinfo=timezone.utc)
INCIDENT = "2026-09-06T08:36:42Z"  # the seed: 12 hours before NOW
APPLIED = "2026-09-05T08:00:00Z"


def clock() -> datetime:
    return NOW


def tid(name: str) -> TierId:
    return TierId(NS, name)


def at(hours_before_now: float) -> str:
    return (NOW - timedelta(hours=hours_before_now)).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------- a converged cluster


_PLURALS = {"Ingress": "ingresses", "StorageClass": "storageclasses", "NetworkPolicy": "networkpolicies"}


def _plural(kind: str) -> str:
    return _PLURALS.get(kind, kind.lower() + "s")


def serve_kinds(fake: FakeKube, rendered: RenderedCluster) -> None:
    """Every kind the render uses is served: built-ins by the table, CRDs in git by themselves, the others
    (charts, operators at run time) by a CRD an operator made."""
    knowledge = default_knowledge()
    git_crds = {GroupKind(m.body["spec"]["group"], m.body["spec"]["names"]["kind"]) for _, m in rendered.render.manifests() if m.ref.kind == "CustomResourceDefinition"}
    for _, manifest in rendered.render.manifests():
        ref = manifest.ref
        gk = ref.group_kind
        group, _, version = ref.api_version.rpartition("/")
        if any(r.group == group and r.kind == ref.kind for r in fake.resources) or gk in git_crds:
            continue
        if knowledge.is_builtin(gk) or knowledge.is_builtin_group(group) or knowledge.is_preinstalled(gk):
            fake.resources.append(Resource(group, version, ref.kind, _plural(ref.kind), bool(ref.namespace)))
        else:
            fake.add(live_crd(group, ref.kind, _plural(ref.kind), scope="Namespaced" if ref.namespace else "Cluster", version=version,
                              labels={"operator.example.io": ""}))


def live_kustomization(body: dict[str, Any], revision: str, inventory: list[str]) -> dict[str, Any]:
    """A Flux Kustomization as kustomize-controller leaves it after a successful apply."""
    out = copy.deepcopy(body)
    out["metadata"]["generation"] = 1
    out["status"] = {
        "observedGeneration": 1,
        "lastAppliedRevision": revision,
        "lastAttemptedRevision": revision,
        "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": f"Applied revision: {revision}", "lastTransitionTime": APPLIED}],
        "inventory": {"entries": [{"id": i, "v": "v1"} for i in inventory]},
    }
    return out


def converge(fake: FakeKube, rendered: RenderedCluster, revision: str = R1, source_updated: str = APPLIED) -> FakeKube:
    """The cluster after Flux applied `revision` everywhere: objects with their tier's labels, tiers Ready."""
    source = git_repository(revision=revision)
    source["status"]["artifact"]["lastUpdateTime"] = source_updated
    fake.add(source)
    render = rendered.render
    inventories = {t: [inventory_id(m.ref) for m in tier.manifests] for t, tier in render.tiers.items()}
    ordered = sorted(render.manifests(), key=lambda tm: tm[1].ref.kind != "CustomResourceDefinition")
    for tier, manifest in ordered:
        if manifest.ref.kind == "CustomResourceDefinition":
            body = copy.deepcopy(dict(manifest.body))
            body["metadata"].setdefault("labels", {}).update(owned_by(tier.name, tier.namespace))
            fake.add(body)
    serve_kinds(fake, rendered)
    for tier, manifest in ordered:
        if manifest.ref.kind == "CustomResourceDefinition":
            continue
        body = copy.deepcopy(dict(manifest.body))
        body["metadata"].setdefault("labels", {}).update(owned_by(tier.name, tier.namespace))
        body["metadata"]["creationTimestamp"] = APPLIED
        if manifest.ref.group_kind == GroupKind("kustomize.toolkit.fluxcd.io", "Kustomization"):
            body = live_kustomization(body, revision, inventories.get(TierId(manifest.ref.namespace, manifest.ref.name), []))
        fake.add(body)
    entry = [t for t, tier in render.tiers.items() if tier.spec.defined_in is None]
    for t in entry:
        fake.add(live_kustomization(kustomization(t.name, namespace=t.namespace, revision=revision), revision, inventories[t]))
    return fake


def find(fake: FakeKube, kind: str, name: str, namespace: str = "") -> dict[str, Any]:
    """The stored live object (mutable)."""
    for (_, _, ns, n), body in fake.objects.items():
        if body.get("kind") == kind and n == name and (not namespace or ns == namespace):
            return body
    raise KeyError(f"{kind} {namespace}/{name}")


def ready(fake: FakeKube, tier: str, status: str, reason: str, message: str, since: str) -> None:
    body = find(fake, "Kustomization", tier, NS)
    body["status"]["conditions"] = [{"type": "Ready", "status": status, "reason": reason, "message": message, "lastTransitionTime": since}]


def inventory(fake: FakeKube, tier: str) -> list[dict[str, str]]:
    return find(fake, "Kustomization", tier, NS)["status"]["inventory"]["entries"]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> RenderedCluster:
    """prod of the example (after the CDI fix), rendered once for the module."""
    return render_cluster(EXAMPLE, "prod", cache_dir=tmp_path_factory.mktemp("cache"))


async def drift(fake: FakeKube, rendered: RenderedCluster, tmp_path: Path, **kw: Any) -> DriftReport:
    async with fake:
        access = ClusterAccess(kubeconfig=fake.kubeconfig(tmp_path / "kubeconfig", context="prod-admin"), timeout=5)
        return await read_drift(rendered, access, now=clock, **kw)


def summary(report: DriftReport) -> list[tuple[str, str | None, str | None]]:
    return [(i.kind.value, i.tier.name if i.tier else None, str(i.object) if i.object else None) for i in report.items]


# --------------------------------------------------------------------------------------------- the table


def _remove_tier(fake: FakeKube) -> None:
    fake.remove("kustomize.toolkit.fluxcd.io/v1", "Kustomization", "apps-vms", NS)


def _suspend(fake: FakeKube) -> None:
    find(fake, "Kustomization", "apps", NS)["spec"]["suspend"] = True


def _not_ready(fake: FakeKube) -> None:
    ready(fake, "platform-config", "False", "HealthCheckFailed", "timeout waiting for: [CDI/cdi status: 'InProgress']", at(2))


def _stuck(fake: FakeKube) -> None:
    ready(fake, "apps", "False", "DependencyNotReady", "dependency 'flux-system/platform-config' is not ready", INCIDENT)


def _waiting_briefly(fake: FakeKube) -> None:
    ready(fake, "apps", "False", "DependencyNotReady", "dependency 'flux-system/platform-config' is not ready", at(0.1))


def _reconciling_briefly(fake: FakeKube) -> None:
    ready(fake, "apps", "Unknown", "Progressing", "Reconciliation in progress", at(0.1))


def _reconciling_long(fake: FakeKube) -> None:
    ready(fake, "apps", "Unknown", "Progressing", "Running health checks", at(3))


def _behind(updated: str) -> Callable[[FakeKube], None]:
    def mutate(fake: FakeKube) -> None:
        source = find(fake, "GitRepository", "flux-system", NS)
        source["status"]["artifact"].update(revision=R2, lastUpdateTime=updated)
        for (_, plural, _, name), body in fake.objects.items():
            if plural == "kustomizations" and name != "apps":
                body["status"]["lastAppliedRevision"] = body["status"]["lastAttemptedRevision"] = R2
    return mutate


def _not_in_inventory(fake: FakeKube) -> None:
    entries = inventory(fake, "apps")
    entries[:] = [e for e in entries if e["id"] != "whoami_whoami_apps_Deployment"]


def _stale_inventory(fake: FakeKube) -> None:
    inventory(fake, "apps").append({"id": "whoami_old-settings__ConfigMap", "v": "v1"})


def _deleted(fake: FakeKube) -> None:
    fake.remove("apps/v1", "Deployment", "whoami", "whoami")


def _wrong_owner(fake: FakeKube) -> None:
    find(fake, "Service", "whoami", "whoami")["metadata"]["labels"].update(owned_by("apps-vms"))


def _recreated(fake: FakeKube) -> None:
    """CDI recreated the profile after a prune: spec {}, status inferred, no Flux labels (the seed, §8)."""
    body = find(fake, "StorageProfile", "longhorn-vm")
    body["metadata"] = {"name": "longhorn-vm", "labels": {"app": "containerized-data-importer", "cdi.kubevirt.io": ""}, "creationTimestamp": at(1.5)}
    body["spec"] = {}
    body["status"] = {"claimPropertySets": [{"accessModes": ["ReadWriteOnce"], "volumeMode": "Block"}], "cloneStrategy": "snapshot"}


def _field_changed(fake: FakeKube) -> None:
    find(fake, "Deployment", "whoami", "whoami")["spec"]["replicas"] = 5


def _controller_defaults(fake: FakeKube) -> None:
    """What the API server and controllers add or normalise: not drift."""
    deployment = find(fake, "Deployment", "whoami", "whoami")
    deployment["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["terminationMessagePath"] = "/dev/termination-log"
    container["resources"]["requests"]["cpu"] = "0.005"  # 5m, normalised
    deployment["status"] = {"replicas": 2, "readyReplicas": 2}
    deployment["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "3"}
    service = find(fake, "Service", "whoami", "whoami")
    service["spec"].update(clusterIP="10.43.0.10", type="ClusterIP")
    service["spec"]["ports"][0]["protocol"] = "TCP"
    profile = find(fake, "StorageProfile", "longhorn-vm")
    profile["status"] = {"storageClass": "longhorn-vm"}


def _crd_gone(fake: FakeKube) -> None:
    fake.remove("apiextensions.k8s.io/v1", "CustomResourceDefinition", "storageprofiles.cdi.kubevirt.io")
    fake.resources = [r for r in fake.resources if r.kind != "StorageProfile"]
    for name in ("longhorn-vm", "longhorn-static"):
        fake.objects.pop(("cdi.kubevirt.io", "storageprofiles", "", name), None)


CASES: list[tuple[str, Callable[[FakeKube], None], list[tuple[str, str | None, str | None]], list[str]]] = [
    ("converged", lambda fake: None, [], []),
    ("tier-missing", _remove_tier, [("tier-missing", "apps-vms", None)], ["git defines it", "`flux get ks apps-vms -n flux-system`", "none of its 3 objects"]),
    ("tier-suspended", _suspend, [("tier-suspended", "apps", None)], ["`flux resume ks apps -n flux-system`"]),
    ("tier-not-ready", _not_ready, [("tier-not-ready", "platform-config", None)], ["not Ready for 2h 0m", "Ready=False (HealthCheckFailed: timeout waiting for: [CDI/cdi status: 'InProgress'])", "since 2026-09-06 18:36 UTC (2h 0m)"]),
    ("tier-stuck", _stuck, [("tier-stuck", "apps", None)], ["stuck waiting on a dependency for 12h 0m", "DependencyNotReady", "since 2026-09-06 08:36 UTC (12h 0m)"]),
    ("dependency-wait-under-threshold", _waiting_briefly, [], []),
    ("reconciling-under-threshold", _reconciling_briefly, [], []),
    ("reconciling-over-threshold", _reconciling_long, [("tier-not-ready", "apps", None)], ["still reconciling for 3h 0m", "Ready=Unknown (Progressing: Running health checks)"]),
    ("tier-behind", _behind(at(2.5)), [("tier-behind", "apps", None)], ["Ready, but it has applied main@sha1:111111111111 while its source GitRepository/flux-system/flux-system serves main@sha1:222222222222", "since 2026-09-06 18:06 UTC (2h 30m)"]),
    ("behind-moments-ago", _behind(at(0.05)), [], []),
    ("not-in-inventory", _not_in_inventory, [("not-in-inventory", "apps", "Deployment/whoami/whoami")], ["status.inventory does not list it (whoami_whoami_apps_Deployment)", "first seen now"]),
    ("stale-inventory", _stale_inventory, [("stale-inventory", "apps", "ConfigMap/whoami/old-settings")], ["lists whoami_old-settings__ConfigMap, but git no longer defines it", "prune: true, so Flux deletes it on its next successful apply"]),
    ("object-deleted", _deleted, [("object-missing", "apps", "Deployment/whoami/whoami")], ["not on the cluster", "still lists it: it was deleted behind Flux's back"]),
    ("wrong-owner", _wrong_owner, [("wrong-owner", "apps", "Service/whoami/whoami")], ["carries flux-system/apps-vms's ownership labels"]),
    ("recreated-with-defaults", _recreated,
     [("wrong-owner", "platform-config-cdi", "StorageProfile/longhorn-vm"), ("fields-differ", "platform-config-cdi", "StorageProfile/longhorn-vm")],
     ["recreated with defaults: git sets spec.claimPropertySets, spec.cloneStrategy", "since 2026-09-06 19:06 UTC (1h 30m)",
      'spec.claimPropertySets: git sets `[{"accessModes":["ReadWriteMany"],"volumeMode":"Block"}]`; unset live']),
    ("field-changed", _field_changed, [("fields-differ", "apps", "Deployment/whoami/whoami")], ["git sets spec.replicas differently", "spec.replicas: git sets `2`; live has `5`"]),
    ("controller-defaults-are-not-drift", _controller_defaults, [], []),
    ("crd-missing", _crd_gone,
     [("crd-missing", "platform-config", None), ("object-missing", "platform-config-cdi", "StorageProfile/longhorn-static"), ("object-missing", "platform-config-cdi", "StorageProfile/longhorn-vm")],
     ["no CRD on the cluster serves StorageProfile.cdi.kubevirt.io; platform-config-cdi applies StorageProfile/longhorn-static, StorageProfile/longhorn-vm",
      "Tier flux-system/platform-config would create it: it applies CDI cdi, and cdi-operator (KubeVirt CDI) creates the CRD when it reconciles that",
      "the cluster does not serve cdi.kubevirt.io/v1beta1 StorageProfile"]),
]


@pytest.mark.parametrize("mutate,expected,phrases", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_each_kind_of_drift(example: RenderedCluster, tmp_path: Path, mutate: Callable, expected: list, phrases: list[str]) -> None:
    fake = converge(FakeKube(), example)
    mutate(fake)
    report = await drift(fake, example, tmp_path)
    assert report.error is None and report.notes == ()
    assert summary(report) == expected
    text = format_text(report)
    for phrase in phrases:
        assert phrase in text
    assert report.clean == (not expected)
    assert {method for method, _, _ in fake.requests} == {"GET"}  # read-only, always


async def test_item_keys_are_stable_across_runs(example: RenderedCluster, tmp_path: Path) -> None:
    first = converge(FakeKube(), example)
    _stuck(first)
    _field_changed(first)
    a = await drift(first, example, tmp_path)
    second = converge(FakeKube(), example)
    _stuck(second)
    find(second, "Deployment", "whoami", "whoami")["spec"]["replicas"] = 7  # a different value, the same item
    b = await drift(second, example, tmp_path)
    assert a.keys() == b.keys() == ["tier-stuck:flux-system/apps", "fields-differ:flux-system/apps:whoami_whoami_apps_Deployment"]


async def test_unreadable_objects_are_notes_not_drift(example: RenderedCluster, tmp_path: Path) -> None:
    fake = converge(FakeKube(), example)
    fake.inject(r"/namespaces/whoami/services/whoami$", status=403, times=None)
    report = await drift(fake, example, tmp_path)
    assert report.items == ()
    [note] = report.notes
    assert note.startswith("1 object could not be read") and "403 Forbidden" in note and "Service/whoami/whoami" in note


async def test_unreachable_cluster_is_a_failed_report(example: RenderedCluster, tmp_path: Path) -> None:
    fake = FakeKube()
    async with fake:
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", server=f"http://127.0.0.1:{closed_port()}")
        report = await read_drift(example, ClusterAccess(kubeconfig=kubeconfig, timeout=2), now=clock)
    assert report.error is not None and "cannot reach the API server" in report.error
    assert report.items == () and not report.clean
    assert "could not check" in format_text(report)


# --------------------------------------------------------------------------------------------- the seed's prod


def seed_prod(rendered: RenderedCluster) -> FakeKube:
    """prod as the seed found it (the default branch is the pre-fix repo), a cold cluster: platform applied and
    cdi-operator Available for 12 hours, but platform-config failing its dry-run on StorageProfile since then —
    so no CDI CR and no StorageProfile CRD — and every downstream tier blocked behind it, never applied."""
    fake = converge(FakeKube(), rendered, revision=R2)
    render = rendered.render
    for name in ("platform-config", "apps", "apps-vms"):
        for manifest in render.tiers[tid(name)].manifests:  # nothing of these tiers was ever applied
            ref = manifest.ref
            for key in [k for k, body in fake.objects.items() if body.get("kind") == ref.kind and k[3] == ref.name and k[2] == ref.namespace]:
                fake.objects.pop(key)
        status = find(fake, "Kustomization", name, NS)["status"]
        status.update(lastAppliedRevision="", lastAttemptedRevision=R2 if name == "platform-config" else "", observedGeneration=-1)
        status["inventory"]["entries"] = []
    for plural, kind in (("storageprofiles", "StorageProfile"), ("datavolumes", "DataVolume"), ("virtualmachines", "VirtualMachine")):
        crd_name = f"{plural}.{'kubevirt.io' if kind == 'VirtualMachine' else 'cdi.kubevirt.io'}"  # only created once their CRs reconcile
        fake.objects.pop(("apiextensions.k8s.io", "customresourcedefinitions", "", crd_name))
        fake.resources = [r for r in fake.resources if r.kind != kind]
    ready(fake, "platform-config", "False", "ReconciliationFailed",
          'StorageProfile/longhorn-vm dry-run failed: no matches for kind "StorageProfile" in version "cdi.kubevirt.io/v1beta1"', INCIDENT)
    for tier in ("apps", "apps-vms"):
        ready(fake, tier, "False", "DependencyNotReady", "dependency 'flux-system/platform-config' is not ready", INCIDENT)
    return fake


@pytest.fixture(scope="module")
def pre_fix_prod(tmp_path_factory: pytest.TempPathFactory) -> RenderedCluster:
    root = tmp_path_factory.mktemp("seed") / "repo"
    shutil.copytree(EXAMPLE, root)
    pre_fix(root)
    return render_cluster(root, "prod", cache_dir=tmp_path_factory.mktemp("cache"))


async def test_seed_prod_names_the_cdi_cr_the_crd_and_the_stuck_tiers(pre_fix_prod: RenderedCluster, tmp_path: Path) -> None:
    report = await drift(seed_prod(pre_fix_prod), pre_fix_prod, tmp_path, branch="main", revision="2" * 40)
    items = {(i.kind, i.tier.name if i.tier else None, i.object.name if i.object else None): i for i in report.items}
    # The tiers: platform-config failing for 12h, both downstream tiers stuck behind it for 12h.
    failing = items[(DriftKind.TIER_NOT_READY, "platform-config", None)]
    assert failing.since == datetime(2026, 9, 6, 8, 36, 42, tzinfo=timezone.utc)
    assert "no matches for kind" in failing.message and "for 12h 0m" in failing.message
    for tier, count in (("apps", 10), ("apps-vms", 3)):
        stuck = items[(DriftKind.TIER_STUCK, tier, None)]
        assert "for 12h 0m" in stuck.message
        assert stuck.details[0] == "it has applied no revision; its source serves main@sha1:222222222222"
        assert stuck.details[1].startswith(f"{count} objects git puts here are not applied yet: ")  # not one item each
    # The missing CDI CR, by name, in the tier git puts it in.
    cdi = items[(DriftKind.OBJECT_MISSING, "platform-config", "cdi")]
    assert cdi.object.kind == "CDI" and "has not applied it" in cdi.message
    # The StorageProfile CRD, with the tier that would create it (through the CDI CR).
    crds = {i.key: i for i in report.items if i.kind == DriftKind.CRD_MISSING}
    assert sorted(crds) == ["crd-missing:cdi.kubevirt.io/DataVolume", "crd-missing:cdi.kubevirt.io/StorageProfile", "crd-missing:kubevirt.io/VirtualMachine"]
    crd = crds["crd-missing:cdi.kubevirt.io/StorageProfile"]
    assert crd.tier == tid("platform-config")
    assert "Tier flux-system/platform-config would create it: it applies CDI cdi, and cdi-operator (KubeVirt CDI) creates the CRD" in crd.message
    # cdi-operator itself is fine: nothing about platform.
    assert not [i for i in report.items if i.tier == tid("platform")]
    report = replace(report, where="context prod-admin of prod.kubeconfig")  # not the test's tmp path
    text = format_text(report)
    assert "since 2026-09-06 08:36 UTC (12h 0m)" in text
    assert_golden("drift/seed-prod.txt", text)
    assert_golden("drift/seed-prod.md", format_markdown(report))
    assert_golden("drift/seed-prod.json", json.dumps(report_to_json(report), indent=2) + "\n")


# --------------------------------------------------------------------------------------------- Secrets


SECRET_VALUE = "hunter2-do-not-leak"


def secret_repo(root: Path) -> Path:
    tiers = {"config": ks("config", "./config")}
    extra = {
        "config/kustomization.yaml": kfile("secret.yaml"),
        "config/secret.yaml": dump(obj("v1", "Secret", "db", "apps", type="Opaque", stringData={"password": SECRET_VALUE, "user": "app"})),
    }
    return write_tree(root, flux_repo(tiers, extra, cluster="prod"))


@pytest.mark.parametrize("live_keys,expected", [(("password", "user"), []), (("user",), ["data.password"])], ids=["same-keys", "missing-key"])
async def test_secrets_are_compared_by_keys_never_values(tmp_path: Path, live_keys: tuple[str, ...], expected: list[str]) -> None:
    rendered = render_cluster(secret_repo(tmp_path / "repo"), "prod")
    fake = converge(FakeKube(), rendered)
    secret = find(fake, "Secret", "db", "apps")
    secret.pop("stringData")
    secret["data"] = dict.fromkeys(live_keys, "c29tZXRoaW5nLWVsc2U=")  # other values: not drift
    secret["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps({"stringData": {"password": SECRET_VALUE}})}
    report = await drift(fake, rendered, tmp_path)
    fields = [i for i in report.items if i.kind == DriftKind.FIELDS_DIFFER]
    assert [d.split(":")[0] for i in fields for d in i.details] == expected
    everything = format_text(report) + format_markdown(report) + json.dumps(report_to_json(report))
    assert SECRET_VALUE not in everything and "c29tZXRoaW5nLWVsc2U=" not in everything


def test_live_body_never_keeps_secret_values() -> None:
    from bot.engine.core.model import ObjectRef

    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": SECRET_VALUE, "a": "b"}},
            "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": SECRET_VALUE}}
    kept = LiveBody.of(ObjectRef("v1", "Secret", "apps", "db"), body).body
    assert kept["data"] == {"password": ""} and kept["stringData"] == {"token": ""}
    assert kept["metadata"]["annotations"] == {"a": "b"}
    assert SECRET_VALUE not in json.dumps(kept) and "aHVudGVyMg==" not in json.dumps(kept)


# --------------------------------------------------------------------------------------------- field comparison


FIELD_CASES = [
    ("extra-live-fields", {"spec": {"a": 1}}, {"spec": {"a": 1, "b": 2}, "status": {"x": 1}}, []),
    ("unset-live", {"spec": {"a": {"b": "c"}}}, {"spec": {}}, ["spec.a"]),
    ("empty-git-value", {"spec": {"a": {}, "b": [], "c": ""}}, {"spec": {}}, []),
    ("int-vs-string", {"spec": {"port": 80, "flag": True}}, {"spec": {"port": "80", "flag": "true"}}, []),
    ("quantity", {"spec": {"cpu": "500m", "mem": "1Gi", "n": "1000m"}}, {"spec": {"cpu": "0.5", "mem": "1073741824", "n": "1"}}, []),
    ("quantity-differs", {"spec": {"cpu": "500m"}}, {"spec": {"cpu": "1"}}, ["spec.cpu"]),
    ("duration", {"spec": {"interval": "1h"}}, {"spec": {"interval": "60m0s"}}, []),
    ("named-list-any-order", {"spec": {"c": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}},
     {"spec": {"c": [{"name": "b", "image": "y", "extra": 1}, {"name": "a", "image": "x"}]}}, []),
    ("named-list-missing", {"spec": {"c": [{"name": "a", "image": "x"}]}}, {"spec": {"c": [{"name": "b", "image": "x"}]}}, ["spec.c[name=a]"]),
    ("scalar-list-order", {"spec": {"args": ["a", "b"]}}, {"spec": {"args": ["b", "a"]}}, ["spec.args"]),
    ("masked-or-unsubstituted", {"spec": {"p": "<masked:TOKEN>", "q": "x-${VAR}"}}, {"spec": {"p": "real", "q": "x-y"}}, []),
    ("labels-and-annotations", {"metadata": {"labels": {"a": "1", "kustomize.toolkit.fluxcd.io/name": "x"}, "annotations": {"n": "v"}}},
     {"metadata": {"labels": {"a": "2"}, "annotations": {}}}, ["metadata.labels.a", "metadata.annotations.n"]),
]


@pytest.mark.parametrize("git,live,paths", [c[1:] for c in FIELD_CASES], ids=[c[0] for c in FIELD_CASES])
def test_compare_fields(git: dict, live: dict, paths: list[str]) -> None:
    base = {"apiVersion": "example.com/v1", "kind": "Widget"}
    assert [d.path for d in compare_fields({**base, **git}, {**base, **live})] == paths


def test_durations() -> None:
    assert [format_duration(timedelta(seconds=s)) for s in (20, 300, 12 * 3600 + 60 * 36, 3 * 86400 + 4 * 3600)] == ["<1m", "5m", "12h 36m", "3d 4h"]


# --------------------------------------------------------------------------------------------- the CLI


def test_cli_drift_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str], example: RenderedCluster) -> None:
    fake = converge(FakeKube(), example)
    with fake.start_in_thread():
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", context="prod-admin")
        args = ["drift", "--repo", str(EXAMPLE), "--cluster", "prod", "--kubeconfig", str(kubeconfig), "--context", "prod-admin"]
        assert main(args) == 0
        assert "no drift: the cluster matches git" in capsys.readouterr().out
        real_since = (datetime.now(timezone.utc) - timedelta(hours=12)).strftime("%Y-%m-%dT%H:%M:%SZ")  # the CLI reads the real clock
        ready(fake, "apps", "False", "DependencyNotReady", "dependency 'flux-system/platform-config' is not ready", real_since)
        assert main([*args, "--format", "json"]) == 1
        report = json.loads(capsys.readouterr().out)
        assert [(i["kind"], i["tier"]) for i in report["items"]] == [("tier-stuck", "flux-system/apps")]
        assert main([*args, "--format", "markdown"]) == 1
        body = capsys.readouterr().out
        assert body.startswith("<!-- fluxwarden:drift:prod -->\n## Drift report: `prod`")
        assert f"since {real_since[:10]} {real_since[11:16]} UTC (12h 0m)" in body
        assert main([*args, "--stuck-after", "86400"]) == 0  # 12 hours is not stuck for a one-day threshold
        capsys.readouterr()
    bad = fake.kubeconfig(tmp_path / "bad", server=f"http://127.0.0.1:{closed_port()}")
    assert main(["drift", "--repo", str(EXAMPLE), "--cluster", "prod", "--kubeconfig", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("fluxwarden: infrastructure error: could not read cluster prod")
    with pytest.raises(SystemExit) as usage:
        main(["drift", "--cluster", "prod", "--format", "yaml"])
    assert usage.value.code == 2


# --------------------------------------------------------------------------------------------- edges


async def test_a_brief_wait_on_a_cold_tier_is_not_drift(example: RenderedCluster, tmp_path: Path) -> None:
    """apps has never applied anything and waits on its dependency for a minute: a cold start, not drift."""
    fake = converge(FakeKube(), example)
    for manifest in example.render.tiers[tid("apps")].manifests:
        ref = manifest.ref
        for key in [k for k, body in fake.objects.items() if body.get("kind") == ref.kind and k[3] == ref.name and k[2] == ref.namespace]:
            fake.objects.pop(key)
    inventory(fake, "apps").clear()
    _waiting_briefly(fake)
    assert (await drift(fake, example, tmp_path)).items == ()


async def test_a_tier_on_another_source_is_a_note(tmp_path: Path) -> None:
    files = flux_repo({"config": ks("config", "./config"), "charts": ks("charts", "./", source="charts", source_kind="OCIRepository")},
                      {"config/kustomization.yaml": kfile("cm.yaml"), "config/cm.yaml": dump(obj("v1", "ConfigMap", "settings", "apps", data={"a": "1"}))}, cluster="prod")
    rendered = render_cluster(write_tree(tmp_path / "repo", files), "prod")
    fake = converge(FakeKube(), rendered)
    report = await drift(fake, rendered, tmp_path)
    assert report.items == ()
    assert report.notes == ("flux-system/charts was not rendered (another source, or unsafe input): its objects and inventory were not compared",)
    assert "<summary>Not checked</summary>" in format_markdown(report)


def test_a_long_report_fits_in_an_issue() -> None:
    from bot.engine.livestate.drift import DriftItem
    from bot.engine.core.model import ObjectRef

    items = tuple(
        DriftItem(DriftKind.FIELDS_DIFFER, f"fields-differ:flux-system/apps:ns_cm-{i}__ConfigMap", "git sets data differently " + "x" * 200,
                  tid("apps"), ObjectRef("v1", "ConfigMap", "ns", f"cm-{i:04d}"), details=("data.a: git sets `1`; live has `2`",))
        for i in range(2000)
    )
    body = format_markdown(DriftReport("prod", NOW, items=items), hidden="<!-- state -->")
    assert len(body) < 62000 and body.rstrip().endswith("<!-- state -->")
    assert "more items: run `fluxwarden drift --cluster prod` for all of them." in body
