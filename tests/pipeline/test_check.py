"""End to end through real kustomize: what the check tables (tests/engine/test_checks.py, rendered in memory)
cannot show. Tiers whose own spec kustomize applies (patches, images, namePrefix, targetNamespace), kustomize's
errors as a user sees them, the build cache, the bundled example and its seed incident; and, on one or two
cases per check, that kustomize's render and the in-memory builder's give the same findings.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from bot.adapters.kustomize import locate_kustomize
from bot.adapters.workspace import build_snapshot
from bot.engine.render.config import load_repo_config
from bot.engine.core.model import Severity, TierId
from bot.pipeline.check import CheckOptions, check_repository
from bot.pipeline.session import Session
from bot.service.cli import main as cli_main
from tests.engine import builders
from tests.engine.test_checks import (
    API_CASES, CYCLE_CASES, DRIFT_CASES, DUPLICATE_CASES, LITERAL_CASES, PROVIDER_CASES, SOUND_CASES, TEAM_NS, TIER_ORDER_CASES, UNDEFINED_CASES,
    _SUBSTITUTING, _chart_note, cm, found, kustomization, ks, messages, obj, repo, severities, two_tiers,
)
from tests.fluxrepo import dump, write_tree

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "home-ops"


def run(tmp_path: Path, files, cluster: str = "dev"):
    write_tree(tmp_path, files)
    return check_repository(tmp_path, cluster)


# --------------------------------------------------------------------------------------------
# a Kustomization's targetNamespace: kustomize sets it on its objects

def test_target_namespace_in_other_tier(tmp_path):
    files = two_tiers([TEAM_NS], [obj("v1", "ConfigMap", "x", data={"k": "v"})], b_spec={"targetNamespace": "team"})
    report = run(tmp_path, files)
    assert found(report, "missing-provider") == {("missing-provider", "b")}
    got = messages(report, "missing-provider")
    assert len(got) == 1 and "Namespace team" in got[0], got
    with pytest.raises(builders.NeedsKustomize):
        builders.check(files)


# --------------------------------------------------------------------------------------------
# tokens a Kustomization carries into its own build

# A `${…}` in the fields a Flux Kustomization carries into its own build (patches, images, namePrefix…)
# reaches that build and its own postBuild, not its parent's (fluxcd/pkg kustomize GenerateManifest).
_PATCH_CM = {"target": {"kind": "ConfigMap", "name": "x"}, "patch": "- op: replace\n  path: /data/k\n  value: ${CLUSTER}\n"}
_CHILD_PATCHES = {"patches": [{"target": {"kind": "Kustomization"}, "patch": yaml.safe_dump([
    {"op": "add", "path": "/spec/postBuild", "value": {"substitute": {"CLUSTER": "${CLUSTER}"}}},
])}]}
_CHILD_ESCAPED_PATCH = {"patches": [{"target": {"kind": "Kustomization"}, "patch": yaml.safe_dump([
    {"op": "add", "path": "/spec/patches", "value": [{"target": {"kind": "ConfigMap"}, "patch": "- op: add\n  path: /data/app\n  value: $${APP}\n"}]},
])}]}
CARRIED_CASES = [
    pytest.param(
        # The entry runs no substitution; x's own postBuild substitutes its patch.
        repo({"x": ks("x", "./x", post_build={"substitute": {"CLUSTER": "dev"}}, patches=[_PATCH_CM])}, {"x": [cm("x")]}),
        set(), ("x", "x", "k", "dev"), id="child-patch-own-postbuild",
    ),
    pytest.param(
        repo({"x": ks("x", "./x", images=[{"name": "nginx", "newTag": "${VERSION}"}], namePrefix="${CLUSTER}-", post_build={"substitute": {"CLUSTER": "dev", "VERSION": "1.2"}})},
             {"x": [obj("apps/v1", "Deployment", "web", "default", spec={"template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}})]}),
        set(), None, id="child-images-and-prefix-own-postbuild",
    ),
    pytest.param(
        # x has no postBuild, and the cluster substitutes CLUSTER elsewhere: x (not the entry) ships it literally.
        repo({"x": ks("x", "./x", patches=[_PATCH_CM]), **_SUBSTITUTING, "b": ks("b", "./b", post_build={"substitute": {"CLUSTER": "dev"}})},
             {"x": [cm("x")], "b": [cm("b", k="${CLUSTER}")]}),
        {("literal-token", "x", Severity.ERROR)}, None, id="child-patch-without-postbuild-is-the-childs",
    ),
    pytest.param(
        # commonMetadata is stamped after substitution (kustomize-controller apply): the parent's token,
        # and x substitutes CLUSTER in its own objects, so it is a mistake.
        repo({"x": ks("x", "./x", commonMetadata={"labels": {"cluster": "${CLUSTER}"}}, post_build={"substitute": {"CLUSTER": "dev"}})}, {"x": [cm("x")]}),
        {("literal-token", "flux-system", Severity.ERROR)}, None, id="child-common-metadata-is-the-parents",
    ),
    pytest.param(
        # apps patches every child to receive CLUSTER from its own postBuild (the parent-injected pattern).
        repo({"apps": ks("apps", "./apps", post_build={"substitute": {"CLUSTER": "dev"}}, **_CHILD_PATCHES)},
             {"apps": [ks("web", "./web")], "web": [cm("x", k="${CLUSTER}")]}),
        set(), ("web", "x", "k", "dev"), id="parent-injected-substitute",
    ),
    pytest.param(
        # apps escapes $${APP}: it hands web a patch with ${APP}, which web's own postBuild substitutes.
        repo({"apps": ks("apps", "./apps", post_build={"substitute": {"CLUSTER": "dev"}}, **_CHILD_ESCAPED_PATCH)},
             {"apps": [ks("web", "./web", post_build={"substitute": {"APP": "web"}})], "web": [cm("x")]}),
        set(), ("web", "x", "app", "web"), id="parent-injected-escaped-patch",
    ),
    pytest.param(
        # apps injects ${CLUSTER} into its children but has no postBuild: web's CLUSTER is "${CLUSTER}".
        repo({"apps": ks("apps", "./apps", **_CHILD_PATCHES)}, {"apps": [ks("web", "./web")], "web": [cm("x")]}),
        {("literal-token", "apps", Severity.ERROR)}, None, id="parent-injected-without-parent-postbuild",
    ),
]


@pytest.mark.parametrize("files, expected, value", CARRIED_CASES)
def test_tokens_a_kustomization_carries_into_its_own_build(tmp_path, files, expected, value):
    report = run(tmp_path / "repo", files)
    assert severities(report, "literal-token") | severities(report, "undefined-variable") == expected, [f.message for f in report.findings]
    assert not found(report, "render-failed"), messages(report, "render-failed")
    if value:
        tier, name, key, want = value
        snapshot = build_snapshot(tmp_path / "repo", tmp_path / "snap")
        render = Session(snapshot, load_repo_config(None), locate_kustomize()).renderer().render_cluster("dev", "clusters/dev")
        objects = {m.ref.name: m.body for m in render.tiers[TierId("flux-system", tier)].manifests}
        assert objects[name]["data"][key] == want


def test_undefined_variable_in_a_child_spec_suggests_the_escape(tmp_path):
    # apps substitutes, but APP is meant for web's own postBuild: apps turns it into "" first.
    files = repo(
        {"apps": ks("apps", "./apps", post_build={"substitute": {"CLUSTER": "dev"}})},
        {"apps": [ks("web", "./web", patches=[_PATCH_CM | {"patch": "- op: replace\n  path: /data/k\n  value: ${APP}\n"}], post_build={"substitute": {"APP": "web"}})], "web": [cm("x")]},
    )
    report = run(tmp_path, files)
    assert severities(report, "undefined-variable") == {("undefined-variable", "apps", Severity.ERROR)}
    assert "write it as $${APP}" in messages(report, "undefined-variable")[0]



# --------------------------------------------------------------------------------------------
# render-failed

RENDER_CASES = [
    pytest.param(
        repo({"a": ks("a", "./a")}, {}, extra={"a/kustomization.yaml": kustomization("present.yaml", "absent.yaml"), "a/present.yaml": dump(cm("a"))}),
        {("render-failed", "a")}, "absent.yaml", id="missing-resource-file",
    ),
    pytest.param(repo({"a": ks("a", "./nowhere")}, {}), {("render-failed", "a")}, "nowhere", id="path-not-found"),
    pytest.param(
        repo({"a": ks("a", "./a")}, {}, extra={"a/kustomization.yaml": kustomization("bad.yaml"), "a/bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n"}),
        {("render-failed", "a")}, None, id="invalid-yaml",
    ),
    pytest.param(repo({"a": ks("a", "./a")}, {"a": [cm("a")]}), set(), None, id="neg-builds"),
]


@pytest.mark.parametrize("files, expected, needle", RENDER_CASES)
def test_render_failed(tmp_path, files, expected, needle):
    report = run(tmp_path, files)
    assert found(report, "render-failed") == expected
    got = messages(report, "render-failed")
    if needle:
        assert any(needle in m for m in got), got
    for message in got:
        assert "/tmp" not in message and str(tmp_path) not in message, message
        assert not re.search(r"(?<![\w.])/(?:home|root|var|usr|work|private)/", message), message



# One or two cases per check family, through real kustomize: its render, the cache's and the in-memory
# builder's (tests/engine/builders.py, which tests/engine/test_checks.py runs every case on) agree.
AGREEING = (
    "second-order/runtime-crd-cr-same-tier", "second-order/helmrelease-chart-same-tier", "crd-not-ordered/git-crd-non-dependency",
    "crd-not-ordered/neg-crd-in-entry", "not-waited/trigger-cr-wait-false", "unknown-kind/no-crd-anywhere",
    "datavolume-storageclass-and-profile", "neg-providers-from-ancestors", "own-and-flux-namespace", "chart-crd-upstream-wait",
    "edge", "nested-edge", "neg-declared-intended", "grouped", "neg-other-cluster-kubeconfig", "three-cycle", "neg-substituted",
    "source-in-git-lacks-it", "missing-tier",
)
CACHED_CASES = [
    pytest.param(case.values[0], id=case.id)
    for case in (*API_CASES, *PROVIDER_CASES, *SOUND_CASES, *DRIFT_CASES, *DUPLICATE_CASES, *CYCLE_CASES, *LITERAL_CASES, *UNDEFINED_CASES, *TIER_ORDER_CASES)
    if case.id in AGREEING
]
assert len(CACHED_CASES) == len(AGREEING)


def _judged(findings) -> list[tuple]:
    """What a check says, less the notes on charts no test can fetch (the builder renders no chart)."""
    return [(f.check, f.kustomization, f.severity, f.message, f.location, f.object) for f in findings if not _chart_note(f)]


@pytest.mark.parametrize("files", CACHED_CASES)
def test_cached_facts_give_the_same_findings(tmp_path, files):
    """A second check takes every tier's facts from the cache and loads none of its objects: same findings, same lines;
    and both are what the in-memory builder finds."""
    write_tree(tmp_path / "repo", files)
    options = CheckOptions(cache_dir=tmp_path / "cache")
    first = check_repository(tmp_path / "repo", "dev", options)
    assert _judged(first.findings) == _judged(builders.check(files).findings)
    assert _spoil_cached_objects(tmp_path / "cache")
    assert check_repository(tmp_path / "repo", "dev", options).findings == first.findings


def _spoil_cached_objects(cache: Path) -> int:
    """Make every cached finished tier's objects unreadable: a check that reads one fails."""
    stored = list(cache.rglob("finished-*-objects.pickle"))
    for path in stored:
        path.write_bytes(b"not a pickle")
    return len(stored)


