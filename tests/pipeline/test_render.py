"""Rendering a cluster like kustomize-controller, postBuild substitution, and untrusted input.

kustomize runs for real (kubectl kustomize from the venv). Every untrusted-input case must end in a
finding (`unsafe-path` or `render-failed`), never an exception, and never show host content.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import pytest

from bot.adapters.cache import BuildCache
from bot.engine.render.config import load_repo_config
from bot.pipeline.check import CheckOptions, check_repository, check_session, repository_clusters
from bot.engine.render.generate import generated_resources
from bot.adapters.kustomize import KustomizeBinary, locate_kustomize
from bot.engine.core.model import Finding, Manifest, Severity, TierId
from bot.engine.render.discovery import RenderLimits
from bot.engine.render.rendered import SECRET_MASK, ClusterRender
from bot.pipeline.memo import children_key
from bot.pipeline.renderer import Renderer
from bot.pipeline.session import Session
from bot.adapters.workspace import build_snapshot
from tests.fluxrepo import dump, flux_repo, kustomization, ks, obj, write_tree

FLUX = "flux-system"
APP = TierId(FLUX, "app")


@pytest.fixture(scope="module")
def binary() -> KustomizeBinary:
    return locate_kustomize()


def render(
    tmp_path: Path,
    files: Mapping[str, str],
    binary: KustomizeBinary,
    *,
    links: Mapping[str, str] = {},
    raw: Mapping[str, bytes] = {},
    snapshot_options: Mapping[str, Any] = {},
    limits: RenderLimits = RenderLimits(),
    **session_options: Any,
) -> tuple[Renderer, ClusterRender]:
    """Write a repo (text files, byte files, symlinks), snapshot it and render cluster `dev`."""
    repo = write_tree(tmp_path / "repo", files)
    _add_raw_and_links(repo, raw, links)
    snap = build_snapshot(repo, tmp_path / "snap", **snapshot_options)
    renderer = Session(snap, load_repo_config(snap.read_text(".fluxwarden.yaml")), binary, **session_options).renderer(limits)
    return renderer, renderer.render_cluster("dev", "clusters/dev")


def _add_raw_and_links(repo: Path, raw: Mapping[str, bytes], links: Mapping[str, str]) -> None:
    for rel, data in raw.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    for rel, target in links.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, repo / rel)


def by_ref(cr: ClusterRender, tier: TierId = APP) -> dict[str, Manifest]:
    return {str(m.ref): m for m in cr.tiers[tier].manifests}


def dig(body: Any, dotted: str) -> Any:
    """`a.b.0.c` into nested dicts/lists; KeyError when missing."""
    for part in dotted.split("."):
        body = body[int(part)] if isinstance(body, list) else body[part]
    return body


def errors(cr: ClusterRender) -> list[Finding]:
    return [f for f in cr.findings if f.severity == Severity.ERROR]


def cm(name: str, namespace: str | None = None, **fields: Any) -> dict[str, Any]:
    return obj("v1", "ConfigMap", name, namespace, **fields)


def app_repo(extra: Mapping[str, str], path: str = "./app", **spec: Any) -> dict[str, str]:
    """clusters/dev applies one Kustomization `app` (at ./app unless `path` says otherwise)."""
    return flux_repo({"app": ks("app", path, **spec)}, extra)


# == 1. Rendering like kustomize-controller ==========================================================

# A path with no kustomization file: Flux generates one listing every *.yaml/*.yml recursively,
# a sub-directory with its own kustomization file as one unit (not descended), nothing else.
GENERATED_CASES = [
    pytest.param(
        {"a.yaml": dump(cm("a")), "x/b.yml": dump(cm("b")), "x/y/c.yaml": dump(cm("c"))},
        ["a.yaml", "x/b.yml", "x/y/c.yaml"],
        {"ConfigMap/a", "ConfigMap/b", "ConfigMap/c"},
        id="every-yaml-and-yml-recursively",
    ),
    pytest.param(
        {
            "a.yaml": dump(cm("a")),
            "README.md": dump(cm("from-md")),
            "cm.json": json.dumps(cm("from-json")),
            "notes.txt": dump(cm("from-txt")),
            "tpl.yaml.tmpl": dump(cm("from-tmpl")),
            "run.sh": "#!/bin/sh\n",
        },
        ["a.yaml"],
        {"ConfigMap/a"},
        id="non-yaml-files-ignored",
    ),
    pytest.param(
        {
            "a.yaml": dump(cm("a")),
            "unit/kustomization.yaml": kustomization("u.yaml"),
            "unit/u.yaml": dump(cm("u")),
            "unit/unlisted.yaml": dump(cm("unlisted")),
            "unit/deeper/d.yaml": dump(cm("d")),
        },
        ["unit", "a.yaml"],
        {"ConfigMap/a", "ConfigMap/u"},
        id="subdir-with-kustomization-is-one-unit",
    ),
    pytest.param(
        {
            "k1/kustomization.yml": kustomization("one.yaml"),
            "k1/one.yaml": dump(cm("one")),
            "k1/stray.yaml": dump(cm("stray1")),
            "k2/Kustomization": kustomization("two.yaml"),
            "k2/two.yaml": dump(cm("two")),
            "k2/stray.yaml": dump(cm("stray2")),
        },
        ["k1", "k2"],
        {"ConfigMap/one", "ConfigMap/two"},
        id="kustomization-yml-and-Kustomization-names",
    ),
    pytest.param(
        {
            "x/plain.yaml": dump(cm("plain")),
            "x/unit/kustomization.yaml": kustomization("u.yaml"),
            "x/unit/u.yaml": dump(cm("u")),
            "x/unit/skip.yaml": dump(cm("skip")),
        },
        ["x/unit", "x/plain.yaml"],
        {"ConfigMap/plain", "ConfigMap/u"},
        id="unit-below-a-plain-dir",
    ),
]


@pytest.mark.parametrize("app_files,listed,rendered", GENERATED_CASES)
def test_generated_kustomization(
    tmp_path: Path, binary: KustomizeBinary, app_files: dict[str, str], listed: list[str], rendered: set[str]
) -> None:
    renderer, cr = render(tmp_path, app_repo({f"app/{k}": v for k, v in app_files.items()}), binary)
    assert errors(cr) == []
    assert set(by_ref(cr)) == rendered
    assert generated_resources(renderer.snapshot, "app") == listed
    # Generated for the build only: neither the checkout nor the snapshot other tiers read is written to.
    assert not (tmp_path / "repo/app/kustomization.yaml").exists()
    assert not (renderer.snapshot.root / "app/kustomization.yaml").exists()


# The Flux spec fields kustomize-controller merges into the path's kustomization before building.
APP_FILES = {
    "app/cm.yaml": dump(cm("cm", "written-ns", data={"a": "1"}, metadata={"name": "cm", "namespace": "written-ns", "labels": {"team": "old"}})),
    "app/deploy.yaml": dump(
        obj(
            "apps/v1",
            "Deployment",
            "web",
            "written-ns",
            spec={
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx:1.0", "envFrom": [{"configMapRef": {"name": "cm"}}]}]},
                },
            },
        )
    ),
    "components/extra/kustomization.yaml": (
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [c.yaml]\n"
        "patches:\n- patch: |\n    apiVersion: v1\n    kind: ConfigMap\n    metadata:\n      name: cm\n      namespace: written-ns\n    data:\n      comp: 'yes'\n"
    ),
    "components/extra/c.yaml": dump(cm("fromcomp")),
}

# kustomize-controller labels every object with the Kustomization that applies it.
OWNER = {"kustomize.toolkit.fluxcd.io/name": "app", "kustomize.toolkit.fluxcd.io/namespace": FLUX}
SMP_REPLICAS = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: written-ns\nspec:\n  replicas: 3\n"

SPEC_CASES = [
    pytest.param(
        {"targetNamespace": "team"},
        {"ConfigMap/team/cm": {"data.a": "1"}, "Deployment/team/web": {"spec.replicas": 1}},
        id="targetNamespace-overrides-written-namespace",
    ),
    pytest.param(
        {"namePrefix": "p-", "nameSuffix": "-s"},
        {
            "ConfigMap/written-ns/p-cm-s": {"data.a": "1"},
            # kustomize's name reference transformer follows the rename
            "Deployment/written-ns/p-web-s": {"spec.template.spec.containers.0.envFrom.0.configMapRef.name": "p-cm-s"},
        },
        id="namePrefix-nameSuffix",
    ),
    pytest.param(
        {"commonMetadata": {"labels": {"team": "new", "tier": "x"}, "annotations": {"note": "y"}}},
        {
            "ConfigMap/written-ns/cm": {"metadata.labels": {"team": "new", "tier": "x", **OWNER}, "metadata.annotations": {"note": "y"}},
            # metadata only: selectors and pod templates are untouched
            "Deployment/written-ns/web": {"metadata.labels.tier": "x", "spec.template.metadata.labels": {"app": "web"}, "spec.selector.matchLabels": {"app": "web"}},
        },
        id="commonMetadata-labels-annotations",
    ),
    pytest.param(
        {"patches": [{"patch": SMP_REPLICAS}]},
        {"Deployment/written-ns/web": {"spec.replicas": 3}, "ConfigMap/written-ns/cm": {"data.a": "1"}},
        id="patch-strategic-merge",
    ),
    pytest.param(
        {"patches": [{"patch": "- op: replace\n  path: /data/a\n  value: '2'\n", "target": {"kind": "ConfigMap", "name": "cm"}}]},
        {"ConfigMap/written-ns/cm": {"data.a": "2"}, "Deployment/written-ns/web": {"spec.replicas": 1}},
        id="patch-json6902-with-target",
    ),
    pytest.param(
        {"patches": [{"patch": "- op: add\n  path: /metadata/annotations\n  value: {hit: 'true'}\n", "target": {"kind": "Deployment"}}]},
        {"Deployment/written-ns/web": {"metadata.annotations": {"hit": "true"}}, "ConfigMap/written-ns/cm": {"metadata.labels": {"team": "old", **OWNER}}},
        id="patch-json6902-target-by-kind",
    ),
    pytest.param(
        {"images": [{"name": "nginx", "newName": "registry.local/nginx", "newTag": "1.27"}]},
        {"Deployment/written-ns/web": {"spec.template.spec.containers.0.image": "registry.local/nginx:1.27"}},
        id="images",
    ),
    pytest.param(
        {"components": ["../components/extra"]},
        {"ConfigMap/fromcomp": {"metadata.name": "fromcomp"}, "ConfigMap/written-ns/cm": {"data.comp": "yes", "data.a": "1"}},
        id="components-local-dir",
    ),
    pytest.param(
        {"targetNamespace": "team", "namePrefix": "p-", "images": [{"name": "nginx", "newTag": "2"}], "components": ["../components/extra"]},
        {
            "ConfigMap/team/p-fromcomp": {},
            "ConfigMap/team/p-cm": {"data.comp": "yes"},
            "Deployment/team/p-web": {"spec.template.spec.containers.0.image": "nginx:2"},
        },
        id="combined",
    ),
]


@pytest.mark.parametrize("spec,expected", SPEC_CASES)
def test_spec_fields(tmp_path: Path, binary: KustomizeBinary, spec: dict[str, Any], expected: dict[str, dict[str, Any]]) -> None:
    _, cr = render(tmp_path, app_repo(APP_FILES, **spec), binary)
    assert errors(cr) == []
    objects = by_ref(cr)
    for ref, fields in expected.items():
        assert ref in objects, sorted(objects)
        for path, value in fields.items():
            assert dig(objects[ref].body, path) == value, (ref, path)


def test_an_existing_kustomization_gets_the_spec_too(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = app_repo(
        {"app/kustomization.yaml": "namespace: from-kustomization\nresources: [cm.yaml]\n", "app/cm.yaml": dump(cm("cm"))},
        targetNamespace="team",
    )
    _, cr = render(tmp_path, files, binary)
    assert set(by_ref(cr)) == {"ConfigMap/team/cm"}


def test_nested_kustomizations_depth_three(tmp_path: Path, binary: KustomizeBinary) -> None:
    level3 = ks("l3", "./l3", namespace="apps")
    level3["apiVersion"] = "kustomize.toolkit.fluxcd.io/v1beta2"  # older API still accepted
    level3["spec"]["sourceRef"]["namespace"] = FLUX  # else it defaults to `apps`: another source
    files = flux_repo(
        {"l1": ks("l1", "./l1")},
        {
            "l1/k.yaml": dump(ks("l2", "./l2")),
            "l2/k.yaml": dump(cm("before"), level3, cm("after")),
            "l3/m.yaml": dump(cm("deep", data={"level": "3"})),
        },
    )
    renderer, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    l1, l2, l3 = TierId(FLUX, "l1"), TierId(FLUX, "l2"), TierId("apps", "l3")
    assert list(cr.tiers) == [TierId(FLUX, FLUX), l1, l2, l3]
    assert [cr.tiers[t].spec.defined_in for t in (l1, l2, l3)] == [TierId(FLUX, FLUX), l1, l2]
    assert by_ref(cr, l3)["ConfigMap/deep"].body["data"] == {"level": "3"}
    assert cr.tiers[l3].spec.origin.file == "l2/k.yaml"
    assert renderer.locate(by_ref(cr, l2)["Kustomization/apps/l3"]).line == 6


OTHER_SOURCES = [
    pytest.param("OCIRepository", "podinfo", None, "OCIRepository/flux-system/podinfo", id="oci-repository"),
    pytest.param("GitRepository", "tenant", None, "GitRepository/flux-system/tenant", id="other-git-repository"),
    pytest.param("GitRepository", "flux-system", "other-ns", "GitRepository/other-ns/flux-system", id="same-name-other-namespace"),
    pytest.param("GitRepository", "flux-system", "", "GitRepository/apps/flux-system", id="sourceRef-namespace-defaults-to-kustomization-namespace"),
    pytest.param("Bucket", "b", None, "Bucket/flux-system/b", id="bucket"),
    pytest.param("ExternalArtifact", "ea", None, "ExternalArtifact/flux-system/ea", id="external-artifact"),
]


@pytest.mark.parametrize("kind,name,namespace,shown", OTHER_SOURCES)
def test_other_source_listed_not_rendered(
    tmp_path: Path, binary: KustomizeBinary, kind: str, name: str, namespace: str | None, shown: str
) -> None:
    tier = ks("ext", "./does/not/exist/here", source=name, source_kind=kind, namespace=FLUX if namespace is None else "apps")
    if namespace:
        tier["spec"]["sourceRef"]["namespace"] = namespace
    _, cr = render(tmp_path, flux_repo({"ext": tier}), binary)
    ext = cr.tiers[TierId(FLUX if namespace is None else "apps", "ext")]
    assert (ext.rendered, ext.failed, ext.manifests) == (False, False, ())
    [info] = [f for f in cr.findings if f.kustomization == ext.spec.id]
    assert (info.check, info.severity) == ("not-rendered", Severity.INFO)
    assert shown in info.message
    assert info.location.file == "clusters/dev/ext.yaml"


def test_source_configured_as_this_repo_is_rendered(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = flux_repo({"t": ks("t", "./t", source="tenant")}, {"t/a.yaml": dump(cm("a"))})
    files[".fluxwarden.yaml"] = "sources:\n- name: flux-system\n- name: tenant\n"
    _, cr = render(tmp_path, files, binary)
    assert set(by_ref(cr, TierId(FLUX, "t"))) == {"ConfigMap/a"}
    assert cr.findings == ()


def test_depends_on_a_tier_of_another_source_is_valid(tmp_path: Path) -> None:
    files = flux_repo(
        {
            "infra": ks("infra", "./infra", source="platform", source_kind="OCIRepository"),
            "apps": ks("apps", "./apps", depends_on=["infra"]),
            "broken": ks("broken", "./apps", depends_on=["nothere"]),
        },
        {"apps/a.yaml": dump(cm("a", "default"))},
    )
    report = check_repository(write_tree(tmp_path / "repo", files), "dev")
    missing = [f for f in report.findings if f.check == "missing-dependency"]
    assert [str(f.kustomization) for f in missing] == ["flux-system/broken"]  # the control, not infra
    order = list(report.order)
    assert order.index(TierId(FLUX, "infra")) < order.index(TierId(FLUX, "apps"))


ORIGIN_CASES = [
    pytest.param(FLUX, "Kustomization/flux-system/app", "clusters/dev/app.yaml", id="entry-file"),
    pytest.param("app", "ConfigMap/a", "app/a.yaml", id="generated-dir-file"),
    pytest.param("app", "ConfigMap/b", "app/x/b.yml", id="generated-dir-nested-yml"),
    pytest.param("app", "ConfigMap/u", "app/unit/u.yaml", id="unit-kustomization-resource"),
    pytest.param("app", "ConfigMap/fromcomp", "components/extra/c.yaml", id="component-resource"),
]


@pytest.mark.parametrize("tier,ref,file", ORIGIN_CASES)
def test_origin_is_the_repo_relative_file(tmp_path: Path, binary: KustomizeBinary, tier: str, ref: str, file: str) -> None:
    files = app_repo(
        {
            "app/a.yaml": dump(cm("a")),
            "app/x/b.yml": dump(cm("b")),
            "app/unit/kustomization.yaml": kustomization("u.yaml"),
            "app/unit/u.yaml": dump(cm("u")),
            "components/extra/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [c.yaml]\n",
            "components/extra/c.yaml": dump(cm("fromcomp")),
        },
        components=["../components/extra"],
    )
    _, cr = render(tmp_path, files, binary)
    origin = by_ref(cr, TierId(FLUX, tier))[ref].origin
    assert origin is not None and origin.file == file


LOCATE_FILE = "# leading comment\n---\n" + dump(
    cm("web"),
    cm("web-config"),
    obj("v1", "Service", "web"),
    cm("config"),
)

LOCATE_CASES = [
    pytest.param("ConfigMap/x-web", 3, id="first-document-after-comment"),
    pytest.param("ConfigMap/x-web-config", 8, id="longer-name-not-claimed-by-prefix-match"),
    pytest.param("Service/x-web", 13, id="same-name-other-kind"),
    pytest.param("ConfigMap/x-config", 18, id="last-document"),
]


@pytest.mark.parametrize("ref,line", LOCATE_CASES)
def test_locate_line_in_multi_document_file(tmp_path: Path, binary: KustomizeBinary, ref: str, line: int) -> None:
    renderer, cr = render(tmp_path, app_repo({"app/m.yaml": LOCATE_FILE}, namePrefix="x-"), binary)
    located = renderer.locate(by_ref(cr)[ref])
    assert (located.file, located.line) == ("app/m.yaml", line)


def test_locate_the_second_document_of_a_name_in_its_namespace(tmp_path: Path, binary: KustomizeBinary) -> None:
    """One file, the same Secret written for two namespaces (a home-ops `cluster-secrets` per app namespace):
    the second one's findings point at the second document, not at the first of that name."""
    secret = lambda ns: obj("v1", "Secret", "cluster-secrets", ns, stringData={"DOMAIN": "example.com"})  # noqa: E731
    text = "# one per namespace\n" + dump(secret("media"), secret("home"))
    renderer, cr = render(tmp_path, app_repo({"app/secrets.yaml": text}), binary)
    objects = by_ref(cr)
    assert renderer.locate(objects["Secret/media/cluster-secrets"]).line == 2
    assert renderer.locate(objects["Secret/home/cluster-secrets"]).line == 10  # 7 lines, `---`, then the document


