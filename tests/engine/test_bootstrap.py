"""The bootstrap model: what a repository installs before Flux's first reconcile, read from its files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.engine.tiergraph.bootstrap import Bootstrap, bootstrap_findings, discover_bootstrap, parse_helmfile, untemplate
from bot.service.cli import main
from bot.engine.render.config import BootstrapConfig, load_repo_config, snapshot_config
from bot.pipeline.check import CheckOptions, check_repository, render_repository
from bot.engine.core.errors import ConfigError
from bot.engine.core.model import Severity, TierId
from bot.adapters.cache import BuildCache
from bot.adapters.kustomize import locate_kustomize
from bot.adapters.workspace import GitTree, Snapshot
from bot.pipeline.memo import FindingsMemo
from tests.fluxrepo import dump, flux_repo, kustomization, ks, obj, write_tree


def helmrelease(name: str, namespace: str, chart: str) -> dict:
    return obj(
        "helm.toolkit.fluxcd.io/v2", "HelmRelease", name, namespace,
        spec={"interval": "1h", "chart": {"spec": {"chart": chart, "sourceRef": {"kind": "HelmRepository", "name": "charts"}}}},
    )


# The cluster's HelmReleases in git: cert-manager, kube-prometheus-stack, flux-operator, flux-instance.
INFRA = dump(
    helmrelease("cert-manager", "cert-manager", "cert-manager"),
    helmrelease("kube-prometheus-stack", "observability", "kube-prometheus-stack"),
    helmrelease("flux-operator", "flux-system", "flux-operator"),
    helmrelease("flux-instance", "flux-system", "flux-instance"),
)


def repo(tmp_path: Path, extra: dict[str, str]) -> Path:
    files = flux_repo(
        {"infra": ks("infra", "./infra"), "apps": ks("apps", "./apps", depends_on=["infra"], wait=True)},
        {
            "infra/kustomization.yaml": kustomization("releases.yaml"),
            "infra/releases.yaml": INFRA,
            "apps/kustomization.yaml": kustomization("cm.yaml"),
            "apps/cm.yaml": dump(obj("v1", "ConfigMap", "c", "default")),
            **extra,
        },
    )
    return write_tree(tmp_path / "repo", files)


def discover(root: Path) -> Bootstrap:
    with render_repository(root, "dev") as built:
        snapshot = built.render.snapshot
        return discover_bootstrap(snapshot, snapshot_config(snapshot), built.render)


def descriptions(bootstrap: Bootstrap) -> list[str]:
    return [e.description for e in bootstrap.entries]


APPS_HELMFILE = """
    helmDefaults:
      wait: true
    releases:
      - name: cert-manager
        namespace: cert-manager
        chart: oci://quay.io/jetstack/charts/cert-manager
      - name: external-secrets      # no HelmRelease in git: its chart's CRDs still count
        namespace: external-secrets
        chart: external-secrets/external-secrets
      - name: flux-operator
        namespace: flux-system
        chart: oci://ghcr.io/controlplaneio-fluxcd/charts/flux-operator
      - name: flux-instance
        namespace: flux-system
        chart: oci://ghcr.io/controlplaneio-fluxcd/charts/flux-instance
      - name: disabled
        namespace: default
        chart: x/disabled
        installed: false
"""


def test_plain_helmfile_in_bootstrap_dir(tmp_path: Path) -> None:
    found = discover(repo(tmp_path, {"bootstrap/helmfile.yaml": APPS_HELMFILE}))
    assert found.releases == {("cert-manager", "cert-manager"), ("flux-system", "flux-operator"), ("flux-system", "flux-instance")}
    assert found.crd_releases == frozenset()
    assert found.crd_charts == {"external-secrets"}  # matched to the knowledge base's chart
    kinds = [e.kind for e in found.entries]
    assert kinds == ["release", "flux-instance"]
    release = found.entries[0]
    assert release.source == "bootstrap/helmfile.yaml"
    assert release.description.startswith("4 releases from bootstrap/helmfile.yaml (cert-manager/cert-manager, external-secrets/external-secrets,")
    assert "no HelmRelease in git for external-secrets (chart external-secrets)" in release.description
    assert "run by no script found" in release.description
    assert "FluxInstance from release flux-system/flux-instance" in found.entries[1].description


CRDS_HELMFILE = """
    helmDefaults:
      args: [--include-crds, --no-hooks]
    releases:
      - name: kube-prometheus-stack
        namespace: observability
        chart: oci://ghcr.io/prometheus-community/charts/kube-prometheus-stack
      - name: keda
        namespace: keda
        chart: kedacore/keda
