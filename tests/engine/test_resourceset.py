"""What a ResourceSet creates from the inputs git holds, as flux-operator's builder and `build rset` make it."""

from __future__ import annotations

from typing import Any, Sequence

import pytest
import yaml

from bot.engine.core.model import Manifest, Severity, TierId
from bot.engine.render.rendered import object_ref
from bot.engine.render.resourceset import OWNER_NAME_LABEL, expand, normalise_key, render_resourceset

TIER = TierId("flux-system", "tenants")


def manifest(text: str) -> Manifest:
    body = yaml.safe_load(text)
    ref = object_ref(body)
    assert ref is not None
    return Manifest(ref, body, None)


def rset(spec: dict[str, Any], name: str = "apps", namespace: str = "flux-system") -> Manifest:
    body = {"apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet", "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    return Manifest(object_ref(body), body, None)  # type: ignore[arg-type]


def provider(name: str, type_: str = "Static", labels: dict[str, str] | None = None, **defaults: Any) -> Manifest:
    body = {
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSetInputProvider",
        "metadata": {"name": name, "namespace": "flux-system", **({"labels": labels} if labels else {})},
        "spec": {"type": type_, **({"defaultValues": defaults} if defaults else {})},
    }
    return Manifest(object_ref(body), body, None)  # type: ignore[arg-type]


# d2-fleet tenants/apps.yaml, shortened: inline inputs into `spec.resources`.
TENANTS = {
    "inputs": [{"tenant": "frontend", "tag": "v1"}, {"tenant": "backend", "tag": "v1"}],
    "resources": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "<< inputs.tenant >>"}},
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "<< inputs.tenant >>"},
            "spec": {"path": "./apps/<< inputs.tenant >>", "prune": True, "sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"}},
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": "flux-system"}},  # the same for every input
    ],
}


def names(spec: dict[str, Any], providers: Sequence[Manifest] = ()) -> list[str]:
    return [str(object_ref(o)) for o in render_resourceset(rset(spec), providers).objects]


