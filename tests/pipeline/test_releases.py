"""HelmReleases rendered with Helm's own engine, in their tier: charts in git, objects, CRDs, deadlocks, reviews, build.

Real parts: real git repositories, real kustomize, real Helm (helm-python-sdk) in spawned workers.
Charts from HTTP repositories and OCI registries: tests/pipeline/test_release_sources.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


from bot.engine.core.model import Severity
from bot.engine.render.rendered import Outcome
from bot.engine.reporting.review_report import format_review_text, review_to_json
from bot.pipeline.check import CheckOptions, check_repository, render_repository
from bot.pipeline.export import format_build, select_tiers, selected_releases
from bot.pipeline.review import review_repository
from tests.fakes.charts import write_chart
from tests.fluxrepo import crd, dump, flux_repo, ks, kustomization, obj, write_tree
from tests.gitrepo import commit_all, init_repo

FLUX = "flux-system"
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
  labels:
    helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
    app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: "nginx:{{ .Values.tag }}"
          ports: [{containerPort: {{ .Values.port }}}]
"""
WIDGET_CRD = dump(crd("example.com", "Widget", "widgets"))


def helm_release(name: str, chart: str, *, namespace: str = "default", values: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A HelmRelease whose chart is a path of this repository (GitRepository flux-system)."""
    body: dict[str, Any] = {
        "interval": "10m",
        "chart": {"spec": {"chart": chart, "sourceRef": {"kind": "GitRepository", "name": FLUX, "namespace": FLUX}}},
    }
    if values is not None:
        body["values"] = values
    body.update(spec)
    return obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", name, namespace, spec=body)


def _repo(tmp_path: Path, apps: list[dict[str, Any]], *, version: str = "1.0.0", tag: str = "1.25", crds: bool = False, later: list[dict[str, Any]] | None = None) -> Path:
    tiers: dict[str, dict[str, Any]] = {"apps": ks("apps", "./apps", wait=True)}
    files = {"apps/kustomization.yaml": kustomization("release.yaml"), "apps/release.yaml": dump(*apps)}
    if later is not None:
        tiers["widgets"] = ks("widgets", "./widgets", depends_on=["apps"])
        files |= {"widgets/kustomization.yaml": kustomization("widgets.yaml"), "widgets/widgets.yaml": dump(*later)}
    repo = write_tree(tmp_path / "repo", flux_repo(tiers, files))
    write_chart(
        repo / "charts", "webapp", version, app_version=version,
        templates={"deployment.yaml": DEPLOYMENT}, values={"replicas": 1, "tag": tag, "port": 80},
        crds={"widgets.yaml": WIDGET_CRD} if crds else None,
    )
    return repo


def test_a_chart_in_git_renders_in_its_tier(tmp_path: Path) -> None:
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp", values={"replicas": 3})])
    with render_repository(repo, "dev", CheckOptions()) as built:
        [release] = built.render.releases.values()
        assert release.outcome is Outcome.RENDERED and (release.chart, release.version) == ("webapp", "1.0.0")
        [deployment] = release.manifests
        assert (str(deployment.ref), deployment.body["spec"]["replicas"]) == ("Deployment/default/web", 3)
        text = format_build(built, select_tiers(built, []))
    # `fluxwarden build`: the release's objects follow its Kustomization's own, under their heading.
    assert text.index("# Kustomization flux-system/apps") < text.index("# HelmRelease default/web (chart webapp 1.0.0)") < text.index("kind: Deployment")
    assert "replicas: 3" in text


def test_build_tier_takes_a_helmrelease(tmp_path: Path) -> None:
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp"), helm_release("other", "./charts/webapp")])
    with render_repository(repo, "dev", CheckOptions()) as built:
        wanted = ["HelmRelease/default/web"]
        text = format_build(built, select_tiers(built, wanted), releases=selected_releases(built, wanted))
    assert text.startswith("# HelmRelease default/web (chart webapp 1.0.0)\n") and "other" not in text


def test_a_cr_beside_the_helmrelease_that_installs_its_crd_is_a_deadlock(tmp_path: Path) -> None:
    # The cold-start deadlock of 2026: the Widget's dry-run fails, so nothing in `apps` is applied, the
    # HelmRelease is never created, its chart never installed, and the Widget CRD never appears.
    widget = obj("example.com/v1", "Widget", "w", "default")
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp"), widget], crds=True)
    report = check_repository(repo, "dev", CheckOptions())
    errors = [f for f in report.findings if f.severity is Severity.ERROR]
    assert [f.check for f in errors] == ["second-order-crd"], [f"{f.check}: {f.message}" for f in report.findings]
    assert "chart webapp of HelmRelease default/web" in errors[0].message and "Widget" in errors[0].message
    assert not [f for f in report.findings if f.check == "unknown-kind"]


def test_the_same_cr_in_a_later_waited_tier_is_fine(tmp_path: Path) -> None:
    widget = obj("example.com/v1", "Widget", "w", "default")
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")], crds=True, later=[widget])
    report = check_repository(repo, "dev", CheckOptions())
    assert not [f for f in report.findings if f.severity is not Severity.INFO], [f"{f.check}: {f.message}" for f in report.findings]


def test_a_kind_no_rendered_chart_provides_is_not_credited_to_it(tmp_path: Path) -> None:
    # The chart renders without CRDs: a Widget next to it is unknown, not "provided by the chart".
    widget = obj("example.com/v1", "Widget", "w", "default")
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")], later=[widget])
    report = check_repository(repo, "dev", CheckOptions())
    assert [f.check for f in report.findings if f.severity is not Severity.INFO] == ["unknown-kind"]


def test_a_template_that_fails_at_the_pr_values_is_an_error(tmp_path: Path) -> None:
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")])
    (repo / "charts/webapp/templates/required.yaml").write_text('{{ required "tag must be set" .Values.mustHave }}\n')
    report = check_repository(repo, "dev", CheckOptions())
    [failed] = [f for f in report.findings if f.check == "chart-render-failed"]
    assert failed.severity is Severity.ERROR and "tag must be set" in failed.message and "helm-controller would fail the install" in failed.message


def _commit(repo: Path) -> tuple[Any, str]:
    git = init_repo(repo)
    return git, git.head.commit.hexsha


def _chart_bump_review(tmp_path: Path) -> tuple[Any, str, str]:
    """The review of a PR bumping the webapp chart 1.0.0 → 1.1.0 (image tag and port), with its base and head SHAs."""
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")])
    git, base = _commit(repo)
    chart = repo / "charts/webapp"
    (chart / "Chart.yaml").write_text((chart / "Chart.yaml").read_text().replace("1.0.0", "1.1.0"))
    (chart / "values.yaml").write_text("replicas: 1\ntag: '1.27'\nport: 8080\n")
    head = commit_all(git, "bump webapp to 1.1.0")
    return review_repository(repo, "dev", base, head, CheckOptions()), base, head


def test_a_chart_bump_reviews_the_objects_it_changes(tmp_path: Path) -> None:
    review, base, head = _chart_bump_review(tmp_path)
    [release] = review.releases.releases
    assert release.summary() == "HelmRelease default/web · chart webapp 1.0.0 → 1.1.0: Deployment/default/web changed (image, containerPort)"
    [change] = release.changes
    # The chart's own version labels changed on every object too: folded, never shown as a change.
    assert "helm.sh/chart" not in change.diff and "app.kubernetes.io/version" not in change.diff
    removed = [line[1:].strip() for line in change.diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:].strip() for line in change.diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert "- image: nginx:1.25" in removed and "- image: nginx:1.27" in added
    text = format_review_text(review)
    assert "charts (each HelmRelease's rendered objects):" in text and "Chart webapp 1.0.0 → 1.1.0" in text.split("charts (")[0]  # named in what changed
    assert [c["helmRelease"] for c in review_to_json(review)["changes"]] == ["default/web"]


def test_a_review_of_an_unchanged_chart_shows_no_release_change(tmp_path: Path) -> None:
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")])
    git, base = _commit(repo)
    (repo / "README.md").write_text("docs\n")
    head = commit_all(git, "docs")
    review = review_repository(repo, "dev", base, head, CheckOptions())
    assert review.releases.empty


def test_random_functions_render_byte_identically(tmp_path: Path) -> None:
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")])
    (repo / "charts/webapp/templates/secret.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gen}\ndata:\n  token: {{ randAlphaNum 16 | quote }}\n  at: {{ now | quote }}\n"
    )
    texts = []
    for _ in range(2):
        with render_repository(repo, "dev", CheckOptions()) as built:
            texts.append(format_build(built, select_tiers(built, [])))
    assert texts[0] == texts[1] and "generated by the chart" in texts[0]


def test_a_source_outside_git_is_not_rendered_and_says_so(tmp_path: Path) -> None:
    # A HelmRepository at a host nobody allowed: never fetched; one grouped finding per source, no error.
    repository = obj("source.toolkit.fluxcd.io/v1", "HelmRepository", "bitnami", FLUX, spec={"url": "https://charts.example.invalid/bitnami", "interval": "1h"})
    releases = [
        obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", name, "default", spec={
            "interval": "10m", "chart": {"spec": {"chart": "redis", "version": "19.x", "sourceRef": {"kind": "HelmRepository", "name": "bitnami", "namespace": FLUX}}},
        })
        for name in ("cache", "queue")
    ]
    repo = _repo(tmp_path, [repository, *releases])
    report = check_repository(repo, "dev", CheckOptions())
    [finding] = [f for f in report.findings if f.check == "chart-not-rendered"]
    assert finding.severity is Severity.INFO and "2 HelmReleases" in finding.message and "HelmRepository flux-system/bitnami" in finding.message
    assert report.releases_not_rendered == 2 and not [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_chart_s_objects_are_checked_too(tmp_path: Path) -> None:
    # The chart renders a Gadget nobody serves, a ConfigMap the tier applies as well, and a bad name.
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp"), obj("v1", "ConfigMap", "shared", "default", data={"a": "1"})])
    templates = repo / "charts/webapp/templates"
    (templates / "gadget.yaml").write_text("apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n")
    (templates / "shared.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared}\ndata: {b: '2'}\n")
    (templates / "bad.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n")
    report = check_repository(repo, "dev", CheckOptions())
    found = {f.check: f for f in report.findings if f.check.startswith("chart-")}
    assert set(found) == {"chart-invalid-name", "chart-unknown-kind", "chart-duplicate-object"}, [f"{f.check}: {f.message}" for f in report.findings]
    assert "Gadget.example.com (g)" in found["chart-unknown-kind"].message
    assert "ConfigMap/default/shared (also Kustomization flux-system/apps)" in found["chart-duplicate-object"].message
    assert found["chart-invalid-name"].severity is Severity.ERROR and all(f.location and f.location.file == "apps/release.yaml" for f in found.values())


def test_post_renderers_patch_the_chart_s_objects(tmp_path: Path) -> None:
    patch = {"patch": "- op: replace\n  path: /spec/replicas\n  value: 5\n", "target": {"kind": "Deployment", "name": "web"}}
    post = [{"kustomize": {"patches": [patch], "images": [{"name": "nginx", "newTag": "1.29-alpine"}]}}]
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp", postRenderers=post)])
    with render_repository(repo, "dev", CheckOptions()) as built:
        [deployment] = built.render.releases[next(iter(built.render.releases))].manifests
    assert deployment.body["spec"]["replicas"] == 5
    assert deployment.body["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.29-alpine"


def test_a_changed_post_renderer_is_rendered_anew_from_a_warm_cache(tmp_path: Path) -> None:
    """The same chart and values under another postRenderer: the cached objects of the first never stand in."""
    def post(replicas: int) -> list[dict[str, Any]]:
        patch = {"patch": f"- op: replace\n  path: /spec/replicas\n  value: {replicas}\n", "target": {"kind": "Deployment", "name": "web"}}
        return [{"kustomize": {"patches": [patch]}}]

    options = CheckOptions(cache_dir=tmp_path / "cache")
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp", postRenderers=post(5))])
    seen = []
    for replicas in (5, 7, 5):
        (repo / "apps/release.yaml").write_text(dump(helm_release("web", "./charts/webapp", postRenderers=post(replicas))), encoding="utf-8")
        with render_repository(repo, "dev", options) as built:
            [release] = built.render.releases.values()
            seen.append(release.manifests[0].body["spec"]["replicas"])
    assert seen == [5, 7, 5]


def test_a_post_renderer_that_fails_is_an_error(tmp_path: Path) -> None:
    post = [{"kustomize": {"patches": [{"patch": "- op: replace\n  path: /spec/nothing/here\n  value: 1\n", "target": {"kind": "Deployment"}}]}}]
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp", postRenderers=post)])
    report = check_repository(repo, "dev", CheckOptions())
    [failed] = [f for f in report.findings if f.check == "chart-render-failed"]
    assert "postRenderers[0] fails" in failed.message and "/tmp" not in failed.message


def test_the_comment_of_a_chart_bump(tmp_path: Path) -> None:
    # The bot's comment on a chart bump: the first screen names the chart move and the object it changes, and
    # the HelmRelease's diff follows, folded under its own heading.
    from bot.engine.reporting.review_report import format_review_markdown
    from tests.golden import assert_golden

    review, base, head = _chart_bump_review(tmp_path)
    [comment] = format_review_markdown(review, marker="fluxwarden:precheck:dev")
    text = comment.replace(base[:12], "BASE").replace(head[:12], "HEAD")
    assert "HelmRelease default/web · chart webapp 1.0.0 → 1.1.0: Deployment/default/web changed (image, containerPort)" in text
    assert "<b>HelmRelease default/web</b> · chart webapp 1.0.0 → 1.1.0 · in flux-system/apps" in text
    assert_golden("review/chart-bump.md", text)


def test_a_git_chart_is_packed_once_per_content_and_a_cached_render_needs_no_worker(tmp_path: Path) -> None:
    from bot.adapters.workspace import build_snapshot
    from bot.engine.render.chartrender import ChartRenderRequest, ChartRenderResult
    from bot.engine.render.helmvalues import DEFAULT_KUBE_VERSION
    from bot.pipeline.releases import ChartOptions, ChartStage, _packed, _render_key, _rendered, pack_chart

    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")])
    stage = ChartStage(ChartOptions(), None, None)
    try:
        first = build_snapshot(repo, tmp_path / "first")
        packed = _packed(stage, first, "charts/webapp")
        assert packed == pack_chart(first, "charts/webapp")
        again = build_snapshot(repo, tmp_path / "again")  # another snapshot, the same files: the same archive, not packed again
        assert _packed(stage, again, "charts/webapp") is packed
        (repo / "charts" / "webapp" / "values.yaml").write_text("replicas: 2\ntag: '1.26'\nport: 80\n")
        changed = _packed(stage, build_snapshot(repo, tmp_path / "changed"), "charts/webapp")
        assert changed.digest != packed.digest

        request = ChartRenderRequest(
            archive=packed.archive, chart_dir=None, values_files=(), values={}, release_name="web", namespace="default",
            kube_version=DEFAULT_KUBE_VERSION, api_versions=(),
        )
        key = _render_key(request, packed.digest)
        assert _rendered(stage, request, key, cached_only=True) is None
        assert stage._pool is None  # asking the cache started no worker
        result = _rendered(stage, request, key)
        assert isinstance(result, ChartRenderResult) and result.chart_version == "1.0.0"
        assert _rendered(stage, request, key, cached_only=True) is result
    finally:
        stage.close()


def test_a_review_of_an_unchanged_chart_renders_each_release_once(tmp_path: Path) -> None:
    # Both sides of a review share the run's renders: the diff of an untouched release is empty, a bumped value shows.
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp"), helm_release("api", "./charts/webapp", values={"replicas": 2})])
    git, base = _commit(repo)
    (repo / "apps" / "release.yaml").write_text(
        dump(helm_release("web", "./charts/webapp"), helm_release("api", "./charts/webapp", values={"replicas": 4}))
    )
    head = commit_all(git, "api: 4 replicas")
    review = review_repository(repo, "dev", base, head, CheckOptions())
    changed = {str(r.ref): [str(c.ref) for c in r.changes] for r in review.releases.releases}
    assert changed == {"HelmRelease/default/api": ["Deployment/default/api"]}
    # The same review again, with a cache: each side's renders come from it, the result is the same.
    cached = [review_repository(repo, "dev", base, head, CheckOptions(), cache_dir=tmp_path / "cache") for _ in range(2)]
    assert [{str(r.ref): [str(c.ref) for c in r.changes] for r in c.releases.releases} for c in cached] == [changed, changed]


def test_values_from_a_config_map_are_read_again_when_it_changes(tmp_path: Path) -> None:
    """A tier's ConfigMaps are cached apart from its other objects by its finish key: a warm run reads them from
    there, and an edit of the ConfigMap (another finish key) is a miss that renders the new values."""
    values = lambda n: obj("v1", "ConfigMap", "web-values", "default", data={"values.yaml": f"replicas: {n}\n"})  # noqa: E731
    release = helm_release("web", "./charts/webapp", valuesFrom=[{"kind": "ConfigMap", "name": "web-values"}])
    repo = _repo(tmp_path, [release, values(3)])
    options = CheckOptions(cache_dir=tmp_path / "cache")

    def replicas() -> int:
        with render_repository(repo, "dev", options) as built:
            (rendered,) = built.render.releases.values()
            return int(next(m for m in rendered.manifests if m.ref.kind == "Deployment").body["spec"]["replicas"])

    assert replicas() == 3
    assert list((tmp_path / "cache").rglob("values-objects-*.pickle"))
    assert replicas() == 3  # warm
    (repo / "apps" / "release.yaml").write_text(dump(release, values(5)))
    assert replicas() == 5


def test_an_unrendered_chart_s_crd_switch_is_read_from_its_values_from(tmp_path: Path) -> None:
    """xunholy/k8s-gitops: cert-manager's chart (an OCI registry, not reachable offline) reads `crds.enabled: true`
    from a valuesFrom ConfigMap. Its CRDs come from the knowledge base, switched by the composed values: the
    ClusterIssuer of the tier that waits for it is served (before, only `spec.values` was read: unknown-kind)."""
    from bot.engine.render.chartsource import FetchPolicy
    from bot.pipeline.releases import ChartOptions

    def files(values_text: str) -> dict[str, str]:
        return flux_repo(
            {"infra": ks("infra", "./infra", wait=True), "apps": ks("apps", "./apps", depends_on=["infra"])},
            {
                "infra/kustomization.yaml": kustomization("release.yaml"),
                "infra/release.yaml": dump(
                    obj("source.toolkit.fluxcd.io/v1", "OCIRepository", "cert-manager", "network-system", spec={
                        "interval": "1h", "url": "oci://quay.io/jetstack/charts/cert-manager", "ref": {"tag": "v1.19.1"},
                    }),
                    obj("v1", "ConfigMap", "cert-manager-values", "network-system", data={"values.yaml": values_text}),
                    obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", "cert-manager", "network-system", spec={
                        "interval": "1h", "chartRef": {"kind": "OCIRepository", "name": "cert-manager"},
                        "valuesFrom": [{"kind": "ConfigMap", "name": "cert-manager-values"}],
                    }),
                ),
                "apps/kustomization.yaml": kustomization("issuer.yaml"),
                "apps/issuer.yaml": dump(obj("cert-manager.io/v1", "ClusterIssuer", "letsencrypt", spec={"selfSigned": {}})),
            },
        )

    options = CheckOptions(charts=ChartOptions(policy=FetchPolicy(offline=True)))
    enabled = check_repository(write_tree(tmp_path / "on", files("crds:\n  enabled: true\n")), "dev", options)
    assert any(f.check == "chart-not-rendered" for f in enabled.findings)
    assert [f for f in enabled.findings if f.check in ("unknown-kind", "crd-not-ordered") and f.severity is not Severity.INFO] == [], [f.message for f in enabled.findings]
    disabled = check_repository(write_tree(tmp_path / "off", files("crds:\n  enabled: false\n")), "dev", options)
    assert any(f.check == "unknown-kind" and f.severity is Severity.WARNING for f in disabled.findings), [f.message for f in disabled.findings]
