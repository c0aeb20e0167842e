"""Table-driven tests for every public check id, on small repositories rendered in memory.

Each case is a tiny Flux repo (a `clusters/dev` entry listing Flux Kustomizations, one directory per
tier) that tests/engine/builders.py renders and checks as `fluxwarden check` does, without kustomize,
and asserts the exact set of (check, tier name) pairs the check under test reports: a positive and a
negative case per check and "no false alarms" on sound repos. What needs kustomize itself (patches,
images, a target namespace, its errors), the build cache, the seed incident and the bundled example run
end to end in tests/pipeline/test_check.py, which also shows the in-memory render agree with kustomize's.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pytest

from bot.engine.core.model import Severity
from bot.engine.reporting.report import CheckReport
from tests.engine.builders import check
from tests.fluxrepo import crd, dump, flux_repo, ks, kustomization, obj

# --------------------------------------------------------------------------------------------
# building blocks


def tier_dir(path: str, *objects: Mapping[str, Any]) -> dict[str, str]:
    """A tier directory: kustomization.yaml listing one objects.yaml."""
    return {f"{path}/kustomization.yaml": kustomization("objects.yaml"), f"{path}/objects.yaml": dump(*objects)}


def repo(tiers: Mapping[str, dict[str, Any]], dirs: Mapping[str, Iterable[Mapping[str, Any]]], extra: Mapping[str, str] | None = None, cluster: str = "dev") -> dict[str, str]:
    """flux_repo plus one directory per entry of `dirs` (path -> objects)."""
    files = flux_repo(tiers, cluster=cluster)
    for path, objects in dirs.items():
        files.update(tier_dir(path, *objects))
    files.update(extra or {})
    return files


def cm(name: str = "cfg", namespace: str | None = "default", **data: str) -> dict[str, Any]:
    return obj("v1", "ConfigMap", name, namespace, data=dict(data) or {"k": "v"})


def found(report: CheckReport, check: str) -> set[tuple[str, str | None]]:
    return {(f.check, f.kustomization.name if f.kustomization else None) for f in report.findings if f.check == check}


def severities(report: CheckReport, check: str) -> set[tuple[str, str | None, Severity]]:
    return {(f.check, f.kustomization.name if f.kustomization else None, f.severity) for f in report.findings if f.check == check}


def messages(report: CheckReport, check: str) -> list[str]:
    return [f.message for f in report.findings if f.check == check]


def run(files: Mapping[str, str], cluster: str = "dev") -> CheckReport:
    """The report `fluxwarden check` gives for this repository, rendered in memory (tests/engine/builders.py)."""
    return check(files, cluster)


# CDI: the operator manifest ships only the CDI CRD; StorageProfile/DataVolume CRDs appear at run time.
CDI_CRD = crd("cdi.kubevirt.io", "CDI", "cdis", scope="Cluster")
CDI_CR = obj("cdi.kubevirt.io/v1beta1", "CDI", "cdi", spec={})
PROFILE = obj("cdi.kubevirt.io/v1beta1", "StorageProfile", "longhorn-vm", spec={"cloneStrategy": "snapshot"})
WIDGET_CRD = crd("example.com", "Widget", "widgets")
WIDGET = obj("example.com/v1", "Widget", "w1", "default", spec={})
CERT_MANAGER_NS = obj("v1", "Namespace", "cert-manager")
JETSTACK = obj("source.toolkit.fluxcd.io/v1", "HelmRepository", "jetstack", "cert-manager", spec={"interval": "12h", "url": "https://charts.jetstack.io"})


def cert_manager(crds_enabled: bool = True) -> dict[str, Any]:
    return obj(
        "helm.toolkit.fluxcd.io/v2",
        "HelmRelease",
        "cert-manager",
        "cert-manager",
        spec={
            "interval": "30m",
            "chart": {"spec": {"chart": "cert-manager", "version": "v1.16.2", "sourceRef": {"kind": "HelmRepository", "name": "jetstack"}}},
            "values": {"crds": {"enabled": crds_enabled}},
        },
    )


ISSUER_CRD = crd("cert-manager.io", "ClusterIssuer", "clusterissuers", scope="Cluster")
ISSUER = obj("cert-manager.io/v1", "ClusterIssuer", "letsencrypt", spec={"selfSigned": {}})
CDI_HEALTH = [{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI", "name": "cdi"}]
CM_HEALTH = [{"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "name": "cert-manager", "namespace": "cert-manager"}]


def two_tiers(a_objects, b_objects, *, b_depends=(), a_wait=False, a_spec=None, b_spec=None) -> dict[str, str]:
    """Tier `a` (./a) and tier `b` (./b), b optionally depending on a."""
    return repo(
        {"a": ks("a", "./a", wait=a_wait, **(a_spec or {})), "b": ks("b", "./b", depends_on=b_depends, **(b_spec or {}))},
        {"a": a_objects, "b": b_objects},
    )


def chain(*names: str, edges: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """One tier per name (./<name>, a ConfigMap each) with the given dependsOn edges."""
    return repo(
        {n: ks(n, f"./{n}", depends_on=edges.get(n, ())) for n in names},
        {n: [cm(n)] for n in names},
    )


# --------------------------------------------------------------------------------------------
# dependency-cycle

CYCLE_CASES = [
    pytest.param(chain("a", "b", edges={"a": ["b"], "b": ["a"]}), {("dependency-cycle", "a")}, "flux-system/a → flux-system/b → flux-system/a", id="two-cycle"),
    pytest.param(chain("a", "b", "c", edges={"a": ["b"], "b": ["c"], "c": ["a"]}), {("dependency-cycle", "a")}, "flux-system/a → flux-system/b → flux-system/c → flux-system/a", id="three-cycle"),
    pytest.param(chain("a", "b", edges={"a": ["a"], "b": ["a"]}), {("dependency-cycle", "a")}, "flux-system/a → flux-system/a", id="self-loop"),
    pytest.param(chain("a", "b", "c", edges={"b": ["a"], "c": ["a", "b"]}), set(), None, id="neg-dag"),
]


@pytest.mark.parametrize("files, expected, path", CYCLE_CASES)
def test_dependency_cycle(files, expected, path):
    report = run(files)
    assert found(report, "dependency-cycle") == expected
    if path:
        assert any(path in m for m in messages(report, "dependency-cycle")), messages(report, "dependency-cycle")


# --------------------------------------------------------------------------------------------
# missing-dependency

_SRC = {"sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"}}
MISSING_DEP_CASES = [
    pytest.param(chain("a", "b", edges={"b": ["ghost"]}), {("missing-dependency", "b")}, None, id="unknown-name"),
    pytest.param(
        # b lives in namespace apps; `dependsOn: [{name: a}]` defaults to apps/a, but a is flux-system/a.
        repo({"a": ks("a", "./a"), "b": ks("b", "./b", namespace="apps", depends_on=["a"], **_SRC)}, {"a": [cm("a")], "b": [cm("b")]}),
        {("missing-dependency", "b")},
        "did you mean flux-system/a",
        id="wrong-namespace-hint",
    ),
    pytest.param(
        repo({"a": ks("a", "./a"), "b": ks("b", "./b", namespace="apps", depends_on=["flux-system/a"], **_SRC)}, {"a": [cm("a")], "b": [cm("b")]}),
        set(),
        None,
        id="neg-explicit-namespace",
    ),
    pytest.param(chain("a", "b", edges={"b": ["a"]}), set(), None, id="neg-present"),
    pytest.param(
        # The only flux-system/apps is web's own parent: the hint must not send web to wait for it.
        repo({"apps": ks("apps", "./apps", wait=True)}, {"apps": [ks("web", "./web", namespace="team", depends_on=["apps"], **_SRC)], "web": [cm("w")]}),
        {("missing-dependency", "web")}, "flux-system/apps applies team/web itself: a dependsOn on it deadlocks", id="hint-names-the-parent",
    ),
]


@pytest.mark.parametrize("files, expected, hint", MISSING_DEP_CASES)
def test_missing_dependency(files, expected, hint):
    report = run(files)
    assert found(report, "missing-dependency") == expected
    if hint:
        assert any(hint in m for m in messages(report, "missing-dependency")), messages(report, "missing-dependency")


# A tier that failed to render may have applied the Kustomization a dependsOn names: the render-failed
# is the one error, the dependsOn an info line.
_BROKEN_APPS = {"apps/kustomization.yaml": kustomization("web.yaml", "absent.yaml"), "apps/web.yaml": dump(ks("web", "./web"))}
KNOCK_ON_CASES = [
    pytest.param(
        repo({"apps": ks("apps", "./apps"), "b": ks("b", "./b", depends_on=["web"])}, {"b": [cm("b")], "web": [cm("w")]}, extra=_BROKEN_APPS),
        {("missing-dependency", "b", Severity.INFO)}, "failed to render", id="hidden-by-failed-render",
    ),
    pytest.param(
        # The broken tier reads no Kustomization: it cannot have made web.
        repo({"apps": ks("apps", "./apps"), "b": ks("b", "./b", depends_on=["web"])}, {"b": [cm("b")]},
             extra={"apps/kustomization.yaml": kustomization("cm.yaml", "absent.yaml"), "apps/cm.yaml": dump(cm("a"))}),
        {("missing-dependency", "b", Severity.ERROR)}, "DependencyNotReady forever", id="failed-tier-without-kustomizations",
    ),
    pytest.param(
        repo({"apps": ks("apps", "./nowhere"), "b": ks("b", "./b", depends_on=["web"])}, {"b": [cm("b")]}),
        {("missing-dependency", "b", Severity.ERROR)}, "DependencyNotReady forever", id="failed-tier-path-absent",
    ),
]


@pytest.mark.parametrize("files, expected, needle", KNOCK_ON_CASES)
def test_missing_dependency_knock_on(files, expected, needle):
    report = run(files)
    assert severities(report, "missing-dependency") == expected
    assert any(needle in m for m in messages(report, "missing-dependency")), messages(report, "missing-dependency")
    assert {(f.kustomization.name, f.severity) for f in report.findings if f.check == "render-failed"} == {("apps", Severity.ERROR)}


# --------------------------------------------------------------------------------------------
# second-order-crd, crd-not-ordered, dependency-not-waited, unknown-kind

API_CASES = [
    # second-order-crd
    pytest.param(
        two_tiers([CDI_CRD], [CDI_CR, PROFILE], b_depends=["a"], a_wait=True),
        "second-order-crd", {("second-order-crd", "b")}, "StorageProfile",
        id="second-order/runtime-crd-cr-same-tier",
    ),
    pytest.param(
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], a_wait=True),
        "second-order-crd", {("second-order-crd", "b")}, "StorageProfile",
        id="second-order/cr-in-non-dependency-tier",
    ),
    pytest.param(
        repo({"certs": ks("certs", "./certs", wait=True)}, {"certs": [CERT_MANAGER_NS, JETSTACK, cert_manager(), ISSUER]}),
        "second-order-crd", {("second-order-crd", "certs")}, "ClusterIssuer",
        id="second-order/helmrelease-chart-same-tier",
    ),
    pytest.param(
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], b_depends=["a"], a_wait=True),
        "second-order-crd", set(), None,
        id="second-order/neg-own-tier-depends-and-waits",
    ),
    pytest.param(
        # cert-manager without crds.enabled ships no CRDs: nobody known provides ClusterIssuer.
        repo({"certs": ks("certs", "./certs", wait=True)}, {"certs": [CERT_MANAGER_NS, JETSTACK, cert_manager(False), ISSUER]}),
        "second-order-crd", set(), None,
        id="second-order/neg-chart-crds-disabled",
    ),
    # crd-not-ordered
    pytest.param(
        two_tiers([WIDGET_CRD], [WIDGET]),
        "crd-not-ordered", {("crd-not-ordered", "b")}, "Widget",
        id="crd-not-ordered/git-crd-non-dependency",
    ),
    pytest.param(
        two_tiers([CERT_MANAGER_NS, JETSTACK, cert_manager()], [ISSUER], a_wait=True),
        "crd-not-ordered", {("crd-not-ordered", "b")}, "ClusterIssuer",
        id="crd-not-ordered/chart-non-dependency",
    ),
    pytest.param(
        two_tiers([WIDGET_CRD], [WIDGET], b_depends=["a"]),
        "crd-not-ordered", set(), None,
        id="crd-not-ordered/neg-dependency",
    ),
    pytest.param(
        repo({"a": ks("a", "./a")}, {"a": [cm("a")]}, extra={"clusters/dev/kustomization.yaml": kustomization("a.yaml", "crd.yaml"), "clusters/dev/crd.yaml": dump(WIDGET_CRD), **tier_dir("a", WIDGET)}),
        "crd-not-ordered", set(), None,
        id="crd-not-ordered/neg-crd-in-entry",
    ),
    pytest.param(
        repo(
            {"a": ks("a", "./a"), "x": ks("x", "./x", depends_on=["a"]), "b": ks("b", "./b", depends_on=["x"])},
            {"a": [WIDGET_CRD], "x": [cm("x")], "b": [WIDGET]},
        ),
        "crd-not-ordered", set(), None,
        id="crd-not-ordered/neg-transitive-dependency",
    ),
    pytest.param(
        # Two providers: the chart in a waited dependency is enough, a stray git copy elsewhere does not matter.
        repo(
            {"a": ks("a", "./a", wait=True), "b": ks("b", "./b", depends_on=["a"]), "c": ks("c", "./c")},
            {"a": [CERT_MANAGER_NS, JETSTACK, cert_manager()], "b": [ISSUER], "c": [ISSUER_CRD]},
        ),
        "crd-not-ordered", set(), None,
        id="crd-not-ordered/neg-chart-in-waited-dependency-and-git-copy-elsewhere",
    ),
    # dependency-not-waited
    pytest.param(
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], b_depends=["a"], a_wait=False),
        "dependency-not-waited", {("dependency-not-waited", "b")}, "CDI cdi",
        id="not-waited/trigger-cr-wait-false",
    ),
    pytest.param(
        two_tiers([CERT_MANAGER_NS, JETSTACK, cert_manager()], [ISSUER], b_depends=["a"], a_wait=False),
        "dependency-not-waited", {("dependency-not-waited", "b")}, "HelmRelease cert-manager",
        id="not-waited/helmrelease-wait-false",
    ),
    pytest.param(
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], b_depends=["a"], a_spec={"healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "cdi-operator", "namespace": "cdi"}]}),
        "dependency-not-waited", {("dependency-not-waited", "b")}, "CDI cdi",
        id="not-waited/healthcheck-names-other-object",
    ),
    pytest.param(
        # The cluster entry (flux bootstrap's Kustomization) applies the trigger CR and never waits.
        repo({"b": ks("b", "./b")}, {"b": [PROFILE]}, extra={"clusters/dev/kustomization.yaml": kustomization("b.yaml", "cdi.yaml"), "clusters/dev/cdi.yaml": dump(CDI_CRD, CDI_CR)}),
        "dependency-not-waited", {("dependency-not-waited", "b")}, "flux-system/flux-system",
        id="not-waited/trigger-cr-in-cluster-entry",
    ),
    pytest.param(
        # wait: true on the CDI CR passes at once (no Ready condition kstatus reads): b may fail once.
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], b_depends=["a"], a_wait=True),
        "dependency-not-waited", {("dependency-not-waited", "b")}, "Add a healthCheckExprs entry for CDI",
        id="not-waited/wait-true-on-cr-without-ready-condition",
    ),
    pytest.param(
        two_tiers([CERT_MANAGER_NS, JETSTACK, cert_manager()], [ISSUER], b_depends=["a"], a_wait=True),
        "dependency-not-waited", set(), None,
        id="not-waited/neg-wait-true",
    ),
    pytest.param(
        # healthChecks on the CDI CR passes as soon as it exists (kstatus reads no condition of it).
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], b_depends=["a"], a_spec={"healthChecks": CDI_HEALTH}),
        "dependency-not-waited", {("dependency-not-waited", "b")}, "may fail once",
        id="not-waited/healthcheck-names-cr-without-ready-condition",
    ),
    pytest.param(
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], b_depends=["a"], a_spec={"healthChecks": CDI_HEALTH, "healthCheckExprs": [{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI", "current": "status.phase == 'Deployed'"}]}),
        "dependency-not-waited", set(), None,
        id="not-waited/neg-healthcheck-names-cr-read-by-expr",
    ),
    pytest.param(
        two_tiers([CERT_MANAGER_NS, JETSTACK, cert_manager()], [ISSUER], b_depends=["a"], a_spec={"healthChecks": CM_HEALTH}),
        "dependency-not-waited", set(), None,
        id="not-waited/neg-healthcheck-names-helmrelease",
    ),
    pytest.param(
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], b_depends=["a"], a_wait=True, a_spec={"healthCheckExprs": [{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI", "current": "status.phase == 'Deployed'"}]}),
        "dependency-not-waited", set(), None,
        id="not-waited/neg-wait-and-healthcheckexprs-read-cr",
    ),
    pytest.param(
        # healthCheckExprs alone choose no object to check: without wait or healthChecks a is Ready at once.
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], b_depends=["a"], a_spec={"healthCheckExprs": [{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI", "current": "status.phase == 'Deployed'"}]}),
        "dependency-not-waited", {("dependency-not-waited", "b")}, "neither wait: true nor a healthChecks entry",
        id="not-waited/healthcheckexprs-alone-wait-for-nothing",
    ),
    # unknown-kind
    pytest.param(
        repo({"a": ks("a", "./a")}, {"a": [WIDGET]}),
        "unknown-kind", {("unknown-kind", "a")}, "no CRD for Widget.example.com",
        id="unknown-kind/no-crd-anywhere",
    ),
    pytest.param(
        repo({"a": ks("a", "./a")}, {"a": [PROFILE]}),
        "unknown-kind", {("unknown-kind", "a")}, "cdi-operator",
        id="unknown-kind/runtime-kind-without-trigger",
    ),
    pytest.param(
        repo({"a": ks("a", "./a")}, {"a": [cm("a"), obj("apps/v1", "Deployment", "d", "default", spec={}), JETSTACK, obj("v1", "Namespace", "cert-manager")]}),
        "unknown-kind", set(), None,
        id="unknown-kind/neg-builtin-and-flux-kinds",
    ),
    pytest.param(
        repo({"a": ks("a", "./a")}, {"a": [WIDGET_CRD, WIDGET]}),
        "unknown-kind", set(), None,
        id="unknown-kind/neg-crd-same-tier",
    ),
]


@pytest.mark.parametrize("files, check, expected, needle", API_CASES)
def test_api_availability(files, check, expected, needle):
    report = run(files)
    assert found(report, check) == expected, [(f.check, str(f.kustomization), f.message) for f in report.findings]
    if needle:
        assert any(needle in m for m in messages(report, check)), messages(report, check)


# --------------------------------------------------------------------------------------------
# missing-provider

LONGHORN_VM = obj("storage.k8s.io/v1", "StorageClass", "longhorn-vm", provisioner="driver.longhorn.io")
PVC = obj("v1", "PersistentVolumeClaim", "data", "default", spec={"storageClassName": "longhorn-vm", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}})
DATAVOLUME = obj("cdi.kubevirt.io/v1beta1", "DataVolume", "disk", "default", spec={"source": {"blank": {}}, "storage": {"storageClassName": "longhorn-vm", "resources": {"requests": {"storage": "1Gi"}}}})
CERTIFICATE = obj("cert-manager.io/v1", "Certificate", "web", "default", spec={"secretName": "web-tls", "dnsNames": ["a.example"], "issuerRef": {"kind": "ClusterIssuer", "name": "letsencrypt"}})
INGRESS_CLASS = obj("networking.k8s.io/v1", "IngressClass", "traefik", spec={"controller": "traefik.io/ingress-controller"})
INGRESS = obj("networking.k8s.io/v1", "Ingress", "web", "default", spec={"ingressClassName": "traefik", "rules": [{"host": "a.example"}]})
TEAM_NS = obj("v1", "Namespace", "team")

PROVIDER_CASES = [
    pytest.param(two_tiers([LONGHORN_VM], [PVC]), {("missing-provider", "b")}, ["StorageClass longhorn-vm"], id="pvc-storageclass-non-dependency"),
    pytest.param(
        # The DataVolume needs both the StorageClass and CDI's StorageProfile of the same name.
        two_tiers([LONGHORN_VM, PROFILE], [DATAVOLUME]),
        {("missing-provider", "b")},
        ["StorageClass longhorn-vm", "StorageProfile longhorn-vm"],
        id="datavolume-storageclass-and-profile",
    ),
    pytest.param(two_tiers([ISSUER], [CERTIFICATE]), {("missing-provider", "b")}, ["ClusterIssuer letsencrypt"], id="certificate-clusterissuer"),
    pytest.param(two_tiers([INGRESS_CLASS], [INGRESS]), {("missing-provider", "b")}, ["IngressClass traefik"], id="ingress-class"),
    pytest.param(two_tiers([TEAM_NS], [cm("x", "team")]), {("missing-provider", "b")}, ["Namespace team"], id="namespace-in-other-tier"),
    pytest.param(
        two_tiers([ISSUER], [obj("networking.k8s.io/v1", "Ingress", "web", "default", metadata={"name": "web", "namespace": "default", "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"}}, spec={})]),
        {("missing-provider", "b")}, ["ClusterIssuer letsencrypt (cert-manager.io/cluster-issuer annotation)"], id="ingress-issuer-annotation",
    ),
    pytest.param(repo({"a": ks("a", "./a")}, {"a": [LONGHORN_VM, PVC, TEAM_NS, cm("x", "team")]}), set(), [], id="neg-same-tier"),
    pytest.param(two_tiers([LONGHORN_VM, ISSUER, INGRESS_CLASS, TEAM_NS], [PVC, CERTIFICATE, INGRESS, cm("x", "team")], b_depends=["a"]), set(), [], id="neg-dependency"),
    pytest.param(repo({"b": ks("b", "./b")}, {"b": [PVC, CERTIFICATE, INGRESS, cm("x", "team")]}), set(), [], id="neg-not-in-git"),
    pytest.param(
        # apps creates Namespace team in its first apply stage, before the Kustomization web it also applies exists.
        repo({"apps": ks("apps", "./apps")}, {"apps": [TEAM_NS, ks("web", "./web", namespace="team", **_SRC)], "web": [cm("x", "team")]}),
        set(), [], id="neg-namespace-from-parent",
    ),
    pytest.param(
        # ... and from a grandparent: apps applies infra, which applies web.
        repo({"apps": ks("apps", "./apps")}, {"apps": [TEAM_NS, ISSUER, LONGHORN_VM, ks("infra", "./infra")], "infra": [ks("web", "./web")], "web": [cm("x", "team"), PVC, CERTIFICATE]}),
        set(), [], id="neg-providers-from-ancestors",
    ),
    pytest.param(
        two_tiers([obj("v1", "Namespace", "kube-system", metadata={"name": "kube-system", "labels": {"x": "y"}}), obj("v1", "Namespace", "default")], [cm("x", "kube-system"), cm("y", "default")]),
        set(), [], id="neg-system-namespaces-always-exist",
    ),
    pytest.param(
        # A Kustomization's own namespace exists before it reconciles, and so does Flux's (the entry's):
        # b's objects are fine, but the entry applies the Kustomization team/b before a makes team.
        repo({"a": ks("a", "./a"), "b": ks("b", "./b", namespace="team", **_SRC)}, {"a": [TEAM_NS, obj("v1", "Namespace", "flux-system")], "b": [cm("x", "team"), cm("y", "flux-system")]}),
        {("missing-provider", "flux-system")}, ["1 object (Kustomization/team/b) uses Namespace team"], id="own-and-flux-namespace",
    ),
    pytest.param(
        # The owner is apps' own child: apps cannot depend on it (it would wait forever); move the objects.
        repo({"apps": ks("apps", "./apps")}, {"apps": [PVC, ks("storage", "./storage")], "storage": [LONGHORN_VM]}),
        {("missing-provider", "apps")}, ["flux-system/storage is applied by flux-system/apps itself, so flux-system/apps cannot depend on it"],
        id="owner-is-a-child",
    ),
]


PROVIDER_SEVERITY_CASES = [
    # A StorageClass, ClusterIssuer or IngressClass that arrives later is a delay: the PVC stays Pending, then binds.
    pytest.param(two_tiers([LONGHORN_VM], [PVC]), Severity.INFO, "a delay on a cold start, not a failure", id="storageclass-later-is-a-delay"),
    pytest.param(two_tiers([ISSUER], [CERTIFICATE]), Severity.INFO, "ClusterIssuer exists and its controller acts once it does", id="clusterissuer-later-is-a-delay"),
    # A missing Namespace fails the tier's dry-run: still a warning.
    pytest.param(two_tiers([TEAM_NS], [cm("x", "team")]), Severity.WARNING, "Namespace team", id="namespace-stays-a-warning"),
    # The provider's tier waits for the user's own: if the user waits for its PVC, neither becomes Ready.
    pytest.param(
        repo({"a": ks("a", "./a", depends_on=["b"]), "b": ks("b", "./b", wait=True)}, {"a": [LONGHORN_VM], "b": [PVC]}),
        Severity.WARNING, "flux-system/a waits for flux-system/b itself", id="provider-waits-for-its-user",
    ),
]


@pytest.mark.parametrize("files, severity, needle", PROVIDER_SEVERITY_CASES)
def test_missing_provider_severity(files, severity, needle):
    """bjw-s-labs/home-ops and mirceanton/home-ops: ~30 PVCs each on a StorageClass from a tier they do not depend on.
    Kubernetes accepts them and binds them once the class exists: info, not a warning a Flux expert would dispute."""
    report = run(files)
    [finding] = [f for f in report.findings if f.check == "missing-provider"]
    assert finding.severity is severity and needle in finding.message, (finding.severity, finding.message)


@pytest.mark.parametrize("files, expected, needles", PROVIDER_CASES)
def test_missing_provider(files, expected, needles):
    report = run(files)
    assert found(report, "missing-provider") == expected
    got = messages(report, "missing-provider")
    assert len(got) == len(needles), got
    for needle in needles:
        assert any(needle in m for m in got), (needle, got)


def _advice(report: CheckReport) -> list[str]:
    return [f"{f.kustomization}: {f.message}" for f in report.findings if "dependsOn" in f.message]


# Never advise a Kustomization to depend on its own ancestor or descendant: the child exists only once
# the parent has applied it, so either edge waits forever (or deadlocks with the parent's wait).
PARENT_CASES = [
    pytest.param(
        # A CRD in the parent is applied in its first stage, before the child exists.
        repo({"apps": ks("apps", "./apps")}, {"apps": [WIDGET_CRD, ks("web", "./web")], "web": [WIDGET]}),
        set(), None, id="neg-crd-from-parent",
    ),
    pytest.param(
        # A CRD the operator in the parent creates at run time: the child reconciles before it, whatever the parent waits for.
        repo({"apps": ks("apps", "./apps", wait=True)}, {"apps": [CDI_CRD, CDI_CR, ks("web", "./web")], "web": [PROFILE]}),
        {("dependency-not-waited", "web")}, "Move CDI cdi into a Kustomization of its own", id="runtime-crd-from-parent",
    ),
    pytest.param(
        # The CRD is in a child of the tier that uses the kind.
        repo({"apps": ks("apps", "./apps")}, {"apps": [WIDGET, ks("crds", "./crds")], "crds": [WIDGET_CRD]}),
        {("crd-not-ordered", "apps")}, "flux-system/crds is applied by flux-system/apps itself", id="crd-in-a-child",
    ),
]


@pytest.mark.parametrize("files, expected, needle", PARENT_CASES)
def test_parents_and_children(files, expected, needle):
    report = run(files)
    got = {(f.check, f.kustomization.name) for f in report.findings if f.severity != Severity.INFO}
    assert got == expected, [f.message for f in report.findings]
    if needle:
        assert any(needle in m for m in messages(report, next(iter(expected))[0])), [f.message for f in report.findings]
    for advice in _advice(report):
        # web's parent is apps, and crds' parent is apps: no "dependsOn: flux-system/apps" for web, none on crds for apps.
        assert "Add dependsOn: flux-system/apps" not in advice and "Add dependsOn: flux-system/crds" not in advice, advice


# --------------------------------------------------------------------------------------------
# duplicate-object


def _annotated(name: str, **annotations: str) -> dict[str, Any]:
    return obj("v1", "ConfigMap", name, "default", metadata={"name": name, "namespace": "default", "annotations": annotations}, data={"k": "v"})


_KUBECONFIG = {"secretRef": {"name": "spoke-kubeconfig"}}
DUPLICATE_CASES = [
    pytest.param(
        # A pruned ConfigMap comes back with the other's next reconcile: a warning.
        two_tiers([cm("shared")], [cm("shared")]), {("duplicate-object", "a", Severity.WARNING)}, "until the next reconcile re-creates it", id="same-object-two-tiers",
    ),
    pytest.param(
        # A pruned Namespace takes everything in it: an error.
        two_tiers([obj("v1", "Namespace", "media")], [obj("v1", "Namespace", "media")]),
        {("duplicate-object", "a", Severity.ERROR)}, "which no re-apply restores", id="namespace-is-error",
    ),
    pytest.param(
        # Grouped by the tiers that share them: one finding for both objects.
        two_tiers([cm("x"), cm("y"), cm("a")], [cm("x"), cm("y"), cm("b")]),
        {("duplicate-object", "a", Severity.WARNING)}, "2 objects (ConfigMap/default/x, ConfigMap/default/y)", id="grouped",
    ),
    pytest.param(
        two_tiers([cm("shared")], [cm("shared")], a_spec={"prune": False}, b_spec={"prune": False}),
        {("duplicate-object", "a", Severity.WARNING)}, "none of them prunes it", id="no-pruner-is-warning",
    ),
    pytest.param(
        two_tiers([_annotated("shared", **{"kustomize.toolkit.fluxcd.io/prune": "Disabled"})], [_annotated("shared", **{"kustomize.toolkit.fluxcd.io/prune": "disabled"})]),
        {("duplicate-object", "a", Severity.WARNING)}, "none of them prunes it", id="prune-disabled-is-warning",
    ),
    pytest.param(two_tiers([cm("shared", "one")], [cm("shared", "two")]), set(), None, id="neg-other-namespace"),
    pytest.param(
        two_tiers([cm("shared")], [_annotated("shared", **{"kustomize.toolkit.fluxcd.io/ssa": "IfNotPresent"})]),
        set(), None, id="neg-if-not-present",
    ),
    pytest.param(
        # The same path for two clusters: the spoke's copy goes to another API server.
        repo({"a": ks("a", "./shared"), "b": ks("b", "./shared", kubeConfig=_KUBECONFIG)}, {"shared": [cm("shared")]}),
        set(), None, id="neg-other-cluster-kubeconfig",
    ),
    pytest.param(
        # ... and so do the Kustomizations the spoke tier applies there.
        repo({"a": ks("a", "./shared"), "b": ks("b", "./spoke", kubeConfig=_KUBECONFIG)}, {"shared": [cm("shared")], "spoke": [ks("c", "./shared")]}),
        set(), None, id="neg-child-of-kubeconfig-tier",
    ),
    pytest.param(
        # A Kustomization applied twice is the render's "with different specs" warning.
        repo({"a": ks("a", "./a"), "b": ks("b", "./b")}, {"a": [ks("c", "./c")], "b": [ks("c", "./c")], "c": [cm("c")]}),
        set(), None, id="neg-kustomization-objects",
    ),
]


@pytest.mark.parametrize("files, expected, needle", DUPLICATE_CASES)
def test_duplicate_object(files, expected, needle):
    report = run(files)
    assert severities(report, "duplicate-object") == expected, messages(report, "duplicate-object")
    if needle:
        assert any(needle in m for m in messages(report, "duplicate-object")), messages(report, "duplicate-object")


# --------------------------------------------------------------------------------------------
# literal-token, undefined-variable

VARS_CM = cm("cluster-vars", "flux-system", CLUSTER_NAME="dev")
FROM_VARS = {"substituteFrom": [{"kind": "ConfigMap", "name": "cluster-vars"}]}


def vars_repo(objects, post_build=None, *, vars_in_git=True) -> dict[str, str]:
    """Tier `a` (./a) with `objects` and the given postBuild; cluster-vars rendered by the entry."""
    files = repo({"a": ks("a", "./a", post_build=post_build)}, {"a": objects})
    if vars_in_git:
        files["clusters/dev/kustomization.yaml"] = kustomization("a.yaml", "vars.yaml")
        files["clusters/dev/vars.yaml"] = dump(VARS_CM)
    return files


LITERAL_CASES = [
    pytest.param(vars_repo([cm("a", k="${CLUSTER_NAME}")]), {("literal-token", "a")}, "no spec.postBuild", id="no-postbuild"),
    pytest.param(vars_repo([cm("a", k="${CLUSTER_NAME}")], {"substitute": {}}), {("literal-token", "a")}, "loads no variable", id="postbuild-without-variables"),
    pytest.param(
        vars_repo([obj("v1", "ConfigMap", "a", "default", metadata={"name": "a", "namespace": "default", "labels": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}}, data={"k": "${CLUSTER_NAME}"})]),
        set(), None, id="neg-substitute-disabled-label",
    ),
    pytest.param(
        # The only source is not in git: its variables are unknown, so substitution may well run.
        vars_repo([cm("a", k="${CLUSTER_NAME}")], {"substituteFrom": [{"kind": "Secret", "name": "external", "optional": True}]}),
        set(), None, id="neg-optional-external-source",
    ),
    pytest.param(
        vars_repo([obj("v1", "ConfigMap", "a", "default", metadata={"name": "a", "namespace": "default", "annotations": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}}, data={"k": "${CLUSTER_NAME}"})]),
        set(), None, id="neg-substitute-disabled",
    ),
    pytest.param(vars_repo([cm("a", k="$${CLUSTER_NAME}")]), set(), None, id="neg-escaped"),
    pytest.param(vars_repo([cm("a", k="${CLUSTER_NAME}")], FROM_VARS), set(), None, id="neg-substituted"),
    pytest.param(vars_repo([cm("a", **{"run.sh": "echo ${HOME}"})]), set(), None, id="neg-configmap-file-key"),
]


@pytest.mark.parametrize("files, expected, needle", LITERAL_CASES)
def test_literal_token(files, expected, needle):
    report = run(files)
    assert found(report, "literal-token") == expected
    if needle:
        assert any(needle in m for m in messages(report, "literal-token")), messages(report, "literal-token")


def test_literal_token_optional_external_source_is_reported_as_unchecked():
    report = run(vars_repo([cm("a", k="${CLUSTER_NAME}")], {"substituteFrom": [{"kind": "Secret", "name": "external", "optional": True}]}))
    assert found(report, "substitution-source-external") == {("substitution-source-external", "a")}
    assert not [f for f in report.findings if f.severity == Severity.ERROR]


# Severity: Flux ships a `${…}` from a tier without postBuild unchanged, often on purpose (a runner config
# or Helm values reading the program's environment): an error only when the cluster substitutes that
# variable in other tiers (a forgotten postBuild) or the tier has a postBuild that loads nothing.
_SUBSTITUTING = {"b": ks("b", "./b", post_build={"substitute": {"DOMAIN": "example.net"}})}
LITERAL_SEVERITY_CASES = [
    pytest.param(
        repo({"a": ks("a", "./a"), **_SUBSTITUTING}, {"a": [cm("a", k="https://auth.${DOMAIN}")], "b": [cm("b", k="${DOMAIN}")]}),
        {("literal-token", "a", Severity.ERROR)}, "1 other tier (flux-system/b) substitutes ${DOMAIN}", id="cluster-variable-without-postbuild",
    ),
    pytest.param(
        repo({"a": ks("a", "./a"), **_SUBSTITUTING}, {"a": [cm("a", k="labels: env-${ENV_ID}")], "b": [cm("b", k="${DOMAIN}")]}),
        {("literal-token", "a", Severity.INFO)}, "ships as written", id="runtime-variable-without-postbuild-is-info",
    ),
    pytest.param(
        # Open sources: a variable used (undefined in git) by a substituting tier is still the cluster's.
        repo(
            {"a": ks("a", "./a"), "b": ks("b", "./b", post_build={"substitute": {"APP": "b"}, "substituteFrom": [{"kind": "Secret", "name": "cluster-secrets"}]})},
            {"a": [cm("a", k="https://auth.${SECRET_DOMAIN}")], "b": [cm("b", k="${SECRET_DOMAIN}")]},
        ),
        {("literal-token", "a", Severity.ERROR)}, "${SECRET_DOMAIN}", id="variable-from-external-source-elsewhere",
    ),
    pytest.param(
        vars_repo([cm("a", k="${CLUSTER_NAME}")], {"substitute": {}}),
        {("literal-token", "a", Severity.ERROR)}, "loads no variable", id="postbuild-without-variables-is-error",
    ),
    pytest.param(
        # No program reads a name: the API server refuses it.
        repo({"a": ks("a", "./a")}, {"a": [obj("v1", "Namespace", "${TENANT}")]}),
        {("literal-token", "a", Severity.ERROR)}, "the API server refuses `${…}` in metadata.name", id="token-in-a-name",
    ),
]


@pytest.mark.parametrize("files, expected, needle", LITERAL_SEVERITY_CASES)
def test_literal_token_severity(files, expected, needle):
    report = run(files)
    assert severities(report, "literal-token") == expected, messages(report, "literal-token")
    assert any(needle in m for m in messages(report, "literal-token")), messages(report, "literal-token")


UNDEFINED_CASES = [
    pytest.param(vars_repo([cm("a", k="${CLUSTER_DOMAIN}")], FROM_VARS), {("undefined-variable", "a", Severity.ERROR)}, id="source-in-git-lacks-it"),
    pytest.param(vars_repo([cm("a", k="${MISSING}")], {"substitute": {"X": "1"}}, vars_in_git=False), {("undefined-variable", "a", Severity.ERROR)}, id="inline-substitute-lacks-it"),
    pytest.param(
        vars_repo([cm("a", k="${CLUSTER_DOMAIN}")], {"substitute": {"X": "1"}, "substituteFrom": [{"kind": "Secret", "name": "external", "optional": True}]}),
        {("undefined-variable", "a", Severity.INFO)},
        id="open-set-is-info",
    ),
    pytest.param(vars_repo([cm("a", k="${CLUSTER_NAME}")], FROM_VARS), set(), id="neg-defined"),
    pytest.param(vars_repo([cm("a", k="${CLUSTER_DOMAIN:=example.net}")], FROM_VARS), set(), id="neg-default"),
    pytest.param(vars_repo([cm("a", k="${X}")], {**FROM_VARS, "substitute": {"X": "1"}}), set(), id="neg-inline-defined"),
]


@pytest.mark.parametrize("files, expected", UNDEFINED_CASES)
def test_undefined_variable(files, expected):
    report = run(files)
    got = {(f.check, f.kustomization.name, f.severity) for f in report.findings if f.check == "undefined-variable"}
    assert got == expected


# --------------------------------------------------------------------------------------------
# graph-drift


def clusters(dev_tiers, prod_tiers, dirs) -> dict[str, str]:
    files = repo(dev_tiers, dirs)
    files.update(flux_repo(prod_tiers, cluster="prod"))
    return files


_AB = {"a": [cm("a")], "b": [cm("b")]}
_DRIFT_IGNORE = ".fluxwarden.yaml"
DRIFT_CASES = [
    pytest.param(
        clusters({"a": ks("a", "./a"), "b": ks("b", "./b", depends_on=["a"])}, {"a": ks("a", "./a"), "b": ks("b", "./b")}, _AB),
        {("graph-drift", "b")}, "flux-system/b dependsOn flux-system/a in dev but not in prod, which has both", id="edge",
    ),
    pytest.param(
        clusters({"a": ks("a", "./a", wait=True), "b": ks("b", "./b")}, {"a": ks("a", "./a", wait=False), "b": ks("b", "./b")}, _AB),
        {("graph-drift", "a")}, "flux-system/a has wait: true in dev but not in prod", id="wait",
    ),
    pytest.param(
        clusters({"a": ks("a", "./a", prune=False), "b": ks("b", "./b")}, {"a": ks("a", "./a"), "b": ks("b", "./b")}, _AB),
        {("graph-drift", "a")}, "flux-system/a has prune: true in prod but not in dev", id="prune",
    ),
    pytest.param(
        # Clusters differ on purpose: a tier only one has, and its edges, break nothing in the other.
        clusters({"a": ks("a", "./a"), "b": ks("b", "./b", depends_on=["a"])}, {"a": ks("a", "./a")}, _AB),
        set(), None, id="neg-node-only-in-one",
    ),
    pytest.param(
        # b dependsOn a only in dev, but prod has no a: nothing to order there.
        clusters({"a": ks("a", "./a"), "b": ks("b", "./b", depends_on=["a"])}, {"b": ks("b", "./b")}, _AB),
        set(), None, id="neg-edge-to-tier-only-in-one",
    ),
    pytest.param(
        clusters({"a": ks("a", "./a"), "b": ks("b", "./b")}, {"a": ks("a", "./a-prod"), "b": ks("b", "./b")}, {**_AB, "a-prod": [cm("a")]}),
        set(), None, id="neg-path-differs",
    ),
    pytest.param(
        clusters({"a": ks("a", "./a"), "b": ks("b", "./b", depends_on=["a"])}, {"a": ks("a", "./a"), "b": ks("b", "./b", depends_on=["a"])}, _AB),
        set(), None, id="neg-identical",
    ),
    pytest.param(
        # A Kustomization applied by a tier, not by the entry: the other cluster's graph must find it too.
        clusters({"a": ks("a", "./a"), "b": ks("b", "./b")}, {"a": ks("a", "./a2"), "b": ks("b", "./b")},
                 {"a": [ks("c", "./b")], "a2": [ks("c", "./b", depends_on=["b"])], "b": [cm("b")]}),
        {("graph-drift", "c")}, "flux-system/c dependsOn flux-system/b in prod but not in dev", id="nested-edge",
    ),
    pytest.param(
        {**clusters({"a": ks("a", "./a", prune=False), "b": ks("b", "./b", depends_on=["a"])}, {"a": ks("a", "./a"), "b": ks("b", "./b")}, _AB),
         _DRIFT_IGNORE: "graph_drift:\n  ignore:\n    - {tier: a, field: prune}\n    - {tier: flux-system/b, dependsOn: a, clusters: [prod]}\n"},
        set(), None, id="neg-declared-intended",
    ),
    pytest.param(
        {**clusters({"a": ks("a", "./a", prune=False), "b": ks("b", "./b", depends_on=["a"])}, {"a": ks("a", "./a"), "b": ks("b", "./b")}, _AB),
         _DRIFT_IGNORE: "graph_drift:\n  ignore:\n    - {tier: a, field: wait}\n    - {tier: b, dependsOn: other}\n    - {tier: '*', clusters: [staging]}\n"},
        {("graph-drift", "a"), ("graph-drift", "b")}, None, id="declared-for-other-differences",
    ),
]


@pytest.mark.parametrize("files, expected, needle", DRIFT_CASES)
def test_graph_drift(files, expected, needle):
    report = run(files)
    assert found(report, "graph-drift") == expected, messages(report, "graph-drift")
    if needle:
        assert any(needle in m for m in messages(report, "graph-drift")), messages(report, "graph-drift")
    for finding in report.findings:
        if finding.check == "graph-drift":
            assert finding.location is not None, finding


def test_graph_drift_points_at_the_cluster_that_lacks_the_edge():
    # dev's c (written in a/objects.yaml) lacks the dependsOn that prod's c (a2/objects.yaml) has.
    report = run(DRIFT_CASES[7].values[0])
    assert [str(f.location) for f in report.findings if f.check == "graph-drift"] == ["a/objects.yaml:1"]


# --------------------------------------------------------------------------------------------
# tier-order-stale

TIER_ORDER_CONFIG = "tier_order: {file: bootstrap/standup.sh, variable: TIER_ORDER}\n"


def ordered(script: str) -> dict[str, str]:
    files = chain("a", "b", "c", edges={"b": ["a"], "c": ["b"]})
    files[".fluxwarden.yaml"] = TIER_ORDER_CONFIG
    files["bootstrap/standup.sh"] = script
    return files


TIER_ORDER_CASES = [
    pytest.param(ordered("TIER_ORDER=(a b)\n"), {("tier-order-stale", "c")}, "c is not listed", id="missing-tier"),
    pytest.param(ordered("TIER_ORDER=(\n  a\n  c\n  b\n)\n"), {("tier-order-stale", "c")}, "c is listed before b", id="wrong-order"),
    pytest.param(ordered("#!/bin/sh\n"), {("tier-order-stale", None)}, "TIER_ORDER", id="variable-absent"),
    pytest.param(ordered("TIER_ORDER=(a b c)\n"), set(), None, id="neg-correct"),
    pytest.param(chain("a", "b", edges={"b": ["a"]}), set(), None, id="neg-not-configured"),
]


@pytest.mark.parametrize("files, expected, needle", TIER_ORDER_CASES)
def test_tier_order_stale(files, expected, needle):
    report = run(files)
    assert found(report, "tier-order-stale") == expected
    if needle:
        assert any(needle in m for m in messages(report, "tier-order-stale")), messages(report, "tier-order-stale")


# --------------------------------------------------------------------------------------------
# no false alarms


SOUND_CASES = [
    pytest.param(
        two_tiers([CDI_CRD, CDI_CR], [PROFILE], b_depends=["a"], a_wait=True, a_spec={"healthCheckExprs": [{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI", "current": "status.phase == 'Deployed'"}]}),
        id="runtime-crd-upstream-wait",
    ),
    pytest.param(two_tiers([CERT_MANAGER_NS, JETSTACK, cert_manager()], [ISSUER], b_depends=["a"], a_wait=True), id="chart-crd-upstream-wait"),
    pytest.param(two_tiers([WIDGET_CRD], [WIDGET], b_depends=["a"]), id="git-crd-upstream"),
    pytest.param(repo({"a": ks("a", "./a")}, {"a": [WIDGET_CRD, WIDGET, CDI_CRD, CDI_CR]}), id="crd-same-tier"),
]


@pytest.mark.parametrize("files", SOUND_CASES)
def test_no_false_alarms(files):
    report = run(files)
    # A chart no test can fetch (no network) is a note that its CRDs come from the knowledge base, not an alarm.
    assert [(f.check, str(f.kustomization), f.message) for f in report.findings if not _chart_note(f)] == []


def _chart_note(finding) -> bool:
    return finding.check == "chart-not-rendered" and finding.severity is Severity.INFO


def test_tier_order_is_judged_against_every_cluster() -> None:
    """A tier only prod has may be listed; dev's check must not call it unknown (one list serves both)."""
    files = {
        ".fluxwarden.yaml": "clusters: {dev: {path: clusters/dev}, prod: {path: clusters/prod}}\ntier_order: {file: standup.sh, variable: TIERS}\n",
        "standup.sh": "TIERS=(base prod-only)\n",
        "clusters/dev/kustomization.yaml": kustomization("base.yaml"),
        "clusters/dev/base.yaml": dump(ks("base", "./base")),
        "clusters/prod/kustomization.yaml": kustomization("base.yaml", "prod-only.yaml"),
        "clusters/prod/base.yaml": dump(ks("base", "./base")),
        "clusters/prod/prod-only.yaml": dump(ks("prod-only", "./base", depends_on=["base"])),
        "base/kustomization.yaml": kustomization(),
    }
    for cluster in ("dev", "prod"):
        report = run(files, cluster)
        assert [f for f in report.findings if f.check == "tier-order-stale"] == []


