"""HelmRelease specs, release names and chart plans, as helm-controller and source-controller read them."""

from __future__ import annotations

import random
from typing import Any

import pytest

from bot.engine.render.helmrelease import (
    ChartPlan, ChartUnavailable, ReleaseSpec, ValuesReference, not_rendered_findings, parse_release, release_name, shorten_name,
)
from bot.engine.core.model import Finding, Manifest, ObjectRef, Severity, SourceLocation, SourceRef, TierId
from tests.fluxrepo import obj

HR_V2 = "helm.toolkit.fluxcd.io/v2"
SRC = "source.toolkit.fluxcd.io/v1"
THIS_REPO = SourceRef("GitRepository", "flux-system", "flux-system")


def manifest(body: dict[str, Any]) -> Manifest:
    meta = body["metadata"]
    return Manifest(ObjectRef(body["apiVersion"], body["kind"], meta.get("namespace", ""), meta["name"]), body, SourceLocation("apps/hr.yaml", 3))


def hr(spec: dict[str, Any], name: str = "podinfo", namespace: str = "apps", api: str = HR_V2) -> Manifest:
    return manifest(obj(api, "HelmRelease", name, namespace, spec=spec))


def from_repo(chart: str = "podinfo", kind: str = "HelmRepository", name: str = "podinfo", **extra: Any) -> dict[str, Any]:
    return {"chart": {"spec": {"chart": chart, "sourceRef": {"kind": kind, "name": name, "namespace": "flux-system"}, **extra}}}


def sources(*bodies: dict[str, Any]) -> dict[tuple[str, str, str], Manifest]:
    return {(b["kind"], b["metadata"]["namespace"], b["metadata"]["name"]): manifest(b) for b in bodies}


HELM_REPO = obj(SRC, "HelmRepository", "podinfo", "flux-system", spec={"url": "https://stefanprodan.github.io/podinfo", "secretRef": {"name": "creds"}})
OCI_HELM_REPO = obj(SRC, "HelmRepository", "ghcr", "flux-system", spec={"type": "oci", "url": "oci://ghcr.io/stefanprodan/charts/", "insecure": True})
GIT_REMOTE = obj(SRC, "GitRepository", "charts", "flux-system", spec={"url": "https://github.com/acme/charts", "ref": {"branch": "main", "tag": "v1.2.0"}})
BUCKET = obj("source.toolkit.fluxcd.io/v1", "Bucket", "charts", "flux-system", spec={"bucketName": "charts"})
ALL = sources(HELM_REPO, OCI_HELM_REPO, GIT_REMOTE, BUCKET)


def parse(spec: dict[str, Any], found: dict | None = None, **kw: Any) -> ReleaseSpec:
    result = parse_release(hr(spec, **kw), ALL if found is None else found, lambda s: s == THIS_REPO)
    assert isinstance(result, ReleaseSpec), result
    return result


# -- names ----------------------------------------------------------------------------------------

LONG = "a-very-long-target-namespace-name-and-release-name-for-tests"  # 60 characters


@pytest.mark.parametrize(
    ("name", "field", "target", "expected"),
    [
        ("podinfo", "", "", "podinfo"),
        ("podinfo", "", "web", "web-podinfo"),
        ("podinfo", "custom", "web", "custom"),
        (LONG, "", "", "a-very-long-target-namespace-name-and-re-95bef4aa3edc"),
        ("x" * 53, "", "", "x" * 53),
        ("podinfo", LONG, "", "a-very-long-target-namespace-name-and-re-95bef4aa3edc"),
    ],
)
def test_release_name_follows_get_release_name_and_shorten_name(name: str, field: str, target: str, expected: str) -> None:
    assert release_name(name, field, target) == expected
    assert len(expected) <= 53


def test_shortened_name_is_40_chars_dash_12_hex() -> None:
    short = shorten_name(LONG)
    assert len(short) == 53 and short[:40] == LONG[:40] and short[40] == "-"
    assert shorten_name("y" * 54) != shorten_name("y" * 55)


