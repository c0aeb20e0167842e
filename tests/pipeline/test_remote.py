"""Remote resources through the whole check, with real kustomize: left out of the build (never fetched), one info
per tier, an error under `--no-remote-bases`, and a well-known CRD bundle still providing its kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.adapters.kustomize import locate_kustomize
from bot.adapters.workspace import build_snapshot
from bot.engine.render.config import load_repo_config
from bot.engine.render.discovery import RenderLimits
from bot.engine.core.model import Finding, Severity, TierId
from bot.engine.render.rendered import ClusterRender
from bot.pipeline.check import check_repository
from bot.pipeline.session import Session
from tests.fluxrepo import crd, dump, flux_repo, kustomization, ks, obj, write_tree

CERT_MANAGER_CRDS = "https://github.com/cert-manager/cert-manager/releases/download/v1.8.2/cert-manager.crds.yaml"
SNAPSHOT_BASE = "github.com/kubernetes-csi/external-snapshotter//client/config/crd?ref=v6.0.1"
UNKNOWN_CRD = "https://raw.githubusercontent.com/movetokube/postgres-operator/1.1.1/deploy/crds/db.movetokube.com_postgres_crd.yaml"
CRDS = TierId("flux-system", "crds")
CORE = TierId("flux-system", "core")


def toboshii_shaped(crds_resources: list[str], core_objects: list[dict], extra: dict[str, str] | None = None) -> dict[str, str]:
    """A `crds` tier of per-project directories (remote bundles and local CRD files), and `core` depending on it."""
    return flux_repo(
        {"crds": ks("crds", "./cluster/crds", prune=False), "core": ks("core", "./cluster/core", depends_on=["crds"])},
        {
            "cluster/crds/kustomization.yaml": kustomization("cert-manager", "external-snapshotter", "local"),
            "cluster/crds/cert-manager/kustomization.yaml": kustomization(*crds_resources),
            "cluster/crds/external-snapshotter/kustomization.yaml": kustomization(SNAPSHOT_BASE),
            "cluster/crds/local/kustomization.yaml": kustomization("crds.yaml"),
            "cluster/crds/local/crds.yaml": dump(crd("postgresql.cnpg.io", "Cluster", "clusters")),
            "cluster/core/kustomization.yaml": kustomization("objects.yaml"),
            "cluster/core/objects.yaml": dump(*core_objects),
            **(extra or {}),
        },
    )


ISSUER = obj("cert-manager.io/v1", "ClusterIssuer", "letsencrypt-production", spec={"selfSigned": {}})
SNAPSHOT_CLASS = obj("snapshot.storage.k8s.io/v1", "VolumeSnapshotClass", "csi", driver="x", deletionPolicy="Delete")
DB = obj("postgresql.cnpg.io/v1", "Cluster", "postgres", "default", spec={"instances": 1})
POSTGRES = obj("db.movetokube.com/v1alpha1", "Postgres", "app-db", "default", spec={"database": "app"})


def _render(tmp_path: Path, files: dict[str, str]) -> ClusterRender:
    """The render of cluster `dev` (what the report's tiers came from)."""
    snap = build_snapshot(tmp_path / "repo", tmp_path / "snap")
    session = Session(snap, load_repo_config(snap.read_text(".fluxwarden.yaml")), locate_kustomize())
    return session.renderer(RenderLimits()).render_cluster("dev", "clusters/dev")


def _of(report_findings: tuple[Finding, ...] | list[Finding], check: str) -> list[Finding]:
    return [f for f in report_findings if f.check == check]


def test_remote_bundles_are_left_out_and_still_provide_their_kinds(tmp_path: Path) -> None:
    files = toboshii_shaped([CERT_MANAGER_CRDS], [ISSUER, SNAPSHOT_CLASS, DB])
    report = check_repository(write_tree(tmp_path / "repo", files), "dev")
    assert [f for f in report.findings if f.severity is not Severity.INFO] == []
    [remote] = _of(report.findings, "remote-resource-not-fetched")
    assert (remote.severity, remote.kustomization) == (Severity.INFO, CRDS)
    assert CERT_MANAGER_CRDS in remote.message and SNAPSHOT_BASE in remote.message and "not checked" in remote.message
    assert _of(report.findings, "unsafe-path") == [] and _of(report.findings, "unknown-kind") == []
    # the local file's objects are still rendered (and provide Cluster.postgresql.cnpg.io to core)
    render = _render(tmp_path, files)
    assert [m.ref.name for m in render.tiers[CRDS].manifests] == ["clusters.postgresql.cnpg.io"]
    assert render.tiers[CRDS].remote == (CERT_MANAGER_CRDS, SNAPSHOT_BASE)
    assert report.cold_start is not None and report.cold_start.converges and not report.cold_start.unjudged


def test_a_dependent_tier_without_dependsOn_on_the_bundle_is_not_ordered(tmp_path: Path) -> None:
    """The credited bundle is a provider like a CRD in git: a consumer that does not depend on its tier is judged."""
    files = toboshii_shaped([CERT_MANAGER_CRDS], [ISSUER])
    files["clusters/dev/core.yaml"] = dump(ks("core", "./cluster/core"))
    report = check_repository(write_tree(tmp_path / "repo", files), "dev")
    [finding] = _of(report.findings, "crd-not-ordered")
    assert finding.kustomization == CORE and "ClusterIssuer.cert-manager.io" in finding.message and "flux-system/crds" in finding.message


def test_a_remote_url_not_known_leaves_its_kinds_unknown(tmp_path: Path) -> None:
    files = toboshii_shaped([CERT_MANAGER_CRDS, UNKNOWN_CRD], [ISSUER, POSTGRES])
    report = check_repository(write_tree(tmp_path / "repo", files), "dev")
    [remote] = _of(report.findings, "remote-resource-not-fetched")
    assert UNKNOWN_CRD in remote.message
    [unknown] = _of(report.findings, "unknown-kind")
    assert "Postgres.db.movetokube.com" in unknown.message and unknown.severity is Severity.WARNING
    assert _of(report.findings, "unsafe-path") == []


@pytest.mark.parametrize(
    "flux_file,text",
    [
        pytest.param(
            "clusters/dev/flux-system/kustomization.yaml",
            "resources: [gotk-components.yaml]\npatches:\n  - patch: |\n      - op: add\n        path: /spec/template/spec/containers/0/args/-\n"
            "        value: --no-remote-bases=true\n    target: {kind: Deployment, name: kustomize-controller}\n",
            id="controller-patch",
        ),
        pytest.param(
            "clusters/dev/flux-system/instance.yaml",
            dump(obj("fluxcd.controlplane.io/v1", "FluxInstance", "flux", "flux-system", spec={"distribution": {"version": "2.x"}, "cluster": {"multitenant": True}})),
            id="multitenant-instance",
        ),
    ],
)
def test_no_remote_bases_makes_a_remote_base_an_error(tmp_path: Path, flux_file: str, text: str) -> None:
    files = toboshii_shaped([CERT_MANAGER_CRDS], [ISSUER], {flux_file: text, "clusters/dev/flux-system/gotk-components.yaml": ""})
    report = check_repository(write_tree(tmp_path / "repo", files), "dev")
    [remote] = _of(report.findings, "remote-resource-not-fetched")
    assert remote.severity is Severity.ERROR and remote.kustomization == CRDS
    assert SNAPSHOT_BASE in remote.message and CERT_MANAGER_CRDS not in remote.message  # a single file is still fetched
    assert "--no-remote-bases" in remote.message and flux_file in remote.message
    assert _render(tmp_path, files).tiers[CRDS].failed


def test_a_remote_file_alone_stays_info_under_no_remote_bases(tmp_path: Path) -> None:
    """`--no-remote-bases` refuses git bases, "not remote targets pointing to a single file" (Flux FAQ)."""
    files = toboshii_shaped([CERT_MANAGER_CRDS], [ISSUER])
    files["cluster/crds/kustomization.yaml"] = kustomization("cert-manager", "local")
    files["clusters/dev/flux-system/kustomization.yaml"] = "resources: []\npatches:\n  - patch: '[{\"op\": \"add\", \"path\": \"/x\", \"value\": \"--no-remote-bases\"}]'\n"
    report = check_repository(write_tree(tmp_path / "repo", files), "dev")
    [remote] = _of(report.findings, "remote-resource-not-fetched")
    assert remote.severity is Severity.INFO
    assert [f for f in report.findings if f.severity is not Severity.INFO] == []


def test_generator_files_by_url_keep_the_generated_object(tmp_path: Path) -> None:
    """A configMapGenerator file by URL: the ConfigMap is generated without that key, the local key kept."""
    files = flux_repo(
        {"app": ks("app", "./app")},
        {
            "app/kustomization.yaml": "configMapGenerator:\n  - name: dash\n    files:\n      - local.json\n"
            "      - remote.json=https://raw.githubusercontent.com/org/repo/main/d.json\n"
            "generatorOptions: {disableNameSuffixHash: true}\n",
            "app/local.json": "{}",
        },
    )
    report = check_repository(write_tree(tmp_path / "repo", files), "dev")
    [configmap] = _render(tmp_path, files).tiers[TierId("flux-system", "app")].manifests
    assert configmap.ref.name == "dash" and set(configmap.body["data"]) == {"local.json"}
    [remote] = _of(report.findings, "remote-resource-not-fetched")
    assert "https://raw.githubusercontent.com/org/repo/main/d.json" in remote.message


def test_remote_content_a_change_adds_is_a_new_warning(tmp_path: Path) -> None:
    """A PR that adds `github.com/evil/repo//base` gets a new warning naming it (Flux would apply what we never
    see); the remote bundle the base already had stays an old info line, and a second run adds nothing."""
    from bot.pipeline.review import review_repository
    from tests.gitrepo import commit_all, init_repo

    root = write_tree(tmp_path / "repo", toboshii_shaped([CERT_MANAGER_CRDS], [ISSUER, DB]))
    git_repo = init_repo(root)
    base = git_repo.head.commit.hexsha
    write_tree(root, {"cluster/crds/cert-manager/kustomization.yaml": kustomization(CERT_MANAGER_CRDS, "github.com/evil/repo//base?ref=v1")})
    head = commit_all(git_repo, "add a remote base")
    review = review_repository(root, "dev", base, head, cache_dir=tmp_path / "cache")
    added = [r for r in review.findings if r.finding.check == "remote-resource-not-fetched" and r.finding.severity is Severity.WARNING]
    assert [r.new for r in added] == [True]
    assert "github.com/evil/repo//base?ref=v1" in added[0].finding.message and CERT_MANAGER_CRDS not in added[0].finding.message
    unchanged = review_repository(root, "dev", head, head, cache_dir=tmp_path / "cache")
    assert not [r for r in unchanged.findings if r.finding.check == "remote-resource-not-fetched" and r.finding.severity is not Severity.INFO]
