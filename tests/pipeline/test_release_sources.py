"""HelmReleases whose charts come from HTTP repositories and OCI registries, end to end: who may be fetched, caches, credentials.

Real parts: a Helm HTTP repository on 127.0.0.1 (tests/fakes/chartrepo.py), Debian's docker-registry
(tests/fakes/registry.py; it fails, never skips, in CI), charts packaged and pushed with the Helm SDK, real git
repositories, real kustomize, real Helm workers, and the real service with the fake GitHub for the bot path.
"""

from __future__ import annotations

import base64
import itertools
import json
import time
import urllib.request
import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import helm_python
import pytest
from aiohttp.test_utils import TestClient, TestServer

from bot.adapters.github import GitHubAdapter
from bot.engine.render.chartsource import FetchPolicy
from bot.engine.core.model import Severity
from bot.engine.reporting.report import format_markdown, format_text
from bot.engine.render.rendered import Outcome
from bot.engine.reporting.review_report import format_review_markdown, format_review_text, review_to_json
from bot.engine.chatops.settings import parse_chart_settings
from bot.pipeline.check import CheckOptions, check_repository, render_repository
from bot.pipeline.releases import ChartOptions
from bot.pipeline.review import review_repository
from bot.service.app import build_service
from bot.service.cli import main
from bot.service.settings import chart_options, load_service_config
from tests.fakes.chartrepo import ChartRepo, serve_chart_repo, write_index
from tests.fakes.charts import package_chart, write_chart
from tests.fakes.registry import Registry, registry  # noqa: F401  (the fixture)
from tests.fakes.service import Origin as BaseOrigin
from tests.fluxrepo import crd, dump, flux_repo, ks, kustomization, obj, write_tree
from tests.gitrepo import commit_all, init_repo
from tests.hardening.harness import BOT, CLUSTER, Harness, Origin, make_fake, open_pull, pr_payload, service_config

FLUX = "flux-system"
HR_API, SRC_API = "helm.toolkit.fluxcd.io/v2", "source.toolkit.fluxcd.io/v1"
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
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
AUTH_SECRET = """\
{{- if .Values.auth }}
apiVersion: v1
kind: Secret
metadata:
  name: {{ .Release.Name }}-auth
stringData:
  password: {{ .Values.auth.password | quote }}
{{- end }}
"""
WIDGET_CRD = dump(crd("example.com", "Widget", "widgets"))
CHART_PASSWORD = "chart-repo-pw-7Hq2x"
_counter = itertools.count()


# -- charts, repositories, registries ------------------------------------------------------------------------------


def webapp(tmp: Path, version: str, dest: Path, *, tag: str = "1.25", port: int = 80, crds: bool = False) -> Path:
    """The `webapp` chart at `version` packaged by Helm into `dest` (a Deployment; a Secret when `auth` is set)."""
    src = write_chart(
        tmp / f"src-{next(_counter)}", "webapp", version, app_version=version,
        templates={"deployment.yaml": DEPLOYMENT, "auth.yaml": AUTH_SECRET}, values={"replicas": 1, "tag": tag, "port": port},
        crds={"widgets.yaml": WIDGET_CRD} if crds else None,
    )
    return package_chart(src, dest)


def chart_root(tmp: Path, versions: dict[str, dict[str, Any]], sub: str = "") -> Path:
    """A Helm repository directory (under `sub`) with webapp at each version (keyword arguments of `webapp`)."""
    root = tmp / f"served-{next(_counter)}"
    where = root / sub if sub else root
    for version, kwargs in versions.items():
        webapp(tmp, version, where, **kwargs)
    write_index(where, {"webapp": [{"version": v, "urls": [f"webapp-{v}.tgz"], "digest": "auto"} for v in versions]})
    return root