"""


@pytest.mark.parametrize(
    "script, text",
    [
        (
            "bootstrap/mod.just",
            """
            crds:
                helmfile -f "{{ source_directory() }}/helmfile/crds.yaml" template -q | yq ea -e 'select(.kind == "CustomResourceDefinition")' \\
                    | kubectl apply --server-side -f -
            apps:
                @helmfile -f "{{ source_directory() }}/helmfile/apps.yaml" sync --hide-notes
            """,
        ),
        (
            "Taskfile.yaml",
            """
            version: "3"
            tasks:
              bootstrap:
                cmds:
                  - |
                    helmfile --file {{.ROOT_DIR}}/bootstrap/helmfile/crds.yaml template | yq 'select(.kind == "CustomResourceDefinition")' | kubectl apply -f -
                  - helmfile --file {{.ROOT_DIR}}/bootstrap/helmfile/apps.yaml apply
            """,
        ),
        (
            "scripts/bootstrap.sh",
            """
            #!/usr/bin/env bash
            set -euo pipefail
            ROOT="$(git rev-parse --show-toplevel)"
            helmfile --file "${ROOT}/bootstrap/helmfile/crds.yaml" template --quiet |
              yq eval-all 'select(.kind == "CustomResourceDefinition")' - | kubectl apply --server-side -f -
            helmfile --file "${ROOT}/bootstrap/helmfile/apps.yaml" sync
            """,
        ),
    ],
)
def test_crd_only_helmfile_read_from_the_script_that_runs_it(tmp_path: Path, script: str, text: str) -> None:
    # Named apps.yaml/crds.yaml in a `helmfile` directory, as bjw-s-labs/home-ops and its kind do.
    crds = CRDS_HELMFILE.replace("args: [--include-crds, --no-hooks]", "wait: true")  # the script alone says CRD-only
    found = discover(repo(tmp_path, {"bootstrap/helmfile/crds.yaml": crds, "bootstrap/helmfile/apps.yaml": APPS_HELMFILE, script: text}))
    assert found.crd_releases == {("observability", "kube-prometheus-stack")}
    assert found.crd_charts == {"keda", "external-secrets"}
    assert ("cert-manager", "cert-manager") in found.releases
    assert all(f"run by {script}" in e.description for e in found.entries if e.kind == "release")
    crd_entry = next(e for e in found.entries if e.kind == "crd-release")
    assert crd_entry.source == "bootstrap/helmfile/crds.yaml"
    assert crd_entry.description.startswith("2 CRD-only releases from bootstrap/helmfile/crds.yaml (observability/kube-prometheus-stack, keda/keda)")
    assert f"run by {script}" in crd_entry.description


def test_script_sync_wins_over_crd_flags(tmp_path: Path) -> None:
    """`--include-crds` marks a CRD helmfile only when no script says otherwise: one that syncs it installs everything."""
    found = discover(repo(tmp_path, {
        "bootstrap/crds/helmfile.yaml": CRDS_HELMFILE,
        "bootstrap/run.sh": "helmfile -f bootstrap/crds/helmfile.yaml sync\n",
    }))
    assert found.releases == {("observability", "kube-prometheus-stack")}
    assert found.crd_releases == frozenset()


def test_include_crds_without_a_script(tmp_path: Path) -> None:
    found = discover(repo(tmp_path, {"bootstrap/crds/helmfile.yaml": CRDS_HELMFILE}))
    assert found.crd_releases == {("observability", "kube-prometheus-stack")}
    assert found.releases == frozenset()
    assert "its helmDefaults.args carry --include-crds" in found.entries[0].description


def test_helmfile_d_directory(tmp_path: Path) -> None:
    found = discover(repo(tmp_path, {
        "helmfile.d/00-crds.yaml": CRDS_HELMFILE,
        "helmfile.d/10-apps.yaml": APPS_HELMFILE,
        "Makefile": "bootstrap:\n\thelmfile -f helmfile.d sync\n",
    }))
    # Both are synced by the Makefile: everything installed, CRD flags or not.
    assert {("observability", "kube-prometheus-stack"), ("cert-manager", "cert-manager")} <= found.releases
    assert [e.source for e in found.entries if e.kind == "release"] == ["helmfile.d/00-crds.yaml", "helmfile.d/10-apps.yaml"]


GOTMPL = """
    {{- $env := .Environment.Name }}
    helmDefaults:
      wait: true
      timeout: {{ .Values.timeout | default 600 }}
    templates:
      default:
        chart: '{{ (fromYaml (readFile "./templates/release.yaml.gotmpl")).chart }}'
        values: ["./templates/values.yaml.gotmpl"]
    releases:
      - name: cert-manager
        namespace: cert-manager
        inherit: [{template: default}]
    {{- if eq $env "prod" }}
      - name: kube-prometheus-stack
        namespace: observability
        chart: prometheus-community/kube-prometheus-stack
    {{- end }}
    {{- range $app := list "a" "b" }}
      - name: {{ $app }}
        namespace: {{ $app }}
    {{- end }}
      - name: spegel
        namespace: kube-system
        chart: '{{ .Values.chart }}'
