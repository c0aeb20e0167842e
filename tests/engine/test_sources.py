"""Where a cluster starts and what its tiers read: the cluster's own sync objects, ExternalArtifacts an
ArtifactGenerator assembles from this repository, kubeConfig tiers, and cluster entries found in real layouts.

Small repositories built here; kustomize runs for real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import pytest

from bot.service.cli import main
from bot.engine.render.config import RepoConfig, cluster_entry, known_clusters, load_repo_config
from bot.engine.reporting.diff import ChangeKind
from bot.engine.core.errors import ConfigError
from bot.adapters.kustomize import KustomizeBinary, locate_kustomize
from bot.engine.core.model import Finding, Severity, SourceLocation, TierId
from bot.engine.render.rendered import ClusterRender
from bot.pipeline.renderer import Renderer
from bot.pipeline.session import Session
from bot.pipeline.review import review_repository
from bot.adapters.workspace import Snapshot, build_snapshot
from tests.fluxrepo import dump, kustomization, ks, obj, write_tree
from tests.gitrepo import commit_all, init_repo

FLUX = "flux-system"
ENTRY = TierId(FLUX, FLUX)
SOPS_SECRET = obj(
    "v1", "Secret", "db", "apps",
    data={"password": "ENC[AES256_GCM,data:abc=,iv:def=,tag:ghi=,type:str]"},
    sops={"age": [{"recipient": "age1xyz", "enc": "-----BEGIN AGE ENCRYPTED FILE-----"}], "mac": "ENC[AES256_GCM,data:m=,iv:n=,tag:o=,type:str]", "version": "3.9.0"},
)
GIT_SOURCE = obj("source.toolkit.fluxcd.io/v1", "GitRepository", FLUX, FLUX, spec={"url": "https://example.invalid/repo.git", "ref": {"branch": "main"}})


@pytest.fixture(scope="module")
def binary() -> KustomizeBinary:
    return locate_kustomize()


def render(tmp_path: Path, files: Mapping[str, str], binary: KustomizeBinary, entry: str = "clusters/dev") -> tuple[Renderer, ClusterRender]:
    repo = write_tree(tmp_path / "repo", files)
    snap = build_snapshot(repo, tmp_path / "snap")
    renderer = Session(snap, load_repo_config(snap.read_text(".fluxwarden.yaml")), binary).renderer()
    return renderer, renderer.render_cluster("dev", entry)


def of(cr: ClusterRender, severity: Severity, check: str | None = None) -> list[Finding]:
    return [f for f in cr.findings if f.severity == severity and (check is None or f.check == check)]


def names(cr: ClusterRender, tier: TierId) -> set[str]:
    return {str(m.ref) for m in cr.tiers[tier].manifests}


def gotk_sync(**spec: Any) -> str:
    """`flux bootstrap`'s gotk-sync.yaml: the source and the Kustomization that applies the entry path."""
    return dump(GIT_SOURCE, ks(FLUX, "./clusters/dev", **spec))


def bootstrap_files(**spec: Any) -> dict[str, str]:
    return {
        "clusters/dev/flux-system/kustomization.yaml": kustomization("gotk-sync.yaml"),
        "clusters/dev/flux-system/gotk-sync.yaml": gotk_sync(**spec),
        "clusters/dev/secret.yaml": dump(obj("v1", "Namespace", "apps"), SOPS_SECRET),
    }


# -- the cluster's own sync Kustomization ---------------------------------------------------------


def test_gotk_sync_decryption_is_the_entry_tiers(tmp_path: Path, binary: KustomizeBinary) -> None:
    _, cr = render(tmp_path, bootstrap_files(decryption={"provider": "sops", "secretRef": {"name": "sops-age"}}), binary)
    assert of(cr, Severity.ERROR) == []
    entry = cr.tiers[ENTRY]
    assert entry.spec.decryption and not entry.failed
    assert entry.spec.origin == SourceLocation("clusters/dev/flux-system/gotk-sync.yaml", 11)
    assert "Secret/apps/db" in names(cr, ENTRY)
    assert list(cr.tiers) == [ENTRY]  # it applies itself: not a tier of its own


