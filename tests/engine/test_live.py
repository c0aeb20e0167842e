"""Live merge preconditions (bot/engine/livestate/live.py): pure tables over LiveState, CRD providers on rendered repos,
and the seed PR end to end through the CLI against the fake Kubernetes API."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bot.service.cli import main
from bot.pipeline.check import check_repository
from bot.engine.livestate.live import (
    CHECK_CHECKED,
    CHECK_FAILED,
    CHECK_LIVE_PROVIDERS,
    CHECK_UNKNOWN,
    CrdMaker,
    LiveCrd,
    LiveKustomization,
    LiveObject,
    LiveSource,
    LiveState,
    Move,
    ObjectRead,
    classify_crd,
    evaluate_preconditions,
    inventory_id,
)
from bot.engine.core.model import Finding, ObjectRef, Severity, SourceRef, TierId, TierSpec
from tests.fakes.kube import FakeKube, crd as live_crd, git_repository, kustomization, owned_by
from tests.fluxrepo import crd, dump, flux_repo, ks, kustomization as kfile, obj, write_tree
from tests.gitrepo import EXAMPLE, pre_fix
from tests.pipeline.test_review import seed_pr  # noqa: F401  (the fixture)

NS = "flux-system"
R1 = "main@sha1:1111111111111111111111111111111111111111"
R2 = "main@sha1:2222222222222222222222222222222222222222"
GIT = SourceRef("GitRepository", "flux-system", NS)
OTHER = SourceRef("GitRepository", "other-repo", NS)


def tid(name: str) -> TierId:
    return TierId(NS, name)


def spec(name: str, *deps: str, source: SourceRef = GIT) -> TierSpec:
    return TierSpec(id=tid(name), path=f"./{name}", source=source, depends_on=tuple(tid(d) for d in deps))


def state(*bodies: dict[str, Any], revision: str | None = R1, sources: dict[SourceRef, str | None] | None = None, **extra: Any) -> LiveState:
    kss = {k.id: k for k in map(LiveKustomization.from_object, bodies)}
    revs = {GIT: revision} if sources is None else sources
    return LiveState(
        cluster="prod",
        where="context prod of kubeconfig",
        kustomizations=kss,
        sources={ref: LiveSource.from_object(ref, git_repository(ref.name, revision=rev)) for ref, rev in revs.items()},
        **extra,
    )


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == Severity.ERROR]


# --------------------------------------------------------------------------------------------- status table

STATUS_CASES = [
    # id, live Kustomizations (beyond nothing), tier specs, touched, expected (check, tier, phrases) or None
    ("ready", [kustomization("a", revision=R1)], [spec("a")], ["a"], None),
    ("suspended", [kustomization("a", revision=R1, suspend=True)], [spec("a")], ["a"],
     (CHECK_FAILED, "a", ["it is suspended", "flux resume ks a -n flux-system", "SUSPENDED=True READY=True"])),
    ("stale-generation", [kustomization("a", revision=R1, generation=4, observed=3)], [spec("a")], ["a"],
     (CHECK_FAILED, "a", ["observedGeneration 3 < generation 4"])),
    ("failing-newer-revision", [kustomization("a", revision=R1, attempted=R2, ready="False", reason="ReconciliationFailed", message="dry-run failed: no matches for kind StorageProfile")], [spec("a")], ["a"],
     (CHECK_FAILED, "a", [f"failing on a newer revision (lastAttemptedRevision {R2}, lastAppliedRevision {R1})", "Ready=False (ReconciliationFailed)", f"REVISION={R1}", 'MESSAGE="dry-run failed: no matches for kind StorageProfile"'])),
    ("dependency-not-ready", [kustomization("a", revision=R1, ready="False", reason="DependencyNotReady", message="dependency 'flux-system/platform' is not ready")], [spec("a")], ["a"],
     (CHECK_FAILED, "a", ["waiting on a dependency: Ready=False (DependencyNotReady)", "`flux get ks a -n flux-system` shows NAME=a", "READY=False MESSAGE=\"dependency 'flux-system/platform' is not ready\""])),
    ("reconciling", [kustomization("a", revision=R1, ready="Unknown", reason="Progressing", message="Reconciliation in progress")], [spec("a")], ["a"],
     (CHECK_FAILED, "a", ["Ready=Unknown (Progressing)"])),
    ("stalled", [kustomization("a", revision=R1, ready="False", reason="InvalidCELExpression", stalled=("InvalidCELExpression", "bad expr"))], [spec("a")], ["a"],
     (CHECK_FAILED, "a", ["it is stalled (InvalidCELExpression)"])),
    ("never-reconciled", [kustomization("a", revision="", ready=None)], [spec("a")], ["a"],
     (CHECK_FAILED, "a", ["not been reconciled yet", 'READY=False MESSAGE="waiting to be reconciled"', "REVISION=-"])),
    ("missing", [], [spec("a")], ["a"],
     (CHECK_FAILED, "a", ["flux-system/a is missing on cluster prod", '✗ kustomizations.kustomize.toolkit.fluxcd.io "a" not found'])),
    ("same-source-dep-behind", [kustomization("dep", revision=R1), kustomization("a", revision=R2)], [spec("dep"), spec("a", "dep")], ["a"],
     (CHECK_FAILED, "a", ["flux-system/a dependsOn flux-system/dep on the same source GitRepository/flux-system/flux-system", f"current artifact revision {R2}", f"flux-system/dep has applied {R1}", "revision-gated"])),
    ("same-source-dep-current", [kustomization("dep", revision=R2), kustomization("a", revision=R2)], [spec("dep"), spec("a", "dep")], ["a"], None),
    ("other-source-dep-behind", [kustomization("dep", revision=R1, source=("GitRepository", "other-repo")), kustomization("a", revision=R2)], [spec("dep", source=OTHER), spec("a", "dep")], ["a"], None),
    ("untouched-dep-not-ready", [kustomization("dep", revision=R2, ready="False", reason="HealthCheckFailed"), kustomization("a", revision=R2)], [spec("dep"), spec("a", "dep")], ["a"],
     (CHECK_FAILED, "a", ["flux-system/a dependsOn flux-system/dep, so Flux applies nothing of flux-system/a (DependencyNotReady)", "Ready=False (HealthCheckFailed)"])),
    ("dep-missing", [kustomization("a", revision=R2)], [spec("a", "dep")], ["a"],
     (CHECK_FAILED, "a", ["flux-system/a dependsOn flux-system/dep, which is missing on cluster prod"])),
]


@pytest.mark.parametrize("live,specs,touched,expected", [c[1:] for c in STATUS_CASES], ids=[c[0] for c in STATUS_CASES])
def test_kustomization_status_table(live: list, specs: list[TierSpec], touched: list[str], expected: tuple | None) -> None:
    revision = R2 if any(k["status"]["lastAppliedRevision"] == R2 for k in live) else R1
    found = evaluate_preconditions(state(*live, revision=revision), {s.id: s for s in specs}, [tid(t) for t in touched])
    errs = errors(found)
    if expected is None:
        assert errs == []
        assert [f.check for f in found] == [CHECK_CHECKED] and found[0].message.endswith("all met")
        return
    check, tier, phrases = expected
    assert [(f.check, f.kustomization) for f in errs] == [(check, tid(tier))]
    for phrase in phrases:
        assert phrase in errs[0].message
    assert "\n" not in errs[0].message


def test_a_tier_the_change_adds_may_be_missing_but_its_dependency_is_gated() -> None:
    live = state(kustomization("platform-config", revision=R1), revision=R2)
    specs = {s.id: s for s in (spec("platform-config"), spec("platform-config-cdi", "platform-config"))}
    found = errors(evaluate_preconditions(live, specs, [tid("platform-config-cdi")], expected_absent=[tid("platform-config-cdi")]))
    assert [(f.check, f.kustomization.name) for f in found] == [(CHECK_FAILED, "platform-config-cdi")]
    assert "revision-gated" in found[0].message


@pytest.mark.parametrize(
    "sources,source_errors,check,phrase",
    [
        ({}, {}, CHECK_FAILED, "which is missing on cluster prod"),
        ({GIT: None}, {}, CHECK_FAILED, "which has no artifact yet (GitOperationFailed: failed to checkout)"),
        ({}, {GIT: "forbidden (403)"}, CHECK_UNKNOWN, "could not be read: forbidden (403)"),
    ],
    ids=["source-missing", "no-artifact", "source-unreadable"],
)
def test_revision_gate_needs_the_source(sources: dict, source_errors: dict, check: str, phrase: str) -> None:
    live = state(kustomization("dep", revision=R1), kustomization("a", revision=R1), sources=sources, source_errors=source_errors)
    found = errors(evaluate_preconditions(live, {s.id: s for s in (spec("dep"), spec("a", "dep"))}, [tid("a")]))
    assert [(f.check, f.kustomization.name) for f in found] == [(check, "a")]
    assert phrase in found[0].message


def test_unreadable_cluster_is_one_unknown_error() -> None:
    live = LiveState.unavailable("prod", "cannot reach the API server (ClientConnectorError)", "context prod of kubeconfig")
    found = evaluate_preconditions(live, {}, [tid("platform-config"), tid("apps")], moves=[Move(ObjectRef("v1", "ConfigMap", "a", "b"), tid("apps"), tid("platform-config"))])
    assert [(f.check, f.severity) for f in found] == [(CHECK_UNKNOWN, Severity.ERROR)]
    assert "could not read the live state of cluster prod (context prod of kubeconfig): cannot reach" in found[0].message
    assert "apps, platform-config" in found[0].message and "do not merge" in found[0].message


def test_crd_list_failure_is_unknown() -> None:
    live = state(kustomization("a", revision=R1), crd_error="forbidden")
    found = errors(evaluate_preconditions(live, {tid("a"): spec("a")}, [tid("a")]))
    assert [(f.check, f.kustomization) for f in found] == [(CHECK_UNKNOWN, None)]
    assert "CRDs of cluster prod (context prod of kubeconfig) could not be listed: forbidden" in found[0].message


# --------------------------------------------------------------------------------------------- moved objects

PROFILE = ObjectRef("cdi.kubevirt.io/v1beta1", "StorageProfile", "", "longhorn-vm")
MOVE = Move(PROFILE, tid("platform-config"), tid("platform-config-cdi"))


def _read(labels: dict[str, str] | None = None, *, absent: bool = False, error: str | None = None) -> ObjectRead:
    if error:
        return ObjectRead(PROFILE, error=error)
    return ObjectRead(PROFILE, None if absent else LiveObject(PROFILE, labels or {}))


MOVE_CASES = [
    ("owned-and-in-inventory", _read(owned_by("platform-config")), True, None, []),
    ("already-handed-over", _read(owned_by("platform-config-cdi")), True, None, []),
    ("absent-live", _read(absent=True), True, CHECK_FAILED, ["is not on cluster prod", "inventory still lists _longhorn-vm_cdi.kubevirt.io_StorageProfile"]),
    ("owned-by-another", _read(owned_by("storage")), True, CHECK_FAILED, ["owned by flux-system/storage", "kustomize.toolkit.fluxcd.io/name=storage", "not by flux-system/platform-config"]),
    ("not-flux-managed", _read({"app": "x"}), True, CHECK_FAILED, ["carries no kustomize.toolkit.fluxcd.io/name"]),
    ("labelled-not-in-inventory", _read(owned_by("platform-config")), False, CHECK_FAILED, ["not in its status.inventory", "_longhorn-vm_cdi.kubevirt.io_StorageProfile"]),
    ("unreadable", _read(error="forbidden (403)"), True, CHECK_UNKNOWN, ["but it could not be read: forbidden (403)"]),
    ("not-read", None, True, CHECK_UNKNOWN, ["its live state was not read"]),
]


@pytest.mark.parametrize("read,listed,check,phrases", [c[1:] for c in MOVE_CASES], ids=[c[0] for c in MOVE_CASES])
def test_moved_object_ownership(read: ObjectRead | None, listed: bool, check: str | None, phrases: list[str]) -> None:
    inventory = (inventory_id(PROFILE),) if listed else ()
    live = state(kustomization("platform-config", revision=R1, inventory=inventory), kustomization("platform-config-cdi", revision=R1))
    if read is not None:
        live = live.with_objects([read])
    specs = {s.id: s for s in (spec("platform-config"), spec("platform-config-cdi", "platform-config"))}
    found = errors(evaluate_preconditions(live, specs, [MOVE.source, MOVE.destination], moves=[MOVE]))
    if check is None:
        assert found == []
        return
    assert [(f.check, f.kustomization, f.object) for f in found] == [(check, MOVE.source, PROFILE)]
    assert found[0].message.startswith("StorageProfile/longhorn-vm moves from flux-system/platform-config to flux-system/platform-config-cdi")
    for phrase in phrases:
        assert phrase in found[0].message


def test_inventory_id_is_fluxs() -> None:
    assert inventory_id(ObjectRef("apps/v1", "Deployment", "default", "podinfo")) == "default_podinfo_apps_Deployment"
    assert inventory_id(ObjectRef("v1", "Service", "default", "podinfo")) == "default_podinfo__Service"


# --------------------------------------------------------------------------------------------- CRD classification

CDI_OWNER = [{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI", "name": "cdi", "uid": "u1", "controller": True}]
CRD_CASES = [
    ("kustomization", {"labels": owned_by("platform")}, CrdMaker.KUSTOMIZATION, "flux-system/platform"),
    ("helm-annotations", {"annotations": {"meta.helm.sh/release-name": "cert-manager", "meta.helm.sh/release-namespace": "cert-manager"}, "labels": {"app.kubernetes.io/managed-by": "Helm"}}, CrdMaker.HELM, "cert-manager/cert-manager"),
    ("helm-controller-labels", {"labels": {"helm.toolkit.fluxcd.io/name": "longhorn", "helm.toolkit.fluxcd.io/namespace": "longhorn-system"}}, CrdMaker.HELM, "longhorn"),
    ("managed-by-helm", {"labels": {"app.kubernetes.io/managed-by": "Helm"}}, CrdMaker.HELM, "?"),
    ("owner-reference", {"owners": CDI_OWNER, "labels": {"cdi.kubevirt.io": ""}}, CrdMaker.OPERATOR, "CDI/cdi"),
    ("managed-by-operator", {"labels": {"app.kubernetes.io/managed-by": "virt-operator", "kubevirt.io": ""}}, CrdMaker.OPERATOR, "virt-operator"),
    ("operator-label", {"labels": {"operator.cdi.kubevirt.io/createVersion": "v1.60.0"}}, CrdMaker.OPERATOR, "operator.cdi.kubevirt.io"),
    ("nobody", {}, CrdMaker.UNKNOWN, "unknown"),
]


@pytest.mark.parametrize("meta,maker,by", [c[1:] for c in CRD_CASES], ids=[c[0] for c in CRD_CASES])
def test_crd_classification(meta: dict, maker: CrdMaker, by: str) -> None:
    body = live_crd("example.com", "Widget", "widgets", labels=meta.get("labels"), annotations=meta.get("annotations"), owners=meta.get("owners"))
    origin = classify_crd(LiveCrd.from_object(body))
    assert (origin.maker, origin.by) == (maker, by)
    assert origin.evidence


# --------------------------------------------------------------------------------------------- providers learned live


def tier_dir(path: str, *objects: dict[str, Any]) -> dict[str, str]:
    return {f"{path}/kustomization.yaml": kfile("objects.yaml"), f"{path}/objects.yaml": dump(*objects)}


INSTALLATION_CRD = crd("acme.io", "Installation", "installations", scope="Cluster")
INSTALLATION = obj("acme.io/v1", "Installation", "main", spec={})
WIDGET = obj("acme.io/v1", "Widget", "w1", "default", spec={})
ACME_RELEASE = obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", "acme", "acme", spec={"interval": "1h", "chart": {"spec": {"chart": "acme-chart", "sourceRef": {"kind": "HelmRepository", "name": "acme"}}}})
GIZMO = obj("acme.io/v1", "Gizmo", "g1", "default", spec={})


def operator_repo(tmp_path: Path, *, depends: bool, wait: bool) -> Path:
    files = flux_repo({
        "ops": ks("ops", "./ops", wait=wait),
        "apps": ks("apps", "./apps", depends_on=["ops"] if depends else []),
    })
    files.update(tier_dir("ops", INSTALLATION_CRD, INSTALLATION))
    files.update(tier_dir("apps", WIDGET))
    return write_tree(tmp_path / "repo", files)


def crd_state(*crds: dict[str, Any]) -> LiveState:
    return LiveState("dev", "test", crds=tuple(LiveCrd.from_object(c) for c in crds))


WIDGET_LIVE = live_crd("acme.io", "Widget", "widgets", scope="Namespaced", owners=[{"apiVersion": "acme.io/v1", "kind": "Installation", "name": "main", "uid": "u", "controller": True}])


def checks(report, *ids: str) -> set[tuple[str, str | None]]:
    return {(f.check, f.kustomization.name if f.kustomization else None) for f in report.findings if f.check in ids}


ORDERING = ("second-order-crd", "crd-not-ordered", "dependency-not-waited", "unknown-kind")


def test_unknown_operator_learned_from_the_cluster(tmp_path: Path) -> None:
    repo = operator_repo(tmp_path, depends=False, wait=False)
    assert checks(check_repository(repo, "dev"), *ORDERING) == {("unknown-kind", "apps")}
    report = check_repository(repo, "dev", live=crd_state(WIDGET_LIVE))
    assert checks(report, *ORDERING) == {("second-order-crd", "apps")}
    message = next(f.message for f in report.findings if f.check == "second-order-crd")
    assert "the operator reconciling Installation main (learned from the cluster: CRD widgets.acme.io, ownerReference Installation/main)" in message
    [info] = [f for f in report.findings if f.check == CHECK_LIVE_PROVIDERS]
    assert info.severity == Severity.INFO
    assert "Widget.acme.io: the operator reconciling Installation main" in info.message and "[flux-system/ops]" in info.message


@pytest.mark.parametrize("wait,expected", [(True, set()), (False, {("dependency-not-waited", "apps")})], ids=["waited", "not-waited"])
def test_learned_operator_ordered_by_dependson(tmp_path: Path, wait: bool, expected: set) -> None:
    repo = operator_repo(tmp_path, depends=True, wait=wait)
    assert checks(check_repository(repo, "dev", live=crd_state(WIDGET_LIVE)), *ORDERING) == expected


def test_unknown_chart_learned_from_helm_annotations(tmp_path: Path) -> None:
    files = flux_repo({"charts": ks("charts", "./charts", wait=True), "apps": ks("apps", "./apps")})
    files.update(tier_dir("charts", obj("v1", "Namespace", "acme"), ACME_RELEASE))
    files.update(tier_dir("apps", GIZMO))
    repo = write_tree(tmp_path / "repo", files)
    gizmos = live_crd("acme.io", "Gizmo", "gizmos", scope="Namespaced", labels={"app.kubernetes.io/managed-by": "Helm"}, annotations={"meta.helm.sh/release-name": "acme", "meta.helm.sh/release-namespace": "acme"})
    report = check_repository(repo, "dev", live=crd_state(gizmos))
    assert checks(report, *ORDERING) == {("crd-not-ordered", "apps")}
    assert "the chart of HelmRelease acme/acme (learned from the cluster" in next(f.message for f in report.findings if f.check == "crd-not-ordered")


def test_crd_whose_maker_is_not_rendered_is_present_now(tmp_path: Path) -> None:
    files = flux_repo({"apps": ks("apps", "./apps")})
    files.update(tier_dir("apps", WIDGET))
    repo = write_tree(tmp_path / "repo", files)
    widgets = live_crd("acme.io", "Widget", "widgets", scope="Namespaced", labels={"app.kubernetes.io/managed-by": "acme-operator"})
    report = check_repository(repo, "dev", live=crd_state(widgets))
    assert checks(report, *ORDERING) == set()
    [info] = [f.message for f in report.findings if f.check == CHECK_LIVE_PROVIDERS]
    assert "CRD widgets.acme.io on the cluster, created by an operator (label app.kubernetes.io/managed-by=acme-operator)" in info


def test_live_crds_do_not_hide_cold_cluster_ordering(tmp_path: Path) -> None:
    """The incident: StorageProfile's CRD exists on a healthy cluster, yet a cold one still deadlocks."""
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE, root)
    pre_fix(root)
    profiles = live_crd("cdi.kubevirt.io", "StorageProfile", "storageprofiles", version="v1beta1", owners=CDI_OWNER)
    report = check_repository(root, "prod", live=crd_state(profiles))
    assert ("second-order-crd", "platform-config") in checks(report, "second-order-crd")
    assert not [f for f in report.findings if f.check == CHECK_LIVE_PROVIDERS]