def test_crlf_line_endings_render(tmp_path: Path, binary: KustomizeBinary) -> None:
    text = dump(cm("first", data={"k": "v"}), cm("second", data={"k": "w"})).replace("\n", "\r\n").encode()
    renderer, cr = render(tmp_path, app_repo({}), binary, raw={"app/crlf.yaml": text})
    assert errors(cr) == []
    objects = by_ref(cr)
    assert {k: m.body["data"] for k, m in objects.items()} == {"ConfigMap/first": {"k": "v"}, "ConfigMap/second": {"k": "w"}}
    assert renderer.locate(objects["ConfigMap/second"]).line == 8  # 6 lines, `---`, then the document


# == 2. postBuild substitution ========================================================================

SECRET_VALUE = "s3cr3t-Zq81-never-shown"
TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: t
data:
  braced: "${A}"
  colon-equals-default: "${MISSING:=dflt}"
  colon-dash-default: "${MISSING:-dash}"
  default-ignored-when-defined: "${A:=unused}"
  escaped: "$${A}"
  bare: "$A"
  double-dollar-bare: "$$A"
  undefined-is-empty: "pre-${UNDEF}-post"
  inline-beats-substituteFrom: "${OVR}"
  later-substituteFrom-wins: "${FROM2}"
  from-entry-configmap: "${FROM1}"
  only-other-namespace: "${DECOY:=not-loaded}"
  from-secret: "${S}"
  secret-then-configmap: "${SC}"
  case-op: "${A^^}"
  number-loses-its-quotes: "${N}"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: off
  annotations:
    kustomize.toolkit.fluxcd.io/substitute: disabled