def test_text_output_lists_parents_before_their_children():
    """aaa/web sorts first by name and depends on nothing, but apps applies it: apps is listed first."""
    from bot.engine.reporting.report import format_text

    files = repo(
        {"apps": ks("apps", "./apps"), "zz": ks("zz", "./zz")},
        {"apps": [obj("v1", "Namespace", "aaa"), ks("web", "./web", namespace="aaa", depends_on=["flux-system/zz"], **_SRC)], "web": [cm("w")], "zz": [cm("z")]},
    )
    text = format_text(run(files))
    listed = [line.split()[0] for line in text.split("in apply order:\n", 1)[1].split("\n\n")[0].splitlines()]
    assert listed == ["flux-system/flux-system", "flux-system/apps", "flux-system/zz", "aaa/web"]


# --------------------------------------------------------------------------------------------
# invalid-name

HOSTILE = "x\n\n<!-- fluxwarden:precheck:prod -->\n### ✅ fake\n</details>\n@octocat `a|b`"


@pytest.mark.parametrize(
    "objects,expected",
    [
        pytest.param([cm("fine.name-1"), obj("v1", "Service", "web", "default"), obj("v1", "Namespace", "apps")], [], id="valid"),
        pytest.param([obj("rbac.authorization.k8s.io/v1", "ClusterRole", "system:aggregate-to-view")], [], id="rbac-path-segment"),
        pytest.param([cm("app-${CLUSTER:=dev}")], [], id="variable-left-to-substitution"),
        pytest.param([cm(HOSTILE)], [("ConfigMap", "name")], id="hostile"),
        pytest.param([cm("MyConfig")], [("ConfigMap", "name")], id="upper-case"),
        pytest.param([cm("a" * 254)], [("ConfigMap", "name")], id="too-long"),
        pytest.param([obj("v1", "Service", "1web", "default")], [("Service", "name")], id="service-dns-1035"),
        pytest.param([obj("v1", "Namespace", "a.b")], [("Namespace", "name")], id="namespace-label"),
        pytest.param([cm("ok", namespace="Bad_NS")], [("ConfigMap", "namespace")], id="bad-namespace"),
        pytest.param([obj("rbac.authorization.k8s.io/v1", "Role", "a/b", "default")], [("Role", "name")], id="rbac-slash"),
    ],
)
def test_invalid_name(objects, expected):
    report = run(repo({"apps": ks("apps", "./apps")}, {"apps": objects}))
    got = [f for f in report.findings if f.check == "invalid-name"]
    assert [(f.object.kind, f.message.split(" ", 2)[1]) for f in got] == expected
    for f in got:
        assert f.severity == Severity.ERROR and f.kustomization.name == "apps"
        assert "\n" not in f.message and "the API server refuses the object" in f.message