def test_without_decryption_the_sops_secret_still_fails(tmp_path: Path, binary: KustomizeBinary) -> None:
    _, cr = render(tmp_path, bootstrap_files(), binary)
    assert [f.check for f in of(cr, Severity.ERROR)] == ["render-failed"]
    assert "no spec.decryption" in of(cr, Severity.ERROR)[0].message


def test_gotk_sync_patched_by_its_kustomization(tmp_path: Path, binary: KustomizeBinary) -> None:
    """The documented way to customise a bootstrap: a patch in flux-system/kustomization.yaml."""
    patch = "- op: add\n  path: /spec/postBuild\n  value:\n    substitute:\n      CLUSTER: dev\n"
    files = bootstrap_files(decryption={"provider": "sops"}, wait=True, prune=False)
    files["clusters/dev/flux-system/kustomization.yaml"] = (
        kustomization("gotk-sync.yaml") + "patches:\n- target:\n    kind: Kustomization\n    name: flux-system\n  patch: |\n"
        + "".join(f"    {line}\n" for line in patch.splitlines())
    )
    files["clusters/dev/config.yaml"] = dump(obj("v1", "ConfigMap", "cluster", "apps", data={"name": "${CLUSTER}"}))
    _, cr = render(tmp_path, files, binary)
    entry = cr.tiers[ENTRY]
    assert entry.spec.wait and not entry.spec.prune and entry.spec.substitute == {"CLUSTER": "dev"}
    config = next(m for m in entry.manifests if m.ref.name == "cluster")
    assert config.body["data"] == {"name": "dev"}
    assert of(cr, Severity.ERROR) == []


def test_flux_instance_patch_decrypts_the_sync(tmp_path: Path, binary: KustomizeBinary) -> None:
    """A FluxInstance patch that targets the Kustomization reaches the sync Kustomization; one that
    targets the controllers does not (flux-operator builds both in one kustomization)."""
    instance = obj(
        "fluxcd.controlplane.io/v1", "FluxInstance", "flux", FLUX,
        spec={
            "distribution": {"version": "2.x", "registry": "ghcr.io/fluxcd"},
            "sync": {"kind": "GitRepository", "url": "https://example.invalid/repo.git", "ref": "refs/heads/main", "path": "clusters/dev"},
            "kustomize": {"patches": [
                {"target": {"kind": "Deployment", "name": "kustomize-controller"}, "patch": "- op: add\n  path: /spec/wait\n  value: true\n"},
                {"target": {"kind": "Kustomization"}, "patch": "- op: add\n  path: /spec/decryption\n  value:\n    provider: sops\n"},
            ]},
        },
    )
    files = {
        "clusters/dev/kustomization.yaml": kustomization("flux.yaml", "secret.yaml"),
        "clusters/dev/flux.yaml": dump(ks("flux", "./flux")),
        "clusters/dev/secret.yaml": dump(obj("v1", "Namespace", "apps"), SOPS_SECRET),
        "flux/instance.yaml": dump(instance),
    }
    _, cr = render(tmp_path, files, binary)
    assert of(cr, Severity.ERROR) == []
    entry = cr.tiers[ENTRY].spec
    assert entry.decryption and entry.prune and not entry.wait
    assert entry.origin == SourceLocation("flux/instance.yaml", 1)


def test_flux_instance_chart_values_name_the_sync(tmp_path: Path, binary: KustomizeBinary) -> None:
    release = obj(
        "helm.toolkit.fluxcd.io/v2", "HelmRelease", "flux-instance", FLUX,
        spec={
            "chartRef": {"kind": "OCIRepository", "name": "flux-instance"},
            "values": {"instance": {"sync": {"kind": "GitRepository", "url": "https://example.invalid/r.git", "ref": "refs/heads/main", "path": "./clusters/dev", "name": "cluster"}}},
        },
    )
    files = {
        "clusters/dev/kustomization.yaml": kustomization("flux.yaml"),
        "clusters/dev/flux.yaml": dump(ks("flux", "./flux")),
        "flux/release.yaml": dump(release),
        ".fluxwarden.yaml": "sources: [{name: flux-system}, {name: cluster}]\n",
    }
    _, cr = render(tmp_path, files, binary)
    assert list(cr.tiers) == [TierId(FLUX, "cluster"), TierId(FLUX, "flux")]
    assert cr.tiers[TierId(FLUX, "flux")].spec.defined_in == TierId(FLUX, "cluster")
    assert of(cr, Severity.ERROR) == [] and of(cr, Severity.WARNING) == []