def test_target_namespace_prefix_then_shortened() -> None:
    spec = parse({**from_repo(), "targetNamespace": "t" * 30}, name="n" * 30)
    assert spec.release_name == shorten_name("t" * 30 + "-" + "n" * 30)
    assert spec.namespace == "t" * 30 and spec.storage_namespace == "apps"


# -- spec fields ----------------------------------------------------------------------------------


def test_defaults() -> None:
    spec = parse(from_repo())
    assert (spec.release_name, spec.namespace, spec.storage_namespace) == ("podinfo", "apps", "apps")
    assert (spec.install_crds, spec.upgrade_crds, spec.create_namespace) == ("Create", "Create", False)
    assert spec.values == {} and spec.values_from == () and spec.depends_on == ()
    assert not spec.suspend and not spec.test_enabled and not spec.disable_hooks
    assert spec.origin == SourceLocation("apps/hr.yaml", 3) and spec.id == TierId("apps", "podinfo")


def test_every_field_read() -> None:
    spec = parse(
        {
            **from_repo(),
            "targetNamespace": "web",
            "storageNamespace": "helm",
            "releaseName": "front",
            "values": {"replicas": 2},
            "valuesFrom": [
                {"kind": "ConfigMap", "name": "base"},
                {"kind": "Secret", "name": "creds", "valuesKey": "pw", "targetPath": "auth.password", "optional": True},
            ],
            "install": {"crds": "CreateReplace", "createNamespace": True, "disableHooks": True},
            "upgrade": {"crds": "Skip"},
            "postRenderers": [{"kustomize": {"images": [{"name": "nginx", "newTag": "1.25"}]}}],
            "dependsOn": [{"name": "cert-manager", "namespace": "cert-manager"}, {"name": "redis"}],
            "test": {"enable": True},
            "suspend": True,
        }
    )
    assert (spec.release_name, spec.namespace, spec.storage_namespace) == ("front", "web", "helm")
    assert spec.values_from == (
        ValuesReference("ConfigMap", "base"),
        ValuesReference("Secret", "creds", "pw", "auth.password", optional=True),
    )
    assert (spec.install_crds, spec.upgrade_crds, spec.create_namespace, spec.disable_hooks) == ("CreateReplace", "Skip", True, True)
    assert spec.post_renderers == ({"images": [{"name": "nginx", "newTag": "1.25"}]},)
    assert spec.depends_on == (TierId("cert-manager", "cert-manager"), TierId("apps", "redis"))
    assert spec.test_enabled and spec.suspend and spec.values == {"replicas": 2}


def test_create_namespace_needs_a_target_namespace() -> None:
    assert parse({**from_repo(), "install": {"createNamespace": True}}).create_namespace is False


