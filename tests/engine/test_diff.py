"""Tests for bot.diff: per-tier object diffs, Secret masking and the prune-transient check.

Golden files live in tests/golden/diff/. To regenerate them after an intended output change:

    FLUXWARDEN_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/engine/test_diff.py -q

then review the resulting `git diff tests/golden/diff/` before committing.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import enum
import os
from pathlib import Path
from typing import Any

import pytest

from bot.engine.reporting.diff import (
    CHECK_PRUNE_TRANSIENT,
    SECRET_VALUE_MASK,
    ChangeKind,
    ClusterDiff,
    ObjectChange,
    SecretKeyChanges,
    diff_clusters,
    mask_secret,
    normalise,
    prune_transient_findings,
)
from bot.engine.core.model import Manifest, ObjectRef, Severity, SourceLocation, SourceRef, TierId, TierSpec
from bot.engine.render.rendered import ClusterRender, RenderedTier

GOLDEN = Path(__file__).parents[1] / "golden" / "diff"
UPDATE_GOLDEN = os.environ.get("FLUXWARDEN_UPDATE_GOLDEN") == "1"

REPO = SourceRef("GitRepository", "flux-system", "flux-system")
OTHER_REPO = SourceRef("GitRepository", "vendor", "flux-system")

# A value that must never appear anywhere in a diff result.
MARKER = "s3cr3t-marker-7f1c2a"
MARKER_B64 = base64.b64encode(MARKER.encode()).decode()


# -- builders ---------------------------------------------------------------------------------------


def tid(name: str) -> TierId:
    return TierId("flux-system", name)


def spec(name: str, *, prune: bool = True, depends_on: tuple[str, ...] = (), source: SourceRef = REPO, defined_in: str | None = None) -> TierSpec:
    return TierSpec(
        id=tid(name),
        path=f"./{name}",
        source=source,
        depends_on=tuple(tid(d) for d in depends_on),
        prune=prune,
        defined_in=tid(defined_in) if defined_in else None,
        origin=SourceLocation(f"clusters/dev/{name}.yaml"),
    )


def obj(api_version: str, kind: str, name: str, namespace: str = "default", origin: str | None = None, **fields: Any) -> Manifest:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata.update(fields.pop("metadata", {}))
    body = {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields}
    return Manifest(ObjectRef(api_version, kind, namespace, name), body, SourceLocation(origin) if origin else None)


def cm(name: str = "settings", namespace: str = "default", **data: str) -> Manifest:
    return obj("v1", "ConfigMap", name, namespace, data=dict(data or {"key": "value"}))


def deployment(name: str = "web", image: str = "nginx:1.25", replicas: int = 2, **extra: Any) -> Manifest:
    body: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": name, "image": image}]},
        },
    }
    return obj("apps/v1", "Deployment", name, spec=body, **extra)


def secret(name: str = "creds", *, data: dict[str, str] | None = None, string_data: dict[str, str] | None = None) -> Manifest:
    fields: dict[str, Any] = {"type": "Opaque"}
    if data is not None:
        fields["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    if string_data is not None:
        fields["stringData"] = dict(string_data)
    return obj("v1", "Secret", name, **fields)


def with_body(manifest: Manifest, mutate) -> Manifest:
    """A copy of `manifest` whose body `mutate(body)` changed in place (ref recomputed)."""
    body = copy.deepcopy(dict(manifest.body))
    mutate(body)
    meta = body["metadata"]
    ref = ObjectRef(body["apiVersion"], body["kind"], meta.get("namespace", ""), meta["name"])
    return Manifest(ref, body, manifest.origin)


def render(tiers: dict[str, list[Manifest]], specs: dict[str, TierSpec] | None = None, *, cluster: str = "dev", failed: tuple[str, ...] = (), unrendered: tuple[str, ...] = ()) -> ClusterRender:
    specs = specs or {}
    out = {}
    for name, manifests in tiers.items():
        out[tid(name)] = RenderedTier(
            spec=specs.get(name) or spec(name),
            manifests=tuple(manifests),
            rendered=name not in unrendered,
            failed=name in failed,
        )
    return ClusterRender(cluster, "clusters/dev", out, findings=(), snapshot=None)


def only_change(diff: ClusterDiff) -> ObjectChange:
    changes = [c for t in diff.tiers for c in t.changes]
    assert len(changes) == 1, changes
    return changes[0]


def kinds(diff: ClusterDiff) -> list[tuple[str, str, str, str | None]]:
    return sorted(
        (c.kind.value, str(c.ref), c.tier.name, c.from_tier.name if c.from_tier else None) for t in diff.tiers for c in t.changes
    )


def all_strings(value: Any) -> list[str]:
    """Every string reachable from a result (dataclass fields, containers, enum values)."""
    out: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, enum.Enum):
            out.append(str(node.value))
        elif isinstance(node, str):
            out.append(node)
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            stack.extend(getattr(node, f.name) for f in dataclasses.fields(node))
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple, set, frozenset)):
            stack.extend(node)
        elif node is not None and not isinstance(node, (int, float, bool)):
            out.append(str(node))
    return out


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE_GOLDEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing; run with FLUXWARDEN_UPDATE_GOLDEN=1"
    assert text == path.read_text()


# -- normalise and mask -----------------------------------------------------------------------------


def _set(path: str, value: Any):
    def mutate(body: dict) -> None:
        node = body
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return mutate


NOISE_CASES = [
    pytest.param(_set("metadata.generation", 7), id="generation"),
    pytest.param(_set("metadata.resourceVersion", "12345"), id="resourceVersion"),
    pytest.param(_set("metadata.uid", "0b7c-11"), id="uid"),
    pytest.param(_set("metadata.creationTimestamp", "2024-01-01T00:00:00Z"), id="creationTimestamp"),
    pytest.param(_set("metadata.selfLink", "/apis/apps/v1/x"), id="selfLink"),
    pytest.param(_set("metadata.managedFields", [{"manager": "kubectl", "operation": "Apply"}]), id="managedFields"),
    pytest.param(_set("status", {"readyReplicas": 2, "conditions": [{"type": "Available"}]}), id="status"),
    pytest.param(_set("metadata.labels", {"helm.sh/chart": "web-1.2.4"}), id="helm-chart-label"),
    pytest.param(_set("spec.template.metadata.labels", {"app": "web", "helm.sh/chart": "web-1.2.4"}), id="helm-chart-label-pod-template"),
    pytest.param(_set("spec.template.metadata.annotations", {"checksum/config": "abc123"}), id="checksum-annotation-pod-template"),
    pytest.param(_set("metadata.annotations", {"checksum/secret": "def"}), id="checksum-annotation"),
    pytest.param(_set("metadata.annotations", {"config.kubernetes.io/origin": "path: x.yaml"}), id="kustomize-origin"),
    pytest.param(_set("metadata.annotations", {"internal.config.kubernetes.io/path": "x.yaml"}), id="kustomize-internal"),
    pytest.param(_set("metadata.annotations", {"kustomize.config.k8s.io/id": "x"}), id="kustomize-id"),
    pytest.param(_set("metadata.annotations", {}), id="empty-annotations"),
    pytest.param(_set("metadata.labels", {}), id="empty-labels"),
    pytest.param(_set("spec.template.metadata.creationTimestamp", None), id="template-creationTimestamp-null"),
    pytest.param(_set("metadata.annotations", {"kubectl.kubernetes.io/last-applied-configuration": "{}"}), id="last-applied"),
]


@pytest.mark.parametrize("mutate", NOISE_CASES)
def test_noise_only_change_is_no_change(mutate) -> None:
    base_dep = deployment(metadata={"labels": {"helm.sh/chart": "web-1.2.3"}, "annotations": {"checksum/secret": "abc"}})
    base = render({"apps": [base_dep]})
    head = render({"apps": [with_body(base_dep, mutate)]})
    diff = diff_clusters(base, head)
    assert diff.tiers == ()
    assert diff.changed_tiers() == frozenset()
    assert diff.empty


def test_normalise_keeps_meaningful_fields_and_does_not_mutate() -> None:
    body = deployment(
        metadata={"labels": {"app": "web", "helm.sh/chart": "x"}, "annotations": {"checksum/config": "1", "team": "a"}, "generation": 3},
        status={"replicas": 1},
    ).body
    before = copy.deepcopy(body)
    out = normalise(body)
    assert body == before
    assert out["metadata"] == {"name": "web", "namespace": "default", "labels": {"app": "web"}, "annotations": {"team": "a"}}
    assert "status" not in out
    assert out["spec"]["template"]["metadata"] == {"labels": {"app": "web"}}


def test_normalise_cronjob_and_volume_claim_templates() -> None:
    cron = obj(
        "batch/v1",
        "CronJob",
        "backup",
        spec={"jobTemplate": {"metadata": {"labels": {"helm.sh/chart": "c"}}, "spec": {"template": {"metadata": {"annotations": {"checksum/x": "1"}}}}}},
    )
    out = normalise(cron.body)
    assert "metadata" in out["spec"]["jobTemplate"] and out["spec"]["jobTemplate"]["metadata"] == {}
    assert out["spec"]["jobTemplate"]["spec"]["template"]["metadata"] == {}
    sts = obj("apps/v1", "StatefulSet", "db", spec={"volumeClaimTemplates": [{"metadata": {"name": "data", "creationTimestamp": None}}]})
    assert normalise(sts.body)["spec"]["volumeClaimTemplates"] == [{"metadata": {"name": "data"}}]


def test_mask_secret_masks_values_and_sops() -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": MARKER}},
        "data": {"a": MARKER_B64},
        "stringData": {"b": MARKER},
        "sops": {"mac": "ENC[AES256_GCM,data:mac,iv:x,tag:y,type:str]", "age": [{"recipient": "age1xyz", "enc": MARKER}], "lastmodified": "2024"},
    }
    out = mask_secret(body)
    assert out["data"] == {"a": SECRET_VALUE_MASK}
    assert out["stringData"] == {"b": SECRET_VALUE_MASK}
    assert out["sops"]["mac"] == SECRET_VALUE_MASK
    assert out["sops"]["age"] == [{"recipient": "age1xyz", "enc": SECRET_VALUE_MASK}]
    assert MARKER not in repr(out) and MARKER_B64 not in repr(out)
    assert body["data"] == {"a": MARKER_B64}  # input untouched


def test_mask_sops_anywhere_in_non_secret() -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"token": f"ENC[AES256_GCM,data:{MARKER},iv:abc,tag:def,type:str]", "plain": "visible"}}
    out = mask_secret(body)
    assert out["data"] == {"token": "ENC[**masked**]", "plain": "visible"}


# -- object-level changes ---------------------------------------------------------------------------


CHANGE_CASES = [
    pytest.param({"apps": [cm()]}, {"apps": [cm(), deployment()]}, [("added", "Deployment/default/web", "apps", None)], id="added"),
    pytest.param({"apps": [cm(), deployment()]}, {"apps": [cm()]}, [("removed", "Deployment/default/web", "apps", None)], id="removed"),
    pytest.param({"apps": [deployment()]}, {"apps": [deployment(image="nginx:1.26")]}, [("changed", "Deployment/default/web", "apps", None)], id="changed"),
    pytest.param({"a": [cm()], "b": []}, {"a": [], "b": [cm()]}, [("moved", "ConfigMap/default/settings", "b", "a")], id="moved"),
    pytest.param(
        {"a": [cm(key="1")], "b": []}, {"a": [], "b": [cm(key="2")]}, [("moved", "ConfigMap/default/settings", "b", "a")], id="moved-and-changed"
    ),
    pytest.param(
        {"apps": [obj("autoscaling/v2beta2", "HorizontalPodAutoscaler", "web", spec={"maxReplicas": 3})]},
        {"apps": [obj("autoscaling/v2", "HorizontalPodAutoscaler", "web", spec={"maxReplicas": 3})]},
        [("changed", "HorizontalPodAutoscaler/default/web", "apps", None)],
        id="apiVersion-only-same-group",
    ),
    pytest.param(
        {"a": [obj("autoscaling/v2beta2", "HorizontalPodAutoscaler", "web")], "b": []},
        {"a": [], "b": [obj("autoscaling/v2", "HorizontalPodAutoscaler", "web")]},
        [("moved", "HorizontalPodAutoscaler/default/web", "b", "a")],
        id="apiVersion-change-and-move",
    ),
    pytest.param(
        {"apps": [cm(namespace="old")]},
        {"apps": [cm(namespace="new")]},
        [("added", "ConfigMap/new/settings", "apps", None), ("removed", "ConfigMap/old/settings", "apps", None)],
        id="namespace-change-is-new-identity",
    ),
    pytest.param(
        {"apps": [obj("extensions/v1beta1", "Ingress", "web")]},
        {"apps": [obj("networking.k8s.io/v1", "Ingress", "web")]},
        [("added", "Ingress/default/web", "apps", None), ("removed", "Ingress/default/web", "apps", None)],
        id="group-change-is-new-identity",
    ),
    pytest.param(
        {"a": [cm(namespace="old")], "b": []},
        {"a": [], "b": [cm(namespace="new")]},
        [("added", "ConfigMap/new/settings", "b", None), ("removed", "ConfigMap/old/settings", "a", None)],
        id="namespace-change-across-tiers-is-not-a-move",
    ),
]


@pytest.mark.parametrize("base_tiers, head_tiers, expected", CHANGE_CASES)
def test_object_changes(base_tiers, head_tiers, expected) -> None:
    diff = diff_clusters(render(base_tiers), render(head_tiers))
    assert kinds(diff) == sorted(expected)


def test_changed_diff_content_and_counts() -> None:
    diff = diff_clusters(render({"apps": [deployment()]}), render({"apps": [deployment(image="nginx:1.26", replicas=3)]}))
    change = only_change(diff)
    assert change.secret_keys is None
    assert change.diff.startswith("--- a/Deployment/default/web\n+++ b/Deployment/default/web\n")
    assert "-      - image: nginx:1.25\n+      - image: nginx:1.26\n" in change.diff
    assert change.lines_changed == 4
    assert diff.tiers[0].size == 4


def test_added_and_removed_use_dev_null() -> None:
    added = only_change(diff_clusters(render({"apps": []}), render({"apps": [cm()]})))
    assert added.diff.startswith("--- /dev/null\n+++ b/ConfigMap/default/settings\n")
    assert added.lines_changed == len([line for line in added.diff.splitlines()[2:] if line.startswith("+")])
    removed = only_change(diff_clusters(render({"apps": [cm()]}), render({"apps": []})))
    assert removed.diff.startswith("--- a/ConfigMap/default/settings\n+++ /dev/null\n")
    assert removed.kind is ChangeKind.REMOVED and removed.tier == tid("apps")


def test_move_without_content_change() -> None:
    diff = diff_clusters(render({"a": [cm()], "b": [deployment()]}), render({"a": [], "b": [deployment(), cm()]}))
    change = only_change(diff)
    assert (change.kind, change.tier, change.from_tier, change.diff, change.lines_changed) == (ChangeKind.MOVED, tid("b"), tid("a"), "", 0)
    assert [t.tier for t in diff.tiers] == [tid("b")]
    assert diff.changed_tiers() == {tid("a"), tid("b")}
    assert diff.moves == (change,)


def test_move_with_content_change_carries_the_diff() -> None:
    diff = diff_clusters(render({"a": [cm(key="1")], "b": []}), render({"a": [], "b": [cm(key="2")]}))
    change = only_change(diff)
    assert change.kind is ChangeKind.MOVED
    assert "-  key: '1'\n+  key: '2'\n" in change.diff
    assert change.lines_changed == 2


def test_base_none_is_all_added() -> None:
    head = render({"infra": [cm()], "apps": [deployment()]})
    diff = diff_clusters(None, head)
    assert diff.added_tiers == (tid("apps"), tid("infra"))
    assert {c.kind for t in diff.tiers for c in t.changes} == {ChangeKind.ADDED}
    assert prune_transient_findings(diff, None, head) == []


def test_added_and_removed_tiers() -> None:
    diff = diff_clusters(render({"old": [], "keep": [cm()]}), render({"keep": [cm()], "new": []}))
    assert diff.added_tiers == (tid("new"),)
    assert diff.removed_tiers == (tid("old"),)
    assert diff.tiers == ()
    assert diff.changed_tiers() == {tid("new"), tid("old")}


@pytest.mark.parametrize("mode", ["failed", "unrendered"])
def test_uncompared_tiers_produce_no_spurious_changes(mode: str) -> None:
    base = render({"apps": [deployment(), cm()]})
    head = render({"apps": [cm()]}, **{mode: ("apps",)})
    diff = diff_clusters(base, head)
    assert diff.tiers == ()
    # A tier that failed with its objects is compared in part: nothing is reported removed.
    assert (diff.uncompared, diff.partial) == (((), (tid("apps"),)) if mode == "failed" else ((tid("apps"),), ()))


def test_failed_tier_shows_changes_to_objects_on_both_sides() -> None:
    """A tier failing on a side (e.g. a SOPS Secret without decryption) still shows what changed in it."""
    base = render({"flux-system": [cm(key="1"), deployment()]}, failed=("flux-system",))
    head = render({"flux-system": [cm(key="2"), cm("new")]})
    diff = diff_clusters(base, head)
    assert diff.partial == (tid("flux-system"),) and diff.uncompared == ()
    assert kinds(diff) == [("changed", "ConfigMap/default/settings", "flux-system", None)]
    assert diff.changed_tiers() == {tid("flux-system")}


def test_largest_tier_last() -> None:
    base = render({"small": [cm(key="1")], "big": [deployment()], "medium": [cm("m", a="1", b="1")], "same": [cm("z")]})
    head = render(
        {
            "small": [cm(key="2")],
            "big": [deployment(image="nginx:2", replicas=9), cm("extra", a="1", b="2", c="3")],
            "medium": [cm("m", a="2", b="2")],
            "same": [cm("z")],
        }
    )
    diff = diff_clusters(base, head)
    assert [t.tier.name for t in diff.tiers] == ["small", "medium", "big"]
    sizes = [t.size for t in diff.tiers]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


def test_ties_sorted_by_tier_id() -> None:
    diff = diff_clusters(render({"b": [cm(key="1")], "a": [cm(key="1")]}), render({"b": [cm(key="2")], "a": [cm(key="2")]}))
    assert [t.tier.name for t in diff.tiers] == ["a", "b"]


# -- duplicates -------------------------------------------------------------------------------------

DUPLICATE_CASES = [
    pytest.param({"a": [cm()], "b": [cm()]}, {"a": [], "b": [cm()]}, [("moved", "ConfigMap/default/settings", "b", "a")], id="dup-on-base-consolidated"),
    pytest.param({"a": [cm()], "b": []}, {"a": [cm()], "b": [cm()]}, [("added", "ConfigMap/default/settings", "b", None)], id="dup-on-head-is-added"),
    pytest.param(
        {"a": [cm()], "b": [cm()], "c": []},
        {"a": [], "b": [], "c": [cm()]},
        [("moved", "ConfigMap/default/settings", "c", "a"), ("moved", "ConfigMap/default/settings", "c", "b")],
        id="two-sources-one-destination",
    ),
    pytest.param(
        {"a": [cm()], "b": [], "c": []},
        {"a": [], "b": [cm()], "c": [cm()]},
        [("added", "ConfigMap/default/settings", "c", None), ("moved", "ConfigMap/default/settings", "b", "a")],
        id="one-source-two-destinations-first-by-tier-id",
    ),
]


@pytest.mark.parametrize("base_tiers, head_tiers, expected", DUPLICATE_CASES)
def test_duplicate_identities(base_tiers, head_tiers, expected) -> None:
    diff = diff_clusters(render(base_tiers), render(head_tiers))
    assert kinds(diff) == sorted(expected)


def test_repeated_identity_in_one_tier_keeps_last() -> None:
    old = obj("autoscaling/v2beta2", "HorizontalPodAutoscaler", "web", spec={"maxReplicas": 3})
    new = obj("autoscaling/v2", "HorizontalPodAutoscaler", "web", spec={"maxReplicas": 3})
    diff = diff_clusters(render({"apps": [old, new]}), render({"apps": [new]}))
    assert diff.tiers == ()


# -- Secrets ----------------------------------------------------------------------------------------


def test_secret_changes_report_key_names_only() -> None:
    base = render({"apps": [secret(data={"password": "old-" + MARKER, "gone": MARKER, "same": MARKER}, string_data={"token": MARKER})]})
    head = render({"apps": [secret(data={"password": MARKER, "same": MARKER, "new": MARKER + "x"}, string_data={"token": MARKER + "y"})]})
    diff = diff_clusters(base, head)
    change = only_change(diff)
    assert change.kind is ChangeKind.CHANGED
    assert change.secret_keys == SecretKeyChanges(added=("new",), removed=("gone",), changed=("password", "token"))
    assert "+  new: '**masked**'" in change.diff and "-  gone: '**masked**'" in change.diff
    # 2 diff lines (added/removed key) + 2 per value-only change
    assert change.lines_changed == 2 + 2 * 2
    strings = all_strings(diff)
    for needle in (MARKER, MARKER_B64, base64.b64encode(("old-" + MARKER).encode()).decode()):
        assert not any(needle in s for s in strings), needle


def test_secret_value_only_change_is_changed_with_empty_diff() -> None:
    diff = diff_clusters(render({"apps": [secret(data={"k": "one"})]}), render({"apps": [secret(data={"k": MARKER})]}))
    change = only_change(diff)
    assert (change.kind, change.diff, change.lines_changed) == (ChangeKind.CHANGED, "", 2)
    assert change.secret_keys == SecretKeyChanges(changed=("k",))
    assert not any(MARKER in s or MARKER_B64 in s for s in all_strings(diff))


def test_secret_data_to_string_data_same_value_is_no_key_change() -> None:
    diff = diff_clusters(render({"apps": [secret(data={"k": MARKER})]}), render({"apps": [secret(string_data={"k": MARKER})]}))
    change = only_change(diff)  # the manifest changed shape...
    assert change.secret_keys == SecretKeyChanges()  # ...but no key's value did
    assert change.secret_keys.empty


def test_added_secret_lists_keys_and_masks() -> None:
    diff = diff_clusters(render({"apps": []}), render({"apps": [secret(data={"a": MARKER}, string_data={"b": MARKER})]}))
    change = only_change(diff)
    assert change.secret_keys == SecretKeyChanges(added=("a", "b"))
    assert not any(MARKER in s or MARKER_B64 in s for s in all_strings(diff))


def test_sops_encrypted_secret_is_masked() -> None:
    def sops_secret(value: str, mac: str, date: str) -> Manifest:
        return obj(
            "v1",
            "Secret",
            "creds",
            data={"password": f"ENC[AES256_GCM,data:{value},iv:aaa,tag:bbb,type:str]"},
            sops={"mac": f"ENC[AES256_GCM,data:{mac},iv:c,tag:d,type:str]", "age": [{"recipient": "age1abc", "enc": f"-----BEGIN AGE {mac}"}], "lastmodified": date},
        )

    base = sops_secret("c1" + MARKER, "m1" + MARKER, "2024-01-01T00:00:00Z")
    head = sops_secret("c2" + MARKER, "m2" + MARKER, "2024-02-01T00:00:00Z")
    diff = diff_clusters(render({"apps": [base]}), render({"apps": [head]}))
    change = only_change(diff)
    assert change.secret_keys == SecretKeyChanges(changed=("password",))
    assert "+  lastmodified: '2024-02-01T00:00:00Z'" in change.diff  # re-encryption is visible, the values are not
    assert not any(MARKER in s for s in all_strings(diff))


def test_sops_value_in_configmap_masked_in_diff() -> None:
    def enc(v: str) -> Manifest:
        return cm(token=f"ENC[AES256_GCM,data:{v},iv:x,tag:y,type:str]", plain="shown")

    change = only_change(diff_clusters(render({"apps": [enc("one")]}), render({"apps": [enc(MARKER)]})))
    assert change.kind is ChangeKind.CHANGED  # the ciphertext did change
    assert change.secret_keys is None
    assert MARKER not in change.diff


# -- golden unified diffs ---------------------------------------------------------------------------


def test_golden_deployment_diff() -> None:
    base_dep = deployment(metadata={"labels": {"app": "web", "helm.sh/chart": "web-1.0.0"}}, status={"readyReplicas": 2})
    head_dep = deployment(image="nginx:1.27", replicas=3, metadata={"labels": {"app": "web", "tier": "frontend", "helm.sh/chart": "web-1.1.0"}})
    head_dep = with_body(head_dep, _set("spec.template.metadata.annotations", {"checksum/config": "ffff", "prometheus.io/scrape": "true"}))
    change = only_change(diff_clusters(render({"apps": [base_dep]}), render({"apps": [head_dep]})))
    check_golden("deployment_changed.diff", change.diff)


def test_golden_secret_moved_diff() -> None:
    base_sec = secret(data={"password": MARKER, "user": "admin"})
    head_sec = with_body(secret(data={"password": MARKER + "2", "user": "admin", "host": "db"}), _set("metadata.labels", {"app": "db"}))
    change = only_change(diff_clusters(render({"platform": [base_sec], "apps": []}), render({"platform": [], "apps": [head_sec]})))
    assert change.kind is ChangeKind.MOVED
    assert MARKER not in change.diff and MARKER_B64 not in change.diff
    check_golden("secret_moved.diff", change.diff)


# -- prune transient --------------------------------------------------------------------------------


def move_renders(
    source: TierSpec,
    destination: TierSpec,
    moved: list[Manifest] | None = None,
    *,
    head_moved: list[Manifest] | None = None,
    head_source: TierSpec | None = None,
    drop_source: bool = False,
) -> tuple[ClusterRender, ClusterRender]:
    moved = moved if moved is not None else [cm()]
    head_moved = head_moved if head_moved is not None else moved
    base = render({source.id.name: moved, destination.id.name: []}, {source.id.name: source, destination.id.name: destination})
    head_tiers = {destination.id.name: head_moved}
    head_specs = {destination.id.name: destination}
    if not drop_source:
        head_tiers[source.id.name] = []
        head_specs[source.id.name] = head_source or source
    return base, render(head_tiers, head_specs)


def prune_findings(base: ClusterRender, head: ClusterRender):
    return prune_transient_findings(diff_clusters(base, head), base, head)


def test_prune_transient_positive() -> None:
    moved = [obj("v1", "ConfigMap", "b", origin="apps-b/cm.yaml"), obj("v1", "ConfigMap", "a", origin="apps-b/a.yaml")]
    findings = prune_findings(*move_renders(spec("platform-config"), spec("platform-config-cdi"), moved))
    assert len(findings) == 1
    f = findings[0]
    assert (f.check, f.severity, f.kustomization) == (CHECK_PRUNE_TRANSIENT, Severity.WARNING, tid("platform-config"))
    assert f.object == moved[1].ref  # the first by sort order
    assert f.location == SourceLocation("apps-b/a.yaml")
    assert "ConfigMap/default/a, ConfigMap/default/b" in f.message
    assert "2 objects move from flux-system/platform-config (prune: true) to flux-system/platform-config-cdi" in f.message
    assert "`flux get kustomization platform-config -n flux-system`" in f.message
    assert "Ready" in f.message and "prune: false" in f.message
    assert "independently" in f.message and "defaults" in f.message
    assert "does not depend on" in f.message and "undefined" in f.message
    assert "HIGH IMPACT" not in f.message


@pytest.mark.parametrize(
    "source, moved",
    [
        pytest.param(spec("a", prune=False), [cm()], id="source-prune-false"),
        pytest.param(spec("a"), [obj("v1", "ConfigMap", "c", metadata={"annotations": {"kustomize.toolkit.fluxcd.io/prune": "disabled"}})], id="annotated-prune-disabled"),
        pytest.param(spec("a"), [obj("v1", "ConfigMap", "c", metadata={"labels": {"kustomize.toolkit.fluxcd.io/prune": "Disabled"}})], id="labelled-prune-disabled-any-case"),
        pytest.param(spec("a"), [obj("v1", "ConfigMap", "c", metadata={"annotations": {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}})], id="reconcile-disabled"),
    ],
)
def test_prune_transient_negative(source: TierSpec, moved: list[Manifest]) -> None:
    assert prune_findings(*move_renders(source, spec("b"), moved)) == []


def test_prune_disabled_only_on_head_does_not_protect() -> None:
    head_cm = obj("v1", "ConfigMap", "settings", metadata={"annotations": {"kustomize.toolkit.fluxcd.io/prune": "disabled"}})
    findings = prune_findings(*move_renders(spec("a"), spec("b"), [cm()], head_moved=[head_cm]))
    assert len(findings) == 1
    assert "does not protect" in findings[0].message


def test_no_finding_without_moves() -> None:
    base = render({"a": [cm(key="1")]})
    head = render({"a": [cm(key="2")]})
    assert prune_findings(base, head) == []


ORDER_CASES = [
    pytest.param(spec("src"), spec("dst", depends_on=("src",)), ["expected outcome", "revision-gated", "only flux-system/src dependsOn flux-system/dst"], id="dest-depends-on-source-same-source"),
    pytest.param(spec("src"), spec("dst", depends_on=("src",), source=OTHER_REPO), ["different sources", "not revision-gated", "undefined"], id="dest-depends-on-source-other-source"),
    pytest.param(spec("src", depends_on=("dst",)), spec("dst", source=OTHER_REPO), ["different sources", "does not order this hand-over"], id="source-depends-on-dest-other-source"),
    pytest.param(spec("src"), spec("dst"), ["does not depend on", "undefined", "dependsOn flux-system/dst on the same source"], id="no-edge"),
    pytest.param(spec("src"), spec("dst", defined_in="src"), ["applies the Kustomization flux-system/dst itself", "#338"], id="nested-down"),
]


@pytest.mark.parametrize("source, destination, phrases", ORDER_CASES)
def test_prune_transient_depends_on_wording(source: TierSpec, destination: TierSpec, phrases: list[str]) -> None:
    findings = prune_findings(*move_renders(source, destination))
    assert len(findings) == 1
    for phrase in phrases:
        assert phrase in findings[0].message, phrase


def test_source_depends_on_destination_same_source_is_safe_hand_over() -> None:
    assert prune_findings(*move_renders(spec("src", depends_on=("dst",)), spec("dst"))) == []


def test_transitive_source_depends_on_destination_is_safe() -> None:
    src, mid, dst = spec("src", depends_on=("mid",)), spec("mid", depends_on=("dst",)), spec("dst")
    base = render({"src": [cm()], "mid": [], "dst": []}, {"src": src, "mid": mid, "dst": dst})
    head = render({"src": [], "mid": [], "dst": [cm()]}, {"src": src, "mid": mid, "dst": dst})
    assert prune_findings(base, head) == []


def test_removed_source_tier_rename_case() -> None:
    findings = prune_findings(*move_renders(spec("old-name"), spec("new-name"), drop_source=True))
    assert len(findings) == 1
    assert "removed by this change" in findings[0].message and "finalizer" in findings[0].message


def test_prune_false_in_same_change_is_called_out() -> None:
    findings = prune_findings(*move_renders(spec("a"), spec("b"), head_source=spec("a", prune=False)))
    assert len(findings) == 1
    assert "same change is not reliable" in findings[0].message


def test_escalated_kinds_storage_profile() -> None:
    profile = obj("cdi.kubevirt.io/v1beta1", "StorageProfile", "longhorn-vm", namespace="", spec={"claimPropertySets": [{"accessModes": ["ReadWriteMany"], "volumeMode": "Block"}]})
    findings = prune_findings(*move_renders(spec("platform-config"), spec("platform-config-cdi", depends_on=("platform-config",)), [profile]))
    assert len(findings) == 1
    message = findings[0].message
    assert findings[0].severity is Severity.WARNING
    assert message.startswith("HIGH IMPACT: StorageProfile/longhorn-vm:")
    assert "empty spec" in message and "expected outcome" in message


@pytest.mark.parametrize(
    "manifest",
    [
        obj("v1", "PersistentVolumeClaim", "data"),
        obj("v1", "PersistentVolume", "pv-1", namespace=""),
        obj("v1", "Namespace", "team", namespace=""),
        obj("apps/v1", "StatefulSet", "db"),
        obj("cdi.kubevirt.io/v1beta1", "CDI", "cdi", namespace=""),
        obj("kubevirt.io/v1", "KubeVirt", "kubevirt", namespace="kubevirt"),
        obj("kubevirt.io/v1", "VirtualMachine", "vm"),
        obj("v1", "Service", "lb", spec={"type": "LoadBalancer"}),
    ],
    ids=lambda m: m.ref.kind,
)
def test_escalated_kinds(manifest: Manifest) -> None:
    findings = prune_findings(*move_renders(spec("a"), spec("b"), [manifest]))
    assert findings[0].message.startswith(f"HIGH IMPACT: {manifest.ref}:")


def test_one_finding_per_tier_pair() -> None:
    a, b, c = spec("a"), spec("b"), spec("c")
    base = render({"a": [cm("x"), cm("y"), cm("z")], "b": [], "c": []}, {"a": a, "b": b, "c": c})
    head = render({"a": [], "b": [cm("x"), cm("y")], "c": [cm("z")]}, {"a": a, "b": b, "c": c})
    findings = prune_findings(base, head)
    assert [(f.kustomization.name, f.object.name) for f in findings] == [("a", "x"), ("a", "z")]
    assert "flux-system/b" in findings[0].message and "flux-system/c" in findings[1].message


class _Untouchable(tuple):
    """A tier's objects as read back from the cache on demand: iterating them is what the diff must avoid."""

    __slots__ = ()
    reads = 0

    def __iter__(self):
        type(self).reads += 1
        return super().__iter__()


def test_a_tier_finished_under_the_same_key_on_both_sides_is_not_read() -> None:
    """A warm review reads the base side back from the cache: an unchanged tier (equal finish keys: same build,
    same variables) is not loaded to be compared; a tier whose key changed is, and its change is found."""
    base, head = render({"a": [cm("x")], "b": [deployment()]}), render({"a": [cm("x")], "b": [deployment(image="nginx:1.26")]})
    keyed = {}
    for side, name in ((base, "base"), (head, "head")):
        keyed[name] = dataclasses.replace(side, tiers={
            tid("a"): dataclasses.replace(side.tiers[tid("a")], manifests=_Untouchable(side.tiers[tid("a")].manifests), finish_key="same"),
            tid("b"): dataclasses.replace(side.tiers[tid("b")], finish_key=f"b-{name}"),
        })
    _Untouchable.reads = 0
    diff = diff_clusters(keyed["base"], keyed["head"])
    assert only_change(diff).ref.name == "web" and _Untouchable.reads == 0
