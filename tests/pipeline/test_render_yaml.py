"""The YAML quirks of real repositories (shared/docs/real-world-traps.md), rendered end to end with real kustomize.

Each trap either renders, with the objects kustomize-controller would apply, or, where kustomize
itself refuses the file (so Flux fails too), ends in one `render-failed` naming the problem: never
a traceback, never a tier lost to a difference between PyYAML and Go's YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.service.cli import main
from bot.pipeline.check import check_repository
from bot.adapters.kustomize import KustomizeBinary, locate_kustomize
from bot.engine.core.model import Finding, TierId
from bot.engine.render.rendered import ClusterRender
from bot.engine.render.yamlio import load_stream
from tests.fluxrepo import crd, dump, flux_repo, kustomization, ks, write_tree
from tests.pipeline.test_render import APP, OWNER, app_repo, by_ref, render

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"


@pytest.fixture(scope="module")
def binary() -> KustomizeBinary:
    return locate_kustomize()


def failures(cr: ClusterRender) -> list[Finding]:
    return [f for f in cr.findings if f.check in ("render-failed", "unsafe-path")]


def rendered(cr: ClusterRender, tier: TierId = APP) -> dict[str, dict[str, Any]]:
    assert failures(cr) == [], failures(cr)
    assert not cr.tiers[tier].failed
    return {ref: dict(m.body) for ref, m in by_ref(cr, tier).items()}


def one_failure(cr: ClusterRender) -> Finding:
    [finding] = failures(cr)
    assert (finding.check, finding.kustomization) == ("render-failed", APP)
    assert "Traceback" not in finding.message
    return finding


# == `=`: the bjw-s-labs/home-ops kube-prometheus-stack tier =========================================

ALERTMANAGER_CONFIG = """\
apiVersion: monitoring.coreos.com/v1alpha1
kind: AlertmanagerConfig
metadata:
  name: alertmanager
spec:
  inhibitRules:
    - equal: ["alertname", "namespace"]
      sourceMatch:
        - name: severity
          value: critical
          matchType: =
      targetMatch:
        - name: severity
          value: warning
          matchType: =
"""

MATCH_TYPE_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: alertmanagerconfigs.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: AlertmanagerConfig, listKind: AlertmanagerConfigList, plural: alertmanagerconfigs, singular: alertmanagerconfig}
  scope: Namespaced
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            matchType:
              type: string
              enum:
                - =
                - "!="
                - =~
                - "!~"
"""


