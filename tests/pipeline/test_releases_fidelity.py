"""Charts from git packed and valued as source-controller does: `.helmignore`, valuesFiles from the source root,
ignoreMissingValuesFiles, and only the CRDs Helm installs (a disabled subchart's are not providers).

Real git repositories, real kustomize, real Helm in spawned workers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.engine.core.model import Severity
from bot.engine.render.rendered import Outcome
from bot.pipeline.check import CheckOptions, check_repository, render_repository
from tests.fakes.charts import write_chart
from tests.fluxrepo import crd, dump, flux_repo, ks, kustomization, obj, write_tree
from tests.pipeline.test_releases import DEPLOYMENT, helm_release

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"
WIDGET_CRD = dump(crd("example.com", "Widget", "widgets"))


def _repo(tmp_path: Path, apps: list[dict[str, Any]], later: list[dict[str, Any]] | None = None, files: dict[str, str] | None = None) -> Path:
    tiers: dict[str, dict[str, Any]] = {"apps": ks("apps", "./apps", wait=True)}
    tree = {"apps/kustomization.yaml": kustomization("release.yaml"), "apps/release.yaml": dump(*apps), **(files or {})}
    if later is not None:
        tiers["widgets"] = ks("widgets", "./widgets", depends_on=["apps"])
        tree |= {"widgets/kustomization.yaml": kustomization("widgets.yaml"), "widgets/widgets.yaml": dump(*later)}
    return write_tree(tmp_path / "repo", flux_repo(tiers, tree))


def _release(built: Any) -> Any:
    [release] = built.render.releases.values()
    return release


def test_helmignore_leaves_files_out_of_a_chart_from_git(tmp_path: Path) -> None:
    # source-controller packs the chart with Helm's loader rules: an ignored template renders nothing, and an
    # ignored directory (here more files than a chart may hold) is skipped whole.
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")])
    docs = {f"docs/page-{i}.md": "x\n" for i in range(5001)}
    write_chart(
        repo / "charts", "webapp", templates={"deployment.yaml": DEPLOYMENT, "test-only.yaml": CM.format(name="test-only"), ".hidden.yaml": CM.format(name="hidden")},
        values={"replicas": 1, "tag": "1.25", "port": 80}, files={".helmignore": "# local only\ntemplates/test-only.yaml\ndocs/\n*.swp\n", "values.yaml.swp": "junk", **docs},
    )
    with render_repository(repo, "dev", CheckOptions()) as built:
        release = _release(built)
        assert release.outcome is Outcome.RENDERED, release.reason
        assert [str(m.ref) for m in release.manifests] == ["Deployment/default/web"]


def test_an_ignored_file_changes_nothing_in_the_packed_chart(tmp_path: Path) -> None:
    from bot.adapters.workspace import build_snapshot
    from bot.pipeline.releases import pack_chart

    chart = write_chart(tmp_path / "repo", "app", templates={"cm.yaml": CM.format(name="a")}, files={".helmignore": "notes.txt\n", "notes.txt": "one"})
    first = pack_chart(build_snapshot(tmp_path / "repo", tmp_path / "s1"), "app")
    (chart / "notes.txt").write_text("two")
    assert pack_chart(build_snapshot(tmp_path / "repo", tmp_path / "s2"), "app").digest == first.digest
    (chart / "templates" / "cm.yaml").write_text(CM.format(name="b"))
    assert pack_chart(build_snapshot(tmp_path / "repo", tmp_path / "s3"), "app").digest != first.digest


def test_a_helmignore_helm_refuses_leaves_the_chart_unrendered_and_says_why(tmp_path: Path) -> None:
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")])
    write_chart(repo / "charts", "webapp", templates={"cm.yaml": CM.format(name="a")}, files={".helmignore": "docs/**\n"})
    report = check_repository(repo, "dev", CheckOptions())
    [line] = [f for f in report.findings if f.check == "chart-not-rendered"]
    assert "double-star (**) syntax is not supported" in line.message


def _valued(tmp_path: Path, values_files: list[str], **chart_spec: Any) -> Path:
    release = helm_release("web", "./charts/webapp")
    release["spec"]["chart"]["spec"].update(valuesFiles=values_files, **chart_spec)
    repo = _repo(tmp_path, [release], files={"envs/prod.yaml": "replicas: 5\n", "values.yaml": "port: 8080\n"})
    write_chart(repo / "charts", "webapp", templates={"deployment.yaml": DEPLOYMENT}, values={"replicas": 1, "tag": "1.25", "port": 80},
                files={"values-prod.yaml": "replicas: 7\n"})
    return repo


def _deployment(repo: Path) -> dict[str, Any]:
    with render_repository(repo, "dev", CheckOptions()) as built:
        release = _release(built)
        assert release.outcome is Outcome.RENDERED, release.reason
        [deployment] = release.manifests
        return dict(deployment.body["spec"])


def test_values_files_of_a_git_chart_are_paths_from_the_repository_root(tmp_path: Path) -> None:
    # builder_local.go mergeFileValues: relative to the source root; `values.yaml` there is the root's file.
    spec = _deployment(_valued(tmp_path / "a", ["charts/webapp/values.yaml", "envs/prod.yaml"]))
    assert spec["replicas"] == 5 and spec["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 80}]
    spec = _deployment(_valued(tmp_path / "b", ["charts/webapp/values.yaml", "values.yaml", "charts/webapp/values-prod.yaml"]))
    assert spec["replicas"] == 7 and spec["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 8080}]
    # `..` stops at the root, as securejoin does.
    assert _deployment(_valued(tmp_path / "c", ["charts/webapp/values.yaml", "../../envs/prod.yaml"]))["replicas"] == 5


def test_a_chart_relative_values_file_of_a_git_chart_is_missing_and_fails_the_release(tmp_path: Path) -> None:
    report = check_repository(_valued(tmp_path, ["charts/webapp/values.yaml", "values-prod.yaml"]), "dev", CheckOptions())
    [failed] = [f for f in report.findings if f.check == "chart-render-failed"]
    assert failed.severity is Severity.ERROR
    assert "no values file found at path '/values-prod.yaml' (reference 'values-prod.yaml')" in failed.message


def test_ignore_missing_values_files_skips_the_missing_file(tmp_path: Path) -> None:
    repo = _valued(tmp_path, ["charts/webapp/values.yaml", "envs/absent.yaml", "envs/prod.yaml"], ignoreMissingValuesFiles=True)
    assert _deployment(repo)["replicas"] == 5
    report = check_repository(repo, "dev", CheckOptions())
    assert not [f for f in report.findings if f.severity is Severity.ERROR], [f.message for f in report.findings]


def test_the_crd_of_a_subchart_its_condition_disables_is_not_provided(tmp_path: Path) -> None:
    # helm-controller >= v1.2 (fluxcd/helm-controller#1123) applies crds/ after Helm processed the
    # conditions: a disabled subchart's CRD is never installed, so a Widget waiting on it is unknown.
    def check(enabled: bool) -> list[str]:
        where = tmp_path / str(enabled)
        widget = obj("example.com/v1", "Widget", "w", "default")
        repo = _repo(where, [helm_release("platform", "./charts/platform", values={"widgets": {"enabled": enabled}})], later=[widget])
        sub = write_chart(where / "subs", "widgets", crds={"widgets.yaml": WIDGET_CRD})
        write_chart(repo / "charts", "platform", templates={"cm.yaml": CM.format(name="platform")}, dependencies=[sub], conditions={"widgets": "widgets.enabled"})
        report = check_repository(repo, "dev", CheckOptions())
        return [f.check for f in report.findings if f.severity is not Severity.INFO]

    assert check(False) == ["unknown-kind"]
    assert check(True) == []


def test_a_file_dependency_not_vendored_is_packed_in_and_a_remote_one_says_why(tmp_path: Path) -> None:
    # source-controller's DependencyManager builds what charts/ lacks: a file:// path from the repository.
    from bot.adapters.workspace import build_snapshot
    from bot.pipeline.releases import ChartOptions, ChartStage, _packed

    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")])
    write_chart(repo / "charts", "common", "1.2.0", templates={"cm.yaml": CM.format(name="common-{{ .Release.Name }}")})
    write_chart(repo / "charts", "webapp", templates={"deployment.yaml": DEPLOYMENT}, values={"replicas": 1, "tag": "1.25", "port": 80},
                declared=[{"name": "common", "version": "1.x", "repository": "file://../common"}])
    with render_repository(repo, "dev", CheckOptions()) as built:
        release = _release(built)
        assert release.outcome is Outcome.RENDERED, release.reason
        assert sorted(str(m.ref) for m in release.manifests) == ["ConfigMap/default/common-web", "Deployment/default/web"]
    # A change in the dependency is a change of the packed chart (its files key the cache too).
    stage = ChartStage(ChartOptions(render=False), None, None)
    first = _packed(stage, build_snapshot(repo, tmp_path / "s1"), "charts/webapp")
    (repo / "charts" / "common" / "templates" / "cm.yaml").write_text(CM.format(name="common-changed"))
    assert _packed(stage, build_snapshot(repo, tmp_path / "s2"), "charts/webapp").digest != first.digest

    remote = _repo(tmp_path / "remote", [helm_release("web", "./charts/webapp")])
    write_chart(remote / "charts", "webapp", templates={"deployment.yaml": DEPLOYMENT},
                declared=[{"name": "redis", "version": "18.x", "repository": "https://charts.example.com"}])
    report = check_repository(remote, "dev", CheckOptions())
    [line] = [f for f in report.findings if f.check == "chart-not-rendered"]
    assert "dependency redis from https://charts.example.com" in line.message and "not fetched" in line.message
    assert not [f for f in report.findings if f.check == "chart-render-failed"]


def test_a_file_dependency_outside_its_version_constraint_is_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path, [helm_release("web", "./charts/webapp")])
    write_chart(repo / "charts", "common", "2.0.0", templates={"cm.yaml": CM.format(name="c")})
    write_chart(repo / "charts", "webapp", templates={"deployment.yaml": DEPLOYMENT},
                declared=[{"name": "common", "version": "1.x", "repository": "file://../common"}])
    report = check_repository(repo, "dev", CheckOptions())
    [line] = [f for f in report.findings if f.check == "chart-not-rendered"]
    assert "can't get a valid version for dependency 'common'" in line.message