data:
  kept: "${A} $${A}"
"""

VARS = dump(
    cm("c1", FLUX, data={"FROM1": "one", "FROM2": "early", "OVR": "from-configmap"}),
    cm("c1", "other", data={"DECOY": "wrong-namespace"}),
    cm("c2", FLUX, data={"FROM2": "late"}),
    obj("v1", "Secret", "sec", FLUX, data={"S": base64.b64encode(SECRET_VALUE.encode()).decode(), "SC": base64.b64encode(b"hidden").decode()}),
    cm("c3", FLUX, data={"SC": "plain"}),
)

POST_BUILD = {
    "substitute": {"A": "inline-a", "OVR": "inline", "N": "3"},
    "substituteFrom": [
        {"kind": "ConfigMap", "name": "c1"},
        {"kind": "ConfigMap", "name": "c2"},
        {"kind": "Secret", "name": "sec"},
        {"kind": "ConfigMap", "name": "c3"},
    ],
}


def substitution_repo() -> dict[str, str]:
    files = flux_repo({"app": ks("app", "./app", post_build=POST_BUILD)}, {"app/t.yaml": TEMPLATE})
    files["clusters/dev/vars.yaml"] = VARS  # rendered by the cluster entry, in the Kustomization's namespace
    files["clusters/dev/kustomization.yaml"] = kustomization("app.yaml", "vars.yaml")
    return files


@pytest.fixture(scope="module")
def substituted(tmp_path_factory: pytest.TempPathFactory, binary: KustomizeBinary) -> ClusterRender:
    _, cr = render(tmp_path_factory.mktemp("subst"), substitution_repo(), binary)
    return cr


SUBSTITUTION_CASES = [
    ("braced", "inline-a"),
    ("colon-equals-default", "dflt"),
    ("colon-dash-default", "dash"),
    ("default-ignored-when-defined", "inline-a"),
    ("escaped", "${A}"),
    ("bare", "$A"),
    ("double-dollar-bare", "$A"),
    ("undefined-is-empty", "pre--post"),
    ("inline-beats-substituteFrom", "inline"),
    ("later-substituteFrom-wins", "late"),
    ("from-entry-configmap", "one"),
    ("only-other-namespace", "not-loaded"),
    ("from-secret", SECRET_MASK.format(name="S")),
    ("secret-then-configmap", "plain"),
    ("case-op", "INLINE-A"),
    ("number-loses-its-quotes", 3),  # kustomize re-emits `"${N}"` unquoted: Flux's documented quoting trap
]


@pytest.mark.parametrize("key,value", SUBSTITUTION_CASES, ids=[k for k, _ in SUBSTITUTION_CASES])
def test_substitution_value(substituted: ClusterRender, key: str, value: object) -> None:
    assert by_ref(substituted)["ConfigMap/t"].body["data"][key] == value


def test_substitution_tier_state(substituted: ClusterRender) -> None:
    tier = substituted.tiers[APP]
    assert (tier.rendered, tier.failed, tier.substituted, tier.variables_open) == (True, False, True, False)
    assert {"A", "OVR", "N", "FROM1", "FROM2", "S", "SC"} <= tier.variables
    assert "DECOY" not in tier.variables
    assert {k: [str(m.ref) for m in v] for k, v in tier.undefined.items()} == {"UNDEF": ["ConfigMap/t"]}
    assert by_ref(substituted)["ConfigMap/off"].body["data"] == {"kept": "${A} $${A}"}  # substitute: disabled
    assert [f for f in substituted.findings if f.severity != Severity.INFO] == []
    # the origin annotation kustomize adds is gone from substituted objects too
    assert "config.kubernetes.io/origin" not in (by_ref(substituted)["ConfigMap/t"].body["metadata"].get("annotations") or {})


def test_secret_value_never_leaves_the_renderer(tmp_path: Path, substituted: ClusterRender) -> None:
    rendered = json.dumps([m.body for _, m in substituted.manifests()])
    assert SECRET_VALUE not in rendered
    report = check_repository(write_tree(tmp_path / "repo", substitution_repo()), "dev")
    assert SECRET_VALUE not in json.dumps(report.to_json())
    assert all(SECRET_VALUE not in f.message for f in report.findings)


NO_VARIABLE_CASES = [
    pytest.param({}, False, id="postBuild-empty"),
    pytest.param({"substitute": {}}, False, id="substitute-empty-map"),
    pytest.param({"substituteFrom": [{"kind": "ConfigMap", "name": "ghost", "optional": True}]}, True, id="only-optional-source-not-in-git"),
]


@pytest.mark.parametrize("post_build,open_set", NO_VARIABLE_CASES)
def test_nothing_substituted_without_variables(tmp_path: Path, binary: KustomizeBinary, post_build: dict[str, Any], open_set: bool) -> None:
    data = {"d": "${x:=d}", "e": "$${A}", "u": "${U}"}
    _, cr = render(tmp_path, app_repo({"app/t.yaml": dump(cm("t", data=data))}, post_build=post_build), binary)
    tier = cr.tiers[APP]
    assert by_ref(cr)["ConfigMap/t"].body["data"] == data  # literal, even the default form
    assert (tier.failed, tier.variables, dict(tier.undefined), tier.variables_open) == (False, frozenset(), {}, open_set)


def test_optional_source_not_in_git(tmp_path: Path, binary: KustomizeBinary) -> None:
    post_build = {
        "substitute": {"A": "a"},
        "substituteFrom": [{"kind": "ConfigMap", "name": "ghost", "optional": True}, {"kind": "Secret", "name": "required"}],
    }
    _, cr = render(tmp_path, app_repo({"app/t.yaml": dump(cm("t", data={"a": "${A}"}))}, post_build=post_build), binary)
    tier = cr.tiers[APP]
    assert by_ref(cr)["ConfigMap/t"].body["data"] == {"a": "a"}
    assert (tier.failed, tier.variables_open, tier.substituted) == (False, True, True)
    messages = sorted((f.check, f.severity, f.message) for f in cr.findings)
    assert [m[:2] for m in messages] == [("substitution-source-external", Severity.INFO)] * 2
    optional, required = (m[2] for m in messages)
    assert "ConfigMap/flux-system/ghost (optional)" in optional and "fails the build" not in optional
    assert "Secret/flux-system/required" in required and "fails the build" in required


INVALID_NAME_CASES = [
    pytest.param({"substitute": {"bad-name": "v"}}, "", "bad-name", id="inline-dash"),
    pytest.param({"substitute": {"1x": "v"}}, "", "1x", id="inline-leading-digit"),
    pytest.param({"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}, "a.b", "a.b", id="configmap-key-dot"),
    pytest.param({"substituteFrom": [{"kind": "Secret", "name": "vars"}]}, "has space", "has space", id="secret-key-space"),
]


@pytest.mark.parametrize("post_build,source_key,shown", INVALID_NAME_CASES)
def test_invalid_variable_name_fails_the_build(
    tmp_path: Path, binary: KustomizeBinary, post_build: dict[str, Any], source_key: str, shown: str
) -> None:
    files = app_repo({"app/t.yaml": dump(cm("t", data={"a": "${A:=x}"}))}, post_build=post_build)
    if source_key:
        kind = post_build["substituteFrom"][0]["kind"]
        value = base64.b64encode(b"v").decode() if kind == "Secret" else "v"
        files["clusters/dev/vars.yaml"] = dump(obj("v1", kind, "vars", FLUX, data={source_key: value}))
        files["clusters/dev/kustomization.yaml"] = kustomization("app.yaml", "vars.yaml")
    _, cr = render(tmp_path, files, binary)
    [finding] = errors(cr)
    assert (finding.check, finding.kustomization) == ("render-failed", APP)
    assert shown in finding.message and "invalid" in finding.message
    assert cr.tiers[APP].failed


def test_substituted_alias_bomb_is_refused(tmp_path: Path, binary: KustomizeBinary) -> None:
    # A variable value can bring anchors and aliases into the YAML that is parsed after substitution.
    bomb = "{a: &a [x,x,x,x,x,x,x,x,x], " + ", ".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)) + "}"
    files = app_repo({"app/t.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: t\ndata: ${BOMB}\n"}, post_build={"substitute": {"BOMB": bomb}})
    start = time.monotonic()
    _, cr = render(tmp_path, files, binary)
    assert time.monotonic() - start < 10
    [finding] = errors(cr)
    assert finding.check == "render-failed" and "alias" in finding.message


# == 3. Untrusted input ===============================================================================

MARKER = "HOST-ONLY-7f3e91-MARKER"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Files outside any repository: what a PR must never get the bot to read or show."""
    base = tmp_path_factory.mktemp("host-secrets")
    (base / "secret.yaml").write_text(dump(cm("stolen", data={"m": MARKER})))
    (base / "dir").mkdir()
    (base / "dir/x.yaml").write_text(dump(cm("stolen-dir", data={"m": MARKER})))
    (base / "dir/kustomization.yaml").write_text(kustomization("x.yaml"))
    (base / "component").mkdir()
    (base / "component/kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [x.yaml]\n"
    )
    (base / "component/x.yaml").write_text(dump(cm("stolen-comp", data={"m": MARKER})))
    return base