def test_review_compares_the_entry_tier(tmp_path: Path) -> None:
    """With gotk-sync's decryption the entry tier renders, so a change to it shows in the diff."""
    root = write_tree(tmp_path / "repo", {**bootstrap_files(decryption={"provider": "sops"}), "clusters/dev/cm.yaml": dump(obj("v1", "ConfigMap", "settings", "apps", data={"a": "1"}))})
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    (root / "clusters/dev/cm.yaml").write_text(dump(obj("v1", "ConfigMap", "settings", "apps", data={"a": "2"})))
    head = commit_all(repo, "change a setting")
    review = review_repository(root, "dev", base, head)
    assert review.diff.uncompared == ()
    [tier] = review.diff.tiers
    assert tier.tier == ENTRY and [(c.kind, c.ref.name) for c in tier.changes] == [(ChangeKind.CHANGED, "settings")]
    assert review.new_errors == 0 and not [r for r in review.findings if r.finding.check == "render-failed"]


def test_review_shows_the_fix_to_the_sync_kustomization(tmp_path: Path) -> None:
    """The PR that adds decryption to gotk-sync: the base's entry tier failed, yet the change is shown."""
    root = write_tree(tmp_path / "repo", bootstrap_files())
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    (root / "clusters/dev/flux-system/gotk-sync.yaml").write_text(gotk_sync(decryption={"provider": "sops"}))
    head = commit_all(repo, "decrypt")
    review = review_repository(root, "dev", base, head)
    assert review.diff.partial == (ENTRY,) and review.diff.uncompared == ()
    [tier] = review.diff.tiers
    [change] = tier.changes
    assert (change.kind, str(change.ref)) == (ChangeKind.CHANGED, "Kustomization/flux-system/flux-system")
    assert "+    provider: sops" in change.diff
    assert review.new_errors == 0
    assert [(r.finding.check, r.new) for r in review.findings if r.finding.severity == Severity.ERROR] == []


# -- ExternalArtifacts from an ArtifactGenerator ---------------------------------------------------


def generator(*artifacts: Mapping[str, Any], source: str = FLUX, **spec: Any) -> dict[str, Any]:
    return obj(
        "source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator", "split", FLUX,
        spec={"sources": [{"alias": "repo", "kind": "GitRepository", "name": source}], "artifacts": list(artifacts), **spec},
    )