# --------------------------------------------------------------------------------------------- end to end (CLI)


def seed_cluster(base: str, *, platform_config: dict[str, Any] | None = None) -> FakeKube:
    """prod as it is before the seed PR merges: every tier at the base revision, the profiles owned by platform-config."""
    revision = f"main@sha1:{base}"
    fake = FakeKube()
    fake.add(git_repository(revision=revision))
    for tier in ("flux-system", "platform", "apps", "apps-vms"):
        fake.add(kustomization(tier, revision=revision))
    profiles = ("longhorn-vm", "longhorn-static")
    inventory = tuple(f"_{p}_cdi.kubevirt.io_StorageProfile" for p in profiles)
    fake.add(platform_config or kustomization("platform-config", revision=revision, inventory=inventory))
    fake.add(live_crd("cdi.kubevirt.io", "CDI", "cdis", version="v1beta1", labels=owned_by("platform")))
    fake.add(live_crd("cdi.kubevirt.io", "StorageProfile", "storageprofiles", version="v1beta1", owners=CDI_OWNER))
    for name in profiles:
        fake.add({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "StorageProfile", "metadata": {"name": name, "labels": owned_by("platform-config")}, "spec": {}})
    return fake


NOT_READY = dict(ready="False", reason="DependencyNotReady", message="dependency 'flux-system/platform' is not ready")