def logging_binary(tmp_path: Path, real: KustomizeBinary) -> tuple[KustomizeBinary, Path]:
    """A kustomize that records every build directory, then runs the real one (PATH is empty: absolute paths)."""
    log = tmp_path / "builds.log"
    script = tmp_path / "kubectl-logging"
    run = f'exec {real.path} "$@"' if real.embedded else f'exec {real.path} build "$2"'
    script.write_text(f'#!/bin/sh\necho "$2" >> {log}\n{run}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return KustomizeBinary(str(script), embedded=True), log


BOMB = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata:\n  a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"  {chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)
EVIL_FUNCTION = """\
apiVersion: example.com/v1
kind: Evil
metadata:
  name: evil
  annotations:
    config.kubernetes.io/function: |
      exec:
        path: ./evil.sh
"""
A = {"app/a.yaml": dump(cm("a"))}


def with_kustomization(text: str, **extra: str) -> dict[str, str]:
    return {**A, "app/kustomization.yaml": text, **extra}


# id, app files, symlinks (repo path -> target; "{host}" is the host dir), expected check,
# whether the refusal happens before kustomize runs for the tier, extra spec for the `app` Kustomization.
UNTRUSTED_CASES = [
    pytest.param(with_kustomization(kustomization("a.yaml", "s.yaml")), {"app/s.yaml": "{host}/secret.yaml"}, "unsafe-path", True, {}, id="symlink-file-out-listed"),
    pytest.param(dict(A), {"app/s.yaml": "{host}/secret.yaml"}, "unsafe-path", True, {}, id="symlink-file-out-generated-dir"),
    pytest.param(with_kustomization(kustomization("a.yaml", "d")), {"app/d": "{host}/dir"}, "unsafe-path", True, {}, id="symlink-dir-out-listed"),
    pytest.param(dict(A), {"app/d": "{host}/dir"}, "unsafe-path", True, {}, id="symlink-dir-out-generated-dir"),
    pytest.param(
        with_kustomization(kustomization("a.yaml", "l1.yaml")),
        {"app/l2.yaml": "{host}/secret.yaml", "app/l1.yaml": "l2.yaml"},
        "unsafe-path",
        True,
        {},
        id="symlink-chain-out",
    ),
    # A remote reference in a field the build cannot leave out (remote resources: tests/pipeline/test_remote.py).
    pytest.param(with_kustomization("resources: [a.yaml]\npatches: [{path: 'https://example.com/p.yaml'}]\n"), {}, "unsafe-path", True, {}, id="remote-patch"),
    pytest.param(with_kustomization(kustomization("a.yaml", "../../../etc")), {}, "unsafe-path", True, {}, id="resources-climb-out"),
    pytest.param(with_kustomization(kustomization("a.yaml", "/etc/passwd")), {}, "unsafe-path", True, {}, id="resources-absolute-file"),
    pytest.param(with_kustomization(kustomization("a.yaml", "{host}/dir")), {}, "unsafe-path", True, {}, id="resources-absolute-dir"),
    pytest.param(
        with_kustomization("resources: [a.yaml]\nhelmCharts:\n- name: x\n  repo: https://charts.example.com\n  version: 1.0.0\n"),
        {},
        "unsafe-path",
        True,
        {},
        id="helmCharts",
    ),
    pytest.param(
        with_kustomization("resources: [a.yaml]\nconfigMapGenerator:\n- name: g\n  files: [/etc/passwd]\n"), {}, "unsafe-path", True, {}, id="generator-absolute-file"
    ),
    pytest.param(
        with_kustomization("resources: [a.yaml]\nconfigMapGenerator:\n- name: g\n  files: [k=../../../etc/passwd]\n"), {}, "unsafe-path", True, {}, id="generator-climbing-file"
    ),
    pytest.param(with_kustomization("resources: [a.yaml]\npatches:\n- path: ../../../etc/passwd\n"), {}, "unsafe-path", True, {}, id="patch-file-climb-out"),
    pytest.param(
        with_kustomization("resources: [a.yaml]\ntransformers: [fn.yaml]\n", **{"app/fn.yaml": EVIL_FUNCTION}), {}, "unsafe-path", True, {}, id="krm-exec-function-file"
    ),
    pytest.param(
        with_kustomization("resources: [a.yaml]\ntransformers:\n- |\n" + "".join(f"  {line}\n" for line in EVIL_FUNCTION.splitlines())),
        {},
        "unsafe-path",
        True,
        {},
        id="krm-exec-function-inline",
    ),
    pytest.param(
        with_kustomization("resources: [a.yaml]\ntransformers: [p.yaml]\n", **{"app/p.yaml": "apiVersion: someteam.example.com/v1\nkind: Inflator\nmetadata:\n  name: p\n"}),
        {},
        "render-failed",
        False,
        {},
        id="legacy-plugin-kustomize-refuses",
    ),
    pytest.param({"app/bomb.yaml": BOMB}, {}, "unsafe-path", True, {}, id="alias-bomb-generated-dir"),
    pytest.param(with_kustomization(kustomization("a.yaml", "bomb.yaml"), **{"app/bomb.yaml": BOMB}), {}, "unsafe-path", True, {}, id="alias-bomb-listed"),
    pytest.param(with_kustomization("resources: [a.yaml]\nx: &a [1,1,1,1,1,1,1,1,1,1]\ny: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nz: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nw: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"), {}, "unsafe-path", True, {}, id="alias-bomb-in-kustomization"),
    pytest.param(dict(A), {}, "unsafe-path", True, {"components": ["{host}/component"]}, id="spec-component-absolute"),
    pytest.param(dict(A), {}, "unsafe-path", True, {"components": ["../../../../../../../../../../{hostrel}/component"]}, id="spec-component-climb"),
    pytest.param(dict(A), {}, "unsafe-path", True, {"path": "../../.."}, id="spec-path-climb"),
    # Flux's Patch API has no `path`; it is dropped, and a patch without `patch` fails like the API server would.
    pytest.param(dict(A), {}, "render-failed", False, {"patches": [{"path": "{host}/secret.yaml"}]}, id="spec-patch-with-path-field"),
]


def _fill(value: Any, host: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{hostrel}", str(host).lstrip("/")).replace("{host}", str(host))
    if isinstance(value, list):
        return [_fill(v, host) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, host) for k, v in value.items()}
    return value


@pytest.mark.parametrize("app_files,links,check,before_kustomize,spec", UNTRUSTED_CASES)
def test_untrusted_input(
    tmp_path: Path,
    binary: KustomizeBinary,
    host: Path,
    app_files: dict[str, str],
    links: dict[str, str],
    check: str,
    before_kustomize: bool,
    spec: dict[str, Any],
) -> None:
    files = app_repo(_fill(app_files, host), **_fill(spec, host))
    links = _fill(links, host)
    logged, log = logging_binary(tmp_path, binary)
    start = time.monotonic()
    renderer, cr = render(tmp_path / "r", files, logged, links=links)
    assert time.monotonic() - start < 10

    # the finding, for the app tier (or the file it names)
    hits = [f for f in cr.findings if f.check == check]
    assert hits, [(f.check, f.message) for f in cr.findings]
    if APP in cr.tiers:
        assert cr.tiers[APP].manifests == () and not cr.tiers[APP].rendered
    if before_kustomize:
        assert log.read_text().split() == [log.read_text().split()[0]], "kustomize ran for the refused tier"

    # the full check pipeline agrees and shows nothing of the host
    snap = build_snapshot(tmp_path / "r/repo", tmp_path / "snap2")
    report = check_session(Session.of(snap, binary), "dev")
    assert any(f.check == check for f in report.findings)
    shown = json.dumps([f.to_json() for f in [*cr.findings, *report.findings]])
    assert MARKER not in shown
    assert MARKER not in json.dumps([m.body for _, m in cr.manifests()])
    for f in [*cr.findings, *report.findings]:
        assert f.severity in (Severity.ERROR, Severity.INFO, Severity.WARNING)


def test_exec_function_never_runs(tmp_path: Path, binary: KustomizeBinary) -> None:
    marker = tmp_path / "PWNED"
    script = f"#!/bin/sh\n/usr/bin/touch {marker}\necho 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pwned'\n"
    for layout in ("file", "dir"):
        files = app_repo(
            {
                "app/a.yaml": dump(cm("a")),
                "app/kustomization.yaml": f"resources: [a.yaml]\ntransformers: [{'fn.yaml' if layout == 'file' else '../fns'}]\n",
                "app/fn.yaml": EVIL_FUNCTION,
                "fns/kustomization.yaml": kustomization("fn.yaml"),
                "fns/fn.yaml": EVIL_FUNCTION,
                "app/evil.sh": script,
                "fns/evil.sh": script,
            }
        )
        repo = write_tree(tmp_path / layout / "repo", files)
        for sh in ("app/evil.sh", "fns/evil.sh"):
            (repo / sh).chmod(0o755)
        report = check_repository(repo, "dev")
        assert any(f.check == "unsafe-path" and "plugin" in f.message for f in report.findings)
    assert not marker.exists()


REFUSAL_MESSAGE_CASES = [
    pytest.param("resources: [a.yaml]\ncrds: [github.com/org/repo//crd.json?ref=v1]\n", "app/kustomization.yaml: github.com/org/repo//crd.json?ref=v1 is a remote reference; Fluxwarden does not fetch remote bases", id="remote"),
    pytest.param("resources: [a.yaml, ../../../etc]\n", "app/kustomization.yaml: ../../../etc climbs out of the repository", id="climb"),
    pytest.param("resources: [a.yaml, /etc/passwd]\n", "app/kustomization.yaml: /etc/passwd is an absolute path", id="absolute"),
    pytest.param("resources: [a.yaml]\nhelmCharts: [{name: x}]\n", "app/kustomization.yaml: helmCharts needs kustomize's --enable-helm, which Fluxwarden never passes", id="helm"),
]


@pytest.mark.parametrize("text,message", REFUSAL_MESSAGE_CASES)
def test_refusal_message(tmp_path: Path, binary: KustomizeBinary, text: str, message: str) -> None:
    _, cr = render(tmp_path, app_repo(with_kustomization(text)), binary)
    [finding] = cr.findings
    assert (finding.check, finding.kustomization, finding.location.file, finding.message) == ("unsafe-path", APP, "app/kustomization.yaml", message)


def test_symlink_inside_the_repo_is_rendered(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = app_repo(
        {
            "app/kustomization.yaml": kustomization("a.yaml", "shared.yaml", "linked-dir"),
            "app/a.yaml": dump(cm("a")),
            "shared/s.yaml": dump(cm("shared", data={"from": "shared"})),
            "base/kustomization.yaml": kustomization("b.yaml"),
            "base/b.yaml": dump(cm("b")),
        }
    )
    _, cr = render(tmp_path, files, binary, links={"app/shared.yaml": "../shared/s.yaml", "app/linked-dir": "../base"})
    assert cr.findings == ()
    objects = by_ref(cr)
    assert set(objects) == {"ConfigMap/a", "ConfigMap/shared", "ConfigMap/b"}
    assert objects["ConfigMap/shared"].body["data"] == {"from": "shared"}


def test_oversized_file(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = app_repo({"app/a.yaml": dump(cm("a")), "app/big.yaml": dump(cm("big", data={"x": "y" * 2000}))})
    _, cr = render(tmp_path, files, binary, snapshot_options={"max_file_bytes": 1000})
    [finding] = cr.findings
    assert (finding.check, finding.kustomization, finding.location.file) == ("unsafe-path", APP, "app/big.yaml")
    assert "over the 1,000-byte limit" in finding.message
    assert cr.tiers[APP].failed


INVALID_UTF8_CASES = [
    pytest.param({"app/a.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: \xff\xfe bad\n"}, APP, id="manifest"),
    pytest.param({"app/kustomization.yaml": b"resources: [a.yaml]\n# \xc3\x28 \xff\n", "app/a.yaml": dump(cm("a")).encode()}, APP, id="kustomization-file"),
    pytest.param({"clusters/dev/app.yaml": dump(ks("app", "./app")).encode() + b"# \xff\n"}, TierId(FLUX, FLUX), id="flux-kustomization-in-entry"),
]


@pytest.mark.parametrize("raw,tier", INVALID_UTF8_CASES)
def test_invalid_utf8_is_a_finding(tmp_path: Path, binary: KustomizeBinary, raw: dict[str, bytes], tier: TierId) -> None:
    _, cr = render(tmp_path, app_repo({}), binary, raw=raw)
    [finding] = errors(cr)
    assert (finding.check, finding.kustomization) == ("render-failed", tier)
    assert "UTF-8" in finding.message
    assert str(tmp_path) not in finding.message  # host paths are sanitised


def test_kustomize_timeout_is_render_failed(tmp_path: Path) -> None:
    slow = tmp_path / "kubectl-slow"
    slow.write_text("#!/bin/sh\nexec /bin/sleep 30\n")
    slow.chmod(0o755)
    start = time.monotonic()
    _, cr = render(tmp_path, app_repo(A), KustomizeBinary(str(slow), embedded=True), timeout=0.3)
    assert time.monotonic() - start < 10
    [finding] = cr.findings
    assert (finding.check, finding.severity, finding.kustomization) == ("render-failed", Severity.ERROR, TierId(FLUX, FLUX))
    assert finding.message == "kustomize build timed out after 0.3s"
    assert cr.tiers[TierId(FLUX, FLUX)].failed


def test_double_slash_local_path_is_not_remote(tmp_path: Path, binary: KustomizeBinary) -> None:
    """kustomize tries a local path before a remote one: `sub//` that exists is local, not refused."""
    files = app_repo({"app/kustomization.yaml": "resources: [sub//b.yaml]\n", "app/sub/b.yaml": dump(cm("b", "default"))})
    _, cr = render(tmp_path, files, binary)
    assert cr.findings == ()
    assert [m.ref.name for m in cr.tiers[APP].manifests] == ["b"]


def test_function_annotation_on_a_plain_resource_is_not_a_plugin(tmp_path: Path, binary: KustomizeBinary) -> None:
    """Only generators/transformers/validators configs run as plugins; a resource carrying the annotation is data."""
    files = app_repo({"app/kustomization.yaml": "resources: [fn.yaml]\n", "app/fn.yaml": EVIL_FUNCTION})
    _, cr = render(tmp_path, files, binary)
    assert not [f for f in cr.findings if f.check == "unsafe-path"]
    assert [m.ref.kind for m in cr.tiers[APP].manifests] == ["Evil"]


def test_a_cached_tier_whose_objects_are_gone_is_finished_again(tmp_path: Path, binary: KustomizeBinary) -> None:
    """A summary without its objects entry (a partly cleaned cache) is a miss, never an error."""
    repo = write_tree(tmp_path / "repo", flux_repo({"apps": ks("apps", "./apps")}, {"apps/kustomization.yaml": kustomization("cm.yaml"), "apps/cm.yaml": dump(obj("v1", "ConfigMap", "c", "default", data={"k": "v"}))}))
    options = CheckOptions(cache_dir=tmp_path / "cache")
    first = check_repository(repo, "dev", options)
    removed = list((tmp_path / "cache").rglob("finished-*-objects.pickle"))
    assert removed
    for path in removed:
        path.unlink()
    assert check_repository(repo, "dev", options) == first


def test_a_kustomization_that_applies_itself_is_one_definition(tmp_path: Path, binary: KustomizeBinary) -> None:
    """`apps/imagemaid/ks.yaml` with `path: ./apps/imagemaid` and no kustomization.yaml: Flux's generated
    kustomization lists ks.yaml, so the tier re-applies its own unchanged spec (seen in a real home-ops repo)."""
    me = ks("imagemaid", "./clusters/dev/imagemaid", namespace="media", targetNamespace="media",
            sourceRef={"kind": "GitRepository", "name": FLUX, "namespace": FLUX})
    files = {
        "clusters/dev/kustomization.yaml": kustomization("imagemaid/ks.yaml"),
        "clusters/dev/imagemaid/ks.yaml": dump(me),
        "clusters/dev/imagemaid/cm.yaml": dump(cm("settings")),
    }
    _, cr = render(tmp_path, files, binary)
    assert "media/settings" in {f"{m.ref.namespace}/{m.ref.name}" for m in cr.tiers[TierId("media", "imagemaid")].manifests}
    assert not [f for f in cr.findings if "different specs" in f.message]


def test_two_different_definitions_of_one_kustomization_are_reported(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = flux_repo({"x": ks("x", "./tiers/x"), "y": ks("y", "./tiers/y")}, {
        "tiers/x/app.yaml": dump(ks("app", "./apps/a")), "tiers/y/app.yaml": dump(ks("app", "./apps/b")),
        "apps/a/cm.yaml": dump(cm("a", "default")), "apps/b/cm.yaml": dump(cm("b", "default"))})
    _, cr = render(tmp_path, files, binary)
    [fight] = [f for f in cr.findings if "different specs" in f.message]
    assert fight.severity == Severity.WARNING and "(path differ)" in fight.message and "flips on every reconcile" in fight.message
    # Whichever of x and y finishes first is "the first one found": both are named.
    assert "flux-system/x and flux-system/y" in fight.message or "flux-system/y and flux-system/x" in fight.message


def test_a_kustomization_that_recreates_itself_under_a_growing_name_stops(tmp_path: Path, binary: KustomizeBinary) -> None:
    """Issue 14's attack: `name: loop-${P}`, `path: ./loop`, `substitute: {P: "${P}a"}` makes a new tier per generation."""
    loop = ks("loop-${P}", "./loop", post_build={"substitute": {"P": "${P}a"}})
    files = flux_repo({"start": ks("loop-start", "./loop", post_build={"substitute": {"P": "x"}})}, {"loop/ks.yaml": dump(loop)})
    _, cr = render(tmp_path, files, binary)
    names = sorted(t.name for t in cr.tiers)
    assert names == ["flux-system", "loop-start", "loop-x", "loop-xa", "loop-xaa"]
    [limit] = [f for f in cr.findings if f.check == "render-limit"]
    assert limit.severity == Severity.ERROR and limit.kustomization == TierId(FLUX, "loop-xaa")
    assert "loop-start → flux-system/loop-x → flux-system/loop-xa → flux-system/loop-xaa" in limit.message
    assert cr.tiers[TierId(FLUX, "loop-xaa")].failed


@pytest.mark.parametrize(
    ("limits", "refused", "words"),
    [
        (RenderLimits(tiers=3), ["c", "d"], "more than 3 Kustomizations"),
        (RenderLimits(depth=2), ["c", "d"], "nested 3 Kustomizations deep"),
        (RenderLimits(objects=1), ["b", "c", "d"], "more than 1 object;"),
        (RenderLimits(), [], ""),
    ],
)
def test_render_limits_stop_a_render_with_a_finding(tmp_path: Path, binary: KustomizeBinary, limits: RenderLimits, refused: list[str], words: str) -> None:
    # entry → a → b → c → d, nested; every tier has one ConfigMap
    files = flux_repo({"a": ks("a", "./t/a")}, {
        "t/a/ks.yaml": dump(ks("b", "./t/b")), "t/a/cm.yaml": dump(cm("a", "default")),
        "t/b/ks.yaml": dump(ks("c", "./t/c")), "t/b/cm.yaml": dump(cm("b", "default")),
        "t/c/ks.yaml": dump(ks("d", "./t/d")), "t/c/cm.yaml": dump(cm("c", "default")),
        "t/d/cm.yaml": dump(cm("d", "default")),
    })
    _, cr = render(tmp_path, files, binary, limits=limits)
    limited = [f for f in cr.findings if f.check == "render-limit"]
    assert [f.kustomization.name for f in limited] == refused[:1]
    assert all(words in f.message for f in limited)
    assert sorted(t.name for t, tier in cr.tiers.items() if tier.rendered) == [n for n in ["a", "b", "c", "d", "flux-system"] if n not in refused]


def test_a_cluster_syncing_an_oci_artifact_of_a_subdirectory(tmp_path: Path) -> None:
    """CI pushes ./kubernetes as an OCI artifact (`flux push artifact --path=./kubernetes`) and the cluster syncs it:
    `source: {kind: OCIRepository, name: flux-system, path: kubernetes}` says the artifact is this repository's kubernetes/."""
    oci = {"source": "flux-system", "source_kind": "OCIRepository"}
    files = {
        "kubernetes/clusters/main/kustomization.yaml": kustomization("flux-system.yaml", "apps.yaml"),
        "kubernetes/clusters/main/flux-system.yaml": dump(ks("flux-system", "./clusters/main", **oci)),
        "kubernetes/clusters/main/apps.yaml": dump(ks("apps", "./apps", **oci)),
        "kubernetes/apps/kustomization.yaml": kustomization("cm.yaml"),
        "kubernetes/apps/cm.yaml": dump(cm("web", "default", data={"a": "b"})),
        ".github/workflows/push.yaml": "jobs: {push: {steps: [{run: 'flux push artifact oci://ghcr.io/acme/home-ops:latest --path=./kubernetes'}]}}\n",
        ".fluxwarden.yaml": "clusters: {main: {path: kubernetes/clusters/main}}\nsource: {kind: OCIRepository, name: flux-system, path: kubernetes}\n",
    }
    root = write_tree(tmp_path / "repo", files)
    config = load_repo_config(files[".fluxwarden.yaml"])
    assert config.is_this_repo(config.sources[0]) and config.repo_path(config.sources[0], "apps") == "kubernetes/apps"
    report = check_repository(root, "main")
    assert {(t.id.name, t.path, t.source_path, t.objects) for t in report.tiers} == {
        ("flux-system", "kubernetes/clusters/main", "clusters/main", 2), ("apps", "kubernetes/apps", "apps", 1),
    }
    assert [f for f in report.findings if f.severity is not Severity.INFO] == []


def test_an_oci_artifact_of_a_subdirectory_is_discovered_without_configuration(tmp_path: Path) -> None:
    """devantler/homelab: CI pushes ./k8s (`flux push artifact --path=./k8s`) and creates the entry outside git
    (`flux create kustomization --source=OCIRepository/flux-system --path=clusters/homelab-prod/flux-system`).
    No `.fluxwarden.yaml`: the Kustomizations' paths exist only under k8s/, so discovery finds both clusters
    and renders their tiers from k8s/; a real finding (a dependency cycle) still comes out."""
    oci = {"source": "flux-system", "source_kind": "OCIRepository"}
    files: dict[str, str] = {"k8s/shared/apps/kustomization.yaml": kustomization("cm.yaml"), "k8s/shared/apps/cm.yaml": dump(cm("web", "default"))}
    for cluster in ("homelab-prod", "homelab-local"):
        files |= {
            f"k8s/clusters/{cluster}/flux-system/kustomization.yaml": kustomization("infrastructure.yaml", "apps.yaml"),
            f"k8s/clusters/{cluster}/flux-system/infrastructure.yaml": dump(ks("infrastructure", f"clusters/{cluster}/infrastructure", **oci)),
            f"k8s/clusters/{cluster}/flux-system/apps.yaml": dump(ks("apps", "shared/apps", depends_on=["infrastructure"], **oci)),
            f"k8s/clusters/{cluster}/infrastructure/kustomization.yaml": kustomization("ns.yaml"),
            f"k8s/clusters/{cluster}/infrastructure/ns.yaml": dump(obj("v1", "Namespace", "infra")),
        }
    root = write_tree(tmp_path / "repo", files)
    entries = {e.name: (e.path, e.how) for e in repository_clusters(root)}
    assert set(entries) == {"homelab-prod", "homelab-local"}
    assert entries["homelab-prod"][0] == "k8s/clusters/homelab-prod/flux-system"
    assert "OCIRepository flux-system (an artifact pushed from k8s/)" in entries["homelab-prod"][1]
    report = check_repository(root, "homelab-prod")
    assert {(t.id.name, t.path, t.objects) for t in report.tiers} >= {
        ("infrastructure", "k8s/clusters/homelab-prod/infrastructure", 1), ("apps", "k8s/shared/apps", 1),
    }
    assert [f for f in report.findings if f.severity is not Severity.INFO] == [], [f.message for f in report.findings]
    cyclic = write_tree(tmp_path / "cyclic", {
        **files, "k8s/clusters/homelab-prod/flux-system/infrastructure.yaml": dump(ks("infrastructure", "clusters/homelab-prod/infrastructure", depends_on=["apps"], **oci)),
    })
    assert any(f.check == "dependency-cycle" and f.severity is Severity.ERROR for f in check_repository(cyclic, "homelab-prod").findings)
    # Paths that also exist at the root are no artifact of a subdirectory: nothing inferred, as before.
    rooted = write_tree(tmp_path / "rooted", {**files, "shared/apps/kustomization.yaml": kustomization()})
    assert repository_clusters(rooted) == []


def test_a_flux_instance_syncing_an_oci_artifact_of_the_repository_root(tmp_path: Path) -> None:
    """controlplaneio-fluxcd/d2-fleet: CI pushes the repository (`flux push artifact --path=./`) and each cluster's
    FluxInstance syncs it (`sync: {kind: OCIRepository, path: clusters/prod-eu}`). The path exists here, so the
    OCIRepository is this repository: its tiers render (before, every cluster was `nothing-rendered`)."""
    instance = {
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "FluxInstance", "metadata": {"name": "flux", "namespace": "flux-system"},
        "spec": {"distribution": {"version": "2.x"}, "sync": {"kind": "OCIRepository", "url": "oci://ghcr.io/acme/fleet", "ref": "latest", "path": "clusters/prod-eu"}},
    }
    oci = {"source": "flux-system", "source_kind": "OCIRepository"}
    files = {
        "clusters/prod-eu/kustomization.yaml": kustomization("flux-instance.yaml", "infra.yaml"),
        "clusters/prod-eu/flux-instance.yaml": dump(instance),
        "clusters/prod-eu/infra.yaml": dump(ks("infra", "./infra", **oci)),
        "infra/kustomization.yaml": kustomization("cm.yaml"),
        "infra/cm.yaml": dump(cm("web", "default")),
    }
    root = write_tree(tmp_path / "repo", files)
    report = check_repository(root, "prod-eu")
    assert ("infra", "infra", 1) in {(t.id.name, t.path, t.objects) for t in report.tiers}
    assert [f for f in report.findings if f.severity is not Severity.INFO] == [], [f.message for f in report.findings]
    elsewhere = write_tree(tmp_path / "elsewhere", {**files, "clusters/prod-eu/flux-instance.yaml": dump({**instance, "spec": {**instance["spec"], "sync": {**instance["spec"]["sync"], "path": "clusters/other"}}})})
    assert any(f.check == "nothing-rendered" for f in check_repository(elsewhere, "prod-eu").findings)


def test_a_flux_instance_syncing_an_oci_artifact_of_a_subdirectory(tmp_path: Path) -> None:
    """xunholy/k8s-gitops: CI pushes ./kubernetes (`flux push artifact --path=./kubernetes`), the FluxInstance syncs
    it at `clusters/cluster-00`: the entry tier reads kubernetes/clusters/cluster-00 (before: render-failed
    "path 'clusters/cluster-00' not found", and every tier unchecked)."""
    instance = {
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "FluxInstance", "metadata": {"name": "flux", "namespace": "flux-system"},
        "spec": {"distribution": {"version": "2.x"}, "sync": {"kind": "OCIRepository", "url": "oci://ghcr.io/acme/k8s", "ref": "latest", "path": "./clusters/cluster-00"}},
    }
    oci = {"source": "flux-system", "source_kind": "OCIRepository"}
    files = {
        "kubernetes/clusters/cluster-00/kustomization.yaml": kustomization("flux-instance.yaml", "apps.yaml"),
        "kubernetes/clusters/cluster-00/flux-instance.yaml": dump(instance),
        "kubernetes/clusters/cluster-00/apps.yaml": dump(ks("apps", "./apps", **oci)),
        "kubernetes/apps/kustomization.yaml": kustomization("cm.yaml"),
        "kubernetes/apps/cm.yaml": dump(cm("web", "default")),
    }
    root = write_tree(tmp_path / "repo", files)
    [entry] = repository_clusters(root)
    assert entry.path == "kubernetes/clusters/cluster-00"
    report = check_repository(root, entry.name)
    assert {(t.id.name, t.path, t.objects) for t in report.tiers} >= {("flux-system", "kubernetes/clusters/cluster-00", 2), ("apps", "kubernetes/apps", 1)}
    assert [f for f in report.findings if f.severity is not Severity.INFO] == [], [f.message for f in report.findings]


def test_an_artifact_generator_splitting_an_oci_artifact_of_a_subdirectory(tmp_path: Path) -> None:
    """xunholy/k8s-gitops: the cluster syncs the OCI artifact of ./kubernetes; an ArtifactGenerator on it (`@repo`)
    copies `@repo/apps/<x>/app/`, which source-watcher puts at `<to>/app`; Kustomizations apply the ExternalArtifact
    at `./` and at the copy's parent `./apps/<x>/app`, where kustomize-controller generates a kustomization listing
    the copied directory (before: "copies nothing", 67 of 72 tiers not rendered)."""
    instance = {
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "FluxInstance", "metadata": {"name": "flux", "namespace": "flux-system"},
        "spec": {"distribution": {"version": "2.x"}, "sync": {"kind": "OCIRepository", "url": "oci://ghcr.io/acme/k8s", "ref": "latest", "path": "./clusters/cluster-00"}},
    }
    generator = obj(
        "source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator", "k8s-gitops", "flux-system",
        spec={
            "sources": [{"alias": "repo", "kind": "OCIRepository", "name": "flux-system"}],
            "artifacts": [
                {"name": "web", "copy": [{"from": "@repo/apps/base/web/app/", "to": "@artifact/"}]},
                {"name": "db", "copy": [{"from": "@repo/apps/base/db/app/", "to": "@artifact/apps/base/db/app/"}]},
            ],
        },
    )
    external = {"source": "web", "source_kind": "ExternalArtifact"}
    files = {
        "kubernetes/clusters/cluster-00/kustomization.yaml": kustomization("flux-instance.yaml", "cluster.yaml"),
        "kubernetes/clusters/cluster-00/flux-instance.yaml": dump(instance),
        "kubernetes/clusters/cluster-00/cluster.yaml": dump(ks("cluster", "./apps/overlays/cluster-00", source="flux-system", source_kind="OCIRepository")),
        "kubernetes/apps/overlays/cluster-00/kustomization.yaml": kustomization("generator.yaml", "apps.yaml"),
        "kubernetes/apps/overlays/cluster-00/generator.yaml": dump(generator),
        "kubernetes/apps/overlays/cluster-00/apps.yaml": dump(
            ks("web", "./", target_namespace="web", **external),
            ks("db", "./apps/base/db/app", source="db", source_kind="ExternalArtifact"),
        ),
        "kubernetes/apps/base/web/app/kustomization.yaml": kustomization("cm.yaml"),
        "kubernetes/apps/base/web/app/cm.yaml": dump(cm("web")),
        "kubernetes/apps/base/db/app/kustomization.yaml": kustomization("cm.yaml"),
        "kubernetes/apps/base/db/app/cm.yaml": dump(cm("db", "db")),
        "apps/base/db/app/kustomization.yaml": kustomization("other.yaml"),  # the repository root's namesake is not read
        "apps/base/db/app/other.yaml": dump(cm("wrong", "db"), cm("wrong-too", "db")),
    }
    root = write_tree(tmp_path / "repo", files)
    [entry] = repository_clusters(root)
    report = check_repository(root, entry.name)
    tiers = {t.id.name: t for t in report.tiers}
    assert (tiers["web"].path, tiers["web"].objects) == ("kubernetes/apps/base/web/app", 1)
    assert (tiers["db"].path, tiers["db"].objects) == ("kubernetes/apps/base/db/app", 1)
    assert [f for f in report.findings if f.check == "not-rendered" or f.severity is not Severity.INFO] == [], [f.message for f in report.findings]


def test_cluster_injected_substitution(tmp_path: Path, binary: KustomizeBinary) -> None:
    """The Flux Operator substitutes cluster-config into every Kustomization (no postBuild in git): declared per
    cluster, each tier is judged as if it had it, so its tokens are no literal-token errors."""
    files = flux_repo(
        {"config": ks("config", "./config", wait=True), "app": ks("app", "./app", depends_on=["config"])},
        {
            "config/kustomization.yaml": kustomization("cluster-config.yaml"),
            "config/cluster-config.yaml": dump(cm("cluster-config", "flux-system", data={"DOMAIN": "example.com"})),
            "app/kustomization.yaml": kustomization("m.yaml"),
            "app/m.yaml": dump(cm("web", "default", data={"host": "web.${DOMAIN}", "mail": "${MAIL_HOST:=smtp.local}"})),
        },
    )
    root = write_tree(tmp_path / "repo", files)
    before = check_repository(root, "dev")
    assert any("flux-system/app runs no substitution" in f.message for f in before.findings if f.check == "literal-token")
    write_tree(root, {".fluxwarden.yaml": "clusters:\n  dev: {path: clusters/dev, substitute_from: [ConfigMap/flux-system/cluster-config]}\n"})
    after = check_repository(root, "dev")
    assert [f for f in after.findings if f.severity is not Severity.INFO] == [], [f.message for f in after.findings]
    assert not [f for f in after.findings if f.check in ("literal-token", "undefined-variable")]
    # Only the entry tier renders before the tier that holds cluster-config: its variables are the one open set.
    assert {str(f.kustomization) for f in after.findings if f.check == "substitution-source-external"} <= {"flux-system/flux-system"}
    renderer, cr = render(tmp_path / "r2", {**files, ".fluxwarden.yaml": "clusters:\n  dev: {path: clusters/dev, substitute_from: [ConfigMap/flux-system/cluster-config]}\n"}, binary)
    web = by_ref(cr)["ConfigMap/default/web"]
    assert web.body["data"] == {"host": "web.example.com", "mail": "smtp.local"}


def _children_files(tmp_path: Path) -> dict[str, str]:
    # The Kustomization's file starts with a comment: its line (3) is found by parsing the file, not by its position.
    files = app_repo({"app/cm.yaml": dump(cm("c", "default"))})
    files["clusters/dev/app.yaml"] = "# the app\n---\n" + files["clusters/dev/app.yaml"]
    return files


def test_a_followed_tier_s_kustomizations_come_from_the_cache_as_located(tmp_path: Path, binary: KustomizeBinary) -> None:
    """A tier followed before gives its Kustomizations from the cache (no file is parsed for their lines): the same specs, lines included."""
    cache = BuildCache(tmp_path / "cache")
    files = _children_files(tmp_path)
    _, fresh = render(tmp_path / "fresh", files, binary)
    _, first = render(tmp_path / "first", files, binary, cache=cache)
    assert list((tmp_path / "cache").rglob("children-*.pickle"))
    renderer, again = render(tmp_path / "again", files, binary, cache=BuildCache(tmp_path / "cache"))
    assert renderer.locator.lines._files == {}  # nothing was located: the specs came from the cache
    assert again.tiers[APP].spec == first.tiers[APP].spec == fresh.tiers[APP].spec
    assert again.tiers[APP].spec.origin is not None and (again.tiers[APP].spec.origin.file, again.tiers[APP].spec.origin.line) == ("clusters/dev/app.yaml", 3)


def test_the_children_key_covers_the_tier_entry_configuration_and_files(tmp_path: Path, binary: KustomizeBinary) -> None:
    """Each input of `child_specs` is in its key: another finish key, entry, configuration or content of a
    Kustomization's file misses."""
    files = _children_files(tmp_path)
    renderer, cr = render(tmp_path / "one", files, binary, cache=BuildCache(tmp_path / "cache"))
    entry = next(t for t in cr.tiers.values() if t.flux_kustomizations())
    key = children_key(renderer.snapshot, "config", entry, "clusters/dev")
    assert key is not None and key == children_key(renderer.snapshot, "config", entry, "clusters/dev")
    assert children_key(renderer.snapshot, "other-config", entry, "clusters/dev") != key
    assert children_key(renderer.snapshot, "config", entry, "clusters/prod") != key
    assert children_key(renderer.snapshot, "config", replace(entry, finish_key="another"), "clusters/dev") != key
    assert children_key(renderer.snapshot, "config", replace(entry, finish_key=None), "clusters/dev") is None
    moved = dict(files, **{"clusters/dev/app.yaml": "# the app\n# moved down\n---\n" + files["clusters/dev/app.yaml"].split("---\n", 1)[1]})
    other, _ = render(tmp_path / "two", moved, binary)
    assert children_key(other.snapshot, "config", entry, "clusters/dev") != key  # same tier, the file's lines moved
