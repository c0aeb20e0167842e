"""Helm renders in a worker: helm-controller's install semantics, the cluster's capabilities, bounded and deterministic."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from bot.adapters.helm import HelmRenderer
from bot.adapters.workers import WorkerPool
from bot.engine.render.chartrender import GENERATED, ChartRenderFailure, ChartRenderRequest, ChartRenderResult
from tests.fakes.charts import chart_archive, write_chart

MiB = 2**20
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n{data}\n"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(1, task_timeout=60, max_task_rss=2**30, recycle_after=1000, recycle_rss=2**30) as made:
        yield made


@pytest.fixture
def renderer(pool: WorkerPool) -> HelmRenderer:
    return HelmRenderer(pool)


def request(chart: bytes | Path, **overrides: Any) -> ChartRenderRequest:
    fields: dict[str, Any] = {
        "archive": chart if isinstance(chart, bytes) else None,
        "chart_dir": str(chart) if isinstance(chart, Path) else None,
        "values_files": (),
        "values": {},
        "release_name": "rel",
        "namespace": "apps",
        "kube_version": "v1.33.0",
        "api_versions": (),
    }
    fields.update(overrides)
    return ChartRenderRequest(**fields)


def rendered(renderer: HelmRenderer, chart: bytes | Path, **overrides: Any) -> ChartRenderResult:
    result = renderer.render(request(chart, **overrides))
    assert isinstance(result, ChartRenderResult), result
    return result


def objects(result: ChartRenderResult) -> dict[str, dict[str, Any]]:
    """Every rendered object by kind/name."""
    found = {}
    for _, text in result.manifests:
        for doc in yaml.safe_load_all(text):
            if doc:
                found[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return found


def test_a_chart_renders_with_its_metadata_crds_and_release(renderer: HelmRenderer, tmp_path: Path) -> None:
    chart = write_chart(
        tmp_path, "app", "1.2.3", app_version="4.5",
        templates={
            "cm.yaml": CM.format(name="{{ .Release.Name }}-cm", data="  ns: {{ .Release.Namespace }}\n  install: {{ .Release.IsInstall | quote }}"),
            "NOTES.txt": "thanks for installing\n",
            "_helpers.tpl": '{{- define "app.x" }}x{{ end }}\n',
            "empty.yaml": "{{- if false }}\nkind: Secret\n{{- end }}\n",
        },
        crds={"foos.yaml": "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: foos.example.io\n"},
    )
    result = rendered(renderer, chart_archive(chart, tmp_path / "out"))
    assert (result.chart_name, result.chart_version, result.app_version) == ("app", "1.2.3", "4.5")
    assert [path for path, _ in result.manifests] == ["app/templates/cm.yaml"]  # no NOTES.txt, partial or empty file
    assert objects(result)["ConfigMap/rel-cm"]["data"] == {"ns": "apps", "install": "true"}
    assert [name for name, _ in result.crds] == ["app/crds/foos.yaml"] and "foos.example.io" in result.crds[0][1]
    assert result.dependencies == () and result.masked == 0
    upgrade = rendered(renderer, chart, is_upgrade=True)  # from the directory this time
    assert objects(upgrade)["ConfigMap/rel-cm"]["data"]["install"] == "false"


def test_a_crd_in_templates_follows_its_value(renderer: HelmRenderer, tmp_path: Path) -> None:
    crd = "{{- if .Values.installCRDs }}\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: bars.example.io\n{{- end }}\n"
    archive = chart_archive(write_chart(tmp_path, "op", templates={"crd.yaml": crd}, values={"installCRDs": False}), tmp_path / "out")
    assert objects(rendered(renderer, archive)) == {}
    assert list(objects(rendered(renderer, archive, values={"installCRDs": True}))) == ["CustomResourceDefinition/bars.example.io"]


def test_a_subchart_and_a_library_chart(renderer: HelmRenderer, tmp_path: Path) -> None:
    sub = write_chart(
        tmp_path / "deps", "sub", "0.2.0",
        templates={"cm.yaml": CM.format(name="sub", data="  greeting: {{ .Values.greeting }}\n  global: {{ .Values.global.site }}")},
        crds={"bazs.yaml": "kind: CustomResourceDefinition\nmetadata:\n  name: bazs.example.io\n"},
        values={"greeting": "hello"},
    )
    lib = write_chart(tmp_path / "deps", "lib", "1.0.0", library=True, templates={"_cm.tpl": '{{- define "lib.cm" -}}\n' + CM.format(name="from-lib", data="  chart: {{ .Chart.Name }}") + "{{- end }}\n"})
    top = write_chart(
        tmp_path, "top",
        templates={"cm.yaml": '{{ include "lib.cm" . }}'},
        values={"sub": {"greeting": "hi from top"}, "global": {"site": "eu"}},
        dependencies=[sub, lib],
    )
    result = rendered(renderer, chart_archive(top, tmp_path / "out"))
    assert result.dependencies == ("lib", "sub")
    found = objects(result)
    assert found["ConfigMap/sub"]["data"] == {"greeting": "hi from top", "global": "eu"}
    assert found["ConfigMap/from-lib"]["data"] == {"chart": "top"}
    assert [name for name, _ in result.crds] == ["top/charts/sub/crds/bazs.yaml"]
    assert not any("charts/lib" in path for path, _ in result.manifests)


@pytest.mark.parametrize(("template", "message"), [
    ("{{ required \"image.tag is required\" .Values.image.tag }}", "image.tag is required"),
    ("{{ fail \"this chart refuses\" }}", "this chart refuses"),
    ("{{ .Values.missing.deeper }}", "nil pointer evaluating"),
])
def test_required_and_fail_are_template_failures(renderer: HelmRenderer, tmp_path: Path, template: str, message: str) -> None:
    chart = write_chart(tmp_path, "strict", templates={"x.yaml": template}, values={"image": {}})
    result = renderer.render(request(chart))
    assert isinstance(result, ChartRenderFailure) and result.kind == "template"
    assert message in result.message and "strict/templates/x.yaml" in result.message
    assert str(tmp_path) not in result.message


def test_a_schema_violation_is_a_values_failure(renderer: HelmRenderer, tmp_path: Path) -> None:
    chart = write_chart(tmp_path, "typed", templates={"x.yaml": CM.format(name="x", data="  p: {{ .Values.port | quote }}")},
                        values={"port": 80}, files={"values.schema.json": '{"type": "object", "properties": {"port": {"type": "integer"}}}'})
    result = renderer.render(request(chart, values={"port": "eighty"}))
    assert isinstance(result, ChartRenderFailure) and result.kind == "values" and "/port" in result.message


def test_capabilities_follow_the_request(renderer: HelmRenderer, tmp_path: Path) -> None:
    data = "\n".join([
        '  monitors: {{ .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" | quote }}',
        '  kind: {{ .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" | quote }}',
        '  builtin: {{ .Capabilities.APIVersions.Has "apps/v1" | quote }}',
        "  version: {{ .Capabilities.KubeVersion.Version }}",
        '  minor: {{ .Capabilities.KubeVersion.Minor | quote }}',
        '  modern: {{ semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version | quote }}',
    ])
    archive = chart_archive(write_chart(tmp_path, "caps", templates={"cm.yaml": CM.format(name="caps", data=data)}), tmp_path / "out")
    without = objects(rendered(renderer, archive, kube_version="v1.29.4"))["ConfigMap/caps"]["data"]
    assert without == {"monitors": "false", "kind": "false", "builtin": "true", "version": "v1.29.4", "minor": "29", "modern": "false"}
    extra = ("monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor")
    with_crd = objects(rendered(renderer, archive, kube_version="v1.33.0", api_versions=extra))["ConfigMap/caps"]["data"]
    assert with_crd == {"monitors": "true", "kind": "true", "builtin": "true", "version": "v1.33.0", "minor": "33", "modern": "true"}


def test_lookup_finds_nothing_and_dns_is_off(renderer: HelmRenderer, tmp_path: Path) -> None:
    data = '  secret: {{ if lookup "v1" "Secret" "apps" "db" }}found{{ else }}absent{{ end }}\n  host: {{ getHostByName "localhost" | quote }}'
    result = rendered(renderer, write_chart(tmp_path, "look", templates={"cm.yaml": CM.format(name="look", data=data)}))
    assert objects(result)["ConfigMap/look"]["data"] == {"secret": "absent", "host": ""}


def test_unseeded_functions_are_masked_and_renders_are_byte_identical(pool: WorkerPool, tmp_path: Path) -> None:
    sub = write_chart(tmp_path / "deps", "tls", templates={"secret.yaml": (
        "{{- $ca := genCA \"ca\" 365 }}\napiVersion: v1\nkind: Secret\nmetadata:\n  name: tls\n"
        "data:\n  ca.crt: {{ $ca.Cert | b64enc }}\n  fixed: {{ \"same\" | b64enc }}\n")})
    top = write_chart(tmp_path, "rnd", templates={"s.yaml": (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: pw\n  labels:\n    stable: \"yes\"\n"
        "stringData:\n  password: {{ randAlphaNum 16 }}\n  id: {{ uuidv4 }}\n  at: {{ now | date \"2006-01-02T15:04:05.000000000\" }}\n  user: admin\n")},
        dependencies=[sub])
    archive = chart_archive(top, tmp_path / "out")
    # A fresh worker for each render: nothing carried over between them.
    fresh = WorkerPool(1, task_timeout=60, max_task_rss=2**30, recycle_after=1, recycle_rss=2**30)
    try:
        first, second = (rendered(HelmRenderer(fresh), archive) for _ in range(2))
    finally:
        fresh.close()
    assert first == second and first.masked == 4
    found = objects(first)
    assert found["Secret/pw"]["stringData"] == {"password": GENERATED, "id": GENERATED, "at": GENERATED, "user": "admin"}
    assert found["Secret/pw"]["metadata"]["labels"] == {"stable": "yes"}
    assert found["Secret/tls"]["data"] == {"ca.crt": GENERATED, "fixed": "c2FtZQ=="}  # found in a subchart's template


def test_hooks_are_kept_and_test_hooks_dropped(renderer: HelmRenderer, tmp_path: Path) -> None:
    hook = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations:\n    helm.sh/hook: pre-install,pre-upgrade\n"
    tests = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: smoke\n  annotations:\n    \"helm.sh/hook\": test\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: legacy\n  annotations:\n    \"helm.sh/hook\": test-success\n---\n"
        + CM.format(name="beside-tests", data="  a: b")
    )
    only_test = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: alone\n  annotations:\n    helm.sh/hook: test\n"
    result = rendered(renderer, write_chart(tmp_path, "hooks", templates={"job.yaml": hook, "tests.yaml": tests, "only.yaml": only_test}))
    assert sorted(objects(result)) == ["ConfigMap/beside-tests", "Job/migrate"]
    assert [path for path, _ in result.manifests] == ["hooks/templates/job.yaml", "hooks/templates/tests.yaml"]


def test_values_files_merge_in_order_and_replace_the_defaults(renderer: HelmRenderer, tmp_path: Path) -> None:
    data = "  a: {{ .Values.m.a | quote }}\n  b: {{ .Values.m.b | quote }}\n  default: {{ .Values.fromDefaults | default \"unset\" | quote }}\n  user: {{ .Values.user | default \"unset\" | quote }}"
    chart = write_chart(tmp_path, "vf", templates={"cm.yaml": CM.format(name="vf", data=data)},
                        values={"fromDefaults": "yes", "m": {"a": "default", "b": "default"}},
                        files={"first.yaml": "m:\n  a: first\n  b: first\n", "env/second.yaml": "m:\n  b: second\n"})
    archive = chart_archive(chart, tmp_path / "out")

    def data_of(**overrides: Any) -> dict[str, str]:
        return objects(rendered(renderer, archive, **overrides))["ConfigMap/vf"]["data"]

    assert data_of(values_files=("first.yaml", "env/second.yaml")) == {"a": "first", "b": "second", "default": "unset", "user": "unset"}
    assert data_of(values_files=("env/second.yaml", "first.yaml")) == {"a": "first", "b": "first", "default": "unset", "user": "unset"}
    assert data_of(values_files=("values.yaml", "env/second.yaml"), values={"user": "me"}) == {"a": "default", "b": "second", "default": "yes", "user": "me"}
    assert data_of(values_files=("values.yaml",)) == {"a": "default", "b": "default", "default": "yes", "user": "unset"}
    missing = renderer.render(request(chart, values_files=("first.yaml", "env/prod.yaml")))
    assert missing == ChartRenderFailure("values", "no values file found at path 'env/prod.yaml'")


def test_ignore_missing_values_files_skips_a_missing_file_inside_the_chart(renderer: HelmRenderer, tmp_path: Path) -> None:
    # source-controller builder_remote.go mergeChartValues with ignoreMissingValuesFiles (v1.3): skipped, not failed.
    chart = write_chart(tmp_path, "miss", templates={"cm.yaml": CM.format(name="m", data="  a: {{ .Values.a | default \"unset\" | quote }}")},
                        values={"a": "default"}, files={"first.yaml": "a: first\n"})
    archive = chart_archive(chart, tmp_path / "out")
    data = objects(rendered(renderer, archive, values_files=("env/prod.yaml", "first.yaml"), ignore_missing_values_files=True))["ConfigMap/m"]["data"]
    assert data == {"a": "first"}
    # Every file missing and skipped: the merge is empty, and it still replaces the chart's values.yaml.
    data = objects(rendered(renderer, archive, values_files=("a.yaml", "b.yaml"), ignore_missing_values_files=True))["ConfigMap/m"]["data"]
    assert data == {"a": "unset"}


def test_source_values_replace_the_defaults_and_values_yaml_is_not_special(renderer: HelmRenderer, tmp_path: Path) -> None:
    # A GitRepository chart's valuesFiles come read from the source root (builder_local.go mergeFileValues).
    chart = write_chart(tmp_path, "src", templates={"cm.yaml": CM.format(name="s", data="  a: {{ .Values.a | default \"unset\" | quote }}\n  b: {{ .Values.b | default \"unset\" | quote }}")},
                        values={"a": "default", "b": "default"})
    archive = chart_archive(chart, tmp_path / "out")

    def data_of(source_values: tuple[tuple[str, str], ...]) -> dict[str, str]:
        return objects(rendered(renderer, archive, source_values=source_values, values_files=("ignored.yaml",)))["ConfigMap/s"]["data"]

    assert data_of((("values.yaml", "a: root\n"), ("envs/prod.yaml", "b: prod\n"))) == {"a": "root", "b": "prod"}
    assert data_of(()) == {"a": "unset", "b": "unset"}
    bad = renderer.render(request(archive, source_values=(("envs/bad.yaml", "a: [\n"),)))
    assert isinstance(bad, ChartRenderFailure) and bad.message.startswith("unmarshaling values from 'envs/bad.yaml' failed")


def test_the_crds_of_a_subchart_disabled_by_a_condition_or_tag_are_not_installed(renderer: HelmRenderer, tmp_path: Path) -> None:
    # helm/helm pkg/action/install.go: CRDObjects() is read after ProcessDependenciesWithMerge dropped the
    # subcharts a condition or tag disables; helm-controller's applyCRDs does the same (internal/action/crds.go).
    crd_of = lambda name: f"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {name}.example.io\n"  # noqa: E731
    gated = write_chart(tmp_path / "subs", "gated", crds={"g.yaml": crd_of("gs")}, templates={"cm.yaml": CM.format(name="gated", data="  x: y")})
    tagged = write_chart(tmp_path / "subs", "tagged", crds={"t.yaml": crd_of("ts")})
    top = write_chart(tmp_path, "top", dependencies=[gated, tagged], conditions={"gated": "gated.enabled"}, tags={"tagged": ["extras"]},
                      values={"gated": {"enabled": False}, "tags": {"extras": False}})
    archive = chart_archive(top, tmp_path / "out")
    off = rendered(renderer, archive)
    assert (off.crds, off.dependencies, objects(off)) == ((), (), {})
    on = rendered(renderer, archive, values={"gated": {"enabled": True}, "tags": {"extras": True}})
    assert [name for name, _ in on.crds] == ["top/charts/gated/crds/g.yaml", "top/charts/tagged/crds/t.yaml"]
    assert on.dependencies == ("gated", "tagged") and list(objects(on)) == ["ConfigMap/gated"]
    # The seeded second render (a chart with random functions) reads the same pruned chart.
    rand = write_chart(tmp_path, "rand", dependencies=[gated], conditions={"gated": "gated.enabled"},
                       templates={"s.yaml": CM.format(name="r", data="  p: {{ randAlphaNum 8 | quote }}")})
    assert rendered(renderer, chart_archive(rand, tmp_path / "out2"), values={"gated": {"enabled": False}}).crds == ()


def test_a_template_that_loops_times_out_within_the_bound(pool: WorkerPool, tmp_path: Path) -> None:
    # Nested: a flat `until 100000000` first builds a 100-million-item list, and is stopped by the memory bound.
    chart = write_chart(tmp_path, "loop", templates={"x.yaml": "{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}"})
    started = time.monotonic()
    result = HelmRenderer(pool, timeout=2).render(request(chart))
    assert isinstance(result, ChartRenderFailure) and result.kind == "timeout" and "2 s" in result.message
    assert time.monotonic() - started < 6
    assert rendered(HelmRenderer(pool), write_chart(tmp_path, "after", templates={"x.yaml": CM.format(name="ok", data="  a: b")})).manifests


def test_a_template_that_explodes_in_memory_is_stopped(pool: WorkerPool, tmp_path: Path) -> None:
    bomb = '{{ $a := repeat 1048576 "x" }}{{ $b := repeat 64 $a }}{{ $c := repeat 64 $b }}{{ $c }}'  # 4 GiB
    chart = write_chart(tmp_path, "bomb", templates={"x.yaml": bomb})
    result = HelmRenderer(pool, max_rss=512 * MiB, max_output=64 * MiB).render(request(chart))
    assert isinstance(result, ChartRenderFailure) and result.kind in ("memory", "output"), result
    big = write_chart(tmp_path, "big", templates={"x.yaml": '{{ repeat 8388608 "yy" }}'})  # 16 MiB, within memory
    output = HelmRenderer(pool, max_output=8 * MiB).render(request(big))
    assert output == ChartRenderFailure("output", "the chart rendered 16 MiB, over the 8 MiB limit")


def test_a_corrupt_archive_or_directory_is_a_chart_failure(renderer: HelmRenderer, tmp_path: Path) -> None:
    good = chart_archive(write_chart(tmp_path, "fine", templates={"x.yaml": CM.format(name="x", data="  a: b")}), tmp_path / "out")
    for archive in (b"not a tarball", good[: len(good) // 2]):
        result = renderer.render(request(archive))
        assert isinstance(result, ChartRenderFailure) and result.kind == "chart"
    (tmp_path / "empty").mkdir()
    nothing = renderer.render(request(tmp_path / "empty"))
    assert isinstance(nothing, ChartRenderFailure) and nothing.kind == "chart" and str(tmp_path) not in nothing.message
    assert len(nothing.message) <= 2000


def test_a_prewarmed_worker_takes_the_first_render(tmp_path: Path) -> None:
    # The first render waits for the worker being warmed instead of starting a second one.
    chart = write_chart(tmp_path, "warm", templates={"cm.yaml": CM.format(name="{{ .Release.Name }}", data="  a: b")})
    with WorkerPool(2, task_timeout=60, max_task_rss=2**30, recycle_after=1000, recycle_rss=2**30) as two:
        renderer = HelmRenderer(two)
        renderer.prewarm()
        renderer.prewarm()  # once per renderer
        result = rendered(renderer, chart)
        assert list(objects(result)) == ["ConfigMap/rel"]
        assert len(two.pids()) == 1