def host_of(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def helm_repository(url: str, **spec: Any) -> dict[str, Any]:
    return obj(SRC_API, "HelmRepository", "charts", FLUX, spec={"url": url, "interval": "1h", **spec})


def from_repository(name: str, version: str, **spec: Any) -> dict[str, Any]:
    chart = {"spec": {"chart": "webapp", "version": version, "sourceRef": {"kind": "HelmRepository", "name": "charts", "namespace": FLUX}}}
    return obj(HR_API, "HelmRelease", name, "default", spec={"interval": "10m", "chart": chart, **spec})


def oci_repository(name: str, url: str, ref: dict[str, str]) -> dict[str, Any]:
    return obj(SRC_API, "OCIRepository", name, FLUX, spec={"url": url, "interval": "1h", "ref": ref, "insecure": True})


def from_oci(name: str, source: str) -> dict[str, Any]:
    return obj(HR_API, "HelmRelease", name, "default", spec={"interval": "10m", "chartRef": {"kind": "OCIRepository", "name": source, "namespace": FLUX}})


def flux_tree(tmp: Path, objects: list[dict[str, Any]], later: list[dict[str, Any]] | None = None) -> Path:
    """A repository whose cluster `dev` applies one waited tier `apps` with `objects` (and `widgets` after it)."""
    tiers: dict[str, dict[str, Any]] = {"apps": ks("apps", "./apps", wait=True)}
    files = {"apps/kustomization.yaml": kustomization("release.yaml"), "apps/release.yaml": dump(*objects)}
    if later is not None:
        tiers["widgets"] = ks("widgets", "./widgets", depends_on=["apps"])
        files |= {"widgets/kustomization.yaml": kustomization("widgets.yaml"), "widgets/widgets.yaml": dump(*later)}
    return write_tree(tmp / f"repo-{next(_counter)}", flux_repo(tiers, files))


def options(tmp: Path | None = None, **policy: Any) -> CheckOptions:
    """Check options with this fetch policy (and a build cache under `tmp` when given)."""
    return CheckOptions(cache_dir=tmp, charts=ChartOptions(policy=FetchPolicy(**policy)))


def allow(*hosts: str, **policy: Any) -> dict[str, Any]:
    return {"allow_hosts": frozenset(hosts), **policy}


def not_rendered(report: Any) -> list[str]:
    return [f.message for f in report.findings if f.check == "chart-not-rendered"]


def push(tmp: Path, reg: Registry, version: str, **kwargs: Any) -> Path:
    tgz = webapp(tmp, version, tmp / f"oci-{next(_counter)}", **kwargs)
    helm_python.push(tgz, f"{reg.oci}/charts", plain_http=True)
    return tgz


def manifest_digest(reg: Registry, tag: str) -> str:
    request = urllib.request.Request(f"http://{reg.host}/v2/charts/webapp/manifests/{tag}", headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return "sha256:" + hashlib.sha256(response.read()).hexdigest()


def settled_requests(reg: Registry) -> list[str]:
    time.sleep(0.3)  # the registry writes its access log after the response
    return reg.requests()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ChartRepo]:
    """webapp 1.0.0, 1.1.0 (image 1.27, port 8080), 1.2.0 (with crds/) and 2.0.0 on a loopback Helm repository."""
    root = chart_root(tmp_path, {"1.0.0": {}, "1.1.0": {"tag": "1.27", "port": 8080}, "1.2.0": {"crds": True}, "2.0.0": {}})
    with serve_chart_repo(ChartRepo(root)) as repo:
        yield repo


# -- HTTP repositories --------------------------------------------------------------------------------------------


def test_a_semver_range_takes_the_highest_and_the_charts_crd_is_credited_to_the_release(tmp_path: Path, served: ChartRepo) -> None:
    repo = flux_tree(tmp_path, [helm_repository(served.url), from_repository("web", "^1.0")])
    with render_repository(repo, "dev", options(**allow(host_of(served.url)))) as built:
        [release] = built.render.releases.values()
        assert release.outcome is Outcome.RENDERED and release.version == "1.2.0"
        assert sorted(str(m.ref) for m in release.manifests) == ["CustomResourceDefinition/widgets.example.com", "Deployment/default/web"]
        assert [(kind.kind, crd_ref.name) for kind, crd_ref in release.crds] == [("Widget", "widgets.example.com")]  # crds/: the release provides it
    assert served.paths() == ["/index.yaml", "/webapp-1.2.0.tgz"]


def test_a_cr_beside_the_release_whose_repository_chart_installs_its_crd_is_a_deadlock(tmp_path: Path, served: ChartRepo) -> None:
    widget = obj("example.com/v1", "Widget", "w", "default")
    repo = flux_tree(tmp_path, [helm_repository(served.url), from_repository("web", "1.2.0"), widget])
    report = check_repository(repo, "dev", options(**allow(host_of(served.url))))
    errors = [f for f in report.findings if f.severity is Severity.ERROR]
    assert [f.check for f in errors] == ["second-order-crd"], [f"{f.check}: {f.message}" for f in report.findings]
    assert "chart webapp of HelmRelease default/web" in errors[0].message and "Widget" in errors[0].message
    # In a later, waited tier the same Widget is fine, and no kind is unknown: the chart provides it.
    repo = flux_tree(tmp_path, [helm_repository(served.url), from_repository("web", "1.2.0")], later=[widget])
    report = check_repository(repo, "dev", options(**allow(host_of(served.url))))
    assert not [f for f in report.findings if f.severity is not Severity.INFO], [f"{f.check}: {f.message}" for f in report.findings]


def test_an_unlisted_loopback_repository_is_never_contacted(tmp_path: Path, served: ChartRepo) -> None:
    # The base names 127.0.0.1 itself: a named host opens public addresses only, never loopback.
    repo = flux_tree(tmp_path, [helm_repository(served.url), from_repository("web", "1.0.0")])
    report = check_repository(repo, "dev", options())
    [message] = not_rendered(report)
    assert "HelmRepository flux-system/charts not rendered: not allowed" in message and "internal address" in message
    assert report.releases_not_rendered == 1 and not report.errors
    assert served.log == []


def test_the_cli_check_and_build_take_allow_chart_host(tmp_path: Path, served: ChartRepo, capsys: pytest.CaptureFixture[str]) -> None:
    repo = flux_tree(tmp_path, [helm_repository(served.url), from_repository("web", "~1.1")])
    common = ["--repo", str(repo), "--cluster", "dev", "--cache-dir", str(tmp_path / "cache")]
    assert main(["check", *common, "--format", "json"]) == 0
    refused = json.loads(capsys.readouterr().out)
    assert refused["helmReleases"]["notRendered"] == 1 and served.log == []
    assert main(["check", *common, "--format", "json", "--allow-chart-host", host_of(served.url)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["helmReleases"] == {"rendered": 1, "notRendered": 0}
    assert main(["build", *common, "--allow-chart-host", host_of(served.url)]) == 0
    out = capsys.readouterr().out
    assert "# HelmRelease default/web (chart webapp 1.1.0)" in out and "image: nginx:1.27" in out
    assert main(["build", *common, "--no-charts"]) == 0
    assert "# HelmRelease" not in capsys.readouterr().out


def test_offline_renders_from_a_warm_cache_and_says_so_when_cold(tmp_path: Path, served: ChartRepo) -> None:
    repo = flux_tree(tmp_path, [helm_repository(served.url), from_repository("web", "1.1.0")])
    cache, host = tmp_path / "cache", host_of(served.url)
    check_repository(repo, "dev", options(cache, **allow(host)))
    fetched = len(served.log)
    assert fetched == 2
    warm = check_repository(repo, "dev", options(cache, **allow(host, offline=True)))
    assert warm.releases == 1 and not not_rendered(warm) and len(served.log) == fetched
    cold = check_repository(repo, "dev", options(tmp_path / "cold", **allow(host, offline=True)))
    [message] = not_rendered(cold)
    assert "unreachable: offline" in message and len(served.log) == fetched


def test_a_mirror_serves_a_repository_at_an_unreachable_host(tmp_path: Path) -> None:
    root = chart_root(tmp_path, {"1.0.0": {}}, sub="x")
    with serve_chart_repo(ChartRepo(root)) as mirror:
        repo = flux_tree(tmp_path, [helm_repository("https://charts.example.invalid/x"), from_repository("web", "1.x")])
        report = check_repository(repo, "dev", options(mirrors={"charts.example.invalid": mirror.url}))
        assert report.releases == 1 and not not_rendered(report)
        assert mirror.paths() == ["/x/index.yaml", "/x/webapp-1.0.0.tgz"]
        assert {entry.host for entry in mirror.log} == {host_of(mirror.url)}


def test_a_repository_behind_basic_auth_needs_credentials_and_never_shows_them(tmp_path: Path) -> None:
    root = chart_root(tmp_path, {"1.0.0": {}})
    with serve_chart_repo(ChartRepo(root, auth=("reader", CHART_PASSWORD))) as served:
        host = host_of(served.url)
        repo = flux_tree(tmp_path, [helm_repository(served.url), from_repository("web", "1.0.0")])
        report = check_repository(repo, "dev", options(**allow(host)))
        [message] = not_rendered(report)
        assert "not rendered: needs credentials" in message
        # Credentials keyed by host, read from the environment as the service settings read them.
        settings = parse_chart_settings({"allow_hosts": [host], "credentials": [{"host": host, "username": "reader", "password_env": "CHART_PW"}]})
        charts = chart_options(settings, {"CHART_PW": CHART_PASSWORD})
        assert CHART_PASSWORD not in repr(charts)
        report = check_repository(repo, "dev", CheckOptions(charts=charts))
        assert report.releases == 1 and not not_rendered(report)
        texts = [format_text(report), format_markdown(report), json.dumps(report.to_json())]
        wrong = chart_options(replace(settings), {"CHART_PW": CHART_PASSWORD + "-wrong"})
        refused = check_repository(repo, "dev", CheckOptions(charts=wrong))
        [message] = not_rendered(refused)
        assert "needs credentials" in message and "refused the credentials" in message
        texts += [format_text(refused), format_markdown(refused), json.dumps(refused.to_json())]
    for text in texts:
        assert CHART_PASSWORD not in text and base64.b64encode(f"reader:{CHART_PASSWORD}".encode()).decode() not in text


def test_the_cli_reads_chart_credentials_from_a_file_that_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = chart_root(tmp_path, {"1.0.0": {}})
    with serve_chart_repo(ChartRepo(root, auth=("reader", CHART_PASSWORD))) as served:
        host = host_of(served.url)
        repo = flux_tree(tmp_path, [helm_repository(served.url), from_repository("web", "1.0.0")])
        common = ["check", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--allow-chart-host", host]
        outputs = []
        for fmt in ("text", "json", "markdown"):
            assert main([*common, "--format", fmt]) == 0
            outputs.append(capsys.readouterr())
        assert "needs credentials" in outputs[0].out
        creds = tmp_path / "chart-credentials.yaml"
        creds.write_text(f"credentials:\n  - {{host: '{host}', username: reader, password_env: FW_CHART_PW}}\n")
        monkeypatch.setenv("FW_CHART_PW", CHART_PASSWORD)
        for fmt in ("text", "json", "markdown"):
            assert main([*common, "--format", fmt, "--chart-credentials-file", str(creds)]) == 0
            outputs.append(capsys.readouterr())
        assert json.loads(outputs[4].out)["helmReleases"] == {"rendered": 1, "notRendered": 0}
        monkeypatch.setenv("FW_CHART_PW", "not-the-" + CHART_PASSWORD)
        assert main([*common, "--chart-credentials-file", str(creds)]) == 0
        outputs.append(capsys.readouterr())
        assert "refused the credentials" in outputs[-1].out
        monkeypatch.delenv("FW_CHART_PW")
        assert main([*common, "--chart-credentials-file", str(creds)]) == 2
        outputs.append(capsys.readouterr())
        assert "$FW_CHART_PW (password) is not set" in outputs[-1].err
    for captured in outputs:
        assert CHART_PASSWORD not in captured.out + captured.err


# -- values from the cluster's ConfigMaps and Secrets ------------------------------------------------------------


def test_values_from_a_configmap_and_a_secret_never_print_the_secret(tmp_path: Path, served: ChartRepo, capsys: pytest.CaptureFixture[str]) -> None:
    secret_value = "s3cret-from-values-Zk81"

    def objects(replicas: int) -> list[dict[str, Any]]:
        return [
            helm_repository(served.url),
            obj("v1", "ConfigMap", "web-values", "default", data={"values.yaml": f"replicas: {replicas}\ntag: '1.26'\n"}),
            obj("v1", "Secret", "web-auth", "default", stringData={"password": secret_value}),
            from_repository("web", "1.0.0", valuesFrom=[
                {"kind": "ConfigMap", "name": "web-values"},
                {"kind": "Secret", "name": "web-auth", "valuesKey": "password", "targetPath": "auth.password"},
            ]),
        ]

    repo = flux_tree(tmp_path, objects(2))
    with render_repository(repo, "dev", options(**allow(host_of(served.url)))) as built:
        [release] = built.render.releases.values()
        by_kind = {m.ref.kind: m.body for m in release.manifests}
        assert by_kind["Deployment"]["spec"]["replicas"] == 2
        assert by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.26"
        assert "Secret" in by_kind  # the targetPath set auth.password: the chart's Secret rendered
    assert main(["build", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--allow-chart-host", host_of(served.url)]) == 0
    out = capsys.readouterr().out
    assert "# HelmRelease default/web (chart webapp 1.0.0)" in out and "name: web-auth" in out and "replicas: 2" in out
    # A review of a values change: the changed Deployment is named, the Secret's value nowhere.
    git = init_repo(repo)
    base = git.head.commit.hexsha
    (repo / "apps/release.yaml").write_text(dump(*objects(3)))
    head = commit_all(git, "three replicas")
    review = review_repository(repo, "dev", base, head, options(**allow(host_of(served.url))))
    [changed] = review.releases.releases
    assert "Deployment/default/web changed" in changed.summary()
    texts = [out, format_review_text(review), "\n".join(format_review_markdown([review])), json.dumps(review_to_json(review))]
    for text in texts:
        assert secret_value not in text and base64.b64encode(secret_value.encode()).decode() not in text


# -- who may be fetched: the base branch's sources -----------------------------------------------------------------


def test_a_head_only_repository_host_is_not_allowed_in_a_review(tmp_path: Path, served: ChartRepo) -> None:
    # The base's repository is allowed; the PR adds a HelmRepository at a new (public) host: never fetched,
    # refused before any DNS look-up, while the base's own chart renders on both sides.
    host = host_of(served.url)
    repo = flux_tree(tmp_path, [helm_repository(served.url), from_repository("web", "1.0.0")])
    git = init_repo(repo)
    base = git.head.commit.hexsha
    other = obj(SRC_API, "HelmRepository", "other", FLUX, spec={"url": "https://evil.example.net/charts", "interval": "1h"})
    pr = from_repository("pr", "1.0.0")
    pr["spec"]["chart"]["spec"]["sourceRef"]["name"] = "other"
    (repo / "apps/release.yaml").write_text(dump(helm_repository(served.url), from_repository("web", "1.0.0"), other, pr))
    head = commit_all(git, "a chart from elsewhere")
    review = review_repository(repo, "dev", base, head, options(**allow(host)))
    [message] = [f.finding.message for f in review.findings if f.finding.check == "chart-not-rendered"]
    assert "HelmRepository flux-system/other not rendered: not allowed: evil.example.net:443 is not named by the base branch's sources" in message
    assert review.head.releases == 1 and review.head.releases_not_rendered == 1
    assert {entry.host for entry in served.log} == {host}


def test_a_base_without_charts_names_no_host_for_the_head(tmp_path: Path, served: ChartRepo) -> None:
    # The base has no HelmRelease; the head adds two: at a public address literal (a connection there would
    # escape the test's network guard) and at the loopback repository. Neither host is the base's.
    repo = flux_tree(tmp_path, [obj("v1", "ConfigMap", "x", "default", data={"a": "b"})])
    git = init_repo(repo)
    base = git.head.commit.hexsha
    public = obj(SRC_API, "HelmRepository", "public", FLUX, spec={"url": "https://93.184.216.34/charts", "interval": "1h"})
    pr = from_repository("pr", "1.0.0")
    pr["spec"]["chart"]["spec"]["sourceRef"]["name"] = "public"
    (repo / "apps/release.yaml").write_text(dump(helm_repository(served.url), from_repository("web", "1.0.0"), public, pr))
    head = commit_all(git, "add charts")
    review = review_repository(repo, "dev", base, head, options())
    messages = sorted(f.finding.message for f in review.findings if f.finding.check == "chart-not-rendered")
    assert len(messages) == 2 and all("not allowed" in m for m in messages) and served.log == []
    assert "93.184.216.34:443 is not named by the base branch's sources" in messages[1]
    allowed = review_repository(repo, "dev", base, head, options(**allow(host_of(served.url))))
    assert allowed.head.releases == 1 and allowed.head.releases_not_rendered == 1
    assert served.paths() == ["/index.yaml", "/webapp-1.0.0.tgz"]


def test_a_review_whose_base_has_no_such_cluster_names_no_host(tmp_path: Path) -> None:
    # The PR adds the whole cluster: the base cannot be rendered, so nothing the head names is fetched.
    repo = write_tree(tmp_path / "repo", {"README.md": "empty\n"})
    git = init_repo(repo)
    base = git.head.commit.hexsha
    public = obj(SRC_API, "HelmRepository", "charts", FLUX, spec={"url": "https://93.184.216.34/charts", "interval": "1h"})
    write_tree(repo, flux_repo({"apps": ks("apps", "./apps")}, {"apps/kustomization.yaml": kustomization("release.yaml"), "apps/release.yaml": dump(public, from_repository("web", "1.0.0"))}))
    head = commit_all(git, "a new cluster")
    review = review_repository(repo, "dev", base, head, options())
    [message] = [f.finding.message for f in review.findings if f.finding.check == "chart-not-rendered"]
    assert "93.184.216.34:443 is not named by the base branch's sources" in message


# -- OCI registries ------------------------------------------------------------------------------------------------


def test_oci_tag_semver_digest_and_helmrepository_type_oci(tmp_path: Path, registry: Registry) -> None:  # noqa: F811
    for version in ("1.0.0", "1.1.0", "2.0.0"):
        push(tmp_path, registry, version, tag=version)
    digest = manifest_digest(registry, "1.0.0")
    url = f"{registry.oci}/charts/webapp"
    objects = [
        oci_repository("by-tag", url, {"tag": "1.1.0"}), from_oci("tag", "by-tag"),
        oci_repository("by-semver", url, {"semver": "<2.0.0"}), from_oci("semver", "by-semver"),
        oci_repository("by-digest", url, {"digest": digest}), from_oci("digest", "by-digest"),
        helm_repository(f"{registry.oci}/charts", type="oci", insecure=True), from_repository("repo", "^2"),
    ]
    repo = flux_tree(tmp_path, objects)
    with render_repository(repo, "dev", options(**allow(registry.host))) as built:
        versions = {ref.name: (r.outcome, r.version) for ref, r in built.render.releases.items()}
        images = {ref.name: r.manifests[0].body["spec"]["template"]["spec"]["containers"][0]["image"] for ref, r in built.render.releases.items()}
    assert versions == {"tag": (Outcome.RENDERED, "1.1.0"), "semver": (Outcome.RENDERED, "1.1.0"), "digest": (Outcome.RENDERED, "1.0.0"), "repo": (Outcome.RENDERED, "2.0.0")}
    assert images == {"tag": "nginx:1.1.0", "semver": "nginx:1.1.0", "digest": "nginx:1.0.0", "repo": "nginx:2.0.0"}
    refused = check_repository(repo, "dev", options())
    assert refused.releases_not_rendered == 4


def test_a_review_of_an_ocirepository_tag_bump_and_a_warm_second_review(tmp_path: Path, registry: Registry) -> None:  # noqa: F811
    push(tmp_path, registry, "1.0.0")
    push(tmp_path, registry, "1.1.0", tag="1.27", port=8080)
    url = f"{registry.oci}/charts/webapp"
    repo = flux_tree(tmp_path, [oci_repository("webapp", url, {"tag": "1.0.0"}), from_oci("web", "webapp")])
    git = init_repo(repo)
    base = git.head.commit.hexsha
    (repo / "apps/release.yaml").write_text(dump(oci_repository("webapp", url, {"tag": "1.1.0"}), from_oci("web", "webapp")))
    head = commit_all(git, "webapp 1.1.0")
    cache = tmp_path / "cache"
    review = review_repository(repo, "dev", base, head, options(**allow(registry.host)), cache_dir=cache)
    [release] = review.releases.releases
    assert release.summary() == "HelmRelease default/web · chart webapp 1.0.0 → 1.1.0: Deployment/default/web changed (image, containerPort)"
    fetched = settled_requests(registry)
    assert len(fetched) == 4  # each side: its manifest and its layer
    again = review_repository(repo, "dev", base, head, options(**allow(registry.host)), cache_dir=cache)
    assert [r.summary() for r in again.releases.releases] == [release.summary()]
    assert settled_requests(registry) == fetched  # warm: nothing fetched


# -- the bot ------------------------------------------------------------------------------------------------------


class ChartOrigin(Origin):
    """The hardening origin with a `prod` cluster whose `apps` tier installs webapp 1.0.0 from a Helm repository."""

    def __init__(self, tmp: Path, url: str) -> None:
        files = {
            "clusters/prod/kustomization.yaml": kustomization("apps.yaml"),
            "clusters/prod/apps.yaml": dump(ks("apps", "./apps")),
            "apps/kustomization.yaml": kustomization("release.yaml"),
            "apps/release.yaml": dump(helm_repository(url), from_repository("web", "1.0.0")),
        }
        BaseOrigin.__init__(self, tmp, lambda work: write_tree(work, files), work="origin-work")


async def test_the_bot_renders_a_chart_bump_from_an_allowed_repository(tmp_path: Path, served: ChartRepo) -> None:
    origin = ChartOrigin(tmp_path, served.url)
    head = origin.pull(1, {"apps/release.yaml": dump(helm_repository(served.url), from_repository("web", "1.1.0"))})
    settings = tmp_path / "fluxwarden.yaml"
    settings.write_text(f"charts:\n  allow_hosts: ['{host_of(served.url)}']\n")
    loaded = load_service_config(settings, {"FLUXWARDEN_WEBHOOK_SECRET": "x", "FLUXWARDEN_GITHUB_TOKEN": "y"})
    assert loaded.charts.policy.allow_hosts == {host_of(served.url)}
    async with make_fake(origin) as fake:
        open_pull(fake, origin, 1, head)
        config = replace(service_config(fake, origin, tmp_path / "cache"), charts=loaded.charts)
        service = build_service(config, github=GitHubAdapter(config.github, min_write_interval=0, backoff=0.05, bot_login=BOT))
        async with TestClient(TestServer(service.app(), host="127.0.0.1")) as client:
            h = Harness(client, fake, service, origin)
            await h.deliver("pull_request", pr_payload(1, head, origin.main))
            await h.settle(timeout=120)
            [comment] = h.comments(1, marker=f"fluxwarden:precheck:{CLUSTER}")
    assert "Deployment/default/web changed" in comment.body, comment.body
    assert "webapp 1.0.0 → 1.1.0" in comment.body
    assert {"/webapp-1.0.0.tgz", "/webapp-1.1.0.tgz"} <= set(served.paths())
