"""Composed values, Secret masking, a release's objects, churn folding and capabilities, as helm-controller does them."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from bot.engine.render.helmrelease import ReleaseSpec, ValuesReference, parse_release
from bot.engine.render.helmvalues import (
    DEFAULT_KUBE_VERSION, ValuesPathError, api_versions, compose_values, fold_churn, kube_minor, mask_secret_values, merge_maps,
    release_objects, replace_path_value,
)
from bot.engine.core.model import GroupKind, Manifest, ObjectRef, Severity, SourceLocation
from tests.fluxrepo import crd, obj

ORIGIN = SourceLocation("apps/hr.yaml", 1)


def manifest(body: dict[str, Any]) -> Manifest:
    meta = body["metadata"]
    return Manifest(ObjectRef(body["apiVersion"], body["kind"], meta.get("namespace", ""), meta["name"]), body, ORIGIN)


def release(values_from: list[dict] | None = None, values: dict | None = None, **extra: Any) -> ReleaseSpec:
    spec = {"chart": {"spec": {"chart": "app", "sourceRef": {"kind": "HelmRepository", "name": "r"}}}, **extra}
    if values_from is not None:
        spec["valuesFrom"] = values_from
    if values is not None:
        spec["values"] = values
    parsed = parse_release(manifest(obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", "app", "apps", spec=spec)))
    assert isinstance(parsed, ReleaseSpec), parsed
    return parsed


def config_map(name: str, **data: str) -> dict[str, Any]:
    return obj("v1", "ConfigMap", name, "apps", data=data)


def secret(name: str, string_data: dict | None = None, **data: str) -> dict[str, Any]:
    body = obj("v1", "Secret", name, "apps", data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()})
    if string_data:
        body["stringData"] = string_data
    return body


def objects(*bodies: dict[str, Any]) -> dict[tuple[str, str, str], Manifest]:
    return {(b["kind"], b["metadata"]["namespace"], b["metadata"]["name"]): manifest(b) for b in bodies}


# -- merging and paths ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({"x": {"y": 1, "z": 2}}, {"x": {"y": 3}}, {"x": {"y": 3, "z": 2}}),
        ({"x": {"y": 1}}, {"x": 5}, {"x": 5}),
        ({"x": 5}, {"x": {"y": 1}}, {"x": {"y": 1}}),
        ({"l": [1, 2, 3]}, {"l": [9]}, {"l": [9]}),
        ({"x": 1}, {"x": None}, {"x": None}),
    ],
)
def test_merge_maps(a: dict, b: dict, expected: dict) -> None:
    assert merge_maps(a, b) == expected


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("outer.inner", "value", {"outer": {"inner": "value"}}),
        ("name", "{a,b,c}", {"name": ["a", "b", "c"]}),
        ("name", r"value1\,value2", {"name": "value1,value2"}),
        ("merge.at.specific.path", "true", {"merge": {"at": {"specific": {"path": True}}}}),
        ("merge.at.specific.path", '"true"', {"merge": {"at": {"specific": {"path": "true"}}}}),
        ("merge.at[2]", "value", {"merge": {"at": [None, None, "value"]}}),
        (r"nodeSelector.kubernetes\.io/role", "master", {"nodeSelector": {"kubernetes.io/role": "master"}}),
        ("port", "8080", {"port": 8080}),
        ("zip", "0123", {"zip": "0123"}),
        ("zero", "0", {"zero": 0}),
        ("none", "null", {"none": None}),
        ("quoted", "'8080'", {"quoted": "8080"}),
        ("l[0].name", "a", {"l": [{"name": "a"}]}),
    ],
)
def test_replace_path_value_as_strvals(path: str, value: str, expected: dict) -> None:
    values: dict[str, Any] = {}
    replace_path_value(values, path, value)
    assert values == expected


@pytest.mark.parametrize("value", ["a,b,c", "{a,b", "endpoints: [a,b,c]"])
def test_literal_keeps_set_syntax_as_text(value: str) -> None:
    values: dict[str, Any] = {}
    replace_path_value(values, r"cfg.application\.yml", value, literal=True)
    assert values == {"cfg": {"application.yml": value}}


@pytest.mark.parametrize(
    ("start", "path", "value", "words"),
    [
        ({}, "kafka.brokers", "a:9092,b:9092", "has no value"),
        ({"a": 5}, "a.b", "x", "is not a map"),
        ({"a": "s"}, "a[0]", "x", "is not a list"),
        ({}, "a[70000]", "x", "maximum supported index"),
        ({}, ".".join("k" * 32), "x", "nested level"),  # 31 dots: strvals allows 30
    ],
)
def test_replace_path_value_errors(start: dict, path: str, value: str, words: str) -> None:
    with pytest.raises(ValuesPathError, match=words):
        replace_path_value(start, path, value)


# -- compose --------------------------------------------------------------------------------------


def test_compose_in_order_then_inline_values() -> None:
    spec = release(
        [{"kind": "ConfigMap", "name": "base"}, {"kind": "ConfigMap", "name": "prod", "valuesKey": "prod.yaml"}],
        {"replicas": 5, "image": {"tag": "inline"}},
    )
    found = objects(
        config_map("base", **{"values.yaml": "replicas: 1\nimage: {repo: nginx, tag: base}\nlist: [1, 2]\n"}),
        config_map("prod", **{"prod.yaml": "image: {tag: prod}\nlist: [3]\n"}),
    )
    composed = compose_values(spec, found)
    assert composed.values == {"replicas": 5, "image": {"repo": "nginx", "tag": "inline"}, "list": [3]}
    assert composed.missing == () and composed.open is False and dict(composed.from_secrets) == {}


def test_target_path_precedence_over_all() -> None:
    """fluxcd/pkg chartutil values_test.go "target path precedence over all": the shared inline map."""
    spec = release(
        [{"kind": "Secret", "name": "values", "valuesKey": "key", "targetPath": "nested.configuration[0]"}, {"kind": "ConfigMap", "name": "values"}],
        {"nested": {"configuration": ["list", "item", "option"]}},
    )
    found = objects(
        secret("values", key="value"),
        config_map("values", **{"values.yaml": "flat: value\nnested:\n  configuration: [one, two, three]\n"}),
    )
    composed = compose_values(spec, found)
    assert composed.values == {"flat": "value", "nested": {"configuration": ["value", "item", "option"]}}
    assert composed.from_secrets == {"value": "apps/values"}


def test_top_level_inline_value_beats_a_target_path() -> None:
    spec = release([{"kind": "ConfigMap", "name": "c", "valuesKey": "v", "targetPath": "tag"}], {"tag": "inline"})
    assert compose_values(spec, objects(config_map("c", v="from-map"))).values == {"tag": "inline"}


def test_secret_string_data_over_data_and_masked() -> None:
    spec = release([{"kind": "Secret", "name": "db"}])
    body = secret("db", {"values.yaml": "auth:\n  password: s3cr3t-from-string\n  user: ab\n"}, **{"values.yaml": "auth: {password: old}"})
    composed = compose_values(spec, objects(body))
    assert composed.values == {"auth": {"password": "s3cr3t-from-string", "user": "ab"}}
    assert composed.from_secrets == {"s3cr3t-from-string": "apps/db"}  # "ab" is too short to mask


@pytest.mark.parametrize(
    ("ref", "found", "check", "severity", "is_open"),
    [
        ({"kind": "ConfigMap", "name": "gone"}, [], "values-source-external", Severity.INFO, True),
        ({"kind": "ConfigMap", "name": "gone", "optional": True}, [], "values-source-external", Severity.INFO, True),
        ({"kind": "ConfigMap", "name": "c", "valuesKey": "nope"}, [config_map("c", v="1")], "values-missing", Severity.ERROR, False),
        ({"kind": "ConfigMap", "name": "c", "valuesKey": "v"}, [config_map("c", v="- a\n- b\n")], "values-invalid", Severity.ERROR, False),
        ({"kind": "ConfigMap", "name": "c", "valuesKey": "v"}, [config_map("c", v="a: [")], "values-invalid", Severity.ERROR, False),
        ({"kind": "ConfigMap", "name": "c", "valuesKey": "v", "targetPath": "a.b"}, [config_map("c", v="x,y")], "values-invalid", Severity.ERROR, False),
        ({"kind": "Secret", "name": "enc"}, [{**secret("enc", x="1"), "sops": {"mac": "m"}}], "values-source-external", Severity.INFO, True),
    ],
)
def test_compose_findings(ref: dict, found: list, check: str, severity: Severity, is_open: bool) -> None:
    composed = compose_values(release([ref], {"keep": 1}), objects(*found))
    assert [(f.check, f.severity) for f in composed.missing] == [(check, severity)]
    assert composed.open is is_open and composed.values["keep"] == 1
    assert composed.missing[0].message.startswith("HelmRelease apps/app: valuesFrom")


def test_missing_optional_key_is_skipped_silently() -> None:
    composed = compose_values(release([{"kind": "ConfigMap", "name": "c", "valuesKey": "nope", "optional": True}]), objects(config_map("c", v="1")))
    assert composed.missing == () and composed.values == {}


def test_mask_secret_values() -> None:
    secrets = {"hunter2-password": "apps/db", "line-one\nline-two": "apps/cert"}
    text = (
        "password: hunter2-password\n"
        f"data: {base64.b64encode(b'hunter2-password').decode()}\n"
        "cert: |\n  line-one\n  line-two\n"
        "other: visible\n"
    )
    masked = mask_secret_values(text, secrets)
    assert "hunter2" not in masked and "line-one" not in masked and "line-two" not in masked
    assert "<masked:values from Secret apps/db>" in masked and "<masked:values from Secret apps/cert>" in masked
    assert "other: visible" in masked
    assert mask_secret_values("a: abcd", ["abcd"]) == "a: <masked:values from a Secret>"
    assert mask_secret_values("a: b", {}) == "a: b"


# -- objects --------------------------------------------------------------------------------------

CLUSTER_SCOPED = {GroupKind("", "Namespace"), GroupKind("apiextensions.k8s.io", "CustomResourceDefinition"), GroupKind("rbac.authorization.k8s.io", "ClusterRole")}
TEMPLATES = [
    ("app/templates/deploy.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: app\n  namespace: other\n"),
    ("app/templates/role.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: app\n  namespace: ignored\n"),
    ("app/templates/hook.yaml", "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations:\n    helm.sh/hook: pre-install,pre-upgrade\n"),
    ("app/templates/crd.yaml", "# only a comment\n---\n"),
]
CRDS = [("app/crds/widgets.yaml", __import__("yaml").safe_dump(crd("example.com", "Widget", "widgets")))]


def render(spec: ReleaseSpec, crds: list = CRDS, files: list = TEMPLATES, **kw: Any):
    return release_objects(files, crds, spec, lambda gk: gk in CLUSTER_SCOPED, chart="app 1.2.3", **kw)


def test_release_objects_namespaces_hooks_and_templates() -> None:
    out = render(release(targetNamespace="web"))
    refs = [str(m.ref) for m in out.manifests]
    assert refs == ["Deployment/web/app", "Service/other/app", "ClusterRole/app", "Job/web/migrate", "CustomResourceDefinition/widgets.example.com"]
    assert [o.hook for o in out.objects] == [None, None, None, "pre-install,pre-upgrade", None]
    assert out.objects[0].template == "chart app 1.2.3: app/templates/deploy.yaml"
    assert all(m.origin == ORIGIN for m in out.manifests)
    assert out.crds == ((GroupKind("example.com", "Widget"), out.manifests[-1].ref),)
    assert out.findings == () and out.created_namespace is None


@pytest.mark.parametrize(
    ("extra", "upgrade", "has_crds"),
    [({}, False, True), ({"install": {"crds": "Skip"}}, False, False), ({"upgrade": {"crds": "Skip"}}, True, False), ({"install": {"crds": "Skip"}}, True, True)],
)
def test_crds_dir_follows_the_policy(extra: dict, upgrade: bool, has_crds: bool) -> None:
    out = render(release(**extra), upgrade=upgrade)
    assert bool(out.crds) is has_crds


def test_crds_in_templates_ignore_the_policy() -> None:
    files = [("app/templates/crd.yaml", CRDS[0][1])]
    assert len(render(release(install={"crds": "Skip"}), crds=[], files=files).crds) == 1


def test_create_namespace_adds_the_release_namespace() -> None:
    out = render(release(targetNamespace="web", install={"createNamespace": True}))
    assert out.created_namespace == "web"
    assert out.objects[-1].template == "install.createNamespace" and str(out.manifests[-1].ref) == "Namespace/web"


def test_render_errors_are_findings() -> None:
    files = [("app/templates/bad.yaml", "a: [\n"), ("app/templates/anon.yaml", "apiVersion: v1\nkind: ConfigMap\n"), ("app/templates/list.yaml", "- 1\n")]
    out = render(release(), crds=[], files=files)
    assert out.manifests == ()
    assert [f.check for f in out.findings] == ["chart-render-invalid"] * 3
    assert "not valid YAML" in out.findings[0].message and "without apiVersion" in out.findings[1].message


# -- churn and capabilities -----------------------------------------------------------------------


def test_fold_churn_drops_chart_version_labels_keeps_checksums() -> None:
    body = {
        "metadata": {"labels": {"helm.sh/chart": "app-1.2.3", "app.kubernetes.io/version": "1.2.3", "app": "x"}},
        "spec": {"template": {"metadata": {"labels": {"helm.sh/chart": "app-1.2.3", "app": "x"}, "annotations": {"checksum/config": "abc"}}}},
    }
    folded = fold_churn(body)
    assert folded["metadata"]["labels"] == {"app": "x"}
    assert folded["spec"]["template"]["metadata"] == {"labels": {"app": "x"}, "annotations": {"checksum/config": "abc"}}
    assert body["metadata"]["labels"]["helm.sh/chart"] == "app-1.2.3"  # a copy
    cron = {"spec": {"jobTemplate": {"spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/version": "1"}}}}}}}
    assert fold_churn(cron)["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"] == {}


def test_api_versions_builtins_and_served_crd_versions() -> None:
    widget = crd("example.com", "Widget", "widgets")
    widget["spec"]["versions"] = [{"name": "v1", "served": True}, {"name": "v1alpha1", "served": False}]
    versions = api_versions(DEFAULT_KUBE_VERSION, [manifest(widget), manifest(obj("v1", "ConfigMap", "x", "a"))])
    assert {"v1", "v1/Pod", "apps/v1/Deployment", "policy/v1/PodDisruptionBudget", "resource.k8s.io/v1"} <= set(versions)
    assert {"example.com/v1", "example.com/v1/Widget"} <= set(versions)
    assert "example.com/v1alpha1" not in versions and versions == tuple(sorted(versions))
    assert "resource.k8s.io/v1" not in api_versions("v1.33.2", [])


@pytest.mark.parametrize(("text", "minor"), [("v1.34.0", 34), ("1.33", 33), ("v1.20.0", 33), ("v1.40.1", 35), ("junk", 34)])
def test_kube_minor(text: str, minor: int) -> None:
    assert kube_minor(text) == minor


def test_values_reference_defaults() -> None:
    assert release([{"kind": "ConfigMap", "name": "c"}]).values_from == (ValuesReference("ConfigMap", "c", "values.yaml", "", False, False),)