@pytest.mark.parametrize("ready", [False, True], ids=["platform-config-not-ready", "platform-config-ready"])
def test_seed_pr_live_through_the_cli(seed_pr: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], ready: bool) -> None:
    root, base, head = seed_pr
    inventory = ("_longhorn-vm_cdi.kubevirt.io_StorageProfile", "_longhorn-static_cdi.kubevirt.io_StorageProfile")
    status = {} if ready else NOT_READY
    fake = seed_cluster(base, platform_config=kustomization("platform-config", revision=f"main@sha1:{base}", inventory=inventory, **status))
    with fake.start_in_thread():
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", context="prod-admin")
        code = main([
            "check", "--repo", str(root), "--cluster", "prod", "--base", base, "--head", head,
            "--cache-dir", str(tmp_path / "cache"), "--format", "json",
            "--live", "--kubeconfig", str(kubeconfig), "--context", "prod-admin",
        ])
    report = json.loads(capsys.readouterr().out)
    found = [(f["check"], f["kustomization"], f["new"]) for f in report["findings"] if f["check"].startswith("precondition-") and f["severity"] == "error"]
    if ready:
        assert found == [] and code == 0
    else:
        assert found == [("precondition-failed", "flux-system/platform-config", True)] and code == 1
        message = next(f["message"] for f in report["findings"] if f["check"] == "precondition-failed")
        assert "Ready=False (DependencyNotReady)" in message
        assert "`flux get ks platform-config -n flux-system` shows NAME=platform-config" in message
        assert next(f["file"] for f in report["findings"] if f["check"] == "precondition-failed") == "clusters/base/platform-config.yaml"
    [checked] = [f["message"] for f in report["findings"] if f["check"] == CHECK_CHECKED]
    assert "(context prod-admin)" in checked and "(flux-system, platform-config, platform-config-cdi) and 2 moved objects" in checked
    assert {m for m, _, _ in fake.requests} == {"GET"}  # read-only
    assert any("/storageprofiles/longhorn-vm" in p for _, p, _ in fake.requests)