def test_example_repo_from_cached_facts(tmp_path):
    options = CheckOptions(cache_dir=tmp_path / "cache")
    first = {cluster: check_repository(EXAMPLE, cluster, options) for cluster in ("dev", "prod")}
    assert _spoil_cached_objects(tmp_path / "cache")
    assert {cluster: check_repository(EXAMPLE, cluster, options) for cluster in ("dev", "prod")} == first


@pytest.mark.parametrize("cluster", ["dev", "prod"])
def test_example_repo_only_stale_tier_order(cluster):
    report = check_repository(EXAMPLE, cluster)
    # The CDI CR's readiness gap: platform-config's wait: true passes before StorageProfile's CRD exists.
    # (The example's charts come from public registries, out of a test's reach: notes, not findings.)
    assert [(f.check, f.kustomization.name if f.kustomization else None, f.severity) for f in report.findings if not _chart_note(f)] == [
        ("dependency-not-waited", "platform-config-cdi", Severity.WARNING),
        ("tier-order-stale", "platform-config-cdi", Severity.WARNING),
        ("bootstrap", None, Severity.INFO),  # standup.sh resumes the tiers in TIER_ORDER, each Ready before the next
    ], [f.message for f in report.findings]
    gap = report.findings[0].message
    assert "may fail once" in gap and "healthCheckExprs" in gap and "CDI" in gap
    assert cli_main(["check", "--repo", str(EXAMPLE), "--cluster", cluster, "--output", "/dev/null"]) == 0  # warnings only