@pytest.mark.parametrize(
    ("install", "expected"),
    [({"skipCRDs": True}, "Skip"), ({"skipCRDs": False}, "Create"), ({"skipCRDs": True, "crds": "CreateReplace"}, "CreateReplace")],
)
def test_v2beta1_skip_crds_yields_to_crds(install: dict, expected: str) -> None:
    assert parse({**from_repo(), "install": install}, api="helm.toolkit.fluxcd.io/v2beta1").install_crds == expected


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({}, "spec.chart or spec.chartRef is required"),
        ({**from_repo(), "chartRef": {"kind": "OCIRepository", "name": "x"}}, "mutually exclusive"),
        ({**from_repo(), "install": {"crds": "Always"}}, "spec.install.crds 'Always'"),
        ({**from_repo(), "values": ["a"]}, "spec.values must be a mapping"),
        ({**from_repo(), "valuesFrom": [{"kind": "Bucket", "name": "x"}]}, "ConfigMap or Secret"),
        ({**from_repo(), "valuesFrom": [{"kind": "Secret"}]}, "name is required"),
        ({**from_repo(), "suspend": "yes"}, "spec.suspend must be true or false"),
        ({**from_repo(), "dependsOn": "redis"}, "spec.dependsOn must be a list"),
        ({"chart": {"spec": {"chart": "x", "sourceRef": {"kind": "Nope", "name": "x"}}}}, "'Nope' is not"),
        ({"chartRef": {"kind": "ConfigMap", "name": "x"}}, "'ConfigMap' is not"),
        ({"chart": {"spec": {"chart": 5, "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}}}, "must be a string"),
    ],
)
def test_malformed_release_gives_a_finding(spec: dict, words: str) -> None:
    finding = parse_release(hr(spec), ALL)
    assert isinstance(finding, Finding)
    assert finding.check == "helmrelease-invalid" and finding.severity == Severity.ERROR
    assert words in finding.message and finding.message.startswith("HelmRelease apps/podinfo:")
    assert finding.location == SourceLocation("apps/hr.yaml", 3)


def test_not_a_helm_release() -> None:
    finding = parse_release(manifest(obj("v1", "ConfigMap", "x", "apps")))
    assert isinstance(finding, Finding) and "not a HelmRelease" in finding.message


_ODD = [None, 0, 1.5, True, "", "x", [], [1, None], {}, {"a": None}, {"kind": 3}, [{"name": {}}]]


def _random_shape(rng: random.Random, depth: int = 0) -> Any:
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(_ODD)
    keys = ["chart", "spec", "chartRef", "sourceRef", "kind", "name", "namespace", "values", "valuesFrom", "install", "upgrade",
            "crds", "targetNamespace", "releaseName", "postRenderers", "kustomize", "dependsOn", "test", "enable", "version", "valuesFiles"]
    if rng.random() < 0.2:
        return [_random_shape(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(keys): _random_shape(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def test_fuzz_parse_release_never_raises() -> None:
    rng = random.Random(20260823)
    kinds = {"ReleaseSpec": 0, "Finding": 0}
    for _ in range(3000):
        body = obj(HR_V2, "HelmRelease", "fuzz", "apps", spec=_random_shape(rng))
        if rng.random() < 0.3:
            body["spec"] = {**from_repo(), **(body["spec"] if isinstance(body["spec"], dict) else {})}
        result = parse_release(manifest(body), ALL, lambda s: s == THIS_REPO)
        assert isinstance(result, (ReleaseSpec, Finding))
        kinds[type(result).__name__] += 1
    assert kinds["ReleaseSpec"] > 0 and kinds["Finding"] > 0


# -- chart plans ----------------------------------------------------------------------------------


def test_http_helm_repository() -> None:
    plan = parse(from_repo(version="6.x", valuesFiles=["values-prod.yaml"], valuesFile="values.yaml")).chart
    assert isinstance(plan, ChartPlan)
    assert (plan.kind, plan.url, plan.chart, plan.version) == ("http", "https://stefanprodan.github.io/podinfo", "podinfo", "6.x")
    assert plan.values_files == ("values.yaml", "values-prod.yaml")  # the legacy valuesFile first
    assert plan.secret_ref == "flux-system/creds" and plan.host == "stefanprodan.github.io"
    assert plan.describe() == "chart podinfo 6.x from HelmRepository flux-system/podinfo"


def test_ignore_missing_values_files_is_read_for_every_source_and_keys_the_archive() -> None:
    for spec in (from_repo(valuesFiles=["a.yaml"], ignoreMissingValuesFiles=True), from_repo(name="ghcr", ignoreMissingValuesFiles=True),
                 {"chart": {"spec": {"chart": "./app", "sourceRef": {"kind": "GitRepository", "name": "flux-system"}, "ignoreMissingValuesFiles": True}}}):
        plan = parse(spec, namespace="flux-system").chart
        assert isinstance(plan, ChartPlan) and plan.ignore_missing_values_files
    plain = parse(from_repo(valuesFiles=["a.yaml"])).chart
    ignoring = parse(from_repo(valuesFiles=["a.yaml"], ignoreMissingValuesFiles=True)).chart
    assert isinstance(plain, ChartPlan) and isinstance(ignoring, ChartPlan) and not plain.ignore_missing_values_files
    assert plain.cache_key() != ignoring.cache_key()
    bad = parse_release(hr(from_repo(ignoreMissingValuesFiles="yes")), ALL)
    assert isinstance(bad, Finding) and "ignoreMissingValuesFiles must be true or false" in bad.message


def test_empty_version_means_any() -> None:
    plan = parse(from_repo()).chart
    assert isinstance(plan, ChartPlan) and plan.reference == ("semver", "*")
    assert plan.describe() == "chart podinfo from HelmRepository flux-system/podinfo"


def test_oci_helm_repository_appends_the_chart() -> None:
    plan = parse(from_repo(name="ghcr", version="1.2.3")).chart
    assert isinstance(plan, ChartPlan)
    assert (plan.kind, plan.url, plan.reference, plan.insecure) == ("oci", "oci://ghcr.io/stefanprodan/charts/podinfo", ("semver", "1.2.3"), True)
    assert plan.host == "ghcr.io"


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (None, ("tag", "latest")),
        ({"tag": "6.5.0"}, ("tag", "6.5.0")),
        ({"tag": "6.5.0", "semver": ">=6.0.0"}, ("semver", ">=6.0.0")),
        ({"tag": "6.5.0", "semver": ">=6.0.0", "digest": "sha256:abc"}, ("digest", "sha256:abc")),
    ],
)
def test_oci_repository_reference_precedence(ref: dict | None, expected: tuple[str, str]) -> None:
    spec = {"url": "oci://ghcr.io/stefanprodan/charts/podinfo", "layerSelector": {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip"}}
    if ref is not None:
        spec["ref"] = ref
    repo = obj(SRC, "OCIRepository", "podinfo", "apps", spec=spec)
    plan = parse({"chartRef": {"kind": "OCIRepository", "name": "podinfo"}}, sources(repo)).chart
    assert isinstance(plan, ChartPlan)
    assert (plan.kind, plan.chart, plan.reference) == ("oci", "podinfo", expected)
    assert plan.layer_media_type == "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


def test_git_chart_in_this_repository_is_a_normalised_path() -> None:
    plan = parse({"chart": {"spec": {"chart": "./charts//app/", "sourceRef": {"kind": "GitRepository", "name": "flux-system"}, "version": "9"}}}, name="app", namespace="flux-system").chart
    assert isinstance(plan, ChartPlan)
    assert (plan.kind, plan.chart, plan.reference) == ("git", "charts/app", ("none", ""))
    assert plan.describe() == "chart at charts/app from GitRepository flux-system/flux-system"


def test_git_chart_path_climbing_out_is_unsafe() -> None:
    finding = parse_release(hr({"chart": {"spec": {"chart": "../../etc", "sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"}}}}), ALL, lambda s: s == THIS_REPO)
    assert isinstance(finding, Finding) and finding.check == "unsafe-path" and "climbs out" in finding.message


def test_git_chart_in_another_repository() -> None:
    plan = parse(from_repo(chart="charts/app", kind="GitRepository", name="charts")).chart
    assert isinstance(plan, ChartPlan)
    assert (plan.kind, plan.url, plan.chart, plan.reference) == ("git-remote", "https://github.com/acme/charts", "charts/app", ("tag", "v1.2.0"))


def test_helm_chart_ref_follows_the_helm_chart_spec_in_its_namespace() -> None:
    chart = obj(SRC, "HelmChart", "podinfo", "flux-system", spec={"chart": "podinfo", "version": "6.x", "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}})
    plan = parse({"chartRef": {"kind": "HelmChart", "name": "podinfo", "namespace": "flux-system"}}, sources(HELM_REPO, chart)).chart
    assert isinstance(plan, ChartPlan)
    assert (plan.kind, plan.url, plan.version, plan.via) == ("http", HELM_REPO["spec"]["url"], "6.x", "HelmChart flux-system/podinfo")


@pytest.mark.parametrize(
    ("spec", "reason", "source"),
    [
        (from_repo(kind="Bucket", name="charts"), "Bucket sources are not fetched", SourceRef("Bucket", "charts", "flux-system")),
        (from_repo(name="missing"), "HelmRepository flux-system/missing is not in the render", SourceRef("HelmRepository", "missing", "flux-system")),
        ({"chartRef": {"kind": "ExternalArtifact", "name": "app"}}, "ExternalArtifact apps/app", SourceRef("ExternalArtifact", "app", "apps")),
        ({"chartRef": {"kind": "OCIRepository", "name": "nope"}}, "OCIRepository apps/nope is not in the render", SourceRef("OCIRepository", "nope", "apps")),
        ({"chartRef": {"kind": "HelmChart", "name": "nope"}}, "HelmChart apps/nope is not in the render", SourceRef("HelmChart", "nope", "apps")),
    ],
)
def test_unavailable_charts(spec: dict, reason: str, source: SourceRef) -> None:
    chart = parse(spec).chart
    assert isinstance(chart, ChartUnavailable)
    assert reason in chart.reason and chart.source == source and chart.severity == Severity.INFO


def test_cache_key_covers_what_decides_the_archive_only() -> None:
    base = ChartPlan("http", SourceRef("HelmRepository", "a", "ns"), "podinfo", "https://x", ("semver", "6.x"))
    assert base.cache_key() == ChartPlan("http", SourceRef("HelmRepository", "b", "other"), "podinfo", "https://x", ("semver", "6.x"), secret_ref="ns/s", insecure=True).cache_key()
    others = [
        ChartPlan("http", base.source, "podinfo", "https://y", ("semver", "6.x")),
        ChartPlan("http", base.source, "other", "https://x", ("semver", "6.x")),
        ChartPlan("http", base.source, "podinfo", "https://x", ("semver", "7.x")),
        ChartPlan("http", base.source, "podinfo", "https://x", ("tag", "6.x")),
        ChartPlan("http", base.source, "podinfo", "https://x", ("semver", "6.x"), values_files=("v.yaml",)),
    ]
    assert len({base.cache_key(), *(p.cache_key() for p in others)}) == 6


# -- not rendered ---------------------------------------------------------------------------------


def test_not_rendered_grouped_per_reason() -> None:
    bitnami = obj(SRC, "HelmRepository", "bitnami", "flux-system", spec={"url": "https://charts.bitnami.com/bitnami"})
    specs = [parse(from_repo(chart=c, name="bitnami"), sources(bitnami), name=c) for c in ("redis", "postgresql", "kafka")]
    bucket = parse(from_repo(kind="Bucket", name="charts"), name="app")
    findings = not_rendered_findings([(s, "unreachable (offline)", False) for s in specs] + [(bucket, "Bucket sources are not fetched", True)])
    assert [f.severity for f in findings] == [Severity.WARNING, Severity.INFO]
    assert findings[0].message.startswith("1 HelmRelease (changed by this PR) from Bucket flux-system/charts not rendered: Bucket sources are not fetched")
    assert findings[0].object == bucket.ref
    assert findings[1].message.startswith("3 HelmReleases from HelmRepository flux-system/bitnami not rendered: unreachable (offline); their CRDs come from the knowledge base")
    assert "apps/kafka, apps/postgresql, apps/redis" in findings[1].message and findings[1].object is None
    assert all(f.check == "chart-not-rendered" for f in findings)


def test_many_sources_with_one_reason_are_one_finding() -> None:
    # A home-lab with an OCIRepository per app, all on one unreachable registry: one line, not one per app.
    specs = []
    for i in range(12):
        repository = obj(SRC, "OCIRepository", f"app{i}", "apps", spec={"url": f"oci://ghcr.io/bjw-s/app{i}", "ref": {"tag": "1.0.0"}})
        specs.append(parse({"chartRef": {"kind": "OCIRepository", "name": f"app{i}"}}, sources(repository), name=f"app{i}"))
    [finding] = not_rendered_findings([(s, "unreachable: ghcr.io could not be resolved", False) for s in specs])
    assert finding.message.startswith("12 HelmReleases from 12 sources (OCIRepository apps/app0, OCIRepository apps/app1, OCIRepository apps/app10, …) not rendered")
    assert finding.message.endswith("and 2 more)") and finding.severity is Severity.INFO