"""


def test_gotmpl_left_unrendered(tmp_path: Path) -> None:
    found = discover(repo(tmp_path, {"bootstrap/helmfile.yaml.gotmpl": GOTMPL}))
    # Both branches of an `if` are read; a templated chart with no HelmRelease in git and an unknown release name counts for nothing.
    assert found.releases == {("cert-manager", "cert-manager"), ("observability", "kube-prometheus-stack")}
    assert found.crd_charts == {"spegel"}  # templated chart, but the release name is a chart the knowledge base knows
    entry = found.entries[0]
    assert "1 release with a templated name not read" in entry.description


def test_untemplate_keeps_yaml_shape() -> None:
    text = "a: 1\n{{- if x }}\nb: '{{ .Values.y }}'\n{{ end }}\nc: {{ .z\n  | default 1 }}\n"
    assert untemplate(text) == "a: 1\nb: '__fluxwarden_template__'\nc: __fluxwarden_template__"


def test_bases_and_hooks(tmp_path: Path) -> None:
    """`bases:` bring templates; a release hook that `kubectl apply`s a repo path makes those objects present."""
    found = discover(repo(tmp_path, {
        "kubernetes/bootstrap/helmfile/default.yaml": "templates:\n  default:\n    chart: '{{ .Release.Name }}'\n",
        "kubernetes/bootstrap/helmfile/apps.yaml": """
            bases: [default.yaml]
            releases:
              - name: cert-manager
                namespace: cert-manager
                inherit: [{template: default}]
                hooks:
                  - command: kubectl
                    args: [apply, --server-side, --kustomize=../../../infra/]
                    events: [postsync]
                  - command: kubectl
                    args: [apply, -f, ../missing.yaml]
                    events: [postsync]
        """,
    }))
    assert found.releases == {("cert-manager", "cert-manager")}
    assert found.manifests == ("infra",)
    assert any(e.kind == "manifests" and "infra" in e.description for e in found.entries)


def test_helmfile_outside_bootstrap_not_counted(tmp_path: Path) -> None:
    found = discover(repo(tmp_path, {"tools/dev/helmfile.yaml": CRDS_HELMFILE.replace("args: [--include-crds, --no-hooks]", "wait: true")}))
    assert found.empty
    assert descriptions(found) == ["helmfile tools/dev/helmfile.yaml not counted: no script runs it and it is not in a bootstrap directory"]


@pytest.mark.parametrize("text", ["releases: [\n  - name: x\n", "{{ if }}\nreleases:\n  - name: a\n  namespace: {oops\n", "releases:\n  - name: a\n\tnamespace: b\n"])
def test_malformed_helmfile_is_an_info_line(tmp_path: Path, text: str) -> None:
    root = repo(tmp_path, {"bootstrap/helmfile.yaml": text})
    found = discover(root)
    assert found.empty
    assert [e.kind for e in found.entries] == ["unread"]
    assert found.entries[0].description.startswith("helmfile bootstrap/helmfile.yaml not read (")
    report = check_repository(root, "dev")
    infos = [f for f in report.findings if f.check == "bootstrap"]
    assert len(infos) == 1 and infos[0].severity is Severity.INFO


def test_script_applies_paths_and_crd_urls(tmp_path: Path) -> None:
    found = discover(repo(tmp_path, {
        "bootstrap/kustomize/kustomization.yaml": kustomization("secret.yaml"),
        "bootstrap/kustomize/secret.yaml": dump(obj("v1", "Secret", "s", "flux-system")),
        "bootstrap/mod.just": """
            base:
                kustomize build {{ source_directory() }}/kustomize | just template - | kubectl apply --server-side -f -
                for dir in apps/*/; do kustomize build "$dir" | yq 'select(.kind == "Namespace")' | kubectl apply -f -; done
            crds:
                #!/usr/bin/env bash
                crds=(
                    "https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.4.0/standard-install.yaml"
                    "https://github.com/prometheus-operator/prometheus-operator/releases/download/v0.87.1/stripped-down-crds.yaml"
                    "https://example.com/other.yaml"
                )
                for crd in "${crds[@]}"; do kubectl apply --server-side -f "$crd"; done
        """,
    }))
    assert found.manifests == ("bootstrap/kustomize",)
    assert ("gateway.networking.k8s.io", "HTTPRoute") in found.crds
    assert ("gateway.networking.k8s.io", "TCPRoute") not in found.crds  # standard, not experimental
    assert found.crd_charts == {"prometheus-operator-crds"}
    assert "1 manifest URL applied by bootstrap/mod.just not read (remote: other.yaml)" in " ".join(descriptions(found))


STANDUP = """
    #!/usr/bin/env bash
    TIER_ORDER=(
      infra
      apps
    )
    cmd_suspend() {
      for (( i=${#TIER_ORDER[@]}-1; i>=0; i-- )); do flux suspend kustomization "${TIER_ORDER[i]}"; done
    }
    cmd_resume() {
      for tier in "${TIER_ORDER[@]}"; do
        flux resume kustomization "$tier" --wait=false
        kubectl -n flux-system wait "kustomization/$tier" \\
          --for=condition=Ready --timeout=20m
      done
    }
"""


def test_tier_order_script(tmp_path: Path) -> None:
    config = ".fluxwarden.yaml"
    found = discover(repo(tmp_path, {"bootstrap/standup.sh": STANDUP, config: "tier_order: {file: bootstrap/standup.sh, variable: TIER_ORDER}\n"}))
    assert found.tier_order == (TierId("flux-system", "infra"), TierId("flux-system", "apps"))
    assert descriptions(found) == ["bootstrap/standup.sh applies 2 tiers one by one, each Ready before the next: infra → apps"]


def test_tier_order_that_only_suspends_orders_nothing(tmp_path: Path) -> None:
    script = STANDUP.split("cmd_resume")[0]
    found = discover(repo(tmp_path, {"bootstrap/standup.sh": script, ".fluxwarden.yaml": "tier_order: {file: bootstrap/standup.sh, variable: TIER_ORDER}\n"}))
    assert found.tier_order == ()
    assert found.entries[0].kind == "unread"


def test_k3s_and_talos(tmp_path: Path) -> None:
    crd = obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.com", spec={"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"}})
    talos_patch = {
        "cluster": {
            "inlineManifests": [{"name": "crds", "contents": dump(crd, obj("v1", "Namespace", "tools"))}],
            "extraManifests": ["https://example.com/a.yaml"],
        }
    }
    found = discover(repo(tmp_path, {"ansible/roles/k3s/defaults/main.yml": "k3s_version: v1.31\n", "talos/patches/cluster.yaml": dump(talos_patch)}))
    assert found.crds == {("helm.cattle.io", "HelmChart"), ("helm.cattle.io", "HelmChartConfig"), ("example.com", "Widget")}
    text = " ".join(descriptions(found))
    assert "k3s/RKE2 (seen in ansible/roles/k3s/defaults/main.yml)" in text
    assert "2 objects in Talos inlineManifests of talos/patches/cluster.yaml (CustomResourceDefinition, Namespace)" in text
    assert "1 Talos extraManifests URL in talos/patches/cluster.yaml not read" in text


def test_nothing_shown_nothing_assumed(tmp_path: Path) -> None:
    found = discover(repo(tmp_path, {}))
    assert found == Bootstrap()


# -- declared ---------------------------------------------------------------------------------


def test_declared(tmp_path: Path) -> None:
    config = """
        bootstrap:
          helmreleases: [cert-manager/cert-manager, kube-system/cilium]
          crds: [cert-manager.io/ClusterIssuer]
          manifests: [./apps, bootstrap/gone]
    """
    found = discover(repo(tmp_path, {".fluxwarden.yaml": config}))
    assert found.releases == {("cert-manager", "cert-manager"), ("kube-system", "cilium")}
    assert found.crds == {("cert-manager.io", "ClusterIssuer")}
    assert found.manifests == ("apps",)
    assert descriptions(found) == [
        "2 HelmReleases declared installed before Flux: cert-manager/cert-manager, kube-system/cilium (kube-system/cilium not in this cluster's render)",
        "1 CRD declared present before Flux: cert-manager.io/ClusterIssuer",
        "2 paths declared applied before Flux: apps, bootstrap/gone (bootstrap/gone not in the repository: ignored)",
    ]
    assert all(e.source == ".fluxwarden.yaml" for e in found.entries)


def test_declared_config_parsed() -> None:
    config = load_repo_config("bootstrap: {helmreleases: [a/b], crds: [example.com/Widget], manifests: [/x/]}\n")
    assert config.bootstrap == BootstrapConfig(("a/b",), ("example.com/Widget",), ("x",))
    assert load_repo_config("bootstrap:\n") .bootstrap == BootstrapConfig()


@pytest.mark.parametrize(
    "text, message",
    [
        ("bootstrap: [a]", "`bootstrap` must be a mapping of `helmreleases`, `crds`, `manifests` and `namespaces`"),
        ("bootstrap: {charts: [a]}", "`bootstrap` must be a mapping"),
        ("bootstrap: {helmreleases: cert-manager}", "`bootstrap`.helmreleases must be a list of strings"),
        ("bootstrap: {helmreleases: [cert-manager]}", "'cert-manager' is not `namespace/name` of a HelmRelease"),
        ("bootstrap: {crds: [ClusterIssuer]}", "'ClusterIssuer' is not `group/Kind`"),
        ("bootstrap: {crds: [cert-manager.io/v1/ClusterIssuer]}", "is not `group/Kind`"),
        ("bootstrap: {manifests: [../outside]}", "'../outside' climbs out of the repository"),
    ],
)
def test_declared_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        load_repo_config(text)
    assert message in str(info.value)


# -- engine ------------------------------------------------------------------------------------


def test_check_prints_info_lines_and_keeps_the_model_on_the_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    from bot.engine.reporting import verdict  # `cluster_findings` runs the checks

    real = verdict.run_checks
    monkeypatch.setattr(verdict, "run_checks", lambda ctx: seen.append(ctx.bootstrap) or real(ctx))
    root = repo(tmp_path, {"bootstrap/helmfile.yaml": APPS_HELMFILE})
    report = check_repository(root, "dev")
    lines = [f for f in report.findings if f.check == "bootstrap"]
    assert [f.severity for f in lines] == [Severity.INFO, Severity.INFO]
    assert lines[0].message.startswith("bootstrap: 4 releases from bootstrap/helmfile.yaml")
    assert str(lines[0].location) == "bootstrap/helmfile.yaml"
    assert seen[0].releases == {("cert-manager", "cert-manager"), ("flux-system", "flux-operator"), ("flux-system", "flux-instance")}
    bare = check_repository(root, "dev", CheckOptions(bootstrap=False))
    assert [f.message for f in bare.findings if f.check == "bootstrap"] == [
        "bootstrap: not read (--no-bootstrap): a bare cluster is judged, only Flux and built-in APIs present"
    ]
    assert seen[1] == Bootstrap()


def test_bootstrap_findings_one_per_entry() -> None:
    assert bootstrap_findings(Bootstrap()) == []


def test_no_bootstrap_is_in_the_findings_key(tmp_path: Path) -> None:
    snapshot = Snapshot(tmp_path, (), tree=GitTree("a" * 40, {}, set(), lambda oid: b"", tmp_path))
    binary = locate_kustomize(None)
    config = load_repo_config(None)
    cache = BuildCache(tmp_path / "cache")
    keys = {FindingsMemo.of(cache, snapshot, config, "dev", binary, flag).key for flag in (True, False)}
    assert len(keys) == 2
    declared = load_repo_config("bootstrap: {crds: [example.com/Widget]}")
    assert FindingsMemo.of(cache, snapshot, declared, "dev", binary, True).key not in keys  # the declared bootstrap is in the config digest


def test_cli_no_bootstrap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = repo(tmp_path, {"bootstrap/helmfile.yaml": APPS_HELMFILE})
    main(["check", "--repo", str(root), "--cluster", "dev", "--no-cache", "--format", "json", "--no-bootstrap"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [f["message"] for f in findings if f["check"] == "bootstrap"][0].startswith("bootstrap: not read (--no-bootstrap)")
    main(["check", "--repo", str(root), "--cluster", "dev", "--no-cache", "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert len([f for f in findings if f["check"] == "bootstrap"]) == 2


def test_parse_helmfile_release_defaults(tmp_path: Path) -> None:
    write_tree(tmp_path, {"h.yaml": "releases:\n  - name: a\n    chart: x/a\n---\nreleases:\n  - name: b\n    namespace: ns\n"})
    parsed = parse_helmfile(Snapshot(tmp_path, ()), "h.yaml")
    assert [(r.namespace, r.name, r.chart) for r in parsed.releases] == [("default", "a", "x/a"), ("ns", "b", None)]


def test_each_cluster_reads_its_own_bootstrap(tmp_path: Path) -> None:
    """kubernetes/<cluster>/bootstrap belongs to that cluster; a bootstrap at the root serves every cluster."""
    files = {}
    for cluster in ("main", "staging"):
        files.update({
            f"kubernetes/{cluster}/flux/cluster/kustomization.yaml": kustomization("infra.yaml"),
            f"kubernetes/{cluster}/flux/cluster/infra.yaml": dump(ks("infra", f"./kubernetes/{cluster}/infra")),
            f"kubernetes/{cluster}/infra/kustomization.yaml": kustomization("releases.yaml"),
            f"kubernetes/{cluster}/infra/releases.yaml": INFRA,
            f"kubernetes/{cluster}/bootstrap/helmfile.yaml": f"releases:\n  - {{name: cert-manager, namespace: cert-manager, chart: x/cert-manager}}\n  - {{name: {cluster}-only, namespace: x, chart: x/keda}}\n",
        })
    files["bootstrap/helmfile.yaml"] = "releases:\n  - {name: kube-prometheus-stack, namespace: observability, chart: x/kube-prometheus-stack}\n"
    files[".fluxwarden.yaml"] = "clusters:\n  main: {path: kubernetes/main/flux/cluster}\n  staging: {path: kubernetes/staging/flux/cluster}\n"
    root = write_tree(tmp_path / "repo", files)
    with render_repository(root, "main") as built:
        snapshot = built.render.snapshot
        found = discover_bootstrap(snapshot, snapshot_config(snapshot), built.render)
    assert found.releases == {("cert-manager", "cert-manager"), ("observability", "kube-prometheus-stack")}
    assert [e.source for e in found.entries] == ["bootstrap/helmfile.yaml", "kubernetes/main/bootstrap/helmfile.yaml"]
    assert "main-only" in found.entries[1].description and "staging-only" not in " ".join(descriptions(found))


def test_cluster_template_script(tmp_path: Path) -> None:
    """onedr0p/cluster-template's scripts/bootstrap-apps.sh: CRDs captured from a templated helmfile.d file, the apps synced."""
    script = """
        #!/usr/bin/env bash
        function apply_crds() {
            if crds=$(helmfile --file "${ROOT_DIR}/bootstrap/helmfile.d/00-crds.yaml" template --quiet | yq eval-all --exit-status 'select(.kind == "CustomResourceDefinition")') && [[ -n "${crds}" ]]; then
                echo "${crds}" | kubectl apply --server-side --filename - &>/dev/null
            fi
        }
        function sync_helm_releases() {
            helmfile --file "${ROOT_DIR}/bootstrap/helmfile.d/01-apps.yaml" sync --hide-notes
        }
    """
    found = discover(repo(tmp_path, {
        "bootstrap/helmfile.d/00-crds.yaml": CRDS_HELMFILE,
        "bootstrap/helmfile.d/01-apps.yaml": APPS_HELMFILE,
        "scripts/bootstrap-apps.sh": script,
    }))
    assert found.crd_releases == {("observability", "kube-prometheus-stack")}
    assert ("cert-manager", "cert-manager") in found.releases
    assert all("run by scripts/bootstrap-apps.sh" in e.description for e in found.entries if e.kind in ("release", "crd-release"))


def test_talos_inline_helm_render_is_its_helmrelease(tmp_path: Path) -> None:
    """cilium rendered with `helm template` into Talos inlineManifests: the HelmRelease in git that adopts it is installed."""
    def rendered(kind: str, name: str, namespace: str | None, instance: str, chart: str) -> dict:
        body = obj("apps/v1" if kind == "DaemonSet" else "v1", kind, name, namespace)
        body["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": instance, "helm.sh/chart": chart}
        return body

    patch = {"cluster": {"inlineManifests": [{"name": "cni", "contents": dump(
        rendered("DaemonSet", "cilium", "kube-system", "cilium", "cilium-1.16.5"),
        rendered("ServiceAccount", "cert-manager", "cert-manager", "other-name", "cert-manager-v1.16.2"),
    )}]}}
    files = {"talos/patches/cni.yaml": dump(patch), "infra/releases.yaml": dump(helmrelease("cilium", "kube-system", "cilium"))}
    found = discover(repo(tmp_path, files))
    assert found.releases == {("kube-system", "cilium")}
    assert found.crd_charts == {"cert-manager"}  # no HelmRelease of that name: counted by its chart label
    assert "rendered from the HelmRelease(s) kube-system/cilium in git" in found.entries[0].description


@pytest.mark.parametrize(
    "text",
    [
        "releases: 5\n",
        "releases: [5, null, {name: [1]}, {name: a, namespace: {x: 1}}, {name: b, chart: 7, hooks: 5}]\n",
        "helmDefaults: [1]\nbases: [1, ../../../../etc/passwd, helmfile.yaml]\ntemplates: 5\ndefaultInherit: [x]\nreleases: [{name: a, inherit: 5}]\n",
        "releases:\n  - name: a\n    hooks: [{command: kubectl, args: apply, events: postsync}, {command: kubectl, args: [apply, -f], events: [postsync]}]\n",
        "a: &a [*a]\n",
        "- a\n- b\n",
        "",
    ],
)
def test_odd_helmfiles_never_crash(tmp_path: Path, text: str) -> None:
    root = repo(tmp_path, {"bootstrap/helmfile.yaml": text, "bootstrap/run.sh": "helmfile -f bootstrap/helmfile.yaml sync\n"})
    found = discover(root)
    assert found.crds == frozenset() and found.manifests == ()


def test_crd_only_release_credited_by_api_group(tmp_path: Path) -> None:
    """bjw-s-labs/home-ops: kopiur is a CRD-only bootstrap release whose chart the knowledge base does not
    know; its kinds (kopiur.home-operations.com) exist before Flux. The info line lists them, and the kinds
    are not warned about; a kind no release names stays a warning."""
    crds = """
        helmDefaults:
          args: [--include-crds, --no-hooks]
        releases:
          - name: kopiur
            namespace: system
            chart: oci://ghcr.io/home-operations/charts/kopiur
    """
    root = repo(tmp_path, {
        "bootstrap/helmfile/crds.yaml": crds,
        "apps/cm.yaml": dump(
            obj("v1", "ConfigMap", "c", "default"),
            obj("kopiur.home-operations.com/v1alpha1", "Restore", "paperless", "default", spec={}),
            obj("kopiur.home-operations.com/v1alpha1", "SnapshotPolicy", "paperless", "default", spec={}),
            obj("other.example.com/v1", "Gadget", "g", "default", spec={}),
        ),
    })
    found = discover(root)
    assert found.credited("kopiur.home-operations.com", "Restore") == "bootstrap/helmfile/crds.yaml"
    assert found.credited("other.example.com", "Gadget") is None
    entry = next(e for e in found.entries if e.kind == "crd-release")
    assert "credited by API group (chart not known): Restore.kopiur.home-operations.com, SnapshotPolicy.kopiur.home-operations.com" in entry.description
    report = check_repository(root, "dev")
    unknown = {(f.object.kind, f.severity) for f in report.findings if f.check == "unknown-kind"}
    assert unknown == {("Restore", Severity.INFO), ("SnapshotPolicy", Severity.INFO), ("Gadget", Severity.WARNING)}
    gadget = next(f for f in report.findings if f.check == "unknown-kind" and f.object.kind == "Gadget")
    # The cluster has a bootstrap: the hint offers its declaration.
    assert "declare it under bootstrap: crds: [other.example.com/Gadget]" in gadget.message


def test_names_group() -> None:
    from bot.engine.tiergraph.bootstrap import names_group

    assert names_group("kopiur", "kopiur.home-operations.com")
    assert names_group("litellm-operator", "litellm.home-operations.com")
    assert names_group("external-secrets", "external-secrets.io")
    assert names_group("oci://ghcr.io/x/charts/silence-operator", "silence.example.com")
    assert not names_group("home", "kopiur.home-operations.com")
    assert not names_group("io", "external-secrets.io")


def test_talos_api_access_serves_talos_service_accounts(tmp_path: Path) -> None:
    """mirceanton/home-ops: a Talos patch enables kubernetesTalosAPIAccess; Talos then serves
    serviceaccounts.talos.dev, so the repository's talos.dev ServiceAccounts are no unknown kind."""
    patch = """---
machine:
  features:
    rbac: true
    kubernetesTalosAPIAccess:
      allowedRoles: ["os:admin"]
      enabled: true
"""
    root = repo(tmp_path, {
        "talos/patches/talos-api-access.yaml": patch,
        "apps/cm.yaml": dump(obj("talos.dev/v1alpha1", "ServiceAccount", "etcd-defrag", "default", spec={"roles": ["os:admin"]})),
    })
    found = discover(root)
    assert ("talos.dev", "ServiceAccount") in found.crds
    assert any("Talos API access from Kubernetes (enabled in talos/patches/talos-api-access.yaml)" in d for d in descriptions(found))
    report = check_repository(root, "dev")
    unknown = [f for f in report.findings if f.check == "unknown-kind"]
    assert [f.severity for f in unknown] == [Severity.INFO], [f.message for f in unknown]
    assert "Talos API access" in unknown[0].message
    disabled = repo(tmp_path / "off", {"talos/patches/talos-api-access.yaml": patch.replace("enabled: true", "enabled: false")})
    assert ("talos.dev", "ServiceAccount") not in discover(disabled).crds


def test_talos_api_access_document_in_a_jinja_template(tmp_path: Path) -> None:
    """onedr0p/home-ops and buroa/k8s-gitops: Talos 1.12+'s multi-document config, rendered from
    `talos/controlplane.yaml.j2`, holds a `KubeTalosAPIAccessConfig` document: the talos.dev ServiceAccount
    is Talos's, not assumed from an unrelated dependency's chart."""
    config = """---
version: v1alpha1
machine:
  type: controlplane
  token: {{ ENV.TALOS_TOKEN }}
---
apiVersion: v1alpha1
kind: KubeTalosAPIAccessConfig
allowedRoles:
  - os:admin
allowedKubernetesNamespaces:
  - system-upgrade
"""
    root = repo(tmp_path, {
        "talos/controlplane.yaml.j2": config,
        "apps/sa.yaml": dump(obj("talos.dev/v1alpha1", "ServiceAccount", "tuppr", "system-upgrade", spec={"roles": ["os:admin"]})),
    })
    found = discover(root)
    assert ("talos.dev", "ServiceAccount") in found.crds
    assert any("enabled in talos/controlplane.yaml.j2" in d for d in descriptions(found))
    report = check_repository(root, "dev")
    assert not [f for f in report.findings if f.check == "unknown-kind" and f.severity != Severity.INFO]
    assert any(f.check == "bootstrap" and "Talos API access from Kubernetes (enabled in talos/controlplane.yaml.j2)" in f.message for f in report.findings)
    other_kind = repo(tmp_path / "other", {"talos/controlplane.yaml.j2": config.replace("KubeTalosAPIAccessConfig", "KubeletConfig")})
    assert ("talos.dev", "ServiceAccount") not in discover(other_kind).crds


# -- the bootstrap as the repository describes it (issue 22, part 2) ---------------------------------


def test_declared_manifests_take_effect(tmp_path: Path) -> None:
    """A new user declares what `kubernetes/bootstrap/` applies (a file, two directories) and a namespace: the CRD,
    the Namespace and the Secret they hold exist before Flux, so no unknown kind and no "not in git" source."""
    from tests.fluxrepo import crd

    root = write_tree(tmp_path / "repo", flux_repo(
        {"apps": ks("apps", "./kubernetes/apps", wait=True, post_build={"substituteFrom": [{"kind": "Secret", "name": "cluster-secrets"}]})},
        {
            "kubernetes/apps/kustomization.yaml": kustomization("app.yaml"),
            "kubernetes/apps/app.yaml": dump(obj("v1", "ConfigMap", "web", "media", data={"domain": "${DOMAIN}"}), obj("example.com/v1", "Widget", "w", "tools")),
            "kubernetes/bootstrap/namespaces.yaml": dump(obj("v1", "Namespace", "media")),
            "kubernetes/bootstrap/crds/widgets.yaml": dump(crd("example.com", "Widget", "widgets")),
            "kubernetes/bootstrap/secrets/kustomization.yaml": "namespace: flux-system\nresources: [cluster-secrets.yaml]\n",
            "kubernetes/bootstrap/secrets/cluster-secrets.yaml": dump(obj("v1", "Secret", "cluster-secrets", stringData={"DOMAIN": "example.com"})),
            ".fluxwarden.yaml": "bootstrap:\n  manifests: [kubernetes/bootstrap/namespaces.yaml, kubernetes/bootstrap/crds, kubernetes/bootstrap/secrets]\n  namespaces: [tools]\n",
        },
    ))
    found = discover(root)
    assert ("example.com", "Widget") in found.crds
    assert {ns for ns, _ in found.namespaces} == {"media", "tools"}
    assert ("Secret", "flux-system", "cluster-secrets") in found.objects
    report = check_repository(root, "dev")
    assert [f for f in report.findings if f.severity is not Severity.INFO] == []
    unknown = next(f for f in report.findings if f.check == "unknown-kind")
    assert unknown.message.startswith("fine on a cold start only because of the bootstrap: 3 paths declared applied before Flux")
    assert not [f for f in report.findings if f.check == "substitution-source-external"]


JUSTFILE = '''set quiet
[doc("Bootstrap: helmfile sync the apps, then Flux takes over")]
[group('bootstrap')]
default: namespaces
    echo "next: helmfile --file kubernetes/bootstrap/helmfile.yaml sync"
    gum log --level info "helmfile --file kubernetes/bootstrap/helmfile.yaml sync"
    # helmfile --file kubernetes/bootstrap/helmfile.yaml sync

[private]
namespaces:
    kubectl create namespace media --dry-run=client -o yaml | kubectl apply --server-side --filename -
'''


def test_script_namespaces_and_text_that_is_not_a_command(tmp_path: Path) -> None:
    """bjw-s-shaped `kubernetes/bootstrap/mod.just`: `kubectl create namespace` makes a namespace Flux also
    manages exist before Flux; a helmfile named only in a `[doc(…)]`, an echo, a log line or a comment is not run."""
    root = write_tree(tmp_path / "repo", flux_repo(
        {"infra": ks("infra", "./kubernetes/infra", wait=True), "apps": ks("apps", "./kubernetes/apps")},
        {
            "kubernetes/infra/kustomization.yaml": kustomization("ns.yaml"),
            "kubernetes/infra/ns.yaml": dump(obj("v1", "Namespace", "media")),
            "kubernetes/apps/kustomization.yaml": kustomization("app.yaml"),
            "kubernetes/apps/app.yaml": dump(obj("v1", "ConfigMap", "web", "media")),
            "kubernetes/bootstrap/mod.just": JUSTFILE,
            "kubernetes/bootstrap/helmfile.yaml": "releases:\n  - name: cert-manager\n    namespace: cert-manager\n    chart: oci://quay.io/jetstack/charts/cert-manager\n",
        },
    ))
    found = discover(root)
    assert found.namespaces == {("media", "kubernetes/bootstrap/mod.just")}
    text = " ".join(descriptions(found))
    assert "1 namespace created by kubernetes/bootstrap/mod.just before Flux: media" in text
    assert "run by kubernetes/bootstrap/mod.just" not in text and "run by no script found" in text
    report = check_repository(root, "dev")
    provider = next(f for f in report.findings if f.check == "missing-provider")
    assert provider.severity is Severity.INFO and "because of the bootstrap: 1 namespace created by kubernetes/bootstrap/mod.just" in provider.message


TALCONFIG = """---
clusterName: home
cniConfig: { name: none }
patches:
  - "@./patches/disable-kube-proxy.yaml"
controlPlane:
  patches:
    - |-
      cluster:
        extraManifests:
          - https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.2.1/experimental-install.yaml
          - https://example.com/other.yaml
"""


def test_talos_extra_manifest_bundles_and_a_disabled_cni(tmp_path: Path) -> None:
    """mirceanton-shaped talconfig: gateway-api CRDs from extraManifests exist; `cniConfig: {name: none}` means
    cilium (its HelmRelease in git) was installed before Flux, whose pods need a pod network."""
    root = repo(tmp_path, {
        "talos/talconfig.yaml": TALCONFIG,
        "talos/patches/controlplane.yaml": dump({"cluster": {"extraManifests": ["https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.2.1/standard-install.yaml"]}}),
        "infra/kustomization.yaml": kustomization("releases.yaml", "cilium.yaml"),
        "infra/cilium.yaml": dump(helmrelease("cilium", "kube-system", "cilium")),
    })
    found = discover(root)
    assert ("gateway.networking.k8s.io", "HTTPRoute") in found.crds
    assert ("kube-system", "cilium") in found.releases
    text = " ".join(descriptions(found))
    assert "CRD bundles in Talos extraManifests of talos/patches/controlplane.yaml exist before Flux: standard-install.yaml" in text
    assert "the built-in CNI is disabled in talos/talconfig.yaml: the CNI (kube-system/cilium) was installed before Flux" in text
    k3s = repo(tmp_path / "k3s", {
        "ansible/inventory/group_vars/k3s.yml": "k3s_server_config:\n  flannel-backend: none\n  disable-network-policy: true\n",
        "infra/kustomization.yaml": kustomization("releases.yaml", "cilium.yaml"),
        "infra/cilium.yaml": dump(helmrelease("cilium", "kube-system", "cilium")),
    })
    assert ("kube-system", "cilium") in discover(k3s).releases
    kept = repo(tmp_path / "kept", {"infra/kustomization.yaml": kustomization("releases.yaml", "cilium.yaml"), "infra/cilium.yaml": dump(helmrelease("cilium", "kube-system", "cilium"))})
    assert ("kube-system", "cilium") not in discover(kept).releases  # nothing says the built-in CNI is off


def test_a_talos_custom_cni_was_installed_before_flux(tmp_path: Path) -> None:
    """xunholy/k8s-gitops: `cluster.network.cni: {name: custom, urls: [cilium.yaml]}`: Talos applies the CNI at
    bootstrap, so cilium's HelmRelease in git was installed before Flux (its operator's CRDs exist)."""
    custom = "cluster:\n  network:\n    cni:\n      name: custom\n      urls:\n        - https://example.org/cilium.yaml\n"
    files = {
        "infra/kustomization.yaml": kustomization("releases.yaml", "cilium.yaml"),
        "infra/cilium.yaml": dump(helmrelease("cilium", "kube-system", "cilium")),
    }
    assert ("kube-system", "cilium") in discover(repo(tmp_path / "custom", {**files, "talos/controlplane.yaml": custom})).releases
    flannel = custom.replace("name: custom", "name: flannel")
    assert ("kube-system", "cilium") not in discover(repo(tmp_path / "flannel", {**files, "talos/controlplane.yaml": flannel})).releases


def test_a_talos_prometheus_operator_bundle_serves_kube_prometheus_stack_kinds(tmp_path: Path) -> None:
    """xunholy/k8s-gitops: Talos extraManifests install prometheus-operator's stripped-down-crds.yaml, and
    kube-prometheus-stack (whose crds subchart would install them too) is a HelmRelease in another tier. A
    PrometheusRule in a tier that does not depend on it is served from the start: info, not crd-not-ordered."""
    bundle = "https://github.com/prometheus-operator/prometheus-operator/releases/download/v0.91.0/stripped-down-crds.yaml"
    rule = obj("monitoring.coreos.com/v1", "PrometheusRule", "rules", "default", spec={"groups": []})
    files = flux_repo(
        {"infra": ks("infra", "./infra", wait=True), "apps": ks("apps", "./apps")},
        {
            "infra/kustomization.yaml": kustomization("kps.yaml"),
            "infra/kps.yaml": dump(helmrelease("kube-prometheus-stack", "observability", "kube-prometheus-stack")),
            "apps/kustomization.yaml": kustomization("rules.yaml"),
            "apps/rules.yaml": dump(rule),
        },
    )
    bare = check_repository(write_tree(tmp_path / "bare", files), "dev")
    assert any(f.check == "crd-not-ordered" and f.severity is not Severity.INFO for f in bare.findings), [f.message for f in bare.findings]
    talos = {"talos/patches/controlplane.yaml": dump({"cluster": {"extraManifests": [bundle]}})}
    report = check_repository(write_tree(tmp_path / "talos", {**files, **talos}), "dev")
    ordering = [f for f in report.findings if f.check in ("crd-not-ordered", "unknown-kind") and "PrometheusRule" in f.message]
    assert ordering and all(f.severity is Severity.INFO and "bootstrap" in f.message for f in ordering), [(f.severity, f.message) for f in ordering]


# -- a bootstrap the artifact hides (ahgraber/homelab-gitops-k3s) ---------------------------------

# scripts/bootstrap/*.sh name the helmfile in a variable a few lines before they run it.
AHGRABER_CRDS_SCRIPT = """
    #!/usr/bin/env bash
    ROOT_DIR="$(git rev-parse --show-toplevel)"
    function apply_crds() {
        local -r helmfile_file="${ROOT_DIR}/bootstrap/helmfile.d/00-crds.yaml"
        if ! crds=$(helmfile --file "${helmfile_file}" template --quiet | yq eval-all --exit-status 'select(.kind == "CustomResourceDefinition")') || [[ -z "${crds}" ]]; then
            log error "Failed to render CRDs from Helmfile" "file" "${helmfile_file}"
        fi
        echo "${crds}" | kubectl apply --server-side --filename - &>/dev/null
    }
    apply_crds
"""
AHGRABER_SYNC_SCRIPT = """
    #!/usr/bin/env bash
    function sync_helm_releases() {
      local -r helmfile_file="${ROOT_DIR}/bootstrap/helmfile.d/01-apps.yaml"
      if ! helmfile --file "${helmfile_file}" sync --hide-notes; then
        log error "Failed to sync helm releases"
      fi
    }
    sync_helm_releases
"""
AHGRABER_CRDS = """
    helmDefaults:
      args: [--include-crds, --no-hooks]
    releases:
      - name: kube-prometheus-stack
        namespace: observability
        chart: oci://ghcr.io/prometheus-community/charts/kube-prometheus-stack
"""
AHGRABER_APPS = """
    releases:
      - name: cert-manager
        namespace: cert-manager
        chart: oci://quay.io/jetstack/charts/cert-manager
"""
# An `apps` tier that uses cert-manager's and kube-prometheus-stack's kinds without waiting for `infra`,
# which installs both charts (cert-manager's CRDs with `crds.enabled`): a bare cluster orders them too late.
CERT_MANAGER_WITH_CRDS = helmrelease("cert-manager", "cert-manager", "cert-manager")
CERT_MANAGER_WITH_CRDS["spec"]["values"] = {"crds": {"enabled": True}}
AHGRABER_INFRA = dump(CERT_MANAGER_WITH_CRDS, helmrelease("kube-prometheus-stack", "observability", "kube-prometheus-stack"))
UNORDERED_APPS = dump(
    obj("cert-manager.io/v1", "ClusterIssuer", "letsencrypt", spec={}),
    obj("monitoring.coreos.com/v1", "ServiceMonitor", "app", "default", spec={}),
)


def ahgraber_files(bootstrap: dict[str, str] | None = None) -> dict[str, str]:
    files = {
        ".sourceignore": "bootstrap/\n.*\n",
        "scripts/bootstrap/apply_crds.sh": AHGRABER_CRDS_SCRIPT,
        "scripts/bootstrap/sync_hrs.sh": AHGRABER_SYNC_SCRIPT,
        **(bootstrap if bootstrap is not None else {
            "bootstrap/helmfile.d/00-crds.yaml": AHGRABER_CRDS,
            "bootstrap/helmfile.d/01-apps.yaml": AHGRABER_APPS,
        }),
    }
    return flux_repo(
        {"infra": ks("infra", "./infra"), "apps": ks("apps", "./apps")},
        {
            "infra/kustomization.yaml": kustomization("releases.yaml"),
            "infra/releases.yaml": AHGRABER_INFRA,
            "apps/kustomization.yaml": kustomization("objects.yaml"),
            "apps/objects.yaml": UNORDERED_APPS,
            **files,
        },
    )


def unordered(report) -> dict[str, Severity]:  # noqa: ANN001
    return {f.object.kind: f.severity for f in report.findings if f.check == "crd-not-ordered" and f.object is not None}


def test_a_sourceignored_bootstrap_is_read_from_the_repository(tmp_path: Path) -> None:
    """ahgraber/homelab-gitops-k3s: `.sourceignore` hides bootstrap/ from Flux's artifact, but the scripts run
    its helmfiles from the checkout before Flux: the CRD-only and the synced releases are credited."""
    root = write_tree(tmp_path / "repo", ahgraber_files())
    found = discover(root)
    assert found.crd_releases == {("observability", "kube-prometheus-stack")}
    assert ("cert-manager", "cert-manager") in found.releases
    sources = {e.source: e.description for e in found.entries}
    assert "run by scripts/bootstrap/apply_crds.sh" in sources["bootstrap/helmfile.d/00-crds.yaml"]
    assert "run by scripts/bootstrap/sync_hrs.sh" in sources["bootstrap/helmfile.d/01-apps.yaml"]
    report = check_repository(root, "dev")
    assert unordered(report) == {"ClusterIssuer": Severity.INFO, "ServiceMonitor": Severity.INFO}
    bare = check_repository(root, "dev", CheckOptions(bootstrap=False))
    assert unordered(bare) == {"ClusterIssuer": Severity.WARNING, "ServiceMonitor": Severity.WARNING}
    # Flux's render still honours .sourceignore: nothing of bootstrap/ is an input of a tier.
    with render_repository(root, "dev") as built:
        assert not any(i.startswith("bootstrap/") for t in built.render.tiers.values() for i in t.inputs)
        assert built.render.snapshot.read_text("bootstrap/helmfile.d/01-apps.yaml") is None


def test_a_bootstrap_outside_the_repository_is_never_read(tmp_path: Path) -> None:
    """The same bootstrap/ reached through a symlink out of the repository: refused, nothing credited."""
    outside = write_tree(tmp_path / "outside", {"helmfile.d/00-crds.yaml": AHGRABER_CRDS, "helmfile.d/01-apps.yaml": AHGRABER_APPS})
    root = write_tree(tmp_path / "repo", ahgraber_files({}))
    (root / "bootstrap").symlink_to(outside, target_is_directory=True)
    found = discover(root)
    assert not found.crd_releases and ("cert-manager", "cert-manager") not in found.releases
    assert not any(e.source.startswith("bootstrap/") for e in found.entries)
    report = check_repository(root, "dev")
    assert unordered(report) == {"ClusterIssuer": Severity.WARNING, "ServiceMonitor": Severity.WARNING}


@pytest.mark.parametrize(
    "assignment, resolved",
    [
        ('helmfile_file="bootstrap/apps.yaml"', True),
        ("readonly helmfile_file='bootstrap/apps.yaml'", True),
        ("export HELMFILE=bootstrap/apps.yaml\nhelmfile_file=$HELMFILE", True),
        ('helmfile_file="$(find bootstrap -name apps.yaml)"', False),  # a command's output: not read
        ('helmfile_file="bootstrap/apps.yaml"\nhelmfile_file="$(pick)"', False),  # reassigned: the last one counts
        ("", False),
    ],
)
def test_helmfile_named_by_a_shell_variable(tmp_path: Path, assignment: str, resolved: bool) -> None:
    script = f"#!/usr/bin/env bash\n{assignment}\nhelmfile --file \"${{helmfile_file}}\" sync\n"
    # A helmfile under another name than helmfile*.yaml, outside a helmfile.d: only the script can name it.
    found = discover(repo(tmp_path, {"bootstrap/apps.yaml": AHGRABER_APPS, "run.sh": script}))
    assert (("cert-manager", "cert-manager") in found.releases) is resolved


def test_editing_a_sourceignored_helmfile_changes_a_cached_commit_verdict(tmp_path: Path) -> None:
    """The findings of a commit are cached by its tree id, which covers the files `.sourceignore` hides:
    a change to the hidden bootstrap is a new verdict, and the old commit still gets its own."""
    import git  # GitPython: the commits a review reads

    from bot.pipeline.check import check_session
    from bot.pipeline.session import open_run

    root = write_tree(tmp_path / "repo", ahgraber_files())
    repo = git.Repo.init(root)
    repo.git.add(A=True)
    first = repo.index.commit("bootstrap syncs cert-manager").hexsha
    (root / "bootstrap/helmfile.d/01-apps.yaml").write_text("releases: []\n")
    repo.git.add(A=True)
    second = repo.index.commit("bootstrap syncs nothing").hexsha
    options = CheckOptions(cache_dir=tmp_path / "cache")

    def verdict(rev: str) -> dict[str, Severity]:
        with open_run(options) as run:
            _, snapshot = run.commit(root, rev, name="side")
            assert snapshot.tree is not None  # the lazy kind, whose findings are cached
            return unordered(check_session(run.session(snapshot), "dev"))

    assert verdict(first) == {"ClusterIssuer": Severity.INFO, "ServiceMonitor": Severity.INFO}
    cached = sorted((tmp_path / "cache").rglob("*"))
    assert verdict(second) == {"ClusterIssuer": Severity.WARNING, "ServiceMonitor": Severity.INFO}  # only the CRD-only file still runs
    entries = sorted((tmp_path / "cache").rglob("*"))
    assert entries != cached  # the second commit's own findings (and listing) were remembered
    assert verdict(first) == {"ClusterIssuer": Severity.INFO, "ServiceMonitor": Severity.INFO}  # its own verdict, not the newer one
    assert sorted((tmp_path / "cache").rglob("*")) == entries  # served from the cache: nothing new was worked out
