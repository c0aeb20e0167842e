"""`.fluxwarden.yaml`: parsing, defaults, errors, cluster discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine.render.config import RepoConfig, cluster_entry, known_clusters, load_repo_config
from bot.engine.core.errors import ConfigError
from bot.engine.render.knowledge import default_knowledge
from bot.engine.core.model import GroupKind, SourceRef, TierId
from bot.adapters.workspace import Snapshot
from tests.fluxrepo import kustomization, write_tree

ROOT = Path(__file__).resolve().parents[2]


def test_example_config_is_valid() -> None:
    config = load_repo_config((ROOT / "config/repo.example.fluxwarden.yaml").read_text())
    assert config.clusters == {"dev": "clusters/dev", "prod": "clusters/prod"}
    knowledge = default_knowledge().with_user_rules(list(config.runtime_crds))
    assert [r.operator for r in knowledge.runtime_rules(GroupKind("example.com", "Widget"))] == ["example-operator"]


def test_defaults() -> None:
    assert load_repo_config(None) == RepoConfig()
    assert RepoConfig().is_this_repo(SourceRef("GitRepository", "flux-system", "flux-system"))
    assert not RepoConfig().is_this_repo(SourceRef("OCIRepository", "flux-system", "flux-system"))


@pytest.mark.parametrize(
    "text,message",
    [
        ("clusters: [dev]\n", "`clusters` must map"),
        ("clusters: {dev: {}}\n", "cluster 'dev' needs `path: DIR`"),
        ("clusters: {dev: {path: ../../etc}}\n", "climbs out of the repository"),
        ("tier_order: {file: x.sh}\n", "`tier_order` needs `file` and `variable`"),
        ("tier_order: {file: ../x.sh, variable: X}\n", "climbs out of the repository"),
        ("source: {kind: GitRepository}\n", "each source needs `name`"),
        ("runtime_crds: {a: b}\n", "`runtime_crds` must be a list"),
        ("- a\n- b\n", "must be a mapping"),
        ("a: [\n", "not valid YAML"),
        ("graph_drift: [a]\n", "`graph_drift` must be a mapping"),
        ("graph_drift: {ignore: {tier: a}}\n", "`graph_drift`.ignore must be a list"),
        ("graph_drift: {ignore: [{field: wait}]}\n", "each entry needs `tier`"),
        ("graph_drift: {ignore: [{tier: a, field: path}]}\n", "`field` is one of dependsOn, wait, prune"),
        ("graph_drift: {ignore: [{tier: a, field: wait, dependsOn: b}]}\n", "`dependsOn` names one tier"),
        ("graph_drift: {ignore: [{tier: a, cluster: prod}]}\n", "each entry is a mapping of `tier`"),
        ("graph_drift: {ignore: [{tier: a, clusters: prod}]}\n", "`clusters` must be a list"),
    ],
    ids=[
        "clusters-list", "no-path", "path-escapes", "tier-order", "tier-order-escapes", "source", "runtime-crds", "not-mapping", "bad-yaml",
        "drift-not-mapping", "drift-ignore-not-list", "drift-no-tier", "drift-bad-field", "drift-depends-on-with-other-field",
        "drift-unknown-key", "drift-clusters-not-list",
    ],
)
def test_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        load_repo_config(text)
    assert message in str(err.value)


def test_graph_drift_ignore() -> None:
    config = load_repo_config(
        "graph_drift:\n  ignore:\n    - {tier: apps, field: prune}\n    - {tier: 'flux-system/infra-*', dependsOn: storage, clusters: [staging]}\n"
    )
    prune, edge = config.graph_drift_ignore
    apps, infra, storage = TierId("flux-system", "apps"), TierId("flux-system", "infra-net"), TierId("flux-system", "storage")
    assert prune.covers(apps, "prune", ("dev", "prod")) and not prune.covers(apps, "wait", ("dev", "prod"))
    assert prune.covers(TierId("team", "apps"), "prune", ("dev", "prod"))  # a bare name matches in any namespace
    assert edge.field == "dependsOn"
    assert edge.covers(infra, "dependsOn", ("staging", "prod"), storage)
    assert not edge.covers(infra, "dependsOn", ("dev", "prod"), storage)  # neither compared cluster listed
    assert not edge.covers(infra, "dependsOn", ("staging", "prod"), apps)  # another edge
    assert not edge.covers(TierId("apps", "infra-net"), "dependsOn", ("staging", "prod"), storage)  # namespace in the pattern


def test_sources_override() -> None:
    config = load_repo_config("sources:\n  - {name: home-ops}\n  - {kind: OCIRepository, name: apps, namespace: apps}\n")
    assert config.sources == (SourceRef("GitRepository", "home-ops", "flux-system"), SourceRef("OCIRepository", "apps", "apps"))


def test_discovery_skips_included_dirs(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "clusters/base/kustomization.yaml": kustomization(),
        "clusters/dev/kustomization.yaml": kustomization("../base"),
        "clusters/prod/kustomization.yaml": kustomization("../base"),
    })
    snapshot = Snapshot(tmp_path, ())
    assert known_clusters(RepoConfig(), snapshot) == {"dev": "clusters/dev", "prod": "clusters/prod"}
    assert cluster_entry(RepoConfig(), "dev", snapshot) == "clusters/dev"
    with pytest.raises(ConfigError, match=r"unknown cluster 'qa' \(known: dev, prod\)"):
        cluster_entry(RepoConfig(), "qa", snapshot)
    with pytest.raises(ConfigError, match=r"unknown cluster '\.\./clusters/dev'"):
        cluster_entry(RepoConfig(), "../clusters/dev", snapshot)


def test_configured_entry_paths(tmp_path: Path) -> None:
    config = load_repo_config("clusters: {main: {path: ./kubernetes/flux/cluster}}\n")
    assert cluster_entry(config, "main", Snapshot(tmp_path, ())) == "kubernetes/flux/cluster"
    assert known_clusters(config, Snapshot(tmp_path, ())) == {"main": "kubernetes/flux/cluster"}


def test_example_config_declares_a_bootstrap() -> None:
    config = load_repo_config((ROOT / "config/repo.example.fluxwarden.yaml").read_text())
    assert config.bootstrap.helmreleases == ("kube-system/cilium",)
    assert config.bootstrap.crds == ("cert-manager.io/ClusterIssuer",)


def test_a_configured_repo_has_no_guessed_clusters(tmp_path: Path) -> None:
    """A hub (`.fluxwarden.yaml` names `hub`) whose clusters/ folder also holds a spoke: `--cluster spoke` is an error."""
    write_tree(tmp_path, {
        "clusters/hub/kustomization.yaml": kustomization("../spoke"),
        "clusters/spoke/kustomization.yaml": kustomization(),
    })
    config = load_repo_config("clusters: {hub: {path: clusters/hub}, edge: {path: kubernetes/edge}}\n")
    snapshot = Snapshot(tmp_path, ())
    assert cluster_entry(config, "hub", snapshot) == "clusters/hub"
    with pytest.raises(ConfigError, match=r"unknown cluster .spoke. \(known: edge, hub\): the configuration names every cluster"):
        cluster_entry(config, "spoke", snapshot)


def test_a_scaffold_folder_of_placeholders_is_no_cluster(tmp_path: Path) -> None:
    """A template folder beside the real clusters (cluster-template-shaped): `${CLUSTER}`, `<cluster-name>`, `{{ .cluster }}`."""
    sync = lambda path: (  # noqa: E731
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: flux-system, namespace: flux-system}\n"
        f"spec: {{interval: 10m, path: '{path}', prune: true, sourceRef: {{kind: GitRepository, name: flux-system}}}}\n"
    )
    write_tree(tmp_path, {
        "clusters/prod/kustomization.yaml": kustomization("flux-system"),
        "clusters/prod/flux-system/kustomization.yaml": kustomization("gotk-sync.yaml"),
        "clusters/prod/flux-system/gotk-sync.yaml": sync("./clusters/prod"),
        "clusters/${CLUSTER}/kustomization.yaml": kustomization(),
        "clusters/template/kustomization.yaml": kustomization("flux-system"),
        "clusters/template/flux-system/kustomization.yaml": kustomization("gotk-sync.yaml"),
        "clusters/template/flux-system/gotk-sync.yaml": sync("./clusters/<cluster-name>"),
        "scaffold/{{ .cluster }}/flux-system/gotk-sync.yaml": sync("./scaffold/{{ .cluster }}"),
    })
    snapshot = Snapshot(tmp_path, ())
    assert known_clusters(RepoConfig(), snapshot) == {"prod": "clusters/prod"}


def test_a_self_syncing_gitrepository_of_another_name_is_this_repository(tmp_path: Path) -> None:
    """toboshii/home-ops: `kubectl apply -k cluster/flux/flux-system` writes GitRepository `flux-cluster` and a
    Kustomization on it applying ./cluster/flux, the directory that holds both; its tiers use that source."""
    from bot.engine.render.config import cluster_entries, with_artifact_sources
    from tests.engine.builders import check
    from tests.fluxrepo import dump, ks, obj

    git = obj("source.toolkit.fluxcd.io/v1", "GitRepository", "flux-cluster", "flux-system", spec={"interval": "10m", "url": "https://github.com/example/home-ops", "ref": {"branch": "main"}})
    flux = obj("source.toolkit.fluxcd.io/v1", "GitRepository", "flux-installation", "flux-system", spec={"interval": "10m", "url": "https://github.com/fluxcd/flux2", "ref": {"tag": "v2.3.0"}})
    files = {
        "cluster/flux/kustomization.yaml": kustomization("flux-system/flux-cluster.yaml", "flux-system/flux-installation.yaml", "apps.yaml"),
        "cluster/flux/flux-system/flux-cluster.yaml": dump(git, ks("flux-cluster", "./cluster/flux", source="flux-cluster")),
        "cluster/flux/flux-system/flux-installation.yaml": dump(flux, ks("flux-installation", "./manifests/install", source="flux-installation")),
        "cluster/flux/apps.yaml": dump(ks("apps", "./cluster/apps", source="flux-cluster")),
        "cluster/apps/kustomization.yaml": kustomization("cm.yaml"),
        "cluster/apps/cm.yaml": dump(obj("v1", "ConfigMap", "settings", "default", data={"k": "v"})),
    }
    write_tree(tmp_path, files)
    snapshot = Snapshot(tmp_path, ())
    [entry] = cluster_entries(RepoConfig(), snapshot)
    assert (entry.name, entry.path) == ("default", "cluster/flux")
    assert "Kustomization flux-system/flux-cluster in cluster/flux/flux-system/flux-cluster.yaml applies its own directory" in entry.how
    config = with_artifact_sources(RepoConfig(), snapshot)
    assert config.is_this_repo(SourceRef("GitRepository", "flux-cluster", "flux-system"))
    assert not config.is_this_repo(SourceRef("GitRepository", "flux-installation", "flux-system"))  # fluxcd/flux2's path is not here
    report = check(files, "default")
    not_rendered = {str(f.kustomization) for f in report.findings if f.check == "not-rendered"}
    assert not_rendered == {"flux-system/flux-installation"}, [f.message for f in report.findings]
    assert not [f for f in report.findings if f.severity.value in ("error", "warning")], [f.message for f in report.findings]