def test_a_bare_equals_sign_renders_and_its_crd_reaches_the_next_tier(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = flux_repo(
        {"crds": ks("crds", "./crds"), "app": ks("app", "./app", depends_on=["crds"])},
        {"crds/crd.yaml": MATCH_TYPE_CRD, "app/amc.yaml": ALERTMANAGER_CONFIG},
    )
    _, cr = render(tmp_path, files, binary)
    crds = rendered(cr, TierId("flux-system", "crds"))
    schema = crds["CustomResourceDefinition/alertmanagerconfigs.monitoring.coreos.com"]["spec"]["versions"][0]["schema"]
    assert schema["openAPIV3Schema"]["properties"]["matchType"]["enum"] == ["=", "!=", "=~", "!~"]
    amc = rendered(cr)["AlertmanagerConfig/alertmanager"]
    assert [m["matchType"] for m in amc["spec"]["inhibitRules"][0]["sourceMatch"]] == ["="]


def test_a_bare_equals_sign_after_substitution(tmp_path: Path, binary: KustomizeBinary) -> None:
    # A document with `${…}` is parsed after substitution, from its own text.
    text = ALERTMANAGER_CONFIG.replace("value: critical", "value: ${SEVERITY}")
    _, cr = render(tmp_path, app_repo({"app/amc.yaml": text}, post_build={"substitute": {"SEVERITY": "critical"}}), binary)
    rule = rendered(cr)["AlertmanagerConfig/alertmanager"]["spec"]["inhibitRules"][0]
    assert rule["sourceMatch"] == [{"name": "severity", "value": "critical", "matchType": "="}]


def test_no_check_breaks_on_it(tmp_path: Path) -> None:
    repo = write_tree(tmp_path / "repo", app_repo({"app/amc.yaml": ALERTMANAGER_CONFIG, "app/crd.yaml": MATCH_TYPE_CRD}))
    report = check_repository(repo, "dev")
    assert {t.id: (t.rendered, t.objects) for t in report.tiers}[APP] == (True, 2)
    assert [f for f in report.findings if f.check in ("render-failed", "unsafe-path")] == []


# == Scalars the way Flux decodes them (sigs.k8s.io/yaml, go-yaml v2) ================================

def test_substituted_scalars_decode_as_flux_decodes_them(tmp_path: Path, binary: KustomizeBinary) -> None:
    # kustomize-controller substitutes the text, then reads it with YAMLToJSON (fluxcd/pkg kustomize_varsub.go).
    text = (
        "apiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: t\n"
        "spec:\n  flag: ${FLAG}\n  date: ${DATE}\n  time: ${TIME}\n  octal: ${OCTAL}\n  exp: ${EXP}\n  eq: ${EQ}\n"
    )
    variables = {"FLAG": "y", "DATE": "2024-01-31", "TIME": "1:30", "OCTAL": "0o17", "EXP": "1e3", "EQ": "="}
    _, cr = render(tmp_path, app_repo({"app/t.yaml": text}, post_build={"substitute": variables}), binary)
    spec = rendered(cr)["Thing/t"]["spec"]
    assert spec == {"flag": True, "date": "2024-01-31", "time": "1:30", "octal": 15, "exp": 1000.0, "eq": "="}


def test_yaml_1_1_words_in_a_resource_file_stay_strings(tmp_path: Path, binary: KustomizeBinary) -> None:
    # kustomize reads resource files with go-yaml v3 (`yes`, `y`, `on` are strings) and quotes them on output.
    text = CM.format(name="words") + "data:\n  a: yes\n  b: y\n  c: on\n  d: 1:30\n  e: 2001-12-14\n  y: key\n"
    _, cr = render(tmp_path, app_repo({"app/cm.yaml": text}), binary)
    assert rendered(cr)["ConfigMap/words"]["data"] == {"a": "yes", "b": "y", "c": "on", "d": "1:30", "e": "2001-12-14T00:00:00Z", "y": "key"}


def test_an_image_tag_that_looks_like_a_number_in_the_spec(tmp_path: Path, binary: KustomizeBinary) -> None:
    # The kustomization file Fluxwarden writes must say "1234e56" as a string, or kustomize reads a float and fails.
    deploy = dump({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx"}, {"name": "d", "image": "busybox"}]}}},
    })
    files = app_repo({"app/d.yaml": deploy})
    # Written by hand: the tags quoted, as a user must (PyYAML's dumper would leave them plain).
    files["clusters/dev/app.yaml"] = files["clusters/dev/app.yaml"] + (
        "  images:\n  - name: nginx\n    newTag: \"1234e56\"\n  - name: busybox\n    newTag: '0123458'\n"
    )
    _, cr = render(tmp_path, files, binary)
    containers = rendered(cr)["Deployment/web"]["spec"]["template"]["spec"]["containers"]
    assert [c["image"] for c in containers] == ["nginx:1234e56", "busybox:0123458"]


def test_a_generated_kustomization_listing_a_directory_named_like_a_boolean(tmp_path: Path, binary: KustomizeBinary) -> None:
    # Flux writes its generated kustomization.yaml with sigs.k8s.io/yaml, which quotes `y`; so must we.
    files = app_repo({"app/y/kustomization.yaml": kustomization("cm.yaml"), "app/y/cm.yaml": CM.format(name="in-y"), "app/top.yaml": CM.format(name="top")})
    _, cr = render(tmp_path, files, binary)
    assert set(rendered(cr)) == {"ConfigMap/in-y", "ConfigMap/top"}


def test_build_output_reads_back_as_flux_applies_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `fluxwarden build | kubectl apply -f -`: kubectl reads it with go-yaml v2, so `y` must stay quoted.
    data = {"yes-no": "y", "exponent": "1e3", "leading-zero": "0123458", "eq": "=", "on": "on", "date": "2001-12-14"}
    text = CM.format(name="c") + "data:\n" + "".join(f"  {k}: '{v}'\n" for k, v in data.items())  # quoted, as a user writes them
    repo = write_tree(tmp_path / "repo", app_repo({"app/cm.yaml": text}))
    assert main(["build", "--repo", str(repo), "--cluster", "dev", "--tier", "app", "--no-cache"]) == 0
    [body] = [d for d in load_stream(capsys.readouterr().out) if d]
    assert body["data"] == data


def test_a_yaml_1_1_boolean_in_a_kustomization_file_fails_as_in_kustomize(tmp_path: Path, binary: KustomizeBinary) -> None:
    # kustomize decodes kustomization.yaml with go-yaml v2: `y` is a bool there, and a label must be a string.
    files = app_repo({"app/kustomization.yaml": "resources: [cm.yaml]\ncommonLabels: {enabled: y}\n", "app/cm.yaml": CM.format(name="c")})
    _, cr = render(tmp_path, files, binary)
    assert "cannot unmarshal bool" in one_failure(cr).message


# == Tags =================================================================================================

def test_custom_tags_in_resources_and_kustomization(tmp_path: Path, binary: KustomizeBinary) -> None:
    cm = "--- !configmap\n" + CM.format(name="tagged") + "data:\n  secret: !secret db_password\n  home: !env_var HOME\n"
    files = app_repo({
        "app/kustomization.yaml": "resources: [!include cm.yaml]\nnamePrefix: !env_var x-\n",
        "app/cm.yaml": cm,
        # Home Assistant style configuration kustomize never reads: harmless, never parsed.
        "app/config/configuration.yaml": "homeassistant:\n  name: !secret home_name\nhttp: !include http.yaml\n",
    })
    renderer, cr = render(tmp_path, files, binary)
    objects = by_ref(cr)
    assert rendered(cr)["ConfigMap/x-tagged"]["data"] == {"secret": "db_password", "home": "HOME"}
    assert renderer.locate(objects["ConfigMap/x-tagged"]).line == 1


def test_custom_tags_in_fluxwarden_yaml(tmp_path: Path, binary: KustomizeBinary) -> None:
    config = ".fluxwarden.yaml"
    files = app_repo({"app/cm.yaml": CM.format(name="c"), config: "clusters:\n  dev: !path clusters/dev\nruntime_crds: !list []\n"})
    repo = write_tree(tmp_path / "repo", files)
    report = check_repository(repo, "dev")
    assert report.entry == "clusters/dev"
    assert {t.id: (t.rendered, t.objects) for t in report.tiers}[APP] == (True, 1)
    assert [f for f in report.findings if f.check in ("render-failed", "unsafe-path")] == []


# == Anchors, merge keys, duplicate keys ==================================================================

def test_a_redefined_anchor_renders_and_is_still_vetted(tmp_path: Path, binary: KustomizeBinary) -> None:
    text = CM.format(name="&n first") + "  labels:\n    a: *n\n    b: &n second\n    c: *n\n" + "data: {<<: &d {x: '1'}, y: '2'}\n"
    kust = "resources: [&f cm.yaml]\nnamePrefix: &p p-\nnameSuffix: &p -s\ncommonAnnotations: {suffix: *p}\n"
    renderer, cr = render(tmp_path, app_repo({"app/kustomization.yaml": kust, "app/cm.yaml": text}), binary)
    body = rendered(cr)["ConfigMap/p-first-s"]
    assert body["metadata"]["labels"] == {"a": "first", "b": "second", "c": "second", **OWNER}
    assert body["metadata"]["annotations"] == {"suffix": "-s"}
    assert body["data"] == {"x": "1", "y": "2"}
    assert renderer.locate(by_ref(cr)["ConfigMap/p-first-s"]).line == 1


def test_an_alias_bomb_behind_a_redefined_anchor_is_refused(tmp_path: Path, binary: KustomizeBinary) -> None:
    bomb = CM.format(name="bomb") + "data:\n  r: &a [x]\n  r2: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"  {chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(7)
    )
    _, cr = render(tmp_path, app_repo({"app/bomb.yaml": bomb}), binary)
    [finding] = failures(cr)
    assert "alias" in finding.message


def test_merge_keys_in_a_resource(tmp_path: Path, binary: KustomizeBinary) -> None:
    text = CM.format(name="m") + "  labels: &l\n    team: web\n  annotations:\n    <<: *l\n    extra: 'yes'\n"
    _, cr = render(tmp_path, app_repo({"app/m.yaml": text}), binary)
    assert rendered(cr)["ConfigMap/m"]["metadata"]["annotations"] == {"team": "web", "extra": "yes"}


def test_a_duplicate_key_in_a_resource_fails_as_in_kustomize(tmp_path: Path, binary: KustomizeBinary) -> None:
    # kustomize reads resources with go-yaml v3, which refuses a key defined twice; Flux fails the same way.
    text = CM.format(name="dup") + "data:\n  a: '1'\n  a: '2'\n"
    _, cr = render(tmp_path, app_repo({"app/kustomization.yaml": kustomization("ok.yaml", "dup.yaml"), "app/ok.yaml": CM.format(name="ok"), "app/dup.yaml": text}), binary)
    finding = one_failure(cr)
    assert 'mapping key "a" already defined' in finding.message
    assert finding.message.endswith("(in app/dup.yaml, line 7)")
    assert (finding.location.file, finding.location.line) == ("app/dup.yaml", 7)


def test_a_duplicate_key_in_a_kustomization_file_last_wins(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = app_repo({"app/kustomization.yaml": "resources: [gone.yaml]\nresources: [cm.yaml]\nnamePrefix: a-\nnamePrefix: b-\n", "app/cm.yaml": CM.format(name="c")})
    _, cr = render(tmp_path, files, binary)
    assert set(rendered(cr)) == {"ConfigMap/b-c"}


# == Text: comments, empty documents, CRLF, BOM, tabs, block scalars, size ================================

def test_comments_and_empty_documents(tmp_path: Path, binary: KustomizeBinary) -> None:
    text = (
        "# yaml-language-server: $schema=https://example.invalid/configmap.json\n---\n"  # 1-2
        "# only a comment\n---\n---\n"  # 3-5
        + CM.format(name="one")  # 6-9
        + "---\n# trailing document of comments only\n---\n"  # 10-12
        + CM.format(name="two")  # 13-16
        + "...\n"
    )
    files = app_repo({"app/cm.yaml": text, "app/empty.yaml": "", "app/comments.yaml": "# nothing yet\n", "app/dash.yaml": "---\n"})
    renderer, cr = render(tmp_path, files, binary)
    assert set(rendered(cr)) == {"ConfigMap/one", "ConfigMap/two"}
    objects = by_ref(cr)
    assert [renderer.locate(objects[r]).line for r in ("ConfigMap/one", "ConfigMap/two")] == [6, 13]


def test_an_end_marker_before_a_last_separator_fails_as_in_kustomize(tmp_path: Path, binary: KustomizeBinary) -> None:
    # Valid YAML that go-yaml v3 refuses ("did not find expected node content"): kustomize, and so Flux, fail.
    _, cr = render(tmp_path, app_repo({"app/cm.yaml": CM.format(name="c") + "---\n...\n"}), binary)
    assert "did not find expected node content" in one_failure(cr).message


def test_crlf_and_byte_order_marks_everywhere(tmp_path: Path, binary: KustomizeBinary) -> None:
    def crlf(text: str) -> bytes:
        return ("\ufeff" + text).replace("\n", "\r\n").encode()

    stream = "# yaml-language-server: $schema=x\n---\n" + CM.format(name="first") + "---\n\ufeff" + CM.format(name="second")
    raw = {
        "app/kustomization.yaml": crlf("resources:\n- cm.yaml\nnamePrefix: x-\n"),
        "app/cm.yaml": crlf(stream),
        "clusters/dev/kustomization.yaml": crlf(kustomization("app.yaml")),
    }
    renderer, cr = render(tmp_path, app_repo({}), binary, raw=raw)
    assert set(rendered(cr)) == {"ConfigMap/x-first", "ConfigMap/x-second"}
    objects = by_ref(cr)
    assert [renderer.locate(objects[r]).line for r in ("ConfigMap/x-first", "ConfigMap/x-second")] == [3, 8]


def test_a_tag_on_the_document_marker(tmp_path: Path, binary: KustomizeBinary) -> None:
    # go-yaml reads `--- !tag` on a file's first line; kyaml's splitter refuses it anywhere else, and so does Flux.
    renderer, cr = render(tmp_path, app_repo({"app/cm.yaml": "--- !configmap\n" + CM.format(name="tagged")}), binary)
    assert set(rendered(cr)) == {"ConfigMap/tagged"}
    assert renderer.locate(by_ref(cr)["ConfigMap/tagged"]).line == 1

    later = CM.format(name="one") + "--- !configmap\n" + CM.format(name="two")
    _, cr = render(tmp_path / "later", app_repo({"app/cm.yaml": later}), binary)
    assert "invalid document separator: --- !configmap" in one_failure(cr).message


def test_tabs(tmp_path: Path, binary: KustomizeBinary) -> None:
    ok = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name:\ttabbed\ndata:\n  a: \"x\\ty\"\n  b: \"x\ty\"\n"
    _, cr = render(tmp_path, app_repo({"app/ok.yaml": ok}), binary)
    assert rendered(cr)["ConfigMap/tabbed"]["data"] == {"a": "x\ty", "b": "x\ty"}

    indented = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n\tname: bad\n"
    _, cr = render(tmp_path / "indent", app_repo({"app/bad.yaml": indented}), binary)
    finding = one_failure(cr)
    assert "bad.yaml" in finding.message and "line 4" in finding.message


@pytest.mark.parametrize(
    "text,problem",
    [
        ("resources:\n\t- cm.yaml\n", "found character that cannot start any token (line 2)"),
        ("resources: [cm.yaml]\nnamePrefix: !!int x-\n", "cannot decode 'x-' as an int (line 2)"),
    ],
    ids=["tab-indent", "impossible-core-tag"],
)
def test_a_kustomization_file_kustomize_cannot_read(tmp_path: Path, binary: KustomizeBinary, text: str, problem: str) -> None:
    # Not a safety problem: kustomize refuses it too, so the tier fails to build, as in Flux.
    _, cr = render(tmp_path, app_repo({"app/kustomization.yaml": text, "app/cm.yaml": CM.format(name="c")}), binary)
    finding = one_failure(cr)
    assert finding.message == f"app/kustomization.yaml: the file is not valid YAML: {problem}"
    assert finding.location.file == "app/kustomization.yaml"


def test_document_markers_inside_a_block_scalar(tmp_path: Path, binary: KustomizeBinary) -> None:
    block = CM.format(name="multi") + "data:\n  bundle.yaml: |\n    ---\n    kind: Inner\n    ---\n    # c\n" + "---\n" + CM.format(name="after")
    renderer, cr = render(tmp_path, app_repo({"app/cm.yaml": block}), binary)
    objects = rendered(cr)
    assert objects["ConfigMap/multi"]["data"] == {"bundle.yaml": "---\nkind: Inner\n---\n# c\n"}
    assert renderer.locate(by_ref(cr)["ConfigMap/after"]).line == 12


def test_a_large_crd_bundle(tmp_path: Path, binary: KustomizeBinary) -> None:
    # kube-prometheus-stack's CRDs are several MiB in a handful of files.
    big = crd("example.com", "Big", "bigs")
    big["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = {
        "type": "object",
        "properties": {f"field{i}": {"type": "string", "description": "d" * 1_500, "enum": ["=", "!=", f"v{i}"]} for i in range(1_500)},
    }
    text = dump(big) + "---\n" + "---\n".join(CM.format(name=f"cm-{i}") + f"data:\n  long: {'x' * 50_000}\n" for i in range(20))
    assert len(text) > 3_000_000
    _, cr = render(tmp_path, app_repo({"app/crds.yaml": text}), binary)
    objects = rendered(cr)
    assert len(objects) == 21 and len(objects["ConfigMap/cm-19"]["data"]["long"]) == 50_000
    props = objects["CustomResourceDefinition/bigs.example.com"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    assert len(props) == 1_500 and props["field5"]["enum"] == ["=", "!=", "v5"]