def artifact(name: str, *copies: tuple[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "copy": [{"from": f, "to": t, **extra} for f, t in copies]}


def on_artifact(name: str, path: str, art: str, **spec: Any) -> dict[str, Any]:
    return ks(name, path, source=art, source_kind="ExternalArtifact", **spec)


APPS_TREE = {
    "apps/base/web/kustomization.yaml": kustomization("web.yaml"),
    "apps/base/web/web.yaml": dump(obj("v1", "ConfigMap", "web", "apps")),
    "apps/staging/kustomization.yaml": kustomization("../base/web", "extra.yaml"),
    "apps/staging/extra.yaml": dump(obj("v1", "ConfigMap", "staging-only", "apps")),
    "infrastructure/controllers/ctrl.yaml": dump(obj("v1", "Namespace", "ctrl")),
}


def artifact_repo(gen: Mapping[str, Any], *kustomizations: Mapping[str, Any], extra: Mapping[str, str] = {}) -> dict[str, str]:
    return {
        "clusters/dev/kustomization.yaml": kustomization("artifacts.yaml", "apps.yaml"),
        "clusters/dev/artifacts.yaml": dump(gen),
        "clusters/dev/apps.yaml": dump(*kustomizations),
        **APPS_TREE,
        **extra,
    }


def test_artifact_generator_paths_render_from_the_repo(tmp_path: Path, binary: KustomizeBinary) -> None:
    """flux2-kustomize-helm-example's layout: one artifact per part of the monorepo."""
    gen = generator(
        artifact("infrastructure", ("@repo/infrastructure/**", "@artifact/")),
        artifact("apps", ("@repo/apps/base/**", "@artifact/base/"), ("@repo/apps/staging/**", "@artifact/staging/")),
    )
    files = artifact_repo(gen, on_artifact("infra", "./controllers", "infrastructure"), on_artifact("apps", "./staging", "apps", depends_on=["infra"]))
    repo = write_tree(tmp_path / "repo", files)
    _, cr = render(tmp_path, files, binary)
    assert of(cr, Severity.ERROR) == [] and of(cr, Severity.INFO) == []
    apps, infra = cr.tiers[TierId(FLUX, "apps")], cr.tiers[TierId(FLUX, "infra")]
    assert (apps.spec.path, apps.spec.source_path) == ("apps/staging", "staging")
    assert (infra.spec.path, infra.spec.source_path) == ("infrastructure/controllers", "controllers")
    assert names(cr, apps.spec.id) == {"ConfigMap/apps/web", "ConfigMap/apps/staging-only"}
    assert names(cr, infra.spec.id) == {"Namespace/ctrl"}
    # the check lists where each tier reads, in text and JSON
    assert main(["check", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--format", "json", "--output", str(tmp_path / "r.json")]) == 0
    listed = {k["name"]: k for k in json.loads((tmp_path / "r.json").read_text())["kustomizations"]}
    assert listed["apps"]["path"] == "apps/staging"
    assert listed["apps"]["source"] == {"ref": "ExternalArtifact/flux-system/apps", "path": "staging"}
    assert "source" not in listed["flux-system"]
    main(["check", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--output", str(tmp_path / "r.txt")])
    assert "flux-system/apps  ./apps/staging (./staging of ExternalArtifact/flux-system/apps)  2 objects" in (tmp_path / "r.txt").read_text()


def test_artifact_build_reading_what_is_not_copied_fails(tmp_path: Path, binary: KustomizeBinary) -> None:
    """The artifact holds apps/staging only: its `../base/web` is not there, and Flux's build fails."""
    gen = generator(artifact("apps", ("@repo/apps/staging/**", "@artifact/staging/")))
    _, cr = render(tmp_path, artifact_repo(gen, on_artifact("apps", "./staging", "apps")), binary)
    [error] = of(cr, Severity.ERROR)
    assert error.check == "render-failed" and error.kustomization == TierId(FLUX, "apps")
    assert "apps/base/web" in error.message and "ArtifactGenerator/flux-system/split does not copy into ExternalArtifact/flux-system/apps" in error.message
    assert cr.tiers[TierId(FLUX, "apps")].failed


@pytest.mark.parametrize(
    ("art", "reason"),
    [
        (artifact("apps", ("@repo/apps/staging/*.yaml", "@artifact/staging/")), "copies the files matching @repo/apps/staging/*.yaml"),
        (artifact("apps", ("@repo/apps/**", "@artifact/"), exclude=["*.md"]), "with exclude patterns"),
        (artifact("apps", ("@repo/apps/**", "@artifact/"), strategy="Merge"), "with strategy Merge"),
        (artifact("apps", ("@repo/apps/staging/**", "@artifact/env/")), "puts apps/staging at ./env, elsewhere than in the repository"),
    ],
)
def test_unmappable_artifacts_are_named_not_rendered(tmp_path: Path, binary: KustomizeBinary, art: dict, reason: str) -> None:
    path = "./env" if "env/" in str(art) else "./staging"
    _, cr = render(tmp_path, artifact_repo(generator(art), on_artifact("apps", path, "apps")), binary)
    assert of(cr, Severity.ERROR) == []
    [info] = of(cr, Severity.INFO, "not-rendered")
    assert info.kustomization == TierId(FLUX, "apps") and reason in info.message
    assert not cr.tiers[TierId(FLUX, "apps")].rendered


def test_artifact_assembled_from_elsewhere_is_not_rendered(tmp_path: Path, binary: KustomizeBinary) -> None:
    """A copy that lands where the build reads, from another place than the repo's: not Flux's content."""
    gen = generator(artifact("apps", ("@repo/apps/staging/**", "@artifact/staging/"), ("@repo/infrastructure/**", "@artifact/base/")))
    _, cr = render(tmp_path, artifact_repo(gen, on_artifact("apps", "./staging", "apps")), binary)
    assert of(cr, Severity.ERROR) == []
    [info] = of(cr, Severity.INFO, "not-rendered")
    assert "apps/base/web is not at its place in the repository" in info.message


def test_artifact_of_another_source_or_unknown(tmp_path: Path, binary: KustomizeBinary) -> None:
    gen = generator(artifact("apps", ("@repo/apps/**", "@artifact/")), source="other-repo")
    _, cr = render(tmp_path, artifact_repo(gen, on_artifact("apps", "./staging", "apps"), on_artifact("ghost", "./", "nowhere")), binary)
    assert of(cr, Severity.ERROR) == []
    messages = {f.kustomization.name: f.message for f in of(cr, Severity.INFO, "not-rendered")}  # type: ignore[union-attr]
    assert "copies @repo/apps/** from a source that is not this repository" in messages["apps"]
    assert "ExternalArtifact/flux-system/nowhere, which no ArtifactGenerator in git produces" in messages["ghost"]


def test_generator_in_a_later_tier(tmp_path: Path, binary: KustomizeBinary) -> None:
    """A Kustomization on an artifact waits for the tier that applies its generator."""
    gen = generator(artifact("apps", ("@repo/apps/**", "@artifact/")))
    files = {
        "clusters/dev/kustomization.yaml": kustomization("apps.yaml", "sources.yaml"),
        "clusters/dev/apps.yaml": dump(on_artifact("apps", "./staging", "apps")),
        "clusters/dev/sources.yaml": dump(ks("sources", "./sources")),
        "sources/gen.yaml": dump(gen),
        **APPS_TREE,
    }
    _, cr = render(tmp_path, files, binary)
    assert of(cr, Severity.ERROR) == [] and of(cr, Severity.INFO) == []
    assert names(cr, TierId(FLUX, "apps")) == {"ConfigMap/apps/web", "ConfigMap/apps/staging-only"}


# -- kubeConfig: tiers of another cluster ----------------------------------------------------------


def hub_files() -> dict[str, str]:
    remote = ks("tenants", "./clusters/spoke/tenants", namespace="spoke", kubeConfig={"secretRef": {"name": "cluster-kubeconfig"}})
    remote["spec"]["sourceRef"]["namespace"] = FLUX
    return {
        "hub/kustomization.yaml": kustomization("flux-system", "spoke.yaml"),
        "hub/flux-system/kustomization.yaml": kustomization("gotk-components.yaml"),
        "hub/flux-system/gotk-components.yaml": "# generated by flux bootstrap\n",
        "hub/flux-system/gotk-sync.yaml": "# generated by flux bootstrap\n",
        "hub/spoke.yaml": dump(obj("v1", "Namespace", "spoke"), remote),
        "clusters/spoke/tenants/kustomization.yaml": kustomization("ns.yaml", "own.yaml"),
        "clusters/spoke/tenants/ns.yaml": dump(obj("v1", "Namespace", "team")),
        "clusters/spoke/tenants/own.yaml": dump(ks("spoke-local", "./elsewhere")),
    }


def test_kubeconfig_tiers_render_in_the_hub_tagged(tmp_path: Path, binary: KustomizeBinary) -> None:
    _, cr = render(tmp_path, hub_files(), binary, entry="hub")
    remote = cr.tiers[TierId("spoke", "tenants")]
    assert remote.rendered and remote.spec.kube_config == "Secret/spoke/cluster-kubeconfig"
    assert names(cr, remote.spec.id) == {"Namespace/team", "Kustomization/flux-system/spoke-local"}
    # A Kustomization it applies lives on the spoke: the spoke's Flux reconciles it, with its own sources.
    local = cr.tiers[TierId(FLUX, "spoke-local")]
    assert not local.rendered and local.spec.kube_config == "Secret/spoke/cluster-kubeconfig"
    [info] = of(cr, Severity.INFO, "not-rendered")
    assert "applied by spoke/tenants to the cluster of Secret/spoke/cluster-kubeconfig" in info.message
    assert of(cr, Severity.ERROR) == []


def test_kubeconfig_shown_in_reports(tmp_path: Path) -> None:
    repo = write_tree(tmp_path / "repo", hub_files())
    assert main(["check", "--repo", str(repo), "--cluster", "default", "--no-cache", "--format", "json", "--output", str(tmp_path / "r.json")]) == 0
    listed = {k["name"]: k for k in json.loads((tmp_path / "r.json").read_text())["kustomizations"]}
    assert listed["tenants"]["kubeConfig"] == "Secret/spoke/cluster-kubeconfig"
    assert "kubeConfig" not in listed["flux-system"]
    main(["check", "--repo", str(repo), "--cluster", "default", "--no-cache", "--output", str(tmp_path / "r.txt")])
    assert "spoke/tenants  ./clusters/spoke/tenants → cluster of Secret/spoke/cluster-kubeconfig  2 objects" in (tmp_path / "r.txt").read_text()


# -- cluster entries found in real layouts ---------------------------------------------------------


def clusters_of(tmp_path: Path, files: Mapping[str, str], config: RepoConfig = RepoConfig()) -> tuple[dict[str, str], Snapshot]:
    snapshot = Snapshot(write_tree(tmp_path, files), ())
    return known_clusters(config, snapshot), snapshot


def test_a_spoke_folder_is_not_a_cluster(tmp_path: Path) -> None:
    found, snapshot = clusters_of(tmp_path, hub_files())
    assert found == {"default": "hub"}
    assert cluster_entry(RepoConfig(), "default", snapshot) == "hub"
    with pytest.raises(ConfigError, match=r"clusters/spoke is not a cluster entry: Kustomization spoke/tenants in hub/spoke.yaml applies clusters/spoke/tenants to the cluster of Secret/spoke/cluster-kubeconfig"):
        cluster_entry(RepoConfig(), "spoke", snapshot)


def flux_instance_release(path: str, namespace: str = FLUX) -> str:
    return dump(obj(
        "helm.toolkit.fluxcd.io/v2", "HelmRelease", "flux-instance", namespace,
        spec={"values": {"instance": {"sync": {"kind": "GitRepository", "url": "https://example.invalid/r.git", "ref": "refs/heads/main", "path": path}}}},
    ))


def test_flux_instance_sync_path_is_the_entry(tmp_path: Path) -> None:
    """The home-ops layout: the FluxInstance's HelmRelease names kubernetes/flux/cluster."""
    found, snapshot = clusters_of(tmp_path, {
        "kubernetes/flux/cluster/ks.yaml": dump(ks("cluster-apps", "./kubernetes/apps")),
        "kubernetes/apps/flux-system/flux-instance/app/helmrelease.yaml": flux_instance_release("kubernetes/flux/cluster"),
        "kubernetes/apps/flux-system/flux-instance/ks.yaml": dump(ks("flux-instance", "./kubernetes/apps/flux-system/flux-instance/app")),
        # an app that lists its own ks.yaml applies itself, but the cluster applies its directory: not an entry
        "kubernetes/apps/media/kustomization.yaml": kustomization("ks.yaml", "app.yaml"),
        "kubernetes/apps/media/ks.yaml": dump(ks("media", "./kubernetes/apps/media")),
        "kubernetes/apps/media/app.yaml": dump(obj("v1", "ConfigMap", "media")),
    })
    assert found == {"default": "kubernetes/flux/cluster"}
    assert cluster_entry(RepoConfig(), "default", snapshot) == "kubernetes/flux/cluster"


def test_flux_instance_values_file_and_several_entries(tmp_path: Path) -> None:
    """The chart's values file (read by a helmfile) counts too; several entries are named by what differs."""
    values = "instance:\n  sync:\n    kind: GitRepository\n    url: https://example.invalid/r.git\n    ref: refs/heads/main\n    path: kubernetes/main/flux/cluster\n"
    found, _ = clusters_of(tmp_path, {
        "kubernetes/main/flux/cluster/ks.yaml": dump(ks("apps", "./kubernetes/main/apps")),
        "kubernetes/main/bootstrap/values.yaml": values,
        "kubernetes/staging/flux/cluster/ks.yaml": dump(ks("apps", "./kubernetes/staging/apps")),
        "kubernetes/staging/apps/flux-instance.yaml": flux_instance_release("kubernetes/staging/flux/cluster"),
    })
    assert found == {"main": "kubernetes/main/flux/cluster", "staging": "kubernetes/staging/flux/cluster"}


def test_gotk_sync_and_clusters_dirs(tmp_path: Path) -> None:
    """A Kustomization that applies the directory it is written in is a cluster's root; clusters/<x> keeps its name."""
    found, _ = clusters_of(tmp_path, {
        "fleet/prod/flux-system/kustomization.yaml": kustomization("sync.yaml"),
        "fleet/prod/flux-system/sync.yaml": dump(ks(FLUX, "./fleet/prod")),
        "fleet/prod/kustomization.yaml": kustomization("flux-system"),
        "clusters/dev/apps.yaml": dump(ks("apps", "./apps")),
        "clusters/base/kustomization.yaml": kustomization(),
    })
    assert found == {"base": "clusters/base", "dev": "clusters/dev", "fleet-prod": "fleet/prod"}


def test_configured_clusters_win(tmp_path: Path) -> None:
    config = load_repo_config("clusters: {main: {path: kubernetes/flux/cluster}}\n")
    found, _ = clusters_of(tmp_path, {"kubernetes/apps/fi.yaml": flux_instance_release("kubernetes/other")}, config)
    assert found == {"main": "kubernetes/flux/cluster"}


def test_malformed_sources_are_findings_not_tracebacks(tmp_path: Path, binary: KustomizeBinary) -> None:
    bad_generator = obj("source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator", "bad", FLUX, spec={"sources": 5, "artifacts": "x"})
    half_generator = generator({"name": "apps", "copy": "everything"}, artifact("other", ("no-alias", "@artifact/")))
    bad_instance = obj("fluxcd.controlplane.io/v1", "FluxInstance", "flux", FLUX, spec={"sync": {"path": "clusters/dev", "kind": "GitRepository"}, "kustomize": {"patches": 3}})
    bad_release = obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", "fi", FLUX, spec={"values": {"instance": {"sync": ["path"]}}})
    broken = ks("broken", "./apps", dependsOn=5)
    files = {
        "clusters/dev/kustomization.yaml": kustomization("all.yaml"),
        "clusters/dev/all.yaml": dump(bad_generator, half_generator, bad_instance, bad_release, broken, on_artifact("apps", "./", "apps"), on_artifact("other", "./", "other")),
    }
    _, cr = render(tmp_path, files, binary)
    [error] = of(cr, Severity.ERROR)
    assert error.check == "render-failed" and "flux-system/broken: spec has a field of the wrong type" in error.message
    messages = {f.kustomization.name: f.message for f in of(cr, Severity.INFO, "not-rendered")}  # type: ignore[union-attr]
    assert "ArtifactGenerator/flux-system/split copies nothing" in messages["apps"]
    assert "has a copy operation no-alias → @artifact/ that source-watcher rejects" in messages["other"]
    assert known_clusters(RepoConfig(), Snapshot(tmp_path / "repo", ())) == {"dev": "clusters/dev"}