@pytest.mark.parametrize("in_git, expected", [
    pytest.param(False, [], id="cluster-only-secret-not-judged"),
    pytest.param(True, [("Certificate", "name")], id="defined-empty-in-git-is-judged"),
])
def test_a_name_built_from_a_variable_the_cluster_may_define(in_git, expected):
    """ahgraber/homelab-gitops-k3s: `${SECRET_DOMAIN/./-}-production` from a Secret the bootstrap makes from
    1Password (not in git). Here it reads "-production", not the name Flux applies: no invalid-name. With the
    Secret in git and no SECRET_DOMAIN in it, Flux too substitutes "" and the API server refuses the name."""
    post_build = {"postBuild": {"substituteFrom": [{"kind": "Secret", "name": "cluster-secrets"}]}}
    cert = obj("cert-manager.io/v1", "Certificate", "${SECRET_DOMAIN/./-}-production", "network", spec={"secretName": "tls"})
    secret = [obj("v1", "Secret", "cluster-secrets", "flux-system", stringData={"OTHER": "x"})] if in_git else []
    files = repo({"secrets": ks("secrets", "./secrets"), "apps": ks("apps", "./apps", **post_build)}, {"secrets": secret or [cm()], "apps": [cert]})
    report = run(files)
    got = [f for f in report.findings if f.check == "invalid-name"]
    assert [(f.object.kind, f.message.split(" ", 2)[1]) for f in got] == expected, [f.message for f in report.findings]