# --------------------------------------------------------------------------------------------
# the seed incident: StorageProfiles applied next to the CDI CR


def _pre_fix(root: Path) -> None:
    """Undo the seed's fix: profiles back in platform-config, no platform-config-cdi tier."""
    shutil.move(root / "platform-config-cdi" / "cdi-storageprofiles.yaml", root / "platform-config" / "cdi-storageprofiles.yaml")
    shutil.rmtree(root / "platform-config-cdi")
    kfile = root / "platform-config" / "kustomization.yaml"
    doc = yaml.safe_load(kfile.read_text())
    doc["resources"].append("cdi-storageprofiles.yaml")
    kfile.write_text(yaml.safe_dump(doc))
    (root / "clusters" / "base" / "platform-config-cdi.yaml").unlink()
    base = root / "clusters" / "base" / "kustomization.yaml"
    doc = yaml.safe_load(base.read_text())
    doc["resources"].remove("platform-config-cdi.yaml")
    base.write_text(yaml.safe_dump(doc))
    vms = root / "clusters" / "base" / "apps-vms.yaml"
    doc = yaml.safe_load(vms.read_text())
    doc["spec"]["dependsOn"] = [d for d in doc["spec"]["dependsOn"] if d["name"] != "platform-config-cdi"]
    vms.write_text(yaml.safe_dump(doc))


def test_seed_incident_pre_fix_is_second_order_crd(tmp_path, capsys):
    root = tmp_path / "home-ops"
    shutil.copytree(EXAMPLE, root)
    _pre_fix(root)
    report = check_repository(root, "prod")
    seed = [f for f in report.findings if f.check == "second-order-crd"]
    assert {(str(f.kustomization), f.object.kind) for f in seed} == {("flux-system/platform-config", "StorageProfile")}
    assert seed[0].severity == Severity.ERROR
    assert "StorageProfile" in seed[0].message and "CDI cdi" in seed[0].message
    assert cli_main(["check", "--repo", str(root), "--cluster", "prod"]) == 1
    out = capsys.readouterr().out
    assert "second-order-crd" in out and "flux-system/platform-config" in out