@pytest.mark.parametrize(
    "spec, providers, expected",
    [
        # resources outer, inputs inner; duplicates by group/kind/namespace/name keep the first
        (TENANTS, [], ["Namespace/frontend", "Namespace/backend", "Kustomization/frontend/apps", "Kustomization/backend/apps", "ConfigMap/flux-system/shared"]),
        # no inputs at all: rendered once, without inputs
        ({"resources": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one", "namespace": "x"}}]}, [], ["ConfigMap/x/one"]),
        # resourcesTemplate after resources; resources win a duplicate
        (
            {"inputs": [{"n": "a"}], "resources": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}, "data": {"from": "resources"}}],
             "resourcesTemplate": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: << inputs.n >>, namespace: x}\n---\n<<- if eq inputs.n \"a\" >>\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: x}\n<<- end >>\n"},
            [], ["ConfigMap/x/a", "Secret/x/s"],
        ),
        # the reconcile: disabled annotation leaves an object out
        (
            {"inputs": [{"t": "a"}, {"t": "b"}], "resources": [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {
                "name": "sa-<< inputs.t >>", "namespace": "x",
                "annotations": {"fluxcd.controlplane.io/reconcile": '<< if eq inputs.t "a" >>enabled<< else >>disabled<< end >>'}}}]},
            [], ["ServiceAccount/x/sa-a"],
        ),
        # Static providers by name and by selector, after the inline inputs, sorted by name
        (
            {"inputs": [{"env": "inline"}], "inputsFrom": [{"name": "zeta"}, {"selector": {"matchLabels": {"team": "web"}}}],
             "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "<< inputs.env >>"}}]},
            [provider("zeta", env="z"), provider("alpha", labels={"team": "web"}, env="a"), provider("other", labels={"team": "db"}, env="o")],
            ["Namespace/inline", "Namespace/a", "Namespace/z"],
        ),
        # Permute: the cartesian product, each provider's inputs under its normalised name
        (
            {"inputStrategy": {"name": "Permute"}, "inputsFrom": [{"name": "app-envs"}, {"name": "regions"}],
             "resourcesTemplate": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: << inputs.app_envs.env >>-<< inputs.regions.region >>\n"},
            [provider("app-envs", env="dev"), provider("regions", region="eu")],
            ["Namespace/dev-eu"],
        ),
        # steps: rendered in order
        ({"steps": [{"name": "one", "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}]},
                    {"name": "two", "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}]}]}, [], ["Namespace/a", "Namespace/b"]),
        # inputsFrom whose providers export nothing: an empty set
        ({"inputsFrom": [{"selector": {"matchLabels": {"none": "x"}}}], "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}]}, [], []),
    ],
)
def test_objects_created(spec: dict[str, Any], providers: list[Manifest], expected: list[str]) -> None:
    assert names(spec, providers) == expected


def test_built_in_inputs_and_metadata() -> None:
    spec = {
        "inputs": [{"replicas": 3}],
        "inputsFrom": [{"name": "static"}],
        "commonMetadata": {"labels": {"team": "x"}},
        "resourcesTemplate": (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-<< inputs.provider.kind | lower >>\n  namespace: << inputs.provider.namespace >>\n"
            "data:\n  id: \"<< get inputs \"id\" | default \"none\" >>\"\n  replicas: \"<< get inputs \"replicas\" | default 0 >>\"\n"
        ),
    }
    objects = render_resourceset(rset(spec), [provider("static")]).objects
    assert [o["metadata"]["name"] for o in objects] == ["cm-resourceset", "cm-resourcesetinputprovider"]
    assert objects[0]["data"] == {"id": "none", "replicas": "3"}  # a JSON number is a float64 printed as 3
    assert objects[1]["data"]["id"] == "152109705"  # adler32 of the provider's name, as `flux-operator build rset` makes it
    assert objects[0]["metadata"]["labels"] == {OWNER_NAME_LABEL: "apps", "resourceset.fluxcd.controlplane.io/namespace": "flux-system", "team": "x"}


def test_plain_template_values_keep_their_yaml_type() -> None:
    # `spec.resources` become YAML text before templating: an unquoted action that prints 3 is the number 3
    spec = {"inputs": [{"n": 3}], "resources": [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "x"}, "spec": {"replicas": "<< inputs.n | int >>"}}]}
    assert render_resourceset(rset(spec)).objects[0]["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    "spec, providers, check, severity, text",
    [
        ({"inputs": [{"a": "x"}], "resourcesTemplate": "kind: << semverCompare \"1\" \"2\" >>"}, [], "resourceset-not-rendered", Severity.INFO,
         "ResourceSet flux-system/apps not rendered: unsupported template function semverCompare"),
        ({"inputsFrom": [{"name": "prs"}], "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "<< inputs.branch >>"}}]},
         [provider("prs", "GitHubPullRequest")], "resourceset-not-rendered", Severity.INFO, "input provider prs (type GitHubPullRequest) needs a live API"),
        ({"inputsFrom": [{"name": "gone"}], "resources": []}, [], "resourceset-not-rendered", Severity.INFO, "ResourceSetInputProvider/flux-system/gone is not in git"),
        ({"inputs": [{"a": "x"}], "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "<< inputs.b >>"}}]}, [], "resourceset-failed", Severity.WARNING,
         "map has no entry for key 'b'"),
        ({"inputs": [{"a": "x"}], "resourcesTemplate": "a: [\n"}, [], "resourceset-failed", Severity.WARNING, "not render to valid YAML"),
        ({"steps": [{"name": "one", "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}]},
                    {"name": "two", "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}]}]}, [], "resourceset-failed", Severity.WARNING,
         "duplicate resource Namespace/a in step 'two'"),
        ({"inputStrategy": {"name": "Permute"}, "inputsFrom": [{"name": "prs"}], "resources": []}, [provider("prs", "GitLabMergeRequest")],
         "resourceset-not-rendered", Severity.INFO, "permutes inputs of a provider that needs a live API"),
    ],
)
def test_what_is_not_rendered_is_said(spec: dict[str, Any], providers: list[Manifest], check: str, severity: Severity, text: str) -> None:
    result = render_resourceset(rset(spec), providers, TIER)
    assert result.objects == ()
    assert [(f.check, f.severity) for f in result.findings][-1] == (check, severity)
    assert text in result.findings[-1].message
    assert result.findings[-1].kustomization == TIER


def test_depends_on_a_ready_kustomization_orders_what_it_creates() -> None:
    spec = {
        **TENANTS,
        "dependsOn": [
            {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "name": "infra", "namespace": "flux-system", "ready": True},
            # a CEL readyExpr can mean anything (d2-fleet: `status.observedGeneration >= 0`, "exists"): not ordering
            {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "name": "other", "ready": True, "readyExpr": "true"},
        ],
    }
    kustomizations = [o for o in render_resourceset(rset(spec)).objects if o["kind"] == "Kustomization"]
    assert [o["spec"]["dependsOn"] for o in kustomizations] == [[{"name": "infra", "namespace": "flux-system"}]] * 2


def test_expand_follows_resourcesets_that_create_resourcesets_and_providers() -> None:
    inner = {"apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet", "metadata": {"name": "inner", "namespace": "flux-system"},
             "spec": {"inputsFrom": [{"name": "made"}], "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-<< inputs.p >>"}}]}}
    made = {"apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSetInputProvider", "metadata": {"name": "made", "namespace": "flux-system"},
            "spec": {"type": "Static", "defaultValues": {"ns": "deep"}}}
    # the outer ResourceSet templates the inner one's text first, as the operator does
    outer = rset({"inputs": [{"p": "made"}], "resources": [made, inner]}, name="outer")
    created, findings = expand([outer], [], TIER)
    assert [str(m.ref) for m in created] == ["ResourceSetInputProvider/flux-system/made", "ResourceSet/flux-system/inner", "Namespace/ns-made"]
    assert findings == []


@pytest.mark.parametrize("name, key", [("app-envs", "app_envs"), ("My Provider.v2", "my_provider_v2"), ("--x--", "x"), ("a$b", "ab")])
def test_normalised_provider_keys(name: str, key: str) -> None:
    assert normalise_key(name) == key


def test_many_inputs_share_one_budget() -> None:
    # each execution is small, together they are not: the ResourceSet stops with an info line, not a hang
    spec = {"inputs": [{"i": float(n)} for n in range(500)],
            "resourcesTemplate": "<< range $j := 400 >>apiVersion: v1\nkind: Namespace\nmetadata: {name: n-<< inputs.i >>}\n---\n<< end >>"}
    result = render_resourceset(rset(spec))
    assert result.objects == ()
    assert "not rendered: the template takes more than 500,000 steps" in result.findings[0].message