def test_a_kustomization_with_a_hostile_name_is_an_invalid_name():
    report = run(repo({"apps": ks("apps", "./apps"), "evil": ks(HOSTILE, "./evil")}, {"apps": [cm()], "evil": [cm()]}))
    [finding] = [f for f in report.findings if f.check == "invalid-name"]
    assert finding.object.kind == "Kustomization" and finding.object.name == HOSTILE
    assert "\\n\\n<!-- fluxwarden:precheck:prod -->" in finding.message  # shown escaped, on one line


# --------------------------------------------------------------------------------------------
# unknown-kind: judged by the graph (shaped like bjw-s-labs/home-ops: an operator HelmRelease whose chart
# we cannot read, health-checked by its tier, and apps that dependsOn that tier)

RESTORE = obj("kopiur.home-operations.com/v1alpha1", "Restore", "paperless", "default", spec={})


def oci_release(name: str, namespace: str = "default", url: str | None = None) -> list[dict[str, Any]]:
    """A HelmRelease on an OCIRepository chartRef (the chart is not in the knowledge base)."""
    return [
        obj("source.toolkit.fluxcd.io/v1", "OCIRepository", name, namespace, spec={"interval": "1h", "url": url or f"oci://ghcr.io/example/charts/{name}", "ref": {"tag": "1.0.0"}}),
        obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", name, namespace, spec={"interval": "1h", "chartRef": {"kind": "OCIRepository", "name": name}}),
    ]