def test_seed_pr_required_tier_and_moved_object_gone(seed_pr: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A required tier (from .fluxwarden.yaml) is checked though the PR does not touch it; a moved object absent live is reported."""
    root, base, head = seed_pr
    config = root / ".fluxwarden.yaml"
    config.write_text(config.read_text().replace("prod: {path: clusters/prod}", "prod: {path: clusters/prod, required_tiers: [apps]}"))
    fake = seed_cluster(base)
    fake.add(kustomization("apps", revision=f"main@sha1:{base}", suspend=True))
    fake.remove("cdi.kubevirt.io/v1beta1", "StorageProfile", "longhorn-static")
    with fake.start_in_thread():
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
        code = main(["check", "--repo", str(root), "--cluster", "prod", "--base", base, "--cache-dir", str(tmp_path / "cache"), "--format", "json", "--live", "--kubeconfig", str(kubeconfig)])
    report = json.loads(capsys.readouterr().out)
    found = sorted((f["check"], f["kustomization"], (f["object"] or {}).get("name")) for f in report["findings"] if f["check"] == "precondition-failed")
    assert found == [
        ("precondition-failed", "flux-system/apps", None),
        ("precondition-failed", "flux-system/platform-config", "longhorn-static"),
    ]
    assert code == 1


def test_plain_check_live_and_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE, root)
    assert main(["check", "--repo", str(root), "--cluster", "prod", "--context", "x"]) == 2
    assert "--kubeconfig and --context need --live" in capsys.readouterr().err
    fake = FakeKube()
    with fake.start_in_thread():
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
        code = main(["check", "--repo", str(root), "--cluster", "prod", "--format", "json", "--live", "--kubeconfig", str(kubeconfig)])
    report = json.loads(capsys.readouterr().out)
    missing = sorted(f["kustomization"] for f in report["findings"] if f["check"] == "precondition-failed")
    assert missing == sorted(f"flux-system/{t}" for t in ("flux-system", "platform", "platform-config", "platform-config-cdi", "apps", "apps-vms"))
    assert code == 1
    # An unreachable cluster: one precondition-unknown error, exit 1, no traceback.
    code = main(["check", "--repo", str(root), "--cluster", "prod", "--format", "json", "--live", "--kubeconfig", str(kubeconfig)])
    report = json.loads(capsys.readouterr().out)
    assert [f["check"] for f in report["findings"] if f["severity"] == "error"] == ["precondition-unknown"]
    assert "cannot reach the API server" in next(f["message"] for f in report["findings"] if f["check"] == "precondition-unknown")
    assert code == 1


# --------------------------------------------------------------------------------------------- configuration


def test_required_tiers_in_repo_config() -> None:
    from bot.engine.render.config import load_repo_config
    from bot.engine.core.errors import ConfigError
    from bot.engine.livestate.live import required_tier_ids

    config = load_repo_config("clusters:\n  prod: {path: clusters/prod, required_tiers: [platform-config, infra/base]}\n  dev: {path: clusters/dev}\n")
    assert config.clusters == {"prod": "clusters/prod", "dev": "clusters/dev"}  # existing keys keep working
    assert config.required_tiers == {"prod": ("platform-config", "infra/base")}
    assert required_tier_ids(config.required_tiers["prod"]) == {TierId("flux-system", "platform-config"), TierId("infra", "base")}
    assert load_repo_config("clusters: {dev: clusters/dev}\n").required_tiers == {}
    with pytest.raises(ConfigError, match="`required_tiers` must be a list of tier names"):
        load_repo_config("clusters:\n  prod: {path: clusters/prod, required_tiers: platform-config}\n")
    example = load_repo_config((Path(__file__).resolve().parents[2] / "config/repo.example.fluxwarden.yaml").read_text())
    assert example.required_tiers == {"prod": ("platform-config",)}


def test_service_config_cluster_access(tmp_path: Path) -> None:
    from bot.engine.core.errors import ConfigError
    from bot.service.settings import load_service_config

    env = {"FLUXWARDEN_WEBHOOK_SECRET": "s", "FLUXWARDEN_GITHUB_TOKEN": "t"}

    def load(clusters: str):
        path = tmp_path / "config.yaml"
        path.write_text(f"repos:\n  - name: o/r\n    clusters:\n{clusters}")
        return load_service_config(path, env).repo("o/r")

    repo = load("      prod: {kubeconfig: /etc/kube/prod, context: admin}\n      dev: {in_cluster: true}\n      lab: {}\n")
    prod, dev, lab = repo.cluster("prod"), repo.cluster("dev"), repo.cluster("lab")
    assert (prod.kubeconfig, prod.context, prod.in_cluster, prod.live) == ("/etc/kube/prod", "admin", False, True)
    assert (dev.in_cluster, dev.live) == (True, True)
    assert lab.live is False
    for bad, message in [
        ("      prod: {context: admin}\n", "`context` needs `kubeconfig`"),
        ("      prod: {kubeconfig: /k, in_cluster: true}\n", "either `kubeconfig` or `in_cluster`"),
        ("      prod: {kubeconfig: 3}\n", "`kubeconfig` must be a non-empty string"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load(bad)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for name in ("webhook-secret", "github-token", "app-private-key.pem"):
        (secrets / name).write_text("x\n")
    example = tmp_path / "example.yaml"
    example.write_text((Path(__file__).resolve().parents[2] / "config/fluxwarden.example.yaml").read_text().replace("/var/run/secrets/fluxwarden", str(secrets)))
    clusters = load_service_config(example, {}).repo("home-ops/cluster")
    assert clusters.cluster("prod").live and clusters.cluster("prod").kubeconfig
    assert not clusters.cluster("dev").live