POLICY = obj("kyverno.io/v1", "ClusterPolicy", "verify-flux-images", spec={})
KYVERNO_SOURCE = [
    obj("source.toolkit.fluxcd.io/v1beta2", "OCIRepository", "kyverno-controller", "flux-system", spec={"interval": "2h", "url": "oci://ghcr.io/kyverno/manifests/kyverno", "ref": {"tag": "v1.14.4"}}),
    ks("kyverno-controller", "./", source="kyverno-controller", source_kind="OCIRepository", wait=True),
]
OPAQUE = ks("opaque", "./", source="kyverno-controller", source_kind="OCIRepository", wait=True)

HR_HEALTH = lambda name, ns="default": [{"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "name": name, "namespace": ns}]  # noqa: E731

UNKNOWN_GRAPH_CASES = [
    pytest.param(
        two_tiers(oci_release("kopiur"), [RESTORE], b_depends=["a"], a_spec={"healthChecks": HR_HEALTH("kopiur")}),
        {("unknown-kind", "b", Severity.INFO)}, "assumed served: dependsOn flux-system/a → HelmRelease default/kopiur (named for kopiur.home-operations.com), chart kopiur not known",
        id="waited-helmrelease-of-unknown-chart",
    ),
    pytest.param(
        # mirceanton/home-ops: hostzero's keycloak-operator chart shares its name with keycloak.org's (known, other group).
        two_tiers(oci_release("keycloak-operator"), [obj("keycloak.hostzero.com/v1beta1", "KeycloakClient", "c", "default", spec={})], b_depends=["a"], a_wait=True),
        {("unknown-kind", "b", Severity.INFO)}, "chart keycloak-operator (its namesake in the knowledge base does not ship it)",
        id="named-release-whose-known-namesake-is-another-chart",
    ),
    pytest.param(
        # A waited application chart (bjw-s app-template) not named for the group proves nothing.
        two_tiers(oci_release("app-template") , [RESTORE], b_depends=["a"], a_wait=True),
        {("unknown-kind", "b", Severity.WARNING)}, "no dependency of this tier proves it served",
        id="neg-generic-application-chart-proves-nothing",
    ),
    pytest.param(
        two_tiers(oci_release("kopiur"), [RESTORE], b_depends=["a"], a_wait=True),
        {("unknown-kind", "b", Severity.INFO)}, "HelmRelease default/kopiur",
        id="wait-true-covers-the-helmrelease",
    ),
    pytest.param(
        two_tiers([cm("a")], [RESTORE], b_depends=["a"], a_spec={"healthChecks": [{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "name": "restores.kopiur.home-operations.com"}]}),
        {("unknown-kind", "b", Severity.INFO)}, "healthChecks CustomResourceDefinition/restores.kopiur.home-operations.com",
        id="dependency-health-checks-the-crd",
    ),
    pytest.param(
        two_tiers([obj("kopiur.home-operations.com/v1alpha1", "Restore", "other", "default", spec={})], [RESTORE], b_depends=["a"]),
        {("unknown-kind", "b", Severity.INFO), ("unknown-kind", "a", Severity.WARNING)}, "which applies Restore objects itself",
        id="dependency-applies-the-kind-itself",
    ),
    # fluxcd/flux2-multi-tenancy: `kyverno` (wait: true) applies `kyverno-controller`, a Kustomization of an
    # OCIRepository of kyverno's release manifests; `kyverno-policies` dependsOn `kyverno` and applies ClusterPolicies.
    pytest.param(
        two_tiers(KYVERNO_SOURCE, [POLICY], b_depends=["a"], a_wait=True),
        {("unknown-kind", "b", Severity.INFO)},
        "assumed served: dependsOn flux-system/a → Kustomization flux-system/kyverno-controller (named for kyverno.io), content from OCIRepository kyverno-controller not rendered",
        id="waited-child-kustomization-of-another-source",
    ),
    pytest.param(
        repo({"a": ks("a", "./a"), "b": ks("b", "./b", depends_on=["opaque"])}, {"a": KYVERNO_SOURCE[:1] + [OPAQUE], "b": [POLICY]}),
        {("unknown-kind", "b", Severity.INFO)}, "dependsOn flux-system/opaque → Kustomization flux-system/opaque (named for kyverno.io), content from OCIRepository kyverno-controller",
        id="direct-dependency-on-a-kustomization-of-another-source",
    ),
    pytest.param(
        # Not waited: kyverno-controller may not have applied yet when `a` is Ready.
        two_tiers(KYVERNO_SOURCE, [POLICY], b_depends=["a"]),
        {("unknown-kind", "b", Severity.WARNING)}, "no dependency of this tier proves it served",
        id="neg-child-of-another-source-not-waited",
    ),
    pytest.param(
        # Not waited: the HelmRelease proves nothing; the hint names the tier whose release is named for the group.
        two_tiers(oci_release("kopiur"), [RESTORE]),
        {("unknown-kind", "b", Severity.WARNING)}, "Add dependsOn: flux-system/a (its HelmRelease is named for kopiur.home-operations.com",
        id="neg-no-dependency-hint-names-likely-provider",
    ),
]


@pytest.mark.parametrize("files, expected, needle", UNKNOWN_GRAPH_CASES)
def test_unknown_kind_judged_by_the_graph(files, expected, needle):
    report = run(files)
    assert severities(report, "unknown-kind") == expected, [(f.check, str(f.kustomization), f.message) for f in report.findings]
    assert any(needle in m for m in messages(report, "unknown-kind")), messages(report, "unknown-kind")


# toboshii/home-ops: the `crds` tier applies `crds-kube-prometheus-stack`, a Kustomization of a GitRepository of
# prometheus-community/helm-charts that keeps only `charts/kube-prometheus-stack/crds`; `apps` runs
# kube-prometheus-stack's chart and applies PrometheusRules.
KPS_CRDS_SOURCE = [
    obj("source.toolkit.fluxcd.io/v1", "GitRepository", "kube-prometheus-stack-source", "flux-system", spec={
        "interval": "12h", "url": "https://github.com/prometheus-community/helm-charts.git", "ref": {"tag": "kube-prometheus-stack-39.4.0"},
        "ignore": "# exclude all\n/*\n# include crd directory\n!/charts/kube-prometheus-stack/crds\n",
    }),
    ks("crds-kube-prometheus-stack", "./charts/kube-prometheus-stack/crds", source="kube-prometheus-stack-source", wait=True),
]
KPS_RULE = obj("monitoring.coreos.com/v1", "PrometheusRule", "flux", "default", spec={"groups": []})
KPS_RELEASE = obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", "kube-prometheus-stack", "monitoring", spec={
    "interval": "1h", "chart": {"spec": {"chart": "kube-prometheus-stack", "sourceRef": {"kind": "HelmRepository", "name": "prometheus-community"}}},
})


@pytest.mark.parametrize("a_wait, check, severity", [
    pytest.param(True, None, None, id="waited-crds-tier-orders-them"),
    pytest.param(False, "crd-not-ordered", Severity.WARNING, id="crds-tier-not-waited-can-race"),
])
def test_a_chart_s_crds_applied_from_its_own_repository_provide_them(a_wait, check, severity):
    """The PrometheusRule beside kube-prometheus-stack's HelmRelease is no deadlock (second-order-crd) when a
    dependency applies the chart's crds/ from its repository: that tier provides them (as known), and only its
    ordering is judged."""
    files = two_tiers(KPS_CRDS_SOURCE, [KPS_RELEASE, KPS_RULE], b_depends=["a"], a_wait=a_wait)
    report = run(files)
    judged = {(f.check, f.severity) for f in report.findings if f.check in ("second-order-crd", "crd-not-ordered", "unknown-kind") and "PrometheusRule" in f.message}
    assert ("second-order-crd", Severity.ERROR) not in judged, [f.message for f in report.findings]
    assert {(c, sv) for c, sv in judged if sv is not Severity.INFO} == ({(check, severity)} if check else set()), [f.message for f in report.findings]


def test_unknown_kind_is_one_finding_per_kind_listing_tiers():
    files = repo(
        {n: ks(n, f"./{n}") for n in ("a", "b", "c")},
        {"a": [RESTORE], "b": [obj("kopiur.home-operations.com/v1alpha1", "Restore", "b1", "default", spec={})], "c": [cm("c")]},
    )
    report = run(files)
    unknown = [f for f in report.findings if f.check == "unknown-kind"]
    assert len(unknown) == 1, [f.message for f in unknown]
    assert unknown[0].severity is Severity.WARNING
    assert "2 Restore objects (b1, paperless) in flux-system/a, flux-system/b" in unknown[0].message
    # No bootstrap and no likely provider: the hint names the dependsOn, the declaration, and runtime_crds last.
    assert "Add a dependsOn on the tier that installs its CRD" in unknown[0].message
    assert "runtime_crds only if an operator creates it at run time" in unknown[0].message


def test_cr_whose_chart_is_installed_by_a_child_tier_deadlocks():
    """A tier applies CRs whose CRD only a HelmRelease in a Kustomization it applies itself can install: its
    final stage's dry-run fails, the child is never written, the chart never installed (mirceanton-shaped)."""
    files = repo(
        {"infra": ks("infra", "./infra")},
        {"infra": [ISSUER, ks("cert-manager", "./cert-manager")], "cert-manager": [CERT_MANAGER_NS, JETSTACK, cert_manager()]},
    )
    report = run(files)
    errors = [f for f in report.findings if f.severity is Severity.ERROR and f.check == "crd-not-ordered"]
    assert [(f.kustomization.name, f.object.kind) for f in errors] == [("infra", "ClusterIssuer")], [f.message for f in report.findings]
    assert "never becomes Ready" in errors[0].message
    assert "flux-system/cert-manager is applied by flux-system/infra itself" in errors[0].message


# -- Crossplane providers: a package serves its own API groups (issue 22, part 4) -----------------------


def _crossplane_platform(*packages: str) -> dict[str, str]:
    """A platform repo: crossplane's chart, a providers tier (waited), a claims tier with an IAM Role and a kubernetes Object."""
    providers = [crd("pkg.crossplane.io", "Provider", "providers", scope="Cluster")] + [
        obj("pkg.crossplane.io/v1", "Provider", p.rsplit("/", 1)[-1].split(":")[0], spec={"package": p}) for p in packages
    ]
    role = obj("iam.aws.upbound.io/v1beta1", "Role", "ci", spec={"forProvider": {"assumeRolePolicy": "{}"}})
    thing = obj("kubernetes.crossplane.io/v1alpha2", "Object", "ns", spec={"forProvider": {"manifest": {}}})
    return repo(
        {"providers": ks("providers", "./providers", wait=True), "claims": ks("claims", "./claims", depends_on=["providers"])},
        {"providers": providers, "claims": [role, thing]},
    )


def test_crossplane_provider_kubernetes_does_not_serve_aws_kinds() -> None:
    report = run(_crossplane_platform("xpkg.upbound.io/crossplane-contrib/provider-kubernetes:v0.15.0"))
    unknown = [f for f in report.findings if f.check == "unknown-kind"]
    assert [f.object.kind for f in unknown if f.severity is Severity.WARNING] == ["Role"], [f.message for f in unknown]
    role = next(f for f in unknown if f.object.kind == "Role")
    assert "Provider.pkg.crossplane.io whose package serves iam.aws.upbound.io; this cluster's (xpkg.upbound.io/crossplane-contrib/provider-kubernetes:v0.15.0) do not" in role.message
    assert not [f for f in unknown if f.object.kind == "Object" and f.severity is not Severity.INFO]
    both = run(_crossplane_platform(
        "xpkg.upbound.io/crossplane-contrib/provider-kubernetes:v0.15.0", "xpkg.upbound.io/upbound/provider-aws-iam:v1.14.0",
    ))
    assert not [f for f in both.findings if f.check == "unknown-kind" and f.severity is not Severity.INFO], [f.message for f in both.findings]


@pytest.mark.parametrize(
    "package,group,served",
    [
        ("xpkg.upbound.io/upbound/provider-aws-iam:v1", "iam.aws.upbound.io", True),
        ("xpkg.upbound.io/upbound/provider-aws-iam:v1", "iam.aws.m.upbound.io", True),
        ("xpkg.upbound.io/upbound/provider-aws-iam:v1", "aws.upbound.io", True),  # its family provider comes with it
        ("xpkg.upbound.io/upbound/provider-aws-iam:v1", "s3.aws.upbound.io", False),
        ("xpkg.upbound.io/upbound/provider-aws-iam:v1", "iam.gcp.upbound.io", False),
        ("xpkg.upbound.io/upbound/provider-family-aws:v1", "aws.upbound.io", True),
        ("xpkg.upbound.io/upbound/provider-family-aws:v1", "ec2.aws.upbound.io", False),
        ("xpkg.upbound.io/upbound/provider-aws:v0.47", "ec2.aws.upbound.io", True),
        ("xpkg.upbound.io/crossplane-contrib/provider-kubernetes:v0.15.0", "kubernetes.crossplane.io", True),
        ("xpkg.upbound.io/crossplane-contrib/provider-kubernetes:v0.15.0", "iam.aws.upbound.io", False),
        ("xpkg.upbound.io/upbound/provider-terraform:v0.20", "tf.upbound.io", True),
        ("registry.example.com/acme/internal-things:v1", "iam.aws.upbound.io", True),  # a package of another shape says nothing
    ],
)
def test_crossplane_package_groups(package: str, group: str, served: bool) -> None:
    from bot.engine.core.model import GroupKind, ObjectRef
    from bot.engine.tiergraph.providers import package_provides

    trigger = ObjectRef("pkg.crossplane.io/v1", "Provider", "", "p")
    assert package_provides(package, trigger, GroupKind(group, "Thing")) is served


def test_a_name_made_of_a_masked_secret_value_is_not_judged() -> None:
    """`name: "${SECRET_DOMAIN/./-}"` substitutes a Secret's value, shown masked: it is not known, so not invalid."""
    from bot.engine.tiergraph.checks.names import DNS1123_SUBDOMAIN, problem
    from bot.engine.render.rendered import SECRET_MASK

    assert problem(SECRET_MASK.format(name="SECRET_DOMAIN"), DNS1123_SUBDOMAIN) is None
    assert problem(SECRET_MASK.format(name="SECRET_DOMAIN") + "-TLS", DNS1123_SUBDOMAIN) is not None  # what is known still counts
